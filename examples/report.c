/*
 * report.c - progress bar, per-epoch lines, the closing comparison table and the run record
 * of the training examples. GPU columns come from dlt_gpu_monitor (NVML loaded at run time
 * and sampled in a background thread); without NVML they read "n/a".
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dltrain.h>
#include <dltrain/device.h>

#include "report.h"
#include "run_record.h"

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void report_init(report_run *r) {
    memset(r, 0, sizeof *r);
    r->first_step_s = -1;
    r->tty = isatty(STDERR_FILENO);
}

void report_fini(report_run *r) {
    dlt_gpu_monitor_destroy((dlt_gpu_monitor *)r->monitor);
    r->monitor = NULL;
    run_record_free((run_record *)r->record);
    r->record = NULL;
}

void report_monitor_start(report_run *r, int32_t device_index) {
    if (device_index < 0 || r->monitor) return;
    dlt_gpu_monitor *m = NULL;
    if (dlt_gpu_monitor_start(device_index, 200, &m) == DLT_OK) r->monitor = m;
}

void report_monitor_stop(report_run *r) {
    if (r->monitor && dlt_gpu_monitor_stop((dlt_gpu_monitor *)r->monitor) != DLT_OK)
        fprintf(stderr, "monitor: %s\n", dlt_last_error());
}

void report_progress_label(report_run *r, const char *what, int64_t done, int64_t total) {
    if (!r->tty || total <= 0) return;
    double t = mono_s();
    if (done < total && t - r->last_draw < 0.1) return;
    r->last_draw = t;
    const int width = 30;
    int filled = (int)(width * done / total);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r[%s] %s  %lld/%lld", bar, what, (long long)done, (long long)total);
    fflush(stderr);
}

void report_progress(report_run *r, int64_t epoch, int64_t step, int64_t steps_per_epoch) {
    char what[48];
    snprintf(what, sizeof what, "epoch %lld", (long long)epoch);
    report_progress_label(r, what, step, steps_per_epoch);
}

void report_progress_clear(report_run *r) {
    if (!r->tty || r->last_draw == 0) return;
    fprintf(stderr, "\r%60s\r", "");
    fflush(stderr);
    r->last_draw = 0;
}

void report_epoch(report_run *r, int64_t epoch, int64_t steps, int64_t steps_per_epoch, int64_t images,
                  double seconds, uint64_t peak_bytes, double test_acc, double steady_seconds,
                  int64_t steady_steps, int64_t steady_images, double t_start) {
    printf("epoch %lld: %lld steps in %.2f s, %.0f images/s, peak memory %.1f MiB", (long long)epoch,
           (long long)steps, seconds, images / seconds, peak_bytes / 1048576.0);
    if (steady_seconds > 0)
        printf(" (after the first step: %lld steps in %.2f s, %.0f images/s)", (long long)steady_steps,
               steady_seconds, steady_images / steady_seconds);
    if (test_acc >= 0) printf(", test accuracy %.2f%%", 100.0 * test_acc);
    printf("\n");
    fflush(stdout);
    if (r->n_ep >= REPORT_MAX_EPOCHS) return;
    report_epoch_rec *e = &r->ep[r->n_ep++];
    e->epoch = epoch;
    e->steps = steps;
    e->steps_per_epoch = steps_per_epoch;
    e->images = images;
    e->seconds = seconds;
    e->peak_bytes = peak_bytes;
    e->test_acc = test_acc;
    e->steady_seconds = steady_seconds;
    e->steady_steps = steady_steps;
    e->steady_images = steady_images;
    e->t_start = t_start;
}

/* Epoch time: the mean of the full epochs after the first (which includes plan building and
 * warm-up); with a single or partial epoch, the per-step time scaled to a full epoch. */
static void summarise(const report_run *r, double *epoch_s, int *estimated, double *img_s,
                      uint64_t *peak, double *acc) {
    double t = 0, imgs = 0;
    int n = 0;
    *peak = 0;
    *acc = -1;
    for (int i = 0; i < r->n_ep; i++) {
        if (r->ep[i].peak_bytes > *peak) *peak = r->ep[i].peak_bytes;
        if (r->ep[i].test_acc >= 0) *acc = r->ep[i].test_acc;
    }
    for (int i = 1; i < r->n_ep; i++)
        if (r->ep[i].steps == r->ep[i].steps_per_epoch) {
            t += r->ep[i].seconds;
            imgs += r->ep[i].images;
            n++;
        }
    *estimated = 0;
    if (n > 0) {
        *epoch_s = t / n;
        *img_s = imgs / t;
        return;
    }
    if (r->n_ep == 0) {
        *epoch_s = *img_s = NAN;
        return;
    }
    const report_epoch_rec *e = &r->ep[r->n_ep - 1];
    if (e->steady_seconds > 0 && e->steady_steps > 0) {
        /* a single epoch: leave out the first step (plan building, warm-up) and scale */
        *img_s = e->steady_images / e->steady_seconds;
        *epoch_s = e->steady_seconds / e->steady_steps * e->steps_per_epoch;
        *estimated = 1;
        return;
    }
    *img_s = e->images / e->seconds;
    *epoch_s = e->seconds / e->steps * e->steps_per_epoch;
    *estimated = e->steps != e->steps_per_epoch;
}

