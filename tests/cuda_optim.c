/*
 * cuda_optim.c - SGD, schedules and the GradScaler on CUDA against the CPU backend.
 *
 * The CUDA step kernel computes the same fp32 operations as the CPU loop (correctly
 * rounded FMAs, separately rounded products), so parameters, momentum buffers and
 * gradients must agree bit for bit. Covered: every option combination; one step over 300
 * parameters of odd sizes (several launches, multi-chunk tensors, scalar tails, parameters
 * without gradients); the autocast copies the kernel writes; the scaler's skip/backoff/
 * growth sequence; lr schedules. Adam/AdamW, clip_grad_norm and the optimizer's fused
 * clipping likewise (their cases, at the end, were written without a GPU and first run on
 * the next GPU session). Whole steps
 * captured as CUDA graphs are cuda_graph.c's. Every case skips without a GPU.
 */
#include <math.h>
#include <stdint.h>

#include "harness.h"

static uint32_t rng_state = 2024u;
static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((double)(rng_state >> 8) / (double)(1u << 23) - 1.0);
}



/* bitwise comparison of two tensors' memory (any contexts) */
static int same_tensor(const dlt_tensor *a, const dlt_tensor *b, const char *what, int idx) {
    size_t n = dlt_tensor_nbytes(a);
    if (n != dlt_tensor_nbytes(b)) {
        CHECK(0, "%s %d: sizes differ", what, idx);
        return 0;
    }
    float *x = malloc(n ? n : 1), *y = malloc(n ? n : 1);
    CHECK_OK(dlt_tensor_copy_to_host(a, x, n));
    CHECK_OK(dlt_tensor_copy_to_host(b, y, n));
    int ok = 1;
    for (size_t i = 0; i < n / 4; i++)
        if (memcmp(&x[i], &y[i], 4) != 0 && !(x[i] != x[i] && y[i] != y[i])) { /* NaN payloads may differ */
            CHECK(0, "%s %d element %zu: cuda %.9g vs cpu %.9g", what, idx, i, x[i], y[i]);
            ok = 0;
            break;
        }
    free(x);
    free(y);
    return ok;
}

/* ---- every option combination, CUDA vs CPU ---- */

static void run_combo(dlt_ctx *cu, dlt_ctx *cpu, double mom, double damp, double wd, int nest, int maxi) {
    enum { NP = 5 };
    const int64_t s0[2] = {33, 17}, s1[1] = {5}, s2[1] = {4099}, s3[4] = {3, 5, 2, 7}, s4[1] = {1};
    const int64_t *shapes[NP] = {s0, s1, s2, s3, s4};
    const int32_t nds[NP] = {2, 1, 1, 4, 1};
    const int32_t fmts[NP] = {0, 0, 0, DLT_FORMAT_CHANNELS_LAST, 0};
    const int first_grad[NP] = {1, 0, 2, 1, 3};
    dlt_tensor *pc[NP], *pg[NP];
    int64_t ns[NP];
    float *buf = malloc(4099 * sizeof(float));
    for (int i = 0; i < NP; i++) {
        ns[i] = 1;
        for (int d = 0; d < nds[i]; d++) ns[i] *= shapes[i][d];
        for (int64_t e = 0; e < ns[i]; e++) buf[e] = frand();
        pc[i] = th_param_f32(cpu, shapes[i], nds[i], fmts[i], buf);
        pg[i] = th_param_f32(cu, shapes[i], nds[i], fmts[i], buf);
    }
    dlt_optimizer *oc = NULL, *og = NULL;
    CHECK_OK(dlt_sgd_create(pc, NP, 0.05, mom, damp, wd, nest, maxi, &oc));
    CHECK_OK(dlt_sgd_create(pg, NP, 0.05, mom, damp, wd, nest, maxi, &og));
    for (int step = 1; step <= 5; step++) {
        if (step == 3) {
            CHECK_OK(dlt_optimizer_set_lr(oc, 0.013));
            CHECK_OK(dlt_optimizer_set_lr(og, 0.013));
        }
        for (int i = 0; i < NP; i++) {
            if (!first_grad[i] || step < first_grad[i]) continue;
            for (int64_t e = 0; e < ns[i]; e++) buf[e] = frand() * 2.0f;
            th_set_grad(pc[i], buf);
            th_set_grad(pg[i], buf);
        }
        CHECK_OK(dlt_optimizer_step(oc));
        CHECK_OK(dlt_optimizer_step(og));
        for (int i = 0; i < NP; i++) {
            same_tensor(pg[i], pc[i], "param", i);
            dlt_tensor *bg = dlt_optimizer_momentum_buffer(og, i), *bc = dlt_optimizer_momentum_buffer(oc, i);
            CHECK((bg == NULL) == (bc == NULL), "param %d: buffer on one side only", i);
            if (bg && bc) same_tensor(bg, bc, "buffer", i);
            if (dlt_tensor_grad(pc[i])) same_tensor(dlt_tensor_grad(pg[i]), dlt_tensor_grad(pc[i]), "grad", i);
        }
    }
    int64_t cg = 0;
    CHECK_OK(dlt_optimizer_step_count(og, &cg));
    CHECK(cg == 5);
    free(buf);
    dlt_optimizer_destroy(oc);
    dlt_optimizer_destroy(og);
    for (int i = 0; i < NP; i++) {
        dlt_tensor_release(pc[i]);
        dlt_tensor_release(pg[i]);
    }
}

