/*
 * checkpoint.c - module and training checkpoints as safetensors files (io.h).
 *
 * Names: the module's state_dict names ("conv1.weight", "bn1.num_batches_tracked"), then
 *   optimizer.momentum_buffer.<param name>   f32, the parameter's shape (buffers holding data)
 *   optimizer.lr                             F64 []   (the lr the next step uses)
 *   optimizer.step_count                     I64 []
 *   scaler.scale                             F32 []   (the device value, exactly)
 *   scaler.growth_factor, scaler.backoff_factor   F64 []
 *   scaler.growth_interval, scaler._growth_tracker I32 []
 *   train.epoch, train.step                  I64 []
 * The module's entries load into torchvision with load_state_dict(strict=True) after
 * dropping the optimizer./scaler./train. keys.
 *
 * Loading is all-or-nothing: parse and validate the whole file, check every name, dtype
 * and shape against the objects (reporting the first mismatch by name), stage what needs a
 * device-side conversion (channels-last weights, momentum buffers) in temporary tensors, and
 * only then write into the model, optimizer and scaler. The optimizer's state is replaced
 * whole (PyTorch's load_state_dict): momentum buffers absent from the file are emptied, so
 * loading into objects that trained on after the save resumes exactly.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nn/nn_internal.h"
#include "../optim/optim_internal.h"
#include "io_internal.h"

#define OPT_PREFIX "optimizer."
#define MOM_PREFIX "optimizer.momentum_buffer."

static int has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Entries a module-only load ignores. */
static int training_entry(const char *name) {
    return has_prefix(name, OPT_PREFIX) || has_prefix(name, "scaler.") || has_prefix(name, "train.");
}

