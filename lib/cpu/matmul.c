/*
 * matmul.c - CPU batched GEMM (the `gemm` entry, lib/kernel/nd.h's dlt_gemm_batch) through
 * CBLAS sgemm, one call per batch matrix (OpenBLAS threads each). f16/bf16 operands are
 * converted to fp32 copies and the result rounded back once.
 */
#include <cblas.h>
#include <stdlib.h>

#include "ops_cpu.h"

static float *to_f32(const dlt_tensor *t) { return dlt__cpu_to_f32_nchw(t); }

dlt_status dlt__cpu_gemm(dlt_ctx *ctx, dlt_tensor *c, const dlt_tensor *a, const dlt_tensor *b,
                         const dlt_gemm_batch *g) {
    (void)ctx;
    if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, "dlt_matmul", "a matrix dimension exceeds CBLAS's int range");
    const int f32 = a->dtype == DLT_F32;
    float *ao = NULL, *bo = NULL, *co = NULL;
    const float *af = f32 ? dlt__data(a) : (ao = to_f32(a));
    const float *bf = f32 ? dlt__data(b) : (bo = to_f32(b));
    float *cf = f32 ? dlt__data(c) : (co = g->beta ? to_f32(c) : malloc((size_t)c->numel * sizeof(float)));
    dlt_status st = DLT_OK;
    if (!af || !bf || !cf) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_matmul", "cannot allocate fp32 staging buffers");
        goto done;
    }
    {
        const int m = (int)g->m, n = (int)g->n, k = (int)g->k;
        const int lda = g->trans_a ? m : k, ldb = g->trans_b ? k : n;
        for (int64_t i = 0; i < g->batch; i++)
            cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                        g->trans_b ? CblasTrans : CblasNoTrans, m, n, k, (float)g->alpha,
                        af + i * g->stride_a, lda, bf + i * g->stride_b, ldb, g->beta ? 1.0f : 0.0f,
                        cf + i * g->stride_c, n);
    }
    if (!f32) dlt__cpu_from_f32_nchw(c, cf, 0);
done:
    free(ao);
    free(bo);
    free(co);
    return st;
}
