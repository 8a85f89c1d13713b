/*
 * attention.c - front door of scaled_dot_product_attention (PyTorch's
 * F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p, is_causal, scale)).
 *
 *   o = softmax(q k^T * scale + mask) v,   q [B,H,T,D], k and v [B,H,S,D], o [B,H,T,D]
 * scale = 1/sqrt(D) when the argument is 0; is_causal masks key j > query i (top-left
 * aligned, PyTorch's rule). Dropout (p > 0) zeroes attention weights with probability p and
 * scales the rest by 1/(1-p) (PyTorch applies it whenever p > 0: pass 0 in evaluation).
 * Autocast runs it in the region's dtype (q, k, v cast down, like matmul); otherwise q, k, v
 * must share one float dtype.
 *
 * Memory: the backends keep no T x S matrix. The forward saves o and the f32 log-sum-exp of
 * each query row ([B,H,T]); the backward recomputes the weights block by block (and draws the
 * dropout mask again from the same Philox offsets).
 */
#include <math.h>
#include <string.h>

#include "../kernel/philox.h"
#include "ops_internal.h"

/* p for one call: the checks on dropout_p and scale, scale 0 -> 1/sqrt(D), and the
 * dropout's Philox offsets (both front doors draw the same (b, h, i, j) numbering) */
static dlt_status sdpa_params(dlt_ctx *ctx, int64_t B, int64_t H, int64_t T, int64_t S, int64_t D,
                              int32_t is_causal, double dropout_p, double scale, const char *F,
                              dlt_sdpa_params *p) {
    if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "dropout_p %g is not in [0, 1]", dropout_p);
    if (!(scale >= 0.0) || isinf(scale))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "scale %g must be finite and >= 0 (0: 1/sqrt(D))", scale);
    DLT_NEED_KERNEL(ctx, sdpa_fwd, F);
    memset(p, 0, sizeof *p);
    p->B = B, p->H = H, p->T = T, p->S = S, p->D = D, p->causal = is_causal != 0, p->dropout_p = dropout_p;
    p->scale = scale > 0.0 ? scale : (D > 0 ? 1.0 / sqrt((double)D) : 1.0);
    if (dropout_p > 0.0) {
        DLT_CHECK(dlt__rng_base_ready(ctx, F));
        p->seed = ctx->seed;
        p->offset = dlt__rng_reserve_based(ctx, dlt__philox_blocks((uint64_t)(B * H * T * S)));
    }
    return DLT_OK;
}

static dlt_status sdpa_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(scaled_dot_product_attention)";
    dlt_ctx *ctx = nd->ctx;
    const dlt_sdpa_params *p = DLT_NODE_ATTR(nd, dlt_sdpa_params);
    dlt_tensor *q = nd->saved[0], *k = nd->saved[1], *v = nd->saved[2], *o = nd->saved[3], *lse = nd->saved[4];
    dlt_tensor *g[3] = {NULL, NULL, NULL};
    const dlt_tensor *like[3] = {q, k, v};
    dlt_status st = DLT_OK;
    for (int i = 0; i < 3 && st == DLT_OK; i++) st = dlt__tensor_new_like(like[i], like[i]->dtype, F, &g[i]);
    if (st == DLT_OK) {
        if (p->T > 0 && p->S > 0 && p->B * p->H > 0 && p->D > 0) {
            st = ctx->be->sdpa_bwd(ctx, g[0], g[1], g[2], gout[0], q, k, v, o, lse, p);
        } else { /* an empty side: every gradient is zero */
            for (int i = 0; i < 3 && st == DLT_OK; i++) st = dlt__grad_zero(ctx, g[i], 0);
        }
    }
    for (int i = 0; i < 3; i++) {
        if (st == DLT_OK) st = dlt__grad_slot_store(ctx, &gin[i], g[i]);
        else dlt_tensor_release(g[i]);
    }
    return st;
}

