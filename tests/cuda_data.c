/*
 * cuda_data.c - the data pipeline on CUDA against the CPU backend: uploaded datasets
 * (byte checks), epoch orders (Philox keys + CUB radix sort vs qsort), and batches bit for
 * bit equal to the CPU's for every output dtype, memory format and label dtype, with and
 * without normalisation and augmentation (Philox is shared), over whole epochs including
 * the final partial batch.
 *
 * Device cursor: the x/y tensors keep their device addresses from step to step (the partial
 * batch is a view at the same address); a "replay" emulated by marking the context as
 * capturing (host position frozen, only the device cursor moves) walks through the epoch;
 * and a real captured step (dlt_graph) that calls dlt_loader_next reads a new batch on each
 * replay. Evaluation counts on the device and agrees with the CPU.
 *
 * Datasets over tensors (generic records: copies and conversions, channels-last, no labels)
 * and image records of other geometries (one channel, odd sizes that take the scalar
 * stores, images too large to stage in shared memory) give the CPU's batches bit for bit;
 * token windows drawn on the device equal the CPU's draws, also from a captured step's
 * replays. These cases were written without a GPU (compile-checked only) for the next GPU
 * session.
 *
 * Every case skips without a CUDA device. Timings of the gather are printed as TAP comments.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../lib/data/data_internal.h" /* white-box: buffer addresses, ctx->capturing */
#include "harness.h"

#define REC 3073
#define IMG 3072

static dlt_ctx *g_cpu, *g_cuda;
static char g_no_cuda[256];
static char g_root[256];

#define NEED_CUDA()                                                                           \
    do {                                                                                      \
        if (!g_cuda) SKIP("%s", g_no_cuda);                                                   \
    } while (0)

static void *read_bytes(const dlt_tensor *t) {
    size_t n = dlt_tensor_nbytes(t);
    void *p = malloc(n ? n : 1);
    if (dlt_tensor_copy_to_host(t, p, n) != DLT_OK) {
        printf("# read_bytes: %s\n", dlt_last_error());
        free(p);
        return NULL;
    }
    return p;
}

