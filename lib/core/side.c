/*
 * side.c - the backward's second stream. At 32x32 inputs ResNet50's later layers run on
 * 2x2 and 1x1 maps and each convolution kernel fills a fraction of the GPU, so a layer's
 * weight gradient runs beside its data gradient (and the BatchNorm backward after it) on
 * a side stream; in a captured step those become parallel branches of the graph.
 *
 * The backend forks (the side stream waits for what the main stream has so far) and joins
 * (the main stream waits for the side's work). Between the two the side's inputs must stay
 * alive and unchanged, and its outputs unread: the tensors are held here, and released
 * after the join, so the memory pool (and a captured step's arena) cannot hand their blocks
 * to later main-stream work; the gradient buffers it writes are listed too. The tape joins
 * before the main stream touches any of them: before a node writes a leaf gradient the side
 * wrote or reads a held tensor as its output's gradient (an autocast cast node only passes
 * it on), before an accumulation kernel takes one, before the queued fp32 accumulations run
 * on the main stream (they run on the side stream when they can, after its weight
 * gradients: no join), before a hook (DDP) hears that a gradient the side wrote is ready
 * and before DDP reduces one, and when backward ends. Several side works may be
 * outstanding: the side stream runs them in order and one join covers them all; a fork
 * joins first when the held tensors pass 4x DLT_GRAD_QUEUE_MAX bytes (16 MiB by default).
 * Backends without the entries (CPU) run everything in line; DLT_SIDE_STREAM=0 does the
 * same on CUDA.
 */
#include "internal.h"

static void side_release(dlt_side *sd) {
    for (int32_t i = 0; i < sd->n_held; i++) dlt_tensor_release(sd->held[i]);
    sd->n_held = sd->n_written = 0;
    sd->held_bytes = 0;
    sd->outstanding = 0;
}

/* Held memory beyond which a new fork joins the earlier work first: the side's inputs and
 * the queued gradients its flushes read would otherwise live until the end of backward */
static uint64_t held_cap(const dlt_ctx *ctx) {
    const int64_t q = ctx->env.v[DLT__ENV_GRAD_QUEUE_MAX];
    return 4 * (uint64_t)(q > 0 ? q : 1);
}

dlt_status dlt__side_begin(dlt_ctx *ctx, int32_t n_hold, int32_t n_written, int32_t *on) {
    dlt_side *sd = &ctx->tape.side;
    *on = 0;
    if (!ctx->be->side_fork || !ctx->tape.in_backward || !ctx->env.v[DLT__ENV_SIDE_STREAM] ||
        n_hold > DLT_SIDE_MAX || n_written > DLT_SIDE_MAX)
        return DLT_OK;
    if (sd->n_held + n_hold > DLT_SIDE_MAX || sd->n_written + n_written > DLT_SIDE_MAX ||
        sd->held_bytes > held_cap(ctx))
        DLT_CHECK(dlt__side_join(ctx));
    DLT_CHECK(ctx->be->side_fork(ctx, on));
    sd->forks += *on;
    return DLT_OK;
}

dlt_status dlt__side_end(dlt_ctx *ctx, dlt_tensor *const *hold, int32_t n_hold, dlt_tensor *const *written,
                         int32_t n_written) {
    dlt_side *sd = &ctx->tape.side;
    const dlt_status st = ctx->be->side_unfork(ctx);
    for (int32_t i = 0; i < n_hold; i++) /* dlt__side_begin made the room */
        if (hold[i]) {
            sd->held[sd->n_held++] = dlt_tensor_retain(hold[i]);
            sd->held_bytes += dlt_tensor_nbytes(hold[i]);
        }
    for (int32_t i = 0; i < n_written; i++)
        if (written[i]) sd->written[sd->n_written++] = written[i];
    sd->outstanding = 1;
    if (st != DLT_OK) { /* the side work may not have been ordered: wait for it now */
        (void)dlt__side_join(ctx);
        return st;
    }
    return DLT_OK;
}

dlt_status dlt__side_join(dlt_ctx *ctx) {
    dlt_side *sd = &ctx->tape.side;
    if (!sd->outstanding) return DLT_OK;
    const dlt_status st = ctx->be->side_join(ctx);
    sd->joins += st == DLT_OK;
    /* released either way: a backend whose join fails poisons the context (cuda/side.c),
     * so no later work can take these blocks while the side may still use them */
    side_release(sd);
    return st;
}

int dlt__side_holds(const dlt_ctx *ctx, const dlt_tensor *t) {
    const dlt_side *sd = &ctx->tape.side;
    for (int32_t i = 0; t && i < sd->n_held; i++)
        if (sd->held[i]->storage == t->storage) return 1;
    return 0;
}

int dlt__side_wrote(const dlt_ctx *ctx, const dlt_tensor *buf) {
    const dlt_side *sd = &ctx->tape.side;
    for (int32_t i = 0; i < sd->n_written; i++)
        if (sd->written[i] == buf) return 1;
    return 0;
}
