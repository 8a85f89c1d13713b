/*
 * print.c - dlt_tensor_snprint: a tensor as text, the way PyTorch's repr writes it
 * (torch/_tensor_str.py with the default print options: precision 4, threshold 1000,
 * edgeitems 3, linewidth 80). The library never prints; the caller gets the string.
 *
 * PyTorch's rules, in the order the code applies them:
 *  - summarise when numel > 1000: a dimension longer than 6 shows its first and last 3
 *    entries around "..." (" ..." inside a row), at every level;
 *  - one formatter for the whole tensor, from the values shown (the summarised ones): for
 *    floating dtypes over the finite non-zero values, int_mode when all are integers (printed
 *    "3."), scientific ("%.4e") when max/min > 1000 or max > 1e8 (or, outside int_mode,
 *    min < 1e-4), else "%.4f"; every value right-aligned to the widest; integers as they are;
 *    fp16/bf16 values are printed as their float32 values;
 *  - rows wrap at 80 columns: (80 - indent) / (width + 2) values per line;
 *  - nested dimensions are joined by "," and one newline per remaining dimension, indented
 *    one column per level under "tensor(";
 *  - suffixes after the values: device='cuda:N' for CUDA tensors, size=(...) for an empty
 *    tensor that is not 1-D, dtype=dltrain.X (PyTorch: torch.X) unless float32 or int64 (an empty tensor shows
 *    int64 too), requires_grad=True for a leaf that requires grad, grad_fn=<op> (our op name)
 *    for a result recorded on the tape; a suffix that would pass 80 columns goes on a new line.
 * NaN prints "nan" whatever its sign bit (glibc would print "-nan"; Python does not).
 *
 * Reading values: a CPU tensor is read in place; a CUDA tensor is copied to the host once
 * (all of it, in memory order: one synchronising copy per call).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/half.h"
#include "../core/internal.h"

#define P_FN "dlt_tensor_snprint"
#define P_PRECISION 4
#define P_THRESHOLD 1000
#define P_EDGE 3
#define P_LINEWIDTH 80

/* A growing string; `failed` is set when memory runs out (then the text is abandoned). */
typedef struct pbuf {
    char *s;
    size_t len, cap;
    int failed;
} pbuf;

static void put(pbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}
static void puts_(pbuf *b, const char *s) { put(b, s, strlen(s)); }
static void spaces(pbuf *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) put(b, " ", 1);
}

typedef struct printer {
    const dlt_tensor *t;
    const void *host; /* the tensor's bytes in memory order */
    int is_float, summarize;
    int int_mode, sci_mode;
    int width;
} printer;

/* Memory element index of a logical multi-index. */
static int64_t mem_index(const dlt_tensor *t, const int64_t *idx) {
    if (t->format == DLT_FORMAT_CHANNELS_LAST && t->ndim == 4) {
        const int64_t C = t->shape[1], H = t->shape[2], W = t->shape[3];
        return ((idx[0] * H + idx[2]) * W + idx[3]) * C + idx[1];
    }
    int64_t m = 0;
    for (int32_t d = 0; d < t->ndim; d++) m = m * t->shape[d] + idx[d];
    return m;
}

static double value_f(const printer *p, int64_t m) {
    switch (p->t->dtype) {
    case DLT_F32: return (double)((const float *)p->host)[m];
    case DLT_F16: return (double)dlt__f16_to_f32(((const uint16_t *)p->host)[m]);
    case DLT_BF16: return (double)dlt__bf16_to_f32(((const uint16_t *)p->host)[m]);
    default: return 0.0;
    }
}

static long long value_i(const printer *p, int64_t m) {
    switch (p->t->dtype) {
    case DLT_I32: return ((const int32_t *)p->host)[m];
    case DLT_I64: return (long long)((const int64_t *)p->host)[m];
    default: return ((const uint8_t *)p->host)[m];
    }
}

/* One value as the formatter writes it before padding (Python's format rules). */
static int fmt_value(const printer *p, int64_t m, char *out, size_t n) {
    if (!p->is_float) return snprintf(out, n, "%lld", value_i(p, m));
    const double v = value_f(p, m);
    if (isnan(v)) return snprintf(out, n, "nan");
    if (p->sci_mode) return snprintf(out, n, "%.*e", P_PRECISION, v);
    if (p->int_mode) return snprintf(out, n, isinf(v) ? "%.0f" : "%.0f.", v);
    return snprintf(out, n, "%.*f", P_PRECISION, v);
}

