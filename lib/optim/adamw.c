/*
 * adamw.c - torch.optim.AdamW and torch.optim.Adam (amsgrad off), PyTorch's foreach
 * implementation (the one it picks on CUDA), with every per-step value on the device.
 *
 * Per step, for each parameter with a gradient (t = its step count + 1; PyTorch keeps
 * state["step"] per parameter, so a parameter that had no gradient at some step lags):
 *   g = maximize ? -grad : grad
 *   AdamW: p = p * (1 - lr*wd)              (_foreach_mul_(params, 1 - lr*wd))
 *   Adam:  g = fma(wd, p, g)                (_foreach_add(grads, params, alpha=wd))
 *   m = lerp(m, g, 1 - beta1)               (w < 0.5 ? fma(w, g - m, m) : g - (g - m)*(1 - w))
 *   v = fma(1 - beta2, g*g, v*beta2)        (_foreach_mul_ then _foreach_addcmul_)
 *   d = sqrt(v) / sqrt(1 - beta2^t) + eps   (_foreach_sqrt, _foreach_div_, _foreach_add_)
 *   p = fma(-lr / (1 - beta1^t), m / d, p)  (_foreach_addcdiv_)
 * in fp32, the scalars (1 - lr*wd, the bias corrections, the step size) computed in double
 * from the device's lr and step count and then rounded to f32, as PyTorch computes them in
 * Python floats. lr and wd are the parameter's group's. The element function is
 * dlt__adamw_elem (lib/kernel/optim.h), shared by lib/cpu/adamw.c and cuda/adamw.cu.
 *
 * The moments are created (zeros, PyTorch's zeros_like) at the first step where the
 * parameter has a gradient, before anything changes; the step count of each parameter
 * lives in the device block's int32 slot, incremented by the kernel when the step is
 * applied, so a step the GradScaler skips changes no parameter, moment or count, and a
 * captured step computes its bias corrections from the replayed counts.
 */
#include <stdlib.h>
#include <string.h>

#include "../core/options.h"
#include "optim_internal.h"

static const dlt_adamw_options ADAMW_DEFAULTS = {.size = sizeof(dlt_adamw_options),
                                                 .decoupled_weight_decay = 1,
                                                 .lr = 1e-3,
                                                 .beta1 = 0.9,
                                                 .beta2 = 0.999,
                                                 .eps = 1e-8,
                                                 .weight_decay = 1e-2};
static const dlt_adamw_options ADAM_DEFAULTS = {.size = sizeof(dlt_adamw_options),
                                                .decoupled_weight_decay = 0,
                                                .lr = 1e-3,
                                                .beta1 = 0.9,
                                                .beta2 = 0.999,
                                                .eps = 1e-8,
                                                .weight_decay = 0.0};
/* the first release's struct ends after maximize */
#define ADAMW_OPTIONS_V1 DLT__FIELD_END(dlt_adamw_options, maximize)

void dlt_adamw_options_init(dlt_adamw_options *o, uint32_t size) {
    dlt__options_fill(o, size, &ADAMW_DEFAULTS, sizeof ADAMW_DEFAULTS, ADAMW_OPTIONS_V1);
}

void dlt_adam_options_init(dlt_adamw_options *o, uint32_t size) {
    dlt__options_fill(o, size, &ADAM_DEFAULTS, sizeof ADAM_DEFAULTS, ADAMW_OPTIONS_V1);
}

