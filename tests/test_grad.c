/*
 * test_grad.c - gradients from dlt_backward (CPU backend) against central finite
 * differences computed in float64 on the references of ref.c.
 *
 * Table-driven: each row of GRAD_ROWS is one op case: a name, a builder that makes the
 * inputs (shapes, seeded values, which are differentiable) and attributes from the row's
 * integer parameters, the library forward (public API), and the float64 forward. A new op
 * gets gradient coverage by adding a builder/forward/reference triple and a row.
 *
 * For every row the driver:
 *   1. builds f32 tensors (in the row's memory format) and marks the differentiable ones;
 *   2. runs the forward, checks it against the reference, and runs dlt_backward with a
 *      random upstream gradient u (so L = sum(u * y));
 *   3. for each differentiable input computes dL/dv_j = (L(v+h e_j) - L(v-h e_j)) / 2h on
 *      the reference (all elements, or an evenly spaced subset of 256 for large inputs) and
 *      compares with the input's .grad by relative norm;
 *   4. runs forward and backward again: leaf gradients accumulate, so they must now be
 *      twice the finite differences (this exercises the beta=1 paths of the kernels);
 *   5. checks that no tape node is left alive.
 * Inputs are nudged away from kinks: ReLU pre-activations are kept at least KINK_GAP from 0,
 * max-pool inputs are distinct values 1/16 apart, so a step of FD_STEP never crosses one.
 */
#include <stdint.h>

#include "harness.h"
#include "ref.h"

/* ---- tolerances and steps, in one place ---- */
#define FD_STEP 1e-6     /* central-difference step (float64 references) */
#define GRAD_TOL 1e-4    /* relative norm error of an fp32 gradient against float64 FD */
#define FWD_TOL 1e-5     /* relative norm error of the fp32 forward against the reference */
#define KINK_GAP 0.02    /* minimum |pre-activation| where a ReLU is applied */
#define FD_MAX_POINTS 256 /* elements per input checked by finite differences */

#define GRAD_MAX_IN 6

static dlt_ctx *g_ctx;

/* ---- deterministic data (splitmix64), values rounded to fp32 ---- */
static uint64_t g_rng;
static void seed(uint64_t s) { g_rng = s * 0x9e3779b97f4a7c15ull + 7; }
static double urand(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}
static double *rand_vals(int64_t n, double lo, double hi) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) v[i] = (double)(float)(lo + (hi - lo) * urand());
    return v;
}
static int64_t prod(const int64_t *s, int nd) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    return n;
}

/* ---- an op case ---- */
typedef struct gcase {
    int n_in;
    const char *in_name[GRAD_MAX_IN];
    int64_t shape[GRAD_MAX_IN][4];
    int ndim[GRAD_MAX_IN];
    int32_t format[GRAD_MAX_IN];
    int diff[GRAD_MAX_IN]; /* differentiable: gradient checked */
    double *val[GRAD_MAX_IN]; /* NULL: input absent (passed as NULL) */
    int64_t *targets;      /* class targets for cross-entropy rows */
    int64_t n_targets;
    int32_t target_dtype;
    int64_t ip[16];        /* attributes the forward functions read */
    double fp[4];
    int64_t out_shape[4];
    int out_ndim;
    int32_t out_dtype;     /* dtype of the library's result (f32 unless a cast) */
    double fwd_tol;
    dlt_tensor *tgt;       /* the targets tensor, made by the driver */
} gcase;

typedef void (*build_fn)(gcase *c, const int64_t *p, int32_t fmt);
typedef dlt_status (*fwd_fn)(const gcase *c, dlt_tensor *const *in, dlt_tensor **out);
typedef void (*ref_fn)(const gcase *c, double *const *in, double *out);

typedef struct grad_row {
    const char *name;
    build_fn build;
    fwd_fn fwd;
    ref_fn ref;
    int64_t p[16]; /* the builder's parameters */
    int32_t format;
} grad_row;

static void add_input(gcase *c, int slot, const char *name, const int64_t *shape, int nd,
                      int32_t fmt, int diff, double *vals) {
    c->in_name[slot] = name;
    for (int i = 0; i < nd; i++) c->shape[slot][i] = shape[i];
    c->ndim[slot] = nd;
    c->format[slot] = nd == 4 ? fmt : DLT_FORMAT_CONTIGUOUS;
    c->diff[slot] = diff;
    c->val[slot] = vals;
    if (slot + 1 > c->n_in) c->n_in = slot + 1;
}
static void set_out(gcase *c, const int64_t *shape, int nd) {
    for (int i = 0; i < nd; i++) c->out_shape[i] = shape[i];
    c->out_ndim = nd;
}
static int64_t in_numel(const gcase *c, int i) { return prod(c->shape[i], c->ndim[i]); }

/* ======================================================================================
 * conv2d: p = {N,C,H,W, K,R,S, sh,sw, ph,pw, dh,dw, groups, bias}
 * ==================================================================================== */
