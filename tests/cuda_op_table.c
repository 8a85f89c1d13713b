/*
 * cuda_op_table.c - the op table (tests/ops/) in backend mode: every row run on CUDA and on
 * the CPU backend from the same input bytes, in f32, f16 and bf16, forward and backward
 * (the same random upstream gradient), outputs and every input gradient compared by
 * relative norm with the tolerance of the dtype (fp32 1e-5: TF32 is off by default; fp16
 * and bf16 1e-2). Rows flagged OT_CPU_ONLY are skipped, OT_F32_ONLY run in f32 alone.
 * A second forward and backward without zeroing must accumulate on both backends: the
 * accumulated gradients are compared too, which runs the kernels' beta = 1 paths (gradients
 * written straight into a leaf's buffer: layer_norm's dweight/dbias, embedding's dweight).
 * Without a GPU every case skips; DLT_CUDA_OPS_SELFTEST=1 compares against a second CPU
 * context instead, which runs the driver and every low-precision CPU path in CI.
 * Groups (DLT_TEST_GROUPS): "table" is the above (default settings: cuDNN's attention,
 * then the flash kernels, then the reference kernels); "flash" and "cudnn" run the attention
 * rows again in f16 and bf16 with only that fast path on (dlt_ctx_set_flash_sdp,
 * dlt_ctx_set_cudnn_sdp; the reference kernels serve what it cannot), same tolerances, plus
 * a check that on an sm_80+ device it really served chosen cases (its output is not
 * bitwise the reference's: P is rounded to the dtype before P V). "embedding_bits": the CUDA
 * gradient of embedding bit for bit against a host f32 sum in the order cuda/embedding.cu
 * documents (the table above compares it with the CPU's double sums by tolerance), at GPT-2's
 * shapes and others that take each of its kernels; a CUDA device only (the CPU backend sums
 * in double: the self-test skips it).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "../lib/kernel/half.h" /* the CPU backend's conversions, bit-exact with CUDA's */
#include "harness.h"
#include "ops/op_common.h"
#include "splitmix.h"

static const struct {
    int32_t dtype;
    double tol;
} DTYPES[] = {{DLT_F32, 1e-5}, {DLT_F16, 1e-2}, {DLT_BF16, 1e-2}};

static dlt_ctx *g_cpu, *g_dev;
static char g_no_dev[256];
static const ot_case *g_case;
static int32_t g_dtype;
static double g_tol;

static const ot_stem *const STEMS[] = {
#define OT_REF(s) &ot_stem_##s,
    OT_STEMS(OT_REF)
#undef OT_REF
};

/* Forward and backward of the case on ctx, twice without zeroing; returns the output and
 * the input gradients after the first and after the second backward as doubles (owned by
 * the caller). */
static void run_on(dlt_ctx *ctx, double *const *vals, double **y_out, int64_t *ny, double **grads, double **grads2) {
    const ot_case *c = g_case;
    dlt_tensor *in[OT_MAX_IN] = {NULL}, *y = NULL, *u = NULL;
    for (int i = 0; i < c->n_in; i++) {
        if (c->in[i].kind == OT_NULL) continue;
        in[i] = ot_tensor(ctx, c, i, g_dtype, vals[i]);
        REQUIRE(in[i] != NULL, "input %d on %s: %s", i, ctx == g_cpu ? "cpu" : "device", dlt_last_error());
    }
    CHECK_OK(c->fwd(c, in, &y));
    *ny = dlt_tensor_numel(y);
    *y_out = ot_read(y);
    if (!(c->flags & OT_NO_GRAD)) {
        double *uv = ot_random(ot_hash(c->name) ^ 0xdeadbeefu, *ny, -1.0, 1.0, dlt_tensor_dtype(y));
        float *uf = malloc((size_t)(*ny > 0 ? *ny : 1) * sizeof *uf);
        for (int64_t i = 0; i < *ny; i++) uf[i] = (float)uv[i];
        int64_t shape[8];
        const int32_t nd = dlt_tensor_shape(y, shape, 8);
        dlt_tensor *uf32 = NULL;
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, shape, nd, DLT_FORMAT_CONTIGUOUS, uf, (size_t)*ny * sizeof(float),
                                      &uf32));
        CHECK_OK(dlt_tensor_cast(uf32, dlt_tensor_dtype(y), &u));
        dlt_tensor_release(uf32);
        free(uf);
        free(uv);
        CHECK_OK(dlt_backward(y, u));
        for (int i = 0; i < c->n_in; i++)
            if (in[i] && (c->in[i].kind == OT_X || c->in[i].kind == OT_P)) grads[i] = ot_read(dlt_tensor_grad(in[i]));
        dlt_tensor_release(y);
        y = NULL;
        CHECK_OK(c->fwd(c, in, &y));
        CHECK_OK(dlt_backward(y, u));
        for (int i = 0; i < c->n_in; i++)
            if (grads[i]) grads2[i] = ot_read(dlt_tensor_grad(in[i]));
    }
    dlt_tensor_release(y);
    dlt_tensor_release(u);
    for (int i = 0; i < c->n_in; i++) dlt_tensor_release(in[i]);
}

