/*
 * checkpoint.c - module and training checkpoints as safetensors files (io.h).
 *
 * Names: the module's state_dict names ("conv1.weight", "bn1.num_batches_tracked"), then
 *   optimizer.momentum_buffer.<param name>   f32, the parameter's shape (buffers holding data)
 *   optimizer.exp_avg.<param name>, optimizer.exp_avg_sq.<param name>   f32 (Adam/AdamW:
 *   optimizer.step.<param name>              F32 []    parameters with state, PyTorch's keys)
 *   optimizer.lr                             F64 []   (the lr the next step uses, group 0)
 *   optimizer.param_groups.<g>.lr            F64 []   (groups g >= 1)
 *   optimizer.step_count                     I64 []
 * A parameter the module lists under two names (a tied weight) has its optimizer state
 * written once, under its first name.
 *   scaler.scale                             F32 []   (the device value, exactly)
 *   scaler.growth_factor, scaler.backoff_factor   F64 []
 *   scaler.growth_interval, scaler._growth_tracker I32 []
 *   train.epoch, train.step                  I64 []
 * The module's entries load into torchvision with load_state_dict(strict=True) after
 * dropping the optimizer./scaler./train. keys.
 *
 * Loading is all-or-nothing: validate the file's header, check every name, dtype and shape
 * against the objects (reporting the first mismatch by name; module_load.c matches the
 * module), read every needed entry and stage what needs a device-side conversion
 * (channels-last weights, momentum buffers) in temporary tensors, and only then write into
 * the model, optimizer and scaler. Integers are written and read as integers (never through
 * a double), and positions (train.epoch, train.step) are never negative: the library refuses
 * to write what it would refuse to read. The optimizer's state is replaced
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
/* Adam/AdamW's per-parameter state keys, PyTorch's names */
#define ADAM_KEY_NAME(k) ((k) == 0 ? "exp_avg" : (k) == 1 ? "exp_avg_sq" : "step")

static int has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

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
    int32_t n = dlt_optimizer_num_params(opt);
    uint8_t *seen = calloc((size_t)(n ? n : 1), 1); /* tied weights: counted once */
    if (!seen) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %d flags", n);
    for (int32_t i = 0; i < m->n_flat; i++) {
        int32_t k = m->flat[i].is_param ? dlt__optimizer_param_index(opt, m->flat[i].tensor) : -1;
        if (k >= 0 && !seen[k]) {
            seen[k] = 1;
            matched++;
        }
    }
    free(seen);
    if (matched != n)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func,
                        "%d of the optimizer's %d parameters are not parameters of the module",
                        n - matched, n);
    return DLT_OK;
}

/* ---- tied weights, Adam/AdamW state and parameter groups, save side ---- */

/* Index of the first flat entry holding the same tensor as entry i (i itself if none). */
static int32_t first_name_of(const dlt_module *m, int32_t i) {
    for (int32_t j = 0; j < i; j++)
        if (m->flat[j].tensor == m->flat[i].tensor) return j;
    return i;
}

static dlt_status group_lr_scalars(dlt_optimizer *opt, scalar_out *sc, int32_t *nsc, const char *func) {
    for (int32_t g = 1; g < dlt_optimizer_num_param_groups(opt); g++) {
        double lr = 0;
        dlt_status st = dlt__optimizer_get_group_lr(opt, g, &lr);
        if (st != DLT_OK) return dlt__err_wrap(st, func);
        char name[40];
        snprintf(name, sizeof name, "optimizer.param_groups.%d.lr", g);
        put_scalar(sc, nsc, name, DLT__ST_F64, lr);
    }
    return DLT_OK;
}

/* Appends exp_avg, exp_avg_sq and step of every parameter with state (step count > 0), in
 * the module's order, each tied tensor once. *stepv (allocated here, freed by the caller)
 * holds the step values the entries point to. */
