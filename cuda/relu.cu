/*
 * relu.cu - ReLU on CUDA (front door lib/ops/elementwise.c, CPU twin lib/cpu/relu.c):
 * y = max(x, 0) with NaN propagated; backward dx = dy unless y <= 0 (PyTorch's
 * threshold_backward on the output: a NaN output passes its gradient). The backward is also
 * the mask BatchNorm applies before an unfused cuDNN backward (batchnorm_cudnn.cu), so there
 * is one ReLU backward on the device. Elementwise in memory order, any format.
 */
#include "common.cuh"

using namespace dlt;

namespace {

template <typename T> __global__ void relu_fwd_kernel(T *y, const T *x, int64_t n) {
    DLT_GRID_STRIDE(i, n) {
        float v = to_f<T>(x[i]);
        y[i] = from_f<T>((v > 0.0f || v != v) ? v : 0.0f);
    }
}

template <typename T> __global__ void relu_bwd_kernel(T *dx, const T *dy, const T *y, int64_t n) {
    DLT_GRID_STRIDE(i, n) dx[i] = to_f<T>(y[i]) <= 0.0f ? from_f<T>(0.0f) : dy[i];
}

/* the same, 16 bytes per load (nv vectors) */
template <typename T> __global__ void relu_bwd_vec_kernel(T *dx, const T *dy, const T *y, int64_t nv) {
    DLT_GRID_STRIDE(i, nv) {
        Vec16<T> d, m;
        d.raw = reinterpret_cast<const uint4 *>(dy)[i];
        m.raw = reinterpret_cast<const uint4 *>(y)[i];
#pragma unroll
        for (int k = 0; k < Vec16<T>::N; k++)
            if (to_f<T>(m.v[k]) <= 0.0f) d.v[k] = from_f<T>(0.0f);
        reinterpret_cast<uint4 *>(dx)[i] = d.raw;
    }
}

template <typename T> void relu_bwd_launch(T *dx, const T *dy, const T *y, int64_t n, cudaStream_t st) {
    if (vec16_ok(n, Vec16<T>::N, dx, dy, y)) {
        const int64_t nv = n / Vec16<T>::N;
        relu_bwd_vec_kernel<T><<<grid_for(nv, 256), 256, 0, st>>>(dx, dy, y, nv);
    } else {
        relu_bwd_kernel<T><<<grid_for(n, 256), 256, 0, st>>>(dx, dy, y, n);
    }
}

} // namespace

extern "C" {

dlt_status dlt__cuda_relu_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x) {
    int64_t n = x->numel;
    DLT_DISPATCH_FLOAT(x->dtype, T,
        relu_fwd_kernel<T><<<grid_for(n, 256), 256, 0, dlt__stream(ctx)>>>((T *)dlt__data(y), (const T *)dlt__data(x), n));
    DLT_CU_LAUNCHED(ctx, "dlt_relu");
    return DLT_OK;
}

dlt_status dlt__cuda_relu_mask(dlt_ctx *ctx, int32_t dtype, void *dx, const void *dy, const void *y,
                               int64_t n, const char *func) {
    DLT_DISPATCH_FLOAT(dtype, T,
        relu_bwd_launch<T>((T *)dx, (const T *)dy, (const T *)y, n, dlt__stream(ctx)));
    DLT_CU_LAUNCHED(ctx, func);
    return DLT_OK;
}

dlt_status dlt__cuda_relu_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y) {
    return dlt__cuda_relu_mask(ctx, dx->dtype, dlt__data(dx), dlt__data(dy), dlt__data(y), dx->numel,
                               "dlt_relu_backward");
}

} // extern "C"
