/*
 * tape.c - the autograd-lite tape.
 *
 * Recording: each op that needs a gradient creates a node holding (a) edges to where its
 * inputs' gradients go (another node's output slot, or a leaf), (b) what its backward needs
 * (saved tensors and attributes). Nodes are reference counted: a tensor holds its producer
 * (grad_fn), a node holds the producers of its inputs. The context's tape keeps nodes in
 * recording order as weak pointers; recording order is a topological order, so backward is
 * a reverse walk that runs every node that received a gradient.
 *
 * Backward frees as it goes: after a node runs, its saved tensors and accumulated output
 * gradients are dropped and the node is marked consumed.
 *
 * A node never holds a strong reference to its own outputs (that would be a cycle through
 * grad_fn): an op that needs its output saves a detached alias (dlt__alias).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- grad mode ---- */

dlt_status dlt_grad_set_enabled(dlt_ctx *ctx, int32_t enabled, int32_t *previous) {
    DLT_NULL_CHECK(ctx, "dlt_grad_set_enabled");
    if (previous) *previous = ctx->grad_enabled;
    ctx->grad_enabled = enabled != 0;
    return DLT_OK;
}

int32_t dlt_grad_is_enabled(const dlt_ctx *ctx) { return ctx ? ctx->grad_enabled : 0; }

/* ---- nodes ---- */

static int tensor_needs_grad(const dlt_tensor *t) {
    return t && (t->requires_grad || t->grad_fn != NULL);
}

int dlt__needs_grad(const dlt_ctx *ctx, dlt_tensor *const *inputs, int32_t n) {
    if (!ctx->grad_enabled) return 0;
    for (int32_t i = 0; i < n; i++)
        if (tensor_needs_grad(inputs[i])) return 1;
    return 0;
}

static dlt_status tape_append(dlt_ctx *ctx, dlt_node *node) {
    dlt_tape *tp = &ctx->tape;
    if (tp->n == tp->cap) {
        /* compact dead slots first; grow only if that does not free a quarter */
        int64_t k = 0;
        for (int64_t i = 0; i < tp->n; i++) {
            dlt_node *nd = tp->slots[i];
            if (nd) {
                nd->slot = k;
                tp->slots[k++] = nd;
            }
        }
        tp->n = k;
        if (tp->cap == 0 || tp->n > tp->cap - tp->cap / 4) {
            int64_t cap = tp->cap ? tp->cap * 2 : 256;
            dlt_node **s = dlt__host_realloc(ctx, tp->slots, (size_t)cap * sizeof *s);
            if (!s) return dlt__err(DLT_ERR_OUT_OF_MEMORY, "dlt_backward", "cannot grow the tape");
            tp->slots = s;
            tp->cap = cap;
        }
    }
    node->slot = tp->n;
    tp->slots[tp->n++] = node;
    tp->live++;
    return DLT_OK;
}

dlt_status dlt__record(dlt_ctx *ctx, const char *name, dlt_backward_fn backward,
                       dlt_tensor *const *inputs, int32_t n_in, dlt_tensor *const *outputs,
                       int32_t n_out, dlt_node **out_node) {
    *out_node = NULL;
    if (!dlt__needs_grad(ctx, inputs, n_in)) return DLT_OK;
    dlt_node *nd = dlt__host_calloc(ctx, 1, sizeof *nd);
    if (!nd) return dlt__err(DLT_ERR_OUT_OF_MEMORY, name, "cannot allocate a tape node");
    nd->refcount = 1; /* the tape append below does not count; outputs add theirs */
    nd->ctx = ctx;
    nd->name = name;
    nd->backward = backward;
    nd->n_in = n_in;
    nd->n_out = n_out;
    nd->seq = ctx->tape.next_seq++;
    dlt_status st = tape_append(ctx, nd);
    if (st != DLT_OK) {
        free(nd);
        return st;
    }
    for (int32_t i = 0; i < n_in; i++) {
        dlt_tensor *t = inputs[i];
        if (!t) continue;
        if (t->requires_grad) {
            nd->next[i].leaf = dlt_tensor_retain(t);
        } else if (t->grad_fn) {
            nd->next[i].node = t->grad_fn;
            t->grad_fn->refcount++;
            nd->next[i].index = t->grad_fn_output;
        }
    }
    for (int32_t i = 0; i < n_out; i++) {
        dlt_tensor *o = outputs[i];
        if (o->grad_fn) dlt__node_release(o->grad_fn);
        o->grad_fn = nd;
        o->grad_fn_output = i;
        o->graph_consumed = 0;
        nd->refcount++;
    }
    nd->refcount--; /* drop the creation reference: outputs now own the node */
    *out_node = nd;
    return DLT_OK;
}

