/*
 * context.c - CUDA backend set-up and memory: one stream per context, the cuBLAS, cuBLASLt
 * and cuDNN handles bound to it, and a stream-ordered memory pool (cudaMallocFromPoolAsync)
 * whose statistics are the context's memory statistics. Memory returns to the pool in
 * stream order, so freeing never synchronises; empty_cache trims the pool.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/core/gpu_arch.h"
#include "cuda_internal.h"

/* The architectures this file was compiled with (meson's gpu_arch; the same list for every
 * file of the CUDA backend). */
#ifndef DLT_CUDA_SASS
#define DLT_CUDA_SASS ""
#endif
#ifndef DLT_CUDA_PTX
#define DLT_CUDA_PTX ""
#endif

static void free_retired(dlt_cuda_state *s);

static void cuda_state_free(dlt_ctx *ctx, dlt_cuda_state *s) {
    if (!s) return;
    if (s->workspace_size || s->scratch_size)
        dlt__log(DLT_LOG_INFO, "dlt: CUDA workspace %zu bytes, scratch %zu bytes at the end of this context",
                 s->workspace_size, s->scratch_size);
    if (s->plan_pool && s->plan_pool_free) s->plan_pool_free(s->plan_pool);
    if (s->plans && s->plans_free) s->plans_free(s->plans);
    dlt__cuda_side_destroy(s);
    if (s->workspace) cudaFreeAsync(s->workspace, s->stream);
    if (s->scratch) cudaFreeAsync(s->scratch, s->stream);
    if (s->counters) cudaFreeAsync(s->counters, s->stream);
    free_retired(s);
    free(s->retired);
    dlt__cuda_gmem_destroy(s);
    if (s->stream) cudaStreamSynchronize(s->stream);
    if (s->cudnn) cudnnDestroy(s->cudnn);
    if (s->gemm && s->gemm_free) s->gemm_free(s->gemm);
    if (s->cublaslt) cublasLtDestroy(s->cublaslt);
    if (s->cublas) cublasDestroy(s->cublas);
    if (s->pool) cudaMemPoolDestroy(s->pool);
    if (s->stream) cudaStreamDestroy(s->stream);
    (void)cudaGetLastError();
    (void)ctx;
    free(s);
}

dlt_status dlt__cuda_ctx_init(dlt_ctx *ctx) {
    static const char *F = "dlt_ctx_create";
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return dlt__err(DLT_ERR_NO_DEVICE, F, "no usable CUDA device: %s (%s)", cudaGetErrorName(e),
                        cudaGetErrorString(e));
    }
    if (ctx->device_index >= n)
        return dlt__err(DLT_ERR_NO_DEVICE, F, "CUDA device %d does not exist (%d visible)",
                        ctx->device_index, n);
    size_t cudnn_ver = cudnnGetVersion();
    if (cudnn_ver / 10000 != 9 || cudnn_ver < 91400)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F,
                        "cuDNN %zu is loaded; libdltrain needs cuDNN 9.14 or newer 9.x (built "
                        "against %d)",
                        cudnn_ver, (int)CUDNN_VERSION);
    dlt_cuda_state *s = calloc(1, sizeof *s);
    if (!s) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate CUDA state");
    ctx->be_state = s;
    s->device = ctx->device_index;
    dlt_status st = DLT_OK;
