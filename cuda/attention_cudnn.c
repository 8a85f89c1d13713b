/*
 * attention_cudnn.c - scaled dot-product attention through cuDNN's fused flash attention,
 * built from the backend (graph) API in C; the first choice of attention.cu's launchers
 * where dlt__cudnn_sdp_ok allows, our flash kernels (attention_flash.cu) and then the
 * reference kernels otherwise.
 *
 * cuDNN 9.14 (the GPU machine's) has no SDPA operation with a causal mask; attention is a
 * composite graph that its runtime-fusion engine recognises as flash attention. The graphs
 * are the ones cudnn-frontend builds for its composite SDPA (read from its backend log on
 * the H200, 2026-12-02; ../shared/reference/transformer-semantics.md section 6):
 *
 *   forward   S = Q Kt (fp32); S *= scale; causal: S = row >= col ? S : -inf (GEN_INDEX on
 *             dims 2 and 3, CMP_GE, BINARY_SELECT); m = max_j S; E = exp(S - m);
 *             l = sum_j E; Stats = m + log l (fp32, kept: our lse); P = E / l (in the io
 *             type); O = P V
 *   backward  Di = rowsum(dO * O) (fp32, bound to workspace memory: "softmax_sum");
 *             S = Q Kt * scale, masked, minus Stats; P = exp(S) (fp32);
 *             dV = Pt dO; dP = dO Vt; dS = P (dP - Di) scale; dK = dSt Q;
 *             dQ = dS K accumulated in fp32 workspace memory, then converted to dQ
 *
 * Kt and the transposes are strided views (the descriptors' strides), not copies. The same
 * graphs serve dlt_scaled_dot_product_attention_qkvpacked (p->qkv_packed): Q, K, V, dQ, dK,
 * dV are then heads of [B,T,3,H,D] rows (nanoGPT's c_attn output and its gradient), O and dO
 * of [B,T,H,D] rows, read and written in place through their strides, so the head split and
 * merge copies around attention disappear. Stats is
 * the natural-log log-sum-exp of the scaled scores, the lse our flash and reference kernels
 * keep, so a cuDNN forward and another path's backward mix.
 *
 * Served here: f16/bf16, query and key lengths multiples of 128 (cudnn-frontend adds a
 * padding-mask workaround for other key lengths on cuDNN <= 9.15, and 9.14's backward reads
 * out of bounds under CUDA-graph replay for them), head dim a multiple of 8 up to 128, no
 * dropout (cuDNN's dropout mask is its own RNG's; ours must equal the CPU's), causal masks
 * aligned top-left as PyTorch's is_causal. Not in deterministic mode: the backward adds dQ
 * with atomics, and cuDNN's engine does not carry the non-determinism note that would let
 * the plan filter see it (cudnn-frontend's log on the H200); the flash kernels serve instead
 * (no atomics). Plans are cached per shape (cudnn_graph.c); a shape cuDNN has no engine for
 * (an older GPU) is remembered as unsupported and served by the next path.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attention_cudnn.h"
#include "cudnn_graph.h"
#include "ops_cuda.h"

enum { DIR_FWD = 0, DIR_BWD = 1 };

/* tensors the variant pack binds */
enum {
    U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG_INF, /* forward and backward */
    U_DO, U_DQ, U_DK, U_DV, U_ONE, U_DELTA, U_DQ_ACC,    /* backward */
    U_VIRTUAL = 100                                      /* intermediates from here on */
};