static void run_case(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    const ot_case *c = g_case;
    double *vals[OT_MAX_IN] = {NULL}, *gc[OT_MAX_IN] = {NULL}, *gd[OT_MAX_IN] = {NULL};
    double *gc2[OT_MAX_IN] = {NULL}, *gd2[OT_MAX_IN] = {NULL};
    int64_t nv[OT_MAX_IN] = {0};
    for (int i = 0; i < c->n_in; i++) vals[i] = ot_values(c, i, g_dtype, &nv[i]);
    double *yc = NULL, *yd = NULL;
    int64_t nc = 0, ndv = 0;
    run_on(g_cpu, vals, &yc, &nc, gc, gc2);
    run_on(g_dev, vals, &yd, &ndv, gd, gd2);
    REQUIRE(nc == ndv, "%s: %lld output elements on the CPU, %lld on the device", c->name, (long long)nc,
            (long long)ndv);
    const double ey = ot_relnorm(yd, yc, nc);
    CHECK(ey <= g_tol, "%s %s: output rel err %.3g > %.3g", c->name, dlt_dtype_name(g_dtype), ey, g_tol);
    for (int i = 0; i < c->n_in; i++) {
        if (!gc[i] || !gd[i]) continue;
        const double eg = ot_relnorm(gd[i], gc[i], nv[i]);
        CHECK(eg <= g_tol, "%s %s: gradient of input %d rel err %.3g > %.3g", c->name, dlt_dtype_name(g_dtype), i, eg,
              g_tol);
        if (!gc2[i] || !gd2[i]) continue;
        const double ea = ot_relnorm(gd2[i], gc2[i], nv[i]);
        CHECK(ea <= g_tol, "%s %s: accumulated gradient of input %d rel err %.3g > %.3g", c->name,
              dlt_dtype_name(g_dtype), i, ea, g_tol);
    }
    for (int i = 0; i < c->n_in; i++) free(vals[i]), free(gc[i]), free(gd[i]), free(gc2[i]), free(gd2[i]);
    free(yc);
    free(yd);
    int64_t live = -1;
    CHECK_OK(dlt_tape_live_nodes(g_dev, &live));
    CHECK(live == 0, "%s: %lld device tape nodes alive", c->name, (long long)live);
}

/* ---- flash and cudnn: the attention rows again with one fast path switched on ---- */

typedef dlt_status (*sdp_setter)(dlt_ctx *, int32_t);

/* Both fast paths off: the reference kernels serve every call. */
static void sdp_reference_only(void) {
    CHECK_OK(dlt_ctx_set_flash_sdp(g_dev, 0));
    CHECK_OK(dlt_ctx_set_cudnn_sdp(g_dev, 0));
}

/* attention's output on the device for case c in bf16: with the path under test alone
 * (on = 1) or with the reference kernels alone (on = 0) */