static void test_sgd_all_options(void) {
    CUDA_CTX_OR_SKIP(cu);
    dlt_ctx *cpu = th_cpu_ctx();
    for (int m = 0; m < 2; m++)
        for (int d = 0; d < 2; d++)
            for (int w = 0; w < 2; w++)
                for (int n = 0; n < 2; n++)
                    for (int x = 0; x < 2; x++) {
                        if (n && (!m || d)) continue;
                        run_combo(cu, cpu, m ? 0.9 : 0.0, d ? 0.1 : 0.0, w ? 1e-2 : 0.0, n, x);
                    }
    dlt_ctx_destroy(cpu);
    dlt_ctx_destroy(cu);
}

/* 300 parameters of odd sizes (two launches of at most 256 tensors), some without a
 * gradient, through three steps; the step count must advance once per step. */
static void test_multi_tensor_many_params(void) {
    CUDA_CTX_OR_SKIP(cu);
    dlt_ctx *cpu = th_cpu_ctx();
    enum { NP = 300 };
    static dlt_tensor *pc[NP], *pg[NP];
    static int64_t ns[NP];
    float *buf = malloc(20000 * sizeof(float));
    for (int i = 0; i < NP; i++) {
        const int64_t sizes[8] = {1, 3, 4095, 4096, 4097, 17, 12289, 255};
        ns[i] = sizes[i % 8] + (i / 8) % 5;
        for (int64_t e = 0; e < ns[i]; e++) buf[e] = frand();
        pc[i] = th_param_f32(cpu, &ns[i], 1, 0, buf);
        pg[i] = th_param_f32(cu, &ns[i], 1, 0, buf);
    }
    dlt_optimizer *oc = NULL, *og = NULL;
    CHECK_OK(dlt_sgd_create(pc, NP, 0.1, 0.9, 0.0, 5e-4, 1, 0, &oc));
    CHECK_OK(dlt_sgd_create(pg, NP, 0.1, 0.9, 0.0, 5e-4, 1, 0, &og));
    for (int step = 1; step <= 3; step++) {
        for (int i = 0; i < NP; i++) {
            if ((i * 7 + step) % 11 == 0) { /* no gradient this step */
                CHECK_OK(dlt_zero_grad(&pc[i], 1, 1));
                CHECK_OK(dlt_zero_grad(&pg[i], 1, 1));
                continue;
            }
            for (int64_t e = 0; e < ns[i]; e++) buf[e] = frand();
            th_set_grad(pc[i], buf);
            th_set_grad(pg[i], buf);
        }
        CHECK_OK(dlt_optimizer_step(oc));
        CHECK_OK(dlt_optimizer_step(og));
        int64_t count = 0;
        CHECK_OK(dlt_optimizer_step_count(og, &count));
        CHECK(count == step, "step count %lld after step %d", (long long)count, step);
    }
    int bad = 0;
    for (int i = 0; i < NP && bad < 3; i++) {
        bad += !same_tensor(pg[i], pc[i], "param", i);
        dlt_tensor *bg = dlt_optimizer_momentum_buffer(og, i), *bc = dlt_optimizer_momentum_buffer(oc, i);
        CHECK((bg == NULL) == (bc == NULL), "param %d", i);
        if (bg && bc) bad += !same_tensor(bg, bc, "buffer", i);
    }
    free(buf);
    dlt_optimizer_destroy(oc);
    dlt_optimizer_destroy(og);
    for (int i = 0; i < NP; i++) {
        dlt_tensor_release(pc[i]);
        dlt_tensor_release(pg[i]);
    }
    dlt_ctx_destroy(cpu);
    dlt_ctx_destroy(cu);
}

/* The kernel writes the autocast copies: after two steps, a linear under autocast (which
 * uses the cached copy, marked current by the step) equals a fresh cast of the master. */
static void test_lp_copy_refresh(void) {
    CUDA_CTX_OR_SKIP(cu);
    const int64_t ws[2] = {9, 13}, xs[2] = {13, 13};
    float v[117], g[117], eye[169];
    for (int e = 0; e < 117; e++) {
        v[e] = frand() * 4.0f;
        g[e] = frand();
    }
    for (int e = 0; e < 169; e++) eye[e] = (e % 14) == 0 ? 1.0f : 0.0f;
    dlt_tensor *w = th_param_f32(cu, ws, 2, 0, v), *x = NULL, *y = NULL;
    CHECK_OK(dlt_tensor_from_host(cu, DLT_F32, xs, 2, 0, eye, sizeof eye, &x));
    for (int k = 0; k < 2; k++) { /* makes both cached copies */
        CHECK_OK(dlt_autocast_begin(cu, k ? DLT_BF16 : DLT_F16));
        CHECK_OK(dlt_linear(x, w, NULL, &y));
        CHECK_OK(dlt_autocast_end(cu));
        dlt_tensor_release(y);
    }
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_sgd_create(&w, 1, 0.37, 0.5, 0, 0, 0, 0, &opt));
    for (int s = 0; s < 2; s++) {
        th_set_grad(w, g);
        CHECK_OK(dlt_optimizer_step(opt));
    }
    for (int k = 0; k < 2; k++) {
        int32_t dt = k ? DLT_BF16 : DLT_F16;
        dlt_tensor *fresh = NULL;
        CHECK_OK(dlt_tensor_cast(w, dt, &fresh));
        CHECK_OK(dlt_autocast_begin(cu, dt));
        CHECK_OK(dlt_linear(x, w, NULL, &y)); /* I * w^T = w^T through the copy */
        CHECK_OK(dlt_autocast_end(cu));
        float *got = th_read_f32(y), *want = th_read_f32(fresh);
        int bad = 0;
        for (int i = 0; i < 9 && !bad; i++)
            for (int j = 0; j < 13; j++)
                if (got[j * 9 + i] != want[i * 13 + j]) {
                    CHECK(0, "%s copy [%d,%d]: %.9g vs fresh cast %.9g", k ? "bf16" : "f16", i, j,
                          got[j * 9 + i], want[i * 13 + j]);
                    bad = 1;
                    break;
                }
        free(got);
        free(want);
        dlt_tensor_release(y);
        dlt_tensor_release(fresh);
    }
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(x);
    dlt_tensor_release(w);
    dlt_ctx_destroy(cu);
}