static void shape_str(const int64_t *shape, int32_t ndim, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int32_t i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Checks that file entry e can be loaded into t; messages name the tensor. */
static dlt_status check_entry(const dlt__st_entry *e, const dlt_tensor *t, const char *name,
                              const char *path, const char *func) {
    if (e->dtype != t->dtype) {
        const char *want = dlt__st_dtype_name(t->dtype);
        return dlt__err(DLT_ERR_FORMAT, func, "tensor '%s' is %s in '%s' but %s in the model", name,
                        e->dtype_name, path, want ? want : "?");
    }
    int same = e->ndim == t->ndim;
    for (int32_t i = 0; same && i < e->ndim; i++) same = e->shape[i] == t->shape[i];
    if (!same) {
        char a[128], b[128];
        shape_str(e->shape, e->ndim, a, sizeof a);
        shape_str(t->shape, t->ndim, b, sizeof b);
        return dlt__err(DLT_ERR_FORMAT, func, "tensor '%s' has shape %s in '%s' but %s in the model",
                        name, a, path, b);
    }
    return DLT_OK;
}

/* One copy the commit phase performs. */
typedef struct load_op {
    dlt_tensor *dst;
    const dlt__st_entry *src;
    dlt_tensor *staged; /* temporary on dst's context when a conversion is needed, else NULL */
    int32_t opt_index;  /* >= 0: a momentum buffer for optimizer parameter opt_index */
} load_op;

typedef struct load_plan {
    load_op *ops;
    int32_t n, cap;
} load_plan;

static void plan_free(load_plan *p) {
    for (int32_t i = 0; i < p->n; i++) dlt_tensor_release(p->ops[i].staged);
    free(p->ops);
    memset(p, 0, sizeof *p);
}

static dlt_status plan_add(load_plan *p, dlt_tensor *dst, const dlt__st_entry *src,
                           int32_t opt_index, int stage, dlt_ctx *ctx, const char *func) {
    if (p->n == p->cap) {
        int32_t cap = p->cap ? 2 * p->cap : 64;
        load_op *ops = realloc(p->ops, (size_t)cap * sizeof *ops);
        if (!ops) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the load plan");
        p->ops = ops;
        p->cap = cap;
    }
    load_op *op = &p->ops[p->n];
    memset(op, 0, sizeof *op);
    op->dst = dst;
    op->src = src;
    op->opt_index = opt_index;
    if (stage) /* staged through a contiguous tensor: the copy converts on the device */
        DLT_CHECK(dlt_tensor_from_host(ctx, src->dtype, src->shape, src->ndim,
                                       DLT_FORMAT_CONTIGUOUS, src->data,
                                       (size_t)(src->end - src->begin), &op->staged));
    p->n++;
    return DLT_OK;
}

/* Validates the module's entries against the file and plans their copies. used[i] is set
 * for every file entry the module takes. */
static dlt_status plan_module(dlt_module *m, const dlt__st_file *f, const char *path,
                              uint8_t *used, load_plan *plan, const char *func) {
    DLT_CHECK(dlt__module_flat(m, func));
    for (int32_t i = 0; i < m->n_flat; i++) {
        const dlt__state_entry *s = &m->flat[i];
        int32_t k = dlt__safetensors_find(f, s->name);
        if (k < 0)
            return dlt__err(DLT_ERR_FORMAT, func, "'%s' has no tensor '%s' (the model needs it)",
                            path, s->name);
        DLT_CHECK(check_entry(&f->e[k], s->tensor, s->name, path, func));
        used[k] = 1;
    }
    for (int32_t k = 0; k < f->n; k++)
        if (!used[k] && !training_entry(f->e[k].name))
            return dlt__err(DLT_ERR_FORMAT, func,
                            "'%s' holds tensor '%.200s', which the model does not have", path,
                            f->e[k].name);
    for (int32_t i = 0; i < m->n_flat; i++) {
        const dlt__state_entry *s = &m->flat[i];
        const dlt__st_entry *e = &f->e[dlt__safetensors_find(f, s->name)];
        DLT_CHECK(plan_add(plan, s->tensor, e, -1, s->tensor->format != DLT_FORMAT_CONTIGUOUS,
                           m->ctx, func));
    }
    return DLT_OK;
}

static dlt_status commit(dlt_module *m, dlt_optimizer *opt, load_plan *plan, const char *func) {
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
        load_op *op = &plan->ops[i];
        dlt_status st;
        if (op->opt_index >= 0)
            st = dlt__optimizer_set_momentum_buffer(opt, op->opt_index, op->staged);
        else if (op->staged)
            st = dlt_tensor_copy(op->dst, op->staged);
        else
            st = dlt_tensor_copy_from_host(op->dst, op->src->data, (size_t)(op->src->end - op->src->begin));
        if (st != DLT_OK) return dlt__err_wrap(st, func);
    }
    /* num_batches_tracked now holds the file's counts */
    dlt__module_reset_tracked(m);
    return DLT_OK;
}

dlt_status dlt_module_save(const dlt_module *cm, const char *path) {
    static const char *F = "dlt_module_save";
    DLT_NULL_CHECK(cm, F);
    DLT_NULL_CHECK(path, F);
    dlt_module *m = (dlt_module *)cm; /* syncs counters and fills the name cache only */
    DLT_CHECK(dlt__ctx_ok(m->ctx, F));
    DLT_CHECK(dlt__module_sync_buffers(m, F));
    DLT_CHECK(dlt__module_flat(m, F));
    dlt__st_out *e = calloc((size_t)(m->n_flat ? m->n_flat : 1), sizeof *e);
    if (!e) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d entries", m->n_flat);
    for (int32_t i = 0; i < m->n_flat; i++) {
        e[i].name = m->flat[i].name;
        e[i].tensor = m->flat[i].tensor;
    }
    dlt_status st = dlt__safetensors_write(path, e, m->n_flat, F);
    free(e);
    return st;
}