dlt_status dlt_adamw_create_ex(dlt_tensor *const *params, int32_t n, const dlt_adamw_options *o,
                               dlt_optimizer **out) {
    static const char *F = "dlt_adamw_create_ex";
    DLT_NULL_CHECK(params, F);
    DLT_NULL_CHECK(out, F);
    dlt_adamw_options x = ADAMW_DEFAULTS;
    DLT_CHECK(dlt__options_read(&x, sizeof x, o, ADAMW_OPTIONS_V1, "dlt_adamw_options", F));
    /* PyTorch's checks, in its order and words */
    DLT_CHECK(dlt__optimizer_check_lr(x.lr, F));
    if (!(x.eps >= 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid epsilon value: %g", x.eps);
    if (!(x.beta1 >= 0.0 && x.beta1 < 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid beta parameter at index 0: %g", x.beta1);
    if (!(x.beta2 >= 0.0 && x.beta2 < 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid beta parameter at index 1: %g", x.beta2);
    if (!(x.weight_decay >= 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid weight_decay value: %g", x.weight_decay);
    if (!isfinite(x.lr) || !isfinite(x.eps) || !isfinite(x.weight_decay))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "lr (%g), eps (%g) and weight_decay (%g) must be finite",
                        x.lr, x.eps, x.weight_decay);
    if (x.amsgrad)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "amsgrad is not implemented (amsgrad must be 0)");
    dlt_tensor **uniq = NULL;
    int32_t k = 0;
    DLT_CHECK(dlt__optimizer_check_params(NULL, params, n, F, &uniq, &k));
    dlt_optimizer *opt = NULL;
    dlt_status st = dlt__optimizer_new(DLT__OPT_ADAM, uniq, k, x.lr, x.weight_decay, F, &opt);
    free(uniq);
    if (st != DLT_OK) return st;
    opt->beta1 = x.beta1;
    opt->beta2 = x.beta2;
    opt->eps = x.eps;
    opt->decoupled = x.decoupled_weight_decay != 0;
    opt->maximize = x.maximize != 0;
    opt->amsgrad = 0;
    opt->lr_created = x.lr;
    *out = opt;
    return DLT_OK;
}

dlt_status dlt_adamw_get_options(const dlt_optimizer *opt, dlt_adamw_options *out) {
    static const char *F = "dlt_adamw_get_options";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    if (opt->kind != DLT__OPT_ADAM)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the optimizer is %s, not Adam/AdamW",
                        dlt_optimizer_kind(opt));
    size_t n = 0;
    DLT_CHECK(dlt__options_out_size(out, sizeof *out, ADAMW_OPTIONS_V1, "dlt_adamw_options", F, &n));
    dlt_adamw_options v = ADAMW_DEFAULTS;
    v.decoupled_weight_decay = opt->decoupled;
    v.lr = opt->lr_created;
    v.beta1 = opt->beta1;
    v.beta2 = opt->beta2;
    v.eps = opt->eps;
    v.weight_decay = opt->group_wd[0];
    v.amsgrad = 0;
    v.maximize = opt->maximize;
    const uint32_t size = out->size; /* the caller's struct keeps its own size */
    memcpy(out, &v, n);
    out->size = size;
    return DLT_OK;
}

dlt_status dlt__adamw_step_impl(dlt_optimizer *opt, const void *found_inf, const char *func) {
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    if (!ctx->be->adamw_step) return dlt__be_missing(ctx, func, "adamw_step");
    /* every allocation first, so that a failure changes nothing */
    DLT_CHECK(dlt__optimizer_prepare(opt, func));
    int32_t k = 0;
    for (int32_t i = 0; i < opt->n; i++) {
        dlt_tensor *p = opt->params[i];
        dlt_tensor *g = p->grad;
        if (!g || !p->grad_defined) continue; /* PyTorch: grad is None -> skipped */
        if (g->dtype != DLT_F32 || g->format != p->format || !dlt__same_shape(g, p)) {
            char a[96], b[96];
            return dlt__err(DLT_ERR_INTERNAL, func,
                            "parameter %d: gradient %s %s does not match the parameter %s %s", i,
                            dlt_dtype_name(g->dtype), dlt__shape_str(g, a, sizeof a),
                            dlt_dtype_name(p->dtype), dlt__shape_str(p, b, sizeof b));
        }
        opt->l_params[k] = p;
        opt->l_grads[k] = g;
        opt->l_bufs[k] = opt->exp_avg[i];
        opt->l_bufs2[k] = opt->exp_avg_sq[i];
        opt->l_lp[2 * k] = dlt__optimizer_lp_fusable(p, p->lp_copy[0], DLT_F16) ? p->lp_copy[0] : NULL;
        opt->l_lp[2 * k + 1] = dlt__optimizer_lp_fusable(p, p->lp_copy[1], DLT_BF16) ? p->lp_copy[1] : NULL;
        opt->l_index[k] = i;
        opt->l_group[k] = opt->group[i];
        k++;
    }
    dlt_adamw_launch L;
    memset(&L, 0, sizeof L);
    L.n = k;
    L.n_groups = opt->n_groups;
    L.params = opt->l_params;
    L.grads = opt->l_grads;
    L.exp_avg = opt->l_bufs;
    L.exp_avg_sq = opt->l_bufs2;
    L.lp_copies = opt->l_lp;
    L.index = opt->l_index;
    L.group = opt->l_group;
    L.steps = dlt__optim_flags(opt);
    L.state = dlt__data(opt->dev);
    L.weight_decay = opt->group_wd;
    L.beta1 = opt->beta1;
    L.beta2 = opt->beta2;
    L.eps = opt->eps;
    L.decoupled = opt->decoupled;
    L.maximize = opt->maximize;
    L.found_inf = found_inf;
    L.schedule = dlt__schedule_active(&opt->schedule) ? &opt->schedule : NULL;
    /* fused clipping: the norm of exactly the gradients this step uses, enqueued first */
    DLT_CHECK(dlt__optimizer_clip_pass(opt, k, func, &L.clip_coef));
    dlt_status st = ctx->be->adamw_step(ctx, &L);
    if (st != DLT_OK) return dlt__err_wrap(st, func);
    for (int32_t j = 0; j < k; j++) {
        opt->l_bufs[j]->version++;
        opt->l_bufs2[j]->version++;
    }
    return dlt__optimizer_after_step(opt, k, func);
}
