/*
 * safetensors.c - reading the safetensors format (https://github.com/huggingface/safetensors):
 * the validating header reader, entry reads, and the public file handle (dlt_safetensors_*)
 * and dlt_safetensors_load_tensor. The writer is safetensors_write.c.
 *
 * Layout: u64 little-endian N, then N bytes of JSON header
 *   {"__metadata__": {"k": "v", ...},            (optional; string values only)
 *    "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * then the data section; offsets are relative to its start. Reading applies the rules of
 * the safetensors library itself: the header starts with '{' and may be padded with
 * whitespace; every tensor's byte range is dtype size x shape; the ranges, ordered by
 * offset, tile the data section exactly from 0 to its end (no gap, no overlap, no trailing
 * bytes); names are unique. And the rules that make every reader see the same names (cJSON
 * decodes "\u0000" into a NUL that would end our C string early, while Python's json keeps
 * the rest, and decodes a malformed "\u" escape as a NUL too; cJSON keeps the first of two
 * equal fields, serde and Python the last): no NUL anywhere in a string, every "\u" escape
 * four hex digits, no raw control byte inside a string (invalid JSON), names and
 * metadata keys valid UTF-8 without control characters, no duplicate field in an entry or
 * in "__metadata__". Everything is checked with overflow-checked arithmetic against the
 * size fstat gives before any data byte is read: the file is read in two small reads (the
 * length, the header), then only the tensors asked for, with pread. A hostile file costs
 * at most the 100 MB header limit in memory and never a read outside the file.
 *
 * Why pread and not mmap: a mapping of a file another process truncates raises SIGBUS on
 * the next access, a crash the library must not have; pread reports a short read instead.
 * Both copy each byte once (page cache -> tensor), so a load costs the same.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
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

uint32_t dlt__st_dtype_size(int32_t dtype) {
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (ST_DTYPES[i].code == dtype) return ST_DTYPES[i].size;
    return 0;
}

int dlt__st_name_ok(const char *str) {
    const unsigned char *c = (const unsigned char *)str;
    while (*c) {
        int len = *c < 0x80 ? 1 : (*c & 0xE0) == 0xC0 ? 2 : (*c & 0xF0) == 0xE0 ? 3 : (*c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || (len == 2 && *c < 0xC2)) return 0;
        for (int i = 1; i < len; i++)
            if ((c[i] & 0xC0) != 0x80) return 0;
        if (*c < 0x20 || *c == 0x7F) return 0;         /* C0 controls, DEL */
        if (*c == 0xC2 && c[1] >= 0x80 && c[1] <= 0x9F) return 0; /* C1 controls */
        c += len;
    }
    return 1;
}

/* ---- the header ---- */

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

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The raw header's strings, before cJSON decodes them: a NUL (raw or "\u0000") would end
 * the decoded C string early, so a name would read differently here and in other readers;
 * a raw control byte inside a string is invalid JSON (Python's json and serde refuse it).
 * Control characters written as escapes are caught on the decoded names instead. */
static dlt_status scan_strings(const char *h, size_t n, const char *func) {
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c == 0) return FMT_ERR("the header holds a NUL byte at byte %zu", i);
        if (!in_str) {
            in_str = c == '"';
            continue;
        }
        if (c == '"') {
            in_str = 0;
        } else if (c < 0x20) {
            return FMT_ERR("the header has a raw control byte (0x%02x) inside a string at byte %zu",
                           c, i);
        } else if (c == '\\' && i + 1 < n) {
            i++;
            if (h[i] == 'u') {
                /* exactly four hex digits: cJSON decodes a malformed \u escape (such as
                 * "\u0" followed by other bytes) as a NUL instead of refusing it */
                int v = 0;
                for (int k = 1; k <= 4; k++) {
                    int d = i + k < n ? hexval(h[i + k]) : -1;
                    if (d < 0)
                        return FMT_ERR("the header has a malformed \\u escape inside a string at "
                                       "byte %zu", i - 1);
                    v = v * 16 + d;
                }
                if (v == 0)
                    return FMT_ERR("the header has a NUL character (\\u0000) inside a string at byte "
                                   "%zu: readers would disagree on where the string ends",
                                   i - 1);
                i += 4;
            }
        }
    }
    return DLT_OK;
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
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f->e);
    free(f->by_name);
    free(f->meta);
    free(f->strings);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

/* The object field `key` of item, or NULL; *dup set when it appears more than once. */
static const cJSON *field(const cJSON *item, const char *key, int *dup) {
    const cJSON *found = NULL;
    for (const cJSON *c = item->child; c; c = c->next)
        if (c->string && strcmp(c->string, key) == 0) {
            if (found) *dup = 1;
            found = c;
        }
    return found;
}

