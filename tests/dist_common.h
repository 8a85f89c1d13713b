/*
 * dist_common.h - the rank machinery shared by the test_dist_*.c programs (dist.h on the CPU).
 *
 * Each case forks its ranks from the test process (fork, no exec: the parent never calls the
 * library, so no OpenMP pool is forked). The ranks meet through the TCP rendezvous on a
 * free port of 127.0.0.1 and write what they saw into shared memory; the parent compares
 * and reports TAP. Every rank has an alarm and the parent kills ranks that outlive their
 * case's deadline, so a hang fails a case instead of the suite.
 *
 * Definitions are static: each program is one .c file (tests/meson.build) and gets its own copy.
 */
#ifndef DLT_TEST_DIST_COMMON_H
#define DLT_TEST_DIST_COMMON_H

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

static TH_UNUSED dlt_ctx *cpu_ctx(uint64_t seed) {
    dlt_ctx *ctx = NULL;
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx) != DLT_OK) return NULL;
    if (dlt_ctx_set_seed(ctx, seed) != DLT_OK) return NULL;
    return ctx;
}

static TH_UNUSED dlt_status mk_comm(dlt_ctx *ctx, int rank, int world, int64_t timeout_ms, dlt_comm **c) {
    dlt_comm_options o;
    dlt_comm_options_default(&o);
    o.rank = rank;
    o.world_size = world;
    o.master_port = g_port;
    o.master_addr = "127.0.0.1";
    o.timeout_ms = timeout_ms;
    return dlt_comm_create_ex(ctx, &o, c);
}

static TH_UNUSED double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the parent's side ---- */

static TH_UNUSED int free_port(void) {
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
static TH_UNUSED void run_ranks(int world, int procs, rank_fn fn, void *arg, int timeout_s, int *ws) {
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
static TH_UNUSED void expect_clean(int procs, const int *ws) {
    for (int r = 0; r < procs; r++) {
        if (WIFEXITED(ws[r]) && WEXITSTATUS(ws[r]) == 0) continue;
        th_fail(__FILE__, __LINE__, "rank %d: %s%s", r,
                WIFSIGNALED(ws[r]) ? "killed by a signal (hang or crash); " : "",
                SHM[r].msg[0] ? SHM[r].msg : "(no message)");
    }
}

/* main's first call: the shared memory the ranks report into, and SIGPIPE ignored before any
 * fork (a write to a dead peer's socket fails instead of killing the rank). Returns 0 when
 * there is no shared memory, after printing the TAP plan that skips the whole program. */
static TH_UNUSED int dist_init(void) {
    SHM = mmap(NULL, MAXR * sizeof *SHM, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (SHM == MAP_FAILED) {
        printf("1..0 # SKIP no shared memory\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    return 1;
}

#endif
