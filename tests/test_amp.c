/*
 * test_amp.c - the GradScaler on the CPU, against PyTorch's documented algorithm
 * (reference/pytorch-semantics.md section 1): scaling, the unscale arithmetic
 * (g * (float)(1/(double)scale)), skip on inf/NaN in any one gradient with parameters and
 * momentum left bit-identical, growth after exactly growth_interval clean updates, growth
 * suppressed at the fp32 limit, misuse errors, state round trip, the disabled scaler, two
 * optimizers with one scaler, and a small network trained with scaler + SGD momentum.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static dlt_ctx *g_ctx;

static dlt_tensor *make_param(const int64_t *shape, int32_t ndim, const float *vals) {
    dlt_tensor *t = NULL;
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_F32, shape, ndim, DLT_FORMAT_CONTIGUOUS, vals,
                                  (size_t)n * sizeof(float), &t));
    CHECK_OK(dlt_tensor_set_requires_grad(t, 1));
    return t;
}

/* p.grad = vals (overwriting, as after a set-to-none zero-grad and one backward) */
static void set_grad(dlt_tensor *p, const float *vals) {
    int64_t shape[8];
    int32_t nd = dlt_tensor_shape(p, shape, 8);
    dlt_tensor *g = NULL;
    CHECK_OK(dlt_tensor_from_host(dlt_tensor_ctx(p), DLT_F32, shape, nd, DLT_FORMAT_CONTIGUOUS, vals,
                                  dlt_tensor_nbytes(p), &g));
    CHECK_OK(dlt_zero_grad(&p, 1, 1));
    CHECK_OK(dlt_backward(p, g));
    dlt_tensor_release(g);
}

static void read_host(const dlt_tensor *t, float *out) {
    CHECK_OK(dlt_tensor_copy_to_host(t, out, dlt_tensor_nbytes(t)));
}

static double get_scale(dlt_grad_scaler *s) {
    double v = -1;
    CHECK_OK(dlt_grad_scaler_get_scale(s, &v));
    return v;
}

static int32_t get_tracker(dlt_grad_scaler *s) {
    int32_t t = -1;
    CHECK_OK(dlt_grad_scaler_get_state(s, NULL, NULL, NULL, NULL, &t));
    return t;
}

static void test_defaults_and_scale(void) {
    dlt_grad_scaler *s = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 65536.0, 2.0, 0.5, 2000, 1, &s));
    CHECK(dlt_grad_scaler_is_enabled(s) == 1);
    double sc, gf, bf;
    int32_t gi, tr;
    CHECK_OK(dlt_grad_scaler_get_state(s, &sc, &gf, &bf, &gi, &tr));
    CHECK(sc == 65536.0 && gf == 2.0 && bf == 0.5 && gi == 2000 && tr == 0);
    dlt_tensor *st = dlt_grad_scaler_scale_tensor(s);
    REQUIRE(st != NULL);
    CHECK(dlt_tensor_dtype(st) == DLT_F32 && dlt_tensor_numel(st) == 1);
    /* out = loss * scale, differentiable w.r.t. the loss */
    const int64_t one[1] = {1};
    const float lv = 0.7f;
    dlt_tensor *loss = make_param(one, 1, &lv), *out = NULL;
    CHECK_OK(dlt_grad_scaler_scale(s, loss, &out));
    double v = 0;
    CHECK_OK(dlt_tensor_item(out, &v));
    CHECK(v == (double)(0.7f * 65536.0f), "scaled %.9g", v);
    CHECK_OK(dlt_backward(out, NULL));
    float g = 0;
    read_host(dlt_tensor_grad(loss), &g);
    CHECK(g == 65536.0f, "d(scaled)/d(loss) = %.9g", g);
    dlt_tensor_release(out);
    dlt_tensor_release(loss);
    dlt_grad_scaler_destroy(s);
    dlt_grad_scaler_destroy(NULL);
}

static void test_create_validation(void) {
    dlt_grad_scaler *s = NULL;
    CHECK_STATUS(dlt_grad_scaler_create(NULL, 1, 2, 0.5, 1, 1, &s), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_grad_scaler_create(g_ctx, 1, 2, 0.5, 1, 1, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_grad_scaler_create(g_ctx, 1, 1.0, 0.5, 1, 1, &s), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_create(g_ctx, 1, 2, 1.0, 1, 1, &s), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_create(g_ctx, 1, 2, 0.0, 1, 1, &s), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_create(g_ctx, 1, 2, 0.5, 0, 1, &s), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_create(g_ctx, 0, 2, 0.5, 1, 1, &s), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_create(g_ctx, INFINITY, 2, 0.5, 1, 1, &s), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_create(g_ctx, 1e300, 2, 0.5, 1, 1, &s), DLT_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL);
    /* a disabled scaler does not validate (PyTorch asserts only when enabled) */
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 0, 0, 0, 0, 0, &s));
    dlt_grad_scaler_destroy(s);
}

/* unscale: g * (float)(1/(double)scale) in fp32, found_inf 0 for finite gradients; with
 * scale 1 the values are untouched. */
