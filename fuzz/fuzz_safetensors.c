/*
 * fuzz_safetensors.c - fuzz target for the safetensors reader (lib/io/safetensors.c) and
 * the checkpoint loaders over it (lib/io/checkpoint.c), through the public API. The input
 * bytes are one checkpoint file.
 *
 * Set up once: a CPU context, a small net (Sequential conv 3->4 3x3 with bias, BatchNorm2d,
 * ReLU, global average pool, flatten, linear 4->3: the names "conv.weight" ... "fc.bias"),
 * the same net in channels-last (loads stage through a format conversion), an SGD
 * optimizer with momentum and an enabled GradScaler over the first net, one training step
 * (so momentum buffers hold data and BatchNorm counted a batch), a second SGD optimizer
 * without momentum and a disabled GradScaler, and baseline files saved by the library.
 *
 * Per input, with the rules checked:
 *  - dlt_module_load into both nets: DLT_OK, DLT_ERR_FORMAT, DLT_ERR_SHAPE or DLT_ERR_DTYPE
 *    (a valid file that does not fit), the same for both (the
 *    format does not change what is accepted); a refusal leaves the net unchanged (hash of
 *    every state tensor, its dtype and shape) and names the function; an accepted file
 *    leaves every state tensor equal to what dlt_safetensors_load_tensor reads for its name;
 *  - dlt_checkpoint_load(m only): the same status as dlt_module_load;
 *  - dlt_checkpoint_load(m, optimizer, scaler, &epoch, &step): DLT_OK or a refusal as above,
 *    never DLT_OK when the module part was refused; a refusal changes nothing (net, lr,
 *    step count, momentum buffers, scaler state, *epoch, *step); success gives the file's
 *    train.epoch, train.step and optimizer.step_count, and an lr and a scale that are
 *    finite (and not negative) as the optimizer and scaler hold them (in fp32);
 *  - dlt_checkpoint_load(m, momentum-0 optimizer, disabled scaler, &epoch, NULL): the same
 *    rules (a file with momentum buffers is refused, scaler entries are ignored);
 *  - dlt_safetensors_load_tensor for a few fixed names and up to three names found in the
 *    header: DLT_OK, DLT_ERR_FORMAT, DLT_ERR_INVALID_ARGUMENT (no such name) or
 *    DLT_ERR_DTYPE; whether the file is corrupt (DLT_ERR_FORMAT) must not depend on the
 *    name, and a file a net accepted is not corrupt; a loaded tensor saved again with
 *    dlt_safetensors_save reads back identical;
 *  - dlt_safetensors_open: refuses exactly the files the readers above find corrupt; an
 *    accepted file lists exactly the top-level keys an independent strict JSON decoder
 *    reads from the raw header, byte for byte (a NUL or any other decoding difference
 *    would show: issue 20 item 9 as a class), and info/get agree with load_tensor;
 *  - dlt_module_load_ex non-strict: refused only for a corrupt file; every entry the report
 *    lists as missing or mismatched is unchanged, every other one equals the file, and
 *    loaded + skipped = all; strict under the prefix "fc.": a refusal changes nothing, an
 *    accepted load gives fc.weight and fc.bias the file's values.
 * After an accepted load the nets, optimizer and scaler are restored from the baselines
 * (and checked against the start-up hashes), so every input starts from the same state.
 */
#include "fuzz_common.h"

#define ST_MAX_NAME 256
#define ST_SCANNED 3

static struct {
    dlt_ctx *ctx;
    dlt_module *m, *mcl; /* contiguous and channels-last nets */
    dlt_optimizer *opt, *opt0; /* momentum 0.9 / momentum 0 (no buffers) */
    dlt_grad_scaler *sc, *sc_off; /* enabled / disabled (ignores the scaler entries) */
    char dir[512], in[1024], base[1024], base0[1024], base_cl[1024], out[1024];
    uint64_t h_init, hcl_init;
    int64_t runs, accepted; /* inputs run, inputs dlt_checkpoint_load accepted in full */
    int64_t accepted0;      /* ... accepted into the momentum-0 optimizer */
} st_g;

static dlt_status st_net(dlt_ctx *ctx, dlt_module **out) {
    dlt_module *seq = NULL, *c = NULL;
    *out = NULL;
    dlt_status st = dlt_sequential_create(ctx, &seq);
    if (st == DLT_OK) st = dlt_conv2d_create(ctx, 3, 4, 3, 3, 1, 1, 1, 1, 1, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, "conv", c);
    if (st == DLT_OK) st = dlt_batchnorm2d_create(ctx, 4, 1e-5, 0.1, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, "bn", c);
    if (st == DLT_OK) st = dlt_relu_create(ctx, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, c);
    if (st == DLT_OK) st = dlt_global_avg_pool2d_create(ctx, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, c);
    if (st == DLT_OK) st = dlt_flatten_create(ctx, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, NULL, c);
    if (st == DLT_OK) st = dlt_linear_create(ctx, 4, 3, 1, &c);
    if (st == DLT_OK) st = dlt_sequential_append(seq, "fc", c);
    if (st != DLT_OK) {
        dlt_module_destroy(seq);
        return st;
    }
    *out = seq;
    return DLT_OK;
}

/* Hash of a net's state: names, dtypes, shapes, formats, bytes. 0 when a read failed. */
static uint64_t st_hash_module(const dlt_module *m) {
    uint64_t h = DLTFZ_HASH_INIT;
    for (int32_t i = 0; i < dlt_module_num_state(m); i++) {
        const char *name = NULL;
        dlt_tensor *t = NULL;
        if (dlt_module_state_entry(m, i, &name, &t, NULL) != DLT_OK) return 0;
        h = dltfz_hash(h, name, strlen(name) + 1);
        if (!(h = dltfz_hash_tensor(h, t))) return 0;
    }
    return h;
}

