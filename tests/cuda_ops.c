/*
 * cuda_ops.c - every op with a public front door, run on CUDA and on the CPU backend from
 * the same input bytes, forward and backward, compared element by element.
 *
 * How to add an op: write a small `run_<op>` that calls the front door on in[] (the inputs
 * as described by the row's in_spec list, all on one context) and add rows to CASES with
 * the shapes and parameters to try. Each row runs for f32, f16 and bf16, and for both
 * memory formats when it has a 4-D input (inputs of kind IN_X take the case's dtype and,
 * when 4-D, its format).
 *
 * For every (row, dtype, format):
 *  1. inputs are made on the CPU (random values rounded to the dtype) and copied bit for
 *     bit to the device; IN_X and IN_PARAM inputs require gradients;
 *  2. forward on both; outputs are compared (shape, dtype, format, values; NaN must be
 *     NaN on both sides), and so are inputs the op updates in place (BN running stats);
 *  3. backward with the same random upstream gradient on both (dlt_backward);
 *  4. the leaf gradients are poisoned with NaN and marked absent (zero_grad set_to_none),
 *     so the next backward must overwrite every element (beta = 0 paths); forward and
 *     backward again, compare outputs and all input gradients;
 *  5. forward and backward once more without zeroing: gradients accumulate (beta = 1
 *     paths, e.g. the linear weight gradient and the bias column sums); compare again;
 *  6. after releasing everything, no tape node may survive on either context.
 * count_correct (no front door of its own) is compared through dlt_evaluate_accuracy.
 * Outputs are allocated by the front doors, so before each forward blocks of the expected
 * sizes are filled with NaN bytes (0xff) and freed: the stream-ordered pool (and malloc)
 * tends to hand them straight back, so unwritten output elements show up as NaN.
 *
 * Tolerances are relative norms per dtype, in one table (TOLERANCES). Without a CUDA device
 * every case skips; DLT_CUDA_OPS_SELFTEST=1 runs the table against a second CPU context
 * instead, which checks the test program itself on machines without a GPU.
 */
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "add_layer_norm_check.h"
#include "layer_norm_to_check.h"
#include "splitmix.h"

/* ---- tolerances: relative norm ||cuda - cpu|| / ||cpu|| per dtype ---- */
static const struct {
    int32_t dtype;
    double tol;
} TOLERANCES[] = {
    {DLT_F32, 1e-5},
    {DLT_F16, 1e-2},
    {DLT_BF16, 1e-2},
};

static double tol_for(int32_t dtype) {
    for (size_t i = 0; i < sizeof TOLERANCES / sizeof TOLERANCES[0]; i++)
        if (TOLERANCES[i].dtype == dtype) return TOLERANCES[i].tol;
    return 0.0;
}

static dlt_ctx *g_cpu, *g_dev;
static char g_no_dev[256];

/* ---- the op table ---- */

enum {
    IN_X = 1,    /* case dtype (and case format when 4-D); requires grad */
    IN_PARAM,    /* f32 contiguous, requires grad (BN gamma and beta) */
    IN_STAT,     /* f32 contiguous, no grad, updated in place by the op: compared afterwards */
    IN_SCALE,    /* one-element f32, no grad (mul_scalar's device scale) */
    IN_TARGET32, /* int32 class indices in [0, hi) */
    IN_TARGET64, /* int64 class indices in [0, hi) */
};

typedef struct in_spec {
    int32_t kind;
    int32_t ndim;
    int64_t shape[4];
    double lo, hi;
} in_spec;

typedef struct op_case op_case;
typedef dlt_status (*op_run)(const op_case *c, dlt_tensor *const *in, dlt_tensor **out);

#define MAX_IN 6
struct op_case {
    const char *name;
    op_run run;
    int32_t n_in;
    in_spec in[MAX_IN];
    int64_t ip[8]; /* integer parameters, meaning per op (see run_*) */
    double fp[2];  /* real parameters */
};

