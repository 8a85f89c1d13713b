/*
 * pointwise.cu - CUDA kernels of the unary ops and activations (lib/ops/pointwise.c) and
 * their derivatives: the formulas of lib/cpu/math_ref.h in fp32 (erff, tanhf, expf,
 * log1pf), elementwise over flat memory. Compile-checked; first run on a GPU is the next
 * session's.
 */
#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

__device__ __forceinline__ float un_f(int op, float x, float a) {
    switch (op) {
    case DLT_UN_NEG: return -x;
    case DLT_UN_EXP: return expf(x);
    case DLT_UN_LOG: return logf(x);
    case DLT_UN_SQRT: return sqrtf(x);
    case DLT_UN_RSQRT: return rsqrtf(x);
    case DLT_UN_ABS: return fabsf(x);
    case DLT_UN_POW: return powf(x, a);
    case DLT_UN_ADD_SCALAR: return x + a;
    case DLT_UN_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
    case DLT_UN_GELU_TANH: {
        const float k = 0.79788456080286535588f;
        return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case DLT_UN_SILU: return x / (1.0f + expf(-x));
    case DLT_UN_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case DLT_UN_TANH: return tanhf(x);
    default: return x > 20.0f ? x : log1pf(expf(x)); /* softplus */
    }
}

__device__ __forceinline__ float un_df(int op, float du, float x, float y, float a) {
    switch (op) {
    case DLT_UN_NEG: return -du;
    case DLT_UN_EXP: return du * y;
    case DLT_UN_LOG: return du / x;
    case DLT_UN_SQRT: return du / (2.0f * y);
    case DLT_UN_RSQRT: return -0.5f * du * y * y * y;
    case DLT_UN_ABS: return x > 0.0f ? du : x < 0.0f ? -du : 0.0f * du;
    case DLT_UN_POW: return a == 0.0f ? 0.0f : du * a * powf(x, a - 1.0f);
    case DLT_UN_ADD_SCALAR: return du;
    case DLT_UN_GELU: {
        const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
        const float pdf = expf(-0.5f * x * x) * 0.39894228040143267794f;
        return du * (cdf + x * pdf);
    }
    case DLT_UN_GELU_TANH: {
        const float k = 0.79788456080286535588f, c = 0.044715f;
        const float t = tanhf(k * (x + c * x * x * x));
        return du * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x));
    }
    case DLT_UN_SILU: {
        const float s = 1.0f / (1.0f + expf(-x));
        return du * s * (1.0f + x * (1.0f - s));
    }
    case DLT_UN_SIGMOID: return du * y * (1.0f - y);
    case DLT_UN_TANH: return du * (1.0f - y * y);
    default: return x > 20.0f ? du : du / (1.0f + expf(-x)); /* softplus */
    }
}

/* integers: neg, abs, add a whole number (the front door sends nothing else), wrapping */
template <typename T> __global__ void unary_int_kernel(T *y, const T *x, int64_t n, int op, int64_t k) {
    DLT_GRID_STRIDE(i, n) {
        const int64_t v = (int64_t)x[i];
        const uint64_t u = (uint64_t)v;
        y[i] = (T)(op == DLT_UN_NEG ? 0 - u : op == DLT_UN_ABS ? (v < 0 ? 0 - u : u) : u + (uint64_t)k);
    }
}

template <typename T> __global__ void unary_kernel(T *y, const T *x, int64_t n, int op, float a) {
    DLT_GRID_STRIDE(i, n) y[i] = from_f<T>(un_f(op, to_f<T>(x[i]), a));
}

template <typename T>
__global__ void unary_bwd_kernel(T *dx, const T *dy, const T *x, const T *y, int64_t n, int op, float a) {
    DLT_GRID_STRIDE(i, n) {
        const float xv = x ? to_f<T>(x[i]) : 0.0f, yv = y ? to_f<T>(y[i]) : 0.0f;
        dx[i] = from_f<T>(un_df(op, to_f<T>(dy[i]), xv, yv, a));
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
