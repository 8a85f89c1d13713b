/*
 * ddp.c - DistributedDataParallel: gradients averaged over the ranks in buckets, each
 * launched as soon as the backward has finished every gradient in it.
 *
 * Buckets follow PyTorch's _compute_bucket_assignment_by_size: parameters in module
 * order (per dtype), a bucket closes once it holds at least its limit (the first one
 * first_bucket_mb, later ones bucket_cap_mb), buckets sorted by their first parameter and
 * then reversed, so bucket 0 holds the last parameters (whose gradients backward makes
 * first) and the small first-parameters bucket is reduced last, right after the backward
 * ends. Unlike PyTorch, the buckets are not rebuilt from the order observed in the first
 * iteration.
 *
 * Each bucket owns one flat gradient buffer and its parameters' .grad are views into it
 * (gradient_as_bucket_view): the backward writes gradients in place and the all-reduce
 * runs on the buffer, with no copies. The tape's hook (lib/core/tape.c) reports each leaf
 * whose gradient is final; when the last parameter of a bucket is reported and every
 * bucket before it has been launched, it is launched (so every rank launches the same
 * collectives in the same order). At the end of the backward the rest are launched: a
 * parameter the backward did not reach contributes zeros. On CUDA the all-reduce runs on
 * the communicator's side stream after an event of the context stream (the backward
 * continues meanwhile), and the end of the backward makes the context stream wait for the
 * side stream: all of it is stream-ordered, so a captured step captures it. On the CPU
 * each bucket is reduced at once.
 */
#include <stdlib.h>
#include <string.h>

#include "../core/options.h"
#include "dist_internal.h"

#define F_BWD "dlt_backward"

typedef struct ddp_bucket {
    int32_t n;        /* parameters */
    int32_t *idx;     /* their indices in module order */
    int32_t dtype;
    int64_t numel;
    dlt_tensor *buf;  /* the flat gradient buffer [numel] */
    int32_t pending;  /* parameters not final yet in the running backward */
} ddp_bucket;

struct dlt_ddp {
    dlt_comm *comm;
    dlt_module *m;
    dlt_ctx *ctx;
    dlt_ddp_options o;
    int32_t np;
    dlt_tensor **params;
    int32_t *bucket_of;
    unsigned char *ready;
    int32_t nb;
    ddp_bucket *b;
    /* the running backward */
    int32_t no_sync;
    int32_t active;   /* this backward reduces */
    int32_t next;     /* next bucket to launch */
    int32_t launched_any;
    int32_t during, after; /* buckets launched while the backward ran / at its end */
    /* leaf pointer -> parameter index (open addressing) */
    dlt_tensor **keys;
    int32_t *vals;
    uint32_t cap;
};

static const dlt_ddp_options DDP_DEFAULTS = {
    .size = sizeof(dlt_ddp_options), .broadcast_buffers = 1, .bucket_cap_mb = 25.0, .first_bucket_mb = 1.0};
/* the first release's struct ends after first_bucket_mb */
#define DDP_OPTIONS_V1 DLT__FIELD_END(dlt_ddp_options, first_bucket_mb)

void dlt_ddp_options_init(dlt_ddp_options *o, uint32_t size) {
    dlt__options_fill(o, size, &DDP_DEFAULTS, sizeof DDP_DEFAULTS, DDP_OPTIONS_V1);
}

static uint32_t hash_ptr(const void *p) {
    uint64_t v = (uint64_t)(uintptr_t)p;
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdULL;
    v ^= v >> 33;
    return (uint32_t)v;
}

static int32_t lookup(const dlt_ddp *d, const dlt_tensor *t) {
    for (uint32_t h = hash_ptr(t) & (d->cap - 1);; h = (h + 1) & (d->cap - 1)) {
        if (d->keys[h] == t) return d->vals[h];
        if (!d->keys[h]) return -1;
    }
}

/* ---- the hooks ---- */

