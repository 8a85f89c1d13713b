/*
 * test_gpt.c - the GPT module family (include/dltrain/gpt.h) on the CPU against PyTorch:
 * tests/fixtures/gpt/ holds two tiny GPT-2-shaped models made by
 * tests/golden/gen_gpt_golden.py (PyTorch, float64): weights under nanoGPT's names, the
 * same weights in Hugging Face's layout, one batch, the logits, the loss, every gradient,
 * and the losses of three AdamW steps with nanoGPT's parameter groups. Checked here:
 *   - loading nanoGPT names; logits (rel 1e-5), loss (1e-5), gradients (rel 1e-4);
 *   - three AdamW steps give PyTorch's losses (1e-5);
 *   - a Hugging Face file (Conv1D transposed, mask buffers) loads to the same logits;
 *     our HF save reloads to the same weights, and its names and shapes are HF's;
 *   - a padded vocabulary (65 -> 72 columns) with the loss over the real 65;
 *   - state names, parameter counts, the tied head (one tensor), GPT-2's init statistics;
 *   - generation: deterministic for a seed, tokens in range, temperature/top_k limits; the
 *     KV cache gives the greedy tokens of running the whole window each step;
 *   - errors: a sequence longer than the block, float indices, a mismatched file (named,
 *     model unchanged), bad configurations;
 *   - memory: c_proj keeps the GELU's input for its backward, not its output (recomputed;
 *     the golden gradients above cover the values), read from the tape after a forward;
 *   - the fused MLP nodes (lib/ops/linear_gelu.c) through a backend table that fakes the fused
 *     GEMMs: the modules' loss and gradients bit for bit, with the fused GELU data gradient
 *     served, refused and absent;
 *   - the residual adds with the LayerNorm after them as one op: the two ops' loss and
 *     gradients bit for bit (a backend table without the fused entries), f32 and bf16;
 *   - the loss alone (no logits asked for): the gradient written in the forward gives the
 *     plain path's loss and gradients (bit for bit when dloss is a power of two).
 */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "harness.h"
#include "../lib/core/internal.h" /* the tape's nodes (fields only) */

static dlt_ctx *g_ctx;
static char g_dir[1024];

static const char *fixture(const char *name) {
    static char buf[1400];
    snprintf(buf, sizeof buf, "%.1000s/%.300s", g_dir, name);
    return buf;
}

