/*
 * losses.c - rows of cross_entropy (label smoothing, reduction none, [B,T,C] logits),
 * mse_loss and binary_cross_entropy_with_logits, referenced by their PyTorch definitions in
 * float64. ip[0] selects the loss, ip[1] the reduction, ip[2] ignore_index; fp[0] label
 * smoothing.
 */
#include <math.h>
#include <stdlib.h>

#include "op_common.h"

enum { CE, MSE, BCE, BCE_W, BCE_PW };

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    const int32_t red = (int32_t)c->ip[1];
    switch (c->ip[0]) {
    case CE: return dlt_cross_entropy_ex(in[0], in[1], c->ip[2], red, c->fp[0], out);
    case MSE: return dlt_mse_loss(in[0], in[1], red, out);
    case BCE: return dlt_binary_cross_entropy_with_logits(in[0], in[1], NULL, NULL, red, out);
    case BCE_W: return dlt_binary_cross_entropy_with_logits(in[0], in[1], in[2], NULL, red, out);
    default: return dlt_binary_cross_entropy_with_logits(in[0], in[1], NULL, in[2], red, out);
    }
}

static void reduce(const ot_case *c, const double *l, const int *counted, int64_t n, double *out) {
    double s = 0.0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < n; i++) {
        if (c->ip[1] == DLT_REDUCTION_NONE) out[i] = counted[i] ? l[i] : 0.0;
        if (counted[i]) s += l[i], cnt++;
    }
    if (c->ip[1] == DLT_REDUCTION_SUM) out[0] = s;
    if (c->ip[1] == DLT_REDUCTION_MEAN) out[0] = s / (double)cnt;
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const ot_in *x = &c->in[0];
    const int64_t n = c->ip[0] == CE ? ot_numel(&c->in[1]) : ot_numel(x);
    double *l = malloc((size_t)(n > 0 ? n : 1) * sizeof *l);
    int *counted = malloc((size_t)(n > 0 ? n : 1) * sizeof *counted);
    for (int64_t i = 0; i < n; i++) {
        counted[i] = 1;
        if (c->ip[0] == CE) {
            const int64_t C = x->shape[x->ndim - 1], t = (int64_t)in[1][i];
            const double *row = in[0] + i * C;
            double m = -INFINITY, s = 0.0, mean = 0.0;
            for (int64_t k = 0; k < C; k++) m = fmax(m, row[k]), mean += row[k] / (double)C;
            for (int64_t k = 0; k < C; k++) s += exp(row[k] - m);
            const double lse = m + log(s);
            counted[i] = t != c->ip[2];
            l[i] = counted[i] ? (1 - c->fp[0]) * (lse - row[t]) + c->fp[0] * (lse - mean) : 0.0;
        } else if (c->ip[0] == MSE) {
            const double d = in[0][i] - in[1][ot_bcast_index(x->shape, x->ndim, c->in[1].shape, c->in[1].ndim, i)];
            l[i] = d * d;
        } else {
            const double v = in[0][i], y = in[1][i];
            double w = 1.0, lw = 1.0; /* weight, pos_weight */
            if (c->ip[0] == BCE_W) w = in[2][ot_bcast_index(x->shape, x->ndim, c->in[2].shape, c->in[2].ndim, i)];
            if (c->ip[0] == BCE_PW) lw = in[2][ot_bcast_index(x->shape, x->ndim, c->in[2].shape, c->in[2].ndim, i)];
            /* -w [pw y log s(v) + (1-y) log(1 - s(v))], s the sigmoid */
            const double s = 1.0 / (1.0 + exp(-v));
            l[i] = -w * (lw * y * log(s) + (1 - y) * log(1 - s));
        }
    }
    reduce(c, l, counted, n, out);
    free(l);
    free(counted);
}

