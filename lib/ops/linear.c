/*
 * linear.c - front door of y = x w^T + b (PyTorch's F.linear).
 * x [M,K] (or [..., K], viewed as rows), w [N,K], bias [N]; y [M,N] (or [..., N]). Autocast casts x, w, bias to the region's dtype
 * (the weight through its cached copy). Backward (saved x, w): dx = dy w, dw = dy^T x,
 * db = column sums of dy; dw/db go straight into the leaves when the dtypes allow.
 * dlt__linear_recompute (internal): the same op for x = act(h), saving h instead of x and
 * recomputing x in the backward (the GPT MLP: one [rows, 4C] activation less per layer,
 * what torch.compile's partitioner does for cheap pointwise ops). The GPT MLP's fused
 * c_fc + GELU and GELU + c_proj nodes are in linear_gelu.c.
 */
#include "ops_internal.h"

/* the backward with x given: saved (linear) or recomputed (linear_recompute_backward,
 * gelu_linear's backward, which computes dx itself: want_dx = 0) */
dlt_status dlt__linear_backward_x(dlt_node *n, dlt_tensor *x, int want_dx, dlt_tensor *const *gout,
                                  dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(linear)";
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *w = n->saved[1], *dy = gout[0];
    dlt_status st = DLT_OK;
    /* an empty dy (M == 0 or N == 0) makes every gradient zero; with K == 0 dx and dw are
     * empty; empty gradients need no kernel (kernels assume numel > 0) */
    const int empty = dy->numel == 0;
    if (want_dx && gin[0].needed) {
        dlt_tensor *dx = NULL;
        DLT_CHECK(dlt__tensor_new_like(x, x->dtype, F, &dx));
        st = dx->numel == 0 ? DLT_OK
             : empty        ? dlt__grad_zero(ctx, dx, 0)
                            : ctx->be->linear_bwd_data(ctx, dx, dy, w);
        if (st != DLT_OK) {
            dlt_tensor_release(dx);
            return st;
        }
        DLT_CHECK(dlt__grad_slot_store(ctx, &gin[0], dx));
    }
    const int has_b = n->n_in > 2;
    const int need_w = gin[1].needed, need_b = has_b && gin[2].needed;
    if (!need_w && !need_b) return DLT_OK;
    const int64_t nb = w->shape[0];
    /* one GEMM call produces dw and db with one beta: write the leaves directly only when
     * both (or the one needed) accept the same beta */
    int direct = need_w && dlt__slot_direct(&gin[1], w) &&
                 (!need_b || (gin[2].dst && gin[2].dst->dtype == w->dtype && gin[2].beta == gin[1].beta));
    if (direct) {
        if (empty) {
            st = dlt__grad_zero(ctx, gin[1].dst, gin[1].beta);
            if (st == DLT_OK && need_b) st = dlt__grad_zero(ctx, gin[2].dst, gin[1].beta);
        } else if (w->numel == 0 && !need_b) {
            st = DLT_OK; /* K == 0: dw is empty */
        } else {
            st = ctx->be->linear_bwd_weight(ctx, gin[1].dst, need_b ? gin[2].dst : NULL, x, dy,
                                            gin[1].beta);
        }
        if (st != DLT_OK) return st;
        gin[1].written = 1;
        if (need_b) gin[2].written = 1;
        return DLT_OK;
    }
    dlt_tensor *dw = NULL, *db = NULL;
    DLT_CHECK(dlt__tensor_new_like(w, w->dtype, F, &dw));
    if (need_b) {
        st = dlt__tensor_new(ctx, dy->dtype, &nb, 1, DLT_FORMAT_CONTIGUOUS, F, &db);
        if (st != DLT_OK) {
            dlt_tensor_release(dw);
            return st;
        }
    }
    if (empty) {
        st = dlt__grad_zero(ctx, dw, 0);
        if (st == DLT_OK && db) st = dlt__grad_zero(ctx, db, 0);
    } else if (w->numel == 0 && !db) {
        st = DLT_OK; /* K == 0: dw is empty */
    } else {
        st = ctx->be->linear_bwd_weight(ctx, dw, db, x, dy, 0);
    }
    if (st != DLT_OK) {
        dlt_tensor_release(dw);
        dlt_tensor_release(db);
        return st;
    }
    if (need_w) {
        st = dlt__grad_slot_store(ctx, &gin[1], dw);
    } else {
        dlt_tensor_release(dw);
    }
    if (need_b) {
        if (st == DLT_OK) st = dlt__grad_slot_store(ctx, &gin[2], db);
        else dlt_tensor_release(db);
    }
    return st;
}

