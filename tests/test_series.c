/*
 * test_series.c - the GPU monitor's bounded sample series (lib/device/series.c), compiled
 * into this program on its own: points of hand-worked sequences through two merges, missing
 * values and OR-ed reason bits, and long random sequences checked against a brute-force
 * model (point k of stride s covers samples k*s .. k*s+s-1: its time is the first one's, its
 * values the exact means, its reasons the OR).
 */
#include <stdint.h>

#include "../lib/device/series.h"
#include "harness.h"

#define NF DLT__SERIES_NFIELDS

/* Sample i of a test sequence: every field a distinct function of i. */
static void sample(int64_t i, double *v) {
    v[DLT__SERIES_TIME] = 0.25 * (double)i;
    for (int f = 1; f < NF; f++) v[f] = (double)((i * (7 + f)) % 101) + 0.5 * f;
    v[DLT__SERIES_REASONS] = (double)(1u << (i % 9)); /* a different bit per sample */
}

static void point(const dlt__series *s, int64_t i, double *out) { dlt__series_point(s, i, out); }

static void test_fills_then_merges(void) {
    dlt__series s;
    REQUIRE(dlt__series_init(&s, 4) == 0);
    double v[NF], p[NF];
    for (int64_t i = 0; i < 3; i++) {
        sample(i, v);
        dlt__series_push(&s, v);
    }
    CHECK(dlt__series_points(&s) == 3 && s.stride == 1);
    for (int64_t i = 0; i < 3; i++) {
        sample(i, v);
        point(&s, i, p);
        for (int f = 0; f < NF; f++) CHECK(p[f] == v[f], "point %lld field %d: %g vs %g", (long long)i, f, p[f], v[f]);
    }
    /* the 4th sample fills the buffer: pairs merge, the stride doubles */
    sample(3, v);
    dlt__series_push(&s, v);
    CHECK(dlt__series_points(&s) == 2 && s.stride == 2, "points %lld stride %lld",
          (long long)dlt__series_points(&s), (long long)s.stride);
    double a[NF], b[NF];
    sample(0, a);
    sample(1, b);
    point(&s, 0, p);
    CHECK(p[DLT__SERIES_TIME] == 0.0);
    CHECK(p[1] == 0.5 * (a[1] + b[1]), "%g", p[1]);
    CHECK(p[DLT__SERIES_REASONS] == 3.0, "bits 0x1 | 0x2: %g", p[DLT__SERIES_REASONS]);
    point(&s, 1, p);
    CHECK(p[DLT__SERIES_TIME] == 0.5 && p[DLT__SERIES_REASONS] == 12.0, "%g %g", p[0], p[7]);
    /* a 5th sample is a partial point of its own until its pair arrives */
    sample(4, v);
    dlt__series_push(&s, v);
    CHECK(dlt__series_points(&s) == 3);
    point(&s, 2, p);
    for (int f = 0; f < NF; f++) CHECK(p[f] == v[f], "partial point field %d", f);
    for (int64_t i = 5; i < 8; i++) {
        sample(i, v);
        dlt__series_push(&s, v);
    }
    /* 8 samples at stride 2 filled 4 points: merged again into 2 points of 4 samples */
    CHECK(dlt__series_points(&s) == 2 && s.stride == 4);
    point(&s, 1, p);
    double mean = 0;
    for (int64_t i = 4; i < 8; i++) {
        sample(i, v);
        mean += v[3] / 4;
    }
    CHECK(p[DLT__SERIES_TIME] == 1.0);
    CHECK_NEAR(p[3], mean, 1e-12);
    CHECK(p[DLT__SERIES_REASONS] == (double)(0x10 | 0x20 | 0x40 | 0x80), "%g", p[7]);
    dlt__series_free(&s);
}

