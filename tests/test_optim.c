/*
 * test_optim.c - SGD and learning-rate schedules on the CPU.
 *
 * Every valid combination of (momentum, dampening, weight_decay, nesterov, maximize) runs
 * six steps over four parameters (one never gets a gradient, one gets its first gradient
 * at step 3, one is channels-last), with an lr change after step 3, against
 *  (a) a float64 loop of PyTorch's rule (tolerance: fp32 rounding over six steps), and
 *  (b) an fp32 loop with PyTorch's foreach rounding (constants rounded to f32, FMAs where
 *      the foreach kernels use alpha), which must match bit for bit.
 * Schedules are checked against their closed forms written here (nanoGPT's get_lr as its
 * train.py writes it), including that a step the GradScaler skips advances nothing.
 * Adam/AdamW: test_adamw.c; clipping: test_clip_grad_norm.c.
 */
#include <math.h>
#include <stdint.h>

#include "harness.h"

static dlt_ctx *g_ctx;

/* ---- small helpers ---- */

static uint32_t rng_state = 12345u;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((double)(rng_state >> 8) / (double)(1u << 23) - 1.0);
}

static dlt_tensor *make_param(const int64_t *shape, int32_t ndim, int32_t format, const float *vals) {
    dlt_tensor *t = NULL;
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, shape, ndim, format, &t));
    CHECK_OK(dlt_tensor_copy_from_host(t, vals, (size_t)n * sizeof(float)));
    CHECK_OK(dlt_tensor_set_requires_grad(t, 1));
    return t;
}


static void read_host(const dlt_tensor *t, float *out) {
    CHECK_OK(dlt_tensor_copy_to_host(t, out, dlt_tensor_nbytes(t)));
}

static int same_bits(const float *a, const float *b, int64_t n, int64_t *where) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            *where = i;
            return 0;
        }
    return 1;
}

/* ---- reference models of one parameter ---- */

typedef struct sgd_opts {
    double momentum, dampening, weight_decay;
    int32_t nesterov, maximize;
} sgd_opts;

#define MAXE 64
typedef struct ref_param {
    int64_t n;
    double p[MAXE], b[MAXE];
    float p32[MAXE], b32[MAXE], g32[MAXE]; /* g32: the gradient after the step */
    int has_buf;
} ref_param;

/* PyTorch's rule in float64. */
static void ref_step64(ref_param *r, const float *grad, double lr, const sgd_opts *o) {
    for (int64_t e = 0; e < r->n; e++) {
        double d = o->maximize ? -(double)grad[e] : (double)grad[e];
        if (o->weight_decay != 0) d += o->weight_decay * r->p[e];
        if (o->momentum != 0) {
            r->b[e] = r->has_buf ? o->momentum * r->b[e] + (1 - o->dampening) * d : d;
            d = o->nesterov ? d + o->momentum * r->b[e] : r->b[e];
        }
        r->p[e] -= lr * d;
    }
}

/* PyTorch's foreach kernels in fp32: scalars rounded to f32, a + alpha*b as one FMA,
 * buf*momentum rounded on its own, and the nesterov add written into .grad when neither
 * maximize nor weight decay made a copy of it. */
static void ref_step32(ref_param *r, const float *grad, float lr32, const sgd_opts *o) {
    const float mu = (float)o->momentum, damp = (float)(1.0 - o->dampening), wd = (float)o->weight_decay;
    for (int64_t e = 0; e < r->n; e++) {
        float g = o->maximize ? -grad[e] : grad[e];
        r->g32[e] = grad[e];
        if (o->weight_decay != 0) g = fmaf(wd, r->p32[e], g);
        if (o->momentum != 0) {
            if (r->has_buf) {
                float t = r->b32[e] * mu;
                r->b32[e] = fmaf(damp, g, t);
            } else {
                r->b32[e] = g;
            }
            g = o->nesterov ? fmaf(mu, r->b32[e], g) : r->b32[e];
            if (o->nesterov && !o->maximize && o->weight_decay == 0) r->g32[e] = g;
        }
        r->p32[e] = fmaf(-lr32, g, r->p32[e]);
    }
}