#define LOGITS(nd, ...) {OT_X, nd, {__VA_ARGS__}, -3, 3, 0}
static const ot_case CASES[] = {
    {"cross_entropy mean", fwd, ref, 2, {LOGITS(2, 6, 5), {OT_I64, 1, {6}, 0, 5, 0}}, 0, {0}, DLT_F32,
     {CE, DLT_REDUCTION_MEAN, -100}},
    {"cross_entropy smoothing 0.1, sum", fwd, ref, 2, {LOGITS(2, 6, 5), {OT_I64, 1, {6}, 0, 5, 0}}, 0, {0}, DLT_F32,
     {CE, DLT_REDUCTION_SUM, -100}, {0.1}},
    {"cross_entropy [B,T,C], none, ignore 2", fwd, ref, 2, {LOGITS(3, 2, 4, 7), {OT_I32, 2, {2, 4}, 0, 7, 0}}, 2,
     {2, 4}, DLT_F32, {CE, DLT_REDUCTION_NONE, 2}},
    {"cross_entropy [B,T,C], mean, smoothing 0.2, ignore 1", fwd, ref, 2,
     {LOGITS(3, 3, 5, 9), {OT_I64, 2, {3, 5}, 0, 9, 0}}, 0, {0}, DLT_F32, {CE, DLT_REDUCTION_MEAN, 1}, {0.2}},
    /* more than 65536 logits: CUDA's grid path (row lse in a grid, then one block sums the
     * rows in a fixed order), with stored row losses (smoothing, none) and without (sum) */
    {"cross_entropy 300 x 250, mean, smoothing 0.1, ignore 3", fwd, ref, 2,
     {LOGITS(2, 300, 250), {OT_I64, 1, {300}, 0, 250, 0}}, 0, {0}, DLT_F32, {CE, DLT_REDUCTION_MEAN, 3}, {0.1}},
    {"cross_entropy [4,80,210], sum", fwd, ref, 2, {LOGITS(3, 4, 80, 210), {OT_I32, 2, {4, 80}, 0, 210, 0}}, 0,
     {0}, DLT_F32, {CE, DLT_REDUCTION_SUM, -100}},
    {"cross_entropy 70 x 1000, none, ignore 0", fwd, ref, 2, {LOGITS(2, 70, 1000), {OT_I64, 1, {70}, 0, 4, 0}}, 1,
     {70}, DLT_F32, {CE, DLT_REDUCTION_NONE, 0}},
    /* K a multiple of 8: CUDA's 16-bit gradient kernel (8 columns per thread; f16/bf16 rows) */
    {"cross_entropy 96 x 264, mean, smoothing 0.1, ignore 5", fwd, ref, 2,
     {LOGITS(2, 96, 264), {OT_I64, 1, {96}, 0, 264, 0}}, 0, {0}, DLT_F32, {CE, DLT_REDUCTION_MEAN, 5}, {0.1}},
    /* at least 4096 classes: CUDA's block-per-row lse (16-byte loads). K % 8 == 0: aligned rows,
     * and the 16-bit gradient kernel's unrolled loop plus its remainder (1025 vectors a row);
     * K odd: rows start anywhere in a 16-byte line (scalar head and tail around the vectors)
     * and the flat gradient kernel. Forward-only in ref mode (finite differences of 74k logits) */
    {"cross_entropy 9 x 8200, none, smoothing 0.1", fwd, ref, 2,
     {LOGITS(2, 9, 8200), {OT_I64, 1, {9}, 0, 8200, 0}}, 1, {9}, DLT_F32, {CE, DLT_REDUCTION_NONE, -100}, {0.1}, 0,
     OT_NO_FD},
    {"cross_entropy 3 x 50257, sum", fwd, ref, 2, {LOGITS(2, 3, 50257), {OT_I32, 1, {3}, 0, 50257, 0}}, 0, {0},
     DLT_F32, {CE, DLT_REDUCTION_SUM, -100}, {0}, 0, OT_NO_FD},
    {"mse mean", fwd, ref, 2, {LOGITS(2, 4, 3), {OT_X, 2, {4, 3}, -1, 1, 0}}, 0, {0}, DLT_F32, {MSE, 0}},
    {"mse none, broadcast target", fwd, ref, 2, {LOGITS(2, 4, 3), {OT_X, 1, {3}, -1, 1, 0}}, 2, {4, 3}, DLT_F32,
     {MSE, DLT_REDUCTION_NONE}},
    {"bce_with_logits mean", fwd, ref, 2, {LOGITS(2, 3, 5), {OT_C, 2, {3, 5}, 0, 1, 0}}, 0, {0}, DLT_F32, {BCE, 0}},
    {"bce_with_logits weight, sum", fwd, ref, 3,
     {LOGITS(2, 3, 5), {OT_C, 2, {3, 5}, 0, 1, 0}, {OT_C, 1, {5}, 0.5, 2, 0}}, 0, {0}, DLT_F32, {BCE_W, 1}},
    {"bce_with_logits pos_weight, none", fwd, ref, 3,
     {LOGITS(2, 3, 5), {OT_C, 2, {3, 5}, 0, 1, 0}, {OT_C, 1, {5}, 0.5, 3, 0}}, 2, {3, 5}, DLT_F32,
     {BCE_PW, DLT_REDUCTION_NONE}},
};