static void test_unscale_arithmetic(void) {
    const int64_t sh[1] = {6};
    const float v[6] = {0, 0, 0, 0, 0, 0};
    const float g[6] = {3.0f, -1.5f, 1e-30f, 7.25f, -1e30f, 0.1f};
    dlt_tensor *p = make_param(sh, 1, v);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(&p, 1, 0.1, 0, 0, 0, 0, 0, &opt));
    const double scales[3] = {3.0, 65536.0, 1.0};
    for (int k = 0; k < 3; k++) {
        dlt_grad_scaler *s = NULL;
        CHECK_OK(dlt_grad_scaler_create(g_ctx, scales[k], 2.0, 0.5, 100, 1, &s));
        set_grad(p, g);
        CHECK_OK(dlt_grad_scaler_unscale(s, opt));
        float got[6];
        read_host(dlt_tensor_grad(p), got);
        const float inv = (float)(1.0 / (double)(float)scales[k]);
        for (int e = 0; e < 6; e++) {
            float want = inv == 1.0f ? g[e] : g[e] * inv;
            CHECK(memcmp(&got[e], &want, 4) == 0, "scale %g element %d: %.9g vs %.9g", scales[k], e,
                  got[e], want);
        }
        int32_t f = -1;
        CHECK_OK(dlt_grad_scaler_found_inf(s, opt, &f));
        CHECK(f == 0);
        /* the step after an explicit unscale does not unscale again */
        CHECK_OK(dlt_grad_scaler_step(s, opt));
        read_host(dlt_tensor_grad(p), got);
        for (int e = 0; e < 6; e++) {
            float want = inv == 1.0f ? g[e] : g[e] * inv;
            CHECK(got[e] == want, "after step, element %d: %.9g vs %.9g", e, got[e], want);
        }
        CHECK_OK(dlt_grad_scaler_update(s));
        dlt_grad_scaler_destroy(s);
    }
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

/* growth after exactly growth_interval (3) clean updates; tracker 1, 2, 0 */
static void test_growth(void) {
    const int64_t sh[1] = {2};
    const float v[2] = {1, 2}, g[2] = {8, -8};
    dlt_tensor *p = make_param(sh, 1, v);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(&p, 1, 0.01, 0, 0, 0, 0, 0, &opt));
    dlt_grad_scaler *s = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 4.0, 2.0, 0.5, 3, 1, &s));
    const double want_scale[7] = {4, 4, 8, 8, 8, 16, 16};
    const int32_t want_tr[7] = {1, 2, 0, 1, 2, 0, 1};
    for (int i = 0; i < 7; i++) {
        set_grad(p, g);
        CHECK_OK(dlt_grad_scaler_step(s, opt));
        CHECK_OK(dlt_grad_scaler_update(s));
        CHECK(get_scale(s) == want_scale[i], "update %d: scale %g", i + 1, get_scale(s));
        CHECK(get_tracker(s) == want_tr[i], "update %d: tracker %d", i + 1, get_tracker(s));
    }
    int64_t count = 0;
    CHECK_OK(dlt_optimizer_step_count(opt, &count));
    CHECK(count == 7);
    dlt_grad_scaler_destroy(s);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

/* An inf or a NaN in any one gradient: the step is skipped (parameters and momentum
 * bit-identical, step count unchanged), the scale backs off, the tracker resets. */
