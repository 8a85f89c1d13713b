/*
 * bench_gpt.c - times the GPT training step (gpt_step.c: AdamW with nanoGPT's two groups,
 * clipping at 1.0, bf16 or fp16 with the GradScaler) the way ../shared/anchors/torch_gpt2.py
 * times PyTorch's and llm.c times its own, so that scripts/bench_gpt_vs_peers.sh can print
 * the three side by side. A program of its own rather than `bench --model gpt2`: the ResNet
 * bench's axes (memory format, classes, CIFAR batches, SGD) do not apply, and a GPT step has
 * its own (context length, tokens, MFU).
 *
 * For every configuration (batch x precision x eager/graph): a fresh context and model
 * (GPT-2's initialisation, seed 0), synthetic tokens resident on the device (16 batches'
 * worth), `--warmup` steps, then `--blocks` blocks of `--steps` steps timed with device
 * events; ms/step is the median block. Also: tokens/s, MFU (nanoGPT's estimate_mfu: 6 N +
 * 12 L H Q T FLOP per token, N without the position embedding) against 989 TFLOP/s (H100/H200
 * dense bf16) and against a measured GEMM rate (--peak-tflops, else dlt_bench_gemm's bf16 rate
 * at 8192^3 on CUDA), peak memory over the timed steps, the time from model creation to the end
 * of the first step, the captured graph's node count and the last loss.
 *
 *   bench_gpt [--preset gpt2] [--batch 8,16,32] [--context 1024] [--amp bf16,fp16]
 *             [--mode eager,graph] [--steps 20] [--blocks 5] [--warmup 5] [--device cuda|cpu]
 *             [--peak-tflops X] [--json FILE] [--sdp math|flash|cudnn]
 * --sdp picks the attention kernels (gpt_step.h): cudnn (the default), flash or math.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dltrain.h>

#include "cli.h"
#include "gpt_step.h"
#include "graph_stats.h"
#include "run_record.h"

#define PROG "bench_gpt"
#define SPEC_TFLOPS 989.0  /* H100/H200 SXM dense bf16, the anchors' reference */
#define EPOCH_TOKENS 1003854 /* tiny Shakespeare's training split (nanoGPT's shakespeare_char) */

static int32_t g_sdp = GPT_SDP_CUDNN; /* --sdp */

typedef struct cfg {
    int64_t batch;
    int32_t amp; /* DLT_BF16 or DLT_F16 (+ scaler) */
    int graph;
} cfg;

