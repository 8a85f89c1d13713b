/*
 * dltrain/core.h - versions, status codes, errors, contexts and memory statistics.
 *
 * Conventions that hold for the whole API (docs/api.md has the long form):
 *  - Every fallible function returns a dlt_status (DLT_OK == 0) and passes results through
 *    trailing out-pointers. On failure the out-pointers are left untouched (or set to NULL
 *    where the doc says so) and dlt_last_error() explains what went wrong.
 *  - Handles are opaque. Each create has one destroy (or release); destroy(NULL) is a no-op.
 *  - Enumerations are passed as int32_t, sizes and dimensions as int64_t, byte counts as
 *    size_t. No structs cross the ABI by value.
 *  - Threads: one dlt_ctx (and everything made from it) belongs to one host thread at a time.
 *    Distinct contexts may be used concurrently. dlt_version*, dlt_status_string and the
 *    last-error calls are thread-safe (the error message is thread-local).
 *  - Nothing in the library prints, aborts or exits.
 */
#ifndef DLTRAIN_CORE_H
#define DLTRAIN_CORE_H

#include <stddef.h>
#include <stdint.h>

#if defined(DLT_STATIC_DEFINE)
#define DLT_API
#elif defined(__GNUC__) || defined(__clang__)
#define DLT_API __attribute__((visibility("default")))
#else
#define DLT_API
#endif

#if defined(__GNUC__) || defined(__clang__)
#define DLT_NODISCARD __attribute__((warn_unused_result))
#define DLT_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define DLT_NODISCARD
#define DLT_DEPRECATED(msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * Versions
 * ------------------------------------------------------------------------------------- */
#define DLT_VERSION_MAJOR 0
#define DLT_VERSION_MINOR 1
#define DLT_VERSION_PATCH 0
/** Packed release number: major*10000 + minor*100 + patch. */
#define DLT_VERSION (DLT_VERSION_MAJOR * 10000 + DLT_VERSION_MINOR * 100 + DLT_VERSION_PATCH)
/** ABI generation of these headers; equals the shared library's SONAME number. A program
 *  passes it to dlt_ctx_create, which refuses a library of another generation. */
#define DLT_ABI_VERSION 1

/* Option structs (dlt_sgd_options, dlt_conv2d_options, dlt_gpt_config, ...) grow within an
 * ABI generation: each starts with `uint32_t size`, fields are only ever appended, and the
 * caller's sizeof travels with the struct. Fill one with dlt_X_options_default(&o) (a
 * static inline calling the exported dlt_X_options_init(&o, sizeof o); through an FFI call
 * _init with the size of the struct as you declared it), then change fields. The library
 * writes and reads only the caller's size: an older program keeps working with a newer
 * library (the fields it does not know take their defaults); a newer program that sets a
 * field an older library does not know gets DLT_ERR_NOT_SUPPORTED instead of having it
 * ignored. A NULL options pointer means all defaults. */

/** Packed release number of the loaded library (same packing as DLT_VERSION). Thread-safe. */
DLT_API uint32_t dlt_version(void);
/** ABI generation of the loaded library. Thread-safe. */
DLT_API uint32_t dlt_abi_version(void);
/** Release as a static string, e.g. "0.1.0". Thread-safe. */
DLT_API const char *dlt_version_string(void);
/** 1 when the library was built with the CUDA backend, else 0. Thread-safe. */
DLT_API int32_t dlt_built_with_cuda(void);

/* ---------------------------------------------------------------------------------------
 * Status codes. Grouped by hundreds: code / 100 gives the kind. Append only, never renumber.
 * ------------------------------------------------------------------------------------- */
typedef int32_t dlt_status;

