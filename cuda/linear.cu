/*
 * linear.cu - the fully connected layer on cuBLASLt: y = x w^T + b, dx = dy w,
 * dw = beta*dw + dy^T x and db = beta*db + sum_rows(dy). f32/f16/bf16 in and out, fp32
 * accumulation (CUBLAS_COMPUTE_32F; fp32 tensors use CUBLAS_COMPUTE_32F_FAST_TF32 only when
 * the context allows TF32).
 *
 * Layout mapping. Our tensors are row-major: x [M,K], w [N,K], y [M,N]. cuBLASLt is
 * column-major, and a row-major [r,c] buffer is the column-major [c,r] matrix with ld = c,
 * i.e. its transpose. So every product is computed transposed (D = op(A) op(B) below is
 * column-major; the sizes are cuBLASLt's m x n with inner size k):
 *   forward   y^T [N,M]  = (w stored [K,N], op T) * (x^T stored [K,M], op N)   m=N n=M k=K
 *   bwd data  dx^T [K,M] = (w stored [K,N], op N) * (dy^T stored [N,M], op N)  m=K n=M k=N
 *   bwd wgt   dw^T [K,N] = (x^T stored [K,M], op N) * (dy^T stored [N,M], op T) m=K n=N k=M
 * The bias of the forward is a vector over D's rows (N): CUBLASLT_EPILOGUE_BIAS. The bias
 * gradient is the sum of op(B) = dy over the GEMM's k (= M) for each of D's columns (N):
 * CUBLASLT_EPILOGUE_BGRADB, fused into the weight-gradient GEMM when beta == 0. The epilogue
 * writes db (no accumulation), so beta == 1, or a shape/dtype for which cuBLASLt offers no
 * BGRADB algorithm, uses the plain GEMM plus a deterministic column-sum kernel; likewise a
 * forward without a BIAS algorithm broadcasts b into y and runs the GEMM with beta = 1.
 *
 * The GPT MLP's c_fc + GELU (tanh form) runs as one GEMM with CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
 * D = gelu(acc + b) and the auxiliary output h = acc + b (the GELU's input, which the
 * backward needs), both in the output dtype; the GELU is applied to the fp32 accumulator
 * plus bias before rounding, where the separate kernel rounds h first. Its backward half is
 * c_proj's data-gradient GEMM with CUBLASLT_EPILOGUE_DGELU: D = gelu'(aux) * (dy w) with aux
 * = that h, read in the layout the forward wrote it (c_proj's dx^T is [4C, M] column-major
 * with ld 4C, as c_fc's y^T was). The derivative multiplies the fp32 accumulator, where the
 * unfused path rounds dg = dy w to 16 bits before the GELU's backward kernel.
 * DGELU_BGRAD would also give c_fc's bias gradient (the sum of dh over rows), but c_fc's
 * weight-gradient GEMM already produces it in its BGRADB epilogue, so plain DGELU is used.
 *
 * Plans (matmul descriptor, layouts and the heuristic's algorithm) are cached per shape,
 * dtype, compute type, epilogue and pointer alignment in a small round-robin table owned
 * by the context (dlt_cuda_state.gemm), so a warmed-up call allocates nothing and only sets
 * the per-call pointers: safe inside CUDA graph capture. The workspace comes from the
 * context's shared arena (dlt__cuda_workspace), whose size the heuristic is told. With
 * DLT_GEMM_AUTOTUNE=1 a plan keeps the heuristic's first 8 algorithms and its first call
 * that overwrites its outputs outside a capture times them (tune); the fastest stays.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "cudnn_graph.h"
#include "ops_cuda.h"

using namespace dlt;

#define DLT_GEMM_CACHE_SIZE 64
/* Upper bound offered to the heuristic; the chosen algorithm's own need is what is
 * reserved. 32 MiB is NVIDIA's recommendation for Hopper. */
#define DLT_GEMM_MAX_WORKSPACE ((uint64_t)32 << 20)

