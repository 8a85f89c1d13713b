/*
 * loader.c - the dataset object shared by the readers (cifar10.c, records.c, synthetic.c,
 * tensor_dataset.c) and the batch loader.
 *
 * A dataset keeps every sample (records of one dtype and shape: u8 [C,H,W] for images) and
 * label (i32 [count], or none) in the context's memory, uploaded once. A loader turns it
 * into batches with one backend gather per batch (ctx->be->data_gather) into buffers it
 * owns and reuses, so the tensors it hands
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
#include "../dist/dist_internal.h" /* dist: a distributed loader's shard (sampler.c) */

/* ---------------------------------------------------------------------------------------
 * Datasets
 * ------------------------------------------------------------------------------------- */

#define NAME_CAP 64 /* bytes per class name slot, NUL included */

dlt_data_sample dlt__data_cifar_sample(void) {
    dlt_data_sample s;
    memset(&s, 0, sizeof s);
    s.dtype = DLT_U8;
    s.image = 1;
    s.ndim = 3;
    s.shape[0] = DLT_DATA_C;
    s.shape[1] = DLT_DATA_H;
    s.shape[2] = DLT_DATA_W;
    return s;
}

/* num_classes default names "class<i>" in one block: the pointer table, then NAME_CAP bytes
 * per name. */
static dlt_status new_names(dlt_ctx *ctx, int32_t num_classes, const char *func, char ***out) {
    size_t n = (size_t)num_classes;
    char **names = dlt__host_alloc(ctx, n * (sizeof(char *) + NAME_CAP));
    if (!names)
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %d class names", num_classes);
    char *slots = (char *)(names + n);
    for (size_t i = 0; i < n; i++) {
        names[i] = slots + i * NAME_CAP;
        snprintf(names[i], NAME_CAP, "class%zu", i);
    }
    *out = names;
    return DLT_OK;
}

static dlt_status check_sample(const dlt_data_sample *s, const char *func, int64_t *numel,
                               size_t *bytes) {
    if (s->dtype != DLT_F32 && s->dtype != DLT_F16 && s->dtype != DLT_BF16 && s->dtype != DLT_U8)
        return dlt__err(DLT_ERR_DTYPE, func, "samples must be f32, f16, bf16 or u8, got %s",
                        dlt_dtype_name(s->dtype));
    if (s->ndim < 0 || s->ndim > DLT_MAX_DIMS - 1)
        return dlt__err(DLT_ERR_SHAPE, func, "a sample has 0..%d dimensions, got %d",
                        DLT_MAX_DIMS - 1, s->ndim);
    size_t n = 1;
    for (int32_t i = 0; i < s->ndim; i++) {
        if (s->shape[i] < 1)
            return dlt__err(DLT_ERR_SHAPE, func, "sample dimension %d has size %lld (must be >= 1)",
                            i, (long long)s->shape[i]);
        if (dlt__mul_overflow(n, (size_t)s->shape[i], &n) || n > (size_t)INT32_MAX)
            return dlt__err(DLT_ERR_SHAPE, func, "a sample holds more than %d elements", INT32_MAX);
    }
    /* images: the crop arithmetic is int32 (pad <= min(H, W)) */
    if (s->image && (s->dtype != DLT_U8 || s->ndim != 3 || s->shape[0] > DLT_DATA_MAX_CHANNELS ||
                     s->shape[1] > DLT_DATA_MAX_SIDE || s->shape[2] > DLT_DATA_MAX_SIDE))
        return dlt__err(DLT_ERR_SHAPE, func,
                        "an image sample is u8 [C, H, W] with C <= %d and H, W <= %d, got %s with "
                        "%d dimensions",
                        DLT_DATA_MAX_CHANNELS, DLT_DATA_MAX_SIDE, dlt_dtype_name(s->dtype), s->ndim);
    *numel = (int64_t)n;
    *bytes = n * dlt__dtype_size(s->dtype);
    return DLT_OK;
}

