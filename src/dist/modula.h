/* Read access to a built modula table, for exact shares (ring.c). */
#ifndef RL_DIST_MODULA_H
#define RL_DIST_MODULA_H

#include <stdint.h>

#include "dist/dist.h"

#define MODULA_MAX_TABLE (1u << 24)

/* The table of a dist built with dist_modula_ops (valid while d is); a key
 * hash h belongs to table[h % size].  Returns the size. */
uint32_t dist__modula_table(const struct dist *d, const uint32_t **table);

#endif
