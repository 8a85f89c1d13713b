/*
 * binary.cu - CUDA kernels of the broadcasting binary ops (lib/ops/binary.c) and of copy_nd
 * (layout ops and their gradients). Operands are read through their operand maps
 * (lib/kernel/nd.h); math in fp32, dtypes of a, b and y chosen at run time per element load
 * (uniform across the grid, so the branch costs little). Same-layout float operands (one
 * merged dimension, unit strides; any dtype mix, e.g. the residual add f32 + bf16 -> f32) take
 * a flat kernel with the dtypes compiled in, moving 16 or 8 bytes per access when aligned;
 * so does a row broadcast (one operand the whole contiguous output, the other repeated over
 * its rows: the GPT's tok_emb [B,T,C] + pos_emb [T,C] took 110 us for 16x1024x768 f32 in the
 * index-mapping kernel on an H200, ~30 us at memory bandwidth). Copies whose rows line up
 * move 16 bytes per thread.
 */
#include <type_traits>

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

/* V values of T as one 16- or 8-byte access */
template <typename T, int V> union Pack {
    static_assert(sizeof(T) * V == 16 || sizeof(T) * V == 8, "16- or 8-byte packs");
    typename std::conditional<sizeof(T) * V == 16, uint4, uint2>::type raw;
    T v[V];
};

/* Both operands contiguous over the whole space, float dtypes fixed at compile time: an
 * f32 + bf16 -> f32 add of [16384, 768] took 89 us in binary_kernel (run-time dtype switches,
 * index math), 33 us here (H200, ~3.8 TB/s). The first nv * V elements go V per thread (the
 * widest dtype moves 16 bytes), the rest one per thread; nv = 0 when a pointer is not aligned
 * to its pack. The same fp32 math and rounding as binary_kernel, so bitwise its results. */
template <typename Ta, typename Tb, typename Ty, int V>
__global__ void binary_flat_kernel(Ty *y, const Ta *a, const Tb *b, int64_t n, int64_t nv, int op, float alpha) {
    DLT_GRID_STRIDE(i, nv) {
        Pack<Ta, V> pa;
        Pack<Tb, V> pb;
        Pack<Ty, V> py;
        pa.raw = reinterpret_cast<const decltype(pa.raw) *>(a)[i];
        pb.raw = reinterpret_cast<const decltype(pb.raw) *>(b)[i];
#pragma unroll
        for (int k = 0; k < V; k++) py.v[k] = from_f<Ty>(bin_f(op, to_f<Ta>(pa.v[k]), to_f<Tb>(pb.v[k]), alpha));
        reinterpret_cast<decltype(py.raw) *>(y)[i] = py.raw;
    }
    const int64_t done = nv * V;
    DLT_GRID_STRIDE(i, n - done) {
        const int64_t j = done + i;
        y[j] = from_f<Ty>(bin_f(op, to_f<Ta>(a[j]), to_f<Tb>(b[j]), alpha));
    }
}

/* Values per pack of the flat kernels: the widest of the three dtypes moves 16 bytes */
template <typename Ta, typename Tb, typename Ty> constexpr int pack_width() {
    constexpr size_t W = sizeof(Ta) > sizeof(Tb) ? (sizeof(Ta) > sizeof(Ty) ? sizeof(Ta) : sizeof(Ty))
                                                 : (sizeof(Tb) > sizeof(Ty) ? sizeof(Tb) : sizeof(Ty));
    return (int)(16 / W);
}
/* a view (narrow) may start anywhere: the pointers carry the offset */
template <typename Ta, typename Tb, typename Ty, int V> bool packs_aligned(const void *y, const void *a, const void *b) {
    return (uintptr_t)a % (sizeof(Ta) * V) == 0 && (uintptr_t)b % (sizeof(Tb) * V) == 0 &&
           (uintptr_t)y % (sizeof(Ty) * V) == 0;
}

template <typename Ta, typename Tb, typename Ty>
void launch_flat(cudaStream_t st, void *y, const void *a, const void *b, int64_t n, int op, float alpha) {
    constexpr int V = pack_width<Ta, Tb, Ty>();
    const bool vec = packs_aligned<Ta, Tb, Ty, V>(y, a, b);
    const int64_t nv = vec ? n / V : 0;
    binary_flat_kernel<Ta, Tb, Ty, V><<<grid_for(vec ? nv : n, 256), 256, 0, st>>>((Ty *)y, (const Ta *)a,
                                                                                  (const Tb *)b, n, nv, op, alpha);
}

