/*
 * linear_gelu.c - the GPT MLP's y = c_proj(gelu_tanh(c_fc(x))) as two tape nodes around the
 * GELU, where the backend fuses the GELU into the GEMMs' epilogues (fp16/bf16 autocast):
 *   "linear_gelu" (dlt__linear_gelu): h = x w^T + b, recorded as a plain linear of x (h
 *       carries the gradient); its GEMM also writes g = gelu_tanh(h) (backend linear_fwd_gelu),
 *       a by-product without a gradient of its own.
 *   "gelu_linear" (dlt__gelu_linear): y = g wp^T + bp, recorded as an op of h. It saves h
 *       (not g: one [rows, 4C] activation less per block); its backward computes dh = gelu'(h)
 *       * (dy wp) in one GEMM whose epilogue applies the derivative (linear_bwd_data_gelu), and
 *       recomputes g from h for dwp.
 * Putting the GELU's derivative on c_proj's side is what lets the data-gradient GEMM apply it;
 * with the GELU inside c_fc's node, dg would have to be written out and read back by a
 * separate kernel. Where the backend has no such epilogue for a call (CPU, a shape or dtype
 * cuBLASLt refuses) the backward runs dg = dy wp, then the GELU's backward kernel: the same
 * kernels as the unfused modules, with the same results bit for bit.
 */
#include "ops_internal.h"

/* ---- "linear_gelu": h = x w^T + b, and g = gelu_tanh(h) from the same GEMM ---- */

/* saved: x, w; a plain linear's backward (the GELU's derivative is gelu_linear's) */
static dlt_status linear_gelu_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    return dlt__linear_backward_x(n, n->saved[0], 1, gout, gin);
}

/* One node for the 2-D call; *h stays NULL (nothing recorded) where the backend has no
 * fused path for it */
static dlt_status linear_gelu_2d(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias, int32_t dtype, dlt_tensor **g_out,
                                 dlt_tensor **h_out) {
    static const char *F = "dlt_linear";
    dlt_ctx *ctx = x->ctx;
    dlt_tensor *xc = NULL, *wc = NULL, *bc = NULL, *g = NULL, *h = NULL;
    dlt_node *node = NULL;
    int served = 0;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__autocast_operand(x, dtype, F, &xc), done);
    DLT_CHECK_GOTO(st, dlt__autocast_operand(w, dtype, F, &wc), done);
    if (bias) DLT_CHECK_GOTO(st, dlt__autocast_operand(bias, dtype, F, &bc), done);
    {
        const int64_t ys[2] = {x->shape[0], w->shape[0]};
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, dtype, ys, 2, DLT_FORMAT_CONTIGUOUS, F, &g), done);
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, dtype, ys, 2, DLT_FORMAT_CONTIGUOUS, F, &h), done);
    }
    DLT_CHECK_GOTO(st, ctx->be->linear_fwd_gelu(ctx, g, h, xc, wc, bc, &served), done);
    if (!served) goto done;
    {
        dlt_tensor *in[3] = {xc, wc, bc};
        DLT_CHECK_GOTO(st, dlt__record(ctx, "linear_gelu", linear_gelu_backward, in, bias ? 3 : 2, &h, 1, &node),
                       done);
    }
    if (node) {
        dlt__save(node, xc);
        dlt__save(node, wc);
    }
    *g_out = g, g = NULL;
    *h_out = h, h = NULL;
done:
    dlt_tensor_release(xc);
    dlt_tensor_release(wc);
    dlt_tensor_release(bc);
    dlt_tensor_release(g);
    dlt_tensor_release(h);
    return st;
}

