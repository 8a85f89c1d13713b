/*
 * test_golden.c - the ResNet-block golden file against PyTorch, in the manner of llm.c's
 * test_gpt2: tests/fixtures/resnet_block/resnet_block.golden.safetensors was made once by
 * tests/golden/gen_resnet_block_golden.py (PyTorch in float64; the tests never need torch).
 * The net: conv, BatchNorm, ReLU, max pool, two torchvision BasicBlocks (the second with a
 * strided 1x1 downsample: the residual add and the fused BN+ReLU both ways), global average
 * pool, flatten, linear; cross-entropy on 4 labels, training mode. Checked:
 *   - batch 0 from the initial state: logits and loss, and every parameter's gradient;
 *   - five steps of SGD (momentum, weight decay) under a GradScaler whose scale grows every
 *     second step: each step's loss, the scale after each update, and the whole state
 *     after the five steps (weights, BatchNorm running statistics, num_batches_tracked).
 * The same source is built twice: test_golden runs on the CPU in every run, cuda_golden
 * (GOLDEN_CUDA) on device 0 and skips without a GPU. Tolerances (relative norm errors, the
 * CPU's fp32 against float64; about ten times what the CPU shows): 2e-6 for the logits and
 * losses, 1e-5 for gradients and the trained state; CUDA (cuDNN's fp32 algorithms, no TF32)
 * ten times those. The scales must match exactly (powers of two).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define GOLDEN_FILE "tests/fixtures/resnet_block/resnet_block.golden.safetensors"
#define GOLDEN_VERSION "1"
#define REGENERATE "/usr/bin/python3 tests/golden/gen_resnet_block_golden.py"
#define STEPS 5
#define BATCH 4
#define IMAGE (3 * 8 * 8)

#ifdef GOLDEN_CUDA
#define TOL_SCALE 10.0
#define DEVICE_NAME "cuda"
#else
#define TOL_SCALE 1.0
#define DEVICE_NAME "cpu"
#endif

static char g_path[1200];
static dlt_safetensors *g_file;
static float g_x[STEPS * BATCH * IMAGE];
static int64_t g_y[STEPS * BATCH];

static dlt_ctx *device_ctx(void) {
#ifdef GOLDEN_CUDA
    CUDA_CTX_OR_SKIP(ctx);
    return ctx;
#else
    return th_cpu_ctx();
#endif
}

/* Opens the file once and checks its format and version (llm.c's rule: a stale file fails
 * with the command that makes a new one). */
static void open_golden(void) {
    if (g_file) return;
    const char *root = getenv("DLT_SOURCE_ROOT");
    snprintf(g_path, sizeof g_path, "%.1000s/%s", root ? root : ".", GOLDEN_FILE);
    CHECK_OK(dlt_safetensors_open(g_path, &g_file));
    const char *format = dlt_safetensors_metadata(g_file, "format");
    const char *version = dlt_safetensors_metadata(g_file, "version");
    REQUIRE(format && !strcmp(format, "dltrain-golden"), "%s is not a dltrain golden file", g_path);
    REQUIRE(version && !strcmp(version, GOLDEN_VERSION),
            "%s has version %s, this test reads version %s: regenerate it with %s", g_path,
            version ? version : "(none)", GOLDEN_VERSION, REGENERATE);
    dlt_ctx *cpu = th_cpu_ctx();
    dlt_tensor *x = NULL, *y = NULL;
    CHECK_OK(dlt_safetensors_get(g_file, cpu, "x", &x));
    CHECK_OK(dlt_safetensors_get(g_file, cpu, "y", &y));
    REQUIRE(dlt_tensor_numel(x) == STEPS * BATCH * IMAGE && dlt_tensor_numel(y) == STEPS * BATCH,
            "x has %lld elements, y %lld", (long long)dlt_tensor_numel(x), (long long)dlt_tensor_numel(y));
    CHECK_OK(dlt_tensor_copy_to_host(x, g_x, sizeof g_x));
    CHECK_OK(dlt_tensor_copy_to_host(y, g_y, sizeof g_y));
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    dlt_ctx_destroy(cpu);
}

/* Appends the module a constructor just made (st: the constructor's status, child: where it
 * wrote the module, read after the call). */
static void append(dlt_module *seq, dlt_status st, dlt_module **child) {
    CHECK_OK(st);
    CHECK_OK(dlt_sequential_append(seq, NULL, *child));
}

