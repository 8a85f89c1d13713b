/*
 * module_load.c - loading a module's state from a safetensors file: strict (every name, dtype
 * and shape as the module has them; the default, PyTorch's load_state_dict(strict=True)) or
 * not (what matches loads; missing, unexpected and mismatched names are skipped and
 * reported), optionally under prefixes, and the all-or-nothing plan shared with
 * dlt_checkpoint_load (checkpoint.c).
 *
 * Names under prefixes: a file entry file_prefix + X loads into the module entry
 * module_prefix + X. Only file entries starting with file_prefix and module entries starting
 * with module_prefix take part; the others are neither loaded nor reported. So
 * file_prefix "backbone." loads a whole model's backbone into a backbone module (strip),
 * module_prefix "backbone." loads a backbone file into a whole model (add), and the same
 * string for both loads one part of a model from a file of the whole. The training entries
 * of a checkpoint ("optimizer.", "scaler.", "train.") are never unexpected.
 *
 * All or nothing: every entry that will load is checked and its bytes read from the file
 * (entries needing a conversion, channels-last weights and momentum buffers, are staged in
 * tensors on the module's context) before the first byte of the module changes; a failure
 * up to then leaves everything as it was. Only what loads is read: a filtered load of a
 * large file reads just its part.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/options.h"
#include "../nn/nn_internal.h"
#include "../optim/optim_internal.h"
#include "io_internal.h"

static int has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Entries a module load ignores. */
static int training_entry(const char *name) {
    return has_prefix(name, "optimizer.") || has_prefix(name, "scaler.") || has_prefix(name, "train.");
}

static void shape_str(const int64_t *shape, int32_t ndim, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int32_t i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* DLT_OK when entry e fits t; else DLT_ERR_DTYPE / DLT_ERR_SHAPE with the reason in msg. */
static dlt_status mismatch(const dlt__st_entry *e, const dlt_tensor *t, const char *name,
                           const char *path, char *msg, size_t n) {
    if (e->dtype != t->dtype) {
        const char *want = dlt__st_dtype_name(t->dtype);
        snprintf(msg, n, "tensor '%s' is %s in '%s' but %s in the model", name, e->dtype_name, path,
                 want ? want : "?");
        return DLT_ERR_DTYPE;
    }
    int same = e->ndim == t->ndim;
    for (int32_t i = 0; same && i < e->ndim; i++) same = e->shape[i] == t->shape[i];
    if (!same) {
        char a[128], b[128];
        shape_str(e->shape, e->ndim, a, sizeof a);
        shape_str(t->shape, t->ndim, b, sizeof b);
        snprintf(msg, n, "tensor '%s' has shape %s in '%s' but %s in the model", name, a, path, b);
        return DLT_ERR_SHAPE;
    }
    return DLT_OK;
}

dlt_status dlt__check_entry(const dlt__st_entry *e, const dlt_tensor *t, const char *name,
                            const char *path, const char *func) {
    char msg[768];
    dlt_status st = mismatch(e, t, name, path, msg, sizeof msg);
    return st == DLT_OK ? st : dlt__err(st, func, "%s", msg);
}

/* ---- the plan ---- */

void dlt__plan_free(dlt__load_plan *p) {
    for (int32_t i = 0; i < p->n; i++) {
        dlt_tensor_release(p->ops[i].staged);
        free(p->ops[i].host);
    }
    free(p->ops);
    memset(p, 0, sizeof *p);
}

dlt_status dlt__plan_add(dlt__load_plan *p, const dlt__st_file *f, dlt_tensor *dst,
                         const dlt__st_entry *src, int32_t opt_index, int stage, dlt_ctx *ctx,
                         const char *func) {
    if (p->n == p->cap) {
        int32_t cap = p->cap ? 2 * p->cap : 64;
        dlt__load_op *ops = realloc(p->ops, (size_t)cap * sizeof *ops);
        if (!ops) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the load plan");
        p->ops = ops;
        p->cap = cap;
    }
    dlt__load_op *op = &p->ops[p->n];
    memset(op, 0, sizeof *op);
    op->dst = dst;
    op->src = src;
    op->opt_index = opt_index;
    size_t n = (size_t)(src->end - src->begin);
    op->host = malloc(n ? n : 1);
    if (!op->host)
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %zu bytes for tensor '%.200s'",
                        n, src->name);
    p->n++; /* from here on plan_free owns op->host */
    DLT_CHECK(dlt__safetensors_read_entry(f, src, op->host, func));
    if (stage) { /* staged through a contiguous tensor: the copy converts on the device */
        dlt_status st = dlt_tensor_from_host(ctx, src->dtype, src->shape, src->ndim,
                                             DLT_FORMAT_CONTIGUOUS, op->host, n, &op->staged);
        if (st != DLT_OK) return dlt__err_wrap(st, func);
        free(op->host);
        op->host = NULL;
    }
    return DLT_OK;
}

