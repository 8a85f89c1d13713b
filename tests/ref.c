/*
 * ref.c - independent float64 reference implementations used by the tests (naive loops,
 * written from the definitions, sharing no code with the library).
 */
#include "ref.h"

double ref_dot(const double *a, const double *b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
