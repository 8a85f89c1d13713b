/*
 * test_dist.c - several processes on the CPU (dist.h): the communicator and its collectives
 * against float64 references, DDP against one process with the global batch, the
 * GradScaler's agreement, the distributed sampler, failures (a killed rank, a silent one, a
 * rank that never joins, misuse across ranks), checkpoints.
 *
 * Each case forks its ranks from this process (fork, no exec: the parent never calls the
 * library, so no OpenMP pool is forked). The ranks meet through the TCP rendezvous on a
 * free port of 127.0.0.1 and write what they saw into shared memory; the parent compares
 * and reports TAP. Every rank has an alarm and the parent kills ranks that outlive their
 * case's deadline, so a hang fails a case instead of the suite.
 */
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"

#define MAXR 8
#define NVALS 65536

typedef struct rank_out {
    int32_t failed;
    char msg[600];
    dlt_status st[8];
    char stmsg[4][400];
    double elapsed[4];
    int64_t n;
    double v[NVALS];
} rank_out;

static rank_out *SHM;
static int g_port;

/* ---- the ranks' side ---- */

static rank_out *g_me;
#define CC(cond, ...)                                                                         \
    do {                                                                                      \
        if (!(cond) && !g_me->failed) {                                                       \
            g_me->failed = 1;                                                                 \
            int k_ = snprintf(g_me->msg, sizeof g_me->msg, "line %d: %s: ", __LINE__, #cond);  \
            if (k_ > 0 && (size_t)k_ < sizeof g_me->msg)                                      \
                snprintf(g_me->msg + k_, sizeof g_me->msg - (size_t)k_, __VA_ARGS__);         \
        }                                                                                     \
    } while (0)
#define COK(call)                                                                             \
    do {                                                                                      \
        dlt_status s_ = (call);                                                               \
        if (s_ != DLT_OK) {                                                                   \
            CC(0, "%s -> %d: %s", #call, s_, dlt_last_error());                               \
            return;                                                                           \
        }                                                                                     \
    } while (0)
/* A call that must fail with code (message non-empty, containing `has` when given). */
#define CST(call, code, has)                                                                  \
    do {                                                                                      \
        dlt_clear_error();                                                                    \
        dlt_status s_ = (call);                                                               \
        const char *h_ = (has);                                                               \
        CC(s_ == (code) && dlt_last_error()[0] && (!h_ || strstr(dlt_last_error(), h_)),      \
           "%s -> %d (want %d): %s", #call, s_, (int)(code), dlt_last_error());               \
    } while (0)

static dlt_ctx *cpu_ctx(uint64_t seed) {
    dlt_ctx *ctx = NULL;
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx) != DLT_OK) return NULL;
    if (dlt_ctx_set_seed(ctx, seed) != DLT_OK) return NULL;
    return ctx;
}

static dlt_status mk_comm(dlt_ctx *ctx, int rank, int world, int64_t timeout_ms, dlt_comm **c) {
    dlt_comm_options o;
    dlt_comm_options_default(&o);
    o.rank = rank;
    o.world_size = world;
    o.master_port = g_port;
    o.master_addr = "127.0.0.1";
    o.timeout_ms = timeout_ms;
    return dlt_comm_create_ex(ctx, &o, c);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the parent's side ---- */

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port ? port : 20000 + (int)(getpid() % 20000);
}

typedef void (*rank_fn)(int rank, int world, void *arg);

/* Runs fn on `world` forked ranks (the first `procs` of them: a missing rank is a test) and
 * returns each one's wait status in ws. */
static void run_ranks(int world, int procs, rank_fn fn, void *arg, int timeout_s, int *ws) {
    pid_t pids[MAXR];
    memset(SHM, 0, MAXR * sizeof *SHM);
    g_port = free_port();
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < procs; r++) {
        pid_t p = fork();
        if (p == 0) {
            alarm((unsigned)timeout_s + 5);
            g_me = &SHM[r];
            fn(r, world, arg);
            exit(SHM[r].failed ? 1 : 0); /* exit, not _exit: LeakSanitizer checks the rank */
        }
        pids[r] = p;
    }
    const double deadline = now_s() + timeout_s + 10;
    int left = procs;
    for (int r = 0; r < procs; r++) ws[r] = -1;
    while (left > 0) {
        for (int r = 0; r < procs; r++) {
            if (ws[r] != -1 || pids[r] <= 0) continue;
            int s = 0;
            if (waitpid(pids[r], &s, WNOHANG) == pids[r]) {
                ws[r] = s;
                left--;
            }
        }
        if (left > 0 && now_s() > deadline) {
            for (int r = 0; r < procs; r++)
                if (ws[r] == -1 && pids[r] > 0) kill(pids[r], SIGKILL);
        }
        if (left > 0) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    }
}

