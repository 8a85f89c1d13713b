/*
 * test_ops.c - forward passes of the layer ops through the public API (CPU backend) against
 * the float64 references of ref.c, on seeded random inputs.
 *
 * Covered: conv2d (odd maps, batch 1, stride 2, padding, dilation 2, groups, depthwise,
 * 1x1, the 7x7 stem, maps large enough for the per-sample GEMM path, with and without bias),
 * batch norm (training, evaluation, fused residual and ReLU, affine=False, running-stat
 * updates with momentum 0.1 and the unbiased variance, no running stats), max pool (tie
 * order and NaN propagation, observed through the gradient routing), global average pool,
 * linear, cross-entropy (mean/sum, ignore_index, every row ignored, i32/i64 targets, large
 * logits, out-of-range targets), relu, add, mul_scalar, sum, mean, reshape, flatten, cast;
 * both memory formats and f16/bf16 inputs; error statuses for each op.
 *
 * The inputs a reference sees are read back from the tensors, so f16/bf16 rounding of the
 * inputs is not an error; the tolerance then covers fp32 arithmetic and output rounding.
 * Outputs are allocated by the front doors, so the tests poison the heap instead: before an
 * op runs, blocks of the output's size are filled with NaN and freed, which the allocator
 * hands back to the op (an unwritten output element then reads as NaN and fails).
 */
#include <stdint.h>

#include "harness.h"
#include "ref.h"

/* relative-norm tolerances per dtype (output rounding dominates for f16/bf16) */
#define TOL_F32 1e-5
#define TOL_F16 2e-3
#define TOL_BF16 1.2e-2

static dlt_ctx *g_ctx;

static double tol_for(int32_t dtype) {
    return dtype == DLT_F16 ? TOL_F16 : dtype == DLT_BF16 ? TOL_BF16 : TOL_F32;
}
static const char *fmt_name(int32_t f) { return f == DLT_FORMAT_CHANNELS_LAST ? "cl" : "nchw"; }

/* ---- deterministic data (splitmix64) ---- */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static void seed(uint64_t s) { g_rng = s * 0x9e3779b97f4a7c15ull + 1; }
static double urand(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}
static double *rand_vals(int64_t n, double lo, double hi) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
    /* rounded to fp32 so an f32 tensor holds exactly what the reference sees */
    for (int64_t i = 0; i < n; i++) v[i] = (double)(float)(lo + (hi - lo) * urand());
    return v;
}
/* values with |v| >= gap (away from ReLU's kink) */
static double *rand_away(int64_t n, double lo, double hi, double gap) {
    double *v = rand_vals(n, lo, hi);
    for (int64_t i = 0; i < n; i++)
        if (fabs(v[i]) < gap)
            v[i] = (double)(float)(v[i] < 0 ? -gap - urand() * gap : gap + urand() * gap);
    return v;
}
/* distinct values: a shuffled grid with spacing 1/16 (no max-pool ties in any dtype) */
static double *rand_distinct(int64_t n) {
    double *v = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) v[i] = (double)(i - n / 2) / 16.0;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(urand() * (double)(i + 1));
        double t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    return v;
}
static int64_t prod(const int64_t *s, int nd) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    return n;
}

/* ---- tensors ---- */

/* Fills and frees blocks of nbytes with NaN so the next allocation of that size likely
 * starts as NaN (see the file comment). */
static void poison_heap(int64_t numel, int32_t dtype) {
    if (numel <= 0) return;
    dlt_tensor *t[4] = {0};
    for (int i = 0; i < 4; i++) {
        if (dlt_tensor_empty(g_ctx, dtype, &numel, 1, DLT_FORMAT_CONTIGUOUS, &t[i]) != DLT_OK) break;
        if (dlt_tensor_fill(t[i], NAN) != DLT_OK) break;
    }
    for (int i = 3; i >= 0; i--) dlt_tensor_release(t[i]);
}

/* A tensor holding v (logical order) in dtype and format; *actual (optional, caller frees)
 * receives the values it really holds (after rounding to dtype). */
static dlt_tensor *mk(const double *v, const int64_t *shape, int nd, int32_t dtype, int32_t fmt,
                      double **actual) {
    int64_t n = prod(shape, nd);
    dlt_tensor *t = th_tensor_from_f64(g_ctx, v, shape, nd, dtype, fmt);
    if (!t) {
        printf("# mk: %s\n", dlt_last_error());
        exit(1);
    }
    if (actual) {
        float *r = th_read_f32(t);
        *actual = malloc((size_t)(n ? n : 1) * sizeof(double));
        for (int64_t i = 0; i < n; i++) (*actual)[i] = r[i];
        free(r);
    }
    return t;
}

static dlt_tensor *mk_targets(const int64_t *v, int64_t n, int32_t dtype) {
    dlt_tensor *t = NULL;
    dlt_status st;
    if (dtype == DLT_I64) {
        st = dlt_tensor_from_host(g_ctx, DLT_I64, &n, 1, 0, v, (size_t)n * 8, &t);
    } else {
        int32_t *b = malloc((size_t)(n ? n : 1) * 4);
        for (int64_t i = 0; i < n; i++) b[i] = (int32_t)v[i];
        st = dlt_tensor_from_host(g_ctx, DLT_I32, &n, 1, 0, b, (size_t)n * 4, &t);
        free(b);
    }
    if (st != DLT_OK) {
        printf("# mk_targets: %s\n", dlt_last_error());
        exit(1);
    }
    return t;
}

static dlt_tensor *mk_f32(const double *v, const int64_t *shape, int nd) {
    return mk(v, shape, nd, DLT_F32, DLT_FORMAT_CONTIGUOUS, NULL);
}

/* Checks t's shape, dtype and format, then its values against ref (relative norm). */
static void check_tensor(const char *what, const dlt_tensor *t, const int64_t *shape, int nd,
                         int32_t dtype, int32_t fmt, const double *ref, double tol) {
    int64_t got[DLT_MAX_DIMS] = {0};
    REQUIRE(t != NULL, "%s: no tensor", what);
    int32_t gnd = dlt_tensor_shape(t, got, DLT_MAX_DIMS);
    int same = gnd == nd;
    for (int i = 0; same && i < nd; i++) same = got[i] == shape[i];
    CHECK(same, "%s: shape mismatch (ndim %d vs %d)", what, gnd, nd);
    CHECK(dlt_tensor_dtype(t) == dtype, "%s: dtype %d, expected %d", what, dlt_tensor_dtype(t), dtype);
    CHECK(dlt_tensor_format(t) == fmt, "%s: format %d, expected %d", what, dlt_tensor_format(t), fmt);
    if (!same) return;
    float *v = th_read_f32(t);
    REQUIRE(v != NULL, "%s: read failed: %s", what, dlt_last_error());
    int64_t n = prod(shape, nd);
    double e = th_rel_err(v, ref, n);
    if (!(e <= tol)) {
        int64_t worst = 0;
        double wd = -1;
        for (int64_t i = 0; i < n; i++) {
            double d = fabs((double)v[i] - ref[i]);
            if (v[i] != v[i]) d = INFINITY;
            if (d > wd) {
                wd = d;
                worst = i;
            }
        }
        th_fail(__FILE__, __LINE__, "%s: relative error %.3g > %.3g (worst at %lld: %.9g vs %.9g)",
                what, e, tol, (long long)worst, (double)v[worst], ref[worst]);
    }
    free(v);
}

/* ======================================================================================
 * conv2d
 * ==================================================================================== */

typedef struct conv_case {
    int64_t N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, G;
    int bias;
} conv_case;

