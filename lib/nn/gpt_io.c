/*
 * gpt_io.c - Hugging Face GPT-2 checkpoints for the GPT module (include/dltrain/gpt.h).
 *
 * transformers' GPT2LMHeadModel stores the same names as nanoGPT (prefixed "transformer."
 * in GPT2LMHeadModel files, bare in GPT2Model files), but its four projections are Conv1D
 * modules whose weight is [in, out]: attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj (the
 * transpose of nn.Linear's [out, in]). The tied lm_head is not stored (or stored equal to
 * wte), and older files carry the causal-mask buffers attn.bias and attn.masked_bias, which
 * are not parameters. A padded vocabulary takes the file's vocab_size rows of wte and keeps
 * its extra rows at zero.
 *
 * Loading checks every name, dtype and shape against the model before writing anything, so
 * a failure leaves the model unchanged; the values are read through one open file handle.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../../include/dltrain/gpt.h"
#include "../../include/dltrain/io.h"
#include "../core/files.h"
#include "../io/io_internal.h"
#include "nn_internal.h"

static int is_conv1d(const char *name) {
    static const char *const suffixes[] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                                           "mlp.c_proj.weight"};
    const size_t n = strlen(name);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        const size_t k = strlen(suffixes[i]);
        if (n >= k && !strcmp(name + n - k, suffixes[i])) return 1;
    }
    return 0;
}

/* A mask buffer of an older file: "...attn.bias" or "...attn.masked_bias" (not c_attn's). */
static int is_mask_buffer(const char *name) {
    const size_t n = strlen(name);
    return (n >= 10 && !strcmp(name + n - 10, ".attn.bias")) || (n >= 17 && !strcmp(name + n - 17, ".attn.masked_bias"));
}

static dlt_status path_of(const char *path, char *buf, size_t n) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if ((size_t)snprintf(buf, n, "%s/model.safetensors", path) >= n)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, "dlt_gpt_load_hf", "path too long: %s", path);
    } else {
        if ((size_t)snprintf(buf, n, "%s", path) >= n)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, "dlt_gpt_load_hf", "path too long: %s", path);
    }
    return DLT_OK;
}

