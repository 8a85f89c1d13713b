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
#include "nd.h"

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
    /* flash: dlt_ctx_set_flash_sdp (CUDA f16/bf16 attention on tensor cores); CPU ignores it */
    int32_t flash_sdp;
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
typedef struct dlt_conv_params {
    int64_t stride[2], pad[2], dil[2], groups;
} dlt_conv_params;

typedef struct dlt_pool_params {
    int64_t kernel[2], stride[2], pad[2];
} dlt_pool_params;

/* ---- optimizer (lib/optim, lib/cpu/{sgd,adamw,clip_grad_norm}.c, cuda/ likewise) ----
 * An optimizer's per-step values live in one block of its context's device memory: a
 * dlt_optim_dev (group 0's lr), DLT_OPTIM_MAX_GROUPS - 1 dlt_optim_group_dev (the lr of
 * groups 1..), then one int32 per parameter (SGD: 1 once its momentum buffer holds data;
 * Adam/AdamW: the parameter's step count, PyTorch's state["step"], 0 = no state yet).
 * Kernels read and write them, so a step never waits for the host and a step the
 * GradScaler skips on the device leaves no trace. */
typedef struct dlt_optim_dev {
    double base_lr;       /* schedule base (equals lr while no schedule is active) */
    int64_t step;         /* applied steps (skipped steps do not count) */
    float lr;             /* learning rate used by the next step */
    int32_t last_applied; /* 1 if the last step was applied, 0 if it was skipped */
    int32_t done_blocks;  /* CUDA: blocks finished in the current launch (reset by the last) */
    int32_t pad_;
} dlt_optim_dev;

#define DLT_OPTIM_MAX_GROUPS 16
/* lr of parameter group g >= 1 (group 0 lives in dlt_optim_dev) */
typedef struct dlt_optim_group_dev {
    double base_lr;
    float lr;
    int32_t pad_;
} dlt_optim_group_dev;

/* Learning-rate schedule, evaluated after each applied step t (lib/optim/schedule.c):
 * lr = main(base, t) * warmup(t). Passed by value to kernels. */
#define DLT_LR_MAIN_NONE 0
#define DLT_LR_MAIN_STEP 1
#define DLT_LR_MAIN_MULTISTEP 2
#define DLT_LR_MAIN_COSINE 3
#define DLT_LR_MAIN_WARMUP_COSINE 4 /* nanoGPT's get_lr */
#define DLT_LR_MAIN_CONSTANT 5      /* ConstantLR */
#define DLT_LR_MAX_MILESTONES 32
typedef struct dlt_lr_schedule {
    int32_t main_kind;    /* DLT_LR_MAIN_* */
    int32_t warmup;       /* 1: LinearLR warm-up factor applies */
    int64_t step_size;    /* StepLR */
    double gamma;         /* StepLR, MultiStepLR */
    int64_t milestones[DLT_LR_MAX_MILESTONES];
    int32_t n_milestones;
    int32_t pad_;
    int64_t t_max;        /* CosineAnnealingLR */
    double eta_min;
    int64_t warmup_steps; /* LinearLR */
    double start_factor;
    int64_t wc_warmup;    /* warm-up + cosine (nanoGPT): warmup_iters, lr_decay_iters, min_lr */
    int64_t wc_decay;
    double wc_min_lr;
    int64_t const_iters;  /* ConstantLR: factor until total_iters */
    double const_factor;
} dlt_lr_schedule;

/* Writes to an optimizer's dlt_optim_dev, applied in this order (each when its flag is 1):
 * the step first, then per parameter group (every group, or only `group` when one_group)
 * the lr fields. */
typedef struct dlt_optim_state_op {
    int32_t write_lr;     /* lr = (float)lr_value */
    int32_t write_base;   /* base_lr = base_value */
    int32_t write_step;   /* step = step_value */
    int32_t base_from_lr; /* base_lr = lr (after the writes above) */
    int32_t evaluate;     /* lr = (float)schedule(base_lr, step) (last) */
    int32_t one_group;    /* 0: groups 0..n_groups-1; 1: only `group` */
    int32_t group;
    int32_t n_groups;     /* the optimizer's group count (0 is read as 1) */
    double lr_value, base_value;
    int64_t step_value;
    dlt_lr_schedule schedule;
} dlt_optim_state_op;

