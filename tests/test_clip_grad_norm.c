/*
 * test_clip_grad_norm.c - torch.nn.utils.clip_grad_norm_ on the CPU.
 *
 * The total is checked against a float64 computation over all gradient elements; the
 * scaling against PyTorch's f32 arithmetic for the returned total, bit for bit:
 * coef = min((1 / (total + 1e-6)) * max_norm, 1), g * coef (PyTorch computes
 * max_norm / tensor as reciprocal times max_norm). Cases: clipping, no clipping (the
 * clamp at 1, also just at the boundary), norms 1, 2 and inf, NaN and inf gradients, no
 * gradients, a tensor longer than one accumulation chunk, the GradScaler sequence
 * (unscale, clip, step, with a skipped step), and misuse. Then the optimizer's fused
 * clipping (dlt_optimizer_set_clip_grad_norm) against clip_grad_norm + step, bit for bit.
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

/* ---- clipping fused into the optimizer's step (dlt_optimizer_set_clip_grad_norm) ----
 * Two copies of one model: side A's optimizer clips inside its step, side B runs
 * dlt_clip_grad_norm and then a plain step (the reference: the same CPU arithmetic, so the
 * results must agree bit for bit). After every step: parameters, moments or momentum
 * buffers equal B's, A's gradients still hold what backward left (B's are clipped), A's
 * dlt_optimizer_grad_norm equals B's clip total and dlt_grad_norm's. The parameter list
 * has a channels-last tensor, one longer than an accumulation chunk, one without a
 * gradient at some steps and a tied tensor listed twice. */

enum { FK_ADAMW, FK_ADAM, FK_SGD };
typedef struct fused_cfg {
    const char *name;
    int kind;
    double mom, damp, wd; /* wd: SGD's, Adam(W)'s group 0 */
    int nesterov, maximize;
} fused_cfg;

#define FP 5  /* distinct parameters */
#define FL 6  /* the list: p0..p4, then p1 again */
#define FBIG 70001
typedef struct fused_side {
    dlt_tensor *p[FP];
    dlt_tensor *list[FL];
    dlt_optimizer *opt;
    dlt_grad_scaler *sc;
} fused_side;

static const int64_t FS0[2] = {3, 5}, FS1[1] = {7}, FS2[4] = {2, 3, 2, 2}, FS3[1] = {4}, FS4[1] = {FBIG};
static const int64_t *const FSHAPES[FP] = {FS0, FS1, FS2, FS3, FS4};
static const int32_t FNDS[FP] = {2, 1, 4, 1, 1};
static const int32_t FFMTS[FP] = {0, 0, DLT_FORMAT_CHANNELS_LAST, 0, 0};

static void fused_make(fused_side *s, const fused_cfg *c, float *const init[FP], int scaler) {
    for (int i = 0; i < FP; i++) s->p[i] = th_param_f32(g_ctx, FSHAPES[i], FNDS[i], FFMTS[i], init[i]);
    for (int i = 0; i < FP; i++) s->list[i] = s->p[i];
    s->list[FP] = s->p[1]; /* tied: one parameter, counted once */
    if (c->kind == FK_SGD) {
        CHECK_OK(dlt_sgd_create(s->list, FL, 0.05, c->mom, c->damp, c->wd, c->nesterov, c->maximize, &s->opt));
    } else {
        dlt_adamw_options o;
        if (c->kind == FK_ADAMW) dlt_adamw_options_default(&o);
        else dlt_adam_options_default(&o);
        o.lr = 1e-2;
        o.beta2 = 0.95;
        o.weight_decay = c->wd;
        o.maximize = c->maximize;
        dlt_tensor *g0[4] = {s->p[0], s->p[2], s->p[1], s->p[1]}, *g1[2] = {s->p[3], s->p[4]};
        CHECK_OK(dlt_adamw_create_ex(g0, 4, &o, &s->opt));
        CHECK_OK(dlt_optimizer_add_param_group(s->opt, g1, 2, 3e-2, 0.0));
    }
    s->sc = NULL;
    if (scaler) CHECK_OK(dlt_grad_scaler_create(g_ctx, 1024.0, 2.0, 0.5, 2000, 1, &s->sc));
}

