/*
 * dropout.cu - CUDA dropout (lib/ops/dropout.c): element i kept when the Philox uniform of
 * (seed, offset + *rng_base, i) is >= p, then scaled by 1/(1-p). lib/kernel/philox.h is the
 * same code the CPU backend runs, so a seed gives the same mask on both. The base is read
 * on the device (a replayed graph sees the value its previous replay left); rng_advance adds
 * to it, as the last node of a captured step.
 */
#include "../lib/kernel/philox.h"
#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

template <typename T> struct alignas(4 * sizeof(T)) quad {
    T v[4];
};

/* One Philox block per thread: its four words are the uniforms of elements 4k..4k+3
 * (dlt__philox_uniform's numbering), so each block is computed once, not once per element;
 * the four elements move as one vector where x and y allow (vec). */
template <typename T>
__global__ void dropout_kernel(T *y, const T *x, int64_t n, float p, float scale, uint64_t seed, uint64_t offset,
                               const uint64_t *base, int vec) {
    const uint64_t off = offset + *base;
    DLT_GRID_STRIDE(k, (n + 3) / 4) {
        const dlt_philox_out o = dlt__philox(seed, off + (uint64_t)k);
        const int64_t i0 = 4 * k;
        if (vec && i0 + 4 <= n) {
            quad<T> q = *(const quad<T> *)(x + i0);
#pragma unroll
            for (uint32_t w = 0; w < 4; w++) {
                const bool keep = dlt__u32_to_unit(dlt__philox_word(&o, w)) >= p;
                q.v[w] = from_f<T>(keep ? to_f<T>(q.v[w]) * scale : 0.0f);
            }
            *(quad<T> *)(y + i0) = q;
            continue;
        }
#pragma unroll
        for (uint32_t w = 0; w < 4; w++) {
            const int64_t i = i0 + w;
            if (i >= n) break;
            const bool keep = dlt__u32_to_unit(dlt__philox_word(&o, w)) >= p;
            y[i] = from_f<T>(keep ? to_f<T>(x[i]) * scale : 0.0f);
        }
    }
}

__global__ void rng_advance_kernel(uint64_t *base, uint64_t delta) { *base += delta; }

} // namespace

extern "C" {

dlt_status dlt__cuda_dropout(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double p, uint64_t seed,
                             uint64_t offset) {
    const int64_t n = x->numel;
    DLT_CHECK(same_dtype("dlt_dropout", x->dtype, y));
    const float scale = p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    const uintptr_t at = (uintptr_t)dlt__data(y) | (uintptr_t)dlt__data(x);
    DLT_DISPATCH_FLOAT(x->dtype, T,
        dropout_kernel<T><<<grid_for((n + 3) / 4, 256), 256, 0, dlt__stream(ctx)>>>(
            (T *)dlt__data(y), (const T *)dlt__data(x), n, (float)p, scale, seed, offset,
            (const uint64_t *)ctx->rng_base, at % sizeof(quad<T>) == 0));
    DLT_CU_LAUNCHED(ctx, "dlt_dropout");
    return DLT_OK;
}

dlt_status dlt__cuda_rng_advance(dlt_ctx *ctx, uint64_t delta) {
    rng_advance_kernel<<<1, 1, 0, dlt__stream(ctx)>>>((uint64_t *)ctx->rng_base, delta);
    DLT_CU_LAUNCHED(ctx, "dlt_graph_create");
    return DLT_OK;
}

} // extern "C"
