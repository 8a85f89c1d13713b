/*
 * batchnorm.cu - BatchNorm2d on CUDA, with the optional residual add and ReLU fused in:
 * y = relu(gamma*(x-mean)*invstd + beta + residual). Three implementations:
 *
 *  - cuDNN 9 graph API (cudnn_graph.h): NORM_FORWARD (training / inference phase) followed
 *    by pointwise ADD and RELU_FWD in the same graph; NORM_BACKWARD preceded by a pointwise
 *    RELU_BWD (dy masked by y > 0; the masked dy is also the residual's gradient). When an
 *    engine will not take the fused graph, the plain BN graph runs and our elementwise
 *    kernel does the rest. The running statistics are updated by cuDNN in the same graph
 *    (EXP_AVG_FACTOR = momentum, running buffers bound in place; its running variance is the
 *    unbiased one, as PyTorch's: checked on the H200 by tests/cuda_conv_bn.c).
 *    DLT_BN_CUDNN_RUNNING_STATS=0 uses our per-channel kernel from cuDNN's saved mean and
 *    inverse std instead (var = 1/invstd^2 - eps, corrected by n/(n-1)).
 *  - Single-pass channels-last kernels of our own ("fast native", batchnorm_fast.cuh): one
 *    kernel per direction where the grid can be co-resident (a cooperative launch; the
 *    tensor stays on chip between the statistics and the output), two launches otherwise,
 *    with the ReLU mask fused into the backward. Faster than cuDNN's on small
 *    tensors (its kernels cost 9-10 us each whatever the size); in auto mode they run BNs of
 *    at most DLT_BN_NATIVE_MAX elements (default 2^22), cuDNN the larger ones.
 *  - Our own kernels ("native"), the safety net and the path for what cuDNN does not take
 *    (affine=False, batch_stats=0 backward, no running buffers, no plan): per-channel sums
 *    in two passes, per-block partials over a fixed partition of the rows, then one ordered
 *    pass per channel. No float atomics: results are deterministic run to run. Statistics
 *    are fp32, sums shifted by one sample of the channel (x[n=0,h=0,w=0]) against
 *    cancellation, finished in double.
 *
 * Layouts: x, y, residual, dx, dy, dresidual share dtype (f32/f16/bf16) and format (NCHW or
 * channels-last NHWC); gamma, beta, running stats, save_mean, save_invstd, dgamma, dbeta are
 * f32 [C]. Rows per channel: M = N*H*W.
 *
 * Selection: DLT_BN_IMPL=native forces our kernels (the fast ones where they apply), =cudnn
 * forces cuDNN (a missing plan is an error), unset: the fast kernels up to DLT_BN_NATIVE_MAX
 * elements, then cuDNN when its plan finalizes, the safety net otherwise. In deterministic mode
 * cuDNN engines with the non-determinism note are refused, so ours take over.
 *
 * The pieces (batchnorm.cuh): batchnorm_ref.cu (our two-pass kernels), batchnorm_fast.cu
 * and batchnorm_one.cu (the single-pass ones), batchnorm_cudnn.cu (graphs; plans built in
 * the background by plan_pool.c); this file chooses among them. Nothing here synchronises
 * with the host; plans are built at first use.
 */
#include "batchnorm.cuh"
#include "ops_cuda.h"

using namespace dlt;
using namespace dlt::bn;

namespace {

/* Whether the fast kernels run this BN: forced by DLT_BN_IMPL=native, chosen by size in auto
 * mode (cuDNN's persistent kernels win on large tensors). */
int fast_wanted(const dlt_cudnn_settings *set, const dlt_tensor *x, int backward) {
    if (set->bn_impl == DLT_IMPL_NATIVE) return 1;
    if (set->bn_impl == DLT_IMPL_CUDNN) return 0;
    return x->numel <= (backward ? set->bn_native_max_bwd : set->bn_native_max);
}

} // namespace

