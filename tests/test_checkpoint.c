/*
 * test_checkpoint.c - safetensors checkpoints on the CPU: round trips of a ResNet (identical
 * tensors and forward output after loading into a differently initialised model), one
 * refusal per kind of corruption (each checked for its status, a message naming the
 * problem, and an unchanged model), name/dtype/shape mismatches reported by name, atomic
 * saves (no leftovers, failed saves keep the old file), dlt_safetensors_save of arbitrary
 * dtypes and formats read back through dlt_safetensors_load_tensor, training checkpoints
 * with optimizer momentum and GradScaler state (resuming gives the same next step), and a
 * run of random mutations of a valid file (no crash, nothing changed unless it loads).
 *
 * Corrupt files are written here byte by byte from a JSON template, so each one breaks
 * exactly one rule of the format.
 */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static dlt_ctx *g_ctx;
static char g_dir[256];

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        printf("# cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* Every state entry's bytes, concatenated: what "the model is unchanged" compares. */
static unsigned char *snapshot(const dlt_module *m, size_t *n) {
    size_t total = 0;
    for (int32_t i = 0; i < dlt_module_num_state(m); i++) {
        dlt_tensor *t;
        if (dlt_module_state_entry(m, i, NULL, &t, NULL) != DLT_OK) return NULL;
        total += dlt_tensor_nbytes(t);
    }
    unsigned char *p = malloc(total + 1), *q = p;
    for (int32_t i = 0; i < dlt_module_num_state(m); i++) {
        dlt_tensor *t;
        if (dlt_module_state_entry(m, i, NULL, &t, NULL) != DLT_OK) return NULL;
        float *f = th_read_f32(t); /* logical order, whatever the format */
        size_t nb = dlt_tensor_nbytes(t);
        if (dlt_tensor_dtype(t) == DLT_F32) memcpy(q, f, nb);
        else if (dlt_tensor_copy_to_host(t, q, nb) != DLT_OK) return NULL;
        free(f);
        q += nb;
    }
    *n = total;
    return p;
}
#define CHECK_UNCHANGED(m, snap, snap_n, what)                                                \
    do {                                                                                      \
        size_t n2_ = 0;                                                                       \
        unsigned char *s2_ = snapshot((m), &n2_);                                             \
        CHECK(s2_ && n2_ == (snap_n) && memcmp(s2_, (snap), n2_) == 0, "%s: model changed", (what)); \
        free(s2_);                                                                            \
    } while (0)

static dlt_module *resnet(int depth, int64_t classes, uint64_t seed) {
    dlt_module *m = NULL;
    if (dlt_ctx_set_seed(g_ctx, seed) != DLT_OK || dlt_resnet_create(g_ctx, depth, classes, &m) != DLT_OK) {
        printf("# resnet: %s\n", dlt_last_error());
        exit(1);
    }
    return m;
}
static dlt_tensor *input(int64_t n, int64_t hw, uint64_t seed) {
    int64_t s[4] = {n, 3, hw, hw};
    dlt_tensor *x = NULL;
    if (dlt_ctx_set_seed(g_ctx, seed) != DLT_OK ||
        dlt_tensor_empty(g_ctx, DLT_F32, s, 4, 0, &x) != DLT_OK ||
        dlt_tensor_rand_uniform(x, 0, 1) != DLT_OK)
        exit(1);
    return x;
}

/* ---- round trip ---- */

static void test_round_trip(void) {
    dlt_module *a = resnet(18, 10, 1), *b = resnet(18, 10, 2);
    dlt_tensor *x = input(2, 32, 3), *y = NULL;
    for (int i = 0; i < 2; i++) { /* running stats and num_batches_tracked move */
        CHECK_OK(dlt_module_forward(a, x, &y));
        dlt_tensor_release(y);
    }
    char path[512];
    path_in(path, sizeof path, "rt.safetensors");
    CHECK_OK(dlt_module_save(a, path));
    size_t na = 0, nb = 0;
    unsigned char *sa = snapshot(a, &na), *sb = snapshot(b, &nb);
    CHECK(na == nb && memcmp(sa, sb, na) != 0, "the two models start equal");
    CHECK_OK(dlt_module_load(b, path));
    free(sb);
    sb = snapshot(b, &nb);
    CHECK(na == nb && memcmp(sa, sb, na) == 0, "loaded state differs");
    double v = 0;
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_module_find(b, "layer3.0.downsample.1.num_batches_tracked", &t));
    CHECK_OK(dlt_tensor_item(t, &v));
    CHECK(v == 2, "num_batches_tracked %g", v);
    /* identical forward output, in eval and train mode */
    for (int training = 0; training < 2; training++) {
        CHECK_OK(dlt_module_set_training(a, training));
        CHECK_OK(dlt_module_set_training(b, training));
        dlt_tensor *ya = NULL, *yb = NULL;
        CHECK_OK(dlt_module_forward(a, x, &ya));
        CHECK_OK(dlt_module_forward(b, x, &yb));
        float *fa = th_read_f32(ya), *fb = th_read_f32(yb);
        CHECK(memcmp(fa, fb, 20 * sizeof(float)) == 0, "forward outputs differ (training %d)", training);
        free(fa), free(fb);
        dlt_tensor_release(ya), dlt_tensor_release(yb);
    }
    /* counts go on from the loaded value */
    CHECK_OK(dlt_module_find(b, "bn1.num_batches_tracked", &t));
    CHECK_OK(dlt_tensor_item(t, &v));
    CHECK(v == 3, "num_batches_tracked after one more training forward: %g", v);
    /* the file: 8-byte length, a JSON header padded to 8, int64 data first (aligned) */
    size_t fn = 0;
    unsigned char *file = th_read_file(path, &fn);
    REQUIRE(file && fn > 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | file[i];
    CHECK(hlen % 8 == 0 && 8 + hlen < fn && file[8] == '{', "header length %llu", (unsigned long long)hlen);
    char *hdr = calloc(hlen + 1, 1);
    memcpy(hdr, file + 8, hlen);
    CHECK(strstr(hdr, "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[64,3,7,7]") != NULL, "header: %.200s", hdr);
    CHECK(strstr(hdr, "\"bn1.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[]") != NULL);
    CHECK(strstr(hdr, "\"__metadata__\":{\"format\":\"pt\"") != NULL);
    CHECK(strstr(hdr, "\"data_offsets\":[0,8]") != NULL, "the first int64 does not start the data");
    free(hdr), free(file), free(sa), free(sb);
    /* channels-last weights load from the logical order */
    dlt_module *c = resnet(18, 10, 5);
    CHECK_OK(dlt_module_set_format(c, DLT_FORMAT_CHANNELS_LAST));
    CHECK_OK(dlt_module_load(c, path));
    CHECK_OK(dlt_module_find(c, "layer1.1.conv2.weight", &t));
    CHECK(dlt_tensor_format(t) == DLT_FORMAT_CHANNELS_LAST);
    size_t nc = 0;
    CHECK_OK(dlt_module_set_training(a, 1));
    CHECK_OK(dlt_module_forward(a, x, &y)); /* a and c: both one step behind b now */
    dlt_tensor_release(y);
    sa = snapshot(a, &na);
    CHECK_OK(dlt_module_forward(c, x, &y));
    dlt_tensor_release(y);
    sb = snapshot(c, &nc);
    CHECK(na == nc && memcmp(sa, sb, na) != 0, "sanity: a moved on");
    free(sa), free(sb);
    dlt_tensor_release(x);
    dlt_module_destroy(a);
    dlt_module_destroy(b);
    dlt_module_destroy(c);
}

/* ---- corrupt files against a BatchNorm2d(2) ---- */

/* data: weight {2,3}, bias {0.5,-0.5}, running_mean {1,2}, running_var {4,5}, nbt 7 */
static unsigned char g_data[40];
static void fill_data(void) {
    float f[8] = {2, 3, 0.5f, -0.5f, 1, 2, 4, 5};
    int64_t nbt = 7;
    memcpy(g_data, f, 32);
    memcpy(g_data + 32, &nbt, 8);
}
#define OK_HEADER                                                                             \
    "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"                    \
    "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"                      \
    "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"             \
    "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"              \
    "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}"

/* Writes [u64 header length][header][data] to path; hlen_override (if nonzero) is written
 * as the length instead. */
static size_t make_file(const char *path, const char *header, uint64_t hlen_override,
                        const void *data, size_t ndata) {
    size_t hl = strlen(header), n = 8 + hl + ndata;
    unsigned char *buf = malloc(n);
    uint64_t len = hlen_override ? hlen_override : hl;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
    memcpy(buf + 8, header, hl);
    memcpy(buf + 8 + hl, data, ndata);
    write_file(path, buf, n);
    free(buf);
    return n;
}

static void test_valid_small_file(void) {
    fill_data();
    dlt_module *bn = NULL;
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 2, 1e-5, 0.1, &bn));
    char path[512];
    path_in(path, sizeof path, "bn_ok.safetensors");
    make_file(path, OK_HEADER, 0, g_data, 40);
    CHECK_OK(dlt_module_load(bn, path));
    double v;
    dlt_tensor *t;
    CHECK_OK(dlt_module_find(bn, "bias", &t));
    CHECK_OK(dlt_tensor_get(t, 1, &v));
    CHECK(v == -0.5);
    CHECK_OK(dlt_module_find(bn, "num_batches_tracked", &t));
    CHECK_OK(dlt_tensor_item(t, &v));
    CHECK(v == 7);
    /* header order need not be offset order; padding and metadata are fine; training
     * entries are ignored by a module load */
    const char *hdr2 =
        "{\"__metadata__\":{\"a\":\"b\"},"
        "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
        "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
        "\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"optimizer.lr\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[40,48]},"
        "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
        "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}      ";
    unsigned char d2[48];
    memcpy(d2, g_data, 40);
    double lr = 0.1;
    memcpy(d2 + 40, &lr, 8);
    make_file(path, hdr2, 0, d2, 48);
    CHECK_OK(dlt_module_find(bn, "num_batches_tracked", &t));
    CHECK_OK(dlt_tensor_fill(t, 0));
    CHECK_OK(dlt_module_load(bn, path));
    CHECK_OK(dlt_tensor_item(t, &v));
    CHECK(v == 7);
    dlt_module_destroy(bn);
}

