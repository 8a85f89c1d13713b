/*
 * cuda_dist.c - the NCCL side of dist.h on GPUs (skips without one).
 *
 * One GPU (the meson suite, and scripts/device/gpu_check.sh's "nccl" stage under
 * compute-sanitizer memcheck): a one-rank NCCL communicator's collectives, and DDP's whole
 * path (side stream, fork/join events, NCCL all-reduce, the GradScaler's found-inf
 * reduction) inside a step captured as a CUDA graph, against the same step without DDP.
 *
 * Several GPUs (scripts/device/ddp_check.sh starts this program under dltrain-run -n N):
 * a GPT without BatchNorm trained 20 steps on N ranks x B sequences equals, to rounding,
 * one process x N*B sequences (rank 0 trains that reference on a second context), and the
 * replicas are bitwise equal. Without WORLD_SIZE > 1 that case skips.
 */
#include "harness.h"

static dlt_status one_rank_comm(dlt_ctx *ctx, dlt_comm **c) {
    dlt_comm_options o;
    dlt_comm_options_default(&o);
    o.rank = 0;
    o.world_size = 1;
    return dlt_comm_create_ex(ctx, &o, c);
}

static void expect_same(dlt_tensor *a, dlt_tensor *b, const char *what) {
    size_t n = dlt_tensor_nbytes(a);
    unsigned char *x = malloc(n ? n : 1), *y = malloc(n ? n : 1);
    CHECK_OK(dlt_tensor_copy_to_host(a, x, n));
    CHECK_OK(dlt_tensor_copy_to_host(b, y, n));
    CHECK(memcmp(x, y, n) == 0, "%s: the one-rank collective changed the values", what);
    free(x);
    free(y);
}

static void test_one_rank_nccl_collectives(void) {
    CUDA_CTX_OR_SKIP(ctx);
    dlt_comm *c = NULL;
    CHECK_OK(one_rank_comm(ctx, &c));
    CHECK(strcmp(dlt_comm_backend(c), "nccl") == 0, "backend %s", dlt_comm_backend(c));
    int64_t n = 1000;
    dlt_tensor *x = NULL, *ref = NULL, *out = NULL, *h = NULL, *hr = NULL, *ints = NULL;
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, &n, 1, 0, &x));
    CHECK_OK(dlt_tensor_rand_normal(x, 0, 1));
    CHECK_OK(dlt_tensor_cast(x, DLT_F32, &ref));
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, &n, 1, 0, &out));
    for (int op = 0; op < 4; op++) {
        CHECK_OK(dlt_comm_all_reduce(c, x, op));
        expect_same(x, ref, "all_reduce");
    }
    CHECK_OK(dlt_comm_broadcast(c, x, 0));
    expect_same(x, ref, "broadcast");
    CHECK_OK(dlt_comm_all_gather(c, out, x));
    expect_same(out, ref, "all_gather");
    CHECK_OK(dlt_comm_reduce_scatter(c, out, x, DLT_REDUCE_SUM));
    expect_same(out, ref, "reduce_scatter");
    CHECK_OK(dlt_tensor_cast(x, DLT_BF16, &h));
    CHECK_OK(dlt_tensor_cast(h, DLT_BF16, &hr));
    CHECK_OK(dlt_comm_all_reduce(c, h, DLT_REDUCE_AVG));
    expect_same(h, hr, "bf16 all_reduce");
    CHECK_OK(dlt_comm_barrier(c));
    CHECK_OK(dlt_comm_check(c));
    CHECK_OK(dlt_tensor_zeros(ctx, DLT_I32, &n, 1, 0, &ints));
    CHECK_STATUS(dlt_comm_all_reduce(c, ints, DLT_REDUCE_AVG), DLT_ERR_DTYPE);
    dlt_ctx *cpu = th_cpu_ctx();
    dlt_tensor *host = NULL;
    CHECK_OK(dlt_tensor_zeros(cpu, DLT_F32, &n, 1, 0, &host));
    CHECK_STATUS(dlt_comm_all_reduce(c, host, DLT_REDUCE_SUM), DLT_ERR_CONTEXT_MISMATCH);
    /* the explicit unique id path */
    uint8_t id[DLT_NCCL_UNIQUE_ID_BYTES];
    dlt_comm *c2 = NULL;
    CHECK_OK(dlt_nccl_unique_id(id, sizeof id));
    CHECK_OK(dlt_comm_create_nccl(ctx, 0, 1, id, sizeof id, &c2));
    CHECK_OK(dlt_comm_all_reduce(c2, x, DLT_REDUCE_SUM));
    CHECK_OK(dlt_comm_barrier(c2));
    expect_same(x, ref, "unique-id communicator");
    dlt_comm_destroy(c2);
    dlt_tensor_release(host);
    dlt_ctx_destroy(cpu);
    dlt_tensor_release(ints);
    dlt_tensor_release(h);
    dlt_tensor_release(hr);
    dlt_tensor_release(x);
    dlt_tensor_release(ref);
    dlt_tensor_release(out);
    dlt_comm_destroy(c);
    dlt_ctx_destroy(ctx);
}

