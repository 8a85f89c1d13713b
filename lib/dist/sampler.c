/*
 * sampler.c - torch.utils.data.DistributedSampler for the loaders, and the per-rank rows
 * of the token loaders.
 *
 * A rank's shard of epoch e (PyTorch's __iter__): the epoch's order (the loader's shuffle:
 * Philox keys of (seed, e), the same on every backend and rank, computed here on the host
 * with the CPU backend's function), padded by repeating its start up to total_size =
 * num_samples * num_replicas (drop_last = 0) or cut to total_size (drop_last = 1), then
 * every num_replicas-th index from position rank on. num_samples = ceil(n / replicas), or
 * ceil((n - replicas) / replicas) with drop_last when n does not divide.
 *
 * The shard is uploaded into the loader's order buffer at each epoch start; the gather
 * keys its augmentation by the position in the padded epoch (rank + p * replicas), so N
 * ranks at batch b see the batches (and crops and flips) of one rank at batch N*b.
 */
#include <stdlib.h>
#include <string.h>

#include "../cpu/ops_cpu.h"
#include "../data/data_internal.h"
#include "dist_internal.h"

static int64_t shard_size(int64_t n, int32_t replicas, int32_t drop_last) {
    if (drop_last && n % replicas != 0) return (n - replicas + replicas - 1) / replicas;
    return (n + replicas - 1) / replicas;
}

dlt_status dlt__shard_order(const dlt_loader *ld, int64_t epoch, int32_t **out, const char *func) {
    const int64_t n = ld->ds->count, ns = ld->num_samples, R = ld->num_replicas;
    int32_t *full = dlt__host_alloc(ld->ctx, (size_t)n * sizeof *full);
    int32_t *shard = dlt__host_alloc(ld->ctx, (size_t)(ns > 0 ? ns : 1) * sizeof *shard);
    if (!full || !shard) {
        free(full);
        free(shard);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the order of %lld samples", (long long)n);
    }
    dlt_status st = DLT_OK;
    if (ld->shuffle)
        st = dlt__cpu_data_order(ld->ctx, full, n, ld->seed, epoch);
    else
        for (int64_t i = 0; i < n; i++) full[i] = (int32_t)i;
    if (st != DLT_OK) {
        free(full);
        free(shard);
        return dlt__err_wrap(st, func);
    }
    /* position q of the padded (or cut) epoch is full[q % n]: padding repeats the start,
     * as many times over as it takes */
    for (int64_t p = 0; p < ns; p++) shard[p] = full[(ld->rank + p * R) % n];
    free(full);
    *out = shard;
    return DLT_OK;
}

dlt_status dlt_loader_set_distributed(dlt_loader *ld, int32_t num_replicas, int32_t rank, int32_t drop_last) {
    static const char *F = "dlt_loader_set_distributed";
    DLT_NULL_CHECK(ld, F);
    if (num_replicas < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "num_replicas %d must be >= 1", num_replicas);
    if (rank < 0 || rank >= num_replicas)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "Invalid rank %d, rank should be in the interval [0, %d]", rank, num_replicas - 1);
    if (drop_last != 0 && drop_last != 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "drop_last must be 0 or 1, got %d", drop_last);
    dlt_ctx *ctx = ld->ctx;
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "the shard cannot change during graph capture");
    const int64_t n = ld->ds->count;
    const int64_t ns = num_replicas > 1 ? shard_size(n, num_replicas, drop_last) : n;
    if (ns < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "drop_last over %lld samples and %d replicas leaves every shard empty", (long long)n,
                        num_replicas);
    if (ld->drop_last && ns < ld->batch_size)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the loader's drop_last with batch_size %lld over a shard of %lld samples leaves "
                        "no batch", (long long)ld->batch_size, (long long)ns);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    /* the order buffer: the shard's (distributed), the epoch's (shuffle), or none */
    dlt_tensor *perm = NULL;
    const int64_t perm_n = num_replicas > 1 ? ns : (ld->shuffle ? n : 0);
    if (perm_n > 0) DLT_CHECK(dlt__tensor_new(ctx, DLT_I32, &perm_n, 1, DLT_FORMAT_CONTIGUOUS, F, &perm));
    const int64_t rem = ns % ld->batch_size;
    dlt_status st = dlt__loader_partial_views(ld, (!ld->drop_last && rem) ? rem : ld->batch_size, F);
    if (st != DLT_OK) {
        dlt_tensor_release(perm);
        return st;
    }
    dlt_tensor_release(ld->perm);
    ld->perm = perm;
    ld->num_replicas = num_replicas;
    ld->rank = num_replicas > 1 ? rank : 0;
    ld->dist_drop_last = drop_last;
    ld->num_samples = ns;
    ld->num_batches = ns / ld->batch_size + (!ld->drop_last && rem ? 1 : 0);
    ld->started = 0; /* the next batch starts an epoch (its order is the new one) */
    return DLT_OK;
}

int64_t dlt_loader_num_samples(const dlt_loader *ld) { return ld ? ld->num_samples : 0; }

dlt_status dlt_token_loader_set_distributed(dlt_token_loader *ld, int32_t num_replicas, int32_t rank) {
    static const char *F = "dlt_token_loader_set_distributed";
    DLT_NULL_CHECK(ld, F);
    if (num_replicas < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "num_replicas %d must be >= 1", num_replicas);
    if (rank < 0 || rank >= num_replicas)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "rank %d is outside 0..%d", rank, num_replicas - 1);
    if ((int64_t)num_replicas * ld->batch_size > INT32_MAX)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "%d replicas of %lld rows exceed 2^31-1 rows", num_replicas,
                        (long long)ld->batch_size);
    if (ld->ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "the rows cannot change during graph capture");
    ld->row_offset = (int64_t)rank * ld->batch_size;
    return DLT_OK;
}