/* Byte-compares two tensors of the same dtype/shape/format on any contexts. */
static int same_tensor(const dlt_tensor *a, const dlt_tensor *b, const char *what) {
    if (dlt_tensor_dtype(a) != dlt_tensor_dtype(b) || dlt_tensor_format(a) != dlt_tensor_format(b) ||
        dlt_tensor_numel(a) != dlt_tensor_numel(b)) {
        printf("# %s: tensors differ in dtype/format/size\n", what);
        return 0;
    }
    unsigned char *pa = read_bytes(a), *pb = read_bytes(b);
    int ok = pa && pb && memcmp(pa, pb, dlt_tensor_nbytes(a)) == 0;
    if (!ok && pa && pb) {
        size_t es = dlt_dtype_size(dlt_tensor_dtype(a));
        for (size_t i = 0; i < dlt_tensor_nbytes(a); i++)
            if (pa[i] != pb[i]) {
                printf("# %s: first difference at element %zu\n", what, i / es);
                break;
            }
    }
    free(pa);
    free(pb);
    return ok;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- a tiny release in the binary format ---- */

static char g_rel[300];

static uint8_t pixel_byte(uint32_t file, uint32_t rec, uint32_t i) {
    uint32_t h = file * 2654435761u ^ (rec + 1) * 40503u ^ i * 2246822519u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (uint8_t)h;
}

static void write_release(void) {
    snprintf(g_rel, sizeof g_rel, "%s/release", g_root);
    if (mkdir(g_rel, 0700) != 0 && errno != EEXIST) exit(1);
    for (int file = 1; file <= 2; file++) {
        int n = file == 1 ? 9 : 5;
        uint8_t *buf = malloc((size_t)n * REC);
        for (int r = 0; r < n; r++) {
            buf[r * REC] = (uint8_t)((r * 7 + file) % 10);
            for (int i = 0; i < IMG; i++) buf[r * REC + 1 + i] = pixel_byte((uint32_t)file, (uint32_t)r, (uint32_t)i);
        }
        char p[400];
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", g_rel, file);
        FILE *f = fopen(p, "wb");
        if (!f || fwrite(buf, 1, (size_t)n * REC, f) != (size_t)n * REC) exit(1);
        fclose(f);
        free(buf);
    }
}

/* ---- tests ---- */

static void test_datasets_upload(void) {
    NEED_CUDA();
    dlt_dataset *a = NULL, *b = NULL;
    CHECK_OK(dlt_cifar10_open(g_cpu, g_rel, DLT_SPLIT_TRAIN, &a));
    CHECK_OK(dlt_cifar10_open(g_cuda, g_rel, DLT_SPLIT_TRAIN, &b));
    CHECK(dlt_dataset_size(b) == 14);
    for (int64_t i = 0; i < 14; i++) {
        uint8_t pa[IMG], pb[IMG];
        int32_t la = -1, lb = -2;
        CHECK_OK(dlt_dataset_get(a, i, pa, IMG, &la));
        CHECK_OK(dlt_dataset_get(b, i, pb, IMG, &lb));
        CHECK(memcmp(pa, pb, IMG) == 0 && la == lb, "record %lld", (long long)i);
    }
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
    CHECK_OK(dlt_synthetic_dataset_create(g_cpu, 333, 10, 21, 1, &a));
    CHECK_OK(dlt_synthetic_dataset_create(g_cuda, 333, 10, 21, 1, &b));
    CHECK(same_tensor(a->images, b->images, "synthetic images"));
    CHECK(same_tensor(a->labels, b->labels, "synthetic labels"));
    /* reading the device inside a capture is refused */
    g_cuda->capturing = 1;
    uint8_t pix[IMG];
    CHECK_STATUS(dlt_dataset_get(b, 0, pix, IMG, NULL), DLT_ERR_INVALID_STATE);
    g_cuda->capturing = 0;
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
}

static void test_epoch_order(void) {
    NEED_CUDA();
    const int64_t sizes[3] = {1, 14, 50000};
    const uint64_t seeds[3] = {0, 42, UINT64_C(0x8000000000000005)};
    int64_t *oa = malloc(50000 * sizeof *oa), *ob = malloc(50000 * sizeof *ob);
    for (int s = 0; s < 3; s++) {
        dlt_dataset *a = NULL, *b = NULL;
        CHECK_OK(dlt_synthetic_dataset_create(g_cpu, sizes[s], 10, 1, 0, &a));
        CHECK_OK(dlt_synthetic_dataset_create(g_cuda, sizes[s], 10, 1, 0, &b));
        for (int k = 0; k < 3; k++) {
            dlt_loader *la = NULL, *lb = NULL;
            CHECK_OK(dlt_loader_create(a, 64, 1, 0, seeds[k], &la));
            CHECK_OK(dlt_loader_create(b, 64, 1, 0, seeds[k], &lb));
            const int64_t epochs[3] = {0, 1, 7};
            for (int e = 0; e < 3; e++) {
                CHECK_OK(dlt_loader_epoch_order(la, epochs[e], oa, sizes[s]));
                CHECK_OK(dlt_loader_epoch_order(lb, epochs[e], ob, sizes[s]));
                CHECK(memcmp(oa, ob, (size_t)sizes[s] * sizeof *oa) == 0,
                      "n %lld seed %llu epoch %lld", (long long)sizes[s], (unsigned long long)seeds[k],
                      (long long)epochs[e]);
            }
            dlt_loader_destroy(la);
            dlt_loader_destroy(lb);
        }
        dlt_dataset_destroy(a);
        dlt_dataset_destroy(b);
    }
    free(oa);
    free(ob);
}

/* Whole epochs on both backends for one output configuration; 1 when every batch matched. */
static int compare_epochs(dlt_dataset *a, dlt_dataset *b, int64_t bs, int32_t dtype, int32_t fmt,
                          int32_t ldt, int norm, int aug, int64_t epochs) {
    const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, stdv[3] = {0.2470f, 0.2435f, 0.2616f};
    dlt_loader *la = NULL, *lb = NULL;
    int ok = 1;
    if (dlt_loader_create(a, bs, 1, 0, 99, &la) != DLT_OK || dlt_loader_create(b, bs, 1, 0, 99, &lb) != DLT_OK)
        return 0;
    dlt_loader *both[2] = {la, lb};
    for (int i = 0; i < 2; i++) {
        if (dlt_loader_set_output(both[i], dtype, fmt, ldt) != DLT_OK ||
            dlt_loader_set_normalize(both[i], norm ? mean : NULL, stdv) != DLT_OK ||
            dlt_loader_set_augment(both[i], aug ? 4 : 0, aug) != DLT_OK)
            ok = 0;
    }
    void *full_addr = NULL;
    for (int64_t e = 0; e < epochs && ok; e++) {
        int64_t batches = 0;
        for (;;) {
            dlt_tensor *xa = NULL, *ya = NULL, *xb = NULL, *yb = NULL;
            int32_t ha = 0, hb = 0;
            if (dlt_loader_next(la, &xa, &ya, &ha) != DLT_OK || dlt_loader_next(lb, &xb, &yb, &hb) != DLT_OK) {
                printf("# next: %s\n", dlt_last_error());
                ok = 0;
                break;
            }
            if (ha != hb) ok = 0;
            if (!ha || !hb) break;
            char what[128];
            snprintf(what, sizeof what, "dtype %d format %d labels %d norm %d aug %d epoch %lld batch %lld",
                     dtype, fmt, ldt, norm, aug, (long long)e, (long long)batches);
            if (!same_tensor(xa, xb, what) || !same_tensor(ya, yb, what)) ok = 0;
            /* one device address for every batch, the partial one included */
            if (!full_addr) full_addr = dlt__data(xb);
            if (dlt__data(xb) != full_addr) {
                printf("# %s: x moved from %p to %p\n", what, full_addr, dlt__data(xb));
                ok = 0;
            }
            batches++;
        }
        if (batches != dlt_loader_num_batches(lb)) ok = 0;
    }
    dlt_loader_destroy(la);
    dlt_loader_destroy(lb);
    return ok;
}

static void test_batches_match_cpu(void) {
    NEED_CUDA();
    dlt_dataset *a = NULL, *b = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(g_cpu, 1000, 10, 4, 1, &a));
    CHECK_OK(dlt_synthetic_dataset_create(g_cuda, 1000, 10, 4, 1, &b));
    const int32_t dts[3] = {DLT_F32, DLT_F16, DLT_BF16};
    const int32_t fmts[2] = {DLT_FORMAT_CONTIGUOUS, DLT_FORMAT_CHANNELS_LAST};
    for (int d = 0; d < 3; d++)
        for (int f = 0; f < 2; f++)
            for (int mode = 0; mode < 3; mode++) {
                /* mode 0: ToTensor only, 1: normalised, 2: normalised and augmented */
                int32_t ldt = (d + f + mode) % 2 ? DLT_I32 : DLT_I64;
                CHECK(compare_epochs(a, b, 96, dts[d], fmts[f], ldt, mode >= 1, mode == 2, 2),
                      "dtype %d format %d mode %d", dts[d], fmts[f], mode);
            }
    /* a batch larger than the dataset, and batch 1 */
    CHECK(compare_epochs(a, b, 1500, DLT_F16, DLT_FORMAT_CHANNELS_LAST, DLT_I64, 1, 1, 2));
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
    CHECK_OK(dlt_synthetic_dataset_create(g_cpu, 7, 10, 4, 1, &a));
    CHECK_OK(dlt_synthetic_dataset_create(g_cuda, 7, 10, 4, 1, &b));
    CHECK(compare_epochs(a, b, 1, DLT_F32, DLT_FORMAT_CONTIGUOUS, DLT_I64, 0, 1, 2));
    /* the tiny CIFAR files */
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
    CHECK_OK(dlt_cifar10_open(g_cpu, g_rel, DLT_SPLIT_TRAIN, &a));
    CHECK_OK(dlt_cifar10_open(g_cuda, g_rel, DLT_SPLIT_TRAIN, &b));
    CHECK(compare_epochs(a, b, 4, DLT_BF16, DLT_FORMAT_CONTIGUOUS, DLT_I32, 1, 1, 3));
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
}