#define DLT_OK 0
/* 1xx: the caller passed something wrong; nothing was changed. */
#define DLT_ERR_INVALID_ARGUMENT 100 /**< a value out of range or inconsistent arguments */
#define DLT_ERR_NULL_POINTER 101     /**< a required handle or out-pointer was NULL */
#define DLT_ERR_SHAPE 102            /**< tensor shapes do not fit the operation */
#define DLT_ERR_DTYPE 103            /**< a tensor has a dtype the operation does not take */
#define DLT_ERR_CONTEXT_MISMATCH 104 /**< objects from different contexts/devices were mixed */
#define DLT_ERR_INVALID_STATE 105    /**< the call is not allowed now (misuse, e.g. backward twice) */
#define DLT_ERR_VERSION 106          /**< the headers and the library are of different ABIs */
/* 2xx: valid request that this build or machine cannot do. */
#define DLT_ERR_NOT_SUPPORTED 200 /**< combination of op/dtype/layout/device not implemented */
#define DLT_ERR_NO_DEVICE 201     /**< no CUDA device, driver, or CUDA support in this build */
/* 3xx: out of memory. */
#define DLT_ERR_OUT_OF_MEMORY 300        /**< host allocation failed */
#define DLT_ERR_DEVICE_OUT_OF_MEMORY 301 /**< device allocation failed */
/* 4xx: the device runtime or a vendor library failed; the message carries its code. */
#define DLT_ERR_CUDA 400
#define DLT_ERR_CUBLAS 401
#define DLT_ERR_CUDNN 402
#define DLT_ERR_CONTEXT_POISONED 403 /**< an earlier asynchronous fault broke this context */
#define DLT_ERR_NCCL 404 /**< NCCL failed or could not be loaded (dist.h); the message has its words */
/* 5xx: files and data. */
#define DLT_ERR_IO 500     /**< open/read/write/rename failed */
#define DLT_ERR_FORMAT 501 /**< a file or buffer is malformed or inconsistent */
/* 6xx: distributed training (dist.h): the other processes of a communicator. */
#define DLT_ERR_DIST 600         /**< a peer process failed, left, or called a different collective */
#define DLT_ERR_DIST_TIMEOUT 601 /**< peers did not answer within the communicator's timeout */
/* 9xx: a bug in libdltrain. Please report it with the message. */
#define DLT_ERR_INTERNAL 900

/** Short static description of a status code ("invalid argument", ...). Never NULL;
 *  unknown codes give "unknown status". Thread-safe. */
DLT_API const char *dlt_status_string(dlt_status code);

/** The message of the last failing dlt call on this thread ("" if none). Borrowed: valid
 *  until the next failing call on this thread. Thread-safe (thread-local). */
DLT_API const char *dlt_last_error(void);
/** Status code of the last failing dlt call on this thread (DLT_OK if none). */
DLT_API dlt_status dlt_last_error_code(void);
/** Copies the last error message into buf (always NUL-terminated when n > 0) and returns
 *  the full length of the message. For FFI users who cannot hold a borrowed pointer. */
DLT_API size_t dlt_last_error_copy(char *buf, size_t n);
/** Forgets the last error of this thread. */
DLT_API void dlt_clear_error(void);
/* nn (custom modules): callbacks that fail on their own give their reason this way. */
/** Records message (copied, truncated to 1023 bytes) as this thread's last error with
 *  code, and returns code, so a callback (a custom module's forward, a graph step) can
 *  `return dlt_set_error(DLT_ERR_SHAPE, "mlp: x must be 2-D");` and the library passes the
 *  message on. Misuse is refused and recorded as such: message NULL gives
 *  DLT_ERR_NULL_POINTER, code DLT_OK gives DLT_ERR_INVALID_ARGUMENT. Thread-safe
 *  (thread-local). */
DLT_API DLT_NODISCARD dlt_status dlt_set_error(dlt_status code, const char *message);

/** Log levels for the optional log callback. */
#define DLT_LOG_ERROR 0
#define DLT_LOG_WARNING 1
#define DLT_LOG_INFO 2
/** Receives the library's diagnostics (warnings such as "graph capture failed, running
 *  eagerly"). Without a callback nothing is reported. The callback may run on any thread
 *  that calls into the library. */
typedef void (*dlt_log_fn)(int32_t level, const char *message, void *user);
/** Installs (or, with NULL, removes) the process-wide log callback. */
DLT_API void dlt_set_log_callback(dlt_log_fn fn, void *user);

/* ---------------------------------------------------------------------------------------
 * Contexts
 * ------------------------------------------------------------------------------------- */
#define DLT_DEVICE_CPU 0
#define DLT_DEVICE_CUDA 1

/** A context is a device plus its stream, library handles, allocator, RNG, gradient tape,
 *  grad mode and autocast state. Every tensor and object belongs to one context. */
typedef struct dlt_ctx dlt_ctx;

/** Number of CUDA devices visible. Writes 0 (and returns DLT_OK) when the build has no CUDA
 *  support, or when no driver or device is present. */
DLT_API DLT_NODISCARD dlt_status dlt_cuda_device_count(int32_t *out);

