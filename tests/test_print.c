/*
 * test_print.c - dlt_tensor_snprint against PyTorch's repr.
 *
 * The expected strings are what PyTorch 1.13 printed for the same values: the table comes
 * from tests/gen_print_cases.py (run once with torch; the test itself needs no Python), and
 * the values are exact in float32 so both sides print the same numbers. Cases: fixed, integer
 * and scientific modes, NaN/inf (a negative NaN prints "nan" as in Python), fp16/bf16 and
 * integer dtypes with their suffixes, line wrapping at 80 columns, summarised 1-D/2-D/3-D
 * tensors (above 1000 elements), 4-D nesting, 0-D, empty tensors, a suffix wrapped onto its
 * own line; then channels-last (logical order), requires_grad/grad_fn, truncation and the
 * size query, errors, and a CUDA tensor (device suffix; skipped without a GPU).
 */
#include "harness.h"

enum { G_NONE = 0, G_LIN, G_MOD, G_INT };

typedef struct print_case {
    const char *name;
    int32_t dtype;
    int32_t ndim;
    int64_t shape[4];
    const float *lit; /* literal values, or NULL: generated */
    int gen;          /* G_LIN: a*i + b; G_MOD: ((37 i) mod 101)/8 - 6; G_INT: (7919 i) mod 100003 - 50000 */
    double a, b;
    const char *expected;
} print_case;

