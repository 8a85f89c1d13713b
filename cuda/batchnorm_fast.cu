/*
 * batchnorm_fast.cu - single-pass channels-last BatchNorm2d kernels ("fast native"), for the
 * sizes where cuDNN's kernels cost more than the work (batchnorm.cu chooses): the two-launch
 * form here, and the choice of the one-kernel form (batchnorm_one.cu) where it applies.
 * batchnorm_fast.cuh says how both work.
 */
#include <string.h>

#include "batchnorm_fast.cuh"

using namespace dlt;
using namespace dlt::bn;

namespace {

/* Two-launch form, the reduction. The latency chain (load, block sum, publish, count, final
 * sum) is what costs at these sizes, so every step keeps many loads in flight: FAST_UNROLL
 * rows per thread before summing, warp shuffles across the rows of a warp, and the last
 * block reads the partials FAST_FIN_LOADS at a time. */
template <typename T, int MODE> __global__ void __launch_bounds__(FAST_THREADS) bn_fast_reduce(FastRed a) {
    constexpr int V = Vec16<T>::N;
    __shared__ __align__(16) float sh[2 * FAST_WARPS * FAST_W_MAX]; /* [2][warps][W]; later doubles */
    __shared__ int is_last;
    const int TG = a.TG, RB = FAST_THREADS / TG, W = TG * V;
    const int tg = (int)threadIdx.x % TG, ry = (int)threadIdx.x / TG;
    const int cg = (int)blockIdx.x * TG + tg;
    const int c_tile = (int)blockIdx.x * W;
    const int c_fin = c_tile + (int)threadIdx.x; /* threads t < W finish channel c_tile + t */
    const bool finisher = (int)threadIdx.x < W && c_fin < a.C;
    FinIn fin;
    if (finisher) fin = fin_load<T, MODE>(a, c_fin, true);
    float s1[V], s2[V], ref[V];
#pragma unroll
    for (int k = 0; k < V; k++) s1[k] = s2[k] = ref[k] = 0.0f;
    if (cg < a.G) {
        load_ref<T, MODE>(ref, a, cg);
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
                if (MODE == RED_BWD && a.y) dv[u] = masked<T>(dv[u], yv[u]);
                add_row<T, MODE>(s1, s2, ref, xv[u], dv[u]);
            }
        }
    }
    const float block_sum = block_sums<V>(s1, s2, sh, TG, W);
    publish_partial(a, block_sum, W, c_tile);
    if (a.S > 1) {
        __syncthreads();
        if (threadIdx.x == 0) is_last = atomicAdd(&a.counter[blockIdx.x], 1) == a.S - 1;
        __syncthreads();
        if (!is_last) return;
        __threadfence();
    }
    double t1, t2;
    tile_totals(a, block_sum, sh, W, c_tile, finisher, t1, t2);
    if (finisher) {
        float cf[4];
        fin_channel<MODE>(a, c_fin, fin, t1, t2, true, cf);
        a.coef[c_fin] = cf[0];
        a.coef[a.C + c_fin] = cf[1];
        a.coef[2 * a.C + c_fin] = cf[2];
        if (MODE == RED_BWD) a.coef[3 * a.C + c_fin] = cf[3];
    }
    if (threadIdx.x == 0 && a.S > 1) a.counter[blockIdx.x] = 0; /* ready for the next reduction */
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
        Vec16<T> xv, rv;
        xv.raw = reinterpret_cast<const uint4 *>(x)[i];
        if (res) rv.raw = reinterpret_cast<const uint4 *>(res)[i];
        reinterpret_cast<uint4 *>(y)[i] = fwd_out<T>(xv, rv, res != nullptr, m, sc, sh, relu).raw;
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
        Vec16<T> d, yv, xv;
        d.raw = reinterpret_cast<const uint4 *>(dy)[i];
        if (y) {
            yv.raw = reinterpret_cast<const uint4 *>(y)[i];
            d = masked<T>(d, yv);
        }
        xv.raw = reinterpret_cast<const uint4 *>(x)[i];
        if (dres) reinterpret_cast<uint4 *>(dres)[i] = d.raw;
        reinterpret_cast<uint4 *>(dx)[i] = bwd_out<T>(d, xv, m, ca, cb, ck).raw;
    }
}

/* Scratch and counters for one fast reduction (the one-kernel form has twice the counters). */
dlt_status fast_buffers(dlt_ctx *ctx, const FastGeo &f, int64_t C, int one, FastRed &a) {
    float *scratch = NULL;
    DLT_CHECK(dlt__cuda_scratch(ctx, ((size_t)f.S * 2 + 4) * (size_t)C * sizeof(float), (void **)&scratch));
    DLT_CHECK(dlt__cuda_counters(ctx, (size_t)f.tiles * (one ? 2 : 1), &a.counter));
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
    f.one_batch = S <= FAST_MAX_SPLITS;
    if (S > FAST_MAX_SPLITS) S = FAST_MAX_SPLITS;
    if (S < 1) S = 1;
    f.S = (int32_t)S;
    f.M = g.M;
    f.ok = 1;
    return f;
}

dlt_status fast_fwd_train(dlt_ctx *ctx, const FastGeo &f, dlt_tensor *y, const dlt_tensor *x,
                          const dlt_tensor *res, int relu, const dlt_tensor *gamma, const dlt_tensor *beta,
                          dlt_tensor *rm, dlt_tensor *rv, dlt_tensor *save_mean, dlt_tensor *save_invstd,
                          double momentum, double eps) {
    const Geo g = geo_of(x);
    int one = 0;
    DLT_CHECK(one_kernel_wanted(ctx, f, x->dtype, RED_STATS, &one));
    FastRed a;
    memset(&a, 0, sizeof a);
    DLT_CHECK(fast_buffers(ctx, f, g.C, one, a));
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
    if (one) {
        int ran = 0;
        DLT_CHECK(one_fwd(ctx, f, a, x->dtype, dlt__data(y), res ? dlt__data(res) : NULL, relu ? 1 : 0, &ran));
        if (ran) return DLT_OK;
        /* refused: two launches; their counters are the first half of the one kernel's */
    }
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
    int one = 0;
    DLT_CHECK(one_kernel_wanted(ctx, f, dy->dtype, RED_BWD, &one));
    FastRed a;
    memset(&a, 0, sizeof a);
    DLT_CHECK(fast_buffers(ctx, f, g.C, one, a));
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
    if (one) {
        int ran = 0;
        DLT_CHECK(one_bwd(ctx, f, a, dy->dtype, dlt__data(dx), dres ? dlt__data(dres) : NULL, &ran));
        if (ran) return DLT_OK; /* refused: two launches, as in the forward */
    }
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
