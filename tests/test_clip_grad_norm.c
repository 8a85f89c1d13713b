/*
 * test_clip_grad_norm.c - torch.nn.utils.clip_grad_norm_ on the CPU.
 *
 * The total is checked against a float64 computation over all gradient elements; the
 * scaling against PyTorch's f32 arithmetic for the returned total, bit for bit:
 * coef = min((1 / (total + 1e-6)) * max_norm, 1), g * coef (PyTorch computes
 * max_norm / tensor as reciprocal times max_norm). Cases: clipping, no clipping (the
 * clamp at 1, also just at the boundary), norms 1, 2 and inf, NaN and inf gradients, no
 * gradients, a tensor longer than one accumulation chunk, the GradScaler sequence
 * (unscale, clip, step, with a skipped step), and misuse.
 */
#include <math.h>
#include <stdint.h>

#include "harness.h"

static dlt_ctx *g_ctx;

static uint32_t rng_state = 4242u;
static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((double)(rng_state >> 8) / (double)(1u << 23) - 1.0);
}

static dlt_tensor *make_param(const int64_t *shape, int32_t ndim, int32_t format) {
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, shape, ndim, format, &t));
    CHECK_OK(dlt_tensor_set_requires_grad(t, 1));
    return t;
}

static void read_host(const dlt_tensor *t, float *out) {
    CHECK_OK(dlt_tensor_copy_to_host(t, out, dlt_tensor_nbytes(t)));
}

static float read_total(dlt_tensor *t) {
    float v = 0;
    REQUIRE(t != NULL && dlt_tensor_numel(t) == 1 && dlt_tensor_ndim(t) == 0 && dlt_tensor_dtype(t) == DLT_F32);
    read_host(t, &v);
    return v;
}

/* Three parameters with gradients (one channels-last) and one without. */
#define NP 4
typedef struct setup {
    dlt_tensor *p[NP];
    float *g[NP]; /* the gradients set, memory order */
    int64_t n[NP];
} setup;

static void setup_make(setup *s, float scale) {
    const int64_t s0[2] = {3, 5}, s1[1] = {7}, s2[4] = {2, 3, 2, 2}, s3[1] = {4};
    const int64_t *shapes[NP] = {s0, s1, s2, s3};
    const int32_t nds[NP] = {2, 1, 4, 1};
    const int32_t fmts[NP] = {0, 0, DLT_FORMAT_CHANNELS_LAST, 0};
    for (int i = 0; i < NP; i++) {
        s->p[i] = make_param(shapes[i], nds[i], fmts[i]);
        s->n[i] = dlt_tensor_numel(s->p[i]);
        s->g[i] = malloc((size_t)s->n[i] * sizeof(float));
        for (int64_t e = 0; e < s->n[i]; e++) s->g[i][e] = frand() * scale;
        if (i < NP - 1) th_set_grad(s->p[i], s->g[i]);
    }
}

static void setup_free(setup *s) {
    for (int i = 0; i < NP; i++) {
        dlt_tensor_release(s->p[i]);
        free(s->g[i]);
    }
}

static double norm64(const setup *s, double p) {
    double acc = 0;
    for (int i = 0; i < NP - 1; i++)
        for (int64_t e = 0; e < s->n[i]; e++) {
            double x = fabs((double)s->g[i][e]);
            if (isinf(p)) acc = (x != x || x > acc) ? x : acc;
            else acc += p == 2 ? x * x : x;
        }
    return p == 2 ? sqrt(acc) : acc;
}

/* The gradients after the call must be g * coef with PyTorch's f32 coefficient. */
static void check_scaled(const setup *s, float total, double max_norm, const char *what) {
    float coef = (1.0f / (total + 1e-6f)) * (float)max_norm;
    if (coef > 1.0f) coef = 1.0f;
    for (int i = 0; i < NP - 1; i++) {
        float got[64];
        read_host(dlt_tensor_grad(s->p[i]), got);
        for (int64_t e = 0; e < s->n[i]; e++) {
            const float want = s->g[i][e] * coef;
            if (memcmp(&got[e], &want, 4) != 0 && !(got[e] != got[e] && want != want)) {
                CHECK(0, "%s: grad %d [%lld] %.9g, expected %.9g (coef %.9g)", what, i, (long long)e, got[e],
                      want, coef);
                return;
            }
        }
    }
    CHECK(dlt_tensor_grad(s->p[NP - 1]) == NULL, "%s: a parameter without a gradient got one", what);
}

