/*
 * optimizer.c - what SGD and Adam/AdamW share: the parameter list (each tensor once: a
 * tied weight listed twice is one parameter, as nanoGPT's dict of named parameters makes
 * it), parameter groups, the device block of per-step values, the step entry points, the
 * lr setters and getters, and the gradients interface of the GradScaler.
 *
 * Device block (lib/kernel/optim.h): dlt_optim_dev (group 0's lr and base, the
 * applied-step count, last_applied), DLT_OPTIM_MAX_GROUPS - 1 group lrs, then one int32 per
 * parameter. Invariant kept by every writer: with no schedule active, each group's base ==
 * its lr. Adding a parameter group makes a larger block (copied on the device) and frees
 * the old one, which is why it is refused during graph capture.
 *
 * Everything a step allocates (momentum buffers, moments) is created before anything
 * changes (dlt__optimizer_prepare), so a step that runs out of memory leaves parameters,
 * state and gradients as they were.
 */
#include <stdatomic.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "optim_internal.h"

static atomic_uint_fast64_t next_uid = 1;

static const char *kind_name(const dlt_optimizer *opt) {
    if (opt->kind == DLT__OPT_SGD) return "SGD";
    return opt->decoupled ? "AdamW" : "Adam";
}

/* PyTorch's check (lr >= 0), plus the range of the fp32 the lr lives in on the device: an
 * lr above FLT_MAX would become inf there (and a checkpoint holding it could not load). */
dlt_status dlt__optimizer_check_lr(double lr, const char *func) {
    if (!(lr >= 0.0)) return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "Invalid learning rate: %g", lr);
    if (!(lr <= (double)FLT_MAX))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "Invalid learning rate: %g (the optimizer keeps it in fp32: at most %g)", lr,
                        (double)FLT_MAX);
    return DLT_OK;
}

dlt_status dlt__optimizer_check_params(const dlt_optimizer *existing, dlt_tensor *const *params,
                                       int32_t n, const char *func, dlt_tensor ***uniq,
                                       int32_t *n_uniq) {
    if (n < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "optimizer got an empty parameter list (n = %d)", n);
    const dlt_ctx *ctx = existing ? existing->ctx : NULL;
    for (int32_t i = 0; i < n; i++) {
        const dlt_tensor *p = params[i];
        if (!p) return dlt__err(DLT_ERR_NULL_POINTER, func, "params[%d] is NULL", i);
        if (!ctx) ctx = p->ctx;
        if (p->ctx != ctx)
            return dlt__err(DLT_ERR_CONTEXT_MISMATCH, func,
                            "params[%d] belongs to another context than %s (%s vs %s)", i,
                            existing ? "the optimizer" : "params[0]", p->ctx->be->name, ctx->be->name);
        if (p->dtype != DLT_F32)
            return dlt__err(DLT_ERR_DTYPE, func,
                            "params[%d] is %s; the optimizer keeps fp32 master parameters "
                            "(autocast makes the low-precision copies)",
                            i, dlt_dtype_name(p->dtype));
        if (!p->requires_grad)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                            "params[%d] does not require a gradient (dlt_tensor_set_requires_grad)", i);
        if (existing && dlt__optimizer_param_index(existing, p) >= 0)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                            "some parameters appear in more than one parameter group (params[%d])", i);
    }
    dlt_tensor **u = malloc((size_t)n * sizeof *u);
    if (!u) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %d entries", n);
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        int seen = 0; /* a tied weight passed twice is one parameter */
        for (int32_t j = 0; j < k && !seen; j++) seen = u[j] == params[i];
        if (!seen) u[k++] = params[i];
    }
    *uniq = u;
    *n_uniq = k;
    return DLT_OK;
}

/* Grows the per-parameter arrays to hold cap parameters. Only capacity changes, so a
 * failure part-way leaves the optimizer valid. */
