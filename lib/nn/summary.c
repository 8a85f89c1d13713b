/*
 * summary.c - dlt_module_summary: the module tree as a table of text.
 *
 * Rows in state order: each module (path, kind with the arguments its describe hook gives,
 * the parameter elements under it), then its own parameters (full state_dict name, shape,
 * elements), then its children. A tied parameter (one tensor under several names) counts
 * once: at its first name, and in a module's total only once within that module. Buffers
 * are not listed; the last lines give the totals of both. The text is built whole (columns
 * are as wide as their longest entry), then copied into the caller's buffer.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_internal.h"

typedef struct row {
    char *name, *mid, *count;
} row;

typedef struct table {
    dlt_ctx *ctx;
    row *rows;
    int32_t n, cap;
    int failed; /* an allocation failed */
} table;

static char *dup_printf(dlt_ctx *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0) return NULL;
    char *s = dlt__host_alloc(ctx, (size_t)len + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* 1234567 -> "1,234,567" */
static void with_commas(int64_t v, char *buf, size_t n) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%lld", (long long)(v < 0 ? -v : v));
    size_t k = 0;
    if (v < 0 && k + 1 < n) buf[k++] = '-';
    for (int i = 0; i < len && k + 1 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0 && k + 1 < n) buf[k++] = ',';
        if (k + 1 < n) buf[k++] = digits[i];
    }
    buf[k] = '\0';
}

static void shape_text(const dlt_tensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int32_t d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (k < n) k += (size_t)snprintf(buf + k, n - k, "]");
    if (t->dtype != DLT_F32 && k < n) snprintf(buf + k, n - k, " %s", dlt_dtype_name(t->dtype));
}

/* Takes the three strings (any NULL marks the table failed and frees the others). */
static void add_row(table *tb, char *name, char *mid, char *count) {
    if (!tb->failed && (!name || !mid || !count)) tb->failed = 1;
    if (!tb->failed && tb->n == tb->cap) {
        int32_t cap = tb->cap ? 2 * tb->cap : 32;
        row *r = dlt__host_realloc(tb->ctx, tb->rows, (size_t)cap * sizeof *r);
        if (r) {
            tb->rows = r;
            tb->cap = cap;
        } else {
            tb->failed = 1;
        }
    }
    if (tb->failed) {
        free(name), free(mid), free(count);
        return;
    }
    tb->rows[tb->n++] = (row){name, mid, count};
}

/* The first flat entry in [lo, i) that is a parameter holding the same tensor, else -1. */
static int32_t earlier(const dlt_module *root, int32_t lo, int32_t i) {
    for (int32_t j = lo; j < i; j++)
        if (root->flat[j].is_param && root->flat[j].tensor == root->flat[i].tensor) return j;
    return -1;
}

/* Number of flat entries under m (its state and its children's). */
static int32_t span(const dlt_module *m) {
    int32_t n = m->n_state;
    for (int32_t i = 0; i < m->n_children; i++) n += span(m->children[i]);
    return n;
}

/* Rows for m, whose state starts at flat entry *k of root. */
static void module_rows(table *tb, const dlt_module *root, const dlt_module *m, const char *path,
                        int32_t *k) {
    const int32_t lo = *k, hi = lo + span(m);
    int64_t under = 0;
    for (int32_t i = lo; i < hi; i++)
        if (root->flat[i].is_param && earlier(root, lo, i) < 0) under += root->flat[i].tensor->numel;
    char desc[256] = "", cnt[32];
    if (m->kind->describe) m->kind->describe(m, desc, sizeof desc);
    with_commas(under, cnt, sizeof cnt);
    add_row(tb, dup_printf(tb->ctx, "%s", path[0] ? path : "(root)"),
            desc[0] ? dup_printf(tb->ctx, "%s(%s)", m->kind_name, desc)
                    : dup_printf(tb->ctx, "%s", m->kind_name),
            dup_printf(tb->ctx, "%s", cnt));
    for (int32_t s = 0; s < m->n_state; s++, (*k)++) {
        const dlt__state_entry *e = &root->flat[*k];
        if (!e->is_param) continue;
        char shape[160];
        shape_text(e->tensor, shape, sizeof shape);
        int32_t first = earlier(root, 0, *k);
        if (first >= 0) {
            add_row(tb, dup_printf(tb->ctx, "%s", e->name),
                    dup_printf(tb->ctx, "%s tied to %s", shape, root->flat[first].name),
                    dup_printf(tb->ctx, "-"));
        } else {
            with_commas(e->tensor->numel, cnt, sizeof cnt);
            add_row(tb, dup_printf(tb->ctx, "%s", e->name), dup_printf(tb->ctx, "%s", shape),
                    dup_printf(tb->ctx, "%s", cnt));
        }
    }
    for (int32_t c = 0; c < m->n_children && !tb->failed; c++) {
        char *p = path[0] ? dup_printf(tb->ctx, "%s.%s", path, m->child_names[c])
                          : dup_printf(tb->ctx, "%s", m->child_names[c]);
        if (!p) {
            tb->failed = 1;
            return;
        }
        module_rows(tb, root, m->children[c], p, k);
        free(p);
    }
}