int dlt__cudnn_sdp_ok(dlt_ctx *ctx, int32_t dtype, const dlt_sdpa_params *p, const void *const *ptrs,
                      int n_ptrs) {
    if (!ctx->cudnn_sdp || ctx->deterministic) return 0;
    if (dtype != DLT_F16 && dtype != DLT_BF16) return 0;
    if (p->dropout_p > 0.0) return 0;
    if (p->D <= 0 || p->D > 128 || p->D % 8 != 0) return 0;
    if (p->T <= 0 || p->S <= 0 || p->T % 128 != 0 || p->S % 128 != 0) return 0;
    if (p->B <= 0 || p->H <= 0) return 0;
    /* cuDNN takes 32-bit dims per tensor: B*H*T*S elements of the (virtual) score matrix */
    if (p->B * p->H > INT32_MAX / p->T || p->B * p->H * p->T > INT32_MAX / p->S) return 0;
    for (int i = 0; i < n_ptrs; i++)
        if (((uintptr_t)ptrs[i] & 15) != 0) return 0;
    return 1;
}

/* ---- graph description ---- */

typedef struct sdp_graph {
    dlt_cudnn_builder b;
    cudnnDataType_t io;
    int64_t B, H, T, S, D;
    int packed; /* q, k, v, dq, dk, dv: rows of [B,T,3,H,D]; o, do: rows of [B,T,H,D] */
    int64_t next_virtual;
    cudnnBackendDescriptor_t ops[24]; /* the backward has 22 */
    int32_t n_ops;
} sdp_graph;

static void add_op(sdp_graph *g, cudnnBackendDescriptor_t op) {
    if (g->n_ops < (int32_t)(sizeof g->ops / sizeof g->ops[0])) {
        g->ops[g->n_ops++] = op;
    } else { /* a graph missing a node must not build */
        dlt__cudnn_builder_refuse(&g->b, "the attention graph has more operations than sdp_graph holds");
    }
}

/* [B, H, rows, cols] with the given strides */
static cudnnBackendDescriptor_t t4(sdp_graph *g, int64_t uid, cudnnDataType_t dt, int64_t rows, int64_t cols,
                                   int64_t s0, int64_t s1, int64_t s2, int64_t s3, int is_virtual) {
    const int64_t dims[4] = {g->B, g->H, rows, cols}, st[4] = {s0, s1, s2, s3};
    return dlt__cudnn_tensor(&g->b, uid, dt, 4, dims, st, 16, is_virtual, 0);
}
/* a packed [B, H, rows, cols] tensor */
static cudnnBackendDescriptor_t packed(sdp_graph *g, int64_t uid, cudnnDataType_t dt, int64_t rows, int64_t cols,
                                       int is_virtual) {
    return t4(g, uid, dt, rows, cols, g->H * rows * cols, rows * cols, cols, 1, is_virtual);
}
/* a virtual packed intermediate */
static cudnnBackendDescriptor_t tmp(sdp_graph *g, cudnnDataType_t dt, int64_t rows, int64_t cols) {
    return packed(g, g->next_virtual++, dt, rows, cols, 1);
}
/* [B, H, rows, cols] seen transposed: a packed [B, H, cols, rows] tensor's memory */
static cudnnBackendDescriptor_t transposed(sdp_graph *g, int64_t uid, cudnnDataType_t dt, int64_t rows,
                                           int64_t cols, int is_virtual) {
    return t4(g, uid, dt, rows, cols, g->H * rows * cols, rows * cols, 1, rows, is_virtual);
}
/* Q, K, V or their gradients, [B, H, rows, D] (rows: tokens), in the call's layout */
static cudnnBackendDescriptor_t heads(sdp_graph *g, int64_t uid, int64_t rows) {
    if (!g->packed) return packed(g, uid, g->io, rows, g->D, 0);
    const int64_t row = 3 * g->H * g->D;
    return t4(g, uid, g->io, rows, g->D, rows * row, g->D, row, 1, 0);
}
/* K or V seen transposed, [B, H, D, rows] */
static cudnnBackendDescriptor_t heads_t(sdp_graph *g, int64_t uid, int64_t rows) {
    if (!g->packed) return transposed(g, uid, g->io, g->D, rows, 0);
    const int64_t row = 3 * g->H * g->D;
    return t4(g, uid, g->io, g->D, rows, rows * row, g->D, 1, row, 0);
}
/* O or dO, [B, H, T, D] */
static cudnnBackendDescriptor_t out_heads(sdp_graph *g, int64_t uid) {
    if (!g->packed) return packed(g, uid, g->io, g->T, g->D, 0);
    const int64_t row = g->H * g->D;
    return t4(g, uid, g->io, g->T, g->D, g->T * row, g->D, row, 1, 0);
}
static cudnnBackendDescriptor_t scalar(sdp_graph *g, int64_t uid) {
    const int64_t one[4] = {1, 1, 1, 1};
    return dlt__cudnn_tensor(&g->b, uid, CUDNN_DATA_FLOAT, 4, one, one, 16, 0, 1);
}