static dlt_status launch(dlt_ddp *d, int32_t bi) {
    ddp_bucket *b = &d->b[bi];
    dlt_ctx *ctx = d->ctx;
    int pending_acc = 0, side = 0;
    for (int32_t j = 0; j < b->n; j++) {
        pending_acc |= d->params[b->idx[j]]->grad->grad_pending;
        side |= dlt__side_wrote(ctx, d->params[b->idx[j]]->grad);
    }
    /* the all-reduce forks from the context stream: queued sums applied, and what the side
     * stream wrote (a weight gradient, a flush) joined, first (dlt__tape_flush joins) */
    if (pending_acc) DLT_CHECK(dlt__tape_flush(ctx));
    else if (side) DLT_CHECK(dlt__side_join(ctx));
    for (int32_t j = 0; j < b->n; j++) {
        dlt_tensor *p = d->params[b->idx[j]];
        if (!p->grad_defined) { /* no gradient on this rank: it contributes zeros */
            if (p->grad->numel) DLT_CHECK(ctx->be->memset0(ctx, dlt__data(p->grad), dlt__nbytes(p->grad)));
            p->grad_defined = 1;
        }
        p->grad->version++;
    }
    if (d->comm->nccl) DLT_CHECK(ctx->be->nccl_fork(ctx, d->comm->nccl));
    d->launched_any = 1;
    return dlt__comm_all_reduce(d->comm, b->buf, DLT_REDUCE_AVG, 1, F_BWD);
}

static dlt_status launch_ready(dlt_ddp *d) {
    while (d->next < d->nb && d->b[d->next].pending == 0) {
        DLT_CHECK(launch(d, d->next++));
        d->during++;
    }
    return DLT_OK;
}

static dlt_status hook_begin(void *user) {
    dlt_ddp *d = user;
    /* one rank has nothing to average; a one-rank NCCL communicator still runs the path */
    d->active = !d->no_sync && (d->comm->world > 1 || d->comm->nccl);
    if (!d->active) return DLT_OK;
    /* a backward that reaches none of the module's parameters (another model on the same
     * context) is not this DDP's: the tape's pre-scan counted the uses of every leaf */
    int reached = 0;
    for (int32_t i = 0; i < d->np && !reached; i++)
        reached = d->params[i]->hook_gen == d->ctx->tape.hook_gen && d->params[i]->hook_uses > 0;
    if (!reached) {
        d->active = 0;
        return DLT_OK;
    }
    DLT_CHECK(dlt__comm_ok(d->comm, F_BWD));
    memset(d->ready, 0, (size_t)d->np);
    for (int32_t i = 0; i < d->nb; i++) d->b[i].pending = d->b[i].n;
    d->next = 0;
    d->launched_any = 0;
    d->during = d->after = 0;
    return DLT_OK;
}

static dlt_status hook_leaf_ready(void *user, dlt_tensor *leaf) {
    dlt_ddp *d = user;
    if (!d->active) return DLT_OK;
    int32_t i = lookup(d, leaf);
    if (i < 0 || d->bucket_of[i] < 0 || d->ready[i]) return DLT_OK;
    d->ready[i] = 1;
    d->b[d->bucket_of[i]].pending--;
    return launch_ready(d);
}

static dlt_status hook_end(void *user, dlt_status st) {
    dlt_ddp *d = user;
    if (!d->active) return DLT_OK;
    d->active = 0;
    if (st == DLT_OK) /* parameters the backward did not reach: their buckets go now */
        while (d->next < d->nb && st == DLT_OK) {
            st = launch(d, d->next++);
            d->after++;
        }
    if (d->launched_any && d->comm->nccl) {
        dlt_status jst = d->ctx->be->nccl_join(d->ctx, d->comm->nccl);
        if (st == DLT_OK) st = jst;
    }
    return st;
}

/* ---- creation ---- */

