/*
 * data_internal.h - the dataset and loader objects of lib/data and the helpers its readers
 * share. The per-sample math both backends run (shuffle keys, augmentation draws, pixel
 * values, token windows) and the gather's launch structs are the kernel contract's
 * (lib/kernel/data.h); lib/cpu and cuda/ include that, never this header.
 */
#ifndef DLT_DATA_INTERNAL_H
#define DLT_DATA_INTERNAL_H

#include "../core/internal.h"
#include "../core/files.h"
#include "../kernel/data.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest synthetic class count (labels are int32, names are kept per class). */
#define DLT_DATA_MAX_CLASSES 65536
/* Largest height or width of an image record. */
#define DLT_DATA_MAX_SIDE 65536

/* What one sample of a dataset is. image = 1: uint8 [C, H, W] pictures, which loaders
 * turn into floats by ToTensor (byte / 255), with Normalize and augmentation available;
 * image = 0: elements of dtype (f32/f16/bf16/u8) that loaders copy or convert as they are. */
typedef struct dlt_data_sample {
    int32_t dtype;
    int32_t image;
    int32_t ndim;                  /* dims of one sample, 0..DLT_MAX_DIMS-1 */
    int64_t shape[DLT_MAX_DIMS];
} dlt_data_sample;

struct dlt_dataset {
    dlt_ctx *ctx;
    int64_t count;
    int32_t num_classes;  /* 0: no labels */
    dlt_data_sample sample;
    int64_t sample_numel;
    size_t record_bytes;  /* bytes of one sample */
    dlt_tensor *images;   /* the records: dtype [count, *sample.shape] */
    dlt_tensor *labels;   /* i32 [count], or NULL */
    char **names;         /* num_classes NUL-terminated names (one host block), or NULL */
};

struct dlt_loader {
    dlt_dataset *ds;
    dlt_ctx *ctx;
    int64_t batch_size;
    int32_t shuffle, drop_last;
    uint64_t seed;
    int64_t num_batches; /* per epoch */
    int64_t last_rows;   /* rows of the final batch (batch_size unless partial) */

    int32_t dtype, format, label_dtype;
    int32_t normalize;
    float mean[DLT_DATA_MAX_CHANNELS], std[DLT_DATA_MAX_CHANNELS];
    int32_t crop_pad, hflip;

    /* device state: reused every step so a captured step keeps its addresses */
    dlt_tensor *perm;       /* i32 [count] when shuffling, else NULL */
    dlt_tensor *cursor;     /* i64 [2] holding a dlt_data_cursor */
    dlt_tensor *x, *y;      /* full batch buffers (y NULL without labels) */
    dlt_tensor *x_last, *y_last; /* views of the first last_rows rows (partial batch only) */

    /* host-side position, in step with the device cursor for eager use */
    int64_t epoch;   /* current epoch (valid when started) */
    int64_t batch;   /* next batch of the epoch */
    int32_t started; /* an epoch has been set up */
    int32_t ended;   /* the end of the epoch was reported (has_batch = 0) */

    /* dist (lib/dist/sampler.c): DistributedSampler. With num_replicas > 1, perm holds the
     * rank's shard of each epoch (num_samples entries) and the augmentation is keyed by the
     * position in the whole padded epoch. */
    int32_t num_replicas, rank, dist_drop_last;
    int64_t num_samples; /* samples per epoch: the shard's, else the dataset's count */
};

/* dist: replaces the views of the final partial batch for a new row count (the sampler's
 * shard changes it); nothing changes on failure. */
dlt_status dlt__loader_partial_views(dlt_loader *ld, int64_t last_rows, const char *func);

/* Dataset objects (lib/data/loader.c). dlt__dataset_new allocates the records/labels
 * tensors (labels only when num_classes > 0) and default names ("class<i>"); the readers
 * fill them with dlt__dataset_upload. The sample is validated here (the message names
 * func). */
dlt_status dlt__dataset_new(dlt_ctx *ctx, const dlt_data_sample *sample, int64_t count,
                            int32_t num_classes, const char *func, dlt_dataset **out);
/* A dataset without labels over an existing records tensor [count, *sample] (contiguous;
 * a reference is taken): no copy. */
dlt_status dlt__dataset_adopt(dlt_ctx *ctx, const dlt_data_sample *sample, int64_t count,
                              dlt_tensor *records, const char *func, dlt_dataset **out);
