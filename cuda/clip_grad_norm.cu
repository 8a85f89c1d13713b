/*
 * clip_grad_norm.cu - clip_grad_norm on the device in three kernels, no host read
 * (lib/optim/clip_grad_norm.c states it). COMPILE-CHECKED ONLY: written in a session
 * without a GPU; tests/cuda_optim.c "clip_grad_norm_vs_cpu" checks it on the next GPU
 * session.
 *
 *   partial_kernel   multi-tensor, one block per chunk of kChunk elements: the chunk's sum
 *                    of squares (L2), sum of |g| (L1) or max |g| (inf) in f32, written to
 *                    partial[chunk] (no atomics: the result does not depend on timing)
 *   finalize_kernel  one block: partials combined in double in a fixed order, total
 *                    rounded to f32 and stored, coef = min((1 / (total + 1e-6)) * max_norm,
 *                    1) in f32 stored beside the partials
 *   scale_kernel     multi-tensor: g *= coef
 * The optimizer's fused clipping (dlt_optimizer_set_clip_grad_norm) runs the first two
 * alone, with coef stored at L->coef, and its step kernel multiplies by it instead.
 * The partials live in a temporary tensor released (stream-ordered) after the launches.
 * Per-tensor metadata travels by value (__grid_constant__), as in sgd.cu.
 */
#include <stdlib.h>
#include <string.h>

#include "../lib/kernel/optim.h"
#include "common.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 4096;
constexpr int kCap = 512;

struct ClipArgs {
    float *g[kCap];
    int64_t numel[kCap];
    int32_t chunk0[kCap + 1];
    uint8_t vec[kCap];
    int32_t n;
    int32_t norm;
    int64_t part0;  /* this launch's first chunk in partial[] */
    float *partial; /* partial[total chunks], then coef */
    const float *coef;
};
static_assert(sizeof(ClipArgs) <= 32000, "clip kernel arguments exceed the 32 KB parameter limit");

/* max that propagates NaN, as the inf-norm does */
__device__ __forceinline__ float max_nan(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ double max_nan_d(double a, double b) { return (a != a || a > b) ? a : b; }

__device__ __forceinline__ float accum(int norm, float acc, float x) {
    if (norm == DLT_CLIP_NORM_L2) return __fmaf_rn(x, x, acc);
    if (norm == DLT_CLIP_NORM_L1) return __fadd_rn(acc, fabsf(x));
    return max_nan(fabsf(x), acc);
}

__device__ __forceinline__ int find_tensor(const ClipArgs &a, int blk) {
    int lo = 0, hi = a.n - 1; /* last t with chunk0[t] <= blk */
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (a.chunk0[mid] <= blk) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

__global__ void __launch_bounds__(kThreads) partial_kernel(const __grid_constant__ ClipArgs a) {
    __shared__ float red[kThreads];
    const int blk = (int)blockIdx.x;
    const int t = find_tensor(a, blk);
    const int64_t start = (int64_t)(blk - a.chunk0[t]) * kChunk;
    const int64_t end = min(start + (int64_t)kChunk, a.numel[t]);
    const float *G = a.g[t];
    float acc = 0.0f;
    int64_t tail = start;
    if (a.vec[t]) {
        const int64_t nv = (end - start) >> 2;
        for (int64_t q = threadIdx.x; q < nv; q += kThreads) {
            const float4 v = *reinterpret_cast<const float4 *>(G + start + 4 * q);
            acc = accum(a.norm, acc, v.x);
            acc = accum(a.norm, acc, v.y);
            acc = accum(a.norm, acc, v.z);
            acc = accum(a.norm, acc, v.w);
        }
        tail = start + 4 * nv;
    }
    for (int64_t i = tail + threadIdx.x; i < end; i += kThreads) acc = accum(a.norm, acc, G[i]);
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            const float o = red[threadIdx.x + s];
            red[threadIdx.x] = a.norm == DLT_CLIP_NORM_INF ? max_nan(red[threadIdx.x], o)
                                                           : __fadd_rn(red[threadIdx.x], o);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) a.partial[a.part0 + blk] = red[0];
}

__global__ void __launch_bounds__(kThreads) finalize_kernel(const float *partial, int64_t count, int norm,
                                                           float max_norm, float *total, float *coef) {
    __shared__ double red[kThreads];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < count; i += kThreads)
        acc = norm == DLT_CLIP_NORM_INF ? max_nan_d((double)partial[i], acc) : acc + (double)partial[i];
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            const double o = red[threadIdx.x + s];
            red[threadIdx.x] = norm == DLT_CLIP_NORM_INF ? max_nan_d(red[threadIdx.x], o) : red[threadIdx.x] + o;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const float tot = (float)(norm == DLT_CLIP_NORM_L2 ? sqrt(red[0]) : red[0]);
        *total = tot;
        float c = __fmul_rn(__fdiv_rn(1.0f, __fadd_rn(tot, 1e-6f)), max_norm);
        *coef = c > 1.0f ? 1.0f : c; /* clamp(max=1): NaN stays NaN */
    }
}

