/*
 * cross_entropy.cu - CUDA cross-entropy (log-softmax + NLL, PyTorch's F.cross_entropy
 * without class weights) forward and backward, and the accuracy counter.
 *
 * logits [N,K] row-major in any float dtype, of which the first C = n_classes columns are
 * classes (the rest: vocabulary padding, no probability, zero gradient); targets [N] int32
 * or int64; label smoothing ls (dlt_ce_params). Math in fp32, never materialised:
 *   lse_i  = max_i + log(sum_j<C exp(x_ij - max_i))    (online max and sum in one pass of
 *            16-byte loads: a warp per row, a block per row of >= 4096 classes)
 *   loss_i = (1-ls) (lse_i - x_i,t_i) + ls (lse_i - mean_j<C x_ij)   (ignored rows: none)
 *   loss   = sum_i loss_i / count (mean), sum_i loss_i (sum), or loss_i per row (none, 0 for
 *            ignored rows); count = non-ignored rows, so a mean over no rows is 0/0 = NaN,
 *            as in PyTorch.
 * saved (f32 [2N+1]) receives lse_i for every row, then count, then (with ls != 0 or
 * reduction none, on the grid path) loss_i; backward needs nothing else:
 * dlogits_ij = g * (exp(x_ij - lse_i) - (1-ls)[j == t_i] - ls/C), g = dloss / count (mean),
 * dloss (sum) or dloss_i (none), and 0 on ignored rows and padded columns. dloss and count
 * are read on the device: no sync. With ls = 0 and all columns classes the arithmetic is
 * the same as before label smoothing existed (same bits).
 *
 * Out-of-range targets (not ignore_index, outside [0, K)): the CPU backend reports an
 * error, but checking here would need a device-to-host sync in every step. Instead such a
 * row's loss is NaN (so the reduced loss is NaN and the scaler/user sees it) and its
 * gradient row is NaN; the out-of-range logit is never read.
 *
 * Determinism: no floating-point atomics. Small problems run in one block whose warps own
 * fixed rows and whose partial sums are added in a fixed order; large ones compute lse in
 * a grid, then one block reduces the row losses in a fixed order.
 *
 * count_correct: argmax per row (first maximum; NaN counts as the maximum, first NaN
 * wins, like torch.argmax) compared with the target, counted per block in shared memory
 * and added to the int64 counter with one integer atomicAdd per block (exact, so the
 * result does not depend on the order).
 */
#include <stdint.h>

#include "nd.cuh"
#include "ops_cuda.h"

using namespace dlt;

