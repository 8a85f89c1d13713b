/*
 * dltrain/tensor.h - n-dimensional tensors on a context's device.
 *
 * Shapes are PyTorch's logical shapes (N, C, H, W for images). The memory format is a
 * property of the tensor: DLT_FORMAT_CONTIGUOUS (row-major in logical order, NCHW) or, for
 * 4-D tensors, DLT_FORMAT_CHANNELS_LAST (NHWC in memory). Host buffers passed to copy calls
 * are in the tensor's memory order.
 *
 * Ownership: tensors are reference counted. Every function that gives out a tensor through
 * an out-pointer gives a new reference the caller owns, unless its doc says "borrowed".
 * dlt_tensor_release drops a reference; the memory goes back to the allocator when the last
 * reference (the caller's, a module's, or the gradient tape's) is gone.
 */
#ifndef DLTRAIN_TENSOR_H
#define DLTRAIN_TENSOR_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dtypes (append only) */
#define DLT_F32 0
#define DLT_F16 1
#define DLT_BF16 2
#define DLT_I32 3
#define DLT_I64 4
#define DLT_U8 5

/* memory formats */
#define DLT_FORMAT_CONTIGUOUS 0
#define DLT_FORMAT_CHANNELS_LAST 1

#define DLT_MAX_DIMS 8

typedef struct dlt_tensor dlt_tensor;

/** Bytes per element of a dtype, 0 for an unknown one. Thread-safe. */
DLT_API size_t dlt_dtype_size(int32_t dtype);
/** Name of a dtype ("f32", "bf16", ...), "?" for an unknown one. Thread-safe. */
DLT_API const char *dlt_dtype_name(int32_t dtype);

/**
 * Creates a tensor with uninitialised contents.
 * @param shape  ndim sizes, each >= 0 (0 gives an empty tensor). ndim in 0..DLT_MAX_DIMS.
 * @param format DLT_FORMAT_CHANNELS_LAST needs ndim == 4.
 * @return DLT_OK, DLT_ERR_NULL_POINTER, DLT_ERR_INVALID_ARGUMENT (bad ndim, negative size,
 *         size overflow), DLT_ERR_DTYPE, DLT_ERR_OUT_OF_MEMORY, DLT_ERR_DEVICE_OUT_OF_MEMORY,
 *         DLT_ERR_CONTEXT_POISONED.
 */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_empty(dlt_ctx *ctx, int32_t dtype, const int64_t *shape,
                                                  int32_t ndim, int32_t format, dlt_tensor **out);
/** As dlt_tensor_empty, filled with zeros. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_zeros(dlt_ctx *ctx, int32_t dtype, const int64_t *shape,
                                                  int32_t ndim, int32_t format, dlt_tensor **out);
/** As dlt_tensor_empty, then copies nbytes from data (which must equal the tensor's size). */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_from_host(dlt_ctx *ctx, int32_t dtype, const int64_t *shape,
                                                      int32_t ndim, int32_t format, const void *data,
                                                      size_t nbytes, dlt_tensor **out);

/** Adds a reference. Returns its argument (NULL stays NULL). */
DLT_API dlt_tensor *dlt_tensor_retain(dlt_tensor *t);
/** Drops a reference; frees at zero. NULL is a no-op. */
DLT_API void dlt_tensor_release(dlt_tensor *t);

/* Getters. They cannot fail; on NULL they return 0 (-1 for dtype/format/device). */
DLT_API int32_t dlt_tensor_ndim(const dlt_tensor *t);
/** Size of dimension i; negative i counts from the end; 0 when out of range. */
DLT_API int64_t dlt_tensor_dim(const dlt_tensor *t, int32_t i);
/** Number of elements (product of the sizes; 1 for a 0-D tensor). */
DLT_API int64_t dlt_tensor_numel(const dlt_tensor *t);
/** Bytes of the tensor's data (numel x dtype size). */
DLT_API size_t dlt_tensor_nbytes(const dlt_tensor *t);
/** DLT_F32, DLT_F16, ... */
DLT_API int32_t dlt_tensor_dtype(const dlt_tensor *t);
/** DLT_FORMAT_CONTIGUOUS or DLT_FORMAT_CHANNELS_LAST. */
DLT_API int32_t dlt_tensor_format(const dlt_tensor *t);
/** DLT_DEVICE_CPU or DLT_DEVICE_CUDA (the context's device). */
DLT_API int32_t dlt_tensor_device_type(const dlt_tensor *t);
/** The tensor's context (borrowed). */
DLT_API dlt_ctx *dlt_tensor_ctx(const dlt_tensor *t);
/** Copies min(ndim, cap) sizes into shape and returns ndim (or -1 on NULL). */
DLT_API int32_t dlt_tensor_shape(const dlt_tensor *t, int64_t *shape, int32_t cap);

