/*
 * optim_internal.h - the optimizer object (SGD, Adam/AdamW), the math shared by the CPU
 * and CUDA backends (learning-rate schedules, the Adam element update), and the narrow
 * interfaces used by the GradScaler (lib/amp) and by checkpoints (lib/io).
 *
 * State split: hyper-parameters, the parameter list and groups, the state tensors
 * (momentum buffers, moments) and the schedule settings live on the host (they only change
 * through API calls); everything a step changes (lrs, applied-step count, last_applied,
 * per-parameter flags or step counts) lives in one device block (dlt_optim_dev, the group
 * lrs and int32 per parameter, lib/core/internal.h). The host never needs to know whether
 * a step was applied, which is what lets the GradScaler skip it on the device.
 *
 * Included from C (lib/) and from CUDA C++ (cuda/sgd.cu, cuda/adamw.cu, for the shared
 * math).
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

/* Group g's lr and schedule base inside a device block. */
static inline DLT_HD float *dlt__optim_lr_at(dlt_optim_dev *d, int32_t g) {
    return g == 0 ? &d->lr : &((dlt_optim_group_dev *)(d + 1))[g - 1].lr;
}
static inline DLT_HD double *dlt__optim_base_at(dlt_optim_dev *d, int32_t g) {
    return g == 0 ? &d->base_lr : &((dlt_optim_group_dev *)(d + 1))[g - 1].base_lr;
}

/* The schedule formula (optim.h), in double: lr = main(base, t) * warmup(t), with
 *   StepLR:        main = base * gamma^floor(t / step_size)
 *   MultiStepLR:   main = base * gamma^(number of milestones <= t)
 *   Cosine:        main = eta_min + (base - eta_min) * (1 + cos(pi * min(t, T) / T)) / 2
 *   nanoGPT:       t < W: base * (t + 1) / (W + 1);  t > D: min_lr;
 *                  else min_lr + (1 + cos(pi * (t - W) / (D - W))) / 2 * (base - min_lr)
 *   ConstantLR:    main = base * (t < total_iters ? factor : 1)
 *   none:          main = base
 *   LinearLR:      warmup = start + (1 - start) * min(t, steps) / steps   (else 1)
 * Shared by the CPU backend and the CUDA kernels so both compute the same bits (up to the
 * last ulp of pow/cos in double, which the final rounding to f32 absorbs). */
static inline DLT_HD double dlt__lr_schedule_eval(const dlt_lr_schedule *s, double base, int64_t t) {
    const double pi = 3.14159265358979323846;
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
        lr = s->eta_min + (base - s->eta_min) * (1.0 + cos(pi * (double)tt / (double)s->t_max)) / 2.0;
        break;
    }
    case DLT_LR_MAIN_WARMUP_COSINE: /* nanoGPT's get_lr(it), it = t, in its operation order */
        if (t < s->wc_warmup) {
            lr = base * (double)(t + 1) / (double)(s->wc_warmup + 1);
        } else if (t > s->wc_decay) {
            lr = s->wc_min_lr;
        } else {
            double ratio = (double)(t - s->wc_warmup) / (double)(s->wc_decay - s->wc_warmup);
            double coeff = 0.5 * (1.0 + cos(pi * ratio));
            lr = s->wc_min_lr + coeff * (base - s->wc_min_lr);
        }
        break;
    case DLT_LR_MAIN_CONSTANT:
        lr = t < s->const_iters ? base * s->const_factor : base;
        break;
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

/* Applies op to a device block (the CPU backend's sgd_state; CUDA's one-thread kernel). */
static inline DLT_HD void dlt__optim_state_apply(dlt_optim_dev *d, const dlt_optim_state_op *op) {
    if (op->write_step) d->step = op->step_value;
    const int32_t ng = op->n_groups > 0 ? op->n_groups : 1;
    const int32_t lo = op->one_group ? op->group : 0, hi = op->one_group ? op->group + 1 : ng;
    for (int32_t g = lo; g < hi; g++) {
        float *lr = dlt__optim_lr_at(d, g);
        double *base = dlt__optim_base_at(d, g);
        if (op->write_lr) *lr = (float)op->lr_value;
        if (op->write_base) *base = op->base_value;
        if (op->base_from_lr) *base = (double)*lr;
        if (op->evaluate) *lr = (float)dlt__lr_schedule_eval(&op->schedule, *base, d->step);
    }
}

/* ---- the Adam/AdamW element update (lib/optim/adamw.c states it), fp32 ----
 * Every product, quotient and square root is rounded on its own and every fused
 * multiply-add is explicit, on the host and on the device alike (nvcc would otherwise
 * contract a*b+c), so the CPU backend and the CUDA kernel give the same bits. */
