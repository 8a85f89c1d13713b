/*
 * add_layer_norm_check.h - dlt_add_layer_norm (lib/ops/add_layer_norm.c: a pre-LN block's
 * residual add and the LayerNorm after it, one op) must be dlt_add then dlt_layer_norm_to, bit
 * for bit: sum, y, and the gradients of x (f32), b (in y's dtype), weight and bias, with the
 * gradient coming through both outputs, through y alone and through sum alone, twice without
 * zeroing (the second backward accumulates into the leaves). test_ops.c runs it on the CPU,
 * cuda_ops.c on the device, with a row width the vector kernels take (40) and one they do not
 * (30). The op must also have served the call (a node named "add_layer_norm" on the tape).
 */
#ifndef DLT_TEST_ADD_LAYER_NORM_CHECK_H
#define DLT_TEST_ADD_LAYER_NORM_CHECK_H

#include <string.h>

#include "harness.h"
#include "../lib/core/internal.h"

/* through: 1 = y, 2 = sum, 3 = both */
static TH_UNUSED void add_layer_norm_check(dlt_ctx *ctx, int32_t dtype, int64_t N, int through) {
    enum { M = 6, MAXN = 40 };
    const int64_t xs[2] = {M, N}, ws[1] = {N};
    const int64_t n = M * N;
    float xv[M * MAXN], bv[M * MAXN], wv[MAXN], cv[MAXN], r1[M * MAXN], r2[M * MAXN];
    for (int64_t i = 0; i < n; i++) {
        xv[i] = ((float)((i * 37) % 23) / 11.5f - 1.0f) * 2.0f;
        bv[i] = (float)((i * 11) % 19) / 9.5f - 1.0f;
        r1[i] = (float)((i * 13) % 17) / 8.5f - 1.0f;
        r2[i] = (float)((i * 7) % 15) / 7.5f - 1.0f;
    }
    for (int64_t i = 0; i < N; i++) wv[i] = 0.5f + (float)i / 40.0f, cv[i] = (float)i / 80.0f - 0.25f;
    float sum[2][M * MAXN], out[2][M * MAXN], grads[2][4][M * MAXN];
    const int64_t numel[4] = {n, n, N, N};
    for (int fused = 0; fused < 2; fused++) {
        dlt_tensor *x = NULL, *b = NULL, *w = NULL, *c = NULL, *t = NULL, *ra = NULL, *rb = NULL;
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, DLT_FORMAT_CONTIGUOUS, xv, (size_t)n * 4, &x));
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, DLT_FORMAT_CONTIGUOUS, bv, (size_t)n * 4, &t));
        CHECK_OK(dlt_cast(t, dtype, &b));
        dlt_tensor_release(t), t = NULL;
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, ws, 1, DLT_FORMAT_CONTIGUOUS, wv, (size_t)N * 4, &w));
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, ws, 1, DLT_FORMAT_CONTIGUOUS, cv, (size_t)N * 4, &c));
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, DLT_FORMAT_CONTIGUOUS, r1, (size_t)n * 4, &ra));
        CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, DLT_FORMAT_CONTIGUOUS, r2, (size_t)n * 4, &rb));
        dlt_tensor *leaves[4] = {x, b, w, c};
        for (int i = 0; i < 4; i++) CHECK_OK(dlt_tensor_set_requires_grad(leaves[i], 1));
        for (int rep = 0; rep < 2; rep++) {
            dlt_tensor *s = NULL, *y = NULL, *y32 = NULL, *t1 = NULL, *t2 = NULL, *tot = NULL, *l = NULL;
            if (fused) {
                CHECK_OK(dlt_add_layer_norm(x, b, ws, 1, w, c, 1e-5, dtype, &s, &y));
                /* the one op served it: both outputs come from its node */
                const dlt_node *nd = y->grad_fn;
                CHECK(nd && !strcmp(nd->name, "add_layer_norm") && s->grad_fn == nd, "y's node is %s",
                      nd ? nd->name : "none");
            } else {
                CHECK_OK(dlt_add(x, b, &s));
                CHECK_OK(dlt_layer_norm_to(s, ws, 1, w, c, 1e-5, dtype, &y));
            }
            CHECK_OK(dlt_cast(y, DLT_F32, &y32));
            if (rep == 0) {
                CHECK_OK(dlt_tensor_copy_to_host(s, sum[fused], (size_t)n * 4));
                CHECK_OK(dlt_tensor_copy_to_host(y32, out[fused], (size_t)n * 4));
            }
            CHECK_OK(dlt_mul(s, ra, &t1));
            CHECK_OK(dlt_mul(y32, rb, &t2));
            CHECK_OK(through == 1 ? dlt_sum(t2, &l) : through == 2 ? dlt_sum(t1, &l) : dlt_add(t1, t2, &tot));
            if (tot) CHECK_OK(dlt_sum(tot, &l));
            CHECK_OK(dlt_backward(l, NULL));
            dlt_tensor_release(s), dlt_tensor_release(y), dlt_tensor_release(y32), dlt_tensor_release(t1);
            dlt_tensor_release(t2), dlt_tensor_release(tot), dlt_tensor_release(l);
        }
        for (int i = 0; i < 4; i++) {
            const dlt_tensor *g = dlt_tensor_grad(leaves[i]);
            if (through == 2 && i >= 2) { /* the LayerNorm's parameters get nothing through sum */
                CHECK(!g, "a LayerNorm parameter has a gradient through sum alone");
                memset(grads[fused][i], 0, (size_t)numel[i] * 4);
                continue;
            }
            REQUIRE(g, "leaf %d has no gradient", i);
            if (i == 1) {
                CHECK_OK(dlt_cast((dlt_tensor *)g, DLT_F32, &t));
                CHECK_OK(dlt_tensor_copy_to_host(t, grads[fused][i], (size_t)numel[i] * 4));
                dlt_tensor_release(t), t = NULL;
            } else {
                CHECK_OK(dlt_tensor_copy_to_host(g, grads[fused][i], (size_t)numel[i] * 4));
            }
        }
        dlt_tensor_release(ra), dlt_tensor_release(rb);
        for (int i = 0; i < 4; i++) dlt_tensor_release(leaves[i]);
    }
    static const char *const names[4] = {"dx", "db (the add's 16-bit operand)", "dweight", "dbias"};
    CHECK(memcmp(sum[0], sum[1], (size_t)n * 4) == 0, "%s width %lld: sums differ", dlt_dtype_name(dtype),
          (long long)N);
    CHECK(memcmp(out[0], out[1], (size_t)n * 4) == 0, "%s width %lld: outputs differ", dlt_dtype_name(dtype),
          (long long)N);
    for (int i = 0; i < 4; i++)
        CHECK(memcmp(grads[0][i], grads[1][i], (size_t)numel[i] * 4) == 0, "%s width %lld, gradient through %s: %s differs",
              dlt_dtype_name(dtype), (long long)N, through == 1 ? "y" : through == 2 ? "sum" : "both", names[i]);
}

#endif
