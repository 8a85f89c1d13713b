/*
 * gpt_train.c - nanoGPT's train.py as a C program on libdltrain (issue 17; docs/gpt.md).
 *
 *   gpt_train --text ../shared/data/tinyshakespeare/input.txt --recipe shakespeare-char
 *   gpt_train --preset gpt2 --tokens train.bin,val.bin --format raw --vocab 50257 --batch 16
 *   gpt_train --preset tiny --device cpu --iters 50          (synthetic tokens)
 *
 * The loop is nanoGPT's: evaluation every --eval-interval iterations (eval mode, no grad,
 * the mean loss of --eval-iters batches of each split), a checkpoint when the validation
 * loss improves (always_save_checkpoint=False) and every --save-every iterations, the lr from
 * the warm-up + cosine schedule, gradient accumulation with the loss divided by --accum,
 * clipping after unscaling, fp16 with the GradScaler. The iteration itself is gpt_step.c; on
 * CUDA it runs as one captured graph (--eager: plain calls), evaluation eagerly between
 * replays. nanoGPT's loop trains one more step after its last evaluation (iteration
 * max_iters), which no evaluation or checkpoint ever sees; this loop stops at that
 * evaluation, so --iters N trains N iterations.
 *
 * A checkpoint (--out DIR: DIR/ckpt.safetensors) holds the model, the AdamW state, the
 * scaler, and the program's own entries (train.iter, the token loader's draw position, the
 * best validation loss, the generator's state): --resume continues exactly as the
 * uninterrupted run would have (tests/scripts/gpt_examples.sh compares the two bitwise).
 * Exit status: 0, 1 (a runtime failure: the library's message), 2 (usage).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <dltrain.h>

#include "cli.h"
#include "gpt_step.h"
#include "report.h"
#include "run_record.h"

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
    int64_t sample, top_k, seed;
    double temperature, peak_tflops;
    const char *prompt, *json;
    int recipe;
} options;

static void defaults(options *o) {
    memset(o, 0, sizeof *o);
    o->device = -1;
    o->preset = "gpt2";
    o->n_layer = o->n_head = o->n_embd = -1;
    o->dropout = -1;
    o->bias = -1;
    o->format = DLT_TOKENS_LLMC;
    o->vocab = o->pad_vocab = -1;
    o->synthetic_tokens = 1000000;
    o->batch = 12;
    o->context = -1;
    o->iters = 5000;
    o->accum = 1;
    o->lr = 6e-4;
    o->min_lr = -1;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->weight_decay = 0.1;
    o->grad_clip = 1.0;
    o->warmup_iters = -1;
    o->lr_decay_iters = -1;
    o->amp = DLT_BF16;
    o->eval_interval = 250;
    o->eval_iters = 200;
    o->log_interval = 10;
    o->top_k = 200;
    o->seed = 1337;
    o->temperature = 0.8;
    o->peak_tflops = 989;
}

/* nanoGPT's config/train_shakespeare_char.py over train.py's defaults (reference doc §1).
 * Applied where --recipe stands: options after it override it. */
static int parse_recipe(const char *arg, void *dst) {
    options *o = dst;
    if (strcmp(arg, "shakespeare-char") != 0) return -1;
    o->recipe = 1;
    o->preset = "shakespeare-char"; /* n_layer 6, n_head 6, n_embd 384, no bias, dropout 0.2 */
    o->n_layer = 6, o->n_head = 6, o->n_embd = 384, o->dropout = 0.2, o->bias = 0;
    o->out = "out-shakespeare-char";
    o->eval_interval = 250, o->eval_iters = 200, o->log_interval = 10;
    o->accum = 1, o->batch = 64, o->context = 256;
    o->lr = 1e-3, o->iters = 5000, o->lr_decay_iters = 5000, o->min_lr = 1e-4, o->beta2 = 0.99;
    o->warmup_iters = 100;
    o->beta1 = 0.9, o->weight_decay = 0.1, o->grad_clip = 1.0, o->amp = DLT_BF16; /* train.py's */
    return 0;
}

static int parse_preset(const char *arg, void *dst) {
    dlt_gpt_config c;
    if (dlt_gpt_config_preset(arg, &c) != DLT_OK) return -1;
    *(const char **)dst = arg;
    return 0;
}

static const char *const DEVICE_NAMES[] = {"cuda", "cpu", NULL};
static const int32_t DEVICE_VALUES[] = {DLT_DEVICE_CUDA, DLT_DEVICE_CPU};
static const char *const AMP_NAMES[] = {"bf16", "fp16", "fp32", NULL};
static const int32_t AMP_VALUES[] = {DLT_BF16, DLT_F16, DLT_F32};
static const char *const FORMAT_NAMES[] = {"llmc", "raw", NULL};
static const int32_t FORMAT_VALUES[] = {DLT_TOKENS_LLMC, DLT_TOKENS_RAW};
static const char *const BOOL_NAMES[] = {"true", "false", "True", "False", "on", "off", "1", "0", NULL};
static const int32_t BOOL_VALUES[] = {1, 0, 1, 0, 1, 0, 1, 0};

