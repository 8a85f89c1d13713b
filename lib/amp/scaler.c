/*
 * scaler.c - torch.amp.GradScaler with the skip decision on the device.
 *
 * Device state (on the scaler's context): scale (f32, 0-dim, PyTorch's _scale),
 * growth_tracker (i32, 0-dim) and one found_inf flag (f32) per optimizer record.
 *   scale(loss)   = dlt_mul_scalar(loss, scale, 1.0): one kernel, differentiable in loss.
 *   unscale(opt)  = clear the record's flag, then one multi-tensor kernel over the
 *                   optimizer's defined gradients: flag = 1 on any inf/NaN, g *= 1/scale.
 *   step(opt)     = unscale if not done, then the optimizer's step kernel with the flag,
 *                   which skips the update on the device (PyTorch's fused-optimizer path:
 *                   the same numbers as its found_inf.item() + host skip, without the sync).
 *   update()      = PyTorch's _amp_update_scale_ (one single-thread kernel) over the sum of
 *                   the flags of the optimizers used since the last update.
 * Nothing here waits for the device; get_scale, found_inf and get_state synchronise.
 *
 * Per-optimizer stages (READY -> UNSCALED -> STEPPED -> READY at update) are tracked on the
 * host, keyed by the optimizer's pointer and unique id, to reproduce PyTorch's misuse
 * errors (RuntimeError/AssertionError there, DLT_ERR_INVALID_STATE here, same wording).
 * At most DLT_SCALER_MAX_OPT optimizers can be in flight between two updates.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../optim/optim_grads.h"

#define DLT_SCALER_MAX_OPT 32

enum { STAGE_READY = 0, STAGE_UNSCALED = 1, STAGE_STEPPED = 2 };

typedef struct scaler_rec {
    const dlt_optimizer *opt; /* not retained: a key only */
    uint64_t uid;
    int32_t stage;
} scaler_rec;

struct dlt_grad_scaler {
    dlt_ctx *ctx;
    int32_t enabled;
    double growth_factor, backoff_factor;
    int32_t growth_interval;
    dlt_tensor *scale;   /* f32 [] */
    dlt_tensor *tracker; /* i32 [] */
    dlt_tensor *found;   /* f32 [DLT_SCALER_MAX_OPT]: found_inf per record slot */
    scaler_rec recs[DLT_SCALER_MAX_OPT];
    int32_t nrec;
    /* dist: reduces each new found_inf flag across processes (dlt_grad_scaler_set_comm) */
    dlt__found_inf_hook found_hook;
    void *found_hook_user;
};

void dlt__grad_scaler_set_found_inf_hook(dlt_grad_scaler *s, dlt__found_inf_hook fn, void *user) {
    s->found_hook = fn;
    s->found_hook_user = fn ? user : NULL;
}

static dlt_status check_options(double init_scale, double growth_factor, double backoff_factor,
                                int32_t growth_interval, const char *func) {
    if (!(growth_factor > 1.0) || !isfinite(growth_factor))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "The growth factor must be > 1.0 (and finite), got %g", growth_factor);
    if (!(backoff_factor < 1.0 && backoff_factor > 0.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "The backoff factor must be < 1.0 and > 0, got %g", backoff_factor);
    if (growth_interval < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "growth_interval must be >= 1, got %d",
                        growth_interval);
    if (!(init_scale > 0.0) || !isfinite(init_scale) || !isfinite((float)init_scale))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "the scale must be finite (in fp32) and positive, got %g", init_scale);
    return DLT_OK;
}

static dlt_status fail_wrap(dlt_status st, const char *func) {
    return st == DLT_OK ? st : dlt__err_wrap(st, func);
}

