/*
 * cifar10.c - reader for the CIFAR-10 binary release (cifar-10-batches-bin/).
 *
 * Files: data_batch_1.bin .. data_batch_5.bin (training, 10,000 records each in the
 * official release), test_batch.bin, batches.meta.txt (one class name per line). A record
 * is 3073 bytes: the label (0..9), then 1024 red, 1024 green and 1024 blue bytes, rows of
 * 32 - already the [3, 32, 32] plane order a loader wants, so pixels are copied as they
 * are and labels widened to int32.
 *
 * Files are untrusted input (a fuzzer is pointed at this reader): only regular files are
 * read, a batch name that exists but cannot be read (a dangling or looping symlink, no
 * permission, an unsearchable directory) is an error naming it, never skipped as absent,
 * their size must be a whole number of records, every fread is checked, every label
 * is validated, and nothing is trusted beyond the size fstat reported (a file that shrinks
 * under us is a read error, one that grows is read to the size seen). Refusals name the
 * file and, where one is at fault, the record. The dataset is assembled in chunks of
 * records through a small host staging buffer, so memory holds one copy of the data plus
 * a few MB; on CUDA each chunk is uploaded as it is read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_internal.h"

#define RECORD_BYTES (1 + DLT_DATA_IMAGE_BYTES)
#define CHUNK_RECORDS 1024
#define NUM_TRAIN_FILES 5
#define CIFAR_CLASSES 10
#define META_MAX_BYTES 4096

typedef struct batch_file {
    char *path;
    FILE *f;
    int64_t records;
} batch_file;

static const char *err_text(int e, char *buf, size_t n) {
    if (strerror_r(e, buf, n) != 0) snprintf(buf, n, "error %d", e);
    return buf;
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

/* Opens and sizes one batch file. A missing optional file sets *absent and succeeds. */
static dlt_status open_batch(const char *path, int optional, const char *F, batch_file *bf,
                             int *absent) {
    char eb[128];
    *absent = 0;
    /* O_NONBLOCK: opening a FIFO planted under a batch name must not hang (it is refused
     * below as not a regular file; the flag changes nothing for regular files) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        /* absent means no directory entry at all: a dangling symlink under a batch name is
         * a batch that cannot be read, not a missing one (open says ENOENT for both) */
        struct stat lsb;
        const int dangling = e == ENOENT && lstat(path, &lsb) == 0;
        if (optional && e == ENOENT && !dangling) {
            *absent = 1;
            return DLT_OK;
        }
        if (dangling)
            return dlt__err(DLT_ERR_IO, F, "cannot open %s: it is a symlink to a missing file", path);
        return dlt__err(DLT_ERR_IO, F, "cannot open %s: %s", path, err_text(e, eb, sizeof eb));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return dlt__err(DLT_ERR_IO, F, "cannot read the size of %s: %s", path,
                        err_text(e, eb, sizeof eb));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return dlt__err(DLT_ERR_IO, F, "%s is not a regular file", path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return dlt__err(DLT_ERR_IO, F, "cannot open %s: %s", path, err_text(e, eb, sizeof eb));
    }
    long long size = (long long)sb.st_size;
    if (size == 0) {
        fclose(f);
        return dlt__err(DLT_ERR_FORMAT, F, "%s is empty: a CIFAR-10 batch holds %d-byte records",
                        path, RECORD_BYTES);
    }
    if (size % RECORD_BYTES != 0) {
        fclose(f);
        return dlt__err(DLT_ERR_FORMAT, F,
                        "%s: size %lld is not a multiple of %d: record %lld is truncated (%lld of "
                        "%d bytes)",
                        path, size, RECORD_BYTES, size / RECORD_BYTES, size % RECORD_BYTES,
                        RECORD_BYTES);
    }
    bf->f = f;
    bf->records = size / RECORD_BYTES;
    return DLT_OK;
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

/* Reads nfiles opened batch files, in order, into a new dataset. */
static dlt_status load(dlt_ctx *ctx, batch_file *files, int nfiles, const char *meta_path,
                       const char *F, dlt_dataset **out) {
    char eb[128];
    int64_t total = 0;
    for (int i = 0; i < nfiles; i++) {
        total += files[i].records;
        if (total > INT32_MAX)
            return dlt__err(DLT_ERR_FORMAT, F, "%s brings the record count to %lld (at most %d)",
                            files[i].path, (long long)total, INT32_MAX);
    }
    dlt_dataset *ds = NULL;
    uint8_t *raw = NULL, *pix = NULL;
    int32_t *lab = NULL;
    dlt_status st;
    DLT_CHECK_GOTO(st, dlt__dataset_new(ctx, total, CIFAR_CLASSES, F, &ds), fail);
    raw = dlt__host_alloc(ctx, (size_t)CHUNK_RECORDS * RECORD_BYTES);
    pix = dlt__host_alloc(ctx, (size_t)CHUNK_RECORDS * DLT_DATA_IMAGE_BYTES);
    lab = dlt__host_alloc(ctx, (size_t)CHUNK_RECORDS * sizeof(int32_t));
    if (!raw || !pix || !lab) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the %d-record staging buffers",
                      CHUNK_RECORDS);
        goto fail;
    }
    int64_t base = 0;
    for (int i = 0; i < nfiles; i++) {
        batch_file *bf = &files[i];
        for (int64_t r0 = 0; r0 < bf->records; r0 += CHUNK_RECORDS) {
            int64_t k = bf->records - r0 < CHUNK_RECORDS ? bf->records - r0 : CHUNK_RECORDS;
            size_t want = (size_t)k * RECORD_BYTES;
            errno = 0;
            size_t got = fread(raw, 1, want, bf->f);
            if (got != want) {
                int e = errno;
                if (ferror(bf->f))
                    st = dlt__err(DLT_ERR_IO, F, "%s: read failed in record %lld: %s", bf->path,
                                  (long long)(r0 + (int64_t)(got / RECORD_BYTES)),
                                  err_text(e ? e : EIO, eb, sizeof eb));
                else
                    st = dlt__err(DLT_ERR_IO, F,
                                  "%s: the file ended in record %lld (it shrank while being read)",
                                  bf->path, (long long)(r0 + (int64_t)(got / RECORD_BYTES)));
                goto fail;
            }
            for (int64_t r = 0; r < k; r++) {
                const uint8_t *rec = raw + (size_t)r * RECORD_BYTES;
                if (rec[0] >= CIFAR_CLASSES) {
                    st = dlt__err(DLT_ERR_FORMAT, F,
                                  "%s: record %lld (byte offset %lld) has label %u; CIFAR-10 "
                                  "labels are 0..9",
                                  bf->path, (long long)(r0 + r), (long long)((r0 + r) * RECORD_BYTES),
                                  (unsigned)rec[0]);
                    goto fail;
                }
                lab[r] = rec[0];
                memcpy(pix + (size_t)r * DLT_DATA_IMAGE_BYTES, rec + 1, DLT_DATA_IMAGE_BYTES);
            }
            DLT_CHECK_GOTO(st, dlt__dataset_upload(ds, base + r0, k, pix, lab, F), fail);
        }
        base += bf->records;
    }
    if (meta_path) DLT_CHECK_GOTO(st, read_meta(ds, meta_path, F), fail);
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

