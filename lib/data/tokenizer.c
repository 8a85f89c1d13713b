/*
 * tokenizer.c - nanoGPT's character-level tokenizer (data/shakespeare_char/prepare.py) and
 * its one-call preparation of a text file into train/val token datasets.
 *
 * prepare.py reads the file with Python's open(path).read(): UTF-8, universal newlines
 * ("\r\n" and "\r" become "\n"); the vocabulary is sorted(set(text)) - distinct code points
 * in ascending order - with stoi/itos the position in that list; train is
 * text[:int(n * 0.9)] and val the rest, n counted in characters. The same here: the file
 * is decoded strictly (Python's decoder refuses overlong forms, surrogates and code points
 * above U+10FFFF; so do we, naming the byte offset), newlines translated on the way (a CR
 * is one byte and never inside a multi-byte sequence, so offsets stay those of the file),
 * and int(n * f) is computed as the same float64 product truncated. Ids are uint16, so a
 * text has at most 65536 distinct characters.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_internal.h"

#define MAX_CODE_POINT 0x10FFFF

/* The code point at s[*i] (advancing *i), or -1 for an invalid sequence (*i unchanged). */
static int32_t utf8_next(const unsigned char *s, size_t n, size_t *i) {
    size_t k = *i;
    unsigned c = s[k];
    if (c < 0x80) {
        *i = k + 1;
        return (int32_t)c;
    }
    int len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    int32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = (int32_t)(c & 0x1F);
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = (int32_t)(c & 0x0F);
        if (c == 0xE0) lo = 0xA0; /* overlong */
        if (c == 0xED) hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = (int32_t)(c & 0x07);
        if (c == 0xF0) lo = 0x90; /* overlong */
        if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        return -1;
    }
    if (n - k < (size_t)len) return -1;
    for (int j = 1; j < len; j++) {
        unsigned b = s[k + (size_t)j];
        unsigned blo = j == 1 ? lo : 0x80, bhi = j == 1 ? hi : 0xBF;
        if (b < blo || b > bhi) return -1;
        cp = (cp << 6) | (int32_t)(b & 0x3F);
    }
    *i = k + (size_t)len;
    return cp;
}

/* UTF-8 text -> code points (translate = 1: universal newlines). path names the file in
 * messages (DLT_ERR_FORMAT), or NULL for text from memory (DLT_ERR_INVALID_ARGUMENT). */
static dlt_status decode(dlt_ctx *ctx, const unsigned char *s, size_t n, int translate,
                         const char *path, const char *F, int32_t **out, int64_t *count) {
    int32_t *cps = dlt__host_alloc(ctx, (n ? n : 1) * sizeof *cps);
    if (!cps) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %zu characters", n);
    int64_t m = 0;
    size_t i = 0;
    while (i < n) {
        size_t at = i;
        int32_t cp = utf8_next(s, n, &i);
        if (cp < 0) {
            free(cps);
            if (path)
                return dlt__err(DLT_ERR_FORMAT, F, "%s: invalid UTF-8 at byte offset %zu (byte 0x%02X)",
                                path, at, (unsigned)s[at]);
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "invalid UTF-8 at byte offset %zu (byte 0x%02X)",
                            at, (unsigned)s[at]);
        }
        if (translate && cp == '\r') {
            cp = '\n';
            if (i < n && s[i] == '\n') i++;
        }
        cps[m++] = cp;
    }
    *out = cps;
    *count = m;
    return DLT_OK;
}

/* The vocabulary of n >= 1 code points: distinct ones in ascending order. */
static dlt_status build(dlt_ctx *ctx, const int32_t *cps, int64_t n, const char *F,
                        dlt_char_tokenizer **out) {
    uint8_t *seen = dlt__host_calloc(ctx, (MAX_CODE_POINT + 1) / 8, 1);
    dlt_char_tokenizer *tok = dlt__host_calloc(ctx, 1, sizeof *tok);
    dlt_status st = DLT_OK;
    if (!seen || !tok) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the tokenizer");
        goto fail;
    }
    int64_t distinct = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t cp = cps[i];
        if (!(seen[cp >> 3] & (1u << (cp & 7)))) {
            seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
            distinct++;
        }
    }
    if (distinct > 65536) {
        st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                      "the text has %lld distinct characters; ids are uint16 (at most 65536)",
                      (long long)distinct);
        goto fail;
    }
    tok->itos = dlt__host_alloc(ctx, (size_t)distinct * sizeof *tok->itos);
    if (!tok->itos) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %lld characters", (long long)distinct);
        goto fail;
    }
    int32_t k = 0;
    for (int32_t cp = 0; cp <= MAX_CODE_POINT; cp++)
        if (seen[cp >> 3] & (1u << (cp & 7))) tok->itos[k++] = cp;
    tok->vocab_size = k;
    free(seen);
    *out = tok;
    return DLT_OK;