/* Hash of everything dlt_checkpoint_load may change: the first net, the optimizers' lr,
 * step count and momentum buffers, the scalers' five fields. */
static uint64_t st_hash_training(void) {
    uint64_t h = st_hash_module(st_g.m);
    if (!h) return 0;
    double lr = 0, scale = 0, gf = 0, bf = 0;
    int64_t steps = 0;
    int32_t gi = 0, gt = 0;
    if (dlt_optimizer_get_lr(st_g.opt, &lr) != DLT_OK ||
        dlt_optimizer_step_count(st_g.opt, &steps) != DLT_OK ||
        dlt_grad_scaler_get_state(st_g.sc, &scale, &gf, &bf, &gi, &gt) != DLT_OK)
        return 0;
    double d[4] = {lr, scale, gf, bf};
    int64_t k[3] = {steps, gi, gt};
    h = dltfz_hash(h, d, sizeof d);
    h = dltfz_hash(h, k, sizeof k);
    if (dlt_optimizer_get_lr(st_g.opt0, &lr) != DLT_OK ||
        dlt_optimizer_step_count(st_g.opt0, &steps) != DLT_OK ||
        dlt_grad_scaler_get_scale(st_g.sc_off, &scale) != DLT_OK)
        return 0;
    double d0[3] = {lr, (double)steps, scale};
    h = dltfz_hash(h, d0, sizeof d0);
    if (dlt_optimizer_momentum_buffer(st_g.opt0, 0)) return 0; /* momentum 0: never any */
    for (int32_t i = 0; i < dlt_optimizer_num_params(st_g.opt); i++)
        if (!(h = dltfz_hash_tensor(h, dlt_optimizer_momentum_buffer(st_g.opt, i)))) return 0;
    return h;
}

/* A contiguous copy of t's bytes (logical order) in a new host buffer, or NULL. */
static unsigned char *st_logical_bytes(const dlt_tensor *t, size_t *n) {
    dlt_tensor *c = NULL;
    const dlt_tensor *src = t;
    if (dlt_tensor_format(t) != DLT_FORMAT_CONTIGUOUS) {
        if (dlt_tensor_to_format(t, DLT_FORMAT_CONTIGUOUS, &c) != DLT_OK) return NULL;
        src = c;
    }
    *n = dlt_tensor_nbytes(src);
    unsigned char *p = malloc(*n ? *n : 1);
    if (p && dlt_tensor_copy_to_host(src, p, *n) != DLT_OK) {
        free(p);
        p = NULL;
    }
    dlt_tensor_release(c);
    return p;
}

/* 1 when a and b have the same dtype, shape and logical bytes. */
static int st_same_tensor(const dlt_tensor *a, const dlt_tensor *b) {
    int64_t sa[DLT_MAX_DIMS], sb[DLT_MAX_DIMS];
    int32_t na = dlt_tensor_shape(a, sa, DLT_MAX_DIMS), nb = dlt_tensor_shape(b, sb, DLT_MAX_DIMS);
    if (dlt_tensor_dtype(a) != dlt_tensor_dtype(b) || na != nb || na < 0 ||
        memcmp(sa, sb, (size_t)na * sizeof sa[0]) != 0)
        return 0;
    size_t la = 0, lb = 0;
    unsigned char *pa = st_logical_bytes(a, &la), *pb = st_logical_bytes(b, &lb);
    int same = pa && pb && la == lb && memcmp(pa, pb, la) == 0;
    free(pa);
    free(pb);
    return same;
}

/* After an accepted load: every state tensor of m equals the file's tensor of its name. */
static int st_verify_module(const dlt_module *m, const char *path, const char *what, char *err,
                            size_t n) {
    for (int32_t i = 0; i < dlt_module_num_state(m); i++) {
        const char *name = NULL;
        dlt_tensor *t = NULL, *f = NULL;
        if (dlt_module_state_entry(m, i, &name, &t, NULL) != DLT_OK)
            return dltfz_fail(err, n, "dlt_module_state_entry: %s", dlt_last_error());
        dlt_status st = dlt_safetensors_load_tensor(st_g.ctx, path, name, &f);
        if (st != DLT_OK)
            return dltfz_fail(err, n, "%s accepted the file but dlt_safetensors_load_tensor('%s') "
                              "returned %d: %.300s", what, name, st, dlt_last_error());
        int same = st_same_tensor(t, f);
        dlt_tensor_release(f);
        if (!same)
            return dltfz_fail(err, n, "%s accepted the file but '%s' differs from the file", what,
                              name);
    }
    return 0;
}

/* An integer scalar entry of the file (I64 or I32, one element), 0 when it cannot be read. */
static int st_read_int(const char *path, const char *name, int64_t *out) {
    dlt_tensor *t = NULL;
    if (dlt_safetensors_load_tensor(st_g.ctx, path, name, &t) != DLT_OK) return 0;
    int ok = dlt_tensor_numel(t) == 1;
    if (ok && dlt_tensor_dtype(t) == DLT_I64) {
        ok = dlt_tensor_copy_to_host(t, out, 8) == DLT_OK;
    } else if (ok && dlt_tensor_dtype(t) == DLT_I32) {
        int32_t v = 0;
        ok = dlt_tensor_copy_to_host(t, &v, 4) == DLT_OK;
        *out = v;
    } else {
        ok = 0;
    }
    dlt_tensor_release(t);
    return ok;
}

/* Up to max names that appear as keys ("...":) in the header, JSON escapes \" \\ \/ undone;
 * the format's own keys are skipped. Raw bytes: a name with other escapes just misses. */
