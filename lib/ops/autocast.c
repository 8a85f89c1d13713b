/*
 * autocast.c - the whole autocast policy (docs/numerics.md states it), next to the op front
 * doors that apply it:
 *  - regions: a per-context stack of dtypes (dlt_autocast_begin/end); the front doors ask
 *    dlt__autocast_dtype();
 *  - the low-precision list (conv2d, linear, matmul, attention): their operands come from
 *    dlt__autocast_operand, fp32 parameters through a cached copy;
 *  - the fp32 list (softmax, layer_norm, reductions, losses...): dlt__autocast_fp32 casts a
 *    low-precision input up; every other op runs in its input's dtype.
 */
#include "ops_internal.h"

dlt_status dlt_autocast_begin(dlt_ctx *ctx, int32_t dtype) {
    static const char *F = "dlt_autocast_begin";
    DLT_NULL_CHECK(ctx, F);
    if (dtype != DLT_F16 && dtype != DLT_BF16 && dtype != DLT_F32)
        return dlt__err(DLT_ERR_DTYPE, F, "autocast dtype must be f16, bf16 or f32 (off), got %s",
                        dlt_dtype_name(dtype));
    if (ctx->autocast_depth >= DLT_AUTOCAST_MAX_DEPTH)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "autocast regions nest at most %d deep",
                        DLT_AUTOCAST_MAX_DEPTH);
    ctx->autocast_stack[ctx->autocast_depth++] = dtype == DLT_F32 ? -1 : dtype;
    return DLT_OK;
}

dlt_status dlt_autocast_end(dlt_ctx *ctx) {
    static const char *F = "dlt_autocast_end";
    DLT_NULL_CHECK(ctx, F);
    if (ctx->autocast_depth == 0)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "no autocast region is open");
    ctx->autocast_depth--;
    return DLT_OK;
}

int32_t dlt__autocast_dtype(const dlt_ctx *ctx) {
    return ctx->autocast_depth > 0 ? ctx->autocast_stack[ctx->autocast_depth - 1] : -1;
}

int32_t dlt_autocast_dtype(const dlt_ctx *ctx) { return ctx ? dlt__autocast_dtype(ctx) : -1; }

/* The cached low-precision copy is shared by every forward, eager or captured, until the
 * parameter changes; each use gets a fresh alias that carries this forward's tape node, so
 * the cache itself never points into a graph (no reference cycle through the parameter). */
dlt_status dlt__autocast_operand(dlt_tensor *x, int32_t dtype, const char *func, dlt_tensor **out) {
    if (dtype < 0 || x->dtype == dtype || !dlt__is_float(x->dtype)) {
        *out = dlt_tensor_retain(x);
        return DLT_OK;
    }
    /* PyTorch caches casts of fp32 leaves that require grad (parameters) only: other tensors
     * (activations, loader buffers rewritten in place) are cast at every use. */
    if (!x->requires_grad || x->dtype != DLT_F32 || (dtype != DLT_F16 && dtype != DLT_BF16))
        return dlt__op_cast(x, dtype, func, out);
    int k = dtype == DLT_F16 ? 0 : 1;
    dlt_ctx *ctx = x->ctx;
    dlt_tensor *lp = x->lp_copy[k];
    if (lp && (lp->format != x->format || !dlt__same_shape(lp, x))) {
        dlt_tensor_release(lp);
        lp = x->lp_copy[k] = NULL;
    }
    if (!lp) {
        DLT_CHECK(dlt__tensor_new_like(x, dtype, func, &lp));
        x->lp_copy[k] = lp;
        x->lp_version[k] = x->version + 1; /* force the copy below */
    }
    /* A current copy stays current across a graph's replays when every write to the
     * parameter refreshes it: the optimizers write it with the update (a captured step
     * included), host-side writes move the version, and dlt_graph_run refreshes the copies
     * its capture noted before a replay that finds one stale (a graph captured before the
     * optimizer's steps, or before a checkpoint load). So a capture records no cast for it.
     * A parameter written by some graph's replays (graph_written) is cast at every use. */
    if (x->lp_version[k] != x->version || x->graph_written) {
        dlt_status st = x->numel ? ctx->be->convert(ctx, lp, x) : DLT_OK;
        if (st != DLT_OK) return dlt__err_wrap(st, func);
        /* a captured cast runs only when the graph does: the copy stays marked stale */
        if (!ctx->capturing) x->lp_version[k] = x->version;
    } else if (ctx->capturing) {
        DLT_CHECK(dlt__capture_note_lp(ctx, x, lp, k, func));
    }
    dlt_tensor *alias = NULL;
    dlt_node *node = NULL;
    DLT_CHECK(dlt__alias(lp, func, &alias));
    dlt_status st = dlt__record(ctx, "autocast", dlt__convert_backward, &x, 1, &alias, 1, &node);
    if (st == DLT_OK && node) {
        convert_attr at = {x->dtype, x->format};
        DLT_SET_ATTR(node, convert_attr, at);
        node->hands_on = 1; /* dlt__convert_backward */
    }
    if (st != DLT_OK) {
        dlt_tensor_release(alias);
        return dlt__err_wrap(st, func);
    }
    *out = alias;
    return DLT_OK;
}

dlt_status dlt__autocast_fp32(dlt_tensor *x, const char *func, dlt_tensor **out) {
    if (dlt__autocast_dtype(x->ctx) >= 0 && dlt__is_float(x->dtype) && x->dtype != DLT_F32)
        return dlt__op_cast(x, DLT_F32, func, out);
    *out = dlt_tensor_retain(x);
    return DLT_OK;
}