/* Every rank exited 0; otherwise the case fails with each rank's first complaint. */
static void expect_clean(int procs, const int *ws) {
    for (int r = 0; r < procs; r++) {
        if (WIFEXITED(ws[r]) && WEXITSTATUS(ws[r]) == 0) continue;
        th_fail(__FILE__, __LINE__, "rank %d: %s%s", r,
                WIFSIGNALED(ws[r]) ? "killed by a signal (hang or crash); " : "",
                SHM[r].msg[0] ? SHM[r].msg : "(no message)");
    }
}

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

/* Different calls on different ranks: every rank fails with one message, and the
 * communicator goes on. */
static void mismatch_rank(int rank, int world, void *arg) {
    (void)arg;
    dlt_ctx *ctx = cpu_ctx(1);
    dlt_comm *c = NULL;
    COK(mk_comm(ctx, rank, world, 30000, &c));
    int64_t n = rank == 1 ? 6 : 5;
    dlt_tensor *t = NULL, *u = NULL;
    COK(dlt_tensor_zeros(ctx, DLT_F32, &n, 1, 0, &t));
    CST(dlt_comm_all_reduce(c, t, DLT_REDUCE_SUM), DLT_ERR_SHAPE, "rank 1 all_reduce(sum) of 6 f32");
    dlt_tensor_release(t);
    n = 5;
    COK(dlt_tensor_zeros(ctx, rank == 1 ? DLT_I32 : DLT_F32, &n, 1, 0, &t));
    CST(dlt_comm_all_reduce(c, t, DLT_REDUCE_SUM), DLT_ERR_DTYPE, "i32");
    dlt_tensor_release(t);
    COK(dlt_tensor_zeros(ctx, DLT_F32, &n, 1, 0, &t));
    if (rank == 1)
        CST(dlt_comm_broadcast(c, t, 0), DLT_ERR_INVALID_ARGUMENT, "different collectives");
    else
        CST(dlt_comm_all_reduce(c, t, DLT_REDUCE_MAX), DLT_ERR_INVALID_ARGUMENT, "rank 0 all_reduce(max)");
    /* still usable */
    COK(dlt_tensor_fill(t, rank + 1.0));
    COK(dlt_comm_all_reduce(c, t, DLT_REDUCE_SUM));
    double v = 0;
    COK(dlt_tensor_get(t, 4, &v));
    CC(v == world * (world + 1) / 2.0, "after the mismatches: %g", v);
    COK(dlt_comm_check(c));
    dlt_tensor_release(t);
    dlt_tensor_release(u);
    dlt_comm_destroy(c);
    dlt_ctx_destroy(ctx);
}

static void test_mismatched_calls_fail_every_rank(void) {
    int ws[MAXR];
    run_ranks(3, 3, mismatch_rank, NULL, 60, ws);
    expect_clean(3, ws);
}

/* =========================================================================================
 * Failures: a killed rank, a silent one, a missing one, a wrong world size
 * ======================================================================================= */

typedef struct fail_cfg {
    int victim;     /* rank that dies (SIGKILL) after the first collective */
    int sleeper;    /* rank that stays silent for sleep_s */
    int sleep_s;
    int64_t timeout_ms;
} fail_cfg;

static void failure_rank(int rank, int world, void *arg) {
    fail_cfg *f = arg;
    dlt_ctx *ctx = cpu_ctx(1);
    dlt_comm *c = NULL;
    COK(mk_comm(ctx, rank, world, f->timeout_ms, &c));
    int64_t n = 4096;
    dlt_tensor *t = NULL;
    COK(dlt_tensor_zeros(ctx, DLT_F32, &n, 1, 0, &t));
    COK(dlt_comm_all_reduce(c, t, DLT_REDUCE_SUM));
    if (rank == f->victim) raise(SIGKILL);
    if (rank == f->sleeper) sleep((unsigned)f->sleep_s);
    double t0 = now_s();
    g_me->st[0] = dlt_comm_all_reduce(c, t, DLT_REDUCE_SUM);
    g_me->elapsed[0] = now_s() - t0;
    snprintf(g_me->stmsg[0], sizeof g_me->stmsg[0], "%s", dlt_last_error());
    g_me->st[1] = dlt_comm_barrier(c);
    snprintf(g_me->stmsg[1], sizeof g_me->stmsg[1], "%s", dlt_last_error());
    g_me->st[2] = dlt_comm_check(c);
    dlt_tensor_release(t);
    dlt_comm_destroy(c);
    dlt_ctx_destroy(ctx);
}

