/*
 * dltrain/graph.h - capture a whole training step once and replay it (CUDA graphs).
 *
 * The step is a callback that does what one iteration does (next batch, forward, backward,
 * scaler, optimizer). dlt_graph_create runs it `warmup` times eagerly (plans are built,
 * buffers and gradients allocated, autocast weight copies made), then captures one call
 * into a CUDA graph. dlt_graph_run replays it: one launch for the whole step, no host work.
 *
 * Rules for a step that replays correctly: it must enqueue the same work every time (no
 * host reads of device values, no shape changes), keep its inputs in buffers that persist
 * (the loader's, a module's), and release what it creates. Values the step needs to change
 * live on the device (the loss scale, the learning rate, the loader's batch cursor).
 *
 * Memory: what the captured call allocates lives in one buffer per graph, sized by the last
 * warm-up call (the same allocation sequence is placed the same way), so the graph holds
 * what the step has live at once. With warmup 0 the CUDA driver places it instead. A tensor
 * the captured call creates and hands out is rewritten by every replay and stays valid
 * until released, also after dlt_graph_destroy.
 *
 * Autocast's parameter copies: where the capture finds a parameter's f16/bf16 copy current,
 * the graph reads it without a cast of its own (the optimizers write the copy with each
 * update, a captured step included). Before a replay, dlt_graph_run converts again each such
 * copy whose parameter was written since by the host (a load, dlt_tensor_copy, a fill, a
 * broadcast) or is written by some graph's replays, so every replay sees the current
 * weights; a parameter whose layout changed since the capture makes dlt_graph_run fail with
 * DLT_ERR_INVALID_STATE (capture again). Writes through raw device pointers are not seen.
 *
 * When capture is impossible (CPU context, an op that cannot be captured, a host read in
 * the step), the graph runs the callback eagerly on every dlt_graph_run instead, and the
 * log callback (core.h) receives a warning naming the reason; dlt_graph_is_captured says
 * which mode is in force.
 */
#ifndef DLTRAIN_GRAPH_H
#define DLTRAIN_GRAPH_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlt_graph dlt_graph;

/** The step. Returns DLT_OK or a status, which aborts creation/replay with that status. */
typedef dlt_status (*dlt_step_fn)(void *user);

/** Warms up and captures. The captured call is not executed: the first dlt_graph_run is.
 *  Synchronises once, between the warm-up and the capture.
 *  @return DLT_OK (captured or eager fallback), the step's own failure status, out of
 *  memory. */
DLT_API DLT_NODISCARD dlt_status dlt_graph_create(dlt_ctx *ctx, dlt_step_fn step, void *user, int32_t warmup,
                                                  dlt_graph **out);
/** Replays the captured step (or runs it eagerly in fallback mode). Enqueued only. */
DLT_API DLT_NODISCARD dlt_status dlt_graph_run(dlt_graph *g);
/** 1 when the step runs as a captured graph, 0 in eager fallback. */
DLT_API int32_t dlt_graph_is_captured(const dlt_graph *g);
/** Number of kernel and memory nodes in the captured graph (0 in fallback). */
DLT_API int64_t dlt_graph_num_nodes(const dlt_graph *g);

/** What dlt_graph_stat counts in the captured graph. */
typedef enum dlt_graph_stat_kind {
    DLT_GRAPH_STAT_NODES = 0,  /**< all nodes (dlt_graph_num_nodes) */
    DLT_GRAPH_STAT_KERNELS,    /**< kernel launches */
    DLT_GRAPH_STAT_MEMCPY,     /**< memory copies */
    DLT_GRAPH_STAT_MEMSET,     /**< memory sets */
    DLT_GRAPH_STAT_EVENTS,     /**< event records and waits */
    DLT_GRAPH_STAT_MEM_ALLOC,  /**< allocation and free nodes (stream-ordered memory) */
    DLT_GRAPH_STAT_OTHER,      /**< host, empty, child-graph and other nodes */
    DLT_GRAPH_STAT_EDGES,      /**< dependencies between nodes */
    DLT_GRAPH_STAT_DEPTH,      /**< nodes on the longest dependency chain: equal to NODES when
                                *   the step is one serial chain, smaller with parallel branches */
    DLT_GRAPH_STAT_COUNT
} dlt_graph_stat_kind;
/** One count of the captured graph (dlt_graph_stat_kind); 0 in eager fallback or for NULL,
 *  -1 for a kind out of range. Only NODES is guaranteed: where the driver's graph cannot be
 *  read further, the other counts are 0 and DEPTH is -1 (the log says why). */
DLT_API int64_t dlt_graph_stat(const dlt_graph *g, int32_t kind);
/** Waits for a replay in flight, then frees the graph. NULL is a no-op. */
DLT_API void dlt_graph_destroy(dlt_graph *g);

#ifdef __cplusplus
}
#endif
#endif
