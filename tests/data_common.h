/*
 * data_common.h - what test_data.c (the datasets) and test_loader.c (the batch loader) share:
 * the context and the tiny CIFAR-10 release in a temporary directory (written by
 * data_setup, removed by data_teardown), the independent reference (crop/flip/Normalize
 * from tests/ref.c's Philox, compare_batch, label_at) and small file helpers.
 *
 * Definitions are static: each program is one .c file (tests/meson.build) and gets its own copy.
 */
#ifndef DLT_TEST_DATA_COMMON_H
#define DLT_TEST_DATA_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/data/data_internal.h" /* white-box: ctx->capturing, the loader's cursor */
#include "harness.h"
#include "ref.h"

#define REC 3073
#define IMG 3072

static TH_UNUSED dlt_ctx *g_ctx;
static TH_UNUSED char g_root[256];  /* temporary directory of this run */
/* tiny release: data_batch_1.bin, data_batch_3.bin, test, meta */
static TH_UNUSED char g_rel[300];
static TH_UNUSED uint8_t g_train[13][REC]; /* records of the tiny train split, in load order */
static TH_UNUSED uint8_t g_test[4][REC];

/* ---------------------------------------------------------------------------------------
 * Reference: Philox4x32-10, shuffle, augmentation, pixel values
 * ------------------------------------------------------------------------------------- */

/* Philox and the shuffle order come from tests/ref.c (ref_philox4, ref_philox,
 * ref_data_order); checked against Random123's known answers below. */

typedef struct {
    int pad, hflip, normalize;
    float mean[3], std[3];
    uint64_t seed;
} ref_cfg;

/* One sample at epoch position pos (unwrapped) as 3072 floats in NCHW order: crop from the
 * zero-padded image and flip (draws from philox(seed + golden, e<<32 + pos)), then ToTensor
 * and Normalize. */
static TH_UNUSED void ref_sample(const uint8_t *pix, int64_t epoch, int64_t pos,
                                 const ref_cfg *cfg, float *out) {
    int top = 0, left = 0, flip = 0;
    if (cfg->pad > 0 || cfg->hflip) {
        uint32_t w[4];
        ref_philox(cfg->seed + 0x9E3779B97F4A7C15ull, ((uint64_t)epoch << 32) + (uint64_t)pos, w);
        uint64_t range = (uint64_t)(2 * cfg->pad + 1);
        top = (int)(((uint64_t)w[0] * range) >> 32);
        left = (int)(((uint64_t)w[1] * range) >> 32);
        flip = cfg->hflip ? (int)(w[2] & 1u) : 0;
    }
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                /* padded image P is 32+2*pad wide; crop C[y][x] = P[y+top][x+left];
                 * flipped F[y][x] = C[y][31-x] */
                int cx = flip ? 31 - x : x;
                int py = y + top, px = cx + left; /* in padded coordinates */
                int sy = py - cfg->pad, sx = px - cfg->pad;
                uint8_t b = (sy >= 0 && sy < 32 && sx >= 0 && sx < 32) ? pix[c * 1024 + sy * 32 + sx] : 0;
                float v = (float)b / 255.0f;
                if (cfg->normalize) v = (v - cfg->mean[c]) / cfg->std[c];
                out[c * 1024 + y * 32 + x] = v;
            }
}

/* Checks a batch (any dtype/format) against reference floats (NCHW): f32 bit-exact, f16/bf16
 * bit-exact with the reference rounded by the library's cast. Returns mismatches. */
static TH_UNUSED int64_t compare_batch(dlt_tensor *x, const float *ref, int64_t rows) {
    return dlt_tensor_numel(x) == rows * IMG ? th_compare_bits(g_ctx, x, ref) : -1;
}

static TH_UNUSED int64_t label_at(dlt_tensor *y, int64_t i) {
    double v = -1;
    if (dlt_tensor_get(y, i, &v) != DLT_OK) return -1;
    return (int64_t)v;
}

