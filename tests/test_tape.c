/*
 * test_tape.c - the autograd tape: gradients of small expressions against hand-derived
 * values, fan-out summation, accumulation over two backward passes, zero-grad (both modes),
 * no-grad, refusal of a second backward, memory returning to its level, long chains, and a
 * small residual network (conv-bn-relu-conv-bn, skip add, relu, pool, linear, cross-entropy)
 * whose parameter gradients match central finite differences.
 */
#include "harness.h"

#include "../lib/core/internal.h" /* a backend table that watches LayerNorm's backward */

static dlt_ctx *g_ctx;

static dlt_tensor *leaf(const float *v, int64_t n) {
    int64_t shape[1] = {n};
    dlt_tensor *t = th_tensor_f32(g_ctx, v, shape, 1);
    if (dlt_tensor_set_requires_grad(t, 1) != DLT_OK) exit(1);
    return t;
}

static void read_grad(const dlt_tensor *p, float *out, int64_t n) {
    const dlt_tensor *g = dlt_tensor_grad(p);
    if (!g) {
        for (int64_t i = 0; i < n; i++) out[i] = NAN;
        return;
    }
    float *v = th_read_f32(g);
    memcpy(out, v, (size_t)n * sizeof(float));
    free(v);
}

/* loss = sum(relu(x) * 3) + mean(x): d/dx = 3*(x>0) + 1/n */
static void test_simple_chain(void) {
    const float xv[5] = {-2.0f, -0.5f, 0.25f, 1.0f, 3.0f};
    dlt_tensor *x = leaf(xv, 5), *r = NULL, *m = NULL, *s = NULL, *mean = NULL, *loss = NULL;
    CHECK_OK(dlt_relu(x, &r));
    CHECK_OK(dlt_mul_scalar(r, NULL, 3.0, &m));
    CHECK_OK(dlt_sum(m, &s));
    CHECK_OK(dlt_mean(x, &mean));
    CHECK_OK(dlt_add(s, mean, &loss));
    double lv;
    CHECK_OK(dlt_tensor_item(loss, &lv));
    CHECK_NEAR(lv, 3 * (0.25 + 1 + 3) + (-2 - 0.5 + 0.25 + 1 + 3) / 5.0, 1e-5);
    CHECK_OK(dlt_backward(loss, NULL));
    float g[5];
    read_grad(x, g, 5);
    for (int i = 0; i < 5; i++) CHECK_NEAR(g[i], (xv[i] > 0 ? 3.0 : 0.0) + 0.2, 1e-6);
    dlt_tensor_release(r);
    dlt_tensor_release(m);
    dlt_tensor_release(s);
    dlt_tensor_release(mean);
    dlt_tensor_release(loss);
    dlt_tensor_release(x);
}

/* y = x + x uses x twice: the tape sums both contributions (d/dx sum(y) = 2). A tensor that
 * feeds two ops through an intermediate also sums: z = relu(x); loss = sum(z + z*5) -> 6. */
static void test_fan_out(void) {
    const float xv[3] = {1.0f, -1.0f, 2.0f};
    dlt_tensor *x = leaf(xv, 3), *y = NULL, *s = NULL;
    CHECK_OK(dlt_add(x, x, &y));
    CHECK_OK(dlt_sum(y, &s));
    CHECK_OK(dlt_backward(s, NULL));
    float g[3];
    read_grad(x, g, 3);
    for (int i = 0; i < 3; i++) CHECK_NEAR(g[i], 2.0, 0);
    dlt_tensor_release(y);
    dlt_tensor_release(s);
    CHECK_OK(dlt_zero_grad(&x, 1, 1));
    dlt_tensor *z = NULL, *z5 = NULL, *w = NULL;
    CHECK_OK(dlt_relu(x, &z));
    CHECK_OK(dlt_mul_scalar(z, NULL, 5.0, &z5));
    CHECK_OK(dlt_add(z, z5, &w));
    CHECK_OK(dlt_sum(w, &s));
    CHECK_OK(dlt_backward(s, NULL));
    read_grad(x, g, 3);
    CHECK(g[0] == 6.0f && g[1] == 0.0f && g[2] == 6.0f, "%g %g %g", g[0], g[1], g[2]);
    dlt_tensor_release(z);
    dlt_tensor_release(z5);
    dlt_tensor_release(w);
    dlt_tensor_release(s);
    dlt_tensor_release(x);
}

