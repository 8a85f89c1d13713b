/*
 * error.c - CUDA, cuBLAS and cuDNN failures turned into dlt_status codes with the
 * library's message (the DLT_CU* macros of cuda_internal.h call these). Errors after which
 * the device state is unknown (illegal address, launch failure, ...) poison the context;
 * the others (bad value, out of memory, unsupported, capture errors) leave it usable.
 */
#include <stdio.h>

#include "cuda_internal.h"

/* Errors after which the device state is unknown: everything else (bad value, out of
 * memory, unsupported, capture errors) leaves the context usable. */
static int cuda_error_is_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorInvalidDevice:
    case cudaErrorNotSupported:
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureWrongThread:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorNotReady:
        return 0;
    default:
        return 1;
    }
}

dlt_status dlt__cuda_fail(dlt_ctx *ctx, cudaError_t e, const char *func, const char *what) {
    char msg[400];
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call is not affected */
    if (e == cudaErrorMemoryAllocation)
        return dlt__err(DLT_ERR_DEVICE_OUT_OF_MEMORY, func, "out of device memory in %s", what);
    snprintf(msg, sizeof msg, "%s failed: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    if (ctx && cuda_error_is_sticky(e)) return dlt__ctx_poison(ctx, DLT_ERR_CUDA, func, msg);
    return dlt__err(DLT_ERR_CUDA, func, "%s", msg);
}

dlt_status dlt__cublas_fail(dlt_ctx *ctx, cublasStatus_t s, const char *func, const char *what) {
    (void)ctx;
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        return dlt__err(DLT_ERR_DEVICE_OUT_OF_MEMORY, func, "cuBLAS ran out of memory in %s", what);
    return dlt__err(DLT_ERR_CUBLAS, func, "%s failed: %s (%s)", what, cublasGetStatusName(s),
                    cublasGetStatusString(s));
}

dlt_status dlt__cudnn_fail(dlt_ctx *ctx, cudnnStatus_t s, const char *func, const char *what) {
    (void)ctx;
    char detail[256] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    if (s == CUDNN_STATUS_ALLOC_FAILED)
        return dlt__err(DLT_ERR_DEVICE_OUT_OF_MEMORY, func, "cuDNN ran out of memory in %s", what);
    if (s == CUDNN_STATUS_NOT_SUPPORTED || (s / 1000) == 3)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, func, "%s: cuDNN %s %s", what, cudnnGetErrorString(s),
                        detail);
    return dlt__err(DLT_ERR_CUDNN, func, "%s failed: %s %s", what, cudnnGetErrorString(s), detail);
}
