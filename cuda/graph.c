/*
 * graph.c - CUDA side of whole-step graphs: stream capture on the context's stream
 * (thread-local mode, so other threads' CUDA calls cannot invalidate it), instantiation,
 * upload, launch. The cuDNN/cuBLAS handles are bound to the same stream, so their kernels
 * are captured too; their plans and workspaces were made during warm-up.
 *
 * Memory. Left to the driver, every allocation made during capture becomes a graph memory
 * node, and the graph's footprint is however the driver lays those out: at ResNet50 batch
 * 256 that came to ~25 MiB over what the step has live at once, and it moved by 30 MiB
 * with unrelated changes in the allocation order. So the step's temporaries are placed by
 * us, in one buffer (an arena) per graph: the last warm-up step's allocations are placed
 * by lib/core/arena.c as they happen (sizing: the pool serves them, the placement only
 * counts), the buffer is allocated at the highest offset that reached, and the capture
 * places the same sequence again inside it. The same sequence gives the same offsets, so it
 * fits; an allocation that does not (a step that allocates differently from one call to the
 * next) goes to the pool and so becomes a graph memory node as before. Blocks are reused
 * within the capture in host order: every allocation is the context stream's (work on the
 * side stream allocates nothing, and what it uses is held until it has joined: side.c). The arena
 * lives until its graph is destroyed and its last block released: a tensor the step hands
 * out stays valid, rewritten by each replay. DLT_GRAPH_ARENA=0 leaves all of it to the
 * driver (instantiated with auto-free-on-launch, as before).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/core/arena.h"
#include "../lib/core/graph_depth.h"
#include "cuda_internal.h"

/* A growable list of device pointers. */
typedef struct ptr_list {
    void **p;
    int64_t n, cap;
} ptr_list;

static int ptr_push(ptr_list *l, void *ptr) {
    if (l->n == l->cap) {
        const int64_t cap = l->cap ? 2 * l->cap : 16;
        void **p = realloc(l->p, (size_t)cap * sizeof *p);
        if (!p) return 0;
        l->p = p, l->cap = cap;
    }
    l->p[l->n++] = ptr;
    return 1;
}

static int ptr_take(ptr_list *l, const void *ptr) {
    for (int64_t i = 0; i < l->n; i++)
        if (l->p[i] == ptr) {
            l->p[i] = l->p[--l->n];
            return 1;
        }
    return 0;
}

/* frees every block of the list in stream order and empties it */
static void ptr_free_all(dlt_cuda_state *s, ptr_list *l) {
    for (int64_t i = 0; i < l->n; i++)
        if (cudaFreeAsync(l->p[i], s->stream) != cudaSuccess) (void)cudaGetLastError();
    free(l->p);
    memset(l, 0, sizeof *l);
}

typedef struct graph_arena {
    struct graph_arena *next;
    dlt_arena *place;
    char *base;
    uint64_t size;
    int32_t owned; /* its graph (or the capture filling it) still exists */
} graph_arena;

struct dlt_graph_mem {
    int32_t enabled;         /* DLT_GRAPH_ARENA != 0 */
    dlt_arena *trace;        /* the sizing run in progress */
    int32_t trace_broken;    /* a placement failed (host memory): no size from this run */
    uint64_t sized, sized_live; /* the last sizing run: highest offset, most live at once */
    graph_arena *filling;    /* the capture in progress places into this one */
    graph_arena *arenas;     /* every arena not yet released */
    int64_t outside;         /* allocations of this capture that went to the pool */
    ptr_list pooled;         /* those blocks (graph allocations: a captured free may name them) */
    ptr_list orphans;        /* blocks from before the capture released during it */
};

/* orphans: a block allocated before the capture and released during it cannot be freed
 * there (a captured free must name a graph allocation; cudaFreeAsync fails and the block
 * leaked, compute-sanitizer 2026-12-02), nor right after it (the replays may still read
 * it: the step used it before letting it go). It lives as long as the graph. */
typedef struct graph_exec {
    cudaGraphExec_t exec;
    graph_arena *arena;
    ptr_list orphans;
} graph_exec;

