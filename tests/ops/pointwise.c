/*
 * pointwise.c - rows of the unary ops and activations, referenced by libm in double
 * (written from PyTorch's definitions; the library's own formulas are not used).
 * ip[0] selects the op, fp[0] is its scalar.
 */
#include <math.h>

#include "op_common.h"

enum { NEG, EXP, LOG, SQRT, RSQRT, ABS, POW, ADDS, GELU, GELU_T, SILU, SIGM, TANH, SOFTP, LRELU };

static dlt_status fwd(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out) {
    dlt_tensor *x = in[0];
    switch (c->ip[0]) {
    case NEG: return dlt_neg(x, out);
    case EXP: return dlt_exp(x, out);
    case LOG: return dlt_log(x, out);
    case SQRT: return dlt_sqrt(x, out);
    case RSQRT: return dlt_rsqrt(x, out);
    case ABS: return dlt_abs(x, out);
    case POW: return dlt_pow_scalar(x, c->fp[0], out);
    case ADDS: return dlt_add_scalar(x, c->fp[0], out);
    case GELU: return dlt_gelu(x, DLT_GELU_NONE, out);
    case GELU_T: return dlt_gelu(x, DLT_GELU_TANH, out);
    case SILU: return dlt_silu(x, out);
    case SIGM: return dlt_sigmoid(x, out);
    case TANH: return dlt_tanh(x, out);
    case LRELU: return dlt_leaky_relu(x, c->fp[0], out);
    default: return dlt_softplus(x, out);
    }
}

static double f(int64_t op, double x, double a) {
    switch (op) {
    case NEG: return -x;
    case EXP: return exp(x);
    case LOG: return log(x);
    case SQRT: return sqrt(x);
    case RSQRT: return 1.0 / sqrt(x);
    case ABS: return fabs(x);
    case POW: return pow(x, a);
    case ADDS: return x + a;
    case GELU: return x * 0.5 * erfc(-x / sqrt(2.0));
    case GELU_T: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * pow(x, 3.0))));
    case SILU: return x / (1.0 + exp(-x));
    case SIGM: return 1.0 / (1.0 + exp(-x));
    case TANH: return tanh(x);
    case LRELU: return x >= 0.0 ? x : a * x; /* torch.nn.functional.leaky_relu */
    default: return log(1.0 + exp(x));
    }
}

static void ref(const ot_case *c, double *const *in, double *out) {
    const int64_t n = ot_out_numel(c);
    for (int64_t i = 0; i < n; i++) out[i] = f(c->ip[0], in[0][i], c->fp[0]);
}

#define R(name, op, a, lo, hi, spaced)                                                         \
    {name, fwd, ref, 1, {{OT_X, 3, {2, 3, 5}, lo, hi, spaced}}, 3, {2, 3, 5}, -1, {op}, {a}}
#define RV(name, op, a, lo, hi, spaced)                                                        \
    {name, fwd, ref, 1, {{OT_X, 3, {2, 4, 8}, lo, hi, spaced}}, 3, {2, 4, 8}, -1, {op}, {a}}
