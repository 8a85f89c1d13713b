/*
 * bench.c - times the ResNet50 training step (batch production, forward, backward,
 * GradScaler, SGD) the way ../shared/anchors/torch_resnet50.py times PyTorch's, so the two
 * can be printed side by side (scripts/bench_vs_torch.sh).
 *
 * For every configuration (batch x precision x memory format x eager/graph): a fresh model
 * (1000 classes, as torchvision's default and the anchor), synthetic data resident on the
 * device, `--warmup` steps, then `--blocks` blocks of `--steps` steps timed with device
 * events; ms/step is the median over blocks. Also: images/s, epoch time for 50,000 images,
 * peak memory during the timed steps, time from model creation to the end of the first step,
 * and the number of nodes of the captured graph.
 *
 *   bench [--batch 64,256,1024] [--amp fp16,bf16] [--format nhwc,nchw] [--mode eager,graph]
 *         [--steps 20] [--blocks 5] [--warmup 5] [--classes 1000] [--device cuda|cpu]
 *         [--deterministic] [--cudnn-benchmark 0|1] [--log] [--json FILE]
 *
 * --cudnn-benchmark 1 times cuDNN's engines for each convolution shape during the warm-up
 * (dlt_ctx_set_cudnn_benchmark), as the anchor does (torch.backends.cudnn.benchmark = True);
 * left out, the context's default (DLT_CUDNN_AUTOTUNE, unset: off).
 *
 * --json FILE writes the run record (docs/run-record.md): every configuration's row plus
 * its time interval, and on a GPU the NVML monitor's series over the whole run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dltrain.h>

#include "cli.h"
#include "graph_stats.h"
#include "run_record.h"

typedef struct bench_cfg {
    int64_t batch;
    int32_t amp;    /* DLT_F16 (+ scaler) or DLT_BF16 (no scaler) */
    int32_t format; /* DLT_FORMAT_* */
    int graph;
} bench_cfg;

typedef struct step_state {
    dlt_ctx *ctx;
    dlt_module *model;
    dlt_optimizer *opt;
    dlt_grad_scaler *scaler;
    dlt_loader *loader;
    int32_t amp;
    dlt_tensor *loss_out; /* persistent copy of the last loss */
} step_state;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CK(call)                                                                              \
    do {                                                                                      \
        dlt_status s_ = (call);                                                               \
        if (s_ != DLT_OK) return s_;                                                          \
    } while (0)

/* One training step, as the seed's loop body (plus taking the batch). */
static dlt_status train_step(void *user) {
    step_state *s = user;
    dlt_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL, *scaled = NULL;
    int32_t has = 0;
    CK(dlt_loader_next(s->loader, &x, &y, &has));
    if (!has) { /* eager runs only: a captured step wraps around on the device */
        CK(dlt_loader_start_epoch(s->loader, 0));
        CK(dlt_loader_next(s->loader, &x, &y, &has));
    }
    CK(dlt_optimizer_zero_grad(s->opt, 1));
    CK(dlt_autocast_begin(s->ctx, s->amp));
    dlt_status st = dlt_module_forward(s->model, x, &logits);
    if (st == DLT_OK) st = dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss);
    dlt_status st2 = dlt_autocast_end(s->ctx);
    dlt_tensor_release(logits);
    if (st == DLT_OK) st = st2;
    if (st == DLT_OK) st = dlt_grad_scaler_scale(s->scaler, loss, &scaled);
    if (st == DLT_OK) st = dlt_backward(scaled, NULL);
    if (st == DLT_OK) st = dlt_grad_scaler_step(s->scaler, s->opt);
    if (st == DLT_OK) st = dlt_grad_scaler_update(s->scaler);
    if (st == DLT_OK) st = dlt_tensor_copy(s->loss_out, loss);
    dlt_tensor_release(scaled);
    dlt_tensor_release(loss);
    return st;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct result {
    double ms, first_s, peak_mib, loss;
    uint64_t peak_bytes;
    int64_t nodes, params;
    graph_stats gs;
    int captured;
    dlt_status status;
    char err[256];
} result;

static int g_deterministic; /* --deterministic: dlt_ctx_set_deterministic on every context */
static int64_t g_cudnn_benchmark = -1; /* --cudnn-benchmark: -1 leaves the context's default */

