/*
 * batchnorm_one.cu - our single-pass channels-last BatchNorm as one kernel per direction
 * (batchnorm_fast.cuh says how; batchnorm_fast.cu decides when): statistics and output in
 * one cooperative launch, the tensor held on chip across a per-tile wait.
 */
#include "batchnorm_fast.cuh"

using namespace dlt;
using namespace dlt::bn;

namespace {

struct FusedIO {
    void *out;       /* forward: y; backward: dx */
    void *dres;      /* backward: the masked dy (the residual's gradient), or NULL */
    const void *res; /* forward: the residual, or NULL */
    int relu;        /* forward */
};

/* The values a block holds across its wait, in shared memory (filled by cp.async, so no
 * register holds them in flight): forward x and the residual, backward x, dy (masked in
 * place) and y; [ONE_ARRAYS][FAST_UNROLL][FAST_THREADS] 16-byte vectors. */
template <int MODE> constexpr int one_arrays() { return MODE == RED_STATS ? 2 : 3; }
template <int MODE> constexpr size_t one_smem() {
    return (size_t)one_arrays<MODE>() * FAST_UNROLL * FAST_THREADS * sizeof(uint4);
}

/* Requires: every thread's rows are one batch (M <= S*RB*FAST_UNROLL) and the whole grid
 * co-resident (the launch is cooperative), since a block waits for its tile's other splits. */
template <typename T, int MODE>
__global__ void __launch_bounds__(FAST_THREADS, 2) bn_fast_one(FastRed a, FusedIO io) {
    constexpr int V = Vec16<T>::N;
    extern __shared__ __align__(16) uint4 held[];
    __shared__ __align__(16) float sh[2 * FAST_WARPS * FAST_W_MAX];
    __shared__ __align__(16) float coef_sh[4 * FAST_W_MAX];
    const int TG = a.TG, RB = FAST_THREADS / TG, W = TG * V;
    const int tg = (int)threadIdx.x % TG, ry = (int)threadIdx.x / TG;
    const int cg = (int)blockIdx.x * TG + tg;
    const int c_tile = (int)blockIdx.x * W;
    const int c_fin = c_tile + (int)threadIdx.x;
    const bool finisher = (int)threadIdx.x < W && c_fin < a.C;
    const bool active = cg < a.G;
    /* 32-bit row and vector indices (one_kernel_wanted: M * G < 2^31) */
    const int32_t M = (int32_t)a.M, step = a.S * RB, r0 = (int32_t)blockIdx.y * RB + ry;
    /* slot of (array j, row batch u) of this thread */
#define HELD(j, u) held[((j) * FAST_UNROLL + (u)) * FAST_THREADS + threadIdx.x]
    const void *second = MODE == RED_STATS ? io.res : a.dy;
    if (active) {
#pragma unroll
        for (int u = 0; u < FAST_UNROLL; u++) {
            const int32_t rr = r0 + u * step;
            if (rr < M) {
                const int32_t vi = rr * a.G + cg;
                cp_async16(&HELD(0, u), reinterpret_cast<const uint4 *>(a.x) + vi, true);
                if (second) cp_async16(&HELD(1, u), reinterpret_cast<const uint4 *>(second) + vi, true);
                if (MODE == RED_BWD && a.y) cp_async16(&HELD(2, u), reinterpret_cast<const uint4 *>(a.y) + vi, true);
            }
        }
        cp_async_commit();
    }
    float s1[V], s2[V], ref[V];
#pragma unroll
    for (int k = 0; k < V; k++) s1[k] = s2[k] = ref[k] = 0.0f;
    if (active) {
        load_ref<T, MODE>(ref, a, cg);
        cp_async_wait<0>(); /* this thread's own slots: no block barrier needed */
#pragma unroll
        for (int u = 0; u < FAST_UNROLL; u++) {
            const int32_t rr = r0 + u * step;
            if (rr >= M) break;
            Vec16<T> xv, d;
            xv.raw = HELD(0, u);
            if (MODE == RED_BWD) {
                d.raw = HELD(1, u);
                if (a.y) {
                    Vec16<T> yv;
                    yv.raw = HELD(2, u);
                    d = masked<T>(d, yv);
                    HELD(1, u) = d.raw;
                }
                /* the residual's gradient needs no statistics: written now */
                if (io.dres) reinterpret_cast<uint4 *>(io.dres)[rr * a.G + cg] = d.raw;
            }
            add_row<T, MODE>(s1, s2, ref, xv, d);
        }
    }
    const float block_sum = block_sums<V>(s1, s2, sh, TG, W);
    publish_partial(a, block_sum, W, c_tile);
    if (a.S > 1) {
        /* the tile's barrier: count this block in, wait for the other splits */
        __syncthreads();
        if (threadIdx.x == 0) {
            atomicAdd(&a.counter[blockIdx.x], 1);
            const volatile int *arrived = a.counter + blockIdx.x;
            while (*arrived < a.S) {
            }
            __threadfence();
        }
        __syncthreads();
    }
    /* loaded here, not at the start (registers), overlapping the partials' loads */
    FinIn fin;
    if (finisher) fin = fin_load<T, MODE>(a, c_fin, blockIdx.y == 0);
    double t1, t2;
    tile_totals(a, block_sum, sh, W, c_tile, finisher, t1, t2);
    if (finisher) {
        float cf[4];
        fin_channel<MODE>(a, c_fin, fin, t1, t2, blockIdx.y == 0, cf);
#pragma unroll
        for (int j = 0; j < 4; j++) coef_sh[j * FAST_W_MAX + threadIdx.x] = cf[j];
    }
    __syncthreads();
    if (a.S > 1 && threadIdx.x == 0) {
        /* every block has passed the wait when the last one leaves: it zeroes both counters */
        if (atomicAdd(&a.counter[gridDim.x + blockIdx.x], 1) == a.S - 1) {
            a.counter[blockIdx.x] = 0;
            a.counter[gridDim.x + blockIdx.x] = 0;
        }
    }
    if (!active) return;
    /* the coefficients are read from shared memory where used (registers are short here) */
    const float *c0 = coef_sh + tg * V, *c1 = c0 + FAST_W_MAX, *c2 = c1 + FAST_W_MAX, *c3 = c2 + FAST_W_MAX;
#pragma unroll
    for (int u = 0; u < FAST_UNROLL; u++) {
        const int32_t rr = r0 + u * step;
        if (rr >= M) break;
        Vec16<T> xv, v1, out;
        xv.raw = HELD(0, u);
        if (second) v1.raw = HELD(1, u);
        if (MODE == RED_STATS)
            out = fwd_out<T>(xv, v1, io.res != nullptr, c0, c1, c2, io.relu);
        else
            out = bwd_out<T>(v1, xv, c0, c1, c2, c3);
        reinterpret_cast<uint4 *>(io.out)[rr * a.G + cg] = out.raw;
    }
#undef HELD
}

int dtype_slot(int32_t dtype) { return dtype == DLT_F32 ? 0 : dtype == DLT_F16 ? 1 : 2; }

/* Blocks of the one-kernel form that fit on the device at once; 0 where its shared memory
 * is more than a block may have. */
template <typename T, int MODE> dlt_status coresident_of(dlt_ctx *ctx, int *blocks) {
    const char *F = MODE == RED_STATS ? F_FWD : F_BWD;
    *blocks = 0;
    if ((size_t)dlt__cu(ctx)->smem_optin < one_smem<MODE>() + sizeof(float) * (2 * FAST_WARPS + 4) * FAST_W_MAX)
        return DLT_OK;
    DLT_CU(ctx, cudaFuncSetAttribute(bn_fast_one<T, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)one_smem<MODE>()), F);
    int per_sm = 0;
    DLT_CU(ctx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bn_fast_one<T, MODE>, FAST_THREADS,
                                                              one_smem<MODE>()), F);
    *blocks = per_sm * dlt__cu(ctx)->sm_count;
    return DLT_OK;
}