static void test_backoff_and_skip(void) {
    const int64_t s0[2] = {3, 4}, s1[1] = {5}, s2[1] = {2};
    const int64_t *shapes[3] = {s0, s1, s2};
    const int32_t nds[3] = {2, 1, 1};
    const int64_t ns[3] = {12, 5, 2};
    dlt_tensor *ps[3];
    float vals[12];
    for (int i = 0; i < 3; i++) {
        for (int e = 0; e < 12; e++) vals[e] = 0.1f * (float)(e + 1) * (i + 1);
        ps[i] = make_param(shapes[i], nds[i], vals);
    }
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(ps, 3, 0.05, 0.9, 0.0, 1e-3, 1, 0, &opt));
    dlt_grad_scaler *s = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 1024.0, 2.0, 0.5, 1000, 1, &s));
    double scale = 1024.0;
    int64_t applied_steps = 0;
    for (int it = 0; it < 9; it++) {
        /* it % 3 == 0: clean; 1: inf in parameter it/3's gradient; 2: NaN there */
        int bad = it % 3, victim = it / 3;
        for (int i = 0; i < 3; i++) {
            float g[12];
            for (int e = 0; e < 12; e++) g[e] = (float)((e * 7 + i * 3 + it) % 11) - 5.0f;
            set_grad(ps[i], g);
        }
        if (bad) {
            /* written straight into the gradient buffer, after backward */
            dlt_tensor *gt = dlt_tensor_grad(ps[victim]);
            float g[12];
            read_host(gt, g);
            g[ns[victim] - 1] = bad == 1 ? -INFINITY : NAN;
            CHECK_OK(dlt_tensor_copy_from_host(gt, g, dlt_tensor_nbytes(gt)));
        }
        float before_p[3][12], before_b[3][12], after[12];
        for (int i = 0; i < 3; i++) {
            read_host(ps[i], before_p[i]);
            if (dlt_optimizer_momentum_buffer(opt, i)) read_host(dlt_optimizer_momentum_buffer(opt, i), before_b[i]);
        }
        CHECK_OK(dlt_grad_scaler_step(s, opt));
        int32_t found = -1, applied = -1;
        CHECK_OK(dlt_grad_scaler_found_inf(s, opt, &found));
        CHECK_OK(dlt_optimizer_last_step_applied(opt, &applied));
        CHECK(found == (bad != 0) && applied == (bad == 0), "it %d: found %d applied %d", it, found, applied);
        for (int i = 0; i < 3; i++) {
            read_host(ps[i], after);
            int same = memcmp(after, before_p[i], (size_t)ns[i] * 4) == 0;
            CHECK(same == (bad != 0), "it %d param %d: unchanged=%d", it, i, same);
            dlt_tensor *b = dlt_optimizer_momentum_buffer(opt, i);
            REQUIRE(b != NULL, "buffers are allocated on the first step with a gradient");
            if (bad && it > 0) {
                read_host(b, after);
                CHECK(memcmp(after, before_b[i], (size_t)ns[i] * 4) == 0, "it %d buffer %d changed", it, i);
            }
        }
        CHECK_OK(dlt_grad_scaler_update(s));
        if (bad) scale *= 0.5;
        applied_steps += bad == 0;
        CHECK(get_scale(s) == scale, "it %d: scale %g, expected %g", it, get_scale(s), scale);
        CHECK(get_tracker(s) == (bad ? 0 : 1), "it %d: tracker %d", it, get_tracker(s));
        int64_t count = -1;
        CHECK_OK(dlt_optimizer_step_count(opt, &count));
        CHECK(count == applied_steps, "it %d: step count %lld", it, (long long)count);
    }
    dlt_grad_scaler_destroy(s);
    dlt_optimizer_destroy(opt);
    for (int i = 0; i < 3; i++) dlt_tensor_release(ps[i]);
}

/* The first step that has a gradient is skipped: the buffer exists but holds no data, so
 * the next applied step still clones g (PyTorch has no state yet). */
static void test_skipped_first_step_keeps_buffer_fresh(void) {
    const int64_t sh[1] = {3};
    const float v[3] = {1, 2, 3}, gbad[3] = {1, INFINITY, 1}, g[3] = {0.5f, -0.25f, 2.0f};
    dlt_tensor *p = make_param(sh, 1, v);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(&p, 1, 0.1, 0.9, 0.5, 0, 0, 0, &opt));
    dlt_grad_scaler *s = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 1.0, 2.0, 0.5, 1000, 1, &s));
    set_grad(p, gbad);
    CHECK_OK(dlt_grad_scaler_step(s, opt));
    CHECK_OK(dlt_grad_scaler_update(s));
    set_grad(p, g);
    CHECK_OK(dlt_grad_scaler_step(s, opt));
    CHECK_OK(dlt_grad_scaler_update(s));
    float b[3], pv[3];
    read_host(dlt_optimizer_momentum_buffer(opt, 0), b);
    read_host(p, pv);
    CHECK(get_scale(s) == 0.5);
    for (int e = 0; e < 3; e++) {
        const float gu = g[e] * 2.0f; /* unscaled by 1/0.5 after the backoff */
        CHECK(b[e] == gu, "buffer %d = %.9g: the first applied step must clone g (%.9g)", e, b[e], gu);
        CHECK(pv[e] == fmaf(-0.1f, gu, v[e]), "param %d = %.9g", e, pv[e]);
    }
    dlt_grad_scaler_destroy(s);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

/* no growth past the fp32 range: 2^127 * 2 = inf, so the scale stays, the tracker resets */
static void test_growth_suppressed_at_fp32_limit(void) {
    const int64_t sh[1] = {1};
    const float v[1] = {1}, g[1] = {0};
    dlt_tensor *p = make_param(sh, 1, v);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(&p, 1, 0.01, 0, 0, 0, 0, 0, &opt));
    dlt_grad_scaler *s = NULL;
    const double big = ldexp(1.0, 127);
    CHECK_OK(dlt_grad_scaler_create(g_ctx, big, 2.0, 0.5, 2, 1, &s));
    for (int i = 0; i < 4; i++) {
        set_grad(p, g);
        CHECK_OK(dlt_grad_scaler_step(s, opt));
        CHECK_OK(dlt_grad_scaler_update(s));
        CHECK(get_scale(s) == big, "update %d: scale %g", i + 1, get_scale(s));
        CHECK(get_tracker(s) == (i % 2 == 0 ? 1 : 0), "update %d: tracker %d", i + 1, get_tracker(s));
    }
    /* growth by 1.5 from 2^126 * 1.5 ... still finite: grows */
    CHECK_OK(dlt_grad_scaler_set_state(s, ldexp(1.0, 126), 1.5, 0.5, 1, 0));
    set_grad(p, g);
    CHECK_OK(dlt_grad_scaler_step(s, opt));
    CHECK_OK(dlt_grad_scaler_update(s));
    CHECK(get_scale(s) == ldexp(1.5, 126), "scale %g", get_scale(s));
    dlt_grad_scaler_destroy(s);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

