/*
 * cuda_conv_bn.c - the CUDA conv2d and BatchNorm kernels (cuDNN graph API and our own
 * kernels) against the CPU backend, through the public ops (dlt_conv2d, dlt_batch_norm2d,
 * dlt_batch_norm2d_act) and dlt_backward.
 *
 * Every case builds the same random tensors on a CPU and a CUDA context (made on the CPU,
 * copied with dlt_tensor_to_ctx), runs forward and backward on both, and compares outputs,
 * running statistics and leaf gradients by relative norm error: fp32 1e-5 (TF32 off, the
 * default), fp16/bf16 1e-2. Each case then
 *   - fills the CUDA gradients with NaN and zero-grads with set_to_none, so the next
 *     backward must overwrite them (beta = 0 never reads the destination), and compares;
 *   - runs forward/backward again without zero-grad, so parameter gradients accumulate
 *     (conv2d_bwd_filter/bias and bn dgamma/dbeta with beta = 1), and compares.
 * Before each CUDA op, blocks of the context's memory pool are filled with 0xFF (NaN in
 * every float dtype) and released, so outputs allocated from them start as NaN.
 *
 * Groups of cases (one CUDA context each; the settings are read from the environment when
 * the context's plan cache is created, see cuda/cudnn_graph.h):
 *   cudnn    default selection: cuDNN when a plan finalizes. For the ResNet path (fp16/bf16
 *            channels-last, the main shapes, training) a fallback to our kernels is a failure:
 *            the log callback counts the warnings that announce one. BN in NCHW runs a few
 *            shapes only (each new BN shape is an NVRTC build on a cold cache).
 *   native   DLT_CONV_IMPL=native, DLT_BN_IMPL=native: the safety-net kernels (channels-last
 *            BN: our single-pass ones, as one kernel per direction where the grid fits).
 *   native-two  the same BN cases with DLT_BN_ONE_KERNEL=0 (two launches per direction),
 *            and both forms bitwise equal on the same inputs.
 *   workspace0  DLT_WORKSPACE_MAX=0: convolutions with engines that take no workspace.
 *   autotune dlt_ctx_set_cudnn_benchmark(ctx, 1) (DLT_CUDNN_AUTOTUNE unset) on a few conv
 *            shapes: the engines were timed (logged) and the results are right.
 *   cudnn-only  DLT_CONV_IMPL=cudnn: the convolutions with a one-pixel output, which the
 *            default selection runs as GEMMs (cuda/conv2d_gemm.cu), through cuDNN.
 *   gemm1    DLT_CONV_GEMM=1: channels-last cases with the 1x1 stride-1 convolutions on
 *            cuDNN (the default runs them as GEMMs).
 *   cudnn-running  DLT_BN_CUDNN_RUNNING_STATS=1: cuDNN updates the running statistics; the
 *            comparison checks that its running variance is the unbiased one (PyTorch's).
 * plus determinism (deterministic mode: two runs bitwise equal) and BN without affine
 * parameters or running statistics.
 *
 * Without a GPU (or without CUDA in the build) every case skips.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static dlt_ctx *g_cpu, *g_gpu;
static char g_gpu_skip[256];
static const char *g_group = "";
static int g_warnings;     /* fallback warnings logged since the case began */
static int g_strict_group; /* the group where the ResNet path must stay on cuDNN */

static int g_bg_installs; /* plans built in the background and installed */
static int g_gemm_plans;  /* cuBLASLt plans of convolutions run as GEMMs (conv2d_gemm.cu) */
static int g_one_kernel;  /* contexts that ran a BN as one kernel per direction (batchnorm_fast.cu) */
static int g_autotuned;   /* convolution plans whose engines were timed (cudnn_graph.c) */
static int g_one_refused; /* cooperative BN launches the runtime refused (batchnorm_one.cu) */

static void log_cb(int32_t level, const char *msg, void *user) {
    (void)user;
    if (level <= DLT_LOG_WARNING) g_warnings++;
    if (strstr(msg, "(built in the background)")) g_bg_installs++;
    if (strstr(msg, "plan for a strided GEMM")) g_gemm_plans++;
    if (strstr(msg, "BatchNorm as one kernel per direction")) g_one_kernel++;
    if (strstr(msg, "was refused as larger than the GPU holds")) g_one_refused++;
    if (strstr(msg, "cuDNN autotune for")) g_autotuned++;
    printf("# [%s] %s\n", level == DLT_LOG_ERROR ? "error" : level == DLT_LOG_WARNING ? "warning" : "info",
           msg);
}

static double tol_for(int32_t dtype) { return dtype == DLT_F32 ? 1e-5 : 1e-2; }
static const char *fmt_name(int32_t fmt) { return fmt == DLT_FORMAT_CHANNELS_LAST ? "NHWC" : "NCHW"; }

static void gpu_begin(const char *group, const char *conv_impl, const char *bn_impl, int autotune,
                      int cudnn_running) {
    g_group = group;
    if (conv_impl) setenv("DLT_CONV_IMPL", conv_impl, 1); else unsetenv("DLT_CONV_IMPL");
    if (bn_impl) setenv("DLT_BN_IMPL", bn_impl, 1); else unsetenv("DLT_BN_IMPL");
    if (autotune) setenv("DLT_CUDNN_AUTOTUNE", "1", 1); else unsetenv("DLT_CUDNN_AUTOTUNE");
    /* both ways of updating the running statistics are checked: cuDNN's (the default) in the
     * cudnn-running group, our kernel from cuDNN's saved statistics in the others */
    setenv("DLT_BN_CUDNN_RUNNING_STATS", cudnn_running ? "1" : "0", 1);
    /* plans are built in the calling thread, so every case runs the implementation its group
     * names from its first call; the async group keeps background building on (the context
     * reads its environment when it is created, below) */
    setenv("DLT_BN_ASYNC_PLANS", strcmp(group, "async") == 0 ? "1" : "0", 1);
    /* auto mode sends small channels-last BNs to our single-pass kernels: every group here
     * tests the implementation it names (DLT_BN_IMPL=native runs the single-pass ones) */
    setenv("DLT_BN_NATIVE_MAX", "0", 1);
    unsetenv("DLT_BN_NATIVE_MAX_BWD");
    g_gpu = th_cuda_ctx();
    if (!g_gpu) snprintf(g_gpu_skip, sizeof g_gpu_skip, "%s", th_skip_reason);
}

