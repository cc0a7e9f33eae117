/* Forwarding: a parsed request becomes messages on server connections (one, fragments, copies, broadcast), or is answered here. */
#ifndef RL_PROXY_FORWARD_H
#define RL_PROXY_FORWARD_H

#include <stdint.h>

#include "proto/proto.h"

struct client;
struct msg;
struct route_key;
struct sconn;
struct wpool;

/*
 * Dispatch one complete request of client c (its header buf[0..hdr_len)
 * and body_len bytes after it): answered here (local, error, miss, no live
 * server), or written to the server connections routing picks, with a
 * message in the client's reply order. Never fails: without memory the
 * request is answered with an error or the client is closed.
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

#endif
