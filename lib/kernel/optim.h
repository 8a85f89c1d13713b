/*
 * optim.h - the optimizer's side of the kernel contract: the device block of per-step
 * values, the launch structs of the sgd/adamw/clip entries, and the math both backends run
 * on them (learning-rate schedules, the state writes, the Adam element update), written
 * once so the CPU backend (lib/cpu/{sgd,adamw,clip_grad_norm}.c) and the CUDA kernels
 * (cuda/ files of the same stems) give the same bits. The optimizer object itself is
 * lib/optim's (optim_internal.h); nothing here knows it.
 */
#ifndef DLT_KERNEL_OPTIM_H
#define DLT_KERNEL_OPTIM_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "dltrain/tensor.h"
#include "hd.h"

/* ---- optimizer (lib/optim, lib/cpu/{sgd,adamw,clip_grad_norm}.c, cuda/ likewise) ----
 * An optimizer's per-step values live in one block of its context's device memory: a
 * dlt_optim_dev (group 0's lr), DLT_OPTIM_MAX_GROUPS - 1 dlt_optim_group_dev (the lr of
 * groups 1..), then one int32 per parameter (SGD: 1 once its momentum buffer holds data;
 * Adam/AdamW: the parameter's step count, PyTorch's state["step"], 0 = no state yet).
 * Kernels read and write them, so a step never waits for the host and a step the
 * GradScaler skips on the device leaves no trace. */
typedef struct dlt_optim_dev {
    double base_lr;       /* schedule base (equals lr while no schedule is active) */
    int64_t step;         /* applied steps (skipped steps do not count) */
    float lr;             /* learning rate used by the next step */
    int32_t last_applied; /* 1 if the last step was applied, 0 if it was skipped */
    int32_t done_blocks;  /* CUDA: blocks finished in the current launch (reset by the last) */
    int32_t pad_;
} dlt_optim_dev;

#define DLT_OPTIM_MAX_GROUPS 16
/* lr of parameter group g >= 1 (group 0 lives in dlt_optim_dev) */
typedef struct dlt_optim_group_dev {
    double base_lr;
    float lr;
    int32_t pad_;
} dlt_optim_group_dev;

/* Learning-rate schedule, evaluated after each applied step t (lib/optim/schedule.c):
 * lr = main(base, t) * warmup(t). Passed by value to kernels. */
#define DLT_LR_MAIN_NONE 0
#define DLT_LR_MAIN_STEP 1
#define DLT_LR_MAIN_MULTISTEP 2
#define DLT_LR_MAIN_COSINE 3
#define DLT_LR_MAIN_WARMUP_COSINE 4 /* nanoGPT's get_lr */
#define DLT_LR_MAIN_CONSTANT 5      /* ConstantLR */
#define DLT_LR_MAX_MILESTONES 32
typedef struct dlt_lr_schedule {
    int32_t main_kind;    /* DLT_LR_MAIN_* */
    int32_t warmup;       /* 1: LinearLR warm-up factor applies */
    int64_t step_size;    /* StepLR */
    double gamma;         /* StepLR, MultiStepLR */
    int64_t milestones[DLT_LR_MAX_MILESTONES];
    int32_t n_milestones;
    int32_t pad_;
    int64_t t_max;        /* CosineAnnealingLR */
    double eta_min;
    int64_t warmup_steps; /* LinearLR */
    double start_factor;
    int64_t wc_warmup;    /* warm-up + cosine (nanoGPT): warmup_iters, lr_decay_iters, min_lr */
    int64_t wc_decay;
    double wc_min_lr;
    int64_t const_iters;  /* ConstantLR: factor until total_iters */
    double const_factor;
} dlt_lr_schedule;

/* Writes to an optimizer's dlt_optim_dev, applied in this order (each when its flag is 1):
 * the step first, then per parameter group (every group, or only `group` when one_group)
 * the lr fields. */
typedef struct dlt_optim_state_op {
    int32_t write_lr;     /* lr = (float)lr_value */
    int32_t write_base;   /* base_lr = base_value */
    int32_t write_step;   /* step = step_value */
    int32_t base_from_lr; /* base_lr = lr (after the writes above) */
    int32_t evaluate;     /* lr = (float)schedule(base_lr, step) (last) */
    int32_t one_group;    /* 0: groups 0..n_groups-1; 1: only `group` */
    int32_t group;
    int32_t n_groups;     /* the optimizer's group count (0 is read as 1) */
    double lr_value, base_value;
    int64_t step_value;
    dlt_lr_schedule schedule;
} dlt_optim_state_op;

/* One SGD step over the n parameters that have a gradient (multi-tensor: one launch on
 * CUDA). Parameter, gradient, buffer and same-format low-precision copies share shape and
 * memory format; the arithmetic is elementwise, so the format does not matter. */
