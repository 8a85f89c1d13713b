/*
 * amp.cu - GradScaler kernels: PyTorch's _amp_foreach_non_finite_check_and_unscale_ as one
 * multi-tensor launch, and _amp_update_scale_ as a single-thread kernel.
 *
 * Unscale: inv = (float)(1.0 / (double)scale[0]) computed on the device from the scale
 * (no host read); every element v: found_inf = 1 if !isfinite(v) (inf or NaN; a racy but
 * idempotent store, as PyTorch's), v = v * inv in fp32 unless inv == 1. Same chunked layout
 * as sgd.cu: block b handles chunk b, per-tensor metadata by value (__grid_constant__),
 * float4 access where aligned.
 *
 * Update: the inf flag is the sum of the flags of the optimizers used since the last update
 * (bit mask); backoff and tracker reset on inf; growth only when the grown scale is finite;
 * tracker reset after growth (also when growth was suppressed).
 */
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 4096;
constexpr int kCap = 512;

struct UnscaleArgs {
    float *g[kCap];
    int64_t numel[kCap];
    int32_t chunk0[kCap + 1];
    uint8_t vec[kCap];
    int32_t n;
    float *found_inf;
    const float *scale;
};
static_assert(sizeof(UnscaleArgs) <= 32000, "unscale kernel arguments exceed the parameter limit");

__global__ void __launch_bounds__(kThreads) unscale_kernel(const __grid_constant__ UnscaleArgs a) {
    const float inv = (float)(1.0 / (double)*a.scale);
    const int blk = (int)blockIdx.x;
    int lo = 0, hi = a.n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (a.chunk0[mid] <= blk) lo = mid;
        else hi = mid - 1;
    }
    const int t = lo;
    const int64_t start = (int64_t)(blk - a.chunk0[t]) * kChunk;
    const int64_t end = min(start + (int64_t)kChunk, a.numel[t]);
    float *G = a.g[t];
    const bool mul = inv != 1.0f;
    int bad = 0;
    int64_t tail = start;
    if (a.vec[t]) {
        const int64_t nv = (end - start) >> 2;
        for (int64_t v = threadIdx.x; v < nv; v += kThreads) {
            float4 x = *reinterpret_cast<const float4 *>(G + start + 4 * v);
            bad |= !isfinite(x.x) | !isfinite(x.y) | !isfinite(x.z) | !isfinite(x.w);
            if (mul) {
                x.x *= inv;
                x.y *= inv;
                x.z *= inv;
                x.w *= inv;
                *reinterpret_cast<float4 *>(G + start + 4 * v) = x;
            }
        }
        tail = start + 4 * nv;
    }
    for (int64_t i = tail + threadIdx.x; i < end; i += kThreads) {
        float x = G[i];
        bad |= !isfinite(x);
        if (mul) G[i] = x * inv;
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) *a.found_inf = 1.0f;
}

__global__ void amp_update_kernel(float *scale, int32_t *tracker, const float *found, uint32_t mask,
                                  double growth_factor, double backoff_factor, int32_t growth_interval) {
    float f = 0.0f;
    for (int i = 0; i < 32; i++)
        if (mask & (1u << i)) f += found[i];
    if (f != 0.0f) {
        *scale = (float)((double)*scale * backoff_factor);
        *tracker = 0;
    } else {
        const int32_t successful = *tracker + 1;
        if (successful == growth_interval) {
            const float grown = (float)((double)*scale * growth_factor);
            if (isfinite(grown)) *scale = grown;
            *tracker = 0;
        } else {
            *tracker = successful;
        }
    }
}

inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

} // namespace

extern "C" {

dlt_status dlt__cuda_amp_unscale(dlt_ctx *ctx, dlt_tensor **grads, int32_t n, void *found_inf,
                                 const void *scale) {
    static const char *F = "dlt_grad_scaler_unscale";
    UnscaleArgs *args = (UnscaleArgs *)malloc(sizeof(UnscaleArgs));
    if (!args) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate launch arguments");
    memset(args, 0, sizeof *args);
    args->found_inf = (float *)found_inf;
    args->scale = (const float *)scale;
    cudaStream_t stream = dlt__stream(ctx);
    dlt_status st = DLT_OK;
    int32_t i = 0;
    while (i < n) {
        int32_t k = 0;
        int64_t chunks = 0;
        while (i < n && k < kCap) {
            const dlt_tensor *g = grads[i];
            if (g->dtype != DLT_F32) {
                st = dlt__err(DLT_ERR_NOT_SUPPORTED, F, "gradient %d is %s; CUDA unscales f32 gradients",
                              i, dlt_dtype_name(g->dtype));
                goto done;
            }
            const int64_t c = (g->numel + kChunk - 1) / kChunk;
            if (chunks + c > INT32_MAX) {
                if (k == 0) {
                    st = dlt__err(DLT_ERR_NOT_SUPPORTED, F, "gradient of %lld elements is too large",
                                  (long long)g->numel);
                    goto done;
                }
                break;
            }
            args->g[k] = (float *)dlt__data(g);
            args->numel[k] = g->numel;
            args->chunk0[k] = (int32_t)chunks;
            args->vec[k] = aligned16(args->g[k]);
            chunks += c;
            k++;
            i++;
        }
        args->chunk0[k] = (int32_t)chunks;
        args->n = k;
        if (chunks == 0) continue; /* only empty gradients in this group */
        unscale_kernel<<<(unsigned)chunks, kThreads, 0, stream>>>(*args);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            st = dlt__cuda_fail(ctx, e, F, "unscale_kernel launch");
            goto done;
        }
    }
done:
    free(args);
    return st;
}

dlt_status dlt__cuda_amp_update(dlt_ctx *ctx, void *scale, void *growth_tracker,
                                const void *found_inf, uint32_t mask, double growth_factor,
                                double backoff_factor, int32_t growth_interval) {
    amp_update_kernel<<<1, 1, 0, dlt__stream(ctx)>>>((float *)scale, (int32_t *)growth_tracker,
                                                      (const float *)found_inf, mask, growth_factor,
                                                      backoff_factor, growth_interval);
    DLT_CU_LAUNCHED(ctx, "dlt_grad_scaler_update");
    return DLT_OK;
}

} // extern "C"
