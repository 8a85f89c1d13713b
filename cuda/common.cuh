/*
 * common.cuh - device helpers shared by the CUDA kernels: fp32 load/store for every dtype,
 * dtype dispatch, logical <-> memory index for channels-last, grid sizing.
 */
#ifndef DLT_CUDA_COMMON_CUH
#define DLT_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_internal.h"

namespace dlt {

template <typename T> __device__ __forceinline__ float to_f(T v) { return (float)v; }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v) { return (T)v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
/* float -> integer saturates (NaN -> 0), like the CPU backend */
template <> __device__ __forceinline__ int32_t from_f<int32_t>(float v) {
    return v != v ? 0 : v >= 2147483520.0f ? INT32_MAX : v <= -2147483648.0f ? INT32_MIN : (int32_t)v;
}
template <> __device__ __forceinline__ int64_t from_f<int64_t>(float v) {
    return v != v ? 0 : v >= 9.2233715e18f ? INT64_MAX : v <= -9.2233720e18f ? INT64_MIN : (int64_t)v;
}
template <> __device__ __forceinline__ uint8_t from_f<uint8_t>(float v) {
    return v != v ? 0 : v >= 255.0f ? 255 : v <= 0.0f ? 0 : (uint8_t)v;
}

/* Shape of a 4-D tensor for index math (other ranks use fmt = contiguous). */
struct Shape4 {
    int64_t N, C, H, W;
    int32_t cl; /* 1: channels-last */
};

static inline Shape4 shape4(const dlt_tensor *t) {
    Shape4 s;
    s.N = t->ndim > 0 ? t->shape[0] : 1;
    s.C = t->ndim > 1 ? t->shape[1] : 1;
    s.H = t->ndim > 2 ? t->shape[2] : 1;
    s.W = t->ndim > 3 ? t->shape[3] : 1;
    s.cl = t->format == DLT_FORMAT_CHANNELS_LAST;
    return s;
}

/* memory index of logical (NCHW-order) element i */
__device__ __forceinline__ int64_t mem_index(const Shape4 &s, int64_t i) {
    if (!s.cl) return i;
    int64_t w = i % s.W, h = (i / s.W) % s.H, c = (i / (s.W * s.H)) % s.C, n = i / (s.W * s.H * s.C);
    return ((n * s.H + h) * s.W + w) * s.C + c;
}

static inline unsigned grid_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535LL * 32) b = 65535LL * 32;
    return (unsigned)b;
}

/* 16-byte vector access: elementwise kernels over 16-bit data move 8 values per load,
 * which the H200 needs to get near its memory bandwidth (2-byte loads reach about a third
 * of it). Usable when every pointer is 16-byte aligned and n is a multiple of the width. */
template <typename T> struct Vec16 {
    static constexpr int N = 16 / (int)sizeof(T);
    union {
        uint4 raw;
        T v[16 / sizeof(T)];
    };
};
static inline bool vec16_ok(int64_t n, int width, const void *a, const void *b = nullptr,
                            const void *c = nullptr) {
    return n % width == 0 && ((uintptr_t)a & 15) == 0 && ((uintptr_t)b & 15) == 0 &&
           ((uintptr_t)c & 15) == 0;
}

#define DLT_GRID_STRIDE(i, n)                                                                 \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                 \
         i += (int64_t)gridDim.x * blockDim.x)
/* the same with 32-bit indices, for n < 2^30 (grid_for's grid then cannot overflow i) */
#define DLT_GRID_STRIDE32(i, n)                                                               \
    for (int32_t i = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); i < (n);               \
         i += (int32_t)(gridDim.x * blockDim.x))

/* 16 bytes global -> shared without a trip through registers (cp.async, sm_80), zeros
 * when !valid (source size 0: nothing is read); older GPUs copy through registers at once.
 * No compiler barrier: a caller reusing shared memory orders its reads itself (a barrier,
 * or asm volatile("" ::: "memory")). */
__device__ __forceinline__ void cp_async16(void *s, const void *g, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g), "r"(valid ? 16 : 0));
#else
    *(uint4 *)s = valid ? *(const uint4 *)g : make_uint4(0u, 0u, 0u, 0u);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
/* waits until at most N of this thread's committed groups are still in flight */
template <int N> __device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

} // namespace dlt

/* Calls F<T>(args...) for the tensor dtype; float types only unless noted. */
#define DLT_DISPATCH_FLOAT(dtype, T, ...)                                                     \
    switch (dtype) {                                                                          \
    case DLT_F32: { typedef float T; __VA_ARGS__; } break;                                    \
    case DLT_F16: { typedef __half T; __VA_ARGS__; } break;                                   \
    case DLT_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                           \
    default: return dlt__err(DLT_ERR_DTYPE, "dlt_cuda", "dtype %d not supported here", (int)(dtype)); \
    }

#define DLT_DISPATCH_ALL(dtype, T, ...)                                                       \
    switch (dtype) {                                                                          \
    case DLT_F32: { typedef float T; __VA_ARGS__; } break;                                    \
    case DLT_F16: { typedef __half T; __VA_ARGS__; } break;                                   \
    case DLT_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                           \
    case DLT_I32: { typedef int32_t T; __VA_ARGS__; } break;                                  \
    case DLT_I64: { typedef int64_t T; __VA_ARGS__; } break;                                  \
    case DLT_U8: { typedef uint8_t T; __VA_ARGS__; } break;                                   \
    default: return dlt__err(DLT_ERR_DTYPE, "dlt_cuda", "dtype %d not supported here", (int)(dtype)); \
    }

#endif
