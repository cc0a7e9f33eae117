/* struct msg: one request's lifecycle from parse to reply — fragments, copies, merge, timeouts, re-dispatch, release. */
#ifndef RL_PROXY_MSG_H
#define RL_PROXY_MSG_H

#include <stdint.h>

#include "lib/buf.h"
#include "proto/proto.h"
#include "lib/queue.h"

/*
 * The queues between client and server connections:
 *
 *   client c:  c->msgs: m1 <-> m2 <-> m3              (cq: reply order)
 *                        |      |      \
 *                        |      |       fragments f1, f2 (parent = m3)
 *   sconn s:   s->sent: m1 <-> f2 <-> ...              (sq: sent, awaiting a reply)
 *   sconn t:   t->sent: m2 <-> f1 <-> ...
 *
 * A server connection answers in the order it was asked, so a reply always
 * belongs to the first message of that connection's queue. A client is
 * answered in the order it asked: a reply for a message that is not the
 * client's first waits in m->rsp; the first streams into the client's output.
 *
 * Lifecycle (m->state):
 *
 *        parse ──▶ NEW ──enqueue──▶ SENT ──reply complete──▶ DONE ──▶ delivered, released
 *                   │  ◀──re-dispatch─┘ │ ▲
 *                   │                   │ └──re-sent── PARKED ◀──cluster redirect to a node
 *                   │                   │                          not yet known, TRYAGAIN
 *                   │                   └──timeout / answered early──▶ ZOMBIE ──late reply──▶ released
 *                   └──answered here (local, error, miss, merge)──▶ DONE
 *
 * A message is held by its client's queue (cq linked), its server's queue
 * (sq linked), its parent (a fragment or copy), or its own pending children
 * (a parent); msg_release() frees it when nothing holds it any more. A
 * message whose client went away stays in its server queue (client NULL) to
 * absorb its reply, then is freed.
 */

enum msg_role {
    MSG_REQUEST,    /* a client's request (a multi-key or replicated one is a parent) */
    MSG_FRAG,       /* one server's part of a multi-key request: merged into its parent */
    MSG_COPY,       /* one copy of a request sent to several servers: the parent picks one */
    MSG_OWN,        /* the proxy's own request whose outcome m->watch waits for (a rejoin's
                     * invalidation, a shadow copy); otherwise a request like a client's:
                     * counted, timed out, failed with its connection */
    MSG_HELLO,      /* the proxy's connection hello (AUTH, SELECT, a pin's reset) */
    MSG_PROBE,      /* a health probe of a down server */
    MSG_DISCARD     /* the proxy's own request whose reply nobody reads (a warm-up copy) */
};

enum msg_state {
    MSG_NEW,        /* not in a server queue; reply not complete */
    MSG_SENT,       /* in a server connection's queue; reply not complete */
    MSG_ZOMBIE,     /* answered already (timeout) but still in a server queue: the reply is dropped */
    MSG_DONE,       /* reply complete, in no server queue */
    MSG_PARKED      /* waiting to be re-sent (a cluster node not in the map yet, TRYAGAIN's
                       pause), held by its pool's queue of such (cluster_worker.c) */
};

/* warm-up after a reload (see warmup.c) */
enum msg_warm {
    MSG_WARM_NONE,
    MSG_WARM_ASK,   /* a get at its new owner: on a miss, ask the previous owner */
    MSG_WARM_FETCH, /* the ask itself, sent to the previous owner */
    MSG_WARM_MOVE   /* migrate: the MIGRATE of its keys, sent to their previous owner first
                       (migrate.c); warm_to: the new owner, reqcopy: the request */
};