static void build_conv(gcase *c, const int64_t *p, int32_t fmt) {
    const int64_t N = p[0], C = p[1], H = p[2], W = p[3], K = p[4], R = p[5], S = p[6];
    const int64_t G = p[13];
    int64_t xs[4] = {N, C, H, W}, ws[4] = {K, C / G, R, S}, bs[1] = {K};
    add_input(c, 0, "x", xs, 4, fmt, 1, rand_vals(prod(xs, 4), -1, 1));
    add_input(c, 1, "w", ws, 4, fmt, 1, rand_vals(prod(ws, 4), -1, 1));
    if (p[14]) add_input(c, 2, "bias", bs, 1, fmt, 1, rand_vals(K, -1, 1));
    else c->n_in = 3;
    for (int i = 0; i < 15; i++) c->ip[i] = p[i];
    int64_t ys[4] = {N, K, ref_conv_out(H, R, p[7], p[9], p[11]), ref_conv_out(W, S, p[8], p[10], p[12])};
    set_out(c, ys, 4);
}
static dlt_status fwd_conv(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    const int64_t *p = c->ip;
    return dlt_conv2d(in[0], in[1], in[2], p[7], p[8], p[9], p[10], p[11], p[12], p[13], out);
}
static void ref_conv(const gcase *c, double *const *in, double *out) {
    const int64_t *p = c->ip;
    ref_conv2d(in[0], p[0], p[1], p[2], p[3], in[1], p[4], p[5], p[6], in[2], p[7], p[8], p[9],
               p[10], p[11], p[12], p[13], out);
}

/* ======================================================================================
 * batch norm: p = {N,C,H,W, affine, residual, relu, training, running}
 * inputs: 0 x, 1 gamma, 2 beta, 3 residual, 4 running_mean, 5 running_var (constants)
 * ==================================================================================== */
static void ref_bn(const gcase *c, double *const *in, double *out) {
    const int64_t *p = c->ip;
    if (p[7] || !p[8])
        ref_batchnorm_train(in[0], p[0], p[1], p[2], p[3], in[1], in[2], in[3], (int)p[6], 1e-5,
                            out, NULL, NULL);
    else
        ref_batchnorm_eval(in[0], p[0], p[1], p[2], p[3], in[1], in[2], in[4], in[5], in[3],
                           (int)p[6], 1e-5, out);
}
/* Keeps every pre-activation at least KINK_GAP from zero: moves the residual where there is
 * one, else redraws x. */
static void bn_nudge(gcase *c) {
    const int64_t n = in_numel(c, 0);
    double *z = malloc((size_t)n * sizeof(double));
    c->ip[6] = 0; /* pre-activation: the same op without the ReLU */
    for (int attempt = 0; attempt < 500; attempt++) {
        ref_bn(c, c->val, z);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            if (fabs(z[i]) >= KINK_GAP) continue;
            bad++;
            if (c->val[3]) c->val[3][i] = (double)(float)(c->val[3][i] + (z[i] >= 0 ? 2 : -2) * KINK_GAP);
        }
        if (!bad) break;
        if (!c->val[3])
            for (int64_t i = 0; i < n; i++) c->val[0][i] = (double)(float)(-2 + 5 * urand());
    }
    c->ip[6] = 1;
    free(z);
}
static void build_bn(gcase *c, const int64_t *p, int32_t fmt) {
    const int64_t N = p[0], C = p[1], H = p[2], W = p[3];
    int64_t xs[4] = {N, C, H, W}, cs[1] = {C};
    add_input(c, 0, "x", xs, 4, fmt, 1, rand_vals(prod(xs, 4), -2, 3));
    if (p[4]) {
        add_input(c, 1, "gamma", cs, 1, fmt, 1, rand_vals(C, 0.5, 1.5));
        add_input(c, 2, "beta", cs, 1, fmt, 1, rand_vals(C, -0.5, 0.5));
    }
    if (p[5]) add_input(c, 3, "residual", xs, 4, fmt, 1, rand_vals(prod(xs, 4), -1, 1));
    if (p[8]) {
        add_input(c, 4, "running_mean", cs, 1, fmt, 0, rand_vals(C, -0.5, 0.5));
        add_input(c, 5, "running_var", cs, 1, fmt, 0, rand_vals(C, 0.5, 2.0));
    }
    c->n_in = GRAD_MAX_IN;
    for (int i = 0; i < 9; i++) c->ip[i] = p[i];
    if (p[6]) bn_nudge(c);
    set_out(c, xs, 4);
}
static dlt_status fwd_bn(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_batch_norm2d_act(in[0], in[3], (int32_t)c->ip[6], in[1], in[2], in[4], in[5],
                                (int32_t)c->ip[7], 0.1, 1e-5, out);
}

/* ======================================================================================
 * max pool: p = {N,C,H,W, kh,kw, sh,sw, ph,pw}; global average pool: p = {N,C,H,W}
 * ==================================================================================== */
static void build_maxpool(gcase *c, const int64_t *p, int32_t fmt) {
    int64_t xs[4] = {p[0], p[1], p[2], p[3]};
    const int64_t n = prod(xs, 4);
    /* distinct values 1/16 apart: no tie is within a finite-difference step */
    double *v = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) v[i] = (double)(i - n / 2) / 16.0;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(urand() * (double)(i + 1));
        double t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    add_input(c, 0, "x", xs, 4, fmt, 1, v);
    for (int i = 0; i < 10; i++) c->ip[i] = p[i];
    int64_t ys[4] = {p[0], p[1], ref_conv_out(p[2], p[4], p[6], p[8], 1),
                     ref_conv_out(p[3], p[5], p[7], p[9], 1)};
    set_out(c, ys, 4);
}
static dlt_status fwd_maxpool(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    const int64_t *p = c->ip;
    return dlt_max_pool2d(in[0], p[4], p[5], p[6], p[7], p[8], p[9], out);
}
static void ref_maxpool(const gcase *c, double *const *in, double *out) {
    const int64_t *p = c->ip;
    ref_max_pool2d(in[0], p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], out, NULL);
}

