/*
 * bench_attention.c - times dlt_scaled_dot_product_attention forward and backward for each
 * attention path (--sdp: cudnn, flash, math; dlt_ctx_set_cudnn_sdp / set_flash_sdp) the way
 * scripts/bench_attention_torch.py times PyTorch's F.scaled_dot_product_attention per
 * backend, so that scripts/bench_attention_vs_torch.sh can print them side by side.
 *
 *   bench_attention [--batch 16] [--heads 12] [--context 1024] [--head-dim 64]
 *                   [--amp bf16|fp16] [--causal 1] [--sdp cudnn,flash,math] [--steps 20]
 *                   [--warmup 3] [--device cuda|cpu]
 *
 * q, k, v are leaves (requires_grad) drawn from N(0, 1), dO from N(0, 1), as in the torch
 * script; every step runs the forward, then dlt_backward with dO, each timed with device
 * events, and the median step counts. The gradients accumulate into q, k, v's .grad as in
 * PyTorch's loop. FLOP counts are the two (forward) and five (backward) matmuls, halved
 * when causal (FlashAttention's convention).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dltrain.h>

#include "cli.h"

#define PROG "bench_attention"

static const char *const SDP_NAMES[] = {"cudnn", "flash", "math", NULL};
static const char *const AMP_NAMES[] = {"bf16", "fp16", NULL};
static const int32_t AMP_VALUES[] = {DLT_BF16, DLT_F16};
static const char *const DEVICE_NAMES[] = {"cuda", "cpu", NULL};
static const int32_t DEVICE_VALUES[] = {DLT_DEVICE_CUDA, DLT_DEVICE_CPU};

static int parse_sdp_list(const char *arg, void *dst) {
    int32_t *mask = dst;
    *mask = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int i = 0; SDP_NAMES[i]; i++)
            if (strcmp(tok, SDP_NAMES[i]) == 0) *mask |= 1 << i, found = 1;
        if (!found) return 1;
    }
    return *mask ? 0 : 1;
}

/* the library's notes (the cuDNN plans built, or why none was) as comments above the table */
static void print_log(int32_t level, const char *msg, void *user) {
    (void)level, (void)user;
    printf("# %s\n", msg);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct timing {
    double fwd_ms, bwd_ms;
} timing;

/* One path: fresh tensors, `warmup` untimed steps, `steps` timed ones; medians. */
static dlt_status run_path(dlt_ctx *ctx, int path, const int64_t shape[4], int32_t dtype, int32_t causal,
                           int64_t steps, int64_t warmup, timing *out) {
    dlt_status st = dlt_ctx_set_cudnn_sdp(ctx, path == 0);
    if (st == DLT_OK) st = dlt_ctx_set_flash_sdp(ctx, path <= 1);
    dlt_tensor *qkv[3] = {NULL, NULL, NULL}, *dout = NULL;
    dlt_event *ev[3] = {NULL, NULL, NULL};
    double *fwd = calloc((size_t)steps, sizeof *fwd), *bwd = calloc((size_t)steps, sizeof *bwd);
    if (!fwd || !bwd) st = DLT_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < 3 && st == DLT_OK; i++) {
        st = dlt_tensor_empty(ctx, dtype, shape, 4, DLT_FORMAT_CONTIGUOUS, &qkv[i]);
        if (st == DLT_OK) st = dlt_tensor_rand_normal(qkv[i], 0.0, 1.0);
        if (st == DLT_OK) st = dlt_tensor_set_requires_grad(qkv[i], 1);
    }
    if (st == DLT_OK) st = dlt_tensor_empty(ctx, dtype, shape, 4, DLT_FORMAT_CONTIGUOUS, &dout);
    if (st == DLT_OK) st = dlt_tensor_rand_normal(dout, 0.0, 1.0);
    for (int i = 0; i < 3 && st == DLT_OK; i++) st = dlt_event_create(ctx, &ev[i]);
    for (int64_t s = 0; s < warmup + steps && st == DLT_OK; s++) {
        dlt_tensor *o = NULL;
        st = dlt_event_record(ev[0]);
        if (st == DLT_OK) st = dlt_scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], causal, 0.0, 0.0, &o);
        if (st == DLT_OK) st = dlt_event_record(ev[1]);
        if (st == DLT_OK) st = dlt_backward(o, dout);
        if (st == DLT_OK) st = dlt_event_record(ev[2]);
        dlt_tensor_release(o);
        if (st == DLT_OK && s >= warmup) {
            st = dlt_event_elapsed_ms(ev[0], ev[1], &fwd[s - warmup]); /* waits for the step */
            if (st == DLT_OK) st = dlt_event_elapsed_ms(ev[1], ev[2], &bwd[s - warmup]);
        }
    }
    if (st == DLT_OK) {
        qsort(fwd, (size_t)steps, sizeof *fwd, cmp_d);
        qsort(bwd, (size_t)steps, sizeof *bwd, cmp_d);
        out->fwd_ms = fwd[steps / 2];
        out->bwd_ms = bwd[steps / 2];
    }
    for (int i = 0; i < 3; i++) dlt_event_destroy(ev[i]), dlt_tensor_release(qkv[i]);
    dlt_tensor_release(dout);
    free(fwd);
    free(bwd);
    return st;
}

