/*
 * ops_internal.h - helpers shared by the op front doors (lib/ops/ files).
 *
 * A front door: validates its arguments (naming the public function), applies the autocast
 * policy, allocates outputs, calls the backend kernel, and records a tape node when an
 * input needs a gradient. Differentiable helpers below (cast, format change, autocast
 * operand) record their own nodes, so gradients flow back to fp32 parameters.
 */
#ifndef DLT_OPS_INTERNAL_H
#define DLT_OPS_INTERNAL_H

#include "../core/internal.h"

/* Reports a backend entry that this device lacks. */
#define DLT_NEED_KERNEL(ctx, entry, func)                                                     \
    do {                                                                                      \
        if (!(ctx)->be->entry) return dlt__be_missing((ctx), (func), #entry);                 \
    } while (0)

/* Differentiable dtype conversion: a new reference (x itself, retained, if already dtype). */
dlt_status dlt__op_cast(dlt_tensor *x, int32_t dtype, const char *func, dlt_tensor **out);
/* Differentiable memory-format conversion (x retained if already in that format). */
dlt_status dlt__op_to_format(dlt_tensor *x, int32_t format, const char *func, dlt_tensor **out);
/* The backward of a cast or format change (elementwise.c): the gradient converted back to
 * the input's dtype and format, which the node holds as its convert_attr. */
typedef struct convert_attr {
    int32_t dtype, format;
} convert_attr;
dlt_status dlt__convert_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin);
/* The autocast policy (autocast.c). The dtype of the innermost autocast region, or -1. */
int32_t dlt__autocast_dtype(const dlt_ctx *ctx);
/* The operand an autocast-eligible op (conv2d, linear) uses: x itself when autocast is off
 * or x already has the dtype; for an fp32 parameter the cached low-precision copy (made once,
 * refreshed by the optimizer; see dlt_tensor.lp_copy); otherwise a differentiable cast. */
dlt_status dlt__autocast_operand(dlt_tensor *x, int32_t dtype, const char *func, dlt_tensor **out);
/* A detached alias of a node's own output, safe to save on that node (no cycle). */
dlt_status dlt__alias(dlt_tensor *t, const char *func, dlt_tensor **out);

/* Size arithmetic on op arguments (padding, dilation, and the sizes of empty tensors, whose
 * other dimensions may be anything): 1 when the result does not fit in int64. */
static inline int dlt__add_ovf(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out); }
static inline int dlt__mul_ovf(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }

/* Empty tensors: kernels may assume numel > 0, so front doors skip them. The gradient of
 * an empty output is zero; dlt__grad_zero writes that into a destination that takes
 * dst = beta*dst + grad (nothing to do when beta is 1 or dst is empty). */
static inline dlt_status dlt__grad_zero(dlt_ctx *ctx, dlt_tensor *dst, int32_t beta) {
    if (beta || dst->numel == 0) return DLT_OK;
    return ctx->be->memset0(ctx, dlt__data(dst), dlt__nbytes(dst));
}

/* Whether a kernel may write slot->dst directly for a gradient shaped like `like`. */
static inline int dlt__slot_direct(const dlt_grad_slot *slot, const dlt_tensor *like) {
    return slot->needed && slot->dst && slot->dst->dtype == like->dtype &&
           slot->dst->format == like->format && slot->dst->numel == like->numel;
}


/* ---- LayerNorm's parameter gradients (layer_norm.c; add_layer_norm.c shares them) ---- */
typedef struct dlt__ln_pgrads {
    dlt_tensor *dw, *db; /* the leaf buffers (direct) or new tensors, NULL when not needed */
    int32_t beta;        /* the kernel's beta for both */
    int32_t direct;
} dlt__ln_pgrads;
dlt_status dlt__ln_param_grads(dlt_grad_slot *gw, dlt_grad_slot *gb, dlt_tensor *w, dlt_tensor *b, const char *F,
                               dlt__ln_pgrads *pg);
