/*
 * dropout.c - rows of dropout. The reference draws the mask with the tests' own
 * Philox4x32-10 (op_common.c, checked against Random123's known-answer vector below): element i of a
 * call at generator offset 0 (dlt_ctx_set_seed resets it) takes counter i/4, word i%4, 24
 * bits -> u in [0, 1), kept when u >= p and scaled by 1/(1-p). The same seed is set before
 * every call, so repeated calls (and the CPU and CUDA backends) draw the same mask.
 * ip[0]: training; fp[0]: p.
 */
#include <math.h>
#include <stdlib.h>

#include "op_common.h"

#define SEED 0x1234abcdull

static double uniform(uint64_t i) { return ot_philox_uniform(SEED, i); }

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    dlt_status st = dlt_ctx_set_seed(dlt_tensor_ctx(in[0]), SEED);
    return st != DLT_OK ? st : dlt_dropout(in[0], c->fp[0], (int32_t)c->ip[0], out);
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const int64_t n = ot_out_numel(c);
    const double p = c->fp[0];
    for (int64_t i = 0; i < n; i++) {
        if (!c->ip[0] || p == 0.0) out[i] = in[0][i];
        else out[i] = uniform((uint64_t)i) >= p ? in[0][i] / (1.0 - p) : 0.0;
    }
}

static const ot_case CASES[] = {
    {"p 0.2", fwd, ref, 1, {{OT_X, 2, {4, 33}, 0, 0, 0}}, 2, {4, 33}, -1, {1}, {0.2}},
    {"p 0.5 3-D", fwd, ref, 1, {{OT_X, 3, {2, 3, 50}, 0, 0, 0}}, 3, {2, 3, 50}, -1, {1}, {0.5}},
    {"p 1 zeroes", fwd, ref, 1, {{OT_X, 1, {17}, 0, 0, 0}}, 1, {17}, -1, {1}, {1.0}},
    {"p 0 identity", fwd, ref, 1, {{OT_X, 1, {17}, 0, 0, 0}}, 1, {17}, -1, {1}, {0.0}},
    {"evaluation identity", fwd, ref, 1, {{OT_X, 1, {17}, 0, 0, 0}}, 1, {17}, -1, {0}, {0.5}},
};

/* Published vector of Random123: philox4x32-10, counter 0 and key 0. */
static dlt_status e_kat(dlt_ctx *ctx, int *out_touched) {
    (void)ctx;
    *out_touched = 0;
    uint32_t c[4] = {0, 0, 0, 0};
    ot_philox(0, c);
    return c[0] == 0x6627e8d5u && c[1] == 0xe169c58du && c[2] == 0xbc57ac4cu && c[3] == 0x9b00dbd8u
               ? DLT_OK
               : DLT_ERR_INTERNAL;
}
/* The kept fraction of a large draw is 1 - p within 5 standard deviations. */
static dlt_status e_rate(dlt_ctx *ctx, int *out_touched) {
    *out_touched = 0;
    const int64_t n = 1 << 16;
    dlt_tensor *x = NULL, *y = NULL;
    if (dlt_tensor_empty(ctx, DLT_F32, &n, 1, DLT_FORMAT_CONTIGUOUS, &x) != DLT_OK) return DLT_ERR_INTERNAL;
    dlt_status st = dlt_tensor_fill(x, 1.0);
    if (st == DLT_OK) st = dlt_dropout(x, 0.3, 1, &y);
    float *v = malloc((size_t)n * sizeof *v);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(y, v, (size_t)n * sizeof *v);
    int64_t kept = 0, bad = 0;
    for (int64_t i = 0; st == DLT_OK && i < n; i++) {
        kept += v[i] != 0.0f;
        bad += v[i] != 0.0f && fabsf(v[i] - 1.0f / 0.7f) > 1e-6f;
    }
    free(v);
    dlt_tensor_release(x), dlt_tensor_release(y);
    const double sd = sqrt(n * 0.3 * 0.7);
    if (st != DLT_OK) return st;
    return bad == 0 && fabs((double)kept - 0.7 * (double)n) < 5 * sd ? DLT_OK : DLT_ERR_INTERNAL;
}
static dlt_status e_p(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[1] = {3};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_dropout(x, 1.5, 1, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static const ot_err ERRORS[] = {
    {"the test's Philox matches Random123's known-answer vector", e_kat, DLT_OK},
    {"kept fraction of 65536 draws is 0.7 +- 5 sd and survivors are x/(1-p)", e_rate, DLT_OK},
    {"p outside [0, 1]", e_p, DLT_ERR_INVALID_ARGUMENT},
};

OT_STEM(dropout, CASES, ERRORS);
