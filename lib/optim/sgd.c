/*
 * sgd.c - torch.optim.SGD (the foreach implementation PyTorch picks on CUDA), with every
 * per-step value on the device.
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
 * was skipped. Buffers are allocated by the host on the first step where the parameter
 * has a gradient, all of them before anything changes (dlt__optimizer_prepare), so a step
 * that runs out of memory leaves parameters, buffers and gradients as they were; parameters
 * without a gradient are skipped entirely.
 *
 * The step also writes the parameter's autocast low-precision copies (tensor lp_copy[]):
 * a copy of the same format is written by the step kernel itself; any other copy is
 * re-converted right after. The host then bumps param->version and marks the copies
 * current, so the conv/linear front doors do not cast the weight again.
 *
 * Device block (dlt_optim_dev + flags): lr, schedule base, applied-step count,
 * last_applied. Invariant kept by every writer: with no schedule active, base == lr.
 */
#include <float.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "optim_internal.h"

static atomic_uint_fast64_t next_uid = 1;

/* PyTorch's check (lr >= 0), plus the range of the fp32 the lr lives in on the device: an
 * lr above FLT_MAX would become inf there (and a checkpoint holding it could not load). */
static dlt_status check_lr(double lr, const char *func) {
    if (!(lr >= 0.0)) return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "Invalid learning rate: %g", lr);
    if (!(lr <= (double)FLT_MAX))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "Invalid learning rate: %g (the optimizer keeps it in fp32: at most %g)",
                        lr, (double)FLT_MAX);
    return DLT_OK;
}

dlt_status dlt__optimizer_apply_state(dlt_optimizer *opt, const dlt_optim_state_op *op,
                                      const char *func) {
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    if (!ctx->be->sgd_state) return dlt__be_missing(ctx, func, "sgd_state");
    dlt_status st = ctx->be->sgd_state(ctx, dlt__data(opt->dev), op);
    return st == DLT_OK ? st : dlt__err_wrap(st, func);
}

/* Reads the device block (synchronises). */
static dlt_status read_dev(dlt_optimizer *opt, dlt_optim_dev *d, const char *func) {
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, func, "cannot read optimizer state during graph capture");
    dlt_status st = ctx->be->memcpy_d2h(ctx, d, dlt__data(opt->dev), sizeof *d);
    return st == DLT_OK ? st : dlt__err_wrap(st, func);
}

dlt_status dlt_sgd_create(dlt_tensor *const *params, int32_t n, double lr, double momentum,
                          double dampening, double weight_decay, int32_t nesterov,
                          int32_t maximize, dlt_optimizer **out) {
    static const char *F = "dlt_sgd_create";
    DLT_NULL_CHECK(params, F);
    DLT_NULL_CHECK(out, F);
    /* PyTorch's checks, in its order and words */
    DLT_CHECK(check_lr(lr, F));
    if (!(momentum >= 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid momentum value: %g", momentum);
    if (!(weight_decay >= 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid weight_decay value: %g", weight_decay);
    if (nesterov && (momentum <= 0.0 || dampening != 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "Nesterov momentum requires a momentum and zero dampening (momentum %g, "
                        "dampening %g)",
                        momentum, dampening);
    if (!isfinite(dampening))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid dampening value: %g", dampening);
    if (n < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "optimizer got an empty parameter list (n = %d)", n);
    for (int32_t i = 0; i < n; i++) {
        const dlt_tensor *p = params[i];
        if (!p) return dlt__err(DLT_ERR_NULL_POINTER, F, "params[%d] is NULL", i);
        if (p->ctx != params[0]->ctx)
            return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F,
                            "params[%d] belongs to another context than params[0] (%s vs %s)", i,
                            p->ctx->be->name, params[0]->ctx->be->name);
        if (p->dtype != DLT_F32)
            return dlt__err(DLT_ERR_DTYPE, F,
                            "params[%d] is %s; SGD keeps fp32 master parameters (autocast makes "
                            "the low-precision copies)",
                            i, dlt_dtype_name(p->dtype));
        if (!p->requires_grad)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "params[%d] does not require a gradient (dlt_tensor_set_requires_grad)", i);
        for (int32_t j = 0; j < i; j++)
            if (params[j] == p)
                return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                                "params[%d] and params[%d] are the same tensor", j, i);
    }
    dlt_ctx *ctx = params[0]->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));

    dlt_optimizer *opt = dlt__host_calloc(ctx, 1, sizeof *opt);
    if (!opt) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the optimizer");
    opt->ctx = ctx;
    opt->uid = atomic_fetch_add(&next_uid, 1);
    opt->n = n;
    opt->lr0 = lr;
    opt->momentum = momentum;
    opt->dampening = dampening;
    opt->weight_decay = weight_decay;
    opt->nesterov = nesterov != 0;
    opt->maximize = maximize != 0;
    dlt_status st = DLT_OK;
    opt->params = dlt__host_calloc(ctx, (size_t)n, sizeof *opt->params);
    opt->bufs = dlt__host_calloc(ctx, (size_t)n, sizeof *opt->bufs);
    opt->l_params = dlt__host_calloc(ctx, (size_t)n, sizeof *opt->l_params);
    opt->l_grads = dlt__host_calloc(ctx, (size_t)n, sizeof *opt->l_grads);
    opt->l_bufs = dlt__host_calloc(ctx, (size_t)n, sizeof *opt->l_bufs);
    opt->l_lp = dlt__host_calloc(ctx, 2 * (size_t)n, sizeof *opt->l_lp);
    opt->l_index = dlt__host_calloc(ctx, (size_t)n, sizeof *opt->l_index);
    if (!opt->params || !opt->bufs || !opt->l_params || !opt->l_grads || !opt->l_bufs ||
        !opt->l_lp || !opt->l_index) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the parameter lists (n = %d)", n);
        goto fail;
    }
    int64_t nbytes = (int64_t)(sizeof(dlt_optim_dev) + (size_t)n * sizeof(int32_t));
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_U8, &nbytes, 1, DLT_FORMAT_CONTIGUOUS, F, &opt->dev), fail);
    DLT_CHECK_GOTO(st, ctx->be->memset0(ctx, dlt__data(opt->dev), (size_t)nbytes), fail);
    dlt_optim_state_op op;
    memset(&op, 0, sizeof op);
    op.write_lr = op.write_base = 1;
    op.lr_value = op.base_value = lr;
    DLT_CHECK_GOTO(st, dlt__optimizer_apply_state(opt, &op, F), fail);
    for (int32_t i = 0; i < n; i++) opt->params[i] = dlt_tensor_retain(params[i]);
    *out = opt;
    return DLT_OK;
