/* Client connections: read, parse, answer in order, backpressure, limits. */
#ifndef RL_PROXY_CLIENT_H
#define RL_PROXY_CLIENT_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "lib/buf.h"
#include "proto/proto.h"
#include "proxy/conn.h"
#include "proxy/msg.h"
#include "proxy/sched.h"
#include "proxy/server.h"
#include "proxy/users.h"
#include "proxy/worker.h"
#include "lib/invariant.h"
#include "lib/queue.h"

struct listener;
struct msg;
struct pubsub;
struct sconn;
struct trk_client;
struct worker;
struct wpool;

/* What the client's input is doing. */
enum client_in {
    CLIENT_IN_PARSE,    /* parse requests from ibuf */
    CLIENT_IN_SWALLOW,  /* drop `swallow` more body bytes of a refused request */
    CLIENT_IN_STREAM,   /* copy `stream_left` body bytes to the pinned connection `stream` */
    CLIENT_IN_HOLD      /* a streamed request, or a session's last or blocking request, is
                           unanswered: parse nothing until it is */
};

/*
 * What CLIENT LIST, answered on any worker, reads of a client (client_list.c). The owner
 * stores these relaxed as they change (a few stores per read or flush, no lock); the rest
 * of a line is fixed before the client joins its worker's list (id, addresses, fd, age),
 * or changes under the worker's clients_mu (name, lib-name, lib-ver, db: pc.guard).
 */
struct client_pub {
    atomic_uint_fast64_t last_ms;   /* its last request, uv_now's clock (idle=) */
    atomic_uint          cmd;       /* the protocol's id of its last command */
    atomic_uint          flags;     /* PROTO_CL_* */
    atomic_uint          sub, psub, ssub;
    atomic_uint_fast64_t qbuf, qbuf_free, rbs, obl, oll, omem, tot;
    atomic_uint          trk_flags; /* PROTO_CL_TRACKING ... (tracking.c) */
    atomic_int_fast64_t  redir;     /* CLIENT TRACKING's REDIRECT (-1: off; tracking.c) */
    int                  fd;
    char                 laddr[64]; /* "ip:port" it connected to (a unix socket's path) */
};

struct client {
    struct conn         conn;
    const struct msg_client_ops *mops;  /* what msg.c tells it: client_msg_ops */
    struct worker      *w;
    struct wpool       *pool;
    struct qnode        link;           /* worker's clients */
    struct sched_node   sched;          /* on the worker's dirty list (sched.h) */
    struct qnode        msgs;           /* requests in reply order (msg.cq) */
    struct sconn_holder holder;         /* its pinned server connections, and what they
                                           tell it (client.c installs the callbacks) */
    struct qnode        sessions;       /* its sessions (session.link: session.h) */
    uint32_t            nsessions;
    uint32_t            nmsgs;
    size_t              held_bytes;     /* reply bytes waiting in queued msgs */
    size_t              held_cost;      /* what its messages' buffers hold (msg.charged) */
    size_t              mem_reported;   /* bytes this client counts in the proxy's memory use */
    struct sconn       *holding;        /* a server connection stopped until this client's
                                           output drains (sconn_hold), or NULL */
    uint64_t            written_ms;     /* its output last moved (client_written_ms) */
    size_t              write_queue_seen; /* libuv's write queue size then */
    enum client_in      in;
    uint64_t            swallow;        /* SWALLOW: body bytes still to drop */
    uint64_t            stream_left;    /* STREAM: body bytes still to copy */
    struct sconn       *stream;         /* STREAM / HOLD: the pinned connection */
    struct msg         *stream_msg;     /* ... and the request it carries */
    size_t              need;           /* bytes a pending request needs in ibuf */
    uint64_t            active_ms;      /* last read or write (client_timeout) */
    uint64_t            partial_ms;     /* since when an incomplete request waits (0: none) */
    struct proto_parser parser;
    struct proto_client pc;
    struct pubsub      *pubsub;         /* its subscriptions (pubsub.c), NULL: none */
    struct trk_client  *trk;            /* CLIENT TRACKING (tracking.c), NULL: never on */
    uint64_t            nreq;           /* requests parsed (CLIENT CACHING: the next one) */
    uint8_t             paused;         /* reading stopped for backpressure */
    uint8_t             eof;            /* no more input: close when answered */
    uint8_t             closing;
    uint8_t             finishing;      /* client_finish: the proxy ends it, not the client */
    uint8_t             lingering;      /* answered and FIN sent: input dropped until its
                                           close or linger_until (client_linger) */
    uint64_t            linger_until;
    uint8_t             sniffed;        /* its first bytes were looked at (client_sniff) */
    struct client_pub   pub;            /* what other workers read (CLIENT LIST) */
    uint32_t            pub_state;      /* the state pub was last published in
                                           (client_publish_sync) */
    atomic_int          kill;           /* CLIENT KILL from any worker: 1 close now, 2 end
                                           after its replies (the killer itself) */
    struct client_user  cu;             /* users: who it is (users.h; fl 0: no checks) */
};

