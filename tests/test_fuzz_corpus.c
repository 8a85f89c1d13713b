/*
 * test_fuzz_corpus.c - replays every file of the fuzz corpora (fuzz/corpus/<target>/) through
 * the fuzz harnesses' own entry points, without libFuzzer, as an ordinary test: the seeds,
 * the hand-made edge cases, the regression inputs of past findings (regress-*) and what
 * fuzzing kept for coverage. Each harness checks the library's statuses, messages and
 * all-or-nothing loading itself (see fuzz/fuzz_cifar10.c and fuzz/fuzz_safetensors.c); a
 * broken rule fails the case with the file's name, and crashes, leaks and memory errors
 * show up under the sanitizer build (scripts/test.sh runs this in both builds).
 *
 * One TAP line per corpus directory, and one for loads from a FIFO, a directory and a
 * missing path (not something a corpus file can describe). The corpus is found through DLT_SOURCE_ROOT (set by
 * tests/meson.build); without it the cases skip. Each directory must hold both inputs the
 * library accepts and inputs it refuses, so that both paths stay exercised.
 */
#define DLTFZ_NO_LIBFUZZER 1
#include "../fuzz/fuzz_cifar10.c"
#include "../fuzz/fuzz_safetensors.c"

#include "harness.h"

typedef int (*run_fn)(const uint8_t *, size_t, char *, size_t);

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The corpus directory of target, or NULL (the case skips) when the source root is unknown. */
static const char *corpus_dir(const char *target, char *buf, size_t n) {
    const char *root = getenv("DLT_SOURCE_ROOT");
    if (!root || !root[0]) return NULL;
    snprintf(buf, n, "%s/fuzz/corpus/%s", root, target);
    return buf;
}

/* Runs every regular file of dir through run; returns the number of files. */
static int replay(const char *dir, run_fn run) {
    DIR *d = opendir(dir);
    REQUIRE(d != NULL, "cannot open %s", dir);
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            char **p = realloc(names, (size_t)cap * sizeof *names);
            REQUIRE(p != NULL);
            names = p;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int files = 0;
    for (int i = 0; i < n; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat sb;
        FILE *f = NULL;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || !(f = fopen(path, "rb"))) {
            CHECK(0, "cannot read %s", path);
            continue;
        }
        uint8_t *buf = malloc((size_t)sb.st_size + 1);
        size_t got = buf ? fread(buf, 1, (size_t)sb.st_size, f) : 0;
        fclose(f);
        CHECK(buf && got == (size_t)sb.st_size, "cannot read %s", path);
        if (buf && got == (size_t)sb.st_size) {
            char err[2048];
            int bad = run(buf, got, err, sizeof err);
            CHECK(!bad, "%s: %s", names[i], err);
            files++;
        }
        free(buf);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return files;
}

static void test_corpus_cifar10(void) {
    char dir[1024], err[512];
    if (!corpus_dir("cifar10", dir, sizeof dir)) SKIP("DLT_SOURCE_ROOT is not set");
    REQUIRE(dltfz_cifar10_init(err, sizeof err) == 0, "%s", err);
    int files = replay(dir, dltfz_cifar10_run);
    printf("# cifar10: %d files, %lld accepted, %lld refused\n", files, (long long)cf_g.accepted,
           (long long)(cf_g.runs - cf_g.accepted));
    CHECK(files >= 10, "only %d corpus files in %s", files, dir);
    CHECK(cf_g.accepted >= 3 && cf_g.runs - cf_g.accepted >= 3,
          "the corpus should hold accepted and refused inputs (%lld of %lld accepted)",
          (long long)cf_g.accepted, (long long)cf_g.runs);
    dltfz_cifar10_fini();
}

static void test_corpus_safetensors(void) {
    char dir[1024], err[512];
    if (!corpus_dir("safetensors", dir, sizeof dir)) SKIP("DLT_SOURCE_ROOT is not set");
    REQUIRE(dltfz_safetensors_init(err, sizeof err) == 0, "%s", err);
    int files = replay(dir, dltfz_safetensors_run);
    printf("# safetensors: %d files, %lld accepted as a whole checkpoint (%lld without momentum), "
           "%lld refused\n", files, (long long)st_g.accepted, (long long)st_g.accepted0,
           (long long)(st_g.runs - st_g.accepted));
    CHECK(files >= 10, "only %d corpus files in %s", files, dir);
    CHECK(st_g.accepted >= 1 && st_g.accepted0 >= 1 && st_g.runs - st_g.accepted >= 10,
          "the corpus should hold accepted and refused inputs (%lld of %lld accepted)",
          (long long)st_g.accepted, (long long)st_g.runs);
    dltfz_safetensors_fini();
}

/* Paths that are not regular files: refused with DLT_ERR_IO at once. A FIFO must not block
 * the open (a reader that waits for a writer hangs the program; the alarm turns such a hang
 * into a failure of this program). The CIFAR-10 reader's FIFOs come from the corpus. */
static void test_special_files(void) {
    char err[512], fifo[1100], missing[1100];
    REQUIRE(dltfz_safetensors_init(err, sizeof err) == 0, "%s", err);
    snprintf(fifo, sizeof fifo, "%s/fifo.safetensors", st_g.dir);
    snprintf(missing, sizeof missing, "%s/missing.safetensors", st_g.dir);
    REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    const char *paths[3] = {fifo, st_g.dir, missing};
    alarm(60);
    for (int i = 0; i < 3; i++) {
        dlt_tensor *t = NULL;
        CHECK_STATUS(dlt_module_load(st_g.m, paths[i]), DLT_ERR_IO);
        CHECK_STATUS(dlt_checkpoint_load(paths[i], st_g.m, st_g.opt, st_g.sc, NULL, NULL), DLT_ERR_IO);
        CHECK_STATUS(dlt_safetensors_load_tensor(st_g.ctx, paths[i], "fc.bias", &t), DLT_ERR_IO);
        CHECK(t == NULL);
        CHECK(strstr(dlt_last_error(), paths[i]) != NULL, "the message does not name the path: %s",
              dlt_last_error());
    }
    alarm(0);
    CHECK(st_hash_training() == st_g.h_init, "a refused load changed the net");
    dltfz_safetensors_fini();
}

int main(void) {
    RUN(test_corpus_cifar10);
    RUN(test_corpus_safetensors);
    RUN(test_special_files);
    return th_done();
}
