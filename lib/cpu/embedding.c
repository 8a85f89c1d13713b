/*
 * embedding.c - CPU embedding: rows gathered from the weight; the backward adds each
 * gradient row into its index's row in index order (deterministic), skipping padding_idx.
 * The front door has checked every index.
 */
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
    void *pd = dlt__data(dw);
    const void *pu = dlt__data(dy);
    if (!beta) memset(pd, 0, dlt__nbytes(dw));
    const int32_t td = dw->dtype, tu = dy->dtype;
    /* columns in parallel: each thread owns whole columns and walks the rows in order */
    const int64_t chunks = (D + 63) / 64;
    DLT_PARALLEL_FOR(c, chunks, 2) {
        const int64_t j0 = c * 64, j1 = j0 + 64 < D ? j0 + 64 : D;
        for (int64_t i = 0; i < n; i++) {
            const int64_t v = idx_at(idx, i);
            if (v == padding_idx || v < 0 || v >= V) continue;
            for (int64_t j = j0; j < j1; j++)
                dlt__st(pd, td, v * D + j, dlt__ld(pd, td, v * D + j) + dlt__ld(pu, tu, i * D + j));
        }
    }
    return DLT_OK;
}
