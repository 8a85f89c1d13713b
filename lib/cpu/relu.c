/*
 * relu.c - CPU ReLU. Forward y = max(x, 0) with NaN propagated (x > 0 ? x : (x != x ? x : 0));
 * backward dx = dy unless y <= 0 (PyTorch's threshold_backward on the output: a NaN output passes its gradient).
 * Elementwise in memory order: works for any format as long as all tensors share it.
 */
#include "cpu.h"

dlt_status dlt__cpu_relu_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x) {
    (void)ctx;
    const void *px = dlt__data(x);
    void *py = dlt__data(y);
    for (int64_t i = 0; i < x->numel; i++) {
        float v = dlt__ld(px, x->dtype, i);
        dlt__st(py, y->dtype, i, (v > 0.0f || v != v) ? v : 0.0f);
    }
    return DLT_OK;
}

dlt_status dlt__cpu_relu_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y) {
    (void)ctx;
    const void *pdy = dlt__data(dy), *py = dlt__data(y);
    void *pdx = dlt__data(dx);
    for (int64_t i = 0; i < dx->numel; i++)
        dlt__st(pdx, dx->dtype, i, !(dlt__ld(py, y->dtype, i) <= 0.0f) ? dlt__ld(pdy, dy->dtype, i) : 0.0f);
    return DLT_OK;
}