static struct dlt_graph_mem *gmem_get(dlt_ctx *ctx) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (!s->gmem) {
        s->gmem = calloc(1, sizeof *s->gmem);
        if (s->gmem) s->gmem->enabled = ctx->env.v[DLT__ENV_GRAPH_ARENA] != 0;
    }
    return s->gmem;
}

static graph_arena *arena_of(struct dlt_graph_mem *m, const void *ptr) {
    for (graph_arena *a = m->arenas; a; a = a->next)
        if ((const char *)ptr >= a->base && (const char *)ptr < a->base + a->size) return a;
    return NULL;
}

/* Frees an arena nobody uses any more. Not during a capture: the free would be captured
 * (capture_end sweeps what was left). */
static void arena_release_if_unused(dlt_ctx *ctx, graph_arena *a) {
    dlt_cuda_state *s = dlt__cu(ctx);
    if (a->owned || dlt__arena_live(a->place) != 0 || ctx->capturing) return;
    for (graph_arena **p = &s->gmem->arenas; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            break;
        }
    if (cudaFreeAsync(a->base, s->stream) != cudaSuccess) (void)cudaGetLastError();
    dlt__arena_destroy(a->place);
    free(a);
}

/* Releases the arenas whose last block went during a capture (called when it has ended). */
static void sweep(dlt_ctx *ctx) {
    dlt_cuda_state *s = dlt__cu(ctx);
    for (graph_arena *a = s->gmem ? s->gmem->arenas : NULL, *next; a; a = next) {
        next = a->next;
        arena_release_if_unused(ctx, a);
    }
}

void dlt__cuda_capture_trace(dlt_ctx *ctx, int32_t on) {
    struct dlt_graph_mem *m = gmem_get(ctx);
    if (!m) return;
    if (on) {
        dlt__arena_destroy(m->trace);
        m->trace = m->enabled ? dlt__arena_create(UINT64_MAX) : NULL;
        m->trace_broken = 0;
        m->sized = m->sized_live = 0;
        return;
    }
    if (!m->trace) return;
    if (!m->trace_broken) {
        m->sized = dlt__arena_high(m->trace);
        m->sized_live = dlt__arena_live_peak(m->trace);
    }
    dlt__arena_destroy(m->trace);
    m->trace = NULL;
}

void dlt__cuda_gmem_note(dlt_ctx *ctx, void *ptr, size_t bytes) {
    struct dlt_graph_mem *m = dlt__cu(ctx)->gmem;
    if (m->trace && dlt__arena_alloc_key(m->trace, (uint64_t)(uintptr_t)ptr, bytes, NULL) != 0)
        m->trace_broken = 1;
}

int dlt__cuda_gmem_alloc(dlt_ctx *ctx, size_t bytes, void **ptr) {
    struct dlt_graph_mem *m = dlt__cu(ctx)->gmem;
    if (!m->filling) return 0;
    uint64_t off;
    if (dlt__arena_alloc(m->filling->place, bytes, &off) != 0) {
        m->outside++;
        return 0;
    }
    *ptr = m->filling->base + off;
    return 1;
}

int dlt__cuda_gmem_free(dlt_ctx *ctx, void *ptr, size_t bytes) {
    dlt_cuda_state *s = dlt__cu(ctx);
    struct dlt_graph_mem *m = s->gmem;
    if (m->trace) (void)dlt__arena_free_key(m->trace, (uint64_t)(uintptr_t)ptr); /* unknown: older */
    graph_arena *a = m->arenas ? arena_of(m, ptr) : NULL;
    if (!a) return 0;
    (void)dlt__arena_free(a->place, (uint64_t)((char *)ptr - a->base), bytes);
    arena_release_if_unused(ctx, a);
    return 1;
}

void dlt__cuda_capture_pooled(dlt_ctx *ctx, void *ptr) {
    struct dlt_graph_mem *m = gmem_get(ctx);
    if (m) (void)ptr_push(&m->pooled, ptr); /* not noted: its free is kept as an orphan's */
}

int dlt__cuda_capture_release(dlt_ctx *ctx, void *ptr) {
    struct dlt_graph_mem *m = gmem_get(ctx);
    if (!m || ptr_take(&m->pooled, ptr)) return 0; /* this capture's: a captured free */
    return ptr_push(&m->orphans, ptr);
}

