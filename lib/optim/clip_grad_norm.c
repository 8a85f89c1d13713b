/*
 * clip_grad_norm.c - torch.nn.utils.clip_grad_norm_ over a parameter list, on the device.
 *
 *   total = norm of all gradient elements (norm_type 2: sqrt(sum g^2); 1: sum |g|;
 *           inf: max |g|, NaN propagating)
 *   coef  = min(max_norm / (total + 1e-6), 1)      (in f32, as PyTorch's tensor arithmetic)
 *   g    *= coef for every gradient                (also when coef is 1, as PyTorch)
 * PyTorch takes the norm of the per-tensor norms; we accumulate all elements at once in
 * higher precision (double on the CPU, per-block f32 partials summed in double on CUDA),
 * which agrees with it to fp32 rounding. total and coef never leave the device, so the
 * call enqueues work and returns: it can sit between dlt_grad_scaler_unscale and
 * dlt_grad_scaler_step inside a captured step. PyTorch's error_if_nonfinite needs a host
 * read before the scaling: dlt_grad_norm gives the total alone (the Python binding's
 * clip_grad_norm_(error_if_nonfinite=True) reads it, then clips).
 * The optimizer's fused clipping (dlt_optimizer_set_clip_grad_norm, at the end) runs the
 * same norm pass from inside the step and leaves the scaling to the step kernel.
 */
#include <stdlib.h>

#include "optim_internal.h"

/* max_norm (when check_max) and norm_type as every clipping entry takes them; *norm
 * receives the DLT_CLIP_NORM_* kind. */
static dlt_status check_norm(double max_norm, int check_max, double norm_type, const char *F,
                             int32_t *norm) {
    if (check_max && !(max_norm >= 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "max_norm must be >= 0, got %g", max_norm);
    if (!(norm_type > 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "norm_type must be > 0, got %g", norm_type);
    if (norm_type == 1.0) *norm = DLT_CLIP_NORM_L1;
    else if (norm_type == 2.0) *norm = DLT_CLIP_NORM_L2;
    else if (isinf(norm_type)) *norm = DLT_CLIP_NORM_INF;
    else
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "norm_type %g is not supported (1, 2 or inf)", norm_type);
    return DLT_OK;
}

static dlt_status clip(dlt_tensor *const *params, int32_t n, double max_norm, double norm_type,
                       int32_t scale, const char *F, dlt_tensor **total) {
    DLT_NULL_CHECK(params, F);
    if (n < 1) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n must be >= 1, got %d", n);
    int32_t norm = 0;
    DLT_CHECK(check_norm(max_norm, scale, norm_type, F, &norm));
    dlt_ctx *ctx = NULL;
    for (int32_t i = 0; i < n; i++) {
        const dlt_tensor *p = params[i];
        if (!p) continue;
        if (!ctx) ctx = p->ctx;
        if (p->ctx != ctx)
            return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F, "params[%d] belongs to another context (%s vs %s)",
                            i, p->ctx->be->name, ctx->be->name);
        if (p->grad && p->grad_defined && p->grad->dtype != DLT_F32)
            return dlt__err(DLT_ERR_DTYPE, F, "the gradient of params[%d] is %s; clipping takes fp32 gradients",
                            i, dlt_dtype_name(p->grad->dtype));
    }
    if (!ctx) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "every entry of params is NULL");
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (!ctx->be->clip_grad_norm) return dlt__be_missing(ctx, F, "clip_grad_norm");
    dlt_tensor **grads = malloc((size_t)n * sizeof *grads);
    if (!grads) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d entries", n);
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        const dlt_tensor *p = params[i];
        if (!p || !p->grad || !p->grad_defined || p->grad->numel == 0) continue;
        int seen = 0; /* a tied weight listed twice counts once */
        for (int32_t j = 0; j < k && !seen; j++) seen = grads[j] == p->grad;
        if (!seen) grads[k++] = p->grad;
    }
    dlt_tensor *t = NULL;
    dlt_status st = dlt__tensor_new(ctx, DLT_F32, NULL, 0, DLT_FORMAT_CONTIGUOUS, F, &t);
    if (st == DLT_OK) {
        if (k == 0) {
            st = ctx->be->fill(ctx, t, 0.0); /* PyTorch: tensor(0.) when no gradient */
        } else {
            dlt_clip_launch L = {.n = k, .norm = norm, .grads = grads, .total = dlt__data(t),
                                 .max_norm = max_norm, .scale = scale};
            st = ctx->be->clip_grad_norm(ctx, &L);
        }
        if (st != DLT_OK) st = dlt__err_wrap(st, F);
    }
    if (st == DLT_OK && scale)
        for (int32_t i = 0; i < k; i++) grads[i]->version++;
    free(grads);
    if (st != DLT_OK) {
        dlt_tensor_release(t);
        return st;
    }
    if (total) *total = t;
    else dlt_tensor_release(t);
    return DLT_OK;
}

