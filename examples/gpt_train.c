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
 * clipping after unscaling, fp16 with the GradScaler. The iteration itself is gpt_step.c
 * (shared with bench_gpt); on CUDA it runs as one captured graph (--eager: plain calls),
 * and each split's evaluation batch is a captured graph too, replayed --eval-iters times
 * (the losses summed in f32 on the device; --eager-eval or --eager: plain calls, summed in
 * double on the host). Checkpoints, the closing table, the run record and
 * sampling are in gpt_train_out.c. nanoGPT's loop trains one more step after its last evaluation (iteration
 * max_iters), which no evaluation or checkpoint ever sees; this loop stops at that
 * evaluation, so --iters N trains N iterations.
 *
 * A checkpoint (--out DIR: DIR/ckpt.safetensors) holds the model, the AdamW state, the
 * scaler, and the program's own entries (train.iter, the token loader's draw position, the
 * best validation loss, the generator's state): --resume continues exactly as the
 * uninterrupted run would have (tests/scripts/gpt_examples.sh compares the two bitwise).
 * Data parallel (--gpus N, or started by dltrain-run, torchrun or mpirun; docs/distributed.md):
 * one process per GPU as nanoGPT's DDP mode, with --batch per process: each rank draws its
 * rows of the global batch (dlt_token_loader_set_distributed: N ranks x B rows are the rows
 * of one process's N*B), DDP averages the gradients in the last micro-step's backward only,
 * the GradScaler's skip decision is agreed, and rank 0 alone evaluates (as nanoGPT's master
 * process: batches of --batch rows), saves, samples and prints; dropout draws from seed +
 * rank (nanoGPT's seed_offset; a resumed rank restores its own stream), so with dropout 0 N
 * ranks train the parameters one process with the global batch trains. tokens/s count the
 * whole run; MFU is per GPU; the logged loss is rank 0's micro-batch's.
 *
 * Exit status: 0, 1 (a runtime failure: the library's message), 2 (usage).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <dltrain.h>

#include "cli.h"
#include "gpt_train.h"
#include "launch.h"
#include "run_record.h"

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
    o->sdp = GPT_SDP_CUDNN;
    o->eval_interval = 250;
    o->eval_iters = 200;
    o->log_interval = 10;
    o->top_k = 200;
    o->seed = 1337;
    o->temperature = 0.8;
    o->peak_tflops = 989;
    o->gpus = 1;
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
        {"eager-eval", CLI_FLAG, &o->eager_eval,
         .help = "CUDA: evaluate with plain calls while the step is\ncaptured (default: each split's evaluation batch is a\ncaptured graph too)"},
        {"deterministic", CLI_FLAG, &o->deterministic,
         .help = "deterministic kernels only (bitwise-reproducible CUDA runs)"},
        {"sdp", CLI_CHOICE, &o->sdp, .choices = GPT_SDP_NAMES, .values = GPT_SDP_VALUES, .metavar = "K",
         .help = "attention kernels on CUDA: cudnn (cuDNN's fused attention,\nthen flash; the default), flash (our tensor-core kernels)\nor math (the reference kernels)"},
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
        {"gpus", CLI_INT, &o->gpus, .lo = 1, .hi = 1024, .metavar = "N",
         .help = "data-parallel processes, one per GPU, --batch each (1);\nstarted here unless a launcher "
                 "(dltrain-run, torchrun) did"},
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

/* The loss of the split's next batch as a [1] tensor: draw, forward under the run's autocast
 * (the caller set eval mode and no grad). The loss is f32 (autocast's fp32 list). */
static dlt_status eval_loss(run *r, dlt_token_loader *ld, dlt_tensor **l1) {
    const options *o = &r->o;
    dlt_tensor *x = NULL, *y = NULL, *loss = NULL;
    const int64_t one = 1;
    dlt_status st = dlt_token_loader_next(ld, &x, &y);
    if (st == DLT_OK && o->amp != DLT_F32) st = dlt_autocast_begin(r->ctx, o->amp);
    if (st == DLT_OK) {
        st = dlt_gpt_forward(r->s.model, x, y, NULL, &loss);
        dlt_status st2 = o->amp != DLT_F32 ? dlt_autocast_end(r->ctx) : DLT_OK;
        if (st == DLT_OK) st = st2;
    }
    if (st == DLT_OK) st = dlt_reshape(loss, &one, 1, l1);
    dlt_tensor_release(loss);
    return st;
}

/* One evaluation batch as a step for dlt_graph_create: eval_sum += its loss. Enqueues work
 * only. */
static dlt_status eval_batch(void *user) {
    eval_pass *ev = user;
    dlt_tensor *l1 = NULL, *sum = NULL;
    dlt_status st = eval_loss(ev->r, ev->ld, &l1);
    if (st == DLT_OK) st = dlt_add(ev->r->eval_sum, l1, &sum);
    if (st == DLT_OK) st = dlt_tensor_copy(ev->r->eval_sum, sum);
    dlt_tensor_release(sum);
    dlt_tensor_release(l1);
    return st;
}

/* The eager evaluation: each batch's loss into its slot of eval_losses, summed on the host
 * in double (nanoGPT's losses[k] = loss.item(), then the mean). */
static dlt_status eval_eager(run *r, dlt_token_loader *ld, double *sum) {
    const options *o = &r->o;
    dlt_status st = DLT_OK;
    for (int64_t k = 0; st == DLT_OK && k < o->eval_iters; k++) {
        dlt_tensor *l1 = NULL, *slot = NULL;
        st = eval_loss(r, ld, &l1);
        if (st == DLT_OK) st = dlt_narrow(r->eval_losses, 0, k, 1, &slot);
        if (st == DLT_OK) st = dlt_tensor_copy(slot, l1);
        dlt_tensor_release(slot);
        dlt_tensor_release(l1);
    }
    float *v = st == DLT_OK ? malloc((size_t)o->eval_iters * sizeof *v) : NULL;
    if (st == DLT_OK && !v) st = dlt_set_error(DLT_ERR_OUT_OF_MEMORY, "gpt_train: out of memory");
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(r->eval_losses, v, (size_t)o->eval_iters * sizeof *v);
    if (st == DLT_OK) {
        *sum = 0;
        for (int64_t k = 0; k < o->eval_iters; k++) *sum += v[k];
    }
    free(v);
    return st;
}

/* The captured evaluation: eval_sum zeroed, the split's batch graph replayed eval_iters
 * times (created at the split's first evaluation, whose warm-up call is its first batch),
 * then one read. The losses add up in f32 on the device, in batch order. */
static dlt_status eval_graphed(run *r, eval_pass *ev, double *sum) {
    const options *o = &r->o;
    dlt_status st = dlt_tensor_fill(r->eval_sum, 0.0);
    int64_t k = 0;
    if (st == DLT_OK && !ev->graph && o->eval_iters > 0) {
        ev->r = r;
        st = dlt_graph_create(r->ctx, eval_batch, ev, 1, &ev->graph);
        k = 1; /* the warm-up call evaluated the first batch */
    }
    for (; st == DLT_OK && k < o->eval_iters; k++) st = dlt_graph_run(ev->graph);
    if (st == DLT_OK) st = dlt_tensor_item(r->eval_sum, sum);
    return st;
}

/* nanoGPT's estimate_loss for one split (0 train, 1 val): evaluation e reads draws
 * e*eval_iters onwards of the split's own loader (so an evaluation never moves the training
 * batches, and a resumed run evaluates on the same batches). Eval mode, no gradients, the
 * training precision; the mean of the batches' losses. */
static dlt_status estimate_loss(run *r, int split, int64_t e, float *out) {
    const options *o = &r->o;
    eval_pass *ev = &r->evp[split];
    dlt_status st = dlt_token_loader_seek(ev->ld, e * o->eval_iters);
    int32_t prev = 1;
    if (st == DLT_OK) st = dlt_grad_set_enabled(r->ctx, 0, &prev);
    if (st != DLT_OK) return st;
    st = dlt_module_set_training(r->s.model, 0);
    double sum = 0;
    if (st == DLT_OK) st = r->eval_graphs ? eval_graphed(r, ev, &sum) : eval_eager(r, ev->ld, &sum);
    if (st == DLT_OK) *out = (float)(sum / (double)o->eval_iters);
    dlt_status st2 = dlt_module_set_training(r->s.model, 1);
    dlt_status st3 = dlt_grad_set_enabled(r->ctx, prev, NULL);
    return st != DLT_OK ? st : st2 != DLT_OK ? st2 : st3;
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
    /* data parallel: this process's rank, or start the ranks here and wait for them */
    int32_t local_rank = 0;
    if (dlt_dist_env(&r->rank, &r->world, &local_rank) != DLT_OK) {
        fprintf(stderr, "%s: %s\n", PROG, dlt_last_error());
        return 1;
    }
    if (o->gpus > 1 && r->world == 1) return dlt_launch_self(PROG, (int)o->gpus, argc, argv);
    const int lead = r->rank == 0;
    if (!lead && !freopen("/dev/null", "w", stdout)) { /* rank 0 speaks for the run; errors still show */
        fprintf(stderr, "%s: rank %d: cannot silence stdout\n", PROG, r->rank);
        return 1;
    }
    if (o->json && lead && report_record_begin(&r->rep, o->json, PROG, argc, argv) != 0) goto fail;
    if (o->out && mkdir(o->out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: cannot create --out %s: %s\n", PROG, o->out, strerror(errno));
        goto fail;
    }

    int32_t ngpu = 0;
    TRY(dlt_cuda_device_count(&ngpu));
    if (o->device < 0) o->device = ngpu > 0 ? DLT_DEVICE_CUDA : DLT_DEVICE_CPU;
    if (o->device == DLT_DEVICE_CUDA) dlt_set_log_callback(on_log, NULL);
    TRY(dlt_ctx_create(o->device, o->device == DLT_DEVICE_CUDA && ngpu > 0 ? local_rank % ngpu : 0,
                       DLT_ABI_VERSION, &r->ctx));
    if (r->world > 1) TRY(dlt_comm_create(r->ctx, &r->comm));
    /* dropout's stream per rank (nanoGPT: seed + seed_offset); the initial weights are rank 0's */
    TRY(dlt_ctx_set_seed(r->ctx, (uint64_t)o->seed + (uint64_t)r->rank));
    TRY(dlt_ctx_set_deterministic(r->ctx, o->deterministic));
    TRY(gpt_set_sdp(r->ctx, o->sdp));
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
    r->tokens_per_iter = o->batch * o->context * o->accum * r->world; /* the whole run's */
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
    if (r->comm) TRY(dlt_ddp_create(r->comm, r->s.model, &r->ddp)); /* rank 0's weights everywhere */
    r->s.ddp = r->ddp;
    r->s.ctx = r->ctx;
    r->s.amp = o->amp;
    r->s.accum = o->accum;
    r->s.grad_clip = o->grad_clip;
    int64_t n_decay = 0, n_nodecay = 0;
    TRY(gpt_step_init(&r->s, o->lr, o->beta1, o->beta2, o->weight_decay, &n_decay, &n_nodecay));
    TRY(dlt_grad_scaler_create(r->ctx, 65536.0, 2.0, 0.5, 2000, o->amp == DLT_F16, &r->s.scaler));
    if (r->comm) TRY(dlt_grad_scaler_set_comm(r->s.scaler, r->comm)); /* every rank skips the same steps */
    TRY(dlt_lr_schedule_warmup_cosine(r->s.opt, o->warmup_iters, o->lr_decay_iters, o->min_lr));
    TRY(dlt_token_loader_create(r->train, o->batch, o->context, (uint64_t)o->seed, &r->s.loader));
    if (r->comm) TRY(dlt_token_loader_set_distributed(r->s.loader, r->world, r->rank)); /* this rank's rows */
    if (o->eval_interval > 0 && lead) { /* rank 0 alone evaluates (nanoGPT's master_process) */
        const int64_t n1 = o->eval_iters;
        TRY(dlt_tensor_zeros(r->ctx, DLT_F32, &n1, 1, 0, &r->eval_losses));
        TRY(dlt_token_loader_create(r->train, o->batch, o->context, (uint64_t)o->seed + 1, &r->eval_train));
        if (r->val) TRY(dlt_token_loader_create(r->val, o->batch, o->context, (uint64_t)o->seed + 2, &r->eval_val));
        r->evp[0].ld = r->eval_train;
        r->evp[1].ld = r->eval_val;
        r->eval_graphs = !o->eager_eval && !o->eager && o->device == DLT_DEVICE_CUDA;
        if (r->eval_graphs) {
            const int64_t one = 1;
            TRY(dlt_tensor_zeros(r->ctx, DLT_F32, &one, 1, 0, &r->eval_sum));
        }
    }
    r->flops_per_iter = gpt_flops_per_token(r->s.model, o->context) * (double)(r->tokens_per_iter / r->world);
    printf("number of parameters: %.2fM (%s: %d layers, %d heads, %lld wide, vocabulary %lld%s, context %lld, "
           "bias %s, dropout %g)\n",
           gpt_num_params(r->s.model, 1) / 1e6, r->model_name, cfg.n_layer, cfg.n_head, (long long)cfg.n_embd,
           (long long)cfg.vocab_size, cfg.padded_vocab_size != cfg.vocab_size ? " padded" : "",
           (long long)cfg.block_size, cfg.bias ? "on" : "off", cfg.dropout);
    printf("AdamW: %lld parameters decayed (weight decay %g), %lld not; lr %g -> %g (warm-up %lld, decay to %lld), "
           "betas %g/%g, clip %g\n",
           (long long)n_decay, o->weight_decay, (long long)n_nodecay, o->lr, o->min_lr, (long long)o->warmup_iters,
           (long long)o->lr_decay_iters, o->beta1, o->beta2, o->grad_clip);

    if (r->comm)
        printf("data parallel: %d processes (%s) x batch %lld = global batch %lld\n", r->world,
               dlt_comm_backend(r->comm), (long long)o->batch, (long long)o->batch * r->world);
    int64_t start = 0;
    if (o->resume) TRY(gpt_load_checkpoint(r, &start));
    if (o->resume && r->rank > 0) { /* the file holds rank 0's generator: this rank's own stream */
        uint64_t seed = 0, off = 0;
        TRY(dlt_ctx_get_rng_state(r->ctx, &seed, &off));
        TRY(dlt_ctx_set_rng_state(r->ctx, seed + (uint64_t)r->rank, off));
    }
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
    r->t_mark = now_s();
    for (int64_t it = start;; it++) {
        /* at iteration boundaries: evaluation (and the best checkpoint), then the periodic one */
        const int eval_now = lead && o->eval_interval > 0 && it % o->eval_interval == 0;
        const int save_now =
            lead && o->out && o->save_every > 0 && it > start && (it % o->save_every == 0 || it == o->iters);
        if (eval_now || save_now) TRY(close_segment(r, it - 1));
        if (eval_now) {
            report_progress_clear(&r->rep);
            const int64_t e = it / o->eval_interval;
            float tl = 0, vl = NAN;
            TRY(estimate_loss(r, 0, e, &tl));
            if (r->eval_val) TRY(estimate_loss(r, 1, e, &vl));
            printf("step %lld: train loss %.4f, val loss %.4f\n", (long long)it, tl, vl);
            if (r->eval_val && vl < r->best_val) { /* always_save_checkpoint = False */
                r->best_val = vl;
                r->best_iter = it;
                if (it > 0 && o->out && r->saved_iter != it) TRY(gpt_save_checkpoint(r, it));
            }
            fflush(stdout);
        }
        if (save_now && r->saved_iter != it) TRY(gpt_save_checkpoint(r, it));
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
        if (it == start) r->first_step_s = now_s() - t_run0;
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
    if (o->sample > 0 && lead && gpt_sample(r) != 0) goto fail;
    gpt_print_table(r, o->device == DLT_DEVICE_CUDA);
    if (o->json && lead) {
        if (gpt_write_record(r, &cfg, mode) != 0) goto fail;
        printf("run record: %s\n", o->json);
    }
    exit_code = 0;
fail:
    report_monitor_stop(&r->rep);
    report_fini(&r->rep);
    dlt_graph_destroy(r->graph);
    dlt_graph_destroy(r->evp[0].graph);
    dlt_graph_destroy(r->evp[1].graph);
    dlt_tensor_release(r->eval_sum);
    dlt_ddp_destroy(r->ddp);
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
    dlt_comm_destroy(r->comm);
    dlt_ctx_destroy(r->ctx);
    free(r->chunks);
    return exit_code;
}
