/*
 * cuda_side.c - the backward's side stream on CUDA (lib/core/side.c, cuda/side.c). ResNet50
 * at 32x32, channels-last, fp16 autocast with the GradScaler and SGD, cuDNN in deterministic
 * mode, trained in two contexts: one with the convolutions' weight gradients on the side
 * stream (the default), one with DLT_SIDE_STREAM=0. Eager steps and replays of the captured
 * step must give the same weights bit for bit (a missing join shows up as a race on the
 * gradients or on memory handed back too early); the captured step with the side stream
 * has parallel branches (its longest chain is shorter than the serial graph's).
 */
#include "harness.h"

#include "../lib/core/internal.h" /* the tape's side-stream counts */

enum { NB = 16, NCLS = 10 };

typedef struct run {
    dlt_ctx *ctx;
    dlt_module *model;
    dlt_optimizer *opt;
    dlt_grad_scaler *sc;
    dlt_tensor *x, *y;
} run;

#define CK(call)                                                                              \
    do {                                                                                      \
        dlt_status s_ = (call);                                                               \
        if (s_ != DLT_OK) return s_;                                                          \
    } while (0)

static dlt_status step(void *user) {
    run *r = user;
    dlt_tensor *logits = NULL, *loss = NULL, *scaled = NULL;
    CK(dlt_optimizer_zero_grad(r->opt, 1));
    CK(dlt_autocast_begin(r->ctx, DLT_F16));
    dlt_status st = dlt_module_forward(r->model, r->x, &logits);
    if (st == DLT_OK) st = dlt_cross_entropy(logits, r->y, -100, DLT_REDUCTION_MEAN, &loss);
    const dlt_status st2 = dlt_autocast_end(r->ctx);
    if (st == DLT_OK) st = st2;
    if (st == DLT_OK) st = dlt_grad_scaler_scale(r->sc, loss, &scaled);
    if (st == DLT_OK) st = dlt_backward(scaled, NULL);
    if (st == DLT_OK) st = dlt_grad_scaler_step(r->sc, r->opt);
    if (st == DLT_OK) st = dlt_grad_scaler_update(r->sc);
    dlt_tensor_release(logits);
    dlt_tensor_release(loss);
    dlt_tensor_release(scaled);
    return st;
}