void dlt__cuda_gmem_destroy(dlt_cuda_state *s) {
    struct dlt_graph_mem *m = s->gmem;
    if (!m) return;
    ptr_free_all(s, &m->orphans);
    free(m->pooled.p);
    while (m->arenas) {
        graph_arena *a = m->arenas;
        m->arenas = a->next;
        if (cudaFreeAsync(a->base, s->stream) != cudaSuccess) (void)cudaGetLastError();
        dlt__arena_destroy(a->place);
        free(a);
    }
    dlt__arena_destroy(m->trace);
    free(m);
    s->gmem = NULL;
}

/* The arena for the capture about to start, sized by the last warm-up step; NULL (driver
 * memory) when there was no sizing run or the buffer cannot be had. */
static graph_arena *arena_for_capture(dlt_ctx *ctx) {
    dlt_cuda_state *s = dlt__cu(ctx);
    struct dlt_graph_mem *m = gmem_get(ctx);
    if (!m || !m->sized) return NULL;
    const uint64_t size = m->sized;
    m->sized = 0; /* one capture per sizing run */
    graph_arena *a = calloc(1, sizeof *a);
    if (a) a->place = dlt__arena_create(size);
    void *base = NULL;
    cudaError_t e = a && a->place ? cudaMallocFromPoolAsync(&base, (size_t)size, s->pool, s->stream)
                                  : cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        dlt__log(DLT_LOG_WARNING, "dlt_graph_create: no room for a %.1f MiB graph arena; the "
                 "driver places the step's memory", size / 1048576.0);
        if (a) dlt__arena_destroy(a->place);
        free(a);
        return NULL;
    }
    a->base = base;
    a->size = size;
    a->owned = 1;
    a->next = m->arenas;
    m->arenas = a;
    m->outside = 0;
    return a;
}

dlt_status dlt__cuda_capture_begin(dlt_ctx *ctx) {
    dlt_cuda_state *s = dlt__cu(ctx);
    graph_arena *a = arena_for_capture(ctx);
    cudaError_t e = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        if (a) {
            a->owned = 0;
            arena_release_if_unused(ctx, a);
        }
        return dlt__cuda_fail(ctx, e, "dlt_graph_create", "cudaStreamBeginCapture");
    }
    if (a) s->gmem->filling = a;
    return DLT_OK;
}

/* handle -> index lookups for the edges: the node handles sorted with their positions */
typedef struct node_ix {
    cudaGraphNode_t node;
    int64_t ix;
} node_ix;

static int node_ix_cmp(const void *a, const void *b) {
    const uintptr_t x = (uintptr_t)((const node_ix *)a)->node, y = (uintptr_t)((const node_ix *)b)->node;
    return x < y ? -1 : x > y;
}

static int64_t node_index(const node_ix *sorted, int64_t n, cudaGraphNode_t node) {
    node_ix key = {node, 0};
    const node_ix *hit = bsearch(&key, sorted, (size_t)n, sizeof key, node_ix_cmp);
    return hit ? hit->ix : -1;
}

/* Edges with their data. cuDNN's and cuBLAS's kernels launch with programmatic dependent
 * launch, so their edges carry data, and asking without room for it fails with
 * cudaErrorLossyQuery (H200, 2026-12-02: every ResNet50 step's stats came back empty). */
#if CUDART_VERSION >= 12030
typedef cudaGraphEdgeData edge_data;
static cudaError_t get_edges(cudaGraph_t g, cudaGraphNode_t *from, cudaGraphNode_t *to, edge_data *d, size_t *n) {
#if CUDART_VERSION >= 13000
    return cudaGraphGetEdges(g, from, to, d, n);
#else
    return cudaGraphGetEdges_v2(g, from, to, d, n);
#endif
}
#else
typedef char edge_data; /* before 12.3 edges carry no data */
static cudaError_t get_edges(cudaGraph_t g, cudaGraphNode_t *from, cudaGraphNode_t *to, edge_data *d, size_t *n) {
    (void)d;
    return cudaGraphGetEdges(g, from, to, n);
}
#endif

/* The details of graph_stats: node kinds, edges, longest chain. 0 or why not (a CUDA error,
 * memory); the caller keeps the node count either way. */