static void test_device_cursor(void) {
    NEED_CUDA();
    dlt_dataset *a = NULL, *b = NULL;
    dlt_loader *la = NULL, *lb = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(g_cpu, 100, 10, 8, 1, &a));
    CHECK_OK(dlt_synthetic_dataset_create(g_cuda, 100, 10, 8, 1, &b));
    CHECK_OK(dlt_loader_create(a, 16, 1, 0, 5, &la));
    CHECK_OK(dlt_loader_create(b, 16, 1, 0, 5, &lb));
    CHECK_OK(dlt_loader_set_augment(la, 4, 1));
    CHECK_OK(dlt_loader_set_augment(lb, 4, 1));
    CHECK_OK(dlt_loader_set_output(la, DLT_F16, DLT_FORMAT_CHANNELS_LAST, DLT_I64));
    CHECK_OK(dlt_loader_set_output(lb, DLT_F16, DLT_FORMAT_CHANNELS_LAST, DLT_I64));
    dlt_tensor *xa = NULL, *ya = NULL, *xb = NULL, *yb = NULL;
    int32_t has = 0;
    CHECK_OK(dlt_loader_next(la, &xa, &ya, &has)); /* warm-up: batch 0 on both */
    CHECK_OK(dlt_loader_next(lb, &xb, &yb, &has));
    void *addr = dlt__data(xb);
    for (int k = 1; k < 6; k++) {
        g_cuda->capturing = 1; /* as during a replay: host position frozen */
        CHECK_OK(dlt_loader_next(lb, &xb, &yb, &has));
        g_cuda->capturing = 0;
        CHECK(lb->batch == 1, "host position %lld", (long long)lb->batch);
        CHECK(dlt__data(xb) == addr);
        CHECK_OK(dlt_loader_next(la, &xa, &ya, &has));
        CHECK(same_tensor(xa, xb, "replayed x") && same_tensor(ya, yb, "replayed y"), "step %d", k);
        dlt_data_cursor cur = {-1, -1};
        CHECK_OK(dlt_tensor_copy_to_host(lb->cursor, &cur, sizeof cur));
        CHECK(cur.batch == k + 1 && cur.epoch == 0, "device cursor %lld/%lld after step %d",
              (long long)cur.batch, (long long)cur.epoch, k);
    }
    /* eager epoch start resets the device cursor */
    CHECK_OK(dlt_loader_start_epoch(lb, 3));
    dlt_data_cursor cur = {-1, -1};
    CHECK_OK(dlt_tensor_copy_to_host(lb->cursor, &cur, sizeof cur));
    CHECK(cur.batch == 0 && cur.epoch == 3);
    g_cuda->capturing = 1;
    CHECK_STATUS(dlt_loader_start_epoch(lb, 4), DLT_ERR_INVALID_STATE);
    g_cuda->capturing = 0;
    dlt_loader_destroy(la);
    dlt_loader_destroy(lb);
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
}

