/*
 * op_common.c - shared helpers of the op-table drivers (op_common.h).
 */
#include "op_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t ot_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static uint64_t mix(uint64_t *st) {
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double ot_round(double v, int32_t dtype) {
    float f = (float)v;
    if (dtype == DLT_F16 || dtype == DLT_BF16) {
        /* round through the library's own conversion: one element tensor would need a
         * context, so do it by hand (round to nearest even) */
        uint32_t u;
        memcpy(&u, &f, 4);
        if (dtype == DLT_BF16) {
            if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u);
            u &= 0xffff0000u;
            memcpy(&f, &u, 4);
        } else {
            /* f16: 10 mantissa bits; values in tests stay in the normal range */
            const double a = fabs((double)f);
            if (a > 0) {
                int e;
                frexp(a, &e);
                const double q = ldexp(1.0, e - 11); /* spacing of 11 significant bits */
                double r = nearbyint((double)f / q) * q;
                f = (float)r;
            }
        }
    }
    return (double)f;
}

double *ot_random(uint64_t seed, int64_t n, double lo, double hi, int32_t dtype) {
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    uint64_t st = seed;
    for (int64_t i = 0; i < n; i++) {
        const double u = (double)(mix(&st) >> 11) * (1.0 / 9007199254740992.0);
        v[i] = ot_round(lo + (hi - lo) * u, dtype);
    }
    return v;
}

double *ot_values(const ot_case *c, int slot, int32_t dtype, int64_t *n) {
    const ot_in *in = &c->in[slot];
    *n = 0;
    if (in->kind == OT_NULL) return NULL;
    const int64_t m = ot_numel(in);
    *n = m;
    const double lo = in->lo == in->hi ? -1.0 : in->lo, hi = in->lo == in->hi ? 1.0 : in->hi;
    const uint64_t seed = ot_hash(c->name) * 31u + (uint64_t)slot;
    if (in->kind == OT_I64 || in->kind == OT_I32) {
        double *v = malloc((size_t)(m > 0 ? m : 1) * sizeof *v);
        uint64_t st = seed;
        const int64_t span = (int64_t)(hi - lo);
        for (int64_t i = 0; i < m; i++) v[i] = lo + (double)(span > 0 ? (int64_t)(mix(&st) % (uint64_t)span) : 0);
        return v;
    }
    const int32_t dt = in->kind == OT_P ? DLT_F32 : dtype;
    if (in->spaced) {
        /* a shuffled ramp: distinct values 1/64 apart (exact in every float dtype), moved into
         * [lo, hi) as far as they fit, so no ties and no kink within the FD step */
        double *v = malloc((size_t)(m > 0 ? m : 1) * sizeof *v);
        uint64_t st = seed;
        for (int64_t i = 0; i < m; i++) v[i] = (double)i;
        for (int64_t i = m - 1; i > 0; i--) {
            const int64_t j = (int64_t)(mix(&st) % (uint64_t)(i + 1));
            const double t = v[i];
            v[i] = v[j];
            v[j] = t;
        }
        const double step = 1.0 / 64.0, start = lo + step / 2;
        for (int64_t i = 0; i < m; i++) v[i] = ot_round(start + step * v[i], dt);
        return v;
    }
    return ot_random(seed, m, lo, hi, dt);
}

dlt_tensor *ot_tensor(dlt_ctx *ctx, const ot_case *c, int slot, int32_t dtype, const double *vals) {
    const ot_in *in = &c->in[slot];
    if (in->kind == OT_NULL) return NULL;
    int32_t dt = in->kind == OT_P ? DLT_F32 : in->kind == OT_I64 ? DLT_I64 : in->kind == OT_I32 ? DLT_I32 : dtype;
    const int64_t n = ot_numel(in);
    dlt_tensor *f = NULL, *t = NULL;
    if (dt == DLT_I64 || dt == DLT_I32) {
        void *buf = malloc((size_t)(n > 0 ? n : 1) * 8);
        for (int64_t i = 0; i < n; i++) {
            if (dt == DLT_I64) ((int64_t *)buf)[i] = (int64_t)vals[i];
            else ((int32_t *)buf)[i] = (int32_t)vals[i];
        }
        dlt_status st = dlt_tensor_from_host(ctx, dt, in->shape, in->ndim, DLT_FORMAT_CONTIGUOUS, buf,
                                             (size_t)n * dlt_dtype_size(dt), &t);
        free(buf);
        return st == DLT_OK ? t : NULL;
    }
    float *buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) buf[i] = (float)vals[i];
    dlt_status st = dlt_tensor_from_host(ctx, DLT_F32, in->shape, in->ndim, DLT_FORMAT_CONTIGUOUS, buf,
                                         (size_t)n * sizeof(float), &f);
    free(buf);
    if (st != DLT_OK) return NULL;
    if (dt != DLT_F32) { /* values are exact in dt, so the cast is exact */
        st = dlt_tensor_cast(f, dt, &t);
        dlt_tensor_release(f);
        if (st != DLT_OK) return NULL;
    } else {
        t = f;
    }
    if (in->kind == OT_X || in->kind == OT_P) {
        if (dlt_tensor_set_requires_grad(t, 1) != DLT_OK) {
            dlt_tensor_release(t);
            return NULL;
        }
    }
    return t;
}

