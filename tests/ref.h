/*
 * ref.h - float64 reference implementations of the ops, for tests (see ref.c).
 */
#ifndef DLT_TEST_REF_H
#define DLT_TEST_REF_H

#include <stdint.h>

double ref_dot(const double *a, const double *b, int64_t n);

#endif