static dlt_status run_relu(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_relu(in[0], out);
}
static dlt_status run_add(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_add(in[0], in[1], out);
}
/* fp[0] = alpha; a second input is the device scale s */
static dlt_status run_mul_scalar(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_mul_scalar(in[0], c->n_in > 1 ? in[1] : NULL, c->fp[0], out);
}
static dlt_status run_sum(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_sum(in[0], out);
}
static dlt_status run_mean(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_mean(in[0], out);
}
/* ip = kernel h, w, stride h, w, pad h, w */
static dlt_status run_max_pool(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_max_pool2d(in[0], c->ip[0], c->ip[1], c->ip[2], c->ip[3], c->ip[4], c->ip[5], out);
}
static dlt_status run_gavg(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_global_avg_pool2d(in[0], out);
}
/* inputs x, w[, bias] */
static dlt_status run_linear(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_linear(in[0], in[1], c->n_in > 2 ? in[2] : NULL, out);
}
/* ip[0] = ignore_index, ip[1] = reduction, ip[2] = 1: every third row ignored, 2: all rows */
static dlt_status run_ce(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_cross_entropy(in[0], in[1], c->ip[0], (int32_t)c->ip[1], out);
}
/* ip[0] = ndim, ip[1..] = shape */
static dlt_status run_reshape(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_reshape(in[0], &c->ip[1], (int32_t)c->ip[0], out);
}
/* ip[0] = start_dim, ip[1] = end_dim */
static dlt_status run_flatten(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_flatten(in[0], (int32_t)c->ip[0], (int32_t)c->ip[1], out);
}
/* ip[0] = target dtype */
static dlt_status run_cast(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_cast(in[0], (int32_t)c->ip[0], out);
}
/* inputs x, w[, bias]; ip = stride h, w, pad h, w, dilation h, w, groups */
static dlt_status run_conv(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_conv2d(in[0], in[1], c->n_in > 2 ? in[2] : NULL, c->ip[0], c->ip[1], c->ip[2], c->ip[3],
                      c->ip[4], c->ip[5], c->ip[6], out);
}
/* inputs x, gamma, beta, running_mean, running_var; training; fp = momentum, eps */
static dlt_status run_bn(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_batch_norm2d(in[0], in[1], in[2], in[3], in[4], 1, c->fp[0], c->fp[1], out);
}
/* as run_bn plus in[5] = residual, ReLU on */
static dlt_status run_bn_act(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_batch_norm2d_act(in[0], in[5], 1, in[1], in[2], in[3], in[4], 1, c->fp[0], c->fp[1], out);
}

/* layer norm over the last dim with f32 weight and bias (in[1], in[2]) whatever x's dtype:
 * PyTorch's mixed case (f32 parameters, a bf16/f16 input, no autocast) */
static dlt_status run_layer_norm(const op_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    int64_t n = dlt_tensor_numel(in[1]);
    return dlt_layer_norm(in[0], &n, 1, in[1], in[2], 1e-5, out);
}

#define X1(n0) {IN_X, 1, {n0, 0, 0, 0}, -2, 2}
#define X2(n0, n1) {IN_X, 2, {n0, n1, 0, 0}, -2, 2}
#define X4(n0, n1, n2, n3) {IN_X, 4, {n0, n1, n2, n3}, -2, 2}
#define XR(nd, n0, n1, n2, n3, lo, hi) {IN_X, nd, {n0, n1, n2, n3}, lo, hi}
#define PARAM(c) {IN_PARAM, 1, {c, 0, 0, 0}, 0.5, 1.5}
#define STAT(c, lo, hi) {IN_STAT, 1, {c, 0, 0, 0}, lo, hi}
#define SCALE(v) {IN_SCALE, 0, {0, 0, 0, 0}, v, v}
#define T32(n, k) {IN_TARGET32, 1, {n, 0, 0, 0}, 0, k}
#define T64(n, k) {IN_TARGET64, 1, {n, 0, 0, 0}, 0, k}