fail:
    dlt_optimizer_destroy(opt);
    return st;
}

void dlt_optimizer_destroy(dlt_optimizer *opt) {
    if (!opt) return;
    for (int32_t i = 0; i < opt->n; i++) {
        if (opt->params) dlt_tensor_release(opt->params[i]);
        if (opt->bufs) dlt_tensor_release(opt->bufs[i]);
    }
    dlt_tensor_release(opt->dev);
    free(opt->params);
    free(opt->bufs);
    free(opt->l_params);
    free(opt->l_grads);
    free(opt->l_bufs);
    free(opt->l_lp);
    free(opt->l_index);
    free(opt);
}

/* A low-precision copy the step kernel can write element for element. */
static int lp_fusable(const dlt_tensor *p, const dlt_tensor *c, int32_t dtype) {
    return c && c->dtype == dtype && c->format == p->format && dlt__same_shape(c, p) && c->storage;
}

dlt_status dlt__optimizer_prepare(dlt_optimizer *opt, const char *func) {
    if (opt->momentum == 0.0) return DLT_OK;
    dlt_ctx *ctx = opt->ctx;
    int32_t made = 0; /* indices of the buffers created here, in opt->l_index (scratch) */
    for (int32_t i = 0; i < opt->n; i++) {
        dlt_tensor *p = opt->params[i];
        if (!p->grad || !p->grad_defined || opt->bufs[i]) continue;
        /* zeros: the device flag, not the contents, says whether it holds data */
        dlt_tensor *b = NULL;
        dlt_status st = dlt__tensor_new_like(p, DLT_F32, func, &b);
        if (st == DLT_OK) {
            st = ctx->be->memset0(ctx, dlt__data(b), dlt__nbytes(b));
            if (st != DLT_OK) {
                dlt_tensor_release(b);
                st = dlt__err_wrap(st, func);
            }
        }
        if (st != DLT_OK) {
            /* all or nothing: a failed step leaves no buffer behind */
            for (int32_t j = 0; j < made; j++) {
                dlt_tensor_release(opt->bufs[opt->l_index[j]]);
                opt->bufs[opt->l_index[j]] = NULL;
            }
            return st;
        }
        opt->bufs[i] = b;
        opt->l_index[made++] = i;
    }
    return DLT_OK;
}