#define INIT_CU(call)                                                                         \
    do {                                                                                      \
        cudaError_t ie = (call);                                                              \
        if (ie != cudaSuccess) {                                                              \
            st = dlt__cuda_fail(NULL, ie, F, #call);                                          \
            goto fail;                                                                        \
        }                                                                                     \
    } while (0)
    INIT_CU(cudaSetDevice(s->device));
    struct cudaDeviceProp prop;
    INIT_CU(cudaGetDeviceProperties(&prop, s->device));
    snprintf(s->name, sizeof s->name, "%s", prop.name);
    s->sm_count = prop.multiProcessorCount;
    s->smem_optin = (int)prop.sharedMemPerBlockOptin;
    s->cc_major = prop.major;
    s->coop_launch = prop.cooperativeLaunch;
    /* build: refuse a GPU none of the built code runs on (every kernel launch would fail
     * with "no kernel image"), saying how to rebuild; note a JIT-compiled PTX start */
    char arch_msg[512];
    const int runs = dlt__gpu_arch_check(prop.major, prop.minor, DLT_CUDA_SASS, DLT_CUDA_PTX,
                                         arch_msg, sizeof arch_msg);
    if (runs == DLT_GPU_ARCH_NONE) {
        st = dlt__err(DLT_ERR_NOT_SUPPORTED, F, "%s: %s", prop.name, arch_msg);
        goto fail;
    }
    if (runs == DLT_GPU_ARCH_PTX) dlt__log(DLT_LOG_WARNING, "dlt: %s: %s", prop.name, arch_msg);
    int pools = 0;
    INIT_CU(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, s->device));
    if (!pools) {
        st = dlt__err(DLT_ERR_NOT_SUPPORTED, F, "%s does not support stream-ordered memory pools",
                      prop.name);
        goto fail;
    }
    INIT_CU(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    struct cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = cudaMemAllocationTypePinned;
    pp.handleTypes = cudaMemHandleTypeNone;
    pp.location.type = cudaMemLocationTypeDevice;
    pp.location.id = s->device;
    INIT_CU(cudaMemPoolCreate(&s->pool, &pp));
    /* keep freed blocks cached in the pool (PyTorch's caching behaviour) until empty_cache */
    uint64_t threshold = UINT64_MAX;
    INIT_CU(cudaMemPoolSetAttribute(s->pool, cudaMemPoolAttrReleaseThreshold, &threshold));

    cublasStatus_t bs = cublasCreate(&s->cublas);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(s->cublas, s->stream);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasLtCreate(&s->cublaslt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        st = dlt__cublas_fail(NULL, bs, F, "cuBLAS set-up");
        goto fail;
    }
    cudnnStatus_t ds = cudnnCreate(&s->cudnn);
    if (ds == CUDNN_STATUS_SUCCESS) ds = cudnnSetStream(s->cudnn, s->stream);
    if (ds != CUDNN_STATUS_SUCCESS) {
        st = dlt__cudnn_fail(NULL, ds, F, "cuDNN set-up");
        goto fail;
    }
    return DLT_OK;
#undef INIT_CU
fail:
    cuda_state_free(ctx, s);
    ctx->be_state = NULL;
    return st;
}

void dlt__cuda_ctx_fini(dlt_ctx *ctx) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (!s) return;
    cudaSetDevice(s->device);
    cuda_state_free(ctx, s);
    ctx->be_state = NULL;
}

dlt_status dlt__cuda_device_name(dlt_ctx *ctx, char *buf, size_t n) {
    snprintf(buf, n, "%s", dlt__cu(ctx)->name);
    return DLT_OK;
}

/* 256-byte granularity keeps every tensor aligned for vector loads and cuDNN; the graph
 * arena places blocks of this size, so alloc and free must agree on it */
static size_t block_bytes(size_t nbytes) { return nbytes ? (nbytes + 255) & ~(size_t)255 : 256; }

dlt_status dlt__cuda_alloc(dlt_ctx *ctx, size_t nbytes, void **ptr) {
    dlt_cuda_state *s = dlt__cu(ctx);
    const size_t rounded = block_bytes(nbytes);
    /* side work allocates nothing: a capture's arena places blocks in host order, blind to
     * streams, so a block taken and given back there could go to main-stream work while the
     * side still uses it. Refused in eager steps too, so tests catch a new one. */
    if (s->side.on) return dlt__err(DLT_ERR_INTERNAL, "dlt_alloc", "an allocation on the side stream");
    if (s->gmem && dlt__cuda_gmem_alloc(ctx, rounded, ptr)) {
        s->live_allocs++;
        return DLT_OK;
    }
    cudaError_t e = cudaMallocFromPoolAsync(ptr, rounded, s->pool, s->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (e == cudaErrorMemoryAllocation)
            return dlt__err(DLT_ERR_DEVICE_OUT_OF_MEMORY, "dlt_alloc",
                            "out of device memory allocating %zu bytes on %s", nbytes, s->name);
        return dlt__cuda_fail(ctx, e, "dlt_alloc", "cudaMallocFromPoolAsync");
    }
    if (s->gmem) dlt__cuda_gmem_note(ctx, *ptr, rounded);
    if (ctx->capturing) dlt__cuda_capture_pooled(ctx, *ptr);
    s->live_allocs++;
    return DLT_OK;
}

void dlt__cuda_free(dlt_ctx *ctx, void *ptr, size_t nbytes) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (!ptr || !s) return;
    const int arena_block = s->gmem && dlt__cuda_gmem_free(ctx, ptr, block_bytes(nbytes));
    const int kept = !arena_block && ctx->capturing && dlt__cuda_capture_release(ctx, ptr);
    if (!arena_block && !kept && cudaFreeAsync(ptr, s->stream) != cudaSuccess) (void)cudaGetLastError();
    s->live_allocs--;
}

dlt_status dlt__cuda_memcpy_h2d(dlt_ctx *ctx, void *dst, const void *src, size_t n) {
    /* From pageable memory this returns once the source has been staged, so the caller may
     * reuse its buffer immediately. */
    DLT_CU(ctx, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, dlt__stream(ctx)), "dlt_copy");
    return DLT_OK;
}

