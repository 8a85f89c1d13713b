/*
 * comm.c - the communicator (dist.h): where a process stands in the job, how the ranks
 * meet, and the collectives' front doors.
 *
 * A communicator works on one context. CPU tensors move through the TCP ring (tcp.c),
 * synchronously; CUDA tensors through NCCL, reached only through the backend table
 * (cuda/nccl.c), enqueued on the context's stream. The TCP ring exists on CUDA too (world
 * > 1): the rendezvous hands out NCCL's unique id over it, and host-side agreement
 * (checkpoint outcomes, barriers) uses it.
 *
 * Misuse across ranks: before each CPU collective the ranks exchange what they were asked
 * to do (the collective, dtype, element count, root or op, and a sequence number) and
 * compare it with rank 0's; a difference fails every rank with one message naming the
 * ranks and their calls, and the communicator stays usable (every rank took part in the
 * exchange, so the sequence stays aligned). NCCL has no such check: a mismatch there ends
 * in NCCL's error or the watchdog's timeout.
 *
 * Failures of peers abort the communicator (dlt__comm_fail): connections closed (peers
 * fail in turn), NCCL's communicator aborted; the status is kept for every later call.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/options.h"
#include "dist_internal.h"

static const char *const COLL_NAMES[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter"};
static const char *const OP_NAMES[] = {"sum", "avg", "max", "min"};

/* ---------------------------------------------------------------------------------------
 * The environment
 * ------------------------------------------------------------------------------------- */

/* The integer in s, the text of variable name (NULL: unset): 1 and *v when set, 0 when
 * unset; < 0 after an error. */
static int int_from_text(const char *name, const char *s, int64_t *v, const char *func, dlt_status *st) {
    if (!s || !*s) return 0;
    char *end = NULL;
    long long n = strtoll(s, &end, 10);
    while (end && (*end == ' ' || *end == '\n')) end++;
    if (end == s || (end && *end) || n < INT32_MIN || n > INT32_MAX) {
        *st = dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "environment variable %s='%s' is not a number",
                       name, s);
        return -1;
    }
    *v = n;
    return 1;
}

/* A variable a launcher sets (RANK, MASTER_PORT, ...), as int_from_text. */
static int int_from_env(const char *name, int64_t *v, const char *func, dlt_status *st) {
    return int_from_text(name, dlt__env_launcher(name), v, func, st);
}

/* The first of two variables that is set (torchrun's, then mpirun's). */
static int env_pair(const char *a, const char *b, int64_t *v, const char **which, const char *func,
                    dlt_status *st) {
    int r = int_from_env(a, v, func, st);
    *which = a;
    if (r != 0) return r;
    *which = b;
    return int_from_env(b, v, func, st);
}

dlt_status dlt_dist_env(int32_t *rank, int32_t *world_size, int32_t *local_rank) {
    static const char *F = "dlt_dist_env";
    if (!rank && !world_size && !local_rank)
        return dlt__err(DLT_ERR_NULL_POINTER, F, "rank, world_size and local_rank are all NULL: nothing to read into");
    dlt_status st = DLT_OK;
    int64_t r = 0, w = 1, l = 0;
    const char *rn, *wn, *ln;
    int hr = env_pair("RANK", "OMPI_COMM_WORLD_RANK", &r, &rn, F, &st);
    if (hr < 0) return st;
    int hw = env_pair("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", &w, &wn, F, &st);
    if (hw < 0) return st;
    int hl = env_pair("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", &l, &ln, F, &st);
    if (hl < 0) return st;
    if (hr != hw)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "%s is set but %s is not: a launcher sets both (torchrun, dltrain-run, mpirun)",
                        hr ? rn : wn, hr ? wn : rn);
    if (w < 1) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "%s=%lld: the world size must be >= 1", wn, (long long)w);
    if (r < 0 || r >= w)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "%s=%lld is outside 0..%lld (%s=%lld)", rn, (long long)r,
                        (long long)w - 1, wn, (long long)w);
    if (!hl) l = r;
    if (l < 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "%s=%lld is negative", ln, (long long)l);
    if (rank) *rank = (int32_t)r;
    if (world_size) *world_size = (int32_t)w;
    if (local_rank) *local_rank = (int32_t)l;
    return DLT_OK;
}

