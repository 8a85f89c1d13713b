/*
 * nccl.c - NCCL for the communicator (lib/dist/comm.c), reached through the backend table.
 *
 * NCCL is loaded at run time (dlopen of libnccl.so.2, or DLT_NCCL_LIBRARY), so libdltrain
 * has no link-time NCCL dependency and builds where only the CUDA toolkit is installed.
 * The few entry points used are declared here with the ABI nccl.h documents (its header
 * may be absent); where nccl.h is present the declarations are checked against it at
 * compile time. NCCL >= 2.10 is required (ncclAvg).
 *
 * Per communicator: the NCCL communicator, a side stream (DDP's all-reduces overlap the
 * backward there; fork/join events order it against the context stream, and both are
 * capturable), and a watchdog thread, as PyTorch's NCCL process group has one: every
 * collective enqueued outside capture is followed by an event; the watchdog polls those
 * events and ncclCommGetAsyncError every 50 ms, and when a collective outlives the timeout
 * or NCCL reports an error (a peer died: ncclRemoteError, ncclSystemError) it aborts the
 * communicator (ncclCommAbort), which ends the kernels waiting for the peer, so the
 * process is not hung; the next call on the communicator reports the failure.
 *
 * Compile-checked only in this session (no GPU was available): scripts/device/gpu_check.sh
 * (stage "nccl") and scripts/device/ddp_check.sh run it on GPUs.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"
#include "ops_cuda.h"

/* ---- NCCL's ABI (nccl.h: ncclResult_t, ncclDataType_t, ncclRedOp_t are C enums) ---- */
typedef struct dlt_nccl_comm_opaque *dlt_nccl_comm_t;
typedef struct {
    char internal[128];
} dlt_nccl_unique_id_t;
enum {
    NCCL_SUCCESS = 0,
    NCCL_IN_PROGRESS = 7,
    NCCL_INT8 = 0, NCCL_UINT8 = 1, NCCL_INT32 = 2, NCCL_INT64 = 4, NCCL_FLOAT16 = 6,
    NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9,
    NCCL_SUM = 0, NCCL_MAX = 2, NCCL_MIN = 3, NCCL_AVG = 4,
};
#define NCCL_MIN_VERSION 21000 /* 2.10: ncclAvg */

#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
_Static_assert(sizeof(ncclUniqueId) == sizeof(dlt_nccl_unique_id_t), "ncclUniqueId");
_Static_assert(DLT_NCCL_UNIQUE_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "NCCL_UNIQUE_ID_BYTES");
_Static_assert((int)ncclSuccess == NCCL_SUCCESS && (int)ncclInProgress == NCCL_IN_PROGRESS, "ncclResult_t");
_Static_assert((int)ncclUint8 == NCCL_UINT8 && (int)ncclInt32 == NCCL_INT32 && (int)ncclInt64 == NCCL_INT64 &&
                   (int)ncclFloat16 == NCCL_FLOAT16 && (int)ncclFloat32 == NCCL_FLOAT32 &&
                   (int)ncclBfloat16 == NCCL_BFLOAT16,
               "ncclDataType_t");
_Static_assert((int)ncclSum == NCCL_SUM && (int)ncclMax == NCCL_MAX && (int)ncclMin == NCCL_MIN &&
                   (int)ncclAvg == NCCL_AVG,
               "ncclRedOp_t");
_Static_assert(sizeof(ncclResult_t) == sizeof(int) && sizeof(ncclDataType_t) == sizeof(int) &&
                   sizeof(ncclRedOp_t) == sizeof(int),
               "NCCL enums are passed as int");
#endif
#endif

typedef int nccl_res;
static struct {
    pthread_once_t once;
    void *h;
    char err[400];
    int version;
    nccl_res (*GetVersion)(int *);
    nccl_res (*GetUniqueId)(dlt_nccl_unique_id_t *);
    nccl_res (*CommInitRank)(dlt_nccl_comm_t *, int, dlt_nccl_unique_id_t, int);
    nccl_res (*CommDestroy)(dlt_nccl_comm_t);
    nccl_res (*CommAbort)(dlt_nccl_comm_t);
    nccl_res (*CommGetAsyncError)(dlt_nccl_comm_t, nccl_res *);
    const char *(*GetErrorString)(nccl_res);
    const char *(*GetLastError)(dlt_nccl_comm_t); /* 2.13+, optional */
    nccl_res (*AllReduce)(const void *, void *, size_t, int, int, dlt_nccl_comm_t, cudaStream_t);
    nccl_res (*Broadcast)(const void *, void *, size_t, int, int, dlt_nccl_comm_t, cudaStream_t);
    nccl_res (*AllGather)(const void *, void *, size_t, int, dlt_nccl_comm_t, cudaStream_t);
    nccl_res (*ReduceScatter)(const void *, void *, size_t, int, int, dlt_nccl_comm_t, cudaStream_t);
} g = {PTHREAD_ONCE_INIT};

