/*
 * tensor.c - tensor objects: creation with overflow-checked sizes, reference counting,
 * storage sharing for views, getters and validation helpers used by the op front doors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"

static const char *const DTYPE_NAMES[] = {"f32", "f16", "bf16", "i32", "i64", "u8"};
static const size_t DTYPE_SIZES[] = {4, 2, 2, 4, 8, 1};

size_t dlt__dtype_size(int32_t dtype) {
    return (dtype >= 0 && dtype <= DLT_U8) ? DTYPE_SIZES[dtype] : 0;
}
size_t dlt_dtype_size(int32_t dtype) { return dlt__dtype_size(dtype); }
const char *dlt_dtype_name(int32_t dtype) {
    return (dtype >= 0 && dtype <= DLT_U8) ? DTYPE_NAMES[dtype] : "?";
}

/* ---- storage ---- */

dlt_status dlt__storage_new(dlt_ctx *ctx, size_t nbytes, const char *func, dlt_storage **out) {
    dlt_storage *s = dlt__host_calloc(ctx, 1, sizeof *s);
    if (!s) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate a storage object");
    s->refcount = 1;
    s->ctx = ctx;
    s->nbytes = nbytes;
    if (nbytes > 0) {
        if (dlt__alloc_should_fail(ctx)) {
            free(s);
            return dlt__err(ctx->device_type == DLT_DEVICE_CPU ? DLT_ERR_OUT_OF_MEMORY
                                                               : DLT_ERR_DEVICE_OUT_OF_MEMORY,
                            func, "allocation of %zu bytes failed (injected failure)", nbytes);
        }
        dlt_status st = ctx->be->alloc(ctx, nbytes, &s->data);
        if (st != DLT_OK) {
            free(s);
            return dlt__err_wrap(st, func);
        }
    }
    *out = s;
    return DLT_OK;
}

void dlt__storage_release(dlt_storage *s) {
    if (!s) return;
    if (--s->refcount > 0) return;
    if (s->data && !s->external) s->ctx->be->free(s->ctx, s->data, s->nbytes);
    free(s);
}

/* ---- tensors ---- */

static dlt_status check_shape(const int64_t *shape, int32_t ndim, int32_t format, int32_t dtype,
                              const char *func, int64_t *numel, size_t *nbytes) {
    if (ndim < 0 || ndim > DLT_MAX_DIMS)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "ndim %d is outside 0..%d", ndim,
                        DLT_MAX_DIMS);
    if (ndim > 0 && !shape) return dlt__err(DLT_ERR_NULL_POINTER, func, "argument 'shape' is NULL");
    if (dtype < 0 || dtype > DLT_U8) return dlt__err(DLT_ERR_DTYPE, func, "unknown dtype %d", dtype);
    if (format != DLT_FORMAT_CONTIGUOUS && format != DLT_FORMAT_CHANNELS_LAST)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "unknown memory format %d", format);
    if (format == DLT_FORMAT_CHANNELS_LAST && ndim != 4)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "channels-last needs a 4-D tensor (N,C,H,W), got %d-D", ndim);
    size_t n = 1;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "size %lld of dimension %d is negative",
                            (long long)shape[i], i);
        if (dlt__mul_overflow(n, (size_t)shape[i], &n) || n > (size_t)INT64_MAX)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                            "the element count overflows at dimension %d", i);
    }
    size_t bytes;
    if (dlt__mul_overflow(n, dlt__dtype_size(dtype), &bytes) || bytes > ((size_t)1 << 60))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "the byte size overflows");
    *numel = (int64_t)n;
    *nbytes = bytes;
    return DLT_OK;
}

static dlt_status tensor_alloc_struct(dlt_ctx *ctx, const char *func, dlt_tensor **out) {
    dlt_tensor *t = dlt__host_calloc(ctx, 1, sizeof *t);
    if (!t) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate a tensor object");
    t->refcount = 1;
    t->ctx = ctx;
    ctx->live_tensors++;
    *out = t;
    return DLT_OK;
}