void dlt__save(dlt_node *node, dlt_tensor *t) {
    if (!node) return;
    node->saved[node->n_saved++] = dlt_tensor_retain(t);
}

static void node_drop_saved(dlt_node *nd) {
    for (int32_t i = 0; i < nd->n_saved; i++) {
        dlt_tensor_release(nd->saved[i]);
        nd->saved[i] = NULL;
    }
    nd->n_saved = 0;
    for (int32_t i = 0; i < DLT_NODE_MAX_OUT; i++) {
        dlt_tensor_release(nd->grad_accum[i]);
        nd->grad_accum[i] = NULL;
    }
}

/* Iterative release: a long chain of nodes must not recurse once per node. */
void dlt__node_release(dlt_node *node) {
    dlt_node *stack_buf[64];
    dlt_node **stack = stack_buf;
    int64_t sp = 0, cap = 64;
    if (!node) return;
    if (--node->refcount > 0) return;
    stack[sp++] = node;
    while (sp > 0) {
        dlt_node *nd = stack[--sp];
        dlt_ctx *ctx = nd->ctx;
        if (nd->slot >= 0 && nd->slot < ctx->tape.n && ctx->tape.slots[nd->slot] == nd) {
            ctx->tape.slots[nd->slot] = NULL;
            ctx->tape.live--;
        }
        node_drop_saved(nd);
        for (int32_t i = 0; i < nd->n_in; i++) {
            dlt_tensor_release(nd->next[i].leaf);
            dlt_node *up = nd->next[i].node;
            if (up && --up->refcount == 0) {
                if (sp == cap) {
                    int64_t ncap = cap * 2;
                    dlt_node **ns = malloc((size_t)ncap * sizeof *ns);
                    if (!ns) {
                        /* Out of memory while freeing: leak the rest rather than crash. */
                        continue;
                    }
                    memcpy(ns, stack, (size_t)sp * sizeof *ns);
                    if (stack != stack_buf) free(stack);
                    stack = ns;
                    cap = ncap;
                }
                stack[sp++] = up;
            }
        }
        free(nd);
    }
    if (stack != stack_buf) free(stack);
}

void dlt__tape_fini(dlt_ctx *ctx) {
    /* Nodes still alive are owned by tensors the user has not released; detach them from
     * the tape so they do not touch freed memory later. */
    for (int64_t i = 0; i < ctx->tape.n; i++)
        if (ctx->tape.slots[i]) ctx->tape.slots[i]->slot = -1;
    free(ctx->tape.slots);
    free(ctx->tape.pend_dst);
    free(ctx->tape.pend_src);
    free(ctx->tape.pend_beta);
    memset(&ctx->tape, 0, sizeof ctx->tape);
}

dlt_status dlt_tape_live_nodes(dlt_ctx *ctx, int64_t *out) {
    DLT_NULL_CHECK(ctx, "dlt_tape_live_nodes");
    DLT_NULL_CHECK(out, "dlt_tape_live_nodes");
    *out = ctx->tape.live;
    return DLT_OK;
}

dlt_status dlt_tape_clear(dlt_ctx *ctx) {
    DLT_NULL_CHECK(ctx, "dlt_tape_clear");
    for (int64_t i = 0; i < ctx->tape.n; i++) {
        dlt_node *nd = ctx->tape.slots[i];
        if (nd) {
            node_drop_saved(nd);
            nd->consumed = 1;
        }
    }
    return DLT_OK;
}

/* ---- backend calls on gradients ----
 * Kernels may assume numel > 0 (internal.h), and zero-size tensors have no storage to copy
 * from: gradients of empty tensors (a batch of 0, a layer with 0 channels) skip the kernel.
 * An empty gradient has no element to write, so skipping is the whole result. */

