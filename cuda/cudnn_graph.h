/*
 * cudnn_graph.h - the small layer between our ops and cuDNN 9's backend (graph) API: a
 * sticky-error descriptor builder, plan building (heuristics, engine filtering, optional
 * autotuning), the per-context plan cache and execution. Used by conv2d.cu and
 * batchnorm.cu and attention; implemented in cudnn_builder.c (describing graphs) and
 * cudnn_graph.c (plans, the cache, execution), plain C: the backend API is a C API.
 *
 * Life of a plan:
 *   1. The op builds a key (dlt_cudnn_key: op kind, dtype, format, every dim, conv params,
 *      pointer alignments, tf32/deterministic flags, fusion variant) and looks it up.
 *   2. On a miss it describes the graph with a dlt_cudnn_builder (tensors, ops; every
 *      cudnnBackend* status is checked, the first failure is kept) and calls
 *      dlt__cudnn_build_plan, which finalizes the operation graph, asks heuristics mode A
 *      then FALLBACK for engine configs, drops configs whose engine notes are not allowed
 *      (down-converting inputs always; tensor cores for fp32 without TF32; non-determinism
 *      in deterministic mode) and keeps the first config that finalizes, or with autotuning
 *      the fastest of them. A graph that no config supports becomes a negative entry (with
 *      the reason), so it is not retried on every call.
 *   3. The entry is inserted in the cache (dlt_cuda_state->plans, freed with the context)
 *      and executed with dlt__cudnn_execute: a variant pack binding the data pointers in
 *      the entry's uid order, and cudnnBackendExecute on the context's handle, which is
 *      bound to the context's stream. Nothing here synchronises except autotuning, which
 *      only runs outside graph capture and only when the context's cudnn_benchmark is on
 *      (dlt_ctx_set_cudnn_benchmark; default DLT_CUDNN_AUTOTUNE).
 *
 * Every descriptor a plan was built from (tensors, operations, graph, heuristics, chosen
 * engine config) stays alive as long as the plan: the backend API does not document that a
 * finalized plan is independent of them.
 *
 * Settings come from the context's environment (lib/core/env.c: read once, when the
 * context is created; docs/environment.md): DLT_CONV_IMPL and DLT_BN_IMPL = cudnn | native
 * (unset: cuDNN when a plan finalizes, our kernels otherwise; "cudnn" turns a missing plan
 * into an error), DLT_CUDNN_AUTOTUNE=1 (the default of dlt_ctx_set_cudnn_benchmark: time
 * all usable configs once per shape),
 * DLT_BN_CUDNN_RUNNING_STATS (unset: cuDNN's BN graph updates the running statistics; 0: our
 * kernel does, from cuDNN's saved statistics), the BatchNorm thresholds and background
 * builds, DLT_WORKSPACE_MAX.
 */
#ifndef DLT_CUDNN_GRAPH_H
#define DLT_CUDNN_GRAPH_H

#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DLT_CUDNN_KEY_MAX 48
#define DLT_CUDNN_MAX_UIDS 16
/* descriptors a plan keeps: attention's backward graph has ~90 (attention_cudnn.c) */
#define DLT_CUDNN_MAX_OWNED 128

