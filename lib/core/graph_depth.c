/*
 * graph_depth.c - the longest chain of a DAG by Kahn's topological order: level[v] = nodes on
 * the longest path ending at v. O(n + edges).
 */
#include <stdlib.h>

#include "graph_depth.h"

int dlt__graph_depth(int64_t n, int64_t n_edges, const int64_t *from, const int64_t *to, int64_t *depth) {
    *depth = 0;
    if (n <= 0) return DLT_DEPTH_OK;
    for (int64_t e = 0; e < n_edges; e++)
        if (from[e] < 0 || from[e] >= n || to[e] < 0 || to[e] >= n) return DLT_DEPTH_BAD_EDGE;
    int64_t *indeg = calloc((size_t)n, sizeof *indeg), *level = calloc((size_t)n, sizeof *level);
    int64_t *start = calloc((size_t)n + 1, sizeof *start);
    int64_t *adj = malloc((size_t)(n_edges > 0 ? n_edges : 1) * sizeof *adj);
    int64_t *queue = malloc((size_t)n * sizeof *queue);
    int rc = DLT_DEPTH_OK;
    if (!indeg || !level || !start || !adj || !queue) {
        rc = DLT_DEPTH_NO_MEMORY;
        goto done;
    }
    /* the edges grouped by source (counting sort) */
    for (int64_t e = 0; e < n_edges; e++) start[from[e] + 1]++, indeg[to[e]]++;
    for (int64_t v = 0; v < n; v++) start[v + 1] += start[v];
    for (int64_t v = 0; v < n; v++) queue[v] = start[v]; /* per-source cursors, before the walk */
    for (int64_t e = 0; e < n_edges; e++) adj[queue[from[e]]++] = to[e];
    int64_t head = 0, tail = 0;
    for (int64_t v = 0; v < n; v++)
        if (indeg[v] == 0) queue[tail++] = v, level[v] = 1;
    while (head < tail) {
        const int64_t v = queue[head++];
        if (level[v] > *depth) *depth = level[v];
        for (int64_t k = start[v]; k < start[v + 1]; k++) {
            const int64_t w = adj[k];
            if (level[v] + 1 > level[w]) level[w] = level[v] + 1;
            if (--indeg[w] == 0) queue[tail++] = w;
        }
    }
    if (head != n) rc = DLT_DEPTH_CYCLE;
done:
    free(indeg), free(level), free(start), free(adj), free(queue);
    return rc;
}
