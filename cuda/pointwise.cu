/*
 * pointwise.cu - CUDA kernels of the unary ops and activations (lib/ops/pointwise.c) and
 * their derivatives: the fp32 formulas of lib/kernel/unary.h (dlt__un_f32, dlt__un_df32),
 * elementwise over flat memory. Compile-checked; first run on a GPU is the next
 * session's.
 */
#include "../lib/kernel/unary.h"
#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

/* integers: neg, abs, add a whole number (the front door sends nothing else), wrapping */
template <typename T> __global__ void unary_int_kernel(T *y, const T *x, int64_t n, int op, int64_t k) {
    DLT_GRID_STRIDE(i, n) {
        const int64_t v = (int64_t)x[i];
        const uint64_t u = (uint64_t)v;
        y[i] = (T)(op == DLT_UN_NEG ? 0 - u : op == DLT_UN_ABS ? (v < 0 ? 0 - u : u) : u + (uint64_t)k);
    }
}

template <typename T> __global__ void unary_kernel(T *y, const T *x, int64_t n, int op, float a) {
    DLT_GRID_STRIDE(i, n) y[i] = from_f<T>(dlt__un_f32(op, to_f<T>(x[i]), a));
}

template <typename T>
__global__ void unary_bwd_kernel(T *dx, const T *dy, const T *x, const T *y, int64_t n, int op, float a) {
    DLT_GRID_STRIDE(i, n) {
        const float xv = x ? to_f<T>(x[i]) : 0.0f, yv = y ? to_f<T>(y[i]) : 0.0f;
        dx[i] = from_f<T>(dlt__un_df32(op, to_f<T>(dy[i]), xv, yv, a));
    }
}

} // namespace

extern "C" {

dlt_status dlt__cuda_unary(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, int32_t op, double alpha) {
    const int64_t n = x->numel;
    cudaStream_t st = dlt__stream(ctx);
    DLT_CHECK(same_dtype("dlt_unary", x->dtype, y));
    switch (x->dtype) {
    case DLT_I32:
        unary_int_kernel<int32_t><<<grid_for(n, 256), 256, 0, st>>>((int32_t *)dlt__data(y), (const int32_t *)dlt__data(x),
                                                                  n, op, (int64_t)alpha);
        DLT_CU_LAUNCHED(ctx, "dlt_unary");
        return DLT_OK;
    case DLT_I64:
        unary_int_kernel<int64_t><<<grid_for(n, 256), 256, 0, st>>>((int64_t *)dlt__data(y), (const int64_t *)dlt__data(x),
                                                                  n, op, (int64_t)alpha);
        DLT_CU_LAUNCHED(ctx, "dlt_unary");
        return DLT_OK;
    case DLT_U8:
        unary_int_kernel<uint8_t><<<grid_for(n, 256), 256, 0, st>>>((uint8_t *)dlt__data(y), (const uint8_t *)dlt__data(x),
                                                                  n, op, (int64_t)alpha);
        DLT_CU_LAUNCHED(ctx, "dlt_unary");
        return DLT_OK;
    default: break;
    }
    DLT_DISPATCH_FLOAT(x->dtype, T,
        unary_kernel<T><<<grid_for(n, 256), 256, 0, dlt__stream(ctx)>>>((T *)dlt__data(y), (const T *)dlt__data(x), n,
                                                                        op, (float)alpha));
    DLT_CU_LAUNCHED(ctx, "dlt_unary");
    return DLT_OK;
}

dlt_status dlt__cuda_unary_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *x,
                               const dlt_tensor *y, int32_t op, double alpha) {
    const int64_t n = dx->numel;
    /* the front door makes dx, dy, x and y one dtype */
    DLT_CHECK(same_dtype("dlt_unary_backward", dx->dtype, dy, x, y));
    DLT_DISPATCH_FLOAT(dx->dtype, T,
        unary_bwd_kernel<T><<<grid_for(n, 256), 256, 0, dlt__stream(ctx)>>>(
            (T *)dlt__data(dx), (const T *)dlt__data(dy), x ? (const T *)dlt__data(x) : nullptr,
            y ? (const T *)dlt__data(y) : nullptr, n, op, (float)alpha));
    DLT_CU_LAUNCHED(ctx, "dlt_unary_backward");
    return DLT_OK;
}

} // extern "C"
