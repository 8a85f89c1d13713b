/*
 * test_records.c - datasets over the user's tensors (dlt_tensor_dataset_create, PyTorch's
 * TensorDataset) and over fixed-record binary files (dlt_record_files_open), on the CPU.
 *
 * Expectations are independent of the library: sample values written here and compared
 * bit for bit (f32 copies), conversions against hand-computed fp16/bf16 bit patterns
 * (round to nearest even, from numpy), the shuffle order and augmentation draws from the
 * reference Philox in tests/ref.c, images through a reference ToTensor/Normalize/crop/flip
 * written here for any C x H x W. Files (CIFAR-100-like, MNIST-like with a header, 2-byte
 * big-endian labels) are written by the test in a temporary directory, and every refusal
 * (layout, truncation, labels, symlink loop, dangling link, permission, directory) is
 * checked for its status, its message and that nothing stayed allocated.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs_cases.h"
#include "harness.h"
#include "ref.h"

static dlt_ctx *g_ctx;
static char g_root[256];

static uint64_t live_allocs(void) {
    uint64_t n = 0;
    if (dlt_memory_stat(g_ctx, DLT_MEM_ALLOC_COUNT, &n) != DLT_OK) return UINT64_MAX;
    return n;
}

static dlt_tensor *host_tensor(int32_t dtype, const int64_t *shape, int32_t nd, const void *data) {
    int64_t n = 1;
    for (int32_t i = 0; i < nd; i++) n *= shape[i];
    dlt_tensor *t = NULL;
    if (dlt_tensor_from_host(g_ctx, dtype, shape, nd, DLT_FORMAT_CONTIGUOUS, data,
                             (size_t)n * dlt_dtype_size(dtype), &t) != DLT_OK) {
        printf("# host_tensor: %s\n", dlt_last_error());
        exit(1);
    }
    return t;
}

/* A tensor's bytes (memory order); the caller frees. */
static void *bytes_of(const dlt_tensor *t) {
    size_t n = dlt_tensor_nbytes(t);
    void *p = malloc(n ? n : 1);
    if (dlt_tensor_copy_to_host(t, p, n) != DLT_OK) {
        free(p);
        return NULL;
    }
    return p;
}

