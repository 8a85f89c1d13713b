/*
 * dltrain/data.h - datasets resident on the context's device, and batch loaders.
 *
 * A dataset holds all its samples and labels in the context's memory (on CUDA: uploaded
 * once, 150 MB for CIFAR-10 train). A sample is either an image record (uint8 [C, H, W]:
 * CIFAR-10, the fixed-record file reader, or a tensor dataset made with image = 1), which
 * loaders turn into floats as torchvision's ToTensor (byte / 255) with optional Normalize
 * and augmentation; or a plain record of f32/f16/bf16/u8 elements of any shape (a tensor
 * dataset), which loaders hand out as they are or converted to another float dtype, as
 * PyTorch's TensorDataset + DataLoader do. A loader produces batches by one
 * gather-convert(-augment) kernel into buffers it owns and reuses, so a captured training
 * step can read them.
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
/** Options of dlt_tensor_dataset_create (fill with dlt_tensor_dataset_options_default). */
typedef struct dlt_tensor_dataset_options {
    uint32_t size;       /**< sizeof(dlt_tensor_dataset_options), set by _default */
    int32_t image;       /**< 1: x is uint8 [N, C, H, W] images (C <= 16): loaders apply ToTensor
                          *   (byte / 255), and Normalize/augmentation are available; default 0 */
    int32_t num_classes; /**< labels must be below it; 0 (default): the largest label + 1 */
} dlt_tensor_dataset_options;

/** Fills the first `size` bytes of o (core.h: option structs) with the defaults (image 0,
 *  num_classes 0). */
DLT_API void dlt_tensor_dataset_options_init(dlt_tensor_dataset_options *o, uint32_t size);
/** dlt_tensor_dataset_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_tensor_dataset_options_default(dlt_tensor_dataset_options *o) {
    dlt_tensor_dataset_options_init(o, (uint32_t)sizeof *o);
}
/**
 * A dataset over tensors, as PyTorch's TensorDataset(x, labels): sample i is x[i] (any shape
 * [N, ...], dtype f32, f16, bf16 or u8) with label labels[i] (labels: i32 or i64 [N] on the
 * same context), or x alone when labels is NULL (loaders then hand out no y).
 * The dataset keeps a reference to x's memory (no copy; a channels-last x is first copied to
 * NCHW order): later changes to x's values show in later batches, as in PyTorch. Labels are
 * validated and copied (a read to the host: synchronises once). o may be NULL (defaults).
 * A host array becomes a tensor with dlt_tensor_from_host.
 * @return DLT_OK; DLT_ERR_NULL_POINTER (x, out); DLT_ERR_DTYPE (x not f32/f16/bf16/u8, labels
 *         not i32/i64); DLT_ERR_SHAPE (x 0-D or with a 0 dimension, labels not [N], image
 *         x not [N, C, H, W] u8 with C <= 16 and H, W <= 65536); DLT_ERR_CONTEXT_MISMATCH
 *         (labels elsewhere);
 *         DLT_ERR_INVALID_ARGUMENT (a label below 0 or not below num_classes: the message
 *         names the first such index and value; num_classes outside 0..65536, image not
 *         0/1); out of memory. Nothing is created on failure.
 */
DLT_API DLT_NODISCARD dlt_status dlt_tensor_dataset_create(const dlt_tensor *x, const dlt_tensor *labels,
                                                           const dlt_tensor_dataset_options *o,
                                                           dlt_dataset **out);

/** Options of dlt_record_files_open: where the fields lie in a fixed-size record. The
 *  defaults describe a CIFAR-10 batch file. */
typedef struct dlt_record_file_options {
    uint32_t size;            /**< sizeof(dlt_record_file_options), set by _default */
    int32_t label_width;      /**< bytes of the label: 0 (no labels), 1, 2 or 4; default 1 */
    int32_t label_big_endian; /**< 1: a multi-byte label is big-endian; default 0 (little) */
    int32_t num_classes;      /**< labels must be below it (checked on open); 0: the largest
                               *   label + 1; default 10 */
    int64_t header_bytes;     /**< bytes skipped at the start of each file; default 0 */
    int64_t record_bytes;     /**< bytes of one record; default 3073 */
    int64_t label_offset;     /**< where the label starts in a record; default 0 */
    int64_t image_offset;     /**< where the image's C*H*W bytes start; default 1 */
    int32_t channels, height, width; /**< image shape [C, H, W], C <= 16, H and W <= 65536;
                                      *   default 3, 32, 32 */
} dlt_record_file_options;