static int st_scan_names(const uint8_t *d, size_t size, char names[][ST_MAX_NAME], int max) {
    if (size < 8) return 0;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | d[i];
    if (hlen > size - 8) hlen = size - 8;
    const uint8_t *p = d + 8, *end = d + 8 + hlen;
    int found = 0;
    while (p < end && found < max) {
        if (*p++ != '"') continue;
        char buf[ST_MAX_NAME];
        size_t k = 0;
        while (p < end && *p != '"') {
            uint8_t c = *p++;
            if (c == '\\' && p < end) c = *p++;
            if (k + 1 < sizeof buf) buf[k++] = (char)c;
        }
        if (p >= end) break;
        p++; /* closing quote */
        buf[k] = '\0';
        const uint8_t *q = p;
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
        if (q >= end || *q != ':') continue;
        if (!strcmp(buf, "dtype") || !strcmp(buf, "shape") || !strcmp(buf, "data_offsets") ||
            !strcmp(buf, "__metadata__"))
            continue;
        memcpy(names[found++], buf, k + 1);
    }
    return found;
}

static DLTFZ_UNUSED void dltfz_safetensors_fini(void) {
    dlt_grad_scaler_destroy(st_g.sc);
    dlt_grad_scaler_destroy(st_g.sc_off);
    dlt_optimizer_destroy(st_g.opt);
    dlt_optimizer_destroy(st_g.opt0);
    dlt_module_destroy(st_g.m);
    dlt_module_destroy(st_g.mcl);
    dlt_ctx_destroy(st_g.ctx);
    dltfz_remove_tree(st_g.dir);
    memset(&st_g, 0, sizeof st_g);
}

static DLTFZ_UNUSED int dltfz_safetensors_init(char *err, size_t n) {
    if (st_g.ctx) return 0;
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &st_g.ctx) != DLT_OK)
        return dltfz_fail(err, n, "dlt_ctx_create: %s", dlt_last_error());
    if (dltfz_make_dir(st_g.dir, sizeof st_g.dir, "safetensors") != 0) {
        dltfz_safetensors_fini();
        return dltfz_fail(err, n, "cannot create a temporary directory");
    }
    snprintf(st_g.in, sizeof st_g.in, "%s/in.safetensors", st_g.dir);
    snprintf(st_g.base, sizeof st_g.base, "%s/baseline.safetensors", st_g.dir);
    snprintf(st_g.base0, sizeof st_g.base0, "%s/baseline-momentum0.safetensors", st_g.dir);
    snprintf(st_g.base_cl, sizeof st_g.base_cl, "%s/baseline-cl.safetensors", st_g.dir);
    snprintf(st_g.out, sizeof st_g.out, "%s/out.safetensors", st_g.dir);
    dlt_tensor *params[8] = {0}, *x = NULL, *y = NULL, *logits = NULL, *loss = NULL, *scaled = NULL;
    int32_t np = 0;
    const int64_t xs[4] = {2, 3, 5, 5}, ys = 2;
    const int32_t yv[2] = {0, 2};
    dlt_status st = dlt_ctx_set_seed(st_g.ctx, 1);
    if (st == DLT_OK) st = st_net(st_g.ctx, &st_g.m);
    if (st == DLT_OK) st = st_net(st_g.ctx, &st_g.mcl);
    if (st == DLT_OK) st = dlt_module_set_format(st_g.mcl, DLT_FORMAT_CHANNELS_LAST);
    if (st == DLT_OK) st = dlt_module_params(st_g.m, params, 8, &np);
    if (st == DLT_OK) st = dlt_sgd_create(params, np, 0.05, 0.9, 0, 1e-4, 0, 0, &st_g.opt);
    if (st == DLT_OK) st = dlt_grad_scaler_create(st_g.ctx, 1024, 2, 0.5, 3, 1, &st_g.sc);
    if (st == DLT_OK) st = dlt_sgd_create(params, np, 0.25, 0, 0, 0, 0, 0, &st_g.opt0);
    if (st == DLT_OK) st = dlt_grad_scaler_create(st_g.ctx, 65536, 2, 0.5, 2000, 0, &st_g.sc_off);
    /* one step: momentum buffers hold data, BatchNorm statistics move */
    if (st == DLT_OK) st = dlt_tensor_empty(st_g.ctx, DLT_F32, xs, 4, DLT_FORMAT_CONTIGUOUS, &x);
    if (st == DLT_OK) st = dlt_tensor_rand_uniform(x, 0, 1);
    if (st == DLT_OK) st = dlt_tensor_from_host(st_g.ctx, DLT_I32, &ys, 1, DLT_FORMAT_CONTIGUOUS, yv, sizeof yv, &y);
    if (st == DLT_OK) st = dlt_module_forward(st_g.m, x, &logits);
    if (st == DLT_OK) st = dlt_cross_entropy(logits, y, -100, DLT_REDUCTION_MEAN, &loss);
    if (st == DLT_OK) st = dlt_grad_scaler_scale(st_g.sc, loss, &scaled);
    if (st == DLT_OK) st = dlt_backward(scaled, NULL);
    if (st == DLT_OK) st = dlt_grad_scaler_step(st_g.sc, st_g.opt);
    if (st == DLT_OK) st = dlt_grad_scaler_update(st_g.sc);
    if (st == DLT_OK) st = dlt_optimizer_zero_grad(st_g.opt, 1);
    if (st == DLT_OK) st = dlt_checkpoint_save(st_g.base, st_g.m, st_g.opt, st_g.sc, 3, 17);
    if (st == DLT_OK) st = dlt_checkpoint_save(st_g.base0, st_g.m, st_g.opt0, st_g.sc_off, 0, 0);
    if (st == DLT_OK) st = dlt_module_save(st_g.mcl, st_g.base_cl);
    dlt_tensor_release(x);
    dlt_tensor_release(y);
    dlt_tensor_release(logits);
    dlt_tensor_release(loss);
    dlt_tensor_release(scaled);
    if (st != DLT_OK) {
        dltfz_fail(err, n, "set-up failed: %s", dlt_last_error());
        dltfz_safetensors_fini();
        return 1;
    }
    st_g.h_init = st_hash_training();
    st_g.hcl_init = st_hash_module(st_g.mcl);
    if (!st_g.h_init || !st_g.hcl_init) {
        dltfz_fail(err, n, "cannot read the initial state: %s", dlt_last_error());
        dltfz_safetensors_fini();
        return 1;
    }
    return 0;
}

