/*
 * tape.h - the autograd tape (lib/core/tape.c): the per-context record of nodes, the nodes
 * with their edges, saved tensors and typed per-op attributes, and the grad slots a backward
 * function fills. Part of lib/core/internal.h.
 */
#ifndef DLT_CORE_TAPE_H
#define DLT_CORE_TAPE_H

#include <stdint.h>

#include "dltrain/tensor.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlt_node dlt_node;

/* dist: hooks a context's tape calls during every backward (lib/core/tape.c), so DDP
 * (lib/dist/ddp.c) can reduce a gradient bucket as soon as its gradients are final. begin
 * runs before the walk, leaf_ready once for each leaf (requires_grad tensor) reachable
 * from the root, right after the last node that feeds it ran (its gradient is final,
 * although a deferred fp16/bf16 accumulation may still be queued: dlt__tape_flush), end
 * after the walk with the walk's status (also when it failed). A failing hook stops the
 * backward with its status. */
#define DLT_TAPE_MAX_HOOKS 4
typedef struct dlt_tape_hook {
    void *user;
    dlt_status (*begin)(void *user);
    dlt_status (*leaf_ready)(void *user, dlt_tensor *leaf);
    dlt_status (*end)(void *user, dlt_status st);
} dlt_tape_hook;

/* Work a backward enqueued on the backend's side stream and has not joined yet
 * (lib/core/side.c): the tensors it reads or writes are held until the join, and the leaf
 * gradient buffers it writes are listed so nothing on the main stream touches them first. */
#define DLT_SIDE_MAX 256
typedef struct dlt_side {
    int32_t outstanding;
    int32_t n_held, n_written;
    uint64_t held_bytes;
    dlt_tensor *held[DLT_SIDE_MAX];
    const dlt_tensor *written[DLT_SIDE_MAX];
    int64_t forks, joins; /* counts, for tests */
} dlt_side;

/* The context's tape (struct dlt_ctx holds one). */
typedef struct dlt_tape {
    dlt_node **slots; /* weak pointers in recording order; NULL once a node dies */
    int64_t n, cap;
    int64_t live; /* nodes alive */
    uint64_t next_seq;
    /* leaf-gradient accumulations deferred to the end of the running backward (tape.c) */
    dlt_tensor **pend_dst, **pend_src;
    int32_t *pend_beta;
    int32_t n_pend, cap_pend;
    int64_t pend_bytes; /* queued gradient bytes (flushed at DLT_GRAD_QUEUE_MAX) */
    int32_t in_backward;
    /* dist: the hooks above, and the generation that marks one backward's pre-scan */
    dlt_tape_hook hooks[DLT_TAPE_MAX_HOOKS];
    int32_t n_hooks;
    uint64_t hook_gen;
    dlt_side side;
} dlt_tape;

/* ---------------------------------------------------------------------------------------
 * Autograd tape (lib/core/tape.c)
 * ------------------------------------------------------------------------------------- */
#define DLT_NODE_MAX_IN 8
#define DLT_NODE_MAX_OUT 8
#define DLT_NODE_MAX_SAVED 8
#define DLT_NODE_ATTR_BYTES 256
/* The node's attributes as the op's struct T (checked to fit where it is used). */
#define DLT_NODE_ATTR(node, T) ((T *)(void *)(node)->attr.bytes)

/* Where the gradient of a node input goes: into another node's output slot, into a leaf's
 * .grad, or nowhere (input needs no gradient). */
typedef struct dlt_edge {
    dlt_node *node; /* strong reference */
    int32_t index;
    dlt_tensor *leaf; /* strong reference */
} dlt_edge;

/* What backward receives for each input. needed: a gradient is wanted. For a leaf whose
 * buffer can be written directly, dst is that buffer and beta says overwrite (0) or
 * accumulate (1); likewise (beta 1, nonleaf) for a node output whose gradient so far no one
 * else holds, so an op can add into it (LayerNorm's dx into the residual stream's gradient)
 * instead of handing a result the tape then adds; a backward that writes dst sets
 * written = 1. Otherwise the backward sets result to a new tensor and the tape delivers
 * it. dlt__grad_slot_store does either. */
typedef struct dlt_grad_slot {
    int32_t needed;
    dlt_tensor *dst; /* borrowed, may be NULL */
    int32_t beta;
    int32_t written;
    dlt_tensor *result; /* new reference, or NULL */
    /* dst is the gradient a node output has accumulated so far (beta 1), not a leaf's
     * buffer: only same-dtype, same-format writes go there, never through the queue */
    int32_t nonleaf;
} dlt_grad_slot;

