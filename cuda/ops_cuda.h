/*
 * ops_cuda.h - CUDA launchers of the layer ops, one file each under cuda/, and the
 * backend-table entries they fill. Each section belongs to one file: when the file
 * implements its launchers, its ENTRIES macro lists them (designated initialisers for
 * struct dlt_backend). Launchers are extern "C" and named dlt__cuda_<entry>.
 */
#ifndef DLT_OPS_CUDA_H
#define DLT_OPS_CUDA_H

#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- conv2d.cu (cuDNN graph API; plan cache in cudnn_graph.c) ---- */
dlt_status dlt__cuda_conv2d_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *w,
                                const dlt_tensor *b, const dlt_conv_params *p);
dlt_status dlt__cuda_conv2d_bwd_data(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                     const dlt_tensor *w, const dlt_conv_params *p, int32_t beta);
dlt_status dlt__cuda_conv2d_bwd_filter(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *x,
                                       const dlt_tensor *dy, const dlt_conv_params *p, int32_t beta);
dlt_status dlt__cuda_conv2d_bwd_bias(dlt_ctx *ctx, dlt_tensor *db, const dlt_tensor *dy, int32_t beta);
#define DLT_CUDA_CONV2D_ENTRIES                                                               \
    .conv2d_fwd = dlt__cuda_conv2d_fwd, .conv2d_bwd_data = dlt__cuda_conv2d_bwd_data,         \
    .conv2d_bwd_filter = dlt__cuda_conv2d_bwd_filter, .conv2d_bwd_bias = dlt__cuda_conv2d_bwd_bias,

/* ---- batchnorm.cu (cuDNN graph API, or our kernels) ---- */
dlt_status dlt__cuda_bn_fwd_train(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                                  const dlt_tensor *residual, int32_t relu, const dlt_tensor *gamma,
                                  const dlt_tensor *beta, dlt_tensor *running_mean,
                                  dlt_tensor *running_var, dlt_tensor *save_mean,
                                  dlt_tensor *save_invstd, double momentum, double eps);
dlt_status dlt__cuda_bn_fwd_eval(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                                 const dlt_tensor *residual, int32_t relu, const dlt_tensor *gamma,
                                 const dlt_tensor *beta, const dlt_tensor *running_mean,
                                 const dlt_tensor *running_var, dlt_tensor *save_mean,
                                 dlt_tensor *save_invstd, double eps);
dlt_status dlt__cuda_bn_bwd(dlt_ctx *ctx, dlt_tensor *dx, dlt_tensor *dresidual, dlt_tensor *dgamma,
                            dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy,
                            const dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *gamma,
                            const dlt_tensor *save_mean, const dlt_tensor *save_invstd,
                            int32_t batch_stats);
#define DLT_CUDA_BATCHNORM_ENTRIES                                                            \
    .bn_fwd_train = dlt__cuda_bn_fwd_train, .bn_fwd_eval = dlt__cuda_bn_fwd_eval,             \
    .bn_bwd = dlt__cuda_bn_bwd,

/* ---- pool.cu ---- */
dlt_status dlt__cuda_maxpool_fwd(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *indices,
                                 const dlt_tensor *x, const dlt_pool_params *p);
dlt_status dlt__cuda_maxpool_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                 const dlt_tensor *indices, const dlt_pool_params *p);
dlt_status dlt__cuda_gavgpool_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x);
dlt_status dlt__cuda_gavgpool_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy);
#define DLT_CUDA_POOL_ENTRIES                                                                 \
    .maxpool_fwd = dlt__cuda_maxpool_fwd, .maxpool_bwd = dlt__cuda_maxpool_bwd,               \
    .gavgpool_fwd = dlt__cuda_gavgpool_fwd, .gavgpool_bwd = dlt__cuda_gavgpool_bwd,

/* ---- linear.cu (cuBLASLt) ---- */
dlt_status dlt__cuda_linear_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *w,
                                const dlt_tensor *b);
