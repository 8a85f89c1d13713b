/*
 * dltrain/autograd.h - the gradient tape.
 *
 * While grad mode is on (the default), every op whose inputs need gradients records a node
 * on its context's tape: which inputs it read and what its backward pass needs (saved
 * tensors). dlt_backward walks the recorded nodes in reverse order from a root tensor,
 * summing gradients where a tensor feeds several ops.
 *
 * Gradient convention:
 *  - Leaves are tensors marked with dlt_tensor_set_requires_grad (module parameters are).
 *    backward ACCUMULATES (+=) into a leaf's gradient, so several backward passes add up.
 *    dlt_zero_grad resets: set_to_none=1 marks the gradient absent (dlt_tensor_grad returns
 *    NULL, the optimizer skips the parameter, and the next backward writes a new one instead
 *    of adding) and lets its buffer go, as PyTorch's grad = None: its memory returns to the
 *    allocator, or stays with a caller that retained it, which the next backward then no
 *    longer writes. The buffer is kept (only marked absent) while a captured graph of the
 *    context exists (its replays may write it at that address), inside a capture and its
 *    warm-up, and when its storage is shared (DDP's bucket views). set_to_none=0 fills it
 *    with zeros in place.
 *  - Gradients of intermediate tensors exist only during backward.
 *
 * Ownership: op results are references owned by the caller (release them when done; a
 * module's forward releases its own intermediates). The tape holds its own references to
 * what backward needs. Backward releases those as it goes, so once backward has run and the
 * caller has released the results, memory is back where it was before the forward.
 * A recorded graph lives as long as some tensor produced by it is alive; releasing all
 * results of a forward that will never be backwarded frees its recording too.
 * Running backward twice through the same recording fails with DLT_ERR_INVALID_STATE.
 *
 * Nothing here synchronises with the device: backward only enqueues work.
 */
#ifndef DLTRAIN_AUTOGRAD_H
#define DLTRAIN_AUTOGRAD_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Runs backward from root.
 * @param root  the tensor to differentiate (a loss). It must have been produced by recorded
 *              ops (or be a leaf that requires grad).
 * @param grad  gradient of the output w.r.t. root: root's shape, any floating dtype (f32,
 *              f16, bf16: converted to root's dtype, as PyTorch's engine converts it) and
 *              any memory format; or NULL for a one-element root (then 1 is used, as
 *              loss.backward() does).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_STATE (nothing recorded for root,
 *         or backward already ran through it); DLT_ERR_SHAPE (grad shape, or NULL grad for a
 *         root with several elements); DLT_ERR_DTYPE (an integer grad: PyTorch would convert
 *         it, libdltrain refuses it as a mistake); DLT_ERR_CONTEXT_MISMATCH; out of memory; device
 *         errors. After a failure the accumulated gradients are unspecified: zero them and
 *         run the step again.
 */
DLT_API DLT_NODISCARD dlt_status dlt_backward(dlt_tensor *root, dlt_tensor *grad);

/** Resets the gradients of n leaves (see the convention above). NULL entries are skipped. */
DLT_API DLT_NODISCARD dlt_status dlt_zero_grad(dlt_tensor *const *params, int32_t n, int32_t set_to_none);

/** Turns gradient recording on or off for the context; *previous (may be NULL) receives
 *  the old setting. Off is PyTorch's no_grad: nothing is recorded. */
DLT_API DLT_NODISCARD dlt_status dlt_grad_set_enabled(dlt_ctx *ctx, int32_t enabled, int32_t *previous);
/** 1 when recording is on (0 for NULL). */
DLT_API int32_t dlt_grad_is_enabled(const dlt_ctx *ctx);

/** Number of recorded nodes still alive on the context's tape (for tests and leak hunts). */
DLT_API DLT_NODISCARD dlt_status dlt_tape_live_nodes(dlt_ctx *ctx, int64_t *out);
/** Drops everything every recorded node saved for backward and marks the nodes used, so
 *  the memory goes back even while the results are still held. A later backward through
 *  them fails with DLT_ERR_INVALID_STATE. */
DLT_API DLT_NODISCARD dlt_status dlt_tape_clear(dlt_ctx *ctx);

/** A new reference to a tensor with the same storage that is cut off from the tape (no
 *  gradient flows through it). */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_detach(dlt_tensor *t, dlt_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
