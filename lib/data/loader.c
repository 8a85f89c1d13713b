/*
 * loader.c - the dataset object shared by the readers (cifar10.c, synthetic.c) and the
 * batch loader.
 *
 * A dataset keeps every image (u8 [count,3,32,32]) and label (i32 [count]) in the
 * context's memory, uploaded once. A loader turns it into batches with one backend gather
 * per batch (ctx->be->data_gather) into buffers it owns and reuses, so the tensors it hands
 * out keep their addresses from step to step (a captured CUDA graph reads them); the final
 * partial batch is a view of the first rows of the same buffers.
 *
 * Position: the gather reads the batch index from a cursor in device memory and a tiny
 * backend call advances it after each batch, so a captured step that calls dlt_loader_next
 * walks through the epoch on replay. The host keeps its own copy (epoch, batch) in step
 * with the device for eager use: it decides the rows of each batch and the end of the
 * epoch. While the context is capturing, the host position does not move (the captured
 * call is not executed; replays move the device cursor only), and starting an epoch is
 * refused (its sort would be replayed every step).
 *
 * Shuffling: dlt_loader_start_epoch sorts the indices by Philox keys on the backend
 * (data_order): the order depends only on (seed, epoch), and is the same on every backend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"

/* ---------------------------------------------------------------------------------------
 * Datasets
 * ------------------------------------------------------------------------------------- */

#define NAME_CAP 64 /* bytes per class name slot, NUL included */

dlt_status dlt__dataset_new(dlt_ctx *ctx, int64_t count, int32_t num_classes, const char *func,
                            dlt_dataset **out) {
    if (count < 1 || count > INT32_MAX)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "a dataset holds 1..%d images, got %lld", INT32_MAX, (long long)count);
    if (num_classes < 1 || num_classes > DLT_DATA_MAX_CLASSES)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "num_classes %d is outside 1..%d",
                        num_classes, DLT_DATA_MAX_CLASSES);
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    dlt_dataset *ds = dlt__host_calloc(ctx, 1, sizeof *ds);
    if (!ds) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the dataset object");
    ds->ctx = ctx;
    ds->count = count;
    ds->num_classes = num_classes;
    dlt_status st;
    /* one block: the pointer table, then NAME_CAP bytes per name */
    size_t n = (size_t)num_classes;
    ds->names = dlt__host_alloc(ctx, n * (sizeof(char *) + NAME_CAP));
    if (!ds->names) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %d class names", num_classes);
        goto fail;
    }
    char *slots = (char *)(ds->names + n);
    for (size_t i = 0; i < n; i++) {
        ds->names[i] = slots + i * NAME_CAP;
        snprintf(ds->names[i], NAME_CAP, "class%zu", i);
    }
    int64_t ishape[4] = {count, DLT_DATA_C, DLT_DATA_H, DLT_DATA_W};
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_U8, ishape, 4, DLT_FORMAT_CONTIGUOUS, func,
                                       &ds->images), fail);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_I32, &count, 1, DLT_FORMAT_CONTIGUOUS, func,
                                       &ds->labels), fail);
    *out = ds;
    return DLT_OK;
fail:
    dlt_dataset_destroy(ds);
    return st;
}

dlt_status dlt__dataset_upload(dlt_dataset *ds, int64_t first, int64_t n, const uint8_t *pixels,
                               const int32_t *labels, const char *func) {
    dlt_ctx *ctx = ds->ctx;
    if (first < 0 || n < 0 || first + n > ds->count)
        return dlt__err(DLT_ERR_INTERNAL, func, "upload of records %lld..%lld outside %lld",
                        (long long)first, (long long)(first + n), (long long)ds->count);
    if (n == 0) return DLT_OK;
    uint8_t *img = (uint8_t *)dlt__data(ds->images) + (size_t)first * DLT_DATA_IMAGE_BYTES;
    int32_t *lab = (int32_t *)dlt__data(ds->labels) + first;
    dlt_status st = ctx->be->memcpy_h2d(ctx, img, pixels, (size_t)n * DLT_DATA_IMAGE_BYTES);
    if (st == DLT_OK) st = ctx->be->memcpy_h2d(ctx, lab, labels, (size_t)n * sizeof(int32_t));
    return st == DLT_OK ? DLT_OK : dlt__err_wrap(st, func);
}

