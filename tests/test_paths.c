/*
 * test_paths.c - every file reader against names that exist but cannot be read (issue 20
 * items 10 and 11, as a class): a symlink loop, a dangling symlink, a file without read
 * permission, an unsearchable directory, a directory and a FIFO under the name the reader
 * opens, each of which must be DLT_ERR_IO naming the file (never "absent", never a hang),
 * with nothing made or changed; and a symlink to a good file, which must read as the file.
 * The helpers (th_hostile_*) are in harness.h for every reader to come. As root the
 * permission cases run with the effective uid of "nobody".
 *
 * Readers: dlt_cifar10_open (a training batch after a good one, the test batch),
 * dlt_cifar10_open_file, dlt_safetensors_open, dlt_safetensors_load_tensor,
 * dlt_module_load, dlt_module_load_ex (non-strict), dlt_checkpoint_load, the token files
 * (llm.c and raw), the char tokenizer and dlt_char_text_open, dlt_record_files_open,
 * dlt_gpt_load_hf and dlt_gpt_from_hf (config.json and the weights); and the writers'
 * side: a save into a directory it cannot write, or onto a directory.
 */
#include <stdint.h>

#include "harness.h"

static dlt_ctx *g_ctx;
static char g_dir[256];

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

/* Two CIFAR-10 records (labels 3 and 9). */
static void write_batch(const char *path) {
    unsigned char rec[2 * 3073];
    for (size_t i = 0; i < sizeof rec; i++) rec[i] = (unsigned char)(i * 7);
    rec[0] = 3;
    rec[3073] = 9;
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(rec, 1, sizeof rec, f) != sizeof rec || fclose(f) != 0) {
        printf("# cannot write %s\n", path);
        exit(1);
    }
    chmod(path, 0644);
}

/* ---- CIFAR-10 ---- */

typedef struct cifar_arg {
    const char *dir;
    int32_t split;
    int64_t want; /* records on success */
} cifar_arg;

static dlt_status read_cifar_dir(const char *path, void *p) {
    (void)path;
    const cifar_arg *a = p;
    dlt_dataset *ds = NULL;
    dlt_status st = dlt_cifar10_open(g_ctx, a->dir, a->split, &ds);
    if (st != DLT_OK) CHECK(ds == NULL, "a refused dlt_cifar10_open made a dataset");
    else CHECK(dlt_dataset_size(ds) == a->want, "%lld records, expected %lld", (long long)dlt_dataset_size(ds),
               (long long)a->want);
    dlt_dataset_destroy(ds);
    return st;
}

static dlt_status read_cifar_file(const char *path, void *p) {
    (void)p;
    dlt_dataset *ds = NULL;
    dlt_status st = dlt_cifar10_open_file(g_ctx, path, &ds);
    if (st != DLT_OK) CHECK(ds == NULL, "a refused dlt_cifar10_open_file made a dataset");
    else CHECK(dlt_dataset_size(ds) == 2, "%lld records", (long long)dlt_dataset_size(ds));
    dlt_dataset_destroy(ds);
    return st;
}

static void test_cifar10(void) {
    char dir[512], good[512], b1[600], b2[600], tb[600];
    path_in(dir, sizeof dir, "cifar");
    path_in(good, sizeof good, "good_batch.bin");
    REQUIRE(mkdir(dir, 0755) == 0);
    write_batch(good);
    snprintf(b1, sizeof b1, "%s/data_batch_1.bin", dir);
    snprintf(b2, sizeof b2, "%s/data_batch_2.bin", dir);
    snprintf(tb, sizeof tb, "%s/test_batch.bin", dir);
    write_batch(b1);
    /* a training batch after a good one: before issue 20 a dangling link here was skipped */
    cifar_arg train = {dir, DLT_SPLIT_TRAIN, 4};
    int skipped = th_hostile_check(b2, good, read_cifar_dir, &train, "dlt_cifar10_open(train), data_batch_2.bin");
    cifar_arg test = {dir, DLT_SPLIT_TEST, 2};
    skipped += th_hostile_check(tb, good, read_cifar_dir, &test, "dlt_cifar10_open(test), test_batch.bin");
    skipped += th_hostile_check(tb, good, read_cifar_file, NULL, "dlt_cifar10_open_file");
    unlink(b1);
    unlink(good);
    rmdir(dir);
    if (skipped) {
        char why[160];
        snprintf(why, sizeof why, "%.150s", th_skip_reason);
        SKIP("%d permission cases could not run (%s)", skipped, why);
    }
}