static double *attention_out(const ot_case *c, double *const *vals, sdp_setter path, int32_t on) {
    dlt_tensor *in[3] = {NULL, NULL, NULL}, *y = NULL;
    double *out = NULL;
    sdp_reference_only();
    CHECK_OK(path(g_dev, on));
    for (int i = 0; i < c->n_in; i++) {
        in[i] = ot_tensor(g_dev, c, i, DLT_BF16, vals[i]);
        REQUIRE(in[i] != NULL, "input %d: %s", i, dlt_last_error());
    }
    CHECK_OK(c->fwd(c, in, &y));
    out = ot_read(y);
    dlt_tensor_release(y);
    for (int i = 0; i < c->n_in; i++) dlt_tensor_release(in[i]);
    return out;
}


static sdp_setter g_path;
static const char *g_path_name;

/* On sm_80+ the path under test must serve g_case in bf16: its output and the reference
 * kernels' agree within the tolerance but not bitwise (a silent fallback would be
 * identical: P is rounded to the dtype before P V on the fast paths). */
static void path_engaged(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    if (dlt_ctx_device_type(g_dev) != DLT_DEVICE_CUDA) SKIP("self-test: no CUDA device");
    const int64_t major = th_cc_major(g_dev);
    if (major < 8) SKIP("compute capability %lld.x: %s needs sm_80, the reference runs", (long long)major, g_path_name);
    const ot_case *c = g_case;
    double *vals[OT_MAX_IN] = {NULL};
    int64_t nv[OT_MAX_IN] = {0};
    for (int i = 0; i < c->n_in; i++) vals[i] = ot_values(c, i, DLT_BF16, &nv[i]);
    double *ref = attention_out(c, vals, g_path, 0), *fast = attention_out(c, vals, g_path, 1);
    sdp_reference_only();
    const int64_t n = ot_out_numel(c);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) differ += ref[i] != fast[i];
    const double e = ot_relnorm(fast, ref, n);
    CHECK(e <= 1e-2, "%s: %s vs reference kernels rel err %.3g", c->name, g_path_name, e);
    CHECK(differ > 0, "%s: %s on gives bitwise the reference kernels' output (%lld values): it did not serve "
          "the call", c->name, g_path_name, (long long)n);
    printf("# %s engaged: %lld of %lld outputs differ from the reference kernels', rel err %.3g\n", g_path_name,
           (long long)differ, (long long)n, e);
    free(ref);
    free(fast);
    for (int i = 0; i < c->n_in; i++) free(vals[i]);
}

/* Output and the three input gradients (as doubles, concatenated) of attention case c in
 * bf16 on the device with the given settings, the upstream gradient all ones. */
static double *attention_grads(const ot_case *c, double *const *vals, int32_t cudnn, int32_t deterministic,
                               int64_t *n_out) {
    dlt_tensor *in[3] = {NULL, NULL, NULL}, *y = NULL, *u = NULL;
    CHECK_OK(dlt_ctx_set_flash_sdp(g_dev, 1));
    CHECK_OK(dlt_ctx_set_cudnn_sdp(g_dev, cudnn));
    CHECK_OK(dlt_ctx_set_deterministic(g_dev, deterministic));
    for (int i = 0; i < 3; i++) {
        in[i] = ot_tensor(g_dev, c, i, DLT_BF16, vals[i]);
        REQUIRE(in[i] != NULL, "input %d: %s", i, dlt_last_error());
    }
    CHECK_OK(c->fwd(c, in, &y));
    int64_t shape[8];
    const int32_t nd = dlt_tensor_shape(y, shape, 8);
    CHECK_OK(dlt_tensor_empty(g_dev, DLT_BF16, shape, nd, DLT_FORMAT_CONTIGUOUS, &u));
    CHECK_OK(dlt_tensor_fill(u, 1.0));
    CHECK_OK(dlt_backward(y, u));
    const int64_t ny = dlt_tensor_numel(y);
    int64_t total = ny;
    for (int i = 0; i < 3; i++) total += dlt_tensor_numel(in[i]);
    double *all = malloc((size_t)total * sizeof *all), *part = ot_read(y);
    memcpy(all, part, (size_t)ny * sizeof *all);
    free(part);
    int64_t at = ny;
    for (int i = 0; i < 3; i++) {
        part = ot_read(dlt_tensor_grad(in[i]));
        memcpy(all + at, part, (size_t)dlt_tensor_numel(in[i]) * sizeof *all);
        at += dlt_tensor_numel(in[i]);
        free(part);
    }
    dlt_tensor_release(u);
    dlt_tensor_release(y);
    for (int i = 0; i < 3; i++) dlt_tensor_release(in[i]);
    CHECK_OK(dlt_ctx_set_deterministic(g_dev, 0));
    *n_out = total;
    return all;
}