static void gpu_end(void) {
    dlt_ctx_destroy(g_gpu);
    g_gpu = NULL;
}

#define GPU_OR_SKIP()                                                                         \
    do {                                                                                      \
        if (!g_gpu) SKIP("%s", g_gpu_skip);                                                   \
    } while (0)

/* ---- tensors ---- */

/* The same values on both contexts: drawn on the CPU in f32, cast and laid out there, then
 * copied to the GPU. normal=1: N(a, b^2); 0: U(a, b). */
static void make_pair(const int64_t *shape, int32_t nd, int32_t dtype, int32_t fmt, int normal, double a,
                      double b, dlt_tensor **cpu, dlt_tensor **gpu) {
    dlt_tensor *t = NULL, *c = NULL, *f = NULL;
    CHECK_OK(dlt_tensor_empty(g_cpu, DLT_F32, shape, nd, DLT_FORMAT_CONTIGUOUS, &t));
    if (normal)
        CHECK_OK(dlt_tensor_rand_normal(t, a, b));
    else
        CHECK_OK(dlt_tensor_rand_uniform(t, a, b));
    CHECK_OK(dlt_tensor_cast(t, dtype, &c));
    if (fmt != DLT_FORMAT_CONTIGUOUS)
        CHECK_OK(dlt_tensor_to_format(c, fmt, &f));
    else
        f = dlt_tensor_retain(c);
    dlt_tensor_release(t);
    dlt_tensor_release(c);
    *cpu = f;
    CHECK_OK(dlt_tensor_to_ctx(f, g_gpu, gpu));
}

/* Fills some pool blocks with 0xFF bytes (NaN in f32, f16 and bf16) and frees them, so the
 * op's fresh outputs are likely to start as NaN. */
static void poison_pool(int64_t nbytes) {
    dlt_tensor *t[4] = {NULL, NULL, NULL, NULL};
    const int64_t n = nbytes + 512;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(dlt_tensor_empty(g_gpu, DLT_U8, &n, 1, DLT_FORMAT_CONTIGUOUS, &t[i]));
        CHECK_OK(dlt_tensor_fill(t[i], 255.0));
    }
    for (int i = 0; i < 4; i++) dlt_tensor_release(t[i]);
}

/* Relative norm error of a GPU tensor against its CPU counterpart (logical order). */
static double rel_err(const dlt_tensor *gpu, const dlt_tensor *cpu) {
    if (!gpu || !cpu) return INFINITY;
    float *a = th_read_f32(gpu), *b = th_read_f32(cpu);
    double e = INFINITY;
    if (a && b && dlt_tensor_numel(gpu) == dlt_tensor_numel(cpu)) e = th_rel_err_f(a, b, dlt_tensor_numel(cpu));
    free(a);
    free(b);
    return e;
}

#define CHECK_CLOSE(gpu, cpu, tol, what, phase)                                               \
    do {                                                                                      \
        double ce_ = rel_err((gpu), (cpu));                                                   \
        CHECK(ce_ <= (tol), "%s (%s): relative error %.3g > %.3g", (what), (phase), ce_, (double)(tol)); \
    } while (0)

static void grad_poison_and_clear(dlt_tensor *const *leaves_gpu, dlt_tensor *const *leaves_cpu, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        dlt_tensor *g = leaves_gpu[i] ? dlt_tensor_grad(leaves_gpu[i]) : NULL;
        if (g) CHECK_OK(dlt_tensor_fill(g, NAN));
    }
    CHECK_OK(dlt_zero_grad(leaves_gpu, n, 1));
    CHECK_OK(dlt_zero_grad(leaves_cpu, n, 1));
}

/* ---------------------------------------------------------------------------------------
 * conv2d
 * ------------------------------------------------------------------------------------- */
typedef struct conv_case {
    const char *name;
    int64_t N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, groups;
    int bias;
    int resnet; /* a shape of the ResNet path: cuDNN must take it in fp16/bf16 NHWC */
} conv_case;

static const conv_case CONV_CASES[] = {
    {"3x3 s1 p1, 9x9", 2, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 1},
    {"3x3 s2 p1, 9x9", 2, 16, 9, 9, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0, 1},
    {"1x1 s2, 8x8", 2, 16, 8, 8, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 1},
    {"1x1 s1, 4x4", 4, 32, 4, 4, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1},
    {"7x7 s2 p3, C=3, 15x15", 2, 3, 15, 15, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1, 0, 0},
    {"3x3 s1 p1, batch 1, 7x7", 1, 8, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 1},
    {"3x3 p1 on a 1x1 map", 2, 32, 1, 1, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 1},
    {"3x3 groups 2, 8x8", 2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 2, 0, 0},
    {"3x3 dilation 2, 11x11", 2, 8, 11, 11, 8, 3, 3, 1, 1, 2, 2, 2, 2, 1, 0, 0},
    {"3x3 with bias, 5x7", 2, 8, 5, 7, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0},
    /* one-pixel outputs: GEMMs over the taps that meet data in the default selection
     * (cuda/conv2d_gemm.cu), cuDNN in the cudnn-only group */
    {"3x3 s2 p1, 2x2 -> 1x1", 4, 32, 2, 2, 48, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0, 1},
    {"1x1 s2, 2x2 -> 1x1", 4, 32, 2, 2, 64, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 1},
    {"1x1 on a 1x1 map", 8, 64, 1, 1, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1},
    {"3x3 s3 p1, 3x3 -> 1x1 (input row 2 unread)", 2, 16, 3, 3, 8, 3, 3, 3, 3, 1, 1, 1, 1, 1, 0, 0},
    {"3x3 p0, 3x3 -> 1x1 with bias", 2, 8, 3, 3, 12, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, 0},
    {"5x3 p(2,1) on a 1x1 map", 3, 24, 1, 1, 16, 5, 3, 1, 1, 2, 1, 1, 1, 1, 0, 0},
    {"3x3 s5 p3 on a 1x1 map: no tap meets data, with bias", 2, 8, 1, 1, 8, 3, 3, 5, 5, 3, 3, 1, 1, 1, 1, 0},
};
#define N_CONV_CASES ((int)(sizeof CONV_CASES / sizeof CONV_CASES[0]))