static dlt_status optimizer_step_impl(dlt_optimizer *opt, const void *found_inf, const char *func) {
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
        opt->l_lp[2 * k] = lp_fusable(p, p->lp_copy[0], DLT_F16) ? p->lp_copy[0] : NULL;
        opt->l_lp[2 * k + 1] = lp_fusable(p, p->lp_copy[1], DLT_BF16) ? p->lp_copy[1] : NULL;
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
    dlt_status st = ctx->be->sgd_step(ctx, &L);
    if (st != DLT_OK) return dlt__err_wrap(st, func);

    const int grads_written = use_momentum && opt->nesterov && !opt->maximize && opt->weight_decay == 0.0;
    for (int32_t j = 0; j < k; j++) {
        dlt_tensor *p = opt->l_params[j];
        if (grads_written) opt->l_grads[j]->version++;
        uint64_t old = p->version++;
        for (int kk = 0; kk < 2; kk++) {
            dlt_tensor *c = p->lp_copy[kk];
            if (!c) continue;
            if (opt->l_lp[2 * j + kk]) {
                /* written by the kernel when the step is applied; unchanged with the param
                 * when it is skipped. A copy that was stale before stays marked stale,
                 * since a skipped step leaves it stale. */
                if (p->lp_version[kk] == old) p->lp_version[kk] = p->version;
            } else {
                st = ctx->be->convert(ctx, c, p);
                if (st != DLT_OK) return dlt__err_wrap(st, func);
                p->lp_version[kk] = p->version;
            }
        }
    }
    return DLT_OK;
}

dlt_status dlt_optimizer_step(dlt_optimizer *opt) {
    DLT_NULL_CHECK(opt, "dlt_optimizer_step");
    return dlt__optimizer_step_found_inf(opt, NULL, "dlt_optimizer_step");
}

dlt_status dlt_optimizer_zero_grad(dlt_optimizer *opt, int32_t set_to_none) {
    DLT_NULL_CHECK(opt, "dlt_optimizer_zero_grad");
    dlt_status st = dlt_zero_grad(opt->params, opt->n, set_to_none);
    return st == DLT_OK ? st : dlt__err_wrap(st, "dlt_optimizer_zero_grad");
}

dlt_status dlt_optimizer_set_lr(dlt_optimizer *opt, double lr) {
    static const char *F = "dlt_optimizer_set_lr";
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(check_lr(lr, F));
    dlt_optim_state_op op;
    memset(&op, 0, sizeof op);
    op.write_lr = op.write_base = 1;
    op.lr_value = op.base_value = lr;
    return dlt__optimizer_apply_state(opt, &op, F);
}

dlt_status dlt_optimizer_get_lr(dlt_optimizer *opt, double *out) {
    static const char *F = "dlt_optimizer_get_lr";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    dlt_optim_dev d;
    DLT_CHECK(read_dev(opt, &d, F));
    *out = (double)d.lr;
    return DLT_OK;
}

dlt_status dlt_optimizer_step_count(dlt_optimizer *opt, int64_t *out) {
    static const char *F = "dlt_optimizer_step_count";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    dlt_optim_dev d;
    DLT_CHECK(read_dev(opt, &d, F));
    *out = d.step;
    return DLT_OK;
}

dlt_status dlt_optimizer_last_step_applied(dlt_optimizer *opt, int32_t *out) {
    static const char *F = "dlt_optimizer_last_step_applied";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    dlt_optim_dev d;
    DLT_CHECK(read_dev(opt, &d, F));
    *out = d.last_applied;
    return DLT_OK;
}

int32_t dlt_optimizer_num_params(const dlt_optimizer *opt) { return opt ? opt->n : 0; }

dlt_tensor *dlt_optimizer_param(const dlt_optimizer *opt, int32_t i) {
    return (opt && i >= 0 && i < opt->n) ? opt->params[i] : NULL;
}

dlt_tensor *dlt_optimizer_momentum_buffer(const dlt_optimizer *opt, int32_t i) {
    return (opt && i >= 0 && i < opt->n) ? opt->bufs[i] : NULL;
}

dlt_status dlt_sgd_get_options(const dlt_optimizer *opt, double *momentum, double *dampening,
                               double *weight_decay, int32_t *nesterov, int32_t *maximize) {
    DLT_NULL_CHECK(opt, "dlt_sgd_get_options");
    if (momentum) *momentum = opt->momentum;
    if (dampening) *dampening = opt->dampening;
    if (weight_decay) *weight_decay = opt->weight_decay;
    if (nesterov) *nesterov = opt->nesterov;
    if (maximize) *maximize = opt->maximize;
    return DLT_OK;
}

/* ---- internal interface for checkpoints ---- */

int32_t dlt__optimizer_param_index(const dlt_optimizer *opt, const dlt_tensor *p) {
    if (!opt || !p) return -1;
    for (int32_t i = 0; i < opt->n; i++)
        if (opt->params[i] == p) return i;
    return -1;
}

