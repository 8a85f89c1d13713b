/*
 * test_ops_conv.c - forward passes of the CNN layer ops through the public API (CPU backend)
 * against the float64 references of ref.c, on seeded random inputs (helpers: ops_common.h).
 *
 * Covered: conv2d (odd maps, batch 1, stride 2, padding, dilation 2, groups, depthwise,
 * 1x1, the 7x7 stem, maps large enough for the per-sample GEMM path, with and without bias,
 * backward chunks, a second backward accumulating dx), batch norm (training, evaluation, fused residual and ReLU, affine=False,
 * running-stat updates with momentum 0.1 and the unbiased variance, no running stats, NaN),
 * max pool (tie order and NaN propagation, observed through the gradient routing), global
 * average pool; both memory formats and f16/bf16 inputs; error statuses for each op.
 * The other layer ops (linear, cross-entropy, elementwise, shapes) are in test_ops.c.
 */
#include "ops_common.h"


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
    /* a second backward accumulates: dx is written into x's gradient buffer with beta = 1
     * (every backward-data path: im2col/im2row, direct GEMMs, chunks) */
    dlt_tensor_release(y);
    y = NULL;
    CHECK_OK(dlt_conv2d(x, w, b, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->G, &y));
    CHECK_OK(dlt_backward(y, u));
    ref_conv2d_bwd_data(uv, c->N, c->C, c->H, c->W, wv, c->K, c->R, c->S, c->sh, c->sw, c->ph,
                        c->pw, c->dh, c->dw, c->G, ref);
    for (int64_t i = 0; i < nx; i++) ref[i] *= 2.0;
    snprintf(what, sizeof what, "conv2d chunked %s N=%lld: dx accumulated", fmt_name(fmt), (long long)c->N);
    check_tensor(what, dlt_tensor_grad(x), xs, 4, DLT_F32, fmt, ref, TOL_F32);
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

/* f16 (NCHW) and bf16 (channels-last) leaves: the data gradient goes through an fp32 staged
 * copy; the second backward adds it to x's gradient (beta = 1) before the one rounding */
static void test_conv2d_backward_accumulates_16bit(void) {
    seed(6);
    const conv_case c = {2, 3, 5, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0};
    int64_t xs[4] = {2, 3, 5, 7}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 5, 7};
    for (int k = 0; k < 2; k++) {
        const int32_t dt = k ? DLT_BF16 : DLT_F16;
        const int32_t fmt = k ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS;
        double *xv = rand_vals(prod(xs, 4), -1, 1), *wv = rand_vals(prod(ws, 4), -1, 1);
        double *uv = rand_vals(prod(ys, 4), -1, 1), *xa, *wa, *ua, ref[2 * 3 * 5 * 7];
        dlt_tensor *x = mk(xv, xs, 4, dt, fmt, &xa), *w = mk(wv, ws, 4, dt, fmt, &wa);
        dlt_tensor *u = mk(uv, ys, 4, dt, fmt, &ua), *y = NULL;
        CHECK_OK(dlt_tensor_set_requires_grad(x, 1));
        for (int pass = 0; pass < 2; pass++) {
            CHECK_OK(dlt_conv2d(x, w, NULL, 1, 1, 1, 1, 1, 1, 1, &y));
            CHECK_OK(dlt_backward(y, u));
            dlt_tensor_release(y);
            y = NULL;
        }
        ref_conv2d_bwd_data(ua, c.N, c.C, c.H, c.W, wa, c.K, c.R, c.S, 1, 1, 1, 1, 1, 1, 1, ref);
        for (int64_t i = 0; i < prod(xs, 4); i++) ref[i] *= 2.0;
        check_tensor(k ? "conv2d bf16 NHWC: dx accumulated" : "conv2d f16 NCHW: dx accumulated",
                     dlt_tensor_grad(x), xs, 4, dt, fmt, ref, tol_for(dt));
        dlt_tensor_release(x), dlt_tensor_release(w), dlt_tensor_release(u);
        free(xv), free(wv), free(uv), free(xa), free(wa), free(ua);
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

int main(void) {
    g_ctx = th_cpu_ctx();
    RUN(test_conv2d_f32_contiguous);
    RUN(test_conv2d_f32_channels_last);
    RUN(test_conv2d_f16_bf16);
    RUN(test_conv2d_mixed_formats);
    RUN(test_conv2d_backward_chunks);
    RUN(test_conv2d_backward_accumulates_16bit);
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
    int64_t live = -1;
    if (dlt_tape_live_nodes(g_ctx, &live) == DLT_OK && live != 0)
        printf("# %lld tape nodes still alive at exit\n", (long long)live);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