/* The dataset object without its records tensor (the caller allocates or adopts one). */
static dlt_status dataset_shell(dlt_ctx *ctx, const dlt_data_sample *sample, int64_t count,
                                int32_t num_classes, const char *func, dlt_dataset **out) {
    if (count < 1 || count > INT32_MAX)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "a dataset holds 1..%d samples, got %lld", INT32_MAX, (long long)count);
    if (num_classes < 0 || num_classes > DLT_DATA_MAX_CLASSES)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "num_classes %d is outside 0..%d",
                        num_classes, DLT_DATA_MAX_CLASSES);
    int64_t numel = 0;
    size_t bytes = 0;
    DLT_CHECK(check_sample(sample, func, &numel, &bytes));
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    dlt_dataset *ds = dlt__host_calloc(ctx, 1, sizeof *ds);
    if (!ds) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the dataset object");
    ds->ctx = ctx;
    ds->count = count;
    ds->num_classes = num_classes;
    ds->sample = *sample;
    ds->sample_numel = numel;
    ds->record_bytes = bytes;
    dlt_status st;
    if (num_classes > 0) {
        DLT_CHECK_GOTO(st, new_names(ctx, num_classes, func, &ds->names), fail);
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_I32, &count, 1, DLT_FORMAT_CONTIGUOUS, func,
                                           &ds->labels), fail);
    }
    *out = ds;
    return DLT_OK;
fail:
    dlt_dataset_destroy(ds);
    return st;
}

/* The records tensor's shape: [count, *sample]. */
static int32_t records_shape(const dlt_dataset *ds, int64_t *shape) {
    shape[0] = ds->count;
    for (int32_t i = 0; i < ds->sample.ndim; i++) shape[1 + i] = ds->sample.shape[i];
    return 1 + ds->sample.ndim;
}

dlt_status dlt__dataset_new(dlt_ctx *ctx, const dlt_data_sample *sample, int64_t count,
                            int32_t num_classes, const char *func, dlt_dataset **out) {
    dlt_dataset *ds = NULL;
    DLT_CHECK(dataset_shell(ctx, sample, count, num_classes, func, &ds));
    int64_t shape[DLT_MAX_DIMS];
    int32_t nd = records_shape(ds, shape);
    dlt_status st = dlt__tensor_new(ctx, sample->dtype, shape, nd, DLT_FORMAT_CONTIGUOUS, func,
                                    &ds->images);
    if (st != DLT_OK) {
        dlt_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return DLT_OK;
}

dlt_status dlt__dataset_adopt(dlt_ctx *ctx, const dlt_data_sample *sample, int64_t count,
                              dlt_tensor *records, const char *func, dlt_dataset **out) {
    dlt_dataset *ds = NULL;
    DLT_CHECK(dataset_shell(ctx, sample, count, 0, func, &ds));
    ds->images = dlt_tensor_retain(records);
    *out = ds;
    return DLT_OK;
}

dlt_status dlt__dataset_upload(dlt_dataset *ds, int64_t first, int64_t n, const void *records,
                               const int32_t *labels, const char *func) {
    dlt_ctx *ctx = ds->ctx;
    if (first < 0 || n < 0 || first + n > ds->count)
        return dlt__err(DLT_ERR_INTERNAL, func, "upload of records %lld..%lld outside %lld",
                        (long long)first, (long long)(first + n), (long long)ds->count);
    if (n == 0) return DLT_OK;
    uint8_t *img = (uint8_t *)dlt__data(ds->images) + (size_t)first * ds->record_bytes;
    dlt_status st = ctx->be->memcpy_h2d(ctx, img, records, (size_t)n * ds->record_bytes);
    if (st == DLT_OK && ds->labels) {
        int32_t *lab = (int32_t *)dlt__data(ds->labels) + first;
        st = ctx->be->memcpy_h2d(ctx, lab, labels, (size_t)n * sizeof(int32_t));
    }
    return st == DLT_OK ? DLT_OK : dlt__err_wrap(st, func);
}

dlt_status dlt__dataset_set_labels(dlt_dataset *ds, const int32_t *labels, int32_t num_classes,
                                   const char *func) {
    if (ds->labels || num_classes < 1 || num_classes > DLT_DATA_MAX_CLASSES)
        return dlt__err(DLT_ERR_INTERNAL, func, "labels set twice or %d classes", num_classes);
    dlt_ctx *ctx = ds->ctx;
    char **names = NULL;
    DLT_CHECK(new_names(ctx, num_classes, func, &names));
    dlt_tensor *t = NULL;
    int64_t count = ds->count;
    dlt_status st = dlt__tensor_new(ctx, DLT_I32, &count, 1, DLT_FORMAT_CONTIGUOUS, func, &t);
    if (st == DLT_OK) st = ctx->be->memcpy_h2d(ctx, dlt__data(t), labels, (size_t)count * sizeof(int32_t));
    if (st != DLT_OK) {
        free(names);
        dlt_tensor_release(t);
        return dlt__err_wrap(st, func);
    }
    ds->labels = t;
    ds->names = names;
    ds->num_classes = num_classes;
    return DLT_OK;
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
int32_t dlt_dataset_dtype(const dlt_dataset *ds) { return ds ? ds->sample.dtype : -1; }
size_t dlt_dataset_sample_bytes(const dlt_dataset *ds) { return ds ? ds->record_bytes : 0; }
int32_t dlt_dataset_is_image(const dlt_dataset *ds) { return ds ? ds->sample.image : 0; }

int32_t dlt_dataset_sample_shape(const dlt_dataset *ds, int64_t *dims, int32_t max_dims) {
    if (!ds) return -1;
    for (int32_t i = 0; dims && i < ds->sample.ndim && i < max_dims; i++) dims[i] = ds->sample.shape[i];
    return ds->sample.ndim;
}

dlt_status dlt_dataset_get(const dlt_dataset *ds, int64_t index, uint8_t *pixels, size_t nbytes,
                           int32_t *label) {
    static const char *F = "dlt_dataset_get";
    DLT_NULL_CHECK(ds, F);
    if (index < 0 || index >= ds->count)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "index %lld is outside 0..%lld",
                        (long long)index, (long long)ds->count - 1);
    if (pixels && nbytes < ds->record_bytes)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the pixel buffer has %zu bytes; a sample needs %zu", nbytes,
                        ds->record_bytes);
    dlt_ctx *ctx = ds->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "reads the device: not allowed during capture");
    dlt_status st = DLT_OK;
    if (pixels)
        st = ctx->be->memcpy_d2h(ctx, pixels,
                                 (const uint8_t *)dlt__data(ds->images) +
                                     (size_t)index * ds->record_bytes,
                                 ds->record_bytes);
    if (st == DLT_OK && label) {
        if (ds->labels)
            st = ctx->be->memcpy_d2h(ctx, label, (const int32_t *)dlt__data(ds->labels) + index,
                                     sizeof(int32_t));
        else
            *label = -1;
    }
    return st == DLT_OK ? DLT_OK : dlt__err_wrap(st, F);
}

