/*
 * test_loader.c - the batch loader and evaluation on the CPU, over the tiny CIFAR-10 release
 * that data_common.h writes (the datasets themselves: test_data.c): in-order batches,
 * drop_last and partial batches, shuffle, dtypes and formats, augmentation, cursor replay,
 * seek, refusals, allocation failures and dlt_evaluate.
 *
 * Batches are compared with an independent reference (data_common.h): its own Philox4x32-10
 * (checked against the Random123 known-answer vectors in test_data.c), its own shuffle (sort
 * by key, then index), crop-with-zero-padding and flip, ToTensor (byte / 255 in fp32) and
 * Normalize. fp16/bf16 outputs are compared bit for bit with the fp32 reference rounded by
 * the library's cast (itself checked exhaustively in test_tensor).
 *
 * A "replay" is emulated by marking the context as capturing: the loader then keeps its
 * host position still and only the cursor in backend memory moves, as when a captured step
 * is replayed (cuda_data.c does the same on the GPU).
 */
#include "data_common.h"

/* ---------------------------------------------------------------------------------------
 * Tests
 * ------------------------------------------------------------------------------------- */

/* B = 5 over the 13 training records in file order: batches of 5, 5, 3 */
static void test_loader_in_order(void) {
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    CHECK_OK(dlt_cifar10_open(g_ctx, g_rel, DLT_SPLIT_TRAIN, &ds));
    CHECK_OK(dlt_loader_create(ds, 5, 0, 0, 7, &ld));
    CHECK(dlt_loader_num_batches(ld) == 3 && dlt_loader_batch_size(ld) == 5);
    ref_cfg cfg = {0};
    cfg.seed = 7;
    float ref[5 * IMG];
    dlt_tensor *first_x = NULL;
    for (int epoch = 0; epoch < 2; epoch++) {
        int64_t rows_seen = 0;
        for (int b = 0; b < 3; b++) {
            dlt_tensor *x = NULL, *y = NULL;
            int32_t has = 0;
            CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
            REQUIRE(has == 1 && x && y);
            int64_t rows = b < 2 ? 5 : 3;
            CHECK(dlt_tensor_dim(x, 0) == rows && dlt_tensor_dim(y, 0) == rows, "batch %d", b);
            CHECK(dlt_tensor_dim(x, 1) == 3 && dlt_tensor_dim(x, 2) == 32 && dlt_tensor_dim(x, 3) == 32);
            CHECK(dlt_tensor_dtype(x) == DLT_F32 && dlt_tensor_format(x) == DLT_FORMAT_CONTIGUOUS);
            CHECK(dlt_tensor_dtype(y) == DLT_I64 && dlt_tensor_ndim(y) == 1);
            if (b == 0 && epoch == 0) first_x = x;
            if (b == 1) CHECK(x == first_x, "full batches reuse one buffer");
            for (int64_t r = 0; r < rows; r++) {
                int64_t i = b * 5 + r;
                ref_sample(g_train[i] + 1, epoch, i, &cfg, ref + r * IMG);
                CHECK(label_at(y, r) == g_train[i][0], "epoch %d batch %d row %lld", epoch, b,
                      (long long)r);
            }
            CHECK(compare_batch(x, ref, rows) == 0, "epoch %d batch %d", epoch, b);
            rows_seen += rows;
        }
        CHECK(rows_seen == 13);
        dlt_tensor *x = (dlt_tensor *)0x1, *y = (dlt_tensor *)0x1;
        int32_t has = 7;
        CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
        CHECK(has == 0 && x == NULL && y == NULL, "end of epoch %d", epoch);
    }
    /* ToTensor is byte / 255 in fp32: check a few values against double division too */
    dlt_tensor *x = NULL, *y = NULL;
    int32_t has = 0;
    CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
    float *v = th_read_f32(x);
    for (int i = 0; i < IMG; i++) {
        double want = (double)g_train[0][1 + i] / 255.0;
        CHECK(fabs((double)v[i] - want) <= 6e-8 * (want > 0 ? want : 1), "pixel %d", i);
        if (fabs((double)v[i] - want) > 6e-8) break;
    }
    free(v);
    dlt_loader_destroy(ld);
    dlt_loader_destroy(NULL);
    dlt_dataset_destroy(ds);
}

