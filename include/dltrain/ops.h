/*
 * dltrain/ops.h - differentiable operations.
 *
 * Every op takes its inputs from one context, returns a new tensor owned by the caller, and
 * (in grad mode, when an input needs a gradient) records itself on the tape. Inside an
 * autocast region (amp.h) ops follow PyTorch's CUDA autocast policy: conv2d, linear, matmul,
 * bmm and attention compute in the region's dtype; softmax, log_softmax, layer_norm, sum,
 * exp, log, rsqrt, pow, softplus and the losses in f32; the others in their input's dtype
 * (binary ops promote). docs/ops.md lists dtypes and memory formats per device.
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

/** y = x w^T + bias. x [M,K] or [..., K] (N-D input: the leading dimensions are kept),
 *  w [N,K], bias [N] or NULL; y [M,N] or [..., N]. */
DLT_API DLT_NODISCARD dlt_status dlt_linear(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias,
                                            dlt_tensor **out);

/** y = a + b with broadcasting (NumPy's rules: shapes aligned at the last dimension, each
 *  size equal or 1) and PyTorch's dtype promotion (f32 with f16/bf16 gives f32, f16 with
 *  bf16 gives f32). Inputs of one shape and memory format give that format; otherwise the
 *  result is contiguous. Float dtypes only. */
DLT_API DLT_NODISCARD dlt_status dlt_add(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out);
/** y = a - b, broadcasting and promotion as dlt_add. */
DLT_API DLT_NODISCARD dlt_status dlt_sub(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out);
/** y = a * b (elementwise), broadcasting and promotion as dlt_add. */
DLT_API DLT_NODISCARD dlt_status dlt_mul(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out);
/** y = a / b (true division), broadcasting and promotion as dlt_add. */
DLT_API DLT_NODISCARD dlt_status dlt_div(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out);

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
#define DLT_REDUCTION_NONE 2
/** Cross-entropy of logits [N,K] (any float dtype; log-softmax computed in fp32) against
 *  integer targets [N] (i32 or i64, values in [0,K) or ignore_index). Result: f32 scalar
 *  ([N] for DLT_REDUCTION_NONE). Mean divides by the number of non-ignored rows (NaN when all
 *  are ignored, as PyTorch). Logits [..., K] with targets [...] are taken too (classes along
 *  the last dimension, a language model's [B,T,V]); see dlt_cross_entropy_ex. */
DLT_API DLT_NODISCARD dlt_status dlt_cross_entropy(dlt_tensor *logits, dlt_tensor *targets,
                                                   int64_t ignore_index, int32_t reduction,
                                                   dlt_tensor **out);
/** Cross-entropy with label smoothing (PyTorch's label_smoothing in [0, 1]):
 *  per item (1-ls) * (-log p_target) + ls * mean_c(-log p_c). logits [N, C] or [..., C] with
 *  targets of the logits' shape minus the last (class) dimension; reduction MEAN, SUM or NONE
 *  (per-item losses in targets' shape, 0 for ignored items). Never materialises fp32
 *  probabilities: the gradient is computed from the logits and the saved log-sum-exp. */
DLT_API DLT_NODISCARD dlt_status dlt_cross_entropy_ex(dlt_tensor *logits, dlt_tensor *targets,
                                                      int64_t ignore_index, int32_t reduction,
                                                      double label_smoothing, dlt_tensor **out);

/** mse_loss: (input - target)^2, reduced (MEAN, SUM or NONE); shapes broadcast. On autocast's
 *  fp32 list (low-precision inputs are cast up in an autocast region). */
DLT_API DLT_NODISCARD dlt_status dlt_mse_loss(dlt_tensor *input, dlt_tensor *target,
                                              int32_t reduction, dlt_tensor **out);
/** binary_cross_entropy_with_logits: (1-y) x + w_pos * log(1 + exp(-x)) computed stably,
 *  w_pos = 1 + (pos_weight - 1) y; times weight when given. target has input's shape;
 *  weight and pos_weight (may be NULL) broadcast to it. Reduction MEAN, SUM or NONE.
 *  fp32 under autocast. */
DLT_API DLT_NODISCARD dlt_status dlt_binary_cross_entropy_with_logits(dlt_tensor *input, dlt_tensor *target,
                                                                      dlt_tensor *weight,
                                                                      dlt_tensor *pos_weight,
                                                                      int32_t reduction, dlt_tensor **out);

