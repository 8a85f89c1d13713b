/*
 * dltrain/data.h - datasets resident on the context's device, and a batch loader.
 *
 * A dataset holds all its uint8 images ([count, 3, 32, 32], CIFAR-10's byte order) and
 * labels in the context's memory (on CUDA: uploaded once, 150 MB for CIFAR-10 train). A
 * loader produces batches by one gather-convert(-augment) kernel into buffers it owns and
 * reuses, so a captured training step can read them.
 *
 * Randomness (shuffle order, crop offsets, flips) comes from Philox keyed by the loader's
 * seed, the epoch and the sample's position in the epoch: the CPU and CUDA backends give
 * bit-identical batches for the same settings.
 *
 * CIFAR-10 binary release: data_batch_1.bin .. data_batch_5.bin, test_batch.bin,
 * batches.meta.txt; records of 3073 bytes (label 0..9, then 1024 red, 1024 green, 1024 blue
 * bytes, rows of 32). Every file is validated on open.
 */
#ifndef DLTRAIN_DATA_H
#define DLTRAIN_DATA_H

#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlt_dataset dlt_dataset;
typedef struct dlt_loader dlt_loader;

#define DLT_SPLIT_TRAIN 0
#define DLT_SPLIT_TEST 1

/**
 * Opens the CIFAR-10 binary release in dir. TRAIN loads the data_batch_N.bin files present
 * (N = 1..5, in order; at least one), TEST loads test_batch.bin.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (unknown split);
 *         DLT_ERR_IO (no such directory, no batch file, unreadable file or not a regular
 *         file: the message names it; a batch name that exists but cannot be opened, such
 *         as a dangling or looping symlink or a file without read permission, is
 *         unreadable, not absent); DLT_ERR_FORMAT (empty file, size not a multiple of
 *         3073, a label above 9: the message names the file and the record); out of memory.
 * Class names come from batches.meta.txt when present (else "class<i>").
 */
DLT_API DLT_NODISCARD dlt_status dlt_cifar10_open(dlt_ctx *ctx, const char *dir, int32_t split,
                                                  dlt_dataset **out);
/** Opens a single CIFAR-10 binary file. Same checks as dlt_cifar10_open; class names from a
 *  batches.meta.txt in the same directory, if any. */
DLT_API DLT_NODISCARD dlt_status dlt_cifar10_open_file(dlt_ctx *ctx, const char *path, dlt_dataset **out);
/**
 * A synthetic dataset of n 3x32x32 images with labels 0..num_classes-1 from a seed. With
 * learnable=1 each class adds its own fixed pattern to the noise, so a model can learn it;
 * with 0 images and labels are independent noise (benchmarks). The same seed gives the same
 * dataset on every backend.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (n outside 1..2^31-1,
 *         num_classes outside 1..65536, learnable not 0/1); out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_synthetic_dataset_create(dlt_ctx *ctx, int64_t n, int32_t num_classes,
                                                              uint64_t seed, int32_t learnable,
                                                              dlt_dataset **out);
/** Frees the dataset and its device memory. Loaders over it must be destroyed first. NULL is a no-op. */
DLT_API void dlt_dataset_destroy(dlt_dataset *ds);
/** Number of images (0 for NULL). */
DLT_API int64_t dlt_dataset_size(const dlt_dataset *ds);
/** Number of classes (10 for CIFAR-10; 0 for NULL). */
DLT_API int32_t dlt_dataset_num_classes(const dlt_dataset *ds);
/** Copies image `index` (3072 bytes, CHW) and its label to the host. Synchronises.
 *  pixels (nbytes >= 3072) or label may be NULL to skip that part. */
DLT_API DLT_NODISCARD dlt_status dlt_dataset_get(const dlt_dataset *ds, int64_t index, uint8_t *pixels,
                                                 size_t nbytes, int32_t *label);
/** Name of class i ("airplane"... from batches.meta.txt, or "class<i>"). Borrowed; NULL
 *  when i is out of range. */
DLT_API const char *dlt_dataset_class_name(const dlt_dataset *ds, int32_t i);

