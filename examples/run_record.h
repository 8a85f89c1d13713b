/*
 * run_record.h - the versioned JSON record of one run (--json FILE in the examples): what
 * ran (program, arguments, library and CUDA library versions, host), on what (each device's
 * properties, measured bandwidth and GEMM rates where measured, the NVML monitor's summary
 * and sample series), the workload (model, parameters, precision, batch, accumulation,
 * dataset) and the results. docs/run-record.md documents the schema,
 * docs/run-record.schema.json states it, scripts/check_record.py checks a record against it
 * and scripts/report.py turns several records into the comparison report.
 *
 * A small builder over cJSON, shared by every example (the GPT example calls the same):
 *
 *   run_record *rec = run_record_begin("bench", argc, argv);    // at program start
 *   cJSON *dev = run_record_add_device(rec, DLT_DEVICE_CUDA, 0); // properties, versions
 *   ... run, with a dlt_gpu_monitor sampling ...
 *   run_record_device_monitor(rec, dev, mon);                    // summary + series
 *   cJSON *w = run_record_workload(rec);  rr_str(w, "model", "resnet50"); ...
 *   cJSON *res = run_record_results(rec, "training"); ...
 *   run_record_write(rec, path);  run_record_free(rec);
 *
 * Times: "started_utc" is the wall clock at run_record_begin; every other time in the record
 * ("*_s" offsets, the series' "t_s") is seconds since then on CLOCK_MONOTONIC
 * (run_record_time converts a monotonic reading). Values that are not known are written as
 * null, never guessed.
 */
#ifndef DLT_EXAMPLES_RUN_RECORD_H
#define DLT_EXAMPLES_RUN_RECORD_H

#include <stdint.h>

#include <cJSON.h>
#include <dltrain.h>

#define RUN_RECORD_SCHEMA "libdltrain-run-record"
#define RUN_RECORD_SCHEMA_VERSION 1

typedef struct run_record run_record;

/* Starts a record: schema, program name and arguments, start time, host, library version.
 * NULL only when out of memory. */
run_record *run_record_begin(const char *program, int argc, char **argv);
void run_record_free(run_record *r);
/* The root object, for fields the helpers below do not cover. */
cJSON *run_record_root(run_record *r);

/* CLOCK_MONOTONIC now, in seconds (the clock the examples time with). */
double run_record_mono_now(void);
/* A CLOCK_MONOTONIC reading as seconds since the record began. */
double run_record_time(const run_record *r, double mono_s);

/* Appends a device to "devices": DLT_DEVICE_CUDA with its CUDA ordinal (properties from
 * dlt_device_info_get; the CUDA, cuDNN and cuBLAS versions go to "software"), or
 * DLT_DEVICE_CPU (index ignored: the host's processor model, logical CPUs, memory). A CUDA
 * device that cannot be read gets "error" with the library's message. Returns the device
 * object (to add "measured" and "monitor"), NULL when out of memory. */
cJSON *run_record_add_device(run_record *r, int32_t device_type, int32_t index);
/* Writes dev's "monitor": availability (and why not), interval, its time span in the
 * record's time base, every summary key by the library's names (null where the monitor has
 * no value) and the sample series, one array per field (null where NVML gave no value).
 * mon may be NULL (a device without a monitor: "monitor" is null). */
void run_record_device_monitor(run_record *r, cJSON *dev, const dlt_gpu_monitor *mon);
/* The "workload" object (created on first use). */
cJSON *run_record_workload(run_record *r);
/* The "results" object (created on first use) with "kind" set: "training", "bench" or
 * "device_report". */
cJSON *run_record_results(run_record *r, const char *kind);

/* Adds key: v to object o. Non-finite numbers and NULL strings become null. */
void rr_num(cJSON *o, const char *key, double v);
void rr_int(cJSON *o, const char *key, int64_t v);
void rr_str(cJSON *o, const char *key, const char *s);
void rr_bool(cJSON *o, const char *key, int v);
/* A time in seconds, rounded to the microsecond. */
void rr_sec(cJSON *o, const char *key, double seconds);
/* "fp16", "bf16" or "fp32" for an autocast dtype (-1: off). */
const char *rr_precision_name(int32_t amp);

/* Checks early (before a long run) that a record can be written at path: its directory
 * exists and is writable, and path is not a directory. 0, or -1 with a message on stderr. */
int run_record_check_path(const char *path, const char *prog);
/* Sets "finished_utc" and "duration_s", then writes the record to path atomically (a
 * temporary file in the same directory, fsync, rename, fsync of the directory): path holds
 * either the old content or the whole record. Returns 0, or -1 with a message on stderr
 * naming prog and the path. */
int run_record_write(run_record *r, const char *path, const char *prog);

#endif
