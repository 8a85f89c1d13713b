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
 * the same as before label smoothing existed (same bits). For 16-bit logits the exp is one
 * ex2.approx of (x log2e - lse log2e), as in the log-sum-exp.
 *
 * Wide rows of 16-bit logits (>= 4096 classes) take a block each, the row held on chip
 * (ce_smem_kernel in shared memory where a block may have ceil(C/8) * 16 bytes, else
 * ce_row_kernel in registers up to 65536 classes). ce_fwd_grad, for a loss whose logits the
 * caller gave up (a GPT's loss-only forward), runs the same kernel and then writes the
 * gradient for dloss = 1 from the held row: the logits are read once (GPT-2 at 16 x 1024 on
 * an H200: 0.92 ms against 1.29 for the forward and backward kernels apart).
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
    int rows_saved; /* the row losses are in saved[N+1..] whatever ls and the reduction (ce_row_kernel<GRAD>) */
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
    const bool row_losses = a.rows_saved || a.ls != 0.0f || a.reduction == DLT_REDUCTION_NONE;
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
template <typename T, typename D, typename Ix = int64_t> /* Ix: int where columns and classes fit */
__device__ __forceinline__ uint4 ce_bwd_vec8(uint4 raw, Ix j0, Ix t, bool zero, bool bad, float g, float lse,
                                             float smooth, const CeArgs &a) {
    constexpr float LOG2E = 1.4426950408889634f;
    const float lse2 = lse * LOG2E;
    Vec16<T> in;
    Vec16<D> out;
    in.raw = raw;
    if (!zero && !bad && smooth == 0.0f && j0 + 8 <= (Ix)a.C && (t < j0 || t >= j0 + 8)) {
        /* the common vector (classes only, not the target, no smoothing): the formula below
         * with its subtrahend 0, the same bits in a third of the instructions */
#pragma unroll
        for (int e = 0; e < 8; e++) out.v[e] = from_f<D>(g * ex2_ftz(fmaf(to_f<T>(in.v[e]), LOG2E, -lse2)));
        return out.raw;
    }
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const Ix j = j0 + e;
        float o;
        if (zero || j >= (Ix)a.C) o = 0.0f;
        else if (bad) o = NAN;
        else o = g * (ex2_ftz(fmaf(to_f<T>(in.v[e]), LOG2E, -lse2)) - ((j == t ? 1.0f - a.ls : 0.0f) + smooth));
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

/* ce_fwd_grad (see dlt__cuda_ce_fwd_grad): the count of non-ignored rows into saved[N]
 * first, since the gradient's 1/count is needed before the last row is done (ce_reduce_kernel
 * writes the same value again). One block. */
template <typename I>
__global__ void ce_count_kernel(float *__restrict__ saved, const I *__restrict__ tg, int64_t N, int64_t ignore) {
    __shared__ long long wcnt[32];
    long long c = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) c += (int64_t)tg[i] != ignore;
    for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) wcnt[warp] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        long long t = 0;
        for (int w = 0; w < nw; w++) t += wcnt[w];
        saved[N] = (float)t;
    }
}

#define CE_ROW_VPT 8
#define CE_ROW_MAX_THREADS 1024

/* The two one-pass kernels' common ending of a row's log-sum-exp: the warps' results merged
 * in a butterfly over warp 0 (a fixed order), lse and the row loss stored (with GRAD, or
 * where the reduction needs it), lse returned to every thread (GRAD: one more barrier). */
