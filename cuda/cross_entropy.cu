/*
 * cross_entropy.cu - CUDA cross-entropy (log-softmax + NLL, PyTorch's F.cross_entropy
 * without class weights) forward and backward, and the accuracy counter.
 *
 * logits [N,K] row-major in any float dtype, of which the first C = n_classes columns are
 * classes (the rest: vocabulary padding, no probability, zero gradient); targets [N] int32
 * or int64; label smoothing ls (dlt_ce_params). Math in fp32, never materialised:
 *   lse_i  = max_i + log(sum_j<C exp(x_ij - max_i))    (max-subtracted, one warp per row)
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

__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

struct CeArgs {
    int64_t ignore;
    int64_t C;     /* classes: the first C columns */
    float ls;      /* label smoothing */
    int reduction; /* DLT_REDUCTION_* */
};

/* log-sum-exp of one row's first C values, computed by a whole warp; every lane gets the
 * result, and *sum the sum of the values when asked (label smoothing). */
template <typename T>
__device__ __forceinline__ float row_lse(const T *__restrict__ row, int64_t C, int lane, float *sum) {
    float m = -INFINITY, sx = 0.0f;
    for (int64_t j = lane; j < C; j += 32) {
        const float v = to_f<T>(row[j]);
        m = nan_max(m, v);
        if (sum) sx += v;
    }
    m = warp_max(m);
    float s = 0.0f;
    for (int64_t j = lane; j < C; j += 32) s += expf(to_f<T>(row[j]) - m);
    s = warp_sum(s);
    if (sum) *sum = warp_sum(sx);
    return m + logf(s);
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
        float sx = 0.0f;
        const float lse = row_lse<T>(x + i * K, a.C, lane, a.ls != 0.0f ? &sx : nullptr);
        if (lane == 0) {
            int counted;
            saved[i] = lse;
            const float li = row_loss<T, I>(x, tg, i, K, a, lse, sx, &counted);
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

/* Grid: one warp per row (grid-stride): lse, and the row loss where the reduction needs it
 * stored (smoothing, or reduction none). */
template <typename T, typename I>
__global__ void ce_lse_kernel(float *__restrict__ loss, float *__restrict__ saved, const T *__restrict__ x,
                              const I *__restrict__ tg, int64_t N, int64_t K, CeArgs a) {
    const int lane = threadIdx.x & 31;
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const bool row_losses = a.ls != 0.0f || a.reduction == DLT_REDUCTION_NONE;
    for (int64_t i = first; i < N; i += step) {
        float sx = 0.0f;
        const float lse = row_lse<T>(x + i * K, a.C, lane, a.ls != 0.0f ? &sx : nullptr);
        if (lane == 0) {
            saved[i] = lse;
            if (row_losses) {
                int counted;
                const float li = row_loss<T, I>(x, tg, i, K, a, lse, sx, &counted);
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
 * rows: a row per grid row (its target, log-sum-exp and scale read once), 8 columns per
 * thread in one 16-byte load and store (the flat kernel took 4.5 ms for GPT-2's 16384 x
 * 50304 bf16 logits on an H200, ~0.7 TB/s). */
template <typename T, typename D, typename I>
__global__ void ce_bwd_vec_kernel(D *dx, const T *x, const I *__restrict__ tg, /* dx may be x (in place) */
                                  const float *__restrict__ saved, const float *__restrict__ dloss, int64_t N,
                                  int64_t K, CeArgs a) {
    static_assert(sizeof(T) == 2 && sizeof(D) == 2, "16-bit logits and gradients");
    float g0 = a.reduction == DLT_REDUCTION_NONE ? 0.0f : dloss[0];
    if (a.reduction == DLT_REDUCTION_MEAN) g0 /= saved[N];
    const float smooth = a.ls / (float)a.C;
    const int64_t kv = K / 8;
    for (int64_t i = blockIdx.y; i < N; i += gridDim.y) {
        const int64_t t = (int64_t)tg[i];
        const bool zero = t == a.ignore, bad = !zero && (t < 0 || t >= a.C);
        const float g = a.reduction == DLT_REDUCTION_NONE ? dloss[i] : g0, lse = saved[i];
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < kv; c += (int64_t)gridDim.x * blockDim.x) {
            Vec16<T> in;
            Vec16<D> out;
            in.raw = ((const uint4 *)(x + i * K))[c];
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const int64_t j = c * 8 + e;
                float o;
                if (zero || j >= a.C) o = 0.0f;
                else if (bad) o = NAN;
                else o = g * (expf(to_f<T>(in.v[e]) - lse) - ((j == t ? 1.0f - a.ls : 0.0f) + smooth));
                out.v[e] = from_f<D>(o);
            }
            ((uint4 *)(dx + i * K))[c] = out.raw;
        }
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
        ce_lse_kernel<T, I><<<grid_for(N * 32, 256), 256, 0, st>>>(l, sv, x, tg, N, K, a);
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
            const int64_t bx = (K / 8 + 255) / 256;
            const dim3 grid((unsigned)(bx < 65535 ? bx : 65535), (unsigned)(N < 65535 ? N : 65535));
            if (N > 0 && K > 0) ce_bwd_vec_kernel<T, D, I><<<grid, 256, 0, st>>>(dx, x, tg, sv, dl, N, K, a);
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