dlt_status dlt_grad_scaler_create(dlt_ctx *ctx, double init_scale, double growth_factor,
                                  double backoff_factor, int32_t growth_interval, int32_t enabled,
                                  dlt_grad_scaler **out) {
    static const char *F = "dlt_grad_scaler_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    if (enabled) DLT_CHECK(check_options(init_scale, growth_factor, backoff_factor, growth_interval, F));
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    dlt_grad_scaler *s = dlt__host_calloc(ctx, 1, sizeof *s);
    if (!s) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the scaler");
    s->ctx = ctx;
    s->enabled = enabled != 0;
    s->growth_factor = growth_factor;
    s->backoff_factor = backoff_factor;
    s->growth_interval = growth_interval;
    if (!s->enabled) {
        *out = s;
        return DLT_OK;
    }
    dlt_status st;
    int64_t nf = DLT_SCALER_MAX_OPT;
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, NULL, 0, DLT_FORMAT_CONTIGUOUS, F, &s->scale), fail);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_I32, NULL, 0, DLT_FORMAT_CONTIGUOUS, F, &s->tracker), fail);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, &nf, 1, DLT_FORMAT_CONTIGUOUS, F, &s->found), fail);
    DLT_CHECK_GOTO(st, fail_wrap(ctx->be->fill(ctx, s->scale, init_scale), F), fail);
    DLT_CHECK_GOTO(st, fail_wrap(ctx->be->memset0(ctx, dlt__data(s->tracker), sizeof(int32_t)), F), fail);
    DLT_CHECK_GOTO(st, fail_wrap(ctx->be->memset0(ctx, dlt__data(s->found), dlt__nbytes(s->found)), F), fail);
    *out = s;
    return DLT_OK;
fail:
    dlt_grad_scaler_destroy(s);
    return st;
}

void dlt_grad_scaler_destroy(dlt_grad_scaler *s) {
    if (!s) return;
    dlt_tensor_release(s->scale);
    dlt_tensor_release(s->tracker);
    dlt_tensor_release(s->found);
    free(s);
}

int32_t dlt_grad_scaler_is_enabled(const dlt_grad_scaler *s) { return s ? s->enabled : 0; }

dlt_tensor *dlt_grad_scaler_scale_tensor(dlt_grad_scaler *s) {
    return (s && s->enabled) ? s->scale : NULL;
}

dlt_status dlt_grad_scaler_scale(dlt_grad_scaler *s, dlt_tensor *loss, dlt_tensor **out) {
    static const char *F = "dlt_grad_scaler_scale";
    DLT_NULL_CHECK(s, F);
    DLT_CHECK(dlt__check_tensor(loss, F, "loss"));
    DLT_NULL_CHECK(out, F);
    if (!s->enabled) {
        *out = dlt_tensor_retain(loss);
        return DLT_OK;
    }
    if (loss->ctx != s->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F, "the loss and the scaler belong to different contexts");
    dlt_status st = dlt_mul_scalar(loss, s->scale, 1.0, out);
    return fail_wrap(st, F);
}

/* The record of opt, created (or recycled from an idle one) when missing; NULL only when
 * DLT_SCALER_MAX_OPT optimizers are in flight. */
static scaler_rec *find_rec(dlt_grad_scaler *s, const dlt_optimizer *opt) {
    for (int32_t i = 0; i < s->nrec; i++)
        if (s->recs[i].opt == opt && s->recs[i].uid == dlt__optimizer_uid(opt)) return &s->recs[i];
    return NULL;
}

static dlt_status get_rec(dlt_grad_scaler *s, dlt_optimizer *opt, const char *func,
                          scaler_rec **out) {
    if (dlt__optimizer_ctx(opt) != s->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, func,
                        "the optimizer and the scaler belong to different contexts");
    scaler_rec *r = find_rec(s, opt);
    if (!r) {
        if (s->nrec < DLT_SCALER_MAX_OPT) {
            r = &s->recs[s->nrec++];
        } else {
            for (int32_t i = 0; i < s->nrec && !r; i++)
                if (s->recs[i].stage == STAGE_READY) r = &s->recs[i];
            if (!r)
                return dlt__err(DLT_ERR_NOT_SUPPORTED, func,
                                "more than %d optimizers used with one scaler between updates",
                                DLT_SCALER_MAX_OPT);
        }
        r->opt = opt;
        r->uid = dlt__optimizer_uid(opt);
        r->stage = STAGE_READY;
    }
    *out = r;
    return DLT_OK;
}

static float *rec_flag(dlt_grad_scaler *s, const scaler_rec *r) {
    return (float *)dlt__data(s->found) + (r - s->recs);
}

