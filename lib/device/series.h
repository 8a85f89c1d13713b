/*
 * series.h - the GPU monitor's sample series: a bounded, evenly spaced record of every
 * sample (time, utilisation, temperature, SM clock, power, memory, clock-event reasons).
 *
 * Memory stays bounded for runs of any length: when the buffer is full, neighbouring points
 * are merged in pairs and from then on each new point covers twice as many samples (the
 * stride doubles). A point's time is that of the first sample it covers, its values are the
 * means of the samples that reported them (after a merge, the mean of the two halves'
 * means), and its clock-event reasons are the OR of theirs, so a throttled sample is never
 * merged away. A field no covered sample reported is NaN.
 *
 * Plain C without library dependencies (tests/test_series.c compiles it on its own); the
 * monitor calls it under its mutex.
 */
#ifndef DLT_DEVICE_SERIES_H
#define DLT_DEVICE_SERIES_H

#include <stdint.h>

/* Fields, in the order of DLT_GPUMON_SERIES_* in include/dltrain/device.h. */
#define DLT__SERIES_TIME 0
#define DLT__SERIES_REASONS 7
#define DLT__SERIES_NFIELDS 8

typedef struct dlt__series {
    double *pts;    /* cap x NFIELDS, row-major: the complete points */
    int64_t cap, n; /* capacity (even, >= 2) and points held */
    int64_t stride; /* samples per point */
    /* the point being filled */
    int64_t pending;                   /* samples in it (< stride) */
    double psum[DLT__SERIES_NFIELDS];  /* sums of the reported values (time: first time) */
    int64_t pcnt[DLT__SERIES_NFIELDS]; /* samples that reported each field */
    uint64_t preasons;
} dlt__series;

/* Allocates room for cap points (rounded up to even, at least 2). 0, or -1 without memory. */
int dlt__series_init(dlt__series *s, int64_t cap);
void dlt__series_free(dlt__series *s);
/* Adds one sample: v[f] for each field, NaN where the sample has no value; v[REASONS] holds
 * the reason bits as a double (exact: NVML's bits are far below 2^53). */
void dlt__series_push(dlt__series *s, const double *v);
/* Points readable now: the complete ones, plus the one being filled if it holds a sample. */
int64_t dlt__series_points(const dlt__series *s);
/* Copies point i (0 <= i < dlt__series_points) into out[0..NFIELDS-1]. */
void dlt__series_point(const dlt__series *s, int64_t i, double *out);

#endif
