/*
 * dltrain/optim.h - optimizers (SGD) and learning-rate schedules.
 *
 * An optimizer retains its parameters (they stay alive while the optimizer does). Its
 * per-step values (learning rate, step count, momentum-buffer
 * flags) live in the context's device memory, so a step enqueues work and returns: no host
 * synchronisation, and a step can be captured in a CUDA graph (graph.h). Functions that read
 * such a value back say "synchronises".
 */
#ifndef DLTRAIN_OPTIM_H
#define DLTRAIN_OPTIM_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlt_optimizer dlt_optimizer;

/**
 * torch.optim.SGD with PyTorch's update rule (docs/numerics.md):
 *   g = maximize ? -grad : grad;  g += weight_decay * p;
 *   momentum: b = first ? g : momentum*b + (1-dampening)*g;  g = nesterov ? g + momentum*b : b
 *   p -= lr * g
 * in fp32 with the rounding of PyTorch's foreach implementation (the one it picks on CUDA).
 * Like that implementation, with nesterov and neither maximize nor weight decay the
 * gradient tensor itself receives g + momentum*b.
 * Parameters whose gradient is absent (set-to-none zero-grad, never reached by backward) are
 * skipped; a momentum buffer is created the first time its parameter has a gradient at a
 * step, and "first" above means the first step that was applied (not skipped by a
 * GradScaler).
 * A tensor listed twice (a tied weight) is one parameter: it is updated once per step.
 * @param params  n fp32 leaf tensors of one context (retained by the optimizer).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (lr < 0 or above FLT_MAX,
 *         the largest fp32, in which the optimizer keeps it; momentum < 0, weight_decay < 0,
 *         nesterov with momentum <= 0 or dampening != 0, n < 1, a tensor that does not
 *         require grad); DLT_ERR_DTYPE (not fp32); DLT_ERR_CONTEXT_MISMATCH; out of memory.
 * On CUDA one step is one multi-tensor kernel launch (a few for very many parameters); when
 * a parameter has an autocast low-precision copy, the same kernel refreshes it.
 */
DLT_API DLT_NODISCARD dlt_status dlt_sgd_create(dlt_tensor *const *params, int32_t n, double lr,
                                                double momentum, double dampening,
                                                double weight_decay, int32_t nesterov,
                                                int32_t maximize, dlt_optimizer **out);
/** Frees the optimizer (releasing its parameter references and buffers). NULL is a no-op. */
DLT_API void dlt_optimizer_destroy(dlt_optimizer *opt);

/** One update of every parameter that has a gradient. */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_step(dlt_optimizer *opt);
/** dlt_zero_grad over the optimizer's parameters. */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_zero_grad(dlt_optimizer *opt, int32_t set_to_none);

/** Sets the learning rate of every parameter group (an enqueued device write; no rebuild,
 *  valid inside a captured graph only if called outside it), as nanoGPT's loop over
 *  param_groups does. The next step uses lr; an active schedule takes lr as its new base
 *  from the next applied step on. DLT_ERR_INVALID_ARGUMENT for lr < 0, NaN or above
 *  FLT_MAX (the lr is kept in fp32). */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_set_lr(dlt_optimizer *opt, double lr);
/** Current learning rate (of parameter group 0). Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_get_lr(dlt_optimizer *opt, double *out);
/** Number of applied steps (steps skipped by the GradScaler do not count; the count
 *  saturates at INT64_MAX). Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_step_count(dlt_optimizer *opt, int64_t *out);
/** 1 if the last step was applied, 0 if the GradScaler skipped it. Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_last_step_applied(dlt_optimizer *opt, int32_t *out);

/** Number of parameters the optimizer updates (0 for NULL). */
DLT_API int32_t dlt_optimizer_num_params(const dlt_optimizer *opt);
/** Parameter i (borrowed), NULL when out of range. */
DLT_API dlt_tensor *dlt_optimizer_param(const dlt_optimizer *opt, int32_t i);
/** Momentum buffer of parameter i (borrowed), or NULL if none was created yet. Buffers are
 *  created by the first step at which the parameter has a gradient (zeros until a step is
 *  applied to it). */
