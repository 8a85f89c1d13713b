/*
 * tokens.c - token datasets (uint16 tokens resident on the context's device) and the token
 * loader that draws nanoGPT's random-window batches from them.
 *
 * Sources: llm.c's token files (a 1024-byte header of 256 int32: magic 20240520, version 1,
 * token count; then the tokens), nanoGPT's headerless train.bin/val.bin, host arrays, and
 * synthetic tokens. Files are untrusted: regular files only, the header checked (magic,
 * version, count against the file size), a raw file's size must be even, and every token
 * is checked against the vocabulary while it is read, in chunks through a small staging
 * buffer - the first bad position is named and nothing is created. Tokens are decoded as
 * little-endian (the files' byte order) whatever the host's.
 *
 * Batches (nanoGPT's get_batch): draw s takes B start offsets o_b uniform in [0, n - T)
 * (dlt__token_offset: Philox of (seed, s << 32 | b), shared with the CUDA kernel) and
 * gives x[b] = tokens[o_b .. o_b + T), y[b] = tokens[o_b + 1 .. o_b + T]. The draw counter
 * s lives in backend memory (a dlt_data_cursor, like the image loader's): the gather reads
 * it and a tiny backend call advances it, so a captured step draws new windows on every
 * replay. The host keeps its own copy for eager use; seek and position are the eager ways
 * to set and read the device's. Draws are distinct for the first 2^32 steps.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_internal.h"

#define CHUNK_TOKENS ((int64_t)1 << 20) /* tokens read, checked and uploaded at a time */
#define DOMAIN_SYNTH_TOKENS (UINT64_C(4) << 56)
#define MAX_STEP UINT32_MAX

/* ---------------------------------------------------------------------------------------
 * Datasets
 * ------------------------------------------------------------------------------------- */

static dlt_status check_vocab(int32_t vocab_size, const char *F) {
    if (vocab_size < 1 || vocab_size > 65536)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "vocab_size %d is outside 1..65536 (tokens are uint16)", vocab_size);
    return DLT_OK;
}

static dlt_status token_dataset_new(dlt_ctx *ctx, int64_t count, int32_t vocab_size,
                                    const char *source, const char *F, dlt_token_dataset **out) {
    if (count < 1 || count > ((int64_t)1 << 40))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "a token dataset holds 1..2^40 tokens, got %lld",
                        (long long)count);
    dlt_token_dataset *ds = dlt__host_calloc(ctx, 1, sizeof *ds);
    if (!ds) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the token dataset object");
    ds->ctx = ctx;
    ds->count = count;
    ds->vocab_size = vocab_size;
    snprintf(ds->source, sizeof ds->source, "%s", source);
    int64_t bytes = 2 * count;
    dlt_status st = dlt__tensor_new(ctx, DLT_U8, &bytes, 1, DLT_FORMAT_CONTIGUOUS, F, &ds->tokens);
    if (st != DLT_OK) {
        free(ds);
        return st;
    }
    *out = ds;
    return DLT_OK;
}

static dlt_status upload(dlt_token_dataset *ds, int64_t first, int64_t n, const uint16_t *tokens,
                         const char *F) {
    dlt_ctx *ctx = ds->ctx;
    uint16_t *dst = (uint16_t *)dlt__data(ds->tokens) + first;
    dlt_status st = ctx->be->memcpy_h2d(ctx, dst, tokens, (size_t)n * sizeof(uint16_t));
    return st == DLT_OK ? DLT_OK : dlt__err_wrap(st, F);
}

