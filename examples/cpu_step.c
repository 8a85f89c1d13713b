/*
 * cpu_step.c - times one fp32 training step of a small CNN on the CPU backend: the figure
 * docs/performance.md's "CPU threading" section reports (run it with OMP_NUM_THREADS=1 and
 * with the machine's cores to see what the threaded BatchNorm, pooling and im2col loops buy).
 *
 * Model (CIFAR-sized, 32x32x3 inputs, 10 classes):
 *   conv3x3(3->32)+BN+ReLU, conv3x3(32->64)+BN+ReLU, maxpool 2,
 *   conv3x3(64->128)+BN+ReLU, maxpool 2, global average pool, linear(128->10)
 * Step: zero_grad, forward, cross-entropy, backward, SGD (lr 0.01, momentum 0.9).
 * Prints the median and the fastest of --blocks blocks of --steps steps (after --warmup
 * steps) and the last loss, for each requested memory format. On a shared machine the
 * fastest block is the steadier figure.
 *
 *   cpu_step [--batch 32] [--steps 5] [--blocks 5] [--warmup 2] [--format nchw,nhwc]
 *            [--kernels]
 *
 * --kernels times the threaded kernels alone on the model's largest activation (batch x 64
 * x 32 x 32): BatchNorm+ReLU forward and backward, 2x2 max-pool forward and backward, and
 * the 3x3 convolution 32->64 forward and backward (im2col/col2im around OpenBLAS GEMMs: run
 * it with OPENBLAS_NUM_THREADS=1 to see our loops alone). Best of 30 runs each: a busy
 * machine delays some runs, not the fastest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dltrain.h>

#define CK(call)                                                                              \
    do {                                                                                      \
        dlt_status s_ = (call);                                                               \
        if (s_ != DLT_OK) {                                                                   \
            fprintf(stderr, "cpu_step: %s failed: %s\n", #call, dlt_last_error());           \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* conv3x3(cin->cout, padding 1, no bias) + BN + ReLU appended to seq */
static dlt_status conv_bn_relu(dlt_ctx *ctx, dlt_module *seq, int64_t cin, int64_t cout) {
    dlt_module *m;
    dlt_status s = dlt_conv2d_create(ctx, cin, cout, 3, 3, 1, 1, 1, 1, 0, &m);
    if (!s) s = dlt_sequential_append(seq, NULL, m);
    if (!s) s = dlt_batchnorm2d_create(ctx, cout, 1e-5, 0.1, &m);
    if (!s) s = dlt_sequential_append(seq, NULL, m);
    if (!s) s = dlt_relu_create(ctx, &m);
    if (!s) s = dlt_sequential_append(seq, NULL, m);
    return s;
}

/* appends *m after its constructor's status `made` (m is read only after the call) */
static dlt_status append(dlt_module *seq, dlt_status made, dlt_module **m) {
    return made ? made : dlt_sequential_append(seq, NULL, *m);
}

static dlt_status build(dlt_ctx *ctx, dlt_module **out) {
    dlt_module *seq, *m = NULL;
    dlt_status s = dlt_sequential_create(ctx, &seq);
    if (s) return s;
    if (!s) s = conv_bn_relu(ctx, seq, 3, 32);
    if (!s) s = conv_bn_relu(ctx, seq, 32, 64);
    if (!s) s = append(seq, dlt_max_pool2d_create(ctx, 2, 2, 0, &m), &m);
    if (!s) s = conv_bn_relu(ctx, seq, 64, 128);
    if (!s) s = append(seq, dlt_max_pool2d_create(ctx, 2, 2, 0, &m), &m);
    if (!s) s = append(seq, dlt_global_avg_pool2d_create(ctx, &m), &m);
    if (!s) s = append(seq, dlt_flatten_create(ctx, &m), &m);
    if (!s) s = append(seq, dlt_linear_create(ctx, 128, 10, 1, &m), &m);
    if (s) {
        dlt_module_destroy(seq);
        return s;
    }
    *out = seq;
    return DLT_OK;
}

