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
 * @param params  n fp32 leaf tensors of one context (retained by the optimizer).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (lr < 0 or above FLT_MAX,
 *         the largest fp32, in which the optimizer keeps it; momentum < 0,
 *         weight_decay < 0, nesterov with momentum <= 0 or dampening != 0, n < 1, a
 *         parameter listed twice, a tensor that does not require grad); DLT_ERR_DTYPE (not
 *         fp32); DLT_ERR_CONTEXT_MISMATCH; out of memory.
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

/** Sets the learning rate (an enqueued device write; no rebuild, valid inside a captured
 *  graph only if called outside it). The next step uses lr; an active schedule takes lr as
 *  its new base from the next applied step on. DLT_ERR_INVALID_ARGUMENT for lr < 0, NaN or
 *  above FLT_MAX (the lr is kept in fp32). */
DLT_API DLT_NODISCARD dlt_status dlt_optimizer_set_lr(dlt_optimizer *opt, double lr);
/** Current learning rate. Synchronises. */
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

#ifdef __cplusplus
}
#endif
#endif
