/* Server connections: connect, hello, batched writes, reply parsing, timeouts, back-off, pinned connections. */
#ifndef RL_PROXY_SERVER_H
#define RL_PROXY_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "lib/buf.h"
#include "conf/conf.h"
#include "stats/histogram.h"
#include "proto/proto.h"
#include "proxy/conn.h"
#include "proxy/sched.h"
#include "proxy/tls.h"
#include "proxy/worker.h"
#include "lib/invariant.h"
#include "lib/queue.h"
#include "stats/stats.h"

struct client;
struct sconn_holder;
struct collapse_table;
struct msg;
struct worker;
struct wpool;

enum sconn_state { SCONN_IDLE, SCONN_RESOLVING, SCONN_CONNECTING, SCONN_CONNECTED, SCONN_CLOSING };

#define SCONN_PIN_SLOT UINT32_MAX       /* sconn.slot of a connection not in srv->conns */

/* Where the reply parser is within the current reply unit. */
enum sconn_rx {
    SCONN_RX_UNIT,      /* at the start of a unit: parse its header */
    SCONN_RX_BODY       /* inside a unit's body: body_left bytes pass through to cur */
};

/*
 * What holds server connections of its own: a client (which embeds it). A server and its
 * connections never call their holder's code; they tell it through these callbacks, each
 * optional (calls go down, news comes up).
 */
struct proto_name;
struct sconn;
struct sconn_holder;
struct sconn_holder_ops {
    /* s, pinned by h, answered everything it was sent */
    void (*pin_idle)(struct sconn_holder *h, struct sconn *s);
    /* s, pinned by h, wrote out what it had to send */
    void (*pin_writable)(struct sconn_holder *h, struct sconn *s);
    /* s, pinned by h, failed or closed (it is no longer h's) */
    void (*pin_lost)(struct sconn_holder *h, struct sconn *s);
    /* s, held back for h (sconn_hold), closed */
    void (*hold_lost)(struct sconn_holder *h, struct sconn *s);
    /* s, pinned by h and subscribed: a message unit p[0..n) (PROTO_SF_PUSH), a reply to
     * no request */
    void (*push)(struct sconn_holder *h, struct sconn *s, const char *p, size_t n);
    /* ... the server's own unsubscription of `name` (its slot moved): 1 when h takes it
     * so, 0 when it is the reply to an unsubscription h asked for */
    int  (*dropped)(struct sconn_holder *h, struct sconn *s, const struct proto_name *name);
    /* s, pinned by h and not subscribed: a push unit p[0..n) (RESP3 `>`, such as the
     * invalidations of CLIENT TRACKING), between or before replies (nearcache.c) */
    void (*unsolicited)(struct sconn_holder *h, struct sconn *s, const char *p, size_t n);
};
struct sconn_holder {
    const struct sconn_holder_ops *ops;
    struct qnode                   pins;   /* its pinned connections (sconn.client_link) */
};

/*
 * One connection to a server. A shared connection (srv->conns[i]) carries
 * many clients' requests, pipelined; a pinned one (srv->pins) carries one
 * client's only, for as long as that client holds it.
 */