static void close_files(batch_file *files, int n) {
    for (int i = 0; i < n; i++) {
        if (files[i].f) fclose(files[i].f);
        free(files[i].path);
        files[i].f = NULL;
        files[i].path = NULL;
    }
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
                        err_text(errno, eb, sizeof eb));
    if (!S_ISDIR(sb.st_mode))
        return dlt__err(DLT_ERR_IO, F, "%s is not a directory (for one file use dlt_cifar10_open_file)",
                        dir);

    batch_file files[NUM_TRAIN_FILES];
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
        batch_file *bf = &files[nfiles];
        bf->path = join_path(ctx, dir, name);
        if (!bf->path) {
            st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate a path");
            goto done;
        }
        int absent = 0;
        DLT_CHECK_GOTO(st, open_batch(bf->path, split == DLT_SPLIT_TRAIN, F, bf, &absent), done);
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
    close_files(files, nfiles < NUM_TRAIN_FILES ? nfiles + 1 : nfiles);
    free(meta);
    return st;
}

dlt_status dlt_cifar10_open_file(dlt_ctx *ctx, const char *path, dlt_dataset **out) {
    static const char *F = "dlt_cifar10_open_file";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    batch_file bf;
    memset(&bf, 0, sizeof bf);
    int absent = 0;
    DLT_CHECK(open_batch(path, 0, F, &bf, &absent));
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
    close_files(&bf, 1);
    return st;
}