/* 0 to run, 1 after --help, 2 on a usage error (message and usage printed). */
static int parse_args(int argc, char **argv, options *o) {
    defaults(o);
    const cli_option opts[] = {
        {"device", CLI_CHOICE, &o->device, .choices = DEVICE_NAMES, .values = DEVICE_VALUES, .metavar = "DEV",
         .help = "cuda or cpu (cuda when present)"},
        {"preset", CLI_CUSTOM, &o->preset, .parse = parse_preset, .metavar = "NAME",
         .help = "gpt2, gpt2-medium, gpt2-large, gpt2-xl, shakespeare-char or tiny (gpt2)"},
        {"recipe", CLI_CUSTOM, o, .parse = parse_recipe, .metavar = "NAME",
         .help = "shakespeare-char: nanoGPT's config/train_shakespeare_char.py;\noptions after it override it"},
        {"n-layer", CLI_INT, &o->n_layer, .lo = 1, .hi = 4096, .metavar = "N", .help = "layers (the preset's)"},
        {"n-head", CLI_INT, &o->n_head, .lo = 1, .hi = 4096, .metavar = "N", .help = "attention heads (the preset's)"},
        {"n-embd", CLI_INT, &o->n_embd, .lo = 1, .hi = 65536, .metavar = "N", .help = "width (the preset's)"},
        {"dropout", CLI_REAL, &o->dropout, .rlo = 0, .rhi = 0.99, .metavar = "P", .help = "dropout (the preset's)"},
        {"bias", CLI_CHOICE, &o->bias, .choices = BOOL_NAMES, .values = BOOL_VALUES, .metavar = "BOOL",
         .help = "biases in Linear and LayerNorm (the preset's)"},
        {"text", CLI_STRING, &o->text, .metavar = "FILE",
         .help = "UTF-8 text, character level (nanoGPT's shakespeare_char: 90/10 split)"},
        {"tokens", CLI_STRING, &o->tokens, .metavar = "TRAIN[,VAL]",
         .help = "uint16 token files (see --format); without --text or --tokens:\nsynthetic tokens"},
        {"format", CLI_CHOICE, &o->format, .choices = FORMAT_NAMES, .values = FORMAT_VALUES, .metavar = "F",
         .help = "llmc (llm.c's header, default) or raw (nanoGPT's train.bin)"},
        {"vocab", CLI_INT, &o->vocab, .lo = 1, .hi = 65536, .metavar = "N",
         .help = "vocabulary of --tokens / synthetic tokens (the preset's);\na token >= N is an error"},
        {"pad-vocab", CLI_INT, &o->pad_vocab, .lo = 1, .hi = 65536, .metavar = "N",
         .help = "round the embedding rows up to a multiple of N\n(128 above 1024 tokens: 50257 -> 50304; else 1)"},
        {"synthetic-tokens", CLI_INT, &o->synthetic_tokens, .lo = 2, .hi = 2147483647, .metavar = "N",
         .help = "training tokens when synthetic (1000000; val: a tenth)"},
        {"batch", CLI_INT, &o->batch, .lo = 1, .hi = 65536, .metavar = "N", .help = "micro-batch size (12)"},
        {"context", CLI_INT, &o->context, .lo = 1, .hi = 1048576, .metavar = "T",
         .help = "block size (the preset's: 1024 for gpt2)"},
        {"iters", CLI_INT, &o->iters, .lo = 0, .hi = 1000000000, .metavar = "N", .help = "iterations (5000)"},
        {"accum", CLI_INT, &o->accum, .lo = 1, .hi = 65536, .metavar = "N",
         .help = "micro-batches per optimizer step (1)"},
        {"lr", CLI_REAL, &o->lr, .rlo = 0, .rhi = 10, .metavar = "X", .help = "peak learning rate (6e-4)"},
        {"min-lr", CLI_REAL, &o->min_lr, .rlo = 0, .rhi = 10, .metavar = "X", .help = "final learning rate (lr / 10)"},
        {"beta1", CLI_REAL, &o->beta1, .rlo = 0, .rhi = 0.999999, .metavar = "X", .help = "AdamW beta1 (0.9)"},
        {"beta2", CLI_REAL, &o->beta2, .rlo = 0, .rhi = 0.999999, .metavar = "X", .help = "AdamW beta2 (0.95)"},
        {"weight-decay", CLI_REAL, &o->weight_decay, .rlo = 0, .rhi = 10, .metavar = "X",
         .help = "AdamW weight decay of the 2-D tensors (0.1)"},
        {"warmup-iters", CLI_INT, &o->warmup_iters, .lo = 0, .hi = 1000000000, .metavar = "N",
         .help = "linear warm-up (100, at most a tenth of --iters)"},
        {"lr-decay-iters", CLI_INT, &o->lr_decay_iters, .lo = 1, .hi = 1000000000, .metavar = "N",
         .help = "end of the cosine decay (--iters)"},
        {"grad-clip", CLI_REAL, &o->grad_clip, .rlo = 0, .rhi = 1e6, .metavar = "X",
         .help = "clip the global gradient norm (1.0; 0: off)"},
        {"amp", CLI_CHOICE, &o->amp, .choices = AMP_NAMES, .values = AMP_VALUES, .metavar = "P",
         .help = "bf16 (default), fp16 (with the GradScaler) or fp32"},
        {"eval-interval", CLI_INT, &o->eval_interval, .lo = 0, .hi = 1000000000, .metavar = "N",
         .help = "evaluate every N iterations (250; 0: never)"},
        {"eval-iters", CLI_INT, &o->eval_iters, .lo = 1, .hi = 1000000, .metavar = "N",
         .help = "batches per split and evaluation (200)"},
        {"log-interval", CLI_INT, &o->log_interval, .lo = 0, .hi = 1000000000, .metavar = "N",
         .help = "a log line every N iterations (10; 0: none)"},
        {"out", CLI_STRING, &o->out, .metavar = "DIR", .help = "checkpoint directory (DIR/ckpt.safetensors)"},
        {"save-every", CLI_INT, &o->save_every, .lo = 0, .hi = 1000000000, .metavar = "N",
         .help = "also save every N iterations and at the end (0: only\nwhen the validation loss improves)"},
        {"resume", CLI_FLAG, &o->resume, .help = "continue from --out's checkpoint"},
        {"eager", CLI_FLAG, &o->eager, .help = "plain calls instead of one captured CUDA graph per step"},
        {"deterministic", CLI_FLAG, &o->deterministic,
         .help = "deterministic kernels only (bitwise-reproducible CUDA runs)"},
        {"sample", CLI_INT, &o->sample, .lo = 0, .hi = 1000000, .metavar = "N",
         .help = "generate N tokens at the end (0)"},
        {"prompt", CLI_STRING, &o->prompt, .metavar = "S",
         .help = "the sample's start: text (--text; default a newline)\nor token ids \"1,2,3\" (default 0)"},
        {"temperature", CLI_REAL, &o->temperature, .rlo = 1e-3, .rhi = 100, .metavar = "X",
         .help = "sampling temperature (0.8)"},
        {"top-k", CLI_INT, &o->top_k, .lo = 0, .hi = 65536, .metavar = "K", .help = "sample from the top K (200; 0: all)"},
        {"seed", CLI_INT, &o->seed, .lo = 0, .hi = INT64_MAX, .metavar = "N",
         .help = "seed of the init, the batches, dropout and sampling (1337)"},
        {"peak-tflops", CLI_REAL, &o->peak_tflops, .rlo = 1e-3, .rhi = 1e6, .metavar = "X",
         .help = "MFU's reference (989: H100/H200 dense bf16)"},
        {"json", CLI_STRING, &o->json, .metavar = "FILE",
         .help = "also write the run record (JSON, docs/run-record.md) to FILE"},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = cli_parse(argc, argv, PROG, opts, n);
    if (rc) return rc;
    const char *why = NULL;
    if (o->text && o->tokens) why = "--text and --tokens exclude each other";
    else if (o->resume && !o->out) why = "--resume needs --out DIR (the checkpoint's directory)";
    else if (o->recipe && !o->text && !o->tokens)
        why = "--recipe shakespeare-char needs the data: --text FILE (tiny Shakespeare)";
    if (o->warmup_iters < 0) o->warmup_iters = o->iters / 10 < 100 ? o->iters / 10 : 100;
    if (!why) {
        int64_t decay = o->lr_decay_iters > 0 ? o->lr_decay_iters : (o->iters > 0 ? o->iters : 1);
        if (decay <= o->warmup_iters) why = "--lr-decay-iters (default --iters) must be above --warmup-iters";
    }
    if (why) {
        fprintf(stderr, "%s: %s\n", PROG, why);
        cli_usage(stderr, PROG, opts, n);
        return 2;
    }
    return 0;
}

/* ---- the run ---------------------------------------------------------------------------- */

typedef struct chunk { /* one pass over the training tokens, as far as this run went */
    int64_t epoch, steps, tokens;
    double seconds, t_start, t_end, steady_seconds;
    int64_t steady_steps;
    uint64_t peak;
} chunk;

typedef struct run {
    options o;
    dlt_ctx *ctx;
    dlt_char_tokenizer *tok;
    dlt_token_dataset *train, *val;
    dlt_token_loader *eval_train, *eval_val;
    dlt_tensor *eval_losses;
    gpt_step s;
    dlt_graph *graph;
    char devname[256], model_name[64];
    int64_t tokens_per_iter, steps_per_epoch, start, done;
    float best_val;
    int64_t best_iter, saved_iter; /* saved_iter: the iteration of the last save (-1: none) */
    double flops_per_iter;
    uint64_t rng_seed, rng_start, rng_per_iter; /* the generator at iteration `start`, and per iteration */
    /* timing: training only (evaluation and checkpoints excluded) */
    double t_mark, train_s, steady_s, first_step_s, log_s;
    int64_t seg_first, steady_from, steady_iters, log_iters;
    chunk *chunks;
    int n_chunks, cap_chunks;
    report_run rep;
} run;

#define TRY(call)                                                                             \
    do {                                                                                      \
        if ((call) != DLT_OK) {                                                               \
            fprintf(stderr, "%s: %s\n", PROG, dlt_last_error());                              \
            goto fail;                                                                        \
        }                                                                                     \
    } while (0)

static double now_s(void) { return run_record_mono_now(); }

static void on_log(int32_t level, const char *msg, void *user) {
    (void)user;
    if (level <= DLT_LOG_WARNING) fprintf(stderr, "%s: %s\n", PROG, msg);
}

/* The chunk (epoch) of iteration it, opened with t_start when it is a new one. */
static chunk *cur_chunk(run *r, int64_t it, double t_start) {
    const int64_t e = it / r->steps_per_epoch;
    if (r->n_chunks > 0 && r->chunks[r->n_chunks - 1].epoch == e) return &r->chunks[r->n_chunks - 1];
    if (r->n_chunks == r->cap_chunks) {
        int cap = r->cap_chunks ? 2 * r->cap_chunks : 16;
        chunk *c = realloc(r->chunks, (size_t)cap * sizeof *c);
        if (!c) return NULL;
        r->chunks = c, r->cap_chunks = cap;
    }
    chunk *c = &r->chunks[r->n_chunks++];
    memset(c, 0, sizeof *c);
    c->epoch = e;
    c->t_start = t_start;
    return c;
}

/* Closes the training segment that ends after iteration `last` (the device is idle): its
 * time goes to the totals, the log window and iteration last's chunk. */
static dlt_status close_segment(run *r, int64_t last) {
    dlt_status st = dlt_ctx_synchronize(r->ctx);
    if (st != DLT_OK) return st;
    const double t = now_s(), seg = t - r->t_mark;
    const int64_t n = last - r->seg_first + 1;
    if (n > 0) {
        r->train_s += seg;
        r->log_s += seg;
        r->log_iters += n;
        chunk *c = cur_chunk(r, last, r->t_mark);
        if (!c) return dlt_set_error(DLT_ERR_OUT_OF_MEMORY, "gpt_train: out of memory");
        c->seconds += seg;
        c->steps += n;
        c->tokens += n * r->tokens_per_iter;
        c->t_end = t;
        if (r->seg_first >= r->steady_from) {
            r->steady_s += seg;
            r->steady_iters += n;
            if (c->epoch == r->start / r->steps_per_epoch) {
                c->steady_seconds += seg;
                c->steady_steps += n;
            }
        }
    }
    r->seg_first = last + 1;
    r->t_mark = now_s();
    return DLT_OK;
}

/* nanoGPT's estimate_loss for one split: evaluation e reads draws e*eval_iters onwards of
 * the split's own loader (so an evaluation never moves the training batches, and a resumed
 * run evaluates on the same batches). Eval mode, no gradients, the training precision. */
static dlt_status estimate_loss(run *r, dlt_token_loader *ld, int64_t e, float *out) {
    const options *o = &r->o;
    dlt_status st = dlt_token_loader_seek(ld, e * o->eval_iters);
    int32_t prev = 1;
    if (st == DLT_OK) st = dlt_grad_set_enabled(r->ctx, 0, &prev);
    if (st != DLT_OK) return st;
    st = dlt_module_set_training(r->s.model, 0);
    for (int64_t k = 0; st == DLT_OK && k < o->eval_iters; k++) {
        dlt_tensor *x = NULL, *y = NULL, *loss = NULL, *l1 = NULL, *slot = NULL;
        const int64_t one = 1;
        st = dlt_token_loader_next(ld, &x, &y);
        if (st == DLT_OK && o->amp != DLT_F32) st = dlt_autocast_begin(r->ctx, o->amp);
        if (st == DLT_OK) {
            st = dlt_gpt_forward(r->s.model, x, y, NULL, &loss);
            dlt_status st2 = o->amp != DLT_F32 ? dlt_autocast_end(r->ctx) : DLT_OK;
            if (st == DLT_OK) st = st2;
        }
        if (st == DLT_OK) st = dlt_reshape(loss, &one, 1, &l1);
        if (st == DLT_OK) st = dlt_narrow(r->eval_losses, 0, k, 1, &slot);
        if (st == DLT_OK) st = dlt_tensor_copy(slot, l1);
        dlt_tensor_release(slot);
        dlt_tensor_release(l1);
        dlt_tensor_release(loss);
    }
    float *v = st == DLT_OK ? malloc((size_t)o->eval_iters * sizeof *v) : NULL;
    if (st == DLT_OK && !v) st = dlt_set_error(DLT_ERR_OUT_OF_MEMORY, "gpt_train: out of memory");
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(r->eval_losses, v, (size_t)o->eval_iters * sizeof *v);
    if (st == DLT_OK) {
        double sum = 0;
        for (int64_t k = 0; k < o->eval_iters; k++) sum += v[k];
        *out = (float)(sum / (double)o->eval_iters); /* nanoGPT: the float32 mean */
    }
    free(v);
    dlt_status st2 = dlt_module_set_training(r->s.model, 1);
    dlt_status st3 = dlt_grad_set_enabled(r->ctx, prev, NULL);
    return st != DLT_OK ? st : st2 != DLT_OK ? st2 : st3;
}

static dlt_status scalar_tensor(dlt_ctx *ctx, int32_t dtype, const void *v, dlt_tensor **out) {
    return dlt_tensor_from_host(ctx, dtype, NULL, 0, 0, v, dlt_dtype_size(dtype), out);
}

static void ckpt_path(const run *r, char *buf, size_t n) { snprintf(buf, n, "%s/ckpt.safetensors", r->o.out); }

/* DIR/ckpt.safetensors after `iters_done` iterations: the library's training checkpoint plus
 * what this loop needs to continue exactly (one file, written atomically). */
static dlt_status save_checkpoint(run *r, int64_t iters_done) {
    char path[4096];
    ckpt_path(r, path, sizeof path);
    int64_t draw = 0;
    dlt_status st = dlt_token_loader_position(r->s.loader, &draw);
    if (st != DLT_OK) return st;
    /* The generator as the uninterrupted run has it at iteration iters_done: the state at
     * this process's first iteration plus what each iteration draws (dropout). Not the
     * context's current state: after graph replays that also counts the capture's own
     * reservation, which never ran. */
    const uint64_t offset = r->rng_start + (uint64_t)(iters_done - r->start) * r->rng_per_iter;
    const int64_t vals[5] = {iters_done, draw, r->best_iter, (int64_t)r->rng_seed, (int64_t)offset};
    const char *names[6] = {"train.iter", "train.loader_draw", "train.best_val_iter", "train.rng_seed",
                            "train.rng_offset", "train.best_val_loss"};
    dlt_tensor *t[6] = {NULL};
    for (int i = 0; i < 5 && st == DLT_OK; i++) st = scalar_tensor(r->ctx, DLT_I64, &vals[i], &t[i]);
    if (st == DLT_OK) st = scalar_tensor(r->ctx, DLT_F32, &r->best_val, &t[5]);
    const int64_t epoch = iters_done / r->steps_per_epoch;
    if (st == DLT_OK)
        st = dlt_checkpoint_save_ex(path, r->s.model, r->s.opt, r->s.scaler, epoch, iters_done, names, t, 6);
    for (int i = 0; i < 6; i++) dlt_tensor_release(t[i]);
    if (st == DLT_OK) printf("saved %s (iteration %lld)\n", path, (long long)iters_done);
    if (st == DLT_OK) r->saved_iter = iters_done;
    return st;
}

static dlt_status read_entry(dlt_safetensors *f, dlt_ctx *ctx, const char *name, int32_t dtype, void *v) {
    dlt_tensor *t = NULL;
    dlt_status st = dlt_safetensors_get(f, ctx, name, &t);
    if (st == DLT_OK && (dlt_tensor_dtype(t) != dtype || dlt_tensor_numel(t) != 1))
        st = dlt_set_error(DLT_ERR_FORMAT, "gpt_train: a checkpoint entry has the wrong dtype or shape");
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(t, v, dlt_dtype_size(dtype));
    dlt_tensor_release(t);
    return st;
}

/* Loads DIR/ckpt.safetensors into the objects and returns the iteration to continue from. */
static dlt_status load_checkpoint(run *r, int64_t *start) {
    char path[4096];
    ckpt_path(r, path, sizeof path);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        char msg[4200];
        snprintf(msg, sizeof msg, "no checkpoint to resume from: %s does not exist", path);
        return dlt_set_error(DLT_ERR_IO, msg);
    }
    int64_t epoch = 0, step = 0, vals[5] = {0};
    dlt_status st = dlt_checkpoint_load(path, r->s.model, r->s.opt, r->s.scaler, &epoch, &step);
    if (st != DLT_OK) return st;
    dlt_safetensors *f = NULL;
    st = dlt_safetensors_open(path, &f);
    const char *names[5] = {"train.iter", "train.loader_draw", "train.best_val_iter", "train.rng_seed",
                            "train.rng_offset"};
    for (int i = 0; i < 5 && st == DLT_OK; i++) st = read_entry(f, r->ctx, names[i], DLT_I64, &vals[i]);
    if (st == DLT_OK) st = read_entry(f, r->ctx, "train.best_val_loss", DLT_F32, &r->best_val);
    dlt_safetensors_close(f);
    if (st == DLT_OK && (vals[0] != step || vals[1] < 0)) {
        char msg[4200];
        snprintf(msg, sizeof msg, "%s: train.iter %lld disagrees with train.step %lld", path, (long long)vals[0],
                 (long long)step);
        st = dlt_set_error(DLT_ERR_FORMAT, msg);
    }
    if (st == DLT_OK) st = dlt_token_loader_seek(r->s.loader, vals[1]);
    if (st == DLT_OK) st = dlt_ctx_set_rng_state(r->ctx, (uint64_t)vals[3], (uint64_t)vals[4]);
    if (st == DLT_OK) {
        r->best_iter = vals[2];
        *start = step;
        printf("resumed from %s at iteration %lld (best val loss %.4f)\n", path, (long long)step, r->best_val);
    }
    return st;
}

