/*
 * sequential.c - the Sequential container kind: runs its children in order. A child whose
 * kind has a forward_relu hook (BatchNorm2d) directly followed by a ReLU runs as one fused
 * call (same values and gradients, one kernel less).
 */
#include <stdio.h>
#include <string.h>

#include "nn_internal.h"

static dlt_status sequential_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                                     dlt_tensor **out, int32_t n_out) {
    (void)n_in, (void)n_out;
    dlt_tensor *x = in[0], *cur = x;
    int owned = 0;
    for (int32_t i = 0; i < m->n_children; i++) {
        dlt_module *c = m->children[i];
        dlt_tensor *next = NULL;
        dlt_status st;
        if (c->kind->forward_relu && i + 1 < m->n_children &&
            m->children[i + 1]->kind == &dlt__kind_relu) {
            st = c->kind->forward_relu(c, cur, &next); /* X + ReLU in one call */
            i++;
        } else {
            st = dlt__module_forward(c, cur, &next);
        }
        if (owned) dlt_tensor_release(cur);
        if (st != DLT_OK) return st;
        cur = next;
        owned = 1;
    }
    out[0] = owned ? cur : dlt_tensor_retain(x);
    return DLT_OK;
}

const dlt__module_kind dlt__kind_sequential = {
    .name = "sequential",
    .n_inputs = 1,
    .n_outputs = 1,
    .forward = sequential_forward,
};

dlt_status dlt_sequential_create(dlt_ctx *ctx, dlt_module **out) {
    static const char *F = "dlt_sequential_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(out, F);
    return dlt__module_new(ctx, &dlt__kind_sequential, F, out);
}

dlt_status dlt_sequential_append(dlt_module *seq, const char *name, dlt_module *child) {
    static const char *F = "dlt_sequential_append";
    if (!child) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'child' is NULL");
    /* A child that is already owned elsewhere (or would form a cycle) is not ours to free. */
    if (child->parent)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                        "the %s module already belongs to a container", child->kind_name);
    for (const dlt_module *a = seq; a; a = a->parent)
        if (a == child)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "cannot append a module to itself or to one of its own children");
    dlt_status st = DLT_OK;
    char idx[24];
    if (!seq) {
        st = dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'seq' is NULL");
    } else if (seq->kind != &dlt__kind_sequential) {
        st = dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the container is a %s, not a sequential",
                      seq->kind_name);
    } else {
        if (!name) {
            snprintf(idx, sizeof idx, "%d", seq->n_children);
            name = idx;
        }
        st = dlt__module_check_child(seq, name, child, F);
    }
    if (st != DLT_OK) {
        dlt_module_destroy(child); /* ownership passed to us in every case */
        return st;
    }
    /* the child keeps its own train/eval mode, as with PyTorch's Sequential.append */
    return dlt__module_add_child(seq, name, child, F);
}