static void test_misuse(void) {
    const int64_t sh[1] = {2};
    const float v[2] = {1, 2}, g[2] = {1, 1};
    dlt_tensor *p = make_param(sh, 1, v);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(&p, 1, 0.01, 0, 0, 0, 0, 0, &opt));
    dlt_grad_scaler *s = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 2.0, 2.0, 0.5, 10, 1, &s));
    set_grad(p, g);
    CHECK_STATUS(dlt_grad_scaler_update(s), DLT_ERR_INVALID_STATE);
    CHECK(strstr(dlt_last_error(), "No inf checks were recorded prior to update.") != NULL, "%s", dlt_last_error());
    CHECK_OK(dlt_grad_scaler_unscale(s, opt));
    CHECK_STATUS(dlt_grad_scaler_unscale(s, opt), DLT_ERR_INVALID_STATE);
    CHECK(strstr(dlt_last_error(), "unscale_() has already been called on this optimizer since the last update().") != NULL,
          "%s", dlt_last_error());
    CHECK_OK(dlt_grad_scaler_step(s, opt));
    CHECK_STATUS(dlt_grad_scaler_unscale(s, opt), DLT_ERR_INVALID_STATE);
    CHECK(strstr(dlt_last_error(), "unscale_() is being called after step().") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_grad_scaler_step(s, opt), DLT_ERR_INVALID_STATE);
    CHECK(strstr(dlt_last_error(), "step() has already been called since the last update().") != NULL, "%s",
          dlt_last_error());
    /* the gradient was unscaled exactly once */
    float got[2];
    read_host(dlt_tensor_grad(p), got);
    CHECK(got[0] == 0.5f && got[1] == 0.5f, "grad %.9g %.9g", got[0], got[1]);
    CHECK_OK(dlt_grad_scaler_update(s));
    CHECK_STATUS(dlt_grad_scaler_update(s), DLT_ERR_INVALID_STATE);
    /* update with only an unscale is allowed (PyTorch records the inf check) */
    CHECK_OK(dlt_grad_scaler_unscale(s, opt));
    CHECK_OK(dlt_grad_scaler_update(s));
    /* update_to: sets the scale and resets the stages; bad values refused */
    CHECK_OK(dlt_grad_scaler_step(s, opt));
    CHECK_OK(dlt_grad_scaler_update_to(s, 128.0));
    CHECK(get_scale(s) == 128.0);
    CHECK_OK(dlt_grad_scaler_step(s, opt));
    CHECK_STATUS(dlt_grad_scaler_update_to(s, 0.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_update_to(s, NAN), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_grad_scaler_update(s));
    /* NULLs and contexts */
    CHECK_STATUS(dlt_grad_scaler_step(NULL, opt), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_grad_scaler_step(s, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_grad_scaler_unscale(s, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_grad_scaler_update(NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_grad_scaler_get_scale(s, NULL), DLT_ERR_NULL_POINTER);
    dlt_tensor *out = NULL;
    CHECK_STATUS(dlt_grad_scaler_scale(s, NULL, &out), DLT_ERR_NULL_POINTER);
    dlt_ctx *other = th_cpu_ctx();
    dlt_grad_scaler *s2 = NULL;
    CHECK_OK(dlt_grad_scaler_create(other, 2.0, 2.0, 0.5, 10, 1, &s2));
    CHECK_STATUS(dlt_grad_scaler_step(s2, opt), DLT_ERR_CONTEXT_MISMATCH);
    CHECK_STATUS(dlt_grad_scaler_scale(s2, p, &out), DLT_ERR_CONTEXT_MISMATCH);
    dlt_grad_scaler_destroy(s2);
    dlt_ctx_destroy(other);
    dlt_grad_scaler_destroy(s);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

static void test_state_round_trip(void) {
    dlt_grad_scaler *s = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 65536.0, 2.0, 0.5, 2000, 1, &s));
    CHECK_OK(dlt_grad_scaler_set_state(s, 1024.0, 3.0, 0.25, 7, 5));
    double sc, gf, bf;
    int32_t gi, tr;
    CHECK_OK(dlt_grad_scaler_get_state(s, &sc, &gf, &bf, &gi, &tr));
    CHECK(sc == 1024.0 && gf == 3.0 && bf == 0.25 && gi == 7 && tr == 5, "%g %g %g %d %d", sc, gf, bf, gi, tr);
    CHECK_STATUS(dlt_grad_scaler_set_state(s, -1.0, 2.0, 0.5, 7, 0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_set_state(s, 1.0, 0.5, 0.5, 7, 0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_set_state(s, 1.0, 2.0, 1.5, 7, 0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_set_state(s, 1.0, 2.0, 0.5, 0, 0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_grad_scaler_set_state(s, 1.0, 2.0, 0.5, 7, -1), DLT_ERR_INVALID_ARGUMENT);
    /* a refused set changes nothing */
    CHECK_OK(dlt_grad_scaler_get_state(s, &sc, &gf, &bf, &gi, &tr));
    CHECK(sc == 1024.0 && gf == 3.0 && bf == 0.25 && gi == 7 && tr == 5);
    /* the loaded tracker and interval drive the next growth: 5 + 1 != 7, 6 + 1 == 7 */
    const int64_t sh[1] = {1};
    const float v[1] = {1}, g[1] = {1};
    dlt_tensor *p = make_param(sh, 1, v);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(&p, 1, 0.01, 0, 0, 0, 0, 0, &opt));
    for (int i = 0; i < 2; i++) {
        set_grad(p, g);
        CHECK_OK(dlt_grad_scaler_step(s, opt));
        CHECK_OK(dlt_grad_scaler_update(s));
    }
    CHECK(get_scale(s) == 3072.0 && get_tracker(s) == 0, "scale %g tracker %d", get_scale(s), get_tracker(s));
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
    dlt_grad_scaler_destroy(s);
}

static void test_disabled(void) {
    dlt_grad_scaler *s = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 65536.0, 2.0, 0.5, 2000, 0, &s));
    CHECK(dlt_grad_scaler_is_enabled(s) == 0);
    CHECK(dlt_grad_scaler_scale_tensor(s) == NULL);
    CHECK(get_scale(s) == 1.0);
    const int64_t sh[1] = {2};
    const float v[2] = {1, 2}, g[2] = {4, -4};
    dlt_tensor *p = make_param(sh, 1, v), *out = NULL;
    CHECK_OK(dlt_grad_scaler_scale(s, p, &out));
    CHECK(out == p, "disabled scale returns the loss itself");
    dlt_tensor_release(out);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(&p, 1, 0.5, 0, 0, 0, 0, 0, &opt));
    set_grad(p, g);
    CHECK_OK(dlt_grad_scaler_unscale(s, opt)); /* no-op */
    float got[2];
    read_host(dlt_tensor_grad(p), got);
    CHECK(got[0] == 4.0f && got[1] == -4.0f);
    CHECK_OK(dlt_grad_scaler_step(s, opt));
    CHECK_OK(dlt_grad_scaler_step(s, opt)); /* plain steps: no stage tracking */
    read_host(p, got);
    CHECK(got[0] == -3.0f && got[1] == 6.0f, "%g %g", got[0], got[1]);
    CHECK_OK(dlt_grad_scaler_update(s));
    CHECK_OK(dlt_grad_scaler_update_to(s, 4.0));
    CHECK(get_scale(s) == 1.0);
    int32_t f = -1;
    CHECK_OK(dlt_grad_scaler_found_inf(s, opt, &f));
    CHECK(f == 0);
    CHECK_STATUS(dlt_grad_scaler_get_state(s, NULL, NULL, NULL, NULL, NULL), DLT_ERR_INVALID_STATE);
    CHECK_OK(dlt_grad_scaler_set_state(s, 8.0, 2.0, 0.5, 10, 0)); /* no-op, as PyTorch */
    CHECK(get_scale(s) == 1.0);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
    dlt_grad_scaler_destroy(s);
}

/* Two optimizers, one scaler: each step decides on its own; update sums the flags. */
static void test_two_optimizers(void) {
    const int64_t sh[1] = {2};
    const float v[2] = {1, 2}, g[2] = {2, 2}, gbad[2] = {NAN, 2};
    dlt_tensor *a = make_param(sh, 1, v), *b = make_param(sh, 1, v);
    dlt_optimizer *oa = NULL, *ob = NULL;
    CHECK_OK(dlt_sgd_create(&a, 1, 0.5, 0, 0, 0, 0, 0, &oa));
    CHECK_OK(dlt_sgd_create(&b, 1, 0.5, 0, 0, 0, 0, 0, &ob));
    dlt_grad_scaler *s = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 2.0, 2.0, 0.5, 1, 1, &s));
    set_grad(a, gbad);
    set_grad(b, g);
    CHECK_OK(dlt_grad_scaler_step(s, oa));
    CHECK_OK(dlt_grad_scaler_step(s, ob));
    CHECK_OK(dlt_grad_scaler_update(s));
    float ga[2], gb[2];
    read_host(a, ga);
    read_host(b, gb);
    CHECK(ga[0] == 1.0f && ga[1] == 2.0f, "a was skipped: %g %g", ga[0], ga[1]);
    CHECK(gb[0] == 0.5f && gb[1] == 1.5f, "b stepped with g/2: %g %g", gb[0], gb[1]);
    CHECK(get_scale(s) == 1.0, "backoff from the summed flags: %g", get_scale(s));
    int32_t fa = -1, fb = -1;
    CHECK_OK(dlt_grad_scaler_found_inf(s, oa, &fa));
    CHECK_OK(dlt_grad_scaler_found_inf(s, ob, &fb));
    CHECK(fa == 1 && fb == 0);
    /* next iteration only b is used: a's stale flag must not count */
    set_grad(b, g);
    CHECK_OK(dlt_grad_scaler_step(s, ob));
    CHECK_OK(dlt_grad_scaler_update(s));
    CHECK(get_scale(s) == 2.0, "growth (interval 1) from b alone: %g", get_scale(s));
    dlt_grad_scaler_destroy(s);
    dlt_optimizer_destroy(oa);
    dlt_optimizer_destroy(ob);
    dlt_tensor_release(a);
    dlt_tensor_release(b);
}