static dlt_tensor *quad_loss(dlt_tensor *x) { /* sum(x * 2) */
    dlt_tensor *m = NULL, *s = NULL;
    if (dlt_mul_scalar(x, NULL, 2.0, &m) != DLT_OK || dlt_sum(m, &s) != DLT_OK) exit(1);
    dlt_tensor_release(m);
    return s;
}

static void test_accumulate_and_zero_grad(void) {
    const float xv[4] = {1, 2, 3, 4};
    dlt_tensor *x = leaf(xv, 4);
    float g[4];
    CHECK(dlt_tensor_grad(x) == NULL, "no gradient before backward");
    for (int pass = 1; pass <= 2; pass++) {
        dlt_tensor *l = quad_loss(x);
        CHECK_OK(dlt_backward(l, NULL));
        dlt_tensor_release(l);
        read_grad(x, g, 4);
        for (int i = 0; i < 4; i++) CHECK(g[i] == 2.0f * pass, "pass %d: %g", pass, g[i]);
    }
    /* set_to_none: absent, and the next backward overwrites instead of adding */
    CHECK_OK(dlt_zero_grad(&x, 1, 1));
    CHECK(dlt_tensor_grad(x) == NULL);
    dlt_tensor *l = quad_loss(x);
    CHECK_OK(dlt_backward(l, NULL));
    dlt_tensor_release(l);
    read_grad(x, g, 4);
    CHECK(g[0] == 2.0f, "overwritten, not accumulated: %g", g[0]);
    /* set_to_none = 0: zeros, still defined */
    CHECK_OK(dlt_zero_grad(&x, 1, 0));
    REQUIRE(dlt_tensor_grad(x) != NULL);
    read_grad(x, g, 4);
    CHECK(g[0] == 0.0f && g[3] == 0.0f);
    CHECK_STATUS(dlt_zero_grad(NULL, 1, 1), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_zero_grad(&x, -1, 1), DLT_ERR_INVALID_ARGUMENT);
    dlt_tensor_release(x);
}

/* zero_grad(set_to_none) lets the buffer go (PyTorch's grad = None): its memory returns,
 * the next backward makes a new one; a gradient the caller retained stays theirs, valid and
 * no longer written. set_to_none = 0 zeroes the same buffer. */
static void test_set_to_none_releases(void) {
    enum { N = 1000 };
    float xv[N], g[N];
    for (int i = 0; i < N; i++) xv[i] = (float)i;
    dlt_tensor *x = leaf(xv, N);
    dlt_ctx *ctx = dlt_tensor_ctx(x);
    dlt_tensor *l = quad_loss(x);
    CHECK_OK(dlt_backward(l, NULL));
    dlt_tensor_release(l);
    REQUIRE(dlt_tensor_grad(x) != NULL);
    uint64_t with = 0, without = 0;
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOCATED, &with));
    CHECK_OK(dlt_zero_grad(&x, 1, 1));
    CHECK(dlt_tensor_grad(x) == NULL);
    CHECK_OK(dlt_memory_stat(ctx, DLT_MEM_ALLOCATED, &without));
    CHECK(with - without >= N * sizeof(float), "released %llu bytes, the gradient has %zu",
          (unsigned long long)(with - without), N * sizeof(float));
    /* a retained gradient: the caller's tensor keeps its values; the leaf gets a new one */
    l = quad_loss(x);
    CHECK_OK(dlt_backward(l, NULL));
    dlt_tensor_release(l);
    dlt_tensor *kept = dlt_tensor_retain(dlt_tensor_grad(x));
    CHECK_OK(dlt_zero_grad(&x, 1, 1));
    CHECK(dlt_tensor_grad(x) == NULL);
    dlt_tensor *s = NULL;
    CHECK_OK(dlt_sum(x, &s)); /* d/dx = 1 */
    CHECK_OK(dlt_backward(s, NULL));
    dlt_tensor_release(s);
    CHECK(dlt_tensor_grad(x) != NULL && dlt_tensor_grad(x) != kept, "a new buffer");
    read_grad(x, g, N);
    CHECK(g[0] == 1.0f && g[N - 1] == 1.0f, "new gradient %g %g", g[0], g[N - 1]);
    float *kv = th_read_f32(kept);
    REQUIRE(kv != NULL);
    CHECK(kv[0] == 2.0f && kv[N - 1] == 2.0f, "the retained gradient changed: %g %g", kv[0], kv[N - 1]);
    free(kv);
    dlt_tensor_release(kept);
    /* set_to_none = 0 zeroes in place: the same buffer */
    const dlt_tensor *before = dlt_tensor_grad(x);
    CHECK_OK(dlt_zero_grad(&x, 1, 0));
    CHECK(dlt_tensor_grad(x) == before, "zeroed in place");
    dlt_tensor_release(x);
}