dlt_status dlt__cuda_linear_fwd_gelu(dlt_ctx *ctx, dlt_tensor *g, dlt_tensor *h, const dlt_tensor *x,
                                     const dlt_tensor *w, const dlt_tensor *b, int *served);
dlt_status dlt__cuda_linear_bwd_data(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                     const dlt_tensor *w);
dlt_status dlt__cuda_linear_bwd_weight(dlt_ctx *ctx, dlt_tensor *dw, dlt_tensor *db,
                                       const dlt_tensor *x, const dlt_tensor *dy, int32_t beta);
dlt_status dlt__cuda_linear_bwd_data_gelu(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *w,
                                          const dlt_tensor *h, int *served);
#define DLT_CUDA_LINEAR_ENTRIES                                                               \
    .linear_fwd = dlt__cuda_linear_fwd, .linear_bwd_data = dlt__cuda_linear_bwd_data,         \
    .linear_bwd_weight = dlt__cuda_linear_bwd_weight, .linear_fwd_gelu = dlt__cuda_linear_fwd_gelu, \
    .linear_bwd_data_gelu = dlt__cuda_linear_bwd_data_gelu,

/* ---- cross_entropy.cu (forward, ce_fwd_grad), cross_entropy_bwd.cu (backward, ce_grad_scale,
 *      count_correct) ---- */
dlt_status dlt__cuda_ce_fwd(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, const dlt_tensor *logits,
                            const dlt_tensor *targets, const dlt_ce_params *p);
dlt_status dlt__cuda_ce_bwd(dlt_ctx *ctx, dlt_tensor *dlogits, const dlt_tensor *dloss,
                            const dlt_tensor *logits, const dlt_tensor *targets, const dlt_tensor *saved,
                            const dlt_ce_params *p);
dlt_status dlt__cuda_ce_fwd_grad(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, dlt_tensor *logits,
                                 const dlt_tensor *targets, const dlt_ce_params *p, int *served);
dlt_status dlt__cuda_ce_grad_scale(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dloss);
dlt_status dlt__cuda_count_correct(dlt_ctx *ctx, void *correct, const dlt_tensor *logits,
                                   const dlt_tensor *targets);
#define DLT_CUDA_CROSS_ENTROPY_ENTRIES                                                        \
    .ce_fwd = dlt__cuda_ce_fwd, .ce_bwd = dlt__cuda_ce_bwd, .ce_fwd_grad = dlt__cuda_ce_fwd_grad, \
    .ce_grad_scale = dlt__cuda_ce_grad_scale,                                                 \
    .count_correct = dlt__cuda_count_correct,

/* ---- sgd.cu (one multi-tensor launch per step; state writes) ---- */
dlt_status dlt__cuda_sgd_step(dlt_ctx *ctx, const dlt_sgd_launch *L);
dlt_status dlt__cuda_sgd_state(dlt_ctx *ctx, void *state, const dlt_optim_state_op *op);
#define DLT_CUDA_SGD_ENTRIES .sgd_step = dlt__cuda_sgd_step, .sgd_state = dlt__cuda_sgd_state,

/* ---- amp.cu (GradScaler: multi-tensor unscale + inf check, scale update) ---- */
dlt_status dlt__cuda_amp_unscale(dlt_ctx *ctx, dlt_tensor **grads, int32_t n, void *found_inf,
                                 const void *scale);
dlt_status dlt__cuda_amp_update(dlt_ctx *ctx, void *scale, void *growth_tracker,
                                const void *found_inf, uint32_t mask, double growth_factor,
                                double backoff_factor, int32_t growth_interval);
#define DLT_CUDA_AMP_ENTRIES .amp_unscale = dlt__cuda_amp_unscale, .amp_update = dlt__cuda_amp_update,

/* ---- data.cu (batch gather, epoch order, loader cursor) ---- */
dlt_status dlt__cuda_data_gather(dlt_ctx *ctx, const dlt_data_launch *L);
dlt_status dlt__cuda_data_order(dlt_ctx *ctx, int32_t *perm, int64_t count, uint64_t seed,
                                int64_t epoch);
