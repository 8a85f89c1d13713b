/*
 * copy.c - host transfers, copies across contexts and devices, casts, format conversion,
 * fills and random fills, element reads, and gradient accessors.
 *
 * Cross-context copies stage through host memory: a conversion (dtype or format) runs on
 * whichever side has the data in the needed form, so every device only implements its own
 * `convert`.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernel/half.h"
#include "../core/internal.h"
#include "../kernel/philox.h"

dlt_status dlt_tensor_copy_to_host(const dlt_tensor *t, void *dst, size_t nbytes) {
    static const char *F = "dlt_tensor_copy_to_host";
    DLT_CHECK(dlt__check_tensor(t, F, "t"));
    size_t want = dlt__nbytes(t);
    if (want > 0 && !dst) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'dst' is NULL");
    if (nbytes != want)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the host buffer has %zu bytes but the tensor holds %zu", nbytes, want);
    if (t->ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot read a tensor back during graph capture");
    if (want == 0) return DLT_OK;
    return t->ctx->be->memcpy_d2h(t->ctx, dst, dlt__data(t), want);
}

dlt_status dlt_tensor_copy_from_host(dlt_tensor *t, const void *src, size_t nbytes) {
    static const char *F = "dlt_tensor_copy_from_host";
    DLT_CHECK(dlt__check_tensor(t, F, "t"));
    size_t want = dlt__nbytes(t);
    if (want > 0 && !src) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'src' is NULL");
    if (nbytes != want)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the host buffer has %zu bytes but the tensor holds %zu", nbytes, want);
    if (want == 0) return DLT_OK;
    dlt__tensor_written(t);
    return t->ctx->be->memcpy_h2d(t->ctx, dlt__data(t), src, want);
}

/* Same-context conversion (dtype and/or format) or plain copy. */
static dlt_status copy_same_ctx(dlt_tensor *dst, const dlt_tensor *src, const char *func) {
    dlt_ctx *ctx = dst->ctx;
    if (dst->numel == 0) return DLT_OK;
    if (dst->dtype == src->dtype && dst->format == src->format) {
        if (dlt__data(dst) == dlt__data(src)) return DLT_OK;
        return ctx->be->memcpy_d2d(ctx, dlt__data(dst), dlt__data(src), dlt__nbytes(dst));
    }
    dlt_status st = ctx->be->convert(ctx, dst, src);
    return st == DLT_OK ? st : dlt__err_wrap(st, func);
}

dlt_status dlt_tensor_copy(dlt_tensor *dst, const dlt_tensor *src) {
    static const char *F = "dlt_tensor_copy";
    DLT_CHECK(dlt__check_tensor(dst, F, "dst"));
    DLT_CHECK(dlt__check_tensor(src, F, "src"));
    if (!dlt__same_shape(dst, src)) {
        char a[96], b[96];
        return dlt__err(DLT_ERR_SHAPE, F, "dst has shape %s but src has %s",
                        dlt__shape_str(dst, a, sizeof a), dlt__shape_str(src, b, sizeof b));
    }
    if (dst->dtype != src->dtype)
        return dlt__err(DLT_ERR_DTYPE, F, "dst is %s but src is %s (use dlt_tensor_cast)",
                        dlt_dtype_name(dst->dtype), dlt_dtype_name(src->dtype));
    dlt__tensor_written(dst);
    if (dst->ctx == src->ctx) return copy_same_ctx(dst, src, F);
    if (dst->numel == 0) return DLT_OK;
    if ((src->ctx->capturing || dst->ctx->capturing))
        return dlt__err(DLT_ERR_INVALID_STATE, F, "cross-context copies cannot be captured");

    /* Bring src into dst's format on src's side, stage through the host. */
    dlt_status st = DLT_OK;
    dlt_tensor *tmp = NULL;
    const dlt_tensor *from = src;
    if (src->format != dst->format) {
        DLT_CHECK(dlt__tensor_new(src->ctx, src->dtype, src->shape, src->ndim, dst->format, F, &tmp));
        DLT_CHECK_GOTO(st, copy_same_ctx(tmp, src, F), done);
        from = tmp;
    }
    size_t n = dlt__nbytes(dst);
    if (src->ctx->device_type == DLT_DEVICE_CPU) {
        st = dst->ctx->be->memcpy_h2d(dst->ctx, dlt__data(dst), dlt__data(from), n);
    } else if (dst->ctx->device_type == DLT_DEVICE_CPU) {
        st = src->ctx->be->memcpy_d2h(src->ctx, dlt__data(dst), dlt__data(from), n);
    } else {
        void *host = malloc(n);
        if (!host) {
            st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %zu staging bytes", n);
            goto done;
        }
        st = src->ctx->be->memcpy_d2h(src->ctx, host, dlt__data(from), n);
        if (st == DLT_OK) st = dst->ctx->be->memcpy_h2d(dst->ctx, dlt__data(dst), host, n);
        if (st == DLT_OK) st = dst->ctx->be->synchronize(dst->ctx); /* host buffer is freed next */
        free(host);
    }
done:
    dlt_tensor_release(tmp);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

dlt_status dlt_tensor_to_ctx(const dlt_tensor *src, dlt_ctx *ctx, dlt_tensor **out) {
    static const char *F = "dlt_tensor_to_ctx";
    DLT_CHECK(dlt__check_tensor(src, F, "src"));
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    dlt_tensor *t = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, src->dtype, src->shape, src->ndim, src->format, F, &t));
    dlt_status st = dlt_tensor_copy(t, src);
    if (st != DLT_OK) {
        dlt_tensor_release(t);
        return st;
    }
    *out = t;
    return DLT_OK;
}

