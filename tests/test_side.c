/*
 * test_side.c - the backward's side stream (lib/core/side.c) on the CPU, through a backend
 * table whose side entries keep books instead of streams. Between a fork and the join that
 * covers it, the pointers the side's weight gradient read or wrote are "in flight": the main
 * stream's work must not free them, accumulate from or into them, or write the same
 * gradient (the fake kernels count each such touch as a violation). The gradients must
 * equal the plain CPU table's bit for bit, in fp32 (gradients written straight into the
 * leaves) and under bf16 autocast (queued for the fp32 accumulation, which then runs on the
 * side stream too), and with the weight reached through a format change or a ReLU (nodes
 * whose backward reads the side's gradient); DLT_SIDE_STREAM=0 and a table without the
 * entries run in line.
 */
#include "harness.h"

#include "../lib/core/internal.h"

static const dlt_backend *g_plain;
static struct {
    int on, pending;
    int64_t forks, joins, side_filters, side_flushes, violations;
    const void *ptrs[256]; /* used by side work since the last join */
    int n;
    char first[200];
} B;

static int side_uses(const void *p) {
    for (int i = 0; i < B.n; i++)
        if (B.ptrs[i] == p) return 1;
    return 0;
}
static void violation(const char *what) {
    if (!B.violations++) snprintf(B.first, sizeof B.first, "%s", what);
}

static dlt_status fake_fork(dlt_ctx *ctx, int32_t *forked) {
    (void)ctx;
    if (B.on) violation("fork while forked");
    B.on = 1, *forked = 1, B.forks++;
    return DLT_OK;
}
static dlt_status fake_unfork(dlt_ctx *ctx) {
    (void)ctx;
    B.on = 0, B.pending = 1;
    return DLT_OK;
}
static dlt_status fake_join(dlt_ctx *ctx) {
    (void)ctx;
    B.pending = 0, B.n = 0, B.joins++;
    return DLT_OK;
}
static dlt_status fake_bwd_filter(dlt_ctx *ctx, dlt_tensor *dw, const dlt_tensor *x, const dlt_tensor *dy,
                                  const dlt_conv_params *p, int32_t beta) {
    if (B.on) {
        if (B.n + 3 <= 256) B.ptrs[B.n++] = dlt__data(dw), B.ptrs[B.n++] = dlt__data(x), B.ptrs[B.n++] = dlt__data(dy);
        B.side_filters++;
    } else if (B.pending && side_uses(dlt__data(dw))) {
        violation("the main stream wrote a weight gradient the side stream is writing");
    }
    return g_plain->conv2d_bwd_filter(ctx, dw, x, dy, p, beta);
}
static dlt_status fake_bwd_data(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *w,
                                const dlt_conv_params *p, int32_t beta) {
    if (B.on) violation("a data gradient on the side stream");
    return g_plain->conv2d_bwd_data(ctx, dx, dy, w, p, beta);
}
static dlt_status fake_accumulate(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src, int32_t beta) {
    if (B.on) violation("an accumulation on the side stream");
    if (B.pending && (side_uses(dlt__data(dst)) || side_uses(dlt__data(src))))
        violation("an accumulation touched the side's gradient before the join");
    return g_plain->accumulate(ctx, dst, src, beta);
}
/* the queued fp32 accumulations: on the side stream after its weight gradients (in order
 * there), or on the main stream after a join */
static dlt_status fake_accumulate_multi(dlt_ctx *ctx, int32_t n, dlt_tensor *const *dsts,
                                        const dlt_tensor *const *srcs, const int32_t *betas) {
    for (int32_t i = 0; i < n; i++) {
        if (B.on && B.n + 2 <= 256) B.ptrs[B.n++] = dlt__data(dsts[i]), B.ptrs[B.n++] = dlt__data(srcs[i]);
        else if (!B.on && B.pending && (side_uses(dlt__data(dsts[i])) || side_uses(dlt__data(srcs[i]))))
            violation("the queued accumulations read the side's gradient before the join");
    }
    B.side_flushes += B.on;
    return g_plain->accumulate_multi(ctx, n, dsts, srcs, betas);
}
static void fake_free(dlt_ctx *ctx, void *ptr, size_t nbytes) {
    if (B.pending && side_uses(ptr)) violation("memory the side stream uses was freed before the join");
    g_plain->free(ctx, ptr, nbytes);
}