dlt_status dlt__commit(dlt_module *m, dlt_optimizer *opt, dlt__load_plan *plan, const char *func) {
    /* the optimizer's state is replaced, as by PyTorch's load_state_dict: a buffer that
     * holds data now but had none when the file was saved is emptied (else a rollback into
     * objects that trained on would keep momentum from after the checkpoint) */
    for (int32_t k = 0; opt && k < dlt_optimizer_num_params(opt); k++) {
        int in_file = 0;
        for (int32_t i = 0; i < plan->n && !in_file; i++) in_file = plan->ops[i].opt_index == k;
        if (in_file) continue;
        dlt_status st = dlt__optimizer_reset_momentum_buffer(opt, k);
        if (st != DLT_OK) return dlt__err_wrap(st, func);
    }
    for (int32_t i = 0; i < plan->n; i++) {
        dlt__load_op *op = &plan->ops[i];
        dlt_status st;
        if (op->opt_index >= 0)
            st = dlt__optimizer_set_state_tensor(opt, op->opt_index, op->opt_slot, op->staged);
        else if (op->staged)
            st = dlt_tensor_copy(op->dst, op->staged);
        else
            st = dlt_tensor_copy_from_host(op->dst, op->host, (size_t)(op->src->end - op->src->begin));
        if (st != DLT_OK) return dlt__err_wrap(st, func);
    }
    /* num_batches_tracked now holds the file's counts */
    dlt__module_reset_tracked(m);
    return DLT_OK;
}

/* ---- the report ---- */

struct dlt_load_report {
    int32_t n[3], cap[3];
    char **names[3]; /* DLT_LOAD_MISSING, DLT_LOAD_UNEXPECTED, DLT_LOAD_MISMATCHED */
    int32_t loaded;
};

void dlt_load_report_destroy(dlt_load_report *r) {
    if (!r) return;
    for (int k = 0; k < 3; k++) {
        for (int32_t i = 0; i < r->n[k]; i++) free(r->names[k][i]);
        free(r->names[k]);
    }
    free(r);
}

int32_t dlt_load_report_count(const dlt_load_report *r, int32_t kind) {
    return (r && kind >= 0 && kind < 3) ? r->n[kind] : 0;
}

const char *dlt_load_report_name(const dlt_load_report *r, int32_t kind, int32_t i) {
    return (r && kind >= 0 && kind < 3 && i >= 0 && i < r->n[kind]) ? r->names[kind][i] : NULL;
}

int32_t dlt_load_report_num_loaded(const dlt_load_report *r) { return r ? r->loaded : 0; }

static dlt_status report_add(dlt_load_report *r, int32_t kind, const char *name, const char *func) {
    if (r->n[kind] == r->cap[kind]) {
        int32_t cap = r->cap[kind] ? 2 * r->cap[kind] : 16;
        char **p = realloc(r->names[kind], (size_t)cap * sizeof *p);
        if (!p) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the load report");
        r->names[kind] = p;
        r->cap[kind] = cap;
    }
    char *s = strdup(name);
    if (!s) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the load report");
    r->names[kind][r->n[kind]++] = s;
    return DLT_OK;
}

