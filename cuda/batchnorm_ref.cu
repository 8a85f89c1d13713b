/*
 * batchnorm_ref.cu - our own BatchNorm2d kernels ("native"): the safety net and the path for
 * what cuDNN does not take (affine=False, batch_stats=0 backward, no running buffers, no
 * plan), and the small kernels the cuDNN path runs around its graphs (an unfused epilogue,
 * running statistics from cuDNN's saved ones, parameter gradients from temporaries).
 *
 * Per-channel sums in two passes: per-block partials over a fixed partition of the rows,
 * then one ordered pass per channel. No float atomics: results are deterministic run to
 * run. Statistics are fp32, sums shifted by one sample of the channel (x[n=0,h=0,w=0])
 * against cancellation, finished in double.
 */
#include <string.h>

#include "batchnorm.cuh"

using namespace dlt;
using namespace dlt::bn;

namespace {

struct RedArgs {
    const void *x;     /* STATS and BWD */
    const void *dy;    /* BWD */
    const void *y;     /* BWD: forward output for the ReLU mask, or NULL */
    const float *mean; /* BWD: saved mean */
    float *part;       /* [splits][2][C] */
    int64_t C, HW, M;
};

/* STATS: (x - shift), (x - shift)^2; BWD: d, d*(x - mean) with d = dy masked by y > 0 */
template <typename T, int MODE>
__device__ __forceinline__ void red_elem(const RedArgs &a, int64_t idx, float ref, float &s1, float &s2) {
    if (MODE == RED_STATS) {
        const float v = to_f<T>(((const T *)a.x)[idx]) - ref;
        s1 += v;
        s2 += v * v;
    } else {
        float d = to_f<T>(((const T *)a.dy)[idx]);
        if (a.y && to_f<T>(((const T *)a.y)[idx]) <= 0.0f) d = 0.0f;
        s1 += d;
        s2 += d * (to_f<T>(((const T *)a.x)[idx]) - ref);
    }
}

/* channels-last: rows of C; block = 32 channels x 8 rows, grid = (C/32, splits) */
template <typename T, int MODE> __global__ void bn_partial_cl(RedArgs a) {
    __shared__ float sh1[8][33], sh2[8][33];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float s1 = 0.0f, s2 = 0.0f;
    if (c < a.C) {
        const float ref = MODE == RED_STATS ? to_f<T>(((const T *)a.x)[c]) : a.mean[c];
        for (int64_t r = (int64_t)blockIdx.y * 8 + threadIdx.y; r < a.M; r += (int64_t)gridDim.y * 8)
            red_elem<T, MODE>(a, r * a.C + c, ref, s1, s2);
    }
    sh1[threadIdx.y][threadIdx.x] = s1;
    sh2[threadIdx.y][threadIdx.x] = s2;
    __syncthreads();
    if (threadIdx.y == 0 && c < a.C) {
        float t1 = 0.0f, t2 = 0.0f;
        for (int j = 0; j < 8; j++) {
            t1 += sh1[j][threadIdx.x];
            t2 += sh2[j][threadIdx.x];
        }
        a.part[((int64_t)blockIdx.y * 2) * a.C + c] = t1;
        a.part[((int64_t)blockIdx.y * 2 + 1) * a.C + c] = t2;
    }
}

/* NCHW: channel c is N runs of HW; block = 256 threads, grid = (C, splits) */
template <typename T, int MODE> __global__ void bn_partial_nchw(RedArgs a) {
    __shared__ float w1[8], w2[8];
    const int64_t c = blockIdx.x;
    const float ref = MODE == RED_STATS ? to_f<T>(((const T *)a.x)[c * a.HW]) : a.mean[c];
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; j < a.M;
         j += (int64_t)gridDim.y * blockDim.x) {
        const int64_t n = j / a.HW, i = j - n * a.HW;
        red_elem<T, MODE>(a, (n * a.C + c) * a.HW + i, ref, s1, s2);
    }
    for (int o = 16; o > 0; o >>= 1) {
        s1 += __shfl_down_sync(0xffffffffu, s1, o);
        s2 += __shfl_down_sync(0xffffffffu, s2, o);
    }
    if ((threadIdx.x & 31) == 0) {
        w1[threadIdx.x >> 5] = s1;
        w2[threadIdx.x >> 5] = s2;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float t1 = 0.0f, t2 = 0.0f;
        for (int j = 0; j < (int)(blockDim.x >> 5); j++) {
            t1 += w1[j];
            t2 += w2[j];
        }
        a.part[((int64_t)blockIdx.y * 2) * a.C + c] = t1;
        a.part[((int64_t)blockIdx.y * 2 + 1) * a.C + c] = t2;
    }
}