dlt_status dlt_clip_grad_norm(dlt_tensor *const *params, int32_t n, double max_norm,
                              double norm_type, dlt_tensor **total) {
    return clip(params, n, max_norm, norm_type, 1, "dlt_clip_grad_norm", total);
}

dlt_status dlt_grad_norm(dlt_tensor *const *params, int32_t n, double norm_type, dlt_tensor **total) {
    DLT_NULL_CHECK(total, "dlt_grad_norm");
    return clip(params, n, 0.0, norm_type, 0, "dlt_grad_norm", total);
}

/* ---- the optimizer's fused clipping (optim.h: dlt_optimizer_set_clip_grad_norm) ----
 * Per step: the norm pass above without its scale kernel (scale 0) over the gradients the
 * step launches, writing the total and the coefficient to two optimizer-owned device
 * scalars; the step kernel then multiplies each gradient element by the coefficient as it
 * reads it. The scalars are allocated once, when clipping is first set, and kept until the
 * optimizer is destroyed (a captured step holds their addresses). */

dlt_status dlt_optimizer_set_clip_grad_norm(dlt_optimizer *opt, double max_norm, double norm_type) {
    static const char *F = "dlt_optimizer_set_clip_grad_norm";
    DLT_NULL_CHECK(opt, F);
    int32_t norm = 0;
    DLT_CHECK(check_norm(max_norm, 1, norm_type, F, &norm));
    dlt_ctx *ctx = opt->ctx;
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "cannot change gradient clipping during graph capture (set it before capturing)");
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (!ctx->be->clip_grad_norm) return dlt__be_missing(ctx, F, "clip_grad_norm");
    if (!opt->clip_total) { /* both or neither: a failure changes nothing */
        dlt_tensor *t = NULL, *c = NULL;
        dlt_status st = dlt__tensor_new(ctx, DLT_F32, NULL, 0, DLT_FORMAT_CONTIGUOUS, F, &t);
        if (st == DLT_OK) st = dlt__tensor_new(ctx, DLT_F32, NULL, 0, DLT_FORMAT_CONTIGUOUS, F, &c);
        if (st == DLT_OK) { /* 0 until the first step (and coef never read uninitialised) */
            st = ctx->be->memset0(ctx, dlt__data(t), sizeof(float));
            if (st == DLT_OK) st = ctx->be->memset0(ctx, dlt__data(c), sizeof(float));
            if (st != DLT_OK) st = dlt__err_wrap(st, F);
        }
        if (st != DLT_OK) {
            dlt_tensor_release(t);
            dlt_tensor_release(c);
            return st;
        }
        opt->clip_total = t;
        opt->clip_coef = c;
    }
    opt->clip_on = 1;
    opt->clip_norm = norm;
    opt->clip_max_norm = max_norm;
    return DLT_OK;
}

dlt_status dlt_optimizer_clear_clip_grad_norm(dlt_optimizer *opt) {
    static const char *F = "dlt_optimizer_clear_clip_grad_norm";
    DLT_NULL_CHECK(opt, F);
    if (opt->ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "cannot change gradient clipping during graph capture (clear it before capturing)");
    opt->clip_on = 0; /* the scalars stay: a graph captured with clipping still writes them */
    return DLT_OK;
}

dlt_status dlt_optimizer_grad_norm(const dlt_optimizer *opt, dlt_tensor **total) {
    static const char *F = "dlt_optimizer_grad_norm";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(total, F);
    if (!opt->clip_on)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "the optimizer does not clip gradients: its steps take no norm "
                        "(dlt_optimizer_set_clip_grad_norm sets clipping)");
    *total = dlt_tensor_retain(opt->clip_total);
    return DLT_OK;
}

dlt_status dlt__optimizer_clip_pass(dlt_optimizer *opt, int32_t k, const char *func,
                                    const void **coef) {
    *coef = NULL;
    if (!opt->clip_on) return DLT_OK;
    dlt_ctx *ctx = opt->ctx;
    if (!ctx->be->clip_grad_norm) return dlt__be_missing(ctx, func, "clip_grad_norm");
    dlt_status st;
    if (k == 0) { /* no gradient: total 0 as clip_grad_norm's tensor(0.), nothing to scale */
        st = ctx->be->memset0(ctx, dlt__data(opt->clip_total), sizeof(float));
    } else {
        dlt_clip_launch L = {.n = k, .norm = opt->clip_norm, .grads = opt->l_grads,
                             .total = dlt__data(opt->clip_total), .max_norm = opt->clip_max_norm,
                             .scale = 0, .coef = dlt__data(opt->clip_coef)};
        st = ctx->be->clip_grad_norm(ctx, &L);
        if (st == DLT_OK) *coef = dlt__data(opt->clip_coef);
    }
    if (st != DLT_OK) return dlt__err_wrap(st, func);
    dlt__tensor_written(opt->clip_total);
    return DLT_OK;
}
