/*
 * state.c - a module tree's state under PyTorch's state_dict names: the flattened cache,
 * state entries and lookups, parameter lists, the walks over the kinds' state hooks, the
 * flat parameter arena and memory formats.
 *
 * State order is PyTorch's: a module's own parameters, then its own buffers, then each
 * child's state in registration order under "<child name>.". Full names are built on
 * demand into a cache (see nn_internal.h); functions taking a const module fill that cache,
 * which is not observable state.
 *
 * A tensor registered under several names (tied weights) has one state entry per name, as
 * in PyTorch's state_dict, but is one parameter: parameter lists, counts and the arena take
 * it once, at its first name, as PyTorch's parameters() does.
 */
#include <stdlib.h>
#include <string.h>

#include "nn_internal.h"

/* ---- the flattened state cache ---- */

static int32_t count_state(const dlt_module *m) {
    int32_t n = m->n_state;
    for (int32_t i = 0; i < m->n_children; i++) n += count_state(m->children[i]);
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
        char *name = join_name(ctx, prefix, m->state[i].name);
        if (!name) return -1;
        arr[*k] = (dlt__state_entry){name, m->state[i].t, m->state[i].is_param, m, i};
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

static void flat_drop(dlt_module *m) {
    for (int32_t i = 0; i < m->n_flat; i++) free(m->flat[i].name);
    free(m->flat);
    m->flat = NULL;
    m->n_flat = 0;
    m->flat_valid = 0;
}

dlt_status dlt__module_flat(dlt_module *m, const char *func) {
    if (m->flat_valid) return DLT_OK;
    flat_drop(m);
    int32_t n = count_state(m);
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

/* Drops the caches below m too (after tensors were replaced). */
static void invalidate_tree(dlt_module *m) {
    if (m->flat_valid) flat_drop(m);
    for (int32_t i = 0; i < m->n_children; i++) invalidate_tree(m->children[i]);
}

/* ---- the kinds' state hooks ---- */

dlt_status dlt__module_sync_buffers(dlt_module *m, const char *func) {
    if (m->kind->sync) DLT_CHECK(m->kind->sync(m, func));
    for (int32_t i = 0; i < m->n_children; i++)
        DLT_CHECK(dlt__module_sync_buffers(m->children[i], func));
    return DLT_OK;
}

void dlt__module_reset_tracked(dlt_module *m) {
    if (m->kind->loaded) m->kind->loaded(m);
    for (int32_t i = 0; i < m->n_children; i++) dlt__module_reset_tracked(m->children[i]);
}

void dlt__module_add_tracked(dlt_module *m, int64_t k) {
    if (m->kind->replayed) m->kind->replayed(m, k);
    for (int32_t i = 0; i < m->n_children; i++) dlt__module_add_tracked(m->children[i], k);
}

/* A buffer is read: its module writes its host-side state first. */
static dlt_status sync_entry(const dlt__state_entry *e, const char *func) {
    if (e->is_param || !e->owner->kind->sync) return DLT_OK;
    return e->owner->kind->sync(e->owner, func);
}

/* ---- state access ---- */

int32_t dlt_module_num_state(const dlt_module *m) { return m ? count_state(m) : 0; }

dlt_status dlt_module_state_entry(const dlt_module *cm, int32_t i, const char **name,
                                  dlt_tensor **tensor, int32_t *is_param) {
    static const char *F = "dlt_module_state_entry";
    DLT_NULL_CHECK(cm, F);
    dlt_module *m = (dlt_module *)cm; /* fills the cache and syncs counters: not visible state */
    DLT_CHECK(dlt__module_flat(m, F));
    if (i < 0 || i >= m->n_flat)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "index %d is outside 0..%d", i, m->n_flat - 1);
    const dlt__state_entry *e = &m->flat[i];
    DLT_CHECK(sync_entry(e, F));
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
        DLT_CHECK(sync_entry(e, F));
        *out = e->tensor;
        return DLT_OK;
    }
    return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the %s module has no state entry named '%s'",
                    m->kind_name, name);
}

/* ---- parameters, each tensor once ---- */

/* 1 when t is a parameter met in root's state order before state[slot] of owner. Walks
 * without allocating (parameter counts have no failure path): quadratic in the number of
 * parameters, a few hundred thousand comparisons for the largest ResNet. */
static int met_before(const dlt_module *root, const dlt_tensor *t, const dlt_module *owner,
                      int32_t slot, int *stop) {
    for (int32_t i = 0; i < root->n_state; i++) {
        if (root == owner && i == slot) {
            *stop = 1;
            return 0;
        }
        if (root->state[i].is_param && root->state[i].t == t) return 1;
    }
    for (int32_t i = 0; i < root->n_children && !*stop; i++)
        if (met_before(root->children[i], t, owner, slot, stop)) return 1;
    return 0;
}

typedef struct param_walk {
    const dlt_module *root;
    dlt_tensor **out;
    int32_t cap, n;
    int64_t numel;
} param_walk;

static void walk_params(const dlt_module *m, param_walk *w) {
    for (int32_t i = 0; i < m->n_state; i++) {
        if (!m->state[i].is_param) continue;
        int stop = 0;
        if (met_before(w->root, m->state[i].t, m, i, &stop)) continue;
        if (w->out && w->n < w->cap) w->out[w->n] = m->state[i].t;
        w->n++;
        w->numel += m->state[i].t->numel;
    }
    for (int32_t i = 0; i < m->n_children; i++) walk_params(m->children[i], w);
}

int32_t dlt_module_num_params(const dlt_module *m) {
    if (!m) return 0;
    param_walk w = {m, NULL, 0, 0, 0};
    walk_params(m, &w);
    return w.n;
}