/* ---------------------------------------------------------------------------------------
 * Unary math and activations. Results have the input's shape, dtype and memory format.
 * exp, log, rsqrt, pow and softplus are on autocast's fp32 list (an f16/bf16 input in an
 * autocast region is cast up; the result is f32); the others run in the input's dtype.
 * ------------------------------------------------------------------------------------- */
/** -x */
DLT_API DLT_NODISCARD dlt_status dlt_neg(dlt_tensor *x, dlt_tensor **out);
/** exp(x) */
DLT_API DLT_NODISCARD dlt_status dlt_exp(dlt_tensor *x, dlt_tensor **out);
/** natural logarithm */
DLT_API DLT_NODISCARD dlt_status dlt_log(dlt_tensor *x, dlt_tensor **out);
/** square root */
DLT_API DLT_NODISCARD dlt_status dlt_sqrt(dlt_tensor *x, dlt_tensor **out);
/** 1 / sqrt(x) */
DLT_API DLT_NODISCARD dlt_status dlt_rsqrt(dlt_tensor *x, dlt_tensor **out);
/** |x| (gradient sign(x), 0 at 0 as PyTorch) */
DLT_API DLT_NODISCARD dlt_status dlt_abs(dlt_tensor *x, dlt_tensor **out);
/** x ** exponent (a scalar exponent) */
DLT_API DLT_NODISCARD dlt_status dlt_pow_scalar(dlt_tensor *x, double exponent, dlt_tensor **out);
/** x + value (a scalar) */
DLT_API DLT_NODISCARD dlt_status dlt_add_scalar(dlt_tensor *x, double value, dlt_tensor **out);

#define DLT_GELU_NONE 0 /**< exact: 0.5 x (1 + erf(x / sqrt 2)) */
#define DLT_GELU_TANH 1 /**< 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's */
/** GELU, exact or tanh-approximated (PyTorch's approximate="none" / "tanh"). */
DLT_API DLT_NODISCARD dlt_status dlt_gelu(dlt_tensor *x, int32_t approximate, dlt_tensor **out);
/** SiLU (swish): x * sigmoid(x) */
DLT_API DLT_NODISCARD dlt_status dlt_silu(dlt_tensor *x, dlt_tensor **out);
/** logistic sigmoid */
DLT_API DLT_NODISCARD dlt_status dlt_sigmoid(dlt_tensor *x, dlt_tensor **out);
/** hyperbolic tangent */
DLT_API DLT_NODISCARD dlt_status dlt_tanh(dlt_tensor *x, dlt_tensor **out);
/** softplus log(1 + exp(x)) (beta 1; computed stably for large |x|) */
DLT_API DLT_NODISCARD dlt_status dlt_softplus(dlt_tensor *x, dlt_tensor **out);
/** LeakyReLU (torch.nn.functional.leaky_relu): x where x > 0, else negative_slope * x
 *  (PyTorch's default slope is 0.01). The gradient is 1 where x > 0, else negative_slope
 *  (at 0 too, as PyTorch). Runs in the input's dtype; an integer input is promoted to f32
 *  as for the other activations. *out is owned by the caller.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER (x, out); a device error. */
DLT_API DLT_NODISCARD dlt_status dlt_leaky_relu(dlt_tensor *x, double negative_slope, dlt_tensor **out);

/* ---------------------------------------------------------------------------------------
 * Reductions over chosen dimensions. dims: distinct dimensions, negative counting from the
 * end; n_dims = 0 reduces every dimension. keepdim keeps reduced dimensions with size 1.
 * ------------------------------------------------------------------------------------- */
/** Sum over dims, accumulated in fp32 (double on the CPU), in x's dtype (f32 under autocast). */
DLT_API DLT_NODISCARD dlt_status dlt_sum_dims(dlt_tensor *x, const int32_t *dims, int32_t n_dims,
                                              int32_t keepdim, dlt_tensor **out);
/** Mean over dims (NaN over an empty reduction). */
DLT_API DLT_NODISCARD dlt_status dlt_mean_dims(dlt_tensor *x, const int32_t *dims, int32_t n_dims,
                                               int32_t keepdim, dlt_tensor **out);
/** Maximum over dims (torch.amax: the gradient is split evenly between tied maxima). */
DLT_API DLT_NODISCARD dlt_status dlt_amax(dlt_tensor *x, const int32_t *dims, int32_t n_dims,
                                          int32_t keepdim, dlt_tensor **out);
/** Index (i64) of the first maximum along dim (NaN counts as the maximum, as torch.argmax). */
DLT_API DLT_NODISCARD dlt_status dlt_argmax(dlt_tensor *x, int32_t dim, int32_t keepdim, dlt_tensor **out);