/**
 * Creates a context.
 * @param device_type  DLT_DEVICE_CPU or DLT_DEVICE_CUDA.
 * @param device_index CUDA device ordinal (ignored for the CPU, pass 0).
 * @param abi_version  pass DLT_ABI_VERSION; a different value gives DLT_ERR_VERSION.
 * @param out          receives the context, owned by the caller (dlt_ctx_destroy).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (unknown device type,
 *         negative index); DLT_ERR_VERSION; DLT_ERR_NO_DEVICE (no CUDA in this build, no
 *         driver, no such device); DLT_ERR_CUDA/CUBLAS/CUDNN (library set-up failed);
 *         DLT_ERR_OUT_OF_MEMORY.
 * The RNG seed starts at 0 (dlt_ctx_set_seed). CUDA work runs on a stream owned by the
 * context; calls return before the device finishes.
 */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_create(int32_t device_type, int32_t device_index,
                                                uint32_t abi_version, dlt_ctx **out);
/** Waits for the context's work, then frees it. Objects made from the context must be
 *  destroyed first; those still alive are leaked, not freed. NULL is a no-op. */
DLT_API void dlt_ctx_destroy(dlt_ctx *ctx);

/** DLT_DEVICE_CPU or DLT_DEVICE_CUDA (-1 for NULL). */
DLT_API int32_t dlt_ctx_device_type(const dlt_ctx *ctx);
/** CUDA ordinal, 0 for the CPU (-1 for NULL). */
DLT_API int32_t dlt_ctx_device_index(const dlt_ctx *ctx);
/** Writes the device name ("cpu", "NVIDIA H200") NUL-terminated into buf. */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_device_name(const dlt_ctx *ctx, char *buf, size_t n);

/** Blocks until all work queued on the context is done. This is where asynchronous device
 *  faults surface: after one, the context is poisoned and every later call on it returns
 *  DLT_ERR_CONTEXT_POISONED. */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_synchronize(dlt_ctx *ctx);
/** DLT_OK, or the status that poisoned the context (its message is set again). */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_check(dlt_ctx *ctx);
/** Blocks until no execution plan is being built in the background for the context. On
 *  CUDA, cuDNN compiles BatchNorm kernels at run time (seconds for a whole ResNet50); the
 *  first calls of a new BatchNorm shape run libdltrain's own kernels while worker threads
 *  build cuDNN's plan, and later calls switch to it (docs/performance.md, "Start-up").
 *  Benchmarks call this after warm-up so the timed steps run the plans they will keep.
 *  Builds stay in the calling thread in deterministic mode and while dlt_graph_create
 *  prepares or captures a step. A no-op on the CPU. */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_wait_plans(dlt_ctx *ctx);

/** Sets the seed of the context's counter-based (Philox) generator and resets its offset.
 *  The same seed gives the same random tensors on the CPU and on CUDA. */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_set_seed(dlt_ctx *ctx, uint64_t seed);
/** Reads the seed and the offset (how many counters were consumed). Either may be NULL. */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_get_seed(const dlt_ctx *ctx, uint64_t *seed, uint64_t *offset);
/* ---- gptex (issue 17): the generator's whole state, for checkpoints that resume exactly ---- */
/** The generator's state as a resumed run needs it (torch.cuda.get_rng_state's counterpart):
 *  the seed and the offset the next random op or graph replay starts from (eager calls and
 *  replays share one counter, as PyTorch's generator; the same offset as dlt_ctx_get_seed's).
 *  Host-side, no synchronisation; refused during graph capture. Either pointer may be NULL.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER (ctx); DLT_ERR_INVALID_STATE (capturing). */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_get_rng_state(dlt_ctx *ctx, uint64_t *seed, uint64_t *offset);
/** Restores a state read by dlt_ctx_get_rng_state (torch.cuda.set_rng_state): later random
 *  ops and replays of graphs (captured before or after) draw exactly what they would have
 *  drawn after the read.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_STATE (capturing). */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_set_rng_state(dlt_ctx *ctx, uint64_t seed, uint64_t offset);

/** 1: only deterministic algorithms (cuDNN engines without the non-determinism note, no
 *  atomics in our reductions). Default 0. */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_set_deterministic(dlt_ctx *ctx, int32_t on);
