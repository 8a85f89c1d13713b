/*
 * binary.cu - CUDA kernels of the broadcasting binary ops (lib/ops/binary.c) and of copy_nd
 * (layout ops and their gradients). Operands are read through their operand maps
 * (lib/kernel/nd.h); math in fp32, dtypes of a, b and y chosen at run time per element load
 * (uniform across the grid, so the branch costs little). Same-layout operands (one merged
 * dimension, unit strides) take a flat grid-stride loop without index arithmetic; copies
 * whose rows line up move 16 bytes per thread.
 */
#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

__device__ __forceinline__ float bin_f(int op, float a, float b, float alpha) {
    switch (op) {
    case DLT_BIN_ADD: return a + alpha * b;
    case DLT_BIN_MUL: return alpha * a * b;
    case DLT_BIN_DIV: return alpha * a / b;
    default: return a == b ? 1.0f : 0.0f;
    }
}

template <typename Ix>
__global__ void binary_kernel(void *y, int ty, const void *a, int ta, dlt_nd_operand oa, const void *b, int tb,
                              dlt_nd_operand ob, dlt_nd s, int op, float alpha) {
    const Ix n = (Ix)s.numel;
    for (Ix i = (Ix)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (Ix)gridDim.x * blockDim.x) {
        const float va = ld_any_f(a, ta, nd_offset<Ix>(s, oa, i));
        const float vb = ld_any_f(b, tb, nd_offset<Ix>(s, ob, i));
        st_dt(y, ty, (int64_t)i, bin_f(op, va, vb, alpha));
    }
}

/* integer result: exact int64 arithmetic, wrapping */
__global__ void binary_int_kernel(void *y, int ty, const void *a, int ta, dlt_nd_operand oa, const void *b, int tb,
                                  dlt_nd_operand ob, dlt_nd s, int op, int64_t k) {
    DLT_GRID_STRIDE(i, s.numel) {
        const uint64_t va = (uint64_t)ld_int(a, ta, nd_offset<int64_t>(s, oa, i));
        const uint64_t vb = (uint64_t)ld_int(b, tb, nd_offset<int64_t>(s, ob, i));
        const uint64_t r = op == DLT_BIN_ADD ? va + (uint64_t)k * vb : op == DLT_BIN_MUL ? (uint64_t)k * va * vb
                                                                                         : (uint64_t)(va == vb);
        st_int(y, ty, i, r);
    }
}

/* both operands contiguous over the whole space */
template <typename T>
__global__ void binary_flat_kernel(T *y, const T *a, const T *b, int64_t n, int op, float alpha) {
    DLT_GRID_STRIDE(i, n) y[i] = from_f<T>(bin_f(op, to_f<T>(a[i]), to_f<T>(b[i]), alpha));
}

template <typename T, typename Ix>
__global__ void copy_kernel(T *dst, dlt_nd_operand od, const T *src, dlt_nd_operand os, dlt_nd s) {
    const Ix n = (Ix)s.numel;
    for (Ix i = (Ix)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (Ix)gridDim.x * blockDim.x)
        dst[nd_offset<Ix>(s, od, i)] = src[nd_offset<Ix>(s, os, i)];
}

bool unit(const dlt_nd &s, const dlt_nd_operand &o) { return s.ndim <= 1 && (s.ndim == 0 || o.stride[0] == 1); }

} // namespace