dlt_status dlt__tensor_from_storage(dlt_storage *s, size_t offset, int32_t dtype,
                                    const int64_t *shape, int32_t ndim, int32_t format,
                                    const char *func, dlt_tensor **out) {
    int64_t numel;
    size_t nbytes;
    DLT_CHECK(check_shape(shape, ndim, format, dtype, func, &numel, &nbytes));
    if (offset + nbytes > s->nbytes)
        return dlt__err(DLT_ERR_INTERNAL, func, "view of %zu bytes at %zu exceeds storage of %zu",
                        nbytes, offset, s->nbytes);
    dlt_tensor *t = NULL;
    DLT_CHECK(tensor_alloc_struct(s->ctx, func, &t));
    t->dtype = dtype;
    t->ndim = ndim;
    t->format = format;
    for (int32_t i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->storage = s;
    s->refcount++;
    t->offset = offset;
    *out = t;
    return DLT_OK;
}

dlt_status dlt__tensor_new(dlt_ctx *ctx, int32_t dtype, const int64_t *shape, int32_t ndim,
                           int32_t format, const char *func, dlt_tensor **out) {
    int64_t numel;
    size_t nbytes;
    DLT_CHECK(check_shape(shape, ndim, format, dtype, func, &numel, &nbytes));
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    dlt_storage *s = NULL;
    DLT_CHECK(dlt__storage_new(ctx, nbytes, func, &s));
    dlt_status st = dlt__tensor_from_storage(s, 0, dtype, shape, ndim, format, func, out);
    dlt__storage_release(s); /* the tensor holds its own reference */
    return st;
}

dlt_status dlt__tensor_new_like(const dlt_tensor *like, int32_t dtype, const char *func,
                                dlt_tensor **out) {
    return dlt__tensor_new(like->ctx, dtype, like->shape, like->ndim, like->format, func, out);
}

dlt_status dlt__tensor_view(dlt_tensor *t, const int64_t *shape, int32_t ndim, int32_t format,
                            const char *func, dlt_tensor **out) {
    return dlt__tensor_from_storage(t->storage, t->offset, t->dtype, shape, ndim, format, func, out);
}

dlt_status dlt_tensor_empty(dlt_ctx *ctx, int32_t dtype, const int64_t *shape, int32_t ndim,
                            int32_t format, dlt_tensor **out) {
    DLT_NULL_CHECK(ctx, "dlt_tensor_empty");
    DLT_NULL_CHECK(out, "dlt_tensor_empty");
    return dlt__tensor_new(ctx, dtype, shape, ndim, format, "dlt_tensor_empty", out);
}

dlt_status dlt_tensor_zeros(dlt_ctx *ctx, int32_t dtype, const int64_t *shape, int32_t ndim,
                            int32_t format, dlt_tensor **out) {
    static const char *F = "dlt_tensor_zeros";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    dlt_tensor *t = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, dtype, shape, ndim, format, F, &t));
    dlt_status st = ctx->be->memset0(ctx, dlt__data(t), dlt__nbytes(t));
    if (st != DLT_OK) {
        dlt_tensor_release(t);
        return dlt__err_wrap(st, F);
    }
    *out = t;
    return DLT_OK;
}

dlt_status dlt_tensor_from_host(dlt_ctx *ctx, int32_t dtype, const int64_t *shape, int32_t ndim,
                                int32_t format, const void *data, size_t nbytes, dlt_tensor **out) {
    static const char *F = "dlt_tensor_from_host";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    int64_t numel;
    size_t want;
    DLT_CHECK(check_shape(shape, ndim, format, dtype, F, &numel, &want));
    if (want > 0 && !data) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'data' is NULL");
    if (nbytes != want)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the host buffer has %zu bytes but a %s tensor of %lld elements needs %zu",
                        nbytes, dlt_dtype_name(dtype), (long long)numel, want);
    dlt_tensor *t = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, dtype, shape, ndim, format, F, &t));
    if (want > 0) {
        dlt_status st = ctx->be->memcpy_h2d(ctx, dlt__data(t), data, want);
        if (st != DLT_OK) {
            dlt_tensor_release(t);
            return dlt__err_wrap(st, F);
        }
    }
    *out = t;
    return DLT_OK;
}

