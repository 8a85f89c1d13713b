/*
 * ops_cpu.h - CPU kernels of the layer ops, one file each, and the backend-table entries
 * they fill. Each section belongs to one file: when the file implements its kernels, its
 * ENTRIES macro lists them (designated initialisers for struct dlt_backend).
 */
#ifndef DLT_OPS_CPU_H
#define DLT_OPS_CPU_H

#include "cpu.h"

/* ---- conv2d.c ---- */
dlt_status dlt__cpu_conv2d_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                               const dlt_tensor *w, const dlt_tensor *b, const dlt_conv_params *p);
dlt_status dlt__cpu_conv2d_bwd_data(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                    const dlt_tensor *w, const dlt_conv_params *p, int32_t beta);
dlt_status dlt__cpu_conv2d_bwd_filter(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *x,
                                      const dlt_tensor *dy, const dlt_conv_params *p,
                                      int32_t beta);
dlt_status dlt__cpu_conv2d_bwd_bias(dlt_ctx *ctx, dlt_tensor *db, const dlt_tensor *dy,
                                    int32_t beta);
#define DLT_CPU_CONV2D_ENTRIES                                                                \
    .conv2d_fwd = dlt__cpu_conv2d_fwd, .conv2d_bwd_data = dlt__cpu_conv2d_bwd_data,           \
    .conv2d_bwd_filter = dlt__cpu_conv2d_bwd_filter, .conv2d_bwd_bias = dlt__cpu_conv2d_bwd_bias,

/* ---- batchnorm.c ---- */
dlt_status dlt__cpu_bn_fwd_train(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                                 const dlt_tensor *residual, int32_t relu, const dlt_tensor *gamma,
                                 const dlt_tensor *beta, dlt_tensor *running_mean,
                                 dlt_tensor *running_var, dlt_tensor *save_mean,
                                 dlt_tensor *save_invstd, double momentum, double eps);
dlt_status dlt__cpu_bn_fwd_eval(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                                const dlt_tensor *residual, int32_t relu, const dlt_tensor *gamma,
                                const dlt_tensor *beta, const dlt_tensor *running_mean,
                                const dlt_tensor *running_var, dlt_tensor *save_mean,
                                dlt_tensor *save_invstd, double eps);
dlt_status dlt__cpu_bn_bwd(dlt_ctx *ctx, dlt_tensor *dx, dlt_tensor *dresidual, dlt_tensor *dgamma,
                           dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy,
                           const dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *gamma,
                           const dlt_tensor *save_mean, const dlt_tensor *save_invstd,
                           int32_t batch_stats);
#define DLT_CPU_BATCHNORM_ENTRIES                                                             \
    .bn_fwd_train = dlt__cpu_bn_fwd_train, .bn_fwd_eval = dlt__cpu_bn_fwd_eval,               \
    .bn_bwd = dlt__cpu_bn_bwd,

/* ---- pool.c (max pool, global average pool) ---- */
dlt_status dlt__cpu_maxpool_fwd(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *indices,
                                const dlt_tensor *x, const dlt_pool_params *p);
dlt_status dlt__cpu_maxpool_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                const dlt_tensor *indices, const dlt_pool_params *p);
dlt_status dlt__cpu_gavgpool_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x);
dlt_status dlt__cpu_gavgpool_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy);
#define DLT_CPU_POOL_ENTRIES                                                                  \
    .maxpool_fwd = dlt__cpu_maxpool_fwd, .maxpool_bwd = dlt__cpu_maxpool_bwd,                 \
    .gavgpool_fwd = dlt__cpu_gavgpool_fwd, .gavgpool_bwd = dlt__cpu_gavgpool_bwd,

/* ---- linear.c ---- */
dlt_status dlt__cpu_linear_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                               const dlt_tensor *w, const dlt_tensor *b);
dlt_status dlt__cpu_linear_bwd_data(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                    const dlt_tensor *w);
dlt_status dlt__cpu_linear_bwd_weight(dlt_ctx *ctx, dlt_tensor *dw, dlt_tensor *db,
                                      const dlt_tensor *x, const dlt_tensor *dy, int32_t beta);
#define DLT_CPU_LINEAR_ENTRIES                                                                \
    .linear_fwd = dlt__cpu_linear_fwd, .linear_bwd_data = dlt__cpu_linear_bwd_data,           \
    .linear_bwd_weight = dlt__cpu_linear_bwd_weight,

/* ---- cross_entropy.c (and count_correct) ---- */
dlt_status dlt__cpu_ce_fwd(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, const dlt_tensor *logits,
                            const dlt_tensor *targets, const dlt_ce_params *p);
