/*
 * cross_entropy_bwd.cu - the CUDA cross-entropy's backward (the math: cross_entropy.cu),
 * the scaling of a gradient the forward wrote for dloss = 1 (ce_grad_scale), and the
 * accuracy counter.
 *
 * count_correct: argmax per row (first maximum; NaN counts as the maximum, first NaN
 * wins, like torch.argmax) compared with the target, counted per block in shared memory
 * and added to the int64 counter with one integer atomicAdd per block (exact, so the
 * result does not depend on the order).
 */
#include "cross_entropy.cuh"

namespace {

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

/* ce_bwd_kernel's gradient for 16-bit logits and gradients with K % 8 == 0 and 16-byte aligned
 * rows: `group` threads (32..256, a power of two) per row, so the row's target, log-sum-exp
 * and scale are read once, and 8 columns per thread in 16-byte loads and stores, 4 loads in
 * flight (the flat kernel took 4.5 ms for GPT-2's 16384 x 50304 bf16 logits on an H200,
 * ~0.7 TB/s; a 2-D grid of one vector per thread, 25 blocks per row, 1.35 ms). */
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

} // namespace

extern "C" {

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