template <typename T, typename I, bool GRAD>
__device__ __forceinline__ float row_finish(Lse acc, Lse (&part)[2][32], float (&row_lse)[2], int par, float *loss,
                                            float *saved, const T *x, const I *tg, int64_t i, int64_t N, int64_t K,
                                            const CeArgs &a, bool want_sx) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (int)blockDim.x >> 5;
    const bool row_losses = GRAD || want_sx || a.reduction == DLT_REDUCTION_NONE;
    lse_warp(acc, want_sx);
    if (lane == 0) part[par][warp] = acc;
    /* A warp writes part[par] again two rows on, after the next row's barrier, which warp 0
     * reaches only once it has read this row's parts: one barrier per row suffices. */
    __syncthreads();
    if (warp == 0) {
        Lse b = {-INFINITY, 0.0f, 0.0f};
        if (lane < nw) b = part[par][lane];
        lse_warp(b, want_sx);
        if (lane == 0) {
            const float lse = lse_value(b);
            saved[i] = lse;
            if (row_losses) {
                int counted;
                const float li = row_loss<T, I>(x, tg, i, K, a, lse, b.sx, &counted);
                saved[N + 1 + i] = li;
                if (!GRAD && a.reduction == DLT_REDUCTION_NONE) loss[i] = li;
            }
            row_lse[par] = lse;
        }
    }
    if (!GRAD) return 0.0f;
    __syncthreads(); /* row_lse[par] written, the target's logit read */
    return row_lse[par];
}

/* ce_row_kernel: a block of NT = blockDim.x threads per row (grid-stride over the rows) for
 * 16-bit logits with K % 8 == 0, 16-byte aligned rows and ceil(C / 8) <= CE_ROW_VPT * NT:
 * thread t loads the row's vectors t, t + NT, ... into registers, all at once (up to
 * CE_ROW_VPT 16-byte loads in flight per thread, ~100 KB per SM), and pushes them into its
 * log-sum-exp in that order; the classes after the last full vector follow as scalars. The
 * plain forward runs it as it is (GRAD false); GRAD (ce_fwd_grad) then writes the gradient
 * for dloss = 1 from the registers over the row, so the logits are read from memory once
 * where ce_fwd and ce_bwd read them twice, and the loss and lse are the plain forward's bit
 * for bit (the gradient too: ce_bwd_vec8 is the plain backward's arithmetic). The row loss
 * goes to saved[N + 1 + i] with GRAD (the target's logit is overwritten before
 * ce_reduce_kernel runs), and saved[N] must hold the count of non-ignored rows (mean). */
template <typename T, typename I, bool GRAD>
__global__ void __launch_bounds__(CE_ROW_MAX_THREADS, 1)
    ce_row_kernel(float *__restrict__ loss, float *__restrict__ saved, T *x, const I *__restrict__ tg, int64_t N,
                  int64_t K, CeArgs a) {
    static_assert(sizeof(T) == 2, "16-bit logits");
    constexpr int W = 8, VPT = CE_ROW_VPT;
    __shared__ Lse part[2][32];
    __shared__ float row_lse[2];
    const int t = threadIdx.x, NT = (int)blockDim.x;
    const bool want_sx = a.ls != 0.0f;
    const int64_t nv = a.C / W, cv = (a.C + W - 1) / W, kv = K / W;
    float g = 1.0f; /* dloss = 1 */
    if (GRAD && a.reduction == DLT_REDUCTION_MEAN) g = 1.0f / saved[N];
    const float smooth = a.ls / (float)a.C;
    int par = 0;
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x, par ^= 1) { /* block-uniform */
        T *row = x + i * K;
        const uint4 *vp = (const uint4 *)row;
        uint4 r[VPT];
#pragma unroll
        for (int u = 0; u < VPT; u++) {
            const int c = t + u * NT;
            r[u] = c < cv ? vp[c] : make_uint4(0u, 0u, 0u, 0u);
        }
        Lse acc = {-INFINITY, 0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < VPT; u++) {
            if (t + u * NT < nv) {
                Vec16<T> v;
                v.raw = r[u];
                float f[W];
#pragma unroll
                for (int e = 0; e < W; e++) f[e] = to_f<T>(v.v[e]);
                lse_push<W>(acc, f, want_sx);
            }
        }
        for (int64_t j = nv * W + t; j < a.C; j += NT) {
            const float f[1] = {to_f<T>(row[j])};
            lse_push<1>(acc, f, want_sx);
        }
        const float lse = row_finish<T, I, GRAD>(acc, part, row_lse, par, loss, saved, x, tg, i, N, K, a, want_sx);
        if constexpr (GRAD) {
            const int64_t ti = (int64_t)tg[i];
            const bool zero = ti == a.ignore, bad = !zero && (ti < 0 || ti >= a.C);
            const int tcol = zero || bad ? -1 : (int)ti; /* columns fit an int here (C <= 65536) */
            uint4 *dr = (uint4 *)row;
#pragma unroll
            for (int u = 0; u < VPT; u++) {
                const int c = t + u * NT;
                if (c < cv) dr[c] = ce_bwd_vec8<T, T, int>(r[u], c * W, tcol, zero, bad, g, lse, smooth, a);
            }
            for (int64_t c = cv + t; c < kv; c += NT) dr[c] = make_uint4(0u, 0u, 0u, 0u); /* padding: 0 */
        }
    }
}