static const dlt_comm_options COMM_DEFAULTS = {.size = sizeof(dlt_comm_options), .rank = -1, .world_size = -1};
/* the first release's struct ends after master_addr */
#define COMM_OPTIONS_V1 DLT__FIELD_END(dlt_comm_options, master_addr)

void dlt_comm_options_init(dlt_comm_options *o, uint32_t size) {
    dlt__options_fill(o, size, &COMM_DEFAULTS, sizeof COMM_DEFAULTS, COMM_OPTIONS_V1);
}

/* ---------------------------------------------------------------------------------------
 * State
 * ------------------------------------------------------------------------------------- */

dlt_status dlt__comm_ok(dlt_comm *c, const char *func) {
    if (c->broken == DLT_OK) return DLT_OK;
    return dlt__err(c->broken, func, "the communicator was aborted after an earlier failure: %s",
                    c->broken_msg);
}

dlt_status dlt__comm_fail(dlt_comm *c, dlt_status st) {
    if (st == DLT_OK || c->broken != DLT_OK) return st;
    c->broken = st;
    snprintf(c->broken_msg, sizeof c->broken_msg, "%s", dlt_last_error());
    dlt__tcp_abort(c->tcp);
    if (c->nccl && c->ctx->be->nccl_check) (void)c->ctx->be->nccl_check(c->ctx, c->nccl);
    return st;
}

/* A failure of the transport: checks whether it was a timeout or a peer, and aborts. */
static dlt_status fail(dlt_comm *c, dlt_status st) {
    if (st == DLT_ERR_DIST || st == DLT_ERR_DIST_TIMEOUT || st == DLT_ERR_NCCL || st == DLT_ERR_CUDA ||
        st == DLT_ERR_CONTEXT_POISONED)
        return dlt__comm_fail(c, st);
    return st; /* out of memory and the like: nothing was sent, the ranks are still aligned */
}

/* ---------------------------------------------------------------------------------------
 * Creation
 * ------------------------------------------------------------------------------------- */

static dlt_status resolve_timeout(const dlt_comm_options *o, const char *func, int64_t *out) {
    if (o->timeout_ms < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "timeout_ms %lld is negative", (long long)o->timeout_ms);
    if (o->timeout_ms > 0) {
        *out = o->timeout_ms;
        return DLT_OK;
    }
    const char *s = dlt__env_text(DLT__ENV_DIST_TIMEOUT);
    *out = DLT_DIST_DEFAULT_TIMEOUT_MS;
    if (s && *s) {
        char *end = NULL;
        double sec = strtod(s, &end);
        if (end == s || *end || !(sec > 0) || sec > 1e9)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                            "DLT_DIST_TIMEOUT='%s' must be a positive number of seconds", s);
        *out = (int64_t)ceil(sec * 1000.0);
    }
    return DLT_OK;
}

static dlt_status resolve_port(const dlt_comm_options *o, const char *func, int32_t *out) {
    int64_t v = o->master_port;
    dlt_status st = DLT_OK;
    if (v == 0) {
        int h = int_from_text("DLT_MASTER_PORT", dlt__env_text(DLT__ENV_MASTER_PORT), &v, func, &st);
        if (h < 0) return st;
        if (h == 0) {
            h = int_from_env("MASTER_PORT", &v, func, &st);
            if (h < 0) return st;
            if (h == 0) v = DLT_DIST_DEFAULT_PORT;
            /* torchrun's agent serves its own store on MASTER_PORT: take the next port */
            const char *agent = dlt__env_launcher("TORCHELASTIC_USE_AGENT_STORE");
            if (h && agent && (strcmp(agent, "True") == 0 || strcmp(agent, "1") == 0)) v += 1;
        }
    }
    if (v < 1 || v > 65535)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "master port %lld is outside 1..65535", (long long)v);
    *out = (int32_t)v;
    return DLT_OK;
}

