/*
 * arena.h - placement of blocks in a range of offsets (lib/core/arena.c): best fit, lowest
 * offset on ties, freed neighbours merged, deterministic. No memory is touched: the caller
 * adds the offsets to its own base. Self-contained (no other library header), so a test can
 * compile it on its own.
 */
#ifndef DLT_ARENA_H
#define DLT_ARENA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlt_arena dlt_arena;

/* An empty arena whose blocks stay below `limit` (UINT64_MAX: unbounded). NULL when out of
 * host memory. */
dlt_arena *dlt__arena_create(uint64_t limit);
void dlt__arena_destroy(dlt_arena *a);
/* Places a block of `size` (> 0) bytes; 0 and *off on success, -1 when it does not fit. */
int dlt__arena_alloc(dlt_arena *a, uint64_t size, uint64_t *off);
/* Frees a block placed at off with that size; -1 (nothing changed) for a span that is not
 * inside the used region. */
int dlt__arena_free(dlt_arena *a, uint64_t off, uint64_t size);
/* The same, with the block found by a caller's nonzero key (a device pointer). Freeing an
 * unknown key returns -1 and changes nothing. */
int dlt__arena_alloc_key(dlt_arena *a, uint64_t key, uint64_t size, uint64_t *off);
int dlt__arena_free_key(dlt_arena *a, uint64_t key);
/* Highest offset any placement has reached (the buffer size the sequence needs), bytes
 * placed now, and the most ever placed at once (the lower bound for any placement). */
uint64_t dlt__arena_high(const dlt_arena *a);
uint64_t dlt__arena_live(const dlt_arena *a);
uint64_t dlt__arena_live_peak(const dlt_arena *a);

#ifdef __cplusplus
}
#endif

#endif