/* Scaler sequence with inf/NaN injections: scale, tracker, params and buffers as on CPU. */
static void test_scaler_vs_cpu(void) {
    CUDA_CTX_OR_SKIP(cu);
    dlt_ctx *cpu = th_cpu_ctx();
    dlt_ctx *ctxs[2] = {cu, cpu};
    const int64_t s0[1] = {5000}, s1[2] = {7, 3};
    dlt_tensor *p[2][2];
    dlt_optimizer *o[2];
    dlt_grad_scaler *sc[2];
    float *buf = malloc(5000 * sizeof(float));
    for (int e = 0; e < 5000; e++) buf[e] = frand();
    for (int c = 0; c < 2; c++) {
        p[c][0] = th_param_f32(ctxs[c], s0, 1, 0, buf);
        p[c][1] = th_param_f32(ctxs[c], s1, 2, 0, buf);
        CHECK_OK(dlt_sgd_create(p[c], 2, 0.01, 0.9, 0.1, 1e-4, 0, 1, &o[c]));
        CHECK_OK(dlt_grad_scaler_create(ctxs[c], 3.0, 2.0, 0.25, 2, 1, &sc[c]));
        CHECK_OK(dlt_lr_schedule_step(o[c], 2, 0.5));
    }
    for (int it = 0; it < 10; it++) {
        float *g0 = malloc(5000 * sizeof(float)), g1[21];
        for (int e = 0; e < 5000; e++) g0[e] = frand() * 100.0f;
        for (int e = 0; e < 21; e++) g1[e] = frand();
        if (it == 2) g0[4999] = INFINITY;
        if (it == 5) g1[0] = NAN;
        for (int c = 0; c < 2; c++) {
            th_set_grad(p[c][0], g0);
            th_set_grad(p[c][1], g1);
            if (it % 3 == 1) CHECK_OK(dlt_grad_scaler_unscale(sc[c], o[c]));
            CHECK_OK(dlt_grad_scaler_step(sc[c], o[c]));
            CHECK_OK(dlt_grad_scaler_update(sc[c]));
        }
        free(g0);
        double s_gpu = 0, s_cpu = 0, lr_gpu = 0, lr_cpu = 0;
        int32_t t_gpu = -1, t_cpu = -2, a_gpu = -1, a_cpu = -2;
        CHECK_OK(dlt_grad_scaler_get_state(sc[0], &s_gpu, NULL, NULL, NULL, &t_gpu));
        CHECK_OK(dlt_grad_scaler_get_state(sc[1], &s_cpu, NULL, NULL, NULL, &t_cpu));
        CHECK_OK(dlt_optimizer_get_lr(o[0], &lr_gpu));
        CHECK_OK(dlt_optimizer_get_lr(o[1], &lr_cpu));
        CHECK_OK(dlt_optimizer_last_step_applied(o[0], &a_gpu));
        CHECK_OK(dlt_optimizer_last_step_applied(o[1], &a_cpu));
        CHECK(s_gpu == s_cpu && t_gpu == t_cpu, "it %d: scale %g/%g tracker %d/%d", it, s_gpu, s_cpu, t_gpu, t_cpu);
        CHECK(lr_gpu == lr_cpu && a_gpu == a_cpu, "it %d: lr %.9g/%.9g applied %d/%d", it, lr_gpu, lr_cpu, a_gpu, a_cpu);
        CHECK(a_gpu == !(it == 2 || it == 5), "it %d: applied %d", it, a_gpu);
        for (int i = 0; i < 2; i++) {
            same_tensor(p[0][i], p[1][i], "param", i);
            same_tensor(dlt_tensor_grad(p[0][i]), dlt_tensor_grad(p[1][i]), "unscaled grad", i);
            same_tensor(dlt_optimizer_momentum_buffer(o[0], i), dlt_optimizer_momentum_buffer(o[1], i), "buffer", i);
        }
    }
    free(buf);
    for (int c = 0; c < 2; c++) {
        dlt_grad_scaler_destroy(sc[c]);
        dlt_optimizer_destroy(o[c]);
        dlt_tensor_release(p[c][0]);
        dlt_tensor_release(p[c][1]);
    }
    dlt_ctx_destroy(cpu);
    dlt_ctx_destroy(cu);
}

/* lr sequences of each schedule, CUDA vs CPU (double pow/cos may differ in the last ulp of
 * the double; the f32 lr must agree within one ulp, and nearly always exactly). */