static void test_l2_clips(void) {
    setup s;
    setup_make(&s, 2.0f);
    const double t64 = norm64(&s, 2);
    const double max_norm = 0.5 * t64;
    dlt_tensor *total = NULL, *norm_only = NULL;
    /* dlt_grad_norm: the same total, the gradients untouched */
    CHECK_OK(dlt_grad_norm(s.p, NP, 2.0, &norm_only));
    check_scaled(&s, 1.0f, 1e30, "dlt_grad_norm (coef 1: untouched)");
    CHECK_STATUS(dlt_grad_norm(s.p, NP, 2.0, NULL), DLT_ERR_NULL_POINTER);
    CHECK_OK(dlt_clip_grad_norm(s.p, NP, max_norm, 2.0, &total));
    const float t = read_total(total);
    CHECK(read_total(norm_only) == t, "dlt_grad_norm %.9g vs clip's total %.9g", read_total(norm_only), t);
    dlt_tensor_release(norm_only);
    CHECK(fabs(t - t64) <= 1e-6 * t64, "total %.9g, float64 %.9g", t, t64);
    check_scaled(&s, t, max_norm, "clipped to half");
    /* against float64 too: the clipped norm is max_norm */
    double acc = 0;
    for (int i = 0; i < NP - 1; i++) {
        float got[64];
        read_host(dlt_tensor_grad(s.p[i]), got);
        for (int64_t e = 0; e < s.n[i]; e++) acc += (double)got[e] * got[e];
    }
    CHECK(fabs(sqrt(acc) - max_norm) <= 1e-5 * max_norm, "clipped norm %.9g, max_norm %.9g", sqrt(acc), max_norm);
    dlt_tensor_release(total);
    setup_free(&s);
}

/* coef >= 1 is clamped: the gradients keep their bits. Just below the boundary
 * (max_norm = total) the coefficient is total / (total + 1e-6) < 1 and applies. */
static void test_no_clip_and_clamp(void) {
    setup s;
    setup_make(&s, 1.0f);
    dlt_tensor *total = NULL;
    CHECK_OK(dlt_clip_grad_norm(s.p, NP, 1e6, 2.0, &total));
    const float t = read_total(total);
    check_scaled(&s, t, 1e6, "max_norm far above the total");
    dlt_tensor_release(total);
    /* max_norm a hair above the total: the formula exceeds 1 and is clamped */
    CHECK_OK(dlt_clip_grad_norm(s.p, NP, (double)t * (1 + 1e-5), 2.0, NULL));
    check_scaled(&s, t, (double)t * (1 + 1e-5), "clamped at the boundary");
    /* max_norm = total: coef < 1 */
    CHECK_OK(dlt_clip_grad_norm(s.p, NP, (double)t, 2.0, &total));
    CHECK(read_total(total) == t);
    check_scaled(&s, t, (double)t, "max_norm = total");
    float coef = (1.0f / (t + 1e-6f)) * t;
    CHECK(coef < 1.0f, "the boundary case must scale (coef %.9g)", coef);
    dlt_tensor_release(total);
    setup_free(&s);
}

static void test_norms_1_and_inf(void) {
    for (int k = 0; k < 2; k++) {
        const double p = k == 0 ? 1.0 : INFINITY;
        setup s;
        setup_make(&s, 3.0f);
        s.g[1][4] = -7.5f; /* the largest |g| is negative */
        th_set_grad(s.p[1], s.g[1]);
        const double t64 = norm64(&s, p);
        dlt_tensor *total = NULL;
        CHECK_OK(dlt_clip_grad_norm(s.p, NP, 1.0, p, &total));
        const float t = read_total(total);
        if (k == 1) CHECK(t == 7.5f, "inf-norm %.9g", t);
        else CHECK(fabs(t - t64) <= 1e-6 * t64, "1-norm %.9g, float64 %.9g", t, t64);
        check_scaled(&s, t, 1.0, k == 0 ? "norm 1" : "norm inf");
        dlt_tensor_release(total);
        setup_free(&s);
    }
}

/* NaN/inf gradients: total NaN/inf (PyTorch's), every gradient scaled by the resulting
 * coefficient (NaN, or 0 for inf: then the inf elements become NaN). */
static void test_nonfinite(void) {
    const float bad[2] = {NAN, INFINITY};
    const double norms[3] = {2.0, 1.0, INFINITY};
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 3; k++) {
            setup s;
            setup_make(&s, 1.0f);
            s.g[0][3] = bad[b];
            th_set_grad(s.p[0], s.g[0]);
            dlt_tensor *total = NULL;
            CHECK_OK(dlt_clip_grad_norm(s.p, NP, 1.0, norms[k], &total));
            const float t = read_total(total);
            if (b == 0) CHECK(t != t, "NaN gradient, norm %g: total %.9g", norms[k], t);
            else CHECK(isinf(t) && t > 0, "inf gradient, norm %g: total %.9g", norms[k], t);
            check_scaled(&s, t, 1.0, b == 0 ? "NaN gradient" : "inf gradient");
            dlt_tensor_release(total);
            setup_free(&s);
        }
}