/* --log: the library's messages (plan choices, plan-building time per context) on stderr */
static void log_to_stderr(int32_t level, const char *msg, void *user) {
    (void)user;
    fprintf(stderr, "[%s] %s\n", level <= DLT_LOG_WARNING ? "warning" : "info", msg);
}

static void run_cfg(int32_t device, const bench_cfg *c, int64_t classes, int steps, int blocks, int warmup,
                    result *r) {
    memset(r, 0, sizeof *r);
    dlt_ctx *ctx = NULL;
    dlt_dataset *ds = NULL;
    step_state s;
    memset(&s, 0, sizeof s);
    dlt_tensor **params = NULL;
    dlt_graph *g = NULL;
    dlt_event *e0 = NULL, *e1 = NULL;
    double times[64];
    dlt_status st;
#define RUN(call)                                                                             \
    do {                                                                                      \
        st = (call);                                                                          \
        if (st != DLT_OK) goto done;                                                          \
    } while (0)
    RUN(dlt_ctx_create(device, 0, DLT_ABI_VERSION, &ctx));
    RUN(dlt_ctx_set_seed(ctx, 0));
    RUN(dlt_ctx_set_deterministic(ctx, g_deterministic));
    if (g_cudnn_benchmark >= 0) RUN(dlt_ctx_set_cudnn_benchmark(ctx, (int32_t)g_cudnn_benchmark));
    s.ctx = ctx;
    s.amp = c->amp;
    /* 16 batches of resident data, cycled: the dataset stays small next to the model (peak
     * memory then compares with PyTorch's, which holds one batch) */
    RUN(dlt_synthetic_dataset_create(ctx, c->batch * 16, 10, 1, 0, &ds));
    RUN(dlt_loader_create(ds, c->batch, 1, 1, 0, &s.loader));
    RUN(dlt_loader_set_output(s.loader, c->amp, c->format, DLT_I64));
    double t0 = now_s();
    RUN(dlt_resnet50_create(ctx, classes, &s.model));
    r->params = dlt_module_param_count(s.model);
    if (c->format == DLT_FORMAT_CHANNELS_LAST) RUN(dlt_module_set_format(s.model, c->format));
    int32_t np = dlt_module_num_params(s.model);
    params = calloc((size_t)np, sizeof *params);
    RUN(dlt_module_params(s.model, params, np, NULL));
    RUN(dlt_sgd_create(params, np, 0.01, 0.0, 0.0, 0.0, 0, 0, &s.opt));
    RUN(dlt_grad_scaler_create(ctx, 65536.0, 2.0, 0.5, 2000, c->amp == DLT_F16, &s.scaler));
    RUN(dlt_tensor_zeros(ctx, DLT_F32, NULL, 0, 0, &s.loss_out));
    RUN(dlt_loader_start_epoch(s.loader, 0));
    RUN(train_step(&s));
    RUN(dlt_ctx_synchronize(ctx));
    r->first_s = now_s() - t0;
    for (int i = 1; i < warmup; i++) RUN(train_step(&s));
    /* BatchNorm plans still being built run our kernels: time the plans the run keeps */
    RUN(dlt_ctx_wait_plans(ctx));
    RUN(train_step(&s));
    if (c->graph) {
        RUN(dlt_graph_create(ctx, train_step, &s, 2, &g));
        r->captured = dlt_graph_is_captured(g);
        r->nodes = dlt_graph_num_nodes(g);
        graph_stats_read(g, &r->gs);
        RUN(dlt_graph_run(g));
    }
    if (getenv("DLT_BENCH_PROFILE")) { /* one step marked for Nsight: ncu --nvtx-include "profile_step/" */
        RUN(dlt_range_push(ctx, "profile_step"));
        RUN(c->graph ? dlt_graph_run(g) : train_step(&s));
        RUN(dlt_range_pop(ctx));
    }
    RUN(dlt_ctx_synchronize(ctx));
    RUN(dlt_memory_reset_peak(ctx));
    RUN(dlt_event_create(ctx, &e0));
    RUN(dlt_event_create(ctx, &e1));
    for (int b = 0; b < blocks && b < 64; b++) {
        RUN(dlt_event_record(e0));
        for (int i = 0; i < steps; i++) RUN(c->graph ? dlt_graph_run(g) : train_step(&s));
        RUN(dlt_event_record(e1));
        RUN(dlt_event_elapsed_ms(e0, e1, &times[b]));
        times[b] /= steps;
    }
    qsort(times, (size_t)blocks, sizeof times[0], cmp_d);
    r->ms = times[blocks / 2];
    uint64_t peak = 0;
    RUN(dlt_memory_stat(ctx, DLT_MEM_PEAK_ALLOCATED, &peak));
    r->peak_mib = peak / 1048576.0;
    r->peak_bytes = peak;
    RUN(dlt_tensor_item(s.loss_out, &r->loss));
done:
    r->status = st;
    if (st != DLT_OK) snprintf(r->err, sizeof r->err, "%s", dlt_last_error());
#undef RUN
    dlt_event_destroy(e0);
    dlt_event_destroy(e1);
    dlt_graph_destroy(g);
    dlt_tensor_release(s.loss_out);
    dlt_grad_scaler_destroy(s.scaler);
    dlt_optimizer_destroy(s.opt);
    free(params);
    dlt_module_destroy(s.model);
    dlt_loader_destroy(s.loader);
    dlt_dataset_destroy(ds);
    dlt_ctx_destroy(ctx);
}