static const char *tmp_dir(void) {
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

static dlt_gpt_config tiny_config(int bias) {
    dlt_gpt_config c;
    dlt_gpt_config_default(&c);
    c.n_layer = 2;
    c.n_embd = 16;
    c.block_size = 8;
    c.bias = bias;
    c.tied = 1;
    c.dropout = 0.0;
    if (bias) {
        c.n_head = 2;
        c.vocab_size = 29;
    } else {
        c.n_head = 4;
        c.vocab_size = 65;
        c.padded_vocab_size = 72;
    }
    return c;
}

static dlt_tensor *golden(dlt_safetensors *f, const char *name) {
    dlt_tensor *t = NULL;
    CHECK_OK(dlt_safetensors_get(f, g_ctx, name, &t));
    return t;
}

static double *host(const dlt_tensor *t) {
    dlt_tensor *f = NULL;
    CHECK_OK(dlt_tensor_cast(t, DLT_F32, &f));
    const int64_t n = dlt_tensor_numel(f);
    float *b = malloc((size_t)(n ? n : 1) * sizeof *b);
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    CHECK_OK(dlt_tensor_copy_to_host(f, b, (size_t)n * sizeof *b));
    for (int64_t i = 0; i < n; i++) d[i] = b[i];
    free(b);
    dlt_tensor_release(f);
    return d;
}

static double relerr(const dlt_tensor *a, const dlt_tensor *b) {
    REQUIRE(dlt_tensor_numel(a) == dlt_tensor_numel(b), "%lld vs %lld elements", (long long)dlt_tensor_numel(a),
            (long long)dlt_tensor_numel(b));
    double *x = host(a), *y = host(b), num = 0, den = 0;
    for (int64_t i = 0; i < dlt_tensor_numel(a); i++) {
        num += (x[i] - y[i]) * (x[i] - y[i]);
        den += y[i] * y[i];
    }
    free(x), free(y);
    return sqrt(num) / (sqrt(den) + 1e-30);
}

/* A model with the fixture's weights (nanoGPT names; the file omits the tied lm_head). */
static dlt_module *load_model(const char *prefix, int bias) {
    dlt_gpt_config c = tiny_config(bias);
    dlt_module *m = NULL;
    CHECK_OK(dlt_gpt_create(g_ctx, &c, &m));
    char name[256];
    snprintf(name, sizeof name, "%s.weights.safetensors", prefix);
    dlt_module_load_options o;
    dlt_module_load_options_default(&o);
    o.strict = 0;
    dlt_load_report *rep = NULL;
    CHECK_OK(dlt_module_load_ex(m, fixture(name), &o, &rep));
    CHECK(dlt_load_report_count(rep, DLT_LOAD_UNEXPECTED) == 0, "unexpected names in %s", name);
    CHECK(dlt_load_report_count(rep, DLT_LOAD_MISMATCHED) == 0, "mismatched names in %s", name);
    const int32_t miss = dlt_load_report_count(rep, DLT_LOAD_MISSING);
    CHECK(miss == 0 || (miss == 1 && !strcmp(dlt_load_report_name(rep, DLT_LOAD_MISSING, 0), "lm_head.weight")),
          "missing %d names, first %s", miss, miss ? dlt_load_report_name(rep, DLT_LOAD_MISSING, 0) : "");
    dlt_load_report_destroy(rep);
    return m;
}

static void check_against_golden(const char *prefix, int bias) {
    dlt_module *m = load_model(prefix, bias);
    char name[256];
    snprintf(name, sizeof name, "%s.golden.safetensors", prefix);
    dlt_safetensors *f = NULL;
    CHECK_OK(dlt_safetensors_open(fixture(name), &f));
    dlt_tensor *idx = golden(f, "idx"), *tgt = golden(f, "targets"), *want_logits = golden(f, "logits");
    dlt_tensor *want_loss = golden(f, "loss"), *logits = NULL, *loss = NULL;
    CHECK_OK(dlt_gpt_forward(m, idx, tgt, &logits, &loss));
    const double el = relerr(logits, want_logits);
    CHECK(el < 1e-5, "%s logits rel err %.3g", prefix, el);
    double lv = 0, wl = 0;
    CHECK_OK(dlt_tensor_item(loss, &lv));
    CHECK_OK(dlt_tensor_get(want_loss, 0, &wl));
    CHECK(fabs(lv - wl) < 1e-5, "%s loss %.7f, PyTorch %.7f", prefix, lv, wl);
    CHECK_OK(dlt_backward(loss, NULL));
    int32_t n = dlt_module_num_state(m), checked = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *sn = NULL;
        dlt_tensor *t = NULL;
        int32_t is_param = 0;
        CHECK_OK(dlt_module_state_entry(m, i, &sn, &t, &is_param));
        if (!is_param || !strcmp(sn, "lm_head.weight")) continue;
        char gname[300];
        snprintf(gname, sizeof gname, "grad.%s", sn);
        dlt_tensor *want = golden(f, gname);
        const double eg = relerr(dlt_tensor_grad(t), want);
        CHECK(eg < 1e-4, "%s gradient of %s rel err %.3g", prefix, sn, eg);
        dlt_tensor_release(want);
        checked++;
    }
    CHECK(checked >= 10, "only %d gradients checked", checked);
    /* three AdamW steps with nanoGPT's groups (decay on >= 2-D tensors) */
    dlt_tensor *params[64];
    int32_t np = 0;
    CHECK_OK(dlt_module_params(m, params, 64, &np));
    dlt_tensor *decay[64], *nodecay[64];
    int32_t nd = 0, nn = 0;
    for (int32_t i = 0; i < np; i++) {
        if (dlt_tensor_ndim(params[i]) >= 2) decay[nd++] = params[i];
        else nodecay[nn++] = params[i];
    }
    dlt_adamw_options o;
    dlt_adamw_options_default(&o);
    o.lr = 1e-3, o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8, o.weight_decay = 0.1;
    dlt_optimizer *opt = NULL;
    CHECK_OK(dlt_adamw_create_ex(decay, nd, &o, &opt));
    if (nn) CHECK_OK(dlt_optimizer_add_param_group(opt, nodecay, nn, 1e-3, 0.0));
    dlt_tensor *want_l = golden(f, "adamw_losses");
    double *wl4 = host(want_l);
    dlt_tensor_release(loss), loss = NULL;
    dlt_tensor_release(logits), logits = NULL;
    for (int step = 0; step < 4; step++) {
        CHECK_OK(dlt_optimizer_zero_grad(opt, 1));
        CHECK_OK(dlt_gpt_forward(m, idx, tgt, NULL, &loss));
        CHECK_OK(dlt_tensor_item(loss, &lv));
        CHECK(fabs(lv - wl4[step]) < 2e-5, "%s AdamW step %d: loss %.7f, PyTorch %.7f", prefix, step, lv, wl4[step]);
        if (step < 3) {
            CHECK_OK(dlt_backward(loss, NULL));
            CHECK_OK(dlt_optimizer_step(opt));
        }
        dlt_tensor_release(loss), loss = NULL;
    }
    free(wl4);
    dlt_tensor_release(want_l);
    dlt_optimizer_destroy(opt);
    dlt_tensor_release(idx), dlt_tensor_release(tgt), dlt_tensor_release(want_logits), dlt_tensor_release(want_loss);
    dlt_safetensors_close(f);
    dlt_module_destroy(m);
}

static void test_golden_bias(void) { check_against_golden("tiny_bias", 1); }
static void test_golden_nobias_padded(void) { check_against_golden("tiny_nobias", 0); }

