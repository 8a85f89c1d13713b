/*
 * conv2d.c - front door of 2-D convolution (PyTorch's conv2d: cross-correlation with
 * stride, padding, dilation, groups, optional bias).
 *
 * Shapes: x [N,C,H,W], w [K,C/groups,R,S], bias [K], y [N,K,P,Q] with
 *   P = (H + 2*pad_h - dil_h*(R-1) - 1) / stride_h + 1   (Q likewise).
 * Autocast: inside a region x, w and bias are used in the region's dtype (w through the
 * parameter's cached copy); y has that dtype. Outside, all must share one dtype.
 * Layout: y takes x's memory format; w is converted to x's format when they differ (a
 * module set to channels-last avoids that conversion).
 * Backward (saved x, w): dx = conv_transpose(dy, w) [bwd_data], dw = corr(x, dy) [bwd_filter],
 * db = sum over N,P,Q of dy. Gradients are written straight into the leaf's buffer when the
 * dtypes match (accumulating with beta = 1), and dx into the gradient a node output has
 * so far (a residual block's input: the identity's gradient is already there), so the
 * data-gradient convolution makes the sum.
 */
#include "ops_internal.h"

/* dw = corr(x, dy) into the leaf's buffer (direct) or a new tensor stored into the slot; on
 * the side stream, beside the data gradient, where the backend has one (lib/core/side.c):
 * everything it needs is allocated before the fork, and the slot is written after it */
static dlt_status conv2d_backward_weight(dlt_node *n, dlt_tensor *x, dlt_tensor *dy, int overlap,
                                         dlt_grad_slot *slot) {
    static const char *F = "dlt_backward(conv2d)";
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *w = n->saved[1], *dw = NULL;
    const dlt_conv_params *p = DLT_NODE_ATTR(n, dlt_conv_params);
    const int direct = dlt__slot_direct(slot, w);
    if (dy->numel == 0 || x->numel == 0) {
        if (direct) {
            DLT_CHECK(dlt__grad_zero(ctx, slot->dst, slot->beta));
            slot->written = 1;
            return DLT_OK;
        }
        DLT_CHECK(dlt__tensor_new_like(w, w->dtype, F, &dw));
        dlt_status st = dlt__grad_zero(ctx, dw, 0);
        if (st != DLT_OK) {
            dlt_tensor_release(dw);
            return st;
        }
        return dlt__grad_slot_store(ctx, slot, dw);
    }
    if (!direct) DLT_CHECK(dlt__tensor_new_like(w, w->dtype, F, &dw));
    int32_t side = 0;
    dlt_status st = overlap ? dlt__side_begin(ctx, 3, 1, &side) : DLT_OK;
    if (st == DLT_OK)
        st = ctx->be->conv2d_bwd_filter(ctx, direct ? slot->dst : dw, x, dy, p, direct ? slot->beta : 0);
    if (side) {
        /* the gradient written is held too: a node output's (non-leaf dst) is read as a
         * tensor later, and holds() is what the tape checks for those */
        dlt_tensor *hold[3] = {x, dy, direct ? slot->dst : dw}, *written = direct ? slot->dst : NULL;
        const dlt_status est = dlt__side_end(ctx, hold, 3, &written, 1);
        if (st == DLT_OK) st = est;
    }
    if (st != DLT_OK) {
        dlt_tensor_release(dw);
        return st;
    }
    if (direct) {
        slot->written = 1;
        return DLT_OK;
    }
    return dlt__grad_slot_store(ctx, slot, dw);
}