static const op_case CASES[] = {
    /* elementwise */
    {"relu", run_relu, 1, {X4(2, 3, 5, 7)}, {0}, {0}},
    {"relu", run_relu, 1, {X4(1, 1, 1, 1)}, {0}, {0}},
    {"relu", run_relu, 1, {X1(1000)}, {0}, {0}},
    {"add", run_add, 2, {X4(2, 3, 5, 7), X4(2, 3, 5, 7)}, {0}, {0}},
    {"add", run_add, 2, {X2(1, 13), X2(1, 13)}, {0}, {0}},
    {"mul_scalar(s)", run_mul_scalar, 2, {X4(3, 4, 5, 6), SCALE(1.75)}, {0}, {-0.5, 0}},
    {"mul_scalar", run_mul_scalar, 1, {X2(1, 17)}, {0}, {0.37, 0}},
    {"sum", run_sum, 1, {XR(4, 3, 5, 7, 2, -1, 2)}, {0}, {0}},
    {"sum", run_sum, 1, {XR(1, 1000, 0, 0, 0, -1, 2)}, {0}, {0}},
    {"mean", run_mean, 1, {XR(4, 2, 3, 4, 5, -1, 2)}, {0}, {0}},
    {"mean", run_mean, 1, {XR(1, 1, 0, 0, 0, -1, 2)}, {0}, {0}},
    /* pooling */
    {"max_pool2d 3/2/1", run_max_pool, 1, {X4(2, 3, 9, 11)}, {3, 3, 2, 2, 1, 1}, {0}},
    {"max_pool2d 2/2/0", run_max_pool, 1, {X4(1, 4, 8, 8)}, {2, 2, 2, 2, 0, 0}, {0}},
    {"max_pool2d 3/1/1", run_max_pool, 1, {X4(2, 5, 7, 6)}, {3, 3, 1, 1, 1, 1}, {0}},
    {"max_pool2d 3x2/2x1/1x1", run_max_pool, 1, {X4(1, 3, 7, 9)}, {3, 2, 2, 1, 1, 1}, {0}},
    {"max_pool2d to 1x1", run_max_pool, 1, {X4(2, 3, 3, 3)}, {3, 3, 2, 2, 0, 0}, {0}},
    {"max_pool2d 64ch", run_max_pool, 1, {X4(2, 64, 8, 8)}, {3, 3, 2, 2, 1, 1}, {0}},
    /* channels-last with C a multiple of 8: the 16-byte vector kernels (cuda/pool.cu) */
    {"max_pool2d 16ch 3/1/1", run_max_pool, 1, {X4(2, 16, 7, 6)}, {3, 3, 1, 1, 1, 1}, {0}},
    {"max_pool2d 8ch 3x2/2x1/1x1 odd map", run_max_pool, 1, {X4(3, 8, 9, 7)}, {3, 2, 2, 1, 1, 1}, {0}},
    {"global_avg_pool2d", run_gavg, 1, {X4(2, 3, 5, 7)}, {0}, {0}},
    {"global_avg_pool2d", run_gavg, 1, {X4(1, 16, 1, 1)}, {0}, {0}},
    {"global_avg_pool2d", run_gavg, 1, {X4(3, 64, 4, 4)}, {0}, {0}},
    {"global_avg_pool2d", run_gavg, 1, {X4(2, 7, 8, 9)}, {0}, {0}},
    {"global_avg_pool2d", run_gavg, 1, {X4(1, 1, 33, 33)}, {0}, {0}},
    {"global_avg_pool2d", run_gavg, 1, {X4(2, 40, 3, 5)}, {0}, {0}},
    /* channels-last with C a multiple of 8: the vector kernels up to 64 positions (1x1, 8x8),
     * the general one past them (9x9) */
    {"global_avg_pool2d 1x1", run_gavg, 1, {X4(5, 24, 1, 1)}, {0}, {0}},
    {"global_avg_pool2d 8x8", run_gavg, 1, {X4(2, 16, 8, 8)}, {0}, {0}},
    {"global_avg_pool2d 9x9", run_gavg, 1, {X4(2, 16, 9, 9)}, {0}, {0}},
    /* linear */
    {"linear+bias", run_linear, 3, {X2(4, 5), X2(3, 5), X1(3)}, {0}, {0}},
    {"linear", run_linear, 2, {X2(1, 7), X2(10, 7)}, {0}, {0}},
    {"linear+bias", run_linear, 3, {X2(33, 64), X2(10, 64), X1(10)}, {0}, {0}},
    {"linear+bias K=1", run_linear, 3, {X2(17, 1), X2(5, 1), X1(5)}, {0}, {0}},
    {"linear+bias fc", run_linear, 3, {XR(2, 256, 2048, 0, 0, 0, 1), XR(2, 10, 2048, 0, 0, -0.02, 0.02), X1(10)}, {0}, {0}},
    {"linear+bias odd", run_linear, 3, {X2(7, 129), X2(67, 129), X1(67)}, {0}, {0}},
    /* cross entropy: ip = ignore_index, reduction, ignore pattern */
    {"cross_entropy mean i64", run_ce, 2, {XR(2, 8, 10, 0, 0, -3, 3), T64(8, 10)}, {-100, DLT_REDUCTION_MEAN, 0}, {0}},
    {"cross_entropy sum i32", run_ce, 2, {XR(2, 5, 3, 0, 0, -3, 3), T32(5, 3)}, {-100, DLT_REDUCTION_SUM, 0}, {0}},
    {"cross_entropy batch 1", run_ce, 2, {XR(2, 1, 7, 0, 0, -3, 3), T64(1, 7)}, {-100, DLT_REDUCTION_MEAN, 0}, {0}},
    {"cross_entropy ignored rows", run_ce, 2, {XR(2, 16, 10, 0, 0, -3, 3), T32(16, 10)}, {-100, DLT_REDUCTION_MEAN, 1}, {0}},
    {"cross_entropy ignore=3", run_ce, 2, {XR(2, 12, 5, 0, 0, -3, 3), T64(12, 5)}, {3, DLT_REDUCTION_MEAN, 0}, {0}},
    {"cross_entropy all ignored", run_ce, 2, {XR(2, 4, 5, 0, 0, -3, 3), T64(4, 5)}, {-100, DLT_REDUCTION_MEAN, 2}, {0}},
    {"cross_entropy K=1000 (grid path)", run_ce, 2, {XR(2, 70, 1000, 0, 0, -3, 3), T64(70, 1000)}, {-100, DLT_REDUCTION_MEAN, 1}, {0}},
    {"cross_entropy K=40 sum", run_ce, 2, {XR(2, 2000, 40, 0, 0, -3, 3), T32(2000, 40)}, {-100, DLT_REDUCTION_SUM, 0}, {0}},
    /* layer norm with f32 parameters: the register kernels (768, 64: vectors of the dtype)
     * and the per-element ones (100) */
    {"layer_norm f32 params", run_layer_norm, 3, {X2(48, 768), PARAM(768), PARAM(768)}, {0}, {0}},
    {"layer_norm f32 params", run_layer_norm, 3, {X2(300, 64), PARAM(64), PARAM(64)}, {0}, {0}},
    {"layer_norm f32 params", run_layer_norm, 3, {X2(9, 100), PARAM(100), PARAM(100)}, {0}, {0}},
    /* shape and dtype */
    {"reshape", run_reshape, 1, {X4(2, 3, 4, 5)}, {2, 6, 20}, {0}},
    {"reshape -1", run_reshape, 1, {X4(2, 3, 4, 5)}, {3, -1, 5, 2}, {0}},
    {"flatten", run_flatten, 1, {X4(2, 8, 1, 1)}, {1, -1}, {0}},
    {"flatten 1..2", run_flatten, 1, {X4(2, 3, 4, 5)}, {1, 2}, {0}},
    {"cast to f32", run_cast, 1, {X4(2, 3, 4, 5)}, {DLT_F32}, {0}},
    {"cast to f16", run_cast, 1, {X4(2, 3, 4, 5)}, {DLT_F16}, {0}},
    {"cast to bf16", run_cast, 1, {X2(7, 9)}, {DLT_BF16}, {0}},
    /* conv and batch norm (tests/cuda_conv_bn.c covers them in depth) */
    {"conv2d 3x3 pad 1 +bias", run_conv, 3, {XR(4, 2, 5, 7, 6, -1, 1), XR(4, 4, 5, 3, 3, -0.5, 0.5), X1(4)},
     {1, 1, 1, 1, 1, 1, 1}, {0}},
    {"batch_norm2d train", run_bn, 5, {X4(4, 6, 5, 3), PARAM(6), PARAM(6), STAT(6, -0.5, 0.5), STAT(6, 0.5, 1.5)},
     {0}, {0.1, 1e-5}},
    {"batch_norm2d+add+relu train", run_bn_act, 6,
     {X4(3, 5, 4, 3), PARAM(5), PARAM(5), STAT(5, -0.5, 0.5), STAT(5, 0.5, 1.5), X4(3, 5, 4, 3)}, {0}, {0.1, 1e-5}},
};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

