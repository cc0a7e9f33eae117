/* Read access to a built ketama ring's points, for exact shares and movement (ring.c). */
#ifndef RL_DIST_KETAMA_H
#define RL_DIST_KETAMA_H

#include <stdint.h>

#include "dist/dist.h"

#define KETAMA_DEFAULT_VNODES 160u
#define KETAMA_MAX_POINTS     (1u << 26)

/* One point of the ring: a position on the 32-bit circle and its server. */
struct ketama_point {
    uint32_t value;
    uint32_t owner;       /* server index (config order) */
};

/*
 * The ring of a dist built with dist_ketama_ops: *points, ascending by value,
 * valid while d is.  Returns the number of points.  A key hash h (low 32
 * bits) belongs to the first point with value >= h, wrapping to points[0].
 */
uint32_t dist__ketama_points(const struct dist *d, const struct ketama_point **points);

#endif