/* Index of the first token >= vocab in t[0..n), or -1. */
static int64_t first_bad(const uint16_t *t, int64_t n, int32_t vocab) {
    for (int64_t i = 0; i < n; i++)
        if ((int32_t)t[i] >= vocab) return i;
    return -1;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Checks the header (llm.c) or the size (raw); *count and *data_off on success. The
 * file position is left after the header. */
static dlt_status read_layout(int fd, const char *path, int32_t format, int64_t size, const char *F,
                              int64_t *count, int64_t *data_off) {
    const int64_t head = 4 * DLT_TOKENS_HEADER_INTS;
    if (size == 0)
        return dlt__err(DLT_ERR_FORMAT, F, "%s is empty: a token file holds uint16 tokens%s", path,
                        format == DLT_TOKENS_LLMC ? " after a 1024-byte header" : "");
    if (format == DLT_TOKENS_RAW) {
        if (size % 2 != 0)
            return dlt__err(DLT_ERR_FORMAT, F,
                            "%s: size %lld is odd: the last uint16 token (at byte %lld) is truncated",
                            path, (long long)size, (long long)size - 1);
        if (size >= 4) {
            uint8_t first[4];
            DLT_CHECK(dlt__file_read_exact(fd, first, 4, path, "the first tokens", F));
            if (le32(first) == DLT_TOKENS_MAGIC)
                return dlt__err(DLT_ERR_FORMAT, F,
                                "%s starts with llm.c's magic %d: it is an llm.c token file (open "
                                "it with DLT_TOKENS_LLMC), not raw tokens",
                                path, DLT_TOKENS_MAGIC);
            if (lseek(fd, 0, SEEK_SET) != 0)
                return dlt__err(DLT_ERR_IO, F, "%s: cannot seek back to the start", path);
        }
        *count = size / 2;
        *data_off = 0;
        return DLT_OK;
    }
    if (size < head)
        return dlt__err(DLT_ERR_FORMAT, F,
                        "%s: %lld bytes is shorter than llm.c's %lld-byte header (truncated?)", path,
                        (long long)size, (long long)head);
    uint8_t h[4 * DLT_TOKENS_HEADER_INTS];
    DLT_CHECK(dlt__file_read_exact(fd, h, sizeof h, path, "the header", F));
    int32_t magic = (int32_t)le32(h), version = (int32_t)le32(h + 4), n = (int32_t)le32(h + 8);
    if (magic != DLT_TOKENS_MAGIC)
        return dlt__err(DLT_ERR_FORMAT, F,
                        "%s: bad magic %d (an llm.c token file starts with %d; a headerless "
                        "nanoGPT file is DLT_TOKENS_RAW)",
                        path, magic, DLT_TOKENS_MAGIC);
    if (version != DLT_TOKENS_VERSION)
        return dlt__err(DLT_ERR_FORMAT, F, "%s: version %d, this reader knows llm.c token version %d",
                        path, version, DLT_TOKENS_VERSION);
    if (n < 1)
        return dlt__err(DLT_ERR_FORMAT, F, "%s: the header's token count is %d", path, n);
    int64_t want = head + 2 * (int64_t)n;
    if (size != want)
        return dlt__err(DLT_ERR_FORMAT, F,
                        "%s: the header says %d tokens (%lld bytes with the header) but the file "
                        "has %lld bytes (%s)",
                        path, n, (long long)want, (long long)size,
                        size < want ? "truncated" : "trailing bytes");
    *count = n;
    *data_off = head;
    return DLT_OK;
}

dlt_status dlt_token_file_open(dlt_ctx *ctx, const char *path, int32_t format, int32_t vocab_size,
                               dlt_token_dataset **out) {
    static const char *F = "dlt_token_file_open";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(out, F);
    if (format != DLT_TOKENS_LLMC && format != DLT_TOKENS_RAW)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "unknown token file format %d (DLT_TOKENS_LLMC=1, DLT_TOKENS_RAW=2)", format);
    DLT_CHECK(check_vocab(vocab_size, F));
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    int fd = -1;
    int64_t size = 0, count = 0, off = 0;
    DLT_CHECK(dlt__file_open_regular(path, 0, F, &fd, &size, NULL));
    dlt_token_dataset *ds = NULL;
    uint8_t *raw = NULL;
    uint16_t *tok = NULL;
    dlt_status st = DLT_OK;
    DLT_CHECK_GOTO(st, read_layout(fd, path, format, size, F, &count, &off), done);
    DLT_CHECK_GOTO(st, token_dataset_new(ctx, count, vocab_size, path, F, &ds), done);
    int64_t chunk = count < CHUNK_TOKENS ? count : CHUNK_TOKENS;
    raw = dlt__host_alloc(ctx, (size_t)chunk * 2);
    tok = dlt__host_alloc(ctx, (size_t)chunk * sizeof *tok);
    if (!raw || !tok) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the staging buffers");
        goto done;
    }
    for (int64_t i0 = 0; i0 < count; i0 += chunk) {
        int64_t k = count - i0 < chunk ? count - i0 : chunk;
        DLT_CHECK_GOTO(st, dlt__file_read_exact(fd, raw, (size_t)k * 2, path, "the tokens", F), done);
        for (int64_t i = 0; i < k; i++) tok[i] = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
        int64_t bad = first_bad(tok, k, vocab_size);
        if (bad >= 0) {
            st = dlt__err(DLT_ERR_FORMAT, F,
                          "%s: token %lld (byte offset %lld) is %u, not below the vocabulary size %d",
                          path, (long long)(i0 + bad), (long long)(off + 2 * (i0 + bad)),
                          (unsigned)tok[bad], vocab_size);
            goto done;
        }
        DLT_CHECK_GOTO(st, upload(ds, i0, k, tok, F), done);
    }