static dlt_status adam_entries(dlt_module *m, dlt_optimizer *opt, dlt__st_out *e, int32_t *n,
                               char **owned, int32_t *n_owned, float **stepv, const char *func) {
    const int32_t np = dlt_optimizer_num_params(opt);
    int32_t *steps = malloc((size_t)(np ? np : 1) * sizeof *steps);
    *stepv = calloc((size_t)(np ? np : 1), sizeof **stepv);
    if (!steps || !*stepv) {
        free(steps);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %d step counts", np);
    }
    dlt_status st = dlt__optimizer_get_param_steps(opt, steps);
    if (st != DLT_OK) st = dlt__err_wrap(st, func);
    for (int32_t i = 0; i < m->n_flat && st == DLT_OK; i++) {
        if (!m->flat[i].is_param || first_name_of(m, i) != i) continue;
        int32_t k = dlt__optimizer_param_index(opt, m->flat[i].tensor);
        if (k < 0 || steps[k] <= 0) continue;
        (*stepv)[k] = (float)steps[k]; /* PyTorch keeps state["step"] as a float32 tensor */
        for (int key = 0; key < 3 && st == DLT_OK; key++) {
            size_t len = strlen(OPT_PREFIX) + strlen(ADAM_KEY_NAME(key)) + 1 + strlen(m->flat[i].name) + 1;
            char *name = malloc(len);
            if (!name) {
                st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate a name");
                break;
            }
            snprintf(name, len, OPT_PREFIX "%s.%s", ADAM_KEY_NAME(key), m->flat[i].name);
            owned[(*n_owned)++] = name;
            dlt__st_out *o = &e[(*n)++];
            o->name = name;
            if (key == 0) o->tensor = dlt_optimizer_exp_avg(opt, k);
            else if (key == 1) o->tensor = dlt_optimizer_exp_avg_sq(opt, k);
            else {
                o->host = &(*stepv)[k];
                o->dtype = DLT_F32;
                o->ndim = 0;
            }
        }
    }
    free(steps);
    return st;
}