static dlt_status be_accumulate(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src, int32_t beta) {
    return dst->numel ? ctx->be->accumulate(ctx, dst, src, beta) : DLT_OK;
}
static dlt_status be_fill(dlt_ctx *ctx, dlt_tensor *t, double v) {
    return t->numel ? ctx->be->fill(ctx, t, v) : DLT_OK;
}
static dlt_status be_copy(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src) {
    return dst->numel ? ctx->be->memcpy_d2d(ctx, dlt__data(dst), dlt__data(src), dlt__nbytes(dst))
                      : DLT_OK;
}
static dlt_status be_convert(dlt_ctx *ctx, dlt_tensor *dst, const dlt_tensor *src) {
    return dst->numel ? ctx->be->convert(ctx, dst, src) : DLT_OK;
}

/* ---- deferred leaf accumulations ----
 * Under autocast every conv/linear weight gradient arrives in fp16/bf16 and must be added
 * into the parameter's fp32 gradient: ~55 tiny conversion kernels per ResNet50 step. They
 * are queued during backward and applied by one multi-tensor launch whenever the queue holds
 * DLT_GRAD_QUEUE_MAX bytes, when backward ends, or before anything else touches one of those
 * leaves. The queued gradients hold memory meanwhile: ResNet50 at batch 256 queued ~20 MiB
 * at the step's peak when the queue waited for the end of backward (H200, graph arena:
 * 239.5 MiB live at most, 219.6 with 4 MiB; ~13 launches instead of one, ~0.03 ms). */
static int64_t pend_limit(const dlt_ctx *ctx) {
    const int64_t n = ctx->env.v[DLT__ENV_GRAD_QUEUE_MAX]; /* default 4 MiB (env.c) */
    return n > 0 ? n : 1;
}

static dlt_status pend_flush(dlt_ctx *ctx) {
    dlt_tape *tp = &ctx->tape;
    if (tp->n_pend == 0) return DLT_OK;
    /* on the side stream where there is one: it is ordered after the side's weight
     * gradients already, and nothing on the main stream reads these sums before backward
     * ends (the tape joins before anything touches them) */
    int32_t side = 0;
    dlt_status st = dlt__side_begin(ctx, tp->n_pend, tp->n_pend, &side);
    int join = 0; /* on the main stream: a queued gradient may be the side's, or go where it writes */
    for (int32_t i = 0; st == DLT_OK && !side && i < tp->n_pend && !join; i++)
        join = dlt__side_holds(ctx, tp->pend_src[i]) || dlt__side_wrote(ctx, tp->pend_dst[i]);
    if (st == DLT_OK && join) st = dlt__side_join(ctx);
    if (st == DLT_OK)
        st = ctx->be->accumulate_multi(ctx, tp->n_pend, tp->pend_dst, (const dlt_tensor *const *)tp->pend_src,
                                       tp->pend_beta);
    if (side) {
        const dlt_status est = dlt__side_end(ctx, tp->pend_src, tp->n_pend, tp->pend_dst, tp->n_pend);
        if (st == DLT_OK) st = est;
    }
    for (int32_t i = 0; i < tp->n_pend; i++) {
        tp->pend_dst[i]->grad_pending = 0;
        dlt_tensor_release(tp->pend_src[i]);
        tp->pend_src[i] = NULL;
    }
    tp->n_pend = 0;
    tp->pend_bytes = 0;
    return st;
}

/* Queues dst = beta*dst + g (g owned). Returns 0 when it cannot queue (caller writes now). */
static int pend_push(dlt_ctx *ctx, dlt_tensor *dst, dlt_tensor *g, int32_t beta) {
    dlt_tape *tp = &ctx->tape;
    if (!tp->in_backward || !ctx->be->accumulate_multi || dst->grad_pending || dst->format != g->format ||
        dst->numel == 0)
        return 0;
    if (tp->n_pend == tp->cap_pend) {
        int32_t cap = tp->cap_pend ? tp->cap_pend * 2 : 64;
        dlt_tensor **d = realloc(tp->pend_dst, (size_t)cap * sizeof *d);
        if (d) tp->pend_dst = d;
        dlt_tensor **sv = realloc(tp->pend_src, (size_t)cap * sizeof *sv);
        if (sv) tp->pend_src = sv;
        int32_t *b = realloc(tp->pend_beta, (size_t)cap * sizeof *b);
        if (b) tp->pend_beta = b;
        if (!d || !sv || !b) return 0;
        tp->cap_pend = cap;
    }
    tp->pend_dst[tp->n_pend] = dst;
    tp->pend_src[tp->n_pend] = g;
    tp->pend_beta[tp->n_pend] = beta;
    tp->n_pend++;
    tp->pend_bytes += (int64_t)dlt__nbytes(g);
    dst->grad_pending = 1;
    return 1;
}

