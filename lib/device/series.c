/*
 * series.c - the monitor's bounded sample series (see series.h for the merging rule).
 */
#include "series.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NF DLT__SERIES_NFIELDS

int dlt__series_init(dlt__series *s, int64_t cap) {
    memset(s, 0, sizeof *s);
    if (cap < 2) cap = 2;
    cap += cap & 1;
    s->pts = malloc((size_t)cap * NF * sizeof(double));
    if (!s->pts) return -1;
    s->cap = cap;
    s->stride = 1;
    return 0;
}

void dlt__series_free(dlt__series *s) {
    free(s->pts);
    memset(s, 0, sizeof *s);
}

static double reasons_or(double a, double b) {
    if (isnan(a)) return b;
    if (isnan(b)) return a;
    return (double)((uint64_t)a | (uint64_t)b);
}

/* The point being filled, as a point. */
static void pending_point(const dlt__series *s, double *out) {
    for (int f = 0; f < NF; f++) {
        if (s->pcnt[f] == 0) out[f] = NAN;
        else if (f == DLT__SERIES_TIME) out[f] = s->psum[f];
        else if (f == DLT__SERIES_REASONS) out[f] = (double)s->preasons;
        else out[f] = s->psum[f] / (double)s->pcnt[f];
    }
}

/* Pairs of points become one: the first time, the means' mean, the reasons' OR. */
static void compact(dlt__series *s) {
    for (int64_t i = 0; i < s->n / 2; i++) {
        const double *a = s->pts + 2 * i * NF, *b = a + NF;
        double m[NF];
        for (int f = 0; f < NF; f++) {
            if (f == DLT__SERIES_TIME) m[f] = isnan(a[f]) ? b[f] : a[f];
            else if (f == DLT__SERIES_REASONS) m[f] = reasons_or(a[f], b[f]);
            else if (isnan(a[f])) m[f] = b[f];
            else if (isnan(b[f])) m[f] = a[f];
            else m[f] = 0.5 * (a[f] + b[f]);
        }
        memcpy(s->pts + i * NF, m, sizeof m);
    }
    s->n /= 2;
    s->stride *= 2;
}

void dlt__series_push(dlt__series *s, const double *v) {
    if (!s->pts) return;
    for (int f = 0; f < NF; f++) {
        if (isnan(v[f])) continue;
        if (f == DLT__SERIES_TIME) {
            if (s->pcnt[f] == 0) s->psum[f] = v[f];
        } else if (f == DLT__SERIES_REASONS) {
            s->preasons |= (uint64_t)v[f];
        } else {
            s->psum[f] += v[f];
        }
        s->pcnt[f]++;
    }
    if (++s->pending < s->stride) return;
    pending_point(s, s->pts + s->n * NF);
    s->n++;
    s->pending = 0;
    memset(s->psum, 0, sizeof s->psum);
    memset(s->pcnt, 0, sizeof s->pcnt);
    s->preasons = 0;
    if (s->n == s->cap) compact(s);
}

int64_t dlt__series_points(const dlt__series *s) { return s->n + (s->pending > 0); }

void dlt__series_point(const dlt__series *s, int64_t i, double *out) {
    if (i < s->n) memcpy(out, s->pts + i * NF, NF * sizeof(double));
    else pending_point(s, out);
}