static void test_edge_cases(void) {
    /* no gradient at all: tensor(0.) and nothing else */
    const int64_t sh[1] = {5};
    dlt_tensor *p = make_param(sh, 1, 0), *total = NULL;
    CHECK_OK(dlt_clip_grad_norm(&p, 1, 1.0, 2.0, &total));
    CHECK(read_total(total) == 0.0f && dlt_tensor_grad(p) == NULL);
    dlt_tensor_release(total);
    /* max_norm 0: every gradient becomes 0 */
    const float g[5] = {1, -2, 3, -4, 5};
    th_set_grad(p, g);
    CHECK_OK(dlt_clip_grad_norm(&p, 1, 0.0, 2.0, &total));
    float got[5];
    read_host(dlt_tensor_grad(p), got);
    for (int i = 0; i < 5; i++) CHECK(got[i] == 0.0f, "[%d] %g", i, got[i]);
    CHECK(read_total(total) == sqrtf(55.0f), "total %.9g", read_total(total));
    dlt_tensor_release(total);
    /* NULL entries are skipped */
    th_set_grad(p, g);
    dlt_tensor *withnull[3] = {NULL, p, NULL};
    CHECK_OK(dlt_clip_grad_norm(withnull, 3, 1e9, 2.0, &total));
    CHECK(read_total(total) == sqrtf(55.0f));
    dlt_tensor_release(total);
    dlt_tensor_release(p);
    /* a long tensor: several accumulation chunks */
    const int64_t big[1] = {200003};
    dlt_tensor *q = make_param(big, 1, 0);
    float *gv = malloc(200003 * sizeof(float)), *gg = malloc(200003 * sizeof(float));
    double acc = 0;
    for (int64_t i = 0; i < 200003; i++) {
        gv[i] = frand();
        acc += (double)gv[i] * gv[i];
    }
    th_set_grad(q, gv);
    CHECK_OK(dlt_clip_grad_norm(&q, 1, 10.0, 2.0, &total));
    const float t = read_total(total);
    CHECK(t == (float)sqrt(acc), "total %.9g, float64 %.9g", t, sqrt(acc));
    float coef = (1.0f / (t + 1e-6f)) * 10.0f;
    read_host(dlt_tensor_grad(q), gg);
    int bad = 0;
    for (int64_t i = 0; i < 200003 && !bad; i++)
        if (gg[i] != gv[i] * coef) {
            CHECK(0, "[%lld] %.9g vs %.9g", (long long)i, gg[i], gv[i] * coef);
            bad = 1;
        }
    free(gv);
    free(gg);
    dlt_tensor_release(total);
    dlt_tensor_release(q);
}

/* PyTorch's recipe: scaler.scale(loss).backward(); scaler.unscale_(opt); clip; scaler.step;
 * scaler.update. The scaled gradients are 1024 * g (exact), so after unscale they are g,
 * after clipping g * coef, and SGD's step is p - lr * g * coef (one FMA). A gradient with
 * inf makes the total inf and the step is skipped. */