dlt_status dlt__dataset_set_name(dlt_dataset *ds, int32_t i, const char *name, size_t len,
                                 const char *func) {
    if (i < 0 || i >= ds->num_classes)
        return dlt__err(DLT_ERR_INTERNAL, func, "class %d outside 0..%d", i, ds->num_classes - 1);
    if (len > NAME_CAP - 1) len = NAME_CAP - 1;
    /* names come from files: keep printable ASCII only so callers can print them safely */
    for (size_t k = 0; k < len; k++) {
        unsigned char ch = (unsigned char)name[k];
        ds->names[i][k] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    ds->names[i][len] = '\0';
    return DLT_OK;
}

void dlt_dataset_destroy(dlt_dataset *ds) {
    if (!ds) return;
    dlt_tensor_release(ds->images);
    dlt_tensor_release(ds->labels);
    free(ds->names);
    free(ds);
}

int64_t dlt_dataset_size(const dlt_dataset *ds) { return ds ? ds->count : 0; }
int32_t dlt_dataset_num_classes(const dlt_dataset *ds) { return ds ? ds->num_classes : 0; }

dlt_status dlt_dataset_get(const dlt_dataset *ds, int64_t index, uint8_t *pixels, size_t nbytes,
                           int32_t *label) {
    static const char *F = "dlt_dataset_get";
    DLT_NULL_CHECK(ds, F);
    if (index < 0 || index >= ds->count)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "index %lld is outside 0..%lld",
                        (long long)index, (long long)ds->count - 1);
    if (pixels && nbytes < DLT_DATA_IMAGE_BYTES)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the pixel buffer has %zu bytes; an image needs %d", nbytes,
                        DLT_DATA_IMAGE_BYTES);
    dlt_ctx *ctx = ds->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "reads the device: not allowed during capture");
    dlt_status st = DLT_OK;
    if (pixels)
        st = ctx->be->memcpy_d2h(ctx, pixels,
                                 (const uint8_t *)dlt__data(ds->images) +
                                     (size_t)index * DLT_DATA_IMAGE_BYTES,
                                 DLT_DATA_IMAGE_BYTES);
    if (st == DLT_OK && label)
        st = ctx->be->memcpy_d2h(ctx, label, (const int32_t *)dlt__data(ds->labels) + index,
                                 sizeof(int32_t));
    return st == DLT_OK ? DLT_OK : dlt__err_wrap(st, F);
}

const char *dlt_dataset_class_name(const dlt_dataset *ds, int32_t i) {
    if (!ds || i < 0 || i >= ds->num_classes) return NULL;
    return ds->names[i];
}

/* ---------------------------------------------------------------------------------------
 * Loader
 * ------------------------------------------------------------------------------------- */

static void release_buffers(dlt_loader *ld) {
    dlt_tensor_release(ld->x);
    dlt_tensor_release(ld->y);
    dlt_tensor_release(ld->x_last);
    dlt_tensor_release(ld->y_last);
    ld->x = ld->y = ld->x_last = ld->y_last = NULL;
}

/* Allocates the batch buffers for the output settings into *tmp (nothing of ld changes on
 * failure). */
static dlt_status make_buffers(const dlt_loader *ld, int32_t dtype, int32_t format,
                               int32_t label_dtype, const char *func, dlt_loader *tmp) {
    dlt_ctx *ctx = ld->ctx;
    int64_t xs[4] = {ld->batch_size, DLT_DATA_C, DLT_DATA_H, DLT_DATA_W};
    dlt_status st;
    tmp->x = tmp->y = tmp->x_last = tmp->y_last = NULL;
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, dtype, xs, 4, format, func, &tmp->x), fail);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, label_dtype, xs, 1, DLT_FORMAT_CONTIGUOUS, func, &tmp->y),
                   fail);
    if (ld->last_rows != ld->batch_size) {
        /* the first rows of a batch are a prefix of memory in both formats (N outermost) */
        int64_t ls[4] = {ld->last_rows, DLT_DATA_C, DLT_DATA_H, DLT_DATA_W};
        DLT_CHECK_GOTO(st, dlt__tensor_view(tmp->x, ls, 4, format, func, &tmp->x_last), fail);
        DLT_CHECK_GOTO(st, dlt__tensor_view(tmp->y, ls, 1, DLT_FORMAT_CONTIGUOUS, func, &tmp->y_last),
                       fail);
    }
    return DLT_OK;
