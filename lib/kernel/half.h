/*
 * half.h - fp16 and bf16 <-> fp32 conversions in portable C (round to nearest even),
 * bit-exact with the CUDA intrinsics __float2half_rn / __float2bfloat16_rn, so the CPU
 * backend and CUDA produce the same bits. NaN stays NaN (quiet); overflow gives +-inf.
 */
#ifndef DLT_HALF_H
#define DLT_HALF_H

#include <stdint.h>
#include <string.h>

#include "hd.h"

DLT_HD uint32_t dlt__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
DLT_HD float dlt__bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

DLT_HD float dlt__bf16_to_f32(uint16_t h) { return dlt__bits_f32((uint32_t)h << 16); }

DLT_HD uint16_t dlt__f32_to_bf16(float f) {
    uint32_t u = dlt__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb; /* round to nearest, ties to even; carries into the exponent correctly */
    return (uint16_t)(u >> 16);
}

DLT_HD float dlt__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return dlt__bits_f32(u);
}

DLT_HD uint16_t dlt__f32_to_f16(float f) {
    uint32_t u = dlt__f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t au = u & 0x7fffffffu;
    if (au > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (au >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (au < 0x38800000u) { /* result is subnormal or zero: exponent < -14 */
        if (au < 0x33000000u) return (uint16_t)sign; /* < 2^-25: rounds to zero (2^-25 ties to 0) */
        uint32_t e = au >> 23;
        uint32_t m = (au & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 so the value becomes m >> (shift) in units of 2^-24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias exponent, round mantissa from 23 to 10 bits */
    uint32_t r = au - 0x38000000u; /* exponent rebias 127 -> 15 */
    uint32_t lsb = (r >> 13) & 1u;
    r += 0xfffu + lsb;
    return (uint16_t)(sign | (r >> 13));
}

#endif
