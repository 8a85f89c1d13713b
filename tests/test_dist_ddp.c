/*
 * test_dist_ddp.c - DDP on the CPU, several processes: N ranks equal one process with the
 * global batch (an MLP with several buckets and no_sync accumulation, a GPT with tied
 * weights), PyTorch's bucket assignment, models that differ across ranks refused, two models
 * on one context, the GradScaler's agreement (an inf on one rank skips the step on every
 * rank), checkpoints written once by rank 0 and loadable anywhere. The ranks' machinery:
 * dist_common.h.
 */
#include "dist_common.h"

/* =========================================================================================
 * DDP: N ranks x batch b == one process x batch N*b
 * ======================================================================================= */

#define NSAMPLES 64
#define NFEAT 6
#define NCLASS 3

typedef struct train_cfg {
    int world;          /* processes of the run (1: the reference) */
    int64_t batch;      /* per rank */
    int steps, accum;
    int small_buckets;
    int use_ddp;
} train_cfg;

static dlt_status make_mlp(dlt_ctx *ctx, dlt_module **out) {
    dlt_module *seq = NULL, *m = NULL;
    dlt_status st = dlt_sequential_create(ctx, &seq);
    const int64_t dims[] = {NFEAT, 16, 16, NCLASS};
    for (int i = 0; i < 3 && st == DLT_OK; i++) {
        char name[8];
        snprintf(name, sizeof name, "fc%d", i);
        st = dlt_linear_create(ctx, dims[i], dims[i + 1], 1, &m);
        if (st == DLT_OK) st = dlt_sequential_append(seq, name, m);
        if (st == DLT_OK && i < 2) {
            snprintf(name, sizeof name, "relu%d", i);
            st = dlt_relu_create(ctx, &m);
            if (st == DLT_OK) st = dlt_sequential_append(seq, name, m);
        }
    }
    if (st != DLT_OK) {
        dlt_module_destroy(seq);
        return st;
    }
    *out = seq;
    return DLT_OK;
}

static dlt_status make_data(dlt_ctx *ctx, dlt_dataset **out) {
    float x[NSAMPLES * NFEAT];
    int32_t y[NSAMPLES];
    for (int i = 0; i < NSAMPLES; i++) {
        for (int j = 0; j < NFEAT; j++) x[i * NFEAT + j] = (float)sin(i * 0.37 + j * 1.1 + (i % 3) * j * 0.5);
        y[i] = (i * 7) % NCLASS;
    }
    int64_t xs[2] = {NSAMPLES, NFEAT}, ys = NSAMPLES;
    dlt_tensor *xt = NULL, *yt = NULL;
    dlt_status st = dlt_tensor_from_host(ctx, DLT_F32, xs, 2, 0, x, sizeof x, &xt);
    if (st == DLT_OK) st = dlt_tensor_from_host(ctx, DLT_I32, &ys, 1, 0, y, sizeof y, &yt);
    if (st == DLT_OK) st = dlt_tensor_dataset_create(xt, yt, NULL, out);
    dlt_tensor_release(xt);
    dlt_tensor_release(yt);
    return st;
}