static const print_case cases[] = {
    {"mixed_2x3", DLT_F32, 2, {2, 3}, (const float[]){0.1940f, 2.1614f, -0.1721f, 0.8491f, -1.9244f, 0.6530f}, 0, 0, 0,
     "tensor([[ 0.1940,  2.1614, -0.1721],\n"
     "        [ 0.8491, -1.9244,  0.6530]])"},
    {"int_valued", DLT_F32, 1, {3}, (const float[]){1, 2, 3}, 0, 0, 0,
     "tensor([1., 2., 3.])"},
    {"zeros", DLT_F32, 1, {3}, (const float[]){0, 0, 0}, 0, 0, 0,
     "tensor([0., 0., 0.])"},
    {"sci_small", DLT_F32, 1, {3}, (const float[]){1e-5f, 1.0f, 123456.0f}, 0, 0, 0,
     "tensor([1.0000e-05, 1.0000e+00, 1.2346e+05])"},
    {"sci_int", DLT_F32, 1, {2}, (const float[]){1.0f, 1e9f}, 0, 0, 0,
     "tensor([1.0000e+00, 1.0000e+09])"},
    {"nonfinite", DLT_F32, 1, {4}, (const float[]){NAN, INFINITY, -INFINITY, 1.5f}, 0, 0, 0,
     "tensor([   nan,    inf,   -inf, 1.5000])"},
    {"neg_nan", DLT_F32, 1, {2}, (const float[]){-NAN, 2.0f}, 0, 0, 0,
     "tensor([nan, 2.])"},
    {"only_nonfinite", DLT_F32, 1, {3}, (const float[]){NAN, 0.0f, -INFINITY}, 0, 0, 0,
     "tensor([nan, 0., -inf])"},
    {"neg_cols", DLT_F32, 2, {2, 2}, (const float[]){-1.0f, 10.5f, 100.25f, -1000.125f}, 0, 0, 0,
     "tensor([[-1.0000e+00,  1.0500e+01],\n"
     "        [ 1.0025e+02, -1.0001e+03]])"},
    {"f16", DLT_F16, 1, {4}, (const float[]){1.0f / 3.0f, 0.5f, -2.75f, 100.0f}, 0, 0, 0,
     "tensor([  0.3333,   0.5000,  -2.7500, 100.0000], dtype=dltrain.float16)"},
    {"bf16", DLT_BF16, 1, {4}, (const float[]){1.0f / 3.0f, 0.5f, -2.75f, 100.0f}, 0, 0, 0,
     "tensor([  0.3340,   0.5000,  -2.7500, 100.0000], dtype=dltrain.bfloat16)"},
    {"wrap_30", DLT_F32, 1, {30}, NULL, G_LIN, 1.25, -7.0,
     "tensor([-7.0000, -5.7500, -4.5000, -3.2500, -2.0000, -0.7500,  0.5000,  1.7500,\n"
     "         3.0000,  4.2500,  5.5000,  6.7500,  8.0000,  9.2500, 10.5000, 11.7500,\n"
     "        13.0000, 14.2500, 15.5000, 16.7500, 18.0000, 19.2500, 20.5000, 21.7500,\n"
     "        23.0000, 24.2500, 25.5000, 26.7500, 28.0000, 29.2500])"},
    {"sum_1d", DLT_F32, 1, {2000}, NULL, G_LIN, 0.5, 0.0,
     "tensor([0.0000e+00, 5.0000e-01, 1.0000e+00,  ..., 9.9850e+02, 9.9900e+02,\n"
     "        9.9950e+02])"},
    {"sum_3d", DLT_F32, 3, {20, 30, 4}, NULL, G_MOD, 0, 0,
     "tensor([[[-6.0000, -1.3750,  3.2500, -4.7500],\n"
     "         [-0.1250,  4.5000, -3.5000,  1.1250],\n"
     "         [ 5.7500, -2.2500,  2.3750, -5.6250],\n"
     "         ...,\n"
     "         [ 1.1250,  5.7500, -2.2500,  2.3750],\n"
     "         [-5.6250, -1.0000,  3.6250, -4.3750],\n"
     "         [ 0.2500,  4.8750, -3.1250,  1.5000]],\n"
     "\n"
     "        [[ 6.1250, -1.8750,  2.7500, -5.2500],\n"
     "         [-0.6250,  4.0000, -4.0000,  0.6250],\n"
     "         [ 5.2500, -2.7500,  1.8750,  6.5000],\n"
     "         ...,\n"
     "         [ 0.6250,  5.2500, -2.7500,  1.8750],\n"
     "         [ 6.5000, -1.5000,  3.1250, -4.8750],\n"
     "         [-0.2500,  4.3750, -3.6250,  1.0000]],\n"
     "\n"
     "        [[ 5.6250, -2.3750,  2.2500, -5.7500],\n"
     "         [-1.1250,  3.5000, -4.5000,  0.1250],\n"
     "         [ 4.7500, -3.2500,  1.3750,  6.0000],\n"
     "         ...,\n"
     "         [ 0.1250,  4.7500, -3.2500,  1.3750],\n"
     "         [ 6.0000, -2.0000,  2.6250, -5.3750],\n"
     "         [-0.7500,  3.8750, -4.1250,  0.5000]],\n"
     "\n"
     "        ...,\n"
     "\n"
     "        [[-1.8750,  2.7500, -5.2500, -0.6250],\n"
     "         [ 4.0000, -4.0000,  0.6250,  5.2500],\n"
     "         [-2.7500,  1.8750,  6.5000, -1.5000],\n"
     "         ...,\n"
     "         [ 5.2500, -2.7500,  1.8750,  6.5000],\n"
     "         [-1.5000,  3.1250, -4.8750, -0.2500],\n"
     "         [ 4.3750, -3.6250,  1.0000,  5.6250]],\n"
     "\n"
     "        [[-2.3750,  2.2500, -5.7500, -1.1250],\n"
     "         [ 3.5000, -4.5000,  0.1250,  4.7500],\n"
     "         [-3.2500,  1.3750,  6.0000, -2.0000],\n"
     "         ...,\n"
     "         [ 4.7500, -3.2500,  1.3750,  6.0000],\n"
     "         [-2.0000,  2.6250, -5.3750, -0.7500],\n"
     "         [ 3.8750, -4.1250,  0.5000,  5.1250]],\n"
     "\n"
     "        [[-2.8750,  1.7500,  6.3750, -1.6250],\n"
     "         [ 3.0000, -5.0000, -0.3750,  4.2500],\n"
     "         [-3.7500,  0.8750,  5.5000, -2.5000],\n"
     "         ...,\n"
     "         [ 4.2500, -3.7500,  0.8750,  5.5000],\n"
     "         [-2.5000,  2.1250, -5.8750, -1.2500],\n"
     "         [ 3.3750, -4.6250,  0.0000,  4.6250]]])"},
    {"sum_7x200", DLT_F32, 2, {7, 200}, NULL, G_MOD, 0, 0,
     "tensor([[-6.0000, -1.3750,  3.2500,  ..., -3.8750,  0.7500,  5.3750],\n"
     "        [-2.6250,  2.0000, -6.0000,  ..., -0.5000,  4.1250, -3.8750],\n"
     "        [ 0.7500,  5.3750, -2.6250,  ...,  2.8750, -5.1250, -0.5000],\n"
     "        ...,\n"
     "        [-5.1250, -0.5000,  4.1250,  ..., -3.0000,  1.6250,  6.2500],\n"
     "        [-1.7500,  2.8750, -5.1250,  ...,  0.3750,  5.0000, -3.0000],\n"
     "        [ 1.6250,  6.2500, -1.7500,  ...,  3.7500, -4.2500,  0.3750]])"},
    {"sum_6x200", DLT_F32, 2, {6, 200}, NULL, G_MOD, 0, 0,
     "tensor([[-6.0000, -1.3750,  3.2500,  ..., -3.8750,  0.7500,  5.3750],\n"
     "        [-2.6250,  2.0000, -6.0000,  ..., -0.5000,  4.1250, -3.8750],\n"
     "        [ 0.7500,  5.3750, -2.6250,  ...,  2.8750, -5.1250, -0.5000],\n"
     "        [ 4.1250, -3.8750,  0.7500,  ...,  6.2500, -1.7500,  2.8750],\n"
     "        [-5.1250, -0.5000,  4.1250,  ..., -3.0000,  1.6250,  6.2500],\n"
     "        [-1.7500,  2.8750, -5.1250,  ...,  0.3750,  5.0000, -3.0000]])"},
    {"dims_4", DLT_F32, 4, {2, 2, 2, 3}, NULL, G_MOD, 0, 0,
     "tensor([[[[-6.0000, -1.3750,  3.2500],\n"
     "          [-4.7500, -0.1250,  4.5000]],\n"
     "\n"
     "         [[-3.5000,  1.1250,  5.7500],\n"
     "          [-2.2500,  2.3750, -5.6250]]],\n"
     "\n"
     "\n"
     "        [[[-1.0000,  3.6250, -4.3750],\n"
     "          [ 0.2500,  4.8750, -3.1250]],\n"
     "\n"
     "         [[ 1.5000,  6.1250, -1.8750],\n"
     "          [ 2.7500, -5.2500, -0.6250]]]])"},
    {"wrap_edge_2x10", DLT_F32, 2, {2, 10}, NULL, G_LIN, 0.25, 0.0,
     "tensor([[0.0000, 0.2500, 0.5000, 0.7500, 1.0000, 1.2500, 1.5000, 1.7500, 2.0000,\n"
     "         2.2500],\n"
     "        [2.5000, 2.7500, 3.0000, 3.2500, 3.5000, 3.7500, 4.0000, 4.2500, 4.5000,\n"
     "         4.7500]])"},
    {"suffix_wrap", DLT_F16, 1, {10}, NULL, G_LIN, 1.5, 0.25,
     "tensor([ 0.2500,  1.7500,  3.2500,  4.7500,  6.2500,  7.7500,  9.2500, 10.7500,\n"
     "        12.2500, 13.7500], dtype=dltrain.float16)"},
    {"scalar", DLT_F32, 0, {0}, (const float[]){2.5f}, 0, 0, 0,
     "tensor(2.5000)"},
    {"empty_1d", DLT_F32, 1, {0}, (const float[]){0}, 0, 0, 0,
     "tensor([])"},
    {"empty_2d", DLT_F32, 2, {2, 0}, (const float[]){0}, 0, 0, 0,
     "tensor([], size=(2, 0))"},
    {"empty_i64", DLT_I64, 2, {0, 3}, (const float[]){0}, 0, 0, 0,
     "tensor([], size=(0, 3), dtype=dltrain.int64)"},
    {"empty_i32", DLT_I32, 1, {0}, (const float[]){0}, 0, 0, 0,
     "tensor([], dtype=dltrain.int32)"},
    {"int32", DLT_I32, 2, {2, 2}, (const float[]){1, -20, 300, 4}, 0, 0, 0,
     "tensor([[  1, -20],\n"
     "        [300,   4]], dtype=dltrain.int32)"},
    {"int64", DLT_I64, 1, {2}, (const float[]){5, 6}, 0, 0, 0,
     "tensor([5, 6])"},
    {"uint8", DLT_U8, 1, {3}, (const float[]){0, 7, 255}, 0, 0, 0,
     "tensor([  0,   7, 255], dtype=dltrain.uint8)"},
    {"int_sum", DLT_I32, 1, {1500}, NULL, G_INT, 0, 0,
     "tensor([-50000, -42081, -34162,  ...,   4389,  12308,  20227],\n"
     "       dtype=dltrain.int32)"},
};