/**
 * A loader over ds (which must outlive it). Batches of batch_size in order, or in a fresh
 * seeded permutation per epoch with shuffle=1 (reproducible: permutation of epoch e depends
 * only on seed and e). drop_last=0 (PyTorch's default) yields a final smaller batch.
 * Default output: f32, contiguous NCHW, int64 labels, x = byte / 255 (ToTensor).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (batch_size < 1, flags not
 *         0/1, drop_last leaving no batch); out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_loader_create(dlt_dataset *ds, int64_t batch_size, int32_t shuffle,
                                                   int32_t drop_last, uint64_t seed, dlt_loader **out);
/** Frees the loader and its batch buffers (borrowed batches become invalid). NULL is a no-op. */
DLT_API void dlt_loader_destroy(dlt_loader *ld);
/** Output dtype (f32/f16/bf16), memory format and label dtype (DLT_I32 or DLT_I64).
 *  A change reallocates the batch buffers: set the output before capturing a step. */
DLT_API DLT_NODISCARD dlt_status dlt_loader_set_output(dlt_loader *ld, int32_t dtype, int32_t format,
                                                       int32_t label_dtype);
/** Per-channel normalisation after ToTensor: x = (byte/255 - mean[c]) / std[c]. mean and
 *  std point to 3 floats each; NULL mean switches normalisation off. */
DLT_API DLT_NODISCARD dlt_status dlt_loader_set_normalize(dlt_loader *ld, const float *mean, const float *std);
/** Training augmentation: random crop of 32x32 from the image zero-padded by crop_pad (0 =
 *  off) and horizontal flip with probability 1/2 (hflip=1), drawn from the loader's seed. */
DLT_API DLT_NODISCARD dlt_status dlt_loader_set_augment(dlt_loader *ld, int32_t crop_pad, int32_t hflip);
/** Starts epoch `epoch`: shuffles (if on) and rewinds. dlt_loader_next starts epoch 0 by
 *  itself on first use and the next epoch after the last batch was taken. */
DLT_API DLT_NODISCARD dlt_status dlt_loader_start_epoch(dlt_loader *ld, int64_t epoch);
/**
 * The next batch. x [B,3,32,32] and y [B] are borrowed, owned by the loader, and valid until
 * the next call (the buffers are reused). *has_batch = 0 (and x, y = NULL) at the end of
 * the epoch. Enqueued work only: no synchronisation.
 *
 * Full batches are always the same tensor at the same device address; the final partial
 * batch is a view of its first rows. The batch position is read from a cursor in device
 * memory that each call advances on the device, so a captured step (graph.h) that calls
 * dlt_loader_next takes the next batch on every replay (the shape stays the one captured;
 * past the end of the epoch positions wrap around). Replays do not move the host's copy of
 * the position: start the next epoch eagerly (dlt_loader_start_epoch) between replays, which
 * also resets the device cursor. Starting an epoch inside a capture is DLT_ERR_INVALID_STATE.
 */
DLT_API DLT_NODISCARD dlt_status dlt_loader_next(dlt_loader *ld, dlt_tensor **x, dlt_tensor **y,
                                                 int32_t *has_batch);
/** Batches per epoch (196 for 50,000 images at 256 without drop_last). */
DLT_API int64_t dlt_loader_num_batches(const dlt_loader *ld);
/** The batch size given at creation (0 for NULL). */
DLT_API int64_t dlt_loader_batch_size(const dlt_loader *ld);
/** Sample order of epoch `epoch` (dataset size entries) into out. For tests and tools. */
DLT_API DLT_NODISCARD dlt_status dlt_loader_epoch_order(dlt_loader *ld, int64_t epoch, int64_t *out, int64_t n);

/**
 * Accuracy of model over every batch of ld (one epoch from its current settings; no-grad and
 * evaluation mode, restored afterwards). Counted on the device; one read at the end, which
 * synchronises. The pass restarts the loader's current epoch (0 if it never ran) and leaves
 * the loader at that epoch's end. DLT_ERR_CONTEXT_MISMATCH (nothing changed) when the model
 * and the loader are on different contexts.
 */
DLT_API DLT_NODISCARD dlt_status dlt_evaluate_accuracy(dlt_module *model, dlt_loader *ld, double *accuracy);

#ifdef __cplusplus
}
#endif
#endif