/* ---- output -------------------------------------------------------------------------------- */

static double steady_iter_s(const run *r) {
    if (r->steady_iters > 0) return r->steady_s / (double)r->steady_iters;
    return r->done > 0 ? r->train_s / (double)r->done : NAN;
}

static uint64_t peak_bytes(const run *r) {
    uint64_t p = 0;
    for (int i = 0; i < r->n_chunks; i++)
        if (r->chunks[i].peak > p) p = r->chunks[i].peak;
    return p;
}

/* The seed's table row: one pass over the training tokens takes
 * train_tokens / tokens_per_iter iterations at the steady iteration time. */
static void print_table(run *r, int on_gpu) {
    const options *o = &r->o;
    const double it_s = steady_iter_s(r);
    const double passes = (double)dlt_token_dataset_size(r->train) / (double)r->tokens_per_iter;
    report_gpu_cols g;
    report_gpu_columns(&r->rep, on_gpu, &g);
    char prec[64], mem[32];
    snprintf(prec, sizeof prec, "%s, %lldx%lld%s", o->amp == DLT_F16 ? "fp16+scaler" : o->amp == DLT_BF16 ? "bf16" : "fp32",
             (long long)o->batch, (long long)o->context, o->accum > 1 ? ", accum" : "");
    if (o->accum > 1) snprintf(prec + strlen(prec), sizeof prec - strlen(prec), " %lld", (long long)o->accum);
    snprintf(mem, sizeof mem, "%.0f", peak_bytes(r) / 1048576.0);
    printf("\n| %-16s | %-22s | %-26s | %-14s | %-9s | %-12s | %-14s | %-8s | %-12s | %-6s | %-9s |\n", "model", "GPU",
           "precision", "epoch time (s)", "tokens/s", "GPU util (%)", "peak mem (MiB)", "temp (C)", "temp max (C)",
           "SM MHz", "throttled");
    printf("|------------------|------------------------|----------------------------|----------------|-----------|"
           "--------------|----------------|----------|--------------|--------|-----------|\n");
    printf("| %-16s | %-22.22s | %-26s | %-14.2f | %-9.0f | %-12s | %-14s | %-8s | %-12s | %-6s | %-9s |\n",
           r->model_name, r->devname, prec, passes * it_s, r->tokens_per_iter / it_s, g.util, mem, g.temp, g.temp_max,
           g.clock, g.throttled);
    printf("epoch = one pass over %lld training tokens = %.2f iterations; steady iteration %.2f ms",
           (long long)dlt_token_dataset_size(r->train), passes, 1000.0 * it_s);
    if (on_gpu) printf(", MFU %.2f%% of %g TFLOP/s", 100.0 * r->flops_per_iter / it_s / (o->peak_tflops * 1e12), o->peak_tflops);
    printf("\nfirst step after start: %.2f s; mean board power: %s W", r->first_step_s, g.power);
    if (r->best_iter >= 0) printf("; best val loss %.4f at iteration %lld", r->best_val, (long long)r->best_iter);
    printf("\n");
    fflush(stdout);
}