struct sconn {
    struct conn        conn;
    uv_timer_t         timer;
    uv_connect_t       creq;
    uv_getaddrinfo_t   gai;
    struct server     *server;
    enum sconn_state   state;
    uint8_t            timer_armed;
    uint8_t            resolving;       /* a getaddrinfo is pending */
    uint8_t            is_pin;          /* a pinned connection (held or idle), not a shared one */
    uint8_t            variant;         /* the protocol variant its hello asked for (RESP3) */
    uint8_t            db;              /* the database its hello selects: 0 the pool's,
                                           n database n-1 (a client's SELECT: msg.db) */
    uint8_t            db_refused;      /* the server has no such database: closed, and
                                           not the server's failure */
    uint8_t            push_logged;     /* a push nobody asked for was logged */
    uint32_t           slot;            /* in srv->conns, or SCONN_PIN_SLOT */
    uint32_t           closes_pending;  /* handles (and a resolution) still to end before free */
    struct sched_node  sched;           /* on the worker's dirty or lazy list (sched.h) */
    struct qnode       sent;            /* messages sent, awaiting replies (msg.sq) */
    uint32_t           inflight;
    uint32_t           unsent_n;        /* of those, queued since the output last drained */
    uint64_t           unsent_bytes;    /* ... and their request bytes */
    uint32_t           rep_unsent_n;    /* ... as the in_queue gauges have them now */
    uint64_t           rep_unsent_bytes;
    struct proto_parser parser;
    /* reply streaming */
    enum sconn_rx      rx;
    struct msg        *cur;             /* BODY: whose body it is */
    uint64_t           body_left;
    uint8_t            body_drop;       /* the body is not for the client */
    uint8_t            body_final;      /* the unit ends the reply */
    uint8_t            body_big;        /* the unit is a large value: stream it */
    uint8_t            body_join_end;   /* after this body, end a joined get's reply */
    /* timeouts and backpressure (a request times out after `timeout` without reply bytes) */
    uint64_t           progress_ms;     /* when reply bytes last arrived */
    struct sconn_holder *held_by;       /* reading stopped until this holder, which a large
                                           value streams to, has written out its output */
    /* pinned connections */
    struct sconn_holder *pinned;        /* what holds it (a client), or NULL (shared / idle) */
    struct qnode       pin_link;        /* server's pins or idle_pins */
    struct qnode       client_link;     /* the holder's pins */
    /* get joining (join.c): the joinable gets in the queue each have their key
     * here ([u8 len][key], queue order); join_tail is the queue's last message
     * while it is a joinable get whose line is still unsent. */
    struct buf         jkeys;
    struct msg        *join_tail;
    uint32_t           join_len;        /* bytes of that open command line */
    uint32_t           join_n;          /* keys in it */
    struct collapse_table *ctab;        /* collapse_gets: the open leaders (collapse.c), or NULL */
};

/* One backend as one worker sees it. */
struct server {
    struct qnode       link;            /* worker's servers */
    struct worker     *w;
    struct wpool      *pool;
    char              *ident;
    char              *label;
    struct conf_addr   addr;            /* owned copy */
    uint32_t           index;           /* in its pool's servers[]; UINT32_MAX: retiring,
                                           in no ring (proxy/migrate.h) */
    uint32_t           nconns;          /* server_connections */
    uint32_t           nslots;          /* nconns per protocol variant and database */
    struct sconn     **conns;           /* shared connections: [(db * PROTO_VARIANTS +
                                           variant) * nconns + i], db as msg.db: the
                                           pool's first, then each one a client SELECTed
                                           (Redis pools: SERVER_DB_SETS), opened on demand */
    struct qnode       pins;            /* pinned connections held by clients */
    struct qnode       idle_pins;       /* reset pinned connections ready for the next client */
    uint32_t           nidle_pins;
    uint64_t           retry_at_ms;     /* do not reconnect before */
    uint32_t           backoff_ms;
    int                removed;         /* dropped by a reload: drain then free */
    uint32_t           nopen;           /* connection objects not yet freed (closing ones too) */
    struct stats_server stats;
    struct histogram   latency;         /* send to reply, usec (single writer) */
    struct health     *health;          /* shared by every worker */
    struct tls_session tls_session;     /* server_tls: what the next connection resumes */
    const char        *tls_failure;     /* the last handshake's failure (fixed text), or
                                           NULL: what requests are told in the back-off */
};

struct server *server_create(struct worker *w, struct wpool *pool, const struct conf_server *cs);
/* The server left its pool: with `now`, close every connection (in-flight
 * messages fail); else let each finish its in-flight requests, then close.
 * Freed when its last connection is closed. */
void server_destroy(struct server *s, int now);

/* A shared connection to send a request with flags rflags to: connected or
 * connecting, of the request's variant (PROTO_RF_VARIANT: RESP3 clients have
 * connections of their own), hint picks one of server_connections, so one key
 * always uses one connection and its requests stay ordered; NULL with *reason
 * in the reconnect back-off. */
struct sconn *server_pick(struct server *s, uint64_t hint, uint16_t rflags, const char **reason);

/* The same for a request of a client that SELECTed another database than the pool's:
 * db as msg.db (0: server_pick's), a set of connections of its own per database, whose
 * hello selects it. */
struct sconn *server_pick_db(struct server *s, uint64_t hint, uint16_t rflags, uint8_t db,
                             const char **reason);

/*
 * Re-dispatch: m (NEW, taken out of its server queue, with its request
 * bytes kept in m->req) is sent again to server `to`, after the optional
 * prefix bytes (e.g. Redis's ASKING). Its reply so far is dropped. 0, or -1
 * with m untouched when no connection to `to` can take it now.
 */
int  server_resend(struct worker *w, struct msg *m, struct server *to, const char *prefix,
                   size_t prefix_len);