done:
    close(fd);
    free(raw);
    free(tok);
    if (st != DLT_OK) {
        dlt_token_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return DLT_OK;
}

/* A dataset of host tokens (already in memory): checked, then uploaded. */
dlt_status dlt__token_dataset_from_host(dlt_ctx *ctx, const uint16_t *tokens, int64_t n,
                                        int32_t vocab_size, const char *source, const char *F,
                                        dlt_token_dataset **out) {
    DLT_CHECK(check_vocab(vocab_size, F));
    if (n < 1) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n is %lld: no tokens", (long long)n);
    int64_t bad = first_bad(tokens, n, vocab_size);
    if (bad >= 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "%s: token %lld is %u, not below the vocabulary size %d", source,
                        (long long)bad, (unsigned)tokens[bad], vocab_size);
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    dlt_token_dataset *ds = NULL;
    DLT_CHECK(token_dataset_new(ctx, n, vocab_size, source, F, &ds));
    dlt_status st = upload(ds, 0, n, tokens, F);
    if (st != DLT_OK) {
        dlt_token_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return DLT_OK;
}

dlt_status dlt_token_dataset_create(dlt_ctx *ctx, const uint16_t *tokens, int64_t n,
                                    int32_t vocab_size, dlt_token_dataset **out) {
    static const char *F = "dlt_token_dataset_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(tokens, F);
    DLT_NULL_CHECK(out, F);
    return dlt__token_dataset_from_host(ctx, tokens, n, vocab_size, "host tokens", F, out);
}

dlt_status dlt_synthetic_tokens_create(dlt_ctx *ctx, int64_t n, int32_t vocab_size, uint64_t seed,
                                       dlt_token_dataset **out) {
    static const char *F = "dlt_synthetic_tokens_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    DLT_CHECK(check_vocab(vocab_size, F));
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    char source[64];
    snprintf(source, sizeof source, "synthetic tokens (seed %llu)", (unsigned long long)seed);
    dlt_token_dataset *ds = NULL;
    DLT_CHECK(token_dataset_new(ctx, n, vocab_size, source, F, &ds));
    int64_t chunk = n < CHUNK_TOKENS ? n : CHUNK_TOKENS;
    uint16_t *tok = dlt__host_alloc(ctx, (size_t)chunk * sizeof *tok);
    dlt_status st = DLT_OK;
    if (!tok) st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the staging buffer");
    for (int64_t i0 = 0; st == DLT_OK && i0 < n; i0 += chunk) {
        int64_t k = n - i0 < chunk ? n - i0 : chunk;
        /* token i: word i % 4 of block i / 4, scaled to [0, vocab) */
        for (int64_t i = 0; i < k; i++) {
            uint64_t g = (uint64_t)(i0 + i);
            dlt_philox_out o = dlt__philox(seed, DOMAIN_SYNTH_TOKENS + g / 4);
            tok[i] = (uint16_t)(((uint64_t)o.v[g % 4] * (uint64_t)vocab_size) >> 32);
        }
        st = upload(ds, i0, k, tok, F);
    }
    free(tok);
    if (st != DLT_OK) {
        dlt_token_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return DLT_OK;
}

void dlt_token_dataset_destroy(dlt_token_dataset *ds) {
    if (!ds) return;
    dlt_tensor_release(ds->tokens);
    free(ds);
}

int64_t dlt_token_dataset_size(const dlt_token_dataset *ds) { return ds ? ds->count : 0; }
int32_t dlt_token_dataset_vocab_size(const dlt_token_dataset *ds) { return ds ? ds->vocab_size : 0; }

dlt_status dlt_token_dataset_read(const dlt_token_dataset *ds, int64_t start, int64_t n, uint16_t *out) {
    static const char *F = "dlt_token_dataset_read";
    DLT_NULL_CHECK(ds, F);
    DLT_NULL_CHECK(out, F);
    if (start < 0 || n < 0 || start > ds->count || n > ds->count - start)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "tokens %lld..%lld are outside 0..%lld",
                        (long long)start, (long long)(start + n), (long long)ds->count);
    dlt_ctx *ctx = ds->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "reads the device: not allowed during capture");
    if (n == 0) return DLT_OK;
    dlt_status st = ctx->be->memcpy_d2h(ctx, out, (const uint16_t *)dlt__data(ds->tokens) + start,
                                        (size_t)n * sizeof(uint16_t));
    return st == DLT_OK ? DLT_OK : dlt__err_wrap(st, F);
}