/* GEMM_STRIDED: operands with any leading dimensions and transposes (dlt__cuda_gemm_rm) */
enum { GEMM_FWD = 0, GEMM_DGRAD = 1, GEMM_WGRAD = 2, GEMM_STRIDED = 3 };

struct dlt_gemm_key {
    int32_t kind, dtype, compute, epilogue;
    int64_t m, n, k;
    int32_t align; /* smallest alignment (bytes) of the pointers the plan was chosen for */
    int32_t ta, tb; /* GEMM_STRIDED: cuBLASLt's ops and leading dimensions (else 0) */
    int32_t pad_;
    int64_t lda, ldb, ldd;
};

/* DLT_GEMM_AUTOTUNE=1: the heuristic's first GEMM_TUNE_MAX algorithms are timed */
#define GEMM_TUNE_MAX 8
#define GEMM_TUNE_REPS 3

struct dlt_gemm_plan {
    dlt_gemm_key key;
    int32_t used;   /* slot holds a plan */
    int32_t usable; /* cuBLASLt offered an algorithm (0: use the fallback path) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    size_t workspace;
    /* autotune: the candidates (the first is algo) until the first call that may try them */
    int32_t n_cand;
    cublasLtMatmulAlgo_t cand[GEMM_TUNE_MAX];
    size_t cand_ws[GEMM_TUNE_MAX];
};

struct dlt_cuda_gemm_cache {
    dlt_gemm_plan plans[DLT_GEMM_CACHE_SIZE];
    int32_t next_victim;
};

