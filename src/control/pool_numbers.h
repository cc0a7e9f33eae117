/* The proxy's own numbers for a pool, as (name, value) pairs for the local replies (memcached stats, Redis INFO). */
#ifndef RL_POOL_NUMBERS_H
#define RL_POOL_NUMBERS_H

#include <stdint.h>

#include "proto/proto.h"

struct proxy;
struct snapshot;

/*
 * Emit the numbers proto_env.render_stats promises for pool `pool` of snap, summed over
 * every worker (observe_view: each worker's lock is taken in turn, so the caller must hold
 * none of them, its own included), then the process's. worker is the id of the worker
 * serving the asking client. A pool snap does not have, or no memory for the view: only the
 * process's numbers. Any thread.
 */
void pool_numbers_emit(struct proxy *p, struct snapshot *snap, const char *pool, uint32_t worker,
                       proto_stat_fn emit, void *arg);

#endif
