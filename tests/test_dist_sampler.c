/*
 * test_dist_sampler.c - the distributed sampler on the CPU: shards against PyTorch's
 * DistributedSampler (sizes, replicas, drop_last, shuffle, epochs), and sharded batches
 * (images with their augmentation, token rows) equal to rows of the global batch. The loaders
 * need no communicator; each case still runs in one forked rank (dist_common.h), where the
 * rank-side checks (CC, COK, CST) report.
 */
#include "dist_common.h"

/* =========================================================================================
 * The distributed sampler
 * ======================================================================================= */

/* PyTorch's DistributedSampler over an epoch order `full` of n samples. */
static int64_t torch_shard(const int64_t *full, int64_t n, int R, int r, int drop_last, int64_t *out) {
    int64_t ns = (drop_last && n % R) ? (n - R + R - 1) / R : (n + R - 1) / R, total = ns * R;
    int64_t k = 0;
    for (int64_t q = r; q < total; q += R) out[k++] = full[q % n]; /* padding repeats the start */
    return k;
}

static void sampler_rank(int rank, int world, void *arg) {
    (void)rank, (void)world, (void)arg;
    dlt_ctx *ctx = cpu_ctx(1);
    const int64_t sizes[] = {1, 5, 10, 11, 40};
    for (size_t si = 0; si < 5; si++)
        for (int shuffle = 0; shuffle < 2; shuffle++)
            for (int R = 1; R <= 7; R++)
                for (int dl = 0; dl < 2; dl++) {
                    const int64_t n = sizes[si];
                    if (dl && n < R) continue; /* every shard would be empty */
                    dlt_dataset *ds = NULL;
                    COK(dlt_synthetic_dataset_create(ctx, n, 10, 3, 1, &ds));
                    dlt_loader *whole = NULL;
                    COK(dlt_loader_create(ds, 1, shuffle, 0, 99, &whole));
                    int64_t full[64], want[64], got[64];
                    int counts[64] = {0};
                    for (int64_t epoch = 0; epoch < 2; epoch++) {
                        COK(dlt_loader_epoch_order(whole, epoch, full, 64));
                        int64_t covered = 0;
                        for (int r = 0; r < R; r++) {
                            dlt_loader *ld = NULL;
                            COK(dlt_loader_create(ds, 1, shuffle, 0, 99, &ld));
                            COK(dlt_loader_set_distributed(ld, R, r, dl));
                            int64_t k = torch_shard(full, n, R, r, dl, want);
                            CC(dlt_loader_num_samples(ld) == k, "n %lld R %d drop_last %d: %lld samples, want %lld",
                               (long long)n, R, dl, (long long)dlt_loader_num_samples(ld), (long long)k);
                            COK(dlt_loader_epoch_order(ld, epoch, got, 64));
                            CC(memcmp(got, want, (size_t)k * sizeof *got) == 0,
                               "n %lld R %d r %d drop_last %d shuffle %d epoch %lld: shard differs from PyTorch's",
                               (long long)n, R, r, dl, shuffle, (long long)epoch);
                            /* the batches hand out exactly the shard */
                            COK(dlt_loader_start_epoch(ld, epoch));
                            for (int64_t i = 0; i < k; i++) {
                                dlt_tensor *x = NULL, *y = NULL;
                                int32_t has = 0, label = -1;
                                double lab = -2;
                                COK(dlt_loader_next(ld, &x, &y, &has));
                                CC(has, "batch %lld missing", (long long)i);
                                if (!has) break;
                                COK(dlt_tensor_get(y, 0, &lab));
                                COK(dlt_dataset_get(ds, want[i], NULL, 0, &label));
                                CC(lab == label, "batch %lld label %g, sample %lld has %d", (long long)i, lab,
                                   (long long)want[i], label);
                            }
                            for (int64_t i = 0; i < k; i++) counts[want[i]]++;
                            covered += k;
                            dlt_loader_destroy(ld);
                        }
                        /* disjoint and covering: every sample once, padding repeats only the start */
                        int64_t total = dl && n % R ? (n / R) * R : n;
                        for (int64_t i = 0; i < n; i++) {
                            int64_t pos = 0;
                            while (full[pos] != i) pos++;
                            const int expected_min = pos < total ? 1 : 0;
                            CC(counts[i] >= expected_min && counts[i] <= expected_min + (covered + n - 1) / n,
                               "sample %lld appears %d times", (long long)i, counts[i]);
                            counts[i] = 0;
                        }
                        CC(dl ? covered == total : covered >= n, "covered %lld of %lld", (long long)covered,
                           (long long)n);
                    }
                    dlt_loader_destroy(whole);
                    dlt_dataset_destroy(ds);
                }
    /* misuse */
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    COK(dlt_synthetic_dataset_create(ctx, 10, 10, 3, 1, &ds));
    COK(dlt_loader_create(ds, 4, 1, 1, 99, &ld));
    CST(dlt_loader_set_distributed(NULL, 2, 0, 0), DLT_ERR_NULL_POINTER, NULL);
    CST(dlt_loader_set_distributed(ld, 0, 0, 0), DLT_ERR_INVALID_ARGUMENT, "num_replicas");
    CST(dlt_loader_set_distributed(ld, 2, 2, 0), DLT_ERR_INVALID_ARGUMENT, "Invalid rank 2");
    CST(dlt_loader_set_distributed(ld, 2, 0, 3), DLT_ERR_INVALID_ARGUMENT, "drop_last");
    CST(dlt_loader_set_distributed(ld, 4, 0, 0), DLT_ERR_INVALID_ARGUMENT, "leaves no batch");
    CC(dlt_loader_num_samples(ld) == 10 && dlt_loader_num_batches(ld) == 2, "a failed call changed the loader");
    CC(dlt_loader_num_samples(NULL) == 0, "NULL");
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
    dlt_ctx_destroy(ctx);
}