/* The PyTorch bucket assignment over the parameters (see the top). */
static dlt_status assign_buckets(dlt_ddp *d, const char *func) {
    const int64_t first = (int64_t)(d->o.first_bucket_mb * 1048576.0);
    const int64_t cap = (int64_t)(d->o.bucket_cap_mb * 1048576.0);
    enum { ND = 8 }; /* dtypes */
    int32_t closed[ND], open_id[ND];
    int64_t open_bytes[ND];
    for (int k = 0; k < ND; k++) {
        closed[k] = 0;
        open_id[k] = -1;
        open_bytes[k] = 0;
    }
    /* a parameter's bucket number in closing order; buckets are contiguous per dtype */
    int32_t *member = malloc((size_t)d->np * sizeof *member);
    ddp_bucket *bs = calloc((size_t)d->np, sizeof *bs);
    dlt_status st = DLT_OK;
    int32_t nb = 0;
    if (!member || !bs) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the bucket table");
        goto done;
    }
    for (int32_t i = 0; i < d->np; i++) {
        const int32_t k = d->params[i]->dtype;
        if (!d->params[i]->requires_grad) { /* frozen: no gradient to average (as DDP) */
            member[i] = -1;
            continue;
        }
        if (open_id[k] < 0) {
            open_id[k] = nb++;
            bs[open_id[k]].dtype = k;
        }
        member[i] = open_id[k];
        bs[open_id[k]].n++;
        open_bytes[k] += (int64_t)dlt__nbytes(d->params[i]);
        if (open_bytes[k] >= (closed[k] == 0 ? first : cap)) { /* closes, as DDP's */
            open_id[k] = -1;
            open_bytes[k] = 0;
            closed[k]++;
        }
    }
    for (int32_t bi = 0; bi < nb; bi++) {
        bs[bi].idx = malloc((size_t)bs[bi].n * sizeof *bs[bi].idx);
        if (!bs[bi].idx) {
            st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the bucket table");
            goto done;
        }
        bs[bi].n = 0;
    }
    for (int32_t i = 0; i < d->np; i++) {
        if (member[i] < 0) continue;
        ddp_bucket *b = &bs[member[i]];
        b->idx[b->n++] = i;
    }
    /* sorted by the first parameter (buckets of one dtype already are), then reversed:
     * the order in which backward completes them */
    for (int32_t i = 1; i < nb; i++)
        for (int32_t j = i; j > 0 && bs[j - 1].idx[0] > bs[j].idx[0]; j--) {
            ddp_bucket t = bs[j];
            bs[j] = bs[j - 1];
            bs[j - 1] = t;
        }
    for (int32_t i = 0; i < nb / 2; i++) {
        ddp_bucket t = bs[i];
        bs[i] = bs[nb - 1 - i];
        bs[nb - 1 - i] = t;
    }
    d->b = bs;
    d->nb = nb;
    bs = NULL;
done:
    if (bs)
        for (int32_t i = 0; i < nb; i++) free(bs[i].idx);
    free(bs);
    free(member);
    return st;
}