dlt_status dlt__cpu_ce_bwd(dlt_ctx *ctx, dlt_tensor *dlogits, const dlt_tensor *dloss,
                            const dlt_tensor *logits, const dlt_tensor *targets, const dlt_tensor *saved,
                            const dlt_ce_params *p);
dlt_status dlt__cpu_ce_fwd_grad(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, dlt_tensor *logits,
                                const dlt_tensor *targets, const dlt_ce_params *p, int *served);
dlt_status dlt__cpu_ce_grad_scale(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dloss);
dlt_status dlt__cpu_count_correct(dlt_ctx *ctx, void *correct, const dlt_tensor *logits,
                                  const dlt_tensor *targets);
#define DLT_CPU_CROSS_ENTROPY_ENTRIES                                                         \
    .ce_fwd = dlt__cpu_ce_fwd, .ce_bwd = dlt__cpu_ce_bwd, .ce_fwd_grad = dlt__cpu_ce_fwd_grad,     \
    .ce_grad_scale = dlt__cpu_ce_grad_scale,                                                   \
    .count_correct = dlt__cpu_count_correct,

/* ---- sgd.c ---- */
dlt_status dlt__cpu_sgd_step(dlt_ctx *ctx, const dlt_sgd_launch *L);
dlt_status dlt__cpu_sgd_state(dlt_ctx *ctx, void *state, const dlt_optim_state_op *op);
#define DLT_CPU_SGD_ENTRIES .sgd_step = dlt__cpu_sgd_step, .sgd_state = dlt__cpu_sgd_state,

/* ---- amp.c (unscale + inf check, scale update) ---- */
dlt_status dlt__cpu_amp_unscale(dlt_ctx *ctx, dlt_tensor **grads, int32_t n, void *found_inf,
                                const void *scale);
dlt_status dlt__cpu_amp_update(dlt_ctx *ctx, void *scale, void *growth_tracker,
                               const void *found_inf, uint32_t mask, double growth_factor,
                               double backoff_factor, int32_t growth_interval);
#define DLT_CPU_AMP_ENTRIES .amp_unscale = dlt__cpu_amp_unscale, .amp_update = dlt__cpu_amp_update,

/* ---- data.c (batch gather, epoch order, loader cursor) ---- */
dlt_status dlt__cpu_data_gather(dlt_ctx *ctx, const dlt_data_launch *L);
dlt_status dlt__cpu_data_order(dlt_ctx *ctx, int32_t *perm, int64_t count, uint64_t seed,
                               int64_t epoch);
dlt_status dlt__cpu_data_cursor_set(dlt_ctx *ctx, dlt_data_cursor *cursor, int64_t batch,
                                    int64_t epoch);
dlt_status dlt__cpu_data_cursor_advance(dlt_ctx *ctx, dlt_data_cursor *cursor);
dlt_status dlt__cpu_data_tokens(dlt_ctx *ctx, const dlt_token_launch *L);
#define DLT_CPU_DATA_ENTRIES                                                                  \
    .data_gather = dlt__cpu_data_gather, .data_order = dlt__cpu_data_order,                   \
    .data_cursor_set = dlt__cpu_data_cursor_set,                                              \
    .data_cursor_advance = dlt__cpu_data_cursor_advance, .data_tokens = dlt__cpu_data_tokens,

/* ---- transformer ops: binary.c (binary, copy_nd), pointwise.c, reduce.c, matmul.c,
 * softmax.c, layer_norm.c, dropout.c, embedding.c, attention.c ---- */
dlt_status dlt__cpu_binary(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *a, const dlt_nd_operand *oa,
                           const dlt_tensor *b, const dlt_nd_operand *ob, const dlt_nd *s, int32_t op,
                           double alpha);
dlt_status dlt__cpu_copy_nd(dlt_ctx *ctx, dlt_tensor *dst, const dlt_nd_operand *od, const dlt_tensor *src,
                            const dlt_nd_operand *os, const dlt_nd *s);
dlt_status dlt__cpu_unary(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, int32_t op, double alpha);
dlt_status dlt__cpu_unary_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *x,
                              const dlt_tensor *y, int32_t op, double alpha);
dlt_status dlt__cpu_reduce(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_reduce_spec *r,
                           int32_t op, double alpha);
dlt_status dlt__cpu_gemm(dlt_ctx *ctx, dlt_tensor *c, const dlt_tensor *a, const dlt_tensor *b,
                         const dlt_gemm_batch *g);
dlt_status dlt__cpu_softmax_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, int64_t outer, int64_t n,
                                int64_t inner, int32_t log_);