static int64_t label_at(const dlt_tensor *y, int64_t i) {
    double v = -1;
    if (dlt_tensor_get(y, i, &v) != DLT_OK) return -999;
    return (int64_t)v;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) {
        printf("# cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* ---- reference image transform for any C x H x W (ToTensor, Normalize, crop, flip) ---- */

typedef struct {
    int pad, hflip, normalize;
    float mean[16], std[16];
    uint64_t seed;
} img_cfg;

static void ref_image(const uint8_t *pix, int C, int H, int W, int64_t epoch, int64_t pos,
                      const img_cfg *cfg, float *out) {
    int top = 0, left = 0, flip = 0;
    if (cfg->pad > 0 || cfg->hflip) {
        uint32_t w[4];
        ref_philox(cfg->seed + 0x9E3779B97F4A7C15ull, ((uint64_t)epoch << 32) + (uint64_t)pos, w);
        uint64_t range = (uint64_t)(2 * cfg->pad + 1);
        top = (int)(((uint64_t)w[0] * range) >> 32);
        left = (int)(((uint64_t)w[1] * range) >> 32);
        flip = cfg->hflip ? (int)(w[2] & 1u) : 0;
    }
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                /* crop of the image zero-padded by pad, then mirrored columns */
                int cx = flip ? W - 1 - x : x;
                int sy = y + top - cfg->pad, sx = cx + left - cfg->pad;
                uint8_t b = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? pix[(c * H + sy) * W + sx] : 0;
                float v = (float)b / 255.0f;
                if (cfg->normalize) v = (v - cfg->mean[c]) / cfg->std[c];
                out[(c * H + y) * W + x] = v;
            }
}

/* Batch x (any float dtype/format) against reference floats in logical order, bit for bit */
static int64_t compare_f(const dlt_tensor *x, const float *ref) { return th_compare_bits(g_ctx, x, ref); }

/* ---------------------------------------------------------------------------------------
 * Datasets over tensors
 * ------------------------------------------------------------------------------------- */

/* f32 features [10, 2, 3] with int64 labels: in-order batches of 4, 4, 2 are the rows
 * themselves, bit for bit; the dataset shares x's memory. */
static void test_tensor_dataset_basics(void) {
    uint64_t before = live_allocs();
    float xv[10 * 6];
    for (int i = 0; i < 60; i++) xv[i] = (float)(i * 7 % 13) * 0.1f - 0.3f * (float)(i % 5);
    int64_t lv[10] = {3, 0, 4, 1, 1, 2, 0, 4, 3, 2};
    int64_t xs[3] = {10, 2, 3}, ls[1] = {10};
    dlt_tensor *x = host_tensor(DLT_F32, xs, 3, xv), *y = host_tensor(DLT_I64, ls, 1, lv);
    dlt_dataset *ds = NULL;
    CHECK_OK(dlt_tensor_dataset_create(x, y, NULL, &ds));
    CHECK(dlt_dataset_size(ds) == 10 && dlt_dataset_num_classes(ds) == 5, "size %lld classes %d",
          (long long)dlt_dataset_size(ds), dlt_dataset_num_classes(ds));
    int64_t dims[4] = {0};
    CHECK(dlt_dataset_sample_shape(ds, dims, 4) == 2 && dims[0] == 2 && dims[1] == 3);
    CHECK(dlt_dataset_sample_shape(ds, NULL, 0) == 2 && dlt_dataset_sample_shape(NULL, dims, 4) == -1);
    CHECK(dlt_dataset_dtype(ds) == DLT_F32 && dlt_dataset_sample_bytes(ds) == 24);
    CHECK(dlt_dataset_is_image(ds) == 0 && dlt_dataset_is_image(NULL) == 0);
    CHECK(dlt_dataset_dtype(NULL) == -1 && dlt_dataset_sample_bytes(NULL) == 0);
    CHECK(strcmp(dlt_dataset_class_name(ds, 4), "class4") == 0);
    float one[6];
    int32_t l = -1;
    CHECK_OK(dlt_dataset_get(ds, 7, (uint8_t *)one, sizeof one, &l));
    CHECK(memcmp(one, xv + 42, sizeof one) == 0 && l == 4);
    CHECK_STATUS(dlt_dataset_get(ds, 7, (uint8_t *)one, 23, &l), DLT_ERR_INVALID_ARGUMENT);

    dlt_loader *ld = NULL;
    CHECK_OK(dlt_loader_create(ds, 4, 0, 0, 0, &ld));
    CHECK(dlt_loader_num_batches(ld) == 3);
    for (int epoch = 0; epoch < 2; epoch++) {
        int64_t pos = 0;
        for (int b = 0; b < 3; b++) {
            dlt_tensor *bx = NULL, *by = NULL;
            int32_t has = 0;
            CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
            REQUIRE(has && bx && by);
            int64_t rows = b < 2 ? 4 : 2;
            CHECK(dlt_tensor_ndim(bx) == 3 && dlt_tensor_dim(bx, 0) == rows &&
                  dlt_tensor_dim(bx, 1) == 2 && dlt_tensor_dim(bx, 2) == 3);
            CHECK(dlt_tensor_dtype(bx) == DLT_F32 && dlt_tensor_dtype(by) == DLT_I64);
            float *got = bytes_of(bx);
            CHECK(got && memcmp(got, xv + pos * 6, (size_t)rows * 6 * sizeof(float)) == 0,
                  "epoch %d batch %d", epoch, b);
            free(got);
            for (int64_t r = 0; r < rows; r++) CHECK(label_at(by, r) == lv[pos + r]);
            pos += rows;
        }
        dlt_tensor *bx = NULL, *by = NULL;
        int32_t has = 1;
        CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
        CHECK(has == 0 && !bx && !by);
    }
    /* the dataset shares x: new values show in the next batch (PyTorch's TensorDataset) */
    xv[0] = 42.5f;
    CHECK_OK(dlt_tensor_copy_from_host(x, xv, sizeof xv));
    dlt_tensor *bx = NULL, *by = NULL;
    int32_t has = 0;
    CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
    double v = 0;
    CHECK_OK(dlt_tensor_get(bx, 0, &v));
    CHECK(v == 42.5, "%g", v);
    /* releasing the caller's tensors keeps the dataset's memory */
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    CHECK_OK(dlt_loader_start_epoch(ld, 0));
    CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
    CHECK_OK(dlt_tensor_get(bx, 1, &v));
    CHECK(v == (double)xv[1]);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
    CHECK(live_allocs() == before, "allocations left behind");
}

/* Conversions: f32 -> f16/bf16 against numpy's round-to-nearest-even bits; u8 stays u8 by
 * default and becomes 0..255 (not scaled) as float; f16/bf16 sources widen exactly. */
static void test_tensor_dataset_conversions(void) {
    const float vals[8] = {0.1f, 1.0f / 3.0f, 65504.0f, 1e-8f, -2.5f, 3.14159265f, 1e5f, 6.1e-5f};
    const uint16_t f16_bits[8] = {0x2e66, 0x3555, 0x7bff, 0x0000, 0xc100, 0x4248, 0x7c00, 0x03ff};
    const uint16_t bf16_bits[8] = {0x3dcd, 0x3eab, 0x4780, 0x322c, 0xc020, 0x4049, 0x47c3, 0x3880};
    int64_t xs[2] = {4, 2};
    dlt_tensor *x = host_tensor(DLT_F32, xs, 2, vals);
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    CHECK_OK(dlt_tensor_dataset_create(x, NULL, NULL, &ds));
    CHECK_OK(dlt_loader_create(ds, 4, 0, 0, 0, &ld));
    const int32_t dts[2] = {DLT_F16, DLT_BF16};
    for (int d = 0; d < 2; d++) {
        CHECK_OK(dlt_loader_set_output(ld, dts[d], DLT_FORMAT_CONTIGUOUS, DLT_I64));
        CHECK_OK(dlt_loader_start_epoch(ld, 0));
        dlt_tensor *bx = NULL, *by = NULL;
        int32_t has = 0;
        CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
        REQUIRE(has && by == NULL && dlt_tensor_dtype(bx) == dts[d]);
        uint16_t got[8];
        CHECK_OK(dlt_tensor_copy_to_host(bx, got, sizeof got));
        for (int i = 0; i < 8; i++)
            CHECK(got[i] == (d ? bf16_bits[i] : f16_bits[i]), "%s element %d: 0x%04x",
                  d ? "bf16" : "f16", i, got[i]);
    }
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
    dlt_tensor_release(x);

    /* u8 [3, 4]: default output u8 (a copy), f32 gives the byte values */
    uint8_t bytes[12] = {0, 1, 2, 127, 128, 200, 254, 255, 9, 10, 11, 12};
    int64_t us[2] = {3, 4};
    x = host_tensor(DLT_U8, us, 2, bytes);
    CHECK_OK(dlt_tensor_dataset_create(x, NULL, NULL, &ds));
    CHECK_OK(dlt_loader_create(ds, 3, 0, 0, 0, &ld));
    dlt_tensor *bx = NULL, *by = NULL;
    int32_t has = 0;
    CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
    CHECK(dlt_tensor_dtype(bx) == DLT_U8);
    uint8_t gb[12];
    CHECK_OK(dlt_tensor_copy_to_host(bx, gb, sizeof gb));
    CHECK(memcmp(gb, bytes, 12) == 0);
    CHECK_OK(dlt_loader_set_output(ld, DLT_F32, DLT_FORMAT_CONTIGUOUS, DLT_I64));
    CHECK_OK(dlt_loader_start_epoch(ld, 0));
    CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
    float gf[12];
    CHECK_OK(dlt_tensor_copy_to_host(bx, gf, sizeof gf));
    for (int i = 0; i < 12; i++) CHECK(gf[i] == (float)bytes[i], "element %d: %g", i, (double)gf[i]);
    /* i64 is not a float type nor the samples' own */
    CHECK_STATUS(dlt_loader_set_output(ld, DLT_I64, DLT_FORMAT_CONTIGUOUS, DLT_I64), DLT_ERR_DTYPE);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
    dlt_tensor_release(x);

    /* f16 and bf16 sources widen exactly to f32 */
    for (int d = 0; d < 2; d++) {
        int64_t hs[2] = {8, 1};
        dlt_tensor *h = NULL;
        CHECK_OK(dlt_tensor_empty(g_ctx, dts[d], hs, 2, DLT_FORMAT_CONTIGUOUS, &h));
        CHECK_OK(dlt_tensor_copy_from_host(h, d ? bf16_bits : f16_bits, 16));
        CHECK_OK(dlt_tensor_dataset_create(h, NULL, NULL, &ds));
        CHECK_OK(dlt_loader_create(ds, 8, 0, 0, 0, &ld));
        CHECK_OK(dlt_loader_set_output(ld, DLT_F32, DLT_FORMAT_CONTIGUOUS, DLT_I64));
        CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
        float w[8];
        CHECK_OK(dlt_tensor_copy_to_host(bx, w, sizeof w));
        for (int i = 0; i < 8; i++) {
            uint32_t bits = 0;
            if (d) {
                bits = (uint32_t)bf16_bits[i] << 16;
            } else {
                /* f16 -> f32 by hand: sign, exponent rebias, subnormals normalised */
                uint32_t hb = f16_bits[i], s = (hb >> 15) << 31, e = (hb >> 10) & 31, m = hb & 1023;
                if (e == 31)
                    bits = s | 0x7F800000u | (m << 13);
                else if (e == 0 && m == 0)
                    bits = s;
                else if (e == 0) {
                    int k = -1;
                    while (!(m & 1024)) {
                        m <<= 1;
                        k++;
                    }
                    bits = s | ((uint32_t)(127 - 15 - k) << 23) | ((m & 1023) << 13);
                } else
                    bits = s | ((e + 112) << 23) | (m << 13);
            }
            float want;
            memcpy(&want, &bits, 4);
            CHECK(memcmp(&w[i], &want, 4) == 0, "%s element %d: %g vs %g", d ? "bf16" : "f16", i,
                  (double)w[i], (double)want);
        }
        dlt_loader_destroy(ld);
        dlt_dataset_destroy(ds);
        dlt_tensor_release(h);
    }
}

/* Shuffling and drop_last follow the CIFAR-10 loader's rules: the reference Philox order,
 * the same order for the same seed, another per epoch and per seed; a channels-last copy of
 * 3-D samples. */
static void test_tensor_dataset_shuffle(void) {
    enum { N = 23 };
    float xv[N * 12];
    int32_t lv[N];
    for (int i = 0; i < N * 12; i++) xv[i] = (float)i + 0.25f;
    for (int i = 0; i < N; i++) lv[i] = (i * 5) % 7;
    int64_t xs[4] = {N, 3, 2, 2}, ls[1] = {N};
    dlt_tensor *x = host_tensor(DLT_F32, xs, 4, xv), *y = host_tensor(DLT_I32, ls, 1, lv);
    dlt_dataset *ds = NULL;
    dlt_loader *a = NULL, *b = NULL;
    CHECK_OK(dlt_tensor_dataset_create(x, y, NULL, &ds));
    CHECK(dlt_dataset_num_classes(ds) == 7);
    CHECK_OK(dlt_loader_create(ds, 5, 1, 1, 99, &a)); /* drop_last: 4 batches of 5 */
    CHECK_OK(dlt_loader_create(ds, 5, 1, 1, 99, &b));
    CHECK(dlt_loader_num_batches(a) == 4);
    CHECK_OK(dlt_loader_set_output(b, DLT_F32, DLT_FORMAT_CHANNELS_LAST, DLT_I32));
    int64_t order[N], got_order[N];
    for (int64_t epoch = 0; epoch < 3; epoch++) {
        ref_data_order(99, epoch, N, order);
        CHECK_OK(dlt_loader_epoch_order(a, epoch, got_order, N));
        CHECK(memcmp(order, got_order, sizeof order) == 0, "epoch %lld", (long long)epoch);
        int batches = 0;
        for (;;) {
            dlt_tensor *xa = NULL, *ya = NULL, *xb = NULL, *yb = NULL;
            int32_t ha = 0, hb = 0;
            CHECK_OK(dlt_loader_next(a, &xa, &ya, &ha));
            CHECK_OK(dlt_loader_next(b, &xb, &yb, &hb));
            REQUIRE(ha == hb);
            if (!ha) break;
            CHECK(dlt_tensor_dim(xa, 0) == 5);
            float *ga = bytes_of(xa), *gb = bytes_of(xb);
            for (int r = 0; r < 5; r++) {
                int64_t idx = order[batches * 5 + r];
                CHECK(memcmp(ga + r * 12, xv + idx * 12, 48) == 0, "epoch %lld row %d", (long long)epoch, r);
                CHECK(label_at(ya, r) == lv[idx] && label_at(yb, r) == lv[idx]);
                /* channels-last: element (c, h, w) at (h * 2 + w) * 3 + c */
                for (int c = 0; c < 3; c++)
                    for (int hw = 0; hw < 4; hw++)
                        CHECK(gb[r * 12 + hw * 3 + c] == xv[idx * 12 + c * 4 + hw]);
            }
            free(ga);
            free(gb);
            batches++;
        }
        CHECK(batches == 4);
    }
    int64_t o2[N];
    dlt_loader *c = NULL;
    CHECK_OK(dlt_loader_create(ds, 5, 1, 0, 100, &c));
    CHECK_OK(dlt_loader_epoch_order(c, 0, o2, N));
    ref_data_order(99, 0, N, order);
    CHECK(memcmp(o2, order, sizeof order) != 0, "another seed, another order");
    dlt_loader_destroy(a);
    dlt_loader_destroy(b);
    dlt_loader_destroy(c);
    dlt_dataset_destroy(ds);
    dlt_tensor_release(x);
    dlt_tensor_release(y);
}

/* x alone: no y, no classes; evaluation has nothing to compare with. */
static void test_tensor_dataset_features_only(void) {
    float xv[6] = {1, 2, 3, 4, 5, 6};
    int64_t xs[1] = {6};
    dlt_tensor *x = host_tensor(DLT_F32, xs, 1, xv);
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    CHECK_OK(dlt_tensor_dataset_create(x, NULL, NULL, &ds));
    CHECK(dlt_dataset_num_classes(ds) == 0 && dlt_dataset_class_name(ds, 0) == NULL);
    CHECK(dlt_dataset_sample_shape(ds, NULL, 0) == 0, "scalar samples");
    int32_t l = 7;
    float one = 0;
    CHECK_OK(dlt_dataset_get(ds, 2, (uint8_t *)&one, 4, &l));
    CHECK(one == 3.0f && l == -1);
    CHECK_OK(dlt_loader_create(ds, 4, 0, 0, 0, &ld));
    dlt_tensor *bx = NULL, *by = (dlt_tensor *)0x1;
    int32_t has = 0;
    CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
    CHECK(has && by == NULL && dlt_tensor_ndim(bx) == 1 && dlt_tensor_dim(bx, 0) == 4);
    CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
    CHECK(has && by == NULL && dlt_tensor_dim(bx, 0) == 2);
    float tail[2];
    CHECK_OK(dlt_tensor_copy_to_host(bx, tail, sizeof tail));
    CHECK(tail[0] == 5.0f && tail[1] == 6.0f);
    dlt_module *lin = NULL;
    CHECK_OK(dlt_linear_create(g_ctx, 1, 2, 1, &lin));
    double acc = 0;
    CHECK_STATUS(dlt_evaluate_accuracy(lin, ld, &acc), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "no labels") != NULL, "%s", dlt_last_error());
    /* neither normalisation nor augmentation apply; nor channels-last for 0-D samples */
    const float m[1] = {0.5f}, s[1] = {0.5f};
    CHECK_STATUS(dlt_loader_set_normalize(ld, m, s), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_set_augment(ld, 2, 0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_set_augment(ld, 0, 1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_loader_set_augment(ld, 0, 0));
    CHECK_OK(dlt_loader_set_normalize(ld, NULL, NULL));
    CHECK_STATUS(dlt_loader_set_output(ld, DLT_F32, DLT_FORMAT_CHANNELS_LAST, DLT_I64),
                 DLT_ERR_INVALID_ARGUMENT);
    dlt_module_destroy(lin);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
    dlt_tensor_release(x);
}

/* image = 1: u8 [N, 1, 5, 7] pictures get ToTensor, a one-channel Normalize, and crop and
 * flip of a non-square image, in f32 and bf16 channels-last, against the reference. */
static void test_tensor_dataset_images(void) {
    enum { N = 9, C = 1, H = 5, W = 7 };
    uint8_t pix[N * C * H * W];
    for (int i = 0; i < N * C * H * W; i++) pix[i] = (uint8_t)(i * 37 + 11);
    int64_t lv[N] = {1, 0, 1, 1, 0, 0, 1, 0, 1};
    int64_t xs[4] = {N, C, H, W}, ls[1] = {N};
    dlt_tensor *x = host_tensor(DLT_U8, xs, 4, pix), *y = host_tensor(DLT_I64, ls, 1, lv);
    dlt_tensor_dataset_options o;
    dlt_tensor_dataset_options_default(&o);
    CHECK(o.size == sizeof o && o.image == 0 && o.num_classes == 0);
    o.image = 1;
    o.num_classes = 3;
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    CHECK_OK(dlt_tensor_dataset_create(x, y, &o, &ds));
    CHECK(dlt_dataset_is_image(ds) == 1 && dlt_dataset_num_classes(ds) == 3);
    CHECK_OK(dlt_loader_create(ds, 4, 1, 0, 5, &ld));
    const float mean[1] = {0.25f}, stdv[1] = {0.5f};
    CHECK_OK(dlt_loader_set_normalize(ld, mean, stdv));
    CHECK_OK(dlt_loader_set_augment(ld, 2, 1));
    CHECK_STATUS(dlt_loader_set_augment(ld, 6, 1), DLT_ERR_INVALID_ARGUMENT); /* > min(H, W) */
    CHECK_STATUS(dlt_loader_set_output(ld, DLT_U8, 0, DLT_I64), DLT_ERR_DTYPE);
    img_cfg cfg = {0};
    cfg.pad = 2;
    cfg.hflip = 1;
    cfg.normalize = 1;
    cfg.mean[0] = mean[0];
    cfg.std[0] = stdv[0];
    cfg.seed = 5;
    float ref[4 * C * H * W];
    int flips = 0;
    for (int pass = 0; pass < 2; pass++) {
        int64_t epoch = pass ? 3 : 0;
        if (pass) {
            CHECK_OK(dlt_loader_set_output(ld, DLT_BF16, DLT_FORMAT_CHANNELS_LAST, DLT_I32));
            CHECK_OK(dlt_loader_start_epoch(ld, 3));
        }
        int64_t order[N];
        ref_data_order(5, epoch, N, order);
        int64_t pos = 0;
        for (;;) {
            dlt_tensor *bx = NULL, *by = NULL;
            int32_t has = 0;
            CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
            if (!has) break;
            int64_t rows = dlt_tensor_dim(bx, 0);
            for (int64_t r = 0; r < rows; r++) {
                ref_image(pix + order[pos + r] * C * H * W, C, H, W, epoch, pos + r, &cfg,
                          ref + r * C * H * W);
                CHECK(label_at(by, r) == lv[order[pos + r]]);
                uint32_t w[4];
                ref_philox(5 + 0x9E3779B97F4A7C15ull, ((uint64_t)epoch << 32) + (uint64_t)(pos + r), w);
                flips += (int)(w[2] & 1u);
            }
            CHECK(compare_f(bx, ref) == 0, "pass %d position %lld", pass, (long long)pos);
            pos += rows;
        }
        CHECK(pos == N);
    }
    CHECK(flips > 0 && flips < 2 * N, "flips %d", flips);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
    dlt_tensor_release(x);
    dlt_tensor_release(y);
}

static void test_tensor_dataset_refusals(void) {
    uint64_t before = live_allocs();
    float xv[8] = {0};
    int64_t lv[4] = {0, 1, 2, 3}, bad_lv[4] = {0, 1, -1, 2}, big_lv[4] = {0, 1, 70000, 2};
    int32_t iv[8] = {0};
    int64_t xs[2] = {4, 2}, ls[1] = {4}, ls3[1] = {3}, s2[2] = {4, 1}, z[2] = {0, 2};
    dlt_tensor *x = host_tensor(DLT_F32, xs, 2, xv), *y = host_tensor(DLT_I64, ls, 1, lv);
    dlt_tensor *xi = host_tensor(DLT_I32, xs, 2, iv), *yf = host_tensor(DLT_F32, ls, 1, xv);
    dlt_tensor *y3 = host_tensor(DLT_I64, ls3, 1, lv), *y2d = host_tensor(DLT_I64, s2, 2, lv);
    dlt_tensor *yneg = host_tensor(DLT_I64, ls, 1, bad_lv), *ybig = host_tensor(DLT_I64, ls, 1, big_lv);
    dlt_tensor *x0 = NULL;
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, z, 2, 0, &x0));
    uint64_t mid = live_allocs();
    dlt_dataset *ds = (dlt_dataset *)0x1;
    CHECK_STATUS(dlt_tensor_dataset_create(NULL, y, NULL, &ds), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_tensor_dataset_create(x, y, NULL, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_tensor_dataset_create(xi, y, NULL, &ds), DLT_ERR_DTYPE);
    CHECK(strstr(dlt_last_error(), "i32") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_tensor_dataset_create(x, yf, NULL, &ds), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_tensor_dataset_create(x, y3, NULL, &ds), DLT_ERR_SHAPE);
    CHECK(strstr(dlt_last_error(), "[4]") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_tensor_dataset_create(x, y2d, NULL, &ds), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_tensor_dataset_create(x0, NULL, NULL, &ds), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_tensor_dataset_create(x, yneg, NULL, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "labels[2] = -1") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_tensor_dataset_create(x, ybig, NULL, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "labels[2] = 70000") != NULL, "%s", dlt_last_error());
    dlt_tensor_dataset_options o;
    dlt_tensor_dataset_options_default(&o);
    o.num_classes = 3; /* label 3 is out of range */
    CHECK_STATUS(dlt_tensor_dataset_create(x, y, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "labels[3] = 3") && strstr(dlt_last_error(), "num_classes 3"),
          "%s", dlt_last_error());
    o.num_classes = 70000;
    CHECK_STATUS(dlt_tensor_dataset_create(x, y, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    dlt_tensor_dataset_options_default(&o);
    o.image = 1; /* f32 [4, 2] is no image */
    CHECK_STATUS(dlt_tensor_dataset_create(x, y, &o, &ds), DLT_ERR_SHAPE);
    o.image = 2;
    CHECK_STATUS(dlt_tensor_dataset_create(x, y, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    /* a struct smaller than the first release's is refused (core.h: option structs) */
    o.image = 0;
    o.size = (uint32_t)offsetof(dlt_tensor_dataset_options, num_classes);
    CHECK_STATUS(dlt_tensor_dataset_create(x, y, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "dlt_tensor_dataset_options_default"), "%s", dlt_last_error());
    /* a newer caller's larger struct: read when its unknown fields are zero */
    struct {
        dlt_tensor_dataset_options o;
        int32_t future[2];
    } big;
    dlt_tensor_dataset_options_init(&big.o, (uint32_t)sizeof big);
    CHECK(big.o.size == sizeof big && big.future[0] == 0 && big.future[1] == 0);
    big.o.num_classes = 5;
    dlt_dataset *ok = NULL;
    CHECK_OK(dlt_tensor_dataset_create(x, y, &big.o, &ok));
    CHECK(dlt_dataset_num_classes(ok) == 5, "%d", dlt_dataset_num_classes(ok));
    dlt_dataset_destroy(ok);
    /* labels on another context */
    dlt_ctx *other = th_cpu_ctx();
    dlt_tensor *yo = NULL;
    CHECK_OK(dlt_tensor_from_host(other, DLT_I64, ls, 1, 0, lv, sizeof lv, &yo));
    CHECK_STATUS(dlt_tensor_dataset_create(x, yo, NULL, &ds), DLT_ERR_CONTEXT_MISMATCH);
    dlt_tensor_release(yo);
    dlt_ctx_destroy(other);
    CHECK(ds == (dlt_dataset *)0x1, "out-pointer untouched");
    CHECK(live_allocs() == mid, "refusals left allocations behind");
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    dlt_tensor_release(xi);
    dlt_tensor_release(yf);
    dlt_tensor_release(y3);
    dlt_tensor_release(y2d);
    dlt_tensor_release(yneg);
    dlt_tensor_release(ybig);
    dlt_tensor_release(x0);
    CHECK(live_allocs() == before);
}

/* ---------------------------------------------------------------------------------------
 * Fixed-record files
 * ------------------------------------------------------------------------------------- */

static uint8_t byte_at(uint32_t file, uint32_t rec, uint32_t i) {
    uint32_t h = file * 2654435761u ^ (rec + 1) * 40503u ^ i * 2246822519u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (uint8_t)h;
}

/* CIFAR-100's layout: coarse label, fine label, 3072 image bytes. */
static void test_record_files_cifar100(void) {
    enum { N = 6, REC = 3074 };
    uint8_t *buf = malloc(N * REC);
    for (int r = 0; r < N; r++) {
        buf[r * REC] = (uint8_t)(r * 3 % 20);
        buf[r * REC + 1] = (uint8_t)(99 - r * 17);
        for (int i = 0; i < 3072; i++) buf[r * REC + 2 + i] = byte_at(100, (uint32_t)r, (uint32_t)i);
    }
    char path[400];
    snprintf(path, sizeof path, "%s/train.bin", g_root);
    write_bytes(path, buf, N * REC);
    dlt_record_file_options o;
    dlt_record_file_options_default(&o);
    CHECK(o.size == sizeof o && o.record_bytes == 3073 && o.label_width == 1 && o.image_offset == 1 &&
          o.num_classes == 10 && o.channels == 3 && o.height == 32 && o.width == 32);
    o.record_bytes = REC;
    o.label_offset = 1;
    o.image_offset = 2;
    o.num_classes = 100;
    const char *paths[1] = {path};
    dlt_dataset *fine = NULL, *coarse = NULL;
    CHECK_OK(dlt_record_files_open(g_ctx, paths, 1, &o, &fine));
    o.label_offset = 0;
    o.num_classes = 20;
    CHECK_OK(dlt_record_files_open(g_ctx, paths, 1, &o, &coarse));
    CHECK(dlt_dataset_size(fine) == N && dlt_dataset_num_classes(fine) == 100 &&
          dlt_dataset_num_classes(coarse) == 20 && dlt_dataset_is_image(fine));
    for (int r = 0; r < N; r++) {
        uint8_t pix[3072];
        int32_t lf = -1, lc = -1;
        CHECK_OK(dlt_dataset_get(fine, r, pix, sizeof pix, &lf));
        CHECK_OK(dlt_dataset_get(coarse, r, NULL, 0, &lc));
        CHECK(memcmp(pix, buf + r * REC + 2, 3072) == 0, "record %d pixels", r);
        CHECK(lf == 99 - r * 17 && lc == r * 3 % 20, "record %d: fine %d coarse %d", r, lf, lc);
    }
    /* 20 classes refuse a fine label */
    o.label_offset = 1;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 1, &o, &fine), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), path) && strstr(dlt_last_error(), "record 0") &&
          strstr(dlt_last_error(), "label 99") && strstr(dlt_last_error(), "0..19"), "%s",
          dlt_last_error());
    dlt_dataset_destroy(fine);
    dlt_dataset_destroy(coarse);
    free(buf);
}

/* MNIST-like: a 16-byte header, records of a 2-byte big-endian label and 1x28x28 pixels, in
 * two files; classes inferred; batches with crop and flip against the reference. */
static void test_record_files_mnist_like(void) {
    enum { HEAD = 16, REC = 2 + 784 };
    const int counts[2] = {5, 3};
    uint8_t recs[8][REC];
    char p0[400], p1[400];
    snprintf(p0, sizeof p0, "%s/mnist_a.bin", g_root);
    snprintf(p1, sizeof p1, "%s/mnist_b.bin", g_root);
    int k = 0;
    for (int f = 0; f < 2; f++) {
        uint8_t *buf = malloc(HEAD + counts[f] * REC);
        memset(buf, 0xEE, HEAD);
        for (int r = 0; r < counts[f]; r++, k++) {
            uint16_t label = (uint16_t)(k == 6 ? 300 : k % 4); /* a two-byte label */
            recs[k][0] = (uint8_t)(label >> 8);
            recs[k][1] = (uint8_t)label;
            for (int i = 0; i < 784; i++) recs[k][2 + i] = byte_at(7 + (uint32_t)f, (uint32_t)r, (uint32_t)i);
            memcpy(buf + HEAD + r * REC, recs[k], REC);
        }
        write_bytes(f ? p1 : p0, buf, HEAD + counts[f] * REC);
        free(buf);
    }
    dlt_record_file_options o;
    dlt_record_file_options_default(&o);
    o.header_bytes = HEAD;
    o.record_bytes = REC;
    o.label_offset = 0;
    o.label_width = 2;
    o.label_big_endian = 1;
    o.image_offset = 2;
    o.channels = 1;
    o.height = 28;
    o.width = 28;
    o.num_classes = 0;
    const char *paths[2] = {p0, p1};
    dlt_dataset *ds = NULL;
    CHECK_OK(dlt_record_files_open(g_ctx, paths, 2, &o, &ds));
    CHECK(dlt_dataset_size(ds) == 8 && dlt_dataset_num_classes(ds) == 301, "%d",
          dlt_dataset_num_classes(ds));
    int64_t dims[3];
    CHECK(dlt_dataset_sample_shape(ds, dims, 3) == 3 && dims[0] == 1 && dims[1] == 28 && dims[2] == 28);
    for (int r = 0; r < 8; r++) {
        int32_t l = -1;
        CHECK_OK(dlt_dataset_get(ds, r, NULL, 0, &l));
        CHECK(l == (r == 6 ? 300 : r % 4), "record %d label %d", r, l);
    }
    dlt_loader *ld = NULL;
    CHECK_OK(dlt_loader_create(ds, 3, 1, 0, 31, &ld));
    CHECK_OK(dlt_loader_set_augment(ld, 4, 1));
    img_cfg cfg = {0};
    cfg.pad = 4;
    cfg.hflip = 1;
    cfg.seed = 31;
    float ref[3 * 784];
    int64_t order[8], pos = 0;
    ref_data_order(31, 0, 8, order);
    for (;;) {
        dlt_tensor *bx = NULL, *by = NULL;
        int32_t has = 0;
        CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
        if (!has) break;
        int64_t rows = dlt_tensor_dim(bx, 0);
        CHECK(dlt_tensor_dim(bx, 1) == 1 && dlt_tensor_dim(bx, 2) == 28 && dlt_tensor_dim(bx, 3) == 28);
        for (int64_t r = 0; r < rows; r++) ref_image(recs[order[pos + r]] + 2, 1, 28, 28, 0, pos + r, &cfg, ref + r * 784);
        CHECK(compare_f(bx, ref) == 0, "position %lld", (long long)pos);
        pos += rows;
    }
    CHECK(pos == 8);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
    /* little-endian reads the bytes as other labels: 1 -> 256, 2 -> 512 (the first above 300) */
    o.label_big_endian = 0;
    o.num_classes = 301;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 2, &o, &ds), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), p0) && strstr(dlt_last_error(), "record 2 (byte offset 1588)") &&
          strstr(dlt_last_error(), "label 512"), "%s", dlt_last_error());
    /* no labels at all */
    o.label_width = 0;
    o.num_classes = 0;
    CHECK_OK(dlt_record_files_open(g_ctx, paths, 2, &o, &ds));
    CHECK(dlt_dataset_num_classes(ds) == 0);
    CHECK_OK(dlt_loader_create(ds, 8, 0, 0, 0, &ld));
    dlt_tensor *bx = NULL, *by = (dlt_tensor *)0x1;
    int32_t has = 0;
    CHECK_OK(dlt_loader_next(ld, &bx, &by, &has));
    CHECK(has && by == NULL);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
    /* a header-sized tail: record 3 of the second file is truncated */
    uint8_t junk[HEAD + 3 * REC - 10];
    memset(junk, 1, sizeof junk);
    write_bytes(p1, junk, sizeof junk);
    o.label_width = 1;
    o.label_big_endian = 0;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 2, &o, &ds), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), p1) && strstr(dlt_last_error(), "header") &&
          strstr(dlt_last_error(), "record 2"), "%s", dlt_last_error());
    write_bytes(p1, junk, HEAD);
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 2, &o, &ds), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "no record") != NULL, "%s", dlt_last_error());
}