/* *ran = 0 where the runtime refuses the grid as larger than the device holds at once (an
 * MPS client limited to part of the SMs, say, where the occupancy query counted them all):
 * nothing ran, the error is cleared (it is not sticky), this instantiation takes two
 * launches for the rest of the context, and the caller runs them now. Any other failure is
 * the call's error. The first launch that runs says so in the log. */
template <typename T, int MODE>
dlt_status launch_one(dlt_ctx *ctx, const FastGeo &f, FastRed a, FusedIO io, int32_t dtype, int *ran) {
    void *args[2] = {&a, &io};
    const cudaError_t e =
        cudaLaunchCooperativeKernel((const void *)bn_fast_one<T, MODE>, dim3((unsigned)f.tiles, (unsigned)f.S),
                                    dim3(FAST_THREADS), args, one_smem<MODE>(), dlt__stream(ctx));
    dlt_cuda_state *s = dlt__cu(ctx);
    *ran = e == cudaSuccess;
    if (e == cudaErrorCooperativeLaunchTooLarge) {
        (void)cudaGetLastError();
        s->bn_coresident[dtype_slot(dtype)][MODE] = -1;
        dlt__log(DLT_LOG_WARNING,
                 "dlt: a cooperative BatchNorm %s launch of %d blocks (%s) was refused as larger than the GPU "
                 "holds at once; such BNs take two launches from now on",
                 MODE == RED_STATS ? "forward" : "backward", f.tiles * f.S, dlt_dtype_name(dtype));
        return DLT_OK;
    }
    DLT_CU(ctx, e, MODE == RED_STATS ? F_FWD : F_BWD);
    if (!s->bn_one_kernel_logged) {
        s->bn_one_kernel_logged = 1;
        dlt__log(DLT_LOG_INFO, "dlt: BatchNorm as one kernel per direction (cooperative grids of up to %d blocks)",
                 s->bn_coresident[dtype_slot(dtype)][MODE]);
    }
    return DLT_OK;
}

} // namespace