/* ---- a captured training step with and without DDP over a one-rank communicator ---- */

typedef struct step_state {
    dlt_ctx *ctx;
    dlt_module *m;
    dlt_ddp *ddp;
    dlt_optimizer *opt;
    dlt_grad_scaler *scaler;
    dlt_loader *ld;
} step_state;

static dlt_status train_step(void *user) {
    step_state *s = user;
    dlt_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL, *scaled = NULL;
    int32_t has = 0;
    dlt_status st = dlt_optimizer_zero_grad(s->opt, 1);
    if (st == DLT_OK) st = dlt_loader_next(s->ld, &x, &y, &has);
    if (st == DLT_OK) st = dlt_autocast_begin(s->ctx, DLT_F16);
    if (st == DLT_OK) st = s->ddp ? dlt_ddp_forward(s->ddp, x, &logits) : dlt_module_forward(s->m, x, &logits);
    if (st == DLT_OK) st = dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss);
    dlt_status ast = dlt_autocast_end(s->ctx);
    if (st == DLT_OK) st = ast;
    if (st == DLT_OK) st = dlt_grad_scaler_scale(s->scaler, loss, &scaled);
    if (st == DLT_OK) st = dlt_backward(scaled, NULL);
    if (st == DLT_OK) st = dlt_grad_scaler_step(s->scaler, s->opt);
    if (st == DLT_OK) st = dlt_grad_scaler_update(s->scaler);
    dlt_tensor_release(logits);
    dlt_tensor_release(loss);
    dlt_tensor_release(scaled);
    return st;
}

/* Trains 12 captured steps of an MLP (fp16 autocast, GradScaler, SGD with momentum); with
 * use_ddp through DDP on a one-rank NCCL communicator. Writes the weights to w. */
static void captured_run(int use_ddp, float *w, int64_t nw, int *captured, int32_t *buckets) {
    CUDA_CTX_OR_SKIP(ctx);
    CHECK_OK(dlt_ctx_set_seed(ctx, 5));
    step_state s;
    memset(&s, 0, sizeof s);
    s.ctx = ctx;
    dlt_module *l = NULL;
    CHECK_OK(dlt_sequential_create(ctx, &s.m));
    CHECK_OK(dlt_linear_create(ctx, 64, 128, 1, &l));
    CHECK_OK(dlt_sequential_append(s.m, "fc0", l));
    CHECK_OK(dlt_relu_create(ctx, &l));
    CHECK_OK(dlt_sequential_append(s.m, "relu", l));
    CHECK_OK(dlt_linear_create(ctx, 128, 10, 1, &l));
    CHECK_OK(dlt_sequential_append(s.m, "fc1", l));
    int64_t xs[2] = {512, 64}, ys = 512;
    dlt_tensor *x = NULL, *yf = NULL, *y = NULL;
    dlt_dataset *ds = NULL;
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, xs, 2, 0, &x));
    CHECK_OK(dlt_tensor_rand_normal(x, 0, 1));
    CHECK_OK(dlt_tensor_empty(ctx, DLT_F32, &ys, 1, 0, &yf));
    CHECK_OK(dlt_tensor_rand_uniform(yf, 0, 9.99));
    CHECK_OK(dlt_tensor_cast(yf, DLT_I32, &y));
    CHECK_OK(dlt_tensor_dataset_create(x, y, NULL, &ds));
    CHECK_OK(dlt_loader_create(ds, 64, 1, 1, 3, &s.ld));
    dlt_comm *c = NULL;
    if (use_ddp) {
        CHECK_OK(one_rank_comm(ctx, &c));
        dlt_ddp_options o;
        dlt_ddp_options_default(&o);
        o.first_bucket_mb = o.bucket_cap_mb = 16384.0 / 1048576.0; /* several buckets */
        CHECK_OK(dlt_ddp_create_ex(c, s.m, &o, &s.ddp));
        *buckets = dlt_ddp_num_buckets(s.ddp);
    }
    dlt_tensor *params[4];
    int32_t np = 0;
    CHECK_OK(dlt_module_params(s.m, params, 4, &np));
    CHECK_OK(dlt_sgd_create(params, np, 0.05, 0.9, 0, 0, 0, 0, &s.opt));
    CHECK_OK(dlt_grad_scaler_create(ctx, 1024.0, 2.0, 0.5, 3, 1, &s.scaler));
    if (c) CHECK_OK(dlt_grad_scaler_set_comm(s.scaler, c));
    CHECK_OK(dlt_loader_start_epoch(s.ld, 0));
    dlt_graph *g = NULL;
    CHECK_OK(dlt_graph_create(ctx, train_step, &s, 2, &g));
    *captured = dlt_graph_is_captured(g);
    for (int i = 0; i < 5; i++) CHECK_OK(dlt_graph_run(g)); /* 2 warm-up + 5 replays: within epoch 0 */
    CHECK_OK(dlt_ctx_synchronize(ctx));
    if (s.ddp) {
        int32_t during = -1, after = -1;
        CHECK_OK(dlt_ddp_overlap(s.ddp, &during, &after));
        CHECK(during + after == *buckets && during >= 1, "%d buckets during, %d after", during, after);
    }
    CHECK_OK(dlt_tensor_copy_to_host(params[0], w, (size_t)nw * sizeof *w));
    if (c) CHECK_OK(dlt_grad_scaler_set_comm(s.scaler, NULL));
    dlt_graph_destroy(g);
    dlt_grad_scaler_destroy(s.scaler);
    dlt_optimizer_destroy(s.opt);
    dlt_ddp_destroy(s.ddp);
    dlt_comm_destroy(c);
    dlt_loader_destroy(s.ld);
    dlt_dataset_destroy(ds);
    dlt_tensor_release(x);
    dlt_tensor_release(yf);
    dlt_tensor_release(y);
    dlt_module_destroy(s.m);
    dlt_ctx_destroy(ctx);
}