/* Deterministic mode keeps cuDNN's attention out (its backward adds dQ with atomics): with
 * cudnn_sdp on, the output and gradients are bitwise the flash kernels'; with it off as
 * well, and outside deterministic mode they differ (cuDNN serves). */
static void cudnn_deterministic(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    if (dlt_ctx_device_type(g_dev) != DLT_DEVICE_CUDA) SKIP("self-test: no CUDA device");
    const int64_t major = th_cc_major(g_dev);
    if (major < 8) SKIP("compute capability %lld.x: no cuDNN attention engine", (long long)major);
    const ot_case *c = g_case;
    double *vals[OT_MAX_IN] = {NULL};
    int64_t nv[OT_MAX_IN] = {0}, n = 0;
    for (int i = 0; i < c->n_in; i++) vals[i] = ot_values(c, i, DLT_BF16, &nv[i]);
    double *flash = attention_grads(c, vals, 0, 1, &n), *det = attention_grads(c, vals, 1, 1, &n);
    double *cudnn = attention_grads(c, vals, 1, 0, &n);
    int64_t differ_det = 0, differ_cudnn = 0;
    for (int64_t i = 0; i < n; i++) {
        differ_det += det[i] != flash[i];
        differ_cudnn += cudnn[i] != flash[i];
    }
    CHECK(differ_det == 0, "%s: deterministic mode with cudnn_sdp on differs from the flash kernels in %lld of %lld "
          "values: cuDNN served", c->name, (long long)differ_det, (long long)n);
    CHECK(differ_cudnn > 0, "%s: outside deterministic mode cuDNN should serve (bitwise the flash kernels' values)",
          c->name);
    free(flash);
    free(det);
    free(cudnn);
    for (int i = 0; i < c->n_in; i++) free(vals[i]);
}

/* The attention rows in f16 and bf16 with only `path` of the fast paths on (the reference
 * kernels serve what it cannot), then path_engaged on each case named in `engaged`. */
static void sdp_pass(sdp_setter path, const char *name, const char *const *engaged, char *label, size_t n) {
    const ot_stem *st = &ot_stem_attention;
    g_path = path;
    g_path_name = name;
    if (g_dev && (dlt_ctx_set_flash_sdp(g_dev, 0) != DLT_OK || dlt_ctx_set_cudnn_sdp(g_dev, 0) != DLT_OK ||
                  path(g_dev, 1) != DLT_OK)) {
        printf("Bail out! attention settings: %s\n", dlt_last_error());
        return;
    }
    for (int i = 0; i < st->n_cases; i++) {
        g_case = &st->cases[i];
        if (g_case->flags & (OT_CPU_ONLY | OT_F32_ONLY)) continue;
        for (size_t d = 1; d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
            g_dtype = DTYPES[d].dtype;
            g_tol = DTYPES[d].tol;
            snprintf(label, n, "%s/%s %s (%s, cuda vs cpu)", st->stem, g_case->name, dlt_dtype_name(g_dtype), name);
            th_run(run_case, label);
        }
    }
    for (const char *const *e = engaged; *e; e++) {
        g_case = NULL;
        for (int i = 0; i < st->n_cases; i++)
            if (strcmp(st->cases[i].name, *e) == 0) g_case = &st->cases[i];
        if (!g_case) {
            printf("Bail out! no attention case named \"%s\"\n", *e);
            continue;
        }
        snprintf(label, n, "%s/%s bf16 (%s engaged)", st->stem, g_case->name, name);
        th_run(path_engaged, label);
    }
    /* back to the defaults */
    if (g_dev && (dlt_ctx_set_flash_sdp(g_dev, 1) != DLT_OK || dlt_ctx_set_cudnn_sdp(g_dev, 1) != DLT_OK))
        printf("Bail out! %s\n", dlt_last_error());
}