namespace {

/* Problems up to this many logits run the fused single-block forward. */
#define CE_FUSED_MAX_ELEMS ((int64_t)1 << 16)
/* Rows of at least this many classes take a block each on the grid path (narrower: a warp). */
#define CE_BLOCK_ROW_MIN 4096

struct CeArgs {
    int64_t ignore;
    int64_t C;     /* classes: the first C columns */
    float ls;      /* label smoothing */
    int reduction; /* DLT_REDUCTION_* */
};

/* Online log-sum-exp of a stream of values: m the largest so far, s = sum exp(v - m), sx =
 * sum v (label smoothing). One pass over the row (the two-pass max-then-sum read GPT-2's
 * 1.65 GB of logits twice: 1,049 us on an H200). m never becomes NaN (fmaxf skips it); a
 * NaN value reaches s through exp and makes lse NaN, as does +inf (exp(inf - inf)). */
struct Lse {
    float m, s, sx;
};

/* exp's reference point: 0 while every value so far is -inf (exp(-inf - -inf) would be NaN) */
__device__ __forceinline__ float lse_ref(float m) { return m == -INFINITY ? 0.0f : m; }

__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Per value exp(v - m) = 2^((v - m) log2e): a subtraction, a product and one MUFU.EX2
 * (expf's range reduction took ~12 instructions a value, near the time the memory takes);
 * relative error ~1e-7 for values near the maximum, terms under 2^-126 of it flush to 0. */
template <int W>
__device__ __forceinline__ void lse_push(Lse &a, const float (&v)[W], bool want_sx) {
    constexpr float LOG2E = 1.4426950408889634f;
    float cm = v[0];
#pragma unroll
    for (int e = 1; e < W; e++) cm = fmaxf(cm, v[e]);
    if (cm > a.m) { /* one rescale per new maximum of W values */
        a.s *= expf(a.m - cm);
        a.m = cm;
    }
    const float r = lse_ref(a.m);
#pragma unroll
    for (int e = 0; e < W; e++) a.s += ex2_ftz((v[e] - r) * LOG2E);
    if (want_sx) {
#pragma unroll
        for (int e = 0; e < W; e++) a.sx += v[e];
    }
}

__device__ __forceinline__ void lse_merge(Lse &a, const Lse &b) {
    const float m = fmaxf(a.m, b.m), r = lse_ref(m);
    a.s = a.s * expf(a.m - r) + b.s * expf(b.m - r);
    a.m = m;
    a.sx += b.sx;
}

/* Butterfly over the warp; lane 0's result is the one used (fixed order). */
__device__ __forceinline__ void lse_warp(Lse &a, bool want_sx) {
    for (int o = 16; o > 0; o >>= 1) {
        Lse b;
        b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
        b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
        b.sx = want_sx ? __shfl_xor_sync(0xffffffffu, a.sx, o) : 0.0f;
        lse_merge(a, b);
    }
}

__device__ __forceinline__ float lse_value(const Lse &a) { return a.m + logf(a.s); }

/* Thread t of nt's part of one row's first C values: 16-byte loads (8 f16/bf16 or 4 f32
 * values, 4 loads in flight per thread) from the row's first 16-byte boundary, scalar loads
 * for the head before it and the tail after the last full vector (any K, any alignment). */
template <typename T>
__device__ __forceinline__ Lse row_part(const T *__restrict__ row, int64_t C, int t, int nt, bool want_sx) {
    constexpr int W = Vec16<T>::N;
    Lse a = {-INFINITY, 0.0f, 0.0f};
    int64_t head = (int64_t)(((16u - ((unsigned)(uintptr_t)row & 15u)) & 15u) / sizeof(T));
    if (head > C) head = C;
    const int64_t nv = (C - head) / W, tail = head + nv * W;
    const uint4 *vp = (const uint4 *)(row + head);
    int64_t c = t;
    for (; c + 3 * (int64_t)nt < nv; c += 4 * (int64_t)nt) {
        Vec16<T> r[4];
#pragma unroll
        for (int u = 0; u < 4; u++) r[u].raw = vp[c + u * (int64_t)nt];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            float f[W];
#pragma unroll
            for (int e = 0; e < W; e++) f[e] = to_f<T>(r[u].v[e]);
            lse_push<W>(a, f, want_sx);
        }
    }
    for (; c < nv; c += nt) {
        Vec16<T> r;
        r.raw = vp[c];
        float f[W];
#pragma unroll
        for (int e = 0; e < W; e++) f[e] = to_f<T>(r.v[e]);
        lse_push<W>(a, f, want_sx);
    }
    for (int64_t j = t; j < head; j += nt) {
        const float f[1] = {to_f<T>(row[j])};
        lse_push<1>(a, f, want_sx);
    }
    for (int64_t j = tail + t; j < C; j += nt) {
        const float f[1] = {to_f<T>(row[j])};
        lse_push<1>(a, f, want_sx);
    }
    return a;
}

/* Loss of row i given its lse (and row sum sx for smoothing); *counted = 1 unless ignored. */
template <typename T, typename I>
__device__ __forceinline__ float row_loss(const T *__restrict__ x, const I *__restrict__ tg, int64_t i,
                                          int64_t K, const CeArgs &a, float lse, float sx, int *counted) {
    const int64_t t = (int64_t)tg[i];
    if (t == a.ignore) {
        *counted = 0;
        return 0.0f;
    }
    *counted = 1;
    if (t < 0 || t >= a.C) return NAN; /* see the file comment */
    float li = lse - to_f<T>(x[i * K + t]);
    if (a.ls != 0.0f) li = (1.0f - a.ls) * li + a.ls * (lse - sx / (float)a.C);
    return li;
}

/* Single block: warps own rows warp, warp + nwarps, ...; per-warp partials are added in
 * warp order by thread 0. */
template <typename T, typename I>
__global__ void ce_fwd_fused_kernel(float *__restrict__ loss, float *__restrict__ saved,
                                    const T *__restrict__ x, const I *__restrict__ tg, int64_t N,
                                    int64_t K, CeArgs a) {
    __shared__ float wsum[32];
    __shared__ long long wcnt[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float acc = 0.0f;
    long long cnt = 0;
    for (int64_t i = warp; i < N; i += nw) {
        Lse r = row_part<T>(x + i * K, a.C, lane, 32, a.ls != 0.0f);
        lse_warp(r, a.ls != 0.0f);
        if (lane == 0) {
            int counted;
            const float lse = lse_value(r);
            saved[i] = lse;
            const float li = row_loss<T, I>(x, tg, i, K, a, lse, r.sx, &counted);
            if (a.reduction == DLT_REDUCTION_NONE) loss[i] = li;
            acc += li;
            cnt += counted;
        }
    }
    if (lane == 0) {
        wsum[warp] = acc;
        wcnt[warp] = cnt;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        long long c = 0;
        for (int w = 0; w < nw; w++) {
            s += wsum[w];
            c += wcnt[w];
        }
        saved[N] = (float)c;
        if (a.reduction != DLT_REDUCTION_NONE) loss[0] = a.reduction == DLT_REDUCTION_MEAN ? s / (float)c : s;
    }
}

/* Grid: WARPS warps (of a 256-thread block) per row, grid-stride over the rows; lse, and
 * the row loss where the reduction needs it stored (smoothing, or reduction none). Wide
 * rows take a whole block (8 warps), so that short batches still fill the GPU and each
 * row's 4 loads per thread in flight come from 256 threads; the 8 warp results are merged
 * in warp order (deterministic). */
template <typename T, typename I, int WARPS>
__global__ void ce_lse_kernel(float *__restrict__ loss, float *__restrict__ saved, const T *__restrict__ x,
                              const I *__restrict__ tg, int64_t N, int64_t K, CeArgs a) {
    static_assert(WARPS == 1 || WARPS == 2 || WARPS == 4 || WARPS == 8, "warps per row");
    constexpr int RPB = 8 / WARPS; /* rows per block */
    __shared__ Lse part[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int t = (warp % WARPS) * 32 + lane; /* thread within the row */
    const bool want_sx = a.ls != 0.0f;
    const bool row_losses = want_sx || a.reduction == DLT_REDUCTION_NONE;
    for (int64_t i0 = (int64_t)blockIdx.x * RPB; i0 < N; i0 += (int64_t)gridDim.x * RPB) { /* block-uniform */
        const int64_t i = i0 + warp / WARPS;
        Lse acc = {-INFINITY, 0.0f, 0.0f};
        if (i < N) acc = row_part<T>(x + i * K, a.C, t, WARPS * 32, want_sx);
        lse_warp(acc, want_sx);
        if constexpr (WARPS > 1) {
            if (lane == 0) part[warp] = acc;
            __syncthreads();
            if (t == 0)
                for (int w = 1; w < WARPS; w++) lse_merge(acc, part[warp + w]);
            __syncthreads();
        }
        if (t == 0 && i < N) {
            const float lse = lse_value(acc);
            saved[i] = lse;
            if (row_losses) {
                int counted;
                const float li = row_loss<T, I>(x, tg, i, K, a, lse, acc.sx, &counted);
                saved[N + 1 + i] = li;
                if (a.reduction == DLT_REDUCTION_NONE) loss[i] = li;
            }
        }
    }
}

/* One block of 1024 threads: thread t takes rows t, t + 1024, ...; then a fixed tree. */
template <typename T, typename I>
__global__ void ce_reduce_kernel(float *__restrict__ loss, float *__restrict__ saved,
                                 const T *__restrict__ x, const I *__restrict__ tg, int64_t N,
                                 int64_t K, CeArgs a) {
    __shared__ float wsum[32];
    __shared__ long long wcnt[32];
    const bool row_losses = a.ls != 0.0f || a.reduction == DLT_REDUCTION_NONE;
    float acc = 0.0f;
    long long cnt = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        int counted;
        if (row_losses) {
            counted = (int64_t)tg[i] != a.ignore;
            acc += saved[N + 1 + i];
        } else {
            acc += row_loss<T, I>(x, tg, i, K, a, saved[i], 0.0f, &counted);
        }
        cnt += counted;
    }
    for (int o = 16; o > 0; o >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, o);
        cnt += __shfl_down_sync(0xffffffffu, cnt, o);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        wsum[warp] = acc;
        wcnt[warp] = cnt;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        long long c = 0;
        for (int w = 0; w < nw; w++) {
            s += wsum[w];
            c += wcnt[w];
        }
        saved[N] = (float)c;
        if (a.reduction != DLT_REDUCTION_NONE) loss[0] = a.reduction == DLT_REDUCTION_MEAN ? s / (float)c : s;
    }
}

template <typename T, typename D, typename I, typename Ix>
__global__ void ce_bwd_kernel(D *dx, const T *x, const I *__restrict__ tg, /* dx may be x (in place) */
                              const float *__restrict__ saved, const float *__restrict__ dloss,
                              Ix N, Ix K, CeArgs a) {
    float g0 = a.reduction == DLT_REDUCTION_NONE ? 0.0f : dloss[0];
    if (a.reduction == DLT_REDUCTION_MEAN) g0 /= saved[N];
    const float smooth = a.ls / (float)a.C;
    const Ix total = N * K;
    for (Ix idx = (Ix)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (Ix)gridDim.x * blockDim.x) {
        const Ix i = idx / K, j = idx - i * K;
        const int64_t t = (int64_t)tg[i];
        float out;
        if (t == a.ignore || (int64_t)j >= a.C)
            out = 0.0f;
        else if (t < 0 || t >= a.C)
            out = NAN;
        else {
            const float g = a.reduction == DLT_REDUCTION_NONE ? dloss[i] : g0;
            out = g * (expf(to_f<T>(x[idx]) - saved[i]) - (((int64_t)j == t ? 1.0f - a.ls : 0.0f) + smooth));
        }
        dx[idx] = from_f<D>(out);
    }
}

/* The same gradient for 16-bit logits and gradients with K % 8 == 0 and 16-byte aligned
 * rows: `group` threads (32..256, a power of two) per row, so the row's target, log-sum-exp
 * and scale are read once, and 8 columns per thread in 16-byte loads and stores, 4 loads in
 * flight (the flat kernel took 4.5 ms for GPT-2's 16384 x 50304 bf16 logits on an H200,
 * ~0.7 TB/s; a 2-D grid of one vector per thread, 25 blocks per row, 1.35 ms). */
template <typename T, typename D>
__device__ __forceinline__ uint4 ce_bwd_vec8(uint4 raw, int64_t j0, int64_t t, bool zero, bool bad, float g, float lse,
                                             float smooth, const CeArgs &a) {
    Vec16<T> in;
    Vec16<D> out;
    in.raw = raw;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const int64_t j = j0 + e;
        float o;
        if (zero || j >= a.C) o = 0.0f;
        else if (bad) o = NAN;
        else o = g * (expf(to_f<T>(in.v[e]) - lse) - ((j == t ? 1.0f - a.ls : 0.0f) + smooth));
        out.v[e] = from_f<D>(o);
    }
    return out.raw;
}

