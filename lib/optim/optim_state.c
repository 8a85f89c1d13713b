/*
 * optim_state.c - reading and replacing an optimizer's state, for checkpoints (lib/io) and
 * the public getters: the applied-step count and lrs, the momentum buffers (SGD), the
 * moments and per-parameter step counts (Adam/AdamW).
 *
 * "Holds data": an SGD momentum buffer may exist before a step has filled it (the first
 * step that had a gradient was skipped by the GradScaler), so its device flag says whether
 * PyTorch would have state["momentum_buffer"] for it. Adam's moments likewise exist from
 * the first step with a gradient, and the parameter's step count (0 = no state) says
 * whether PyTorch would have state for it.
 */
#include <string.h>

#include "optim_internal.h"

dlt_status dlt__optimizer_get_state(dlt_optimizer *opt, double *lr, int64_t *step_count) {
    static const char *F = "dlt_optimizer_state";
    DLT_NULL_CHECK(opt, F);
    dlt_optim_dev d;
    DLT_CHECK(dlt__optimizer_read_dev(opt, &d, F));
    if (lr) *lr = (double)d.lr;
    if (step_count) *step_count = d.step;
    return DLT_OK;
}

dlt_status dlt__optimizer_set_state(dlt_optimizer *opt, double lr, int64_t step_count) {
    static const char *F = "dlt_optimizer_load_state";
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(dlt__optimizer_check_lr(lr, F));
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

dlt_status dlt__optimizer_set_group_lr_state(dlt_optimizer *opt, int32_t g, double lr) {
    static const char *F = "dlt_optimizer_load_state";
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(dlt__optimizer_check_lr(lr, F));
    if (g < 0 || g >= opt->n_groups)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "parameter group %d is outside 0..%d", g,
                        opt->n_groups - 1);
    dlt_optim_state_op op;
    memset(&op, 0, sizeof op);
    op.one_group = 1;
    op.group = g;
    op.write_lr = 1;
    op.lr_value = lr;
    op.write_base = !dlt__schedule_active(&opt->schedule);
    op.base_value = lr;
    return dlt__optimizer_apply_state(opt, &op, F);
}

static dlt_status check_index(const dlt_optimizer *opt, int32_t i, const char *func) {
    if (i < 0 || i >= opt->n)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "parameter index %d is outside 0..%d", i,
                        opt->n - 1);
    return DLT_OK;
}

static dlt_status no_capture(dlt_ctx *ctx, const char *func) {
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, func, "cannot load optimizer state during graph capture");
    return dlt__ctx_ok(ctx, func);
}

dlt_status dlt__optimizer_set_state_tensor(dlt_optimizer *opt, int32_t i, int32_t slot,
                                           const dlt_tensor *src) {
    static const char *F = "dlt_optimizer_load_state";
    static const int32_t one = 1; /* static: the copy may still be in flight on return */
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(dlt__check_tensor(src, F, "src"));
    DLT_CHECK(check_index(opt, i, F));
    dlt_ctx *ctx = opt->ctx;
    dlt_tensor *p = opt->params[i];
    dlt_tensor **where = NULL;
    if (opt->kind == DLT__OPT_SGD && slot == 0) where = &opt->bufs[i];
    if (opt->kind == DLT__OPT_ADAM && (slot == 0 || slot == 1))
        where = slot == 0 ? &opt->exp_avg[i] : &opt->exp_avg_sq[i];
    if (!where)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "%s has no state slot %d", dlt_optimizer_kind(opt), slot);
    if (opt->kind == DLT__OPT_SGD && opt->momentum == 0.0)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "the optimizer has no momentum (momentum = 0), so no momentum buffers");
    if (src->dtype != DLT_F32)
        return dlt__err(DLT_ERR_DTYPE, F, "state tensor %d of parameter %d is %s, expected f32", slot,
                        i, dlt_dtype_name(src->dtype));
    if (!dlt__same_shape(src, p)) {
        char a[96], b[96];
        return dlt__err(DLT_ERR_SHAPE, F, "state tensor %d of parameter %d has shape %s but the parameter has %s",
                        slot, i, dlt__shape_str(src, a, sizeof a), dlt__shape_str(p, b, sizeof b));
    }
    DLT_CHECK(no_capture(ctx, F));
    dlt_tensor *b = *where;
    int created = 0;
    if (!b) {
        DLT_CHECK(dlt__tensor_new_like(p, DLT_F32, F, &b));
        created = 1;
    }
    dlt_status st = dlt_tensor_copy(b, src);
    if (st == DLT_OK && opt->kind == DLT__OPT_SGD) /* holds data now */
        st = ctx->be->memcpy_h2d(ctx, dlt__optim_flags(opt) + i, &one, sizeof one);
    if (st != DLT_OK) {
        if (created) dlt_tensor_release(b);
        return dlt__err_wrap(st, F);
    }
    *where = b;
    return DLT_OK;
}