/* ---- embedding_bits: the embedding gradient's bits ---- */

/* idx: uniform in [0, V) (period 0; Zipf-like when zipf is set: V * u^3, runs of hundreds
 * for the first rows), or i % period (GPT-2's positions) */
static const struct {
    const char *name;
    int64_t V, D, n, period;
    int32_t zipf;
    int64_t padding_idx; /* DLT_NO_PADDING_IDX or a row */
} EMB_BITS[] = {
    {"GPT-2 wte: 50304 rows of 768, 16384 uniform indices (vector kernel, runs of ~1)", 50304, 768, 16384, 0, 0,
     DLT_NO_PADDING_IDX},
    {"GPT-2 wpe: 1024 rows of 768, positions i % 1024 (vector kernel, runs of 16)", 1024, 768, 16384, 1024, 0,
     DLT_NO_PADDING_IDX},
    {"50304 rows of 768, 16384 Zipf-like indices (vector kernel, long runs too)", 50304, 768, 16384, 0, 1,
     DLT_NO_PADDING_IDX},
    {"Shakespeare: 65 rows of 384, 16384 indices (scalar kernel, long runs)", 65, 384, 16384, 0, 0,
     DLT_NO_PADDING_IDX},
    {"64 rows of 264, 1024 indices, padding 7 (vector kernel, slices grouped)", 64, 264, 1024, 0, 0, 7},
    {"2000 rows of 130, 3000 indices (scalar kernel: rows not 16-byte vectors)", 2000, 130, 3000, 0, 0,
     DLT_NO_PADDING_IDX},
    {"40 rows of 12, 300 indices, padding -1 (f32: vector kernel; f16/bf16: scalar)", 40, 12, 300, 0, 0, -1},
};
static int g_emb_bits;

static float emb_dec(int32_t dt, const void *raw, int64_t i) {
    if (dt == DLT_F16) return dlt__f16_to_f32(((const uint16_t *)raw)[i]);
    if (dt == DLT_BF16) return dlt__bf16_to_f32(((const uint16_t *)raw)[i]);
    return ((const float *)raw)[i];
}
static void emb_enc(int32_t dt, void *raw, int64_t i, float f) {
    if (dt == DLT_F16) ((uint16_t *)raw)[i] = dlt__f32_to_f16(f);
    else if (dt == DLT_BF16) ((uint16_t *)raw)[i] = dlt__f32_to_bf16(f);
    else ((float *)raw)[i] = f;
}

/* want = the gradient after one more backward into old (NULL: beta 0, the buffer zeroed):
 * per row v, its positions in order; a run of at most 16 adds old then the rows in order, a
 * longer one sums rows k = w mod 8 from 0.0f for w = 0..7 and adds old then the eight sums
 * in order; all in f32, rounded once to dt. */
static void emb_bits_ref(int32_t dt, int64_t V, int64_t D, int64_t n, const int64_t *idx, int64_t pad,
                         const float *u, const void *old, void *want) {
    const size_t es = dt == DLT_F32 ? 4 : 2;
    int64_t *start = calloc((size_t)V + 1, sizeof *start), *at = malloc((size_t)V * sizeof *at),
            *order = malloc((size_t)n * sizeof *order);
    for (int64_t i = 0; i < n; i++) start[idx[i] + 1]++;
    for (int64_t v = 0; v < V; v++) start[v + 1] += start[v], at[v] = start[v];
    for (int64_t i = 0; i < n; i++) order[at[idx[i]]++] = i;
    if (old) memcpy(want, old, (size_t)(V * D) * es);
    else memset(want, 0, (size_t)(V * D) * es);
    for (int64_t v = 0; v < V; v++) {
        const int64_t r0 = start[v], r1 = start[v + 1];
        if (r0 == r1 || v == pad) continue;
        for (int64_t j = 0; j < D; j++) {
            float acc = old ? emb_dec(dt, old, v * D + j) : 0.0f;
            if (r1 - r0 <= 16) {
                for (int64_t r = r0; r < r1; r++) acc += u[order[r] * D + j];
            } else {
                float part[8] = {0};
                for (int64_t r = r0; r < r1; r++) part[(r - r0) % 8] += u[order[r] * D + j];
                for (int w = 0; w < 8; w++) acc += part[w];
            }
            emb_enc(dt, want, v * D + j, acc);
        }
    }
    free(start);
    free(at);
    free(order);
}

