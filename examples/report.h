/*
 * report.h - what the examples print about a run: a progress bar on a terminal, a line per
 * epoch, and the closing table with the columns GPU-comparison tables use (epoch time,
 * images/s, GPU utilisation, peak memory, temperature, SM clock, throttling), the GPU
 * columns sampled by NVML in a background thread (n/a without NVML).
 */
#ifndef DLT_EXAMPLES_REPORT_H
#define DLT_EXAMPLES_REPORT_H

#include <stdint.h>

#define REPORT_MAX_EPOCHS 1024

typedef struct report_epoch_rec {
    int64_t epoch, steps, steps_per_epoch, images;
    double seconds;
    uint64_t peak_bytes;
    double test_acc; /* < 0: not measured */
    /* the epoch without its first step (plan building), when it held the run's first step */
    double steady_seconds; /* < 0: not applicable */
    int64_t steady_steps, steady_images;
} report_epoch_rec;

typedef struct report_run {
    report_epoch_rec ep[REPORT_MAX_EPOCHS];
    int n_ep;
    double first_step_s;
    int tty;
    double last_draw;
    void *monitor; /* dlt_gpu_monitor* or NULL */
} report_run;

void report_init(report_run *r);
void report_fini(report_run *r);
/* Starts GPU sampling of CUDA device `device_index` (-1: none). */
void report_monitor_start(report_run *r, int32_t device_index);
void report_monitor_stop(report_run *r);
void report_progress(report_run *r, int64_t epoch, int64_t step, int64_t steps_per_epoch);
void report_progress_clear(report_run *r);
void report_epoch(report_run *r, int64_t epoch, int64_t steps, int64_t steps_per_epoch, int64_t images,
                  double seconds, uint64_t peak_bytes, double test_acc, double steady_seconds,
                  int64_t steady_steps, int64_t steady_images);
void report_table(const report_run *r, const char *model, const char *device, int64_t batch, int32_t amp,
                  int64_t accum, int on_gpu);
void report_json(const report_run *r, const char *model, const char *device, int64_t batch, int32_t amp,
                 int64_t accum);

#endif