/* ---- hooks (dist): leaf gradients that are final ----
 * Before the walk, a pre-scan from the root's node marks the nodes reachable from it
 * (recording order is topological, so one reverse pass suffices) and counts, per leaf, the
 * edges of reachable nodes that lead to it. The walk visits those nodes in the same order
 * and counts down after each, run or skipped: at zero nothing left in this backward can add
 * to the leaf's gradient, and the hooks hear of it (DDP then launches a full bucket while
 * the rest of the backward runs). Nothing is counted when no hook is set. */

dlt_status dlt__tape_hook_add(dlt_ctx *ctx, const dlt_tape_hook *h, const char *func) {
    dlt_tape *tp = &ctx->tape;
    if (tp->in_backward)
        return dlt__err(DLT_ERR_INVALID_STATE, func, "cannot add a tape hook during backward");
    if (tp->n_hooks >= DLT_TAPE_MAX_HOOKS)
        return dlt__err(DLT_ERR_INVALID_STATE, func,
                        "the context already has %d tape hooks (DDP objects); destroy one first",
                        DLT_TAPE_MAX_HOOKS);
    tp->hooks[tp->n_hooks++] = *h;
    return DLT_OK;
}

void dlt__tape_hook_remove(dlt_ctx *ctx, void *user) {
    dlt_tape *tp = &ctx->tape;
    for (int32_t i = 0; i < tp->n_hooks; i++)
        if (tp->hooks[i].user == user) {
            memmove(&tp->hooks[i], &tp->hooks[i + 1], (size_t)(tp->n_hooks - i - 1) * sizeof tp->hooks[0]);
            tp->n_hooks--;
            return;
        }
}

static void hook_prescan(dlt_ctx *ctx, dlt_node *start) {
    dlt_tape *tp = &ctx->tape;
    const uint64_t gen = ++tp->hook_gen;
    start->hook_gen = gen;
    for (int64_t i = start->slot; i >= 0; i--) {
        dlt_node *nd = tp->slots[i];
        if (!nd || nd->consumed || nd->hook_gen != gen) continue;
        for (int32_t k = 0; k < nd->n_in; k++) {
            dlt_edge *e = &nd->next[k];
            if (e->leaf) {
                if (e->leaf->hook_gen != gen) {
                    e->leaf->hook_gen = gen;
                    e->leaf->hook_uses = 0;
                }
                e->leaf->hook_uses++;
            } else if (e->node && !e->node->consumed) {
                e->node->hook_gen = gen;
            }
        }
    }
}

/* After node nd was visited by the walk: the leaves it was the last user of are final. */
static dlt_status hook_visited(dlt_ctx *ctx, dlt_node *nd) {
    dlt_tape *tp = &ctx->tape;
    if (nd->hook_gen != tp->hook_gen) return DLT_OK;
    for (int32_t k = 0; k < nd->n_in; k++) {
        dlt_tensor *leaf = nd->next[k].leaf;
        if (!leaf || leaf->hook_gen != tp->hook_gen || --leaf->hook_uses != 0) continue;
        if (leaf->grad && dlt__side_wrote(ctx, leaf->grad)) /* the hook may read it now */
            DLT_CHECK(dlt__side_join(ctx));
        for (int32_t h = 0; h < tp->n_hooks; h++)
            if (tp->hooks[h].leaf_ready) DLT_CHECK(tp->hooks[h].leaf_ready(tp->hooks[h].user, leaf));
    }
    return DLT_OK;
}

