/*
 * device.c - the CUDA side of the hardware reports: device properties through the runtime,
 * library versions, and two micro-benchmarks (device-to-device copy bandwidth and cuBLAS
 * GEMM throughput): the backend table's device_* and bench_* entries. lib/device/info.c
 * validates arguments and derives the table values.
 *
 * CUDA 13 removed cudaDeviceProp.memoryClockRate and .clockRate (memoryBusWidth and
 * l2CacheSize remain); every clock and the bus width are read with cudaDeviceGetAttribute
 * (cudaDevAttrMemoryClockRate, cudaDevAttrGlobalMemoryBusWidth, cudaDevAttrClockRate, all
 * in kHz or bits), which works on every toolkit we build with.
 *
 * Benchmarks time with CUDA events on the context's stream: warm-up runs first (clocks
 * ramp up, cuBLAS picks its kernels, pages are mapped), then timed runs, each repeating the
 * operation enough to dwarf the event resolution; the median run is reported because it
 * ignores a run disturbed by something else on the machine. They synchronise (documented in
 * dltrain/device.h) and leave the context's cuBLAS handle settings as they found them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define BENCH_WARMUP_COPY 3
#define BENCH_WARMUP_GEMM 2
#define BENCH_RUNS 10

/* ---------------------------------------------------------------------------------------
 * Device properties
 * ------------------------------------------------------------------------------------- */
int32_t dlt__cuda_device_count(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

dlt_status dlt__cuda_device_pci_bus_id(int32_t index, char *buf, size_t n) {
    if (buf && n > 0) buf[0] = '\0';
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || index < 0 || index >= count || n < 13) {
        (void)cudaGetLastError();
        return DLT_ERR_NO_DEVICE;
    }
    if (cudaDeviceGetPCIBusId(buf, (int)(n > 64 ? 64 : n), index) != cudaSuccess) {
        (void)cudaGetLastError();
        buf[0] = '\0';
        return DLT_ERR_CUDA;
    }
    return DLT_OK;
}

dlt_status dlt__cuda_device_query(int32_t index, const char *func, dlt_device_props *out) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return dlt__err(DLT_ERR_NO_DEVICE, func, "no usable CUDA device: %s (%s)",
                        cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (index >= count)
        return dlt__err(DLT_ERR_NO_DEVICE, func, "CUDA device %d does not exist (%d visible)",
                        index, count);
    struct cudaDeviceProp prop;
#define Q(call)                                                                               \
    do {                                                                                      \
        cudaError_t qe = (call);                                                              \
        if (qe != cudaSuccess) return dlt__cuda_fail(NULL, qe, func, #call);                  \
    } while (0)
    Q(cudaGetDeviceProperties(&prop, index));
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->sm_count = prop.multiProcessorCount;
    out->memory_bytes = (int64_t)prop.totalGlobalMem;
    int v = 0;
    Q(cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, index));
    out->memory_bus_bits = v;
    Q(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, index));
    out->memory_clock_khz = v;
    Q(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, index));
    out->l2_bytes = v;
    Q(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, index));
    out->sm_clock_khz = v;
    Q(cudaDriverGetVersion(&v));
    out->driver_version = v;
    Q(cudaRuntimeGetVersion(&v));
    out->runtime_version = v;
    if (cudaDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, index) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "unknown");
    }
#undef Q
    out->cudnn_version = (int64_t)cudnnGetVersion();
    int maj = 0, min = 0, pat = 0;
    if (cublasGetProperty(MAJOR_VERSION, &maj) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(MINOR_VERSION, &min) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(PATCH_LEVEL, &pat) == CUBLAS_STATUS_SUCCESS)
        out->cublas_version = (int64_t)maj * 10000 + min * 100 + pat;
    return DLT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Benchmark helpers
 * ------------------------------------------------------------------------------------- */
static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median_ms(float *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_float);
    return n % 2 ? t[n / 2] : 0.5f * (t[n / 2 - 1] + t[n / 2]);
}

/* Events live on the context's device; the caller's current device is put back after. */
typedef struct bench_env {
    int prev_device;
    cudaEvent_t start, stop;
} bench_env;

static dlt_status bench_begin(dlt_ctx *ctx, bench_env *b, const char *func) {
    memset(b, 0, sizeof *b);
    b->prev_device = -1;
    DLT_CU(ctx, cudaGetDevice(&b->prev_device), func);
    DLT_CU(ctx, cudaSetDevice(dlt__cu(ctx)->device), func);
    DLT_CU(ctx, cudaEventCreate(&b->start), func);
    DLT_CU(ctx, cudaEventCreate(&b->stop), func);
    return DLT_OK;
}