dlt_status dlt_scaled_dot_product_attention(dlt_tensor *q, dlt_tensor *k, dlt_tensor *v, int32_t is_causal,
                                            double dropout_p, double scale, dlt_tensor **out) {
    static const char *F = "dlt_scaled_dot_product_attention";
    DLT_CHECK(dlt__check_tensor(q, F, "q"));
    DLT_CHECK(dlt__check_tensor(k, F, "k"));
    DLT_CHECK(dlt__check_tensor(v, F, "v"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_same_ctx(q, k, F, "q", "k"));
    DLT_CHECK(dlt__check_same_ctx(q, v, F, "q", "v"));
    DLT_CHECK(dlt__check_float(q, F, "q"));
    DLT_CHECK(dlt__check_float(k, F, "k"));
    DLT_CHECK(dlt__check_float(v, F, "v"));
    DLT_CHECK(dlt__check_ndim(q, 4, F, "q"));
    DLT_CHECK(dlt__check_ndim(k, 4, F, "k"));
    DLT_CHECK(dlt__check_ndim(v, 4, F, "v"));
    char a[96], b[96], c[96];
    if (k->shape[0] != q->shape[0] || k->shape[1] != q->shape[1] || k->shape[3] != q->shape[3] ||
        !dlt__same_shape(k, v))
        return dlt__err(DLT_ERR_SHAPE, F,
                        "q %s, k %s, v %s: expected q [B,H,T,D] and k, v [B,H,S,D] with the same B, H, D",
                        dlt__shape_str(q, a, sizeof a), dlt__shape_str(k, b, sizeof b),
                        dlt__shape_str(v, c, sizeof c));
    dlt_ctx *ctx = q->ctx;
    const int32_t ac = dlt__autocast_dtype(ctx);
    if (ac < 0 && (k->dtype != q->dtype || v->dtype != q->dtype))
        return dlt__err(DLT_ERR_DTYPE, F, "q is %s, k %s, v %s: use one dtype, or an autocast region",
                        dlt_dtype_name(q->dtype), dlt_dtype_name(k->dtype), dlt_dtype_name(v->dtype));
    const int32_t dtype = ac >= 0 ? ac : q->dtype;
    dlt_sdpa_params p;
    DLT_CHECK(sdpa_params(ctx, q->shape[0], q->shape[1], q->shape[2], k->shape[2], q->shape[3], is_causal, dropout_p,
                          scale, F, &p));
    dlt_tensor *in[3] = {NULL, NULL, NULL}, *src[3] = {q, k, v};
    dlt_tensor *o = NULL, *lse = NULL, *alias = NULL;
    dlt_node *node = NULL;
    dlt_status st = DLT_OK;
    for (int i = 0; i < 3; i++) {
        dlt_tensor *t = NULL;
        DLT_CHECK_GOTO(st, dlt__contiguous_input(src[i], F, &t), done);
        st = dlt__autocast_operand(t, dtype, F, &in[i]);
        dlt_tensor_release(t);
        if (st != DLT_OK) goto done;
    }
    DLT_CHECK_GOTO(st, dlt__tensor_new_like(in[0], dtype, F, &o), done);
    {
        const int64_t ls[3] = {p.B, p.H, p.T};
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, ls, 3, DLT_FORMAT_CONTIGUOUS, F, &lse), done);
    }
    if (o->numel) {
        if (p.S == 0) st = ctx->be->memset0(ctx, dlt__data(o), dlt__nbytes(o)); /* empty sums */
        else st = ctx->be->sdpa_fwd(ctx, o, lse, in[0], in[1], in[2], &p);
        if (st != DLT_OK) goto done;
    }
    DLT_CHECK_GOTO(st, dlt__record(ctx, "scaled_dot_product_attention", sdpa_backward, in, 3, &o, 1, &node), done);
    if (node) {
        DLT_SET_ATTR(node, dlt_sdpa_params, p);
        DLT_CHECK_GOTO(st, dlt__alias(o, F, &alias), done);
        for (int i = 0; i < 3; i++) dlt__save(node, in[i]);
        dlt__save(node, alias);
        dlt__save(node, lse);
    }
done:
    for (int i = 0; i < 3; i++) dlt_tensor_release(in[i]);
    dlt_tensor_release(lse);
    dlt_tensor_release(alias);
    if (st != DLT_OK) {
        dlt_tensor_release(o);
        return dlt__err_wrap(st, F);
    }
    *out = o;
    return DLT_OK;
}

/* ---- packed qkv ([B,T,3C] in, [B,T,C] out) ---- */