template <typename T, typename D, typename I>
__global__ void ce_bwd_vec_kernel(D *dx, const T *x, const I *__restrict__ tg, /* dx may be x (in place) */
                                  const float *__restrict__ saved, const float *__restrict__ dloss, int64_t N,
                                  int64_t K, int group, CeArgs a) {
    static_assert(sizeof(T) == 2 && sizeof(D) == 2, "16-bit logits and gradients");
    float g0 = a.reduction == DLT_REDUCTION_NONE ? 0.0f : dloss[0];
    if (a.reduction == DLT_REDUCTION_MEAN) g0 /= saved[N];
    const float smooth = a.ls / (float)a.C;
    const int64_t kv = K / 8, step = group;
    const int rpb = (int)blockDim.x / group, tr = (int)threadIdx.x % group;
    for (int64_t i = (int64_t)blockIdx.x * rpb + (int)threadIdx.x / group; i < N; i += (int64_t)gridDim.x * rpb) {
        const int64_t t = (int64_t)tg[i];
        const bool zero = t == a.ignore, bad = !zero && (t < 0 || t >= a.C);
        const float g = a.reduction == DLT_REDUCTION_NONE ? dloss[i] : g0, lse = saved[i];
        const uint4 *xr = (const uint4 *)(x + i * K);
        uint4 *dr = (uint4 *)(dx + i * K);
        int64_t c = tr;
        for (; c + 3 * step < kv; c += 4 * step) {
            uint4 r[4];
#pragma unroll
            for (int u = 0; u < 4; u++) r[u] = xr[c + u * step];
#pragma unroll
            for (int u = 0; u < 4; u++)
                dr[c + u * step] = ce_bwd_vec8<T, D>(r[u], (c + u * step) * 8, t, zero, bad, g, lse, smooth, a);
        }
        for (; c < kv; c += step) dr[c] = ce_bwd_vec8<T, D>(xr[c], c * 8, t, zero, bad, g, lse, smooth, a);
    }
}

