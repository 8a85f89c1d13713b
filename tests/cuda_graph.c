/*
 * cuda_graph.c - whole training steps captured as CUDA graphs and replayed, against the
 * same steps run eagerly on the same context: an SGD step under fp16 autocast with the
 * GradScaler (forward, backward, unscale, step, update), with the step's memory in the
 * graph's arena and left to the driver (DLT_GRAPH_ARENA=0), the captured graph's node kinds
 * and chain (dlt_graph_stat); a replay with an inf in the input (skipped on the device); the
 * lr changed between replays; a tensor the step hands out outliving its graph; a capture that
 * fails giving its arena back; the nanoGPT-style step (AdamW groups, warm-up + cosine,
 * clip_grad_norm through the scaler, and with the clipping fused into the optimizer's
 * step); and autocast's parameter copies read by replays (no
 * cast recorded where the copy was current, refreshed after host writes and after another
 * graph's writes). Every case skips without a GPU.
 */
#include <math.h>
#include <stdint.h>

#include "harness.h"
#include "splitmix.h"

static float frand(void) { return (float)(2.0 * urand() - 1.0); }

/* ---- a whole training step captured as a CUDA graph ---- */

typedef struct net {
    dlt_ctx *ctx;
    dlt_tensor *x, *y, *w1, *b1, *w2, *b2;
    dlt_optimizer *opt;
    dlt_grad_scaler *sc;
} net;

enum { NB = 64, ND = 16, NH = 32, NK = 10 };

/* zero_grad, the fp16 autocast forward, the scaled backward: both steps below start so */
static dlt_status net_scaled_backward(net *n) {
    dlt_tensor *h = NULL, *a = NULL, *logits = NULL, *loss = NULL, *scaled = NULL;
    dlt_status st = dlt_optimizer_zero_grad(n->opt, 1);
    if (st == DLT_OK) st = dlt_autocast_begin(n->ctx, DLT_F16);
    if (st == DLT_OK) {
        st = dlt_linear(n->x, n->w1, n->b1, &h);
        if (st == DLT_OK) st = dlt_relu(h, &a);
        if (st == DLT_OK) st = dlt_linear(a, n->w2, n->b2, &logits);
        if (st == DLT_OK) st = dlt_cross_entropy(logits, n->y, -100, DLT_REDUCTION_MEAN, &loss);
        dlt_status st2 = dlt_autocast_end(n->ctx);
        if (st == DLT_OK) st = st2;
    }
    if (st == DLT_OK) st = dlt_grad_scaler_scale(n->sc, loss, &scaled);
    if (st == DLT_OK) st = dlt_backward(scaled, NULL);
    dlt_tensor_release(h);
    dlt_tensor_release(a);
    dlt_tensor_release(logits);
    dlt_tensor_release(loss);
    dlt_tensor_release(scaled);
    return st;
}

static dlt_status net_step(void *user) {
    net *n = (net *)user;
    dlt_status st = net_scaled_backward(n);
    if (st == DLT_OK) st = dlt_grad_scaler_step(n->sc, n->opt);
    if (st == DLT_OK) st = dlt_grad_scaler_update(n->sc);
    return st;
}

static void net_make(net *n, dlt_ctx *ctx, const float *x, const int32_t *y, const float *w1,
                     const float *b1, const float *w2, const float *b2) {
    const int64_t xs[2] = {NB, ND}, ys[1] = {NB}, w1s[2] = {NH, ND}, b1s[1] = {NH}, w2s[2] = {NK, NH},
                  b2s[1] = {NK};
    n->ctx = ctx;
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, 0, x, NB * ND * sizeof(float), &n->x));
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_I32, ys, 1, 0, y, NB * sizeof(int32_t), &n->y));
    n->w1 = th_param_f32(ctx, w1s, 2, 0, w1);
    n->b1 = th_param_f32(ctx, b1s, 1, 0, b1);
    n->w2 = th_param_f32(ctx, w2s, 2, 0, w2);
    n->b2 = th_param_f32(ctx, b2s, 1, 0, b2);
    dlt_tensor *ps[4] = {n->w1, n->b1, n->w2, n->b2};
    CHECK_OK(dlt_sgd_create(ps, 4, 0.05, 0.9, 0, 1e-4, 0, 0, &n->opt));
    CHECK_OK(dlt_lr_schedule_warmup(n->opt, 3, 0.5));
    CHECK_OK(dlt_grad_scaler_create(ctx, 256.0, 2.0, 0.5, 3, 1, &n->sc));
}

/* Two identical nets from one random draw: g for the graph, e the eager reference. x (NB x
 * ND) is the caller's, which may change it later; the labels are (i * label_mul) % NK. */
static void net_pair_make(net *g, net *e, dlt_ctx *cu, float *x, int label_mul) {
    static float w1[NH * ND], b1[NH], w2[NK * NH], b2[NK];
    static int32_t y[NB];
    for (int i = 0; i < NB * ND; i++) x[i] = frand();
    for (int i = 0; i < NB; i++) y[i] = (int32_t)((i * label_mul) % NK);
    for (int i = 0; i < NH * ND; i++) w1[i] = frand() * 0.25f;
    for (int i = 0; i < NH; i++) b1[i] = frand() * 0.25f;
    for (int i = 0; i < NK * NH; i++) w2[i] = frand() * 0.18f;
    for (int i = 0; i < NK; i++) b2[i] = frand() * 0.18f;
    net_make(g, cu, x, y, w1, b1, w2, b2);
    net_make(e, cu, x, y, w1, b1, w2, b2);
}