namespace {

void plan_destroy(dlt_gemm_plan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    memset(p, 0, sizeof *p);
}

void gemm_cache_free(dlt_cuda_gemm_cache *c) {
    if (!c) return;
    for (int i = 0; i < DLT_GEMM_CACHE_SIZE; i++) plan_destroy(&c->plans[i]);
    free(c);
}

cudaDataType_t cuda_type(int32_t dtype) {
    switch (dtype) {
    case DLT_F16: return CUDA_R_16F;
    case DLT_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
    }
}

int32_t ptr_align(const void *p) {
    uintptr_t u = (uintptr_t)p;
    int32_t a = 256;
    while (a > 1 && (u & (uintptr_t)(a - 1))) a >>= 1;
    return a;
}

/* The operands of one GEMM in cuBLASLt's column-major terms. */
struct GemmCall {
    int kind;
    int32_t dtype;
    int64_t m, n, k;
    const void *A, *B; /* op(A) is m x k, op(B) is k x n */
    void *D;           /* m x n, ld m; also C */
    void *bias;        /* bias (BIAS) or bias gradient (BGRADB), else NULL */
    void *aux;         /* GELU_AUX*: the pre-activation output; DGELU: that input; m x n, ld m */
    cublasLtEpilogue_t epilogue;
    float beta;
    /* GEMM_STRIDED only: op(A), op(B) as cublasOperation_t and the leading dimensions */
    int32_t ta, tb;
    int64_t lda, ldb, ldd;
};

/* Storage shape (rows, cols, ld) of A and B and their transposes for each kind. */
void operand_layout(const GemmCall &g, uint64_t *ar, uint64_t *ac, int64_t *lda, int32_t *ta,
                    uint64_t *br, uint64_t *bc, int64_t *ldb, int32_t *tb) {
    switch (g.kind) {
    case GEMM_FWD: /* A = w as [K,N] (op T), B = x^T as [K,M] */
        *ar = (uint64_t)g.k; *ac = (uint64_t)g.m; *lda = g.k; *ta = CUBLAS_OP_T;
        *br = (uint64_t)g.k; *bc = (uint64_t)g.n; *ldb = g.k; *tb = CUBLAS_OP_N;
        break;
    case GEMM_DGRAD: /* A = w as [K,N], B = dy^T as [N,M] */
        *ar = (uint64_t)g.m; *ac = (uint64_t)g.k; *lda = g.m; *ta = CUBLAS_OP_N;
        *br = (uint64_t)g.k; *bc = (uint64_t)g.n; *ldb = g.k; *tb = CUBLAS_OP_N;
        break;
    case GEMM_WGRAD: /* A = x^T as [K,M], B = dy^T as [N,M] (op T) */
        *ar = (uint64_t)g.m; *ac = (uint64_t)g.k; *lda = g.m; *ta = CUBLAS_OP_N;
        *br = (uint64_t)g.n; *bc = (uint64_t)g.k; *ldb = g.n; *tb = CUBLAS_OP_T;
        break;
    default: /* GEMM_STRIDED: as the caller laid them out */
        *ta = g.ta; *tb = g.tb; *lda = g.lda; *ldb = g.ldb;
        *ar = (uint64_t)(g.ta == CUBLAS_OP_N ? g.m : g.k); *ac = (uint64_t)(g.ta == CUBLAS_OP_N ? g.k : g.m);
        *br = (uint64_t)(g.tb == CUBLAS_OP_N ? g.k : g.n); *bc = (uint64_t)(g.tb == CUBLAS_OP_N ? g.n : g.k);
        break;
    }
}

/* Runs cublasLt setters, turning a failure into a status (F names the public op). */
#define LT_TRY(call)                                                                          \
    do {                                                                                      \
        cublasStatus_t lt_s = (call);                                                         \
        if (lt_s != CUBLAS_STATUS_SUCCESS) {                                                  \
            st = dlt__cublas_fail(ctx, lt_s, F, #call);                                       \
            goto fail;                                                                        \
        }                                                                                     \
    } while (0)

/* Builds the descriptor, layouts and algorithm for a key into p (an empty slot). */
dlt_status plan_build(dlt_ctx *ctx, const GemmCall &g, const dlt_gemm_key &key, dlt_gemm_plan *p,
                      const char *F) {
    dlt_status st = DLT_OK;
    cublasLtMatmulPreference_t pref = NULL;
    const cudaDataType_t t = cuda_type(g.dtype);
    const cublasComputeType_t compute = (cublasComputeType_t)key.compute;
    const cudaDataType_t scale_t = CUDA_R_32F;
    uint64_t ar, ac, br, bc;
    int64_t lda, ldb;
    int32_t ta, tb;
    operand_layout(g, &ar, &ac, &lda, &ta, &br, &bc, &ldb, &tb);
    memset(p, 0, sizeof *p);
    p->key = key;

    LT_TRY(cublasLtMatmulDescCreate(&p->desc, compute, scale_t));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    {
        uint32_t epi = (uint32_t)g.epilogue;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    }
    if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        int32_t bt = (int32_t)t; /* bias and bias gradient in the output's type */
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        /* the heuristic reads the pointer's value to learn its alignment */
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                              sizeof g.bias));
    }
    if (g.aux) {
        const int64_t ld = g.m;
        int32_t at = (int32_t)t;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
                                              sizeof g.aux));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at,
                                              sizeof at));
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&p->a, t, ar, ac, lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->b, t, br, bc, ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->d, t, (uint64_t)g.m, (uint64_t)g.n, g.ldd > 0 ? g.ldd : g.m));

    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    {
        uint64_t ws = DLT_GEMM_MAX_WORKSPACE;
        const dlt_cudnn_settings *set = NULL; /* DLT_WORKSPACE_MAX caps what cuBLASLt may ask */
        if (dlt__cudnn_settings(ctx, &set) == DLT_OK && (uint64_t)set->workspace_max < ws)
            ws = (uint64_t)set->workspace_max;
        uint32_t al = (uint32_t)key.align;
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
    }
    {
        cublasLtMatmulHeuristicResult_t res[GEMM_TUNE_MAX];
        int found = 0;
        memset(res, 0, sizeof res);
        const dlt_cudnn_settings *set = NULL;
        const int want = dlt__cudnn_settings(ctx, &set) == DLT_OK && set->gemm_autotune ? GEMM_TUNE_MAX : 1;
        cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(dlt__cu(ctx)->cublaslt, p->desc, p->a, p->b,
                                                           p->d, p->d, pref, want, res, &found);
        if (hs == CUBLAS_STATUS_SUCCESS && found > 0 && res[0].state == CUBLAS_STATUS_SUCCESS) {
            p->algo = res[0].algo;
            p->workspace = res[0].workspaceSize;
            p->usable = 1;
            for (int i = 0; i < found && i < GEMM_TUNE_MAX; i++)
                if (res[i].state == CUBLAS_STATUS_SUCCESS) {
                    p->cand[p->n_cand] = res[i].algo;
                    p->cand_ws[p->n_cand++] = res[i].workspaceSize;
                }
            if (p->n_cand < 2) p->n_cand = 0; /* nothing to choose from */
        } else if (hs == CUBLAS_STATUS_SUCCESS || hs == CUBLAS_STATUS_NOT_SUPPORTED ||
                   (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT && hs != CUBLAS_STATUS_ALLOC_FAILED)) {
            /* no algorithm (or a fused epilogue cuBLASLt refuses for this layout): remembered,
             * so the fallback is chosen without asking again */
            p->usable = 0;
        } else {
            st = dlt__cublas_fail(ctx, hs, F, "cublasLtMatmulAlgoGetHeuristic");
            goto fail;
        }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    p->used = 1;
    if (g.kind == GEMM_STRIDED) /* tests count these to see which path served a convolution */
        dlt__log(DLT_LOG_INFO, "dlt: cuBLASLt plan for a strided GEMM m=%lld n=%lld k=%lld%s",
                 (long long)g.m, (long long)g.n, (long long)g.k, p->usable ? "" : " (no algorithm)");
    return DLT_OK;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    plan_destroy(p);
    return st;
}
#undef LT_TRY

