/*
 * module.c - the module tree shared by every layer: creation and destruction, children,
 * state iteration under PyTorch's state_dict names, train/eval, memory formats, the
 * num_batches_tracked bookkeeping and the flat parameter arena.
 *
 * State order is PyTorch's: a module's own parameters, then its own buffers, then each
 * child's state in registration order under "<child name>.". Full names are built on
 * demand into a cache (see nn_internal.h); functions taking a const module fill that cache,
 * which is not observable state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_internal.h"

/* ---- creation, children, destruction ---- */

dlt_status dlt__module_new(dlt_ctx *ctx, int32_t type, const char *kind, const char *func,
                           dlt_module **out) {
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    dlt_module *m = dlt__host_calloc(ctx, 1, sizeof *m);
    if (!m) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate a %s module", kind);
    m->type = type;
    m->kind = kind;
    m->ctx = ctx;
    m->training = 1; /* PyTorch modules start in training mode */
    *out = m;
    return DLT_OK;
}

static void flat_free(dlt_module *m) {
    for (int32_t i = 0; i < m->n_flat; i++) free(m->flat[i].name);
    free(m->flat);
    m->flat = NULL;
    m->n_flat = 0;
    m->flat_valid = 0;
}

void dlt_module_destroy(dlt_module *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n_children; i++) {
        dlt_module_destroy(m->children[i]);
        free(m->child_names[i]);
    }
    free(m->children);
    free(m->child_names);
    for (int32_t i = 0; i < m->n_state; i++) dlt_tensor_release(m->state[i]);
    flat_free(m);
    free(m);
}

void dlt__module_invalidate(dlt_module *m) {
    for (; m; m = m->parent)
        if (m->flat_valid) flat_free(m);
}

/* Drops the caches below m too (after tensors were replaced). */
static void invalidate_tree(dlt_module *m) {
    if (m->flat_valid) flat_free(m);
    for (int32_t i = 0; i < m->n_children; i++) invalidate_tree(m->children[i]);
}

dlt_status dlt__module_add_state(dlt_module *m, const char *name, dlt_tensor *t, int32_t is_param,
                                 const char *func) {
    if (m->n_state >= DLT__MOD_MAX_STATE) {
        dlt_tensor_release(t);
        return dlt__err(DLT_ERR_INTERNAL, func, "too many state tensors in a %s module", m->kind);
    }
    m->state_name[m->n_state] = name;
    m->state[m->n_state] = t;
    m->state_is_param[m->n_state] = is_param;
    m->n_state++;
    dlt__module_invalidate(m);
    return DLT_OK;
}

dlt_status dlt__module_add_child(dlt_module *m, const char *name, dlt_module *child,
                                 const char *func) {
    if (m->n_children == m->cap_children) {
        int32_t cap = m->cap_children ? 2 * m->cap_children : 4;
        dlt_module **c = dlt__host_realloc(m->ctx, m->children, (size_t)cap * sizeof *c);
        if (!c) goto oom;
        m->children = c;
        char **nm = dlt__host_realloc(m->ctx, m->child_names, (size_t)cap * sizeof *nm);
        if (!nm) goto oom;
        m->child_names = nm;
        m->cap_children = cap;
    }
    char *copy = dlt__host_strdup(m->ctx, name);
    if (!copy) goto oom;
    m->children[m->n_children] = child;
    m->child_names[m->n_children] = copy;
    m->n_children++;
    child->parent = m;
    dlt__module_invalidate(m);
    return DLT_OK;
oom:
    dlt_module_destroy(child);
    return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot add child '%s' to a %s module", name,
                    m->kind);
}

/* ---- the flattened state cache ---- */

static int32_t count_state(const dlt_module *m, int params_only) {
    int32_t n = 0;
    for (int32_t i = 0; i < m->n_state; i++) n += !params_only || m->state_is_param[i];
    for (int32_t i = 0; i < m->n_children; i++) n += count_state(m->children[i], params_only);
    return n;
}

static char *join_name(dlt_ctx *ctx, const char *prefix, const char *name) {
    size_t lp = strlen(prefix), ln = strlen(name);
    char *s = dlt__host_alloc(ctx, lp + ln + 2);
    if (!s) return NULL;
    if (lp) {
        memcpy(s, prefix, lp);
        s[lp] = '.';
        memcpy(s + lp + 1, name, ln + 1);
    } else {
        memcpy(s, name, ln + 1);
    }
    return s;
}

