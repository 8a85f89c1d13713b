/*
 * side.c - the CUDA side stream (lib/core/side.c says what runs there and when it joins).
 * Forking swaps the state's stream and workspace for the side's and binds the cuDNN handle
 * to it, so every kernel path (cuDNN plans, cuBLASLt, our kernels) follows without a stream
 * argument; unforking swaps back. Events order the two streams; inside a
 * capture they become the edges of parallel branches, so the graph gets no extra nodes.
 * The stream and events are created on the first fork outside a capture (an eager or
 * warm-up step); a capture before that runs everything on the main stream, and so does a
 * context whose side stream could not be created. A failure to order the streams or to
 * rebind cuDNN poisons the context: work would otherwise run unordered.
 */
#include <string.h>

#include "cuda_internal.h"

/* Only cuDNN's handle is bound to a stream here: cuBLASLt and our kernels take the stream per
 * call (dlt__stream), and no cuBLAS (v2) call runs on the side. The plans were built with
 * this handle, so the side cannot have a handle of its own. */
static cudaError_t bind_cudnn(dlt_cuda_state *s, cudaStream_t st) {
    return cudnnSetStream(s->cudnn, st) == CUDNN_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

/* A failure to order or rebind the two streams leaves work unordered (a cuDNN call on the
 * wrong stream, a join on a stale event): the context is poisoned, nothing runs after it. */
static dlt_status side_broken(dlt_ctx *ctx, const char *what) {
    (void)cudaGetLastError();
    return dlt__ctx_poison(ctx, DLT_ERR_CUDA, "dlt_backward", what);
}

static void swap_lane(dlt_cuda_state *s) {
    cudaStream_t st = s->stream;
    s->stream = s->side.other_stream, s->side.other_stream = st;
    void *ws = s->workspace;
    s->workspace = s->side.other_ws, s->side.other_ws = ws;
    size_t n = s->workspace_size;
    s->workspace_size = s->side.other_ws_size, s->side.other_ws_size = n;
}

static dlt_status side_create(dlt_ctx *ctx) {
    static const char *F = "dlt_backward";
    dlt_cuda_state *s = dlt__cu(ctx);
    cudaStream_t st = NULL;
    cudaEvent_t a = NULL, b = NULL;
    int prio = 0;
    cudaError_t e = cudaStreamGetPriority(s->stream, &prio);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, prio);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&a, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&b, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        if (a) (void)cudaEventDestroy(a);
        if (st) (void)cudaStreamDestroy(st);
        return dlt__cuda_fail(ctx, e, F, "creating the side stream and its events");
    }
    s->side.other_stream = st, s->side.stream = st, s->side.fork_ev = a, s->side.done_ev = b;
    return DLT_OK;
}

dlt_status dlt__cuda_side_fork(dlt_ctx *ctx, int32_t *forked) {
    dlt_cuda_state *s = dlt__cu(ctx);
    *forked = 0;
    if (s->side.on) return dlt__err(DLT_ERR_INTERNAL, "dlt_backward", "the side stream is already in use");
    if (s->side.unavailable) return DLT_OK;
    if (!s->side.stream) {
        if (ctx->capturing) return DLT_OK; /* not before the warm-up has made it */
        if (side_create(ctx) != DLT_OK) { /* everything runs on one stream then, as before */
            dlt__log(DLT_LOG_WARNING, "dlt: no side stream (%s); the backward runs on one stream",
                     dlt_last_error());
            dlt_clear_error();
            s->side.unavailable = 1;
            return DLT_OK;
        }
    }
    if (cudaEventRecord(s->side.fork_ev, s->stream) != cudaSuccess ||
        cudaStreamWaitEvent(s->side.stream, s->side.fork_ev, 0) != cudaSuccess)
        return side_broken(ctx, "ordering the side stream after the context stream failed");
    swap_lane(s);
    if (bind_cudnn(s, s->stream) != cudaSuccess) {
        swap_lane(s);
        return side_broken(ctx, "binding cuDNN to the side stream failed");
    }
    s->side.on = 1;
    *forked = 1;
    return DLT_OK;
}

dlt_status dlt__cuda_side_unfork(dlt_ctx *ctx) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (!s->side.on) return dlt__err(DLT_ERR_INTERNAL, "dlt_backward", "the side stream is not in use");
    const cudaError_t e = cudaEventRecord(s->side.done_ev, s->stream);
    swap_lane(s);
    s->side.on = 0;
    if (bind_cudnn(s, s->stream) != cudaSuccess)
        return side_broken(ctx, "binding cuDNN back to the context stream failed");
    if (e != cudaSuccess) return side_broken(ctx, "recording the side stream's event failed");
    return DLT_OK;
}

dlt_status dlt__cuda_side_join(dlt_ctx *ctx) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (cudaStreamWaitEvent(s->stream, s->side.done_ev, 0) != cudaSuccess)
        return side_broken(ctx, "ordering the context stream after the side stream failed");
    return DLT_OK;
}

void dlt__cuda_side_destroy(dlt_cuda_state *s) {
    if (!s->side.stream) return;
    (void)cudaStreamSynchronize(s->side.stream);
    /* the side workspace sits in other_ws whenever the side is not in use */
    if (s->side.other_ws) (void)cudaFreeAsync(s->side.other_ws, s->stream);
    (void)cudaEventDestroy(s->side.fork_ev);
    (void)cudaEventDestroy(s->side.done_ev);
    (void)cudaStreamDestroy(s->side.stream);
    memset(&s->side, 0, sizeof s->side);
}
