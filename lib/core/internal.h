/*
 * internal.h - the library's private core: error reporting, the context, tensors and
 * storage, the allocator front, and the autograd tape structures. Included by lib/ (C) and
 * by cuda/ (C and C++), so it stays in the common subset of C11 and C++17 and includes no
 * CUDA header.
 *
 * Names: dlt__* are internal (hidden by the version script); dlt_* are public.
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

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DLT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DLT_PRINTF(a, b)
#endif

/* ---------------------------------------------------------------------------------------
 * Errors. Every failing path sets the thread-local message with the public function name:
 *   return dlt__err(DLT_ERR_SHAPE, "dlt_conv2d", "input must be 4-D, got %d-D", nd);
 * ------------------------------------------------------------------------------------- */
dlt_status dlt__err(dlt_status code, const char *func, const char *fmt, ...) DLT_PRINTF(3, 4);
dlt_status dlt__verr(dlt_status code, const char *func, const char *fmt, va_list ap);
/* Prefixes the current message with "func: " context from an outer call; keeps the code. */
dlt_status dlt__err_wrap(dlt_status code, const char *func);
void dlt__log(int32_t level, const char *fmt, ...) DLT_PRINTF(2, 3);

#define DLT_CHECK(expr)                                                                       \
    do {                                                                                      \
        dlt_status dlt__s = (expr);                                                           \
        if (dlt__s != DLT_OK) return dlt__s;                                                  \
    } while (0)
#define DLT_CHECK_GOTO(st, expr, label)                                                       \
    do {                                                                                      \
        (st) = (expr);                                                                        \
        if ((st) != DLT_OK) goto label;                                                       \
    } while (0)
