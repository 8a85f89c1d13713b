/*
 * dist_internal.h - the communicator object and the TCP transport (lib/dist).
 *
 * comm.c      the public communicator: environment, creation, collectives' front doors
 *             (validation, the cross-rank check of what each rank called), dispatch to the
 *             TCP ring (CPU tensors) or NCCL (CUDA tensors, through the backend table)
 * tcp.c       rendezvous through rank 0 and a ring of TCP connections; ring collectives
 *             on host memory with a deadline on every wait
 * reduce.c    the elementwise reductions of the CPU collectives (per dtype and op)
 * ddp.c       DistributedDataParallel: buckets, the tape hook, no_sync
 * sampler.c   DistributedSampler's shard of an epoch
 */
#ifndef DLT_DIST_INTERNAL_H
#define DLT_DIST_INTERNAL_H

#include "../core/internal.h"
#include "dltrain/dist.h"

#define DLT_DIST_DEFAULT_TIMEOUT_MS ((int64_t)1800000) /* PyTorch's default_pg_timeout */
#define DLT_DIST_DEFAULT_PORT 29500                    /* torchrun's default */

/* ---- tcp.c ---- */
typedef struct dlt_tcp dlt_tcp;

typedef struct dlt_tcp_params {
    int32_t rank, world;
    const char *master_addr;
    int32_t master_port;
    int64_t timeout_ms;
    int32_t want_nccl;      /* this rank's context is CUDA (all ranks must agree) */
    const void *payload;    /* rank 0: bytes handed to every rank (the NCCL id), or NULL */
    size_t payload_n;       /* its size (the same constant on every rank; 0 for none) */
    const char *refuse;     /* this rank cannot take part (its NCCL is missing): rank 0 tells
                             * every rank so with this reason; others tell rank 0 */
} dlt_tcp_params;

/* Rendezvous and ring set-up. Other ranks receive rank 0's payload into payload_out. The
 * message names func. */
dlt_status dlt__tcp_open(const dlt_tcp_params *p, void *payload_out, const char *func, dlt_tcp **out);
/* Closes every connection now (peers see end-of-file and fail in turn). Idempotent. */
void dlt__tcp_abort(dlt_tcp *t);
void dlt__tcp_close(dlt_tcp *t);

/* Ring collectives on host memory; every one waits at most timeout_ms. The message names
 * func and the peer that failed. what names the collective for messages. */
dlt_status dlt__tcp_all_reduce(dlt_tcp *t, void *buf, size_t count, int32_t dtype, int32_t op,
                               const char *func);
dlt_status dlt__tcp_broadcast(dlt_tcp *t, void *buf, size_t nbytes, int32_t root, const char *func);
/* out holds world blocks of nbytes; block rank is copied from in (which may alias it). */
dlt_status dlt__tcp_all_gather(dlt_tcp *t, const void *in, void *out, size_t nbytes, const char *func);
/* in holds world blocks of count elements (left unchanged); out receives block rank. */
dlt_status dlt__tcp_reduce_scatter(dlt_tcp *t, const void *in, void *out, size_t count, int32_t dtype,
                                   int32_t op, const char *func);

/* ---- reduce.c ---- */
/* dst[i] = op(dst[i], src[i]) for count elements of dtype (SUM and AVG add; the AVG
 * division is dlt__reduce_finish's). */
void dlt__reduce_into(void *dst, const void *src, size_t count, int32_t dtype, int32_t op);
/* AVG: dst[i] /= world (floating dtypes); other ops: nothing. */
void dlt__reduce_finish(void *dst, size_t count, int32_t dtype, int32_t op, int32_t world);

/* ---- comm.c ---- */
struct dlt_comm {
    dlt_ctx *ctx;
    int32_t rank, world;
    int64_t timeout_ms;
    dlt_tcp *tcp;   /* NULL: world 1, or a communicator made from an NCCL id */
    void *nccl;     /* the CUDA backend's communicator, NULL on the CPU */
    dlt_status broken; /* sticky: the failure that aborted the communicator */
    char broken_msg[512];
    uint64_t seq;   /* collectives issued: part of the cross-rank check */
    dlt_tensor *one; /* CUDA: a one-element i32 device buffer for barriers without TCP */
};

/* DLT_OK, or the sticky failure with its message set again. */
dlt_status dlt__comm_ok(dlt_comm *c, const char *func);
/* Records a failure: aborts the transports (peers fail in turn) and keeps st and the
 * current message for every later call. Returns st. */
dlt_status dlt__comm_fail(dlt_comm *c, dlt_status st);
/* The collectives without the public argument checks (tensors validated by the caller).
 * side = 1 puts NCCL work on the communicator's side stream (DDP). */
dlt_status dlt__comm_all_reduce(dlt_comm *c, dlt_tensor *t, int32_t op, int32_t side, const char *func);
dlt_status dlt__comm_broadcast(dlt_comm *c, dlt_tensor *t, int32_t root, const char *func);
/* Host values: every rank receives the maximum of v over the ranks (for status agreement
 * and checks; through TCP, or NCCL and a synchronisation without it). */
dlt_status dlt__comm_max_i64(dlt_comm *c, int64_t *v, int32_t n, const char *func);
/* Host bytes from root to every rank. */
dlt_status dlt__comm_broadcast_host(dlt_comm *c, void *buf, size_t nbytes, int32_t root, const char *func);

/* ---- sampler.c ---- */
struct dlt_loader;
/* The loader's shard order for epoch (num_samples int32 indices into the dataset), in host
 * memory the caller frees. */
dlt_status dlt__shard_order(const struct dlt_loader *ld, int64_t epoch, int32_t **out, const char *func);

/* Monotonic milliseconds. */
int64_t dlt__now_ms(void);

#endif
