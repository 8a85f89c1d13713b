/*
 * elementwise.cu - CUDA conversions (dtype and memory format), fills, Philox random fills,
 * add, accumulate, scaling and full sums (ReLU: relu.cu). Each kernel is a grid-stride loop in fp32
 * math, templated on the storage types and dispatched at run time; one .so serves every
 * precision. Float conversions within one memory format move 16 bytes per access. Random
 * fills use lib/kernel/philox.h, the same code as the CPU backend.
 */
#include <type_traits>

#include "../lib/kernel/philox.h"
#include "common.cuh"

using namespace dlt;

namespace {

template <typename S, typename D> __device__ __forceinline__ D convert_one(S v) {
    if constexpr (std::is_integral<S>::value && std::is_integral<D>::value)
        return (D)v;
    else if constexpr (std::is_integral<S>::value)
        return from_f<D>((float)v);
    else
        return from_f<D>(to_f<S>(v));
}

template <typename S, typename D>
__global__ void convert_kernel(D *dst, const S *src, int64_t n, Shape4 ss, Shape4 ds, int same) {
    DLT_GRID_STRIDE(i, n) {
        int64_t si = same ? i : mem_index(ss, i);
        int64_t di = same ? i : mem_index(ds, i);
        dst[di] = convert_one<S, D>(src[si]);
    }
}

/* The same conversion in one memory order (same format), both sides 16-byte aligned: W
 * elements per step, W = 16 bytes of the narrower type, so it moves 16 bytes per load and
 * store (f32 -> bf16: two float4 loads, one 16-byte store; 2- and 4-byte accesses reached
 * about half the H200's bandwidth, ~40 us per [16384, 768] f32 -> bf16). The n % W tail
 * goes to the first threads. */
template <typename S, typename D> __global__ void convert_vec_kernel(D *dst, const S *src, int64_t n) {
    constexpr int W = 16 / (int)(sizeof(S) < sizeof(D) ? sizeof(S) : sizeof(D));
    constexpr int LS = W * (int)sizeof(S) / 16, LD = W * (int)sizeof(D) / 16; /* uint4s per step */
    const int64_t nv = n / W;
    DLT_GRID_STRIDE(i, nv) {
        union {
            uint4 raw[LS];
            S v[W];
        } in;
        union {
            uint4 raw[LD];
            D v[W];
        } out;
#pragma unroll
        for (int k = 0; k < LS; k++) in.raw[k] = reinterpret_cast<const uint4 *>(src)[i * LS + k];
#pragma unroll
        for (int e = 0; e < W; e++) out.v[e] = convert_one<S, D>(in.v[e]);
#pragma unroll
        for (int k = 0; k < LD; k++) reinterpret_cast<uint4 *>(dst)[i * LD + k] = out.raw[k];
    }
    const int64_t j = nv * W + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < n) dst[j] = convert_one<S, D>(src[j]);
}

template <typename T> __global__ void fill_kernel(T *p, int64_t n, T v) {
    DLT_GRID_STRIDE(i, n) p[i] = v;
}

template <typename T>
__global__ void rand_kernel(T *p, int64_t n, Shape4 s, int normal, double a, double b,
                            uint64_t seed, uint64_t off) {
    DLT_GRID_STRIDE(i, n) {
        float v;
        if (normal)
            v = (float)(a + b * dlt__philox_normal(seed, off, (uint64_t)i));
        else
            v = (float)(a + (b - a) * (double)dlt__philox_uniform(seed, off, (uint64_t)i));
        p[mem_index(s, i)] = from_f<T>(v);
    }
}

template <typename T> __global__ void add_kernel(T *y, const T *a, const T *b, int64_t n) {
    DLT_GRID_STRIDE(i, n) y[i] = from_f<T>(to_f<T>(a[i]) + to_f<T>(b[i]));
}

template <typename D, typename S>
__global__ void accumulate_kernel(D *dst, const S *src, int64_t n, Shape4 ds, Shape4 ss, int same,
                                  int beta) {
    DLT_GRID_STRIDE(i, n) {
        int64_t si = same ? i : mem_index(ss, i);
        int64_t di = same ? i : mem_index(ds, i);
        float v = to_f<S>(src[si]);
        if (beta) v += to_f<D>(dst[di]);
        dst[di] = from_f<D>(v);
    }
}