dlt_status dlt_tensor_cast(const dlt_tensor *src, int32_t dtype, dlt_tensor **out) {
    static const char *F = "dlt_tensor_cast";
    DLT_CHECK(dlt__check_tensor(src, F, "src"));
    DLT_NULL_CHECK(out, F);
    if (dtype < 0 || dtype > DLT_U8) return dlt__err(DLT_ERR_DTYPE, F, "unknown dtype %d", dtype);
    dlt_tensor *t = NULL;
    DLT_CHECK(dlt__tensor_new_like(src, dtype, F, &t));
    dlt_status st = copy_same_ctx(t, src, F);
    if (st != DLT_OK) {
        dlt_tensor_release(t);
        return st;
    }
    *out = t;
    return DLT_OK;
}

dlt_status dlt_tensor_to_format(const dlt_tensor *src, int32_t format, dlt_tensor **out) {
    static const char *F = "dlt_tensor_to_format";
    DLT_CHECK(dlt__check_tensor(src, F, "src"));
    DLT_NULL_CHECK(out, F);
    dlt_tensor *t = NULL;
    DLT_CHECK(dlt__tensor_new(src->ctx, src->dtype, src->shape, src->ndim, format, F, &t));
    dlt_status st = copy_same_ctx(t, src, F);
    if (st != DLT_OK) {
        dlt_tensor_release(t);
        return st;
    }
    *out = t;
    return DLT_OK;
}

/* PyTorch's checked conversion of a fill value (c10::checked_convert): an integer dtype
 * refuses NaN, inf and values outside its range (C's conversion of those is undefined
 * behaviour), keeping the rest truncated toward zero; uint8 takes -255..255, a negative
 * value wrapping as in PyTorch (-1 -> 255). A floating dtype refuses finite values beyond
 * its largest and takes inf and NaN. *v becomes the value the kernels store (for integer
 * dtypes a whole number inside the range, so their casts are defined). */
static int fill_value_fits(int32_t dtype, double *v) {
    const double x = *v;
    switch (dtype) {
    case DLT_F32: return !(fabs(x) > FLT_MAX) || isinf(x);
    case DLT_F16: return !(fabs(x) > 65504.0) || isinf(x);
    case DLT_BF16: return !(fabs(x) > 3.3895313892515355e38) || isinf(x);
    case DLT_I32:
        if (!(x >= -2147483648.0 && x <= 2147483647.0)) return 0;
        break;
    case DLT_I64: /* 2^63 itself is out of range */
        if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) return 0;
        break;
    default: /* DLT_U8 */
        if (!(x > -256.0 && x <= 255.0)) return 0;
        break;
    }
    double w = trunc(x);
    if (dtype == DLT_U8 && w < 0) w += 256.0;
    *v = w + 0.0; /* -0.0 -> 0.0 */
    return 1;
}

dlt_status dlt_tensor_fill(dlt_tensor *t, double value) {
    static const char *F = "dlt_tensor_fill";
    DLT_CHECK(dlt__check_tensor(t, F, "t"));
    if (!fill_value_fits(t->dtype, &value))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "value %g cannot be converted to type %s without overflow", value,
                        dlt_dtype_name(t->dtype));
    if (t->numel == 0) return DLT_OK;
    dlt__tensor_written(t);
    dlt_status st = t->ctx->be->fill(t->ctx, t, value);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