dlt_status dlt__optimizer_get_state(dlt_optimizer *opt, double *lr, int64_t *step_count) {
    static const char *F = "dlt_optimizer_state";
    DLT_NULL_CHECK(opt, F);
    dlt_optim_dev d;
    DLT_CHECK(read_dev(opt, &d, F));
    if (lr) *lr = (double)d.lr;
    if (step_count) *step_count = d.step;
    return DLT_OK;
}

dlt_status dlt__optimizer_set_state(dlt_optimizer *opt, double lr, int64_t step_count) {
    static const char *F = "dlt_optimizer_load_state";
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(check_lr(lr, F));
    if (step_count < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "step count %lld is negative",
                        (long long)step_count);
    dlt_optim_state_op op;
    memset(&op, 0, sizeof op);
    op.write_lr = 1;
    op.lr_value = lr;
    op.write_base = !dlt__schedule_active(&opt->schedule); /* keeps base == lr */
    op.base_value = lr;
    op.write_step = 1;
    op.step_value = step_count;
    return dlt__optimizer_apply_state(opt, &op, F);
}

static dlt_status check_index(const dlt_optimizer *opt, int32_t i, const char *func) {
    if (i < 0 || i >= opt->n)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "parameter index %d is outside 0..%d", i,
                        opt->n - 1);
    return DLT_OK;
}

dlt_status dlt__optimizer_set_momentum_buffer(dlt_optimizer *opt, int32_t i, const dlt_tensor *src) {
    static const char *F = "dlt_optimizer_load_state";
    static const int32_t one = 1; /* static: the copy may still be in flight on return */
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(dlt__check_tensor(src, F, "src"));
    DLT_CHECK(check_index(opt, i, F));
    dlt_ctx *ctx = opt->ctx;
    dlt_tensor *p = opt->params[i];
    if (opt->momentum == 0.0)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "the optimizer has no momentum (momentum = 0), so no momentum buffers");
    if (src->dtype != DLT_F32)
        return dlt__err(DLT_ERR_DTYPE, F, "momentum buffer %d is %s, expected f32", i,
                        dlt_dtype_name(src->dtype));
    if (!dlt__same_shape(src, p)) {
        char a[96], b[96];
        return dlt__err(DLT_ERR_SHAPE, F, "momentum buffer %d has shape %s but the parameter has %s",
                        i, dlt__shape_str(src, a, sizeof a), dlt__shape_str(p, b, sizeof b));
    }
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot load optimizer state during graph capture");
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    dlt_tensor *b = opt->bufs[i];
    int created = 0;
    if (!b) {
        DLT_CHECK(dlt__tensor_new_like(p, DLT_F32, F, &b));
        created = 1;
    }
    dlt_status st = dlt_tensor_copy(b, src);
    if (st == DLT_OK)
        st = ctx->be->memcpy_h2d(ctx, dlt__optim_flags(opt) + i, &one, sizeof one);
    if (st != DLT_OK) {
        if (created) dlt_tensor_release(b);
        return dlt__err_wrap(st, F);
    }
    opt->bufs[i] = b;
    return DLT_OK;
}

dlt_status dlt__optimizer_reset_momentum_buffer(dlt_optimizer *opt, int32_t i) {
    static const char *F = "dlt_optimizer_load_state";
    static const int32_t zero = 0; /* static: the copy may still be in flight on return */
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(check_index(opt, i, F));
    dlt_ctx *ctx = opt->ctx;
    dlt_tensor *b = opt->bufs[i];
    if (!b) return DLT_OK; /* never created: its flag was never set */
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot load optimizer state during graph capture");
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    dlt_status st = ctx->be->memset0(ctx, dlt__data(b), dlt__nbytes(b));
    if (st == DLT_OK)
        st = ctx->be->memcpy_h2d(ctx, dlt__optim_flags(opt) + i, &zero, sizeof zero);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    b->version++;
    return DLT_OK;
}

dlt_status dlt__optimizer_buffer_initialised(dlt_optimizer *opt, int32_t i, int32_t *out) {
    static const char *F = "dlt_optimizer_state";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(check_index(opt, i, F));
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot read optimizer state during graph capture");
    int32_t v = 0;
    dlt_status st = ctx->be->memcpy_d2h(ctx, &v, dlt__optim_flags(opt) + i, sizeof v);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    *out = v != 0 && opt->bufs[i] != NULL;
    return DLT_OK;
}

/* The optimizer step under a profiler range named "optimizer". */
dlt_status dlt__optimizer_step_found_inf(dlt_optimizer *opt, const void *found_inf, const char *func) {
    dlt__range_push(opt->ctx, "optimizer");
    dlt_status st = optimizer_step_impl(opt, found_inf, func);
    dlt__range_pop(opt->ctx);
    return st;
}