#define DLT_NULL_CHECK(p, func)                                                               \
    do {                                                                                      \
        if ((p) == NULL) return dlt__err(DLT_ERR_NULL_POINTER, func, "argument '%s' is NULL", #p); \
    } while (0)

/* ---------------------------------------------------------------------------------------
 * Forward declarations
 * ------------------------------------------------------------------------------------- */
typedef struct dlt_backend dlt_backend;
typedef struct dlt_node dlt_node;
typedef struct dlt_storage dlt_storage;

/* ---------------------------------------------------------------------------------------
 * Context
 * ------------------------------------------------------------------------------------- */
typedef struct dlt_tape {
    dlt_node **slots; /* weak pointers in recording order; NULL once a node dies */
    int64_t n, cap;
    int64_t live; /* nodes alive */
    uint64_t next_seq;
    /* leaf-gradient accumulations deferred to the end of the running backward (tape.c) */
    dlt_tensor **pend_dst, **pend_src;
    int32_t *pend_beta;
    int32_t n_pend, cap_pend;
    int64_t pend_bytes; /* queued gradient bytes */
    int64_t pend_limit; /* flush at this many (DLT_GRAD_QUEUE_MAX, read once; 0 = not read yet) */
    int32_t in_backward;
} dlt_tape;

#define DLT_AUTOCAST_MAX_DEPTH 16

struct dlt_ctx {
    int32_t device_type;
    int32_t device_index;
    const dlt_backend *be;
    void *be_state; /* backend private: CUDA stream, handles, pool, plan caches */

    uint64_t seed, rng_offset;
    /* Device uint64 added to the generator offsets of the random ops that read it (dropout,
     * attention dropout): 0 in eager calls; a captured graph adds the counters its capture
     * reserved at the end of every replay, so replays draw fresh numbers (graph.c). */
    void *rng_base;
    int32_t grad_enabled;
    int32_t autocast_stack[DLT_AUTOCAST_MAX_DEPTH]; /* dtype per nesting level, -1 = off */
    int32_t autocast_depth;
    int32_t deterministic, allow_tf32;
    int32_t capturing; /* inside CUDA graph capture: no host syncs allowed */
    int32_t graph_warmup; /* in dlt_graph_create's warm-up steps: prepare all the capture will use */

    dlt_status poisoned; /* != DLT_OK after an asynchronous fault */
    char poison_msg[512];

    /* host-side accounting (CPU backend memory; CUDA uses the pool's statistics) */
    uint64_t mem_allocated, mem_peak, mem_count;
    int64_t alloc_calls;    /* allocations made on behalf of this context */
    int64_t fail_alloc_at;  /* injection: fail when alloc_calls reaches this value (0 = off) */

    dlt_tape tape;
    int64_t live_tensors; /* leak accounting for tests */
};

/* Fails with DLT_ERR_CONTEXT_POISONED if an earlier asynchronous fault broke the context. */
dlt_status dlt__ctx_ok(dlt_ctx *ctx, const char *func);
/* Marks the context poisoned (first fault wins) and returns code with the message set. */
dlt_status dlt__ctx_poison(dlt_ctx *ctx, dlt_status code, const char *func, const char *msg);
/* The environment variable `name` as a non-negative count, or dflt when it is unset or not
 * one (trailing text after the number is ignored). */
int64_t dlt__env_count(const char *name, int64_t dflt);
/* Autocast dtype in force, or -1. */
int32_t dlt__autocast_dtype(const dlt_ctx *ctx);
/* Allocates the context's device word rng_base (zero) on first use; fails inside a capture. */
dlt_status dlt__rng_base_ready(dlt_ctx *ctx, const char *func);
/* Reserves `blocks` Philox counters and returns the starting offset. */
uint64_t dlt__rng_reserve(dlt_ctx *ctx, uint64_t blocks);

/* Counts an allocation for the failure-injection hook; returns nonzero if it must fail. */
int dlt__alloc_should_fail(dlt_ctx *ctx);
/* Host allocations on behalf of a context (objects, metadata). Fail with injection too. */
void *dlt__host_alloc(dlt_ctx *ctx, size_t n);
void *dlt__host_calloc(dlt_ctx *ctx, size_t count, size_t size);
void *dlt__host_realloc(dlt_ctx *ctx, void *p, size_t n);
char *dlt__host_strdup(dlt_ctx *ctx, const char *s);
/* Overflow-checked multiply: returns 0 and sets *out, or 1 on overflow. */
int dlt__mul_overflow(size_t a, size_t b, size_t *out);

/* ---------------------------------------------------------------------------------------
 * Storage and tensors
 * ------------------------------------------------------------------------------------- */
struct dlt_storage {
    int32_t refcount;
    dlt_ctx *ctx;
    void *data; /* device pointer for CUDA, host pointer for the CPU */
    size_t nbytes;
    int32_t external; /* not owned: never freed */
};

struct dlt_tensor {
    int32_t refcount;
    dlt_ctx *ctx;
    int32_t dtype;
    int32_t ndim;
    int32_t format;
    int64_t shape[DLT_MAX_DIMS];
    int64_t numel;
    dlt_storage *storage;
    size_t offset; /* bytes into storage */

    /* autograd */
    int32_t requires_grad;     /* leaf that accumulates a gradient */
    dlt_tensor *grad;          /* leaf gradient buffer (kept across zero-grad) */
    int32_t grad_defined;      /* 0 after zero-grad(set_to_none): next backward overwrites */
    dlt_node *grad_fn;         /* node that produced this tensor (strong reference) */
    int32_t grad_fn_output;    /* which output of grad_fn */
    int32_t graph_consumed;    /* backward already ran through this tensor's node */
    int32_t grad_pending;      /* a deferred accumulation into this leaf's grad is queued */

    /* parameters: version bumped by in-place updates; autocast low-precision copies */
    uint64_t version;
    dlt_tensor *lp_copy[2];      /* [0] f16, [1] bf16 */
    uint64_t lp_version[2];
};

static inline void *dlt__data(const dlt_tensor *t) {
    return t->storage ? (char *)t->storage->data + t->offset : NULL;
}
size_t dlt__dtype_size(int32_t dtype);
static inline int dlt__is_float(int32_t dtype) {
    return dtype == DLT_F32 || dtype == DLT_F16 || dtype == DLT_BF16;
}
static inline size_t dlt__nbytes(const dlt_tensor *t) {
    return (size_t)t->numel * dlt__dtype_size(t->dtype);
}

/* Allocates a tensor on ctx (uninitialised). func names the public caller for messages. */
dlt_status dlt__tensor_new(dlt_ctx *ctx, int32_t dtype, const int64_t *shape, int32_t ndim,
                           int32_t format, const char *func, dlt_tensor **out);
/* New tensor with the shape/format of `like` and the given dtype. */
dlt_status dlt__tensor_new_like(const dlt_tensor *like, int32_t dtype, const char *func,
                                dlt_tensor **out);
/* A view sharing t's storage with a new shape (contiguous tensors only). */
dlt_status dlt__tensor_view(dlt_tensor *t, const int64_t *shape, int32_t ndim, int32_t format,
                            const char *func, dlt_tensor **out);
/* A view of `nbytes` of a storage at `offset` (used for flat parameter arenas). */
dlt_status dlt__tensor_from_storage(dlt_storage *s, size_t offset, int32_t dtype,
                                    const int64_t *shape, int32_t ndim, int32_t format,
                                    const char *func, dlt_tensor **out);
dlt_status dlt__storage_new(dlt_ctx *ctx, size_t nbytes, const char *func, dlt_storage **out);
void dlt__storage_release(dlt_storage *s);

/* Shape helpers. */
int dlt__same_shape(const dlt_tensor *a, const dlt_tensor *b);
/* Writes "[2,3,4]" into buf. Returns buf. */
const char *dlt__shape_str(const dlt_tensor *t, char *buf, size_t n);
/* Logical 4-D index helpers: element (n,c,h,w) offset in elements for t's format. */
static inline int64_t dlt__off4(const dlt_tensor *t, int64_t n, int64_t c, int64_t h, int64_t w) {
    const int64_t C = t->shape[1], H = t->shape[2], W = t->shape[3];
    if (t->format == DLT_FORMAT_CHANNELS_LAST) return ((n * H + h) * W + w) * C + c;
    return ((n * C + c) * H + h) * W + w;
}

/* Validation helpers for op front doors (messages name func and the argument). */
dlt_status dlt__check_tensor(const dlt_tensor *t, const char *func, const char *arg);
dlt_status dlt__check_same_ctx(const dlt_tensor *a, const dlt_tensor *b, const char *func,
                               const char *arg_a, const char *arg_b);
dlt_status dlt__check_float(const dlt_tensor *t, const char *func, const char *arg);
dlt_status dlt__check_ndim(const dlt_tensor *t, int32_t ndim, const char *func, const char *arg);

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
                                  const dlt_tensor *w, const dlt_conv_params *p);
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
    /* ends capture; ok = 0 discards it. On success *exec is an executable graph. */
    dlt_status (*capture_end)(dlt_ctx *ctx, int32_t ok, void **exec, int64_t *n_nodes);
    dlt_status (*graph_launch)(dlt_ctx *ctx, void *exec);
    void (*graph_free)(dlt_ctx *ctx, void *exec);

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
     * Backward writes dx, and dw/db (may be NULL) with beta_acc 0 (overwrite) or 1 (add). */
    dlt_status (*ln_fwd)(dlt_ctx *ctx, dlt_tensor *y, dlt_tensor *mean, dlt_tensor *rstd,
                         const dlt_tensor *x, const dlt_tensor *w, const dlt_tensor *b, int64_t M,
                         int64_t N, double eps);
    dlt_status (*ln_bwd)(dlt_ctx *ctx, dlt_tensor *dx, dlt_tensor *dw, dlt_tensor *db,
                         int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *x,
                         const dlt_tensor *mean, const dlt_tensor *rstd, const dlt_tensor *w,
                         int64_t M, int64_t N);
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
    /* *rng_base += delta, ordered on the stream (the last node of a captured step) */
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

