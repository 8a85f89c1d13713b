/*
 * add_layer_norm.c - a pre-LN Transformer block's residual add and the LayerNorm after it as
 * one recorded op (internal, for lib/nn/gpt.c): sum = x + b, y = layer_norm(sum) in a dtype
 * of the caller's choice. The numbers are dlt_add's then dlt_layer_norm_to's, bit for bit on
 * each backend; the passes are fewer. Forward: the backend reads x and b once and writes sum
 * and y (the two ops read sum again). Backward: ds = sum's gradient so far (the next residual
 * add's) + the LayerNorm's dx, written with its copy in b's dtype in one pass; the add's
 * backward converted ds in a pass of its own. On GPT-2 124M at 16 x 1024 (bf16) that is 24
 * reads of a 50 MB f32 tensor in each direction.
 *
 * Served calls: x f32 and contiguous, b of x's shape, contiguous, in y's dtype (f32, or the
 * f16/bf16 that autocast gives a Linear's output), the LayerNorm over the last dimension with
 * weight and bias f32 [N] or absent. Others get *sum = *y = NULL and DLT_OK: the caller runs
 * dlt_add and the LayerNorm itself.
 */
#include "ops_internal.h"

typedef struct add_ln_attr {
    int64_t M, N;
    int32_t has_w, has_b;
    int32_t b_dtype;
} add_ln_attr;

/* ds = gs (sum's gradient so far, may be absent) + the LayerNorm's dx from gy; x's gradient
 * is ds, b's is ds in b's dtype */
static dlt_status add_ln_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(add_layer_norm)";
    dlt_ctx *ctx = nd->ctx;
    const add_ln_attr *at = DLT_NODE_ATTR(nd, add_ln_attr);
    dlt_tensor *s = nd->saved[0], *mean = nd->saved[1], *rstd = nd->saved[2];
    dlt_tensor *w = at->has_w ? nd->saved[3] : NULL;
    dlt_tensor *bias = at->has_b ? nd->saved[3 + at->has_w] : NULL;
    dlt_tensor *gs = gout[0], *gy = gout[1], *ds = NULL, *db = NULL;
    dlt_status st = DLT_OK;
    if (!gy) { /* only sum carries a gradient: the add's backward alone */
        if (gin[1].needed) {
            DLT_CHECK(dlt__tensor_new_like(s, at->b_dtype, F, &db));
            st = ctx->be->convert(ctx, db, gs);
            if (st == DLT_OK) st = dlt__grad_slot_store(ctx, &gin[1], db);
            else dlt_tensor_release(db);
            DLT_CHECK(st);
        }
        return gin[0].needed ? dlt__grad_slot_store(ctx, &gin[0], dlt_tensor_retain(gs)) : DLT_OK;
    }
    dlt__ln_pgrads pg;
    DLT_CHECK(dlt__ln_param_grads(&gin[2], &gin[3], w, bias, F, &pg));
    /* ds in place over gs when no one else can see it (the tape's rule for an output's
     * gradient), else a new tensor */
    if (gs && gs->refcount == 1 && gs->storage->refcount == 1 && !dlt__side_holds(ctx, gs)) ds = dlt_tensor_retain(gs);
    else DLT_CHECK_GOTO(st, dlt__tensor_new_like(s, s->dtype, F, &ds), fail);
    if (gin[1].needed) DLT_CHECK_GOTO(st, dlt__tensor_new_like(s, at->b_dtype, F, &db), fail);
    DLT_CHECK_GOTO(st, ctx->be->add_ln_bwd(ctx, ds, gs, db, pg.dw, pg.db, pg.beta, gy, s, mean, rstd, w, at->M, at->N),
                   fail);
    if (gin[1].needed) {
        st = dlt__grad_slot_store(ctx, &gin[1], db);
        db = NULL;
        if (st != DLT_OK) goto fail;
    }
    if (gin[0].needed) {
        st = dlt__grad_slot_store(ctx, &gin[0], ds);
        ds = NULL;
        if (st != DLT_OK) goto fail;
    }
    dlt_tensor_release(ds);
    return dlt__ln_param_grads_store(ctx, &gin[2], &gin[3], &pg);
fail:
    dlt_tensor_release(ds);
    dlt_tensor_release(db);
    dlt__ln_param_grads_drop(&pg);
    return st;
}