typedef struct {
    dlt_loader *ld;
    dlt_tensor *x, *y;
} step_state;

static dlt_status loader_step(void *user) {
    step_state *s = user;
    int32_t has = 0;
    dlt_status st = dlt_loader_next(s->ld, &s->x, &s->y, &has);
    if (st == DLT_OK && !has) return DLT_ERR_INVALID_STATE;
    return st;
}

/* A real captured step that only takes the next batch: each replay reads the next one. */
static void test_graph_replay(void) {
    NEED_CUDA();
    dlt_dataset *a = NULL, *b = NULL;
    dlt_loader *la = NULL;
    step_state s = {0};
    CHECK_OK(dlt_synthetic_dataset_create(g_cpu, 200, 10, 6, 1, &a));
    CHECK_OK(dlt_synthetic_dataset_create(g_cuda, 200, 10, 6, 1, &b));
    CHECK_OK(dlt_loader_create(a, 32, 1, 1, 17, &la));
    CHECK_OK(dlt_loader_create(b, 32, 1, 1, 17, &s.ld));
    CHECK_OK(dlt_loader_set_augment(la, 4, 1));
    CHECK_OK(dlt_loader_set_augment(s.ld, 4, 1));
    dlt_graph *g = NULL;
    CHECK_OK(dlt_graph_create(g_cuda, loader_step, &s, 1, &g)); /* warm-up takes batch 0 */
    printf("# loader step %s (%lld nodes)\n", dlt_graph_is_captured(g) ? "captured" : "eager fallback",
           (long long)dlt_graph_num_nodes(g));
    dlt_tensor *xa = NULL, *ya = NULL;
    int32_t has = 0;
    CHECK_OK(dlt_loader_next(la, &xa, &ya, &has));
    for (int k = 1; k < 6; k++) { /* 200 / 32 with drop_last: 6 batches */
        CHECK_OK(dlt_graph_run(g));
        CHECK_OK(dlt_loader_next(la, &xa, &ya, &has));
        CHECK(same_tensor(xa, s.x, "graph x") && same_tensor(ya, s.y, "graph y"), "replay %d", k);
    }
    /* next epoch: started eagerly between replays */
    CHECK_OK(dlt_loader_start_epoch(s.ld, 1));
    CHECK_OK(dlt_loader_start_epoch(la, 1));
    for (int k = 0; k < 3; k++) {
        CHECK_OK(dlt_graph_run(g));
        CHECK_OK(dlt_loader_next(la, &xa, &ya, &has));
        CHECK(same_tensor(xa, s.x, "graph x") && same_tensor(ya, s.y, "graph y"), "epoch 1 replay %d", k);
    }
    dlt_graph_destroy(g);
    dlt_loader_destroy(la);
    dlt_loader_destroy(s.ld);
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
}

static dlt_status make_probe_model(dlt_ctx *ctx, dlt_module **out) {
    dlt_module *seq = NULL, *flat = NULL, *fc = NULL;
    dlt_tensor *w = NULL;
    dlt_status st = dlt_sequential_create(ctx, &seq);
    if (st == DLT_OK) st = dlt_flatten_create(ctx, &flat);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, flat);
    if (st == DLT_OK) st = dlt_linear_create(ctx, IMG, 10, 1, &fc);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, fc);
    if (st == DLT_OK) st = dlt_module_find(seq, "1.weight", &w);
    float *wv = calloc(10 * IMG, sizeof(float));
    /* logit k = mean of channel (k % 3) over row k: the class of the brightest row */
    for (int k = 0; k < 10; k++)
        for (int x = 0; x < 32; x++) wv[k * IMG + (k % 3) * 1024 + k * 32 + x] = 1.0f / 32;
    if (st == DLT_OK) st = dlt_tensor_copy_from_host(w, wv, 10 * IMG * sizeof(float));
    free(wv);
    if (st == DLT_OK) st = dlt_module_find(seq, "1.bias", &w);
    if (st == DLT_OK) st = dlt_tensor_fill(w, 0.0);
    if (st != DLT_OK) {
        dlt_module_destroy(seq);
        return st;
    }
    *out = seq;
    return DLT_OK;
}