static void test_hf_interop(void) {
    dlt_module *ref = load_model("tiny_bias", 1), *m = NULL, *back = NULL;
    dlt_gpt_config c = tiny_config(1);
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 99)); /* a different random init first */
    CHECK_OK(dlt_gpt_create(g_ctx, &c, &m));
    CHECK_OK(dlt_gpt_load_hf(m, fixture("tiny_bias.hf.safetensors")));
    dlt_safetensors *f = NULL;
    CHECK_OK(dlt_safetensors_open(fixture("tiny_bias.golden.safetensors"), &f));
    dlt_tensor *idx = golden(f, "idx"), *want = golden(f, "logits"), *lg = NULL;
    CHECK_OK(dlt_gpt_forward(m, idx, NULL, &lg, NULL));
    CHECK(relerr(lg, want) < 1e-5, "logits after a Hugging Face load");
    dlt_tensor_release(lg), lg = NULL;
    /* save as HF, check the file's layout, reload */
    char dir[1200];
    snprintf(dir, sizeof dir, "%.1000s/test_gpt_hf_%d", tmp_dir(), (int)getpid());
    CHECK_OK(dlt_gpt_save_hf(m, dir));
    char file[1300];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    dlt_safetensors *h = NULL;
    CHECK_OK(dlt_safetensors_open(file, &h));
    int64_t shape[4];
    int32_t nd = 0, dt = -1;
    CHECK_OK(dlt_safetensors_info(h, "transformer.h.0.attn.c_attn.weight", &dt, shape, 4, &nd));
    CHECK(nd == 2 && shape[0] == 16 && shape[1] == 48, "c_attn stored [in, out] = [16, 48], got [%lld, %lld]",
          (long long)shape[0], (long long)shape[1]);
    CHECK(dlt_safetensors_info(h, "lm_head.weight", NULL, NULL, 0, NULL) != DLT_OK, "a tied lm_head was written");
    dlt_clear_error();
    dlt_safetensors_close(h);
    CHECK_OK(dlt_gpt_from_hf(g_ctx, dir, &back));
    CHECK_OK(dlt_gpt_forward(back, idx, NULL, &lg, NULL));
    CHECK(relerr(lg, want) < 1e-6, "logits after a save/load through the Hugging Face layout");
    dlt_tensor_release(lg);
    /* a file of another shape: refused by name, the model unchanged */
    dlt_gpt_config c2 = c;
    c2.n_embd = 32;
    dlt_module *other = NULL;
    CHECK_OK(dlt_gpt_create(g_ctx, &c2, &other));
    CHECK_STATUS(dlt_gpt_load_hf(other, dir), DLT_ERR_SHAPE);
    CHECK(strstr(dlt_last_error(), "transformer.") != NULL, "the message names the tensor: %s", dlt_last_error());
    dlt_module_destroy(other);
    /* a file with a tensor this GPT lacks, or lacking one: refused by name, m unchanged */
    {
        dlt_safetensors *src = NULL;
        CHECK_OK(dlt_safetensors_open(fixture("tiny_bias.hf.safetensors"), &src));
        const int32_t nt = dlt_safetensors_num_tensors(src);
        const char *names[64];
        dlt_tensor *ts[64];
        for (int32_t i = 0; i < nt; i++) {
            names[i] = dlt_safetensors_name(src, i);
            ts[i] = golden(src, names[i]);
        }
        char extra[1300], missing[1300];
        snprintf(extra, sizeof extra, "%s/extra.safetensors", dir);
        snprintf(missing, sizeof missing, "%s/missing.safetensors", dir);
        names[nt] = "transformer.h.7.mlp.c_fc.weight";
        ts[nt] = dlt_tensor_retain(ts[0]);
        CHECK_OK(dlt_safetensors_save(extra, names, ts, nt + 1));
        CHECK_OK(dlt_safetensors_save(missing, names + 1, ts + 1, nt - 1)); /* without names[0] */
        dlt_tensor *before = NULL, *after = NULL;
        CHECK_OK(dlt_gpt_forward(m, idx, NULL, &before, NULL));
        CHECK_STATUS(dlt_gpt_load_hf(m, extra), DLT_ERR_FORMAT);
        CHECK(strstr(dlt_last_error(), "transformer.h.7.mlp.c_fc.weight") != NULL, "names the extra tensor: %s",
              dlt_last_error());
        CHECK_STATUS(dlt_gpt_load_hf(m, missing), DLT_ERR_FORMAT);
        CHECK(strstr(dlt_last_error(), names[0]) != NULL, "names the missing tensor: %s", dlt_last_error());
        CHECK_OK(dlt_gpt_forward(m, idx, NULL, &after, NULL));
        CHECK(relerr(after, before) == 0.0, "a failed load changed the model");
        dlt_tensor_release(before), dlt_tensor_release(after);
        for (int32_t i = 0; i <= nt; i++) dlt_tensor_release(ts[i]);
        dlt_safetensors_close(src);
    }
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    dlt_tensor_release(idx), dlt_tensor_release(want);
    dlt_safetensors_close(f);
    dlt_module_destroy(m), dlt_module_destroy(back), dlt_module_destroy(ref);
}

static void test_structure_and_init(void) {
    dlt_gpt_config c;
    CHECK_OK(dlt_gpt_config_preset("tiny", &c));
    c.bias = 1;
    dlt_module *m = NULL;
    CHECK_OK(dlt_gpt_create(g_ctx, &c, &m));
    const char *want[] = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                          "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight",
                          "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.weight",
                          "transformer.h.0.attn.c_proj.bias", "transformer.h.0.ln_2.weight",
                          "transformer.h.0.ln_2.bias", "transformer.h.0.mlp.c_fc.weight",
                          "transformer.h.0.mlp.c_fc.bias", "transformer.h.0.mlp.c_proj.weight",
                          "transformer.h.0.mlp.c_proj.bias"};
    for (int i = 0; i < 14; i++) {
        const char *sn = NULL;
        dlt_tensor *t = NULL;
        int32_t p = 0;
        CHECK_OK(dlt_module_state_entry(m, i, &sn, &t, &p));
        CHECK(!strcmp(sn, want[i]), "state %d is %s, expected %s", i, sn, want[i]);
    }
    dlt_tensor *wte = NULL, *head = NULL, *proj = NULL, *fc = NULL;
    CHECK_OK(dlt_module_find(m, "transformer.wte.weight", &wte));
    CHECK_OK(dlt_module_find(m, "lm_head.weight", &head));
    CHECK(wte == head, "the tied head is the embedding's tensor");
    /* GPT-2 init: std 0.02, residual projections 0.02/sqrt(2L) */
    CHECK_OK(dlt_module_find(m, "transformer.h.1.mlp.c_proj.weight", &proj));
    CHECK_OK(dlt_module_find(m, "transformer.h.1.mlp.c_fc.weight", &fc));
    const dlt_tensor *ts[2] = {fc, proj};
    const double stds[2] = {0.02, 0.02 / sqrt(4.0)};
    for (int k = 0; k < 2; k++) {
        double *v = host(ts[k]), s = 0, s2 = 0;
        const int64_t n = dlt_tensor_numel(ts[k]);
        for (int64_t i = 0; i < n; i++) s += v[i], s2 += v[i] * v[i];
        const double sd = sqrt(s2 / n - (s / n) * (s / n));
        CHECK(fabs(sd - stds[k]) < 0.15 * stds[k], "init std %.5f, expected %.5f", sd, stds[k]);
        free(v);
    }
    dlt_module_destroy(m);
}