DLT_API dlt_tensor *dlt_optimizer_momentum_buffer(const dlt_optimizer *opt, int32_t i);
/** Hyper-parameters as given at creation (any out-pointer may be NULL). */
DLT_API DLT_NODISCARD dlt_status dlt_sgd_get_options(const dlt_optimizer *opt, double *momentum,
                                                     double *dampening, double *weight_decay,
                                                     int32_t *nesterov, int32_t *maximize);

/* ---------------------------------------------------------------------------------------
 * Learning-rate schedules. They are evaluated on the device after every APPLIED step t
 * (t = 1, 2, ...): lr = base_lr * warmup(t) * main(t), at most FLT_MAX (the lr is kept in
 * fp32; a growing StepLR stops there instead of reaching inf). Setting a schedule replaces the
 * previous one of the same kind (warm-up and main are independent). base_lr is the lr the
 * optimizer had when the first schedule was set.
 * t is the optimizer's applied-step count (dlt_optimizer_step_count): setting a schedule
 * evaluates it at once for the current t, so a schedule set after training started picks
 * up at that count, and a restored step count resumes it. A captured graph (graph.h) keeps
 * the schedule settings it was captured with; set schedules before capturing.
 * ------------------------------------------------------------------------------------- */
/** main(t) = gamma ^ floor(t / step_size)  (StepLR) */
DLT_API DLT_NODISCARD dlt_status dlt_lr_schedule_step(dlt_optimizer *opt, int64_t step_size, double gamma);
/** main(t) = gamma ^ (number of milestones <= t)  (MultiStepLR; milestones increasing) */
DLT_API DLT_NODISCARD dlt_status dlt_lr_schedule_multistep(dlt_optimizer *opt, const int64_t *milestones,
                                                           int32_t n, double gamma);
/** lr = eta_min + (base - eta_min) * (1 + cos(pi * min(t, t_max) / t_max)) / 2, times warmup
 *  (CosineAnnealingLR, closed form) */
DLT_API DLT_NODISCARD dlt_status dlt_lr_schedule_cosine(dlt_optimizer *opt, int64_t t_max, double eta_min);
/** warmup(t) = start_factor + (1 - start_factor) * min(t, steps) / steps  (LinearLR);
 *  before the first step the lr is base * start_factor. */
DLT_API DLT_NODISCARD dlt_status dlt_lr_schedule_warmup(dlt_optimizer *opt, int64_t steps, double start_factor);
/** Removes all schedules; the lr stays at its current value (and is the base of a later
 *  schedule). */
DLT_API DLT_NODISCARD dlt_status dlt_lr_schedule_clear(dlt_optimizer *opt);

/* ---------------------------------------------------------------------------------------
 * Option structs, Adam/AdamW, parameter groups, gradient clipping
 * ------------------------------------------------------------------------------------- */
typedef struct dlt_sgd_options {
    uint32_t size;       /* sizeof(dlt_sgd_options), set by dlt_sgd_options_default */
    double lr;           /* 1e-3 */
    double momentum;     /* 0 */
    double dampening;    /* 0 */
    double weight_decay; /* 0 */
    int32_t nesterov;    /* 0 */
    int32_t maximize;    /* 0 */
} dlt_sgd_options;

/** Fills the first `size` bytes of o (size = the caller's sizeof) with torch.optim.SGD's
 *  defaults (lr 1e-3, everything else 0) and o->size; the option-struct rule is in core.h
 *  (a size below the first release's struct writes nothing; NULL is a no-op). */
DLT_API void dlt_sgd_options_init(dlt_sgd_options *o, uint32_t size);
/** dlt_sgd_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_sgd_options_default(dlt_sgd_options *o) {
    dlt_sgd_options_init(o, (uint32_t)sizeof *o);
}
/** dlt_sgd_create with an option struct (NULL: all defaults); same rules and errors. */
DLT_API DLT_NODISCARD dlt_status dlt_sgd_create_ex(dlt_tensor *const *params, int32_t n,
                                                   const dlt_sgd_options *o, dlt_optimizer **out);