static void build_gavg(gcase *c, const int64_t *p, int32_t fmt) {
    int64_t xs[4] = {p[0], p[1], p[2], p[3]}, ys[4] = {p[0], p[1], 1, 1};
    add_input(c, 0, "x", xs, 4, fmt, 1, rand_vals(prod(xs, 4), -1, 2));
    for (int i = 0; i < 4; i++) c->ip[i] = p[i];
    set_out(c, ys, 4);
}
static dlt_status fwd_gavg(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_global_avg_pool2d(in[0], out);
}
static void ref_gavg(const gcase *c, double *const *in, double *out) {
    ref_global_avg_pool2d(in[0], c->ip[0], c->ip[1], c->ip[2], c->ip[3], out);
}

/* ======================================================================================
 * linear: p = {M, K, N, bias}
 * ==================================================================================== */
static void build_linear(gcase *c, const int64_t *p, int32_t fmt) {
    int64_t xs[2] = {p[0], p[1]}, ws[2] = {p[2], p[1]}, bs[1] = {p[2]}, ys[2] = {p[0], p[2]};
    add_input(c, 0, "x", xs, 2, fmt, 1, rand_vals(prod(xs, 2), -1, 1));
    add_input(c, 1, "w", ws, 2, fmt, 1, rand_vals(prod(ws, 2), -1, 1));
    if (p[3]) add_input(c, 2, "bias", bs, 1, fmt, 1, rand_vals(p[2], -1, 1));
    else c->n_in = 3;
    for (int i = 0; i < 4; i++) c->ip[i] = p[i];
    set_out(c, ys, 2);
}
static dlt_status fwd_linear(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_linear(in[0], in[1], in[2], out);
}
static void ref_linear_row(const gcase *c, double *const *in, double *out) {
    ref_linear(in[0], c->ip[0], c->ip[1], in[1], c->ip[2], in[2], out);
}

/* ======================================================================================
 * cross entropy: p = {N, K, reduction, ignore some rows, target dtype}
 * ==================================================================================== */
static void build_ce(gcase *c, const int64_t *p, int32_t fmt) {
    int64_t ls[2] = {p[0], p[1]};
    add_input(c, 0, "logits", ls, 2, fmt, 1, rand_vals(prod(ls, 2), -3, 3));
    c->targets = malloc((size_t)p[0] * sizeof(int64_t));
    c->n_targets = p[0];
    c->target_dtype = (int32_t)p[4];
    for (int64_t i = 0; i < p[0]; i++)
        c->targets[i] = (p[3] && i % 3 == 1) ? -100 : (int64_t)(urand() * (double)p[1]);
    for (int i = 0; i < 5; i++) c->ip[i] = p[i];
    set_out(c, NULL, 0);
}
static dlt_status fwd_ce(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    return dlt_cross_entropy(in[0], c->tgt, -100, (int32_t)c->ip[2], out);
}
static void ref_ce(const gcase *c, double *const *in, double *out) {
    out[0] = ref_cross_entropy(in[0], c->ip[0], c->ip[1], c->targets, -100, (int)c->ip[2]);
}

/* ======================================================================================
 * elementwise, reductions, shape ops: p = {d0, d1, d2, d3}
 * ==================================================================================== */
