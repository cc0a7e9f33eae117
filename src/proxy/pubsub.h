/* Pub/sub: a client's subscriptions, the pinned connection per server that carries them, and their messages merged into its one stream. */
#ifndef RL_PROXY_PUBSUB_H
#define RL_PROXY_PUBSUB_H

#include <stddef.h>
#include <stdint.h>

struct client;
struct msg;
struct proto_req;
struct sconn;

/*
 * A client that subscribes holds a pinned connection to each server its subscriptions
 * need (a channel's owner; every server of the pool for a pattern), kept in subscribed
 * mode (PROTO_PF_SUBSCRIBED on its parser). The proxy keeps the client's channels,
 * patterns and shard channels itself, as Redis keeps them per client, so the counts in
 * the confirmations it writes are the client's over every server:
 *
 *   client ── SUBSCRIBE a b c ──▶ pubsub_request: the confirmations written now (m->rsp),
 *                                 one fragment per server (SUBSCRIBE a c ▶ s0, b ▶ s1);
 *                                 m is delivered when every server confirmed its names
 *   s0 ── message ──┐
 *   s1 ── message ──┴──▶ pubsub_message: into the client's stream after every reply
 *                        whose request s0 answered before it, before the first it has not
 *
 * When a server carries nothing of the client's any more its connection is unpinned with
 * a RESET (sconn_unpin keep) once it has answered; after the last unsubscription the
 * client is an ordinary one again. A subscription connection that fails closes the client
 * (what it subscribed there is gone, as when a direct connection drops); one that leaves
 * more than pubsub_output_limit bytes unread (or the soft limit for its seconds) is closed
 * as Redis closes it (client-output-buffer-limit pubsub).
 */

/* A PROTO_REQ_SUBSCRIBE request of c (its message m is at the end of c's queue): the
 * subscriptions change, the servers are told, m is answered when they have confirmed (or
 * at once, when none needs telling). Never fails: an error is m's reply. */
void pubsub_request(struct client *c, struct msg *m, const struct proto_req *req, const char *buf);

/* A message unit p[0..n) (PROTO_SF_PUSH) arrived on subscribed connection s: into its
 * holder's stream (dropped when no client holds s any more). May close that client. */
void pubsub_message(struct sconn *s, const char *p, size_t n);

/*
 * A server's `sunsubscribe` of name on s when the client holding s did not ask for it
 * (Redis Cluster ends shard subscriptions of a slot that leaves the node: migrated, or
 * the node demoted by a failover): the name is dropped from the client's subscriptions
 * and the client gets Redis's confirmation with its own count, in its stream's order.
 * 1: taken so; 0: not the server's own (no such subscription on s, or an SUNSUBSCRIBE of
 * the client's in flight there, which it answers).
 */
int pubsub_dropped(struct sconn *s, const struct proto_name *name);

/* s, held by c, answered everything it was sent: unpinned when it carries nothing of c's
 * any more. Returns 1 when s is one of c's subscription connections, 0 otherwise. */
int pubsub_pin_idle(struct client *c, struct sconn *s);

/* s, held by c, closed under it: when it carried subscriptions c is closed. Returns 1 when
 * s was one of c's subscription connections. */
int pubsub_pin_lost(struct client *c, struct sconn *s);

/* Redis RESET: every subscription of c ends (its connections are reset and unpinned). */
void pubsub_reset(struct client *c);

/* c closes (its pins were let go first): free what it kept. */
void pubsub_free(struct client *c);

/* A reload changed c's pool: a client whose channels have another owner now, whose
 * patterns' servers changed, that holds a subscription connection to a server the pool
 * no longer has, or whose pool changed kind (kind_changed: plain to cluster or back) is
 * closed once its output is written (it resubscribes where the channels are now, as
 * after a dropped connection); counted in pubsub_closed. */
void pubsub_refresh(struct client *c, int kind_changed);

/* The bytes c's subscriptions hold (counted in its memory). */
size_t pubsub_memory(const struct client *c);

/* c's channels, patterns and shard channels (CLIENT LIST's sub, psub, ssub). */
void pubsub_counts(const struct client *c, uint32_t *sub, uint32_t *psub, uint32_t *ssub);

#endif