/* ---- matching a module with a file ---- */

dlt_status dlt__plan_module(dlt_module *m, const dlt__st_file *f, int32_t strict,
                            const char *file_prefix, const char *module_prefix,
                            dlt__load_plan *plan, dlt_load_report **report, const char *func) {
    const char *fp = file_prefix ? file_prefix : "", *mp = module_prefix ? module_prefix : "";
    const size_t fl = strlen(fp), ml = strlen(mp);
    DLT_CHECK(dlt__module_flat(m, func));
    dlt_load_report *r = calloc(1, sizeof *r);
    uint8_t *used = calloc((size_t)(f->n ? f->n : 1), 1);
    /* per module entry: the file entry it loads from, -1 (not taking part, or missing) or
     * -2 (mismatched) */
    int32_t *match = calloc((size_t)(m->n_flat ? m->n_flat : 1), sizeof *match);
    char *key = NULL;
    size_t key_cap = 0;
    /* the first problem in module order (then the first unexpected entry) is the one a
     * strict load reports */
    dlt_status first = DLT_OK;
    char first_msg[768] = "";
    dlt_status st = DLT_OK;
    if (!r || !used || !match) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the load report");
        goto done;
    }
    /* match names, dtypes and shapes: nothing is read yet */
    for (int32_t i = 0; i < m->n_flat && st == DLT_OK; i++) {
        const dlt__state_entry *s = &m->flat[i];
        match[i] = -1;
        if (!has_prefix(s->name, mp)) continue;
        const char *rest = s->name + ml;
        size_t need = fl + strlen(rest) + 1;
        if (need > key_cap) {
            char *k2 = realloc(key, need);
            if (!k2) {
                st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate a name");
                break;
            }
            key = k2;
            key_cap = need;
        }
        snprintf(key, key_cap, "%s%s", fp, rest);
        int32_t k = dlt__safetensors_find(f, key);
        if (k < 0) {
            if (first == DLT_OK) {
                first = DLT_ERR_FORMAT;
                if (strcmp(key, s->name) != 0)
                    snprintf(first_msg, sizeof first_msg, "'%s' has no tensor '%s' (the model's "
                             "'%s' needs it)", f->path, key, s->name);
                else
                    snprintf(first_msg, sizeof first_msg, "'%s' has no tensor '%s' (the model needs it)",
                             f->path, s->name);
            }
            st = report_add(r, DLT_LOAD_MISSING, s->name, func);
            continue;
        }
        used[k] = 1;
        char msg[768];
        dlt_status mm = mismatch(&f->e[k], s->tensor, s->name, f->path, msg, sizeof msg);
        if (mm != DLT_OK) {
            if (first == DLT_OK) {
                first = mm;
                snprintf(first_msg, sizeof first_msg, "%s", msg);
            }
            match[i] = -2;
            st = report_add(r, DLT_LOAD_MISMATCHED, s->name, func);
            continue;
        }
        match[i] = k;
    }
    for (int32_t k = 0; k < f->n && st == DLT_OK; k++) {
        const char *name = f->e[k].name;
        if (used[k] || !has_prefix(name, fp) || (!fl && training_entry(name))) continue;
        if (first == DLT_OK) {
            first = DLT_ERR_FORMAT;
            snprintf(first_msg, sizeof first_msg, "'%s' holds tensor '%.200s', which the model does "
                     "not have", f->path, name);
        }
        st = report_add(r, DLT_LOAD_UNEXPECTED, name, func);
    }
    if (st == DLT_OK && strict && first != DLT_OK) {
        int32_t total = r->n[0] + r->n[1] + r->n[2];
        if (total > 1)
            st = dlt__err(first, func, "%s (in all: %d missing, %d unexpected, %d mismatched; a "
                          "non-strict load skips and reports them)", first_msg, r->n[0], r->n[1], r->n[2]);
        else
            st = dlt__err(first, func, "%s", first_msg);
    }
    /* read what loads */
    for (int32_t i = 0; i < m->n_flat && st == DLT_OK; i++) {
        if (match[i] < 0) continue;
        dlt_tensor *t = m->flat[i].tensor;
        st = dlt__plan_add(plan, f, t, &f->e[match[i]], -1, t->format != DLT_FORMAT_CONTIGUOUS, m->ctx, func);
        r->loaded++;
    }
