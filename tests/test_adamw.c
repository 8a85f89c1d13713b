/*
 * test_adamw.c - Adam and AdamW on the CPU: update rule, parameter groups, weight tying,
 * the GradScaler's skip, checkpoints and misuse.
 *
 * The update is checked over six steps, two parameter groups (own lr and weight decay),
 * parameters whose step counts lag (a first gradient at step 3, no gradient at step 4),
 * lr changes between steps, for AdamW and Adam (L2), maximize, and a beta1 below 0.5
 * (PyTorch's lerp switches formula there), against
 *  (a) a float64 loop of PyTorch's rule (tolerance: fp32 rounding over six steps), and
 *  (b) an fp32 loop with PyTorch's foreach rounding (scalars in double rounded to f32,
 *      fused multiply-adds where the foreach kernels fuse), which must match bit for bit;
 * and against numbers PyTorch 1.13 itself produced (tests/fixtures/adamw_torch.txt, made
 * by tests/fixtures/gen_adamw_fixture.py).
 */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "harness.h"

static dlt_ctx *g_ctx;
static char g_dir[64];

static uint32_t rng_state = 777u;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((double)(rng_state >> 8) / (double)(1u << 23) - 1.0);
}

static dlt_tensor *make_param(const int64_t *shape, int32_t ndim, int32_t format, const float *vals) {
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, shape, ndim, format, &t));
    CHECK_OK(dlt_tensor_copy_from_host(t, vals, dlt_tensor_nbytes(t)));
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

typedef struct adam_opts {
    double beta1, beta2, eps;
    int decoupled, maximize;
} adam_opts;

#define MAXE 64
typedef struct ref_param {
    int64_t n, t;
    double p[MAXE], m[MAXE], v[MAXE];
    float p32[MAXE], m32[MAXE], v32[MAXE];
} ref_param;

/* PyTorch's rule in float64. */
static void ref_step64(ref_param *r, const float *grad, double lr, double wd, const adam_opts *o) {
    const double t = (double)r->t + 1; /* r->t is advanced by ref_step32 */
    const double bc1 = 1 - pow(o->beta1, t), bc2 = 1 - pow(o->beta2, t);
    for (int64_t e = 0; e < r->n; e++) {
        double g = o->maximize ? -(double)grad[e] : (double)grad[e];
        if (o->decoupled) r->p[e] *= 1 - lr * wd;
        else g += wd * r->p[e];
        r->m[e] = o->beta1 * r->m[e] + (1 - o->beta1) * g;
        r->v[e] = o->beta2 * r->v[e] + (1 - o->beta2) * g * g;
        double denom = sqrt(r->v[e]) / sqrt(bc2) + o->eps;
        r->p[e] -= lr / bc1 * r->m[e] / denom;
    }
}

/* PyTorch's foreach kernels in fp32 (torch/optim/adam.py _multi_tensor_adam): scalars are
 * Python floats rounded to f32 by the kernels; lerp, mul+addcmul, sqrt/div/add, addcdiv. */
static void ref_step32(ref_param *r, const float *grad, double lr, double wd, const adam_opts *o) {
    r->t++;
    const double bc1 = 1 - pow(o->beta1, (double)r->t), bc2 = 1 - pow(o->beta2, (double)r->t);
    const float decay = (float)(1 - lr * wd), wdf = (float)wd, w1 = (float)(1 - o->beta1);
    const float b2 = (float)o->beta2, w2 = (float)(1 - o->beta2), bc2s = (float)sqrt(bc2);
    const float step = (float)((lr / bc1) * -1), eps = (float)o->eps;
    for (int64_t e = 0; e < r->n; e++) {
        float g = o->maximize ? -grad[e] : grad[e];
        float p = r->p32[e], m = r->m32[e], v = r->v32[e];
        if (wd != 0 && o->decoupled) p = p * decay;
        if (wd != 0 && !o->decoupled) g = fmaf(wdf, p, g);
        const float d = g - m;
        m = w1 < 0.5f ? fmaf(w1, d, m) : g - d * (1.0f - w1);
        const float vb = v * b2, gg = g * g;
        v = fmaf(w2, gg, vb);
        const float sq = sqrtf(v), q = sq / bc2s, denom = q + eps, ratio = m / denom;
        r->p32[e] = fmaf(step, ratio, p);
        r->m32[e] = m;
        r->v32[e] = v;
    }
}

static void check_param(dlt_optimizer *opt, int32_t idx, dlt_tensor *p, const ref_param *r,
                        const char *what, int step) {
    float got[MAXE];
    int64_t at = 0;
    read_host(p, got);
    CHECK(same_bits(got, r->p32, r->n, &at), "%s step %d param %d element %lld: %.9g vs fp32 foreach %.9g",
          what, step, idx, (long long)at, got[at], r->p32[at]);
    double worst = 0;
    for (int64_t e = 0; e < r->n; e++)
        worst = fmax(worst, fabs((double)got[e] - r->p[e]) / (1.0 + fabs(r->p[e])));
    CHECK(worst < 2e-6, "%s step %d param %d: error %.3g against float64", what, step, idx, worst);
    int64_t t = -1;
    CHECK_OK(dlt_optimizer_param_step(opt, idx, &t));
    CHECK(t == r->t, "%s step %d param %d: step count %lld, expected %lld", what, step, idx, (long long)t,
          (long long)r->t);
    dlt_tensor *m = dlt_optimizer_exp_avg(opt, idx), *v = dlt_optimizer_exp_avg_sq(opt, idx);
    if (r->t == 0) {
        CHECK(m == NULL && v == NULL, "%s param %d: moments before its first gradient", what, idx);
        return;
    }
    REQUIRE(m && v);
    read_host(m, got);
    CHECK(same_bits(got, r->m32, r->n, &at), "%s step %d exp_avg %d element %lld: %.9g vs %.9g", what, step,
          idx, (long long)at, got[at], r->m32[at]);
    for (int64_t e = 0; e < r->n; e++)
        CHECK(fabs(got[e] - r->m[e]) <= 1e-6 * (1 + fabs(r->m[e])), "exp_avg %d[%lld] %.9g vs %.9g", idx,
              (long long)e, got[e], r->m[e]);
    read_host(v, got);
    CHECK(same_bits(got, r->v32, r->n, &at), "%s step %d exp_avg_sq %d element %lld: %.9g vs %.9g", what,
          step, idx, (long long)at, got[at], r->v32[at]);
    for (int64_t e = 0; e < r->n; e++)
        CHECK(fabs(got[e] - r->v[e]) <= 1e-6 * (1 + fabs(r->v[e])), "exp_avg_sq %d[%lld] %.9g vs %.9g", idx,
              (long long)e, got[e], r->v[e]);
}