const char *dlt_dataset_class_name(const dlt_dataset *ds, int32_t i) {
    if (!ds || !ds->names || i < 0 || i >= ds->num_classes) return NULL;
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
 * failure). x is [B, *sample], y [B] when the dataset has labels. */
static dlt_status make_buffers(const dlt_loader *ld, int32_t dtype, int32_t format,
                               int32_t label_dtype, const char *func, dlt_loader *tmp) {
    dlt_ctx *ctx = ld->ctx;
    const dlt_dataset *ds = ld->ds;
    int64_t xs[DLT_MAX_DIMS];
    int32_t nd = 1 + ds->sample.ndim;
    xs[0] = ld->batch_size;
    for (int32_t i = 0; i < ds->sample.ndim; i++) xs[1 + i] = ds->sample.shape[i];
    dlt_status st;
    tmp->x = tmp->y = tmp->x_last = tmp->y_last = NULL;
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, dtype, xs, nd, format, func, &tmp->x), fail);
    if (ds->labels)
        DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, label_dtype, xs, 1, DLT_FORMAT_CONTIGUOUS, func,
                                           &tmp->y), fail);
    if (ld->last_rows != ld->batch_size) {
        /* the first rows of a batch are a prefix of memory in both formats (N outermost) */
        xs[0] = ld->last_rows;
        DLT_CHECK_GOTO(st, dlt__tensor_view(tmp->x, xs, nd, format, func, &tmp->x_last), fail);
        if (tmp->y)
            DLT_CHECK_GOTO(st, dlt__tensor_view(tmp->y, xs, 1, DLT_FORMAT_CONTIGUOUS, func,
                                                &tmp->y_last), fail);
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

dlt_status dlt__loader_partial_views(dlt_loader *ld, int64_t last_rows, const char *func) {
    dlt_tensor *xl = NULL, *yl = NULL;
    if (last_rows != ld->batch_size) {
        int64_t xs[DLT_MAX_DIMS];
        memcpy(xs, ld->x->shape, sizeof xs);
        xs[0] = last_rows;
        DLT_CHECK(dlt__tensor_view(ld->x, xs, ld->x->ndim, ld->x->format, func, &xl));
        if (ld->y) {
            dlt_status st = dlt__tensor_view(ld->y, xs, 1, DLT_FORMAT_CONTIGUOUS, func, &yl);
            if (st != DLT_OK) {
                dlt_tensor_release(xl);
                return st;
            }
        }
    }
    dlt_tensor_release(ld->x_last);
    dlt_tensor_release(ld->y_last);
    ld->x_last = xl;
    ld->y_last = yl;
    ld->last_rows = last_rows;
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
                        "drop_last with batch_size %lld over %lld samples leaves no batch",
                        (long long)batch_size, (long long)ds->count);
    dlt_loader *ld = dlt__host_calloc(ctx, 1, sizeof *ld);
    if (!ld) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the loader");
    ld->ds = ds;
    ld->ctx = ctx;
    ld->batch_size = batch_size;
    ld->shuffle = shuffle;
    ld->drop_last = drop_last;
    ld->seed = seed;
    ld->num_replicas = 1;
    ld->num_samples = ds->count;
    int64_t rem = ds->count % batch_size;
    ld->num_batches = ds->count / batch_size + (!drop_last && rem ? 1 : 0);
    ld->last_rows = (!drop_last && rem) ? rem : batch_size;
    /* images: ToTensor's f32; other samples: their own dtype (PyTorch's default collate) */
    ld->dtype = ds->sample.image ? DLT_F32 : ds->sample.dtype;
    ld->format = DLT_FORMAT_CONTIGUOUS;
    ld->label_dtype = DLT_I64;
    for (int c = 0; c < DLT_DATA_MAX_CHANNELS; c++) {
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
    const dlt_data_sample *s = &ld->ds->sample;
    if (s->image && !dlt__is_float(dtype))
        return dlt__err(DLT_ERR_DTYPE, F, "the image dtype must be f32, f16 or bf16, got %s",
                        dlt_dtype_name(dtype));
    if (!s->image && !dlt__is_float(dtype) && dtype != s->dtype)
        return dlt__err(DLT_ERR_DTYPE, F,
                        "the output dtype must be f32, f16, bf16 or the samples' own %s, got %s",
                        dlt_dtype_name(s->dtype), dlt_dtype_name(dtype));
    if (format != DLT_FORMAT_CONTIGUOUS && format != DLT_FORMAT_CHANNELS_LAST)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "unknown memory format %d", format);
    if (format == DLT_FORMAT_CHANNELS_LAST && s->ndim != 3)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "channels-last needs 3-D samples [C, H, W] (4-D batches); the samples "
                        "have %d dimensions", s->ndim);
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
        for (int c = 0; c < DLT_DATA_MAX_CHANNELS; c++) {
            ld->mean[c] = 0.0f;
            ld->std[c] = 1.0f;
        }
        return DLT_OK;
    }
    DLT_NULL_CHECK(std, F);
    if (!ld->ds->sample.image)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "normalisation applies to image datasets only (these samples are %s)",
                        dlt_dtype_name(ld->ds->sample.dtype));
    int32_t C = (int32_t)ld->ds->sample.shape[0];
    for (int c = 0; c < C; c++) {
        /* written as negated comparisons so NaN is refused too */
        if (!(mean[c] > -1e30f && mean[c] < 1e30f) || !(std[c] > 0.0f && std[c] < 1e30f))
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "channel %d: mean %g must be finite and std %g finite and > 0", c,
                            (double)mean[c], (double)std[c]);
    }
    ld->normalize = 1;
    for (int c = 0; c < C; c++) {
        ld->mean[c] = mean[c];
        ld->std[c] = std[c];
    }
    return DLT_OK;
}

