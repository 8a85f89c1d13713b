/*
 * elementwise.c - front doors of relu, mul_scalar, sum, mean and cast (add and the other
 * broadcasting ops are in binary.c), plus the differentiable helpers that autocast and
 * layout changes use.
 *
 * Gradients: relu dx = dy unless y <= 0 (saved: an alias of y);
 * mul_scalar dx = dy * s * alpha (s is not differentiated); sum/mean broadcast dy (* 1/n);
 * cast converts dy back to the input dtype; to_format converts dy back to the input format.
 */
#include <string.h>

#include <math.h>

#include "ops_internal.h"

dlt_status dlt__alias(dlt_tensor *t, const char *func, dlt_tensor **out) {
    return dlt__tensor_view(t, t->shape, t->ndim, t->format, func, out);
}

static dlt_status new_like(const dlt_tensor *x, int32_t dtype, const char *func, dlt_tensor **out) {
    return dlt__tensor_new_like(x, dtype, func, out);
}

/* ---- relu ---- */

static dlt_status relu_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *y = n->saved[0], *dx = NULL;
    DLT_CHECK(new_like(y, y->dtype, "dlt_backward(relu)", &dx));
    dlt_status st = dx->numel ? ctx->be->relu_bwd(ctx, dx, gout[0], y) : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

dlt_status dlt_relu(dlt_tensor *x, dlt_tensor **out) {
    static const char *F = "dlt_relu";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_float(x, F, "x"));
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, relu_fwd, F);
    dlt_tensor *y = NULL, *alias = NULL;
    dlt_node *node = NULL;
    DLT_CHECK(new_like(x, x->dtype, F, &y));
    dlt_status st = x->numel ? ctx->be->relu_fwd(ctx, y, x) : DLT_OK;
    if (st == DLT_OK && dlt__needs_grad(ctx, &x, 1)) {
        st = dlt__alias(y, F, &alias);
        if (st == DLT_OK) st = dlt__record(ctx, "relu", relu_backward, &x, 1, &y, 1, &node);
        if (st == DLT_OK) dlt__save(node, alias);
    }
    dlt_tensor_release(alias);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

/* ---- mul_scalar ---- */

typedef struct scale_attr {
    double alpha;
} scale_attr;

static dlt_status mul_scalar_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *dx = NULL;
    const dlt_tensor *s = n->n_saved > 0 ? n->saved[0] : NULL;
    DLT_CHECK(new_like(gout[0], gout[0]->dtype, "dlt_backward(mul_scalar)", &dx));
    dlt_status st = dx->numel ? ctx->be->scale(ctx, dx, gout[0], s,
                                                 DLT_NODE_ATTR(n, scale_attr)->alpha) : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

dlt_status dlt_mul_scalar(dlt_tensor *x, dlt_tensor *s, double alpha, dlt_tensor **out) {
    static const char *F = "dlt_mul_scalar";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_float(x, F, "x"));
    if (s) {
        DLT_CHECK(dlt__check_tensor(s, F, "s"));
        DLT_CHECK(dlt__check_same_ctx(x, s, F, "x", "s"));
        if (s->dtype != DLT_F32)
            return dlt__err(DLT_ERR_DTYPE, F, "s must be an f32 tensor, got %s", dlt_dtype_name(s->dtype));
        if (s->numel != 1)
            return dlt__err(DLT_ERR_SHAPE, F, "s must have one element, got %lld", (long long)s->numel);
    }
    dlt_ctx *ctx = x->ctx;
    dlt_tensor *y = NULL;
    dlt_node *node = NULL;
    DLT_CHECK(new_like(x, x->dtype, F, &y));
    dlt_status st = x->numel ? ctx->be->scale(ctx, y, x, s, alpha) : DLT_OK;
    if (st == DLT_OK) st = dlt__record(ctx, "mul_scalar", mul_scalar_backward, &x, 1, &y, 1, &node);
    if (st == DLT_OK && node) {
        if (s) dlt__save(node, s);
        scale_attr at = {alpha};
        DLT_SET_ATTR(node, scale_attr, at);
    }
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

/* ---- sum / mean ---- */

typedef struct sum_attr {
    int32_t ndim, dtype, format, pad_;
    int64_t shape[DLT_MAX_DIMS]; /* of x */
    double alpha;
} sum_attr;