static void net_free(net *n) {
    dlt_grad_scaler_destroy(n->sc);
    dlt_optimizer_destroy(n->opt);
    dlt_tensor_release(n->x);
    dlt_tensor_release(n->y);
    dlt_tensor_release(n->w1);
    dlt_tensor_release(n->b1);
    dlt_tensor_release(n->w2);
    dlt_tensor_release(n->b2);
}

static char g_logs[4096]; /* the library's log lines during the last graph_create_logged */
static void append_log(int32_t level, const char *msg, void *user) {
    (void)level;
    (void)user;
    const size_t n = strlen(g_logs);
    snprintf(g_logs + n, sizeof g_logs - n, "%s\n", msg);
}

/* dlt_graph_create with two warm-up calls, collecting the log lines in g_logs */
static dlt_status graph_create_logged(dlt_ctx *ctx, dlt_step_fn step, void *user, dlt_graph **out) {
    g_logs[0] = '\0';
    dlt_set_log_callback(append_log, NULL);
    const dlt_status st = dlt_graph_create(ctx, step, user, 2, out);
    dlt_set_log_callback(NULL, NULL);
    return st;
}

static void check_nets_equal(net *a, net *b, const char *when) {
    dlt_tensor *pa[4] = {a->w1, a->b1, a->w2, a->b2}, *pb[4] = {b->w1, b->b1, b->w2, b->b2};
    for (int i = 0; i < 4; i++) {
        float *x = th_read_f32(pa[i]), *y = th_read_f32(pb[i]);
        double e = th_rel_err_f(x, y, dlt_tensor_numel(pa[i]));
        CHECK(e <= 1e-6, "%s: parameter %d differs between graph and eager (rel err %.3g)", when, i, e);
        free(x);
        free(y);
    }
    double sa = 0, sb = 0, la = 0, lb = 0;
    int64_t ca = 0, cb = 0;
    CHECK_OK(dlt_grad_scaler_get_scale(a->sc, &sa));
    CHECK_OK(dlt_grad_scaler_get_scale(b->sc, &sb));
    CHECK_OK(dlt_optimizer_get_lr(a->opt, &la));
    CHECK_OK(dlt_optimizer_get_lr(b->opt, &lb));
    CHECK_OK(dlt_optimizer_step_count(a->opt, &ca));
    CHECK_OK(dlt_optimizer_step_count(b->opt, &cb));
    CHECK(sa == sb && la == lb && ca == cb, "%s: scale %g/%g lr %g/%g steps %lld/%lld", when, sa, sb, la,
          lb, (long long)ca, (long long)cb);
}

/* The whole-step test, with the step's memory in the graph's arena (the default) or left
 * to the driver (DLT_GRAPH_ARENA=0). */
static void capture_whole_step(int arena) {
    if (!arena) setenv("DLT_GRAPH_ARENA", "0", 1); /* read when the context is created */
    dlt_ctx *cu = th_cuda_ctx();
    unsetenv("DLT_GRAPH_ARENA");
    if (!cu) { /* th_cuda_ctx wrote the reason */
        th_case_skipped = 1;
        longjmp(th_jmp, 1);
    }
    static float x[NB * ND];
    net g, e;
    net_pair_make(&g, &e, cu, x, 7);
    dlt_graph *graph = NULL;
    CHECK_OK(graph_create_logged(cu, net_step, &g, &graph));
    REQUIRE(dlt_graph_is_captured(graph) == 1, "the step was not captured: %s", g_logs);
    {
        /* dlt_graph_stat: the kinds add up to the nodes; one stream's capture is one chain */
        int64_t v[DLT_GRAPH_STAT_COUNT], kinds = 0;
        for (int32_t k = 0; k < DLT_GRAPH_STAT_COUNT; k++) v[k] = dlt_graph_stat(graph, k);
        for (int32_t k = DLT_GRAPH_STAT_KERNELS; k <= DLT_GRAPH_STAT_OTHER; k++) kinds += v[k];
        printf("# captured step: %lld graph nodes (%lld kernels, %lld memset, %lld memcpy, %lld other), %lld edges, "
               "longest chain %lld\n",
               (long long)v[DLT_GRAPH_STAT_NODES], (long long)v[DLT_GRAPH_STAT_KERNELS],
               (long long)v[DLT_GRAPH_STAT_MEMSET], (long long)v[DLT_GRAPH_STAT_MEMCPY],
               (long long)v[DLT_GRAPH_STAT_OTHER], (long long)v[DLT_GRAPH_STAT_EDGES], (long long)v[DLT_GRAPH_STAT_DEPTH]);
        CHECK(v[DLT_GRAPH_STAT_NODES] == dlt_graph_num_nodes(graph) && v[DLT_GRAPH_STAT_NODES] > 0 &&
                  kinds == v[DLT_GRAPH_STAT_NODES] && v[DLT_GRAPH_STAT_KERNELS] > 0,
              "node kinds %lld of %lld nodes", (long long)kinds, (long long)v[DLT_GRAPH_STAT_NODES]);
        CHECK(v[DLT_GRAPH_STAT_DEPTH] == v[DLT_GRAPH_STAT_NODES] && v[DLT_GRAPH_STAT_EDGES] >= v[DLT_GRAPH_STAT_NODES] - 1,
              "a single-stream capture is one chain: depth %lld, edges %lld, nodes %lld",
              (long long)v[DLT_GRAPH_STAT_DEPTH], (long long)v[DLT_GRAPH_STAT_EDGES], (long long)v[DLT_GRAPH_STAT_NODES]);
    }
    for (int i = 0; i < 2; i++) CHECK_OK(net_step(&e)); /* the eager twin's warm-up */
    for (int r = 0; r < 5; r++) {
        CHECK_OK(dlt_graph_run(graph));
        CHECK_OK(net_step(&e));
    }
    CHECK_OK(dlt_ctx_synchronize(cu));
    check_nets_equal(&g, &e, "after 7 steps");
    int64_t count = 0;
    CHECK_OK(dlt_optimizer_step_count(g.opt, &count));
    CHECK(count == 7, "step count %lld", (long long)count);

    /* an inf in the (persistent) input: the replay skips the update on the device and backs
     * the scale off */
    float w1_before[NH * ND], w1_after[NH * ND];
    double scale_before = 0, scale_after = 0;
    CHECK_OK(dlt_grad_scaler_get_scale(g.sc, &scale_before));
    CHECK_OK(dlt_tensor_copy_to_host(g.w1, w1_before, sizeof w1_before));
    x[3] = INFINITY;
    CHECK_OK(dlt_tensor_copy_from_host(g.x, x, sizeof x));
    CHECK_OK(dlt_graph_run(graph));
    CHECK_OK(dlt_tensor_copy_to_host(g.w1, w1_after, sizeof w1_after));
    CHECK_OK(dlt_grad_scaler_get_scale(g.sc, &scale_after));
    int32_t applied = -1;
    CHECK_OK(dlt_optimizer_last_step_applied(g.opt, &applied));
    CHECK_OK(dlt_optimizer_step_count(g.opt, &count));
    CHECK(applied == 0 && count == 7, "applied %d count %lld", applied, (long long)count);
    CHECK(memcmp(w1_before, w1_after, sizeof w1_before) == 0, "a skipped replay moved the weights");
    CHECK(scale_after == scale_before * 0.5, "scale %g -> %g", scale_before, scale_after);
    x[3] = 0.5f;
    CHECK_OK(dlt_tensor_copy_from_host(g.x, x, sizeof x));

    /* the lr lives on the device: set between replays, no recapture */
    CHECK_OK(dlt_optimizer_set_lr(g.opt, 0.0));
    CHECK_OK(dlt_tensor_copy_to_host(g.w1, w1_before, sizeof w1_before));
    CHECK_OK(dlt_graph_run(graph));
    CHECK_OK(dlt_tensor_copy_to_host(g.w1, w1_after, sizeof w1_after));
    CHECK_OK(dlt_optimizer_last_step_applied(g.opt, &applied));
    CHECK(applied == 1, "the replay with lr 0 was skipped");
    CHECK(memcmp(w1_before, w1_after, sizeof w1_before) == 0, "lr 0 must leave the weights alone");
    CHECK_OK(dlt_optimizer_set_lr(g.opt, 0.05));
    CHECK_OK(dlt_graph_run(graph));
    CHECK_OK(dlt_tensor_copy_to_host(g.w1, w1_after, sizeof w1_after));
    CHECK(memcmp(w1_before, w1_after, sizeof w1_before) != 0, "lr 0.05 must move the weights");
    dlt_graph_destroy(graph);
    net_free(&g);
    net_free(&e);
    dlt_ctx_destroy(cu);
}

