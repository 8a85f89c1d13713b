/*
 * graph.c - whole-step graphs: warm up a user's step eagerly, capture one call into a CUDA
 * graph, replay it. Falls back to calling the step eagerly (with a logged reason) when the
 * backend cannot capture (CPU) or capture fails (an op that synchronises, an allocation that
 * must grow during capture, a library call that cannot be captured).
 */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

struct dlt_graph {
    dlt_ctx *ctx;
    dlt_step_fn step;
    void *user;
    void *exec; /* backend executable graph, NULL in eager fallback */
    int64_t n_nodes;
};

dlt_status dlt_graph_create(dlt_ctx *ctx, dlt_step_fn step, void *user, int32_t warmup, dlt_graph **out) {
    static const char *F = "dlt_graph_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(step, F);
    DLT_NULL_CHECK(out, F);
    if (warmup < 0 || warmup > 1000)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "warmup %d must be in 0..1000", warmup);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing) return dlt__err(DLT_ERR_INVALID_STATE, F, "graphs cannot be captured inside a capture");
    dlt_graph *g = dlt__host_calloc(ctx, 1, sizeof *g);
    if (!g) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the graph object");
    g->ctx = ctx;
    g->step = step;
    g->user = user;
    /* warm-up builds every plan the step needs now, in the thread (no background builds:
     * the capture must find cuDNN's plans and the workspace sized for them) */
    ctx->graph_warmup = 1;
    for (int32_t i = 0; i < warmup; i++) {
        const int trace = i == warmup - 1 && ctx->be->capture_trace;
        if (trace) ctx->be->capture_trace(ctx, 1);
        dlt_status st = step(user);
        if (trace) ctx->be->capture_trace(ctx, 0);
        if (st != DLT_OK) {
            ctx->graph_warmup = 0;
            free(g);
            return dlt__err_wrap(st, F);
        }
    }
    ctx->graph_warmup = 0;
    if (!ctx->be->capture_begin) {
        dlt__log(DLT_LOG_WARNING, "%s: the %s backend has no graphs; the step runs eagerly", F, ctx->be->name);
        *out = g;
        return DLT_OK;
    }
    /* Nothing enqueued before the capture may still be running into it: finish warm-up. */
    dlt_status st = ctx->be->synchronize(ctx);
    if (st != DLT_OK) {
        free(g);
        return dlt__err_wrap(st, F);
    }
    st = ctx->be->capture_begin(ctx);
    if (st != DLT_OK) {
        dlt__log(DLT_LOG_WARNING, "%s: capture could not start (%s); the step runs eagerly", F, dlt_last_error());
        *out = g;
        return DLT_OK;
    }
    ctx->capturing = 1;
    const uint64_t rng0 = ctx->rng_offset;
    dlt_status step_st = step(user);
    /* Random ops read their generator offsets relative to the device word rng_base: the
     * graph's last node moves it past what the capture reserved, so every replay draws
     * fresh numbers. Eager random calls between replays add the same word to the host's
     * counter, which stays past the capture's range while the word grows with each replay,
     * so a later replay can draw an eager call's numbers again (docs/ops.md, dlt_dropout). */
    if (step_st == DLT_OK && ctx->rng_offset != rng0 && ctx->rng_base) {
        if (!ctx->be->rng_advance) {
            step_st = dlt__be_missing(ctx, F, "rng_advance");
        } else {
            step_st = ctx->be->rng_advance(ctx, ctx->rng_offset - rng0);
        }
    }
    ctx->capturing = 0;
    char reason[512];
    snprintf(reason, sizeof reason, "%s", step_st == DLT_OK ? "" : dlt_last_error());
    st = ctx->be->capture_end(ctx, step_st == DLT_OK, &g->exec, &g->n_nodes);
    if (step_st == DLT_OK && st == DLT_OK) {
        *out = g;
        return DLT_OK;
    }
    /* The captured call did not run: the step's work for that call is lost, which is the
     * same as not having called it. Fall back to eager replays. */
    g->exec = NULL;
    g->n_nodes = 0;
    dlt__log(DLT_LOG_WARNING, "%s: capture failed (%s); the step runs eagerly", F,
             step_st != DLT_OK ? reason : dlt_last_error());
    if (ctx->poisoned != DLT_OK) {
        free(g);
        return dlt__ctx_ok(ctx, F);
    }
    *out = g;
    return DLT_OK;
}

dlt_status dlt_graph_run(dlt_graph *g) {
    static const char *F = "dlt_graph_run";
    DLT_NULL_CHECK(g, F);
    DLT_CHECK(dlt__ctx_ok(g->ctx, F));
    if (!g->exec) {
        dlt_status st = g->step(g->user);
        return st == DLT_OK ? st : dlt__err_wrap(st, F);
    }
    return g->ctx->be->graph_launch(g->ctx, g->exec);
}

int32_t dlt_graph_is_captured(const dlt_graph *g) { return g && g->exec ? 1 : 0; }
int64_t dlt_graph_num_nodes(const dlt_graph *g) { return g ? g->n_nodes : 0; }

void dlt_graph_destroy(dlt_graph *g) {
    if (!g) return;
    if (g->exec) g->ctx->be->graph_free(g->ctx, g->exec);
    free(g);
}