static void fused_free(fused_side *s) {
    dlt_grad_scaler_destroy(s->sc);
    dlt_optimizer_destroy(s->opt);
    for (int i = 0; i < FP; i++) dlt_tensor_release(s->p[i]);
}

/* Bitwise comparison of the two sides' parameters and optimizer state; 0 when all agree. */
static int fused_compare(fused_side *a, fused_side *b, const char *what, int step) {
    int bad = 0;
    for (int i = 0; i < FP; i++)
        if (th_diff_bits(a->p[i], b->p[i]) != 0) {
            CHECK(0, "%s step %d: parameter %d differs", what, step, i);
            bad++;
        }
    for (int i = 0; i < dlt_optimizer_num_params(a->opt); i++) {
        dlt_tensor *sa[3] = {dlt_optimizer_momentum_buffer(a->opt, i), dlt_optimizer_exp_avg(a->opt, i),
                             dlt_optimizer_exp_avg_sq(a->opt, i)};
        dlt_tensor *sb[3] = {dlt_optimizer_momentum_buffer(b->opt, i), dlt_optimizer_exp_avg(b->opt, i),
                             dlt_optimizer_exp_avg_sq(b->opt, i)};
        for (int k = 0; k < 3; k++) {
            if ((sa[k] == NULL) != (sb[k] == NULL)) {
                CHECK(0, "%s step %d: state %d of parameter %d on one side only", what, step, k, i);
                bad++;
            } else if (sa[k] && th_diff_bits(sa[k], sb[k]) != 0) {
                CHECK(0, "%s step %d: state %d of parameter %d differs", what, step, k, i);
                bad++;
            }
        }
    }
    return bad;
}

/* steps with fresh gradients, fused (A) against clip + step (B). With a GradScaler the
 * gradients are scaled by 1024 (exact) and A steps through the scaler alone (unscaling at
 * its step, or unscale_ first at odd steps) while B runs unscale, clip, step; step 3 has an
 * inf gradient and is skipped on both sides. */