static void test_killed_rank_ends_the_others(void) {
    /* 4 ranks, rank 2 killed: rank 0 is not its neighbour on the ring, so the failure must
     * travel; the timeout is long, so only the detection of the dead peer can end it */
    fail_cfg f = {2, -1, 0, 60000};
    int ws[MAXR];
    double t0 = now_s();
    run_ranks(4, 4, failure_rank, &f, 90, ws);
    CHECK(now_s() - t0 < 30, "the ranks took %.1f s to notice", now_s() - t0);
    CHECK(WIFSIGNALED(ws[2]) && WTERMSIG(ws[2]) == SIGKILL, "rank 2 was not killed");
    for (int r = 0; r < 4; r++) {
        if (r == 2) continue;
        CHECK(WIFEXITED(ws[r]) && WEXITSTATUS(ws[r]) == 0, "rank %d: %s", r, SHM[r].msg);
        CHECK(SHM[r].st[0] == DLT_ERR_DIST, "rank %d: all_reduce -> %d: %s", r, SHM[r].st[0], SHM[r].stmsg[0]);
        CHECK(strstr(SHM[r].stmsg[0], "rank ") && strstr(SHM[r].stmsg[0], "dlt_comm_all_reduce"),
              "rank %d's message: %s", r, SHM[r].stmsg[0]);
        CHECK(SHM[r].elapsed[0] < 20, "rank %d waited %.1f s", r, SHM[r].elapsed[0]);
        CHECK(SHM[r].st[1] == DLT_ERR_DIST && strstr(SHM[r].stmsg[1], "aborted after an earlier failure"),
              "rank %d: later call -> %d: %s", r, SHM[r].st[1], SHM[r].stmsg[1]);
        CHECK(SHM[r].st[2] == DLT_ERR_DIST, "rank %d: dlt_comm_check -> %d", r, SHM[r].st[2]);
    }
}

static void test_silent_rank_times_out(void) {
    fail_cfg f = {-1, 1, 4, 1500};
    int ws[MAXR];
    run_ranks(2, 2, failure_rank, &f, 60, ws);
    expect_clean(2, ws);
    CHECK(SHM[0].st[0] == DLT_ERR_DIST_TIMEOUT, "rank 0: %d: %s", SHM[0].st[0], SHM[0].stmsg[0]);
    CHECK(strstr(SHM[0].stmsg[0], "rank 1") && strstr(SHM[0].stmsg[0], "1.5 s"), "message: %s", SHM[0].stmsg[0]);
    CHECK(SHM[0].elapsed[0] > 1.3 && SHM[0].elapsed[0] < 3.5, "rank 0 waited %.2f s for a 1.5 s timeout",
          SHM[0].elapsed[0]);
    /* the sleeper wakes up to a communicator its peer aborted */
    CHECK(SHM[1].st[0] == DLT_ERR_DIST || SHM[1].st[0] == DLT_ERR_DIST_TIMEOUT, "rank 1: %d: %s", SHM[1].st[0],
          SHM[1].stmsg[0]);
}

typedef struct join_cfg {
    int world_of_rank1;
    int64_t timeout_ms;
} join_cfg;

static void join_rank(int rank, int world, void *arg) {
    join_cfg *j = arg;
    dlt_ctx *ctx = cpu_ctx(1);
    dlt_comm *c = NULL;
    double t0 = now_s();
    g_me->st[0] = mk_comm(ctx, rank, rank == 1 ? j->world_of_rank1 : world, j->timeout_ms, &c);
    g_me->elapsed[0] = now_s() - t0;
    snprintf(g_me->stmsg[0], sizeof g_me->stmsg[0], "%s", dlt_last_error());
    CC(g_me->st[0] != DLT_OK || c != NULL, "no communicator");
    dlt_comm_destroy(c);
    dlt_ctx_destroy(ctx);
}