/** Copies the tensor's bytes (memory order) into a host buffer of exactly nbytes.
 *  Synchronises with the context's stream. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_copy_to_host(const dlt_tensor *t, void *dst, size_t nbytes);
/** Copies exactly nbytes (memory order) from a host buffer into the tensor. The host buffer
 *  may be reused as soon as the call returns. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_copy_from_host(dlt_tensor *t, const void *src, size_t nbytes);
/** Copies src into dst: same shape and dtype; the formats and contexts may differ (this is
 *  the CPU<->CUDA copy). Enqueued on dst's context; synchronises when a host copy needs it. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_copy(dlt_tensor *dst, const dlt_tensor *src);
/** New tensor on another context (possibly another device) with the same contents. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_to_ctx(const dlt_tensor *src, dlt_ctx *ctx, dlt_tensor **out);
/** New tensor of another floating dtype (round to nearest even; integers convert by value).
 *  Not recorded on the gradient tape (see dlt_cast in ops.h for the differentiable form). */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_cast(const dlt_tensor *src, int32_t dtype, dlt_tensor **out);
/** New tensor with the same values in another memory format. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_to_format(const dlt_tensor *src, int32_t format, dlt_tensor **out);

/** Sets every element to value (converted to the dtype as PyTorch's fill_ converts it:
 *  integer dtypes truncate toward zero, uint8 wraps -255..-1 to 1..255).
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT when the value does not
 *  fit the dtype ("cannot be converted ... without overflow", as PyTorch says): NaN, inf or
 *  a value outside the range of an integer dtype, a finite value beyond the largest of a
 *  floating dtype (inf and NaN fill floating tensors). */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_fill(dlt_tensor *t, double value);
/** Uniform values in [low, high) from the context's Philox generator. Element i of the
 *  logical (NCHW) order gets the same value on every device for the same seed and offset. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_rand_uniform(dlt_tensor *t, double low, double high);
/** Normal values N(mean, std^2) (Box-Muller on Philox output), same rule as above. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_rand_normal(dlt_tensor *t, double mean, double std);
/** Reads element `index` (logical row-major order) as a double. Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_get(const dlt_tensor *t, int64_t index, double *out);
/** Reads the single element of a one-element tensor. Synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_item(const dlt_tensor *t, double *out);

/* Gradients (see autograd.h for how they are produced). */
/** Marks a floating tensor as a leaf that accumulates a gradient during backward. */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_set_requires_grad(dlt_tensor *t, int32_t on);
/** 1 for a leaf that accumulates a gradient (0 for NULL). */
DLT_API int32_t dlt_tensor_requires_grad(const dlt_tensor *t);
/** The accumulated gradient of a leaf, borrowed (owned by t), or NULL when no backward has
 *  written one since the last zero-grad. Always fp32 for fp32 leaves. A borrowed gradient
 *  is valid until dlt_zero_grad(..., set_to_none=1) lets it go; retain it to keep it longer
 *  (it is then the caller's, no longer written by backward; autograd.h). */
DLT_API dlt_tensor *dlt_tensor_grad(const dlt_tensor *t);

/* ---- Printing (build) ---- */
/**
 * Writes the tensor as text, the way PyTorch's repr does with its default print options:
 * "tensor([[ 0.1940,  2.1614],\n        [-0.1721,  0.8491]])", precision 4, fixed or
 * scientific notation chosen for the whole tensor, values right-aligned, rows wrapped at 80
 * columns; above 1000 elements every dimension longer than 6 shows its first and last 3
 * entries around "...". Suffixes as PyTorch writes them: device='cuda:N', dtype=torch.X
 * (unless float32 or int64), size=(...) for an empty tensor, requires_grad=True for a leaf
 * that requires grad, grad_fn=<op> (the library's op name) for a result on the tape.
 * The library itself never prints: the text goes to buf, as snprintf would write it.
 * @param t       the tensor (borrowed). A CUDA tensor is copied to the host once (the whole
 *                tensor), which synchronises with its context's stream.
 * @param buf     receives min(n - 1, length) bytes of the text and a terminating NUL; may be
 *                NULL when n is 0 (a size query).
 * @param n       size of buf in bytes.
 * @param needed  if not NULL, receives the buffer size the whole text needs (its length + 1);
 *                a result larger than n means buf holds a truncated text.
 * @return DLT_OK; DLT_ERR_NULL_POINTER (t, or buf with n > 0); DLT_ERR_INVALID_STATE (a CUDA
 *         tensor during graph capture); DLT_ERR_OUT_OF_MEMORY; device errors of the copy.
 *         On failure buf and *needed are unchanged.
 */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_snprint(const dlt_tensor *t, char *buf, size_t n,
                                                    size_t *needed);

#ifdef __cplusplus
}
#endif
#endif /* DLTRAIN_TENSOR_H */