static void test_missing_values(void) {
    dlt__series s;
    REQUIRE(dlt__series_init(&s, 2) == 0);
    double v[NF], p[NF];
    sample(0, v);
    v[5] = NAN; /* power not reported */
    v[DLT__SERIES_REASONS] = NAN;
    dlt__series_push(&s, v);
    point(&s, 0, p);
    CHECK(isnan(p[5]) && isnan(p[DLT__SERIES_REASONS]) && p[3] == v[3]);
    sample(1, v);
    double power1 = v[5];
    v[3] = NAN;
    dlt__series_push(&s, v); /* full: the two merge into one point */
    CHECK(dlt__series_points(&s) == 1 && s.stride == 2);
    point(&s, 0, p);
    double t0[NF];
    sample(0, t0);
    CHECK(p[5] == power1, "power from the sample that had it: %g", p[5]);
    CHECK(p[3] == t0[3], "temperature from the sample that had it: %g", p[3]);
    CHECK(p[DLT__SERIES_REASONS] == 2.0, "%g", p[DLT__SERIES_REASONS]);
    dlt__series_free(&s);
    /* an odd capacity is rounded up to even; below 2 it is 2 */
    REQUIRE(dlt__series_init(&s, 5) == 0);
    CHECK(s.cap == 6);
    dlt__series_free(&s);
    REQUIRE(dlt__series_init(&s, 0) == 0);
    CHECK(s.cap == 2);
    dlt__series_free(&s);
}

static void test_random_against_model(void) {
    uint64_t rng = 12345;
    for (int trial = 0; trial < 6; trial++) {
        int64_t cap = 2 * (1 + trial * 5), nsamples = 100 + trial * 997;
        dlt__series s;
        REQUIRE(dlt__series_init(&s, cap) == 0);
        double(*all)[NF] = malloc((size_t)nsamples * sizeof *all);
        REQUIRE(all);
        for (int64_t i = 0; i < nsamples; i++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            sample(i, all[i]);
            all[i][2] = (double)(rng >> 40) / 16777216.0 * 100.0; /* utilisation in [0, 100) */
            all[i][DLT__SERIES_REASONS] = (rng >> 13) % 17 == 0 ? 0x40 : 0x1;
            dlt__series_push(&s, all[i]);
        }
        int64_t np = dlt__series_points(&s), st = s.stride;
        CHECK(np <= cap && (nsamples < cap || np >= cap / 2), "trial %d: %lld points of cap %lld", trial,
              (long long)np, (long long)cap);
        CHECK(np == (nsamples + st - 1) / st, "trial %d: %lld points at stride %lld for %lld samples", trial,
              (long long)np, (long long)st, (long long)nsamples);
        double max_err = 0;
        int bad_bits = 0, bad_time = 0;
        for (int64_t k = 0; k < np; k++) {
            double p[NF], mean[NF] = {0};
            uint64_t bits = 0;
            int64_t lo = k * st, hi = lo + st < nsamples ? lo + st : nsamples;
            for (int64_t i = lo; i < hi; i++) {
                for (int f = 1; f < NF; f++) mean[f] += all[i][f] / (double)(hi - lo);
                bits |= (uint64_t)all[i][DLT__SERIES_REASONS];
            }
            point(&s, k, p);
            bad_time += p[DLT__SERIES_TIME] != all[lo][DLT__SERIES_TIME];
            bad_bits += (uint64_t)p[DLT__SERIES_REASONS] != bits;
            for (int f = 1; f < NF - 1; f++) {
                double e = fabs(p[f] - mean[f]);
                if (e > max_err) max_err = e;
            }
        }
        CHECK(max_err < 1e-9, "trial %d: max error %g of the means", trial, max_err);
        CHECK(bad_time == 0 && bad_bits == 0, "trial %d: %d times, %d reason sets wrong", trial, bad_time,
              bad_bits);
        free(all);
        dlt__series_free(&s);
    }
}

int main(void) {
    RUN(test_fills_then_merges);
    RUN(test_missing_values);
    RUN(test_random_against_model);
    return th_done();
}