static void test_no_grad(void) {
    const float xv[2] = {1, 2};
    dlt_tensor *x = leaf(xv, 2), *y = NULL;
    int64_t live0 = 0, live1 = 0;
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live0));
    int32_t prev = -1;
    CHECK_OK(dlt_grad_set_enabled(g_ctx, 0, &prev));
    CHECK(prev == 1 && dlt_grad_is_enabled(g_ctx) == 0);
    CHECK_OK(dlt_relu(x, &y));
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live1));
    CHECK(live1 == live0, "no-grad records nothing (%lld -> %lld)", (long long)live0, (long long)live1);
    CHECK_STATUS(dlt_backward(y, NULL), DLT_ERR_SHAPE); /* 2 elements, no grad given */
    dlt_tensor *s = NULL;
    CHECK_OK(dlt_sum(y, &s));
    CHECK_STATUS(dlt_backward(s, NULL), DLT_ERR_INVALID_STATE);
    CHECK(strstr(dlt_last_error(), "recorded") != NULL, "%s", dlt_last_error());
    CHECK_OK(dlt_grad_set_enabled(g_ctx, prev, NULL));
    dlt_tensor_release(s);
    dlt_tensor_release(y);
    dlt_tensor_release(x);
}

static void test_backward_twice_refused(void) {
    const float xv[2] = {1, -1};
    dlt_tensor *x = leaf(xv, 2);
    dlt_tensor *l = quad_loss(x);
    CHECK_OK(dlt_backward(l, NULL));
    CHECK_STATUS(dlt_backward(l, NULL), DLT_ERR_INVALID_STATE);
    CHECK(strstr(dlt_last_error(), "already") != NULL, "%s", dlt_last_error());
    float g[2];
    read_grad(x, g, 2);
    CHECK(g[0] == 2.0f, "the refused call changed nothing: %g", g[0]);
    dlt_tensor_release(l);
    dlt_tensor_release(x);
}

static void test_explicit_grad_and_shape_errors(void) {
    const float xv[3] = {1, 2, -3};
    const float gv[3] = {0.5f, -1.0f, 2.0f};
    dlt_tensor *x = leaf(xv, 3), *y = NULL;
    CHECK_OK(dlt_mul_scalar(x, NULL, -4.0, &y));
    int64_t s3[1] = {3}, s2[1] = {2};
    dlt_tensor *g = th_tensor_f32(g_ctx, gv, s3, 1), *bad = th_tensor_f32(g_ctx, gv, s2, 1);
    CHECK_STATUS(dlt_backward(y, bad), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_backward(NULL, g), DLT_ERR_NULL_POINTER);
    CHECK_OK(dlt_backward(y, g));
    float gr[3];
    read_grad(x, gr, 3);
    for (int i = 0; i < 3; i++) CHECK(gr[i] == -4.0f * gv[i]);
    dlt_tensor_release(g);
    dlt_tensor_release(bad);
    dlt_tensor_release(y);
    dlt_tensor_release(x);
}