typedef struct result {
    double ms, first_s, loss, flops_per_step;
    uint64_t peak;
    int64_t nodes, params;
    graph_stats gs;
    int captured;
    dlt_status status;
    char err[256];
} result;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_cfg(int32_t device, const dlt_gpt_config *gc, int64_t T, const cfg *c, int steps, int blocks,
                    int warmup, result *r) {
    memset(r, 0, sizeof *r);
    gpt_step s;
    memset(&s, 0, sizeof s);
    dlt_token_dataset *ds = NULL;
    dlt_graph *g = NULL;
    dlt_event *e0 = NULL, *e1 = NULL;
    double times[64];
    dlt_status st;
#define RUN(call)                                                                             \
    do {                                                                                      \
        st = (call);                                                                          \
        if (st != DLT_OK) goto done;                                                          \
    } while (0)
    RUN(dlt_ctx_create(device, 0, DLT_ABI_VERSION, &s.ctx));
    RUN(dlt_ctx_set_seed(s.ctx, 0));
    RUN(gpt_set_sdp(s.ctx, g_sdp));
    RUN(dlt_synthetic_tokens_create(s.ctx, c->batch * T * 16 + 1, (int32_t)gc->vocab_size, 1, &ds));
    RUN(dlt_token_loader_create(ds, c->batch, T, 0, &s.loader));
    double t0 = run_record_mono_now();
    RUN(dlt_gpt_create(s.ctx, gc, &s.model));
    r->params = dlt_module_param_count(s.model);
    r->flops_per_step = gpt_flops_per_token(s.model, T) * (double)(c->batch * T);
    s.amp = c->amp;
    s.accum = 1;
    s.grad_clip = 1.0;
    RUN(gpt_step_init(&s, 6e-4, 0.9, 0.95, 0.1, NULL, NULL));
    RUN(dlt_grad_scaler_create(s.ctx, 65536.0, 2.0, 0.5, 2000, c->amp == DLT_F16, &s.scaler));
    RUN(gpt_train_step(&s));
    RUN(dlt_ctx_synchronize(s.ctx));
    r->first_s = run_record_mono_now() - t0;
    for (int i = 1; i < warmup; i++) RUN(gpt_train_step(&s));
    RUN(dlt_ctx_wait_plans(s.ctx));
    if (c->graph) {
        RUN(dlt_graph_create(s.ctx, gpt_train_step, &s, 2, &g));
        r->captured = dlt_graph_is_captured(g);
        r->nodes = dlt_graph_num_nodes(g);
        graph_stats_read(g, &r->gs);
        RUN(dlt_graph_run(g));
    }
    if (getenv("DLT_BENCH_PROFILE")) { /* one step marked for Nsight: ncu --nvtx-include "profile_step/" */
        RUN(dlt_range_push(s.ctx, "profile_step"));
        RUN(c->graph ? dlt_graph_run(g) : gpt_train_step(&s));
        RUN(dlt_range_pop(s.ctx));
    }
    RUN(dlt_ctx_synchronize(s.ctx));
    RUN(dlt_memory_reset_peak(s.ctx));
    RUN(dlt_event_create(s.ctx, &e0));
    RUN(dlt_event_create(s.ctx, &e1));
    for (int b = 0; b < blocks && b < 64; b++) {
        RUN(dlt_event_record(e0));
        for (int i = 0; i < steps; i++) RUN(c->graph ? dlt_graph_run(g) : gpt_train_step(&s));
        RUN(dlt_event_record(e1));
        RUN(dlt_event_elapsed_ms(e0, e1, &times[b]));
        times[b] /= steps;
    }
    qsort(times, (size_t)blocks, sizeof times[0], cmp_d);
    r->ms = times[blocks / 2];
    RUN(dlt_memory_stat(s.ctx, DLT_MEM_PEAK_ALLOCATED, &r->peak));
    RUN(dlt_tensor_item(s.loss_out, &r->loss));
done:
#undef RUN
    r->status = st;
    if (st != DLT_OK) snprintf(r->err, sizeof r->err, "%s", dlt_last_error());
    dlt_event_destroy(e0);
    dlt_event_destroy(e1);
    dlt_graph_destroy(g);
    gpt_step_fini(&s);
    dlt_grad_scaler_destroy(s.scaler);
    dlt_module_destroy(s.model);
    dlt_token_loader_destroy(s.loader);
    dlt_token_dataset_destroy(ds);
    dlt_ctx_destroy(s.ctx);
}

/* ---- options (cli.h) ---- */

static int parse_preset(const char *arg, void *dst) {
    dlt_gpt_config c;
    if (dlt_gpt_config_preset(arg, &c) != DLT_OK) return -1;
    *(const char **)dst = arg;
    return 0;
}

static const char *const DEVICE_NAMES[] = {"cuda", "cpu", NULL};
static const int32_t DEVICE_VALUES[] = {DLT_DEVICE_CUDA, DLT_DEVICE_CPU};

static void mfu_text(double flops, double ms, double tflops, char *buf, size_t n) {
    if (tflops > 0) snprintf(buf, n, "%.1f%%", 100.0 * flops / (ms / 1000.0) / (tflops * 1e12));
    else snprintf(buf, n, "n/a");
}