/* ---- a small network: 2-D blobs around 4 centres, MLP 2-16-4, SGD momentum + scaler ---- */

static uint32_t lcg = 777u;
static double urand(void) {
    lcg = lcg * 1664525u + 1013904223u;
    return (double)(lcg >> 8) / (double)(1u << 24);
}

static void test_train_small_network(void) {
    enum { N = 256, D = 2, H = 16, K = 4 };
    static float xs[N * D];
    static int32_t ys[N];
    const double cx[K] = {2, -2, 2, -2}, cy[K] = {2, 2, -2, -2};
    for (int i = 0; i < N; i++) {
        int c = i % K;
        ys[i] = c;
        xs[i * D] = (float)(cx[c] + (urand() - 0.5) * 2.0);
        xs[i * D + 1] = (float)(cy[c] + (urand() - 0.5) * 2.0);
    }
    const int64_t xsh[2] = {N, D}, ysh[1] = {N}, w1s[2] = {H, D}, b1s[1] = {H}, w2s[2] = {K, H}, b2s[1] = {K};
    dlt_tensor *x = NULL, *y = NULL, *w1 = NULL, *b1 = NULL, *w2 = NULL, *b2 = NULL;
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_F32, xsh, 2, 0, xs, sizeof xs, &x));
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I32, ysh, 1, 0, ys, sizeof ys, &y));
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 42));
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, w1s, 2, 0, &w1));
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, b1s, 1, 0, &b1));
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, w2s, 2, 0, &w2));
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, b2s, 1, 0, &b2));
    CHECK_OK(dlt_tensor_rand_uniform(w1, -1 / sqrt(D), 1 / sqrt(D)));
    CHECK_OK(dlt_tensor_rand_uniform(b1, -1 / sqrt(D), 1 / sqrt(D)));
    CHECK_OK(dlt_tensor_rand_uniform(w2, -1 / sqrt(H), 1 / sqrt(H)));
    CHECK_OK(dlt_tensor_rand_uniform(b2, -1 / sqrt(H), 1 / sqrt(H)));
    dlt_tensor *ps[4] = {w1, b1, w2, b2};
    for (int i = 0; i < 4; i++) CHECK_OK(dlt_tensor_set_requires_grad(ps[i], 1));
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(ps, 4, 0.05, 0.9, 0, 1e-4, 0, 0, &opt));
    /* the largest fp32 power-of-two scale; two batches carry an inf, so their steps must be
     * skipped without disturbing training */
    dlt_grad_scaler *s = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, ldexp(1.0, 127), 2.0, 0.5, 20, 1, &s));
    dlt_tensor *xbad = NULL;
    xs[5] = INFINITY;
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_F32, xsh, 2, 0, xs, sizeof xs, &xbad));
    xs[5] = 0.0f;
    int skipped = 0;
    double first_loss = 0, last_loss = 0;
    for (int it = 0; it < 150; it++) {
        dlt_tensor *h = NULL, *a = NULL, *logits = NULL, *loss = NULL, *scaled = NULL;
        CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
        CHECK_OK(dlt_linear(it == 10 || it == 40 ? xbad : x, w1, b1, &h));
        CHECK_OK(dlt_relu(h, &a));
        CHECK_OK(dlt_linear(a, w2, b2, &logits));
        CHECK_OK(dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss));
        CHECK_OK(dlt_grad_scaler_scale(s, loss, &scaled));
        CHECK_OK(dlt_backward(scaled, NULL));
        CHECK_OK(dlt_grad_scaler_step(s, opt));
        CHECK_OK(dlt_grad_scaler_update(s));
        int32_t applied = 1;
        CHECK_OK(dlt_optimizer_last_step_applied(opt, &applied));
        skipped += !applied;
        CHECK(applied == !(it == 10 || it == 40), "iteration %d: applied %d", it, applied);
        CHECK_OK(dlt_tensor_item(loss, &last_loss));
        if (it == 0) first_loss = last_loss;
        dlt_tensor_release(h);
        dlt_tensor_release(a);
        dlt_tensor_release(logits);
        dlt_tensor_release(loss);
        dlt_tensor_release(scaled);
    }
    /* training accuracy with the final weights */
    dlt_tensor *h = NULL, *a = NULL, *logits = NULL;
    int32_t prev;
    CHECK_OK(dlt_grad_set_enabled(g_ctx, 0, &prev));
    CHECK_OK(dlt_linear(x, w1, b1, &h));
    CHECK_OK(dlt_relu(h, &a));
    CHECK_OK(dlt_linear(a, w2, b2, &logits));
    CHECK_OK(dlt_grad_set_enabled(g_ctx, prev, NULL));
    static float lg[N * K];
    read_host(logits, lg);
    int correct = 0;
    for (int i = 0; i < N; i++) {
        int best = 0;
        for (int k = 1; k < K; k++)
            if (lg[i * K + k] > lg[i * K + best]) best = k;
        correct += best == ys[i];
    }
    double acc = (double)correct / N;
    printf("# loss %.4f -> %.4f, %d skipped steps, accuracy %.3f, final scale %g\n", first_loss,
           last_loss, skipped, acc, get_scale(s));
    CHECK(skipped == 2, "%d skipped steps", skipped);
    CHECK(acc > 0.95, "training accuracy %.3f", acc);
    CHECK(last_loss < first_loss * 0.5, "loss %.4f -> %.4f", first_loss, last_loss);
    dlt_tensor_release(h);
    dlt_tensor_release(a);
    dlt_tensor_release(logits);
    dlt_grad_scaler_destroy(s);
    dlt_optimizer_destroy(opt);
    for (int i = 0; i < 4; i++) dlt_tensor_release(ps[i]);
    dlt_tensor_release(x);
    dlt_tensor_release(xbad);
    dlt_tensor_release(y);
}