static int fill_flat(dlt_ctx *ctx, dlt_module *m, const char *prefix, dlt__state_entry *arr,
                     int32_t *k) {
    for (int32_t i = 0; i < m->n_state; i++) {
        char *name = join_name(ctx, prefix, m->state_name[i]);
        if (!name) return -1;
        arr[*k] = (dlt__state_entry){name, m->state[i], m->state_is_param[i], m, i};
        (*k)++;
    }
    for (int32_t i = 0; i < m->n_children; i++) {
        char *p = join_name(ctx, prefix, m->child_names[i]);
        if (!p) return -1;
        int r = fill_flat(ctx, m->children[i], p, arr, k);
        free(p);
        if (r) return r;
    }
    return 0;
}

dlt_status dlt__module_flat(dlt_module *m, const char *func) {
    if (m->flat_valid) return DLT_OK;
    flat_free(m);
    int32_t n = count_state(m, 0);
    dlt__state_entry *arr = dlt__host_calloc(m->ctx, (size_t)(n ? n : 1), sizeof *arr);
    if (!arr) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the state index");
    int32_t k = 0;
    if (fill_flat(m->ctx, m, "", arr, &k)) {
        for (int32_t i = 0; i < k; i++) free(arr[i].name);
        free(arr);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate state names");
    }
    m->flat = arr;
    m->n_flat = k;
    m->flat_valid = 1;
    return DLT_OK;
}

/* ---- num_batches_tracked ---- */

static dlt_status bn_sync(dlt_module *bn, const char *func) {
    if (bn->u.bn.pending == 0) return DLT_OK;
    dlt_tensor *t = bn->state[4];
    int64_t v = bn->u.bn.value;
    if (t->version != bn->u.bn.synced_version) {
        /* written by someone else since our last write: its value is the base */
        dlt_status st = dlt_tensor_copy_to_host(t, &v, sizeof v);
        if (st != DLT_OK) return dlt__err_wrap(st, func);
    }
    v += bn->u.bn.pending;
    dlt_status st = dlt_tensor_copy_from_host(t, &v, sizeof v);
    if (st != DLT_OK) return dlt__err_wrap(st, func);
    bn->u.bn.value = v;
    bn->u.bn.pending = 0;
    bn->u.bn.synced_version = t->version;
    return DLT_OK;
}

dlt_status dlt__module_sync_buffers(dlt_module *m, const char *func) {
    if (m->type == DLT__MOD_BATCHNORM2D) DLT_CHECK(bn_sync(m, func));
    for (int32_t i = 0; i < m->n_children; i++)
        DLT_CHECK(dlt__module_sync_buffers(m->children[i], func));
    return DLT_OK;
}

void dlt__module_reset_tracked(dlt_module *m) {
    if (m->type == DLT__MOD_BATCHNORM2D) {
        m->u.bn.pending = 0;
        /* force a read-back before the next write: the tensor holds the loaded count */
        m->u.bn.synced_version = m->state[4]->version - 1;
    }
    for (int32_t i = 0; i < m->n_children; i++) dlt__module_reset_tracked(m->children[i]);
}

void dlt__module_add_tracked(dlt_module *m, int64_t k) {
    if (m->type == DLT__MOD_BATCHNORM2D && m->training) m->u.bn.pending += k;
    for (int32_t i = 0; i < m->n_children; i++) dlt__module_add_tracked(m->children[i], k);
}

dlt_status dlt__bn_forward(dlt_module *bn, dlt_tensor *x, dlt_tensor *residual, int32_t relu,
                           dlt_tensor **out) {
    DLT_CHECK(dlt_batch_norm2d_act(x, residual, relu, bn->state[0], bn->state[1], bn->state[2],
                                   bn->state[3], bn->training, bn->u.bn.momentum, bn->u.bn.eps,
                                   out));
    if (bn->training) bn->u.bn.pending++;
    return DLT_OK;
}

/* ---- the parameter arena ---- */