static void bench_end(bench_env *b) {
    if (b->start) cudaEventDestroy(b->start);
    if (b->stop) cudaEventDestroy(b->stop);
    if (b->prev_device >= 0) cudaSetDevice(b->prev_device);
    (void)cudaGetLastError();
}

/* ---------------------------------------------------------------------------------------
 * Copy bandwidth
 * ------------------------------------------------------------------------------------- */
static dlt_status copy_runs(dlt_ctx *ctx, bench_env *b, void *dst, const void *src, size_t bytes,
                            int inner, float *ms, const char *F) {
    cudaStream_t st = dlt__stream(ctx);
    for (int w = 0; w < BENCH_WARMUP_COPY; w++)
        DLT_CU(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st), F);
    for (int r = 0; r < BENCH_RUNS; r++) {
        DLT_CU(ctx, cudaEventRecord(b->start, st), F);
        for (int i = 0; i < inner; i++)
            DLT_CU(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st), F);
        DLT_CU(ctx, cudaEventRecord(b->stop, st), F);
        DLT_CU(ctx, cudaEventSynchronize(b->stop), F);
        float t = 0;
        DLT_CU(ctx, cudaEventElapsedTime(&t, b->start, b->stop), F);
        ms[r] = t / (float)inner;
    }
    return DLT_OK;
}

