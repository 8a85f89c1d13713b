/*
 * nd.h - argument structs of the backend entries added for Transformer-style ops: N-D
 * elementwise and layout work over strided operands, reductions over chosen dimensions,
 * batched GEMMs, attention, cross-entropy. Plain C, also compiled as CUDA C++ (cuda/ takes
 * them by value as kernel arguments), so: fixed-width fields, no pointers to host memory.
 *
 * Index convention: an iteration space of `ndim` dimensions, row-major (the last varies
 * fastest). An operand maps the multi-index (i_0 .. i_{ndim-1}) to the element
 *     offset + sum_d i_d * stride[d]
 * of its tensor's data; a stride of 0 repeats the operand along that dimension
 * (broadcasting). Front doors (lib/ops/nd.c) merge dimensions that are contiguous in every
 * operand, so kernels usually see one to three dimensions.
 */
#ifndef DLT_ND_H
#define DLT_ND_H

#include <stdint.h>

#include "dltrain/tensor.h"

typedef struct dlt_nd {
    int32_t ndim;
    int32_t pad_;
    int64_t numel;
    int64_t shape[DLT_MAX_DIMS];
} dlt_nd;

typedef struct dlt_nd_operand {
    int64_t offset; /* elements from the tensor's first element */
    int64_t stride[DLT_MAX_DIMS];
} dlt_nd_operand;

/* Element offset of linear (row-major) index i of the iteration space `s` in operand o. */
static inline int64_t dlt__nd_offset(const dlt_nd *s, const dlt_nd_operand *o, int64_t i) {
    int64_t off = o->offset;
    for (int32_t d = s->ndim - 1; d >= 0; d--) {
        const int64_t n = s->shape[d];
        off += (i % n) * o->stride[d];
        i /= n;
    }
    return off;
}

/* Binary elementwise ops (entry `binary`): y = f(a, b), computed in fp32. */
enum {
    DLT_BIN_ADD = 0, /* a + alpha * b */
    DLT_BIN_MUL = 1, /* alpha * a * b */
    DLT_BIN_DIV = 2, /* alpha * a / b */
    DLT_BIN_EQ = 3,  /* a == b ? 1 : 0 */
};

/* Unary elementwise ops (entries `unary`, `unary_bwd`): DLT_UN_*, lib/kernel/unary.h. */

/* Reductions (entry `reduce`). */
enum {
    DLT_RED_SUM = 0,    /* alpha * sum */
    DLT_RED_MAX = 1,    /* maximum; NaN wins */
    DLT_RED_ARGMAX = 2, /* int64 position of the first maximum in the reduced index space */
};

/* A reduction: y[o] (o over the kept dims, row-major, y contiguous) = reduce over r of
 * x[kept offset of o + reduced offset of r]. */
typedef struct dlt_reduce_spec {
    dlt_nd kept;
    dlt_nd_operand kept_x; /* strides of the kept dims in x (offset: x's base) */
    dlt_nd red;
    dlt_nd_operand red_x;  /* strides of the reduced dims in x (offset 0) */
} dlt_reduce_spec;

/* Batched GEMM (entry `gemm`), row-major:
 *   C_b (m x n) = alpha * op(A_b) (m x k) * op(B_b) (k x n) + beta * C_b,  b < batch
 * A_b stored m x k (trans_a 0) or k x m (trans_a 1); B_b stored k x n (0) or n x k (1);
 * X_b = X + b * stride_x (elements; 0 repeats one matrix for every b). One float dtype
 * for A, B, C; fp32 accumulation; beta is 0 or 1. */
typedef struct dlt_gemm_batch {
    int64_t batch, m, n, k;
    int64_t stride_a, stride_b, stride_c;
    int32_t trans_a, trans_b;
    int32_t beta;
    int32_t pad_;
    double alpha;
} dlt_gemm_batch;

/* Scaled dot-product attention (entries `sdpa_fwd`, `sdpa_bwd`): q [B,H,T,D], k, v
 * [B,H,S,D], o [B,H,T,D] contiguous, one float dtype; lse f32 [B,H,T] (log-sum-exp of the
 * scaled, masked scores of each query row, what the backward needs instead of the T x S
 * weights). causal masks key j > query i (top-left aligned). Dropout on the weights: the
 * weight (b,h,i,j) is kept when dlt__philox_uniform(seed, offset + base, ((b*H+h)*T+i)*S+j)
 * >= p and then scaled by 1/(1-p); base is the context's capture offset (dlt_ctx.rng_base). */
typedef struct dlt_sdpa_params {
    int64_t B, H, T, S, D;
    int32_t causal;
    int32_t qkv_packed; /* sdpa_qkv_fwd/bwd: q, k, v rows of [B,T,3,H,D], o rows of [B,T,H,D] */
    double scale, dropout_p;
    uint64_t seed, offset;
} dlt_sdpa_params;

/* Where head tensor `part` (0 q, 1 k, 2 v) starts, in elements, in the tensor holding it:
 * its part's columns of a packed qkv (p->qkv_packed), else the tensor's start. */
static inline int64_t dlt__sdpa_part_offset(const dlt_sdpa_params *p, int part) {
    return p->qkv_packed ? part * p->H * p->D : 0;
}

/* Cross-entropy (entries `ce_fwd`, `ce_bwd`) over logits [N, K] row-major whose first
 * n_classes columns are the classes; the rest (vocabulary padding) take no part in the
 * softmax and get a zero gradient. Per row with target t != ignore_index:
 *   loss_i = (1-ls) * (lse_i - x_it) + ls * (lse_i - mean_c x_ic)
 * reduction: DLT_REDUCTION_MEAN / SUM (loss f32 [1]) or DLT_REDUCTION_NONE (loss f32 [N],
 * ignored rows 0). */
typedef struct dlt_ce_params {
    int64_t ignore_index;
    int64_t n_classes;
    double label_smoothing;
    int32_t reduction;
    /* 1: the forward wrote d(loss)/d(logits) for dloss = 1 over the logits (ce_fwd_grad);
     * the backward only scales it by dloss (ce_grad_scale) */
    int32_t grad_in_logits;
} dlt_ce_params;

#endif