/* ---- SGD over every option combination ---- */

static sgd_opts g_combo;

static void test_sgd_combo(void) {
    const sgd_opts o = g_combo;
    const int64_t s0[2] = {3, 5}, s1[1] = {7}, s2[2] = {2, 3}, s3[4] = {2, 3, 2, 2};
    const int64_t *shapes[4] = {s0, s1, s2, s3};
    const int32_t nds[4] = {2, 1, 2, 4};
    const int32_t fmts[4] = {DLT_FORMAT_CONTIGUOUS, DLT_FORMAT_CONTIGUOUS, DLT_FORMAT_CONTIGUOUS,
                             DLT_FORMAT_CHANNELS_LAST};
    /* first step (1-based) at which each parameter has a gradient; 0 = never */
    const int first_grad[4] = {1, 0, 3, 1};
    ref_param ref[4];
    dlt_tensor *params[4];
    memset(ref, 0, sizeof ref);
    for (int i = 0; i < 4; i++) {
        int64_t n = 1;
        for (int32_t d = 0; d < nds[i]; d++) n *= shapes[i][d];
        ref[i].n = n;
        float v[MAXE];
        for (int64_t e = 0; e < n; e++) {
            v[e] = frand();
            ref[i].p[e] = v[e];
            ref[i].p32[e] = v[e];
        }
        params[i] = make_param(shapes[i], nds[i], fmts[i], v);
    }
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(params, 4, 0.05, o.momentum, o.dampening, o.weight_decay, o.nesterov,
                            o.maximize, &opt));
    double mom, damp, wd;
    int32_t nest, maxi;
    CHECK_OK(dlt_sgd_get_options(opt, &mom, &damp, &wd, &nest, &maxi));
    CHECK(mom == o.momentum && damp == o.dampening && wd == o.weight_decay &&
          nest == o.nesterov && maxi == o.maximize);
    CHECK(dlt_optimizer_num_params(opt) == 4 && dlt_optimizer_param(opt, 2) == params[2] &&
          dlt_optimizer_param(opt, 4) == NULL && dlt_optimizer_param(opt, -1) == NULL);

    double lr = 0.05;
    for (int step = 1; step <= 6; step++) {
        if (step == 4) {
            lr = 0.02; /* an lr change between steps: no rebuild */
            CHECK_OK(dlt_optimizer_set_lr(opt, lr));
        }
        float grads[4][MAXE];
        for (int i = 0; i < 4; i++) {
            if (!first_grad[i] || step < first_grad[i]) continue;
            for (int64_t e = 0; e < ref[i].n; e++) grads[i][e] = frand();
            th_set_grad(params[i], grads[i]);
        }
        CHECK_OK(dlt_optimizer_step(opt));
        for (int i = 0; i < 4; i++) {
            if (!first_grad[i] || step < first_grad[i]) continue;
            ref_step64(&ref[i], grads[i], lr, &o);
            ref_step32(&ref[i], grads[i], (float)lr, &o);
            ref[i].has_buf = 1;
        }
        for (int i = 0; i < 4; i++) {
            float got[MAXE];
            int64_t at = 0;
            read_host(params[i], got);
            CHECK(same_bits(got, ref[i].p32, ref[i].n, &at),
                  "step %d param %d element %lld: %.9g vs fp32 foreach %.9g", step, i,
                  (long long)at, got[at], ref[i].p32[at]);
            double worst = 0;
            for (int64_t e = 0; e < ref[i].n; e++) {
                double err = fabs((double)got[e] - ref[i].p[e]) / (1.0 + fabs(ref[i].p[e]));
                if (err > worst) worst = err;
            }
            CHECK(worst < 2e-6, "step %d param %d: error %.3g against float64", step, i, worst);
            dlt_tensor *b = dlt_optimizer_momentum_buffer(opt, i);
            int want_buf = o.momentum != 0 && first_grad[i] && step >= first_grad[i];
            CHECK((b != NULL) == want_buf, "step %d param %d: buffer %p, expected %s", step, i,
                  (void *)b, want_buf ? "one" : "none");
            if (b && want_buf) {
                read_host(b, got);
                CHECK(same_bits(got, ref[i].b32, ref[i].n, &at), "step %d buf %d element %lld: %.9g vs %.9g",
                      step, i, (long long)at, got[at], ref[i].b32[at]);
                double bw = 0;
                for (int64_t e = 0; e < ref[i].n; e++)
                    bw = fmax(bw, fabs((double)got[e] - ref[i].b[e]) / (1.0 + fabs(ref[i].b[e])));
                CHECK(bw < 2e-6, "step %d buf %d: error %.3g against float64", step, i, bw);
            }
            if (first_grad[i] && step >= first_grad[i]) {
                read_host(dlt_tensor_grad(params[i]), got);
                CHECK(same_bits(got, ref[i].g32, ref[i].n, &at),
                      "step %d grad %d element %lld after the step: %.9g vs %.9g", step, i,
                      (long long)at, got[at], ref[i].g32[at]);
            } else {
                CHECK(dlt_tensor_grad(params[i]) == NULL);
            }
        }
    }
    int64_t count = -1;
    int32_t applied = -1;
    double got_lr = 0;
    CHECK_OK(dlt_optimizer_step_count(opt, &count));
    CHECK_OK(dlt_optimizer_last_step_applied(opt, &applied));
    CHECK_OK(dlt_optimizer_get_lr(opt, &got_lr));
    CHECK(count == 6 && applied == 1 && got_lr == (double)0.02f, "count %lld applied %d lr %.9g",
          (long long)count, applied, got_lr);
    dlt_optimizer_destroy(opt);
    for (int i = 0; i < 4; i++) dlt_tensor_release(params[i]);
}