dlt_status dlt_loader_set_augment(dlt_loader *ld, int32_t crop_pad, int32_t hflip) {
    static const char *F = "dlt_loader_set_augment";
    DLT_NULL_CHECK(ld, F);
    const dlt_data_sample *s = &ld->ds->sample;
    /* images: up to the smaller side (32 for CIFAR-10) */
    int64_t max_pad = s->image ? (s->shape[1] < s->shape[2] ? s->shape[1] : s->shape[2]) : 0;
    if (crop_pad < 0 || crop_pad > max_pad)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "crop_pad %d is outside 0..%lld%s", crop_pad,
                        (long long)max_pad, s->image ? "" : " (augmentation applies to images only)");
    if (hflip != 0 && hflip != 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "hflip must be 0 or 1, got %d", hflip);
    if (hflip && !s->image)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "augmentation applies to image datasets only (these samples are %s)",
                        dlt_dtype_name(s->dtype));
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
    if (ld->num_replicas > 1) { /* dist: this rank's shard, made on the host */
        int32_t *shard = NULL;
        st = dlt__shard_order(ld, epoch, &shard, F);
        if (st == DLT_OK)
            st = ctx->be->memcpy_h2d(ctx, dlt__data(ld->perm), shard, (size_t)ld->num_samples * sizeof *shard);
        free(shard);
    } else if (ld->shuffle) {
        st = ctx->be->data_order(ctx, (int32_t *)dlt__data(ld->perm), ld->ds->count, ld->seed, epoch);
    }
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