/* ---------------------------------------------------------------------------------------
 * Loader
 * ------------------------------------------------------------------------------------- */

static dlt_status make_xy(dlt_token_loader *ld, int32_t dtype, const char *F, dlt_tensor **x,
                          dlt_tensor **y) {
    int64_t shape[2] = {ld->batch_size, ld->block_size};
    *x = *y = NULL;
    dlt_status st = dlt__tensor_new(ld->ctx, dtype, shape, 2, DLT_FORMAT_CONTIGUOUS, F, x);
    if (st == DLT_OK) st = dlt__tensor_new(ld->ctx, dtype, shape, 2, DLT_FORMAT_CONTIGUOUS, F, y);
    if (st != DLT_OK) {
        dlt_tensor_release(*x);
        *x = NULL;
    }
    return st;
}

dlt_status dlt_token_loader_create(dlt_token_dataset *ds, int64_t batch_size, int64_t block_size,
                                   uint64_t seed, dlt_token_loader **out) {
    static const char *F = "dlt_token_loader_create";
    DLT_NULL_CHECK(ds, F);
    DLT_NULL_CHECK(out, F);
    if (batch_size < 1 || batch_size > INT32_MAX || block_size < 1 || block_size > INT32_MAX)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "batch_size %lld and block_size %lld must be in 1..%d", (long long)batch_size,
                        (long long)block_size, INT32_MAX);
    if (ds->count < block_size + 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "%s holds %lld tokens: windows of block_size %lld need at least %lld",
                        ds->source, (long long)ds->count, (long long)block_size,
                        (long long)block_size + 1);
    dlt_ctx *ctx = ds->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    const dlt_backend *be = ctx->be;
    if (!be->data_tokens) return dlt__be_missing(ctx, F, "data_tokens");
    if (!be->data_cursor_set || !be->data_cursor_advance)
        return dlt__be_missing(ctx, F, "data_cursor_set/advance");
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "a loader cannot be created during graph capture");
    dlt_token_loader *ld = dlt__host_calloc(ctx, 1, sizeof *ld);
    if (!ld) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the token loader");
    ld->ds = ds;
    ld->ctx = ctx;
    ld->batch_size = batch_size;
    ld->block_size = block_size;
    ld->seed = seed;
    ld->dtype = DLT_I64;
    dlt_status st;
    int64_t two = 2;
    DLT_CHECK_GOTO(st, make_xy(ld, ld->dtype, F, &ld->x, &ld->y), fail);
    DLT_CHECK_GOTO(st, dlt__tensor_new(ctx, DLT_I64, &two, 1, DLT_FORMAT_CONTIGUOUS, F, &ld->cursor),
                   fail);
    DLT_CHECK_GOTO(st, be->data_cursor_set(ctx, (dlt_data_cursor *)dlt__data(ld->cursor), 0, 0), fail);
    *out = ld;
    return DLT_OK;
fail:
    dlt_token_loader_destroy(ld);
    return dlt__err_wrap(st, F);
}

void dlt_token_loader_destroy(dlt_token_loader *ld) {
    if (!ld) return;
    dlt_tensor_release(ld->x);
    dlt_tensor_release(ld->y);
    dlt_tensor_release(ld->cursor);
    free(ld);
}