/** softmax along dim, computed with the maximum subtracted (fp32 math; f32 under autocast). */
DLT_API DLT_NODISCARD dlt_status dlt_softmax(dlt_tensor *x, int32_t dim, dlt_tensor **out);
/** log_softmax along dim. */
DLT_API DLT_NODISCARD dlt_status dlt_log_softmax(dlt_tensor *x, int32_t dim, dlt_tensor **out);

/** layer_norm over the last n dimensions, which must equal normalized_shape[0..n):
 *  (x - mean) / sqrt(biased var + eps) * weight + bias; weight and bias ([normalized_shape],
 *  either may be NULL, as nanoGPT's bias=False) may have another float dtype than x.
 *  Statistics in fp32; f32 under autocast. */
DLT_API DLT_NODISCARD dlt_status dlt_layer_norm(dlt_tensor *x, const int64_t *normalized_shape, int32_t n,
                                                dlt_tensor *weight, dlt_tensor *bias, double eps,
                                                dlt_tensor **out);
/** dlt_layer_norm with the output in dtype (f32, f16 or bf16): the same values as
 *  dlt_layer_norm followed by dlt_cast to dtype, and the same gradients, in one kernel and
 *  without the f32 intermediate (PyTorch: F.layer_norm(x, ...).to(dtype)). For a layer norm
 *  that feeds a matmul under autocast (the GPT blocks use it so); x's dtype, weight and
 *  bias as dlt_layer_norm.
 *  @return as dlt_layer_norm; DLT_ERR_DTYPE for another output dtype. */
DLT_API DLT_NODISCARD dlt_status dlt_layer_norm_to(dlt_tensor *x, const int64_t *normalized_shape, int32_t n,
                                                   dlt_tensor *weight, dlt_tensor *bias, double eps, int32_t dtype,
                                                   dlt_tensor **out);
/** A pre-LN Transformer block's residual add and the LayerNorm after it: *sum = dlt_add(x, b)
 *  and *out = dlt_layer_norm_to(*sum, normalized_shape, n, weight, bias, eps, dtype), the same
 *  values and gradients bit for bit, in fewer passes where the call fits one op: x f32, b of
 *  x's shape in dtype (a Linear's output under autocast), both contiguous, n = 1, weight and
 *  bias f32 or NULL. The forward then reads x and b once and writes both outputs; the
 *  backward writes x's gradient and b's (in b's dtype) in one pass. Other calls run the two
 *  ops. Both outputs are new references; either may be used on its own (*sum is the residual
 *  stream, *out feeds the next Linear).
 *  @return as dlt_add and dlt_layer_norm_to; DLT_ERR_NULL_POINTER for a NULL output. */
DLT_API DLT_NODISCARD dlt_status dlt_add_layer_norm(dlt_tensor *x, dlt_tensor *b, const int64_t *normalized_shape,
                                                    int32_t n, dlt_tensor *weight, dlt_tensor *bias, double eps,
                                                    int32_t dtype, dlt_tensor **sum, dlt_tensor **out);

/** dropout: in training (training != 0 and p > 0) each element is zeroed with probability p
 *  and the rest scaled by 1/(1-p), from the context's counter-based generator (the same mask
 *  on the CPU and on CUDA for the same seed; fresh masks in every replay of a captured
 *  graph); otherwise x itself is returned (a new reference). */
DLT_API DLT_NODISCARD dlt_status dlt_dropout(dlt_tensor *x, double p, int32_t training, dlt_tensor **out);

#define DLT_NO_PADDING_IDX INT64_MIN /**< dlt_embedding without a padding row */
/** embedding: y[..., :] = weight[idx[...], :]. weight [V, D] float; idx i32/i64 of any shape;
 *  y [*idx.shape, D] in weight's dtype. padding_idx (DLT_NO_PADDING_IDX for none, negative
 *  counts from V): that row receives no gradient. An index outside [0, V) is an error on the
 *  CPU; on CUDA (no check without a sync) its output row is NaN. The weight gradient
 *  accumulates repeated rows (deterministically on CUDA in deterministic mode). */
DLT_API DLT_NODISCARD dlt_status dlt_embedding(dlt_tensor *weight, dlt_tensor *idx, int64_t padding_idx,
                                               dlt_tensor **out);