/* The defaults read a CIFAR-10 batch exactly as dlt_cifar10_open_file does. */
static void test_record_files_default_is_cifar10(void) {
    enum { N = 5, REC = 3073 };
    uint8_t *buf = malloc(N * REC);
    for (int r = 0; r < N; r++) {
        buf[r * REC] = (uint8_t)(r * 7 % 10);
        for (int i = 0; i < 3072; i++) buf[r * REC + 1 + i] = byte_at(3, (uint32_t)r, (uint32_t)i);
    }
    char path[400];
    snprintf(path, sizeof path, "%s/data_batch_1.bin", g_root);
    write_bytes(path, buf, N * REC);
    free(buf);
    const char *paths[1] = {path};
    dlt_dataset *a = NULL, *b = NULL;
    CHECK_OK(dlt_record_files_open(g_ctx, paths, 1, NULL, &a));
    CHECK_OK(dlt_cifar10_open_file(g_ctx, path, &b));
    dlt_loader *la = NULL, *lb = NULL;
    CHECK_OK(dlt_loader_create(a, 2, 1, 0, 8, &la));
    CHECK_OK(dlt_loader_create(b, 2, 1, 0, 8, &lb));
    for (int i = 0; i < 2; i++) {
        dlt_loader *l = i ? lb : la;
        const float mean[3] = {0.5f, 0.4f, 0.3f}, stdv[3] = {0.2f, 0.3f, 0.4f};
        CHECK_OK(dlt_loader_set_normalize(l, mean, stdv));
        CHECK_OK(dlt_loader_set_augment(l, 4, 1));
        CHECK_OK(dlt_loader_set_output(l, DLT_F16, DLT_FORMAT_CHANNELS_LAST, DLT_I64));
    }
    for (int step = 0; step < 6; step++) {
        dlt_tensor *xa = NULL, *ya = NULL, *xb = NULL, *yb = NULL;
        int32_t ha = 0, hb = 0;
        CHECK_OK(dlt_loader_next(la, &xa, &ya, &ha));
        CHECK_OK(dlt_loader_next(lb, &xb, &yb, &hb));
        REQUIRE(ha == hb);
        if (!ha) continue;
        void *pa = bytes_of(xa), *pb = bytes_of(xb);
        CHECK(memcmp(pa, pb, dlt_tensor_nbytes(xa)) == 0, "step %d", step);
        free(pa);
        free(pb);
        CHECK(label_at(ya, 0) == label_at(yb, 0));
    }
    dlt_loader_destroy(la);
    dlt_loader_destroy(lb);
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
}

