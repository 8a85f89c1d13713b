/*
 * linear.c - the Linear module kind: "weight" [out, in] and an optional "bias" [out], run
 * by dlt_linear (lib/ops/linear.c). Initialisation is nn.Linear's: kaiming_uniform_(a=sqrt(5))
 * gives weight U(-1/sqrt(in), 1/sqrt(in)), and the bias uses the same bound.
 */
#include <math.h>
#include <stdio.h>

#include "../core/options.h"
#include "nn_internal.h"

typedef struct linear_attrs {
    int32_t bias;
} linear_attrs;

static dlt_status linear_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                                 dlt_tensor **out, int32_t n_out) {
    (void)n_in, (void)n_out;
    return dlt_linear(in[0], m->state[0].t, DLT__IMPL(m, linear_attrs)->bias ? m->state[1].t : NULL,
                      &out[0]);
}

static int linear_describe(const dlt_module *m, char *buf, size_t n) {
    const int64_t *ws = m->state[0].t->shape;
    return snprintf(buf, n, "in_features=%lld, out_features=%lld, bias=%s", (long long)ws[1],
                    (long long)ws[0], DLT__IMPL(m, linear_attrs)->bias ? "True" : "False");
}

static const dlt__module_kind linear_kind = {
    .name = "linear",
    .impl_size = sizeof(linear_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = linear_forward,
    .describe = linear_describe,
};

dlt_status dlt__linear_new(dlt_ctx *ctx, int64_t in, int64_t out_features, int32_t bias,
                           const char *func, dlt_module **out) {
    if (in < 1 || out_features < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "features must be >= 1, got in=%lld out=%lld",
                        (long long)in, (long long)out_features);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, &linear_kind, func, &m));
    DLT__IMPL(m, linear_attrs)->bias = bias != 0;
    const double bound = 1.0 / sqrt((double)in);
    const int64_t ws[2] = {out_features, in};
    dlt_status st = dlt__module_add_new_state(m, "weight", ws, 2, DLT_F32, DLT__INIT_UNIFORM, bound,
                                              1, func);
    if (st == DLT_OK && bias)
        st = dlt__module_add_new_state(m, "bias", &out_features, 1, DLT_F32, DLT__INIT_UNIFORM,
                                       bound, 1, func);
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return st;
    }
    *out = m;
    return DLT_OK;
}

dlt_status dlt_linear_create(dlt_ctx *ctx, int64_t in_features, int64_t out_features,
                             int32_t bias, dlt_module **out) {
    static const char *F = "dlt_linear_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__linear_new(ctx, in_features, out_features, bias, F, out);
}

static const dlt_linear_options LINEAR_DEFAULTS = {.size = sizeof(dlt_linear_options), .bias = 1};
/* the first release's struct ends after bias */
#define LINEAR_OPTIONS_V1 DLT__FIELD_END(dlt_linear_options, bias)

void dlt_linear_options_init(dlt_linear_options *o, uint32_t size) {
    dlt__options_fill(o, size, &LINEAR_DEFAULTS, sizeof LINEAR_DEFAULTS, LINEAR_OPTIONS_V1);
}

dlt_status dlt_linear_create_ex(dlt_ctx *ctx, int64_t in_features, int64_t out_features,
                                const dlt_linear_options *o, dlt_module **out) {
    static const char *F = "dlt_linear_create_ex";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    dlt_linear_options opt = LINEAR_DEFAULTS;
    DLT_CHECK(dlt__options_read(&opt, sizeof opt, o, LINEAR_OPTIONS_V1, "dlt_linear_options", F));
    return dlt__linear_new(ctx, in_features, out_features, opt.bias, F, out);
}