typedef struct dlt_sgd_launch {
    int32_t n;
    dlt_tensor **params;    /* fp32 masters, updated in place */
    dlt_tensor **grads;     /* fp32 gradients; read only, except that with nesterov, no
                             * maximize and no weight decay they receive g + momentum*b, as
                             * PyTorch's foreach _foreach_add_(grads, bufs) does */
    dlt_tensor **bufs;      /* momentum buffers (n entries), or NULL when momentum == 0 */
    dlt_tensor **lp_copies; /* 2n entries: [2i] f16, [2i+1] bf16 copy of param i to write with
                             * the rounded new value, or NULL; same shape and format */
    int32_t *buf_index;     /* param i's flag is buf_init[buf_index[i]] */
    void *buf_init;         /* device int32 flags, read and set by the kernel */
    void *state;            /* device dlt_optim_dev: lr read; step, last_applied, lr written */
    double momentum, dampening, weight_decay;
    int32_t nesterov, maximize;
    const void *found_inf;  /* device f32 or NULL: when != 0 nothing changes except
                             * last_applied = 0 */
    const dlt_lr_schedule *schedule; /* NULL, or evaluated into lr after an applied step */
    const void *clip_coef;  /* device f32 or NULL: the optimizer's fused clipping; the
                             * update uses grad * clip_coef (one f32 product, the bits a
                             * clip_grad_norm before the step gives) in place of grad */
} dlt_sgd_launch;

/* One Adam/AdamW step over the n parameters that have a gradient (one multi-tensor launch
 * on CUDA; lib/optim/adamw.c states the update). Parameter, gradient, moments and
 * same-format low-precision copies share shape and memory format. */
typedef struct dlt_adamw_launch {
    int32_t n;
    int32_t n_groups;
    dlt_tensor **params;     /* fp32 masters, updated in place */
    dlt_tensor **grads;      /* fp32 gradients, read only */
    dlt_tensor **exp_avg;    /* first moments (zeros before the parameter's first step) */
    dlt_tensor **exp_avg_sq; /* second moments */
    dlt_tensor **lp_copies;  /* 2n entries: [2i] f16, [2i+1] bf16 copy to write, or NULL */
    int32_t *index;          /* param i's step count is steps[index[i]] */
    int32_t *group;          /* param i's parameter group */
    void *steps;             /* device int32 step counts, read and incremented by the kernel */
    void *state;             /* device dlt_optim_dev (+ group lrs): lrs read; step,
                              * last_applied, lrs written */
    const double *weight_decay; /* n_groups entries */
    double beta1, beta2, eps;
    int32_t decoupled;       /* 1: AdamW (p *= 1 - lr*wd); 0: Adam (g += wd*p) */
    int32_t maximize;
    const void *found_inf;   /* device f32 or NULL: when != 0 nothing changes except
                              * last_applied = 0 */
    const dlt_lr_schedule *schedule; /* NULL, or evaluated into every group's lr after an
                                      * applied step */
    const void *clip_coef;   /* device f32 or NULL: as dlt_sgd_launch's */
} dlt_adamw_launch;

/* clip_grad_norm over n fp32 gradients (lib/optim/clip_grad_norm.c): total = the norm of
 * all their elements (norm 1, 2 or inf), written to total (device f32); then every gradient
 * is multiplied by coef = min(max_norm / (total + 1e-6), 1) computed on the device. The
 * optimizer's fused clipping runs the norm pass alone (scale 0) with coef given, and its
 * step kernel multiplies by *coef instead. */
#define DLT_CLIP_NORM_L1 1
#define DLT_CLIP_NORM_L2 2
#define DLT_CLIP_NORM_INF 3
typedef struct dlt_clip_launch {
    int32_t n;
    int32_t norm;            /* DLT_CLIP_NORM_* */
    dlt_tensor **grads;      /* modified in place */
    void *total;             /* device f32, one element */
    double max_norm;
    int32_t scale;           /* 0: the total only (dlt_grad_norm), gradients untouched */
    void *coef;              /* device f32 or NULL: receives coef (also with scale 0) */
} dlt_clip_launch;

/* Group g's lr and schedule base inside a device block. */
DLT_HD float *dlt__optim_lr_at(dlt_optim_dev *d, int32_t g) {
    return g == 0 ? &d->lr : &((dlt_optim_group_dev *)(d + 1))[g - 1].lr;
}
DLT_HD double *dlt__optim_base_at(dlt_optim_dev *d, int32_t g) {
    return g == 0 ? &d->base_lr : &((dlt_optim_group_dev *)(d + 1))[g - 1].base_lr;
}

/* The schedule formula (include/dltrain/optim.h), in double: lr = main(base, t) * warmup(t), with
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
DLT_HD double dlt__lr_schedule_eval(const dlt_lr_schedule *s, double base, int64_t t) {
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
DLT_HD int64_t dlt__step_next(int64_t step) {
    return step < INT64_MAX ? step + 1 : step;
}

/* Applies op to a device block (the CPU backend's sgd_state; CUDA's one-thread kernel). */
DLT_HD void dlt__optim_state_apply(dlt_optim_dev *d, const dlt_optim_state_op *op) {
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

DLT_HD void dlt__adamw_scalars(dlt_adamw_scalars *s, double lr, double wd,
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
DLT_HD float dlt__adamw_elem(const dlt_adamw_scalars *s, float p, float g, float *m,
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

#endif