/* ---------------------------------------------------------------------------------------
 * Autograd tape (lib/core/tape.c)
 * ------------------------------------------------------------------------------------- */
#define DLT_NODE_MAX_IN 8
#define DLT_NODE_MAX_OUT 8
#define DLT_NODE_MAX_SAVED 8
#define DLT_NODE_ATTR_BYTES 256
/* The node's attributes as the op's struct T (checked to fit where it is used). */
#define DLT_NODE_ATTR(node, T) ((T *)(void *)(node)->attr.bytes)

/* Where the gradient of a node input goes: into another node's output slot, into a leaf's
 * .grad, or nowhere (input needs no gradient). */
typedef struct dlt_edge {
    dlt_node *node; /* strong reference */
    int32_t index;
    dlt_tensor *leaf; /* strong reference */
} dlt_edge;

/* What backward receives for each input. needed: a gradient is wanted. For a leaf whose
 * buffer can be written directly, dst is that buffer and beta says overwrite (0) or
 * accumulate (1); a backward that writes it sets written = 1. Otherwise the backward sets
 * result to a new tensor and the tape delivers it. dlt__grad_slot_store does either. */
typedef struct dlt_grad_slot {
    int32_t needed;
    dlt_tensor *dst; /* borrowed, may be NULL */
    int32_t beta;
    int32_t written;
    dlt_tensor *result; /* new reference, or NULL */
} dlt_grad_slot;