/* ce_row_kernel's threads per row for rows of cv vectors: CE_ROW_VPT vectors each, whole
 * warps; 0 where a row needs more than CE_ROW_MAX_THREADS (C > 65536: the other kernels). */
int ce_row_threads(int64_t cv) {
    const int64_t nt = ((cv + CE_ROW_VPT - 1) / CE_ROW_VPT + 31) / 32 * 32;
    return nt <= CE_ROW_MAX_THREADS ? (int)nt : 0;
}

/* ce_smem_kernel: the same rows, arithmetic and order with the row kept in shared memory
 * instead of registers, so that two blocks of 1024 threads fit an SM (32 registers each)
 * and one block's exponentials run while the other's loads are in flight (ce_row_kernel's
 * single block per SM does its phases one after another). Thread t copies its vectors t,
 * t + NT, ... into slots of the same index (cp.async, every one in flight at once) and
 * reads back only those: no barrier guards the slots. Needs ceil(C / 8) * 16 bytes of
 * shared memory per block (Hopper: two GPT-2 rows per SM), sm_80 or later. */
__device__ __forceinline__ void cp_async16_row(uint4 *slot, const uint4 *src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(slot);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(src) : "memory");
#else
    *slot = *src;
#endif
}
__device__ __forceinline__ void cp_async_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

template <typename T, typename I, bool GRAD>
__global__ void __launch_bounds__(CE_ROW_MAX_THREADS, 2)
    ce_smem_kernel(float *__restrict__ loss, float *__restrict__ saved, T *x, const I *__restrict__ tg, int64_t N,
                   int64_t K, CeArgs a) {
    static_assert(sizeof(T) == 2, "16-bit logits");
    constexpr int W = 8;
    extern __shared__ uint4 slots[]; /* the row's vector c in slot c, c < ceil(C / 8) */
    __shared__ Lse part[2][32];
    __shared__ float row_lse[2];
    const int t = threadIdx.x, NT = (int)blockDim.x;
    const bool want_sx = a.ls != 0.0f;
    const int nv = (int)(a.C / W), cv = (int)((a.C + W - 1) / W);
    const int64_t kv = K / W;
    float g = 1.0f;
    if (GRAD && a.reduction == DLT_REDUCTION_MEAN) g = 1.0f / saved[N];
    const float smooth = a.ls / (float)a.C;
    int par = 0;
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x, par ^= 1) {
        T *row = x + i * K;
        const uint4 *vp = (const uint4 *)row;
        for (int c = t; c < cv; c += NT) cp_async16_row(slots + c, vp + c);
        cp_async_all();
        Lse acc = {-INFINITY, 0.0f, 0.0f};
        for (int c = t; c < nv; c += NT) {
            Vec16<T> v;
            v.raw = slots[c];
            float f[W];
#pragma unroll
            for (int e = 0; e < W; e++) f[e] = to_f<T>(v.v[e]);
            lse_push<W>(acc, f, want_sx);
        }
        for (int64_t j = (int64_t)nv * W + t; j < a.C; j += NT) {
            const float f[1] = {to_f<T>(row[j])};
            lse_push<1>(acc, f, want_sx);
        }
        const float lse = row_finish<T, I, GRAD>(acc, part, row_lse, par, loss, saved, x, tg, i, N, K, a, want_sx);
        if constexpr (GRAD) {
            const int64_t ti = (int64_t)tg[i];
            const bool zero = ti == a.ignore, bad = !zero && (ti < 0 || ti >= a.C);
            const int tcol = zero || bad ? -1 : (int)ti;
            uint4 *dr = (uint4 *)row;
            for (int c = t; c < cv; c += NT) dr[c] = ce_bwd_vec8<T, T, int>(slots[c], c * W, tcol, zero, bad, g, lse, smooth, a);
            for (int64_t c = cv + t; c < kv; c += NT) dr[c] = make_uint4(0u, 0u, 0u, 0u);
        }
        /* the next row's copies land in this thread's slots only after its reads above: the
         * stores consumed them */
    }
}

