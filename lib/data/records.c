/*
 * records.c - binary files of fixed-size records (CIFAR-10, CIFAR-100, MNIST-like label +
 * pixel files): the reading engine behind dlt_cifar10_open and dlt_record_files_open.
 *
 * A file is header_bytes (skipped), then whole records of record_bytes. Each record holds
 * an image of C*H*W bytes at image_offset and, with label_width > 0, an unsigned label of
 * 1, 2 or 4 bytes (little- or big-endian) at label_offset; the image bytes are already the
 * [C, H, W] plane order a loader wants, so they are copied as they are and labels widened
 * to int32.
 *
 * Files are untrusted input (a fuzzer is pointed at the CIFAR-10 reader): only regular
 * files are read, every file is opened and sized before any is read (so a bad size is
 * reported before a bad label, in file order), the size must be the header plus a whole
 * number of records, every fread is checked, every label is validated, and nothing is
 * trusted beyond the size fstat reported (a file that shrinks under us is a read error,
 * one that grows is read to the size seen). Refusals name the file and, where one is at
 * fault, the record. Records are assembled in chunks through a small host staging buffer,
 * so memory holds one copy of the data plus a few MB; on CUDA each chunk is uploaded as it
 * is read. Labels are gathered on the host (4 bytes per record) and attached at the end,
 * once their number of classes is known.
 *
 * dlt__file_open_regular and dlt__file_read_exact are the data readers' one way to open and
 * read a file (token files and text files use them too): regular files only, opened
 * without blocking on FIFOs, every failure naming the file and the system's reason.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/options.h"
#include "data_internal.h"

#define CHUNK_BYTES (4u << 20) /* staging buffer: records per chunk = this / record bytes */
#define MAX_RECORD_BYTES ((int64_t)1 << 30)
#define MAX_HEADER_BYTES ((int64_t)1 << 40)

dlt_status dlt__record_file_open(const char *path, const dlt_record_layout *lay, int optional,
                                 const char *F, dlt_record_file *rf, int *absent) {
    char eb[128];
    int fd = -1;
    int64_t fsize = 0;
    DLT_CHECK(dlt__file_open_regular(path, optional, F, &fd, &fsize, absent));
    if (*absent) return DLT_OK;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return dlt__err(DLT_ERR_IO, F, "cannot open %s: %s", path, dlt__errno_text(e, eb, sizeof eb));
    }
    const long long size = (long long)fsize, R = (long long)lay->record_bytes,
                    head = (long long)lay->header_bytes;
    dlt_status st = DLT_OK;
    if (size == 0)
        st = dlt__err(DLT_ERR_FORMAT, F, "%s is empty: a %s holds %lld-byte records", path,
                      lay->what, R);
    else if (size <= head)
        st = dlt__err(DLT_ERR_FORMAT, F, "%s: size %lld leaves no record after the %lld-byte header",
                      path, size, head);
    else if ((size - head) % R != 0 && head == 0)
        st = dlt__err(DLT_ERR_FORMAT, F,
                      "%s: size %lld is not a multiple of %lld: record %lld is truncated (%lld of "
                      "%lld bytes)",
                      path, size, R, size / R, size % R, R);
    else if ((size - head) % R != 0)
        st = dlt__err(DLT_ERR_FORMAT, F,
                      "%s: size %lld is not the %lld-byte header plus a multiple of %lld: record "
                      "%lld is truncated (%lld of %lld bytes)",
                      path, size, head, R, (size - head) / R, (size - head) % R, R);
    else if (head > 0 && fseeko(f, (off_t)head, SEEK_SET) != 0)
        st = dlt__err(DLT_ERR_IO, F, "%s: cannot skip the %lld-byte header: %s", path, head,
                      dlt__errno_text(errno, eb, sizeof eb));
    if (st != DLT_OK) {
        fclose(f);
        return st;
    }
    rf->f = f;
    rf->records = (size - head) / R;
    return DLT_OK;
}

void dlt__record_files_close(dlt_record_file *files, int n) {
    for (int i = 0; i < n; i++) {
        if (files[i].f) fclose(files[i].f);
        free(files[i].path);
        files[i].f = NULL;
        files[i].path = NULL;
    }
}

static uint32_t read_label(const uint8_t *p, int32_t width, int32_t big_endian) {
    uint32_t v = 0;
    for (int32_t k = 0; k < width; k++) {
        uint32_t byte = p[big_endian ? k : width - 1 - k];
        v = (v << 8) | byte;
    }
    return v;
}