static void test_schedules_vs_cpu(void) {
    CUDA_CTX_OR_SKIP(cu);
    dlt_ctx *cpu = th_cpu_ctx();
    dlt_ctx *ctxs[2] = {cu, cpu};
    dlt_tensor *p[2];
    dlt_optimizer *o[2];
    const int64_t s[1] = {3};
    const float v[3] = {1, 2, 3}, g[3] = {0.1f, 0.2f, 0.3f};
    const int64_t ms[4] = {3, 8, 9, 20};
    for (int c = 0; c < 2; c++) {
        p[c] = th_param_f32(ctxs[c], s, 1, 0, v);
        th_set_grad(p[c], g);
        CHECK_OK(dlt_sgd_create(&p[c], 1, 0.3, 0, 0, 0, 0, 0, &o[c]));
    }
    int exact = 0, total = 0;
    for (int phase = 0; phase < 3; phase++) {
        for (int c = 0; c < 2; c++) {
            CHECK_OK(dlt_lr_schedule_clear(o[c]));
            CHECK_OK(dlt_optimizer_set_lr(o[c], 0.3));
            if (phase == 0) {
                CHECK_OK(dlt_lr_schedule_step(o[c], 3, 0.7));
                CHECK_OK(dlt_lr_schedule_warmup(o[c], 5, 0.1));
            } else if (phase == 1) {
                CHECK_OK(dlt_lr_schedule_multistep(o[c], ms, 4, 0.3));
            } else {
                CHECK_OK(dlt_lr_schedule_cosine(o[c], 17, 0.01));
                CHECK_OK(dlt_lr_schedule_warmup(o[c], 4, 0.5));
            }
        }
        for (int t = 0; t < 25; t++) {
            double a = 0, b = 0;
            CHECK_OK(dlt_optimizer_get_lr(o[0], &a));
            CHECK_OK(dlt_optimizer_get_lr(o[1], &b));
            CHECK(fabs(a - b) <= ldexp(fabs(b), -23), "phase %d t %d: cuda %.9g cpu %.9g", phase, t, a, b);
            exact += a == b;
            total++;
            for (int c = 0; c < 2; c++) CHECK_OK(dlt_optimizer_step(o[c]));
        }
    }
    printf("# %d of %d lr values bit-identical\n", exact, total);
    for (int c = 0; c < 2; c++) {
        dlt_optimizer_destroy(o[c]);
        dlt_tensor_release(p[c]);
    }
    dlt_ctx_destroy(cpu);
    dlt_ctx_destroy(cu);
}

/* ---- autocast weight gradients: the fp16/bf16 -> fp32 accumulation ---- */

enum { AB = 8, AD = 300, AH = 64, AO = 5, AK = 3 };

/* Three linear layers under autocast, backward twice (the second accumulates); writes the
 * fp32 gradients of w1 [AH,AD] (19,200: three chunks of the multi-tensor kernel), b1,
 * w2 [AO,AH] and w3 [AK,AO] (15: not a multiple of 4, the scalar path) to g. */
static void autocast_grads(dlt_ctx *ctx, int32_t dt, const float *x, const float *w1, const float *b1,
                           const float *w2, const float *w3, float *g) {
    const int64_t xs[2] = {AB, AD}, w1s[2] = {AH, AD}, b1s[1] = {AH}, w2s[2] = {AO, AH},
                  w3s[2] = {AK, AO}, ys[1] = {AB};
    int64_t labels[AB];
    for (int i = 0; i < AB; i++) labels[i] = i % AK;
    dlt_tensor *p[4] = {th_param_f32(ctx, w1s, 2, 0, w1), th_param_f32(ctx, b1s, 1, 0, b1),
                        th_param_f32(ctx, w2s, 2, 0, w2), th_param_f32(ctx, w3s, 2, 0, w3)};
    dlt_tensor *xt = NULL, *y = NULL;
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, 0, x, AB * AD * sizeof(float), &xt));
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_I64, ys, 1, 0, labels, sizeof labels, &y));
    for (int rep = 0; rep < 2; rep++) {
        dlt_tensor *h = NULL, *r = NULL, *o = NULL, *r2 = NULL, *logits = NULL, *loss = NULL;
        CHECK_OK(dlt_autocast_begin(ctx, dt));
        CHECK_OK(dlt_linear(xt, p[0], p[1], &h));
        CHECK_OK(dlt_relu(h, &r));
        CHECK_OK(dlt_linear(r, p[2], NULL, &o));
        CHECK_OK(dlt_relu(o, &r2));
        CHECK_OK(dlt_linear(r2, p[3], NULL, &logits));
        CHECK_OK(dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss));
        CHECK_OK(dlt_autocast_end(ctx));
        CHECK_OK(dlt_backward(loss, NULL));
        dlt_tensor *ts[6] = {h, r, o, r2, logits, loss};
        for (int i = 0; i < 6; i++) dlt_tensor_release(ts[i]);
    }
    int64_t off = 0;
    for (int i = 0; i < 4; i++) {
        const dlt_tensor *gr = dlt_tensor_grad(p[i]); /* borrowed */
        REQUIRE(gr && dlt_tensor_dtype(gr) == DLT_F32);
        CHECK_OK(dlt_tensor_copy_to_host(gr, g + off, dlt_tensor_nbytes(gr)));
        off += dlt_tensor_numel(gr);
        dlt_tensor_release(p[i]);
    }
    dlt_tensor_release(xt);
    dlt_tensor_release(y);
}

static void test_autocast_weight_grads_vs_cpu(void) {
    CUDA_CTX_OR_SKIP(cu);
    dlt_ctx *cpu = th_cpu_ctx();
    enum { NG = AH * AD + AH + AO * AH + AK * AO };
    static float x[AB * AD], w1[AH * AD], b1[AH], w2[AO * AH], w3[AK * AO], gc[NG], gg[NG];
    for (int i = 0; i < AB * AD; i++) x[i] = frand();
    for (int i = 0; i < AH * AD; i++) w1[i] = frand() * 0.1f;
    for (int i = 0; i < AH; i++) b1[i] = frand() * 0.1f;
    for (int i = 0; i < AO * AH; i++) w2[i] = frand() * 0.3f;
    for (int i = 0; i < AK * AO; i++) w3[i] = frand();
    static const char *names[4] = {"w1", "b1", "w2", "w3"};
    const int64_t sizes[4] = {AH * AD, AH, AO * AH, AK * AO};
    for (int k = 0; k < 2; k++) {
        const int32_t dt = k ? DLT_BF16 : DLT_F16;
        autocast_grads(cpu, dt, x, w1, b1, w2, w3, gc);
        autocast_grads(cu, dt, x, w1, b1, w2, w3, gg);
        int64_t off = 0;
        for (int i = 0; i < 4; i++) {
            const double e = th_rel_err_f(gg + off, gc + off, sizes[i]);
            double norm = 0;
            for (int64_t j = 0; j < sizes[i]; j++) norm += fabs(gc[off + j]);
            /* the backends round different fp32 sums to 16 bits: a few units in the last place */
            CHECK(e <= (k ? 2e-2 : 3e-3) && norm > 0, "%s %s: rel err %.3g (|g|_1 %.3g)", k ? "bf16" : "f16",
                  names[i], e, norm);
            off += sizes[i];
        }
    }
    dlt_ctx_destroy(cpu);
    dlt_ctx_destroy(cu);
}