static void test_ddp_inside_a_captured_step(void) {
    static float plain[64 * 128], dist[64 * 128];
    int cap_plain = 0, cap_ddp = 0;
    int32_t buckets = 0;
    captured_run(0, plain, 64 * 128, &cap_plain, &buckets);
    if (th_case_failed) return;
    captured_run(1, dist, 64 * 128, &cap_ddp, &buckets);
    CHECK(cap_plain && cap_ddp, "captured: plain %d, DDP %d (see the log callback's reason)", cap_plain, cap_ddp);
    CHECK(buckets >= 2, "%d buckets", buckets);
    double worst = 0;
    for (int i = 0; i < 64 * 128; i++) {
        double e = fabs((double)plain[i] - dist[i]);
        worst = e > worst ? e : worst;
    }
    CHECK(worst <= 1e-6, "a one-rank DDP step differs from the plain step: %.3g", worst);
    printf("# captured: %d buckets, worst |difference| %.3g\n", buckets, worst);
}

/* ---- several GPUs: N ranks x B == one process x N*B, 20 steps, a GPT (no BatchNorm) ---- */

static dlt_status gpt_train(dlt_ctx *ctx, dlt_comm *c, int32_t rank, int32_t world, int64_t batch, int steps,
                            float **out, int64_t *n_out) {
    dlt_gpt_config cfg;
    dlt_status st = dlt_gpt_config_preset("tiny", &cfg);
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.n_embd = 128;
    cfg.vocab_size = 512;
    cfg.block_size = 64;
    cfg.dropout = 0.0;
    dlt_module *m = NULL;
    dlt_token_dataset *tds = NULL;
    dlt_token_loader *tl = NULL;
    dlt_ddp *d = NULL;
    dlt_optimizer *opt = NULL;
    dlt_tensor **params = NULL;
    int32_t np = 0;
    if (st == DLT_OK) st = dlt_ctx_set_seed(ctx, 1234);
    if (st == DLT_OK) st = dlt_gpt_create(ctx, &cfg, &m);
    if (st == DLT_OK) st = dlt_synthetic_tokens_create(ctx, 200000, 512, 7, &tds);
    if (st == DLT_OK) st = dlt_token_loader_create(tds, batch, 64, 11, &tl);
    if (st == DLT_OK && c) st = dlt_token_loader_set_distributed(tl, world, rank);
    if (st == DLT_OK && c) st = dlt_ddp_create(c, m, &d);
    if (st == DLT_OK) {
        np = dlt_module_num_params(m);
        params = calloc((size_t)np, sizeof *params);
        st = dlt_module_params(m, params, np, NULL);
    }
    if (st == DLT_OK) st = dlt_sgd_create(params, np, 0.1, 0.9, 0, 0, 0, 0, &opt);
    for (int s = 0; s < steps && st == DLT_OK; s++) {
        dlt_tensor *x = NULL, *y = NULL, *loss = NULL;
        st = dlt_token_loader_next(tl, &x, &y);
        if (st == DLT_OK) st = dlt_optimizer_zero_grad(opt, 1);
        if (st == DLT_OK) st = dlt_gpt_forward(m, x, y, NULL, &loss);
        if (st == DLT_OK) st = dlt_backward(loss, NULL);
        if (st == DLT_OK) st = dlt_optimizer_step(opt);
        dlt_tensor_release(loss);
    }
    int64_t total = 0;
    for (int32_t i = 0; i < np; i++) total += dlt_tensor_numel(params[i]);
    float *w = st == DLT_OK ? malloc((size_t)total * sizeof *w) : NULL;
    for (int32_t i = 0, k = 0; w && i < np && st == DLT_OK; i++) {
        st = dlt_tensor_copy_to_host(params[i], w + k, (size_t)dlt_tensor_numel(params[i]) * sizeof *w);
        k += (int32_t)dlt_tensor_numel(params[i]);
    }
    *out = w;
    *n_out = total;
    free(params);
    dlt_optimizer_destroy(opt);
    dlt_ddp_destroy(d);
    dlt_token_loader_destroy(tl);
    dlt_token_dataset_destroy(tds);
    dlt_module_destroy(m);
    return st;
}

