/*
 * train_step.h - the seed's training step (examples/train.c), one micro-batch and one whole
 * optimizer step, written so the whole step can be captured as one CUDA graph (graph.h):
 * the loader's position moves on the device (a replay takes the next batch), the loss is
 * copied into a tensor that lives across replays, and the step reads nothing back.
 */
#ifndef DLT_EXAMPLES_TRAIN_STEP_H
#define DLT_EXAMPLES_TRAIN_STEP_H

#include <dltrain.h>

typedef struct train_step {
    dlt_ctx *ctx;
    dlt_loader *loader;
    dlt_module *model;
    dlt_ddp *ddp; /* data parallel (NULL: one process) */
    dlt_optimizer *opt;
    dlt_grad_scaler *scaler;
    int32_t amp;          /* DLT_F16, DLT_BF16, or -1: no autocast */
    int64_t accum;        /* micro-batches per optimizer step */
    dlt_tensor *loss_out; /* f32 []: the whole step's last micro-batch loss (/ accum) */
} train_step;

/* One micro-batch: the next batch, forward under autocast, cross-entropy (divided by accum
 * when accumulating), scaled backward; no_sync: DDP skips the gradient all-reduce. *loss is
 * the (divided) loss, the caller's to release; *has_batch = 0 (nothing done) at the end of
 * the epoch; *rows the batch's rows. */
dlt_status train_micro_batch(train_step *s, int no_sync, int32_t *has_batch, int64_t *rows, dlt_tensor **loss);

/* One optimizer step (a dlt_step_fn): zero_grad first when accum is 1, accum micro-batches,
 * the scaler's step and update, zero_grad after them when accumulating (the seed's
 * accumulation script also empties the cache there: not inside a captured step). The caller
 * makes sure the epoch has accum full batches left. */
dlt_status train_step_run(void *train_step_ptr);

#endif
