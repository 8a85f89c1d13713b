/*
 * test_dist_comm.c - the communicator on the CPU (dist.h), several processes: the launchers'
 * environment (torchrun's and mpirun's variables), the options and misuse on one rank, every
 * collective on 2, 3 and 4 ranks against float64 references (all ranks bitwise equal), the
 * NCCL entry points without a GPU. Ranks that fail or disagree: test_dist_failures.c; how the
 * ranks are forked and report: dist_common.h.
 */
#include "dist_common.h"

static uint64_t hash_doubles(const double *v, int64_t n) {
    uint64_t h = 1469598103934665603ULL;
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < (size_t)n * sizeof *v; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* =========================================================================================
 * The environment and option checks
 * ======================================================================================= */

static void env_rank(int rank, int world, void *arg) {
    (void)rank, (void)world, (void)arg;
    static const char *vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    int32_t r = -9, w = -9, l = -9;
    COK(dlt_dist_env(&r, &w, &l));
    CC(r == 0 && w == 1 && l == 0, "plain run: %d %d %d", r, w, l);
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "4", 1);
    COK(dlt_dist_env(&r, &w, &l));
    CC(r == 3 && w == 4 && l == 3, "torchrun without LOCAL_RANK: %d %d %d", r, w, l);
    setenv("LOCAL_RANK", "1", 1);
    COK(dlt_dist_env(&r, &w, NULL));
    COK(dlt_dist_env(NULL, NULL, &l));
    CC(l == 1, "LOCAL_RANK: %d", l);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("LOCAL_RANK");
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "5", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    COK(dlt_dist_env(&r, &w, &l));
    CC(r == 2 && w == 5 && l == 0, "mpirun: %d %d %d", r, w, l);
    setenv("OMPI_COMM_WORLD_RANK", "5", 1);
    CST(dlt_dist_env(&r, &w, &l), DLT_ERR_INVALID_ARGUMENT, "outside 0..4");
    setenv("OMPI_COMM_WORLD_RANK", "x1", 1);
    CST(dlt_dist_env(&r, &w, &l), DLT_ERR_INVALID_ARGUMENT, "not a number");
    unsetenv("OMPI_COMM_WORLD_RANK");
    CST(dlt_dist_env(&r, &w, &l), DLT_ERR_INVALID_ARGUMENT, "is set but");
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "0", 1);
    CST(dlt_dist_env(&r, &w, &l), DLT_ERR_INVALID_ARGUMENT, ">= 1");
    CC(r == 2 && w == 5, "a failed call changed the outputs: %d %d", r, w);
}

static void test_env(void) {
    int ws[1];
    run_ranks(1, 1, env_rank, NULL, 30, ws);
    expect_clean(1, ws);
}