static void test_capture_whole_step(void) { capture_whole_step(1); }
static void test_capture_whole_step_driver_memory(void) { capture_whole_step(0); }

/* ---- the graph's arena: a tensor the captured step hands out ---- */

enum { KN = 4096 };

typedef struct kept_state {
    dlt_tensor *x;
    dlt_tensor *out[4]; /* one per call of the step: 2 warm-up, 1 captured */
    int calls;
} kept_state;

/* out = relu(x + x), through a temporary; the result is handed to the caller, who releases
 * it (a release inside the step would free the previous call's memory in the graph). */
static dlt_status kept_step(void *user) {
    kept_state *k = user;
    if (k->calls >= 4) return DLT_ERR_INVALID_STATE;
    dlt_tensor *sum = NULL;
    dlt_status st = dlt_add(k->x, k->x, &sum);
    if (st == DLT_OK) st = dlt_relu(sum, &k->out[k->calls++]);
    dlt_tensor_release(sum);
    return st;
}

static void check_kept(const kept_state *k, const float *x, const char *when) {
    float got[KN];
    CHECK_OK(dlt_tensor_copy_to_host(k->out[2], got, sizeof got));
    int bad = 0;
    for (int i = 0; i < KN; i++) bad += got[i] != (x[i] > 0 ? 2 * x[i] : 0.0f);
    CHECK(bad == 0, "%s: %d of %d values differ from relu(2x)", when, bad, KN);
}

static void test_graph_arena_output_outlives_graph(void) {
    CUDA_CTX_OR_SKIP(cu);
    static float x[KN];
    for (int i = 0; i < KN; i++) x[i] = frand();
    const int64_t shape[1] = {KN};
    kept_state k;
    memset(&k, 0, sizeof k);
    CHECK_OK(dlt_tensor_from_host(cu, DLT_F32, shape, 1, 0, x, sizeof x, &k.x));
    dlt_graph *graph = NULL;
    CHECK_OK(graph_create_logged(cu, kept_step, &k, &graph));
    REQUIRE(dlt_graph_is_captured(graph) == 1, "not captured: %s", g_logs);
    REQUIRE(k.calls == 3);
    /* sized by the last warm-up call: the temporary and the output, 16 KiB each */
    CHECK(strstr(g_logs, "graph memory: 0.0 MiB arena") && strstr(g_logs, ", 0 allocations outside it"),
          "log: %s", g_logs);
    /* each replay rewrites the captured call's output in place */
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < KN; i++) x[i] = frand();
        CHECK_OK(dlt_tensor_copy_from_host(k.x, x, sizeof x));
        CHECK_OK(dlt_graph_run(graph));
        check_kept(&k, x, r ? "second replay" : "first replay");
    }
    dlt_graph_destroy(graph);
    /* the arena stays while the output lives */
    check_kept(&k, x, "after the graph was destroyed");
    for (int i = 0; i < 2; i++) dlt_tensor_release(k.out[i]);
    CHECK_OK(dlt_ctx_synchronize(cu));
    uint64_t before = 0, after = 0;
    CHECK_OK(dlt_memory_stat(cu, DLT_MEM_ALLOCATED, &before));
    dlt_tensor_release(k.out[2]);
    CHECK_OK(dlt_ctx_synchronize(cu));
    CHECK_OK(dlt_memory_stat(cu, DLT_MEM_ALLOCATED, &after));
    CHECK(before - after >= 2 * sizeof x, "releasing the last block gave back %llu bytes, not the arena",
          (unsigned long long)(before - after));
    dlt_tensor_release(k.x);
    dlt_ctx_destroy(cu);
}