static void test_with_grad_scaler(void) {
    const int64_t sh[2] = {4, 6};
    float v[24], g[24], scaled[24];
    for (int i = 0; i < 24; i++) {
        v[i] = frand();
        g[i] = frand();
        scaled[i] = g[i] * 1024.0f;
    }
    dlt_tensor *p = make_param(sh, 2, 0);
    CHECK_OK(dlt_tensor_copy_from_host(p, v, sizeof v));
    dlt_optimizer *opt = NULL;
    dlt_grad_scaler *sc = NULL;
    CHECK_OK(dlt_sgd_create(&p, 1, 0.1, 0, 0, 0, 0, 0, &opt));
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 1024.0, 2.0, 0.5, 2000, 1, &sc));
    th_set_grad(p, scaled);
    CHECK_OK(dlt_grad_scaler_unscale(sc, opt));
    dlt_tensor *total = NULL;
    CHECK_OK(dlt_clip_grad_norm(&p, 1, 0.25, 2.0, &total));
    const float t = read_total(total);
    double acc = 0;
    for (int i = 0; i < 24; i++) acc += (double)g[i] * g[i];
    CHECK(t == (float)sqrt(acc), "total of the unscaled gradients %.9g, float64 %.9g", t, sqrt(acc));
    CHECK_OK(dlt_grad_scaler_step(sc, opt));
    CHECK_OK(dlt_grad_scaler_update(sc));
    const float coef = (1.0f / (t + 1e-6f)) * 0.25f;
    float got[24];
    read_host(p, got);
    for (int i = 0; i < 24; i++) {
        const float want = fmaf(-0.1f, g[i] * coef, v[i]);
        CHECK(got[i] == want, "[%d] %.9g vs %.9g", i, got[i], want);
    }
    /* an inf: total inf, step skipped, scale backs off */
    memcpy(v, got, sizeof v);
    scaled[5] = INFINITY;
    th_set_grad(p, scaled);
    CHECK_OK(dlt_grad_scaler_unscale(sc, opt));
    dlt_tensor_release(total);
    CHECK_OK(dlt_clip_grad_norm(&p, 1, 0.25, 2.0, &total));
    CHECK(isinf(read_total(total)), "total %g", read_total(total));
    CHECK_OK(dlt_grad_scaler_step(sc, opt));
    CHECK_OK(dlt_grad_scaler_update(sc));
    read_host(p, got);
    CHECK(memcmp(got, v, sizeof v) == 0, "a skipped step moved the parameter");
    double scale = 0;
    CHECK_OK(dlt_grad_scaler_get_scale(sc, &scale));
    CHECK(scale == 512.0, "scale %g", scale);
    dlt_tensor_release(total);
    dlt_grad_scaler_destroy(sc);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

static void test_misuse(void) {
    setup s;
    setup_make(&s, 1.0f);
    dlt_tensor *total = NULL;
    CHECK_STATUS(dlt_clip_grad_norm(NULL, 1, 1.0, 2.0, &total), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_clip_grad_norm(s.p, 0, 1.0, 2.0, &total), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_clip_grad_norm(s.p, NP, -1.0, 2.0, &total), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "max_norm") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_clip_grad_norm(s.p, NP, NAN, 2.0, &total), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_clip_grad_norm(s.p, NP, 1.0, 0.0, &total), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_clip_grad_norm(s.p, NP, 1.0, NAN, &total), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_clip_grad_norm(s.p, NP, 1.0, 3.0, &total), DLT_ERR_NOT_SUPPORTED);
    CHECK(strstr(dlt_last_error(), "norm_type 3") != NULL, "%s", dlt_last_error());
    dlt_tensor *nulls[2] = {NULL, NULL};
    CHECK_STATUS(dlt_clip_grad_norm(nulls, 2, 1.0, 2.0, &total), DLT_ERR_INVALID_ARGUMENT);
    /* another context */
    dlt_ctx *other = th_cpu_ctx();
    const int64_t sh[1] = {3};
    dlt_tensor *r = NULL;
    CHECK_OK(dlt_tensor_zeros(other, DLT_F32, sh, 1, 0, &r));
    dlt_tensor *mixed[2] = {s.p[0], r};
    CHECK_STATUS(dlt_clip_grad_norm(mixed, 2, 1.0, 2.0, &total), DLT_ERR_CONTEXT_MISMATCH);
    /* an f16 gradient */
    dlt_tensor *h = NULL, *hg = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F16, sh, 1, 0, &h));
    CHECK_OK(dlt_tensor_set_requires_grad(h, 1));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F16, sh, 1, 0, &hg));
    CHECK_OK(dlt_backward(h, hg));
    REQUIRE(dlt_tensor_grad(h) != NULL);
    dlt_tensor *withh[2] = {s.p[0], h};
    CHECK_STATUS(dlt_clip_grad_norm(withh, 2, 1.0, 2.0, &total), DLT_ERR_DTYPE);
    CHECK(total == NULL, "a failed call wrote the out-pointer");
    /* nothing changed */
    for (int i = 0; i < NP - 1; i++) {
        float got[64];
        read_host(dlt_tensor_grad(s.p[i]), got);
        CHECK(memcmp(got, s.g[i], (size_t)s.n[i] * 4) == 0, "grad %d changed by a failed call", i);
    }
    dlt_tensor_release(h);
    dlt_tensor_release(hg);
    dlt_tensor_release(r);
    dlt_ctx_destroy(other);
    setup_free(&s);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    RUN(test_l2_clips);
    RUN(test_no_clip_and_clamp);
    RUN(test_norms_1_and_inf);
    RUN(test_nonfinite);
    RUN(test_edge_cases);
    RUN(test_with_grad_scaler);
    RUN(test_misuse);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