/* After a forward, every 4C-wide input a linear saved is a GELU's saved input (the same
 * storage): no block keeps its GELU output. Under autocast bf16 and in f32. */
static void test_mlp_keeps_gelu_input(void) {
    for (int ac = 0; ac < 2; ac++) {
        dlt_gpt_config c;
        CHECK_OK(dlt_gpt_config_preset("tiny", &c));
        dlt_module *m = NULL;
        CHECK_OK(dlt_gpt_create(g_ctx, &c, &m));
        const int64_t s[2] = {2, 16};
        dlt_tensor *idx = NULL, *loss = NULL;
        CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I64, s, 2, 0, &idx));
        if (ac) CHECK_OK(dlt_autocast_begin(g_ctx, DLT_BF16));
        CHECK_OK(dlt_gpt_forward(m, idx, idx, NULL, &loss));
        if (ac) CHECK_OK(dlt_autocast_end(g_ctx));
        const dlt_storage *gelu_in[16];
        int ng = 0, checked = 0;
        for (int64_t i = 0; i < g_ctx->tape.n; i++) {
            const dlt_node *nd = g_ctx->tape.slots[i];
            if (nd && !strcmp(nd->name, "gelu") && nd->n_saved > 0 && ng < 16) gelu_in[ng++] = nd->saved[0]->storage;
        }
        for (int64_t i = 0; i < g_ctx->tape.n; i++) {
            const dlt_node *nd = g_ctx->tape.slots[i];
            if (!nd || strcmp(nd->name, "linear") || nd->n_saved < 1) continue;
            const dlt_tensor *x = nd->saved[0];
            if (x->ndim != 2 || x->shape[1] != 4 * c.n_embd) continue;
            int found = 0;
            for (int k = 0; k < ng; k++) found |= x->storage == gelu_in[k];
            CHECK(found, "%s: a linear saved a [%lld, %lld] input that is not a GELU's input (its output?)",
                  ac ? "bf16" : "f32", (long long)x->shape[0], (long long)x->shape[1]);
            checked++;
        }
        CHECK(ng == c.n_layer && checked == c.n_layer, "%d GELU nodes and %d c_proj inputs for %d blocks", ng, checked,
              c.n_layer);
        CHECK_OK(dlt_backward(loss, NULL)); /* the recomputing backward runs */
        dlt_tensor_release(loss), dlt_tensor_release(idx);
        dlt_module_destroy(m);
    }
}

static void test_generate(void) {
    dlt_module *m = load_model("tiny_nobias", 0);
    const int64_t prompt[3] = {1, 5, 9};
    int64_t a[3 + 12], b[3 + 12], g[3 + 12];
    CHECK_OK(dlt_gpt_generate(m, prompt, 3, 12, 1.0, 0, 7, a));
    CHECK_OK(dlt_gpt_generate(m, prompt, 3, 12, 1.0, 0, 7, b));
    CHECK(!memcmp(a, b, sizeof a), "the same seed gave two texts");
    for (int i = 0; i < 15; i++) CHECK(a[i] >= 0 && a[i] < 65, "token %lld outside the real vocabulary", (long long)a[i]);
    CHECK(a[0] == 1 && a[1] == 5 && a[2] == 9, "the prompt is kept");
    /* top_k = 1 is greedy: the argmax of the last position's logits, step by step */
    CHECK_OK(dlt_gpt_generate(m, prompt, 3, 12, 1.0, 1, 7, g));
    int64_t g2[15];
    CHECK_OK(dlt_gpt_generate(m, prompt, 3, 12, 0.5, 1, 123, g2));
    CHECK(!memcmp(g, g2, sizeof g), "greedy decoding depends on the seed or temperature");
    /* the KV cache (the prompt once, then one token at a time while the sequence fits the
     * block of 8; then the last 8 tokens again each step) against running the whole window
     * every step: the same greedy tokens, for prompts of 1, 3 and 8 tokens */
    const int64_t plen[3] = {1, 3, 8};
    for (int k = 0; k < 3; k++) {
        int64_t want[8 + 12], got[8 + 12];
        float row[72];
        for (int i = 0; i < plen[k]; i++) want[i] = (i * 11 + 4) % 65;
        CHECK_OK(dlt_gpt_generate(m, want, plen[k], 12, 1.0, 1, 3, got));
        for (int64_t n = plen[k]; n < plen[k] + 12; n++) {
            const int64_t Tc = n < 8 ? n : 8, s2[2] = {1, Tc};
            dlt_tensor *idx = NULL, *logits = NULL;
            CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, s2, 2, 0, want + n - Tc, (size_t)Tc * sizeof(int64_t), &idx));
            CHECK_OK(dlt_gpt_forward(m, idx, NULL, &logits, NULL));
            float *all = th_read_f32(logits);
            REQUIRE(all);
            memcpy(row, all + (Tc - 1) * 72, sizeof row);
            int64_t best = 0;
            for (int64_t v = 1; v < 65; v++) best = row[v] > row[best] ? v : best;
            want[n] = best;
            free(all), dlt_tensor_release(logits), dlt_tensor_release(idx);
        }
        CHECK(!memcmp(want, got, (size_t)(plen[k] + 12) * sizeof(int64_t)),
              "prompt of %lld: the cached generation differs from running the window each step", (long long)plen[k]);
    }
    CHECK_STATUS(dlt_gpt_generate(m, prompt, 3, 2, 0.0, 0, 1, g), DLT_ERR_INVALID_ARGUMENT);
    const int64_t bad[1] = {65};
    CHECK_STATUS(dlt_gpt_generate(m, bad, 1, 2, 1.0, 0, 1, g), DLT_ERR_INVALID_ARGUMENT);
    CHECK(dlt_module_is_training(m), "generation restored training mode");
    dlt_module_destroy(m);
}