__device__ __forceinline__ void sum_parts(const float *part, int32_t splits, int64_t C, int64_t c,
                                          double &s1, double &s2) {
    s1 = 0.0;
    s2 = 0.0;
    for (int32_t j = 0; j < splits; j++) {
        s1 += (double)part[((int64_t)j * 2) * C + c];
        s2 += (double)part[((int64_t)j * 2 + 1) * C + c];
    }
}

/* batch statistics from the partials; running stats updated when given */
template <typename T>
__global__ void bn_stats_finish(const float *part, int32_t splits, const T *x, int64_t C, int64_t HW,
                                int cl, int64_t M, double eps, double momentum, float *mean_out,
                                float *invstd_out, float *rm, float *rv) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s1, s2, mean, var;
    sum_parts(part, splits, C, c, s1, s2);
    stats_from_shifted(s1, s2, (double)M, (double)to_f<T>(x[cl ? c : c * HW]), mean, var);
    mean_out[c] = (float)mean;
    invstd_out[c] = (float)(1.0 / sqrt(var + eps));
    running_update(rm, rv, c, mean, var, M, momentum);
}

/* running stats from a saved mean and inverse std (after cuDNN's training forward) */
__global__ void bn_running_from_saved(const float *mean, const float *invstd, float *rm, float *rv,
                                      int64_t C, int64_t M, double eps, double momentum) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const double is = (double)invstd[c];
    double var = 1.0 / (is * is) - eps;
    if (var < 0.0) var = 0.0;
    running_update(rm, rv, c, (double)mean[c], var, M, momentum);
}

/* evaluation: mean/invstd from the running statistics */
__global__ void bn_eval_prep(const float *rm, const float *rv, float *mean_out, float *invstd_out,
                             int64_t C, double eps) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    if (mean_out) mean_out[c] = rm[c];
    invstd_out[c] = (float)(1.0 / sqrt((double)rv[c] + eps));
}

__device__ __forceinline__ int64_t chan_of(int64_t i, int64_t C, int64_t HW, int cl) {
    return cl ? i % C : (i / HW) % C;
}

template <typename T>
__global__ void bn_apply_fwd(T *y, const T *x, const T *res, const float *mean, const float *invstd,
                             const float *gamma, const float *beta, int relu, int64_t n, int64_t C,
                             int64_t HW, int cl) {
    DLT_GRID_STRIDE(i, n) {
        const int64_t c = chan_of(i, C, HW, cl);
        const float g = gamma ? gamma[c] : 1.0f, b = beta ? beta[c] : 0.0f;
        float v = g * (to_f<T>(x[i]) - mean[c]) * invstd[c] + b; /* PyTorch's order */
        if (res) v += to_f<T>(res[i]);
        if (relu) v = relu_f(v);
        y[i] = from_f<T>(v);
    }
}

/* after an unfused cuDNN forward: y = relu(y + res) in place */
template <typename T> __global__ void bn_epilogue(T *y, const T *res, int relu, int64_t n) {
    DLT_GRID_STRIDE(i, n) {
        float v = to_f<T>(y[i]);
        if (res) v += to_f<T>(res[i]);
        if (relu) v = relu_f(v);
        y[i] = from_f<T>(v);
    }
}

/* dgamma = sum(d*(x-mean))*invstd, dbeta = sum(d) (beta_acc adds); chan = per-channel means
 * of d and d*(x-mean) for the dx formula */