/* Schedule a flush of c's output at the end of the iteration (w: c's worker, the
 * calling thread's); it closes: take it off the schedule. */
static inline void client_mark(struct worker *w, struct client *c)
{
    RL_ASSERT(worker_on_thread(w) && c->w == w);
    sched_mark_client(&w->sched, &c->sched);
}

static inline void client_unmark(struct worker *w, struct client *c)
{
    (void)w;
    sched_unmark(&c->sched);
}

/* The database c's requests go to, as msg.db has it: 0 the pool's, n database n-1. */
static inline uint8_t client_db(const struct client *c)
{
    return c->pc.selected ? (uint8_t)(c->pc.db + 1) : 0;
}

/* Accept one connection from a listener (worker thread). */
void client_accept(struct listener *l);

/* A message of this client is complete: deliver what can be delivered, in order. */
void client_advance(struct client *c);

/* Append reply bytes for the client's first message directly (streaming). */
int  client_write_bytes(struct client *c, const char *p, size_t n);

/* Reply bytes of a large value streamed from s into c's output: when that output is past
 * half its limit, s stops reading until c has written most of it (backpressure to the
 * server instead of buffering a slow reader's value, or cutting it). */
void client_stream_check(struct client *c, struct sconn *s);

/* What c's queued messages hold, struct and buffers (what counts toward memory_limit). */
size_t client_held_memory(const struct client *c);

/* Whether the proxy is over memory_limit with c holding a large part of it (then c is the
 * one to refuse or close: small clients stay served). Brings the proxy's count up to date. */
int  client_memory_over(struct client *c);

/* Input held (CLIENT_IN_HOLD) by tracking.c while its tracking connections are asked:
 * parse again (unless another hold is on: a stream or a session). */
void client_resume_input(struct client *c);

/* Flush output (the worker's flush). */
void client_flush(struct client *c);

/* Close now (worker shutdown or fatal error); messages owed a reply by a
 * server stay there as orphans. */
void client_close(struct client *c);

/* Stop reading; close once everything asked has been answered and written, between
 * two replies and without a reset (client_linger in client.c). */
void client_finish(struct client *c);

/* Whether c is still owed something by a finishing worker: a reply, or the end of its
 * lingering close (now: the worker's clock, ms). */
int  client_draining(const struct client *c, uint64_t now);

/* The worker's once-a-second check: idle clients (client_timeout) and
 * requests whose header is late (client_header_timeout). */
void client_check_timeouts(struct client *c, uint64_t now_ms);

/* The pool's settings that live in the client changed by a reload. */
void client_refresh(struct client *c);

/* What the protocol's local() and merge_env() get: the pool's and the process's numbers
 * (pool_numbers.c, which takes every worker's lock in turn: never call it holding one). */
void client_env(struct client *c, struct proto_env *env);

/*
 * End c after everything it is owed: a last message queued behind its replies (with
 * `why`, the protocol's error for code; NULL: no reply, only the close), then the close;
 * nothing more is read. Not closed here (callers may be walking the clients): closed once
 * its output is written. Without memory for the message it is closed at the next flush.
 */
void client_end(struct client *c, enum proto_err code, const char *why);

/* Close the clients CLIENT KILL marked (the worker's async callback). */
void client_reap(struct worker *w);

/* Bring c's published numbers (struct client_pub) up to date (its own worker). */
void client_publish(struct client *c);

/* The callbacks a client installs for the request lifecycle (msg.h). */
extern const struct msg_client_ops client_msg_ops;

#endif
