/*
 * reduce.c - front doors of the reductions over chosen dimensions: sum, mean and amax
 * (PyTorch's torch.sum/mean/amax(x, dim, keepdim)) and argmax(x, dim, keepdim).
 *
 * dims: a list of distinct dimensions (negative counts from the end); an empty list reduces
 * every dimension. keepdim keeps reduced dimensions with size 1. Sums accumulate in fp32 on
 * CUDA (double on the CPU) and are rounded once to the result dtype, which is the input's
 * (sum is on autocast's fp32 list: in an autocast region a low-precision input is cast up
 * first). mean of an empty reduction is NaN, sum 0, amax an error (as PyTorch).
 *
 * Gradients: sum/mean broadcast u (times 1/n for mean) back over the reduced dimensions;
 * amax splits u evenly between the elements equal to the maximum (PyTorch's rule); argmax
 * has none.
 */
#include <math.h>
#include <string.h>

#include "ops_internal.h"

typedef struct reduce_attr {
    int32_t op;     /* DLT_RED_SUM (sum, mean) or DLT_RED_MAX */
    int32_t ndim;   /* of the input */
    int32_t dtype;  /* of the input */
    int32_t pad_;
    double alpha;   /* 1, or 1/n for mean */
    int32_t reduced[DLT_MAX_DIMS];
    int64_t shape[DLT_MAX_DIMS];
} reduce_attr;

static dlt_status parse_dims(const dlt_tensor *x, const int32_t *dims, int32_t n, const char *F,
                             int32_t *reduced) {
    memset(reduced, 0, DLT_MAX_DIMS * sizeof *reduced);
    if (n < 0 || n > DLT_MAX_DIMS)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n_dims %d is outside 0..%d", n, DLT_MAX_DIMS);
    if (n > 0 && !dims) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'dims' is NULL");
    if (n == 0) {
        for (int32_t d = 0; d < x->ndim; d++) reduced[d] = 1;
        return DLT_OK;
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t d;
        DLT_CHECK(dlt__norm_dim(dims[i], x->ndim, F, &d));
        if (x->ndim == 0) continue; /* dim 0 / -1 of a scalar: nothing to reduce */
        if (reduced[d]) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "dimension %d appears twice in dims", dims[i]);
        reduced[d] = 1;
    }
    return DLT_OK;
}

/* Result shape for keepdim. */
static int32_t out_shape(const dlt_tensor *x, const int32_t *reduced, int32_t keepdim, int64_t *shape) {
    int32_t k = 0;
    for (int32_t d = 0; d < x->ndim; d++) {
        if (!reduced[d]) shape[k++] = x->shape[d];
        else if (keepdim) shape[k++] = 1;
    }
    return k;
}

/* u (kept shape, any keepdim) viewed with x's rank: reduced dims of size 1 (a view). */
static dlt_status expand_map(const reduce_attr *at, const dlt_tensor *u, dlt_nd *s, dlt_nd_operand *o) {
    int64_t kshape[DLT_MAX_DIMS], kstride[DLT_MAX_DIMS];
    (void)u;
    for (int32_t d = 0; d < at->ndim; d++) kshape[d] = at->reduced[d] ? 1 : at->shape[d];
    dlt__contig_strides(kshape, at->ndim, kstride);
    dlt__nd_init(s, at->shape, at->ndim);
    memset(o, 0, sizeof *o);
    for (int32_t d = 0; d < at->ndim; d++) o->stride[d] = at->reduced[d] ? 0 : kstride[d];
    return DLT_OK;
}

