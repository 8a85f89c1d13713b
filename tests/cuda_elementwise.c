/*
 * cuda_elementwise.c - the elementwise kernels that promise the CPU's bits, checked bit for
 * bit against the CPU backend on the same input bytes:
 *  - binary ops on contiguous float operands of mixed dtypes (cuda/binary.cu's flat kernel:
 *    dtypes compiled in, 16/8-byte packs, a scalar tail, a scalar loop when a view starts
 *    off its pack's alignment). Both sides round the exact result once to float, then to
 *    y's dtype (alpha is +-1 here: the CPU's double math differs from fp32 only in
 *    alpha * a * b);
 *  - casts between f32, f16 and bf16 (cuda/elementwise.cu's 16-byte conversion with its
 *    scalar tail; views starting off a 16-byte boundary take the per-element kernel), on
 *    values over every f16/bf16 range: subnormal, normal, overflow, +-0, +-inf.
 * Operands are 1-D views from dlt_narrow at element offsets, so the offset reaches the kernel
 * in the data pointer. Sizes leave vector tails of every length, none, and only a tail.
 * Without a CUDA device every case skips; DLT_CUDA_OPS_SELFTEST=1 compares the CPU backend
 * with itself (the program checked without a GPU).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "splitmix.h"

static dlt_ctx *g_cpu, *g_dev;
static char g_no_dev[256];

/* n + 8 values on the CPU in dtype: uniform in [lo, hi) */
static dlt_tensor *cpu_uniform(int32_t dtype, int64_t n, double lo, double hi) {
    float *v = malloc((size_t)n * sizeof *v);
    REQUIRE(v != NULL);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(lo + (hi - lo) * urand());
    dlt_tensor *f32 = NULL, *t = NULL;
    CHECK_OK(dlt_tensor_from_host(g_cpu, DLT_F32, &n, 1, DLT_FORMAT_CONTIGUOUS, v, (size_t)n * sizeof *v, &f32));
    free(v);
    if (dtype == DLT_F32) return f32;
    CHECK_OK(dlt_tensor_cast(f32, dtype, &t));
    dlt_tensor_release(f32);
    return t;
}

static dlt_status binop(int op, dlt_tensor *a, dlt_tensor *b, dlt_tensor **y) {
    switch (op) {
    case 0: return dlt_add(a, b, y);
    case 1: return dlt_sub(a, b, y);
    case 2: return dlt_mul(a, b, y);
    default: return dlt_div(a, b, y);
    }
}

static void test_binary_mixed_bitwise(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    static const int32_t PAIRS[][2] = {{DLT_F32, DLT_BF16}, {DLT_BF16, DLT_F32}, {DLT_F32, DLT_F16},
                                       {DLT_F16, DLT_BF16}, {DLT_BF16, DLT_BF16}, {DLT_F16, DLT_F32}};
    static const int64_t SIZES[] = {1000003, 16 * 768, 13}; /* tails of 3 and 5; none; all tail */
    static const int64_t OFFS[][2] = {{0, 0}, {1, 0}, {0, 3}, {8, 8}};
    static const char *const OPS[] = {"add", "sub", "mul", "div"};
    seed(0xb1a7u);
    for (size_t p = 0; p < sizeof PAIRS / sizeof PAIRS[0]; p++)
        for (size_t z = 0; z < sizeof SIZES / sizeof SIZES[0]; z++) {
            const int64_t n = SIZES[z];
            dlt_tensor *base[2][2] = {{NULL, NULL}, {NULL, NULL}}; /* [cpu, device][a, b] */
            base[0][0] = cpu_uniform(PAIRS[p][0], n + 8, -2, 2);
            base[0][1] = cpu_uniform(PAIRS[p][1], n + 8, 0.25, 2); /* divisors */
            CHECK_OK(dlt_tensor_to_ctx(base[0][0], g_dev, &base[1][0]));
            CHECK_OK(dlt_tensor_to_ctx(base[0][1], g_dev, &base[1][1]));
            for (size_t o = 0; o < sizeof OFFS / sizeof OFFS[0]; o++)
                for (int op = 0; op < 4; op++) {
                    dlt_tensor *v[2][2] = {{NULL, NULL}, {NULL, NULL}}, *y[2] = {NULL, NULL};
                    for (int k = 0; k < 2; k++) {
                        CHECK_OK(dlt_narrow(base[k][0], 0, OFFS[o][0], n, &v[k][0]));
                        CHECK_OK(dlt_narrow(base[k][1], 0, OFFS[o][1], n, &v[k][1]));
                        CHECK_OK(binop(op, v[k][0], v[k][1], &y[k]));
                    }
                    const int64_t bad = th_diff_bits(y[0], y[1]);
                    CHECK(bad == 0, "%s %s %s, n %lld, offsets %lld/%lld -> %s: %lld elements differ",
                          dlt_dtype_name(PAIRS[p][0]), OPS[op], dlt_dtype_name(PAIRS[p][1]), (long long)n,
                          (long long)OFFS[o][0], (long long)OFFS[o][1], dlt_dtype_name(dlt_tensor_dtype(y[0])),
                          (long long)bad);
                    for (int k = 0; k < 2; k++) {
                        dlt_tensor_release(y[k]);
                        dlt_tensor_release(v[k][0]);
                        dlt_tensor_release(v[k][1]);
                    }
                }
            for (int k = 0; k < 2; k++) dlt_tensor_release(base[k][0]), dlt_tensor_release(base[k][1]);
        }
    CHECK_OK(dlt_ctx_check(g_dev));
}