static dlt_status comm_new(dlt_ctx *ctx, int32_t rank, int32_t world, int64_t timeout_ms,
                           const char *func, dlt_comm **out) {
    dlt_comm *c = dlt__host_calloc(ctx, 1, sizeof *c);
    if (!c) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the communicator");
    c->ctx = ctx;
    c->rank = rank;
    c->world = world;
    c->timeout_ms = timeout_ms;
    *out = c;
    return DLT_OK;
}

static dlt_status need_nccl(dlt_ctx *ctx, const char *func) {
    const dlt_backend *be = ctx->be;
    if (!be->nccl_unique_id || !be->nccl_init || !be->nccl_run || !be->nccl_free)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, func, "the %s backend has no NCCL support", be->name);
    return DLT_OK;
}

dlt_status dlt_comm_create_ex(dlt_ctx *ctx, const dlt_comm_options *o, dlt_comm **out) {
    static const char *F = "dlt_comm_create_ex";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    dlt_comm_options opt = COMM_DEFAULTS;
    DLT_CHECK(dlt__options_read(&opt, sizeof opt, o, COMM_OPTIONS_V1, "dlt_comm_options", F));
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    int32_t er = 0, ew = 1;
    if (opt.rank < 0 || opt.world_size < 0) DLT_CHECK(dlt_dist_env(&er, &ew, NULL));
    const int32_t rank = opt.rank >= 0 ? opt.rank : er, world = opt.world_size >= 0 ? opt.world_size : ew;
    if (world < 1) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "world size %d must be >= 1", world);
    if (rank < 0 || rank >= world)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "rank %d is outside 0..%d", rank, world - 1);
    int64_t timeout = 0;
    int32_t port = 0;
    DLT_CHECK(resolve_timeout(&opt, F, &timeout));
    DLT_CHECK(resolve_port(&opt, F, &port));
    const char *addr = opt.master_addr;
    if (!addr) addr = dlt__env_launcher("MASTER_ADDR");
    if (!addr || !*addr) addr = "127.0.0.1";

    const int cuda = ctx->device_type == DLT_DEVICE_CUDA;
    unsigned char uid[DLT_NCCL_UNIQUE_ID_BYTES];
    memset(uid, 0, sizeof uid);
    dlt_status local = DLT_OK; /* this rank cannot take part (NCCL missing): tell the others */
    if (cuda) {
        local = need_nccl(ctx, F);
        if (local == DLT_OK && rank == 0) local = ctx->be->nccl_unique_id(ctx, uid, sizeof uid, NULL);
        else if (local == DLT_OK) local = ctx->be->nccl_unique_id(ctx, NULL, 0, NULL); /* loads it */
        if (local != DLT_OK && world == 1) return local;
    }
    char local_msg[512] = "";
    if (local != DLT_OK) snprintf(local_msg, sizeof local_msg, "%s", dlt_last_error());

    dlt_comm *c = NULL;
    DLT_CHECK(comm_new(ctx, rank, world, timeout, F, &c));
    dlt_status st = DLT_OK;
    if (world > 1) {
        dlt_tcp_params p = {rank, world, addr, port, timeout, cuda ? 1 : 0,
                            (cuda && rank == 0 && local == DLT_OK) ? uid : NULL, cuda ? sizeof uid : 0,
                            local != DLT_OK ? local_msg : NULL};
        st = dlt__tcp_open(&p, uid, F, &c->tcp);
    }
    if (local != DLT_OK) st = dlt__err(local, F, "%s", local_msg); /* its own reason first */
    if (st == DLT_OK && cuda) {
        st = ctx->be->nccl_init(ctx, uid, rank, world, timeout, &c->nccl);
        /* every rank learns whether every rank got its NCCL communicator */
        if (c->tcp) {
            int64_t bad = st == DLT_OK ? 0 : 1;
            char msg[512];
            snprintf(msg, sizeof msg, "%s", dlt_last_error());
            dlt_status ast = dlt__tcp_all_reduce(c->tcp, &bad, 1, DLT_I64, DLT_REDUCE_MAX, F);
            if (st != DLT_OK)
                st = dlt__err(st, F, "%s", msg);
            else if (ast != DLT_OK)
                st = ast;
            else if (bad)
                st = dlt__err(DLT_ERR_NCCL, F, "another rank could not create its NCCL communicator");
        }
    }
    if (st != DLT_OK) {
        dlt_comm_destroy(c);
        return dlt__err_wrap(st, F);
    }
    *out = c;
    return DLT_OK;
}