static void train_rank(int rank, int world, void *arg) {
    train_cfg *cfg = arg;
    /* the ranks start from different weights: DDP's broadcast must make them rank 0's */
    dlt_ctx *ctx = cpu_ctx(7 + (uint64_t)rank);
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    dlt_module *m = NULL;
    dlt_comm *c = NULL;
    dlt_ddp *d = NULL;
    dlt_optimizer *opt = NULL;
    dlt_tensor *params[16];
    COK(make_data(ctx, &ds));
    COK(dlt_loader_create(ds, cfg->batch, 1, 0, 11, &ld));
    COK(make_mlp(ctx, &m));
    int32_t np = 0;
    COK(dlt_module_params(m, params, 16, &np));
    if (cfg->use_ddp) {
        COK(mk_comm(ctx, rank, world, 60000, &c));
        COK(dlt_loader_set_distributed(ld, world, rank, 0));
        dlt_ddp_options o;
        dlt_ddp_options_default(&o);
        if (cfg->small_buckets) { /* several buckets, launched during the backward */
            o.first_bucket_mb = 100.0 / 1048576.0;
            o.bucket_cap_mb = 500.0 / 1048576.0;
        }
        COK(dlt_ddp_create_ex(c, m, &o, &d));
        if (cfg->small_buckets) CC(dlt_ddp_num_buckets(d) >= 3, "%d buckets", dlt_ddp_num_buckets(d));
    }
    COK(dlt_sgd_create(params, np, 0.1, 0.9, 0.0, 1e-4, 0, 0, &opt));
    int64_t pos = 0;
    for (int step = 0; step < cfg->steps; step++) {
        for (int micro = 0; micro < cfg->accum; micro++) {
            dlt_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL, *scaled = NULL;
            int32_t has = 0;
            COK(dlt_loader_next(ld, &x, &y, &has));
            if (!has) COK(dlt_loader_next(ld, &x, &y, &has)); /* the next epoch */
            if (d) COK(dlt_ddp_no_sync(d, micro < cfg->accum - 1));
            COK(d ? dlt_ddp_forward(d, x, &logits) : dlt_module_forward(m, x, &logits));
            COK(dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss));
            COK(dlt_mul_scalar(loss, NULL, 1.0 / cfg->accum, &scaled));
            COK(dlt_backward(scaled, NULL));
            if (d && micro == 0 && cfg->accum > 1 && step == 0) { /* local gradients only */
                double g = 0;
                COK(dlt_tensor_get(dlt_tensor_grad(params[0]), 0, &g));
                g_me->elapsed[1] = g;
            }
            dlt_tensor_release(logits);
            dlt_tensor_release(loss);
            dlt_tensor_release(scaled);
        }
        COK(dlt_optimizer_step(opt));
        COK(dlt_optimizer_zero_grad(opt, 1));
        pos++;
    }
    if (d && cfg->small_buckets) { /* every bucket went while the backward still ran */
        int32_t during = -1, after = -1;
        COK(dlt_ddp_overlap(d, &during, &after));
        CC(during == dlt_ddp_num_buckets(d) && after == 0, "%d buckets during the backward, %d after", during,
           after);
    }
    int64_t k = 0;
    for (int32_t i = 0; i < np; i++) {
        int64_t n = dlt_tensor_numel(params[i]);
        float buf[512];
        COK(dlt_tensor_copy_to_host(params[i], buf, (size_t)n * sizeof(float)));
        for (int64_t j = 0; j < n && k < NVALS; j++) g_me->v[k++] = buf[j];
    }
    g_me->n = k;
    dlt_optimizer_destroy(opt);
    dlt_ddp_destroy(d);
    dlt_comm_destroy(c);
    dlt_module_destroy(m);
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
    dlt_ctx_destroy(ctx);
}

/* Trains the reference (one process, batch world*b) and the DDP run; compares. */
static void ddp_equivalence(int world, int64_t b, int accum, int small_buckets) {
    int ws[MAXR];
    train_cfg ref = {1, b * world, 6, accum, 0, 0};
    run_ranks(1, 1, train_rank, &ref, 60, ws);
    expect_clean(1, ws);
    static double want[NVALS];
    const int64_t n = SHM[0].n;
    memcpy(want, SHM[0].v, (size_t)n * sizeof *want);
    train_cfg cfg = {world, b, 6, accum, small_buckets, 1};
    run_ranks(world, world, train_rank, &cfg, 90, ws);
    expect_clean(world, ws);
    REQUIRE(n > 100 && SHM[0].n == n, "%lld vs %lld parameters", (long long)SHM[0].n, (long long)n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(SHM[0].v[i] - want[i]) / (1e-3 + fabs(want[i]));
        worst = e > worst ? e : worst;
    }
    CHECK(worst < 2e-5, "parameters differ from the single-process run: worst relative %.3g", worst);
    for (int r = 1; r < world; r++)
        CHECK(memcmp(SHM[r].v, SHM[0].v, (size_t)n * sizeof(double)) == 0,
              "rank %d's replica differs from rank 0's in its bits", r);
    if (accum > 1) /* no_sync's micro-step left each rank its own gradient */
        CHECK(SHM[0].elapsed[1] != SHM[1].elapsed[1], "no_sync: the first micro-step's gradients were averaged");
    printf("# %d ranks x batch %lld (accum %d): worst relative parameter difference %.2e\n", world,
           (long long)b, accum, worst);
}