/* Calls fn for the memory index of every element shown (the summarised ones), in order. */
typedef void (*visit_fn)(printer *p, int64_t m, void *user);
static void visit(printer *p, int32_t d, int64_t *idx, visit_fn fn, void *user) {
    if (d == p->t->ndim) {
        fn(p, mem_index(p->t, idx), user);
        return;
    }
    const int64_t s = p->t->shape[d];
    const int cut = p->summarize && s > 2 * P_EDGE;
    for (int64_t i = 0; i < s; i++) {
        if (cut && i == P_EDGE) i = s - P_EDGE;
        idx[d] = i;
        visit(p, d + 1, idx, fn, user);
    }
}

typedef struct stats {
    double min_abs, max_abs;
    int any, all_int;
} stats;

static void gather_stats(printer *p, int64_t m, void *user) {
    stats *s = user;
    const double v = value_f(p, m);
    if (!isfinite(v) || v == 0.0) return;
    const double a = fabs(v);
    if (!s->any || a < s->min_abs) s->min_abs = a;
    if (!s->any || a > s->max_abs) s->max_abs = a;
    s->any = 1;
    if (v != ceil(v)) s->all_int = 0;
}

static void widen(printer *p, int64_t m, void *user) {
    (void)user;
    if (p->is_float) {
        const double v = value_f(p, m);
        if (!isfinite(v) || v == 0.0) return; /* PyTorch sizes floats by these values only */
    }
    char tmp[64];
    const int w = fmt_value(p, m, tmp, sizeof tmp); /* int_mode's "%.0f." counts its '.' */
    if (w > p->width) p->width = w;
}

static void make_formatter(printer *p) {
    int64_t idx[DLT_MAX_DIMS] = {0};
    p->int_mode = 1;
    p->sci_mode = 0;
    p->width = 1;
    if (p->is_float) {
        stats s = {0.0, 0.0, 0, 1};
        visit(p, 0, idx, gather_stats, &s);
        if (!s.any) return; /* only zeros, NaN and inf: int_mode, width 1 */
        p->int_mode = s.all_int;
        const double ratio = s.max_abs / s.min_abs;
        p->sci_mode = ratio > 1000.0 || s.max_abs > 1.0e8 || (!s.all_int && s.min_abs < 1.0e-4);
    }
    visit(p, 0, idx, widen, NULL);
}

static void put_value(printer *p, pbuf *b, int64_t m) {
    char tmp[64];
    int w = fmt_value(p, m, tmp, sizeof tmp);
    if (w < 0) w = 0;
    spaces(b, p->width - w);
    put(b, tmp, (size_t)w);
}

/* The innermost dimension: values wrapped at the line width. */
static void vector_str(printer *p, pbuf *b, int64_t *idx, int64_t indent) {
    const int32_t d = p->t->ndim - 1;
    const int64_t s = p->t->shape[d];
    int64_t per_line = (P_LINEWIDTH - indent) / (p->width + 2);
    if (per_line < 1) per_line = 1;
    const int cut = p->summarize && s > 2 * P_EDGE;
    const int64_t items = cut ? 2 * P_EDGE + 1 : s;
    put(b, "[", 1);
    for (int64_t k = 0; k < items; k++) {
        if (k > 0) {
            if (k % per_line == 0) {
                put(b, ",\n", 2);
                spaces(b, indent + 1);
            } else {
                put(b, ", ", 2);
            }
        }
        if (cut && k == P_EDGE) {
            put(b, " ...", 4);
            continue;
        }
        idx[d] = cut && k > P_EDGE ? s - (items - k) : k;
        put_value(p, b, mem_index(p->t, idx));
    }
    put(b, "]", 1);
}

static void tensor_str(printer *p, pbuf *b, int32_t d, int64_t *idx, int64_t indent) {
    const int32_t nd = p->t->ndim;
    if (d == nd - 1) {
        vector_str(p, b, idx, indent);
        return;
    }
    const int64_t s = p->t->shape[d];
    const int cut = p->summarize && s > 2 * P_EDGE;
    put(b, "[", 1);
    for (int64_t i = 0; i < s; i++) {
        if (i > 0) {
            put(b, ",", 1);
            for (int32_t k = 0; k < nd - d - 1; k++) put(b, "\n", 1);
            spaces(b, indent + 1);
        }
        if (cut && i == P_EDGE) {
            put(b, "...", 3);
            i = s - P_EDGE - 1;
            continue;
        }
        idx[d] = i;
        tensor_str(p, b, d + 1, idx, indent + 1);
    }
    put(b, "]", 1);
}

static const char *torch_dtype(int32_t dtype) {
    switch (dtype) {
    case DLT_F32: return "dltrain.float32";
    case DLT_F16: return "dltrain.float16";
    case DLT_BF16: return "dltrain.bfloat16";
    case DLT_I32: return "dltrain.int32";
    case DLT_I64: return "dltrain.int64";
    default: return "dltrain.uint8";
    }
}

