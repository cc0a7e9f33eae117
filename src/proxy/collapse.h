/* Collapsing (collapse_gets): identical single-key gets for one server share one request, and its reply is fanned out. */
#ifndef RL_PROXY_COLLAPSE_H
#define RL_PROXY_COLLAPSE_H

#include <stddef.h>

#include "proto/proto.h"

struct msg;
struct sconn;
struct worker;

/*
 * The first of a group of identical gets (the leader) is sent; the others
 * (followers) write nothing, wait in their clients' queues, and get copies of
 * the leader's reply. "Identical" is byte for byte: the request as the
 * protocol forwards it (memcached `get k`, `gets k`, `mg k <flags>`; Redis GET),
 * so gets joins only gets and mg only mg with the same flags.
 *
 * A get may join a leader queued on the same server connection only while
 * nothing but such gets was queued there after it (a write, or any other
 * request, closes every open leader of the connection), and, by default
 * (collapse_gets: true), only while the leader is still unsent: the reply it
 * shares was then produced after every joined request was issued, so no
 * client reads a value older than it could have read alone, and a client's
 * own write before its get closes the leaders its get could have joined
 * (read-your-writes on one connection). With collapse_gets: inflight a get
 * also joins a leader already sent whose reply has not begun to arrive: it
 * may then read a value up to one round trip old (documented relaxation).
 *
 * The leader's reply is kept whole (never streamed) for its followers.
 */

/*
 * m (a client's get, forward()'s bytes of it req[0..len) just written at the
 * end of s's output) looks for an identical leader on s. 1: m is now its
 * follower (the caller takes req's bytes back out of the output and queues
 * nothing). 0: m is to be sent; the caller calls collapse_lead() once m is
 * queued on s, so that later gets may join it. `inflight`: leaders already
 * sent may be joined too.
 */
int  collapse_join(struct sconn *s, struct msg *m, const char *req, size_t len, int inflight);
void collapse_lead(struct sconn *s, struct msg *m);

/* Connection events (server.c): m was queued on s (anything but the get that
 * collapse_join just saw closes every open leader); s's output went out (the
 * leaders close, unless inflight); m left s's queue; s is freed. */
void collapse_queued(struct sconn *s, const struct msg *m);
void collapse_sent(struct sconn *s);
void collapse_forget(struct sconn *s, struct msg *m);
void collapse_free(struct sconn *s);


#endif
