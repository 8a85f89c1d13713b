/*
 * batchnorm.cuh - what the pieces of BatchNorm2d on CUDA share (batchnorm.cu says which piece
 * runs when): the geometry of a call, the device math both of our implementations use, and
 * the entry points of each piece:
 *   batchnorm_ref.cu    our two-pass kernels, the safety net (native_*), and the small
 *                       kernels the cuDNN path runs around a graph (launch_*);
 *   batchnorm_fast.cu   the single-pass channels-last kernels (fast_*), two launches per
 *                       direction, or one (batchnorm_one.cu) where the grid can be
 *                       co-resident; batchnorm_fast.cuh has what the two forms share;
 *   batchnorm_cudnn.cu  the cuDNN graphs, their plans built in the background (cudnn_*).
 * Layouts: x, y, residual, dx, dy, dresidual share dtype (f32/f16/bf16) and format (NCHW or
 * channels-last NHWC); gamma, beta, running stats, save_mean, save_invstd, dgamma, dbeta are
 * f32 [C]. Rows per channel: M = N*H*W.
 */
#ifndef DLT_CUDA_BATCHNORM_CUH
#define DLT_CUDA_BATCHNORM_CUH

#include "common.cuh"
#include "cudnn_graph.h"

namespace dlt {
namespace bn {

constexpr const char *F_FWD = "dlt_batch_norm2d";
constexpr const char *F_BWD = "dlt_batch_norm2d_backward";

/* the two per-channel reductions: batch statistics, and the backward's sums */
enum { RED_STATS = 0, RED_BWD = 1 };

/* graph phases of the cuDNN path */
enum { PH_TRAIN = 0, PH_INFER = 1, PH_BWD = 2 };

__device__ __forceinline__ void running_update(float *rm, float *rv, int64_t c, double mean,
                                               double var_biased, int64_t M, double momentum) {
    if (rm) rm[c] = (float)((1.0 - momentum) * (double)rm[c] + momentum * mean);
    if (rv) {
        const double unbiased = M > 1 ? var_biased * (double)M / (double)(M - 1) : var_biased;
        rv[c] = (float)((1.0 - momentum) * (double)rv[c] + momentum * unbiased);
    }
}

/* mean and biased variance of n values from their sums shifted by `shift` (s1 = sum(x -
 * shift), s2 = sum((x - shift)^2)); both finishing paths use it, so they agree bit for bit */
__device__ __forceinline__ void stats_from_shifted(double s1, double s2, double n, double shift,
                                                   double &mean, double &var) {
    const double dm = s1 / n;
    var = s2 / n - dm * dm;
    if (var < 0.0) var = 0.0;
    mean = shift + dm;
}

/* ReLU after the normalisation (NaN propagates, as PyTorch's) */
__device__ __forceinline__ float relu_f(float v) { return (v > 0.0f || v != v) ? v : 0.0f; }

struct Geo {
    int64_t N, C, HW, M, numel;
    int cl;
};

inline Geo geo_of(const dlt_tensor *x) {
    Geo g;
    g.N = x->shape[0];
    g.C = x->shape[1];
    g.HW = x->shape[2] * x->shape[3];
    g.M = g.N * g.HW;
    g.numel = x->numel;
    g.cl = x->format == DLT_FORMAT_CHANNELS_LAST;
    return g;
}

inline unsigned chan_blocks(int64_t C) { return (unsigned)((C + 255) / 256); }

inline float *fptr(const dlt_tensor *t) { return t ? (float *)dlt__data(t) : (float *)nullptr; }

/* ---- batchnorm_ref.cu ---- */
dlt_status native_fwd_train(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *res,
                            int relu, const dlt_tensor *gamma, const dlt_tensor *beta, dlt_tensor *rm,
                            dlt_tensor *rv, dlt_tensor *save_mean, dlt_tensor *save_invstd,
                            double momentum, double eps);
dlt_status native_fwd_eval(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *res,
                           int relu, const dlt_tensor *gamma, const dlt_tensor *beta,
                           const dlt_tensor *rm, const dlt_tensor *rv, dlt_tensor *save_mean,
                           dlt_tensor *save_invstd, double eps);
dlt_status native_bwd(dlt_ctx *ctx, dlt_tensor *dx, dlt_tensor *dres, dlt_tensor *dgamma,
                      dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *y,
                      const dlt_tensor *x, const dlt_tensor *gamma, const dlt_tensor *save_mean,
                      const dlt_tensor *save_invstd, int32_t batch_stats);
/* evaluation: mean_out (may be NULL) = rm, invstd_out = 1/sqrt(rv + eps) */
dlt_status launch_eval_prep(dlt_ctx *ctx, const float *rm, const float *rv, float *mean_out,
                            float *invstd_out, int64_t C, double eps);
/* after an unfused cuDNN forward: y = relu(y + res) in place */
dlt_status launch_epilogue(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *res, int relu);
/* running stats from a saved mean and inverse std (after cuDNN's training forward) */
dlt_status launch_running_from_saved(dlt_ctx *ctx, const float *mean, const float *invstd, float *rm,
                                     float *rv, int64_t C, int64_t M, double eps, double momentum);
/* dgamma/dbeta from a cuDNN backward into temporaries: dst = (beta_acc ? dst : 0) + t */
dlt_status launch_param_grads(dlt_ctx *ctx, float *dgamma, float *dbeta, const float *tg,
                              const float *tb, int64_t C, int beta_acc);

/* ---- batchnorm_fast.cu ---- */
/* The fast kernels' geometry for a shape: 0 when they do not apply (NCHW, C not a multiple
 * of the vector width, unaligned data). */
struct FastGeo {
    int ok;
    int one_batch; /* every thread's rows are one batch: the one-kernel form may run */
    int32_t V, G, TG, tiles, S;
    int64_t M; /* rows per channel */
};

FastGeo fast_geo(const dlt_tensor *t, const void *p0, const void *p1, const void *p2,
                 const void *p3, const void *p4);
dlt_status fast_fwd_train(dlt_ctx *ctx, const FastGeo &f, dlt_tensor *y, const dlt_tensor *x,
                          const dlt_tensor *res, int relu, const dlt_tensor *gamma, const dlt_tensor *beta,
                          dlt_tensor *rm, dlt_tensor *rv, dlt_tensor *save_mean, dlt_tensor *save_invstd,
                          double momentum, double eps);
dlt_status fast_bwd(dlt_ctx *ctx, const FastGeo &f, dlt_tensor *dx, dlt_tensor *dres, dlt_tensor *dgamma,
                    dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *y,
                    const dlt_tensor *x, const dlt_tensor *gamma, const dlt_tensor *save_mean,
                    const dlt_tensor *save_invstd);

/* ---- batchnorm_cudnn.cu: *done = 0 when the caller must use our kernels ---- */
dlt_status cudnn_fwd(dlt_ctx *ctx, const dlt_cudnn_settings *set, int phase, dlt_tensor *y,
                     const dlt_tensor *x, const dlt_tensor *res, int relu, const dlt_tensor *gamma,
                     const dlt_tensor *beta, dlt_tensor *rm, dlt_tensor *rv, dlt_tensor *save_mean,
                     dlt_tensor *save_invstd, double momentum, double eps, int *done);
dlt_status cudnn_bwd(dlt_ctx *ctx, const dlt_cudnn_settings *set, dlt_tensor *dx, dlt_tensor *dres,
                     dlt_tensor *dgamma, dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy,
                     const dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *gamma,
                     const dlt_tensor *save_mean, const dlt_tensor *save_invstd, int *done);

} // namespace bn
} // namespace dlt

#endif