static dlt_status reserve(dlt_optimizer *opt, int32_t cap, const char *func) {
    if (cap <= opt->cap) return DLT_OK;
    void **arrays[] = {(void **)&opt->params,   (void **)&opt->group,    (void **)&opt->bufs,
                       (void **)&opt->exp_avg,  (void **)&opt->exp_avg_sq, (void **)&opt->l_params,
                       (void **)&opt->l_grads,  (void **)&opt->l_bufs,   (void **)&opt->l_bufs2,
                       (void **)&opt->l_index,  (void **)&opt->l_group,  (void **)&opt->g_list};
    const size_t elem[] = {sizeof(dlt_tensor *), sizeof(int32_t),      sizeof(dlt_tensor *),
                           sizeof(dlt_tensor *), sizeof(dlt_tensor *), sizeof(dlt_tensor *),
                           sizeof(dlt_tensor *), sizeof(dlt_tensor *), sizeof(dlt_tensor *),
                           sizeof(int32_t),      sizeof(int32_t),      sizeof(dlt_tensor *)};
    for (size_t a = 0; a < sizeof arrays / sizeof arrays[0]; a++) {
        char *p = dlt__host_realloc(opt->ctx, *arrays[a], (size_t)cap * elem[a]);
        if (!p) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the parameter lists (n = %d)", cap);
        memset(p + (size_t)opt->cap * elem[a], 0, (size_t)(cap - opt->cap) * elem[a]);
        *arrays[a] = p;
    }
    dlt_tensor **lp = dlt__host_realloc(opt->ctx, opt->l_lp, 2 * (size_t)cap * sizeof *lp);
    if (!lp) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the parameter lists (n = %d)", cap);
    opt->l_lp = lp;
    opt->cap = cap;
    return DLT_OK;
}

/* A zeroed device block for n parameters. */
static dlt_status new_block(dlt_ctx *ctx, int32_t n, const char *func, dlt_tensor **out) {
    int64_t nbytes = (int64_t)(dlt__optim_flags_offset() + (size_t)n * sizeof(int32_t));
    DLT_CHECK(dlt__tensor_new(ctx, DLT_U8, &nbytes, 1, DLT_FORMAT_CONTIGUOUS, func, out));
    dlt_status st = ctx->be->memset0(ctx, dlt__data(*out), (size_t)nbytes);
    if (st != DLT_OK) {
        dlt_tensor_release(*out);
        *out = NULL;
        return dlt__err_wrap(st, func);
    }
    return DLT_OK;
}

static dlt_status apply_state_to(dlt_optimizer *opt, dlt_tensor *block, const dlt_optim_state_op *op,
                                 int32_t n_groups, const char *func) {
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    if (!ctx->be->sgd_state) return dlt__be_missing(ctx, func, "sgd_state");
    dlt_optim_state_op o = *op;
    o.n_groups = n_groups;
    dlt_status st = ctx->be->sgd_state(ctx, dlt__data(block), &o);
    return st == DLT_OK ? st : dlt__err_wrap(st, func);
}

dlt_status dlt__optimizer_apply_state(dlt_optimizer *opt, const dlt_optim_state_op *op,
                                      const char *func) {
    return apply_state_to(opt, opt->dev, op, opt->n_groups, func);
}

/* lr and base of group g (a new group: base = lr, evaluated when a schedule runs). */
static dlt_optim_state_op group_lr_op(const dlt_optimizer *opt, int32_t g, double lr) {
    dlt_optim_state_op op;
    memset(&op, 0, sizeof op);
    op.one_group = 1;
    op.group = g;
    op.write_lr = op.write_base = 1;
    op.lr_value = op.base_value = lr;
    if (dlt__schedule_active(&opt->schedule)) {
        op.evaluate = 1;
        op.schedule = opt->schedule;
    }
    return op;
}

dlt_status dlt__optimizer_new(int32_t kind, dlt_tensor *const *uniq, int32_t n, double lr,
                              double weight_decay, const char *func, dlt_optimizer **out) {
    dlt_ctx *ctx = uniq[0]->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    dlt_optimizer *opt = dlt__host_calloc(ctx, 1, sizeof *opt);
    if (!opt) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the optimizer");
    opt->ctx = ctx;
    opt->uid = atomic_fetch_add(&next_uid, 1);
    opt->kind = kind;
    opt->n_groups = 1;
    opt->group_wd[0] = weight_decay;
    dlt_status st;
    DLT_CHECK_GOTO(st, reserve(opt, n, func), fail);
    DLT_CHECK_GOTO(st, new_block(ctx, n, func, &opt->dev), fail);
    dlt_optim_state_op op = group_lr_op(opt, 0, lr);
    DLT_CHECK_GOTO(st, dlt__optimizer_apply_state(opt, &op, func), fail);
    for (int32_t i = 0; i < n; i++) opt->params[i] = dlt_tensor_retain(uniq[i]);
    opt->n = n;
    *out = opt;
    return DLT_OK;
fail:
    dlt_optimizer_destroy(opt);
    return st;
}

