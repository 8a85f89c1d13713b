/*
 * softmax.c - CPU softmax / log_softmax over the middle dimension of [outer, n, inner], in
 * double with the maximum subtracted, and their backward from the output.
 */
#include <math.h>

#include "ops_cpu.h"
#include "parallel.h"

dlt_status dlt__cpu_softmax_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, int64_t outer, int64_t n,
                                int64_t inner, int32_t log_) {
    (void)ctx;
    const void *px = dlt__data(x);
    void *py = dlt__data(y);
    const int32_t tx = x->dtype, ty = y->dtype;
    DLT_PARALLEL_FOR(r, outer * inner, dlt__par_grain(n)) {
        const int64_t base = (r / inner) * n * inner + r % inner;
        double m = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            const double v = dlt__ld(px, tx, base + j * inner);
            if (v > m || v != v) m = v;
        }
        double s = 0.0;
        for (int64_t j = 0; j < n; j++) s += exp((double)dlt__ld(px, tx, base + j * inner) - m);
        const double ls = log(s);
        for (int64_t j = 0; j < n; j++) {
            const double z = (double)dlt__ld(px, tx, base + j * inner) - m;
            dlt__st(py, ty, base + j * inner, (float)(log_ ? z - ls : exp(z) / s));
        }
    }
    return DLT_OK;
}

dlt_status dlt__cpu_softmax_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y,
                                int64_t outer, int64_t n, int64_t inner, int32_t log_) {
    (void)ctx;
    const void *pu = dlt__data(dy), *py = dlt__data(y);
    void *pd = dlt__data(dx);
    const int32_t tu = dy->dtype, ty = y->dtype, td = dx->dtype;
    DLT_PARALLEL_FOR(r, outer * inner, dlt__par_grain(n)) {
        const int64_t base = (r / inner) * n * inner + r % inner;
        double s = 0.0;
        for (int64_t j = 0; j < n; j++) {
            const int64_t i = base + j * inner;
            s += log_ ? (double)dlt__ld(pu, tu, i) : (double)dlt__ld(pu, tu, i) * dlt__ld(py, ty, i);
        }
        for (int64_t j = 0; j < n; j++) {
            const int64_t i = base + j * inner;
            const double u = dlt__ld(pu, tu, i), yv = dlt__ld(py, ty, i);
            dlt__st(pd, td, i, (float)(log_ ? u - exp(yv) * s : yv * (u - s)));
        }
    }
    return DLT_OK;
}