typedef struct corrupt_case {
    const char *what;    /* the rule broken */
    const char *header;  /* NULL: OK_HEADER */
    uint64_t hlen;       /* 0: the header's length */
    int64_t truncate;    /* >= 0: cut the file to this many bytes */
    int extra;           /* bytes appended after the data */
    const char *keyword; /* expected in the message */
    dlt_status code;
} corrupt_case;

static void test_corrupt_files(void) {
    fill_data();
    /* header variants: each differs from OK_HEADER in one place */
    static const corrupt_case cases[] = {
        {"empty file", NULL, 0, 0, 0, "truncated", DLT_ERR_FORMAT},
        {"cut inside the length", NULL, 0, 5, 0, "truncated", DLT_ERR_FORMAT},
        {"cut inside the header", NULL, 0, 100, 0, "header length", DLT_ERR_FORMAT},
        {"cut inside the data", NULL, 0, 8 + (int64_t)sizeof OK_HEADER - 1 + 20, 0, "truncated", DLT_ERR_FORMAT},
        {"header length past the end", NULL, 1u << 20, -1, 0, "header length", DLT_ERR_FORMAT},
        {"header length 2^63", NULL, (uint64_t)1 << 63, -1, 0, "header length", DLT_ERR_FORMAT},
        {"trailing bytes", NULL, 0, -1, 8, "data section", DLT_ERR_FORMAT},
        {"bad JSON", "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 0, -1, 0,
         "JSON", DLT_ERR_FORMAT},
        {"not an object", "[1,2,3]                                ", 0, -1, 0, "{", DLT_ERR_FORMAT},
        {"garbage after the JSON",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 0, -1, 0,
         "after its JSON", DLT_ERR_FORMAT},
        {"offsets out of range",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[40,48]}}",
         0, -1, 0, "out of range", DLT_ERR_FORMAT},
        {"overlapping offsets",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "overlaps", DLT_ERR_FORMAT},
        {"a gap between tensors",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[20,28]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[28,36]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "contiguous", DLT_ERR_FORMAT},
        {"not starting at 0",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "contiguous", DLT_ERR_FORMAT},
        {"size disagrees with dtype x shape",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "needs 12", DLT_ERR_FORMAT},
        {"duplicate names",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "duplicate tensor name 'weight'", DLT_ERR_FORMAT},
        {"unknown dtype",
         "{\"weight\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "unknown dtype 'F33'", DLT_ERR_FORMAT},
        {"negative dimension",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "shape entry 0", DLT_ERR_FORMAT},
        {"shape that overflows",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "overflows", DLT_ERR_FORMAT},
        {"offsets that are not integers",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "data_offsets", DLT_ERR_FORMAT},
        {"begin after end",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "begin > end", DLT_ERR_FORMAT},
        {"too many dimensions",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "dimensions", DLT_ERR_FORMAT},
        {"entry without data_offsets",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "data_offsets", DLT_ERR_FORMAT},
        {"metadata that is not strings",
         "{\"__metadata__\":{\"k\":1},"
         "\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "__metadata__", DLT_ERR_FORMAT},
        {"entry that is not an object",
         "{\"weight\":[0,8],"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         0, -1, 0, "not an object", DLT_ERR_FORMAT},
    };
    dlt_module *bn = NULL;
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 2, 1e-5, 0.1, &bn));
    dlt_tensor *rm = NULL;
    CHECK_OK(dlt_module_find(bn, "running_mean", &rm));
    CHECK_OK(dlt_tensor_fill(rm, 0.25));
    size_t sn = 0;
    unsigned char *snap = snapshot(bn, &sn);
    char path[512];
    path_in(path, sizeof path, "bad.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const corrupt_case *c = &cases[i];
        const char *hdr = c->header ? c->header : OK_HEADER;
        unsigned char data[48];
        memcpy(data, g_data, 40);
        memset(data + 40, 0xAB, 8);
        size_t n = make_file(path, hdr, c->hlen, data, 40 + (size_t)c->extra);
        if (c->truncate >= 0 && (size_t)c->truncate < n) {
            CHECK(truncate(path, c->truncate) == 0);
        }
        dlt_status st = dlt_module_load(bn, path);
        CHECK(st == c->code, "%s: status %d (%s), expected %d; %s", c->what, st, dlt_status_string(st),
              c->code, dlt_last_error());
        CHECK(strstr(dlt_last_error(), c->keyword) != NULL, "%s: message lacks '%s': %s", c->what,
              c->keyword, dlt_last_error());
        CHECK(strstr(dlt_last_error(), "bad.safetensors") != NULL, "%s: message lacks the path: %s",
              c->what, dlt_last_error());
        CHECK_UNCHANGED(bn, snap, sn, c->what);
        /* the same refusal through the tensor reader */
        dlt_tensor *t = NULL;
        CHECK(dlt_safetensors_load_tensor(g_ctx, path, "bias", &t) == c->code && t == NULL,
              "%s: load_tensor accepted the file", c->what);
    }
    /* not a file at all */
    CHECK_STATUS(dlt_module_load(bn, g_dir), DLT_ERR_IO);
    char missing[512];
    path_in(missing, sizeof missing, "no-such-file.safetensors");
    CHECK_STATUS(dlt_module_load(bn, missing), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), "no-such-file") != NULL, "%s", dlt_last_error());
    CHECK_UNCHANGED(bn, snap, sn, "io errors");
    free(snap);
    dlt_module_destroy(bn);
}

