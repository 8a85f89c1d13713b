/*
 * side.c - the CUDA side stream (lib/core/side.c says what runs there and when it joins).
 * Forking swaps the state's stream and workspace for the side's and binds the cuDNN and
 * cuBLAS handles to it, so every kernel path (cuDNN plans, cuBLASLt, our kernels) follows
 * without a stream argument; unforking swaps back. Events order the two streams; inside a
 * capture they become the edges of parallel branches, so the graph gets no extra nodes.
 * The stream and events are created on the first fork outside a capture (an eager or
 * warm-up step); a capture before that runs everything on the main stream.
 */
#include <string.h>

#include "cuda_internal.h"

static dlt_status bind_handles(dlt_ctx *ctx, cudaStream_t st, const char *F) {
    dlt_cuda_state *s = dlt__cu(ctx);
    DLT_CUDNN(ctx, cudnnSetStream(s->cudnn, st), F);
    DLT_CUBLAS(ctx, cublasSetStream(s->cublas, st), F);
    return DLT_OK;
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
    static const char *F = "dlt_backward";
    dlt_cuda_state *s = dlt__cu(ctx);
    *forked = 0;
    if (s->side.on) return dlt__err(DLT_ERR_INTERNAL, F, "the side stream is already in use");
    if (!s->side.stream) {
        if (ctx->capturing) return DLT_OK; /* not before the warm-up has made it */
        DLT_CHECK(side_create(ctx));
    }
    DLT_CU(ctx, cudaEventRecord(s->side.fork_ev, s->stream), F);
    DLT_CU(ctx, cudaStreamWaitEvent(s->side.stream, s->side.fork_ev, 0), F);
    swap_lane(s);
    const dlt_status st = bind_handles(ctx, s->stream, F);
    if (st != DLT_OK) {
        swap_lane(s);
        (void)bind_handles(ctx, s->stream, F);
        return st;
    }
    s->side.on = 1;
    *forked = 1;
    return DLT_OK;
}

dlt_status dlt__cuda_side_unfork(dlt_ctx *ctx) {
    static const char *F = "dlt_backward";
    dlt_cuda_state *s = dlt__cu(ctx);
    if (!s->side.on) return dlt__err(DLT_ERR_INTERNAL, F, "the side stream is not in use");
    const cudaError_t e = cudaEventRecord(s->side.done_ev, s->stream);
    swap_lane(s);
    s->side.on = 0;
    dlt_status st = bind_handles(ctx, s->stream, F);
    if (e != cudaSuccess) return dlt__cuda_fail(ctx, e, F, "cudaEventRecord(side stream)");
    return st;
}

dlt_status dlt__cuda_side_join(dlt_ctx *ctx) {
    dlt_cuda_state *s = dlt__cu(ctx);
    DLT_CU(ctx, cudaStreamWaitEvent(s->stream, s->side.done_ev, 0), "dlt_backward");
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
