/*
 * flatten.c - the Flatten module kind (start_dim=1, end_dim=-1; no state), run by
 * dlt_flatten (lib/ops/shape.c).
 */
#include <stdio.h>

#include "nn_internal.h"

static dlt_status flatten_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                                  dlt_tensor **out, int32_t n_out) {
    (void)m, (void)n_in, (void)n_out;
    return dlt_flatten(in[0], 1, -1, &out[0]);
}

static int flatten_describe(const dlt_module *m, char *buf, size_t n) {
    (void)m;
    return snprintf(buf, n, "start_dim=1, end_dim=-1");
}

static const dlt__module_kind flatten_kind = {
    .name = "flatten",
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = flatten_forward,
    .describe = flatten_describe,
};

dlt_status dlt_flatten_create(dlt_ctx *ctx, dlt_module **out) {
    static const char *F = "dlt_flatten_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__module_new(ctx, &flatten_kind, F, out);
}