/* Mismatches between a valid file and the model, reported by name. */
static void test_mismatches(void) {
    fill_data();
    dlt_module *bn = NULL;
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 2, 1e-5, 0.1, &bn));
    size_t sn = 0;
    unsigned char *snap = snapshot(bn, &sn);
    char path[512];
    path_in(path, sizeof path, "mm.safetensors");
    static const struct {
        const char *what, *header, *keyword;
        size_t ndata;
        dlt_status status; /* a mismatch of dtype or shape has its own status */
    } cases[] = {
        {"missing running_var",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[24,32]}}",
         "no tensor 'running_var'", 32, DLT_ERR_FORMAT},
        {"dtype of bias",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[20,28]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[28,36]}}",
         "tensor 'bias' is BF16", 36, DLT_ERR_DTYPE},
        {"shape of running_mean",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
         "tensor 'running_mean' has shape [1,2]", 40, DLT_ERR_SHAPE},
        {"num_batches_tracked as [1]",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[32,40]}}",
         "'num_batches_tracked' has shape [1]", 40, DLT_ERR_SHAPE},
        {"an extra tensor",
         "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
         "\"running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
         "\"num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
         "\"extra.weight\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[40,40]}}",
         "'extra.weight', which the model does not have", 40, DLT_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char data[48] = {0};
        memcpy(data, g_data, 40);
        make_file(path, cases[i].header, 0, data, cases[i].ndata);
        CHECK_STATUS(dlt_module_load(bn, path), cases[i].status);
        CHECK(strstr(dlt_last_error(), cases[i].keyword) != NULL, "%s: %s", cases[i].what, dlt_last_error());
        CHECK_UNCHANGED(bn, snap, sn, cases[i].what);
    }
    free(snap);
    dlt_module_destroy(bn);
    /* whole models: 10 classes into 1000, and resnet18 into resnet34 */
    dlt_module *a = resnet(18, 10, 1), *b = resnet(18, 1000, 2), *c = resnet(34, 10, 3);
    path_in(path, sizeof path, "r18.safetensors");
    CHECK_OK(dlt_module_save(a, path));
    snap = snapshot(b, &sn);
    CHECK_STATUS(dlt_module_load(b, path), DLT_ERR_SHAPE);
    CHECK(strstr(dlt_last_error(), "'fc.weight' has shape [10,512] in '") != NULL &&
              strstr(dlt_last_error(), "but [1000,512] in the model") != NULL &&
              strstr(dlt_last_error(), "0 missing, 0 unexpected, 2 mismatched") != NULL,
          "%s", dlt_last_error());
    CHECK_UNCHANGED(b, snap, sn, "resnet18 10 -> 1000 classes");
    free(snap);
    CHECK_STATUS(dlt_module_load(c, path), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "no tensor 'layer1.2.conv1.weight'") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_module_load(NULL, path), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_load(a, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_module_save(NULL, path), DLT_ERR_NULL_POINTER);
    dlt_module_destroy(a);
    dlt_module_destroy(b);
    dlt_module_destroy(c);
}

