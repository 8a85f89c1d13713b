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

#endif