/* Warp-level argmax; (v, i) pairs with i < 0 meaning "no element". */
__device__ __forceinline__ void argmax_take(float &bv, int64_t &bi, float v, int64_t i) {
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

template <typename T, typename I>
__global__ void count_correct_kernel(unsigned long long *__restrict__ correct, const T *__restrict__ x,
                                     const I *__restrict__ tg, int64_t N, int64_t K) {
    __shared__ unsigned int block_count;
    if (threadIdx.x == 0) block_count = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t i = first; i < N; i += step) {
        const T *row = x + i * K;
        float bv = -INFINITY;
        int64_t bi = -1;
        for (int64_t j = lane; j < K; j += 32) argmax_take(bv, bi, to_f<T>(row[j]), j);
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
            argmax_take(bv, bi, ov, oi);
        }
        if (lane == 0 && bi == (int64_t)tg[i]) atomicAdd(&block_count, 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0 && block_count) atomicAdd(correct, (unsigned long long)block_count);
}

CeArgs ce_args(const dlt_ce_params *p) {
    CeArgs a;
    a.ignore = p->ignore_index;
    a.C = p->n_classes;
    a.ls = (float)p->label_smoothing;
    a.reduction = p->reduction;
    return a;
}

template <typename T, typename I>
dlt_status launch_fwd(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, const dlt_tensor *logits,
                      const dlt_tensor *targets, const CeArgs &a) {
    const int64_t N = logits->shape[0], K = logits->shape[1];
    cudaStream_t st = dlt__stream(ctx);
    float *l = (float *)dlt__data(loss), *sv = (float *)dlt__data(saved);
    const T *x = (const T *)dlt__data(logits);
    const I *tg = (const I *)dlt__data(targets);
    if (N * K <= CE_FUSED_MAX_ELEMS) {
        ce_fwd_fused_kernel<T, I><<<1, 1024, 0, st>>>(l, sv, x, tg, N, K, a);
    } else {
        if (a.C >= CE_BLOCK_ROW_MIN) /* a block per row */
            ce_lse_kernel<T, I, 8><<<grid_for(N * 256, 256), 256, 0, st>>>(l, sv, x, tg, N, K, a);
        else /* a warp per row */
            ce_lse_kernel<T, I, 1><<<grid_for(N * 32, 256), 256, 0, st>>>(l, sv, x, tg, N, K, a);
        DLT_CU_LAUNCHED(ctx, "dlt_cross_entropy");
        ce_reduce_kernel<T, I><<<1, 1024, 0, st>>>(l, sv, x, tg, N, K, a);
    }
    DLT_CU_LAUNCHED(ctx, "dlt_cross_entropy");
    return DLT_OK;
}