static const char *graph_details(cudaGraph_t graph, size_t n, int64_t *stats) {
    size_t ne = 0;
    cudaError_t e;
    e = get_edges(graph, NULL, NULL, NULL, &ne);
    if (e != cudaSuccess) return cudaGetErrorString(e);
    stats[DLT_GRAPH_STAT_EDGES] = (int64_t)ne;
    cudaGraphNode_t *nodes = malloc(n * sizeof *nodes), *from = malloc((ne ? ne : 1) * sizeof *from),
                    *to = malloc((ne ? ne : 1) * sizeof *to);
    node_ix *sorted = malloc(n * sizeof *sorted);
    int64_t *fi = malloc((ne ? ne : 1) * sizeof *fi), *ti = malloc((ne ? ne : 1) * sizeof *ti);
    edge_data *data = malloc((ne ? ne : 1) * sizeof *data);
    const char *why = NULL;
    if (!nodes || !from || !to || !sorted || !fi || !ti || !data) {
        why = "out of host memory";
        goto done;
    }
    e = cudaGraphGetNodes(graph, nodes, &n);
    if (e == cudaSuccess && ne) e = get_edges(graph, from, to, data, &ne);
    for (size_t i = 0; i < n && e == cudaSuccess; i++) {
        enum cudaGraphNodeType t;
        e = cudaGraphNodeGetType(nodes[i], &t);
        if (e != cudaSuccess) break;
        switch (t) {
        case cudaGraphNodeTypeKernel: stats[DLT_GRAPH_STAT_KERNELS]++; break;
        case cudaGraphNodeTypeMemcpy: stats[DLT_GRAPH_STAT_MEMCPY]++; break;
        case cudaGraphNodeTypeMemset: stats[DLT_GRAPH_STAT_MEMSET]++; break;
        case cudaGraphNodeTypeWaitEvent:
        case cudaGraphNodeTypeEventRecord: stats[DLT_GRAPH_STAT_EVENTS]++; break;
        case cudaGraphNodeTypeMemAlloc:
        case cudaGraphNodeTypeMemFree: stats[DLT_GRAPH_STAT_MEM_ALLOC]++; break;
        default: stats[DLT_GRAPH_STAT_OTHER]++; break;
        }
        sorted[i].node = nodes[i], sorted[i].ix = (int64_t)i;
    }
    if (e != cudaSuccess) {
        why = cudaGetErrorString(e);
        goto done;
    }
    qsort(sorted, n, sizeof *sorted, node_ix_cmp);
    for (size_t k = 0; k < ne; k++) {
        fi[k] = node_index(sorted, (int64_t)n, from[k]);
        ti[k] = node_index(sorted, (int64_t)n, to[k]);
    }
    switch (dlt__graph_depth((int64_t)n, (int64_t)ne, fi, ti, &stats[DLT_GRAPH_STAT_DEPTH])) {
    case DLT_DEPTH_OK: break;
    case DLT_DEPTH_NO_MEMORY: why = "out of host memory"; break;
    default: why = "the edges do not form a DAG of the nodes"; break;
    }
done:
    free(nodes), free(from), free(to), free(sorted), free(fi), free(ti), free(data);
    return why;
}

/* Node counts by kind, edges and the longest chain of the captured graph (dlt_graph_stat).
 * Only the node count is required (as before the other counts existed): a failure reading
 * the rest is logged and leaves them 0 (depth -1), so a replayable graph is never lost. */
static dlt_status graph_stats(dlt_ctx *ctx, cudaGraph_t graph, int64_t *stats) {
    memset(stats, 0, DLT_GRAPH_STAT_COUNT * sizeof *stats);
    size_t n = 0;
    DLT_CU(ctx, cudaGraphGetNodes(graph, NULL, &n), "dlt_graph_create");
    stats[DLT_GRAPH_STAT_NODES] = (int64_t)n;
    if (n == 0) return DLT_OK;
    const char *why = graph_details(graph, n, stats);
    if (why) {
        (void)cudaGetLastError(); /* a failed query is handled here */
        for (int k = DLT_GRAPH_STAT_KERNELS; k < DLT_GRAPH_STAT_COUNT; k++) stats[k] = 0;
        stats[DLT_GRAPH_STAT_DEPTH] = -1;
        dlt__log(DLT_LOG_INFO, "dlt: the captured graph's node kinds and edges are not reported (%s)", why);
    }
    return DLT_OK;
}