dlt_status dlt_comm_create(dlt_ctx *ctx, dlt_comm **out) {
    dlt_status st = dlt_comm_create_ex(ctx, NULL, out);
    return st == DLT_OK ? st : dlt__err_wrap(st, "dlt_comm_create");
}

dlt_status dlt_comm_create_nccl(dlt_ctx *ctx, int32_t rank, int32_t world_size, const uint8_t *unique_id,
                                size_t id_bytes, dlt_comm **out) {
    static const char *F = "dlt_comm_create_nccl";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(unique_id, F);
    DLT_NULL_CHECK(out, F);
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "rank %d / world size %d: need 0 <= rank < world size",
                        rank, world_size);
    if (id_bytes < DLT_NCCL_UNIQUE_ID_BYTES)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "id_bytes %zu: an NCCL unique id has %d bytes", id_bytes,
                        DLT_NCCL_UNIQUE_ID_BYTES);
    if (ctx->device_type != DLT_DEVICE_CUDA)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F,
                        "NCCL moves CUDA tensors: this is a CPU context (use dlt_comm_create)");
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    DLT_CHECK(need_nccl(ctx, F));
    dlt_comm_options opt = COMM_DEFAULTS;
    int64_t timeout = 0;
    DLT_CHECK(resolve_timeout(&opt, F, &timeout));
    dlt_comm *c = NULL;
    DLT_CHECK(comm_new(ctx, rank, world_size, timeout, F, &c));
    dlt_status st = ctx->be->nccl_init(ctx, unique_id, rank, world_size, timeout, &c->nccl);
    if (st != DLT_OK) {
        dlt_comm_destroy(c);
        return dlt__err_wrap(st, F);
    }
    *out = c;
    return DLT_OK;
}

static dlt_status nccl_query(uint8_t *id, size_t n, int32_t *version, const char *func) {
    const dlt_backend *be = dlt__cuda_backend();
    if (!be || !be->nccl_unique_id)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, func, "libdltrain was built without CUDA: no NCCL");
    dlt_status st = be->nccl_unique_id(NULL, id, n, version);
    return st == DLT_OK ? st : dlt__err_wrap(st, func);
}

dlt_status dlt_nccl_unique_id(uint8_t *out, size_t n) {
    static const char *F = "dlt_nccl_unique_id";
    DLT_NULL_CHECK(out, F);
    if (n < DLT_NCCL_UNIQUE_ID_BYTES)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n %zu: an NCCL unique id has %d bytes", n,
                        DLT_NCCL_UNIQUE_ID_BYTES);
    return nccl_query(out, DLT_NCCL_UNIQUE_ID_BYTES, NULL, F);
}

dlt_status dlt_nccl_version(int32_t *out) {
    static const char *F = "dlt_nccl_version";
    DLT_NULL_CHECK(out, F);
    return nccl_query(NULL, 0, out, F);
}

void dlt_comm_destroy(dlt_comm *c) {
    if (!c) return;
    if (c->nccl) c->ctx->be->nccl_free(c->ctx, c->nccl, c->broken != DLT_OK);
    dlt__tcp_close(c->tcp);
    dlt_tensor_release(c->one);
    free(c);
}

int32_t dlt_comm_rank(const dlt_comm *c) { return c ? c->rank : -1; }
int32_t dlt_comm_world_size(const dlt_comm *c) { return c ? c->world : 0; }
dlt_ctx *dlt_comm_ctx(const dlt_comm *c) { return c ? c->ctx : NULL; }
const char *dlt_comm_backend(const dlt_comm *c) {
    return !c ? "" : c->ctx->device_type == DLT_DEVICE_CUDA ? "nccl" : "tcp";
}