dlt_status dlt__cpu_softmax_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y,
                                int64_t outer, int64_t n, int64_t inner, int32_t log_);
dlt_status dlt__cpu_ln_fwd(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd, const dlt_tensor *x,
                           const dlt_tensor *w, const dlt_tensor *b, int64_t M, int64_t N, double eps);
dlt_status dlt__cpu_ln_bwd(dlt_ctx *ctx, dlt_tensor *dx, int32_t dx_acc, dlt_tensor *dw, dlt_tensor *db, int32_t beta_acc,
                           const dlt_tensor *dy, const dlt_tensor *x, const dlt_tensor *mean,
                           const dlt_tensor *rstd, const dlt_tensor *w, int64_t M, int64_t N);
dlt_status dlt__cpu_add_ln_fwd(dlt_ctx *ctx, dlt_tensor *sum, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd,
                               const dlt_tensor *x, const dlt_tensor *add, const dlt_tensor *w, const dlt_tensor *b,
                               int64_t M, int64_t N, double eps);
dlt_status dlt__cpu_add_ln_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *prev, dlt_tensor *dcast, dlt_tensor *dw,
                               dlt_tensor *db, int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *sum,
                               const dlt_tensor *mean, const dlt_tensor *rstd, const dlt_tensor *w, int64_t M,
                               int64_t N);
dlt_status dlt__cpu_dropout(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double p, uint64_t seed,
                            uint64_t offset);
dlt_status dlt__cpu_rng_advance(dlt_ctx *ctx, uint64_t delta);
dlt_status dlt__cpu_embedding_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *w, const dlt_tensor *idx);
dlt_status dlt__cpu_embedding_bwd(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *dy, const dlt_tensor *idx,
                                  int64_t padding_idx, int32_t beta);
dlt_status dlt__cpu_sdpa_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *q,
                             const dlt_tensor *k, const dlt_tensor *v, const dlt_sdpa_params *p);
dlt_status dlt__cpu_sdpa_bwd(dlt_ctx *ctx, dlt_tensor *dq, dlt_tensor *dk, dlt_tensor *dv, const dlt_tensor *dout,
                             const dlt_tensor *q, const dlt_tensor *k, const dlt_tensor *v, const dlt_tensor *o,
                             const dlt_tensor *lse, const dlt_sdpa_params *p);
#define DLT_CPU_TRANSFORMER_ENTRIES                                                           \
    .binary = dlt__cpu_binary, .copy_nd = dlt__cpu_copy_nd, .unary = dlt__cpu_unary,          \
    .unary_bwd = dlt__cpu_unary_bwd, .reduce = dlt__cpu_reduce, .gemm = dlt__cpu_gemm,        \
    .softmax_fwd = dlt__cpu_softmax_fwd, .softmax_bwd = dlt__cpu_softmax_bwd,                 \
    .ln_fwd = dlt__cpu_ln_fwd, .ln_bwd = dlt__cpu_ln_bwd, .add_ln_fwd = dlt__cpu_add_ln_fwd, .add_ln_bwd = dlt__cpu_add_ln_bwd, .dropout = dlt__cpu_dropout,        \
    .rng_advance = dlt__cpu_rng_advance, .embedding_fwd = dlt__cpu_embedding_fwd,             \
    .embedding_bwd = dlt__cpu_embedding_bwd, .sdpa_fwd = dlt__cpu_sdpa_fwd,                   \
    .sdpa_bwd = dlt__cpu_sdpa_bwd,
/* ---- optim: adamw.c, clip_grad_norm.c ---- */
dlt_status dlt__cpu_adamw_step(dlt_ctx *ctx, const dlt_adamw_launch *L);
dlt_status dlt__cpu_clip_grad_norm(dlt_ctx *ctx, const dlt_clip_launch *L);
#define DLT_CPU_OPTIM_ENTRIES .adamw_step = dlt__cpu_adamw_step, .clip_grad_norm = dlt__cpu_clip_grad_norm,

#define DLT_CPU_OPS_ENTRIES                                                                   \
    DLT_CPU_CONV2D_ENTRIES DLT_CPU_BATCHNORM_ENTRIES DLT_CPU_POOL_ENTRIES                      \
    DLT_CPU_LINEAR_ENTRIES DLT_CPU_CROSS_ENTROPY_ENTRIES DLT_CPU_SGD_ENTRIES                  \
    DLT_CPU_AMP_ENTRIES DLT_CPU_DATA_ENTRIES DLT_CPU_TRANSFORMER_ENTRIES DLT_CPU_OPTIM_ENTRIES

#endif
