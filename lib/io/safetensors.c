/*
 * safetensors.c - the safetensors format (https://github.com/huggingface/safetensors):
 * a validating reader, an atomic writer, and the public dlt_safetensors_save /
 * dlt_safetensors_load_tensor.
 *
 * Layout: u64 little-endian N, then N bytes of JSON header
 *   {"__metadata__": {"k": "v", ...},            (optional; string values only)
 *    "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * then the data section; offsets are relative to its start. Reading applies the rules of
 * the safetensors library itself: the header starts with '{' and may be padded with
 * whitespace; every tensor's byte range is dtype size x shape; the ranges, ordered by
 * offset, tile the data section exactly from 0 to its end (no gap, no overlap, no trailing
 * bytes); names are unique. Everything is checked before anything is used, with
 * overflow-checked arithmetic, and the reader never reads outside the given buffer: it is
 * meant to face hostile files (a fuzzer drives dlt__safetensors_parse).
 *
 * Writing orders the data by element size, largest first, as the safetensors library does,
 * so every tensor starts at a multiple of its element size (the header is padded with
 * spaces to a multiple of 8). The file is written as "<path>.tmp-<pid>" with plain write()
 * calls (no stdio buffer whose flush could fail unnoticed), fsynced, closed and renamed over
 * path; the directory is fsynced after the rename. A failed save removes its temporary file
 * and leaves path as it was. The file operations go through one set of helpers, which
 * dlt_testing_fail_write can make fail.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "io_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data are little-endian; this host is not (add byte swapping here)"
#endif

/* ---- dtypes ---- */

static const struct {
    const char *name;
    int32_t code;
    uint32_t size;
} ST_DTYPES[] = {
    {"F32", DLT_F32, 4},         {"F16", DLT_F16, 2},         {"BF16", DLT_BF16, 2},
    {"I32", DLT_I32, 4},         {"I64", DLT_I64, 8},         {"U8", DLT_U8, 1},
    {"F64", DLT__ST_F64, 8},     {"BOOL", DLT__ST_OTHER, 1},  {"I8", DLT__ST_OTHER, 1},
    {"I16", DLT__ST_OTHER, 2},   {"U16", DLT__ST_OTHER, 2},   {"U32", DLT__ST_OTHER, 4},
    {"U64", DLT__ST_OTHER, 8},   {"F8_E5M2", DLT__ST_OTHER, 1}, {"F8_E4M3", DLT__ST_OTHER, 1},
    {"F8_E8M0", DLT__ST_OTHER, 1},
};
#define N_ST_DTYPES ((int)(sizeof ST_DTYPES / sizeof ST_DTYPES[0]))

const char *dlt__st_dtype_name(int32_t dtype) {
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (ST_DTYPES[i].code == dtype && dtype != DLT__ST_OTHER) return ST_DTYPES[i].name;
    return NULL;
}

static uint32_t st_dtype_size(int32_t dtype) {
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (ST_DTYPES[i].code == dtype) return ST_DTYPES[i].size;
    return 0;
}

/* ---- reading ---- */

#define FMT_ERR(...) dlt__err(DLT_ERR_FORMAT, func, __VA_ARGS__)

/* A JSON number that is a non-negative integer representable exactly (<= 2^53). */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