#define MSG_F_NOREPLY  0x0001  /* the client asked for no reply: not in its queue */
#define MSG_F_CLOSE    0x0002  /* close the client after this reply */
#define MSG_F_ERROR    0x0004  /* answered with an error (MSG_OWN: the server's reply was one) */
#define MSG_F_STREAMED 0x0008  /* part of the reply went straight to the client */
#define MSG_F_ASYNC    0x0010  /* copies parent: answer with the first copy that succeeds */
#define MSG_F_JKEY     0x0020  /* its key is queued in the connection's join keys (join.c) */
#define MSG_F_JOINED   0x0040  /* a later get was joined to its server command */
#define MSG_F_COPIES   0x0080  /* a parent of copies (else of fragments) */
#define MSG_F_LEADER   0x0100  /* identical gets wait for its reply (collapse.c): kept whole */
#define MSG_F_FOLLOWER 0x0200  /* waits for a leader's reply instead of being sent (collapse.c) */
#define MSG_F_CTABLE   0x0400  /* in its connection's table of gets to join (collapse.c) */
#define MSG_F_RSPLOST  0x0800  /* a leader's reply could not be kept whole (no memory) */
#define MSG_F_FAILOVER 0x1000  /* a write to a failover server: failover_ttl caps its TTL */
#define MSG_F_BUILT    0x2000  /* a parent whose reply the proxy wrote when it sent the
                                  fragments (pub/sub confirmations): they need only succeed;
                                  one that fails ends the client (its state is not the
                                  servers' any more) with that failure as the last reply */
#define MSG_F_STAGED   0x8000  /* a stage of its pool sees its reply first (stage_reply) */
#define MSG_F_PUSHES   0x4000  /* pub/sub messages waiting for their turn in the client's
                                  queue (pubsub.c): the next ones due at the same place
                                  join its buffer instead of taking a message each */

/* Bytes of each request kept for SLOWLOG and the request log (introspect.c). */
#define MSG_HEAD_MAX 64

struct msg;
struct worker;
struct client;
struct proto_env;
struct sconn;
struct stage;

/*
 * What the request lifecycle tells a message's client, through the callbacks the client
 * installs (struct client.mops; client.c's are client_msg_ops): msg.c never calls
 * client.c. advance: a message of its queue completed, deliver what is at its front in
 * order; write: reply bytes that go to it now (a large value streaming, first in its
 * queue); stream_check: such a value streams from s (its backpressure); env: what a merge
 * of fragments, or a local reply, needs to know of it.
 *
 * The modules under client.c on the request path (forward.c, session.c, pubsub.c) reach
 * it the same way, never by name: reset: a Redis RESET was answered, every subscription
 * ends (pubsub_reset); close, end, memory_over: client_close, client_end and
 * client_memory_over (client.h).
 */
struct msg_client_ops {
    void (*advance)(struct client *c);
    int  (*write)(struct client *c, const char *p, size_t n);
    void (*stream_check)(struct client *c, struct sconn *s);
    void (*env)(struct client *c, struct proto_env *env);
    void (*reset)(struct client *c);
    void (*close)(struct client *c);
    void (*end)(struct client *c, enum proto_err code, const char *why);
    int  (*memory_over)(struct client *c);
    /* input held (CLIENT_IN_HOLD: tracking.c, migrate.c) may be parsed again:
     * client_resume_input */
    void (*resume)(struct client *c);
    /* A local reply m that must wait with the input the command itself held (CLIENT
     * TRACKING's +OK, tracking.c): 1 when kept, 0 to answer it now. */
    int  (*defer)(struct client *c, struct msg *m);
    /* m, the request a stage took, goes on: its bytes p[0..n) (as the servers read them,
     * one whole request) are parsed again and pass the stages after `after`, then are
     * sent as forward.c sends any request. The stage held c's input meanwhile. */
    void (*again)(struct client *c, struct msg *m, const char *p, size_t n,
                  const struct stage *after);
};

/*
 * Someone waiting for a message's outcome (a shadow comparison, a rejoin
 * round): done() is called once, before the message is delivered or released:
 * ok 1 when its reply is complete (m->rsp holds it unless it streamed; for a
 * MSG_OWN message MSG_F_ERROR then says the server answered with an error), ok
 * 0 when it failed (timeout, lost connection, no memory). For a MSG_OWN
 * message `keep_reply` asks that its reply be kept in m->rsp.
 */
struct msg_watch {
    void (*done)(struct msg_watch *wt, struct worker *w, struct msg *m, int ok);
    int  keep_reply;
};

struct client;
struct ring;
struct sconn;
struct server;
struct worker;

struct msg {
    struct qnode   cq;          /* client reply order (or the worker's free list) */
    struct qnode   sq;          /* server connection queue */
    struct client *client;      /* NULL: internal, noreply, or its client closed */
    struct msg    *parent;      /* FRAG / COPY: the request it belongs to */
    struct sconn  *sconn;       /* SENT / ZOMBIE: where it waits */
    struct server *server;      /* where it was sent last */
    uint8_t        role;        /* enum msg_role */
    uint8_t        state;       /* enum msg_state */
    uint8_t        warm;        /* enum msg_warm */
    uint8_t        db;          /* its client's database: 0 the pool's, n database n-1
                                   (SELECT: its own shared connections, server_pick_db) */
    uint8_t        lease;       /* enum lease_mark: a read the lease stage follows (lease.c) */
    uint8_t        rerr;        /* its server answered with an error reply (introspect.c's
                                   failed_calls and errorstats; MSG_F_ERROR is the proxy's) */
    uint16_t       flags;       /* MSG_F_* */
    uint16_t       cmd;         /* the protocol's command id (what its reply parses as) */
    uint16_t       rflags;      /* PROTO_RF_* of the request */
    uint32_t       items;       /* retrieval: values returned; a fragment on a subscribed
                                   connection: confirmations received (one per key) */
    uint32_t       nkeys;       /* keys the request carried (hits/misses) */
    uint64_t       start_us;
    uint64_t       deadline_ms; /* 0: no timeout */
    uint64_t       req_bytes;
    struct buf     rsp;         /* reply bytes waiting for their turn */
    /* a parent: its fragments or copies */
    uint32_t       nfrag;
    uint32_t       nfrag_pending;
    struct msg   **frags;
    uint32_t      *key_frag;    /* FANOUT: the fragment that carries key i */
    struct proto_key *keys;     /* FANOUT: the request's keys, offsets into reqcopy */
    struct buf     reqcopy;     /* FANOUT: the request header (merge reads keys there);
                                   warm-up: the key */
    struct buf     req;         /* the request as forwarded, kept when it may be re-sent */
    uint8_t        resends;     /* times re-dispatched */
    uint8_t        redirects;   /* cluster MOVED / ASK hops followed */
    uint8_t        retries;     /* cluster TRYAGAIN retries */
    struct server *warm_to;     /* warm-up: the previous owner to ask, then where a hit is copied */
    uint16_t       warm_cmd;    /* warm-up: get or gets, as the client asked */
    const struct ring *mig_ring; /* migrate: the ring its move was decided by (migrate.c) */
    struct msg_watch *watch;    /* told of the outcome, or NULL */
    struct msg    *waiters;     /* collapse: a leader's first follower; a follower's next */
    size_t         charged;     /* its buffers' capacity as counted in its client's held_cost */
    /* Introspection (introspect.c): the request's first bytes as the client sent them, for
     * SLOWLOG's arguments and the request log's key; left out of msg_get's clearing (only
     * head_len says what is valid). Last: a slow or logged request is rare, its copy not. */
    uint32_t       head_len;    /* its header's length: head holds MSG_HEAD_MAX at most */
    char           head[MSG_HEAD_MAX];
};

struct msg *msg_get(struct worker *w);
/* Back to the worker's free list; releases its buffers beyond the standard
 * size and any children arrays. */
void msg_put(struct worker *w, struct msg *m);

/* Free m if nothing holds it any more (see above); a parent takes its
 * detached children with it. */
void msg_release(struct worker *w, struct msg *m);

/*
 * What a client makes the proxy hold counts at what it costs (memory_limit): a message
 * in its queue (or a fragment or copy of one) is charged the capacity of its buffers
 * (reply, kept request, request header copy), a parent its fragment and key arrays, a
 * fragment its struct, in the client's held_cost; a queued message's struct is counted
 * per queued message (client_held_memory). msg_charge brings m's charge up to date after its buffers
 * changed; msg_uncharge takes it back when m leaves the client (delivered, detached). A
 * client's request is charged when its reply buffer grows and when its reply is whole but
 * waits behind another: one answered first is delivered at once and never charged, and
 * the standard buffer a reply in progress came with goes uncounted (one per server
 * connection at most), which keeps the charge off the common path.
 */
void msg_charge(struct msg *m);
void msg_uncharge(struct msg *m);

/* Reply bytes p[0..n) of m arrived from its server (n may be part of a
 * unit). `big`: the unit is a large value, which streams to the client when
 * m is the client's first message; everything else waits in m->rsp until
 * the reply is complete. `drop`: bytes the client did not ask for. */
void msg_reply_bytes(struct msg *m, const char *p, size_t n, int big, int drop);

/* m's reply is complete (from its server, or answered here): hand it to its
 * client, or to its parent's merge when it was the last child. */
void msg_complete(struct worker *w, struct msg *m);

/* Answer m with an error now. A message still owed a reply by a server
 * becomes a ZOMBIE (the caller, the server queue, keeps it); a fragment
 * fails its part of the merge; half a streamed reply closes the client. */
void msg_fail(struct worker *w, struct msg *m, enum proto_err code, const char *reason);

/* Answer m now with reply bytes p[0..n) (a message in no server queue: NEW or PARKED),
 * as if its server had sent them; `error`: they are an error reply. */
void msg_answer(struct worker *w, struct msg *m, const char *p, size_t n, int error);

/* The protocol ops of the pool m belongs to. */
const struct proto_ops *msg_ops(const struct msg *m);

#endif
