/*
 * gpt_train_out.c - examples/gpt_train's checkpoints (the library's training checkpoint plus
 * the loop's own entries, so that --resume continues exactly), the seed's table row, the run
 * record (--json) and sampling (--sample).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gpt_train.h"
#include "run_record.h"

static dlt_status scalar_tensor(dlt_ctx *ctx, int32_t dtype, const void *v, dlt_tensor **out) {
    return dlt_tensor_from_host(ctx, dtype, NULL, 0, 0, v, dlt_dtype_size(dtype), out);
}

static void ckpt_path(const run *r, char *buf, size_t n) { snprintf(buf, n, "%s/ckpt.safetensors", r->o.out); }

/* DIR/ckpt.safetensors after `iters_done` iterations: the library's training checkpoint plus
 * what this loop needs to continue exactly (one file, written atomically). */
dlt_status gpt_save_checkpoint(run *r, int64_t iters_done) {
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
dlt_status gpt_load_checkpoint(run *r, int64_t *start) {
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

double gpt_steady_iter_s(const run *r) {
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
void gpt_print_table(run *r, int on_gpu) {
    const options *o = &r->o;
    const double it_s = gpt_steady_iter_s(r);
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

int gpt_write_record(run *r, const dlt_gpt_config *cfg, const char *mode) {
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

    const double it_s = gpt_steady_iter_s(r);
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

int gpt_sample(run *r) {
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