/* A step that reads a value back on the host cannot be captured: dlt_graph_create falls
 * back to eager calls with a warning, and the arena made for the capture is given back. */
typedef struct host_read_state {
    dlt_tensor *x;
    float got[KN];
} host_read_state;

static dlt_status host_read_step(void *user) {
    host_read_state *h = user;
    dlt_tensor *sum = NULL;
    dlt_status st = dlt_add(h->x, h->x, &sum);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(sum, h->got, sizeof h->got);
    dlt_tensor_release(sum);
    return st;
}

static void test_graph_capture_failure_gives_arena_back(void) {
    CUDA_CTX_OR_SKIP(cu);
    static float x[KN];
    for (int i = 0; i < KN; i++) x[i] = frand();
    const int64_t shape[1] = {KN};
    static host_read_state h;
    CHECK_OK(dlt_tensor_from_host(cu, DLT_F32, shape, 1, 0, x, sizeof x, &h.x));
    CHECK_OK(dlt_ctx_synchronize(cu));
    uint64_t before = 0, after = 0;
    CHECK_OK(dlt_memory_stat(cu, DLT_MEM_ALLOCATED, &before));
    dlt_graph *graph = NULL;
    CHECK_OK(graph_create_logged(cu, host_read_step, &h, &graph));
    CHECK(dlt_graph_is_captured(graph) == 0, "a host read was captured");
    CHECK(strstr(g_logs, "capture failed") != NULL, "log: %s", g_logs);
    /* eager from now on: each run computes and reads back */
    x[5] = 3.0f;
    CHECK_OK(dlt_tensor_copy_from_host(h.x, x, sizeof x));
    memset(h.got, 0, sizeof h.got);
    CHECK_OK(dlt_graph_run(graph));
    CHECK(h.got[5] == 6.0f && h.got[KN - 1] == 2 * x[KN - 1], "eager run: %g %g", h.got[5], h.got[KN - 1]);
    dlt_graph_destroy(graph);
    CHECK_OK(dlt_ctx_synchronize(cu));
    CHECK_OK(dlt_memory_stat(cu, DLT_MEM_ALLOCATED, &after));
    CHECK(after == before, "%llu bytes allocated before the graph, %llu after it", (unsigned long long)before,
          (unsigned long long)after);
    dlt_tensor_release(h.x);
    dlt_ctx_destroy(cu);
}

/* The nanoGPT-style step captured as a CUDA graph: zero_grad, fp16 autocast forward, scaled
 * backward, unscale, clip_grad_norm, AdamW (two groups, warm-up + cosine schedule) through
 * the scaler, update. Replays against the same steps run eagerly, then a replay with an inf
 * in the input: skipped on the device, nothing moves. */
static dlt_status net_step_clip(void *user) {
    net *n = (net *)user;
    dlt_tensor *total = NULL;
    dlt_tensor *ps[4] = {n->w1, n->b1, n->w2, n->b2};
    dlt_status st = net_scaled_backward(n);
    if (st == DLT_OK) st = dlt_grad_scaler_unscale(n->sc, n->opt);
    if (st == DLT_OK) st = dlt_clip_grad_norm(ps, 4, 0.5, 2.0, &total);
    if (st == DLT_OK) st = dlt_grad_scaler_step(n->sc, n->opt);
    if (st == DLT_OK) st = dlt_grad_scaler_update(n->sc);
    dlt_tensor_release(total);
    return st;
}

static void net_use_adamw(net *n) {
    dlt_optimizer_destroy(n->opt);
    dlt_tensor *w[2] = {n->w1, n->w2}, *b[2] = {n->b1, n->b2};
    dlt_adamw_options o;
    dlt_adamw_options_default(&o);
    o.lr = 3e-3;
    o.beta2 = 0.99;
    o.weight_decay = 0.1;
    CHECK_OK(dlt_adamw_create_ex(w, 2, &o, &n->opt));
    CHECK_OK(dlt_optimizer_add_param_group(n->opt, b, 2, 3e-3, 0.0));
    CHECK_OK(dlt_lr_schedule_warmup_cosine(n->opt, 3, 20, 3e-4));
}