dlt_status plan_get(dlt_ctx *ctx, const GemmCall &g, const char *F, dlt_gemm_plan **out) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (!s->gemm) {
        s->gemm = (dlt_cuda_gemm_cache *)dlt__host_calloc(ctx, 1, sizeof *s->gemm);
        if (!s->gemm) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the GEMM plan cache");
        s->gemm_free = gemm_cache_free;
    }
    dlt_gemm_key key;
    memset(&key, 0, sizeof key);
    key.kind = g.kind;
    key.dtype = g.dtype;
    key.compute = (g.dtype == DLT_F32 && ctx->allow_tf32) ? (int32_t)CUBLAS_COMPUTE_32F_FAST_TF32
                                                          : (int32_t)CUBLAS_COMPUTE_32F;
    key.epilogue = (int32_t)g.epilogue;
    key.m = g.m;
    key.n = g.n;
    key.k = g.k;
    if (g.kind == GEMM_STRIDED) {
        key.ta = g.ta;
        key.tb = g.tb;
        key.lda = g.lda;
        key.ldb = g.ldb;
        key.ldd = g.ldd;
    }
    int32_t al = ptr_align(g.A);
    int32_t ab = ptr_align(g.B), ad = ptr_align(g.D);
    if (ab < al) al = ab;
    if (ad < al) al = ad;
    if (g.bias) {
        int32_t ai = ptr_align(g.bias);
        if (ai < al) al = ai;
    }
    if (g.aux) {
        int32_t ax = ptr_align(g.aux);
        if (ax < al) al = ax;
    }
    key.align = al;
    dlt_cuda_gemm_cache *c = s->gemm;
    for (int i = 0; i < DLT_GEMM_CACHE_SIZE; i++) {
        if (c->plans[i].used && memcmp(&c->plans[i].key, &key, sizeof key) == 0) {
            *out = &c->plans[i];
            return DLT_OK;
        }
    }
    int slot = -1;
    for (int i = 0; i < DLT_GEMM_CACHE_SIZE && slot < 0; i++)
        if (!c->plans[i].used) slot = i;
    if (slot < 0) { /* full: replace round-robin (host objects only, nothing in flight uses them) */
        slot = c->next_victim;
        c->next_victim = (c->next_victim + 1) % DLT_GEMM_CACHE_SIZE;
        plan_destroy(&c->plans[slot]);
    }
    DLT_CHECK(plan_build(ctx, g, key, &c->plans[slot], F));
    *out = &c->plans[slot];
    return DLT_OK;
}