dlt_status dlt__cuda_data_cursor_set(dlt_ctx *ctx, dlt_data_cursor *cursor, int64_t batch,
                                     int64_t epoch);
dlt_status dlt__cuda_data_cursor_advance(dlt_ctx *ctx, dlt_data_cursor *cursor);
dlt_status dlt__cuda_data_tokens(dlt_ctx *ctx, const dlt_token_launch *L);
#define DLT_CUDA_DATA_ENTRIES                                                                 \
    .data_gather = dlt__cuda_data_gather, .data_order = dlt__cuda_data_order,                 \
    .data_cursor_set = dlt__cuda_data_cursor_set,                                             \
    .data_cursor_advance = dlt__cuda_data_cursor_advance, .data_tokens = dlt__cuda_data_tokens,

/* ---- transformer ops: binary.cu (binary, copy_nd), pointwise.cu, reduce.cu, matmul.cu,
 * softmax.cu, layer_norm.cu, dropout.cu (and rng_advance), embedding.cu, attention.cu ---- */
dlt_status dlt__cuda_binary(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *a, const dlt_nd_operand *oa,
                            const dlt_tensor *b, const dlt_nd_operand *ob, const dlt_nd *s, int32_t op,
                            double alpha);
dlt_status dlt__cuda_copy_nd(dlt_ctx *ctx, dlt_tensor *dst, const dlt_nd_operand *od, const dlt_tensor *src,
                             const dlt_nd_operand *os, const dlt_nd *s);
dlt_status dlt__cuda_unary(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, int32_t op, double alpha);
dlt_status dlt__cuda_unary_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *x,
                               const dlt_tensor *y, int32_t op, double alpha);
dlt_status dlt__cuda_reduce(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_reduce_spec *r,
                            int32_t op, double alpha);
/* Row-major C [M,N] (row stride ldc) = op(A) op(B) (+ C when beta), A stored M x K (trans_a
 * 0) or K x M, B stored K x N (trans_b 0) or N x K, each with its row stride: one cuBLASLt
 * GEMM (linear.cu's plan cache; fp32 accumulation, TF32 only for fp32 when allowed). No
 * algorithm is an error. */
dlt_status dlt__cuda_gemm_rm(dlt_ctx *ctx, int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t M,
                             int64_t N, int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb,
                             void *C, int64_t ldc, int32_t beta, const char *F);
/* conv2d_gemm.cu: a convolution with a one-pixel output as GEMMs over the taps that touch
 * data, and with mode 2 also a 1x1 stride-1 unpadded channels-last one as one GEMM (dir 0
 * forward into y, 1 data gradient into x, 2 weight gradient into w, with beta); *done = 0
 * when the shape or layout does not qualify (the caller uses cuDNN). */
dlt_status dlt__cuda_conv2d_gemm(dlt_ctx *ctx, int32_t dir, dlt_tensor *x, dlt_tensor *w, dlt_tensor *y,
                                 const dlt_conv_params *p, int32_t beta, int32_t mode, int *done);
/* conv2d_pad.cu: the forward (dir 0, into y) or weight gradient (dir 2, into w, with beta)
 * of a 16-bit channels-last convolution with fewer than cp input channels, through cuDNN
 * with the channels padded to cp; *done = 0 when it does not qualify or cuDNN has no plan
 * for the padded shapes (the caller runs it as it is). */
dlt_status dlt__cuda_conv2d_padded(dlt_ctx *ctx, int32_t dir, const dlt_tensor *x, dlt_tensor *w, dlt_tensor *y,
                                   const dlt_conv_params *p, int32_t beta, int32_t cp, int *done);
/* conv2d.cu, for conv2d_pad.cu: the cached cuDNN plan of one direction for x, w, y in the
 * roles of that direction (NULL, without a warning, when cuDNN has none) and its execution */
