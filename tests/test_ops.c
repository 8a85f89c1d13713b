/*
 * test_ops.c - forward passes of the layer ops other than the CNN ones through the public API
 * (CPU backend) against the float64 references of ref.c, on seeded random inputs (helpers:
 * ops_common.h). conv2d, batch norm and pooling are in test_ops_conv.c.
 *
 * Covered: linear, cross-entropy (mean/sum, ignore_index, every row ignored, i32/i64 targets,
 * large logits, out-of-range targets), the backward of conv2d, batch norm, pooling, linear and
 * cross-entropy in f16/bf16 against f32, relu, add, mul_scalar, sum, mean, reshape, flatten,
 * cast, count_correct, empty batches, context mismatches; error statuses for each op.
 */
#include "add_layer_norm_check.h"
#include "layer_norm_to_check.h"
#include "ops_common.h"


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

/* The backward writes the gradient over logits only the tape holds (no second [N, K]
 * buffer at its peak): the values against float64, then the peak itself. */
static void test_cross_entropy_in_place(void) {
    seed(41);
    enum { N = 8, K = 300 };
    double *xv = rand_vals(N * K, -2, 2);
    int64_t tv[N];
    for (int i = 0; i < N; i++) tv[i] = (int64_t)(urand() * K);
    const int64_t xs[2] = {N, K};
    dlt_tensor *x = mk_f32(xv, xs, 2), *t = mk_targets(tv, N, DLT_I64), *logits = NULL, *loss = NULL;
    CHECK_OK(dlt_tensor_set_requires_grad(x, 1));
    CHECK_OK(dlt_mul_scalar(x, NULL, 2.0, &logits)); /* logits = 2x: a node's output */
    CHECK_OK(dlt_cross_entropy(logits, t, -100, DLT_REDUCTION_MEAN, &loss));
    dlt_tensor_release(logits); /* the tape's reference is the last */
    CHECK_OK(dlt_backward(loss, NULL));
    /* dx = 2 (softmax(2x) - onehot) / N */
    double *ref = malloc(sizeof(double) * N * K);
    for (int i = 0; i < N; i++) {
        double m = -INFINITY, z = 0;
        for (int k = 0; k < K; k++) m = fmax(m, 2 * xv[i * K + k]);
        for (int k = 0; k < K; k++) z += exp(2 * xv[i * K + k] - m);
        for (int k = 0; k < K; k++)
            ref[i * K + k] = 2.0 * (exp(2 * xv[i * K + k] - m) / z - (k == tv[i])) / N;
    }
    check_tensor("x.grad through in-place dlogits", dlt_tensor_grad(x), xs, 2, DLT_F32, DLT_FORMAT_CONTIGUOUS, ref,
                 TOL_F32);
    dlt_tensor_release(loss);
    /* the peak: logits = a + b ([N,1] + [1,K]) whose backward only reduces, so without the
     * in-place write the backward's peak holds a second N x K buffer */
    enum { NB = 64, KB = 4096 };
    double *av = rand_vals(NB, -1, 1), *bv = rand_vals(KB, -1, 1);
    int64_t tb[NB];
    for (int i = 0; i < NB; i++) tb[i] = (int64_t)(urand() * KB);
    const int64_t as[2] = {NB, 1}, bs[2] = {1, KB};
    dlt_tensor *a = mk_f32(av, as, 2), *b = mk_f32(bv, bs, 2), *tt = mk_targets(tb, NB, DLT_I64);
    CHECK_OK(dlt_tensor_set_requires_grad(a, 1));
    CHECK_OK(dlt_tensor_set_requires_grad(b, 1));
    CHECK_OK(dlt_add(a, b, &logits));
    CHECK_OK(dlt_cross_entropy(logits, tt, -100, DLT_REDUCTION_MEAN, &loss));
    dlt_tensor_release(logits);
    uint64_t live = 0, peak = 0;
    CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &live));
    CHECK_OK(dlt_memory_reset_peak(g_ctx));
    CHECK_OK(dlt_backward(loss, NULL));
    CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_PEAK_ALLOCATED, &peak));
    const uint64_t logits_bytes = (uint64_t)NB * KB * sizeof(float);
    CHECK(peak - live < logits_bytes / 2, "backward peak %llu bytes over the %llu live before it: a second "
          "%llu-byte logits buffer?", (unsigned long long)(peak - live), (unsigned long long)live,
          (unsigned long long)logits_bytes);
    CHECK(dlt_tensor_grad(a) && dlt_tensor_grad(b), "both leaves got gradients");
    dlt_tensor_release(a), dlt_tensor_release(b), dlt_tensor_release(tt), dlt_tensor_release(loss);
    dlt_tensor_release(x), dlt_tensor_release(t);
    free(av), free(bv), free(ref), free(xv);
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
static void test_layer_norm_to(void) {
    dlt_ctx *ctx = NULL;
    CHECK_OK(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx));
    layer_norm_to_check(ctx, DLT_BF16, 0);
    layer_norm_to_check(ctx, DLT_BF16, 1);
    layer_norm_to_check(ctx, DLT_F16, 1);
    dlt_ctx_destroy(ctx);
}

/* The residual add and the LayerNorm after it as one op: the two ops' numbers, bit for bit */
static void test_add_layer_norm(void) {
    dlt_ctx *ctx = NULL;
    CHECK_OK(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx));
    const int32_t dts[3] = {DLT_F32, DLT_BF16, DLT_F16};
    const int64_t widths[2] = {40, 30};
    for (int d = 0; d < 3; d++)
        for (int w = 0; w < 2; w++)
            for (int through = 1; through <= 3; through++) add_layer_norm_check(ctx, dts[d], widths[w], through);
    dlt_ctx_destroy(ctx);
}

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
    RUN(test_linear);
    RUN(test_linear_errors);
    RUN(test_cross_entropy);
    RUN(test_cross_entropy_in_place);
    RUN(test_cross_entropy_errors);
    RUN(test_backward_low_precision);
    RUN(test_relu_add_scale);
    RUN(test_reshape_flatten_cast);
    RUN(test_elementwise_errors);
    RUN(test_empty_batch);
    RUN(test_count_correct);
    RUN(test_layer_norm_to);
    RUN(test_add_layer_norm);
    RUN(test_context_mismatch);
    int64_t live = -1;
    if (dlt_tape_live_nodes(g_ctx, &live) == DLT_OK && live != 0)
        printf("# %lld tape nodes still alive at exit\n", (long long)live);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