static void test_drop_last_and_partial(void) {
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    CHECK_OK(dlt_cifar10_open(g_ctx, g_rel, DLT_SPLIT_TRAIN, &ds));
    CHECK_OK(dlt_loader_create(ds, 5, 0, 1, 0, &ld));
    CHECK(dlt_loader_num_batches(ld) == 2);
    int n = 0;
    for (;;) {
        dlt_tensor *x = NULL, *y = NULL;
        int32_t has = 0;
        CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
        if (!has) break;
        CHECK(dlt_tensor_dim(x, 0) == 5);
        n++;
    }
    CHECK(n == 2, "%d batches", n);
    dlt_loader_destroy(ld);
    /* a batch size that divides the set: no partial batch */
    dlt_dataset *syn = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 40, 10, 1, 0, &syn));
    CHECK_OK(dlt_loader_create(syn, 8, 1, 0, 0, &ld));
    CHECK(dlt_loader_num_batches(ld) == 5);
    dlt_loader_destroy(ld);
    CHECK_STATUS(dlt_loader_create(syn, 41, 0, 1, 0, &ld), DLT_ERR_INVALID_ARGUMENT);
    CHECK_OK(dlt_loader_create(syn, 41, 0, 0, 0, &ld));
    CHECK(dlt_loader_num_batches(ld) == 1);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(syn);
    /* PyTorch's CIFAR-10 epoch: 50,000 images at 256 = 195 full batches and one of 80 */
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 50000, 10, 3, 0, &syn));
    CHECK_OK(dlt_loader_create(syn, 256, 1, 0, 5, &ld));
    CHECK(dlt_loader_num_batches(ld) == 196);
    CHECK_OK(dlt_loader_set_output(ld, DLT_F16, DLT_FORMAT_CHANNELS_LAST, DLT_I32));
    int64_t batches = 0, last_rows = 0, total = 0;
    for (;;) {
        dlt_tensor *x = NULL, *y = NULL;
        int32_t has = 0;
        CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
        if (!has) break;
        batches++;
        last_rows = dlt_tensor_dim(x, 0);
        total += last_rows;
    }
    CHECK(batches == 196 && last_rows == 80 && total == 50000, "%lld batches, last %lld",
          (long long)batches, (long long)last_rows);
    dlt_loader_destroy(ld);
    CHECK_OK(dlt_loader_create(syn, 256, 1, 1, 5, &ld));
    CHECK(dlt_loader_num_batches(ld) == 195);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(syn);
    dlt_dataset_destroy(ds);
}

static void check_permutation(const int64_t *o, int64_t n, const char *what) {
    char *seen = calloc((size_t)n, 1);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (o[i] < 0 || o[i] >= n || seen[o[i]]) bad++;
        else seen[o[i]] = 1;
    }
    CHECK(bad == 0, "%s: %lld indices repeated or out of range", what, (long long)bad);
    free(seen);
}

