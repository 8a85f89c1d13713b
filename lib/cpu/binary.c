/*
 * binary.c - CPU kernels of the broadcasting binary ops (lib/ops/binary.c) and of copy_nd
 * (the layout ops): operands are read through their N-D operand maps (lib/kernel/nd.h).
 * Binary math in double, rounded once to y's dtype (CUDA: fp32).
 */
#include <math.h>
#include <string.h>

#include "ops_cpu.h"
#include "parallel.h"

static inline double bin_f(int32_t op, double a, double b, double alpha) {
    switch (op) {
    case DLT_BIN_ADD: return a + alpha * b;
    case DLT_BIN_MUL: return alpha * a * b;
    case DLT_BIN_DIV: return alpha * a / b;
    case DLT_BIN_EQ: return a == b ? 1.0 : 0.0;
    default: return NAN;
    }
}

dlt_status dlt__cpu_binary(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *a, const dlt_nd_operand *oa,
                           const dlt_tensor *b, const dlt_nd_operand *ob, const dlt_nd *s, int32_t op,
                           double alpha) {
    (void)ctx;
    const void *pa = dlt__data(a), *pb = dlt__data(b);
    void *py = dlt__data(y);
    const int32_t ta = a->dtype, tb = b->dtype, ty = y->dtype;
    if (!dlt__is_float(ty)) { /* integers: exact int64 arithmetic (unsigned: wraps, no UB) */
        const int64_t k = (int64_t)alpha;
        DLT_PARALLEL_FOR(i, s->numel, 1 << 15) {
            const uint64_t va = (uint64_t)dlt__ld_i(pa, ta, dlt__nd_offset(s, oa, i));
            const uint64_t vb = (uint64_t)dlt__ld_i(pb, tb, dlt__nd_offset(s, ob, i));
            uint64_t r = op == DLT_BIN_ADD ? va + (uint64_t)k * vb : op == DLT_BIN_MUL ? (uint64_t)k * va * vb : va == vb;
            dlt__st_i(py, ty, i, (int64_t)r);
        }
        return DLT_OK;
    }
    DLT_PARALLEL_FOR(i, s->numel, 1 << 15) {
        const double va = dlt__ld(pa, ta, dlt__nd_offset(s, oa, i));
        const double vb = dlt__ld(pb, tb, dlt__nd_offset(s, ob, i));
        dlt__st(py, ty, i, (float)bin_f(op, va, vb, alpha));
    }
    return DLT_OK;
}

dlt_status dlt__cpu_copy_nd(dlt_ctx *ctx, dlt_tensor *dst, const dlt_nd_operand *od, const dlt_tensor *src,
                            const dlt_nd_operand *os, const dlt_nd *s) {
    (void)ctx;
    const size_t es = dlt__dtype_size(src->dtype);
    const char *ps = dlt__data(src);
    char *pd = dlt__data(dst);
    /* rows along the last dimension are contiguous runs when both strides are 1 */
    if (s->ndim > 0 && od->stride[s->ndim - 1] == 1 && os->stride[s->ndim - 1] == 1) {
        const int64_t row = s->shape[s->ndim - 1], nrows = s->numel / row;
        DLT_PARALLEL_FOR(r, nrows, dlt__par_grain(row)) {
            const int64_t i = r * row;
            memcpy(pd + (size_t)dlt__nd_offset(s, od, i) * es, ps + (size_t)dlt__nd_offset(s, os, i) * es,
                   (size_t)row * es);
        }
        return DLT_OK;
    }
    DLT_PARALLEL_FOR(i, s->numel, 1 << 15) {
        memcpy(pd + (size_t)dlt__nd_offset(s, od, i) * es, ps + (size_t)dlt__nd_offset(s, os, i) * es, es);
    }
    return DLT_OK;
}
