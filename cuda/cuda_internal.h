/*
 * cuda_internal.h - the CUDA backend's private state and checking helpers. Included by the
 * C and CUDA sources of cuda/ only.
 *
 * Every runtime/cuBLAS/cuDNN call goes through one of the DLT_CU* macros, which turn a
 * failure into a dlt_status with the library's own error name in the message. Errors that
 * leave the device in an unknown state (illegal address, launch failure, ...) poison the
 * context.
 */
#ifndef DLT_CUDA_INTERNAL_H
#define DLT_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "../lib/core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlt_cuda_plan_cache dlt_cuda_plan_cache;
typedef struct dlt_cuda_gemm_cache dlt_cuda_gemm_cache;

typedef struct dlt_cuda_state {
    int device;
    cudaStream_t stream;
    cudaMemPool_t pool;
    cublasHandle_t cublas;
    cublasLtHandle_t cublaslt;
    cudnnHandle_t cudnn;
    /* one workspace for cuDNN/cuBLASLt, grown outside capture and reused */
    void *workspace;
    size_t workspace_size;
    /* scratch for reductions (sum, counts) */
    void *scratch;
    size_t scratch_size;
    /* arrival counters of single-pass reductions (zero between kernels: the last block of a
     * reduction resets its counter), grown outside capture */
    int *counters;
    size_t counters_n;
    /* captured graphs not yet freed, and the workspace, scratch and counter buffers replaced
     * while one was: a graph replays into the addresses it captured, so those buffers are
     * kept until the last graph goes (context.c, retire_buffer) */
    int64_t live_graphs;
    void **retired;
    size_t n_retired, cap_retired;
    uint64_t live_allocs;
    int sm_count;
    int smem_optin; /* shared memory a block may opt in to (bytes) */
    int cc_major;   /* compute capability major */
    int coop_launch; /* cooperative launches (grids whose blocks are all co-resident) */
    char name[256];
    dlt_cuda_plan_cache *plans; /* cuDNN execution plans per op and shape (conv2d.cu, batchnorm.cu) */
    void (*plans_free)(dlt_cuda_plan_cache *);
    /* cuBLASLt matmul plans per shape (linear.cu), created on first use; gemm_free releases
     * them when the context is destroyed */
    dlt_cuda_gemm_cache *gemm;
    void (*gemm_free)(dlt_cuda_gemm_cache *);
    /* cuDNN plans built by background threads (plan_pool.c, for batchnorm_cudnn.cu);
     * plan_pool_free stops the threads, and runs first when the context is destroyed */
    void *plan_pool;
    void (*plan_pool_free)(void *);
    /* whole-step graphs' memory: the sizing run and the arenas (graph.c); NULL until the
     * first graph */
    struct dlt_graph_mem *gmem;
    /* the side stream (side.c): while `on`, stream/workspace above are the side's and
     * other_* the main stream's; otherwise other_* are the side's */
    struct {
        cudaStream_t stream, other_stream;
        cudaEvent_t fork_ev, done_ev;
        void *other_ws;
        size_t other_ws_size;
        int on;
        int unavailable; /* creating it failed: one stream */
    } side;
    /* flash: can the tensor-core attention kernels run here (attention_flash.cu)? 0 not yet
     * asked, 1 yes, -1 no (the code the driver picked was compiled below sm_80) */
    int flash_arch;
    /* BatchNorm's one-kernel path (batchnorm_fast.cu): blocks of each instantiation
     * ([dtype f32/f16/bf16][forward/backward]) that can be co-resident on the whole device
     * in a cooperative launch; 0 not yet asked, -1 none (no cooperative launch, or the
     * runtime refused one) */
    int bn_coresident[3][2];
    int bn_one_kernel_logged;
    int conv_pad_logged; /* conv2d_pad.cu's info line, once per context */
} dlt_cuda_state;

static inline dlt_cuda_state *dlt__cu(const dlt_ctx *ctx) { return (dlt_cuda_state *)ctx->be_state; }
static inline cudaStream_t dlt__stream(const dlt_ctx *ctx) { return dlt__cu(ctx)->stream; }