/** Fills the first `size` bytes of o (core.h: option structs) with the defaults (CIFAR-10's
 *  layout, see the fields). */
DLT_API void dlt_record_file_options_init(dlt_record_file_options *o, uint32_t size);
/** dlt_record_file_options_init(o, sizeof *o): the call C and C++ programs make. */
static inline void dlt_record_file_options_default(dlt_record_file_options *o) {
    dlt_record_file_options_init(o, (uint32_t)sizeof *o);
}
/**
 * Opens n_paths binary files of fixed-size records (each file: header_bytes, then whole
 * records) into one image dataset, in order: uint8 images [C, H, W] and, with label_width >
 * 0, labels. Examples: CIFAR-100 (record_bytes 3074, fine label at offset 1, image at 2,
 * num_classes 100; coarse labels at offset 0, 20 classes), MNIST-like files of a label byte
 * and 28x28 pixels (record_bytes 785, channels 1, height = width = 28). Every file is
 * checked as CIFAR-10's are (regular files only, size = header + a whole number of records,
 * every label below num_classes) before anything is uploaded. o may be NULL (defaults).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (n_paths < 1, a field
 *         outside the record, widths/sizes out of range); DLT_ERR_IO (a missing, unreadable
 *         or non-regular file: the message names it); DLT_ERR_FORMAT (empty file, a size
 *         that is not the header plus whole records, a label out of range: the message
 *         names the file and the record); out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_record_files_open(dlt_ctx *ctx, const char *const *paths,
                                                       int32_t n_paths, const dlt_record_file_options *o,
                                                       dlt_dataset **out);

/** Frees the dataset and its device memory. Loaders over it must be destroyed first. NULL is a no-op. */
DLT_API void dlt_dataset_destroy(dlt_dataset *ds);
/** Number of samples (0 for NULL). */
DLT_API int64_t dlt_dataset_size(const dlt_dataset *ds);
/** Number of classes (10 for CIFAR-10; 0 for a dataset without labels, or NULL). */
DLT_API int32_t dlt_dataset_num_classes(const dlt_dataset *ds);
/** Shape of one sample: writes min(ndim, max_dims) sizes to dims (may be NULL when
 *  max_dims is 0) and returns ndim ([3, 32, 32] for CIFAR-10: 3); -1 for NULL. */
DLT_API int32_t dlt_dataset_sample_shape(const dlt_dataset *ds, int64_t *dims, int32_t max_dims);
/** Element dtype of the stored samples (DLT_U8 for images; -1 for NULL). */
DLT_API int32_t dlt_dataset_dtype(const dlt_dataset *ds);
/** Bytes of one stored sample (3072 for CIFAR-10; 0 for NULL). */
DLT_API size_t dlt_dataset_sample_bytes(const dlt_dataset *ds);
/** 1 when the samples are image records (ToTensor, Normalize, augmentation), else 0. */
DLT_API int32_t dlt_dataset_is_image(const dlt_dataset *ds);
/** Copies sample `index` (dlt_dataset_sample_bytes bytes, as stored: CHW for images) and
 *  its label to the host. Synchronises. pixels (nbytes >= the sample's bytes) or label may
 *  be NULL to skip that part; a dataset without labels writes -1 to label. */
DLT_API DLT_NODISCARD dlt_status dlt_dataset_get(const dlt_dataset *ds, int64_t index, uint8_t *pixels,
                                                 size_t nbytes, int32_t *label);
/** Name of class i ("airplane"... from batches.meta.txt, or "class<i>"). Borrowed; NULL
 *  when i is out of range (always for a dataset without labels). */
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
/** Output dtype, memory format and label dtype (DLT_I32 or DLT_I64; ignored without labels).
 *  Images: f32/f16/bf16. Other samples: f32/f16/bf16 (converted by rounding to nearest
 *  even; u8 values become 0..255, not scaled) or their own dtype. Channels-last needs 3-D
 *  samples. A change reallocates the batch buffers: set the output before capturing a step.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_DTYPE; DLT_ERR_INVALID_ARGUMENT (unknown
 *          format, or channels-last for samples that are not 3-D); out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_loader_set_output(dlt_loader *ld, int32_t dtype, int32_t format,
                                                       int32_t label_dtype);
/** Per-channel normalisation after ToTensor: x = (byte/255 - mean[c]) / std[c]. mean and
 *  std point to C floats each (C = the images' channels: 3 for CIFAR-10); NULL mean
 *  switches normalisation off. Image datasets only (else DLT_ERR_INVALID_ARGUMENT). */