dlt_status dlt__linear_gelu(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias, dlt_tensor **g_out, dlt_tensor **h_out) {
    static const char *F = "dlt_linear";
    *g_out = *h_out = NULL;
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_CHECK(dlt__check_tensor(w, F, "w"));
    dlt_ctx *ctx = x->ctx;
    const int32_t ac = dlt__autocast_dtype(ctx);
    /* the cases the fused GEMM takes; everything else (and every error) is dlt_linear's */
    if (!ctx->be->linear_fwd_gelu || (ac != DLT_F16 && ac != DLT_BF16) || x->ndim < 2 ||
        w->ndim != 2 || w->ctx != ctx || !dlt__is_float(x->dtype) || !dlt__is_float(w->dtype) ||
        x->shape[x->ndim - 1] != w->shape[1] ||
        (bias && (bias->ctx != ctx || bias->ndim != 1 || bias->shape[0] != w->shape[0] ||
                  !dlt__is_float(bias->dtype))))
        return DLT_OK;
    int64_t rows = 1, ys[DLT_MAX_DIMS];
    for (int32_t i = 0; i < x->ndim - 1; i++) rows *= x->shape[i], ys[i] = x->shape[i];
    ys[x->ndim - 1] = w->shape[0];
    if (rows == 0 || w->shape[0] == 0 || w->shape[1] == 0) return DLT_OK;
    const int64_t s2[2] = {rows, w->shape[1]};
    dlt_tensor *x2 = NULL, *g2 = NULL, *h2 = NULL;
    dlt_status st = dlt_reshape(x, s2, 2, &x2);
    if (st == DLT_OK) st = linear_gelu_2d(x2, w, bias, ac, &g2, &h2);
    if (st == DLT_OK && h2) st = dlt_reshape(h2, ys, x->ndim, h_out);
    if (st == DLT_OK && h2) st = dlt_reshape(g2, ys, x->ndim, g_out); /* g has no gradient: a plain view */
    dlt_tensor_release(x2);
    dlt_tensor_release(g2);
    dlt_tensor_release(h2);
    if (st != DLT_OK) {
        dlt_tensor_release(*g_out);
        dlt_tensor_release(*h_out);
        *g_out = *h_out = NULL;
        return dlt__err_wrap(st, F);
    }
    return DLT_OK;
}

/* ---- "gelu_linear": y = gelu_tanh(h) w^T + b from the g computed with h ---- */

/* dh = gelu'(h) * (dy w). The fused GEMM multiplies the fp32 accumulator by the derivative
 * and rounds once, at least as accurate as the fallback, which rounds dg = dy w to h's
 * dtype before its kernel (the unfused modules' arithmetic, kept bit for bit). */
static dlt_status gelu_dgrad(dlt_ctx *ctx, dlt_tensor *dh, const dlt_tensor *dy, const dlt_tensor *w,
                             const dlt_tensor *h, const char *F) {
    int served = 0;
    if (ctx->be->linear_bwd_data_gelu) DLT_CHECK(ctx->be->linear_bwd_data_gelu(ctx, dh, dy, w, h, &served));
    if (served) {
        ctx->served_gelu_dgrad++;
        return DLT_OK;
    }
    dlt_tensor *dg = NULL;
    DLT_CHECK(dlt__tensor_new_like(h, h->dtype, F, &dg));
    dlt_status st = ctx->be->linear_bwd_data(ctx, dg, dy, w);
    if (st == DLT_OK) st = ctx->be->unary_bwd(ctx, dh, dg, h, NULL, DLT_UN_GELU_TANH, 0.0);
    dlt_tensor_release(dg);
    return st;
}

/* saved: h, w (n_in > 2: a bias); the front door recorded it only for non-empty M, N, K */
static dlt_status gelu_linear_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(gelu_linear)";
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *h = n->saved[0], *w = n->saved[1];
    if (gin[0].needed) {
        dlt_tensor *dh = NULL;
        DLT_CHECK(dlt__tensor_new_like(h, h->dtype, F, &dh));
        dlt_status st = gelu_dgrad(ctx, dh, gout[0], w, h, F);
        if (st != DLT_OK) {
            dlt_tensor_release(dh);
            return st;
        }
        DLT_CHECK(dlt__grad_slot_store(ctx, &gin[0], dh));
    }
    if (!gin[1].needed) return dlt__linear_backward_x(n, h, 0, gout, gin); /* db needs no g */
    dlt_tensor *g = NULL;
    DLT_CHECK(dlt__tensor_new_like(h, h->dtype, F, &g));
    dlt_status st = ctx->be->unary(ctx, g, h, DLT_UN_GELU_TANH, 0.0);
    if (st == DLT_OK) st = dlt__linear_backward_x(n, g, 0, gout, gin);
    dlt_tensor_release(g);
    return st;
}