/* Clears the record's flag and runs the unscale kernel over the defined gradients. */
static dlt_status unscale_rec(dlt_grad_scaler *s, dlt_optimizer *opt, scaler_rec *r, const char *func) {
    dlt_ctx *ctx = s->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    if (!ctx->be->amp_unscale) return dlt__be_missing(ctx, func, "amp_unscale");
    dlt_tensor **grads = NULL; /* the optimizer's list (optim_grads.h), each gradient once */
    int32_t k = 0;
    dlt__optimizer_grads(opt, &grads, &k);
    for (int32_t i = 0; i < k; i++)
        if (grads[i]->dtype == DLT_F16)
            return dlt__err(DLT_ERR_DTYPE, func, "Attempting to unscale FP16 gradients.");
    float *flag = rec_flag(s, r);
    DLT_CHECK(fail_wrap(ctx->be->memset0(ctx, flag, sizeof(float)), func));
    if (k > 0)
        DLT_CHECK(fail_wrap(ctx->be->amp_unscale(ctx, grads, k, flag, dlt__data(s->scale)), func));
    for (int32_t i = 0; i < k; i++) grads[i]->version++;
    /* dist: every process must take the same skip decision (an inf on one rank skips the
     * step everywhere). A failed reduction fails the call; the communicator is broken then
     * and training cannot go on anyway. */
    if (s->found_hook) DLT_CHECK(fail_wrap(s->found_hook(s->found_hook_user, ctx, flag), func));
    r->stage = STAGE_UNSCALED;
    return DLT_OK;
}

dlt_status dlt_grad_scaler_unscale(dlt_grad_scaler *s, dlt_optimizer *opt) {
    static const char *F = "dlt_grad_scaler_unscale";
    DLT_NULL_CHECK(s, F);
    DLT_NULL_CHECK(opt, F);
    if (!s->enabled) return DLT_OK;
    scaler_rec *r;
    DLT_CHECK(get_rec(s, opt, F, &r));
    if (r->stage == STAGE_UNSCALED)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "unscale_() has already been called on this optimizer since the last update().");
    if (r->stage == STAGE_STEPPED)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "unscale_() is being called after step().");
    return unscale_rec(s, opt, r, F);
}

dlt_status dlt_grad_scaler_step(dlt_grad_scaler *s, dlt_optimizer *opt) {
    static const char *F = "dlt_grad_scaler_step";
    DLT_NULL_CHECK(s, F);
    DLT_NULL_CHECK(opt, F);
    if (!s->enabled) return dlt__optimizer_step_found_inf(opt, NULL, F);
    scaler_rec *r;
    DLT_CHECK(get_rec(s, opt, F, &r));
    if (r->stage == STAGE_STEPPED)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "step() has already been called since the last update().");
    if (r->stage == STAGE_READY) {
        /* the step's allocations before the unscale: if they fail, the gradients are still
         * scaled and the stage is READY, so the step can simply be run again */
        DLT_CHECK(dlt__optimizer_prepare(opt, F));
        DLT_CHECK(unscale_rec(s, opt, r, F));
    }
    DLT_CHECK(dlt__optimizer_step_found_inf(opt, rec_flag(s, r), F));
    r->stage = STAGE_STEPPED;
    return DLT_OK;
}

static void reset_stages(dlt_grad_scaler *s) {
    for (int32_t i = 0; i < s->nrec; i++) s->recs[i].stage = STAGE_READY;
}

dlt_status dlt_grad_scaler_update(dlt_grad_scaler *s) {
    static const char *F = "dlt_grad_scaler_update";
    DLT_NULL_CHECK(s, F);
    if (!s->enabled) return DLT_OK;
    uint32_t mask = 0;
    for (int32_t i = 0; i < s->nrec; i++)
        if (s->recs[i].stage != STAGE_READY) mask |= 1u << i;
    if (!mask) return dlt__err(DLT_ERR_INVALID_STATE, F, "No inf checks were recorded prior to update.");
    dlt_ctx *ctx = s->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (!ctx->be->amp_update) return dlt__be_missing(ctx, F, "amp_update");
    DLT_CHECK(fail_wrap(ctx->be->amp_update(ctx, dlt__data(s->scale), dlt__data(s->tracker),
                                            dlt__data(s->found), mask, s->growth_factor,
                                            s->backoff_factor, s->growth_interval),
                        F));
    reset_stages(s);
    return DLT_OK;
}

dlt_status dlt_grad_scaler_update_to(dlt_grad_scaler *s, double new_scale) {
    static const char *F = "dlt_grad_scaler_update_to";
    DLT_NULL_CHECK(s, F);
    if (!s->enabled) return DLT_OK;
    if (!(new_scale > 0.0) || !isfinite(new_scale) || !isfinite((float)new_scale))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "new_scale must be finite (in fp32) and positive, got %g", new_scale);
    DLT_CHECK(dlt__ctx_ok(s->ctx, F));
    DLT_CHECK(fail_wrap(s->ctx->be->fill(s->ctx, s->scale, new_scale), F));
    reset_stages(s);
    return DLT_OK;
}