/* The plan's epilogue pointers for this call (they live in the descriptor). */
dlt_status set_pointers(dlt_ctx *ctx, dlt_gemm_plan *p, const GemmCall &g, const char *F) {
    if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        DLT_CUBLAS(ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &g.bias, sizeof g.bias), F);
    if (g.aux)
        DLT_CUBLAS(ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                       &g.aux, sizeof g.aux), F);
    return DLT_OK;
}

/* DLT_GEMM_AUTOTUNE: runs each candidate once, then GEMM_TUNE_REPS times between two events,
 * and keeps the fastest. Only for a call whose outputs the real call then writes whole (beta
 * 0: D, and the aux or bias-gradient output an epilogue writes), so the trials change
 * nothing, and outside a capture (the events are waited for on the host). A candidate that
 * cuBLASLt refuses is passed over. */
dlt_status tune(dlt_ctx *ctx, dlt_gemm_plan *p, const GemmCall &g, const char *F) {
    cudaEvent_t e0 = NULL, e1 = NULL;
    DLT_CU(ctx, cudaEventCreate(&e0), F);
    cudaError_t ce = cudaEventCreate(&e1);
    if (ce != cudaSuccess) {
        cudaEventDestroy(e0);
        return dlt__cuda_fail(ctx, ce, F, "cudaEventCreate");
    }
    cudaStream_t st = dlt__stream(ctx);
    const float alpha = 1.0f, beta = 0.0f;
    float best = -1.0f;
    int bi = 0;
    dlt_status rc = DLT_OK;
    for (int i = 0; i < p->n_cand && rc == DLT_OK; i++) {
        void *ws = NULL;
        if (p->cand_ws[i] > 0 && (rc = dlt__cuda_workspace(ctx, p->cand_ws[i], &ws)) != DLT_OK) break;
        cublasStatus_t s = cublasLtMatmul(dlt__cu(ctx)->cublaslt, p->desc, &alpha, g.A, p->a, g.B, p->b, &beta, g.D,
                                          p->d, g.D, p->d, &p->cand[i], ws, p->cand_ws[i], st);
        if (s != CUBLAS_STATUS_SUCCESS) {
            (void)cudaGetLastError();
            continue;
        }
        ce = cudaEventRecord(e0, st);
        for (int r = 0; r < GEMM_TUNE_REPS && ce == cudaSuccess && s == CUBLAS_STATUS_SUCCESS; r++)
            s = cublasLtMatmul(dlt__cu(ctx)->cublaslt, p->desc, &alpha, g.A, p->a, g.B, p->b, &beta, g.D, p->d, g.D,
                               p->d, &p->cand[i], ws, p->cand_ws[i], st);
        if (ce == cudaSuccess) ce = cudaEventRecord(e1, st);
        if (ce == cudaSuccess) ce = cudaEventSynchronize(e1);
        float ms = 0.0f;
        if (ce == cudaSuccess) ce = cudaEventElapsedTime(&ms, e0, e1);
        if (ce != cudaSuccess) {
            rc = dlt__cuda_fail(ctx, ce, F, "timing cuBLASLt algorithms");
            break;
        }
        if (s == CUBLAS_STATUS_SUCCESS && (best < 0.0f || ms < best)) {
            best = ms;
            bi = i;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (rc != DLT_OK) return rc;
    if (best >= 0.0f) {
        p->algo = p->cand[bi];
        p->workspace = p->cand_ws[bi];
        dlt__log(DLT_LOG_INFO, "dlt: GEMM autotune m=%lld n=%lld k=%lld: candidate %d of %d, %.4f ms",
                 (long long)g.m, (long long)g.n, (long long)g.k, bi + 1, (int)p->n_cand,
                 (double)(best / GEMM_TUNE_REPS));
    }
    p->n_cand = 0;
    return DLT_OK;
}

/* Tries the GEMM; *done = 0 when cuBLASLt has no algorithm for it (the caller falls back).
 * A fused epilogue that cuBLASLt refuses at launch (NOT_SUPPORTED / INVALID_VALUE are
 * returned before anything is enqueued) is remembered as unusable and falls back too. */
dlt_status gemm_try(dlt_ctx *ctx, const GemmCall &g, const char *F, int *done) {
    dlt_gemm_plan *p = NULL;
    *done = 0;
    DLT_CHECK(plan_get(ctx, g, F, &p));
    if (!p->usable) return DLT_OK;
    DLT_CHECK(set_pointers(ctx, p, g, F));
    if (p->n_cand && g.beta == 0.0f && !ctx->capturing) DLT_CHECK(tune(ctx, p, g, F));
    void *ws = NULL;
    if (p->workspace > 0) DLT_CHECK(dlt__cuda_workspace(ctx, p->workspace, &ws));
    const float alpha = 1.0f, beta = g.beta;
    cublasStatus_t s = cublasLtMatmul(dlt__cu(ctx)->cublaslt, p->desc, &alpha, g.A, p->a, g.B, p->b, &beta,
                                      g.D, p->d, g.D, p->d, &p->algo, ws, p->workspace, dlt__stream(ctx));
    if (s != CUBLAS_STATUS_SUCCESS && g.epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
        (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE)) {
        p->usable = 0;
        (void)cudaGetLastError(); /* the refused fused call's runtime error, if any, is handled */
        return DLT_OK;
    }
    if (s != CUBLAS_STATUS_SUCCESS) return dlt__cublas_fail(ctx, s, F, "cublasLtMatmul");
    *done = 1;
    return DLT_OK;
}

/* A GEMM without epilogue must run: no algorithm at all is an error. */
dlt_status gemm_must(dlt_ctx *ctx, const GemmCall &g, const char *F) {
    int done = 0;
    DLT_CHECK(gemm_try(ctx, g, F, &done));
    if (!done)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F,
                        "cuBLASLt has no algorithm for a %s GEMM m=%lld n=%lld k=%lld",
                        dlt_dtype_name(g.dtype), (long long)g.m, (long long)g.n, (long long)g.k);
    return DLT_OK;
}

/* y[i, j] = b[j] (y row-major [M, N]) */
template <typename T>
__global__ void bias_broadcast_kernel(T *__restrict__ y, const T *__restrict__ b, int64_t n_cols,
                                      int64_t total) {
    DLT_GRID_STRIDE(i, total) y[i] = b[i % n_cols];
}

/* db[j] = beta*db[j] + sum_m dy[m, j] (dy row-major [M, N]). Block (32, 8): threadIdx.x
 * runs along j (coalesced), threadIdx.y over rows; partials are added in a fixed order. */
template <typename T>
__global__ void bias_grad_kernel(T *__restrict__ db, const T *__restrict__ dy, int64_t M, int64_t N,
                                 int beta) {
    __shared__ float part[8][33];
    const int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (j < N)
        for (int64_t m = threadIdx.y; m < M; m += 8) acc += to_f<T>(dy[m * N + j]);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < N) {
        float s = 0.0f;
        for (int r = 0; r < 8; r++) s += part[r][threadIdx.x];
        if (beta) s += to_f<T>(db[j]);
        db[j] = from_f<T>(s);
    }
}

