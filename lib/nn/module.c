/*
 * module.c - the module tree shared by every kind: creation and destruction, state and
 * children, the forward dispatch (the one call through the kind table), train/eval, and
 * the public queries on the tree. State iteration, the parameter arena and memory formats
 * are in state.c; the kinds each have their file (nn_internal.h lists the table's hooks).
 */
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_internal.h"

/* ---- creation and destruction ---- */

dlt_status dlt__module_new(dlt_ctx *ctx, const dlt__module_kind *kind, const char *func,
                           dlt_module **out) {
    DLT_CHECK(dlt__ctx_ok(ctx, func));
    /* the kind's attributes follow the module in the same allocation */
    const size_t head = (sizeof(dlt_module) + alignof(max_align_t) - 1) / alignof(max_align_t) *
                        alignof(max_align_t);
    dlt_module *m = dlt__host_calloc(ctx, 1, head + kind->impl_size);
    if (!m) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate a %s module", kind->name);
    m->kind = kind;
    m->kind_name = kind->name;
    m->ctx = ctx;
    m->training = 1; /* PyTorch modules start in training mode */
    m->impl = kind->impl_size ? (char *)m + head : NULL;
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
    if (m->kind->destroy) m->kind->destroy(m);
    for (int32_t i = 0; i < m->n_children; i++) {
        dlt_module_destroy(m->children[i]);
        free(m->child_names[i]);
    }
    free(m->children);
    free(m->child_names);
    for (int32_t i = 0; i < m->n_state; i++) {
        dlt_tensor_release(m->state[i].t);
        free(m->state[i].name);
    }
    free(m->state);
    flat_free(m);
    free(m);
}

void dlt__module_invalidate(dlt_module *m) {
    for (; m; m = m->parent)
        if (m->flat_valid) flat_free(m);
}

/* ---- state and children ---- */

dlt_status dlt__module_add_state(dlt_module *m, const char *name, dlt_tensor *t, int32_t is_param,
                                 const char *func) {
    if (m->n_state == m->cap_state) {
        int32_t cap = m->cap_state ? 2 * m->cap_state : 4;
        dlt__state *s = dlt__host_realloc(m->ctx, m->state, (size_t)cap * sizeof *s);
        if (!s) goto oom;
        m->state = s;
        m->cap_state = cap;
    }
    char *copy = dlt__host_strdup(m->ctx, name);
    if (!copy) goto oom;
    /* parameters before buffers, each in registration order (PyTorch's state_dict) */
    int32_t at = m->n_state;
    if (is_param)
        while (at > 0 && !m->state[at - 1].is_param) at--;
    memmove(&m->state[at + 1], &m->state[at], (size_t)(m->n_state - at) * sizeof *m->state);
    m->state[at] = (dlt__state){copy, t, is_param != 0};
    m->n_state++;
    dlt__module_invalidate(m);
    return DLT_OK;
oom:
    dlt_tensor_release(t);
    return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot register '%s' on a %s module", name,
                    m->kind_name);
}

/* A new fp32/int64 contiguous tensor filled by init. */
static dlt_status init_tensor(dlt_ctx *ctx, const int64_t *shape, int32_t ndim, int32_t dtype,
                              int init, double a, int32_t requires_grad, const char *func,
                              dlt_tensor **out) {
    dlt_tensor *t = NULL;
    DLT_CHECK(dlt__tensor_new(ctx, dtype, shape, ndim, DLT_FORMAT_CONTIGUOUS, func, &t));
    dlt_status st;
    switch (init) {
    case DLT__INIT_ZEROS: st = dlt_tensor_fill(t, 0.0); break;
    case DLT__INIT_ONES: st = dlt_tensor_fill(t, 1.0); break;
    case DLT__INIT_NORMAL: st = dlt_tensor_rand_normal(t, 0.0, a); break;
    default: st = dlt_tensor_rand_uniform(t, -a, a); break;
    }
    if (st == DLT_OK && requires_grad) st = dlt_tensor_set_requires_grad(t, 1);
    if (st != DLT_OK) {
        dlt_tensor_release(t);
        return dlt__err_wrap(st, func);
    }
    *out = t;
    return DLT_OK;
}