/* dx *= dloss[0], nothing when it is 1 (the whole grid returns at once). */
template <typename T>
__global__ void ce_grad_scale_kernel(T *dx, const float *__restrict__ dloss, int64_t n) {
    const float g = dloss[0];
    if (g == 1.0f) return;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if constexpr (sizeof(T) == 2) {
        if (((uintptr_t)dx & 15) == 0) {
            uint4 *v = (uint4 *)dx;
            const int64_t nv = n / 8;
            for (int64_t k = i; k < nv; k += step) {
                Vec16<T> r;
                r.raw = v[k];
#pragma unroll
                for (int e = 0; e < 8; e++) r.v[e] = from_f<T>(to_f<T>(r.v[e]) * g);
                v[k] = r.raw;
            }
            i += nv * 8;
        }
    }
    for (; i < n; i += step) dx[i] = from_f<T>(to_f<T>(dx[i]) * g);
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
    a.rows_saved = 0;
    return a;
}

/* Which one-pass kernel serves wide rows of 16-bit logits (the plain forward and ce_fwd_grad
 * choose alike, so that both give the same lse bits): kind 0 none (the other kernels), 1
 * ce_row_kernel, 2 ce_smem_kernel; nt threads per block, dyn bytes of shared memory. */
struct RowPlan {
    int kind, nt;
    size_t dyn;
};
template <typename T>
RowPlan row_plan(dlt_ctx *ctx, const CeArgs &a, int64_t N, int64_t K, const T *x) {
    RowPlan p = {0, 0, 0};
    if (sizeof(T) != 2 || K % 8 != 0 || !vec16_ok(N * K, 8, x) || a.C < CE_BLOCK_ROW_MIN) return p;
    const int64_t cv = (a.C + 7) / 8;
    const size_t bytes = (size_t)cv * 16;
    /* shared memory where a block may hold the row (H200, 2026-12-02, GPT-2 16 x 1024 bf16:
     * 1,173 us against ce_row_kernel's 1,221 us, ce_fwd + ce_bwd 1,290 us) */
    if (dlt__cu(ctx)->cc_major >= 8 && bytes <= (size_t)dlt__cu(ctx)->smem_optin) {
        p.kind = 2;
        p.nt = (int)(cv < CE_ROW_MAX_THREADS ? (cv + 31) / 32 * 32 : CE_ROW_MAX_THREADS);
        p.dyn = bytes;
        return p;
    }
    p.nt = ce_row_threads(cv);
    if (p.nt) p.kind = 1;
    return p;
}

/* The plan's kernel over N rows: as many blocks as fit on the GPU at once (the occupancy
 * query and the shared-memory opt-in are host-side, allowed during capture), each taking
 * rows blockIdx, blockIdx + grid, ... */
template <typename T, typename I, bool GRAD>
dlt_status launch_row(dlt_ctx *ctx, float *l, float *sv, T *x, const I *tg, int64_t N, int64_t K, const CeArgs &a,
                      const RowPlan &p, const char *F) {
    if constexpr (sizeof(T) == 2) {
        auto kernel = p.kind == 2 ? ce_smem_kernel<T, I, GRAD> : ce_row_kernel<T, I, GRAD>;
        if (p.dyn > 48 * 1024)
            DLT_CU(ctx, cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p.dyn), F);
        int per_sm = 0;
        DLT_CU(ctx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, p.nt, p.dyn), F);
        int64_t blocks = (int64_t)(dlt__cu(ctx)->sm_count > 0 ? dlt__cu(ctx)->sm_count : 1) * (per_sm > 0 ? per_sm : 1);
        if (blocks > N) blocks = N;
        if (blocks < 1) blocks = 1;
        kernel<<<(unsigned)blocks, p.nt, p.dyn, dlt__stream(ctx)>>>(l, sv, x, tg, N, K, a);
        DLT_CU_LAUNCHED(ctx, F);
    }
    return DLT_OK;
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
        const RowPlan rp = row_plan<T>(ctx, a, N, K, x);
        if (rp.kind) /* a block per row, held on chip (as ce_fwd_grad) */
            DLT_CHECK((launch_row<T, I, false>(ctx, l, sv, (T *)x, tg, N, K, a, rp, "dlt_cross_entropy")));
        else if (a.C >= CE_BLOCK_ROW_MIN) /* a block per row */
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