/* ---- safetensors ---- */

typedef struct st_arg {
    dlt_module *m;
    dlt_optimizer *opt;
    float w0; /* the model's first weight, which no refused load may change */
} st_arg;

static float first_weight(dlt_module *m) {
    dlt_tensor *w = NULL;
    double v = 0;
    if (dlt_module_find(m, "weight", &w) != DLT_OK || dlt_tensor_get(w, 0, &v) != DLT_OK) return NAN;
    return (float)v;
}

#define UNCHANGED(a, st)                                                                      \
    CHECK((st) == DLT_OK || first_weight((a)->m) == (a)->w0, "a refused load changed the model")

static dlt_status read_st_open(const char *path, void *p) {
    (void)p;
    dlt_safetensors *f = NULL;
    dlt_status st = dlt_safetensors_open(path, &f);
    if (st == DLT_OK) CHECK(dlt_safetensors_num_tensors(f) >= 2);
    else CHECK(f == NULL, "a refused open made a handle");
    dlt_safetensors_close(f);
    return st;
}
static dlt_status read_st_tensor(const char *path, void *p) {
    (void)p;
    dlt_tensor *t = NULL;
    dlt_status st = dlt_safetensors_load_tensor(g_ctx, path, "weight", &t);
    if (st != DLT_OK) CHECK(t == NULL, "a refused load made a tensor");
    dlt_tensor_release(t);
    return st;
}
static dlt_status read_module(const char *path, void *p) {
    st_arg *a = p;
    dlt_status st = dlt_module_load(a->m, path);
    UNCHANGED(a, st);
    return st;
}
static dlt_status read_module_ex(const char *path, void *p) {
    st_arg *a = p;
    dlt_module_load_options o;
    dlt_module_load_options_default(&o);
    o.strict = 0;
    dlt_load_report *r = NULL;
    dlt_status st = dlt_module_load_ex(a->m, path, &o, &r);
    UNCHANGED(a, st);
    CHECK((st == DLT_OK) == (r != NULL), "report %p after status %d", (void *)r, st);
    dlt_load_report_destroy(r);
    return st;
}
static dlt_status read_checkpoint(const char *path, void *p) {
    st_arg *a = p;
    int64_t e = -9, s = -9;
    dlt_status st = dlt_checkpoint_load(path, a->m, a->opt, NULL, &e, &s);
    UNCHANGED(a, st);
    if (st != DLT_OK) CHECK(e == -9 && s == -9, "a refused load wrote the position");
    else CHECK(e == 4 && s == 40, "epoch %lld step %lld", (long long)e, (long long)s);
    return st;
}

