/*
 * test_tokens.c - token data on the CPU: llm.c and nanoGPT token files, host and synthetic
 * tokens, the random-window token loader, and nanoGPT's character tokenizer.
 *
 * Expectations are independent of the library: token files are written here byte by byte
 * (little-endian, llm.c's 1024-byte header), window offsets come from the reference Philox
 * of tests/ref.c with a 128-bit product (and, for range 2^32, simply Philox's first word),
 * the tokenizer is checked on hand-worked strings (UTF-8 bytes, code-point order) and on
 * tiny Shakespeare against figures computed with nanoGPT's prepare.py logic in Python
 * (65 characters, 1,003,854 train / 111,540 val, id sums). Every error case checks the
 * status, that the message names the file and the first bad position, and that nothing
 * stayed allocated.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/data/data_internal.h" /* white-box: ctx->capturing (replay emulation) */
#include "fs_cases.h"
#include "harness.h"
#include "ref.h"

static dlt_ctx *g_ctx;
static char g_root[256];

static uint64_t live_allocs(void) {
    uint64_t n = 0;
    if (dlt_memory_stat(g_ctx, DLT_MEM_ALLOC_COUNT, &n) != DLT_OK) return UINT64_MAX;
    return n;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) {
        printf("# cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* An llm.c token file: header (magic, version, count as given) then n tokens. */
static void write_llmc(const char *path, uint32_t magic, uint32_t version, uint32_t count,
                       const uint16_t *tok, size_t n) {
    size_t bytes = 1024 + 2 * n;
    uint8_t *buf = calloc(1, bytes);
    put32(buf, magic);
    put32(buf + 4, version);
    put32(buf + 8, count);
    for (size_t i = 0; i < n; i++) {
        buf[1024 + 2 * i] = (uint8_t)tok[i];
        buf[1024 + 2 * i + 1] = (uint8_t)(tok[i] >> 8);
    }
    write_bytes(path, buf, bytes);
    free(buf);
}

static void write_raw(const char *path, const uint16_t *tok, size_t n) {
    uint8_t *buf = malloc(2 * n + 1);
    for (size_t i = 0; i < n; i++) {
        buf[2 * i] = (uint8_t)tok[i];
        buf[2 * i + 1] = (uint8_t)(tok[i] >> 8);
    }
    write_bytes(path, buf, 2 * n);
    free(buf);
}

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_root, name); }

static int64_t *read_i64(const dlt_tensor *t) {
    int64_t n = dlt_tensor_numel(t);
    int64_t *v = malloc((size_t)n * sizeof *v);
    if (dlt_tensor_dtype(t) == DLT_I64) {
        if (dlt_tensor_copy_to_host(t, v, (size_t)n * sizeof *v) != DLT_OK) return NULL;
    } else {
        int32_t *w = malloc((size_t)n * sizeof *w);
        if (dlt_tensor_copy_to_host(t, w, (size_t)n * sizeof *w) != DLT_OK) return NULL;
        for (int64_t i = 0; i < n; i++) v[i] = w[i];
        free(w);
    }
    return v;
}

/* Checks batch (x, y) of draw `step` of a loader (seed, B, T) over tokens[0..n). */
static int check_batch(const dlt_tensor *x, const dlt_tensor *y, const uint16_t *tokens, int64_t n,
                       uint64_t seed, int64_t step, int64_t B, int64_t T) {
    int64_t *xv = read_i64(x), *yv = read_i64(y);
    int bad = 0;
    if (!xv || !yv || dlt_tensor_dim(x, 0) != B || dlt_tensor_dim(x, 1) != T) bad = 1;
    for (int64_t b = 0; !bad && b < B; b++) {
        int64_t o = ref_token_offset(seed, step, b, (uint64_t)(n - T));
        if (o < 0 || o >= n - T) bad = 1;
        for (int64_t t = 0; !bad && t < T; t++)
            if (xv[b * T + t] != tokens[o + t] || yv[b * T + t] != tokens[o + t + 1]) {
                printf("# step %lld row %lld t %lld: x %lld y %lld, want %u %u (offset %lld)\n",
                       (long long)step, (long long)b, (long long)t, (long long)xv[b * T + t],
                       (long long)yv[b * T + t], tokens[o + t], tokens[o + t + 1], (long long)o);
                bad = 1;
            }
    }
    free(xv);
    free(yv);
    return !bad;
}

/* ---------------------------------------------------------------------------------------
 * Files
 * ------------------------------------------------------------------------------------- */