fail:
    free(seen);
    dlt_char_tokenizer_destroy(tok);
    return st;
}

int32_t dlt_char_tokenizer_stoi(const dlt_char_tokenizer *tok, int32_t code_point) {
    if (!tok) return -1;
    int32_t lo = 0, hi = tok->vocab_size - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (tok->itos[mid] == code_point) return mid;
        if (tok->itos[mid] < code_point)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

int32_t dlt_char_tokenizer_itos(const dlt_char_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->vocab_size) return -1;
    return tok->itos[id];
}

int32_t dlt_char_tokenizer_vocab_size(const dlt_char_tokenizer *tok) { return tok ? tok->vocab_size : 0; }

void dlt_char_tokenizer_destroy(dlt_char_tokenizer *tok) {
    if (!tok) return;
    free(tok->itos);
    free(tok);
}

dlt_status dlt_char_tokenizer_create(const char *text, size_t nbytes, dlt_char_tokenizer **out) {
    static const char *F = "dlt_char_tokenizer_create";
    DLT_NULL_CHECK(text, F);
    DLT_NULL_CHECK(out, F);
    int32_t *cps = NULL;
    int64_t n = 0;
    DLT_CHECK(decode(NULL, (const unsigned char *)text, nbytes, 0, NULL, F, &cps, &n));
    dlt_status st = n == 0 ? dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the text is empty: no vocabulary")
                           : build(NULL, cps, n, F, out);
    free(cps);
    return st;
}

/* The whole file at path as code points, read as Python's open(path).read() does. */
static dlt_status read_text(dlt_ctx *ctx, const char *path, const char *F, int32_t **cps,
                            int64_t *n) {
    int fd = -1;
    int64_t size = 0;
    DLT_CHECK(dlt__file_open_regular(path, 0, F, &fd, &size, NULL));
    dlt_status st = DLT_OK;
    unsigned char *buf = NULL;
    if (size == 0)
        st = dlt__err(DLT_ERR_FORMAT, F, "%s is empty: no text to build a vocabulary from", path);
    else if ((uint64_t)size > (uint64_t)SIZE_MAX / 8)
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "%s: %lld bytes do not fit in memory", path,
                      (long long)size);
    else if (!(buf = dlt__host_alloc(ctx, (size_t)size)))
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %lld bytes for %s", (long long)size,
                      path);
    if (st == DLT_OK) st = dlt__file_read_exact(fd, buf, (size_t)size, path, "the text", F);
    close(fd);
    if (st == DLT_OK) st = decode(ctx, buf, (size_t)size, 1, path, F, cps, n);
    free(buf);
    return st;
}

dlt_status dlt_char_tokenizer_from_file(const char *path, dlt_char_tokenizer **out) {
    static const char *F = "dlt_char_tokenizer_from_file";
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(out, F);
    int32_t *cps = NULL;
    int64_t n = 0;
    DLT_CHECK(read_text(NULL, path, F, &cps, &n));
    dlt_status st = build(NULL, cps, n, F, out);
    free(cps);
    return st;
}

/* Ids of n code points built into tok's vocabulary (all present). */
static dlt_status to_ids(const dlt_char_tokenizer *tok, const int32_t *cps, int64_t n,
                         uint16_t *ids, const char *F) {
    for (int64_t i = 0; i < n; i++) {
        int32_t id = dlt_char_tokenizer_stoi(tok, cps[i]);
        if (id < 0)
            return dlt__err(DLT_ERR_INTERNAL, F, "character U+%04X missing from its own vocabulary",
                            (unsigned)cps[i]);
        ids[i] = (uint16_t)id;
    }
    return DLT_OK;
}