/* The AMP recipe end to end on a small convolutional network: conv-BN-ReLU-maxpool-flatten-
 * linear built from the modules, fp16 autocast, GradScaler, SGD with momentum, on the
 * learnable synthetic task (4 class pictures under noise) read through the loader. The
 * scaler starts at 65536 (its first steps overflow and are skipped, as in PyTorch); training
 * accuracy must pass 95%. */
static void test_train_conv_network_amp(void) {
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    dlt_module *net = NULL, *m = NULL;
    dlt_optimizer *opt = NULL;
    dlt_grad_scaler *sc = NULL;
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 5));
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 256, 4, 11, 1, &ds));
    CHECK_OK(dlt_loader_create(ds, 64, 1, 0, 3, &ld));
    CHECK_OK(dlt_sequential_create(g_ctx, &net));
    CHECK_OK(dlt_conv2d_create(g_ctx, 3, 16, 3, 3, 2, 1, 1, 1, 0, &m));
    CHECK_OK(dlt_sequential_append(net, NULL, m));
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 16, 1e-5, 0.1, &m));
    CHECK_OK(dlt_sequential_append(net, NULL, m));
    CHECK_OK(dlt_relu_create(g_ctx, &m));
    CHECK_OK(dlt_sequential_append(net, NULL, m));
    CHECK_OK(dlt_max_pool2d_create(g_ctx, 2, 2, 0, &m));
    CHECK_OK(dlt_sequential_append(net, NULL, m));
    CHECK_OK(dlt_flatten_create(g_ctx, &m));
    CHECK_OK(dlt_sequential_append(net, NULL, m));
    CHECK_OK(dlt_linear_create(g_ctx, 16 * 8 * 8, 4, 1, &m));
    CHECK_OK(dlt_sequential_append(net, NULL, m));
    dlt_tensor *params[16];
    int32_t np = 0;
    CHECK_OK(dlt_module_params(net, params, 16, &np));
    CHECK_OK(dlt_sgd_create(params, np, 0.05, 0.9, 0.0, 0.0, 0, 0, &opt));
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 65536.0, 2.0, 0.5, 2000, 1, &sc));
    double first = -1, last = -1;
    for (int epoch = 0; epoch < 6; epoch++) {
        CHECK_OK(dlt_loader_start_epoch(ld, epoch));
        for (;;) {
            dlt_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL, *scaled = NULL;
            int32_t has = 0;
            CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
            if (!has) break;
            CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
            CHECK_OK(dlt_autocast_begin(g_ctx, DLT_F16));
            CHECK_OK(dlt_module_forward(net, x, &logits));
            CHECK_OK(dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss));
            CHECK_OK(dlt_autocast_end(g_ctx));
            CHECK_OK(dlt_grad_scaler_scale(sc, loss, &scaled));
            CHECK_OK(dlt_backward(scaled, NULL));
            CHECK_OK(dlt_grad_scaler_step(sc, opt));
            CHECK_OK(dlt_grad_scaler_update(sc));
            CHECK_OK(dlt_tensor_item(loss, &last));
            if (first < 0) first = last;
            dlt_tensor_release(logits);
            dlt_tensor_release(loss);
            dlt_tensor_release(scaled);
        }
    }
    double acc = 0, scale = 0;
    CHECK_OK(dlt_autocast_begin(g_ctx, DLT_F16));
    CHECK_OK(dlt_evaluate_accuracy(net, ld, &acc));
    CHECK_OK(dlt_autocast_end(g_ctx));
    CHECK_OK(dlt_grad_scaler_get_scale(sc, &scale));
    printf("# conv net: loss %.4f -> %.4f, training accuracy %.3f, scale %g\n", first, last, acc, scale);
    CHECK(acc > 0.95, "training accuracy %.3f", acc);
    CHECK(scale < 65536.0, "the first fp16 steps overflow and back the scale off (scale %g)", scale);
    dlt_grad_scaler_destroy(sc);
    dlt_optimizer_destroy(opt);
    dlt_module_destroy(net);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
}