static void test_shuffle(void) {
    dlt_dataset *ds = NULL;
    dlt_loader *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(dlt_cifar10_open(g_ctx, g_rel, DLT_SPLIT_TRAIN, &ds));
    CHECK_OK(dlt_loader_create(ds, 4, 1, 0, 42, &a));
    CHECK_OK(dlt_loader_create(ds, 4, 1, 0, 42, &b));
    CHECK_OK(dlt_loader_create(ds, 4, 1, 0, 43, &c));
    int64_t oa0[13], oa1[13], ob0[13], oc0[13], ref[13];
    CHECK_OK(dlt_loader_epoch_order(a, 0, oa0, 13));
    CHECK_OK(dlt_loader_epoch_order(a, 1, oa1, 13));
    CHECK_OK(dlt_loader_epoch_order(b, 0, ob0, 13));
    CHECK_OK(dlt_loader_epoch_order(c, 0, oc0, 13));
    check_permutation(oa0, 13, "epoch 0");
    check_permutation(oa1, 13, "epoch 1");
    CHECK(memcmp(oa0, ob0, sizeof oa0) == 0, "same seed and epoch: same order");
    CHECK(memcmp(oa0, oa1, sizeof oa0) != 0, "epochs differ");
    CHECK(memcmp(oa0, oc0, sizeof oa0) != 0, "seeds differ");
    ref_data_order(42, 0, 13, ref);
    CHECK(memcmp(oa0, ref, sizeof ref) == 0, "order of epoch 0 against the reference");
    ref_data_order(42, 1, 13, ref);
    CHECK(memcmp(oa1, ref, sizeof ref) == 0, "order of epoch 1 against the reference");

    /* the batches follow the order: two epochs in a row, then an explicit epoch 6 */
    ref_cfg cfg = {0};
    cfg.seed = 42;
    float refx[4 * IMG];
    int64_t epochs[3] = {0, 1, 6};
    for (int e = 0; e < 3; e++) {
        int64_t order[13];
        ref_data_order(42, epochs[e], 13, order);
        if (e == 2) CHECK_OK(dlt_loader_start_epoch(a, 6));
        int64_t pos = 0;
        for (;;) {
            dlt_tensor *x = NULL, *y = NULL;
            int32_t has = 0;
            CHECK_OK(dlt_loader_next(a, &x, &y, &has));
            if (!has) break;
            int64_t rows = dlt_tensor_dim(x, 0);
            for (int64_t r = 0; r < rows; r++) {
                int64_t idx = order[pos + r];
                ref_sample(g_train[idx] + 1, epochs[e], pos + r, &cfg, refx + r * IMG);
                CHECK(label_at(y, r) == g_train[idx][0]);
            }
            CHECK(compare_batch(x, refx, rows) == 0, "epoch %lld position %lld",
                  (long long)epochs[e], (long long)pos);
            pos += rows;
        }
        CHECK(pos == 13, "epoch %lld covered %lld samples", (long long)epochs[e], (long long)pos);
    }
    /* a larger set: coverage and the reference order over several epochs */
    dlt_dataset *syn = NULL;
    dlt_loader *s = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 5000, 10, 9, 0, &syn));
    CHECK_OK(dlt_loader_create(syn, 100, 1, 0, UINT64_C(0xFEEDFACECAFEBEEF), &s));
    int64_t *o = malloc(5000 * sizeof *o), *r = malloc(5000 * sizeof *r);
    for (int64_t e = 0; e < 3; e++) {
        CHECK_OK(dlt_loader_epoch_order(s, e, o, 5000));
        check_permutation(o, 5000, "5000 samples");
        ref_data_order(UINT64_C(0xFEEDFACECAFEBEEF), e, 5000, r);
        CHECK(memcmp(o, r, 5000 * sizeof *o) == 0, "epoch %lld", (long long)e);
    }
    CHECK_STATUS(dlt_loader_epoch_order(s, 0, o, 4999), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_epoch_order(s, -1, o, 5000), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_epoch_order(s, 0, NULL, 5000), DLT_ERR_NULL_POINTER);
    free(o);
    free(r);
    dlt_loader_destroy(s);
    dlt_dataset_destroy(syn);
    /* without shuffle the order is the identity */
    dlt_loader *plain = NULL;
    CHECK_OK(dlt_loader_create(ds, 4, 0, 0, 42, &plain));
    CHECK_OK(dlt_loader_epoch_order(plain, 3, oa0, 13));
    for (int i = 0; i < 13; i++) CHECK(oa0[i] == i);
    dlt_loader_destroy(plain);
    dlt_loader_destroy(a);
    dlt_loader_destroy(b);
    dlt_loader_destroy(c);
    dlt_dataset_destroy(ds);
}