static void test_ddp_2_ranks_equals_one_process(void) { ddp_equivalence(2, 8, 1, 0); }
static void test_ddp_4_ranks_small_buckets(void) { ddp_equivalence(4, 4, 1, 1); }
static void test_ddp_no_sync_accumulation(void) { ddp_equivalence(2, 4, 2, 1); }

/* A GPT with tied embedding/head weights (a leaf used twice in one step): N ranks of B
 * sequences equal one process of N*B (token loaders split by rows). SGD, not Adam: Adam
 * turns the rounding of near-zero gradients into whole steps. */
static void gpt_rank(int rank, int world, void *arg) {
    const int ddp = *(const int *)arg;
    dlt_ctx *ctx = cpu_ctx(3 + (uint64_t)rank);
    dlt_gpt_config cfg;
    COK(dlt_gpt_config_preset("tiny", &cfg));
    cfg.dropout = 0.0;
    dlt_module *m = NULL;
    COK(dlt_gpt_create(ctx, &cfg, &m));
    dlt_token_dataset *tds = NULL;
    dlt_token_loader *tl = NULL;
    COK(dlt_synthetic_tokens_create(ctx, 4000, (int32_t)cfg.vocab_size, 5, &tds));
    const int64_t B = ddp ? 2 : 2 * (int64_t)world;
    COK(dlt_token_loader_create(tds, B, 16, 17, &tl));
    dlt_comm *c = NULL;
    dlt_ddp *d = NULL;
    if (ddp) {
        COK(mk_comm(ctx, rank, world, 60000, &c));
        COK(dlt_token_loader_set_distributed(tl, world, rank));
        dlt_ddp_options o;
        dlt_ddp_options_default(&o);
        o.first_bucket_mb = o.bucket_cap_mb = 20000.0 / 1048576.0;
        COK(dlt_ddp_create_ex(c, m, &o, &d));
    }
    int32_t np = dlt_module_num_params(m);
    dlt_tensor **params = calloc((size_t)np, sizeof *params);
    COK(dlt_module_params(m, params, np, NULL));
    dlt_optimizer *opt = NULL;
    COK(dlt_sgd_create(params, np, 0.5, 0.9, 0, 0, 0, 0, &opt));
    for (int step = 0; step < 3; step++) {
        dlt_tensor *x = NULL, *y = NULL, *loss = NULL;
        COK(dlt_token_loader_next(tl, &x, &y));
        COK(dlt_optimizer_zero_grad(opt, 1));
        COK(dlt_gpt_forward(m, x, y, NULL, &loss));
        COK(dlt_backward(loss, NULL));
        COK(dlt_optimizer_step(opt));
        dlt_tensor_release(loss);
    }
    int64_t k = 0;
    for (int32_t i = 0; i < np; i++) {
        int64_t n = dlt_tensor_numel(params[i]);
        float *buf = malloc((size_t)n * sizeof *buf);
        COK(dlt_tensor_copy_to_host(params[i], buf, (size_t)n * sizeof *buf));
        for (int64_t j = 0; j < n && k < NVALS; j++) g_me->v[k++] = buf[j];
        free(buf);
    }
    g_me->n = k;
    if (d) g_me->elapsed[2] = dlt_ddp_num_buckets(d);
    free(params);
    dlt_optimizer_destroy(opt);
    dlt_ddp_destroy(d);
    dlt_comm_destroy(c);
    dlt_token_loader_destroy(tl);
    dlt_token_dataset_destroy(tds);
    dlt_module_destroy(m);
    dlt_ctx_destroy(ctx);
}