static void pw(sdp_graph *g, const char *name, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
               cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
    add_op(g, dlt__cudnn_pointwise(&g->b, name, mode, x, b, NULL, y, -1));
}

/* The causal mask on scores s [B, H, T, S] (fp32): row >= col keeps, the rest is -inf. */
static cudnnBackendDescriptor_t causal_mask(sdp_graph *g, cudnnBackendDescriptor_t s,
                                            cudnnBackendDescriptor_t neg_inf) {
    cudnnBackendDescriptor_t row = tmp(g, CUDNN_DATA_INT32, g->T, g->S);
    cudnnBackendDescriptor_t col = tmp(g, CUDNN_DATA_INT32, g->T, g->S);
    cudnnBackendDescriptor_t keep = tmp(g, CUDNN_DATA_BOOLEAN, g->T, g->S);
    cudnnBackendDescriptor_t out = tmp(g, CUDNN_DATA_FLOAT, g->T, g->S);
    add_op(g, dlt__cudnn_pointwise(&g->b, "gen_row_index", CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, row, 2));
    add_op(g, dlt__cudnn_pointwise(&g->b, "gen_col_index", CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, col, 3));
    pw(g, "row_ge_col", CUDNN_POINTWISE_CMP_GE, row, col, keep);
    add_op(g, dlt__cudnn_pointwise(&g->b, "causal_select", CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, keep, out, -1));
    return out;
}

static void describe_fwd(sdp_graph *g, int causal) {
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    const int64_t T = g->T, S = g->S;
    cudnnBackendDescriptor_t q = heads(g, U_Q, T);
    cudnnBackendDescriptor_t kt = heads_t(g, U_K, S);
    cudnnBackendDescriptor_t v = heads(g, U_V, S);
    cudnnBackendDescriptor_t o = out_heads(g, U_O);
    cudnnBackendDescriptor_t stats = packed(g, U_STATS, F, T, 1, 0);
    cudnnBackendDescriptor_t scale = scalar(g, U_SCALE);

    cudnnBackendDescriptor_t s = tmp(g, F, T, S);
    add_op(g, dlt__cudnn_matmul(&g->b, "q_kt", q, kt, s));
    cudnnBackendDescriptor_t ss = tmp(g, F, T, S);
    pw(g, "scale", CUDNN_POINTWISE_MUL, s, scale, ss);
    if (causal) ss = causal_mask(g, ss, scalar(g, U_NEG_INF));
    cudnnBackendDescriptor_t m = tmp(g, F, T, 1);
    add_op(g, dlt__cudnn_reduction(&g->b, "row_max", CUDNN_REDUCE_TENSOR_MAX, ss, m));
    cudnnBackendDescriptor_t sub = tmp(g, F, T, S);
    pw(g, "sub_max", CUDNN_POINTWISE_SUB, ss, m, sub);
    cudnnBackendDescriptor_t e = tmp(g, F, T, S);
    pw(g, "exp", CUDNN_POINTWISE_EXP, sub, NULL, e);
    cudnnBackendDescriptor_t l = tmp(g, F, T, 1);
    add_op(g, dlt__cudnn_reduction(&g->b, "row_sum", CUDNN_REDUCE_TENSOR_ADD, e, l));
    cudnnBackendDescriptor_t logl = tmp(g, F, T, 1);
    pw(g, "log_sum", CUDNN_POINTWISE_LOG, l, NULL, logl);
    pw(g, "stats", CUDNN_POINTWISE_ADD, m, logl, stats);
    cudnnBackendDescriptor_t p = tmp(g, g->io, T, S);
    pw(g, "softmax", CUDNN_POINTWISE_DIV, e, l, p);
    add_op(g, dlt__cudnn_matmul(&g->b, "p_v", p, v, o));
}

