/*
 * report.h - what the examples print about a run: a progress bar on a terminal, a line per
 * epoch, and the closing table with the columns GPU-comparison tables use (epoch time,
 * images/s, GPU utilisation, peak memory, temperature, SM clock, throttling), the GPU
 * columns sampled by NVML in a background thread (n/a without NVML); with --json FILE also
 * the run record (run_record.h) holding the same numbers, per epoch, and the NVML series.
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
    double t_start; /* CLOCK_MONOTONIC seconds at the epoch's start */
} report_epoch_rec;

typedef struct report_run {
    report_epoch_rec ep[REPORT_MAX_EPOCHS];
    int n_ep;
    double first_step_s;
    int tty;
    double last_draw;
    void *monitor; /* dlt_gpu_monitor* or NULL */
    void *record;  /* run_record* (--json) or NULL */
} report_run;

/* What the run record says about the workload (the closing table's row, in full). */
typedef struct report_workload {
    const char *model;
    int64_t parameters, classes;
    int32_t amp; /* -1 off, DLT_F16, DLT_BF16 */
    int grad_scaler;
    int64_t batch, accum;
    const char *memory_format; /* "nchw" or "nhwc" */
    const char *mode;          /* how the step ran: "graph", "eager", ... (NULL: not written) */
    double lr, momentum;
    const char *dataset;   /* "cifar10" or "synthetic" */
    const char *data_path; /* NULL for synthetic data */
    int64_t train_samples;
    int64_t epochs, steps_limit;
    int32_t device_type, device_index;
} report_workload;

void report_init(report_run *r);
void report_fini(report_run *r);
/* Starts GPU sampling of CUDA device `device_index` (-1: none). */
void report_monitor_start(report_run *r, int32_t device_index);
void report_monitor_stop(report_run *r);
void report_progress(report_run *r, int64_t epoch, int64_t step, int64_t steps_per_epoch);
void report_progress_clear(report_run *r);
/* t_start: CLOCK_MONOTONIC seconds when the epoch began (the record's epoch interval). */
void report_epoch(report_run *r, int64_t epoch, int64_t steps, int64_t steps_per_epoch, int64_t images,
                  double seconds, uint64_t peak_bytes, double test_acc, double steady_seconds,
                  int64_t steady_steps, int64_t steady_images, double t_start);
void report_table(const report_run *r, const char *model, const char *device, int64_t batch, int32_t amp,
                  int64_t accum, int on_gpu);
/* gptex (issue 17), for examples/gpt_train.c: the closing table's GPU columns as text ("n/a"
 * when on_gpu is 0 or the monitor has no value), and the progress bar with a label of its own
 * ("iter 120/5000"). report_table and report_progress use them. */
typedef struct report_gpu_cols {
    char util[32], temp[32], temp_max[32], clock[32], power[32];
    const char *throttled;
} report_gpu_cols;
void report_gpu_columns(const report_run *r, int on_gpu, report_gpu_cols *c);
void report_progress_label(report_run *r, const char *what, int64_t done, int64_t total);
/* --json FILE: checks that FILE can be written and begins the run record (call at program
 * start; prints why on failure and returns -1). */
int report_record_begin(report_run *r, const char *path, const char *prog, int argc, char **argv);
/* Completes the record begun by report_record_begin (device, monitor, workload, the results
 * of report_table) and writes it atomically to path. 0, or -1 with a message on stderr. */
int report_record_write(const report_run *r, const report_workload *w, const char *path, const char *prog);

#endif
