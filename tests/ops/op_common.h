/*
 * op_common.h - what the op-table drivers share: seeded input values, tensors made from
 * them, and the comparison metric (relative norm; NaN never passes).
 */
#ifndef DLT_TEST_OP_COMMON_H
#define DLT_TEST_OP_COMMON_H

#include "op_table.h"

/* Deterministic values for input i of a case (seeded by case name and slot): doubles that
 * are exactly representable in `dtype` (rounded), or integers for index kinds; NULL for
 * OT_NULL. n receives the element count. Caller frees. */
double *ot_values(const ot_case *c, int slot, int32_t dtype, int64_t *n);
/* A tensor on ctx holding vals for input slot of c in `dtype` (index kinds use their own
 * dtype; OT_P is always f32); requires_grad for OT_X/OT_P. NULL for OT_NULL. */
dlt_tensor *ot_tensor(dlt_ctx *ctx, const ot_case *c, int slot, int32_t dtype, const double *vals);
/* Tensor contents as doubles (logical order). Caller frees. */
double *ot_read(const dlt_tensor *t);
/* ||a - b|| / max(||b||, tiny); any NaN in a where b is not NaN (or vice versa) gives inf. */
double ot_relnorm(const double *a, const double *b, int64_t n);
/* Uniform doubles in [lo, hi) rounded to dtype (seeded). */
double *ot_random(uint64_t seed, int64_t n, double lo, double hi, int32_t dtype);
/* A stable 64-bit hash of a string (seeds). */
uint64_t ot_hash(const char *s);
/* Rounds v to dtype's precision (f32, f16, bf16). */
double ot_round(double v, int32_t dtype);
int64_t ot_out_numel(const ot_case *c);


/* Element of an input of shape ishape (ind dims) read at output linear index i of a
 * broadcast to oshape (ond dims). */
int64_t ot_bcast_index(const int64_t *oshape, int32_t ond, const int64_t *ishape, int32_t ind, int64_t i);

/* Philox4x32-10 (Salmon et al., SC'11), written for the tests: 10 rounds on counter c with
 * a 64-bit key. */
void ot_philox(uint64_t key, uint32_t c[4]);
/* Element i of a draw at generator offset 0: counter i/4, word i%4, 24 bits -> [0, 1). */
double ot_philox_uniform(uint64_t seed, uint64_t i);

#endif