static void test_offsets_reference(void) {
    /* range 2^32: the offset is Philox's first word; range 1: always 0 */
    uint16_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = (uint16_t)i;
    dlt_token_dataset *ds = NULL;
    dlt_token_loader *ld = NULL;
    CHECK_OK(dlt_token_dataset_create(g_ctx, tok, 64, 64, &ds));
    CHECK_OK(dlt_token_loader_create(ds, 7, 63, 5, &ld)); /* range 64 - 63 = 1 */
    int64_t off[9];
    for (int64_t s = 0; s < 4; s++) {
        CHECK_OK(dlt_token_loader_offsets(ld, s, off, 7));
        for (int b = 0; b < 7; b++) CHECK(off[b] == 0);
    }
    dlt_token_loader_destroy(ld);
    CHECK_OK(dlt_token_loader_create(ds, 9, 3, UINT64_C(0xDEADBEEF12345678), &ld)); /* range 61 */
    for (int64_t s = 0; s < 50; s++) {
        CHECK_OK(dlt_token_loader_offsets(ld, s, off, 9));
        for (int b = 0; b < 9; b++) {
            int64_t want = ref_token_offset(UINT64_C(0xDEADBEEF12345678), s, b, 61);
            CHECK(off[b] == want && off[b] >= 0 && off[b] < 61, "step %lld row %d: %lld vs %lld",
                  (long long)s, b, (long long)off[b], (long long)want);
        }
    }
    CHECK_STATUS(dlt_token_loader_offsets(ld, 0, off, 8), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_loader_offsets(ld, -1, off, 9), DLT_ERR_INVALID_ARGUMENT);
    dlt_token_loader_destroy(ld);
    dlt_token_dataset_destroy(ds);
    /* the 128-bit reference against the top word when range = 2^32 */
    for (int64_t s = 0; s < 20; s++)
        for (int64_t b = 0; b < 5; b++) {
            uint32_t w[4];
            ref_philox(77, ((uint64_t)s << 32) | (uint64_t)b, w);
            CHECK(ref_token_offset(77, s, b, UINT64_C(1) << 32) == (int64_t)w[0]);
        }
}

static void test_llmc_file(void) {
    enum { N = 300, V = 50257 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)((i * 7919 + 13) % V);
    char p[400];
    path_of(p, sizeof p, "train_llmc.bin");
    write_llmc(p, 20240520, 1, N, tok, N);
    uint64_t before = live_allocs();
    dlt_token_dataset *ds = NULL;
    CHECK_OK(dlt_token_file_open(g_ctx, p, DLT_TOKENS_LLMC, V, &ds));
    CHECK(dlt_token_dataset_size(ds) == N && dlt_token_dataset_vocab_size(ds) == V);
    uint16_t back[N];
    CHECK_OK(dlt_token_dataset_read(ds, 0, N, back));
    CHECK(memcmp(back, tok, sizeof tok) == 0);
    CHECK_OK(dlt_token_dataset_read(ds, N - 2, 2, back));
    CHECK(back[0] == tok[N - 2] && back[1] == tok[N - 1]);
    CHECK_STATUS(dlt_token_dataset_read(ds, N - 1, 2, back), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_dataset_read(ds, -1, 1, back), DLT_ERR_INVALID_ARGUMENT);
    dlt_token_loader *ld = NULL;
    CHECK_OK(dlt_token_loader_create(ds, 4, 16, 1234, &ld));
    dlt_tensor *x = NULL, *y = NULL, *x0 = NULL;
    for (int64_t s = 0; s < 5; s++) {
        if (s == 3) CHECK_OK(dlt_token_loader_set_output(ld, DLT_I32));
        CHECK_OK(dlt_token_loader_next(ld, &x, &y));
        CHECK(dlt_tensor_dtype(x) == (s < 3 ? DLT_I64 : DLT_I32) && dlt_tensor_dtype(y) == dlt_tensor_dtype(x));
        if (s == 0) x0 = x;
        if (s > 0 && s < 3) CHECK(x == x0, "the same tensor every step");
        CHECK(check_batch(x, y, tok, N, 1234, s, 4, 16), "step %lld", (long long)s);
    }
    int64_t pos = -1;
    CHECK_OK(dlt_token_loader_position(ld, &pos));
    CHECK(pos == 5);
    dlt_token_loader_destroy(ld);
    dlt_token_dataset_destroy(ds);
    CHECK(live_allocs() == before, "allocations left behind");
}

static void test_raw_file(void) {
    enum { N = 1001, V = 65 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)((i * i + 3 * i) % V);
    char p[400];
    path_of(p, sizeof p, "train.bin");
    write_raw(p, tok, N);
    dlt_token_dataset *ds = NULL;
    CHECK_OK(dlt_token_file_open(g_ctx, p, DLT_TOKENS_RAW, V, &ds));
    CHECK(dlt_token_dataset_size(ds) == N);
    dlt_token_loader *ld = NULL;
    CHECK_OK(dlt_token_loader_create(ds, 8, 32, 0, &ld));
    for (int64_t s = 0; s < 4; s++) {
        dlt_tensor *x = NULL, *y = NULL;
        CHECK_OK(dlt_token_loader_next(ld, &x, &y));
        CHECK(check_batch(x, y, tok, N, 0, s, 8, 32), "step %lld", (long long)s);
    }
    /* the same file read as llm.c's format has no magic */
    dlt_token_dataset *bad = (dlt_token_dataset *)0x1;
    CHECK_STATUS(dlt_token_file_open(g_ctx, p, DLT_TOKENS_LLMC, V, &bad), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), p) && strstr(dlt_last_error(), "magic"), "%s", dlt_last_error());
    /* the smallest dataset a window fits: block_size + 1 tokens, offset always 0 */
    dlt_token_loader *tight = NULL;
    CHECK_OK(dlt_token_loader_create(ds, 2, N - 1, 3, &tight));
    dlt_tensor *x = NULL, *y = NULL;
    CHECK_OK(dlt_token_loader_next(tight, &x, &y));
    CHECK(check_batch(x, y, tok, N, 3, 0, 2, N - 1));
    dlt_token_loader_destroy(tight);
    dlt_token_loader_destroy(ld);
    dlt_token_dataset_destroy(ds);
}

/* Same seed, same batches; another seed, others; seek continues an uninterrupted run; a
 * replay (context marked capturing) moves only the device counter. */