/* gptex (issue 17): a program's own "train.*" entries (dlt_checkpoint_save_ex) */
static dlt_status check_extras(const char *const *names, dlt_tensor *const *extra, int32_t n, const char *F) {
    if (n < 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n_extra %d is negative", n);
    if (n > 0 && (!names || !extra)) return dlt__err(DLT_ERR_NULL_POINTER, F, "extra_names or extra is NULL");
    for (int32_t i = 0; i < n; i++) {
        if (!names[i] || !extra[i]) return dlt__err(DLT_ERR_NULL_POINTER, F, "extra entry %d is NULL", i);
        if (!has_prefix(names[i], "train.") || !names[i][6] || strcmp(names[i], "train.epoch") == 0 ||
            strcmp(names[i], "train.step") == 0)
            return dlt__err(DLT_ERR_INVALID_ARGUMENT, F,
                            "extra entry '%.200s' must be named \"train.<name>\" (not train.epoch or "
                            "train.step, which the checkpoint writes itself)", names[i]);
    }
    return DLT_OK;
}

static dlt_status checkpoint_save(const char *path, const dlt_module *cm, dlt_optimizer *opt,
                                  dlt_grad_scaler *scaler, int64_t epoch, int64_t step,
                                  const char *const *extra_names, dlt_tensor *const *extra, int32_t n_extra,
                                  const char *F) {
    DLT_NULL_CHECK(path, F);
    DLT_NULL_CHECK(cm, F);
    dlt_module *m = (dlt_module *)cm;
    /* what dlt_checkpoint_load refuses is never written */
    if (epoch < 0 || step < 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "epoch (%lld) and step (%lld) must not be "
                        "negative", (long long)epoch, (long long)step);
    DLT_CHECK(check_extras(extra_names, extra, n_extra, F));
    DLT_CHECK(dlt__ctx_ok(m->ctx, F));
    DLT_CHECK(dlt__module_sync_buffers(m, F));
    DLT_CHECK(dlt__module_flat(m, F));
    if (opt) DLT_CHECK(check_opt_params(m, opt, F));

    scalar_out sc[9 + DLT_OPTIM_MAX_GROUPS];
    int32_t nsc = 0;
    dlt_status st = DLT_OK;
    if (opt) {
        double lr = 0;
        int64_t steps = 0;
        st = dlt__optimizer_get_state(opt, &lr, &steps);
        if (st != DLT_OK) return dlt__err_wrap(st, F);
        put_scalar(sc, &nsc, "optimizer.lr", DLT__ST_F64, lr);
        put_int(sc, &nsc, "optimizer.step_count", DLT_I64, steps);
        st = group_lr_scalars(opt, sc, &nsc, F);
        if (st != DLT_OK) return st;
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

    /* module entries, momentum buffers or Adam state (3 per parameter), scalars */
    int32_t cap = m->n_flat * 4 + nsc + n_extra;
    dlt__st_out *e = calloc((size_t)cap, sizeof *e);
    char **owned = calloc((size_t)(m->n_flat ? 3 * m->n_flat : 1), sizeof *owned);
    float *stepv = NULL;
    int32_t n = 0, n_owned = 0;
    if (!e || !owned) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate %d entries", cap);
        goto done;
    }
    for (int32_t i = 0; i < m->n_flat; i++) {
        e[n].name = m->flat[i].name;
        e[n++].tensor = m->flat[i].tensor;
    }
    if (opt && dlt__optimizer_kind(opt) == DLT__OPT_ADAM) {
        st = adam_entries(m, opt, e, &n, owned, &n_owned, &stepv, F);
        if (st != DLT_OK) goto done;
    }
    for (int32_t i = 0; opt && i < m->n_flat; i++) {
        if (!m->flat[i].is_param) continue;
        int32_t k = dlt__optimizer_param_index(opt, m->flat[i].tensor);
        dlt_tensor *buf = k >= 0 ? dlt_optimizer_momentum_buffer(opt, k) : NULL;
        if (!buf || first_name_of(m, i) != i) continue; /* tied: once, under the first name */
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
    for (int32_t i = 0; i < n_extra; i++) {
        e[n].name = extra_names[i];
        e[n++].tensor = extra[i];
    }
    st = dlt__safetensors_write(path, e, n, F);
done:
    for (int32_t i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(stepv);
    free(e);
    return st;
}

dlt_status dlt_checkpoint_save(const char *path, const dlt_module *m, dlt_optimizer *opt,
                               dlt_grad_scaler *scaler, int64_t epoch, int64_t step) {
    return checkpoint_save(path, m, opt, scaler, epoch, step, NULL, NULL, 0, "dlt_checkpoint_save");
}

dlt_status dlt_checkpoint_save_ex(const char *path, const dlt_module *m, dlt_optimizer *opt,
                                  dlt_grad_scaler *scaler, int64_t epoch, int64_t step,
                                  const char *const *extra_names, dlt_tensor *const *extra, int32_t n_extra) {
    return checkpoint_save(path, m, opt, scaler, epoch, step, extra_names, extra, n_extra,
                           "dlt_checkpoint_save_ex");
}

/* Reads a one-element numeric entry as a double. want_int: integer dtypes only; else
 * floating only. */
/* Reads a one-element numeric entry: want_int, an integer (I64/I32) into *i; else a float
 * (F64/F32) into *d. */
static dlt_status read_scalar(const dlt__st_file *f, const char *name, int want_int,
                              const char *func, double *d, int64_t *i) {
    const char *path = f->path;
    int32_t k = dlt__safetensors_find(f, name);
    if (k < 0) return dlt__err(DLT_ERR_FORMAT, func, "'%s' has no '%s'", path, name);
    const dlt__st_entry *e = &f->e[k];
    int ok_dtype = want_int ? (e->dtype == DLT_I64 || e->dtype == DLT_I32)
                            : (e->dtype == DLT__ST_F64 || e->dtype == DLT_F32);
    if (!ok_dtype || e->numel != 1)
        return dlt__err(DLT_ERR_FORMAT, func, "'%s' in '%s' must be one %s value, got %s with %lld "
                        "elements", name, path, want_int ? "integer (I64/I32)" : "float (F64/F32)",
                        e->dtype_name, (long long)e->numel);
    unsigned char b[8];
    DLT_CHECK(dlt__safetensors_read_entry(f, e, b, func));
    switch (e->dtype) {
    case DLT__ST_F64: memcpy(d, b, 8); break;
    case DLT_F32: { float v; memcpy(&v, b, 4); *d = v; break; }
    case DLT_I64: memcpy(i, b, 8); break; /* exact beyond 2^53 */
    default: { int32_t v; memcpy(&v, b, 4); *i = v; break; }
    }
    return DLT_OK;
}

static dlt_status read_f64(const dlt__st_file *f, const char *name, const char *func, double *out) {
    return read_scalar(f, name, 0, func, out, NULL);
}

static dlt_status read_i64(const dlt__st_file *f, const char *name, const char *func, int64_t *out) {
    return read_scalar(f, name, 1, func, NULL, out);
}

/* train.epoch / train.step: counts, never negative (a negative step made a resumed run
 * take more steps than asked for, a negative epoch failed later without naming the file) */
static dlt_status read_position(const dlt__st_file *f, const char *name, const char *func,
                                int64_t *out) {
    DLT_CHECK(read_i64(f, name, func, out));
    if (*out < 0)
        return dlt__err(DLT_ERR_FORMAT, func, "'%s' in '%s' is negative (%lld)", name, f->path,
                        (long long)*out);
    return DLT_OK;
}

typedef struct opt_state {
    double lr;
    int64_t steps;
    double group_lr[DLT_OPTIM_MAX_GROUPS]; /* Adam/AdamW groups >= 1 */
    int32_t *param_steps;                  /* Adam/AdamW: per parameter, 0 = no state (owned) */
} opt_state;

/* ---- Adam/AdamW state and parameter groups, load side ---- */
/* Index of the Adam key that name starts with ("optimizer.<key>."), -1 if none; *pname
 * receives the rest. */
static int adam_key_of(const char *name, const char **pname) {
    for (int k = 2; k >= 0; k--) { /* "exp_avg_sq." before "exp_avg." */
        char pre[40];
        snprintf(pre, sizeof pre, OPT_PREFIX "%s.", ADAM_KEY_NAME(k));
        if (has_prefix(name, pre)) {
            *pname = name + strlen(pre);
            return k;
        }
    }
    return -1;
}

/* Validates the Adam entries and plans the moment copies: every parameter with state has
 * all three keys, step an integral value >= 1; groups >= 1 have their lr. */
static dlt_status plan_adam(dlt_module *m, dlt_optimizer *opt, const dlt__st_file *f, dlt__load_plan *plan,
                            opt_state *os, const char *func) {
    const char *path = f->path;
    const int32_t np = dlt_optimizer_num_params(opt), ng = dlt_optimizer_num_param_groups(opt);
    for (int32_t g = 1; g < ng; g++) {
        char name[48];
        snprintf(name, sizeof name, OPT_PREFIX "param_groups.%d.lr", g);
        DLT_CHECK(read_f64(f, name, func, &os->group_lr[g]));
        if (!(os->group_lr[g] >= 0) || os->group_lr[g] > FLT_MAX)
            return dlt__err(DLT_ERR_FORMAT, func, "'%s' in '%s' is %g, not a valid lr", name, path,
                            os->group_lr[g]);
    }
    os->param_steps = calloc((size_t)(np ? np : 1), sizeof *os->param_steps);
    uint8_t *have = calloc((size_t)(np ? np : 1), 1); /* bit k: key k seen for parameter i */
    if (!os->param_steps || !have) {
        free(have);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %d step counts", np);
    }
    dlt_status st = DLT_OK;
    for (int32_t k = 0; k < f->n && st == DLT_OK; k++) {
        const dlt__st_entry *e = &f->e[k];
        if (!has_prefix(e->name, OPT_PREFIX) || strcmp(e->name, "optimizer.lr") == 0 ||
            strcmp(e->name, "optimizer.step_count") == 0)
            continue;
        const char *pname = NULL;
        const int key = adam_key_of(e->name, &pname);
        if (key < 0) {
            int gi = 0, len = 0;
            if (sscanf(e->name, OPT_PREFIX "param_groups.%d.lr%n", &gi, &len) == 1 &&
                e->name[len] == '\0' && gi >= 1 && gi < ng)
                continue; /* read above */
            st = dlt__err(DLT_ERR_FORMAT, func, "'%s' holds optimizer entry '%.200s', which the %s optimizer "
                          "does not have", path, e->name, dlt_optimizer_kind(opt));
            break;
        }
        const dlt__state_entry *s = NULL;
        for (int32_t i = 0; i < m->n_flat && !s; i++)
            if (m->flat[i].is_param && strcmp(m->flat[i].name, pname) == 0) s = &m->flat[i];
        const int32_t idx = s ? dlt__optimizer_param_index(opt, s->tensor) : -1;
        if (idx < 0) {
            st = dlt__err(DLT_ERR_FORMAT, func,
                          "'%s' holds '%.200s', but '%.200s' is not a parameter the optimizer updates",
                          path, e->name, pname);
            break;
        }
        if (have[idx] & (1u << key)) {
            st = dlt__err(DLT_ERR_FORMAT, func, "'%s' holds the %s of parameter '%.200s' twice (a tied "
                          "weight under two names?)", path, ADAM_KEY_NAME(key), pname);
            break;
        }
        have[idx] |= (uint8_t)(1u << key);
        if (key < 2) {
            st = dlt__check_entry(e, s->tensor, e->name, path, func);
            if (st == DLT_OK) st = dlt__plan_add(plan, f, NULL, e, idx, 1, m->ctx, func);
            if (st == DLT_OK) plan->ops[plan->n - 1].opt_slot = key;
            continue;
        }
        double v = 0;
        st = read_f64(f, e->name, func, &v);
        if (st == DLT_OK && !(v >= 1.0 && v <= (double)INT32_MAX && v == floor(v)))
            st = dlt__err(DLT_ERR_FORMAT, func, "'%.200s' in '%s' is %g, not a step count >= 1", e->name,
                          path, v);
        if (st == DLT_OK) os->param_steps[idx] = (int32_t)v;
    }
    for (int32_t i = 0; i < np && st == DLT_OK; i++)
        if (have[i] != 0 && have[i] != 7)
            st = dlt__err(DLT_ERR_FORMAT, func,
                          "'%s' holds only part of the Adam state of parameter %d (exp_avg, exp_avg_sq "
                          "and step go together)", path, i);
    free(have);
    return st;
}

/* After the moments were copied (commit) and the step count set: group lrs and the
 * per-parameter step counts (parameters absent from the file: 0, no state). */
static dlt_status commit_adam(dlt_optimizer *opt, const opt_state *os) {
    for (int32_t g = 1; g < dlt_optimizer_num_param_groups(opt); g++)
        DLT_CHECK(dlt__optimizer_set_group_lr_state(opt, g, os->group_lr[g]));
    return dlt__optimizer_set_param_steps(opt, os->param_steps);
}

static dlt_status plan_optimizer(dlt_module *m, dlt_optimizer *opt, const dlt__st_file *f,
                                 dlt__load_plan *plan, opt_state *os, const char *func) {
    const char *path = f->path;
    DLT_CHECK(check_opt_params(m, opt, func));
    DLT_CHECK(read_f64(f, "optimizer.lr", func, &os->lr));
    /* the optimizer keeps lr in fp32: an F64 lr beyond its range would become inf */
    if (!(os->lr >= 0) || os->lr > FLT_MAX)
        return dlt__err(DLT_ERR_FORMAT, func, "'optimizer.lr' in '%s' is %g, not a valid lr", path,
                        os->lr);
    DLT_CHECK(read_i64(f, "optimizer.step_count", func, &os->steps));
    if (os->steps < 0)
        return dlt__err(DLT_ERR_FORMAT, func, "'optimizer.step_count' in '%s' is negative (%lld)",
                        path, (long long)os->steps);
    if (dlt__optimizer_kind(opt) == DLT__OPT_ADAM) return plan_adam(m, opt, f, plan, os, func);
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
        DLT_CHECK(dlt__check_entry(e, s->tensor, e->name, path, func));
        DLT_CHECK(dlt__plan_add(plan, f, NULL, e, idx, 1, m->ctx, func));
    }
    return DLT_OK;
}

typedef struct scaler_state {
    double scale, gf, bf;
    int64_t gi, gt;
} scaler_state;

static dlt_status plan_scaler(const dlt__st_file *f, scaler_state *s, const char *func) {
    const char *path = f->path;
    DLT_CHECK(read_f64(f, "scaler.scale", func, &s->scale));
    DLT_CHECK(read_f64(f, "scaler.growth_factor", func, &s->gf));
    DLT_CHECK(read_f64(f, "scaler.backoff_factor", func, &s->bf));
    DLT_CHECK(read_i64(f, "scaler.growth_interval", func, &s->gi));
    DLT_CHECK(read_i64(f, "scaler._growth_tracker", func, &s->gt));
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
    DLT_CHECK(dlt__safetensors_open(path, F, &file));
    dlt__load_plan plan = {0};
    opt_state os = {0};
    scaler_state ss = {0};
    int64_t ep = 0, sp = 0;
    const int use_scaler = scaler && dlt_grad_scaler_is_enabled(scaler);
    dlt_status st = DLT_OK;
    /* validate and stage everything */
    if (st == DLT_OK) st = dlt__plan_module(m, &file, 1, NULL, NULL, &plan, NULL, F);
    if (st == DLT_OK && opt) st = plan_optimizer(m, opt, &file, &plan, &os, F);
    if (st == DLT_OK && use_scaler) st = plan_scaler(&file, &ss, F);
    if (st == DLT_OK && epoch) st = read_position(&file, "train.epoch", F, &ep);
    if (st == DLT_OK && step) st = read_position(&file, "train.step", F, &sp);
    /* then change things */
    if (st == DLT_OK) st = dlt__commit(m, opt, &plan, F);
    if (st == DLT_OK && opt) {
        st = dlt__optimizer_set_state(opt, os.lr, os.steps);
        if (st == DLT_OK && dlt__optimizer_kind(opt) == DLT__OPT_ADAM) st = commit_adam(opt, &os);
        if (st != DLT_OK) st = dlt__err_wrap(st, F);
    }
    if (st == DLT_OK && use_scaler) {
        st = dlt_grad_scaler_set_state(scaler, ss.scale, ss.gf, ss.bf, (int32_t)ss.gi,
                                       (int32_t)ss.gt);
        if (st != DLT_OK) st = dlt__err_wrap(st, F);
    }
    if (st == DLT_OK && epoch) *epoch = ep;
    if (st == DLT_OK && step) *step = sp;
    dlt__plan_free(&plan);
    free(os.param_steps);
    dlt__safetensors_free(&file);
    return st;
}