/* DLT_GRAD_QUEUE_MAX: the fp16 weight gradients queued for the fp32 accumulation are flushed
 * whenever the queue holds that many bytes. Same gradients, bit for bit; lower peak memory
 * when the queue would otherwise pile up (two 512x512 layers: 512 KiB of fp16 each, with
 * almost no activation memory). limit NULL: unset (the default, 4 MiB). */
static void queue_run(const char *limit, float *grads, int64_t n_grads, uint64_t *peak) {
    if (limit) setenv("DLT_GRAD_QUEUE_MAX", limit, 1);
    else unsetenv("DLT_GRAD_QUEUE_MAX");
    dlt_ctx *ctx = th_cpu_ctx(); /* the limit is read at a context's first backward */
    CHECK_OK(dlt_ctx_set_seed(ctx, 11));
    dlt_module *net = NULL, *m = NULL;
    CHECK_OK(dlt_sequential_create(ctx, &net));
    const int64_t widths[4] = {512, 512, 512, 10};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(dlt_linear_create(ctx, widths[i], widths[i + 1], 1, &m));
        CHECK_OK(dlt_sequential_append(net, NULL, m));
        if (i < 2) {
            CHECK_OK(dlt_relu_create(ctx, &m));
            CHECK_OK(dlt_sequential_append(net, NULL, m));
        }
    }
    const int64_t xs[2] = {2, 512}, ys[1] = {2};
    dlt_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, xs, 2, DLT_FORMAT_CONTIGUOUS, &x));
    CHECK_OK(dlt_tensor_rand_normal(x, 0.0, 1.0));
    const int64_t labels[2] = {3, 7};
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_I64, ys, 1, DLT_FORMAT_CONTIGUOUS, labels, sizeof labels, &y));
    CHECK_OK(dlt_memory_reset_peak(ctx));
    CHECK_OK(dlt_autocast_begin(ctx, DLT_F16));
    CHECK_OK(dlt_module_forward(net, x, &logits));
    CHECK_OK(dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss));
    CHECK_OK(dlt_autocast_end(ctx));
    CHECK_OK(dlt_backward(loss, NULL));
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_PEAK_ALLOCATED, peak));
    dlt_tensor *params[8];
    int32_t np = 0;
    CHECK_OK(dlt_module_params(net, params, 8, &np));
    int64_t off = 0;
    for (int32_t i = 0; i < np; i++) {
        const dlt_tensor *g = dlt_tensor_grad(params[i]);
        REQUIRE(g && dlt_tensor_dtype(g) == DLT_F32, "parameter %d has no fp32 gradient", i);
        const int64_t n = dlt_tensor_numel(g);
        REQUIRE(off + n <= n_grads, "more gradient values than expected");
        CHECK_OK(dlt_tensor_copy_to_host(g, grads + off, (size_t)n * sizeof(float)));
        off += n;
    }
    CHECK(off == n_grads, "%lld gradient values, expected %lld", (long long)off, (long long)n_grads);
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    dlt_tensor_release(logits);
    dlt_tensor_release(loss);
    dlt_module_destroy(net);
    dlt_ctx_destroy(ctx);
    unsetenv("DLT_GRAD_QUEUE_MAX");
}

