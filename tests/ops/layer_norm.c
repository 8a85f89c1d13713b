/*
 * layer_norm.c - rows of layer_norm over the last dimensions, with and without weight and
 * bias, referenced by a two-pass float64 loop (biased variance). ip[0]: number of
 * normalized dimensions; fp[0]: eps.
 */
#include <math.h>

#include "op_common.h"

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    const ot_in *x = &c->in[0];
    const int32_t n = (int32_t)c->ip[0];
    return dlt_layer_norm(in[0], x->shape + x->ndim - n, n, in[1], in[2], c->fp[0], out);
}

/* dlt_layer_norm_to: ip[1] is the output dtype */
static dlt_status fwd_to(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    const ot_in *x = &c->in[0];
    const int32_t n = (int32_t)c->ip[0];
    return dlt_layer_norm_to(in[0], x->shape + x->ndim - n, n, in[1], in[2], c->fp[0], (int32_t)c->ip[1], out);
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const ot_in *x = &c->in[0];
    int64_t N = 1;
    for (int i = x->ndim - (int)c->ip[0]; i < x->ndim; i++) N *= x->shape[i];
    const int64_t M = ot_numel(x) / N;
    for (int64_t r = 0; r < M; r++) {
        const double *row = in[0] + r * N;
        double mu = 0.0, var = 0.0;
        for (int64_t j = 0; j < N; j++) mu += row[j];
        mu /= (double)N;
        for (int64_t j = 0; j < N; j++) var += (row[j] - mu) * (row[j] - mu);
        var /= (double)N;
        for (int64_t j = 0; j < N; j++) {
            double y = (row[j] - mu) / sqrt(var + c->fp[0]);
            if (in[1]) y *= in[1][j];
            if (in[2]) y += in[2][j];
            out[r * N + j] = y;
        }
    }
}

