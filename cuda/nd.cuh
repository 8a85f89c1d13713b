/*
 * nd.cuh - device side of lib/core/nd.h: the element offset of a linear index through an
 * operand map, with 32-bit division when the space allows (64-bit division is slow), and
 * fp32 load/store for any float dtype chosen at run time (the binary ops mix dtypes).
 */
#ifndef DLT_CUDA_ND_CUH
#define DLT_CUDA_ND_CUH

#include "common.cuh"

namespace dlt {

template <typename Ix>
__device__ __forceinline__ int64_t nd_offset(const dlt_nd &s, const dlt_nd_operand &o, Ix i) {
    int64_t off = o.offset;
#pragma unroll 1
    for (int d = s.ndim - 1; d >= 0; d--) {
        const Ix n = (Ix)s.shape[d];
        const Ix q = i / n;
        off += (int64_t)(i - q * n) * o.stride[d];
        i = q;
    }
    return off;
}

__device__ __forceinline__ float ld_dt(const void *p, int dt, int64_t i) {
    switch (dt) {
    case DLT_F16: return __half2float(((const __half *)p)[i]);
    case DLT_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return ((const float *)p)[i];
    }
}
__device__ __forceinline__ void st_dt(void *p, int dt, int64_t i, float v) {
    switch (dt) {
    case DLT_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    case DLT_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

__device__ __forceinline__ float warp_sum_f(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max_f(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = (w > v || w != w) ? w : v;
    }
    return v;
}

} // namespace dlt

#endif