template <typename T, typename D, typename I>
dlt_status launch_bwd(dlt_ctx *ctx, dlt_tensor *dlogits, const dlt_tensor *dloss, const dlt_tensor *logits,
                      const dlt_tensor *targets, const dlt_tensor *saved, const CeArgs &a) {
    const int64_t N = logits->shape[0], K = logits->shape[1];
    cudaStream_t st = dlt__stream(ctx);
    D *dx = (D *)dlt__data(dlogits);
    const T *x = (const T *)dlt__data(logits);
    const I *tg = (const I *)dlt__data(targets);
    const float *sv = (const float *)dlt__data(saved), *dl = (const float *)dlt__data(dloss);
    if constexpr (sizeof(T) == 2 && sizeof(D) == 2) {
        if (K % 8 == 0 && vec16_ok(N * K, 8, x, dx)) {
            int group = 32; /* threads per row: up to 4 vectors each, or 256 for longer rows */
            while (group < 256 && (int64_t)group * 4 < K / 8) group *= 2;
            if (N > 0 && K > 0)
                ce_bwd_vec_kernel<T, D, I><<<grid_for(N * group, 256), 256, 0, st>>>(dx, x, tg, sv, dl, N, K, group, a);
            DLT_CU_LAUNCHED(ctx, "dlt_cross_entropy_backward");
            return DLT_OK;
        }
    }
    if (N * K < ((int64_t)1 << 30)) /* 32-bit index math (64-bit division is slow) */
        ce_bwd_kernel<T, D, I, uint32_t><<<grid_for(N * K, 256), 256, 0, st>>>(
            dx, x, tg, sv, dl, (uint32_t)N, (uint32_t)K, a);
    else
        ce_bwd_kernel<T, D, I, int64_t><<<grid_for(N * K, 256), 256, 0, st>>>(dx, x, tg, sv, dl, N, K, a);
    DLT_CU_LAUNCHED(ctx, "dlt_cross_entropy_backward");
    return DLT_OK;
}

