/*
 * tensor_dataset.c - datasets over the user's tensors, as PyTorch's TensorDataset(x, y):
 * sample i is x[i] (any shape, f32/f16/bf16/u8) with integer label y[i], or x[i] alone.
 *
 * The dataset takes a reference to x's memory instead of copying it (a channels-last x is
 * first copied to NCHW, since a record must be one contiguous sample): the data is resident
 * once, and later changes to x's values show in later batches, as PyTorch's TensorDataset
 * shares its tensors. Labels are read to the host once (the only synchronisation), checked
 * (0 <= label < num_classes, the first bad index named) and kept as int32 like every
 * dataset's. With image = 1, u8 [N, C, H, W] data is an image dataset: loaders apply
 * ToTensor, and Normalize and augmentation become available (as for CIFAR-10).
 */
#include <stdlib.h>
#include <string.h>

#include "../core/options.h"
#include "data_internal.h"

static const dlt_tensor_dataset_options TD_DEFAULTS = {.size = sizeof(dlt_tensor_dataset_options), .image = 0,
                                                       .num_classes = 0};
/* the first release's struct ends after num_classes */
#define TD_OPTIONS_V1 DLT__FIELD_END(dlt_tensor_dataset_options, num_classes)

void dlt_tensor_dataset_options_init(dlt_tensor_dataset_options *o, uint32_t size) {
    dlt__options_fill(o, size, &TD_DEFAULTS, sizeof TD_DEFAULTS, TD_OPTIONS_V1);
}

/* Labels to host int32, checked against num_classes (0: at most DLT_DATA_MAX_CLASSES
 * classes, the count becoming the largest label + 1). */
static dlt_status read_labels(const dlt_tensor *labels, int32_t num_classes, const char *F,
                              int32_t **out, int32_t *classes) {
    dlt_ctx *ctx = labels->ctx;
    int64_t n = labels->shape[0];
    size_t es = dlt__dtype_size(labels->dtype);
    void *raw = dlt__host_alloc(ctx, (size_t)n * es);
    int32_t *lab = dlt__host_alloc(ctx, (size_t)n * sizeof(int32_t));
    dlt_status st = DLT_OK;
    if (!raw || !lab) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %lld labels", (long long)n);
        goto fail;
    }
    st = ctx->be->memcpy_d2h(ctx, raw, dlt__data(labels), (size_t)n * es);
    if (st != DLT_OK) {
        st = dlt__err_wrap(st, F);
        goto fail;
    }
    int64_t limit = num_classes > 0 ? num_classes : DLT_DATA_MAX_CLASSES, max = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = labels->dtype == DLT_I64 ? ((const int64_t *)raw)[i] : ((const int32_t *)raw)[i];
        if (v < 0 || v >= limit) {
            if (num_classes > 0)
                st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                              "labels[%lld] = %lld is outside 0..%d (num_classes %d)", (long long)i,
                              (long long)v, num_classes - 1, num_classes);
            else
                st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                              "labels[%lld] = %lld: labels are class indices 0..%d", (long long)i,
                              (long long)v, DLT_DATA_MAX_CLASSES - 1);
            goto fail;
        }
        if (v > max) max = v;
        lab[i] = (int32_t)v;
    }
    free(raw);
    *out = lab;
    *classes = num_classes > 0 ? num_classes : (int32_t)max + 1;
    return DLT_OK;
fail:
    free(raw);
    free(lab);
    return st;
}