static void *sym(const char *name) {
    void *p = dlsym(g.h, name);
    if (!p && !g.err[0]) snprintf(g.err, sizeof g.err, "the NCCL library lacks %s (too old?)", name);
    return p;
}

static void load_once(void) {
    char path_buf[4096];
    const char *path = dlt__env_path(DLT__ENV_NCCL_LIBRARY, path_buf, sizeof path_buf);
    g.h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!g.h) {
        const char *e = dlerror();
        snprintf(g.err, sizeof g.err,
                 "cannot load %s (%s): install NCCL (libnccl2) or point DLT_NCCL_LIBRARY at it", path,
                 e ? e : "dlopen failed");
        return;
    }
    *(void **)&g.GetVersion = sym("ncclGetVersion");
    *(void **)&g.GetUniqueId = sym("ncclGetUniqueId");
    *(void **)&g.CommInitRank = sym("ncclCommInitRank");
    *(void **)&g.CommDestroy = sym("ncclCommDestroy");
    *(void **)&g.CommAbort = sym("ncclCommAbort");
    *(void **)&g.CommGetAsyncError = sym("ncclCommGetAsyncError");
    *(void **)&g.GetErrorString = sym("ncclGetErrorString");
    *(void **)&g.AllReduce = sym("ncclAllReduce");
    *(void **)&g.Broadcast = sym("ncclBroadcast");
    *(void **)&g.AllGather = sym("ncclAllGather");
    *(void **)&g.ReduceScatter = sym("ncclReduceScatter");
    *(void **)&g.GetLastError = dlsym(g.h, "ncclGetLastError");
    if (g.err[0]) return;
    if (g.GetVersion(&g.version) != NCCL_SUCCESS || g.version < NCCL_MIN_VERSION)
        snprintf(g.err, sizeof g.err, "NCCL %d is too old: libdltrain needs 2.10 or later (ncclAvg)", g.version);
}

static dlt_status loaded(const char *func) {
    pthread_once(&g.once, load_once);
    if (g.err[0]) return dlt__err(DLT_ERR_NCCL, func, "%s", g.err);
    return DLT_OK;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the communicator ---- */

#define TRACKED 64 /* eager collectives the watchdog follows at once */

typedef struct nccl_comm {
    dlt_ctx *ctx;
    int device;
    dlt_nccl_comm_t comm;
    cudaStream_t side;
    cudaEvent_t fork_ev, join_ev;
    int64_t timeout_ms;
    /* watchdog (mu guards everything below) */
    pthread_t wd;
    int wd_started, stop;
    pthread_mutex_t mu;
    dlt_status failed;
    char msg[480];
    int aborted;
    cudaEvent_t evs[TRACKED];
    int64_t deadline[TRACKED];
    int head, count;
} nccl_comm;

static const char *nccl_error(nccl_comm *c, nccl_res r) {
    const char *last = (c && c->comm && g.GetLastError) ? g.GetLastError(c->comm) : NULL;
    return last && *last ? last : g.GetErrorString(r);
}

/* Records the failure and aborts (mu held). */
static void fail_locked(nccl_comm *c, dlt_status st, const char *msg) {
    if (c->failed == DLT_OK) {
        c->failed = st;
        snprintf(c->msg, sizeof c->msg, "%s", msg);
    }
    if (!c->aborted && c->comm) {
        c->aborted = 1;
        (void)g.CommAbort(c->comm);
    }
}

static void poll_once(nccl_comm *c) {
    while (c->count > 0) {
        cudaError_t e = cudaEventQuery(c->evs[c->head]);
        if (e == cudaErrorNotReady) break;
        if (e != cudaSuccess) (void)cudaGetLastError();
        c->head = (c->head + 1) % TRACKED;
        c->count--;
    }
    if (c->count > 0 && now_ms() > c->deadline[c->head]) {
        char m[200];
        snprintf(m, sizeof m,
                 "an NCCL collective did not finish within %.1f s (the timeout): a peer process is "
                 "stuck, dead or waiting in another collective; the communicator was aborted",
                 (double)c->timeout_ms / 1000.0);
        fail_locked(c, DLT_ERR_DIST_TIMEOUT, m);
    }
    if (!c->aborted && c->comm) {
        nccl_res async = NCCL_SUCCESS;
        if (g.CommGetAsyncError(c->comm, &async) == NCCL_SUCCESS && async != NCCL_SUCCESS &&
            async != NCCL_IN_PROGRESS) {
            char m[400];
            snprintf(m, sizeof m, "NCCL reported an asynchronous error: %s (a peer process failed?); the "
                     "communicator was aborted", nccl_error(c, async));
            fail_locked(c, DLT_ERR_DIST, m);
        }
    }
}

static void *watchdog(void *arg) {
    nccl_comm *c = arg;
    (void)cudaSetDevice(c->device);
    for (;;) {
        pthread_mutex_lock(&c->mu);
        const int stop = c->stop;
        if (!stop) poll_once(c);
        pthread_mutex_unlock(&c->mu);
        if (stop) return NULL;
        sleep_ms(50);
    }
}

static dlt_status failed_status(nccl_comm *c, const char *func) {
    pthread_mutex_lock(&c->mu);
    dlt_status st = c->failed;
    char msg[480];
    snprintf(msg, sizeof msg, "%s", c->msg);
    pthread_mutex_unlock(&c->mu);
    return st == DLT_OK ? st : dlt__err(st, func, "%s", msg);
}

/* ncclCommInitRank blocks until every rank joined: it runs in a helper thread so that the
 * caller can give up at the timeout (the helper then cleans up after itself). */
typedef struct init_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dlt_nccl_unique_id_t id;
    int n, rank, device, done, abandoned;
    nccl_res res;
    dlt_nccl_comm_t comm;
} init_job;