static void test_sampler_matches_pytorch(void) {
    int ws[1];
    run_ranks(1, 1, sampler_rank, NULL, 120, ws);
    expect_clean(1, ws);
}

/* 2 ranks at batch 4 read (and augment) exactly what one process reads at batch 8. */
static void sampler_batches_rank(int rank, int world, void *arg) {
    (void)rank, (void)world, (void)arg;
    dlt_ctx *ctx = cpu_ctx(1);
    dlt_dataset *ds = NULL;
    COK(dlt_synthetic_dataset_create(ctx, 40, 10, 3, 1, &ds));
    dlt_loader *one = NULL, *part[2] = {NULL, NULL};
    COK(dlt_loader_create(ds, 8, 1, 0, 5, &one));
    COK(dlt_loader_set_augment(one, 4, 1));
    for (int r = 0; r < 2; r++) {
        COK(dlt_loader_create(ds, 4, 1, 0, 5, &part[r]));
        COK(dlt_loader_set_augment(part[r], 4, 1));
        COK(dlt_loader_set_distributed(part[r], 2, r, 0));
        CC(dlt_loader_num_batches(part[r]) == dlt_loader_num_batches(one), "batches per epoch");
    }
    const size_t img = 3 * 32 * 32 * sizeof(float);
    float *a = malloc(8 * img), *b = malloc(4 * img);
    int64_t la[8], lb[4];
    for (int epoch = 0; epoch < 2; epoch++) {
        COK(dlt_loader_start_epoch(one, epoch));
        for (int r = 0; r < 2; r++) COK(dlt_loader_start_epoch(part[r], epoch));
        for (int64_t k = 0; k < dlt_loader_num_batches(one); k++) {
            dlt_tensor *x = NULL, *y = NULL;
            int32_t has = 0;
            COK(dlt_loader_next(one, &x, &y, &has));
            COK(dlt_tensor_copy_to_host(x, a, 8 * img));
            COK(dlt_tensor_copy_to_host(y, la, sizeof la));
            for (int r = 0; r < 2; r++) {
                COK(dlt_loader_next(part[r], &x, &y, &has));
                COK(dlt_tensor_copy_to_host(x, b, 4 * img));
                COK(dlt_tensor_copy_to_host(y, lb, sizeof lb));
                for (int j = 0; j < 4; j++) {
                    CC(memcmp((char *)b + j * img, (char *)a + (2 * j + r) * img, img) == 0 && lb[j] == la[2 * j + r],
                       "epoch %d batch %lld: rank %d row %d is not row %d of the global batch", epoch, (long long)k,
                       r, j, 2 * j + r);
                }
            }
        }
    }
    free(a);
    free(b);
    /* token loaders: rank r's rows are rows r*B.. of the global batch */
    dlt_token_dataset *tds = NULL;
    dlt_token_loader *tg = NULL, *tr[3] = {NULL, NULL, NULL};
    COK(dlt_synthetic_tokens_create(ctx, 5000, 65, 9, &tds));
    COK(dlt_token_loader_create(tds, 6, 16, 21, &tg));
    int64_t og[6], orr[2];
    for (int r = 0; r < 3; r++) {
        COK(dlt_token_loader_create(tds, 2, 16, 21, &tr[r]));
        COK(dlt_token_loader_set_distributed(tr[r], 3, r));
    }
    for (int64_t s = 0; s < 4; s++) {
        COK(dlt_token_loader_offsets(tg, s, og, 6));
        for (int r = 0; r < 3; r++) {
            COK(dlt_token_loader_offsets(tr[r], s, orr, 2));
            CC(orr[0] == og[2 * r] && orr[1] == og[2 * r + 1], "draw %lld rank %d", (long long)s, r);
        }
    }
    dlt_tensor *xg = NULL, *yg = NULL, *xr = NULL, *yr = NULL;
    int64_t hg[6 * 16], hr[2 * 16];
    COK(dlt_token_loader_next(tg, &xg, &yg));
    COK(dlt_tensor_copy_to_host(xg, hg, sizeof hg));
    COK(dlt_token_loader_next(tr[2], &xr, &yr));
    COK(dlt_tensor_copy_to_host(xr, hr, sizeof hr));
    CC(memcmp(hr, hg + 4 * 16, sizeof hr) == 0, "rank 2's token batch is not rows 4..5");
    CST(dlt_token_loader_set_distributed(tr[0], 3, 3), DLT_ERR_INVALID_ARGUMENT, "rank 3");
    CST(dlt_token_loader_set_distributed(NULL, 1, 0), DLT_ERR_NULL_POINTER, NULL);
    for (int r = 0; r < 3; r++) dlt_token_loader_destroy(tr[r]);
    dlt_token_loader_destroy(tg);
    dlt_token_dataset_destroy(tds);
    for (int r = 0; r < 2; r++) dlt_loader_destroy(part[r]);
    dlt_loader_destroy(one);
    dlt_dataset_destroy(ds);
    dlt_ctx_destroy(ctx);
}

static void test_sharded_batches_equal_the_global_batch(void) {
    int ws[1];
    run_ranks(1, 1, sampler_batches_rank, NULL, 120, ws);
    expect_clean(1, ws);
}

int main(void) {
    if (!dist_init()) return 0;
    RUN(test_sampler_matches_pytorch);
    RUN(test_sharded_batches_equal_the_global_batch);
    return th_done();
}