static void options_rank(int rank, int world, void *arg) {
    (void)rank, (void)world, (void)arg;
    dlt_ctx *ctx = cpu_ctx(1);
    CC(ctx != NULL, "no context");
    if (!ctx) return;
    dlt_comm *c = NULL;
    dlt_comm_options o;
    dlt_comm_options_default(&o);
    CC(o.size == sizeof o && o.rank == -1 && o.world_size == -1 && o.master_port == 0 && o.timeout_ms == 0 &&
           o.master_addr == NULL,
       "defaults");
    CST(dlt_comm_create_ex(NULL, &o, &c), DLT_ERR_NULL_POINTER, "ctx");
    CST(dlt_comm_create_ex(ctx, &o, NULL), DLT_ERR_NULL_POINTER, "out");
    o.rank = 0;
    o.world_size = 0;
    CST(dlt_comm_create_ex(ctx, &o, &c), DLT_ERR_INVALID_ARGUMENT, "world size 0");
    o.world_size = 2;
    o.rank = 2;
    CST(dlt_comm_create_ex(ctx, &o, &c), DLT_ERR_INVALID_ARGUMENT, "rank 2");
    o.rank = 0;
    o.master_port = 70000;
    CST(dlt_comm_create_ex(ctx, &o, &c), DLT_ERR_INVALID_ARGUMENT, "70000");
    o.master_port = 0;
    o.timeout_ms = -5;
    CST(dlt_comm_create_ex(ctx, &o, &c), DLT_ERR_INVALID_ARGUMENT, "timeout");
    o.timeout_ms = 0;
    setenv("DLT_DIST_TIMEOUT", "soon", 1);
    CST(dlt_comm_create_ex(ctx, &o, &c), DLT_ERR_INVALID_ARGUMENT, "DLT_DIST_TIMEOUT");
    unsetenv("DLT_DIST_TIMEOUT");
    dlt_comm_options z;
    memset(&z, 0, sizeof z);
    CST(dlt_comm_create_ex(ctx, &z, &c), DLT_ERR_INVALID_ARGUMENT, "options.size");
    CC(c == NULL, "a failed create set out");
    /* the option-struct ABI (core.h): _init writes only the caller's size; a newer header's
     * struct gets its unknown bytes zeroed, and one that sets them is refused */
    struct {
        dlt_comm_options base;
        unsigned char extra[8];
    } newer;
    memset(&newer, 0xA5, sizeof newer);
    dlt_comm_options_init(&newer.base, (uint32_t)sizeof newer.base);
    CC(newer.extra[0] == 0xA5 && newer.extra[7] == 0xA5 && newer.base.rank == -1 &&
           newer.base.size == sizeof newer.base, "_init wrote past the caller's struct");
    dlt_comm_options_init(&newer.base, (uint32_t)sizeof newer);
    CC(newer.extra[0] == 0 && newer.extra[7] == 0 && newer.base.size == sizeof newer, "newer bytes not zeroed");
    newer.extra[3] = 1;
    CST(dlt_comm_create_ex(ctx, &newer.base, &c), DLT_ERR_NOT_SUPPORTED, "newer header");
    CC(c == NULL, "a refused create set out");
    /* world 1: no network, every collective is the identity */
    dlt_comm_options_default(&o);
    o.rank = 0;
    o.world_size = 1;
    COK(dlt_comm_create_ex(ctx, &o, &c));
    CC(dlt_comm_rank(c) == 0 && dlt_comm_world_size(c) == 1 && dlt_comm_ctx(c) == ctx, "getters");
    CC(strcmp(dlt_comm_backend(c), "tcp") == 0, "backend %s", dlt_comm_backend(c));
    CC(dlt_comm_rank(NULL) == -1 && dlt_comm_world_size(NULL) == 0 && dlt_comm_ctx(NULL) == NULL &&
           strcmp(dlt_comm_backend(NULL), "") == 0,
       "NULL getters");
    float v[3] = {1.5f, -2.0f, 3.0f}, back[3];
    int64_t n3 = 3, n1 = 1;
    dlt_tensor *t = NULL, *g = NULL, *ti = NULL;
    COK(dlt_tensor_from_host(ctx, DLT_F32, &n3, 1, 0, v, sizeof v, &t));
    COK(dlt_tensor_empty(ctx, DLT_F32, &n3, 1, 0, &g));
    COK(dlt_tensor_empty(ctx, DLT_I32, &n1, 1, 0, &ti));
    COK(dlt_comm_all_reduce(c, t, DLT_REDUCE_AVG));
    COK(dlt_comm_broadcast(c, t, 0));
    COK(dlt_comm_all_gather(c, g, t));
    COK(dlt_tensor_copy_to_host(g, back, sizeof back));
    CC(memcmp(back, v, sizeof v) == 0, "world-1 all_gather is a copy");
    COK(dlt_comm_barrier(c));
    COK(dlt_comm_check(c));
    /* misuse of the collectives: clear statuses, nothing changed */
    CST(dlt_comm_all_reduce(NULL, t, 0), DLT_ERR_NULL_POINTER, "c");
    CST(dlt_comm_all_reduce(c, NULL, 0), DLT_ERR_NULL_POINTER, NULL);
    CST(dlt_comm_all_reduce(c, t, 9), DLT_ERR_INVALID_ARGUMENT, "unknown reduction 9");
    CST(dlt_comm_all_reduce(c, ti, DLT_REDUCE_AVG), DLT_ERR_DTYPE, "AVG");
    CST(dlt_comm_broadcast(c, t, 1), DLT_ERR_INVALID_ARGUMENT, "root 1");
    CST(dlt_comm_all_gather(c, ti, t), DLT_ERR_DTYPE, NULL);
    CST(dlt_comm_reduce_scatter(c, t, t, DLT_REDUCE_SUM), DLT_ERR_INVALID_ARGUMENT, "share memory");
    dlt_ctx *other = cpu_ctx(2);
    dlt_tensor *elsewhere = NULL;
    COK(dlt_tensor_zeros(other, DLT_F32, &n3, 1, 0, &elsewhere));
    CST(dlt_comm_all_reduce(c, elsewhere, DLT_REDUCE_SUM), DLT_ERR_CONTEXT_MISMATCH, "another context");
    COK(dlt_tensor_copy_to_host(t, back, sizeof back));
    CC(memcmp(back, v, sizeof v) == 0, "a failed call changed the tensor");
    CST(dlt_comm_create_nccl(ctx, 0, 1, (const uint8_t *)v, 128, &c), DLT_ERR_NOT_SUPPORTED, "CPU context");
    CST(dlt_grad_scaler_set_comm(NULL, c), DLT_ERR_NULL_POINTER, NULL);
    dlt_comm_destroy(NULL);
    dlt_tensor_release(elsewhere);
    dlt_ctx_destroy(other);
    dlt_tensor_release(t);
    dlt_tensor_release(g);
    dlt_tensor_release(ti);
    dlt_comm_destroy(c);
    dlt_ctx_destroy(ctx);
}