/* ---- Adam/AdamW and clip_grad_norm (optim) ----
 * Written in a session without a GPU: cuda/adamw.cu and cuda/clip_grad_norm.cu were
 * compile-checked only, these cases run them first on the next GPU session. */

static double max_rel_err(const dlt_tensor *a, const dlt_tensor *b) {
    float *x = th_read_f32(a), *y = th_read_f32(b);
    const double e = th_rel_err_f(x, y, dlt_tensor_numel(a));
    free(x);
    free(y);
    return e;
}

/* AdamW and Adam (maximize) over 300 parameters of odd sizes (two launches), two groups,
 * parameters without a gradient at some steps (lagging step counts), a GradScaler with an
 * inf at one step, nanoGPT's schedule: CUDA vs CPU. The element code is shared
 * (dlt__adamw_elem), so the values agree bit for bit unless CUDA's double pow differs from
 * the host's in the last ulp: checked to 1e-6 relative, and the bitwise matches counted. */
static void adamw_vs_cpu(int decoupled) {
    CUDA_CTX_OR_SKIP(cu);
    dlt_ctx *cpu = th_cpu_ctx();
    dlt_ctx *ctxs[2] = {cu, cpu};
    enum { NP = 300 };
    static dlt_tensor *p[2][NP];
    static int64_t ns[NP];
    dlt_optimizer *o[2];
    dlt_grad_scaler *sc[2];
    float *buf = malloc(20000 * sizeof(float));
    for (int i = 0; i < NP; i++) {
        const int64_t sizes[8] = {1, 3, 4095, 4096, 4097, 17, 12289, 255};
        ns[i] = sizes[i % 8] + (i / 8) % 5;
        for (int64_t e = 0; e < ns[i]; e++) buf[e] = frand();
        for (int c = 0; c < 2; c++) p[c][i] = th_param_f32(ctxs[c], &ns[i], 1, 0, buf);
    }
    for (int c = 0; c < 2; c++) {
        static dlt_tensor *even[NP / 2], *odd[NP / 2];
        for (int i = 0; i < NP / 2; i++) {
            even[i] = p[c][2 * i];
            odd[i] = p[c][2 * i + 1];
        }
        dlt_adamw_options ao;
        if (decoupled) dlt_adamw_options_default(&ao);
        else dlt_adam_options_default(&ao);
        ao.lr = 6e-4;
        ao.beta2 = 0.95;
        ao.weight_decay = 0.1;
        ao.maximize = !decoupled;
        CHECK_OK(dlt_adamw_create_ex(even, NP / 2, &ao, &o[c]));
        CHECK_OK(dlt_optimizer_add_param_group(o[c], odd, NP / 2, 2e-3, 0.0));
        CHECK_OK(dlt_lr_schedule_warmup_cosine(o[c], 2, 6, 6e-5));
        CHECK_OK(dlt_grad_scaler_create(ctxs[c], 4.0, 2.0, 0.5, 2, 1, &sc[c]));
    }
    for (int step = 1; step <= 6; step++) {
        for (int i = 0; i < NP; i++) {
            const int none = (i * 7 + step) % 11 == 0;
            for (int64_t e = 0; e < ns[i]; e++) buf[e] = frand();
            if (step == 3 && i == 123) buf[0] = INFINITY;
            for (int c = 0; c < 2; c++) {
                if (none) CHECK_OK(dlt_zero_grad(&p[c][i], 1, 1));
                else th_set_grad(p[c][i], buf);
            }
        }
        for (int c = 0; c < 2; c++) {
            CHECK_OK(dlt_grad_scaler_step(sc[c], o[c]));
            CHECK_OK(dlt_grad_scaler_update(sc[c]));
        }
        int32_t a0 = -1, a1 = -2;
        int64_t c0 = -1, c1 = -2;
        double l0 = 0, l1 = 0;
        CHECK_OK(dlt_optimizer_last_step_applied(o[0], &a0));
        CHECK_OK(dlt_optimizer_last_step_applied(o[1], &a1));
        CHECK_OK(dlt_optimizer_step_count(o[0], &c0));
        CHECK_OK(dlt_optimizer_step_count(o[1], &c1));
        CHECK(a0 == a1 && a0 == (step != 3) && c0 == c1, "step %d: applied %d/%d count %lld/%lld", step, a0,
              a1, (long long)c0, (long long)c1);
        for (int g = 0; g < 2; g++) {
            CHECK_OK(dlt_optimizer_get_group_lr(o[0], g, &l0));
            CHECK_OK(dlt_optimizer_get_group_lr(o[1], g, &l1));
            CHECK(fabs(l0 - l1) <= ldexp(fabs(l1), -23), "step %d group %d lr %.9g vs %.9g", step, g, l0, l1);
        }
    }
    int bitwise = 0, bad = 0;
    for (int i = 0; i < NP && bad < 5; i++) {
        int64_t t0 = -1, t1 = -2;
        CHECK_OK(dlt_optimizer_param_step(o[0], i, &t0));
        CHECK_OK(dlt_optimizer_param_step(o[1], i, &t1));
        CHECK(t0 == t1, "param %d: step count %lld vs %lld", i, (long long)t0, (long long)t1);
        dlt_tensor *pairs[3][2] = {{p[0][i], p[1][i]},
                                   {dlt_optimizer_exp_avg(o[0], i), dlt_optimizer_exp_avg(o[1], i)},
                                   {dlt_optimizer_exp_avg_sq(o[0], i), dlt_optimizer_exp_avg_sq(o[1], i)}};
        for (int k = 0; k < 3; k++) {
            REQUIRE(pairs[k][0] && pairs[k][1]);
            const double e = max_rel_err(pairs[k][0], pairs[k][1]);
            if (e > 1e-6) {
                CHECK(0, "%s param %d %s: rel err %.3g", decoupled ? "AdamW" : "Adam", i,
                      k == 0 ? "value" : k == 1 ? "exp_avg" : "exp_avg_sq", e);
                bad++;
            }
            bitwise += e == 0.0;
        }
    }
    printf("# %s: %d of %d tensors bit-identical to the CPU\n", decoupled ? "AdamW" : "Adam", bitwise, 3 * NP);
    free(buf);
    for (int c = 0; c < 2; c++) {
        dlt_grad_scaler_destroy(sc[c]);
        dlt_optimizer_destroy(o[c]);
        for (int i = 0; i < NP; i++) dlt_tensor_release(p[c][i]);
    }
    dlt_ctx_destroy(cpu);
    dlt_ctx_destroy(cu);
}

