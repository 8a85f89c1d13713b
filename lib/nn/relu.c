/*
 * relu.c - the ReLU module kind (no state), run by dlt_relu. A Sequential fuses a kind with
 * a forward_relu hook followed by this kind into one call (sequential.c).
 */
#include "nn_internal.h"

static dlt_status relu_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                               dlt_tensor **out, int32_t n_out) {
    (void)m, (void)n_in, (void)n_out;
    return dlt_relu(in[0], &out[0]);
}

const dlt__module_kind dlt__kind_relu = {
    .name = "relu",
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = relu_forward,
};

dlt_status dlt_relu_create(dlt_ctx *ctx, dlt_module **out) {
    static const char *F = "dlt_relu_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__module_new(ctx, &dlt__kind_relu, F, out);
}