/* The baseline files, for the seed generator (fuzz/gen_seeds.c) and tests. */
static DLTFZ_UNUSED const char *dltfz_safetensors_baseline(void) { return st_g.base; }
static DLTFZ_UNUSED const char *dltfz_safetensors_baseline0(void) { return st_g.base0; }

/* Back to the start-up state after an accepted load. */
static int st_restore(char *err, size_t n) {
    dlt_status st = dlt_checkpoint_load(st_g.base0, st_g.m, st_g.opt0, NULL, NULL, NULL);
    if (st != DLT_OK) return dltfz_fail(err, n, "restoring the momentum-0 baseline: %s", dlt_last_error());
    st = dlt_checkpoint_load(st_g.base, st_g.m, st_g.opt, st_g.sc, NULL, NULL);
    if (st != DLT_OK) return dltfz_fail(err, n, "restoring the baseline: %s", dlt_last_error());
    st = dlt_module_load(st_g.mcl, st_g.base_cl);
    if (st != DLT_OK) return dltfz_fail(err, n, "restoring the channels-last baseline: %s", dlt_last_error());
    if (st_hash_training() != st_g.h_init || st_hash_module(st_g.mcl) != st_g.hcl_init)
        return dltfz_fail(err, n, "the baselines did not restore the start-up state");
    return 0;
}

/* ---- an independent reader of the header's top-level keys ----
 * Decodes every key of the top-level object of the raw header as a strict JSON string
 * (escapes, \uXXXX with surrogate pairs, to UTF-8; raw control bytes refused), skipping
 * values (numbers leniently: cJSON is lenient there, and a number's spelling cannot change
 * a name). A file the library accepts must list exactly these names, byte for byte:
 * the class of issue 20 item 9 (cJSON's decoding and another reader's disagreeing on a
 * name), not only its NUL instance. */

#define ST_MAX_KEYS 256

typedef struct st_keys {
    int n;
    size_t len[ST_MAX_KEYS];
    char key[ST_MAX_KEYS][ST_MAX_NAME];
} st_keys;

typedef struct st_cursor {
    const uint8_t *p, *end;
} st_cursor;

static void st_ws(st_cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int st_hex4(st_cursor *c, unsigned *out) {
    if (c->end - c->p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t h = c->p[i];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + (unsigned)d;
    }
    c->p += 4;
    *out = v;
    return 0;
}

/* A string at c->p (opening quote included) into buf (up to cap bytes kept; *len the full
 * decoded length). -1 when it is not a valid JSON string. */
static int st_string(st_cursor *c, char *buf, size_t cap, size_t *len) {
    size_t k = 0;
    if (c->p >= c->end || *c->p != '"') return -1;
    c->p++;
    for (;;) {
        if (c->p >= c->end) return -1;
        uint8_t ch = *c->p++;
        unsigned cp;
        if (ch == '"') break;
        if (ch < 0x20) return -1;
        if (ch != '\\') {
            if (k < cap) buf[k] = (char)ch;
            k++;
            continue;
        }
        if (c->p >= c->end) return -1;
        ch = *c->p++;
        switch (ch) {
        case '"': case '\\': case '/': cp = ch; break;
        case 'b': cp = 8; break;
        case 'f': cp = 12; break;
        case 'n': cp = 10; break;
        case 'r': cp = 13; break;
        case 't': cp = 9; break;
        case 'u': {
            if (st_hex4(c, &cp)) return -1;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
                unsigned lo;
                if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u') return -1;
                c->p += 2;
                if (st_hex4(c, &lo) || lo < 0xDC00 || lo > 0xDFFF) return -1;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return -1;
            }
            break;
        }
        default: return -1;
        }
        uint8_t u[4];
        int nb = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (nb == 1) u[0] = (uint8_t)cp;
        else if (nb == 2) u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3F));
        else if (nb == 3)
            u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)), u[2] = (uint8_t)(0x80 | (cp & 0x3F));
        else
            u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F)),
            u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (uint8_t)(0x80 | (cp & 0x3F));
        for (int i = 0; i < nb; i++, k++)
            if (k < cap) buf[k] = (char)u[i];
    }
    *len = k;
    return 0;
}

static int st_value(st_cursor *c, int depth) {
    char tmp[8];
    size_t l;
    st_ws(c);
    if (c->p >= c->end || depth > 64) return -1;
    uint8_t ch = *c->p;
    if (ch == '"') return st_string(c, tmp, 0, &l);
    if (ch == '{' || ch == '[') {
        const uint8_t close = ch == '{' ? '}' : ']';
        c->p++;
        st_ws(c);
        if (c->p < c->end && *c->p == close) return c->p++, 0;
        for (;;) {
            if (ch == '{') {
                st_ws(c);
                if (st_string(c, tmp, 0, &l)) return -1;
                st_ws(c);
                if (c->p >= c->end || *c->p++ != ':') return -1;
            }
            if (st_value(c, depth + 1)) return -1;
            st_ws(c);
            if (c->p >= c->end) return -1;
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p++ != close) return -1;
            return 0;
        }
    }
    const uint8_t *start = c->p; /* a number or a literal, leniently */
    while (c->p < c->end && (strchr("+-.eE0123456789", *c->p) || (*c->p >= 'a' && *c->p <= 'z'))) c->p++;
    return c->p > start ? 0 : -1;
}