static void test_determinism_and_replay(void) {
    dlt_token_dataset *ds = NULL;
    CHECK_OK(dlt_synthetic_tokens_create(g_ctx, 5000, 1000, 11, &ds));
    uint16_t *tok = malloc(5000 * sizeof *tok);
    CHECK_OK(dlt_token_dataset_read(ds, 0, 5000, tok));
    dlt_token_loader *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(dlt_token_loader_create(ds, 6, 20, 42, &a));
    CHECK_OK(dlt_token_loader_create(ds, 6, 20, 42, &b));
    CHECK_OK(dlt_token_loader_create(ds, 6, 20, 43, &c));
    int same_ab = 1, same_ac = 1;
    for (int s = 0; s < 4; s++) {
        dlt_tensor *xa, *ya, *xb, *yb, *xc, *yc;
        CHECK_OK(dlt_token_loader_next(a, &xa, &ya));
        CHECK_OK(dlt_token_loader_next(b, &xb, &yb));
        CHECK_OK(dlt_token_loader_next(c, &xc, &yc));
        int64_t *va = read_i64(xa), *vb = read_i64(xb), *vc = read_i64(xc);
        if (memcmp(va, vb, 120 * sizeof *va) != 0) same_ab = 0;
        if (memcmp(va, vc, 120 * sizeof *va) != 0) same_ac = 0;
        free(va);
        free(vb);
        free(vc);
    }
    CHECK(same_ab, "same seed, same batches");
    CHECK(!same_ac, "another seed, other batches");
    /* seek: draw 2 again, then 3, as an uninterrupted run would */
    CHECK_OK(dlt_token_loader_seek(b, 2));
    for (int64_t s = 2; s < 5; s++) {
        dlt_tensor *x, *y;
        CHECK_OK(dlt_token_loader_next(b, &x, &y));
        CHECK(check_batch(x, y, tok, 5000, 42, s, 6, 20), "after seek, step %lld", (long long)s);
    }
    CHECK_STATUS(dlt_token_loader_seek(b, -1), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_loader_seek(b, INT64_C(1) << 33), DLT_ERR_INVALID_ARGUMENT);
    /* replays: host position frozen, device counter moving, every draw the next one */
    CHECK_OK(dlt_token_loader_seek(a, 0));
    dlt_tensor *x0 = NULL, *y0 = NULL;
    CHECK_OK(dlt_token_loader_next(a, &x0, &y0)); /* the eager warm-up step */
    for (int64_t s = 1; s < 4; s++) {
        dlt_tensor *x, *y;
        g_ctx->capturing = 1;
        CHECK_OK(dlt_token_loader_next(a, &x, &y));
        CHECK_STATUS(dlt_token_loader_seek(a, 0), DLT_ERR_INVALID_STATE);
        int64_t pos = 0;
        CHECK_STATUS(dlt_token_loader_position(a, &pos), DLT_ERR_INVALID_STATE);
        CHECK_STATUS(dlt_token_loader_set_output(a, DLT_I32), DLT_ERR_INVALID_STATE);
        g_ctx->capturing = 0;
        CHECK(x == x0 && y == y0, "replays write the captured buffers");
        CHECK(a->step == 1, "host counter frozen while capturing: %lld", (long long)a->step);
        CHECK_OK(dlt_token_loader_position(a, &pos));
        CHECK(pos == s + 1, "device counter %lld after replay %lld", (long long)pos, (long long)s);
        CHECK(check_batch(x, y, tok, 5000, 42, s, 6, 20), "replay %lld", (long long)s);
    }
    dlt_token_loader_destroy(a);
    dlt_token_loader_destroy(b);
    dlt_token_loader_destroy(c);
    dlt_token_dataset_destroy(ds);
    free(tok);
}

/* Every malformed or unreadable file: the status, the file and the position in the
 * message, nothing allocated, the out-pointer untouched. */
static int open_locked(void *arg) {
    const char *path = arg;
    dlt_token_dataset *ds = NULL;
    dlt_status st = dlt_token_file_open(g_ctx, path, DLT_TOKENS_RAW, 100, &ds);
    if (st == DLT_ERR_IO && strstr(dlt_last_error(), path) &&
        strstr(dlt_last_error(), "Permission denied"))
        return 0;
    printf("# unreadable token file: status %d, message: %s\n", st, dlt_last_error());
    if (st == DLT_OK) dlt_token_dataset_destroy(ds);
    return 1;
}

static void expect_refusal(const char *path, int32_t format, int32_t vocab, dlt_status code,
                           const char *what1, const char *what2, int line) {
    dlt_token_dataset *ds = (dlt_token_dataset *)0x1;
    dlt_clear_error();
    dlt_status st = dlt_token_file_open(g_ctx, path, format, vocab, &ds);
    const char *m = dlt_last_error();
    if (st != code || !strstr(m, path) || !strstr(m, "dlt_token_file_open") ||
        (what1 && !strstr(m, what1)) || (what2 && !strstr(m, what2)) || ds != (dlt_token_dataset *)0x1)
        th_fail(__FILE__, line, "%s: status %d (want %d), message: %s", path, st, code, m);
}
#define REFUSED(path, fmt, vocab, code, w1, w2) expect_refusal(path, fmt, vocab, code, w1, w2, __LINE__)