static const conv_case *g_conv;
static int32_t g_dtype, g_fmt;

typedef struct conv_side {
    dlt_ctx *ctx;
    dlt_tensor *x, *w, *b, *dy;
} conv_side;

static dlt_tensor *conv_run(conv_side *s, const conv_case *c, int gpu) {
    dlt_tensor *y = NULL;
    if (gpu) poison_pool(dlt_tensor_nbytes(s->dy) + dlt_tensor_nbytes(s->x));
    CHECK_OK(dlt_conv2d(s->x, s->w, c->bias ? s->b : NULL, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw,
                        c->groups, &y));
    return y;
}

static void conv_backward(conv_side *s, dlt_tensor *y, int gpu) {
    if (gpu) poison_pool(dlt_tensor_nbytes(s->x) + dlt_tensor_nbytes(s->w));
    CHECK_OK(dlt_backward(y, s->dy));
}

static void conv_compare_grads(conv_side *g, conv_side *c, const conv_case *cc, double tol, const char *phase) {
    CHECK_CLOSE(dlt_tensor_grad(g->x), dlt_tensor_grad(c->x), tol, "dx", phase);
    CHECK_CLOSE(dlt_tensor_grad(g->w), dlt_tensor_grad(c->w), tol, "dw", phase);
    if (cc->bias) CHECK_CLOSE(dlt_tensor_grad(g->b), dlt_tensor_grad(c->b), tol, "db", phase);
}

/* a case's output height and width (PyTorch's formula) */
static void conv_out_hw(const conv_case *c, int64_t *P, int64_t *Q) {
    *P = (c->H + 2 * c->ph - c->dh * (c->R - 1) - 1) / c->sh + 1;
    *Q = (c->W + 2 * c->pw - c->dw * (c->S - 1) - 1) / c->sw + 1;
}

static void conv_case_run(void) {
    GPU_OR_SKIP();
    const conv_case *cc = g_conv;
    const int32_t dt = g_dtype, fmt = g_fmt;
    const double tol = tol_for(dt);
    g_warnings = 0;
    int64_t P, Q;
    conv_out_hw(cc, &P, &Q);
    const int64_t xs[4] = {cc->N, cc->C, cc->H, cc->W}, ws[4] = {cc->K, cc->C / cc->groups, cc->R, cc->S};
    const int64_t ys[4] = {cc->N, cc->K, P, Q}, bs[1] = {cc->K};
    const double wstd = 1.0 / sqrt((double)(ws[1] * cc->R * cc->S));
    conv_side g = {g_gpu, NULL, NULL, NULL, NULL}, c = {g_cpu, NULL, NULL, NULL, NULL};
    make_pair(xs, 4, dt, fmt, 1, 0.0, 1.0, &c.x, &g.x);
    make_pair(ws, 4, dt, fmt, 1, 0.0, wstd, &c.w, &g.w); /* w in x's format: its gradient is direct */
    make_pair(bs, 1, dt, DLT_FORMAT_CONTIGUOUS, 1, 0.0, 0.5, &c.b, &g.b);
    make_pair(ys, 4, dt, fmt, 1, 0.0, 1.0, &c.dy, &g.dy);
    dlt_tensor *leaves_g[3] = {g.x, g.w, g.b}, *leaves_c[3] = {c.x, c.w, c.b};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(dlt_tensor_set_requires_grad(leaves_g[i], 1));
        CHECK_OK(dlt_tensor_set_requires_grad(leaves_c[i], 1));
    }

    /* 1. forward and backward */
    dlt_tensor *yg = conv_run(&g, cc, 1), *yc = conv_run(&c, cc, 0);
    CHECK(dlt_tensor_format(yg) == fmt && dlt_tensor_dtype(yg) == dt);
    CHECK_CLOSE(yg, yc, tol, "y", "first forward");
    conv_backward(&g, yg, 1);
    conv_backward(&c, yc, 0);
    conv_compare_grads(&g, &c, cc, tol, "first backward");
    dlt_tensor_release(yg);
    dlt_tensor_release(yc);

    /* 2. NaN-filled gradient buffers after zero_grad(set_to_none): overwritten (beta = 0) */
    grad_poison_and_clear(leaves_g, leaves_c, 3);
    yg = conv_run(&g, cc, 1);
    yc = conv_run(&c, cc, 0);
    conv_backward(&g, yg, 1);
    conv_backward(&c, yc, 0);
    conv_compare_grads(&g, &c, cc, tol, "overwrite after set_to_none");
    dlt_tensor_release(yg);
    dlt_tensor_release(yc);

    /* 3. accumulation (beta = 1) */
    yg = conv_run(&g, cc, 1);
    yc = conv_run(&c, cc, 0);
    CHECK_CLOSE(yg, yc, tol, "y", "third forward");
    conv_backward(&g, yg, 1);
    conv_backward(&c, yc, 0);
    conv_compare_grads(&g, &c, cc, tol, "accumulated");
    dlt_tensor_release(yg);
    dlt_tensor_release(yc);

    if (g_strict_group && cc->resnet && dt != DLT_F32 && fmt == DLT_FORMAT_CHANNELS_LAST)
        CHECK(g_warnings == 0, "%d fallback warning(s): cuDNN must take this ResNet shape", g_warnings);
    for (int i = 0; i < 3; i++) {
        dlt_tensor_release(leaves_g[i]);
        dlt_tensor_release(leaves_c[i]);
    }
    dlt_tensor_release(g.dy);
    dlt_tensor_release(c.dy);
}

/* ---------------------------------------------------------------------------------------
 * batchnorm
 * ------------------------------------------------------------------------------------- */
typedef struct bn_case {
    const char *name;
    int64_t N, C, H, W;
    int residual, relu;
    int affine, running; /* 0: gamma/beta NULL; 0: running statistics NULL */
    int resnet;
} bn_case;