static void test_options_and_misuse(void) {
    int ws[1];
    run_ranks(1, 1, options_rank, NULL, 60, ws);
    expect_clean(1, ws);
}

/* =========================================================================================
 * Collectives against float64 references
 * ======================================================================================= */

/* Rank r's element i: values of both signs and magnitudes, exact in fp16 and bf16 for the
 * first 256 elements. */
static double input(int r, int64_t i) {
    if (i < 256) return (double)((int)((i * 7 + r * 13) % 41) - 20) / 4.0;
    return sin((double)i * 0.013 + r * 1.7) * (1.0 + (double)(i % 97) / 10.0);
}

static void fill_host(void *dst, int32_t dtype, int r, int64_t n, int64_t base) {
    for (int64_t i = 0; i < n; i++) {
        double x = input(r, base + i);
        switch (dtype) {
        case DLT_F32: ((float *)dst)[i] = (float)x; break;
        case DLT_I32: ((int32_t *)dst)[i] = (int32_t)llround(x * 8); break;
        case DLT_I64: ((int64_t *)dst)[i] = (int64_t)llround(x * 8) * 1000000007LL; break;
        default: break;
        }
    }
}

/* The element as the rank's tensor holds it, in double. */
static double held(int32_t dtype, int r, int64_t i) {
    double x = input(r, i);
    switch (dtype) {
    case DLT_F32: return (double)(float)x;
    case DLT_F16:
    case DLT_BF16: return x; /* only the exact first 256 are used for half types */
    case DLT_I32: return (double)(int32_t)llround(x * 8);
    default: return (double)((int64_t)llround(x * 8) * 1000000007LL);
    }
}

static double ref_reduce(int32_t dtype, int op, int world, int64_t i) {
    double acc = held(dtype, 0, i);
    for (int r = 1; r < world; r++) {
        double v = held(dtype, r, i);
        acc = op == DLT_REDUCE_MAX ? fmax(acc, v) : op == DLT_REDUCE_MIN ? fmin(acc, v) : acc + v;
    }
    return op == DLT_REDUCE_AVG ? acc / world : acc;
}

static dlt_status make_input(dlt_ctx *ctx, int32_t dtype, int r, int64_t n, int64_t base, dlt_tensor **out) {
    if (dtype == DLT_F16 || dtype == DLT_BF16) { /* through f32, exact */
        dlt_tensor *f = NULL;
        dlt_status st = make_input(ctx, DLT_F32, r, n, base, &f);
        if (st == DLT_OK) st = dlt_tensor_cast(f, dtype, out);
        dlt_tensor_release(f);
        return st;
    }
    void *h = malloc((size_t)(n ? n : 1) * 8);
    fill_host(h, dtype, r, n, base);
    dlt_status st = dlt_tensor_from_host(ctx, dtype, &n, 1, 0, h, (size_t)n * dlt_dtype_size(dtype), out);
    free(h);
    return st;
}