static void emb_bits_compare(const char *what, int32_t dt, int64_t D, const void *got, const void *want, int64_t m) {
    const size_t es = dt == DLT_F32 ? 4 : 2;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < m; i++) {
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) == 0) continue;
        if (first < 0) first = i;
        bad++;
    }
    CHECK(bad == 0, "%s: %lld of %lld elements differ from the f32 order's bits, first at row %lld col %lld: %.9g, "
          "want %.9g", what, (long long)bad, (long long)m, (long long)(first / D), (long long)(first % D),
          bad ? emb_dec(dt, got, first) : 0.0, bad ? emb_dec(dt, want, first) : 0.0);
}

static void embedding_bits(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    if (dlt_ctx_device_type(g_dev) != DLT_DEVICE_CUDA) SKIP("self-test: the CPU backend sums in double");
    const int64_t V = EMB_BITS[g_emb_bits].V, D = EMB_BITS[g_emb_bits].D, n = EMB_BITS[g_emb_bits].n;
    const int64_t period = EMB_BITS[g_emb_bits].period, praw = EMB_BITS[g_emb_bits].padding_idx;
    const int64_t pad = praw == DLT_NO_PADDING_IDX ? -1 : praw < 0 ? praw + V : praw;
    const int32_t dt = g_dtype;
    const size_t es = dt == DLT_F32 ? 4 : 2, wbytes = (size_t)(V * D) * es;
    seed(ot_hash(EMB_BITS[g_emb_bits].name) ^ (uint64_t)dt);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t i = 0; i < n; i++) {
        const double r = urand();
        idx[i] = period ? i % period : (int64_t)(V * (EMB_BITS[g_emb_bits].zipf ? r * r * r : r));
    }
    /* the upstream gradient: values of dt (the device's cast from f32 is then exact) of
     * magnitudes 2^-6 .. 2^3, so that another order of additions shows in 16-bit results too */
    float *u = malloc((size_t)(n * D) * sizeof *u);
    for (int64_t i = 0; i < n * D; i++) {
        const float f = (float)ldexp(2 * urand() - 1, (int)(urand() * 10) - 6);
        u[i] = dt == DLT_F16    ? dlt__f16_to_f32(dlt__f32_to_f16(f))
               : dt == DLT_BF16 ? dlt__bf16_to_f32(dlt__f32_to_bf16(f))
                                : f;
    }
    const int64_t ws[2] = {V, D}, ys[2] = {n, D};
    dlt_tensor *w = NULL, *it = NULL, *uf = NULL, *ut = NULL, *y = NULL;
    CHECK_OK(dlt_tensor_zeros(g_dev, dt, ws, 2, DLT_FORMAT_CONTIGUOUS, &w));
    CHECK_OK(dlt_tensor_set_requires_grad(w, 1));
    CHECK_OK(dlt_tensor_from_host(g_dev, DLT_I64, &n, 1, DLT_FORMAT_CONTIGUOUS, idx, (size_t)n * sizeof *idx, &it));
    CHECK_OK(dlt_tensor_from_host(g_dev, DLT_F32, ys, 2, DLT_FORMAT_CONTIGUOUS, u, (size_t)(n * D) * sizeof *u, &uf));
    CHECK_OK(dlt_tensor_cast(uf, dt, &ut));
    void *g1 = malloc(wbytes), *g2 = malloc(wbytes), *want = malloc(wbytes);
    /* first backward: beta 0 (the leaf has no gradient yet); second: beta 1, into it */
    CHECK_OK(dlt_embedding(w, it, praw, &y));
    CHECK_OK(dlt_backward(y, ut));
    dlt_tensor_release(y);
    y = NULL;
    CHECK_OK(dlt_tensor_copy_to_host(dlt_tensor_grad(w), g1, wbytes));
    emb_bits_ref(dt, V, D, n, idx, pad, u, NULL, want);
    emb_bits_compare("first backward", dt, D, g1, want, V * D);
    CHECK_OK(dlt_embedding(w, it, praw, &y));
    CHECK_OK(dlt_backward(y, ut));
    CHECK_OK(dlt_tensor_copy_to_host(dlt_tensor_grad(w), g2, wbytes));
    emb_bits_ref(dt, V, D, n, idx, pad, u, g1, want);
    emb_bits_compare("second backward (accumulated)", dt, D, g2, want, V * D);
    dlt_tensor_release(y);
    dlt_tensor_release(w), dlt_tensor_release(it), dlt_tensor_release(uf), dlt_tensor_release(ut);
    free(idx), free(u), free(g1), free(g2), free(want);
}

