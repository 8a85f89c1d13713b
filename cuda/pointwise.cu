/*
 * pointwise.cu - CUDA kernels of the unary ops and activations (lib/ops/pointwise.c) and
 * their derivatives: the fp32 formulas of lib/kernel/unary.h (dlt__un_f32, dlt__un_df32),
 * elementwise over flat memory, 16 bytes per access where the pointers allow. The 16-byte
 * kernels take the common float ops (the GELUs, SiLU, sigmoid, tanh, leaky ReLU) as a
 * template parameter: with the op a run-time int, dlt__un_f32's switch ran per element and
 * kept the eight values of a vector from being computed side by side (GELU-tanh of a
 * 16x1024x3072 bf16 tensor: 77 us, ~2.6 TB/s, on an H200; llm.c's kernel with the same
 * tanhf formula takes 48 us). The same dlt__un_f32 / dlt__un_df32 calls with a constant op,
 * folded by the compiler, so the bits are those of the generic instantiation.
 */
#include <type_traits>

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

/* OP: a DLT_UN_* code compiled in, or UN_ANY for the op passed at run time */
constexpr int UN_ANY = -1;

/* 16 bytes per thread and step (Vec16): the GELU of a 16x1024x3072 bf16 tensor took 208 us
 * with one element per thread on an H200 (~1 TB/s); the same math, 8 values per load */
template <typename T, int OP> __global__ void unary_vec_kernel(T *y, const T *x, int64_t nv, int op, float a) {
    const int o = OP == UN_ANY ? op : OP;
    DLT_GRID_STRIDE(i, nv) {
        Vec16<T> v;
        v.raw = ((const uint4 *)x)[i];
#pragma unroll
        for (int e = 0; e < Vec16<T>::N; e++) v.v[e] = from_f<T>(dlt__un_f32(o, to_f<T>(v.v[e]), a));
        ((uint4 *)y)[i] = v.raw;
    }
}

template <typename T, int OP>
__global__ void unary_bwd_vec_kernel(T *dx, const T *dy, const T *x, const T *y, int64_t nv, int op, float a) {
    const int o = OP == UN_ANY ? op : OP;
    DLT_GRID_STRIDE(i, nv) {
        Vec16<T> g, xv, yv;
        g.raw = ((const uint4 *)dy)[i];
        xv.raw = x ? ((const uint4 *)x)[i] : make_uint4(0u, 0u, 0u, 0u);
        yv.raw = y ? ((const uint4 *)y)[i] : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int e = 0; e < Vec16<T>::N; e++)
            g.v[e] = from_f<T>(dlt__un_df32(o, to_f<T>(g.v[e]), x ? to_f<T>(xv.v[e]) : 0.0f,
                                            y ? to_f<T>(yv.v[e]) : 0.0f, a));
        ((uint4 *)dx)[i] = g.raw;
    }
}

/* Calls launch(std::integral_constant<int, OP>()) with the op compiled in where it is one
 * of the hot activations, UN_ANY otherwise (one instantiation for the rest). */
template <typename F> void with_op(int op, F launch) {
    switch (op) {
    case DLT_UN_GELU_TANH: launch(std::integral_constant<int, DLT_UN_GELU_TANH>()); break;
    case DLT_UN_GELU: launch(std::integral_constant<int, DLT_UN_GELU>()); break;
    case DLT_UN_SILU: launch(std::integral_constant<int, DLT_UN_SILU>()); break;
    case DLT_UN_SIGMOID: launch(std::integral_constant<int, DLT_UN_SIGMOID>()); break;
    case DLT_UN_TANH: launch(std::integral_constant<int, DLT_UN_TANH>()); break;
    case DLT_UN_LEAKY_RELU: launch(std::integral_constant<int, DLT_UN_LEAKY_RELU>()); break;
    default: launch(std::integral_constant<int, UN_ANY>()); break;
    }
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
    DLT_DISPATCH_FLOAT(x->dtype, T, {
        const int w = Vec16<T>::N;
        if (vec16_ok(n, w, dlt__data(y), dlt__data(x)))
            with_op(op, [&](auto k) {
                unary_vec_kernel<T, decltype(k)::value><<<grid_for(n / w, 256), 256, 0, st>>>(
                    (T *)dlt__data(y), (const T *)dlt__data(x), n / w, op, (float)alpha);
            });
        else
            unary_kernel<T><<<grid_for(n, 256), 256, 0, st>>>((T *)dlt__data(y), (const T *)dlt__data(x), n, op,
                                                              (float)alpha);
    });
    DLT_CU_LAUNCHED(ctx, "dlt_unary");
    return DLT_OK;
}

dlt_status dlt__cuda_unary_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *x,
                               const dlt_tensor *y, int32_t op, double alpha) {
    const int64_t n = dx->numel;
    /* the front door makes dx, dy, x and y one dtype */
    DLT_CHECK(same_dtype("dlt_unary_backward", dx->dtype, dy, x, y));
    cudaStream_t st = dlt__stream(ctx);
    DLT_DISPATCH_FLOAT(dx->dtype, T, {
        const T *xp = x ? (const T *)dlt__data(x) : nullptr, *yp = y ? (const T *)dlt__data(y) : nullptr;
        const int w = Vec16<T>::N;
        /* null pointers are 16-byte aligned: absent operands pass the check */
        if (vec16_ok(n, w, dlt__data(dx), dlt__data(dy), xp) && vec16_ok(n, w, yp))
            with_op(op, [&](auto k) {
                unary_bwd_vec_kernel<T, decltype(k)::value><<<grid_for(n / w, 256), 256, 0, st>>>(
                    (T *)dlt__data(dx), (const T *)dlt__data(dy), xp, yp, n / w, op, (float)alpha);
            });
        else
            unary_bwd_kernel<T><<<grid_for(n, 256), 256, 0, st>>>((T *)dlt__data(dx), (const T *)dlt__data(dy),
                                                                  xp, yp, n, op, (float)alpha);
    });
    DLT_CU_LAUNCHED(ctx, "dlt_unary_backward");
    return DLT_OK;
}

} // extern "C"