fail:
    release_buffers(tmp);
    return st;
}

static dlt_status need_data_entries(dlt_ctx *ctx, const char *func) {
    const dlt_backend *be = ctx->be;
    if (!be->data_gather) return dlt__be_missing(ctx, func, "data_gather");
    if (!be->data_order) return dlt__be_missing(ctx, func, "data_order");
    if (!be->data_cursor_set) return dlt__be_missing(ctx, func, "data_cursor_set");
    if (!be->data_cursor_advance) return dlt__be_missing(ctx, func, "data_cursor_advance");
    return DLT_OK;
}

dlt_status dlt_loader_create(dlt_dataset *ds, int64_t batch_size, int32_t shuffle,
                             int32_t drop_last, uint64_t seed, dlt_loader **out) {
    static const char *F = "dlt_loader_create";
    DLT_NULL_CHECK(ds, F);
    DLT_NULL_CHECK(out, F);
    if (batch_size < 1 || batch_size > INT32_MAX)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "batch_size %lld is outside 1..%d",
                        (long long)batch_size, INT32_MAX);
    if ((shuffle != 0 && shuffle != 1) || (drop_last != 0 && drop_last != 1))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "shuffle (%d) and drop_last (%d) must be 0 or 1",
                        shuffle, drop_last);
    dlt_ctx *ctx = ds->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    DLT_CHECK(need_data_entries(ctx, F));
    if (drop_last && ds->count < batch_size)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "drop_last with batch_size %lld over %lld images leaves no batch",
                        (long long)batch_size, (long long)ds->count);
    dlt_loader *ld = dlt__host_calloc(ctx, 1, sizeof *ld);
    if (!ld) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the loader");
    ld->ds = ds;
    ld->ctx = ctx;
    ld->batch_size = batch_size;
    ld->shuffle = shuffle;
    ld->drop_last = drop_last;
    ld->seed = seed;
    int64_t rem = ds->count % batch_size;
    ld->num_batches = ds->count / batch_size + (!drop_last && rem ? 1 : 0);
    ld->last_rows = (!drop_last && rem) ? rem : batch_size;
    ld->dtype = DLT_F32;
    ld->format = DLT_FORMAT_CONTIGUOUS;
    ld->label_dtype = DLT_I64;
    for (int c = 0; c < 3; c++) {
        ld->mean[c] = 0.0f;
        ld->std[c] = 1.0f;
    }
    dlt_status st;
    dlt_loader tmp;
    DLT_CHECK_GOTO(st, make_buffers(ld, ld->dtype, ld->format, ld->label_dtype, F, &tmp), fail);
    ld->x = tmp.x;
    ld->y = tmp.y;
    ld->x_last = tmp.x_last;
    ld->y_last = tmp.y_last;
    int64_t two = 2;
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_I64, &two, 1, DLT_FORMAT_CONTIGUOUS, F, &ld->cursor),
                   fail);
    DLT_CHECK_GOTO(st, ctx->be->data_cursor_set(ctx, (dlt_data_cursor *)dlt__data(ld->cursor), 0, 0),
                   fail);
    if (shuffle) {
        int64_t n = ds->count;
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_I32, &n, 1, DLT_FORMAT_CONTIGUOUS, F, &ld->perm),
                       fail);
    }
    *out = ld;
    return DLT_OK;
fail:
    dlt_loader_destroy(ld);
    return dlt__err_wrap(st, F);
}

void dlt_loader_destroy(dlt_loader *ld) {
    if (!ld) return;
    release_buffers(ld);
    dlt_tensor_release(ld->perm);
    dlt_tensor_release(ld->cursor);
    free(ld);
}