double *ot_read(const dlt_tensor *t) {
    const int64_t n = dlt_tensor_numel(t);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (dlt_tensor_dtype(t) == DLT_I64) {
        int64_t *b = malloc((size_t)(n > 0 ? n : 1) * 8);
        const int ok = dlt_tensor_copy_to_host(t, b, (size_t)n * 8) == DLT_OK;
        for (int64_t i = 0; i < n; i++) v[i] = ok ? (double)b[i] : NAN;
        free(b);
        return v;
    }
    dlt_tensor *f = NULL, *c = NULL;
    const dlt_tensor *src = t;
    if (dlt_tensor_format(t) != DLT_FORMAT_CONTIGUOUS) {
        if (dlt_tensor_to_format(t, DLT_FORMAT_CONTIGUOUS, &c) != DLT_OK) return v;
        src = c;
    }
    if (dlt_tensor_dtype(src) != DLT_F32) {
        if (dlt_tensor_cast(src, DLT_F32, &f) != DLT_OK) {
            dlt_tensor_release(c);
            return v;
        }
        src = f;
    }
    float *b = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (dlt_tensor_copy_to_host(src, b, (size_t)n * sizeof(float)) == DLT_OK)
        for (int64_t i = 0; i < n; i++) v[i] = b[i];
    else
        for (int64_t i = 0; i < n; i++) v[i] = NAN;
    free(b);
    dlt_tensor_release(f);
    dlt_tensor_release(c);
    return v;
}

double ot_relnorm(const double *a, const double *b, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return INFINITY;
        if (isnan(a[i])) continue;
        if (isinf(a[i]) || isinf(b[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    if (num == 0.0) return 0.0;
    return sqrt(num) / (den > 1e-300 ? sqrt(den) : 1e-150);
}

int64_t ot_out_numel(const ot_case *c) {
    int64_t n = 1;
    for (int32_t i = 0; i < c->out_ndim; i++) n *= c->out_shape[i];
    return n;
}

dlt_tensor *ot_zeros(dlt_ctx *ctx, int32_t dtype, const int64_t *shape, int32_t ndim) {
    dlt_tensor *t = NULL;
    if (dlt_tensor_zeros(ctx, dtype, shape, ndim, DLT_FORMAT_CONTIGUOUS, &t) != DLT_OK) return NULL;
    return t;
}

int64_t ot_bcast_index(const int64_t *oshape, int32_t ond, const int64_t *ishape, int32_t ind, int64_t i) {
    int64_t off = 0, stride = 1;
    for (int32_t d = ond - 1; d >= 0; d--) {
        const int64_t idx = i % oshape[d];
        i /= oshape[d];
        const int32_t di = ind - ond + d;
        if (di < 0) continue;
        if (ishape[di] != 1) off += idx * stride;
        stride *= ishape[di];
    }
    return off;
}

void ot_philox(uint64_t key, uint32_t c[4]) {
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n1 = (uint32_t)p1;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1, n3 = (uint32_t)p0;
        c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

double ot_philox_uniform(uint64_t seed, uint64_t i) {
    uint32_t c[4] = {(uint32_t)(i / 4), (uint32_t)((i / 4) >> 32), 0, 0};
    ot_philox(seed, c);
    return (double)(c[i % 4] >> 8) / 16777216.0;
}