dlt_status dlt__record_files_load(dlt_ctx *ctx, dlt_record_file *files, int nfiles,
                                  const dlt_record_layout *lay, const char *F, dlt_dataset **out) {
    char eb[128];
    int64_t total = 0;
    for (int i = 0; i < nfiles; i++) {
        total += files[i].records;
        if (total > INT32_MAX)
            return dlt__err(DLT_ERR_FORMAT, F, "%s brings the record count to %lld (at most %d)",
                            files[i].path, (long long)total, INT32_MAX);
    }
    const size_t R = (size_t)lay->record_bytes;
    const size_t img_bytes = (size_t)lay->channels * (size_t)lay->height * (size_t)lay->width;
    const int labelled = lay->label_width > 0;
    const uint32_t limit = lay->num_classes > 0 ? (uint32_t)lay->num_classes : DLT_DATA_MAX_CLASSES;
    size_t chunk = CHUNK_BYTES / R;
    if (chunk < 1) chunk = 1;
    dlt_data_sample sample;
    memset(&sample, 0, sizeof sample);
    sample.dtype = DLT_U8;
    sample.image = 1;
    sample.ndim = 3;
    sample.shape[0] = lay->channels;
    sample.shape[1] = lay->height;
    sample.shape[2] = lay->width;

    dlt_dataset *ds = NULL;
    uint8_t *raw = NULL, *pix = NULL;
    int32_t *lab = NULL;
    uint32_t max_label = 0;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__dataset_new(ctx, &sample, total, 0, F, &ds), fail);
    raw = dlt__host_alloc(ctx, chunk * R);
    pix = dlt__host_alloc(ctx, chunk * img_bytes);
    lab = labelled ? dlt__host_alloc(ctx, (size_t)total * sizeof(int32_t)) : NULL;
    if (!raw || !pix || (labelled && !lab)) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the %zu-record staging buffers",
                      chunk);
        goto fail;
    }
    int64_t base = 0;
    for (int i = 0; i < nfiles; i++) {
        dlt_record_file *rf = &files[i];
        for (int64_t r0 = 0; r0 < rf->records; r0 += (int64_t)chunk) {
            int64_t k = rf->records - r0 < (int64_t)chunk ? rf->records - r0 : (int64_t)chunk;
            size_t want = (size_t)k * R;
            errno = 0;
            size_t got = fread(raw, 1, want, rf->f);
            if (got != want) {
                int e = errno;
                if (ferror(rf->f))
                    st = dlt__err(DLT_ERR_IO, F, "%s: read failed in record %lld: %s", rf->path,
                                  (long long)(r0 + (int64_t)(got / R)),
                                  dlt__errno_text(e ? e : EIO, eb, sizeof eb));
                else
                    st = dlt__err(DLT_ERR_IO, F,
                                  "%s: the file ended in record %lld (it shrank while being read)",
                                  rf->path, (long long)(r0 + (int64_t)(got / R)));
                goto fail;
            }
            for (int64_t r = 0; r < k; r++) {
                const uint8_t *rec = raw + (size_t)r * R;
                if (labelled) {
                    uint32_t v = read_label(rec + lay->label_offset, lay->label_width,
                                            lay->label_big_endian);
                    if (v >= limit) {
                        long long off = (long long)lay->header_bytes + (long long)(r0 + r) * (long long)R;
                        if (lay->num_classes > 0)
                            st = dlt__err(DLT_ERR_FORMAT, F,
                                          "%s: record %lld (byte offset %lld) has label %u; %s "
                                          "labels are 0..%d",
                                          rf->path, (long long)(r0 + r), off, v, lay->what,
                                          lay->num_classes - 1);
                        else
                            st = dlt__err(DLT_ERR_FORMAT, F,
                                          "%s: record %lld (byte offset %lld) has label %u; a "
                                          "dataset has at most %d classes",
                                          rf->path, (long long)(r0 + r), off, v, DLT_DATA_MAX_CLASSES);
                        goto fail;
                    }
                    if (v > max_label) max_label = v;
                    lab[base + r0 + r] = (int32_t)v;
                }
                memcpy(pix + (size_t)r * img_bytes, rec + lay->image_offset, img_bytes);
            }
            DLT_CHECK_GOTO(st, dlt__dataset_upload(ds, base + r0, k, pix, NULL, F), fail);
        }
        base += rf->records;
    }
    if (labelled) {
        int32_t classes = lay->num_classes > 0 ? lay->num_classes : (int32_t)max_label + 1;
        DLT_CHECK_GOTO(st, dlt__dataset_set_labels(ds, lab, classes, F), fail);
    }
    free(raw);
    free(pix);
    free(lab);
    *out = ds;
    return DLT_OK;
fail:
    free(raw);
    free(pix);
    free(lab);
    dlt_dataset_destroy(ds);
    return st;
}

/* ---- dlt_record_files_open ---- */

/* CIFAR-10's batch-file layout */
static const dlt_record_file_options RF_DEFAULTS = {.size = sizeof(dlt_record_file_options),
                                                    .label_width = 1,
                                                    .label_big_endian = 0,
                                                    .num_classes = 10,
                                                    .header_bytes = 0,
                                                    .record_bytes = 1 + DLT_DATA_IMAGE_BYTES,
                                                    .label_offset = 0,
                                                    .image_offset = 1,
                                                    .channels = DLT_DATA_C,
                                                    .height = DLT_DATA_H,
                                                    .width = DLT_DATA_W};