/* Opening paths[0..1] (paths[1] unreadable) must fail with DLT_ERR_IO naming paths[1]. */
static int open_locked(void *arg) {
    const char *const *paths = arg;
    dlt_dataset *ds = NULL;
    dlt_status st = dlt_record_files_open(g_ctx, paths, 2, NULL, &ds);
    if (st == DLT_ERR_IO && strstr(dlt_last_error(), paths[1]) &&
        strstr(dlt_last_error(), "Permission denied"))
        return 0;
    printf("# unreadable file: status %d, message: %s\n", st, dlt_last_error());
    if (st == DLT_OK) dlt_dataset_destroy(ds);
    return 1;
}

static void test_record_files_refusals(void) {
    uint64_t before = live_allocs();
    char good[400], p[400], loop_a[400], dangling[400], dir[400], locked[400];
    snprintf(good, sizeof good, "%s/good.bin", g_root);
    uint8_t rec[3073] = {0};
    write_bytes(good, rec, sizeof rec);
    dlt_record_file_options o;
    dlt_dataset *ds = (dlt_dataset *)0x1;
    const char *paths[2] = {good, NULL};
    /* layouts */
    dlt_record_file_options_default(&o);
    o.record_bytes = 100; /* the 3072-byte image does not fit */
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 1, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "does not fit") != NULL, "%s", dlt_last_error());
    dlt_record_file_options_default(&o);
    o.label_width = 3;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 1, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    dlt_record_file_options_default(&o);
    o.label_offset = 3073; /* a 1-byte label must start at 3072 at the latest */
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 1, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    dlt_record_file_options_default(&o);
    o.channels = 17;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 1, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    dlt_record_file_options_default(&o);
    o.height = 2000000000;
    o.width = 2000000000;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 1, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    dlt_record_file_options_default(&o);
    o.header_bytes = -1;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 1, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    dlt_record_file_options_default(&o);
    o.num_classes = -2;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 1, &o, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 0, NULL, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 2, NULL, &ds), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_record_files_open(NULL, paths, 1, NULL, &ds), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_record_files_open(g_ctx, NULL, 1, NULL, &ds), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 1, NULL, NULL), DLT_ERR_NULL_POINTER);

    /* files: an empty one, a directory, a symlink loop, a dangling link, no permission */
    snprintf(p, sizeof p, "%s/empty.bin", g_root);
    write_bytes(p, rec, 0);
    paths[1] = p;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 2, NULL, &ds), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), p) && strstr(dlt_last_error(), "empty"), "%s", dlt_last_error());
    snprintf(dir, sizeof dir, "%s/a_dir.bin", g_root);
    CHECK(mkdir(dir, 0700) == 0 || errno == EEXIST);
    paths[1] = dir;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 2, NULL, &ds), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), "regular file") != NULL, "%s", dlt_last_error());
    CHECK(fs_symlink_loop(g_root, "loop.bin", loop_a, sizeof loop_a) == 0);
    paths[1] = loop_a;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 2, NULL, &ds), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), loop_a) && strstr(dlt_last_error(), "symbolic links"), "%s",
          dlt_last_error());
    CHECK(fs_dangling_link(g_root, "dangling.bin", dangling, sizeof dangling) == 0);
    paths[1] = dangling;
    CHECK_STATUS(dlt_record_files_open(g_ctx, paths, 2, NULL, &ds), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), dangling) && strstr(dlt_last_error(), "No such file"), "%s",
          dlt_last_error());
    snprintf(locked, sizeof locked, "%s/locked.bin", g_root);
    write_bytes(locked, rec, sizeof rec);
    CHECK(chmod(locked, 0) == 0);
    paths[1] = locked;
    CHECK(fs_unprivileged(open_locked, (void *)paths) == 0, "permission denied not reported");
    CHECK(ds == (dlt_dataset *)0x1, "out-pointer untouched");
    CHECK(live_allocs() == before, "refusals left allocations behind");
}