extern "C" {

dlt_status dlt__cuda_bn_fwd_train(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                                  const dlt_tensor *residual, int32_t relu, const dlt_tensor *gamma,
                                  const dlt_tensor *beta, dlt_tensor *running_mean,
                                  dlt_tensor *running_var, dlt_tensor *save_mean,
                                  dlt_tensor *save_invstd, double momentum, double eps) {
    const dlt_cudnn_settings *set = NULL;
    DLT_CHECK(dlt__cudnn_settings(ctx, &set));
    const int64_t M = x->shape[0] * x->shape[2] * x->shape[3];
    if (fast_wanted(set, x, 0)) {
        const FastGeo f = fast_geo(x, dlt__data(x), dlt__data(y), residual ? dlt__data(residual) : NULL,
                                   NULL, NULL);
        if (f.ok)
            return fast_fwd_train(ctx, f, y, x, residual, relu, gamma, beta, running_mean, running_var,
                                  save_mean, save_invstd, momentum, eps);
    }
    if (set->bn_impl != DLT_IMPL_NATIVE && gamma && beta && save_mean && save_invstd && M > 1) {
        int done = 0;
        DLT_CHECK(cudnn_fwd(ctx, set, PH_TRAIN, y, x, residual, relu, gamma, beta, running_mean,
                            running_var, save_mean, save_invstd, momentum, eps, &done));
        if (done) return DLT_OK;
    }
    return native_fwd_train(ctx, y, x, residual, relu, gamma, beta, running_mean, running_var, save_mean,
                            save_invstd, momentum, eps);
}

dlt_status dlt__cuda_bn_fwd_eval(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                                 const dlt_tensor *residual, int32_t relu, const dlt_tensor *gamma,
                                 const dlt_tensor *beta, const dlt_tensor *running_mean,
                                 const dlt_tensor *running_var, dlt_tensor *save_mean,
                                 dlt_tensor *save_invstd, double eps) {
    /* Evaluation always runs our kernels: cuDNN 9.14's heuristics find no engine for the
     * inference-phase NORM_FORWARD graph ("matcher_casted == nullptr", measured on the H200),
     * and evaluation is off the training step's critical path. */
    return native_fwd_eval(ctx, y, x, residual, relu, gamma, beta, running_mean, running_var, save_mean,
                           save_invstd, eps);
}

dlt_status dlt__cuda_bn_bwd(dlt_ctx *ctx, dlt_tensor *dx, dlt_tensor *dresidual, dlt_tensor *dgamma,
                            dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy,
                            const dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *gamma,
                            const dlt_tensor *save_mean, const dlt_tensor *save_invstd,
                            int32_t batch_stats) {
    const dlt_cudnn_settings *set = NULL;
    DLT_CHECK(dlt__cudnn_settings(ctx, &set));
    const int64_t M = x->shape[0] * x->shape[2] * x->shape[3];
    if (batch_stats && dx && save_mean && save_invstd && fast_wanted(set, x, 1)) {
        const FastGeo f = fast_geo(dy, dlt__data(dy), y ? dlt__data(y) : NULL, dlt__data(x), dlt__data(dx),
                                   dresidual ? dlt__data(dresidual) : NULL);
        if (f.ok)
            return fast_bwd(ctx, f, dx, dresidual, dgamma, dbeta, beta_acc, dy, y, x, gamma, save_mean,
                            save_invstd);
    }
    if (set->bn_impl != DLT_IMPL_NATIVE && batch_stats && gamma && dx && save_mean && save_invstd &&
        M > 1) {
        int done = 0;
        DLT_CHECK(cudnn_bwd(ctx, set, dx, dresidual, dgamma, dbeta, beta_acc, dy, y, x, gamma, save_mean,
                            save_invstd, &done));
        if (done) return DLT_OK;
    }
    return native_bwd(ctx, dx, dresidual, dgamma, dbeta, beta_acc, dy, y, x, gamma, save_mean, save_invstd,
                      batch_stats);
}

} // extern "C"