static dlt_status linear_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    return dlt__linear_backward_x(n, n->saved[0], 1, gout, gin);
}

/* dlt__linear_recompute: x = act(h) again, from the saved h; only dw needs it */
typedef struct recompute_attr {
    int32_t op;
    double alpha;
} recompute_attr;

static dlt_status linear_recompute_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(linear)";
    const recompute_attr *r = DLT_NODE_ATTR(n, recompute_attr);
    dlt_tensor *h = n->saved[0], *x = NULL;
    if (!gin[1].needed) return dlt__linear_backward_x(n, h, 1, gout, gin); /* dx and db use no x */
    DLT_CHECK(dlt__tensor_new_like(h, h->dtype, F, &x));
    dlt_status st = x->numel ? n->ctx->be->unary(n->ctx, x, h, r->op, r->alpha) : DLT_OK;
    if (st == DLT_OK) st = dlt__linear_backward_x(n, x, 1, gout, gin);
    dlt_tensor_release(x);
    return st;
}

static dlt_status linear_2d(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias, const recompute_attr *rc,
                            dlt_tensor *rh, dlt_tensor **out);

/* N-D input [..., in]: viewed as [rows, in], the result viewed back as [..., out] (both
 * views, recorded, so gradients flow through). rc, h: dlt__linear_recompute's (h viewed as x). */