dlt_status dlt_loader_set_output(dlt_loader *ld, int32_t dtype, int32_t format, int32_t label_dtype) {
    static const char *F = "dlt_loader_set_output";
    DLT_NULL_CHECK(ld, F);
    if (!dlt__is_float(dtype))
        return dlt__err(DLT_ERR_DTYPE, F, "the image dtype must be f32, f16 or bf16, got %s",
                        dlt_dtype_name(dtype));
    if (format != DLT_FORMAT_CONTIGUOUS && format != DLT_FORMAT_CHANNELS_LAST)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "unknown memory format %d", format);
    if (label_dtype != DLT_I32 && label_dtype != DLT_I64)
        return dlt__err(DLT_ERR_DTYPE, F, "the label dtype must be i32 or i64, got %s",
                        dlt_dtype_name(label_dtype));
    if (dtype == ld->dtype && format == ld->format && label_dtype == ld->label_dtype) return DLT_OK;
    if (ld->ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "buffers cannot change during graph capture");
    dlt_loader tmp;
    DLT_CHECK(make_buffers(ld, dtype, format, label_dtype, F, &tmp));
    release_buffers(ld);
    ld->x = tmp.x;
    ld->y = tmp.y;
    ld->x_last = tmp.x_last;
    ld->y_last = tmp.y_last;
    ld->dtype = dtype;
    ld->format = format;
    ld->label_dtype = label_dtype;
    return DLT_OK;
}

dlt_status dlt_loader_set_normalize(dlt_loader *ld, const float *mean, const float *std) {
    static const char *F = "dlt_loader_set_normalize";
    DLT_NULL_CHECK(ld, F);
    if (!mean) {
        ld->normalize = 0;
        for (int c = 0; c < 3; c++) {
            ld->mean[c] = 0.0f;
            ld->std[c] = 1.0f;
        }
        return DLT_OK;
    }
    DLT_NULL_CHECK(std, F);
    for (int c = 0; c < 3; c++) {
        /* written as negated comparisons so NaN is refused too */
        if (!(mean[c] > -1e30f && mean[c] < 1e30f) || !(std[c] > 0.0f && std[c] < 1e30f))
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "channel %d: mean %g must be finite and std %g finite and > 0", c,
                            (double)mean[c], (double)std[c]);
    }
    ld->normalize = 1;
    for (int c = 0; c < 3; c++) {
        ld->mean[c] = mean[c];
        ld->std[c] = std[c];
    }
    return DLT_OK;
}

dlt_status dlt_loader_set_augment(dlt_loader *ld, int32_t crop_pad, int32_t hflip) {
    static const char *F = "dlt_loader_set_augment";
    DLT_NULL_CHECK(ld, F);
    if (crop_pad < 0 || crop_pad > DLT_DATA_H)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "crop_pad %d is outside 0..%d", crop_pad,
                        DLT_DATA_H);
    if (hflip != 0 && hflip != 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "hflip must be 0 or 1, got %d", hflip);
    ld->crop_pad = crop_pad;
    ld->hflip = hflip;
    return DLT_OK;
}

dlt_status dlt_loader_start_epoch(dlt_loader *ld, int64_t epoch) {
    static const char *F = "dlt_loader_start_epoch";
    DLT_NULL_CHECK(ld, F);
    if (epoch < 0 || epoch > INT32_MAX)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "epoch %lld is outside 0..%d", (long long)epoch,
                        INT32_MAX);
    dlt_ctx *ctx = ld->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "an epoch cannot start inside a captured step (its shuffle would run on "
                        "every replay): start epochs eagerly between replays");
    dlt_status st = DLT_OK;
    if (ld->shuffle)
        st = ctx->be->data_order(ctx, (int32_t *)dlt__data(ld->perm), ld->ds->count, ld->seed, epoch);
    if (st == DLT_OK)
        st = ctx->be->data_cursor_set(ctx, (dlt_data_cursor *)dlt__data(ld->cursor), 0, epoch);
    if (st != DLT_OK) {
        ld->started = 0; /* the device order is unknown now: the next call starts over */
        return dlt__err_wrap(st, F);
    }
    ld->epoch = epoch;
    ld->batch = 0;
    ld->started = 1;
    ld->ended = 0;
    return DLT_OK;
}