/* The top-level keys of the header; -1 when it is not a JSON object. */
static int st_decode_keys(const uint8_t *d, size_t size, st_keys *k) {
    k->n = 0;
    if (size < 8) return -1;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | d[i];
    if (hlen > size - 8) return -1;
    st_cursor c = {d + 8, d + 8 + hlen};
    st_ws(&c);
    if (c.p >= c.end || *c.p++ != '{') return -1;
    st_ws(&c);
    if (c.p < c.end && *c.p == '}') return 0;
    for (;;) {
        st_ws(&c);
        if (k->n == ST_MAX_KEYS) return -1;
        if (st_string(&c, k->key[k->n], ST_MAX_NAME - 1, &k->len[k->n])) return -1;
        k->key[k->n][k->len[k->n] < ST_MAX_NAME - 1 ? k->len[k->n] : ST_MAX_NAME - 1] = '\0';
        k->n++;
        st_ws(&c);
        if (c.p >= c.end || *c.p++ != ':' || st_value(&c, 0)) return -1;
        st_ws(&c);
        if (c.p >= c.end) return -1;
        if (*c.p == ',') {
            c.p++;
            continue;
        }
        return *c.p == '}' ? 0 : -1;
    }
}

/* The file handle: the same verdict as the other readers; an accepted file lists exactly
 * the names an independent reader decodes, describes each tensor as it reads, and reads
 * each as dlt_safetensors_load_tensor does. */
static int st_check_handle(const uint8_t *data, size_t size, int corrupt, char *err, size_t n) {
    const char *in = st_g.in;
    dlt_safetensors *f = NULL;
    dlt_clear_error();
    dlt_status s = dlt_safetensors_open(in, &f);
    if (!dltfz_status_in(s, 2, DLT_OK, DLT_ERR_FORMAT))
        return dltfz_fail(err, n, "dlt_safetensors_open returned %d: %.300s", s, dlt_last_error());
    if (s != DLT_OK) {
        if (dltfz_check_message(s, "dlt_safetensors_open", err, n)) return 1;
        if (f) return dltfz_fail(err, n, "a refused dlt_safetensors_open made a handle");
        if (!corrupt)
            return dltfz_fail(err, n, "dlt_safetensors_open refused a file the other readers accept: %.300s",
                              dlt_last_error());
        return 0;
    }
    int bad = 0;
    if (corrupt) bad = dltfz_fail(err, n, "dlt_safetensors_open accepted a file the other readers refuse");
    st_keys *keys = calloc(1, sizeof *keys);
    if (!bad && (!keys || st_decode_keys(data, size, keys) != 0))
        bad = dltfz_fail(err, n, "the library accepted a header whose keys a strict JSON reader cannot decode");
    const int32_t nt = dlt_safetensors_num_tensors(f);
    int n_keys = 0;
    for (int i = 0; !bad && i < keys->n; i++) {
        if (keys->len[i] == 12 && memcmp(keys->key[i], "__metadata__", 12) == 0) continue;
        n_keys++;
        int found = 0;
        for (int32_t j = 0; j < nt && !found; j++) {
            const char *nm = dlt_safetensors_name(f, j);
            found = nm && strlen(nm) == keys->len[i] && (keys->len[i] >= ST_MAX_NAME - 1 ||
                                                         memcmp(nm, keys->key[i], keys->len[i]) == 0);
        }
        if (!found)
            bad = dltfz_fail(err, n, "the header's key '%.200s' (%zu bytes) is not a name the library "
                             "lists (%d names)", keys->key[i], keys->len[i], nt);
    }
    if (!bad && n_keys != nt)
        bad = dltfz_fail(err, n, "the library lists %d tensors, the header has %d keys", nt, n_keys);
    for (int32_t j = 0; !bad && j < nt && j < 8; j++) {
        const char *nm = dlt_safetensors_name(f, j);
        int32_t dt = 0, nd = -1;
        int64_t shape[DLT_MAX_DIMS];
        dlt_tensor *a = NULL, *b = NULL;
        if (dlt_safetensors_info(f, nm, &dt, shape, DLT_MAX_DIMS, &nd) != DLT_OK || nd < 0 || nd > DLT_MAX_DIMS ||
            !dlt_safetensors_dtype_name(f, nm)) {
            bad = dltfz_fail(err, n, "dlt_safetensors_info('%s') failed: %.300s", nm, dlt_last_error());
            break;
        }
        dlt_status g1 = dlt_safetensors_get(f, st_g.ctx, nm, &a);
        dlt_status g2 = dlt_safetensors_load_tensor(st_g.ctx, in, nm, &b);
        if (g1 != g2 || (dt < 0) != (g1 == DLT_ERR_DTYPE) || (g1 != DLT_OK && g1 != DLT_ERR_DTYPE))
            bad = dltfz_fail(err, n, "tensor '%s' (dtype %d): dlt_safetensors_get %d, load_tensor %d: %.300s", nm,
                             dt, g1, g2, dlt_last_error());
        else if (g1 == DLT_OK) {
            int64_t ts[DLT_MAX_DIMS];
            if (dlt_tensor_dtype(a) != dt || dlt_tensor_shape(a, ts, DLT_MAX_DIMS) != nd ||
                memcmp(ts, shape, (size_t)nd * sizeof ts[0]) != 0 || !st_same_tensor(a, b))
                bad = dltfz_fail(err, n, "tensor '%s': dlt_safetensors_get disagrees with info or load_tensor", nm);
        }
        dlt_tensor_release(a);
        dlt_tensor_release(b);
    }
    free(keys);
    dlt_safetensors_close(f);
    return bad;
}