/* error.c */
dlt_status dlt__cuda_fail(dlt_ctx *ctx, cudaError_t e, const char *func, const char *what);
dlt_status dlt__cublas_fail(dlt_ctx *ctx, cublasStatus_t s, const char *func, const char *what);
dlt_status dlt__cudnn_fail(dlt_ctx *ctx, cudnnStatus_t s, const char *func, const char *what);

#define DLT_CU(ctx, call, func)                                                               \
    do {                                                                                      \
        cudaError_t dlt__e = (call);                                                          \
        if (dlt__e != cudaSuccess) return dlt__cuda_fail((ctx), dlt__e, (func), #call);       \
    } while (0)
#define DLT_CUBLAS(ctx, call, func)                                                           \
    do {                                                                                      \
        cublasStatus_t dlt__s = (call);                                                       \
        if (dlt__s != CUBLAS_STATUS_SUCCESS) return dlt__cublas_fail((ctx), dlt__s, (func), #call); \
    } while (0)
#define DLT_CUDNN(ctx, call, func)                                                            \
    do {                                                                                      \
        cudnnStatus_t dlt__s = (call);                                                        \
        if (dlt__s != CUDNN_STATUS_SUCCESS) return dlt__cudnn_fail((ctx), dlt__s, (func), #call); \
    } while (0)
/* After a kernel launch: launch errors are reported now, execution faults at the next sync. */
#define DLT_CU_LAUNCHED(ctx, func) DLT_CU((ctx), cudaGetLastError(), (func))

/* context.c: set-up, memory and synchronisation (entries of the backend table) */
dlt_status dlt__cuda_ctx_init(dlt_ctx *ctx);
void dlt__cuda_ctx_fini(dlt_ctx *ctx);
dlt_status dlt__cuda_device_name(dlt_ctx *ctx, char *buf, size_t n);
dlt_status dlt__cuda_alloc(dlt_ctx *ctx, size_t nbytes, void **ptr);
void dlt__cuda_free(dlt_ctx *ctx, void *ptr, size_t nbytes);
dlt_status dlt__cuda_memcpy_h2d(dlt_ctx *ctx, void *dst, const void *src, size_t n);
dlt_status dlt__cuda_memcpy_d2h(dlt_ctx *ctx, void *dst, const void *src, size_t n);
dlt_status dlt__cuda_memcpy_d2d(dlt_ctx *ctx, void *dst, const void *src, size_t n);
dlt_status dlt__cuda_memset0(dlt_ctx *ctx, void *dst, size_t n);
dlt_status dlt__cuda_synchronize(dlt_ctx *ctx);
dlt_status dlt__cuda_mem_stat(dlt_ctx *ctx, int32_t which, uint64_t *out);
dlt_status dlt__cuda_mem_reset_peak(dlt_ctx *ctx);
dlt_status dlt__cuda_empty_cache(dlt_ctx *ctx);

/* event.c: timing events and profiler ranges */
dlt_status dlt__cuda_event_create(dlt_ctx *ctx, void **ev);
dlt_status dlt__cuda_event_record(dlt_ctx *ctx, void *ev);
dlt_status dlt__cuda_event_elapsed(dlt_ctx *ctx, void *start, void *end, double *ms);
void dlt__cuda_event_destroy(dlt_ctx *ctx, void *ev);
void dlt__cuda_range_push(dlt_ctx *ctx, const char *name);
void dlt__cuda_range_pop(dlt_ctx *ctx);

/* Makes sure the shared workspace holds at least n bytes. Growing is not allowed during
 * graph capture (the pointer must stay fixed): callers size it in warm-up. */
dlt_status dlt__cuda_workspace(dlt_ctx *ctx, size_t n, void **out);
dlt_status dlt__cuda_scratch(dlt_ctx *ctx, size_t n, void **out);
/* At least n zeroed ints for arrival counters; every kernel using them leaves them zero. */
dlt_status dlt__cuda_counters(dlt_ctx *ctx, size_t n, int **out);
/* graph.c tells: a captured graph was made (+1) or freed (-1); at zero the buffers retired
 * while graphs lived are freed */
void dlt__cuda_graphs_live(dlt_ctx *ctx, int delta);

/* side.c: the backend's side_* entries (lib/core/side.c); side_destroy frees the stream */
dlt_status dlt__cuda_side_fork(dlt_ctx *ctx, int32_t *forked);
dlt_status dlt__cuda_side_unfork(dlt_ctx *ctx);
dlt_status dlt__cuda_side_join(dlt_ctx *ctx);
void dlt__cuda_side_destroy(dlt_cuda_state *s);

/* plan_pool.c: blocks until no plan is being built in the background (wait_plans) */
void dlt__cuda_plans_wait(dlt_ctx *ctx);

/* device.c: the device_* and bench_* entries */
int32_t dlt__cuda_device_count(void);
dlt_status dlt__cuda_device_query(int32_t index, const char *func, dlt_device_props *out);
dlt_status dlt__cuda_device_pci_bus_id(int32_t index, char *buf, size_t n);
dlt_status dlt__cuda_bench_copy(dlt_ctx *ctx, size_t bytes, double *gbytes_per_s);
dlt_status dlt__cuda_bench_gemm(dlt_ctx *ctx, int32_t kind, int64_t m, int64_t n, int64_t k,
                                double *tflops);

/* graph.c */
void dlt__cuda_capture_trace(dlt_ctx *ctx, int32_t on);
dlt_status dlt__cuda_capture_begin(dlt_ctx *ctx);
dlt_status dlt__cuda_capture_end(dlt_ctx *ctx, int32_t ok, void **exec, int64_t *stats);
dlt_status dlt__cuda_graph_launch(dlt_ctx *ctx, void *exec);
void dlt__cuda_graph_free(dlt_ctx *ctx, void *exec);
/* The allocator's side (context.c; bytes already rounded): during a capture with an
 * arena, places the block in it (1, *ptr set) or returns 0 for the pool; while sizing,
 * records the pool's blocks. gmem_free returns 1 when ptr was an arena's block. */
int dlt__cuda_gmem_alloc(dlt_ctx *ctx, size_t bytes, void **ptr);
void dlt__cuda_gmem_note(dlt_ctx *ctx, void *ptr, size_t bytes);
int dlt__cuda_gmem_free(dlt_ctx *ctx, void *ptr, size_t bytes);
/* During a capture, outside the arena: capture_pooled notes a block the pool gave (a graph
 * allocation); capture_release returns 1 when the block being released came from before
 * the capture and is kept until the graph goes (graph.c, "orphans"), 0 when the caller
 * frees it (captured). */
void dlt__cuda_capture_pooled(dlt_ctx *ctx, void *ptr);
int dlt__cuda_capture_release(dlt_ctx *ctx, void *ptr);
/* Releases every arena (context teardown; frees in stream order). */
void dlt__cuda_gmem_destroy(dlt_cuda_state *s);

/* Kernel launchers implemented in .cu files (extern "C"). */
dlt_status dlt__cuda_convert(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src);
dlt_status dlt__cuda_fill(dlt_ctx *ctx, dlt_tensor *t, double value);
dlt_status dlt__cuda_rand(dlt_ctx *ctx, dlt_tensor *t, int32_t normal, double a, double b,
                          uint64_t seed, uint64_t offset);
dlt_status dlt__cuda_add(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *a, const dlt_tensor *b);
dlt_status dlt__cuda_accumulate(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src, int32_t beta);
dlt_status dlt__cuda_accumulate_multi(dlt_ctx *ctx, int32_t n, dlt_tensor *const *dsts,
                                      const dlt_tensor *const *srcs, const int32_t *betas);
dlt_status dlt__cuda_scale(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *s,
                           double alpha);
dlt_status dlt__cuda_sum(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double alpha);
dlt_status dlt__cuda_broadcast_scalar(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, double alpha);
/* relu.cu */
dlt_status dlt__cuda_relu_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x);
dlt_status dlt__cuda_relu_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y);
/* dx = dy where y > 0, else 0 (NaN in y passes dy), over n elements of dtype in memory order:
 * the ReLU backward on raw pointers (BatchNorm's unfused cuDNN path uses it too). */
dlt_status dlt__cuda_relu_mask(dlt_ctx *ctx, int32_t dtype, void *dx, const void *dy, const void *y,
                               int64_t n, const char *func);

#ifdef __cplusplus
}
#endif
#endif
