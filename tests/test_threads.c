/*
 * test_threads.c - the CPU kernels' results do not depend on the thread count.
 *
 * The program runs itself (/proc/self/exe --dump) with OMP_NUM_THREADS=1, 2 and 3; the child
 * runs BatchNorm (forward with residual and ReLU, backward), max-pool with overlapping
 * windows, global average pool, conv2d (grouped, batched im2col chunks; the channels-last
 * im2row path; fp16 through the conversion path) and casts on tensors large enough for the
 * threaded loops to split, and prints one line per case: the thread count OpenMP reports and
 * an FNV-1a hash of every output and gradient byte. Each case passes when the hashes of all
 * three runs are equal (same bits) and each child ran with the thread count it was given.
 * Built without OpenMP, the cases skip.
 * OPENBLAS_NUM_THREADS=1 in every run: OpenBLAS reads OMP_NUM_THREADS too, and its sgemm
 * rounds differently on one thread than on several (measured here: the conv cases' bits
 * change between 1 and 2 OpenBLAS threads, not between 2, 3 and 4). That is OpenBLAS's
 * business, documented in docs/performance.md; this test is about our loops.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <unistd.h>

#include "harness.h"

#ifndef TEST_HAVE_OPENMP
#define TEST_HAVE_OPENMP 0
#endif

#define NCASES 8
static const char *case_names[NCASES] = {
    "bn_nchw_f32", "bn_nhwc_f32", "bn_nhwc_bf16", "maxpool_nchw_f32", "maxpool_nhwc_f16",
    "gavgpool",    "conv_nchw",   "conv_nhwc",
};

/* ---- child: run the ops, hash the results ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_tensor(uint64_t h, dlt_tensor *t) {
    if (!t) return fnv(h, "null", 4);
    size_t n = dlt_tensor_nbytes(t);
    void *buf = malloc(n ? n : 1);
    if (!buf || dlt_tensor_copy_to_host(t, buf, n) != DLT_OK) {
        free(buf);
        return 0;
    }
    h = fnv(h, buf, n);
    free(buf);
    return h;
}

#define C_OK(call)                                                                            \
    do {                                                                                      \
        if ((call) != DLT_OK) {                                                               \
            fprintf(stderr, "%s: %s\n", #call, dlt_last_error());                            \
            exit(3);                                                                          \
        }                                                                                     \
    } while (0)

static dlt_tensor *randn(dlt_ctx *ctx, int32_t dtype, int32_t fmt, int64_t n, int64_t c,
                         int64_t h, int64_t w, int grad) {
    const int64_t s[4] = {n, c, h, w};
    dlt_tensor *t;
    C_OK(dlt_tensor_empty(ctx, dtype, s, 4, fmt, &t));
    C_OK(dlt_tensor_rand_normal(t, 0.0, 1.0));
    if (grad) C_OK(dlt_tensor_set_requires_grad(t, 1));
    return t;
}

static dlt_tensor *vec(dlt_ctx *ctx, int64_t c, double fill_or_nan, int grad) {
    dlt_tensor *t;
    C_OK(dlt_tensor_empty(ctx, DLT_F32, &c, 1, DLT_FORMAT_CONTIGUOUS, &t));
    if (fill_or_nan == fill_or_nan) C_OK(dlt_tensor_fill(t, fill_or_nan));
    else C_OK(dlt_tensor_rand_uniform(t, 0.5, 1.5));
    if (grad) C_OK(dlt_tensor_set_requires_grad(t, 1));
    return t;
}

/* backward from y with a random upstream gradient of y's shape, dtype and format */
static void backward_random(dlt_ctx *ctx, dlt_tensor *y) {
    int64_t s[4];
    int32_t nd = dlt_tensor_shape(y, s, 4);
    dlt_tensor *g;
    C_OK(dlt_tensor_empty(ctx, dlt_tensor_dtype(y), s, nd, dlt_tensor_format(y), &g));
    C_OK(dlt_tensor_rand_normal(g, 0.0, 1.0));
    C_OK(dlt_backward(y, g));
    dlt_tensor_release(g);
}