/** scaled_dot_product_attention: softmax(q k^T * scale [+ causal mask]) v with dropout p on
 *  the weights. q [B,H,T,D], k and v [B,H,S,D]; result [B,H,T,D]. scale 0 means 1/sqrt(D);
 *  is_causal masks key j > query i (top-left aligned, PyTorch's). Runs in the autocast dtype
 *  inside a region (like matmul); otherwise one float dtype. Keeps no T x S matrix: memory
 *  beyond q, k, v, o is O(B*H*T). */
DLT_API DLT_NODISCARD dlt_status dlt_scaled_dot_product_attention(dlt_tensor *q, dlt_tensor *k, dlt_tensor *v,
                                                                  int32_t is_causal, double dropout_p,
                                                                  double scale, dlt_tensor **out);

/** scaled_dot_product_attention on a packed qkv, the output of a Transformer's fused input
 *  projection (nanoGPT's c_attn): qkv [B,T,3C] holds q, k, v side by side along the last
 *  dimension, each [B,T,C] seen as n_head heads of D = C/n_head ([B,T,H,D]). Returns the
 *  attention of the heads merged back, [B,T,C]: the same values as splitting qkv, viewing
 *  and transposing each part to [B,H,T,D], dlt_scaled_dot_product_attention (same mask,
 *  dropout draws and scale rules), and transposing the result back, without those copies
 *  where the backend reads the layout directly (cuDNN's attention on CUDA); the gradient
 *  arrives as one [B,T,3C] tensor. */
DLT_API DLT_NODISCARD dlt_status dlt_scaled_dot_product_attention_qkvpacked(dlt_tensor *qkv, int64_t n_head,
                                                                           int32_t is_causal, double dropout_p,
                                                                           double scale, dlt_tensor **out);

/** matmul with PyTorch's torch.matmul rules for operands of one or more dimensions: 1-D
 *  operands gain (and the result loses) a matrix dimension; batch dimensions broadcast.
 *  Autocast dtype inside a region; otherwise one float dtype; fp32 accumulation. */
DLT_API DLT_NODISCARD dlt_status dlt_matmul(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out);
/** bmm: a [B,m,k] @ b [B,k,n] -> [B,m,n] (no broadcasting). */
DLT_API DLT_NODISCARD dlt_status dlt_bmm(dlt_tensor *a, dlt_tensor *b, dlt_tensor **out);

/* ---------------------------------------------------------------------------------------
 * Layout. libdltrain tensors are dense, so these return copies (PyTorch returns views),
 * except narrow/split pieces that are contiguous blocks of the input (every dimension
 * before dim of size 1), which are views sharing its storage. Gradients flow through all.
 * ------------------------------------------------------------------------------------- */
/** Swaps two dimensions (a 0-D or 1-D input is returned as is). */
DLT_API DLT_NODISCARD dlt_status dlt_transpose(dlt_tensor *x, int32_t dim0, int32_t dim1, dlt_tensor **out);
/** Reorders dimensions: result.shape[i] = x.shape[dims[i]] (n == x's ndim). */
DLT_API DLT_NODISCARD dlt_status dlt_permute(dlt_tensor *x, const int32_t *dims, int32_t n, dlt_tensor **out);
/** x[..., start:start+length, ...] along dim (negative start counts from the end). */
DLT_API DLT_NODISCARD dlt_status dlt_narrow(dlt_tensor *x, int32_t dim, int64_t start, int64_t length,
                                            dlt_tensor **out);
/** Splits x along dim into pieces of split_size (the last may be smaller): *n_out pieces into
 *  outs[0..*n_out) (owned by the caller), at most cap; a larger count fails with
 *  DLT_ERR_INVALID_ARGUMENT and *n_out set to the count needed. */
DLT_API DLT_NODISCARD dlt_status dlt_split(dlt_tensor *x, int64_t split_size, int32_t dim, dlt_tensor **outs,
                                           int32_t cap, int32_t *n_out);
/** Concatenates n tensors of one dtype whose shapes agree except along dim. */
DLT_API DLT_NODISCARD dlt_status dlt_cat(dlt_tensor *const *ts, int32_t n, int32_t dim, dlt_tensor **out);
/** x in the contiguous memory format (x itself, a new reference, when it already is). */
DLT_API DLT_NODISCARD dlt_status dlt_contiguous(dlt_tensor *x, dlt_tensor **out);
/** x broadcast to shape (PyTorch's expand: size-1 dimensions repeat, -1 keeps a size, new
 *  leading dimensions may be added), materialised; the gradient sums back. */
DLT_API DLT_NODISCARD dlt_status dlt_expand(dlt_tensor *x, const int64_t *shape, int32_t ndim,
                                            dlt_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