static void test_adamw_vs_cpu(void) { adamw_vs_cpu(1); }
static void test_adam_vs_cpu(void) { adamw_vs_cpu(0); }

/* The AdamW kernel writes the autocast copies as the SGD kernel does. */
static void test_adamw_lp_copy_refresh(void) {
    CUDA_CTX_OR_SKIP(cu);
    const int64_t ws[2] = {9, 13}, xs[2] = {13, 13};
    float v[117], g[117], eye[169];
    for (int e = 0; e < 117; e++) {
        v[e] = frand() * 4.0f;
        g[e] = frand();
    }
    for (int e = 0; e < 169; e++) eye[e] = (e % 14) == 0 ? 1.0f : 0.0f;
    dlt_tensor *w = th_param_f32(cu, ws, 2, 0, v), *x = NULL, *y = NULL;
    CHECK_OK(dlt_tensor_from_host(cu, DLT_F32, xs, 2, 0, eye, sizeof eye, &x));
    CHECK_OK(dlt_autocast_begin(cu, DLT_BF16));
    CHECK_OK(dlt_linear(x, w, NULL, &y));
    CHECK_OK(dlt_autocast_end(cu));
    dlt_tensor_release(y);
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_adamw_create_ex(&w, 1, NULL, &opt));
    for (int s = 0; s < 2; s++) {
        th_set_grad(w, g);
        CHECK_OK(dlt_optimizer_step(opt));
    }
    dlt_tensor *fresh = NULL;
    CHECK_OK(dlt_tensor_cast(w, DLT_BF16, &fresh));
    CHECK_OK(dlt_autocast_begin(cu, DLT_BF16));
    CHECK_OK(dlt_linear(x, w, NULL, &y));
    CHECK_OK(dlt_autocast_end(cu));
    float *got = th_read_f32(y), *want = th_read_f32(fresh);
    for (int i = 0, bad = 0; i < 9 && !bad; i++)
        for (int j = 0; j < 13; j++)
            if (got[j * 9 + i] != want[i * 13 + j]) {
                CHECK(0, "bf16 copy [%d,%d]: %.9g vs fresh cast %.9g", i, j, got[j * 9 + i], want[i * 13 + j]);
                bad = 1;
                break;
            }
    free(got);
    free(want);
    dlt_tensor_release(y);
    dlt_tensor_release(fresh);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(x);
    dlt_tensor_release(w);
    dlt_ctx_destroy(cu);
}

/* clip_grad_norm over 600 gradients (two launches of the multi-tensor kernels), norms 1,
 * 2 and inf, clipping and not, and a NaN: totals and scaled gradients CUDA vs CPU (f32
 * block partials on CUDA, double on the CPU: 1e-5 relative; the inf-norm is exact). */
static void test_clip_grad_norm_vs_cpu(void) {
    CUDA_CTX_OR_SKIP(cu);
    dlt_ctx *cpu = th_cpu_ctx();
    dlt_ctx *ctxs[2] = {cu, cpu};
    enum { NP = 600 };
    static dlt_tensor *p[2][NP];
    static int64_t ns[NP];
    float *buf = malloc(20000 * sizeof(float));
    for (int i = 0; i < NP; i++) {
        const int64_t sizes[6] = {1, 4096, 4097, 17, 12289, 255};
        ns[i] = sizes[i % 6] + (i / 6) % 3;
        for (int c = 0; c < 2; c++) {
            CHECK_OK(dlt_tensor_zeros(ctxs[c], DLT_F32, &ns[i], 1, 0, &p[c][i]));
            CHECK_OK(dlt_tensor_set_requires_grad(p[c][i], 1));
        }
    }
    const double norms[3] = {2.0, 1.0, INFINITY};
    for (int k = 0; k < 3; k++)
        for (int clip = 0; clip < 3; clip++) {
            for (int i = 0; i < NP; i++) {
                for (int64_t e = 0; e < ns[i]; e++) buf[e] = frand() * (float)(1 + i % 4);
                if (clip == 2 && i == 301) buf[ns[i] - 1] = NAN;
                for (int c = 0; c < 2; c++) th_set_grad(p[c][i], buf);
            }
            dlt_tensor *tot[2] = {NULL, NULL};
            float t[2];
            /* clip 0: max_norm far above the total (coef clamps to 1); 1 and 2: a tenth */
            for (int c = 0; c < 2; c++) {
                dlt_tensor *probe = NULL;
                CHECK_OK(dlt_grad_norm(p[c], NP, norms[k], &probe));
                float pv = 0;
                CHECK_OK(dlt_tensor_copy_to_host(probe, &pv, 4));
                dlt_tensor_release(probe);
                const double max_norm = clip == 0 ? 1e30 : 0.1 * (double)pv;
                CHECK_OK(dlt_clip_grad_norm(p[c], NP, clip == 2 ? 1.0 : max_norm, norms[k], &tot[c]));
                CHECK_OK(dlt_tensor_copy_to_host(tot[c], &t[c], 4));
                dlt_tensor_release(tot[c]);
            }
            if (clip == 2) {
                CHECK(t[0] != t[0] && t[1] != t[1], "norm %g with a NaN: totals %g / %g", norms[k], t[0], t[1]);
                continue;
            }
            const double tol = isinf(norms[k]) ? 0.0 : 1e-5;
            CHECK(fabs(t[0] - t[1]) <= tol * fabs(t[1]), "norm %g clip %d: total %.9g vs cpu %.9g", norms[k], clip,
                  t[0], t[1]);
            int bad = 0;
            for (int i = 0; i < NP && bad < 3; i++) {
                const double e = max_rel_err(dlt_tensor_grad(p[0][i]), dlt_tensor_grad(p[1][i]));
                if (e > 1e-5) {
                    CHECK(0, "norm %g clip %d grad %d: rel err %.3g", norms[k], clip, i, e);
                    bad++;
                }
            }
        }
    free(buf);
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < NP; i++) dlt_tensor_release(p[c][i]);
    dlt_ctx_destroy(cpu);
    dlt_ctx_destroy(cu);
}