/* ---- data ---- */

static int64_t numel_of(int32_t ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

static const char *fmt_name(int32_t f) { return f == DLT_FORMAT_CHANNELS_LAST ? "channels-last" : "contiguous"; }

/* A CPU tensor with random values in [lo, hi) (logical order), rounded to dtype, in fmt. */
static dlt_tensor *cpu_random(int32_t dtype, int32_t fmt, int32_t ndim, const int64_t *shape, double lo, double hi) {
    const int64_t n = numel_of(ndim, shape);
    float *v = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = (float)(lo + (hi - lo) * urand());
    dlt_tensor *t = NULL, *u = NULL;
    if (dlt_tensor_from_host(g_cpu, DLT_F32, shape, ndim, DLT_FORMAT_CONTIGUOUS, v, (size_t)n * sizeof(float), &t) !=
        DLT_OK)
        goto fail;
    free(v);
    if (dtype != DLT_F32) {
        if (dlt_tensor_cast(t, dtype, &u) != DLT_OK) goto fail;
        dlt_tensor_release(t);
        t = u;
    }
    if (fmt != DLT_FORMAT_CONTIGUOUS) {
        if (dlt_tensor_to_format(t, fmt, &u) != DLT_OK) goto fail;
        dlt_tensor_release(t);
        t = u;
    }
    return t;
fail:
    printf("# cpu_random: %s\n", dlt_last_error());
    exit(1);
}

static dlt_tensor *cpu_targets(const op_case *c, const in_spec *s) {
    const int64_t n = s->shape[0], k = (int64_t)s->hi;
    int64_t *v = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) {
        v[i] = (int64_t)(urand() * (double)k);
        if (v[i] >= k) v[i] = k - 1;
        if ((c->ip[2] == 1 && i % 3 == 1) || c->ip[2] == 2) v[i] = c->ip[0];
    }
    dlt_tensor *t = NULL;
    dlt_status st;
    if (s->kind == IN_TARGET64) {
        st = dlt_tensor_from_host(g_cpu, DLT_I64, &n, 1, DLT_FORMAT_CONTIGUOUS, v, (size_t)n * 8, &t);
    } else {
        int32_t *w = malloc((size_t)n * sizeof(int32_t));
        for (int64_t i = 0; i < n; i++) w[i] = (int32_t)v[i];
        st = dlt_tensor_from_host(g_cpu, DLT_I32, &n, 1, DLT_FORMAT_CONTIGUOUS, w, (size_t)n * 4, &t);
        free(w);
    }
    free(v);
    if (st != DLT_OK) {
        printf("# cpu_targets: %s\n", dlt_last_error());
        exit(1);
    }
    return t;
}

/* Allocates blocks of nbytes filled with 0xff (NaN in every float dtype) on ctx and frees
 * them, so the next allocations of that size are likely to start out as NaN. */
static void poison(dlt_ctx *ctx, const size_t *sizes, int n) {
    dlt_tensor *t[16] = {0};
    int k = 0;
    for (int i = 0; i < n && k + 2 <= 16; i++) {
        if (sizes[i] == 0) continue;
        int64_t len = (int64_t)sizes[i];
        for (int r = 0; r < 2; r++) {
            if (dlt_tensor_empty(ctx, DLT_U8, &len, 1, DLT_FORMAT_CONTIGUOUS, &t[k]) != DLT_OK) break;
            if (dlt_tensor_fill(t[k], 255.0) != DLT_OK) break;
            k++;
        }
    }
    for (int i = k - 1; i >= 0; i--) dlt_tensor_release(t[i]);
}

