/*
 * op_table.h - one row schema for every op's tests (tests/ops/<stem>.c), driven in three
 * modes by the programs that include the rows:
 *   ref     test_op_table: the CPU forward (f32) against the row's float64 reference;
 *   grad    test_op_table: the CPU backward against central finite differences of that
 *           reference (L = sum(u * y) for a random u), then a second backward that must
 *           accumulate (twice the gradient), then no tape node left alive;
 *   backend cuda_op_table: CUDA against the CPU backend from the same input bytes, forward
 *           and backward, in f32, f16 and bf16 (skips without a GPU).
 * Error rows (ot_err) call an op with bad arguments and expect a status, a message naming
 * the function, and an untouched out-pointer.
 *
 * How to add an op (docs/architecture.md draws where each piece lives):
 *  - a unary elementwise op (a code of the backend's `unary` entry) touches five files:
 *     1. include/dltrain/ops.h: the declaration with its doc comment;
 *     2. lib/kernel/unary.h: a DLT_UN_* code and its case in the four switches (value and
 *        derivative; double for the CPU backend, fp32 for the CUDA kernels);
 *     3. lib/ops/pointwise.c: the front door, one line through unary_op (and the op in
 *        backward_needs / fp32_list when its backward reads the output or autocast runs it
 *        in fp32);
 *     4. tests/ops/pointwise.c: rows (OT_CASES) with a float64 reference, and error rows;
 *     5. bindings/python/dltrain/_lib.py: its _SIGNATURES row (test_abi checks it against
 *        the header);
 *    then its row in docs/ops.md, `python3 scripts/gen_api_docs.py` for docs/api.md, and
 *    its Python function in bindings/python/dltrain/ops.py (dlt_leaky_relu was added this
 *    way: the five files, the two docs, ops.py and one line of its Python test);
 *  - an op of a new stem brings its own files: lib/ops/<stem>.c, lib/cpu/<stem>.c and
 *    cuda/<stem>.cu (one line each in meson.build), its entries appended to struct
 *    dlt_backend (lib/core/internal.h) and to the ENTRIES macros of lib/cpu/ops_cpu.h and
 *    cuda/ops_cuda.h, the math both backends must agree on in lib/kernel/, and
 *    tests/ops/<stem>.c (listed in tests/meson.build and in OT_STEMS below);
 *  - a composite (built from other recorded ops) needs only 1, its front door, 4 and 5.
 */
#ifndef DLT_TEST_OP_TABLE_H
#define DLT_TEST_OP_TABLE_H

#include <stdint.h>

#include "dltrain.h"

#define OT_MAX_IN 6
#define OT_MAX_DIMS 6

/* input kinds */
enum {
    OT_X = 1,  /* float in the case dtype, requires grad (checked) */
    OT_C,      /* float in the case dtype, constant */
    OT_P,      /* f32 whatever the case dtype, requires grad (parameters: LN weight) */
    OT_I64,    /* int64 integers in [lo, hi) */
    OT_I32,    /* int32 integers in [lo, hi) */
    OT_NULL,   /* passed as NULL (an absent optional input) */
};

/* row flags */
#define OT_NO_GRAD 1u    /* no differentiable output (argmax) */
#define OT_NO_REF 2u     /* random op: no float64 reference, backend mode only */
#define OT_CPU_ONLY 4u   /* not compared with CUDA */
#define OT_F32_ONLY 8u   /* backend mode in f32 only */
#define OT_NO_FD 16u     /* ref mode checks the forward only: rows sized for the CUDA kernels'
                          * tiles (attention's 64-row tiles), where finite differences of the
                          * float64 reference would take minutes; small rows of the same op
                          * check its gradients */

typedef struct ot_in {
    int32_t kind;
    int32_t ndim;
    int64_t shape[OT_MAX_DIMS];
    double lo, hi;  /* value range (default -1, 1) */
    int32_t spaced; /* values at least 1/64 apart (no ties, no kinks within the FD step) */
} ot_in;

typedef struct ot_case ot_case;
/* Calls the front door on in[] (NULL where the kind is OT_NULL). */
typedef dlt_status (*ot_fwd)(const ot_case *c, dlt_tensor *const *in, dlt_tensor **out);
/* float64 reference: in[i] in row-major logical order (NULL for OT_NULL), out sized by
 * out_shape. */
typedef void (*ot_ref)(const ot_case *c, double *const *in, double *out);

struct ot_case {
    const char *name;
    ot_fwd fwd;
    ot_ref ref;
    int32_t n_in;
    ot_in in[OT_MAX_IN];
    int32_t out_ndim;
    int64_t out_shape[OT_MAX_DIMS];
    int32_t out_dtype; /* -1: the case dtype (or f32 for promoted results: set explicitly) */
    int64_t ip[8];
    double fp[4];
    double tol;        /* relative-norm tolerance of the f32 forward and gradients vs float64
                        * (0: 1e-5 forward, 1e-4 gradients) */
    uint32_t flags;
};

typedef struct ot_err {
    const char *name;
    /* makes its own tensors on ctx and returns the op's status; *out_touched is set when
     * the out-pointer was written */
    dlt_status (*call)(dlt_ctx *ctx, int *out_touched);
    dlt_status expect;
} ot_err;

typedef struct ot_stem {
    const char *stem;
    const ot_case *cases;
    int n_cases;
    const ot_err *errors;
    int n_errors;
} ot_stem;

/* Helpers for error rows: a tensor of the shape (zeros), and the out-pointer convention. */
dlt_tensor *ot_zeros(dlt_ctx *ctx, int32_t dtype, const int64_t *shape, int32_t ndim);
#define OT_SENTINEL ((dlt_tensor *)0x1)
#define OT_TOUCHED(y) (*out_touched = (y) != OT_SENTINEL)

/* Shape helpers for references. */
static inline int64_t ot_numel(const ot_in *in) {
    int64_t n = 1;
    for (int32_t i = 0; i < in->ndim; i++) n *= in->shape[i];
    return n;
}

#define OT_STEMS(X)                                                                           \
    X(binary) X(pointwise) X(reduce) X(softmax) X(layer_norm) X(dropout) X(embedding)        \
    X(attention) X(matmul) X(layout) X(losses)

#define OT_DECLARE(s) extern const ot_stem ot_stem_##s;
OT_STEMS(OT_DECLARE)
#undef OT_DECLARE

#define OT_STEM(s, cases, errors)                                                             \
    const ot_stem ot_stem_##s = {#s, cases, (int)(sizeof cases / sizeof cases[0]), errors,    \
                                 (int)(sizeof errors / sizeof errors[0])}

#endif