static int served(const dlt_tensor *x, const dlt_tensor *b, const dlt_tensor *w, const dlt_tensor *bias,
                  int32_t dtype) {
    const dlt_ctx *ctx = x->ctx;
    if (!ctx->be->add_ln_fwd || !ctx->be->add_ln_bwd) return 0;
    if (x->dtype != DLT_F32 || b->dtype != dtype || b->ctx != ctx || !dlt__same_shape(x, b)) return 0;
    if (dtype != DLT_F32 && dtype != DLT_F16 && dtype != DLT_BF16) return 0;
    if (x->format != DLT_FORMAT_CONTIGUOUS || b->format != DLT_FORMAT_CONTIGUOUS || x->ndim < 1 || x->numel < 1)
        return 0;
    const int64_t N = x->shape[x->ndim - 1];
    const dlt_tensor *p[2] = {w, bias};
    for (int i = 0; i < 2; i++)
        if (p[i] && (p[i]->ctx != ctx || p[i]->dtype != DLT_F32 || p[i]->ndim != 1 || p[i]->shape[0] != N))
            return 0;
    return 1;
}

dlt_status dlt__add_layer_norm_to(dlt_tensor *x, dlt_tensor *b, dlt_tensor *weight, dlt_tensor *bias, double eps,
                                  int32_t dtype, dlt_tensor **sum, dlt_tensor **y) {
    static const char *F = "dlt_add_layer_norm";
    *sum = *y = NULL;
    if (!served(x, b, weight, bias, dtype) || !(eps >= 0.0)) return DLT_OK;
    dlt_ctx *ctx = x->ctx;
    add_ln_attr at = {.M = x->numel / x->shape[x->ndim - 1], .N = x->shape[x->ndim - 1], .has_w = weight != NULL,
                      .has_b = bias != NULL, .b_dtype = b->dtype};
    dlt_tensor *s = NULL, *out = NULL, *mean = NULL, *rstd = NULL, *alias = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__tensor_new_like(x, x->dtype, F, &s), fail);
    DLT_CHECK_GOTO(st, dlt__tensor_new_like(x, dtype, F, &out), fail);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &at.M, 1, DLT_FORMAT_CONTIGUOUS, F, &mean), fail);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &at.M, 1, DLT_FORMAT_CONTIGUOUS, F, &rstd), fail);
    DLT_CHECK_GOTO(st, ctx->be->add_ln_fwd(ctx, s, out, mean, rstd, x, b, weight, bias, at.M, at.N, eps), fail);
    {
        /* inputs: x, b, then weight and bias (slots 2 and 3) when given */
        dlt_tensor *in[4] = {x, b, weight, bias};
        dlt_tensor *outs[2] = {s, out};
        DLT_CHECK_GOTO(st, dlt__record(ctx, "add_layer_norm", add_ln_backward, in, bias ? 4 : weight ? 3 : 2, outs, 2,
                                       &node),
                       fail);
    }
    if (node) {
        DLT_SET_ATTR(node, add_ln_attr, at);
        /* an alias: the node saving its own output would make a reference cycle */
        DLT_CHECK_GOTO(st, dlt__alias(s, F, &alias), fail);
        dlt__save(node, alias);
        dlt_tensor_release(alias);
        alias = NULL;
        dlt__save(node, mean);
        dlt__save(node, rstd);
        if (weight) dlt__save(node, weight);
        if (bias) dlt__save(node, bias);
    }
    dlt_tensor_release(mean);
    dlt_tensor_release(rstd);
    *sum = s;
    *y = out;
    return DLT_OK;
fail:
    dlt_tensor_release(s);
    dlt_tensor_release(out);
    dlt_tensor_release(mean);
    dlt_tensor_release(rstd);
    return dlt__err_wrap(st, F);
}

dlt_status dlt_add_layer_norm(dlt_tensor *x, dlt_tensor *b, const int64_t *normalized_shape, int32_t n,
                              dlt_tensor *weight, dlt_tensor *bias, double eps, int32_t dtype, dlt_tensor **sum,
                              dlt_tensor **out) {
    static const char *F = "dlt_add_layer_norm";
    DLT_NULL_CHECK(sum, F);
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_CHECK(dlt__check_tensor(b, F, "b"));
    DLT_NULL_CHECK(normalized_shape, F);
    dlt_tensor *s = NULL, *y = NULL;
    /* the one op where the call fits; its own checks are the two ops' (run below otherwise) */
    if (n == 1 && x->ndim >= 1 && normalized_shape[0] == x->shape[x->ndim - 1] && x->ctx == b->ctx &&
        (!weight || weight->ctx == x->ctx) && (!bias || bias->ctx == x->ctx))
        DLT_CHECK(dlt__add_layer_norm_to(x, b, weight, bias, eps, dtype, &s, &y));
    if (!s) {
        DLT_CHECK(dlt_add(x, b, &s));
        dlt_status st = dlt_layer_norm_to(s, normalized_shape, n, weight, bias, eps, dtype, &y);
        if (st != DLT_OK) {
            dlt_tensor_release(s);
            return st;
        }
    }
    *sum = s;
    *out = y;
    return DLT_OK;
}