/* ---- comparison ---- */

/* Compares a device tensor with its CPU twin: shape, dtype, format, then values within the
 * relative-norm tolerance. With nan_ok, NaN must meet NaN (an all-ignored cross-entropy
 * mean is NaN); without it any NaN fails (an unwritten, poisoned element). */
static void compare(const char *label, const char *what, const dlt_tensor *cpu, const dlt_tensor *dev, double tol,
                    int nan_ok) {
    REQUIRE(cpu && dev, "%s: %s missing (cpu %p, device %p)", label, what, (const void *)cpu, (const void *)dev);
    int64_t sc[DLT_MAX_DIMS] = {0}, sd[DLT_MAX_DIMS] = {0};
    const int32_t nc = dlt_tensor_shape(cpu, sc, DLT_MAX_DIMS), nd = dlt_tensor_shape(dev, sd, DLT_MAX_DIMS);
    int same = nc == nd;
    for (int32_t i = 0; same && i < nc; i++) same = sc[i] == sd[i];
    CHECK(same, "%s: %s shape differs (ndim %d vs %d)", label, what, nc, nd);
    CHECK(dlt_tensor_dtype(cpu) == dlt_tensor_dtype(dev), "%s: %s dtype %s vs %s", label, what,
          dlt_dtype_name(dlt_tensor_dtype(cpu)), dlt_dtype_name(dlt_tensor_dtype(dev)));
    CHECK(dlt_tensor_format(cpu) == dlt_tensor_format(dev), "%s: %s format %d vs %d", label, what,
          dlt_tensor_format(cpu), dlt_tensor_format(dev));
    if (!same) return;
    float *a = th_read_f32(cpu), *b = th_read_f32(dev);
    REQUIRE(a && b, "%s: %s read back failed: %s", label, what, dlt_last_error());
    const int64_t n = dlt_tensor_numel(cpu);
    double num = 0, den = 0, worst = -1;
    int64_t nan_bad = 0, wi = 0;
    for (int64_t i = 0; i < n; i++) {
        const int an = a[i] != a[i], bn = b[i] != b[i];
        if (an || bn) {
            if (an != bn || !nan_ok) {
                if (!nan_bad) wi = i;
                nan_bad++;
            }
            continue;
        }
        const double d = (double)b[i] - (double)a[i];
        num += d * d;
        den += (double)a[i] * (double)a[i];
        if (!nan_bad && fabs(d) > worst) {
            worst = fabs(d);
            wi = i;
        }
    }
    const double err = den > 0 ? sqrt(num / den) : sqrt(num);
    CHECK(nan_bad == 0 && err <= tol,
          "%s: %s differs: relative error %.3g (tolerance %.3g), %lld unexpected NaNs; element %lld: cpu "
          "%.9g, device %.9g",
          label, what, err, tol, (long long)nan_bad, (long long)wi, (double)a[wi], (double)b[wi]);
    free(a);
    free(b);
}

/* ---- one case ---- */

typedef struct side {
    dlt_ctx *ctx;
    dlt_tensor *in[MAX_IN];
    dlt_tensor *out;
} side;

static int grad_kind(int32_t kind) { return kind == IN_X || kind == IN_PARAM; }

static void forward(const op_case *c, side *s, const char *label, const size_t *sizes, int nsizes) {
    poison(s->ctx, sizes, nsizes);
    dlt_tensor_release(s->out);
    s->out = NULL;
    dlt_status st = c->run(c, s->in, &s->out);
    CHECK(st == DLT_OK, "%s: forward on %s failed: %d (%s): %s", label, s->ctx == g_cpu ? "cpu" : "device", st,
          dlt_status_string(st), dlt_last_error());
    REQUIRE(st == DLT_OK);
}

static void backward(side *s, dlt_tensor *g, const char *label) {
    dlt_status st = dlt_backward(s->out, g);
    CHECK(st == DLT_OK, "%s: backward on %s failed: %d (%s): %s", label, s->ctx == g_cpu ? "cpu" : "device", st,
          dlt_status_string(st), dlt_last_error());
    REQUIRE(st == DLT_OK);
}

static void compare_all(const op_case *c, side *cs, side *ds, const char *label, const char *round, double tol,
                        int grads) {
    char what[96];
    snprintf(what, sizeof what, "output (%s)", round);
    compare(label, what, cs->out, ds->out, tol, 1);
    for (int i = 0; i < c->n_in; i++) {
        if (c->in[i].kind == IN_STAT) {
            snprintf(what, sizeof what, "updated input %d (%s)", i, round);
            compare(label, what, cs->in[i], ds->in[i], tol, 0);
        }
        if (grads && grad_kind(c->in[i].kind)) {
            snprintf(what, sizeof what, "gradient of input %d (%s)", i, round);
            compare(label, what, dlt_tensor_grad(cs->in[i]), dlt_tensor_grad(ds->in[i]), tol, 0);
        }
    }
}