static void test_ddp_equals_global_batch(void) {
    int32_t rank = 0, world = 1, local = 0;
    CHECK_OK(dlt_dist_env(&rank, &world, &local));
    if (world < 2) SKIP("needs several GPUs: scripts/device/ddp_check.sh runs it under dltrain-run");
    int32_t ngpu = 0;
    CHECK_OK(dlt_cuda_device_count(&ngpu));
    REQUIRE(ngpu >= world, "%d ranks on %d GPUs: one GPU per rank", world, ngpu);
    dlt_ctx *ctx = NULL;
    CHECK_OK(dlt_ctx_create(DLT_DEVICE_CUDA, local, DLT_ABI_VERSION, &ctx));
    dlt_comm *c = NULL;
    CHECK_OK(dlt_comm_create(ctx, &c));
    float *w = NULL;
    int64_t n = 0;
    const int64_t B = 8;
    CHECK_OK(gpt_train(ctx, c, rank, world, B, 20, &w, &n));
    /* the replicas: every rank's hash of its bits, gathered */
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < (size_t)n * sizeof *w; i++) h = (h ^ ((unsigned char *)w)[i]) * 1099511628211ULL;
    int64_t one = 1, all_n = world, mine = (int64_t)(h >> 1);
    dlt_tensor *ht = NULL, *all = NULL;
    CHECK_OK(dlt_tensor_from_host(ctx, DLT_I64, &one, 1, 0, &mine, sizeof mine, &ht));
    CHECK_OK(dlt_tensor_empty(ctx, DLT_I64, &all_n, 1, 0, &all));
    CHECK_OK(dlt_comm_all_gather(c, all, ht));
    int64_t hashes[64];
    CHECK_OK(dlt_tensor_copy_to_host(all, hashes, (size_t)world * sizeof *hashes));
    for (int32_t r = 1; r < world && r < 64; r++) CHECK(hashes[r] == hashes[0], "rank %d's replica differs", r);
    if (rank == 0) { /* the reference: one process, the global batch, a context of its own */
        dlt_ctx *ref_ctx = NULL;
        CHECK_OK(dlt_ctx_create(DLT_DEVICE_CUDA, local, DLT_ABI_VERSION, &ref_ctx));
        float *want = NULL;
        int64_t nr = 0;
        CHECK_OK(gpt_train(ref_ctx, NULL, 0, 1, B * world, 20, &want, &nr));
        REQUIRE(nr == n, "%lld vs %lld parameters", (long long)nr, (long long)n);
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double e = fabs((double)w[i] - want[i]) / (1e-2 + fabs((double)want[i]));
            worst = e > worst ? e : worst;
        }
        CHECK(worst < 1e-4, "after 20 steps the %d-rank parameters differ from one process's: %.3g", world, worst);
        printf("# %d ranks x %lld sequences vs 1 x %lld, 20 steps: worst relative difference %.3g\n", world,
               (long long)B, (long long)(B * world), worst);
        free(want);
        dlt_ctx_destroy(ref_ctx);
    }
    CHECK_OK(dlt_comm_barrier(c)); /* rank 0's reference is done before anyone leaves */
    free(w);
    dlt_tensor_release(ht);
    dlt_tensor_release(all);
    dlt_comm_destroy(c);
    dlt_ctx_destroy(ctx);
}

int main(void) {
    int32_t rank = 0, world = 1;
    if (dlt_dist_env(&rank, &world, NULL) != DLT_OK) world = 1;
    if (world > 1) { /* started by dltrain-run: the several-GPU case only, rank 0 reports */
        if (rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
        RUN(test_ddp_equals_global_batch);
        return th_done();
    }
    RUN(test_one_rank_nccl_collectives);
    RUN(test_ddp_inside_a_captured_step);
    RUN(test_ddp_equals_global_batch);
    return th_done();
}