int main(int argc, char **argv) {
    const char *preset = "gpt2", *json = NULL;
    cli_int_list batches = {{8, 16, 32}, 3};
    cli_pair_list amps = {{DLT_BF16, DLT_F16}, 2, {"bf16", "fp16"}, {DLT_BF16, DLT_F16}};
    cli_pair_list modes = {{0, 1}, 2, {"eager", "graph"}, {0, 1}};
    int64_t context = -1, steps = 20, blocks = 5, warmup = 5;
    double peak_tflops = 0;
    int32_t device = -1;
    const cli_option opts[] = {
        {"preset", CLI_CUSTOM, &preset, .parse = parse_preset, .metavar = "NAME",
         .help = "model shape (gpt2; tiny for a CPU smoke run)"},
        {"batch", CLI_CUSTOM, &batches, .parse = cli_parse_int_list, .metavar = "N,N",
         .help = "batch sizes, up to 8, each 1..65536 (8,16,32)"},
        {"context", CLI_INT, &context, .lo = 1, .hi = 1048576, .metavar = "T",
         .help = "sequence length (the preset's block size: 1024)"},
        {"amp", CLI_CUSTOM, &amps, .parse = cli_parse_pair_list, .metavar = "bf16,fp16",
         .help = "precisions: bf16, fp16 with the GradScaler (both)"},
        {"mode", CLI_CUSTOM, &modes, .parse = cli_parse_pair_list, .metavar = "eager,graph",
         .help = "eager steps, one captured graph replayed, or both (both)"},
        {"steps", CLI_INT, &steps, .lo = 1, .hi = 100000, .metavar = "N", .help = "steps per timed block (20)"},
        {"blocks", CLI_INT, &blocks, .lo = 1, .hi = 64, .metavar = "N", .help = "timed blocks; the median counts (5)"},
        {"warmup", CLI_INT, &warmup, .lo = 1, .hi = 100000, .metavar = "N", .help = "steps before timing (5)"},
        {"device", CLI_CHOICE, &device, .choices = DEVICE_NAMES, .values = DEVICE_VALUES,
         .help = "(cuda when present)"},
        {"peak-tflops", CLI_REAL, &peak_tflops, .rlo = 1e-3, .rhi = 1e6, .metavar = "X",
         .help = "the GEMM rate for the second MFU column (measured with\ndlt_bench_gemm bf16 8192^3 on CUDA when not given)"},
        {"json", CLI_STRING, &json, .metavar = "FILE",
         .help = "also write the run record (JSON, docs/run-record.md) to FILE"},
        {"sdp", CLI_CHOICE, &g_sdp, .choices = GPT_SDP_NAMES, .values = GPT_SDP_VALUES, .metavar = "K",
         .help = "attention kernels: cudnn (cuDNN's fused attention, then\nflash; the default), flash (our tensor-core kernels) or\nmath (the reference kernels)"},
    };
    int rc = cli_parse(argc, argv, PROG, opts, (int)(sizeof opts / sizeof opts[0]));
    if (rc) return rc == 1 ? 0 : rc;
    if (json && run_record_check_path(json, PROG) != 0) return 1;
    run_record *rec = json ? run_record_begin(PROG, argc, argv) : NULL;
    if (json && !rec) return fprintf(stderr, "%s: out of memory\n", PROG), 1;
    int32_t ngpu = 0;
    if (dlt_cuda_device_count(&ngpu) != DLT_OK) ngpu = 0;
    if (device < 0) device = ngpu > 0 ? DLT_DEVICE_CUDA : DLT_DEVICE_CPU;

    dlt_gpt_config gc;
    if (dlt_gpt_config_preset(preset, &gc) != DLT_OK) return fprintf(stderr, "%s: %s\n", PROG, dlt_last_error()), 1;
    if (context > 0) gc.block_size = context;
    const int64_t T = gc.block_size;
    if (gc.vocab_size > 1024) gc.padded_vocab_size = (gc.vocab_size + 127) / 128 * 128; /* 50257 -> 50304 */

    /* the device's name and, on CUDA, the GEMM rate for the second MFU column */
    char name[256] = "cpu";
    const char *gemm_src = peak_tflops > 0 ? "--peak-tflops" : "none";
    dlt_ctx *probe = NULL;
    if (dlt_ctx_create(device, 0, DLT_ABI_VERSION, &probe) == DLT_OK) {
        if (dlt_ctx_device_name(probe, name, sizeof name) != DLT_OK) /* the label stays "cpu" */
            fprintf(stderr, "bench_gpt: %s\n", dlt_last_error());
        if (peak_tflops <= 0 && device == DLT_DEVICE_CUDA &&
            dlt_bench_gemm(probe, DLT_GEMM_BF16, 8192, 8192, 8192, &peak_tflops) == DLT_OK)
            gemm_src = "dlt_bench_gemm bf16 8192^3";
        dlt_ctx_destroy(probe);
    }
    dlt_gpu_monitor *mon = NULL;
    if (rec && device == DLT_DEVICE_CUDA && dlt_gpu_monitor_start(0, 100, &mon) != DLT_OK) mon = NULL;
    cJSON *configs = NULL;
    if (rec) {
        cJSON *res = run_record_results(rec, "bench");
        rr_str(res, "sample_unit", "tokens");
        rr_int(res, "epoch_samples", EPOCH_TOKENS);
        rr_num(res, "spec_tflops", SPEC_TFLOPS);
        rr_num(res, "gemm_tflops", peak_tflops > 0 ? peak_tflops : NAN);
        rr_str(res, "gemm_tflops_source", gemm_src);
        configs = cJSON_AddArrayToObject(res, "configs");
    }
    const double spec = device == DLT_DEVICE_CUDA ? SPEC_TFLOPS : 0;
    printf("# libdltrain %s bench_gpt on %s: %s (%d layers, %d heads, %lld wide, vocabulary %lld padded to %lld), "
           "context %lld, AdamW + clip 1.0, attention %s; median of %d blocks of %d steps after %d warm-up steps; "
           "MFU against %g TFLOP/s (spec) and %s (%s)\n",
           dlt_version_string(), name, preset, gc.n_layer, gc.n_head, (long long)gc.n_embd, (long long)gc.vocab_size,
           (long long)(gc.padded_vocab_size ? gc.padded_vocab_size : gc.vocab_size), (long long)T,
           GPT_SDP_NAMES[g_sdp], (int)blocks, (int)steps, (int)warmup, SPEC_TFLOPS,
           peak_tflops > 0 ? "a GEMM rate" : "no GEMM rate", gemm_src);
    printf("| %-5s | %-7s | %-11s | %-6s | %-9s | %-9s | %-8s | %-8s | %-8s | %-12s | %-6s | %-7s |\n", "batch",
           "context", "precision", "mode", "ms/step", "tokens/s", "MFU spec", "MFU gemm", "peak MiB", "first step s",
           "nodes", "loss");
    printf("|-------|---------|-------------|--------|-----------|-----------|----------|----------|----------|"
           "--------------|--------|---------|\n");
    int failed = 0;
    int64_t params = -1;
    static graph_stats_lines glines;
    for (int ib = 0; ib < batches.n; ib++)
        for (int ia = 0; ia < amps.n; ia++)
            for (int im = 0; im < modes.n; im++) {
                cfg c = {batches.v[ib], amps.v[ia], modes.v[im]};
                result r;
                double t_cfg = run_record_mono_now();
                run_cfg(device, &gc, T, &c, (int)steps, (int)blocks, (int)warmup, &r);
                const char *prec = c.amp == DLT_F16 ? "fp16+scaler" : "bf16";
                const char *mode = c.graph ? (r.captured ? "graph" : "eager*") : "eager";
                const int ok = r.status == DLT_OK;
                if (ok) params = r.params;
                char m1[16] = "", m2[16] = "";
                if (ok) {
                    mfu_text(r.flops_per_step, r.ms, spec, m1, sizeof m1);
                    mfu_text(r.flops_per_step, r.ms, peak_tflops, m2, sizeof m2);
                }
                if (rec) {
                    cJSON *o = cJSON_CreateObject();
                    cJSON_AddItemToArray(configs, o);
                    rr_int(o, "batch", c.batch);
                    rr_int(o, "sequence_length", T);
                    rr_str(o, "precision", rr_precision_name(c.amp));
                    rr_bool(o, "grad_scaler", c.amp == DLT_F16);
                    rr_str(o, "memory_format", "none");
                    rr_str(o, "mode", c.graph ? "graph" : "eager");
                    rr_bool(o, "captured", r.captured);
                    rr_str(o, "status", ok ? "ok" : "failed");
                    rr_str(o, "error", ok ? NULL : r.err);
                    rr_num(o, "ms_per_step", ok ? r.ms : NAN);
                    rr_num(o, "throughput_per_s", ok ? c.batch * T * 1000.0 / r.ms : NAN);
                    rr_num(o, "epoch_time_s", ok ? (double)EPOCH_TOKENS / (double)(c.batch * T) * r.ms / 1000.0 : NAN);
                    rr_num(o, "flops_per_step", ok ? r.flops_per_step : NAN);
                    rr_num(o, "mfu_spec", ok && spec > 0 ? r.flops_per_step / (r.ms / 1000.0) / (spec * 1e12) : NAN);
                    rr_num(o, "mfu_gemm",
                           ok && peak_tflops > 0 ? r.flops_per_step / (r.ms / 1000.0) / (peak_tflops * 1e12) : NAN);
                    if (ok) rr_int(o, "peak_memory_bytes", (int64_t)r.peak);
                    else rr_num(o, "peak_memory_bytes", NAN);
                    rr_sec(o, "first_step_s", ok ? r.first_s : NAN);
                    graph_stats_record(o, &r.gs);
                    rr_num(o, "loss", ok ? r.loss : NAN);
                    rr_sec(o, "t_start_s", run_record_time(rec, t_cfg));
                    rr_sec(o, "t_end_s", run_record_time(rec, run_record_mono_now()));
                }
                if (!ok) {
                    failed++;
                    printf("| %-5lld | %-7lld | %-11s | %-6s | failed: %s\n", (long long)c.batch, (long long)T, prec,
                           mode, r.err);
                    continue;
                }
                printf("| %-5lld | %-7lld | %-11s | %-6s | %9.2f | %9.0f | %-8s | %-8s | %8.0f | %12.2f | %6lld | %7.4f |\n",
                       (long long)c.batch, (long long)T, prec, mode, r.ms, c.batch * T * 1000.0 / r.ms, m1, m2,
                       r.peak / 1048576.0, r.first_s, (long long)r.nodes, r.loss);
                fflush(stdout);
                char label[96];
                snprintf(label, sizeof label, "batch %lld x %lld, %s", (long long)c.batch, (long long)T, prec);
                graph_stats_keep(&glines, label, &r.gs);
            }
    graph_stats_print(&glines);
    if (rec) {
        if (mon && dlt_gpu_monitor_stop(mon) != DLT_OK) fprintf(stderr, "bench_gpt: %s\n", dlt_last_error());
        cJSON *dev = run_record_add_device(rec, device, 0);
        run_record_device_monitor(rec, dev, mon);
        cJSON *w = run_record_workload(rec);
        rr_str(w, "model", preset);
        if (params > 0) rr_int(w, "parameters", params);
        else rr_num(w, "parameters", NAN);
        rr_int(w, "sequence_length", T);
        rr_bool(w, "deterministic", 0);
        rr_str(w, "attention", GPT_SDP_NAMES[g_sdp]);
        cJSON *opt = cJSON_AddObjectToObject(w, "optimizer");
        rr_str(opt, "name", "adamw");
        rr_num(opt, "lr", 6e-4);
        cJSON *ds = cJSON_AddObjectToObject(w, "dataset");
        rr_str(ds, "name", "synthetic tokens (16 batches resident on the device)");
        rr_str(ds, "sample_unit", "tokens");
        cJSON *tm = cJSON_AddObjectToObject(w, "timing");
        rr_int(tm, "warmup_steps", warmup);
        rr_int(tm, "blocks", blocks);
        rr_int(tm, "steps_per_block", steps);
        rr_str(tm, "statistic", "median block");
        if (run_record_write(rec, json, PROG) != 0) failed++;
        else printf("run record: %s\n", json);
        run_record_free(rec);
        dlt_gpu_monitor_destroy(mon);
    }
    return failed ? 1 : 0;
}