/* Runs the end hooks of hooks 0..n-1 with the backward's status; returns the status, or
 * the first hook failure when it was DLT_OK. Every hook runs (each cleans up its own). */
static dlt_status hooks_end(dlt_ctx *ctx, int32_t n, dlt_status st) {
    for (int32_t h = 0; h < n; h++)
        if (ctx->tape.hooks[h].end) {
            dlt_status hst = ctx->tape.hooks[h].end(ctx->tape.hooks[h].user, st);
            if (st == DLT_OK) st = hst;
        }
    return st;
}

/* for dist's hooks: the sums must be on the main stream, where the all-reduce forks from */
dlt_status dlt__tape_flush(dlt_ctx *ctx) {
    DLT_CHECK(pend_flush(ctx));
    return dlt__side_join(ctx);
}

/* ---- gradient plumbing ---- */

dlt_status dlt__grad_slot_store(dlt_ctx *ctx, dlt_grad_slot *slot, dlt_tensor *g) {
    if (!slot->needed) {
        dlt_tensor_release(g);
        return DLT_OK;
    }
    if (slot->dst) {
        if (slot->dst->grad_pending) { /* an earlier queued write must land first */
            dlt_status fst = pend_flush(ctx);
            if (fst != DLT_OK) {
                dlt_tensor_release(g);
                return fst;
            }
        }
        if (slot->nonleaf && (g->dtype != slot->dst->dtype || g->format != slot->dst->format)) {
            slot->result = g; /* the tape's accumulate_into converts */
            return DLT_OK;
        }
        if (g->dtype != slot->dst->dtype && !slot->nonleaf && pend_push(ctx, slot->dst, g, slot->beta)) {
            slot->written = 1;
            return ctx->tape.pend_bytes >= pend_limit(ctx) ? pend_flush(ctx) : DLT_OK;
        }
        dlt_status st = DLT_OK; /* g or dst may be the side stream's */
        if (dlt__side_holds(ctx, g) || dlt__side_wrote(ctx, slot->dst)) st = dlt__side_join(ctx);
        if (st == DLT_OK) st = be_accumulate(ctx, slot->dst, g, slot->beta);
        dlt_tensor_release(g);
        if (st == DLT_OK) slot->written = 1;
        return st;
    }
    slot->result = g;
    return DLT_OK;
}

/* Adds g (owned) into *acc (owned), producing a tensor owned by *acc. */
static dlt_status accumulate_into(dlt_ctx *ctx, dlt_tensor **acc, dlt_tensor *g) {
    if (!*acc) {
        *acc = g;
        return DLT_OK;
    }
    dlt_tensor *a = *acc;
    if (dlt__side_holds(ctx, a) || dlt__side_holds(ctx, g)) {
        const dlt_status jst = dlt__side_join(ctx);
        if (jst != DLT_OK) {
            dlt_tensor_release(g);
            return jst;
        }
    }
    /* In place when nobody else can see the accumulator (not an alias of another grad). */
    if (a->refcount == 1 && a->storage->refcount == 1 && a->dtype == g->dtype &&
        a->format == g->format) {
        dlt_status st = be_accumulate(ctx, a, g, 1);
        dlt_tensor_release(g);
        return st;
    }
    dlt_tensor *sum;
    DLT_CHECK(dlt__tensor_new_like(a, a->dtype, "dlt_backward", &sum));
    dlt_status st = be_copy(ctx, sum, a);
    if (st == DLT_OK) st = be_accumulate(ctx, sum, g, 1);
    dlt_tensor_release(g);
    if (st != DLT_OK) {
        dlt_tensor_release(sum);
        return st;
    }
    dlt_tensor_release(a);
    *acc = sum;
    return DLT_OK;
}

/* Leaf gradient buffer: created on first need with the leaf's shape, dtype and format. */
static dlt_status leaf_grad_buffer(dlt_tensor *leaf, dlt_tensor **out) {
    if (!leaf->grad) {
        DLT_CHECK(dlt__tensor_new_like(leaf, leaf->dtype, "dlt_backward", &leaf->grad));
        leaf->grad_defined = 0;
    }
    *out = leaf->grad;
    return DLT_OK;
}