static const bn_case BN_CASES[] = {
    {"8x8", 4, 16, 8, 8, 0, 0, 1, 1, 1},
    {"5x7 relu", 3, 12, 5, 7, 0, 1, 1, 1, 0}, /* C=12: cuDNN 9.14 has no engine; ResNet C is 64k */
    {"4x4 residual relu", 4, 16, 4, 4, 1, 1, 1, 1, 1},
    {"6x6 residual, no relu", 2, 8, 6, 6, 1, 0, 1, 1, 0},
    {"1x1 map relu", 8, 32, 1, 1, 0, 1, 1, 1, 1},
    {"batch 1, 3x3, residual relu", 1, 8, 3, 3, 1, 1, 1, 1, 1},
    {"C=3, 7x9 relu", 2, 3, 7, 9, 0, 1, 1, 1, 0},
    {"64ch 16x16 residual relu (many blocks)", 8, 64, 16, 16, 1, 1, 1, 1, 1},
    {"no affine, relu", 2, 8, 5, 5, 0, 1, 0, 1, 0},
    {"no running stats, residual", 2, 8, 5, 5, 1, 0, 1, 0, 0},
    /* several channel tiles and row splits in the single-pass kernels */
    {"256ch 8x8 residual relu (tiles x splits)", 16, 256, 8, 8, 1, 1, 1, 1, 1},
    {"2048ch 1x1 relu", 32, 2048, 1, 1, 0, 1, 1, 1, 1},
    /* a last split with fewer rows than the others (M = 567) */
    {"64ch 9x9 residual relu (partial split)", 7, 64, 9, 9, 1, 1, 1, 1, 0},
    /* more rows than one batch per thread: two launches also where one kernel is on */
    {"64ch 16x16, 72 images (rows past one batch)", 72, 64, 16, 16, 1, 1, 1, 1, 0},
};
#define N_BN_CASES ((int)(sizeof BN_CASES / sizeof BN_CASES[0]))

static const bn_case *g_bn;

typedef struct bn_side {
    dlt_tensor *x, *res, *gamma, *beta, *rm, *rv, *dy;
} bn_side;

static dlt_tensor *bn_run(bn_side *s, const bn_case *b, int training, int gpu) {
    dlt_tensor *y = NULL;
    if (gpu) poison_pool(2 * dlt_tensor_nbytes(s->x));
    if (!b->residual && !b->relu)
        CHECK_OK(dlt_batch_norm2d(s->x, s->gamma, s->beta, s->rm, s->rv, training, 0.1, 1e-5, &y));
    else
        CHECK_OK(dlt_batch_norm2d_act(s->x, s->res, b->relu, s->gamma, s->beta, s->rm, s->rv, training, 0.1,
                                      1e-5, &y));
    return y;
}

static void bn_backward(bn_side *s, dlt_tensor *y, int gpu) {
    if (gpu) poison_pool(2 * dlt_tensor_nbytes(s->x));
    CHECK_OK(dlt_backward(y, s->dy));
}

static void bn_compare(bn_side *g, bn_side *c, double tol, double tol_stats, const char *phase,
                       int grads, int stats) {
    if (stats && g->rm) {
        CHECK_CLOSE(g->rm, c->rm, tol_stats, "running_mean", phase);
        CHECK_CLOSE(g->rv, c->rv, tol_stats, "running_var", phase);
    }
    if (!grads) return;
    CHECK_CLOSE(dlt_tensor_grad(g->x), dlt_tensor_grad(c->x), tol, "dx", phase);
    if (g->gamma) {
        CHECK_CLOSE(dlt_tensor_grad(g->gamma), dlt_tensor_grad(c->gamma), tol_stats > tol ? tol_stats : tol,
                    "dgamma", phase);
        CHECK_CLOSE(dlt_tensor_grad(g->beta), dlt_tensor_grad(c->beta), tol_stats > tol ? tol_stats : tol,
                    "dbeta", phase);
    }
    if (g->res) CHECK_CLOSE(dlt_tensor_grad(g->res), dlt_tensor_grad(c->res), tol, "dresidual", phase);
}

static void bn_case_run(void) {
    GPU_OR_SKIP();
    const bn_case *bc = g_bn;
    const int32_t dt = g_dtype, fmt = g_fmt;
    const double tol = tol_for(dt);
    /* statistics and parameter gradients are fp32 sums of identical inputs on both sides;
     * fp16/bf16 still bounds them through the rounded y and dy */
    const double tol_stats = dt == DLT_F32 ? 1e-5 : 1e-3;
    g_warnings = 0;
    const int64_t xs[4] = {bc->N, bc->C, bc->H, bc->W}, cs[1] = {bc->C};
    bn_side g, c;
    memset(&g, 0, sizeof g);
    memset(&c, 0, sizeof c);
    make_pair(xs, 4, dt, fmt, 1, 0.5, 2.0, &c.x, &g.x);
    make_pair(xs, 4, dt, fmt, 1, 0.0, 1.0, &c.dy, &g.dy);
    if (bc->residual) make_pair(xs, 4, dt, fmt, 1, 0.0, 1.0, &c.res, &g.res);
    if (bc->affine) {
        make_pair(cs, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, 1, 1.0, 0.3, &c.gamma, &g.gamma);
        make_pair(cs, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, 1, 0.0, 0.5, &c.beta, &g.beta);
    }
    if (bc->running) {
        make_pair(cs, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, 1, 0.0, 1.0, &c.rm, &g.rm);
        make_pair(cs, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, 0, 0.5, 1.5, &c.rv, &g.rv);
    }
    dlt_tensor *lg[4] = {g.x, g.gamma, g.beta, g.res}, *lc[4] = {c.x, c.gamma, c.beta, c.res};
    for (int i = 0; i < 4; i++) {
        if (lg[i]) CHECK_OK(dlt_tensor_set_requires_grad(lg[i], 1));
        if (lc[i]) CHECK_OK(dlt_tensor_set_requires_grad(lc[i], 1));
    }

    /* 1. training forward (running statistics updated) and backward */
    dlt_tensor *yg = bn_run(&g, bc, 1, 1), *yc = bn_run(&c, bc, 1, 0);
    CHECK(dlt_tensor_format(yg) == fmt && dlt_tensor_dtype(yg) == dt);
    CHECK_CLOSE(yg, yc, tol, "y", "training forward");
    bn_compare(&g, &c, tol, tol_stats, "training forward", 0, 1);
    bn_backward(&g, yg, 1);
    bn_backward(&c, yc, 0);
    bn_compare(&g, &c, tol, tol_stats, "training backward", 1, 0);
    dlt_tensor_release(yg);
    dlt_tensor_release(yc);

    /* 2. again after NaN-filled gradients and zero_grad(set_to_none): overwrite */
    grad_poison_and_clear(lg, lc, 4);
    yg = bn_run(&g, bc, 1, 1);
    yc = bn_run(&c, bc, 1, 0);
    CHECK_CLOSE(yg, yc, tol, "y", "second training forward");
    bn_compare(&g, &c, tol, tol_stats, "second training forward", 0, 1);
    bn_backward(&g, yg, 1);
    bn_backward(&c, yc, 0);
    bn_compare(&g, &c, tol, tol_stats, "overwrite after set_to_none", 1, 0);
    dlt_tensor_release(yg);
    dlt_tensor_release(yc);

    /* 3. accumulation into the parameter gradients (beta = 1) */
    yg = bn_run(&g, bc, 1, 1);
    yc = bn_run(&c, bc, 1, 0);
    bn_backward(&g, yg, 1);
    bn_backward(&c, yc, 0);
    bn_compare(&g, &c, tol, tol_stats, "accumulated", 1, 1);
    dlt_tensor_release(yg);
    dlt_tensor_release(yc);

    /* the training path is what must stay on cuDNN; evaluation may fall back */
    const int training_warnings = g_warnings;

    /* 4. evaluation with the running statistics, and its backward (statistics constant) */
    if (bc->running) {
        grad_poison_and_clear(lg, lc, 4);
        yg = bn_run(&g, bc, 0, 1);
        yc = bn_run(&c, bc, 0, 0);
        CHECK_CLOSE(yg, yc, tol, "y", "evaluation forward");
        bn_backward(&g, yg, 1);
        bn_backward(&c, yc, 0);
        bn_compare(&g, &c, tol, tol_stats, "evaluation backward", 1, 1);
        dlt_tensor_release(yg);
        dlt_tensor_release(yc);
    }

    if (g_strict_group && bc->resnet && dt != DLT_F32 && fmt == DLT_FORMAT_CHANNELS_LAST)
        CHECK(training_warnings == 0, "%d fallback warning(s) in training: cuDNN must take this ResNet BN",
              training_warnings);
    dlt_tensor *all[14] = {g.x, g.res, g.gamma, g.beta, g.rm, g.rv, g.dy,
                           c.x, c.res, c.gamma, c.beta, c.rm, c.rv, c.dy};
    for (int i = 0; i < 14; i++) dlt_tensor_release(all[i]);
}