static dlt_status conv2d_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(conv2d)";
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *x = n->saved[0], *w = n->saved[1], *dy = gout[0];
    const dlt_conv_params p = *DLT_NODE_ATTR(n, dlt_conv_params); /* the node's attributes */
    dlt_status st = DLT_OK;
    /* an empty dy (N == 0 or K == 0) makes every gradient zero; empty gradients need no
     * kernel (kernels assume numel > 0) */
    const int empty = dy->numel == 0;
    /* the weight gradient first: on the side stream it overlaps the data gradient */
    if (gin[1].needed) DLT_CHECK(conv2d_backward_weight(n, x, dy, gin[0].needed, &gin[1]));
    if (gin[0].needed) {
        dlt_grad_slot *s = &gin[0];
        if (dlt__slot_direct(s, x)) {
            /* into the gradient so far (a residual branch's, or the leaf's buffer): the
             * convolution adds it in its epilogue, no separate sum */
            if (s->dst->numel > 0)
                DLT_CHECK(empty ? dlt__grad_zero(ctx, s->dst, s->beta)
                                : ctx->be->conv2d_bwd_data(ctx, s->dst, dy, w, &p, s->beta));
            s->written = 1;
        } else {
            dlt_tensor *dx = NULL;
            DLT_CHECK(dlt__tensor_new_like(x, x->dtype, F, &dx));
            st = dx->numel == 0 ? DLT_OK
                 : empty        ? dlt__grad_zero(ctx, dx, 0)
                                : ctx->be->conv2d_bwd_data(ctx, dx, dy, w, &p, 0);
            if (st != DLT_OK) {
                dlt_tensor_release(dx);
                return st;
            }
            DLT_CHECK(dlt__grad_slot_store(ctx, s, dx));
        }
    }
    if (n->n_in > 2 && gin[2].needed) {
        const int64_t k = dy->shape[1];
        if (gin[2].dst && gin[2].dst->dtype == dy->dtype && gin[2].dst->numel == k) {
            if (empty) DLT_CHECK(dlt__grad_zero(ctx, gin[2].dst, gin[2].beta));
            else DLT_CHECK(ctx->be->conv2d_bwd_bias(ctx, gin[2].dst, dy, gin[2].beta));
            gin[2].written = 1;
        } else {
            dlt_tensor *db = NULL;
            DLT_CHECK(dlt__tensor_new(ctx, dy->dtype, &k, 1, DLT_FORMAT_CONTIGUOUS, F, &db));
            st = empty ? dlt__grad_zero(ctx, db, 0) : ctx->be->conv2d_bwd_bias(ctx, db, dy, 0);
            if (st != DLT_OK) {
                dlt_tensor_release(db);
                return st;
            }
            DLT_CHECK(dlt__grad_slot_store(ctx, &gin[2], db));
        }
    }
    return DLT_OK;
}

