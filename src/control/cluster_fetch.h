/* One slot-map fetch from one cluster node over a struct conn on any libuv loop (the main loop's refresh, start-up, ringleader-ring --cluster). */
#ifndef RL_PROXY_CLUSTER_FETCH_H
#define RL_PROXY_CLUSTER_FETCH_H

#include <stdint.h>
#include <uv.h>

#include "proto/proto.h"

struct cluster_map;
struct cluster_fetch;
struct tls_ctx;

/*
 * TLS for a fetch (a pool's server_tls): the context the pool's server connections use,
 * and the name every node is verified against and sent as SNI (the pool's
 * server_tls.server_name). A NULL name verifies each node's own address: an IP literal
 * (what a slot map holds) against the certificate's IP addresses, no SNI. ctx NULL: plaintext.
 */
struct cluster_fetch_tls {
    const struct tls_ctx *ctx;
    const char           *server_name;
};

/*
 * The outcome: m is a finished map now owned by the callee (NULL on failure, with err
 * saying why: connect refused, timeout, AUTH refused, not a cluster node, malformed).
 * Called exactly once unless the fetch is cancelled first; the fetch frees itself after.
 */
typedef void (*cluster_fetch_cb)(void *arg, struct cluster_map *m, const char *err);

/*
 * Connect to host:port (a name is resolved on the loop's thread pool), send the pool's
 * hello (AUTH) and the protocol's map query (the fallback query when the node does not
 * know the first), read the replies into a map. Everything ends within timeout_ms.
 * tls (NULL: plaintext) makes the connection TLS; the handshake is within the timeout.
 * Returns the fetch, or NULL when it could not start (no memory: cb is not called).
 */
struct cluster_fetch *cluster_fetch_start(uv_loop_t *loop, const struct proto_ops *ops,
                                          const struct proto_hello *hello,
                                          const struct cluster_fetch_tls *tls, const char *host,
                                          uint16_t port, uint32_t timeout_ms,
                                          cluster_fetch_cb cb, void *arg);

/* Stop a fetch in flight: cb will not be called; its memory goes when its handles close. */
void cluster_fetch_cancel(struct cluster_fetch *f);

/*
 * Fetch synchronously on a private loop: each of the n addresses ("host:port") in turn
 * until one answers, each within timeout_ms. 0 with *out a finished map (the caller's),
 * or -1 with err (the last address's reason). *from gets the index that answered.
 */
int cluster_fetch_sync(const struct proto_ops *ops, const struct proto_hello *hello,
                       const struct cluster_fetch_tls *tls, const char *const *addrs,
                       uint32_t n, uint32_t timeout_ms,
                       struct cluster_map **out, uint32_t *from, char *err, size_t errlen);

#endif
