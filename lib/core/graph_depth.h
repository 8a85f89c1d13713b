/*
 * graph_depth.h - the longest dependency chain of a DAG (dlt_graph_stat's DLT_GRAPH_STAT_DEPTH
 * for a captured CUDA graph). Plain C with no library dependencies, so test_graph compiles
 * it in and checks it on the CPU.
 */
#ifndef DLT_CORE_GRAPH_DEPTH_H
#define DLT_CORE_GRAPH_DEPTH_H

#include <stdint.h>

enum { DLT_DEPTH_OK = 0, DLT_DEPTH_CYCLE, DLT_DEPTH_BAD_EDGE, DLT_DEPTH_NO_MEMORY };

/* *depth = the most nodes on one path of the DAG with n nodes and the edges from[e] -> to[e]
 * (indices in [0, n)); 0 for n == 0. Returns DLT_DEPTH_OK or why not. */
int dlt__graph_depth(int64_t n, int64_t n_edges, const int64_t *from, const int64_t *to, int64_t *depth);

#endif