static void test_file_refusals(void) {
    uint64_t before = live_allocs();
    uint16_t tok[40];
    for (int i = 0; i < 40; i++) tok[i] = (uint16_t)i;
    char p[400];
    path_of(p, sizeof p, "bad_magic.bin");
    write_llmc(p, 20240521, 1, 40, tok, 40);
    REFUSED(p, DLT_TOKENS_LLMC, 100, DLT_ERR_FORMAT, "bad magic 20240521", NULL);
    path_of(p, sizeof p, "bad_version.bin");
    write_llmc(p, 20240520, 2, 40, tok, 40);
    REFUSED(p, DLT_TOKENS_LLMC, 100, DLT_ERR_FORMAT, "version 2", NULL);
    path_of(p, sizeof p, "truncated.bin"); /* the header says 41 tokens, 40 follow */
    write_llmc(p, 20240520, 1, 41, tok, 40);
    REFUSED(p, DLT_TOKENS_LLMC, 100, DLT_ERR_FORMAT, "41 tokens", "truncated");
    path_of(p, sizeof p, "trailing.bin");
    write_llmc(p, 20240520, 1, 39, tok, 40);
    REFUSED(p, DLT_TOKENS_LLMC, 100, DLT_ERR_FORMAT, "39 tokens", "trailing");
    path_of(p, sizeof p, "zero_count.bin");
    write_llmc(p, 20240520, 1, 0, tok, 0);
    REFUSED(p, DLT_TOKENS_LLMC, 100, DLT_ERR_FORMAT, "count is 0", NULL);
    path_of(p, sizeof p, "short.bin"); /* shorter than the header */
    uint8_t hdr[600] = {0};
    put32(hdr, 20240520);
    write_bytes(p, hdr, sizeof hdr);
    REFUSED(p, DLT_TOKENS_LLMC, 100, DLT_ERR_FORMAT, "600 bytes", "1024-byte header");
    path_of(p, sizeof p, "empty.bin");
    write_bytes(p, hdr, 0);
    REFUSED(p, DLT_TOKENS_LLMC, 100, DLT_ERR_FORMAT, "empty", NULL);
    REFUSED(p, DLT_TOKENS_RAW, 100, DLT_ERR_FORMAT, "empty", NULL);
    path_of(p, sizeof p, "big_token.bin"); /* token 37 is 37: not below a vocabulary of 37 */
    write_llmc(p, 20240520, 1, 40, tok, 40);
    REFUSED(p, DLT_TOKENS_LLMC, 37, DLT_ERR_FORMAT, "token 37 (byte offset 1098) is 37",
            "vocabulary size 37");
    path_of(p, sizeof p, "big_token_raw.bin");
    write_raw(p, tok, 40);
    REFUSED(p, DLT_TOKENS_RAW, 5, DLT_ERR_FORMAT, "token 5 (byte offset 10) is 5", NULL);
    path_of(p, sizeof p, "odd.bin");
    write_bytes(p, hdr + 8, 7);
    REFUSED(p, DLT_TOKENS_RAW, 100, DLT_ERR_FORMAT, "odd", "byte 6");
    path_of(p, sizeof p, "llmc_as_raw.bin");
    write_llmc(p, 20240520, 1, 40, tok, 40);
    REFUSED(p, DLT_TOKENS_RAW, 65536, DLT_ERR_FORMAT, "DLT_TOKENS_LLMC", NULL);
    /* unreadable: missing, a directory, a symlink loop, a dangling link, no permission */
    path_of(p, sizeof p, "missing.bin");
    REFUSED(p, DLT_TOKENS_RAW, 100, DLT_ERR_IO, "No such file", NULL);
    path_of(p, sizeof p, "dir.bin");
    CHECK(mkdir(p, 0700) == 0 || errno == EEXIST);
    REFUSED(p, DLT_TOKENS_RAW, 100, DLT_ERR_IO, "not a regular file", NULL);
    CHECK(fs_symlink_loop(g_root, "loop.bin", p, sizeof p) == 0);
    REFUSED(p, DLT_TOKENS_LLMC, 100, DLT_ERR_IO, "symbolic links", NULL);
    CHECK(fs_dangling_link(g_root, "dangling.bin", p, sizeof p) == 0);
    REFUSED(p, DLT_TOKENS_RAW, 100, DLT_ERR_IO, "No such file", NULL);
    path_of(p, sizeof p, "locked.bin");
    write_raw(p, tok, 40);
    CHECK(chmod(p, 0) == 0);
    CHECK(fs_unprivileged(open_locked, p) == 0, "permission denied not reported");
    /* arguments */
    dlt_token_dataset *ds = (dlt_token_dataset *)0x1;
    path_of(p, sizeof p, "train.bin");
    CHECK_STATUS(dlt_token_file_open(g_ctx, p, 0, 100, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_file_open(g_ctx, p, 3, 100, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_file_open(g_ctx, p, DLT_TOKENS_RAW, 0, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_file_open(g_ctx, p, DLT_TOKENS_RAW, 65537, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_file_open(NULL, p, DLT_TOKENS_RAW, 100, &ds), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_token_file_open(g_ctx, NULL, DLT_TOKENS_RAW, 100, &ds), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_token_file_open(g_ctx, p, DLT_TOKENS_RAW, 100, NULL), DLT_ERR_NULL_POINTER);
    /* host tokens */
    tok[17] = 100;
    CHECK_STATUS(dlt_token_dataset_create(g_ctx, tok, 40, 100, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "token 17 is 100") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_token_dataset_create(g_ctx, tok, 0, 100, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_dataset_create(g_ctx, NULL, 4, 100, &ds), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_synthetic_tokens_create(g_ctx, 0, 100, 1, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_synthetic_tokens_create(g_ctx, 10, 0, 1, &ds), DLT_ERR_INVALID_ARGUMENT);
    CHECK(ds == (dlt_token_dataset *)0x1);
    CHECK(live_allocs() == before, "refusals left allocations behind");
    dlt_token_dataset_destroy(NULL);
    CHECK(dlt_token_dataset_size(NULL) == 0 && dlt_token_dataset_vocab_size(NULL) == 0);
}

static void test_loader_refusals(void) {
    uint16_t tok[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0};
    dlt_token_dataset *ds = NULL;
    CHECK_OK(dlt_token_dataset_create(g_ctx, tok, 10, 10, &ds));
    uint64_t before = live_allocs();
    dlt_token_loader *ld = (dlt_token_loader *)0x1;
    CHECK_STATUS(dlt_token_loader_create(ds, 2, 10, 0, &ld), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "host tokens holds 10 tokens") && strstr(dlt_last_error(), "at least 11"),
          "%s", dlt_last_error());
    CHECK_STATUS(dlt_token_loader_create(ds, 0, 4, 0, &ld), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_loader_create(ds, 2, 0, 0, &ld), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_loader_create(ds, INT64_C(1) << 31, 4, 0, &ld), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_token_loader_create(NULL, 2, 4, 0, &ld), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_token_loader_create(ds, 2, 4, 0, NULL), DLT_ERR_NULL_POINTER);
    CHECK(ld == (dlt_token_loader *)0x1 && live_allocs() == before);
    CHECK_OK(dlt_token_loader_create(ds, 2, 9, 0, &ld));
    CHECK_STATUS(dlt_token_loader_set_output(ld, DLT_F32), DLT_ERR_DTYPE);
    CHECK_STATUS(dlt_token_loader_set_output(ld, DLT_U8), DLT_ERR_DTYPE);
    dlt_tensor *x = NULL, *y = NULL;
    CHECK_STATUS(dlt_token_loader_next(ld, NULL, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_token_loader_next(NULL, &x, &y), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_token_loader_position(ld, NULL), DLT_ERR_NULL_POINTER);
    dlt_token_loader_destroy(ld);
    dlt_token_loader_destroy(NULL);
    dlt_token_dataset_destroy(ds);
}

static void test_synthetic_tokens(void) {
    dlt_token_dataset *a = NULL, *b = NULL, *c = NULL;
    enum { N = 80000, V = 8 };
    CHECK_OK(dlt_synthetic_tokens_create(g_ctx, N, V, 5, &a));
    CHECK_OK(dlt_synthetic_tokens_create(g_ctx, N, V, 5, &b));
    CHECK_OK(dlt_synthetic_tokens_create(g_ctx, N, V, 6, &c));
    uint16_t *ta = malloc(N * 2), *tb = malloc(N * 2), *tc = malloc(N * 2);
    CHECK_OK(dlt_token_dataset_read(a, 0, N, ta));
    CHECK_OK(dlt_token_dataset_read(b, 0, N, tb));
    CHECK_OK(dlt_token_dataset_read(c, 0, N, tc));
    CHECK(memcmp(ta, tb, N * 2) == 0, "same seed, same tokens");
    CHECK(memcmp(ta, tc, N * 2) != 0, "another seed, other tokens");
    int hist[V] = {0};
    for (int i = 0; i < N; i++) {
        REQUIRE(ta[i] < V, "token %d is %u", i, ta[i]);
        hist[ta[i]]++;
    }
    for (int v = 0; v < V; v++) CHECK(fabs((double)hist[v] - N / V) < 0.05 * N / V, "token %d: %d", v, hist[v]);
    /* token i: word i % 4 of philox(seed, 4 << 56 | i / 4) scaled to the vocabulary */
    for (int i = 0; i < 12; i++) {
        uint32_t w[4];
        ref_philox(5, (UINT64_C(4) << 56) + (uint64_t)(i / 4), w);
        CHECK(ta[i] == (uint16_t)(((uint64_t)w[i % 4] * V) >> 32), "token %d", i);
    }
    free(ta);
    free(tb);
    free(tc);
    dlt_token_dataset_destroy(a);
    dlt_token_dataset_destroy(b);
    dlt_token_dataset_destroy(c);
}

/* ---------------------------------------------------------------------------------------
 * Character tokenizer
 * ------------------------------------------------------------------------------------- */

static void test_char_tokenizer(void) {
    const char *text = "hello world\n";
    dlt_char_tokenizer *tok = NULL;
    CHECK_OK(dlt_char_tokenizer_create(text, strlen(text), &tok));
    /* sorted distinct characters: \n, space, d, e, h, l, o, r, w */
    const char *chars = "\n dehlorw";
    CHECK(dlt_char_tokenizer_vocab_size(tok) == 9);
    for (int i = 0; i < 9; i++) {
        CHECK(dlt_char_tokenizer_itos(tok, i) == chars[i], "itos(%d)", i);
        CHECK(dlt_char_tokenizer_stoi(tok, chars[i]) == i, "stoi(%c)", chars[i]);
    }
    CHECK(dlt_char_tokenizer_itos(tok, 9) == -1 && dlt_char_tokenizer_itos(tok, -1) == -1);
    CHECK(dlt_char_tokenizer_stoi(tok, 'z') == -1 && dlt_char_tokenizer_stoi(NULL, 'h') == -1);
    int64_t n = -1;
    uint16_t ids[16];
    CHECK_OK(dlt_char_tokenizer_encode(tok, "hello", 5, NULL, 0, &n));
    CHECK(n == 5);
    CHECK_OK(dlt_char_tokenizer_encode(tok, "hello", 5, ids, 16, &n));
    const uint16_t want[5] = {4, 3, 5, 5, 6};
    CHECK(memcmp(ids, want, sizeof want) == 0, "%u %u %u %u %u", ids[0], ids[1], ids[2], ids[3], ids[4]);
    size_t len = 0;
    char buf[32];
    CHECK_OK(dlt_char_tokenizer_decode(tok, ids, 5, NULL, 0, &len));
    CHECK(len == 5);
    CHECK_OK(dlt_char_tokenizer_decode(tok, ids, 5, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "hello") == 0);
    /* refusals change nothing */
    memset(ids, 0xAB, sizeof ids);
    CHECK_STATUS(dlt_char_tokenizer_encode(tok, "hello", 5, ids, 4, &n), DLT_ERR_INVALID_ARGUMENT);
    CHECK(ids[0] == 0xABAB, "nothing written when ids is too small");
    CHECK_STATUS(dlt_char_tokenizer_encode(tok, "held!", 5, ids, 16, &n), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "U+0021") && strstr(dlt_last_error(), "byte offset 4"), "%s",
          dlt_last_error());
    CHECK(ids[0] == 0xABAB);
    const uint16_t bad[3] = {1, 9, 2};
    CHECK_STATUS(dlt_char_tokenizer_decode(tok, bad, 3, buf, sizeof buf, &len), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "ids[1] = 9") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_char_tokenizer_decode(tok, ids, 5, buf, 5, &len), DLT_ERR_INVALID_ARGUMENT);
    dlt_char_tokenizer_destroy(tok);

    /* multi-byte characters: h e-acute l o euro grinning-face, ordered by code point */
    const char *utf = "h\xC3\xA9llo\xE2\x82\xAC\xF0\x9F\x98\x80";
    CHECK_OK(dlt_char_tokenizer_create(utf, strlen(utf), &tok));
    const int32_t cps[6] = {'h', 'l', 'o', 0xE9, 0x20AC, 0x1F600};
    CHECK(dlt_char_tokenizer_vocab_size(tok) == 6);
    for (int i = 0; i < 6; i++) CHECK(dlt_char_tokenizer_itos(tok, i) == cps[i], "itos(%d)", i);
    CHECK_OK(dlt_char_tokenizer_encode(tok, utf, strlen(utf), ids, 16, &n));
    const uint16_t want2[7] = {0, 3, 1, 1, 2, 4, 5};
    CHECK(n == 7 && memcmp(ids, want2, sizeof want2) == 0);
    CHECK_OK(dlt_char_tokenizer_decode(tok, ids, n, buf, sizeof buf, &len));
    CHECK(len == strlen(utf) && strcmp(buf, utf) == 0, "round trip");
    dlt_char_tokenizer_destroy(tok);

    /* invalid UTF-8 as Python's decoder sees it: the byte offset of each */
    static const struct {
        const char *s;
        size_t n, at;
    } invalid[] = {
        {"ab\xC0\x80", 4, 2},         /* overlong NUL */
        {"a\xED\xA0\x80", 4, 1},      /* a surrogate */
        {"abc\xE2\x82", 5, 3},        /* truncated */
        {"\xF5\x80\x80\x80", 4, 0},   /* above U+10FFFF */
        {"ok\x80", 3, 2},             /* a lone continuation byte */
        {"x\xE0\x80\xAF", 4, 1},      /* overlong 3-byte */
    };
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        dlt_char_tokenizer *t2 = (dlt_char_tokenizer *)0x1;
        char at[48];
        snprintf(at, sizeof at, "byte offset %zu", invalid[i].at);
        CHECK_STATUS(dlt_char_tokenizer_create(invalid[i].s, invalid[i].n, &t2), DLT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(dlt_last_error(), at) != NULL, "case %zu: %s", i, dlt_last_error());
        CHECK(t2 == (dlt_char_tokenizer *)0x1);
    }
    CHECK_STATUS(dlt_char_tokenizer_create("", 0, &tok), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_char_tokenizer_create(NULL, 3, &tok), DLT_ERR_NULL_POINTER);
    dlt_char_tokenizer_destroy(NULL);
    CHECK(dlt_char_tokenizer_vocab_size(NULL) == 0);
}

/* A text file read as Python reads it: CRLF and CR become LF; the 90/10 split in
 * characters. */
static void test_char_text_open(void) {
    char p[400];
    path_of(p, sizeof p, "crlf.txt");
    const char *raw = "ab\r\ncd\ref\ngh\r\n\xC3\xA9";
    write_bytes(p, raw, strlen(raw));
    uint64_t before = live_allocs();
    dlt_char_tokenizer *tok = NULL;
    dlt_token_dataset *train = NULL, *val = NULL;
    CHECK_OK(dlt_char_text_open(g_ctx, p, 0.9, &tok, &train, &val));
    /* text: a b \n c d \n e f \n g h \n e-acute = 13 characters; int(13 * 0.9) = 11 */
    CHECK(dlt_char_tokenizer_vocab_size(tok) == 10, "%d", dlt_char_tokenizer_vocab_size(tok));
    CHECK(dlt_char_tokenizer_itos(tok, 0) == '\n' && dlt_char_tokenizer_itos(tok, 9) == 0xE9);
    CHECK(dlt_char_tokenizer_stoi(tok, '\r') == -1, "CR translated away");
    CHECK(dlt_token_dataset_size(train) == 11 && dlt_token_dataset_size(val) == 2);
    CHECK(dlt_token_dataset_vocab_size(train) == 10 && dlt_token_dataset_vocab_size(val) == 10);
    uint16_t t[11], v[2];
    CHECK_OK(dlt_token_dataset_read(train, 0, 11, t));
    CHECK_OK(dlt_token_dataset_read(val, 0, 2, v));
    const uint16_t want_t[11] = {1, 2, 0, 3, 4, 0, 5, 6, 0, 7, 8}, want_v[2] = {0, 9};
    CHECK(memcmp(t, want_t, sizeof t) == 0 && memcmp(v, want_v, sizeof v) == 0);
    dlt_char_tokenizer *t2 = NULL;
    CHECK_OK(dlt_char_tokenizer_from_file(p, &t2));
    CHECK(dlt_char_tokenizer_vocab_size(t2) == 10);
    dlt_char_tokenizer_destroy(t2);
    dlt_char_tokenizer_destroy(tok);
    dlt_token_dataset_destroy(train);
    dlt_token_dataset_destroy(val);
    /* the tokenizer out-pointer is optional */
    CHECK_OK(dlt_char_text_open(g_ctx, p, 0.5, NULL, &train, &val));
    CHECK(dlt_token_dataset_size(train) == 6 && dlt_token_dataset_size(val) == 7);
    dlt_token_dataset_destroy(train);
    dlt_token_dataset_destroy(val);
    CHECK(live_allocs() == before);

    /* refusals */
    train = val = (dlt_token_dataset *)0x1;
    tok = (dlt_char_tokenizer *)0x1;
    CHECK_STATUS(dlt_char_text_open(g_ctx, p, 1.0, &tok, &train, &val), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_char_text_open(g_ctx, p, 0.0, &tok, &train, &val), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_char_text_open(g_ctx, p, NAN, &tok, &train, &val), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_char_text_open(g_ctx, p, 0.01, &tok, &train, &val), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "train part empty") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_char_text_open(g_ctx, p, 0.9, &tok, NULL, &val), DLT_ERR_NULL_POINTER);
    path_of(p, sizeof p, "empty.txt");
    write_bytes(p, "", 0);
    CHECK_STATUS(dlt_char_text_open(g_ctx, p, 0.9, &tok, &train, &val), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), p) && strstr(dlt_last_error(), "empty"), "%s", dlt_last_error());
    path_of(p, sizeof p, "latin1.txt");
    write_bytes(p, "caf\xE9 au lait", 12);
    CHECK_STATUS(dlt_char_text_open(g_ctx, p, 0.9, &tok, &train, &val), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), p) && strstr(dlt_last_error(), "byte offset 3"), "%s", dlt_last_error());
    CHECK_STATUS(dlt_char_tokenizer_from_file(p, &tok), DLT_ERR_FORMAT);
    CHECK(fs_dangling_link(g_root, "dangling.txt", p, sizeof p) == 0);
    CHECK_STATUS(dlt_char_text_open(g_ctx, p, 0.9, &tok, &train, &val), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), p) != NULL, "%s", dlt_last_error());
    CHECK(fs_symlink_loop(g_root, "loop.txt", p, sizeof p) == 0);
    CHECK_STATUS(dlt_char_tokenizer_from_file(p, &tok), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), "symbolic links") != NULL, "%s", dlt_last_error());
    CHECK(tok == (dlt_char_tokenizer *)0x1 && train == (dlt_token_dataset *)0x1 &&
          val == (dlt_token_dataset *)0x1);
    CHECK(live_allocs() == before, "refusals left allocations behind");
}

