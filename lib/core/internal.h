/*
 * internal.h - the library's private core, one header per concern, and the backend
 * interface: status.h (errors and the check macros), ctx.h (the context), tensor.h (storage
 * and tensors), tape.h (autograd), the kernel contract (lib/kernel/: launch and argument
 * structs, math both backends run), then struct dlt_backend below, the table through which
 * the front doors reach a device. Included by lib/ (C) and by cuda/ (C and C++), so every
 * part stays in the common subset of C11 and C++17 and includes no CUDA header.
 *
 * Names: dlt__* are internal functions and types (hidden by the version script; a few older
 * internal types keep a single underscore, see docs/architecture.md); dlt_* are public.
 */
#ifndef DLT_INTERNAL_H
#define DLT_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "dltrain.h"
#include "../kernel/cnn.h"
#include "../kernel/data.h"
#include "../kernel/nd.h"
#include "../kernel/optim.h"
#include "../kernel/unary.h"
#include "ctx.h"
#include "status.h"
#include "tape.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * Backend interface. Each backend (lib/cpu, cuda/) fills one table. Kernels receive
 * allocated outputs; shapes, dtypes and formats were validated by the op front door
 * (lib/ops), so backends only return NOT_SUPPORTED for combinations they lack, or
 * device/library failures. Nothing here synchronises with the host unless it says so.
 * "beta" arguments are 0 (overwrite) or 1 (accumulate into the destination).
 *
 * What the front doors guarantee to kernels:
 *  - all tensors of one call are on the kernel's context, with the shapes documented below;
 *  - conv2d: x, w, y (and dx, dw, dy) share one memory format and one float dtype (the front
 *    door casts and converts); bias has that dtype too; dw/db have w's/b's dtype and format;
 *  - batchnorm: x, y, residual, dx, dy, dresidual share dtype and format; gamma, beta, running
 *    stats, save_mean, save_invstd, dgamma, dbeta are f32 [C];
 *  - pooling: x, y, dx, dy share dtype and format; indices are i32 in y's format;
 *  - linear: 2-D contiguous tensors of one float dtype;
 *  - cross entropy: logits [N,K] contiguous, any float dtype; loss, dloss f32 one element.
 * Kernels may assume numel > 0 (front doors handle empty tensors).
 * ------------------------------------------------------------------------------------- */
/* What the CUDA runtime and libraries report for one device (the device_query entry; raw,
 * before lib/device/info.c derives core counts and bandwidth). */
typedef struct dlt_device_props {
    char name[256];
    char pci_bus_id[32];
    int32_t cc_major, cc_minor;
    int32_t sm_count;
    int64_t memory_bytes;
    int32_t memory_bus_bits;
    int64_t memory_clock_khz;
    int64_t l2_bytes;
    int64_t sm_clock_khz;
    int32_t driver_version, runtime_version;
    int64_t cudnn_version, cublas_version;
} dlt_device_props;

/* dist: one NCCL collective (cuda/nccl.c). count is in elements: the whole tensor for
 * all-reduce and broadcast, one rank's part for all-gather (send) and reduce-scatter
 * (recv). dtype is a DLT_* dtype, op a DLT_REDUCE_* (dist.h). */
#define DLT_COLL_ALL_REDUCE 0
#define DLT_COLL_BROADCAST 1
#define DLT_COLL_ALL_GATHER 2
#define DLT_COLL_REDUCE_SCATTER 3
typedef struct dlt_nccl_launch {
    int32_t coll;
    int32_t dtype;
    int32_t op;
    int32_t root;
    const void *send;
    void *recv;
    size_t count;
    int32_t side; /* 1: on the communicator's side stream (DDP's overlap), 0: the context's */
    int32_t pad_;
} dlt_nccl_launch;

struct dlt_backend {
    const char *name;
    /* lifetime */
    dlt_status (*ctx_init)(dlt_ctx *ctx);
    void (*ctx_fini)(dlt_ctx *ctx);
    dlt_status (*device_name)(dlt_ctx *ctx, char *buf, size_t n);
    /* refactor: device queries (dlt_cuda_device_count, lib/device), so that lib/ reaches
     * CUDA through this table only; NULL on the CPU backend. device_count and
     * device_pci_bus_id set no message (callers fall back quietly); device_query names func
     * in its messages (NO_DEVICE: no driver or no such device). */
    int32_t (*device_count)(void);
    dlt_status (*device_query)(int32_t index, const char *func, dlt_device_props *out);
    dlt_status (*device_pci_bus_id)(int32_t index, char *buf, size_t n);
    /* micro-benchmarks on a context of this backend (arguments checked by lib/device/info.c);
     * they synchronise */
    dlt_status (*bench_copy)(dlt_ctx *ctx, size_t bytes, double *gbytes_per_s);
    dlt_status (*bench_gemm)(dlt_ctx *ctx, int32_t kind, int64_t m, int64_t n, int64_t k,
                             double *tflops);

