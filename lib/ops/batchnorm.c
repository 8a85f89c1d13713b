/*
 * batchnorm.c - front door of BatchNorm2d, optionally fused with a residual add and ReLU:
 *   y = act(gamma * (x - mean) * invstd + beta [+ residual])
 * Training (or no running statistics): mean/var over (N,H,W) per channel, var biased for
 * normalisation; running_mean/var updated in place with momentum and the unbiased variance
 * (PyTorch: running = (1-m) running + m * stat). Evaluation: the running statistics.
 * x, y, residual share dtype and format (fp16/bf16 under autocast, as PyTorch runs BN in its
 * input's dtype); gamma, beta and the statistics are fp32 [C].
 * Saved for backward: x, gamma, the batch mean and 1/sqrt(var+eps), and an alias of y when
 * ReLU was fused (its mask).
 */
#include "ops_internal.h"

static dlt_status check_vec(const dlt_tensor *v, int64_t C, const dlt_tensor *x, const char *F,
                            const char *name) {
    if (!v) return DLT_OK;
    DLT_CHECK(dlt__check_tensor(v, F, name));
    DLT_CHECK(dlt__check_same_ctx(x, v, F, "x", name));
    if (v->dtype != DLT_F32)
        return dlt__err(DLT_ERR_DTYPE, F, "'%s' must be f32, got %s", name, dlt_dtype_name(v->dtype));
    if (v->ndim != 1 || v->shape[0] != C) {
        char b[96];
        return dlt__err(DLT_ERR_SHAPE, F, "'%s' must be [%lld] (one per channel), got %s", name,
                        (long long)C, dlt__shape_str(v, b, sizeof b));
    }
    return DLT_OK;
}

typedef struct bn_attr {
    int32_t relu;      /* ReLU fused: the output y (saved[4]) masks dy */
    int32_t use_batch; /* batch statistics (training formula) */
} bn_attr;

static dlt_status bn_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(batch_norm2d)";
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *x = n->saved[0], *gamma = n->saved[1], *mean = n->saved[2], *invstd = n->saved[3];
    const bn_attr *at = DLT_NODE_ATTR(n, bn_attr);
    dlt_tensor *y = at->relu ? n->saved[4] : NULL;
    const int32_t use_batch = at->use_batch;
    const int64_t C = x->shape[1];
    dlt_tensor *dx = NULL, *dres = NULL, *dg = NULL, *db = NULL;
    int own_dg = 0, own_db = 0;
    int32_t beta_acc = 0;
    dlt_status st = DLT_OK;
    if (gin[0].needed) DLT_CHECK_GOTO(st, dlt__tensor_new_like(x, x->dtype, F, &dx), fail);
    if (n->n_in > 3 && gin[3].needed) DLT_CHECK_GOTO(st, dlt__tensor_new_like(x, x->dtype, F, &dres), fail);
    /* gamma/beta gradients straight into the leaves when both can take the same beta */
    const int need_g = n->n_in > 1 && gin[1].needed, need_b = n->n_in > 2 && gin[2].needed;
    const int direct = need_g && need_b && gin[1].dst && gin[2].dst && gin[1].beta == gin[2].beta &&
                       dlt__slot_direct(&gin[1], gamma) && gin[2].dst->dtype == gamma->dtype &&
                       gin[2].dst->numel == C && gin[2].dst->format == gamma->format;
    if (direct) {
        dg = gin[1].dst;
        db = gin[2].dst;
        beta_acc = gin[1].beta;
    } else {
        if (need_g) {
            DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &C, 1, 0, F, &dg), fail);
            own_dg = 1;
        }
        if (need_b) {
            DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &C, 1, 0, F, &db), fail);
            own_db = 1;
        }
    }
    if (x->numel == 0) { /* no value: zero gradients for gamma and beta, empty dx */
        if (direct) {
            DLT_CHECK_GOTO(st, dlt__grad_zero(ctx, dg, beta_acc), fail);
            DLT_CHECK_GOTO(st, dlt__grad_zero(ctx, db, beta_acc), fail);
        } else {
            if (own_dg) DLT_CHECK_GOTO(st, dlt__grad_zero(ctx, dg, 0), fail);
            if (own_db) DLT_CHECK_GOTO(st, dlt__grad_zero(ctx, db, 0), fail);
        }
        goto deliver;
    }
    if (!dx) { /* the kernel always produces dx; use a scratch one */
        DLT_CHECK_GOTO(st, dlt__tensor_new_like(x, x->dtype, F, &dx), fail);
        gin[0].needed = 0; /* dlt__grad_slot_store below drops it */
    }
    DLT_CHECK_GOTO(st, ctx->be->bn_bwd(ctx, dx, dres, dg, db, beta_acc, gout[0], y, x, gamma, mean,
                                       invstd, use_batch), fail);
deliver:
    if (direct) {
        gin[1].written = 1;
        gin[2].written = 1;
    }
    st = dlt__grad_slot_store(ctx, &gin[0], dx);
    dx = NULL;
    if (st == DLT_OK && dres) st = dlt__grad_slot_store(ctx, &gin[3], dres);
    dres = NULL;
    if (st == DLT_OK && own_dg) st = dlt__grad_slot_store(ctx, &gin[1], dg);
    own_dg = 0;
    if (st == DLT_OK && own_db) st = dlt__grad_slot_store(ctx, &gin[2], db);
    own_db = 0;
    return st;
