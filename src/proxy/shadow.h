/* Shadow pools: a copy of a pool's requests also goes to another pool; its replies are dropped, or compared with the primary's. */
#ifndef RL_PROXY_SHADOW_H
#define RL_PROXY_SHADOW_H

#include "proto/proto.h"

struct client;
struct msg;
struct route_key;
struct wpool;

/*
 * shadow: {pool, fraction, compare, queue_limit}. After the primary request m
 * of client c (pool `pool`, keys rk placed in it) was written to its servers,
 * a copy goes to the shadow pool, routed there by that pool's own ring and
 * health. The copy is the proxy's own request (MSG_OWN): the client's reply
 * never waits for it and never sees it. A copy is not sent (shadow_dropped)
 * when the shadow pool has no live server for the key or the connection it
 * would go to already holds queue_limit requests (a slow or frozen shadow);
 * one that times out or loses its connection counts as shadow_failed.
 *
 * `fraction` samples keys by a hash of their bytes, so a key is shadowed
 * always or never. A multi-key request is split over the shadow pool's
 * servers (its sampled keys); with `compare`, the reply of a single-server
 * request is compared with the primary's (the protocol's reply_equal): the
 * pool counts shadow_compared and shadow_mismatches, and logs one mismatched
 * key at most once a second. Replies that streamed (over 64 KiB), primaries
 * that failed, and multi-key or replicated requests are not compared.
 */
void shadow_request(struct client *c, struct wpool *pool, struct msg *m,
                    const struct proto_req *req, const char *buf, const struct route_key *rk);

#endif