dlt_status dlt_loader_next(dlt_loader *ld, dlt_tensor **x, dlt_tensor **y, int32_t *has_batch) {
    static const char *F = "dlt_loader_next";
    DLT_NULL_CHECK(ld, F);
    DLT_NULL_CHECK(x, F);
    DLT_NULL_CHECK(y, F);
    DLT_NULL_CHECK(has_batch, F);
    dlt_ctx *ctx = ld->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (!ld->started)
        DLT_CHECK(dlt_loader_start_epoch(ld, 0));
    else if (ld->ended)
        DLT_CHECK(dlt_loader_start_epoch(ld, ld->epoch + 1));
    if (ld->batch >= ld->num_batches) {
        ld->ended = 1;
        *x = NULL;
        *y = NULL;
        *has_batch = 0;
        return DLT_OK;
    }
    int32_t last = ld->batch == ld->num_batches - 1 && ld->last_rows != ld->batch_size;
    dlt_data_launch L;
    memset(&L, 0, sizeof L);
    L.images = (const uint8_t *)dlt__data(ld->ds->images);
    L.labels = (const int32_t *)dlt__data(ld->ds->labels);
    L.count = ld->ds->count;
    L.perm = ld->perm ? (const int32_t *)dlt__data(ld->perm) : NULL;
    L.cursor = (const dlt_data_cursor *)dlt__data(ld->cursor);
    L.batch_size = ld->batch_size;
    L.n = last ? ld->last_rows : ld->batch_size;
    L.normalize = ld->normalize;
    for (int c = 0; c < 3; c++) {
        L.mean[c] = ld->mean[c];
        L.std[c] = ld->std[c];
    }
    L.crop_pad = ld->crop_pad;
    L.hflip = ld->hflip;
    L.aug_seed = ld->seed;
    L.x = last ? ld->x_last : ld->x;
    L.y = last ? ld->y_last : ld->y;
    dlt_status st = ctx->be->data_gather(ctx, &L);
    if (st == DLT_OK)
        st = ctx->be->data_cursor_advance(ctx, (dlt_data_cursor *)dlt__data(ld->cursor));
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    if (!ctx->capturing) ld->batch++;
    *x = L.x;
    *y = L.y;
    *has_batch = 1;
    return DLT_OK;
}

int64_t dlt_loader_num_batches(const dlt_loader *ld) { return ld ? ld->num_batches : 0; }
int64_t dlt_loader_batch_size(const dlt_loader *ld) { return ld ? ld->batch_size : 0; }

dlt_status dlt_loader_epoch_order(dlt_loader *ld, int64_t epoch, int64_t *out, int64_t n) {
    static const char *F = "dlt_loader_epoch_order";
    DLT_NULL_CHECK(ld, F);
    DLT_NULL_CHECK(out, F);
    int64_t count = ld->ds->count;
    if (n < count)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "out holds %lld entries; the dataset has %lld",
                        (long long)n, (long long)count);
    if (epoch < 0 || epoch > INT32_MAX)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "epoch %lld is outside 0..%d", (long long)epoch,
                        INT32_MAX);
    if (!ld->shuffle) {
        for (int64_t i = 0; i < count; i++) out[i] = i;
        return DLT_OK;
    }
    dlt_ctx *ctx = ld->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "reads the device: not allowed during capture");
    /* a scratch order: the loader's own permutation (the current epoch) stays untouched */
    dlt_tensor *perm = NULL;
    int32_t *host = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_I32, &count, 1, DLT_FORMAT_CONTIGUOUS, F, &perm), done);
    host = dlt__host_alloc(ctx, (size_t)count * sizeof(int32_t));
    if (!host) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %lld indices", (long long)count);
        goto done;
    }
    st = ctx->be->data_order(ctx, (int32_t *)dlt__data(perm), count, ld->seed, epoch);
    if (st == DLT_OK)
        st = ctx->be->memcpy_d2h(ctx, host, dlt__data(perm), (size_t)count * sizeof(int32_t));
    if (st != DLT_OK) {
        st = dlt__err_wrap(st, F);
        goto done;
    }
    for (int64_t i = 0; i < count; i++) out[i] = host[i];
done:
    free(host);
    dlt_tensor_release(perm);
    return st;
}