typedef struct dlt_adamw_options {
    uint32_t size;                  /* sizeof(dlt_adamw_options), set by the _default calls */
    int32_t decoupled_weight_decay; /* 1: AdamW (p *= 1 - lr*wd); 0: Adam (g += wd*p) */
    double lr;                      /* 1e-3 */
    double beta1;                   /* 0.9 */
    double beta2;                   /* 0.999 */
    double eps;                     /* 1e-8 */
    double weight_decay;            /* AdamW 1e-2, Adam 0 */
    int32_t amsgrad;                /* 0 (1 is DLT_ERR_NOT_SUPPORTED) */
    int32_t maximize;               /* 0 */
} dlt_adamw_options;

/** Fills the first `size` bytes of o (core.h: option structs) with torch.optim.AdamW's defaults
 *  (lr 1e-3, betas 0.9/0.999, eps 1e-8,
 *  weight_decay 1e-2, decoupled_weight_decay 1). */
DLT_API void dlt_adamw_options_init(dlt_adamw_options *o, uint32_t size);
/** dlt_adamw_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_adamw_options_default(dlt_adamw_options *o) {
    dlt_adamw_options_init(o, (uint32_t)sizeof *o);
}
/** Fills the first `size` bytes of o (core.h: option structs) with torch.optim.Adam's defaults
 *  (as AdamW's but weight_decay 0 and
 *  decoupled_weight_decay 0). */
DLT_API void dlt_adam_options_init(dlt_adamw_options *o, uint32_t size);
/** dlt_adam_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_adam_options_default(dlt_adamw_options *o) {
    dlt_adam_options_init(o, (uint32_t)sizeof *o);
}

/**
 * torch.optim.AdamW (or Adam, with o->decoupled_weight_decay = 0), amsgrad off, with
 * PyTorch's update rule (docs/optim.md). Per step, for each parameter with a gradient,
 * t = its step count + 1:
 *   g = maximize ? -grad : grad;   AdamW: p *= 1 - lr*wd;   Adam: g += wd*p
 *   m = lerp(m, g, 1 - beta1);     v = beta2*v + (1 - beta2)*g*g
 *   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * in fp32 with the rounding of PyTorch's foreach implementation (scalars computed in
 * double, then rounded to fp32). The parameters form parameter group 0 with o->lr and
 * o->weight_decay; dlt_optimizer_add_param_group adds more. Moments (exp_avg, exp_avg_sq)
 * are created, zero, at the first step where the parameter has a gradient; the step
 * counts, lrs and the applied-step count live on the device, so a captured step replays
 * correctly and a step the GradScaler skips changes nothing. Low-precision autocast copies
 * are refreshed by the same kernel, as with SGD. A tensor listed twice is one parameter.
 * On CUDA one step is one multi-tensor kernel launch (more for over 256 parameters).
 * @param params  n fp32 leaf tensors of one context that require grad (retained).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (lr, eps or weight_decay
 *         negative or NaN, a beta outside [0, 1), n < 1, o->size too small, a tensor that
 *         does not require grad); DLT_ERR_NOT_SUPPORTED (amsgrad); DLT_ERR_DTYPE (not
 *         fp32); DLT_ERR_CONTEXT_MISMATCH; out of memory. Messages use PyTorch's words.
 */
DLT_API DLT_NODISCARD dlt_status dlt_adamw_create_ex(dlt_tensor *const *params, int32_t n,
                                                     const dlt_adamw_options *o,
                                                     dlt_optimizer **out);
/** The options of an Adam/AdamW optimizer as given at creation (lr and weight_decay:
 *  parameter group 0's at creation). out->size must be set (dlt_adamw_options_default);
 *  only fields within it are written. DLT_ERR_INVALID_ARGUMENT for an SGD optimizer or a
 *  size below the first release's struct. */
DLT_API DLT_NODISCARD dlt_status dlt_adamw_get_options(const dlt_optimizer *opt,
                                                       dlt_adamw_options *out);