static void test_ddp_gpt_tied_weights(void) {
    int ws[MAXR], ddp = 0;
    run_ranks(2, 1, gpt_rank, &ddp, 120, ws); /* the reference: world 2 only sizes its batch */
    expect_clean(1, ws);
    static double want[NVALS];
    const int64_t n = SHM[0].n;
    memcpy(want, SHM[0].v, (size_t)n * sizeof *want);
    ddp = 1;
    run_ranks(2, 2, gpt_rank, &ddp, 120, ws);
    expect_clean(2, ws);
    REQUIRE(n > 1000 && SHM[0].n == n, "%lld vs %lld values", (long long)SHM[0].n, (long long)n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(SHM[0].v[i] - want[i]) / (1e-2 + fabs(want[i]));
        worst = e > worst ? e : worst;
    }
    CHECK(worst < 2e-5, "GPT parameters differ from the single-process run: worst relative %.3g", worst);
    CHECK(memcmp(SHM[1].v, SHM[0].v, (size_t)n * sizeof(double)) == 0, "the replicas differ");
    printf("# GPT tiny, 2 ranks x 2 sequences, %d buckets: worst relative parameter difference %.2e\n",
           (int)SHM[0].elapsed[2], worst);
}

/* The bucket assignment of PyTorch's DDP for known sizes (see the expectations). */
static void buckets_rank(int rank, int world, void *arg) {
    (void)arg;
    dlt_ctx *ctx = cpu_ctx(3);
    dlt_module *seq = NULL, *l = NULL;
    COK(dlt_sequential_create(ctx, &seq));
    const int64_t dims[] = {100, 100, 50, 10};
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "l%d", i);
        COK(dlt_linear_create(ctx, dims[i], dims[i + 1], 1, &l));
        COK(dlt_sequential_append(seq, name, l));
    }
    dlt_comm *c = NULL;
    COK(mk_comm(ctx, rank, world, 10000, &c));
    dlt_ddp_options o;
    dlt_ddp_options_default(&o);
    CC(o.size == sizeof o && o.broadcast_buffers == 1 && o.bucket_cap_mb == 25.0 && o.first_bucket_mb == 1.0,
       "DDP's defaults");
    dlt_ddp *d = NULL;
    COK(dlt_ddp_create(c, seq, &d));
    CC(dlt_ddp_num_buckets(d) == 1, "defaults: one bucket for 63 KB, got %d", dlt_ddp_num_buckets(d));
    dlt_ddp_destroy(d);
    /* parameters: w0 40000 B, b0 400, w1 20000, b1 200, w2 2000, b2 40. First bucket 30000 B:
     * {w0}; then 21000 B: {b0, w1, b1, w2} (closes at 22600 B, the first size >= the cap);
     * the rest {b2}; reversed. */
    o.first_bucket_mb = 30000.0 / 1048576.0;
    o.bucket_cap_mb = 21000.0 / 1048576.0;
    COK(dlt_ddp_create_ex(c, seq, &o, &d));
    const int32_t want_n[] = {1, 4, 1}, want_first[] = {5, 1, 0};
    const int64_t want_bytes[] = {40, 22600, 40000};
    CC(dlt_ddp_num_buckets(d) == 3, "%d buckets", dlt_ddp_num_buckets(d));
    for (int32_t i = 0; i < 3 && i < dlt_ddp_num_buckets(d); i++) {
        int32_t idx[8], n = 0;
        int64_t bytes = 0;
        COK(dlt_ddp_bucket(d, i, idx, 8, &n, &bytes));
        CC(n == want_n[i] && idx[0] == want_first[i] && bytes == want_bytes[i], "bucket %d: %d params from %d, %lld B",
           i, n, idx[0], (long long)bytes);
    }
    CST(dlt_ddp_bucket(d, 3, NULL, 0, NULL, NULL), DLT_ERR_INVALID_ARGUMENT, "bucket 3");
    dlt_ddp_destroy(d);
    /* a frozen parameter (requires_grad 0) is in no bucket and keeps having no gradient */
    dlt_tensor *frozen = NULL;
    COK(dlt_module_find(seq, "l0.bias", &frozen));
    COK(dlt_tensor_set_requires_grad(frozen, 0));
    COK(dlt_ddp_create_ex(c, seq, &o, &d));
    int32_t idx2[8], n2 = 0;
    COK(dlt_ddp_bucket(d, 1, idx2, 8, &n2, NULL));
    CC(n2 == 3 && idx2[0] == 2 && dlt_tensor_grad(frozen) == NULL, "frozen bias: bucket 1 has %d from %d", n2, idx2[0]);
    COK(dlt_tensor_set_requires_grad(frozen, 1));
    CST(dlt_ddp_bucket(NULL, 0, NULL, 0, NULL, NULL), DLT_ERR_NULL_POINTER, NULL);
    CST(dlt_ddp_no_sync(d, 2), DLT_ERR_INVALID_ARGUMENT, "0 or 1");
    dlt_ddp_destroy(d);
    /* misuse */
    dlt_ddp_options z;
    memset(&z, 0, sizeof z);
    CST(dlt_ddp_create_ex(c, seq, &z, &d), DLT_ERR_INVALID_ARGUMENT, "options.size");
    struct {
        dlt_ddp_options base;
        unsigned char extra[8];
    } newer;
    memset(&newer, 0xA5, sizeof newer);
    dlt_ddp_options_init(&newer.base, (uint32_t)sizeof newer.base);
    CC(newer.extra[0] == 0xA5 && newer.base.bucket_cap_mb == 25.0 && newer.base.first_bucket_mb == 1.0 &&
           newer.base.broadcast_buffers == 1, "dlt_ddp_options_init");
    dlt_ddp_options_init(&newer.base, (uint32_t)sizeof newer);
    newer.extra[0] = 7;
    CST(dlt_ddp_create_ex(c, seq, &newer.base, &d), DLT_ERR_NOT_SUPPORTED, "newer header");
    o.bucket_cap_mb = 0;
    CST(dlt_ddp_create_ex(c, seq, &o, &d), DLT_ERR_INVALID_ARGUMENT, "bucket_cap_mb");
    CST(dlt_ddp_create(NULL, seq, &d), DLT_ERR_NULL_POINTER, NULL);
    CST(dlt_ddp_create(c, NULL, &d), DLT_ERR_NULL_POINTER, NULL);
    dlt_ctx *other = cpu_ctx(3);
    dlt_module *elsewhere = NULL;
    COK(dlt_linear_create(other, 2, 2, 1, &elsewhere));
    CST(dlt_ddp_create(c, elsewhere, &d), DLT_ERR_CONTEXT_MISMATCH, "different contexts");
    dlt_module *relu = NULL;
    COK(dlt_relu_create(ctx, &relu));
    CST(dlt_ddp_create(c, relu, &d), DLT_ERR_INVALID_ARGUMENT, "no parameters");
    dlt_module_destroy(relu);
    dlt_module_destroy(elsewhere);
    dlt_ctx_destroy(other);
    dlt_ddp_destroy(NULL);
    CC(dlt_ddp_num_buckets(NULL) == 0, "NULL buckets");
    dlt_comm_destroy(c);
    dlt_module_destroy(seq);
    dlt_ctx_destroy(ctx);
}