/* The operand map of head tensor `part` (0 q, 1 k, 2 v) of a packed qkv over the shape
 * [B,H,T,D]: element (b,h,t,d) sits at b*T*3C + t*3C + part*C + h*D + d. With part -1 it is
 * o's map in [B,T,C]. */
static void packed_map(const dlt_sdpa_params *p, int part, dlt_nd *s, dlt_nd_operand *o) {
    const int64_t C = p->H * p->D, row = part < 0 ? C : 3 * C;
    const int64_t shape[4] = {p->B, p->H, p->T, p->D};
    dlt__nd_init(s, shape, 4);
    memset(o, 0, sizeof *o);
    o->stride[0] = p->T * row, o->stride[1] = p->D, o->stride[2] = row, o->stride[3] = 1;
    o->offset = part < 0 ? 0 : part * C;
}

/* Copies between a packed tensor (qkv or o, by part as packed_map) and a contiguous
 * [B,H,T,D] head tensor, one way or the other. */
static dlt_status heads_copy(dlt_ctx *ctx, dlt_tensor *packed, dlt_tensor *heads, const dlt_sdpa_params *p, int part,
                             int into_packed) {
    dlt_nd s;
    dlt_nd_operand op, oh;
    packed_map(p, part, &s, &op);
    memset(&oh, 0, sizeof oh);
    dlt__contig_strides(heads->shape, 4, oh.stride);
    return into_packed ? dlt__k_copy(ctx, packed, &op, heads, &oh, &s) : dlt__k_copy(ctx, heads, &oh, packed, &op, &s);
}

/* New contiguous [B,H,T,D] tensors holding q, k, v of qkv (n of them) */
static dlt_status unpack(dlt_ctx *ctx, const dlt_tensor *qkv, const dlt_sdpa_params *p, int n, const char *F,
                         dlt_tensor **heads) {
    const int64_t shape[4] = {p->B, p->H, p->T, p->D};
    for (int i = 0; i < n; i++) {
        DLT_CHECK(dlt__tensor_new(ctx, qkv->dtype, shape, 4, DLT_FORMAT_CONTIGUOUS, F, &heads[i]));
        DLT_CHECK(heads_copy(ctx, (dlt_tensor *)qkv, heads[i], p, i, 0));
    }
    return DLT_OK;
}

static void release_all(dlt_tensor **t, int n) {
    for (int i = 0; i < n; i++) dlt_tensor_release(t[i]);
}

/* o [B,T,C] and lse from qkv: the backend's packed entry, or unpack, attend, pack */
static dlt_status qkv_fwd(dlt_ctx *ctx, dlt_tensor *o, dlt_tensor *lse, const dlt_tensor *qkv, dlt_sdpa_params p,
                          const char *F) {
    int served = 0;
    if (ctx->be->sdpa_qkv_fwd) {
        p.qkv_packed = 1;
        DLT_CHECK(ctx->be->sdpa_qkv_fwd(ctx, o, lse, qkv, &p, &served));
        p.qkv_packed = 0;
    }
    if (served) return DLT_OK;
    dlt_tensor *h[4] = {NULL, NULL, NULL, NULL};
    dlt_status st = unpack(ctx, qkv, &p, 3, F, h);
    if (st == DLT_OK) st = dlt__tensor_new_like(h[0], h[0]->dtype, F, &h[3]);
    if (st == DLT_OK) st = ctx->be->sdpa_fwd(ctx, h[3], lse, h[0], h[1], h[2], &p);
    if (st == DLT_OK) st = heads_copy(ctx, o, h[3], &p, -1, 1);
    release_all(h, 4);
    return st;
}

