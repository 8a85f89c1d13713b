/*
 * layer_norm.c - front door of layer_norm over the last dimensions (PyTorch's
 * F.layer_norm(x, normalized_shape, weight, bias, eps)).
 *
 * x [..., *normalized_shape] is viewed as [M, N] with N = prod(normalized_shape):
 *   mean_m = sum_n x / N,  rstd_m = 1 / sqrt(sum_n (x - mean)^2 / N + eps)   (biased variance)
 *   y = (x - mean) * rstd * weight + bias          (weight, bias [normalized_shape] or NULL)
 * Statistics in fp32 (double on the CPU) and saved as f32 [M] for the backward. layer_norm
 * is on autocast's fp32 list: in an autocast region x is cast up and y is f32. Without
 * autocast, y has x's dtype; weight and bias may be of another float dtype (PyTorch allows
 * f32 parameters with a bf16/f16 input on CUDA). dlt_layer_norm_to writes y in a dtype of
 * the caller's choice, the same numbers as dlt_layer_norm then dlt_cast (the f32 result
 * rounded once), without the f32 tensor; its backward takes dy in that dtype.
 *
 * Gradients (xhat = (x - mean) * rstd, g = u * weight):
 *   dx = rstd * (g - mean_n(g) - xhat * mean_n(g * xhat))
 *   dweight = sum_m u * xhat,  dbias = sum_m u   (written straight into the leaves when
 *   their dtype allows, accumulating; dx likewise into the gradient x has so far when the
 *   tape offers it: the residual add of a pre-LN block's backward, inside the kernel)
 */
#include "ops_internal.h"

typedef struct ln_attr {
    int64_t M, N;
    int32_t has_w, has_b;
} ln_attr;

/* dweight and dbias of a LayerNorm backward come from one kernel with one beta: straight into
 * the leaf buffers when both (or the one needed) accept it (*direct), else into fresh tensors.
 * gw/gb: the weight's and bias's slots (NULL where the op has none). */
dlt_status dlt__ln_param_grads(dlt_grad_slot *gw, dlt_grad_slot *gb, dlt_tensor *w, dlt_tensor *b, const char *F,
                               dlt__ln_pgrads *pg) {
    const int need_w = gw && w && gw->needed, need_b = gb && b && gb->needed;
    *pg = (dlt__ln_pgrads){.direct = need_w || need_b, .beta = -1};
    if (need_w) {
        if (dlt__slot_direct(gw, w)) pg->beta = gw->beta;
        else pg->direct = 0;
    }
    if (need_b) {
        if (dlt__slot_direct(gb, b) && (pg->beta < 0 || pg->beta == gb->beta)) pg->beta = gb->beta;
        else pg->direct = 0;
    }
    if (!pg->direct) pg->beta = 0;
    dlt_status st = DLT_OK;
    if (need_w) {
        if (pg->direct) pg->dw = gw->dst;
        else st = dlt__tensor_new_like(w, w->dtype, F, &pg->dw);
    }
    if (st == DLT_OK && need_b) {
        if (pg->direct) pg->db = gb->dst;
        else st = dlt__tensor_new_like(b, b->dtype, F, &pg->db);
    }
    if (st != DLT_OK) dlt__ln_param_grads_drop(pg);
    return st;
}

/* hands dweight/dbias to their slots after the kernel ran */
dlt_status dlt__ln_param_grads_store(dlt_ctx *ctx, dlt_grad_slot *gw, dlt_grad_slot *gb, dlt__ln_pgrads *pg) {
    if (pg->direct) {
        if (pg->dw) gw->written = 1;
        if (pg->db) gb->written = 1;
        *pg = (dlt__ln_pgrads){0};
        return DLT_OK;
    }
    dlt_status st = DLT_OK;
    if (pg->dw) st = dlt__grad_slot_store(ctx, gw, pg->dw);
    pg->dw = NULL;
    if (pg->db) {
        if (st == DLT_OK) st = dlt__grad_slot_store(ctx, gb, pg->db);
        else dlt_tensor_release(pg->db);
    }
    pg->db = NULL;
    return st;
}

void dlt__ln_param_grads_drop(dlt__ln_pgrads *pg) {
    if (!pg->direct) {
        dlt_tensor_release(pg->dw);
        dlt_tensor_release(pg->db);
    }
    *pg = (dlt__ln_pgrads){0};
}

static dlt_status ln_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(layer_norm)";
    dlt_ctx *ctx = nd->ctx;
    const ln_attr *at = DLT_NODE_ATTR(nd, ln_attr);
    dlt_tensor *x = nd->saved[0], *mean = nd->saved[1], *rstd = nd->saved[2];
    dlt_tensor *w = at->has_w ? nd->saved[3] : NULL;
    dlt_tensor *b = at->has_b ? nd->saved[3 + at->has_w] : NULL;
    dlt_tensor *u = gout[0], *dx = NULL;
    dlt__ln_pgrads pg;
    DLT_CHECK(dlt__ln_param_grads(&gin[1], &gin[2], w, b, F, &pg));
    dlt_status st = DLT_OK;
    /* dx added straight into the gradient x has so far where the tape offers it (the
     * residual stream's, in a pre-LN Transformer block): no separate add kernel */
    const int dx_direct = dlt__slot_direct(&gin[0], x); /* dx is gin[0].dst, borrowed */
    if (dx_direct) dx = gin[0].dst;
    else DLT_CHECK_GOTO(st, dlt__tensor_new_like(x, x->dtype, F, &dx), fail);
    if (at->M > 0 && at->N > 0) {
        DLT_CHECK_GOTO(st, ctx->be->ln_bwd(ctx, dx, dx_direct ? gin[0].beta : 0, pg.dw, pg.db, pg.beta, u, x, mean,
                                           rstd, w, at->M, at->N),
                       fail);
    } else { /* no rows: parameter gradients are zero */
        if (pg.dw) DLT_CHECK_GOTO(st, dlt__grad_zero(ctx, pg.dw, pg.beta), fail);
        if (pg.db) DLT_CHECK_GOTO(st, dlt__grad_zero(ctx, pg.db, pg.beta), fail);
    }
    if (dx_direct) {
        gin[0].written = 1;
        dx = NULL;
    } else {
        st = dlt__grad_slot_store(ctx, &gin[0], dx);
        dx = NULL;
        if (st != DLT_OK) goto fail;
    }
    return dlt__ln_param_grads_store(ctx, &gin[1], &gin[2], &pg);