void dlt_optimizer_destroy(dlt_optimizer *opt) {
    if (!opt) return;
    for (int32_t i = 0; i < opt->n; i++) {
        dlt_tensor_release(opt->params[i]);
        dlt_tensor_release(opt->bufs[i]);
        dlt_tensor_release(opt->exp_avg[i]);
        dlt_tensor_release(opt->exp_avg_sq[i]);
    }
    dlt_tensor_release(opt->dev);
    dlt_tensor_release(opt->clip_total);
    dlt_tensor_release(opt->clip_coef);
    free(opt->params);
    free(opt->group);
    free(opt->bufs);
    free(opt->exp_avg);
    free(opt->exp_avg_sq);
    free(opt->l_params);
    free(opt->l_grads);
    free(opt->l_bufs);
    free(opt->l_bufs2);
    free(opt->l_lp);
    free(opt->l_index);
    free(opt->l_group);
    free(opt->g_list);
    free(opt);
}

dlt_status dlt__optimizer_read_dev(dlt_optimizer *opt, dlt_optim_dev *d, const char *func) {
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, func, "cannot read optimizer state during graph capture");
    dlt_status st = ctx->be->memcpy_d2h(ctx, d, dlt__data(opt->dev), sizeof *d);
    return st == DLT_OK ? st : dlt__err_wrap(st, func);
}

int dlt__optimizer_lp_fusable(const dlt_tensor *p, const dlt_tensor *c, int32_t dtype) {
    return c && c->dtype == dtype && c->format == p->format && dlt__same_shape(c, p) && c->storage;
}

dlt_status dlt__optimizer_after_step(dlt_optimizer *opt, int32_t k, const char *func) {
    dlt_ctx *ctx = opt->ctx;
    for (int32_t j = 0; j < k; j++) {
        dlt_tensor *p = opt->l_params[j];
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
                dlt_status st = ctx->be->convert(ctx, c, p);
                if (st != DLT_OK) return dlt__err_wrap(st, func);
                p->lp_version[kk] = p->version;
            }
        }
    }
    return DLT_OK;
}

/* Creates the zero-filled state tensors of every slot for the parameters that have a
 * gradient and no state yet, all or nothing. */
static dlt_status alloc_states(dlt_optimizer *opt, dlt_tensor **slots[], int32_t n_slots,
                               const char *func) {
    dlt_ctx *ctx = opt->ctx;
    int32_t made = 0; /* indices of the parameters given state here, in opt->l_index */
    dlt_status st = DLT_OK;
    for (int32_t i = 0; i < opt->n && st == DLT_OK; i++) {
        dlt_tensor *p = opt->params[i];
        if (!p->grad || !p->grad_defined || slots[0][i]) continue;
        for (int32_t s = 0; s < n_slots && st == DLT_OK; s++) {
            /* zeros: the device int32, not the contents, says whether it holds data */
            dlt_tensor *b = NULL;
            st = dlt__tensor_new_like(p, DLT_F32, func, &b);
            if (st == DLT_OK) {
                st = ctx->be->memset0(ctx, dlt__data(b), dlt__nbytes(b));
                if (st != DLT_OK) st = dlt__err_wrap(st, func);
            }
            if (st == DLT_OK) slots[s][i] = b;
            else dlt_tensor_release(b);
        }
        opt->l_index[made++] = i; /* also a partly made one, for the rollback */
    }
    if (st != DLT_OK) /* all or nothing: a failed step leaves no state behind */
        for (int32_t j = 0; j < made; j++)
            for (int32_t s = 0; s < n_slots; s++) {
                dlt_tensor_release(slots[s][opt->l_index[j]]);
                slots[s][opt->l_index[j]] = NULL;
            }
    return st;
}

dlt_status dlt__optimizer_prepare(dlt_optimizer *opt, const char *func) {
    if (opt->kind == DLT__OPT_ADAM) {
        dlt_tensor **slots[2] = {opt->exp_avg, opt->exp_avg_sq};
        return alloc_states(opt, slots, 2, func);
    }
    if (opt->momentum == 0.0) return DLT_OK;
    dlt_tensor **slots[1] = {opt->bufs};
    return alloc_states(opt, slots, 1, func);
}

dlt_ctx *dlt__optimizer_ctx(const dlt_optimizer *opt) { return opt->ctx; }
uint64_t dlt__optimizer_uid(const dlt_optimizer *opt) { return opt->uid; }