/* the epoch the next batch belongs to: epoch 0 on first use, the next one after the end */
static dlt_status ensure_epoch(dlt_loader *ld) {
    if (!ld->started) return dlt_loader_start_epoch(ld, 0);
    if (ld->ended) return dlt_loader_start_epoch(ld, ld->epoch + 1);
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
    DLT_CHECK(ensure_epoch(ld));
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
    const dlt_dataset *ds = ld->ds;
    L.images = (const uint8_t *)dlt__data(ds->images);
    L.labels = ds->labels ? (const int32_t *)dlt__data(ds->labels) : NULL;
    L.count = ld->num_samples;
    L.perm = ld->perm ? (const int32_t *)dlt__data(ld->perm) : NULL;
    if (ld->num_replicas > 1) { /* dist: augmentation keyed by the position in the epoch */
        L.aug_stride = ld->num_replicas;
        L.aug_offset = ld->rank;
    }
    L.cursor = (const dlt_data_cursor *)dlt__data(ld->cursor);
    L.batch_size = ld->batch_size;
    L.n = last ? ld->last_rows : ld->batch_size;
    L.normalize = ld->normalize;
    for (int c = 0; c < DLT_DATA_MAX_CHANNELS; c++) {
        L.mean[c] = ld->mean[c];
        L.std[c] = ld->std[c];
    }
    L.crop_pad = ld->crop_pad;
    L.hflip = ld->hflip;
    L.aug_seed = ld->seed;
    L.x = last ? ld->x_last : ld->x;
    L.y = last ? ld->y_last : ld->y;
    L.image = ds->sample.image;
    L.src_dtype = ds->sample.dtype;
    L.sample_numel = ds->sample_numel;
    L.record_bytes = ds->record_bytes;
    L.C = L.H = L.W = 1;
    if (ds->sample.ndim == 3) {
        L.C = ds->sample.shape[0];
        L.H = ds->sample.shape[1];
        L.W = ds->sample.shape[2];
    }
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

dlt_status dlt_loader_seek(dlt_loader *ld, int64_t batch) {
    static const char *F = "dlt_loader_seek";
    DLT_NULL_CHECK(ld, F);
    dlt_ctx *ctx = ld->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "seeking inside a captured step would rewind on every "
                        "replay: seek eagerly between replays");
    if (batch < 0 || batch > ld->num_batches)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "batch %lld is outside 0..%lld (the epoch's batches)",
                        (long long)batch, (long long)ld->num_batches);
    DLT_CHECK(ensure_epoch(ld)); /* what the next dlt_loader_next would start */
    DLT_CHECK(ctx->be->data_cursor_set(ctx, (dlt_data_cursor *)dlt__data(ld->cursor), batch, ld->epoch));
    ld->batch = batch;
    return DLT_OK;
}

int64_t dlt_loader_position(const dlt_loader *ld) { return ld && ld->started && !ld->ended ? ld->batch : 0; }

int64_t dlt_loader_num_batches(const dlt_loader *ld) { return ld ? ld->num_batches : 0; }
int64_t dlt_loader_batch_size(const dlt_loader *ld) { return ld ? ld->batch_size : 0; }

dlt_status dlt_loader_epoch_order(dlt_loader *ld, int64_t epoch, int64_t *out, int64_t n) {
    static const char *F = "dlt_loader_epoch_order";
    DLT_NULL_CHECK(ld, F);
    DLT_NULL_CHECK(out, F);
    int64_t count = ld->ds->count;
    if (n < ld->num_samples)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "out holds %lld entries; the %s has %lld",
                        (long long)n, ld->num_replicas > 1 ? "rank's shard" : "dataset",
                        (long long)ld->num_samples);
    if (epoch < 0 || epoch > INT32_MAX)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "epoch %lld is outside 0..%d", (long long)epoch,
                        INT32_MAX);
    if (ld->num_replicas > 1) { /* dist: the shard */
        int32_t *shard = NULL;
        DLT_CHECK(dlt__shard_order(ld, epoch, &shard, F));
        for (int64_t i = 0; i < ld->num_samples; i++) out[i] = shard[i];
        free(shard);
        return DLT_OK;
    }
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
