/*
 * cuda_conv_pad.c - convolutions of 16-bit channels-last inputs with few channels run with
 * their channels padded with zeros (cuda/conv2d_pad.cu), against the CPU backend.
 *
 * For DLT_CONV_PAD_CHANNELS = 8 (the vector pad kernel of 16 bytes), 4 (the default: 8-byte
 * vectors), 5 (the per-element kernel) and 0 (off), f16 and bf16, and three shapes (ResNet's
 * stem on an odd map; one channel; six channels, which 4 and 5 leave unpadded): the forward,
 * the weight gradient written (beta 0) and accumulated (beta 1) with x not needing a
 * gradient, as a stem's input, and once more with x needing one (its weight gradient then
 * runs on the side stream, unpadded, beside the data gradient). Each context logs once
 * that it padded: the cases check that the padded path served exactly where it applies.
 * Without a CUDA device every case skips.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static dlt_ctx *g_cpu;
static int g_padded; /* "channels padded" info lines since the case began */

static void log_cb(int32_t level, const char *msg, void *user) {
    (void)user;
    if (strstr(msg, "runs through cuDNN with its channels padded to")) g_padded++;
    if (level <= DLT_LOG_WARNING) printf("# [warning] %s\n", msg);
}

typedef struct pad_case {
    const char *name;
    int64_t N, C, H, W, K, R, S, stride, pad;
} pad_case;

static const pad_case CASES[] = {
    {"stem 7x7 s2 p3, C=3, 15x15", 3, 3, 15, 15, 16, 7, 7, 2, 3},
    {"3x3 s1 p1, C=1, 9x9", 2, 1, 9, 9, 8, 3, 3, 1, 1},
    {"3x3 s1 p1, C=6, 6x6", 2, 6, 6, 6, 8, 3, 3, 1, 1},
};
static const int PADS[] = {8, 4, 5, 0};

static const pad_case *g_case;
static int g_pad, g_x_grad;
static int32_t g_dtype;

/* the same values on both contexts: drawn on the CPU in f32, cast, channels-last */
static void make_pair(dlt_ctx *gpu, const int64_t *shape, int32_t dtype, double std, dlt_tensor **c,
                      dlt_tensor **g) {
    dlt_tensor *t = NULL, *h = NULL;
    CHECK_OK(dlt_tensor_empty(g_cpu, DLT_F32, shape, 4, DLT_FORMAT_CONTIGUOUS, &t));
    CHECK_OK(dlt_tensor_rand_normal(t, 0.0, std));
    CHECK_OK(dlt_tensor_cast(t, dtype, &h));
    dlt_tensor_release(t);
    CHECK_OK(dlt_tensor_to_format(h, DLT_FORMAT_CHANNELS_LAST, c));
    dlt_tensor_release(h);
    CHECK_OK(dlt_tensor_to_ctx(*c, gpu, g));
}

static void check_close(const dlt_tensor *gpu, const dlt_tensor *cpu, const char *what, const char *phase) {
    REQUIRE(gpu != NULL && cpu != NULL, "%s (%s): missing", what, phase);
    float *a = th_read_f32(gpu), *b = th_read_f32(cpu);
    REQUIRE(a != NULL && b != NULL);
    const double e = th_rel_err_f(a, b, dlt_tensor_numel(cpu));
    free(a);
    free(b);
    CHECK(e <= 1e-2, "%s (%s): relative error %.3g > 1e-2", what, phase, e);
}

static void test_padded(void) {
    char v[8];
    snprintf(v, sizeof v, "%d", g_pad);
    setenv("DLT_CONV_PAD_CHANNELS", v, 1);
    dlt_ctx *gpu = th_cuda_ctx();
    unsetenv("DLT_CONV_PAD_CHANNELS");
    if (!gpu) {
        char why[256];
        snprintf(why, sizeof why, "%s", th_skip_reason);
        SKIP("%s", why);
    }
    const pad_case *c = g_case;
    const int64_t P = (c->H + 2 * c->pad - c->R) / c->stride + 1, Q = (c->W + 2 * c->pad - c->S) / c->stride + 1;
    const int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->K, c->C, c->R, c->S}, ys[4] = {c->N, c->K, P, Q};
    dlt_tensor *xc, *xg, *wc, *wg, *dyc, *dyg;
    make_pair(gpu, xs, g_dtype, 1.0, &xc, &xg);
    make_pair(gpu, ws, g_dtype, 1.0 / sqrt((double)(c->C * c->R * c->S)), &wc, &wg);
    make_pair(gpu, ys, g_dtype, 1.0, &dyc, &dyg);
    dlt_tensor *leaves[4] = {wc, wg, xc, xg};
    for (int i = 0; i < (g_x_grad ? 4 : 2); i++) CHECK_OK(dlt_tensor_set_requires_grad(leaves[i], 1));
    g_padded = 0;
    static const char *const PHASE[2] = {"written", "accumulated"};
    for (int round = 0; round < 2; round++) {
        dlt_tensor *yc = NULL, *yg = NULL;
        CHECK_OK(dlt_conv2d(xc, wc, NULL, c->stride, c->stride, c->pad, c->pad, 1, 1, 1, &yc));
        CHECK_OK(dlt_conv2d(xg, wg, NULL, c->stride, c->stride, c->pad, c->pad, 1, 1, 1, &yg));
        check_close(yg, yc, "y", PHASE[round]);
        CHECK_OK(dlt_backward(yc, dyc));
        CHECK_OK(dlt_backward(yg, dyg));
        check_close(dlt_tensor_grad(wg), dlt_tensor_grad(wc), "dw", PHASE[round]);
        if (g_x_grad) check_close(dlt_tensor_grad(xg), dlt_tensor_grad(xc), "dx", PHASE[round]);
        dlt_tensor_release(yc);
        dlt_tensor_release(yg);
    }
    const int applies = g_pad > c->C;
    CHECK(applies ? g_padded == 1 : g_padded == 0, "padded-path log lines: %d, expected %d", g_padded, applies);
    dlt_tensor *all[6] = {xc, xg, wc, wg, dyc, dyg};
    for (int i = 0; i < 6; i++) dlt_tensor_release(all[i]);
    dlt_ctx_destroy(gpu);
}

int main(void) {
    CHECK_OK(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &g_cpu));
    CHECK_OK(dlt_ctx_set_seed(g_cpu, 7));
    dlt_set_log_callback(log_cb, NULL);
    static const int32_t DTYPES[2] = {DLT_F16, DLT_BF16};
    for (size_t p = 0; p < sizeof PADS / sizeof PADS[0]; p++)
        for (int d = 0; d < 2; d++)
            for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
                for (int xg = 0; xg < 2; xg++) {
                    char name[200];
                    g_pad = PADS[p], g_dtype = DTYPES[d], g_case = &CASES[i], g_x_grad = xg;
                    snprintf(name, sizeof name, "DLT_CONV_PAD_CHANNELS=%d %s %s%s", g_pad, dlt_dtype_name(g_dtype),
                             g_case->name, xg ? ", x needs a gradient" : "");
                    th_run(test_padded, name);
                }
    dlt_set_log_callback(NULL, NULL);
    dlt_ctx_destroy(g_cpu);
    return th_done();
}