static void test_ddp_buckets_as_pytorch(void) {
    int ws[1];
    run_ranks(1, 1, buckets_rank, NULL, 60, ws);
    expect_clean(1, ws);
}

/* Different models on the ranks: both fail with the first parameter that differs. */
static void model_mismatch_rank(int rank, int world, void *arg) {
    (void)arg;
    dlt_ctx *ctx = cpu_ctx(3);
    dlt_module *seq = NULL, *l = NULL;
    COK(dlt_sequential_create(ctx, &seq));
    COK(dlt_linear_create(ctx, 4, 4, 1, &l));
    COK(dlt_sequential_append(seq, "a", l));
    COK(dlt_linear_create(ctx, 4, rank == 1 ? 3 : 2, 1, &l));
    COK(dlt_sequential_append(seq, "b", l));
    dlt_comm *c = NULL;
    COK(mk_comm(ctx, rank, world, 30000, &c));
    dlt_ddp *d = NULL;
    CST(dlt_ddp_create(c, seq, &d), DLT_ERR_SHAPE, "'b.weight'");
    CC(d == NULL, "a failed create set out");
    COK(dlt_comm_barrier(c)); /* the communicator is fine */
    dlt_comm_destroy(c);
    dlt_module_destroy(seq);
    dlt_ctx_destroy(ctx);
}

