/*
 * philox.h - Philox4x32-10 counter-based generator (Salmon et al., SC'11), shared by the
 * CPU backend and the CUDA kernels so that a seed gives identical tensors on both.
 *
 * Element i of a random fill at generator offset `off` uses counter (off + i/4) and takes
 * output word i%4 (uniform) or a Box-Muller pair from the block (normal). The mapping from
 * words to floats is written once here and used on both sides.
 */
#ifndef DLT_PHILOX_H
#define DLT_PHILOX_H

#include <stdint.h>
#include <math.h>

#include "hd.h"

typedef struct dlt_philox_out {
    uint32_t v[4];
} dlt_philox_out;

DLT_HD uint32_t dlt__mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* counter = 64-bit block index (split into words 0,1); words 2,3 are zero.
 * key = 64-bit seed. */
DLT_HD dlt_philox_out dlt__philox(uint64_t seed, uint64_t counter) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = dlt__mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = dlt__mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n1 = lo1;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        uint32_t n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    dlt_philox_out o;
    o.v[0] = c0;
    o.v[1] = c1;
    o.v[2] = c2;
    o.v[3] = c3;
    return o;
}

/* 24 random bits -> float in [0, 1): exact in fp32, so both backends agree bit for bit. */
DLT_HD float dlt__u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* word k (0..3) of o by selects: a run-time index would put o in GPU local memory */
DLT_HD uint32_t dlt__philox_word(const dlt_philox_out *o, uint32_t k) {
    const uint32_t lo = (k & 1u) ? o->v[1] : o->v[0], hi = (k & 1u) ? o->v[3] : o->v[2];
    return (k & 2u) ? hi : lo;
}

/* Uniform value for logical element i of a fill that starts at generator offset off. */
DLT_HD float dlt__philox_uniform(uint64_t seed, uint64_t off, uint64_t i) {
    dlt_philox_out o = dlt__philox(seed, off + i / 4);
    return dlt__u32_to_unit(dlt__philox_word(&o, (uint32_t)(i % 4)));
}

/* Standard normal value for element i. Box-Muller in double precision (then rounded) so
 * that libm and CUDA's math give the same float after rounding in all but rare ties. */
DLT_HD double dlt__philox_normal(uint64_t seed, uint64_t off, uint64_t i) {
    dlt_philox_out o = dlt__philox(seed, off + i / 4);
    uint32_t pair = (uint32_t)(i % 4) / 2u;
    /* u1 in (0, 1] so log(u1) is finite */
    double u1 = ((double)(dlt__philox_word(&o, 2 * pair) >> 8) + 1.0) * (1.0 / 16777216.0);
    double u2 = (double)(dlt__philox_word(&o, 2 * pair + 1) >> 8) * (1.0 / 16777216.0);
    double r = sqrt(-2.0 * log(u1));
    double th = 6.283185307179586 * u2;
    return (i % 2 == 0) ? r * cos(th) : r * sin(th);
}

/* Number of counters a fill of n elements consumes (blocks of four). */
DLT_HD uint64_t dlt__philox_blocks(uint64_t n) { return (n + 3) / 4; }

#endif