/* zero_grad through the optimizer: set_to_none skips the parameter at the next step,
 * set_to_none=0 steps with a zero gradient (weight decay still moves it). */
static void test_zero_grad_and_skip(void) {
    const int64_t s[1] = {4};
    const float v[4] = {1, -2, 3, -4}, g[4] = {0.5f, 0.25f, -1, 2};
    dlt_tensor *p = make_param(s, 1, DLT_FORMAT_CONTIGUOUS, v);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(&p, 1, 0.1, 0.9, 0, 0.5, 0, 0, &opt));
    /* no gradient at all: nothing happens, no buffer, but the step counts */
    CHECK_OK(dlt_optimizer_step(opt));
    float got[4];
    read_host(p, got);
    CHECK(memcmp(got, v, sizeof v) == 0);
    CHECK(dlt_optimizer_momentum_buffer(opt, 0) == NULL);
    th_set_grad(p, g);
    CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
    CHECK(dlt_tensor_grad(p) == NULL);
    CHECK_OK(dlt_optimizer_step(opt));
    read_host(p, got);
    CHECK(memcmp(got, v, sizeof v) == 0, "a parameter whose gradient is none must not move");
    CHECK(dlt_optimizer_momentum_buffer(opt, 0) == NULL);
    th_set_grad(p, g);
    CHECK_OK(dlt_optimizer_zero_grad(opt, 0));
    REQUIRE(dlt_tensor_grad(p) != NULL);
    CHECK_OK(dlt_optimizer_step(opt));
    read_host(p, got);
    for (int e = 0; e < 4; e++) {
        float want = fmaf(-0.1f, fmaf(0.5f, v[e], 0.0f), v[e]);
        CHECK(got[e] == want, "element %d: %.9g vs %.9g", e, got[e], want);
    }
    CHECK(dlt_optimizer_momentum_buffer(opt, 0) != NULL);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

/* The step writes the autocast copies: f16 and bf16 round-to-nearest-even of the new
 * fp32 values (compared as bits through a cast of the parameter). */
