/*
 * softmax.c - rows of softmax / log_softmax along a dimension, referenced by a float64 loop
 * per slice (max subtracted). ip[0]: dim, ip[1]: 1 for log_softmax.
 */
#include <math.h>

#include "op_common.h"

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return c->ip[1] ? dlt_log_softmax(in[0], (int32_t)c->ip[0], out) : dlt_softmax(in[0], (int32_t)c->ip[0], out);
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const ot_in *x = &c->in[0];
    const int d = (int)((c->ip[0] + x->ndim) % x->ndim);
    int64_t outer = 1, n = x->shape[d], inner = 1;
    for (int i = 0; i < d; i++) outer *= x->shape[i];
    for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < inner; k++) {
            double m = -INFINITY, s = 0.0;
            for (int64_t j = 0; j < n; j++) m = fmax(m, in[0][(o * n + j) * inner + k]);
            for (int64_t j = 0; j < n; j++) s += exp(in[0][(o * n + j) * inner + k] - m);
            for (int64_t j = 0; j < n; j++) {
                const int64_t i = (o * n + j) * inner + k;
                out[i] = c->ip[1] ? in[0][i] - m - log(s) : exp(in[0][i] - m) / s;
            }
        }
}

#define X(lo, hi) {{OT_X, 3, {2, 5, 7}, lo, hi, 0}}
static const ot_case CASES[] = {
    {"softmax last", fwd, ref, 1, X(-3, 3), 3, {2, 5, 7}, -1, {-1, 0}},
    {"softmax middle", fwd, ref, 1, X(-3, 3), 3, {2, 5, 7}, -1, {1, 0}},
    {"softmax first", fwd, ref, 1, X(-3, 3), 3, {2, 5, 7}, -1, {0, 0}},
    {"log_softmax last", fwd, ref, 1, X(-3, 3), 3, {2, 5, 7}, -1, {2, 1}},
    {"log_softmax middle", fwd, ref, 1, X(-3, 3), 3, {2, 5, 7}, -1, {1, 1}},
    {"softmax large logits", fwd, ref, 1, X(80, 120), 3, {2, 5, 7}, -1, {-1, 0}},
    {"softmax wide row", fwd, ref, 1, {{OT_X, 2, {3, 1000}, -2, 2, 0}}, 2, {3, 1000}, -1, {1, 0}},
    /* more rows than a grid dimension other than x holds (65535) */
    {"log_softmax 70000 rows", fwd, ref, 1, {{OT_X, 2, {70000, 3}, -2, 2, 0}}, 2, {70000, 3}, -1, {1, 1}},
};

static dlt_status e_dim(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[2] = {2, 3};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_softmax(x, 2, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_int(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[2] = {2, 3};
    dlt_tensor *x = ot_zeros(ctx, DLT_I64, s, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_log_softmax(x, 1, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static const ot_err ERRORS[] = {
    {"dimension 2 of a 2-D tensor", e_dim, DLT_ERR_INVALID_ARGUMENT},
    {"log_softmax of integers", e_int, DLT_ERR_DTYPE},
};

OT_STEM(softmax, CASES, ERRORS);