/* Flat buffers and the .grad views into them (an existing gradient is kept). */
static dlt_status make_views(dlt_ddp *d, const char *func) {
    dlt_ctx *ctx = d->ctx;
    for (int32_t bi = 0; bi < d->nb; bi++) {
        ddp_bucket *b = &d->b[bi];
        b->numel = 0;
        for (int32_t j = 0; j < b->n; j++) {
            d->bucket_of[b->idx[j]] = bi;
            b->numel += d->params[b->idx[j]]->numel;
        }
        DLT_CHECK(dlt__tensor_new(ctx, b->dtype, &b->numel, 1, DLT_FORMAT_CONTIGUOUS, func, &b->buf));
        if (b->numel) DLT_CHECK(ctx->be->memset0(ctx, dlt__data(b->buf), dlt__nbytes(b->buf)));
    }
    /* every view first, then the swap: a failure leaves the parameters as they were */
    dlt_tensor **views = calloc((size_t)d->np, sizeof *views);
    if (!views) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the gradient views");
    dlt_status st = DLT_OK;
    for (int32_t bi = 0; bi < d->nb && st == DLT_OK; bi++) {
        ddp_bucket *b = &d->b[bi];
        size_t off = 0;
        for (int32_t j = 0; j < b->n && st == DLT_OK; j++) {
            dlt_tensor *p = d->params[b->idx[j]];
            st = dlt__tensor_from_storage(b->buf->storage, b->buf->offset + off, p->dtype, p->shape, p->ndim,
                                          p->format, func, &views[b->idx[j]]);
            if (st == DLT_OK && p->grad && p->grad_defined && p->numel)
                st = ctx->be->memcpy_d2d(ctx, dlt__data(views[b->idx[j]]), dlt__data(p->grad), dlt__nbytes(p));
            off += dlt__nbytes(p);
        }
    }
    if (st == DLT_OK)
        for (int32_t i = 0; i < d->np; i++) {
            dlt_tensor *p = d->params[i];
            if (!views[i]) continue; /* frozen */
            dlt_tensor_release(p->grad);
            p->grad = views[i];
            views[i] = NULL;
        }
    for (int32_t i = 0; i < d->np; i++) dlt_tensor_release(views[i]);
    free(views);
    return st;
}

/* A fingerprint of a state tensor's dtype and shape, for the cross-rank model check. */
static int64_t fingerprint(const dlt_tensor *t, int32_t is_param) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)(is_param * 7 + t->dtype);
    h = (h ^ (uint64_t)t->ndim) * 1099511628211ULL;
    for (int32_t i = 0; i < t->ndim; i++) h = (h ^ (uint64_t)t->shape[i]) * 1099511628211ULL;
    return (int64_t)(h >> 1);
}

/* The state the replicas share: parameters and floating-point buffers, in state order
 * (integer buffers such as num_batches_tracked are counted on the host and equal anyway). */
static int synced(const dlt_tensor *t, int32_t is_param) { return is_param || dlt__is_float(t->dtype); }

/* Checks that every rank holds the same state shapes; then rank 0's values go to all. */
static dlt_status sync_module(dlt_ddp *d, int buffers_only, const char *func) {
    dlt_comm *c = d->comm;
    const int32_t ns = dlt_module_num_state(d->m);
    if (!buffers_only) {
        /* mine: this rank's fingerprints; root: rank 0's (broadcast) */
        int64_t *mine = malloc(2 * ((size_t)ns + 1) * sizeof *mine);
        if (!mine) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the model check");
        int64_t *root = mine + ns + 1;
        int64_t n = 0;
        for (int32_t i = 0; i < ns; i++) {
            dlt_tensor *t;
            int32_t is_param;
            if (dlt_module_state_entry(d->m, i, NULL, &t, &is_param) == DLT_OK && synced(t, is_param))
                mine[n++] = fingerprint(t, is_param);
        }
        int64_t counts[2] = {n, -n}; /* max and -min of the counts */
        dlt_status st = dlt__comm_max_i64(c, counts, 2, func);
        if (st == DLT_OK && counts[0] != -counts[1])
            st = dlt__err(DLT_ERR_SHAPE, func,
                          "the ranks' models differ: between %lld and %lld parameters and buffers",
                          (long long)-counts[1], (long long)counts[0]);
        if (st == DLT_OK) {
            memcpy(root, mine, (size_t)n * sizeof *mine);
            st = dlt__comm_broadcast_host(c, root, (size_t)n * sizeof *root, 0, func);
        }
        if (st == DLT_OK) {
            int64_t first_bad = -1; /* the ranks agree on the smallest differing entry */
            for (int64_t i = 0; i < n && first_bad < 0; i++)
                if (root[i] != mine[i]) first_bad = i;
            int64_t v = first_bad < 0 ? 0 : INT64_MAX - first_bad;
            st = dlt__comm_max_i64(c, &v, 1, func);
            if (st == DLT_OK && v != 0) {
                const int64_t bad = INT64_MAX - v;
                const char *name = "?";
                for (int32_t i = 0, k = 0; i < ns; i++) {
                    dlt_tensor *t;
                    int32_t is_param;
                    const char *nm;
                    if (dlt_module_state_entry(d->m, i, &nm, &t, &is_param) != DLT_OK || !synced(t, is_param))
                        continue;
                    if (k++ == bad) {
                        name = nm;
                        break;
                    }
                }
                st = dlt__err(DLT_ERR_SHAPE, func,
                              "the ranks' models differ: '%s' has another shape or dtype on some rank "
                              "than on rank 0 (every rank must build the same model)", name);
            }
        }
        free(mine);
        DLT_CHECK(st);
    }
    for (int32_t i = 0; i < ns; i++) {
        dlt_tensor *t;
        int32_t is_param;
        DLT_CHECK(dlt_module_state_entry(d->m, i, NULL, &t, &is_param));
        if (!synced(t, is_param) || (buffers_only && is_param)) continue;
        DLT_CHECK(dlt__comm_broadcast(c, t, 0, func));
        dlt__tensor_written(t); /* autocast's low-precision copies follow the new values */
    }
    return DLT_OK;
}

