/*
 * optim_internal.h - the optimizer object, the learning-rate schedule formula shared by the
 * CPU and CUDA backends, and the internal interface used by the GradScaler (lib/amp) and
 * by checkpoints (lib/io).
 *
 * State split: hyper-parameters, the parameter list, the momentum-buffer tensors and the
 * schedule settings live on the host (they only change through API calls); everything a
 * step changes (lr, applied-step count, last_applied, "buffer holds data" flags) lives in
 * one device block (dlt_optim_dev + int32 flags, lib/core/internal.h). The host never needs
 * to know whether a step was applied, which is what lets the GradScaler skip it on the
 * device.
 *
 * Included from C (lib/) and from CUDA C++ (cuda/sgd.cu, for the schedule formula).
 */
#ifndef DLT_OPTIM_INTERNAL_H
#define DLT_OPTIM_INTERNAL_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define DLT_HD __host__ __device__
#else
#define DLT_HD
#endif

struct dlt_optimizer {
    dlt_ctx *ctx;
    uint64_t uid; /* unique per process: the GradScaler keys its records by (pointer, uid) */
    int32_t n;
    dlt_tensor **params; /* retained */
    dlt_tensor **bufs;   /* momentum buffers (owned) or NULL; allocated on the first step
                          * where the parameter has a gradient (zeros: the device flag says
                          * whether it holds data) */
    double lr0;          /* lr given at creation */
    double momentum, dampening, weight_decay;
    int32_t nesterov, maximize;
    dlt_tensor *dev;     /* u8 tensor: dlt_optim_dev, then int32 flags[n] */
    dlt_lr_schedule schedule; /* host copy; main_kind/warmup say what is active */

    /* scratch for building a launch (n entries each, 2n for lp) */
    dlt_tensor **l_params, **l_grads, **l_bufs, **l_lp;
    int32_t *l_index;
};

static inline dlt_optim_dev *dlt__optim_dev(const dlt_optimizer *opt) {
    return (dlt_optim_dev *)dlt__data(opt->dev);
}
static inline int32_t *dlt__optim_flags(const dlt_optimizer *opt) {
    return (int32_t *)((char *)dlt__data(opt->dev) + sizeof(dlt_optim_dev));
}
static inline int dlt__schedule_active(const dlt_lr_schedule *s) {
    return s->main_kind != DLT_LR_MAIN_NONE || s->warmup;
}

/* The schedule formula (optim.h), in double: lr = main(base, t) * warmup(t), with
 *   StepLR:        main = base * gamma^floor(t / step_size)
 *   MultiStepLR:   main = base * gamma^(number of milestones <= t)
 *   Cosine:        main = eta_min + (base - eta_min) * (1 + cos(pi * min(t, T) / T)) / 2
 *   none:          main = base
 *   LinearLR:      warmup = start + (1 - start) * min(t, steps) / steps   (else 1)
 * Shared by the CPU backend and the CUDA kernels so both compute the same bits (up to the
 * last ulp of pow/cos in double, which the final rounding to f32 absorbs). */
static inline DLT_HD double dlt__lr_schedule_eval(const dlt_lr_schedule *s, double base, int64_t t) {
    double lr = base;
    switch (s->main_kind) {
    case DLT_LR_MAIN_STEP:
        lr = base * pow(s->gamma, (double)(t / s->step_size));
        break;
    case DLT_LR_MAIN_MULTISTEP: {
        int32_t k = 0;
        for (int32_t i = 0; i < s->n_milestones; i++) k += s->milestones[i] <= t;
        lr = base * pow(s->gamma, (double)k);
        break;
    }
    case DLT_LR_MAIN_COSINE: {
        int64_t tt = t < s->t_max ? t : s->t_max;
        const double pi = 3.14159265358979323846;
        lr = s->eta_min + (base - s->eta_min) * (1.0 + cos(pi * (double)tt / (double)s->t_max)) / 2.0;
        break;
    }
    default: break;
    }
    if (s->warmup) {
        int64_t tt = t < s->warmup_steps ? t : s->warmup_steps;
        lr *= s->start_factor + (1.0 - s->start_factor) * (double)tt / (double)s->warmup_steps;
    }
    /* the lr is kept in fp32: a schedule that grows it (gamma > 1) stops at FLT_MAX instead
     * of reaching inf, a value dlt_optimizer_set_lr and checkpoints refuse */
    return lr > (double)FLT_MAX ? (double)FLT_MAX : lr;
}

