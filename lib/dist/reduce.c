/*
 * reduce.c - the elementwise step of the CPU collectives: dst = op(dst, src) per dtype.
 *
 * Floating-point values are combined in fp32 and rounded back to fp16/bf16 at every step,
 * as NCCL does; MAX and MIN propagate NaN (either side NaN gives NaN), so a NaN on one
 * rank is seen by all. Integers: SUM wraps (two's complement, computed unsigned). AVG is a
 * SUM whose result is divided by the world size at the end (dlt__reduce_finish): exact for
 * power-of-two worlds, and done once per element so every rank gets the same bits.
 */
#include <math.h>
#include <string.h>

#include "../kernel/half.h"
#include "dist_internal.h"

static float fop(float a, float b, int32_t op) {
    switch (op) {
    case DLT_REDUCE_MAX: return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b);
    case DLT_REDUCE_MIN: return (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b);
    default: return a + b;
    }
}

#define INT_LOOP(T, UT)                                                                       \
    do {                                                                                      \
        T *d = (T *)dst;                                                                      \
        const T *s = (const T *)src;                                                          \
        for (size_t i = 0; i < count; i++) {                                                  \
            if (op == DLT_REDUCE_MAX)                                                         \
                d[i] = d[i] > s[i] ? d[i] : s[i];                                             \
            else if (op == DLT_REDUCE_MIN)                                                    \
                d[i] = d[i] < s[i] ? d[i] : s[i];                                             \
            else                                                                              \
                d[i] = (T)((UT)d[i] + (UT)s[i]);                                              \
        }                                                                                     \
    } while (0)

void dlt__reduce_into(void *dst, const void *src, size_t count, int32_t dtype, int32_t op) {
    switch (dtype) {
    case DLT_F32: {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < count; i++) d[i] = fop(d[i], s[i], op);
        break;
    }
    case DLT_F16: {
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < count; i++)
            d[i] = dlt__f32_to_f16(fop(dlt__f16_to_f32(d[i]), dlt__f16_to_f32(s[i]), op));
        break;
    }
    case DLT_BF16: {
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < count; i++)
            d[i] = dlt__f32_to_bf16(fop(dlt__bf16_to_f32(d[i]), dlt__bf16_to_f32(s[i]), op));
        break;
    }
    case DLT_I32: INT_LOOP(int32_t, uint32_t); break;
    case DLT_I64: INT_LOOP(int64_t, uint64_t); break;
    case DLT_U8: INT_LOOP(uint8_t, uint8_t); break;
    default: break; /* dtypes are validated by the front doors */
    }
}

void dlt__reduce_finish(void *dst, size_t count, int32_t dtype, int32_t op, int32_t world) {
    if (op != DLT_REDUCE_AVG) return;
    const float w = (float)world;
    switch (dtype) {
    case DLT_F32: {
        float *d = dst;
        for (size_t i = 0; i < count; i++) d[i] /= w;
        break;
    }
    case DLT_F16: {
        uint16_t *d = dst;
        for (size_t i = 0; i < count; i++) d[i] = dlt__f32_to_f16(dlt__f16_to_f32(d[i]) / w);
        break;
    }
    case DLT_BF16: {
        uint16_t *d = dst;
        for (size_t i = 0; i < count; i++) d[i] = dlt__f32_to_bf16(dlt__bf16_to_f32(d[i]) / w);
        break;
    }
    default: break;
    }
}
