/* Read access to a built ketama ring's points, for exact shares and movement (ring.c). */
#ifndef RL_DIST_KETAMA_H
#define RL_DIST_KETAMA_H

#include <stdint.h>

#include "dist/dist.h"

#define KETAMA_DEFAULT_VNODES 160u
#define KETAMA_MAX_POINTS     (1u << 26)

/*
 * The ring of a dist built with dist_ketama_ops: *points (ascending) and
 * *owners (server index of each point), both valid while d is.  Returns the
 * number of points.  A key hash h (low 32 bits) belongs to the first point
 * >= h, wrapping to points[0].
 */
uint32_t dist__ketama_points(const struct dist *d, const uint32_t **points,
                             const uint32_t **owners);

#endif