dlt_status dlt__module_pack_params(dlt_module *m, const char *func) {
    DLT_CHECK(dlt__module_flat(m, func));
    dlt_ctx *ctx = m->ctx;
    int32_t n = 0;
    size_t total = 0;
    for (int32_t i = 0; i < m->n_flat; i++) {
        if (!m->flat[i].is_param) continue;
        const dlt_tensor *t = m->flat[i].tensor;
        if (t->ctx != ctx)
            return dlt__err(DLT_ERR_CONTEXT_MISMATCH, func, "parameter '%s' is on another context",
                            m->flat[i].name);
        size_t nb = dlt__nbytes(t);
        total = (total + DLT__ARENA_ALIGN - 1) / DLT__ARENA_ALIGN * DLT__ARENA_ALIGN;
        if (total > SIZE_MAX - nb)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "parameter arena size overflows");
        total += nb;
        n++;
    }
    if (n == 0) return DLT_OK;
    dlt_tensor **views = dlt__host_calloc(ctx, (size_t)n, sizeof *views);
    if (!views) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the arena index");
    dlt_storage *s = NULL;
    dlt_status st = dlt__storage_new(ctx, total, func, &s);
    size_t off = 0;
    int32_t k = 0;
    /* phase 1: every view (may fail; the model is untouched then) */
    for (int32_t i = 0; i < m->n_flat && st == DLT_OK; i++) {
        if (!m->flat[i].is_param) continue;
        const dlt_tensor *t = m->flat[i].tensor;
        off = (off + DLT__ARENA_ALIGN - 1) / DLT__ARENA_ALIGN * DLT__ARENA_ALIGN;
        st = dlt__tensor_from_storage(s, off, t->dtype, t->shape, t->ndim, t->format, func,
                                      &views[k]);
        if (st == DLT_OK) st = dlt_tensor_set_requires_grad(views[k], t->requires_grad);
        off += dlt__nbytes(t);
        k++;
    }
    /* phase 2: copy the values and swap the tensors in */
    k = 0;
    for (int32_t i = 0; i < m->n_flat && st == DLT_OK; i++) {
        if (!m->flat[i].is_param) continue;
        dlt__state_entry *e = &m->flat[i];
        size_t nb = dlt__nbytes(e->tensor);
        if (nb) st = ctx->be->memcpy_d2d(ctx, dlt__data(views[k]), dlt__data(e->tensor), nb);
        if (st != DLT_OK) {
            st = dlt__err_wrap(st, func);
            break;
        }
        dlt_tensor_release(e->owner->state[e->slot]);
        e->owner->state[e->slot] = views[k];
        views[k] = NULL;
        k++;
    }
    for (int32_t i = 0; i < n; i++) dlt_tensor_release(views[i]);
    free(views);
    dlt__storage_release(s); /* the views hold their own references */
    /* tensors were replaced: every cache at, above and below m is stale */
    invalidate_tree(m);
    dlt__module_invalidate(m);
    return st;
}

/* ---- public API ---- */

dlt_status dlt__module_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out) {
    switch (m->type) {
    case DLT__MOD_BASIC_BLOCK:
    case DLT__MOD_BOTTLENECK: return dlt__block_forward(m, x, out);
    case DLT__MOD_RESNET: return dlt__resnet_forward(m, x, out);
    default: return dlt__layer_forward(m, x, out);
    }
}

dlt_status dlt_module_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out) {
    static const char *F = "dlt_module_forward";
    DLT_NULL_CHECK(m, F);
    DLT_NULL_CHECK(x, F);
    DLT_NULL_CHECK(out, F);
    if (x->ctx != m->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F,
                        "the input is on a %s context but the %s module on a %s context",
                        x->ctx->device_type == DLT_DEVICE_CPU ? "cpu" : "cuda", m->kind,
                        m->ctx->device_type == DLT_DEVICE_CPU ? "cpu" : "cuda");
    dlt_tensor *y = NULL;
    dlt_status st = dlt__module_forward(m, x, &y);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    *out = y;
    return DLT_OK;
}

static void set_training(dlt_module *m, int32_t on) {
    m->training = on;
    for (int32_t i = 0; i < m->n_children; i++) set_training(m->children[i], on);
}

dlt_status dlt_module_set_training(dlt_module *m, int32_t training) {
    DLT_NULL_CHECK(m, "dlt_module_set_training");
    set_training(m, training != 0);
    return DLT_OK;
}

int32_t dlt_module_is_training(const dlt_module *m) { return m ? m->training : 0; }

const char *dlt_module_kind(const dlt_module *m) { return m ? m->kind : "?"; }

int32_t dlt_module_num_state(const dlt_module *m) { return m ? count_state(m, 0) : 0; }

dlt_status dlt_module_state_entry(const dlt_module *cm, int32_t i, const char **name,
                                  dlt_tensor **tensor, int32_t *is_param) {
    static const char *F = "dlt_module_state_entry";
    DLT_NULL_CHECK(cm, F);
    dlt_module *m = (dlt_module *)cm; /* fills the cache and syncs counters: not visible state */
    DLT_CHECK(dlt__module_flat(m, F));
    if (i < 0 || i >= m->n_flat)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "index %d is outside 0..%d", i, m->n_flat - 1);
    const dlt__state_entry *e = &m->flat[i];
    if (e->owner->type == DLT__MOD_BATCHNORM2D && !e->is_param) DLT_CHECK(bn_sync(e->owner, F));
    if (name) *name = e->name;
    if (tensor) *tensor = e->tensor;
    if (is_param) *is_param = e->is_param;
    return DLT_OK;
}

