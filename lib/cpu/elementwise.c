/*
 * elementwise.c - CPU conversions, fills, Philox random fills, add, accumulate, scaling
 * and full reductions. Elements are visited in logical (NCHW) order where the result
 * depends on it (random fills), in memory order otherwise.
 * Threads (DLT_PARALLEL_FOR): the layout conversions, dtype conversion, accumulate and
 * scale write each element once from one iteration; the reductions stay serial.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/philox.h"
#include "cpu.h"
#include "parallel.h"

/* Memory index of logical element i. */
static inline int64_t mem_index(const dlt_tensor *t, int64_t i) {
    if (t->format != DLT_FORMAT_CHANNELS_LAST) return i;
    const int64_t C = t->shape[1], H = t->shape[2], W = t->shape[3];
    int64_t w = i % W, h = (i / W) % H, c = (i / (W * H)) % C, n = i / (W * H * C);
    return ((n * H + h) * W + w) * C + c;
}

float *dlt__cpu_to_f32_nchw(const dlt_tensor *t) {
    float *buf = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    if (!buf) return NULL;
    const void *p = dlt__data(t);
    if (t->format != DLT_FORMAT_CHANNELS_LAST) {
        if (t->dtype == DLT_F32) {
            if (t->numel) memcpy(buf, p, (size_t)t->numel * 4);
        } else {
            DLT_PARALLEL_FOR(i, t->numel, DLT_PARALLEL_MIN_WORK) buf[i] = dlt__ld(p, t->dtype, i);
        }
        return buf;
    }
    const int64_t N = t->shape[0], C = t->shape[1], H = t->shape[2], W = t->shape[3];
    DLT_PARALLEL_FOR(nh, N * H, dlt__par_grain(W * C)) {
        const int64_t n = nh / H, h = nh % H;
        for (int64_t w = 0; w < W; w++)
            for (int64_t c = 0; c < C; c++)
                buf[((n * C + c) * H + h) * W + w] =
                    dlt__ld(p, t->dtype, ((n * H + h) * W + w) * C + c);
    }
    return buf;
}

void dlt__cpu_from_f32_nchw(dlt_tensor *t, const float *src, int32_t beta) {
    void *p = dlt__data(t);
    if (t->format != DLT_FORMAT_CHANNELS_LAST) {
        if (t->dtype == DLT_F32 && !beta) {
            if (t->numel) memcpy(p, src, (size_t)t->numel * 4);
            return;
        }
        DLT_PARALLEL_FOR(i, t->numel, DLT_PARALLEL_MIN_WORK) {
            float v = src[i];
            if (beta) v += dlt__ld(p, t->dtype, i);
            dlt__st(p, t->dtype, i, v);
        }
        return;
    }
    const int64_t N = t->shape[0], C = t->shape[1], H = t->shape[2], W = t->shape[3];
    DLT_PARALLEL_FOR(nh, N * H, dlt__par_grain(W * C)) {
        const int64_t n = nh / H, h = nh % H;
        for (int64_t w = 0; w < W; w++)
            for (int64_t c = 0; c < C; c++) {
                int64_t m = ((n * H + h) * W + w) * C + c;
                float v = src[((n * C + c) * H + h) * W + w];
                if (beta) v += dlt__ld(p, t->dtype, m);
                dlt__st(p, t->dtype, m, v);
            }
    }
}