dlt_status dlt_char_tokenizer_encode(const dlt_char_tokenizer *tok, const char *text, size_t nbytes,
                                     uint16_t *ids, int64_t cap, int64_t *n) {
    static const char *F = "dlt_char_tokenizer_encode";
    DLT_NULL_CHECK(tok, F);
    DLT_NULL_CHECK(n, F);
    if (nbytes > 0) DLT_NULL_CHECK(text, F);
    const unsigned char *s = (const unsigned char *)text;
    /* first pass: validate and count, so a failure writes nothing */
    int64_t count = 0;
    for (size_t i = 0; i < nbytes; count++) {
        size_t at = i;
        int32_t cp = utf8_next(s, nbytes, &i);
        if (cp < 0)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "invalid UTF-8 at byte offset %zu (byte 0x%02X)",
                            at, (unsigned)s[at]);
        if (dlt_char_tokenizer_stoi(tok, cp) < 0)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "character U+%04X at byte offset %zu is not in the vocabulary of %d "
                            "characters",
                            (unsigned)cp, at, tok->vocab_size);
    }
    if (ids && cap < count)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "ids holds %lld entries; the text has %lld characters",
                        (long long)cap, (long long)count);
    if (ids) {
        size_t i = 0;
        for (int64_t k = 0; k < count; k++)
            ids[k] = (uint16_t)dlt_char_tokenizer_stoi(tok, utf8_next(s, nbytes, &i));
    }
    *n = count;
    return DLT_OK;
}

/* UTF-8 bytes of code point cp into out (4 bytes room); returns the count. */
static size_t utf8_put(int32_t cp, unsigned char *out) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

dlt_status dlt_char_tokenizer_decode(const dlt_char_tokenizer *tok, const uint16_t *ids, int64_t n,
                                     char *buf, size_t cap, size_t *len) {
    static const char *F = "dlt_char_tokenizer_decode";
    DLT_NULL_CHECK(tok, F);
    DLT_NULL_CHECK(len, F);
    if (n < 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n is %lld", (long long)n);
    if (n > 0) DLT_NULL_CHECK(ids, F);
    size_t bytes = 0;
    unsigned char tmp[4];
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] >= tok->vocab_size)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "ids[%lld] = %u is not below the vocabulary size %d", (long long)i,
                            (unsigned)ids[i], tok->vocab_size);
        bytes += utf8_put(tok->itos[ids[i]], tmp);
    }
    if (buf) {
        if (cap < bytes + 1)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "buf holds %zu bytes; the text needs %zu and a NUL", cap, bytes);
        size_t k = 0;
        for (int64_t i = 0; i < n; i++) k += utf8_put(tok->itos[ids[i]], (unsigned char *)buf + k);
        buf[k] = '\0';
    }
    *len = bytes;
    return DLT_OK;
}

dlt_status dlt_char_text_open(dlt_ctx *ctx, const char *path, double train_fraction,
                              dlt_char_tokenizer **tokenizer, dlt_token_dataset **train,
                              dlt_token_dataset **val) {
    static const char *F = "dlt_char_text_open";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(train, F);
    DLT_NULL_CHECK(val, F);
    if (!(train_fraction > 0.0 && train_fraction < 1.0))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "train_fraction %g is not inside (0, 1) (nanoGPT uses 0.9)", train_fraction);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    int32_t *cps = NULL;
    int64_t n = 0;
    uint16_t *ids = NULL;
    dlt_char_tokenizer *tok = NULL;
    dlt_token_dataset *tr = NULL, *va = NULL;
    dlt_status st;
    DLT_CHECK(read_text(ctx, path, F, &cps, &n));
    DLT_CHECK_GOTO(st, build(ctx, cps, n, F, &tok), done);
    ids = dlt__host_alloc(ctx, (size_t)n * sizeof *ids);
    if (!ids) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %lld ids", (long long)n);
        goto done;
    }
    DLT_CHECK_GOTO(st, to_ids(tok, cps, n, ids, F), done);
    /* Python's int(n * 0.9): the float64 product, truncated */
    int64_t split = (int64_t)((double)n * train_fraction);
    if (split < 1 || split >= n) {
        st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                      "%s has %lld characters: a split at %lld leaves the %s part empty", path,
                      (long long)n, (long long)split, split < 1 ? "train" : "val");
        goto done;
    }
    char source[300];
    snprintf(source, sizeof source, "%.200s (train: characters 0..%lld)", path, (long long)split - 1);
    DLT_CHECK_GOTO(st, dlt__token_dataset_from_host(ctx, ids, split, tok->vocab_size, source, F, &tr),
                   done);
    snprintf(source, sizeof source, "%.200s (val: characters %lld..%lld)", path, (long long)split,
             (long long)n - 1);
    DLT_CHECK_GOTO(st, dlt__token_dataset_from_host(ctx, ids + split, n - split, tok->vocab_size,
                                                    source, F, &va),
                   done);
done:
    free(cps);
    free(ids);
    if (st != DLT_OK) {
        dlt_char_tokenizer_destroy(tok);
        dlt_token_dataset_destroy(tr);
        dlt_token_dataset_destroy(va);
        return st;
    }
    if (tokenizer)
        *tokenizer = tok;
    else
        dlt_char_tokenizer_destroy(tok);
    *train = tr;
    *val = va;
    return DLT_OK;
}