int main(int argc, char **argv) {
    int64_t batch = 16, heads = 12, context = 1024, head_dim = 64, causal = 1, steps = 20, warmup = 3;
    int32_t amp = DLT_BF16, device = -1, paths = 7;
    cli_option opts[] = {
        {"batch", CLI_INT, &batch, .lo = 1, .hi = 65536, .metavar = "B", .help = "batch (16)"},
        {"heads", CLI_INT, &heads, .lo = 1, .hi = 1024, .metavar = "H", .help = "heads (12)"},
        {"context", CLI_INT, &context, .lo = 1, .hi = 1048576, .metavar = "T", .help = "sequence length (1024)"},
        {"head-dim", CLI_INT, &head_dim, .lo = 1, .hi = 256, .metavar = "D", .help = "head dim (64)"},
        {"amp", CLI_CHOICE, &amp, .choices = AMP_NAMES, .values = AMP_VALUES, .help = "dtype (bf16)"},
        {"causal", CLI_INT, &causal, .lo = 0, .hi = 1, .metavar = "0|1", .help = "causal mask (1)"},
        {"sdp", CLI_CUSTOM, &paths, .parse = parse_sdp_list, .metavar = "P,P",
         .help = "attention paths to time: cudnn, flash, math (all)"},
        {"steps", CLI_INT, &steps, .lo = 1, .hi = 100000, .metavar = "N", .help = "timed steps; the median counts (20)"},
        {"warmup", CLI_INT, &warmup, .lo = 1, .hi = 100000, .metavar = "N", .help = "steps before timing (3)"},
        {"device", CLI_CHOICE, &device, .choices = DEVICE_NAMES, .values = DEVICE_VALUES,
         .help = "(cuda when present)"},
    };
    int rc = cli_parse(argc, argv, PROG, opts, (int)(sizeof opts / sizeof opts[0]));
    if (rc) return rc == 1 ? 0 : rc;
    int32_t ngpu = 0;
    if (dlt_cuda_device_count(&ngpu) != DLT_OK) ngpu = 0;
    if (device < 0) device = ngpu > 0 ? DLT_DEVICE_CUDA : DLT_DEVICE_CPU;
    dlt_set_log_callback(print_log, NULL);
    dlt_ctx *ctx = NULL;
    if (dlt_ctx_create(device, 0, DLT_ABI_VERSION, &ctx) != DLT_OK)
        return fprintf(stderr, "%s: %s\n", PROG, dlt_last_error()), 1;
    char name[256] = "cpu";
    if (dlt_ctx_device_name(ctx, name, sizeof name) != DLT_OK) snprintf(name, sizeof name, "?");
    const int64_t shape[4] = {batch, heads, context, head_dim};
    /* forward: Q K^T and P V; backward: recomputed Q K^T, dO V^T, P^T dO, dS K, dS^T Q */
    const double mm = 2.0 * (double)(batch * heads) * (double)context * (double)context * (double)head_dim;
    const double fwd_flop = 2.0 * mm * (causal ? 0.5 : 1.0), bwd_flop = 5.0 * mm * (causal ? 0.5 : 1.0);
    printf("# %s on %s: B=%lld H=%lld T=%lld D=%lld %s%s, median of %lld steps after %lld\n", PROG, name,
           (long long)batch, (long long)heads, (long long)context, (long long)head_dim, AMP_NAMES[amp == DLT_F16],
           causal ? " causal" : "", (long long)steps, (long long)warmup);
    printf("| impl | path | fwd ms | bwd ms | total ms | fwd TFLOP/s | bwd TFLOP/s |\n|---|---|---|---|---|---|---|\n");
    int failed = 0;
    for (int path = 0; SDP_NAMES[path]; path++) {
        if (!(paths & (1 << path))) continue;
        timing t = {0, 0};
        dlt_status st = run_path(ctx, path, shape, amp, (int32_t)causal, steps, warmup, &t);
        if (st != DLT_OK) {
            printf("| libdltrain | %s | failed: %s | | | | |\n", SDP_NAMES[path], dlt_last_error());
            failed = 1;
            continue;
        }
        printf("| libdltrain | %s | %.3f | %.3f | %.3f | %.1f | %.1f |\n", SDP_NAMES[path], t.fwd_ms, t.bwd_ms,
               t.fwd_ms + t.bwd_ms, fwd_flop / (t.fwd_ms * 1e9), bwd_flop / (t.bwd_ms * 1e9));
    }
    dlt_ctx_destroy(ctx);
    return failed;
}