static void test_rendezvous_failures(void) {
    int ws[MAXR];
    /* rank 1 never starts */
    join_cfg j = {2, 1000};
    run_ranks(2, 1, join_rank, &j, 30, ws);
    expect_clean(1, ws);
    CHECK(SHM[0].st[0] == DLT_ERR_DIST_TIMEOUT && strstr(SHM[0].stmsg[0], "rank(s) 1 did not join"),
          "%d: %s", SHM[0].st[0], SHM[0].stmsg[0]);
    CHECK(SHM[0].elapsed[0] < 5, "waited %.1f s", SHM[0].elapsed[0]);
    /* rank 1 believes in another world size: both fail, rank 1 with rank 0's reason */
    join_cfg k = {3, 20000};
    run_ranks(2, 2, join_rank, &k, 60, ws);
    expect_clean(2, ws);
    for (int r = 0; r < 2; r++)
        CHECK(SHM[r].st[0] == DLT_ERR_DIST && strstr(SHM[r].stmsg[0], "joined with world size 3, rank 0 has 2"),
              "rank %d: %d: %s", r, SHM[r].st[0], SHM[r].stmsg[0]);
}

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
 * The distributed sampler
 * ======================================================================================= */

/* PyTorch's DistributedSampler over an epoch order `full` of n samples. */
static int64_t torch_shard(const int64_t *full, int64_t n, int R, int r, int drop_last, int64_t *out) {
    int64_t ns = (drop_last && n % R) ? (n - R + R - 1) / R : (n + R - 1) / R, total = ns * R;
    int64_t k = 0;
    for (int64_t q = r; q < total; q += R) out[k++] = full[q % n]; /* padding repeats the start */
    return k;
}

static void sampler_rank(int rank, int world, void *arg) {
    (void)rank, (void)world, (void)arg;
    dlt_ctx *ctx = cpu_ctx(1);
    const int64_t sizes[] = {1, 5, 10, 11, 40};
    for (size_t si = 0; si < 5; si++)
        for (int shuffle = 0; shuffle < 2; shuffle++)
            for (int R = 1; R <= 7; R++)
                for (int dl = 0; dl < 2; dl++) {
                    const int64_t n = sizes[si];
                    if (dl && n < R) continue; /* every shard would be empty */
                    dlt_dataset *ds = NULL;
                    COK(dlt_synthetic_dataset_create(ctx, n, 10, 3, 1, &ds));
                    dlt_loader *whole = NULL;
                    COK(dlt_loader_create(ds, 1, shuffle, 0, 99, &whole));
                    int64_t full[64], want[64], got[64];
                    int counts[64] = {0};
                    for (int64_t epoch = 0; epoch < 2; epoch++) {
                        COK(dlt_loader_epoch_order(whole, epoch, full, 64));
                        int64_t covered = 0;
                        for (int r = 0; r < R; r++) {
                            dlt_loader *ld = NULL;
                            COK(dlt_loader_create(ds, 1, shuffle, 0, 99, &ld));
                            COK(dlt_loader_set_distributed(ld, R, r, dl));
                            int64_t k = torch_shard(full, n, R, r, dl, want);
                            CC(dlt_loader_num_samples(ld) == k, "n %lld R %d drop_last %d: %lld samples, want %lld",
                               (long long)n, R, dl, (long long)dlt_loader_num_samples(ld), (long long)k);
                            COK(dlt_loader_epoch_order(ld, epoch, got, 64));
                            CC(memcmp(got, want, (size_t)k * sizeof *got) == 0,
                               "n %lld R %d r %d drop_last %d shuffle %d epoch %lld: shard differs from PyTorch's",
                               (long long)n, R, r, dl, shuffle, (long long)epoch);
                            /* the batches hand out exactly the shard */
                            COK(dlt_loader_start_epoch(ld, epoch));
                            for (int64_t i = 0; i < k; i++) {
                                dlt_tensor *x = NULL, *y = NULL;
                                int32_t has = 0, label = -1;
                                double lab = -2;
                                COK(dlt_loader_next(ld, &x, &y, &has));
                                CC(has, "batch %lld missing", (long long)i);
                                if (!has) break;
                                COK(dlt_tensor_get(y, 0, &lab));
                                COK(dlt_dataset_get(ds, want[i], NULL, 0, &label));
                                CC(lab == label, "batch %lld label %g, sample %lld has %d", (long long)i, lab,
                                   (long long)want[i], label);
                            }
                            for (int64_t i = 0; i < k; i++) counts[want[i]]++;
                            covered += k;
                            dlt_loader_destroy(ld);
                        }
                        /* disjoint and covering: every sample once, padding repeats only the start */
                        int64_t total = dl && n % R ? (n / R) * R : n;
                        for (int64_t i = 0; i < n; i++) {
                            int64_t pos = 0;
                            while (full[pos] != i) pos++;
                            const int expected_min = pos < total ? 1 : 0;
                            CC(counts[i] >= expected_min && counts[i] <= expected_min + (covered + n - 1) / n,
                               "sample %lld appears %d times", (long long)i, counts[i]);
                            counts[i] = 0;
                        }
                        CC(dl ? covered == total : covered >= n, "covered %lld of %lld", (long long)covered,
                           (long long)n);
                    }
                    dlt_loader_destroy(whole);
                    dlt_dataset_destroy(ds);
                }
    /* misuse */
    dlt_dataset *ds = NULL;
    dlt_loader *ld = NULL;
    COK(dlt_synthetic_dataset_create(ctx, 10, 10, 3, 1, &ds));
    COK(dlt_loader_create(ds, 4, 1, 1, 99, &ld));
    CST(dlt_loader_set_distributed(NULL, 2, 0, 0), DLT_ERR_NULL_POINTER, NULL);
    CST(dlt_loader_set_distributed(ld, 0, 0, 0), DLT_ERR_INVALID_ARGUMENT, "num_replicas");
    CST(dlt_loader_set_distributed(ld, 2, 2, 0), DLT_ERR_INVALID_ARGUMENT, "Invalid rank 2");
    CST(dlt_loader_set_distributed(ld, 2, 0, 3), DLT_ERR_INVALID_ARGUMENT, "drop_last");
    CST(dlt_loader_set_distributed(ld, 4, 0, 0), DLT_ERR_INVALID_ARGUMENT, "leaves no batch");
    CC(dlt_loader_num_samples(ld) == 10 && dlt_loader_num_batches(ld) == 2, "a failed call changed the loader");
    CC(dlt_loader_num_samples(NULL) == 0, "NULL");
    dlt_loader_destroy(ld);
    dlt_dataset_destroy(ds);
    dlt_ctx_destroy(ctx);
}