static int run(int64_t batch, int32_t format, int steps, int blocks, int warmup) {
    int rc = 1;
    dlt_ctx *ctx = NULL;
    dlt_module *model = NULL;
    dlt_optimizer *opt = NULL;
    dlt_tensor *x = NULL, *y = NULL, **params = NULL;
    double times[64], loss_v = 0.0;
    CK(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx));
    CK(dlt_ctx_set_seed(ctx, 1));
    CK(build(ctx, &model));
    if (format == DLT_FORMAT_CHANNELS_LAST) CK(dlt_module_set_format(model, format));
    int32_t np = dlt_module_num_params(model);
    params = calloc((size_t)np, sizeof *params);
    if (!params) goto done;
    CK(dlt_module_params(model, params, np, NULL));
    CK(dlt_sgd_create(params, np, 0.01, 0.9, 0.0, 0.0, 0, 0, &opt));
    const int64_t xs[4] = {batch, 3, 32, 32}, ys[1] = {batch};
    CK(dlt_tensor_empty(ctx, DLT_F32, xs, 4, format, &x));
    CK(dlt_tensor_rand_normal(x, 0.0, 1.0));
    int32_t *labels = malloc((size_t)batch * sizeof *labels);
    if (!labels) goto done;
    for (int64_t i = 0; i < batch; i++) labels[i] = (int32_t)(i % 10);
    dlt_status ls = dlt_tensor_from_host(ctx, DLT_I32, ys, 1, DLT_FORMAT_CONTIGUOUS, labels,
                                         (size_t)batch * sizeof *labels, &y);
    free(labels);
    CK(ls);
    for (int b = -1; b < blocks; b++) {
        const int n = b < 0 ? warmup : steps;
        const double t0 = now_s();
        for (int i = 0; i < n; i++) {
            dlt_tensor *logits = NULL, *loss = NULL;
            CK(dlt_optimizer_zero_grad(opt, 1));
            dlt_status s = dlt_module_forward(model, x, &logits);
            if (!s) s = dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss);
            if (!s) s = dlt_backward(loss, NULL);
            if (!s) s = dlt_optimizer_step(opt);
            if (!s) s = dlt_tensor_item(loss, &loss_v);
            dlt_tensor_release(logits);
            dlt_tensor_release(loss);
            CK(s);
        }
        if (b >= 0) times[b] = (now_s() - t0) * 1e3 / steps;
    }
    qsort(times, (size_t)blocks, sizeof times[0], cmp_d);
    printf("| %-6s | %5lld | %8.2f | %8.2f | %8.4f |\n",
           format == DLT_FORMAT_CHANNELS_LAST ? "nhwc" : "nchw", (long long)batch,
           times[blocks / 2], times[0], loss_v);
    rc = 0;
done:
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    dlt_optimizer_destroy(opt);
    free(params);
    dlt_module_destroy(model);
    dlt_ctx_destroy(ctx);
    return rc;
}

/* ---- --kernels ---- */

typedef struct kernel_case {
    dlt_tensor *x, *g, *w, *gamma, *beta, *rm, *rv;
    int op; /* 0 BN+ReLU, 1 max-pool, 2 conv */
} kernel_case;

/* forward and backward of one op; the tape frees what the forward saved */
static dlt_status kernel_once(kernel_case *k) {
    dlt_tensor *y = NULL;
    dlt_status s;
    if (k->op == 0)
        s = dlt_batch_norm2d_act(k->x, NULL, 1, k->gamma, k->beta, k->rm, k->rv, 1, 0.1, 1e-5, &y);
    else if (k->op == 1)
        s = dlt_max_pool2d(k->x, 2, 2, 2, 2, 0, 0, &y);
    else
        s = dlt_conv2d(k->x, k->w, NULL, 1, 1, 1, 1, 1, 1, 1, &y);
    if (!s) {
        int64_t sh[4];
        dlt_tensor_shape(y, sh, 4);
        dlt_tensor *g = k->g;
        if (k->op != 2) g = NULL; /* BN and pool keep x's shape or halve it: make one */
        if (!g) s = dlt_tensor_zeros(dlt_tensor_ctx(y), DLT_F32, sh, 4, dlt_tensor_format(y), &g);
        if (!s) s = dlt_tensor_fill(g, 0.5);
        if (!s) s = dlt_backward(y, g);
        if (g != k->g) dlt_tensor_release(g);
    }
    dlt_tensor_release(y);
    return s;
}