static void test_capture_adamw_clip_step(void) {
    CUDA_CTX_OR_SKIP(cu);
    static float x[NB * ND];
    net g, e;
    net_pair_make(&g, &e, cu, x, 3);
    net_use_adamw(&g);
    net_use_adamw(&e);
    dlt_graph *graph = NULL;
    CHECK_OK(graph_create_logged(cu, net_step_clip, &g, &graph));
    REQUIRE(dlt_graph_is_captured(graph) == 1, "the step was not captured: %s", g_logs);
    for (int i = 0; i < 2; i++) CHECK_OK(net_step_clip(&e));
    for (int r = 0; r < 5; r++) {
        CHECK_OK(dlt_graph_run(graph));
        CHECK_OK(net_step_clip(&e));
    }
    CHECK_OK(dlt_ctx_synchronize(cu));
    check_nets_equal(&g, &e, "AdamW + clipping, after 7 steps");
    int64_t count = 0, pst = 0;
    CHECK_OK(dlt_optimizer_step_count(g.opt, &count));
    CHECK_OK(dlt_optimizer_param_step(g.opt, 0, &pst));
    CHECK(count == 7 && pst == 7, "step count %lld, param step %lld", (long long)count, (long long)pst);
    double l1g = 0, l1e = 0;
    CHECK_OK(dlt_optimizer_get_group_lr(g.opt, 1, &l1g));
    CHECK_OK(dlt_optimizer_get_group_lr(e.opt, 1, &l1e));
    CHECK(l1g == l1e, "group 1 lr %.9g (graph) vs %.9g (eager)", l1g, l1e);
    /* an inf in the input: the replay skips, parameters, moments and counts stay */
    float w1_before[NH * ND], w1_after[NH * ND], m_before[NH * ND], m_after[NH * ND];
    CHECK_OK(dlt_tensor_copy_to_host(g.w1, w1_before, sizeof w1_before));
    CHECK_OK(dlt_tensor_copy_to_host(dlt_optimizer_exp_avg(g.opt, 0), m_before, sizeof m_before));
    x[3] = INFINITY;
    CHECK_OK(dlt_tensor_copy_from_host(g.x, x, sizeof x));
    CHECK_OK(dlt_graph_run(graph));
    CHECK_OK(dlt_tensor_copy_to_host(g.w1, w1_after, sizeof w1_after));
    CHECK_OK(dlt_tensor_copy_to_host(dlt_optimizer_exp_avg(g.opt, 0), m_after, sizeof m_after));
    int32_t applied = -1;
    CHECK_OK(dlt_optimizer_last_step_applied(g.opt, &applied));
    CHECK_OK(dlt_optimizer_param_step(g.opt, 0, &pst));
    CHECK(applied == 0 && pst == 7, "applied %d param step %lld", applied, (long long)pst);
    CHECK(memcmp(w1_before, w1_after, sizeof w1_before) == 0, "a skipped replay moved the weights");
    CHECK(memcmp(m_before, m_after, sizeof m_before) == 0, "a skipped replay changed exp_avg");
    dlt_graph_destroy(graph);
    net_free(&g);
    net_free(&e);
    dlt_ctx_destroy(cu);
}

/* The same step with the clipping fused into the optimizer (dlt_optimizer_set_clip_grad_norm,
 * set before capturing): the captured step is the scaler's step alone (it unscales; the
 * optimizer's step takes the norm and folds the coefficient into AdamW, no scale kernel),
 * replayed against the eager unscale + clip_grad_norm + step. The optimizer's total, one
 * reference taken before capturing, follows the eager totals replay by replay; a replay
 * with an inf skips. max_norm is half the first step's norm, so the first step clips.
 * Written without a GPU: first run on the next GPU session. */
static double g_fused_max_norm;
static dlt_status g_fused_set_status; /* the last set in net_step_fused: refused in capture */

static dlt_status net_step_fused(void *user) {
    net *n = (net *)user;
    /* the same setting again: a no-op in the warm-ups, DLT_ERR_INVALID_STATE in the capture */
    g_fused_set_status = dlt_optimizer_set_clip_grad_norm(n->opt, g_fused_max_norm, 2.0);
    dlt_status st = net_scaled_backward(n);
    if (st == DLT_OK) st = dlt_grad_scaler_step(n->sc, n->opt);
    if (st == DLT_OK) st = dlt_grad_scaler_update(n->sc);
    return st;
}

/* the eager reference: unscale, clip at g_fused_max_norm, step; *total its clip total */
static dlt_status net_step_clip_eager(net *n, float *total) {
    dlt_tensor *t = NULL;
    dlt_tensor *ps[4] = {n->w1, n->b1, n->w2, n->b2};
    dlt_status st = net_scaled_backward(n);
    if (st == DLT_OK) st = dlt_grad_scaler_unscale(n->sc, n->opt);
    if (st == DLT_OK && g_fused_max_norm == 0) { /* the first step: max_norm = half its norm */
        dlt_tensor *t0 = NULL;
        float v = 0;
        st = dlt_grad_norm(ps, 4, 2.0, &t0);
        if (st == DLT_OK) st = dlt_tensor_copy_to_host(t0, &v, 4);
        dlt_tensor_release(t0);
        g_fused_max_norm = 0.5 * (double)v;
    }
    if (st == DLT_OK) st = dlt_clip_grad_norm(ps, 4, g_fused_max_norm, 2.0, &t);
    if (st == DLT_OK) st = dlt_grad_scaler_step(n->sc, n->opt);
    if (st == DLT_OK) st = dlt_grad_scaler_update(n->sc);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(t, total, 4);
    dlt_tensor_release(t);
    return st;
}