static void fused_run(const fused_cfg *c, double norm_type, double max_norm, int scaler) {
    enum { STEPS = 4 };
    char what[160];
    snprintf(what, sizeof what, "%s norm %g max_norm %g%s", c->name, norm_type, max_norm,
             scaler ? " GradScaler" : "");
    float *init[FP], *g[FP], *gs[FP], *before = malloc(FBIG * sizeof(float)), *got = malloc(FBIG * sizeof(float));
    int64_t n[FP];
    for (int i = 0; i < FP; i++) {
        n[i] = 1;
        for (int d = 0; d < FNDS[i]; d++) n[i] *= FSHAPES[i][d];
        init[i] = malloc((size_t)n[i] * sizeof(float));
        g[i] = malloc((size_t)n[i] * sizeof(float));
        gs[i] = malloc((size_t)n[i] * sizeof(float));
        for (int64_t e = 0; e < n[i]; e++) init[i][e] = frand();
    }
    fused_side A, B;
    fused_make(&A, c, init, scaler);
    fused_make(&B, c, init, scaler);
    CHECK_OK(dlt_optimizer_set_clip_grad_norm(A.opt, max_norm, norm_type));
    dlt_tensor *norm_ref = NULL; /* one reference, overwritten by every step */
    CHECK_OK(dlt_optimizer_grad_norm(A.opt, &norm_ref));
    CHECK(read_total(norm_ref) == 0.0f, "%s: the total before the first step", what);
    /* SGD's foreach nesterov case writes g + momentum*b into the gradient */
    const int grads_written = c->kind == FK_SGD && c->nesterov && !c->maximize && c->wd == 0.0;
    int clipped = 0;
    for (int step = 1; step <= STEPS; step++) {
        const int inf_step = scaler && step == 3;
        double scale = 1.0; /* a power of two (1024, backed off to 512): exact scaling */
        if (scaler) CHECK_OK(dlt_grad_scaler_get_scale(A.sc, &scale));
        for (int i = 0; i < FP; i++) {
            for (int64_t e = 0; e < n[i]; e++) {
                g[i][e] = frand() * (float)(1 + i);
                gs[i][e] = g[i][e] * (float)scale;
            }
            if (inf_step && i == 2) gs[i][5] = g[i][5] = INFINITY;
            if (i == 3 && step % 2 == 0) { /* no gradient at even steps */
                CHECK_OK(dlt_zero_grad(&A.p[i], 1, 1));
                CHECK_OK(dlt_zero_grad(&B.p[i], 1, 1));
            } else {
                th_set_grad(A.p[i], gs[i]);
                th_set_grad(B.p[i], gs[i]);
            }
        }
        CHECK_OK(dlt_tensor_copy_to_host(A.p[4], before, FBIG * sizeof(float)));
        dlt_tensor *tb = NULL, *tn = NULL;
        if (scaler) {
            CHECK_OK(dlt_grad_scaler_unscale(B.sc, B.opt));
            CHECK_OK(dlt_clip_grad_norm(B.list, FL, max_norm, norm_type, &tb));
            CHECK_OK(dlt_grad_scaler_step(B.sc, B.opt));
            CHECK_OK(dlt_grad_scaler_update(B.sc));
            if (step % 2) CHECK_OK(dlt_grad_scaler_unscale(A.sc, A.opt));
            CHECK_OK(dlt_grad_scaler_step(A.sc, A.opt));
            CHECK_OK(dlt_grad_scaler_update(A.sc));
            CHECK_OK(dlt_grad_norm(A.list, FL, norm_type, &tn)); /* the unscaled gradients */
        } else {
            CHECK_OK(dlt_clip_grad_norm(B.list, FL, max_norm, norm_type, &tb));
            CHECK_OK(dlt_optimizer_step(B.opt));
            CHECK_OK(dlt_grad_norm(A.list, FL, norm_type, &tn)); /* A's gradients are unclipped */
            CHECK_OK(dlt_optimizer_step(A.opt));
        }
        const float ta = read_total(norm_ref), t_clip = read_total(tb), t_norm = read_total(tn);
        dlt_tensor_release(tb);
        dlt_tensor_release(tn);
        CHECK(memcmp(&ta, &t_clip, 4) == 0 && (grads_written || memcmp(&ta, &t_norm, 4) == 0),
              "%s step %d: dlt_optimizer_grad_norm %.9g, clip_grad_norm's %.9g, dlt_grad_norm's %.9g", what,
              step, ta, t_clip, t_norm);
        float coef = (1.0f / (ta + 1e-6f)) * (float)max_norm;
        clipped += coef < 1.0f || inf_step; /* inf total: coef 0 or NaN, a skipped step */
        if (fused_compare(&A, &B, what, step)) break;
        if (inf_step) {
            int32_t applied = -1;
            CHECK_OK(dlt_optimizer_last_step_applied(A.opt, &applied));
            CHECK_OK(dlt_tensor_copy_to_host(A.p[4], got, FBIG * sizeof(float)));
            CHECK(applied == 0 && memcmp(got, before, FBIG * sizeof(float)) == 0 && !isfinite(ta),
                  "%s: the inf step: applied %d, total %g, parameter %s", what, applied, ta,
                  memcmp(got, before, FBIG * sizeof(float)) ? "moved" : "kept");
        }
        /* A's gradients: what backward (and the scaler's unscale) left, not clipped (also
         * in the nesterov case when the step was skipped: B's are clipped, A's untouched) */
        for (int i = 0; i < FP && (!grads_written || inf_step); i++) {
            if (i == 3 && step % 2 == 0) {
                CHECK(dlt_tensor_grad(A.p[i]) == NULL, "%s: a gradient appeared", what);
                continue;
            }
            CHECK_OK(dlt_tensor_copy_to_host(dlt_tensor_grad(A.p[i]), got, (size_t)n[i] * sizeof(float)));
            if (memcmp(got, g[i], (size_t)n[i] * sizeof(float)) != 0) {
                CHECK(0, "%s step %d: the fused step changed gradient %d", what, step, i);
                break;
            }
        }
        for (int i = 0; i < FP && grads_written && !inf_step; i++) /* g*coef + momentum*b, both sides */
            if (dlt_tensor_grad(B.p[i]) && th_diff_bits(dlt_tensor_grad(A.p[i]), dlt_tensor_grad(B.p[i])) != 0)
                CHECK(0, "%s step %d: gradient %d (written by the nesterov step) differs", what, step, i);
    }
    /* the comparison must mean something: max_norm 0.25 and 0 clip at every step */
    if (max_norm <= 0.25) CHECK(clipped == STEPS, "%s: clipping was active at %d of %d steps", what, clipped, STEPS);
    else CHECK(clipped == (scaler ? 1 : 0), "%s: coef < 1 at %d steps", what, clipped);
    dlt_tensor_release(norm_ref);
    fused_free(&A);
    fused_free(&B);
    for (int i = 0; i < FP; i++) {
        free(init[i]);
        free(g[i]);
        free(gs[i]);
    }
    free(before);
    free(got);
}

