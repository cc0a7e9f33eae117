/* Routing: a key's owner, and where a request goes given health, replicas, bounded loads and warm-up. */
#ifndef RL_PROXY_ROUTE_H
#define RL_PROXY_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "ring.h"

struct wpool;
struct server;

enum route_kind {
    ROUTE_SEND,     /* to[0] */
    ROUTE_COPIES,   /* a copy to each of to[0..n) (replicated or warm-spill writes) */
    ROUTE_MISS,     /* answer as a miss (on_down: miss) */
    ROUTE_FAIL      /* answer err / reason (on_down: error, no live server) */
};

struct route {
    enum route_kind kind;
    uint32_t        n;
    struct server  *to[RING_MAX_PREF];
    int             async;          /* COPIES: answer with the first success */
    enum proto_err  err;
    char            reason[300];
    struct server  *warm_from;      /* SEND of a get: ask this previous owner on a miss */
};

/* The bytes key k is placed by: the protocol's key_bytes (base64 keys are
 * decoded into dec, which holds PROTO_KEY_DECODED_MAX bytes); *len gets
 * their length. */
const char *route_key(const struct proto_ops *ops, const struct proto_req *req, const char *buf,
                      uint32_t k, char *dec, size_t *len);

/*
 * routes: the pool a request's keys belong to. A key that starts with a
 * route's prefix (the first matching route, in the order written) goes to
 * that route's pool, else to the pool the client connected to. Returns
 * that pool; *mixed is set when the keys of one request belong to
 * different pools (the request is then refused, like keys on different
 * servers).
 */
struct wpool *route_pool(struct wpool *pool, const struct proto_req *req, const char *buf,
                         int *mixed);

/* The owner of key k (a server index of the pool); *hash gets the key hash. */
uint32_t route_owner(const struct wpool *pool, const struct proto_req *req, const char *buf,
                     uint32_t k, uint64_t *hash);

/*
 * Where a single-key request (or one whose keys share owner) goes, in this
 * order: replicas (replicas > 1), bounded loads (balance_factor), the owner
 * — or, when it is down, what on_down says — and, for a memcached get in
 * the warm-up window after a reload, the key's previous owner to ask on a
 * miss. rr rotates read_from: any-live. Counts failovers, fail-opens and
 * spills; may send a health probe.
 */
void route_request(struct wpool *pool, const struct proto_req *req, const char *buf,
                   uint32_t owner, uint64_t hash, uint32_t *rr, struct route *rt);

/* For one key of a multi-key request: the server index it goes to (its
 * owner, or with on_down: failover the next live server when it is down). */
uint32_t route_key_server(struct wpool *pool, const struct proto_req *req, const char *buf,
                          uint32_t k, uint32_t owner);

#endif