dlt_status dlt__cuda_bench_copy(dlt_ctx *ctx, size_t bytes, double *gbytes_per_s) {
    static const char *F = "dlt_bench_copy_bandwidth";
    int64_t shape[1] = {(int64_t)bytes};
    dlt_tensor *a = NULL, *c = NULL;
    bench_env b;
    float ms[BENCH_RUNS];
    dlt_status st = bench_begin(ctx, &b, F);
    if (st != DLT_OK) goto done;
    DLT_CHECK_GOTO(st, dlt_tensor_empty(ctx, DLT_U8, shape, 1, DLT_FORMAT_CONTIGUOUS, &a), done);
    DLT_CHECK_GOTO(st, dlt_tensor_empty(ctx, DLT_U8, shape, 1, DLT_FORMAT_CONTIGUOUS, &c), done);
    /* defined contents (the copy engine does not care; sanitizers do) */
    {
        cudaError_t e = cudaMemsetAsync(dlt__data(a), 0x5a, bytes, dlt__stream(ctx));
        if (e != cudaSuccess) {
            st = dlt__cuda_fail(ctx, e, F, "cudaMemsetAsync");
            goto done;
        }
    }
    /* about 4 GB of traffic per timed run: ~1 ms on HBM3e, more on slower memory */
    double per_run = 4e9 / (2.0 * (double)bytes);
    int inner = per_run < 1 ? 1 : per_run > 1000 ? 1000 : (int)ceil(per_run);
    DLT_CHECK_GOTO(st, copy_runs(ctx, &b, dlt__data(c), dlt__data(a), bytes, inner, ms, F), done);
    float med = median_ms(ms, BENCH_RUNS);
    if (!(med > 0)) {
        st = dlt__err(DLT_ERR_INTERNAL, F, "the copy took %g ms", (double)med);
        goto done;
    }
    *gbytes_per_s = 2.0 * (double)bytes / ((double)med * 1e-3) / 1e9;
done:
    dlt_tensor_release(a);
    dlt_tensor_release(c);
    bench_end(&b);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * GEMM throughput
 * ------------------------------------------------------------------------------------- */
typedef struct gemm_cfg {
    int32_t dtype;
    cudaDataType_t ctype;
    cublasComputeType_t compute;
} gemm_cfg;

static gemm_cfg gemm_config(int32_t kind) {
    gemm_cfg g;
    switch (kind) {
    case DLT_GEMM_TF32: g.dtype = DLT_F32; g.ctype = CUDA_R_32F; g.compute = CUBLAS_COMPUTE_32F_FAST_TF32; break;
    case DLT_GEMM_FP16: g.dtype = DLT_F16; g.ctype = CUDA_R_16F; g.compute = CUBLAS_COMPUTE_32F; break;
    case DLT_GEMM_BF16: g.dtype = DLT_BF16; g.ctype = CUDA_R_16BF; g.compute = CUBLAS_COMPUTE_32F; break;
    default: g.dtype = DLT_F32; g.ctype = CUDA_R_32F; g.compute = CUBLAS_COMPUTE_32F; break;
    }
    return g;
}

/* Column-major C[m,n] = A[m,k] B[k,n]; for a throughput figure the layout is immaterial. */
static dlt_status gemm_once(dlt_ctx *ctx, const gemm_cfg *g, int m, int n, int k, const void *A,
                            const void *B, void *C, const char *F) {
    const float alpha = 1.0f, beta = 0.0f;
    DLT_CUBLAS(ctx,
               cublasGemmEx(dlt__cu(ctx)->cublas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, A,
                            g->ctype, m, B, g->ctype, k, &beta, C, g->ctype, m, g->compute,
                            CUBLAS_GEMM_DEFAULT),
               F);
    return DLT_OK;
}

static dlt_status gemm_runs(dlt_ctx *ctx, bench_env *b, const gemm_cfg *g, int m, int n, int k,
                            const void *A, const void *B, void *C, int inner, float *ms,
                            const char *F) {
    cudaStream_t st = dlt__stream(ctx);
    for (int w = 0; w < BENCH_WARMUP_GEMM; w++) DLT_CHECK(gemm_once(ctx, g, m, n, k, A, B, C, F));
    for (int r = 0; r < BENCH_RUNS; r++) {
        DLT_CU(ctx, cudaEventRecord(b->start, st), F);
        for (int i = 0; i < inner; i++) DLT_CHECK(gemm_once(ctx, g, m, n, k, A, B, C, F));
        DLT_CU(ctx, cudaEventRecord(b->stop, st), F);
        DLT_CU(ctx, cudaEventSynchronize(b->stop), F);
        float t = 0;
        DLT_CU(ctx, cudaEventElapsedTime(&t, b->start, b->stop), F);
        ms[r] = t / (float)inner;
    }
    return DLT_OK;
}

dlt_status dlt__cuda_bench_gemm(dlt_ctx *ctx, int32_t kind, int64_t m, int64_t n, int64_t k,
                                double *tflops) {
    static const char *F = "dlt_bench_gemm";
    gemm_cfg g = gemm_config(kind);
    int64_t sa[2] = {k, m}, sb[2] = {n, k}, sc[2] = {n, m}; /* column-major A, B, C */
    dlt_tensor *A = NULL, *B = NULL, *C = NULL;
    cublasHandle_t h = dlt__cu(ctx)->cublas;
    cublasMath_t prev_math = CUBLAS_DEFAULT_MATH;
    cublasPointerMode_t prev_ptr = CUBLAS_POINTER_MODE_HOST;
    int restore = 0;
    bench_env b;
    float ms[BENCH_RUNS];
    dlt_status st = bench_begin(ctx, &b, F);
    if (st != DLT_OK) goto done;
    DLT_CHECK_GOTO(st, dlt_tensor_empty(ctx, g.dtype, sa, 2, DLT_FORMAT_CONTIGUOUS, &A), done);
    DLT_CHECK_GOTO(st, dlt_tensor_empty(ctx, g.dtype, sb, 2, DLT_FORMAT_CONTIGUOUS, &B), done);
    DLT_CHECK_GOTO(st, dlt_tensor_empty(ctx, g.dtype, sc, 2, DLT_FORMAT_CONTIGUOUS, &C), done);
    /* random operands: zeros would let the GPU idle its multipliers and overstate clocks */
    DLT_CHECK_GOTO(st, dlt_tensor_rand_uniform(A, -1.0, 1.0), done);
    DLT_CHECK_GOTO(st, dlt_tensor_rand_uniform(B, -1.0, 1.0), done);
    DLT_CHECK_GOTO(st, dlt_tensor_rand_uniform(C, -1.0, 1.0), done);
    {
        /* host scalars, and for fp32 no TF32 whatever the handle was set to */
        cublasStatus_t bs = cublasGetMathMode(h, &prev_math);
        if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasGetPointerMode(h, &prev_ptr);
        if (bs == CUBLAS_STATUS_SUCCESS) restore = 1;
        if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
        if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
        if (bs != CUBLAS_STATUS_SUCCESS) {
            st = dlt__cublas_fail(ctx, bs, F, "cuBLAS mode set-up");
            goto done;
        }
    }
    double flop = 2.0 * (double)m * (double)n * (double)k;
    /* about 10^12 FLOP per timed run: ~1.5 ms at Hopper's fp16 rate */
    double per_run = 1e12 / flop;
    int inner = per_run < 1 ? 1 : per_run > 1000 ? 1000 : (int)ceil(per_run);
    DLT_CHECK_GOTO(st, gemm_runs(ctx, &b, &g, (int)m, (int)n, (int)k, dlt__data(A), dlt__data(B),
                                 dlt__data(C), inner, ms, F),
                   done);
    float med = median_ms(ms, BENCH_RUNS);
    if (!(med > 0)) {
        st = dlt__err(DLT_ERR_INTERNAL, F, "the GEMM took %g ms", (double)med);
        goto done;
    }
    *tflops = flop / ((double)med * 1e-3) / 1e12;
done:
    if (restore) {
        (void)cublasSetMathMode(h, prev_math);
        (void)cublasSetPointerMode(h, prev_ptr);
    }
    dlt_tensor_release(A);
    dlt_tensor_release(B);
    dlt_tensor_release(C);
    bench_end(&b);
    return st;
}