__global__ void bn_bwd_finish(const float *part, int32_t splits, int64_t C, int64_t M,
                              const float *invstd, float *dgamma, float *dbeta, int beta_acc,
                              float *chan) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s1, s2;
    sum_parts(part, splits, C, c, s1, s2);
    if (dgamma) dgamma[c] = (float)((beta_acc ? (double)dgamma[c] : 0.0) + s2 * (double)invstd[c]);
    if (dbeta) dbeta[c] = (float)((beta_acc ? (double)dbeta[c] : 0.0) + s1);
    if (chan) {
        chan[c] = (float)(s1 / (double)M);
        chan[C + c] = (float)(s2 / (double)M);
    }
}

/* dx = (d - mean(d) - (x-mean)*invstd^2*mean(d*(x-mean))) * invstd * gamma (batch stats) or
 * d * invstd * gamma (constant stats); dres = d */
template <typename T>
__global__ void bn_apply_bwd(T *dx, T *dres, const T *dy, const T *y, const T *x, const float *mean,
                             const float *invstd, const float *gamma, const float *chan,
                             int batch_stats, int64_t n, int64_t C, int64_t HW, int cl) {
    DLT_GRID_STRIDE(i, n) {
        const int64_t c = chan_of(i, C, HW, cl);
        float d = to_f<T>(dy[i]);
        if (y && to_f<T>(y[i]) <= 0.0f) d = 0.0f;
        if (dres) dres[i] = from_f<T>(d);
        if (dx) {
            const float is = invstd[c], g = gamma ? gamma[c] : 1.0f;
            float v;
            if (batch_stats) {
                const float xm = to_f<T>(x[i]) - mean[c];
                v = (d - chan[c] - xm * (is * is * chan[C + c])) * (is * g);
            } else {
                v = d * (is * g);
            }
            dx[i] = from_f<T>(v);
        }
    }
}

/* dgamma/dbeta from a cuDNN backward into temporaries: dst = (beta_acc ? dst : 0) + t */
__global__ void bn_param_grads(float *dgamma, float *dbeta, const float *tg, const float *tb, int64_t C,
                               int beta_acc) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    if (dgamma) dgamma[c] = (beta_acc ? dgamma[c] : 0.0f) + tg[c];
    if (dbeta) dbeta[c] = (beta_acc ? dbeta[c] : 0.0f) + tb[c];
}

/* The row partition of the reduction: fixed for a shape on a device (deterministic). */
int32_t splits_for(dlt_ctx *ctx, const Geo &g) {
    const int64_t sm = dlt__cu(ctx)->sm_count > 0 ? dlt__cu(ctx)->sm_count : 80;
    const int64_t per_split = g.cl ? (g.C + 31) / 32 : g.C;
    const int64_t max_splits = g.cl ? (g.M + 7) / 8 : (g.M + 255) / 256;
    int64_t s = (2 * sm + per_split - 1) / per_split;
    if (s > max_splits) s = max_splits;
    if (s > 1024) s = 1024;
    if (s < 1) s = 1;
    return (int32_t)s;
}

/* Launches pass 1 of a per-channel reduction into a.part. */
dlt_status launch_partials(dlt_ctx *ctx, int mode, int32_t dtype, const Geo &g, int32_t splits,
                           const RedArgs &a, const char *func) {
    cudaStream_t st = dlt__stream(ctx);
    if (g.cl) {
        dim3 grid((unsigned)((g.C + 31) / 32), (unsigned)splits), block(32, 8);
        if (mode == RED_STATS) {
            DLT_DISPATCH_FLOAT(dtype, T, bn_partial_cl<T, RED_STATS><<<grid, block, 0, st>>>(a));
        } else {
            DLT_DISPATCH_FLOAT(dtype, T, bn_partial_cl<T, RED_BWD><<<grid, block, 0, st>>>(a));
        }
    } else {
        dim3 grid((unsigned)g.C, (unsigned)splits);
        if (mode == RED_STATS) {
            DLT_DISPATCH_FLOAT(dtype, T, bn_partial_nchw<T, RED_STATS><<<grid, 256, 0, st>>>(a));
        } else {
            DLT_DISPATCH_FLOAT(dtype, T, bn_partial_nchw<T, RED_BWD><<<grid, 256, 0, st>>>(a));
        }
    }
    DLT_CU_LAUNCHED(ctx, func);
    return DLT_OK;
}