static const char *ws_end(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static _Thread_local const dlt__st_file *g_sort_file; /* qsort has no context argument */
static int cmp_name(const void *a, const void *b) {
    return strcmp(g_sort_file->e[*(const int32_t *)a].name, g_sort_file->e[*(const int32_t *)b].name);
}
static int cmp_offset(const void *a, const void *b) {
    const dlt__st_entry *x = &g_sort_file->e[*(const int32_t *)a];
    const dlt__st_entry *y = &g_sort_file->e[*(const int32_t *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

void dlt__safetensors_free(dlt__st_file *f) {
    if (!f) return;
    free(f->owned);
    free(f->e);
    free(f->by_name);
    free(f->names);
    memset(f, 0, sizeof *f);
}

/* Validates one tensor entry of the header into e (name set by the caller). */
static dlt_status parse_entry(const cJSON *item, const char *name, uint64_t data_size,
                              const char *func, dlt__st_entry *e) {
    if (!cJSON_IsObject(item))
        return FMT_ERR("header entry '%.200s' is not an object", name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !dt->valuestring)
        return FMT_ERR("tensor '%.200s' has no \"dtype\" string", name);
    int k = 0;
    while (k < N_ST_DTYPES && strcmp(ST_DTYPES[k].name, dt->valuestring) != 0) k++;
    if (k == N_ST_DTYPES)
        return FMT_ERR("tensor '%.200s' has unknown dtype '%.40s'", name, dt->valuestring);
    e->dtype = ST_DTYPES[k].code;
    snprintf(e->dtype_name, sizeof e->dtype_name, "%s", ST_DTYPES[k].name);
    if (!cJSON_IsArray(sh)) return FMT_ERR("tensor '%.200s' has no \"shape\" array", name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > DLT_MAX_DIMS)
        return FMT_ERR("tensor '%.200s' has %d dimensions, more than %d", name, nd, DLT_MAX_DIMS);
    e->ndim = nd;
    uint64_t numel = 1;
    int i = 0;
    for (const cJSON *d = sh->child; d; d = d->next, i++) {
        uint64_t v;
        if (!json_uint(d, &v))
            return FMT_ERR("tensor '%.200s': shape entry %d is not a non-negative integer", name, i);
        e->shape[i] = (int64_t)v;
        /* the element count must stay below 2^62 so that bytes fit too */
        if (v != 0 && numel > (((uint64_t)1 << 62) / v))
            return FMT_ERR("tensor '%.200s': the element count of its shape overflows", name);
        numel *= v;
    }
    e->numel = (int64_t)numel;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !json_uint(of->child, &e->begin) ||
        !json_uint(of->child->next, &e->end))
        return FMT_ERR("tensor '%.200s' needs \"data_offsets\": [begin, end] of non-negative integers",
                       name);
    if (e->begin > e->end)
        return FMT_ERR("tensor '%.200s' has data_offsets [%llu, %llu] with begin > end", name,
                       (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > data_size)
        return FMT_ERR("tensor '%.200s' has data_offsets [%llu, %llu] out of range: the data "
                       "section has %llu bytes (truncated file?)",
                       name, (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)data_size);
    uint64_t need = numel * st_dtype_size(e->dtype); /* < 2^65? no: numel < 2^62, size <= 8 */
    if (numel > (((uint64_t)1 << 62) / 8) || e->end - e->begin != need)
        return FMT_ERR("tensor '%.200s' has %llu bytes of data but dtype %s with %llu elements "
                       "needs %llu",
                       name, (unsigned long long)(e->end - e->begin), e->dtype_name,
                       (unsigned long long)numel, (unsigned long long)need);
    return DLT_OK;
}

dlt_status dlt__safetensors_parse(const void *buf, size_t size, const char *func, dlt__st_file *out) {
    memset(out, 0, sizeof *out);
    const unsigned char *b = buf;
    if (!b && size) return dlt__err(DLT_ERR_NULL_POINTER, func, "argument 'buf' is NULL");
    if (size < 8)
        return FMT_ERR("truncated file: %zu bytes, fewer than the 8-byte header length", size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    if (hlen > (uint64_t)(size - 8))
        return FMT_ERR("bad header length %llu: only %zu bytes follow it (truncated or corrupt file)",
                       (unsigned long long)hlen, size - 8);
    if (hlen > DLT__ST_MAX_HEADER)
        return FMT_ERR("bad header length %llu: more than the %llu-byte limit",
                       (unsigned long long)hlen, (unsigned long long)DLT__ST_MAX_HEADER);
    const char *h = (const char *)b + 8;
    if (hlen < 2 || h[0] != '{')
        return FMT_ERR("the header does not start with a JSON object ('{')");
    const uint64_t data_size = (uint64_t)(size - 8) - hlen;
    const unsigned char *data = b + 8 + hlen;

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(h, (size_t)hlen, &end, 0);
    if (!root) {
        size_t at = (end && end >= h && end <= h + hlen) ? (size_t)(end - h) : 0;
        return FMT_ERR("the header is not valid JSON (error near byte %zu of %llu)", at,
                       (unsigned long long)hlen);
    }
    dlt_status st = DLT_OK;
    if (!end || ws_end(end, h + hlen) != h + hlen) {
        st = FMT_ERR("the header has bytes after its JSON object (only whitespace padding is allowed)");
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        st = FMT_ERR("the header is not a JSON object");
        goto fail;
    }
    /* count the tensors; validate __metadata__ */
    int64_t n = 0;
    size_t names_len = 0;
    int meta_seen = 0;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!it->string) {
            st = FMT_ERR("a header entry has no name");
            goto fail;
        }
        if (strcmp(it->string, "__metadata__") == 0) {
            if (meta_seen++) {
                st = FMT_ERR("duplicate name '__metadata__' in the header");
                goto fail;
            }
            if (!cJSON_IsObject(it)) {
                st = FMT_ERR("'__metadata__' must be an object of strings");
                goto fail;
            }
            for (const cJSON *kv = it->child; kv; kv = kv->next)
                if (!cJSON_IsString(kv)) {
                    st = FMT_ERR("'__metadata__' value '%.200s' is not a string",
                                 kv->string ? kv->string : "");
                    goto fail;
                }
            continue;
        }
        n++;
        names_len += strlen(it->string) + 1; /* bounded by hlen: no overflow */
        if (n > INT32_MAX / 2) {
            st = FMT_ERR("too many tensors in the header");
            goto fail;
        }
    }
    out->e = calloc((size_t)(n ? n : 1), sizeof *out->e);
    out->by_name = calloc((size_t)(n ? n : 1), sizeof *out->by_name);
    out->names = malloc(names_len ? names_len : 1);
    if (!out->e || !out->by_name || !out->names) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the index of %lld tensors",
                      (long long)n);
        goto fail;
    }
    out->n = (int32_t)n;
    out->size = size;
    char *np = out->names;
    int32_t k = 0;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) continue;
        size_t l = strlen(it->string) + 1;
        memcpy(np, it->string, l);
        dlt__st_entry *e = &out->e[k];
        e->name = np;
        np += l;
        st = parse_entry(it, e->name, data_size, func, e);
        if (st != DLT_OK) goto fail;
        e->data = data + e->begin;
        out->by_name[k] = k;
        k++;
    }
    cJSON_Delete(root);
    root = NULL;

    g_sort_file = out;
    /* unique names */
    qsort(out->by_name, (size_t)out->n, sizeof *out->by_name, cmp_name);
    for (int32_t i = 1; i < out->n; i++)
        if (strcmp(out->e[out->by_name[i - 1]].name, out->e[out->by_name[i]].name) == 0) {
            st = FMT_ERR("duplicate tensor name '%.200s' in the header", out->e[out->by_name[i]].name);
            goto fail;
        }
    /* offsets tile the data section */
    int32_t *ord = malloc((size_t)(out->n ? out->n : 1) * sizeof *ord);
    if (!ord) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the offset index");
        goto fail;
    }
    for (int32_t i = 0; i < out->n; i++) ord[i] = i;
    qsort(ord, (size_t)out->n, sizeof *ord, cmp_offset);
    uint64_t pos = 0;
    for (int32_t i = 0; i < out->n && st == DLT_OK; i++) {
        const dlt__st_entry *e = &out->e[ord[i]];
        if (e->begin < pos)
            st = FMT_ERR("tensor '%.200s' (data_offsets [%llu, %llu]) overlaps tensor '%.200s'",
                         e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                         out->e[ord[i - 1]].name);
        else if (e->begin > pos)
            st = FMT_ERR("data_offsets are not contiguous: tensor '%.200s' starts at %llu but the "
                         "previous data end at %llu",
                         e->name, (unsigned long long)e->begin, (unsigned long long)pos);
        pos = e->end;
    }
    free(ord);
    if (st != DLT_OK) goto fail;
    if (pos != data_size) {
        st = FMT_ERR("the tensors cover %llu bytes but the data section has %llu (truncated file "
                     "or trailing bytes)",
                     (unsigned long long)pos, (unsigned long long)data_size);
        goto fail;
    }
    return DLT_OK;