dlt_status dlt_token_loader_set_output(dlt_token_loader *ld, int32_t dtype) {
    static const char *F = "dlt_token_loader_set_output";
    DLT_NULL_CHECK(ld, F);
    if (dtype != DLT_I64 && dtype != DLT_I32)
        return dlt__err(DLT_ERR_DTYPE, F, "token batches are i64 or i32, got %s", dlt_dtype_name(dtype));
    if (dtype == ld->dtype) return DLT_OK;
    if (ld->ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "buffers cannot change during graph capture");
    dlt_tensor *x = NULL, *y = NULL;
    DLT_CHECK(make_xy(ld, dtype, F, &x, &y));
    dlt_tensor_release(ld->x);
    dlt_tensor_release(ld->y);
    ld->x = x;
    ld->y = y;
    ld->dtype = dtype;
    return DLT_OK;
}

dlt_status dlt_token_loader_next(dlt_token_loader *ld, dlt_tensor **x, dlt_tensor **y) {
    static const char *F = "dlt_token_loader_next";
    DLT_NULL_CHECK(ld, F);
    DLT_NULL_CHECK(x, F);
    DLT_NULL_CHECK(y, F);
    dlt_ctx *ctx = ld->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    dlt_token_launch L;
    memset(&L, 0, sizeof L);
    L.tokens = (const uint16_t *)dlt__data(ld->ds->tokens);
    L.count = ld->ds->count;
    L.cursor = (const dlt_data_cursor *)dlt__data(ld->cursor);
    L.seed = ld->seed;
    L.row_offset = ld->row_offset;
    L.batch_size = ld->batch_size;
    L.block_size = ld->block_size;
    L.x = ld->x;
    L.y = ld->y;
    dlt_status st = ctx->be->data_tokens(ctx, &L);
    if (st == DLT_OK)
        st = ctx->be->data_cursor_advance(ctx, (dlt_data_cursor *)dlt__data(ld->cursor));
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    if (!ctx->capturing) ld->step++;
    *x = ld->x;
    *y = ld->y;
    return DLT_OK;
}

dlt_status dlt_token_loader_seek(dlt_token_loader *ld, int64_t step) {
    static const char *F = "dlt_token_loader_seek";
    DLT_NULL_CHECK(ld, F);
    if (step < 0 || (uint64_t)step > MAX_STEP)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "step %lld is outside 0..%u", (long long)step,
                        MAX_STEP);
    dlt_ctx *ctx = ld->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "seeking inside a captured step would rewind on every replay: seek "
                        "eagerly between replays");
    dlt_status st = ctx->be->data_cursor_set(ctx, (dlt_data_cursor *)dlt__data(ld->cursor), step, 0);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    ld->step = step;
    return DLT_OK;
}

dlt_status dlt_token_loader_position(dlt_token_loader *ld, int64_t *step) {
    static const char *F = "dlt_token_loader_position";
    DLT_NULL_CHECK(ld, F);
    DLT_NULL_CHECK(step, F);
    dlt_ctx *ctx = ld->ctx;
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "reads the device: not allowed during capture");
    dlt_data_cursor cur;
    dlt_status st = ctx->be->memcpy_d2h(ctx, &cur, dlt__data(ld->cursor), sizeof cur);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    *step = cur.batch;
    return DLT_OK;
}

dlt_status dlt_token_loader_offsets(const dlt_token_loader *ld, int64_t step, int64_t *out, int64_t n) {
    static const char *F = "dlt_token_loader_offsets";
    DLT_NULL_CHECK(ld, F);
    DLT_NULL_CHECK(out, F);
    if (n < ld->batch_size)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "out holds %lld entries; a batch has %lld",
                        (long long)n, (long long)ld->batch_size);
    if (step < 0 || (uint64_t)step > MAX_STEP)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "step %lld is outside 0..%u", (long long)step,
                        MAX_STEP);
    uint64_t range = (uint64_t)(ld->ds->count - ld->block_size);
    for (int64_t b = 0; b < ld->batch_size; b++)
        out[b] = dlt__token_offset(ld->seed, step, b + ld->row_offset, range);
    return DLT_OK;
}