static void test_lp_copy_refresh(void) {
    dlt_tensor *p = NULL;
    const int64_t s[2] = {5, 7};
    float v[35], g[35];
    for (int e = 0; e < 35; e++) {
        v[e] = frand() * 3.0f;
        g[e] = frand();
    }
    p = make_param(s, 2, DLT_FORMAT_CONTIGUOUS, v);
    /* a linear forward under autocast makes the copies; without the lead's autocast we
     * skip: they are created by dlt__autocast_operand through dlt_linear */
    const int64_t xs[2] = {3, 7};
    dlt_tensor *x = NULL, *y = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, xs, 2, DLT_FORMAT_CONTIGUOUS, &x));
    for (int k = 0; k < 2; k++) {
        dlt_status st = dlt_autocast_begin(g_ctx, k == 0 ? DLT_F16 : DLT_BF16);
        if (st != DLT_OK) {
            dlt_tensor_release(x);
            dlt_tensor_release(p);
            SKIP("autocast is not available yet: %s", dlt_last_error());
        }
        CHECK_OK(dlt_linear(x, p, NULL, &y));
        CHECK_OK(dlt_autocast_end(g_ctx));
        dlt_tensor_release(y);
        y = NULL;
    }
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(&p, 1, 0.3, 0.0, 0, 0, 0, 0, &opt));
    for (int step = 0; step < 2; step++) {
        th_set_grad(p, g);
        CHECK_OK(dlt_optimizer_step(opt));
    }
    /* the copies must now equal a fresh cast of the new master: run linear again with an
     * identity input and compare with a cast the test makes itself */
    for (int k = 0; k < 2; k++) {
        int32_t dt = k == 0 ? DLT_F16 : DLT_BF16;
        dlt_tensor *fresh = NULL;
        CHECK_OK(dlt_tensor_cast(p, dt, &fresh));
        float *want = th_read_f32(fresh);
        /* y = I * w^T through the autocast copy */
        float eye[49];
        for (int i = 0; i < 49; i++) eye[i] = (i % 8) == 0 ? 1.0f : 0.0f;
        const int64_t es[2] = {7, 7};
        dlt_tensor *id = th_tensor_f32(g_ctx, eye, es, 2);
        CHECK_OK(dlt_autocast_begin(g_ctx, dt));
        CHECK_OK(dlt_linear(id, p, NULL, &y));
        CHECK_OK(dlt_autocast_end(g_ctx));
        float *got = th_read_f32(y); /* [7, 5] = w^T */
        int bad = 0;
        for (int i = 0; i < 5 && !bad; i++)
            for (int j = 0; j < 7; j++)
                if (got[j * 5 + i] != want[i * 7 + j]) {
                    CHECK(0, "%s copy [%d,%d]: %.9g vs fresh cast %.9g", k ? "bf16" : "f16", i, j,
                          got[j * 5 + i], want[i * 7 + j]);
                    bad = 1;
                    break;
                }
        free(got);
        free(want);
        dlt_tensor_release(y);
        y = NULL;
        dlt_tensor_release(id);
        dlt_tensor_release(fresh);
    }
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(x);
    dlt_tensor_release(p);
}