static dlt_status sdpa_qkv_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(scaled_dot_product_attention_qkvpacked)";
    dlt_ctx *ctx = nd->ctx;
    dlt_sdpa_params p = *DLT_NODE_ATTR(nd, dlt_sdpa_params);
    dlt_tensor *qkv = nd->saved[0], *o = nd->saved[1], *lse = nd->saved[2], *dqkv = NULL;
    DLT_CHECK(dlt__tensor_new_like(qkv, qkv->dtype, F, &dqkv));
    int served = 0;
    dlt_status st = DLT_OK;
    if (dqkv->numel && ctx->be->sdpa_qkv_bwd) {
        p.qkv_packed = 1;
        st = ctx->be->sdpa_qkv_bwd(ctx, dqkv, gout[0], qkv, o, lse, &p, &served);
        p.qkv_packed = 0;
    }
    if (st == DLT_OK && dqkv->numel && !served) {
        /* h: q, k, v, o, dout, then dq, dk, dv */
        dlt_tensor *h[8] = {NULL};
        st = unpack(ctx, qkv, &p, 3, F, h);
        for (int i = 3; i < 8 && st == DLT_OK; i++) st = dlt__tensor_new_like(h[0], h[0]->dtype, F, &h[i]);
        if (st == DLT_OK) st = heads_copy(ctx, o, h[3], &p, -1, 0);
        if (st == DLT_OK) st = heads_copy(ctx, gout[0], h[4], &p, -1, 0);
        if (st == DLT_OK) st = ctx->be->sdpa_bwd(ctx, h[5], h[6], h[7], h[4], h[0], h[1], h[2], h[3], lse, &p);
        for (int i = 0; i < 3 && st == DLT_OK; i++) st = heads_copy(ctx, dqkv, h[5 + i], &p, i, 1);
        release_all(h, 8);
    }
    if (st != DLT_OK) {
        dlt_tensor_release(dqkv);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dqkv);
}

dlt_status dlt_scaled_dot_product_attention_qkvpacked(dlt_tensor *qkv, int64_t n_head, int32_t is_causal,
                                                      double dropout_p, double scale, dlt_tensor **out) {
    static const char *F = "dlt_scaled_dot_product_attention_qkvpacked";
    DLT_CHECK(dlt__check_tensor(qkv, F, "qkv"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_float(qkv, F, "qkv"));
    DLT_CHECK(dlt__check_ndim(qkv, 3, F, "qkv"));
    char a[96];
    const int64_t C3 = qkv->shape[2];
    if (n_head <= 0 || C3 % 3 != 0 || (C3 / 3) % n_head != 0)
        return dlt__err(DLT_ERR_SHAPE, F, "qkv %s with %lld heads: the last dimension must be 3 * n_head * head_dim",
                        dlt__shape_str(qkv, a, sizeof a), (long long)n_head);
    dlt_ctx *ctx = qkv->ctx;
    DLT_NEED_KERNEL(ctx, copy_nd, F);
    const int32_t ac = dlt__autocast_dtype(ctx);
    const int32_t dtype = ac >= 0 ? ac : qkv->dtype;
    const int64_t B = qkv->shape[0], T = qkv->shape[1], C = C3 / 3;
    dlt_sdpa_params p;
    DLT_CHECK(sdpa_params(ctx, B, n_head, T, T, C / n_head, is_causal, dropout_p, scale, F, &p));
    dlt_tensor *in = NULL, *t = NULL, *o = NULL, *lse = NULL, *alias = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__contiguous_input(qkv, F, &t), done);
    DLT_CHECK_GOTO(st, dlt__autocast_operand(t, dtype, F, &in), done);
    {
        const int64_t os[3] = {B, T, C}, ls[3] = {B, n_head, T};
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, dtype, os, 3, DLT_FORMAT_CONTIGUOUS, F, &o), done);
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_F32, ls, 3, DLT_FORMAT_CONTIGUOUS, F, &lse), done);
    }
    if (o->numel) DLT_CHECK_GOTO(st, qkv_fwd(ctx, o, lse, in, p, F), done);
    DLT_CHECK_GOTO(st, dlt__record(ctx, "scaled_dot_product_attention_qkvpacked", sdpa_qkv_backward, &in, 1, &o, 1,
                                   &node),
                   done);
    if (node) {
        DLT_SET_ATTR(node, dlt_sdpa_params, p);
        DLT_CHECK_GOTO(st, dlt__alias(o, F, &alias), done);
        dlt__save(node, in);
        dlt__save(node, alias);
        dlt__save(node, lse);
    }
done:
    dlt_tensor_release(t);
    dlt_tensor_release(in);
    dlt_tensor_release(lse);
    dlt_tensor_release(alias);
    if (st != DLT_OK) {
        dlt_tensor_release(o);
        return dlt__err_wrap(st, F);
    }
    *out = o;
    return DLT_OK;
}