static dlt_status fake_convert(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src) {
    if (B.on) violation("a conversion on the side stream");
    if (B.pending && (side_uses(dlt__data(dst)) || side_uses(dlt__data(src))))
        violation("a conversion touched the side's gradient before the join");
    return g_plain->convert(ctx, dst, src);
}
static dlt_status fake_relu_bwd(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *y) {
    if (B.on) violation("a ReLU backward on the side stream");
    if (B.pending && (side_uses(dlt__data(dx)) || side_uses(dlt__data(dy))))
        violation("a ReLU backward read the side's gradient before the join");
    return g_plain->relu_bwd(ctx, dx, dy, y);
}

/* the gradients of params[0..n) one after another into grads (how many in *n_grads) */
static void read_grads(dlt_tensor *const *params, int n, float *grads, int64_t *n_grads) {
    int64_t k = 0;
    for (int i = 0; i < n; i++) {
        const dlt_tensor *g = dlt_tensor_grad(params[i]);
        REQUIRE(g, "parameter %d has no gradient", i);
        float *v = th_read_f32(g);
        memcpy(grads + k, v, (size_t)dlt_tensor_numel(g) * sizeof(float));
        k += dlt_tensor_numel(g);
        free(v);
    }
    *n_grads = k;
}

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffff) / 65536.0f - 0.5f;
}

/* loss = sum(conv(relu(conv(x, w2) + b), w2) * conv(relu(conv(x, w1)), w3)): w2 twice, once
 * where x needs no gradient (its weight gradient runs on the main stream, into the gradient
 * the side stream wrote for the other use) */
static double run_net(dlt_ctx *ctx, int bf16, float *grads, int64_t *n_grads) {
    uint64_t s = 7;
    float xv[2 * 3 * 6 * 6], w1v[4 * 3 * 3 * 3], w2v[3 * 3 * 3 * 3], w3v[3 * 4 * 1 * 1], bv[3];
    for (size_t i = 0; i < sizeof xv / 4; i++) xv[i] = frand(&s);
    for (size_t i = 0; i < sizeof w1v / 4; i++) w1v[i] = frand(&s);
    for (size_t i = 0; i < sizeof w2v / 4; i++) w2v[i] = frand(&s);
    for (size_t i = 0; i < sizeof w3v / 4; i++) w3v[i] = frand(&s);
    for (size_t i = 0; i < sizeof bv / 4; i++) bv[i] = frand(&s);
    const int64_t xs[4] = {2, 3, 6, 6}, w1s[4] = {4, 3, 3, 3}, w2s[4] = {3, 3, 3, 3}, w3s[4] = {3, 4, 1, 1},
                  bs[1] = {3};
    dlt_tensor *x = th_tensor_f32(ctx, xv, xs, 4), *w1 = th_tensor_f32(ctx, w1v, w1s, 4),
               *w2 = th_tensor_f32(ctx, w2v, w2s, 4), *w3 = th_tensor_f32(ctx, w3v, w3s, 4),
               *b = th_tensor_f32(ctx, bv, bs, 1);
    dlt_tensor *params[4] = {w1, w2, w3, b};
    for (int i = 0; i < 4; i++) CHECK_OK(dlt_tensor_set_requires_grad(params[i], 1));
    dlt_tensor *a = NULL, *ar = NULL, *c = NULL, *d = NULL, *dr = NULL, *e = NULL, *p = NULL, *loss = NULL;
    if (bf16) CHECK_OK(dlt_autocast_begin(ctx, DLT_BF16));
    CHECK_OK(dlt_conv2d(x, w2, b, 1, 1, 1, 1, 1, 1, 1, &a));
    CHECK_OK(dlt_relu(a, &ar));
    CHECK_OK(dlt_conv2d(ar, w2, NULL, 1, 1, 1, 1, 1, 1, 1, &c));
    CHECK_OK(dlt_conv2d(x, w1, NULL, 1, 1, 1, 1, 1, 1, 1, &d));
    CHECK_OK(dlt_relu(d, &dr));
    CHECK_OK(dlt_conv2d(dr, w3, NULL, 1, 1, 0, 0, 1, 1, 1, &e));
    CHECK_OK(dlt_mul(c, e, &p));
    if (bf16) CHECK_OK(dlt_autocast_end(ctx));
    CHECK_OK(dlt_sum(p, &loss));
    dlt_tensor *tmp[7] = {a, ar, c, d, dr, e, p};
    for (int i = 0; i < 7; i++) dlt_tensor_release(tmp[i]);
    CHECK_OK(dlt_backward(loss, NULL));
    double l = 0;
    CHECK_OK(dlt_tensor_item(loss, &l));
    read_grads(params, 4, grads, n_grads);
    for (int i = 0; i < 4; i++) dlt_tensor_release(params[i]);
    dlt_tensor_release(loss);
    dlt_tensor_release(x);
    return l;
}

