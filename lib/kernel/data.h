/*
 * data.h - the data pipeline's side of the kernel contract: the launch structs of the
 * gather entries (data_gather, data_tokens), the loader's device cursor, and the per-sample
 * math shared by the CPU gather (lib/cpu/data.c) and the CUDA gather (cuda/data.cu),
 * written once here so the two backends give the same bits.
 *
 * Randomness (all Philox4x32-10, lib/kernel/philox.h):
 *  - shuffle: index k of epoch e gets the 64-bit key (w0 << 32 | w1) of
 *    philox(seed, e << 32 | k); the epoch's order sorts indices by key, ties by index (a
 *    tie needs two equal 64-bit keys; the index tiebreak makes the order total anyway).
 *  - augmentation: the sample at epoch position p draws philox(seed + DLT_DATA_AUG_KEY,
 *    e << 32 + p): top = w0 * (2*pad+1) >> 32, left = w1 * (2*pad+1) >> 32, flip = w2 & 1.
 *    The crop takes rows top..top+31 and columns left..left+31 of the image zero-padded by
 *    pad on each side (torchvision RandomCrop(32, padding=pad)), then the flip mirrors the
 *    columns (RandomHorizontalFlip) - padded pixels are byte 0 before ToTensor.
 *  - pixel value: byte / 255 as an fp32 division (ToTensor), then (v - mean) / std as fp32
 *    operations (Normalize), rounded to the output dtype last.
 *
 *  - token windows: row b of draw s starts at mulhi64(w0 << 32 | w1, count - T) of
 *    philox(seed, s << 32 | b): uniform in [0, count - T) as nanoGPT's torch.randint, with
 *    a bias below (count - T) / 2^64.
 */
#ifndef DLT_KERNEL_DATA_H
#define DLT_KERNEL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dltrain/tensor.h"
#include "philox.h"

/* Key offset separating augmentation draws from shuffle keys of the same seed. */
#define DLT_DATA_AUG_KEY 0x9E3779B97F4A7C15ull

/* Data pipeline (lib/data, lib/cpu/data.c, cuda/data.cu). CIFAR-10's images are 3x32x32
 * uint8 planes (its record order); labels int32. */
#define DLT_DATA_C 3
#define DLT_DATA_H 32
#define DLT_DATA_W 32
#define DLT_DATA_IMAGE_BYTES (DLT_DATA_C * DLT_DATA_H * DLT_DATA_W)
/* Channels of an image record (Normalize keeps a mean and std per channel). */
#define DLT_DATA_MAX_CHANNELS 16

/* Where a loader stands, in the backend's memory so that a captured step reads and
 * advances it on replay: the batch of the epoch that the next gather reads, and the epoch
 * (which keys the augmentation draws). Token loaders use batch as their draw counter. */
typedef struct dlt_data_cursor {
    int64_t batch;
    int64_t epoch;
} dlt_data_cursor;

/* One batch: row i of the batch is epoch position p = cursor->batch * batch_size + i (taken
 * modulo count, so a replay past the end wraps instead of reading out of bounds), sample
 * perm[p] (or p when perm is NULL); its record is record_bytes at records + sample *
 * record_bytes.
 * Image records (image = 1: uint8 [C, H, W]): x = byte / 255 in fp32, then (x - mean[c]) /
 * std[c] when normalize, rounded to x's dtype; augmentation: a Philox draw of (aug_seed,
 * epoch, unwrapped p) gives a crop offset and a flip (dlt__data_aug_draw below).
 * Other records (image = 0, elements of src_dtype): each element converted to x's dtype
 * (a plain copy when the dtypes match). x holds [n, *sample] in x->format (channels-last
 * only for 3-D samples, read as [C, H, W]). y (when labels) gets the int32 labels widened
 * to y's dtype. */
typedef struct dlt_data_launch {
    const uint8_t *images;          /* the records, on the backend's device */
    const int32_t *labels;          /* [count], or NULL (then y is NULL) */
    int64_t count;
    const int32_t *perm;            /* [count] sample order of the epoch, or NULL: identity */
    const dlt_data_cursor *cursor;  /* device/host, read by the gather */
    int64_t batch_size;             /* rows of a full batch */
    int64_t n;                      /* rows written (x->shape[0] == y->shape[0] == n) */
    int32_t normalize;
    float mean[DLT_DATA_MAX_CHANNELS], std[DLT_DATA_MAX_CHANNELS];
    int32_t crop_pad;               /* 0: no crop */
    int32_t hflip;
    uint64_t aug_seed;
    dlt_tensor *x;                  /* [n, *sample] */
    dlt_tensor *y;                  /* [n] int32 or int64, or NULL */
    /* the record (appended for datasets over any records; CIFAR-10: u8, image, 3x32x32) */
    int32_t image;                  /* 1: uint8 image record [C, H, W] */
    int32_t src_dtype;              /* element dtype of a record */
    int64_t sample_numel;           /* elements of one record */
    size_t record_bytes;            /* sample_numel * element size */
    int64_t C, H, W;                /* 3-D samples (images, channels-last output); else 1 */
    /* dist (a loader's shard of the epoch, lib/dist/sampler.c): the augmentation draw of
     * position p is keyed by p * aug_stride + aug_offset, the sample's position in the
     * whole padded epoch, so a run over N ranks augments as one rank does; 0, 0: by p */
    int64_t aug_stride, aug_offset;
} dlt_data_launch;

