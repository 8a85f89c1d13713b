/*
 * graph.c - CUDA side of whole-step graphs: stream capture on the context's stream
 * (thread-local mode, so other threads' CUDA calls cannot invalidate it), instantiation with
 * auto-free-on-launch (memory the step allocates inside the graph is released before each
 * replay), upload, launch. The cuDNN/cuBLAS handles are bound to the same stream, so their
 * kernels are captured too; their plans and workspaces were made during warm-up.
 */
#include "cuda_internal.h"

dlt_status dlt__cuda_capture_begin(dlt_ctx *ctx) {
    DLT_CU(ctx, cudaStreamBeginCapture(dlt__stream(ctx), cudaStreamCaptureModeThreadLocal),
           "dlt_graph_create");
    return DLT_OK;
}

dlt_status dlt__cuda_capture_end(dlt_ctx *ctx, int32_t ok, void **exec, int64_t *n_nodes) {
    static const char *F = "dlt_graph_create";
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(dlt__stream(ctx), &graph);
    if (!ok || e != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        if (e != cudaSuccess) return dlt__cuda_fail(ctx, e, F, "cudaStreamEndCapture");
        return DLT_ERR_INVALID_STATE;
    }
    size_t n = 0;
    e = cudaGraphGetNodes(graph, NULL, &n);
    if (e != cudaSuccess) {
        cudaGraphDestroy(graph);
        return dlt__cuda_fail(ctx, e, F, "cudaGraphGetNodes");
    }
    cudaGraphExec_t g = NULL;
    e = cudaGraphInstantiateWithFlags(&g, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) return dlt__cuda_fail(ctx, e, F, "cudaGraphInstantiateWithFlags");
    e = cudaGraphUpload(g, dlt__stream(ctx));
    if (e != cudaSuccess) {
        cudaGraphExecDestroy(g);
        return dlt__cuda_fail(ctx, e, F, "cudaGraphUpload");
    }
    *exec = g;
    *n_nodes = (int64_t)n;
    return DLT_OK;
}

dlt_status dlt__cuda_graph_launch(dlt_ctx *ctx, void *exec) {
    DLT_CU(ctx, cudaGraphLaunch((cudaGraphExec_t)exec, dlt__stream(ctx)), "dlt_graph_run");
    return DLT_OK;
}

void dlt__cuda_graph_free(dlt_ctx *ctx, void *exec) {
    /* the graph may still be running: let it finish before its memory goes */
    if (cudaStreamSynchronize(dlt__stream(ctx)) != cudaSuccess) (void)cudaGetLastError();
    if (cudaGraphExecDestroy((cudaGraphExec_t)exec) != cudaSuccess) (void)cudaGetLastError();
}