fail:
    if (!dx_direct) dlt_tensor_release(dx);
    dlt__ln_param_grads_drop(&pg);
    return st;
}

/* y in out_dtype (-1: layer_norm's own, x's or f32 under autocast) */
static dlt_status layer_norm(const char *F, dlt_tensor *x, const int64_t *normalized_shape, int32_t n,
                             dlt_tensor *weight, dlt_tensor *bias, double eps, int32_t out_dtype, dlt_tensor **out) {
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_float(x, F, "x"));
    if (n < 1 || n > x->ndim)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "normalized_shape has %d dimensions; it must have 1..%d for a %d-D input", n,
                        x->ndim, x->ndim);
    DLT_NULL_CHECK(normalized_shape, F);
    char a[96], b[96];
    for (int32_t i = 0; i < n; i++)
        if (normalized_shape[i] != x->shape[x->ndim - n + i])
            return dlt__err(DLT_ERR_SHAPE, F,
                            "normalized_shape[%d] = %lld but input %s has %lld there (it must be the "
                            "input's last %d sizes)",
                            i, (long long)normalized_shape[i], dlt__shape_str(x, a, sizeof a),
                            (long long)x->shape[x->ndim - n + i], n);
    dlt_tensor *pa[2] = {weight, bias};
    const char *names[2] = {"weight", "bias"};
    for (int i = 0; i < 2; i++) {
        dlt_tensor *p = pa[i];
        if (!p) continue;
        DLT_CHECK(dlt__check_same_ctx(x, p, F, "x", names[i]));
        DLT_CHECK(dlt__check_float(p, F, names[i]));
        int ok = p->ndim == n;
        for (int32_t d = 0; ok && d < n; d++) ok = p->shape[d] == normalized_shape[d];
        if (!ok)
            return dlt__err(DLT_ERR_SHAPE, F, "%s has shape %s; it must equal normalized_shape %s",
                            names[i], dlt__shape_str(p, a, sizeof a), dlt__shape_str(x, b, sizeof b));
    }
    if (!(eps >= 0.0)) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "eps %g must be >= 0", eps);
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, ln_fwd, F);
    ln_attr at = {.M = 1, .N = 1, .has_w = weight != NULL, .has_b = bias != NULL};
    for (int32_t i = 0; i < x->ndim; i++) {
        if (i < x->ndim - n) at.M *= x->shape[i];
        else at.N *= x->shape[i];
    }
    dlt_tensor *xc = NULL, *t = NULL, *y = NULL, *mean = NULL, *rstd = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK(dlt__contiguous_input(x, F, &t));
    st = dlt__autocast_fp32(t, F, &xc);
    dlt_tensor_release(t);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    DLT_CHECK_GOTO(st, dlt__tensor_new_like(xc, out_dtype >= 0 ? out_dtype : xc->dtype, F, &y), done);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &at.M, 1, DLT_FORMAT_CONTIGUOUS, F, &mean), done);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &at.M, 1, DLT_FORMAT_CONTIGUOUS, F, &rstd), done);
    if (y->numel) DLT_CHECK_GOTO(st, ctx->be->ln_fwd(ctx, y, mean, rstd, xc, weight, bias, at.M, at.N, eps), done);
    {
        /* inputs: x, then weight and bias when given (a bias without weight sits in slot 2) */
        dlt_tensor *in[3] = {xc, weight, bias};
        const int32_t n_in = bias ? 3 : weight ? 2 : 1;
        DLT_CHECK_GOTO(st, dlt__record(ctx, "layer_norm", ln_backward, in, n_in, &y, 1, &node), done);
    }
    if (node) {
        DLT_SET_ATTR(node, ln_attr, at);
        dlt__save(node, xc);
        dlt__save(node, mean);
        dlt__save(node, rstd);
        if (weight) dlt__save(node, weight);
        if (bias) dlt__save(node, bias); /* only its shape and dtype are read */
    }
done:
    dlt_tensor_release(xc);
    dlt_tensor_release(mean);
    dlt_tensor_release(rstd);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt_layer_norm(dlt_tensor *x, const int64_t *normalized_shape, int32_t n, dlt_tensor *weight,
                          dlt_tensor *bias, double eps, dlt_tensor **out) {
    return layer_norm("dlt_layer_norm", x, normalized_shape, n, weight, bias, eps, -1, out);
}

dlt_status dlt_layer_norm_to(dlt_tensor *x, const int64_t *normalized_shape, int32_t n, dlt_tensor *weight,
                             dlt_tensor *bias, double eps, int32_t dtype, dlt_tensor **out) {
    static const char *F = "dlt_layer_norm_to";
    if (dtype != DLT_F32 && dtype != DLT_F16 && dtype != DLT_BF16)
        return dlt__err(DLT_ERR_DTYPE, F, "output dtype must be f32, f16 or bf16, got %s", dlt_dtype_name(dtype));
    return layer_norm(F, x, normalized_shape, n, weight, bias, eps, dtype, out);
}