static void run_case(const op_case *c, int32_t dtype, int32_t fmt) {
    char label[192];
    snprintf(label, sizeof label, "%s [%lld,%lld,%lld,%lld] %s %s", c->name, (long long)c->in[0].shape[0],
             (long long)c->in[0].shape[1], (long long)c->in[0].shape[2], (long long)c->in[0].shape[3],
             dlt_dtype_name(dtype), fmt_name(fmt));
    side cs, ds;
    memset(&cs, 0, sizeof cs);
    memset(&ds, 0, sizeof ds);
    cs.ctx = g_cpu;
    ds.ctx = g_dev;
    int64_t live0_c = 0, live0_d = 0;
    CHECK_OK(dlt_tape_live_nodes(g_cpu, &live0_c));
    CHECK_OK(dlt_tape_live_nodes(g_dev, &live0_d));

    /* inputs: made on the CPU, copied bit for bit to the device */
    size_t sizes[MAX_IN + 1];
    int nsizes = 0, any_grad = 0;
    for (int i = 0; i < c->n_in; i++) {
        const in_spec *s = &c->in[i];
        switch (s->kind) {
        case IN_X:
            cs.in[i] = cpu_random(dtype, s->ndim == 4 ? fmt : DLT_FORMAT_CONTIGUOUS, s->ndim, s->shape, s->lo, s->hi);
            break;
        case IN_PARAM:
        case IN_STAT:
        case IN_SCALE:
            cs.in[i] = cpu_random(DLT_F32, DLT_FORMAT_CONTIGUOUS, s->ndim, s->shape, s->lo, s->hi);
            break;
        default:
            cs.in[i] = cpu_targets(c, s);
            break;
        }
        CHECK_OK(dlt_tensor_to_ctx(cs.in[i], g_dev, &ds.in[i]));
        if (grad_kind(s->kind)) {
            CHECK_OK(dlt_tensor_set_requires_grad(cs.in[i], 1));
            CHECK_OK(dlt_tensor_set_requires_grad(ds.in[i], 1));
            any_grad = 1;
        }
        sizes[nsizes++] = dlt_tensor_nbytes(cs.in[i]);
    }

    /* round 1: forward (outputs compared), backward to create the gradient buffers */
    forward(c, &cs, label, sizes, nsizes);
    forward(c, &ds, label, sizes, nsizes);
    sizes[nsizes++] = dlt_tensor_nbytes(cs.out);
    const double tol = tol_for(dtype);
    compare_all(c, &cs, &ds, label, "first forward", tol, 0);
    dlt_tensor *gc = NULL, *gd = NULL;
    if (any_grad) {
        int64_t os[DLT_MAX_DIMS] = {0};
        const int32_t ond = dlt_tensor_shape(cs.out, os, DLT_MAX_DIMS);
        gc = cpu_random(dlt_tensor_dtype(cs.out), dlt_tensor_format(cs.out), ond, os, -1, 1);
        CHECK_OK(dlt_tensor_to_ctx(gc, g_dev, &gd));
        backward(&cs, gc, label);
        backward(&ds, gd, label);

        /* round 2: poisoned gradient buffers must be overwritten */
        dlt_tensor *leaves[2][MAX_IN];
        int nl = 0;
        for (int i = 0; i < c->n_in; i++)
            if (grad_kind(c->in[i].kind)) {
                leaves[0][nl] = cs.in[i];
                leaves[1][nl] = ds.in[i];
                nl++;
                dlt_tensor *g0 = dlt_tensor_grad(cs.in[i]), *g1 = dlt_tensor_grad(ds.in[i]);
                REQUIRE(g0 && g1, "%s: input %d has no gradient after backward", label, i);
                CHECK_OK(dlt_tensor_fill(g0, NAN));
                CHECK_OK(dlt_tensor_fill(g1, NAN));
            }
        CHECK_OK(dlt_zero_grad(leaves[0], nl, 1));
        CHECK_OK(dlt_zero_grad(leaves[1], nl, 1));
        forward(c, &cs, label, sizes, nsizes);
        forward(c, &ds, label, sizes, nsizes);
        backward(&cs, gc, label);
        backward(&ds, gd, label);
        compare_all(c, &cs, &ds, label, "overwriting gradients", tol, 1);

        /* round 3: gradients accumulate */
        forward(c, &cs, label, sizes, nsizes);
        forward(c, &ds, label, sizes, nsizes);
        backward(&cs, gc, label);
        backward(&ds, gd, label);
        compare_all(c, &cs, &ds, label, "accumulating gradients", tol, 1);
    }
    CHECK_OK(dlt_ctx_synchronize(g_dev));
    CHECK_OK(dlt_ctx_check(g_dev));

    dlt_tensor_release(gc);
    dlt_tensor_release(gd);
    dlt_tensor_release(cs.out);
    dlt_tensor_release(ds.out);
    for (int i = 0; i < c->n_in; i++) {
        dlt_tensor_release(cs.in[i]);
        dlt_tensor_release(ds.in[i]);
    }
    int64_t live_c = -1, live_d = -1;
    CHECK_OK(dlt_tape_live_nodes(g_cpu, &live_c));
    CHECK_OK(dlt_tape_live_nodes(g_dev, &live_d));
    CHECK(live_c == live0_c && live_d == live0_d, "%s: tape nodes left alive: cpu %lld, device %lld", label,
          (long long)(live_c - live0_c), (long long)(live_d - live0_d));
}

