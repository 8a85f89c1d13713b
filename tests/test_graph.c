/*
 * test_graph.c - whole-step graphs and the random-number generator, on the CPU.
 *
 * The CPU backend cannot capture, so this white-box test gives a CPU context a backend
 * table whose capture records the dropout and rng_advance launches (with the arguments the
 * library passed, as a CUDA graph keeps them) and whose replay runs them with the CPU
 * kernels, which read the device word rng_base when they run, as the CUDA kernels do. That
 * is lib/core/graph.c's contract with a capturing backend, checked without a GPU.
 *
 * The reference is the same step run eagerly on a plain CPU context with the same seed:
 * PyTorch's semantics for CUDA graphs and its generator are that a replay draws what the
 * eager step would draw at the generator's position, and eager calls between replays draw
 * fresh numbers, in call order.
 *
 * The same table counts the casts of a parameter's autocast copy, recorded or run, for the
 * contract between autocast, captures and dlt_graph_run (the copy refreshed before a replay
 * that needs it; tests/cuda_graph.c checks the values on a GPU).
 */
#include <string.h>

#include "../lib/core/internal.h" /* white-box: the backend table */
#include "../lib/core/graph_depth.h"
#include "harness.h"

enum { N = 1000, NX = 300, MAXREC = 16 };

/* ---- the recording backend ---- */
typedef struct {
    int kind; /* 0 dropout, 1 rng_advance */
    dlt_tensor *y;
    const dlt_tensor *x;
    double p;
    uint64_t seed, offset, delta;
} rec;

static const dlt_backend *g_cpu;
static dlt_backend g_fake;
static rec g_rec[MAXREC];
static int g_nrec, g_recording, g_corrections;

static dlt_status fake_dropout(dlt_ctx *ctx, dlt_tensor *y, const dlt_tensor *x, double p, uint64_t seed,
                               uint64_t offset) {
    if (!g_recording) return g_cpu->dropout(ctx, y, x, p, seed, offset);
    if (g_nrec == MAXREC) return DLT_ERR_INTERNAL;
    g_rec[g_nrec++] = (rec){0, y, x, p, seed, offset, 0};
    return DLT_OK;
}
static dlt_status fake_rng_advance(dlt_ctx *ctx, uint64_t delta) {
    if (!g_recording) {
        g_corrections++;
        return g_cpu->rng_advance(ctx, delta);
    }
    if (g_nrec == MAXREC) return DLT_ERR_INTERNAL;
    g_rec[g_nrec++] = (rec){1, NULL, NULL, 0, 0, 0, delta};
    return DLT_OK;
}
static dlt_status fake_capture_begin(dlt_ctx *ctx) {
    (void)ctx;
    g_recording = 1;
    g_nrec = 0;
    return DLT_OK;
}
static dlt_status fake_capture_end(dlt_ctx *ctx, int32_t ok, void **exec, int64_t *stats) {
    (void)ctx;
    g_recording = 0;
    *exec = ok ? (void *)g_rec : NULL;
    /* a chain of kernels, as one stream records them */
    stats[DLT_GRAPH_STAT_NODES] = stats[DLT_GRAPH_STAT_KERNELS] = stats[DLT_GRAPH_STAT_DEPTH] = ok ? g_nrec : 0;
    stats[DLT_GRAPH_STAT_EDGES] = ok && g_nrec > 0 ? g_nrec - 1 : 0;
    return ok ? DLT_OK : DLT_ERR_INVALID_STATE;
}
static dlt_status fake_graph_launch(dlt_ctx *ctx, void *exec) {
    const rec *r = exec;
    for (int i = 0; i < g_nrec; i++) {
        dlt_status st = r[i].kind == 0 ? g_cpu->dropout(ctx, r[i].y, r[i].x, r[i].p, r[i].seed, r[i].offset)
                                       : g_cpu->rng_advance(ctx, r[i].delta);
        if (st != DLT_OK) return st;
    }
    return DLT_OK;
}
static void fake_graph_free(dlt_ctx *ctx, void *exec) { (void)ctx, (void)exec; }

/* converts of one watched tensor: recorded by a capture, or run (eagerly, or by dlt_graph_run
 * before a launch) */
static const dlt_tensor *g_watch;
static int g_conv_captured, g_conv_run;
static dlt_status fake_convert(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src) {
    if (src == g_watch) {
        if (g_recording) g_conv_captured++;
        else g_conv_run++;
    }
    return g_recording ? DLT_OK : g_cpu->convert(ctx, dst, src);
}