/* A queued write into the leaf's gradient buffer (pend_push marks the buffer it writes) */
static int leaf_pending(const dlt_tensor *leaf) {
    return leaf->grad_pending || (leaf->grad && leaf->grad->grad_pending);
}

static dlt_status deliver_to_leaf(dlt_ctx *ctx, dlt_tensor *leaf, dlt_tensor *g) {
    dlt_tensor *buf;
    if (leaf_pending(leaf)) {
        dlt_status fst = pend_flush(ctx);
        if (fst != DLT_OK) {
            dlt_tensor_release(g);
            return fst;
        }
    }
    dlt_status st = leaf_grad_buffer(leaf, &buf);
    if (st == DLT_OK && (dlt__side_holds(ctx, g) || dlt__side_wrote(ctx, buf))) st = dlt__side_join(ctx);
    if (st == DLT_OK) st = be_accumulate(ctx, buf, g, leaf->grad_defined ? 1 : 0);
    dlt_tensor_release(g);
    if (st == DLT_OK) leaf->grad_defined = 1;
    return st;
}

static dlt_status run_node(dlt_ctx *ctx, dlt_node *nd) {
    dlt_grad_slot slots[DLT_NODE_MAX_IN];
    memset(slots, 0, sizeof slots);
    for (int32_t i = 0; i < nd->n_in; i++)
        if (nd->next[i].leaf && leaf_pending(nd->next[i].leaf)) {
            DLT_CHECK(pend_flush(ctx));
            break;
        }
    /* the side stream may still be writing a gradient this node reads or writes; a cast
     * node only hands its gradient on (dlt__grad_slot_store and the queue join as needed) */
    int join = 0;
    for (int32_t i = 0; i < nd->n_in; i++)
        join |= nd->next[i].leaf && nd->next[i].leaf->grad && dlt__side_wrote(ctx, nd->next[i].leaf->grad);
    for (int32_t k = 0; k < nd->n_out && !nd->hands_on; k++)
        join |= dlt__side_holds(ctx, nd->grad_accum[k]);
    if (join) DLT_CHECK(dlt__side_join(ctx));
    for (int32_t i = 0; i < nd->n_in; i++) {
        dlt_edge *e = &nd->next[i];
        if (e->leaf) {
            slots[i].needed = 1;
            /* a leaf used twice by one op (x + x): only its first slot is written directly;
             * the others are delivered afterwards, in order, so they accumulate */
            int dup = 0;
            for (int32_t k = 0; k < i; k++) dup |= nd->next[k].leaf == e->leaf;
            if (dup) continue;
            dlt_tensor *buf;
            DLT_CHECK(leaf_grad_buffer(e->leaf, &buf));
            slots[i].dst = buf;
            slots[i].beta = e->leaf->grad_defined;
        } else if (e->node && !e->node->consumed) {
            slots[i].needed = 1;
            /* the output's gradient so far, when no one else can see it (accumulate_into's
             * in-place rule): an op may add into it directly */
            dlt_tensor *acc = e->node->grad_accum[e->index];
            int dup = 0;
            for (int32_t k = 0; k < i; k++)
                dup |= nd->next[k].node == e->node && nd->next[k].index == e->index;
            if (acc && !dup && acc->refcount == 1 && acc->storage->refcount == 1 &&
                !dlt__side_holds(ctx, acc)) {
                slots[i].dst = acc;
                slots[i].beta = 1;
                slots[i].nonleaf = 1;
            }
        }
    }
    dlt_status st = nd->backward(nd, nd->grad_accum, slots);
    for (int32_t i = 0; i < nd->n_in && st == DLT_OK; i++) {
        dlt_edge *e = &nd->next[i];
        if (!slots[i].needed) {
            dlt_tensor_release(slots[i].result);
            continue;
        }
        if (e->leaf) {
            if (slots[i].result)
                st = deliver_to_leaf(ctx, e->leaf, slots[i].result);
            else if (slots[i].written)
                e->leaf->grad_defined = 1;
            slots[i].result = NULL;
        } else if (e->node && slots[i].result) {
            st = accumulate_into(ctx, &e->node->grad_accum[e->index], slots[i].result);
            slots[i].result = NULL;
        }
    }
    for (int32_t i = 0; i < nd->n_in; i++) dlt_tensor_release(slots[i].result);
    return st;
}