static void test_evaluate_matches_cpu(void) {
    NEED_CUDA();
    dlt_dataset *a = NULL, *b = NULL;
    dlt_loader *la = NULL, *lb = NULL;
    dlt_module *ma = NULL, *mb = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(g_cpu, 500, 10, 12, 1, &a));
    CHECK_OK(dlt_synthetic_dataset_create(g_cuda, 500, 10, 12, 1, &b));
    CHECK_OK(dlt_loader_create(a, 128, 0, 0, 0, &la));
    CHECK_OK(dlt_loader_create(b, 128, 0, 0, 0, &lb));
    CHECK_OK(make_probe_model(g_cpu, &ma));
    CHECK_OK(make_probe_model(g_cuda, &mb));
    double acc_a = -1, acc_b = -1;
    CHECK_OK(dlt_evaluate_accuracy(ma, la, &acc_a));
    dlt_status st = dlt_evaluate_accuracy(mb, lb, &acc_b);
    if (st == DLT_ERR_NOT_SUPPORTED) {
        dlt_module_destroy(ma);
        dlt_module_destroy(mb);
        dlt_loader_destroy(la);
        dlt_loader_destroy(lb);
        dlt_dataset_destroy(a);
        dlt_dataset_destroy(b);
        SKIP("%s", dlt_last_error());
    }
    CHECK_OK(st);
    /* the learnable patterns make some rows brighter than others: neither 0 nor 1 */
    CHECK(acc_a > 0.0 && acc_a < 1.0, "cpu accuracy %g", acc_a);
    CHECK(fabs(acc_a - acc_b) <= 2.0 / 500, "cpu %g cuda %g", acc_a, acc_b);
    printf("# probe accuracy: cpu %.4f cuda %.4f\n", acc_a, acc_b);
    CHECK(dlt_module_is_training(mb) == 1 && dlt_grad_is_enabled(g_cuda) == 1);
    dlt_module_destroy(ma);
    dlt_module_destroy(mb);
    dlt_loader_destroy(la);
    dlt_loader_destroy(lb);
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
}

static int real_dir(char *buf, size_t n) {
    const char *env = getenv("DLT_CIFAR10_DIR");
    if (env && env[0]) {
        snprintf(buf, n, "%s", env);
    } else {
        const char *root = getenv("DLT_SOURCE_ROOT");
        if (!root) return 0;
        snprintf(buf, n, "%s/../shared/data/cifar10-subset", root);
    }
    char p[600];
    snprintf(p, sizeof p, "%s/data_batch_1.bin", buf);
    return access(p, R_OK) == 0;
}

/* The real subset on the GPU: the same batches as the CPU, and the gather's speed. */
static void test_real_subset_and_speed(void) {
    NEED_CUDA();
    char dir[512];
    dlt_dataset *a = NULL, *b = NULL;
    int have_real = real_dir(dir, sizeof dir);
    if (have_real) {
        CHECK_OK(dlt_cifar10_open(g_cpu, dir, DLT_SPLIT_TRAIN, &a));
        CHECK_OK(dlt_cifar10_open(g_cuda, dir, DLT_SPLIT_TRAIN, &b));
        CHECK(same_tensor(a->images, b->images, "real images") && same_tensor(a->labels, b->labels, "real labels"));
        CHECK(compare_epochs(a, b, 256, DLT_F16, DLT_FORMAT_CHANNELS_LAST, DLT_I64, 1, 1, 1));
        dlt_dataset_destroy(a);
        dlt_dataset_destroy(b);
    } else {
        printf("# CIFAR-10 subset not found: speed only\n");
    }
    /* speed: a CIFAR-10-sized training set, batch 256, every output type */
    CHECK_OK(dlt_synthetic_dataset_create(g_cuda, 50000, 10, 1, 0, &b));
    const int32_t dts[3] = {DLT_F32, DLT_F16, DLT_BF16};
    for (int d = 0; d < 3; d++)
        for (int aug = 0; aug < 2; aug++) {
            dlt_loader *ld = NULL;
            CHECK_OK(dlt_loader_create(b, 256, 1, 0, 1, &ld));
            CHECK_OK(dlt_loader_set_output(ld, dts[d], d ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS, DLT_I64));
            CHECK_OK(dlt_loader_set_augment(ld, aug ? 4 : 0, aug));
            dlt_tensor *x = NULL, *y = NULL;
            int32_t has = 0;
            CHECK_OK(dlt_loader_next(ld, &x, &y, &has)); /* epoch start (sort) outside timing */
            CHECK_OK(dlt_ctx_synchronize(g_cuda));
            double t0 = now_s();
            int n = 0;
            for (;;) {
                CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
                if (!has) break;
                n++;
            }
            CHECK_OK(dlt_ctx_synchronize(g_cuda));
            double t1 = now_s();
            CHECK(n == 195);
            double t2 = now_s();
            CHECK_OK(dlt_loader_start_epoch(ld, 1));
            CHECK_OK(dlt_ctx_synchronize(g_cuda));
            double t3 = now_s();
            printf("# gather %s %s aug %d: %.1f us/batch (eager, incl. launch); epoch shuffle %.1f us\n",
                   dlt_dtype_name(dts[d]), d ? "NHWC" : "NCHW", aug, 1e6 * (t1 - t0) / n, 1e6 * (t3 - t2));
            dlt_loader_destroy(ld);
        }
    dlt_dataset_destroy(b);
}