    /* memory: raw bytes on the device, ordered on the context's stream */
    dlt_status (*alloc)(dlt_ctx *ctx, size_t nbytes, void **ptr);
    void (*free)(dlt_ctx *ctx, void *ptr, size_t nbytes);
    dlt_status (*memcpy_h2d)(dlt_ctx *ctx, void *dst, const void *src, size_t n);
    dlt_status (*memcpy_d2h)(dlt_ctx *ctx, void *dst, const void *src, size_t n); /* syncs */
    dlt_status (*memcpy_d2d)(dlt_ctx *ctx, void *dst, const void *src, size_t n);
    dlt_status (*memset0)(dlt_ctx *ctx, void *dst, size_t n);
    dlt_status (*synchronize)(dlt_ctx *ctx);
    void (*wait_plans)(dlt_ctx *ctx); /* NULL: nothing is built in the background */
    dlt_status (*mem_stat)(dlt_ctx *ctx, int32_t which, uint64_t *out);
    dlt_status (*mem_reset_peak)(dlt_ctx *ctx);
    dlt_status (*empty_cache)(dlt_ctx *ctx);

    /* elementwise and layout */
    /* dst = src converted: same logical shape; dtype and format may differ */
    dlt_status (*convert)(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src);
    dlt_status (*fill)(dlt_ctx *ctx, dlt_tensor *t, double value);
    /* normal=0: uniform [a, b); normal=1: N(a, b^2). Element order is logical. */
    dlt_status (*rand)(dlt_ctx *ctx, dlt_tensor *t, int32_t normal, double a, double b,
                       uint64_t seed, uint64_t offset);
    /* y = a + b (same shape, dtype, format) */
    dlt_status (*add)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *a, const dlt_tensor *b);
    /* dst = beta*dst + src (same shape and format; dtypes may differ, math in fp32) */
    dlt_status (*accumulate)(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src, int32_t beta);
    /* y = x * (s ? s[0] : 1) * alpha; s is a one-element f32 tensor or NULL */
    dlt_status (*scale)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *s,
                        double alpha);
    /* y[0] = alpha * sum(x), accumulated in fp32 (y is one element, any float dtype) */
    dlt_status (*sum)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double alpha);
    /* dx[:] = dy[0] * alpha */
    dlt_status (*broadcast_scalar)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, double alpha);

    /* relu: y = max(x, 0) (NaN propagates); backward dx = dy unless y <= 0 (NaN passes, as PyTorch) */
    dlt_status (*relu_fwd)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x);
    dlt_status (*relu_bwd)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y);

    /* conv2d: x [N,C,H,W], w [K,C/g,R,S], b [K] or NULL, y [N,K,P,Q] */
    dlt_status (*conv2d_fwd)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *w,
                             const dlt_tensor *b, const dlt_conv_params *p);
    dlt_status (*conv2d_bwd_data)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                  const dlt_tensor *w, const dlt_conv_params *p, int32_t beta);
    dlt_status (*conv2d_bwd_filter)(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *x,
                                    const dlt_tensor *dy, const dlt_conv_params *p, int32_t beta);
    dlt_status (*conv2d_bwd_bias)(dlt_ctx *ctx, dlt_tensor *db, const dlt_tensor *dy, int32_t beta);

    /* batchnorm2d over (N,H,W) per channel. gamma/beta/running/save are f32 [C].
     * Training: y = act(gamma*(x-mean)*invstd + beta [+ residual]); saves mean and invstd
     * (1/sqrt(biased var + eps)); updates running stats with momentum and the unbiased
     * variance when the running pointers are non-NULL. relu=1 applies max(.,0) last. */
    dlt_status (*bn_fwd_train)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                               const dlt_tensor *residual, int32_t relu, const dlt_tensor *gamma,
                               const dlt_tensor *beta, dlt_tensor *running_mean,
                               dlt_tensor *running_var, dlt_tensor *save_mean,
                               dlt_tensor *save_invstd, double momentum, double eps);
    /* Evaluation: normalises with running stats. save_* (may be NULL) receive the running
     * mean and 1/sqrt(running_var + eps) for a backward pass. */
    dlt_status (*bn_fwd_eval)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x,
                              const dlt_tensor *residual, int32_t relu, const dlt_tensor *gamma,
                              const dlt_tensor *beta, const dlt_tensor *running_mean,
                              const dlt_tensor *running_var, dlt_tensor *save_mean,
                              dlt_tensor *save_invstd, double eps);
    /* Backward. y (may be NULL) is the forward output: when relu was fused, dy is masked by
     * y <= 0 first (zeroed there). dresidual (may be NULL) receives the masked dy. dgamma/dbeta (may be NULL)
     * are written with beta_acc. batch_stats=1: the training formula; 0: stats constant. */
    dlt_status (*bn_bwd)(dlt_ctx *ctx, dlt_tensor *dx, dlt_tensor *dresidual, dlt_tensor *dgamma,
                         dlt_tensor *dbeta, int32_t beta_acc, const dlt_tensor *dy,
                         const dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *gamma,
                         const dlt_tensor *save_mean, const dlt_tensor *save_invstd,
                         int32_t batch_stats);

    /* max_pool2d: indices (int32 [N,C,P,Q], same format as y) hold h*W+w of the chosen
     * input; the first maximum in window scan order wins, NaN wins over numbers. */
    dlt_status (*maxpool_fwd)(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *indices,
                              const dlt_tensor *x, const dlt_pool_params *p);
    dlt_status (*maxpool_bwd)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                              const dlt_tensor *indices, const dlt_pool_params *p);

    /* global average pool: x [N,C,H,W] -> y [N,C,1,1] (mean in fp32) */
    dlt_status (*gavgpool_fwd)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x);
    dlt_status (*gavgpool_bwd)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy);

    /* linear: x [M,K], w [N,K], b [N] or NULL, y [M,N] = x w^T + b */
    dlt_status (*linear_fwd)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *w,
                             const dlt_tensor *b);
    dlt_status (*linear_bwd_data)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                  const dlt_tensor *w);
    /* g = gelu_tanh(x w^T + b) with h = x w^T + b kept (the GELU's input), one GEMM whose
     * epilogue applies the bias and the GELU; *served = 0: not available for this call,
     * nothing launched. NULL: never (the front door runs linear_fwd and unary). */
    dlt_status (*linear_fwd_gelu)(dlt_ctx *ctx, dlt_tensor *g, dlt_tensor *h, const dlt_tensor *x,
                                  const dlt_tensor *w, const dlt_tensor *b, int *served);
    /* dx = gelu_tanh'(h) * (dy w): the data gradient of a linear whose input was gelu_tanh(h),
     * one GEMM whose epilogue multiplies the fp32 accumulator by the GELU's derivative at h (a
     * pre-activation linear_fwd_gelu wrote; h and dx [M,K]); *served = 0: not available for this
     * call, nothing launched. NULL: never (the front door runs linear_bwd_data and unary_bwd). */
    dlt_status (*linear_bwd_data_gelu)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *w,
                                       const dlt_tensor *h, int *served);
    /* dw = beta*dw + dy^T x ; db = beta*db + sum_rows(dy) (db may be NULL) */
    dlt_status (*linear_bwd_weight)(dlt_ctx *ctx, dlt_tensor *dw, dlt_tensor *db,
                                    const dlt_tensor *x, const dlt_tensor *dy, int32_t beta);

    /* cross entropy over logits [N, K] (any float dtype, math in fp32) with int32/int64
     * targets [N] (see dlt_ce_params: label smoothing, padded classes, reduction). loss: f32
     * [1] (mean, sum) or [N] (none). saved: f32 [2N + 1]: logsumexp per row, then the
     * count of non-ignored rows, then room for per-row losses (a backend's scratch). */
    dlt_status (*ce_fwd)(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, const dlt_tensor *logits,
                         const dlt_tensor *targets, const dlt_ce_params *p);
    dlt_status (*ce_bwd)(dlt_ctx *ctx, dlt_tensor *dlogits, const dlt_tensor *dloss,
                         const dlt_tensor *logits, const dlt_tensor *targets,
                         const dlt_tensor *saved, const dlt_ce_params *p);
    /* ce_fwd, then the gradient for dloss = 1 written over the logits (mean or sum; the
     * caller gave the logits up): one pass over rows held on chip, where ce_fwd and
     * ce_bwd read the logits twice from memory. The loss and saved are ce_fwd's, the
     * gradient ce_bwd's for dloss = 1, bit for bit. *served = 0 (nothing launched) where the
     * backend has no such kernel for these operands: the op then runs ce_fwd and, in the
     * backward, ce_bwd. NULL: never. */
    dlt_status (*ce_fwd_grad)(dlt_ctx *ctx, dlt_tensor *loss, dlt_tensor *saved, dlt_tensor *logits,
                              const dlt_tensor *targets, const dlt_ce_params *p, int *served);
    /* dx *= dloss[0] in place, nothing when dloss[0] == 1 (read on the device: no sync) */
    dlt_status (*ce_grad_scale)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dloss);

    /* optimizer and scaler */
    /* Applies PyTorch's foreach SGD to L->params (see dlt_sgd_launch), refreshes the
     * low-precision copies, sets the momentum flags of the updated parameters; then, unless
     * skipped: state->step++, last_applied = 1, lr = schedule(...) when one is given. */
    dlt_status (*sgd_step)(dlt_ctx *ctx, const dlt_sgd_launch *L);
    /* For every grad: found_inf = 1 if any element is inf/NaN; multiply in place by
     * inv = (float)(1.0 / (double)scale[0]) unless inv == 1. found_inf is not cleared
     * first. */
    dlt_status (*amp_unscale)(dlt_ctx *ctx, dlt_tensor **grads, int32_t n, void *found_inf,
                              const void *scale);
    /* PyTorch's _amp_update_scale_: scale f32, growth_tracker i32; the inf flag is the sum
     * of found_inf[i] (f32) over the bits i set in mask. */
    dlt_status (*amp_update)(dlt_ctx *ctx, void *scale, void *growth_tracker, const void *found_inf,
                             uint32_t mask, double growth_factor, double backoff_factor,
                             int32_t growth_interval);

    /* data: one batch from resident uint8 images */
    dlt_status (*data_gather)(dlt_ctx *ctx, const dlt_data_launch *L);

    /* count of argmax(logits[i]) == target[i] added to *correct (device/host int64) */
    dlt_status (*count_correct)(dlt_ctx *ctx, void *correct, const dlt_tensor *logits,
                                const dlt_tensor *targets);

    /* dsts[i] = betas[i]*dsts[i] + srcs[i] for n pairs in one launch (dtypes may differ per
     * pair, formats match, no dst twice). Used by backward to apply the many small fp16 ->
     * fp32 parameter-gradient accumulations of an autocast step together. */
    dlt_status (*accumulate_multi)(dlt_ctx *ctx, int32_t n, dlt_tensor *const *dsts,
                                   const dlt_tensor *const *srcs, const int32_t *betas);

    /* profiler ranges (NVTX on CUDA; NULL on the CPU). Names are static strings. */
    void (*range_push)(dlt_ctx *ctx, const char *name);
    void (*range_pop)(dlt_ctx *ctx);

    /* timing events (lib/core/event.c) */
    dlt_status (*event_create)(dlt_ctx *ctx, void **ev);
    dlt_status (*event_record)(dlt_ctx *ctx, void *ev);
    dlt_status (*event_elapsed)(dlt_ctx *ctx, void *start, void *end, double *ms); /* syncs */
    void (*event_destroy)(dlt_ctx *ctx, void *ev);

    /* whole-step graphs (cuda/graph.c; NULL on the CPU: eager fallback) */
    /* on = 1 before the last warm-up step, 0 after it: the step's allocations are recorded
     * to size the memory the capture will place them in */
    void (*capture_trace)(dlt_ctx *ctx, int32_t on);
    dlt_status (*capture_begin)(dlt_ctx *ctx);
    /* ends capture; ok = 0 discards it. On success *exec is an executable graph and stats
     * (DLT_GRAPH_STAT_COUNT entries, dlt_graph_stat_kind) its node counts */
    dlt_status (*capture_end)(dlt_ctx *ctx, int32_t ok, void **exec, int64_t *stats);
    dlt_status (*graph_launch)(dlt_ctx *ctx, void *exec);
    void (*graph_free)(dlt_ctx *ctx, void *exec);
    /* the side stream (lib/core/side.c; NULL: one stream). side_fork: the side stream waits
     * for the work enqueued so far, and the kernels enqueued until side_unfork go to it,
     * with a workspace of their own (no scratch, counters or allocations); side_unfork
     * switches back even when it fails; side_join: the main stream waits for the side's.
     * *forked = 0 from side_fork: not now (run in line) */
    dlt_status (*side_fork)(dlt_ctx *ctx, int32_t *forked);
    dlt_status (*side_unfork)(dlt_ctx *ctx);
    dlt_status (*side_join)(dlt_ctx *ctx);

    /* ---- extensions: each area appends its entries in its own block ---- */
    /* transformer ops (lib/ops/{binary,pointwise,reduce,layout,matmul,softmax,layer_norm,
     * dropout,embedding,attention}.c; lib/cpu and cuda files of the same stems). Tensors
     * handed to these entries are contiguous unless an entry takes strides (nd.h). */
    /* y (contiguous, numel == s->numel) = op(a, b) elementwise over s; a and b are read
     * through their operand maps; dtypes are any float, possibly different (math in fp32) */
    dlt_status (*binary)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *a, const dlt_nd_operand *oa,
                         const dlt_tensor *b, const dlt_nd_operand *ob, const dlt_nd *s,
                         int32_t op, double alpha);
    /* y = op(x), same shape/format/dtype; backward dx = dy * op'(x) (x, y as DLT_UN_* says) */
    dlt_status (*unary)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, int32_t op, double alpha);
    dlt_status (*unary_bwd)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *x,
                            const dlt_tensor *y, int32_t op, double alpha);
    /* dst[od] = src[os] over s (same dtype): permute, narrow, cat, expand and their gradients */
    dlt_status (*copy_nd)(dlt_ctx *ctx, dlt_tensor *dst, const dlt_nd_operand *od,
                          const dlt_tensor *src, const dlt_nd_operand *os, const dlt_nd *s);
    /* y [kept numel] (contiguous; float, or i64 for argmax) = reduction of x (any float
     * dtype; sums accumulate in fp32 on CUDA, double on the CPU) */
    dlt_status (*reduce)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_reduce_spec *r,
                         int32_t op, double alpha);
    /* batched GEMM, see dlt_gemm_batch */
    dlt_status (*gemm)(dlt_ctx *ctx, dlt_tensor *c, const dlt_tensor *a, const dlt_tensor *b,
                       const dlt_gemm_batch *g);
    /* softmax over the middle dimension of x viewed as [outer, n, inner] (log: log_softmax);
     * backward from the output y: dx = y * (dy - sum(dy*y)) or dy - exp(y) * sum(dy) */
    dlt_status (*softmax_fwd)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, int64_t outer,
                              int64_t n, int64_t inner, int32_t log);
    dlt_status (*softmax_bwd)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y,
                              int64_t outer, int64_t n, int64_t inner, int32_t log);
    /* layer norm over rows of x viewed as [M, N]: y = (x - mean) * rstd * w + b (w, b [N] or
     * NULL, any float dtype); mean, rstd f32 [M] saved (rstd = 1/sqrt(biased var + eps)).
     * Backward writes dx (dx_acc 0) or adds into it (1), and dw/db (may be NULL) with
     * beta_acc 0 (overwrite) or 1 (add). */
    dlt_status (*ln_fwd)(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd,
                         const dlt_tensor *x, const dlt_tensor *w, const dlt_tensor *b, int64_t M,
                         int64_t N, double eps);
    dlt_status (*ln_bwd)(dlt_ctx *ctx, dlt_tensor *dx, int32_t dx_acc, dlt_tensor *dw, dlt_tensor *db,
                         int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *x,
                         const dlt_tensor *mean, const dlt_tensor *rstd, const dlt_tensor *w,
                         int64_t M, int64_t N);
    /* a pre-LN block's residual add and the LayerNorm after it (dlt__add_layer_norm_to):
     * sum = x + add (per element in fp32, rounded to sum's dtype, x's), then ln_fwd of sum
     * (add and y of one dtype). Backward: dx = prev + ln_bwd's dx (prev NULL: nothing; may be
     * dx itself), dcast (or NULL) = dx rounded to dy's dtype (the add's gradient for its
     * 16-bit operand), dw/db as ln_bwd. */
    dlt_status (*add_ln_fwd)(dlt_ctx *ctx, dlt_tensor *sum, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd,
                             const dlt_tensor *x, const dlt_tensor *add, const dlt_tensor *w,
                             const dlt_tensor *b, int64_t M, int64_t N, double eps);
    dlt_status (*add_ln_bwd)(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *prev, dlt_tensor *dcast,
                             dlt_tensor *dw, dlt_tensor *db, int32_t beta_acc, const dlt_tensor *dy,
                             const dlt_tensor *sum, const dlt_tensor *mean, const dlt_tensor *rstd,
                             const dlt_tensor *w, int64_t M, int64_t N);
    /* y = x * keep / (1-p), keep(i) = dlt__philox_uniform(seed, offset + *rng_base, i) >= p;
     * the backward is the same call on dy (the mask is drawn again, never stored) */
    dlt_status (*dropout)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double p, uint64_t seed,
                          uint64_t offset);
    /* y [n, D] = w [V, D] rows at idx (i32/i64 [n]). The CPU refuses an index outside
     * [0, V) before writing; CUDA cannot check without a sync, so it writes NaN rows for them
     * (as cross-entropy writes NaN losses for bad targets) and the backward skips them */
    dlt_status (*embedding_fwd)(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *w, const dlt_tensor *idx);
    /* dw = beta*dw + scatter-add of dy rows (padding_idx rows get nothing; < 0: none).
     * Deterministic when ctx->deterministic (CUDA sorts; the CPU always is). */
    dlt_status (*embedding_bwd)(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *dy,
                                const dlt_tensor *idx, int64_t padding_idx, int32_t beta);
    /* scaled dot-product attention, see dlt_sdpa_params */
    dlt_status (*sdpa_fwd)(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *q,
                           const dlt_tensor *k, const dlt_tensor *v, const dlt_sdpa_params *p);
    dlt_status (*sdpa_bwd)(dlt_ctx *ctx, dlt_tensor *dq, dlt_tensor *dk, dlt_tensor *dv,
                           const dlt_tensor *dout, const dlt_tensor *q, const dlt_tensor *k,
                           const dlt_tensor *v, const dlt_tensor *o, const dlt_tensor *lse,
                           const dlt_sdpa_params *p);
    /* the same on a packed qkv (dlt_scaled_dot_product_attention_qkvpacked, p->qkv_packed
     * set): q, k, v read from qkv [B,T,3,H,D], o and dout [B,T,H,D], dqkv written [B,T,3,H,D];
     * lse as above. *served = 0: this backend cannot take the layout for this call (nothing
     * launched), and the front door unpacks into sdpa_fwd/bwd. NULL: never served. */
    dlt_status (*sdpa_qkv_fwd)(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *qkv,
                               const dlt_sdpa_params *p, int *served);
    dlt_status (*sdpa_qkv_bwd)(dlt_ctx *ctx, dlt_tensor *dqkv, const dlt_tensor *dout,
                               const dlt_tensor *qkv, const dlt_tensor *o, const dlt_tensor *lse,
                               const dlt_sdpa_params *p, int *served);
    /* *rng_base += delta, ordered on the stream: the last node of a captured step, and
     * dlt_graph_run's correction before a replay (graph.c) */
    dlt_status (*rng_advance)(dlt_ctx *ctx, uint64_t delta);
    /* optim (lib/optim, lib/cpu/sgd.c, cuda/sgd.cu) */
    /* Applies op to an optimizer's dlt_optim_dev (one tiny kernel on CUDA). */
    dlt_status (*sgd_state)(dlt_ctx *ctx, void *state, const dlt_optim_state_op *op);
    /* Adam/AdamW over L->params (dlt_adamw_launch); then, unless skipped, the step counts
     * of the updated parameters += 1, state->step++, last_applied = 1 and every group's lr
     * = schedule(...) when one is given. */
    dlt_status (*adamw_step)(dlt_ctx *ctx, const dlt_adamw_launch *L);
    /* total and scaling of clip_grad_norm (dlt_clip_launch), no host synchronisation */
    dlt_status (*clip_grad_norm)(dlt_ctx *ctx, const dlt_clip_launch *L);
    /* data (lib/data, lib/cpu/data.c, cuda/data.cu) */
    /* perm (int32 [count]) = 0..count-1 sorted by the 64-bit Philox key of each index for
     * (seed, epoch), ties by index (dlt__data_shuffle_key). Same order on every backend. */
    dlt_status (*data_order)(dlt_ctx *ctx, int32_t *perm, int64_t count, uint64_t seed,
                             int64_t epoch);
    /* *cursor = {batch, epoch} (a kernel on CUDA: capturable) */
    dlt_status (*data_cursor_set)(dlt_ctx *ctx, dlt_data_cursor *cursor, int64_t batch,
                                  int64_t epoch);
    /* cursor->batch += 1 */
    dlt_status (*data_cursor_advance)(dlt_ctx *ctx, dlt_data_cursor *cursor);
    /* one batch of token windows (see dlt_token_launch); x, y written, nothing else */
    dlt_status (*data_tokens)(dlt_ctx *ctx, const dlt_token_launch *L);
    /* dist (lib/dist, cuda/nccl.c): NCCL between GPUs, loaded with dlopen. NULL on the CPU,
     * whose tensors go through lib/dist's TCP transport. comm is the backend's handle. */
    /* NCCL's 128-byte unique id into id (ctx may be NULL); *version (may be NULL) receives
     * the loaded library's NCCL_VERSION_CODE */
    dlt_status (*nccl_unique_id)(dlt_ctx *ctx, void *id, size_t n, int32_t *version);
    /* a communicator of world ranks on ctx's device, its side stream and its watchdog
     * (which aborts it when an enqueued collective outlives timeout_ms) */
    dlt_status (*nccl_init)(dlt_ctx *ctx, const void *id, int32_t rank, int32_t world,
                            int64_t timeout_ms, void **comm);
    /* abort = 1: ncclCommAbort (a peer failed: do not wait for it), else ncclCommDestroy */
    void (*nccl_free)(dlt_ctx *ctx, void *comm, int32_t abort);
    dlt_status (*nccl_run)(dlt_ctx *ctx, void *comm, const dlt_nccl_launch *L);
    /* fork: the side stream waits for the context stream's work so far; join: the context
     * stream waits for the side stream's. Both are capturable. */
    dlt_status (*nccl_fork)(dlt_ctx *ctx, void *comm);
    dlt_status (*nccl_join)(dlt_ctx *ctx, void *comm);
    /* DLT_OK, or the asynchronous failure (ncclCommGetAsyncError, the watchdog's timeout)
     * after which the communicator was aborted */
    dlt_status (*nccl_check)(dlt_ctx *ctx, void *comm);
    /* waits until the context stream's work so far is done, polling for failures and the
     * timeout instead of blocking in the driver (a dead peer cannot hang the caller) */
    dlt_status (*nccl_wait)(dlt_ctx *ctx, void *comm);
};