dlt_status dlt_comm_check(dlt_comm *c) {
    static const char *F = "dlt_comm_check";
    DLT_NULL_CHECK(c, F);
    DLT_CHECK(dlt__comm_ok(c, F));
    if (c->nccl && c->ctx->be->nccl_check) {
        dlt_status st = c->ctx->be->nccl_check(c->ctx, c->nccl);
        if (st != DLT_OK) return dlt__comm_fail(c, dlt__err_wrap(st, F));
    }
    return DLT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Collectives
 * ------------------------------------------------------------------------------------- */

/* What a rank was asked to do, exchanged before a CPU collective (all fields int64). */
typedef struct call_desc {
    int64_t seq, coll, dtype, count, arg; /* arg: the op, or the root */
} call_desc;

static void describe(const call_desc *d, char *buf, size_t n) {
    const char *what = d->coll >= 0 && d->coll < 4 ? COLL_NAMES[d->coll] : "?";
    if (d->coll == DLT_COLL_BROADCAST)
        snprintf(buf, n, "%s of %lld %s elements from root %lld", what, (long long)d->count,
                 dlt_dtype_name((int32_t)d->dtype), (long long)d->arg);
    else
        snprintf(buf, n, "%s(%s) of %lld %s elements", what,
                 d->arg >= 0 && d->arg < 4 ? OP_NAMES[d->arg] : "?", (long long)d->count,
                 dlt_dtype_name((int32_t)d->dtype));
}

/* Every rank compares every rank's call with rank 0's: the same verdict everywhere. */
static dlt_status check_calls(dlt_comm *c, const call_desc *mine, const char *func) {
    const size_t n = (size_t)c->world;
    call_desc *all = malloc(n * sizeof *all);
    if (!all) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the call check");
    dlt_status st = dlt__tcp_all_gather(c->tcp, mine, all, sizeof *mine, func);
    if (st != DLT_OK) {
        free(all);
        return fail(c, st);
    }
    for (int32_t r = 1; r < c->world && st == DLT_OK; r++) {
        const call_desc *a = &all[0], *b = &all[r];
        if (a->seq == b->seq && a->coll == b->coll && a->dtype == b->dtype && a->count == b->count &&
            a->arg == b->arg)
            continue;
        char da[160], db[160];
        describe(a, da, sizeof da);
        describe(b, db, sizeof db);
        dlt_status code = (a->coll != b->coll || a->arg != b->arg || a->seq != b->seq)
                              ? DLT_ERR_INVALID_ARGUMENT
                              : a->dtype != b->dtype ? DLT_ERR_DTYPE : DLT_ERR_SHAPE;
        st = dlt__err(code, func,
                      "the ranks called different collectives: rank 0 %s (call %lld), rank %d %s "
                      "(call %lld); every rank must make the same calls in the same order",
                      da, (long long)a->seq, r, db, (long long)b->seq);
    }
    int out_of_step = 0;
    for (int32_t r = 1; r < c->world; r++) out_of_step |= all[r].seq != all[0].seq;
    free(all);
    /* a rank skipped or added a call: the sequences cannot line up again */
    return out_of_step ? dlt__comm_fail(c, st) : st;
}

/* A collective over the TCP ring on host memory, after the cross-rank check. */
static dlt_status tcp_checked(dlt_comm *c, int32_t coll, const void *send, void *recv, size_t count,
                              int32_t dtype, int32_t arg, const char *func) {
    c->seq++;
    call_desc d = {(int64_t)c->seq, coll, dtype, (int64_t)count, arg};
    DLT_CHECK(check_calls(c, &d, func));
    if (count == 0) return DLT_OK;
    dlt_status st = DLT_OK;
    switch (coll) {
    case DLT_COLL_ALL_REDUCE: st = dlt__tcp_all_reduce(c->tcp, recv, count, dtype, arg, func); break;
    case DLT_COLL_BROADCAST: st = dlt__tcp_broadcast(c->tcp, recv, count * dlt__dtype_size(dtype), arg, func); break;
    case DLT_COLL_ALL_GATHER: st = dlt__tcp_all_gather(c->tcp, send, recv, count * dlt__dtype_size(dtype), func); break;
    default: st = dlt__tcp_reduce_scatter(c->tcp, send, recv, count, dtype, arg, func); break;
    }
    return st == DLT_OK ? st : fail(c, st);
}

/* One collective on raw device/host memory of ctx (validated by the caller). */
static dlt_status run_raw(dlt_comm *c, int32_t coll, const void *send, void *recv, size_t count,
                          int32_t dtype, int32_t arg, int32_t side, const char *func) {
    DLT_CHECK(dlt__comm_ok(c, func));
    if (c->world == 1 && !c->nccl) {
        /* one rank: the collectives are copies (or nothing). A one-rank NCCL communicator
         * does go through NCCL: one GPU then runs DDP's whole path (gpu_check.sh). */
        if (send != recv && count && (coll == DLT_COLL_ALL_GATHER || coll == DLT_COLL_REDUCE_SCATTER))
            DLT_CHECK(c->ctx->be->memcpy_d2d(c->ctx, recv, send, count * dlt__dtype_size(dtype)));
        return DLT_OK;
    }
    if (c->nccl) {
        dlt_nccl_launch L;
        memset(&L, 0, sizeof L);
        L.coll = coll;
        L.dtype = dtype;
        L.op = coll == DLT_COLL_BROADCAST ? DLT_REDUCE_SUM : arg;
        L.root = coll == DLT_COLL_BROADCAST ? arg : 0;
        L.send = send;
        L.recv = recv;
        L.count = count;
        L.side = side;
        dlt_status st = c->ctx->be->nccl_run(c->ctx, c->nccl, &L);
        return st == DLT_OK ? st : fail(c, dlt__err_wrap(st, func));
    }
    if (!c->tcp)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, func, "this communicator has no transport for %s tensors",
                        c->ctx->be->name);
    return tcp_checked(c, coll, send, recv, count, dtype, arg, func);
}