static dlt_status reduce_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    static const char *F = "dlt_backward(reduce)";
    dlt_ctx *ctx = n->ctx;
    const reduce_attr *at = DLT_NODE_ATTR(n, reduce_attr);
    dlt_tensor *u = gout[0], *dx = NULL, *g = NULL;
    dlt_nd s;
    dlt_nd_operand od, ou;
    DLT_CHECK(dlt__tensor_new(ctx, u->dtype, at->shape, at->ndim, DLT_FORMAT_CONTIGUOUS, F, &dx));
    dlt_status st = DLT_OK;
    if (dx->numel == 0) return dlt__grad_slot_store(ctx, &gin[0], dx);
    expand_map(at, u, &s, &ou);
    dlt__nd_broadcast_operand(dx, at->shape, at->ndim, &od);
    if (at->op == DLT_RED_SUM) {
        st = dlt__k_copy(ctx, dx, &od, u, &ou, &s);
        if (st == DLT_OK && at->alpha != 1.0) st = ctx->be->scale(ctx, dx, dx, NULL, at->alpha);
    } else {
        /* amax: mask = (x == max), u / count over the tied elements, spread over the mask */
        dlt_tensor *x = n->saved[0], *ymax = n->saved[1], *ymax_full = NULL, *mask = NULL, *cnt = NULL;
        st = dlt__tensor_new(ctx, x->dtype, at->shape, at->ndim, DLT_FORMAT_CONTIGUOUS, F, &ymax_full);
        if (st == DLT_OK) st = dlt__k_copy(ctx, ymax_full, &od, ymax, &ou, &s);
        if (st == DLT_OK) st = dlt__k_binary(ctx, u->dtype, x, ymax_full, DLT_BIN_EQ, 1.0, F, &mask);
        if (st == DLT_OK) {
            int64_t kshape[DLT_MAX_DIMS];
            for (int32_t d = 0; d < at->ndim; d++) kshape[d] = at->reduced[d] ? 1 : at->shape[d];
            st = dlt__k_sum_to(ctx, mask, kshape, at->ndim, u->dtype, F, &cnt);
        }
        if (st == DLT_OK) {
            /* u has the kept shape (with or without keepdim): same element order as cnt */
            dlt_tensor *uv = NULL;
            st = dlt__tensor_view(u, cnt->shape, cnt->ndim, DLT_FORMAT_CONTIGUOUS, F, &uv);
            if (st == DLT_OK) st = dlt__k_binary(ctx, u->dtype, uv, cnt, DLT_BIN_DIV, 1.0, F, &g);
            dlt_tensor_release(uv);
        }
        if (st == DLT_OK) {
            dlt_tensor *t = NULL;
            st = dlt__k_binary(ctx, u->dtype, mask, g, DLT_BIN_MUL, 1.0, F, &t);
            if (st == DLT_OK) {
                dlt_tensor_release(dx);
                dx = t;
            }
        }
        dlt_tensor_release(ymax_full);
        dlt_tensor_release(mask);
        dlt_tensor_release(cnt);
        dlt_tensor_release(g);
    }
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

