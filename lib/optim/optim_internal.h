/*
 * optim_internal.h - the optimizer object (SGD, Adam/AdamW) and the narrow interfaces used
 * by the GradScaler (lib/amp) and by checkpoints (lib/io). The math both backends run
 * (learning-rate schedules, the Adam element update) and the step's launch structs are the
 * kernel contract's (lib/kernel/optim.h); lib/cpu and cuda/ include that, never this header.
 *
 * State split: hyper-parameters, the parameter list and groups, the state tensors
 * (momentum buffers, moments) and the schedule settings live on the host (they only change
 * through API calls); everything a step changes (lrs, applied-step count, last_applied,
 * per-parameter flags or step counts) lives in one device block (dlt_optim_dev, the group
 * lrs and int32 per parameter, lib/kernel/optim.h). The host never needs to know whether
 * a step was applied, which is what lets the GradScaler skip it on the device.
 */
#ifndef DLT_OPTIM_INTERNAL_H
#define DLT_OPTIM_INTERNAL_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "../core/internal.h"
#include "../kernel/optim.h"
#include "optim_grads.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { DLT__OPT_SGD = 0, DLT__OPT_ADAM = 1 };

struct dlt_optimizer {
    dlt_ctx *ctx;
    uint64_t uid; /* unique per process: the GradScaler keys its records by (pointer, uid) */
    int32_t kind; /* DLT__OPT_* */
    int32_t n, cap;
    dlt_tensor **params; /* retained, each tensor once (weight tying: listed once) */
    int32_t *group;      /* parameter group of params[i] */
    int32_t n_groups;
    double group_wd[DLT_OPTIM_MAX_GROUPS]; /* weight decay of each group */
    /* SGD */
    dlt_tensor **bufs;   /* momentum buffers (owned) or NULL; allocated on the first step
                          * where the parameter has a gradient (zeros: the device flag says
                          * whether it holds data) */
    double momentum, dampening, weight_decay;
    int32_t nesterov, maximize;
    /* Adam/AdamW: moments (owned) or NULL, allocated as the momentum buffers are */
    dlt_tensor **exp_avg, **exp_avg_sq;
    double beta1, beta2, eps;
    double lr_created;   /* group 0's lr at creation (dlt_adamw_get_options) */
    int32_t decoupled, amsgrad;
    dlt_tensor *dev;     /* u8 tensor: dlt_optim_dev, group lrs, then int32 per parameter */
    dlt_lr_schedule schedule; /* host copy; main_kind/warmup say what is active */
    /* fused gradient clipping (dlt_optimizer_set_clip_grad_norm, clip_grad_norm.c) */
    int32_t clip_on;     /* 1: every step takes the norm and updates with g * coef */
    int32_t clip_norm;   /* DLT_CLIP_NORM_* */
    double clip_max_norm;
    dlt_tensor *clip_total, *clip_coef; /* f32 [] each, made by the first set and kept until
                                         * destroy (a captured step holds their addresses) */

    /* scratch for building a launch (cap entries each, 2*cap for lp) */
    dlt_tensor **l_params, **l_grads, **l_bufs, **l_bufs2, **l_lp;
    int32_t *l_index, *l_group;
    dlt_tensor **g_list; /* dlt__optimizer_grads' answer */
};

static inline dlt_optim_dev *dlt__optim_dev(const dlt_optimizer *opt) {
    return (dlt_optim_dev *)dlt__data(opt->dev);
}
static inline size_t dlt__optim_flags_offset(void) {
    return sizeof(dlt_optim_dev) + (DLT_OPTIM_MAX_GROUPS - 1) * sizeof(dlt_optim_group_dev);
}
/* The int32 per parameter (SGD: momentum flag; Adam: step count). */
static inline int32_t *dlt__optim_flags(const dlt_optimizer *opt) {
    return (int32_t *)((char *)dlt__data(opt->dev) + dlt__optim_flags_offset());
}
static inline int dlt__schedule_active(const dlt_lr_schedule *s) {
    return s->main_kind != DLT_LR_MAIN_NONE || s->warmup;
}

/* ---- the optimizer core (lib/optim/optimizer.c), used by sgd.c and adamw.c ---- */
/* Validates and deduplicates a parameter list against the optimizer's existing ones (a
 * tensor listed twice in the list counts once; one already in another group is
 * DLT_ERR_INVALID_ARGUMENT, PyTorch's "some parameters appear in more than one parameter
 * group"). *uniq (malloc'd, the caller frees) receives the new tensors, *n_uniq their
 * count. existing may be NULL. */
dlt_status dlt__optimizer_check_params(const dlt_optimizer *existing, dlt_tensor *const *params,
                                       int32_t n, const char *func, dlt_tensor ***uniq,
                                       int32_t *n_uniq);
/* A new optimizer of `kind` over uniq (retained) as group 0 with lr and weight_decay;
 * kind-specific fields are filled by the caller afterwards. */
dlt_status dlt__optimizer_new(int32_t kind, dlt_tensor *const *uniq, int32_t n, double lr,
                              double weight_decay, const char *func, dlt_optimizer **out);