/** 1: fp32 convolutions and GEMMs may use TF32 tensor cores. Default 0 (exact fp32). */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_set_allow_tf32(dlt_ctx *ctx, int32_t on);
/** 1: for each convolution shape whose cuDNN plan is built after the call, time the
 *  candidate engines (heuristics and fallback list, those within the workspace limit) and
 *  keep the fastest; 0: keep the heuristics' first choice (torch.backends.cudnn.benchmark).
 *  Timing synchronises, so it happens at a shape's first call outside a capture (warm-up);
 *  the winner can differ from run to run, and so can the last bits of the results. In
 *  deterministic mode only deterministic engines are candidates. Stored on the context; the
 *  CPU backend ignores it. Default: DLT_CUDNN_AUTOTUNE (unset: 0, as PyTorch's default).
 *  @return DLT_OK; DLT_ERR_NULL_POINTER (ctx). */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_set_cudnn_benchmark(dlt_ctx *ctx, int32_t on);
/** Reads the setting of dlt_ctx_set_cudnn_benchmark into *out (0 or 1).
 *  @return DLT_OK; DLT_ERR_NULL_POINTER (ctx or out). */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_cudnn_benchmark_enabled(const dlt_ctx *ctx, int32_t *out);

/** Threads of the CPU backend's parallel loops, process-wide (torch.set_num_threads): n >= 1,
 *  or 0 for the default (OMP_NUM_THREADS, else the cores). OpenBLAS, when the process has
 *  it, gets the same count (0 restores its own). Our loops give the same bits for any count;
 *  OpenBLAS's GEMMs round differently on one thread than on several. One thread is the fast
 *  choice on a machine whose cores are busy with other work (docs/environment.md).
 *  @return DLT_OK; DLT_ERR_INVALID_ARGUMENT (n < 0 or > 4096). */
DLT_API DLT_NODISCARD dlt_status dlt_set_num_threads(int32_t n);
/** The most threads a CPU parallel loop uses now (torch.get_num_threads); 1 in a build
 *  without OpenMP. */
DLT_API int32_t dlt_get_num_threads(void);

/* ---- attention kernels: torch.backends.cuda.enable_flash_sdp / enable_cudnn_sdp ---- */
/** Lets dlt_scaled_dot_product_attention use the FlashAttention-2 kernels on CUDA
 *  (torch.backends.cuda.enable_flash_sdp): 1 on, 0 off. Where they cannot serve a call (f32,
 *  a head dim that is not a multiple of 16 or is above 128, a GPU below sm_80) the reference
 *  kernels run, so any setting gives the same results up to rounding (the weights P and
 *  their gradients are rounded to f16/bf16 before their products). Forward and backward
 *  paths mix (same log-sum-exp), so the setting may change between them. Stored on the
 *  context and ignored by the CPU backend. Default 1, as in PyTorch (verified on an H200:
 *  the op table against the CPU, memcheck and racecheck clean; docs/performance.md).
 *  @return DLT_OK; DLT_ERR_NULL_POINTER (ctx). */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_set_flash_sdp(dlt_ctx *ctx, int32_t enabled);
/** Reads the setting of dlt_ctx_set_flash_sdp into *out (0 or 1;
 *  torch.backends.cuda.flash_sdp_enabled).
 *  @return DLT_OK; DLT_ERR_NULL_POINTER (ctx or out). */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_flash_sdp_enabled(const dlt_ctx *ctx, int32_t *out);
/** Lets dlt_scaled_dot_product_attention use cuDNN's fused flash attention on CUDA
 *  (torch.backends.cuda.enable_cudnn_sdp): 1 on, 0 off. When on it is tried first; it serves
 *  f16/bf16 calls without dropout whose query and key lengths are multiples of 128 and
 *  whose head dim is a multiple of 8 up to 128, on GPUs and cuDNN versions that have an
 *  engine for the graph (sm_80 and newer), outside deterministic mode (its backward adds dQ
 *  with atomics; dlt_ctx_set_deterministic routes attention to the flash kernels). Other
 *  calls take the flash kernels (dlt_ctx_set_flash_sdp) or the reference kernels; all paths
 *  keep the same log-sum-exp, so forward and backward may mix. Stored on the context; the
 *  CPU backend ignores it. Default 1.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER (ctx). */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_set_cudnn_sdp(dlt_ctx *ctx, int32_t enabled);
/** Reads the setting of dlt_ctx_set_cudnn_sdp into *out (0 or 1;
 *  torch.backends.cuda.cudnn_sdp_enabled).
 *  @return DLT_OK; DLT_ERR_NULL_POINTER (ctx or out). */
