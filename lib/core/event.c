/*
 * event.c - timing events. The backend makes the event (a CUDA event recorded on the
 * context's stream; on the CPU, whose work is synchronous, the host monotonic clock).
 */
#include <stdlib.h>
#include <time.h>

#include "internal.h"

struct dlt_event {
    dlt_ctx *ctx;
    void *handle;
    int recorded;
};

dlt_status dlt_event_create(dlt_ctx *ctx, dlt_event **out) {
    static const char *F = "dlt_event_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    dlt_event *ev = dlt__host_calloc(ctx, 1, sizeof *ev);
    if (!ev) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate an event");
    ev->ctx = ctx;
    dlt_status st = ctx->be->event_create(ctx, &ev->handle);
    if (st != DLT_OK) {
        free(ev);
        return dlt__err_wrap(st, F);
    }
    *out = ev;
    return DLT_OK;
}

void dlt_event_destroy(dlt_event *ev) {
    if (!ev) return;
    ev->ctx->be->event_destroy(ev->ctx, ev->handle);
    free(ev);
}

dlt_status dlt_event_record(dlt_event *ev) {
    static const char *F = "dlt_event_record";
    DLT_NULL_CHECK(ev, F);
    DLT_CHECK(dlt__ctx_ok(ev->ctx, F));
    if (ev->ctx->capturing) return dlt__err(DLT_ERR_INVALID_STATE, F, "events cannot be recorded during capture");
    dlt_status st = ev->ctx->be->event_record(ev->ctx, ev->handle);
    if (st == DLT_OK) ev->recorded = 1;
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

dlt_status dlt_event_elapsed_ms(dlt_event *start, dlt_event *end, double *ms) {
    static const char *F = "dlt_event_elapsed_ms";
    DLT_NULL_CHECK(start, F);
    DLT_NULL_CHECK(end, F);
    DLT_NULL_CHECK(ms, F);
    if (start->ctx != end->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F, "the events belong to different contexts");
    if (!start->recorded || !end->recorded)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "both events must be recorded first");
    dlt_status st = start->ctx->be->event_elapsed(start->ctx, start->handle, end->handle, ms);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

/* ---- CPU implementation: the host clock ---- */

dlt_status dlt__cpu_event_create(dlt_ctx *ctx, void **ev) {
    (void)ctx;
    *ev = calloc(1, sizeof(double));
    return *ev ? DLT_OK : dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_event_create", "cannot allocate an event");
}

dlt_status dlt__cpu_event_record(dlt_ctx *ctx, void *ev) {
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(double *)ev = (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    return DLT_OK;
}

dlt_status dlt__cpu_event_elapsed(dlt_ctx *ctx, void *start, void *end, double *ms) {
    (void)ctx;
    *ms = *(double *)end - *(double *)start;
    return DLT_OK;
}

void dlt__cpu_event_destroy(dlt_ctx *ctx, void *ev) {
    (void)ctx;
    free(ev);
}

dlt_status dlt_range_push(dlt_ctx *ctx, const char *name) {
    DLT_NULL_CHECK(ctx, "dlt_range_push");
    DLT_NULL_CHECK(name, "dlt_range_push");
    dlt__range_push(ctx, name);
    return DLT_OK;
}

dlt_status dlt_range_pop(dlt_ctx *ctx) {
    DLT_NULL_CHECK(ctx, "dlt_range_pop");
    dlt__range_pop(ctx);
    return DLT_OK;
}