__global__ void __launch_bounds__(kThreads) scale_kernel(const __grid_constant__ ClipArgs a) {
    const int blk = (int)blockIdx.x;
    const int t = find_tensor(a, blk);
    const int64_t start = (int64_t)(blk - a.chunk0[t]) * kChunk;
    const int64_t end = min(start + (int64_t)kChunk, a.numel[t]);
    const float c = *a.coef;
    float *G = a.g[t];
    int64_t tail = start;
    if (a.vec[t]) {
        const int64_t nv = (end - start) >> 2;
        for (int64_t q = threadIdx.x; q < nv; q += kThreads) {
            float4 *p = reinterpret_cast<float4 *>(G + start + 4 * q);
            float4 v = *p;
            v.x = __fmul_rn(v.x, c);
            v.y = __fmul_rn(v.y, c);
            v.z = __fmul_rn(v.z, c);
            v.w = __fmul_rn(v.w, c);
            *p = v;
        }
        tail = start + 4 * nv;
    }
    for (int64_t i = tail + threadIdx.x; i < end; i += kThreads) G[i] = __fmul_rn(G[i], c);
}

/* Fills args with the tensors from *i on (at most kCap, chunk count within int32);
 * returns the launch's chunk count, or -1 for a tensor too large for one launch. */
int64_t pack(ClipArgs *args, const dlt_clip_launch *L, int32_t *i) {
    int32_t n = 0;
    int64_t chunks = 0;
    while (*i < L->n && n < kCap) {
        const dlt_tensor *t = L->grads[*i];
        const int64_t c = (t->numel + kChunk - 1) / kChunk;
        if (chunks + c > INT32_MAX) {
            if (n == 0) return -1;
            break;
        }
        float *gp = (float *)dlt__data(t);
        args->g[n] = gp;
        args->numel[n] = t->numel;
        args->chunk0[n] = (int32_t)chunks;
        args->vec[n] = ((uintptr_t)gp & 15) == 0;
        chunks += c;
        n++;
        (*i)++;
    }
    args->chunk0[n] = (int32_t)chunks;
    args->n = n;
    return chunks;
}

} // namespace

extern "C" {

dlt_status dlt__cuda_clip_grad_norm(dlt_ctx *ctx, const dlt_clip_launch *L) {
    static const char *F = "dlt_clip_grad_norm";
    int64_t total_chunks = 0;
    for (int32_t i = 0; i < L->n; i++) total_chunks += (L->grads[i]->numel + kChunk - 1) / kChunk;
    int64_t len = total_chunks + 1; /* partials, then coef */
    dlt_tensor *scratch = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, DLT_F32, &len, 1, DLT_FORMAT_CONTIGUOUS, F, &scratch));
    float *partial = (float *)dlt__data(scratch);
    /* the optimizer's fused clipping keeps coef in its own buffer, read by its step kernel */
    float *coef = L->coef ? (float *)L->coef : partial + total_chunks;
    ClipArgs *args = (ClipArgs *)malloc(sizeof(ClipArgs));
    dlt_status st = DLT_OK;
    cudaStream_t stream = dlt__stream(ctx);
    if (!args) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate launch arguments");
        goto done;
    }
    memset(args, 0, sizeof *args);
    args->norm = L->norm;
    args->partial = partial;
    args->coef = coef;
    for (int pass = 0; pass < (L->scale ? 2 : 1); pass++) {
        int32_t i = 0;
        args->part0 = 0;
        while (i < L->n) {
            const int64_t chunks = pack(args, L, &i);
            if (chunks < 0) {
                st = dlt__err(DLT_ERR_NOT_SUPPORTED, F, "a gradient of %lld elements is too large",
                              (long long)L->grads[i]->numel);
                goto done;
            }
            if (chunks > 0) {
                if (pass == 0) partial_kernel<<<(unsigned)chunks, kThreads, 0, stream>>>(*args);
                else scale_kernel<<<(unsigned)chunks, kThreads, 0, stream>>>(*args);
                cudaError_t e = cudaGetLastError();
                if (e != cudaSuccess) {
                    st = dlt__cuda_fail(ctx, e, F, pass == 0 ? "partial_kernel launch" : "scale_kernel launch");
                    goto done;
                }
            }
            args->part0 += chunks;
        }
        if (pass == 0) {
            finalize_kernel<<<1, kThreads, 0, stream>>>(partial, total_chunks, L->norm, (float)L->max_norm,
                                                        (float *)L->total, coef);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) {
                st = dlt__cuda_fail(ctx, e, F, "finalize_kernel launch");
                goto done;
            }
        }
    }
done:
    free(args);
    dlt_tensor_release(scratch); /* stream-ordered: after the kernels above */
    return st;
}

} // extern "C"