dlt_status dlt_module_load(dlt_module *m, const char *path) {
    static const char *F = "dlt_module_load";
    DLT_NULL_CHECK(m, F);
    DLT_NULL_CHECK(path, F);
    DLT_CHECK(dlt__ctx_ok(m->ctx, F));
    dlt__st_file file;
    DLT_CHECK(dlt__safetensors_read(path, F, &file));
    load_plan plan = {0};
    dlt_status st = DLT_OK;
    uint8_t *used = calloc((size_t)(file.n ? file.n : 1), 1);
    if (!used) st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d flags", file.n);
    if (st == DLT_OK) st = plan_module(m, &file, path, used, &plan, F);
    if (st == DLT_OK) st = commit(m, NULL, &plan, F);
    plan_free(&plan);
    free(used);
    dlt__safetensors_free(&file);
    return st;
}

/* ---- training checkpoints ---- */

/* Host scalar entries written by dlt_checkpoint_save. */
typedef struct scalar_out {
    char name[40];
    int32_t dtype;
    union {
        double f64;
        float f32;
        int64_t i64;
        int32_t i32;
    } v;
} scalar_out;

static void put_scalar(scalar_out *s, int32_t *n, const char *name, int32_t dtype, double v) {
    scalar_out *o = &s[(*n)++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->dtype = dtype;
    if (dtype == DLT__ST_F64) o->v.f64 = v;
    else o->v.f32 = (float)v;
}
/* Integers never pass through a double: a count above 2^53 would lose digits, and
 * INT64_MAX would become 2^63, which no int64 holds. */
static void put_int(scalar_out *s, int32_t *n, const char *name, int32_t dtype, int64_t v) {
    scalar_out *o = &s[(*n)++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->dtype = dtype;
    if (dtype == DLT_I64) o->v.i64 = v;
    else o->v.i32 = (int32_t)v;
}

/* Every optimizer parameter must be a parameter of m (matched by identity). */
static dlt_status check_opt_params(dlt_module *m, dlt_optimizer *opt, const char *func) {
    int32_t matched = 0;
    for (int32_t i = 0; i < m->n_flat; i++)
        if (m->flat[i].is_param && dlt__optimizer_param_index(opt, m->flat[i].tensor) >= 0) matched++;
    int32_t n = dlt_optimizer_num_params(opt);
    if (matched != n)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "%d of the optimizer's %d parameters are not parameters of the module",
                        n - matched, n);
    return DLT_OK;
}

dlt_status dlt_checkpoint_save(const char *path, const dlt_module *cm, dlt_optimizer *opt,
                               dlt_grad_scaler *scaler, int64_t epoch, int64_t step) {
    static const char *F = "dlt_checkpoint_save";
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(cm, F);
    dlt_module *m = (dlt_module *)cm;
    /* what dlt_checkpoint_load refuses is never written */
    if (epoch < 0 || step < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "epoch (%lld) and step (%lld) must not be "
                        "negative", (long long)epoch, (long long)step);
    DLT_CHECK(dlt__ctx_ok(m->ctx, F));
    DLT_CHECK(dlt__module_sync_buffers(m, F));
    DLT_CHECK(dlt__module_flat(m, F));
    if (opt) DLT_CHECK(check_opt_params(m, opt, F));

    scalar_out sc[9];
    int32_t nsc = 0;
    dlt_status st = DLT_OK;
    if (opt) {
        double lr = 0;
        int64_t steps = 0;
        st = dlt__optimizer_get_state(opt, &lr, &steps);
        if (st != DLT_OK) return dlt__err_wrap(st, F);
        put_scalar(sc, &nsc, "optimizer.lr", DLT__ST_F64, lr);
        put_int(sc, &nsc, "optimizer.step_count", DLT_I64, steps);
    }
    if (scaler && dlt_grad_scaler_is_enabled(scaler)) {
        double scale = 0, gf = 0, bf = 0;
        int32_t gi = 0, gt = 0;
        st = dlt_grad_scaler_get_state(scaler, &scale, &gf, &bf, &gi, &gt);
        if (st != DLT_OK) return dlt__err_wrap(st, F);
        put_scalar(sc, &nsc, "scaler.scale", DLT_F32, scale);
        put_scalar(sc, &nsc, "scaler.growth_factor", DLT__ST_F64, gf);
        put_scalar(sc, &nsc, "scaler.backoff_factor", DLT__ST_F64, bf);
        put_int(sc, &nsc, "scaler.growth_interval", DLT_I32, gi);
        put_int(sc, &nsc, "scaler._growth_tracker", DLT_I32, gt);
    }
    put_int(sc, &nsc, "train.epoch", DLT_I64, epoch);
    put_int(sc, &nsc, "train.step", DLT_I64, step);

    /* module entries, momentum buffers, scalars */
    int32_t cap = m->n_flat * 2 + nsc;
    dlt__st_out *e = calloc((size_t)cap, sizeof *e);
    char **owned = calloc((size_t)(m->n_flat ? m->n_flat : 1), sizeof *owned);
    int32_t n = 0, n_owned = 0;
    if (!e || !owned) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d entries", cap);
        goto done;
    }
    for (int32_t i = 0; i < m->n_flat; i++) {
        e[n].name = m->flat[i].name;
        e[n++].tensor = m->flat[i].tensor;
    }
    for (int32_t i = 0; opt && i < m->n_flat; i++) {
        if (!m->flat[i].is_param) continue;
        int32_t k = dlt__optimizer_param_index(opt, m->flat[i].tensor);
        dlt_tensor *buf = k >= 0 ? dlt_optimizer_momentum_buffer(opt, k) : NULL;
        if (!buf) continue;
        int32_t init = 0; /* a buffer may exist before a step has filled it */
        st = dlt__optimizer_buffer_initialised(opt, k, &init);
        if (st != DLT_OK) {
            st = dlt__err_wrap(st, F);
            goto done;
        }
        if (!init) continue;
        size_t len = strlen(MOM_PREFIX) + strlen(m->flat[i].name) + 1;
        char *name = malloc(len);
        if (!name) {
            st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate a name");
            goto done;
        }
        snprintf(name, len, "%s%s", MOM_PREFIX, m->flat[i].name);
        owned[n_owned++] = name;
        e[n].name = name;
        e[n++].tensor = buf;
    }
    for (int32_t i = 0; i < nsc; i++) {
        e[n].name = sc[i].name;
        e[n].host = &sc[i].v;
        e[n].dtype = sc[i].dtype;
        e[n++].ndim = 0;
    }
    st = dlt__safetensors_write(path, e, n, F);
done:
    for (int32_t i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(e);
    return st;
}

/* Reads a one-element numeric entry as a double. want_int: integer dtypes only; else
 * floating only. */
static dlt_status read_scalar(const dlt__st_file *f, const char *name, int want_int,
                              const char *path, const char *func, double *out) {
    int32_t k = dlt__safetensors_find(f, name);
    if (k < 0) return dlt__err(DLT_ERR_FORMAT, func, "'%s' has no '%s'", path, name);
    const dlt__st_entry *e = &f->e[k];
    int ok_dtype = want_int ? (e->dtype == DLT_I64 || e->dtype == DLT_I32)
                            : (e->dtype == DLT__ST_F64 || e->dtype == DLT_F32);
    if (!ok_dtype || e->numel != 1)
        return dlt__err(DLT_ERR_FORMAT, func, "'%s' in '%s' must be one %s value, got %s with %lld "
                        "elements", name, path, want_int ? "integer (I64/I32)" : "float (F64/F32)",
                        e->dtype_name, (long long)e->numel);
    switch (e->dtype) {
    case DLT__ST_F64: { double v; memcpy(&v, e->data, 8); *out = v; break; }
    case DLT_F32: { float v; memcpy(&v, e->data, 4); *out = v; break; }
    case DLT_I64: { int64_t v; memcpy(&v, e->data, 8); *out = (double)v; break; }
    default: { int32_t v; memcpy(&v, e->data, 4); *out = v; break; }
    }
    return DLT_OK;
}

static dlt_status read_i64(const dlt__st_file *f, const char *name, const char *path,
                           const char *func, int64_t *out) {
    int32_t k = dlt__safetensors_find(f, name);
    double d;
    DLT_CHECK(read_scalar(f, name, 1, path, func, &d));
    const dlt__st_entry *e = &f->e[k];
    if (e->dtype == DLT_I64) memcpy(out, e->data, 8); /* exact beyond 2^53 */
    else *out = (int64_t)d;
    return DLT_OK;
}

/* train.epoch / train.step: counts, never negative (a negative step made a resumed run
 * take more steps than asked for, a negative epoch failed later without naming the file) */
static dlt_status read_position(const dlt__st_file *f, const char *name, const char *path,
                                const char *func, int64_t *out) {
    DLT_CHECK(read_i64(f, name, path, func, out));
    if (*out < 0)
        return dlt__err(DLT_ERR_FORMAT, func, "'%s' in '%s' is negative (%lld)", name, path,
                        (long long)*out);
    return DLT_OK;
}

typedef struct opt_state {
    double lr;
    int64_t steps;
} opt_state;

static dlt_status plan_optimizer(dlt_module *m, dlt_optimizer *opt, const dlt__st_file *f,
                                 const char *path, load_plan *plan, opt_state *os,
                                 const char *func) {
    DLT_CHECK(check_opt_params(m, opt, func));
    DLT_CHECK(read_scalar(f, "optimizer.lr", 0, path, func, &os->lr));
    /* the optimizer keeps lr in fp32: an F64 lr beyond its range would become inf */
    if (!(os->lr >= 0) || os->lr > FLT_MAX)
        return dlt__err(DLT_ERR_FORMAT, func, "'optimizer.lr' in '%s' is %g, not a valid lr", path,
                        os->lr);
    DLT_CHECK(read_i64(f, "optimizer.step_count", path, func, &os->steps));
    if (os->steps < 0)
        return dlt__err(DLT_ERR_FORMAT, func, "'optimizer.step_count' in '%s' is negative (%lld)",
                        path, (long long)os->steps);
    double momentum = 0;
    DLT_CHECK(dlt_sgd_get_options(opt, &momentum, NULL, NULL, NULL, NULL));
    for (int32_t k = 0; k < f->n; k++) {
        const dlt__st_entry *e = &f->e[k];
        if (!has_prefix(e->name, OPT_PREFIX) || strcmp(e->name, "optimizer.lr") == 0 ||
            strcmp(e->name, "optimizer.step_count") == 0)
            continue;
        if (!has_prefix(e->name, MOM_PREFIX))
            return dlt__err(DLT_ERR_FORMAT, func, "'%s' holds unknown optimizer entry '%.200s'", path,
                            e->name);
        const char *pname = e->name + strlen(MOM_PREFIX);
        const dlt__state_entry *s = NULL;
        for (int32_t i = 0; i < m->n_flat && !s; i++)
            if (m->flat[i].is_param && strcmp(m->flat[i].name, pname) == 0) s = &m->flat[i];
        int32_t idx = s ? dlt__optimizer_param_index(opt, s->tensor) : -1;
        if (idx < 0)
            return dlt__err(DLT_ERR_FORMAT, func,
                            "'%s' holds '%.200s', but '%.200s' is not a parameter the optimizer "
                            "updates", path, e->name, pname);
        if (momentum == 0.0)
            return dlt__err(DLT_ERR_FORMAT, func,
                            "'%s' holds momentum buffers ('%.200s') but the optimizer has momentum 0",
                            path, e->name);
        DLT_CHECK(check_entry(e, s->tensor, e->name, path, func));
        DLT_CHECK(plan_add(plan, NULL, e, idx, 1, m->ctx, func));
    }
    return DLT_OK;
}

typedef struct scaler_state {
    double scale, gf, bf;
    int64_t gi, gt;
} scaler_state;

static dlt_status plan_scaler(const dlt__st_file *f, const char *path, scaler_state *s,
                              const char *func) {
    DLT_CHECK(read_scalar(f, "scaler.scale", 0, path, func, &s->scale));
    DLT_CHECK(read_scalar(f, "scaler.growth_factor", 0, path, func, &s->gf));
    DLT_CHECK(read_scalar(f, "scaler.backoff_factor", 0, path, func, &s->bf));
    DLT_CHECK(read_i64(f, "scaler.growth_interval", path, func, &s->gi));
    DLT_CHECK(read_i64(f, "scaler._growth_tracker", path, func, &s->gt));
    /* the rules of dlt_grad_scaler_set_state, checked here so that nothing changes on
     * failure: the scale lives in fp32, where it must be finite; 0 is a state the scaler
     * reaches itself (and PyTorch's), so it loads */
    if (!(s->scale >= 0) || signbit(s->scale) || s->scale > FLT_MAX || !(s->gf > 1) ||
        !isfinite(s->gf) ||
        !(s->bf > 0 && s->bf < 1) || s->gi < 1 || s->gi > INT32_MAX || s->gt < 0 ||
        s->gt > INT32_MAX)
        return dlt__err(DLT_ERR_FORMAT, func,
                        "'%s' holds an invalid scaler state (scale %g, growth_factor %g, "
                        "backoff_factor %g, growth_interval %lld, _growth_tracker %lld)",
                        path, s->scale, s->gf, s->bf, (long long)s->gi, (long long)s->gt);
    return DLT_OK;
}

dlt_status dlt_checkpoint_load(const char *path, dlt_module *m, dlt_optimizer *opt,
                               dlt_grad_scaler *scaler, int64_t *epoch, int64_t *step) {
    static const char *F = "dlt_checkpoint_load";
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(m, F);
    DLT_CHECK(dlt__ctx_ok(m->ctx, F));
    dlt__st_file file;
    DLT_CHECK(dlt__safetensors_read(path, F, &file));
    load_plan plan = {0};
    opt_state os = {0};
    scaler_state ss = {0};
    int64_t ep = 0, sp = 0;
    const int use_scaler = scaler && dlt_grad_scaler_is_enabled(scaler);
    dlt_status st = DLT_OK;
    uint8_t *used = calloc((size_t)(file.n ? file.n : 1), 1);
    if (!used) st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d flags", file.n);
    /* validate and stage everything */
    if (st == DLT_OK) st = plan_module(m, &file, path, used, &plan, F);
    if (st == DLT_OK && opt) st = plan_optimizer(m, opt, &file, path, &plan, &os, F);
    if (st == DLT_OK && use_scaler) st = plan_scaler(&file, path, &ss, F);
    if (st == DLT_OK && epoch) st = read_position(&file, "train.epoch", path, F, &ep);
    if (st == DLT_OK && step) st = read_position(&file, "train.step", path, F, &sp);
    /* then change things */
    if (st == DLT_OK) st = commit(m, opt, &plan, F);
    if (st == DLT_OK && opt) {
        st = dlt__optimizer_set_state(opt, os.lr, os.steps);
        if (st != DLT_OK) st = dlt__err_wrap(st, F);
    }
    if (st == DLT_OK && use_scaler) {
        st = dlt_grad_scaler_set_state(scaler, ss.scale, ss.gf, ss.bf, (int32_t)ss.gi,
                                       (int32_t)ss.gt);
        if (st != DLT_OK) st = dlt__err_wrap(st, F);
    }
    if (st == DLT_OK && epoch) *epoch = ep;
    if (st == DLT_OK && step) *step = sp;
    plan_free(&plan);
    free(used);
    dlt__safetensors_free(&file);
    return st;
}