static const ot_case CASES[] = {
    R("neg", NEG, 0, -1, 1, 0),
    R("exp", EXP, 0, -3, 3, 0),
    R("log", LOG, 0, 0.1, 4, 0),
    R("sqrt", SQRT, 0, 0.1, 4, 0),
    R("rsqrt", RSQRT, 0, 0.2, 4, 0),
    R("abs (no zero)", ABS, 0, -1, 1, 1),
    R("pow 2.5", POW, 2.5, 0.2, 2, 0),
    R("pow 3 of signed", POW, 3.0, -1.5, 1.5, 0),
    R("pow 0", POW, 0.0, 0.2, 2, 0),
    R("add_scalar", ADDS, -0.75, -1, 1, 0),
    R("gelu erf", GELU, 0, -4, 4, 0),
    R("gelu tanh", GELU_T, 0, -4, 4, 0),
    R("silu", SILU, 0, -5, 5, 0),
    R("sigmoid", SIGM, 0, -6, 6, 0),
    R("tanh", TANH, 0, -3, 3, 0),
    R("softplus", SOFTP, 0, -8, 8, 0),
    R("softplus large", SOFTP, 0, 19, 30, 0),
    /* leaky_relu: spaced values on both sides of its kink at 0, never on it */
    R("leaky_relu 0.01", LRELU, 0.01, -0.25, 0.25, 1),
    R("leaky_relu 0.2", LRELU, 0.2, -0.25, 0.25, 1),
    R("leaky_relu negative slope", LRELU, -0.5, -0.25, 0.25, 1),
    {"leaky_relu 1-D", fwd, ref, 1, {{OT_X, 1, {37}, -0.3, 0.3, 1}}, 1, {37}, -1, {LRELU}, {0.01}},
    {"gelu tanh 1-D", fwd, ref, 1, {{OT_X, 1, {37}, -2, 2, 0}}, 1, {37}, -1, {GELU_T}},
    {"exp empty", fwd, ref, 1, {{OT_X, 2, {0, 4}, 0, 0, 0}}, 2, {0, 4}, -1, {EXP}},
    /* 64 elements: whole 16-byte vectors in every dtype, so CUDA runs its vector kernels,
     * where these ops are compiled in (and softplus the run-time op), forward and backward */
    RV("gelu erf, vectors", GELU, 0, -4, 4, 0),
    RV("gelu tanh, vectors", GELU_T, 0, -4, 4, 0),
    RV("silu, vectors", SILU, 0, -5, 5, 0),
    RV("sigmoid, vectors", SIGM, 0, -6, 6, 0),
    RV("tanh, vectors", TANH, 0, -3, 3, 0),
    RV("leaky_relu 0.2, vectors", LRELU, 0.2, -0.25, 0.25, 1),
    RV("softplus, vectors", SOFTP, 0, -8, 8, 0),
    /* integers (no gradient; the case dtype does not apply): exact in their dtype, or
     * promoted to f32 */
    {"neg i64", fwd, ref, 1, {{OT_I64, 2, {3, 7}, -1000, 1000, 0}}, 2, {3, 7}, DLT_I64, {NEG}, {0}, 0,
     OT_NO_GRAD | OT_F32_ONLY},
    {"abs i32", fwd, ref, 1, {{OT_I32, 2, {3, 7}, -1000, 1000, 0}}, 2, {3, 7}, DLT_I32, {ABS}, {0}, 0,
     OT_NO_GRAD | OT_F32_ONLY},
    {"add_scalar -3 to i64", fwd, ref, 1, {{OT_I64, 1, {21}, -1000, 1000, 0}}, 1, {21}, DLT_I64, {ADDS}, {-3.0}, 0,
     OT_NO_GRAD | OT_F32_ONLY},
    {"exp of i32 promotes", fwd, ref, 1, {{OT_I32, 1, {21}, -4, 4, 0}}, 1, {21}, DLT_F32, {EXP}, {0}, 0,
     OT_NO_GRAD | OT_F32_ONLY},
};