/* ---- test cases: one TAP line per table row, covering its dtypes and formats ---- */

static int g_row;

static void test_row(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    const op_case *c = &CASES[g_row];
    int four_d = 0;
    for (int i = 0; i < c->n_in; i++) four_d |= c->in[i].kind == IN_X && c->in[i].ndim == 4;
    static const int32_t DTYPES[3] = {DLT_F32, DLT_F16, DLT_BF16};
    for (int d = 0; d < 3; d++)
        for (int f = 0; f < (four_d ? 2 : 1); f++) {
            if (c->run == run_cast && c->ip[0] == DTYPES[d]) continue; /* a cast to itself is no test */
            g_rng = 0x5eed0000ull + (uint64_t)g_row * 131u + (uint64_t)d * 7u + (uint64_t)f;
            run_case(c, DTYPES[d], f ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS);
        }
}

/* count_correct has no front door of its own: it runs inside dlt_evaluate_accuracy. The same
 * linear classifier (weights copied from the CPU model) over the same synthetic dataset must
 * count exactly as many hits on both backends, with int32 and int64 labels and a final
 * partial batch. */
static dlt_module *classifier(dlt_ctx *ctx) {
    dlt_module *seq = NULL, *flat = NULL, *fc = NULL;
    CHECK_OK(dlt_sequential_create(ctx, &seq));
    CHECK_OK(dlt_flatten_create(ctx, &flat));
    CHECK_OK(dlt_sequential_append(seq, NULL, flat));
    CHECK_OK(dlt_linear_create(ctx, 3 * 32 * 32, 10, 1, &fc));
    CHECK_OK(dlt_sequential_append(seq, NULL, fc));
    return seq;
}

static void test_count_correct(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    dlt_ctx *ctxs[2] = {g_cpu, g_dev};
    dlt_module *m[2] = {NULL, NULL};
    dlt_dataset *ds[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        m[k] = classifier(ctxs[k]);
        CHECK_OK(dlt_synthetic_dataset_create(ctxs[k], 300, 10, 77, 1, &ds[k]));
    }
    dlt_tensor *pc[4] = {0}, *pd[4] = {0};
    int32_t nc = 0, nd = 0;
    CHECK_OK(dlt_module_params(m[0], pc, 4, &nc));
    CHECK_OK(dlt_module_params(m[1], pd, 4, &nd));
    REQUIRE(nc == 2 && nd == 2, "the classifier has %d / %d parameters", nc, nd);
    for (int i = 0; i < nc; i++) CHECK_OK(dlt_tensor_copy(pd[i], pc[i]));
    const int32_t labels[2] = {DLT_I64, DLT_I32};
    for (int l = 0; l < 2; l++) {
        double acc[2] = {-1, -1};
        for (int k = 0; k < 2; k++) {
            dlt_loader *ld = NULL;
            CHECK_OK(dlt_loader_create(ds[k], 64, 0, 0, 5, &ld));
            CHECK_OK(dlt_loader_set_output(ld, DLT_F32, DLT_FORMAT_CONTIGUOUS, labels[l]));
            dlt_status st = dlt_evaluate_accuracy(m[k], ld, &acc[k]);
            CHECK(st == DLT_OK, "evaluate on %s: %s", k ? "device" : "cpu", dlt_last_error());
            dlt_loader_destroy(ld);
        }
        /* the counts are integers out of 300: equal, not merely close */
        CHECK(acc[0] > 0 && acc[0] <= 1, "cpu accuracy %g", acc[0]);
        CHECK(fabs(acc[1] * 300 - acc[0] * 300) < 0.5, "%s labels: %g correct on the device, %g on the cpu",
              dlt_dtype_name(labels[l]), acc[1] * 300, acc[0] * 300);
    }
    for (int k = 0; k < 2; k++) {
        dlt_module_destroy(m[k]);
        dlt_dataset_destroy(ds[k]);
    }
    CHECK_OK(dlt_ctx_check(g_dev));
}

/* ---- dropout in a captured step (lib/core/graph.c's generator contract) ----
 * The CUDA sequence warm-up, capture, replay, eager dropout, replay, replay draws the masks
 * of the same calls made eagerly on the CPU with the same seed: replays and eager calls
 * share one counter and the capture draws nothing (tests/test_graph.c checks the same
 * bookkeeping on the CPU with a recording backend). */