/* ---------------------------------------------------------------------------------------
 * Tiny files in the binary format
 * ------------------------------------------------------------------------------------- */

static TH_UNUSED uint8_t pixel_byte(uint32_t file, uint32_t rec, uint32_t i) {
    uint32_t h = file * 2654435761u ^ (rec + 1) * 40503u ^ i * 2246822519u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (uint8_t)h;
}

static TH_UNUSED void make_record(uint8_t *rec, uint32_t file, uint32_t r, uint8_t label) {
    rec[0] = label;
    for (uint32_t i = 0; i < IMG; i++) rec[1 + i] = pixel_byte(file, r, i);
}

static TH_UNUSED void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) {
        printf("# cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static TH_UNUSED void path_in(char *buf, size_t n, const char *dir, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
}

static TH_UNUSED void make_dir(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", g_root, name);
    if (mkdir(out, 0700) != 0 && errno != EEXIST) {
        printf("# cannot create %s\n", out);
        exit(1);
    }
}

static TH_UNUSED void write_release(void) {
    char p[400];
    make_dir(g_rel, sizeof g_rel, "release");
    uint8_t buf[7 * REC];
    /* data_batch_1.bin: 7 records; data_batch_3.bin: 6 (batch 2 absent: "the files present") */
    for (int r = 0; r < 7; r++) make_record(g_train[r], 1, (uint32_t)r, (uint8_t)((r * 3 + 1) % 10));
    for (int r = 0; r < 6; r++) make_record(g_train[7 + r], 3, (uint32_t)r, (uint8_t)((r * 7 + 2) % 10));
    for (int r = 0; r < 4; r++) make_record(g_test[r], 9, (uint32_t)r, (uint8_t)(9 - r));
    for (int r = 0; r < 7; r++) memcpy(buf + r * REC, g_train[r], REC);
    path_in(p, sizeof p, g_rel, "data_batch_1.bin");
    write_bytes(p, buf, 7 * REC);
    for (int r = 0; r < 6; r++) memcpy(buf + r * REC, g_train[7 + r], REC);
    path_in(p, sizeof p, g_rel, "data_batch_3.bin");
    write_bytes(p, buf, 6 * REC);
    for (int r = 0; r < 4; r++) memcpy(buf + r * REC, g_test[r], REC);
    path_in(p, sizeof p, g_rel, "test_batch.bin");
    write_bytes(p, buf, 4 * REC);
    /* CRLF on one line and trailing blank lines, as hand-edited files have */
    const char *meta = "airplane\nautomobile\r\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";
    path_in(p, sizeof p, g_rel, "batches.meta.txt");
    write_bytes(p, meta, strlen(meta));
}

static TH_UNUSED void remove_tree(const char *dir) {
    char cmd[600];
    if (strncmp(dir, "/tmp/dlt_data_", 14) != 0) return; /* only what this test made */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
}

static TH_UNUSED uint64_t live_allocs(void) {
    uint64_t n = 0;
    if (dlt_memory_stat(g_ctx, DLT_MEM_ALLOC_COUNT, &n) != DLT_OK) return UINT64_MAX;
    return n;
}

/* main's frame: a temporary directory with the tiny release, then the CPU context. */
static TH_UNUSED int data_setup(void) {
    snprintf(g_root, sizeof g_root, "/tmp/dlt_data_XXXXXX");
    if (!mkdtemp(g_root)) {
        printf("# cannot create a temporary directory\n");
        return 1;
    }
    g_ctx = th_cpu_ctx();
    write_release();
    return 0;
}

static TH_UNUSED int data_teardown(void) {
    int64_t live = 0;
    if (dlt_memory_stat(g_ctx, DLT_MEM_ALLOC_COUNT, (uint64_t *)&live) == DLT_OK && live != 0)
        printf("# %lld allocations still live at exit\n", (long long)live);
    dlt_ctx_destroy(g_ctx);
    remove_tree(g_root);
    return th_done();
}

#endif