static dlt_status read_doubles(const dlt_tensor *t, double *out) {
    const int64_t n = dlt_tensor_numel(t);
    if (dlt_tensor_dtype(t) == DLT_I32 || dlt_tensor_dtype(t) == DLT_I64) {
        void *h = malloc((size_t)(n ? n : 1) * 8);
        dlt_status st = dlt_tensor_copy_to_host(t, h, (size_t)n * dlt_dtype_size(dlt_tensor_dtype(t)));
        for (int64_t i = 0; i < n && st == DLT_OK; i++)
            out[i] = dlt_tensor_dtype(t) == DLT_I32 ? ((int32_t *)h)[i] : (double)((int64_t *)h)[i];
        free(h);
        return st;
    }
    dlt_tensor *f = NULL;
    dlt_status st = dlt_tensor_cast(t, DLT_F32, &f); /* exact for the values used */
    float *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(f, h, (size_t)n * sizeof *h);
    for (int64_t i = 0; i < n && st == DLT_OK; i++) out[i] = h[i];
    free(h);
    dlt_tensor_release(f);
    return st;
}

static double tol_for(int32_t dtype, double ref, int world) {
    switch (dtype) {
    case DLT_F32: return 4e-7 * world * (fabs(ref) + 1e-3) + 1e-6;
    case DLT_F16: return 2e-3 * world * (fabs(ref) + 0.25);
    case DLT_BF16: return 1.6e-2 * world * (fabs(ref) + 0.25);
    default: return 0;
    }
}

static void collectives_rank(int rank, int world, void *arg) {
    (void)arg;
    dlt_ctx *ctx = cpu_ctx(1);
    dlt_comm *c = NULL;
    COK(mk_comm(ctx, rank, world, 60000, &c));
    CC(dlt_comm_rank(c) == rank && dlt_comm_world_size(c) == world, "getters");
    const int32_t dtypes[] = {DLT_F32, DLT_F16, DLT_BF16, DLT_I32, DLT_I64};
    const int64_t sizes[] = {0, 1, 3, 257, 100003};
    double *got = malloc(2 * 100003 * sizeof *got * (size_t)world);
    int64_t hashes = 0;
    uint64_t h = 1469598103934665603ULL;
    for (size_t di = 0; di < 5; di++)
        for (size_t si = 0; si < 5; si++)
            for (int op = 0; op < 4; op++) {
                const int32_t dt = dtypes[di];
                int64_t n = sizes[si];
                if ((dt == DLT_F16 || dt == DLT_BF16) && n > 256) n = 256;
                if (op == DLT_REDUCE_AVG && (dt == DLT_I32 || dt == DLT_I64)) continue;
                dlt_tensor *t = NULL;
                COK(make_input(ctx, dt, rank, n, 0, &t));
                COK(dlt_comm_all_reduce(c, t, op));
                COK(read_doubles(t, got));
                for (int64_t i = 0; i < n; i++) {
                    double ref = ref_reduce(dt, op, world, i);
                    CC(fabs(got[i] - ref) <= tol_for(dt, ref, world), "all_reduce %s op %d n %lld [%lld]: %.9g vs %.9g",
                       dlt_dtype_name(dt), op, (long long)n, (long long)i, got[i], ref);
                }
                h = (h ^ hash_doubles(got, n)) * 1099511628211ULL;
                hashes++;
                dlt_tensor_release(t);
            }
    /* broadcast from the last rank, all_gather, reduce_scatter (f32 and i64) */
    for (size_t si = 0; si < 5; si++) {
        const int64_t n = sizes[si];
        dlt_tensor *t = NULL, *all = NULL, *part = NULL, *big = NULL;
        COK(make_input(ctx, DLT_F32, rank, n, 0, &t));
        COK(dlt_comm_broadcast(c, t, world - 1));
        COK(read_doubles(t, got));
        for (int64_t i = 0; i < n; i++) CC(got[i] == held(DLT_F32, world - 1, i), "broadcast [%lld]", (long long)i);
        dlt_tensor_release(t);
        COK(make_input(ctx, DLT_I64, rank, n, 0, &t));
        int64_t wn = n * world;
        COK(dlt_tensor_empty(ctx, DLT_I64, &wn, 1, 0, &all));
        COK(dlt_comm_all_gather(c, all, t));
        COK(read_doubles(all, got));
        for (int r = 0; r < world; r++)
            for (int64_t i = 0; i < n; i++)
                CC(got[r * n + i] == held(DLT_I64, r, i), "all_gather block %d [%lld]", r, (long long)i);
        /* reduce_scatter: rank r's input block b is element b*n + i of its sequence */
        COK(make_input(ctx, DLT_F32, rank, wn, 0, &big));
        COK(dlt_tensor_empty(ctx, DLT_F32, &n, 1, 0, &part));
        COK(dlt_comm_reduce_scatter(c, part, big, DLT_REDUCE_SUM));
        COK(read_doubles(part, got));
        for (int64_t i = 0; i < n; i++) {
            double ref = ref_reduce(DLT_F32, DLT_REDUCE_SUM, world, (int64_t)rank * n + i);
            CC(fabs(got[i] - ref) <= tol_for(DLT_F32, ref, world), "reduce_scatter [%lld]: %.9g vs %.9g",
               (long long)i, got[i], ref);
        }
        COK(dlt_comm_reduce_scatter(c, part, big, DLT_REDUCE_MAX));
        COK(read_doubles(part, got));
        for (int64_t i = 0; i < n; i++)
            CC(got[i] == ref_reduce(DLT_F32, DLT_REDUCE_MAX, world, (int64_t)rank * n + i), "reduce_scatter max");
        dlt_tensor_release(t);
        dlt_tensor_release(all);
        dlt_tensor_release(part);
        dlt_tensor_release(big);
    }
    COK(dlt_comm_barrier(c));
    g_me->n = 1;
    g_me->v[0] = (double)(h >> 11); /* every rank must hold the same bits */
    g_me->elapsed[0] = (double)hashes;
    free(got);
    dlt_comm_destroy(c);
    dlt_ctx_destroy(ctx);
}