struct dlt_cudnn_plan;
dlt_status dlt__cuda_conv2d_plan(dlt_ctx *ctx, int32_t dir, const dlt_tensor *x, const dlt_tensor *w,
                                 const dlt_tensor *y, const dlt_conv_params *p, int32_t beta,
                                 struct dlt_cudnn_plan **plan);
dlt_status dlt__cuda_conv2d_execute(dlt_ctx *ctx, int32_t dir, struct dlt_cudnn_plan *plan, const dlt_tensor *x,
                                    const dlt_tensor *w, const dlt_tensor *y, const dlt_conv_params *p,
                                    int32_t beta);
dlt_status dlt__cuda_gemm(dlt_ctx *ctx, dlt_tensor *c, const dlt_tensor *a, const dlt_tensor *b,
                          const dlt_gemm_batch *g);
dlt_status dlt__cuda_softmax_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, int64_t outer, int64_t n,
                                 int64_t inner, int32_t log_);
dlt_status dlt__cuda_softmax_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y,
                                 int64_t outer, int64_t n, int64_t inner, int32_t log_);
dlt_status dlt__cuda_ln_fwd(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd, const dlt_tensor *x,
                            const dlt_tensor *w, const dlt_tensor *b, int64_t M, int64_t N, double eps);
dlt_status dlt__cuda_ln_bwd(dlt_ctx *ctx, dlt_tensor *dx, int32_t dx_acc, dlt_tensor *dw, dlt_tensor *db, int32_t beta_acc,
                            const dlt_tensor *dy, const dlt_tensor *x, const dlt_tensor *mean,
                            const dlt_tensor *rstd, const dlt_tensor *w, int64_t M, int64_t N);
dlt_status dlt__cuda_add_ln_fwd(dlt_ctx *ctx, dlt_tensor *sum, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd,
                                const dlt_tensor *x, const dlt_tensor *add, const dlt_tensor *w, const dlt_tensor *b,
                                int64_t M, int64_t N, double eps);
dlt_status dlt__cuda_add_ln_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *prev, dlt_tensor *dcast, dlt_tensor *dw,
                                dlt_tensor *db, int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *sum,
                                const dlt_tensor *mean, const dlt_tensor *rstd, const dlt_tensor *w, int64_t M,
                                int64_t N);
dlt_status dlt__cuda_dropout(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double p, uint64_t seed,
                             uint64_t offset);
dlt_status dlt__cuda_rng_advance(dlt_ctx *ctx, uint64_t delta);
dlt_status dlt__cuda_embedding_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *w, const dlt_tensor *idx);
dlt_status dlt__cuda_embedding_bwd(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *dy, const dlt_tensor *idx,
                                   int64_t padding_idx, int32_t beta);
dlt_status dlt__cuda_sdpa_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *q,
                              const dlt_tensor *k, const dlt_tensor *v, const dlt_sdpa_params *p);
dlt_status dlt__cuda_sdpa_bwd(dlt_ctx *ctx, dlt_tensor *dq, dlt_tensor *dk, dlt_tensor *dv, const dlt_tensor *dout,
                              const dlt_tensor *q, const dlt_tensor *k, const dlt_tensor *v, const dlt_tensor *o,
                              const dlt_tensor *lse, const dlt_sdpa_params *p);
/* packed qkv (attention.cu): cuDNN, else the flash kernels, in place; else *served = 0 */
dlt_status dlt__cuda_sdpa_qkv_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *qkv,
                                  const dlt_sdpa_params *p, int *served);
dlt_status dlt__cuda_sdpa_qkv_bwd(dlt_ctx *ctx, dlt_tensor *dqkv, const dlt_tensor *dout, const dlt_tensor *qkv,
                                  const dlt_tensor *o, const dlt_tensor *lse, const dlt_sdpa_params *p, int *served);
