/*
 * optim_grads.h - the optimizer's narrow gradients interface, all that the GradScaler
 * (lib/amp/scaler.c) sees of an optimizer: its context, its identity, the gradients its next
 * step uses, the state allocation that must precede unscaling, and a step the device skips
 * on found-inf. The optimizer object (optim_internal.h) stays private to lib/optim (and the
 * checkpoints of lib/io).
 */
#ifndef DLT_OPTIM_GRADS_H
#define DLT_OPTIM_GRADS_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The optimizer's context, and a number unique per optimizer in the process (the scaler keys
 * its records by pointer and uid, so a new optimizer at a freed one's address is new). */
dlt_ctx *dlt__optimizer_ctx(const dlt_optimizer *opt);
uint64_t dlt__optimizer_uid(const dlt_optimizer *opt);
/* The gradients the next step would use (parameters with a defined gradient, each once, in
 * parameter order). *grads is the optimizer's array, valid until the next call on it:
 * callers read it and may change the gradients' values (unscaling), never the array. */
void dlt__optimizer_grads(dlt_optimizer *opt, dlt_tensor ***grads, int32_t *n);
/* Creates the state tensors the next step needs (parameters with a gradient and no state
 * yet), all or nothing. The step calls it first; the GradScaler calls it before it
 * unscales, so that a step failing for memory leaves the gradients and its stage as they
 * were. */
dlt_status dlt__optimizer_prepare(dlt_optimizer *opt, const char *func);
/* One step that the device skips when *found_inf != 0 (found_inf: device f32 on the
 * optimizer's context, or NULL for a plain step). Enqueued only. */
dlt_status dlt__optimizer_step_found_inf(dlt_optimizer *opt, const void *found_inf,
                                         const char *func);

#ifdef __cplusplus
}
#endif
#endif