dlt_status dlt_conv2d(dlt_tensor *x, dlt_tensor *w, dlt_tensor *bias, int64_t stride_h,
                      int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w,
                      int64_t groups, dlt_tensor **out) {
    static const char *F = "dlt_conv2d";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_CHECK(dlt__check_tensor(w, F, "w"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_same_ctx(x, w, F, "x", "w"));
    DLT_CHECK(dlt__check_ndim(x, 4, F, "x"));
    DLT_CHECK(dlt__check_ndim(w, 4, F, "w"));
    DLT_CHECK(dlt__check_float(x, F, "x"));
    DLT_CHECK(dlt__check_float(w, F, "w"));
    if (bias) {
        DLT_CHECK(dlt__check_tensor(bias, F, "bias"));
        DLT_CHECK(dlt__check_same_ctx(x, bias, F, "x", "bias"));
        DLT_CHECK(dlt__check_float(bias, F, "bias"));
    }
    if (stride_h < 1 || stride_w < 1 || pad_h < 0 || pad_w < 0 || dil_h < 1 || dil_w < 1 || groups < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "stride (%lld,%lld) and dilation (%lld,%lld) must be >= 1, padding "
                        "(%lld,%lld) >= 0, groups %lld >= 1",
                        (long long)stride_h, (long long)stride_w, (long long)dil_h, (long long)dil_w,
                        (long long)pad_h, (long long)pad_w, (long long)groups);
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    const int64_t K = w->shape[0], R = w->shape[2], S = w->shape[3];
    char bx[96], bw[96];
    int64_t cw = 0;
    if (C % groups != 0 || K % groups != 0 || dlt__mul_ovf(w->shape[1], groups, &cw) || cw != C)
        return dlt__err(DLT_ERR_SHAPE, F,
                        "x %s and w %s do not fit groups=%lld (need C %% groups == 0, K %% groups "
                        "== 0 and w.shape[1] == C / groups)",
                        dlt__shape_str(x, bx, sizeof bx), dlt__shape_str(w, bw, sizeof bw),
                        (long long)groups);
    if (bias && (bias->ndim != 1 || bias->shape[0] != K))
        return dlt__err(DLT_ERR_SHAPE, F, "bias must be [%lld], got %s", (long long)K,
                        dlt__shape_str(bias, bx, sizeof bx));
    if (R < 1 || S < 1)
        return dlt__err(DLT_ERR_SHAPE, F, "w %s has an empty kernel", dlt__shape_str(w, bw, sizeof bw));
    /* extents of the dilated kernel and of the padded input, overflow-checked */
    int64_t eh, ew, hp, wp;
    if (dlt__mul_ovf(dil_h, R - 1, &eh) || dlt__add_ovf(eh, 1, &eh) ||
        dlt__mul_ovf(dil_w, S - 1, &ew) || dlt__add_ovf(ew, 1, &ew) ||
        dlt__mul_ovf(pad_h, 2, &hp) || dlt__add_ovf(hp, H, &hp) ||
        dlt__mul_ovf(pad_w, 2, &wp) || dlt__add_ovf(wp, W, &wp))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "padding (%lld,%lld) or dilation (%lld,%lld) is too large for x %s: the "
                        "size arithmetic overflows",
                        (long long)pad_h, (long long)pad_w, (long long)dil_h, (long long)dil_w,
                        dlt__shape_str(x, bx, sizeof bx));
    if (hp < eh || wp < ew)
        return dlt__err(DLT_ERR_SHAPE, F,
                        "the dilated kernel %lldx%lld does not fit the padded input of x %s",
                        (long long)eh, (long long)ew, dlt__shape_str(x, bx, sizeof bx));
    const int64_t P = (hp - eh) / stride_h + 1, Q = (wp - ew) / stride_w + 1;

    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, conv2d_fwd, F);
    const int32_t ac = dlt__autocast_dtype(ctx);
    const int32_t dtype = ac >= 0 ? ac : x->dtype;
    if (ac < 0 && (w->dtype != x->dtype || (bias && bias->dtype != x->dtype)))
        return dlt__err(DLT_ERR_DTYPE, F,
                        "x is %s but w is %s%s%s: use one dtype, or an autocast region",
                        dlt_dtype_name(x->dtype), dlt_dtype_name(w->dtype), bias ? " and bias " : "",
                        bias ? dlt_dtype_name(bias->dtype) : "");

    dlt_tensor *xc = NULL, *wc = NULL, *wf = NULL, *bc = NULL, *y = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    dlt__range_push(ctx, "conv2d");
    DLT_CHECK_GOTO(st, dlt__autocast_operand(x, dtype, F, &xc), done);
    DLT_CHECK_GOTO(st, dlt__autocast_operand(w, dtype, F, &wc), done);
    DLT_CHECK_GOTO(st, dlt__op_to_format(wc, x->format, F, &wf), done);
    if (bias) DLT_CHECK_GOTO(st, dlt__autocast_operand(bias, dtype, F, &bc), done);
    const int64_t yshape[4] = {N, K, P, Q};
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, dtype, yshape, 4, x->format, F, &y), done);
    dlt_conv_params p = {{stride_h, stride_w}, {pad_h, pad_w}, {dil_h, dil_w}, groups};
    /* kernels handle C == 0 themselves (y = bias) */
    if (y->numel > 0) DLT_CHECK_GOTO(st, ctx->be->conv2d_fwd(ctx, y, xc, wf, bc, &p), done);
    {
        dlt_tensor *in[3] = {xc, wf, bc};
        DLT_CHECK_GOTO(st, dlt__record(ctx, "conv2d", conv2d_backward, in, bias ? 3 : 2, &y, 1, &node),
                       done);
    }
    if (node) {
        dlt__save(node, xc);
        dlt__save(node, wf);
        DLT_SET_ATTR(node, dlt_conv_params, p);
    }
done:
    dlt__range_pop(ctx);
    dlt_tensor_release(xc);
    dlt_tensor_release(wc);
    dlt_tensor_release(wf);
    dlt_tensor_release(bc);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}