dlt_tensor *dlt_tensor_retain(dlt_tensor *t) {
    if (t) t->refcount++;
    return t;
}

void dlt_tensor_release(dlt_tensor *t) {
    if (!t) return;
    if (--t->refcount > 0) return;
    dlt_node *fn = t->grad_fn;
    t->grad_fn = NULL;
    if (fn) dlt__node_release(fn);
    dlt_tensor_release(t->grad);
    dlt_tensor_release(t->lp_copy[0]);
    dlt_tensor_release(t->lp_copy[1]);
    dlt__storage_release(t->storage);
    t->ctx->live_tensors--;
    free(t);
}

/* ---- getters ---- */

int32_t dlt_tensor_ndim(const dlt_tensor *t) { return t ? t->ndim : 0; }
int64_t dlt_tensor_dim(const dlt_tensor *t, int32_t i) {
    if (!t) return 0;
    if (i < 0) i += t->ndim;
    return (i >= 0 && i < t->ndim) ? t->shape[i] : 0;
}
int64_t dlt_tensor_numel(const dlt_tensor *t) { return t ? t->numel : 0; }
size_t dlt_tensor_nbytes(const dlt_tensor *t) { return t ? dlt__nbytes(t) : 0; }
int32_t dlt_tensor_dtype(const dlt_tensor *t) { return t ? t->dtype : -1; }
int32_t dlt_tensor_format(const dlt_tensor *t) { return t ? t->format : -1; }
int32_t dlt_tensor_device_type(const dlt_tensor *t) { return t ? t->ctx->device_type : -1; }
dlt_ctx *dlt_tensor_ctx(const dlt_tensor *t) { return t ? t->ctx : NULL; }
int32_t dlt_tensor_shape(const dlt_tensor *t, int64_t *shape, int32_t cap) {
    if (!t) return -1;
    for (int32_t i = 0; i < t->ndim && i < cap && shape; i++) shape[i] = t->shape[i];
    return t->ndim;
}

/* ---- helpers for op front doors ---- */

int dlt__same_shape(const dlt_tensor *a, const dlt_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int32_t i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

const char *dlt__shape_str(const dlt_tensor *t, char *buf, size_t n) {
    size_t k = 0;
    if (n == 0) return buf;
    buf[0] = '\0';
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int32_t i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

dlt_status dlt__check_tensor(const dlt_tensor *t, const char *func, const char *arg) {
    if (!t) return dlt__err(DLT_ERR_NULL_POINTER, func, "argument '%s' is NULL", arg);
    return dlt__ctx_ok(t->ctx, func);
}

dlt_status dlt__check_same_ctx(const dlt_tensor *a, const dlt_tensor *b, const char *func,
                               const char *arg_a, const char *arg_b) {
    if (a->ctx != b->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, func,
                        "'%s' (on %s) and '%s' (on %s) belong to different contexts", arg_a,
                        a->ctx->device_type == DLT_DEVICE_CPU ? "cpu" : "cuda", arg_b,
                        b->ctx->device_type == DLT_DEVICE_CPU ? "cpu" : "cuda");
    return DLT_OK;
}

dlt_status dlt__check_float(const dlt_tensor *t, const char *func, const char *arg) {
    if (!dlt__is_float(t->dtype))
        return dlt__err(DLT_ERR_DTYPE, func, "'%s' must be f32, f16 or bf16, got %s", arg,
                        dlt_dtype_name(t->dtype));
    return DLT_OK;
}

dlt_status dlt__check_ndim(const dlt_tensor *t, int32_t ndim, const char *func, const char *arg) {
    if (t->ndim != ndim) {
        char b[96];
        return dlt__err(DLT_ERR_SHAPE, func, "'%s' must be %d-D, got shape %s", arg, ndim,
                        dlt__shape_str(t, b, sizeof b));
    }
    return DLT_OK;
}