DLT_API DLT_NODISCARD dlt_status dlt_ctx_cudnn_sdp_enabled(const dlt_ctx *ctx, int32_t *out);

/* ---------------------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------------------- */
#define DLT_MEM_ALLOCATED 0      /**< bytes held by live tensors and workspaces now */
#define DLT_MEM_PEAK_ALLOCATED 1 /**< maximum of DLT_MEM_ALLOCATED since creation/reset */
#define DLT_MEM_RESERVED 2       /**< bytes the allocator holds from the system (>= allocated) */
#define DLT_MEM_ALLOC_COUNT 3    /**< number of live allocations */

/** Reads one memory statistic of the context (DLT_MEM_*). On CUDA these are the context's
 *  stream-ordered memory pool statistics; the values include allocations still queued. */
DLT_API DLT_NODISCARD dlt_status dlt_memory_stat(dlt_ctx *ctx, int32_t which, uint64_t *out);
/** Sets the peak statistic to the current allocation. */
DLT_API DLT_NODISCARD dlt_status dlt_memory_reset_peak(dlt_ctx *ctx);
/** Returns the allocator's unused cached memory to the system (CUDA: trims the pool after
 *  waiting for the stream). No numeric effect; later allocations may be slower. */
DLT_API DLT_NODISCARD dlt_status dlt_empty_cache(dlt_ctx *ctx);

/* ---------------------------------------------------------------------------------------
 * Timing: events mark points in a context's queue of work (CUDA events on the GPU, the host
 * clock on the CPU), so device time can be measured without synchronising every step.
 * ------------------------------------------------------------------------------------- */
typedef struct dlt_event dlt_event;
/** Creates an event on ctx (owned by the caller: dlt_event_destroy). */
DLT_API DLT_NODISCARD dlt_status dlt_event_create(dlt_ctx *ctx, dlt_event **out);
/** Waits for the event's work, then frees it. NULL is a no-op. */
DLT_API void dlt_event_destroy(dlt_event *ev);
/** Records the current end of the context's queue. Enqueued; not allowed during capture. */
DLT_API DLT_NODISCARD dlt_status dlt_event_record(dlt_event *ev);
/** Milliseconds from start to end (both recorded, same context). Waits for end: synchronises. */
DLT_API DLT_NODISCARD dlt_status dlt_event_elapsed_ms(dlt_event *start, dlt_event *end, double *ms);

/** Opens a named profiler range on the context (NVTX on CUDA, so Nsight Systems and Nsight
 *  Compute timelines show it; nothing on the CPU). The library itself marks the forwards of
 *  conv2d, batchnorm, max-pool, linear and cross-entropy, every backward node ("backward"
 *  around the whole pass) and the optimizer step. Ranges nest; pop closes the innermost. No cost without
 *  an attached profiler. The name is copied. */
DLT_API DLT_NODISCARD dlt_status dlt_range_push(dlt_ctx *ctx, const char *name);
/** Closes the innermost range opened by dlt_range_push on ctx. */
DLT_API DLT_NODISCARD dlt_status dlt_range_pop(dlt_ctx *ctx);

/* ---------------------------------------------------------------------------------------
 * Testing hooks (stable, but meant for tests of programs that embed the library)
 * ------------------------------------------------------------------------------------- */
/** Makes the n-th allocation from now on (1 = the next) fail with an out-of-memory status;
 *  n <= 0 switches injection off. Counts tensor, workspace and host-side object allocations
 *  made on behalf of this context. */
DLT_API DLT_NODISCARD dlt_status dlt_testing_fail_alloc(dlt_ctx *ctx, int64_t n);
/** Number of allocations made on behalf of this context since creation. */
DLT_API DLT_NODISCARD dlt_status dlt_testing_alloc_count(dlt_ctx *ctx, int64_t *out);
/** Makes the n-th file operation of a save from now on fail (1 = the next); n <= 0 switches
 *  injection off. Counted, in order, for every file the library writes (checkpoints,
 *  safetensors): each write() of file data (the failing one first writes half its bytes, as
 *  a filling disk does, then reports ENOSPC), the fsync (EIO), the close (EIO) and the
 *  rename over the destination (EIO). Process-wide, not per context; one failure per
 *  arming. */
DLT_API DLT_NODISCARD dlt_status dlt_testing_fail_write(int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* DLTRAIN_CORE_H */