/* ---- settings (DLT_IMPL_*: lib/core/env.h) ---- */
typedef struct dlt_cudnn_settings {
    int32_t conv_impl;        /* DLT_IMPL_* from DLT_CONV_IMPL */
    int32_t bn_impl;          /* DLT_IMPL_* from DLT_BN_IMPL */
    int32_t gemm_autotune;    /* DLT_GEMM_AUTOTUNE=1 (linear.cu) */
    int32_t conv_gemm;        /* DLT_CONV_GEMM: which convolutions run as GEMMs (conv2d_gemm.cu) */
    int32_t conv_pad;         /* DLT_CONV_PAD_CHANNELS: narrow inputs padded to it (conv2d_pad.cu) */
    int32_t bn_cudnn_running; /* cuDNN's BN graph updates the running statistics (the
                               * default; DLT_BN_CUDNN_RUNNING_STATS=0: our kernel does) */
    /* auto: channels-last BN with at most this many elements runs our single-pass kernels,
     * larger ones cuDNN (DLT_BN_NATIVE_MAX; batchnorm.cu says why) */
    int64_t bn_native_max;
    int64_t bn_native_max_bwd; /* the same for the backward (DLT_BN_NATIVE_MAX_BWD) */
    /* those single-pass BNs that fit one co-resident grid run as one kernel per direction
     * (DLT_BN_ONE_KERNEL, batchnorm_fast.cu) */
    int32_t bn_one_kernel;
    /* engines (cuDNN) and algorithms (cuBLASLt) needing more workspace are passed over when
     * another one exists (DLT_WORKSPACE_MAX, bytes) */
    int64_t workspace_max;
    int32_t bn_async_plans;   /* BN plans built in the background (DLT_BN_ASYNC_PLANS) */
    int32_t bn_plan_threads;  /* their threads (DLT_BN_PLAN_THREADS, 1-16) */
} dlt_cudnn_settings;

/* The context's settings (creates the plan cache on first use). */
dlt_status dlt__cudnn_settings(dlt_ctx *ctx, const dlt_cudnn_settings **out);

/* ---- keys ---- */
typedef struct dlt_cudnn_key {
    int32_t n;
    int64_t v[DLT_CUDNN_KEY_MAX];
} dlt_cudnn_key;

/* Same op, shape and bindings (an overflowing key equals nothing in the cache). */
int dlt__cudnn_key_equal(const dlt_cudnn_key *a, const dlt_cudnn_key *b);

static inline void dlt__cudnn_key_push(dlt_cudnn_key *k, int64_t v) {
    if (k->n < DLT_CUDNN_KEY_MAX) k->v[k->n] = v;
    k->n++; /* an overflowing key is refused by the cache */
}

/* Largest power of two <= 16 that divides the address (what BYTE_ALIGNMENT may promise). */
static inline int64_t dlt__cudnn_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    if (a % 16 == 0) return 16;
    if (a % 8 == 0) return 8;
    if (a % 4 == 0) return 4;
    if (a % 2 == 0) return 2;
    return 1;
}

/* ---- plans ---- */
typedef struct dlt_cudnn_plan {
    int32_t supported; /* 0: no engine config finalized; `why` says what failed */
    cudnnStatus_t why_status;
    char why[400];
    cudnnBackendDescriptor_t plan;
    int64_t workspace; /* bytes */
    int64_t engine;    /* global engine index (messages, logs) */
    int32_t n_uids;
    int64_t uids[DLT_CUDNN_MAX_UIDS];
    /* by-value operands (BatchNorm: epsilon at [0], momentum at [4]; attention: scale,
     * -inf, 1 at [0], [4], [8]): addresses that stay valid and fixed as long as the plan,
     * 16-byte aligned like every bound pointer */
    float scalars[12] __attribute__((aligned(16)));
    int32_t n_owned;
    cudnnBackendDescriptor_t owned[DLT_CUDNN_MAX_OWNED];
    /* the last variant pack, reused while the same pointers are bound */
    cudnnBackendDescriptor_t vpack;
    void *vp_ptrs[DLT_CUDNN_MAX_UIDS];
    void *vp_ws;
} dlt_cudnn_plan;

/* Cached plan for key, or NULL. Fails only for an oversized key. */
dlt_status dlt__cudnn_cache_find(dlt_ctx *ctx, const dlt_cudnn_key *key, dlt_cudnn_plan **out);
/* Moves *plan into the cache under key (the cache owns its descriptors from now on) and
 * returns the stored entry. On failure the plan's descriptors are destroyed. */
dlt_status dlt__cudnn_cache_insert(dlt_ctx *ctx, const dlt_cudnn_key *key, dlt_cudnn_plan *plan,
                                   dlt_cudnn_plan **out);