dlt_status bias_broadcast(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *b, const char *F) {
    const int64_t total = y->numel, n_cols = y->shape[1];
    DLT_DISPATCH_FLOAT(y->dtype, T,
        bias_broadcast_kernel<T><<<grid_for(total, 256), 256, 0, dlt__stream(ctx)>>>(
            (T *)dlt__data(y), (const T *)dlt__data(b), n_cols, total));
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

dlt_status bias_grad(dlt_ctx *ctx, dlt_tensor *db, const dlt_tensor *dy, int32_t beta, const char *F) {
    const int64_t M = dy->shape[0], N = dy->shape[1];
    dim3 block(32, 8);
    dim3 grid((unsigned)((N + 31) / 32));
    DLT_DISPATCH_FLOAT(dy->dtype, T,
        bias_grad_kernel<T><<<grid, block, 0, dlt__stream(ctx)>>>((T *)dlt__data(db), (const T *)dlt__data(dy),
                                                                  M, N, beta));
    DLT_CU_LAUNCHED(ctx, F);
    return DLT_OK;
}

dlt_status check_dtype(const dlt_tensor *t, const char *F) {
    if (!dlt__is_float(t->dtype))
        return dlt__err(DLT_ERR_DTYPE, F, "cuBLASLt linear takes f32/f16/bf16, got %s",
                        dlt_dtype_name(t->dtype));
    return DLT_OK;
}

/* y [M,N] = x [M,K] w^T (w [N,K]), no epilogue: the forward's GEMM, plain or with GELU_AUX */
GemmCall fwd_call(dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *w) {
    GemmCall g;
    memset(&g, 0, sizeof g);
    g.kind = GEMM_FWD;
    g.dtype = x->dtype;
    g.m = w->shape[0];
    g.n = x->shape[0];
    g.k = x->shape[1];
    g.A = dlt__data(w);
    g.B = dlt__data(x);
    g.D = dlt__data(y);
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    return g;
}

/* dx [M,K] = dy [M,N] w (w [N,K]), no epilogue: the data gradient, plain or with DGELU */
GemmCall dgrad_call(dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *w) {
    GemmCall g;
    memset(&g, 0, sizeof g);
    g.kind = GEMM_DGRAD;
    g.dtype = dy->dtype;
    g.m = w->shape[1];
    g.n = dy->shape[0];
    g.k = dy->shape[1];
    g.A = dlt__data(w);
    g.B = dlt__data(dy);
    g.D = dlt__data(dx);
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    return g;
}

} // namespace