#define DLT_CUDA_TRANSFORMER_ENTRIES                                                          \
    .binary = dlt__cuda_binary, .copy_nd = dlt__cuda_copy_nd, .unary = dlt__cuda_unary,       \
    .unary_bwd = dlt__cuda_unary_bwd, .reduce = dlt__cuda_reduce, .gemm = dlt__cuda_gemm,     \
    .softmax_fwd = dlt__cuda_softmax_fwd, .softmax_bwd = dlt__cuda_softmax_bwd,               \
    .ln_fwd = dlt__cuda_ln_fwd, .ln_bwd = dlt__cuda_ln_bwd, .add_ln_fwd = dlt__cuda_add_ln_fwd, .add_ln_bwd = dlt__cuda_add_ln_bwd, .dropout = dlt__cuda_dropout,     \
    .embedding_fwd = dlt__cuda_embedding_fwd, .embedding_bwd = dlt__cuda_embedding_bwd,       \
    .sdpa_fwd = dlt__cuda_sdpa_fwd, .sdpa_bwd = dlt__cuda_sdpa_bwd,                           \
    .sdpa_qkv_fwd = dlt__cuda_sdpa_qkv_fwd, .sdpa_qkv_bwd = dlt__cuda_sdpa_qkv_bwd,           \
    .rng_advance = dlt__cuda_rng_advance,
/* ---- optim: adamw.cu, clip_grad_norm.cu (compile-checked only so far) ---- */
dlt_status dlt__cuda_adamw_step(dlt_ctx *ctx, const dlt_adamw_launch *L);
dlt_status dlt__cuda_clip_grad_norm(dlt_ctx *ctx, const dlt_clip_launch *L);
#define DLT_CUDA_OPTIM_ENTRIES .adamw_step = dlt__cuda_adamw_step, .clip_grad_norm = dlt__cuda_clip_grad_norm,
/* ---- dist: nccl.c (NCCL by dlopen; compile-checked only so far) ---- */
dlt_status dlt__cuda_nccl_unique_id(dlt_ctx *ctx, void *id, size_t n, int32_t *version);
dlt_status dlt__cuda_nccl_init(dlt_ctx *ctx, const void *id, int32_t rank, int32_t world, int64_t timeout_ms,
                               void **comm);
void dlt__cuda_nccl_free(dlt_ctx *ctx, void *comm, int32_t abort);
dlt_status dlt__cuda_nccl_run(dlt_ctx *ctx, void *comm, const dlt_nccl_launch *L);
dlt_status dlt__cuda_nccl_fork(dlt_ctx *ctx, void *comm);
dlt_status dlt__cuda_nccl_join(dlt_ctx *ctx, void *comm);
dlt_status dlt__cuda_nccl_check(dlt_ctx *ctx, void *comm);
dlt_status dlt__cuda_nccl_wait(dlt_ctx *ctx, void *comm);
#define DLT_CUDA_DIST_ENTRIES                                                                 \
    .nccl_unique_id = dlt__cuda_nccl_unique_id, .nccl_init = dlt__cuda_nccl_init,             \
    .nccl_free = dlt__cuda_nccl_free, .nccl_run = dlt__cuda_nccl_run,                         \
    .nccl_fork = dlt__cuda_nccl_fork, .nccl_join = dlt__cuda_nccl_join,                       \
    .nccl_check = dlt__cuda_nccl_check, .nccl_wait = dlt__cuda_nccl_wait,

#ifdef __cplusplus
}
#endif

#define DLT_CUDA_OPS_ENTRIES                                                                  \
    DLT_CUDA_CONV2D_ENTRIES DLT_CUDA_BATCHNORM_ENTRIES DLT_CUDA_POOL_ENTRIES                  \
    DLT_CUDA_LINEAR_ENTRIES DLT_CUDA_CROSS_ENTROPY_ENTRIES DLT_CUDA_SGD_ENTRIES              \
    DLT_CUDA_AMP_ENTRIES DLT_CUDA_DATA_ENTRIES DLT_CUDA_TRANSFORMER_ENTRIES DLT_CUDA_OPTIM_ENTRIES \
    DLT_CUDA_DIST_ENTRIES

#endif
