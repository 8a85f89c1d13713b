/*
 * pool.c - the pooling module kinds (no state), run by the ops of lib/ops/pool.c:
 * MaxPool2d(kernel, stride, padding) with square windows, and AdaptiveAvgPool2d((1, 1))
 * as "global_avg_pool2d".
 */
#include <stdio.h>

#include "nn_internal.h"

typedef struct pool_attrs {
    int64_t kernel, stride, pad;
} pool_attrs;

static dlt_status max_pool_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                                   dlt_tensor **out, int32_t n_out) {
    (void)n_in, (void)n_out;
    const pool_attrs *a = DLT__IMPL(m, pool_attrs);
    return dlt_max_pool2d(in[0], a->kernel, a->kernel, a->stride, a->stride, a->pad, a->pad,
                          &out[0]);
}

static int max_pool_describe(const dlt_module *m, char *buf, size_t n) {
    const pool_attrs *a = DLT__IMPL(m, pool_attrs);
    return snprintf(buf, n, "kernel_size=%lld, stride=%lld, padding=%lld", (long long)a->kernel,
                    (long long)a->stride, (long long)a->pad);
}

static const dlt__module_kind max_pool2d_kind = {
    .name = "max_pool2d",
    .impl_size = sizeof(pool_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = max_pool_forward,
    .describe = max_pool_describe,
};

dlt_status dlt__max_pool2d_new(dlt_ctx *ctx, int64_t kernel, int64_t stride, int64_t padding,
                               const char *func, dlt_module **out) {
    if (kernel < 1 || stride < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "kernel (%lld) and stride (%lld) must be >= 1",
                        (long long)kernel, (long long)stride);
    if (padding < 0 || padding > kernel / 2)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "padding %lld must be between 0 and half the kernel (%lld)",
                        (long long)padding, (long long)kernel);
    DLT_CHECK(dlt__module_new(ctx, &max_pool2d_kind, func, out));
    pool_attrs *a = DLT__IMPL(*out, pool_attrs);
    a->kernel = kernel;
    a->stride = stride;
    a->pad = padding;
    return DLT_OK;
}

dlt_status dlt_max_pool2d_create(dlt_ctx *ctx, int64_t kernel, int64_t stride, int64_t padding,
                                 dlt_module **out) {
    static const char *F = "dlt_max_pool2d_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__max_pool2d_new(ctx, kernel, stride, padding, F, out);
}

static dlt_status gavg_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                               dlt_tensor **out, int32_t n_out) {
    (void)m, (void)n_in, (void)n_out;
    return dlt_global_avg_pool2d(in[0], &out[0]);
}

static int gavg_describe(const dlt_module *m, char *buf, size_t n) {
    (void)m;
    return snprintf(buf, n, "output_size=(1, 1)");
}

const dlt__module_kind dlt__kind_global_avg_pool2d = {
    .name = "global_avg_pool2d",
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = gavg_forward,
    .describe = gavg_describe,
};

dlt_status dlt_global_avg_pool2d_create(dlt_ctx *ctx, dlt_module **out) {
    static const char *F = "dlt_global_avg_pool2d_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__module_new(ctx, &dlt__kind_global_avg_pool2d, F, out);
}