/* nanoGPT's shakespeare_char on the real file: figures from its prepare.py logic. */
static void test_tiny_shakespeare(void) {
    const char *root = getenv("DLT_SOURCE_ROOT");
    char p[600];
    snprintf(p, sizeof p, "%s/../shared/data/tinyshakespeare/input.txt", root ? root : ".");
    if (!root || access(p, R_OK) != 0) SKIP("tiny Shakespeare not found (../shared/data)");
    dlt_char_tokenizer *tok = NULL;
    dlt_token_dataset *train = NULL, *val = NULL;
    CHECK_OK(dlt_char_text_open(g_ctx, p, 0.9, &tok, &train, &val));
    const char *chars = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    REQUIRE(dlt_char_tokenizer_vocab_size(tok) == 65, "%d", dlt_char_tokenizer_vocab_size(tok));
    for (int i = 0; i < 65; i++) CHECK(dlt_char_tokenizer_itos(tok, i) == chars[i], "itos(%d)", i);
    CHECK(dlt_token_dataset_size(train) == 1003854 && dlt_token_dataset_size(val) == 111540,
          "%lld / %lld", (long long)dlt_token_dataset_size(train), (long long)dlt_token_dataset_size(val));
    uint16_t *t = malloc(1003854 * sizeof *t), *v = malloc(111540 * sizeof *v);
    CHECK_OK(dlt_token_dataset_read(train, 0, 1003854, t));
    CHECK_OK(dlt_token_dataset_read(val, 0, 111540, v));
    const uint16_t first[20] = {18, 47, 56, 57, 58, 1, 15, 47, 58, 47, 64, 43, 52, 10, 0, 14, 43, 44, 53, 56};
    CHECK(memcmp(t, first, sizeof first) == 0, "\"First Citizen:\\nBefor\"");
    const uint16_t val_first[10] = {12, 0, 0, 19, 30, 17, 25, 21, 27, 10};
    CHECK(memcmp(v, val_first, sizeof val_first) == 0, "\"?\\n\\nGREMIO:\"");
    int64_t st = 0, sv = 0;
    for (int64_t i = 0; i < 1003854; i++) st += t[i];
    for (int64_t i = 0; i < 111540; i++) sv += v[i];
    CHECK(st == 36825035 && sv == 4011099, "id sums %lld %lld", (long long)st, (long long)sv);
    /* decode the first line back */
    char line[32];
    size_t len = 0;
    CHECK_OK(dlt_char_tokenizer_decode(tok, t, 14, line, sizeof line, &len));
    CHECK(strcmp(line, "First Citizen:") == 0, "%s", line);
    /* nanoGPT's batch: 64 windows of 256 */
    dlt_token_loader *ld = NULL;
    CHECK_OK(dlt_token_loader_create(train, 64, 256, 1337, &ld));
    dlt_tensor *x = NULL, *y = NULL;
    CHECK_OK(dlt_token_loader_next(ld, &x, &y));
    CHECK(check_batch(x, y, t, 1003854, 1337, 0, 64, 256));
    dlt_token_loader_destroy(ld);
    free(t);
    free(v);
    dlt_char_tokenizer_destroy(tok);
    dlt_token_dataset_destroy(train);
    dlt_token_dataset_destroy(val);
}