fail:
    dlt_tensor_release(dx);
    dlt_tensor_release(dres);
    if (own_dg) dlt_tensor_release(dg);
    if (own_db) dlt_tensor_release(db);
    return st;
}

dlt_status dlt_batch_norm2d_act(dlt_tensor *x, dlt_tensor *residual, int32_t relu, dlt_tensor *gamma,
                                dlt_tensor *beta, dlt_tensor *running_mean, dlt_tensor *running_var,
                                int32_t training, double momentum, double eps, dlt_tensor **out) {
    static const char *F = "dlt_batch_norm2d";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_ndim(x, 4, F, "x"));
    DLT_CHECK(dlt__check_float(x, F, "x"));
    const int64_t N = x->shape[0], C = x->shape[1];
    /* values per channel; an empty tensor's other sizes may be anything: saturate */
    int64_t per_channel = 0;
    if (dlt__mul_ovf(N, x->shape[2], &per_channel) || dlt__mul_ovf(per_channel, x->shape[3], &per_channel))
        per_channel = INT64_MAX;
    DLT_CHECK(check_vec(gamma, C, x, F, "gamma"));
    DLT_CHECK(check_vec(beta, C, x, F, "beta"));
    DLT_CHECK(check_vec(running_mean, C, x, F, "running_mean"));
    DLT_CHECK(check_vec(running_var, C, x, F, "running_var"));
    if ((running_mean == NULL) != (running_var == NULL))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "running_mean and running_var must both be given or both be NULL");
    if (residual) {
        DLT_CHECK(dlt__check_tensor(residual, F, "residual"));
        DLT_CHECK(dlt__check_same_ctx(x, residual, F, "x", "residual"));
        if (!dlt__same_shape(x, residual) || residual->dtype != x->dtype || residual->format != x->format) {
            char a[96], b[96];
            return dlt__err(DLT_ERR_SHAPE, F,
                            "residual (%s %s) must match x (%s %s) in shape, dtype and format",
                            dlt__shape_str(residual, a, sizeof a), dlt_dtype_name(residual->dtype),
                            dlt__shape_str(x, b, sizeof b), dlt_dtype_name(x->dtype));
        }
    }
    if (!(eps > 0.0) || !(momentum >= 0.0 && momentum <= 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "eps %g must be > 0 and momentum %g in [0, 1]",
                        eps, momentum);
    const int32_t use_batch = training || running_mean == NULL;
    if (use_batch && per_channel <= 1)
        return dlt__err(DLT_ERR_SHAPE, F,
                        "expected more than 1 value per channel when training, got input "
                        "%lldx%lldx%lldx%lld",
                        (long long)N, (long long)C, (long long)x->shape[2], (long long)x->shape[3]);
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, bn_fwd_train, F);
    dlt_tensor *in[4] = {x, gamma, beta, residual};
    const int32_t n_in = residual ? 4 : 3;
    const int need = dlt__needs_grad(ctx, in, n_in);
    dlt_tensor *y = NULL, *mean = NULL, *invstd = NULL, *alias = NULL;
    dlt_node *node = NULL;
    dlt_status st = DLT_OK;
    dlt__range_push(ctx, "batch_norm2d");
    DLT_CHECK_GOTO(st, dlt__tensor_new_like(x, x->dtype, F, &y), done);
    if (use_batch || need) {
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &C, 1, 0, F, &mean), done);
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &C, 1, 0, F, &invstd), done);
    }
    /* every allocation before the kernel: a training kernel updates the running statistics
     * in place, and a call that fails must leave them as they were */
    if (need) {
        if (relu) DLT_CHECK_GOTO(st, dlt__alias(y, F, &alias), done);
        DLT_CHECK_GOTO(st, dlt__record(ctx, "batch_norm2d", bn_backward, in, n_in, &y, 1, &node), done);
    }
    if (x->numel == 0) {
        /* no value to normalise (C == 0, or an empty batch in evaluation): nothing to run;
         * the running statistics keep their values */
    } else if (use_batch) {
        DLT_CHECK_GOTO(st, ctx->be->bn_fwd_train(ctx, y, x, residual, relu != 0, gamma, beta,
                                                 training ? running_mean : NULL,
                                                 training ? running_var : NULL, mean, invstd,
                                                 momentum, eps), done);
        if (training && running_mean) {
            running_mean->version++;
            running_var->version++;
        }
    } else {
        DLT_CHECK_GOTO(st, ctx->be->bn_fwd_eval(ctx, y, x, residual, relu != 0, gamma, beta,
                                                running_mean, running_var, mean, invstd, eps), done);
    }
    if (node) {
        dlt__save(node, x);
        dlt__save(node, gamma);
        dlt__save(node, mean);
        dlt__save(node, invstd);
        if (relu) dlt__save(node, alias);
        bn_attr at = {relu != 0, use_batch};
        DLT_SET_ATTR(node, bn_attr, at);
    }
done:
    dlt__range_pop(ctx);
    dlt_tensor_release(mean);
    dlt_tensor_release(invstd);
    dlt_tensor_release(alias);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt_batch_norm2d(dlt_tensor *x, dlt_tensor *gamma, dlt_tensor *beta, dlt_tensor *running_mean,
                            dlt_tensor *running_var, int32_t training, double momentum, double eps,
                            dlt_tensor **out) {
    return dlt_batch_norm2d_act(x, NULL, 0, gamma, beta, running_mean, running_var, training,
                                momentum, eps, out);
}