/* ---- the update over option combinations ---- */

static adam_opts g_combo;

static void test_adam_combo(void) {
    const adam_opts o = g_combo;
    enum { NP = 5 };
    const int64_t s0[2] = {3, 5}, s1[1] = {7}, s2[2] = {2, 3}, s3[4] = {2, 3, 2, 2}, s4[1] = {4};
    const int64_t *shapes[NP] = {s0, s2, s3, s1, s4};
    const int32_t nds[NP] = {2, 2, 4, 1, 1};
    const int32_t fmts[NP] = {0, 0, DLT_FORMAT_CHANNELS_LAST, 0, 0};
    const int group[NP] = {0, 0, 0, 1, 1};
    const int first_grad[NP] = {1, 3, 1, 1, 0}; /* 0: never */
    double lr[2] = {0.01, 0.003};
    const double wd[2] = {0.1, 0.0};
    ref_param ref[NP];
    dlt_tensor *params[NP];
    memset(ref, 0, sizeof ref);
    for (int i = 0; i < NP; i++) {
        int64_t n = 1;
        for (int32_t d = 0; d < nds[i]; d++) n *= shapes[i][d];
        ref[i].n = n;
        float v[MAXE];
        for (int64_t e = 0; e < n; e++) ref[i].p[e] = ref[i].p32[e] = v[e] = frand();
        params[i] = make_param(shapes[i], nds[i], fmts[i], v);
    }
    dlt_adamw_options ao;
    if (o.decoupled) dlt_adamw_options_default(&ao);
    else dlt_adam_options_default(&ao);
    ao.lr = lr[0];
    ao.weight_decay = wd[0];
    ao.beta1 = o.beta1;
    ao.beta2 = o.beta2;
    ao.eps = o.eps;
    ao.maximize = o.maximize;
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_adamw_create_ex(params, 3, &ao, &opt));
    CHECK_OK(dlt_optimizer_add_param_group(opt, params + 3, 2, lr[1], wd[1]));
    CHECK(strcmp(dlt_optimizer_kind(opt), o.decoupled ? "AdamW" : "Adam") == 0, "%s", dlt_optimizer_kind(opt));
    CHECK(dlt_optimizer_num_params(opt) == NP && dlt_optimizer_num_param_groups(opt) == 2);
    for (int i = 0; i < NP; i++)
        CHECK(dlt_optimizer_param(opt, i) == params[i] && dlt_optimizer_param_group_of(opt, i) == group[i]);
    dlt_adamw_options got_o;
    dlt_adamw_options_default(&got_o);
    CHECK_OK(dlt_adamw_get_options(opt, &got_o));
    CHECK(got_o.lr == lr[0] && got_o.beta1 == o.beta1 && got_o.beta2 == o.beta2 && got_o.eps == o.eps &&
          got_o.weight_decay == wd[0] && got_o.decoupled_weight_decay == o.decoupled &&
          got_o.maximize == o.maximize && got_o.amsgrad == 0);

    for (int step = 1; step <= 6; step++) {
        if (step == 4) {
            lr[1] = 0.002; /* param_groups[1]["lr"] = 0.002 */
            CHECK_OK(dlt_optimizer_set_group_lr(opt, 1, lr[1]));
        }
        if (step == 6) {
            lr[0] = lr[1] = 0.005; /* every group, as nanoGPT's loop */
            CHECK_OK(dlt_optimizer_set_lr(opt, 0.005));
        }
        float grads[NP][MAXE];
        int has[NP];
        for (int i = 0; i < NP; i++) {
            has[i] = first_grad[i] && step >= first_grad[i] && !(i == 2 && step == 4);
            if (!has[i]) {
                CHECK_OK(dlt_zero_grad(&params[i], 1, 1));
                continue;
            }
            for (int64_t e = 0; e < ref[i].n; e++) grads[i][e] = frand();
            th_set_grad(params[i], grads[i]);
        }
        CHECK_OK(dlt_optimizer_step(opt));
        for (int i = 0; i < NP; i++) {
            if (!has[i]) continue;
            const double lr_dev = (double)(float)lr[group[i]]; /* the device keeps lr in f32 */
            ref_step64(&ref[i], grads[i], lr[group[i]], wd[group[i]], &o);
            ref_step32(&ref[i], grads[i], lr_dev, wd[group[i]], &o);
        }
        for (int i = 0; i < NP; i++) check_param(opt, i, params[i], &ref[i], o.decoupled ? "AdamW" : "Adam", step);
    }
    int64_t count = -1;
    double glr = 0;
    CHECK_OK(dlt_optimizer_step_count(opt, &count));
    CHECK(count == 6, "step count %lld", (long long)count);
    CHECK_OK(dlt_optimizer_get_group_lr(opt, 1, &glr));
    CHECK(glr == (double)0.005f, "group 1 lr %.9g", glr);
    double gwd = -1;
    CHECK_OK(dlt_optimizer_get_group_weight_decay(opt, 0, &gwd));
    CHECK(gwd == wd[0]);
    dlt_optimizer_destroy(opt);
    for (int i = 0; i < NP; i++) dlt_tensor_release(params[i]);
}

/* nanoGPT's grouping (model.py configure_optimizers), the documented recipe: weight decay
 * on tensors with 2 or more dims, none on the rest. With zero gradients an AdamW step is
 * pure decay: p * (1 - lr*wd) exactly for the decayed group, p unchanged for the other. */
