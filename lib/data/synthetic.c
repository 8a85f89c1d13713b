/*
 * synthetic.c - a seeded stand-in for CIFAR-10 with the same interface: n images of
 * 3x32x32 bytes and labels 0..num_classes-1, for benchmarks and machines without the data.
 *
 * Everything comes from Philox4x32-10 keyed by the seed, so a seed gives the same dataset
 * on every backend and machine. Counters are split into domains (top byte) so the streams
 * never overlap:
 *   label of image i        word 0 of block (LABELS | i), scaled to num_classes
 *   noise of image i        16 bytes per block (NOISE | i*192 + j), j = 0..191
 *   pattern of class c      16 bytes per block (PATTERN | c*192 + j)
 * With learnable=1 a pixel is (3*pattern + noise) / 4: each class has its own fixed
 * picture under 25% noise, which a small model separates within a few steps. The class
 * pictures come from a fixed key, not the seed: datasets made with different seeds are
 * independent samples of the same task (a training set and a test set). With learnable=0 a
 * pixel is the noise byte and labels carry no information (benchmarks).
 *
 * Images are generated on the host in chunks and uploaded through the dataset's staging
 * path (like the CIFAR-10 reader).
 */
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"

#define DOMAIN_LABELS (UINT64_C(1) << 56)
#define DOMAIN_NOISE (UINT64_C(2) << 56)
#define DOMAIN_PATTERN (UINT64_C(3) << 56)
#define BLOCKS_PER_IMAGE (DLT_DATA_IMAGE_BYTES / 16)
#define CHUNK_IMAGES 1024
#define PATTERN_KEY UINT64_C(0x5EED0FC1A55E5000) /* the task's class pictures */

/* 3072 random bytes for (domain, item) */
static void random_image(uint64_t seed, uint64_t domain, int64_t item, uint8_t *dst) {
    for (int j = 0; j < BLOCKS_PER_IMAGE; j++) {
        dlt_philox_out o = dlt__philox(seed, domain + (uint64_t)item * BLOCKS_PER_IMAGE + (uint64_t)j);
        for (int w = 0; w < 4; w++) {
            uint32_t v = o.v[w];
            dst[16 * j + 4 * w + 0] = (uint8_t)v;
            dst[16 * j + 4 * w + 1] = (uint8_t)(v >> 8);
            dst[16 * j + 4 * w + 2] = (uint8_t)(v >> 16);
            dst[16 * j + 4 * w + 3] = (uint8_t)(v >> 24);
        }
    }
}

dlt_status dlt_synthetic_dataset_create(dlt_ctx *ctx, int64_t n, int32_t num_classes, uint64_t seed,
                                        int32_t learnable, dlt_dataset **out) {
    static const char *F = "dlt_synthetic_dataset_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    if (learnable != 0 && learnable != 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "learnable must be 0 or 1, got %d", learnable);
    if (num_classes < 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "num_classes %d is outside 1..%d",
                        num_classes, DLT_DATA_MAX_CLASSES);
    dlt_dataset *ds = NULL;
    dlt_data_sample sample = dlt__data_cifar_sample();
    DLT_CHECK(dlt__dataset_new(ctx, &sample, n, num_classes, F, &ds));
    dlt_status st = DLT_OK;
    int64_t chunk = n < CHUNK_IMAGES ? n : CHUNK_IMAGES;
    uint8_t *pix = dlt__host_alloc(ctx, (size_t)chunk * DLT_DATA_IMAGE_BYTES);
    int32_t *lab = dlt__host_alloc(ctx, (size_t)chunk * sizeof(int32_t));
    /* class patterns: generated once when they fit (64 classes = 192 KiB), else per image */
    int32_t cache_patterns = learnable && num_classes <= 64;
    uint8_t *pat = cache_patterns ? dlt__host_alloc(ctx, (size_t)num_classes * DLT_DATA_IMAGE_BYTES)
                                  : NULL;
    uint8_t one_pat[DLT_DATA_IMAGE_BYTES];
    if (!pix || !lab || (cache_patterns && !pat)) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the generation buffers");
        goto done;
    }
    if (cache_patterns)
        for (int32_t c = 0; c < num_classes; c++)
            random_image(PATTERN_KEY, DOMAIN_PATTERN, c, pat + (size_t)c * DLT_DATA_IMAGE_BYTES);
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        int64_t k = n - i0 < chunk ? n - i0 : chunk;
        for (int64_t r = 0; r < k; r++) {
            int64_t i = i0 + r;
            dlt_philox_out o = dlt__philox(seed, DOMAIN_LABELS + (uint64_t)i);
            int32_t label = (int32_t)(((uint64_t)o.v[0] * (uint64_t)num_classes) >> 32);
            lab[r] = label;
            uint8_t *img = pix + (size_t)r * DLT_DATA_IMAGE_BYTES;
            random_image(seed, DOMAIN_NOISE, i, img);
            if (learnable) {
                const uint8_t *p = one_pat;
                if (cache_patterns)
                    p = pat + (size_t)label * DLT_DATA_IMAGE_BYTES;
                else
                    random_image(PATTERN_KEY, DOMAIN_PATTERN, label, one_pat);
                for (int q = 0; q < DLT_DATA_IMAGE_BYTES; q++)
                    img[q] = (uint8_t)((3u * p[q] + img[q]) >> 2);
            }
        }
        DLT_CHECK_GOTO(st, dlt__dataset_upload(ds, i0, k, pix, lab, F), done);
    }
done:
    free(pix);
    free(lab);
    free(pat);
    if (st != DLT_OK) {
        dlt_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return DLT_OK;
}
