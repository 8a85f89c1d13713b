/*
 * batchnorm_fast.cuh - what the two forms of our single-pass channels-last BatchNorm kernels
 * share: the reduction's arguments, the device pieces both use (so that they do the same
 * arithmetic in the same order, and agree bit for bit), and the one-kernel form's entry
 * points. batchnorm_fast.cu has the two-launch form and chooses; batchnorm_one.cu the one
 * kernel per direction.
 */
#ifndef DLT_CUDA_BATCHNORM_FAST_CUH
#define DLT_CUDA_BATCHNORM_FAST_CUH

#include "batchnorm.cuh"

namespace dlt {
namespace bn {

/* ---------------------------------------------------------------------------------------
 * Single-pass channels-last kernels ("fast native")
 *
 * Measured on the H200 (docs/performance.md): cuDNN's BN kernels take 9-10 us each at the
 * sizes of ResNet50 on 32x32 images whatever the size (a persistent kernel on as few as 8
 * blocks), and its backward cannot take the ReLU mask on 9.14, which costs another kernel.
 * Ours, two forms with the same arithmetic (bit-identical results):
 *  - two launches per direction: a reduction whose last block (arrival counter) finishes
 *    the per-channel statistics, and an elementwise pass, both with 16-byte loads;
 *  - one launch ("one kernel"), where every thread's rows are one batch of FAST_UNROLL and
 *    the grid can be co-resident (a cooperative launch guarantees it): each block copies
 *    its rows into shared memory, publishes its partial sums, waits at its tile's arrival
 *    counter until every split has, sums the partials itself (the same fixed order as the
 *    last block of the two-launch form) and applies the result to the values it holds. No
 *    second launch, no second read of the tensor; at ResNet50-on-CIFAR sizes every BN but
 *    the stem's (batch 256) is one kernel.
 * The ReLU mask of the backward is applied in the sums and the output. Deterministic: a
 * fixed row partition per shape, the final sum in split order in double, no float atomics.
 *
 * Layout of a reduction: a tile is TG channel groups of V = 16/sizeof(T) channels (64
 * channels for 16-bit types); block = TG groups x RB = FAST_THREADS/TG rows; grid = (tiles, S)
 * with S row splits. Scratch: part [S][2][C] floats, then coef [4][C] for the elementwise
 * pass (forward: mean, gamma*invstd, beta; backward: mean, a, b, k with
 * dx = d*a + (x-mean)*b + k).
 * ------------------------------------------------------------------------------------- */
constexpr int FAST_THREADS = 512;
constexpr int FAST_WARPS = FAST_THREADS / 32;
/* Row splits per channel tile. 256 (the stem's BN at batch 256 then one cooperative grid,
 * the largest BNs over more blocks) measured the same as 64 on the H200 at batch 64-1024,
 * within 0.4% either way, and 1% slower with 16 finisher loads in flight (docs/
 * performance.md, twelfth session): 64 stays. */
constexpr int FAST_MAX_SPLITS = 64;
constexpr int FAST_FIN_LOADS = 8; /* partials a finishing thread has in flight */
constexpr int FAST_UNROLL = 4; /* rows loaded before they are summed: loads in flight */
constexpr int FAST_W_MAX = 64; /* channels per tile: TG <= 8 groups of V <= 8 */

struct FastRed {
    const void *x, *dy, *y; /* dy, y: backward (y: post-ReLU output for the mask, or NULL) */
    const float *mean;      /* backward: saved mean (the shift of the sums) */
    const float *invstd;    /* backward: saved inverse std */
    const float *gamma, *beta;
    float *part, *coef;
    /* two-launch form: [tiles] arrivals; one kernel: [tiles] arrivals, then [tiles]
     * departures; zero on entry and on exit */
    int *counter;
    float *save_mean, *save_invstd, *rm, *rv; /* forward outputs (any may be NULL) */
    float *dgamma, *dbeta;                    /* backward outputs (any may be NULL) */
    int beta_acc;
    int64_t M;
    int32_t C, G, TG, S;
    double eps, momentum;
};

/* What a finishing thread reads for its channel, loaded early so that it is not one more
 * round trip at the end of the chain (at the start in the two-launch reduction; after the
 * wait, beside the partials' loads, in the one-kernel form, whose registers are short). */
struct FinIn {
    float g, b, shift;   /* forward: gamma, beta, the shift of the sums (x at row 0) */
    float is, m, dg, db; /* backward: saved invstd and mean, dgamma/dbeta so far (beta_acc) */
};

/* `publisher`: the block that will write dgamma/dbeta reads their values so far (another
 * block of the one-kernel form might read them after the publisher wrote) */
template <typename T, int MODE>
__device__ __forceinline__ FinIn fin_load(const FastRed &a, int c, bool publisher) {
    FinIn f = {1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (a.gamma) f.g = a.gamma[c];
    if (MODE == RED_STATS) {
        if (a.beta) f.b = a.beta[c];
        f.shift = to_f<T>(reinterpret_cast<const T *>(a.x)[c]);
    } else {
        f.is = a.invstd[c];
        f.m = a.mean[c];
        if (publisher && a.beta_acc && a.dgamma) f.dg = a.dgamma[c];
        if (publisher && a.beta_acc && a.dbeta) f.db = a.dbeta[c];
    }
    return f;
}

/* Channel c's totals (t1, t2) -> its four coefficients; `publish`: also writes the saved
 * statistics and running statistics (forward) or dgamma/dbeta (backward). */
template <int MODE>
__device__ __forceinline__ void fin_channel(const FastRed &a, int c, const FinIn &f, double t1, double t2,
                                            bool publish, float cf[4]) {
    const double n = (double)a.M;
    if (MODE == RED_STATS) {
        double mean, var;
        stats_from_shifted(t1, t2, n, (double)f.shift, mean, var);
        const float is = (float)(1.0 / sqrt(var + a.eps));
        if (publish) {
            if (a.save_mean) a.save_mean[c] = (float)mean;
            if (a.save_invstd) a.save_invstd[c] = is;
            running_update(a.rm, a.rv, c, mean, var, a.M, a.momentum);
        }
        cf[0] = (float)mean;
        cf[1] = f.g * is;
        cf[2] = f.b;
        cf[3] = 0.0f;
    } else {
        const double is = (double)f.is, g = (double)f.g;
        if (publish) {
            if (a.dgamma) a.dgamma[c] = (float)fma(t2, is, (double)f.dg);
            if (a.dbeta) a.dbeta[c] = (float)((double)f.db + t1);
        }
        const double md = t1 / n, mdx = t2 / n;
        cf[0] = f.m;
        cf[1] = (float)(is * g);
        cf[2] = (float)(-is * is * is * g * mdx);
        cf[3] = (float)(-md * is * g);
    }
}

/* This thread's sums -> the block's: the rows of a warp (lanes tg + TG*j hold the same
 * channels) by shuffles, then the warps through sh. Thread t < 2W returns the block sum of
 * column (which = t / W, channel c_tile + t % W); the others return 0. */
template <int V>
__device__ __forceinline__ float block_sums(float (&s1)[V], float (&s2)[V], float *sh, int TG, int W) {
    for (int o = TG; o < 32; o <<= 1) {
#pragma unroll
        for (int k = 0; k < V; k++) {
            s1[k] += __shfl_xor_sync(0xffffffffu, s1[k], o);
            s2[k] += __shfl_xor_sync(0xffffffffu, s2[k], o);
        }
    }
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    if (lane < TG) {
#pragma unroll
        for (int k = 0; k < V; k++) {
            sh[warp * W + lane * V + k] = s1[k];
            sh[(FAST_WARPS + warp) * W + lane * V + k] = s2[k];
        }
    }
    __syncthreads();
    float block_sum = 0.0f;
    if ((int)threadIdx.x < 2 * W) {
        const int which = (int)threadIdx.x / W, col = (int)threadIdx.x % W;
#pragma unroll
        for (int w = 0; w < FAST_WARPS; w++) block_sum += sh[(which * FAST_WARPS + w) * W + col];
    }
    return block_sum;
}

/* With several splits: publishes this block's partials (thread t < 2W) where the tile's
 * other blocks will read them. */
__device__ __forceinline__ void publish_partial(const FastRed &a, float block_sum, int W, int c_tile) {
    if (a.S > 1 && (int)threadIdx.x < 2 * W) {
        const int which = (int)threadIdx.x / W, col = (int)threadIdx.x % W;
        if (c_tile + col < a.C) {
            a.part[((int64_t)blockIdx.y * 2 + which) * a.C + c_tile + col] = block_sum;
            __threadfence(); /* visible device-wide before the arrival is counted */
        }
    }
}

/* The tile's totals, once every split's partial is visible (or from block_sum alone with one
 * split): 2W (which, col) pairs x lanes threads sum the splits FAST_FIN_LOADS loads at a
 * time, in split order (thread ln: splits ln, ln + lanes, ...), in double; finishing thread
 * t < W gets channel c_tile + t's t1, t2. Both forms run this, so they agree bit for bit.
 * Uses sh (after a barrier). */
__device__ __forceinline__ void tile_totals(const FastRed &a, float block_sum, float *sh, int W, int c_tile,
                                            bool finisher, double &t1, double &t2) {
    const int pairs = 2 * W, lanes = a.S > 1 ? FAST_THREADS / pairs : 1;
    double acc = 0.0;
    if (a.S > 1) {
        const int p = (int)threadIdx.x % pairs, ln = (int)threadIdx.x / pairs;
        const int which = p / W, c = c_tile + p % W;
        if (c < a.C)
            for (int s0 = ln; s0 < a.S; s0 += FAST_FIN_LOADS * lanes) {
                float v[FAST_FIN_LOADS];
#pragma unroll
                for (int u = 0; u < FAST_FIN_LOADS; u++) {
                    const int sp = s0 + u * lanes;
                    v[u] = sp < a.S ? __ldcg(&a.part[((int64_t)sp * 2 + which) * a.C + c]) : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < FAST_FIN_LOADS; u++) acc += (double)v[u];
            }
    } else {
        acc = (double)block_sum; /* one split: this block has every row */
    }
    __syncthreads(); /* sh is free: the block sums have been read */
    double *shd = reinterpret_cast<double *>(sh); /* FAST_THREADS doubles fit in sh */
    shd[threadIdx.x] = acc;
    __syncthreads();
    t1 = t2 = 0.0;
    if (finisher) {
        const int col = (int)threadIdx.x;
        for (int l = 0; l < lanes; l++) {
            t1 += shd[l * pairs + col];
            t2 += shd[l * pairs + W + col];
        }
    }
}

/* V consecutive per-channel floats (16-byte aligned: C and c0 are multiples of V >= 4) */
template <int V> __device__ __forceinline__ void load_chan(float *dst, const float *src) {
#pragma unroll
    for (int k = 0; k < V; k += 4) {
        const float4 v = *reinterpret_cast<const float4 *>(src + k);
        dst[k] = v.x;
        dst[k + 1] = v.y;
        dst[k + 2] = v.z;
        dst[k + 3] = v.w;
    }
}

/* The elementwise outputs, shared by both forms. The multiply-adds are written as fused
 * ones so that the compiler cannot contract them differently in the two kernels (f32
 * results would then differ in the last bit). y = relu((x - m)*sc + sh [+ res]) */
template <typename T>
__device__ __forceinline__ Vec16<T> fwd_out(const Vec16<T> &xv, const Vec16<T> &rv, bool has_res,
                                            const float *m, const float *sc, const float *sh, int relu) {
    constexpr int V = Vec16<T>::N;
    Vec16<T> out;
#pragma unroll
    for (int k = 0; k < V; k++) {
        float v = __fmaf_rn(to_f<T>(xv.v[k]) - m[k], sc[k], sh[k]);
        if (has_res) v += to_f<T>(rv.v[k]);
        if (relu) v = relu_f(v);
        out.v[k] = from_f<T>(v);
    }
    return out;
}

/* dx = d*a + ((x - m)*b + k), d the masked dy */
template <typename T>
__device__ __forceinline__ Vec16<T> bwd_out(const Vec16<T> &d, const Vec16<T> &xv, const float *m,
                                            const float *ca, const float *cb, const float *ck) {
    constexpr int V = Vec16<T>::N;
    Vec16<T> out;
#pragma unroll
    for (int k = 0; k < V; k++)
        out.v[k] = from_f<T>(__fmaf_rn(to_f<T>(d.v[k]), ca[k], __fmaf_rn(to_f<T>(xv.v[k]) - m[k], cb[k], ck[k])));
    return out;
}

/* dy masked by the ReLU (y <= 0: 0; NaN in y passes dy) */
template <typename T> __device__ __forceinline__ Vec16<T> masked(const Vec16<T> &dv, const Vec16<T> &yv) {
    constexpr int V = Vec16<T>::N;
    Vec16<T> d;
#pragma unroll
    for (int k = 0; k < V; k++) d.v[k] = to_f<T>(yv.v[k]) <= 0.0f ? from_f<T>(0.0f) : dv.v[k];
    return d;
}

/* this thread's rows' sums: forward x - ref, (x - ref)^2; backward d, d*(x - ref) */
template <typename T, int MODE>
__device__ __forceinline__ void add_row(float *s1, float *s2, const float *ref, const Vec16<T> &xv,
                                        const Vec16<T> &d) {
    constexpr int V = Vec16<T>::N;
#pragma unroll
    for (int k = 0; k < V; k++) {
        if (MODE == RED_STATS) {
            const float v = to_f<T>(xv.v[k]) - ref[k];
            s1[k] += v;
            s2[k] = __fmaf_rn(v, v, s2[k]);
        } else {
            const float dk = to_f<T>(d.v[k]);
            s1[k] += dk;
            s2[k] = __fmaf_rn(dk, to_f<T>(xv.v[k]) - ref[k], s2[k]);
        }
    }
}

/* the shift of the sums for channel group cg: forward row 0's x, backward the saved mean */
template <typename T, int MODE>
__device__ __forceinline__ void load_ref(float *ref, const FastRed &a, int cg) {
    constexpr int V = Vec16<T>::N;
    if (MODE == RED_STATS) {
        Vec16<T> r0;
        r0.raw = reinterpret_cast<const uint4 *>(a.x)[cg];
#pragma unroll
        for (int k = 0; k < V; k++) ref[k] = to_f<T>(r0.v[k]);
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) ref[k] = a.mean[cg * V + k];
    }
}

/* ---- batchnorm_one.cu: one kernel per direction ---- */
/* Whether this BN runs as one kernel: DLT_BN_ONE_KERNEL on, one batch of rows per thread,
 * and the grid co-resident on the device (asked once per context and instantiation; not
 * asked under DLT_BN_ONE_KERNEL=2, which tests the fallback from a refused launch). */
dlt_status one_kernel_wanted(dlt_ctx *ctx, const FastGeo &f, int32_t dtype, int mode, int *want);
/* a (filled as for the two-launch form, with 2 x tiles counters): y = relu(bn(x) + res).
 * *ran = 0: the runtime refused the cooperative grid (nothing ran; this context's BNs of
 * the dtype and direction take two launches from then on); the caller runs two launches. */
dlt_status one_fwd(dlt_ctx *ctx, const FastGeo &f, const FastRed &a, int32_t dtype, void *y, const void *res,
                   int relu, int *ran);
/* dx, and dres = the masked dy where not NULL; *ran as for one_fwd */
dlt_status one_bwd(dlt_ctx *ctx, const FastGeo &f, const FastRed &a, int32_t dtype, void *dx, void *dres,
                   int *ran);

} // namespace bn
} // namespace dlt

#endif