void dlt__optimizer_grads(dlt_optimizer *opt, dlt_tensor ***grads, int32_t *n) {
    int32_t k = 0;
    for (int32_t i = 0; i < opt->n; i++) {
        dlt_tensor *p = opt->params[i];
        if (p->grad && p->grad_defined) opt->g_list[k++] = p->grad;
    }
    *grads = opt->g_list;
    *n = k;
}

/* The optimizer step under a profiler range named "optimizer". */
dlt_status dlt__optimizer_step_found_inf(dlt_optimizer *opt, const void *found_inf, const char *func) {
    dlt__range_push(opt->ctx, "optimizer");
    dlt_status st = opt->kind == DLT__OPT_ADAM ? dlt__adamw_step_impl(opt, found_inf, func)
                                               : dlt__sgd_step_impl(opt, found_inf, func);
    dlt__range_pop(opt->ctx);
    return st;
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

/* ---- learning rates ---- */

static dlt_status check_group(const dlt_optimizer *opt, int32_t g, const char *func) {
    if (g < 0 || g >= opt->n_groups)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "parameter group %d is outside 0..%d", g,
                        opt->n_groups - 1);
    return DLT_OK;
}

dlt_status dlt_optimizer_set_lr(dlt_optimizer *opt, double lr) {
    static const char *F = "dlt_optimizer_set_lr";
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(dlt__optimizer_check_lr(lr, F));
    dlt_optim_state_op op;
    memset(&op, 0, sizeof op); /* every group */
    op.write_lr = op.write_base = 1;
    op.lr_value = op.base_value = lr;
    return dlt__optimizer_apply_state(opt, &op, F);
}

dlt_status dlt_optimizer_set_group_lr(dlt_optimizer *opt, int32_t group, double lr) {
    static const char *F = "dlt_optimizer_set_group_lr";
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(check_group(opt, group, F));
    DLT_CHECK(dlt__optimizer_check_lr(lr, F));
    dlt_optim_state_op op;
    memset(&op, 0, sizeof op);
    op.one_group = 1;
    op.group = group;
    op.write_lr = op.write_base = 1;
    op.lr_value = op.base_value = lr;
    return dlt__optimizer_apply_state(opt, &op, F);
}

dlt_status dlt__optimizer_get_group_lr(dlt_optimizer *opt, int32_t g, double *lr) {
    static const char *F = "dlt_optimizer_get_group_lr";
    DLT_CHECK(check_group(opt, g, F));
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot read optimizer state during graph capture");
    char head[sizeof(dlt_optim_dev) + (DLT_OPTIM_MAX_GROUPS - 1) * sizeof(dlt_optim_group_dev)];
    dlt_status st = ctx->be->memcpy_d2h(ctx, head, dlt__data(opt->dev), sizeof head);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    *lr = (double)*dlt__optim_lr_at((dlt_optim_dev *)(void *)head, g);
    return DLT_OK;
}

dlt_status dlt_optimizer_get_group_lr(dlt_optimizer *opt, int32_t group, double *out) {
    DLT_NULL_CHECK(opt, "dlt_optimizer_get_group_lr");
    DLT_NULL_CHECK(out, "dlt_optimizer_get_group_lr");
    return dlt__optimizer_get_group_lr(opt, group, out);
}

dlt_status dlt_optimizer_get_lr(dlt_optimizer *opt, double *out) {
    static const char *F = "dlt_optimizer_get_lr";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    dlt_optim_dev d;
    DLT_CHECK(dlt__optimizer_read_dev(opt, &d, F));
    *out = (double)d.lr;
    return DLT_OK;
}

dlt_status dlt_optimizer_step_count(dlt_optimizer *opt, int64_t *out) {
    static const char *F = "dlt_optimizer_step_count";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    dlt_optim_dev d;
    DLT_CHECK(dlt__optimizer_read_dev(opt, &d, F));
    *out = d.step;
    return DLT_OK;
}

dlt_status dlt_optimizer_last_step_applied(dlt_optimizer *opt, int32_t *out) {
    static const char *F = "dlt_optimizer_last_step_applied";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    dlt_optim_dev d;
    DLT_CHECK(dlt__optimizer_read_dev(opt, &d, F));
    *out = d.last_applied;
    return DLT_OK;
}

/* ---- parameters and groups ---- */

int32_t dlt_optimizer_num_params(const dlt_optimizer *opt) { return opt ? opt->n : 0; }

dlt_tensor *dlt_optimizer_param(const dlt_optimizer *opt, int32_t i) {
    return (opt && i >= 0 && i < opt->n) ? opt->params[i] : NULL;
}