/* ---------------------------------------------------------------------------------------
 * determinism: with deterministic mode on, two identical runs give identical bits
 * ------------------------------------------------------------------------------------- */
static unsigned char *host_bytes(const dlt_tensor *t, size_t *n) {
    *n = t ? dlt_tensor_nbytes(t) : 0;
    unsigned char *p = malloc(*n ? *n : 1);
    if (p && t && dlt_tensor_copy_to_host(t, p, *n) != DLT_OK) {
        free(p);
        p = NULL;
    }
    return p;
}

/* a[i] and b[i] (the same outputs of two runs) hold the same bytes, for i < n; a pair that
 * is NULL on both sides is an output the case lacks. Frees them. */
static void check_same_bytes(unsigned char **a, unsigned char **b, const size_t *na, const size_t *nb,
                             const char *const *names, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        if (a[i] || b[i])
            CHECK(a[i] && b[i] && na[i] == nb[i] && memcmp(a[i], b[i], na[i]) == 0, "%s %s", names[i], what);
        free(a[i]);
        free(b[i]);
    }
}

static void test_deterministic(void) {
    GPU_OR_SKIP();
    CHECK_OK(dlt_ctx_set_deterministic(g_gpu, 1));
    const int64_t xs[4] = {8, 64, 8, 8}, ws[4] = {64, 64, 3, 3}, cs[1] = {64};
    dlt_tensor *xc, *x, *wc, *w, *gc, *gm, *bc_, *bt, *rc, *res, *dyc, *dy;
    const int32_t cl = DLT_FORMAT_CHANNELS_LAST;
    make_pair(xs, 4, DLT_F16, cl, 1, 0.0, 1.0, &xc, &x);
    make_pair(ws, 4, DLT_F16, cl, 1, 0.0, 0.05, &wc, &w);
    make_pair(cs, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, 1, 1.0, 0.2, &gc, &gm);
    make_pair(cs, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, 1, 0.0, 0.2, &bc_, &bt);
    make_pair(xs, 4, DLT_F16, cl, 1, 0.0, 1.0, &rc, &res);
    make_pair(xs, 4, DLT_F16, cl, 1, 0.0, 1.0, &dyc, &dy);
    dlt_tensor *leaves[5] = {x, w, gm, bt, res};
    for (int i = 0; i < 5; i++) CHECK_OK(dlt_tensor_set_requires_grad(leaves[i], 1));
    unsigned char *bytes[2][7];
    size_t sizes[2][7];
    for (int run = 0; run < 2; run++) {
        CHECK_OK(dlt_zero_grad(leaves, 5, 1));
        dlt_tensor *h = NULL, *y = NULL;
        CHECK_OK(dlt_conv2d(x, w, NULL, 1, 1, 1, 1, 1, 1, 1, &h));
        CHECK_OK(dlt_batch_norm2d_act(h, res, 1, gm, bt, NULL, NULL, 1, 0.1, 1e-5, &y));
        CHECK_OK(dlt_backward(y, dy));
        bytes[run][0] = host_bytes(y, &sizes[run][0]);
        bytes[run][1] = host_bytes(h, &sizes[run][1]);
        for (int i = 0; i < 5; i++) {
            REQUIRE(dlt_tensor_grad(leaves[i]) != NULL, "no gradient for leaf %d", i);
            bytes[run][2 + i] = host_bytes(dlt_tensor_grad(leaves[i]), &sizes[run][2 + i]);
        }
        dlt_tensor_release(y);
        dlt_tensor_release(h);
    }
    static const char *names[7] = {"y", "conv output", "dx", "dw", "dgamma", "dbeta", "dresidual"};
    check_same_bytes(bytes[0], bytes[1], sizes[0], sizes[1], names, 7, "differs between two deterministic runs");
    CHECK_OK(dlt_ctx_set_deterministic(g_gpu, 0));
    dlt_tensor *all[12] = {xc, x, wc, w, gc, gm, bc_, bt, rc, res, dyc, dy};
    for (int i = 0; i < 12; i++) dlt_tensor_release(all[i]);
}