static const fused_cfg FUSED_CFGS[] = {
    {"AdamW", FK_ADAMW, 0, 0, 0.1, 0, 0},
    {"Adam maximize L2", FK_ADAM, 0, 0, 1e-2, 0, 1},
    {"SGD", FK_SGD, 0, 0, 0, 0, 0},
    {"SGD momentum dampening wd maximize", FK_SGD, 0.9, 0.1, 1e-2, 0, 1},
    {"SGD nesterov", FK_SGD, 0.9, 0, 0, 1, 0},
    {"SGD nesterov wd maximize", FK_SGD, 0.9, 0, 1e-2, 1, 1},
};

/* every configuration x norm 1, 2, inf x max_norm clipping (0.25, 0) and not (1e30, inf) */
static void test_fused_matches_clip_then_step(void) {
    const double norms[3] = {1.0, 2.0, INFINITY}, max_norms[4] = {0.25, 0.0, 1e30, INFINITY};
    for (size_t c = 0; c < sizeof FUSED_CFGS / sizeof FUSED_CFGS[0]; c++)
        for (int k = 0; k < 3; k++)
            for (int m = 0; m < 4; m++) fused_run(&FUSED_CFGS[c], norms[k], max_norms[m], 0);
}

/* unscale, clip, step through the GradScaler, with a skipped step */
static void test_fused_with_grad_scaler(void) {
    for (size_t c = 0; c < sizeof FUSED_CFGS / sizeof FUSED_CFGS[0]; c++) {
        fused_run(&FUSED_CFGS[c], 2.0, 0.25, 1);
        fused_run(&FUSED_CFGS[c], INFINITY, 1e30, 1);
    }
}