fail:
    cJSON_Delete(root);
    dlt__safetensors_free(out);
    return st;
}

dlt_status dlt__safetensors_read(const char *path, const char *func, dlt__st_file *out) {
    memset(out, 0, sizeof *out);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below as not a
     * regular file); the flag changes nothing for regular files */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return dlt__err(DLT_ERR_IO, func, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return dlt__err(DLT_ERR_IO, func, "'%s' is not a regular file", path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return dlt__err(DLT_ERR_IO, func, "cannot open '%s': %s", path, strerror(e));
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX / 2) {
        fclose(f);
        return dlt__err(DLT_ERR_IO, func, "'%s' is too large (%lld bytes)", path,
                        (long long)sb.st_size);
    }
    size_t size = (size_t)sb.st_size;
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) {
        fclose(f);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %zu bytes to read '%s'", size,
                        path);
    }
    size_t got = size ? fread(buf, 1, size, f) : 0;
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (got != size) {
        free(buf);
        return dlt__err(DLT_ERR_IO, func, "cannot read '%s': %s", path,
                        err ? strerror(err) : "the file shrank while being read");
    }
    dlt_status st = dlt__safetensors_parse(buf, size, func, out);
    if (st != DLT_OK) {
        free(buf);
        /* name the file in the message */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dlt_last_error());
        const char *body = msg;
        size_t fl = strlen(func);
        if (strncmp(msg, func, fl) == 0 && msg[fl] == ':') body = msg + fl + 2;
        return dlt__err(st, func, "'%s': %s", path, body);
    }
    out->owned = buf;
    return DLT_OK;
}

