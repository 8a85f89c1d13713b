/*
 * arena.c - placement of blocks inside one range of offsets (bookkeeping only: no memory
 * is touched here).
 *
 * Used for whole-step CUDA graphs (cuda/graph.c): the step's temporaries come from one
 * device buffer instead of the driver's graph memory nodes, whose footprint depends on how
 * the driver lays the graph's allocations out. The step's allocation sequence is placed
 * once while a warm-up step runs (sizing, unbounded), the buffer is allocated at the
 * highest offset that reached, and the capture places the same sequence again, now inside
 * the buffer. The policy is deterministic (best fit, lowest offset on ties, freed
 * neighbours merged), so the same sequence lands at the same offsets both times.
 */
#include <stdlib.h>
#include <string.h>

#include "arena.h"

typedef struct span {
    uint64_t off, size;
} span;

typedef struct keyed {
    uint64_t key, off, size; /* key 0: empty; size 0 with key != 0: removed */
} keyed;

struct dlt_arena {
    uint64_t limit; /* offsets stay below this */
    uint64_t end;   /* top of the used region: everything at or above it is free */
    uint64_t high;  /* highest `end` ever */
    uint64_t live, live_peak;
    span *holes; /* free spans below `end`, sorted by offset, never adjacent */
    int32_t n_holes, cap_holes;
    keyed *map; /* open addressing on key, for callers that free by key */
    size_t map_cap, map_used;
};

dlt_arena *dlt__arena_create(uint64_t limit) {
    dlt_arena *a = calloc(1, sizeof *a);
    if (a) a->limit = limit;
    return a;
}

void dlt__arena_destroy(dlt_arena *a) {
    if (!a) return;
    free(a->holes);
    free(a->map);
    free(a);
}

uint64_t dlt__arena_high(const dlt_arena *a) { return a ? a->high : 0; }
uint64_t dlt__arena_live(const dlt_arena *a) { return a ? a->live : 0; }
uint64_t dlt__arena_live_peak(const dlt_arena *a) { return a ? a->live_peak : 0; }

static void remove_hole(dlt_arena *a, int32_t i) {
    memmove(a->holes + i, a->holes + i + 1, (size_t)(a->n_holes - i - 1) * sizeof *a->holes);
    a->n_holes--;
}

int dlt__arena_alloc(dlt_arena *a, uint64_t size, uint64_t *off) {
    if (!a || size == 0) return -1;
    int32_t best = -1;
    for (int32_t i = 0; i < a->n_holes; i++)
        if (a->holes[i].size >= size && (best < 0 || a->holes[i].size < a->holes[best].size)) best = i;
    uint64_t o;
    if (best >= 0) {
        o = a->holes[best].off;
        if (a->holes[best].size == size) {
            remove_hole(a, best);
        } else {
            a->holes[best].off += size;
            a->holes[best].size -= size;
        }
    } else {
        /* no hole fits: grow at the top, starting inside a free span that ends there */
        o = a->end;
        if (a->n_holes > 0 && a->holes[a->n_holes - 1].off + a->holes[a->n_holes - 1].size == a->end)
            o = a->holes[a->n_holes - 1].off;
        if (o > a->limit || size > a->limit - o) return -1;
        if (o != a->end) a->n_holes--;
        a->end = o + size;
        if (a->end > a->high) a->high = a->end;
    }
    a->live += size;
    if (a->live > a->live_peak) a->live_peak = a->live;
    *off = o;
    return 0;
}

int dlt__arena_free(dlt_arena *a, uint64_t off, uint64_t size) {
    if (!a || size == 0 || off >= a->end || size > a->end - off || size > a->live) return -1;
    a->live -= size;
    /* lo: holes entirely below the block */
    int32_t lo = 0, hi = a->n_holes;
    while (lo < hi) {
        const int32_t mid = (lo + hi) / 2;
        if (a->holes[mid].off < off) lo = mid + 1;
        else hi = mid;
    }
    if (off + size == a->end) { /* the top block: the used region shrinks, and over a hole below */
        a->end = off;
        if (lo > 0 && a->holes[lo - 1].off + a->holes[lo - 1].size == off) {
            a->end = a->holes[lo - 1].off;
            a->n_holes--;
        }
        return 0;
    }
    const int join_prev = lo > 0 && a->holes[lo - 1].off + a->holes[lo - 1].size == off;
    const int join_next = lo < a->n_holes && off + size == a->holes[lo].off;
    if (join_prev && join_next) {
        a->holes[lo - 1].size += size + a->holes[lo].size;
        remove_hole(a, lo);
    } else if (join_prev) {
        a->holes[lo - 1].size += size;
    } else if (join_next) {
        a->holes[lo].off = off;
        a->holes[lo].size += size;
    } else {
        if (a->n_holes == a->cap_holes) {
            const int32_t cap = a->cap_holes ? 2 * a->cap_holes : 64;
            span *h = realloc(a->holes, (size_t)cap * sizeof *h);
            if (!h) { /* keep the books right: the block stays counted as used */
                a->live += size;
                return -1;
            }
            a->holes = h;
            a->cap_holes = cap;
        }
        memmove(a->holes + lo + 1, a->holes + lo, (size_t)(a->n_holes - lo) * sizeof *a->holes);
        a->holes[lo].off = off;
        a->holes[lo].size = size;
        a->n_holes++;
    }
    return 0;
}

/* ---- blocks found by key (the sizing run frees by device pointer) ---- */

static size_t slot_of(uint64_t key, size_t cap) {
    key ^= key >> 33; /* pointers: mix the high bits into the low ones */
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static int map_grow(dlt_arena *a) {
    const size_t cap = a->map_cap ? 2 * a->map_cap : 1024;
    keyed *m = calloc(cap, sizeof *m);
    if (!m) return -1;
    for (size_t i = 0; i < a->map_cap; i++) {
        const keyed *k = &a->map[i];
        if (!k->key || !k->size) continue;
        size_t j = slot_of(k->key, cap);
        while (m[j].key) j = (j + 1) & (cap - 1);
        m[j] = *k;
    }
    size_t used = 0;
    for (size_t i = 0; i < cap; i++) used += m[i].key != 0;
    free(a->map);
    a->map = m;
    a->map_cap = cap;
    a->map_used = used;
    return 0;
}

int dlt__arena_alloc_key(dlt_arena *a, uint64_t key, uint64_t size, uint64_t *off) {
    if (!a || key == 0) return -1;
    if ((a->map_used + 1) * 2 > a->map_cap && map_grow(a) != 0) return -1;
    uint64_t o;
    if (dlt__arena_alloc(a, size, &o) != 0) return -1;
    size_t j = slot_of(key, a->map_cap);
    while (a->map[j].key && a->map[j].size) j = (j + 1) & (a->map_cap - 1);
    if (!a->map[j].key) a->map_used++;
    a->map[j].key = key;
    a->map[j].off = o;
    a->map[j].size = size;
    if (off) *off = o;
    return 0;
}

int dlt__arena_free_key(dlt_arena *a, uint64_t key) {
    if (!a || key == 0 || a->map_cap == 0) return -1;
    for (size_t j = slot_of(key, a->map_cap);; j = (j + 1) & (a->map_cap - 1)) {
        keyed *k = &a->map[j];
        if (!k->key) return -1;
        if (k->key == key && k->size) {
            const int r = dlt__arena_free(a, k->off, k->size);
            k->size = 0; /* removed; the slot stays taken so later probes go on */
            return r;
        }
    }
}
