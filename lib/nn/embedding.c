/*
 * embedding.c - the Embedding module kind (nn.Embedding): "weight" [num_embeddings,
 * embedding_dim], initialised N(0, 1) as PyTorch does (the padding row zeroed), run by
 * dlt_embedding (lib/ops/embedding.c).
 */
#include <stdio.h>

#include "nn_internal.h"

typedef struct embedding_attrs {
    int64_t padding_idx; /* normalised, or DLT_NO_PADDING_IDX */
} embedding_attrs;

static dlt_status embedding_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out,
                                    int32_t n_out) {
    (void)n_in, (void)n_out;
    return dlt_embedding(m->state[0].t, in[0], DLT__IMPL(m, embedding_attrs)->padding_idx, &out[0]);
}

static int embedding_describe(const dlt_module *m, char *buf, size_t n) {
    const int64_t *ws = m->state[0].t->shape, pad = DLT__IMPL(m, embedding_attrs)->padding_idx;
    if (pad == DLT_NO_PADDING_IDX) return snprintf(buf, n, "%lld, %lld", (long long)ws[0], (long long)ws[1]);
    return snprintf(buf, n, "%lld, %lld, padding_idx=%lld", (long long)ws[0], (long long)ws[1], (long long)pad);
}

static const dlt__module_kind embedding_kind = {
    .name = "embedding",
    .impl_size = sizeof(embedding_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = embedding_forward,
    .describe = embedding_describe,
};

dlt_status dlt__embedding_new(dlt_ctx *ctx, int64_t num, int64_t dim, int64_t padding_idx, const char *func,
                              dlt_module **out) {
    if (num < 1 || dim < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "num_embeddings %lld and embedding_dim %lld must be >= 1",
                        (long long)num, (long long)dim);
    if (padding_idx != DLT_NO_PADDING_IDX && (padding_idx < -num || padding_idx >= num))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "padding_idx %lld is outside [%lld, %lld)",
                        (long long)padding_idx, (long long)-num, (long long)num);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, &embedding_kind, func, &m));
    const int64_t pad = padding_idx == DLT_NO_PADDING_IDX ? padding_idx : (padding_idx < 0 ? padding_idx + num : padding_idx);
    DLT__IMPL(m, embedding_attrs)->padding_idx = pad;
    const int64_t ws[2] = {num, dim};
    dlt_status st = dlt__module_add_new_state(m, "weight", ws, 2, DLT_F32, DLT__INIT_NORMAL, 1.0, 1, func);
    if (st == DLT_OK && pad != DLT_NO_PADDING_IDX) { /* PyTorch zeroes the padding row */
        /* the row of dim 0 is a view of the weight: filled in place, nothing recorded */
        dlt_tensor *row = NULL;
        int32_t prev = 1;
        st = dlt_grad_set_enabled(ctx, 0, &prev);
        if (st == DLT_OK) st = dlt_narrow(m->state[0].t, 0, pad, 1, &row);
        if (st == DLT_OK) st = dlt_tensor_fill(row, 0.0);
        const dlt_status st2 = dlt_grad_set_enabled(ctx, prev, NULL);
        if (st == DLT_OK) st = st2;
        dlt_tensor_release(row);
    }
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return st;
    }
    *out = m;
    return DLT_OK;
}

dlt_status dlt_embedding_create(dlt_ctx *ctx, int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx,
                                dlt_module **out) {
    static const char *F = "dlt_embedding_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__embedding_new(ctx, num_embeddings, embedding_dim, padding_idx, F, out);
}
