/*
 * custom.c - the custom module kind (PyTorch's nn.Module subclass, in C): the forward is a
 * user callback with a user pointer; parameters, buffers and children are registered by
 * name, any number of each. Registration is for custom modules only: the built-in kinds
 * rely on their own state layout (state[0] is a conv's weight).
 *
 * The kind accepts any number of inputs and outputs (n_inputs = n_outputs = -1): the
 * callback gets the arrays dlt_module_forward(_ex) was given and checks them itself. The
 * thread's error is cleared before the callback runs, so a callback that fails without a
 * message (neither a failing op's nor dlt_set_error's) gets one naming its status.
 */
#include <stdlib.h>
#include <string.h>

#include "nn_internal.h"

typedef struct custom_attrs {
    dlt_module_forward_fn forward;
    void *user;
    dlt_user_destroy_fn destroy;
    char *kind_name; /* owned copy, or NULL for "custom" */
} custom_attrs;

static dlt_status custom_forward(dlt_module *m, dlt_tensor *const *in, int32_t n_in,
                                 dlt_tensor **out, int32_t n_out) {
    static const char *F = "dlt_module_forward";
    const custom_attrs *a = DLT__IMPL(m, custom_attrs);
    dlt_clear_error();
    dlt_status st = a->forward(m, a->user, in, n_in, out, n_out);
    if (st != DLT_OK) {
        if (!dlt_last_error()[0])
            return dlt__err(st, F, "the forward callback of the %s module failed with status %d (%s)",
                            m->kind_name, st, dlt_status_string(st));
        return st;
    }
    for (int32_t i = 0; i < n_out; i++)
        if (!out[i])
            return dlt__err(DLT_ERR_INVALID_STATE, F,
                            "the forward callback of the %s module returned DLT_OK without "
                            "setting output %d of %d", m->kind_name, i, n_out);
    return DLT_OK;
}

static void custom_destroy(dlt_module *m) {
    custom_attrs *a = DLT__IMPL(m, custom_attrs);
    if (a->destroy) a->destroy(a->user);
    free(a->kind_name);
}

static const dlt__module_kind custom_kind = {
    .name = "custom",
    .impl_size = sizeof(custom_attrs),
    .n_inputs = -1,
    .n_outputs = -1,
    .forward = custom_forward,
    .destroy = custom_destroy,
};

dlt_status dlt_custom_module_create(dlt_ctx *ctx, const char *kind, dlt_module_forward_fn forward,
                                    void *user, dlt_user_destroy_fn destroy, dlt_module **out) {
    static const char *F = "dlt_custom_module_create";
    DLT_NULL_CHECK(ctx, F);
    DLT_NULL_CHECK(forward, F);
    DLT_NULL_CHECK(out, F);
    if (kind && !kind[0])
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the kind name is empty (NULL gives \"custom\")");
    char *name = NULL;
    if (kind) {
        DLT_CHECK(dlt__ctx_ok(ctx, F));
        name = dlt__host_strdup(ctx, kind);
        if (!name) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot copy the kind name '%s'", kind);
    }
    dlt_module *m = NULL;
    dlt_status st = dlt__module_new(ctx, &custom_kind, F, &m);
    if (st != DLT_OK) {
        free(name);
        return st;
    }
    custom_attrs *a = DLT__IMPL(m, custom_attrs);
    *a = (custom_attrs){forward, user, destroy, name};
    if (name) m->kind_name = name;
    *out = m;
    return DLT_OK;
}

void *dlt_module_user_data(const dlt_module *m) {
    return m && m->kind == &custom_kind ? DLT__IMPL(m, custom_attrs)->user : NULL;
}

/* What every registration checks first. */
static dlt_status check_target(const dlt_module *m, const char *name, const char *func) {
    DLT_NULL_CHECK(m, func);
    DLT_NULL_CHECK(name, func);
    if (m->kind != &custom_kind)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "the %s module is built in, its state is fixed: register on a custom "
                        "module (dlt_custom_module_create)", m->kind_name);
    return DLT_OK;
}

static dlt_status register_tensor(dlt_module *m, const char *name, dlt_tensor *t,
                                  int32_t is_param, const char *func) {
    DLT_CHECK(check_target(m, name, func));
    DLT_NULL_CHECK(t, func);
    if (t->ctx != m->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, func,
                        "tensor '%s' belongs to another context than the %s module", name,
                        m->kind_name);
    DLT_CHECK(dlt__module_check_name(m, name, func));
    if (is_param) {
        if (!dlt__is_float(t->dtype))
            return dlt__err(DLT_ERR_DTYPE, func, "parameter '%s' is %s; parameters are f32, f16 or bf16",
                            name, dlt_dtype_name(t->dtype));
        if (t->grad_fn)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                            "parameter '%s' was produced by '%s': a parameter must be a leaf "
                            "(register a dlt_tensor_detach of it)", name, t->grad_fn->name);
    }
    DLT_CHECK(dlt__module_add_state(m, name, dlt_tensor_retain(t), is_param, func));
    if (is_param) t->requires_grad = 1; /* nn.Parameter; checked above, cannot fail */
    return DLT_OK;
}

dlt_status dlt_module_register_parameter(dlt_module *m, const char *name, dlt_tensor *t) {
    return register_tensor(m, name, t, 1, "dlt_module_register_parameter");
}

dlt_status dlt_module_register_buffer(dlt_module *m, const char *name, dlt_tensor *t) {
    return register_tensor(m, name, t, 0, "dlt_module_register_buffer");
}

dlt_status dlt_module_register_module(dlt_module *m, const char *name, dlt_module *child) {
    static const char *F = "dlt_module_register_module";
    DLT_CHECK(check_target(m, name, F));
    DLT_NULL_CHECK(child, F);
    DLT_CHECK(dlt__module_check_child(m, name, child, F));
    return dlt__module_attach_child(m, name, child, F); /* on failure child stays the caller's */
}