dlt_status dlt_backward(dlt_tensor *root, dlt_tensor *grad) {
    static const char *F = "dlt_backward";
    DLT_CHECK(dlt__check_tensor(root, F, "root"));
    dlt_ctx *ctx = root->ctx;
    if (grad) {
        DLT_CHECK(dlt__check_tensor(grad, F, "grad"));
        DLT_CHECK(dlt__check_same_ctx(root, grad, F, "root", "grad"));
        if (!dlt__same_shape(root, grad)) {
            char a[96], b[96];
            return dlt__err(DLT_ERR_SHAPE, F, "grad has shape %s but root has %s",
                            dlt__shape_str(grad, a, sizeof a), dlt__shape_str(root, b, sizeof b));
        }
        /* a floating gradient of another dtype is converted to root's (PyTorch's engine does
         * grad.to(dtype)); an integer one is a mistake, not a gradient */
        if (!dlt__is_float(grad->dtype))
            return dlt__err(DLT_ERR_DTYPE, F,
                            "grad is %s; a gradient must be floating-point (f32, f16 or bf16; "
                            "it is converted to root's %s)",
                            dlt_dtype_name(grad->dtype), dlt_dtype_name(root->dtype));
    } else if (root->numel != 1) {
        char a[96];
        return dlt__err(DLT_ERR_SHAPE, F,
                        "root has shape %s: a gradient must be given for a non-scalar root",
                        dlt__shape_str(root, a, sizeof a));
    }
    dlt_node *start = root->grad_fn;
    if (!start) {
        if (root->requires_grad) { /* backward on a leaf: its gradient is the seed */
            dlt_tensor *g;
            if (grad) {
                DLT_CHECK(dlt__tensor_new_like(root, root->dtype, F, &g));
                dlt_status st = be_convert(ctx, g, grad);
                if (st != DLT_OK) {
                    dlt_tensor_release(g);
                    return st;
                }
            } else {
                DLT_CHECK(dlt__tensor_new_like(root, root->dtype, F, &g));
                dlt_status st = be_fill(ctx, g, 1.0);
                if (st != DLT_OK) {
                    dlt_tensor_release(g);
                    return st;
                }
            }
            return deliver_to_leaf(ctx, root, g);
        }
        if (root->graph_consumed)
            return dlt__err(DLT_ERR_INVALID_STATE, F,
                            "backward already ran through this graph; run the forward again");
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "the root was not produced by recorded ops (grad mode off, or no input "
                        "requires a gradient)");
    }
    if (start->consumed)
        return dlt__err(DLT_ERR_INVALID_STATE, F,
                        "backward already ran through this graph (node '%s'); run the forward "
                        "again to record a new one",
                        start->name);
    if (start->slot < 0)
        return dlt__err(DLT_ERR_INVALID_STATE, F, "the recording belongs to a destroyed tape");

    /* hooks (dist) first: a refusing hook leaves the graph as it was */
    const int32_t hooked = ctx->tape.n_hooks > 0;
    if (hooked) {
        hook_prescan(ctx, start);
        for (int32_t h = 0; h < ctx->tape.n_hooks; h++)
            if (ctx->tape.hooks[h].begin) {
                dlt_status hst = ctx->tape.hooks[h].begin(ctx->tape.hooks[h].user);
                if (hst != DLT_OK) {
                    hooks_end(ctx, h, hst);
                    return dlt__err_wrap(hst, F);
                }
            }
    }

    /* seed */
    dlt_tensor *seed = NULL;
    dlt_status st = dlt__tensor_new_like(root, root->dtype, F, &seed);
    if (st == DLT_OK)
        st = grad ? (grad->dtype == root->dtype && grad->format == root->format
                         ? be_copy(ctx, seed, grad)
                         : be_convert(ctx, seed, grad))
                  : be_fill(ctx, seed, 1.0);
    if (st == DLT_OK) {
        st = accumulate_into(ctx, &start->grad_accum[root->grad_fn_output], seed);
        seed = NULL; /* accumulate_into took it */
    }
    if (st != DLT_OK) {
        dlt_tensor_release(seed);
        if (hooked) hooks_end(ctx, ctx->tape.n_hooks, st);
        return dlt__err_wrap(st, F);
    }

    dlt__range_push(ctx, "backward");
    ctx->tape.in_backward = 1;
    /* Keep the start node alive while we walk (the root may be released by a hook). */
    start->refcount++;
    for (int64_t i = start->slot; i >= 0 && st == DLT_OK; i--) {
        dlt_node *nd = ctx->tape.slots[i];
        if (!nd || nd->consumed) continue;
        int has = 0;
        for (int32_t k = 0; k < nd->n_out; k++) has |= nd->grad_accum[k] != NULL;
        if (!has) {
            if (hooked) st = hook_visited(ctx, nd);
            continue;
        }
        nd->refcount++;
        dlt__range_push(ctx, nd->name);
        st = run_node(ctx, nd);
        dlt__range_pop(ctx);
        node_drop_saved(nd);
        nd->consumed = 1;
        if (hooked && st == DLT_OK) st = hook_visited(ctx, nd);
        dlt__node_release(nd);
    }
    root->graph_consumed = 1;
    dlt__node_release(start);
    dlt_status fst = pend_flush(ctx);
    if (st == DLT_OK) st = fst;
    fst = dlt__side_join(ctx); /* also after a failure: nothing outlives the backward */
    if (st == DLT_OK) st = fst;
    /* the end hooks may flush again (DDP launches what is left): still "in backward" for
     * the queue, which is empty now */
    if (hooked) st = hooks_end(ctx, ctx->tape.n_hooks, st);
    ctx->tape.in_backward = 0;
    dlt__range_pop(ctx);
    return st == DLT_OK ? st : dlt__err_wrap(st, F);
}

