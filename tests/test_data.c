/*
 * test_data.c - the datasets on the CPU: the CIFAR-10 reader (train/test splits, a single
 * file, class names, refusals), the synthetic dataset, the reference Philox and the real
 * subset. The batch loader and evaluation are in test_loader.c (shared helpers:
 * data_common.h).
 *
 * The reader is checked on tiny files in the official binary format that this test writes
 * itself (a temporary directory), then on the real subset in shared/data (DLT_CIFAR10_DIR,
 * or ../shared/data/cifar10-subset beside DLT_SOURCE_ROOT; skipped when absent).
 *
 * The reference Philox4x32-10 (tests/ref.c) is checked against the Random123 known-answer
 * vectors here; test_loader.c compares batches with it.
 */
#include "data_common.h"

/* ---------------------------------------------------------------------------------------
 * Tests
 * ------------------------------------------------------------------------------------- */

static void test_reference_philox(void) {
    /* Random123 known-answer vectors for philox4x32-10 */
    uint32_t out[4];
    uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
    ref_philox4(c0, k0, out);
    CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu &&
          out[3] == 0x9b00dbd8u, "%08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
    uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    uint32_t k1[2] = {0xffffffffu, 0xffffffffu};
    ref_philox4(c1, k1, out);
    CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u &&
          out[3] == 0x6d5451fdu, "%08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
    uint32_t c2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
    uint32_t k2[2] = {0xa4093822u, 0x299f31d0u};
    ref_philox4(c2, k2, out);
    CHECK(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u &&
          out[3] == 0x24126ea1u, "%08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
}

static void test_open_train(void) {
    int64_t before = live_allocs();
    dlt_dataset *ds = NULL;
    CHECK_OK(dlt_cifar10_open(g_ctx, g_rel, DLT_SPLIT_TRAIN, &ds));
    CHECK(dlt_dataset_size(ds) == 13, "size %lld", (long long)dlt_dataset_size(ds));
    CHECK(dlt_dataset_num_classes(ds) == 10);
    int hist_file[10] = {0}, hist_ds[10] = {0};
    for (int i = 0; i < 13; i++) {
        uint8_t pix[IMG];
        int32_t label = -1;
        memset(pix, 0xAB, sizeof pix);
        CHECK_OK(dlt_dataset_get(ds, i, pix, sizeof pix, &label));
        CHECK(memcmp(pix, g_train[i] + 1, IMG) == 0, "pixels of record %d", i);
        CHECK(label == g_train[i][0], "record %d label %d vs %d", i, label, g_train[i][0]);
        hist_file[g_train[i][0]]++;
        if (label >= 0 && label < 10) hist_ds[label]++;
    }
    for (int c = 0; c < 10; c++) CHECK(hist_file[c] == hist_ds[c], "class %d", c);
    /* first image: red plane row 0 starts right after the label byte */
    uint8_t first[IMG];
    CHECK_OK(dlt_dataset_get(ds, 0, first, sizeof first, NULL));
    CHECK(first[0] == pixel_byte(1, 0, 0) && first[1024] == pixel_byte(1, 0, 1024) &&
          first[3071] == pixel_byte(1, 0, 3071));
    /* record 7 is the first record of data_batch_3.bin (data_batch_2.bin is absent) */
    int32_t l7 = -1;
    CHECK_OK(dlt_dataset_get(ds, 7, NULL, 0, &l7));
    CHECK(l7 == 2, "label %d", l7);
    CHECK_STATUS(dlt_dataset_get(ds, 13, first, sizeof first, NULL), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_dataset_get(ds, -1, first, sizeof first, NULL), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_dataset_get(ds, 0, first, 3071, NULL), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_dataset_get(NULL, 0, first, sizeof first, NULL), DLT_ERR_NULL_POINTER);
    dlt_dataset_destroy(ds);
    CHECK((int64_t)live_allocs() == before, "allocations left behind");
    dlt_dataset_destroy(NULL);
    CHECK(dlt_dataset_size(NULL) == 0 && dlt_dataset_num_classes(NULL) == 0);
}

static void test_open_test_split_and_file(void) {
    dlt_dataset *ds = NULL;
    CHECK_OK(dlt_cifar10_open(g_ctx, g_rel, DLT_SPLIT_TEST, &ds));
    CHECK(dlt_dataset_size(ds) == 4);
    for (int i = 0; i < 4; i++) {
        uint8_t pix[IMG];
        int32_t label = -1;
        CHECK_OK(dlt_dataset_get(ds, i, pix, sizeof pix, &label));
        CHECK(memcmp(pix, g_test[i] + 1, IMG) == 0 && label == 9 - i, "test record %d", i);
    }
    dlt_dataset_destroy(ds);
    char p[400];
    path_in(p, sizeof p, g_rel, "data_batch_3.bin");
    CHECK_OK(dlt_cifar10_open_file(g_ctx, p, &ds));
    CHECK(dlt_dataset_size(ds) == 6);
    int32_t label = -1;
    uint8_t pix[IMG];
    CHECK_OK(dlt_dataset_get(ds, 5, pix, sizeof pix, &label));
    CHECK(label == g_train[12][0] && memcmp(pix, g_train[12] + 1, IMG) == 0);
    /* the names come from batches.meta.txt beside the file */
    CHECK(strcmp(dlt_dataset_class_name(ds, 9), "truck") == 0);
    dlt_dataset_destroy(ds);
}

static void test_class_names(void) {
    static const char *want[10] = {"airplane", "automobile", "bird", "cat", "deer",
                                   "dog", "frog", "horse", "ship", "truck"};
    dlt_dataset *ds = NULL;
    CHECK_OK(dlt_cifar10_open(g_ctx, g_rel, DLT_SPLIT_TRAIN, &ds));
    for (int i = 0; i < 10; i++) {
        const char *n = dlt_dataset_class_name(ds, i);
        CHECK(n && strcmp(n, want[i]) == 0, "class %d: '%s'", i, n ? n : "(null)");
    }
    CHECK(dlt_dataset_class_name(ds, 10) == NULL && dlt_dataset_class_name(ds, -1) == NULL);
    CHECK(dlt_dataset_class_name(NULL, 0) == NULL);
    dlt_dataset_destroy(ds);
    /* without batches.meta.txt: "class<i>" */
    char dir[300], p[400];
    make_dir(dir, sizeof dir, "nometa");
    path_in(p, sizeof p, dir, "test_batch.bin");
    write_bytes(p, g_test[0], REC);
    CHECK_OK(dlt_cifar10_open(g_ctx, dir, DLT_SPLIT_TEST, &ds));
    CHECK(strcmp(dlt_dataset_class_name(ds, 3), "class3") == 0, "%s", dlt_dataset_class_name(ds, 3));
    dlt_dataset_destroy(ds);
}

static void test_refusals(void) {
    char dir[300], p[400];
    uint8_t buf[3 * REC + 100];
    dlt_dataset *ds = (dlt_dataset *)0x1;
    uint64_t before = live_allocs();

    /* truncated: 2 records and 100 bytes of a third */
    make_dir(dir, sizeof dir, "truncated");
    for (int r = 0; r < 3; r++) make_record(buf + r * REC, 5, (uint32_t)r, 1);
    path_in(p, sizeof p, dir, "data_batch_1.bin");
    write_bytes(p, buf, 2 * REC + 100);
    CHECK_STATUS(dlt_cifar10_open(g_ctx, dir, DLT_SPLIT_TRAIN, &ds), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), p) && strstr(dlt_last_error(), "record 2") &&
          strstr(dlt_last_error(), "3073"), "%s", dlt_last_error());
    CHECK_STATUS(dlt_cifar10_open_file(g_ctx, p, &ds), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), p) != NULL, "%s", dlt_last_error());

    /* a bad label in record 2 of the second file present */
    make_dir(dir, sizeof dir, "badlabel");
    path_in(p, sizeof p, dir, "data_batch_1.bin");
    write_bytes(p, buf, 3 * REC);
    buf[2 * REC] = 10;
    path_in(p, sizeof p, dir, "data_batch_4.bin");
    write_bytes(p, buf, 3 * REC);
    CHECK_STATUS(dlt_cifar10_open(g_ctx, dir, DLT_SPLIT_TRAIN, &ds), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), p) && strstr(dlt_last_error(), "record 2") &&
          strstr(dlt_last_error(), "label 10"), "%s", dlt_last_error());
    buf[2 * REC] = 255;
    write_bytes(p, buf, 3 * REC);
    CHECK_STATUS(dlt_cifar10_open_file(g_ctx, p, &ds), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "label 255") != NULL, "%s", dlt_last_error());

    /* missing directory: the message names the path */
    char missing[320];
    snprintf(missing, sizeof missing, "%s/no_such_dir", g_root);
    CHECK_STATUS(dlt_cifar10_open(g_ctx, missing, DLT_SPLIT_TRAIN, &ds), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), missing) != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_cifar10_open_file(g_ctx, missing, &ds), DLT_ERR_IO);

    /* empty directory: no batch file for either split */
    make_dir(dir, sizeof dir, "empty");
    CHECK_STATUS(dlt_cifar10_open(g_ctx, dir, DLT_SPLIT_TRAIN, &ds), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), dir) && strstr(dlt_last_error(), "data_batch_1.bin"), "%s",
          dlt_last_error());
    CHECK_STATUS(dlt_cifar10_open(g_ctx, dir, DLT_SPLIT_TEST, &ds), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), "test_batch.bin") != NULL, "%s", dlt_last_error());

    /* a directory given where a file is expected, and a file where a directory is */
    make_dir(dir, sizeof dir, "dirfile");
    path_in(p, sizeof p, dir, "test_batch.bin");
    CHECK(mkdir(p, 0700) == 0);
    CHECK_STATUS(dlt_cifar10_open(g_ctx, dir, DLT_SPLIT_TEST, &ds), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), "regular file") != NULL, "%s", dlt_last_error());
    path_in(p, sizeof p, g_rel, "test_batch.bin");
    CHECK_STATUS(dlt_cifar10_open(g_ctx, p, DLT_SPLIT_TEST, &ds), DLT_ERR_IO);

    /* an empty file */
    make_dir(dir, sizeof dir, "zerosize");
    path_in(p, sizeof p, dir, "test_batch.bin");
    write_bytes(p, buf, 0);
    CHECK_STATUS(dlt_cifar10_open(g_ctx, dir, DLT_SPLIT_TEST, &ds), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), p) != NULL, "%s", dlt_last_error());

    /* arguments */
    CHECK_STATUS(dlt_cifar10_open(NULL, g_rel, 0, &ds), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_cifar10_open(g_ctx, NULL, 0, &ds), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_cifar10_open(g_ctx, g_rel, 0, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_cifar10_open(g_ctx, g_rel, 2, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_cifar10_open_file(g_ctx, NULL, &ds), DLT_ERR_NULL_POINTER);
    CHECK(ds == (dlt_dataset *)0x1, "out-pointer untouched on failure");
    CHECK(live_allocs() == before, "refusals left allocations behind");
}
static void test_synthetic(void) {
    dlt_dataset *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 300, 10, 77, 1, &a));
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 300, 10, 77, 1, &b));
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 300, 10, 78, 1, &c));
    CHECK(dlt_dataset_size(a) == 300 && dlt_dataset_num_classes(a) == 10);
    CHECK(strcmp(dlt_dataset_class_name(a, 7), "class7") == 0);
    uint8_t (*img)[IMG] = malloc(300 * sizeof *img);
    int32_t lab[300];
    int hist[10] = {0}, same_b = 1, same_c = 1;
    for (int i = 0; i < 300; i++) {
        uint8_t other[IMG];
        int32_t lb = -1, lc = -1;
        CHECK_OK(dlt_dataset_get(a, i, img[i], IMG, &lab[i]));
        CHECK_OK(dlt_dataset_get(b, i, other, IMG, &lb));
        if (memcmp(other, img[i], IMG) != 0 || lb != lab[i]) same_b = 0;
        CHECK_OK(dlt_dataset_get(c, i, other, IMG, &lc));
        if (memcmp(other, img[i], IMG) != 0) same_c = 0;
        REQUIRE(lab[i] >= 0 && lab[i] < 10, "label %d", lab[i]);
        hist[lab[i]]++;
    }
    CHECK(same_b, "same seed, same dataset");
    CHECK(!same_c, "another seed, another dataset");
    for (int k = 0; k < 10; k++) CHECK(hist[k] >= 12 && hist[k] <= 50, "class %d: %d", k, hist[k]);
    /* learnable: a nearest-class-mean classifier fitted on the first half separates the
     * second half */
    double (*mean)[IMG] = calloc(10, sizeof *mean);
    int cnt[10] = {0};
    for (int i = 0; i < 150; i++) {
        for (int p = 0; p < IMG; p++) mean[lab[i]][p] += img[i][p];
        cnt[lab[i]]++;
    }
    int right = 0;
    for (int k = 0; k < 10; k++)
        for (int p = 0; p < IMG && cnt[k]; p++) mean[k][p] /= cnt[k];
    for (int i = 150; i < 300; i++) {
        int best = -1;
        double bd = 0;
        for (int k = 0; k < 10; k++) {
            if (!cnt[k]) continue;
            double d = 0;
            for (int p = 0; p < IMG; p++) d += (img[i][p] - mean[k][p]) * (img[i][p] - mean[k][p]);
            if (best < 0 || d < bd) {
                best = k;
                bd = d;
            }
        }
        right += best == lab[i];
    }
    CHECK(right >= 140, "nearest-mean accuracy %d/150", right);
    dlt_dataset_destroy(a);
    dlt_dataset_destroy(b);
    dlt_dataset_destroy(c);
    /* learnable = 0: uniform noise bytes (mean 127.5, sd 73.9) */
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 40, 1000, 5, 0, &a));
    double sum = 0, sq = 0;
    for (int i = 0; i < 40; i++) {
        int32_t l = -1;
        CHECK_OK(dlt_dataset_get(a, i, img[0], IMG, &l));
        CHECK(l >= 0 && l < 1000);
        for (int p = 0; p < IMG; p++) {
            sum += img[0][p];
            sq += (double)img[0][p] * img[0][p];
        }
    }
    double n = 40.0 * IMG, m = sum / n, sd = sqrt(sq / n - m * m);
    CHECK(fabs(m - 127.5) < 1.5 && fabs(sd - 73.9) < 1.5, "mean %g sd %g", m, sd);
    dlt_dataset_destroy(a);
    free(img);
    free(mean);
    dlt_dataset *d = (dlt_dataset *)0x1;
    CHECK_STATUS(dlt_synthetic_dataset_create(g_ctx, 0, 10, 1, 0, &d), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_synthetic_dataset_create(g_ctx, 10, 0, 1, 0, &d), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_synthetic_dataset_create(g_ctx, 10, 65537, 1, 0, &d), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_synthetic_dataset_create(g_ctx, 10, 10, 1, 2, &d), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_synthetic_dataset_create(NULL, 10, 10, 1, 0, &d), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_synthetic_dataset_create(g_ctx, 10, 10, 1, 0, NULL), DLT_ERR_NULL_POINTER);
    CHECK(d == (dlt_dataset *)0x1);
}