const dlt_backend *dlt__cpu_backend(void);
/* The CUDA backend, or NULL when the library was built without CUDA: the one function
 * through which lib/ reaches cuda/ (ops, memory, device queries all go through the table). */
const dlt_backend *dlt__cuda_backend(void);

/* Profiler ranges around layers, backward nodes and optimizer work: free when no profiler
 * (Nsight Systems/Compute) is attached. */
static inline void dlt__range_push(dlt_ctx *ctx, const char *name) {
    if (ctx->be->range_push) ctx->be->range_push(ctx, name);
}
static inline void dlt__range_pop(dlt_ctx *ctx) {
    if (ctx->be->range_pop) ctx->be->range_pop(ctx);
}

/* Reports a backend entry this device lacks as NOT_SUPPORTED (see DLT_NEED_KERNEL). */
dlt_status dlt__be_missing(const dlt_ctx *ctx, const char *func, const char *what);

/* dist: the GradScaler calls fn(user, ctx, flag) after every unscale that wrote a found_inf
 * flag (device f32, one element), before any step reads it: a communicator reduces it (max)
 * across processes there. fn NULL removes the hook. */
typedef dlt_status (*dlt__found_inf_hook)(void *user, dlt_ctx *ctx, float *flag);
void dlt__grad_scaler_set_found_inf_hook(dlt_grad_scaler *s, dlt__found_inf_hook fn, void *user);

