/*
 * gen_seeds.c - writes the library-made seeds of the safetensors corpus into a directory:
 *   seed-checkpoint.safetensors        dlt_checkpoint_save of the harness's net, optimizer
 *                                      (momentum buffers filled) and scaler: loads everywhere
 *   seed-checkpoint-noscaler.safetensors  the same without the scaler entries
 *   seed-checkpoint-momentum0.safetensors  an SGD optimizer without momentum (no buffers)
 *                                      and a disabled scaler (no scaler entries)
 *   seed-module.safetensors            dlt_module_save of the net
 *   seed-dtypes.safetensors            dlt_safetensors_save of one tensor per dtype, a 0-D
 *                                      and an empty one, and a channels-last tensor
 *   seed-empty.safetensors             dlt_safetensors_save of no tensors
 * The net is the one fuzz_safetensors.c builds (its code is included here), so the
 * checkpoint seeds reach the paths behind a successful load. fuzz/make_seeds.py derives the
 * hand-made edge cases from seed-checkpoint.safetensors. Run by scripts/fuzz.sh --seeds.
 *
 * Usage: gen_seeds <output directory>
 */
#define DLTFZ_NO_LIBFUZZER 1
#include "fuzz_safetensors.c"

static int copy_file(const char *from, const char *to) {
    FILE *f = fopen(from, "rb");
    if (!f) return -1;
    unsigned char buf[65536];
    size_t got;
    FILE *g = fopen(to, "wb");
    int ok = g != NULL;
    while (ok && (got = fread(buf, 1, sizeof buf, f)) > 0) ok = fwrite(buf, 1, got, g) == got;
    fclose(f);
    if (g && fclose(g) != 0) ok = 0;
    return ok ? 0 : -1;
}

static dlt_status save_dtypes(const char *path) {
    static const int32_t dtypes[6] = {DLT_F32, DLT_F16, DLT_BF16, DLT_I32, DLT_I64, DLT_U8};
    static const char *const names[9] = {"f32", "f16", "bf16", "i32", "i64", "u8", "scalar",
                                         "empty", "nhwc"};
    dlt_tensor *t[9] = {0};
    const int64_t shape[4] = {2, 3, 1, 2}, empty[2] = {0, 5};
    dlt_status st = DLT_OK;
    for (int i = 0; i < 6 && st == DLT_OK; i++) {
        st = dlt_tensor_empty(st_g.ctx, dtypes[i], shape, 2, DLT_FORMAT_CONTIGUOUS, &t[i]);
        if (st == DLT_OK) st = dlt_tensor_fill(t[i], 3.0 + i);
    }
    if (st == DLT_OK) st = dlt_tensor_empty(st_g.ctx, DLT_F32, NULL, 0, DLT_FORMAT_CONTIGUOUS, &t[6]);
    if (st == DLT_OK) st = dlt_tensor_fill(t[6], -1.5);
    if (st == DLT_OK) st = dlt_tensor_empty(st_g.ctx, DLT_F32, empty, 2, DLT_FORMAT_CONTIGUOUS, &t[7]);
    if (st == DLT_OK) st = dlt_tensor_empty(st_g.ctx, DLT_F32, shape, 4, DLT_FORMAT_CHANNELS_LAST, &t[8]);
    if (st == DLT_OK) st = dlt_tensor_rand_uniform(t[8], -1, 1);
    if (st == DLT_OK) st = dlt_safetensors_save(path, names, t, 9);
    for (int i = 0; i < 9; i++) dlt_tensor_release(t[i]);
    return st;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <output directory>\n", argv[0]);
        return 2;
    }
    char err[1024], path[1024];
    if (dltfz_safetensors_init(err, sizeof err) != 0) {
        fprintf(stderr, "gen_seeds: %s\n", err);
        return 1;
    }
    int rc = 0;
    snprintf(path, sizeof path, "%s/seed-checkpoint.safetensors", argv[1]);
    if (copy_file(dltfz_safetensors_baseline(), path) != 0) rc = 1;
    snprintf(path, sizeof path, "%s/seed-checkpoint-momentum0.safetensors", argv[1]);
    if (copy_file(dltfz_safetensors_baseline0(), path) != 0) rc = 1;
    snprintf(path, sizeof path, "%s/seed-checkpoint-noscaler.safetensors", argv[1]);
    if (dlt_checkpoint_save(path, st_g.m, st_g.opt, NULL, 0, 0) != DLT_OK) rc = 1;
    snprintf(path, sizeof path, "%s/seed-module.safetensors", argv[1]);
    if (dlt_module_save(st_g.m, path) != DLT_OK) rc = 1;
    snprintf(path, sizeof path, "%s/seed-dtypes.safetensors", argv[1]);
    if (save_dtypes(path) != DLT_OK) rc = 1;
    snprintf(path, sizeof path, "%s/seed-empty.safetensors", argv[1]);
    if (dlt_safetensors_save(path, NULL, NULL, 0) != DLT_OK) rc = 1;
    if (rc) fprintf(stderr, "gen_seeds: %s\n", dlt_last_error());
    dltfz_safetensors_fini();
    return rc;
}