/* ---- datasets over tensors, other image geometries, token windows ---- */

/* The same host data as a tensor on both contexts. */
static void twin_tensors(int32_t dtype, const int64_t *shape, int32_t nd, const void *data,
                         dlt_tensor **a, dlt_tensor **b) {
    int64_t n = 1;
    for (int32_t i = 0; i < nd; i++) n *= shape[i];
    size_t bytes = (size_t)n * dlt_dtype_size(dtype);
    *a = *b = NULL;
    if (dlt_tensor_from_host(g_cpu, dtype, shape, nd, DLT_FORMAT_CONTIGUOUS, data, bytes, a) != DLT_OK ||
        dlt_tensor_from_host(g_cuda, dtype, shape, nd, DLT_FORMAT_CONTIGUOUS, data, bytes, b) != DLT_OK)
        printf("# twin_tensors: %s\n", dlt_last_error());
}

/* Two epochs of shuffled batches (the last one partial) from the same dataset on both
 * backends, with the output settings given; 1 when every batch matched bit for bit. */
static int compare_loaders(dlt_dataset *a, dlt_dataset *b, int64_t bs, int32_t dtype, int32_t fmt,
                           int32_t channels, int aug, const char *what) {
    const float mean[4] = {0.5f, 0.25f, 0.125f, 0.3f}, stdv[4] = {0.2f, 0.3f, 0.4f, 0.5f};
    dlt_loader *la = NULL, *lb = NULL;
    int ok = dlt_loader_create(a, bs, 1, 0, 17, &la) == DLT_OK && dlt_loader_create(b, bs, 1, 0, 17, &lb) == DLT_OK;
    dlt_loader *both[2] = {la, lb};
    for (int i = 0; ok && i < 2; i++) {
        if (dlt_loader_set_output(both[i], dtype, fmt, DLT_I32) != DLT_OK) ok = 0;
        if (ok && channels && dlt_loader_set_normalize(both[i], mean, stdv) != DLT_OK) ok = 0;
        if (ok && aug && dlt_loader_set_augment(both[i], 3, 1) != DLT_OK) ok = 0;
    }
    if (!ok) printf("# %s: setup: %s\n", what, dlt_last_error());
    for (int64_t e = 0; ok && e < 2; e++) {
        for (int64_t k = 0;; k++) {
            dlt_tensor *xa = NULL, *ya = NULL, *xb = NULL, *yb = NULL;
            int32_t ha = 0, hb = 0;
            if (dlt_loader_next(la, &xa, &ya, &ha) != DLT_OK || dlt_loader_next(lb, &xb, &yb, &hb) != DLT_OK) {
                printf("# %s: next: %s\n", what, dlt_last_error());
                ok = 0;
                break;
            }
            if (ha != hb) ok = 0;
            if (!ha || !hb) break;
            char w[160];
            snprintf(w, sizeof w, "%s epoch %lld batch %lld", what, (long long)e, (long long)k);
            if (!same_tensor(xa, xb, w)) ok = 0;
            if ((ya == NULL) != (yb == NULL) || (ya && !same_tensor(ya, yb, w))) ok = 0;
        }
    }
    dlt_loader_destroy(la);
    dlt_loader_destroy(lb);
    return ok;
}