extern "C" {

dlt_status dlt__cuda_binary(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *a, const dlt_nd_operand *oa,
                            const dlt_tensor *b, const dlt_nd_operand *ob, const dlt_nd *s, int32_t op,
                            double alpha) {
    cudaStream_t st = dlt__stream(ctx);
    const int64_t n = s->numel;
    const char *pa = (const char *)dlt__data(a) + oa->offset * (int64_t)dlt__dtype_size(a->dtype);
    const char *pb = (const char *)dlt__data(b) + ob->offset * (int64_t)dlt__dtype_size(b->dtype);
    const bool yint = y->dtype == DLT_I32 || y->dtype == DLT_I64 || y->dtype == DLT_U8;
    if (yint) {
        dlt_nd_operand a0 = *oa, b0 = *ob;
        a0.offset = b0.offset = 0;
        binary_int_kernel<<<grid_for(n, 256), 256, 0, st>>>(dlt__data(y), y->dtype, pa, a->dtype, a0, pb, b->dtype, b0,
                                                             *s, op, (int64_t)alpha);
    } else if (a->dtype == b->dtype && a->dtype == y->dtype && unit(*s, *oa) && unit(*s, *ob)) {
        DLT_DISPATCH_FLOAT(y->dtype, T,
            binary_flat_kernel<T><<<grid_for(n, 256), 256, 0, st>>>((T *)dlt__data(y), (const T *)pa, (const T *)pb, n,
                                                                   op, (float)alpha));
    } else {
        dlt_nd_operand a0 = *oa, b0 = *ob;
        a0.offset = b0.offset = 0; /* folded into the pointers */
        if (n < ((int64_t)1 << 31))
            binary_kernel<uint32_t><<<grid_for(n, 256), 256, 0, st>>>(dlt__data(y), y->dtype, pa, a->dtype, a0, pb,
                                                                       b->dtype, b0, *s, op, (float)alpha);
        else
            binary_kernel<int64_t><<<grid_for(n, 256), 256, 0, st>>>(dlt__data(y), y->dtype, pa, a->dtype, a0, pb,
                                                                      b->dtype, b0, *s, op, (float)alpha);
    }
    DLT_CU_LAUNCHED(ctx, "dlt_binary");
    return DLT_OK;
}

dlt_status dlt__cuda_copy_nd(dlt_ctx *ctx, dlt_tensor *dst, const dlt_nd_operand *od, const dlt_tensor *src,
                             const dlt_nd_operand *os, const dlt_nd *s) {
    cudaStream_t st = dlt__stream(ctx);
    const int64_t n = s->numel;
    const size_t es = dlt__dtype_size(src->dtype);
    if (unit(*s, *od) && unit(*s, *os)) { /* one contiguous run */
        DLT_CU(ctx, cudaMemcpyAsync((char *)dlt__data(dst) + od->offset * (int64_t)es,
                                    (const char *)dlt__data(src) + os->offset * (int64_t)es, (size_t)n * es,
                                    cudaMemcpyDeviceToDevice, st),
               "dlt_copy");
        return DLT_OK;
    }
    /* 16-byte chunks when the innermost dimension is contiguous in both and everything lines
     * up (a head split or merge: rows of D elements): the same kernel over uint4 elements */
    {
        const int64_t w = 16 / (int64_t)es, last = s->ndim - 1;
        bool vec = s->ndim >= 1 && s->shape[last] % w == 0 && od->stride[last] == 1 && os->stride[last] == 1 &&
                   od->offset % w == 0 && os->offset % w == 0 && ((uintptr_t)dlt__data(dst) & 15) == 0 &&
                   ((uintptr_t)dlt__data(src) & 15) == 0;
        for (int32_t d = 0; vec && d < last; d++) vec = od->stride[d] % w == 0 && os->stride[d] % w == 0;
        if (vec && w > 1) {
            dlt_nd sv = *s;
            dlt_nd_operand dv = *od, sr = *os;
            sv.shape[last] /= w;
            sv.numel /= w;
            dv.offset /= w, sr.offset /= w;
            for (int32_t d = 0; d < last; d++) dv.stride[d] /= w, sr.stride[d] /= w;
            if (sv.numel < ((int64_t)1 << 31))
                copy_kernel<uint4, uint32_t><<<grid_for(sv.numel, 256), 256, 0, st>>>((uint4 *)dlt__data(dst), dv,
                                                                                     (const uint4 *)dlt__data(src),
                                                                                     sr, sv);
            else
                copy_kernel<uint4, int64_t><<<grid_for(sv.numel, 256), 256, 0, st>>>((uint4 *)dlt__data(dst), dv,
                                                                                    (const uint4 *)dlt__data(src),
                                                                                    sr, sv);
            DLT_CU_LAUNCHED(ctx, "dlt_copy");
            return DLT_OK;
        }
    }
    /* element copies by size: the bits move, the dtype does not matter */
#define DLT_COPY_LAUNCH(T)                                                                    \
    do {                                                                                      \
        if (n < ((int64_t)1 << 31))                                                           \
            copy_kernel<T, uint32_t><<<grid_for(n, 256), 256, 0, st>>>((T *)dlt__data(dst), *od, \
                                                                       (const T *)dlt__data(src), *os, *s); \
        else                                                                                  \
            copy_kernel<T, int64_t><<<grid_for(n, 256), 256, 0, st>>>((T *)dlt__data(dst), *od, \
                                                                      (const T *)dlt__data(src), *os, *s); \
    } while (0)
    switch (es) {
    case 1: DLT_COPY_LAUNCH(uint8_t); break;
    case 2: DLT_COPY_LAUNCH(uint16_t); break;
    case 4: DLT_COPY_LAUNCH(uint32_t); break;
    default: DLT_COPY_LAUNCH(uint64_t); break;
    }
#undef DLT_COPY_LAUNCH
    DLT_CU_LAUNCHED(ctx, "dlt_copy");
    return DLT_OK;
}

} // extern "C"