static void test_allocation_failures(void) {
    uint16_t tok[50];
    for (int i = 0; i < 50; i++) tok[i] = (uint16_t)(i % 7);
    char lp[400], tp[400];
    path_of(lp, sizeof lp, "alloc_llmc.bin");
    write_llmc(lp, 20240520, 1, 50, tok, 50);
    path_of(tp, sizeof tp, "alloc.txt");
    write_bytes(tp, "to be or not to be\n", 19);
    dlt_token_dataset *base = NULL;
    CHECK_OK(dlt_token_dataset_create(g_ctx, tok, 50, 7, &base));
    for (int what = 0; what < 5; what++) {
        int succeeded = 0;
        for (int64_t k = 1; k < 100 && !succeeded; k++) {
            uint64_t before = live_allocs();
            dlt_token_dataset *ds = (dlt_token_dataset *)0x1, *va = (dlt_token_dataset *)0x1;
            dlt_token_loader *ld = (dlt_token_loader *)0x1;
            dlt_char_tokenizer *tk = (dlt_char_tokenizer *)0x1;
            CHECK_OK(dlt_testing_fail_alloc(g_ctx, k));
            dlt_status st;
            switch (what) {
            case 0: st = dlt_token_file_open(g_ctx, lp, DLT_TOKENS_LLMC, 7, &ds); break;
            case 1: st = dlt_synthetic_tokens_create(g_ctx, 100, 9, 1, &ds); break;
            case 2: st = dlt_token_loader_create(base, 3, 8, 1, &ld); break;
            case 3: st = dlt_char_text_open(g_ctx, tp, 0.9, &tk, &ds, &va); break;
            default: st = dlt_token_dataset_create(g_ctx, tok, 50, 7, &ds); break;
            }
            CHECK_OK(dlt_testing_fail_alloc(g_ctx, 0));
            if (st == DLT_OK) {
                succeeded = 1;
                if (what != 2) dlt_token_dataset_destroy(ds);
                if (what == 2) dlt_token_loader_destroy(ld);
                if (what == 3) {
                    dlt_token_dataset_destroy(va);
                    dlt_char_tokenizer_destroy(tk);
                }
            } else {
                CHECK(st == DLT_ERR_OUT_OF_MEMORY || st == DLT_ERR_DEVICE_OUT_OF_MEMORY,
                      "case %d failure %lld: %d %s", what, (long long)k, st, dlt_last_error());
                CHECK(ds == (dlt_token_dataset *)0x1 && ld == (dlt_token_loader *)0x1 &&
                      tk == (dlt_char_tokenizer *)0x1 && va == (dlt_token_dataset *)0x1);
                CHECK(live_allocs() == before, "case %d failure %lld leaked", what, (long long)k);
            }
        }
        CHECK(succeeded, "case %d never succeeded", what);
    }
    dlt_token_dataset_destroy(base);
}

static void remove_tree(const char *dir) {
    char cmd[600];
    if (strncmp(dir, "/tmp/dlt_tokens_", 16) != 0) return; /* only what this test made */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/dlt_tokens_XXXXXX");
    if (!mkdtemp(g_root)) {
        printf("# cannot create a temporary directory\n");
        return 1;
    }
    if (chmod(g_root, 0755) != 0) /* an unprivileged child must reach the files it fails to read */
        printf("# cannot make %s searchable\n", g_root);
    g_ctx = th_cpu_ctx();
    RUN(test_offsets_reference);
    RUN(test_llmc_file);
    RUN(test_raw_file);
    RUN(test_determinism_and_replay);
    RUN(test_file_refusals);
    RUN(test_loader_refusals);
    RUN(test_synthetic_tokens);
    RUN(test_char_tokenizer);
    RUN(test_char_text_open);
    RUN(test_tiny_shakespeare);
    RUN(test_allocation_failures);
    dlt_ctx_destroy(g_ctx);
    remove_tree(g_root);
    return th_done();
}
