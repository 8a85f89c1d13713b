/*
 * sgd.c - torch.optim.SGD (the foreach implementation PyTorch picks on CUDA), with every
 * per-step value on the device (the shared parts: optimizer.c).
 *
 * Update per parameter with a gradient, in fp32 with PyTorch's foreach rounding
 * (lib/cpu/sgd.c and cuda/sgd.cu implement it; mu, 1-tau, wd and lr rounded to f32):
 *   g = maximize ? -grad : grad;   if wd:  g = fma(wd, p, g)
 *   if mu: b = first ? g : fma(1-tau, g, b*mu);   g = nesterov ? fma(mu, b, g) : b
 *   p = fma(-lr, g, p)
 * With nesterov and neither maximize nor weight decay, PyTorch's foreach code adds mu*b into
 * p.grad in place; the kernels do the same, so .grad after a step matches too.
 * "first" is a device flag per parameter (set by the kernel of the first applied step),
 * because a step the GradScaler skips must not count and the host cannot know whether it
 * was skipped. Parameters without a gradient are skipped entirely.
 *
 * The step also writes the parameter's autocast low-precision copies (tensor lp_copy[]):
 * a copy of the same format is written by the step kernel itself; any other copy is
 * re-converted right after. The host then bumps param->version and marks the copies
 * current, so the conv/linear front doors do not cast the weight again.
 */
#include <stdlib.h>
#include <string.h>

#include "../core/options.h"
#include "optim_internal.h"

static const dlt_sgd_options SGD_DEFAULTS = {.size = sizeof(dlt_sgd_options), .lr = 1e-3};
/* the first release's struct ends after maximize */
#define SGD_OPTIONS_V1 DLT__FIELD_END(dlt_sgd_options, maximize)

void dlt_sgd_options_init(dlt_sgd_options *o, uint32_t size) {
    dlt__options_fill(o, size, &SGD_DEFAULTS, sizeof SGD_DEFAULTS, SGD_OPTIONS_V1);
}

static dlt_status sgd_create(dlt_tensor *const *params, int32_t n, const dlt_sgd_options *o,
                             const char *F, dlt_optimizer **out) {
    DLT_NULL_CHECK(params, F);
    DLT_NULL_CHECK(out, F);
    dlt_sgd_options x = SGD_DEFAULTS;
    DLT_CHECK(dlt__options_read(&x, sizeof x, o, SGD_OPTIONS_V1, "dlt_sgd_options", F));
    /* PyTorch's checks, in its order and words */
    DLT_CHECK(dlt__optimizer_check_lr(x.lr, F));
    if (!(x.momentum >= 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid momentum value: %g", x.momentum);
    if (!(x.weight_decay >= 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid weight_decay value: %g", x.weight_decay);
    if (x.nesterov && (x.momentum <= 0.0 || x.dampening != 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "Nesterov momentum requires a momentum and zero dampening (momentum %g, "
                        "dampening %g)",
                        x.momentum, x.dampening);
    if (!isfinite(x.dampening))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid dampening value: %g", x.dampening);
    dlt_tensor **uniq = NULL;
    int32_t k = 0;
    DLT_CHECK(dlt__optimizer_check_params(NULL, params, n, F, &uniq, &k));
    dlt_optimizer *opt = NULL;
    dlt_status st = dlt__optimizer_new(DLT__OPT_SGD, uniq, k, x.lr, x.weight_decay, F, &opt);
    free(uniq);
    if (st != DLT_OK) return st;
    opt->momentum = x.momentum;
    opt->dampening = x.dampening;
    opt->weight_decay = x.weight_decay;
    opt->nesterov = x.nesterov != 0;
    opt->maximize = x.maximize != 0;
    *out = opt;
    return DLT_OK;
}

dlt_status dlt_sgd_create_ex(dlt_tensor *const *params, int32_t n, const dlt_sgd_options *o,
                             dlt_optimizer **out) {
    return sgd_create(params, n, o, "dlt_sgd_create_ex", out);
}

dlt_status dlt_sgd_create(dlt_tensor *const *params, int32_t n, double lr, double momentum,
                          double dampening, double weight_decay, int32_t nesterov,
                          int32_t maximize, dlt_optimizer **out) {
    dlt_sgd_options o;
    dlt_sgd_options_default(&o);
    o.lr = lr;
    o.momentum = momentum;
    o.dampening = dampening;
    o.weight_decay = weight_decay;
    o.nesterov = nesterov;
    o.maximize = maximize;
    return sgd_create(params, n, &o, "dlt_sgd_create", out);
}

dlt_status dlt__sgd_step_impl(dlt_optimizer *opt, const void *found_inf, const char *func) {
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    if (!ctx->be->sgd_step) return dlt__be_missing(ctx, func, "sgd_step");
    const int use_momentum = opt->momentum != 0.0;
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
        opt->l_bufs[k] = use_momentum ? opt->bufs[i] : NULL;
        opt->l_lp[2 * k] = dlt__optimizer_lp_fusable(p, p->lp_copy[0], DLT_F16) ? p->lp_copy[0] : NULL;
        opt->l_lp[2 * k + 1] = dlt__optimizer_lp_fusable(p, p->lp_copy[1], DLT_BF16) ? p->lp_copy[1] : NULL;
        opt->l_index[k] = i;
        k++;
    }
    dlt_sgd_launch L;
    memset(&L, 0, sizeof L);
    L.n = k;
    L.params = opt->l_params;
    L.grads = opt->l_grads;
    L.bufs = use_momentum ? opt->l_bufs : NULL;
    L.lp_copies = opt->l_lp;
    L.buf_index = opt->l_index;
    L.buf_init = dlt__optim_flags(opt);
    L.state = dlt__data(opt->dev);
    L.momentum = opt->momentum;
    L.dampening = opt->dampening;
    L.weight_decay = opt->weight_decay;
    L.nesterov = opt->nesterov;
    L.maximize = opt->maximize;
    L.found_inf = found_inf;
    L.schedule = dlt__schedule_active(&opt->schedule) ? &opt->schedule : NULL;
    /* fused clipping: the norm of exactly the gradients this step uses, enqueued first */
    DLT_CHECK(dlt__optimizer_clip_pass(opt, k, func, &L.clip_coef));
    dlt_status st = ctx->be->sgd_step(ctx, &L);
    if (st != DLT_OK) return dlt__err_wrap(st, func);
    const int grads_written = use_momentum && opt->nesterov && !opt->maximize && opt->weight_decay == 0.0;
    if (grads_written)
        for (int32_t j = 0; j < k; j++) opt->l_grads[j]->version++;
    return dlt__optimizer_after_step(opt, k, func);
}

dlt_status dlt_sgd_get_options(const dlt_optimizer *opt, double *momentum, double *dampening,
                               double *weight_decay, int32_t *nesterov, int32_t *maximize) {
    static const char *F = "dlt_sgd_get_options";
    DLT_NULL_CHECK(opt, F);
    if (opt->kind != DLT__OPT_SGD)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the optimizer is %s, not SGD", dlt_optimizer_kind(opt));
    if (momentum) *momentum = opt->momentum;
    if (dampening) *dampening = opt->dampening;
    if (weight_decay) *weight_decay = opt->weight_decay;
    if (nesterov) *nesterov = opt->nesterov;
    if (maximize) *maximize = opt->maximize;
    return DLT_OK;
}