static dlt_status check_op(int32_t op, int32_t dtype, const char *func) {
    if (op < DLT_REDUCE_SUM || op > DLT_REDUCE_MIN)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "unknown reduction %d (DLT_REDUCE_SUM, _AVG, _MAX or _MIN)", op);
    if (op == DLT_REDUCE_AVG && !dlt__is_float(dtype))
        return dlt__err(DLT_ERR_DTYPE, func, "AVG needs a floating-point tensor, got %s (use SUM)",
                        dlt_dtype_name(dtype));
    return DLT_OK;
}

static dlt_status check_tensor(dlt_comm *c, const dlt_tensor *t, const char *func, const char *arg) {
    DLT_CHECK(dlt__check_tensor(t, func, arg));
    if (t->ctx != c->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, func,
                        "%s is on another context than the communicator (%s device %d)", arg,
                        c->ctx->be->name, c->ctx->device_index);
    return dlt__ctx_ok(c->ctx, func);
}

dlt_status dlt__comm_all_reduce(dlt_comm *c, dlt_tensor *t, int32_t op, int32_t side, const char *func) {
    void *p = dlt__data(t);
    return run_raw(c, DLT_COLL_ALL_REDUCE, p, p, (size_t)t->numel, t->dtype, op, side, func);
}

dlt_status dlt__comm_broadcast(dlt_comm *c, dlt_tensor *t, int32_t root, const char *func) {
    void *p = dlt__data(t);
    return run_raw(c, DLT_COLL_BROADCAST, p, p, (size_t)t->numel, t->dtype, root, 0, func);
}

dlt_status dlt_comm_all_reduce(dlt_comm *c, dlt_tensor *t, int32_t op) {
    static const char *F = "dlt_comm_all_reduce";
    DLT_NULL_CHECK(c, F);
    DLT_CHECK(check_tensor(c, t, F, "t"));
    DLT_CHECK(check_op(op, t->dtype, F));
    DLT_CHECK(dlt__comm_all_reduce(c, t, op, 0, F));
    dlt__tensor_written(t);
    return DLT_OK;
}

dlt_status dlt_comm_broadcast(dlt_comm *c, dlt_tensor *t, int32_t root) {
    static const char *F = "dlt_comm_broadcast";
    DLT_NULL_CHECK(c, F);
    DLT_CHECK(check_tensor(c, t, F, "t"));
    if (root < 0 || root >= c->world)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "root %d is outside 0..%d", root, c->world - 1);
    DLT_CHECK(dlt__comm_broadcast(c, t, root, F));
    dlt__tensor_written(t);
    return DLT_OK;
}