/* After backward and releasing the results, memory and the tape are back where they were. */
static void test_memory_returns(void) {
    uint64_t m0, m1, mid;
    int64_t live0, live1;
    float v[1000];
    for (int i = 0; i < 1000; i++) v[i] = (float)(i % 7) - 3.0f;
    dlt_tensor *x = leaf(v, 1000);
    /* first backward allocates the gradient buffer, which stays with the leaf */
    dlt_tensor *l = quad_loss(x);
    CHECK_OK(dlt_backward(l, NULL));
    dlt_tensor_release(l);
    CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &m0));
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live0));
    dlt_tensor *a = NULL, *b = NULL, *c = NULL, *s = NULL;
    CHECK_OK(dlt_relu(x, &a));
    CHECK_OK(dlt_mul_scalar(a, NULL, 2.0, &b));
    CHECK_OK(dlt_add(a, b, &c));
    dlt_tensor_release(a); /* the tape keeps what backward needs */
    dlt_tensor_release(b);
    CHECK_OK(dlt_sum(c, &s));
    dlt_tensor_release(c);
    CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &mid));
    CHECK(mid > m0, "the forward holds memory");
    CHECK_OK(dlt_backward(s, NULL));
    dlt_tensor_release(s);
    CHECK_OK(dlt_memory_stat(g_ctx, DLT_MEM_ALLOCATED, &m1));
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live1));
    CHECK(m1 == m0, "allocated %llu after vs %llu before", (unsigned long long)m1, (unsigned long long)m0);
    CHECK(live1 == live0, "live nodes %lld vs %lld", (long long)live1, (long long)live0);
    /* a forward that is never backwarded is freed with its results */
    CHECK_OK(dlt_relu(x, &a));
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live1));
    CHECK(live1 == live0 + 1);
    dlt_tensor_release(a);
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live1));
    CHECK(live1 == live0);
    dlt_tensor_release(x);
}

/* A chain far longer than any recursion limit is recorded, differentiated and freed. */
static void test_long_chain(void) {
    const float xv[1] = {1.0f};
    dlt_tensor *x = leaf(xv, 1), *cur = dlt_tensor_retain(x);
    const int n = 20000;
    for (int i = 0; i < n; i++) {
        dlt_tensor *nx = NULL;
        CHECK_OK(dlt_mul_scalar(cur, NULL, (i % 2) ? 0.5 : 2.0, &nx));
        dlt_tensor_release(cur);
        cur = nx;
    }
    int64_t live = 0;
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live));
    CHECK(live >= n);
    CHECK_OK(dlt_backward(cur, NULL));
    float g;
    read_grad(x, &g, 1);
    CHECK(g == 1.0f, "%g", g);
    dlt_tensor_release(cur);
    CHECK_OK(dlt_tape_live_nodes(g_ctx, &live));
    CHECK(live == 0, "%lld nodes alive", (long long)live);
    dlt_tensor_release(x);
}

static void test_tape_clear_and_detach(void) {
    const float xv[2] = {1, 2};
    dlt_tensor *x = leaf(xv, 2), *l = quad_loss(x), *d = NULL, *l2 = NULL;
    CHECK_OK(dlt_tape_clear(g_ctx));
    CHECK_STATUS(dlt_backward(l, NULL), DLT_ERR_INVALID_STATE);
    CHECK_OK(dlt_tensor_detach(x, &d));
    CHECK(dlt_tensor_requires_grad(d) == 0);
    l2 = quad_loss(d);
    CHECK_STATUS(dlt_backward(l2, NULL), DLT_ERR_INVALID_STATE);
    dlt_tensor_release(l);
    dlt_tensor_release(l2);
    dlt_tensor_release(d);
    dlt_tensor_release(x);
}