dlt_status dlt_tensor_dataset_create(const dlt_tensor *x, const dlt_tensor *labels,
                                     const dlt_tensor_dataset_options *o, dlt_dataset **out) {
    static const char *F = "dlt_tensor_dataset_create";
    DLT_NULL_CHECK(x, F);
    DLT_NULL_CHECK(out, F);
    dlt_tensor_dataset_options opt = TD_DEFAULTS;
    DLT_CHECK(dlt__options_read(&opt, sizeof opt, o, TD_OPTIONS_V1, "dlt_tensor_dataset_options", F));
    if (opt.image != 0 && opt.image != 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "image must be 0 or 1, got %d", opt.image);
    if (opt.num_classes < 0 || opt.num_classes > DLT_DATA_MAX_CLASSES)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "num_classes %d is outside 0..%d",
                        opt.num_classes, DLT_DATA_MAX_CLASSES);
    dlt_ctx *ctx = x->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (x->dtype != DLT_F32 && x->dtype != DLT_F16 && x->dtype != DLT_BF16 && x->dtype != DLT_U8)
        return dlt__err(DLT_ERR_DTYPE, F, "x must be f32, f16, bf16 or u8, got %s",
                        dlt_dtype_name(x->dtype));
    char sb[128];
    if (x->ndim < 1 || x->shape[0] < 1)
        return dlt__err(DLT_ERR_SHAPE, F, "x %s holds no samples (its first dimension counts them)",
                        dlt__shape_str(x, sb, sizeof sb));
    if (opt.image && (x->dtype != DLT_U8 || x->ndim != 4))
        return dlt__err(DLT_ERR_SHAPE, F, "image data is u8 [N, C, H, W], got %s %s",
                        dlt_dtype_name(x->dtype), dlt__shape_str(x, sb, sizeof sb));
    if (labels) {
        if (labels->ctx != ctx)
            return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F,
                            "x is on a %s context and labels on another (%s)", ctx->be->name,
                            labels->ctx->be->name);
        if (labels->dtype != DLT_I32 && labels->dtype != DLT_I64)
            return dlt__err(DLT_ERR_DTYPE, F, "labels must be i32 or i64, got %s",
                            dlt_dtype_name(labels->dtype));
        if (labels->ndim != 1 || labels->shape[0] != x->shape[0])
            return dlt__err(DLT_ERR_SHAPE, F, "labels must be [%lld] (one per sample of x), got %s",
                            (long long)x->shape[0], dlt__shape_str(labels, sb, sizeof sb));
        if (ctx->capturing)
            return dlt__err(DLT_ERR_INVALID_STATE, F,
                            "reads the labels to the host: not allowed during capture");
    }
    dlt_data_sample sample;
    memset(&sample, 0, sizeof sample);
    sample.dtype = x->dtype;
    sample.image = opt.image;
    sample.ndim = x->ndim - 1;
    for (int32_t i = 1; i < x->ndim; i++) sample.shape[i - 1] = x->shape[i];

    int32_t *lab = NULL, classes = 0;
    dlt_tensor *nchw = NULL;
    dlt_dataset *ds = NULL;
    dlt_status st = DLT_OK;
    if (labels) DLT_CHECK(read_labels(labels, opt.num_classes, F, &lab, &classes));
    dlt_tensor *src = (dlt_tensor *)x, *records = NULL;
    if (x->format != DLT_FORMAT_CONTIGUOUS) {
        DLT_CHECK_GOTO(st, dlt_tensor_to_format(x, DLT_FORMAT_CONTIGUOUS, &nchw), fail);
        src = nchw;
    }
    /* a fresh view of the memory: shares the storage, not x's autograd history */
    DLT_CHECK_GOTO(st, dlt__tensor_view(src, x->shape, x->ndim, DLT_FORMAT_CONTIGUOUS, F, &records),
                   fail);
    st = dlt__dataset_adopt(ctx, &sample, x->shape[0], records, F, &ds);
    dlt_tensor_release(records);
    if (st != DLT_OK) goto fail;
    if (lab) DLT_CHECK_GOTO(st, dlt__dataset_set_labels(ds, lab, classes, F), fail);
    free(lab);
    dlt_tensor_release(nchw);
    *out = ds;
    return DLT_OK;
fail:
    free(lab);
    dlt_tensor_release(nchw);
    dlt_dataset_destroy(ds);
    return dlt__err_wrap(st, F);
}