static void test_nanogpt_grouping(void) {
    const int64_t sw[2] = {4, 3}, sb[1] = {4}, se[2] = {5, 3}, sl[1] = {3};
    float vw[12], vb[4], ve[15], vl[3];
    for (int i = 0; i < 12; i++) vw[i] = frand();
    for (int i = 0; i < 4; i++) vb[i] = frand();
    for (int i = 0; i < 15; i++) ve[i] = frand();
    for (int i = 0; i < 3; i++) vl[i] = frand();
    dlt_tensor *all[4] = {make_param(sw, 2, 0, vw), make_param(sb, 1, 0, vb), make_param(se, 2, 0, ve),
                          make_param(sl, 1, 0, vl)};
    dlt_tensor *decay[4], *no_decay[4];
    int nd = 0, nn = 0;
    for (int i = 0; i < 4; i++) {
        if (dlt_tensor_ndim(all[i]) >= 2) decay[nd++] = all[i];
        else no_decay[nn++] = all[i];
    }
    dlt_adamw_options o;
    dlt_adamw_options_default(&o);
    o.lr = 1e-3;
    o.beta2 = 0.99;
    o.weight_decay = 0.1;
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_adamw_create_ex(decay, nd, &o, &opt));
    CHECK_OK(dlt_optimizer_add_param_group(opt, no_decay, nn, 1e-3, 0.0));
    for (int i = 0; i < 4; i++) { /* zero gradients: every parameter steps */
        float z[16] = {0};
        th_set_grad(all[i], z);
    }
    CHECK_OK(dlt_optimizer_step(opt));
    const float decay_f = (float)(1.0 - (double)1e-3f * 0.1);
    const float *vals[4] = {vw, vb, ve, vl};
    for (int i = 0; i < 4; i++) {
        float got[16];
        read_host(all[i], got);
        const int decayed = dlt_tensor_ndim(all[i]) >= 2;
        for (int64_t e = 0; e < dlt_tensor_numel(all[i]); e++) {
            const float want = decayed ? vals[i][e] * decay_f : vals[i][e];
            CHECK(got[e] == want, "tensor %d [%lld]: %.9g, expected %.9g (%s)", i, (long long)e, got[e], want,
                  decayed ? "decayed" : "not decayed");
        }
    }
    dlt_optimizer_destroy(opt);
    for (int i = 0; i < 4; i++) dlt_tensor_release(all[i]);
}

/* A tied weight (the same tensor passed twice) is one parameter: one update per step, the
 * same bits as an optimizer that got it once. In two groups it is PyTorch's error. */
static void test_tied_weights(void) {
    const int64_t s[2] = {3, 4};
    float v[12], g[12];
    for (int i = 0; i < 12; i++) {
        v[i] = frand();
        g[i] = frand();
    }
    dlt_tensor *a = make_param(s, 2, 0, v), *b = make_param(s, 2, 0, v), *c = make_param(s, 2, 0, v);
    dlt_tensor *tied[3] = {a, c, a};
    dlt_optimizer *o1 = NULL, *o2 = NULL;
    CHECK_OK(dlt_adamw_create_ex(tied, 3, NULL, &o1));
    CHECK(dlt_optimizer_num_params(o1) == 2, "%d parameters", dlt_optimizer_num_params(o1));
    CHECK_OK(dlt_adamw_create_ex(&b, 1, NULL, &o2));
    for (int step = 0; step < 3; step++) {
        th_set_grad(a, g);
        th_set_grad(b, g);
        CHECK_OK(dlt_optimizer_step(o1));
        CHECK_OK(dlt_optimizer_step(o2));
    }
    float ga[12], gb[12];
    int64_t at = 0, t = 0;
    read_host(a, ga);
    read_host(b, gb);
    CHECK(same_bits(ga, gb, 12, &at), "tied weight [%lld]: %.9g vs %.9g", (long long)at, ga[at], gb[at]);
    CHECK_OK(dlt_optimizer_param_step(o1, 0, &t));
    CHECK(t == 3, "tied weight's step count %lld", (long long)t);
    /* the same tensor in a second group */
    dlt_tensor *again[2] = {c, a};
    CHECK_STATUS(dlt_optimizer_add_param_group(o1, again, 2, 1e-3, 0.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "more than one parameter group") != NULL, "%s", dlt_last_error());
    CHECK(dlt_optimizer_num_params(o1) == 2 && dlt_optimizer_num_param_groups(o1) == 1);
    /* a tied weight listed twice in a new group also counts once */
    dlt_tensor *d = make_param(s, 2, 0, v);
    dlt_tensor *dd[2] = {d, d};
    CHECK_OK(dlt_optimizer_add_param_group(o1, dd, 2, 1e-3, 0.0));
    CHECK(dlt_optimizer_num_params(o1) == 3 && dlt_optimizer_num_param_groups(o1) == 2);
    /* clipping counts it once too */
    th_set_grad(a, g);
    dlt_tensor *total1 = NULL, *total2 = NULL;
    CHECK_OK(dlt_clip_grad_norm(tied, 3, 1e9, 2.0, &total1));
    CHECK_OK(dlt_clip_grad_norm(&a, 1, 1e9, 2.0, &total2));
    float t1 = 0, t2 = 0;
    read_host(total1, &t1);
    read_host(total2, &t2);
    CHECK(t1 == t2, "norm with the tied weight listed twice %.9g, once %.9g", t1, t2);
    dlt_tensor_release(total1);
    dlt_tensor_release(total2);
    dlt_optimizer_destroy(o1);
    dlt_optimizer_destroy(o2);
    dlt_tensor_release(a);
    dlt_tensor_release(b);
    dlt_tensor_release(c);
    dlt_tensor_release(d);
}

/* A step the GradScaler skips (inf in a gradient) leaves parameters, moments, step counts
 * and the lr as they were; training then continues exactly as if it never happened. Also
 * when the very first step is skipped (moments exist, zero, but the parameter has no
 * state: step count 0). */