/* ---------------------------------------------------------------------------------------
 * the single-pass kernels' two forms (one kernel per direction, two launches) do the same
 * arithmetic in the same order: their outputs are bitwise equal. g_gpu runs two launches
 * (the native-two group, DLT_BN_ONE_KERNEL=0); a context made with the default runs one.
 * With g_form_refused, the second context is made with DLT_BN_ONE_KERNEL=2 and the case's
 * grid is larger than the GPU holds: the runtime refuses the cooperative launch and the BN
 * must fall back to two launches, with the same bits and nothing left behind for the
 * second step.
 * ------------------------------------------------------------------------------------- */
static int g_form_dtype;
static const bn_case *g_form;
static int g_form_refused;

/* 64 images of 2048 channels at 8x8: one batch of rows per thread (16 splits), 512 blocks
 * in 16-bit types and 1024 in f32, more than any current GPU holds at once (264 on an H200) */
static const bn_case BN_TOO_LARGE = {"2048ch 8x8, 64 images (grid larger than the GPU)", 64, 2048, 8, 8, 1, 1,
                                     1, 1, 0};

static void test_forms_equal(void) {
    GPU_OR_SKIP();
    const bn_case *b = g_form;
    const int32_t dt = g_form_dtype, cl = DLT_FORMAT_CHANNELS_LAST;
    if (g_form_refused)
        setenv("DLT_BN_ONE_KERNEL", "2", 1);
    else
        unsetenv("DLT_BN_ONE_KERNEL");
    dlt_ctx *one = th_cuda_ctx();
    setenv("DLT_BN_ONE_KERNEL", "0", 1);
    REQUIRE(one != NULL, "second CUDA context: %s", th_skip_reason);
    const int64_t xs[4] = {b->N, b->C, b->H, b->W}, cs[1] = {b->C};
    dlt_tensor *cpu[7], *gpu[2][7];
    memset(gpu, 0, sizeof gpu);
    make_pair(xs, 4, dt, cl, 1, 0.5, 2.0, &cpu[0], &gpu[0][0]);  /* x */
    make_pair(xs, 4, dt, cl, 1, 0.0, 1.0, &cpu[1], &gpu[0][1]);  /* residual */
    make_pair(xs, 4, dt, cl, 1, 0.0, 1.0, &cpu[2], &gpu[0][2]);  /* dy */
    make_pair(cs, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, 1, 1.0, 0.3, &cpu[3], &gpu[0][3]); /* gamma */
    make_pair(cs, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, 1, 0.0, 0.5, &cpu[4], &gpu[0][4]); /* beta */
    make_pair(cs, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, 1, 0.0, 1.0, &cpu[5], &gpu[0][5]); /* running mean */
    make_pair(cs, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, 0, 0.5, 1.5, &cpu[6], &gpu[0][6]); /* running var */
    for (int i = 0; i < 7; i++) CHECK_OK(dlt_tensor_to_ctx(cpu[i], one, &gpu[1][i]));
    const int before = g_one_kernel, refused_before = g_one_refused;
    static const char *names[8] = {"y", "running_mean", "running_var", "dx", "dresidual", "dgamma", "dbeta",
                                   "dgamma accumulated"};
    unsigned char *bytes[2][8];
    size_t sizes[2][8];
    memset(bytes, 0, sizeof bytes);
    for (int k = 0; k < 2; k++) {
        dlt_tensor **t = gpu[k], *leaves[4] = {t[0], t[1], t[3], t[4]};
        for (int i = 0; i < 4; i++) CHECK_OK(dlt_tensor_set_requires_grad(leaves[i], 1));
        dlt_tensor *y = NULL;
        CHECK_OK(dlt_batch_norm2d_act(t[0], b->residual ? t[1] : NULL, b->relu, t[3], t[4], t[5], t[6], 1, 0.1,
                                      1e-5, &y));
        CHECK_OK(dlt_backward(y, t[2]));
        const dlt_tensor *out[7] = {y, t[5], t[6], dlt_tensor_grad(t[0]), dlt_tensor_grad(t[1]),
                                    dlt_tensor_grad(t[3]), dlt_tensor_grad(t[4])};
        for (int i = 0; i < 7; i++) {
            if (i == 4 && !b->residual) continue; /* no residual: no dresidual */
            REQUIRE(out[i] != NULL, "%s missing", names[i]);
            bytes[k][i] = host_bytes(out[i], &sizes[k][i]);
        }
        dlt_tensor_release(y);
        /* a second step: the parameter gradients accumulate (beta = 1) */
        CHECK_OK(dlt_batch_norm2d_act(t[0], b->residual ? t[1] : NULL, b->relu, t[3], t[4], t[5], t[6], 1, 0.1,
                                      1e-5, &y));
        CHECK_OK(dlt_backward(y, t[2]));
        bytes[k][7] = host_bytes(dlt_tensor_grad(t[3]), &sizes[k][7]);
        dlt_tensor_release(y);
    }
    if (g_form_refused) {
        /* once per direction: after a refusal that context does not try again */
        CHECK(g_one_refused - refused_before == 2, "%d refused launches logged, expected 2 (forward, backward)",
              g_one_refused - refused_before);
        check_same_bytes(bytes[0], bytes[1], sizes[0], sizes[1], names, 8,
                         "differs between the refused one kernel's fallback and two launches");
    } else {
        CHECK(g_one_kernel > before, "the default context did not run this BN as one kernel");
        CHECK(g_one_refused == refused_before, "a cooperative launch was refused");
        check_same_bytes(bytes[0], bytes[1], sizes[0], sizes[1], names, 8,
                         "differs between one kernel and two launches");
    }
    for (int i = 0; i < 7; i++) {
        dlt_tensor_release(cpu[i]);
        dlt_tensor_release(gpu[0][i]);
        dlt_tensor_release(gpu[1][i]);
    }
    dlt_ctx_destroy(one);
}

/* whether the one-kernel form served the group's BNs (its context logs it once) */
static int g_expect_one;
static void check_one_kernel(void) {
    GPU_OR_SKIP();
    if (g_expect_one)
        CHECK(g_one_kernel > 0, "no BN ran as one kernel per direction");
    else
        CHECK(g_one_kernel == 0, "a BN ran as one kernel where DLT_BN_ONE_KERNEL=0");
}

