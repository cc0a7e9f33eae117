/* The near cache (near_cache:): values of hot keys kept by the proxy, served while their server says they have not changed. */
#ifndef RL_PROXY_NEARCACHE_H
#define RL_PROXY_NEARCACHE_H

#include <stdint.h>

struct nearcache;
struct wpool;

/*
 * The stage itself is stage_nearcache (stage.h); docs/nearcache.md says what it
 * guarantees. A pool's store in a worker (wp->nc) is made at its first cacheable get.
 *
 * worker.c drops it whenever the pool's configuration, ring or cluster map may change (a
 * reload rebinds the pool: wpool_update), when the pool retires, and when the pool is
 * freed: every entry is evicted (counted as a ring change), the tracking connections are
 * released, and fills still in flight find it gone and store nothing.
 */
void nearcache_drop(struct wpool *wp);

/* A write of a session (session.c: inside MULTI, after WATCH), its keys placed in rk:
 * evicted and marked as the stage does for a write outside sessions, before it is sent. */
struct msg;
struct proto_req;
struct route_key;
void nearcache_write(struct wpool *wp, struct msg *m, const struct proto_req *req,
                     const struct route_key *rk);

#endif