static void build_unary4(gcase *c, const int64_t *p, int32_t fmt) {
    int64_t xs[4] = {p[0], p[1], p[2], p[3]};
    double *v = rand_vals(prod(xs, 4), -2, 2);
    for (int64_t i = 0; i < prod(xs, 4); i++) /* away from ReLU's kink */
        if (fabs(v[i]) < KINK_GAP) v[i] = v[i] < 0 ? -2 * KINK_GAP : 2 * KINK_GAP;
    add_input(c, 0, "x", xs, 4, fmt, 1, v);
    for (int i = 0; i < 4; i++) c->ip[i] = p[i];
    set_out(c, xs, 4);
}
static void build_binary4(gcase *c, const int64_t *p, int32_t fmt) {
    build_unary4(c, p, fmt);
    add_input(c, 1, "b", c->shape[0], 4, fmt, 1, rand_vals(in_numel(c, 0), -2, 2));
}
static dlt_status fwd_relu(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_relu(in[0], out);
}
static void ref_relu_row(const gcase *c, double *const *in, double *out) {
    ref_relu(in[0], in_numel(c, 0), out);
}
static dlt_status fwd_add(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_add(in[0], in[1], out);
}
static void ref_add(const gcase *c, double *const *in, double *out) {
    for (int64_t i = 0; i < in_numel(c, 0); i++) out[i] = in[0][i] + in[1][i];
}
/* y = x * s * alpha with s = 0.75 (a constant input), alpha = -1.5 */
static void build_mul_scalar(gcase *c, const int64_t *p, int32_t fmt) {
    build_unary4(c, p, fmt);
    const int64_t one[1] = {1};
    double *s = malloc(sizeof(double));
    s[0] = 0.75;
    add_input(c, 1, "s", one, 1, fmt, 0, s);
}
static dlt_status fwd_mul_scalar(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_mul_scalar(in[0], in[1], -1.5, out);
}
static void ref_mul_scalar(const gcase *c, double *const *in, double *out) {
    for (int64_t i = 0; i < in_numel(c, 0); i++) out[i] = in[0][i] * in[1][0] * -1.5;
}
static void build_reduce(gcase *c, const int64_t *p, int32_t fmt) {
    build_unary4(c, p, fmt);
    set_out(c, NULL, 0);
}
static dlt_status fwd_sum(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_sum(in[0], out);
}
static dlt_status fwd_mean(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_mean(in[0], out);
}
static void ref_sum(const gcase *c, double *const *in, double *out) {
    out[0] = 0;
    for (int64_t i = 0; i < in_numel(c, 0); i++) out[0] += in[0][i];
}
static void ref_mean(const gcase *c, double *const *in, double *out) {
    ref_sum(c, in, out);
    out[0] /= (double)in_numel(c, 0);
}
/* identity-valued ops: y holds x's values in logical order */
static void ref_identity(const gcase *c, double *const *in, double *out) {
    for (int64_t i = 0; i < in_numel(c, 0); i++) out[i] = in[0][i];
}
static void build_flatten(gcase *c, const int64_t *p, int32_t fmt) {
    build_unary4(c, p, fmt);
    int64_t ys[2] = {p[0], p[1] * p[2] * p[3]};
    set_out(c, ys, 2);
}
static dlt_status fwd_flatten(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_flatten(in[0], 1, -1, out);
}
static void build_reshape(gcase *c, const int64_t *p, int32_t fmt) {
    build_unary4(c, p, fmt);
    int64_t ys[3] = {p[0] * p[1], -1, p[3]};
    ys[1] = p[2];
    set_out(c, ys, 3);
}
static dlt_status fwd_reshape(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    const int64_t s[3] = {c->ip[0] * c->ip[1], -1, c->ip[3]};
    return dlt_reshape(in[0], s, 3, out);
}
static void build_cast(gcase *c, const int64_t *p, int32_t fmt) {
    build_unary4(c, p, fmt);
    c->out_dtype = DLT_BF16;
    c->fwd_tol = 8e-3; /* bf16 rounding of the result */
}
static dlt_status fwd_cast(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    (void)c;
    return dlt_cast(in[0], DLT_BF16, out);
}

/* ======================================================================================
 * a small network through every layer op:
 *   x -> conv 3x3 pad 1 (w1, no bias) -> BN (g1, b1, batch stats) + ReLU -> max pool 3/2/1
 *     -> global average pool -> flatten -> linear (w2, b2) -> cross-entropy (mean)
 * p = {N, C, H, W, K, classes}
 * ==================================================================================== */
static void ref_net(const gcase *c, double *const *in, double *out) {
    const int64_t N = c->ip[0], C = c->ip[1], H = c->ip[2], W = c->ip[3], K = c->ip[4],
                  M = c->ip[5];
    const int64_t P = ref_conv_out(H, 3, 2, 1, 1), Q = ref_conv_out(W, 3, 2, 1, 1);
    double *a = malloc((size_t)(N * K * H * W) * 8), *b = malloc((size_t)(N * K * H * W) * 8);
    double *m = malloc((size_t)(N * K * P * Q) * 8), *g = malloc((size_t)(N * K) * 8),
           *l = malloc((size_t)(N * M) * 8);
    ref_conv2d(in[0], N, C, H, W, in[1], K, 3, 3, NULL, 1, 1, 1, 1, 1, 1, 1, a);
    ref_batchnorm_train(a, N, K, H, W, in[2], in[3], NULL, 1, 1e-5, b, NULL, NULL);
    ref_max_pool2d(b, N, K, H, W, 3, 3, 2, 2, 1, 1, m, NULL);
    ref_global_avg_pool2d(m, N, K, P, Q, g);
    ref_linear(g, N, K, in[4], M, in[5], l);
    out[0] = ref_cross_entropy(l, N, M, c->targets, -100, 0);
    free(a), free(b), free(m), free(g), free(l);
}
static void build_net(gcase *c, const int64_t *p, int32_t fmt) {
    const int64_t N = p[0], C = p[1], H = p[2], W = p[3], K = p[4], M = p[5];
    int64_t xs[4] = {N, C, H, W}, ws[4] = {K, C, 3, 3}, ks[1] = {K}, w2s[2] = {M, K}, ms[1] = {M};
    add_input(c, 0, "x", xs, 4, fmt, 1, rand_vals(prod(xs, 4), -1, 1));
    add_input(c, 1, "w1", ws, 4, fmt, 1, rand_vals(prod(ws, 4), -0.5, 0.5));
    add_input(c, 2, "gamma", ks, 1, fmt, 1, rand_vals(K, 0.5, 1.5));
    add_input(c, 3, "beta", ks, 1, fmt, 1, rand_vals(K, -0.5, 0.5));
    add_input(c, 4, "w2", w2s, 2, fmt, 1, rand_vals(M * K, -1, 1));
    add_input(c, 5, "b2", ms, 1, fmt, 1, rand_vals(M, -1, 1));
    c->targets = malloc((size_t)N * sizeof(int64_t));
    c->n_targets = N;
    c->target_dtype = DLT_I64;
    for (int64_t i = 0; i < N; i++) c->targets[i] = (int64_t)(urand() * (double)M);
    for (int i = 0; i < 6; i++) c->ip[i] = p[i];
    set_out(c, NULL, 0);
}
static dlt_status fwd_net(const gcase *c, dlt_tensor *const *in, dlt_tensor **out) {
    dlt_tensor *a = NULL, *b = NULL, *m = NULL, *g = NULL, *f = NULL, *l = NULL;
    dlt_status st;
    if ((st = dlt_conv2d(in[0], in[1], NULL, 1, 1, 1, 1, 1, 1, 1, &a)) == DLT_OK &&
        (st = dlt_batch_norm2d_act(a, NULL, 1, in[2], in[3], NULL, NULL, 1, 0.1, 1e-5, &b)) == DLT_OK &&
        (st = dlt_max_pool2d(b, 3, 3, 2, 2, 1, 1, &m)) == DLT_OK &&
        (st = dlt_global_avg_pool2d(m, &g)) == DLT_OK && (st = dlt_flatten(g, 1, -1, &f)) == DLT_OK &&
        (st = dlt_linear(f, in[4], in[5], &l)) == DLT_OK)
        st = dlt_cross_entropy(l, c->tgt, -100, DLT_REDUCTION_MEAN, out);
    dlt_tensor *all[] = {a, b, m, g, f, l};
    for (int i = 0; i < 6; i++) dlt_tensor_release(all[i]); /* the tape keeps what it needs */
    return st;
}