static float gen_value(const print_case *c, int64_t i) {
    switch (c->gen) {
    case G_LIN: return (float)(c->a * (double)i + c->b);
    case G_MOD: return (float)((double)((i * 37) % 101) / 8.0 - 6.0);
    case G_INT: return (float)((i * 7919) % 100003 - 50000);
    default: return c->lit[i];
    }
}

/* The case's tensor: f32 values made on the host, cast to the case's dtype. */
static dlt_tensor *make(dlt_ctx *ctx, const print_case *c) {
    int64_t n = 1;
    for (int32_t d = 0; d < c->ndim; d++) n *= c->shape[d];
    float *v = malloc((size_t)(n ? n : 1) * sizeof(float));
    REQUIRE(v != NULL);
    for (int64_t i = 0; i < n; i++) v[i] = gen_value(c, i);
    dlt_tensor *t = NULL, *cast = NULL;
    dlt_status st = dlt_tensor_from_host(ctx, DLT_F32, c->shape, c->ndim, DLT_FORMAT_CONTIGUOUS, v,
                                         (size_t)n * sizeof(float), &t);
    free(v);
    CHECK_OK(st);
    if (c->dtype == DLT_F32) return t;
    st = dlt_tensor_cast(t, c->dtype, &cast);
    dlt_tensor_release(t);
    CHECK_OK(st);
    return cast;
}