static void test_safetensors_readers(void) {
    char dir[512], good[512], path[600];
    path_in(dir, sizeof dir, "st");
    path_in(good, sizeof good, "good.safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(mkdir(dir, 0755) == 0);
    st_arg a = {NULL, NULL, 0};
    CHECK_OK(dlt_linear_create(g_ctx, 3, 2, 1, &a.m));
    dlt_tensor *params[2];
    int32_t np = 0;
    CHECK_OK(dlt_module_params(a.m, params, 2, &np));
    CHECK_OK(dlt_sgd_create(params, np, 0.1, 0, 0, 0, 0, 0, &a.opt));
    CHECK_OK(dlt_checkpoint_save(good, a.m, a.opt, NULL, 4, 40));
    chmod(good, 0644);
    /* the model differs from the file, so a load that goes through shows */
    CHECK_OK(dlt_tensor_fill(params[0], 0.5));
    a.w0 = first_weight(a.m);
    int skipped = th_hostile_check(path, good, read_st_open, NULL, "dlt_safetensors_open");
    skipped += th_hostile_check(path, good, read_st_tensor, NULL, "dlt_safetensors_load_tensor");
    skipped += th_hostile_check(path, good, read_module, &a, "dlt_module_load");
    CHECK_OK(dlt_tensor_fill(params[0], 0.5));
    skipped += th_hostile_check(path, good, read_module_ex, &a, "dlt_module_load_ex");
    CHECK_OK(dlt_tensor_fill(params[0], 0.5));
    skipped += th_hostile_check(path, good, read_checkpoint, &a, "dlt_checkpoint_load");
    dlt_optimizer_destroy(a.opt);
    dlt_module_destroy(a.m);
    unlink(good);
    rmdir(dir);
    if (skipped) {
        char why[160];
        snprintf(why, sizeof why, "%.150s", th_skip_reason);
        SKIP("%d permission cases could not run (%s)", skipped, why);
    }
}

/* ---- writers ---- */
static void test_writers(void) {
    char dir[512], path[600];
    path_in(dir, sizeof dir, "ro");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(mkdir(dir, 0755) == 0);
    dlt_module *m = NULL;
    CHECK_OK(dlt_linear_create(g_ctx, 3, 2, 1, &m));
    /* onto a directory: the temporary file is written, the rename fails, nothing is left */
    REQUIRE(mkdir(path, 0755) == 0);
    CHECK_STATUS(dlt_module_save(m, path), DLT_ERR_IO);
    CHECK(strstr(dlt_last_error(), path) != NULL, "%s", dlt_last_error());
    CHECK(th_count_files(dir, "model.safetensors.tmp-") == 0, "a temporary file was left");
    rmdir(path);
    /* into a directory it cannot write (as nobody when running as root) */
    REQUIRE(chmod(dir, 0555) == 0);
    int dropped = th_hostile_drop(TH_HOSTILE_NO_PERMISSION);
    if (dropped >= 0) {
        dlt_status st = dlt_module_save(m, path);
        th_hostile_restore(dropped);
        CHECK(st == DLT_ERR_IO && strstr(dlt_last_error(), path), "status %d: %s", st, dlt_last_error());
        CHECK(access(path, F_OK) != 0 && th_count_files(dir, "model") == 0, "the refused save left a file");
    }
    chmod(dir, 0755);
    dlt_module_destroy(m);
    rmdir(dir);
    if (dropped < 0) {
        char why[200];
        snprintf(why, sizeof why, "%.190s", th_skip_reason);
        SKIP("%s", why);
    }
}

/* ---- token files, text, record files, Hugging Face GPT-2 directories (issue 17's readers) ---- */

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        printf("# cannot write %s\n", path);
        exit(1);
    }
    chmod(path, 0644);
}

static dlt_status read_tokens(const char *path, void *p) {
    const int32_t format = *(const int32_t *)p;
    dlt_token_dataset *ds = NULL;
    dlt_status st = dlt_token_file_open(g_ctx, path, format, 16, &ds);
    if (st != DLT_OK) CHECK(ds == NULL, "a refused dlt_token_file_open made a dataset");
    else CHECK(dlt_token_dataset_size(ds) == 6, "%lld tokens", (long long)dlt_token_dataset_size(ds));
    dlt_token_dataset_destroy(ds);
    return st;
}

static dlt_status read_tokenizer(const char *path, void *p) {
    (void)p;
    dlt_char_tokenizer *tok = NULL;
    dlt_status st = dlt_char_tokenizer_from_file(path, &tok);
    if (st != DLT_OK) CHECK(tok == NULL, "a refused dlt_char_tokenizer_from_file made a tokenizer");
    else CHECK(dlt_char_tokenizer_vocab_size(tok) == 6, "vocabulary %d", dlt_char_tokenizer_vocab_size(tok));
    dlt_char_tokenizer_destroy(tok);
    return st;
}

static dlt_status read_char_text(const char *path, void *p) {
    (void)p;
    dlt_token_dataset *tr = NULL, *va = NULL;
    dlt_status st = dlt_char_text_open(g_ctx, path, 0.5, NULL, &tr, &va);
    if (st != DLT_OK) CHECK(tr == NULL && va == NULL, "a refused dlt_char_text_open made datasets");
    dlt_token_dataset_destroy(tr);
    dlt_token_dataset_destroy(va);
    return st;
}

static dlt_status read_records(const char *path, void *p) {
    (void)p;
    dlt_dataset *ds = NULL;
    dlt_status st = dlt_record_files_open(g_ctx, &path, 1, NULL, &ds);
    if (st != DLT_OK) CHECK(ds == NULL, "a refused dlt_record_files_open made a dataset");
    else CHECK(dlt_dataset_size(ds) == 2, "%lld records", (long long)dlt_dataset_size(ds));
    dlt_dataset_destroy(ds);
    return st;
}

static dlt_status read_hf_file(const char *path, void *p) {
    dlt_module *gpt = p;
    return dlt_gpt_load_hf(gpt, path);
}

static dlt_status read_hf_dir(const char *path, void *p) {
    (void)p;
    char dir[1024];
    th_dirname(path, dir, sizeof dir);
    dlt_module *m = NULL;
    dlt_status st = dlt_gpt_from_hf(g_ctx, dir, &m);
    if (st != DLT_OK) CHECK(m == NULL, "a refused dlt_gpt_from_hf made a model");
    dlt_module_destroy(m);
    return st;
}