/* The optimizer's fused clipping (dlt_optimizer_set_clip_grad_norm) on CUDA over 600
 * parameters (two launches of the clip kernels, three of the step kernels), some without a
 * gradient at some steps, through a GradScaler with an inf at step 3. Three sides: CUDA
 * fused (A), CUDA unscale + dlt_clip_grad_norm + step (B), CPU fused (C). A and B run the
 * same norm kernels, so parameters, state and totals agree bit for bit; A and C as
 * test_clip_grad_norm_vs_cpu's totals do (1e-5 relative; the inf-norm exact). A's
 * gradients keep their unscaled values. Written without a GPU (first run on the next GPU
 * session). */
static void fused_clip_vs_cpu(int sgd, double norm_type, double max_norm) {
    CUDA_CTX_OR_SKIP(cu);
    dlt_ctx *cpu = th_cpu_ctx();
    dlt_ctx *ctxs[3] = {cu, cu, cpu};
    enum { NP = 600, STEPS = 4 };
    static dlt_tensor *p[3][NP];
    static int64_t ns[NP];
    dlt_optimizer *o[3];
    dlt_grad_scaler *sc[3];
    dlt_tensor *norm_a = NULL, *norm_c = NULL;
    float *buf = malloc(20000 * sizeof(float)), *got = malloc(20000 * sizeof(float));
    for (int i = 0; i < NP; i++) {
        const int64_t sizes[6] = {1, 4096, 4097, 17, 12289, 255};
        ns[i] = sizes[i % 6] + (i / 6) % 3;
        for (int64_t e = 0; e < ns[i]; e++) buf[e] = frand();
        for (int c = 0; c < 3; c++) p[c][i] = th_param_f32(ctxs[c], &ns[i], 1, 0, buf);
    }
    for (int c = 0; c < 3; c++) {
        if (sgd) {
            CHECK_OK(dlt_sgd_create(p[c], NP, 0.05, 0.9, 0.0, 0.0, 1, 0, &o[c])); /* writes .grad */
        } else {
            static dlt_tensor *even[NP / 2], *odd[NP / 2];
            for (int i = 0; i < NP / 2; i++) {
                even[i] = p[c][2 * i];
                odd[i] = p[c][2 * i + 1];
            }
            dlt_adamw_options ao;
            dlt_adamw_options_default(&ao);
            ao.lr = 6e-4;
            ao.beta2 = 0.95;
            ao.weight_decay = 0.1;
            CHECK_OK(dlt_adamw_create_ex(even, NP / 2, &ao, &o[c]));
            CHECK_OK(dlt_optimizer_add_param_group(o[c], odd, NP / 2, 2e-3, 0.0));
        }
        CHECK_OK(dlt_grad_scaler_create(ctxs[c], 1024.0, 2.0, 0.5, 2000, 1, &sc[c]));
    }
    CHECK_OK(dlt_optimizer_set_clip_grad_norm(o[0], max_norm, norm_type));
    CHECK_OK(dlt_optimizer_set_clip_grad_norm(o[2], max_norm, norm_type));
    CHECK_OK(dlt_optimizer_grad_norm(o[0], &norm_a));
    CHECK_OK(dlt_optimizer_grad_norm(o[2], &norm_c));
    const char *what = sgd ? "SGD nesterov" : "AdamW";
    for (int step = 1; step <= STEPS; step++) {
        double scale = 0;
        CHECK_OK(dlt_grad_scaler_get_scale(sc[0], &scale));
        for (int i = 0; i < NP; i++) {
            const int none = (i * 7 + step) % 11 == 0;
            for (int64_t e = 0; e < ns[i]; e++) buf[e] = frand() * (float)(1 + i % 4) * (float)scale;
            if (step == 3 && i == 301) buf[ns[i] - 1] = INFINITY;
            for (int c = 0; c < 3; c++) {
                if (none) CHECK_OK(dlt_zero_grad(&p[c][i], 1, 1));
                else th_set_grad(p[c][i], buf);
            }
        }
        dlt_tensor *tb = NULL;
        CHECK_OK(dlt_grad_scaler_unscale(sc[1], o[1]));
        CHECK_OK(dlt_clip_grad_norm(p[1], NP, max_norm, norm_type, &tb));
        for (int c = 0; c < 3; c++) {
            CHECK_OK(dlt_grad_scaler_step(sc[c], o[c]));
            CHECK_OK(dlt_grad_scaler_update(sc[c]));
        }
        float ta = 0, tbv = 0, tc = 0;
        CHECK_OK(dlt_tensor_copy_to_host(norm_a, &ta, 4));
        CHECK_OK(dlt_tensor_copy_to_host(tb, &tbv, 4));
        CHECK_OK(dlt_tensor_copy_to_host(norm_c, &tc, 4));
        dlt_tensor_release(tb);
        const double tol = isinf(norm_type) ? 0.0 : 1e-5;
        if (step == 3) {
            CHECK(!isfinite(ta) && !isfinite(tc), "%s step 3 (inf): totals %g / %g", what, ta, tc);
        } else {
            CHECK(memcmp(&ta, &tbv, 4) == 0, "%s step %d: fused total %.9g vs clip_grad_norm's %.9g", what, step,
                  ta, tbv);
            CHECK(fabs(ta - tc) <= tol * fabs(tc), "%s step %d: total %.9g vs cpu %.9g", what, step, ta, tc);
            const float coef = (1.0f / (ta + 1e-6f)) * (float)max_norm;
            CHECK((coef < 1.0f) == (max_norm < 1e30), "%s step %d: coef %g with max_norm %g", what, step, coef,
                  max_norm);
        }
        int32_t applied = -1;
        CHECK_OK(dlt_optimizer_last_step_applied(o[0], &applied));
        CHECK(applied == (step != 3), "%s step %d: applied %d", what, step, applied);
        int bad = 0;
        for (int i = 0; i < NP && bad < 3; i++) {
            dlt_tensor *sa[3] = {p[0][i], sgd ? dlt_optimizer_momentum_buffer(o[0], i) : dlt_optimizer_exp_avg(o[0], i),
                                 sgd ? NULL : dlt_optimizer_exp_avg_sq(o[0], i)};
            dlt_tensor *sb[3] = {p[1][i], sgd ? dlt_optimizer_momentum_buffer(o[1], i) : dlt_optimizer_exp_avg(o[1], i),
                                 sgd ? NULL : dlt_optimizer_exp_avg_sq(o[1], i)};
            dlt_tensor *scc[3] = {p[2][i], sgd ? dlt_optimizer_momentum_buffer(o[2], i) : dlt_optimizer_exp_avg(o[2], i),
                                  sgd ? NULL : dlt_optimizer_exp_avg_sq(o[2], i)};
            for (int k = 0; k < 3; k++) {
                if (!sa[k] || !sb[k] || !scc[k]) {
                    CHECK((sa[k] == NULL) == (sb[k] == NULL) && (sa[k] == NULL) == (scc[k] == NULL),
                          "%s step %d param %d: state %d on some sides only", what, step, i, k);
                    continue;
                }
                if (!same_tensor(sa[k], sb[k], k ? "state (fused vs clip + step)" : "param (fused vs clip + step)", i))
                    bad++;
                const double e = max_rel_err(sa[k], scc[k]);
                if (e > 1e-5) {
                    CHECK(0, "%s step %d param %d state %d: rel err %.3g vs cpu", what, step, i, k, e);
                    bad++;
                }
            }
            /* unclipped: the unscaled values (SGD's nesterov step writes .grad: as the CPU's) */
            dlt_tensor *ga = dlt_tensor_grad(p[0][i]);
            if (ga && !sgd) {
                CHECK_OK(dlt_tensor_copy_to_host(ga, got, (size_t)ns[i] * 4));
                float *gc = th_read_f32(dlt_tensor_grad(p[2][i]));
                if (memcmp(got, gc, (size_t)ns[i] * 4) != 0 && step != 3) {
                    CHECK(0, "%s step %d: gradient %d differs from the CPU's unclipped one", what, step, i);
                    bad++;
                }
                free(gc);
            } else if (ga && step != 3 && max_rel_err(ga, dlt_tensor_grad(p[2][i])) > 1e-5) {
                CHECK(0, "%s step %d: written gradient %d differs from the CPU's", what, step, i);
                bad++;
            }
        }
    }
    dlt_tensor_release(norm_a);
    dlt_tensor_release(norm_c);
    free(buf);
    free(got);
    for (int c = 0; c < 3; c++) {
        dlt_grad_scaler_destroy(sc[c]);
        dlt_optimizer_destroy(o[c]);
        for (int i = 0; i < NP; i++) dlt_tensor_release(p[c][i]);
    }
    dlt_ctx_destroy(cpu);
    dlt_ctx_destroy(cu);
}

static void test_fused_clip_vs_cpu(void) {
    const double norms[3] = {2.0, 1.0, INFINITY};
    for (int sgd = 0; sgd < 2; sgd++)
        for (int k = 0; k < 3; k++) {
            fused_clip_vs_cpu(sgd, norms[k], k == 1 ? 50.0 : 0.5); /* clipping at every step */
            fused_clip_vs_cpu(sgd, norms[k], 1e30);                /* coef 1 */
        }
}

int main(void) {
    RUN(test_sgd_all_options);
    RUN(test_multi_tensor_many_params);
    RUN(test_lp_copy_refresh);
    RUN(test_scaler_vs_cpu);
    RUN(test_schedules_vs_cpu);
    RUN(test_autocast_weight_grads_vs_cpu);
    RUN(test_adamw_vs_cpu);
    RUN(test_adam_vs_cpu);
    RUN(test_adamw_lp_copy_refresh);
    RUN(test_clip_grad_norm_vs_cpu);
    RUN(test_fused_clip_vs_cpu);
    return th_done();
}