void dlt_ddp_destroy(dlt_ddp *d) {
    if (!d) return;
    dlt__tape_hook_remove(d->ctx, d);
    for (int32_t i = 0; i < d->nb; i++) {
        free(d->b[i].idx);
        dlt_tensor_release(d->b[i].buf);
    }
    free(d->b);
    free(d->params);
    free(d->bucket_of);
    free(d->ready);
    free(d->keys);
    free(d->vals);
    free(d);
}

dlt_status dlt_ddp_create_ex(dlt_comm *c, dlt_module *m, const dlt_ddp_options *o, dlt_ddp **out) {
    static const char *F = "dlt_ddp_create_ex";
    DLT_NULL_CHECK(c, F);
    DLT_NULL_CHECK(m, F);
    DLT_NULL_CHECK(out, F);
    dlt_ddp_options opt = DDP_DEFAULTS;
    DLT_CHECK(dlt__options_read(&opt, sizeof opt, o, DDP_OPTIONS_V1, "dlt_ddp_options", F));
    if (!(opt.bucket_cap_mb > 0) || !(opt.first_bucket_mb > 0) || opt.bucket_cap_mb > 1e6 ||
        opt.first_bucket_mb > 1e6)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "bucket_cap_mb %g and first_bucket_mb %g must be in (0, 1e6]",
                        opt.bucket_cap_mb, opt.first_bucket_mb);
    if (opt.broadcast_buffers != 0 && opt.broadcast_buffers != 1)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "broadcast_buffers must be 0 or 1, got %d",
                        opt.broadcast_buffers);
    dlt_ctx *ctx = dlt_module_ctx(m);
    if (ctx != c->ctx)
        return dlt__err(DLT_ERR_CONTEXT_MISMATCH, F, "the module and the communicator belong to different contexts");
    DLT_CHECK(dlt__comm_ok(c, F));
    DLT_CHECK(dlt__ctx_ok(ctx, F));
    if (ctx->capturing) return dlt__err(DLT_ERR_INVALID_STATE, F, "cannot create DDP during graph capture");
    const int32_t np = dlt_module_num_params(m);
    if (np < 1) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "the module has no parameters");
    if (ctx->tape.n_hooks >= DLT_TAPE_MAX_HOOKS || ctx->tape.in_backward)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "the context has %d DDP objects already (at most %d), or a backward is running",
                        ctx->tape.n_hooks, DLT_TAPE_MAX_HOOKS);

    dlt_ddp *d = calloc(1, sizeof *d);
    if (!d) return dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the DDP object");
    d->comm = c;
    d->m = m;
    d->ctx = ctx;
    d->o = opt;
    d->np = np;
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)np) cap *= 2;
    d->cap = cap;
    d->params = calloc((size_t)np, sizeof *d->params);
    d->bucket_of = calloc((size_t)np, sizeof *d->bucket_of);
    d->ready = calloc((size_t)np, 1);
    d->keys = calloc(cap, sizeof *d->keys);
    d->vals = calloc(cap, sizeof *d->vals);
    dlt_status st = DLT_OK;
    if (!d->params || !d->bucket_of || !d->ready || !d->keys || !d->vals) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the DDP tables");
        goto fail;
    }
    DLT_CHECK_GOTO(st, dlt_module_params(m, d->params, np, NULL), fail);
    for (int32_t i = 0; i < np; i++) {
        d->bucket_of[i] = -1;
        uint32_t h = hash_ptr(d->params[i]) & (cap - 1);
        while (d->keys[h]) h = (h + 1) & (cap - 1);
        d->keys[h] = d->params[i];
        d->vals[h] = i;
    }
    /* the ranks agree on the model and start from rank 0's values (a collective) */
    DLT_CHECK_GOTO(st, sync_module(d, 0, F), fail);
    DLT_CHECK_GOTO(st, assign_buckets(d, F), fail);
    DLT_CHECK_GOTO(st, make_views(d, F), fail);
    dlt_tape_hook h = {d, hook_begin, hook_leaf_ready, hook_end};
    DLT_CHECK_GOTO(st, dlt__tape_hook_add(ctx, &h, F), fail);
    *out = d;
    return DLT_OK;
