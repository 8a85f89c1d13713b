/*
 * test_dist_failures.c - the communicator when ranks go wrong, on the CPU: different calls on
 * different ranks, a killed rank, a silent one, a rank that never joins, one with another
 * world size. Every rank must end with a status (and the communicator stay usable where it
 * can), in time: a hang is a failed case (dist_common.h's deadlines), not a stuck suite.
 */
#include "dist_common.h"

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

int main(void) {
    if (!dist_init()) return 0;
    RUN(test_mismatched_calls_fail_every_rank);
    RUN(test_killed_rank_ends_the_others);
    RUN(test_silent_rank_times_out);
    RUN(test_rendezvous_failures);
    return th_done();
}