static void test_tensor_datasets_match_cpu(void) {
    NEED_CUDA();
    enum { N = 301 };
    float *xf = malloc(N * 105 * sizeof *xf);
    uint8_t *xu = malloc(N * 10);
    int64_t *lab = malloc(N * sizeof *lab);
    for (int i = 0; i < N * 105; i++) xf[i] = (float)((i * 2654435761u) % 100003) / 977.0f - 50.0f;
    for (int i = 0; i < N * 10; i++) xu[i] = (uint8_t)(i * 131 + 7);
    for (int i = 0; i < N; i++) lab[i] = (i * 7) % 11;
    int64_t s3[4] = {N, 3, 5, 7}, su[2] = {N, 10}, sl[1] = {N};
    dlt_tensor *fa, *fb, *ua, *ub, *ya, *yb;
    twin_tensors(DLT_F32, s3, 4, xf, &fa, &fb);
    twin_tensors(DLT_U8, su, 2, xu, &ua, &ub);
    twin_tensors(DLT_I64, sl, 1, lab, &ya, &yb);
    dlt_dataset *a = NULL, *b = NULL;
    /* f32 [3, 5, 7] records: copy, f16/bf16 conversion, channels-last */
    CHECK_OK(dlt_tensor_dataset_create(fa, ya, NULL, &a));
    CHECK_OK(dlt_tensor_dataset_create(fb, yb, NULL, &b));
    const int32_t dts[3] = {DLT_F32, DLT_F16, DLT_BF16};
    for (int d = 0; d < 3; d++)
        for (int f = 0; f < 2; f++)
            CHECK(compare_loaders(a, b, 64, dts[d], f ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS, 0, 0,
                                  "f32 records"), "dtype %d format %d", dts[d], f);
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
    /* u8 [10] records without labels: a copy, and values as floats */
    CHECK_OK(dlt_tensor_dataset_create(ua, NULL, NULL, &a));
    CHECK_OK(dlt_tensor_dataset_create(ub, NULL, NULL, &b));
    CHECK(compare_loaders(a, b, 50, DLT_U8, DLT_FORMAT_CONTIGUOUS, 0, 0, "u8 records"));
    CHECK(compare_loaders(a, b, 7, DLT_F16, DLT_FORMAT_CONTIGUOUS, 0, 0, "u8 -> f16"));
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
    /* bf16 records widened to f32 */
    dlt_tensor *ha = NULL, *hb = NULL;
    CHECK_OK(dlt_tensor_cast(fa, DLT_BF16, &ha));
    CHECK_OK(dlt_tensor_cast(fb, DLT_BF16, &hb));
    CHECK(same_tensor(ha, hb, "bf16 cast"));
    CHECK_OK(dlt_tensor_dataset_create(ha, ya, NULL, &a));
    CHECK_OK(dlt_tensor_dataset_create(hb, yb, NULL, &b));
    CHECK(compare_loaders(a, b, 100, DLT_F32, DLT_FORMAT_CHANNELS_LAST, 0, 0, "bf16 -> f32"));
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
    dlt_tensor *all[8] = {fa, fb, ua, ub, ya, yb, ha, hb};
    for (int i = 0; i < 8; i++) dlt_tensor_release(all[i]);
    free(xf);
    free(xu);
    free(lab);
}

/* Image records of other geometries: one channel 28x28 (staged, vector stores), 3x5x7 (105
 * elements: scalar stores), 3x128x128 (48 KiB: read from global memory, not staged). */
static void test_image_geometries_match_cpu(void) {
    NEED_CUDA();
    const int64_t geo[3][4] = {{70, 1, 28, 28}, {40, 3, 5, 7}, {9, 3, 128, 128}};
    for (int g = 0; g < 3; g++) {
        int64_t n = geo[g][0] * geo[g][1] * geo[g][2] * geo[g][3];
        uint8_t *pix = malloc((size_t)n);
        int64_t *lab = malloc((size_t)geo[g][0] * sizeof *lab);
        for (int64_t i = 0; i < n; i++) pix[i] = (uint8_t)((i * 2246822519u) >> 11);
        for (int64_t i = 0; i < geo[g][0]; i++) lab[i] = i % 4;
        dlt_tensor *xa, *xb, *ya, *yb;
        twin_tensors(DLT_U8, geo[g], 4, pix, &xa, &xb);
        twin_tensors(DLT_I64, geo[g], 1, lab, &ya, &yb);
        dlt_tensor_dataset_options o;
        dlt_tensor_dataset_options_default(&o);
        o.image = 1;
        dlt_dataset *a = NULL, *b = NULL;
        CHECK_OK(dlt_tensor_dataset_create(xa, ya, &o, &a));
        CHECK_OK(dlt_tensor_dataset_create(xb, yb, &o, &b));
        const int32_t dts[3] = {DLT_F32, DLT_F16, DLT_BF16};
        for (int d = 0; d < 3; d++)
            for (int mode = 0; mode < 3; mode++) {
                char what[64];
                snprintf(what, sizeof what, "image %lldx%lldx%lld", (long long)geo[g][1],
                         (long long)geo[g][2], (long long)geo[g][3]);
                CHECK(compare_loaders(a, b, 8, dts[d], d ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS,
                                      mode >= 1, mode == 2, what),
                      "%s dtype %d mode %d", what, dts[d], mode);
            }
        dlt_dataset_destroy(a);
        dlt_dataset_destroy(b);
        dlt_tensor_release(xa);
        dlt_tensor_release(xb);
        dlt_tensor_release(ya);
        dlt_tensor_release(yb);
        free(pix);
        free(lab);
    }
}

typedef struct {
    dlt_token_loader *ld;
    dlt_tensor *x, *y;
} token_step_state;

static dlt_status token_step(void *user) {
    token_step_state *s = user;
    return dlt_token_loader_next(s->ld, &s->x, &s->y);
}