static void test_grad_queue_limit(void) {
    const int64_t n = 512 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10;
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    REQUIRE(a && b, "out of memory");
    uint64_t peak_all = 0, peak_each = 0, peak_default = 0;
    queue_run("1000000000", a, n, &peak_all);
    queue_run("1", b, n, &peak_each);
    CHECK(memcmp(a, b, (size_t)n * sizeof *a) == 0, "gradients differ with DLT_GRAD_QUEUE_MAX=1");
    queue_run(NULL, b, n, &peak_default);
    CHECK(memcmp(a, b, (size_t)n * sizeof *a) == 0, "gradients differ with the default limit");
    /* 1.03 MiB of queued gradients stay under the default 4 MiB: queued until the end */
    CHECK(peak_default == peak_all, "default peak %llu vs %llu", (unsigned long long)peak_default,
          (unsigned long long)peak_all);
    int nonzero = 0;
    for (int64_t i = 0; i < n; i++) nonzero += a[i] != 0.0f;
    CHECK(nonzero > n / 4, "only %d of %lld gradient values are non-zero", nonzero, (long long)n);
    /* the first two layers' fp16 weight gradients (512 KiB each) no longer wait together */
    printf("# peak: queue until the end %.0f KiB, flushed at every gradient %.0f KiB\n",
           peak_all / 1024.0, peak_each / 1024.0);
    CHECK(peak_each + 400 * 1024 <= peak_all, "peak %llu with the limit vs %llu without",
          (unsigned long long)peak_each, (unsigned long long)peak_all);
    free(a);
    free(b);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    RUN(test_defaults_and_scale);
    RUN(test_create_validation);
    RUN(test_unscale_arithmetic);
    RUN(test_growth);
    RUN(test_backoff_and_skip);
    RUN(test_skipped_first_step_keeps_buffer_fresh);
    RUN(test_growth_suppressed_at_fp32_limit);
    RUN(test_misuse);
    RUN(test_state_round_trip);
    RUN(test_disabled);
    RUN(test_two_optimizers);
    RUN(test_train_small_network);
    RUN(test_train_conv_network_amp);
    RUN(test_grad_queue_limit);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