static void describe_bwd(sdp_graph *g, int causal) {
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    const int64_t T = g->T, S = g->S, D = g->D;
    cudnnBackendDescriptor_t q = heads(g, U_Q, T);
    cudnnBackendDescriptor_t kt = heads_t(g, U_K, S);
    cudnnBackendDescriptor_t vt = heads_t(g, U_V, S);
    cudnnBackendDescriptor_t o = out_heads(g, U_O);
    cudnnBackendDescriptor_t dout = out_heads(g, U_DO);
    cudnnBackendDescriptor_t stats = packed(g, U_STATS, F, T, 1, 0);
    cudnnBackendDescriptor_t dq = heads(g, U_DQ, T);
    cudnnBackendDescriptor_t dk = heads(g, U_DK, S);
    cudnnBackendDescriptor_t dv = heads(g, U_DV, S);
    cudnnBackendDescriptor_t scale = scalar(g, U_SCALE);

    /* Di = rowsum(dO * O), times the dropout's keep probability (1: no dropout here) */
    cudnnBackendDescriptor_t dodot = tmp(g, F, T, D);
    pw(g, "do_o", CUDNN_POINTWISE_MUL, dout, o, dodot);
    cudnnBackendDescriptor_t dsum = tmp(g, F, T, 1);
    add_op(g, dlt__cudnn_reduction(&g->b, "do_o_sum", CUDNN_REDUCE_TENSOR_ADD, dodot, dsum));
    cudnnBackendDescriptor_t delta = packed(g, U_DELTA, F, T, 1, 0);
    pw(g, "delta", CUDNN_POINTWISE_MUL, dsum, scalar(g, U_ONE), delta);

    /* P = exp(scale Q Kt - Stats), masked */
    cudnnBackendDescriptor_t s = tmp(g, F, T, S);
    add_op(g, dlt__cudnn_matmul(&g->b, "q_kt", q, kt, s));
    cudnnBackendDescriptor_t ss = tmp(g, F, T, S);
    pw(g, "scale", CUDNN_POINTWISE_MUL, s, scale, ss);
    cudnnBackendDescriptor_t sm = tmp(g, F, T, S);
    pw(g, "sub_stats", CUDNN_POINTWISE_SUB, ss, stats, sm);
    if (causal) sm = causal_mask(g, sm, scalar(g, U_NEG_INF));
    cudnnBackendDescriptor_t p = tmp(g, F, T, S);
    pw(g, "exp", CUDNN_POINTWISE_EXP, sm, NULL, p);

    /* dV = Pt dO: P seen as [B, H, S, T] in the io type */
    cudnnBackendDescriptor_t pt = transposed(g, g->next_virtual++, g->io, S, T, 1);
    add_op(g, dlt__cudnn_reshape(&g->b, "p_t", p, pt));
    add_op(g, dlt__cudnn_matmul(&g->b, "pt_do", pt, dout, dv));

    /* dS = P (dO Vt - Di) scale */
    cudnnBackendDescriptor_t dp = tmp(g, F, T, S);
    add_op(g, dlt__cudnn_matmul(&g->b, "do_vt", dout, vt, dp));
    cudnnBackendDescriptor_t dpd = tmp(g, F, T, S);
    pw(g, "sub_delta", CUDNN_POINTWISE_SUB, dp, delta, dpd);
    cudnnBackendDescriptor_t dsp = tmp(g, F, T, S);
    pw(g, "mul_p", CUDNN_POINTWISE_MUL, dpd, p, dsp);
    cudnnBackendDescriptor_t ds = tmp(g, F, T, S);
    pw(g, "mul_scale", CUDNN_POINTWISE_MUL, dsp, scale, ds);

    /* dK = dSt Q */
    cudnnBackendDescriptor_t dst = transposed(g, g->next_virtual++, g->io, S, T, 1);
    add_op(g, dlt__cudnn_reshape(&g->b, "ds_t", ds, dst));
    add_op(g, dlt__cudnn_matmul(&g->b, "dst_q", dst, q, dk));

    /* dQ = dS K in fp32 (K: Kt seen back as [B, H, S, D]), then to the io type */
    cudnnBackendDescriptor_t k = t4(g, g->next_virtual++, F, S, D, g->H * S * D, S * D, D, 1, 1);
    add_op(g, dlt__cudnn_reshape(&g->b, "k", kt, k));
    cudnnBackendDescriptor_t dq_acc = packed(g, U_DQ_ACC, F, T, D, 0);
    add_op(g, dlt__cudnn_matmul(&g->b, "ds_k", ds, k, dq_acc));
    pw(g, "dq", CUDNN_POINTWISE_IDENTITY, dq_acc, NULL, dq);
}