/* One SGD step over the n parameters that have a gradient (multi-tensor: one launch on
 * CUDA). Parameter, gradient, buffer and same-format low-precision copies share shape and
 * memory format; the arithmetic is elementwise, so the format does not matter. */
typedef struct dlt_sgd_launch {
    int32_t n;
    dlt_tensor **params;    /* fp32 masters, updated in place */
    dlt_tensor **grads;     /* fp32 gradients; read only, except that with nesterov, no
                             * maximize and no weight decay they receive g + momentum*b, as
                             * PyTorch's foreach _foreach_add_(grads, bufs) does */
    dlt_tensor **bufs;      /* momentum buffers (n entries), or NULL when momentum == 0 */
    dlt_tensor **lp_copies; /* 2n entries: [2i] f16, [2i+1] bf16 copy of param i to write with
                             * the rounded new value, or NULL; same shape and format */
    int32_t *buf_index;     /* param i's flag is buf_init[buf_index[i]] */
    void *buf_init;         /* device int32 flags, read and set by the kernel */
    void *state;            /* device dlt_optim_dev: lr read; step, last_applied, lr written */
    double momentum, dampening, weight_decay;
    int32_t nesterov, maximize;
    const void *found_inf;  /* device f32 or NULL: when != 0 nothing changes except
                             * last_applied = 0 */
    const dlt_lr_schedule *schedule; /* NULL, or evaluated into lr after an applied step */
} dlt_sgd_launch;

/* One Adam/AdamW step over the n parameters that have a gradient (one multi-tensor launch
 * on CUDA; lib/optim/adamw.c states the update). Parameter, gradient, moments and
 * same-format low-precision copies share shape and memory format. */
typedef struct dlt_adamw_launch {
    int32_t n;
    int32_t n_groups;
    dlt_tensor **params;     /* fp32 masters, updated in place */
    dlt_tensor **grads;      /* fp32 gradients, read only */
    dlt_tensor **exp_avg;    /* first moments (zeros before the parameter's first step) */
    dlt_tensor **exp_avg_sq; /* second moments */
    dlt_tensor **lp_copies;  /* 2n entries: [2i] f16, [2i+1] bf16 copy to write, or NULL */
    int32_t *index;          /* param i's step count is steps[index[i]] */
    int32_t *group;          /* param i's parameter group */
    void *steps;             /* device int32 step counts, read and incremented by the kernel */
    void *state;             /* device dlt_optim_dev (+ group lrs): lrs read; step,
                              * last_applied, lrs written */
    const double *weight_decay; /* n_groups entries */
    double beta1, beta2, eps;
    int32_t decoupled;       /* 1: AdamW (p *= 1 - lr*wd); 0: Adam (g += wd*p) */
    int32_t maximize;
    const void *found_inf;   /* device f32 or NULL: when != 0 nothing changes except
                              * last_applied = 0 */
    const dlt_lr_schedule *schedule; /* NULL, or evaluated into every group's lr after an
                                      * applied step */
} dlt_adamw_launch;

/* clip_grad_norm over n fp32 gradients (lib/optim/clip_grad_norm.c): total = the norm of
 * all their elements (norm 1, 2 or inf), written to total (device f32); then every gradient
 * is multiplied by min(max_norm / (total + 1e-6), 1) computed on the device. */
#define DLT_CLIP_NORM_L1 1
#define DLT_CLIP_NORM_L2 2
#define DLT_CLIP_NORM_INF 3
typedef struct dlt_clip_launch {
    int32_t n;
    int32_t norm;            /* DLT_CLIP_NORM_* */
    dlt_tensor **grads;      /* modified in place */
    void *total;             /* device f32, one element */
    double max_norm;
    int32_t scale;           /* 0: the total only (dlt_grad_norm), gradients untouched */
} dlt_clip_launch;

/* Data pipeline (lib/data, lib/cpu/data.c, cuda/data.cu). CIFAR-10's images are 3x32x32
 * uint8 planes (its record order); labels int32. */