/* Validates one tensor entry of the header into e (name set by the caller). */
static dlt_status parse_entry(const cJSON *item, const char *name, uint64_t data_size,
                              const char *func, dlt__st_entry *e) {
    if (!cJSON_IsObject(item))
        return FMT_ERR("header entry '%.200s' is not an object", name);
    int dup = 0;
    const cJSON *dt = field(item, "dtype", &dup);
    const cJSON *sh = field(item, "shape", &dup);
    const cJSON *of = field(item, "data_offsets", &dup);
    if (dup)
        return FMT_ERR("tensor '%.200s' has a field twice (readers differ on which one counts)",
                       name);
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
    uint64_t need = numel * dlt__st_dtype_size(e->dtype); /* numel < 2^62, size <= 8 */
    if (numel > (((uint64_t)1 << 62) / 8) || e->end - e->begin != need)
        return FMT_ERR("tensor '%.200s' has %llu bytes of data but dtype %s with %llu elements "
                       "needs %llu",
                       name, (unsigned long long)(e->end - e->begin), e->dtype_name,
                       (unsigned long long)numel, (unsigned long long)need);
    return DLT_OK;
}

/* "__metadata__": an object of strings with unique keys that are names; counts into *n and
 * the bytes its keys and values need into *len. */
static dlt_status check_metadata(const cJSON *it, int32_t *n, size_t *len, const char *func) {
    if (!cJSON_IsObject(it)) return FMT_ERR("'__metadata__' must be an object of strings");
    for (const cJSON *kv = it->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv) || !kv->valuestring)
            return FMT_ERR("'__metadata__' value '%.200s' is not a string", kv->string ? kv->string : "");
        if (!kv->string || !dlt__st_name_ok(kv->string))
            return FMT_ERR("a '__metadata__' key is not UTF-8 text without control characters");
        for (const cJSON *o = it->child; o != kv; o = o->next)
            if (strcmp(o->string, kv->string) == 0)
                return FMT_ERR("'__metadata__' key '%.200s' appears twice", kv->string);
        ++*n;
        *len += strlen(kv->string) + strlen(kv->valuestring) + 2; /* bounded by the header */
    }
    return DLT_OK;
}

/* Parses and validates a header of hlen bytes for a data section of data_size bytes. */
static dlt_status parse_header(const char *h, size_t hlen, uint64_t data_size, const char *func,
                               dlt__st_file *out) {
    if (hlen < 2 || h[0] != '{') return FMT_ERR("the header does not start with a JSON object ('{')");
    DLT_CHECK(scan_strings(h, hlen, func));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(h, hlen, &end, 0);
    if (!root) {
        size_t at = (end && end >= h && end <= h + hlen) ? (size_t)(end - h) : 0;
        return FMT_ERR("the header is not valid JSON (error near byte %zu of %zu)", at, hlen);
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
    /* count the tensors; validate names and __metadata__ */
    int64_t n = 0;
    int32_t n_meta = 0;
    size_t strings_len = 0;
    const cJSON *meta = NULL;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!it->string) {
            st = FMT_ERR("a header entry has no name");
            goto fail;
        }
        if (strcmp(it->string, "__metadata__") == 0) {
            if (meta) {
                st = FMT_ERR("duplicate name '__metadata__' in the header");
                goto fail;
            }
            meta = it;
            DLT_CHECK_GOTO(st, check_metadata(it, &n_meta, &strings_len, func), fail);
            continue;
        }
        if (!dlt__st_name_ok(it->string)) {
            st = FMT_ERR("tensor name '%.200s' is not UTF-8 text without control characters",
                         it->string);
            goto fail;
        }
        n++;
        strings_len += strlen(it->string) + 1; /* bounded by hlen: no overflow */
        if (n > INT32_MAX / 2) {
            st = FMT_ERR("too many tensors in the header");
            goto fail;
        }
    }
    out->e = calloc((size_t)(n ? n : 1), sizeof *out->e);
    out->by_name = calloc((size_t)(n ? n : 1), sizeof *out->by_name);
    out->meta = calloc((size_t)(2 * n_meta + 1), sizeof *out->meta);
    out->strings = malloc(strings_len ? strings_len : 1);
    if (!out->e || !out->by_name || !out->meta || !out->strings) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the index of %lld tensors",
                      (long long)n);
        goto fail;
    }
    char *sp = out->strings;
    for (const cJSON *kv = meta ? meta->child : NULL; kv; kv = kv->next) {
        const char *src[2] = {kv->string, kv->valuestring};
        for (int j = 0; j < 2; j++) {
            size_t l = strlen(src[j]) + 1;
            memcpy(sp, src[j], l);
            out->meta[2 * out->n_meta + j] = sp;
            sp += l;
        }
        out->n_meta++;
    }
    int32_t k = 0;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (it == meta) continue;
        size_t l = strlen(it->string) + 1;
        memcpy(sp, it->string, l);
        dlt__st_entry *e = &out->e[k];
        e->name = sp;
        sp += l;
        DLT_CHECK_GOTO(st, parse_entry(it, e->name, data_size, func, e), fail);
        out->by_name[k] = k;
        k++;
    }
    out->n = (int32_t)n;
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
    return st;
}