/* ce_fwd_grad: the count of non-ignored rows, ce_row_kernel<GRAD> (lse, row losses, the
 * gradient over the logits), then the loss from the row losses. */
template <typename T, typename I>
dlt_status launch_fwd_grad(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, dlt_tensor *logits,
                           const dlt_tensor *targets, CeArgs a, int *served) {
    static const char *F = "dlt_cross_entropy";
    const int64_t N = logits->shape[0], K = logits->shape[1];
    T *x = (T *)dlt__data(logits);
    if (N * K <= CE_FUSED_MAX_ELEMS || (a.reduction != DLT_REDUCTION_MEAN && a.reduction != DLT_REDUCTION_SUM))
        return DLT_OK; /* *served stays 0 */
    const RowPlan rp = row_plan<T>(ctx, a, N, K, x);
    if (!rp.kind) return DLT_OK;
    if constexpr (sizeof(T) == 2) {
        cudaStream_t st = dlt__stream(ctx);
        float *l = (float *)dlt__data(loss), *sv = (float *)dlt__data(saved);
        const I *tg = (const I *)dlt__data(targets);
        ce_count_kernel<I><<<1, 1024, 0, st>>>(sv, tg, N, a.ignore);
        DLT_CU_LAUNCHED(ctx, F);
        DLT_CHECK((launch_row<T, I, true>(ctx, l, sv, x, tg, N, K, a, rp, F)));
        a.rows_saved = 1;
        ce_reduce_kernel<T, I><<<1, 1024, 0, st>>>(l, sv, x, tg, N, K, a);
        DLT_CU_LAUNCHED(ctx, F);
        *served = 1;
    }
    return DLT_OK;
}

template <typename T>
dlt_status launch_grad_scale(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dloss) {
    const int64_t n = dx->numel;
    int64_t blocks = grid_for(sizeof(T) == 2 ? (n + 7) / 8 : n, 256);
    const int64_t cap = (int64_t)dlt__cu(ctx)->sm_count * 8; /* most blocks return at once */
    if (cap > 0 && blocks > cap) blocks = cap;
    ce_grad_scale_kernel<T><<<(unsigned)blocks, 256, 0, dlt__stream(ctx)>>>(
        (T *)dlt__data(dx), (const float *)dlt__data(dloss), n);
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

dlt_status dlt__cuda_ce_fwd_grad(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, dlt_tensor *logits,
                                 const dlt_tensor *targets, const dlt_ce_params *p, int *served) {
    *served = 0;
    DLT_CHECK(same_dtype("dlt_cross_entropy", DLT_F32, loss, saved));
    const CeArgs a = ce_args(p);
    if (logits->dtype != DLT_BF16 && logits->dtype != DLT_F16) return DLT_OK;
    if (targets->dtype == DLT_I32) {
        DLT_DISPATCH_FLOAT(logits->dtype, T, return launch_fwd_grad<T, int32_t>(ctx, loss, saved, logits, targets, a, served));
    } else if (targets->dtype == DLT_I64) {
        DLT_DISPATCH_FLOAT(logits->dtype, T, return launch_fwd_grad<T, int64_t>(ctx, loss, saved, logits, targets, a, served));
    }
    return bad_targets(targets, "dlt_cross_entropy");
}

dlt_status dlt__cuda_ce_grad_scale(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dloss) {
    DLT_CHECK(same_dtype("dlt_cross_entropy_backward", DLT_F32, dloss));
    DLT_DISPATCH_FLOAT(dx->dtype, T, return launch_grad_scale<T>(ctx, dx, dloss));
    return DLT_OK;
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