static int write_record(run *r, const dlt_gpt_config *cfg, const char *mode) {
    const options *o = &r->o;
    run_record *rec = r->rep.record;
    cJSON *dev = run_record_add_device(rec, o->device, 0);
    run_record_device_monitor(rec, dev, (const dlt_gpu_monitor *)r->rep.monitor);
    cJSON *w = run_record_workload(rec);
    rr_str(w, "model", r->model_name);
    rr_int(w, "parameters", dlt_module_param_count(r->s.model));
    rr_str(w, "precision", rr_precision_name(o->amp == DLT_F32 ? -1 : o->amp));
    rr_bool(w, "grad_scaler", o->amp == DLT_F16);
    rr_int(w, "batch", o->batch);
    rr_int(w, "accumulation", o->accum);
    rr_int(w, "sequence_length", o->context);
    rr_str(w, "mode", mode);
    cJSON *g = cJSON_AddObjectToObject(w, "gpt");
    rr_int(g, "n_layer", cfg->n_layer);
    rr_int(g, "n_head", cfg->n_head);
    rr_int(g, "n_embd", cfg->n_embd);
    rr_int(g, "vocab_size", cfg->vocab_size);
    rr_int(g, "padded_vocab_size", cfg->padded_vocab_size);
    rr_int(g, "block_size", cfg->block_size);
    rr_bool(g, "bias", cfg->bias);
    rr_num(g, "dropout", cfg->dropout);
    cJSON *opt = cJSON_AddObjectToObject(w, "optimizer");
    rr_str(opt, "name", "adamw");
    rr_num(opt, "lr", o->lr);
    rr_num(opt, "min_lr", o->min_lr);
    rr_num(opt, "beta1", o->beta1);
    rr_num(opt, "beta2", o->beta2);
    rr_num(opt, "weight_decay", o->weight_decay);
    rr_num(opt, "grad_clip", o->grad_clip);
    rr_int(opt, "warmup_iters", o->warmup_iters);
    rr_int(opt, "lr_decay_iters", o->lr_decay_iters);
    cJSON *ds = cJSON_AddObjectToObject(w, "dataset");
    rr_str(ds, "name", o->text ? "text (characters)" : o->tokens ? "token files" : "synthetic tokens");
    rr_str(ds, "path", o->text ? o->text : o->tokens);
    rr_int(ds, "train_samples", dlt_token_dataset_size(r->train));
    rr_str(ds, "sample_unit", "tokens");
    rr_int(w, "steps_limit", o->iters);

    const double it_s = steady_iter_s(r);
    cJSON *res = run_record_results(rec, "training");
    rr_str(res, "sample_unit", "tokens");
    rr_num(res, "epoch_time_s", (double)dlt_token_dataset_size(r->train) / (double)r->tokens_per_iter * it_s);
    rr_bool(res, "epoch_time_estimated", 1); /* always scaled from the steady iteration time */
    rr_num(res, "throughput_per_s", r->tokens_per_iter / it_s);
    rr_num(res, "first_step_s", r->first_step_s >= 0 ? r->first_step_s : NAN);
    if (r->n_chunks > 0) rr_int(res, "peak_memory_bytes", (int64_t)peak_bytes(r));
    else rr_num(res, "peak_memory_bytes", NAN);
    rr_num(res, "test_accuracy", NAN);
    rr_int(res, "iterations", r->done);
    rr_num(res, "iteration_s", it_s);
    rr_num(res, "mfu", o->device == DLT_DEVICE_CUDA ? r->flops_per_iter / it_s / (o->peak_tflops * 1e12) : NAN);
    rr_num(res, "peak_tflops", o->peak_tflops);
    rr_num(res, "best_val_loss", r->best_iter >= 0 ? r->best_val : NAN);
    if (r->best_iter >= 0) rr_int(res, "best_val_iter", r->best_iter);
    cJSON *eps = cJSON_AddArrayToObject(res, "epochs");
    for (int i = 0; i < r->n_chunks && eps; i++) {
        const chunk *c = &r->chunks[i];
        cJSON *e = cJSON_CreateObject();
        if (!e) break;
        cJSON_AddItemToArray(eps, e);
        rr_int(e, "epoch", c->epoch);
        rr_int(e, "steps", c->steps);
        rr_int(e, "steps_per_epoch", r->steps_per_epoch);
        rr_int(e, "samples", c->tokens);
        rr_sec(e, "seconds", c->seconds);
        rr_sec(e, "t_start_s", run_record_time(rec, c->t_start));
        rr_sec(e, "t_end_s", run_record_time(rec, c->t_end));
        rr_int(e, "peak_memory_bytes", (int64_t)c->peak);
        rr_num(e, "test_accuracy", NAN);
        rr_sec(e, "steady_seconds", c->steady_steps > 0 ? c->steady_seconds : NAN);
        rr_int(e, "steady_steps", c->steady_steps);
        rr_int(e, "steady_samples", c->steady_steps * r->tokens_per_iter);
    }
    return run_record_write(rec, o->json, PROG);
}

