/*
 * plan_pool.c - the background plan builders (plan_pool.h): a queue of jobs under one mutex,
 * worker threads that take the oldest queued job, and the gate through which an op's call
 * queues, waits for or collects a job. Only the calling thread unlinks jobs from the queue.
 */
#include <pthread.h>
#include <stdlib.h>

#include "plan_pool.h"

typedef struct dlt_plan_pool {
    dlt_ctx *ctx;
    int device;
    cudaStream_t stream;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    dlt_plan_job *jobs; /* not yet installed, in queue order */
    int stop, nthreads, alive;
    pthread_t threads[DLT_PLAN_POOL_MAX_THREADS];
} dlt_plan_pool;

static void *worker(void *arg) {
    dlt_plan_pool *a = (dlt_plan_pool *)arg;
    cudnnHandle_t h = NULL;
    int ok = cudaSetDevice(a->device) == cudaSuccess && cudnnCreate(&h) == CUDNN_STATUS_SUCCESS;
    /* the context's stream: if cuDNN ran anything while building, or executed on the stream
     * of the handle a plan was built with, it would still be ordered with the step */
    if (ok && cudnnSetStream(h, a->stream) != CUDNN_STATUS_SUCCESS) ok = 0;
    (void)cudaGetLastError();
    pthread_mutex_lock(&a->mu);
    if (!ok) {
        a->alive--;
        pthread_cond_broadcast(&a->done_cv);
        pthread_mutex_unlock(&a->mu);
        if (h) cudnnDestroy(h);
        return NULL;
    }
    dlt__cudnn_set_thread_handle(h);
    for (;;) {
        dlt_plan_job *j = NULL;
        while (!a->stop) {
            for (j = a->jobs; j && j->state != 0; j = j->next) {}
            if (j) break;
            pthread_cond_wait(&a->work_cv, &a->mu);
        }
        if (a->stop) break;
        j->state = 1;
        pthread_mutex_unlock(&a->mu);
        const double t0 = dlt__cudnn_now_s();
        j->build(a->ctx, j);
        (void)cudaGetLastError();
        j->seconds = dlt__cudnn_now_s() - t0;
        pthread_mutex_lock(&a->mu);
        j->state = 2;
        pthread_cond_broadcast(&a->done_cv);
    }
    a->alive--;
    pthread_mutex_unlock(&a->mu);
    dlt__cudnn_set_thread_handle(NULL);
    cudnnDestroy(h);
    return NULL;
}

static void pool_free(void *p) {
    dlt_plan_pool *a = (dlt_plan_pool *)p;
    /* nothing of ours may still run on the stream once the workers' handles are gone */
    (void)cudaStreamSynchronize(a->stream);
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->work_cv);
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < a->nthreads; i++) pthread_join(a->threads[i], NULL);
    while (a->jobs) {
        dlt_plan_job *j = a->jobs;
        a->jobs = j->next;
        j->release(j);
    }
    pthread_cond_destroy(&a->work_cv);
    pthread_cond_destroy(&a->done_cv);
    pthread_mutex_destroy(&a->mu);
    (void)cudaGetLastError();
    free(a);
}

/* Starts the workers (NULL when none could start: builds stay synchronous). */
static dlt_plan_pool *pool_start(dlt_ctx *ctx, int nthreads) {
    dlt_cuda_state *cs = dlt__cu(ctx);
    if (cs->plan_pool) return (dlt_plan_pool *)cs->plan_pool;
    dlt_plan_pool *a = (dlt_plan_pool *)calloc(1, sizeof *a);
    if (!a) return NULL;
    a->ctx = ctx;
    a->device = cs->device;
    a->stream = cs->stream;
    if (pthread_mutex_init(&a->mu, NULL) != 0) {
        free(a);
        return NULL;
    }
    pthread_cond_init(&a->work_cv, NULL);
    pthread_cond_init(&a->done_cv, NULL);
    if (nthreads < 1) nthreads = 1;
    if (nthreads > DLT_PLAN_POOL_MAX_THREADS) nthreads = DLT_PLAN_POOL_MAX_THREADS;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&a->threads[a->nthreads], NULL, worker, a) != 0) break;
        a->nthreads++;
        a->alive++;
    }
    pthread_mutex_unlock(&a->mu);
    cs->plan_pool = a;
    cs->plan_pool_free = pool_free;
    return a;
}

int dlt__plan_pool_gate(dlt_ctx *ctx, const dlt_cudnn_key *key, int allowed, int nthreads,
                        dlt_plan_job *(*make)(dlt_ctx *ctx, void *user), void *user,
                        dlt_plan_job **finished) {
    *finished = NULL;
    dlt_plan_pool *a = (dlt_plan_pool *)dlt__cu(ctx)->plan_pool;
    if (!a && allowed) a = pool_start(ctx, nthreads);
    if (!a) return DLT_PLAN_BUILD_HERE;
    pthread_mutex_lock(&a->mu);
    dlt_plan_job **pp = &a->jobs;
    while (*pp && !dlt__cudnn_key_equal(&(*pp)->key, key)) pp = &(*pp)->next;
    dlt_plan_job *j = *pp;
    if (!j) {
        dlt_plan_job *nj = (allowed && a->alive > 0) ? make(ctx, user) : NULL;
        if (nj) {
            nj->state = 0;
            nj->next = NULL;
            *pp = nj; /* at the end of the list: builds start in request order */
            pthread_cond_signal(&a->work_cv);
        }
        pthread_mutex_unlock(&a->mu);
        return nj ? DLT_PLAN_PENDING : DLT_PLAN_BUILD_HERE;
    }
    if (j->state == 0 && (!allowed || a->alive == 0)) {
        *pp = j->next; /* not started: the caller builds it instead */
        pthread_mutex_unlock(&a->mu);
        j->release(j);
        return DLT_PLAN_BUILD_HERE;
    }
    if (j->state != 2 && allowed) {
        pthread_mutex_unlock(&a->mu);
        return DLT_PLAN_PENDING;
    }
    while (j->state != 2) pthread_cond_wait(&a->done_cv, &a->mu);
    *pp = j->next; /* only this thread unlinks jobs, so pp is still the link to j */
    pthread_mutex_unlock(&a->mu);
    *finished = j;
    return DLT_PLAN_FINISHED;
}

void dlt__cuda_plans_wait(dlt_ctx *ctx) {
    dlt_plan_pool *a = (dlt_plan_pool *)dlt__cu(ctx)->plan_pool;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        int busy = 0;
        for (dlt_plan_job *j = a->jobs; j && !busy; j = j->next)
            busy = j->state == 1 || (j->state == 0 && a->alive > 0);
        if (!busy) break;
        pthread_cond_wait(&a->done_cv, &a->mu);
    }
    pthread_mutex_unlock(&a->mu);
}