dlt_status dlt_module_find(const dlt_module *cm, const char *name, dlt_tensor **out) {
    static const char *F = "dlt_module_find";
    DLT_NULL_CHECK(cm, F);
    DLT_NULL_CHECK(name, F);
    DLT_NULL_CHECK(out, F);
    dlt_module *m = (dlt_module *)cm;
    DLT_CHECK(dlt__module_flat(m, F));
    for (int32_t i = 0; i < m->n_flat; i++) {
        const dlt__state_entry *e = &m->flat[i];
        if (strcmp(e->name, name) != 0) continue;
        if (e->owner->type == DLT__MOD_BATCHNORM2D && !e->is_param)
            DLT_CHECK(bn_sync(e->owner, F));
        *out = e->tensor;
        return DLT_OK;
    }
    return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the %s module has no state entry named '%s'",
                    m->kind, name);
}

int32_t dlt_module_num_params(const dlt_module *m) { return m ? count_state(m, 1) : 0; }

static void collect_params(const dlt_module *m, dlt_tensor **out, int32_t cap, int32_t *k) {
    for (int32_t i = 0; i < m->n_state; i++) {
        if (!m->state_is_param[i]) continue;
        if (*k < cap) out[*k] = m->state[i];
        (*k)++;
    }
    for (int32_t i = 0; i < m->n_children; i++) collect_params(m->children[i], out, cap, k);
}

dlt_status dlt_module_params(const dlt_module *m, dlt_tensor **out, int32_t cap, int32_t *n) {
    static const char *F = "dlt_module_params";
    DLT_NULL_CHECK(m, F);
    if (cap < 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "cap %d is negative", cap);
    if (cap > 0 && !out) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'out' is NULL");
    int32_t k = 0;
    collect_params(m, out, cap, &k);
    if (n) *n = k;
    return DLT_OK;
}

static int64_t param_count(const dlt_module *m) {
    int64_t n = 0;
    for (int32_t i = 0; i < m->n_state; i++)
        if (m->state_is_param[i]) n += m->state[i]->numel;
    for (int32_t i = 0; i < m->n_children; i++) n += param_count(m->children[i]);
    return n;
}

int64_t dlt_module_param_count(const dlt_module *m) { return m ? param_count(m) : 0; }

/* ---- memory format of the 4-D parameters ---- */

typedef struct format_job {
    dlt_tensor *t;   /* parameter or its gradient buffer */
    dlt_tensor *tmp; /* the values in the new format */
} format_job;

static int32_t collect_format_jobs(dlt_module *m, int32_t format, format_job *jobs, int32_t k) {
    for (int32_t i = 0; i < m->n_state; i++) {
        dlt_tensor *t = m->state[i];
        if (!m->state_is_param[i] || t->ndim != 4 || t->format == format) continue;
        if (jobs) jobs[k].t = t;
        k++;
        if (t->grad) {
            if (jobs) jobs[k].t = t->grad;
            k++;
        }
    }
    for (int32_t i = 0; i < m->n_children; i++)
        k = collect_format_jobs(m->children[i], format, jobs, k);
    return k;
}

dlt_status dlt_module_set_format(dlt_module *m, int32_t format) {
    static const char *F = "dlt_module_set_format";
    DLT_NULL_CHECK(m, F);
    if (format != DLT_FORMAT_CONTIGUOUS && format != DLT_FORMAT_CHANNELS_LAST)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "unknown memory format %d", format);
    DLT_CHECK(dlt__ctx_ok(m->ctx, F));
    int32_t n = collect_format_jobs(m, format, NULL, 0);
    if (n == 0) return DLT_OK;
    format_job *jobs = dlt__host_calloc(m->ctx, (size_t)n, sizeof *jobs);
    if (!jobs) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d conversion jobs", n);
    collect_format_jobs(m, format, jobs, 0);
    dlt_status st = DLT_OK;
    /* phase 1: converted copies of everything (may fail; nothing changed then) */
    for (int32_t i = 0; i < n && st == DLT_OK; i++) st = dlt_tensor_to_format(jobs[i].t, format, &jobs[i].tmp);
    /* phase 2: write them back over the same bytes (the arena keeps its layout) */
    for (int32_t i = 0; i < n && st == DLT_OK; i++) {
        dlt_tensor *t = jobs[i].t;
        size_t nb = dlt__nbytes(t);
        if (nb) st = m->ctx->be->memcpy_d2d(m->ctx, dlt__data(t), dlt__data(jobs[i].tmp), nb);
        if (st != DLT_OK) {
            st = dlt__err_wrap(st, F);
            break;
        }
        t->format = format;
        t->version++; /* autocast copies are rebuilt (they follow the format and version) */
    }
    for (int32_t i = 0; i < n; i++) dlt_tensor_release(jobs[i].tmp);
    free(jobs);
    return st;
}