dlt_status launch_apply_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *res,
                            const float *mean, const float *invstd, const dlt_tensor *gamma,
                            const dlt_tensor *beta, int relu) {
    const Geo g = geo_of(x);
    DLT_DISPATCH_FLOAT(x->dtype, T,
        bn_apply_fwd<T><<<grid_for(g.numel, 256), 256, 0, dlt__stream(ctx)>>>(
            (T *)dlt__data(y), (const T *)dlt__data(x), res ? (const T *)dlt__data(res) : (const T *)nullptr,
            mean, invstd, gamma ? (const float *)dlt__data(gamma) : (const float *)nullptr,
            beta ? (const float *)dlt__data(beta) : (const float *)nullptr, relu ? 1 : 0, g.numel, g.C,
            g.HW, g.cl));
    DLT_CU_LAUNCHED(ctx, F_FWD);
    return DLT_OK;
}

} // namespace

namespace dlt {
namespace bn {

dlt_status native_fwd_train(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *res,
                            int relu, const dlt_tensor *gamma, const dlt_tensor *beta, dlt_tensor *rm,
                            dlt_tensor *rv, dlt_tensor *save_mean, dlt_tensor *save_invstd,
                            double momentum, double eps) {
    const Geo g = geo_of(x);
    const int32_t splits = splits_for(ctx, g);
    float *scratch = NULL;
    DLT_CHECK(dlt__cuda_scratch(ctx, (size_t)((int64_t)splits * 2 + 2) * (size_t)g.C * sizeof(float),
                                (void **)&scratch));
    float *part = scratch;
    float *mean = save_mean ? fptr(save_mean) : scratch + (int64_t)splits * 2 * g.C;
    float *invstd = save_invstd ? fptr(save_invstd) : scratch + ((int64_t)splits * 2 + 1) * g.C;
    RedArgs a;
    memset(&a, 0, sizeof a);
    a.x = dlt__data(x);
    a.part = part;
    a.C = g.C;
    a.HW = g.HW;
    a.M = g.M;
    DLT_CHECK(launch_partials(ctx, RED_STATS, x->dtype, g, splits, a, F_FWD));
    DLT_DISPATCH_FLOAT(x->dtype, T,
        bn_stats_finish<T><<<chan_blocks(g.C), 256, 0, dlt__stream(ctx)>>>(
            part, splits, (const T *)dlt__data(x), g.C, g.HW, g.cl, g.M, eps, momentum, mean, invstd,
            fptr(rm), fptr(rv)));
    DLT_CU_LAUNCHED(ctx, F_FWD);
    return launch_apply_fwd(ctx, y, x, res, mean, invstd, gamma, beta, relu);
}

dlt_status native_fwd_eval(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *res,
                           int relu, const dlt_tensor *gamma, const dlt_tensor *beta,
                           const dlt_tensor *rm, const dlt_tensor *rv, dlt_tensor *save_mean,
                           dlt_tensor *save_invstd, double eps) {
    const Geo g = geo_of(x);
    float *invstd = fptr(save_invstd);
    if (!invstd) DLT_CHECK(dlt__cuda_scratch(ctx, (size_t)g.C * sizeof(float), (void **)&invstd));
    DLT_CHECK(launch_eval_prep(ctx, fptr(rm), fptr(rv), fptr(save_mean), invstd, g.C, eps));
    return launch_apply_fwd(ctx, y, x, res, fptr(rm), invstd, gamma, beta, relu);
}

dlt_status native_bwd(dlt_ctx *ctx, dlt_tensor *dx, dlt_tensor *dres, dlt_tensor *dgamma,
                      dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *y,
                      const dlt_tensor *x, const dlt_tensor *gamma, const dlt_tensor *save_mean,
                      const dlt_tensor *save_invstd, int32_t batch_stats) {
    const Geo g = geo_of(dy);
    cudaStream_t st = dlt__stream(ctx);
    const int need_sums = dgamma || dbeta || (batch_stats && dx);
    float *chan = NULL;
    if (need_sums) {
        const int32_t splits = splits_for(ctx, g);
        float *scratch = NULL;
        DLT_CHECK(dlt__cuda_scratch(ctx, (size_t)((int64_t)splits * 2 + 2) * (size_t)g.C * sizeof(float),
                                    (void **)&scratch));
        chan = scratch + (int64_t)splits * 2 * g.C;
        RedArgs a;
        memset(&a, 0, sizeof a);
        a.x = dlt__data(x);
        a.dy = dlt__data(dy);
        a.y = y ? dlt__data(y) : NULL;
        a.mean = fptr(save_mean);
        a.part = scratch;
        a.C = g.C;
        a.HW = g.HW;
        a.M = g.M;
        DLT_CHECK(launch_partials(ctx, RED_BWD, dy->dtype, g, splits, a, F_BWD));
        bn_bwd_finish<<<chan_blocks(g.C), 256, 0, st>>>(scratch, splits, g.C, g.M, fptr(save_invstd),
                                                       fptr(dgamma), fptr(dbeta), beta_acc ? 1 : 0, chan);
        DLT_CU_LAUNCHED(ctx, F_BWD);
    }
    if (!dx && !dres) return DLT_OK;
    DLT_DISPATCH_FLOAT(dy->dtype, T,
        bn_apply_bwd<T><<<grid_for(g.numel, 256), 256, 0, st>>>(
            dx ? (T *)dlt__data(dx) : (T *)nullptr, dres ? (T *)dlt__data(dres) : (T *)nullptr,
            (const T *)dlt__data(dy), y ? (const T *)dlt__data(y) : (const T *)nullptr,
            (const T *)dlt__data(x), fptr(save_mean), fptr(save_invstd), fptr(gamma), chan,
            batch_stats ? 1 : 0, g.numel, g.C, g.HW, g.cl));
    DLT_CU_LAUNCHED(ctx, F_BWD);
    return DLT_OK;
}

dlt_status launch_eval_prep(dlt_ctx *ctx, const float *rm, const float *rv, float *mean_out,
                            float *invstd_out, int64_t C, double eps) {
    bn_eval_prep<<<chan_blocks(C), 256, 0, dlt__stream(ctx)>>>(rm, rv, mean_out, invstd_out, C, eps);
    DLT_CU_LAUNCHED(ctx, F_FWD);
    return DLT_OK;
}

dlt_status launch_epilogue(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *res, int relu) {
    const int64_t n = y->numel;
    DLT_DISPATCH_FLOAT(y->dtype, T,
        bn_epilogue<T><<<grid_for(n, 256), 256, 0, dlt__stream(ctx)>>>(
            (T *)dlt__data(y), res ? (const T *)dlt__data(res) : (const T *)nullptr, relu ? 1 : 0, n));
    DLT_CU_LAUNCHED(ctx, F_FWD);
    return DLT_OK;
}

dlt_status launch_running_from_saved(dlt_ctx *ctx, const float *mean, const float *invstd, float *rm,
                                     float *rv, int64_t C, int64_t M, double eps, double momentum) {
    bn_running_from_saved<<<chan_blocks(C), 256, 0, dlt__stream(ctx)>>>(mean, invstd, rm, rv, C, M, eps,
                                                                       momentum);
    DLT_CU_LAUNCHED(ctx, F_FWD);
    return DLT_OK;
}

dlt_status launch_param_grads(dlt_ctx *ctx, float *dgamma, float *dbeta, const float *tg,
                              const float *tb, int64_t C, int beta_acc) {
    bn_param_grads<<<chan_blocks(C), 256, 0, dlt__stream(ctx)>>>(dgamma, dbeta, tg, tb, C, beta_acc);
    DLT_CU_LAUNCHED(ctx, F_BWD);
    return DLT_OK;
}

} // namespace bn
} // namespace dlt