/* ---- files ---- */

/* Reads exactly n bytes at offset; 0, or -1 with errno (0 when the file ended early). */
static int read_at(int fd, void *dst, size_t n, uint64_t offset) {
    char *p = dst;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)offset);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return 0;
}

static const char *read_error(int e) { return e ? strerror(e) : "the file is shorter than when it was opened"; }

/* Puts the path in front of the current message (which starts with "func: "). */
static dlt_status with_path(dlt_status st, const char *path, const char *func) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dlt_last_error());
    const char *body = msg;
    size_t fl = strlen(func);
    if (strncmp(msg, func, fl) == 0 && msg[fl] == ':') body = msg + fl + 2;
    return dlt__err(st, func, "'%s': %s", path, body);
}

dlt_status dlt__safetensors_open(const char *path, const char *func, dlt__st_file *out) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below as not a
     * regular file); the flag changes nothing for regular files */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return dlt__err(DLT_ERR_IO, func, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return dlt__err(DLT_ERR_IO, func, "'%s' is not a regular file", path);
    }
    out->fd = fd;
    out->path = strdup(path);
    if (!out->path) {
        dlt__safetensors_free(out);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate a path");
    }
    const uint64_t size = (uint64_t)sb.st_size;
    unsigned char len8[8];
    if (size < 8) {
        dlt__safetensors_free(out);
        return dlt__err(DLT_ERR_FORMAT, func, "'%s': truncated file: %llu bytes, fewer than the "
                        "8-byte header length", path, (unsigned long long)size);
    }
    if (read_at(fd, len8, 8, 0) != 0) {
        int e = errno;
        dlt__safetensors_free(out);
        return dlt__err(DLT_ERR_IO, func, "cannot read '%s': %s", path, read_error(e));
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    dlt_status st = DLT_OK;
    if (hlen > size - 8)
        st = dlt__err(DLT_ERR_FORMAT, func, "'%s': bad header length %llu: only %llu bytes follow "
                      "it (truncated or corrupt file)", path, (unsigned long long)hlen,
                      (unsigned long long)(size - 8));
    else if (hlen > DLT__ST_MAX_HEADER)
        st = dlt__err(DLT_ERR_FORMAT, func, "'%s': bad header length %llu: more than the %llu-byte "
                      "limit", path, (unsigned long long)hlen, (unsigned long long)DLT__ST_MAX_HEADER);
    if (st != DLT_OK) {
        dlt__safetensors_free(out);
        return st;
    }
    char *h = malloc((size_t)hlen + 1);
    if (!h) {
        dlt__safetensors_free(out);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the %llu-byte header of '%s'",
                        (unsigned long long)hlen, path);
    }
    if (read_at(fd, h, (size_t)hlen, 8) != 0) {
        int e = errno;
        free(h);
        dlt__safetensors_free(out);
        return dlt__err(DLT_ERR_IO, func, "cannot read '%s': %s", path, read_error(e));
    }
    out->data_offset = 8 + hlen;
    st = parse_header(h, (size_t)hlen, size - 8 - hlen, func, out);
    free(h);
    if (st != DLT_OK) {
        st = with_path(st, path, func);
        dlt__safetensors_free(out);
    }
    return st;
}

