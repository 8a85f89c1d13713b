/*
 * fuzz_cifar10.c - fuzz target for the CIFAR-10 binary reader (lib/data/cifar10.c) through
 * the public API: dlt_cifar10_open (both splits), dlt_cifar10_open_file, class names from
 * batches.meta.txt, then dlt_dataset_get and one loader batch over what was accepted.
 *
 * One input describes a dataset directory:
 *   byte 0  ctrl: bit0 split (0 train, 1 test); bit1 open one file with
 *           dlt_cifar10_open_file instead of the directory; bit2 trim every batch file to
 *           a whole number of 3073-byte records; bit3 make every label valid (mod 10);
 *           bit4 write batches.meta.txt; bit5 plant a non-regular entry (a directory, or a
 *           FIFO with bit6) under the first batch name the split looks for and lacks;
 *           bit7 batches.meta.txt is such a non-regular entry instead of a file; bit7
 *           without bit4 (no meta file to replace) makes bit5's entry a symlink instead:
 *           dangling, or a loop with bit6 (present but unreadable: never "absent")
 *   byte 1  which batch files exist: bits 0-4 data_batch_1..5.bin, bit 5 test_batch.bin
 *   2-3     L, little-endian: the length of the batches.meta.txt text that follows
 *   4..     L bytes of batches.meta.txt, then the batch bytes, split evenly over the
 *           existing batch files in name order (the last takes the remainder)
 * Short inputs read missing bytes as 0. Trimming and label fixing (bits 2, 3) let the
 * fuzzer reach the record loop, which a random file size almost never does.
 *
 * The harness predicts the outcome from the files it wrote: the exact status (DLT_OK,
 * DLT_ERR_IO for a missing or non-regular file, DLT_ERR_FORMAT for an empty file, a size
 * that is not a whole number of records, a label above 9; the first problem in file order,
 * sizes before labels, as the reader opens every file before reading any), the record
 * count, every record's pixels and label, the class names (one per non-blank line, blanks,
 * tabs and CRs trimmed, at most 63 bytes, non-printable bytes shown as '?'), and the first
 * loader batch (byte / 255). A refusal must carry a message naming the function.
 */
#include <fcntl.h>
#include <sys/types.h>

#include "fuzz_common.h"

#define CF_IMAGE 3072
#define CF_RECORD (1 + CF_IMAGE)
#define CF_SLOTS 6 /* data_batch_1..5.bin, test_batch.bin */
#define CF_META_CHECKED 4096 /* meta files up to this size are checked name by name */

static const char *const CF_NAMES[CF_SLOTS] = {"data_batch_1.bin", "data_batch_2.bin",
                                               "data_batch_3.bin", "data_batch_4.bin",
                                               "data_batch_5.bin", "test_batch.bin"};

enum { CF_ABSENT = 0, CF_REGULAR = 1, CF_SPECIAL = 2 };

typedef struct cf_slot {
    int kind;
    const uint8_t *p; /* contents of a regular file */
    size_t n;
} cf_slot;

static struct {
    dlt_ctx *ctx;
    char dir[512];
    int64_t runs, accepted; /* inputs run, inputs the reader accepted */
} cf_g;

static DLTFZ_UNUSED int dltfz_cifar10_init(char *err, size_t n) {
    if (cf_g.ctx) return 0;
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &cf_g.ctx) != DLT_OK)
        return dltfz_fail(err, n, "dlt_ctx_create: %s", dlt_last_error());
    if (dltfz_make_dir(cf_g.dir, sizeof cf_g.dir, "cifar10") != 0) {
        dlt_ctx_destroy(cf_g.ctx);
        cf_g.ctx = NULL;
        return dltfz_fail(err, n, "cannot create a temporary directory");
    }
    return 0;
}

static DLTFZ_UNUSED void dltfz_cifar10_fini(void) {
    dltfz_remove_tree(cf_g.dir);
    cf_g.dir[0] = '\0';
    dlt_ctx_destroy(cf_g.ctx);
    memset(&cf_g, 0, sizeof cf_g);
}

static void cf_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", cf_g.dir, name);
}

/* A directory or a FIFO at path; with link, a dangling symlink or (fifo) a symlink to
 * itself (ELOOP). */
static int cf_plant(const char *path, int fifo, int link) {
    if (link) {
        char target[1100];
        snprintf(target, sizeof target, "%s.missing", path);
        return symlink(fifo ? path : target, path);
    }
    return fifo ? mkfifo(path, 0600) : mkdir(path, 0700);
}