/* CIFAR-10's sample: uint8 image [3, 32, 32]. */
dlt_data_sample dlt__data_cifar_sample(void);
/* Copies n host records (record_bytes each) and labels (NULL when the dataset has none) to
 * records first..first+n-1. */
dlt_status dlt__dataset_upload(dlt_dataset *ds, int64_t first, int64_t n, const void *records,
                               const int32_t *labels, const char *func);
/* Gives a dataset made with num_classes 0 its labels: count host labels (each already
 * checked to be in 0..num_classes-1) copied to an i32 tensor, and default class names. */
dlt_status dlt__dataset_set_labels(dlt_dataset *ds, const int32_t *labels, int32_t num_classes,
                                   const char *func);
/* Replaces the name of class i (copied, truncated to 63 bytes). */
dlt_status dlt__dataset_set_name(dlt_dataset *ds, int32_t i, const char *name, size_t len,
                                 const char *func);

/* ---- fixed-record binary files (lib/data/records.c) ----
 * A file is header_bytes (skipped), then whole records of record_bytes. Each record holds
 * its image (C*H*W bytes) at image_offset and, with label_width > 0, its label at
 * label_offset (label_width bytes, unsigned, little- or big-endian), below num_classes. */
typedef struct dlt_record_layout {
    int64_t header_bytes, record_bytes, image_offset, label_offset;
    int32_t label_width, label_big_endian;
    int32_t num_classes; /* labels must be below it; 0: the largest label + 1 */
    int32_t channels, height, width;
    const char *what;    /* names the format in messages ("CIFAR-10 batch") */
} dlt_record_layout;

typedef struct dlt_record_file {
    char *path;
    FILE *f;
    int64_t records;
} dlt_record_file;

/* Opens and sizes one file (regular files only; its size must be the header plus a whole
 * number of records). With optional = 1 a missing file sets *absent and succeeds. On
 * success rf->f is open and rf->records set; rf->path is left to the caller. */
dlt_status dlt__record_file_open(const char *path, const dlt_record_layout *lay, int optional,
                                 const char *func, dlt_record_file *rf, int *absent);
/* Reads the nfiles opened files, in order, into a new dataset (labels validated; class
 * names "class<i>"). */
dlt_status dlt__record_files_load(dlt_ctx *ctx, dlt_record_file *files, int nfiles,
                                  const dlt_record_layout *lay, const char *func,
                                  dlt_dataset **out);
void dlt__record_files_close(dlt_record_file *files, int n);
/* ---- token data (lib/data/tokens.c, lib/data/tokenizer.c) ---- */

/* llm.c's token files: 256 int32 of header ([0] magic, [1] version, [2] token count), then
 * the tokens as uint16. */
#define DLT_TOKENS_MAGIC 20240520
#define DLT_TOKENS_VERSION 1
#define DLT_TOKENS_HEADER_INTS 256

struct dlt_token_dataset {
    dlt_ctx *ctx;
    int64_t count;
    int32_t vocab_size;
    dlt_tensor *tokens; /* u8 [2 * count]: the uint16 tokens, little-endian as in the file */
    char source[256];   /* the file, or what made it, for messages */
};

struct dlt_token_loader {
    dlt_token_dataset *ds;
    dlt_ctx *ctx;
    int64_t batch_size, block_size;
    uint64_t seed;
    int32_t dtype;        /* of x and y: DLT_I64 or DLT_I32 */
    dlt_tensor *cursor;   /* i64 [2] holding a dlt_data_cursor (batch = next draw) */
    dlt_tensor *x, *y;    /* [B, T] */
    int64_t step;         /* host copy of the draw counter (eager calls only) */
    int64_t row_offset;   /* dist: rank * batch_size for a rank's share (dist.h) */
};

/* A token dataset from host tokens: each checked against vocab_size (the message names
 * source and the first bad position), then uploaded. */
dlt_status dlt__token_dataset_from_host(dlt_ctx *ctx, const uint16_t *tokens, int64_t n,
                                        int32_t vocab_size, const char *source, const char *func,
                                        dlt_token_dataset **out);

struct dlt_char_tokenizer {
    int32_t vocab_size;
    int32_t *itos;        /* code point of each id, ascending */
};

#ifdef __cplusplus
}
#endif
#endif
