/*
 * embedding.c - front door of embedding (PyTorch's F.embedding(idx, weight, padding_idx)).
 *
 * weight [V, D] (any float dtype), idx int32/int64 of any shape; y [*idx.shape, D] in the
 * weight's dtype (embedding is not on autocast's lists) = weight rows at idx. padding_idx
 * (DLT_NO_PADDING_IDX for none; negative counts from V) only changes the backward: that row
 * gets no gradient. An index outside [0, V) is refused on the CPU before anything is
 * written; CUDA cannot check without a device sync, so it writes NaN rows for such
 * indices (the loss becomes NaN) and skips them in the backward.
 *
 * Backward: dweight[v] += sum of u rows whose index is v (repeated indices accumulate),
 * straight into the weight's gradient buffer when it can be. Deterministic on both: the CPU
 * adds in index order; CUDA sorts the indices (stable) and sums each run in order, in every
 * mode (no atomics).
 */
#include "ops_internal.h"

typedef struct embedding_attr {
    int64_t padding_idx; /* normalised, or -1 */
} embedding_attr;

static dlt_status embedding_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(embedding)";
    dlt_ctx *ctx = nd->ctx;
    const embedding_attr *at = DLT_NODE_ATTR(nd, embedding_attr);
    dlt_tensor *w = nd->saved[0], *idx = nd->saved[1], *u = gout[0];
    if (!gin[0].needed) return DLT_OK;
    dlt_tensor *uc = NULL, *dw = NULL;
    dlt_status st = DLT_OK;
    /* the kernel reads u as [n, D] rows */
    const int64_t rows[2] = {idx->numel, w->shape[1]};
    DLT_CHECK(dlt__tensor_view(u, rows, 2, DLT_FORMAT_CONTIGUOUS, F, &uc));
    if (dlt__slot_direct(&gin[0], w)) {
        st = idx->numel && w->numel ? ctx->be->embedding_bwd(ctx, gin[0].dst, uc, idx, at->padding_idx, gin[0].beta)
                                    : dlt__grad_zero(ctx, gin[0].dst, gin[0].beta);
        if (st == DLT_OK) gin[0].written = 1;
        dlt_tensor_release(uc);
        return st;
    }
    st = dlt__tensor_new_like(w, w->dtype, F, &dw);
    if (st == DLT_OK)
        st = idx->numel && w->numel ? ctx->be->embedding_bwd(ctx, dw, uc, idx, at->padding_idx, 0)
                                    : dlt__grad_zero(ctx, dw, 0);
    dlt_tensor_release(uc);
    if (st != DLT_OK) {
        dlt_tensor_release(dw);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dw);
}

dlt_status dlt_embedding(dlt_tensor *weight, dlt_tensor *idx, int64_t padding_idx, dlt_tensor **out) {
    static const char *F = "dlt_embedding";
    DLT_CHECK(dlt__check_tensor(weight, F, "weight"));
    DLT_CHECK(dlt__check_tensor(idx, F, "idx"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_same_ctx(weight, idx, F, "weight", "idx"));
    DLT_CHECK(dlt__check_float(weight, F, "weight"));
    DLT_CHECK(dlt__check_ndim(weight, 2, F, "weight"));
    if (idx->dtype != DLT_I32 && idx->dtype != DLT_I64)
        return dlt__err(DLT_ERR_DTYPE, F, "idx must be i32 or i64, got %s", dlt_dtype_name(idx->dtype));
    if (idx->ndim >= DLT_MAX_DIMS)
        return dlt__err(DLT_ERR_SHAPE, F, "idx has %d dimensions; the result would need %d (at most %d)",
                        idx->ndim, idx->ndim + 1, DLT_MAX_DIMS);
    const int64_t V = weight->shape[0], D = weight->shape[1];
    embedding_attr at = {.padding_idx = -1};
    if (padding_idx != DLT_NO_PADDING_IDX) {
        if (padding_idx < -V || padding_idx >= V)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "padding_idx %lld is outside [%lld, %lld)",
                            (long long)padding_idx, (long long)-V, (long long)V);
        at.padding_idx = padding_idx < 0 ? padding_idx + V : padding_idx;
    }
    dlt_ctx *ctx = weight->ctx;
    DLT_NEED_KERNEL(ctx, embedding_fwd, F);
    if (ctx->device_type == DLT_DEVICE_CPU && idx->numel) { /* host memory: check every index now */
        const void *p = dlt__data(idx);
        for (int64_t i = 0; i < idx->numel; i++) {
            const int64_t v = idx->dtype == DLT_I64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
            if (v < 0 || v >= V)
                return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "index %lld at position %lld is outside [0, %lld)",
                                (long long)v, (long long)i, (long long)V);
        }
    }
    int64_t shape[DLT_MAX_DIMS];
    for (int32_t d = 0; d < idx->ndim; d++) shape[d] = idx->shape[d];
    shape[idx->ndim] = D;
    dlt_tensor *ic = NULL, *y = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK(dlt__contiguous_input(idx, F, &ic));
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, weight->dtype, shape, idx->ndim + 1, DLT_FORMAT_CONTIGUOUS, F, &y),
                   done);
    if (y->numel) {
        if (V == 0) { /* no rows to read: only possible with no indices, handled above */
            st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "weight has no rows");
            goto done;
        }
        DLT_CHECK_GOTO(st, ctx->be->embedding_fwd(ctx, y, weight, ic), done);
    }
    DLT_CHECK_GOTO(st, dlt__record(ctx, "embedding", embedding_backward, &weight, 1, &y, 1, &node), done);
    if (node) {
        DLT_SET_ATTR(node, embedding_attr, at);
        dlt__save(node, weight); /* shape and dtype only */
        dlt__save(node, ic);
    }
done:
    dlt_tensor_release(ic);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}