/* ctx with the bookkeeping table (sides = 1) or the plain one (0) */
static dlt_ctx *make_ctx(int sides, dlt_backend *table) {
    dlt_ctx *ctx = NULL;
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx) != DLT_OK) return NULL;
    if (sides) {
        g_plain = ctx->be;
        *table = *g_plain;
        table->side_fork = fake_fork, table->side_unfork = fake_unfork, table->side_join = fake_join;
        table->conv2d_bwd_filter = fake_bwd_filter, table->conv2d_bwd_data = fake_bwd_data;
        table->accumulate = fake_accumulate, table->accumulate_multi = fake_accumulate_multi;
        table->convert = fake_convert, table->relu_bwd = fake_relu_bwd;
        table->free = fake_free;
        ctx->be = table;
    }
    return ctx;
}

static void side_vs_plain(int bf16) {
    static float g0[512], g1[512], g2[512];
    static dlt_backend t1, t2;
    int64_t n0 = 0, n1 = 0, n2 = 0;
    dlt_ctx *c0 = make_ctx(0, NULL), *c1 = make_ctx(1, &t1);
    setenv("DLT_SIDE_STREAM", "0", 1); /* read when a context is created */
    dlt_ctx *c2 = make_ctx(1, &t2);
    unsetenv("DLT_SIDE_STREAM");
    REQUIRE(c0 && c1 && c2, "contexts: %s", dlt_last_error());
    memset(&B, 0, sizeof B);
    const double l0 = run_net(c0, bf16, g0, &n0);
    const double l1 = run_net(c1, bf16, g1, &n1);
    CHECK(B.violations == 0, "%lld violations, the first: %s", (long long)B.violations, B.first);
    /* two convolutions whose input needs a gradient: two weight gradients on the side; under
     * autocast the queued fp32 accumulations too */
    CHECK(B.side_filters == 2 && B.forks == 2 + B.side_flushes && (bf16 ? B.side_flushes >= 1 : !B.side_flushes) &&
              B.joins >= 1 && !B.on && !B.pending,
          "forks %lld, side weight gradients %lld, side flushes %lld, joins %lld, on %d, pending %d",
          (long long)B.forks, (long long)B.side_filters, (long long)B.side_flushes, (long long)B.joins, B.on,
          B.pending);
    CHECK(c1->tape.side.forks == B.forks && !c1->tape.side.outstanding && c1->tape.side.n_held == 0,
          "the tape's books: %lld forks, outstanding %d, %d held", (long long)c1->tape.side.forks,
          c1->tape.side.outstanding, c1->tape.side.n_held);
    memset(&B, 0, sizeof B);
    const double l2 = run_net(c2, bf16, g2, &n2);
    CHECK(B.forks == 0 && B.violations == 0, "DLT_SIDE_STREAM=0: %lld forks", (long long)B.forks);
    CHECK(n0 == n1 && n0 == n2 && n0 == 4 * 27 + 3 * 27 + 12 + 3, "gradient sizes %lld %lld %lld", (long long)n0,
          (long long)n1, (long long)n2);
    CHECK(l0 == l1 && l0 == l2, "loss %.9g / %.9g / %.9g", l0, l1, l2);
    CHECK(memcmp(g0, g1, (size_t)n0 * 4) == 0, "gradients with the side stream differ from the plain table's");
    CHECK(memcmp(g0, g2, (size_t)n0 * 4) == 0, "gradients with DLT_SIDE_STREAM=0 differ");
    /* the memory came back: nothing held past the backward */
    dlt_ctx_destroy(c0), dlt_ctx_destroy(c1), dlt_ctx_destroy(c2);
}

static void test_side_fp32_direct(void) { side_vs_plain(0); }
static void test_side_bf16_queued(void) { side_vs_plain(1); }

/* A weight the conv reaches through another node, whose backward reads the gradient the
 * side stream writes: conv(x_cl, w) with x channels-last and w a contiguous leaf (the
 * to_format node converts dw back: a cast node, which joins before its convert kernel), and
 * conv(x, relu(w)) once (the ReLU node's backward reads dw: run_node joins). */