static dlt_status check_blocks(dlt_comm *c, const dlt_tensor *big, const dlt_tensor *small, const char *func,
                               const char *big_name, const char *small_name) {
    if (big->dtype != small->dtype)
        return dlt__err(DLT_ERR_DTYPE, func, "%s is %s but %s is %s", big_name, dlt_dtype_name(big->dtype),
                        small_name, dlt_dtype_name(small->dtype));
    if (big->numel != small->numel * c->world) {
        char a[96], b[96];
        return dlt__err(DLT_ERR_SHAPE, func,
                        "%s %s must hold world size (%d) times the elements of %s %s", big_name,
                        dlt__shape_str(big, a, sizeof a), c->world, small_name,
                        dlt__shape_str(small, b, sizeof b));
    }
    return DLT_OK;
}

dlt_status dlt_comm_all_gather(dlt_comm *c, dlt_tensor *out, const dlt_tensor *in) {
    static const char *F = "dlt_comm_all_gather";
    DLT_NULL_CHECK(c, F);
    DLT_CHECK(check_tensor(c, out, F, "out"));
    DLT_CHECK(check_tensor(c, in, F, "in"));
    DLT_CHECK(check_blocks(c, out, in, F, "out", "in"));
    DLT_CHECK(run_raw(c, DLT_COLL_ALL_GATHER, dlt__data(in), dlt__data(out), (size_t)in->numel, in->dtype,
                      DLT_REDUCE_SUM, 0, F));
    dlt__tensor_written(out);
    return DLT_OK;
}

dlt_status dlt_comm_reduce_scatter(dlt_comm *c, dlt_tensor *out, const dlt_tensor *in, int32_t op) {
    static const char *F = "dlt_comm_reduce_scatter";
    DLT_NULL_CHECK(c, F);
    DLT_CHECK(check_tensor(c, out, F, "out"));
    DLT_CHECK(check_tensor(c, in, F, "in"));
    DLT_CHECK(check_op(op, in->dtype, F));
    DLT_CHECK(check_blocks(c, in, out, F, "in", "out"));
    if (out->storage == in->storage && out->numel)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "out and in share memory");
    DLT_CHECK(run_raw(c, DLT_COLL_REDUCE_SCATTER, dlt__data(in), dlt__data(out), (size_t)out->numel, in->dtype,
                      op, 0, F));
    dlt__tensor_written(out);
    return DLT_OK;
}

/* The device one-element buffer of NCCL-only barriers and host agreement. */
static dlt_status device_scratch(dlt_comm *c, int64_t n, const char *func) {
    if (c->one && c->one->numel >= n) return DLT_OK;
    dlt_tensor *t = NULL;
    DLT_CHECK(dlt__tensor_new(c->ctx, DLT_I64, &n, 1, DLT_FORMAT_CONTIGUOUS, func, &t));
    dlt_tensor_release(c->one);
    c->one = t;
    return DLT_OK;
}

static dlt_status nccl_wait(dlt_comm *c, const char *func) {
    if (!c->nccl || !c->ctx->be->nccl_wait) return DLT_OK;
    dlt_status st = c->ctx->be->nccl_wait(c->ctx, c->nccl);
    return st == DLT_OK ? st : fail(c, dlt__err_wrap(st, func));
}

dlt_status dlt__comm_max_i64(dlt_comm *c, int64_t *v, int32_t n, const char *func) {
    DLT_CHECK(dlt__comm_ok(c, func));
    if (c->world == 1 || n == 0) return DLT_OK;
    if (c->tcp) return tcp_checked(c, DLT_COLL_ALL_REDUCE, v, v, (size_t)n, DLT_I64, DLT_REDUCE_MAX, func);
    /* NCCL only: through the device */
    DLT_CHECK(device_scratch(c, n, func));
    dlt_ctx *ctx = c->ctx;
    DLT_CHECK(ctx->be->memcpy_h2d(ctx, dlt__data(c->one), v, (size_t)n * sizeof *v));
    DLT_CHECK(run_raw(c, DLT_COLL_ALL_REDUCE, dlt__data(c->one), dlt__data(c->one), (size_t)n, DLT_I64,
                      DLT_REDUCE_MAX, 0, func));
    DLT_CHECK(nccl_wait(c, func));
    return ctx->be->memcpy_d2h(ctx, v, dlt__data(c->one), (size_t)n * sizeof *v);
}