static dlt_ctx *capturing_ctx(void) {
    dlt_ctx *ctx = NULL;
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx) != DLT_OK) return NULL;
    g_cpu = ctx->be;
    g_fake = *g_cpu;
    g_fake.dropout = fake_dropout;
    g_fake.rng_advance = fake_rng_advance;
    g_fake.capture_begin = fake_capture_begin;
    g_fake.capture_end = fake_capture_end;
    g_fake.graph_launch = fake_graph_launch;
    g_fake.graph_free = fake_graph_free;
    g_fake.convert = fake_convert;
    g_fake.capture_trace = NULL;
    ctx->be = &g_fake;
    g_corrections = 0;
    return ctx;
}

/* ---- the step: y = dropout(ones(N), 0.5), y kept for the caller ---- */
typedef struct {
    dlt_tensor *x, *y;
    int fill_inside; /* also a random fill inside the step (cannot be captured) */
} step_state;

static dlt_status step(void *user) {
    step_state *s = user;
    dlt_tensor_release(s->y);
    s->y = NULL;
    if (s->fill_inside) DLT_CHECK(dlt_tensor_rand_uniform(s->x, 1.0, 1.0));
    return dlt_dropout(s->x, 0.5, 1, &s->y);
}

static dlt_tensor *ones(dlt_ctx *ctx, int64_t n) {
    dlt_tensor *t = NULL;
    if (dlt_tensor_empty(ctx, DLT_F32, &n, 1, 0, &t) != DLT_OK || dlt_tensor_fill(t, 1.0) != DLT_OK) return NULL;
    return t;
}

static void read_mask(const dlt_tensor *y, float *out, int64_t n) {
    CHECK_OK(dlt_tensor_copy_to_host(y, out, (size_t)n * sizeof *out));
}

static void eager_extra(dlt_ctx *ctx, float *out) {
    dlt_tensor *x = ones(ctx, NX), *y = NULL;
    REQUIRE(x != NULL);
    CHECK_OK(dlt_dropout(x, 0.5, 1, &y));
    read_mask(y, out, NX);
    dlt_tensor_release(y);
    dlt_tensor_release(x);
}

static int kept(const float *m, int64_t n) {
    int k = 0;
    for (int64_t i = 0; i < n; i++) k += m[i] != 0.0f;
    return k;
}

/* eager: s1 s2 extra s3 s4 set(after s1) s2' ; graph: warm-up(s1) capture replay extra
 * replay replay set replay: every mask and the final generator state equal */