static void test_capture_fused_clip_step(void) {
    CUDA_CTX_OR_SKIP(cu);
    static float x[NB * ND];
    net g, e;
    net_pair_make(&g, &e, cu, x, 7);
    net_use_adamw(&g);
    net_use_adamw(&e);
    float te = 0, tg = 0;
    g_fused_max_norm = 0;
    CHECK_OK(net_step_clip_eager(&e, &te)); /* eager step 1 fixes max_norm */
    REQUIRE(g_fused_max_norm > 0, "the first norm is %g", te);
    CHECK_OK(dlt_optimizer_set_clip_grad_norm(g.opt, g_fused_max_norm, 2.0));
    dlt_tensor *total = NULL;
    CHECK_OK(dlt_optimizer_grad_norm(g.opt, &total));
    dlt_graph *graph = NULL;
    CHECK_OK(graph_create_logged(cu, net_step_fused, &g, &graph)); /* warm-ups: g's steps 1, 2 */
    REQUIRE(dlt_graph_is_captured(graph) == 1, "the step was not captured: %s", g_logs);
    CHECK(g_fused_set_status == DLT_ERR_INVALID_STATE, "dlt_optimizer_set_clip_grad_norm in a capture: %d",
          (int)g_fused_set_status);
    CHECK_OK(net_step_clip_eager(&e, &te));
    CHECK_OK(dlt_tensor_copy_to_host(total, &tg, 4));
    CHECK(fabsf(tg - te) <= 1e-5f * te, "after the warm-ups: total %.9g vs eager %.9g", tg, te);
    for (int r = 0; r < 5; r++) {
        CHECK_OK(dlt_graph_run(graph));
        CHECK_OK(net_step_clip_eager(&e, &te));
        CHECK_OK(dlt_tensor_copy_to_host(total, &tg, 4)); /* synchronises: the replay wrote it */
        CHECK(fabsf(tg - te) <= 1e-5f * te, "replay %d: total %.9g vs eager %.9g", r, tg, te);
    }
    CHECK_OK(dlt_ctx_synchronize(cu));
    check_nets_equal(&g, &e, "AdamW + fused clipping, after 7 steps");
    /* the optimizer's gradients are unclipped: their norm is the total the step took */
    dlt_tensor *ps[4] = {g.w1, g.b1, g.w2, g.b2}, *tn = NULL;
    float vn = 0;
    CHECK_OK(dlt_grad_norm(ps, 4, 2.0, &tn));
    CHECK_OK(dlt_tensor_copy_to_host(tn, &vn, 4));
    CHECK(vn == tg, "norm of the gradients after the step %.9g vs the step's total %.9g", vn, tg);
    dlt_tensor_release(tn);
    /* an inf in the input: the replay skips, the weights stay, the total is not finite */
    float w1_before[NH * ND], w1_after[NH * ND];
    CHECK_OK(dlt_tensor_copy_to_host(g.w1, w1_before, sizeof w1_before));
    x[3] = INFINITY;
    CHECK_OK(dlt_tensor_copy_from_host(g.x, x, sizeof x));
    CHECK_OK(dlt_graph_run(graph));
    CHECK_OK(dlt_tensor_copy_to_host(g.w1, w1_after, sizeof w1_after));
    CHECK_OK(dlt_tensor_copy_to_host(total, &tg, 4));
    int32_t applied = -1;
    CHECK_OK(dlt_optimizer_last_step_applied(g.opt, &applied));
    CHECK(applied == 0 && !isfinite(tg), "applied %d, total %g", applied, tg);
    CHECK(memcmp(w1_before, w1_after, sizeof w1_before) == 0, "a skipped replay moved the weights");
    dlt_tensor_release(total);
    dlt_graph_destroy(graph);
    net_free(&g);
    net_free(&e);
    dlt_ctx_destroy(cu);
}

/* A live graph keeps the buffers it captured. The embedding gradient sorts its indices in
 * the context's scratch buffer; a later eager call over many more indices replaces that
 * buffer with a larger one, and the old one must not go back to the pool while a graph
 * holds its address (each replay writes into it). Canary tensors allocated after the
 * growth must survive the replays, and the graph's gradients must stay exact. (Found on the
 * H200: gpt_train's evaluation graph, captured before the training step's warm-up grew the
 * buffers, turned training into NaN at its first replay.) */
typedef struct emb_state {
    dlt_tensor *w, *idx;
} emb_state;

static dlt_status emb_step(void *user) {
    emb_state *e = user;
    dlt_tensor *y = NULL, *loss = NULL;
    dlt_status st = dlt_embedding(e->w, e->idx, DLT_NO_PADDING_IDX, &y);
    if (st == DLT_OK) st = dlt_sum(y, &loss);
    if (st == DLT_OK) st = dlt_backward(loss, NULL);
    dlt_tensor_release(loss);
    dlt_tensor_release(y);
    return st;
}

enum { EV = 8, ED = 32, EN = 64, BIG_N = 200000, CANARIES = 256, CANARY_N = 1024 };

