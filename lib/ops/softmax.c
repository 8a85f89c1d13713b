/*
 * softmax.c - front doors of softmax and log_softmax along one dimension (PyTorch's
 * F.softmax / F.log_softmax with dtype=None).
 *
 * Computed with the maximum subtracted, in fp32 (double on the CPU), rounded once to the
 * result dtype, which is the input's. Both are on autocast's fp32 list: in an autocast
 * region a low-precision input is cast up first and the result is f32.
 * x is viewed as [outer, n, inner] with n the size of `dim`.
 *
 * Gradients, from the saved output y and the upstream u:
 *   softmax:     dx = y * (u - sum_dim(u * y))
 *   log_softmax: dx = u - exp(y) * sum_dim(u)
 */
#include "ops_internal.h"

typedef struct softmax_attr {
    int64_t outer, n, inner;
    int32_t log;
    int32_t pad_;
} softmax_attr;

static dlt_status softmax_backward(dlt_node *nd, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = nd->ctx;
    const softmax_attr *at = DLT_NODE_ATTR(nd, softmax_attr);
    dlt_tensor *y = nd->saved[0], *u = gout[0], *dx = NULL;
    DLT_CHECK(dlt__tensor_new_like(y, y->dtype, "dlt_backward(softmax)", &dx));
    dlt_status st = dx->numel ? ctx->be->softmax_bwd(ctx, dx, u, y, at->outer, at->n, at->inner, at->log)
                              : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

static dlt_status softmax_op(dlt_tensor *x, int32_t dim, int32_t log, const char *F, dlt_tensor **out) {
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_float(x, F, "x"));
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, softmax_fwd, F);
    int32_t d;
    DLT_CHECK(dlt__norm_dim(dim, x->ndim, F, &d));
    dlt_tensor *xc = NULL, *t = NULL, *y = NULL, *alias = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK(dlt__contiguous_input(x, F, &t));
    st = dlt__autocast_fp32(t, F, &xc);
    dlt_tensor_release(t);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    softmax_attr at = {.outer = 1, .n = 1, .inner = 1, .log = log};
    for (int32_t i = 0; i < xc->ndim; i++) {
        if (i < d) at.outer *= xc->shape[i];
        else if (i == d) at.n = xc->shape[i];
        else at.inner *= xc->shape[i];
    }
    DLT_CHECK_GOTO(st, dlt__tensor_new_like(xc, xc->dtype, F, &y), done);
    if (y->numel) DLT_CHECK_GOTO(st, ctx->be->softmax_fwd(ctx, y, xc, at.outer, at.n, at.inner, log), done);
    DLT_CHECK_GOTO(st, dlt__record(ctx, log ? "log_softmax" : "softmax", softmax_backward, &xc, 1, &y, 1, &node),
                   done);
    if (node) {
        DLT_SET_ATTR(node, softmax_attr, at);
        DLT_CHECK_GOTO(st, dlt__alias(y, F, &alias), done);
        dlt__save(node, alias);
    }
done:
    dlt_tensor_release(xc);
    dlt_tensor_release(alias);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt_softmax(dlt_tensor *x, int32_t dim, dlt_tensor **out) {
    return softmax_op(x, dim, 0, "dlt_softmax", out);
}
dlt_status dlt_log_softmax(dlt_tensor *x, int32_t dim, dlt_tensor **out) {
    return softmax_op(x, dim, 1, "dlt_log_softmax", out);
}