/* the autotune group turns cudnn_benchmark on through the context */
static void set_benchmark(void) {
    GPU_OR_SKIP();
    CHECK_OK(dlt_ctx_set_cudnn_benchmark(g_gpu, 1));
    int32_t on = 0;
    CHECK_OK(dlt_ctx_cudnn_benchmark_enabled(g_gpu, &on));
    CHECK(on == 1, "cudnn_benchmark reads %d after set 1", on);
}

/* the autotune group: at least one shape had several usable engines and they were timed */
static void check_autotuned(void) {
    GPU_OR_SKIP();
    CHECK(g_autotuned > 0, "no convolution plan was autotuned with cudnn_benchmark on");
}

/* ---------------------------------------------------------------------------------------
 * driver
 * ------------------------------------------------------------------------------------- */
static const int32_t DTYPES[3] = {DLT_F32, DLT_F16, DLT_BF16};
static const int32_t FORMATS[2] = {DLT_FORMAT_CONTIGUOUS, DLT_FORMAT_CHANNELS_LAST};

static void run_conv(int32_t dt, int32_t fmt, int ci) {
    char name[200];
    g_conv = &CONV_CASES[ci];
    g_dtype = dt;
    g_fmt = fmt;
    snprintf(name, sizeof name, "%s: conv2d %s %s %s", g_group, dlt_dtype_name(dt), fmt_name(fmt), g_conv->name);
    th_run(conv_case_run, name);
}

/* which path served the convolutions of a group: the GEMM path logs each cuBLASLt plan it
 * builds (cuda/linear.cu), cuDNN's does not */
static int g_expect_gemm;
static void check_gemm_plans(void) {
    GPU_OR_SKIP();
    if (g_expect_gemm)
        CHECK(g_gemm_plans > 0, "no GEMM plan was built: the one-pixel and 1x1 convolutions went elsewhere");
    else
        CHECK(g_gemm_plans == 0, "%d GEMM plans were built where DLT_CONV_IMPL=cudnn should keep every convolution on cuDNN",
              g_gemm_plans);
}

static void run_bn(int32_t dt, int32_t fmt, int bi) {
    char name[200];
    g_bn = &BN_CASES[bi];
    g_dtype = dt;
    g_fmt = fmt;
    snprintf(name, sizeof name, "%s: batchnorm %s %s %s", g_group, dlt_dtype_name(dt), fmt_name(fmt), g_bn->name);
    th_run(bn_case_run, name);
}

/* bn_nchw_cases: how many BN cases run in NCHW (cuDNN's BN engines are runtime-compiled:
 * each new shape costs an NVRTC build on a cold cache, so NCHW, off the ResNet path, gets
 * a few shapes only in the cuDNN groups). */
static void run_all(int bn_nchw_cases) {
    for (int d = 0; d < 3; d++)
        for (int f = 0; f < 2; f++) {
            for (int i = 0; i < N_CONV_CASES; i++) run_conv(DTYPES[d], FORMATS[f], i);
            const int nb = FORMATS[f] == DLT_FORMAT_CHANNELS_LAST ? N_BN_CASES : bn_nchw_cases;
            for (int i = 0; i < nb && i < N_BN_CASES; i++) run_bn(DTYPES[d], FORMATS[f], i);
        }
}

/* Background plan building (the default outside these groups): the first calls of a BN
 * graph run our kernels while worker threads build cuDNN's plan, later calls install and
 * run it. Every run must match the CPU, and the plans must arrive. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void async_case(int bn_index) {
    GPU_OR_SKIP();
    g_bn = &BN_CASES[bn_index];
    g_dtype = DLT_F16;
    g_fmt = DLT_FORMAT_CHANNELS_LAST;
    const int before = g_bg_installs;
    const double t0 = now_s();
    int runs = 0, after = 0;
    while (now_s() - t0 < 120 && after < 2) {
        bn_case_run();
        runs++;
        if (th_case_failed) return;
        if (g_bg_installs - before >= 2) after++; /* forward and backward installed: run on them */
        else usleep(20000);
    }
    CHECK(g_bg_installs - before >= 2, "%d plans arrived in %.1f s", g_bg_installs - before, now_s() - t0);
    printf("# %s: %d runs, plans installed after %.2f s\n", g_bn->name, runs, now_s() - t0);
}
static void test_async_64ch(void) { async_case(7); }
static void test_async_8x8(void) { async_case(0); }
static void test_async_1x1(void) { async_case(4); }