/* Synchronous read of a small device value. */
static dlt_status read_back(dlt_grad_scaler *s, void *dst, const void *src, size_t n, const char *func) {
    DLT_CHECK(dlt__ctx_ok(s->ctx, func));
    if (s->ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, func, "cannot read the scaler during graph capture");
    return fail_wrap(s->ctx->be->memcpy_d2h(s->ctx, dst, src, n), func);
}

dlt_status dlt_grad_scaler_get_scale(dlt_grad_scaler *s, double *out) {
    static const char *F = "dlt_grad_scaler_get_scale";
    DLT_NULL_CHECK(s, F);
    DLT_NULL_CHECK(out, F);
    if (!s->enabled) {
        *out = 1.0;
        return DLT_OK;
    }
    float v;
    DLT_CHECK(read_back(s, &v, dlt__data(s->scale), sizeof v, F));
    *out = (double)v;
    return DLT_OK;
}

dlt_status dlt_grad_scaler_found_inf(dlt_grad_scaler *s, dlt_optimizer *opt, int32_t *out) {
    static const char *F = "dlt_grad_scaler_found_inf";
    DLT_NULL_CHECK(s, F);
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(out, F);
    if (s->enabled && dlt__optimizer_ctx(opt) != s->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F,
                        "the optimizer and the scaler belong to different contexts");
    scaler_rec *r = s->enabled ? find_rec(s, opt) : NULL;
    if (!r) {
        *out = 0;
        return DLT_OK;
    }
    float v;
    DLT_CHECK(read_back(s, &v, rec_flag(s, r), sizeof v, F));
    *out = v != 0.0f;
    return DLT_OK;
}

dlt_status dlt_grad_scaler_get_state(dlt_grad_scaler *s, double *scale, double *growth_factor,
                                     double *backoff_factor, int32_t *growth_interval,
                                     int32_t *growth_tracker) {
    static const char *F = "dlt_grad_scaler_get_state";
    DLT_NULL_CHECK(s, F);
    if (!s->enabled)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "the scaler is disabled: its state is empty (PyTorch's state_dict() is {})");
    float v = 0.0f;
    int32_t t = 0;
    if (scale) DLT_CHECK(read_back(s, &v, dlt__data(s->scale), sizeof v, F));
    if (growth_tracker) DLT_CHECK(read_back(s, &t, dlt__data(s->tracker), sizeof t, F));
    if (scale) *scale = (double)v;
    if (growth_tracker) *growth_tracker = t;
    if (growth_factor) *growth_factor = s->growth_factor;
    if (backoff_factor) *backoff_factor = s->backoff_factor;
    if (growth_interval) *growth_interval = s->growth_interval;
    return DLT_OK;
}

dlt_status dlt_grad_scaler_set_state(dlt_grad_scaler *s, double scale, double growth_factor,
                                     double backoff_factor, int32_t growth_interval,
                                     int32_t growth_tracker) {
    static const char *F = "dlt_grad_scaler_set_state";
    DLT_NULL_CHECK(s, F);
    DLT_CHECK(check_options(1.0, growth_factor, backoff_factor, growth_interval, F));
    /* the range the scaler keeps the scale in, as PyTorch's _amp_update_scale_ does: growth
     * stops short of inf, backoff goes down to 0 (a state dlt_checkpoint_save writes, so it
     * must load) */
    if (!(scale >= 0.0) || signbit(scale) || scale > FLT_MAX)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the scale must be finite in fp32 and not negative, got %g", scale);
    if (growth_tracker < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "growth_tracker %d is negative", growth_tracker);
    if (!s->enabled) return DLT_OK; /* PyTorch: load_state_dict is a no-op when disabled */
    dlt_ctx *ctx = s->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    DLT_CHECK(fail_wrap(ctx->be->fill(ctx, s->scale, scale), F));
    DLT_CHECK(fail_wrap(ctx->be->fill(ctx, s->tracker, (double)growth_tracker), F));
    s->growth_factor = growth_factor;
    s->backoff_factor = backoff_factor;
    s->growth_interval = growth_interval;
    return DLT_OK;
}