static void test_validation(void) {
    const int64_t s[1] = {3};
    const float v[3] = {1, 2, 3};
    dlt_tensor *p = make_param(s, 1, DLT_FORMAT_CONTIGUOUS, v);
    dlt_tensor *q = make_param(s, 1, DLT_FORMAT_CONTIGUOUS, v);
    dlt_tensor *ps[2] = {p, q};
    dlt_optimizer *opt = NULL;
    CHECK_STATUS(dlt_sgd_create(ps, 2, -0.1, 0, 0, 0, 0, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "Invalid learning rate") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_sgd_create(ps, 2, NAN, 0, 0, 0, 0, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_sgd_create(ps, 2, 0.1, -0.5, 0, 0, 0, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "Invalid momentum value") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_sgd_create(ps, 2, 0.1, 0, 0, -1e-4, 0, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "Invalid weight_decay value") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_sgd_create(ps, 2, 0.1, 0, 0, 0, 1, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "Nesterov momentum requires a momentum and zero dampening") != NULL,
          "%s", dlt_last_error());
    CHECK_STATUS(dlt_sgd_create(ps, 2, 0.1, 0.9, 0.1, 0, 1, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_sgd_create(ps, 0, 0.1, 0, 0, 0, 0, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    /* a tensor listed twice (a tied weight) is one parameter */
    dlt_tensor *dup[3] = {p, q, p};
    CHECK_OK(dlt_sgd_create(dup, 3, 0.1, 0, 0, 0, 0, 0, &opt));
    CHECK(dlt_optimizer_num_params(opt) == 2 && dlt_optimizer_param(opt, 0) == p &&
          dlt_optimizer_param(opt, 1) == q);
    dlt_optimizer_destroy(opt);
    opt = NULL;
    CHECK_STATUS(dlt_sgd_create(NULL, 2, 0.1, 0, 0, 0, 0, 0, &opt), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_sgd_create(ps, 2, 0.1, 0, 0, 0, 0, 0, NULL), DLT_ERR_NULL_POINTER);
    dlt_tensor *withnull[2] = {p, NULL};
    CHECK_STATUS(dlt_sgd_create(withnull, 2, 0.1, 0, 0, 0, 0, 0, &opt), DLT_ERR_NULL_POINTER);
    dlt_tensor *nograd = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, s, 1, DLT_FORMAT_CONTIGUOUS, &nograd));
    dlt_tensor *ng[2] = {p, nograd};
    CHECK_STATUS(dlt_sgd_create(ng, 2, 0.1, 0, 0, 0, 0, 0, &opt), DLT_ERR_INVALID_ARGUMENT);
    dlt_tensor *half = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F16, s, 1, DLT_FORMAT_CONTIGUOUS, &half));
    CHECK_OK(dlt_tensor_set_requires_grad(half, 1));
    dlt_tensor *hp[2] = {p, half};
    CHECK_STATUS(dlt_sgd_create(hp, 2, 0.1, 0, 0, 0, 0, 0, &opt), DLT_ERR_DTYPE);
    /* parameters from two contexts */
    dlt_ctx *other = th_cpu_ctx();
    dlt_tensor *r = NULL;
    CHECK_OK(dlt_tensor_zeros(other, DLT_F32, s, 1, DLT_FORMAT_CONTIGUOUS, &r));
    CHECK_OK(dlt_tensor_set_requires_grad(r, 1));
    dlt_tensor *mixed[2] = {p, r};
    CHECK_STATUS(dlt_sgd_create(mixed, 2, 0.1, 0, 0, 0, 0, 0, &opt), DLT_ERR_CONTEXT_MISMATCH);
    CHECK(opt == NULL, "a failed create must not write the out-pointer");
    /* nesterov with momentum and no dampening is fine; so is lr 0 */
    CHECK_OK(dlt_sgd_create(ps, 2, 0.0, 0.9, 0, 0, 1, 1, &opt));
    CHECK_STATUS(dlt_optimizer_set_lr(opt, -1.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_set_lr(NULL, 1.0), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_optimizer_get_lr(opt, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_optimizer_step(NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_optimizer_step_count(opt, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_optimizer_last_step_applied(NULL, &(int32_t){0}), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_sgd_get_options(NULL, NULL, NULL, NULL, NULL, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_lr_schedule_step(opt, 0, 0.5), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_step(opt, 3, NAN), DLT_ERR_INVALID_ARGUMENT);
    const int64_t bad_ms[3] = {5, 3, 8}, ms[3] = {1, 3, 8};
    CHECK_STATUS(dlt_lr_schedule_multistep(opt, bad_ms, 3, 0.1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_multistep(opt, ms, 0, 0.1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_multistep(opt, ms, 33, 0.1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_multistep(opt, NULL, 3, 0.1), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_lr_schedule_cosine(opt, 0, 0.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_cosine(opt, 10, -1.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_warmup(opt, 0, 0.5), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_warmup(opt, 5, 0.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_warmup(opt, 5, 1.5), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_clear(NULL), DLT_ERR_NULL_POINTER);
    CHECK(dlt_optimizer_momentum_buffer(opt, 0) == NULL && dlt_optimizer_momentum_buffer(NULL, 0) == NULL);
    CHECK(dlt_optimizer_num_params(NULL) == 0);
    dlt_optimizer_destroy(opt);
    dlt_optimizer_destroy(NULL);
    /* the optimizer keeps its parameters alive */
    CHECK_OK(dlt_sgd_create(ps, 2, 0.1, 0, 0, 0, 0, 0, &opt));
    dlt_tensor_release(q);
    CHECK(dlt_tensor_numel(dlt_optimizer_param(opt, 1)) == 3);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(r);
    dlt_ctx_destroy(other);
    dlt_tensor_release(half);
    dlt_tensor_release(nograd);
    dlt_tensor_release(p);
}

/* ---- schedules ---- */

typedef double (*closed_fn)(int64_t t);
static double base_lr = 0.1;
static double cf_step(int64_t t) { return base_lr * pow(0.5, (double)(t / 3)); }
static double cf_multistep(int64_t t) {
    int k = (t >= 2) + (t >= 5) + (t >= 7);
    return base_lr * pow(0.1, k);
}
static double cf_cosine(int64_t t) {
    const double T = 10, eta = 0.001;
    double tt = t < 10 ? (double)t : T;
    return eta + (base_lr - eta) * (1 + cos(M_PI * tt / T)) / 2;
}
static double warm(int64_t t) { return 0.25 + 0.75 * (double)(t < 4 ? t : 4) / 4.0; }
static double cf_warmup(int64_t t) { return base_lr * warm(t); }
static double cf_warm_step(int64_t t) { return cf_step(t) * warm(t); }
static double cf_warm_cosine(int64_t t) { return cf_cosine(t) * warm(t); }

/* nanoGPT's get_lr(it) as train.py writes it (lr 0.1, warmup 3, decay 10, min_lr 0.01) */
static double cf_nanogpt(int64_t it) {
    const int64_t warmup_iters = 3, lr_decay_iters = 10;
    const double learning_rate = base_lr, min_lr = 0.01;
    if (it < warmup_iters) return learning_rate * (double)(it + 1) / (double)(warmup_iters + 1);
    if (it > lr_decay_iters) return min_lr;
    double decay_ratio = (double)(it - warmup_iters) / (double)(lr_decay_iters - warmup_iters);
    double coeff = 0.5 * (1.0 + cos(M_PI * decay_ratio));
    return min_lr + coeff * (learning_rate - min_lr);
}
/* ConstantLR(factor 0.5, total_iters 4) */
static double cf_constant(int64_t t) { return t < 4 ? base_lr * 0.5 : base_lr; }

/* |a - b| within one fp32 ulp of b */
static int within_ulp(double a, double b) {
    return fabs(a - b) <= ldexp(fabs(b), -23) + 1e-30;
}

static dlt_optimizer *sched_opt(dlt_tensor **p) {
    const int64_t s[1] = {2};
    const float v[2] = {1, 2}, g[2] = {0.5f, -0.5f};
    *p = make_param(s, 1, DLT_FORMAT_CONTIGUOUS, v);
    th_set_grad(*p, g);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(p, 1, base_lr, 0.9, 0, 0, 0, 0, &opt));
    return opt;
}

static void check_sequence(dlt_optimizer *opt, closed_fn f, int64_t t0, int64_t t1, const char *name) {
    for (int64_t t = t0; t <= t1; t++) {
        if (t > t0) CHECK_OK(dlt_optimizer_step(opt));
        double lr = 0;
        int64_t count = 0;
        CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
        CHECK_OK(dlt_optimizer_step_count(opt, &count));
        CHECK(count == t, "%s: step count %lld, expected %lld", name, (long long)count, (long long)t);
        CHECK(within_ulp(lr, f(t)), "%s: t=%lld lr %.9g, closed form %.9g", name, (long long)t, lr, f(t));
    }
}

static void test_schedule_step(void) {
    dlt_tensor *p;
    dlt_optimizer *opt = sched_opt(&p);
    CHECK_OK(dlt_lr_schedule_step(opt, 3, 0.5));
    check_sequence(opt, cf_step, 0, 12, "StepLR");
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

static void test_schedule_multistep(void) {
    dlt_tensor *p;
    dlt_optimizer *opt = sched_opt(&p);
    const int64_t ms[3] = {2, 5, 7};
    CHECK_OK(dlt_lr_schedule_multistep(opt, ms, 3, 0.1));
    check_sequence(opt, cf_multistep, 0, 10, "MultiStepLR");
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

static void test_schedule_cosine(void) {
    dlt_tensor *p;
    dlt_optimizer *opt = sched_opt(&p);
    CHECK_OK(dlt_lr_schedule_cosine(opt, 10, 0.001));
    check_sequence(opt, cf_cosine, 0, 14, "CosineAnnealingLR");
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

static void test_schedule_warmup(void) {
    dlt_tensor *p;
    dlt_optimizer *opt = sched_opt(&p);
    CHECK_OK(dlt_lr_schedule_warmup(opt, 4, 0.25));
    check_sequence(opt, cf_warmup, 0, 7, "LinearLR");
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
    /* warm-up times a main schedule, set in either order */
    opt = sched_opt(&p);
    CHECK_OK(dlt_lr_schedule_warmup(opt, 4, 0.25));
    CHECK_OK(dlt_lr_schedule_step(opt, 3, 0.5));
    check_sequence(opt, cf_warm_step, 0, 9, "LinearLR x StepLR");
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
    opt = sched_opt(&p);
    CHECK_OK(dlt_lr_schedule_cosine(opt, 10, 0.001));
    CHECK_OK(dlt_lr_schedule_warmup(opt, 4, 0.25));
    check_sequence(opt, cf_warm_cosine, 0, 12, "LinearLR x Cosine");
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

/* nanoGPT's warm-up + cosine (not LinearLR x CosineAnnealingLR: its warm-up starts at
 * lr/(W+1) and reaches lr only at t = W), and ConstantLR. */
static void test_schedule_warmup_cosine(void) {
    dlt_tensor *p;
    dlt_optimizer *opt = sched_opt(&p);
    CHECK_OK(dlt_lr_schedule_warmup_cosine(opt, 3, 10, 0.01));
    check_sequence(opt, cf_nanogpt, 0, 14, "nanoGPT get_lr");
    /* replaced by another main schedule; warmup_iters 0 is allowed */
    CHECK_OK(dlt_lr_schedule_constant(opt, 0.5, 4));
    double lr = 0;
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK(within_ulp(lr, base_lr), "ConstantLR after its total_iters: %.9g", lr);
    CHECK_OK(dlt_lr_schedule_warmup_cosine(opt, 0, 20, 0.0));
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
    opt = sched_opt(&p);
    CHECK_OK(dlt_lr_schedule_constant(opt, 0.5, 4));
    check_sequence(opt, cf_constant, 0, 7, "ConstantLR");
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

/* clear keeps the lr; a later schedule starts from it; set_lr resets the base */
static void test_schedule_clear_and_set_lr(void) {
    dlt_tensor *p;
    dlt_optimizer *opt = sched_opt(&p);
    CHECK_OK(dlt_lr_schedule_step(opt, 2, 0.5));
    for (int i = 0; i < 4; i++) CHECK_OK(dlt_optimizer_step(opt));
    double lr = 0;
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK(within_ulp(lr, 0.1 * 0.25), "lr %.9g", lr);
    CHECK_OK(dlt_lr_schedule_clear(opt));
    for (int i = 0; i < 3; i++) CHECK_OK(dlt_optimizer_step(opt));
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK(within_ulp(lr, 0.025), "after clear the lr stays: %.9g", lr);
    /* t = 7 now; a new StepLR(1, 0.5) takes base 0.025 and applies gamma^7 at once */
    CHECK_OK(dlt_lr_schedule_step(opt, 1, 0.5));
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK(within_ulp(lr, (double)0.025f * pow(0.5, 7)), "lr %.9g", lr);
    /* set_lr: lr now, base for later steps */
    CHECK_OK(dlt_optimizer_set_lr(opt, 1.0));
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK(lr == 1.0, "lr %.9g", lr);
    CHECK_OK(dlt_optimizer_step(opt));
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK(within_ulp(lr, pow(0.5, 8)), "lr %.9g", lr);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

/* A step the GradScaler skips (an inf in the gradient) changes neither the step count nor
 * the lr nor the parameter; the schedule resumes at the next applied step. */
static void test_schedule_skipped_steps(void) {
    dlt_tensor *p;
    dlt_optimizer *opt = sched_opt(&p);
    dlt_grad_scaler *sc = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 1.0, 2.0, 0.5, 1000, 1, &sc));
    CHECK_OK(dlt_lr_schedule_step(opt, 1, 0.5));
    const float good[2] = {0.5f, -0.5f}, bad[2] = {INFINITY, 1.0f};
    int64_t expect_t = 0;
    const int pattern[8] = {1, 0, 0, 1, 0, 1, 1, 0}; /* 1 = clean step */
    for (int i = 0; i < 8; i++) {
        th_set_grad(p, pattern[i] ? good : bad);
        float before[2], after[2];
        read_host(p, before);
        CHECK_OK(dlt_grad_scaler_step(sc, opt));
        CHECK_OK(dlt_grad_scaler_update(sc));
        read_host(p, after);
        expect_t += pattern[i];
        int64_t count = 0;
        int32_t applied = -1;
        double lr = 0;
        CHECK_OK(dlt_optimizer_step_count(opt, &count));
        CHECK_OK(dlt_optimizer_last_step_applied(opt, &applied));
        CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
        CHECK(count == expect_t && applied == pattern[i], "i=%d count %lld applied %d", i,
              (long long)count, applied);
        CHECK(within_ulp(lr, 0.1 * pow(0.5, (double)expect_t)), "i=%d lr %.9g", i, lr);
        CHECK((memcmp(before, after, sizeof before) != 0) == pattern[i], "i=%d: param moved=%d", i,
              memcmp(before, after, sizeof before) != 0);
    }
    dlt_grad_scaler_destroy(sc);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(p);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    static char names[32][96];
    int k = 0;
    for (int m = 0; m < 2; m++)
        for (int d = 0; d < 2; d++)
            for (int w = 0; w < 2; w++)
                for (int n = 0; n < 2; n++)
                    for (int x = 0; x < 2; x++) {
                        sgd_opts o = {m ? 0.9 : 0.0, d ? 0.1 : 0.0, w ? 1e-2 : 0.0, n, x};
                        if (n && (!m || d)) continue; /* invalid: checked in test_validation */
                        g_combo = o;
                        snprintf(names[k], sizeof names[k],
                                 "sgd momentum=%g dampening=%g wd=%g nesterov=%d maximize=%d",
                                 o.momentum, o.dampening, o.weight_decay, n, x);
                        th_run(test_sgd_combo, names[k]);
                        k++;
                    }
    RUN(test_zero_grad_and_skip);
    RUN(test_lp_copy_refresh);
    RUN(test_validation);
    RUN(test_schedule_step);
    RUN(test_schedule_multistep);
    RUN(test_schedule_cosine);
    RUN(test_schedule_warmup);
    RUN(test_schedule_warmup_cosine);
    RUN(test_schedule_clear_and_set_lr);
    RUN(test_schedule_skipped_steps);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
