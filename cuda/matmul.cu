/*
 * matmul.cu - the batched GEMM entry (lib/core/nd.h dlt_gemm_batch) on cuBLAS's
 * cublasGemmStridedBatchedEx: fp32 accumulation (CUBLAS_COMPUTE_32F, or the TF32 fast
 * mode for fp32 tensors when the context allows it), f32/f16/bf16 operands.
 *
 * Row-major to cuBLAS's column-major: a row-major matrix is its transpose in column-major,
 * so C = op(A) op(B) (row-major) is computed as C^T = op(B)^T op(A)^T: cuBLAS's "A" is our
 * B and its "B" is our A, sizes (n, m, k). Our B stored k x n (trans_b 0) is the
 * column-major n x k matrix B^T as it is (CUBLAS_OP_N, ld n); stored n x k (trans_b 1) it
 * needs CUBLAS_OP_T with ld k. Likewise A (ld k or m). A batch stride of 0 repeats one
 * matrix for every product. Batches run in chunks of at most 64512 products.
 * Compile-checked; first run on a GPU is the next session's.
 */
#include "nd.cuh"
#include "ops_cuda.h"

extern "C" dlt_status dlt__cuda_gemm(dlt_ctx *ctx, dlt_tensor *c, const dlt_tensor *a, const dlt_tensor *b,
                                     const dlt_gemm_batch *g) {
    static const char *F = "dlt_matmul";
    if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "a GEMM dimension exceeds cuBLAS's int range");
    DLT_CHECK(dlt::same_dtype(F, a->dtype, b, c));
    cudaDataType_t t;
    switch (a->dtype) {
    case DLT_F16: t = CUDA_R_16F; break;
    case DLT_BF16: t = CUDA_R_16BF; break;
    case DLT_F32: t = CUDA_R_32F; break;
    default: return dlt__err(DLT_ERR_DTYPE, F, "GEMM of %s tensors", dlt_dtype_name(a->dtype));
    }
    const cublasComputeType_t compute =
        (a->dtype == DLT_F32 && ctx->allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const int m = (int)g->m, n = (int)g->n, k = (int)g->k;
    const float alpha = (float)g->alpha, beta = g->beta ? 1.0f : 0.0f;
    const cublasOperation_t opb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opa = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ldb = g->trans_b ? k : n, lda = g->trans_a ? m : k;
    const int64_t es = (int64_t)dlt__dtype_size(a->dtype);
    /* At most GEMM_BATCH_CHUNK products per call: cuBLAS's batched kernels have put the batch
     * on a grid dimension limited to 65535 (PyTorch splits bmm batches for sm_7x, issue 45724);
     * a multiple of 1024 keeps each chunk's pointers as aligned as the first. */
    const int64_t GEMM_BATCH_CHUNK = 63 * 1024;
    for (int64_t b0 = 0; b0 < g->batch; b0 += GEMM_BATCH_CHUNK) {
        const int64_t nb = g->batch - b0 < GEMM_BATCH_CHUNK ? g->batch - b0 : GEMM_BATCH_CHUNK;
        const char *pa = (const char *)dlt__data(a) + b0 * g->stride_a * es;
        const char *pb = (const char *)dlt__data(b) + b0 * g->stride_b * es;
        char *pc = (char *)dlt__data(c) + b0 * g->stride_c * es;
        DLT_CUBLAS(ctx,
                   cublasGemmStridedBatchedEx(dlt__cu(ctx)->cublas, opb, opa, n, m, k, &alpha, pb, t, ldb,
                                              (long long)g->stride_b, pa, t, lda, (long long)g->stride_a, &beta, pc,
                                              t, n, (long long)g->stride_c, (int)nb, compute, CUBLAS_GEMM_DEFAULT),
                   F);
    }
    return DLT_OK;
}