DLT_API DLT_NODISCARD dlt_status dlt_loader_set_normalize(dlt_loader *ld, const float *mean, const float *std);
/** Training augmentation: random crop of H x W from the image zero-padded by crop_pad (0 =
 *  off, at most min(H, W)) and horizontal flip with probability 1/2 (hflip=1), drawn from
 *  the loader's seed. Image datasets only (crop_pad 0 and hflip 0 are accepted for any). */
DLT_API DLT_NODISCARD dlt_status dlt_loader_set_augment(dlt_loader *ld, int32_t crop_pad, int32_t hflip);
/** Starts epoch `epoch`: shuffles (if on) and rewinds. dlt_loader_next starts epoch 0 by
 *  itself on first use and the next epoch after the last batch was taken. */
DLT_API DLT_NODISCARD dlt_status dlt_loader_start_epoch(dlt_loader *ld, int64_t epoch);
/**
 * The next batch. x [B, *sample shape] and y [B] are borrowed, owned by the loader, and
 * valid until the next call (the buffers are reused); y is NULL for a dataset without
 * labels. *has_batch = 0 (and x, y = NULL) at the end of the epoch. Enqueued work only: no
 * synchronisation.
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
/** Moves the current epoch's position to batch `batch` (0..dlt_loader_num_batches; the
 *  count means "at the end"), on the host and in the device cursor: after n replays of a
 *  captured step that took one batch each (replays move only the device cursor), seek to
 *  the host's position + n and eager dlt_loader_next calls continue where the replays
 *  stopped. Starts epoch 0 first if no epoch has started. Like dlt_token_loader_seek.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (batch out of range,
 *          nothing moved); DLT_ERR_INVALID_STATE (inside a capture). */
DLT_API DLT_NODISCARD dlt_status dlt_loader_seek(dlt_loader *ld, int64_t batch);
/** The current epoch's position on the host: the index of the batch dlt_loader_next takes
 *  next (dlt_loader_num_batches at the end; 0 before the first call). */
DLT_API int64_t dlt_loader_position(const dlt_loader *ld);
/** Batches per epoch (196 for 50,000 images at 256 without drop_last). */
DLT_API int64_t dlt_loader_num_batches(const dlt_loader *ld);
/** The batch size given at creation (0 for NULL). */
DLT_API int64_t dlt_loader_batch_size(const dlt_loader *ld);
/** Sample order of epoch `epoch` into out: dlt_loader_num_samples entries (the dataset's size,
 *  or the rank's shard of a distributed loader: dist.h). For tests and tools. */
DLT_API DLT_NODISCARD dlt_status dlt_loader_epoch_order(dlt_loader *ld, int64_t epoch, int64_t *out, int64_t n);

/**
 * Accuracy of model over every batch of ld (one epoch from its current settings; no-grad and
 * evaluation mode, restored afterwards). Counted on the device; one read at the end, which
 * synchronises. The pass restarts the loader's current epoch (0 if it never ran) and leaves
 * the loader at that epoch's end. DLT_ERR_CONTEXT_MISMATCH (nothing changed) when the model
 * and the loader are on different contexts; DLT_ERR_INVALID_ARGUMENT when the dataset has
 * no labels.
 */
DLT_API DLT_NODISCARD dlt_status dlt_evaluate_accuracy(dlt_module *model, dlt_loader *ld, double *accuracy);

/* ---------------------------------------------------------------------------------------
 * Token data (GPT training): token datasets resident on the device, random-window batches
 * as nanoGPT draws them, and nanoGPT's character-level tokenizer.
 * ------------------------------------------------------------------------------------- */

typedef struct dlt_token_dataset dlt_token_dataset;
typedef struct dlt_token_loader dlt_token_loader;
typedef struct dlt_char_tokenizer dlt_char_tokenizer;

/** llm.c's token files: a header of 256 int32 ([0] = 20240520, [1] = 1, [2] = token count;
 *  the file size must be 1024 + 2 * count bytes), then the tokens as little-endian uint16. */
#define DLT_TOKENS_LLMC 1
/** nanoGPT's train.bin / val.bin: little-endian uint16 tokens, no header. */
#define DLT_TOKENS_RAW 2