dlt_status dlt__module_add_new_state(dlt_module *m, const char *name, const int64_t *shape,
                                     int32_t ndim, int32_t dtype, int init, double a,
                                     int32_t is_param, const char *func) {
    dlt_tensor *t = NULL;
    DLT_CHECK(init_tensor(m->ctx, shape, ndim, dtype, init, a, is_param, func, &t));
    return dlt__module_add_state(m, name, t, is_param, func);
}

dlt_status dlt__module_attach_child(dlt_module *m, const char *name, dlt_module *child,
                                    const char *func) {
    if (m->n_children == m->cap_children) {
        int32_t cap = m->cap_children ? 2 * m->cap_children : 4;
        dlt_module **c = dlt__host_realloc(m->ctx, m->children, (size_t)cap * sizeof *c);
        if (!c) goto oom;
        m->children = c;
        char **nm = dlt__host_realloc(m->ctx, m->child_names, (size_t)cap * sizeof *nm);
        if (!nm) goto oom; /* the children array grew: harmless */
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
    return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot add child '%s' to a %s module", name,
                    m->kind_name);
}

dlt_status dlt__module_add_child(dlt_module *m, const char *name, dlt_module *child,
                                 const char *func) {
    dlt_status st = dlt__module_attach_child(m, name, child, func);
    if (st != DLT_OK) dlt_module_destroy(child);
    return st;
}

dlt_status dlt__module_adopt(dlt_module *m, const char *name, dlt_status created,
                             dlt_module *child, dlt_module **slot, const char *func) {
    if (created != DLT_OK) return created;
    DLT_CHECK(dlt__module_add_child(m, name, child, func));
    if (slot) *slot = child;
    return DLT_OK;
}

dlt_status dlt__module_check_name(const dlt_module *m, const char *name, const char *func) {
    if (!name[0] || strchr(name, '.'))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "name '%s' must be non-empty and contain no '.'", name);
    for (int32_t i = 0; i < m->n_state; i++)
        if (strcmp(m->state[i].name, name) == 0)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "the %s module already has a %s '%s'",
                            m->kind_name, m->state[i].is_param ? "parameter" : "buffer", name);
    for (int32_t i = 0; i < m->n_children; i++)
        if (strcmp(m->child_names[i], name) == 0)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "the %s module already has a child '%s'",
                            m->kind_name, name);
    return DLT_OK;
}

dlt_status dlt__module_check_child(const dlt_module *m, const char *name, const dlt_module *child,
                                   const char *func) {
    /* a child owned elsewhere (or one that would form a cycle) is not the caller's to give */
    if (child->parent)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "the %s module already belongs to a container", child->kind_name);
    for (const dlt_module *a = m; a; a = a->parent)
        if (a == child)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                            "cannot add a module to itself or to one of its own children");
    if (child->ctx != m->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, func,
                        "the %s module belongs to another context than the %s", child->kind_name,
                        m->kind_name);
    return dlt__module_check_name(m, name, func);
}

/* ---- forward: the one indirect call ---- */

dlt_status dlt__module_forward_n(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                                 dlt_tensor **out, int32_t n_out) {
    const dlt__module_kind *k = m->kind;
    if ((k->n_inputs >= 0 && n_in != k->n_inputs) || (k->n_outputs >= 0 && n_out != k->n_outputs))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, "dlt_module_forward",
                        "the %s module takes %d input(s) and gives %d output(s), not %d and %d",
                        m->kind_name, k->n_inputs, k->n_outputs, n_in, n_out);
    for (int32_t i = 0; i < n_out; i++) out[i] = NULL;
    dlt_status st = k->forward(m, in, n_in, out, n_out);
    if (st != DLT_OK)
        for (int32_t i = 0; i < n_out; i++) {
            dlt_tensor_release(out[i]);
            out[i] = NULL;
        }
    return st;
}

dlt_status dlt__module_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out) {
    return dlt__module_forward_n(m, &x, 1, out, 1);
}

static const char *device_word(const dlt_ctx *ctx) {
    return ctx->device_type == DLT_DEVICE_CPU ? "cpu" : "cuda";
}

