/*
 * reduce.c - CPU kernel of the reductions over chosen dimensions (lib/ops/reduce.c): each
 * output element loops over the reduced index space in row-major order. Sums in double;
 * max and argmax take the first maximum, NaN counting as the maximum (PyTorch).
 */
#include <math.h>

#include "ops_cpu.h"
#include "parallel.h"

dlt_status dlt__cpu_reduce(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_reduce_spec *r,
                           int32_t op, double alpha) {
    (void)ctx;
    const void *px = dlt__data(x);
    void *py = dlt__data(y);
    const int32_t tx = x->dtype, ty = y->dtype;
    const int64_t nr = r->red.numel;
    DLT_PARALLEL_FOR(o, r->kept.numel, dlt__par_grain(nr)) {
        const int64_t base = dlt__nd_offset(&r->kept, &r->kept_x, o);
        if (op == DLT_RED_SUM) {
            double acc = 0.0;
            for (int64_t j = 0; j < nr; j++) acc += dlt__ld(px, tx, base + dlt__nd_offset(&r->red, &r->red_x, j));
            dlt__st(py, ty, o, (float)(acc * alpha));
        } else {
            double best = -INFINITY;
            int64_t bi = 0;
            for (int64_t j = 0; j < nr; j++) {
                const double v = dlt__ld(px, tx, base + dlt__nd_offset(&r->red, &r->red_x, j));
                if (j == 0 || v > best || (v != v && best == best)) {
                    best = v;
                    bi = j;
                }
            }
            if (op == DLT_RED_ARGMAX) ((int64_t *)py)[o] = bi;
            else dlt__st(py, ty, o, (float)best);
        }
    }
    return DLT_OK;
}
