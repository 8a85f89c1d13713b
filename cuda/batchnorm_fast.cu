/*
 * batchnorm_fast.cu - single-pass channels-last BatchNorm2d kernels ("fast native"): two
 * launches per direction with the ReLU mask fused into the backward, for the sizes where
 * cuDNN's kernels cost more than the work (batchnorm.cu chooses).
 */
#include <string.h>

#include "batchnorm.cuh"

using namespace dlt;
using namespace dlt::bn;

namespace {

/* ---------------------------------------------------------------------------------------
 * Single-pass channels-last kernels ("fast native")
 *
 * Measured on the H200 (docs/performance.md): cuDNN's BN kernels take 9-10 us each at the
 * sizes of ResNet50 on 32x32 images whatever the size (a persistent kernel on as few as 8
 * blocks), and its backward cannot take the ReLU mask on 9.14, which costs another kernel.
 * These take two launches per direction: a reduction whose last block (arrival counter)
 * finishes the per-channel statistics, and an elementwise pass, both with 16-byte loads;
 * the ReLU mask of the backward is applied in both. Deterministic: a fixed row partition
 * per shape, the final sum in split order in double, no float atomics.
 *
 * Layout of a reduction: a tile is TG channel groups of V = 16/sizeof(T) channels (64
 * channels for 16-bit types); block = TG groups x RB = FAST_THREADS/TG rows; grid = (tiles, S)
 * with S row splits. Scratch: part [S][2][C] floats, then coef [4][C] for the elementwise
 * pass (forward: mean, gamma*invstd, beta; backward: mean, a, b, k with
 * dx = d*a + (x-mean)*b + k).
 * ------------------------------------------------------------------------------------- */
constexpr int FAST_THREADS = 512;
constexpr int FAST_WARPS = FAST_THREADS / 32;
constexpr int FAST_MAX_SPLITS = 64;
constexpr int FAST_UNROLL = 4; /* rows loaded before they are summed: loads in flight */

struct FastRed {
    const void *x, *dy, *y; /* dy, y: backward (y: post-ReLU output for the mask, or NULL) */
    const float *mean;      /* backward: saved mean (the shift of the sums) */
    const float *invstd;    /* backward: saved inverse std */
    const float *gamma, *beta;
    float *part, *coef;
    int *counter; /* [tiles], zero on entry and on exit */
    float *save_mean, *save_invstd, *rm, *rv; /* forward outputs (any may be NULL) */
    float *dgamma, *dbeta;                    /* backward outputs (any may be NULL) */
    int beta_acc;
    int64_t M;
    int32_t C, G, TG, S;
    double eps, momentum;
};

/* The latency chain of a reduction (load, block sum, publish, count, final sum) is what
 * costs at these sizes, so every step keeps many loads in flight: FAST_UNROLL rows per
 * thread before summing, warp shuffles across the rows of a warp, and the last block reads
 * its partials eight at a time. */
template <typename T, int MODE> __global__ void __launch_bounds__(FAST_THREADS) bn_fast_reduce(FastRed a) {
    constexpr int V = Vec16<T>::N;
    __shared__ __align__(16) float sh[2 * FAST_WARPS * 64]; /* [2][warps][W]; later doubles */
    __shared__ int is_last;
    const int TG = a.TG, RB = FAST_THREADS / TG, W = TG * V;
    const int tg = (int)threadIdx.x % TG, ry = (int)threadIdx.x / TG;
    const int cg = (int)blockIdx.x * TG + tg;
    const int c_tile = (int)blockIdx.x * W;
    /* what the finish reads per channel, loaded now so that it is not one more round trip
     * at the end of the chain (threads t < W finish channel c_tile + t) */
    const int c_fin = c_tile + (int)threadIdx.x;
    const bool finisher = (int)threadIdx.x < W && c_fin < a.C;
    float fin_g = 1.0f, fin_b = 0.0f, fin_is = 0.0f, fin_m = 0.0f, fin_dg = 0.0f, fin_db = 0.0f, fin_shift = 0.0f;
    if (finisher) {
        if (a.gamma) fin_g = a.gamma[c_fin];
        if (MODE == RED_STATS) {
            if (a.beta) fin_b = a.beta[c_fin];
            fin_shift = to_f<T>(reinterpret_cast<const T *>(a.x)[c_fin]);
        } else {
            fin_is = a.invstd[c_fin];
            fin_m = a.mean[c_fin];
            if (a.beta_acc && a.dgamma) fin_dg = a.dgamma[c_fin];
            if (a.beta_acc && a.dbeta) fin_db = a.dbeta[c_fin];
        }
    }
    float s1[V], s2[V], ref[V];
#pragma unroll
    for (int k = 0; k < V; k++) s1[k] = s2[k] = ref[k] = 0.0f;
    if (cg < a.G) {
        if (MODE == RED_STATS) {
            Vec16<T> r0;
            r0.raw = reinterpret_cast<const uint4 *>(a.x)[cg]; /* row 0: the shift */
#pragma unroll
            for (int k = 0; k < V; k++) ref[k] = to_f<T>(r0.v[k]);
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) ref[k] = a.mean[cg * V + k];
        }
        const int64_t step = (int64_t)a.S * RB;
        for (int64_t r = (int64_t)blockIdx.y * RB + ry; r < a.M; r += FAST_UNROLL * step) {
            Vec16<T> xv[FAST_UNROLL], dv[FAST_UNROLL], yv[FAST_UNROLL];
#pragma unroll
            for (int u = 0; u < FAST_UNROLL; u++) {
                const int64_t rr = r + u * step;
                if (rr < a.M) {
                    const int64_t vi = rr * a.G + cg;
                    xv[u].raw = reinterpret_cast<const uint4 *>(a.x)[vi];
                    if (MODE == RED_BWD) {
                        dv[u].raw = reinterpret_cast<const uint4 *>(a.dy)[vi];
                        if (a.y) yv[u].raw = reinterpret_cast<const uint4 *>(a.y)[vi];
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < FAST_UNROLL; u++) {
                if (r + u * step >= a.M) break;
#pragma unroll
                for (int k = 0; k < V; k++) {
                    if (MODE == RED_STATS) {
                        const float v = to_f<T>(xv[u].v[k]) - ref[k];
                        s1[k] += v;
                        s2[k] += v * v;
                    } else {
                        const float d = (a.y && to_f<T>(yv[u].v[k]) <= 0.0f) ? 0.0f : to_f<T>(dv[u].v[k]);
                        s1[k] += d;
                        s2[k] += d * (to_f<T>(xv[u].v[k]) - ref[k]);
                    }
                }
            }
        }
    }
    /* the rows of a warp: lanes tg + TG*j hold the same channels */
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
    /* block partials: thread t < 2W sums one column (which = t / W) over the warps */
    float block_sum = 0.0f;
    if ((int)threadIdx.x < 2 * W) {
        const int which = (int)threadIdx.x / W, col = (int)threadIdx.x % W;
#pragma unroll
        for (int w = 0; w < FAST_WARPS; w++) block_sum += sh[(which * FAST_WARPS + w) * W + col];
        if (a.S > 1 && c_tile + col < a.C) {
            a.part[((int64_t)blockIdx.y * 2 + which) * a.C + c_tile + col] = block_sum;
            __threadfence(); /* visible device-wide before the arrival is counted */
        }
    }
    const int pairs = 2 * W, lanes = a.S > 1 ? FAST_THREADS / pairs : 1;
    double acc = 0.0;
    if (a.S > 1) {
        __syncthreads();
        if (threadIdx.x == 0) is_last = atomicAdd(&a.counter[blockIdx.x], 1) == a.S - 1;
        __syncthreads();
        if (!is_last) return;
        __threadfence();
        /* last block of the tile: sums over the S splits, 2W (which, col) pairs x lanes */
        const int p = (int)threadIdx.x % pairs, ln = (int)threadIdx.x / pairs;
        const int which = p / W, c = c_tile + p % W;
        if (c < a.C)
            for (int s0 = ln; s0 < a.S; s0 += 8 * lanes) {
                float v[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    const int sp = s0 + u * lanes;
                    v[u] = sp < a.S ? __ldcg(&a.part[((int64_t)sp * 2 + which) * a.C + c]) : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < 8; u++) acc += (double)v[u];
            }
    } else {
        acc = (double)block_sum; /* one split: this block has every row (no counter) */
    }
    __syncthreads(); /* sh is free: the block sums above have been read */
    double *shd = reinterpret_cast<double *>(sh); /* FAST_THREADS doubles fit in sh */
    shd[threadIdx.x] = acc;
    __syncthreads();
    if (finisher) {
        const int col = (int)threadIdx.x, c = c_fin;
        double t1 = 0.0, t2 = 0.0;
        for (int l = 0; l < lanes; l++) {
            t1 += shd[l * pairs + col];
            t2 += shd[l * pairs + W + col];
        }
        const double n = (double)a.M;
        if (MODE == RED_STATS) {
            double mean, var;
            stats_from_shifted(t1, t2, n, (double)fin_shift, mean, var);
            const float is = (float)(1.0 / sqrt(var + a.eps));
            if (a.save_mean) a.save_mean[c] = (float)mean;
            if (a.save_invstd) a.save_invstd[c] = is;
            running_update(a.rm, a.rv, c, mean, var, a.M, a.momentum);
            a.coef[c] = (float)mean;
            a.coef[a.C + c] = fin_g * is;
            a.coef[2 * a.C + c] = fin_b;
        } else {
            const double is = (double)fin_is, g = (double)fin_g;
            if (a.dgamma) a.dgamma[c] = (float)((double)fin_dg + t2 * is);
            if (a.dbeta) a.dbeta[c] = (float)((double)fin_db + t1);
            const double md = t1 / n, mdx = t2 / n;
            a.coef[c] = fin_m;
            a.coef[a.C + c] = (float)(is * g);
            a.coef[2 * a.C + c] = (float)(-is * is * is * g * mdx);
            a.coef[3 * a.C + c] = (float)(-md * is * g);
        }
    }
    if (threadIdx.x == 0 && a.S > 1) a.counter[blockIdx.x] = 0; /* ready for the next reduction */
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

template <typename T>
__global__ void bn_fast_apply_fwd(T *y, const T *x, const T *res, const float *coef, int relu, int64_t nv,
                                  int32_t G, int32_t C) {
    constexpr int V = Vec16<T>::N;
    DLT_GRID_STRIDE(i, nv) {
        const int c0 = (int)(i % G) * V;
        float m[V], sc[V], sh[V];
        load_chan<V>(m, coef + c0);
        load_chan<V>(sc, coef + C + c0);
        load_chan<V>(sh, coef + 2 * C + c0);
        Vec16<T> xv, rv, out;
        xv.raw = reinterpret_cast<const uint4 *>(x)[i];
        if (res) rv.raw = reinterpret_cast<const uint4 *>(res)[i];
#pragma unroll
        for (int k = 0; k < V; k++) {
            float v = (to_f<T>(xv.v[k]) - m[k]) * sc[k] + sh[k];
            if (res) v += to_f<T>(rv.v[k]);
            if (relu) v = relu_f(v);
            out.v[k] = from_f<T>(v);
        }
        reinterpret_cast<uint4 *>(y)[i] = out.raw;
    }
}

template <typename T>
__global__ void bn_fast_apply_bwd(T *dx, T *dres, const T *dy, const T *y, const T *x, const float *coef,
                                  int64_t nv, int32_t G, int32_t C) {
    constexpr int V = Vec16<T>::N;
    DLT_GRID_STRIDE(i, nv) {
        const int c0 = (int)(i % G) * V;
        float m[V], ca[V], cb[V], ck[V];
        load_chan<V>(m, coef + c0);
        load_chan<V>(ca, coef + C + c0);
        load_chan<V>(cb, coef + 2 * C + c0);
        load_chan<V>(ck, coef + 3 * C + c0);
        Vec16<T> dv, yv, xv, d, out;
        dv.raw = reinterpret_cast<const uint4 *>(dy)[i];
        if (y) yv.raw = reinterpret_cast<const uint4 *>(y)[i];
        xv.raw = reinterpret_cast<const uint4 *>(x)[i];
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float dk = (y && to_f<T>(yv.v[k]) <= 0.0f) ? 0.0f : to_f<T>(dv.v[k]);
            d.v[k] = y ? from_f<T>(dk) : dv.v[k];
            out.v[k] = from_f<T>(dk * ca[k] + (to_f<T>(xv.v[k]) - m[k]) * cb[k] + ck[k]);
        }
        if (dres) reinterpret_cast<uint4 *>(dres)[i] = d.raw;
        reinterpret_cast<uint4 *>(dx)[i] = out.raw;
    }
}

/* Scratch and counters for one fast reduction. */
dlt_status fast_buffers(dlt_ctx *ctx, const FastGeo &f, int64_t C, FastRed &a) {
    float *scratch = NULL;
    DLT_CHECK(dlt__cuda_scratch(ctx, ((size_t)f.S * 2 + 4) * (size_t)C * sizeof(float), (void **)&scratch));
    DLT_CHECK(dlt__cuda_counters(ctx, (size_t)f.tiles, &a.counter));
    a.part = scratch;
    a.coef = scratch + (int64_t)f.S * 2 * C;
    a.C = (int32_t)C;
    a.G = f.G;
    a.TG = f.TG;
    a.S = f.S;
    return DLT_OK;
}

} // namespace

namespace dlt {
namespace bn {

FastGeo fast_geo(const dlt_tensor *t, const void *p0, const void *p1, const void *p2,
                 const void *p3, const void *p4) {
    FastGeo f;
    memset(&f, 0, sizeof f);
    const Geo g = geo_of(t);
    if (!g.cl || g.M < 1 || g.C < 1 || g.C > (1 << 24)) return f;
    if (t->dtype != DLT_F32 && t->dtype != DLT_F16 && t->dtype != DLT_BF16) return f;
    f.V = 16 / (int32_t)dlt_dtype_size(t->dtype);
    if (g.C % f.V != 0) return f;
    const void *ps[5] = {p0, p1, p2, p3, p4};
    for (int i = 0; i < 5; i++)
        if (((uintptr_t)ps[i] & 15) != 0) return f;
    f.G = (int32_t)(g.C / f.V);
    f.TG = 8;
    while (f.TG > 1 && f.TG > f.G) f.TG >>= 1;
    f.tiles = (f.G + f.TG - 1) / f.TG;
    /* splits: one batch of FAST_UNROLL rows per thread where the cap allows */
    const int64_t RB = FAST_THREADS / f.TG;
    int64_t S = (g.M + RB * FAST_UNROLL - 1) / (RB * FAST_UNROLL);
    if (S > FAST_MAX_SPLITS) S = FAST_MAX_SPLITS;
    if (S < 1) S = 1;
    f.S = (int32_t)S;
    f.ok = 1;
    return f;
}

dlt_status fast_fwd_train(dlt_ctx *ctx, const FastGeo &f, dlt_tensor *y, const dlt_tensor *x,
                          const dlt_tensor *res, int relu, const dlt_tensor *gamma, const dlt_tensor *beta,
                          dlt_tensor *rm, dlt_tensor *rv, dlt_tensor *save_mean, dlt_tensor *save_invstd,
                          double momentum, double eps) {
    const Geo g = geo_of(x);
    FastRed a;
    memset(&a, 0, sizeof a);
    DLT_CHECK(fast_buffers(ctx, f, g.C, a));
    a.x = dlt__data(x);
    a.gamma = fptr(gamma);
    a.beta = fptr(beta);
    a.save_mean = fptr(save_mean);
    a.save_invstd = fptr(save_invstd);
    a.rm = fptr(rm);
    a.rv = fptr(rv);
    a.M = g.M;
    a.eps = eps;
    a.momentum = momentum;
    cudaStream_t st = dlt__stream(ctx);
    const dim3 grid((unsigned)f.tiles, (unsigned)f.S);
    DLT_DISPATCH_FLOAT(x->dtype, T, bn_fast_reduce<T, RED_STATS><<<grid, FAST_THREADS, 0, st>>>(a));
    DLT_CU_LAUNCHED(ctx, F_FWD);
    const int64_t nv = g.numel / f.V;
    DLT_DISPATCH_FLOAT(x->dtype, T,
        bn_fast_apply_fwd<T><<<grid_for(nv, 256), 256, 0, st>>>(
            (T *)dlt__data(y), (const T *)dlt__data(x), res ? (const T *)dlt__data(res) : (const T *)nullptr,
            a.coef, relu ? 1 : 0, nv, f.G, (int32_t)g.C));
    DLT_CU_LAUNCHED(ctx, F_FWD);
    return DLT_OK;
}

dlt_status fast_bwd(dlt_ctx *ctx, const FastGeo &f, dlt_tensor *dx, dlt_tensor *dres, dlt_tensor *dgamma,
                    dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *y,
                    const dlt_tensor *x, const dlt_tensor *gamma, const dlt_tensor *save_mean,
                    const dlt_tensor *save_invstd) {
    const Geo g = geo_of(dy);
    FastRed a;
    memset(&a, 0, sizeof a);
    DLT_CHECK(fast_buffers(ctx, f, g.C, a));
    a.x = dlt__data(x);
    a.dy = dlt__data(dy);
    a.y = y ? dlt__data(y) : NULL;
    a.mean = fptr(save_mean);
    a.invstd = fptr(save_invstd);
    a.gamma = fptr(gamma);
    a.dgamma = fptr(dgamma);
    a.dbeta = fptr(dbeta);
    a.beta_acc = beta_acc ? 1 : 0;
    a.M = g.M;
    cudaStream_t st = dlt__stream(ctx);
    const dim3 grid((unsigned)f.tiles, (unsigned)f.S);
    DLT_DISPATCH_FLOAT(dy->dtype, T, bn_fast_reduce<T, RED_BWD><<<grid, FAST_THREADS, 0, st>>>(a));
    DLT_CU_LAUNCHED(ctx, F_BWD);
    const int64_t nv = g.numel / f.V;
    DLT_DISPATCH_FLOAT(dy->dtype, T,
        bn_fast_apply_bwd<T><<<grid_for(nv, 256), 256, 0, st>>>(
            (T *)dlt__data(dx), dres ? (T *)dlt__data(dres) : (T *)nullptr, (const T *)dlt__data(dy),
            y ? (const T *)dlt__data(y) : (const T *)nullptr, (const T *)dlt__data(x), a.coef, nv, f.G,
            (int32_t)g.C));
    DLT_CU_LAUNCHED(ctx, F_BWD);
    return DLT_OK;
}

} // namespace bn
} // namespace dlt
