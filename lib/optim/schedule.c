/*
 * schedule.c - learning-rate schedules: StepLR, MultiStepLR, CosineAnnealingLR (closed
 * form), nanoGPT's warm-up + cosine, ConstantLR, and a LinearLR warm-up that multiplies
 * the main schedule. With parameter groups every group follows the schedule from its own
 * base (eta_min and min_lr are shared), as PyTorch's schedulers do.
 *
 * The formula (dlt__lr_schedule_eval, lib/kernel/optim.h) is evaluated on the device: by the
 * SGD kernel's epilogue after every applied step (a step the GradScaler skipped leaves the
 * step count and the lr alone), and once when a schedule is set, so the lr is always
 * schedule(base, t) for the current applied-step count t (with a warm-up set before the
 * first step, the first step runs at base * start_factor, as PyTorch's LinearLR).
 *
 * t is the optimizer's applied-step count, not a count since the schedule was set: a
 * restored step count (checkpoints) resumes the schedule where it was. The schedule's
 * settings are passed to the kernels by value, so a captured graph keeps the schedule it
 * was captured with.
 *
 * base: the lr when the first schedule was set (the device keeps base == lr while no
 * schedule is active, so no host read is needed to capture it). Clearing the schedules
 * leaves the lr where it is and makes it the base again.
 */
#include <string.h>

#include "optim_internal.h"

/* Stores the new settings and evaluates them at the current step on the device. */
static dlt_status install(dlt_optimizer *opt, const dlt_lr_schedule *s, const char *func) {
    dlt_optim_state_op op;
    memset(&op, 0, sizeof op);
    op.evaluate = 1;
    op.schedule = *s;
    DLT_CHECK(dlt__optimizer_apply_state(opt, &op, func));
    opt->schedule = *s;
    return DLT_OK;
}

dlt_status dlt_lr_schedule_step(dlt_optimizer *opt, int64_t step_size, double gamma) {
    static const char *F = "dlt_lr_schedule_step";
    DLT_NULL_CHECK(opt, F);
    if (step_size < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "step_size must be >= 1, got %lld",
                        (long long)step_size);
    if (!isfinite(gamma) || gamma < 0.0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "gamma must be finite and >= 0, got %g", gamma);
    dlt_lr_schedule s = opt->schedule;
    s.main_kind = DLT_LR_MAIN_STEP;
    s.step_size = step_size;
    s.gamma = gamma;
    return install(opt, &s, F);
}

dlt_status dlt_lr_schedule_multistep(dlt_optimizer *opt, const int64_t *milestones, int32_t n,
                                     double gamma) {
    static const char *F = "dlt_lr_schedule_multistep";
    DLT_NULL_CHECK(opt, F);
    DLT_NULL_CHECK(milestones, F);
    if (n < 1 || n > DLT_LR_MAX_MILESTONES)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n must be in 1..%d, got %d",
                        DLT_LR_MAX_MILESTONES, n);
    for (int32_t i = 0; i < n; i++) {
        if (milestones[i] < 0)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "milestones[%d] = %lld is negative", i,
                            (long long)milestones[i]);
        if (i > 0 && milestones[i] <= milestones[i - 1])
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "milestones must increase: milestones[%d] = %lld after %lld", i,
                            (long long)milestones[i], (long long)milestones[i - 1]);
    }
    if (!isfinite(gamma) || gamma < 0.0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "gamma must be finite and >= 0, got %g", gamma);
    dlt_lr_schedule s = opt->schedule;
    s.main_kind = DLT_LR_MAIN_MULTISTEP;
    memset(s.milestones, 0, sizeof s.milestones);
    memcpy(s.milestones, milestones, (size_t)n * sizeof *milestones);
    s.n_milestones = n;
    s.gamma = gamma;
    return install(opt, &s, F);
}

dlt_status dlt_lr_schedule_cosine(dlt_optimizer *opt, int64_t t_max, double eta_min) {
    static const char *F = "dlt_lr_schedule_cosine";
    DLT_NULL_CHECK(opt, F);
    if (t_max < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "t_max must be >= 1, got %lld", (long long)t_max);
    if (!isfinite(eta_min) || eta_min < 0.0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "eta_min must be finite and >= 0, got %g", eta_min);
    dlt_lr_schedule s = opt->schedule;
    s.main_kind = DLT_LR_MAIN_COSINE;
    s.t_max = t_max;
    s.eta_min = eta_min;
    return install(opt, &s, F);
}

dlt_status dlt_lr_schedule_warmup(dlt_optimizer *opt, int64_t steps, double start_factor) {
    static const char *F = "dlt_lr_schedule_warmup";
    DLT_NULL_CHECK(opt, F);
    if (steps < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "steps must be >= 1, got %lld", (long long)steps);
    if (!(start_factor > 0.0 && start_factor <= 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "Starting multiplicative factor expected to be greater than 0 and less "
                        "or equal to 1, got %g",
                        start_factor);
    dlt_lr_schedule s = opt->schedule;
    s.warmup = 1;
    s.warmup_steps = steps;
    s.start_factor = start_factor;
    return install(opt, &s, F);
}

dlt_status dlt_lr_schedule_warmup_cosine(dlt_optimizer *opt, int64_t warmup_iters,
                                         int64_t lr_decay_iters, double min_lr) {
    static const char *F = "dlt_lr_schedule_warmup_cosine";
    DLT_NULL_CHECK(opt, F);
    if (warmup_iters < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "warmup_iters must be >= 0, got %lld",
                        (long long)warmup_iters);
    if (lr_decay_iters <= warmup_iters)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "lr_decay_iters (%lld) must be greater than warmup_iters (%lld)",
                        (long long)lr_decay_iters, (long long)warmup_iters);
    if (!isfinite(min_lr) || min_lr < 0.0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "min_lr must be finite and >= 0, got %g", min_lr);
    dlt_lr_schedule s = opt->schedule;
    s.main_kind = DLT_LR_MAIN_WARMUP_COSINE;
    s.wc_warmup = warmup_iters;
    s.wc_decay = lr_decay_iters;
    s.wc_min_lr = min_lr;
    return install(opt, &s, F);
}

dlt_status dlt_lr_schedule_constant(dlt_optimizer *opt, double factor, int64_t total_iters) {
    static const char *F = "dlt_lr_schedule_constant";
    DLT_NULL_CHECK(opt, F);
    if (!(factor > 0.0 && factor <= 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "Constant multiplicative factor expected to be between 0 and 1, got %g", factor);
    if (total_iters < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "total_iters must be >= 0, got %lld",
                        (long long)total_iters);
    dlt_lr_schedule s = opt->schedule;
    s.main_kind = DLT_LR_MAIN_CONSTANT;
    s.const_factor = factor;
    s.const_iters = total_iters;
    return install(opt, &s, F);
}

dlt_status dlt_lr_schedule_clear(dlt_optimizer *opt) {
    static const char *F = "dlt_lr_schedule_clear";
    DLT_NULL_CHECK(opt, F);
    if (!dlt__schedule_active(&opt->schedule)) return DLT_OK;
    dlt_optim_state_op op;
    memset(&op, 0, sizeof op);
    op.base_from_lr = 1; /* the lr stays; it is the base of a later schedule */
    DLT_CHECK(dlt__optimizer_apply_state(opt, &op, F));
    memset(&opt->schedule, 0, sizeof opt->schedule);
    return DLT_OK;
}