static void test_sampler_matches_pytorch(void) {
    int ws[1];
    run_ranks(1, 1, sampler_rank, NULL, 120, ws);
    expect_clean(1, ws);
}

/* 2 ranks at batch 4 read (and augment) exactly what one process reads at batch 8. */
static void sampler_batches_rank(int rank, int world, void *arg) {
    (void)rank, (void)world, (void)arg;
    dlt_ctx *ctx = cpu_ctx(1);
    dlt_dataset *ds = NULL;
    COK(dlt_synthetic_dataset_create(ctx, 40, 10, 3, 1, &ds));
    dlt_loader *one = NULL, *part[2] = {NULL, NULL};
    COK(dlt_loader_create(ds, 8, 1, 0, 5, &one));
    COK(dlt_loader_set_augment(one, 4, 1));
    for (int r = 0; r < 2; r++) {
        COK(dlt_loader_create(ds, 4, 1, 0, 5, &part[r]));
        COK(dlt_loader_set_augment(part[r], 4, 1));
        COK(dlt_loader_set_distributed(part[r], 2, r, 0));
        CC(dlt_loader_num_batches(part[r]) == dlt_loader_num_batches(one), "batches per epoch");
    }
    const size_t img = 3 * 32 * 32 * sizeof(float);
    float *a = malloc(8 * img), *b = malloc(4 * img);
    int64_t la[8], lb[4];
    for (int epoch = 0; epoch < 2; epoch++) {
        COK(dlt_loader_start_epoch(one, epoch));
        for (int r = 0; r < 2; r++) COK(dlt_loader_start_epoch(part[r], epoch));
        for (int64_t k = 0; k < dlt_loader_num_batches(one); k++) {
            dlt_tensor *x = NULL, *y = NULL;
            int32_t has = 0;
            COK(dlt_loader_next(one, &x, &y, &has));
            COK(dlt_tensor_copy_to_host(x, a, 8 * img));
            COK(dlt_tensor_copy_to_host(y, la, sizeof la));
            for (int r = 0; r < 2; r++) {
                COK(dlt_loader_next(part[r], &x, &y, &has));
                COK(dlt_tensor_copy_to_host(x, b, 4 * img));
                COK(dlt_tensor_copy_to_host(y, lb, sizeof lb));
                for (int j = 0; j < 4; j++) {
                    CC(memcmp((char *)b + j * img, (char *)a + (2 * j + r) * img, img) == 0 && lb[j] == la[2 * j + r],
                       "epoch %d batch %lld: rank %d row %d is not row %d of the global batch", epoch, (long long)k,
                       r, j, 2 * j + r);
                }
            }
        }
    }
    free(a);
    free(b);
    /* token loaders: rank r's rows are rows r*B.. of the global batch */
    dlt_token_dataset *tds = NULL;
    dlt_token_loader *tg = NULL, *tr[3] = {NULL, NULL, NULL};
    COK(dlt_synthetic_tokens_create(ctx, 5000, 65, 9, &tds));
    COK(dlt_token_loader_create(tds, 6, 16, 21, &tg));
    int64_t og[6], orr[2];
    for (int r = 0; r < 3; r++) {
        COK(dlt_token_loader_create(tds, 2, 16, 21, &tr[r]));
        COK(dlt_token_loader_set_distributed(tr[r], 3, r));
    }
    for (int64_t s = 0; s < 4; s++) {
        COK(dlt_token_loader_offsets(tg, s, og, 6));
        for (int r = 0; r < 3; r++) {
            COK(dlt_token_loader_offsets(tr[r], s, orr, 2));
            CC(orr[0] == og[2 * r] && orr[1] == og[2 * r + 1], "draw %lld rank %d", (long long)s, r);
        }
    }
    dlt_tensor *xg = NULL, *yg = NULL, *xr = NULL, *yr = NULL;
    int64_t hg[6 * 16], hr[2 * 16];
    COK(dlt_token_loader_next(tg, &xg, &yg));
    COK(dlt_tensor_copy_to_host(xg, hg, sizeof hg));
    COK(dlt_token_loader_next(tr[2], &xr, &yr));
    COK(dlt_tensor_copy_to_host(xr, hr, sizeof hr));
    CC(memcmp(hr, hg + 4 * 16, sizeof hr) == 0, "rank 2's token batch is not rows 4..5");
    CST(dlt_token_loader_set_distributed(tr[0], 3, 3), DLT_ERR_INVALID_ARGUMENT, "rank 3");
    CST(dlt_token_loader_set_distributed(NULL, 1, 0), DLT_ERR_NULL_POINTER, NULL);
    for (int r = 0; r < 3; r++) dlt_token_loader_destroy(tr[r]);
    dlt_token_loader_destroy(tg);
    dlt_token_dataset_destroy(tds);
    for (int r = 0; r < 2; r++) dlt_loader_destroy(part[r]);
    dlt_loader_destroy(one);
    dlt_dataset_destroy(ds);
    dlt_ctx_destroy(ctx);
}