/* ======================================================================================
 * the table
 * ==================================================================================== */
#define NCHW DLT_FORMAT_CONTIGUOUS
#define NHWC DLT_FORMAT_CHANNELS_LAST

static const grad_row GRAD_ROWS[] = {
    /* conv2d {N,C,H,W, K,R,S, sh,sw, ph,pw, dh,dw, groups, bias} */
    {"conv2d 3x3 pad 1 bias", build_conv, fwd_conv, ref_conv, {2, 3, 5, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, NCHW},
    {"conv2d 3x3 pad 1 bias cl", build_conv, fwd_conv, ref_conv, {2, 3, 5, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, NHWC},
    {"conv2d batch 1 stride 2", build_conv, fwd_conv, ref_conv, {1, 3, 5, 7, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0}, NCHW},
    {"conv2d dilation 2 groups 2", build_conv, fwd_conv, ref_conv, {2, 4, 7, 5, 6, 3, 3, 1, 1, 2, 2, 2, 2, 2, 1}, NCHW},
    {"conv2d dilation 2 groups 2 cl", build_conv, fwd_conv, ref_conv, {2, 4, 7, 5, 6, 3, 3, 1, 1, 2, 2, 2, 2, 2, 1}, NHWC},
    {"conv2d 1x1", build_conv, fwd_conv, ref_conv, {3, 4, 6, 6, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0}, NCHW},
    {"conv2d 1x1 stride 2 groups 2", build_conv, fwd_conv, ref_conv, {2, 6, 8, 8, 4, 1, 1, 2, 2, 0, 0, 1, 1, 2, 1}, NCHW},
    {"conv2d depthwise", build_conv, fwd_conv, ref_conv, {2, 4, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4, 1}, NHWC},
    {"conv2d asymmetric", build_conv, fwd_conv, ref_conv, {2, 4, 4, 5, 8, 3, 2, 1, 2, 0, 1, 1, 1, 4, 0}, NCHW},
    {"conv2d stem 7x7 stride 2", build_conv, fwd_conv, ref_conv, {2, 3, 9, 9, 4, 7, 7, 2, 2, 3, 3, 1, 1, 1, 0}, NCHW},
    {"conv2d tiny maps batch 5", build_conv, fwd_conv, ref_conv, {5, 8, 2, 2, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, NCHW},
    {"conv2d large map per-sample", build_conv, fwd_conv, ref_conv, {2, 2, 32, 33, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, NCHW},
    {"conv2d 1x1 large map direct", build_conv, fwd_conv, ref_conv, {2, 3, 32, 32, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}, NCHW},
    /* batch norm {N,C,H,W, affine, residual, relu, training, running} */
    {"bn train", build_bn, fwd_bn, ref_bn, {2, 3, 4, 5, 1, 0, 0, 1, 1}, NCHW},
    {"bn train cl", build_bn, fwd_bn, ref_bn, {2, 3, 4, 5, 1, 0, 0, 1, 1}, NHWC},
    {"bn train residual relu", build_bn, fwd_bn, ref_bn, {2, 3, 4, 5, 1, 1, 1, 1, 1}, NCHW},
    {"bn train residual relu cl", build_bn, fwd_bn, ref_bn, {2, 3, 4, 5, 1, 1, 1, 1, 1}, NHWC},
    {"bn train relu affine=False", build_bn, fwd_bn, ref_bn, {3, 2, 3, 3, 0, 0, 1, 1, 0}, NCHW},
    {"bn train batch 1 residual", build_bn, fwd_bn, ref_bn, {1, 4, 3, 3, 1, 1, 0, 1, 1}, NCHW},
    {"bn train 1x1 maps", build_bn, fwd_bn, ref_bn, {6, 3, 1, 1, 1, 0, 1, 1, 1}, NHWC},
    {"bn eval residual relu", build_bn, fwd_bn, ref_bn, {2, 3, 4, 5, 1, 1, 1, 0, 1}, NCHW},
    {"bn eval cl", build_bn, fwd_bn, ref_bn, {2, 3, 4, 5, 1, 0, 0, 0, 1}, NHWC},
    {"bn no running stats", build_bn, fwd_bn, ref_bn, {2, 3, 2, 2, 1, 0, 0, 0, 0}, NCHW},
    /* pooling {N,C,H,W, kh,kw, sh,sw, ph,pw} */
    {"max_pool2d 3/2/1", build_maxpool, fwd_maxpool, ref_maxpool, {2, 3, 5, 7, 3, 3, 2, 2, 1, 1}, NCHW},
    {"max_pool2d 3/2/1 cl", build_maxpool, fwd_maxpool, ref_maxpool, {2, 3, 5, 7, 3, 3, 2, 2, 1, 1}, NHWC},
    {"max_pool2d 2/2", build_maxpool, fwd_maxpool, ref_maxpool, {1, 2, 6, 6, 2, 2, 2, 2, 0, 0}, NCHW},
    {"max_pool2d overlapping 3/1/1", build_maxpool, fwd_maxpool, ref_maxpool, {2, 2, 4, 5, 3, 3, 1, 1, 1, 1}, NHWC},
    {"max_pool2d 2x3", build_maxpool, fwd_maxpool, ref_maxpool, {2, 2, 5, 6, 2, 3, 1, 2, 1, 1}, NCHW},
    {"global_avg_pool2d", build_gavg, fwd_gavg, ref_gavg, {2, 3, 5, 7}, NCHW},
    {"global_avg_pool2d cl", build_gavg, fwd_gavg, ref_gavg, {2, 3, 5, 7}, NHWC},
    {"global_avg_pool2d 1x1", build_gavg, fwd_gavg, ref_gavg, {4, 2, 1, 1}, NCHW},
    /* linear {M, K, N, bias} */
    {"linear bias", build_linear, fwd_linear, ref_linear_row, {4, 7, 5, 1}, NCHW},
    {"linear batch 1 no bias", build_linear, fwd_linear, ref_linear_row, {1, 3, 10, 0}, NCHW},
    {"linear wide", build_linear, fwd_linear, ref_linear_row, {6, 40, 3, 1}, NCHW},
    /* cross entropy {N, K, reduction, ignore rows, target dtype} */
    {"cross_entropy mean", build_ce, fwd_ce, ref_ce, {5, 7, DLT_REDUCTION_MEAN, 0, DLT_I64}, NCHW},
    {"cross_entropy sum i32", build_ce, fwd_ce, ref_ce, {5, 7, DLT_REDUCTION_SUM, 0, DLT_I32}, NCHW},
    {"cross_entropy mean ignore", build_ce, fwd_ce, ref_ce, {7, 4, DLT_REDUCTION_MEAN, 1, DLT_I64}, NCHW},
    {"cross_entropy sum ignore", build_ce, fwd_ce, ref_ce, {7, 4, DLT_REDUCTION_SUM, 1, DLT_I32}, NCHW},
    /* elementwise, reductions, shapes {d0,d1,d2,d3} */
    {"relu", build_unary4, fwd_relu, ref_relu_row, {2, 3, 4, 5}, NCHW},
    {"relu cl", build_unary4, fwd_relu, ref_relu_row, {2, 3, 4, 5}, NHWC},
    {"add", build_binary4, fwd_add, ref_add, {2, 3, 4, 5}, NCHW},
    {"add cl", build_binary4, fwd_add, ref_add, {2, 3, 4, 5}, NHWC},
    {"mul_scalar", build_mul_scalar, fwd_mul_scalar, ref_mul_scalar, {2, 3, 4, 5}, NCHW},
    {"sum", build_reduce, fwd_sum, ref_sum, {2, 3, 4, 5}, NCHW},
    {"mean cl", build_reduce, fwd_mean, ref_mean, {2, 3, 4, 5}, NHWC},
    {"flatten", build_flatten, fwd_flatten, ref_identity, {2, 3, 4, 5}, NCHW},
    {"flatten cl (copy)", build_flatten, fwd_flatten, ref_identity, {2, 3, 4, 5}, NHWC},
    {"flatten cl 1x1 (view)", build_flatten, fwd_flatten, ref_identity, {3, 8, 1, 1}, NHWC},
    {"reshape", build_reshape, fwd_reshape, ref_identity, {2, 3, 4, 5}, NCHW},
    {"reshape cl", build_reshape, fwd_reshape, ref_identity, {2, 3, 4, 5}, NHWC},
    {"cast f32->bf16", build_cast, fwd_cast, ref_identity, {2, 3, 4, 5}, NCHW},
    /* a whole small network {N, C, H, W, K, classes} */
    {"net conv-bn-relu-pool-gap-linear-ce", build_net, fwd_net, ref_net, {3, 3, 6, 7, 4, 5}, NCHW},
    {"net conv-bn-relu-pool-gap-linear-ce cl", build_net, fwd_net, ref_net, {3, 3, 6, 7, 4, 5}, NHWC},
};
#define N_ROWS (int)(sizeof GRAD_ROWS / sizeof GRAD_ROWS[0])

/* ======================================================================================
 * the driver
 * ==================================================================================== */

static dlt_tensor *mk(const double *v, const int64_t *shape, int nd, int32_t dtype, int32_t fmt) {
    return th_tensor_from_f64(g_ctx, v, shape, nd, dtype, fmt);
}

static double loss_of(const grad_row *r, const gcase *c, const double *u, double *y, int64_t ny) {
    r->ref(c, c->val, y);
    return ref_dot(u, y, ny);
}

/* The indices of input i checked by finite differences. */
static int64_t fd_points(int64_t n, int64_t k) {
    if (n <= FD_MAX_POINTS) return k;
    return (int64_t)((double)k * (double)n / FD_MAX_POINTS);
}

static dlt_status forward_backward(const grad_row *r, gcase *c, dlt_tensor *const *in,
                                   const double *u, dlt_tensor **out_keep) {
    dlt_tensor *y = NULL;
    dlt_status st = r->fwd(c, in, &y);
    if (st != DLT_OK) return st;
    int64_t ys[8];
    int32_t nd = dlt_tensor_shape(y, ys, 8);
    dlt_tensor *ut = mk(u, ys, nd, c->out_dtype, dlt_tensor_format(y));
    if (!ut) {
        dlt_tensor_release(y);
        return DLT_ERR_INTERNAL;
    }
    st = dlt_backward(y, ut);
    dlt_tensor_release(ut);
    if (out_keep) *out_keep = y;
    else dlt_tensor_release(y);
    return st;
}

static void run_row(int idx) {
    const grad_row *r = &GRAD_ROWS[idx];
    gcase c;
    memset(&c, 0, sizeof c);
    c.out_dtype = DLT_F32;
    c.fwd_tol = FWD_TOL;
    seed(1000 + (uint64_t)idx);
    r->build(&c, r->p, r->format);

    dlt_tensor *in[GRAD_MAX_IN] = {0};
    for (int i = 0; i < c.n_in; i++) {
        if (!c.val[i]) continue;
        in[i] = mk(c.val[i], c.shape[i], c.ndim[i], DLT_F32, c.format[i]);
        REQUIRE(in[i] != NULL, "%s: input %s: %s", r->name, c.in_name[i], dlt_last_error());
        if (c.diff[i]) CHECK_OK(dlt_tensor_set_requires_grad(in[i], 1));
    }
    if (c.targets) {
        int64_t n = c.n_targets;
        if (c.target_dtype == DLT_I64) {
            CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, &n, 1, 0, c.targets, (size_t)n * 8, &c.tgt));
        } else {
            int32_t *t32 = malloc((size_t)n * 4);
            for (int64_t i = 0; i < n; i++) t32[i] = (int32_t)c.targets[i];
            CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I32, &n, 1, 0, t32, (size_t)n * 4, &c.tgt));
            free(t32);
        }
    }

    /* upstream gradient, rounded to the output dtype so L matches what backward sees */
    const int64_t ny = prod(c.out_shape, c.out_ndim);
    double *u = rand_vals(ny, -1, 1), *y = malloc((size_t)ny * sizeof(double));
    {
        dlt_tensor *ut = mk(u, c.out_shape, c.out_ndim, c.out_dtype, DLT_FORMAT_CONTIGUOUS);
        float *ur = th_read_f32(ut);
        for (int64_t i = 0; i < ny; i++) u[i] = ur[i];
        free(ur);
        dlt_tensor_release(ut);
    }

    /* pass 1: forward (checked) and backward */
    dlt_tensor *out = NULL;
    CHECK_OK(forward_backward(r, &c, in, u, &out));
    {
        int64_t ys[8];
        int32_t nd = dlt_tensor_shape(out, ys, 8);
        int same = nd == c.out_ndim;
        for (int i = 0; same && i < nd; i++) same = ys[i] == c.out_shape[i];
        REQUIRE(same, "%s: output shape differs from the reference", r->name);
        float *yv = th_read_f32(out);
        r->ref(&c, c.val, y);
        double e = th_rel_err(yv, y, ny);
        CHECK(e <= c.fwd_tol, "%s: forward relative error %.3g", r->name, e);
        free(yv);
        dlt_tensor_release(out);
    }

    /* finite differences per differentiable input */
    double *fd[GRAD_MAX_IN] = {0};
    float *g1[GRAD_MAX_IN] = {0};
    for (int i = 0; i < c.n_in; i++) {
        if (!c.val[i] || !c.diff[i]) continue;
        const int64_t n = in_numel(&c, i), npts = n < FD_MAX_POINTS ? n : FD_MAX_POINTS;
        fd[i] = malloc((size_t)npts * sizeof(double));
        for (int64_t k = 0; k < npts; k++) {
            const int64_t j = fd_points(n, k);
            const double v = c.val[i][j];
            c.val[i][j] = v + FD_STEP;
            const double lp = loss_of(r, &c, u, y, ny);
            c.val[i][j] = v - FD_STEP;
            const double lm = loss_of(r, &c, u, y, ny);
            c.val[i][j] = v;
            fd[i][k] = (lp - lm) / (2 * FD_STEP);
        }
        dlt_tensor *g = dlt_tensor_grad(in[i]);
        CHECK(g != NULL, "%s: input %s has no gradient after backward", r->name, c.in_name[i]);
        if (!g) continue;
        CHECK(dlt_tensor_numel(g) == n && dlt_tensor_dtype(g) == DLT_F32,
              "%s: gradient of %s has %lld elements, dtype %d", r->name, c.in_name[i],
              (long long)dlt_tensor_numel(g), dlt_tensor_dtype(g));
        g1[i] = th_read_f32(g);
        REQUIRE(g1[i] != NULL, "%s: cannot read the gradient of %s", r->name, c.in_name[i]);
        float *sub = malloc((size_t)npts * sizeof(float));
        for (int64_t k = 0; k < npts; k++) sub[k] = g1[i][fd_points(n, k)];
        const double e = th_rel_err(sub, fd[i], npts);
        if (!(e <= GRAD_TOL)) {
            int64_t worst = 0;
            for (int64_t k = 1; k < npts; k++)
                if (fabs(sub[k] - fd[i][k]) > fabs(sub[worst] - fd[i][worst])) worst = k;
            th_fail(__FILE__, __LINE__,
                    "%s: d/d%s relative error %.3g > %g (worst element %lld: %.9g vs FD %.9g)",
                    r->name, c.in_name[i], e, GRAD_TOL, (long long)fd_points(n, worst),
                    (double)sub[worst], fd[i][worst]);
        }
        free(sub);
    }

    /* pass 2: leaf gradients accumulate to twice the first */
    CHECK_OK(forward_backward(r, &c, in, u, NULL));
    for (int i = 0; i < c.n_in; i++) {
        if (!g1[i]) continue;
        float *g2 = th_read_f32(dlt_tensor_grad(in[i]));
        const int64_t n = in_numel(&c, i);
        double *twice = malloc((size_t)n * sizeof(double));
        for (int64_t j = 0; j < n; j++) twice[j] = 2.0 * (double)g1[i][j];
        const double e = th_rel_err(g2, twice, n);
        CHECK(e <= 1e-6, "%s: second backward: d/d%s is not twice the first (rel err %.3g)",
              r->name, c.in_name[i], e);
        free(g2), free(twice);
    }

    int64_t live = -1;
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live));
    CHECK(live == 0, "%s: %lld tape nodes alive after backward", r->name, (long long)live);

    for (int i = 0; i < GRAD_MAX_IN; i++) {
        dlt_tensor_release(in[i]);
        free(c.val[i]), free(fd[i]), free(g1[i]);
    }
    dlt_tensor_release(c.tgt);
    free(c.targets), free(u), free(y);
}

