/*
 * reduce.c - rows of sum/mean/amax over chosen dimensions and argmax: float64 loops over
 * the input, each element added into (or compared with) its output position.
 * ip[0]: 0 sum, 1 mean, 2 amax, 3 argmax; ip[1]: keepdim; ip[2]: number of dims; ip[3..]:
 * the dims (argmax: ip[3] alone).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op_common.h"

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    int32_t dims[4];
    for (int i = 0; i < c->ip[2]; i++) dims[i] = (int32_t)c->ip[3 + i];
    switch (c->ip[0]) {
    case 0: return dlt_sum_dims(in[0], dims, (int32_t)c->ip[2], (int32_t)c->ip[1], out);
    case 1: return dlt_mean_dims(in[0], dims, (int32_t)c->ip[2], (int32_t)c->ip[1], out);
    case 2: return dlt_amax(in[0], dims, (int32_t)c->ip[2], (int32_t)c->ip[1], out);
    default: return dlt_argmax(in[0], dims[0], (int32_t)c->ip[1], out);
    }
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const ot_in *x = &c->in[0];
    int red[OT_MAX_DIMS] = {0};
    for (int i = 0; i < c->ip[2]; i++) red[(c->ip[3 + i] + x->ndim) % x->ndim] = 1;
    if (c->ip[2] == 0)
        for (int d = 0; d < x->ndim; d++) red[d] = 1;
    const int64_t n = ot_numel(x), no = ot_out_numel(c);
    int64_t cnt = 1;
    for (int d = 0; d < x->ndim; d++)
        if (red[d]) cnt *= x->shape[d];
    int64_t *arg = calloc((size_t)(no > 0 ? no : 1), sizeof *arg);
    for (int64_t o = 0; o < no; o++) out[o] = c->ip[0] >= 2 ? -INFINITY : 0.0;
    for (int64_t i = 0; i < n; i++) {
        /* output index: the kept coordinates in order; position within the reduction: the
         * reduced coordinates in order */
        int64_t rem = i, o = 0, ostride = 1, r = 0, rstride = 1;
        for (int d = x->ndim - 1; d >= 0; d--) {
            const int64_t idx = rem % x->shape[d];
            rem /= x->shape[d];
            if (red[d]) {
                r += idx * rstride;
                rstride *= x->shape[d];
            } else {
                o += idx * ostride;
                ostride *= x->shape[d];
            }
        }
        const double v = in[0][i];
        if (c->ip[0] <= 1) {
            out[o] += v;
        } else if (v > out[o] || (v == out[o] && r < arg[o])) {
            out[o] = v;
            arg[o] = r;
        }
    }
    for (int64_t o = 0; o < no; o++) {
        if (c->ip[0] == 1) out[o] /= (double)cnt;
        if (c->ip[0] == 3) out[o] = (double)arg[o];
    }
    free(arg);
}

#define X3 {{OT_X, 3, {3, 4, 5}, 0, 0, 1}}
static const ot_case CASES[] = {
    {"sum last", fwd, ref, 1, X3, 2, {3, 4}, -1, {0, 0, 1, -1}},
    {"sum first keepdim", fwd, ref, 1, X3, 3, {1, 4, 5}, -1, {0, 1, 1, 0}},
    {"sum outer dims", fwd, ref, 1, X3, 1, {4}, -1, {0, 0, 2, 0, 2}},
    {"sum middle", fwd, ref, 1, X3, 2, {3, 5}, -1, {0, 0, 1, 1}},
    {"sum all", fwd, ref, 1, X3, 0, {0}, -1, {0, 0, 0}},
    {"mean last keepdim", fwd, ref, 1, X3, 3, {3, 4, 1}, -1, {1, 1, 1, 2}},
    {"mean two", fwd, ref, 1, X3, 1, {5}, -1, {1, 0, 2, 1, 0}},
    {"amax last", fwd, ref, 1, X3, 2, {3, 4}, -1, {2, 0, 1, -1}},
    {"amax first two keepdim", fwd, ref, 1, X3, 3, {1, 1, 5}, -1, {2, 1, 2, 0, 1}},
    {"argmax dim 1", fwd, ref, 1, X3, 2, {3, 5}, DLT_I64, {3, 0, 1, 1}, {0}, 0, OT_NO_GRAD},
    {"argmax last keepdim", fwd, ref, 1, X3, 3, {3, 4, 1}, DLT_I64, {3, 1, 1, -1}, {0}, 0, OT_NO_GRAD},
    {"sum of 1-D", fwd, ref, 1, {{OT_X, 1, {300}, 0, 0, 0}}, 0, {0}, -1, {0, 0, 1, 0}},
    /* a unit-stride reduction of 32 or more: CUDA's warp-per-output kernel for max/argmax,
     * whose lanes' (value, position) pairs merge in a shuffle tree (first maximum wins) */
    {"amax long last dim", fwd, ref, 1, {{OT_X, 2, {3, 64}, 0, 0, 1}}, 1, {3}, -1, {2, 0, 1, -1}},
    {"argmax long last dim (ties in f16/bf16)", fwd, ref, 1, {{OT_X, 2, {4, 100}, 0, 0, 0}}, 1, {4}, DLT_I64,
     {3, 0, 1, -1}, {0}, 0, OT_NO_GRAD},
    /* over a long leading dimension: one thread per output walks 5000 rows */
    {"sum over 5000 leading rows", fwd, ref, 1, {{OT_X, 2, {5000, 3}, 0, 0, 0}}, 1, {3}, -1, {0, 0, 1, 0}},
};

static dlt_status e_dup(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[2] = {2, 3};
    const int32_t d[2] = {1, -1};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_sum_dims(x, d, 2, 0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_range(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[2] = {2, 3};
    const int32_t d[1] = {2};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_mean_dims(x, d, 1, 0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_amax_empty(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[2] = {2, 0};
    const int32_t d[1] = {1};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_amax(x, d, 1, 0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_argmax_empty(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[2] = {0, 3};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_argmax(x, 0, 0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static const ot_err ERRORS[] = {
    {"a dimension twice", e_dup, DLT_ERR_INVALID_ARGUMENT},
    {"dimension out of range", e_range, DLT_ERR_INVALID_ARGUMENT},
    {"amax over an empty dimension", e_amax_empty, DLT_ERR_SHAPE},
    {"argmax over an empty dimension", e_argmax_empty, DLT_ERR_SHAPE},
};

OT_STEM(reduce, CASES, ERRORS);
