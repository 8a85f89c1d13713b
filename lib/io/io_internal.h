/*
 * io_internal.h - the safetensors reader and writer shared by lib/io/safetensors.c (the
 * reader and the public file handle), lib/io/safetensors_write.c (the writer) and
 * lib/io/checkpoint.c / lib/io/module_load.c (module and training checkpoints).
 *
 * Reading: dlt__safetensors_open reads the 8-byte length and the JSON header of a file,
 * and validates them against the file's size (header length, JSON, names, dtypes, shapes,
 * offsets inside the file and tiling its data section exactly, duplicates, control
 * characters) before anything uses them; no data byte is read then. Tensors are read later,
 * one entry at a time, with pread on the descriptor the file was opened with (the file is
 * not replaced under a reader that keeps it open). A hostile file costs at most the header
 * limit in memory and never a read outside the file.
 *
 * Writing: dlt__safetensors_write takes entries whose bytes come either from host memory
 * or from a tensor (any context and format; fetched in logical order), builds the header
 * with cJSON, writes an exclusively created temporary file beside path, fsyncs it and
 * renames it over path.
 */
#ifndef DLT_IO_INTERNAL_H
#define DLT_IO_INTERNAL_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* safetensors dtypes beyond the library's own DLT_F32..DLT_U8 (readable and writable as
 * host scalars, never as tensors). */
#define DLT__ST_F64 100
#define DLT__ST_OTHER 101 /* a valid safetensors dtype libdltrain has no tensor type for */

/* Largest header accepted (the safetensors library's own limit). */
#define DLT__ST_MAX_HEADER ((uint64_t)100000000)

typedef struct dlt__st_entry {
    const char *name;  /* NUL-terminated, owned by the file */
    int32_t dtype;     /* DLT_F32.., DLT__ST_F64 or DLT__ST_OTHER */
    char dtype_name[12];
    int32_t ndim;
    int64_t shape[DLT_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* byte offsets within the data section */
} dlt__st_entry;

typedef struct dlt__st_file {
    int fd;               /* the open file (-1 when none) */
    char *path;           /* for messages */
    uint64_t data_offset; /* of the data section in the file: 8 + header length */
    int32_t n;
    dlt__st_entry *e;     /* in header order */
    int32_t *by_name;     /* indices of e sorted by name (lookups) */
    int32_t n_meta;
    const char **meta;    /* n_meta (key, value) pairs of "__metadata__", in header order */
    char *strings;        /* storage of every name, key and value */
} dlt__st_file;

/* Opens path and validates its header (see above). DLT_ERR_IO when it cannot be opened or
 * read or is not a regular file, DLT_ERR_FORMAT (message naming the file and the problem)
 * for a bad header, out of memory. On failure *out is empty. */
dlt_status dlt__safetensors_open(const char *path, const char *func, dlt__st_file *out);
/* Reads entry e's bytes (e->end - e->begin of them) into dst. DLT_ERR_IO when the file
 * cannot be read or has shrunk since it was opened. */
dlt_status dlt__safetensors_read_entry(const dlt__st_file *f, const dlt__st_entry *e, void *dst,
                                       const char *func);
/* The file behind a public handle (lib/io/safetensors.c). */
const dlt__st_file *dlt__safetensors_file(const dlt_safetensors *f);
/* Index of the entry named name, or -1. */
int32_t dlt__safetensors_find(const dlt__st_file *f, const char *name);
void dlt__safetensors_free(dlt__st_file *f);

/* safetensors name of a dtype code ("F32", ..., "F64"), NULL for an unknown code. */
const char *dlt__st_dtype_name(int32_t dtype);
/* Size in bytes of one element of a dtype code (0 for an unknown code). */
uint32_t dlt__st_dtype_size(int32_t dtype);
/* 1 when s is a name both readers of a file agree on: valid UTF-8 without control
 * characters (C0, DEL, C1). Used for tensor names and metadata keys, read and written. */
int dlt__st_name_ok(const char *s);

/* One tensor to write: bytes from `host` (logical row-major order, little-endian) or, when
 * host is NULL, from `tensor`. dtype/shape describe the host bytes (taken from the tensor
 * when it is the source). */
typedef struct dlt__st_out {
    const char *name;
    const dlt_tensor *tensor;
    const void *host;
    int32_t dtype;
    int32_t ndim;
    int64_t shape[DLT_MAX_DIMS];
} dlt__st_out;

/* Writes n entries atomically to path (see above). Data are ordered by element size
 * (largest first, so every tensor is aligned in the file as the safetensors library lays
 * them out), then by the given order. Synchronises with the tensors' contexts. */
dlt_status dlt__safetensors_write(const char *path, const dlt__st_out *e, int32_t n,
                                  const char *func);
/* Writes n bytes to path the same way (exclusive temporary beside it, fsync, rename, directory
 * fsync): config files beside a checkpoint. */
dlt_status dlt__write_bytes_atomic(const char *path, const void *data, size_t n, const char *func);

/* The module half of a load (lib/io/module_load.c), shared by dlt_module_load(_ex),
 * dlt_module_load_safetensors and dlt_checkpoint_load: matches the module's state entries
 * with the file's under the prefixes, and either refuses (strict, or any mismatch in
 * dtype/shape when strict) or plans the copies. Training entries ("optimizer.", "scaler.",
 * "train.") are never unexpected. */
typedef struct dlt__load_op {
    dlt_tensor *dst;              /* module entry, or NULL for a momentum buffer */
    const dlt__st_entry *src;
    void *host;                   /* the entry's bytes, read before anything changes */
    dlt_tensor *staged;           /* on dst's context when a conversion is needed, else NULL */
    int32_t opt_index;            /* >= 0: optimizer state of parameter opt_index... */
    int32_t opt_slot;             /* ...which tensor: dlt__optimizer_set_state_tensor's slot */
} dlt__load_op;

typedef struct dlt__load_plan {
    dlt__load_op *ops;
    int32_t n, cap;
} dlt__load_plan;

dlt_status dlt__plan_add(dlt__load_plan *p, const dlt__st_file *f, dlt_tensor *dst,
                         const dlt__st_entry *src, int32_t opt_index, int stage, dlt_ctx *ctx,
                         const char *func);
void dlt__plan_free(dlt__load_plan *p);
/* Checks that file entry e can be loaded into t: DLT_ERR_DTYPE / DLT_ERR_SHAPE naming the
 * tensor (name) and the file. */
dlt_status dlt__check_entry(const dlt__st_entry *e, const dlt_tensor *t, const char *name,
                            const char *path, const char *func);

/* Plans the module part of a load (strict: every module entry under module_prefix found,
 * every considered file entry used, dtypes and shapes equal; else those are skipped and
 * listed in *report when report is not NULL). */
dlt_status dlt__plan_module(dlt_module *m, const dlt__st_file *f, int32_t strict,
                            const char *file_prefix, const char *module_prefix,
                            dlt__load_plan *plan, dlt_load_report **report, const char *func);
/* Writes the planned copies into the module (and, for momentum-buffer ops, the optimizer,
 * whose buffers absent from the plan are emptied). */
dlt_status dlt__commit(dlt_module *m, dlt_optimizer *opt, dlt__load_plan *plan, const char *func);

#ifdef __cplusplus
}
#endif
#endif
