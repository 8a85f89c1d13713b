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

#include "../kernel/philox.h"
#include "ops_internal.h"

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
    if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "dropout_p %g is not in [0, 1]", dropout_p);
    if (!(scale >= 0.0) || isinf(scale))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "scale %g must be finite and >= 0 (0: 1/sqrt(D))", scale);
    dlt_ctx *ctx = q->ctx;
    DLT_NEED_KERNEL(ctx, sdpa_fwd, F);
    const int32_t ac = dlt__autocast_dtype(ctx);
    if (ac < 0 && (k->dtype != q->dtype || v->dtype != q->dtype))
        return dlt__err(DLT_ERR_DTYPE, F, "q is %s, k %s, v %s: use one dtype, or an autocast region",
                        dlt_dtype_name(q->dtype), dlt_dtype_name(k->dtype), dlt_dtype_name(v->dtype));
    const int32_t dtype = ac >= 0 ? ac : q->dtype;
    dlt_sdpa_params p = {.B = q->shape[0], .H = q->shape[1], .T = q->shape[2], .S = k->shape[2],
                         .D = q->shape[3], .causal = is_causal != 0, .dropout_p = dropout_p};
    p.scale = scale > 0.0 ? scale : (p.D > 0 ? 1.0 / sqrt((double)p.D) : 1.0);
    if (dropout_p > 0.0) {
        DLT_CHECK(dlt__rng_base_ready(ctx, F));
        p.seed = ctx->seed;
        p.offset = dlt__rng_reserve_based(ctx, dlt__philox_blocks((uint64_t)(p.B * p.H * p.T * p.S)));
    }
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
