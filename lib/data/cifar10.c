/*
 * cifar10.c - reader for the CIFAR-10 binary release (cifar-10-batches-bin/).
 *
 * Files: data_batch_1.bin .. data_batch_5.bin (training, 10,000 records each in the
 * official release), test_batch.bin, batches.meta.txt (one class name per line). A record
 * is 3073 bytes: the label (0..9), then 1024 red, 1024 green and 1024 blue bytes, rows of
 * 32. Reading, validation and upload are the fixed-record engine's (records.c, with
 * CIFAR-10's layout: a batch name that exists but cannot be read, a dangling or looping
 * symlink included, is an error naming it, never skipped as absent); this file picks the
 * files of a split and the class names.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_internal.h"

#define NUM_TRAIN_FILES 5
#define CIFAR_CLASSES 10
#define META_MAX_BYTES 4096

static dlt_record_layout cifar_layout(void) {
    dlt_record_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.record_bytes = 1 + DLT_DATA_IMAGE_BYTES;
    lay.image_offset = 1;
    lay.label_offset = 0;
    lay.label_width = 1;
    lay.num_classes = CIFAR_CLASSES;
    lay.channels = DLT_DATA_C;
    lay.height = DLT_DATA_H;
    lay.width = DLT_DATA_W;
    lay.what = "CIFAR-10 batch";
    return lay;
}

/* dir + "/" + name in a new host string (NULL on OOM). */
static char *join_path(dlt_ctx *ctx, const char *dir, const char *name) {
    size_t dl = strlen(dir), nl = strlen(name);
    char *p = dlt__host_alloc(ctx, dl + nl + 2);
    if (!p) return NULL;
    memcpy(p, dir, dl);
    size_t k = dl;
    if (dl > 0 && dir[dl - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, nl + 1);
    return p;
}

/* Class names from batches.meta.txt: one per non-blank line, surrounding blanks dropped.
 * Names are cosmetic, so a missing or odd file keeps the defaults instead of failing. */
static dlt_status read_meta(dlt_dataset *ds, const char *path, const char *F) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return DLT_OK;
    struct stat sb;
    char buf[META_MAX_BYTES + 1];
    size_t n = 0;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        while (n < META_MAX_BYTES) {
            ssize_t got = read(fd, buf + n, META_MAX_BYTES - n);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) break;
            n += (size_t)got;
        }
    }
    close(fd);
    buf[n] = '\0';
    int32_t cls = 0;
    size_t i = 0;
    while (i < n && cls < ds->num_classes) {
        size_t start = i;
        while (i < n && buf[i] != '\n') i++;
        size_t end = i;
        i++; /* past the newline */
        while (start < end && (buf[start] == ' ' || buf[start] == '\t' || buf[start] == '\r'))
            start++;
        while (end > start && (buf[end - 1] == ' ' || buf[end - 1] == '\t' || buf[end - 1] == '\r'))
            end--;
        if (end == start) continue;
        DLT_CHECK(dlt__dataset_set_name(ds, cls++, buf + start, end - start, F));
    }
    return DLT_OK;
}

/* Reads the opened batch files into a new dataset, then names its classes. */
static dlt_status load(dlt_ctx *ctx, dlt_record_file *files, int nfiles, const char *meta_path,
                       const char *F, dlt_dataset **out) {
    dlt_record_layout lay = cifar_layout();
    dlt_dataset *ds = NULL;
    DLT_CHECK(dlt__record_files_load(ctx, files, nfiles, &lay, F, &ds));
    dlt_status st = meta_path ? read_meta(ds, meta_path, F) : DLT_OK;
    if (st != DLT_OK) {
        dlt_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return DLT_OK;
}

dlt_status dlt_cifar10_open(dlt_ctx *ctx, const char *dir, int32_t split, dlt_dataset **out) {
    static const char *F = "dlt_cifar10_open";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(dir, F);
    DLT_NULL_CHECK(out, F);
    if (split != DLT_SPLIT_TRAIN && split != DLT_SPLIT_TEST)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "unknown split %d (DLT_SPLIT_TRAIN=0, DLT_SPLIT_TEST=1)", split);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    char eb[128];
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return dlt__err(DLT_ERR_IO, F, "cannot open the CIFAR-10 directory %s: %s", dir,
                        dlt__errno_text(errno, eb, sizeof eb));
    if (!S_ISDIR(sb.st_mode))
        return dlt__err(DLT_ERR_IO, F, "%s is not a directory (for one file use dlt_cifar10_open_file)",
                        dir);

    dlt_record_layout lay = cifar_layout();
    dlt_record_file files[NUM_TRAIN_FILES];
    memset(files, 0, sizeof files);
    int nfiles = 0;
    char *meta = NULL;
    dlt_status st = DLT_OK;
    int nnames = split == DLT_SPLIT_TRAIN ? NUM_TRAIN_FILES : 1;
    for (int i = 0; i < nnames; i++) {
        char name[32];
        if (split == DLT_SPLIT_TRAIN)
            snprintf(name, sizeof name, "data_batch_%d.bin", i + 1);
        else
            snprintf(name, sizeof name, "test_batch.bin");
        dlt_record_file *bf = &files[nfiles];
        bf->path = join_path(ctx, dir, name);
        if (!bf->path) {
            st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate a path");
            goto done;
        }
        int absent = 0;
        DLT_CHECK_GOTO(st, dlt__record_file_open(bf->path, &lay, split == DLT_SPLIT_TRAIN, F, bf,
                                                 &absent), done);
        if (absent) {
            free(bf->path);
            bf->path = NULL;
            continue;
        }
        nfiles++;
    }
    if (nfiles == 0) {
        st = dlt__err(DLT_ERR_IO, F,
                      "no CIFAR-10 training batch (data_batch_1.bin .. data_batch_5.bin) in %s",
                      dir);
        goto done;
    }
    meta = join_path(ctx, dir, "batches.meta.txt");
    if (!meta) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate a path");
        goto done;
    }
    st = load(ctx, files, nfiles, meta, F, out);
done:
    /* the slot being filled when a failure struck may hold a path or a file too */
    dlt__record_files_close(files, nfiles < NUM_TRAIN_FILES ? nfiles + 1 : nfiles);
    free(meta);
    return st;
}

dlt_status dlt_cifar10_open_file(dlt_ctx *ctx, const char *path, dlt_dataset **out) {
    static const char *F = "dlt_cifar10_open_file";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    dlt_record_layout lay = cifar_layout();
    dlt_record_file bf;
    memset(&bf, 0, sizeof bf);
    int absent = 0;
    DLT_CHECK(dlt__record_file_open(path, &lay, 0, F, &bf, &absent));
    bf.path = dlt__host_strdup(ctx, path);
    /* class names from batches.meta.txt beside the file, when there is one */
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
    char *meta = dlt__host_alloc(ctx, dl + sizeof "batches.meta.txt");
    dlt_status st;
    if (!bf.path || !meta) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate a path");
    } else {
        memcpy(meta, path, dl);
        memcpy(meta + dl, "batches.meta.txt", sizeof "batches.meta.txt");
        st = load(ctx, &bf, 1, meta, F, out);
    }
    free(meta);
    dlt__record_files_close(&bf, 1);
    return st;
}
