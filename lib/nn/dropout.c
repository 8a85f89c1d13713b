/*
 * dropout.c - the Dropout and GELU module kinds (nn.Dropout, nn.GELU): no state; dropout
 * acts in training mode only (the module's flag), GELU in its exact or tanh form.
 */
#include <stdio.h>

#include "nn_internal.h"

typedef struct dropout_attrs {
    double p;
} dropout_attrs;

static dlt_status dropout_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out,
                                  int32_t n_out) {
    (void)n_in, (void)n_out;
    return dlt_dropout(in[0], DLT__IMPL(m, dropout_attrs)->p, m->training, &out[0]);
}

static int dropout_describe(const dlt_module *m, char *buf, size_t n) {
    return snprintf(buf, n, "p=%g, inplace=False", DLT__IMPL(m, dropout_attrs)->p);
}

static const dlt__module_kind dropout_kind = {
    .name = "dropout",
    .impl_size = sizeof(dropout_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = dropout_forward,
    .describe = dropout_describe,
};

dlt_status dlt__dropout_new(dlt_ctx *ctx, double p, const char *func, dlt_module **out) {
    if (!(p >= 0.0 && p <= 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "dropout probability %g is not in [0, 1]", p);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, &dropout_kind, func, &m));
    DLT__IMPL(m, dropout_attrs)->p = p;
    *out = m;
    return DLT_OK;
}

dlt_status dlt_dropout_create(dlt_ctx *ctx, double p, dlt_module **out) {
    static const char *F = "dlt_dropout_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__dropout_new(ctx, p, F, out);
}

typedef struct gelu_attrs {
    int32_t approximate;
} gelu_attrs;

static dlt_status gelu_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out, int32_t n_out) {
    (void)n_in, (void)n_out;
    return dlt_gelu(in[0], DLT__IMPL(m, gelu_attrs)->approximate, &out[0]);
}

static int gelu_describe(const dlt_module *m, char *buf, size_t n) {
    return snprintf(buf, n, "approximate='%s'", DLT__IMPL(m, gelu_attrs)->approximate ? "tanh" : "none");
}

static const dlt__module_kind gelu_kind = {
    .name = "gelu",
    .impl_size = sizeof(gelu_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = gelu_forward,
    .describe = gelu_describe,
};

dlt_status dlt_gelu_create(dlt_ctx *ctx, int32_t approximate, dlt_module **out) {
    static const char *F = "dlt_gelu_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    if (approximate != DLT_GELU_NONE && approximate != DLT_GELU_TANH)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "approximate must be DLT_GELU_NONE or DLT_GELU_TANH, got %d",
                        approximate);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, &gelu_kind, F, &m));
    DLT__IMPL(m, gelu_attrs)->approximate = approximate;
    *out = m;
    return DLT_OK;
}