dlt_status dlt__cuda_memcpy_d2h(dlt_ctx *ctx, void *dst, const void *src, size_t n) {
    DLT_CU(ctx, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, dlt__stream(ctx)), "dlt_copy");
    DLT_CU(ctx, cudaStreamSynchronize(dlt__stream(ctx)), "dlt_copy");
    return DLT_OK;
}

dlt_status dlt__cuda_memcpy_d2d(dlt_ctx *ctx, void *dst, const void *src, size_t n) {
    DLT_CU(ctx, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, dlt__stream(ctx)), "dlt_copy");
    return DLT_OK;
}

dlt_status dlt__cuda_memset0(dlt_ctx *ctx, void *dst, size_t n) {
    DLT_CU(ctx, cudaMemsetAsync(dst, 0, n, dlt__stream(ctx)), "dlt_memset");
    return DLT_OK;
}

dlt_status dlt__cuda_synchronize(dlt_ctx *ctx) {
    DLT_CU(ctx, cudaStreamSynchronize(dlt__stream(ctx)), "dlt_ctx_synchronize");
    return DLT_OK;
}

/* A captured step's memory is an arena from our pool (graph.c); with DLT_GRAPH_ARENA=0 it
 * lives in the device's graph memory, not ours: both are counted, so a graphed step reports
 * what it really uses. (The graph attributes are per device: with several contexts on one
 * device, each sees the others' driver-placed graph memory too.) */
dlt_status dlt__cuda_mem_stat(dlt_ctx *ctx, int32_t which, uint64_t *out) {
    dlt_cuda_state *s = dlt__cu(ctx);
    enum cudaMemPoolAttr attr;
    enum cudaGraphMemAttributeType gattr;
    switch (which) {
    case DLT_MEM_ALLOCATED: attr = cudaMemPoolAttrUsedMemCurrent; gattr = cudaGraphMemAttrUsedMemCurrent; break;
    case DLT_MEM_PEAK_ALLOCATED: attr = cudaMemPoolAttrUsedMemHigh; gattr = cudaGraphMemAttrUsedMemHigh; break;
    case DLT_MEM_RESERVED: attr = cudaMemPoolAttrReservedMemCurrent; gattr = cudaGraphMemAttrReservedMemCurrent; break;
    default: *out = s->live_allocs; return DLT_OK;
    }
    uint64_t pool = 0, graph = 0;
    DLT_CU(ctx, cudaMemPoolGetAttribute(s->pool, attr, &pool), "dlt_memory_stat");
    DLT_CU(ctx, cudaDeviceGetGraphMemAttribute(s->device, gattr, &graph), "dlt_memory_stat");
    *out = pool + graph;
    return DLT_OK;
}

dlt_status dlt__cuda_mem_reset_peak(dlt_ctx *ctx) {
    uint64_t zero = 0; /* the only value the runtime accepts; it restarts from current use */
    DLT_CU(ctx, cudaMemPoolSetAttribute(dlt__cu(ctx)->pool, cudaMemPoolAttrUsedMemHigh, &zero),
           "dlt_memory_reset_peak");
    DLT_CU(ctx, cudaDeviceSetGraphMemAttribute(dlt__cu(ctx)->device, cudaGraphMemAttrUsedMemHigh, &zero),
           "dlt_memory_reset_peak");
    return DLT_OK;
}

dlt_status dlt__cuda_empty_cache(dlt_ctx *ctx) {
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, "dlt_empty_cache", "not allowed during graph capture");
    DLT_CU(ctx, cudaStreamSynchronize(dlt__stream(ctx)), "dlt_empty_cache");
    DLT_CU(ctx, cudaMemPoolTrimTo(dlt__cu(ctx)->pool, 0), "dlt_empty_cache");
    return DLT_OK;
}

/* A shared buffer (workspace, scratch, counters) replaced by a larger one. Freed at once
 * when no captured graph exists; otherwise a graph may hold its address and replay into it
 * (an evaluation graph captured before the training step grew the workspace), and the
 * pool would hand the memory to something else: it is kept until the last graph is freed.
 * Fails only when the host cannot record it; nothing changed then. */
static dlt_status retire_buffer(dlt_ctx *ctx, void *p, const char *F) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (!p) return DLT_OK;
    if (s->live_graphs <= 0) {
        if (cudaFreeAsync(p, s->stream) != cudaSuccess) (void)cudaGetLastError();
        return DLT_OK;
    }
    if (s->n_retired == s->cap_retired) {
        const size_t cap = s->cap_retired ? 2 * s->cap_retired : 8;
        void **r = realloc(s->retired, cap * sizeof *r);
        if (!r) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot record a replaced buffer");
        s->retired = r, s->cap_retired = cap;
    }
    s->retired[s->n_retired++] = p;
    return DLT_OK;
}