static void test_scaler_skip(void) {
    const int64_t s[1] = {6};
    float v[6], good[3][6], bad[6];
    for (int i = 0; i < 6; i++) v[i] = frand();
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 6; i++) good[k][i] = frand();
    for (int i = 0; i < 6; i++) bad[i] = frand();
    bad[2] = INFINITY;
    dlt_tensor *p = make_param(s, 1, 0, v), *q = make_param(s, 1, 0, v);
    dlt_optimizer *op = NULL, *oq = NULL;
    CHECK_OK(dlt_adamw_create_ex(&p, 1, NULL, &op));
    CHECK_OK(dlt_adamw_create_ex(&q, 1, NULL, &oq));
    CHECK_OK(dlt_lr_schedule_warmup_cosine(op, 2, 10, 1e-5));
    CHECK_OK(dlt_lr_schedule_warmup_cosine(oq, 2, 10, 1e-5));
    dlt_grad_scaler *sc = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 1.0, 2.0, 0.5, 1000, 1, &sc));
    /* pattern: skip, clean, skip, clean, clean; q only sees the clean ones */
    const int pattern[5] = {0, 1, 0, 1, 1};
    int k = 0;
    for (int i = 0; i < 5; i++) {
        float before[6], after[6], mb[6], ma[6];
        read_host(p, before);
        dlt_tensor *m = dlt_optimizer_exp_avg(op, 0);
        if (m) read_host(m, mb);
        int64_t t_before = 0, t_after = 0, c_before = 0, c_after = 0;
        double lr_before = 0, lr_after = 0;
        CHECK_OK(dlt_optimizer_param_step(op, 0, &t_before));
        CHECK_OK(dlt_optimizer_step_count(op, &c_before));
        CHECK_OK(dlt_optimizer_get_lr(op, &lr_before));
        th_set_grad(p, pattern[i] ? good[k] : bad);
        CHECK_OK(dlt_grad_scaler_step(sc, op));
        CHECK_OK(dlt_grad_scaler_update_to(sc, 1.0)); /* keep the scale 1: q's gradients are unscaled */
        int32_t applied = -1;
        CHECK_OK(dlt_optimizer_last_step_applied(op, &applied));
        CHECK(applied == pattern[i], "i=%d applied %d", i, applied);
        CHECK_OK(dlt_optimizer_param_step(op, 0, &t_after));
        CHECK_OK(dlt_optimizer_step_count(op, &c_after));
        CHECK_OK(dlt_optimizer_get_lr(op, &lr_after));
        if (!pattern[i]) {
            read_host(p, after);
            CHECK(memcmp(before, after, sizeof before) == 0, "i=%d: a skipped step moved the parameter", i);
            REQUIRE(dlt_optimizer_exp_avg(op, 0) != NULL);
            read_host(dlt_optimizer_exp_avg(op, 0), ma);
            if (m) CHECK(memcmp(mb, ma, sizeof mb) == 0, "i=%d: a skipped step changed exp_avg", i);
            else
                for (int e = 0; e < 6; e++) CHECK(ma[e] == 0.0f, "moments of a skipped first step must be 0");
            CHECK(t_after == t_before && c_after == c_before && lr_after == lr_before,
                  "i=%d: step %lld->%lld count %lld->%lld lr %g->%g", i, (long long)t_before,
                  (long long)t_after, (long long)c_before, (long long)c_after, lr_before, lr_after);
        } else {
            th_set_grad(q, good[k]);
            CHECK_OK(dlt_optimizer_step(oq));
            k++;
            CHECK(t_after == t_before + 1 && c_after == c_before + 1, "i=%d: counts did not advance", i);
        }
    }
    float gp[6], gq[6];
    int64_t at = 0;
    read_host(p, gp);
    read_host(q, gq);
    CHECK(same_bits(gp, gq, 6, &at), "[%lld] %.9g vs %.9g", (long long)at, gp[at], gq[at]);
    read_host(dlt_optimizer_exp_avg_sq(op, 0), gp);
    read_host(dlt_optimizer_exp_avg_sq(oq, 0), gq);
    CHECK(same_bits(gp, gq, 6, &at), "exp_avg_sq [%lld] %.9g vs %.9g", (long long)at, gp[at], gq[at]);
    dlt_grad_scaler_destroy(sc);
    dlt_optimizer_destroy(op);
    dlt_optimizer_destroy(oq);
    dlt_tensor_release(p);
    dlt_tensor_release(q);
}

/* Each group follows a schedule from its own base lr (PyTorch's schedulers keep one
 * initial_lr per group); a group added later too. */
static double nanogpt_lr(int64_t it, double lr, int64_t warmup, int64_t decay, double min_lr) {
    if (it < warmup) return lr * (double)(it + 1) / (double)(warmup + 1);
    if (it > decay) return min_lr;
    double ratio = (double)(it - warmup) / (double)(decay - warmup);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return min_lr + coeff * (lr - min_lr);
}

static void test_schedule_groups(void) {
    const int64_t s[1] = {3};
    const float v[3] = {1, 2, 3}, g[3] = {0.1f, -0.2f, 0.3f};
    dlt_tensor *a = make_param(s, 1, 0, v), *b = make_param(s, 1, 0, v);
    dlt_adamw_options o;
    dlt_adamw_options_default(&o);
    o.lr = 6e-4;
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_adamw_create_ex(&a, 1, &o, &opt));
    CHECK_OK(dlt_lr_schedule_warmup_cosine(opt, 3, 10, 6e-5));
    CHECK_OK(dlt_optimizer_add_param_group(opt, &b, 1, 2e-3, 0.0)); /* after the schedule */
    for (int64_t t = 0; t <= 13; t++) {
        if (t > 0) {
            th_set_grad(a, g);
            th_set_grad(b, g);
            CHECK_OK(dlt_optimizer_step(opt));
        }
        double l0 = 0, l1 = 0;
        CHECK_OK(dlt_optimizer_get_group_lr(opt, 0, &l0));
        CHECK_OK(dlt_optimizer_get_group_lr(opt, 1, &l1));
        const double w0 = nanogpt_lr(t, 6e-4, 3, 10, 6e-5), w1 = nanogpt_lr(t, 2e-3, 3, 10, 6e-5);
        CHECK(l0 == (double)(float)w0 && l1 == (double)(float)w1, "t=%lld lrs %.9g %.9g, formula %.9g %.9g",
              (long long)t, l0, l1, w0, w1);
    }
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(a);
    dlt_tensor_release(b);
}