static void test_graph_keeps_buffers_replaced_after_capture(void) {
    CUDA_CTX_OR_SKIP(cu);
    const int64_t ws[2] = {EV, ED}, ns[1] = {EN}, bs[1] = {BIG_N}, cs[1] = {CANARY_N};
    int64_t idx[EN], count[EV] = {0};
    for (int i = 0; i < EN; i++) idx[i] = (i * 5 + 3) % EV, count[idx[i]]++;
    emb_state e = {NULL, NULL};
    CHECK_OK(dlt_tensor_zeros(cu, DLT_F32, ws, 2, 0, &e.w));
    CHECK_OK(dlt_tensor_set_requires_grad(e.w, 1));
    CHECK_OK(dlt_tensor_from_host(cu, DLT_I64, ns, 1, 0, idx, sizeof idx, &e.idx));
    dlt_graph *graph = NULL;
    CHECK_OK(graph_create_logged(cu, emb_step, &e, &graph)); /* two warm-up calls, then capture */
    REQUIRE(dlt_graph_is_captured(graph) == 1, "not captured: %s", g_logs);
    /* an eager gradient over BIG_N indices needs ~50x the scratch the graph captured */
    {
        int64_t *big = malloc(BIG_N * sizeof *big);
        REQUIRE(big);
        for (int i = 0; i < BIG_N; i++) big[i] = i % EV;
        emb_state b = {NULL, NULL};
        CHECK_OK(dlt_tensor_zeros(cu, DLT_F32, ws, 2, 0, &b.w));
        CHECK_OK(dlt_tensor_set_requires_grad(b.w, 1));
        CHECK_OK(dlt_tensor_from_host(cu, DLT_I64, bs, 1, 0, big, BIG_N * sizeof *big, &b.idx));
        CHECK_OK(emb_step(&b));
        dlt_tensor_release(b.w), dlt_tensor_release(b.idx);
        free(big);
    }
    /* canaries: small blocks the pool may carve from whatever was given back */
    dlt_tensor *canary[CANARIES];
    for (int i = 0; i < CANARIES; i++) {
        CHECK_OK(dlt_tensor_empty(cu, DLT_F32, cs, 1, 0, &canary[i]));
        CHECK_OK(dlt_tensor_fill(canary[i], 7.0));
    }
    const int replays = 3;
    for (int r = 0; r < replays; r++) CHECK_OK(dlt_graph_run(graph));
    int64_t bad_canaries = 0;
    static float got[CANARY_N];
    for (int i = 0; i < CANARIES; i++) {
        CHECK_OK(dlt_tensor_copy_to_host(canary[i], got, sizeof got));
        int bad = 0;
        for (int k = 0; k < CANARY_N; k++) bad += got[k] != 7.0f;
        bad_canaries += bad > 0;
        dlt_tensor_release(canary[i]);
    }
    CHECK(bad_canaries == 0, "%lld of %d tensors allocated after the buffers grew were overwritten by replays",
          (long long)bad_canaries, CANARIES);
    /* the two warm-up calls and each replay added the index counts into w's gradient */
    float g[EV * ED];
    CHECK_OK(dlt_tensor_copy_to_host(dlt_tensor_grad(e.w), g, sizeof g));
    int wrong = 0;
    for (int v = 0; v < EV; v++)
        for (int d = 0; d < ED; d++) wrong += g[v * ED + d] != (float)((2 + replays) * count[v]);
    CHECK(wrong == 0, "%d of %d gradient values differ from (2 warm-ups + %d replays) x the index counts", wrong,
          EV * ED, replays);
    dlt_graph_destroy(graph);
    dlt_tensor_release(e.w), dlt_tensor_release(e.idx);
    dlt_ctx_destroy(cu);
}

/* Under autocast a parameter's bf16 copy is cached until the parameter changes, and a
 * capture reads a current copy without casting; its replays cannot see later changes, so
 * the graph refreshes the copy first where the parameter moved. A forward-only graph
 * captured before the parameter changes (gpt_train's evaluation graph, captured before the
 * first optimizer step) must compute with the new values on replay. */
typedef struct cast_state {
    dlt_tensor *x, *w, *out;
} cast_state;

static dlt_status cast_step(void *user) {
    cast_state *c = user;
    dlt_tensor *y = NULL, *y32 = NULL;
    dlt_status st = dlt_autocast_begin(dlt_tensor_ctx(c->w), DLT_BF16);
    if (st != DLT_OK) return st;
    st = dlt_linear(c->x, c->w, NULL, &y);
    dlt_status st2 = dlt_autocast_end(dlt_tensor_ctx(c->w));
    if (st == DLT_OK) st = st2;
    if (st == DLT_OK) st = dlt_cast(y, DLT_F32, &y32);
    if (st == DLT_OK) st = dlt_tensor_copy(c->out, y32);
    dlt_tensor_release(y32);
    dlt_tensor_release(y);
    return st;
}

enum { CR = 16, CI = 32, CO = 8 };

/* out = x w^T computed exactly (the test's values are exact in bf16) */
static int cast_outputs_wrong(const float *x, const float *w, const float *out) {
    int wrong = 0;
    for (int r = 0; r < CR; r++)
        for (int o = 0; o < CO; o++) {
            double a = 0;
            for (int i = 0; i < CI; i++) a += (double)x[r * CI + i] * w[o * CI + i];
            wrong += out[r * CO + o] != (float)a;
        }
    return wrong;
}

/* x [CR, CI], the parameter w [CO, CI] (its bf16 cast is cached) and out [CR, CO] zeros */
static void cast_state_make(dlt_ctx *cu, const float *x, const float *w, cast_state *c) {
    const int64_t xs[2] = {CR, CI}, ws[2] = {CO, CI}, os[2] = {CR, CO};
    CHECK_OK(dlt_tensor_from_host(cu, DLT_F32, xs, 2, 0, x, CR * CI * sizeof(float), &c->x));
    CHECK_OK(dlt_tensor_from_host(cu, DLT_F32, ws, 2, 0, w, CO * CI * sizeof(float), &c->w));
    CHECK_OK(dlt_tensor_set_requires_grad(c->w, 1));
    CHECK_OK(dlt_tensor_zeros(cu, DLT_F32, os, 2, 0, &c->out));
}

static void test_graph_casts_parameters_on_every_replay(void) {
    CUDA_CTX_OR_SKIP(cu);
    static float x[CR * CI], w[CO * CI], out[CR * CO];
    /* small integers and halves: exact in bf16, sums exact in f32 */
    for (int i = 0; i < CR * CI; i++) x[i] = (float)((i * 7) % 5) - 2.0f;
    for (int i = 0; i < CO * CI; i++) w[i] = 0.5f * (float)((i * 3) % 7 - 3);
    cast_state c = {NULL, NULL, NULL};
    cast_state_make(cu, x, w, &c);
    int32_t prev = 1;
    CHECK_OK(dlt_grad_set_enabled(cu, 0, &prev)); /* evaluation: no tape */
    dlt_graph *graph = NULL;
    CHECK_OK(graph_create_logged(cu, cast_step, &c, &graph));
    REQUIRE(dlt_graph_is_captured(graph) == 1, "not captured: %s", g_logs);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < CO * CI; i++) w[i] = 0.5f * (float)((i * (5 + round) + round) % 9 - 4);
        CHECK_OK(dlt_tensor_copy_from_host(c.w, w, sizeof w)); /* the parameter changes */
        CHECK_OK(dlt_graph_run(graph));
        CHECK_OK(dlt_tensor_copy_to_host(c.out, out, sizeof out));
        const int wrong = cast_outputs_wrong(x, w, out);
        CHECK(wrong == 0, "replay %d after the parameter changed: %d of %d outputs differ (a stale bf16 copy?)",
              round + 1, wrong, CR * CO);
    }
    CHECK_OK(dlt_grad_set_enabled(cu, prev, NULL));
    dlt_graph_destroy(graph);
    dlt_tensor_release(c.x), dlt_tensor_release(c.w), dlt_tensor_release(c.out);
    dlt_ctx_destroy(cu);
}