dlt_status dlt__safetensors_read_entry(const dlt__st_file *f, const dlt__st_entry *e, void *dst,
                                       const char *func) {
    size_t n = (size_t)(e->end - e->begin);
    if (n == 0) return DLT_OK;
    if (read_at(f->fd, dst, n, f->data_offset + e->begin) != 0)
        return dlt__err(DLT_ERR_IO, func, "cannot read tensor '%.200s' of '%s': %s", e->name, f->path,
                        read_error(errno));
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

/* ---- the public file handle ---- */

struct dlt_safetensors {
    dlt__st_file f;
};

dlt_status dlt_safetensors_open(const char *path, dlt_safetensors **out) {
    static const char *F = "dlt_safetensors_open";
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(out, F);
    dlt_safetensors *h = calloc(1, sizeof *h);
    if (!h) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the file handle");
    dlt_status st = dlt__safetensors_open(path, F, &h->f);
    if (st != DLT_OK) {
        free(h);
        return st;
    }
    *out = h;
    return DLT_OK;
}

void dlt_safetensors_close(dlt_safetensors *f) {
    if (!f) return;
    dlt__safetensors_free(&f->f);
    free(f);
}

const dlt__st_file *dlt__safetensors_file(const dlt_safetensors *f) { return f ? &f->f : NULL; }

int32_t dlt_safetensors_num_tensors(const dlt_safetensors *f) { return f ? f->f.n : 0; }

const char *dlt_safetensors_name(const dlt_safetensors *f, int32_t i) {
    return (f && i >= 0 && i < f->f.n) ? f->f.e[i].name : NULL;
}

static const dlt__st_entry *entry_named(const dlt_safetensors *f, const char *name) {
    int32_t i = (f && name) ? dlt__safetensors_find(&f->f, name) : -1;
    return i >= 0 ? &f->f.e[i] : NULL;
}

dlt_status dlt_safetensors_info(const dlt_safetensors *f, const char *name, int32_t *dtype,
                                int64_t *shape, int32_t cap, int32_t *ndim) {
    static const char *F = "dlt_safetensors_info";
    DLT_NULL_CHECK(f, F);
    DLT_NULL_CHECK(name, F);
    if (cap < 0 || (cap > 0 && !shape))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "shape must hold cap (%d) values", cap);
    const dlt__st_entry *e = entry_named(f, name);
    if (!e)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "'%s' has no tensor named '%.200s'", f->f.path, name);
    if (dtype) *dtype = e->dtype <= DLT_U8 ? e->dtype : -1;
    for (int32_t i = 0; i < e->ndim && i < cap; i++) shape[i] = e->shape[i];
    if (ndim) *ndim = e->ndim;
    return DLT_OK;
}

const char *dlt_safetensors_dtype_name(const dlt_safetensors *f, const char *name) {
    const dlt__st_entry *e = entry_named(f, name);
    return e ? e->dtype_name : NULL;
}

const char *dlt_safetensors_metadata(const dlt_safetensors *f, const char *key) {
    if (!f || !key) return NULL;
    for (int32_t i = 0; i < f->f.n_meta; i++)
        if (strcmp(f->f.meta[2 * i], key) == 0) return f->f.meta[2 * i + 1];
    return NULL;
}

/* A new contiguous tensor on ctx holding entry e. */
static dlt_status get_tensor(const dlt__st_file *f, const dlt__st_entry *e, dlt_ctx *ctx,
                             const char *func, dlt_tensor **out) {
    if (e->dtype > DLT_U8)
        return dlt__err(DLT_ERR_DTYPE, func, "tensor '%.200s' in '%s' is %s, which libdltrain tensors "
                        "cannot hold", e->name, f->path, e->dtype_name);
    size_t n = (size_t)(e->end - e->begin);
    void *buf = malloc(n ? n : 1);
    if (!buf)
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %zu bytes for tensor '%.200s'",
                        n, e->name);
    dlt_status st = dlt__safetensors_read_entry(f, e, buf, func);
    if (st == DLT_OK) {
        st = dlt_tensor_from_host(ctx, e->dtype, e->shape, e->ndim, DLT_FORMAT_CONTIGUOUS, buf, n, out);
        if (st != DLT_OK) st = dlt__err_wrap(st, func);
    }
    free(buf);
    return st;
}

dlt_status dlt_safetensors_get(const dlt_safetensors *f, dlt_ctx *ctx, const char *name,
                               dlt_tensor **out) {
    static const char *F = "dlt_safetensors_get";
    DLT_NULL_CHECK(f, F);
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(name, F);
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    const dlt__st_entry *e = entry_named(f, name);
    if (!e)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "'%s' has no tensor named '%.200s'", f->f.path, name);
    return get_tensor(&f->f, e, ctx, F, out);
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
    DLT_CHECK(dlt__safetensors_open(path, F, &file));
    dlt_status st;
    int32_t i = dlt__safetensors_find(&file, name);
    if (i < 0)
        st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "'%s' has no tensor named '%.200s'", path, name);
    else
        st = get_tensor(&file, &file.e[i], ctx, F, out);
    dlt__safetensors_free(&file);
    return st;
}