/* ---- building graphs ---- */
typedef struct dlt_cudnn_builder {
    dlt_ctx *ctx;
    const char *func; /* public function for messages */
    const char *what; /* op, dtype, layout and shape, for messages */
    cudnnStatus_t status; /* first failure (CUDNN_STATUS_SUCCESS while none) */
    char failed[400];     /* message of the first failure */
    int32_t n_owned;
    cudnnBackendDescriptor_t owned[DLT_CUDNN_MAX_OWNED];
} dlt_cudnn_builder;

void dlt__cudnn_builder_init(dlt_cudnn_builder *b, dlt_ctx *ctx, const char *func,
                             const char *what);
/* Records a failure of libdltrain's own (a graph too large for the builder) as the first
 * failure, unless cuDNN already reported one. */
void dlt__cudnn_builder_refuse(dlt_cudnn_builder *b, const char *why);
/* Takes ownership of d (destroys it when the owned list is full: a plan with more than
 * DLT_CUDNN_MAX_OWNED descriptors is refused, never leaked); -1 then, else 0. */
int dlt__cudnn_builder_own(dlt_cudnn_builder *b, cudnnBackendDescriptor_t d);
/* "call failed: cuDNN's status string - its last error message" into buf. */
void dlt__cudnn_status_text(cudnnStatus_t s, const char *call, char *buf, size_t n);
/* Destroys every descriptor the builder still owns. */
void dlt__cudnn_builder_discard(dlt_cudnn_builder *b);
/* Creates a descriptor owned by the builder (NULL after a failure). */
cudnnBackendDescriptor_t dlt__cudnn_make(dlt_cudnn_builder *b, cudnnBackendDescriptorType_t type);
void dlt__cudnn_set_(dlt_cudnn_builder *b, cudnnBackendDescriptor_t d,
                     cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
                     int64_t count, const void *values, const char *attr_name);