/* The tied wte/lm_head weight under bf16 autocast: lm_head's bf16 gradient reaches the f32
 * leaf through the tape's queue of deferred fp32 accumulations, the embedding's is written
 * into the same buffer directly; both must land (a queued first write once overwrote the
 * embedding's part: wte's gradient was 62% off f32's). Every gradient against the f32 run. */
static void test_tied_weight_grad_under_autocast(void) {
    dlt_gpt_config c = tiny_config(1);
    c.n_embd = 64, c.block_size = 32;
    dlt_module *m[2] = {NULL, NULL};
    float *g[2][64] = {{NULL}};
    int32_t n_state = 0;
    for (int ac = 0; ac < 2; ac++) {
        CHECK_OK(dlt_ctx_set_seed(g_ctx, 5));
        CHECK_OK(dlt_gpt_create(g_ctx, &c, &m[ac]));
        const int64_t s[2] = {2, 32};
        int64_t tok[64];
        for (int i = 0; i < 64; i++) tok[i] = (i * 7 + 3) % c.vocab_size;
        dlt_tensor *idx = NULL, *loss = NULL;
        CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, s, 2, 0, tok, sizeof tok, &idx));
        if (ac) CHECK_OK(dlt_autocast_begin(g_ctx, DLT_BF16));
        CHECK_OK(dlt_gpt_forward(m[ac], idx, idx, NULL, &loss));
        if (ac) CHECK_OK(dlt_autocast_end(g_ctx));
        CHECK_OK(dlt_backward(loss, NULL));
        n_state = th_read_grads(m[ac], g[ac], 64);
        REQUIRE(n_state >= 0, "more than 64 state entries");
        dlt_tensor_release(loss), dlt_tensor_release(idx);
    }
    int checked = 0;
    for (int32_t i = 0; i < n_state; i++) {
        const char *name;
        dlt_tensor *t = NULL;
        CHECK_OK(dlt_module_state_entry(m[0], i, &name, &t, NULL));
        if (!g[0][i]) continue;
        REQUIRE(g[1][i], "%s: no gradient under autocast", name);
        const double e = th_rel_err_f(g[1][i], g[0][i], dlt_tensor_numel(t));
        CHECK(e <= 3e-2, "%s: bf16-autocast gradient %.3g from f32's", name, e);
        checked++;
    }
    CHECK(checked > 10, "%d gradients compared", checked);
    for (int ac = 0; ac < 2; ac++) {
        for (int32_t i = 0; i < n_state; i++) free(g[ac][i]);
        dlt_module_destroy(m[ac]);
    }
}

/* The fused MLP nodes (lib/ops/linear_gelu.c) on the CPU: "linear_gelu" (c_fc, whose GEMM also
 * gives the GELU) and "gelu_linear" (c_proj of the GELU, whose data-gradient GEMM applies the
 * GELU's derivative). A backend table whose linear_fwd_gelu and linear_bwd_data_gelu do what
 * the modules do (the GEMM into h, then the GELU; dg = dy w, then the GELU's backward kernel)
 * runs the nodes, their saved tensors and backwards here: they must give the unfused model's
 * loss and gradients bit for bit under bf16 autocast, with the fused data gradient served,
 * refused (*served = 0) or absent (NULL), the last two through the front door's fallback. */
static const dlt_backend *g_plain;
static dlt_status fake_linear_fwd_gelu(dlt_ctx *ctx, dlt_tensor *g, dlt_tensor *h, const dlt_tensor *x,
                                       const dlt_tensor *w, const dlt_tensor *b, int *served) {
    dlt_status st = g_plain->linear_fwd(ctx, h, x, w, b);
    if (st == DLT_OK) st = g_plain->unary(ctx, g, h, DLT_UN_GELU_TANH, 0.0);
    *served = st == DLT_OK;
    return st;
}
static dlt_status fake_linear_bwd_data_gelu(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy, const dlt_tensor *w,
                                            const dlt_tensor *h, int *served) {
    dlt_tensor *dg = NULL;
    dlt_status st = dlt_tensor_empty(ctx, h->dtype, h->shape, h->ndim, 0, &dg);
    if (st == DLT_OK) st = g_plain->linear_bwd_data(ctx, dg, dy, w);
    if (st == DLT_OK) st = g_plain->unary_bwd(ctx, dx, dg, h, NULL, DLT_UN_GELU_TANH, 0.0);
    dlt_tensor_release(dg);
    *served = st == DLT_OK;
    return st;
}
static dlt_status fake_linear_bwd_data_gelu_refuses(dlt_ctx *ctx, dlt_tensor *dx, const dlt_tensor *dy,
                                                    const dlt_tensor *w, const dlt_tensor *h, int *served) {
    (void)ctx, (void)dx, (void)dy, (void)w, (void)h;
    *served = 0;
    return DLT_OK;
}

