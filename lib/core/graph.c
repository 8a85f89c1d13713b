/*
 * graph.c - whole-step graphs: warm up a user's step eagerly, capture one call into a CUDA
 * graph, replay it. Falls back to calling the step eagerly (with a logged reason) when the
 * backend cannot capture (CPU) or capture fails (an op that synchronises, an allocation that
 * must grow during capture, a library call that cannot be captured).
 *
 * Random numbers follow PyTorch's CUDA-graph generator: one counter (ctx->rng_offset) for
 * eager calls and replays in call order. A replay at counter C draws exactly what the step
 * run eagerly at C would, then moves C past it; the capture itself draws nothing. The
 * captured kernels add the device word rng_base to the capture's offsets, so each replay
 * needs the word at C - rng0: the graph's last node adds rng_delta, which is that value
 * for back-to-back replays, and dlt_graph_run enqueues a correction only when eager random
 * calls (or another graph, or dlt_ctx_set_rng_state) moved the counter in between.
 *
 * Autocast's parameter copies: a capture that finds a parameter's low-precision copy current
 * reads it without recording the cast (lib/ops/autocast.c); the optimizers keep it current
 * on replay, and dlt_graph_run converts it again first where something else wrote the
 * parameter since (lp_refresh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct dlt_graph {
    dlt_ctx *ctx;
    dlt_step_fn step;
    void *user;
    void *exec; /* backend executable graph, NULL in eager fallback */
    int64_t stats[DLT_GRAPH_STAT_COUNT];
    /* the generator counters the capture reserved: [rng0, rng0 + rng_delta) */
    uint64_t rng0, rng_delta;
    /* autocast copies the capture read without casting: refreshed before a replay that
     * would find one stale (lp_refresh) */
    dlt__lp_use *lp;
    int32_t n_lp;
};

static void lp_release(dlt__lp_use *u, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        dlt_tensor_release(u[i].param);
        dlt_tensor_release(u[i].copy);
    }
    free(u);
}

dlt_status dlt__capture_note_lp(dlt_ctx *ctx, dlt_tensor *param, dlt_tensor *copy, int32_t k, const char *func) {
    for (int32_t i = 0; i < ctx->n_capture_lp; i++)
        if (ctx->capture_lp[i].param == param && ctx->capture_lp[i].copy == copy) return DLT_OK;
    if (ctx->n_capture_lp == ctx->cap_capture_lp) {
        const int32_t cap = ctx->cap_capture_lp ? 2 * ctx->cap_capture_lp : 64;
        dlt__lp_use *u = realloc(ctx->capture_lp, (size_t)cap * sizeof *u);
        if (!u) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot note the capture's autocast copies");
        ctx->capture_lp = u;
        ctx->cap_capture_lp = cap;
    }
    ctx->capture_lp[ctx->n_capture_lp++] = (dlt__lp_use){dlt_tensor_retain(param), dlt_tensor_retain(copy), k};
    return DLT_OK;
}

/* The capture's noted copies, handed to g (or dropped when g is NULL). */
static void lp_take(dlt_ctx *ctx, dlt_graph *g) {
    if (g) {
        g->lp = ctx->capture_lp;
        g->n_lp = ctx->n_capture_lp;
    } else {
        lp_release(ctx->capture_lp, ctx->n_capture_lp);
    }
    ctx->capture_lp = NULL;
    ctx->n_capture_lp = ctx->cap_capture_lp = 0;
}

/* Before a replay: every noted copy must hold its parameter's values. It does unless the
 * parameter was written since without the copy (a load, a copy, a collective: the version
 * moved), the copy was replaced (autocast made a new one for a new format), or some graph
 * writes the parameter on replay (graph_written). Then the copy the graph reads is
 * converted again, on the stream, before the graph's launch. */