static uint64_t case_bn(dlt_ctx *ctx, int32_t dtype, int32_t fmt, int64_t C) {
    dlt_tensor *x = randn(ctx, dtype, fmt, 6, C, 20, 20, 1);
    dlt_tensor *r = randn(ctx, dtype, fmt, 6, C, 20, 20, 1);
    dlt_tensor *gamma = vec(ctx, C, NAN, 1), *beta = vec(ctx, C, 0.1, 1);
    dlt_tensor *rm = vec(ctx, C, 0.0, 0), *rv = vec(ctx, C, 1.0, 0), *y;
    C_OK(dlt_batch_norm2d_act(x, r, 1, gamma, beta, rm, rv, 1, 0.1, 1e-5, &y));
    backward_random(ctx, y);
    uint64_t h = 14695981039346656037ull;
    h = hash_tensor(h, y);
    h = hash_tensor(h, rm);
    h = hash_tensor(h, rv);
    h = hash_tensor(h, dlt_tensor_grad(x));
    h = hash_tensor(h, dlt_tensor_grad(r));
    h = hash_tensor(h, dlt_tensor_grad(gamma));
    h = hash_tensor(h, dlt_tensor_grad(beta));
    dlt_tensor *in[] = {x, r, gamma, beta, rm, rv, y};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) dlt_tensor_release(in[i]);
    return h;
}

static uint64_t case_maxpool(dlt_ctx *ctx, int32_t dtype, int32_t fmt) {
    dlt_tensor *x = randn(ctx, dtype, fmt, 4, 24, 31, 31, 1), *y;
    C_OK(dlt_max_pool2d(x, 3, 3, 2, 2, 1, 1, &y)); /* overlapping windows: dx sums */
    backward_random(ctx, y);
    uint64_t h = hash_tensor(hash_tensor(14695981039346656037ull, y), dlt_tensor_grad(x));
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    return h;
}

static uint64_t case_gavgpool(dlt_ctx *ctx) {
    uint64_t h = 14695981039346656037ull;
    for (int f = 0; f < 2; f++) {
        dlt_tensor *x = randn(ctx, DLT_F32, f ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS,
                              8, 64, 17, 17, 1), *y;
        C_OK(dlt_global_avg_pool2d(x, &y));
        backward_random(ctx, y);
        h = hash_tensor(hash_tensor(h, y), dlt_tensor_grad(x));
        dlt_tensor_release(x);
        dlt_tensor_release(y);
    }
    return h;
}

static uint64_t case_conv(dlt_ctx *ctx, int32_t fmt) {
    uint64_t h = 14695981039346656037ull;
    /* fp32 in the format's own path, then fp16 through the conversion path */
    for (int half = 0; half < 2; half++) {
        const int32_t dt = half ? DLT_F16 : DLT_F32;
        const int64_t groups = fmt == DLT_FORMAT_CONTIGUOUS ? 2 : 1;
        dlt_tensor *x = randn(ctx, dt, fmt, 6, 16, 18, 18, 1);
        dlt_tensor *w = randn(ctx, dt, fmt, 24, 16 / groups, 3, 3, 1);
        dlt_tensor *b = NULL, *y, *xc = NULL;
        int64_t k = 24;
        C_OK(dlt_tensor_empty(ctx, dt, &k, 1, DLT_FORMAT_CONTIGUOUS, &b));
        C_OK(dlt_tensor_rand_normal(b, 0.0, 1.0));
        C_OK(dlt_tensor_set_requires_grad(b, 1));
        C_OK(dlt_conv2d(x, w, b, 1, 1, 1, 1, 1, 1, groups, &y));
        backward_random(ctx, y);
        h = hash_tensor(h, y);
        h = hash_tensor(h, dlt_tensor_grad(x));
        h = hash_tensor(h, dlt_tensor_grad(w));
        h = hash_tensor(h, dlt_tensor_grad(b));
        C_OK(dlt_cast(x, half ? DLT_F32 : DLT_BF16, &xc)); /* dtype conversion */
        h = hash_tensor(h, xc);
        dlt_tensor *in[] = {x, w, b, y, xc};
        for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) dlt_tensor_release(in[i]);
    }
    return h;
}