int32_t dlt__safetensors_find(const dlt__st_file *f, const char *name) {
    int32_t lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->e[f->by_name[mid]].name, name);
        if (c == 0) return f->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* ---- writing ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *s, const char *src, size_t len) {
    if (s->oom) return;
    if (s->n + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + len + 1) cap *= 2;
        char *q = realloc(s->p, cap);
        if (!q) {
            s->oom = 1;
            return;
        }
        s->p = q;
        s->cap = cap;
    }
    memcpy(s->p + s->n, src, len);
    s->n += len;
    s->p[s->n] = '\0';
}
static void sb_str(sbuf *s, const char *str) { sb_put(s, str, strlen(str)); }
static void sb_u64(sbuf *s, uint64_t v) {
    char t[24];
    snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sb_str(s, t);
}
/* A JSON string literal (the name was checked to be UTF-8). */
static void sb_json_string(sbuf *s, const char *str) {
    sb_put(s, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)str; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char esc[2] = {'\\', (char)*c};
            sb_put(s, esc, 2);
        } else if (*c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            sb_str(s, esc);
        } else {
            sb_put(s, (const char *)c, 1);
        }
    }
    sb_put(s, "\"", 1);
}

static int valid_utf8(const char *str) {
    const unsigned char *c = (const unsigned char *)str;
    while (*c) {
        int len = *c < 0x80 ? 1 : (*c & 0xE0) == 0xC0 ? 2 : (*c & 0xF0) == 0xE0 ? 3 : (*c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || (len == 2 && *c < 0xC2)) return 0;
        for (int i = 1; i < len; i++)
            if ((c[i] & 0xC0) != 0x80) return 0;
        c += len;
    }
    return 1;
}

typedef struct out_info {
    int32_t dtype, ndim;
    const int64_t *shape;
    size_t nbytes;
    uint32_t esize;
} out_info;

static dlt_status describe(const dlt__st_out *e, const char *func, out_info *o) {
    if (!e->name) return dlt__err(DLT_ERR_NULL_POINTER, func, "a tensor name is NULL");
    if (!e->name[0] || strcmp(e->name, "__metadata__") == 0 || !valid_utf8(e->name))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "tensor name '%.200s' is empty, reserved or not UTF-8", e->name);
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
    o->esize = st_dtype_size(o->dtype);
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