static const conv_case CONV_CASES[] = {
    {2, 3, 5, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* odd map, 3 channels, pad 1 */
    {1, 3, 5, 7, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0},   /* batch 1, stride 2 */
    {2, 4, 7, 5, 6, 3, 3, 1, 1, 2, 2, 2, 2, 2, 1},   /* dilation 2, groups 2 */
    {3, 4, 6, 6, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0},   /* 1x1 (no im2col) */
    {2, 6, 5, 7, 4, 1, 1, 1, 1, 0, 0, 1, 1, 2, 1},   /* 1x1 groups 2 (no im2col) */
    {2, 6, 8, 8, 4, 1, 1, 2, 2, 0, 0, 1, 1, 2, 1},   /* 1x1 stride 2, groups 2 */
    {4, 3, 9, 9, 5, 7, 7, 2, 2, 3, 3, 1, 1, 1, 0},   /* ResNet stem shape */
    {2, 4, 4, 5, 8, 3, 2, 1, 2, 0, 1, 1, 1, 4, 1},   /* asymmetric kernel/stride/pad, G=4 */
    {2, 4, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4, 0},   /* depthwise */
    {5, 8, 2, 2, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* tiny maps: many samples per GEMM */
    {1, 2, 40, 36, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, /* large map: per-sample GEMM */
    {2, 2, 33, 34, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0}, /* large map, batch 2 */
    {3, 5, 3, 3, 7, 3, 3, 3, 3, 0, 0, 1, 1, 1, 1},   /* output 1x1 */
    {2, 3, 6, 7, 2, 2, 3, 2, 1, 1, 0, 2, 1, 1, 1},   /* dilation in one dimension only */
};
#define N_CONV (int)(sizeof CONV_CASES / sizeof CONV_CASES[0])

static void run_conv_case(const conv_case *c, int32_t dtype, int32_t fmt) {
    const int64_t P = ref_conv_out(c->H, c->R, c->sh, c->ph, c->dh);
    const int64_t Q = ref_conv_out(c->W, c->S, c->sw, c->pw, c->dw);
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->K, c->C / c->G, c->R, c->S};
    int64_t ys[4] = {c->N, c->K, P, Q}, bs[1] = {c->K};
    double *xv = rand_vals(prod(xs, 4), -1, 1), *wv = rand_vals(prod(ws, 4), -1, 1);
    double *bv = rand_vals(c->K, -1, 1), *xa, *wa, *ba = NULL;
    dlt_tensor *x = mk(xv, xs, 4, dtype, fmt, &xa), *w = mk(wv, ws, 4, dtype, fmt, &wa);
    dlt_tensor *b = c->bias ? mk(bv, bs, 1, dtype, DLT_FORMAT_CONTIGUOUS, &ba) : NULL, *y = NULL;
    double *ref = malloc((size_t)prod(ys, 4) * sizeof(double));
    ref_conv2d(xa, c->N, c->C, c->H, c->W, wa, c->K, c->R, c->S, ba, c->sh, c->sw, c->ph, c->pw,
               c->dh, c->dw, c->G, ref);
    poison_heap(prod(ys, 4), dtype);
    CHECK_OK(dlt_conv2d(x, w, b, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->G, &y));
    char what[160];
    snprintf(what, sizeof what,
             "conv2d %s %s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] s%lld,%lld p%lld,%lld "
             "d%lld,%lld g%lld bias=%d",
             dlt_dtype_name(dtype), fmt_name(fmt), (long long)c->N, (long long)c->C,
             (long long)c->H, (long long)c->W, (long long)c->K, (long long)(c->C / c->G),
             (long long)c->R, (long long)c->S, (long long)c->sh, (long long)c->sw,
             (long long)c->ph, (long long)c->pw, (long long)c->dh, (long long)c->dw,
             (long long)c->G, c->bias);
    check_tensor(what, y, ys, 4, dtype, fmt, ref, tol_for(dtype));
    dlt_tensor_release(x);
    dlt_tensor_release(w);
    dlt_tensor_release(b);
    dlt_tensor_release(y);
    free(xv), free(wv), free(bv), free(xa), free(wa), free(ba), free(ref);
}

static void test_conv2d_f32_contiguous(void) {
    seed(1);
    for (int i = 0; i < N_CONV; i++) run_conv_case(&CONV_CASES[i], DLT_F32, DLT_FORMAT_CONTIGUOUS);
}
static void test_conv2d_f32_channels_last(void) {
    seed(2);
    for (int i = 0; i < N_CONV; i++) run_conv_case(&CONV_CASES[i], DLT_F32, DLT_FORMAT_CHANNELS_LAST);
}
static void test_conv2d_f16_bf16(void) {
    seed(3);
    for (int i = 0; i < N_CONV; i += 2) {
        run_conv_case(&CONV_CASES[i], DLT_F16, DLT_FORMAT_CONTIGUOUS);
        run_conv_case(&CONV_CASES[i + 1 < N_CONV ? i + 1 : i], DLT_BF16, DLT_FORMAT_CHANNELS_LAST);
    }
}

/* Weight in the contiguous format with a channels-last input: the front door converts it. */
static void test_conv2d_mixed_formats(void) {
    seed(4);
    const conv_case c = {2, 3, 5, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
    int64_t xs[4] = {2, 3, 5, 7}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 5, 7}, bs[1] = {4};
    double *xv = rand_vals(prod(xs, 4), -1, 1), *wv = rand_vals(prod(ws, 4), -1, 1),
           *bv = rand_vals(4, -1, 1);
    dlt_tensor *x = mk(xv, xs, 4, DLT_F32, DLT_FORMAT_CHANNELS_LAST, NULL);
    dlt_tensor *w = mk_f32(wv, ws, 4), *b = mk_f32(bv, bs, 1), *y = NULL;
    double ref[2 * 4 * 5 * 7];
    ref_conv2d(xv, c.N, c.C, c.H, c.W, wv, c.K, c.R, c.S, bv, 1, 1, 1, 1, 1, 1, 1, ref);
    CHECK_OK(dlt_conv2d(x, w, b, 1, 1, 1, 1, 1, 1, 1, &y));
    check_tensor("conv2d cl x, nchw w", y, ys, 4, DLT_F32, DLT_FORMAT_CHANNELS_LAST, ref, TOL_F32);
    dlt_tensor_release(x), dlt_tensor_release(w), dlt_tensor_release(b), dlt_tensor_release(y);
    free(xv), free(wv), free(bv);
}

/* Backward kernels against the direct float64 gradients, on shapes that split the im2col
 * workspace into several chunks (the last one partial): 230 samples of 256 channels at 4x4. */
static void run_conv_backward(const conv_case *c, int32_t fmt) {
    const int64_t P = ref_conv_out(c->H, c->R, c->sh, c->ph, c->dh);
    const int64_t Q = ref_conv_out(c->W, c->S, c->sw, c->pw, c->dw);
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->K, c->C / c->G, c->R, c->S};
    int64_t ys[4] = {c->N, c->K, P, Q}, bs[1] = {c->K};
    const int64_t nx = prod(xs, 4), nw = prod(ws, 4), ny = prod(ys, 4);
    double *xv = rand_vals(nx, -1, 1), *wv = rand_vals(nw, -1, 1), *bv = rand_vals(c->K, -1, 1);
    double *uv = rand_vals(ny, -1, 1);
    dlt_tensor *x = mk(xv, xs, 4, DLT_F32, fmt, NULL), *w = mk(wv, ws, 4, DLT_F32, fmt, NULL);
    dlt_tensor *b = mk_f32(bv, bs, 1), *u = mk(uv, ys, 4, DLT_F32, fmt, NULL), *y = NULL;
    CHECK_OK(dlt_tensor_set_requires_grad(x, 1));
    CHECK_OK(dlt_tensor_set_requires_grad(w, 1));
    CHECK_OK(dlt_tensor_set_requires_grad(b, 1));
    int64_t nmax = nx > ny ? nx : ny;
    nmax = nmax > nw ? nmax : nw;
    nmax = nmax > c->K ? nmax : c->K;
    double *ref = malloc((size_t)nmax * sizeof(double));
    ref_conv2d(xv, c->N, c->C, c->H, c->W, wv, c->K, c->R, c->S, bv, c->sh, c->sw, c->ph, c->pw,
               c->dh, c->dw, c->G, ref);
    CHECK_OK(dlt_conv2d(x, w, b, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->G, &y));
    char what[96];
    snprintf(what, sizeof what, "conv2d chunked %s N=%lld: y", fmt_name(fmt), (long long)c->N);
    check_tensor(what, y, ys, 4, DLT_F32, fmt, ref, TOL_F32);
    CHECK_OK(dlt_backward(y, u));
    ref_conv2d_bwd_data(uv, c->N, c->C, c->H, c->W, wv, c->K, c->R, c->S, c->sh, c->sw, c->ph,
                        c->pw, c->dh, c->dw, c->G, ref);
    snprintf(what, sizeof what, "conv2d chunked %s N=%lld: dx", fmt_name(fmt), (long long)c->N);
    check_tensor(what, dlt_tensor_grad(x), xs, 4, DLT_F32, fmt, ref, TOL_F32);
    ref_conv2d_bwd_filter(xv, c->N, c->C, c->H, c->W, uv, c->K, c->R, c->S, c->sh, c->sw, c->ph,
                          c->pw, c->dh, c->dw, c->G, ref);
    snprintf(what, sizeof what, "conv2d chunked %s N=%lld: dw", fmt_name(fmt), (long long)c->N);
    check_tensor(what, dlt_tensor_grad(w), ws, 4, DLT_F32, fmt, ref, TOL_F32);
    for (int64_t k = 0; k < c->K; k++) {
        ref[k] = 0;
        for (int64_t n = 0; n < c->N; n++)
            for (int64_t j = 0; j < P * Q; j++) ref[k] += uv[(n * c->K + k) * P * Q + j];
    }
    snprintf(what, sizeof what, "conv2d chunked %s N=%lld: db", fmt_name(fmt), (long long)c->N);
    check_tensor(what, dlt_tensor_grad(b), bs, 1, DLT_F32, 0, ref, TOL_F32);
    dlt_tensor_release(x), dlt_tensor_release(w), dlt_tensor_release(b), dlt_tensor_release(u);
    dlt_tensor_release(y);
    free(xv), free(wv), free(bv), free(uv), free(ref);
}

static void test_conv2d_backward_chunks(void) {
    seed(5);
    const conv_case big = {230, 256, 4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
    const conv_case big_g = {230, 256, 4, 4, 8, 3, 3, 2, 2, 1, 1, 1, 1, 2, 1};
    run_conv_backward(&big, DLT_FORMAT_CONTIGUOUS);
    run_conv_backward(&big, DLT_FORMAT_CHANNELS_LAST);
    run_conv_backward(&big_g, DLT_FORMAT_CONTIGUOUS);
    run_conv_backward(&big_g, DLT_FORMAT_CHANNELS_LAST);
    /* small shapes through every path, including 1x1 direct GEMMs in both formats */
    for (int i = 0; i < N_CONV; i++) {
        run_conv_backward(&CONV_CASES[i], DLT_FORMAT_CONTIGUOUS);
        run_conv_backward(&CONV_CASES[i], DLT_FORMAT_CHANNELS_LAST);
    }
}

static void test_conv2d_errors(void) {
    int64_t xs[4] = {2, 3, 5, 5}, ws[4] = {4, 3, 3, 3}, w2s[4] = {4, 2, 3, 3}, bs[1] = {5};
    int64_t x3s[3] = {3, 5, 5};
    dlt_tensor *x = NULL, *w = NULL, *w2 = NULL, *b = NULL, *x3 = NULL, *xi = NULL, *wh = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, xs, 4, 0, &x));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, ws, 4, 0, &w));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, w2s, 4, 0, &w2));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, bs, 1, 0, &b));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, x3s, 3, 0, &x3));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I32, xs, 4, 0, &xi));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F16, ws, 4, 0, &wh));
    dlt_tensor *y = (dlt_tensor *)0x1;
    CHECK_STATUS(dlt_conv2d(NULL, w, NULL, 1, 1, 0, 0, 1, 1, 1, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_conv2d(x, NULL, NULL, 1, 1, 0, 0, 1, 1, 1, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_conv2d(x, w, NULL, 1, 1, 0, 0, 1, 1, 1, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_conv2d(x3, w, NULL, 1, 1, 0, 0, 1, 1, 1, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_conv2d(x, w2, NULL, 1, 1, 0, 0, 1, 1, 1, &y), DLT_ERR_SHAPE); /* C/g */
    CHECK_STATUS(dlt_conv2d(x, w, NULL, 1, 1, 0, 0, 1, 1, 2, &y), DLT_ERR_SHAPE);  /* groups */
    CHECK_STATUS(dlt_conv2d(x, w, b, 1, 1, 0, 0, 1, 1, 1, &y), DLT_ERR_SHAPE);     /* bias [5] */
    CHECK_STATUS(dlt_conv2d(x, w, NULL, 1, 1, 0, 0, 3, 3, 1, &y), DLT_ERR_SHAPE);  /* too big */
    CHECK_STATUS(dlt_conv2d(xi, w, NULL, 1, 1, 0, 0, 1, 1, 1, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_conv2d(x, wh, NULL, 1, 1, 0, 0, 1, 1, 1, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_conv2d(x, w, NULL, 0, 1, 0, 0, 1, 1, 1, &y), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_conv2d(x, w, NULL, 1, 1, -1, 0, 1, 1, 1, &y), DLT_ERR_INVALID_ARGUMENT);
    CHECK(y == (dlt_tensor *)0x1, "out-pointer untouched on failure");
    dlt_tensor *all[] = {x, w, w2, b, x3, xi, wh};
    for (int i = 0; i < 7; i++) dlt_tensor_release(all[i]);
}

/* ======================================================================================
 * batch norm
 * ==================================================================================== */

typedef struct bn_case {
    int64_t N, C, H, W;
    int affine, residual, relu, running;
} bn_case;

static const bn_case BN_CASES[] = {
    {2, 3, 5, 7, 1, 0, 0, 1}, {1, 4, 3, 3, 1, 1, 1, 1}, {4, 2, 1, 1, 1, 0, 1, 1},
    {3, 5, 2, 3, 0, 0, 0, 1}, {2, 3, 4, 4, 1, 1, 0, 0}, {2, 6, 3, 5, 0, 1, 1, 0},
    {8, 3, 7, 5, 1, 0, 0, 1},
};
#define N_BN (int)(sizeof BN_CASES / sizeof BN_CASES[0])

static void run_bn_train(const bn_case *c, int32_t dtype, int32_t fmt) {
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, cs[1] = {c->C};
    const int64_t n = prod(xs, 4);
    /* a channel offset makes the two-pass variance matter */
    double *xv = rand_vals(n, -2, 3), *rv = rand_away(n, -1, 1, 0.0);
    double *gv = rand_vals(c->C, 0.5, 1.5), *bv = rand_vals(c->C, -0.5, 0.5);
    double *rmv = rand_vals(c->C, -0.2, 0.2), *rvv = rand_vals(c->C, 0.5, 2.0);
    double *xa, *ra = NULL;
    dlt_tensor *x = mk(xv, xs, 4, dtype, fmt, &xa);
    dlt_tensor *res = c->residual ? mk(rv, xs, 4, dtype, fmt, &ra) : NULL;
    dlt_tensor *g = c->affine ? mk_f32(gv, cs, 1) : NULL, *b = c->affine ? mk_f32(bv, cs, 1) : NULL;
    dlt_tensor *rm = c->running ? mk_f32(rmv, cs, 1) : NULL, *rvar = c->running ? mk_f32(rvv, cs, 1) : NULL;
    dlt_tensor *y = NULL;
    double *ref = malloc((size_t)n * sizeof(double)), *mean = malloc((size_t)c->C * 8),
           *var = malloc((size_t)c->C * 8);
    ref_batchnorm_train(xa, c->N, c->C, c->H, c->W, c->affine ? gv : NULL, c->affine ? bv : NULL,
                        ra, c->relu, 1e-5, ref, mean, var);
    poison_heap(n, dtype);
    CHECK_OK(dlt_batch_norm2d_act(x, res, c->relu, g, b, rm, rvar, 1, 0.1, 1e-5, &y));
    char what[160];
    snprintf(what, sizeof what, "bn train %s %s [%lld,%lld,%lld,%lld] affine=%d res=%d relu=%d",
             dlt_dtype_name(dtype), fmt_name(fmt), (long long)c->N, (long long)c->C,
             (long long)c->H, (long long)c->W, c->affine, c->residual, c->relu);
    check_tensor(what, y, xs, 4, dtype, fmt, ref, tol_for(dtype) * (dtype == DLT_F32 ? 1 : 2));
    if (c->running) {
        ref_batchnorm_running_update(rmv, rvv, mean, var, c->C, c->N * c->H * c->W, 0.1);
        char w2[200];
        snprintf(w2, sizeof w2, "%s running_mean", what);
        check_tensor(w2, rm, cs, 1, DLT_F32, 0, rmv, 1e-6);
        snprintf(w2, sizeof w2, "%s running_var", what);
        check_tensor(w2, rvar, cs, 1, DLT_F32, 0, rvv, 1e-6);
    }
    dlt_tensor *all[] = {x, res, g, b, rm, rvar, y};
    for (int i = 0; i < 7; i++) dlt_tensor_release(all[i]);
    free(xv), free(rv), free(gv), free(bv), free(rmv), free(rvv), free(xa), free(ra);
    free(ref), free(mean), free(var);
}

static void test_bn_train_f32(void) {
    seed(10);
    for (int i = 0; i < N_BN; i++) {
        run_bn_train(&BN_CASES[i], DLT_F32, DLT_FORMAT_CONTIGUOUS);
        run_bn_train(&BN_CASES[i], DLT_F32, DLT_FORMAT_CHANNELS_LAST);
    }
}
static void test_bn_train_f16_bf16(void) {
    seed(11);
    for (int i = 0; i < N_BN; i++) {
        run_bn_train(&BN_CASES[i], DLT_F16, i % 2 ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS);
        run_bn_train(&BN_CASES[i], DLT_BF16, i % 2 ? DLT_FORMAT_CONTIGUOUS : DLT_FORMAT_CHANNELS_LAST);
    }
}

/* Three training steps (momentum 0.1, PyTorch's defaults from running 0/1), then eval. */
static void test_bn_running_stats(void) {
    seed(12);
    int64_t xs[4] = {3, 4, 2, 5}, cs[1] = {4};
    const int64_t n = prod(xs, 4);
    double rm[4] = {0, 0, 0, 0}, rv[4] = {1, 1, 1, 1}, mean[4], var[4];
    dlt_tensor *rmt = mk_f32(rm, cs, 1), *rvt = mk_f32(rv, cs, 1);
    double *ref = malloc((size_t)n * sizeof(double));
    for (int step = 0; step < 3; step++) {
        double *xv = rand_vals(n, -1 + step, 2 + 2 * step);
        dlt_tensor *x = mk_f32(xv, xs, 4), *y = NULL;
        CHECK_OK(dlt_batch_norm2d(x, NULL, NULL, rmt, rvt, 1, 0.1, 1e-5, &y));
        ref_batchnorm_train(xv, 3, 4, 2, 5, NULL, NULL, NULL, 0, 1e-5, ref, mean, var);
        ref_batchnorm_running_update(rm, rv, mean, var, 4, 30, 0.1);
        check_tensor("bn step y", y, xs, 4, DLT_F32, 0, ref, TOL_F32);
        check_tensor("bn step running_mean", rmt, cs, 1, DLT_F32, 0, rm, 1e-6);
        check_tensor("bn step running_var (unbiased)", rvt, cs, 1, DLT_F32, 0, rv, 1e-6);
        dlt_tensor_release(x), dlt_tensor_release(y), free(xv);
    }
    /* the unbiased factor is visible: 30/29 of the biased batch variance enters */
    {
        double r0[1] = {0}, r1[1] = {1}, xv[4] = {1, 2, 3, 4};
        int64_t s1[1] = {1}, s4[4] = {1, 1, 2, 2};
        dlt_tensor *a = mk_f32(r0, s1, 1), *b = mk_f32(r1, s1, 1), *x = mk_f32(xv, s4, 4), *y = NULL;
        CHECK_OK(dlt_batch_norm2d(x, NULL, NULL, a, b, 1, 1.0, 1e-5, &y));
        double m = 0, v = 0;
        CHECK_OK(dlt_tensor_item(a, &m));
        CHECK_OK(dlt_tensor_item(b, &v));
        CHECK_NEAR(m, 2.5, 1e-6);
        CHECK_NEAR(v, 5.0 / 3.0, 1e-6); /* sum of squares 5, n-1 = 3 */
        dlt_tensor_release(a), dlt_tensor_release(b), dlt_tensor_release(x), dlt_tensor_release(y);
    }
    /* eval: normalises with the running statistics and leaves them alone */
    double *xv = rand_vals(n, -1, 1), *gv = rand_vals(4, 0.5, 1.5), *bv = rand_vals(4, -1, 1);
    dlt_tensor *x = mk_f32(xv, xs, 4), *g = mk_f32(gv, cs, 1), *b = mk_f32(bv, cs, 1), *y = NULL;
    CHECK_OK(dlt_batch_norm2d(x, g, b, rmt, rvt, 0, 0.1, 1e-5, &y));
    ref_batchnorm_eval(xv, 3, 4, 2, 5, gv, bv, rm, rv, NULL, 0, 1e-5, ref);
    check_tensor("bn eval y", y, xs, 4, DLT_F32, 0, ref, TOL_F32);
    check_tensor("bn eval leaves running_mean", rmt, cs, 1, DLT_F32, 0, rm, 1e-6);
    check_tensor("bn eval leaves running_var", rvt, cs, 1, DLT_F32, 0, rv, 1e-6);
    dlt_tensor_release(y);
    /* momentum 0 keeps the running statistics */
    CHECK_OK(dlt_batch_norm2d(x, g, b, rmt, rvt, 1, 0.0, 1e-5, &y));
    check_tensor("bn momentum 0 running_mean", rmt, cs, 1, DLT_F32, 0, rm, 1e-7);
    dlt_tensor_release(y);
    dlt_tensor *all[] = {rmt, rvt, x, g, b};
    for (int i = 0; i < 5; i++) dlt_tensor_release(all[i]);
    free(ref), free(xv), free(gv), free(bv);
}

static void test_bn_eval(void) {
    seed(13);
    for (int k = 0; k < 4; k++) {
        const int32_t fmt = k % 2 ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS;
        const int32_t dtype = k < 2 ? DLT_F32 : DLT_BF16;
        int64_t xs[4] = {2, 5, 3, 4}, cs[1] = {5};
        const int64_t n = prod(xs, 4);
        double *xv = rand_vals(n, -2, 2), *rsv = rand_vals(n, -1, 1), *gv = rand_vals(5, 0.5, 1.5),
               *bv = rand_vals(5, -1, 1), *rmv = rand_vals(5, -0.5, 0.5), *rvv = rand_vals(5, 0.3, 3);
        double *xa, *ra, *ref = malloc((size_t)n * sizeof(double));
        dlt_tensor *x = mk(xv, xs, 4, dtype, fmt, &xa), *r = mk(rsv, xs, 4, dtype, fmt, &ra);
        dlt_tensor *g = mk_f32(gv, cs, 1), *b = mk_f32(bv, cs, 1), *rm = mk_f32(rmv, cs, 1),
                   *rv = mk_f32(rvv, cs, 1), *y = NULL;
        poison_heap(n, dtype);
        CHECK_OK(dlt_batch_norm2d_act(x, r, 1, g, b, rm, rv, 0, 0.1, 1e-3, &y));
        ref_batchnorm_eval(xa, 2, 5, 3, 4, gv, bv, rmv, rvv, ra, 1, 1e-3, ref);
        check_tensor("bn eval residual relu", y, xs, 4, dtype, fmt, ref, tol_for(dtype));
        dlt_tensor_release(y);
        /* without running statistics, evaluation uses the batch statistics */
        CHECK_OK(dlt_batch_norm2d(x, g, b, NULL, NULL, 0, 0.1, 1e-5, &y));
        ref_batchnorm_train(xa, 2, 5, 3, 4, gv, bv, NULL, 0, 1e-5, ref, NULL, NULL);
        check_tensor("bn eval without running stats", y, xs, 4, dtype, fmt, ref, tol_for(dtype));
        dlt_tensor *all[] = {x, r, g, b, rm, rv, y};
        for (int i = 0; i < 7; i++) dlt_tensor_release(all[i]);
        free(xv), free(rsv), free(gv), free(bv), free(rmv), free(rvv), free(xa), free(ra), free(ref);
    }
}

/* NaN in x propagates through the fused ReLU of its channel */
static void test_bn_nan(void) {
    double xv[8] = {1, 2, NAN, 4, 5, 6, 7, 8};
    int64_t xs[4] = {1, 2, 2, 2};
    dlt_tensor *x = mk_f32(xv, xs, 4), *y = NULL;
    CHECK_OK(dlt_batch_norm2d_act(x, NULL, 1, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, &y));
    float *v = th_read_f32(y);
    for (int i = 0; i < 4; i++) CHECK(v[i] != v[i], "channel 0 element %d = %g", i, v[i]);
    for (int i = 4; i < 8; i++) CHECK(v[i] == v[i], "channel 1 element %d = %g", i, v[i]);
    CHECK(v[4] == 0.0f && v[7] > 1.0f, "relu applied: %g %g", v[4], v[7]);
    free(v);
    dlt_tensor_release(x), dlt_tensor_release(y);
}

static void test_bn_errors(void) {
    int64_t xs[4] = {2, 3, 4, 4}, cs[1] = {3}, c4[1] = {4}, x1[4] = {1, 3, 1, 1}, x2s[2] = {2, 3};
    dlt_tensor *x = NULL, *g = NULL, *g4 = NULL, *gh = NULL, *xi = NULL, *xb = NULL, *x2 = NULL,
               *r = NULL, *rb = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, xs, 4, 0, &x));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, cs, 1, 0, &g));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, c4, 1, 0, &g4));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F16, cs, 1, 0, &gh));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I64, xs, 4, 0, &xi));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, x1, 4, 0, &xb));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, x2s, 2, 0, &x2));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F16, xs, 4, 0, &r));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, x1, 4, 0, &rb));
    dlt_tensor *y = (dlt_tensor *)0x1;
    CHECK_STATUS(dlt_batch_norm2d(NULL, g, g, g, g, 1, 0.1, 1e-5, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_batch_norm2d(x, g, g, g, g, 1, 0.1, 1e-5, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_batch_norm2d(x2, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_batch_norm2d(x, g4, NULL, NULL, NULL, 1, 0.1, 1e-5, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_batch_norm2d(x, g, g, g4, g4, 1, 0.1, 1e-5, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_batch_norm2d(x, gh, NULL, NULL, NULL, 1, 0.1, 1e-5, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_batch_norm2d(xi, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_batch_norm2d(xb, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_batch_norm2d_act(x, r, 0, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, &y),
                 DLT_ERR_SHAPE); /* residual dtype */
    CHECK_STATUS(dlt_batch_norm2d_act(x, rb, 0, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, &y),
                 DLT_ERR_SHAPE); /* residual shape */
    CHECK_STATUS(dlt_batch_norm2d(x, g, g, g, NULL, 1, 0.1, 1e-5, &y), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_batch_norm2d(x, g, g, NULL, NULL, 1, 0.1, 0.0, &y), DLT_ERR_INVALID_ARGUMENT);
    CHECK(y == (dlt_tensor *)0x1, "out-pointer untouched on failure");
    /* batch 1 with a 1x1 map is fine in evaluation with running stats */
    dlt_tensor *rm = NULL, *rv = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, cs, 1, 0, &rm));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, cs, 1, 0, &rv));
    CHECK_OK(dlt_batch_norm2d(xb, NULL, NULL, rm, rv, 0, 0.1, 1e-5, &y));
    dlt_tensor_release(y);
    dlt_tensor *all[] = {x, g, g4, gh, xi, xb, x2, r, rb, rm, rv};
    for (int i = 0; i < 11; i++) dlt_tensor_release(all[i]);
}

/* ======================================================================================
 * pooling
 * ==================================================================================== */

typedef struct pool_case {
    int64_t N, C, H, W, kh, kw, sh, sw, ph, pw;
} pool_case;

static const pool_case POOL_CASES[] = {
    {2, 3, 5, 7, 3, 3, 2, 2, 1, 1}, /* ResNet's stem pool on an odd map */
    {1, 2, 6, 6, 2, 2, 2, 2, 0, 0}, {2, 2, 7, 5, 3, 3, 1, 1, 1, 1}, {3, 1, 4, 4, 1, 1, 1, 1, 0, 0},
    {2, 4, 5, 6, 2, 3, 1, 2, 1, 1}, {1, 3, 8, 8, 3, 3, 3, 3, 0, 0}, {2, 2, 3, 3, 3, 3, 2, 2, 1, 1},
};
#define N_POOL (int)(sizeof POOL_CASES / sizeof POOL_CASES[0])

static void test_max_pool_forward(void) {
    seed(20);
    for (int k = 0; k < N_POOL * 4; k++) {
        const pool_case *c = &POOL_CASES[k % N_POOL];
        const int32_t fmt = (k / N_POOL) % 2 ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS;
        const int32_t dtype = k / N_POOL < 2 ? DLT_F32 : (k % 2 ? DLT_F16 : DLT_BF16);
        int64_t xs[4] = {c->N, c->C, c->H, c->W};
        const int64_t P = ref_conv_out(c->H, c->kh, c->sh, c->ph, 1);
        const int64_t Q = ref_conv_out(c->W, c->kw, c->sw, c->pw, 1);
        int64_t ys[4] = {c->N, c->C, P, Q};
        double *xv = rand_distinct(prod(xs, 4)), *xa, *ref = malloc((size_t)prod(ys, 4) * 8);
        dlt_tensor *x = mk(xv, xs, 4, dtype, fmt, &xa), *y = NULL;
        ref_max_pool2d(xa, c->N, c->C, c->H, c->W, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw, ref, NULL);
        poison_heap(prod(ys, 4), dtype);
        CHECK_OK(dlt_max_pool2d(x, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw, &y));
        char what[128];
        snprintf(what, sizeof what, "max_pool2d %s %s case %d", dlt_dtype_name(dtype), fmt_name(fmt),
                 k % N_POOL);
        check_tensor(what, y, ys, 4, dtype, fmt, ref, 0.0); /* a max is exact */
        dlt_tensor_release(x), dlt_tensor_release(y);
        free(xv), free(xa), free(ref);
    }
}

/* dx of sum(w * maxpool(x)): which input each window chose, seen through the gradient. */
static float *pool_routing(const double *xv, const int64_t *xs, int32_t fmt, const pool_case *c,
                           dlt_tensor **yout) {
    dlt_tensor *x = mk(xv, xs, 4, DLT_F32, fmt, NULL), *y = NULL, *g = NULL;
    CHECK_OK(dlt_tensor_set_requires_grad(x, 1));
    CHECK_OK(dlt_max_pool2d(x, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw, &y));
    /* upstream gradient 1, 2, 3, ... so overlapping windows are told apart */
    int64_t ys[4];
    dlt_tensor_shape(y, ys, 4);
    double *gv = malloc((size_t)prod(ys, 4) * 8);
    for (int64_t i = 0; i < prod(ys, 4); i++) gv[i] = (double)(i + 1);
    g = mk(gv, ys, 4, DLT_F32, fmt, NULL);
    CHECK_OK(dlt_backward(y, g));
    float *dx = th_read_f32(dlt_tensor_grad(x));
    free(gv);
    dlt_tensor_release(g);
    dlt_tensor_release(x);
    *yout = y;
    return dx;
}

static void expect_routing(const char *what, const double *xv, const int64_t *xs,
                           const pool_case *c) {
    const int64_t P = ref_conv_out(xs[2], c->kh, c->sh, c->ph, 1);
    const int64_t Q = ref_conv_out(xs[3], c->kw, c->sw, c->pw, 1);
    int64_t ys[4] = {xs[0], xs[1], P, Q};
    const int64_t ny = prod(ys, 4), nx = prod(xs, 4);
    double *yref = malloc((size_t)ny * 8), *dref = calloc((size_t)nx, 8);
    int64_t *idx = malloc((size_t)ny * 8);
    ref_max_pool2d(xv, xs[0], xs[1], xs[2], xs[3], c->kh, c->kw, c->sh, c->sw, c->ph, c->pw, yref, idx);
    for (int64_t o = 0; o < ny; o++) {
        const int64_t nc = o / (P * Q);
        dref[nc * xs[2] * xs[3] + idx[o]] += (double)(o + 1);
    }
    for (int f = 0; f < 2; f++) {
        dlt_tensor *y = NULL;
        float *dx = pool_routing(xv, xs, f ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS, c, &y);
        REQUIRE(dx != NULL);
        for (int64_t i = 0; i < nx; i++)
            CHECK(dx[i] == (float)dref[i], "%s %s: dx[%lld] = %g, expected %g", what,
                  fmt_name(f), (long long)i, dx[i], dref[i]);
        float *yv = th_read_f32(y);
        for (int64_t o = 0; o < ny; o++) {
            int same = (yv[o] != yv[o] && isnan(yref[o])) || (double)yv[o] == yref[o];
            CHECK(same, "%s %s: y[%lld] = %g, expected %g", what, fmt_name(f), (long long)o,
                  yv[o], yref[o]);
        }
        free(yv), free(dx);
        dlt_tensor_release(y);
    }
    free(yref), free(dref), free(idx);
}

static void test_max_pool_ties(void) {
    /* all equal: every window takes its first element in scan order */
    int64_t xs[4] = {1, 2, 5, 6};
    double xv[60];
    for (int i = 0; i < 60; i++) xv[i] = 1.5;
    const pool_case overlap = {1, 2, 5, 6, 3, 3, 2, 2, 1, 1}, disjoint = {1, 2, 5, 6, 2, 2, 2, 2, 0, 0};
    expect_routing("ties 3x3/2 pad 1", xv, xs, &overlap);
    expect_routing("ties 2x2/2", xv, xs, &disjoint);
    /* a few repeated maxima at different positions */
    seed(21);
    for (int i = 0; i < 60; i++) xv[i] = (double)(int)(urand() * 4.0);
    expect_routing("repeated values", xv, xs, &overlap);
    /* -inf everywhere: padding never wins; the first real element does */
    for (int i = 0; i < 60; i++) xv[i] = -INFINITY;
    expect_routing("all -inf", xv, xs, &overlap);
}

static void test_max_pool_nan(void) {
    int64_t xs[4] = {1, 1, 5, 6};
    double xv[30];
    seed(22);
    double *d = rand_distinct(30);
    for (int i = 0; i < 30; i++) xv[i] = d[i];
    free(d);
    xv[7] = NAN;  /* row 1, col 1 */
    xv[22] = NAN; /* row 3, col 4 */
    const pool_case c3 = {1, 1, 5, 6, 3, 3, 2, 2, 1, 1}, c2 = {1, 1, 5, 6, 2, 2, 1, 1, 0, 0};
    expect_routing("NaN 3x3/2", xv, xs, &c3);
    expect_routing("NaN 2x2/1", xv, xs, &c2);
    /* NaN after a larger number in the same window still wins */
    double yv[4] = {9, NAN, 1, 2};
    int64_t s4[4] = {1, 1, 2, 2};
    const pool_case c1 = {1, 1, 2, 2, 2, 2, 2, 2, 0, 0};
    expect_routing("NaN after max", yv, s4, &c1);
}

static void test_max_pool_errors(void) {
    int64_t xs[4] = {1, 2, 4, 4}, x3s[3] = {2, 4, 4};
    dlt_tensor *x = NULL, *x3 = NULL, *xi = NULL, *y = (dlt_tensor *)0x1;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, xs, 4, 0, &x));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, x3s, 3, 0, &x3));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I32, xs, 4, 0, &xi));
    CHECK_STATUS(dlt_max_pool2d(NULL, 2, 2, 2, 2, 0, 0, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_max_pool2d(x, 2, 2, 2, 2, 0, 0, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_max_pool2d(x3, 2, 2, 2, 2, 0, 0, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_max_pool2d(xi, 2, 2, 2, 2, 0, 0, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_max_pool2d(x, 5, 5, 1, 1, 0, 0, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_max_pool2d(x, 2, 2, 2, 2, 2, 0, &y), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_max_pool2d(x, 2, 2, 0, 2, 0, 0, &y), DLT_ERR_INVALID_ARGUMENT);
    CHECK(y == (dlt_tensor *)0x1, "out-pointer untouched on failure");
    CHECK_STATUS(dlt_global_avg_pool2d(NULL, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_global_avg_pool2d(x, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_global_avg_pool2d(x3, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_global_avg_pool2d(xi, &y), DLT_ERR_DTYPE);
    dlt_tensor_release(x), dlt_tensor_release(x3), dlt_tensor_release(xi);
}

static void test_global_avg_pool(void) {
    seed(23);
    const int64_t shapes[][4] = {{2, 3, 5, 7}, {1, 8, 1, 1}, {4, 2, 2, 2}, {3, 5, 4, 9}};
    for (int k = 0; k < 12; k++) {
        const int64_t *xs = shapes[k % 4];
        const int32_t fmt = (k / 4) % 2 ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS;
        const int32_t dtype = k < 8 ? DLT_F32 : DLT_F16;
        int64_t ys[4] = {xs[0], xs[1], 1, 1};
        double *xv = rand_vals(prod(xs, 4), -1, 3), *xa, *ref = malloc((size_t)prod(ys, 4) * 8);
        dlt_tensor *x = mk(xv, xs, 4, dtype, fmt, &xa), *y = NULL;
        ref_global_avg_pool2d(xa, xs[0], xs[1], xs[2], xs[3], ref);
        poison_heap(prod(ys, 4), dtype);
        CHECK_OK(dlt_global_avg_pool2d(x, &y));
        check_tensor("global_avg_pool2d", y, ys, 4, dtype, fmt, ref, tol_for(dtype));
        dlt_tensor_release(x), dlt_tensor_release(y);
        free(xv), free(xa), free(ref);
    }
}

/* ======================================================================================
 * linear
 * ==================================================================================== */

static void test_linear(void) {
    seed(30);
    const int64_t cases[][4] = {/* M, K, N, bias */
                                {4, 7, 5, 1}, {1, 3, 10, 0}, {6, 1, 1, 1}, {5, 64, 33, 1},
                                {9, 20, 3, 0}, {3, 2048, 10, 1}};
    for (int k = 0; k < 18; k++) {
        const int64_t *c = cases[k % 6];
        const int32_t dtype = k < 6 ? DLT_F32 : k < 12 ? DLT_F16 : DLT_BF16;
        int64_t xs[2] = {c[0], c[1]}, ws[2] = {c[2], c[1]}, bs[1] = {c[2]}, ys[2] = {c[0], c[2]};
        double *xv = rand_vals(c[0] * c[1], -1, 1), *wv = rand_vals(c[2] * c[1], -1, 1),
               *bv = rand_vals(c[2], -1, 1), *xa, *wa, *ba = NULL;
        dlt_tensor *x = mk(xv, xs, 2, dtype, 0, &xa), *w = mk(wv, ws, 2, dtype, 0, &wa);
        dlt_tensor *b = c[3] ? mk(bv, bs, 1, dtype, 0, &ba) : NULL, *y = NULL;
        double *ref = malloc((size_t)(c[0] * c[2]) * 8);
        ref_linear(xa, c[0], c[1], wa, c[2], ba, ref);
        poison_heap(c[0] * c[2], dtype);
        CHECK_OK(dlt_linear(x, w, b, &y));
        char what[96];
        snprintf(what, sizeof what, "linear %s M%lld K%lld N%lld bias=%lld", dlt_dtype_name(dtype),
                 (long long)c[0], (long long)c[1], (long long)c[2], (long long)c[3]);
        check_tensor(what, y, ys, 2, dtype, 0, ref, tol_for(dtype));
        dlt_tensor_release(x), dlt_tensor_release(w), dlt_tensor_release(b), dlt_tensor_release(y);
        free(xv), free(wv), free(bv), free(xa), free(wa), free(ba), free(ref);
    }
}

static void test_linear_errors(void) {
    int64_t xs[2] = {3, 4}, ws[2] = {5, 4}, w2s[2] = {5, 3}, bs[1] = {4}, x3s[3] = {1, 3, 4};
    dlt_tensor *x = NULL, *w = NULL, *w2 = NULL, *b = NULL, *x3 = NULL, *xi = NULL, *wh = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, xs, 2, 0, &x));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, ws, 2, 0, &w));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, w2s, 2, 0, &w2));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, bs, 1, 0, &b));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, x3s, 3, 0, &x3));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I32, xs, 2, 0, &xi));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_BF16, ws, 2, 0, &wh));
    dlt_tensor *y = (dlt_tensor *)0x1;
    CHECK_STATUS(dlt_linear(NULL, w, NULL, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_linear(x, NULL, NULL, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_linear(x, w, NULL, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_linear(x, w2, NULL, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_linear(x3, w2, NULL, &y), DLT_ERR_SHAPE); /* N-D input, wrong in_features */
    CHECK_STATUS(dlt_linear(x, w, b, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_linear(xi, w, NULL, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_linear(x, wh, NULL, &y), DLT_ERR_DTYPE);
    CHECK(y == (dlt_tensor *)0x1, "out-pointer untouched on failure");
    dlt_tensor *all[] = {x, w, w2, b, x3, xi, wh};
    for (int i = 0; i < 7; i++) dlt_tensor_release(all[i]);
}

/* ======================================================================================
 * cross entropy
 * ==================================================================================== */

static void run_ce(const char *what, const double *lv, int64_t N, int64_t K, const int64_t *tv,
                   int64_t ignore, int red, int32_t dtype, int32_t tdtype) {
    int64_t ls[2] = {N, K};
    double *la;
    dlt_tensor *l = mk(lv, ls, 2, dtype, 0, &la), *t = mk_targets(tv, N, tdtype), *loss = NULL;
    poison_heap(1, DLT_F32);
    CHECK_OK(dlt_cross_entropy(l, t, ignore, red, &loss));
    const double ref = ref_cross_entropy(la, N, K, tv, ignore, red);
    CHECK(dlt_tensor_numel(loss) == 1 && dlt_tensor_ndim(loss) == 0 && dlt_tensor_dtype(loss) == DLT_F32,
          "%s: loss must be an f32 scalar", what);
    double v = 0;
    CHECK_OK(dlt_tensor_item(loss, &v));
    if (isnan(ref)) {
        CHECK(isnan(v), "%s: loss %g, expected NaN", what, v);
    } else {
        CHECK(fabs(v - ref) <= 2e-6 * (fabs(ref) + 1.0), "%s (%s, targets %s): loss %.9g vs %.9g",
              what, dlt_dtype_name(dtype), dlt_dtype_name(tdtype), v, ref);
    }
    dlt_tensor_release(l), dlt_tensor_release(t), dlt_tensor_release(loss);
    free(la);
}

static void test_cross_entropy(void) {
    seed(40);
    const int64_t N = 6, K = 7;
    double *lv = rand_vals(N * K, -3, 3);
    int64_t tv[6];
    for (int i = 0; i < 6; i++) tv[i] = (int64_t)(urand() * K);
    for (int d = 0; d < 3; d++) {
        const int32_t dt = d == 0 ? DLT_F32 : d == 1 ? DLT_F16 : DLT_BF16;
        for (int ti = 0; ti < 2; ti++) {
            const int32_t tt = ti ? DLT_I64 : DLT_I32;
            run_ce("mean", lv, N, K, tv, -100, DLT_REDUCTION_MEAN, dt, tt);
            run_ce("sum", lv, N, K, tv, -100, DLT_REDUCTION_SUM, dt, tt);
        }
    }
    /* ignored rows: mean divides by the count of the others */
    int64_t ti[6] = {tv[0], -100, tv[2], -100, tv[4], tv[5]};
    run_ce("ignore -100 mean", lv, N, K, ti, -100, DLT_REDUCTION_MEAN, DLT_F32, DLT_I64);
    run_ce("ignore -100 sum", lv, N, K, ti, -100, DLT_REDUCTION_SUM, DLT_F32, DLT_I32);
    /* an in-range class used as ignore_index */
    int64_t t3[6] = {3, 1, 3, 0, 6, 3};
    run_ce("ignore class 3", lv, N, K, t3, 3, DLT_REDUCTION_MEAN, DLT_F32, DLT_I32);
    /* every row ignored: mean NaN (PyTorch), sum 0 */
    int64_t tn[6] = {-100, -100, -100, -100, -100, -100};
    run_ce("all ignored mean", lv, N, K, tn, -100, DLT_REDUCTION_MEAN, DLT_F32, DLT_I64);
    run_ce("all ignored sum", lv, N, K, tn, -100, DLT_REDUCTION_SUM, DLT_F32, DLT_I64);
    /* large logits: the max is subtracted */
    double big[12];
    for (int i = 0; i < 12; i++) big[i] = 1000.0 + 40.0 * urand() - (i % 3 == 0 ? 3000.0 : 0.0);
    int64_t tb[3] = {0, 2, 3};
    run_ce("large logits", big, 3, 4, tb, -100, DLT_REDUCTION_MEAN, DLT_F32, DLT_I64);
    /* one class, batch 1 */
    double one[1] = {0.25};
    int64_t t0[1] = {0};
    run_ce("one class", one, 1, 1, t0, -100, DLT_REDUCTION_MEAN, DLT_F32, DLT_I32);
    /* a known value: uniform logits give log(K) */
    double z[8] = {0};
    int64_t tz[2] = {1, 3};
    int64_t zs[2] = {2, 4};
    dlt_tensor *l = mk_f32(z, zs, 2), *t = mk_targets(tz, 2, DLT_I64), *loss = NULL;
    CHECK_OK(dlt_cross_entropy(l, t, -100, DLT_REDUCTION_MEAN, &loss));
    double v;
    CHECK_OK(dlt_tensor_item(loss, &v));
    CHECK_NEAR(v, log(4.0), 1e-6);
    dlt_tensor_release(l), dlt_tensor_release(t), dlt_tensor_release(loss);
    free(lv);
}

static void test_cross_entropy_errors(void) {
    int64_t ls[2] = {4, 5}, l3s[3] = {1, 4, 5}, n3[1] = {3};
    double lv[20] = {0};
    int64_t bad[4] = {0, 1, 5, 2}, neg[4] = {0, -1, 2, 3};
    dlt_tensor *l = mk_f32(lv, ls, 2), *l3 = NULL, *li = NULL, *tf = NULL, *t3 = NULL;
    dlt_tensor *tb = mk_targets(bad, 4, DLT_I64), *tn = mk_targets(neg, 4, DLT_I32);
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, l3s, 3, 0, &l3));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I32, ls, 2, 0, &li));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, &ls[0], 1, 0, &tf));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I64, n3, 1, 0, &t3));
    dlt_tensor *y = (dlt_tensor *)0x1;
    CHECK_STATUS(dlt_cross_entropy(l, tb, -100, 0, &y), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "row 2") && strstr(dlt_last_error(), "5"),
          "message names the row and value: %s", dlt_last_error());
    CHECK_STATUS(dlt_cross_entropy(l, tn, -100, 1, &y), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "row 1") && strstr(dlt_last_error(), "-1"),
          "message names the row and value: %s", dlt_last_error());
    CHECK_STATUS(dlt_cross_entropy(NULL, tb, -100, 0, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_cross_entropy(l, NULL, -100, 0, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_cross_entropy(l, tb, -100, 0, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_cross_entropy(l3, tb, -100, 0, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_cross_entropy(l, t3, -100, 0, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_cross_entropy(li, tb, -100, 0, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_cross_entropy(l, tf, -100, 0, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_cross_entropy(l, tb, -100, 7, &y), DLT_ERR_INVALID_ARGUMENT);
    CHECK(y == (dlt_tensor *)0x1, "out-pointer untouched on failure");
    /* the out-of-range value is fine when it is the ignore_index */
    CHECK_OK(dlt_cross_entropy(l, tb, 5, 0, &y));
    double v;
    CHECK_OK(dlt_tensor_item(y, &v));
    CHECK_NEAR(v, log(5.0), 1e-6);
    dlt_tensor_release(y);
    dlt_tensor *all[] = {l, l3, li, tf, t3, tb, tn};
    for (int i = 0; i < 7; i++) dlt_tensor_release(all[i]);
}

/* ======================================================================================
 * backward in f16/bf16 against the same op in f32 (whose gradients test_grad checks by
 * finite differences): inputs hold the same values in both runs
 * ==================================================================================== */

typedef dlt_status (*lp_fwd_fn)(dlt_tensor *const *in, dlt_tensor *tgt, dlt_tensor **out);

typedef struct lp_input {
    int64_t shape[4];
    int nd;
    int lowp;  /* takes the low-precision dtype (else stays f32, e.g. BN's gamma) */
    int diff;  /* requires grad */
    int kind;  /* 0 random, 1 distinct (max pool), 2 positive */
} lp_input;

static void lp_compare(const char *name, const lp_input *ins, int n_in, dlt_tensor *tgt,
                       lp_fwd_fn fwd, int32_t dtype, int32_t fmt) {
    dlt_tensor *a[6] = {0}, *b[6] = {0}, *ya = NULL, *yb = NULL, *ua = NULL, *ub = NULL;
    double *vals[6] = {0};
    for (int i = 0; i < n_in; i++) {
        const int64_t n = prod(ins[i].shape, ins[i].nd);
        double *v = ins[i].kind == 1 ? rand_distinct(n) : rand_vals(n, ins[i].kind == 2 ? 0.5 : -1, 1.5);
        const int32_t f = ins[i].nd == 4 ? fmt : DLT_FORMAT_CONTIGUOUS;
        b[i] = mk(v, ins[i].shape, ins[i].nd, ins[i].lowp ? dtype : DLT_F32, f, &vals[i]);
        a[i] = mk(vals[i], ins[i].shape, ins[i].nd, DLT_F32, f, NULL);
        if (ins[i].diff) {
            CHECK_OK(dlt_tensor_set_requires_grad(a[i], 1));
            CHECK_OK(dlt_tensor_set_requires_grad(b[i], 1));
        }
        free(v);
    }
    CHECK_OK(fwd(a, tgt, &ya));
    CHECK_OK(fwd(b, tgt, &yb));
    int64_t ys[8];
    const int32_t nd = dlt_tensor_shape(yb, ys, 8);
    const int32_t ydt = dlt_tensor_dtype(yb);
    double *uv = rand_vals(prod(ys, nd), -1, 1), *ur;
    ub = mk(uv, ys, nd, ydt, dlt_tensor_format(yb), &ur);
    ua = mk(ur, ys, nd, DLT_F32, dlt_tensor_format(ya), NULL);
    CHECK_OK(dlt_backward(ya, ua));
    CHECK_OK(dlt_backward(yb, ub));
    for (int i = 0; i < n_in; i++) {
        if (!ins[i].diff) continue;
        dlt_tensor *ga = dlt_tensor_grad(a[i]), *gb = dlt_tensor_grad(b[i]);
        REQUIRE(ga && gb, "%s: missing gradient of input %d", name, i);
        const int64_t n = dlt_tensor_numel(ga);
        float *fa = th_read_f32(ga);
        double *ref = malloc((size_t)n * sizeof(double));
        for (int64_t j = 0; j < n; j++) ref[j] = fa[j];
        char what[128];
        snprintf(what, sizeof what, "%s %s %s: grad of input %d vs f32", name, dlt_dtype_name(dtype),
                 fmt_name(fmt), i);
        const int32_t gf = ins[i].nd == 4 ? fmt : DLT_FORMAT_CONTIGUOUS;
        check_tensor(what, gb, ins[i].shape, ins[i].nd, ins[i].lowp ? dtype : DLT_F32, gf, ref,
                     tol_for(dtype) * 2);
        free(fa), free(ref);
    }
    for (int i = 0; i < 6; i++) dlt_tensor_release(a[i]), dlt_tensor_release(b[i]), free(vals[i]);
    dlt_tensor_release(ya), dlt_tensor_release(yb), dlt_tensor_release(ua), dlt_tensor_release(ub);
    free(uv), free(ur);
}

static dlt_status lp_conv(dlt_tensor *const *in, dlt_tensor *t, dlt_tensor **out) {
    (void)t;
    return dlt_conv2d(in[0], in[1], in[2], 2, 1, 1, 1, 1, 2, 2, out);
}
static dlt_status lp_bn(dlt_tensor *const *in, dlt_tensor *t, dlt_tensor **out) {
    (void)t;
    return dlt_batch_norm2d_act(in[0], in[3], 1, in[1], in[2], NULL, NULL, 1, 0.1, 1e-5, out);
}
static dlt_status lp_bn_eval(dlt_tensor *const *in, dlt_tensor *t, dlt_tensor **out) {
    (void)t;
    return dlt_batch_norm2d_act(in[0], NULL, 0, in[1], in[2], in[3], in[4], 0, 0.1, 1e-5, out);
}
static dlt_status lp_pool(dlt_tensor *const *in, dlt_tensor *t, dlt_tensor **out) {
    (void)t;
    dlt_tensor *m = NULL;
    dlt_status st = dlt_max_pool2d(in[0], 3, 3, 2, 2, 1, 1, &m);
    if (st == DLT_OK) st = dlt_global_avg_pool2d(m, out);
    dlt_tensor_release(m);
    return st;
}
static dlt_status lp_linear(dlt_tensor *const *in, dlt_tensor *t, dlt_tensor **out) {
    (void)t;
    return dlt_linear(in[0], in[1], in[2], out);
}
static dlt_status lp_ce(dlt_tensor *const *in, dlt_tensor *t, dlt_tensor **out) {
    return dlt_cross_entropy(in[0], t, -100, DLT_REDUCTION_MEAN, out);
}

static void test_backward_low_precision(void) {
    seed(60);
    const lp_input conv[3] = {{{3, 4, 6, 7}, 4, 1, 1, 0}, {{6, 2, 3, 3}, 4, 1, 1, 0}, {{6}, 1, 1, 1, 0}};
    const lp_input bn[4] = {{{3, 4, 3, 5}, 4, 1, 1, 0}, {{4}, 1, 0, 1, 2}, {{4}, 1, 0, 1, 0},
                            {{3, 4, 3, 5}, 4, 1, 1, 0}};
    const lp_input bn_eval[5] = {{{2, 3, 4, 4}, 4, 1, 1, 0}, {{3}, 1, 0, 1, 2}, {{3}, 1, 0, 1, 0},
                                 {{3}, 1, 0, 0, 0}, {{3}, 1, 0, 0, 2}};
    const lp_input pool[1] = {{{2, 3, 5, 7}, 4, 1, 1, 1}};
    const lp_input lin[3] = {{{5, 9}, 2, 1, 1, 0}, {{4, 9}, 2, 1, 1, 0}, {{4}, 1, 1, 1, 0}};
    const lp_input ce[1] = {{{6, 5}, 2, 1, 1, 0}};
    int64_t tv[6] = {0, 4, 2, -100, 1, 3};
    dlt_tensor *tgt = mk_targets(tv, 6, DLT_I64);
    for (int d = 0; d < 2; d++) {
        const int32_t dt = d ? DLT_BF16 : DLT_F16;
        for (int f = 0; f < 2; f++) {
            const int32_t fmt = f ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS;
            lp_compare("conv2d", conv, 3, NULL, lp_conv, dt, fmt);
            lp_compare("bn residual relu", bn, 4, NULL, lp_bn, dt, fmt);
            lp_compare("bn eval", bn_eval, 5, NULL, lp_bn_eval, dt, fmt);
            lp_compare("max_pool2d + gap", pool, 1, NULL, lp_pool, dt, fmt);
        }
        lp_compare("linear", lin, 3, NULL, lp_linear, dt, DLT_FORMAT_CONTIGUOUS);
        lp_compare("cross_entropy", ce, 1, tgt, lp_ce, dt, DLT_FORMAT_CONTIGUOUS);
    }
    dlt_tensor_release(tgt);
}

/* ======================================================================================
 * elementwise, reductions, shapes, casts
 * ==================================================================================== */

static void test_relu_add_scale(void) {
    seed(50);
    int64_t xs[4] = {2, 3, 4, 5};
    const int64_t n = prod(xs, 4);
    for (int k = 0; k < 4; k++) {
        const int32_t fmt = k % 2 ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS;
        const int32_t dt = k < 2 ? DLT_F32 : DLT_BF16;
        double *av = rand_away(n, -2, 2, 0.01), *bv = rand_vals(n, -2, 2), *aa, *ba;
        double *ref = malloc((size_t)n * 8);
        dlt_tensor *a = mk(av, xs, 4, dt, fmt, &aa), *b = mk(bv, xs, 4, dt, fmt, &ba), *y = NULL;
        poison_heap(n, dt);
        CHECK_OK(dlt_relu(a, &y));
        ref_relu(aa, n, ref);
        check_tensor("relu", y, xs, 4, dt, fmt, ref, 0.0);
        dlt_tensor_release(y);
        CHECK_OK(dlt_add(a, b, &y));
        for (int64_t i = 0; i < n; i++) ref[i] = aa[i] + ba[i];
        check_tensor("add", y, xs, 4, dt, fmt, ref, tol_for(dt));
        dlt_tensor_release(y);
        double sv = 0.375;
        int64_t one = 1;
        dlt_tensor *s = mk_f32(&sv, &one, 1);
        CHECK_OK(dlt_mul_scalar(a, s, -2.0, &y));
        for (int64_t i = 0; i < n; i++) ref[i] = aa[i] * 0.375 * -2.0;
        check_tensor("mul_scalar", y, xs, 4, dt, fmt, ref, tol_for(dt));
        dlt_tensor_release(y);
        CHECK_OK(dlt_mul_scalar(a, NULL, 3.0, &y));
        for (int64_t i = 0; i < n; i++) ref[i] = aa[i] * 3.0;
        check_tensor("mul_scalar NULL s", y, xs, 4, dt, fmt, ref, tol_for(dt));
        dlt_tensor_release(y);
        /* sum and mean: scalars of x's dtype */
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += aa[i];
        CHECK_OK(dlt_sum(a, &y));
        check_tensor("sum", y, NULL, 0, dt, 0, &sum, tol_for(dt) * 4);
        dlt_tensor_release(y);
        double mean = sum / (double)n;
        CHECK_OK(dlt_mean(a, &y));
        check_tensor("mean", y, NULL, 0, dt, 0, &mean, tol_for(dt) * 4);
        dlt_tensor_release(y);
        dlt_tensor_release(a), dlt_tensor_release(b), dlt_tensor_release(s);
        free(av), free(bv), free(aa), free(ba), free(ref);
    }
    /* relu propagates NaN and maps -0 and negatives to 0 */
    double v[4] = {NAN, -0.0, -3, 2};
    int64_t s4[1] = {4};
    dlt_tensor *x = mk_f32(v, s4, 1), *y = NULL;
    CHECK_OK(dlt_relu(x, &y));
    float *r = th_read_f32(y);
    CHECK(r[0] != r[0] && r[1] == 0.0f && r[2] == 0.0f && r[3] == 2.0f, "%g %g %g %g", r[0], r[1],
          r[2], r[3]);
    free(r);
    dlt_tensor_release(x), dlt_tensor_release(y);
}

static void test_reshape_flatten_cast(void) {
    seed(51);
    int64_t xs[4] = {2, 3, 4, 5};
    const int64_t n = prod(xs, 4);
    double *xv = rand_vals(n, -1, 1);
    for (int f = 0; f < 2; f++) {
        const int32_t fmt = f ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS;
        double *xa;
        dlt_tensor *x = mk(xv, xs, 4, DLT_F32, fmt, &xa), *y = NULL;
        int64_t s2[2] = {6, -1}, e2[2] = {6, 20};
        CHECK_OK(dlt_reshape(x, s2, 2, &y));
        check_tensor("reshape [6,-1]", y, e2, 2, DLT_F32, 0, xa, 0.0);
        dlt_tensor_release(y);
        int64_t e3[2] = {2, 60};
        CHECK_OK(dlt_flatten(x, 1, -1, &y));
        check_tensor("flatten(1,-1)", y, e3, 2, DLT_F32, 0, xa, 0.0);
        dlt_tensor_release(y);
        int64_t e4[3] = {6, 4, 5};
        CHECK_OK(dlt_flatten(x, 0, 1, &y));
        check_tensor("flatten(0,1)", y, e4, 3, DLT_F32, 0, xa, 0.0);
        dlt_tensor_release(y);
        CHECK_OK(dlt_cast(x, DLT_BF16, &y));
        check_tensor("cast bf16", y, xs, 4, DLT_BF16, fmt, xa, TOL_BF16);
        dlt_tensor_release(y);
        int64_t bad[2] = {7, 7};
        y = (dlt_tensor *)0x1;
        CHECK_STATUS(dlt_reshape(x, bad, 2, &y), DLT_ERR_SHAPE);
        CHECK_STATUS(dlt_reshape(NULL, bad, 2, &y), DLT_ERR_NULL_POINTER);
        CHECK_STATUS(dlt_reshape(x, bad, 2, NULL), DLT_ERR_NULL_POINTER);
        CHECK_STATUS(dlt_flatten(x, 3, 1, &y), DLT_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(dlt_cast(x, 42, &y), DLT_ERR_DTYPE);
        CHECK(y == (dlt_tensor *)0x1, "out-pointer untouched on failure");
        dlt_tensor_release(x);
        free(xa);
    }
    free(xv);
}

static void test_elementwise_errors(void) {
    int64_t s1[2] = {2, 3}, s2[2] = {3, 2}, one = 1, two = 2;
    dlt_tensor *a = NULL, *b = NULL, *h = NULL, *i = NULL, *s2t = NULL, *sh = NULL, *y = (dlt_tensor *)0x1;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, s1, 2, 0, &a));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, s2, 2, 0, &b));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F16, s1, 2, 0, &h));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I32, s1, 2, 0, &i));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, &two, 1, 0, &s2t));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F16, &one, 1, 0, &sh));
    CHECK_STATUS(dlt_relu(NULL, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_relu(a, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_relu(i, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_add(a, NULL, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_add(a, b, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_add(a, s2t, &y), DLT_ERR_SHAPE); /* [2,3] with [2]: no broadcast */
    CHECK_STATUS(dlt_add(i, b, &y), DLT_ERR_SHAPE); /* integers add (exact), shapes still must broadcast */
    CHECK_STATUS(dlt_mul_scalar(NULL, NULL, 1.0, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_mul_scalar(i, NULL, 1.0, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_mul_scalar(a, s2t, 1.0, &y), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_mul_scalar(a, sh, 1.0, &y), DLT_ERR_DTYPE); /* s must be f32 */
    CHECK_STATUS(dlt_sum(NULL, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_sum(i, &y), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_mean(a, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_cast(NULL, DLT_F16, &y), DLT_ERR_NULL_POINTER);
    CHECK(y == (dlt_tensor *)0x1, "out-pointer untouched on failure");
    dlt_tensor *all[] = {a, b, h, i, s2t, sh};
    for (int k = 0; k < 6; k++) dlt_tensor_release(all[k]);
}

/* count_correct (the backend's accuracy counter), through dlt_evaluate_accuracy on a linear
 * classifier: the expected count is the first argmax of float64 logits per sample. */
static void test_count_correct(void) {
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    dlt_module *seq = NULL, *flat = NULL, *lin = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 37, 10, 3, 1, &ds));
    CHECK_OK(dlt_loader_create(ds, 8, 0, 0, 1, &ld)); /* 4 batches of 8 and one of 5 */
    CHECK_OK(dlt_sequential_create(g_ctx, &seq));
    CHECK_OK(dlt_flatten_create(g_ctx, &flat));
    CHECK_OK(dlt_sequential_append(seq, NULL, flat));
    CHECK_OK(dlt_linear_create(g_ctx, 3072, 10, 1, &lin));
    CHECK_OK(dlt_sequential_append(seq, NULL, lin));
    dlt_tensor *w = NULL, *b = NULL;
    CHECK_OK(dlt_module_find(seq, "1.weight", &w));
    CHECK_OK(dlt_module_find(seq, "1.bias", &b));
    float *wv = th_read_f32(w), *bv = th_read_f32(b);
    double *wd = malloc(30720 * sizeof(double)), bd[10], logits[10];
    for (int i = 0; i < 30720; i++) wd[i] = wv[i];
    for (int i = 0; i < 10; i++) bd[i] = bv[i];
    int64_t hits = 0, seen = 0;
    for (;;) {
        dlt_tensor *x = NULL, *y = NULL;
        int32_t has = 0;
        CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
        if (!has) break;
        const int64_t B = dlt_tensor_dim(x, 0);
        float *xv = th_read_f32(x), *yv = th_read_f32(y);
        double *xd = malloc((size_t)(B * 3072) * sizeof(double));
        for (int64_t i = 0; i < B * 3072; i++) xd[i] = xv[i];
        for (int64_t r = 0; r < B; r++) {
            ref_linear(xd + r * 3072, 1, 3072, wd, 10, bd, logits);
            int best = 0;
            for (int k = 1; k < 10; k++)
                if (logits[k] > logits[best]) best = k;
            hits += best == (int)yv[r];
        }
        seen += B;
        free(xv), free(yv), free(xd);
    }
    CHECK(seen == 37, "the loader gave %lld samples", (long long)seen);
    double acc = -1;
    CHECK_OK(dlt_evaluate_accuracy(seq, ld, &acc));
    CHECK_NEAR(acc, (double)hits / 37.0, 1e-12);
    /* a bias that makes class 6 win everywhere: accuracy = share of label 6 */
    double big[10] = {0, 0, 0, 0, 0, 0, 1e4, 0, 0, 0};
    int64_t ten = 10;
    dlt_tensor *nb = mk_f32(big, &ten, 1);
    CHECK_OK(dlt_tensor_copy(b, nb));
    int64_t six = 0;
    for (int64_t i = 0; i < 37; i++) {
        int32_t label = -1;
        CHECK_OK(dlt_dataset_get(ds, i, NULL, 0, &label));
        six += label == 6;
    }
    CHECK_OK(dlt_evaluate_accuracy(seq, ld, &acc));
    CHECK_NEAR(acc, (double)six / 37.0, 1e-12);
    dlt_tensor_release(nb); /* w and b are borrowed from the module */
    free(wv), free(bv), free(wd);
    dlt_module_destroy(seq);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
}

/* Empty batches: shapes follow PyTorch, parameter gradients are zeros. */
static void test_empty_batch(void) {
    int64_t xs[4] = {0, 3, 5, 5}, ws[4] = {4, 3, 3, 3}, bs[1] = {4}, ys[4] = {0, 4, 3, 3};
    dlt_tensor *x = NULL, *w = NULL, *b = NULL, *y = NULL, *s = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, xs, 4, 0, &x));
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, ws, 4, 0, &w));
    CHECK_OK(dlt_tensor_rand_uniform(w, -1, 1));
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, bs, 1, 0, &b));
    CHECK_OK(dlt_tensor_fill(b, 0.5));
    CHECK_OK(dlt_tensor_set_requires_grad(w, 1));
    CHECK_OK(dlt_tensor_set_requires_grad(b, 1));
    CHECK_OK(dlt_conv2d(x, w, b, 1, 1, 0, 0, 1, 1, 1, &y));
    check_tensor("conv2d N=0", y, ys, 4, DLT_F32, 0, NULL, 0.0);
    CHECK_OK(dlt_sum(y, &s));
    CHECK_OK(dlt_backward(s, NULL));
    double zeros[108] = {0};
    check_tensor("conv2d N=0 dw", dlt_tensor_grad(w), ws, 4, DLT_F32, 0, zeros, 0.0);
    check_tensor("conv2d N=0 db", dlt_tensor_grad(b), bs, 1, DLT_F32, 0, zeros, 0.0);
    dlt_tensor_release(y), dlt_tensor_release(s);
    /* linear with no rows */
    int64_t lx[2] = {0, 3}, lw[2] = {4, 3}, ly[2] = {0, 4};
    dlt_tensor *xl = NULL, *wl = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, lx, 2, 0, &xl));
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, lw, 2, 0, &wl));
    CHECK_OK(dlt_tensor_fill(wl, 1.0));
    CHECK_OK(dlt_tensor_set_requires_grad(wl, 1));
    CHECK_OK(dlt_linear(xl, wl, NULL, &y));
    check_tensor("linear M=0", y, ly, 2, DLT_F32, 0, NULL, 0.0);
    CHECK_OK(dlt_sum(y, &s));
    CHECK_OK(dlt_backward(s, NULL));
    check_tensor("linear M=0 dw", dlt_tensor_grad(wl), lw, 2, DLT_F32, 0, zeros, 0.0);
    dlt_tensor_release(y), dlt_tensor_release(s);
    /* cross-entropy of no rows: mean NaN, sum 0 */
    int64_t cl[2] = {0, 5}, zero = 0;
    dlt_tensor *l = NULL, *t = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, cl, 2, 0, &l));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I64, &zero, 1, 0, &t));
    double v = 0;
    CHECK_OK(dlt_cross_entropy(l, t, -100, DLT_REDUCTION_MEAN, &y));
    CHECK_OK(dlt_tensor_item(y, &v));
    CHECK(isnan(v), "mean over no rows = %g", v);
    dlt_tensor_release(y);
    CHECK_OK(dlt_cross_entropy(l, t, -100, DLT_REDUCTION_SUM, &y));
    CHECK_OK(dlt_tensor_item(y, &v));
    CHECK(v == 0.0, "sum over no rows = %g", v);
    dlt_tensor_release(y);
    dlt_tensor *all[] = {x, w, b, xl, wl, l, t};
    for (int i = 0; i < 7; i++) dlt_tensor_release(all[i]);
}