static int child(void) {
    /* libgomp is loaded with the library; POSIX's way to turn dlsym's result into a function */
    int (*max_threads)(void) = NULL;
    void *sym = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    memcpy(&max_threads, &sym, sizeof max_threads);
    const int nthreads = max_threads ? max_threads() : 0;
    dlt_ctx *ctx;
    C_OK(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx));
    for (int i = 0; i < NCASES; i++) {
        C_OK(dlt_ctx_set_seed(ctx, 1234 + (uint64_t)i));
        uint64_t h = 0;
        switch (i) {
        case 0: h = case_bn(ctx, DLT_F32, DLT_FORMAT_CONTIGUOUS, 20); break;
        case 1: h = case_bn(ctx, DLT_F32, DLT_FORMAT_CHANNELS_LAST, 40); break;
        case 2: h = case_bn(ctx, DLT_BF16, DLT_FORMAT_CHANNELS_LAST, 40); break;
        case 3: h = case_maxpool(ctx, DLT_F32, DLT_FORMAT_CONTIGUOUS); break;
        case 4: h = case_maxpool(ctx, DLT_F16, DLT_FORMAT_CHANNELS_LAST); break;
        case 5: h = case_gavgpool(ctx); break;
        case 6: h = case_conv(ctx, DLT_FORMAT_CONTIGUOUS); break;
        default: h = case_conv(ctx, DLT_FORMAT_CHANNELS_LAST); break;
        }
        printf("%s %d %016llx\n", case_names[i], nthreads, (unsigned long long)h);
    }
    dlt_ctx_destroy(ctx);
    return 0;
}

/* ---- parent: three runs, compared ---- */

#define NRUNS 3
static const int run_threads[NRUNS] = {1, 2, 3};
static int got_threads[NRUNS][NCASES];
static unsigned long long got_hash[NRUNS][NCASES];
static int run_ok[NRUNS];
static int cur_case;

static void run_children(void) {
    for (int r = 0; r < NRUNS; r++) {
        /* popen runs a shell, whose /proc/self/exe is the shell: name our own path */
        char self[4096], cmd[4200];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) continue;
        self[n] = '\0';
        snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=%d '%s' --dump", run_threads[r], self);
        FILE *f = popen(cmd, "r");
        if (!f) continue;
        char name[64];
        int th;
        unsigned long long h;
        int k = 0;
        while (k < NCASES && fscanf(f, "%63s %d %llx", name, &th, &h) == 3) {
            if (strcmp(name, case_names[k]) != 0) break;
            got_threads[r][k] = th;
            got_hash[r][k] = h;
            k++;
        }
        run_ok[r] = pclose(f) == 0 && k == NCASES;
    }
}

static void check_case(void) {
    const int i = cur_case;
    if (!TEST_HAVE_OPENMP) SKIP("built without OpenMP: the loops run on one thread");
    for (int r = 0; r < NRUNS; r++) {
        REQUIRE(run_ok[r], "the run with OMP_NUM_THREADS=%d failed (see stderr)", run_threads[r]);
        CHECK(got_threads[r][i] == run_threads[r], "OMP_NUM_THREADS=%d but OpenMP reported %d",
              run_threads[r], got_threads[r][i]);
        CHECK(got_hash[r][i] == got_hash[0][i], "%s: %d threads gave %016llx, 1 thread %016llx",
              case_names[i], run_threads[r], got_hash[r][i], got_hash[0][i]);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--dump")) return child();
    if (TEST_HAVE_OPENMP) run_children();
    for (cur_case = 0; cur_case < NCASES; cur_case++) th_run(check_case, case_names[cur_case]);
    return th_done();
}