dlt_status dlt__ln_param_grads_store(dlt_ctx *ctx, dlt_grad_slot *gw, dlt_grad_slot *gb, dlt__ln_pgrads *pg);
void dlt__ln_param_grads_drop(dlt__ln_pgrads *pg);

/* ---- N-D ops (nd.c) ---- */
/* dim in [-ndim, ndim) (a 0-D tensor counts as 1-D) -> [0, ndim). */
dlt_status dlt__norm_dim(int32_t dim, int32_t ndim, const char *func, int32_t *out);
/* The broadcast shape of a and b (NumPy rules: aligned at the last dimension, sizes equal
 * or 1), or DLT_ERR_SHAPE naming both shapes. */
dlt_status dlt__broadcast_shape(const dlt_tensor *a, const dlt_tensor *b, const char *func,
                                int64_t *shape, int32_t *ndim);
void dlt__contig_strides(const int64_t *shape, int32_t ndim, int64_t *strides);
void dlt__nd_init(dlt_nd *s, const int64_t *shape, int32_t ndim);
/* Operand map of contiguous t read as if broadcast to shape (stride 0 where t has size 1 or
 * lacks the dimension). */
void dlt__nd_broadcast_operand(const dlt_tensor *t, const int64_t *shape, int32_t ndim,
                               dlt_nd_operand *o);
/* Drops size-1 dimensions and merges neighbours that every operand steps through as one. */
void dlt__nd_collapse(dlt_nd *s, dlt_nd_operand *ops, int32_t n_ops);
/* Reduction of contiguous x over the dimensions d with reduced[d] != 0. */
void dlt__reduce_spec(const dlt_tensor *x, const int32_t *reduced, dlt_reduce_spec *r);
/* Result dtype of a binary op (PyTorch's promotion: float over integer, wider within a kind). */
int32_t dlt__promote(int32_t a, int32_t b);
/* x itself (retained) when contiguous, else a differentiable contiguous copy: the N-D ops
 * accept channels-last tensors this way. */
dlt_status dlt__contiguous_input(dlt_tensor *x, const char *func, dlt_tensor **out);
/* Autocast's fp32 list (autocast.c: softmax, log_softmax, layer_norm, sum, exp, log, pow,
 * losses...): in an autocast region a low-precision float x is cast up (differentiably);
 * else x itself. */
dlt_status dlt__autocast_fp32(dlt_tensor *x, const char *func, dlt_tensor **out);

/* Kernel-level helpers for backward functions (nothing is recorded). */
/* y (dtype, broadcast shape) = op(a, b) */
dlt_status dlt__k_binary(dlt_ctx *ctx, int32_t dtype, const dlt_tensor *a, const dlt_tensor *b,
                         int32_t op, double alpha, const char *func, dlt_tensor **out);
/* g summed over the dimensions broadcasting added to reach g's shape from `shape`, as dtype
 * (g itself, retained, when nothing is summed and the dtype matches) */
dlt_status dlt__k_sum_to(dlt_ctx *ctx, dlt_tensor *g, const int64_t *shape, int32_t ndim,
                         int32_t dtype, const char *func, dlt_tensor **out);
/* y = op(x) */
dlt_status dlt__k_unary(dlt_ctx *ctx, const dlt_tensor *x, int32_t op, double alpha,
                        const char *func, dlt_tensor **out);
/* copy_nd after merging dimensions; nothing for an empty space */
dlt_status dlt__k_copy(dlt_ctx *ctx, dlt_tensor *dst, const dlt_nd_operand *od, const dlt_tensor *src,
                       const dlt_nd_operand *os, const dlt_nd *s);

/* The output slot convention of the new ops: store the op's attribute struct in the node. */
#define DLT_SET_ATTR(node, T, value)                                                          \
    do {                                                                                      \
        _Static_assert(sizeof(T) <= DLT_NODE_ATTR_BYTES, #T " does not fit a tape node");    \
        if (node) *DLT_NODE_ATTR(node, T) = (value);                                          \
    } while (0)

#endif