#define DLT_DATA_C 3
#define DLT_DATA_H 32
#define DLT_DATA_W 32
#define DLT_DATA_IMAGE_BYTES (DLT_DATA_C * DLT_DATA_H * DLT_DATA_W)
/* Channels of an image record (Normalize keeps a mean and std per channel). */
#define DLT_DATA_MAX_CHANNELS 16

/* Where a loader stands, in the backend's memory so that a captured step reads and
 * advances it on replay: the batch of the epoch that the next gather reads, and the epoch
 * (which keys the augmentation draws). Token loaders use batch as their draw counter. */
typedef struct dlt_data_cursor {
    int64_t batch;
    int64_t epoch;
} dlt_data_cursor;

/* One batch: row i of the batch is epoch position p = cursor->batch * batch_size + i (taken
 * modulo count, so a replay past the end wraps instead of reading out of bounds), sample
 * perm[p] (or p when perm is NULL); its record is record_bytes at records + sample *
 * record_bytes.
 * Image records (image = 1: uint8 [C, H, W]): x = byte / 255 in fp32, then (x - mean[c]) /
 * std[c] when normalize, rounded to x's dtype; augmentation: a Philox draw of (aug_seed,
 * epoch, unwrapped p) gives a crop offset and a flip (lib/data/data_internal.h).
 * Other records (image = 0, elements of src_dtype): each element converted to x's dtype
 * (a plain copy when the dtypes match). x holds [n, *sample] in x->format (channels-last
 * only for 3-D samples, read as [C, H, W]). y (when labels) gets the int32 labels widened
 * to y's dtype. */
typedef struct dlt_data_launch {
    const uint8_t *images;          /* the records, on the backend's device */
    const int32_t *labels;          /* [count], or NULL (then y is NULL) */
    int64_t count;
    const int32_t *perm;            /* [count] sample order of the epoch, or NULL: identity */
    const dlt_data_cursor *cursor;  /* device/host, read by the gather */
    int64_t batch_size;             /* rows of a full batch */
    int64_t n;                      /* rows written (x->shape[0] == y->shape[0] == n) */
    int32_t normalize;
    float mean[DLT_DATA_MAX_CHANNELS], std[DLT_DATA_MAX_CHANNELS];
    int32_t crop_pad;               /* 0: no crop */
    int32_t hflip;
    uint64_t aug_seed;
    dlt_tensor *x;                  /* [n, *sample] */
    dlt_tensor *y;                  /* [n] int32 or int64, or NULL */
    /* the record (appended for datasets over any records; CIFAR-10: u8, image, 3x32x32) */
    int32_t image;                  /* 1: uint8 image record [C, H, W] */
    int32_t src_dtype;              /* element dtype of a record */
    int64_t sample_numel;           /* elements of one record */
    size_t record_bytes;            /* sample_numel * element size */
    int64_t C, H, W;                /* 3-D samples (images, channels-last output); else 1 */
} dlt_data_launch;

/* Token batches (lib/data/tokens.c): row b of draw s = cursor->batch starts at offset
 * o = dlt__token_offset(seed, s, b, count - T) (lib/data/data_internal.h), and
 * x[b, t] = tokens[o + t], y[b, t] = tokens[o + t + 1] for t < T, widened to x's dtype. */
typedef struct dlt_token_launch {
    const uint16_t *tokens;         /* [count] on the backend's device */
    int64_t count;
    const dlt_data_cursor *cursor;  /* device/host, read by the gather */
    uint64_t seed;
    int64_t batch_size, block_size; /* B, T */
    dlt_tensor *x, *y;              /* [B, T] int32 or int64, same dtype */
} dlt_token_launch;

struct dlt_backend {
    const char *name;
    /* lifetime */
    dlt_status (*ctx_init)(dlt_ctx *ctx);
    void (*ctx_fini)(dlt_ctx *ctx);
    dlt_status (*device_name)(dlt_ctx *ctx, char *buf, size_t n);

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
/* Returns NULL when the library was built without CUDA. */
const dlt_backend *dlt__cuda_backend(void);
/* Device count through the CUDA runtime (0 without CUDA/driver). */
int32_t dlt__cuda_device_count(void);

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