fail:
    dlt_ddp_destroy(d);
    return dlt__err_wrap(st, F);
}

dlt_status dlt_ddp_create(dlt_comm *c, dlt_module *m, dlt_ddp **out) {
    dlt_status st = dlt_ddp_create_ex(c, m, NULL, out);
    return st == DLT_OK ? st : dlt__err_wrap(st, "dlt_ddp_create");
}

dlt_status dlt_ddp_forward(dlt_ddp *d, dlt_tensor *x, dlt_tensor **out) {
    static const char *F = "dlt_ddp_forward";
    DLT_NULL_CHECK(d, F);
    if (d->o.broadcast_buffers && (d->comm->world > 1 || d->comm->nccl) && dlt_module_is_training(d->m))
        DLT_CHECK(sync_module(d, 1, F));
    dlt_status st = dlt_module_forward(d->m, x, out);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

dlt_status dlt_ddp_no_sync(dlt_ddp *d, int32_t on) {
    static const char *F = "dlt_ddp_no_sync";
    DLT_NULL_CHECK(d, F);
    if (on != 0 && on != 1) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "on must be 0 or 1, got %d", on);
    if (d->ctx->tape.in_backward)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "no_sync cannot change during a backward");
    d->no_sync = on;
    return DLT_OK;
}

int32_t dlt_ddp_num_buckets(const dlt_ddp *d) { return d ? d->nb : 0; }

dlt_status dlt_ddp_bucket(const dlt_ddp *d, int32_t i, int32_t *idx, int32_t cap, int32_t *n, int64_t *bytes) {
    static const char *F = "dlt_ddp_bucket";
    DLT_NULL_CHECK(d, F);
    if (i < 0 || i >= d->nb)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "bucket %d is outside 0..%d", i, d->nb - 1);
    if (cap < 0 || (cap > 0 && !idx))
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "cap %d with idx %s", cap, idx ? "set" : "NULL");
    const ddp_bucket *b = &d->b[i];
    for (int32_t j = 0; j < b->n && j < cap; j++) idx[j] = b->idx[j];
    if (n) *n = b->n;
    if (bytes) *bytes = (int64_t)dlt__nbytes(b->buf);
    return DLT_OK;
}

dlt_status dlt_ddp_overlap(const dlt_ddp *d, int32_t *during, int32_t *after) {
    static const char *F = "dlt_ddp_overlap";
    DLT_NULL_CHECK(d, F);
    if (during) *during = d->during;
    if (after) *after = d->after;
    return DLT_OK;
}
