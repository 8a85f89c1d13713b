/*
 * plan_pool.h - cuDNN plans built by background threads, for an op whose plans take long to
 * build (cuDNN compiles some engines with NVRTC while it finalizes a plan). The op asks the
 * pool at each call whether the plan it wants is ready; the first time, the pool queues a
 * job and the op runs its own kernels meanwhile; a later call installs the finished plans.
 * BatchNorm uses it (batchnorm_cudnn.cu says why and when).
 *
 * Workers: one per thread, each with its own cuDNN handle (a handle must not be used by two
 * threads at once) bound to the context's stream and set as the thread's handle
 * (dlt__cudnn_set_thread_handle). A job touches no context state but read-only settings:
 * the plan cache and the context's allocator belong to the installing call. Jobs start in
 * request order. The pool lives in dlt_cuda_state.plan_pool and stops (after a stream
 * synchronisation) when the context is destroyed.
 */
#ifndef DLT_CUDA_PLAN_POOL_H
#define DLT_CUDA_PLAN_POOL_H

#include "cudnn_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DLT_PLAN_POOL_MAX_THREADS 16

typedef struct dlt_plan_job dlt_plan_job;
/* The pool's part of a job, the first member of the op's own job struct. */
struct dlt_plan_job {
    dlt_cudnn_key key; /* what the job builds: the pool finds a job by it */
    /* builds the plans into the op's job struct, on a worker thread */
    void (*build)(dlt_ctx *ctx, dlt_plan_job *job);
    /* frees a job that will not be installed, with whatever it built */
    void (*release)(dlt_plan_job *job);
    /* the pool's: 0 queued, 1 building, 2 done; build time; the queue */
    int state;
    double seconds;
    dlt_plan_job *next;
};

/* What dlt__plan_pool_gate answers. */
enum {
    DLT_PLAN_BUILD_HERE = 0, /* no background build: the caller finds or builds the plan now */
    DLT_PLAN_PENDING = 1,    /* being built: the caller runs its own kernels this time */
    DLT_PLAN_FINISHED = 2    /* *finished holds the done job, off the queue: install it */
};

/* Decides, for the job that builds `key`, whether this call waits for cuDNN. allowed = 0
 * where switching implementation part-way would be wrong (the caller says when): a queued
 * job that has not started is dropped, and a running one is waited for. With allowed = 1
 * and no such job, make(ctx, user) creates one (NULL: none) and the pool starts with
 * nthreads workers (1..DLT_PLAN_POOL_MAX_THREADS) if it has not yet. */
int dlt__plan_pool_gate(dlt_ctx *ctx, const dlt_cudnn_key *key, int allowed, int nthreads,
                        dlt_plan_job *(*make)(dlt_ctx *ctx, void *user), void *user,
                        dlt_plan_job **finished);

/* Blocks until no job of the context's pool is queued (with a worker alive) or building:
 * the backend's wait_plans entry. */
void dlt__cuda_plans_wait(dlt_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