#if defined(__CUDA_ARCH__)
#define DLT__FMUL(a, b) __fmul_rn((a), (b))
#define DLT__FADD(a, b) __fadd_rn((a), (b))
#define DLT__FSUB(a, b) __fsub_rn((a), (b))
#define DLT__FDIV(a, b) __fdiv_rn((a), (b))
#define DLT__FSQRT(a) __fsqrt_rn(a)
#define DLT__FMA(a, b, c) __fmaf_rn((a), (b), (c))
#else
#define DLT__FMUL(a, b) ((a) * (b))
#define DLT__FADD(a, b) ((a) + (b))
#define DLT__FSUB(a, b) ((a) - (b))
#define DLT__FDIV(a, b) ((a) / (b))
#define DLT__FSQRT(a) sqrtf(a)
#define DLT__FMA(a, b, c) fmaf((a), (b), (c))
#endif

/* Per-tensor scalars of one Adam step, from PyTorch's double arithmetic rounded to f32. */
typedef struct dlt_adamw_scalars {
    float decay;    /* AdamW: 1 - lr*wd */
    float wd;       /* Adam: L2 coefficient added to the gradient */
    float w1, w1c;  /* lerp weight 1 - beta1, and 1 - w1 (in f32) */
    float b2, w2;   /* beta2, 1 - beta2 */
    float bc2_sqrt; /* sqrt(1 - beta2^t) */
    float eps;
    float neg_step; /* -lr / (1 - beta1^t) */
    int32_t use_decay, use_wd, maximize;
} dlt_adamw_scalars;

static inline DLT_HD void dlt__adamw_scalars(dlt_adamw_scalars *s, double lr, double wd,
                                             int32_t decoupled, int32_t maximize, double beta1,
                                             double beta2, double eps, int64_t t) {
    const double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    s->use_decay = decoupled && wd != 0.0;
    s->use_wd = !decoupled && wd != 0.0;
    s->decay = (float)(1.0 - lr * wd);
    s->wd = (float)wd;
    s->w1 = (float)(1.0 - beta1);
    s->w1c = 1.0f - s->w1;
    s->b2 = (float)beta2;
    s->w2 = (float)(1.0 - beta2);
    s->bc2_sqrt = (float)sqrt(bc2);
    s->eps = (float)eps;
    s->neg_step = (float)((lr / bc1) * -1.0);
    s->maximize = maximize;
}

/* One element: returns the new parameter, updates *m and *v. */
static inline DLT_HD float dlt__adamw_elem(const dlt_adamw_scalars *s, float p, float g, float *m,
                                           float *v) {
    if (s->maximize) g = -g;
    if (s->use_decay) p = DLT__FMUL(p, s->decay);
    if (s->use_wd) g = DLT__FMA(s->wd, p, g);
    /* torch.lerp(m, g, w1), PyTorch's two-sided formula */
    const float diff = DLT__FSUB(g, *m);
    const float mv = s->w1 < 0.5f ? DLT__FMA(s->w1, diff, *m) : DLT__FSUB(g, DLT__FMUL(diff, s->w1c));
    const float vv = DLT__FMA(s->w2, DLT__FMUL(g, g), DLT__FMUL(*v, s->b2));
    const float denom = DLT__FADD(DLT__FDIV(DLT__FSQRT(vv), s->bc2_sqrt), s->eps);
    *m = mv;
    *v = vv;
    return DLT__FMA(s->neg_step, DLT__FDIV(mv, denom), p);
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
/* Kind-specific step implementations (sgd.c, adamw.c). */
dlt_status dlt__sgd_step_impl(dlt_optimizer *opt, const void *found_inf, const char *func);
dlt_status dlt__adamw_step_impl(dlt_optimizer *opt, const void *found_inf, const char *func);
/* Reads the device block (synchronises). */
dlt_status dlt__optimizer_read_dev(dlt_optimizer *opt, dlt_optim_dev *d, const char *func);

/* ---- for the GradScaler (lib/amp/scaler.c): the narrow gradients interface ---- */
static inline dlt_ctx *dlt__optimizer_ctx(const dlt_optimizer *opt) { return opt->ctx; }
static inline uint64_t dlt__optimizer_uid(const dlt_optimizer *opt) { return opt->uid; }
/* The gradients the next step would use (parameters with a defined gradient, each once, in
 * parameter order). *grads is the optimizer's own array, valid until the next call on it:
 * callers may change the gradients' values, never the array. */
void dlt__optimizer_grads(dlt_optimizer *opt, dlt_tensor ***grads, int32_t *n);
/* Creates the state tensors the next step needs (parameters with a gradient and no state
 * yet), all or nothing. The step calls it first; the GradScaler calls it before it
 * unscales, so that a step failing for memory leaves the gradients and its stage as they
 * were. */
dlt_status dlt__optimizer_prepare(dlt_optimizer *opt, const char *func);
/* One step that the device skips when *found_inf != 0 (found_inf: device f32 on the
 * optimizer's context, or NULL for a plain step). Enqueued only. */
dlt_status dlt__optimizer_step_found_inf(dlt_optimizer *opt, const void *found_inf,
                                         const char *func);

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