/* one TAP case per row, named by the row */
static int g_row;
static void run_current_row(void) { run_row(g_row); }

/* Gradients never flow into integer targets or into mul_scalar's s; a leaf that no op
 * reads keeps no gradient. */
static void test_no_grad_paths(void) {
    double lv[6] = {0.1, 0.2, 0.3, -1, 0, 1}, sv = 2.0;
    int64_t ls[2] = {2, 3}, one = 1;
    dlt_tensor *l = mk(lv, ls, 2, DLT_F32, 0), *s = mk(&sv, &one, 1, DLT_F32, 0), *y = NULL, *z = NULL;
    CHECK_OK(dlt_tensor_set_requires_grad(l, 1));
    CHECK_OK(dlt_tensor_set_requires_grad(s, 1));
    CHECK_OK(dlt_mul_scalar(l, s, 1.0, &y));
    CHECK_OK(dlt_sum(y, &z));
    CHECK_OK(dlt_backward(z, NULL));
    float *g = th_read_f32(dlt_tensor_grad(l));
    for (int i = 0; i < 6; i++) CHECK(g[i] == 2.0f, "dl[%d] = %g", i, g[i]);
    free(g);
    CHECK(dlt_tensor_grad(s) == NULL, "s received a gradient");
    dlt_tensor_release(y), dlt_tensor_release(z), dlt_tensor_release(l), dlt_tensor_release(s);
}

/* Without grad mode nothing is recorded and backward refuses. */
static void test_grad_disabled(void) {
    double xv[4] = {1, 2, 3, 4};
    int64_t xs[2] = {2, 2};
    dlt_tensor *x = mk(xv, xs, 2, DLT_F32, 0), *y = NULL;
    CHECK_OK(dlt_tensor_set_requires_grad(x, 1));
    int32_t prev = -1;
    CHECK_OK(dlt_grad_set_enabled(g_ctx, 0, &prev));
    CHECK_OK(dlt_linear(x, x, NULL, &y));
    int64_t live = -1;
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live));
    CHECK(live == 0, "%lld nodes recorded with grad mode off", (long long)live);
    CHECK_STATUS(dlt_backward(y, x), DLT_ERR_INVALID_STATE);
    CHECK_OK(dlt_grad_set_enabled(g_ctx, prev, NULL));
    dlt_tensor_release(x), dlt_tensor_release(y);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    for (g_row = 0; g_row < N_ROWS; g_row++) th_run(run_current_row, GRAD_ROWS[g_row].name);
    RUN(test_no_grad_paths);
    RUN(test_grad_disabled);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