static void mon_fmt(const report_run *r, int32_t key, const char *fmt, char *buf, size_t n) {
    double v;
    if (r->monitor && dlt_gpu_monitor_double((const dlt_gpu_monitor *)r->monitor, key, &v) == DLT_OK)
        snprintf(buf, n, fmt, v);
    else
        snprintf(buf, n, "n/a");
}

static const char *throttle_str(const report_run *r) {
    int64_t avail = 0, th = 0, pw = 0;
    const dlt_gpu_monitor *m = (const dlt_gpu_monitor *)r->monitor;
    if (!m || dlt_gpu_monitor_int(m, DLT_GPUMON_AVAILABLE, &avail) != DLT_OK || !avail) return "n/a";
    if (dlt_gpu_monitor_int(m, DLT_GPUMON_THERMAL_THROTTLE, &th) != DLT_OK) th = -1;
    if (dlt_gpu_monitor_int(m, DLT_GPUMON_POWER_THROTTLE, &pw) != DLT_OK) pw = -1;
    if (th < 0 && pw < 0) return "n/a";
    if (th > 0 && pw > 0) return "thermal+power";
    if (th > 0) return "thermal";
    if (pw > 0) return "power";
    return "no";
}

void report_gpu_columns(const report_run *r, int on_gpu, report_gpu_cols *c) {
    if (!on_gpu) {
        snprintf(c->util, sizeof c->util, "n/a");
        snprintf(c->temp, sizeof c->temp, "n/a");
        snprintf(c->temp_max, sizeof c->temp_max, "n/a");
        snprintf(c->clock, sizeof c->clock, "n/a");
        snprintf(c->power, sizeof c->power, "n/a");
        c->throttled = "n/a";
        return;
    }
    mon_fmt(r, DLT_GPUMON_GPU_UTIL_MEAN, "%.0f", c->util, sizeof c->util);
    mon_fmt(r, DLT_GPUMON_TEMP_MEAN_C, "%.0f", c->temp, sizeof c->temp);
    mon_fmt(r, DLT_GPUMON_TEMP_MAX_C, "%.0f", c->temp_max, sizeof c->temp_max);
    mon_fmt(r, DLT_GPUMON_SM_CLOCK_MEAN_MHZ, "%.0f", c->clock, sizeof c->clock);
    mon_fmt(r, DLT_GPUMON_POWER_MEAN_W, "%.0f", c->power, sizeof c->power);
    c->throttled = throttle_str(r);
}

void report_table(const report_run *r, const char *model, const char *device, int64_t batch, int32_t amp,
                  int64_t accum, int on_gpu) {
    double epoch_s, img_s, acc;
    int est;
    uint64_t peak;
    summarise(r, &epoch_s, &est, &img_s, &peak, &acc);
    report_gpu_cols g;
    report_gpu_columns(r, 1, &g);
    char *util = g.util, *temp_m = g.temp, *temp_x = g.temp_max, *clk = g.clock, *pw = g.power, ep[48];
    snprintf(ep, sizeof ep, "%.2f%s", epoch_s, est ? " (est.)" : "");
    char mem[32];
    snprintf(mem, sizeof mem, "%.0f", peak / 1048576.0);
    char prec[48];
    snprintf(prec, sizeof prec, "%s, batch %lld%s", amp == DLT_F16 ? "fp16+scaler" : amp == DLT_BF16 ? "bf16" : "fp32",
             (long long)batch, accum > 1 ? ", accum" : "");
    if (accum > 1) snprintf(prec + strlen(prec), sizeof prec - strlen(prec), " %lld", (long long)accum);
    printf("\n| %-9s | %-22s | %-26s | %-14s | %-8s | %-13s | %-14s | %-9s | %-14s | %-9s | %-9s |\n",
           "model", "GPU", "precision", "epoch time (s)", "images/s", "GPU util (%)", "peak mem (MiB)",
           "temp (C)", "temp max (C)", "SM MHz", "throttled");
    printf("|-----------|------------------------|----------------------------|----------------|----------|"
           "---------------|----------------|-----------|----------------|-----------|-----------|\n");
    printf("| %-9s | %-22.22s | %-26s | %-14s | %-8.0f | %-13s | %-14s | %-9s | %-14s | %-9s | %-9s |\n", model,
           device, prec, ep, img_s, on_gpu ? util : "n/a", mem, on_gpu ? temp_m : "n/a", on_gpu ? temp_x : "n/a",
           on_gpu ? clk : "n/a", on_gpu ? throttle_str(r) : "n/a");
    printf("first step after start: %.2f s; mean board power: %s W", r->first_step_s, on_gpu ? pw : "n/a");
    if (acc >= 0) printf("; last test accuracy: %.2f%%", 100 * acc);
    printf("\n");
    fflush(stdout);
}

