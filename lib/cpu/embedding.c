/*
 * embedding.c - CPU embedding: rows gathered from the weight; the backward sums each
 * row's gradient rows in index order in double and rounds once (deterministic, the CUDA
 * path's arithmetic), skipping padding_idx.
 * The front door has checked every index.
 */
#include <stdlib.h>
#include <string.h>

#include "ops_cpu.h"
#include "parallel.h"

static inline int64_t idx_at(const dlt_tensor *t, int64_t i) {
    const void *p = dlt__data(t);
    return t->dtype == DLT_I64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

dlt_status dlt__cpu_embedding_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *w, const dlt_tensor *idx) {
    (void)ctx;
    const int64_t D = w->shape[1];
    const size_t row = (size_t)D * dlt__dtype_size(w->dtype);
    const char *pw = dlt__data(w);
    char *py = dlt__data(y);
    DLT_PARALLEL_FOR(i, idx->numel, 1024) {
        memcpy(py + (size_t)i * row, pw + (size_t)idx_at(idx, i) * row, row);
    }
    return DLT_OK;
}

dlt_status dlt__cpu_embedding_bwd(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *dy, const dlt_tensor *idx,
                                  int64_t padding_idx, int32_t beta) {
    (void)ctx;
    const int64_t V = dw->shape[0], D = dw->shape[1], n = idx->numel;
    /* positions grouped by row, index order within a row (a stable counting sort, as the
     * CUDA path's radix sort): each gradient element is then one sum in double rounded once
     * to the weight's dtype, so f16/bf16 results do not depend on how many rows repeat */
    int64_t *start = calloc((size_t)V + 2, sizeof *start), *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!start || !order) {
        free(start);
        free(order);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_backward(embedding)", "cannot allocate %lld index positions",
                        (long long)n);
    }
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = idx_at(idx, i);
        if (v != padding_idx && v >= 0 && v < V) start[v + 2]++;
    }
    for (int64_t v = 0; v < V; v++) start[v + 2] += start[v + 1];
    for (int64_t i = 0; i < n; i++) { /* start[v + 1] is row v's cursor; it ends at row v's end */
        const int64_t v = idx_at(idx, i);
        if (v != padding_idx && v >= 0 && v < V) order[start[v + 1]++] = i;
    }
    void *pd = dlt__data(dw);
    const void *pu = dlt__data(dy);
    if (!beta) memset(pd, 0, dlt__nbytes(dw));
    const int32_t td = dw->dtype, tu = dy->dtype;
    DLT_PARALLEL_FOR(v, V, dlt__par_grain(n / (V ? V : 1) * D + D)) {
        const int64_t r0 = start[v], r1 = start[v + 1];
        if (r0 == r1) continue;
        for (int64_t j = 0; j < D; j++) {
            double acc = dlt__ld(pd, td, v * D + j);
            for (int64_t r = r0; r < r1; r++) acc += dlt__ld(pu, tu, order[r] * D + j);
            dlt__st(pd, td, v * D + j, acc);
        }
    }
    free(start);
    free(order);
    return DLT_OK;
}