/* set_to_none: the leaf lets its buffer go, as PyTorch's grad = None does, so a step's
 * forward and early backward run without the gradients of the layers the backward has not
 * reached (ResNet50 at batch 256 fp16, the CPU backend's exact sizes: peak 477 -> 435 MiB).
 * A caller that retained it keeps a tensor the next backward no longer writes. Kept (only
 * marked absent) where the memory must stay: while a captured graph lives, which may replay
 * into it (as the CUDA backend keeps a replaced workspace until the last graph goes), during
 * a capture and its warm-up (whose allocations must match), or where its storage is shared
 * (a DDP bucket view). Work still queued into it lands first: the side stream's weight
 * gradients (joined) and the fp32 flush queue. */
static dlt_status release_grad_buffer(dlt_tensor *p) {
    dlt_ctx *ctx = p->ctx;
    dlt_tensor *g = p->grad;
    if (ctx->capturing || ctx->graph_warmup || ctx->live_graphs > 0 || !g->storage || g->storage->refcount != 1)
        return DLT_OK;
    if (p->grad_pending || g->grad_pending) DLT_CHECK(pend_flush(ctx));
    if (dlt__side_wrote(ctx, g) || dlt__side_holds(ctx, g)) DLT_CHECK(dlt__side_join(ctx));
    p->grad = NULL;
    dlt_tensor_release(g);
    return DLT_OK;
}

dlt_status dlt_zero_grad(dlt_tensor *const *params, int32_t n, int32_t set_to_none) {
    static const char *F = "dlt_zero_grad";
    if (n > 0) DLT_NULL_CHECK(params, F);
    if (n < 0) return dlt__err(DLT_ERR_INVALID_ARGUMENT, F, "n %d is negative", n);
    for (int32_t i = 0; i < n; i++) {
        dlt_tensor *p = params[i];
        if (!p || !p->grad) continue;
        if (set_to_none) {
            /* also a buffer left undefined (kept earlier, or made by a backward that failed
             * before writing it) */
            p->grad_defined = 0; /* the next backward overwrites (or allocates) it */
            dlt_status st = release_grad_buffer(p);
            if (st != DLT_OK) return dlt__err_wrap(st, F);
        } else if (p->grad_defined && p->grad->numel > 0) {
            dlt_status st = p->ctx->be->memset0(p->ctx, dlt__data(p->grad), dlt__nbytes(p->grad));
            if (st != DLT_OK) return dlt__err_wrap(st, F);
        }
    }
    return DLT_OK;
}