#define XI {OT_X, 3, {2, 3, 16}, -2, 2, 0}
#define W1 {OT_P, 1, {16}, 0.5, 1.5, 0}
#define B1 {OT_P, 1, {16}, -0.5, 0.5, 0}
#define NUL {OT_NULL, 0, {0}, 0, 0, 0}
static const ot_case CASES[] = {
    {"weight and bias", fwd, ref, 3, {XI, W1, B1}, 3, {2, 3, 16}, -1, {1}, {1e-5}},
    {"no weight, no bias (nanoGPT)", fwd, ref, 3, {XI, NUL, NUL}, 3, {2, 3, 16}, -1, {1}, {1e-5}},
    {"weight only", fwd, ref, 3, {XI, W1, NUL}, 3, {2, 3, 16}, -1, {1}, {1e-5}},
    {"bias only", fwd, ref, 3, {XI, NUL, B1}, 3, {2, 3, 16}, -1, {1}, {1e-5}},
    {"two normalized dims", fwd, ref, 3,
     {{OT_X, 3, {4, 3, 5}, -1, 1, 0}, {OT_P, 2, {3, 5}, 0.5, 1.5, 0}, {OT_P, 2, {3, 5}, -1, 1, 0}}, 3, {4, 3, 5}, -1,
     {2}, {1e-5}},
    {"large eps, wide row", fwd, ref, 3, {{OT_X, 2, {3, 384}, -3, 3, 0}, {OT_P, 1, {384}, 0.5, 1.5, 0}, NUL}, 2,
     {3, 384}, -1, {1}, {0.1}},
    /* CUDA's dweight/dbias sum rows in at most 128 chunks: 300 rows give chunks of 3 and
     * empty ones at the end; 70000 rows (more than 65535) chunks of 547, the last short */
    {"300 rows, weight and bias", fwd, ref, 3,
     {{OT_X, 2, {300, 5}, -2, 2, 0}, {OT_P, 1, {5}, 0.5, 1.5, 0}, {OT_P, 1, {5}, -0.5, 0.5, 0}}, 2, {300, 5}, -1, {1},
     {1e-5}},
    {"70000 rows, weight and bias", fwd, ref, 3,
     {{OT_X, 2, {70000, 4}, -2, 2, 0}, {OT_P, 1, {4}, 0.5, 1.5, 0}, {OT_P, 1, {4}, -0.5, 0.5, 0}}, 2, {70000, 4}, -1,
     {1}, {1e-5}},
    /* CUDA's row-in-registers kernels (N a multiple of the 16-byte vector, N <= 1024): the
     * GPT-2 width (6 vectors per lane in f32, 3 in bf16), 1024 (8 and 4: the most), and past
     * them 1040 (the per-element kernels); 600 rows of 8 give 150 blocks' partial sums */
    {"GPT-2 width 768, 64 rows, weight and bias", fwd, ref, 3,
     {{OT_X, 2, {64, 768}, -2, 2, 0}, {OT_P, 1, {768}, 0.5, 1.5, 0}, {OT_P, 1, {768}, -0.5, 0.5, 0}}, 2, {64, 768}, -1,
     {1}, {1e-5}, .flags = OT_NO_FD},
    {"1024 wide, weight only, 40 rows", fwd, ref, 3,
     {{OT_X, 2, {40, 1024}, -2, 2, 0}, {OT_P, 1, {1024}, 0.5, 1.5, 0}, NUL}, 2, {40, 1024}, -1, {1}, {1e-5},
     .flags = OT_NO_FD},
    {"1040 wide, weight and bias, 8 rows", fwd, ref, 3,
     {{OT_X, 2, {8, 1040}, -2, 2, 0}, {OT_P, 1, {1040}, 0.5, 1.5, 0}, {OT_P, 1, {1040}, -0.5, 0.5, 0}}, 2, {8, 1040},
     -1, {1}, {1e-5}, .flags = OT_NO_FD},
    {"600 rows of 8, bias only", fwd, ref, 3,
     {{OT_X, 2, {600, 8}, -2, 2, 0}, NUL, {OT_P, 1, {8}, -0.5, 0.5, 0}}, 2, {600, 8}, -1, {1}, {1e-5}},
    /* dlt_layer_norm_to: the output rounded to bf16 / f16 (1e-2: their rounding), from f32
     * x on CUDA's register kernels and from f16/bf16 x on the per-element ones */
    {"to bf16, GPT-2 width 768, 32 rows", fwd_to, ref, 3,
     {{OT_X, 2, {32, 768}, -2, 2, 0}, {OT_P, 1, {768}, 0.5, 1.5, 0}, {OT_P, 1, {768}, -0.5, 0.5, 0}}, 2, {32, 768}, DLT_BF16,
     {1, DLT_BF16}, {1e-5}, .tol = 1e-2, .flags = OT_NO_FD},
    {"to f16, weight only, 3 x 40", fwd_to, ref, 3, {{OT_X, 2, {3, 40}, -2, 2, 0}, {OT_P, 1, {40}, 0.5, 1.5, 0}, NUL},
     2, {3, 40}, DLT_F16, {1, DLT_F16}, {1e-5}, .tol = 1e-2, .flags = OT_NO_FD},
    {"to bf16, 12 wide (per-element kernels)", fwd_to, ref, 3, {{OT_X, 2, {5, 12}, -2, 2, 0}, NUL, NUL}, 2, {5, 12},
     DLT_BF16, {1, DLT_BF16}, {1e-5}, .tol = 1e-2, .flags = OT_NO_FD},
    {"empty rows", fwd, ref, 3, {{OT_X, 2, {0, 8}, 0, 0, 0}, {OT_P, 1, {8}, 0, 0, 0}, {OT_P, 1, {8}, 0, 0, 0}}, 2,
     {0, 8}, -1, {1}, {1e-5}},
};

static dlt_status e_shape(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[2] = {2, 8}, ns[1] = {4};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_layer_norm(x, ns, 1, NULL, NULL, 1e-5, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_weight(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[2] = {2, 8}, ns[1] = {8}, ws[1] = {7};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 2), *w = ot_zeros(ctx, DLT_F32, ws, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_layer_norm(x, ns, 1, w, NULL, 1e-5, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x), dlt_tensor_release(w);
    return st;
}
static dlt_status e_eps(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[2] = {2, 8}, ns[1] = {8};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_layer_norm(x, ns, 1, NULL, NULL, -1.0, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_to_dtype(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[2] = {2, 8}, ns[1] = {8};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 2), *o = OT_SENTINEL;
    dlt_status st = dlt_layer_norm_to(x, ns, 1, NULL, NULL, 1e-5, DLT_I32, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static const ot_err ERRORS[] = {
    {"normalized_shape not the last sizes", e_shape, DLT_ERR_SHAPE},
    {"dlt_layer_norm_to an int32 output", e_to_dtype, DLT_ERR_DTYPE},
    {"weight of the wrong shape", e_weight, DLT_ERR_SHAPE},
    {"negative eps", e_eps, DLT_ERR_INVALID_ARGUMENT},
};

OT_STEM(layer_norm, CASES, ERRORS);