static void test_ddp_different_models_refused(void) {
    int ws[MAXR];
    run_ranks(2, 2, model_mismatch_rank, NULL, 60, ws);
    expect_clean(2, ws);
}

/* Two models on one context, each with its DDP: a backward through one leaves the other's
 * gradients alone (no zeros launched for it). */
static void two_models_rank(int rank, int world, void *arg) {
    (void)arg;
    dlt_ctx *ctx = cpu_ctx(9 + (uint64_t)rank);
    dlt_module *a = NULL, *b = NULL;
    COK(dlt_linear_create(ctx, 3, 2, 1, &a));
    COK(dlt_linear_create(ctx, 3, 2, 1, &b));
    dlt_comm *c = NULL;
    dlt_ddp *da = NULL, *db = NULL;
    COK(mk_comm(ctx, rank, world, 30000, &c));
    COK(dlt_ddp_create(c, a, &da));
    COK(dlt_ddp_create(c, b, &db));
    float xh[3] = {1.0f + rank, 2.0f, -1.0f};
    int64_t xs[2] = {1, 3};
    dlt_tensor *x = NULL, *y = NULL, *s = NULL, *wa = NULL, *wb = NULL;
    COK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, 0, xh, sizeof xh, &x));
    COK(dlt_ddp_forward(da, x, &y));
    COK(dlt_sum(y, &s));
    COK(dlt_backward(s, NULL));
    COK(dlt_module_find(a, "weight", &wa));
    COK(dlt_module_find(b, "weight", &wb));
    double g = 0;
    COK(dlt_tensor_get(dlt_tensor_grad(wa), 0, &g));
    /* d(sum)/dw[0][0] = x[0], averaged over the ranks: (1 + 2) / 2 on 2 ranks */
    CC(g == (1.0 + world) / 2.0, "A's gradient %g", g);
    CC(dlt_tensor_grad(wb) == NULL, "B got a gradient from A's backward");
    int32_t during = 0, after = 0;
    COK(dlt_ddp_overlap(db, &during, &after));
    CC(during == 0 && after == 0, "B launched %d + %d buckets", during, after);
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    dlt_tensor_release(s);
    dlt_ddp_destroy(da);
    dlt_ddp_destroy(db);
    dlt_comm_destroy(c);
    dlt_module_destroy(a);
    dlt_module_destroy(b);
    dlt_ctx_destroy(ctx);
}

static void test_ddp_two_models_one_context(void) {
    int ws[MAXR];
    run_ranks(2, 2, two_models_rank, NULL, 60, ws);
    expect_clean(2, ws);
}

/* =========================================================================================
 * The GradScaler: an inf on one rank skips the step on every rank
 * ======================================================================================= */

