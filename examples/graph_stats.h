/*
 * graph_stats.h - the captured step's node counts by kind, its dependency edges and longest
 * chain (dlt_graph_stat), as the benches print them after their table and put them in the
 * run record: what "fewer launches" and "parallel branches" are measured by.
 */
#ifndef DLT_EXAMPLES_GRAPH_STATS_H
#define DLT_EXAMPLES_GRAPH_STATS_H

#include <stdio.h>

#include <dltrain.h>

#include "run_record.h"

typedef struct graph_stats {
    int64_t v[DLT_GRAPH_STAT_COUNT]; /* all 0: not captured */
} graph_stats;

static const char *const GRAPH_STAT_KEYS[DLT_GRAPH_STAT_COUNT] = {
    "graph_nodes", "graph_kernels", "graph_memcpy", "graph_memset", "graph_events",
    "graph_mem_alloc", "graph_other", "graph_edges", "graph_depth"};

static inline void graph_stats_read(const dlt_graph *g, graph_stats *s) {
    for (int32_t k = 0; k < DLT_GRAPH_STAT_COUNT; k++) s->v[k] = dlt_graph_stat(g, k);
}

static inline void graph_stats_format(const graph_stats *s, char *buf, size_t n) {
    snprintf(buf, n,
             "%lld nodes: %lld kernels, %lld memset, %lld memcpy, %lld event, %lld alloc/free, %lld other; "
             "%lld edges, longest chain %lld nodes",
             (long long)s->v[DLT_GRAPH_STAT_NODES], (long long)s->v[DLT_GRAPH_STAT_KERNELS],
             (long long)s->v[DLT_GRAPH_STAT_MEMSET], (long long)s->v[DLT_GRAPH_STAT_MEMCPY],
             (long long)s->v[DLT_GRAPH_STAT_EVENTS], (long long)s->v[DLT_GRAPH_STAT_MEM_ALLOC],
             (long long)s->v[DLT_GRAPH_STAT_OTHER], (long long)s->v[DLT_GRAPH_STAT_EDGES],
             (long long)s->v[DLT_GRAPH_STAT_DEPTH]);
}

/* "graph (label): counts" lines kept for after a bench's table (the table stays one block) */
typedef struct graph_stats_lines {
    char line[32][512];
    int n;
} graph_stats_lines;

static inline void graph_stats_keep(graph_stats_lines *l, const char *label, const graph_stats *s) {
    if (l->n >= 32 || s->v[DLT_GRAPH_STAT_NODES] <= 0) return;
    char counts[256];
    graph_stats_format(s, counts, sizeof counts);
    snprintf(l->line[l->n++], sizeof l->line[0], "captured step (%.120s): %s", label, counts);
}

static inline void graph_stats_print(const graph_stats_lines *l) {
    for (int i = 0; i < l->n; i++) printf("%s\n", l->line[i]);
}

/* the counts as run-record fields (graph_nodes is the benches' existing key) */
static inline void graph_stats_record(cJSON *o, const graph_stats *s) {
    for (int32_t k = 0; k < DLT_GRAPH_STAT_COUNT; k++) rr_int(o, GRAPH_STAT_KEYS[k], s->v[k]);
}

#endif
