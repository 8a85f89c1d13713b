/*
 * nd.cuh - device side of lib/kernel/nd.h: the element offset of a linear index through an
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
    /* Unrolled with constant indices: a run-time index into a kernel-argument struct makes
     * nvcc copy the struct to local memory in every thread (224-byte stack frames; a bf16
     * copy of 16x1024x768 took 764 us on an H200, ~66 GB/s, 2026-12-02). */
#pragma unroll
    for (int d = DLT_MAX_DIMS - 1; d >= 0; d--) {
        if (d < s.ndim) {
            const Ix n = (Ix)s.shape[d];
            const Ix q = i / n;
            off += (int64_t)(i - q * n) * o.stride[d];
            i = q;
        }
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

/* integers exactly in int64; stores wrap to the width (PyTorch's integer arithmetic) */
__device__ __forceinline__ int64_t ld_int(const void *p, int dt, int64_t i) {
    switch (dt) {
    case DLT_I32: return ((const int32_t *)p)[i];
    case DLT_I64: return ((const int64_t *)p)[i];
    case DLT_U8: return ((const uint8_t *)p)[i];
    default: return (int64_t)ld_dt(p, dt, i);
    }
}
__device__ __forceinline__ void st_int(void *p, int dt, int64_t i, uint64_t v) {
    switch (dt) {
    case DLT_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)v; break;
    case DLT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    default: ((uint8_t *)p)[i] = (uint8_t)v; break;
    }
}
/* any dtype as fp32 (mixed float/integer binary ops) */
__device__ __forceinline__ float ld_any_f(const void *p, int dt, int64_t i) {
    return (dt == DLT_I32 || dt == DLT_I64 || dt == DLT_U8) ? (float)ld_int(p, dt, i) : ld_dt(p, dt, i);
}

/* Launchers that read several tensors through one element type T check that they share
 * the dtype dt: the front doors keep them equal (a gradient arrives in its tensor's dtype),
 * and where that rule broke, a bf16 buffer read as float would be garbage read past its end
 * (an illegal address that poisons the context) while the CPU twin converts each operand.
 * NULL tensors are skipped. */
static inline dlt_status same_dtype(const char *func, int32_t dt, const dlt_tensor *a, const dlt_tensor *b = nullptr,
                                    const dlt_tensor *c = nullptr, const dlt_tensor *d = nullptr,
                                    const dlt_tensor *e = nullptr) {
    const dlt_tensor *t[5] = {a, b, c, d, e};
    for (int i = 0; i < 5; i++)
        if (t[i] && t[i]->dtype != dt)
            return dlt__err(DLT_ERR_INTERNAL, func, "operand %d is %s where the CUDA kernel reads %s", i,
                            dlt_dtype_name(t[i]->dtype), dlt_dtype_name(dt));
    return DLT_OK;
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