static void test_fused_mlp_node_matches_modules(void) {
    /* 0: the modules (CPU table); 1: fused data gradient served; 2: refused; 3: absent */
    enum { NV = 4 };
    static const char *const what[NV] = {"modules", "DGELU served", "DGELU refused", "no DGELU entry"};
    dlt_ctx *ctx[NV] = {NULL};
    static dlt_backend fake[NV];
    dlt_gpt_config c = tiny_config(1);
    dlt_module *m[NV] = {NULL};
    double loss[NV] = {0};
    for (int k = 0; k < NV; k++) {
        REQUIRE(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx[k]) == DLT_OK);
        if (k > 0) {
            g_plain = ctx[k]->be;
            fake[k] = *g_plain;
            fake[k].linear_fwd_gelu = fake_linear_fwd_gelu;
            fake[k].linear_bwd_data_gelu = k == 1   ? fake_linear_bwd_data_gelu
                                           : k == 2 ? fake_linear_bwd_data_gelu_refuses
                                                    : NULL;
            ctx[k]->be = &fake[k];
        }
        CHECK_OK(dlt_ctx_set_seed(ctx[k], 9));
        CHECK_OK(dlt_gpt_create(ctx[k], &c, &m[k]));
        const int64_t s[2] = {4, 8}; /* tiny_config's block size is 8 */
        int64_t tok[32];
        for (int i = 0; i < 32; i++) tok[i] = (i * 5 + 1) % c.vocab_size;
        dlt_tensor *idx = NULL, *l = NULL;
        CHECK_OK(dlt_tensor_from_host(ctx[k], DLT_I64, s, 2, 0, tok, sizeof tok, &idx));
        CHECK_OK(dlt_autocast_begin(ctx[k], DLT_BF16));
        CHECK_OK(dlt_gpt_forward(m[k], idx, idx, NULL, &l));
        CHECK_OK(dlt_autocast_end(ctx[k]));
        /* the nodes each MLP records, and what they keep: c_fc x and w; c_proj h and w */
        int fc = 0, proj = 0, gelu = 0, saves = 1;
        for (int64_t i = 0; i < ctx[k]->tape.n; i++) {
            const dlt_node *nd = ctx[k]->tape.slots[i];
            if (!nd) continue;
            const int is_fc = !strcmp(nd->name, "linear_gelu"), is_proj = !strcmp(nd->name, "gelu_linear");
            fc += is_fc, proj += is_proj, gelu += !strcmp(nd->name, "gelu");
            if (is_fc) saves &= nd->n_saved == 2 && nd->saved[0]->shape[1] == c.n_embd;
            if (is_proj) saves &= nd->n_saved == 2 && nd->saved[0]->shape[1] == 4 * c.n_embd;
        }
        const int want = k ? c.n_layer : 0;
        CHECK(fc == want && proj == want && gelu == c.n_layer - want,
              "%s: %d linear_gelu, %d gelu_linear and %d gelu nodes for %d blocks", what[k], fc, proj, gelu, c.n_layer);
        CHECK(saves, "%s: a fused node saved other tensors than (x, w) for c_fc and (h, w) for c_proj", what[k]);
        CHECK_OK(dlt_backward(l, NULL));
        CHECK_OK(dlt_tensor_item(l, &loss[k]));
        CHECK(ctx[k]->served_gelu_dgrad == (k == 1 ? c.n_layer : 0), "%s: %lld fused data gradients for %d blocks",
              what[k], (long long)ctx[k]->served_gelu_dgrad, c.n_layer);
        dlt_tensor_release(l), dlt_tensor_release(idx);
    }
    for (int k = 1; k < NV; k++) {
        CHECK(loss[0] == loss[k], "loss: modules %.9g, %s %.9g", loss[0], what[k], loss[k]);
        int differ = 0, compared = 0;
        for (int32_t i = 0; i < dlt_module_num_state(m[0]); i++) {
            const char *name;
            dlt_tensor *a = NULL, *b = NULL;
            CHECK_OK(dlt_module_state_entry(m[0], i, &name, &a, NULL));
            CHECK_OK(dlt_module_state_entry(m[k], i, NULL, &b, NULL));
            const dlt_tensor *ga = dlt_tensor_grad(a), *gb = dlt_tensor_grad(b);
            if (!ga) continue;
            REQUIRE(gb, "%s: no gradient through the fused nodes (%s)", name, what[k]);
            float *fa = th_read_f32(ga), *fb = th_read_f32(gb);
            const int same = memcmp(fa, fb, (size_t)dlt_tensor_numel(ga) * sizeof(float)) == 0;
            CHECK(same, "%s: gradient differs between the modules and the fused nodes (%s)", name, what[k]);
            differ += !same, compared++;
            free(fa), free(fb);
        }
        CHECK(compared > 10 && differ == 0, "%s: %d of %d gradients differ", what[k], differ, compared);
    }
    for (int k = 0; k < NV; k++) {
        dlt_module_destroy(m[k]);
        dlt_ctx_destroy(ctx[k]);
    }
}

/* The residual adds with the LayerNorm after them as one op (dlt_add_layer_norm): every add
 * but the first block's ln_1 input (2 per block: ln_2's inside, the next ln_1 or ln_f across).
 * A backend table without the fused entries runs dlt_add and the LayerNorm instead: the loss
 * and every gradient must be the same bit for bit, in f32 and under bf16 autocast, after two
 * backwards (the second accumulates). */