static int run_kernels(int64_t batch, int32_t format) {
    static const char *names[3] = {"batchnorm+relu fwd+bwd", "max_pool2d fwd+bwd", "conv2d 3x3 32->64 fwd+bwd"};
    int rc = 1;
    dlt_ctx *ctx = NULL;
    kernel_case k;
    memset(&k, 0, sizeof k);
    CK(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx));
    const int64_t xs[4] = {batch, 64, 32, 32}, cs[4] = {batch, 32, 32, 32}, ws[4] = {64, 32, 3, 3};
    const int64_t c64 = 64;
    for (int op = 0; op < 3; op++) {
        k.op = op;
        CK(dlt_tensor_empty(ctx, DLT_F32, op == 2 ? cs : xs, 4, format, &k.x));
        CK(dlt_tensor_rand_normal(k.x, 0.0, 1.0));
        CK(dlt_tensor_set_requires_grad(k.x, 1));
        if (op == 2) {
            CK(dlt_tensor_empty(ctx, DLT_F32, ws, 4, format, &k.w));
            CK(dlt_tensor_rand_normal(k.w, 0.0, 0.1));
            CK(dlt_tensor_set_requires_grad(k.w, 1));
            CK(dlt_tensor_empty(ctx, DLT_F32, xs, 4, format, &k.g));
            CK(dlt_tensor_fill(k.g, 0.5));
        } else if (op == 0) {
            CK(dlt_tensor_empty(ctx, DLT_F32, &c64, 1, DLT_FORMAT_CONTIGUOUS, &k.gamma));
            CK(dlt_tensor_fill(k.gamma, 1.0));
            CK(dlt_tensor_set_requires_grad(k.gamma, 1));
            CK(dlt_tensor_zeros(ctx, DLT_F32, &c64, 1, DLT_FORMAT_CONTIGUOUS, &k.beta));
            CK(dlt_tensor_set_requires_grad(k.beta, 1));
            CK(dlt_tensor_zeros(ctx, DLT_F32, &c64, 1, DLT_FORMAT_CONTIGUOUS, &k.rm));
            CK(dlt_tensor_empty(ctx, DLT_F32, &c64, 1, DLT_FORMAT_CONTIGUOUS, &k.rv));
            CK(dlt_tensor_fill(k.rv, 1.0));
        }
        double best = 1e30;
        for (int r = 0; r < 32; r++) {
            const double t0 = now_s();
            CK(kernel_once(&k));
            const double ms = (now_s() - t0) * 1e3;
            if (r >= 2 && ms < best) best = ms; /* two warm-up runs */
        }
        printf("| %-6s | %-26s | %8.2f |\n", format == DLT_FORMAT_CHANNELS_LAST ? "nhwc" : "nchw",
               names[op], best);
        dlt_tensor *all[] = {k.x, k.g, k.w, k.gamma, k.beta, k.rm, k.rv};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dlt_tensor_release(all[i]);
        memset(&k, 0, sizeof k);
    }
    rc = 0;
done:
    {
        dlt_tensor *all[] = {k.x, k.g, k.w, k.gamma, k.beta, k.rm, k.rv};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dlt_tensor_release(all[i]);
    }
    dlt_ctx_destroy(ctx);
    return rc;
}

int main(int argc, char **argv) {
    long long batch = 32;
    int steps = 5, blocks = 5, warmup = 2, nchw = 1, nhwc = 1, kernels = 0, bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--kernels")) {
            kernels = 1;
            continue;
        }
        if (!v) {
            bad = 1;
            break;
        }
        i++;
        if (!strcmp(a, "--batch")) batch = atoll(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--blocks")) blocks = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--format")) nchw = strstr(v, "nchw") != NULL, nhwc = strstr(v, "nhwc") != NULL;
        else bad = 1;
    }
    if (bad || batch < 1 || steps < 1 || blocks < 1 || blocks > 64 || warmup < 0 || !(nchw || nhwc)) {
        fprintf(stderr, "usage: cpu_step [--batch 32] [--steps 5] [--blocks 5] [--warmup 2] "
                        "[--format nchw,nhwc] [--kernels]\n");
        return 2;
    }
    const char *thr = getenv("OMP_NUM_THREADS");
    int rc = 0;
    if (kernels) {
        printf("# libdltrain %s cpu_step --kernels: fp32, best of 30 runs; OMP_NUM_THREADS=%s\n",
               dlt_version_string(), thr ? thr : "(unset)");
        printf("| layout | kernel (batch %lld)          | best ms  |\n"
               "|--------|----------------------------|----------|\n",
               batch);
        if (nchw) rc |= run_kernels(batch, DLT_FORMAT_CONTIGUOUS);
        if (nhwc) rc |= run_kernels(batch, DLT_FORMAT_CHANNELS_LAST);
        return rc;
    }
    printf("# libdltrain %s cpu_step: small CNN, fp32, 32x32, SGD; OMP_NUM_THREADS=%s; %d blocks "
           "of %d steps\n", dlt_version_string(), thr ? thr : "(unset)", blocks, steps);
    printf("| layout | batch | median ms/step | best ms/step | loss |\n"
           "|--------|-------|----------|----------|----------|\n");
    if (nchw) rc |= run(batch, DLT_FORMAT_CONTIGUOUS, steps, blocks, warmup);
    if (nhwc) rc |= run(batch, DLT_FORMAT_CHANNELS_LAST, steps, blocks, warmup);
    return rc;
}