static dlt_status reduce_op(dlt_tensor *x, const int32_t *dims, int32_t n_dims, int32_t keepdim,
                            int32_t op, int mean, const char *F, const char *name, dlt_tensor **out) {
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_float(x, F, "x"));
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, reduce, F);
    int32_t reduced[DLT_MAX_DIMS];
    DLT_CHECK(parse_dims(x, dims, n_dims, F, reduced));
    int64_t rcount = 1;
    for (int32_t d = 0; d < x->ndim; d++)
        if (reduced[d]) rcount *= x->shape[d];
    if (op == DLT_RED_MAX && rcount == 0 && x->numel == 0) {
        char b[96];
        return dlt__err(DLT_ERR_SHAPE, F, "amax over an empty dimension of %s has no identity",
                        dlt__shape_str(x, b, sizeof b));
    }
    dlt_tensor *xc = NULL, *y = NULL, *alias = NULL;
    dlt_node *node = NULL;
    dlt_status st;
    DLT_CHECK(dlt__contiguous_input(x, F, &xc));
    if (op == DLT_RED_SUM && !mean) {
        dlt_tensor *t = NULL;
        st = dlt__autocast_fp32(xc, F, &t);
        dlt_tensor_release(xc);
        if (st != DLT_OK) return dlt__err_wrap(st, F);
        xc = t;
    }
    int64_t shape[DLT_MAX_DIMS];
    const int32_t ond = out_shape(xc, reduced, keepdim, shape);
    const double alpha = mean ? 1.0 / (double)rcount : 1.0; /* 1/0 = inf: NaN means, as PyTorch */
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, xc->dtype, shape, ond, DLT_FORMAT_CONTIGUOUS, F, &y), done);
    if (y->numel) {
        if (xc->numel == 0) {
            st = ctx->be->fill(ctx, y, mean ? (double)NAN : 0.0);
        } else {
            dlt_reduce_spec r;
            dlt__reduce_spec(xc, reduced, &r);
            st = ctx->be->reduce(ctx, y, xc, &r, op, alpha);
        }
        if (st != DLT_OK) goto done;
    }
    DLT_CHECK_GOTO(st, dlt__record(ctx, name, reduce_backward, &xc, 1, &y, 1, &node), done);
    if (node) {
        reduce_attr at = {.op = op, .ndim = xc->ndim, .dtype = xc->dtype, .alpha = alpha};
        for (int32_t d = 0; d < xc->ndim; d++) {
            at.reduced[d] = reduced[d];
            at.shape[d] = xc->shape[d];
        }
        DLT_SET_ATTR(node, reduce_attr, at);
        if (op == DLT_RED_MAX) {
            DLT_CHECK_GOTO(st, dlt__alias(y, F, &alias), done);
            dlt__save(node, xc);
            dlt__save(node, alias);
        }
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

dlt_status dlt_sum_dims(dlt_tensor *x, const int32_t *dims, int32_t n_dims, int32_t keepdim,
                        dlt_tensor **out) {
    return reduce_op(x, dims, n_dims, keepdim, DLT_RED_SUM, 0, "dlt_sum_dims", "sum", out);
}
dlt_status dlt_mean_dims(dlt_tensor *x, const int32_t *dims, int32_t n_dims, int32_t keepdim,
                         dlt_tensor **out) {
    return reduce_op(x, dims, n_dims, keepdim, DLT_RED_SUM, 1, "dlt_mean_dims", "mean", out);
}
dlt_status dlt_amax(dlt_tensor *x, const int32_t *dims, int32_t n_dims, int32_t keepdim,
                    dlt_tensor **out) {
    return reduce_op(x, dims, n_dims, keepdim, DLT_RED_MAX, 0, "dlt_amax", "amax", out);
}

dlt_status dlt_argmax(dlt_tensor *x, int32_t dim, int32_t keepdim, dlt_tensor **out) {
    static const char *F = "dlt_argmax";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_float(x, F, "x"));
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, reduce, F);
    int32_t d;
    DLT_CHECK(dlt__norm_dim(dim, x->ndim, F, &d));
    int32_t reduced[DLT_MAX_DIMS] = {0};
    if (x->ndim > 0) {
        reduced[d] = 1;
        if (x->shape[d] == 0) {
            char b[96];
            return dlt__err(DLT_ERR_SHAPE, F, "argmax over dimension %d of %s, which is empty", dim,
                            dlt__shape_str(x, b, sizeof b));
        }
    }
    dlt_tensor *xc = NULL, *y = NULL;
    DLT_CHECK(dlt__contiguous_input(x, F, &xc));
    int64_t shape[DLT_MAX_DIMS];
    const int32_t ond = out_shape(xc, reduced, keepdim, shape);
    dlt_status st = dlt__tensor_new(ctx, DLT_I64, shape, ond, DLT_FORMAT_CONTIGUOUS, F, &y);
    if (st == DLT_OK && y->numel) {
        dlt_reduce_spec r;
        dlt__reduce_spec(xc, reduced, &r);
        st = ctx->be->reduce(ctx, y, xc, &r, DLT_RED_ARGMAX, 1.0);
    }
    dlt_tensor_release(xc);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}
