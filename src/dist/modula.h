/* Read access to a built modula distribution, for exact shares (ring.c). */
#ifndef RL_DIST_MODULA_H
#define RL_DIST_MODULA_H

#include <stdint.h>

#include "dist/dist.h"

/*
 * The slots of a dist built with dist_modula_ops (valid while d is): a key hash h belongs
 * to slot h % total; slots [ends[r-1], ends[r]) are server order[r]'s (ends[-1] = 0), r in
 * twemproxy's identity order. Returns the number of servers; *total is the total weight.
 */
uint32_t dist__modula_slots(const struct dist *d, const uint32_t **order, const uint64_t **ends,
                            uint64_t *total);

#endif