dlt_status dlt_module_forward(dlt_module *m, dlt_tensor *x, dlt_tensor **out) {
    static const char *F = "dlt_module_forward";
    DLT_NULL_CHECK(m, F);
    DLT_NULL_CHECK(x, F);
    DLT_NULL_CHECK(out, F);
    if (x->ctx != m->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F,
                        "the input is on a %s context but the %s module on a %s context",
                        device_word(x->ctx), m->kind_name, device_word(m->ctx));
    dlt_tensor *y = NULL;
    dlt_status st = dlt__module_forward(m, x, &y);
    if (st != DLT_OK) return dlt__err_wrap(st, F);
    *out = y;
    return DLT_OK;
}

dlt_status dlt_module_forward_ex(dlt_module *m, dlt_tensor *const *inputs, int32_t n_inputs,
                                 dlt_tensor **outputs, int32_t n_outputs) {
    static const char *F = "dlt_module_forward_ex";
    DLT_NULL_CHECK(m, F);
    if (n_inputs < 0 || n_outputs < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "negative counts (%d inputs, %d outputs)",
                        n_inputs, n_outputs);
    if (n_inputs > 0 && !inputs) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'inputs' is NULL");
    if (n_outputs > 0 && !outputs)
        return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'outputs' is NULL");
    for (int32_t i = 0; i < n_inputs; i++) {
        if (!inputs[i]) return dlt__err(DLT_ERR_NULL_POINTER, F, "inputs[%d] is NULL", i);
        if (inputs[i]->ctx != m->ctx)
            return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F,
                            "inputs[%d] is on a %s context but the %s module on a %s context", i,
                            device_word(inputs[i]->ctx), m->kind_name, device_word(m->ctx));
    }
    /* outputs are written only on success: build them in a scratch array */
    dlt_tensor *one[1], **tmp = one;
    if (n_outputs > 1) {
        tmp = dlt__host_calloc(m->ctx, (size_t)n_outputs, sizeof *tmp);
        if (!tmp) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d outputs", n_outputs);
    }
    dlt_status st = dlt__module_forward_n(m, inputs, n_inputs, tmp, n_outputs);
    if (st == DLT_OK)
        for (int32_t i = 0; i < n_outputs; i++) outputs[i] = tmp[i];
    if (tmp != one) free(tmp);
    return st == DLT_OK ? DLT_OK : dlt__err_wrap(st, F);
}

/* ---- train/eval and queries ---- */

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

const char *dlt_module_kind(const dlt_module *m) { return m ? m->kind_name : "?"; }

dlt_ctx *dlt_module_ctx(const dlt_module *m) { return m ? m->ctx : NULL; }

int32_t dlt_module_num_children(const dlt_module *m) { return m ? m->n_children : 0; }

dlt_status dlt_module_child(const dlt_module *m, int32_t i, const char **name,
                            dlt_module **child) {
    static const char *F = "dlt_module_child";
    DLT_NULL_CHECK(m, F);
    if (i < 0 || i >= m->n_children)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "index %d is outside 0..%d of the %s module", i,
                        m->n_children - 1, m->kind_name);
    if (name) *name = m->child_names[i];
    if (child) *child = m->children[i];
    return DLT_OK;
}

dlt_status dlt_module_get_submodule(const dlt_module *m, const char *path, dlt_module **out) {
    static const char *F = "dlt_module_get_submodule";
    DLT_NULL_CHECK(m, F);
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(out, F);
    const dlt_module *cur = m;
    const char *p = path;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        const dlt_module *next = NULL;
        for (int32_t i = 0; i < cur->n_children && !next; i++)
            if (strlen(cur->child_names[i]) == len && memcmp(cur->child_names[i], p, len) == 0)
                next = cur->children[i];
        if (!next)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "'%s': the %s module at '%.*s' has no child '%.*s'",
                            path, cur->kind_name, (int)(p == path ? 0 : p - path - 1), path,
                            (int)len, p);
        cur = next;
        p = dot ? dot + 1 : p + len;
        if (dot && !*p)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "'%s' ends with '.'", path);
    }
    *out = (dlt_module *)cur;
    return DLT_OK;
}
