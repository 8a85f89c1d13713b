/*
 * event.c - timing events on the context's stream (the CUDA side of lib/core/event.c) and
 * NVTX profiler ranges, which cost nothing when no profiler is attached.
 */
#include <nvtx3/nvToolsExt.h>

#include "cuda_internal.h"

dlt_status dlt__cuda_event_create(dlt_ctx *ctx, void **ev) {
    cudaEvent_t e = NULL;
    DLT_CU(ctx, cudaEventCreate(&e), "dlt_event_create");
    *ev = e;
    return DLT_OK;
}

dlt_status dlt__cuda_event_record(dlt_ctx *ctx, void *ev) {
    DLT_CU(ctx, cudaEventRecord((cudaEvent_t)ev, dlt__stream(ctx)), "dlt_event_record");
    return DLT_OK;
}

dlt_status dlt__cuda_event_elapsed(dlt_ctx *ctx, void *start, void *end, double *ms) {
    float f = 0;
    DLT_CU(ctx, cudaEventSynchronize((cudaEvent_t)end), "dlt_event_elapsed_ms");
    DLT_CU(ctx, cudaEventElapsedTime(&f, (cudaEvent_t)start, (cudaEvent_t)end), "dlt_event_elapsed_ms");
    *ms = f;
    return DLT_OK;
}

void dlt__cuda_event_destroy(dlt_ctx *ctx, void *ev) {
    (void)ctx;
    if (cudaEventDestroy((cudaEvent_t)ev) != cudaSuccess) (void)cudaGetLastError();
}

void dlt__cuda_range_push(dlt_ctx *ctx, const char *name) {
    (void)ctx;
    nvtxRangePushA(name);
}

void dlt__cuda_range_pop(dlt_ctx *ctx) {
    (void)ctx;
    nvtxRangePop();
}