/* snprint into a fresh buffer; the caller frees. */
static char *print_str(const dlt_tensor *t) {
    size_t need = 0;
    CHECK_OK(dlt_tensor_snprint(t, NULL, 0, &need));
    REQUIRE(need > 0);
    char *s = malloc(need);
    REQUIRE(s != NULL);
    size_t need2 = 0;
    CHECK_OK(dlt_tensor_snprint(t, s, need, &need2));
    CHECK(need2 == need, "%zu vs %zu", need2, need);
    CHECK(strlen(s) + 1 == need, "strlen %zu, needed %zu", strlen(s), need);
    return s;
}

static void check_text(const char *name, const char *got, const char *want) {
    if (strcmp(got, want) == 0) return;
    th_fail(__FILE__, __LINE__, "%s: got\n%s\n# expected\n%s", name, got, want);
}

static void test_pytorch_strings(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dlt_tensor *t = make(ctx, &cases[i]);
        char *s = print_str(t);
        check_text(cases[i].name, s, cases[i].expected);
        free(s);
        dlt_tensor_release(t);
    }
    dlt_ctx_destroy(ctx);
}

static const print_case *find_case(const char *name) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(cases[i].name, name)) return &cases[i];
    return NULL;
}

/* A channels-last tensor prints its logical order, as the contiguous one does. */
static void test_channels_last(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    const print_case *c = find_case("dims_4");
    REQUIRE(c != NULL);
    dlt_tensor *t = make(ctx, c), *cl = NULL;
    CHECK_OK(dlt_tensor_to_format(t, DLT_FORMAT_CHANNELS_LAST, &cl));
    char *s = print_str(cl);
    check_text("dims_4 channels-last", s, c->expected);
    free(s);
    dlt_tensor_release(cl);
    dlt_tensor_release(t);
    dlt_ctx_destroy(ctx);
}

