/*
 * softmax.cu - CUDA softmax / log_softmax over the middle dimension of [outer, n, inner]
 * and their backward from the output, fp32 math:
 *   inner == 1 (the last dimension): one warp per row, three passes over the row
 *     (max, sum of exp, write); backward two passes (the dot or sum, write);
 *   inner > 1: one thread per (outer, inner) column walking n with stride inner.
 * Compile-checked; first run on a GPU is the next session's.
 */
#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

template <typename T>
__global__ void softmax_row_kernel(T *y, const T *x, int64_t rows, int64_t n, int log_) {
    const int lane = threadIdx.x & 31;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = first; r < rows; r += step) {
        const T *xr = x + r * n;
        T *yr = y + r * n;
        float m = -INFINITY;
        for (int64_t j = lane; j < n; j += 32) {
            const float v = to_f<T>(xr[j]);
            m = (v > m || v != v) ? v : m;
        }
        m = warp_max_f(m);
        float s = 0.0f;
        for (int64_t j = lane; j < n; j += 32) s += expf(to_f<T>(xr[j]) - m);
        s = warp_sum_f(s);
        const float ls = logf(s), inv = 1.0f / s;
        for (int64_t j = lane; j < n; j += 32) {
            const float z = to_f<T>(xr[j]) - m;
            yr[j] = from_f<T>(log_ ? z - ls : expf(z) * inv);
        }
    }
}

template <typename T>
__global__ void softmax_col_kernel(T *y, const T *x, int64_t outer, int64_t n, int64_t inner, int log_) {
    DLT_GRID_STRIDE(c, outer * inner) {
        const int64_t base = (c / inner) * n * inner + c % inner;
        float m = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            const float v = to_f<T>(x[base + j * inner]);
            m = (v > m || v != v) ? v : m;
        }
        float s = 0.0f;
        for (int64_t j = 0; j < n; j++) s += expf(to_f<T>(x[base + j * inner]) - m);
        const float ls = logf(s), inv = 1.0f / s;
        for (int64_t j = 0; j < n; j++) {
            const float z = to_f<T>(x[base + j * inner]) - m;
            y[base + j * inner] = from_f<T>(log_ ? z - ls : expf(z) * inv);
        }
    }
}

template <typename T>
__global__ void softmax_bwd_row_kernel(T *dx, const T *dy, const T *y, int64_t rows, int64_t n, int log_) {
    const int lane = threadIdx.x & 31;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = first; r < rows; r += step) {
        const int64_t b = r * n;
        float s = 0.0f;
        for (int64_t j = lane; j < n; j += 32)
            s += log_ ? to_f<T>(dy[b + j]) : to_f<T>(dy[b + j]) * to_f<T>(y[b + j]);
        s = warp_sum_f(s);
        for (int64_t j = lane; j < n; j += 32) {
            const float u = to_f<T>(dy[b + j]), yv = to_f<T>(y[b + j]);
            dx[b + j] = from_f<T>(log_ ? u - expf(yv) * s : yv * (u - s));
        }
    }
}

template <typename T>
__global__ void softmax_bwd_col_kernel(T *dx, const T *dy, const T *y, int64_t outer, int64_t n, int64_t inner,
                                       int log_) {
    DLT_GRID_STRIDE(c, outer * inner) {
        const int64_t base = (c / inner) * n * inner + c % inner;
        float s = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const int64_t i = base + j * inner;
            s += log_ ? to_f<T>(dy[i]) : to_f<T>(dy[i]) * to_f<T>(y[i]);
        }
        for (int64_t j = 0; j < n; j++) {
            const int64_t i = base + j * inner;
            const float u = to_f<T>(dy[i]), yv = to_f<T>(y[i]);
            dx[i] = from_f<T>(log_ ? u - expf(yv) * s : yv * (u - s));
        }
    }
}

} // namespace

extern "C" {

dlt_status dlt__cuda_softmax_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, int64_t outer, int64_t n,
                                 int64_t inner, int32_t log_) {
    cudaStream_t st = dlt__stream(ctx);
    DLT_CHECK(same_dtype("dlt_softmax", x->dtype, y));
    if (inner == 1) {
        DLT_DISPATCH_FLOAT(x->dtype, T,
            softmax_row_kernel<T><<<grid_for(outer * 32, 256), 256, 0, st>>>((T *)dlt__data(y), (const T *)dlt__data(x),
                                                                           outer, n, log_));
    } else {
        DLT_DISPATCH_FLOAT(x->dtype, T,
            softmax_col_kernel<T><<<grid_for(outer * inner, 128), 128, 0, st>>>(
                (T *)dlt__data(y), (const T *)dlt__data(x), outer, n, inner, log_));
    }
    DLT_CU_LAUNCHED(ctx, "dlt_softmax");
    return DLT_OK;
}

dlt_status dlt__cuda_softmax_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y,
                                 int64_t outer, int64_t n, int64_t inner, int32_t log_) {
    cudaStream_t st = dlt__stream(ctx);
    DLT_CHECK(same_dtype("dlt_softmax_backward", y->dtype, dx, dy));
    if (inner == 1) {
        DLT_DISPATCH_FLOAT(y->dtype, T,
            softmax_bwd_row_kernel<T><<<grid_for(outer * 32, 256), 256, 0, st>>>(
                (T *)dlt__data(dx), (const T *)dlt__data(dy), (const T *)dlt__data(y), outer, n, log_));
    } else {
        DLT_DISPATCH_FLOAT(y->dtype, T,
            softmax_bwd_col_kernel<T><<<grid_for(outer * inner, 128), 128, 0, st>>>(
                (T *)dlt__data(dx), (const T *)dlt__data(dy), (const T *)dlt__data(y), outer, n, inner, log_));
    }
    DLT_CU_LAUNCHED(ctx, "dlt_softmax_backward");
    return DLT_OK;
}

} // extern "C"
