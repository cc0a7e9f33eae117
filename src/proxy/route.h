/* Routing: a pure function from a pool view and a hashed key to a decision (server, copies, miss, error). */
#ifndef RL_PROXY_ROUTE_H
#define RL_PROXY_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"
#include "proto/proto.h"
#include "placement/ring.h"

struct cluster_view;
struct health;
struct pool_shared;

#define ROUTE_NONE UINT32_MAX

/* A key routes by prefix to another pool (`routes:`), resolved to pool
 * indices when the snapshot is built. */
struct route_rule {
    const char *prefix;
    uint32_t    len;
    uint32_t    pool;           /* index in the snapshot's pools, ROUTE_NONE if absent */
};

/* A pool as routing sees it; a worker's struct wpool embeds one and fills
 * it when it adopts a snapshot. Routing only reads it (health and bounded
 * loads' in-flight counts are atomics written elsewhere). */
struct route_pool {
    const struct conf_pool  *cp;
    const struct ring       *ring;
    struct health *const    *health;        /* [nservers], shared records */
    uint32_t                 nservers;
    const struct ring       *prev_ring;     /* warm-up: the ring before the last reload, or NULL */
    const uint32_t          *prev_map;      /* prev_ring index -> index here, or ROUTE_NONE */
    uint64_t                 warm_until_ms; /* ... asked until this monotonic ms */
    struct pool_shared      *shared;        /* bounded loads' spill memory */
    const char              *zone;          /* this proxy's zone, or NULL */
    const struct route_rule *rules;         /* [cp->nroutes] */
    const struct cluster_view *cluster;     /* a Redis Cluster pool: its nodes' roles and
                                               replicas (the ring maps slots to masters);
                                               NULL for every other pool */
};

/* A key, decoded and hashed once per request and handed down. */
struct route_key {
    const char *bytes;          /* what placement hashes (a base64 key decoded) */
    size_t      len;
    uint64_t    hash;           /* in the pool it routes in (ring_key_hash) */
    uint32_t    owner;          /* that ring's owner of hash */
};

enum route_kind {
    ROUTE_SEND,     /* to[0] */
    ROUTE_COPIES,   /* a copy to each of to[0..n) (replicated or warm-spill writes) */
    ROUTE_MISS,     /* answer as a miss (on_down: miss) */
    ROUTE_FAIL      /* answer err (on_down: error, or no live server) */
};

/* What the caller counts (struct route.events). */
#define ROUTE_EV_FAILOVER  0x1   /* sent to a later server of the preference list (COPIES:
                                    to[0] is that server) */
#define ROUTE_EV_FAIL_OPEN 0x2   /* sent to a down owner because most servers are down */
#define ROUTE_EV_SPILL     0x4   /* bounded loads placed it off its owner: note it (route_spill_note) */
#define ROUTE_EV_RR        0x8   /* read_from: any-live used the rotation: advance it */
#define ROUTE_EV_DOWN_WRITE 0x10 /* a write for a key whose server (owner or replica) is down:
                                    remember the key for its rejoin (rejoin_note) */
#define ROUTE_EV_REJOIN_COPY 0x20 /* a write for a key whose server is rejoining: it goes there
                                     too (COPIES: to[0] the failover server that serves its
                                     reads meanwhile, to[1] the owner) */

struct route {
    enum route_kind kind;
    uint32_t        n;
    uint32_t        to[RING_MAX_PREF];  /* server indices */
    uint8_t         async;              /* COPIES: answer with the first success */
    uint8_t         events;             /* ROUTE_EV_* */
    uint32_t        probe;              /* a down server whose probe may be due (the caller
                                           runs health_try_probe), or ROUTE_NONE */
    uint32_t        warm_from;          /* SEND of a get: on a miss ask this previous owner */
    enum proto_err  err;                /* FAIL */
    uint32_t        down;               /* FAIL: the down server it names, or ROUTE_NONE */
};

/*
 * The pool a key belongs to by the rules (`routes:`, the first matching
 * prefix in the order written): that pool's index, or ROUTE_NONE when no
 * rule matches (the pool the client connected to).
 */
uint32_t route_rule_pool(const struct route_pool *rp, const char *key, size_t len);

/* Hash rk->bytes in this pool and find its owner. */
void route_key_place(const struct route_pool *rp, struct route_key *rk);

/*
 * Where a single-key request (or one whose keys share an owner) goes, in
 * this order: replicas (replicas > 1), bounded loads (balance_factor), the
 * owner, or when it is down what on_down says, and for a get in the warm-up
 * window after a reload the key's previous owner to ask on a miss. `rr` is
 * the caller's read_from: any-live rotation, `single` whether the request
 * has exactly one key, now_ms the monotonic clock.
 */
void route_request(const struct route_pool *rp, const struct route_key *rk, uint16_t rflags,
                   int single, int nokey, uint32_t rr, uint64_t now_ms, struct route *rt);

/*
 * For one key of a multi-key request: the server it goes to — its owner,
 * or with on_down: failover the next live server when the owner is down
 * (other policies answer the owner's fragment). rt->probe / rt->events are
 * set as for route_request; rt must be cleared by route_clear() first.
 */
uint32_t route_fanout_server(const struct route_pool *rp, const struct route_key *rk,
                             struct route *rt);

void route_clear(struct route *rt);

/*
 * A walk over the pool's keyspace, server by server (a broadcast, SCAN's pool cursor):
 * the first server at or after s that holds a share of it — any server, or in a cluster
 * pool a master that serves slots (its replicas hold the same keys) — or rp->nservers
 * when none is left.
 */
uint32_t route_walk(const struct route_pool *rp, uint32_t s);

/*
 * Keys grouped by where they go, in one counting pass: key i belongs to group of[i]
 * (< n; any other value: to none). Group g's keys, in key order, are
 * idx[first[g] .. first[g + 1]); first has n + 1 entries.
 */
void route_group(const uint32_t *of, uint32_t nkeys, uint32_t n, uint32_t *first,
                 uint32_t *idx);

/* A key's slot in a cluster pool (whose ring hashes keys to slots: CRC16 of the tag). */
static inline uint32_t route_key_slot(const struct route_key *rk)
{
    return (uint32_t)(rk->hash & 16383);
}

/*
 * Whether two keys of one request may be served together (a SAME command, a
 * transaction): the same owner, or in a cluster pool the same slot (a cluster refuses
 * keys of two slots even on one node).
 */
static inline int route_key_together(const struct route_pool *rp, const struct route_key *a,
                                     const struct route_key *b)
{
    if (rp->cluster != NULL)
        return route_key_slot(a) == route_key_slot(b);
    return a->owner == b->owner;
}
/*
 * A pub/sub channel (PROTO_RF_CHANNEL): its owner and nothing else — no replicas, bounded
 * loads or failover, so that a publisher and the channel's subscribers always meet on one
 * server — or, while the owner is down, FAIL naming it (with its probe, which may be due).
 */
void route_channel(const struct route_pool *rp, const struct route_key *rk, struct route *rt);

/* Bounded loads: remember that rk's reads spill to server `to`, so that its
 * writes reach that server too for a while (the one write routing does). */
void route_spill_note(const struct route_pool *rp, const struct route_key *rk, uint32_t to,
                      uint64_t now_ms);

#endif