dlt_status dlt__comm_broadcast_host(dlt_comm *c, void *buf, size_t nbytes, int32_t root, const char *func) {
    DLT_CHECK(dlt__comm_ok(c, func));
    if (c->world == 1 || nbytes == 0) return DLT_OK;
    if (c->tcp) return tcp_checked(c, DLT_COLL_BROADCAST, buf, buf, nbytes, DLT_U8, root, func);
    const int64_t n = (int64_t)((nbytes + 7) / 8);
    DLT_CHECK(device_scratch(c, n, func));
    dlt_ctx *ctx = c->ctx;
    DLT_CHECK(ctx->be->memcpy_h2d(ctx, dlt__data(c->one), buf, nbytes));
    DLT_CHECK(run_raw(c, DLT_COLL_BROADCAST, dlt__data(c->one), dlt__data(c->one), nbytes, DLT_U8, root, 0,
                      func));
    DLT_CHECK(nccl_wait(c, func));
    return ctx->be->memcpy_d2h(ctx, buf, dlt__data(c->one), nbytes);
}

dlt_status dlt_comm_barrier(dlt_comm *c) {
    static const char *F = "dlt_comm_barrier";
    DLT_NULL_CHECK(c, F);
    DLT_CHECK(dlt__comm_ok(c, F));
    DLT_CHECK(dlt__ctx_ok(c->ctx, F));
    if (c->ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "a barrier waits for the host: not inside a captured step");
    DLT_CHECK(nccl_wait(c, F));
    if (c->world == 1) return DLT_OK;
    int64_t v = c->rank;
    return dlt__comm_max_i64(c, &v, 1, F);
}

/* ---------------------------------------------------------------------------------------
 * The GradScaler's agreement and checkpoints
 * ------------------------------------------------------------------------------------- */

static dlt_status found_inf_hook(void *user, dlt_ctx *ctx, float *flag) {
    dlt_comm *c = user;
    (void)ctx;
    return run_raw(c, DLT_COLL_ALL_REDUCE, flag, flag, 1, DLT_F32, DLT_REDUCE_MAX, 0,
                   "dlt_grad_scaler_unscale");
}

dlt_status dlt_grad_scaler_set_comm(dlt_grad_scaler *s, dlt_comm *c) {
    static const char *F = "dlt_grad_scaler_set_comm";
    DLT_NULL_CHECK(s, F);
    if (c && dlt_grad_scaler_is_enabled(s)) {
        dlt_tensor *scale = dlt_grad_scaler_scale_tensor(s);
        if (scale->ctx != c->ctx)
            return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F,
                            "the scaler and the communicator belong to different contexts");
    }
    dlt__grad_scaler_set_found_inf_hook(s, c ? found_inf_hook : NULL, c);
    return DLT_OK;
}

dlt_status dlt_comm_checkpoint_save(dlt_comm *c, const char *path, const dlt_module *m, dlt_optimizer *opt,
                                    dlt_grad_scaler *scaler, int64_t epoch, int64_t step) {
    static const char *F = "dlt_comm_checkpoint_save";
    DLT_NULL_CHECK(c, F);
    DLT_CHECK(dlt__comm_ok(c, F));
    /* the outcome travels as a status and its message */
    struct {
        int32_t status;
        char msg[508];
    } out;
    memset(&out, 0, sizeof out);
    if (c->rank == 0) {
        out.status = dlt_checkpoint_save(path, m, opt, scaler, epoch, step);
        if (out.status != DLT_OK) snprintf(out.msg, sizeof out.msg, "%s", dlt_last_error());
    }
    dlt_status st = dlt__comm_broadcast_host(c, &out, sizeof out, 0, F);
    if (st != DLT_OK) return st;
    if (out.status == DLT_OK) return DLT_OK;
    if (c->rank == 0) return dlt__err(out.status, F, "%s", out.msg);
    return dlt__err(out.status, F, "rank 0 could not write the checkpoint: %s", out.msg);
}