/* dst += src (or dst = src), same dtype and layout, 16 bytes per load */
template <typename T> __global__ void accumulate_vec_kernel(T *dst, const T *src, int64_t nv, int beta) {
    DLT_GRID_STRIDE(i, nv) {
        Vec16<T> a, b;
        a.raw = reinterpret_cast<const uint4 *>(src)[i];
        if (beta) {
            b.raw = reinterpret_cast<const uint4 *>(dst)[i];
#pragma unroll
            for (int k = 0; k < Vec16<T>::N; k++) a.v[k] = from_f<T>(to_f<T>(a.v[k]) + to_f<T>(b.v[k]));
        }
        reinterpret_cast<uint4 *>(dst)[i] = a.raw;
    }
}

template <typename T>
__global__ void scale_kernel(T *y, const T *x, int64_t n, const float *s, double alpha) {
    float f = s ? *s : 1.0f;
    DLT_GRID_STRIDE(i, n) {
        float v = to_f<T>(x[i]) * f;
        if (alpha != 1.0) v = (float)(v * alpha);
        y[i] = from_f<T>(v);
    }
}

/* One block: deterministic order, used for losses and small reductions. */
template <typename T, typename Y>
__global__ void sum_kernel(Y *y, const T *x, int64_t n, double alpha) {
    __shared__ float part[32];
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += to_f<T>(x[i]);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (threadIdx.x == 0) y[0] = from_f<Y>((float)(acc * alpha));
    }
}

template <typename D, typename S>
__global__ void broadcast_kernel(D *dx, const S *dy, int64_t n, double alpha) {
    float v = (float)(to_f<S>(dy[0]) * alpha);
    DLT_GRID_STRIDE(i, n) dx[i] = from_f<D>(v);
}

/* Multi-tensor accumulate: up to MT_MAX (dst, src) pairs per launch, passed by value. Each
 * block takes MT_CHUNK elements of one pair; blocks are numbered through the pairs' chunk
 * prefix sums. Dtypes are per pair (branches are uniform within a block). */
enum { MT_MAX = 96, MT_CHUNK = 8192 };
struct MultiAcc {
    void *dst[MT_MAX];
    const void *src[MT_MAX];
    int64_t n[MT_MAX];
    int32_t first_block[MT_MAX + 1];
    int8_t dtype_d[MT_MAX], dtype_s[MT_MAX], beta[MT_MAX], aligned[MT_MAX];
    int32_t count;
};

__device__ __forceinline__ float ld_any(const void *p, int dt, int64_t i) {
    switch (dt) {
    case DLT_F16: return __half2float(((const __half *)p)[i]);
    case DLT_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return ((const float *)p)[i];
    }
}
__device__ __forceinline__ void st_any(void *p, int dt, int64_t i, float v) {
    switch (dt) {
    case DLT_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    case DLT_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

__device__ __forceinline__ float2 pair_to_f2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 pair_to_f2(__nv_bfloat162 v) { return __bfloat1622float2(v); }

/* dst[start, end) (+)= src, 4 elements per thread: fp32 dst 16-byte and 16-bit src 8-byte
 * aligned, (end - start) % 4 == 0 */
template <typename Pair>
__device__ __forceinline__ void accumulate_vec4(float *dst, const Pair *src, int64_t start, int64_t end,
                                                int beta) {
    for (int64_t i = start + 4 * (int64_t)threadIdx.x; i < end; i += 4 * (int64_t)blockDim.x) {
        const float2 a = pair_to_f2(src[i / 2]), c = pair_to_f2(src[i / 2 + 1]);
        float4 o = beta ? ((const float4 *)dst)[i / 4] : make_float4(0.f, 0.f, 0.f, 0.f);
        o.x += a.x;
        o.y += a.y;
        o.z += c.x;
        o.w += c.y;
        ((float4 *)dst)[i / 4] = o;
    }
}

__global__ void accumulate_multi_kernel(const __grid_constant__ MultiAcc m) {
    int lo = 0, hi = m.count - 1; /* the pair whose block range holds blockIdx.x */
    const int b = (int)blockIdx.x;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (m.first_block[mid] <= b) lo = mid;
        else hi = mid - 1;
    }
    const int64_t start = (int64_t)(b - m.first_block[lo]) * MT_CHUNK;
    const int64_t end = start + MT_CHUNK < m.n[lo] ? start + MT_CHUNK : m.n[lo];
    const int dd = m.dtype_d[lo], ds = m.dtype_s[lo], beta = m.beta[lo];
    void *dst = m.dst[lo];
    const void *src = m.src[lo];
    /* the common cases (fp16/bf16 weight gradients into fp32): 4 elements per thread */
    if (dd == DLT_F32 && m.aligned[lo] && ((end - start) % 4 == 0)) {
        if (ds == DLT_F16) {
            accumulate_vec4((float *)dst, (const __half2 *)src, start, end, beta);
            return;
        }
        if (ds == DLT_BF16) {
            accumulate_vec4((float *)dst, (const __nv_bfloat162 *)src, start, end, beta);
            return;
        }
    }
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
        float v = ld_any(src, ds, i);
        if (beta) v += ld_any(dst, dd, i);
        st_any(dst, dd, i, v);
    }
}

} // namespace