typedef struct {
    dlt_tensor *x, *y;
} drop_step;
static dlt_status drop_step_fn(void *user) {
    drop_step *s = user;
    dlt_tensor_release(s->y);
    s->y = NULL;
    return dlt_dropout(s->x, 0.5, 1, &s->y);
}
static void drop_read(const dlt_tensor *y, float *out, int64_t n) {
    CHECK_OK(dlt_tensor_copy_to_host(y, out, (size_t)n * sizeof *out));
}
static void test_dropout_graph_replays_match_eager(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    enum { DN = 4096, DX = 777 };
    static float want[5][DN], got[5][DN];
    const int64_t n = DN, nx = DX;
    drop_step c = {NULL, NULL}, d = {NULL, NULL};
    dlt_tensor *cx = NULL, *dx = NULL, *t = NULL;
    CHECK_OK(dlt_ctx_set_seed(g_cpu, 11));
    CHECK_OK(dlt_ctx_set_seed(g_dev, 11));
    CHECK_OK(dlt_tensor_empty(g_cpu, DLT_F32, &n, 1, 0, &c.x));
    CHECK_OK(dlt_tensor_fill(c.x, 1.0));
    CHECK_OK(dlt_tensor_empty(g_dev, DLT_F32, &n, 1, 0, &d.x));
    CHECK_OK(dlt_tensor_fill(d.x, 1.0));
    CHECK_OK(dlt_tensor_empty(g_cpu, DLT_F32, &nx, 1, 0, &cx));
    CHECK_OK(dlt_tensor_fill(cx, 1.0));
    CHECK_OK(dlt_tensor_empty(g_dev, DLT_F32, &nx, 1, 0, &dx));
    CHECK_OK(dlt_tensor_fill(dx, 1.0));
    /* CPU, eager: step, step, extra, step, step */
    for (int i = 0; i < 5; i++) {
        if (i == 2) {
            CHECK_OK(dlt_dropout(cx, 0.5, 1, &t));
            drop_read(t, want[i], DX);
            dlt_tensor_release(t), t = NULL;
        } else {
            CHECK_OK(drop_step_fn(&c));
            drop_read(c.y, want[i], DN);
        }
    }
    /* device: warm-up (= step 1), capture, replay, extra, replay, replay */
    dlt_graph *g = NULL;
    CHECK_OK(dlt_graph_create(g_dev, drop_step_fn, &d, 1, &g));
    for (int i = 1; i < 5; i++) {
        if (i == 2) {
            CHECK_OK(dlt_dropout(dx, 0.5, 1, &t));
            drop_read(t, got[i], DX);
            dlt_tensor_release(t), t = NULL;
        } else {
            CHECK_OK(dlt_graph_run(g));
            drop_read(d.y, got[i], DN);
        }
    }
    uint64_t oc = 0, od = 0;
    CHECK_OK(dlt_ctx_get_rng_state(g_cpu, NULL, &oc));
    CHECK_OK(dlt_ctx_get_rng_state(g_dev, NULL, &od));
    static const char *what[5] = {"", "first replay", "eager call between replays", "replay after it",
                                  "back-to-back replay"};
    for (int i = 1; i < 5; i++)
        CHECK(memcmp(want[i], got[i], (size_t)(i == 2 ? DX : DN) * sizeof(float)) == 0,
              "%s: the mask differs from the eager CPU run's (captured: %d)", what[i], dlt_graph_is_captured(g));
    CHECK(oc == od, "generator offsets: CPU %llu, device %llu", (unsigned long long)oc, (unsigned long long)od);
    dlt_graph_destroy(g);
    dlt_tensor_release(c.x), dlt_tensor_release(c.y), dlt_tensor_release(d.x), dlt_tensor_release(d.y);
    dlt_tensor_release(cx), dlt_tensor_release(dx);
}

static void test_layer_norm_to_matches_cast(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    layer_norm_to_check(g_dev, DLT_BF16, 0);
    layer_norm_to_check(g_dev, DLT_BF16, 1);
    layer_norm_to_check(g_dev, DLT_F16, 1);
}

/* The residual add and the LayerNorm as one op on the device (the register kernels at width
 * 40, the per-element path at 30): the two ops' numbers bit for bit */
static void test_add_layer_norm_matches_ops(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    const int32_t dts[3] = {DLT_F32, DLT_BF16, DLT_F16};
    const int64_t widths[2] = {40, 30};
    for (int d = 0; d < 3; d++)
        for (int w = 0; w < 2; w++)
            for (int through = 1; through <= 3; through++) add_layer_norm_check(g_dev, dts[d], widths[w], through);
}

int main(void) {
    g_cpu = th_cpu_ctx();
    g_dev = th_dev_ctx(g_no_dev, sizeof g_no_dev);
    for (g_row = 0; g_row < N_CASES; g_row++) {
        char name[128];
        snprintf(name, sizeof name, "%s (row %d)", CASES[g_row].name, g_row);
        th_run(test_row, name);
    }
    RUN(test_count_correct);
    RUN(test_dropout_graph_replays_match_eager);
    RUN(test_layer_norm_to_matches_cast);
    RUN(test_add_layer_norm_matches_ops);
    dlt_ctx_destroy(g_dev);
    dlt_ctx_destroy(g_cpu);
    return th_done();
}