/* A capture that finds the parameter's bf16 copy current reads it without recording the
 * cast (one kernel fewer than a capture that had to cast), and the copy is refreshed before
 * a replay where the parameter was written since: by the host (a load), or by another
 * graph's replay, which writes it without moving its version (graph_written). */
typedef struct write_state {
    dlt_tensor *w, *src;
} write_state;

static dlt_status write_step(void *user) {
    write_state *ws = user;
    return dlt_tensor_copy(ws->w, ws->src);
}

static void test_graph_reads_current_cast_copies(void) {
    CUDA_CTX_OR_SKIP(cu);
    const int64_t ws2[2] = {CO, CI};
    static float x[CR * CI], w[CO * CI], out[CR * CO];
    for (int i = 0; i < CR * CI; i++) x[i] = (float)((i * 5) % 7) - 3.0f;
    for (int i = 0; i < CO * CI; i++) w[i] = 0.5f * (float)((i * 3) % 5 - 2);
    cast_state c = {NULL, NULL, NULL};
    cast_state_make(cu, x, w, &c);
    int32_t prev = 1;
    CHECK_OK(dlt_grad_set_enabled(cu, 0, &prev));
    /* reused: the warm-up calls left the copy current */
    dlt_graph *reuse = NULL, *casts = NULL, *writer = NULL;
    CHECK_OK(graph_create_logged(cu, cast_step, &c, &reuse));
    REQUIRE(dlt_graph_is_captured(reuse) == 1, "not captured: %s", g_logs);
    /* with zero warm-up calls after a write, the capture finds the copy stale and casts */
    CHECK_OK(dlt_tensor_copy_from_host(c.w, w, sizeof w));
    CHECK_OK(dlt_graph_create(cu, cast_step, &c, 0, &casts));
    REQUIRE(dlt_graph_is_captured(casts) == 1, "not captured");
    const int64_t k_reuse = dlt_graph_stat(reuse, DLT_GRAPH_STAT_KERNELS),
                  k_cast = dlt_graph_stat(casts, DLT_GRAPH_STAT_KERNELS);
    CHECK(k_cast == k_reuse + 1, "kernels: %lld with the copy current, %lld with it stale (want one cast more)",
          (long long)k_reuse, (long long)k_cast);
    /* host writes between replays */
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < CO * CI; i++) w[i] = 0.5f * (float)((i * (3 + round) + 1) % 7 - 3);
        CHECK_OK(dlt_tensor_copy_from_host(c.w, w, sizeof w));
        CHECK_OK(dlt_graph_run(reuse));
        CHECK_OK(dlt_tensor_copy_to_host(c.out, out, sizeof out));
        CHECK(cast_outputs_wrong(x, w, out) == 0, "host write %d: the replay read a stale copy", round + 1);
    }
    /* a graph that writes the parameter on replay (captured after the reader) */
    write_state wst = {c.w, NULL};
    CHECK_OK(dlt_tensor_from_host(cu, DLT_F32, ws2, 2, 0, w, sizeof w, &wst.src));
    CHECK_OK(dlt_graph_create(cu, write_step, &wst, 1, &writer));
    REQUIRE(dlt_graph_is_captured(writer) == 1, "the writer was not captured");
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < CO * CI; i++) w[i] = 0.5f * (float)((i * (2 + round) + round) % 9 - 4);
        CHECK_OK(dlt_tensor_copy_from_host(wst.src, w, sizeof w)); /* src is not the parameter */
        CHECK_OK(dlt_graph_run(writer));
        CHECK_OK(dlt_graph_run(reuse));
        CHECK_OK(dlt_tensor_copy_to_host(c.out, out, sizeof out));
        CHECK(cast_outputs_wrong(x, w, out) == 0, "after the writer graph's replay %d: a stale copy", round + 1);
        CHECK_OK(cast_step(&c)); /* eager: must cast too, the version did not move */
        CHECK_OK(dlt_tensor_copy_to_host(c.out, out, sizeof out));
        CHECK(cast_outputs_wrong(x, w, out) == 0, "eager after the writer graph's replay %d: a stale copy", round + 1);
    }
    CHECK_OK(dlt_grad_set_enabled(cu, prev, NULL));
    dlt_graph_destroy(writer), dlt_graph_destroy(casts), dlt_graph_destroy(reuse);
    dlt_tensor_release(wst.src);
    dlt_tensor_release(c.x), dlt_tensor_release(c.w), dlt_tensor_release(c.out);
    dlt_ctx_destroy(cu);
}

int main(void) {
    RUN(test_capture_whole_step);
    RUN(test_capture_whole_step_driver_memory);
    RUN(test_graph_arena_output_outlives_graph);
    RUN(test_graph_capture_failure_gives_arena_back);
    RUN(test_capture_adamw_clip_step);
    RUN(test_capture_fused_clip_step);
    RUN(test_graph_keeps_buffers_replaced_after_capture);
    RUN(test_graph_casts_parameters_on_every_replay);
    RUN(test_graph_reads_current_cast_copies);
    return th_done();
}