/* t's values change by a copy, fill, load or collective: its version moves (autocast
 * rebuilds its low-precision copies); inside a capture t is also marked graph_written,
 * since the graph's replays will write it without moving the version. */
static inline void dlt__tensor_written(dlt_tensor *t) {
    t->version++;
    if (t->ctx && t->ctx->capturing) t->graph_written = 1;
}

/* A parameter's autocast copy that a capture read without recording the cast: the copy was
 * current, and the graph refreshes it before a replay where it is not (graph.c). */
typedef struct dlt__lp_use {
    dlt_tensor *param, *copy; /* references held by the capture, then by its graph */
    int32_t k;                /* lp_copy index: 0 f16, 1 bf16 */
} dlt__lp_use;
/* Notes (param, copy) for the capture in progress (once per pair). */
dlt_status dlt__capture_note_lp(dlt_ctx *ctx, dlt_tensor *param, dlt_tensor *copy, int32_t k, const char *func);

/* ---------------------------------------------------------------------------------------
 * Internal ops for modules (lib/ops)
 * ------------------------------------------------------------------------------------- */
/* dlt_cross_entropy_ex with only the first n_classes columns of the logits as classes (a
 * vocabulary padded for speed); func names the caller in messages. consume: the caller
 * gives the logits up (releases its reference right after, reads them no more), so the
 * forward may write their gradient over them (lib/ops/cross_entropy.c). */