/* the first release's struct ends after width */
#define RF_OPTIONS_V1 DLT__FIELD_END(dlt_record_file_options, width)

void dlt_record_file_options_init(dlt_record_file_options *o, uint32_t size) {
    dlt__options_fill(o, size, &RF_DEFAULTS, sizeof RF_DEFAULTS, RF_OPTIONS_V1);
}

static dlt_status check_layout(const dlt_record_file_options *o, const char *F) {
    if (o->record_bytes < 1 || o->record_bytes > MAX_RECORD_BYTES)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "record_bytes %lld is outside 1..%lld",
                        (long long)o->record_bytes, (long long)MAX_RECORD_BYTES);
    if (o->header_bytes < 0 || o->header_bytes > MAX_HEADER_BYTES)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "header_bytes %lld is outside 0..%lld",
                        (long long)o->header_bytes, (long long)MAX_HEADER_BYTES);
    if (o->channels < 1 || o->channels > DLT_DATA_MAX_CHANNELS || o->height < 1 || o->width < 1 ||
        o->height > DLT_DATA_MAX_SIDE || o->width > DLT_DATA_MAX_SIDE)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the image shape [%d, %d, %d] needs 1..%d channels and sides of 1..%d",
                        o->channels, o->height, o->width, DLT_DATA_MAX_CHANNELS, DLT_DATA_MAX_SIDE);
    int64_t hw = (int64_t)o->height * o->width; /* int32 * int32 fits */
    int64_t img = hw <= o->record_bytes ? hw * o->channels : hw;
    if (o->image_offset < 0 || img > o->record_bytes || o->image_offset > o->record_bytes - img)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the image (%lld bytes at offset %lld) does not fit in a %lld-byte record",
                        (long long)img, (long long)o->image_offset, (long long)o->record_bytes);
    if (o->label_width != 0 && o->label_width != 1 && o->label_width != 2 && o->label_width != 4)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "label_width %d is not 0, 1, 2 or 4",
                        o->label_width);
    if (o->label_width > 0 &&
        (o->label_offset < 0 || o->label_offset > o->record_bytes - o->label_width))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the label (%d bytes at offset %lld) does not fit in a %lld-byte record",
                        o->label_width, (long long)o->label_offset, (long long)o->record_bytes);
    if (o->label_big_endian != 0 && o->label_big_endian != 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "label_big_endian must be 0 or 1, got %d",
                        o->label_big_endian);
    if (o->num_classes < 0 || o->num_classes > DLT_DATA_MAX_CLASSES)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "num_classes %d is outside 0..%d",
                        o->num_classes, DLT_DATA_MAX_CLASSES);
    return DLT_OK;
}

dlt_status dlt_record_files_open(dlt_ctx *ctx, const char *const *paths, int32_t n_paths,
                                 const dlt_record_file_options *o, dlt_dataset **out) {
    static const char *F = "dlt_record_files_open";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(paths, F);
    DLT_NULL_CHECK(out, F);
    if (n_paths < 1 || n_paths > 4096)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n_paths %d is outside 1..4096", n_paths);
    for (int32_t i = 0; i < n_paths; i++)
        if (!paths[i]) return dlt__err(DLT_ERR_NULL_POINTER, F, "paths[%d] is NULL", i);
    dlt_record_file_options opt = RF_DEFAULTS;
    DLT_CHECK(dlt__options_read(&opt, sizeof opt, o, RF_OPTIONS_V1, "dlt_record_file_options", F));
    DLT_CHECK(check_layout(&opt, F));
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    dlt_record_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.header_bytes = opt.header_bytes;
    lay.record_bytes = opt.record_bytes;
    lay.image_offset = opt.image_offset;
    lay.label_offset = opt.label_offset;
    lay.label_width = opt.label_width;
    lay.label_big_endian = opt.label_big_endian;
    lay.num_classes = opt.num_classes;
    lay.channels = opt.channels;
    lay.height = opt.height;
    lay.width = opt.width;
    lay.what = "record file";

    dlt_record_file *files = dlt__host_calloc(ctx, (size_t)n_paths, sizeof *files);
    if (!files) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d file slots", n_paths);
    dlt_status st = DLT_OK;
    int opened = 0;
    for (; opened < n_paths; opened++) {
        int absent = 0;
        files[opened].path = dlt__host_strdup(ctx, paths[opened]);
        if (!files[opened].path) {
            st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate a path");
            break;
        }
        st = dlt__record_file_open(paths[opened], &lay, 0, F, &files[opened], &absent);
        if (st != DLT_OK) break;
    }
    if (st == DLT_OK) st = dlt__record_files_load(ctx, files, n_paths, &lay, F, out);
    /* the slot being filled when a failure struck may hold a path too */
    dlt__record_files_close(files, opened < n_paths ? opened + 1 : n_paths);
    free(files);
    return st;
}