dlt_status dlt_gpt_load_hf(dlt_module *gpt, const char *path) {
    static const char *F = "dlt_gpt_load_hf";
    DLT_NULL_CHECK(gpt, F);
    DLT_NULL_CHECK(path, F);
    if (!dlt__is_gpt(gpt)) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the module is a %s, not a gpt", gpt->kind_name);
    dlt_gpt_config cfg;
    dlt_gpt_config_default(&cfg);
    DLT_CHECK(dlt_gpt_get_config(gpt, &cfg));
    char file[4096];
    DLT_CHECK(path_of(path, file, sizeof file));
    dlt_safetensors *f = NULL;
    DLT_CHECK(dlt_safetensors_open(file, &f));
    DLT_CHECK(dlt__module_flat(gpt, F));
    const int32_t n_entries = gpt->n_flat;
    dlt_tensor **vals = calloc((size_t)(n_entries > 0 ? n_entries : 1), sizeof *vals);
    dlt_status st = vals ? DLT_OK : dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate");
    /* which prefix does the file use? */
    int prefixed = 0;
    for (int32_t i = 0; i < dlt_safetensors_num_tensors(f); i++)
        if (!strncmp(dlt_safetensors_name(f, i), "transformer.", 12)) prefixed = 1;
    dlt_tensor *wte_w = NULL;
    for (int32_t i = 0; st == DLT_OK && i < n_entries; i++) {
        const dlt__state_entry *e = &gpt->flat[i];
        const char *name = e->name;
        const int is_head = !strcmp(name, "lm_head.weight");
        if (!strcmp(name, "transformer.wte.weight")) wte_w = e->tensor;
        if (is_head && cfg.tied) continue; /* the embedding's tensor */
        const char *hf = prefixed || is_head ? name : (strncmp(name, "transformer.", 12) ? name : name + 12);
        int32_t dt = -1, nd = 0;
        int64_t shape[8];
        st = dlt_safetensors_info(f, hf, &dt, shape, 8, &nd);
        if (st != DLT_OK) {
            st = dlt__err(DLT_ERR_FORMAT, F, "%s: the model's %s (as '%s') is not in the file", file, name, hf);
            break;
        }
        const dlt_tensor *t = e->tensor;
        const int conv = is_conv1d(name);
        int ok = nd == t->ndim;
        for (int32_t d = 0; ok && d < nd; d++) {
            const int64_t want = conv ? t->shape[t->ndim - 1 - d] : t->shape[d];
            ok = shape[d] == want || (!strcmp(name, "transformer.wte.weight") && d == 0 && shape[0] == cfg.vocab_size &&
                                      t->shape[0] >= shape[0]);
        }
        if (!ok) {
            char b[96];
            st = dlt__err(DLT_ERR_SHAPE, F, "%s: '%s' has %d dimensions [%lld, %lld, ...] but the model's %s is %s%s", file,
                          hf, nd, (long long)(nd > 0 ? shape[0] : 0), (long long)(nd > 1 ? shape[1] : 0), name,
                          dlt__shape_str(t, b, sizeof b), conv ? " (a Conv1D weight is stored [in, out])" : "");
            break;
        }
        if (dt < 0 || !dlt__is_float(dt)) {
            st = dlt__err(DLT_ERR_DTYPE, F, "%s: '%s' has dtype %s, not a float dtype libdltrain reads", file, hf,
                          dlt_safetensors_dtype_name(f, hf));
            break;
        }
        dlt_tensor *raw = NULL;
        st = dlt_safetensors_get(f, gpt->ctx, hf, &raw);
        if (st == DLT_OK && conv) {
            dlt_tensor *tr = NULL;
            st = dlt_transpose(raw, 0, 1, &tr);
            dlt_tensor_release(raw);
            raw = tr;
        }
        if (st == DLT_OK && raw->dtype != t->dtype) {
            dlt_tensor *c = NULL;
            st = dlt_tensor_cast(raw, t->dtype, &c);
            dlt_tensor_release(raw);
            raw = c;
        }
        vals[i] = raw;
    }
    /* every other tensor of the file must be a mask buffer (or the tied head) */
    for (int32_t j = 0; st == DLT_OK && j < dlt_safetensors_num_tensors(f); j++) {
        const char *nm = dlt_safetensors_name(f, j);
        if (is_mask_buffer(nm) || (cfg.tied && !strcmp(nm, "lm_head.weight"))) continue;
        int known = 0;
        for (int32_t i = 0; !known && i < n_entries; i++) {
            const char *mn = gpt->flat[i].name;
            known = !strcmp(nm, mn) || (!prefixed && !strncmp(mn, "transformer.", 12) && !strcmp(nm, mn + 12));
        }
        if (!known)
            st = dlt__err(DLT_ERR_FORMAT, F, "%s holds '%s', which this GPT does not have (n_layer %d, bias %d)",
                          file, nm, cfg.n_layer, cfg.bias);
    }
    /* all checked: write */
    int32_t prev = 1;
    if (st == DLT_OK) st = dlt_grad_set_enabled(gpt->ctx, 0, &prev);
    for (int32_t i = 0; st == DLT_OK && i < n_entries; i++) {
        if (!vals[i]) continue;
        dlt_tensor *dst = gpt->flat[i].tensor;
        if (dst == wte_w && vals[i]->shape[0] < dst->shape[0]) { /* padded vocabulary */
            dlt_tensor *rows = NULL;
            st = dlt_tensor_fill(dst, 0.0);
            if (st == DLT_OK) st = dlt_narrow(dst, 0, 0, vals[i]->shape[0], &rows);
            if (st == DLT_OK) st = dlt_tensor_copy(rows, vals[i]);
            dlt_tensor_release(rows);
        } else {
            st = dlt_tensor_copy(dst, vals[i]);
        }
    }
    {
        const dlt_status s2 = dlt_grad_set_enabled(gpt->ctx, prev, NULL);
        if (st == DLT_OK) st = s2;
    }
    for (int32_t i = 0; vals && i < n_entries; i++) dlt_tensor_release(vals[i]);
    free(vals);
    dlt_safetensors_close(f);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

/* ---- saving ---- */

static char *config_json(const dlt_gpt_config *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    if (arch) cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    cJSON_AddNumberToObject(j, "n_positions", (double)c->block_size);
    cJSON_AddNumberToObject(j, "n_ctx", (double)c->block_size);
    cJSON_AddNumberToObject(j, "n_embd", (double)c->n_embd);
    cJSON_AddNumberToObject(j, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(j, "n_head", c->n_head);
    cJSON_AddNullToObject(j, "n_inner");
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(j, "resid_pdrop", c->dropout);
    cJSON_AddNumberToObject(j, "embd_pdrop", c->dropout);
    cJSON_AddNumberToObject(j, "attn_pdrop", c->dropout);
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tied != 0);
    cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
    cJSON_AddNumberToObject(j, "bos_token_id", 50256);
    cJSON_AddNumberToObject(j, "eos_token_id", 50256);
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    return s;
}

dlt_status dlt_gpt_save_hf(const dlt_module *gpt, const char *dir) {
    static const char *F = "dlt_gpt_save_hf";
    DLT_NULL_CHECK(gpt, F);
    DLT_NULL_CHECK(dir, F);
    if (!dlt__is_gpt(gpt)) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the module is a %s, not a gpt", gpt->kind_name);
    dlt_gpt_config cfg;
    dlt_gpt_config_default(&cfg);
    DLT_CHECK(dlt_gpt_get_config(gpt, &cfg));
    if (!cfg.bias)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "Hugging Face's GPT-2 has biases everywhere; this GPT has none "
                                                  "(save it with dlt_module_save under nanoGPT's names)");
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return dlt__err(DLT_ERR_IO, F, "cannot create %s: %s", dir, strerror(errno));
    dlt_module *m = (dlt_module *)gpt;
    DLT_CHECK(dlt__module_flat(m, F));
    const int32_t n = m->n_flat;
    const char **names = calloc((size_t)n + 1, sizeof *names);
    dlt_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    int32_t k = 0;
    dlt_status st = names && ts ? DLT_OK : dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate");
    for (int32_t i = 0; st == DLT_OK && i < n; i++) {
        const dlt__state_entry *e = &m->flat[i];
        if (!strcmp(e->name, "lm_head.weight") && cfg.tied) continue;
        dlt_tensor *t = dlt_tensor_retain(e->tensor);
        if (!strcmp(e->name, "transformer.wte.weight") && t->shape[0] > cfg.vocab_size) {
            dlt_tensor *rows = NULL;
            st = dlt_narrow(t, 0, 0, cfg.vocab_size, &rows);
            dlt_tensor_release(t);
            t = rows;
        } else if (is_conv1d(e->name)) {
            dlt_tensor *tr = NULL;
            st = dlt_transpose(t, 0, 1, &tr);
            dlt_tensor_release(t);
            t = tr;
        }
        if (st != DLT_OK) break;
        names[k] = e->name;
        ts[k++] = t;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st == DLT_OK) st = dlt_safetensors_save(path, names, ts, k);
    for (int32_t i = 0; i < k; i++) dlt_tensor_release(ts[i]);
    free(names);
    free(ts);
    if (st == DLT_OK) {
        char *js = config_json(&cfg);
        if (!js) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot build config.json");
        snprintf(path, sizeof path, "%s/config.json", dir);
        st = dlt__write_bytes_atomic(path, js, strlen(js), F);
        cJSON_free(js);
    }
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

/* An integer field: a JSON number that is whole and within +-2^53 (a double holds it
 * exactly; anything else is not a size a config can mean). */
static int json_int(const cJSON *j, const char *key, int64_t *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(x)) return 0;
    const double d = x->valuedouble;
    if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || d != (double)(int64_t)d) return 0;
    *v = (int64_t)d;
    return 1;
}