dlt_status dlt_module_params(const dlt_module *m, dlt_tensor **out, int32_t cap, int32_t *n) {
    static const char *F = "dlt_module_params";
    DLT_NULL_CHECK(m, F);
    if (cap < 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "cap %d is negative", cap);
    if (cap > 0 && !out) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'out' is NULL");
    param_walk w = {m, out, cap, 0, 0};
    walk_params(m, &w);
    if (n) *n = w.n;
    return DLT_OK;
}

int64_t dlt_module_param_count(const dlt_module *m) {
    if (!m) return 0;
    param_walk w = {m, NULL, 0, 0, 0};
    walk_params(m, &w);
    return w.numel;
}

/* ---- the parameter arena ---- */

/* Index of the first parameter entry of the cache holding the same tensor as entry i. */
static int32_t first_param_entry(const dlt_module *m, int32_t i) {
    for (int32_t j = 0; j < i; j++)
        if (m->flat[j].is_param && m->flat[j].tensor == m->flat[i].tensor) return j;
    return i;
}

dlt_status dlt__module_pack_params(dlt_module *m, const char *func) {
    DLT_CHECK(dlt__module_flat(m, func));
    dlt_ctx *ctx = m->ctx;
    const int32_t nf = m->n_flat;
    int32_t n = 0;
    size_t total = 0;
    for (int32_t i = 0; i < nf; i++) {
        if (!m->flat[i].is_param || first_param_entry(m, i) != i) continue;
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
    /* views[i]: the new tensor of flat entry i (NULL for buffers and later tied names);
     * first[i]: the entry whose view entry i takes (computed before anything is swapped) */
    dlt_tensor **views = dlt__host_calloc(ctx, (size_t)nf, sizeof *views + sizeof(int32_t));
    if (!views) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the arena index");
    int32_t *first = (int32_t *)(views + nf);
    for (int32_t i = 0; i < nf; i++) first[i] = m->flat[i].is_param ? first_param_entry(m, i) : -1;
    dlt_storage *s = NULL;
    dlt_status st = dlt__storage_new(ctx, total, func, &s);
    size_t off = 0;
    /* phase 1: every view and its values (may fail; the model is untouched then) */
    for (int32_t i = 0; i < nf && st == DLT_OK; i++) {
        if (first[i] != i) continue;
        const dlt_tensor *t = m->flat[i].tensor;
        off = (off + DLT__ARENA_ALIGN - 1) / DLT__ARENA_ALIGN * DLT__ARENA_ALIGN;
        st = dlt__tensor_from_storage(s, off, t->dtype, t->shape, t->ndim, t->format, func,
                                      &views[i]);
        if (st == DLT_OK) st = dlt_tensor_set_requires_grad(views[i], t->requires_grad);
        size_t nb = dlt__nbytes(t);
        if (st == DLT_OK && nb) {
            st = ctx->be->memcpy_d2d(ctx, dlt__data(views[i]), dlt__data(t), nb);
            if (st != DLT_OK) st = dlt__err_wrap(st, func);
        }
        off += nb;
    }
    /* phase 2: swap the tensors in (tied names get the same view) */
    for (int32_t i = 0; i < nf && st == DLT_OK; i++) {
        if (first[i] < 0) continue;
        dlt__state *slot = &m->flat[i].owner->state[m->flat[i].slot];
        dlt_tensor_release(slot->t);
        slot->t = dlt_tensor_retain(views[first[i]]);
    }
    for (int32_t i = 0; i < nf; i++) dlt_tensor_release(views[i]);
    free(views);
    dlt__storage_release(s); /* the views hold their own references */
    /* tensors were replaced: every cache at, above and below m is stale */
    invalidate_tree(m);
    dlt__module_invalidate(m);
    return st;
}

/* ---- memory format of the 4-D parameters ---- */

typedef struct format_job {
    dlt_tensor *t;   /* parameter or its gradient buffer */
    dlt_tensor *tmp; /* the values in the new format */
} format_job;

static int32_t collect_format_jobs(const dlt_module *root, const dlt_module *m, int32_t format,
                                   format_job *jobs, int32_t k) {
    for (int32_t i = 0; i < m->n_state; i++) {
        dlt_tensor *t = m->state[i].t;
        if (!m->state[i].is_param || t->ndim != 4 || t->format == format) continue;
        int stop = 0;
        if (met_before(root, t, m, i, &stop)) continue; /* a tied name: converted once */
        if (jobs) jobs[k].t = t;
        k++;
        if (t->grad) {
            if (jobs) jobs[k].t = t->grad;
            k++;
        }
    }
    for (int32_t i = 0; i < m->n_children; i++)
        k = collect_format_jobs(root, m->children[i], format, jobs, k);
    return k;
}

dlt_status dlt_module_set_format(dlt_module *m, int32_t format) {
    static const char *F = "dlt_module_set_format";
    DLT_NULL_CHECK(m, F);
    if (format != DLT_FORMAT_CONTIGUOUS && format != DLT_FORMAT_CHANNELS_LAST)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "unknown memory format %d", format);
    DLT_CHECK(dlt__ctx_ok(m->ctx, F));
    int32_t n = collect_format_jobs(m, m, format, NULL, 0);
    if (n == 0) return DLT_OK;
    format_job *jobs = dlt__host_calloc(m->ctx, (size_t)n, sizeof *jobs);
    if (!jobs) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d conversion jobs", n);
    collect_format_jobs(m, m, format, jobs, 0);
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
        dlt__tensor_written(t); /* autocast copies are rebuilt (they follow the format and version) */
    }
    for (int32_t i = 0; i < n; i++) dlt_tensor_release(jobs[i].tmp);
    free(jobs);
    return st;
}