typedef dlt_status (*dlt_backward_fn)(dlt_node *node, dlt_tensor *const *grad_out,
                                      dlt_grad_slot *grad_in);

struct dlt_node {
    int32_t refcount;
    dlt_ctx *ctx;
    const char *name; /* op name, static string */
    dlt_backward_fn backward;
    int32_t n_in, n_out;
    dlt_edge next[DLT_NODE_MAX_IN];
    /* dtype/shape of each input, for checks and for leaf-dtype casts */
    dlt_tensor *grad_accum[DLT_NODE_MAX_OUT]; /* gradients of outputs summed during backward */
    dlt_tensor *saved[DLT_NODE_MAX_SAVED];    /* strong references, dropped after backward */
    int32_t n_saved;
    int64_t ip[12]; /* integer attributes (older ops; new ops use attr) */
    double fp[6];   /* real attributes */
    /* typed per-op attributes: an op stores its own struct here (DLT_NODE_ATTR) */
    union {
        double d_;
        int64_t i_;
        unsigned char bytes[DLT_NODE_ATTR_BYTES];
    } attr;
    int64_t slot;   /* position in ctx->tape.slots */
    uint64_t seq;
    int32_t consumed;
};

/* Whether an op with these inputs must be recorded (grad mode on and some input needs
 * a gradient). */
int dlt__needs_grad(const dlt_ctx *ctx, dlt_tensor *const *inputs, int32_t n);
/* Creates a node for an op, with edges for its inputs, appends it to the tape, and makes
 * outputs[i]->grad_fn point to it. Returns NULL node (and DLT_OK) when nothing needs
 * recording. The caller then fills saved[]/ip[]/fp[] of *out_node. */
dlt_status dlt__record(dlt_ctx *ctx, const char *name, dlt_backward_fn backward,
                       dlt_tensor *const *inputs, int32_t n_in, dlt_tensor *const *outputs,
                       int32_t n_out, dlt_node **out_node);
/* Saves a tensor for backward (takes a reference). */
void dlt__save(dlt_node *node, dlt_tensor *t);
void dlt__node_release(dlt_node *node);
void dlt__tape_fini(dlt_ctx *ctx);
/* Writes a computed gradient into a slot's destination (dst with beta) and releases it. */
dlt_status dlt__grad_slot_store(dlt_ctx *ctx, dlt_grad_slot *slot, dlt_tensor *g);

/* ---------------------------------------------------------------------------------------
 * Internal ops for modules (lib/ops)
 * ------------------------------------------------------------------------------------- */
/* dlt_cross_entropy_ex with only the first n_classes columns of the logits as classes (a
 * vocabulary padded for speed); func names the caller in messages. */
dlt_status dlt__cross_entropy_padded(dlt_tensor *logits, dlt_tensor *targets, int64_t n_classes,
                                     int64_t ignore_index, int32_t reduction, double label_smoothing,
                                     const char *func, dlt_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