/** First moment of parameter i (borrowed), NULL if none yet or not Adam. */
DLT_API dlt_tensor *dlt_optimizer_exp_avg(const dlt_optimizer *opt, int32_t i);
/** Second moment of parameter i (borrowed), NULL if none yet or not Adam. */
DLT_API dlt_tensor *dlt_optimizer_exp_avg_sq(const dlt_optimizer *opt, int32_t i);
/** Adam: parameter i's step count (PyTorch's state["step"]; 0 before its first applied
 *  step). SGD: the applied-step count. Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_param_step(dlt_optimizer *opt, int32_t i, int64_t *out);
/** "SGD", "Adam" or "AdamW" (a static string; "" for NULL). */
DLT_API const char *dlt_optimizer_kind(const dlt_optimizer *opt);

/**
 * torch.optim.Optimizer.add_param_group: a new parameter group with its own lr and weight
 * decay (the other hyper-parameters are the optimizer's). Adam/AdamW only, up to 16 groups.
 * The new group's lr follows the active schedules from its own base (as PyTorch's
 * schedulers treat each group's initial lr). A tensor listed twice counts once.
 * Add groups before capturing a step in a graph: the device block moves.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (bad lr or weight decay,
 *         n < 1, a tensor already in a group: "some parameters appear in more than one
 *         parameter group", not fp32 / no requires-grad as at creation); DLT_ERR_DTYPE;
 *         DLT_ERR_CONTEXT_MISMATCH; DLT_ERR_NOT_SUPPORTED (SGD, a 17th group);
 *         DLT_ERR_INVALID_STATE (during graph capture); out of memory. Nothing changes on
 *         failure.
 */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_add_param_group(dlt_optimizer *opt,
                                                               dlt_tensor *const *params, int32_t n,
                                                               double lr, double weight_decay);
/** Number of parameter groups (0 for NULL). */
DLT_API int32_t dlt_optimizer_num_param_groups(const dlt_optimizer *opt);
/** Parameter group of parameter i, -1 when out of range. */
DLT_API int32_t dlt_optimizer_param_group_of(const dlt_optimizer *opt, int32_t i);
/** Sets one group's lr (param_groups[g]["lr"] = lr; enqueued, as dlt_optimizer_set_lr). */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_set_group_lr(dlt_optimizer *opt, int32_t group, double lr);
/** One group's current lr. Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_get_group_lr(dlt_optimizer *opt, int32_t group, double *out);
/** Sets one group's weight decay (>= 0) for the following steps (a captured graph keeps the
 *  value it was captured with). SGD has one group. */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_set_group_weight_decay(dlt_optimizer *opt, int32_t group,
                                                                      double weight_decay);
/** One group's weight decay. */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_get_group_weight_decay(const dlt_optimizer *opt,
                                                                      int32_t group, double *out);

/**
 * torch.nn.utils.clip_grad_norm_: total = the norm of all the parameters' gradients taken
 * together (norm_type 2: sqrt of the sum of squares; 1: sum of absolute values; INFINITY:
 * largest absolute value), then every gradient is multiplied by
 * min(max_norm / (total + 1e-6), 1), computed on the device: no synchronisation, so it can
 * be captured in a graph. Parameters without a gradient are skipped, a tensor listed twice
 * counts once. With a GradScaler: dlt_grad_scaler_unscale, then clip, then
 * dlt_grad_scaler_step (which still skips on inf/NaN; the total is then inf or NaN).
 * @param params  n tensors of one context (NULL entries are skipped); gradients fp32.
 * @param total   receives the total as a new one-element (0-D) f32 tensor on the context,
 *                owned by the caller; may be NULL.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (n < 1, max_norm negative
 *         or NaN, norm_type <= 0 or NaN); DLT_ERR_NOT_SUPPORTED (norm_type other than 1, 2,
 *         inf); DLT_ERR_DTYPE (a gradient that is not fp32); DLT_ERR_CONTEXT_MISMATCH; out
 *         of memory. Nothing changes on failure.
 */
DLT_API DLT_NODISCARD dlt_status dlt_clip_grad_norm(dlt_tensor *const *params, int32_t n,
                                                    double max_norm, double norm_type,
                                                    dlt_tensor **total);