int main(void) {
    g_cpu = th_cpu_ctx();
    dlt_set_log_callback(log_cb, NULL);

    double t0 = now_s();
    /* cuDNN where a plan finalizes (the default) */
    if (th_group_on("cudnn")) {
        gpu_begin("cudnn", NULL, NULL, 0, 0);
        g_strict_group = 1;
        g_gemm_plans = 0;
        run_all(3);
        g_expect_gemm = 1;
        th_run(check_gemm_plans, "cudnn: the one-pixel and 1x1 channels-last convolutions ran as GEMMs");
        g_strict_group = 0;
        th_run(test_deterministic, "cudnn: deterministic mode, conv + bn, two runs bitwise equal");
        gpu_end();
        printf("# group cudnn: %.1f s\n", now_s() - t0);
    }

    /* the safety-net kernels */
    t0 = now_s();
    if (th_group_on("native")) {
        gpu_begin("native", "native", "native", 0, 0);
        g_one_kernel = 0;
        run_all(N_BN_CASES);
        g_expect_one = 1;
        th_run(check_one_kernel, "native: the BNs whose grid fits on the GPU ran as one kernel per direction");
        th_run(test_deterministic, "native: deterministic mode, conv + bn, two runs bitwise equal");
        gpu_end();
        printf("# group native: %.1f s\n", now_s() - t0);
    }

    /* our single-pass BN kernels as two launches per direction, and the two forms equal */
    t0 = now_s();
    if (th_group_on("native-two")) {
        setenv("DLT_BN_ONE_KERNEL", "0", 1);
        gpu_begin("native-two", "native", "native", 0, 0);
        g_one_kernel = 0;
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < N_BN_CASES; i++) run_bn(DTYPES[d], DLT_FORMAT_CHANNELS_LAST, i);
        g_expect_one = 0;
        th_run(check_one_kernel, "native-two: no BN ran as one kernel");
        static const int form_cases[3] = {10, 12, 11}; /* tiles x splits, partial split, 1x1 */
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 3; i++) {
                char name[200];
                g_form_dtype = DTYPES[d];
                g_form = &BN_CASES[form_cases[i]];
                snprintf(name, sizeof name, "native-two: BN %s %s, one kernel and two launches bitwise equal",
                         dlt_dtype_name(DTYPES[d]), g_form->name);
                th_run(test_forms_equal, name);
            }
        /* a cooperative grid the runtime refuses (DLT_BN_ONE_KERNEL=2 skips the size check) */
        g_form_refused = 1;
        g_form = &BN_TOO_LARGE;
        for (int d = 0; d < 3; d++) {
            char name[200];
            g_form_dtype = DTYPES[d];
            snprintf(name, sizeof name, "native-two: BN %s %s: the refused launch falls back to two launches",
                     dlt_dtype_name(DTYPES[d]), g_form->name);
            th_run(test_forms_equal, name);
        }
        g_form_refused = 0;
        gpu_end();
        unsetenv("DLT_BN_ONE_KERNEL");
        printf("# group native-two: %.1f s\n", now_s() - t0);
    }

    /* autotuned plans (a few shapes) */
    t0 = now_s();
    if (th_group_on("autotune")) {
        /* the context's setting, not the environment, turns it on */
        gpu_begin("autotune", NULL, NULL, 0, 0);
        g_autotuned = 0;
        th_run(set_benchmark, "autotune: dlt_ctx_set_cudnn_benchmark(ctx, 1)");
        for (int i = 0; i < 4; i++) {
            run_conv(DLT_F16, DLT_FORMAT_CHANNELS_LAST, i);
            run_conv(DLT_F32, DLT_FORMAT_CONTIGUOUS, i);
        }
        th_run(check_autotuned, "autotune: dlt_ctx_set_cudnn_benchmark timed the engines");
        gpu_end();
        printf("# group autotune: %.1f s\n", now_s() - t0);
    }

    /* cuDNN updating the running statistics itself: is its running variance unbiased? */
    t0 = now_s();
    if (th_group_on("cudnn-running")) {
        gpu_begin("cudnn-running", NULL, "cudnn", 0, 1);
        for (int d = 0; d < 3; d++) {
            run_bn(DTYPES[d], DLT_FORMAT_CHANNELS_LAST, 0);
            run_bn(DTYPES[d], DLT_FORMAT_CHANNELS_LAST, 2);
        }
        gpu_end();
        printf("# group cudnn-running: %.1f s\n", now_s() - t0);
    }

    /* BN plans built in the background */
    t0 = now_s();
    if (th_group_on("async")) {
        gpu_begin("async", NULL, NULL, 0, 0);
        th_run(test_async_64ch, "async: BN f16 NHWC 64ch residual relu, our kernels until cuDNN's plans arrive");
        th_run(test_async_8x8, "async: BN f16 NHWC 8x8, our kernels until cuDNN's plans arrive");
        th_run(test_async_1x1, "async: BN f16 NHWC 1x1 map relu, our kernels until cuDNN's plans arrive");
        gpu_end();
        printf("# group async: %.1f s\n", now_s() - t0);
    }

    /* DLT_CONV_IMPL=cudnn: the one-pixel outputs through cuDNN (the default takes GEMMs) */
    t0 = now_s();
    if (th_group_on("cudnn-only")) {
        gpu_begin("cudnn-only", "cudnn", NULL, 0, 0);
        g_gemm_plans = 0;
        for (int d = 0; d < 3; d++)
            for (int f = 0; f < 2; f++)
                for (int i = 0; i < N_CONV_CASES; i++) {
                    const conv_case *c = &CONV_CASES[i];
                    int64_t P, Q;
                    conv_out_hw(c, &P, &Q);
                    /* (padding past the kernel is left to the GEMMs: cuDNN may refuse it) */
                    if (P == 1 && Q == 1 && c->ph < c->R && c->pw < c->S) run_conv(DTYPES[d], FORMATS[f], i);
                }
        g_expect_gemm = 0;
        th_run(check_gemm_plans, "cudnn-only: no convolution ran as a GEMM");
        gpu_end();
        printf("# group cudnn-only: %.1f s\n", now_s() - t0);
    }

    /* DLT_CONV_GEMM=1: the 1x1 stride-1 channels-last convolutions through cuDNN (the
     * default runs them as GEMMs) */
    t0 = now_s();
    if (th_group_on("gemm1")) {
        setenv("DLT_CONV_GEMM", "1", 1);
        gpu_begin("gemm1", NULL, NULL, 0, 0);
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < N_CONV_CASES; i++) run_conv(DTYPES[d], DLT_FORMAT_CHANNELS_LAST, i);
        gpu_end();
        unsetenv("DLT_CONV_GEMM");
        printf("# group gemm1: %.1f s\n", now_s() - t0);
    }

    /* no workspace allowed (DLT_WORKSPACE_MAX=0): cuDNN's engines that need none, or the
     * first one over the limit where none fits, must still give the right convolutions */
    t0 = now_s();
    if (th_group_on("workspace0")) {
        setenv("DLT_WORKSPACE_MAX", "0", 1);
        gpu_begin("workspace0", NULL, NULL, 0, 0);
        for (int f = 0; f < 2; f++)
            for (int i = 0; i < N_CONV_CASES; i++) run_conv(DLT_F16, FORMATS[f], i);
        gpu_end();
        unsetenv("DLT_WORKSPACE_MAX");
        printf("# group workspace0: %.1f s\n", now_s() - t0);
    }

    unsetenv("DLT_BN_ASYNC_PLANS");
    unsetenv("DLT_CONV_IMPL");
    unsetenv("DLT_BN_IMPL");
    unsetenv("DLT_CUDNN_AUTOTUNE");
    unsetenv("DLT_BN_CUDNN_RUNNING_STATS");
    unsetenv("DLT_BN_NATIVE_MAX");
    unsetenv("DLT_BN_ONE_KERNEL");
    dlt_set_log_callback(NULL, NULL);
    dlt_ctx_destroy(g_cpu);
    return th_done();
}