done:
    free(key);
    free(match);
    free(used);
    if (st == DLT_OK && report) *report = r;
    else dlt_load_report_destroy(r);
    return st;
}

/* ---- public ---- */

static const dlt_module_load_options LOAD_DEFAULTS = {.size = sizeof(dlt_module_load_options), .strict = 1};
/* the first release's struct ends after module_prefix */
#define LOAD_OPTIONS_V1 DLT__FIELD_END(dlt_module_load_options, module_prefix)

void dlt_module_load_options_init(dlt_module_load_options *o, uint32_t size) {
    dlt__options_fill(o, size, &LOAD_DEFAULTS, sizeof LOAD_DEFAULTS, LOAD_OPTIONS_V1);
}

/* The caller's options over the defaults (core/options.h), checked. */
static dlt_status read_options(const dlt_module_load_options *o, dlt_module_load_options *out,
                               const char *func) {
    *out = LOAD_DEFAULTS;
    DLT_CHECK(dlt__options_read(out, sizeof *out, o, LOAD_OPTIONS_V1, "dlt_module_load_options", func));
    if (out->strict != 0 && out->strict != 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "options->strict is %d, not 0 or 1", out->strict);
    return DLT_OK;
}

static dlt_status load_from(dlt_module *m, const dlt__st_file *f, const dlt_module_load_options *opts,
                            dlt_load_report **report, const char *func) {
    dlt__load_plan plan = {0};
    dlt_load_report *r = NULL;
    dlt_status st = dlt__plan_module(m, f, opts->strict, opts->file_prefix, opts->module_prefix, &plan,
                                     &r, func);
    if (st == DLT_OK) st = dlt__commit(m, NULL, &plan, func);
    dlt__plan_free(&plan);
    if (st == DLT_OK && report) *report = r;
    else dlt_load_report_destroy(r);
    return st;
}

dlt_status dlt_module_load_ex(dlt_module *m, const char *path, const dlt_module_load_options *o,
                              dlt_load_report **report) {
    static const char *F = "dlt_module_load_ex";
    if (report) *report = NULL;
    DLT_NULL_CHECK(m, F);
    DLT_NULL_CHECK(path, F);
    dlt_module_load_options opts;
    DLT_CHECK(read_options(o, &opts, F));
    DLT_CHECK(dlt__ctx_ok(m->ctx, F));
    dlt__st_file file;
    DLT_CHECK(dlt__safetensors_open(path, F, &file));
    dlt_status st = load_from(m, &file, &opts, report, F);
    dlt__safetensors_free(&file);
    return st;
}

dlt_status dlt_module_load_safetensors(dlt_module *m, const dlt_safetensors *f,
                                       const dlt_module_load_options *o, dlt_load_report **report) {
    static const char *F = "dlt_module_load_safetensors";
    if (report) *report = NULL;
    DLT_NULL_CHECK(m, F);
    DLT_NULL_CHECK(f, F);
    dlt_module_load_options opts;
    DLT_CHECK(read_options(o, &opts, F));
    DLT_CHECK(dlt__ctx_ok(m->ctx, F));
    return load_from(m, dlt__safetensors_file(f), &opts, report, F);
}

dlt_status dlt_module_load(dlt_module *m, const char *path) {
    static const char *F = "dlt_module_load";
    DLT_NULL_CHECK(m, F);
    DLT_NULL_CHECK(path, F);
    DLT_CHECK(dlt__ctx_ok(m->ctx, F));
    dlt_module_load_options opts = LOAD_DEFAULTS;
    dlt__st_file file;
    DLT_CHECK(dlt__safetensors_open(path, F, &file));
    dlt_status st = load_from(m, &file, &opts, NULL, F);
    dlt__safetensors_free(&file);
    return st;
}