/* ---- plans ---- */

static void make_key(dlt_cudnn_key *k, int dir, int32_t dtype, const dlt_sdpa_params *p) {
    memset(k, 0, sizeof *k);
    dlt__cudnn_key_push(k, 3); /* op family: attention */
    dlt__cudnn_key_push(k, dir);
    dlt__cudnn_key_push(k, dtype);
    dlt__cudnn_key_push(k, p->B);
    dlt__cudnn_key_push(k, p->H);
    dlt__cudnn_key_push(k, p->T);
    dlt__cudnn_key_push(k, p->S);
    dlt__cudnn_key_push(k, p->D);
    dlt__cudnn_key_push(k, p->causal);
    dlt__cudnn_key_push(k, p->qkv_packed);
    int64_t scale_bits = 0;
    const float scale = (float)p->scale; /* the value bound is the fp32 one */
    memcpy(&scale_bits, &scale, sizeof scale);
    dlt__cudnn_key_push(k, scale_bits);
}

/* The cached plan for this call, built on first use; NULL when cuDNN has no engine for it
 * (the reason is logged once, when the negative entry is made). */
static dlt_status get_plan(dlt_ctx *ctx, int dir, int32_t dtype, const dlt_sdpa_params *p, const char *func,
                           dlt_cudnn_plan **out) {
    dlt_cudnn_key key;
    *out = NULL;
    make_key(&key, dir, dtype, p);
    dlt_cudnn_plan *e = NULL;
    DLT_CHECK(dlt__cudnn_cache_find(ctx, &key, &e));
    if (!e) {
        char what[200];
        snprintf(what, sizeof what, "attention %s %s B=%lld H=%lld T=%lld S=%lld D=%lld%s%s",
                 dir == DIR_FWD ? "forward" : "backward", dlt_dtype_name(dtype), (long long)p->B, (long long)p->H,
                 (long long)p->T, (long long)p->S, (long long)p->D, p->causal ? " causal" : "",
                 p->qkv_packed ? " packed qkv" : "");
        sdp_graph g;
        memset(&g, 0, sizeof g);
        (void)dlt__cudnn_dtype(dtype, &g.io);
        g.B = p->B, g.H = p->H, g.T = p->T, g.S = p->S, g.D = p->D;
        g.packed = p->qkv_packed != 0;
        g.next_virtual = U_VIRTUAL;
        dlt__cudnn_builder_init(&g.b, ctx, func, what);
        /* the operands bound, in the variant pack's order (-inf only with the mask) */
        int64_t uids[DLT_CUDNN_MAX_UIDS];
        int32_t n_uids = 0;
        static const int64_t common[] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE};
        static const int64_t bwd_only[] = {U_DO, U_DQ, U_DK, U_DV, U_ONE, U_DELTA, U_DQ_ACC};
        for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) uids[n_uids++] = common[i];
        if (p->causal) uids[n_uids++] = U_NEG_INF;
        for (size_t i = 0; dir == DIR_BWD && i < sizeof bwd_only / sizeof bwd_only[0]; i++)
            uids[n_uids++] = bwd_only[i];
        if (dir == DIR_FWD)
            describe_fwd(&g, p->causal);
        else
            describe_bwd(&g, p->causal);
        dlt_cudnn_plan built;
        dlt_cudnn_plan_opts opts;
        memset(&opts, 0, sizeof opts); /* no autotuning: the trial runs would need the real operands */
        DLT_CHECK(dlt__cudnn_build_plan(&g.b, g.ops, g.n_ops, uids, n_uids, &opts, &built));
        built.scalars[0] = (float)p->scale;
        built.scalars[4] = -INFINITY;
        built.scalars[8] = 1.0f;
        DLT_CHECK(dlt__cudnn_cache_insert(ctx, &key, &built, &e));
        if (!e->supported)
            dlt__log(DLT_LOG_INFO, "dlt: no cuDNN attention plan for %s (%s); the flash or reference kernels run",
                     what, e->why);
    }
    if (e->supported) *out = e;
    return DLT_OK;
}