static void test_sharded_batches_equal_the_global_batch(void) {
    int ws[1];
    run_ranks(1, 1, sampler_batches_rank, NULL, 120, ws);
    expect_clean(1, ws);
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
    SHM = mmap(NULL, MAXR * sizeof *SHM, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (SHM == MAP_FAILED) {
        printf("1..0 # SKIP no shared memory\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    RUN(test_env);
    RUN(test_options_and_misuse);
    RUN(test_collectives_2_ranks);
    RUN(test_collectives_3_ranks);
    RUN(test_collectives_4_ranks);
    RUN(test_mismatched_calls_fail_every_rank);
    RUN(test_killed_rank_ends_the_others);
    RUN(test_silent_rank_times_out);
    RUN(test_rendezvous_failures);
    RUN(test_ddp_2_ranks_equals_one_process);
    RUN(test_ddp_4_ranks_small_buckets);
    RUN(test_ddp_no_sync_accumulation);
    RUN(test_ddp_gpt_tied_weights);
    RUN(test_ddp_buckets_as_pytorch);
    RUN(test_ddp_different_models_refused);
    RUN(test_ddp_two_models_one_context);
    RUN(test_scaler_skips_the_same_steps_everywhere);
    RUN(test_sampler_matches_pytorch);
    RUN(test_sharded_batches_equal_the_global_batch);
    RUN(test_checkpoint_written_once_loads_anywhere);
    RUN(test_nccl_loads_without_a_gpu);
    return th_done();
}