/**
 * Opens a token file (format DLT_TOKENS_LLMC or DLT_TOKENS_RAW) and uploads its tokens to the
 * context's memory, checking every one: a token >= vocab_size (1..65536) is refused, so
 * nothing is trained on garbage. A raw file that starts with llm.c's magic is refused too
 * (it would read the header as tokens).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (unknown format, vocab_size
 *         out of range); DLT_ERR_IO (missing, unreadable, not a regular file, a symlink
 *         loop, permission denied: the message names the file and the cause); DLT_ERR_FORMAT
 *         (empty file, bad magic or version, count not matching the file size, an odd size,
 *         a token >= vocab_size: the message names the file and the first bad position);
 *         out of memory. Nothing is created on failure.
 */
DLT_API DLT_NODISCARD dlt_status dlt_token_file_open(dlt_ctx *ctx, const char *path, int32_t format,
                                                     int32_t vocab_size, dlt_token_dataset **out);
/** A token dataset from n host tokens (copied; each must be below vocab_size, 1..65536).
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (n < 1, vocab_size out of
 *          range, a token >= vocab_size: the message names the first position); out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_token_dataset_create(dlt_ctx *ctx, const uint16_t *tokens, int64_t n,
                                                          int32_t vocab_size, dlt_token_dataset **out);
/** n synthetic tokens, uniform in [0, vocab_size) from Philox keyed by seed: the same seed
 *  gives the same tokens on every backend. For benchmarks and tests.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (n < 1, vocab_size
 *          outside 1..65536); out of memory. */
DLT_API DLT_NODISCARD dlt_status dlt_synthetic_tokens_create(dlt_ctx *ctx, int64_t n, int32_t vocab_size,
                                                             uint64_t seed, dlt_token_dataset **out);
/** Frees the token dataset. Token loaders over it must be destroyed first. NULL is a no-op. */
DLT_API void dlt_token_dataset_destroy(dlt_token_dataset *ds);
/** Number of tokens (0 for NULL). */
DLT_API int64_t dlt_token_dataset_size(const dlt_token_dataset *ds);
/** The vocabulary size the tokens were checked against (0 for NULL). */
DLT_API int32_t dlt_token_dataset_vocab_size(const dlt_token_dataset *ds);
/** Copies tokens start..start+n-1 to out. Synchronises; refused during graph capture.
 *  @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (range outside the data);
 *          DLT_ERR_INVALID_STATE (capturing). */
DLT_API DLT_NODISCARD dlt_status dlt_token_dataset_read(const dlt_token_dataset *ds, int64_t start, int64_t n,
                                                        uint16_t *out);

/**
 * Random-window batches over ds (which must outlive the loader), as nanoGPT's get_batch:
 * each call draws batch_size start offsets o uniform in [0, size - block_size) and gives
 * x[b] = tokens[o : o + block_size], y[b] = tokens[o + 1 : o + block_size + 1]. Draw s of a
 * loader depends only on (seed, s), identically on every backend. The draw counter lives in
 * device memory, so a captured step (graph.h) that calls dlt_token_loader_next draws new
 * windows on every replay. Default output: int64 (as nanoGPT); see set_output.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (batch_size or block_size
 *         < 1 or above 2^31-1, fewer than block_size + 1 tokens: the message names the
 *         data's source); out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_token_loader_create(dlt_token_dataset *ds, int64_t batch_size,
                                                         int64_t block_size, uint64_t seed,
                                                         dlt_token_loader **out);
/** Frees the loader and its batch buffers (borrowed batches become invalid). NULL is a no-op. */
DLT_API void dlt_token_loader_destroy(dlt_token_loader *ld);
/** Dtype of x and y: DLT_I64 (default) or DLT_I32. A change reallocates the batch buffers:
 *  set it before capturing a step. DLT_ERR_DTYPE for others; DLT_ERR_INVALID_STATE while
 *  capturing. */
DLT_API DLT_NODISCARD dlt_status dlt_token_loader_set_output(dlt_token_loader *ld, int32_t dtype);
/**
 * The next batch: x and y [batch_size, block_size], borrowed, owned by the loader and valid
 * until the next call (the same tensors at the same addresses every time). Enqueued work
 * only: no synchronisation. Replays of a captured call advance the device counter only.
 */
DLT_API DLT_NODISCARD dlt_status dlt_token_loader_next(dlt_token_loader *ld, dlt_tensor **x, dlt_tensor **y);
/** Sets the draw counter: the next batch is draw `step` (0 after creation). For resuming:
 *  seek(i) then continues as an uninterrupted run would at draw i. Refused while capturing. */
DLT_API DLT_NODISCARD dlt_status dlt_token_loader_seek(dlt_token_loader *ld, int64_t step);
/** The draw counter as the device holds it (replays included). Synchronises; refused while
 *  capturing. */