static dlt_status rand_fill(dlt_tensor *t, int32_t normal, double a, double b, const char *F) {
    DLT_CHECK(dlt__check_tensor(t, F, "t"));
    DLT_CHECK(dlt__check_float(t, F, "t"));
    if (t->numel == 0) return DLT_OK;
    /* its kernels take the offset as is: a replay would draw the capture's numbers again */
    if (t->ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "random fills cannot be captured in a graph (each replay would "
                        "draw the same numbers): fill the tensor outside the step");
    /* normal values come in pairs from a block of four words, so both kinds reserve
     * ceil(numel/4) counters: element i always uses counter off + i/4. */
    uint64_t off = dlt__rng_reserve(t->ctx, dlt__philox_blocks((uint64_t)t->numel));
    dlt__tensor_written(t);
    dlt_status st = t->ctx->be->rand(t->ctx, t, normal, a, b, t->ctx->seed, off);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

dlt_status dlt_tensor_rand_uniform(dlt_tensor *t, double low, double high) {
    static const char *F = "dlt_tensor_rand_uniform";
    if (!(low <= high))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "low %g must not exceed high %g", low, high);
    return rand_fill(t, 0, low, high, F);
}

dlt_status dlt_tensor_rand_normal(dlt_tensor *t, double mean, double std) {
    static const char *F = "dlt_tensor_rand_normal";
    if (!(std >= 0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "std %g must be >= 0", std);
    return rand_fill(t, 1, mean, std, F);
}

static double scalar_to_double(const void *p, int32_t dtype) {
    switch (dtype) {
    case DLT_F32: { float v; memcpy(&v, p, 4); return v; }
    case DLT_F16: { uint16_t v; memcpy(&v, p, 2); return dlt__f16_to_f32(v); }
    case DLT_BF16: { uint16_t v; memcpy(&v, p, 2); return dlt__bf16_to_f32(v); }
    case DLT_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case DLT_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    default: return *(const uint8_t *)p;
    }
}

dlt_status dlt_tensor_get(const dlt_tensor *t, int64_t index, double *out) {
    static const char *F = "dlt_tensor_get";
    DLT_CHECK(dlt__check_tensor(t, F, "t"));
    DLT_NULL_CHECK(out, F);
    if (index < 0 || index >= t->numel)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "index %lld is outside 0..%lld",
                        (long long)index, (long long)t->numel - 1);
    if (t->ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot read a tensor back during graph capture");
    int64_t mem = index;
    if (t->format == DLT_FORMAT_CHANNELS_LAST) {
        int64_t W = t->shape[3], H = t->shape[2], C = t->shape[1];
        int64_t w = index % W, h = (index / W) % H, c = (index / (W * H)) % C, n = index / (W * H * C);
        mem = dlt__off4(t, n, c, h, w);
    }
    unsigned char buf[8];
    size_t es = dlt__dtype_size(t->dtype);
    dlt_status st = t->ctx->be->memcpy_d2h(t->ctx, buf, (const char *)dlt__data(t) + (size_t)mem * es, es);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    *out = scalar_to_double(buf, t->dtype);
    return DLT_OK;
}

dlt_status dlt_tensor_item(const dlt_tensor *t, double *out) {
    static const char *F = "dlt_tensor_item";
    DLT_CHECK(dlt__check_tensor(t, F, "t"));
    if (t->numel != 1)
        return dlt__err(DLT_ERR_SHAPE, F, "item() needs a one-element tensor, this one has %lld",
                        (long long)t->numel);
    return dlt_tensor_get(t, 0, out);
}

dlt_status dlt_tensor_set_requires_grad(dlt_tensor *t, int32_t on) {
    static const char *F = "dlt_tensor_set_requires_grad";
    DLT_NULL_CHECK(t, F);
    if (on && !dlt__is_float(t->dtype))
        return dlt__err(DLT_ERR_DTYPE, F, "only floating tensors can require gradients, got %s",
                        dlt_dtype_name(t->dtype));
    if (on && t->grad_fn)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "only leaves can require gradients; this tensor was produced by '%s' "
                        "(use dlt_tensor_detach first)",
                        t->grad_fn->name);
    t->requires_grad = on != 0;
    return DLT_OK;
}

int32_t dlt_tensor_requires_grad(const dlt_tensor *t) { return t ? t->requires_grad : 0; }

dlt_tensor *dlt_tensor_grad(const dlt_tensor *t) {
    return (t && t->grad && t->grad_defined) ? t->grad : NULL;
}

dlt_status dlt_tensor_detach(dlt_tensor *t, dlt_tensor **out) {
    static const char *F = "dlt_tensor_detach";
    DLT_CHECK(dlt__check_tensor(t, F, "t"));
    DLT_NULL_CHECK(out, F);
    return dlt__tensor_view(t, t->shape, t->ndim, t->format, F, out);
}