dlt_status dlt__cuda_capture_end(dlt_ctx *ctx, int32_t ok, void **exec, int64_t *stats) {
    static const char *F = "dlt_graph_create";
    dlt_cuda_state *s = dlt__cu(ctx);
    graph_arena *arena = s->gmem ? s->gmem->filling : NULL;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, &graph);
    if (arena) s->gmem->filling = NULL;
    ptr_list orphans = {0};
    if (s->gmem) {
        orphans = s->gmem->orphans;
        memset(&s->gmem->orphans, 0, sizeof orphans);
        s->gmem->pooled.n = 0;
    }
    cudaGraphExec_t g = NULL;
    graph_exec *ge = NULL;
    dlt_status st = DLT_OK;
    if (!ok || e != cudaSuccess) {
        (void)cudaGetLastError();
        st = e != cudaSuccess ? dlt__cuda_fail(ctx, e, F, "cudaStreamEndCapture") : DLT_ERR_INVALID_STATE;
        goto fail;
    }
    st = graph_stats(ctx, graph, stats);
    if (st != DLT_OK) goto fail;
    ge = calloc(1, sizeof *ge);
    if (!ge) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, F, "cannot allocate the graph object");
        goto fail;
    }
    /* auto-free-on-launch: what the driver allocated inside the graph and the step did not
     * free is released before the next replay (it could not be launched again otherwise) */
    e = cudaGraphInstantiateWithFlags(&g, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    if (e != cudaSuccess) {
        st = dlt__cuda_fail(ctx, e, F, "cudaGraphInstantiateWithFlags");
        goto fail;
    }
    e = cudaGraphUpload(g, s->stream);
    if (e != cudaSuccess) {
        cudaGraphExecDestroy(g);
        st = dlt__cuda_fail(ctx, e, F, "cudaGraphUpload");
        goto fail;
    }
    cudaGraphDestroy(graph);
    if (arena)
        dlt__log(DLT_LOG_INFO, "dlt: graph memory: %.1f MiB arena (at most %.1f MiB live at once in the "
                 "sizing step), %lld allocations outside it", arena->size / 1048576.0,
                 s->gmem->sized_live / 1048576.0, (long long)s->gmem->outside);
    ge->exec = g;
    ge->arena = arena;
    ge->orphans = orphans;
    *exec = ge;
    dlt__cuda_graphs_live(ctx, +1);
    sweep(ctx);
    return DLT_OK;
fail:
    if (graph) cudaGraphDestroy(graph);
    free(ge);
    ptr_free_all(s, &orphans); /* no graph will read them */
    if (arena) arena->owned = 0;
    sweep(ctx);
    return st;
}

dlt_status dlt__cuda_graph_launch(dlt_ctx *ctx, void *exec) {
    DLT_CU(ctx, cudaGraphLaunch(((graph_exec *)exec)->exec, dlt__stream(ctx)), "dlt_graph_run");
    return DLT_OK;
}

void dlt__cuda_graph_free(dlt_ctx *ctx, void *exec) {
    dlt_cuda_state *s = dlt__cu(ctx);
    graph_exec *ge = exec;
    /* the graph may still be running: let it finish before its memory goes */
    if (cudaStreamSynchronize(s->stream) != cudaSuccess) (void)cudaGetLastError();
    if (cudaGraphExecDestroy(ge->exec) != cudaSuccess) (void)cudaGetLastError();
    ptr_free_all(s, &ge->orphans);
    if (ge->arena) {
        ge->arena->owned = 0;
        arena_release_if_unused(ctx, ge->arena);
    } else if (cudaDeviceGraphMemTrim(s->device) != cudaSuccess) {
        /* the driver keeps a destroyed graph's memory for the device's next graph (and counts
         * it as used) until trimmed */
        (void)cudaGetLastError();
    }
    free(ge);
    dlt__cuda_graphs_live(ctx, -1); /* after the synchronisation above: nothing replays now */
}