static void test_replays_and_eager_calls_share_one_counter(void) {
    static float ref[7][N], got[7][N];
    uint64_t ref_off[7], got_off[7], after_s1 = 0;
    dlt_ctx *a = NULL;
    REQUIRE(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &a) == DLT_OK);
    CHECK_OK(dlt_ctx_set_seed(a, 7));
    step_state sa = {ones(a, N), NULL, 0};
    REQUIRE(sa.x != NULL);
    for (int i = 0; i < 7; i++) {
        if (i == 2) {
            eager_extra(a, ref[i]);
        } else {
            if (i == 5) CHECK_OK(dlt_ctx_set_rng_state(a, 7, after_s1));
            if (i != 5) {
                CHECK_OK(step(&sa));
                read_mask(sa.y, ref[i], N);
            } else {
                memset(ref[i], 0, sizeof ref[i]);
            }
        }
        CHECK_OK(dlt_ctx_get_rng_state(a, NULL, &ref_off[i]));
        if (i == 0) after_s1 = ref_off[0];
    }
    /* i == 5 only restored the state; its step is i == 6 (= s2 again) */

    dlt_ctx *b = capturing_ctx();
    REQUIRE(b != NULL);
    CHECK_OK(dlt_ctx_set_seed(b, 7));
    step_state sb = {ones(b, N), NULL, 0};
    REQUIRE(sb.x != NULL);
    dlt_graph *g = NULL;
    CHECK_OK(dlt_graph_create(b, step, &sb, 1, &g)); /* the warm-up call is s1 */
    CHECK(dlt_graph_is_captured(g) == 1, "the recording backend captured the step");
    CHECK(dlt_graph_num_nodes(g) == 2, "%lld nodes: dropout and the generator's advance",
          (long long)dlt_graph_num_nodes(g));
    CHECK(dlt_graph_stat(g, DLT_GRAPH_STAT_KERNELS) == 2 && dlt_graph_stat(g, DLT_GRAPH_STAT_EDGES) == 1 &&
              dlt_graph_stat(g, DLT_GRAPH_STAT_DEPTH) == 2 && dlt_graph_stat(g, DLT_GRAPH_STAT_MEMSET) == 0,
          "the backend's counts pass through: kernels %lld, edges %lld, depth %lld",
          (long long)dlt_graph_stat(g, DLT_GRAPH_STAT_KERNELS), (long long)dlt_graph_stat(g, DLT_GRAPH_STAT_EDGES),
          (long long)dlt_graph_stat(g, DLT_GRAPH_STAT_DEPTH));
    CHECK(dlt_graph_stat(g, -1) == -1 && dlt_graph_stat(g, DLT_GRAPH_STAT_COUNT) == -1 &&
              dlt_graph_stat(NULL, DLT_GRAPH_STAT_NODES) == 0,
          "kinds out of range give -1, a NULL graph 0");
    read_mask(sb.y, got[0], N); /* warm-up's y was released by the captured call: read it below */
    CHECK_OK(dlt_ctx_get_rng_state(b, NULL, &got_off[0]));
    CHECK(got_off[0] == ref_off[0], "the capture draws nothing: offset %llu after it, %llu after one step",
          (unsigned long long)got_off[0], (unsigned long long)ref_off[0]);
    for (int i = 1; i < 7; i++) {
        if (i == 2) {
            eager_extra(b, got[i]);
        } else if (i == 5) {
            CHECK_OK(dlt_ctx_set_rng_state(b, 7, after_s1));
            memset(got[i], 0, sizeof got[i]);
        } else {
            CHECK_OK(dlt_graph_run(g));
            read_mask(sb.y, got[i], N);
        }
        CHECK_OK(dlt_ctx_get_rng_state(b, NULL, &got_off[i]));
    }
    /* got[0] is the capture's untouched output buffer, not s1: compare s2 onwards */
    static const char *what[7] = {"", "first replay = s2", "eager call after it", "replay after the eager call = s3",
                                  "back-to-back replay = s4", "", "replay after set_rng_state = s2"};
    for (int i = 1; i < 7; i++) {
        const int64_t n = i == 2 ? NX : N;
        if (i != 5) CHECK(memcmp(ref[i], got[i], (size_t)n * sizeof(float)) == 0, "%s: masks differ", what[i]);
        CHECK(ref_off[i] == got_off[i], "%s: generator offset %llu, eager %llu", i == 5 ? "set_rng_state" : what[i],
              (unsigned long long)got_off[i], (unsigned long long)ref_off[i]);
    }
    CHECK(memcmp(ref[6], ref[1], sizeof ref[1]) == 0, "the eager reference repeats s2 after the restore");
    CHECK(memcmp(ref[1], ref[3], sizeof ref[1]) != 0, "s2 and s3 differ");
    CHECK(kept(ref[1], N) > 400 && kept(ref[1], N) < 600, "about half kept: %d of %d", kept(ref[1], N), N);
    /* the word was corrected before the replay after the eager call and after the restore;
     * back-to-back replays found it where the graph's last node left it */
    CHECK(g_corrections == 2, "%d word corrections, want 2", g_corrections);
    dlt_graph_destroy(g);
    dlt_tensor_release(sb.x), dlt_tensor_release(sb.y);
    dlt_ctx_destroy(b);
    dlt_tensor_release(sa.x), dlt_tensor_release(sa.y);
    dlt_ctx_destroy(a);
}

/* A random fill takes its offset as is: captured, every replay would repeat its numbers.
 * The capture is refused with a reason and the graph runs the step eagerly. */
static void test_random_fill_is_not_captured(void) {
    dlt_ctx *b = capturing_ctx();
    REQUIRE(b != NULL);
    step_state s = {ones(b, N), NULL, 1};
    REQUIRE(s.x != NULL);
    dlt_graph *g = NULL;
    CHECK_OK(dlt_graph_create(b, step, &s, 1, &g));
    CHECK(dlt_graph_is_captured(g) == 0, "a step with a random fill fell back to eager");
    uint64_t o1 = 0, o2 = 0;
    CHECK_OK(dlt_ctx_get_rng_state(b, NULL, &o1));
    CHECK_OK(dlt_graph_run(g));
    CHECK_OK(dlt_ctx_get_rng_state(b, NULL, &o2));
    CHECK(o2 > o1, "the eager fallback draws: offset %llu -> %llu", (unsigned long long)o1, (unsigned long long)o2);
    dlt_graph_destroy(g);
    dlt_tensor_release(s.x), dlt_tensor_release(s.y);
    dlt_ctx_destroy(b);
}

/* dlt__graph_depth (lib/core/graph_depth.c, compiled into this test), what
 * DLT_GRAPH_STAT_DEPTH reports for a CUDA graph: the longest chain */