static dlt_status lp_refresh(dlt_graph *g, const char *func) {
    dlt_ctx *ctx = g->ctx;
    for (int32_t i = 0; i < g->n_lp; i++) {
        const dlt__lp_use *u = &g->lp[i];
        dlt_tensor *p = u->param;
        const int cached = p->lp_copy[u->k] == u->copy;
        if (cached && p->lp_version[u->k] == p->version && !p->graph_written) continue;
        if (u->copy->format != p->format || !dlt__same_shape(u->copy, p))
            return dlt__err(DLT_ERR_INVALID_STATE, func,
                            "a parameter this graph reads under autocast changed its layout after the capture: "
                            "capture the step again");
        dlt_status st = p->numel ? ctx->be->convert(ctx, u->copy, p) : DLT_OK;
        if (st != DLT_OK) return dlt__err_wrap(st, func);
        if (cached && !p->graph_written) p->lp_version[u->k] = p->version;
    }
    return DLT_OK;
}

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
    lp_take(ctx, NULL); /* nothing noted outside a capture, but start clean */
    ctx->capturing = 1;
    const uint64_t rng0 = ctx->rng_offset;
    dlt_status step_st = step(user);
    const uint64_t rng_delta = ctx->rng_offset - rng0;
    if (step_st == DLT_OK && rng_delta && ctx->rng_base) {
        if (!ctx->be->rng_advance) {
            step_st = dlt__be_missing(ctx, F, "rng_advance");
        } else {
            step_st = ctx->be->rng_advance(ctx, rng_delta);
        }
    }
    ctx->capturing = 0;
    ctx->rng_offset = rng0; /* the captured call ran nothing: nothing drawn */
    g->rng0 = rng0;
    g->rng_delta = ctx->rng_base ? rng_delta : 0;
    char reason[512];
    snprintf(reason, sizeof reason, "%s", step_st == DLT_OK ? "" : dlt_last_error());
    st = ctx->be->capture_end(ctx, step_st == DLT_OK, &g->exec, g->stats);
    if (step_st == DLT_OK && st == DLT_OK) {
        lp_take(ctx, g);
        ctx->live_graphs++;
        *out = g;
        return DLT_OK;
    }
    lp_take(ctx, NULL); /* eager replays cast for themselves */
    /* The captured call did not run: the step's work for that call is lost, which is the
     * same as not having called it. Fall back to eager replays. */
    g->exec = NULL;
    memset(g->stats, 0, sizeof g->stats);
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
    dlt_ctx *ctx = g->ctx;
    DLT_CHECK(lp_refresh(g, F));
    if (g->rng_delta) {
        const uint64_t want = ctx->rng_offset - g->rng0; /* the word this replay needs */
        if (ctx->rng_base_value != want) {
            dlt_status st = ctx->be->rng_advance(ctx, want - ctx->rng_base_value);
            if (st != DLT_OK) return dlt__err_wrap(st, F);
            ctx->rng_base_value = want;
        }
    }
    dlt_status st = ctx->be->graph_launch(ctx, g->exec);
    if (st != DLT_OK) return st;
    if (g->rng_delta) {
        ctx->rng_base_value += g->rng_delta; /* the graph's last node */
        ctx->rng_offset += g->rng_delta;
    }
    return DLT_OK;
}

int32_t dlt_graph_is_captured(const dlt_graph *g) { return g && g->exec ? 1 : 0; }
int64_t dlt_graph_num_nodes(const dlt_graph *g) { return g && g->exec ? g->stats[DLT_GRAPH_STAT_NODES] : 0; }

int64_t dlt_graph_stat(const dlt_graph *g, int32_t kind) {
    if (kind < 0 || kind >= DLT_GRAPH_STAT_COUNT) return -1;
    return g && g->exec ? g->stats[kind] : 0;
}

void dlt_graph_destroy(dlt_graph *g) {
    if (!g) return;
    if (g->exec) {
        g->ctx->be->graph_free(g->ctx, g->exec);
        g->ctx->live_graphs--;
    }
    lp_release(g->lp, g->n_lp);
    free(g);
}