static void collectives_on(int world) {
    int ws[MAXR];
    run_ranks(world, world, collectives_rank, NULL, 120, ws);
    expect_clean(world, ws);
    for (int r = 1; r < world; r++)
        CHECK(SHM[r].v[0] == SHM[0].v[0], "rank %d's all_reduce results differ in their bits from rank 0's", r);
}

static void test_collectives_2_ranks(void) { collectives_on(2); }
static void test_collectives_3_ranks(void) { collectives_on(3); }
static void test_collectives_4_ranks(void) { collectives_on(4); }

/* =========================================================================================
 * NCCL entry points without a GPU
 * ======================================================================================= */

static void nccl_rank(int rank, int world, void *arg) {
    (void)rank, (void)world, (void)arg;
    int32_t v = 0;
    uint8_t id[DLT_NCCL_UNIQUE_ID_BYTES];
    CST(dlt_nccl_version(NULL), DLT_ERR_NULL_POINTER, NULL);
    CST(dlt_nccl_unique_id(id, 10), DLT_ERR_INVALID_ARGUMENT, "128 bytes");
    dlt_status st = dlt_nccl_version(&v);
    g_me->st[0] = st;
    snprintf(g_me->stmsg[0], sizeof g_me->stmsg[0], "%s", dlt_last_error());
    if (!dlt_built_with_cuda()) {
        CC(st == DLT_ERR_NOT_SUPPORTED && strstr(dlt_last_error(), "without CUDA"), "%d: %s", st, dlt_last_error());
        return;
    }
    if (st == DLT_ERR_NCCL) { /* no libnccl on this machine: the message says what to do */
        CC(strstr(dlt_last_error(), "libnccl") || strstr(dlt_last_error(), "NCCL"), "%s", dlt_last_error());
        return;
    }
    CC(st == DLT_OK && v >= 21000, "version %d: %s", v, dlt_last_error());
    memset(id, 0, sizeof id);
    COK(dlt_nccl_unique_id(id, sizeof id));
    int nonzero = 0;
    for (size_t i = 0; i < sizeof id; i++) nonzero |= id[i];
    CC(nonzero, "an all-zero unique id");
    g_me->elapsed[0] = v;
}

static void test_nccl_loads_without_a_gpu(void) {
    int ws[1];
    run_ranks(1, 1, nccl_rank, NULL, 60, ws);
    expect_clean(1, ws);
    if (dlt_built_with_cuda() && SHM[0].st[0] == DLT_ERR_NCCL) SKIP("no NCCL library here: %.200s", SHM[0].stmsg[0]);
    if (SHM[0].elapsed[0] > 0) printf("# NCCL %d loaded by dlopen\n", (int)SHM[0].elapsed[0]);
}

int main(void) {
    if (!dist_init()) return 0;
    RUN(test_env);
    RUN(test_options_and_misuse);
    RUN(test_collectives_2_ranks);
    RUN(test_collectives_3_ranks);
    RUN(test_collectives_4_ranks);
    RUN(test_nccl_loads_without_a_gpu);
    return th_done();
}