static void test_graph_depth(void) {
    int64_t d = -1;
    const int64_t chain_f[4] = {0, 1, 2, 3}, chain_t[4] = {1, 2, 3, 4};
    CHECK(dlt__graph_depth(5, 4, chain_f, chain_t, &d) == DLT_DEPTH_OK, "depth analysis failed");
    CHECK(d == 5, "a chain of 5: depth %lld", (long long)d);
    /* diamond 0 -> {1, 2} -> 3, and a branch 0 -> 4 */
    const int64_t dia_f[5] = {0, 0, 1, 2, 0}, dia_t[5] = {1, 2, 3, 3, 4};
    CHECK(dlt__graph_depth(5, 5, dia_f, dia_t, &d) == DLT_DEPTH_OK, "depth analysis failed");
    CHECK(d == 3, "diamond with a side branch: depth %lld", (long long)d);
    /* two independent chains (3 and 2 nodes), edges listed out of order */
    const int64_t two_f[3] = {3, 1, 0}, two_t[3] = {4, 2, 1};
    CHECK(dlt__graph_depth(5, 3, two_f, two_t, &d) == DLT_DEPTH_OK, "depth analysis failed");
    CHECK(d == 3, "two chains of 3 and 2: depth %lld", (long long)d);
    /* a long way round beats the short edge: 0->1->2->3 and 0->3 */
    const int64_t sk_f[4] = {0, 0, 1, 2}, sk_t[4] = {3, 1, 2, 3};
    CHECK(dlt__graph_depth(4, 4, sk_f, sk_t, &d) == DLT_DEPTH_OK, "depth analysis failed");
    CHECK(d == 4, "a shortcut edge does not shorten the chain: depth %lld", (long long)d);
    CHECK(dlt__graph_depth(4, 0, NULL, NULL, &d) == DLT_DEPTH_OK, "depth analysis failed");
    CHECK(d == 1, "4 independent nodes: depth %lld", (long long)d);
    CHECK(dlt__graph_depth(0, 0, NULL, NULL, &d) == DLT_DEPTH_OK, "depth analysis failed");
    CHECK(d == 0, "no nodes: depth %lld", (long long)d);
    const int64_t cyc_f[3] = {0, 1, 2}, cyc_t[3] = {1, 2, 0};
    CHECK(dlt__graph_depth(3, 3, cyc_f, cyc_t, &d) == DLT_DEPTH_CYCLE, "a cycle is reported");
    const int64_t bad_f[1] = {0}, bad_t[1] = {7};
    CHECK(dlt__graph_depth(3, 1, bad_f, bad_t, &d) == DLT_DEPTH_BAD_EDGE, "an edge to node 7 of 3 is reported");
}

/* ---- autocast's parameter copies in captures (lib/ops/autocast.c, graph.c lp_refresh) ----
 * A capture that finds the parameter's bf16 copy current records no cast; dlt_graph_run
 * converts the copy again before a replay when the host wrote the parameter since, and on
 * every replay once some graph writes the parameter (graph_written), which eager uses then
 * cast too. A capture that finds the copy stale records the cast and leaves it marked stale. */
enum { LR = 2, LI = 8, LO = 4 };
typedef struct {
    dlt_tensor *x, *w, *src;
} lin_state;

static dlt_status lin_step(void *user) {
    lin_state *s = user;
    dlt_tensor *y = NULL;
    DLT_CHECK(dlt_autocast_begin(dlt_tensor_ctx(s->w), DLT_BF16));
    dlt_status st = dlt_linear(s->x, s->w, NULL, &y);
    dlt_status st2 = dlt_autocast_end(dlt_tensor_ctx(s->w));
    dlt_tensor_release(y);
    return st != DLT_OK ? st : st2;
}

static dlt_status write_step(void *user) {
    lin_state *s = user;
    return dlt_tensor_copy(s->w, s->src);
}

/* the bf16 copy holds the parameter's values (exact for the halves used here); `want`, when
 * given, is what the parameter must hold */
static int copy_holds(const dlt_tensor *w, const float *want) {
    const dlt_tensor *c = w->lp_copy[1];
    if (!c) return 0;
    dlt_tensor *f = NULL;
    float got[LO * LI], cur[LO * LI];
    if (dlt_cast((dlt_tensor *)c, DLT_F32, &f) != DLT_OK) return 0;
    int ok = dlt_tensor_copy_to_host(f, got, sizeof got) == DLT_OK &&
             dlt_tensor_copy_to_host(w, cur, sizeof cur) == DLT_OK && !memcmp(got, cur, sizeof got);
    if (want) ok = ok && !memcmp(cur, want, sizeof cur);
    dlt_tensor_release(f);
    return ok;
}

