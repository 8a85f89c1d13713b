/*
 * clip_grad_norm.c - CPU clip_grad_norm (lib/optim/clip_grad_norm.c states it): the norm
 * of all gradient elements accumulated in double over fixed chunks (summed in chunk
 * order, so the result does not depend on the thread count), rounded to f32; then
 * coef = min((1 / (total + 1e-6)) * max_norm, 1) in f32 (PyTorch's max_norm / tensor is
 * reciprocal times max_norm) and every gradient multiplied by it (or, for the optimizer's
 * fused clipping, coef stored for its step).
 */
#include <math.h>
#include <stdlib.h>

#include "../kernel/optim.h"
#include "ops_cpu.h"
#include "parallel.h"

#define CHUNK 65536

/* a if it is NaN or larger, else b: max that propagates NaN (PyTorch's inf-norm does) */
static double max_nan(double a, double b) { return (a != a || a > b) ? a : b; }

dlt_status dlt__cpu_clip_grad_norm(dlt_ctx *ctx, const dlt_clip_launch *L) {
    (void)ctx;
    int64_t chunks = 0;
    for (int32_t i = 0; i < L->n; i++) chunks += (L->grads[i]->numel + CHUNK - 1) / CHUNK;
    double *part = malloc((size_t)(chunks ? chunks : 1) * sizeof *part);
    int32_t *tens = malloc((size_t)(chunks ? chunks : 1) * sizeof *tens);
    int64_t *start = malloc((size_t)(chunks ? chunks : 1) * sizeof *start);
    if (!part || !tens || !start) {
        free(part);
        free(tens);
        free(start);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_clip_grad_norm", "cannot allocate %lld partial sums",
                        (long long)chunks);
    }
    int64_t c = 0;
    for (int32_t i = 0; i < L->n; i++)
        for (int64_t s = 0; s < L->grads[i]->numel; s += CHUNK) {
            tens[c] = i;
            start[c++] = s;
        }
    const int norm = L->norm;
    int64_t elems = 0;
    for (int32_t i = 0; i < L->n; i++) elems += L->grads[i]->numel;
    DLT_PARALLEL_FOR(k, chunks, elems >= DLT_PARALLEL_MIN_WORK ? 2 : chunks + 1) {
        const dlt_tensor *t = L->grads[tens[k]];
        const float *g = (const float *)dlt__data(t);
        const int64_t e1 = start[k] + CHUNK < t->numel ? start[k] + CHUNK : t->numel;
        double acc = 0.0;
        for (int64_t e = start[k]; e < e1; e++) {
            const double x = (double)g[e];
            if (norm == DLT_CLIP_NORM_L2) acc += x * x;
            else if (norm == DLT_CLIP_NORM_L1) acc += fabs(x);
            else acc = max_nan(fabs(x), acc);
        }
        part[k] = acc;
    }
    double acc = 0.0;
    for (int64_t k = 0; k < chunks; k++)
        acc = norm == DLT_CLIP_NORM_INF ? max_nan(part[k], acc) : acc + part[k];
    free(part);
    free(tens);
    free(start);
    const float total = (float)(norm == DLT_CLIP_NORM_L2 ? sqrt(acc) : acc);
    *(float *)L->total = total;
    if (!L->scale && !L->coef) return DLT_OK;
    float coef = DLT__FMUL(DLT__FDIV(1.0f, DLT__FADD(total, 1e-6f)), (float)L->max_norm);
    if (coef > 1.0f) coef = 1.0f; /* clamp(max=1): NaN stays NaN */
    if (L->coef) *(float *)L->coef = coef; /* the optimizer's fused clipping reads it */
    if (!L->scale) return DLT_OK;
    for (int32_t i = 0; i < L->n; i++) {
        float *g = (float *)dlt__data(L->grads[i]);
        DLT_PARALLEL_FOR(e, L->grads[i]->numel, 1 << 15) g[e] = DLT__FMUL(g[e], coef);
    }
    return DLT_OK;
}