/* The pointers the plan's uids bind, in its order: tensors from by_uid (indexed by uid), the
 * by-value scalars from the plan itself. */
static void bind(dlt_cudnn_plan *e, void *const *by_uid, void **ptrs) {
    for (int32_t i = 0; i < e->n_uids; i++) {
        switch (e->uids[i]) {
        case U_SCALE: ptrs[i] = &e->scalars[0]; break;
        case U_NEG_INF: ptrs[i] = &e->scalars[4]; break;
        case U_ONE: ptrs[i] = &e->scalars[8]; break;
        default: ptrs[i] = by_uid[e->uids[i]]; break;
        }
    }
}

/* The three head tensors' data: q, k, v (or their gradients) as given, or in packed mode
 * the three column blocks of the one [B,T,3C] tensor passed as each */
static void heads_ptrs(const dlt_sdpa_params *p, const dlt_tensor *q, const dlt_tensor *k, const dlt_tensor *v,
                       void **out) {
    const dlt_tensor *t[3] = {q, k, v};
    for (int i = 0; i < 3; i++)
        out[i] = (char *)dlt__data(t[i]) + (size_t)dlt__sdpa_part_offset(p, i) * dlt__dtype_size(t[i]->dtype);
}

dlt_status dlt__cudnn_sdp_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *q,
                              const dlt_tensor *k, const dlt_tensor *v, const dlt_sdpa_params *p, int *served) {
    static const char *F = "dlt_scaled_dot_product_attention";
    *served = 0;
    dlt_cudnn_plan *e = NULL;
    DLT_CHECK(get_plan(ctx, DIR_FWD, q->dtype, p, F, &e));
    if (!e) return DLT_OK;
    void *by_uid[U_VIRTUAL] = {NULL}, *ptrs[DLT_CUDNN_MAX_UIDS];
    heads_ptrs(p, q, k, v, &by_uid[U_Q]);
    by_uid[U_O] = dlt__data(o), by_uid[U_STATS] = dlt__data(lse);
    bind(e, by_uid, ptrs);
    void *ws = NULL;
    if (e->workspace > 0) DLT_CHECK(dlt__cuda_workspace(ctx, (size_t)e->workspace, &ws));
    DLT_CHECK(dlt__cudnn_execute(ctx, e, ptrs, ws, F, "attention forward"));
    *served = 1;
    return DLT_OK;
}