extern "C" {

dlt_status dlt__cuda_linear_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *w,
                                const dlt_tensor *b) {
    static const char *F = "dlt_linear";
    DLT_CHECK(check_dtype(x, F));
    if (x->shape[1] == 0) { /* K == 0, no products: y = b or 0 */
        if (b) return bias_broadcast(ctx, y, b, F);
        DLT_CU(ctx, cudaMemsetAsync(dlt__data(y), 0, dlt__nbytes(y), dlt__stream(ctx)), F);
        return DLT_OK;
    }
    GemmCall g = fwd_call(y, x, w);
    if (b) {
        int done = 0;
        g.epilogue = CUBLASLT_EPILOGUE_BIAS;
        g.bias = dlt__data(b);
        DLT_CHECK(gemm_try(ctx, g, F, &done));
        if (done) return DLT_OK;
        /* no fused algorithm: y = b broadcast, then y += x w^T (bias added in fp32 either way) */
        DLT_CHECK(bias_broadcast(ctx, y, b, F));
        g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        g.bias = NULL;
        g.beta = 1.0f;
    }
    return gemm_must(ctx, g, F);
}

dlt_status dlt__cuda_linear_fwd_gelu(dlt_ctx *ctx, dlt_tensor *g, dlt_tensor *h, const dlt_tensor *x,
                                     const dlt_tensor *w, const dlt_tensor *b, int *served) {
    static const char *F = "dlt_linear";
    *served = 0;
    /* 16-bit only (the MLP under autocast); the aux leading dimension N must be a multiple of 8 */
    if ((x->dtype != DLT_F16 && x->dtype != DLT_BF16) || w->shape[0] % 8 != 0 || x->shape[1] == 0) return DLT_OK;
    GemmCall c = fwd_call(g, x, w);
    c.aux = dlt__data(h);
    c.bias = b ? dlt__data(b) : NULL;
    c.epilogue = b ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    return gemm_try(ctx, c, F, served);
}