dlt_status dlt_gpt_from_hf(dlt_ctx *ctx, const char *dir, dlt_module **out) {
    static const char *F = "dlt_gpt_from_hf";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(dir, F);
    DLT_NULL_CHECK(out, F);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = NULL;
    DLT_CHECK(dlt__file_read_text(path, (int64_t)1 << 20, F, &text, NULL));
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) return dlt__err(DLT_ERR_FORMAT, F, "%s is not JSON", path);
    dlt_gpt_config c;
    dlt_gpt_config_default(&c);
    int64_t v;
    int ok = 1;
    ok &= json_int(j, "vocab_size", &c.vocab_size);
    ok &= json_int(j, "n_embd", &c.n_embd);
    if (json_int(j, "n_layer", &v) && v >= 0 && v <= INT32_MAX) c.n_layer = (int32_t)v;
    else ok = 0;
    if (json_int(j, "n_head", &v) && v >= 1 && v <= INT32_MAX) c.n_head = (int32_t)v;
    else ok = 0;
    if (!json_int(j, "n_positions", &c.block_size)) ok &= json_int(j, "n_ctx", &c.block_size);
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings");
    c.tied = tie && cJSON_IsFalse(tie) ? 0 : 1;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    const int gelu_new = !act || (cJSON_IsString(act) && (!strcmp(act->valuestring, "gelu_new") ||
                                                          !strcmp(act->valuestring, "gelu_pytorch_tanh")));
    cJSON_Delete(j);
    if (!ok) return dlt__err(DLT_ERR_FORMAT, F, "%s lacks one of vocab_size, n_embd, n_layer, n_head, n_positions (or one is not a whole number in range)", path);
    if (!gelu_new)
        return dlt__err(DLT_ERR_NOT_SUPPORTED, F, "%s: only GPT-2's tanh GELU (gelu_new) is supported", path);
    dlt_module *m = NULL;
    DLT_CHECK(dlt_gpt_create(ctx, &c, &m));
    dlt_status st = dlt_gpt_load_hf(m, dir);
    if (st != DLT_OK) {
        dlt_module_destroy(m);
        return dlt__err_wrap(st, F);
    }
    *out = m;
    return DLT_OK;
}