/* Expected class name i from the meta text (NULL: the default "class<i>"). */
static int cf_expected_name(const uint8_t *meta, size_t n, int32_t want, char out[64]) {
    int32_t cls = 0;
    size_t i = 0;
    while (i < n && cls < 10) {
        size_t start = i;
        while (i < n && meta[i] != '\n') i++;
        size_t end = i++;
        while (start < end && (meta[start] == ' ' || meta[start] == '\t' || meta[start] == '\r'))
            start++;
        while (end > start && (meta[end - 1] == ' ' || meta[end - 1] == '\t' || meta[end - 1] == '\r'))
            end--;
        if (end == start) continue;
        if (cls++ != want) continue;
        size_t len = end - start > 63 ? 63 : end - start;
        for (size_t k = 0; k < len; k++)
            out[k] = (meta[start + k] >= 0x20 && meta[start + k] < 0x7f) ? (char)meta[start + k] : '?';
        out[len] = '\0';
        return 1;
    }
    return 0;
}

/* The checks on an accepted dataset: count, records, names, a loader batch. */
static int cf_check_dataset(dlt_dataset *ds, const cf_slot *used, int nused, const uint8_t *meta,
                            size_t meta_n, int meta_regular, char *err, size_t n) {
    int64_t count = 0;
    for (int i = 0; i < nused; i++) count += (int64_t)(used[i].n / CF_RECORD);
    if (dlt_dataset_size(ds) != count)
        return dltfz_fail(err, n, "dataset has %lld records, the files hold %lld",
                          (long long)dlt_dataset_size(ds), (long long)count);
    if (dlt_dataset_num_classes(ds) != 10)
        return dltfz_fail(err, n, "%d classes", dlt_dataset_num_classes(ds));
    /* every record (inputs are small: a few dozen records at most) */
    uint8_t pix[CF_IMAGE + 1];
    int64_t idx = 0;
    for (int f = 0; f < nused; f++) {
        for (size_t r = 0; r + CF_RECORD <= used[f].n; r += CF_RECORD, idx++) {
            int32_t label = -1;
            pix[CF_IMAGE] = 0xA5;
            dlt_status st = dlt_dataset_get(ds, idx, pix, sizeof pix, &label);
            if (st != DLT_OK)
                return dltfz_fail(err, n, "dlt_dataset_get(%lld): %s", (long long)idx, dlt_last_error());
            if (label != used[f].p[r] || memcmp(pix, used[f].p + r + 1, CF_IMAGE) != 0 ||
                pix[CF_IMAGE] != 0xA5)
                return dltfz_fail(err, n, "record %lld: label %d (file %d) or pixels differ from the file",
                                  (long long)idx, label, used[f].p[r]);
        }
    }
    int32_t label = 0;
    dlt_clear_error();
    dlt_status st = dlt_dataset_get(ds, count, pix, sizeof pix, &label);
    if (st != DLT_ERR_INVALID_ARGUMENT || dltfz_check_message(st, "dlt_dataset_get", err, n))
        return dltfz_fail(err, n, "dlt_dataset_get(%lld) past the end: %d %s", (long long)count, st,
                          dlt_last_error());
    st = dlt_dataset_get(ds, 0, pix, CF_IMAGE - 1, NULL);
    if (st != DLT_ERR_INVALID_ARGUMENT)
        return dltfz_fail(err, n, "dlt_dataset_get with a short buffer: %d", st);
    /* class names */
    for (int32_t c = 0; c < 10; c++) {
        const char *name = dlt_dataset_class_name(ds, c);
        if (!name) return dltfz_fail(err, n, "class %d has no name", c);
        size_t len = strnlen(name, 64);
        if (len > 63) return dltfz_fail(err, n, "class %d name is longer than 63 bytes", c);
        for (size_t k = 0; k < len; k++)
            if ((unsigned char)name[k] < 0x20 || (unsigned char)name[k] >= 0x7f)
                return dltfz_fail(err, n, "class %d name has a non-printable byte", c);
        if (meta_regular && meta_n > CF_META_CHECKED) continue; /* beyond what is checked */
        char want[64];
        if (!meta_regular || !cf_expected_name(meta, meta_n, c, want))
            snprintf(want, sizeof want, "class%d", c);
        if (strcmp(name, want) != 0)
            return dltfz_fail(err, n, "class %d is named '%s', expected '%s'", c, name, want);
    }
    if (dlt_dataset_class_name(ds, 10) || dlt_dataset_class_name(ds, -1))
        return dltfz_fail(err, n, "a name for a class out of range");
    /* one loader batch: the first records as byte / 255 */
    dlt_loader *ld = NULL;
    st = dlt_loader_create(ds, 3, 0, 0, 7, &ld);
    if (st != DLT_OK) return dltfz_fail(err, n, "dlt_loader_create: %s", dlt_last_error());
    dlt_tensor *x = NULL, *y = NULL;
    int32_t has = 0;
    int bad = 0;
    st = dlt_loader_next(ld, &x, &y, &has);
    if (st != DLT_OK || !has) {
        bad = dltfz_fail(err, n, "dlt_loader_next: %d %s", st, dlt_last_error());
    } else {
        int64_t rows = count < 3 ? count : 3;
        if (dlt_tensor_dim(x, 0) != rows || dlt_tensor_numel(x) != rows * CF_IMAGE) {
            bad = dltfz_fail(err, n, "the first batch has %lld rows, expected %lld",
                             (long long)dlt_tensor_dim(x, 0), (long long)rows);
        } else {
            float *v = malloc((size_t)rows * CF_IMAGE * sizeof *v);
            if (!v || dlt_tensor_copy_to_host(x, v, (size_t)rows * CF_IMAGE * sizeof *v) != DLT_OK) {
                bad = dltfz_fail(err, n, "cannot read the batch: %s", dlt_last_error());
            } else {
                for (int64_t r = 0; r < rows && !bad; r++) {
                    uint8_t want[CF_IMAGE];
                    if (dlt_dataset_get(ds, r, want, sizeof want, NULL) != DLT_OK) {
                        bad = dltfz_fail(err, n, "dlt_dataset_get: %s", dlt_last_error());
                        break;
                    }
                    for (int k = 0; k < CF_IMAGE; k++)
                        if (v[r * CF_IMAGE + k] != (float)want[k] / 255.0f) {
                            bad = dltfz_fail(err, n, "batch row %lld element %d is %g, byte %u",
                                             (long long)r, k, (double)v[r * CF_IMAGE + k], want[k]);
                            break;
                        }
                }
            }
            free(v);
        }
    }
    dlt_loader_destroy(ld);
    return bad;
}