/* Row broadcast: y and one operand are n contiguous elements, the other operand `inner`
 * contiguous elements read at i % inner (small_a: a is that one), the operand order kept for
 * sub and div. Packs as in binary_flat_kernel when inner is a multiple of V and the pointers
 * line up (nv = n / V, no tail), else one element per thread (nv = 0); 32-bit index math
 * (the launcher keeps n below 2^31). The same fp32 math and rounding as binary_kernel. */
template <typename Ta, typename Tb, typename Ty, int V>
__global__ void binary_rows_kernel(Ty *y, const Ta *a, const Tb *b, uint32_t n, uint32_t inner, uint32_t nv,
                                   bool small_a, int op, float alpha) {
    const uint32_t inner_v = inner / V;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += gridDim.x * blockDim.x) {
        const uint32_t r = i % inner_v;
        Pack<Ta, V> pa;
        Pack<Tb, V> pb;
        Pack<Ty, V> py;
        pa.raw = reinterpret_cast<const decltype(pa.raw) *>(a)[small_a ? r : i];
        pb.raw = reinterpret_cast<const decltype(pb.raw) *>(b)[small_a ? i : r];
#pragma unroll
        for (int k = 0; k < V; k++) py.v[k] = from_f<Ty>(bin_f(op, to_f<Ta>(pa.v[k]), to_f<Tb>(pb.v[k]), alpha));
        reinterpret_cast<decltype(py.raw) *>(y)[i] = py.raw;
    }
    const uint32_t done = nv * V;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n - done; i += gridDim.x * blockDim.x) {
        const uint32_t j = done + i, r = j % inner;
        y[j] = from_f<Ty>(bin_f(op, to_f<Ta>(a[small_a ? r : j]), to_f<Tb>(b[small_a ? j : r]), alpha));
    }
}

template <typename Ta, typename Tb, typename Ty>
void launch_rows(cudaStream_t st, void *y, const void *a, const void *b, int64_t n, int64_t inner, bool small_a,
                 int op, float alpha) {
    constexpr int V = pack_width<Ta, Tb, Ty>();
    const bool vec = inner % V == 0 && packs_aligned<Ta, Tb, Ty, V>(y, a, b);
    const int64_t nv = vec ? n / V : 0;
    binary_rows_kernel<Ta, Tb, Ty, V><<<grid_for(vec ? nv : n, 256), 256, 0, st>>>(
        (Ty *)y, (const Ta *)a, (const Tb *)b, (uint32_t)n, (uint32_t)inner, (uint32_t)nv, small_a, op, alpha);
}

template <typename T, typename Ix>
__global__ void copy_kernel(T *dst, dlt_nd_operand od, const T *src, dlt_nd_operand os, dlt_nd s) {
    const Ix n = (Ix)s.numel;
    for (Ix i = (Ix)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (Ix)gridDim.x * blockDim.x)
        dst[nd_offset<Ix>(s, od, i)] = src[nd_offset<Ix>(s, os, i)];
}

bool unit(const dlt_nd &s, const dlt_nd_operand &o) { return s.ndim <= 1 && (s.ndim == 0 || o.stride[0] == 1); }
/* in a [rows, inner] space: the operand covers it contiguously (whole), or repeats one
 * contiguous row of inner elements (rows) */
bool whole2(const dlt_nd &s, const dlt_nd_operand &o) { return o.stride[0] == s.shape[1] && o.stride[1] == 1; }
bool rows2(const dlt_nd_operand &o) { return o.stride[0] == 0 && o.stride[1] == 1; }

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
    } else if (dlt__is_float(a->dtype) && dlt__is_float(b->dtype) && unit(*s, *oa) && unit(*s, *ob)) {
        DLT_DISPATCH_FLOAT(a->dtype, Ta, DLT_DISPATCH_FLOAT(b->dtype, Tb, DLT_DISPATCH_FLOAT(y->dtype, Ty,
            launch_flat<Ta, Tb, Ty>(st, dlt__data(y), pa, pb, n, op, (float)alpha))));
    } else if (dlt__is_float(a->dtype) && dlt__is_float(b->dtype) && s->ndim == 2 && n < ((int64_t)1 << 31) &&
               ((whole2(*s, *oa) && rows2(*ob)) || (rows2(*oa) && whole2(*s, *ob)))) {
        /* n below 2^31: the index plus the grid stride stays within 32 bits */
        const bool small_a = rows2(*oa);
        DLT_DISPATCH_FLOAT(a->dtype, Ta, DLT_DISPATCH_FLOAT(b->dtype, Tb, DLT_DISPATCH_FLOAT(y->dtype, Ty,
            launch_rows<Ta, Tb, Ty>(st, dlt__data(y), pa, pb, n, s->shape[1], small_a, op, (float)alpha))));
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