dlt_tensor *dlt_optimizer_momentum_buffer(const dlt_optimizer *opt, int32_t i) {
    return (opt && i >= 0 && i < opt->n) ? opt->bufs[i] : NULL;
}

dlt_tensor *dlt_optimizer_exp_avg(const dlt_optimizer *opt, int32_t i) {
    return (opt && i >= 0 && i < opt->n) ? opt->exp_avg[i] : NULL;
}

dlt_tensor *dlt_optimizer_exp_avg_sq(const dlt_optimizer *opt, int32_t i) {
    return (opt && i >= 0 && i < opt->n) ? opt->exp_avg_sq[i] : NULL;
}

const char *dlt_optimizer_kind(const dlt_optimizer *opt) { return opt ? kind_name(opt) : ""; }

int32_t dlt_optimizer_num_param_groups(const dlt_optimizer *opt) { return opt ? opt->n_groups : 0; }

int32_t dlt_optimizer_param_group_of(const dlt_optimizer *opt, int32_t i) {
    return (opt && i >= 0 && i < opt->n) ? opt->group[i] : -1;
}

dlt_status dlt_optimizer_set_group_weight_decay(dlt_optimizer *opt, int32_t group, double weight_decay) {
    static const char *F = "dlt_optimizer_set_group_weight_decay";
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(check_group(opt, group, F));
    if (!(weight_decay >= 0.0) || !isfinite(weight_decay))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid weight_decay value: %g", weight_decay);
    opt->group_wd[group] = weight_decay;
    if (opt->kind == DLT__OPT_SGD) opt->weight_decay = weight_decay;
    return DLT_OK;
}

dlt_status dlt_optimizer_get_group_weight_decay(const dlt_optimizer *opt, int32_t group, double *out) {
    static const char *F = "dlt_optimizer_get_group_weight_decay";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(check_group(opt, group, F));
    *out = opt->group_wd[group];
    return DLT_OK;
}

dlt_status dlt_optimizer_add_param_group(dlt_optimizer *opt, dlt_tensor *const *params, int32_t n,
                                         double lr, double weight_decay) {
    static const char *F = "dlt_optimizer_add_param_group";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(params, F);
    if (opt->kind == DLT__OPT_SGD)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F,
                        "SGD keeps one parameter group in libdltrain (use Adam/AdamW for groups)");
    if (opt->n_groups >= DLT_OPTIM_MAX_GROUPS)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "an optimizer holds at most %d parameter groups",
                        DLT_OPTIM_MAX_GROUPS);
    DLT_CHECK(dlt__optimizer_check_lr(lr, F));
    if (!(weight_decay >= 0.0) || !isfinite(weight_decay))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "Invalid weight_decay value: %g", weight_decay);
    dlt_ctx *ctx = opt->ctx;
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot add a parameter group during graph capture");
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    dlt_tensor **uniq = NULL;
    int32_t k = 0;
    DLT_CHECK(dlt__optimizer_check_params(opt, params, n, F, &uniq, &k));
    const int32_t g = opt->n_groups;
    dlt_tensor *block = NULL;
    dlt_status st = reserve(opt, opt->n + k, F);
    if (st == DLT_OK) st = new_block(ctx, opt->n + k, F, &block);
    if (st == DLT_OK) { /* the old block's values, then the new group's lr */
        st = ctx->be->memcpy_d2d(ctx, dlt__data(block), dlt__data(opt->dev),
                                 dlt__optim_flags_offset() + (size_t)opt->n * sizeof(int32_t));
        if (st != DLT_OK) st = dlt__err_wrap(st, F);
    }
    if (st == DLT_OK) {
        dlt_optim_state_op op = group_lr_op(opt, g, lr);
        st = apply_state_to(opt, block, &op, g + 1, F);
    }
    if (st != DLT_OK) {
        dlt_tensor_release(block);
        free(uniq);
        return st;
    }
    dlt_tensor_release(opt->dev);
    opt->dev = block;
    for (int32_t i = 0; i < k; i++) {
        opt->params[opt->n + i] = dlt_tensor_retain(uniq[i]);
        opt->group[opt->n + i] = g;
    }
    opt->n += k;
    opt->group_wd[g] = weight_decay;
    opt->n_groups = g + 1;
    free(uniq);
    return DLT_OK;
}

int32_t dlt__optimizer_param_index(const dlt_optimizer *opt, const dlt_tensor *p) {
    if (!opt || !p) return -1;
    for (int32_t i = 0; i < opt->n; i++)
        if (opt->params[i] == p) return i;
    return -1;
}
