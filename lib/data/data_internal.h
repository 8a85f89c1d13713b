/*
 * data_internal.h - the dataset and loader objects, and the per-sample math shared by the
 * CPU gather (lib/cpu/data.c) and the CUDA gather (cuda/data.cu), written once here so the
 * two backends give the same bits.
 *
 * Randomness (all Philox4x32-10, lib/core/philox.h):
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
 * Included by C (lib/) and CUDA C++ (cuda/): the common subset of both.
 */
#ifndef DLT_DATA_INTERNAL_H
#define DLT_DATA_INTERNAL_H

#include "../core/internal.h"
#include "../core/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest synthetic class count (labels are int32, names are kept per class). */
#define DLT_DATA_MAX_CLASSES 65536
/* Key offset separating augmentation draws from shuffle keys of the same seed. */
#define DLT_DATA_AUG_KEY 0x9E3779B97F4A7C15ull

struct dlt_dataset {
    dlt_ctx *ctx;
    int64_t count;
    int32_t num_classes;
    dlt_tensor *images; /* u8 [count, 3, 32, 32] */
    dlt_tensor *labels; /* i32 [count] */
    char **names;       /* num_classes NUL-terminated names (one host block) */
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
    float mean[3], std[3];
    int32_t crop_pad, hflip;

    /* device state: reused every step so a captured step keeps its addresses */
    dlt_tensor *perm;       /* i32 [count] when shuffling, else NULL */
    dlt_tensor *cursor;     /* i64 [2] holding a dlt_data_cursor */
    dlt_tensor *x, *y;      /* full batch buffers */
    dlt_tensor *x_last, *y_last; /* views of the first last_rows rows (partial batch only) */

    /* host-side position, in step with the device cursor for eager use */
    int64_t epoch;   /* current epoch (valid when started) */
    int64_t batch;   /* next batch of the epoch */
    int32_t started; /* an epoch has been set up */
    int32_t ended;   /* the end of the epoch was reported (has_batch = 0) */
};

/* Dataset objects (lib/data/loader.c). dlt__dataset_new allocates the images/labels tensors
 * and default names ("class<i>"); the readers fill them with dlt__dataset_upload. */
dlt_status dlt__dataset_new(dlt_ctx *ctx, int64_t count, int32_t num_classes, const char *func,
                            dlt_dataset **out);
/* Copies n host images (3072 bytes each) and labels to records first..first+n-1. */
dlt_status dlt__dataset_upload(dlt_dataset *ds, int64_t first, int64_t n, const uint8_t *pixels,
                               const int32_t *labels, const char *func);
/* Replaces the name of class i (copied, truncated to 63 bytes). */
dlt_status dlt__dataset_set_name(dlt_dataset *ds, int32_t i, const char *name, size_t len,
                                 const char *func);

/* ---- per-sample math shared by the backends ---- */

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

/* The source byte for output pixel (c, y, x) of an augmented image (0 in the padding). */
DLT_HD uint8_t dlt__data_src_byte(const uint8_t *img, int32_t c, int32_t y, int32_t x,
                                  dlt_data_aug a, int32_t pad) {
    int32_t sx = (a.flip ? DLT_DATA_W - 1 - x : x) + a.left - pad;
    int32_t sy = y + a.top - pad;
    if (sx < 0 || sx >= DLT_DATA_W || sy < 0 || sy >= DLT_DATA_H) return 0;
    return img[(c * DLT_DATA_H + sy) * DLT_DATA_W + sx];
}

/* ToTensor (true fp32 division), then Normalize. No multiply-add to contract: both
 * compilers give the IEEE result of each step. */
DLT_HD float dlt__data_value(uint8_t b, int32_t normalize, float mean, float std) {
    float v = (float)b / 255.0f;
    if (normalize) v = (v - mean) / std;
    return v;
}

#ifdef __cplusplus
}
#endif
#endif
