/* A Redis Cluster pool in one worker: MOVED / ASK / TRYAGAIN followed inside the request lifecycle, requests parked until the map knows their node, fan-out by slot. */
#ifndef RL_PROXY_CLUSTER_WORKER_H
#define RL_PROXY_CLUSTER_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/route.h"

struct cluster;
struct msg;
struct sconn;
struct server;
struct wpool;

#define CWORKER_REDIRECTS_MAX 5      /* MOVED/ASK hops per request; the 6th error reaches the client */
#define CWORKER_PARKED_MAX    10000  /* requests waiting per pool and worker; more are answered */

/*
 * What a reply flagged PROTO_SF_CLUSTER does to its request m, the first of s's queue:
 *   MOVED  the request goes to the named node (the map is refreshed);
 *   ASK    ASKING + the request to the named node (no map change);
 *   TRYAGAIN, CLUSTERDOWN  (the node did not run it) the same request again after a
 *          back-off (10 ms doubling to 200 ms), until the request's deadline: a slot being
 *          migrated, a cluster failing over for a moment (the map is refreshed).
 * A node the map does not have yet parks the request until a refreshed map has it (or
 * the deadline: then the client gets the redirect's own error). A request on a pinned
 * connection, an internal one, one past CWORKER_REDIRECTS_MAX hops, or one whose client
 * is gone is not followed. Returns 1 when m was taken (out of s's queue: the caller
 * drops the reply bytes), 0 when the reply goes to m as any reply does.
 */
int  cworker_reply(struct sconn *s, struct msg *m, const char *rsp, size_t len);

/* A connection to srv, a node of a cluster pool, failed: the map may be stale. */
void cworker_node_failed(struct server *srv);

/* srv, a node of a cluster pool, gave up a slot by itself (a shard channel's
 * `sunsubscribe`): the map is stale. */
void cworker_slot_left(struct server *srv);

/*
 * A multi-key request (MGET, MSET, DEL ...) of a cluster pool is split per slot, as the
 * cluster requires: keys rk[0..nkeys) get fragment numbers frag_of[i] (in first-seen
 * order) and fragment f goes to server target[f] (the slot's master, or for a read a
 * replica by read_from). *rt gets the routing effects to carry out. Returns the number
 * of fragments, 0 without memory.
 */
uint32_t cworker_fanout(struct wpool *wp, const struct route_key *rk, uint32_t nkeys,
                        uint16_t rflags, uint32_t rr, uint32_t *frag_of, uint32_t *target,
                        struct route *rt);

/* Pool life: create with the pool (the record to ask refreshes of), after each snapshot
 * the pool adopted (parked requests whose node is now known go), close with the worker
 * loop's end (parked requests are answered, the timer closes), free with the pool. */
struct cworker *cworker_create(struct wpool *wp, struct cluster *cl);
void cworker_adopted(struct cworker *cw, struct cluster *cl);
void cworker_close(struct cworker *cw);
void cworker_free(struct cworker *cw);

#endif