/* A non-strict load (and a strict one under prefixes): refused only for a corrupt file;
 * what the report lists as skipped is unchanged, everything else equals the file. */
static int st_check_non_strict(const char *in, int corrupt, char *err, size_t n, int *dirty) {
    const int32_t ns = dlt_module_num_state(st_g.m);
    uint64_t before[64];
    for (int32_t i = 0; i < ns && i < 64; i++) {
        dlt_tensor *t = NULL;
        if (dlt_module_state_entry(st_g.m, i, NULL, &t, NULL) != DLT_OK) return dltfz_fail(err, n, "state entry");
        before[i] = dltfz_hash_tensor(DLTFZ_HASH_INIT, t);
    }
    const uint64_t h0 = st_hash_training();
    dlt_module_load_options o;
    dlt_module_load_options_default(&o);
    o.strict = 0;
    dlt_load_report *r = NULL;
    dlt_clear_error();
    dlt_status s = dlt_module_load_ex(st_g.m, in, &o, &r);
    if (!dltfz_status_in(s, 2, DLT_OK, DLT_ERR_FORMAT) || (s == DLT_OK) == corrupt)
        return dltfz_fail(err, n, "a non-strict dlt_module_load_ex returned %d for a %s file: %.300s", s,
                          corrupt ? "corrupt" : "valid", dlt_last_error());
    if (s != DLT_OK) {
        if (dltfz_check_message(s, "dlt_module_load_ex", err, n)) return 1;
        if (r) return dltfz_fail(err, n, "a refused load made a report");
        if (st_hash_training() != h0) return dltfz_fail(err, n, "a refused non-strict load changed the net");
        return 0;
    }
    *dirty = 1;
    int bad = 0, skipped = 0;
    for (int32_t i = 0; !bad && i < ns && i < 64; i++) {
        const char *name = NULL;
        dlt_tensor *t = NULL, *f = NULL;
        if (dlt_module_state_entry(st_g.m, i, &name, &t, NULL) != DLT_OK) {
            bad = dltfz_fail(err, n, "state entry");
            break;
        }
        int listed = 0;
        for (int k = DLT_LOAD_MISSING; k <= DLT_LOAD_MISMATCHED; k += 2)
            for (int32_t j = 0; j < dlt_load_report_count(r, k); j++)
                listed |= strcmp(dlt_load_report_name(r, k, j), name) == 0;
        skipped += listed;
        if (listed) {
            if (dltfz_hash_tensor(DLTFZ_HASH_INIT, t) != before[i])
                bad = dltfz_fail(err, n, "'%s' was reported skipped but changed", name);
        } else if (dlt_safetensors_load_tensor(st_g.ctx, in, name, &f) != DLT_OK || !st_same_tensor(t, f)) {
            bad = dltfz_fail(err, n, "'%s' was loaded non-strictly but differs from the file", name);
        }
        dlt_tensor_release(f);
    }
    if (!bad && dlt_load_report_num_loaded(r) + skipped != ns)
        bad = dltfz_fail(err, n, "report: %d loaded + %d skipped != %d entries", dlt_load_report_num_loaded(r),
                         skipped, ns);
    dlt_load_report_destroy(r);
    if (bad) return 1;
    /* strictly, the classifier alone: only "fc." entries take part */
    const uint64_t hcl = st_hash_module(st_g.mcl);
    dlt_module_load_options_default(&o);
    o.file_prefix = o.module_prefix = "fc.";
    dlt_clear_error();
    s = dlt_module_load_ex(st_g.mcl, in, &o, NULL);
    if (!dltfz_status_in(s, 4, DLT_OK, DLT_ERR_FORMAT, DLT_ERR_SHAPE, DLT_ERR_DTYPE))
        return dltfz_fail(err, n, "dlt_module_load_ex(prefix fc.) returned %d: %.300s", s, dlt_last_error());
    if (s != DLT_OK) {
        if (dltfz_check_message(s, "dlt_module_load_ex", err, n)) return 1;
        if (st_hash_module(st_g.mcl) != hcl) return dltfz_fail(err, n, "a refused prefixed load changed the net");
        return 0;
    }
    const char *fc[2] = {"fc.weight", "fc.bias"};
    for (int i = 0; i < 2; i++) {
        dlt_tensor *t = NULL, *f = NULL;
        int same = dlt_module_find(st_g.mcl, fc[i], &t) == DLT_OK &&
                   dlt_safetensors_load_tensor(st_g.ctx, in, fc[i], &f) == DLT_OK && st_same_tensor(t, f);
        dlt_tensor_release(f);
        if (!same) return dltfz_fail(err, n, "a prefixed load accepted the file but '%s' differs from it", fc[i]);
    }
    return 0;
}