static void job_free(init_job *j) {
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static void *init_thread(void *arg) {
    init_job *j = arg;
    (void)cudaSetDevice(j->device);
    dlt_nccl_comm_t comm = NULL;
    nccl_res r = g.CommInitRank(&comm, j->n, j->id, j->rank);
    pthread_mutex_lock(&j->mu);
    j->res = r;
    j->comm = comm;
    j->done = 1;
    const int abandoned = j->abandoned;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (abandoned) {
        if (r == NCCL_SUCCESS) (void)g.CommAbort(comm);
        job_free(j);
    }
    return NULL;
}

static void comm_release(nccl_comm *c, int abort) {
    if (c->wd_started) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->wd, NULL);
    }
    if (c->comm && !c->aborted) {
        if (abort) {
            (void)g.CommAbort(c->comm);
        } else {
            /* destroy waits for the communicator's work: let the side stream drain first */
            if (c->side) (void)cudaStreamSynchronize(c->side);
            (void)g.CommDestroy(c->comm);
        }
    }
    for (int i = 0; i < TRACKED; i++)
        if (c->evs[i]) (void)cudaEventDestroy(c->evs[i]);
    if (c->fork_ev) (void)cudaEventDestroy(c->fork_ev);
    if (c->join_ev) (void)cudaEventDestroy(c->join_ev);
    if (c->side) (void)cudaStreamDestroy(c->side);
    (void)cudaGetLastError();
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static dlt_status nccl_init(dlt_ctx *ctx, const void *id, int32_t rank, int32_t world, int64_t timeout_ms,
                            void **out) {
    static const char *F = "dlt_comm_create";
    DLT_CHECK(loaded(F));
    nccl_comm *c = calloc(1, sizeof *c);
    if (!c) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the NCCL communicator");
    pthread_mutex_init(&c->mu, NULL);
    c->ctx = ctx;
    c->device = ctx->device_index;
    c->timeout_ms = timeout_ms;
    dlt_status st = DLT_OK;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->fork_ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->join_ev, cudaEventDisableTiming);
    for (int i = 0; i < TRACKED && e == cudaSuccess; i++) e = cudaEventCreateWithFlags(&c->evs[i], cudaEventDisableTiming);
    if (e != cudaSuccess) {
        st = dlt__cuda_fail(ctx, e, F, "the communicator's stream and events");
        comm_release(c, 0);
        return st;
    }
    init_job *j = calloc(1, sizeof *j);
    if (!j) {
        comm_release(c, 0);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the NCCL set-up");
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    memcpy(&j->id, id, sizeof j->id);
    j->n = world;
    j->rank = rank;
    j->device = c->device;
    pthread_t th;
    if (pthread_create(&th, NULL, init_thread, j) != 0) {
        job_free(j);
        comm_release(c, 0);
        return dlt__err(DLT_ERR_NCCL, F, "cannot start the NCCL set-up thread");
    }
    pthread_detach(th);
    const int64_t deadline = now_ms() + timeout_ms;
    pthread_mutex_lock(&j->mu);
    while (!j->done && now_ms() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    if (!j->done) {
        j->abandoned = 1; /* the thread frees the job when NCCL returns */
        pthread_mutex_unlock(&j->mu);
        comm_release(c, 0);
        return dlt__err(DLT_ERR_DIST_TIMEOUT, F,
                        "ncclCommInitRank did not finish within %.1f s: a rank did not reach it",
                        (double)timeout_ms / 1000.0);
    }
    const nccl_res r = j->res;
    c->comm = j->comm;
    pthread_mutex_unlock(&j->mu);
    job_free(j);
    if (r != NCCL_SUCCESS) {
        st = dlt__err(DLT_ERR_NCCL, F, "ncclCommInitRank(rank %d of %d) failed: %s", rank, world,
                      g.GetErrorString(r));
        comm_release(c, 0);
        return st;
    }
    if (pthread_create(&c->wd, NULL, watchdog, c) != 0) {
        comm_release(c, 1);
        return dlt__err(DLT_ERR_NCCL, F, "cannot start the NCCL watchdog thread");
    }
    c->wd_started = 1;
    *out = c;
    return DLT_OK;
}

static void nccl_free(dlt_ctx *ctx, void *comm, int32_t abort) {
    (void)ctx;
    if (comm) comm_release((nccl_comm *)comm, abort);
}

static dlt_status nccl_unique_id(dlt_ctx *ctx, void *id, size_t n, int32_t *version) {
    static const char *F = "dlt_nccl_unique_id";
    (void)ctx;
    DLT_CHECK(loaded(F));
    if (version) *version = g.version;
    if (!id) return DLT_OK;
    if (n < sizeof(dlt_nccl_unique_id_t))
        return dlt__err(DLT_ERR_INTERNAL, F, "unique id buffer of %zu bytes", n);
    nccl_res r = g.GetUniqueId((dlt_nccl_unique_id_t *)id);
    if (r != NCCL_SUCCESS) return dlt__err(DLT_ERR_NCCL, F, "ncclGetUniqueId failed: %s", g.GetErrorString(r));
    return DLT_OK;
}

static int nccl_dtype(int32_t dtype) {
    switch (dtype) {
    case DLT_F32: return NCCL_FLOAT32;
    case DLT_F16: return NCCL_FLOAT16;
    case DLT_BF16: return NCCL_BFLOAT16;
    case DLT_I32: return NCCL_INT32;
    case DLT_I64: return NCCL_INT64;
    default: return NCCL_UINT8;
    }
}

static int nccl_op(int32_t op) {
    switch (op) {
    case DLT_REDUCE_AVG: return NCCL_AVG;
    case DLT_REDUCE_MAX: return NCCL_MAX;
    case DLT_REDUCE_MIN: return NCCL_MIN;
    default: return NCCL_SUM;
    }
}

static dlt_status nccl_run(dlt_ctx *ctx, void *comm, const dlt_nccl_launch *L) {
    static const char *F = "dlt_comm";
    nccl_comm *c = comm;
    cudaStream_t s = L->side ? c->side : dlt__stream(ctx);
    const int dt = nccl_dtype(L->dtype);
    nccl_res r;
    /* under the lock: NCCL forbids two threads on one communicator at once, and the watchdog
     * (CommGetAsyncError, CommAbort, which frees it) must not run while this call enqueues */
    pthread_mutex_lock(&c->mu);
    if (c->failed != DLT_OK) {
        pthread_mutex_unlock(&c->mu);
        return failed_status(c, F);
    }
    switch (L->coll) {
    case DLT_COLL_ALL_REDUCE: r = g.AllReduce(L->send, L->recv, L->count, dt, nccl_op(L->op), c->comm, s); break;
    case DLT_COLL_BROADCAST: r = g.Broadcast(L->send, L->recv, L->count, dt, L->root, c->comm, s); break;
    case DLT_COLL_ALL_GATHER: r = g.AllGather(L->send, L->recv, L->count, dt, c->comm, s); break;
    default: r = g.ReduceScatter(L->send, L->recv, L->count, dt, nccl_op(L->op), c->comm, s); break;
    }
    if (r != NCCL_SUCCESS) {
        dlt_status st = dlt__err(DLT_ERR_NCCL, F, "NCCL collective failed: %s", nccl_error(c, r));
        fail_locked(c, DLT_ERR_NCCL, dlt_last_error());
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    if (!ctx->capturing) { /* the watchdog follows it (a captured one has no queryable event) */
        if (c->count < TRACKED) {
            const int slot = (c->head + c->count) % TRACKED;
            if (cudaEventRecord(c->evs[slot], s) == cudaSuccess) {
                c->deadline[slot] = now_ms() + c->timeout_ms;
                c->count++;
            } else {
                (void)cudaGetLastError();
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    return DLT_OK;
}

static dlt_status nccl_fork(dlt_ctx *ctx, void *comm) {
    nccl_comm *c = comm;
    DLT_CU(ctx, cudaEventRecord(c->fork_ev, dlt__stream(ctx)), "dlt_backward");
    DLT_CU(ctx, cudaStreamWaitEvent(c->side, c->fork_ev, 0), "dlt_backward");
    return DLT_OK;
}

static dlt_status nccl_join(dlt_ctx *ctx, void *comm) {
    nccl_comm *c = comm;
    DLT_CU(ctx, cudaEventRecord(c->join_ev, c->side), "dlt_backward");
    DLT_CU(ctx, cudaStreamWaitEvent(dlt__stream(ctx), c->join_ev, 0), "dlt_backward");
    return DLT_OK;
}

static dlt_status nccl_check(dlt_ctx *ctx, void *comm) {
    nccl_comm *c = comm;
    (void)ctx;
    pthread_mutex_lock(&c->mu);
    poll_once(c);
    pthread_mutex_unlock(&c->mu);
    return failed_status(c, "dlt_comm_check");
}

static dlt_status nccl_wait(dlt_ctx *ctx, void *comm) {
    static const char *F = "dlt_comm_barrier";
    nccl_comm *c = comm;
    if (ctx->capturing) return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot wait for the device during capture");
    cudaEvent_t ev = NULL;
    DLT_CU(ctx, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), F);
    cudaError_t e = cudaEventRecord(ev, dlt__stream(ctx));
    const int64_t deadline = now_ms() + c->timeout_ms;
    dlt_status st = DLT_OK;
    while (e == cudaSuccess) {
        e = cudaEventQuery(ev);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) break;
        e = cudaSuccess;
        if ((st = failed_status(c, F)) != DLT_OK) break;
        if (now_ms() > deadline) {
            pthread_mutex_lock(&c->mu);
            fail_locked(c, DLT_ERR_DIST_TIMEOUT, "the device work did not finish within the timeout; the "
                                                 "communicator was aborted");
            pthread_mutex_unlock(&c->mu);
            st = failed_status(c, F);
            break;
        }
        sleep_ms(1);
    }
    (void)cudaEventDestroy(ev);
    if (st == DLT_OK && e != cudaSuccess) st = dlt__cuda_fail(ctx, e, F, "waiting for the collectives");
    if (st == DLT_OK) st = failed_status(c, F);
    return st;
}

/* The table entries (ops_cuda.h: DLT_CUDA_DIST_ENTRIES). */
dlt_status dlt__cuda_nccl_unique_id(dlt_ctx *ctx, void *id, size_t n, int32_t *version) {
    return nccl_unique_id(ctx, id, n, version);
}
dlt_status dlt__cuda_nccl_init(dlt_ctx *ctx, const void *id, int32_t rank, int32_t world, int64_t timeout_ms,
                               void **comm) {
    return nccl_init(ctx, id, rank, world, timeout_ms, comm);
}
void dlt__cuda_nccl_free(dlt_ctx *ctx, void *comm, int32_t abort) { nccl_free(ctx, comm, abort); }
dlt_status dlt__cuda_nccl_run(dlt_ctx *ctx, void *comm, const dlt_nccl_launch *L) { return nccl_run(ctx, comm, L); }
dlt_status dlt__cuda_nccl_fork(dlt_ctx *ctx, void *comm) { return nccl_fork(ctx, comm); }
dlt_status dlt__cuda_nccl_join(dlt_ctx *ctx, void *comm) { return nccl_join(ctx, comm); }
dlt_status dlt__cuda_nccl_check(dlt_ctx *ctx, void *comm) { return nccl_check(ctx, comm); }
dlt_status dlt__cuda_nccl_wait(dlt_ctx *ctx, void *comm) { return nccl_wait(ctx, comm); }