dlt_status dlt__cudnn_sdp_bwd(dlt_ctx *ctx, dlt_tensor *dq, dlt_tensor *dk, dlt_tensor *dv, const dlt_tensor *dout,
                              const dlt_tensor *q, const dlt_tensor *k, const dlt_tensor *v, const dlt_tensor *o,
                              const dlt_tensor *lse, const dlt_sdpa_params *p, int *served) {
    static const char *F = "dlt_backward(scaled_dot_product_attention)";
    *served = 0;
    dlt_cudnn_plan *e = NULL;
    DLT_CHECK(get_plan(ctx, DIR_BWD, q->dtype, p, F, &e));
    if (!e) return DLT_OK;
    /* one workspace: the fp32 dQ accumulator, the row sums Di, then cuDNN's own; cuDNN
     * >= 9.6 clears the accumulator itself */
    const size_t acc_bytes = dlt__cudnn_round256((size_t)(p->B * p->H * p->T * p->D) * sizeof(float));
    const size_t delta_bytes = dlt__cudnn_round256((size_t)(p->B * p->H * p->T) * sizeof(float));
    void *ws = NULL;
    DLT_CHECK(dlt__cuda_workspace(ctx, acc_bytes + delta_bytes + (size_t)e->workspace, &ws));
    char *base = (char *)ws;
    void *by_uid[U_VIRTUAL] = {NULL}, *ptrs[DLT_CUDNN_MAX_UIDS];
    heads_ptrs(p, q, k, v, &by_uid[U_Q]);
    by_uid[U_O] = dlt__data(o), by_uid[U_STATS] = dlt__data(lse), by_uid[U_DO] = dlt__data(dout);
    heads_ptrs(p, dq, dk, dv, &by_uid[U_DQ]);
    by_uid[U_DQ_ACC] = base, by_uid[U_DELTA] = base + acc_bytes;
    bind(e, by_uid, ptrs);
    DLT_CHECK(dlt__cudnn_execute(ctx, e, ptrs, base + acc_bytes + delta_bytes, F, "attention backward"));
    *served = 1;
    return DLT_OK;
}

/* ---- the packed-qkv entries of the CUDA backend (cuDNN alone reads that layout) ---- */

dlt_status dlt__cudnn_sdp_qkv_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *qkv,
                                 const dlt_sdpa_params *p, int *served) {
    *served = 0;
    void *h[3];
    heads_ptrs(p, qkv, qkv, qkv, h);
    const void *ptrs[5] = {dlt__data(o), dlt__data(lse), h[0], h[1], h[2]};
    if (!dlt__cudnn_sdp_ok(ctx, qkv->dtype, p, ptrs, 5)) return DLT_OK;
    return dlt__cudnn_sdp_fwd(ctx, o, lse, qkv, qkv, qkv, p, served);
}

dlt_status dlt__cudnn_sdp_qkv_bwd(dlt_ctx *ctx, dlt_tensor *dqkv, const dlt_tensor *dout, const dlt_tensor *qkv,
                                 const dlt_tensor *o, const dlt_tensor *lse, const dlt_sdpa_params *p, int *served) {
    *served = 0;
    void *h[3], *dh[3];
    heads_ptrs(p, qkv, qkv, qkv, h);
    heads_ptrs(p, dqkv, dqkv, dqkv, dh);
    const void *ptrs[9] = {dlt__data(o), dlt__data(lse), dlt__data(dout), h[0], h[1], h[2], dh[0], dh[1], dh[2]};
    if (!dlt__cudnn_sdp_ok(ctx, qkv->dtype, p, ptrs, 9)) return DLT_OK;
    return dlt__cudnn_sdp_bwd(ctx, dqkv, dqkv, dqkv, dout, qkv, qkv, qkv, o, lse, p, served);
}