static void scaler_rank(int rank, int world, void *arg) {
    const int agree = *(const int *)arg;
    dlt_ctx *ctx = cpu_ctx(5);
    dlt_module *lin = NULL;
    COK(dlt_linear_create(ctx, 4, 2, 1, &lin));
    dlt_tensor *params[2];
    int32_t np = 0;
    COK(dlt_module_params(lin, params, 2, &np));
    dlt_comm *c = NULL;
    dlt_ddp *d = NULL;
    COK(mk_comm(ctx, rank, world, 30000, &c));
    COK(dlt_ddp_create(c, lin, &d));
    dlt_optimizer *opt = NULL;
    dlt_grad_scaler *s = NULL;
    COK(dlt_sgd_create(params, np, 0.1, 0, 0, 0, 0, 0, &opt));
    COK(dlt_grad_scaler_create(ctx, 1024.0, 2.0, 0.5, 2, 1, &s));
    if (agree) COK(dlt_grad_scaler_set_comm(s, c));
    float xh[8];
    for (int i = 0; i < 8; i++) xh[i] = (float)(0.25 * (i + 1) * (rank + 1));
    int64_t xs[2] = {2, 4}, ys = 2;
    int64_t yh[2] = {0, 1};
    dlt_tensor *x = NULL, *y = NULL;
    COK(dlt_tensor_from_host(ctx, DLT_F32, xs, 2, 0, xh, sizeof xh, &x));
    COK(dlt_tensor_from_host(ctx, DLT_I64, &ys, 1, 0, yh, sizeof yh, &y));
    for (int step = 0; step < 6; step++) {
        dlt_tensor *logits = NULL, *loss = NULL, *scaled = NULL;
        COK(dlt_optimizer_zero_grad(opt, 1));
        COK(dlt_ddp_forward(d, x, &logits));
        COK(dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss));
        COK(dlt_grad_scaler_scale(s, loss, &scaled));
        COK(dlt_backward(scaled, NULL));
        /* after the averaging: only this rank sees the inf */
        if ((step == 1 && rank == 1) || (step == 3 && rank == 0))
            COK(dlt_tensor_fill(dlt_tensor_grad(params[0]), INFINITY));
        COK(dlt_grad_scaler_step(s, opt));
        COK(dlt_grad_scaler_update(s));
        int32_t applied = -1;
        double scale = 0;
        COK(dlt_optimizer_last_step_applied(opt, &applied));
        COK(dlt_grad_scaler_get_scale(s, &scale));
        g_me->v[2 * step] = applied;
        g_me->v[2 * step + 1] = scale;
        dlt_tensor_release(logits);
        dlt_tensor_release(loss);
        dlt_tensor_release(scaled);
    }
    float w[8];
    COK(dlt_tensor_copy_to_host(params[0], w, sizeof w));
    for (int i = 0; i < 8; i++) g_me->v[12 + i] = w[i];
    g_me->n = 20;
    COK(dlt_grad_scaler_set_comm(s, NULL));
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    dlt_grad_scaler_destroy(s);
    dlt_optimizer_destroy(opt);
    dlt_ddp_destroy(d);
    dlt_comm_destroy(c);
    dlt_module_destroy(lin);
    dlt_ctx_destroy(ctx);
}

static void test_scaler_skips_the_same_steps_everywhere(void) {
    int ws[MAXR], agree = 1;
    run_ranks(2, 2, scaler_rank, &agree, 60, ws);
    expect_clean(2, ws);
    static const double want_applied[6] = {1, 0, 1, 0, 1, 1};
    for (int r = 0; r < 2; r++)
        for (int s = 0; s < 6; s++)
            CHECK(SHM[r].v[2 * s] == want_applied[s], "rank %d step %d applied %g", r, s, SHM[r].v[2 * s]);
    CHECK(SHM[0].v[3] == 512 && SHM[0].v[7] == 256, "scale backed off: %g %g", SHM[0].v[3], SHM[0].v[7]);
    CHECK(memcmp(SHM[0].v, SHM[1].v, 20 * sizeof(double)) == 0, "ranks disagree on steps, scale or weights");
    /* the control: without the agreement the ranks part ways (this test can fail) */
    agree = 0;
    run_ranks(2, 2, scaler_rank, &agree, 60, ws);
    expect_clean(2, ws);
    CHECK(SHM[0].v[2] != SHM[1].v[2], "without set_comm both ranks still skipped step 1");
    CHECK(memcmp(SHM[0].v + 12, SHM[1].v + 12, 8 * sizeof(double)) != 0, "without set_comm the weights agree");
}