/* ---- checkpoints ---- */

typedef struct run {
    dlt_module *m;
    dlt_optimizer *opt;
    dlt_tensor *p[4];
    int32_t np;
} run;

/* A Sequential of two Linears; AdamW with nanoGPT's groups (weights decayed, biases not). */
static void run_make(run *r, uint64_t seed) {
    CHECK_OK(dlt_ctx_set_seed(g_ctx, seed));
    dlt_module *l1 = NULL, *l2 = NULL;
    CHECK_OK(dlt_sequential_create(g_ctx, &r->m));
    CHECK_OK(dlt_linear_create(g_ctx, 4, 3, 1, &l1));
    CHECK_OK(dlt_sequential_append(r->m, NULL, l1));
    CHECK_OK(dlt_linear_create(g_ctx, 3, 2, 1, &l2));
    CHECK_OK(dlt_sequential_append(r->m, NULL, l2));
    CHECK_OK(dlt_module_params(r->m, r->p, 4, &r->np));
    dlt_tensor *w[2] = {r->p[0], r->p[2]}, *b[2] = {r->p[1], r->p[3]};
    dlt_adamw_options o;
    dlt_adamw_options_default(&o);
    o.lr = 1e-2;
    o.weight_decay = 0.1;
    CHECK_OK(dlt_adamw_create_ex(w, 2, &o, &r->opt));
    CHECK_OK(dlt_optimizer_add_param_group(r->opt, b, 2, 3e-3, 0.0));
    CHECK_OK(dlt_lr_schedule_warmup_cosine(r->opt, 2, 8, 1e-4));
}

static void run_free(run *r) {
    dlt_optimizer_destroy(r->opt);
    dlt_module_destroy(r->m);
}

/* Step k's gradients (deterministic); the last bias gets none at steps 1 and 2, so it has
 * fewer steps than the others (and none before step 3). */
static void run_step(run *r, int k) {
    uint32_t saved = rng_state;
    rng_state = 1000u + (uint32_t)k;
    for (int i = 0; i < 4; i++) {
        float g[16];
        for (int e = 0; e < 16; e++) g[e] = frand();
        if (i == 3 && k <= 2) CHECK_OK(dlt_zero_grad(&r->p[i], 1, 1));
        else th_set_grad(r->p[i], g);
    }
    rng_state = saved;
    CHECK_OK(dlt_optimizer_step(r->opt));
}

static void snapshot(run *r, float out[4][16]) {
    memset(out, 0, 4 * 16 * sizeof(float));
    for (int i = 0; i < 4; i++) read_host(r->p[i], out[i]);
}

static void check_same(float a[4][16], float b[4][16], const char *what) {
    for (int i = 0; i < 4; i++)
        for (int e = 0; e < 16; e++)
            if (memcmp(&a[i][e], &b[i][e], 4) != 0) {
                CHECK(0, "%s: param %d [%d] %.9g vs %.9g", what, i, e, a[i][e], b[i][e]);
                return;
            }
}

static void test_checkpoint_round_trip(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/adamw.safetensors", g_dir);
    run a;
    run_make(&a, 11);
    run_step(&a, 1);
    run_step(&a, 2);
    run_step(&a, 3);
    CHECK_OK(dlt_checkpoint_save(path, a.m, a.opt, NULL, 0, 3));
    run_step(&a, 4);
    float want[4][16], got[4][16];
    snapshot(&a, want);
    /* PyTorch's keys and values */
    dlt_tensor *t = NULL;
    float stepv = 0;
    CHECK_OK(dlt_safetensors_load_tensor(g_ctx, path, "optimizer.step.0.weight", &t));
    CHECK(dlt_tensor_dtype(t) == DLT_F32 && dlt_tensor_ndim(t) == 0);
    read_host(t, &stepv);
    CHECK(stepv == 3.0f, "optimizer.step.0.weight = %g", stepv);
    dlt_tensor_release(t);
    CHECK_OK(dlt_safetensors_load_tensor(g_ctx, path, "optimizer.step.1.bias", &t));
    read_host(t, &stepv);
    CHECK(stepv == 1.0f, "optimizer.step.1.bias = %g (its first gradient came at step 3)", stepv);
    dlt_tensor_release(t);
    CHECK_OK(dlt_safetensors_load_tensor(g_ctx, path, "optimizer.exp_avg_sq.0.bias", &t));
    CHECK(dlt_tensor_numel(t) == 3);
    dlt_tensor_release(t);
    /* rollback into the objects that trained on, then the same step 4 */
    CHECK_OK(dlt_checkpoint_load(path, a.m, a.opt, NULL, NULL, NULL));
    int64_t count = 0, pst = 0;
    CHECK_OK(dlt_optimizer_step_count(a.opt, &count));
    CHECK_OK(dlt_optimizer_param_step(a.opt, 3, &pst));
    CHECK(count == 3 && pst == 1, "after load: step count %lld, last bias %lld", (long long)count, (long long)pst);
    run_step(&a, 4);
    snapshot(&a, got);
    check_same(got, want, "resumed in place");
    /* into fresh objects (another initialisation) */
    run b;
    run_make(&b, 99);
    run_step(&b, 1); /* state that the load must replace */
    CHECK_OK(dlt_checkpoint_load(path, b.m, b.opt, NULL, NULL, NULL));
    run_step(&b, 4);
    snapshot(&b, got);
    check_same(got, want, "resumed in fresh objects");
    double l1 = 0, l1b = 0;
    CHECK_OK(dlt_optimizer_get_group_lr(a.opt, 1, &l1));
    CHECK_OK(dlt_optimizer_get_group_lr(b.opt, 1, &l1b));
    CHECK(l1 == l1b, "group 1 lr %.9g vs %.9g", l1, l1b);
    run_free(&b);
    /* a file from an optimizer of another kind: refused, nothing changes */
    char spath[128];
    snprintf(spath, sizeof spath, "%s/sgd.safetensors", g_dir);
    dlt_optimizer *sgd = NULL;
    CHECK_OK(dlt_sgd_create(a.p, 4, 0.1, 0.9, 0, 0, 0, 0, &sgd));
    for (int i = 0; i < 4; i++) {
        float g[16] = {0.5f};
        th_set_grad(a.p[i], g);
    }
    float before[4][16], mb[12], ma[12];
    snapshot(&a, before);
    CHECK_OK(dlt_optimizer_step(sgd));
    CHECK_OK(dlt_checkpoint_save(spath, a.m, sgd, NULL, 0, 0));
    snapshot(&a, before);
    read_host(dlt_optimizer_exp_avg(a.opt, 0), mb);
    CHECK_STATUS(dlt_checkpoint_load(spath, a.m, a.opt, NULL, NULL, NULL), DLT_ERR_FORMAT);
    CHECK_STATUS(dlt_checkpoint_load(path, a.m, sgd, NULL, NULL, NULL), DLT_ERR_FORMAT);
    snapshot(&a, got);
    check_same(got, before, "after refused loads");
    read_host(dlt_optimizer_exp_avg(a.opt, 0), ma);
    CHECK(memcmp(ma, mb, sizeof ma) == 0, "a refused load changed exp_avg");
    dlt_optimizer_destroy(sgd);
    run_free(&a);
    unlink(path);
    unlink(spath);
}

