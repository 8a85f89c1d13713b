/*
 * pool.c - front doors of max_pool2d and the global (1x1 adaptive) average pool.
 *
 * max_pool2d: floor mode, no dilation, padding <= kernel/2 (PyTorch's rule), padding acts as
 * -inf; the first maximum in window scan order wins and NaN propagates. The forward keeps
 * the argmax of every output (i32, h*W+w) for the backward, which routes dy there.
 * global_avg_pool2d: y[n,c] = mean over (H,W), accumulated in fp32; dx = dy / (H*W).
 */
#include "ops_internal.h"

typedef struct maxpool_attr {
    dlt_pool_params p;
    int64_t x_shape[4];
} maxpool_attr;

typedef struct gavg_attr {
    int64_t x_shape[4];
    int32_t x_format;
    int32_t pad_;
} gavg_attr;

static dlt_status maxpool_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *idx = n->saved[0], *dx = NULL;
    const maxpool_attr *at = DLT_NODE_ATTR(n, maxpool_attr);
    const dlt_pool_params p = at->p;
    DLT_CHECK(dlt__tensor_new(ctx, gout[0]->dtype, at->x_shape, 4, gout[0]->format,
                              "dlt_backward(max_pool2d)", &dx));
    /* an empty batch or no channel: nothing to route (kernels assume numel > 0) */
    dlt_status st = dx->numel ? ctx->be->maxpool_bwd(ctx, dx, gout[0], idx, &p) : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

dlt_status dlt_max_pool2d(dlt_tensor *x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                          int64_t stride_w, int64_t pad_h, int64_t pad_w, dlt_tensor **out) {
    static const char *F = "dlt_max_pool2d";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_ndim(x, 4, F, "x"));
    DLT_CHECK(dlt__check_float(x, F, "x"));
    if (kernel_h < 1 || kernel_w < 1 || stride_h < 1 || stride_w < 1 || pad_h < 0 || pad_w < 0 ||
        pad_h > kernel_h / 2 || pad_w > kernel_w / 2)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "kernel (%lld,%lld) and stride (%lld,%lld) must be >= 1 and padding "
                        "(%lld,%lld) between 0 and half the kernel",
                        (long long)kernel_h, (long long)kernel_w, (long long)stride_h,
                        (long long)stride_w, (long long)pad_h, (long long)pad_w);
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t hp, wp; /* padding <= kernel / 2, so 2 * padding fits; the sum may not */
    if (dlt__add_ovf(H, 2 * pad_h, &hp) || dlt__add_ovf(W, 2 * pad_w, &wp))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "padding (%lld,%lld) is too large: the size arithmetic overflows",
                        (long long)pad_h, (long long)pad_w);
    if (hp < kernel_h || wp < kernel_w) {
        char b[96];
        return dlt__err(DLT_ERR_SHAPE, F, "the %lldx%lld window does not fit the padded input %s",
                        (long long)kernel_h, (long long)kernel_w, dlt__shape_str(x, b, sizeof b));
    }
    const int64_t P = (hp - kernel_h) / stride_h + 1;
    const int64_t Q = (wp - kernel_w) / stride_w + 1;
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, maxpool_fwd, F);
    const int64_t ys[4] = {N, C, P, Q};
    dlt_tensor *y = NULL, *idx = NULL;
    dlt_node *node = NULL;
    dlt_pool_params p = {{kernel_h, kernel_w}, {stride_h, stride_w}, {pad_h, pad_w}};
    dlt_status st = DLT_OK;
    dlt__range_push(ctx, "max_pool2d");
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, x->dtype, ys, 4, x->format, F, &y), done);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_I32, ys, 4, x->format, F, &idx), done);
    if (y->numel) DLT_CHECK_GOTO(st, ctx->be->maxpool_fwd(ctx, y, idx, x, &p), done);
    DLT_CHECK_GOTO(st, dlt__record(ctx, "max_pool2d", maxpool_backward, &x, 1, &y, 1, &node), done);
    if (node) {
        dlt__save(node, idx);
        maxpool_attr at = {p, {x->shape[0], x->shape[1], x->shape[2], x->shape[3]}};
        DLT_SET_ATTR(node, maxpool_attr, at);
    }
done:
    dlt__range_pop(ctx);
    dlt_tensor_release(idx);
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}

static dlt_status gavg_backward(dlt_node *n, dlt_tensor *const *gout, dlt_grad_slot *gin) {
    dlt_ctx *ctx = n->ctx;
    dlt_tensor *dx = NULL;
    const gavg_attr *at = DLT_NODE_ATTR(n, gavg_attr);
    DLT_CHECK(dlt__tensor_new(ctx, gout[0]->dtype, at->x_shape, 4, at->x_format,
                              "dlt_backward(global_avg_pool2d)", &dx));
    dlt_status st = dx->numel ? ctx->be->gavgpool_bwd(ctx, dx, gout[0]) : DLT_OK;
    if (st != DLT_OK) {
        dlt_tensor_release(dx);
        return st;
    }
    return dlt__grad_slot_store(ctx, &gin[0], dx);
}

dlt_status dlt_global_avg_pool2d(dlt_tensor *x, dlt_tensor **out) {
    static const char *F = "dlt_global_avg_pool2d";
    DLT_CHECK(dlt__check_tensor(x, F, "x"));
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__check_ndim(x, 4, F, "x"));
    DLT_CHECK(dlt__check_float(x, F, "x"));
    if (x->shape[2] == 0 || x->shape[3] == 0) {
        char b[96];
        return dlt__err(DLT_ERR_SHAPE, F, "x %s has an empty spatial map", dlt__shape_str(x, b, sizeof b));
    }
    dlt_ctx *ctx = x->ctx;
    DLT_NEED_KERNEL(ctx, gavgpool_fwd, F);
    const int64_t ys[4] = {x->shape[0], x->shape[1], 1, 1};
    dlt_tensor *y = NULL;
    dlt_node *node = NULL;
    dlt_status st = dlt__tensor_new(ctx, x->dtype, ys, 4, x->format, F, &y);
    if (st == DLT_OK && y->numel) st = ctx->be->gavgpool_fwd(ctx, y, x);
    if (st == DLT_OK) st = dlt__record(ctx, "global_avg_pool2d", gavg_backward, &x, 1, &y, 1, &node);
    if (st == DLT_OK && node) {
        gavg_attr at = {{x->shape[0], x->shape[1], x->shape[2], x->shape[3]}, x->format, 0};
        DLT_SET_ATTR(node, gavg_attr, at);
    }
    if (st != DLT_OK) {
        dlt_tensor_release(y);
        return dlt__err_wrap(st, F);
    }
    *out = y;
    return DLT_OK;
}