/* ---- atomic saves ---- */

static void test_atomic_save(void) {
    dlt_module *bn = NULL;
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 4, 1e-5, 0.1, &bn));
    char path[512], nodir[512];
    path_in(nodir, sizeof nodir, "no-such-dir/ck.safetensors");
    CHECK_STATUS(dlt_module_save(bn, nodir), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), "no-such-dir") != NULL && strstr(dlt_last_error(), "No such file") != NULL,
          "%s", dlt_last_error());
    CHECK(th_count_files(g_dir, "no-such-dir") == 0, "something was created");
    /* overwriting: the old file is replaced whole, nothing else is left */
    path_in(path, sizeof path, "atomic.safetensors");
    CHECK_OK(dlt_module_save(bn, path));
    dlt_tensor *w = NULL;
    CHECK_OK(dlt_module_find(bn, "weight", &w));
    CHECK_OK(dlt_tensor_fill(w, 3));
    CHECK_OK(dlt_module_save(bn, path));
    CHECK(th_count_files(g_dir, "atomic.safetensors") == 1, "%d files after two saves",
          th_count_files(g_dir, "atomic.safetensors"));
    dlt_tensor *back = NULL;
    double v = 0;
    CHECK_OK(dlt_safetensors_load_tensor(g_ctx, path, "weight", &back));
    CHECK_OK(dlt_tensor_get(back, 3, &v));
    CHECK(v == 3);
    dlt_tensor_release(back);
    /* a save that fails after writing its temporary (renaming over a directory) removes it */
    char dir[512];
    path_in(dir, sizeof dir, "adir");
    CHECK(mkdir(dir, 0755) == 0);
    CHECK_STATUS(dlt_module_save(bn, dir), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), "rename") != NULL, "%s", dlt_last_error());
    CHECK(th_count_files(g_dir, "adir") == 1, "%d entries named adir* (the temporary was left)",
          th_count_files(g_dir, "adir"));
    rmdir(dir);
    /* a save refused before writing leaves the previous checkpoint as it was */
    size_t n0 = 0, n1 = 0;
    unsigned char *before = th_read_file(path, &n0);
    const char *names[2] = {"a", "a"};
    dlt_tensor *ts[2] = {w, w};
    CHECK_STATUS(dlt_safetensors_save(path, names, ts, 2), DLT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(dlt_last_error(), "'a' appears twice") != NULL, "%s", dlt_last_error());
    unsigned char *after = th_read_file(path, &n1);
    CHECK(n0 == n1 && memcmp(before, after, n0) == 0, "the previous checkpoint changed");
    CHECK(th_count_files(g_dir, "atomic.safetensors") == 1);
    free(before), free(after);
    dlt_module_destroy(bn);
}