static dlt_status linear_nd(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias, const recompute_attr *rc,
                            dlt_tensor *h, dlt_tensor **out) {
    static const char *F = "dlt_linear";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_CHECK(dlt__check_tensor(w, F, "w"));
    DLT_NULL_CHECK(out, F);
    if (x->ndim == 2) return linear_2d(x, w, bias, rc, h, out);
    if (x->ndim < 1) return dlt__err(DLT_ERR_SHAPE, F, "x must have at least one dimension (..., in_features)");
    DLT_CHECK(dlt__check_ndim(w, 2, F, "w"));
    char a[96], b[96];
    const int64_t in = x->shape[x->ndim - 1];
    if (in != w->shape[1])
        return dlt__err(DLT_ERR_SHAPE, F, "x %s and w %s: x.shape[-1] must equal w.shape[1]",
                        dlt__shape_str(x, a, sizeof a), dlt__shape_str(w, b, sizeof b));
    int64_t rows = 1, ys[DLT_MAX_DIMS];
    for (int32_t i = 0; i < x->ndim - 1; i++) {
        rows *= x->shape[i];
        ys[i] = x->shape[i];
    }
    ys[x->ndim - 1] = w->shape[0];
    const int64_t s2[2] = {rows, in};
    dlt_tensor *x2 = NULL, *h2 = NULL, *y2 = NULL;
    dlt_status st = dlt_reshape(x, s2, 2, &x2);
    if (st == DLT_OK && h) st = dlt_reshape(h, s2, 2, &h2);
    if (st == DLT_OK) st = linear_2d(x2, w, bias, rc, h2, &y2);
    if (st == DLT_OK) st = dlt_reshape(y2, ys, x->ndim, out);
    dlt_tensor_release(x2);
    dlt_tensor_release(h2);
    dlt_tensor_release(y2);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

dlt_status dlt_linear(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias, dlt_tensor **out) {
    return linear_nd(x, w, bias, NULL, NULL, out);
}

dlt_status dlt__linear_recompute(dlt_tensor *x, dlt_tensor *h, int32_t act_op, double act_alpha, dlt_tensor *w,
                                 dlt_tensor *bias, dlt_tensor **out) {
    DLT_CHECK(dlt__check_tensor(h, "dlt_linear", "h"));
    const recompute_attr rc = {.op = act_op, .alpha = act_alpha};
    /* not act(h) as this path needs it: keep x */
    const int fits = x && dlt__same_shape(x, h) && x->dtype == h->dtype && x->format == h->format;
    return fits ? linear_nd(x, w, bias, &rc, h, out) : dlt_linear(x, w, bias, out);
}

/* rc, rh (dlt__linear_recompute): save rh instead of x when x reaches the GEMM uncast */
static dlt_status linear_2d(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias, const recompute_attr *rc,
                            dlt_tensor *rh, dlt_tensor **out) {
    static const char *F = "dlt_linear";
    DLT_CHECK(dlt__check_same_ctx(x, w, F, "x", "w"));
    DLT_CHECK(dlt__check_ndim(x, 2, F, "x"));
    DLT_CHECK(dlt__check_ndim(w, 2, F, "w"));
    DLT_CHECK(dlt__check_float(x, F, "x"));
    DLT_CHECK(dlt__check_float(w, F, "w"));
    char a[96], b[96];
    if (x->shape[1] != w->shape[1])
        return dlt__err(DLT_ERR_SHAPE, F, "x %s and w %s: x.shape[1] must equal w.shape[1]",
                        dlt__shape_str(x, a, sizeof a), dlt__shape_str(w, b, sizeof b));
    if (bias) {
        DLT_CHECK(dlt__check_tensor(bias, F, "bias"));
        DLT_CHECK(dlt__check_same_ctx(x, bias, F, "x", "bias"));
        DLT_CHECK(dlt__check_float(bias, F, "bias"));
        if (bias->ndim != 1 || bias->shape[0] != w->shape[0])
            return dlt__err(DLT_ERR_SHAPE, F, "bias must be [%lld], got %s", (long long)w->shape[0],
                            dlt__shape_str(bias, a, sizeof a));
    }
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, linear_fwd, F);
    const int32_t ac = dlt__autocast_dtype(ctx);
    const int32_t dtype = ac >= 0 ? ac : x->dtype;
    if (ac < 0 && (w->dtype != x->dtype || (bias && bias->dtype != x->dtype)))
        return dlt__err(DLT_ERR_DTYPE, F, "x is %s but w is %s%s%s: use one dtype, or an autocast region",
                        dlt_dtype_name(x->dtype), dlt_dtype_name(w->dtype), bias ? " and bias " : "",
                        bias ? dlt_dtype_name(bias->dtype) : "");
    dlt_tensor *xc = NULL, *wc = NULL, *bc = NULL, *y = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    dlt__range_push(ctx, "linear");
    DLT_CHECK_GOTO(st, dlt__autocast_operand(x, dtype, F, &xc), done);
    DLT_CHECK_GOTO(st, dlt__autocast_operand(w, dtype, F, &wc), done);
    if (bias) DLT_CHECK_GOTO(st, dlt__autocast_operand(bias, dtype, F, &bc), done);
    const int64_t ys[2] = {x->shape[0], w->shape[0]};
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, dtype, ys, 2, DLT_FORMAT_CONTIGUOUS, F, &y), done);
    if (y->numel) {
        if (x->shape[1] == 0) {
            /* an empty inner dimension: y = 0, plus the bias broadcast over the rows */
            if (bc && ctx->be->copy_nd) {
                dlt_nd s;
                dlt_nd_operand od, ob;
                dlt__nd_init(&s, ys, 2);
                dlt__nd_broadcast_operand(y, ys, 2, &od);
                dlt__nd_broadcast_operand(bc, ys, 2, &ob);
                DLT_CHECK_GOTO(st, dlt__k_copy(ctx, y, &od, bc, &ob, &s), done);
            } else if (bc) {
                st = dlt__be_missing(ctx, F, "copy_nd");
                goto done;
            } else {
                DLT_CHECK_GOTO(st, ctx->be->fill(ctx, y, 0.0), done);
            }
        } else {
            DLT_CHECK_GOTO(st, ctx->be->linear_fwd(ctx, y, xc, wc, bc), done);
        }
    }
    /* recompute only when the GEMM took x itself (no autocast cast in between) */
    const int recompute = rc && xc == x;
    {
        dlt_tensor *in[3] = {xc, wc, bc};
        DLT_CHECK_GOTO(st, dlt__record(ctx, "linear", recompute ? linear_recompute_backward : linear_backward, in,
                                       bias ? 3 : 2, &y, 1, &node),
                       done);
    }
    if (node) {
        dlt__save(node, recompute ? rh : xc);
        dlt__save(node, wc);
        if (recompute) DLT_SET_ATTR(node, recompute_attr, *rc);
    }
done:
    dlt__range_pop(ctx);
    dlt_tensor_release(xc);
    dlt_tensor_release(wc);
    dlt_tensor_release(bc);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}