/* ---- numbers from PyTorch itself (tests/fixtures/adamw_torch.txt) ----
 * Written once by tests/fixtures/gen_adamw_fixture.py with torch 1.13 (Debian's
 * python3-torch, float32 on the CPU): AdamW and Adam (L2, maximize) over two groups and
 * five steps with a lagging step count and an lr change, then clip_grad_norm_ (norms 2 and
 * inf). torch 1.13's CPU loop rounds a little differently from the foreach rule (mul + add
 * for the first moment): agreement to fp32 rounding is the test. */

static int parse_floats(const char *s, float *out, int cap) {
    char *end = NULL;
    long n = strtol(s, &end, 10);
    if (n < 0 || n > cap) return -1;
    for (long i = 0; i < n; i++) out[i] = strtof(end, &end);
    return (int)n;
}

static void check_close(const float *got, const float *want, int n, double tol, const char *what, int line) {
    for (int i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= tol * (1.0 + fabs((double)want[i])))) {
            CHECK(0, "fixture line %d, %s [%d]: %.9g, PyTorch %.9g", line, what, i, got[i], want[i]);
            return;
        }
}

static void test_torch_fixture(void) {
    const char *root = getenv("DLT_SOURCE_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/adamw_torch.txt", root ? root : ".");
    FILE *f = fopen(path, "r");
    if (!f) SKIP("fixture %.150s not present (run tests/fixtures/gen_adamw_fixture.py with torch)", path);
    static char line[4096];
    dlt_tensor *prm[2] = {NULL, NULL};
    dlt_optimizer *opt = NULL;
    int stepped = 0, has_grad[2] = {0, 0}, lineno = 0, cases = 0, checks = 0;
    float init[2][16];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char key[16], who[4];
        int step = 0, n = 0;
        float vals[16], got[16];
        if (line[0] == '#' || sscanf(line, "%15s", key) != 1) continue;
        const char *rest = line + strlen(key);
        if (strcmp(key, "case") == 0) {
            dlt_optimizer_destroy(opt);
            for (int k = 0; k < 2; k++) dlt_tensor_release(prm[k]);
            opt = NULL;
            prm[0] = prm[1] = NULL;
            stepped = 0;
            cases++;
            const int adam = strstr(rest, "adam") && !strstr(rest, "adamw");
            if (adam) memcpy(key, "adam", 5);
            else memcpy(key, "adamw", 6);
            /* the parameters come in the next two lines */
            for (int k = 0; k < 2; k++) {
                REQUIRE(fgets(line, sizeof line, f) != NULL);
                lineno++;
                REQUIRE(sscanf(line, "init %3s", who) == 1);
                n = parse_floats(line + 7, init[k], 16);
                const int64_t sa[2] = {3, 4}, sb[1] = {5};
                REQUIRE(n == (k ? 5 : 12));
                prm[k] = make_param(k ? sb : sa, k ? 1 : 2, 0, init[k]);
            }
            dlt_adamw_options o;
            if (adam) dlt_adam_options_default(&o);
            else dlt_adamw_options_default(&o);
            o.lr = 1e-2;
            o.weight_decay = 0.1;
            o.beta2 = 0.99;
            o.maximize = adam;
            CHECK_OK(dlt_adamw_create_ex(&prm[0], 1, &o, &opt));
            CHECK_OK(dlt_optimizer_add_param_group(opt, &prm[1], 1, 3e-3, 0.0));
        } else if (strcmp(key, "lr") == 0) {
            int g = 0;
            double v = 0;
            REQUIRE(sscanf(rest, "%d %d %lf", &step, &g, &v) == 3);
            CHECK_OK(dlt_optimizer_set_group_lr(opt, g, v));
        } else if (strcmp(key, "grad") == 0) {
            int off = 0;
            REQUIRE(sscanf(rest, "%d %3s %n", &step, who, &off) == 2);
            n = parse_floats(rest + off, vals, 16);
            const int k = who[0] == 'B';
            th_set_grad(prm[k], vals);
            has_grad[k] = 1;
        } else if (strcmp(key, "param") == 0) {
            int off = 0;
            REQUIRE(sscanf(rest, "%d %3s %n", &step, who, &off) == 2);
            if (stepped < step) { /* the step's gradients are set: take it */
                for (int k = 0; k < 2; k++)
                    if (!has_grad[k]) CHECK_OK(dlt_zero_grad(&prm[k], 1, 1));
                CHECK_OK(dlt_optimizer_step(opt));
                has_grad[0] = has_grad[1] = 0;
                stepped = step;
            }
            n = parse_floats(rest + off, vals, 16);
            const int k = who[0] == 'B';
            read_host(prm[k], got);
            check_close(got, vals, n, 5e-7, "parameter", lineno);
            checks++;
        } else if (strcmp(key, "exp_avg") == 0 || strcmp(key, "exp_avg_sq") == 0) {
            int off = 0;
            REQUIRE(sscanf(rest, " %3s %n", who, &off) == 1);
            n = parse_floats(rest + off, vals, 16);
            const int k = who[0] == 'B';
            dlt_tensor *t = key[7] == '_' ? dlt_optimizer_exp_avg_sq(opt, k) : dlt_optimizer_exp_avg(opt, k);
            REQUIRE(t != NULL);
            read_host(t, got);
            check_close(got, vals, n, 5e-7, key, lineno);
            checks++;
        } else if (strcmp(key, "step") == 0) {
            double v = 0;
            int64_t t = 0;
            REQUIRE(sscanf(rest, " %3s %lf", who, &v) == 2);
            CHECK_OK(dlt_optimizer_param_step(opt, who[0] == 'B', &t));
            CHECK((double)t == v, "fixture line %d: step of %s %lld, PyTorch %g", lineno, who, (long long)t, v);
            checks++;
        } else if (strcmp(key, "clip") == 0) {
            char type[8];
            double max_norm = 0, total = 0;
            REQUIRE(sscanf(rest, " %7s %lf total %lf", type, &max_norm, &total) == 3);
            dlt_tensor *tt = NULL;
            CHECK_OK(dlt_clip_grad_norm(prm, 2, max_norm, strcmp(type, "inf") == 0 ? INFINITY : 2.0, &tt));
            float tv = 0;
            read_host(tt, &tv);
            dlt_tensor_release(tt);
            CHECK(fabs(tv - total) <= 1e-6 * total, "fixture line %d: total %.9g, PyTorch %.9g", lineno, tv, total);
            has_grad[0] = has_grad[1] = 0;
            checks++;
        } else if (strcmp(key, "clipped") == 0) {
            int off = 0;
            REQUIRE(sscanf(rest, " %3s %n", who, &off) == 1);
            n = parse_floats(rest + off, vals, 16);
            read_host(dlt_tensor_grad(prm[who[0] == 'B']), got);
            check_close(got, vals, n, 5e-7, "clipped gradient", lineno);
            checks++;
        }
    }
    fclose(f);
    CHECK(cases == 2 && checks >= 40, "fixture: %d cases, %d checks", cases, checks);
    dlt_optimizer_destroy(opt);
    for (int k = 0; k < 2; k++) dlt_tensor_release(prm[k]);
}

