/*
 * layer_norm.c - the LayerNorm module kind (nn.LayerNorm over the last dimension):
 * "weight" ones and "bias" zeros [normalized_shape] when elementwise_affine (bias optional,
 * as PyTorch's bias=False and nanoGPT's LayerNorm(bias=False)), run by dlt_layer_norm.
 */
#include <stdio.h>

#include "nn_internal.h"

typedef struct layernorm_attrs {
    int64_t dim;
    double eps;
    int32_t weight, bias;
} layernorm_attrs;

static dlt_status layernorm_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in, dlt_tensor **out,
                                    int32_t n_out) {
    (void)n_in, (void)n_out;
    const layernorm_attrs *a = DLT__IMPL(m, layernorm_attrs);
    dlt_tensor *w = a->weight ? m->state[0].t : NULL, *b = a->bias ? m->state[a->weight].t : NULL;
    return dlt_layer_norm(in[0], &a->dim, 1, w, b, a->eps, &out[0]);
}

static int layernorm_describe(const dlt_module *m, char *buf, size_t n) {
    const layernorm_attrs *a = DLT__IMPL(m, layernorm_attrs);
    return snprintf(buf, n, "(%lld,), eps=%g, elementwise_affine=%s%s", (long long)a->dim, a->eps,
                    a->weight ? "True" : "False", a->weight && !a->bias ? ", bias=False" : "");
}

static const dlt__module_kind layernorm_kind = {
    .name = "layer_norm",
    .impl_size = sizeof(layernorm_attrs),
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = layernorm_forward,
    .describe = layernorm_describe,
};

dlt_status dlt__layernorm_forward_to(dlt_module *m, dlt_tensor *x, int32_t dtype, dlt_tensor **out) {
    if (m->kind != &layernorm_kind) return dlt__module_forward(m, x, out);
    const layernorm_attrs *a = DLT__IMPL(m, layernorm_attrs);
    dlt_tensor *w = a->weight ? m->state[0].t : NULL, *b = a->bias ? m->state[a->weight].t : NULL;
    *out = NULL;
    return dlt_layer_norm_to(x, &a->dim, 1, w, b, a->eps, dtype, out);
}

dlt_status dlt__layernorm_add_forward_to(dlt_module *m, dlt_tensor *x, dlt_tensor *b, int32_t dtype, dlt_tensor **sum,
                                        dlt_tensor **out) {
    *sum = *out = NULL;
    if (m->kind != &layernorm_kind) return DLT_OK;
    const layernorm_attrs *a = DLT__IMPL(m, layernorm_attrs);
    dlt_tensor *w = a->weight ? m->state[0].t : NULL, *bias = a->bias ? m->state[a->weight].t : NULL;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != a->dim) return DLT_OK;
    return dlt__add_layer_norm_to(x, b, w, bias, a->eps, dtype, sum, out);
}

dlt_status dlt__layernorm_new(dlt_ctx *ctx, int64_t dim, double eps, int32_t affine, int32_t bias, const char *func,
                              dlt_module **out) {
    if (dim < 1) return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "normalized size %lld must be >= 1", (long long)dim);
    if (!(eps >= 0.0)) return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "eps %g must be >= 0", eps);
    dlt_module *m = NULL;
    DLT_CHECK(dlt__module_new(ctx, &layernorm_kind, func, &m));
    layernorm_attrs *a = DLT__IMPL(m, layernorm_attrs);
    a->dim = dim;
    a->eps = eps;
    a->weight = affine != 0;
    a->bias = affine && bias;
    dlt_status st = DLT_OK;
    if (a->weight) st = dlt__module_add_new_state(m, "weight", &dim, 1, DLT_F32, DLT__INIT_ONES, 0.0, 1, func);
    if (st == DLT_OK && a->bias) st = dlt__module_add_new_state(m, "bias", &dim, 1, DLT_F32, DLT__INIT_ZEROS, 0.0, 1, func);
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return st;
    }
    *out = m;
    return DLT_OK;
}

dlt_status dlt_layernorm_create(dlt_ctx *ctx, int64_t normalized_size, double eps, int32_t elementwise_affine,
                                int32_t bias, dlt_module **out) {
    static const char *F = "dlt_layernorm_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__layernorm_new(ctx, normalized_size, eps, elementwise_affine, bias, F, out);
}
