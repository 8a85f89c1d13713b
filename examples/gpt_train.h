/*
 * gpt_train.h - what examples/gpt_train.c (the options and the loop) shares with
 * gpt_train_out.c (checkpoints, the closing table, the run record, sampling).
 */
#ifndef DLT_EXAMPLES_GPT_TRAIN_H
#define DLT_EXAMPLES_GPT_TRAIN_H

#include <stdint.h>

#include <dltrain.h>

#include "gpt_step.h"
#include "report.h"

#define PROG "gpt_train"

typedef struct options {
    int32_t device; /* -1: cuda when present */
    const char *preset;
    int64_t n_layer, n_head, n_embd; /* -1: the preset's */
    double dropout;                  /* -1: the preset's */
    int32_t bias;                    /* -1: the preset's */
    const char *text, *tokens;
    int32_t format;
    int64_t vocab, pad_vocab, synthetic_tokens; /* -1: the preset's vocabulary; -1: auto */
    int64_t batch, context, iters, accum;       /* context -1: the preset's block size */
    double lr, min_lr, beta1, beta2, weight_decay, grad_clip; /* min_lr -1: lr / 10 */
    int64_t warmup_iters, lr_decay_iters;                     /* -1: --iters */
    int32_t amp;
    int64_t eval_interval, eval_iters, log_interval;
    const char *out;
    int64_t save_every;
    int resume, eager, deterministic;
    int eager_eval; /* --eager-eval: evaluation by plain calls (default on CUDA: a captured graph per split) */
    int32_t sdp;       /* --sdp cudnn|flash|math (GPT_SDP_*, gpt_step.h) */
    int64_t sample, top_k, seed;
    double temperature, peak_tflops;
    const char *prompt, *json;
    int recipe;
    int64_t gpus; /* data-parallel processes (dist) */
} options;

typedef struct chunk { /* one pass over the training tokens, as far as this run went */
    int64_t epoch, steps, tokens;
    double seconds, t_start, t_end, steady_seconds;
    int64_t steady_steps;
    uint64_t peak;
} chunk;

/* One split's evaluation batch as a step for dlt_graph_create: draw, forward, add the loss
 * into the run's eval_sum (gpt_train.c). */
typedef struct eval_pass {
    struct run *r;
    dlt_token_loader *ld;
    dlt_graph *graph;
} eval_pass;

typedef struct run {
    options o;
    dlt_ctx *ctx;
    dlt_char_tokenizer *tok;
    dlt_token_dataset *train, *val;
    dlt_token_loader *eval_train, *eval_val;
    dlt_tensor *eval_losses;
    /* on CUDA without --eager or --eager-eval: each split's evaluation batch is a captured
     * graph (eval_pass[0] train, [1] val) replayed eval_iters times, adding the losses into
     * eval_sum (f32 [1]) */
    int eval_graphs;
    eval_pass evp[2];
    dlt_tensor *eval_sum;
    gpt_step s;
    dlt_graph *graph;
    char devname[256], model_name[64];
    int64_t tokens_per_iter, steps_per_epoch, start, done;
    float best_val;
    int64_t best_iter, saved_iter; /* saved_iter: the iteration of the last save (-1: none) */
    double flops_per_iter;
    /* timing: training only (evaluation and checkpoints excluded) */
    double t_mark, train_s, steady_s, first_step_s, log_s;
    int64_t seg_first, steady_from, steady_iters, log_iters;
    chunk *chunks;
    int n_chunks, cap_chunks;
    report_run rep;
    /* data parallel (dist): this process's rank of world; rank 0 evaluates, saves, prints */
    int32_t rank, world;
    dlt_comm *comm;
    dlt_ddp *ddp;
} run;

/* DIR/ckpt.safetensors after iters_done iterations (the library's training checkpoint plus
 * the loop's own train.* entries), and the resume from it (*start: the iteration). */
dlt_status gpt_save_checkpoint(run *r, int64_t iters_done);
dlt_status gpt_load_checkpoint(run *r, int64_t *start);
/* The steady iteration time in seconds (training only, without the first step and capture). */
double gpt_steady_iter_s(const run *r);
/* The seed's table row and the lines under it. */
void gpt_print_table(run *r, int on_gpu);
/* --json: the run record (0, or -1 with a message). */
int gpt_write_record(run *r, const dlt_gpt_config *cfg, const char *mode);
/* --sample: generate and print (0, or 1 with a message). */
int gpt_sample(run *r);

#endif