#define DLT_CUDNN_SET(b, d, attr, type, count, values)                                         \
    dlt__cudnn_set_((b), (d), (attr), (type), (count), (values), #attr)
/* Sets a descriptor-valued attribute (one descriptor). */
#define DLT_CUDNN_SET_DESC(b, d, attr, value)                                                 \
    do {                                                                                      \
        cudnnBackendDescriptor_t dlt__v = (value);                                            \
        dlt__cudnn_set_((b), (d), (attr), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dlt__v, #attr);  \
    } while (0)
void dlt__cudnn_finalize_(dlt_cudnn_builder *b, cudnnBackendDescriptor_t d, const char *what);
#define DLT_CUDNN_FINALIZE(b, d) dlt__cudnn_finalize_((b), (d), #d)

/* A tensor descriptor: dims/strides in logical order, data type, declared alignment.
 * is_virtual: an intermediate that never reaches memory; by_value: a host scalar. */
cudnnBackendDescriptor_t dlt__cudnn_tensor(dlt_cudnn_builder *b, int64_t uid, cudnnDataType_t dt,
                                           int32_t nd, const int64_t *dims, const int64_t *strides,
                                           int64_t alignment, int is_virtual, int by_value);
/* A 4-D tensor [d0,d1,d2,d3] in logical NCHW order, packed in NCHW (channels_last = 0) or
 * NHWC (1) memory order. Size-1 dimensions get the packed stride cuDNN expects. */
cudnnBackendDescriptor_t dlt__cudnn_tensor4(dlt_cudnn_builder *b, int64_t uid, cudnnDataType_t dt,
                                            const int64_t dims[4], int channels_last,
                                            int64_t alignment, int is_virtual);
/* Packed strides of a 4-D tensor in logical order (exposed for messages/tests). */
void dlt__cudnn_strides4(const int64_t dims[4], int channels_last, int64_t strides[4]);

/* Operation nodes, finalized (NULL after a failure, which the builder keeps; name is the
 * node in its message): y = mode(x [, b] [, t]) in fp32 math, b and t NULL where the mode
 * takes fewer inputs (t: BINARY_SELECT's condition, y = t ? x : b), axis >= 0 sets
 * GEN_INDEX's dimension; c = a b over the last two dims with fp32 accumulation; y = op(x)
 * over the dims where y has size 1; y = x seen with y's dims, strides and type. */
cudnnBackendDescriptor_t dlt__cudnn_pointwise(dlt_cudnn_builder *b, const char *name,
                                              cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                              cudnnBackendDescriptor_t bdesc, cudnnBackendDescriptor_t t,
                                              cudnnBackendDescriptor_t y, int64_t axis);
cudnnBackendDescriptor_t dlt__cudnn_matmul(dlt_cudnn_builder *b, const char *name,
                                           cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bm,
                                           cudnnBackendDescriptor_t c);
cudnnBackendDescriptor_t dlt__cudnn_reduction(dlt_cudnn_builder *b, const char *name,
                                              cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x,
                                              cudnnBackendDescriptor_t y);
cudnnBackendDescriptor_t dlt__cudnn_reshape(dlt_cudnn_builder *b, const char *name,
                                            cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

/* cuDNN data type of a float dtype; returns 0 and sets *out, or -1 for other dtypes. */
int dlt__cudnn_dtype(int32_t dtype, cudnnDataType_t *out);

/* What building a plan may do beyond taking the first config that finalizes. */
typedef struct dlt_cudnn_plan_opts {
    int32_t fp32_io; /* the graph's I/O is fp32: tensor-core engines need ctx->allow_tf32 */
    /* Autotuning (used when settings say so and the context is not capturing): the data
     * pointers for trial runs in uid order; the entry at out_slot is replaced by scratch
     * space of out_bytes inside the workspace, so trials never write real outputs. */
    void *const *trial_ptrs;
    int32_t out_slot;
    size_t out_bytes;
} dlt_cudnn_plan_opts;

/* Builds a plan for the graph made of ops (finalized operation descriptors created by b).
 * uids: the non-virtual tensors the variant pack binds, in execution order. On DLT_OK,
 * *out is either supported, or a negative entry with the reason (no engine config,
 * graph rejected by cuDNN). The builder's descriptors move into *out. Errors: host out of
 * memory, device errors during autotuning. */
dlt_status dlt__cudnn_build_plan(dlt_cudnn_builder *b, const cudnnBackendDescriptor_t *ops,
                                 int32_t n_ops, const int64_t *uids, int32_t n_uids,
                                 const dlt_cudnn_plan_opts *opts, dlt_cudnn_plan *out);

/* Background plan building (batchnorm.cu): a worker thread builds with its own cuDNN
 * handle (cuDNN handles must not be used by two threads at once). Set on the worker once;
 * while set, builds on this thread use it, log nothing (the user's log callback runs on the
 * thread that installs the plan) and are not counted here (the installer counts them). */
void dlt__cudnn_set_thread_handle(cudnnHandle_t h);
/* Monotonic wall clock in seconds (plan-building times). */
double dlt__cudnn_now_s(void);
/* Adds background builds to the context's plan-building statistics. */
void dlt__cudnn_note_builds(dlt_ctx *ctx, int kind, int64_t n, double seconds);

/* Destroys a plan's descriptors (entries outside the cache, e.g. after a failed insert). */
void dlt__cudnn_plan_release(dlt_cudnn_plan *p);

/* Executes a supported plan: ptrs in the plan's uid order, ws at least p->workspace bytes
 * (from dlt__cuda_workspace). what names the op and shape for messages. */
dlt_status dlt__cudnn_execute(dlt_ctx *ctx, dlt_cudnn_plan *p, void *const *ptrs, void *ws,
                              const char *func, const char *what);

/* Error for a negative entry when the caller has no fallback (impl forced to cudnn):
 * NOT_SUPPORTED for cuDNN's "not supported" family, DLT_ERR_CUDNN otherwise. */
dlt_status dlt__cudnn_plan_error(const dlt_cudnn_plan *p, const char *func, const char *what);

/* Rounds up to a multiple of 256 bytes (sub-buffers carved from the workspace). */
static inline size_t dlt__cudnn_round256(size_t n) { return (n + 255) & ~(size_t)255; }

#ifdef __cplusplus
}
#endif
#endif