DLT_API DLT_NODISCARD dlt_status dlt_token_loader_position(dlt_token_loader *ld, int64_t *step);
/** Start offsets of draw `step` (batch_size entries into out, n >= batch_size), computed on
 *  the host with the device's formula. For tests and tools. */
DLT_API DLT_NODISCARD dlt_status dlt_token_loader_offsets(const dlt_token_loader *ld, int64_t step,
                                                          int64_t *out, int64_t n);

/**
 * nanoGPT's character-level tokenizer (data/shakespeare_char/prepare.py) over UTF-8 text:
 * the vocabulary is the distinct characters (Unicode code points) sorted by code point;
 * id i is the i-th of them (stoi/itos). nbytes of text, which must be valid UTF-8 (as
 * Python's decoder demands: no overlong forms or surrogates) with at most 65536 distinct
 * characters. The text is taken as it is (no newline translation).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (empty text, invalid UTF-8:
 *         the message gives the byte offset, too many distinct characters); out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_char_tokenizer_create(const char *text, size_t nbytes,
                                                           dlt_char_tokenizer **out);
/** The tokenizer of a UTF-8 text file, read as Python's open(path).read() does (universal
 *  newlines: CRLF and CR become LF). DLT_ERR_IO for an unreadable file, DLT_ERR_FORMAT for
 *  an empty file or invalid UTF-8 (the message names the file and the byte offset). */
DLT_API DLT_NODISCARD dlt_status dlt_char_tokenizer_from_file(const char *path, dlt_char_tokenizer **out);
/** Frees the tokenizer. NULL is a no-op. */
DLT_API void dlt_char_tokenizer_destroy(dlt_char_tokenizer *tok);
/** Vocabulary size (65 for tiny Shakespeare; 0 for NULL). */
DLT_API int32_t dlt_char_tokenizer_vocab_size(const dlt_char_tokenizer *tok);
/** itos: the code point of id (-1 when id is out of range or tok is NULL). */
DLT_API int32_t dlt_char_tokenizer_itos(const dlt_char_tokenizer *tok, int32_t id);
/** stoi: the id of a code point (-1 when it is not in the vocabulary or tok is NULL). */
DLT_API int32_t dlt_char_tokenizer_stoi(const dlt_char_tokenizer *tok, int32_t code_point);
/**
 * Encodes nbytes of UTF-8 text into ids. Two-phase: ids NULL writes only the count to *n;
 * otherwise cap must be >= the count (nothing is written when it is not).
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (invalid UTF-8, a character
 *         outside the vocabulary: the message gives it and its byte offset, cap too small).
 */
DLT_API DLT_NODISCARD dlt_status dlt_char_tokenizer_encode(const dlt_char_tokenizer *tok, const char *text,
                                                           size_t nbytes, uint16_t *ids, int64_t cap,
                                                           int64_t *n);
/**
 * Decodes n ids into UTF-8 followed by a NUL. Two-phase: buf NULL writes only the byte count
 * (without the NUL) to *len; otherwise cap must be >= that count + 1.
 * @return DLT_OK; DLT_ERR_NULL_POINTER; DLT_ERR_INVALID_ARGUMENT (an id >= the vocabulary
 *         size: the message gives its position; cap too small).
 */
DLT_API DLT_NODISCARD dlt_status dlt_char_tokenizer_decode(const dlt_char_tokenizer *tok, const uint16_t *ids,
                                                           int64_t n, char *buf, size_t cap, size_t *len);
/**
 * nanoGPT's shakespeare_char preparation in one call: reads the UTF-8 text file at path (as
 * dlt_char_tokenizer_from_file), builds its tokenizer, encodes the whole text and splits it
 * at int(n * train_fraction) characters (nanoGPT: 0.9) into a train and a val token
 * dataset on ctx. tokenizer may be NULL (not wanted). Nothing is created on failure.
 * @return DLT_OK; DLT_ERR_NULL_POINTER (ctx, path, train, val); DLT_ERR_INVALID_ARGUMENT
 *         (train_fraction not inside (0, 1), a split left empty); DLT_ERR_IO; DLT_ERR_FORMAT
 *         (empty file, invalid UTF-8); out of memory.
 */
DLT_API DLT_NODISCARD dlt_status dlt_char_text_open(dlt_ctx *ctx, const char *path, double train_fraction,
                                                    dlt_char_tokenizer **tokenizer,
                                                    dlt_token_dataset **train, dlt_token_dataset **val);

#ifdef __cplusplus
}
#endif
#endif