static void test_fused_add_layer_norm_matches_ops(void) {
    dlt_gpt_config c = tiny_config(1);
    for (int ac = 0; ac < 2; ac++) {
        dlt_ctx *ctx[2] = {NULL, NULL};
        static dlt_backend plain[2];
        dlt_module *m[2] = {NULL, NULL};
        double loss[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            REQUIRE(dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx[k]) == DLT_OK);
            if (k == 1) {
                plain[ac] = *ctx[k]->be;
                plain[ac].add_ln_fwd = NULL;
                plain[ac].add_ln_bwd = NULL;
                ctx[k]->be = &plain[ac];
            }
            CHECK_OK(dlt_ctx_set_seed(ctx[k], 11));
            CHECK_OK(dlt_gpt_create(ctx[k], &c, &m[k]));
            const int64_t s[2] = {4, 8};
            int64_t tok[32];
            for (int i = 0; i < 32; i++) tok[i] = (i * 3 + 2) % c.vocab_size;
            dlt_tensor *idx = NULL;
            CHECK_OK(dlt_tensor_from_host(ctx[k], DLT_I64, s, 2, 0, tok, sizeof tok, &idx));
            for (int rep = 0; rep < 2; rep++) {
                dlt_tensor *l = NULL;
                if (ac) CHECK_OK(dlt_autocast_begin(ctx[k], DLT_BF16));
                CHECK_OK(dlt_gpt_forward(m[k], idx, idx, NULL, &l));
                if (ac) CHECK_OK(dlt_autocast_end(ctx[k]));
                int fused = 0, adds = 0;
                for (int64_t i = 0; i < ctx[k]->tape.n; i++) {
                    const dlt_node *nd = ctx[k]->tape.slots[i];
                    if (!nd) continue;
                    fused += !strcmp(nd->name, "add_layer_norm");
                    adds += !strcmp(nd->name, "add");
                }
                const int want = k ? 0 : 2 * c.n_layer;
                CHECK(fused == want, "%s, %s: %d add_layer_norm nodes for %d blocks (want %d), %d adds",
                      ac ? "bf16" : "f32", k ? "no fused entries" : "fused", fused, c.n_layer, want, adds);
                CHECK_OK(dlt_backward(l, NULL));
                CHECK_OK(dlt_tensor_item(l, &loss[k]));
                dlt_tensor_release(l);
            }
            dlt_tensor_release(idx);
        }
        CHECK(loss[0] == loss[1], "%s loss: fused %.9g, ops %.9g", ac ? "bf16" : "f32", loss[0], loss[1]);
        float *g[2][64] = {{NULL}};
        const int32_t ns = th_read_grads(m[0], g[0], 64);
        REQUIRE(th_read_grads(m[1], g[1], 64) == ns && ns > 0, "state counts differ");
        int differ = 0, compared = 0;
        for (int32_t i = 0; i < ns; i++) {
            if (!g[0][i]) continue;
            const char *name;
            dlt_tensor *t = NULL;
            CHECK_OK(dlt_module_state_entry(m[0], i, &name, &t, NULL));
            REQUIRE(g[1][i], "%s: no gradient without the fused entries", name);
            const int same = memcmp(g[0][i], g[1][i], (size_t)dlt_tensor_numel(t) * sizeof(float)) == 0;
            CHECK(same, "%s (%s): gradient differs between the fused op and the two ops", name, ac ? "bf16" : "f32");
            differ += !same, compared++;
        }
        CHECK(compared > 10 && differ == 0, "%d of %d gradients differ", differ, compared);
        for (int k = 0; k < 2; k++) {
            for (int32_t i = 0; i < ns; i++) free(g[k][i]);
            dlt_module_destroy(m[k]);
            dlt_ctx_destroy(ctx[k]);
        }
    }
}

/* dlt_gpt_forward without logits: the loss takes the logits' memory for their gradient in
 * the forward (lib/ops/cross_entropy.c, "consume"), and the backward only scales it. Against
 * the same model asked for its logits too (the plain forward and backward): the loss and
 * every gradient bit for bit when dloss is 1 or a power of two, within one rounding of the
 * gradient's dtype otherwise (0.3, as a loss divided for accumulation); in f32 and under bf16
 * autocast; the node says which path ran, so the comparison is never of a path with itself.
 * Without grad mode the loss alone is the plain forward's. */