dlt_status dlt__optimizer_set_momentum_buffer(dlt_optimizer *opt, int32_t i, const dlt_tensor *src) {
    return dlt__optimizer_set_state_tensor(opt, i, 0, src);
}

dlt_status dlt__optimizer_reset_momentum_buffer(dlt_optimizer *opt, int32_t i) {
    static const char *F = "dlt_optimizer_load_state";
    static const int32_t zero = 0; /* static: the copy may still be in flight on return */
    DLT_NULL_CHECK(opt, F);
    DLT_CHECK(check_index(opt, i, F));
    dlt_ctx *ctx = opt->ctx;
    dlt_tensor *slots[2] = {opt->bufs[i], NULL};
    if (opt->kind == DLT__OPT_ADAM) {
        slots[0] = opt->exp_avg[i];
        slots[1] = opt->exp_avg_sq[i];
    }
    if (!slots[0]) return DLT_OK; /* never created: its flag was never set */
    DLT_CHECK(no_capture(ctx, F));
    dlt_status st = DLT_OK;
    for (int s = 0; s < 2 && st == DLT_OK; s++)
        if (slots[s]) st = ctx->be->memset0(ctx, dlt__data(slots[s]), dlt__nbytes(slots[s]));
    if (st == DLT_OK) st = ctx->be->memcpy_h2d(ctx, dlt__optim_flags(opt) + i, &zero, sizeof zero);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    for (int s = 0; s < 2; s++)
        if (slots[s]) slots[s]->version++;
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
    const dlt_tensor *b = opt->kind == DLT__OPT_ADAM ? opt->exp_avg[i] : opt->bufs[i];
    *out = v != 0 && b != NULL;
    return DLT_OK;
}

dlt_status dlt__optimizer_get_param_steps(dlt_optimizer *opt, int32_t *steps) {
    static const char *F = "dlt_optimizer_state";
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot read optimizer state during graph capture");
    if (opt->kind != DLT__OPT_ADAM)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "%s keeps no per-parameter step counts",
                        dlt_optimizer_kind(opt));
    dlt_status st = ctx->be->memcpy_d2h(ctx, steps, dlt__optim_flags(opt), (size_t)opt->n * sizeof *steps);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

dlt_status dlt__optimizer_set_param_steps(dlt_optimizer *opt, const int32_t *steps) {
    static const char *F = "dlt_optimizer_load_state";
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(no_capture(ctx, F));
    if (opt->kind != DLT__OPT_ADAM)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "%s keeps no per-parameter step counts",
                        dlt_optimizer_kind(opt));
    for (int32_t i = 0; i < opt->n; i++)
        if (steps[i] < 0)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "step count %d of parameter %d is negative",
                            steps[i], i);
    dlt_status st = ctx->be->memcpy_h2d(ctx, dlt__optim_flags(opt), steps, (size_t)opt->n * sizeof *steps);
    if (st == DLT_OK) st = ctx->be->synchronize(ctx); /* steps is the caller's memory */
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

dlt_status dlt_optimizer_param_step(dlt_optimizer *opt, int32_t i, int64_t *out) {
    static const char *F = "dlt_optimizer_param_step";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(check_index(opt, i, F));
    if (opt->kind != DLT__OPT_ADAM) return dlt_optimizer_step_count(opt, out);
    dlt_ctx *ctx = opt->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot read optimizer state during graph capture");
    int32_t v = 0;
    dlt_status st = ctx->be->memcpy_d2h(ctx, &v, dlt__optim_flags(opt) + i, sizeof v);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    *out = v;
    return DLT_OK;
}