/* One configuration's row of the record: what ran, the table's numbers, its interval. */
static void bench_config_record(const run_record *rec, cJSON *o, const bench_cfg *c, const result *r,
                                double t0, double t1) {
    rr_int(o, "batch", c->batch);
    rr_str(o, "precision", rr_precision_name(c->amp));
    rr_bool(o, "grad_scaler", c->amp == DLT_F16);
    rr_str(o, "memory_format", c->format == DLT_FORMAT_CHANNELS_LAST ? "nhwc" : "nchw");
    rr_str(o, "mode", c->graph ? "graph" : "eager");
    rr_bool(o, "captured", r->captured);
    rr_str(o, "status", r->status == DLT_OK ? "ok" : "failed");
    rr_str(o, "error", r->status == DLT_OK ? NULL : r->err);
    int ok = r->status == DLT_OK;
    rr_num(o, "ms_per_step", ok ? r->ms : NAN);
    rr_num(o, "throughput_per_s", ok ? c->batch * 1000.0 / r->ms : NAN);
    rr_num(o, "epoch_time_s", ok ? 50000.0 / c->batch * r->ms / 1000.0 : NAN);
    if (ok) rr_int(o, "peak_memory_bytes", (int64_t)r->peak_bytes);
    else rr_num(o, "peak_memory_bytes", NAN);
    rr_sec(o, "first_step_s", ok ? r->first_s : NAN);
    graph_stats_record(o, &r->gs);
    rr_num(o, "loss", ok ? r->loss : NAN);
    rr_sec(o, "t_start_s", run_record_time(rec, t0));
    rr_sec(o, "t_end_s", run_record_time(rec, t1));
}

/* ---- options (cli.h) ---- */

static const char *const DEVICE_NAMES[] = {"cuda", "cpu", NULL};
static const int32_t DEVICE_VALUES[] = {DLT_DEVICE_CUDA, DLT_DEVICE_CPU};