static void test_token_windows_match_cpu(void) {
    NEED_CUDA();
    dlt_token_dataset *a = NULL, *b = NULL;
    CHECK_OK(dlt_synthetic_tokens_create(g_cpu, 100000, 50257, 3, &a));
    CHECK_OK(dlt_synthetic_tokens_create(g_cuda, 100000, 50257, 3, &b));
    uint16_t *ta = malloc(100000 * 2), *tb = malloc(100000 * 2);
    CHECK_OK(dlt_token_dataset_read(a, 0, 100000, ta));
    CHECK_OK(dlt_token_dataset_read(b, 0, 100000, tb));
    CHECK(memcmp(ta, tb, 100000 * 2) == 0, "synthetic tokens");
    free(ta);
    free(tb);
    const int64_t shapes[3][2] = {{4, 1}, {16, 1024}, {64, 256}};
    for (int k = 0; k < 3; k++) {
        dlt_token_loader *la = NULL, *lb = NULL;
        CHECK_OK(dlt_token_loader_create(a, shapes[k][0], shapes[k][1], 1337, &la));
        CHECK_OK(dlt_token_loader_create(b, shapes[k][0], shapes[k][1], 1337, &lb));
        for (int s = 0; s < 5; s++) {
            if (s == 3) {
                CHECK_OK(dlt_token_loader_set_output(la, DLT_I32));
                CHECK_OK(dlt_token_loader_set_output(lb, DLT_I32));
            }
            dlt_tensor *xa, *ya, *xb, *yb;
            CHECK_OK(dlt_token_loader_next(la, &xa, &ya));
            CHECK_OK(dlt_token_loader_next(lb, &xb, &yb));
            CHECK(same_tensor(xa, xb, "token x") && same_tensor(ya, yb, "token y"), "shape %d step %d", k, s);
        }
        int64_t pos = -1;
        CHECK_OK(dlt_token_loader_position(lb, &pos));
        CHECK(pos == 5);
        dlt_token_loader_destroy(la);
        dlt_token_loader_destroy(lb);
    }
    /* a captured step that only draws a batch: every replay draws the next one */
    dlt_token_loader *la = NULL;
    token_step_state st = {0};
    CHECK_OK(dlt_token_loader_create(a, 8, 64, 99, &la));
    CHECK_OK(dlt_token_loader_create(b, 8, 64, 99, &st.ld));
    dlt_graph *g = NULL;
    CHECK_OK(dlt_graph_create(g_cuda, token_step, &st, 1, &g)); /* the warm-up takes draw 0 */
    printf("# token step %s (%lld nodes)\n", dlt_graph_is_captured(g) ? "captured" : "eager fallback",
           (long long)dlt_graph_num_nodes(g));
    dlt_tensor *xa, *ya;
    CHECK_OK(dlt_token_loader_next(la, &xa, &ya));
    for (int r = 1; r < 6; r++) {
        CHECK_OK(dlt_graph_run(g));
        CHECK_OK(dlt_token_loader_next(la, &xa, &ya));
        CHECK(same_tensor(xa, st.x, "graph x") && same_tensor(ya, st.y, "graph y"), "replay %d", r);
    }
    int64_t pos = -1;
    CHECK_OK(dlt_token_loader_position(st.ld, &pos));
    CHECK(pos == 6, "device counter %lld after 5 replays", (long long)pos);
    /* resuming: seek between replays */
    CHECK_OK(dlt_token_loader_seek(st.ld, 2));
    CHECK_OK(dlt_token_loader_seek(la, 2));
    CHECK_OK(dlt_graph_run(g));
    CHECK_OK(dlt_token_loader_next(la, &xa, &ya));
    CHECK(same_tensor(xa, st.x, "graph x after seek"));
    dlt_graph_destroy(g);
    dlt_token_loader_destroy(la);
    dlt_token_loader_destroy(st.ld);
    dlt_token_dataset_destroy(a);
    dlt_token_dataset_destroy(b);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/dlt_data_XXXXXX");
    if (!mkdtemp(g_root)) return 1;
    write_release();
    g_cpu = th_cpu_ctx();
    g_cuda = th_cuda_ctx();
    if (!g_cuda) snprintf(g_no_cuda, sizeof g_no_cuda, "%s", th_skip_reason);
    RUN(test_datasets_upload);
    RUN(test_epoch_order);
    RUN(test_batches_match_cpu);
    RUN(test_device_cursor);
    RUN(test_graph_replay);
    RUN(test_evaluate_matches_cpu);
    RUN(test_real_subset_and_speed);
    RUN(test_tensor_datasets_match_cpu);
    RUN(test_image_geometries_match_cpu);
    RUN(test_token_windows_match_cpu);
    dlt_ctx_destroy(g_cuda);
    dlt_ctx_destroy(g_cpu);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (strncmp(g_root, "/tmp/dlt_data_", 14) == 0 && system(cmd) != 0) printf("# cannot remove %s\n", g_root);
    return th_done();
}