/* The generator's net under the same state_dict names, with the file's initial state. */
static dlt_module *make_net(dlt_ctx *ctx) {
    dlt_module *net = NULL, *m = NULL;
    CHECK_OK(dlt_sequential_create(ctx, &net));
    append(net, dlt_conv2d_create(ctx, 3, 8, 3, 3, 1, 1, 1, 1, 0, &m), &m);
    append(net, dlt_batchnorm2d_create(ctx, 8, 1e-5, 0.1, &m), &m);
    append(net, dlt_relu_create(ctx, &m), &m);
    append(net, dlt_max_pool2d_create(ctx, 2, 2, 0, &m), &m);
    append(net, dlt_basic_block_create(ctx, 8, 8, 1, &m), &m);
    append(net, dlt_basic_block_create(ctx, 8, 16, 2, &m), &m);
    append(net, dlt_global_avg_pool2d_create(ctx, &m), &m);
    append(net, dlt_flatten_create(ctx, &m), &m);
    append(net, dlt_linear_create(ctx, 16, 10, 1, &m), &m);
    dlt_module_load_options o;
    dlt_module_load_options_default(&o);
    o.file_prefix = "init."; /* strict: every name of the net, nothing else */
    CHECK_OK(dlt_module_load_safetensors(net, g_file, &o, NULL));
    return net;
}

static void batch(dlt_ctx *ctx, int t, dlt_tensor **x, dlt_tensor **y) {
    const int64_t xs[4] = {BATCH, 3, 8, 8}, ys[1] = {BATCH};
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, xs, 4, DLT_FORMAT_CONTIGUOUS, g_x + (size_t)t * BATCH * IMAGE,
                                  BATCH * IMAGE * sizeof(float), x));
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_I64, ys, 1, DLT_FORMAT_CONTIGUOUS, g_y + (size_t)t * BATCH,
                                  BATCH * sizeof(int64_t), y));
}

/* Relative norm error of t against the file's tensor `name` (float32 values of float64). */
static double err_vs(const dlt_tensor *t, const char *name) {
    dlt_ctx *cpu = th_cpu_ctx();
    dlt_tensor *want = NULL;
    CHECK_OK(dlt_safetensors_get(g_file, cpu, name, &want));
    REQUIRE(dlt_tensor_numel(want) == dlt_tensor_numel(t), "%s: %lld elements, the file has %lld", name,
            (long long)dlt_tensor_numel(t), (long long)dlt_tensor_numel(want));
    float *a = th_read_f32(t), *b = th_read_f32(want);
    REQUIRE(a && b, "%s: cannot read the values", name);
    const double e = th_rel_err_f(a, b, dlt_tensor_numel(t));
    free(a);
    free(b);
    dlt_tensor_release(want);
    dlt_ctx_destroy(cpu);
    return e;
}

static double value_at(const char *name, int64_t i) {
    dlt_ctx *cpu = th_cpu_ctx();
    dlt_tensor *t = NULL;
    double v = NAN;
    CHECK_OK(dlt_safetensors_get(g_file, cpu, name, &t));
    CHECK_OK(dlt_tensor_get(t, i, &v));
    dlt_tensor_release(t);
    dlt_ctx_destroy(cpu);
    return v;
}

static void test_forward_backward(void) {
    open_golden();
    dlt_ctx *ctx = device_ctx();
    dlt_module *net = make_net(ctx);
    dlt_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    batch(ctx, 0, &x, &y);
    CHECK_OK(dlt_module_forward(net, x, &logits));
    CHECK_OK(dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss));
    const double el = err_vs(logits, "logits");
    CHECK(el < 2e-6 * TOL_SCALE, "logits rel err %.3g", el);
    double lv = 0;
    CHECK_OK(dlt_tensor_item(loss, &lv));
    const double want = value_at("loss", 0);
    CHECK(fabs(lv - want) < 2e-6 * TOL_SCALE * fabs(want), "loss %.8f, PyTorch %.8f", lv, want);
    CHECK_OK(dlt_backward(loss, NULL));
    int32_t checked = 0;
    double worst = 0;
    for (int32_t i = 0; i < dlt_module_num_state(net); i++) {
        const char *name = NULL;
        dlt_tensor *t = NULL;
        int32_t is_param = 0;
        CHECK_OK(dlt_module_state_entry(net, i, &name, &t, &is_param));
        if (!is_param) continue;
        char gname[300];
        snprintf(gname, sizeof gname, "grad.%s", name);
        REQUIRE(dlt_tensor_grad(t), "%s has no gradient", name);
        const double eg = err_vs(dlt_tensor_grad(t), gname);
        CHECK(eg < 1e-5 * TOL_SCALE, "gradient of %s: rel err %.3g", name, eg);
        worst = eg > worst ? eg : worst;
        checked++;
    }
    CHECK(checked == 20, "%d gradients checked, the net has 20 parameters", checked);
    printf("# logits rel err %.3g, loss %.9f (PyTorch %.9f), worst gradient rel err %.3g\n", el, lv, want,
           worst);
    dlt_tensor_release(x), dlt_tensor_release(y), dlt_tensor_release(logits), dlt_tensor_release(loss);
    dlt_module_destroy(net);
    dlt_ctx_destroy(ctx);
}

