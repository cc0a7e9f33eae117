/* Forwarding: a parsed request becomes messages on server connections (one, fragments, copies, broadcast), or is answered here. */
#ifndef RL_PROXY_FORWARD_H
#define RL_PROXY_FORWARD_H

#include <stdint.h>

#include "proto/proto.h"

struct client;
struct msg;
struct route_key;
struct sconn;
struct server;
struct stage;
struct stage_req;
struct wpool;

/*
 * Dispatch one complete request of client c (its header buf[0..hdr_len)
 * and body_len bytes after it): answered here (local, error, miss, no live
 * server), or written to the server connections routing picks, with a
 * message in the client's reply order; without memory it is answered with
 * an error or the client is closed. A session's requests and subscriptions
 * never come here: client.c gives them to session.c and pubsub.c, which sit
 * above this file and call down into it.
 */
void forward_request(struct client *c, const struct proto_req *req, const char *buf);

/*
 * A request whose body is large and not all here yet: when it goes to
 * exactly one server, pin a connection to that server for c, write the
 * header and the `avail` body bytes that follow it, and return the message
 * (its deadline starts when the body is whole; see client.c). NULL when
 * the request cannot stream (copies, warm-up, no pinned connection): the
 * caller buffers it instead. *answered is set when the request was answered
 * here (a refusal, a miss): its body is then to be dropped.
 */
struct msg *forward_stream(struct client *c, const struct proto_req *req, const char *buf,
                           uint64_t avail, int *answered);

/* The bytes request key k is placed by (read through the protocol's key_bytes when the
 * request says so, decoded into dec, PROTO_KEY_DECODED_MAX bytes), in rk->bytes/len. */
void forward__key(const struct wpool *pool, const struct proto_req *req, const char *buf,
                  uint32_t k, char *dec, struct route_key *rk);

/* A multi-server request (FANOUT) a stage held (m, in c's reply order) goes on, parsed
 * again from the bytes it went out as: placed, passed through the stages after `after`,
 * and split over its servers (client.c's mops->again). */
void forward_again(struct client *c, struct msg *m, const struct proto_req *req,
                   const char *buf, const struct stage *after);

/* ---- for sessions (session.c), which dispatch through the same steps */

enum forward_how {
    FORWARD_WHOLE,      /* forward() the header, then the body as is */
    FORWARD_HEADER,     /* forward() only (a broadcast carries no body) */
    FORWARD_FRAG        /* frag_write() with keys idx[0..n) */
};

/* A message for req in c's reply order (counted in the pool's requests); NULL
 * without memory. forward_retract takes back the last one, untouched. */
struct msg *forward_msg(struct client *c, const struct proto_req *req);
void forward_retract(struct client *c, struct msg *m);

/* m is answered here: with what m->rsp holds, or with the protocol's error. */
void forward_answer(struct client *c, struct msg *m);
void forward_refuse(struct client *c, struct msg *m, enum proto_err code, const char *reason);
void forward_refuse_command(struct client *c, struct msg *m, enum proto_err code,
                            const char *reason);

/* Whether keys rk[0..nkeys) of one request may be served together (one server, or in a
 * cluster pool one slot); if not, m is refused with the CROSSSLOT the pool's clients
 * expect (counted) and 0 returned. */
int forward_keys_together(struct client *c, struct wpool *pool, struct msg *m,
                          const struct route_key *rk, uint32_t nkeys);

/* The keys of req placed once each in the pool they route to (*rkp: one, or the
 * worker's array for several; dec: room for a decoded key); NULL after answering
 * m (keys of different pools, no memory). forward_place_bytes: the same for bytes
 * that are no key of the request (a keyless session's placement). */
struct wpool *forward_place(struct client *c, struct msg *m, const struct proto_req *req,
                            const char *buf, struct route_key **rkp, char *dec);
struct wpool *forward_place_bytes(struct client *c, const char *bytes, size_t len,
                                  struct route_key *rk);

/* Where routing sends a request with key rk (a write's placement: the owner, or
 * on_down's choice), its side effects carried out; NULL after answering m (a miss,
 * no live server, or copies, which a session cannot be pinned to). */
struct server *forward_pick(struct client *c, struct wpool *pool, struct msg *m,
                            const struct proto_req *req, const struct route_key *rk);

/* Write req (or one fragment) to `via`, or to a shared connection of srv when via is
 * NULL, and queue m for its reply. r: the client's request as the pool's stages see it
 * (NULL: a fragment, a session's or a streamed write, which no stage sees); m is r->m or
 * one of its copies. 0, or -1 with *code and *reason (nothing written). */
int forward_write(struct wpool *pool, struct msg *m, struct server *srv, struct sconn *via,
                  uint64_t hint, const struct proto_req *req, const char *buf,
                  const uint32_t *idx, uint32_t n, enum forward_how how, uint64_t body,
                  struct stage_req *r, enum proto_err *code, const char **reason);

#endif