static int make_run(run *r, int side) {
    memset(r, 0, sizeof *r);
    /* BatchNorm plans built in line: both contexts then run the same kernels from step 1 */
    setenv("DLT_BN_ASYNC_PLANS", "0", 1);
    if (!side) setenv("DLT_SIDE_STREAM", "0", 1); /* read when the context is created */
    r->ctx = th_cuda_ctx();
    unsetenv("DLT_SIDE_STREAM");
    if (!r->ctx) return 0;
    static float xv[NB * 3 * 32 * 32];
    static int32_t yv[NB];
    uint64_t s = 11;
    for (int i = 0; i < NB * 3 * 32 * 32; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        xv[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int i = 0; i < NB; i++) yv[i] = (i * 3) % NCLS;
    const int64_t xs[4] = {NB, 3, 32, 32}, ys[1] = {NB};
    dlt_tensor *x = NULL;
    CHECK_OK(dlt_ctx_set_deterministic(r->ctx, 1));
    CHECK_OK(dlt_ctx_set_seed(r->ctx, 5));
    CHECK_OK(dlt_resnet50_create(r->ctx, NCLS, &r->model));
    CHECK_OK(dlt_module_set_format(r->model, DLT_FORMAT_CHANNELS_LAST));
    CHECK_OK(dlt_tensor_from_host(r->ctx, DLT_F32, xs, 4, 0, xv, sizeof xv, &x));
    CHECK_OK(dlt_tensor_to_format(x, DLT_FORMAT_CHANNELS_LAST, &r->x));
    dlt_tensor_release(x);
    CHECK_OK(dlt_tensor_from_host(r->ctx, DLT_I32, ys, 1, 0, yv, sizeof yv, &r->y));
    const int32_t np = dlt_module_num_params(r->model);
    dlt_tensor **ps = calloc((size_t)np, sizeof *ps);
    REQUIRE(ps);
    CHECK_OK(dlt_module_params(r->model, ps, np, NULL));
    CHECK_OK(dlt_sgd_create(ps, np, 0.05, 0.9, 0.0, 1e-4, 0, 0, &r->opt));
    free(ps);
    CHECK_OK(dlt_grad_scaler_create(r->ctx, 1024.0, 2.0, 0.5, 2000, 1, &r->sc));
    return 1;
}

static void free_run(run *r) {
    dlt_grad_scaler_destroy(r->sc);
    dlt_optimizer_destroy(r->opt);
    dlt_module_destroy(r->model);
    dlt_tensor_release(r->x);
    dlt_tensor_release(r->y);
    dlt_ctx_destroy(r->ctx);
}

/* every parameter of a and b, bitwise; returns how many differ */
static int compare_params(run *a, run *b, const char *when) {
    const int32_t np = dlt_module_num_params(a->model);
    dlt_tensor **pa = calloc((size_t)np, sizeof *pa), **pb = calloc((size_t)np, sizeof *pb);
    int differ = 0;
    if (!pa || !pb || dlt_module_params(a->model, pa, np, NULL) != DLT_OK ||
        dlt_module_params(b->model, pb, np, NULL) != DLT_OK) {
        CHECK(0, "%s: reading the parameters", when);
        differ = np;
    }
    for (int32_t i = 0; i < np && !differ; i++) {
        float *x = th_read_f32(pa[i]), *y = th_read_f32(pb[i]);
        const int64_t n = dlt_tensor_numel(pa[i]);
        if (memcmp(x, y, (size_t)n * sizeof(float)) != 0) {
            if (!differ) printf("# %s: parameter %d (%lld values) differs first (rel err %.3g)\n", when, i,
                                (long long)n, th_rel_err_f(x, y, n));
            differ++;
        }
        free(x), free(y);
    }
    free(pa), free(pb);
    return differ;
}

static void graph_counts(const dlt_graph *g, int64_t *v) {
    for (int32_t k = 0; k < DLT_GRAPH_STAT_COUNT; k++) v[k] = dlt_graph_stat(g, k);
}

static void test_side_stream_resnet50_matches_serial(void) {
    run side, serial;
    if (!make_run(&side, 1)) {
        th_case_skipped = 1;
        longjmp(th_jmp, 1);
    }
    REQUIRE(make_run(&serial, 0), "second context: %s", th_skip_reason);
    /* eager: the same weights after two steps */
    for (int i = 0; i < 2; i++) {
        CHECK_OK(step(&side));
        CHECK_OK(step(&serial));
    }
    CHECK_OK(dlt_ctx_synchronize(side.ctx));
    CHECK_OK(dlt_ctx_synchronize(serial.ctx));
    const int64_t forks = side.ctx->tape.side.forks, joins = side.ctx->tape.side.joins;
    printf("# eager: %lld side forks, %lld joins in 2 steps\n", (long long)forks, (long long)joins);
    /* 53 convolutions, the stem's input needs no gradient: 52 weight gradients per step, and
     * the queued fp32 accumulations' flushes */
    CHECK(forks > 2 * 52 && joins >= 2 && serial.ctx->tape.side.forks == 0, "forks %lld / %lld, joins %lld",
          (long long)forks, (long long)serial.ctx->tape.side.forks, (long long)joins);
    CHECK(compare_params(&side, &serial, "eager") == 0, "eager steps differ with the side stream");

    /* captured: the same again after warm-up and replays, and parallel branches */
    dlt_graph *gs = NULL, *gl = NULL;
    CHECK_OK(dlt_graph_create(side.ctx, step, &side, 2, &gs));
    CHECK_OK(dlt_graph_create(serial.ctx, step, &serial, 2, &gl));
    REQUIRE(dlt_graph_is_captured(gs) && dlt_graph_is_captured(gl), "a step was not captured");
    for (int i = 0; i < 3; i++) {
        CHECK_OK(dlt_graph_run(gs));
        CHECK_OK(dlt_graph_run(gl));
    }
    CHECK_OK(dlt_ctx_synchronize(side.ctx));
    CHECK_OK(dlt_ctx_synchronize(serial.ctx));
    CHECK(compare_params(&side, &serial, "captured") == 0, "replays differ with the side stream");
    int64_t a[DLT_GRAPH_STAT_COUNT], b[DLT_GRAPH_STAT_COUNT];
    graph_counts(gs, a);
    graph_counts(gl, b);
    printf("# captured step: side stream %lld nodes (%lld kernels), %lld edges, longest chain %lld; "
           "serial %lld nodes (%lld kernels), %lld edges, longest chain %lld\n",
           (long long)a[DLT_GRAPH_STAT_NODES], (long long)a[DLT_GRAPH_STAT_KERNELS], (long long)a[DLT_GRAPH_STAT_EDGES],
           (long long)a[DLT_GRAPH_STAT_DEPTH], (long long)b[DLT_GRAPH_STAT_NODES], (long long)b[DLT_GRAPH_STAT_KERNELS],
           (long long)b[DLT_GRAPH_STAT_EDGES], (long long)b[DLT_GRAPH_STAT_DEPTH]);
    CHECK(a[DLT_GRAPH_STAT_KERNELS] == b[DLT_GRAPH_STAT_KERNELS], "kernels %lld vs %lld: the same work",
          (long long)a[DLT_GRAPH_STAT_KERNELS], (long long)b[DLT_GRAPH_STAT_KERNELS]);
    CHECK(a[DLT_GRAPH_STAT_DEPTH] > 0 && a[DLT_GRAPH_STAT_DEPTH] < b[DLT_GRAPH_STAT_DEPTH],
          "longest chain %lld with the side stream, %lld without: no parallel branches",
          (long long)a[DLT_GRAPH_STAT_DEPTH], (long long)b[DLT_GRAPH_STAT_DEPTH]);
    dlt_graph_destroy(gs);
    dlt_graph_destroy(gl);
    free_run(&side);
    free_run(&serial);
}

int main(void) {
    RUN(test_side_stream_resnet50_matches_serial);
    return th_done();
}
