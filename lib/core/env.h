/*
 * env.h - every environment variable the library reads, in one table (env.c: name, type,
 * default, meaning). A context reads the table once, when it is created, into dlt_ctx.env;
 * changing a variable later affects contexts created later. The GPU monitor, which has no
 * context, reads its one variable (DLT_NVML_LIBRARY) when it starts; communicators read
 * theirs and the launchers' variables when they are created. Nothing else in lib/ or cuda/
 * calls getenv. docs/environment.md lists the same rows; the env_docs test checks
 * the two against each other and test_env checks how values are read.
 */
#ifndef DLT_CORE_ENV_H
#define DLT_CORE_ENV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The variables, in table order. */
typedef enum dlt__env_id {
    DLT__ENV_CONV_IMPL = 0,
    DLT__ENV_BN_IMPL,
    DLT__ENV_BN_NATIVE_MAX,
    DLT__ENV_BN_NATIVE_MAX_BWD,
    DLT__ENV_BN_ONE_KERNEL,
    DLT__ENV_BN_CUDNN_RUNNING_STATS,
    DLT__ENV_BN_ASYNC_PLANS,
    DLT__ENV_BN_PLAN_THREADS,
    DLT__ENV_CUDNN_AUTOTUNE,
    DLT__ENV_GEMM_AUTOTUNE,
    DLT__ENV_CONV_GEMM,
    DLT__ENV_CONV_PAD_CHANNELS,
    DLT__ENV_WORKSPACE_MAX,
    DLT__ENV_GRAD_QUEUE_MAX,
    DLT__ENV_GRAPH_ARENA,
    DLT__ENV_SIDE_STREAM,
    DLT__ENV_NVML_LIBRARY,
    /* dist: read when a communicator is created (lib/dist/comm.c, cuda/nccl.c) */
    DLT__ENV_NCCL_LIBRARY,
    DLT__ENV_DIST_TIMEOUT,
    DLT__ENV_MASTER_PORT,
    DLT__ENV_N
} dlt__env_id;

/* How a variable's text becomes its value. */
typedef enum dlt__env_type {
    DLT__ENV_IMPL = 0, /* "cudnn" -> DLT_IMPL_CUDNN, "native" -> DLT_IMPL_NATIVE, else auto */
    DLT__ENV_COUNT,    /* a decimal integer >= lo (trailing text ignored), at most hi;
                        * anything else: the default */
    DLT__ENV_ON,       /* on unless the text is exactly "0" */
    DLT__ENV_OFF,      /* off unless the text is exactly "1" */
    DLT__ENV_PATH,     /* a path; unset or empty: the default text */
    DLT__ENV_TEXT      /* read as text when used (dlt__env_text), checked by its reader */
} dlt__env_type;

/* Implementation choices (DLT__ENV_IMPL values). */
#define DLT_IMPL_AUTO 0
#define DLT_IMPL_CUDNN 1
#define DLT_IMPL_NATIVE 2

typedef struct dlt__env_var {
    const char *name;
    int32_t type;            /* dlt__env_type */
    int32_t dflt_from;       /* >= 0: the default is that variable's value; -1: dflt */
    int64_t dflt, lo, hi;    /* numeric default and, for counts, the accepted range */
    const char *values;      /* the values and the default as docs/environment.md shows them */
    const char *meaning;
} dlt__env_var;

/* The table (DLT__ENV_N rows, in dlt__env_id order). */
extern const dlt__env_var dlt__env_table[DLT__ENV_N];

/* The values a context works with (PATH rows hold 0: read with dlt__env_path). */
typedef struct dlt__env {
    int64_t v[DLT__ENV_N];
} dlt__env;

/* Reads every numeric variable of the table into *out (a context's creation). */
void dlt__env_read(dlt__env *out);
/* The value of one variable's text under its row's rules, dflt when the text is NULL (unset)
 * or not a value of the row's type. */
int64_t dlt__env_parse(dlt__env_id id, const char *text, int64_t dflt);
/* A PATH variable: its text, or the row's default when unset or empty; copied into buf
 * (truncated to n - 1 bytes). Returns buf. */
const char *dlt__env_path(dlt__env_id id, char *buf, size_t n);
/* A TEXT variable's text now, NULL when unset. */
const char *dlt__env_text(dlt__env_id id);
/* A variable another program sets for us (launchers: RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT, Open MPI's OMPI_COMM_WORLD_*, TORCHELASTIC_USE_AGENT_STORE;
 * docs/environment.md's launcher table), NULL when unset. Not for DLT_* names. */
const char *dlt__env_launcher(const char *name);

#ifdef __cplusplus
}
#endif
#endif