int report_record_begin(report_run *r, const char *path, const char *prog, int argc, char **argv) {
    if (run_record_check_path(path, prog) != 0) return -1;
    r->record = run_record_begin(prog, argc, argv);
    if (!r->record) fprintf(stderr, "%s: cannot start the run record: out of memory\n", prog);
    return r->record ? 0 : -1;
}

int report_record_write(const report_run *r, const report_workload *w, const char *path, const char *prog) {
    run_record *rec = r->record;
    if (!rec) return -1;
    cJSON *dev = run_record_add_device(rec, w->device_type, w->device_index);
    run_record_device_monitor(rec, dev, (const dlt_gpu_monitor *)r->monitor);

    cJSON *wl = run_record_workload(rec);
    rr_str(wl, "model", w->model);
    rr_int(wl, "parameters", w->parameters);
    rr_int(wl, "classes", w->classes);
    rr_str(wl, "precision", rr_precision_name(w->amp));
    rr_bool(wl, "grad_scaler", w->grad_scaler);
    rr_int(wl, "batch", w->batch);
    rr_int(wl, "accumulation", w->accum);
    rr_str(wl, "memory_format", w->memory_format);
    if (w->mode) rr_str(wl, "mode", w->mode);
    cJSON *opt = cJSON_AddObjectToObject(wl, "optimizer");
    rr_str(opt, "name", "sgd");
    rr_num(opt, "lr", w->lr);
    rr_num(opt, "momentum", w->momentum);
    cJSON *ds = cJSON_AddObjectToObject(wl, "dataset");
    rr_str(ds, "name", w->dataset);
    rr_str(ds, "path", w->data_path);
    rr_int(ds, "train_samples", w->train_samples);
    rr_str(ds, "sample_unit", "images");
    rr_int(wl, "epochs_requested", w->epochs);
    rr_int(wl, "steps_limit", w->steps_limit);

    /* the closing table's numbers, then every epoch */
    double epoch_s, img_s, acc;
    int est;
    uint64_t peak;
    summarise(r, &epoch_s, &est, &img_s, &peak, &acc);
    cJSON *res = run_record_results(rec, "training");
    rr_str(res, "sample_unit", "images");
    rr_num(res, "epoch_time_s", epoch_s); /* unrounded: the table prints it */
    rr_bool(res, "epoch_time_estimated", est);
    rr_num(res, "throughput_per_s", img_s);
    rr_num(res, "first_step_s", r->first_step_s >= 0 ? r->first_step_s : NAN);
    if (r->n_ep > 0) rr_int(res, "peak_memory_bytes", (int64_t)peak);
    else rr_num(res, "peak_memory_bytes", NAN);
    rr_num(res, "test_accuracy", acc >= 0 ? acc : NAN);
    cJSON *eps = cJSON_AddArrayToObject(res, "epochs");
    for (int i = 0; i < r->n_ep && eps; i++) {
        const report_epoch_rec *e = &r->ep[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        cJSON_AddItemToArray(eps, o);
        rr_int(o, "epoch", e->epoch);
        rr_int(o, "steps", e->steps);
        rr_int(o, "steps_per_epoch", e->steps_per_epoch);
        rr_int(o, "samples", e->images);
        rr_sec(o, "seconds", e->seconds);
        rr_sec(o, "t_start_s", run_record_time(rec, e->t_start));
        rr_sec(o, "t_end_s", run_record_time(rec, e->t_start + e->seconds));
        rr_int(o, "peak_memory_bytes", (int64_t)e->peak_bytes);
        rr_num(o, "test_accuracy", e->test_acc >= 0 ? e->test_acc : NAN);
        rr_sec(o, "steady_seconds", e->steady_seconds > 0 ? e->steady_seconds : NAN);
        rr_int(o, "steady_steps", e->steady_steps);
        rr_int(o, "steady_samples", e->steady_images);
    }
    return run_record_write(rec, path, prog);
}