/*
 * Pinned connections. server_pin: a connection of the server's own for
 * holder h (a client), speaking protocol `variant` (the client's now): an idle reset
 * one, else a new one (with the pool's hello),
 * bounded by the pool's max_pinned over every worker. NULL with *reason
 * when over the bound or unreachable. sconn_unpin: c is done with s: with
 * `keep` it is reset (the protocol's pin_reset, then the hello) and kept
 * idle for the next client, else (or when the protocol cannot reset it, or
 * enough are idle) closed — a client that closes while a command blocks
 * there unpins without keep, so nothing is read for nobody.
 */
struct sconn *server_pin(struct server *s, struct sconn_holder *h, uint8_t variant,
                         const char **reason);
/* ... in database db (as msg.db; 0: server_pin): a new connection whose hello selects it
 * (the idle ones are in the pool's); let go with keep, it is reset to the pool's. */
struct sconn *server_pin_db(struct server *s, struct sconn_holder *h, uint8_t variant,
                            uint8_t db, const char **reason);
void sconn_unpin(struct sconn *s, int keep);

/* Queue m on s for its reply (its request bytes are already in s's output,
 * m->req_bytes of them); arms its timeout. */
void sconn_enqueue(struct sconn *s, struct msg *m);
/* Queue n messages of the proxy's own (MSG_HELLO, MSG_DISCARD) on s, to swallow the
 * replies to what was written into its output from length `before` on; the first carries
 * those bytes. All or nothing: 0, or -ENOMEM with the output cut back to `before`. */
int  sconn_enqueue_own(struct sconn *s, enum msg_role role, int n, size_t before);

/* A streamed request's body is whole: its timeout starts now. */
void sconn_deadline(struct sconn *s, struct msg *m);

/* m, just queued on s, times out after ms (the proxy's own requests in a pool
 * without a timeout: they must end). */
void sconn_deadline_in(struct sconn *s, struct msg *m, uint64_t ms);

/* Take m out of its connection's queue before its reply (re-dispatch);
 * only the last message of a queue whose bytes are unsent, or any message
 * of a connection that failed. */
void sconn_unqueue(struct sconn *s, struct msg *m);

/* Write what is in the connection's output (the worker's flush). */
void sconn_flush(struct sconn *s);

/* Schedule a flush of s's output at the end of the iteration (w: s's worker, the calling
 * thread's), or within delay_ms (sched_mark_lazy); it closes, or its output is written
 * now: take it off the lazy list (unlazy), or off both (unmark). */
static inline void sconn_mark(struct worker *w, struct sconn *s)
{
    RL_ASSERT(worker_on_thread(w) && s->server->w == w);
    sched_mark_sconn(&w->sched, &s->sched);
}

static inline void sconn_mark_lazy(struct worker *w, struct sconn *s, uint32_t delay_ms)
{
    RL_ASSERT(worker_on_thread(w) && s->server->w == w);
    sched_mark_lazy(&w->sched, &s->sched, delay_ms);
}

static inline void sconn_unlazy(struct worker *w, struct sconn *s)
{
    (void)w;
    sched_unlazy(&s->sched);
}

static inline void sconn_unmark(struct worker *w, struct sconn *s)
{
    (void)w;
    sched_unmark(&s->sched);
}

/*
 * Backpressure to the server: a large value streaming to client c has filled c's output,
 * so s reads nothing more until c has written it out (sconn_release_hold). What s carries
 * for other clients waits meanwhile; no request on s times out while it does. 1: held
 * for c; 0: not (held already for another client, or not connected).
 */
int  sconn_hold(struct sconn *s, struct sconn_holder *h);
void sconn_release_hold(struct sconn *s);

/* Close (failing the requests in flight with reason). */
void sconn_close(struct sconn *s, const char *reason, int is_error);

/* Open the connections for preconnect. */
void server_preconnect(struct server *s);

/* Send a health probe (memcached version, Redis PING) to a down server
 * whose retry time has come (the caller won health_try_probe); its
 * outcome brings the server up or keeps it down longer. */
void server_probe(struct server *s);

/* Close the server's connections whose TLS handshake is past its deadline
 * (the worker's once-a-second tick). */
void server_check_handshakes(struct server *s, uint64_t now_ms);

/* A failure of the server (connect, reset, garbage, timeout): counted in
 * its shared health record; the limit-th in a row takes it down. */
void server_failed(struct server *s, const char *reason);

#endif