/* The applied-step count after one more applied step: it saturates at INT64_MAX (a loaded
 * checkpoint may hold any count; the increment must not overflow). */
static inline DLT_HD int64_t dlt__step_next(int64_t step) {
    return step < INT64_MAX ? step + 1 : step;
}

/* Applies op to a dlt_optim_dev (the CPU backend's sgd_state; CUDA's one-thread kernel). */
static inline DLT_HD void dlt__optim_state_apply(dlt_optim_dev *d, const dlt_optim_state_op *op) {
    if (op->write_lr) d->lr = (float)op->lr_value;
    if (op->write_base) d->base_lr = op->base_value;
    if (op->write_step) d->step = op->step_value;
    if (op->base_from_lr) d->base_lr = (double)d->lr;
    if (op->evaluate) d->lr = (float)dlt__lr_schedule_eval(&op->schedule, d->base_lr, d->step);
}

/* Enqueues op on the optimizer's device block. */
dlt_status dlt__optimizer_apply_state(dlt_optimizer *opt, const dlt_optim_state_op *op,
                                      const char *func);

/* ---- for the GradScaler (lib/amp/scaler.c) ---- */
/* Creates the momentum buffers the next step needs (parameters with a gradient and no
 * buffer yet), all or nothing. The step calls it first; the GradScaler calls it before it
 * unscales, so that a step failing for memory leaves the gradients and its stage as they
 * were. */
dlt_status dlt__optimizer_prepare(dlt_optimizer *opt, const char *func);
/* One step that the device skips when *found_inf != 0 (found_inf: device f32 on the
 * optimizer's context, or NULL for a plain step). Enqueued only. */
dlt_status dlt__optimizer_step_found_inf(dlt_optimizer *opt, const void *found_inf,
                                         const char *func);

/* ---- for checkpoints (lib/io/checkpoint.c) ---- */
/* Index of parameter p in the optimizer, -1 if absent. */
int32_t dlt__optimizer_param_index(const dlt_optimizer *opt, const dlt_tensor *p);
/* Current lr and applied-step count. Synchronises. */
dlt_status dlt__optimizer_get_state(dlt_optimizer *opt, double *lr, int64_t *step_count);
/* Sets lr and the applied-step count (enqueued). Schedules continue from step_count with
 * their base unchanged; without an active schedule the base becomes lr too. */
dlt_status dlt__optimizer_set_state(dlt_optimizer *opt, double lr, int64_t step_count);
/* Momentum buffer i: the public dlt_optimizer_momentum_buffer (borrowed, or NULL if none
 * yet). A buffer may exist before it holds data (the first step that had a gradient was
 * skipped by the GradScaler): dlt__optimizer_buffer_initialised tells. */
/* Copies src (same shape, f32, any context) into buffer i (created if needed) and marks it
 * as holding data. DLT_ERR_INVALID_STATE when the optimizer has no momentum. */
dlt_status dlt__optimizer_set_momentum_buffer(dlt_optimizer *opt, int32_t i, const dlt_tensor *src);
/* Empties buffer i, if it exists: zeros, and marked as holding no data (the next applied
 * step starts it as PyTorch starts a missing momentum_buffer). Enqueued. */
dlt_status dlt__optimizer_reset_momentum_buffer(dlt_optimizer *opt, int32_t i);
/* *out = 1 if buffer i holds data (PyTorch has state["momentum_buffer"] for it), else 0.
 * Synchronises. */
dlt_status dlt__optimizer_buffer_initialised(dlt_optimizer *opt, int32_t i, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif
