/*
 * reduce.cu - CUDA kernel of the reductions over chosen dimensions (lib/ops/reduce.c):
 * sum (times alpha), max and argmax, fp32 accumulation, deterministic (each output reduced
 * by one warp or one thread in a fixed order, no atomics).
 *   - the reduced dimensions end with a unit stride (e.g. over the last dimension): one warp
 *     per output, lanes stride through the reduction, then a fixed shuffle tree;
 *   - otherwise (e.g. over leading dimensions, where outputs are adjacent in memory): one
 *     thread per output walks the reduction, neighbouring threads read neighbouring
 *     elements.
 * max/argmax: the first maximum in reduction order wins; NaN counts as the maximum (the
 * first NaN), as PyTorch. Compile-checked; first run on a GPU is the next session's.
 */
#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

/* (value, position) pairs: position < 0 means none */
__device__ __forceinline__ void take_max(float &bv, int64_t &bi, float v, int64_t i) {
    bool take;
    if (i < 0) take = false;
    else if (bi < 0) take = true;
    else if (bv != bv || v != v) take = (v != v) && (bv == bv || i < bi);
    else take = v > bv || (v == bv && i < bi);
    if (take) {
        bv = v;
        bi = i;
    }
}

template <typename T>
__global__ void reduce_warp_kernel(void *y, int ty, const T *x, dlt_reduce_spec r, int op, float alpha) {
    const int lane = threadIdx.x & 31;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t o = first; o < r.kept.numel; o += step) {
        const int64_t base = nd_offset<int64_t>(r.kept, r.kept_x, o);
        if (op == DLT_RED_SUM) {
            float acc = 0.0f;
            for (int64_t j = lane; j < r.red.numel; j += 32) acc += to_f<T>(x[base + nd_offset<int64_t>(r.red, r.red_x, j)]);
            acc = warp_sum_f(acc);
            if (lane == 0) st_dt(y, ty, o, acc * alpha);
        } else {
            float bv = -INFINITY;
            int64_t bi = -1;
            for (int64_t j = lane; j < r.red.numel; j += 32)
                take_max(bv, bi, to_f<T>(x[base + nd_offset<int64_t>(r.red, r.red_x, j)]), j);
#pragma unroll
            for (int s = 16; s > 0; s >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, bv, s);
                const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, s);
                take_max(bv, bi, ov, oi);
            }
            if (lane == 0) {
                if (op == DLT_RED_ARGMAX) ((int64_t *)y)[o] = bi;
                else st_dt(y, ty, o, bv);
            }
        }
    }
}

template <typename T>
__global__ void reduce_thread_kernel(void *y, int ty, const T *x, dlt_reduce_spec r, int op, float alpha) {
    DLT_GRID_STRIDE(o, r.kept.numel) {
        const int64_t base = nd_offset<int64_t>(r.kept, r.kept_x, o);
        if (op == DLT_RED_SUM) {
            float acc = 0.0f;
            for (int64_t j = 0; j < r.red.numel; j++) acc += to_f<T>(x[base + nd_offset<int64_t>(r.red, r.red_x, j)]);
            st_dt(y, ty, o, acc * alpha);
        } else {
            float bv = -INFINITY;
            int64_t bi = -1;
            for (int64_t j = 0; j < r.red.numel; j++) take_max(bv, bi, to_f<T>(x[base + nd_offset<int64_t>(r.red, r.red_x, j)]), j);
            if (op == DLT_RED_ARGMAX) ((int64_t *)y)[o] = bi;
            else st_dt(y, ty, o, bv);
        }
    }
}

} // namespace

extern "C" dlt_status dlt__cuda_reduce(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_reduce_spec *r,
                                       int32_t op, double alpha) {
    cudaStream_t st = dlt__stream(ctx);
    const bool warp = r->red.ndim > 0 && r->red_x.stride[r->red.ndim - 1] == 1 && r->red.numel >= 32;
    const int ty = y->dtype == DLT_I64 ? DLT_F32 : y->dtype; /* argmax writes i64 itself */
    if (warp) {
        DLT_DISPATCH_FLOAT(x->dtype, T,
            reduce_warp_kernel<T><<<grid_for(r->kept.numel * 32, 256), 256, 0, st>>>(dlt__data(y), ty,
                                                                                 (const T *)dlt__data(x), *r, op,
                                                                                 (float)alpha));
    } else {
        DLT_DISPATCH_FLOAT(x->dtype, T,
            reduce_thread_kernel<T><<<grid_for(r->kept.numel, 128), 128, 0, st>>>(dlt__data(y), ty,
                                                                               (const T *)dlt__data(x), *r, op,
                                                                               (float)alpha));
    }
    DLT_CU_LAUNCHED(ctx, "dlt_reduce");
    return DLT_OK;
}
