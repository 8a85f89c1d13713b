/*
 * nn_custom_common.h - what the custom-module tests (test_nn_custom_*.c, test_nn_summary.c)
 * share: the CPU context, deterministic data, readers, the allocator and tape counters, a
 * custom MLP written in C (its forward callback runs dlt_linear/dlt_relu on its registered
 * parameters) and an identity custom module.
 *
 * Definitions are static: each program is one .c file (tests/meson.build) and gets its own copy.
 */
#ifndef DLT_TEST_NN_CUSTOM_COMMON_H
#define DLT_TEST_NN_CUSTOM_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "harness.h"
#include "splitmix.h"

static dlt_ctx *g_ctx;

/* ---- deterministic data (splitmix64) ---- */
/* an f32 tensor of uniform values in [-a, a); vals (may be NULL) receives them as doubles */
static TH_UNUSED dlt_tensor *rand_tensor(const int64_t *shape, int32_t ndim, double a, double *vals) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    for (int64_t i = 0; i < n; i++) {
        f[i] = (float)(a * (2 * urand() - 1));
        if (vals) vals[i] = f[i];
    }
    dlt_tensor *t = th_tensor_f32(g_ctx, f, shape, ndim);
    free(f);
    return t;
}
static TH_UNUSED void read_d(const dlt_tensor *t, double *out) {
    float *f = th_read_f32(t);
    for (int64_t i = 0; i < dlt_tensor_numel(t); i++) out[i] = f[i];
    free(f);
}
static TH_UNUSED double rel_err(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (a[i] != a[i]) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den == 0 ? sqrt(num) : sqrt(num / den);
}
static TH_UNUSED uint64_t allocated(void) {
    uint64_t v = 0;
    if (dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &v) != DLT_OK) printf("# memory_stat failed\n");
    return v;
}
static TH_UNUSED int64_t live_nodes(void) {
    int64_t n = -1;
    if (dlt_tape_live_nodes(g_ctx, &n) != DLT_OK) printf("# tape_live_nodes failed\n");
    return n;
}

/* ---- the custom MLP: x [N, D] -> linear(w1, b1) -> relu -> linear(w2, b2) -> [N, C] ---- */

enum { D = 4, H = 8, C = 3, N = 6 };

typedef struct mlp {
    dlt_tensor *w1, *b1, *w2, *b2; /* own references, released by mlp_free */
    int calls, last_training, *freed;
} mlp;

static TH_UNUSED dlt_status mlp_forward(dlt_module *m, void *user, dlt_tensor *const *in, int32_t n_in,
                                        dlt_tensor **out, int32_t n_out) {
    mlp *p = user;
    if (n_in != 1 || n_out != 1)
        return dlt_set_error(DLT_ERR_INVALID_ARGUMENT, "mlp: takes one input, gives one output");
    p->calls++;
    p->last_training = dlt_module_is_training(m);
    dlt_tensor *h = NULL, *a = NULL;
    dlt_status st = dlt_linear(in[0], p->w1, p->b1, &h);
    if (st == DLT_OK) st = dlt_relu(h, &a);
    dlt_tensor_release(h);
    if (st == DLT_OK) st = dlt_linear(a, p->w2, p->b2, &out[0]);
    dlt_tensor_release(a);
    return st;
}

static TH_UNUSED void mlp_free(void *user) {
    mlp *p = user;
    dlt_tensor_release(p->w1), dlt_tensor_release(p->b1);
    dlt_tensor_release(p->w2), dlt_tensor_release(p->b2);
    if (p->freed) (*p->freed)++;
    free(p);
}

/* w1, b1, w2, b2 as doubles (may be NULL) */
typedef struct mlp_vals {
    double w1[H * D], b1[H], w2[C * H], b2[C];
} mlp_vals;

static TH_UNUSED dlt_module *mlp_create(uint64_t s, mlp_vals *v, int *freed, mlp **pp) {
    seed(s);
    mlp *p = calloc(1, sizeof *p);
    mlp_vals tmp;
    if (!v) v = &tmp;
    const int64_t s_w1[2] = {H, D}, s_b1[1] = {H}, s_w2[2] = {C, H}, s_b2[1] = {C};
    p->w1 = rand_tensor(s_w1, 2, 0.5, v->w1);
    p->b1 = rand_tensor(s_b1, 1, 0.5, v->b1);
    p->w2 = rand_tensor(s_w2, 2, 0.5, v->w2);
    p->b2 = rand_tensor(s_b2, 1, 0.5, v->b2);
    p->freed = freed;
    dlt_module *m = NULL;
    if (dlt_custom_module_create(g_ctx, "mlp", mlp_forward, p, mlp_free, &m) != DLT_OK) {
        printf("# mlp_create: %s\n", dlt_last_error());
        mlp_free(p);
        return NULL;
    }
    dlt_status st = dlt_module_register_parameter(m, "w1", p->w1);
    if (st == DLT_OK) st = dlt_module_register_parameter(m, "b1", p->b1);
    if (st == DLT_OK) st = dlt_module_register_parameter(m, "w2", p->w2);
    if (st == DLT_OK) st = dlt_module_register_parameter(m, "b2", p->b2);
    if (st != DLT_OK) {
        printf("# mlp_create: %s\n", dlt_last_error());
        dlt_module_destroy(m);
        return NULL;
    }
    if (pp) *pp = p;
    return m;
}

/* ---- a custom module that passes its inputs through ---- */

static TH_UNUSED dlt_status identity_forward(dlt_module *m, void *user, dlt_tensor *const *in,
                                             int32_t n_in, dlt_tensor **out, int32_t n_out) {
    (void)m, (void)user;
    for (int32_t i = 0; i < n_out && i < n_in; i++) out[i] = dlt_tensor_retain(in[i]);
    return DLT_OK;
}

static TH_UNUSED dlt_module *custom(const char *kind) {
    dlt_module *m = NULL;
    if (dlt_custom_module_create(g_ctx, kind, identity_forward, NULL, NULL, &m) != DLT_OK)
        printf("# custom: %s\n", dlt_last_error());
    return m;
}

static TH_UNUSED dlt_tensor *zeros(int32_t dtype, const int64_t *shape, int32_t ndim) {
    dlt_tensor *t = NULL;
    if (dlt_tensor_zeros(g_ctx, dtype, shape, ndim, DLT_FORMAT_CONTIGUOUS, &t) != DLT_OK)
        printf("# zeros: %s\n", dlt_last_error());
    return t;
}

#endif
