/*
 * shape.c - reshape and flatten. Results are views sharing the input's storage whenever the
 * input's memory order is the contiguous order (always for contiguous tensors; for
 * channels-last when H*W == 1 or C == 1, e.g. ResNet's [N,2048,1,1] before the classifier);
 * otherwise the input is first converted to the contiguous format (a differentiable copy).
 * Backward reshapes the gradient back (a view) into the input's shape and format.
 */
#include "ops_internal.h"

static int cl_is_contiguous_order(const dlt_tensor *x) {
    return x->format != DLT_FORMAT_CHANNELS_LAST || (x->shape[2] == 1 && x->shape[3] == 1) ||
           x->shape[1] == 1 || x->numel == 0;
}

/* the source's shape and format, which the gradient takes back */
typedef struct reshape_attr {
    int32_t ndim, format;
    int64_t shape[DLT_MAX_DIMS];
} reshape_attr;

static dlt_status reshape_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = n->ctx;
    const reshape_attr *at = DLT_NODE_ATTR(n, reshape_attr);
    const int32_t ndim = at->ndim, format = at->format;
    const int64_t *shape = at->shape;
    dlt_tensor *g = gout[0], *src = g, *tmp = NULL, *dx = NULL;
    if (g->format != DLT_FORMAT_CONTIGUOUS) { /* views need the contiguous order */
        DLT_CHECK(dlt__tensor_new(ctx, g->dtype, g->shape, g->ndim, DLT_FORMAT_CONTIGUOUS,
                                  "dlt_backward(reshape)", &tmp));
        dlt_status st = tmp->numel ? ctx->be->convert(ctx, tmp, g) : DLT_OK;
        if (st != DLT_OK) {
            dlt_tensor_release(tmp);
            return st;
        }
        src = tmp;
    }
    /* The input's format was contiguous or channels-last with contiguous order, so the
     * same bytes are the gradient in the input's format. */
    dlt_status st = dlt__tensor_view(src, shape, ndim, format, "dlt_backward(reshape)", &dx);
    dlt_tensor_release(tmp);
    if (st != DLT_OK) return st;
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

dlt_status dlt_reshape(dlt_tensor *x, const int64_t *shape, int32_t ndim, dlt_tensor **out) {
    static const char *F = "dlt_reshape";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    if (ndim < 0 || ndim > DLT_MAX_DIMS)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "ndim %d is outside 0..%d", ndim, DLT_MAX_DIMS);
    if (ndim > 0) DLT_NULL_CHECK(shape, F);
    int64_t s[DLT_MAX_DIMS], known = 1;
    int32_t infer = -1;
    for (int32_t i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1) {
            if (infer >= 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "only one size may be -1");
            infer = i;
        } else if (s[i] < 0) {
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "size %lld at dimension %d is negative",
                            (long long)s[i], i);
        } else {
            if (s[i] != 0 && known > INT64_MAX / s[i])
                return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the element count overflows");
            known *= s[i];
        }
    }
    if (infer >= 0) {
        if (known == 0 || x->numel % known != 0)
            return dlt__err(DLT_ERR_SHAPE, F, "cannot infer size -1: %lld elements do not divide by %lld",
                            (long long)x->numel, (long long)known);
        s[infer] = x->numel / known;
        known *= s[infer];
    }
    if (known != x->numel) {
        char b[96];
        return dlt__err(DLT_ERR_SHAPE, F, "cannot view shape %s (%lld elements) with %lld elements",
                        dlt__shape_str(x, b, sizeof b), (long long)x->numel, (long long)known);
    }
    dlt_ctx *ctx = x->ctx;
    dlt_tensor *src = NULL, *y = NULL;
    dlt_node *node = NULL;
    if (cl_is_contiguous_order(x)) {
        src = dlt_tensor_retain(x);
    } else {
        DLT_CHECK(dlt__op_to_format(x, DLT_FORMAT_CONTIGUOUS, F, &src));
    }
    dlt_status st = dlt__tensor_view(src, s, ndim, DLT_FORMAT_CONTIGUOUS, F, &y);
    if (st == DLT_OK) st = dlt__record(ctx, "reshape", reshape_backward, &src, 1, &y, 1, &node);
    if (st == DLT_OK && node) {
        reshape_attr at = {src->ndim, src->format, {0}};
        for (int32_t i = 0; i < src->ndim; i++) at.shape[i] = src->shape[i];
        DLT_SET_ATTR(node, reshape_attr, at);
    }
    dlt_tensor_release(src);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

dlt_status dlt_flatten(dlt_tensor *x, int32_t start_dim, int32_t end_dim, dlt_tensor **out) {
    static const char *F = "dlt_flatten";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    int32_t nd = x->ndim > 0 ? x->ndim : 1;
    int32_t s0 = start_dim < 0 ? start_dim + nd : start_dim;
    int32_t e0 = end_dim < 0 ? end_dim + nd : end_dim;
    if (s0 < 0 || s0 >= nd || e0 < 0 || e0 >= nd || s0 > e0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "start_dim %d and end_dim %d do not select a range of a %d-D tensor",
                        start_dim, end_dim, x->ndim);
    if (x->ndim == 0) return dlt_reshape(x, (const int64_t[]){1}, 1, out);
    int64_t shape[DLT_MAX_DIMS];
    int32_t k = 0;
    for (int32_t i = 0; i < s0; i++) shape[k++] = x->shape[i];
    int64_t prod = 1;
    for (int32_t i = s0; i <= e0; i++)
        if (dlt__mul_ovf(prod, x->shape[i], &prod)) /* only an empty tensor gets here */
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "flattening dimensions %d..%d of a %d-D tensor overflows int64", s0, e0,
                            x->ndim);
    shape[k++] = prod;
    for (int32_t i = e0 + 1; i < x->ndim; i++) shape[k++] = x->shape[i];
    dlt_status st = dlt_reshape(x, shape, k, out);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}
