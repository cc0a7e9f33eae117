/* Extras of individual distributions beyond struct dist_ops: introspection for tests and the ring tool. */
#ifndef RL_DIST_SCHEMES_H
#define RL_DIST_SCHEMES_H

#include <stdint.h>

#include "dist/dist.h"

/* slots: the number of hash slots (Redis Cluster's). */
#define DIST_SLOTS_COUNT 16384u

/* maglev: counts[i] = table slots owned by server i (counts has nservers
 * entries). d must be a built maglev distribution. */
void dist_maglev_slot_counts(const struct dist *d, uint32_t *counts);

/*
 * anchor: the paper's in-place operations, on a distribution nobody else is
 * reading (a published ring is immutable; use these on a private build).
 * dist_anchor_remove takes a working server out: 0, or -1 if it is not a
 * working server or is the last one. dist_anchor_add restores the most
 * recently removed server and stores it in *server: 0, or -1 if no removed
 * server is left.
 */
int dist_anchor_remove(struct dist *d, uint32_t server);
int dist_anchor_add(struct dist *d, uint32_t *server);

#endif