/* ---- arbitrary tensors ---- */

static void test_safetensors_save_dtypes(void) {
    int64_t s35[2] = {3, 5}, s7[1] = {7}, s22[2] = {2, 2}, s4[1] = {4}, s2322[4] = {2, 3, 2, 2};
    dlt_tensor *bf = NULL, *h = NULL, *i64 = NULL, *u8 = NULL, *i32 = NULL, *cl = NULL, *f = NULL;
    float fv[24];
    for (int i = 0; i < 24; i++) fv[i] = (float)(i * 0.37 - 3.1);
    int64_t iv[4] = {INT64_MIN, -1, 1, INT64_MAX};
    uint8_t uv[4] = {0, 1, 128, 255};
    int32_t one = -123456;
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_F32, s35, 2, 0, fv, 15 * 4, &f));
    CHECK_OK(dlt_tensor_cast(f, DLT_BF16, &bf));
    dlt_tensor_release(f);
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_F32, s7, 1, 0, fv, 7 * 4, &f));
    CHECK_OK(dlt_tensor_cast(f, DLT_F16, &h));
    dlt_tensor_release(f);
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, s22, 2, 0, iv, sizeof iv, &i64));
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_U8, s4, 1, 0, uv, sizeof uv, &u8));
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I32, NULL, 0, 0, &one, 4, &i32));
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_F32, s2322, 4, 0, fv, 24 * 4, &f));
    CHECK_OK(dlt_tensor_to_format(f, DLT_FORMAT_CHANNELS_LAST, &cl));
    const char *names[6] = {"x.bf16", "y/f16", "z \"i64\"", "u8", "scalar", "cl"};
    dlt_tensor *ts[6] = {bf, h, i64, u8, i32, cl};
    char path[512];
    path_in(path, sizeof path, "dtypes.safetensors");
    CHECK_OK(dlt_safetensors_save(path, names, ts, 6));
    for (int k = 0; k < 6; k++) {
        dlt_tensor *r = NULL;
        CHECK_OK(dlt_safetensors_load_tensor(g_ctx, path, names[k], &r));
        CHECK(dlt_tensor_dtype(r) == dlt_tensor_dtype(ts[k]) && dlt_tensor_ndim(r) == dlt_tensor_ndim(ts[k]),
              "%s: dtype/ndim", names[k]);
        for (int d = 0; d < dlt_tensor_ndim(r); d++) CHECK(dlt_tensor_dim(r, d) == dlt_tensor_dim(ts[k], d));
        CHECK(dlt_tensor_format(r) == DLT_FORMAT_CONTIGUOUS);
        size_t nb = dlt_tensor_nbytes(r);
        unsigned char *a = malloc(nb), *b = malloc(nb);
        dlt_tensor *src = ts[k], *tmp = NULL;
        if (k == 5) { /* the channels-last tensor is stored in logical order */
            CHECK_OK(dlt_tensor_to_format(ts[k], DLT_FORMAT_CONTIGUOUS, &tmp));
            src = tmp;
        }
        CHECK_OK(dlt_tensor_copy_to_host(r, a, nb));
        CHECK_OK(dlt_tensor_copy_to_host(src, b, nb));
        CHECK(memcmp(a, b, nb) == 0, "%s: bytes differ", names[k]);
        if (k == 5) CHECK(memcmp(a, fv, nb) == 0, "channels-last not stored in logical order");
        free(a), free(b);
        dlt_tensor_release(tmp);
        dlt_tensor_release(r);
    }
    /* the int64 tensor is 8-aligned in the file, the header too */
    size_t fn = 0;
    unsigned char *file = th_read_file(path, &fn);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | file[i];
    CHECK(hlen % 8 == 0);
    char *hdr = calloc(hlen + 1, 1);
    memcpy(hdr, file + 8, hlen);
    CHECK(strstr(hdr, "\"z \\\"i64\\\"\":{\"dtype\":\"I64\",\"shape\":[2,2],\"data_offsets\":[0,32]}") != NULL,
          "%s", hdr);
    CHECK(strstr(hdr, "\"x.bf16\":{\"dtype\":\"BF16\",\"shape\":[3,5]") != NULL, "%s", hdr);
    int64_t first;
    memcpy(&first, file + 8 + hlen, 8);
    CHECK(first == INT64_MIN, "raw little-endian int64");
    free(hdr), free(file);
    /* refusals */
    dlt_tensor *r = NULL;
    CHECK_STATUS(dlt_safetensors_load_tensor(g_ctx, path, "nope", &r), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_safetensors_load_tensor(NULL, path, "u8", &r), DLT_ERR_NULL_POINTER);
    const char *bad[1] = {"__metadata__"};
    CHECK_STATUS(dlt_safetensors_save(path, bad, ts, 1), DLT_ERR_INVALID_ARGUMENT);
    const char *bad2[1] = {"\xff\xfe"};
    CHECK_STATUS(dlt_safetensors_save(path, bad2, ts, 1), DLT_ERR_INVALID_ARGUMENT);
    const char *null_name[1] = {NULL};
    CHECK_STATUS(dlt_safetensors_save(path, null_name, ts, 1), DLT_ERR_NULL_POINTER);
    dlt_tensor *nt[1] = {NULL};
    CHECK_STATUS(dlt_safetensors_save(path, names, nt, 1), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_safetensors_save(path, names, ts, -1), DLT_ERR_INVALID_ARGUMENT);
    /* zero tensors: a valid, empty file */
    CHECK_OK(dlt_safetensors_save(path, NULL, NULL, 0));
    CHECK_STATUS(dlt_safetensors_load_tensor(g_ctx, path, "u8", &r), DLT_ERR_INVALID_ARGUMENT);
    for (int k = 0; k < 6; k++) dlt_tensor_release(ts[k]);
    dlt_tensor_release(f);
}