/* ---- the real subset ---- */

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

static void test_real_subset(void) {
    char dir[512], p[600];
    if (!real_dir(dir, sizeof dir)) SKIP("CIFAR-10 subset not found (set DLT_CIFAR10_DIR)");
    static const char *names[10] = {"airplane", "automobile", "bird", "cat", "deer",
                                    "dog", "frog", "horse", "ship", "truck"};
    static const int known_hist[10] = {1005, 974, 1032, 1016, 999, 937, 1030, 1001, 1025, 981};
    for (int split = 0; split < 2; split++) {
        snprintf(p, sizeof p, "%s/%s", dir, split == 0 ? "data_batch_1.bin" : "test_batch.bin");
        size_t len = 0;
        uint8_t *bytes = th_read_file(p, &len);
        REQUIRE(bytes != NULL, "cannot read %s", p);
        int64_t want_n = split == 0 ? 10000 : 1000;
        REQUIRE(len == (size_t)want_n * REC, "%s has %zu bytes", p, len);
        dlt_dataset *ds = NULL;
        CHECK_OK(dlt_cifar10_open(g_ctx, dir, split, &ds));
        CHECK(dlt_dataset_size(ds) == want_n, "%lld", (long long)dlt_dataset_size(ds));
        for (int c = 0; c < 10; c++) CHECK(strcmp(dlt_dataset_class_name(ds, c), names[c]) == 0);
        int hist_file[10] = {0}, hist_ds[10] = {0};
        for (int64_t i = 0; i < want_n; i++) {
            int32_t l = -1;
            CHECK_OK(dlt_dataset_get(ds, i, NULL, 0, &l));
            hist_file[bytes[i * REC]]++;
            if (l >= 0 && l < 10) hist_ds[l]++;
        }
        for (int c = 0; c < 10; c++) {
            CHECK(hist_ds[c] == hist_file[c], "split %d class %d: %d vs %d", split, c, hist_ds[c],
                  hist_file[c]);
            if (split == 0) CHECK(hist_ds[c] == known_hist[c], "class %d: %d", c, hist_ds[c]);
        }
        uint8_t pix[IMG];
        int32_t l0 = -1;
        CHECK_OK(dlt_dataset_get(ds, 0, pix, sizeof pix, &l0));
        CHECK(memcmp(pix, bytes + 1, IMG) == 0 && l0 == bytes[0]);
        if (split == 0) /* the official first image: a frog, red row 0 starts 59 43 50 68 */
            CHECK(l0 == 6 && pix[0] == 59 && pix[1] == 43 && pix[2] == 50 && pix[3] == 68 &&
                  pix[1024] == 62, "label %d pixels %d %d", l0, pix[0], pix[1]);
        else
            CHECK(l0 == 3 && pix[0] == 158 && pix[1] == 159, "label %d pixel %d", l0, pix[0]);
        int64_t last = want_n - 1;
        CHECK_OK(dlt_dataset_get(ds, last, pix, sizeof pix, &l0));
        CHECK(memcmp(pix, bytes + last * REC + 1, IMG) == 0 && l0 == bytes[last * REC]);
        /* the loader over the test split: 1000 at 256 = 3 x 256 + 232 */
        if (split == 1) {
            dlt_loader *ld = NULL;
            CHECK_OK(dlt_loader_create(ds, 256, 0, 0, 0, &ld));
            CHECK(dlt_loader_num_batches(ld) == 4);
            float *ref = malloc(256 * IMG * sizeof(float));
            ref_cfg cfg = {0};
            int64_t pos = 0;
            for (;;) {
                dlt_tensor *x = NULL, *y = NULL;
                int32_t has = 0;
                CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
                if (!has) break;
                int64_t rows = dlt_tensor_dim(x, 0);
                for (int64_t r = 0; r < rows; r++)
                    ref_sample(bytes + (pos + r) * REC + 1, 0, pos + r, &cfg, ref + r * IMG);
                CHECK(compare_batch(x, ref, rows) == 0, "batch at %lld", (long long)pos);
                CHECK(label_at(y, rows - 1) == bytes[(pos + rows - 1) * REC]);
                pos += rows;
            }
            CHECK(pos == 1000);
            free(ref);
            dlt_loader_destroy(ld);
        }
        free(bytes);
        dlt_dataset_destroy(ds);
    }
}


int main(void) {
    if (data_setup() != 0) return 1;
    RUN(test_reference_philox);
    RUN(test_open_train);
    RUN(test_open_test_split_and_file);
    RUN(test_class_names);
    RUN(test_refusals);
    RUN(test_synthetic);
    RUN(test_real_subset);
    return data_teardown();
}
