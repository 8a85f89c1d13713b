/*
 * dltrain/ops.h - differentiable operations.
 *
 * Every op takes its inputs from one context, returns a new tensor owned by the caller, and
 * (in grad mode, when an input needs a gradient) records itself on the tape. Inside an
 * autocast region (amp.h) conv2d and linear compute in the region's dtype; the other ops run
 * in their input's dtype. docs/ops.md lists dtypes and memory formats per device.
 *
 * Common statuses: DLT_ERR_NULL_POINTER, DLT_ERR_SHAPE, DLT_ERR_DTYPE,
 * DLT_ERR_CONTEXT_MISMATCH (inputs from different contexts), DLT_ERR_NOT_SUPPORTED (a
 * dtype/layout/device combination this build lacks; the message names it), out of memory,
 * device errors, DLT_ERR_CONTEXT_POISONED.
 */
#ifndef DLTRAIN_OPS_H
#define DLTRAIN_OPS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/** 2-D convolution (cross-correlation), PyTorch's conv2d.
 *  x [N,C,H,W]; w [K,C/groups,R,S]; bias [K] or NULL. y [N,K,P,Q] with
 *  P = (H + 2*pad_h - dil_h*(R-1) - 1)/stride_h + 1 (likewise Q). y takes x's format. */
DLT_API DLT_NODISCARD dlt_status dlt_conv2d(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias,
                                            int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                            int64_t pad_w, int64_t dil_h, int64_t dil_w,
                                            int64_t groups, dlt_tensor **out);

/** BatchNorm2d. x [N,C,H,W]; gamma, beta, running_mean, running_var: f32 [C] (gamma/beta may
 *  be NULL for affine=False; running stats may be NULL for track_running_stats=False, which
 *  forces batch statistics). training=1 normalises with the batch statistics (biased
 *  variance) and updates the running statistics in place: r = (1-momentum)*r + momentum*b,
 *  the variance with the unbiased estimate. training=0 uses the running statistics. y has
 *  x's dtype and format; statistics are fp32. */
DLT_API DLT_NODISCARD dlt_status dlt_batch_norm2d(dlt_tensor *x, dlt_tensor *gamma, dlt_tensor *beta,
                                                  dlt_tensor *running_mean, dlt_tensor *running_var,
                                                  int32_t training, double momentum, double eps,
                                                  dlt_tensor **out);
/** Fused BatchNorm2d, optional residual add and optional ReLU: y = act(bn(x) + residual).
 *  residual (may be NULL) has x's shape, dtype and format. The residual join of a ResNet
 *  block is one call. */
DLT_API DLT_NODISCARD dlt_status dlt_batch_norm2d_act(dlt_tensor *x, dlt_tensor *residual,
                                                      int32_t relu, dlt_tensor *gamma,
                                                      dlt_tensor *beta, dlt_tensor *running_mean,
                                                      dlt_tensor *running_var, int32_t training,
                                                      double momentum, double eps,
                                                      dlt_tensor **out);

/** max(x, 0), NaN propagates. */
DLT_API DLT_NODISCARD dlt_status dlt_relu(dlt_tensor *x, dlt_tensor **out);

/** max_pool2d over [N,C,H,W] (no dilation, floor mode). Padding counts as -inf. The first
 *  maximum in window scan order wins; NaN wins. */
DLT_API DLT_NODISCARD dlt_status dlt_max_pool2d(dlt_tensor *x, int64_t kernel_h, int64_t kernel_w,
                                                int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                                int64_t pad_w, dlt_tensor **out);

/** adaptive_avg_pool2d to (1,1): [N,C,H,W] -> [N,C,1,1], mean accumulated in fp32. */
DLT_API DLT_NODISCARD dlt_status dlt_global_avg_pool2d(dlt_tensor *x, dlt_tensor **out);

/** y = x w^T + bias. x [M,K], w [N,K], bias [N] or NULL. */
DLT_API DLT_NODISCARD dlt_status dlt_linear(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias,
                                            dlt_tensor **out);

/** y = a + b (same shape, dtype and format). */
DLT_API DLT_NODISCARD dlt_status dlt_add(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out);

/** y = x * s[0] * alpha, where s is a one-element f32 tensor on the same context (a value
 *  that lives on the device, such as the loss scale) or NULL (then y = alpha * x). No
 *  gradient flows into s. */
DLT_API DLT_NODISCARD dlt_status dlt_mul_scalar(dlt_tensor *x, dlt_tensor *s, double alpha,
                                                dlt_tensor **out);

/** Sum and mean of all elements: a one-element tensor of x's dtype ([] shape), accumulated
 *  in fp32 on CUDA (double on the CPU). */
DLT_API DLT_NODISCARD dlt_status dlt_sum(dlt_tensor *x, dlt_tensor **out);
/** dlt_mean: the sum divided by the number of elements (NaN for an empty tensor). */
DLT_API DLT_NODISCARD dlt_status dlt_mean(dlt_tensor *x, dlt_tensor **out);

/** A view with another shape (same number of elements). A channels-last input whose layout
 *  differs from the contiguous order is copied first. One size may be -1 (inferred). */
DLT_API DLT_NODISCARD dlt_status dlt_reshape(dlt_tensor *x, const int64_t *shape, int32_t ndim,
                                             dlt_tensor **out);
/** Flattens dimensions start_dim..end_dim (negative counts from the end) into one. */
DLT_API DLT_NODISCARD dlt_status dlt_flatten(dlt_tensor *x, int32_t start_dim, int32_t end_dim,
                                             dlt_tensor **out);

/** Differentiable dtype conversion (gradient converted back to x's dtype). */
DLT_API DLT_NODISCARD dlt_status dlt_cast(dlt_tensor *x, int32_t dtype, dlt_tensor **out);

#define DLT_REDUCTION_MEAN 0
#define DLT_REDUCTION_SUM 1
/** Cross-entropy of logits [N,K] (any float dtype; log-softmax computed in fp32) against
 *  integer targets [N] (i32 or i64, values in [0,K) or ignore_index). Result: f32 scalar.
 *  Mean divides by the number of non-ignored rows (NaN when all are ignored, as PyTorch). */
DLT_API DLT_NODISCARD dlt_status dlt_cross_entropy(dlt_tensor *logits, dlt_tensor *targets,
                                                   int64_t ignore_index, int32_t reduction,
                                                   dlt_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
