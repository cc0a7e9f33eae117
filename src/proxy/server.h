/* Server connections: connect, batched writes, reply parsing, timeouts, reconnect with backoff. */
#ifndef RL_PROXY_SERVER_H
#define RL_PROXY_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "conf.h"
#include "proto/proto.h"
#include "histogram.h"
#include "stats.h"
#include "proxy/worker.h"

struct msg;

enum sconn_state { SCONN_IDLE, SCONN_RESOLVING, SCONN_CONNECTING, SCONN_CONNECTED, SCONN_CLOSING };

struct sconn {
    union rl_handle    h;
    uv_timer_t         timer;
    uv_connect_t       creq;
    uv_getaddrinfo_t   gai;
    uv_write_t         wreq;
    struct server     *server;
    enum sconn_state   state;
    int                writing;
    int                dirty;
    int                closes_pending;  /* handles still to close before free */
    int                timer_armed;
    struct sconn      *dirty_next;
    struct buf         ibuf;
    struct buf         obuf;            /* filling */
    struct buf         wbuf;            /* being written */
    struct msg        *head, *tail;     /* sent, awaiting replies */
    uint32_t           inflight;
    uint32_t           hello_pending;   /* replies to AUTH/SELECT to swallow */
    struct proto_parser parser;
    /* reply unit being streamed */
    struct msg        *cur;
    uint64_t           body_left;
    int                body_drop;
    int                body_final;
    int                body_big;        /* the unit's body is large: stream it */
    int                resolving;       /* a getaddrinfo is pending */
    /* Get coalescing: the joinable gets in the queue each have their key
     * here ([u8 len][key], queue order); join_tail is the queue's tail while
     * it is a joinable get whose line is still unsent (sconn_enqueue sets it,
     * sconn_flush clears it). */
    struct buf         jkeys;
    struct msg        *join_tail;
    uint32_t           join_len;        /* bytes of that open command line */
    uint32_t           join_n;          /* keys in it */
    int                body_join_end;   /* after this body, end a joined get's reply */
};

/* One backend as one worker sees it. */
struct server {
    struct server     *next;            /* worker's list */
    struct worker     *w;
    struct wpool      *pool;
    char              *ident;
    char              *label;
    struct conf_addr   addr;            /* owned copy */
    uint32_t           nconns;
    struct sconn     **conns;
    uint32_t           rr;
    uint64_t           retry_at_ms;     /* do not reconnect before */
    uint32_t           backoff_ms;
    int                removed;         /* dropped by a reload: drain then free */
    uint32_t           nopen;           /* connection objects not yet freed (closing ones too) */
    struct stats_server stats;
    struct histogram   latency;         /* send to reply, usec (single writer) */
    struct health     *health;          /* shared by every worker */
};

struct server *server_create(struct worker *w, struct wpool *pool, const struct conf_server *cs);
/* The server left its pool: with `now`, close every connection (in-flight
 * messages fail); else let each finish its in-flight requests, then close.
 * Freed when its last connection is closed. */
void server_destroy(struct server *s, int now);

/* A connection to send to: connected or connecting (hint picks one of
 * server_connections, so one key always uses one connection and its
 * requests stay ordered); NULL with *reason in the reconnect back-off. */
struct sconn *server_pick(struct server *s, uint64_t hint, const char **reason);

/* Answer a message with an error now (it may still be owed a reply by a
 * server: it then stays queued as a zombie). Handles fragments. */
void server_fail_msg(struct worker *w, struct msg *m, enum proto_err code, const char *reason);

/* m (never sent) holds its complete reply: deliver it, or merge its
 * parent when it was the last fragment. */
void server_msg_done(struct worker *w, struct msg *m);

/* Queue a message on a connection (the request bytes are already in
 * s->obuf); arms its timeout. */
void sconn_enqueue(struct sconn *s, struct msg *m);

/* Write a joinable request (ops->joinable) to s: appended to the get line
 * the previous request opened when that line is still the last thing queued
 * and unsent, else forwarded as a new line; its key is kept for matching the
 * reply (MSG_F_JKEY); the caller then queues m with sconn_enqueue(). 0, or
 * -ENOMEM (nothing left written). */
int  sconn_write_joinable(struct sconn *s, const struct proto_ops *ops, struct msg *m,
                          const struct proto_req *req, const char *buf);

/* Write what is in obuf (called from the worker's flush). */
void sconn_flush(struct sconn *s);

/* Open connections for preconnect. */
void server_preconnect(struct server *s);

/* Send a health probe (memcached version, Redis PING) to a down server
 * whose retry time has come; its outcome brings the server up or keeps
 * it down longer. */
void server_probe(struct server *s);

#endif