/* ---- training checkpoints ---- */

static dlt_module *small_net(uint64_t seed) {
    dlt_module *seq = NULL, *c = NULL;
    CHECK_OK(dlt_ctx_set_seed(g_ctx, seed));
    CHECK_OK(dlt_sequential_create(g_ctx, &seq));
    CHECK_OK(dlt_conv2d_create(g_ctx, 3, 4, 3, 3, 1, 1, 1, 1, 0, &c));
    CHECK_OK(dlt_sequential_append(seq, "conv", c));
    CHECK_OK(dlt_batchnorm2d_create(g_ctx, 4, 1e-5, 0.1, &c));
    CHECK_OK(dlt_sequential_append(seq, "bn", c));
    CHECK_OK(dlt_relu_create(g_ctx, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_global_avg_pool2d_create(g_ctx, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_flatten_create(g_ctx, &c));
    CHECK_OK(dlt_sequential_append(seq, NULL, c));
    CHECK_OK(dlt_linear_create(g_ctx, 4, 3, 1, &c));
    CHECK_OK(dlt_sequential_append(seq, "fc", c));
    return seq;
}

/* One training step with the scaler: forward, loss, scaled backward, step, update. */
static void train_step(dlt_module *m, dlt_optimizer *opt, dlt_grad_scaler *sc, dlt_tensor *x, dlt_tensor *y) {
    dlt_tensor *out = NULL, *loss = NULL, *scaled = NULL;
    CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
    CHECK_OK(dlt_module_forward(m, x, &out));
    CHECK_OK(dlt_cross_entropy(out, y, -100, DLT_REDUCTION_MEAN, &loss));
    CHECK_OK(dlt_grad_scaler_scale(sc, loss, &scaled));
    CHECK_OK(dlt_backward(scaled, NULL));
    CHECK_OK(dlt_grad_scaler_step(sc, opt));
    CHECK_OK(dlt_grad_scaler_update(sc));
    dlt_tensor_release(out), dlt_tensor_release(loss), dlt_tensor_release(scaled);
}

static void test_training_checkpoint(void) {
    dlt_module *a = small_net(1), *b = small_net(2);
    dlt_tensor *pa[5], *pb[5];
    int32_t n = 0;
    CHECK_OK(dlt_module_params(a, pa, 5, &n));
    CHECK_OK(dlt_module_params(b, pb, 5, NULL));
    REQUIRE(n == 5, "%d parameters", n);
    dlt_optimizer *oa = NULL, *ob = NULL;
    dlt_status st = dlt_sgd_create(pa, 5, 0.05, 0.9, 0, 1e-4, 0, 0, &oa);
    if (st == DLT_ERR_NOT_SUPPORTED) SKIP("optimizer not available: %s", dlt_last_error());
    CHECK_OK(st);
    CHECK_OK(dlt_sgd_create(pb, 5, 0.5, 0.9, 0, 1e-4, 0, 0, &ob));
    dlt_grad_scaler *sa = NULL, *sb = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 1024, 2, 0.5, 3, 1, &sa));
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 65536, 2, 0.5, 2000, 1, &sb));
    dlt_tensor *x = input(4, 6, 9), *y = NULL;
    int32_t tv[4] = {0, 1, 2, 1};
    int64_t ts = 4;
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I32, &ts, 1, 0, tv, sizeof tv, &y));
    for (int i = 0; i < 4; i++) train_step(a, oa, sa, x, y); /* the scale grows once (interval 3) */
    char path[512];
    path_in(path, sizeof path, "train.safetensors");
    CHECK_OK(dlt_checkpoint_save(path, a, oa, sa, 3, 17));
    /* the module part loads alone, and the names are the documented ones */
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_safetensors_load_tensor(g_ctx, path, "optimizer.momentum_buffer.fc.weight", &t));
    CHECK(dlt_tensor_dim(t, 0) == 3 && dlt_tensor_dim(t, 1) == 4);
    dlt_tensor_release(t);
    CHECK_OK(dlt_safetensors_load_tensor(g_ctx, path, "scaler.scale", &t));
    double v = 0;
    CHECK_OK(dlt_tensor_item(t, &v));
    CHECK(v == 2048, "saved scale %g", v);
    dlt_tensor_release(t);
    CHECK_OK(dlt_safetensors_load_tensor(g_ctx, path, "scaler._growth_tracker", &t));
    CHECK(dlt_tensor_dtype(t) == DLT_I32);
    dlt_tensor_release(t);
    CHECK_STATUS(dlt_safetensors_load_tensor(g_ctx, path, "optimizer.lr", &t), DLT_ERR_DTYPE);

    int64_t epoch = -1, step = -1;
    CHECK_OK(dlt_checkpoint_load(path, b, ob, sb, &epoch, &step));
    CHECK(epoch == 3 && step == 17, "epoch %lld step %lld", (long long)epoch, (long long)step);
    double lr_a, lr_b, sc_a, sc_b, gf, bf;
    int64_t sa_n, sb_n;
    int32_t gi, gt_a, gt_b;
    CHECK_OK(dlt_optimizer_get_lr(oa, &lr_a));
    CHECK_OK(dlt_optimizer_get_lr(ob, &lr_b));
    CHECK_OK(dlt_optimizer_step_count(oa, &sa_n));
    CHECK_OK(dlt_optimizer_step_count(ob, &sb_n));
    CHECK(lr_a == lr_b && sa_n == sb_n && sa_n == 4, "lr %g/%g, steps %lld/%lld", lr_a, lr_b,
          (long long)sa_n, (long long)sb_n);
    CHECK_OK(dlt_grad_scaler_get_state(sa, &sc_a, NULL, NULL, NULL, &gt_a));
    CHECK_OK(dlt_grad_scaler_get_state(sb, &sc_b, &gf, &bf, &gi, &gt_b));
    CHECK(sc_a == sc_b && gt_a == gt_b && gf == 2 && bf == 0.5 && gi == 3, "scaler %g/%g %d/%d %g %g %d",
          sc_a, sc_b, gt_a, gt_b, gf, bf, gi);
    for (int i = 0; i < 5; i++) {
        float *fa = th_read_f32(dlt_optimizer_momentum_buffer(oa, i)),
              *fb = th_read_f32(dlt_optimizer_momentum_buffer(ob, i));
        REQUIRE(fa && fb, "momentum buffer %d missing", i);
        CHECK(memcmp(fa, fb, (size_t)dlt_tensor_nbytes(pa[i])) == 0, "momentum buffer %d differs", i);
        free(fa), free(fb);
    }
    /* resuming: the next step is the same step */
    train_step(a, oa, sa, x, y);
    train_step(b, ob, sb, x, y);
    size_t na = 0, nb = 0;
    unsigned char *s1 = snapshot(a, &na), *s2 = snapshot(b, &nb);
    CHECK(na == nb && memcmp(s1, s2, na) == 0, "the resumed model took another step");
    free(s1), free(s2);

    /* refusals, each leaving b, ob and sb as they were */
    s1 = snapshot(b, &na);
    char mpath[512];
    path_in(mpath, sizeof mpath, "model-only.safetensors");
    CHECK_OK(dlt_module_save(a, mpath));
    CHECK_STATUS(dlt_checkpoint_load(mpath, b, ob, NULL, NULL, NULL), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "optimizer.lr") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_checkpoint_load(mpath, b, NULL, sb, NULL, NULL), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "scaler.scale") != NULL, "%s", dlt_last_error());
    CHECK_STATUS(dlt_checkpoint_load(mpath, b, NULL, NULL, &epoch, NULL), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "train.epoch") != NULL, "%s", dlt_last_error());
    CHECK_UNCHANGED(b, s1, na, "checkpoint without training state");
    CHECK_OK(dlt_checkpoint_load(mpath, b, NULL, NULL, NULL, NULL)); /* the model part alone */
    /* an optimizer without momentum cannot take momentum buffers */
    dlt_optimizer *plain = NULL;
    CHECK_OK(dlt_sgd_create(pb, 5, 0.1, 0, 0, 0, 0, 0, &plain));
    CHECK_STATUS(dlt_checkpoint_load(path, b, plain, NULL, NULL, NULL), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "momentum 0") != NULL, "%s", dlt_last_error());
    /* an optimizer over other tensors */
    dlt_optimizer *foreign = NULL;
    CHECK_OK(dlt_sgd_create(pa, 2, 0.1, 0.9, 0, 0, 0, 0, &foreign));
    CHECK_STATUS(dlt_checkpoint_save(path, b, foreign, NULL, 0, 0), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_checkpoint_load(path, b, foreign, NULL, NULL, NULL), DLT_ERR_INVALID_ARGUMENT);
    /* an invalid scaler state in an otherwise valid file: nothing changes */
    char bpath[512];
    path_in(bpath, sizeof bpath, "bad-scaler.safetensors");
    {
        int32_t ns = dlt_module_num_state(a);
        const char **names = calloc((size_t)ns + 5, sizeof *names);
        dlt_tensor **tens = calloc((size_t)ns + 5, sizeof *tens);
        for (int32_t i = 0; i < ns; i++) CHECK_OK(dlt_module_state_entry(a, i, &names[i], &tens[i], NULL));
        const char *sn[5] = {"scaler.scale", "scaler.growth_factor", "scaler.backoff_factor",
                             "scaler.growth_interval", "scaler._growth_tracker"};
        const double sv[5] = {1024, 0.5 /* must be > 1 */, 0.5, 10, 0};
        for (int k = 0; k < 5; k++) {
            int32_t dt = k < 3 ? DLT_F32 : DLT_I64;
            CHECK_OK(dlt_tensor_zeros(g_ctx, dt, NULL, 0, 0, &tens[ns + k]));
            CHECK_OK(dlt_tensor_fill(tens[ns + k], sv[k]));
            names[ns + k] = sn[k];
        }
        CHECK_OK(dlt_safetensors_save(bpath, names, tens, ns + 5));
        for (int k = 0; k < 5; k++) dlt_tensor_release(tens[ns + k]);
        free(names), free(tens);
    }
    double scale_before = 0;
    CHECK_OK(dlt_grad_scaler_get_scale(sb, &scale_before));
    CHECK_STATUS(dlt_checkpoint_load(bpath, b, NULL, sb, NULL, NULL), DLT_ERR_FORMAT);
    CHECK(strstr(dlt_last_error(), "growth_factor 0.5") != NULL, "%s", dlt_last_error());
    double scale_after = 0;
    CHECK_OK(dlt_grad_scaler_get_scale(sb, &scale_after));
    CHECK(scale_before == scale_after);
    CHECK_UNCHANGED(b, s1, na, "invalid scaler state");
    /* a disabled scaler ignores scaler entries, as PyTorch's load_state_dict does */
    dlt_grad_scaler *off = NULL;
    CHECK_OK(dlt_grad_scaler_create(g_ctx, 65536, 2, 0.5, 2000, 0, &off));
    CHECK_OK(dlt_checkpoint_load(bpath, b, NULL, off, NULL, NULL));
    CHECK_STATUS(dlt_checkpoint_load(NULL, b, NULL, NULL, NULL, NULL), DLT_ERR_NULL_POINTER);
    CHECK_STATUS(dlt_checkpoint_load(path, NULL, NULL, NULL, NULL, NULL), DLT_ERR_NULL_POINTER);
    free(s1);
    dlt_grad_scaler_destroy(off);
    dlt_optimizer_destroy(plain);
    dlt_optimizer_destroy(foreign);
    dlt_tensor_release(x), dlt_tensor_release(y);
    dlt_grad_scaler_destroy(sa), dlt_grad_scaler_destroy(sb);
    dlt_optimizer_destroy(oa), dlt_optimizer_destroy(ob);
    dlt_module_destroy(a), dlt_module_destroy(b);
}