dlt_status dlt__cross_entropy_padded(dlt_tensor *logits, dlt_tensor *targets, int64_t n_classes,
                                     int64_t ignore_index, int32_t reduction, double label_smoothing,
                                     int consume, const char *func, dlt_tensor **out);
/* dlt_linear(x, w, bias) for x = act(h) (act a DLT_UN_* op of lib/kernel/unary.h with
 * act_alpha, computed by the caller as its own recorded op): the tape saves h, not x, and the
 * backward recomputes x for dw. Falls back to dlt_linear when x cannot be h's activation
 * (shape, dtype or format differ) or autocast casts x. */
dlt_status dlt__linear_recompute(dlt_tensor *x, dlt_tensor *h, int32_t act_op, double act_alpha, dlt_tensor *w,
                                 dlt_tensor *bias, dlt_tensor **out);
/* The GPT MLP's first half under fp16/bf16 autocast: *h = dlt_linear(x, w, bias), recorded as
 * a linear (h carries the gradient), from one GEMM whose epilogue also writes *g =
 * gelu_tanh(h) (backend linear_fwd_gelu); g has no gradient of its own and is for
 * dlt__gelu_linear. *g = *h = NULL and DLT_OK when the backend or the call does not allow it:
 * the caller then runs dlt_linear and the GELU. (lib/ops/linear_gelu.c) */