/* Errors, clear, set again, a failed set, the total's lifetime, a step without gradients. */
static void test_fused_misuse_and_clear(void) {
    const int64_t sh[1] = {6};
    const float v[6] = {1, -2, 3, -4, 5, -6}, gv[6] = {0.5f, -1, 2, 0.25f, -3, 1.5f};
    dlt_tensor *p[3] = {th_param_f32(g_ctx, sh, 1, 0, v), th_param_f32(g_ctx, sh, 1, 0, v),
                        th_param_f32(g_ctx, sh, 1, 0, v)};
    /* plain SGD: no state, so steps from equal parameters compare (Adam's first step hardly
     * depends on the gradient's scale) */
    dlt_optimizer *o[3];
    for (int i = 0; i < 3; i++) CHECK_OK(dlt_sgd_create(&p[i], 1, 0.1, 0, 0, 0, 0, 0, &o[i]));
    dlt_tensor *t = NULL;
    /* arguments */
    CHECK_STATUS(dlt_optimizer_set_clip_grad_norm(NULL, 1.0, 2.0), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_optimizer_set_clip_grad_norm(o[0], -1.0, 2.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "max_norm") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_optimizer_set_clip_grad_norm(o[0], NAN, 2.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_set_clip_grad_norm(o[0], 1.0, 0.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_set_clip_grad_norm(o[0], 1.0, NAN), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_set_clip_grad_norm(o[0], 1.0, -INFINITY), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_set_clip_grad_norm(o[0], 1.0, 3.0), DLT_ERR_NOT_SUPPORTED);
    CHECK(strstr(dlt_last_error(), "norm_type 3") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_optimizer_clear_clip_grad_norm(NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_optimizer_grad_norm(NULL, &t), DLT_ERR_NULL_POINTER);
    /* not set (the failed calls set nothing): no total */
    CHECK_STATUS(dlt_optimizer_grad_norm(o[0], &t), DLT_ERR_INVALID_STATE);
    CHECK(strstr(dlt_last_error(), "dlt_optimizer_set_clip_grad_norm") != NULL, "%s", dlt_last_error());
    CHECK(t == NULL, "a failed call wrote the out-pointer");
    CHECK_OK(dlt_optimizer_clear_clip_grad_norm(o[0])); /* clearing nothing: a no-op */
    /* o[0] fused at 1.0, o[1] clip + step, o[2] plain steps; a failed set changes nothing */
    CHECK_OK(dlt_optimizer_set_clip_grad_norm(o[0], 1.0, 2.0));
    CHECK_STATUS(dlt_optimizer_set_clip_grad_norm(o[0], -1.0, 1.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_grad_norm(o[0], NULL), DLT_ERR_NULL_POINTER);
    CHECK_OK(dlt_optimizer_grad_norm(o[0], &t));
    for (int i = 0; i < 3; i++) th_set_grad(p[i], gv);
    dlt_tensor *tb = NULL;
    CHECK_OK(dlt_clip_grad_norm(&p[1], 1, 1.0, 2.0, &tb));
    for (int i = 0; i < 3; i++) CHECK_OK(dlt_optimizer_step(o[i]));
    CHECK(th_diff_bits(p[0], p[1]) == 0, "fused at 1.0 vs clip + step");
    CHECK(th_diff_bits(p[0], p[2]) != 0, "clipping at 1.0 changed nothing (the gradient norm is %g)",
          read_total(tb));
    CHECK(read_total(t) == read_total(tb) && read_total(tb) > 1.0f, "total %g vs %g", read_total(t),
          read_total(tb));
    dlt_tensor_release(tb);
    /* cleared: o[0] steps as o[2] does (both from their own parameters: compare the change) */
    CHECK_OK(dlt_optimizer_clear_clip_grad_norm(o[0]));
    dlt_tensor *t2 = NULL;
    CHECK_STATUS(dlt_optimizer_grad_norm(o[0], &t2), DLT_ERR_INVALID_STATE);
    const float last = read_total(t);
    CHECK_OK(dlt_tensor_copy_from_host(p[0], v, sizeof v));
    CHECK_OK(dlt_tensor_copy_from_host(p[2], v, sizeof v));
    for (int i = 0; i < 3; i += 2) {
        th_set_grad(p[i], gv);
        CHECK_OK(dlt_optimizer_step(o[i]));
    }
    CHECK(th_diff_bits(p[0], p[2]) == 0, "a cleared optimizer still clips");
    CHECK(read_total(t) == last, "a step without clipping wrote the total");
    /* set again (another norm): the same tensor, overwritten by the next step */
    CHECK_OK(dlt_optimizer_set_clip_grad_norm(o[0], INFINITY, 1.0));
    CHECK_OK(dlt_optimizer_grad_norm(o[0], &t2));
    CHECK(t2 == t, "a second set made a new total tensor");
    dlt_tensor_release(t2);
    th_set_grad(p[0], gv);
    CHECK_OK(dlt_optimizer_step(o[0]));
    CHECK(read_total(t) == 8.25f, "1-norm %g", read_total(t));
    /* a step without any gradient: total 0 (clip_grad_norm's tensor(0.)) */
    CHECK_OK(dlt_optimizer_zero_grad(o[0], 1));
    CHECK_OK(dlt_optimizer_step(o[0]));
    CHECK(read_total(t) == 0.0f, "total %g without gradients", read_total(t));
    /* the reference outlives the optimizer */
    for (int i = 0; i < 3; i++) dlt_optimizer_destroy(o[i]);
    CHECK(read_total(t) == 0.0f);
    dlt_tensor_release(t);
    for (int i = 0; i < 3; i++) dlt_tensor_release(p[i]);
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
    RUN(test_fused_matches_clip_then_step);
    RUN(test_fused_with_grad_scaler);
    RUN(test_fused_misuse_and_clear);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
