/*
 * resnet_io.c - libdltrain's torchvision ResNet as a command-line tool, for
 * tests/interop/torch_interop.py (which compares it with torchvision on the same weights).
 *
 *   resnet_io [--cuda] [--depth 50] [--classes 1000] [--seed S] [--channels-last]
 *             [--save-init OUT.safetensors]          save the freshly initialised model
 *             [--load W.safetensors]                 load weights and buffers (strict)
 *             [--input X.f32 --shape N,C,H,W]        raw little-endian f32, NCHW order
 *             [--train]                              forward in training mode (default eval)
 *             [--output LOGITS.f32]                  raw f32 logits [N, classes]
 *             [--save-state OUT.safetensors]         the state after the forward
 *
 * fp32 throughout, TF32 off. Exit status 0 on success; errors go to stderr with the
 * library's message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dltrain.h"

static int fail(const char *what) {
    fprintf(stderr, "resnet_io: %s: %s\n", what, dlt_last_error());
    return 1;
}

static void usage(void) {
    fprintf(stderr,
            "usage: resnet_io [--cuda] [--depth D] [--classes K] [--seed S] [--channels-last]\n"
            "                 [--save-init OUT] [--load W] [--input X.f32 --shape N,C,H,W]\n"
            "                 [--train] [--output LOGITS.f32] [--save-state OUT]\n");
}

int main(int argc, char **argv) {
    int cuda = 0, train = 0, channels_last = 0;
    int32_t depth = 50;
    int64_t classes = 1000, shape[4] = {0, 0, 0, 0};
    uint64_t seed = 0;
    const char *save_init = NULL, *load = NULL, *input = NULL, *output = NULL, *save_state = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--cuda")) cuda = 1;
        else if (!strcmp(a, "--train")) train = 1;
        else if (!strcmp(a, "--channels-last")) channels_last = 1;
        else if (!strcmp(a, "--depth") && v) depth = atoi(v), i++;
        else if (!strcmp(a, "--classes") && v) classes = atoll(v), i++;
        else if (!strcmp(a, "--seed") && v) seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--save-init") && v) save_init = v, i++;
        else if (!strcmp(a, "--load") && v) load = v, i++;
        else if (!strcmp(a, "--input") && v) input = v, i++;
        else if (!strcmp(a, "--output") && v) output = v, i++;
        else if (!strcmp(a, "--save-state") && v) save_state = v, i++;
        else if (!strcmp(a, "--shape") && v) {
            if (sscanf(v, "%lld,%lld,%lld,%lld", (long long *)&shape[0], (long long *)&shape[1],
                       (long long *)&shape[2], (long long *)&shape[3]) != 4) {
                usage();
                return 2;
            }
            i++;
        } else {
            usage();
            return 2;
        }
    }
    if (input && (!output || shape[0] <= 0)) {
        fprintf(stderr, "resnet_io: --input needs --shape and --output\n");
        return 2;
    }

    dlt_ctx *ctx = NULL;
    if (dlt_ctx_create(cuda ? DLT_DEVICE_CUDA : DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx) != DLT_OK)
        return fail("context");
    if (dlt_ctx_set_allow_tf32(ctx, 0) != DLT_OK || dlt_ctx_set_seed(ctx, seed) != DLT_OK)
        return fail("context settings");
    dlt_module *m = NULL;
    if (dlt_resnet_create(ctx, depth, classes, &m) != DLT_OK) return fail("resnet");
    if (channels_last && dlt_module_set_format(m, DLT_FORMAT_CHANNELS_LAST) != DLT_OK)
        return fail("set_format");
    if (save_init && dlt_module_save(m, save_init) != DLT_OK) return fail(save_init);
    if (load && dlt_module_load(m, load) != DLT_OK) return fail(load);

    if (input) {
        const int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
        float *buf = malloc((size_t)n * sizeof *buf);
        FILE *f = fopen(input, "rb");
        if (!buf || !f || fread(buf, sizeof *buf, (size_t)n, f) != (size_t)n) {
            fprintf(stderr, "resnet_io: cannot read %lld floats from %s\n", (long long)n, input);
            return 1;
        }
        fclose(f);
        dlt_tensor *xh = NULL, *x = NULL, *y = NULL;
        if (dlt_tensor_from_host(ctx, DLT_F32, shape, 4, DLT_FORMAT_CONTIGUOUS, buf,
                                 (size_t)n * sizeof *buf, &xh) != DLT_OK)
            return fail("input");
        free(buf);
        if (dlt_tensor_to_format(xh, channels_last ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS,
                                 &x) != DLT_OK)
            return fail("input format");
        dlt_tensor_release(xh);
        if (dlt_grad_set_enabled(ctx, 0, NULL) != DLT_OK || dlt_module_set_training(m, train) != DLT_OK)
            return fail("mode");
        if (dlt_module_forward(m, x, &y) != DLT_OK) return fail("forward");
        const int64_t ny = dlt_tensor_numel(y);
        float *out = malloc((size_t)ny * sizeof *out);
        if (!out || dlt_tensor_copy_to_host(y, out, (size_t)ny * sizeof *out) != DLT_OK)
            return fail("logits");
        f = fopen(output, "wb");
        if (!f || fwrite(out, sizeof *out, (size_t)ny, f) != (size_t)ny || fclose(f) != 0) {
            fprintf(stderr, "resnet_io: cannot write %s\n", output);
            return 1;
        }
        free(out);
        dlt_tensor_release(x);
        dlt_tensor_release(y);
        printf("resnet_io: resnet%d(%lld) on %s, %s, %s mode: logits [%lld, %lld] -> %s\n", depth,
               (long long)classes, cuda ? "cuda" : "cpu", channels_last ? "channels-last" : "contiguous",
               train ? "train" : "eval", (long long)shape[0], (long long)classes, output);
    }
    if (save_state && dlt_module_save(m, save_state) != DLT_OK) return fail(save_state);
    dlt_module_destroy(m);
    dlt_ctx_destroy(ctx);
    return 0;
}