/* ---- random mutations: no crash, and nothing changes unless the file loads ---- */

static void test_mutations(void) {
    dlt_module *m = small_net(4), *src = small_net(5);
    char path[512], mpath[512];
    path_in(path, sizeof path, "mut-src.safetensors");
    path_in(mpath, sizeof mpath, "mut.safetensors");
    CHECK_OK(dlt_module_save(src, path));
    size_t n = 0;
    unsigned char *orig = th_read_file(path, &n), *buf = malloc(n + 64);
    uint64_t rng = 12345;
    int loaded = 0, refused = 0;
    for (int it = 0; it < 600; it++) {
        size_t sn = 0;
        unsigned char *snap = snapshot(m, &sn);
        memcpy(buf, orig, n);
        size_t len = n;
        int kind = it % 4;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        size_t pos = (size_t)(rng >> 33) % n;
        if (kind == 0) { /* flip a byte of the length or the header */
            size_t hpos = pos % (8 + (size_t)orig[0] + ((size_t)orig[1] << 8));
            buf[hpos] ^= (unsigned char)(1u << ((rng >> 20) % 8));
        } else if (kind == 1) { /* truncate */
            len = pos;
        } else if (kind == 2) { /* a random byte anywhere */
            buf[pos] = (unsigned char)(rng >> 40);
        } else { /* a digit of the header changed */
            size_t hl = (size_t)orig[0] + ((size_t)orig[1] << 8);
            for (size_t k = 0; k < hl; k++) {
                size_t q = 8 + (pos + k) % hl;
                if (buf[q] >= '0' && buf[q] <= '9') {
                    buf[q] = (unsigned char)('0' + (rng >> 45) % 10);
                    break;
                }
            }
        }
        write_file(mpath, buf, len);
        dlt_status st = dlt_module_load(m, mpath);
        if (st == DLT_OK) {
            loaded++;
        } else {
            refused++;
            CHECK(st == DLT_ERR_FORMAT, "mutation %d: status %d %s", it, st, dlt_last_error());
            CHECK_UNCHANGED(m, snap, sn, "mutation");
        }
        free(snap);
    }
    CHECK(refused > 300, "%d refused, %d loaded", refused, loaded);
    free(orig), free(buf);
    dlt_module_destroy(m);
    dlt_module_destroy(src);
}

int main(void) {
    g_ctx = th_cpu_ctx();
    snprintf(g_dir, sizeof g_dir, "/tmp/dlt_ckpt_XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("# cannot create a temporary directory\n");
        return 1;
    }
    RUN(test_round_trip);
    RUN(test_valid_small_file);
    RUN(test_corrupt_files);
    RUN(test_mismatches);
    RUN(test_atomic_save);
    RUN(test_safetensors_save_dtypes);
    RUN(test_training_checkpoint);
    RUN(test_mutations);
    /* clean up the temporary directory */
    DIR *d = opendir(g_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(g_dir);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