/* Token batches (lib/data/tokens.c): row b of draw s = cursor->batch starts at offset
 * o = dlt__token_offset(seed, s, b, count - T) (below), and
 * x[b, t] = tokens[o + t], y[b, t] = tokens[o + t + 1] for t < T, widened to x's dtype. */
typedef struct dlt_token_launch {
    const uint16_t *tokens;         /* [count] on the backend's device */
    int64_t count;
    const dlt_data_cursor *cursor;  /* device/host, read by the gather */
    uint64_t seed;
    int64_t batch_size, block_size; /* B, T */
    dlt_tensor *x, *y;              /* [B, T] int32 or int64, same dtype */
    /* dist: row b draws as row b + row_offset (rank * B for a shard: N ranks of B rows draw
     * what one loader of N*B rows draws) */
    int64_t row_offset;
} dlt_token_launch;

/* High 64 bits of a * b, in 32-bit pieces (portable C11 and CUDA alike). */
DLT_HD uint64_t dlt__mulhi64(uint64_t a, uint64_t b) {
    uint64_t a_lo = (uint32_t)a, a_hi = a >> 32, b_lo = (uint32_t)b, b_hi = b >> 32;
    uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
    uint64_t cross = (lo_lo >> 32) + (uint32_t)hi_lo + lo_hi;
    return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

/* Start of row b of token draw `step`: uniform in [0, range). */
DLT_HD int64_t dlt__token_offset(uint64_t seed, int64_t step, int64_t row, uint64_t range) {
    dlt_philox_out o = dlt__philox(seed, ((uint64_t)step << 32) | (uint64_t)(uint32_t)row);
    uint64_t u = ((uint64_t)o.v[0] << 32) | o.v[1];
    return (int64_t)dlt__mulhi64(u, range);
}

DLT_HD uint64_t dlt__data_shuffle_key(uint64_t seed, int64_t epoch, int64_t k) {
    dlt_philox_out o = dlt__philox(seed, ((uint64_t)epoch << 32) | (uint64_t)k);
    return ((uint64_t)o.v[0] << 32) | o.v[1];
}

typedef struct dlt_data_aug {
    int32_t top, left, flip;
} dlt_data_aug;

DLT_HD dlt_data_aug dlt__data_aug_draw(uint64_t seed, int64_t epoch, int64_t pos, int32_t pad,
                                       int32_t hflip) {
    dlt_data_aug a;
    a.top = 0;
    a.left = 0;
    a.flip = 0;
    if (pad <= 0 && !hflip) return a;
    dlt_philox_out o = dlt__philox(seed + DLT_DATA_AUG_KEY, ((uint64_t)epoch << 32) + (uint64_t)pos);
    uint64_t range = (uint64_t)(2 * (pad > 0 ? pad : 0) + 1);
    a.top = (int32_t)(((uint64_t)o.v[0] * range) >> 32);
    a.left = (int32_t)(((uint64_t)o.v[1] * range) >> 32);
    a.flip = hflip ? (int32_t)(o.v[2] & 1u) : 0;
    return a;
}

/* The source byte for output pixel (c, y, x) of an augmented H x W image (0 in the
 * padding). */
DLT_HD uint8_t dlt__data_src_byte(const uint8_t *img, int32_t c, int32_t y, int32_t x,
                                  dlt_data_aug a, int32_t pad, int32_t H, int32_t W) {
    int32_t sx = (a.flip ? W - 1 - x : x) + a.left - pad;
    int32_t sy = y + a.top - pad;
    if (sx < 0 || sx >= W || sy < 0 || sy >= H) return 0;
    return img[(c * H + sy) * W + sx];
}

/* ToTensor (true fp32 division), then Normalize. No multiply-add to contract: both
 * compilers give the IEEE result of each step. */
DLT_HD float dlt__data_value(uint8_t b, int32_t normalize, float mean, float std) {
    float v = (float)b / 255.0f;
    if (normalize) v = (v - mean) / std;
    return v;
}

#endif