/* fsync of the directory holding path, so the rename itself is durable (best effort: some
 * file systems refuse fsync on directories). */
static void sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

dlt_status dlt__safetensors_write(const char *path, const dlt__st_out *e, int32_t n,
                                  const char *func) {
    if (!path) return dlt__err(DLT_ERR_NULL_POINTER, func, "argument 'path' is NULL");
    if (n < 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "n %d is negative", n);
    if (n > 0 && !e) return dlt__err(DLT_ERR_NULL_POINTER, func, "no entries given");
    dlt_status st = DLT_OK;
    out_info *info = calloc((size_t)(n ? n : 1), sizeof *info);
    int32_t *ord = calloc((size_t)(n ? n : 1), sizeof *ord);
    char *tmp = malloc(strlen(path) + 32);
    sbuf hdr = {0};
    int fd = -1;
    void *hb = NULL;
    size_t hcap = 0;
    if (!info || !ord || !tmp) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the header of %d tensors", n);
        goto done;
    }
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

    sb_str(&hdr, "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"libdltrain ");
    sb_str(&hdr, dlt_version_string());
    sb_str(&hdr, "\"}");
    uint64_t off = 0;
    for (int32_t k = 0; k < n; k++) {
        const int32_t i = ord[k];
        sb_str(&hdr, ",");
        sb_json_string(&hdr, e[i].name);
        sb_str(&hdr, ":{\"dtype\":\"");
        sb_str(&hdr, dlt__st_dtype_name(info[i].dtype));
        sb_str(&hdr, "\",\"shape\":[");
        for (int32_t d = 0; d < info[i].ndim; d++) {
            if (d) sb_str(&hdr, ",");
            sb_u64(&hdr, (uint64_t)info[i].shape[d]);
        }
        sb_str(&hdr, "],\"data_offsets\":[");
        sb_u64(&hdr, off);
        sb_str(&hdr, ",");
        off += info[i].nbytes;
        sb_u64(&hdr, off);
        sb_str(&hdr, "]}");
    }
    sb_str(&hdr, "}");
    while (!hdr.oom && hdr.n % 8 != 0) sb_str(&hdr, " ");
    if (hdr.oom) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the JSON header");
        goto done;
    }

    snprintf(tmp, strlen(path) + 32, "%s.tmp-%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = dlt__err(DLT_ERR_IO, func, "cannot create '%s': %s", tmp, strerror(errno));
        tmp[0] = '\0'; /* nothing to remove */
        goto done;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr.n >> (8 * i));
    if (io_write_all(fd, len8, 8) != 0 || io_write_all(fd, hdr.p, hdr.n) != 0) {
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
    free(hdr.p);
    free(hb);
    free(ord);
    free(info);
    return st;
}

/* ---- public ---- */

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

dlt_status dlt_safetensors_load_tensor(dlt_ctx *ctx, const char *path, const char *name,
                                       dlt_tensor **out) {
    static const char *F = "dlt_safetensors_load_tensor";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(name, F);
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    dlt__st_file file;
    DLT_CHECK(dlt__safetensors_read(path, F, &file));
    dlt_status st;
    int32_t i = dlt__safetensors_find(&file, name);
    if (i < 0) {
        st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "'%s' has no tensor named '%.200s'", path, name);
    } else if (file.e[i].dtype > DLT_U8) {
        st = dlt__err(DLT_ERR_DTYPE, F, "tensor '%.200s' in '%s' is %s, which libdltrain tensors "
                      "cannot hold", name, path, file.e[i].dtype_name);
    } else {
        const dlt__st_entry *e = &file.e[i];
        st = dlt_tensor_from_host(ctx, e->dtype, e->shape, e->ndim, DLT_FORMAT_CONTIGUOUS,
                                  e->data, (size_t)(e->end - e->begin), out);
    }
    dlt__safetensors_free(&file);
    return st;
}