/* ---- sampling ------------------------------------------------------------------------------ */

static int sample(run *r) {
    const options *o = &r->o;
    int64_t n_prompt = 0;
    int64_t *ids = NULL;
    int rc = 1;
    if (r->tok) { /* text: the prompt's characters (nanoGPT's sample.py starts from "\n") */
        const char *p = o->prompt ? o->prompt : "\n";
        if (dlt_char_tokenizer_encode(r->tok, p, strlen(p), NULL, 0, &n_prompt) != DLT_OK) goto fail;
        uint16_t *u = malloc((size_t)(n_prompt > 0 ? n_prompt : 1) * sizeof *u);
        ids = malloc((size_t)(n_prompt + o->sample) * sizeof *ids);
        if (!u || !ids) {
            free(u);
            goto oom;
        }
        dlt_status st = dlt_char_tokenizer_encode(r->tok, p, strlen(p), u, n_prompt, &n_prompt);
        for (int64_t i = 0; i < n_prompt; i++) ids[i] = u[i];
        free(u);
        if (st != DLT_OK) goto fail;
    } else { /* token ids "1,2,3" */
        const char *p = o->prompt ? o->prompt : "0";
        ids = malloc((strlen(p) / 2 + 1 + (size_t)o->sample) * sizeof *ids);
        if (!ids) goto oom;
        while (*p) {
            char *end = NULL;
            long long v = strtoll(p, &end, 10);
            if (end == p || v < 0 || (*end && *end != ',')) {
                fprintf(stderr, "%s: --prompt must be token ids like 1,2,3 (got \"%s\")\n", PROG, o->prompt);
                free(ids);
                return 1;
            }
            ids[n_prompt++] = v;
            p = *end ? end + 1 : end;
        }
    }
    if (n_prompt == 0) {
        fprintf(stderr, "%s: --prompt is empty\n", PROG);
        free(ids);
        return 1;
    }
    int64_t *out = malloc((size_t)(n_prompt + o->sample) * sizeof *out);
    if (!out) goto oom;
    dlt_status st = o->amp != DLT_F32 ? dlt_autocast_begin(r->ctx, o->amp) : DLT_OK;
    if (st == DLT_OK) {
        st = dlt_gpt_generate(r->s.model, ids, n_prompt, o->sample, o->temperature, (int32_t)o->top_k,
                              (uint64_t)o->seed, out);
        dlt_status st2 = o->amp != DLT_F32 ? dlt_autocast_end(r->ctx) : DLT_OK;
        if (st == DLT_OK) st = st2;
    }
    if (st != DLT_OK) {
        free(out);
        goto fail;
    }
    printf("--- sample: %lld tokens, temperature %g, top-k %lld, seed %lld ---\n", (long long)o->sample,
           o->temperature, (long long)o->top_k, (long long)o->seed);
    const int64_t n = n_prompt + o->sample;
    if (r->tok) {
        uint16_t *u = malloc((size_t)n * sizeof *u);
        size_t len = 0;
        char *text = NULL;
        for (int64_t i = 0; u && i < n; i++) u[i] = (uint16_t)out[i];
        if (u && dlt_char_tokenizer_decode(r->tok, u, n, NULL, 0, &len) == DLT_OK && (text = malloc(len + 1)) &&
            dlt_char_tokenizer_decode(r->tok, u, n, text, len + 1, &len) == DLT_OK) {
            printf("%s\n", text);
            rc = 0;
        } else {
            fprintf(stderr, "%s: %s\n", PROG, u && text ? dlt_last_error() : "out of memory");
        }
        free(text);
        free(u);
    } else {
        for (int64_t i = 0; i < n; i++) printf("%s%lld", i ? "," : "", (long long)out[i]);
        printf("\n");
        rc = 0;
    }
    printf("---\n");
    free(out);
    free(ids);
    return rc;
oom:
    free(ids);
    fprintf(stderr, "%s: out of memory\n", PROG);
    return 1;
fail:
    free(ids);
    fprintf(stderr, "%s: %s\n", PROG, dlt_last_error());
    return 1;
}

