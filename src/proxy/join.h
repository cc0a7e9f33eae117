/* Get joining: single-key gets queued for one server in one write travel as one multi-key line. */
#ifndef RL_PROXY_JOIN_H
#define RL_PROXY_JOIN_H

#include "proto/proto.h"

struct msg;
struct sconn;

/*
 * Write a joinable request (ops->joinable) to s: appended to the get line
 * the previous request opened when that line is still the last thing queued
 * and unsent, else forwarded as a new line; its key is kept for matching the
 * reply (MSG_F_JKEY). The caller then queues m with sconn_enqueue(). 0, or
 * -ENOMEM (nothing left written).
 */
int  join_write(struct sconn *s, const struct proto_ops *ops, struct msg *m,
                const struct proto_req *req, const char *buf);

/* m was queued on s: it keeps the line open when it is a joinable get. */
void join_queued(struct sconn *s, struct msg *m);

/* s's output went out: what is sent can no longer be joined. */
void join_sent(struct sconn *s);

/*
 * A reply unit rsp (bytes p) for m, a get whose key is at the front of
 * s->jkeys: 1 when the unit is m's (its item, or for the last key of a
 * joined command also its END or error), 0 when m was joined to a later key
 * and its part of the reply is over (a miss, or an error line that ends the
 * whole command), -1 when the server sent an item m did not ask for (or the
 * key queue is out of step). Items come back in the order the keys were
 * sent, misses absent, so the first item with m's key is m's; matching the
 * key byte for byte means a reply can never reach another request's client.
 */
int  join_match(const struct sconn *s, const struct msg *m, const char *p,
                const struct proto_rsp *rsp);

/* m leaves s's queue: its key entry goes with it. */
void join_forget(struct sconn *s, struct msg *m);

#endif