template <typename T, typename I>
dlt_status launch_count(dlt_ctx *ctx, void *correct, const dlt_tensor *logits, const dlt_tensor *targets) {
    const int64_t N = logits->shape[0], K = logits->shape[1];
    int64_t blocks = (N + 7) / 8; /* 8 warps (rows) per block */
    const int64_t cap = (int64_t)dlt__cu(ctx)->sm_count * 16;
    if (cap > 0 && blocks > cap) blocks = cap;
    count_correct_kernel<T, I><<<(unsigned)blocks, 256, 0, dlt__stream(ctx)>>>(
        (unsigned long long *)correct, (const T *)dlt__data(logits), (const I *)dlt__data(targets), N, K);
    DLT_CU_LAUNCHED(ctx, "dlt_count_correct");
    return DLT_OK;
}

dlt_status bad_targets(const dlt_tensor *targets, const char *F) {
    return dlt__err(DLT_ERR_DTYPE, F, "targets must be i32 or i64, got %s", dlt_dtype_name(targets->dtype));
}

} // namespace

extern "C" {

dlt_status dlt__cuda_ce_fwd(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, const dlt_tensor *logits,
                            const dlt_tensor *targets, const dlt_ce_params *p) {
    DLT_CHECK(same_dtype("dlt_cross_entropy", DLT_F32, loss, saved));
    const CeArgs a = ce_args(p);
    if (targets->dtype == DLT_I32) {
        DLT_DISPATCH_FLOAT(logits->dtype, T, return launch_fwd<T, int32_t>(ctx, loss, saved, logits, targets, a));
    } else if (targets->dtype == DLT_I64) {
        DLT_DISPATCH_FLOAT(logits->dtype, T, return launch_fwd<T, int64_t>(ctx, loss, saved, logits, targets, a));
    }
    return bad_targets(targets, "dlt_cross_entropy");
}

dlt_status dlt__cuda_ce_bwd(dlt_ctx *ctx, dlt_tensor *dlogits, const dlt_tensor *dloss,
                            const dlt_tensor *logits, const dlt_tensor *targets, const dlt_tensor *saved,
                            const dlt_ce_params *p) {
    DLT_CHECK(same_dtype("dlt_cross_entropy_backward", DLT_F32, dloss, saved));
    const CeArgs a = ce_args(p);
    if (targets->dtype == DLT_I32) {
        DLT_DISPATCH_FLOAT(logits->dtype, T, DLT_DISPATCH_FLOAT(dlogits->dtype, D,
            return launch_bwd<T, D, int32_t>(ctx, dlogits, dloss, logits, targets, saved, a)));
    } else if (targets->dtype == DLT_I64) {
        DLT_DISPATCH_FLOAT(logits->dtype, T, DLT_DISPATCH_FLOAT(dlogits->dtype, D,
            return launch_bwd<T, D, int64_t>(ctx, dlogits, dloss, logits, targets, saved, a)));
    }
    return bad_targets(targets, "dlt_cross_entropy_backward");
}

dlt_status dlt__cuda_count_correct(dlt_ctx *ctx, void *correct, const dlt_tensor *logits,
                                   const dlt_tensor *targets) {
    if (targets->dtype == DLT_I32) {
        DLT_DISPATCH_FLOAT(logits->dtype, T, return launch_count<T, int32_t>(ctx, correct, logits, targets));
    } else if (targets->dtype == DLT_I64) {
        DLT_DISPATCH_FLOAT(logits->dtype, T, return launch_count<T, int64_t>(ctx, correct, logits, targets));
    }
    return bad_targets(targets, "dlt_count_correct");
}

} // extern "C"
