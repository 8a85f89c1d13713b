/*
 * safetensors_write.c - writing the safetensors format atomically, and the public
 * dlt_safetensors_save. The layout and reading rules are in safetensors.c.
 *
 * The header is built with cJSON (strings escaped by it; integers as raw JSON text, so
 * every uint64 offset prints exactly: a cJSON number is a double). Data are ordered by
 * element size, largest first, as the safetensors library does, so every tensor starts at a
 * multiple of its element size (the header is padded with spaces to a multiple of 8). Names
 * the reader would refuse are refused here (empty, "__metadata__", not UTF-8, control
 * characters): the library never writes a file it cannot read.
 *
 * Atomicity: the bytes go to a temporary file in path's directory, "<path>.tmp-<pid>-<n>"
 * created with O_CREAT | O_EXCL | O_NOFOLLOW (a file or symlink already there under that
 * name is never opened, let alone written through: the next name is tried), written with
 * plain write() calls (no stdio buffer whose flush could fail unnoticed), fsynced, closed and
 * renamed over path; the directory is fsynced after the rename. A failed save removes its
 * temporary file and leaves path as it was. The rename replaces path itself: when path is
 * a symlink, the link is replaced by the new file and its old target is left alone.
 * The file operations go through one set of helpers, which dlt_testing_fail_write can make
 * fail.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "io_internal.h"

typedef struct out_info {
    int32_t dtype, ndim;
    const int64_t *shape;
    size_t nbytes;
    uint32_t esize;
} out_info;

static dlt_status describe(const dlt__st_out *e, const char *func, out_info *o) {
    if (!e->name) return dlt__err(DLT_ERR_NULL_POINTER, func, "a tensor name is NULL");
    if (!e->name[0] || strcmp(e->name, "__metadata__") == 0 || !dlt__st_name_ok(e->name))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "tensor name '%.200s' is empty, reserved, not UTF-8 or holds a control "
                        "character", e->name);
    if (e->host) {
        o->dtype = e->dtype;
        o->ndim = e->ndim;
        o->shape = e->shape;
    } else {
        if (!e->tensor) return dlt__err(DLT_ERR_NULL_POINTER, func, "tensor '%.200s' is NULL", e->name);
        o->dtype = e->tensor->dtype;
        o->ndim = e->tensor->ndim;
        o->shape = e->tensor->shape;
    }
    o->esize = dlt__st_dtype_size(o->dtype);
    if (!o->esize || o->dtype == DLT__ST_OTHER || o->ndim < 0 || o->ndim > DLT_MAX_DIMS)
        return dlt__err(DLT_ERR_DTYPE, func, "tensor '%.200s' has a dtype (%d) safetensors files "
                        "cannot hold here", e->name, o->dtype);
    size_t n = o->esize;
    for (int32_t i = 0; i < o->ndim; i++)
        if (o->shape[i] < 0 || dlt__mul_overflow(n, (size_t)o->shape[i], &n))
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "tensor '%.200s' has a bad shape", e->name);
    o->nbytes = n;
    return DLT_OK;
}

/* ---- the header, with cJSON ---- */

/* An integer as raw JSON text (exact for every uint64, unlike a cJSON number). */
static cJSON *json_int(uint64_t v) {
    char t[24];
    snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(t);
}

/* The header for the entries in data order ord[], padded with spaces to a multiple of 8;
 * NULL when out of memory. The caller frees it with cJSON_free. */