/* PyTorch's _add_suffixes: its last_line_len counts two columns more than the line has. */
static void add_suffixes(pbuf *b, char suffixes[][96], int n, int64_t indent) {
    const char *nl = b->s ? strrchr(b->s, '\n') : NULL;
    int64_t last = (int64_t)b->len - (nl ? (int64_t)(nl - b->s) : -1) + 1;
    for (int i = 0; i < n; i++) {
        const int64_t sl = (int64_t)strlen(suffixes[i]);
        if (last + sl + 2 > P_LINEWIDTH) {
            put(b, ",\n", 2);
            spaces(b, indent);
            last = indent + sl;
        } else {
            put(b, ", ", 2);
            last += sl + 2;
        }
        puts_(b, suffixes[i]);
    }
    put(b, ")", 1);
}

static void render(printer *p, pbuf *b) {
    const dlt_tensor *t = p->t;
    const int64_t indent = 7; /* strlen("tensor(") */
    char suffixes[4][96];
    int ns = 0;
    puts_(b, "tensor(");
    if (t->ctx->device_type == DLT_DEVICE_CUDA)
        snprintf(suffixes[ns++], sizeof suffixes[0], "device='cuda:%d'", (int)t->ctx->device_index);
    if (t->numel == 0) {
        puts_(b, "[]");
        if (t->ndim != 1) {
            char *s = suffixes[ns++];
            size_t o = (size_t)snprintf(s, sizeof suffixes[0], "size=(");
            for (int32_t d = 0; d < t->ndim && o < sizeof suffixes[0]; d++)
                o += (size_t)snprintf(s + o, sizeof suffixes[0] - o, d ? ", %lld" : "%lld",
                                      (long long)t->shape[d]);
            if (o < sizeof suffixes[0]) snprintf(s + o, sizeof suffixes[0] - o, ")");
        }
        if (t->dtype != DLT_F32)
            snprintf(suffixes[ns++], sizeof suffixes[0], "dtype=%s", torch_dtype(t->dtype));
    } else {
        if (t->dtype != DLT_F32 && t->dtype != DLT_I64)
            snprintf(suffixes[ns++], sizeof suffixes[0], "dtype=%s", torch_dtype(t->dtype));
        p->is_float = dlt__is_float(t->dtype);
        p->summarize = t->numel > P_THRESHOLD;
        make_formatter(p);
        int64_t idx[DLT_MAX_DIMS] = {0};
        if (t->ndim == 0) put_value(p, b, 0);
        else tensor_str(p, b, 0, idx, indent);
    }
    if (t->grad_fn && t->grad_fn->name)
        snprintf(suffixes[ns++], sizeof suffixes[0], "grad_fn=<%s>", t->grad_fn->name);
    else if (t->requires_grad)
        snprintf(suffixes[ns++], sizeof suffixes[0], "requires_grad=True");
    add_suffixes(b, suffixes, ns, indent);
}

dlt_status dlt_tensor_snprint(const dlt_tensor *t, char *buf, size_t n, size_t *needed) {
    DLT_CHECK(dlt__check_tensor(t, P_FN, "t"));
    if (!buf && n > 0)
        return dlt__err(DLT_ERR_NULL_POINTER, P_FN, "argument 'buf' is NULL but n is %zu", n);
    void *copy = NULL;
    const void *host = dlt__data(t);
    const size_t nbytes = dlt__nbytes(t);
    if (t->ctx->device_type != DLT_DEVICE_CPU && nbytes > 0) {
        if (t->ctx->capturing)
            return dlt__err(DLT_ERR_INVALID_STATE, P_FN,
                            "cannot read a tensor back during graph capture");
        if (!(copy = malloc(nbytes)))
            return dlt__err(DLT_ERR_OUT_OF_MEMORY, P_FN,
                            "cannot allocate %zu bytes for the host copy of the tensor", nbytes);
        dlt_status st = t->ctx->be->memcpy_d2h(t->ctx, copy, host, nbytes);
        if (st != DLT_OK) {
            free(copy);
            return dlt__err_wrap(st, P_FN);
        }
        host = copy;
    }
    printer p = {0};
    p.t = t;
    p.host = host;
    pbuf b = {0};
    render(&p, &b);
    free(copy);
    if (b.failed) {
        free(b.s);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, P_FN, "cannot allocate the text of the tensor");
    }
    if (needed) *needed = b.len + 1;
    if (n > 0) {
        const size_t k = b.len < n - 1 ? b.len : n - 1;
        memcpy(buf, b.s, k);
        buf[k] = '\0';
    }
    free(b.s);
    return DLT_OK;
}
