/*
 * pointwise.c - CPU kernels of the unary ops (lib/ops/pointwise.c): y = f(x) and
 * dx = u * f'(x) elementwise over the flat memory of same-layout tensors, in double
 * (lib/kernel/unary.h), rounded once to the dtype.
 */
#include "../kernel/unary.h"
#include "ops_cpu.h"
#include "parallel.h"

dlt_status dlt__cpu_unary(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, int32_t op, double alpha) {
    (void)ctx;
    const void *px = dlt__data(x);
    void *py = dlt__data(y);
    const int32_t dx = x->dtype, dy = y->dtype;
    if (!dlt__is_float(dx)) { /* neg, abs, add a whole number: exact (the front door's rule) */
        const uint64_t k = (uint64_t)(int64_t)alpha;
        DLT_PARALLEL_FOR(i, x->numel, 1 << 15) {
            const int64_t v = dlt__ld_i(px, dx, i);
            const uint64_t u = (uint64_t)v;
            dlt__st_i(py, dy, i, (int64_t)(op == DLT_UN_NEG ? 0 - u : op == DLT_UN_ABS ? (v < 0 ? 0 - u : u) : u + k));
        }
        return DLT_OK;
    }
    DLT_PARALLEL_FOR(i, x->numel, 1 << 15) {
        dlt__st(py, dy, i, (float)dlt__un_f(op, (double)dlt__ld(px, dx, i), alpha));
    }
    return DLT_OK;
}

dlt_status dlt__cpu_unary_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *x,
                              const dlt_tensor *y, int32_t op, double alpha) {
    (void)ctx;
    const void *pu = dlt__data(dy), *px = x ? dlt__data(x) : NULL, *pyv = y ? dlt__data(y) : NULL;
    void *pd = dlt__data(dx);
    const int32_t tu = dy->dtype, tx = x ? x->dtype : 0, ty = y ? y->dtype : 0, td = dx->dtype;
    DLT_PARALLEL_FOR(i, dx->numel, 1 << 15) {
        const double u = dlt__ld(pu, tu, i);
        const double xv = px ? (double)dlt__ld(px, tx, i) : 0.0;
        const double yv = pyv ? (double)dlt__ld(pyv, ty, i) : 0.0;
        dlt__st(pd, td, i, (float)dlt__un_df(op, u, xv, yv, alpha));
    }
    return DLT_OK;
}
