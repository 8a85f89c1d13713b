/*
 * cross_entropy.cu - CUDA cross-entropy (log-softmax + NLL, PyTorch's F.cross_entropy
 * without class weights): the forward, and the forward that also writes the gradient
 * (ce_fwd_grad). The backward and the accuracy counter: cross_entropy_bwd.cu.
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
 * (ce_smem_kernel, in shared memory, where a block may have ceil(C/8) * 16 bytes on sm_80
 * or later; elsewhere the kernels below). ce_fwd_grad, for a loss whose logits the
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
 */
#include "cross_entropy.cuh"

namespace {

/* Problems up to this many logits run the fused single-block forward. */
#define CE_FUSED_MAX_ELEMS ((int64_t)1 << 16)
/* Rows of at least this many classes take a block each on the grid path (narrower: a warp). */
#define CE_BLOCK_ROW_MIN 4096
/* ce_smem_kernel's threads per block at most, and the blocks an SM should fit (two where an
 * SM runs 2048 threads: 32 registers each; sm_75's 1024 and sm_86/89/120's 1536 fit one) */
#define CE_ROW_THREADS 1024
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000)
#define CE_ROW_MIN_BLOCKS 2
#else
#define CE_ROW_MIN_BLOCKS 1
#endif

/* Online log-sum-exp of a stream of values: m the largest so far, s = sum exp(v - m), sx =
 * sum v (label smoothing). One pass over the row (the two-pass max-then-sum read GPT-2's
 * 1.65 GB of logits twice: 1,049 us on an H200). m never becomes NaN (fmaxf skips it); a
 * NaN value reaches s through exp and makes lse NaN, as does +inf (exp(inf - inf)). */
struct Lse {
    float m, s, sx;
};

/* exp's reference point: 0 while every value so far is -inf (exp(-inf - -inf) would be NaN) */
__device__ __forceinline__ float lse_ref(float m) { return m == -INFINITY ? 0.0f : m; }

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

/* ce_smem_kernel: the one-pass kernel, a block of NT = blockDim.x threads per row
 * (grid-stride over the rows) for 16-bit logits with K % 8 == 0 and 16-byte aligned rows,
 * the row kept in ceil(C / 8) * 16 bytes of shared memory (Hopper: two GPT-2 rows per SM,
 * two blocks of 1024 threads at 32 registers each, so one block's exponentials run while
 * the other's loads are in flight). Thread t copies the row's vectors t, t + NT, ... into
 * slots of the same index (cp.async, every one in flight at once) and reads back only those:
 * no barrier guards the slots. It pushes them into its log-sum-exp in that order, the
 * classes after the last full vector following as scalars; the warps' results merge in a
 * butterfly over warp 0 (a fixed order). The plain forward runs it as it is (GRAD false);
 * GRAD (ce_fwd_grad) then writes the gradient for dloss = 1 from the slots over the row, so
 * the logits are read from memory once where ce_fwd and ce_bwd read them twice, and the loss
 * and lse are the plain forward's bit for bit (the gradient too: ce_bwd_vec8 is the plain
 * backward's arithmetic). The row loss goes to saved[N + 1 + i] with GRAD (the target's
 * logit is overwritten before ce_reduce_kernel runs), and saved[N] must hold the count of
 * non-ignored rows (mean). sm_80 or later (the host checks; older GPUs compile a copy
 * through registers). */