/* Every allocation fails once in turn: a clean out-of-memory refusal, nothing left. */
static void test_allocation_failures(void) {
    float xv[24];
    for (int i = 0; i < 24; i++) xv[i] = (float)i;
    int64_t lv[6] = {0, 1, 2, 0, 1, 2};
    int64_t xs[3] = {6, 2, 2}, ls[1] = {6};
    dlt_tensor *x = host_tensor(DLT_F32, xs, 3, xv), *y = host_tensor(DLT_I64, ls, 1, lv);
    dlt_tensor *xc = NULL;
    int64_t cs[4] = {6, 1, 2, 2};
    CHECK_OK(dlt_tensor_empty(g_ctx, DLT_F32, cs, 4, DLT_FORMAT_CHANNELS_LAST, &xc));
    char path[400];
    snprintf(path, sizeof path, "%s/alloc.bin", g_root);
    uint8_t recs[3 * 3073];
    memset(recs, 2, sizeof recs);
    write_bytes(path, recs, sizeof recs);
    const char *paths[1] = {path};
    for (int what = 0; what < 3; what++) {
        int succeeded = 0;
        for (int64_t k = 1; k < 100 && !succeeded; k++) {
            uint64_t before = live_allocs();
            dlt_dataset *ds = (dlt_dataset *)0x1;
            CHECK_OK(dlt_testing_fail_alloc(g_ctx, k));
            dlt_status st = what == 0   ? dlt_tensor_dataset_create(x, y, NULL, &ds)
                            : what == 1 ? dlt_tensor_dataset_create(xc, y, NULL, &ds)
                                        : dlt_record_files_open(g_ctx, paths, 1, NULL, &ds);
            CHECK_OK(dlt_testing_fail_alloc(g_ctx, 0));
            if (st == DLT_OK) {
                succeeded = 1;
                dlt_dataset_destroy(ds);
            } else {
                CHECK(st == DLT_ERR_OUT_OF_MEMORY || st == DLT_ERR_DEVICE_OUT_OF_MEMORY,
                      "case %d failure %lld: %d %s", what, (long long)k, st, dlt_last_error());
                CHECK(ds == (dlt_dataset *)0x1);
                CHECK(live_allocs() == before, "case %d failure %lld leaked", what, (long long)k);
            }
        }
        CHECK(succeeded, "case %d never succeeded", what);
    }
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    dlt_tensor_release(xc);
}

static void remove_tree(const char *dir) {
    char cmd[600];
    if (strncmp(dir, "/tmp/dlt_records_", 17) != 0) return; /* only what this test made */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/dlt_records_XXXXXX");
    if (!mkdtemp(g_root)) {
        printf("# cannot create a temporary directory\n");
        return 1;
    }
    if (chmod(g_root, 0755) != 0) /* an unprivileged child must reach the files it fails to read */
        printf("# cannot make %s searchable\n", g_root);
    g_ctx = th_cpu_ctx();
    RUN(test_tensor_dataset_basics);
    RUN(test_tensor_dataset_conversions);
    RUN(test_tensor_dataset_shuffle);
    RUN(test_tensor_dataset_features_only);
    RUN(test_tensor_dataset_images);
    RUN(test_tensor_dataset_refusals);
    RUN(test_record_files_cifar100);
    RUN(test_record_files_mnist_like);
    RUN(test_record_files_default_is_cifar10);
    RUN(test_record_files_refusals);
    RUN(test_allocation_failures);
    dlt_ctx_destroy(g_ctx);
    remove_tree(g_root);
    return th_done();
}