static void test_cast_bitwise(void) {
    if (!g_dev) SKIP("%s", g_no_dev);
    static const int32_t PAIRS[][2] = {{DLT_F32, DLT_BF16}, {DLT_F32, DLT_F16}, {DLT_BF16, DLT_F32},
                                       {DLT_F16, DLT_F32},  {DLT_F16, DLT_BF16}, {DLT_BF16, DLT_F16}};
    static const int64_t SIZES[] = {1000003, 16 * 768, 13, 5};
    static const int64_t OFFS[] = {0, 1, 4, 8}; /* 1, and 4 of a 16-bit source: off 16 bytes */
    seed(0xca57u);
    for (size_t p = 0; p < sizeof PAIRS / sizeof PAIRS[0]; p++)
        for (size_t z = 0; z < sizeof SIZES / sizeof SIZES[0]; z++) {
            const int32_t from = PAIRS[p][0], to = PAIRS[p][1];
            const int64_t n = SIZES[z], nb = n + 8;
            float *v = malloc((size_t)nb * sizeof *v);
            REQUIRE(v != NULL);
            for (int64_t i = 0; i < nb; i++) /* |v| in [2^-30, 2^18): f16 subnormals to overflow */
                v[i] = (float)((urand() < 0.5 ? -1.0 : 1.0) * (1.0 + urand()) * pow(2.0, floor(urand() * 48.0) - 30.0));
            v[0] = 0.0f, v[1] = -0.0f, v[2] = INFINITY, v[3] = -INFINITY;
            dlt_tensor *f32 = NULL, *base[2] = {NULL, NULL}; /* [cpu, device] */
            CHECK_OK(dlt_tensor_from_host(g_cpu, DLT_F32, &nb, 1, DLT_FORMAT_CONTIGUOUS, v, (size_t)nb * sizeof *v, &f32));
            free(v);
            if (from == DLT_F32) {
                base[0] = f32;
                f32 = NULL;
            } else {
                CHECK_OK(dlt_tensor_cast(f32, from, &base[0]));
            }
            dlt_tensor_release(f32);
            CHECK_OK(dlt_tensor_to_ctx(base[0], g_dev, &base[1]));
            for (size_t o = 0; o < sizeof OFFS / sizeof OFFS[0]; o++) {
                dlt_tensor *view[2] = {NULL, NULL}, *y[2] = {NULL, NULL};
                for (int k = 0; k < 2; k++) {
                    CHECK_OK(dlt_narrow(base[k], 0, OFFS[o], n, &view[k]));
                    CHECK_OK(dlt_tensor_cast(view[k], to, &y[k]));
                }
                const int64_t bad = th_diff_bits(y[0], y[1]);
                CHECK(bad == 0, "%s -> %s, n %lld, offset %lld: %lld elements differ", dlt_dtype_name(from),
                      dlt_dtype_name(to), (long long)n, (long long)OFFS[o], (long long)bad);
                for (int k = 0; k < 2; k++) {
                    dlt_tensor_release(y[k]);
                    dlt_tensor_release(view[k]);
                }
            }
            dlt_tensor_release(base[0]);
            dlt_tensor_release(base[1]);
        }
    CHECK_OK(dlt_ctx_check(g_dev));
}

int main(void) {
    g_cpu = th_cpu_ctx();
    g_dev = th_dev_ctx(g_no_dev, sizeof g_no_dev);
    RUN(test_binary_mixed_bitwise);
    RUN(test_cast_bitwise);
    dlt_ctx_destroy(g_dev);
    dlt_ctx_destroy(g_cpu);
    return th_done();
}