static DLTFZ_UNUSED int dltfz_cifar10_run(const uint8_t *data, size_t size, char *err, size_t n) {
    err[0] = '\0';
    if (!cf_g.ctx) return dltfz_fail(err, n, "dltfz_cifar10_init was not called");
    const uint8_t ctrl = size > 0 ? data[0] : 0, mask = size > 1 ? data[1] : 0;
    size_t meta_n = (size_t)(size > 2 ? data[2] : 0) | (size_t)(size > 3 ? data[3] : 0) << 8;
    size_t rest = size > 4 ? size - 4 : 0;
    if (meta_n > rest) meta_n = rest;
    const uint8_t *meta = data + (size > 4 ? 4 : size);
    const uint8_t *payload = meta + meta_n;
    size_t payload_n = rest - meta_n;
    const int test_split = ctrl & 1, by_file = (ctrl >> 1) & 1, trim = (ctrl >> 2) & 1,
              fix_labels = (ctrl >> 3) & 1, write_meta = (ctrl >> 4) & 1, plant = (ctrl >> 5) & 1,
              fifo = (ctrl >> 6) & 1, meta_special = (ctrl >> 7) & 1;

    /* lay the files out */
    uint8_t *bytes = malloc(payload_n ? payload_n : 1);
    if (!bytes) return dltfz_fail(err, n, "out of memory");
    if (payload_n) memcpy(bytes, payload, payload_n);
    cf_slot slot[CF_SLOTS];
    memset(slot, 0, sizeof slot);
    int present = 0;
    for (int i = 0; i < CF_SLOTS; i++) present += (mask >> i) & 1;
    size_t off = 0;
    for (int i = 0, k = 0; i < CF_SLOTS; i++) {
        if (!((mask >> i) & 1)) continue;
        size_t share = payload_n / (size_t)present;
        if (++k == present) share = payload_n - off;
        size_t len = trim ? share - share % CF_RECORD : share;
        if (fix_labels)
            for (size_t r = 0; r < len; r += CF_RECORD) bytes[off + r] %= 10;
        slot[i].kind = CF_REGULAR;
        slot[i].p = bytes + off;
        slot[i].n = len;
        off += share;
    }
    const int first = test_split ? 5 : 0, last = test_split ? 5 : 4;
    if (plant)
        for (int i = first; i <= last; i++)
            if (slot[i].kind == CF_ABSENT) {
                slot[i].kind = CF_SPECIAL;
                break;
            }

    /* write them */
    char path[1024];
    int bad = 0;
    for (int i = 0; i < CF_SLOTS && !bad; i++) {
        cf_path(path, sizeof path, CF_NAMES[i]);
        if (dltfz_remove(path) != 0) bad = dltfz_fail(err, n, "cannot remove %s", path);
        else if (slot[i].kind == CF_REGULAR && dltfz_write_file(path, slot[i].p, slot[i].n) != 0)
            bad = dltfz_fail(err, n, "cannot write %s", path);
        else if (slot[i].kind == CF_SPECIAL && cf_plant(path, fifo, meta_special && !write_meta) != 0)
            bad = dltfz_fail(err, n, "cannot create %s", path);
    }
    char meta_path[1024];
    cf_path(meta_path, sizeof meta_path, "batches.meta.txt");
    const int meta_regular = write_meta && !meta_special;
    if (!bad && dltfz_remove(meta_path) != 0) bad = dltfz_fail(err, n, "cannot remove %s", meta_path);
    if (!bad && meta_regular && dltfz_write_file(meta_path, meta, meta_n) != 0)
        bad = dltfz_fail(err, n, "cannot write %s", meta_path);
    if (!bad && write_meta && meta_special && cf_plant(meta_path, fifo, 0) != 0)
        bad = dltfz_fail(err, n, "cannot create %s", meta_path);
    if (bad) {
        free(bytes);
        return bad;
    }

    /* predict: the files the call reads, in order, and the first problem */
    cf_slot used[CF_SLOTS];
    int nused = 0, target = -1;
    dlt_status want = DLT_OK;
    if (by_file) {
        for (int i = 0; i < CF_SLOTS && target < 0; i++)
            if (slot[i].kind != CF_ABSENT) target = i;
        if (target < 0) target = 0;
    }
    for (int i = by_file ? target : first; i <= (by_file ? target : last); i++) {
        if (slot[i].kind == CF_ABSENT && !by_file && !test_split) continue;
        if (slot[i].kind != CF_REGULAR) {
            want = DLT_ERR_IO;
            break;
        }
        if (slot[i].n == 0 || slot[i].n % CF_RECORD != 0) {
            want = DLT_ERR_FORMAT;
            break;
        }
        used[nused++] = slot[i];
    }
    if (want == DLT_OK && nused == 0) want = DLT_ERR_IO;
    for (int i = 0; i < nused && want == DLT_OK; i++)
        for (size_t r = 0; r < used[i].n; r += CF_RECORD)
            if (used[i].p[r] >= 10) want = DLT_ERR_FORMAT;

    /* call */
    const char *func = by_file ? "dlt_cifar10_open_file" : "dlt_cifar10_open";
    dlt_dataset *ds = NULL;
    dlt_clear_error();
    dlt_status st;
    if (by_file) {
        cf_path(path, sizeof path, CF_NAMES[target]);
        st = dlt_cifar10_open_file(cf_g.ctx, path, &ds);
    } else {
        st = dlt_cifar10_open(cf_g.ctx, cf_g.dir, test_split ? DLT_SPLIT_TEST : DLT_SPLIT_TRAIN, &ds);
    }
    if (st != want)
        bad = dltfz_fail(err, n, "%s returned %d (%s), expected %d; message: %.300s", func, st,
                         dlt_status_string(st), want, dlt_last_error());
    else if (st != DLT_OK)
        bad = dltfz_check_message(st, func, err, n);
    else if (!ds)
        bad = dltfz_fail(err, n, "%s succeeded without a dataset", func);
    else
        bad = cf_check_dataset(ds, used, nused, meta, meta_n, meta_regular, err, n);
    if (st != DLT_OK && ds) bad = dltfz_fail(err, n, "%s failed but set *out", func);
    cf_g.runs++;
    cf_g.accepted += st == DLT_OK;
    dlt_dataset_destroy(ds);
    free(bytes);
    return bad;
}

DLTFZ_LIBFUZZER_MAIN(cifar10)