/* ---- main ---------------------------------------------------------------------------------- */

/* --tokens TRAIN[,VAL] */
static dlt_status open_tokens(run *r, int32_t vocab) {
    const options *o = &r->o;
    char *spec = strdup(o->tokens);
    if (!spec) return dlt_set_error(DLT_ERR_OUT_OF_MEMORY, "gpt_train: out of memory");
    char *comma = strchr(spec, ',');
    if (comma) *comma = '\0';
    dlt_status st = dlt_token_file_open(r->ctx, spec, o->format, vocab, &r->train);
    if (st == DLT_OK && comma && comma[1]) st = dlt_token_file_open(r->ctx, comma + 1, o->format, vocab, &r->val);
    free(spec);
    return st;
}

static void set_model_name(run *r, const dlt_gpt_config *c) {
    dlt_gpt_config p;
    if (dlt_gpt_config_preset(r->o.preset, &p) == DLT_OK && p.n_layer == c->n_layer && p.n_head == c->n_head &&
        p.n_embd == c->n_embd)
        snprintf(r->model_name, sizeof r->model_name, "%s", r->o.preset);
    else
        snprintf(r->model_name, sizeof r->model_name, "gpt %d/%d/%lld", c->n_layer, c->n_head, (long long)c->n_embd);
}