static void test_dtypes_and_formats(void) {
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    CHECK_OK(dlt_cifar10_open(g_ctx, g_rel, DLT_SPLIT_TRAIN, &ds));
    CHECK_OK(dlt_loader_create(ds, 6, 1, 0, 11, &ld));
    const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, stdv[3] = {0.2470f, 0.2435f, 0.2616f};
    const int32_t dts[3] = {DLT_F32, DLT_F16, DLT_BF16};
    const int32_t fmts[2] = {DLT_FORMAT_CONTIGUOUS, DLT_FORMAT_CHANNELS_LAST};
    float ref[6 * IMG];
    int64_t order[13];
    for (int norm = 0; norm < 2; norm++)
        for (int d = 0; d < 3; d++)
            for (int f = 0; f < 2; f++) {
                int32_t ldt = (d + f) % 2 ? DLT_I32 : DLT_I64;
                CHECK_OK(dlt_loader_set_output(ld, dts[d], fmts[f], ldt));
                CHECK_OK(dlt_loader_set_normalize(ld, norm ? mean : NULL, stdv));
                ref_cfg cfg = {0};
                cfg.seed = 11;
                cfg.normalize = norm;
                memcpy(cfg.mean, mean, sizeof mean);
                memcpy(cfg.std, stdv, sizeof stdv);
                int64_t epoch = 2 + norm * 6 + d * 2 + f;
                CHECK_OK(dlt_loader_start_epoch(ld, epoch));
                ref_data_order(11, epoch, 13, order);
                int64_t pos = 0;
                for (int b = 0; b < 3; b++) {
                    dlt_tensor *x = NULL, *y = NULL;
                    int32_t has = 0;
                    CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
                    REQUIRE(has);
                    int64_t rows = dlt_tensor_dim(x, 0);
                    CHECK(rows == (b < 2 ? 6 : 1));
                    CHECK(dlt_tensor_dtype(x) == dts[d] && dlt_tensor_format(x) == fmts[f]);
                    CHECK(dlt_tensor_dtype(y) == ldt);
                    for (int64_t r = 0; r < rows; r++) {
                        ref_sample(g_train[order[pos + r]] + 1, epoch, pos + r, &cfg, ref + r * IMG);
                        CHECK(label_at(y, r) == g_train[order[pos + r]][0]);
                    }
                    CHECK(compare_batch(x, ref, rows) == 0, "dtype %d format %d norm %d batch %d",
                          dts[d], fmts[f], norm, b);
                    pos += rows;
                }
            }
    /* Normalize against float64 arithmetic: within a few fp32 ulps */
    CHECK_OK(dlt_loader_set_output(ld, DLT_F32, DLT_FORMAT_CONTIGUOUS, DLT_I64));
    CHECK_OK(dlt_loader_set_normalize(ld, mean, stdv));
    CHECK_OK(dlt_loader_start_epoch(ld, 0));
    ref_data_order(11, 0, 13, order);
    dlt_tensor *x = NULL, *y = NULL;
    int32_t has = 0;
    CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
    float *v = th_read_f32(x);
    double worst = 0;
    for (int r = 0; r < 6; r++)
        for (int i = 0; i < IMG; i++) {
            int c = i / 1024;
            double want = ((double)g_train[order[r]][1 + i] / 255.0 - (double)mean[c]) / (double)stdv[c];
            double e = fabs((double)v[r * IMG + i] - want) / (fabs(want) > 1 ? fabs(want) : 1);
            if (e > worst) worst = e;
        }
    CHECK(worst < 1e-6, "normalize relative error %g", worst);
    free(v);

    /* refusals */
    float zero[3] = {0.5f, 0.0f, 0.5f}, nan3[3] = {NAN, 0, 0};
    CHECK_STATUS(dlt_loader_set_normalize(ld, mean, zero), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_set_normalize(ld, nan3, stdv), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_set_normalize(ld, mean, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_loader_set_normalize(NULL, mean, stdv), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_loader_set_output(ld, DLT_I32, 0, DLT_I64), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_loader_set_output(ld, DLT_F32, 7, DLT_I64), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_set_output(ld, DLT_F32, 0, DLT_F32), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_loader_set_output(NULL, DLT_F32, 0, DLT_I64), DLT_ERR_NULL_POINTER);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
}

static void test_augment(void) {
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 70, 10, 5, 1, &ds));
    uint8_t (*imgs)[IMG] = malloc(70 * sizeof *imgs);
    int32_t labels[70];
    for (int i = 0; i < 70; i++) CHECK_OK(dlt_dataset_get(ds, i, imgs[i], IMG, &labels[i]));
    const uint64_t seed = 1234;
    CHECK_OK(dlt_loader_create(ds, 16, 1, 0, seed, &ld));
    CHECK_OK(dlt_loader_set_augment(ld, 4, 1));
    const float mean[3] = {0.5f, 0.25f, 0.125f}, stdv[3] = {0.5f, 2.0f, 0.3f};
    ref_cfg cfg = {0};
    cfg.seed = seed;
    cfg.pad = 4;
    cfg.hflip = 1;
    float *ref = malloc(16 * IMG * sizeof(float));
    int flips = 0, crops[9] = {0}, zero_rows = 0;
    for (int pass = 0; pass < 3; pass++) {
        /* pass 0-1: f32 NCHW, epochs 0 and 1; pass 2: normalised bf16 channels-last, epoch 4 */
        int64_t epoch = pass < 2 ? pass : 4;
        if (pass == 2) {
            CHECK_OK(dlt_loader_set_output(ld, DLT_BF16, DLT_FORMAT_CHANNELS_LAST, DLT_I64));
            CHECK_OK(dlt_loader_set_normalize(ld, mean, stdv));
            CHECK_OK(dlt_loader_start_epoch(ld, 4));
            cfg.normalize = 1;
            memcpy(cfg.mean, mean, sizeof mean);
            memcpy(cfg.std, stdv, sizeof stdv);
        }
        int64_t order[70];
        ref_data_order(seed, epoch, 70, order);
        int64_t pos = 0;
        for (;;) {
            dlt_tensor *x = NULL, *y = NULL;
            int32_t has = 0;
            CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
            if (!has) break;
            int64_t rows = dlt_tensor_dim(x, 0);
            for (int64_t r = 0; r < rows; r++) {
                ref_sample(imgs[order[pos + r]], epoch, pos + r, &cfg, ref + r * IMG);
                CHECK(label_at(y, r) == labels[order[pos + r]]);
                uint32_t w[4];
                ref_philox(seed + 0x9E3779B97F4A7C15ull, ((uint64_t)epoch << 32) + (uint64_t)(pos + r), w);
                flips += (int)(w[2] & 1u);
                crops[((uint64_t)w[0] * 9) >> 32]++;
            }
            CHECK(compare_batch(x, ref, rows) == 0, "epoch %lld position %lld", (long long)epoch,
                  (long long)pos);
            if (pass == 0) {
                /* a crop drawn with top offset t < 4 starts with 4 - t rows of padding: 0.0 */
                float *v = th_read_f32(x);
                for (int64_t r = 0; r < rows; r++) {
                    uint32_t w[4];
                    ref_philox(seed + 0x9E3779B97F4A7C15ull, (uint64_t)(pos + r), w);
                    int top = (int)(((uint64_t)w[0] * 9) >> 32);
                    for (int yy = 0; yy < 4 - top; yy++)
                        for (int xx = 0; xx < 32; xx++)
                            CHECK(v[r * IMG + 1024 + yy * 32 + xx] == 0.0f, "padding row %d", yy);
                    zero_rows += top < 4 ? 4 - top : 0;
                }
                free(v);
            }
            pos += rows;
        }
        CHECK(pos == 70);
    }
    /* the draws are not degenerate: both flips and every crop offset occur */
    CHECK(flips > 50 && flips < 160, "%d flips in 210 samples", flips);
    for (int k = 0; k < 9; k++) CHECK(crops[k] > 0, "crop row offset %d never drawn", k);
    CHECK(zero_rows > 20, "only %d padding rows seen", zero_rows);
    CHECK_STATUS(dlt_loader_set_augment(ld, -1, 0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_set_augment(ld, 33, 0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_set_augment(ld, 4, 2), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_set_augment(NULL, 4, 1), DLT_ERR_NULL_POINTER);
    free(ref);
    free(imgs);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
}

/* Replays: with the context marked as capturing the host position stays, the cursor in
 * backend memory moves, and successive calls still walk through the epoch. */
static void test_cursor_replay(void) {
    dlt_dataset *ds = NULL;
    dlt_loader *eager = NULL, *replay = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 50, 10, 2, 0, &ds));
    CHECK_OK(dlt_loader_create(ds, 8, 1, 0, 3, &eager));
    CHECK_OK(dlt_loader_create(ds, 8, 1, 0, 3, &replay));
    CHECK_OK(dlt_loader_set_augment(eager, 2, 1));
    CHECK_OK(dlt_loader_set_augment(replay, 2, 1));
    /* warm-up: one eager batch each */
    dlt_tensor *x = NULL, *y = NULL, *rx = NULL, *ry = NULL;
    int32_t has = 0;
    CHECK_OK(dlt_loader_next(eager, &x, &y, &has));
    CHECK_OK(dlt_loader_next(replay, &rx, &ry, &has));
    const dlt_data_cursor *cur = (const dlt_data_cursor *)dlt__data(replay->cursor);
    CHECK(cur->batch == 1 && cur->epoch == 0 && replay->batch == 1);
    g_ctx->capturing = 1;
    dlt_tensor *captured_x = NULL;
    for (int k = 1; k < 6; k++) { /* the 5 other full batches of 8 */
        CHECK_OK(dlt_loader_next(replay, &rx, &ry, &has));
        if (k == 1) captured_x = rx;
        CHECK(rx == captured_x, "replays write the captured buffers");
        CHECK(replay->batch == 1, "host position frozen while capturing");
        CHECK(cur->batch == k + 1, "device cursor %lld after replay %d", (long long)cur->batch, k);
        g_ctx->capturing = 0; /* eager work and host reads */
        CHECK_OK(dlt_loader_next(eager, &x, &y, &has));
        float *a = th_read_f32(x), *b = th_read_f32(rx);
        REQUIRE(a && b);
        CHECK(memcmp(a, b, 8 * IMG * sizeof(float)) == 0, "replay %d equals eager batch %d", k, k);
        for (int r = 0; r < 8; r++) CHECK(label_at(y, r) == label_at(ry, r));
        free(a);
        free(b);
        g_ctx->capturing = 1;
    }
    g_ctx->capturing = 0;
    /* starting an epoch inside a capture is refused; eagerly it resets both positions */
    g_ctx->capturing = 1;
    CHECK_STATUS(dlt_loader_start_epoch(replay, 1), DLT_ERR_INVALID_STATE);
    g_ctx->capturing = 0;
    CHECK_OK(dlt_loader_start_epoch(replay, 1));
    CHECK(cur->batch == 0 && cur->epoch == 1 && replay->batch == 0 && replay->epoch == 1);
    /* a replay past the end of the epoch wraps around instead of reading out of bounds */
    CHECK_OK(dlt_loader_start_epoch(replay, 0));
    g_ctx->capturing = 1;
    for (int k = 0; k < 9; k++) CHECK_OK(dlt_loader_next(replay, &rx, &ry, &has));
    g_ctx->capturing = 0;
    CHECK(cur->batch == 9);
    int64_t order[50];
    ref_data_order(3, 0, 50, order);
    int32_t lab = -1;
    CHECK_OK(dlt_dataset_get(ds, order[(8 * 8) % 50], NULL, 0, &lab));
    CHECK(label_at(ry, 0) == lab, "wrapped row");
    dlt_loader_destroy(eager);
    dlt_loader_destroy(replay);
    dlt_dataset_destroy(ds);
}