/* h, g 2-D [M, K] in dtype (autocast's), M, K, N > 0 */
static dlt_status gelu_linear_2d(dlt_tensor *h, dlt_tensor *g, dlt_tensor *w, dlt_tensor *bias, int32_t dtype,
                                 dlt_tensor **out) {
    static const char *F = "dlt_linear";
    dlt_ctx *ctx = h->ctx;
    dlt_tensor *wc = NULL, *bc = NULL, *y = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__autocast_operand(w, dtype, F, &wc), done);
    if (bias) DLT_CHECK_GOTO(st, dlt__autocast_operand(bias, dtype, F, &bc), done);
    {
        const int64_t ys[2] = {h->shape[0], w->shape[0]};
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, dtype, ys, 2, DLT_FORMAT_CONTIGUOUS, F, &y), done);
    }
    DLT_CHECK_GOTO(st, ctx->be->linear_fwd(ctx, y, g, wc, bc), done);
    {
        dlt_tensor *in[3] = {h, wc, bc};
        DLT_CHECK_GOTO(st, dlt__record(ctx, "gelu_linear", gelu_linear_backward, in, bias ? 3 : 2, &y, 1, &node),
                       done);
    }
    if (node) {
        dlt__save(node, h);
        dlt__save(node, wc);
    }
    *out = y, y = NULL;
done:
    dlt_tensor_release(wc);
    dlt_tensor_release(bc);
    dlt_tensor_release(y);
    return st;
}

dlt_status dlt__gelu_linear(dlt_tensor *h, dlt_tensor *g, dlt_tensor *w, dlt_tensor *bias, dlt_tensor **out) {
    static const char *F = "dlt_linear";
    DLT_CHECK(dlt__check_tensor(h, F, "h"));
    DLT_CHECK(dlt__check_tensor(w, F, "w"));
    DLT_NULL_CHECK(out, F);
    dlt_ctx *ctx = h->ctx;
    const dlt_backend *be = ctx->be;
    const int32_t ac = dlt__autocast_dtype(ctx);
    const int64_t k = h->ndim ? h->shape[h->ndim - 1] : 0;
    int64_t rows = 1;
    for (int32_t i = 0; i + 1 < h->ndim; i++) rows *= h->shape[i];
    /* g as dlt__linear_gelu made it with h, in autocast's dtype, and a well-formed non-empty
     * product; anything else (and every error) goes the unfused way */
    const int fits = g && g->ctx == ctx && (ac == DLT_F16 || ac == DLT_BF16) && h->dtype == ac && g->dtype == ac &&
                     dlt__same_shape(g, h) && h->format == DLT_FORMAT_CONTIGUOUS &&
                     g->format == DLT_FORMAT_CONTIGUOUS && h->ndim >= 2 && w->ndim == 2 && w->ctx == ctx &&
                     dlt__is_float(w->dtype) && w->shape[1] == k && rows > 0 && k > 0 && w->shape[0] > 0 &&
                     (!bias || (dlt__check_tensor(bias, F, "bias") == DLT_OK && bias->ctx == ctx &&
                                bias->ndim == 1 && bias->shape[0] == w->shape[0] && dlt__is_float(bias->dtype))) &&
                     be->linear_fwd && be->linear_bwd_data && be->unary && be->unary_bwd;
    if (!fits) {
        dlt_tensor *g2 = NULL;
        dlt_status st = dlt_gelu(h, DLT_GELU_TANH, &g2);
        if (st == DLT_OK) st = dlt__linear_recompute(g2, h, DLT_UN_GELU_TANH, 0.0, w, bias, out);
        dlt_tensor_release(g2);
        return st;
    }
    int64_t ys[DLT_MAX_DIMS];
    for (int32_t i = 0; i + 1 < h->ndim; i++) ys[i] = h->shape[i];
    ys[h->ndim - 1] = w->shape[0];
    const int64_t s2[2] = {rows, k};
    dlt_tensor *h2 = NULL, *g2 = NULL, *y2 = NULL;
    dlt_status st = dlt_reshape(h, s2, 2, &h2);
    if (st == DLT_OK) st = dlt_reshape(g, s2, 2, &g2);
    if (st == DLT_OK) st = gelu_linear_2d(h2, g2, w, bias, ac, &y2);
    if (st == DLT_OK) st = dlt_reshape(y2, ys, h->ndim, out);
    dlt_tensor_release(h2);
    dlt_tensor_release(g2);
    dlt_tensor_release(y2);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}