int main(void) {
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &g_cpu) != DLT_OK) {
        printf("Bail out! no CPU context: %s\n", dlt_last_error());
        return 1;
    }
    g_dev = th_dev_ctx(g_no_dev, sizeof g_no_dev);
    char label[200];
    for (size_t s = 0; th_group_on("table") && s < sizeof STEMS / sizeof STEMS[0]; s++) {
        const ot_stem *st = STEMS[s];
        for (int i = 0; i < st->n_cases; i++) {
            g_case = &st->cases[i];
            if (g_case->flags & OT_CPU_ONLY) continue;
            for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
                if (d > 0 && (g_case->flags & OT_F32_ONLY)) continue;
                g_dtype = DTYPES[d].dtype;
                g_tol = g_case->tol > 0 && g_dtype == DLT_F32 ? g_case->tol : DTYPES[d].tol;
                snprintf(label, sizeof label, "%s/%s %s (cuda vs cpu)", st->stem, g_case->name, dlt_dtype_name(g_dtype));
                th_run(run_case, label);
            }
        }
    }
    if (th_group_on("flash")) {
        static const char *const engaged[] = {"tiles: 200 tokens, 16 heads of 64, causal", NULL};
        sdp_pass(dlt_ctx_set_flash_sdp, "flash", engaged, label, sizeof label);
    }
    if (th_group_on("cudnn")) {
        static const char *const engaged[] = {"cudnn: 128 tokens, 2 heads of 64, causal",
                                              "cudnn: full, 128 queries, 256 keys, head dim 32",
                                              "cudnn: head dim 72, scale 0.2, 128 tokens, causal",
                                              "cudnn: packed qkv, 128 tokens, 2 heads of 64, causal",
                                              "cudnn: packed qkv, 2 x 256 tokens, 3 heads of 32, full", NULL};
        sdp_pass(dlt_ctx_set_cudnn_sdp, "cudnn", engaged, label, sizeof label);
        for (int i = 0; i < ot_stem_attention.n_cases; i++)
            if (strcmp(ot_stem_attention.cases[i].name, engaged[0]) == 0) g_case = &ot_stem_attention.cases[i];
        snprintf(label, sizeof label, "attention/%s bf16 (deterministic mode: the flash kernels, not cuDNN)",
                 g_case->name);
        th_run(cudnn_deterministic, label);
    }
    for (size_t i = 0; th_group_on("embedding_bits") && i < sizeof EMB_BITS / sizeof EMB_BITS[0]; i++)
        for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
            g_emb_bits = (int)i;
            g_dtype = DTYPES[d].dtype;
            snprintf(label, sizeof label, "embedding/%s %s (cuda bit for bit: the kernels' f32 order)",
                     EMB_BITS[i].name, dlt_dtype_name(g_dtype));
            th_run(embedding_bits, label);
        }
    dlt_ctx_destroy(g_dev);
    dlt_ctx_destroy(g_cpu);
    return th_done();
}