int main(int argc, char **argv) {
    static run R; /* large (the report's epoch table): not on the stack */
    run *r = &R;
    options *o = &r->o;
    int rc = parse_args(argc, argv, o);
    if (rc) return rc == 1 ? 0 : rc;
    int exit_code = 1;
    report_init(&r->rep);
    r->best_val = 1e9f; /* nanoGPT's best_val_loss */
    r->best_iter = r->saved_iter = -1;
    r->first_step_s = -1;
    if (o->json && report_record_begin(&r->rep, o->json, PROG, argc, argv) != 0) goto fail;
    if (o->out && mkdir(o->out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: cannot create --out %s: %s\n", PROG, o->out, strerror(errno));
        goto fail;
    }

    int32_t ngpu = 0;
    TRY(dlt_cuda_device_count(&ngpu));
    if (o->device < 0) o->device = ngpu > 0 ? DLT_DEVICE_CUDA : DLT_DEVICE_CPU;
    if (o->device == DLT_DEVICE_CUDA) dlt_set_log_callback(on_log, NULL);
    TRY(dlt_ctx_create(o->device, 0, DLT_ABI_VERSION, &r->ctx));
    TRY(dlt_ctx_set_seed(r->ctx, (uint64_t)o->seed));
    TRY(dlt_ctx_set_deterministic(r->ctx, o->deterministic));
    TRY(dlt_ctx_device_name(r->ctx, r->devname, sizeof r->devname));

    /* model shape: the preset, then the explicit options */
    dlt_gpt_config cfg;
    TRY(dlt_gpt_config_preset(o->preset, &cfg));
    if (o->n_layer > 0) cfg.n_layer = (int32_t)o->n_layer;
    if (o->n_head > 0) cfg.n_head = (int32_t)o->n_head;
    if (o->n_embd > 0) cfg.n_embd = o->n_embd;
    if (o->dropout >= 0) cfg.dropout = o->dropout;
    if (o->bias >= 0) cfg.bias = o->bias;
    if (o->context > 0) cfg.block_size = o->context;
    o->context = cfg.block_size;
    if (o->min_lr < 0) o->min_lr = o->lr / 10;
    if (o->lr_decay_iters < 0) o->lr_decay_iters = o->iters > 0 ? o->iters : 1;

    /* data */
    int32_t vocab = (int32_t)(o->vocab > 0 ? o->vocab : cfg.vocab_size > 65536 ? 65536 : cfg.vocab_size);
    if (o->text) {
        TRY(dlt_char_text_open(r->ctx, o->text, 0.9, &r->tok, &r->train, &r->val));
        vocab = dlt_char_tokenizer_vocab_size(r->tok);
    } else if (o->tokens) {
        TRY(open_tokens(r, vocab));
    } else {
        printf("note: no --text or --tokens given: training on %lld synthetic tokens (uniform over %d)\n",
               (long long)o->synthetic_tokens, vocab);
        TRY(dlt_synthetic_tokens_create(r->ctx, o->synthetic_tokens, vocab, (uint64_t)o->seed + 10, &r->train));
        int64_t nv = o->synthetic_tokens / 10 > o->context + 1 ? o->synthetic_tokens / 10 : o->context + 1;
        TRY(dlt_synthetic_tokens_create(r->ctx, nv, vocab, (uint64_t)o->seed + 11, &r->val));
    }
    cfg.vocab_size = vocab;
    const int64_t pad = o->pad_vocab > 0 ? o->pad_vocab : vocab > 1024 ? 128 : 1;
    cfg.padded_vocab_size = (vocab + pad - 1) / pad * pad;
    r->tokens_per_iter = o->batch * o->context * o->accum;
    int64_t spe = (dlt_token_dataset_size(r->train) + r->tokens_per_iter - 1) / r->tokens_per_iter;
    r->steps_per_epoch = spe > 0 ? spe : 1;
    printf("tokens per iteration will be: %lld\n", (long long)r->tokens_per_iter);
    printf("data: %s: %lld training tokens, %s%lld validation tokens, vocabulary %d\n",
           o->text ? o->text : o->tokens ? o->tokens : "synthetic", (long long)dlt_token_dataset_size(r->train),
           r->val ? "" : "no split: ", (long long)dlt_token_dataset_size(r->val), vocab);

    /* model, optimizer, scaler, schedule, loaders */
    const double t_run0 = now_s();
    TRY(dlt_gpt_create(r->ctx, &cfg, &r->s.model));
    TRY(dlt_gpt_get_config(r->s.model, &cfg));
    set_model_name(r, &cfg);
    r->s.ctx = r->ctx;
    r->s.amp = o->amp;
    r->s.accum = o->accum;
    r->s.grad_clip = o->grad_clip;
    int64_t n_decay = 0, n_nodecay = 0;
    TRY(gpt_step_init(&r->s, o->lr, o->beta1, o->beta2, o->weight_decay, &n_decay, &n_nodecay));
    TRY(dlt_grad_scaler_create(r->ctx, 65536.0, 2.0, 0.5, 2000, o->amp == DLT_F16, &r->s.scaler));
    TRY(dlt_lr_schedule_warmup_cosine(r->s.opt, o->warmup_iters, o->lr_decay_iters, o->min_lr));
    TRY(dlt_token_loader_create(r->train, o->batch, o->context, (uint64_t)o->seed, &r->s.loader));
    if (o->eval_interval > 0) {
        const int64_t n1 = o->eval_iters;
        TRY(dlt_tensor_zeros(r->ctx, DLT_F32, &n1, 1, 0, &r->eval_losses));
        TRY(dlt_token_loader_create(r->train, o->batch, o->context, (uint64_t)o->seed + 1, &r->eval_train));
        if (r->val) TRY(dlt_token_loader_create(r->val, o->batch, o->context, (uint64_t)o->seed + 2, &r->eval_val));
    }
    r->flops_per_iter = gpt_flops_per_token(r->s.model, o->context) * (double)r->tokens_per_iter;
    printf("number of parameters: %.2fM (%s: %d layers, %d heads, %lld wide, vocabulary %lld%s, context %lld, "
           "bias %s, dropout %g)\n",
           gpt_num_params(r->s.model, 1) / 1e6, r->model_name, cfg.n_layer, cfg.n_head, (long long)cfg.n_embd,
           (long long)cfg.vocab_size, cfg.padded_vocab_size != cfg.vocab_size ? " padded" : "",
           (long long)cfg.block_size, cfg.bias ? "on" : "off", cfg.dropout);
    printf("AdamW: %lld parameters decayed (weight decay %g), %lld not; lr %g -> %g (warm-up %lld, decay to %lld), "
           "betas %g/%g, clip %g\n",
           (long long)n_decay, o->weight_decay, (long long)n_nodecay, o->lr, o->min_lr, (long long)o->warmup_iters,
           (long long)o->lr_decay_iters, o->beta1, o->beta2, o->grad_clip);

    int64_t start = 0;
    if (o->resume) TRY(load_checkpoint(r, &start));
    r->start = start;
    const int use_graph = !o->eager;
    const char *mode = !use_graph ? "eager" : o->device == DLT_DEVICE_CUDA ? "graph" : "eager (no CUDA graphs on the CPU)";
    printf("device %s, %s, %s, batch %lld x %lld x accum %lld, iterations %lld..%lld; eval every %lld on %lld "
           "batches, log every %lld\n",
           r->devname, o->amp == DLT_F16 ? "fp16 + GradScaler" : o->amp == DLT_BF16 ? "bf16" : "fp32", mode,
           (long long)o->batch, (long long)o->context, (long long)o->accum, (long long)start, (long long)o->iters,
           (long long)o->eval_interval, (long long)o->eval_iters, (long long)o->log_interval);
    fflush(stdout);
    if (start >= o->iters) {
        printf("nothing to train: %s %lld, --iters is %lld\n", o->resume ? "the checkpoint is at iteration" :
               "starting at iteration", (long long)start, (long long)o->iters);
        exit_code = 0;
        goto fail;
    }

    /* the loop (timing counts training only: evaluations and checkpoints are left out) */
    report_monitor_start(&r->rep, o->device == DLT_DEVICE_CUDA ? 0 : -1);
    r->steady_from = start + (use_graph ? 2 : 1); /* after the first step (and the capture) */
    r->seg_first = start;
    TRY(dlt_memory_reset_peak(r->ctx));
    TRY(dlt_ctx_get_rng_state(r->ctx, &r->rng_seed, &r->rng_start));
    r->t_mark = now_s();
    for (int64_t it = start;; it++) {
        /* at iteration boundaries: evaluation (and the best checkpoint), then the periodic one */
        const int eval_now = o->eval_interval > 0 && it % o->eval_interval == 0;
        const int save_now = o->out && o->save_every > 0 && it > start && (it % o->save_every == 0 || it == o->iters);
        if (eval_now || save_now) TRY(close_segment(r, it - 1));
        if (eval_now) {
            report_progress_clear(&r->rep);
            const int64_t e = it / o->eval_interval;
            float tl = 0, vl = NAN;
            TRY(estimate_loss(r, r->eval_train, e, &tl));
            if (r->eval_val) TRY(estimate_loss(r, r->eval_val, e, &vl));
            printf("step %lld: train loss %.4f, val loss %.4f\n", (long long)it, tl, vl);
            if (r->eval_val && vl < r->best_val) { /* always_save_checkpoint = False */
                r->best_val = vl;
                r->best_iter = it;
                if (it > 0 && o->out && r->saved_iter != it) TRY(save_checkpoint(r, it));
            }
            fflush(stdout);
        }
        if (save_now && r->saved_iter != it) TRY(save_checkpoint(r, it));
        r->t_mark = now_s();
        if (it >= o->iters) break;
        const int log_now = o->log_interval > 0 && it % o->log_interval == 0;
        double lr = 0;
        if (log_now) TRY(dlt_optimizer_get_group_lr(r->s.opt, 0, &lr)); /* the lr this iteration uses */
        if (it == r->steady_from - 1 && use_graph && !r->graph) {
            /* the second iteration: warm-up call (eager) and capture; later ones replay */
            TRY(dlt_graph_create(r->ctx, gpt_train_step, &r->s, 1, &r->graph));
        } else if (r->graph) {
            TRY(dlt_graph_run(r->graph));
        } else {
            TRY(gpt_train_step(&r->s));
        }
        r->done++;
        const int chunk_end = (it + 1) % r->steps_per_epoch == 0;
        if (it == start || it == r->steady_from - 1 || log_now || chunk_end || it + 1 == o->iters)
            TRY(close_segment(r, it));
        if (it == start) { /* the first iteration runs eagerly: its draws are every iteration's */
            r->first_step_s = now_s() - t_run0;
            uint64_t off = 0;
            TRY(dlt_ctx_get_rng_state(r->ctx, NULL, &off));
            r->rng_per_iter = off - r->rng_start;
        }
        if (log_now) {
            double loss = 0;
            TRY(dlt_tensor_item(r->s.loss_out, &loss));
            const double ms = r->log_iters > 0 ? 1000.0 * r->log_s / (double)r->log_iters : NAN;
            report_progress_clear(&r->rep);
            printf("iter %lld: loss %.4f, lr %.4e, time %.2fms, %.0f tok/s", (long long)it, loss, lr, ms,
                   r->tokens_per_iter / (ms / 1000.0));
            if (o->device == DLT_DEVICE_CUDA)
                printf(", mfu %.2f%%", 100.0 * r->flops_per_iter / (ms / 1000.0) / (o->peak_tflops * 1e12));
            printf("\n");
            fflush(stdout);
            r->log_s = 0, r->log_iters = 0;
        }
        if (chunk_end || it + 1 == o->iters) {
            chunk *c = cur_chunk(r, it, r->t_mark);
            if (c) TRY(dlt_memory_stat(r->ctx, DLT_MEM_PEAK_ALLOCATED, &c->peak));
            TRY(dlt_memory_reset_peak(r->ctx));
        }
        report_progress_label(&r->rep, "iter", it + 1, o->iters);
        r->t_mark = now_s();
    }
    report_progress_clear(&r->rep);
    report_monitor_stop(&r->rep);
    if (r->graph && !dlt_graph_is_captured(r->graph) && o->device == DLT_DEVICE_CUDA) mode = "eager (capture failed)";
    if (o->sample > 0 && sample(r) != 0) goto fail;
    print_table(r, o->device == DLT_DEVICE_CUDA);
    if (o->json) {
        if (write_record(r, &cfg, mode) != 0) goto fail;
        printf("run record: %s\n", o->json);
    }
    exit_code = 0;
fail:
    report_monitor_stop(&r->rep);
    report_fini(&r->rep);
    dlt_graph_destroy(r->graph);
    gpt_step_fini(&r->s);
    dlt_grad_scaler_destroy(r->s.scaler);
    dlt_module_destroy(r->s.model);
    dlt_tensor_release(r->eval_losses);
    dlt_token_loader_destroy(r->s.loader);
    dlt_token_loader_destroy(r->eval_train);
    dlt_token_loader_destroy(r->eval_val);
    dlt_token_dataset_destroy(r->train);
    dlt_token_dataset_destroy(r->val);
    dlt_char_tokenizer_destroy(r->tok);
    dlt_ctx_destroy(r->ctx);
    free(r->chunks);
    return exit_code;
}