static void free_retired(dlt_cuda_state *s) {
    for (size_t i = 0; i < s->n_retired; i++)
        if (cudaFreeAsync(s->retired[i], s->stream) != cudaSuccess) (void)cudaGetLastError();
    s->n_retired = 0;
}

void dlt__cuda_graphs_live(dlt_ctx *ctx, int delta) {
    dlt_cuda_state *s = dlt__cu(ctx);
    s->live_graphs += delta;
    if (s->live_graphs <= 0) {
        s->live_graphs = 0;
        free_retired(s);
    }
}

dlt_status dlt__cuda_workspace(dlt_ctx *ctx, size_t n, void **out) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (n <= s->workspace_size) {
        *out = s->workspace;
        return DLT_OK;
    }
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, "dlt_workspace",
                        "the step needs a larger workspace (%zu bytes) than warm-up sized (%zu)", n,
                        s->workspace_size);
    void *p = NULL;
    size_t want = n + n / 4;
    if (dlt__alloc_should_fail(ctx))
        return dlt__err(DLT_ERR_DEVICE_OUT_OF_MEMORY, "dlt_workspace", "injected allocation failure");
    cudaError_t e = cudaMallocFromPoolAsync(&p, want, s->pool, s->stream);
    if (e != cudaSuccess) return dlt__cuda_fail(ctx, e, "dlt_workspace", "cudaMallocFromPoolAsync");
    dlt_status st = retire_buffer(ctx, s->workspace, "dlt_workspace");
    if (st != DLT_OK) {
        (void)cudaFreeAsync(p, s->stream);
        return st;
    }
    s->workspace = p;
    s->workspace_size = want;
    *out = p;
    return DLT_OK;
}

dlt_status dlt__cuda_scratch(dlt_ctx *ctx, size_t n, void **out) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (s->side.on) /* one buffer for the main stream's kernels: the side's would race them */
        return dlt__err(DLT_ERR_INTERNAL, "dlt_scratch", "the scratch buffer is not available on the side stream");
    if (n <= s->scratch_size) {
        *out = s->scratch;
        return DLT_OK;
    }
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, "dlt_scratch",
                        "the step needs more scratch memory than warm-up sized");
    void *p = NULL;
    size_t want = n < 4096 ? 4096 : n + n / 4;
    cudaError_t e = cudaMallocFromPoolAsync(&p, want, s->pool, s->stream);
    if (e != cudaSuccess) return dlt__cuda_fail(ctx, e, "dlt_scratch", "cudaMallocFromPoolAsync");
    dlt_status st = retire_buffer(ctx, s->scratch, "dlt_scratch");
    if (st != DLT_OK) {
        (void)cudaFreeAsync(p, s->stream);
        return st;
    }
    s->scratch = p;
    s->scratch_size = want;
    *out = p;
    return DLT_OK;
}

dlt_status dlt__cuda_counters(dlt_ctx *ctx, size_t n, int **out) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (s->side.on) /* one buffer for the main stream's kernels: the side's would race them */
        return dlt__err(DLT_ERR_INTERNAL, "dlt_counters", "the arrival counters are not available on the side stream");
    if (n <= s->counters_n) {
        *out = s->counters;
        return DLT_OK;
    }
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, "dlt_counters", "the step needs more counters than warm-up sized");
    const size_t want = n < 1024 ? 1024 : n;
    if (dlt__alloc_should_fail(ctx))
        return dlt__err(DLT_ERR_DEVICE_OUT_OF_MEMORY, "dlt_counters", "injected allocation failure");
    void *p = NULL;
    cudaError_t e = cudaMallocFromPoolAsync(&p, want * sizeof(int), s->pool, s->stream);
    if (e != cudaSuccess) return dlt__cuda_fail(ctx, e, "dlt_counters", "cudaMallocFromPoolAsync");
    e = cudaMemsetAsync(p, 0, want * sizeof(int), s->stream);
    if (e != cudaSuccess) {
        (void)cudaFreeAsync(p, s->stream);
        return dlt__cuda_fail(ctx, e, "dlt_counters", "cudaMemsetAsync");
    }
    /* the old counters are all zero (no kernel is half-way): nothing to carry over; a live
     * graph keeps using them (zero between its kernels too) */
    dlt_status st = retire_buffer(ctx, s->counters, "dlt_counters");
    if (st != DLT_OK) {
        (void)cudaFreeAsync(p, s->stream);
        return st;
    }
    s->counters = (int *)p;
    s->counters_n = want;
    *out = s->counters;
    return DLT_OK;
}