static dlt_status reduce_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *dx = NULL;
    const sum_attr *at = DLT_NODE_ATTR(n, sum_attr);
    DLT_CHECK(dlt__tensor_new(ctx, at->dtype, at->shape, at->ndim, at->format, "dlt_backward(sum)",
                              &dx));
    dlt_status st = dx->numel ? ctx->be->broadcast_scalar(ctx, dx, gout[0], at->alpha) : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

static dlt_status reduce(dlt_tensor *x, int mean, dlt_tensor **out, const char *F) {
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_float(x, F, "x"));
    dlt_ctx *ctx = x->ctx;
    dlt_tensor *y = NULL;
    dlt_node *node = NULL;
    double alpha = mean ? (x->numel ? 1.0 / (double)x->numel : 0.0) : 1.0;
    DLT_CHECK(dlt__tensor_new(ctx, x->dtype, NULL, 0, DLT_FORMAT_CONTIGUOUS, F, &y));
    dlt_status st;
    if (x->numel) {
        st = ctx->be->sum(ctx, y, x, alpha);
    } else { /* PyTorch: sum of nothing is 0, mean of nothing is NaN */
        st = ctx->be->fill(ctx, y, mean ? (double)NAN : 0.0);
    }
    if (st == DLT_OK) st = dlt__record(ctx, mean ? "mean" : "sum", reduce_backward, &x, 1, &y, 1, &node);
    if (st == DLT_OK && node) {
        sum_attr at = {x->ndim, x->dtype, x->format, 0, {0}, alpha};
        for (int32_t i = 0; i < x->ndim; i++) at.shape[i] = x->shape[i];
        DLT_SET_ATTR(node, sum_attr, at);
    }
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt_sum(dlt_tensor *x, dlt_tensor **out) { return reduce(x, 0, out, "dlt_sum"); }
dlt_status dlt_mean(dlt_tensor *x, dlt_tensor **out) { return reduce(x, 1, out, "dlt_mean"); }

/* ---- cast and format change (differentiable) ---- */

dlt_status dlt__convert_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = n->ctx;
    const int32_t dtype = DLT_NODE_ATTR(n, convert_attr)->dtype;
    const int32_t format = DLT_NODE_ATTR(n, convert_attr)->format;
    dlt_tensor *g = gout[0];
    if (g->dtype == dtype && g->format == format) return dlt__grad_slot_store(ctx, &gin[0], dlt_tensor_retain(g));
    /* A leaf destination converts while accumulating: no intermediate tensor. */
    if (gin[0].dst && gin[0].dst->format == g->format) return dlt__grad_slot_store(ctx, &gin[0], dlt_tensor_retain(g));
    if (dlt__side_holds(ctx, g)) DLT_CHECK(dlt__side_join(ctx)); /* run_node left it to us */
    dlt_tensor *dx = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, dtype, g->shape, g->ndim, format, "dlt_backward(cast)", &dx));
    dlt_status st = dx->numel ? ctx->be->convert(ctx, dx, g) : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

static dlt_status convert_op(dlt_tensor *x, int32_t dtype, int32_t format, const char *name,
                             const char *func, dlt_tensor **out) {
    dlt_ctx *ctx = x->ctx;
    if (x->dtype == dtype && x->format == format) {
        *out = dlt_tensor_retain(x);
        return DLT_OK;
    }
    dlt_tensor *y = NULL;
    dlt_node *node = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, dtype, x->shape, x->ndim, format, func, &y));
    dlt_status st = x->numel ? ctx->be->convert(ctx, y, x) : DLT_OK;
    if (st == DLT_OK && dlt__is_float(x->dtype) && dlt__is_float(dtype))
        st = dlt__record(ctx, name, dlt__convert_backward, &x, 1, &y, 1, &node);
    if (st == DLT_OK && node) {
        convert_attr at = {x->dtype, x->format};
        DLT_SET_ATTR(node, convert_attr, at);
        node->hands_on = 1; /* dlt__convert_backward */
    }
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, func);
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt__op_cast(dlt_tensor *x, int32_t dtype, const char *func, dlt_tensor **out) {
    return convert_op(x, dtype, x->format, "cast", func, out);
}

dlt_status dlt__op_to_format(dlt_tensor *x, int32_t format, const char *func, dlt_tensor **out) {
    return convert_op(x, x->dtype, format, "to_format", func, out);
}

dlt_status dlt_cast(dlt_tensor *x, int32_t dtype, dlt_tensor **out) {
    static const char *F = "dlt_cast";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    if (dtype < 0 || dtype > DLT_U8) return dlt__err(DLT_ERR_DTYPE, F, "unknown dtype %d", dtype);
    return dlt__op_cast(x, dtype, F, out);
}
