/*
 * cpu.h - the CPU backend's kernels (declared here, gathered into the table in backend.c).
 * The CPU backend is the reference: plain loops in fp32 (fp16/bf16 converted on load and
 * store, round to nearest even), GEMMs through CBLAS.
 */
#ifndef DLT_CPU_H
#define DLT_CPU_H

#include "../kernel/half.h"
#include "../core/internal.h"

/* element load/store in fp32 for any float dtype (and integers by value) */
static inline float dlt__ld(const void *p, int32_t dtype, int64_t i) {
    switch (dtype) {
    case DLT_F32: return ((const float *)p)[i];
    case DLT_F16: return dlt__f16_to_f32(((const uint16_t *)p)[i]);
    case DLT_BF16: return dlt__bf16_to_f32(((const uint16_t *)p)[i]);
    case DLT_I32: return (float)((const int32_t *)p)[i];
    case DLT_I64: return (float)((const int64_t *)p)[i];
    default: return (float)((const uint8_t *)p)[i];
    }
}
static inline void dlt__st(void *p, int32_t dtype, int64_t i, float v) {
    switch (dtype) {
    case DLT_F32: ((float *)p)[i] = v; break;
    case DLT_F16: ((uint16_t *)p)[i] = dlt__f32_to_f16(v); break;
    case DLT_BF16: ((uint16_t *)p)[i] = dlt__f32_to_bf16(v); break;
    /* float -> integer saturates (NaN -> 0) instead of C's undefined conversion */
    case DLT_I32: ((int32_t *)p)[i] = v != v ? 0 : v >= 2147483520.0f ? INT32_MAX : v <= -2147483648.0f ? INT32_MIN : (int32_t)v; break;
    case DLT_I64: ((int64_t *)p)[i] = v != v ? 0 : v >= 9.2233715e18f ? INT64_MAX : v <= -9.2233720e18f ? INT64_MIN : (int64_t)v; break;
    default: ((uint8_t *)p)[i] = v != v ? 0 : v >= 255.0f ? 255 : v <= 0.0f ? 0 : (uint8_t)v; break;
    }
}

/* integer load/store exactly in int64 (stores wrap to the width, as C's conversions of
 * unsigned values do and PyTorch's integer arithmetic does) */
static inline int64_t dlt__ld_i(const void *p, int32_t dtype, int64_t i) {
    switch (dtype) {
    case DLT_I32: return ((const int32_t *)p)[i];
    case DLT_I64: return ((const int64_t *)p)[i];
    case DLT_U8: return ((const uint8_t *)p)[i];
    default: return (int64_t)dlt__ld(p, dtype, i);
    }
}
static inline void dlt__st_i(void *p, int32_t dtype, int64_t i, int64_t v) {
    switch (dtype) {
    case DLT_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
    case DLT_I64: ((int64_t *)p)[i] = v; break;
    default: ((uint8_t *)p)[i] = (uint8_t)(uint64_t)v; break;
    }
}

/* Copies a tensor into a newly malloc'ed fp32 NCHW (logical order) buffer. NULL on OOM. */
float *dlt__cpu_to_f32_nchw(const dlt_tensor *t);
/* Stores a logical-order fp32 buffer into t (any float dtype/format), with beta=1 adding
 * to the existing contents. */
void dlt__cpu_from_f32_nchw(dlt_tensor *t, const float *src, int32_t beta);

/* memory.c */
dlt_status dlt__cpu_ctx_init(dlt_ctx *ctx);
dlt_status dlt__cpu_device_name(dlt_ctx *ctx, char *buf, size_t n);
dlt_status dlt__cpu_alloc(dlt_ctx *ctx, size_t nbytes, void **ptr);
void dlt__cpu_free(dlt_ctx *ctx, void *ptr, size_t nbytes);
dlt_status dlt__cpu_memcpy(dlt_ctx *ctx, void *dst, const void *src, size_t n);
dlt_status dlt__cpu_memset0(dlt_ctx *ctx, void *dst, size_t n);
dlt_status dlt__cpu_synchronize(dlt_ctx *ctx);
dlt_status dlt__cpu_mem_stat(dlt_ctx *ctx, int32_t which, uint64_t *out);
dlt_status dlt__cpu_mem_reset_peak(dlt_ctx *ctx);
dlt_status dlt__cpu_empty_cache(dlt_ctx *ctx);

/* lib/core/event.c */
dlt_status dlt__cpu_event_create(dlt_ctx *ctx, void **ev);
dlt_status dlt__cpu_event_record(dlt_ctx *ctx, void *ev);
dlt_status dlt__cpu_event_elapsed(dlt_ctx *ctx, void *start, void *end, double *ms);
void dlt__cpu_event_destroy(dlt_ctx *ctx, void *ev);

/* elementwise.c */
dlt_status dlt__cpu_convert(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src);
dlt_status dlt__cpu_fill(dlt_ctx *ctx, dlt_tensor *t, double value);
dlt_status dlt__cpu_rand(dlt_ctx *ctx, dlt_tensor *t, int32_t normal, double a, double b,
                         uint64_t seed, uint64_t offset);
dlt_status dlt__cpu_add(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *a, const dlt_tensor *b);
dlt_status dlt__cpu_accumulate(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src, int32_t beta);
dlt_status dlt__cpu_accumulate_multi(dlt_ctx *ctx, int32_t n, dlt_tensor *const *dsts,
                                     const dlt_tensor *const *srcs, const int32_t *betas);
dlt_status dlt__cpu_scale(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, const dlt_tensor *s,
                          double alpha);
dlt_status dlt__cpu_sum(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double alpha);
dlt_status dlt__cpu_broadcast_scalar(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, double alpha);

/* relu.c */
dlt_status dlt__cpu_relu_fwd(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x);
dlt_status dlt__cpu_relu_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y);

#endif