static void test_capture_reads_current_autocast_copies(void) {
    dlt_ctx *ctx = capturing_ctx();
    REQUIRE(ctx != NULL);
    const int64_t xs[2] = {LR, LI}, ws[2] = {LO, LI};
    float x[LR * LI], w[LO * LI];
    for (int i = 0; i < LR * LI; i++) x[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < LO * LI; i++) w[i] = 0.5f * (float)(i % 7 - 3);
    lin_state s = {NULL, NULL, NULL};
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, 0, x, sizeof x, &s.x));
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, ws, 2, 0, w, sizeof w, &s.w));
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, ws, 2, 0, w, sizeof w, &s.src));
    CHECK_OK(dlt_tensor_set_requires_grad(s.w, 1));
    int32_t prev = 1;
    CHECK_OK(dlt_grad_set_enabled(ctx, 0, &prev));
    g_watch = s.w;
    g_conv_captured = g_conv_run = 0;
    dlt_graph *g = NULL, *writer = NULL, *g2 = NULL, *g3 = NULL;
    CHECK_OK(dlt_graph_create(ctx, lin_step, &s, 1, &g)); /* the warm-up makes the copy */
    REQUIRE(dlt_graph_is_captured(g) == 1);
    CHECK(g_conv_run == 1 && g_conv_captured == 0, "current copy: %d run, %d captured casts (want 1, 0)", g_conv_run,
          g_conv_captured);
    CHECK_OK(dlt_graph_run(g));
    CHECK(g_conv_run == 1, "a replay with the copy current converted (%d)", g_conv_run);
    /* a host write: the next replay refreshes the copy first, once */
    for (int i = 0; i < LO * LI; i++) w[i] = 0.5f * (float)(i % 5 - 1);
    CHECK_OK(dlt_tensor_copy_from_host(s.w, w, sizeof w));
    CHECK_OK(dlt_graph_run(g));
    CHECK(g_conv_run == 2 && copy_holds(s.w, w), "after a host write: %d converts, copy %s", g_conv_run,
          copy_holds(s.w, w) ? "current" : "stale");
    CHECK_OK(dlt_graph_run(g));
    CHECK(g_conv_run == 2, "the refreshed copy was converted again (%d)", g_conv_run);
    /* stale at capture: the cast is recorded, and the copy stays marked stale */
    CHECK_OK(dlt_tensor_copy_from_host(s.w, w, sizeof w));
    CHECK_OK(dlt_graph_create(ctx, lin_step, &s, 0, &g2));
    CHECK(g_conv_captured == 1, "stale copy: %d captured casts (want 1)", g_conv_captured);
    CHECK_OK(lin_step(&s));
    CHECK(g_conv_run == 3, "an eager use after a capture that cast: %d converts (want 3)", g_conv_run);
    /* a graph that writes the parameter (this table's replays do not redo the write, but
     * a real graph's would: the version cannot tell), so every replay of g refreshes */
    CHECK_OK(dlt_graph_create(ctx, write_step, &s, 0, &writer));
    CHECK(s.w->graph_written == 1, "a write inside a capture marks the parameter");
    CHECK_OK(dlt_graph_run(writer));
    CHECK_OK(dlt_graph_run(g));
    CHECK_OK(dlt_graph_run(g));
    CHECK(g_conv_run == 5 && copy_holds(s.w, NULL), "graph-written parameter: %d converts (want 5), copy %s",
          g_conv_run, copy_holds(s.w, NULL) ? "current" : "stale");
    CHECK_OK(lin_step(&s));
    CHECK(g_conv_run == 6, "eager use of a graph-written parameter: %d converts (want 6)", g_conv_run);
    CHECK_OK(dlt_graph_create(ctx, lin_step, &s, 0, &g3));
    CHECK(g_conv_captured == 2, "a capture reading a graph-written parameter records the cast (%d)", g_conv_captured);
    CHECK_OK(dlt_grad_set_enabled(ctx, prev, NULL));
    dlt_graph_destroy(g3), dlt_graph_destroy(writer), dlt_graph_destroy(g2), dlt_graph_destroy(g);
    g_watch = NULL;
    dlt_tensor_release(s.x), dlt_tensor_release(s.w), dlt_tensor_release(s.src);
    dlt_ctx_destroy(ctx);
}

int main(void) {
    RUN(test_graph_depth);
    RUN(test_replays_and_eager_calls_share_one_counter);
    RUN(test_random_fill_is_not_captured);
    RUN(test_capture_reads_current_autocast_copies);
    return th_done();
}