static double run_indirect(dlt_ctx *ctx, int relu_weight, float *grads, int64_t *n_grads) {
    uint64_t s = 5;
    float xv[2 * 4 * 5 * 5], wv[4 * 4 * 3 * 3];
    for (size_t i = 0; i < sizeof xv / 4; i++) xv[i] = frand(&s);
    for (size_t i = 0; i < sizeof wv / 4; i++) wv[i] = frand(&s);
    const int64_t xs[4] = {2, 4, 5, 5}, ws[4] = {4, 4, 3, 3};
    dlt_tensor *x0 = th_tensor_f32(ctx, xv, xs, 4), *w = th_tensor_f32(ctx, wv, ws, 4), *x = NULL, *wu = NULL;
    CHECK_OK(dlt_tensor_set_requires_grad(w, 1));
    if (relu_weight) {
        x = dlt_tensor_retain(x0);
        CHECK_OK(dlt_relu(w, &wu));
    } else { /* a channels-last input of its own (dlt_tensor_to_format copies, unrecorded) */
        CHECK_OK(dlt_tensor_to_format(x0, DLT_FORMAT_CHANNELS_LAST, &x));
        wu = dlt_tensor_retain(w);
    }
    CHECK_OK(dlt_tensor_set_requires_grad(x, 1));
    dlt_tensor *a = NULL, *b = NULL, *loss = NULL;
    CHECK_OK(dlt_conv2d(x, wu, NULL, 1, 1, 1, 1, 1, 1, 1, &a));
    /* relu(w) used once: its node reads the side's dw itself (a second use would add into it
     * first, and that accumulation joins) */
    if (relu_weight) b = dlt_tensor_retain(a);
    else CHECK_OK(dlt_conv2d(a, wu, NULL, 1, 1, 1, 1, 1, 1, 1, &b));
    CHECK_OK(dlt_sum(b, &loss));
    CHECK_OK(dlt_backward(loss, NULL));
    double l = 0;
    CHECK_OK(dlt_tensor_item(loss, &l));
    dlt_tensor *params[2] = {x, w};
    read_grads(params, 2, grads, n_grads);
    dlt_tensor *all[7] = {x0, w, x, wu, a, b, loss};
    for (int i = 0; i < 7; i++) dlt_tensor_release(all[i]);
    return l;
}

static void indirect_vs_plain(int relu_weight) {
    static float g0[512], g1[512];
    static dlt_backend t1;
    int64_t n0 = 0, n1 = 0;
    dlt_ctx *c0 = make_ctx(0, NULL), *c1 = make_ctx(1, &t1);
    REQUIRE(c0 && c1, "contexts: %s", dlt_last_error());
    memset(&B, 0, sizeof B);
    const double l0 = run_indirect(c0, relu_weight, g0, &n0);
    const double l1 = run_indirect(c1, relu_weight, g1, &n1);
    CHECK(B.violations == 0, "%lld violations, the first: %s", (long long)B.violations, B.first);
    CHECK(B.side_filters == (relu_weight ? 1 : 2) && !B.on && !B.pending, "side weight gradients %lld",
          (long long)B.side_filters);
    CHECK(n0 == n1 && n0 == 2 * 4 * 25 + 144 && l0 == l1, "sizes %lld %lld, loss %.9g / %.9g", (long long)n0,
          (long long)n1, l0, l1);
    CHECK(memcmp(g0, g1, (size_t)n0 * 4) == 0, "gradients with the side stream differ from the plain table's");
    dlt_ctx_destroy(c0), dlt_ctx_destroy(c1);
}

static void test_side_weight_through_format_change(void) { indirect_vs_plain(0); }
static void test_side_weight_through_relu(void) { indirect_vs_plain(1); }

/* Outside a backward (a conv's backward run by hand has no tape to join it) nothing forks;
 * the CPU table has no side entries at all. */
static void test_side_needs_backward_and_entries(void) {
    static dlt_backend t;
    dlt_ctx *c = make_ctx(1, &t), *plain = make_ctx(0, NULL);
    REQUIRE(c && plain, "contexts: %s", dlt_last_error());
    int32_t on = 1;
    CHECK_OK(dlt__side_begin(c, 1, 1, &on));
    CHECK(on == 0, "forked outside a backward");
    plain->tape.in_backward = 1;
    on = 1;
    CHECK_OK(dlt__side_begin(plain, 1, 1, &on));
    CHECK(on == 0, "forked on a table without side entries");
    plain->tape.in_backward = 0;
    CHECK_OK(dlt__side_join(c)); /* nothing outstanding: a no-op */
    CHECK(c->tape.side.joins == 0, "an empty join counted");
    dlt_ctx_destroy(c), dlt_ctx_destroy(plain);
}

int main(void) {
    RUN(test_side_fp32_direct);
    RUN(test_side_bf16_queued);
    RUN(test_side_weight_through_format_change);
    RUN(test_side_weight_through_relu);
    RUN(test_side_needs_backward_and_entries);
    return th_done();
}