static void test_token_and_text_readers(void) {
    char good[512], path[512], hf[512], hf2[512], model[600], config[600], model2[600], config2[600];
    int skipped = 0;
    /* llm.c's format: 256 int32 of header (magic, version, count), then uint16 tokens */
    int32_t header[256] = {20240520, 1, 6};
    const uint16_t toks[6] = {1, 2, 3, 4, 5, 15};
    unsigned char llmc[sizeof header + sizeof toks];
    memcpy(llmc, header, sizeof header);
    memcpy(llmc + sizeof header, toks, sizeof toks);
    path_in(good, sizeof good, "good.llmc.bin");
    write_bytes(good, llmc, sizeof llmc);
    path_in(path, sizeof path, "train.bin");
    int32_t fmt = DLT_TOKENS_LLMC;
    skipped += th_hostile_check(path, good, read_tokens, &fmt, "dlt_token_file_open(llm.c)");
    unlink(good);
    path_in(good, sizeof good, "good.raw.bin");
    write_bytes(good, toks, sizeof toks);
    fmt = DLT_TOKENS_RAW;
    skipped += th_hostile_check(path, good, read_tokens, &fmt, "dlt_token_file_open(raw)");
    unlink(good);
    /* text: 6 distinct characters (a-e and the newline) */
    path_in(good, sizeof good, "good.txt");
    write_bytes(good, "abcde\nabcde", 11);
    path_in(path, sizeof path, "input.txt");
    skipped += th_hostile_check(path, good, read_tokenizer, NULL, "dlt_char_tokenizer_from_file");
    skipped += th_hostile_check(path, good, read_char_text, NULL, "dlt_char_text_open");
    unlink(good);
    /* fixed-size record files (CIFAR-10's layout by default) */
    path_in(good, sizeof good, "good.rec");
    write_batch(good);
    path_in(path, sizeof path, "part-0.rec");
    skipped += th_hostile_check(path, good, read_records, NULL, "dlt_record_files_open");
    unlink(good);
    /* Hugging Face GPT-2: the weights file, then config.json of a directory */
    dlt_gpt_config c;
    CHECK_OK(dlt_gpt_config_preset("tiny", &c));
    c.n_layer = 1;
    c.bias = 1; /* Hugging Face GPT-2 has biases */
    dlt_module *gpt = NULL;
    CHECK_OK(dlt_gpt_create(g_ctx, &c, &gpt));
    path_in(hf, sizeof hf, "hf_good");
    CHECK_OK(dlt_gpt_save_hf(gpt, hf));
    snprintf(model, sizeof model, "%s/model.safetensors", hf);
    snprintf(config, sizeof config, "%s/config.json", hf);
    chmod(hf, 0755), chmod(model, 0644), chmod(config, 0644);
    path_in(hf2, sizeof hf2, "hf_other");
    REQUIRE(mkdir(hf2, 0755) == 0);
    snprintf(model2, sizeof model2, "%s/model.safetensors", hf2);
    snprintf(config2, sizeof config2, "%s/config.json", hf2);
    skipped += th_hostile_check(model2, model, read_hf_file, gpt, "dlt_gpt_load_hf");
    REQUIRE(symlink(model, model2) == 0);
    skipped += th_hostile_check(config2, config, read_hf_dir, NULL, "dlt_gpt_from_hf, config.json");
    unlink(model2);
    REQUIRE(symlink(config, config2) == 0);
    skipped += th_hostile_check(model2, model, read_hf_dir, NULL, "dlt_gpt_from_hf, model.safetensors");
    unlink(config2);
    rmdir(hf2);
    unlink(model), unlink(config), rmdir(hf);
    dlt_module_destroy(gpt);
    if (skipped) {
        char why[160];
        snprintf(why, sizeof why, "%.150s", th_skip_reason);
        SKIP("%d permission cases could not run (%s)", skipped, why);
    }
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dlt_paths_XXXXXX");
    if (!mkdtemp(g_dir) || chmod(g_dir, 0755) != 0) {
        printf("# cannot create a temporary directory\n");
        return 1;
    }
    g_ctx = th_cpu_ctx();
    RUN(test_cifar10);
    RUN(test_safetensors_readers);
    RUN(test_token_and_text_readers);
    RUN(test_writers);
    dlt_ctx_destroy(g_ctx);
    rmdir(g_dir);
    return th_done();
}