/* ---- misuse: clear status, message, nothing changed ---- */

static void test_misuse(void) {
    const int64_t s[1] = {3};
    const float v[3] = {1, 2, 3};
    dlt_tensor *p = make_param(s, 1, 0, v), *q = make_param(s, 1, 0, v);
    dlt_optimizer *opt = NULL;
    dlt_adamw_options o;
    struct { double lr, b1, b2, eps, wd; const char *msg; } bad[] = {
        {-1e-3, 0.9, 0.999, 1e-8, 0.01, "Invalid learning rate"},
        {NAN, 0.9, 0.999, 1e-8, 0.01, "Invalid learning rate"},
        {1e-3, 1.0, 0.999, 1e-8, 0.01, "Invalid beta parameter at index 0"},
        {1e-3, -0.1, 0.999, 1e-8, 0.01, "Invalid beta parameter at index 0"},
        {1e-3, 0.9, 1.5, 1e-8, 0.01, "Invalid beta parameter at index 1"},
        {1e-3, 0.9, NAN, 1e-8, 0.01, "Invalid beta parameter at index 1"},
        {1e-3, 0.9, 0.999, -1e-8, 0.01, "Invalid epsilon value"},
        {1e-3, 0.9, 0.999, 1e-8, -0.01, "Invalid weight_decay value"},
        {INFINITY, 0.9, 0.999, 1e-8, 0.01, "Invalid learning rate"}, /* above FLT_MAX: the lr lives in fp32 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dlt_adamw_options_default(&o);
        o.lr = bad[i].lr;
        o.beta1 = bad[i].b1;
        o.beta2 = bad[i].b2;
        o.eps = bad[i].eps;
        o.weight_decay = bad[i].wd;
        CHECK_STATUS(dlt_adamw_create_ex(&p, 1, &o, &opt), DLT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(dlt_last_error(), bad[i].msg) != NULL, "case %zu: %s", i, dlt_last_error());
        CHECK(opt == NULL);
    }
    dlt_adamw_options_default(&o);
    o.amsgrad = 1;
    CHECK_STATUS(dlt_adamw_create_ex(&p, 1, &o, &opt), DLT_ERR_NOT_SUPPORTED);
    dlt_adamw_options_default(&o);
    o.size = 8;
    CHECK_STATUS(dlt_adamw_create_ex(&p, 1, &o, &opt), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "dlt_adamw_options_default") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_adamw_create_ex(NULL, 1, NULL, &opt), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_adamw_create_ex(&p, 1, NULL, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_adamw_create_ex(&p, 0, NULL, &opt), DLT_ERR_INVALID_ARGUMENT);
    dlt_tensor *withnull[2] = {p, NULL};
    CHECK_STATUS(dlt_adamw_create_ex(withnull, 2, NULL, &opt), DLT_ERR_NULL_POINTER);
    dlt_tensor *half = NULL, *nograd = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F16, s, 1, 0, &half));
    CHECK_OK(dlt_tensor_set_requires_grad(half, 1));
    dlt_tensor *hp[2] = {p, half};
    CHECK_STATUS(dlt_adamw_create_ex(hp, 2, NULL, &opt), DLT_ERR_DTYPE);
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, s, 1, 0, &nograd));
    CHECK_STATUS(dlt_adamw_create_ex(&nograd, 1, NULL, &opt), DLT_ERR_INVALID_ARGUMENT);
    dlt_ctx *other = th_cpu_ctx();
    dlt_tensor *r = NULL;
    CHECK_OK(dlt_tensor_zeros(other, DLT_F32, s, 1, 0, &r));
    CHECK_OK(dlt_tensor_set_requires_grad(r, 1));
    dlt_tensor *mixed[2] = {p, r};
    CHECK_STATUS(dlt_adamw_create_ex(mixed, 2, NULL, &opt), DLT_ERR_CONTEXT_MISMATCH);
    CHECK(opt == NULL, "a failed create must not write the out-pointer");

    /* a valid optimizer; failed calls on it change nothing */
    CHECK_OK(dlt_adamw_create_ex(&p, 1, NULL, &opt));
    CHECK_STATUS(dlt_optimizer_add_param_group(opt, &q, 1, -1.0, 0.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_add_param_group(opt, &q, 1, 1e-3, -1.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_add_param_group(opt, &q, 0, 1e-3, 0.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_add_param_group(opt, NULL, 1, 1e-3, 0.0), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_optimizer_add_param_group(NULL, &q, 1, 1e-3, 0.0), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_optimizer_add_param_group(opt, &r, 1, 1e-3, 0.0), DLT_ERR_CONTEXT_MISMATCH);
    CHECK_STATUS(dlt_optimizer_add_param_group(opt, &half, 1, 1e-3, 0.0), DLT_ERR_DTYPE);
    CHECK(dlt_optimizer_num_params(opt) == 1 && dlt_optimizer_num_param_groups(opt) == 1);
    CHECK_STATUS(dlt_optimizer_set_group_lr(opt, 1, 0.1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_set_group_lr(opt, 0, -0.1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_get_group_lr(opt, -1, &(double){0}), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_get_group_lr(opt, 0, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_optimizer_set_group_weight_decay(opt, 0, NAN), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_optimizer_get_group_weight_decay(opt, 3, &(double){0}), DLT_ERR_INVALID_ARGUMENT);
    double lr = 0, wd = 0;
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK_OK(dlt_optimizer_get_group_weight_decay(opt, 0, &wd));
    CHECK(lr == (double)1e-3f && wd == 1e-2, "lr %g wd %g after failed calls", lr, wd);
    CHECK_STATUS(dlt_optimizer_param_step(opt, 1, &(int64_t){0}), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_sgd_get_options(opt, NULL, NULL, NULL, NULL, NULL), DLT_ERR_INVALID_ARGUMENT);
    dlt_adamw_options small;
    memset(&small, 0, sizeof small);
    CHECK_STATUS(dlt_adamw_get_options(opt, &small), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_warmup_cosine(opt, 5, 5, 0.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_warmup_cosine(opt, -1, 5, 0.0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_warmup_cosine(opt, 1, 5, -1e-4), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_warmup_cosine(NULL, 1, 5, 0.0), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_lr_schedule_constant(opt, 0.0, 5), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_lr_schedule_constant(opt, 0.5, -1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_optimizer_get_lr(opt, &lr));
    CHECK(lr == (double)1e-3f, "a refused schedule changed the lr: %g", lr);
    /* SGD keeps one group; Adam getters on SGD */
    dlt_optimizer *sgd = NULL;
    CHECK_OK(dlt_sgd_create(&q, 1, 0.1, 0, 0, 0, 0, 0, &sgd));
    CHECK_STATUS(dlt_optimizer_add_param_group(sgd, &p, 1, 0.1, 0.0), DLT_ERR_NOT_SUPPORTED);
    CHECK_STATUS(dlt_adamw_get_options(sgd, &o), DLT_ERR_INVALID_ARGUMENT);
    CHECK(dlt_optimizer_exp_avg(sgd, 0) == NULL && strcmp(dlt_optimizer_kind(sgd), "SGD") == 0);
    CHECK(strcmp(dlt_optimizer_kind(NULL), "") == 0 && dlt_optimizer_num_param_groups(NULL) == 0 &&
          dlt_optimizer_param_group_of(opt, 5) == -1);
    /* option structs: NULL is all defaults; a larger size (a newer header) is accepted */
    dlt_optimizer *d = NULL;
    CHECK_OK(dlt_sgd_create_ex(&q, 1, NULL, &d));
    CHECK_OK(dlt_optimizer_get_lr(d, &lr));
    CHECK(lr == (double)1e-3f);
    dlt_optimizer_destroy(d);
    dlt_sgd_options so;
    dlt_sgd_options_default(&so);
    CHECK(so.size == sizeof so && so.lr == 1e-3 && so.momentum == 0 && so.nesterov == 0);
    so.nesterov = 1;
    CHECK_STATUS(dlt_sgd_create_ex(&q, 1, &so, &d), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "dlt_sgd_create_ex") != NULL, "%s", dlt_last_error());
    dlt_optimizer_destroy(sgd);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(r);
    dlt_ctx_destroy(other);
    dlt_tensor_release(half);
    dlt_tensor_release(nograd);
    dlt_tensor_release(p);
    dlt_tensor_release(q);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    snprintf(g_dir, sizeof g_dir, "/tmp/dlt_adamw_XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("# mkdtemp failed\n");
        return 1;
    }
    static char names[8][96];
    int k = 0;
    for (int dec = 1; dec >= 0; dec--)
        for (int mx = 0; mx < 2; mx++)
            for (int b = 0; b < 2; b++) {
                adam_opts o = {b ? 0.2 : 0.9, 0.99, 1e-8, dec, mx};
                g_combo = o;
                snprintf(names[k], sizeof names[k], "%s beta1=%g maximize=%d, two groups, six steps",
                         dec ? "AdamW" : "Adam", o.beta1, mx);
                th_run(test_adam_combo, names[k]);
                k++;
            }
    RUN(test_nanogpt_grouping);
    RUN(test_tied_weights);
    RUN(test_scaler_skip);
    RUN(test_schedule_groups);
    RUN(test_checkpoint_round_trip);
    RUN(test_torch_fixture);
    RUN(test_misuse);
    rmdir(g_dir);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
