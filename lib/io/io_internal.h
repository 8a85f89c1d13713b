/*
 * io_internal.h - the safetensors reader and writer shared by lib/io/checkpoint.c (module
 * and training checkpoints) and lib/io/safetensors.c (the format itself).
 *
 * Reading: dlt__safetensors_parse validates a whole file image (header length, JSON,
 * dtypes, shapes, sizes, offsets, duplicate names) before anything uses it, and never reads
 * outside the buffer; it is the function a fuzzer drives. Entries keep pointers into the
 * buffer, so the buffer must outlive the parsed file.
 *
 * Writing: dlt__safetensors_write takes entries whose bytes come either from host memory
 * or from a tensor (any context and format; fetched in logical order), writes
 * "<path>.tmp-<pid>", fsyncs it and renames it over path.
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
    const unsigned char *data; /* = data section + begin */
} dlt__st_entry;

typedef struct dlt__st_file {
    unsigned char *owned; /* the file image when read from a path (freed by _free) */
    size_t size;
    int32_t n;
    dlt__st_entry *e;  /* in header order */
    int32_t *by_name;  /* indices of e sorted by name (lookups) */
    char *names;       /* storage of every name */
} dlt__st_file;

/* Parses and validates a safetensors image of `size` bytes. On failure returns
 * DLT_ERR_FORMAT (or out of memory) with a message naming the problem, prefixed by func,
 * and leaves *out empty. */
dlt_status dlt__safetensors_parse(const void *buf, size_t size, const char *func,
                                  dlt__st_file *out);
/* Reads path into memory and parses it. DLT_ERR_IO when it cannot be read. */
dlt_status dlt__safetensors_read(const char *path, const char *func, dlt__st_file *out);
/* Index of the entry named name, or -1. */
int32_t dlt__safetensors_find(const dlt__st_file *f, const char *name);
void dlt__safetensors_free(dlt__st_file *f);

/* safetensors name of a dtype code ("F32", ..., "F64"), NULL for an unknown code. */
const char *dlt__st_dtype_name(int32_t dtype);

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

#ifdef __cplusplus
}
#endif
#endif