static char *build_header(const dlt__st_out *e, const out_info *info, const int32_t *ord, int32_t n,
                          size_t *len) {
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject();
    char producer[64];
    snprintf(producer, sizeof producer, "libdltrain %s", dlt_version_string());
    int ok = root && meta && cJSON_AddItemToObject(root, "__metadata__", meta);
    if (!ok) cJSON_Delete(meta);
    ok = ok && cJSON_AddStringToObject(meta, "format", "pt") && cJSON_AddStringToObject(meta, "producer", producer);
    uint64_t off = 0;
    for (int32_t k = 0; ok && k < n; k++) {
        const int32_t i = ord[k];
        cJSON *t = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
        ok = t && shape && offs && cJSON_AddStringToObject(t, "dtype", dlt__st_dtype_name(info[i].dtype));
        for (int32_t d = 0; ok && d < info[i].ndim; d++)
            ok = cJSON_AddItemToArray(shape, json_int((uint64_t)info[i].shape[d]));
        ok = ok && cJSON_AddItemToArray(offs, json_int(off));
        off += info[i].nbytes;
        ok = ok && cJSON_AddItemToArray(offs, json_int(off));
        if (ok && cJSON_AddItemToObject(t, "shape", shape)) shape = NULL;
        else ok = 0;
        if (ok && cJSON_AddItemToObject(t, "data_offsets", offs)) offs = NULL;
        else ok = 0;
        if (ok && cJSON_AddItemToObject(root, e[i].name, t)) t = NULL;
        else ok = 0;
        cJSON_Delete(t);
        cJSON_Delete(shape);
        cJSON_Delete(offs);
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return NULL;
    size_t l = strlen(text), padded = (l + 7) / 8 * 8;
    char *out = cJSON_malloc(padded + 1);
    if (out) {
        memcpy(out, text, l);
        memset(out + l, ' ', padded - l);
        out[padded] = '\0';
        *len = padded;
    }
    cJSON_free(text);
    return out;
}

/* ---- file operations ----
 * Every operation of a save that can fail on a full or broken disk goes through these
 * helpers, so dlt_testing_fail_write can make any one of them fail: each write() of file
 * data (a failing one first writes half its bytes, as a disk filling up does, then reports
 * ENOSPC), the fsync, the close and the rename (EIO). */

static _Atomic int64_t g_fail_io; /* > 0: the operation that brings it to 0 fails */

dlt_status dlt_testing_fail_write(int64_t n) {
    atomic_store(&g_fail_io, n > 0 ? n : 0);
    return DLT_OK;
}

static int io_should_fail(void) {
    int64_t c = atomic_load(&g_fail_io);
    while (c > 0)
        if (atomic_compare_exchange_weak(&g_fail_io, &c, c - 1)) return c == 1;
    return 0;
}

/* Writes all n bytes (resuming after short writes and EINTR); -1 with errno on failure. */
static int io_write_all(int fd, const void *p, size_t n) {
    const char *q = p;
    if (io_should_fail()) {
        ssize_t w = n > 1 ? write(fd, q, n / 2) : 0;
        (void)w;
        errno = ENOSPC;
        return -1;
    }
    while (n > 0) {
        ssize_t w = write(fd, q, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        q += w;
        n -= (size_t)w;
    }
    return 0;
}

static int io_fsync(int fd) {
    if (io_should_fail()) {
        errno = EIO;
        return -1;
    }
    return fsync(fd);
}

/* Closes fd in every case. */
static int io_close(int fd) {
    int rc = close(fd);
    if (io_should_fail()) {
        errno = EIO;
        return -1;
    }
    return rc;
}

static int io_rename(const char *from, const char *to) {
    if (io_should_fail()) {
        errno = EIO;
        return -1;
    }
    return rename(from, to);
}

/* Creates a new temporary file beside path: "<path>.tmp-<pid>-<n>", exclusively and without
 * following a symlink (O_EXCL alone already refuses any existing name, a dangling link
 * included). Names taken by someone else are skipped. Returns the descriptor, or -1 with
 * errno; tmp receives the name. */
static int create_temp(const char *path, char *tmp, size_t cap) {
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t base = ((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30)) & 0xffffffffu;
    for (int attempt = 0; attempt < 64; attempt++) {
        uint64_t n = base + atomic_fetch_add(&counter, 1);
        snprintf(tmp, cap, "%s.tmp-%ld-%llx", path, (long)getpid(), (unsigned long long)n);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

/* fsync of the directory holding path, so the rename itself is durable (best effort: some
 * file systems refuse fsync on directories). */
static void sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* Writes the bytes of one tensor entry (logical order) to fd, staging through *hb. */
static dlt_status write_tensor(int fd, const dlt_tensor *t, size_t nbytes, void **hb,
                               size_t *hcap, const char *path, const char *func) {
    if (nbytes == 0) return DLT_OK;
    if (*hcap < nbytes) {
        void *p = realloc(*hb, nbytes);
        if (!p) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %zu staging bytes", nbytes);
        *hb = p;
        *hcap = nbytes;
    }
    dlt_tensor *tmp = NULL;
    const dlt_tensor *src = t;
    dlt_status st = DLT_OK;
    if (t->format != DLT_FORMAT_CONTIGUOUS) { /* safetensors holds the logical order */
        st = dlt_tensor_to_format(t, DLT_FORMAT_CONTIGUOUS, &tmp);
        src = tmp;
    }
    if (st == DLT_OK) st = dlt_tensor_copy_to_host(src, *hb, nbytes);
    dlt_tensor_release(tmp);
    if (st != DLT_OK) return dlt__err_wrap(st, func);
    if (io_write_all(fd, *hb, nbytes) != 0)
        return dlt__err(DLT_ERR_IO, func, "cannot write '%s': %s", path, strerror(errno));
    return DLT_OK;
}

static _Thread_local const dlt__st_out *g_sort_out;
static _Thread_local const out_info *g_sort_info;
static int cmp_esize(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (g_sort_info[i].esize != g_sort_info[j].esize)
        return g_sort_info[i].esize > g_sort_info[j].esize ? -1 : 1;
    return i < j ? -1 : i > j; /* stable */
}
static int cmp_outname(const void *a, const void *b) {
    return strcmp(g_sort_out[*(const int32_t *)a].name, g_sort_out[*(const int32_t *)b].name);
}

dlt_status dlt__safetensors_write(const char *path, const dlt__st_out *e, int32_t n,
                                  const char *func) {
    if (!path) return dlt__err(DLT_ERR_NULL_POINTER, func, "argument 'path' is NULL");
    if (n < 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "n %d is negative", n);
    if (n > 0 && !e) return dlt__err(DLT_ERR_NULL_POINTER, func, "no entries given");
    dlt_status st = DLT_OK;
    out_info *info = calloc((size_t)(n ? n : 1), sizeof *info);
    int32_t *ord = calloc((size_t)(n ? n : 1), sizeof *ord);
    size_t tmp_cap = strlen(path) + 64;
    char *tmp = malloc(tmp_cap), *hdr = NULL;
    size_t hdr_len = 0;
    int fd = -1;
    void *hb = NULL;
    size_t hcap = 0;
    if (!info || !ord || !tmp) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the header of %d tensors", n);
        goto done;
    }
    tmp[0] = '\0';
    for (int32_t i = 0; i < n && st == DLT_OK; i++) st = describe(&e[i], func, &info[i]);
    if (st != DLT_OK) goto done;
    /* unique names */
    for (int32_t i = 0; i < n; i++) ord[i] = i;
    g_sort_out = e;
    qsort(ord, (size_t)n, sizeof *ord, cmp_outname);
    for (int32_t i = 1; i < n; i++)
        if (strcmp(e[ord[i - 1]].name, e[ord[i]].name) == 0) {
            st = dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "tensor name '%.200s' appears twice",
                          e[ord[i]].name);
            goto done;
        }
    /* data order: element size descending, then as given */
    for (int32_t i = 0; i < n; i++) ord[i] = i;
    g_sort_info = info;
    qsort(ord, (size_t)n, sizeof *ord, cmp_esize);
    hdr = build_header(e, info, ord, n, &hdr_len);
    if (!hdr) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot build the JSON header of %d tensors", n);
        goto done;
    }

    fd = create_temp(path, tmp, tmp_cap);
    if (fd < 0) {
        st = dlt__err(DLT_ERR_IO, func, "cannot create a temporary file beside '%s': %s", path,
                      strerror(errno));
        tmp[0] = '\0'; /* nothing to remove */
        goto done;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr_len >> (8 * i));
    if (io_write_all(fd, len8, 8) != 0 || io_write_all(fd, hdr, hdr_len) != 0) {
        st = dlt__err(DLT_ERR_IO, func, "cannot write '%s': %s", tmp, strerror(errno));
        goto done;
    }
    for (int32_t k = 0; k < n && st == DLT_OK; k++) {
        const int32_t i = ord[k];
        if (e[i].host) {
            if (info[i].nbytes && io_write_all(fd, e[i].host, info[i].nbytes) != 0)
                st = dlt__err(DLT_ERR_IO, func, "cannot write '%s': %s", tmp, strerror(errno));
        } else {
            st = write_tensor(fd, e[i].tensor, info[i].nbytes, &hb, &hcap, tmp, func);
        }
    }
    if (st != DLT_OK) goto done;
    if (io_fsync(fd) != 0) {
        st = dlt__err(DLT_ERR_IO, func, "cannot flush '%s': %s", tmp, strerror(errno));
        goto done;
    }
    int rc = io_close(fd);
    fd = -1;
    if (rc != 0) {
        st = dlt__err(DLT_ERR_IO, func, "cannot close '%s': %s", tmp, strerror(errno));
        goto done;
    }
    if (io_rename(tmp, path) != 0) {
        st = dlt__err(DLT_ERR_IO, func, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        goto done;
    }
    tmp[0] = '\0';
    sync_dir(path);
done:
    if (fd >= 0) close(fd);
    if (tmp && tmp[0] && st != DLT_OK) unlink(tmp);
    free(tmp);
    cJSON_free(hdr);
    free(hb);
    free(ord);
    free(info);
    return st;
}

dlt_status dlt_safetensors_save(const char *path, const char *const *names,
                                dlt_tensor *const *tensors, int32_t n) {
    static const char *F = "dlt_safetensors_save";
    DLT_NULL_CHECK(path, F);
    if (n < 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n %d is negative", n);
    if (n > 0) {
        DLT_NULL_CHECK(names, F);
        DLT_NULL_CHECK(tensors, F);
    }
    dlt__st_out *e = calloc((size_t)(n ? n : 1), sizeof *e);
    if (!e) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d entries", n);
    dlt_status st = DLT_OK;
    for (int32_t i = 0; i < n && st == DLT_OK; i++) {
        if (!tensors[i]) st = dlt__err(DLT_ERR_NULL_POINTER, F, "tensors[%d] is NULL", i);
        else if (!names[i]) st = dlt__err(DLT_ERR_NULL_POINTER, F, "names[%d] is NULL", i);
        else st = dlt__ctx_ok(tensors[i]->ctx, F);
        e[i].name = names[i];
        e[i].tensor = tensors[i];
    }
    if (st == DLT_OK) st = dlt__safetensors_write(path, e, n, F);
    free(e);
    return st;
}

/* ---- small files (config.json beside a checkpoint) ---- */

dlt_status dlt__write_bytes_atomic(const char *path, const void *data, size_t n, const char *func) {
    char tmp[4200];
    if (strlen(path) + 64 > sizeof tmp) return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "path too long: %.200s", path);
    const int fd = create_temp(path, tmp, sizeof tmp);
    if (fd < 0) return dlt__err(DLT_ERR_IO, func, "cannot create a temporary file beside %s: %s", path, strerror(errno));
    const char *p = data;
    size_t left = n;
    int ok = 1;
    while (ok && left > 0) {
        const ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) ok = 0;
        else p += w, left -= (size_t)w;
    }
    int e = errno;
    if (ok && io_fsync(fd) != 0) ok = 0, e = errno;
    if (close(fd) != 0 && ok) ok = 0, e = errno;
    if (ok && io_rename(tmp, path) != 0) ok = 0, e = errno;
    if (!ok) {
        unlink(tmp);
        return dlt__err(DLT_ERR_IO, func, "cannot write %s: %s", path, strerror(e ? e : EIO));
    }
    sync_dir(path);
    return DLT_OK;
}