template <typename T, typename I, bool GRAD>
__global__ void __launch_bounds__(CE_ROW_THREADS, CE_ROW_MIN_BLOCKS)
    ce_smem_kernel(float *__restrict__ loss, float *__restrict__ saved, T *x, const I *__restrict__ tg, int64_t N,
                   int64_t K, CeArgs a) {
    static_assert(sizeof(T) == 2, "16-bit logits");
    constexpr int W = 8;
    extern __shared__ uint4 slots[]; /* the row's vector c in slot c, c < ceil(C / 8) */
    __shared__ Lse part[2][32]; /* by row parity */
    __shared__ float row_lse[2];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = (int)blockDim.x >> 5, NT = (int)blockDim.x;
    const bool want_sx = a.ls != 0.0f;
    const bool row_losses = GRAD || want_sx || a.reduction == DLT_REDUCTION_NONE;
    const int nv = (int)(a.C / W), cv = (int)((a.C + W - 1) / W);
    const int64_t kv = K / W;
    float g = 1.0f;
    if (GRAD && a.reduction == DLT_REDUCTION_MEAN) g = 1.0f / saved[N];
    const float smooth = a.ls / (float)a.C;
    int par = 0;
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x, par ^= 1) {
        T *row = x + i * K;
        const uint4 *vp = (const uint4 *)row;
        /* the slots' previous values were read into the last row's stores (program order),
         * and no compiler reordering moves those reads past the copies */
        asm volatile("" ::: "memory");
        for (int c = t; c < cv; c += NT) cp_async16(slots + c, vp + c, true);
        cp_async_commit();
        cp_async_wait<0>();
        asm volatile("" ::: "memory"); /* the slots are read after the wait */
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
        lse_warp(acc, want_sx);
        if (lane == 0) part[par][warp] = acc;
        /* A warp writes part[par] again two rows on, after the next row's barrier, which warp
         * 0 reaches only once it has read this row's parts: one barrier per row suffices. */
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
        if constexpr (GRAD) {
            __syncthreads(); /* row_lse[par] written, the target's logit read */
            const float lse = row_lse[par];
            const int64_t ti = (int64_t)tg[i];
            const bool zero = ti == a.ignore, bad = !zero && (ti < 0 || ti >= a.C);
            const int tcol = zero || bad ? -1 : (int)ti;
            uint4 *dr = (uint4 *)row;
            for (int c = t; c < cv; c += NT) dr[c] = ce_bwd_vec8<T, T, int>(slots[c], c * W, tcol, zero, bad, g, lse, smooth, a);
            for (int64_t c = cv + t; c < kv; c += NT) dr[c] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

/* The one-pass kernel's launch for wide rows of 16-bit logits (the plain forward and
 * ce_fwd_grad choose alike, so that both give the same lse bits): threads per block (0: the
 * other kernels serve) and bytes of shared memory. */
struct RowPlan {
    int nt;
    size_t dyn;
};
template <typename T>
RowPlan row_plan(dlt_ctx *ctx, const CeArgs &a, int64_t N, int64_t K, const T *x) {
    RowPlan p = {0, 0};
    if (sizeof(T) != 2 || K % 8 != 0 || !vec16_ok(N * K, 8, x) || a.C < CE_BLOCK_ROW_MIN) return p;
    const int64_t cv = (a.C + 7) / 8;
    const size_t bytes = (size_t)cv * 16;
    /* where a block may hold the row (H200, GPT-2 16 x 1024 bf16: 921 us, ce_fwd + ce_bwd
     * 1,290; a version holding the row in registers, one block per SM, took 1,221) */
    if (dlt__cu(ctx)->cc_major < 8 || bytes > (size_t)dlt__cu(ctx)->smem_optin) return p;
    p.nt = (int)(cv < CE_ROW_THREADS ? (cv + 31) / 32 * 32 : CE_ROW_THREADS);
    p.dyn = bytes;
    return p;
}

/* ce_smem_kernel over N rows: as many blocks as fit on the GPU at once (the occupancy query
 * and the shared-memory opt-in are host-side, allowed during capture), each taking rows
 * blockIdx, blockIdx + grid, ... */
template <typename T, typename I, bool GRAD>
dlt_status launch_row(dlt_ctx *ctx, float *l, float *sv, T *x, const I *tg, int64_t N, int64_t K, const CeArgs &a,
                      const RowPlan &p, const char *F) {
    if constexpr (sizeof(T) == 2) {
        auto kernel = ce_smem_kernel<T, I, GRAD>;
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
        if (rp.nt) /* a block per row, held on chip (as ce_fwd_grad) */
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

/* ce_fwd_grad: the count of non-ignored rows, ce_smem_kernel<GRAD> (lse, row losses, the
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
    if (!rp.nt) return DLT_OK;
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

} // extern "C"