/* Ops on one context refuse tensors of another. */
static void test_context_mismatch(void) {
    dlt_ctx *other = th_cpu_ctx();
    int64_t xs[4] = {1, 2, 3, 3}, ws[4] = {2, 2, 1, 1}, ls[2] = {2, 2}, n2 = 2;
    dlt_tensor *x = NULL, *w = NULL, *l = NULL, *t = NULL, *y = (dlt_tensor *)0x1;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, xs, 4, 0, &x));
    CHECK_OK(dlt_tensor_zeros(other, DLT_F32, ws, 4, 0, &w));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, ls, 2, 0, &l));
    CHECK_OK(dlt_tensor_zeros(other, DLT_I64, &n2, 1, 0, &t));
    CHECK_STATUS(dlt_conv2d(x, w, NULL, 1, 1, 0, 0, 1, 1, 1, &y), DLT_ERR_CONTEXT_MISMATCH);
    CHECK_STATUS(dlt_cross_entropy(l, t, -100, 0, &y), DLT_ERR_CONTEXT_MISMATCH);
    CHECK(y == (dlt_tensor *)0x1);
    dlt_tensor_release(x), dlt_tensor_release(w), dlt_tensor_release(l), dlt_tensor_release(t);
    dlt_ctx_destroy(other);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    RUN(test_conv2d_f32_contiguous);
    RUN(test_conv2d_f32_channels_last);
    RUN(test_conv2d_f16_bf16);
    RUN(test_conv2d_mixed_formats);
    RUN(test_conv2d_backward_chunks);
    RUN(test_conv2d_errors);
    RUN(test_bn_train_f32);
    RUN(test_bn_train_f16_bf16);
    RUN(test_bn_running_stats);
    RUN(test_bn_eval);
    RUN(test_bn_nan);
    RUN(test_bn_errors);
    RUN(test_max_pool_forward);
    RUN(test_max_pool_ties);
    RUN(test_max_pool_nan);
    RUN(test_max_pool_errors);
    RUN(test_global_avg_pool);
    RUN(test_linear);
    RUN(test_linear_errors);
    RUN(test_cross_entropy);
    RUN(test_cross_entropy_errors);
    RUN(test_backward_low_precision);
    RUN(test_relu_add_scale);
    RUN(test_reshape_flatten_cast);
    RUN(test_elementwise_errors);
    RUN(test_empty_batch);
    RUN(test_count_correct);
    RUN(test_context_mismatch);
    int64_t live = -1;
    if (dlt_tape_live_nodes(g_ctx, &live) == DLT_OK && live != 0)
        printf("# %lld tape nodes still alive at exit\n", (long long)live);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