/* integers: neg, abs and whole-number adds exact in their dtype; the rest promote to f32 */
static dlt_status e_int(dlt_ctx *ctx, int *out_touched) {
    *out_touched = 0;
    const int64_t n = 3;
    const int32_t v[3] = {-5, 0, 7};
    dlt_tensor *x = NULL, *ng = NULL, *ab = NULL, *ad = NULL, *fr = NULL, *ex = NULL;
    dlt_status st = dlt_tensor_from_host(ctx, DLT_I32, &n, 1, 0, v, sizeof v, &x);
    if (st == DLT_OK) st = dlt_neg(x, &ng);
    if (st == DLT_OK) st = dlt_abs(x, &ab);
    if (st == DLT_OK) st = dlt_add_scalar(x, 2.0, &ad);
    if (st == DLT_OK) st = dlt_add_scalar(x, 0.5, &fr);
    if (st == DLT_OK) st = dlt_exp(x, &ex);
    int32_t a[3], b[3], c[3];
    float d[3], e[3];
    if (st == DLT_OK && (dlt_tensor_dtype(ng) != DLT_I32 || dlt_tensor_dtype(ad) != DLT_I32 ||
                         dlt_tensor_dtype(fr) != DLT_F32 || dlt_tensor_dtype(ex) != DLT_F32))
        st = DLT_ERR_INTERNAL;
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(ng, a, sizeof a);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(ab, b, sizeof b);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(ad, c, sizeof c);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(fr, d, sizeof d);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(ex, e, sizeof e);
    if (st == DLT_OK && !(a[0] == 5 && a[2] == -7 && b[0] == 5 && b[1] == 0 && c[0] == -3 && c[2] == 9 &&
                          d[0] == -4.5f && e[1] == 1.0f && fabsf(e[2] - 1096.6332f) < 1e-3f))
        st = DLT_ERR_INTERNAL;
    dlt_tensor *all[] = {x, ng, ab, ad, fr, ex};
    for (int i = 0; i < 6; i++) dlt_tensor_release(all[i]);
    return st;
}
static dlt_status e_gelu_mode(dlt_ctx *ctx, int *out_touched) {
    const int64_t s[1] = {3};
    dlt_tensor *x = ot_zeros(ctx, DLT_F32, s, 1), *o = OT_SENTINEL;
    dlt_status st = dlt_gelu(x, 7, &o);
    OT_TOUCHED(o);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_null(dlt_ctx *ctx, int *out_touched) {
    (void)ctx;
    dlt_tensor *o = OT_SENTINEL;
    dlt_status st = dlt_tanh(NULL, &o);
    OT_TOUCHED(o);
    return st;
}
/* leaky_relu at its kink and on NaN, exactly (PyTorch: x > 0 ? x : slope x, gradient
 * x > 0 ? 1 : slope, so 0 and NaN take the slope's side) */
static dlt_status e_lrelu_exact(dlt_ctx *ctx, int *out_touched) {
    *out_touched = 0;
    const int64_t n = 5;
    const float v[5] = {-2.0f, -0.0f, 0.0f, 3.0f, NAN}, ones[5] = {1, 1, 1, 1, 1};
    dlt_tensor *x = NULL, *g = NULL, *y = NULL;
    float out[5], dx[5];
    dlt_status st = dlt_tensor_from_host(ctx, DLT_F32, &n, 1, 0, v, sizeof v, &x);
    if (st == DLT_OK) st = dlt_tensor_from_host(ctx, DLT_F32, &n, 1, 0, ones, sizeof ones, &g);
    if (st == DLT_OK) st = dlt_tensor_set_requires_grad(x, 1);
    if (st == DLT_OK) st = dlt_leaky_relu(x, 0.125, &y);
    if (st == DLT_OK) st = dlt_backward(y, g);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(y, out, sizeof out);
    if (st == DLT_OK && !dlt_tensor_grad(x)) st = DLT_ERR_INTERNAL;
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(dlt_tensor_grad(x), dx, sizeof dx);
    if (st == DLT_OK && !(out[0] == -0.25f && out[1] == 0.0f && signbit(out[1]) && out[2] == 0.0f &&
                          !signbit(out[2]) && out[3] == 3.0f && isnan(out[4])))
        st = DLT_ERR_INTERNAL;
    if (st == DLT_OK && !(dx[0] == 0.125f && dx[1] == 0.125f && dx[2] == 0.125f && dx[3] == 1.0f &&
                          dx[4] == 0.125f))
        st = DLT_ERR_INTERNAL;
    dlt_tensor_release(y);
    dlt_tensor_release(g);
    dlt_tensor_release(x);
    return st;
}
static dlt_status e_lrelu_null(dlt_ctx *ctx, int *out_touched) {
    (void)ctx;
    dlt_tensor *o = OT_SENTINEL;
    dlt_status st = dlt_leaky_relu(NULL, 0.01, &o);
    OT_TOUCHED(o);
    return st;
}
static const ot_err ERRORS[] = {
    {"integers: neg/abs/whole adds exact, fractions and exp promote to f32", e_int, DLT_OK},
    {"gelu with an unknown approximation", e_gelu_mode, DLT_ERR_INVALID_ARGUMENT},
    {"tanh of NULL", e_null, DLT_ERR_NULL_POINTER},
    {"leaky_relu at 0, -0 and NaN: values and gradients exact", e_lrelu_exact, DLT_OK},
    {"leaky_relu of NULL", e_lrelu_null, DLT_ERR_NULL_POINTER},
};

OT_STEM(pointwise, CASES, ERRORS);