dlt_status dlt__cuda_linear_bwd_data(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                     const dlt_tensor *w) {
    static const char *F = "dlt_linear_backward";
    DLT_CHECK(check_dtype(dy, F));
    return gemm_must(ctx, dgrad_call(dx, dy, w), F);
}

dlt_status dlt__cuda_linear_bwd_data_gelu(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *w,
                                          const dlt_tensor *h, int *served) {
    static const char *F = "dlt_linear_backward";
    *served = 0;
    /* the cases linear_fwd_gelu takes (16-bit, the aux leading dimension K a multiple of 8),
     * one dtype throughout */
    const int32_t t = dy->dtype;
    if ((t != DLT_F16 && t != DLT_BF16) || dx->dtype != t || w->dtype != t || h->dtype != t || w->shape[1] % 8 != 0 ||
        dy->shape[0] == 0 || dy->shape[1] == 0)
        return DLT_OK;
    GemmCall c = dgrad_call(dx, dy, w);
    c.aux = dlt__data(h); /* read in the layout linear_fwd_gelu wrote it: [K, M] column-major */
    c.epilogue = CUBLASLT_EPILOGUE_DGELU;
    return gemm_try(ctx, c, F, served);
}

dlt_status dlt__cuda_linear_bwd_weight(dlt_ctx *ctx, dlt_tensor *dw, dlt_tensor *db,
                                       const dlt_tensor *x, const dlt_tensor *dy, int32_t beta) {
    static const char *F = "dlt_linear_backward";
    DLT_CHECK(check_dtype(dy, F));
    const int64_t M = dy->shape[0], N = dy->shape[1], K = x->shape[1];
    GemmCall g;
    memset(&g, 0, sizeof g);
    g.kind = GEMM_WGRAD;
    g.dtype = dy->dtype;
    g.m = K;
    g.n = N;
    g.k = M;
    g.A = dlt__data(x);
    g.B = dlt__data(dy);
    g.D = dlt__data(dw);
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    g.beta = beta ? 1.0f : 0.0f;
    if (db && !beta && db->dtype == dy->dtype) {
        int done = 0;
        g.epilogue = CUBLASLT_EPILOGUE_BGRADB;
        g.bias = dlt__data(db);
        DLT_CHECK(gemm_try(ctx, g, F, &done));
        if (done) return DLT_OK;
        g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        g.bias = NULL;
    }
    DLT_CHECK(gemm_must(ctx, g, F));
    if (db) DLT_CHECK(bias_grad(ctx, db, dy, beta, F));
    return DLT_OK;
}

dlt_status dlt__cuda_gemm_rm(dlt_ctx *ctx, int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t M,
                             int64_t N, int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb,
                             void *C, int64_t ldc, int32_t beta, const char *F) {
    /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's A is our
     * B (op N when B is stored K x N), its B is our A (op N when A is stored M x K) */
    GemmCall g;
    memset(&g, 0, sizeof g);
    g.kind = GEMM_STRIDED;
    g.dtype = dtype;
    g.m = N;
    g.n = M;
    g.k = K;
    g.A = B;
    g.ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    g.lda = ldb;
    g.B = A;
    g.tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    g.ldb = lda;
    g.D = C;
    g.ldd = ldc;
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    g.beta = beta ? 1.0f : 0.0f;
    return gemm_must(ctx, g, F);
}

} // extern "C"