static inline int64_t ld_int(const void *p, int32_t dtype, int64_t i) {
    switch (dtype) {
    case DLT_I64: return ((const int64_t *)p)[i];
    case DLT_I32: return ((const int32_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

/* Integer -> integer conversions wrap like C (and PyTorch: int32 -3 -> uint8 253);
 * integer -> float goes through double (exact for every int32); float -> integer
 * saturates (NaN -> 0) in dlt__st, where C's conversion would be undefined. */
dlt_status dlt__cpu_convert(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src) {
    (void)ctx;
    const void *s = dlt__data(src);
    void *d = dlt__data(dst);
    const int same_fmt = dst->format == src->format;
    const int si_int = !dlt__is_float(src->dtype), di_int = !dlt__is_float(dst->dtype);
    DLT_PARALLEL_FOR(i, src->numel, DLT_PARALLEL_MIN_WORK) {
        int64_t si = same_fmt ? i : mem_index(src, i);
        int64_t di = same_fmt ? i : mem_index(dst, i);
        if (si_int && di_int) {
            int64_t v = ld_int(s, src->dtype, si);
            if (dst->dtype == DLT_I64) ((int64_t *)d)[di] = v;
            else if (dst->dtype == DLT_I32) ((int32_t *)d)[di] = (int32_t)(uint32_t)(uint64_t)v;
            else ((uint8_t *)d)[di] = (uint8_t)(uint64_t)v;
        } else if (si_int) {
            dlt__st(d, dst->dtype, di, (float)(double)ld_int(s, src->dtype, si));
        } else if (di_int && dst->dtype == DLT_I64) {
            /* f32 has 24 bits of mantissa: go through double for the exact value */
            float f = dlt__ld(s, src->dtype, si);
            ((int64_t *)d)[di] = f != f ? 0 : f >= 9.2233715e18f ? INT64_MAX
                                 : f <= -9.2233720e18f ? INT64_MIN : (int64_t)(double)f;
        } else {
            dlt__st(d, dst->dtype, di, dlt__ld(s, src->dtype, si));
        }
    }
    return DLT_OK;
}

dlt_status dlt__cpu_fill(dlt_ctx *ctx, dlt_tensor *t, double value) {
    (void)ctx;
    void *p = dlt__data(t);
    if (t->dtype == DLT_I64) {
        for (int64_t i = 0; i < t->numel; i++) ((int64_t *)p)[i] = (int64_t)value;
    } else if (t->dtype == DLT_I32) {
        for (int64_t i = 0; i < t->numel; i++) ((int32_t *)p)[i] = (int32_t)value;
    } else {
        float v = (float)value;
        for (int64_t i = 0; i < t->numel; i++) dlt__st(p, t->dtype, i, v);
    }
    return DLT_OK;
}

dlt_status dlt__cpu_rand(dlt_ctx *ctx, dlt_tensor *t, int32_t normal, double a, double b,
                         uint64_t seed, uint64_t offset) {
    (void)ctx;
    void *p = dlt__data(t);
    for (int64_t i = 0; i < t->numel; i++) {
        float v;
        if (normal)
            v = (float)(a + b * dlt__philox_normal(seed, offset, (uint64_t)i));
        else
            v = (float)(a + (b - a) * (double)dlt__philox_uniform(seed, offset, (uint64_t)i));
        dlt__st(p, t->dtype, mem_index(t, i), v);
    }
    return DLT_OK;
}

dlt_status dlt__cpu_add(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *a, const dlt_tensor *b) {
    (void)ctx;
    const void *pa = dlt__data(a), *pb = dlt__data(b);
    void *py = dlt__data(y);
    if (y->dtype == DLT_F32) {
        const float *fa = pa, *fb = pb;
        float *fy = py;
        for (int64_t i = 0; i < y->numel; i++) fy[i] = fa[i] + fb[i];
        return DLT_OK;
    }
    for (int64_t i = 0; i < y->numel; i++)
        dlt__st(py, y->dtype, i, dlt__ld(pa, a->dtype, i) + dlt__ld(pb, b->dtype, i));
    return DLT_OK;
}

dlt_status dlt__cpu_accumulate(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src, int32_t beta) {
    (void)ctx;
    const void *s = dlt__data(src);
    void *d = dlt__data(dst);
    const int same_fmt = dst->format == src->format;
    if (same_fmt && dst->dtype == DLT_F32 && src->dtype == DLT_F32) {
        float *fd = d;
        const float *fs = s;
        if (beta) {
            DLT_PARALLEL_FOR(i, dst->numel, DLT_PARALLEL_MIN_WORK) fd[i] += fs[i];
        } else
            memcpy(fd, fs, (size_t)dst->numel * 4);
        return DLT_OK;
    }
    DLT_PARALLEL_FOR(i, dst->numel, DLT_PARALLEL_MIN_WORK) {
        int64_t si = same_fmt ? i : mem_index(src, i);
        int64_t di = same_fmt ? i : mem_index(dst, i);
        float v = dlt__ld(s, src->dtype, si);
        if (beta) v += dlt__ld(d, dst->dtype, di);
        dlt__st(d, dst->dtype, di, v);
    }
    return DLT_OK;
}

dlt_status dlt__cpu_scale(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *s,
                          double alpha) {
    (void)ctx;
    /* PyTorch multiplies by the fp32 scale tensor in fp32 (opmath), then by alpha */
    float f = s ? ((const float *)dlt__data(s))[0] : 1.0f;
    const void *px = dlt__data(x);
    void *py = dlt__data(y);
    DLT_PARALLEL_FOR(i, y->numel, DLT_PARALLEL_MIN_WORK) {
        float v = dlt__ld(px, x->dtype, i) * f;
        if (alpha != 1.0) v = (float)(v * alpha);
        dlt__st(py, y->dtype, i, v);
    }
    return DLT_OK;
}

dlt_status dlt__cpu_sum(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double alpha) {
    (void)ctx;
    /* pairwise-ish accumulation in double keeps the CPU reference well above fp32 */
    double acc = 0.0;
    const void *px = dlt__data(x);
    for (int64_t i = 0; i < x->numel; i++) acc += dlt__ld(px, x->dtype, i);
    dlt__st(dlt__data(y), y->dtype, 0, (float)(acc * alpha));
    return DLT_OK;
}

dlt_status dlt__cpu_broadcast_scalar(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, double alpha) {
    (void)ctx;
    float v = (float)(dlt__ld(dlt__data(dy), dy->dtype, 0) * alpha);
    void *p = dlt__data(dx);
    for (int64_t i = 0; i < dx->numel; i++) dlt__st(p, dx->dtype, i, v);
    return DLT_OK;
}

dlt_status dlt__cpu_accumulate_multi(dlt_ctx *ctx, int32_t n, dlt_tensor *const *dsts,
                                     const dlt_tensor *const *srcs, const int32_t *betas) {
    for (int32_t i = 0; i < n; i++) DLT_CHECK(dlt__cpu_accumulate(ctx, dsts[i], srcs[i], betas[i]));
    return DLT_OK;
}