/* dlt_loader_seek: after replays (device cursor only) the host catches up, and the eager
 * calls that follow take the batches an all-eager run takes (the examples' graph mode ends
 * each epoch's replays with a seek, then runs the tail eagerly) */
static void test_seek(void) {
    dlt_dataset *ds = NULL;
    dlt_loader *eager = NULL, *ld = NULL, *fresh = NULL;
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 50, 10, 2, 0, &ds));
    CHECK_OK(dlt_loader_create(ds, 8, 1, 0, 5, &eager));
    CHECK_OK(dlt_loader_create(ds, 8, 1, 0, 5, &ld));
    CHECK_OK(dlt_loader_create(ds, 8, 1, 0, 5, &fresh));
    CHECK_OK(dlt_loader_set_augment(eager, 2, 1));
    CHECK_OK(dlt_loader_set_augment(ld, 2, 1));
    CHECK_OK(dlt_loader_set_augment(fresh, 2, 1));
    float *want[7] = {0};
    int32_t wlab[7] = {0};
    dlt_tensor *x = NULL, *y = NULL;
    int32_t has = 0;
    for (int b = 0; b < 7; b++) { /* 6 full batches of 8, then 2 rows */
        CHECK_OK(dlt_loader_next(eager, &x, &y, &has));
        REQUIRE(has);
        want[b] = th_read_f32(x);
        wlab[b] = label_at(y, 0);
    }
    CHECK(dlt_loader_position(ld) == 0, "position before the first call: %lld", (long long)dlt_loader_position(ld));
    /* one eager batch, three "replays", then the seek */
    CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
    g_ctx->capturing = 1;
    for (int k = 0; k < 3; k++) CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
    CHECK_STATUS(dlt_loader_seek(ld, 4), DLT_ERR_INVALID_STATE);
    g_ctx->capturing = 0;
    CHECK(dlt_loader_position(ld) == 1, "replays leave the host at 1: %lld", (long long)dlt_loader_position(ld));
    CHECK_OK(dlt_loader_seek(ld, dlt_loader_position(ld) + 3));
    CHECK(dlt_loader_position(ld) == 4);
    const dlt_data_cursor *cur = (const dlt_data_cursor *)dlt__data(ld->cursor);
    CHECK(cur->batch == 4 && cur->epoch == 0, "device cursor %lld/%lld", (long long)cur->batch, (long long)cur->epoch);
    for (int b = 4; b < 7; b++) {
        CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
        REQUIRE(has);
        CHECK(dlt_tensor_dim(x, 0) == (b == 6 ? 2 : 8), "batch %d has %lld rows", b, (long long)dlt_tensor_dim(x, 0));
        float *got = th_read_f32(x);
        REQUIRE(got);
        CHECK(memcmp(got, want[b], (size_t)dlt_tensor_dim(x, 0) * IMG * sizeof(float)) == 0,
              "batch %d after the seek equals the eager run's", b);
        CHECK(label_at(y, 0) == wlab[b]);
        free(got);
    }
    CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
    CHECK(!has, "the epoch ends after batch 6");
    /* out of range: refused, nothing moved; the count itself means "at the end" */
    CHECK_OK(dlt_loader_seek(ld, 2));
    CHECK_STATUS(dlt_loader_seek(ld, -1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_seek(ld, 8), DLT_ERR_INVALID_ARGUMENT);
    CHECK(dlt_loader_position(ld) == 2 && cur->batch == 2);
    CHECK_OK(dlt_loader_seek(ld, 7));
    CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
    CHECK(!has, "seek to the count: at the end");
    CHECK_STATUS(dlt_loader_seek(NULL, 0), DLT_ERR_NULL_POINTER);
    /* before any epoch: epoch 0 starts, then the position */
    CHECK_OK(dlt_loader_seek(fresh, 5));
    CHECK_OK(dlt_loader_next(fresh, &x, &y, &has));
    float *got = th_read_f32(x);
    REQUIRE(got);
    CHECK(memcmp(got, want[5], 8 * IMG * sizeof(float)) == 0, "a fresh loader seeked to 5 takes batch 5");
    free(got);
    for (int b = 0; b < 7; b++) free(want[b]);
    dlt_loader_destroy(eager);
    dlt_loader_destroy(ld);
    dlt_loader_destroy(fresh);
    dlt_dataset_destroy(ds);
}