static size_t max_len(const table *tb, size_t field, size_t least) {
    for (int32_t i = 0; i < tb->n; i++) {
        const char *s = *(char *const *)((const char *)&tb->rows[i] + field);
        size_t l = strlen(s);
        if (l > least) least = l;
    }
    return least;
}

/* Appends a formatted line to the growing text (sets *failed on allocation failure). */
static void emit(dlt_ctx *ctx, char **text, size_t *len, size_t *cap, int *failed,
                 const char *fmt, ...) {
    if (*failed) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        *failed = 1;
        return;
    }
    if (*len + (size_t)n + 1 > *cap) {
        size_t c = *cap ? *cap : 1024;
        while (*len + (size_t)n + 1 > c) c *= 2;
        char *t = dlt__host_realloc(ctx, *text, c);
        if (!t) {
            *failed = 1;
            return;
        }
        *text = t;
        *cap = c;
    }
    va_start(ap, fmt);
    vsnprintf(*text + *len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    *len += (size_t)n;
}

static char *dashes(dlt_ctx *ctx, size_t n) {
    char *s = dlt__host_alloc(ctx, n + 1);
    if (s) {
        memset(s, '-', n);
        s[n] = '\0';
    }
    return s;
}

dlt_status dlt_module_summary(const dlt_module *cm, char *buf, size_t n, size_t *needed) {
    static const char *F = "dlt_module_summary";
    DLT_NULL_CHECK(cm, F);
    if (!buf && n > 0) return dlt__err(DLT_ERR_NULL_POINTER, F, "argument 'buf' is NULL");
    dlt_module *m = (dlt_module *)cm; /* fills the name cache only: not visible state */
    DLT_CHECK(dlt__module_flat(m, F));
    table tb = {m->ctx, NULL, 0, 0, 0};
    int32_t k = 0;
    module_rows(&tb, m, m, "", &k);

    /* totals: each tensor once */
    int64_t p_n = 0, p_numel = 0, p_train = 0, b_n = 0, b_numel = 0;
    for (int32_t i = 0; i < m->n_flat; i++) {
        const dlt__state_entry *e = &m->flat[i];
        int dup = 0;
        for (int32_t j = 0; j < i && !dup; j++) dup = m->flat[j].tensor == e->tensor;
        if (dup) continue;
        if (e->is_param) {
            p_n++;
            p_numel += e->tensor->numel;
            if (e->tensor->requires_grad) p_train += e->tensor->numel;
        } else {
            b_n++;
            b_numel += e->tensor->numel;
        }
    }

    char *text = NULL, *d1 = NULL, *d2 = NULL, *d3 = NULL;
    size_t len = 0, cap = 0;
    int failed = tb.failed;
    const size_t wn = max_len(&tb, offsetof(row, name), 4);
    const size_t wm = max_len(&tb, offsetof(row, mid), 12);
    const size_t wc = max_len(&tb, offsetof(row, count), 6);
    if (!failed) {
        d1 = dashes(m->ctx, wn), d2 = dashes(m->ctx, wm), d3 = dashes(m->ctx, wc);
        failed = !d1 || !d2 || !d3;
    }
    const int iwn = (int)wn, iwm = (int)wm, iwc = (int)wc;
    emit(m->ctx, &text, &len, &cap, &failed, "%-*s  %-*s  %*s\n", iwn, "name", iwm, "kind / shape",
         iwc, "params");
    emit(m->ctx, &text, &len, &cap, &failed, "%s  %s  %s\n", d1, d2, d3);
    for (int32_t i = 0; i < tb.n; i++)
        emit(m->ctx, &text, &len, &cap, &failed, "%-*s  %-*s  %*s\n", iwn, tb.rows[i].name, iwm,
             tb.rows[i].mid, iwc, tb.rows[i].count);
    char a[32], b[32], c[32];
    with_commas(p_numel, a, sizeof a);
    with_commas(p_train, b, sizeof b);
    emit(m->ctx, &text, &len, &cap, &failed, "parameters: %s in %lld tensor%s, %s trainable\n", a,
         (long long)p_n, p_n == 1 ? "" : "s", b);
    with_commas(b_numel, c, sizeof c);
    emit(m->ctx, &text, &len, &cap, &failed, "buffers: %s elements in %lld tensor%s\n", c,
         (long long)b_n, b_n == 1 ? "" : "s");

    for (int32_t i = 0; i < tb.n; i++) free(tb.rows[i].name), free(tb.rows[i].mid), free(tb.rows[i].count);
    free(tb.rows);
    free(d1), free(d2), free(d3);
    if (failed) {
        free(text);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the summary of a %s module",
                        m->kind_name);
    }
    if (n > 0) {
        size_t w = len < n - 1 ? len : n - 1;
        memcpy(buf, text, w);
        buf[w] = '\0';
    }
    if (needed) *needed = len + 1;
    free(text);
    return DLT_OK;
}