/** The total dlt_clip_grad_norm would compute (same rules and errors), without changing
 *  any gradient. *total receives a new one-element f32 tensor (owned by the caller; not
 *  NULL). Enqueued: reading the value synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_grad_norm(dlt_tensor *const *params, int32_t n, double norm_type,
                                               dlt_tensor **total);

/**
 * Gradient clipping as part of the optimizer's step (Keras' global_clipnorm; llm.c folds it
 * into its AdamW kernel): from the next step on, every dlt_optimizer_step and
 * dlt_grad_scaler_step first takes the total norm of the gradients of all the optimizer's
 * parameters (every group; the rules and arithmetic of dlt_clip_grad_norm: parameters
 * without a gradient skipped, each tensor once, coef = min(max_norm / (total + 1e-6), 1) in
 * f32), then updates each parameter with grad * coef (one f32 product) in place of grad.
 * Parameters, momentum buffers and moments get the bits of dlt_clip_grad_norm followed by
 * the step, without the pass that rewrites every gradient. The one difference from
 * clip_grad_norm_: the gradients keep their unclipped values (except that SGD with nesterov
 * and neither maximize nor weight decay writes g*coef + momentum*b into them, as it writes
 * g + momentum*b without clipping). With a GradScaler the norm is of the unscaled gradients
 * (the scaler's step unscales first: unscale_, clip, step); a step it skips for inf/NaN
 * changes nothing, as without clipping (the total is then inf or NaN).
 * Nothing is read back: the total and the coefficient stay in two device scalars the
 * optimizer allocates at the first call, so a captured step (graph.h) replays the clipping
 * too. A captured graph keeps the clipping it was captured with: set, change or clear it
 * before capturing.
 * @param max_norm   >= 0; INFINITY is allowed (never clips, still computes the total).
 * @param norm_type  1, 2 or INFINITY.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (max_norm negative or NaN,
 *         norm_type <= 0 or NaN); DLT_ERR_NOT_SUPPORTED (norm_type other than 1, 2, inf);
 *         DLT_ERR_INVALID_STATE (during graph capture); out of memory. Nothing changes on
 *         failure.
 */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_set_clip_grad_norm(dlt_optimizer *opt, double max_norm,
                                                                  double norm_type);
/** Turns the optimizer's clipping off (the following steps use the gradients as they are).
 *  A no-op when it is not set. DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_STATE during graph
 *  capture. */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_clear_clip_grad_norm(dlt_optimizer *opt);
/** The total norm the optimizer's clipping took at its last step (0 before the first), as a
 *  new reference to the optimizer's 0-D f32 device tensor: every step overwrites it, replays
 *  of a captured step too, so one reference can be read after every step (reading it
 *  synchronises). Release it with dlt_tensor_release. DLT_ERR_NULL_POINTER;
 *  DLT_ERR_INVALID_STATE when clipping is not set (dlt_optimizer_set_clip_grad_norm). */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_grad_norm(const dlt_optimizer *opt, dlt_tensor **total);

/** nanoGPT's learning-rate function, for iteration t = the applied-step count:
 *    t < warmup_iters:     base * (t + 1) / (warmup_iters + 1)
 *    t > lr_decay_iters:   min_lr
 *    else                  min_lr + (1 + cos(pi * (t - warmup_iters) / (lr_decay_iters -
 *                          warmup_iters))) / 2 * (base - min_lr)
 *  (a main schedule: it replaces StepLR/MultiStepLR/cosine/constant). base is each
 *  group's base lr, min_lr is shared. warmup_iters >= 0, lr_decay_iters > warmup_iters,
 *  min_lr finite and >= 0. */
DLT_API DLT_NODISCARD dlt_status dlt_lr_schedule_warmup_cosine(dlt_optimizer *opt, int64_t warmup_iters,
                                                               int64_t lr_decay_iters, double min_lr);
/** main(t) = base * (t < total_iters ? factor : 1)  (ConstantLR; 0 < factor <= 1,
 *  total_iters >= 0). A constant lr is no schedule at all (dlt_lr_schedule_clear). */
DLT_API DLT_NODISCARD dlt_status dlt_lr_schedule_constant(dlt_optimizer *opt, double factor,
                                                          int64_t total_iters);

#ifdef __cplusplus
}
#endif
#endif