static void test_loader_refusals(void) {
    dlt_dataset *ds = NULL;
    dlt_loader *ld = (dlt_loader *)0x1;
    CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 10, 10, 1, 0, &ds));
    CHECK_STATUS(dlt_loader_create(NULL, 4, 0, 0, 0, &ld), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_loader_create(ds, 4, 0, 0, 0, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_loader_create(ds, 0, 0, 0, 0, &ld), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_create(ds, -3, 0, 0, 0, &ld), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_create(ds, 4, 2, 0, 0, &ld), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_create(ds, 4, 0, -1, 0, &ld), DLT_ERR_INVALID_ARGUMENT);
    CHECK(ld == (dlt_loader *)0x1);
    CHECK_OK(dlt_loader_create(ds, 4, 0, 0, 0, &ld));
    dlt_tensor *x = NULL, *y = NULL;
    int32_t has = 0;
    CHECK_STATUS(dlt_loader_next(NULL, &x, &y, &has), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_loader_next(ld, NULL, &y, &has), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_loader_next(ld, &x, NULL, &has), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_loader_next(ld, &x, &y, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_loader_start_epoch(ld, -1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_loader_start_epoch(NULL, 0), DLT_ERR_NULL_POINTER);
    CHECK(dlt_loader_num_batches(NULL) == 0 && dlt_loader_batch_size(NULL) == 0);
    double acc = 0;
    CHECK_STATUS(dlt_evaluate_accuracy(NULL, ld, &acc), DLT_ERR_NULL_POINTER);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
}

/* Every allocation of every constructor fails once in turn: the status is an out-of-memory
 * one with a message, the out-pointer is untouched, and nothing stays allocated. */
static void test_allocation_failures(void) {
    for (int what = 0; what < 6; what++) {
        int succeeded = 0;
        for (int64_t k = 1; k < 200 && !succeeded; k++) {
            dlt_dataset *ds = NULL;
            dlt_loader *ld = NULL;
            if (what >= 2) {
                CHECK_OK(dlt_synthetic_dataset_create(g_ctx, 30, 10, 1, 1, &ds));
                if (what >= 3) CHECK_OK(dlt_loader_create(ds, 8, 1, 0, 1, &ld));
            }
            uint64_t before = live_allocs();
            dlt_dataset *made = (dlt_dataset *)0x1;
            dlt_loader *made_ld = (dlt_loader *)0x1;
            int64_t order[30];
            dlt_tensor *x = NULL, *y = NULL;
            int32_t has = 0;
            CHECK_OK(dlt_testing_fail_alloc(g_ctx, k));
            dlt_status st;
            switch (what) {
            case 0: st = dlt_cifar10_open(g_ctx, g_rel, DLT_SPLIT_TRAIN, &made); break;
            case 1: st = dlt_synthetic_dataset_create(g_ctx, 2000, 10, 1, 1, &made); break;
            case 2: st = dlt_loader_create(ds, 7, 1, 0, 1, &made_ld); break;
            case 3: st = dlt_loader_set_output(ld, DLT_F16, DLT_FORMAT_CHANNELS_LAST, DLT_I32); break;
            case 4: st = dlt_loader_next(ld, &x, &y, &has); break;
            default: st = dlt_loader_epoch_order(ld, 3, order, 30); break;
            }
            CHECK_OK(dlt_testing_fail_alloc(g_ctx, 0));
            if (st == DLT_OK) {
                succeeded = 1;
                if (what <= 1) dlt_dataset_destroy(made);
                if (what == 2) dlt_loader_destroy(made_ld);
            } else {
                CHECK(st == DLT_ERR_OUT_OF_MEMORY || st == DLT_ERR_DEVICE_OUT_OF_MEMORY,
                      "case %d failure %lld: %d %s", what, (long long)k, st, dlt_last_error());
                CHECK(dlt_last_error()[0] != '\0');
                CHECK(made == (dlt_dataset *)0x1 && made_ld == (dlt_loader *)0x1);
                CHECK(live_allocs() == before, "case %d failure %lld leaked", what, (long long)k);
            }
            if (what == 3 || what == 4) {
                /* the loader still works after the failure */
                CHECK_OK(dlt_loader_next(ld, &x, &y, &has));
                CHECK(has == 1 && dlt_tensor_dim(x, 0) == 8);
            }
            dlt_loader_destroy(ld);
            dlt_dataset_destroy(ds);
        }
        CHECK(succeeded, "case %d never succeeded", what);
    }
}

/* Flatten + Linear(3072 -> 10) whose logit k is pixel k of the red row 0: the prediction
 * is the brightest of the first 10 red pixels. */
static void test_evaluate(void) {
    char dir[300], p[400];
    make_dir(dir, sizeof dir, "eval");
    enum { N = 13 };
    uint8_t recs[N * REC];
    int expect_right = 0;
    for (int r = 0; r < N; r++) {
        uint8_t *rec = recs + r * REC;
        make_record(rec, 11, (uint32_t)r, 0);
        int arg = (r * 3) % 10;
        for (int k = 0; k < 10; k++) rec[1 + k] = (uint8_t)(10 + 20 * k % 97); /* distinct, < 200 */
        rec[1 + arg] = 250;
        rec[0] = (uint8_t)(r % 3 ? arg : (arg + 1) % 10);
        expect_right += r % 3 != 0;
    }
    path_in(p, sizeof p, dir, "test_batch.bin");
    write_bytes(p, recs, sizeof recs);
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    dlt_module *seq = NULL, *flat = NULL, *fc = NULL;
    CHECK_OK(dlt_cifar10_open(g_ctx, dir, DLT_SPLIT_TEST, &ds));
    CHECK_OK(dlt_loader_create(ds, 4, 0, 0, 0, &ld));
    CHECK_OK(dlt_sequential_create(g_ctx, &seq));
    CHECK_OK(dlt_flatten_create(g_ctx, &flat));
    CHECK_OK(dlt_sequential_append(seq, NULL, flat));
    CHECK_OK(dlt_linear_create(g_ctx, IMG, 10, 0, &fc));
    CHECK_OK(dlt_sequential_append(seq, NULL, fc));
    dlt_tensor *w = NULL;
    CHECK_OK(dlt_module_find(seq, "1.weight", &w));
    float *wv = calloc(10 * IMG, sizeof(float));
    for (int k = 0; k < 10; k++) wv[k * IMG + k] = 1.0f;
    CHECK_OK(dlt_tensor_copy_from_host(w, wv, 10 * IMG * sizeof(float)));
    free(wv);
    CHECK_OK(dlt_module_set_training(seq, 1));
    double acc = -1;
    CHECK_OK(dlt_evaluate_accuracy(seq, ld, &acc));
    CHECK_NEAR(acc, (double)expect_right / N, 1e-12);
    CHECK(dlt_module_is_training(seq) == 1, "training mode restored");
    CHECK(dlt_grad_is_enabled(g_ctx) == 1, "grad mode restored");
    int64_t nodes = -1;
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &nodes));
    CHECK(nodes == 0, "%lld nodes recorded during evaluation", (long long)nodes);
    /* again with grad off and eval mode: both stay; int32 labels */
    int32_t prev = 0;
    CHECK_OK(dlt_grad_set_enabled(g_ctx, 0, &prev));
    CHECK_OK(dlt_module_set_training(seq, 0));
    CHECK_OK(dlt_loader_set_output(ld, DLT_F32, DLT_FORMAT_CONTIGUOUS, DLT_I32));
    acc = -1;
    CHECK_OK(dlt_evaluate_accuracy(seq, ld, &acc));
    CHECK_NEAR(acc, (double)expect_right / N, 1e-12);
    CHECK(dlt_module_is_training(seq) == 0 && dlt_grad_is_enabled(g_ctx) == 0);
    CHECK_OK(dlt_grad_set_enabled(g_ctx, 1, NULL));
    CHECK_STATUS(dlt_evaluate_accuracy(seq, NULL, &acc), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_evaluate_accuracy(seq, ld, NULL), DLT_ERR_NULL_POINTER);
    dlt_module_destroy(seq);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
}


int main(void) {
    if (data_setup() != 0) return 1;
    RUN(test_loader_in_order);
    RUN(test_drop_last_and_partial);
    RUN(test_shuffle);
    RUN(test_dtypes_and_formats);
    RUN(test_augment);
    RUN(test_cursor_replay);
    RUN(test_seek);
    RUN(test_loader_refusals);
    RUN(test_allocation_failures);
    RUN(test_evaluate);
    return data_teardown();
}