extern "C" {

dlt_status dlt__cuda_accumulate_multi(dlt_ctx *ctx, int32_t n, dlt_tensor *const *dsts,
                                      const dlt_tensor *const *srcs, const int32_t *betas) {
    int32_t i = 0;
    while (i < n) {
        MultiAcc m;
        memset(&m, 0, sizeof m);
        int64_t blocks = 0;
        for (; i < n && m.count < MT_MAX; i++) {
            const dlt_tensor *d = dsts[i], *s = srcs[i];
            const int64_t nb = (d->numel + MT_CHUNK - 1) / MT_CHUNK;
            if (d->numel == 0) continue;
            if (blocks + nb > INT32_MAX / 2) break;
            const int k = m.count++;
            m.dst[k] = dlt__data(d);
            m.src[k] = dlt__data(s);
            m.n[k] = d->numel;
            m.dtype_d[k] = (int8_t)d->dtype;
            m.dtype_s[k] = (int8_t)s->dtype;
            m.beta[k] = (int8_t)(betas[i] != 0);
            m.first_block[k] = (int32_t)blocks;
            blocks += nb;
            /* the vector path needs 16-byte aligned fp32 and 8-byte aligned fp16 data */
            m.aligned[k] = !(((uintptr_t)m.dst[k] & 15) || ((uintptr_t)m.src[k] & 7));
        }
        if (m.count == 0) continue;
        m.first_block[m.count] = (int32_t)blocks;
        accumulate_multi_kernel<<<(unsigned)blocks, 256, 0, dlt__stream(ctx)>>>(m);
        DLT_CU_LAUNCHED(ctx, "dlt_backward");
    }
    return DLT_OK;
}


dlt_status dlt__cuda_convert(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src) {
    int64_t n = src->numel;
    Shape4 ss = shape4(src), ds = shape4(dst);
    int same = dst->format == src->format;
    cudaStream_t st = dlt__stream(ctx);
    const void *sp = dlt__data(src);
    void *dp = dlt__data(dst);
    if (same && dlt__is_float(src->dtype) && dlt__is_float(dst->dtype) && vec16_ok(0, 1, sp, dp)) {
        DLT_DISPATCH_FLOAT(src->dtype, S, DLT_DISPATCH_FLOAT(dst->dtype, D, {
            constexpr int W = 16 / (int)(sizeof(S) < sizeof(D) ? sizeof(S) : sizeof(D));
            convert_vec_kernel<S, D><<<grid_for(n / W, 256), 256, 0, st>>>((D *)dp, (const S *)sp, n);
        }));
        DLT_CU_LAUNCHED(ctx, "dlt_convert");
        return DLT_OK;
    }
    DLT_DISPATCH_ALL(src->dtype, S, DLT_DISPATCH_ALL(dst->dtype, D,
        convert_kernel<S, D><<<grid_for(n, 256), 256, 0, st>>>((D *)dlt__data(dst),
                                                              (const S *)dlt__data(src), n, ss, ds, same)));
    DLT_CU_LAUNCHED(ctx, "dlt_convert");
    return DLT_OK;
}

dlt_status dlt__cuda_fill(dlt_ctx *ctx, dlt_tensor *t, double value) {
    int64_t n = t->numel;
    cudaStream_t st = dlt__stream(ctx);
    switch (t->dtype) {
    case DLT_F32: fill_kernel<float><<<grid_for(n, 256), 256, 0, st>>>((float *)dlt__data(t), n, (float)value); break;
    case DLT_F16: fill_kernel<__half><<<grid_for(n, 256), 256, 0, st>>>((__half *)dlt__data(t), n, __float2half_rn((float)value)); break;
    case DLT_BF16: fill_kernel<__nv_bfloat16><<<grid_for(n, 256), 256, 0, st>>>((__nv_bfloat16 *)dlt__data(t), n, __float2bfloat16_rn((float)value)); break;
    case DLT_I32: fill_kernel<int32_t><<<grid_for(n, 256), 256, 0, st>>>((int32_t *)dlt__data(t), n, (int32_t)value); break;
    case DLT_I64: fill_kernel<int64_t><<<grid_for(n, 256), 256, 0, st>>>((int64_t *)dlt__data(t), n, (int64_t)value); break;
    default: fill_kernel<uint8_t><<<grid_for(n, 256), 256, 0, st>>>((uint8_t *)dlt__data(t), n, (uint8_t)value); break;
    }
    DLT_CU_LAUNCHED(ctx, "dlt_tensor_fill");
    return DLT_OK;
}

dlt_status dlt__cuda_rand(dlt_ctx *ctx, dlt_tensor *t, int32_t normal, double a, double b,
                          uint64_t seed, uint64_t offset) {
    int64_t n = t->numel;
    Shape4 s = shape4(t);
    DLT_DISPATCH_FLOAT(t->dtype, T,
        rand_kernel<T><<<grid_for(n, 256), 256, 0, dlt__stream(ctx)>>>((T *)dlt__data(t), n, s, normal, a, b, seed, offset));
    DLT_CU_LAUNCHED(ctx, "dlt_tensor_rand");
    return DLT_OK;
}

dlt_status dlt__cuda_add(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *a, const dlt_tensor *b) {
    int64_t n = y->numel;
    DLT_DISPATCH_FLOAT(y->dtype, T,
        add_kernel<T><<<grid_for(n, 256), 256, 0, dlt__stream(ctx)>>>((T *)dlt__data(y), (const T *)dlt__data(a),
                                                                      (const T *)dlt__data(b), n));
    DLT_CU_LAUNCHED(ctx, "dlt_add");
    return DLT_OK;
}

dlt_status dlt__cuda_accumulate(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src, int32_t beta) {
    int64_t n = dst->numel;
    Shape4 ds = shape4(dst), ss = shape4(src);
    int same = dst->format == src->format;
    cudaStream_t st = dlt__stream(ctx);
    if (same && !beta && dst->dtype == src->dtype) {
        DLT_CU(ctx, cudaMemcpyAsync(dlt__data(dst), dlt__data(src), dlt__nbytes(dst),
                                    cudaMemcpyDeviceToDevice, st), "dlt_accumulate");
        return DLT_OK;
    }
    if (same && dst->dtype == src->dtype) {
        /* the residual joins of backward: fp16/bf16 gradients summed in place */
        DLT_DISPATCH_FLOAT(dst->dtype, T,
            if (vec16_ok(n, Vec16<T>::N, dlt__data(dst), dlt__data(src))) {
                const int64_t nv = n / Vec16<T>::N;
                accumulate_vec_kernel<T><<<grid_for(nv, 256), 256, 0, st>>>(
                    (T *)dlt__data(dst), (const T *)dlt__data(src), nv, beta);
                DLT_CU_LAUNCHED(ctx, "dlt_accumulate");
                return DLT_OK;
            });
    }
    DLT_DISPATCH_FLOAT(dst->dtype, D, DLT_DISPATCH_FLOAT(src->dtype, S,
        accumulate_kernel<D, S><<<grid_for(n, 256), 256, 0, st>>>((D *)dlt__data(dst), (const S *)dlt__data(src),
                                                                  n, ds, ss, same, beta)));
    DLT_CU_LAUNCHED(ctx, "dlt_accumulate");
    return DLT_OK;
}

dlt_status dlt__cuda_scale(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *s,
                           double alpha) {
    int64_t n = y->numel;
    const float *sp = s ? (const float *)dlt__data(s) : NULL;
    DLT_DISPATCH_FLOAT(y->dtype, T,
        scale_kernel<T><<<grid_for(n, 256), 256, 0, dlt__stream(ctx)>>>((T *)dlt__data(y), (const T *)dlt__data(x),
                                                                        n, sp, alpha));
    DLT_CU_LAUNCHED(ctx, "dlt_mul_scalar");
    return DLT_OK;
}

dlt_status dlt__cuda_sum(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double alpha) {
    DLT_DISPATCH_FLOAT(x->dtype, T, DLT_DISPATCH_FLOAT(y->dtype, Y,
        sum_kernel<T, Y><<<1, 1024, 0, dlt__stream(ctx)>>>((Y *)dlt__data(y), (const T *)dlt__data(x), x->numel, alpha)));
    DLT_CU_LAUNCHED(ctx, "dlt_sum");
    return DLT_OK;
}

dlt_status dlt__cuda_broadcast_scalar(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, double alpha) {
    int64_t n = dx->numel;
    DLT_DISPATCH_FLOAT(dx->dtype, D, DLT_DISPATCH_FLOAT(dy->dtype, S,
        broadcast_kernel<D, S><<<grid_for(n, 256), 256, 0, dlt__stream(ctx)>>>((D *)dlt__data(dx),
                                                                               (const S *)dlt__data(dy), n, alpha)));
    DLT_CU_LAUNCHED(ctx, "dlt_broadcast");
    return DLT_OK;
}

} // extern "C"