/* =========================================================================================
 * Checkpoints: written once, every rank gets rank 0's outcome, loadable anywhere
 * ======================================================================================= */

static char g_dir[256];

static void checkpoint_rank(int rank, int world, void *arg) {
    (void)arg;
    dlt_ctx *ctx = cpu_ctx(7 + (uint64_t)rank);
    dlt_module *m = NULL;
    COK(make_mlp(ctx, &m));
    char path[300];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", g_dir);
    if (world == 1) { /* a later single process loads it */
        COK(dlt_checkpoint_load(path, m, NULL, NULL, NULL, NULL));
    } else {
        dlt_comm *c = NULL;
        dlt_ddp *d = NULL;
        COK(mk_comm(ctx, rank, world, 30000, &c));
        COK(dlt_ddp_create(c, m, &d));
        COK(dlt_comm_checkpoint_save(c, path, m, NULL, NULL, 1, 2));
        CST(dlt_comm_checkpoint_save(c, "/nonexistent-dir/x.safetensors", m, NULL, NULL, 1, 2), DLT_ERR_IO,
            rank ? "rank 0 could not write the checkpoint" : "nonexistent-dir");
        dlt_ddp_destroy(d);
        dlt_comm_destroy(c);
    }
    dlt_tensor *w = NULL;
    COK(dlt_module_find(m, "fc0.weight", &w));
    float buf[96];
    COK(dlt_tensor_copy_to_host(w, buf, sizeof buf));
    for (int i = 0; i < 96; i++) g_me->v[i] = buf[i];
    g_me->n = 96;
    dlt_module_destroy(m);
    dlt_ctx_destroy(ctx);
}

static void test_checkpoint_written_once_loads_anywhere(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dlt_test_dist_%d", (int)getpid());
    REQUIRE(mkdir(g_dir, 0700) == 0, "mkdir %s", g_dir);
    int ws[MAXR];
    run_ranks(3, 3, checkpoint_rank, NULL, 60, ws);
    expect_clean(3, ws);
    static double saved[96];
    memcpy(saved, SHM[0].v, sizeof saved);
    CHECK(memcmp(SHM[1].v, saved, sizeof saved) == 0, "the replicas differ");
    char path[300];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", g_dir);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size > 0, "no checkpoint at %s", path);
    run_ranks(1, 1, checkpoint_rank, NULL, 60, ws);
    expect_clean(1, ws);
    CHECK(memcmp(SHM[0].v, saved, sizeof saved) == 0, "the single process did not load the DDP weights");
    /* only the file: no temporary left behind by the ranks */
    DIR *dir = opendir(g_dir);
    int files = 0;
    for (struct dirent *e; dir && (e = readdir(dir));) files += e->d_name[0] != '.';
    if (dir) closedir(dir);
    CHECK(files == 1, "%d files in %s", files, g_dir);
    unlink(path);
    rmdir(g_dir);
}

int main(void) {
    if (!dist_init()) return 0;
    RUN(test_ddp_2_ranks_equals_one_process);
    RUN(test_ddp_4_ranks_small_buckets);
    RUN(test_ddp_no_sync_accumulation);
    RUN(test_ddp_gpt_tied_weights);
    RUN(test_ddp_buckets_as_pytorch);
    RUN(test_ddp_different_models_refused);
    RUN(test_ddp_two_models_one_context);
    RUN(test_scaler_skips_the_same_steps_everywhere);
    RUN(test_checkpoint_written_once_loads_anywhere);
    return th_done();
}