int main(int argc, char **argv) {
    cli_int_list batches = {{256}, 1};
    cli_pair_list amps = {{DLT_F16, DLT_BF16}, 2, {"fp16", "bf16"}, {DLT_F16, DLT_BF16}};
    cli_pair_list formats = {{DLT_FORMAT_CHANNELS_LAST}, 1, {"nhwc", "nchw"},
                           {DLT_FORMAT_CHANNELS_LAST, DLT_FORMAT_CONTIGUOUS}};
    cli_pair_list modes = {{0, 1}, 2, {"eager", "graph"}, {0, 1}};
    int64_t steps = 20, blocks = 5, warmup = 5, classes = 1000;
    int log = 0;
    const char *json = NULL; /* --json FILE: the run record */
    int32_t device = -1;
    const cli_option opts[] = {
        {"batch", CLI_CUSTOM, &batches, .parse = cli_parse_int_list, .metavar = "N,N",
         .help = "batch sizes, up to 8, each 1..65536 (256)"},
        {"amp", CLI_CUSTOM, &amps, .parse = cli_parse_pair_list, .metavar = "fp16,bf16",
         .help = "precisions (both)"},
        {"format", CLI_CUSTOM, &formats, .parse = cli_parse_pair_list, .metavar = "nhwc,nchw",
         .help = "memory formats (nhwc)"},
        {"mode", CLI_CUSTOM, &modes, .parse = cli_parse_pair_list, .metavar = "eager,graph",
         .help = "eager steps, one captured graph replayed, or both (both)"},
        {"steps", CLI_INT, &steps, .lo = 1, .hi = 100000, .metavar = "N", .help = "steps per timed block (20)"},
        {"blocks", CLI_INT, &blocks, .lo = 1, .hi = 64, .metavar = "N", .help = "timed blocks; the median counts (5)"},
        {"warmup", CLI_INT, &warmup, .lo = 1, .hi = 100000, .metavar = "N", .help = "steps before timing (5)"},
        {"classes", CLI_INT, &classes, .lo = 1, .hi = 100000, .metavar = "N", .help = "classifier outputs (1000)"},
        {"device", CLI_CHOICE, &device, .choices = DEVICE_NAMES, .values = DEVICE_VALUES,
         .help = "(cuda when present)"},
        {"deterministic", CLI_FLAG, &g_deterministic, .help = "dlt_ctx_set_deterministic on every context"},
        {"cudnn-benchmark", CLI_INT, &g_cudnn_benchmark, .lo = 0, .hi = 1, .metavar = "0|1",
         .help = "dlt_ctx_set_cudnn_benchmark on every context (the anchor's torch.backends.cudnn.benchmark "
                 "= True is 1; default: DLT_CUDNN_AUTOTUNE, unset: 0)"},
        {"log", CLI_FLAG, &log, .help = "the library's log messages on stderr"},
        {"json", CLI_STRING, &json, .metavar = "FILE",
         .help = "also write the run record (JSON, docs/run-record.md) to FILE"},
    };
    int rc = cli_parse(argc, argv, "bench", opts, (int)(sizeof opts / sizeof opts[0]));
    if (rc) return rc == 1 ? 0 : rc;
    if (log) dlt_set_log_callback(log_to_stderr, NULL);
    const int nb = batches.n, na = amps.n, nf = formats.n, nm = modes.n;
    if (json && run_record_check_path(json, "bench") != 0) return 1;
    run_record *rec = json ? run_record_begin("bench", argc, argv) : NULL;
    if (json && !rec) return fprintf(stderr, "bench: out of memory\n"), 1;
    int32_t ngpu = 0;
    if (dlt_cuda_device_count(&ngpu) != DLT_OK) ngpu = 0;
    if (device < 0) device = ngpu > 0 ? DLT_DEVICE_CUDA : DLT_DEVICE_CPU;
    dlt_gpu_monitor *mon = NULL; /* for the record: sampled over the whole run */
    if (rec && device == DLT_DEVICE_CUDA && dlt_gpu_monitor_start(0, 100, &mon) != DLT_OK) mon = NULL;
    cJSON *configs = NULL;
    if (rec) {
        cJSON *res = run_record_results(rec, "bench");
        rr_str(res, "sample_unit", "images");
        rr_int(res, "epoch_samples", 50000);
        configs = cJSON_AddArrayToObject(res, "configs");
    }
    int64_t params = -1;
    char name[256] = "cpu";
    dlt_ctx *probe = NULL;
    if (dlt_ctx_create(device, 0, DLT_ABI_VERSION, &probe) == DLT_OK) {
        if (dlt_ctx_device_name(probe, name, sizeof name) != DLT_OK) /* the label stays "cpu" */
            fprintf(stderr, "bench: %s\n", dlt_last_error());
        dlt_ctx_destroy(probe);
    }
    printf("# libdltrain %s bench on %s: resnet50 (%lld classes), 32x32, SGD lr 0.01; median of %d blocks "
           "of %d steps after %d warm-up steps%s%s\n",
           dlt_version_string(), name, (long long)classes, (int)blocks, (int)steps, (int)warmup,
           g_deterministic ? "; deterministic mode" : "",
           g_cudnn_benchmark == 1 ? "; cuDNN engines timed (cudnn_benchmark)" : "");
    printf("| %-5s | %-11s | %-6s | %-5s | %-8s | %-9s | %-12s | %-8s | %-12s | %-6s | %-8s |\n", "batch",
           "precision", "layout", "mode", "ms/step", "images/s", "epoch s (50k)", "peak MiB",
           "first step s", "nodes", "loss");
    printf("|-------|-------------|--------|-------|----------|-----------|---------------|----------|"
           "--------------|--------|----------|\n");
    int failed = 0;
    static graph_stats_lines glines;
    for (int ib = 0; ib < nb; ib++)
        for (int ia = 0; ia < na; ia++)
            for (int f = 0; f < nf; f++)
                for (int m = 0; m < nm; m++) {
                    bench_cfg c = {batches.v[ib], amps.v[ia], formats.v[f], modes.v[m]};
                    result r;
                    double t_cfg = run_record_mono_now();
                    run_cfg(device, &c, classes, (int)steps, (int)blocks, (int)warmup, &r);
                    if (rec) {
                        cJSON *o = cJSON_CreateObject();
                        cJSON_AddItemToArray(configs, o);
                        bench_config_record(rec, o, &c, &r, t_cfg, run_record_mono_now());
                    }
                    if (r.status == DLT_OK) params = r.params;
                    const char *prec = c.amp == DLT_F16 ? "fp16+scaler" : "bf16";
                    const char *lay = c.format == DLT_FORMAT_CHANNELS_LAST ? "nhwc" : "nchw";
                    const char *mode = c.graph ? (r.captured ? "graph" : "eager*") : "eager";
                    if (r.status != DLT_OK) {
                        failed++;
                        printf("| %-5lld | %-11s | %-6s | %-5s | failed: %s\n", (long long)c.batch, prec, lay,
                               mode, r.err);
                        continue;
                    }
                    printf("| %-5lld | %-11s | %-6s | %-5s | %8.3f | %9.0f | %13.2f | %8.0f | %12.2f | %6lld | %8.4f |\n",
                           (long long)c.batch, prec, lay, mode, r.ms, c.batch * 1000.0 / r.ms,
                           50000.0 / c.batch * r.ms / 1000.0, r.peak_mib, r.first_s, (long long)r.nodes,
                           r.loss);
                    fflush(stdout);
                    char label[96];
                    snprintf(label, sizeof label, "batch %lld, %s, %s", (long long)c.batch, prec, lay);
                    graph_stats_keep(&glines, label, &r.gs);
                }
    graph_stats_print(&glines);
    if (rec) {
        if (mon && dlt_gpu_monitor_stop(mon) != DLT_OK) fprintf(stderr, "bench: %s\n", dlt_last_error());
        cJSON *dev = run_record_add_device(rec, device, 0);
        run_record_device_monitor(rec, dev, mon);
        cJSON *w = run_record_workload(rec);
        rr_str(w, "model", "resnet50");
        if (params > 0) rr_int(w, "parameters", params);
        else rr_num(w, "parameters", NAN);
        rr_int(w, "classes", classes);
        rr_bool(w, "deterministic", g_deterministic);
        if (g_cudnn_benchmark >= 0) rr_bool(w, "cudnn_benchmark", (int)g_cudnn_benchmark);
        cJSON *ds = cJSON_AddObjectToObject(w, "dataset");
        rr_str(ds, "name", "synthetic (16 batches resident on the device)");
        rr_str(ds, "sample_unit", "images");
        cJSON *tm = cJSON_AddObjectToObject(w, "timing");
        rr_int(tm, "warmup_steps", warmup);
        rr_int(tm, "blocks", blocks);
        rr_int(tm, "steps_per_block", steps);
        rr_str(tm, "statistic", "median block");
        if (run_record_write(rec, json, "bench") != 0) failed++;
        else printf("run record: %s\n", json);
        run_record_free(rec);
        dlt_gpu_monitor_destroy(mon);
    }
    return failed ? 1 : 0;
}