/* Checks an lr value with PyTorch's message. */
dlt_status dlt__optimizer_check_lr(double lr, const char *func);
/* Enqueues op on the optimizer's device block (n_groups filled in). */
dlt_status dlt__optimizer_apply_state(dlt_optimizer *opt, const dlt_optim_state_op *op,
                                      const char *func);
/* A parameter's autocast copy the step kernel can write element for element. */
int dlt__optimizer_lp_fusable(const dlt_tensor *p, const dlt_tensor *c, int32_t dtype);
/* After a step kernel: bump param versions and mark or refresh the low-precision copies
 * (opt->l_params/l_lp hold the k launched parameters). */
dlt_status dlt__optimizer_after_step(dlt_optimizer *opt, int32_t k, const char *func);
/* Creates the zero-filled state tensors slot[i] (parameters with a gradient and none yet),
 * all or nothing. */
dlt_status dlt__optimizer_alloc_state(dlt_optimizer *opt, dlt_tensor **slot, const char *func);
/* The fused clipping's norm pass over the k gradients of the launch being built
 * (opt->l_grads): enqueues the total and the coefficient into opt->clip_total/clip_coef.
 * *coef receives the coefficient's device address for the step kernel, NULL when clipping
 * is off or there is no gradient (clip_grad_norm.c). */
dlt_status dlt__optimizer_clip_pass(dlt_optimizer *opt, int32_t k, const char *func,
                                    const void **coef);
/* Kind-specific step implementations (sgd.c, adamw.c). */
dlt_status dlt__sgd_step_impl(dlt_optimizer *opt, const void *found_inf, const char *func);
dlt_status dlt__adamw_step_impl(dlt_optimizer *opt, const void *found_inf, const char *func);
/* Reads the device block (synchronises). */
dlt_status dlt__optimizer_read_dev(dlt_optimizer *opt, dlt_optim_dev *d, const char *func);

/* ---- for the GradScaler: optim_grads.h ---- */

/* ---- for checkpoints (lib/io/checkpoint.c) ---- */
/* DLT__OPT_SGD or DLT__OPT_ADAM. */
static inline int32_t dlt__optimizer_kind(const dlt_optimizer *opt) { return opt->kind; }
/* Index of parameter p in the optimizer, -1 if absent. */
int32_t dlt__optimizer_param_index(const dlt_optimizer *opt, const dlt_tensor *p);
/* Current lr (group 0) and applied-step count. Synchronises. */
dlt_status dlt__optimizer_get_state(dlt_optimizer *opt, double *lr, int64_t *step_count);
/* Sets every group's lr and the applied-step count (enqueued). Schedules continue from
 * step_count with their base unchanged; without an active schedule the base becomes lr
 * too. */
dlt_status dlt__optimizer_set_state(dlt_optimizer *opt, double lr, int64_t step_count);
/* Sets group g's lr as dlt__optimizer_set_state does (enqueued). */
dlt_status dlt__optimizer_set_group_lr_state(dlt_optimizer *opt, int32_t g, double lr);
/* Group g's lr. Synchronises. */
dlt_status dlt__optimizer_get_group_lr(dlt_optimizer *opt, int32_t g, double *lr);
/* Momentum buffer i: the public dlt_optimizer_momentum_buffer (borrowed, or NULL if none
 * yet). A buffer may exist before it holds data (the first step that had a gradient was
 * skipped by the GradScaler): dlt__optimizer_buffer_initialised tells. */
/* Copies src (same shape, f32, any context) into buffer i (created if needed) and marks it
 * as holding data. DLT_ERR_INVALID_STATE when the optimizer has no momentum. */
dlt_status dlt__optimizer_set_momentum_buffer(dlt_optimizer *opt, int32_t i, const dlt_tensor *src);
/* State tensor `slot` of parameter i from src (created if needed): SGD slot 0 is the
 * momentum buffer (as above); Adam slot 0 exp_avg, slot 1 exp_avg_sq (the step count is
 * set by dlt__optimizer_set_param_steps). */
dlt_status dlt__optimizer_set_state_tensor(dlt_optimizer *opt, int32_t i, int32_t slot,
                                           const dlt_tensor *src);
/* Empties parameter i's state, if it exists: zeros, and marked as holding no data (SGD:
 * the next applied step starts the buffer as PyTorch starts a missing momentum_buffer;
 * Adam: moments zero and step count 0). Enqueued. */
dlt_status dlt__optimizer_reset_momentum_buffer(dlt_optimizer *opt, int32_t i);
/* *out = 1 if buffer i holds data (PyTorch has state["momentum_buffer"] for it), else 0.
 * Synchronises. */
dlt_status dlt__optimizer_buffer_initialised(dlt_optimizer *opt, int32_t i, int32_t *out);
/* Adam: the per-parameter step counts (n entries; 0 = no state). Synchronises. */
dlt_status dlt__optimizer_get_param_steps(dlt_optimizer *opt, int32_t *steps);
/* Adam: sets the n step counts (each >= 0). Synchronises. */
dlt_status dlt__optimizer_set_param_steps(dlt_optimizer *opt, const int32_t *steps);

#ifdef __cplusplus
}
#endif
#endif