static dlt_status e_target_shape(dlt_ctx *ctx, int *out_touched) {
    const int64_t ls[3] = {2, 3, 4}, ts[1] = {6};
    dlt_tensor *l = ot_zeros(ctx, DLT_F32, ls, 3), *t = ot_zeros(ctx, DLT_I64, ts, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_cross_entropy_ex(l, t, -100, DLT_REDUCTION_MEAN, 0.0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(l), dlt_tensor_release(t);
    return st;
}
static dlt_status e_smoothing(dlt_ctx *ctx, int *out_touched) {
    const int64_t ls[2] = {2, 3}, ts[1] = {2};
    dlt_tensor *l = ot_zeros(ctx, DLT_F32, ls, 2), *t = ot_zeros(ctx, DLT_I64, ts, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_cross_entropy_ex(l, t, -100, DLT_REDUCTION_MEAN, 1.5, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(l), dlt_tensor_release(t);
    return st;
}
static dlt_status e_target_range(dlt_ctx *ctx, int *out_touched) {
    const int64_t ls[2] = {2, 3}, ts[1] = {2};
    const int64_t tv[2] = {0, 3};
    dlt_tensor *l = ot_zeros(ctx, DLT_F32, ls, 2), *t = NULL, *o = OT_SENTINEL;
    dlt_status st = dlt_tensor_from_host(ctx, DLT_I64, ts, 1, 0, tv, sizeof tv, &t);
    if (st == DLT_OK) st = dlt_cross_entropy_ex(l, t, -100, DLT_REDUCTION_SUM, 0.1, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(l), dlt_tensor_release(t);
    return st;
}
static dlt_status e_bce_shape(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[2] = {2, 3}, b[1] = {3};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 2), *y = ot_zeros(ctx, DLT_F32, b, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_binary_cross_entropy_with_logits(x, y, NULL, NULL, DLT_REDUCTION_MEAN, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x), dlt_tensor_release(y);
    return st;
}
static dlt_status e_mse_reduction(dlt_ctx *ctx, int *out_touched) {
    const int64_t a[1] = {3};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, a, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_mse_loss(x, x, 5, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static const ot_err ERRORS[] = {
    {"targets not the logits' shape without classes", e_target_shape, DLT_ERR_SHAPE},
    {"label_smoothing 1.5", e_smoothing, DLT_ERR_INVALID_ARGUMENT},
    {"target 3 of 3 classes", e_target_range, DLT_ERR_INVALID_ARGUMENT},
    {"bce target of another shape", e_bce_shape, DLT_ERR_SHAPE},
    {"mse reduction 5", e_mse_reduction, DLT_ERR_INVALID_ARGUMENT},
};

OT_STEM(losses, CASES, ERRORS);