static int st_run_body(const uint8_t *data, size_t size, char *err, size_t n, int *dirty) {
    const char *in = st_g.in;
    if (dltfz_write_file(in, data, size) != 0) return dltfz_fail(err, n, "cannot write %s", in);
    const uint64_t h0 = st_hash_training(), hcl0 = st_hash_module(st_g.mcl);
    if (h0 != st_g.h_init || hcl0 != st_g.hcl_init)
        return dltfz_fail(err, n, "the state differs from the start-up state before the input");

    /* dlt_module_load, both nets */
    dlt_clear_error();
    dlt_status s_mod = dlt_module_load(st_g.m, in);
    if (!dltfz_status_in(s_mod, 4, DLT_OK, DLT_ERR_FORMAT, DLT_ERR_SHAPE, DLT_ERR_DTYPE))
        return dltfz_fail(err, n, "dlt_module_load returned %d: %.300s", s_mod, dlt_last_error());
    if (s_mod != DLT_OK) {
        if (dltfz_check_message(s_mod, "dlt_module_load", err, n)) return 1;
        if (st_hash_training() != h0)
            return dltfz_fail(err, n, "a refused dlt_module_load changed the net: %.300s", dlt_last_error());
    } else {
        *dirty = 1;
        if (st_verify_module(st_g.m, in, "dlt_module_load", err, n)) return 1;
    }
    dlt_clear_error();
    dlt_status s_cl = dlt_module_load(st_g.mcl, in);
    if (s_cl != s_mod)
        return dltfz_fail(err, n, "dlt_module_load returned %d for the channels-last net, %d for the "
                          "contiguous one: %.300s", s_cl, s_mod, dlt_last_error());
    if (s_cl != DLT_OK) {
        if (dltfz_check_message(s_cl, "dlt_module_load", err, n)) return 1;
        if (st_hash_module(st_g.mcl) != hcl0)
            return dltfz_fail(err, n, "a refused dlt_module_load changed the channels-last net");
    } else {
        *dirty = 1;
        if (st_verify_module(st_g.mcl, in, "dlt_module_load (channels-last)", err, n)) return 1;
    }

    /* dlt_checkpoint_load of the module alone: what dlt_module_load accepts */
    uint64_t hb = st_hash_training();
    dlt_clear_error();
    dlt_status s = dlt_checkpoint_load(in, st_g.m, NULL, NULL, NULL, NULL);
    if (s != s_mod)
        return dltfz_fail(err, n, "dlt_checkpoint_load(module only) returned %d, dlt_module_load %d: "
                          "%.300s", s, s_mod, dlt_last_error());
    if (s != DLT_OK) {
        if (dltfz_check_message(s, "dlt_checkpoint_load", err, n)) return 1;
        if (st_hash_training() != hb)
            return dltfz_fail(err, n, "a refused dlt_checkpoint_load(module only) changed the net");
    }

    /* the whole training checkpoint */
    hb = st_hash_training();
    int64_t ep = -777, sp = -778;
    dlt_clear_error();
    s = dlt_checkpoint_load(in, st_g.m, st_g.opt, st_g.sc, &ep, &sp);
    if (!dltfz_status_in(s, 4, DLT_OK, DLT_ERR_FORMAT, DLT_ERR_SHAPE, DLT_ERR_DTYPE))
        return dltfz_fail(err, n, "dlt_checkpoint_load returned %d (%s): %.300s", s,
                          s != DLT_OK && st_hash_training() != hb ? "and changed the objects"
                                                                  : "nothing changed",
                          dlt_last_error());
    if (s == DLT_OK && s_mod != DLT_OK)
        return dltfz_fail(err, n, "dlt_checkpoint_load accepted a file dlt_module_load refused");
    if (s != DLT_OK) {
        if (dltfz_check_message(s, "dlt_checkpoint_load", err, n)) return 1;
        if (st_hash_training() != hb)
            return dltfz_fail(err, n, "a refused dlt_checkpoint_load changed the net, optimizer or "
                              "scaler: %.300s", dlt_last_error());
        if (ep != -777 || sp != -778)
            return dltfz_fail(err, n, "a refused dlt_checkpoint_load wrote *epoch or *step");
    } else {
        *dirty = 1;
        st_g.accepted++;
        int64_t fe = 0, fs = 0, fsteps = 0, steps = -1;
        if (!st_read_int(in, "train.epoch", &fe) || !st_read_int(in, "train.step", &fs) || fe != ep ||
            fs != sp)
            return dltfz_fail(err, n, "dlt_checkpoint_load gave epoch %lld step %lld; the file holds "
                              "%lld %lld", (long long)ep, (long long)sp, (long long)fe, (long long)fs);
        if (dlt_optimizer_step_count(st_g.opt, &steps) != DLT_OK ||
            !st_read_int(in, "optimizer.step_count", &fsteps) || steps != fsteps)
            return dltfz_fail(err, n, "step count %lld after dlt_checkpoint_load; the file holds %lld",
                              (long long)steps, (long long)fsteps);
        /* what was loaded is usable: an lr and a scale a step can use (both are fp32 on the
         * device, so a finite double can still turn into inf there); a scale of 0 is a
         * state the scaler reaches itself after enough skipped steps, so it loads */
        double lr = -1, scale = -1;
        if (dlt_optimizer_get_lr(st_g.opt, &lr) != DLT_OK ||
            dlt_grad_scaler_get_state(st_g.sc, &scale, NULL, NULL, NULL, NULL) != DLT_OK)
            return dltfz_fail(err, n, "reading lr/scale after dlt_checkpoint_load: %s", dlt_last_error());
        if (!(lr >= 0 && lr <= 3.4028234663852886e38) || !(scale >= 0 && scale <= 3.4028234663852886e38))
            return dltfz_fail(err, n, "dlt_checkpoint_load accepted lr %g, scale %g", lr, scale);
        if (st_verify_module(st_g.m, in, "dlt_checkpoint_load", err, n)) return 1;
    }

    /* into a momentum-0 optimizer and a disabled scaler: momentum buffers are refused, the
     * scaler entries ignored; the same all-or-nothing rules */
    hb = st_hash_training();
    int64_t ep0 = -777;
    dlt_clear_error();
    dlt_status s0 = dlt_checkpoint_load(in, st_g.m, st_g.opt0, st_g.sc_off, &ep0, NULL);
    if (!dltfz_status_in(s0, 4, DLT_OK, DLT_ERR_FORMAT, DLT_ERR_SHAPE, DLT_ERR_DTYPE))
        return dltfz_fail(err, n, "dlt_checkpoint_load(momentum 0, scaler off) returned %d: %.300s",
                          s0, dlt_last_error());
    if (s0 == DLT_OK && s_mod != DLT_OK)
        return dltfz_fail(err, n, "dlt_checkpoint_load(momentum 0) accepted a file dlt_module_load refused");
    if (s0 != DLT_OK) {
        if (dltfz_check_message(s0, "dlt_checkpoint_load", err, n)) return 1;
        if (st_hash_training() != hb || ep0 != -777)
            return dltfz_fail(err, n, "a refused dlt_checkpoint_load(momentum 0, scaler off) changed "
                              "something: %.300s", dlt_last_error());
    } else {
        *dirty = 1;
        st_g.accepted0++;
        double lr = -1;
        if (dlt_optimizer_get_lr(st_g.opt0, &lr) != DLT_OK || !(lr >= 0 && lr <= 3.4028234663852886e38))
            return dltfz_fail(err, n, "dlt_checkpoint_load(momentum 0) accepted lr %g", lr);
        if (dlt_optimizer_momentum_buffer(st_g.opt0, 0))
            return dltfz_fail(err, n, "dlt_checkpoint_load gave a momentum-0 optimizer a buffer");
    }

    /* single tensors */
    char names[5 + ST_SCANNED][ST_MAX_NAME] = {"conv.weight", "bn.num_batches_tracked", "fc.bias",
                                               "scaler.scale", "train.step"};
    int nn = 5 + st_scan_names(data, size, names + 5, ST_SCANNED);
    int corrupt = -1, round_trip_done = 0;
    for (int i = 0; i < nn; i++) {
        dlt_tensor *t = NULL;
        dlt_clear_error();
        s = dlt_safetensors_load_tensor(st_g.ctx, in, names[i], &t);
        if (!dltfz_status_in(s, 4, DLT_OK, DLT_ERR_FORMAT, DLT_ERR_INVALID_ARGUMENT, DLT_ERR_DTYPE))
            return dltfz_fail(err, n, "dlt_safetensors_load_tensor('%s') returned %d: %.300s",
                              names[i], s, dlt_last_error());
        if (s != DLT_OK && dltfz_check_message(s, "dlt_safetensors_load_tensor", err, n)) return 1;
        if (s != DLT_OK && t) return dltfz_fail(err, n, "dlt_safetensors_load_tensor failed but set *out");
        int is_corrupt = s == DLT_ERR_FORMAT;
        if (corrupt >= 0 && is_corrupt != corrupt)
            return dltfz_fail(err, n, "dlt_safetensors_load_tensor finds the file corrupt for some "
                              "names only ('%s': %d)", names[i], s);
        corrupt = is_corrupt;
        if (is_corrupt && s_mod == DLT_OK)
            return dltfz_fail(err, n, "dlt_safetensors_load_tensor finds corrupt a file "
                              "dlt_module_load accepted: %.300s", dlt_last_error());
        if (s != DLT_OK) continue;
        int bad = 0;
        size_t need = dlt_dtype_size(dlt_tensor_dtype(t)) * (size_t)dlt_tensor_numel(t);
        if (dlt_tensor_format(t) != DLT_FORMAT_CONTIGUOUS || dlt_tensor_nbytes(t) != need)
            bad = dltfz_fail(err, n, "tensor '%s': format %d, %zu bytes for %lld elements", names[i],
                             dlt_tensor_format(t), dlt_tensor_nbytes(t), (long long)dlt_tensor_numel(t));
        if (!bad && !round_trip_done) { /* written again, it reads back the same */
            round_trip_done = 1;
            const char *nm = names[i];
            dlt_clear_error();
            dlt_status w = dlt_safetensors_save(st_g.out, &nm, &t, 1);
            if (w == DLT_OK) {
                dlt_tensor *r = NULL;
                w = dlt_safetensors_load_tensor(st_g.ctx, st_g.out, nm, &r);
                if (w != DLT_OK || !st_same_tensor(t, r))
                    bad = dltfz_fail(err, n, "tensor '%s' saved again does not read back: %d %.300s",
                                     nm, w, dlt_last_error());
                dlt_tensor_release(r);
            } else if (w != DLT_ERR_INVALID_ARGUMENT) { /* empty or non-UTF-8 names are refused */
                bad = dltfz_fail(err, n, "dlt_safetensors_save('%s') returned %d: %.300s", nm, w,
                                 dlt_last_error());
            }
        }
        dlt_tensor_release(t);
        if (bad) return 1;
    }
    if (st_check_handle(data, size, corrupt == 1, err, n)) return 1;
    return st_check_non_strict(in, corrupt == 1, err, n, dirty);
}

static DLTFZ_UNUSED int dltfz_safetensors_run(const uint8_t *data, size_t size, char *err, size_t n) {
    err[0] = '\0';
    if (!st_g.ctx) return dltfz_fail(err, n, "dltfz_safetensors_init was not called");
    int dirty = 0;
    st_g.runs++;
    int bad = st_run_body(data, size, err, n, &dirty);
    if (dirty && !bad) bad = st_restore(err, n);
    else if (dirty) (void)st_restore(err + strlen(err), n - strlen(err));
    return bad;
}

DLTFZ_LIBFUZZER_MAIN(safetensors)
