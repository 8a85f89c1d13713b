/*
 * data.c - the CPU side of the data pipeline: the batch gather (uint8 images -> float
 * batch with ToTensor, Normalize, random crop and flip), the epoch order (indices sorted
 * by Philox keys with qsort) and the loader cursor (plain host memory here).
 *
 * The per-sample math lives in lib/data/data_internal.h and is shared with cuda/data.cu,
 * so both backends give the same bits for the same loader.
 */
#include <stdlib.h>

#include "../data/data_internal.h"
#include "ops_cpu.h"

dlt_status dlt__cpu_data_gather(dlt_ctx *ctx, const dlt_data_launch *L) {
    (void)ctx;
    const dlt_data_cursor cur = *L->cursor;
    void *xd = dlt__data(L->x);
    void *yd = dlt__data(L->y);
    const int32_t pad = L->crop_pad;
    const int32_t augment = L->crop_pad > 0 || L->hflip;
    for (int64_t row = 0; row < L->n; row++) {
        int64_t raw = cur.batch * L->batch_size + row; /* keys the augmentation */
        int64_t pos = raw % L->count;                  /* wraps past the end (replays) */
        int64_t idx = L->perm ? L->perm[pos] : pos;
        const uint8_t *img = L->images + (size_t)idx * DLT_DATA_IMAGE_BYTES;
        dlt_data_aug a = dlt__data_aug_draw(L->aug_seed, cur.epoch, raw, pad, L->hflip);
        for (int32_t c = 0; c < DLT_DATA_C; c++) {
            float mean = L->mean[c], std = L->std[c];
            for (int32_t y = 0; y < DLT_DATA_H; y++)
                for (int32_t x = 0; x < DLT_DATA_W; x++) {
                    uint8_t b = augment ? dlt__data_src_byte(img, c, y, x, a, pad)
                                        : img[(c * DLT_DATA_H + y) * DLT_DATA_W + x];
                    dlt__st(xd, L->x->dtype, dlt__off4(L->x, row, c, y, x),
                            dlt__data_value(b, L->normalize, mean, std));
                }
        }
        int32_t label = L->labels[idx];
        if (L->y->dtype == DLT_I64)
            ((int64_t *)yd)[row] = label;
        else
            ((int32_t *)yd)[row] = label;
    }
    return DLT_OK;
}

typedef struct keyed_index {
    uint64_t key;
    int32_t index;
} keyed_index;

static int by_key_then_index(const void *pa, const void *pb) {
    const keyed_index *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

dlt_status dlt__cpu_data_order(dlt_ctx *ctx, int32_t *perm, int64_t count, uint64_t seed,
                               int64_t epoch) {
    keyed_index *k = dlt__host_alloc(ctx, (size_t)count * sizeof *k);
    if (!k)
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_loader_start_epoch",
                        "cannot allocate the sort keys for %lld samples", (long long)count);
    for (int64_t i = 0; i < count; i++) {
        k[i].key = dlt__data_shuffle_key(seed, epoch, i);
        k[i].index = (int32_t)i;
    }
    qsort(k, (size_t)count, sizeof *k, by_key_then_index);
    for (int64_t i = 0; i < count; i++) perm[i] = k[i].index;
    free(k);
    return DLT_OK;
}

dlt_status dlt__cpu_data_cursor_set(dlt_ctx *ctx, dlt_data_cursor *cursor, int64_t batch,
                                    int64_t epoch) {
    (void)ctx;
    cursor->batch = batch;
    cursor->epoch = epoch;
    return DLT_OK;
}

dlt_status dlt__cpu_data_cursor_advance(dlt_ctx *ctx, dlt_data_cursor *cursor) {
    (void)ctx;
    cursor->batch++;
    return DLT_OK;
}