dlt_status dlt__linear_gelu(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias, dlt_tensor **g, dlt_tensor **h);
/* The second half: dlt_linear(gelu_tanh(h), w, bias), with g = gelu_tanh(h) as dlt__linear_gelu
 * gave it, recorded as one op of h: the tape saves h, the backward's data-gradient GEMM
 * applies the GELU's derivative in its epilogue where the backend has it (linear_bwd_data_gelu)
 * and recomputes g for dw. Calls that do not fit (g not h's by-product in autocast's dtype)
 * run dlt_gelu and dlt__linear_recompute instead. (lib/ops/linear_gelu.c) */
dlt_status dlt__gelu_linear(dlt_tensor *h, dlt_tensor *g, dlt_tensor *w, dlt_tensor *bias, dlt_tensor **out);
/* A pre-LN block's residual add and the LayerNorm after it: *sum = x + b (f32) and *y =
 * layer_norm(*sum) over the last dimension (weight, bias f32 [N] or NULL) in dtype, recorded
 * as one op with both outputs; bit for bit dlt_add then dlt_layer_norm_to, in fewer passes.
 * *sum = *y = NULL and DLT_OK when the backend or the call does not fit (x not f32, b not of
 * x's shape in dtype, not contiguous): the caller then runs the two ops.
 * (lib/ops/add_layer_norm.c) */
dlt_status dlt__add_layer_norm_to(dlt_tensor *x, dlt_tensor *b, dlt_tensor *weight, dlt_tensor *bias, double eps,
                                  int32_t dtype, dlt_tensor **sum, dlt_tensor **y);
/* The linear backward with its input x given (lib/ops/linear.c; saved[1] = w, bias when
 * n_in > 2); gin[0] is left alone when dx is not wanted from it (want_dx = 0). */
dlt_status dlt__linear_backward_x(dlt_node *n, dlt_tensor *x, int want_dx, dlt_tensor *const *gout,
                                  dlt_grad_slot *gin);

#ifdef __cplusplus
}
#endif
#endif