static void test_grad_suffixes(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    const float v[2] = {1.0f, 2.0f};
    const int64_t shape[1] = {2};
    dlt_tensor *t = th_tensor_f32(ctx, v, shape, 1), *y = NULL;
    CHECK_OK(dlt_tensor_set_requires_grad(t, 1));
    char *s = print_str(t);
    check_text("leaf", s, "tensor([1., 2.], requires_grad=True)"); /* PyTorch's text */
    free(s);
    CHECK_OK(dlt_relu(t, &y));
    s = print_str(y); /* PyTorch: grad_fn=<ReluBackward0>; ours names the op */
    check_text("relu result", s, "tensor([1., 2.], grad_fn=<relu>)");
    free(s);
    dlt_tensor_release(y);
    dlt_tensor_release(t);
    dlt_ctx_destroy(ctx);
}

/* snprintf's contract: n-1 bytes and a NUL, *needed the whole size; n == 0 writes nothing. */
static void test_truncation(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    const print_case *c = find_case("mixed_2x3");
    REQUIRE(c != NULL);
    dlt_tensor *t = make(ctx, c);
    const size_t full = strlen(c->expected) + 1;
    char buf[16];
    size_t need = 0;
    memset(buf, 'x', sizeof buf);
    CHECK_OK(dlt_tensor_snprint(t, buf, 10, &need));
    CHECK(need == full, "needed %zu, expected %zu", need, full);
    CHECK(strcmp(buf, "tensor([[") == 0, "truncated text '%s'", buf);
    CHECK(buf[10] == 'x', "wrote past n");
    memset(buf, 'x', sizeof buf);
    CHECK_OK(dlt_tensor_snprint(t, buf, 0, &need)); /* buf not NULL, n 0: untouched */
    CHECK(buf[0] == 'x' && need == full);
    CHECK_OK(dlt_tensor_snprint(t, buf, 1, NULL)); /* needed may be NULL */
    CHECK(buf[0] == '\0');
    dlt_tensor_release(t);
    dlt_ctx_destroy(ctx);
}

static void test_errors(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    char buf[8] = "keep";
    size_t need = 77;
    CHECK_STATUS(dlt_tensor_snprint(NULL, buf, sizeof buf, &need), DLT_ERR_NULL_POINTER);
    CHECK(strstr(dlt_last_error(), "dlt_tensor_snprint") != NULL, "%s", dlt_last_error());
    CHECK(strcmp(buf, "keep") == 0 && need == 77, "changed on failure");
    const float v[1] = {1.0f};
    const int64_t shape[1] = {1};
    dlt_tensor *t = th_tensor_f32(ctx, v, shape, 1);
    CHECK_STATUS(dlt_tensor_snprint(t, NULL, 5, &need), DLT_ERR_NULL_POINTER);
    CHECK(strstr(dlt_last_error(), "'buf'") != NULL, "%s", dlt_last_error());
    CHECK(need == 77, "needed changed on failure");
    dlt_tensor_release(t);
    dlt_ctx_destroy(ctx);
}

static void test_cuda_device_suffix(void) {
    CUDA_CTX_OR_SKIP(ctx);
    const float v[2] = {1.0f, 2.0f};
    const int64_t shape[1] = {2};
    dlt_tensor *t = th_tensor_f32(ctx, v, shape, 1);
    char *s = print_str(t);
    check_text("cuda", s, "tensor([1., 2.], device='cuda:0')");
    free(s);
    dlt_tensor_release(t);
    dlt_ctx_destroy(ctx);
}

int main(void) {
    RUN(test_pytorch_strings);
    RUN(test_channels_last);
    RUN(test_grad_suffixes);
    RUN(test_truncation);
    RUN(test_errors);
    RUN(test_cuda_device_suffix);
    return th_done();
}