namespace dlt {
namespace bn {

dlt_status one_kernel_wanted(dlt_ctx *ctx, const FastGeo &f, int32_t dtype, int mode, int *want) {
    *want = 0;
    const dlt_cudnn_settings *set = NULL;
    DLT_CHECK(dlt__cudnn_settings(ctx, &set));
    dlt_cuda_state *s = dlt__cu(ctx);
    if (!set->bn_one_kernel || !f.one_batch || !s->coop_launch) return DLT_OK;
    if (f.M * f.G >= ((int64_t)1 << 31)) return DLT_OK; /* the kernel's indices are 32-bit */
    int *slot = &s->bn_coresident[dtype_slot(dtype)][mode];
    if (*slot == 0) {
        int blocks = 0;
        if (mode == RED_STATS) {
            DLT_DISPATCH_FLOAT(dtype, T, DLT_CHECK((coresident_of<T, RED_STATS>(ctx, &blocks))));
        } else {
            DLT_DISPATCH_FLOAT(dtype, T, DLT_CHECK((coresident_of<T, RED_BWD>(ctx, &blocks))));
        }
        *slot = blocks > 0 ? blocks : -1;
    }
    /* DLT_BN_ONE_KERNEL=2 skips the size check (the refusal's fallback is then what runs) */
    *want = *slot > 0 && (set->bn_one_kernel == 2 || (int64_t)f.tiles * f.S <= (int64_t)*slot);
    return DLT_OK;
}

dlt_status one_fwd(dlt_ctx *ctx, const FastGeo &f, const FastRed &a, int32_t dtype, void *y, const void *res,
                   int relu, int *ran) {
    const FusedIO io = {y, NULL, res, relu};
    DLT_DISPATCH_FLOAT(dtype, T, return launch_one<T, RED_STATS>(ctx, f, a, io, dtype, ran));
    return DLT_OK;
}

dlt_status one_bwd(dlt_ctx *ctx, const FastGeo &f, const FastRed &a, int32_t dtype, void *dx, void *dres,
                   int *ran) {
    const FusedIO io = {dx, dres, NULL, 0};
    DLT_DISPATCH_FLOAT(dtype, T, return launch_one<T, RED_BWD>(ctx, f, a, io, dtype, ran));
    return DLT_OK;
}

} // namespace bn
} // namespace dlt