static void test_loss_alone_takes_the_gradient_path(void) {
    dlt_gpt_config c = tiny_config(0); /* the padded vocabulary: 65 classes of 72 columns */
    const double scales[3] = {1.0, 0.25, 0.3};
    for (int ac = 0; ac < 2; ac++)
        for (int si = 0; si < 3; si++) {
            dlt_module *m[2] = {NULL, NULL};
            float *g[2][64] = {{NULL}};
            float lv[2] = {0, 0};
            int32_t n_state = 0;
            for (int alone = 0; alone < 2; alone++) {
                CHECK_OK(dlt_ctx_set_seed(g_ctx, 11));
                CHECK_OK(dlt_gpt_create(g_ctx, &c, &m[alone]));
                const int64_t s[2] = {2, 8};
                int64_t tok[16], tgt[16];
                for (int i = 0; i < 16; i++) tok[i] = (i * 5 + 1) % c.vocab_size, tgt[i] = (i * 3 + 2) % c.vocab_size;
                tgt[5] = -1; /* ignored: the mean is over 15 */
                dlt_tensor *idx = NULL, *y = NULL, *logits = NULL, *loss = NULL, *scaled = NULL;
                CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, s, 2, 0, tok, sizeof tok, &idx));
                CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, s, 2, 0, tgt, sizeof tgt, &y));
                if (ac) CHECK_OK(dlt_autocast_begin(g_ctx, DLT_BF16));
                CHECK_OK(dlt_gpt_forward(m[alone], idx, y, alone ? NULL : &logits, &loss));
                if (ac) CHECK_OK(dlt_autocast_end(g_ctx));
                const dlt_node *n = loss->grad_fn;
                REQUIRE(n && !strcmp(n->name, "cross_entropy"), "the loss comes from the cross-entropy node");
                CHECK(DLT_NODE_ATTR(n, dlt_ce_params)->grad_in_logits == alone,
                      "%s, dloss %g: gradient in the forward %d, want %d", ac ? "bf16" : "f32", scales[si],
                      DLT_NODE_ATTR(n, dlt_ce_params)->grad_in_logits, alone);
                CHECK_OK(dlt_tensor_copy_to_host(loss, &lv[alone], sizeof(float)));
                dlt_tensor_release(logits);
                if (scales[si] != 1.0) CHECK_OK(dlt_mul_scalar(loss, NULL, scales[si], &scaled));
                CHECK_OK(dlt_backward(scaled ? scaled : loss, NULL));
                n_state = th_read_grads(m[alone], g[alone], 64);
                REQUIRE(n_state >= 0, "more than 64 state entries");
                dlt_tensor_release(scaled), dlt_tensor_release(loss), dlt_tensor_release(y), dlt_tensor_release(idx);
            }
            CHECK(!memcmp(&lv[0], &lv[1], sizeof(float)), "%s: loss %.9g alone, %.9g with the logits",
                  ac ? "bf16" : "f32", (double)lv[1], (double)lv[0]);
            const int exact = scales[si] != 0.3;
            int checked = 0;
            for (int32_t i = 0; i < n_state; i++) {
                const char *name;
                dlt_tensor *t = NULL;
                CHECK_OK(dlt_module_state_entry(m[0], i, &name, &t, NULL));
                if (!g[0][i]) continue;
                REQUIRE(g[1][i], "%s: no gradient", name);
                const int64_t ne = dlt_tensor_numel(t);
                if (exact) {
                    CHECK(!memcmp(g[0][i], g[1][i], (size_t)ne * sizeof(float)), "%s, %s, dloss %g: gradients differ",
                          name, ac ? "bf16" : "f32", scales[si]);
                } else {
                    const double e = th_rel_err_f(g[1][i], g[0][i], ne);
                    CHECK(e <= (ac ? 8e-3 : 1e-6), "%s, %s, dloss 0.3: gradient %.3g from the plain path's", name,
                          ac ? "bf16" : "f32", e);
                }
                checked++;
            }
            CHECK(checked > 10, "%d gradients compared", checked);
            for (int k = 0; k < 2; k++) {
                for (int32_t i = 0; i < n_state; i++) free(g[k][i]);
                dlt_module_destroy(m[k]);
            }
        }
    /* no grad mode: nothing to write; the plain loss */
    dlt_module *m = NULL;
    CHECK_OK(dlt_ctx_set_seed(g_ctx, 11));
    CHECK_OK(dlt_gpt_create(g_ctx, &c, &m));
    const int64_t s[2] = {1, 8};
    int64_t tok[8];
    for (int i = 0; i < 8; i++) tok[i] = (i * 5 + 1) % c.vocab_size;
    dlt_tensor *idx = NULL, *l1 = NULL, *l2 = NULL;
    CHECK_OK(dlt_tensor_from_host(g_ctx, DLT_I64, s, 2, 0, tok, sizeof tok, &idx));
    int32_t prev = 1;
    CHECK_OK(dlt_grad_set_enabled(g_ctx, 0, &prev));
    CHECK_OK(dlt_gpt_forward(m, idx, idx, NULL, &l1));
    CHECK_OK(dlt_grad_set_enabled(g_ctx, prev, NULL));
    CHECK_OK(dlt_gpt_forward(m, idx, idx, NULL, &l2));
    CHECK(!l1->grad_fn && l2->grad_fn, "no node without grad mode, one with it");
    CHECK(th_diff_bits(l1, l2) == 0, "the loss without grad mode is the loss with it");
    dlt_tensor_release(l1), dlt_tensor_release(l2), dlt_tensor_release(idx);
    dlt_module_destroy(m);
}

static void test_errors(void) {
    dlt_gpt_config c = tiny_config(0);
    dlt_module *m = NULL;
    CHECK_OK(dlt_gpt_create(g_ctx, &c, &m));
    const int64_t s9[2] = {1, 9}, s4[2] = {1, 4};
    dlt_tensor *idx9 = NULL, *idxf = NULL, *out = (dlt_tensor *)0x1;
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_I64, s9, 2, 0, &idx9));
    CHECK_OK(dlt_tensor_zeros(g_ctx, DLT_F32, s4, 2, 0, &idxf));
    CHECK_STATUS(dlt_gpt_forward(m, idx9, NULL, &out, NULL), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_gpt_forward(m, idxf, NULL, &out, NULL), DLT_ERR_SHAPE);
    CHECK_STATUS(dlt_gpt_forward(m, idx9, NULL, NULL, NULL), DLT_ERR_NULL_POINTER);
    CHECK(out == (dlt_tensor *)0x1, "out-pointer untouched on failure");
    dlt_gpt_config bad = c;
    bad.n_head = 3;
    dlt_module *x = NULL;
    CHECK_STATUS(dlt_gpt_create(g_ctx, &bad, &x), DLT_ERR_INVALID_ARGUMENT);
    bad = c;
    bad.padded_vocab_size = 10;
    CHECK_STATUS(dlt_gpt_create(g_ctx, &bad, &x), DLT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dlt_gpt_config_preset("gpt5", &bad), DLT_ERR_INVALID_ARGUMENT);
    dlt_tensor_release(idx9), dlt_tensor_release(idxf);
    dlt_module_destroy(m);
}

int main(void) {
    const char *root = getenv("DLT_SOURCE_ROOT");
    snprintf(g_dir, sizeof g_dir, "%s/tests/fixtures/gpt", root ? root : ".");
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &g_ctx) != DLT_OK) {
        printf("Bail out! %s\n", dlt_last_error());
        return 1;
    }
    RUN(test_golden_bias);
    RUN(test_golden_nobias_padded);
    RUN(test_hf_interop);
    RUN(test_structure_and_init);
    RUN(test_mlp_keeps_gelu_input);
    RUN(test_generate);
    RUN(test_tied_weight_grad_under_autocast);
    RUN(test_fused_mlp_node_matches_modules);
    RUN(test_fused_add_layer_norm_matches_ops);
    RUN(test_loss_alone_takes_the_gradient_path);
    RUN(test_errors);
    dlt_ctx_destroy(g_ctx);
    return th_done();
}