/* Gradients through casts come back in the leaf's dtype (fp32), through reshape views in
 * the leaf's shape. */
static void test_cast_and_reshape_grads(void) {
    float v[6] = {0.5f, -1.5f, 2.0f, 3.0f, -0.25f, 1.0f};
    dlt_tensor *x = leaf(v, 6), *h = NULL, *r = NULL, *f = NULL, *s = NULL;
    CHECK_OK(dlt_cast(x, DLT_F16, &h));
    int64_t shape[2] = {2, -1};
    CHECK_OK(dlt_reshape(h, shape, 2, &r));
    CHECK(dlt_tensor_dim(r, 1) == 3);
    CHECK_OK(dlt_relu(r, &f));
    CHECK_OK(dlt_sum(f, &s));
    CHECK(dlt_tensor_dtype(s) == DLT_F16);
    CHECK_OK(dlt_backward(s, NULL));
    REQUIRE(dlt_tensor_grad(x) != NULL);
    CHECK(dlt_tensor_dtype(dlt_tensor_grad(x)) == DLT_F32 && dlt_tensor_numel(dlt_tensor_grad(x)) == 6);
    float g[6];
    read_grad(x, g, 6);
    for (int i = 0; i < 6; i++) CHECK(g[i] == (v[i] > 0 ? 1.0f : 0.0f));
    dlt_tensor_release(h);
    dlt_tensor_release(r);
    dlt_tensor_release(f);
    dlt_tensor_release(s);
    dlt_tensor_release(x);
}

static void test_leaf_rules(void) {
    const float xv[2] = {1, 2};
    dlt_tensor *x = leaf(xv, 2), *y = NULL;
    CHECK_OK(dlt_relu(x, &y));
    CHECK_STATUS(dlt_tensor_set_requires_grad(y, 1), DLT_ERR_INVALID_ARGUMENT);
    /* backward on a leaf itself seeds its gradient */
    dlt_tensor *one = NULL;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, NULL, 0, 0, &one));
    CHECK_OK(dlt_tensor_set_requires_grad(one, 1));
    CHECK_OK(dlt_backward(one, NULL));
    double v = 0;
    CHECK_OK(dlt_tensor_item(dlt_tensor_grad(one), &v));
    CHECK(v == 1.0);
    dlt_tensor_release(one);
    dlt_tensor_release(y);
    dlt_tensor_release(x);
}

/* A node output's gradient so far goes to the op as its slot's dst when no one else holds it
 * (non-leaf direct writes): LayerNorm adds its dx there, as the residual stream of a pre-LN
 * block needs. y = h + linear(ln(h)) with h = 2x: LN's dx must land in h's gradient inside
 * the LN backward (dx_acc = 1, no accumulate call for it), and x's gradient must equal the
 * one from y = h + linear(ln(h * 1)), where LN's input is another node and the tape adds. */
static const dlt_backend *g_plain_be;
static int64_t g_ln_acc, g_ln_calls, g_accumulates;
static dlt_status watch_ln_bwd(dlt_ctx *ctx, dlt_tensor *dx, int32_t dx_acc, dlt_tensor *dw, dlt_tensor *db,
                               int32_t beta_acc, const dlt_tensor *dy, const dlt_tensor *x, const dlt_tensor *mean,
                               const dlt_tensor *rstd, const dlt_tensor *w, int64_t M, int64_t N) {
    g_ln_calls++, g_ln_acc += dx_acc != 0;
    return g_plain_be->ln_bwd(ctx, dx, dx_acc, dw, db, beta_acc, dy, x, mean, rstd, w, M, N);
}
static dlt_status watch_accumulate(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src, int32_t beta) {
    g_accumulates++;
    return g_plain_be->accumulate(ctx, dst, src, beta);
}