typedef dlt_status (*dlt_backward_fn)(dlt_node *node, dlt_tensor *const *grad_out,
                                      dlt_grad_slot *grad_in);

struct dlt_node {
    int32_t refcount;
    dlt_ctx *ctx;
    const char *name; /* op name, static string */
    dlt_backward_fn backward;
    int32_t n_in, n_out;
    dlt_edge next[DLT_NODE_MAX_IN];
    /* dtype/shape of each input, for checks and for leaf-dtype casts */
    dlt_tensor *grad_accum[DLT_NODE_MAX_OUT]; /* gradients of outputs summed during backward */
    dlt_tensor *saved[DLT_NODE_MAX_SAVED];    /* strong references, dropped after backward */
    int32_t n_saved;
    /* typed per-op attributes: an op stores its own struct here (DLT_NODE_ATTR) */
    union {
        double d_;
        int64_t i_;
        unsigned char bytes[DLT_NODE_ATTR_BYTES];
    } attr;
    int64_t slot;   /* position in ctx->tape.slots */
    uint64_t seq;
    int32_t consumed;
    /* the backward hands its output's gradient to dlt__grad_slot_store without reading it
     * (casts): the side stream's work may still be writing it (lib/core/side.c) */
    int32_t hands_on;
    uint64_t hook_gen; /* dist: reachable from the running backward's root (tape hooks) */
};

/* Whether an op with these inputs must be recorded (grad mode on and some input needs
 * a gradient). */
int dlt__needs_grad(const dlt_ctx *ctx, dlt_tensor *const *inputs, int32_t n);
/* Creates a node for an op, with edges for its inputs, appends it to the tape, and makes
 * outputs[i]->grad_fn point to it. Returns NULL node (and DLT_OK) when nothing needs
 * recording. The caller then saves tensors (dlt__save) and stores the op's attribute
 * struct (DLT_SET_ATTR, lib/ops/ops_internal.h) in *out_node. */
dlt_status dlt__record(dlt_ctx *ctx, const char *name, dlt_backward_fn backward,
                       dlt_tensor *const *inputs, int32_t n_in, dlt_tensor *const *outputs,
                       int32_t n_out, dlt_node **out_node);
/* Saves a tensor for backward (takes a reference). */
void dlt__save(dlt_node *node, dlt_tensor *t);
void dlt__node_release(dlt_node *node);
void dlt__tape_fini(dlt_ctx *ctx);
/* Writes a computed gradient into a slot's destination (dst with beta) and releases it. */
dlt_status dlt__grad_slot_store(dlt_ctx *ctx, dlt_grad_slot *slot, dlt_tensor *g);

/* dist (lib/dist): adds a hook to ctx's tape (DLT_ERR_INVALID_STATE when DLT_TAPE_MAX_HOOKS
 * are set or a backward is running); removes the hook with this user pointer (no-op when
 * absent); applies the queued deferred leaf accumulations now. */
dlt_status dlt__tape_hook_add(dlt_ctx *ctx, const dlt_tape_hook *h, const char *func);
void dlt__tape_hook_remove(dlt_ctx *ctx, void *user);
dlt_status dlt__tape_flush(dlt_ctx *ctx);

/* The side stream (lib/core/side.c). A backward that has independent work (a convolution's
 * weight gradient beside its data gradient, the queued fp32 accumulations) asks
 * dlt__side_begin with how many tensors it will hold and gradient buffers it will write;
 * when *on comes back 1 it enqueues that work, which must allocate nothing, then calls
 * dlt__side_end whatever happened, naming the tensors the work reads or writes (held until
 * the join) and the leaf gradient buffers it writes (NULL entries are skipped).
 * dlt__side_join makes the main stream wait for the side's work and releases what was held;
 * the tape calls it before anything reads what the side wrote, and when backward ends. */
dlt_status dlt__side_begin(dlt_ctx *ctx, int32_t n_hold, int32_t n_written, int32_t *on);
dlt_status dlt__side_end(dlt_ctx *ctx, dlt_tensor *const *hold, int32_t n_hold, dlt_tensor *const *written,
                         int32_t n_written);
dlt_status dlt__side_join(dlt_ctx *ctx);
int dlt__side_wrote(const dlt_ctx *ctx, const dlt_tensor *buf);
/* t shares storage with a tensor held for the side's work */
int dlt__side_holds(const dlt_ctx *ctx, const dlt_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