static void test_sgd_scaler_steps(void) {
    open_golden();
    dlt_ctx *ctx = device_ctx();
    dlt_module *net = make_net(ctx);
    dlt_tensor *params[32];
    int32_t np = 0;
    CHECK_OK(dlt_module_params(net, params, 32, &np));
    dlt_optimizer *opt = NULL;
    dlt_grad_scaler *sc = NULL;
    CHECK_OK(dlt_sgd_create(params, np, 0.05, 0.9, 0.0, 1e-3, 0, 0, &opt));
    CHECK_OK(dlt_grad_scaler_create(ctx, 1024.0, 2.0, 0.5, 2, 1, &sc));
    double worst_loss = 0;
    for (int t = 0; t < STEPS; t++) {
        dlt_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL, *scaled = NULL;
        batch(ctx, t, &x, &y);
        CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
        CHECK_OK(dlt_module_forward(net, x, &logits));
        CHECK_OK(dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss));
        CHECK_OK(dlt_grad_scaler_scale(sc, loss, &scaled));
        CHECK_OK(dlt_backward(scaled, NULL));
        CHECK_OK(dlt_grad_scaler_step(sc, opt));
        CHECK_OK(dlt_grad_scaler_update(sc));
        double lv = 0, s = 0;
        CHECK_OK(dlt_tensor_item(loss, &lv));
        CHECK_OK(dlt_grad_scaler_get_scale(sc, &s));
        const double wl = value_at("losses", t), ws = value_at("scales", t);
        CHECK(fabs(lv - wl) < 2e-6 * TOL_SCALE * fabs(wl), "step %d: loss %.8f, PyTorch %.8f", t, lv, wl);
        CHECK(s == ws, "step %d: scale %g, PyTorch %g", t, s, ws);
        worst_loss = fabs(lv - wl) / fabs(wl) > worst_loss ? fabs(lv - wl) / fabs(wl) : worst_loss;
        dlt_tensor_release(x), dlt_tensor_release(y), dlt_tensor_release(logits);
        dlt_tensor_release(loss), dlt_tensor_release(scaled);
    }
    int32_t checked = 0;
    double worst = 0;
    for (int32_t i = 0; i < dlt_module_num_state(net); i++) {
        const char *name = NULL;
        dlt_tensor *t = NULL;
        int32_t is_param = 0;
        CHECK_OK(dlt_module_state_entry(net, i, &name, &t, &is_param));
        char fname[300];
        snprintf(fname, sizeof fname, "final.%s", name);
        if (dlt_tensor_dtype(t) == DLT_I64) { /* num_batches_tracked */
            double v = 0;
            CHECK_OK(dlt_tensor_item(t, &v));
            CHECK(v == value_at(fname, 0), "%s = %g after five steps, PyTorch %g", name, v, value_at(fname, 0));
        } else {
            const double e = err_vs(t, fname);
            CHECK(e < 1e-5 * TOL_SCALE, "%s after five steps: rel err %.3g", name, e);
            worst = e > worst ? e : worst;
        }
        checked++;
    }
    CHECK(checked == 20 + 6 * 3, "%d state entries checked, the net has 38", checked);
    printf("# worst rel err of the state after five steps %.3g (worst loss rel err %.3g)\n", worst, worst_loss);
    dlt_grad_scaler_destroy(sc);
    dlt_optimizer_destroy(opt);
    dlt_module_destroy(net);
    dlt_ctx_destroy(ctx);
}

int main(void) {
    th_run(test_forward_backward, DEVICE_NAME ": batch 0: logits, loss and all 20 gradients vs PyTorch");
    th_run(test_sgd_scaler_steps, DEVICE_NAME ": five SGD + GradScaler steps: losses, scales, final state vs PyTorch");
    dlt_safetensors_close(g_file);
    return th_done();
}