static void residual_ln_grad(dlt_ctx *ctx, int indirect, float *gx) {
    const float xv[12] = {0.3f, -1.2f, 0.8f, 0.05f, 2.0f, -0.7f, 1.1f, 0.4f, -0.2f, 0.9f, -1.5f, 0.6f};
    float wv[16];
    for (int i = 0; i < 16; i++) wv[i] = 0.1f * (float)((i * 7) % 11) - 0.5f;
    const int64_t xs[2] = {3, 4}, ws[2] = {4, 4}, ns[1] = {4};
    dlt_tensor *x = th_tensor_f32(ctx, xv, xs, 2), *w = th_tensor_f32(ctx, wv, ws, 2);
    CHECK_OK(dlt_tensor_set_requires_grad(x, 1));
    dlt_tensor *h = NULL, *h1 = NULL, *n = NULL, *l = NULL, *y = NULL, *y2 = NULL, *loss = NULL;
    CHECK_OK(dlt_mul_scalar(x, NULL, 2.0, &h));
    if (indirect) CHECK_OK(dlt_mul_scalar(h, NULL, 1.0, &h1));
    CHECK_OK(dlt_layer_norm(indirect ? h1 : h, ns, 1, NULL, NULL, 1e-5, &n));
    CHECK_OK(dlt_linear(n, w, NULL, &l));
    CHECK_OK(dlt_add(h, l, &y));
    CHECK_OK(dlt_mul(y, y, &y2));
    CHECK_OK(dlt_sum(y2, &loss));
    dlt_tensor *tmp[6] = {h, h1, n, l, y, y2};
    for (int i = 0; i < 6; i++) dlt_tensor_release(tmp[i]);
    CHECK_OK(dlt_backward(loss, NULL));
    float *g = th_read_f32(dlt_tensor_grad(x));
    memcpy(gx, g, sizeof(float) * 12);
    free(g);
    dlt_tensor_release(loss);
    dlt_tensor_release(x);
    dlt_tensor_release(w);
}

static void test_layer_norm_adds_into_residual_grad(void) {
    dlt_ctx *ctx = th_cpu_ctx();
    static dlt_backend watch;
    g_plain_be = ctx->be;
    watch = *g_plain_be;
    watch.ln_bwd = watch_ln_bwd, watch.accumulate = watch_accumulate;
    ctx->be = &watch;
    float direct[12], through[12];
    g_ln_acc = g_ln_calls = g_accumulates = 0;
    residual_ln_grad(ctx, 0, direct);
    const int64_t acc_direct = g_accumulates;
    CHECK(g_ln_calls == 1 && g_ln_acc == 1, "LayerNorm backward %lld calls, %lld adding into h's gradient",
          (long long)g_ln_calls, (long long)g_ln_acc);
    g_ln_acc = g_ln_calls = g_accumulates = 0;
    residual_ln_grad(ctx, 1, through);
    CHECK(g_ln_calls == 1 && g_ln_acc == 0, "through h * 1: %lld calls, %lld adding", (long long)g_ln_calls,
          (long long)g_ln_acc);
    CHECK(acc_direct + 1 == g_accumulates, "accumulate calls: %lld direct, %lld through the tape",
          (long long)acc_direct, (long long)g_accumulates);
    CHECK(memcmp(direct, through, sizeof direct) == 0, "x's gradient differs: %.9g vs %.9g (first value)",
          direct[0], through[0]);
    double norm = 0;
    for (int i = 0; i < 12; i++) norm += fabs(direct[i]);
    CHECK(norm > 1.0, "a gradient of %g says nothing", norm);
    dlt_ctx_destroy(ctx);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    RUN(test_simple_chain);
    RUN(test_fan_out);
    RUN(test_accumulate_and_zero_grad);
    RUN(test_set_to_none_releases);
    RUN(test_no_grad);
    RUN(test_backward_twice_refused);
    RUN(test_explicit_grad_and_shape_errors);
    RUN(test_memory_returns);
    RUN(test_long_chain);
    RUN(test_tape_clear_and_detach);
    RUN(test_cast_and_reshape_grads);
    RUN(test_leaf_rules);
    RUN(test_layer_norm_adds_into_residual_grad);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
