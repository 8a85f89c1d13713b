/*
 * ops_common.h - what test_ops.c and test_ops_conv.c share: tolerances per dtype, the seeded
 * data (splitmix64), heap poisoning, tensor makers (mk, mk_f32, mk_targets) and check_tensor
 * against a float64 reference, on the CPU context g_ctx (each program's main sets it).
 *
 * The inputs a reference sees are read back from the tensors, so f16/bf16 rounding of the
 * inputs is not an error; the tolerance then covers fp32 arithmetic and output rounding.
 * Outputs are allocated by the front doors, so the tests poison the heap instead: before an
 * op runs, blocks of the output's size are filled with NaN and freed, which the allocator
 * hands back to the op (an unwritten output element then reads as NaN and fails).
 *
 * Definitions are static (TH_UNUSED): each program is one .c file (tests/meson.build) and
 * gets its own copy.
 */
#ifndef DLT_TEST_OPS_COMMON_H
#define DLT_TEST_OPS_COMMON_H

#include <stdint.h>

#include "harness.h"
#include "splitmix.h"
#include "ref.h"

/* relative-norm tolerances per dtype (output rounding dominates for f16/bf16) */
#define TOL_F32 1e-5
#define TOL_F16 2e-3
#define TOL_BF16 1.2e-2

static dlt_ctx *g_ctx;

static TH_UNUSED double tol_for(int32_t dtype) {
    return dtype == DLT_F16 ? TOL_F16 : dtype == DLT_BF16 ? TOL_BF16 : TOL_F32;
}
static TH_UNUSED const char *fmt_name(int32_t f) {
    return f == DLT_FORMAT_CHANNELS_LAST ? "cl" : "nchw";
}

/* ---- deterministic data (splitmix64) ---- */
static TH_UNUSED double *rand_vals(int64_t n, double lo, double hi) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
    /* rounded to fp32 so an f32 tensor holds exactly what the reference sees */
    for (int64_t i = 0; i < n; i++) v[i] = (double)(float)(lo + (hi - lo) * urand());
    return v;
}
/* values with |v| >= gap (away from ReLU's kink) */
static TH_UNUSED double *rand_away(int64_t n, double lo, double hi, double gap) {
    double *v = rand_vals(n, lo, hi);
    for (int64_t i = 0; i < n; i++)
        if (fabs(v[i]) < gap)
            v[i] = (double)(float)(v[i] < 0 ? -gap - urand() * gap : gap + urand() * gap);
    return v;
}
/* distinct values: a shuffled grid with spacing 1/16 (no max-pool ties in any dtype) */
static TH_UNUSED double *rand_distinct(int64_t n) {
    double *v = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) v[i] = (double)(i - n / 2) / 16.0;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(urand() * (double)(i + 1));
        double t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    return v;
}
static TH_UNUSED int64_t prod(const int64_t *s, int nd) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    return n;
}

/* ---- tensors ---- */

/* Fills and frees blocks of nbytes with NaN so the next allocation of that size likely
 * starts as NaN (see the file comment). */
static TH_UNUSED void poison_heap(int64_t numel, int32_t dtype) {
    if (numel <= 0) return;
    dlt_tensor *t[4] = {0};
    for (int i = 0; i < 4; i++) {
        if (dlt_tensor_empty(g_ctx, dtype, &numel, 1, DLT_FORMAT_CONTIGUOUS, &t[i]) != DLT_OK) break;
        if (dlt_tensor_fill(t[i], NAN) != DLT_OK) break;
    }
    for (int i = 3; i >= 0; i--) dlt_tensor_release(t[i]);
}

/* A tensor holding v (logical order) in dtype and format; *actual (optional, caller frees)
 * receives the values it really holds (after rounding to dtype). */
static TH_UNUSED dlt_tensor *mk(const double *v, const int64_t *shape, int nd, int32_t dtype,
                                int32_t fmt, double **actual) {
    int64_t n = prod(shape, nd);
    dlt_tensor *t = th_tensor_from_f64(g_ctx, v, shape, nd, dtype, fmt);
    if (!t) {
        printf("# mk: %s\n", dlt_last_error());
        exit(1);
    }
    if (actual) {
        float *r = th_read_f32(t);
        *actual = malloc((size_t)(n ? n : 1) * sizeof(double));
        for (int64_t i = 0; i < n; i++) (*actual)[i] = r[i];
        free(r);
    }
    return t;
}

static TH_UNUSED dlt_tensor *mk_targets(const int64_t *v, int64_t n, int32_t dtype) {
    dlt_tensor *t = NULL;
    dlt_status st;
    if (dtype == DLT_I64) {
        st = dlt_tensor_from_host(g_ctx, DLT_I64, &n, 1, 0, v, (size_t)n * 8, &t);
    } else {
        int32_t *b = malloc((size_t)(n ? n : 1) * 4);
        for (int64_t i = 0; i < n; i++) b[i] = (int32_t)v[i];
        st = dlt_tensor_from_host(g_ctx, DLT_I32, &n, 1, 0, b, (size_t)n * 4, &t);
        free(b);
    }
    if (st != DLT_OK) {
        printf("# mk_targets: %s\n", dlt_last_error());
        exit(1);
    }
    return t;
}

static TH_UNUSED dlt_tensor *mk_f32(const double *v, const int64_t *shape, int nd) {
    return mk(v, shape, nd, DLT_F32, DLT_FORMAT_CONTIGUOUS, NULL);
}

/* Checks t's shape, dtype and format, then its values against ref (relative norm). */
static TH_UNUSED void check_tensor(const char *what, const dlt_tensor *t, const int64_t *shape,
                                   int nd, int32_t dtype, int32_t fmt, const double *ref,
                                   double tol) {
    int64_t got[DLT_MAX_DIMS] = {0};
    REQUIRE(t != NULL, "%s: no tensor", what);
    int32_t gnd = dlt_tensor_shape(t, got, DLT_MAX_DIMS);
    int same = gnd == nd;
    for (int i = 0; same && i < nd; i++) same = got[i] == shape[i];
    CHECK(same, "%s: shape mismatch (ndim %d vs %d)", what, gnd, nd);
    CHECK(dlt_tensor_dtype(t) == dtype, "%s: dtype %d, expected %d", what, dlt_tensor_dtype(t), dtype);
    CHECK(dlt_tensor_format(t) == fmt, "%s: format %d, expected %d", what, dlt_tensor_format(t), fmt);
    if (!same) return;
    float *v = th_read_f32(t);
    REQUIRE(v != NULL, "%s: read failed: %s", what, dlt_last_error());
    int64_t n = prod(shape, nd);
    double e = th_rel_err(v, ref, n);
    if (!(e <= tol)) {
        int64_t worst = 0;
        double wd = -1;
        for (int64_t i = 0; i < n; i++) {
            double d = fabs((double)v[i] - ref[i]);
            if (v[i] != v[i]) d = INFINITY;
            if (d > wd) {
                wd = d;
                worst = i;
            }
        }
        th_fail(__FILE__, __LINE__, "%s: relative error %.3g > %.3g (worst at %lld: %.9g vs %.9g)",
                what, e, tol, (long long)worst, (double)v[worst], ref[worst]);
    }
    free(v);
}

#endif
