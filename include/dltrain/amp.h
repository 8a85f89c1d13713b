/*
 * dltrain/amp.h - mixed precision: autocast regions and the GradScaler.
 *
 * Autocast (PyTorch's torch.autocast policy, docs/numerics.md): inside a region conv2d and
 * linear run in the region's dtype (fp16 or bf16). Their fp32 weights are cast once and the
 * copy is kept with the parameter; the optimizer refreshes it when it updates the master, so
 * a training step casts no weight. batch_norm, relu, pooling and add run in their input's
 * dtype (fp32 statistics); cross_entropy computes in fp32. Parameter gradients are fp32.
 *
 * GradScaler (torch.amp.GradScaler): scale, growth/backoff and the skip decision live on the
 * device; scale/unscale/step/update enqueue work and return. get_scale and state reads
 * synchronise.
 */
#ifndef DLTRAIN_AMP_H
#define DLTRAIN_AMP_H

#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opens an autocast region with dtype DLT_F16 or DLT_BF16 (or DLT_F32 to switch autocast
 *  off inside an outer region). Regions nest up to 16 deep. */
DLT_API DLT_NODISCARD dlt_status dlt_autocast_begin(dlt_ctx *ctx, int32_t dtype);
/** Closes the innermost region. DLT_ERR_INVALID_STATE when none is open. */
DLT_API DLT_NODISCARD dlt_status dlt_autocast_end(dlt_ctx *ctx);
/** Dtype in force (DLT_F16/DLT_BF16), or -1 when autocast is off. */
DLT_API int32_t dlt_autocast_dtype(const dlt_ctx *ctx);

typedef struct dlt_grad_scaler dlt_grad_scaler;

/**
 * Creates a GradScaler. PyTorch's defaults: init_scale 65536, growth_factor 2,
 * backoff_factor 0.5, growth_interval 2000, enabled 1.
 * @return DLT_ERR_INVALID_ARGUMENT when enabled and growth_factor <= 1, backoff_factor >= 1
 *         or <= 0, growth_interval < 1, or init_scale not finite/positive.
 */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_create(dlt_ctx *ctx, double init_scale,
                                                        double growth_factor, double backoff_factor,
                                                        int32_t growth_interval, int32_t enabled,
                                                        dlt_grad_scaler **out);
/** Frees the scaler and its device state. NULL is a no-op. */
DLT_API void dlt_grad_scaler_destroy(dlt_grad_scaler *s);
/** 1 when enabled (scale, unscale and skip active), 0 when disabled or NULL. */
DLT_API int32_t dlt_grad_scaler_is_enabled(const dlt_grad_scaler *s);

/** out = loss * scale (a new reference; differentiable w.r.t. loss). Disabled: a new
 *  reference to loss itself. */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_scale(dlt_grad_scaler *s, dlt_tensor *loss,
                                                       dlt_tensor **out);
/** Divides the optimizer's gradients by the scale in place and records whether any was
 *  inf/NaN (on the device). DLT_ERR_INVALID_STATE if already unscaled or stepped since the
 *  last update. DLT_ERR_CONTEXT_MISMATCH when the optimizer is on another context; at most
 *  32 optimizers can be used with one scaler between two updates. Disabled: no-op. */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_unscale(dlt_grad_scaler *s, dlt_optimizer *opt);
/** Unscales if not yet done, then steps the optimizer unless an inf/NaN was found; the skip
 *  is decided on the device (no synchronisation). DLT_ERR_INVALID_STATE if already stepped
 *  since the last update. Disabled: a plain optimizer step. */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_step(dlt_grad_scaler *s, dlt_optimizer *opt);
/** Backoff on inf/NaN, growth after growth_interval clean updates (only if the grown scale
 *  is finite), on the device. DLT_ERR_INVALID_STATE if no step/unscale ran since the last
 *  update. Resets every optimizer's stage. */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_update(dlt_grad_scaler *s);
/** update(new_scale): sets the scale to new_scale (> 0) instead of the rule above. */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_update_to(dlt_grad_scaler *s, double new_scale);

/** Current scale (1.0 when disabled). Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_get_scale(dlt_grad_scaler *s, double *out);
/** The scale as a one-element f32 device tensor (borrowed), NULL when disabled. */
DLT_API dlt_tensor *dlt_grad_scaler_scale_tensor(dlt_grad_scaler *s);
/** 1 if the last unscale found inf/NaN in the optimizer's gradients (0 if the scaler never
 *  unscaled it, or is disabled). DLT_ERR_CONTEXT_MISMATCH when the optimizer is on another
 *  context. Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_found_inf(dlt_grad_scaler *s, dlt_optimizer *opt,
                                                           int32_t *out);

/** PyTorch's state_dict fields. Synchronises. Any out-pointer may be NULL.
 *  DLT_ERR_INVALID_STATE when disabled (PyTorch's state_dict is then empty). */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_get_state(dlt_grad_scaler *s, double *scale,
                                                           double *growth_factor,
                                                           double *backoff_factor,
                                                           int32_t *growth_interval,
                                                           int32_t *growth_tracker);
/** load_state_dict: sets all five fields (validated as at creation, except that the scale
 *  may be 0: a scaler reaches 0 itself after about 165 skipped steps in a row, as PyTorch's
 *  does, and such a state must load; the scale must be finite in fp32 and not negative;
 *  growth_tracker >= 0). Enqueued. Disabled: validates, then does nothing (as PyTorch). */
DLT_API DLT_NODISCARD dlt_status dlt_grad_scaler_set_state(dlt_grad_scaler *s, double scale,
                                                           double growth_factor,
                                                           double backoff_factor,
                                                           int32_t growth_interval,
                                                           int32_t growth_tracker);

#ifdef __cplusplus
}
#endif
#endif
