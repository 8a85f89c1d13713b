/*
 * data.c - the CPU side of the data pipeline: the batch gather (uint8 images -> float
 * batch with ToTensor, Normalize, random crop and flip; other records copied or converted),
 * the token-window gather, the epoch order (indices sorted by Philox keys with qsort) and
 * the loader cursor (plain host memory here).
 *
 * The per-sample math lives in lib/kernel/data.h and is shared with cuda/data.cu,
 * so both backends give the same bits for the same loader. Rows are independent, so they
 * are split over threads (DLT_PARALLEL_FOR) without changing a bit.
 */
#include <stdlib.h>
#include <string.h>

#include "../kernel/data.h"
#include "cpu.h"
#include "ops_cpu.h"
#include "parallel.h"

/* Dataset index of batch row `row` at the cursor; *raw = the unwrapped epoch position. */
static int64_t sample_of(const dlt_data_launch *L, dlt_data_cursor cur, int64_t row, int64_t *raw) {
    const int64_t p = cur.batch * L->batch_size + row;
    /* keys the augmentation: the position in the whole epoch (a shard's: internal.h) */
    *raw = L->aug_stride ? p * L->aug_stride + L->aug_offset : p;
    int64_t pos = p % L->count; /* wraps past the end (replays) */
    return L->perm ? L->perm[pos] : pos;
}

static void gather_image_row(const dlt_data_launch *L, dlt_data_cursor cur, int64_t row) {
    const int32_t C = (int32_t)L->C, H = (int32_t)L->H, W = (int32_t)L->W, pad = L->crop_pad;
    const int32_t augment = L->crop_pad > 0 || L->hflip;
    void *xd = dlt__data(L->x);
    int64_t raw;
    int64_t idx = sample_of(L, cur, row, &raw);
    const uint8_t *img = L->images + (size_t)idx * L->record_bytes;
    dlt_data_aug a = dlt__data_aug_draw(L->aug_seed, cur.epoch, raw, pad, L->hflip);
    for (int32_t c = 0; c < C; c++) {
        float mean = L->mean[c], std = L->std[c];
        for (int32_t y = 0; y < H; y++)
            for (int32_t x = 0; x < W; x++) {
                uint8_t b = augment ? dlt__data_src_byte(img, c, y, x, a, pad, H, W)
                                    : img[((int64_t)c * H + y) * W + x];
                dlt__st(xd, L->x->dtype, dlt__off4(L->x, row, c, y, x),
                        dlt__data_value(b, L->normalize, mean, std));
            }
    }
}

/* Non-image records: a copy when the dtypes match, else a conversion through fp32 (exact
 * for u8 and for widening; rounding to nearest even when narrowing, as dlt_tensor_cast). */
static void gather_record_row(const dlt_data_launch *L, dlt_data_cursor cur, int64_t row) {
    const int32_t od = L->x->dtype, sd = L->src_dtype;
    const int cl = L->x->format == DLT_FORMAT_CHANNELS_LAST;
    const size_t es = dlt__dtype_size(od);
    const int64_t numel = L->sample_numel, C = L->C, W = L->W;
    int64_t raw;
    int64_t idx = sample_of(L, cur, row, &raw);
    const uint8_t *src = L->images + (size_t)idx * L->record_bytes;
    uint8_t *dst = (uint8_t *)dlt__data(L->x) + (size_t)row * (size_t)numel * es;
    if (od == sd && !cl) {
        memcpy(dst, src, L->record_bytes);
        return;
    }
    for (int64_t e = 0; e < numel; e++) {
        /* memory element e of an [C, H, W] sample stored HWC: its logical (CHW) index */
        int64_t s = e;
        if (cl) {
            int64_t c = e % C, x = (e / C) % W, y = e / (C * W);
            s = (c * L->H + y) * W + x;
        }
        if (od == sd)
            memcpy(dst + (size_t)e * es, src + (size_t)s * es, es);
        else
            dlt__st(dst, od, e, dlt__ld(src, sd, s));
    }
}

dlt_status dlt__cpu_data_gather(dlt_ctx *ctx, const dlt_data_launch *L) {
    (void)ctx;
    const dlt_data_cursor cur = *L->cursor;
    DLT_PARALLEL_FOR(row, L->n, 8) {
        if (L->image)
            gather_image_row(L, cur, row);
        else
            gather_record_row(L, cur, row);
    }
    if (L->y) {
        void *yd = dlt__data(L->y);
        for (int64_t row = 0; row < L->n; row++) {
            int64_t raw;
            int32_t label = L->labels[sample_of(L, cur, row, &raw)];
            if (L->y->dtype == DLT_I64)
                ((int64_t *)yd)[row] = label;
            else
                ((int32_t *)yd)[row] = label;
        }
    }
    return DLT_OK;
}

dlt_status dlt__cpu_data_tokens(dlt_ctx *ctx, const dlt_token_launch *L) {
    (void)ctx;
    const dlt_data_cursor cur = *L->cursor;
    const int64_t T = L->block_size;
    const uint64_t range = (uint64_t)(L->count - T);
    const int wide = L->x->dtype == DLT_I64;
    void *xd = dlt__data(L->x), *yd = dlt__data(L->y);
    DLT_PARALLEL_FOR(b, L->batch_size, dlt__par_grain(T)) {
        int64_t o = dlt__token_offset(L->seed, cur.batch, b + L->row_offset, range);
        const uint16_t *src = L->tokens + o;
        for (int64_t t = 0; t < T; t++) {
            int64_t i = b * T + t;
            if (wide) {
                ((int64_t *)xd)[i] = src[t];
                ((int64_t *)yd)[i] = src[t + 1];
            } else {
                ((int32_t *)xd)[i] = src[t];
                ((int32_t *)yd)[i] = src[t + 1];
            }
        }
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
