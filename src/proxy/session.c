/* Sessions: a client's run of requests on a pinned server connection — transactions, WATCH, blocking commands (see session.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state/health.h"
#include "lib/log.h"
#include "proxy/client.h"
#include "proxy/forward.h"
#include "proxy/msg.h"
#include "proxy/nearcache.h"
#include "proxy/rejoin.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/session.h"
#include "proxy/tracking.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "stats/stats.h"
#include "lib/util.h"

#define SESSION_HELD_MAX (1024u * 1024)   /* request bytes a deferred atomic part may hold */

/* ------------------------------------------------------------------ the objects */

/* The client's transaction session (WATCH, MULTI), or NULL. */
static struct session *session_tx(const struct client *c)
{
    struct qnode *n;

    QUEUE_FOREACH(n, &c->sessions) {
        struct session *sess = QUEUE_DATA(n, struct session, link);
        if (sess->kind == SESSION_TX)
            return sess;
    }
    return NULL;
}

/* What the protocol reads of the client's session (PROTO_PF_SESSION / _ATOMIC). */
static void session_flags(struct client *c)
{
    struct session *tx = session_tx(c);

    c->parser.flags &= ~(uint32_t)(PROTO_PF_SESSION | PROTO_PF_ATOMIC);
    if (tx != NULL)
        c->parser.flags |= PROTO_PF_SESSION | (tx->atomic ? PROTO_PF_ATOMIC : 0);
}

static struct session *session_new(struct client *c, enum session_kind kind)
{
    struct session *sess = calloc(1, sizeof(*sess));

    if (sess == NULL)
        return NULL;
    sess->c = c;
    sess->kind = kind;
    buf_init(&sess->held);
    queue_insert_tail(&c->sessions, &sess->link);
    c->nsessions++;
    return sess;
}

/* The client reads nothing more until sess's pin is idle. */
static void session_hold(struct session *sess, uint8_t why)
{
    struct client *c = sess->c;

    sess->hold = why;
    c->in = CLIENT_IN_HOLD;
    if (why == SESSION_HOLD_BLOCK)
        STATS_ADD(&c->pool->stats, blocked_clients, 1);
}

static void session_unhold(struct session *sess)
{
    struct client *c = sess->c;

    if (sess->hold == 0)
        return;
    if (sess->hold == SESSION_HOLD_BLOCK)
        STATS_ADD(&c->pool->stats, blocked_clients, -1);
    sess->hold = 0;
    if (c->in == CLIENT_IN_HOLD && c->stream == NULL)
        c->in = CLIENT_IN_PARSE;
}

/* Forget sess (its pin, if any, is the caller's business). */
static void session_free(struct session *sess)
{
    struct client *c = sess->c;

    session_unhold(sess);
    queue_remove(&sess->link);
    c->nsessions--;
    buf_free(&sess->held);
    free(sess);
    session_flags(c);
}

/* sess is over: its pin is reset for the next client with `keep`, else closed. */
static void session_end(struct session *sess, int keep)
{
    struct sconn *s = sess->s;

    sess->s = NULL;
    session_free(sess);
    if (s != NULL)
        sconn_unpin(s, keep);
}

/* ------------------------------------------------------------------ placing */

/*
 * The server the keys of req go to, placed by routing (rk[0..nkeys) filled,
 * *poolp their pool): its keys must share an owner (else CROSSSLOT). NULL
 * after answering m.
 */
static int session_refused(struct client *c, struct wpool *pool, struct msg *m,
                           const struct proto_req *req, const char *buf,
                           const struct route_key *rk);

static struct server *session_place(struct client *c, struct msg *m, const struct proto_req *req,
                                    const char *buf, struct route_key **rkp, char *dec,
                                    struct wpool **poolp)
{
    struct wpool *pool = forward_place(c, m, req, buf, rkp, dec);
    struct route_key *rk = *rkp;

    if (pool == NULL)
        return NULL;
    if (!forward_keys_together(c, pool, m, rk, req->nkeys))
        return NULL;
    if (session_refused(c, pool, m, req, buf, rk))
        return NULL;
    *poolp = pool;
    return forward_pick(c, pool, m, req, &rk[0]);
}

/* Whether a stage of the pool refused req's keys on a pinned connection (migrate: a key
 * that is moving); m is answered then. One bit test for a pool without such a stage. */
static int session_refused(struct client *c, struct wpool *pool, struct msg *m,
                           const struct proto_req *req, const char *buf,
                           const struct route_key *rk)
{
    if (!(pool->chain.hooks & STAGE_H_PINNED))
        return 0;
    struct stage_req r = { .c = c, .pool = pool, .m = m, .req = req, .buf = buf, .rk = rk };
    return stage_pinned(&pool->chain, &r) != STAGE_PASS;
}

/* Whether every key of req (placed in rk) has the owner sess was placed by. */
static int session_owns(const struct session *sess, const struct wpool *pool,
                        const struct route_key *rk, uint32_t nkeys)
{
    if (pool != sess->pool)
        return 0;
    for (uint32_t i = 0; i < nkeys; i++)
        if (rk[i].owner >= pool->nservers || pool->servers[rk[i].owner] != sess->owner)
            return 0;
    return 1;
}

/* Pin sess to srv (placed by key rk of pool). 0, or -1 after answering m. */
static int session_pin(struct session *sess, struct msg *m, struct wpool *pool,
                       struct server *srv, const struct route_key *rk)
{
    struct client *c = sess->c;
    const char *reason = NULL;
    struct sconn *s = server_pin_db(srv, &c->holder, (c->parser.flags & PROTO_PF_VARIANT) != 0,
                                    client_db(c), &reason);

    if (s == NULL) {
        log_info("pool '%s': client %s: no pinned connection to '%s': %s", pool->cp->name,
                 c->pc.peer, srv->label, reason);
        forward_refuse(c, m, PROTO_ERR_SERVER, reason);
        return -1;
    }
    sess->s = s;
    sess->srv = srv;
    sess->pool = pool;
    sess->owner = rk->owner < pool->nservers ? pool->servers[rk->owner] : srv;
    sess->state = SESSION_PINNED;
    return 0;
}

/* The requests a deferred session held go out first, their replies swallowed
 * (the client had sess_begun / sess_queued for them). 0 or -ENOMEM. */
static int session_send_held(struct session *sess)
{
    struct worker *w = sess->c->w;
    struct buf *out = &sess->s->conn.obuf;
    size_t before = buf_len(out);
    const struct proto_ops *ops = sess->pool->ops;

    if (sess->nheld == 0)
        return 0;
    if (buf_append(out, buf_rptr(&sess->held), buf_len(&sess->held)) < 0)
        return -ENOMEM;
    for (uint32_t i = 0; i < sess->nheld; i++) {
        struct msg *d = msg_get(w);
        if (d == NULL) {
            /* the ones queued absorb replies that never come: the caller closes
             * this connection (unpin without keep) */
            buf_truncate(out, before);
            return -ENOMEM;
        }
        d->role = MSG_DISCARD;
        d->cmd = ops->probe_cmd;
        d->req_bytes = i == 0 ? buf_len(&sess->held) : 0;
        sconn_enqueue(sess->s, d);
    }
    buf_free(&sess->held);
    sess->nheld = 0;
    sconn_mark(w, sess->s);
    return 0;
}

/* ------------------------------------------------------------------ sending */

/*
 * The client switched protocols (HELLO 2 / 3, answered by the proxy) since its pin
 * last spoke for it: the pin switches too before the next request, or that request's
 * reply would come in the old protocol (a WATCH outlives the switch; the protocol
 * refuses a switch inside the atomic part, where the server would queue it). The
 * switch's reply is swallowed; a reset pin is kept in the protocol it speaks now. 0,
 * or -ENOMEM with nothing written.
 */
static int session_variant(struct session *sess)
{
    struct client *c = sess->c;
    struct sconn *s = sess->s;
    uint8_t variant = (c->parser.flags & PROTO_PF_VARIANT) != 0;
    const struct proto_ops *ops = sess->pool->ops;
    struct buf *out = &s->conn.obuf;
    size_t before = buf_len(out);

    if (s->variant == variant || ops->sess_variant == NULL)
        return 0;
    int n = ops->sess_variant(variant, out);
    if (n < 0)
        return -ENOMEM;
    if (sconn_enqueue_own(s, MSG_DISCARD, n, before) < 0)
        return -ENOMEM;
    s->variant = variant;
    return 0;
}

/* A blocking request's deadline: its own timeout plus the pool's as a margin, none
 * for one that blocks for ever (or on a pool without timeouts). */
static void session_deadline(struct client *c, struct msg *m, const struct proto_req *req)
{
    int timeout = m->server->pool->cp->timeout_ms;

    if (!(req->sess & PROTO_SS_BLOCK) || req->block_ms < 0 || timeout <= 0)
        return;
    m->deadline_ms = req->block_ms == 0 ? 0
                                        : uv_now(&c->w->loop) + (uint64_t)req->block_ms +
                                              (uint64_t)timeout;
}

/* Send m (req, whole) through sess's pin; then hold the client when req ends the
 * session or blocks. 0, or -1 after answering m. */
static int session_send(struct session *sess, struct msg *m, const struct proto_req *req,
                        const char *buf)
{
    struct client *c = sess->c;
    enum proto_err code;
    const char *reason = NULL;

    if (session_variant(sess) < 0) {
        forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
        return -1;
    }
    if (forward_write(sess->pool, m, sess->srv, sess->s, 0, req, buf, NULL, 0, FORWARD_WHOLE,
                      req->body_len, NULL, &code, &reason) < 0) {
        forward_refuse(c, m, code, reason);
        return -1;
    }
    sess->via_pin = 1;
    if (req->sess & PROTO_SS_BLOCK) {
        session_deadline(c, m, req);
        STATS_ADD(&c->pool->stats, blocking_requests, 1);
        session_hold(sess, SESSION_HOLD_BLOCK);
    }
    if (req->sess & PROTO_SS_END) {
        sess->state = SESSION_ENDING;
        if (sess->hold == 0)
            session_hold(sess, SESSION_HOLD_END);
    }
    return 0;
}

/* A request refused inside the atomic part spoils it (its COMMIT aborts). */
static void session_spoil(struct session *sess)
{
    if (sess != NULL && sess->atomic)
        sess->spoiled = 1;
}

/*
 * A write of the session's keys (placed in rk) while it is pinned to a server other
 * than their owner (a failover server: the owner is down): remembered for the owner's
 * rejoin, as forward.c remembers a request routed around it, so that the owner does
 * not serve the old values when it comes back. 0, or -1 after answering m when the
 * owner is back already: the write would land beside the server the keys' readers
 * read again (a transaction is spoiled; the client retries, on the owner).
 */
static int session_note_write(struct session *sess, struct msg *m, const struct proto_req *req,
                              const struct route_key *rk)
{
    if ((req->flags & PROTO_RF_WRITE) && sess->pool->cp->near_cache.on)
        nearcache_write(sess->pool, m, req, rk);    /* evicted before it is sent */
    if (req->nkeys > 0)
        tracking_session(sess->c, sess->pool, req, rk);
    if (!(req->flags & PROTO_RF_WRITE) || sess->srv == sess->owner || req->nkeys == 0)
        return 0;
    if (!health_up(sess->pool->view.health[sess->owner->index])) {
        struct route rt;
        route_clear(&rt);
        rt.kind = ROUTE_SEND;
        rt.n = 1;
        rt.to[0] = sess->srv->index;
        rt.events = ROUTE_EV_FAILOVER;
        if (rejoin_note(sess->pool, rk, req->nkeys, &rt) == 0)
            return 0;
    }
    session_spoil(sess);
    forward_refuse(sess->c, m, PROTO_ERR_SERVER, "the keys' server came back while this "
                   "session was on its failover server; retry");
    return -1;
}

/* The COMMIT of a spoiled atomic part on its pin: the server drops what it queued
 * (sess_abort), and m, queued for that reply, is answered PROTO_ERR_ABORTED now (a
 * ZOMBIE that absorbs it). */
static void session_abort(struct session *sess, struct msg *m)
{
    struct client *c = sess->c;
    const struct proto_ops *ops = sess->pool->ops;
    struct buf *out = &sess->s->conn.obuf;
    size_t before = buf_len(out);

    STATS_ADD(&c->pool->stats, transactions_aborted, 1);
    if (ops->sess_abort == NULL || ops->sess_abort(out) < 0) {
        buf_truncate(out, before);
        forward_refuse(c, m, PROTO_ERR_ABORTED, NULL);
        session_end(sess, 0);           /* closed: the server drops the rest itself */
        return;
    }
    m->req_bytes = buf_len(out) - before;
    sconn_enqueue(sess->s, m);
    sconn_mark(c->w, sess->s);
    msg_fail(c->w, m, PROTO_ERR_ABORTED, NULL);
    sess->state = SESSION_ENDING;
    session_hold(sess, SESSION_HOLD_END);
}

/* ------------------------------------------------------------------ the cases */

static int req_keyed(const struct proto_req *req)
{
    return (req->kind == PROTO_REQ_SINGLE || req->kind == PROTO_REQ_SAME ||
            req->kind == PROTO_REQ_FANOUT) && req->nkeys > 0 && !(req->flags & PROTO_RF_NOKEY);
}

/* No transaction session: WATCH opens one, a blocking request a one-shot one
 * (also beside a transaction pinned elsewhere). */
static enum session_verdict session_open(struct client *c, const struct proto_req *req,
                                         const char *buf, enum session_kind kind)
{
    struct route_key one, *rk = &one;
    char dec[PROTO_KEY_DECODED_MAX];
    struct wpool *pool = NULL;

    if (c->nmsgs > 0)
        return SESSION_WAIT;        /* the backend sees the client's requests in order */
    struct msg *m = forward_msg(c, req);
    if (m == NULL) {
        c->closing = 1;
        return SESSION_DONE;
    }
    if (!req_keyed(req)) {
        forward_refuse_command(c, m, PROTO_ERR_SERVER, "a session needs a key to be placed by");
        return SESSION_DONE;
    }
    struct server *srv = session_place(c, m, req, buf, &rk, dec, &pool);
    if (srv == NULL)
        return SESSION_DONE;
    struct session *sess = session_new(c, kind);
    if (sess == NULL) {
        forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
        return SESSION_DONE;
    }
    if (session_pin(sess, m, pool, srv, &rk[0]) < 0) {
        session_free(sess);
        return SESSION_DONE;
    }
    if (kind == SESSION_TX)
        STATS_ADD(&c->pool->stats, transactions, 1);
    session_flags(c);
    if (session_send(sess, m, req, buf) < 0) {
        session_end(sess, 1);
        return SESSION_DONE;
    }
    if (kind == SESSION_ONESHOT && sess->state != SESSION_ENDING) {
        sess->state = SESSION_ENDING;   /* its one request is its last */
        if (sess->hold == 0)
            session_hold(sess, SESSION_HOLD_END);
    }
    return SESSION_DONE;
}

/* BEGIN with no session: the atomic part is opened here, its server placed later. */
static enum session_verdict session_begin(struct client *c, const struct proto_req *req,
                                          const char *buf)
{
    const struct proto_ops *ops = c->pool->ops;
    struct msg *m = forward_msg(c, req);

    if (m == NULL) {
        c->closing = 1;
        return SESSION_DONE;
    }
    struct session *sess = ops->sess_begun != NULL ? session_new(c, SESSION_TX) : NULL;
    if (sess == NULL) {
        forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
        return SESSION_DONE;
    }
    sess->state = SESSION_DEFERRED;
    sess->atomic = 1;
    if (ops->forward(req, buf, &sess->held) < 0 ||
        buf_append(&m->rsp, ops->sess_begun, strlen(ops->sess_begun)) < 0) {
        session_free(sess);
        forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
        return SESSION_DONE;
    }
    sess->nheld = 1;
    STATS_ADD(&c->pool->stats, transactions, 1);
    session_flags(c);
    forward_answer(c, m);
    return SESSION_DONE;
}

/* Hold a keyless request of a deferred atomic part: answered sess_queued now, sent
 * once a keyed request places the session. */
static enum session_verdict session_defer(struct session *sess, const struct proto_req *req,
                                          const char *buf)
{
    struct client *c = sess->c;
    const struct proto_ops *ops = c->pool->ops;
    struct msg *m = forward_msg(c, req);
    size_t before = buf_len(&sess->held);

    if (m == NULL) {
        c->closing = 1;
        return SESSION_DONE;
    }
    if (before + req->hdr_len + req->body_len > SESSION_HELD_MAX) {
        session_spoil(sess);
        forward_refuse(c, m, PROTO_ERR_LIMIT, "too many commands queued before the "
                       "transaction's first key (1 MiB)");
        return SESSION_DONE;
    }
    if (ops->forward(req, buf, &sess->held) < 0 ||
        (req->body_len > 0 &&
         buf_append(&sess->held, buf + req->hdr_len, (size_t)req->body_len) < 0) ||
        buf_append(&m->rsp, ops->sess_queued, strlen(ops->sess_queued)) < 0) {
        buf_truncate(&sess->held, before);
        session_spoil(sess);
        forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
        return SESSION_DONE;
    }
    sess->nheld++;
    forward_answer(c, m);
    return SESSION_DONE;
}

/* A deferred atomic part: a keyed request (or its END) places it. */
static enum session_verdict session_deferred(struct session *sess, const struct proto_req *req,
                                             const char *buf)
{
    struct client *c = sess->c;
    int keyed = req_keyed(req);

    if (!keyed && !(req->sess & PROTO_SS_END)) {
        if (req->kind == PROTO_REQ_SESSION)
            return session_defer(sess, req, buf);
        return SESSION_PASS;
    }
    struct msg *m;
    if ((req->sess & PROTO_SS_COMMIT) && sess->spoiled) {
        /* nothing reached a server: nothing to drop there */
        if ((m = forward_msg(c, req)) == NULL) {
            c->closing = 1;
            return SESSION_DONE;
        }
        STATS_ADD(&c->pool->stats, transactions_aborted, 1);
        session_end(sess, 1);
        forward_refuse(c, m, PROTO_ERR_ABORTED, NULL);
        return SESSION_DONE;
    }
    if (c->nmsgs > 0)
        return SESSION_WAIT;
    if ((m = forward_msg(c, req)) == NULL) {
        c->closing = 1;
        return SESSION_DONE;
    }
    struct route_key one, *rk = &one;
    char dec[PROTO_KEY_DECODED_MAX];
    struct wpool *pool = NULL;
    struct server *srv;
    if (keyed) {
        srv = session_place(c, m, req, buf, &rk, dec, &pool);
    } else {
        /* only keyless requests: any server runs them; routing picks one */
        pool = forward_place_bytes(c, "", 0, rk);
        srv = forward_pick(c, pool, m, req, rk);
    }
    if (srv == NULL || session_pin(sess, m, pool, srv, &rk[0]) < 0) {
        if (req->sess & PROTO_SS_END)
            session_end(sess, 1);       /* EXEC / DISCARD answered: the transaction is over */
        else
            session_spoil(sess);
        return SESSION_DONE;
    }
    if (session_send_held(sess) < 0) {
        forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
        session_end(sess, 0);
        return SESSION_DONE;
    }
    if (keyed && session_note_write(sess, m, req, rk) < 0) {
        if (req->sess & PROTO_SS_END)
            session_end(sess, 1);
        return SESSION_DONE;
    }
    if (session_send(sess, m, req, buf) < 0) {
        if (req->sess & PROTO_SS_END)
            session_end(sess, 1);
        else
            session_spoil(sess);
    }
    return SESSION_DONE;
}

/* A pinned session in its atomic part: every request belongs to it. */
static enum session_verdict session_atomic(struct session *sess, const struct proto_req *req,
                                           const char *buf)
{
    struct client *c = sess->c;
    struct msg *m = forward_msg(c, req);

    if (m == NULL) {
        c->closing = 1;
        return SESSION_DONE;
    }
    if ((req->sess & PROTO_SS_COMMIT) && sess->spoiled) {
        session_abort(sess, m);
        return SESSION_DONE;
    }
    if (req_keyed(req)) {
        struct route_key one, *rk = &one;
        char dec[PROTO_KEY_DECODED_MAX];
        struct wpool *pool = forward_place(c, m, req, buf, &rk, dec);
        if (pool == NULL) {
            session_spoil(sess);
            return SESSION_DONE;
        }
        if (!session_owns(sess, pool, rk, req->nkeys)) {
            session_spoil(sess);
            forward_refuse(c, m, PROTO_ERR_CROSSSLOT, "keys in request don't hash to the same server");
            return SESSION_DONE;
        }
        if (session_refused(c, pool, m, req, buf, rk)) {
            session_spoil(sess);
            return SESSION_DONE;
        }
        if (session_note_write(sess, m, req, rk) < 0)
            return SESSION_DONE;
    } else if (req->kind != PROTO_REQ_SESSION) {
        /* the protocol refuses what needs other servers inside the atomic part */
        session_spoil(sess);
        forward_refuse_command(c, m, PROTO_ERR_SERVER, "not possible inside a transaction");
        return SESSION_DONE;
    }
    if (session_send(sess, m, req, buf) < 0 && !(req->sess & PROTO_SS_END))
        session_spoil(sess);
    return SESSION_DONE;
}

/* A pinned session outside its atomic part (WATCH held): requests all on its server go
 * through the pin, others the usual way; switching paths waits for what is unanswered. */
static enum session_verdict session_watching(struct session *sess, const struct proto_req *req,
                                             const char *buf)
{
    struct client *c = sess->c;
    uint32_t before = c->nmsgs;

    if (req->kind == PROTO_REQ_SESSION || (req->sess & PROTO_SS_BEGIN)) {
        if (!sess->via_pin && before > 0)
            return SESSION_WAIT;
        struct msg *m = forward_msg(c, req);
        if (m == NULL) {
            c->closing = 1;
            return SESSION_DONE;
        }
        if (session_send(sess, m, req, buf) == 0 && (req->sess & PROTO_SS_BEGIN)) {
            sess->atomic = 1;
            session_flags(c);
        }
        return SESSION_DONE;
    }
    if (!req_keyed(req)) {
        if (sess->via_pin && before > 0 && req->kind != PROTO_REQ_LOCAL &&
            req->kind != PROTO_REQ_ERROR)
            return SESSION_WAIT;
        if (req->kind != PROTO_REQ_LOCAL && req->kind != PROTO_REQ_ERROR)
            sess->via_pin = 0;
        return SESSION_PASS;
    }
    struct msg *m = forward_msg(c, req);
    if (m == NULL) {
        c->closing = 1;
        return SESSION_DONE;
    }
    struct route_key one, *rk = &one;
    char dec[PROTO_KEY_DECODED_MAX];
    struct wpool *pool = forward_place(c, m, req, buf, &rk, dec);
    if (pool == NULL)
        return SESSION_DONE;
    if (session_owns(sess, pool, rk, req->nkeys)) {
        if (session_refused(c, pool, m, req, buf, rk))
            return SESSION_DONE;
        if (!sess->via_pin && before > 0) {
            forward_retract(c, m);
            return SESSION_WAIT;
        }
        if (session_note_write(sess, m, req, rk) < 0)
            return SESSION_DONE;
        session_send(sess, m, req, buf);
        return SESSION_DONE;
    }
    if (req->sess & PROTO_SS_OPEN) {
        /* WATCH of keys elsewhere: one session watches one server's keys */
        forward_refuse(c, m, PROTO_ERR_CROSSSLOT, "keys in request don't hash to the same server");
        return SESSION_DONE;
    }
    forward_retract(c, m);
    if (sess->via_pin && before > 0)
        return SESSION_WAIT;
    if (req->sess & PROTO_SS_BLOCK)
        return session_open(c, req, buf, SESSION_ONESHOT);
    sess->via_pin = 0;
    return SESSION_PASS;
}

/* ------------------------------------------------------------------ entry points */

enum session_verdict session_request(struct client *c, const struct proto_req *req,
                                     const char *buf)
{
    struct session *tx = session_tx(c);
    uint8_t ss = req->sess;

    if (ss & PROTO_SS_RESET) {
        if (tx != NULL)
            session_end(tx, 1);         /* the pin's reset does what RESET asks */
        return SESSION_PASS;            /* answered here */
    }
    if (req->kind == PROTO_REQ_ERROR) {
        if (ss & PROTO_SS_SPOIL)
            session_spoil(tx);
        return SESSION_PASS;
    }
    if (req->kind == PROTO_REQ_LOCAL)
        return SESSION_PASS;
    if (tx == NULL) {
        if (ss & PROTO_SS_BEGIN)
            return session_begin(c, req, buf);
        if (ss & PROTO_SS_OPEN)
            return session_open(c, req, buf, SESSION_TX);
        if (ss & PROTO_SS_BLOCK)
            return session_open(c, req, buf, SESSION_ONESHOT);
        return SESSION_PASS;
    }
    switch (tx->state) {
    case SESSION_DEFERRED:
        return session_deferred(tx, req, buf);
    case SESSION_PINNED:
        return tx->atomic ? session_atomic(tx, req, buf) : session_watching(tx, req, buf);
    case SESSION_ENDING:
        break;                          /* the client is held: nothing is parsed */
    }
    return SESSION_PASS;
}

static struct session *session_of(const struct client *c, const struct sconn *s)
{
    struct qnode *n;

    QUEUE_FOREACH(n, &c->sessions) {
        struct session *sess = QUEUE_DATA(n, struct session, link);
        if (sess->s == s)
            return sess;
    }
    return NULL;
}

int session_pin_idle(struct client *c, struct sconn *s)
{
    struct session *sess = session_of(c, s);

    if (sess == NULL || sess->hold == 0)
        return 0;
    if (sess->state == SESSION_ENDING)
        session_end(sess, 1);
    else
        session_unhold(sess);
    return 1;
}

int session_pin_lost(struct client *c, struct sconn *s)
{
    struct session *sess = session_of(c, s);

    if (sess == NULL)
        return 0;
    sess->s = NULL;                     /* sconn_close let go of it already */
    enum session_kind kind = sess->kind;
    int ended = sess->state == SESSION_ENDING;
    session_free(sess);
    if (kind == SESSION_TX && !ended) {
        /* What it watched or queued is gone with that connection: the client
         * must not go on as if it held it. Answer what it asked, then close. */
        STATS_ADD(&c->pool->stats, sessions_lost, 1);
        log_info("pool '%s': client %s closed: its transaction's server connection failed",
                 c->pool->cp->name, c->pc.peer);
        c->eof = 1;
        conn_read_stop(&c->conn);
        client_mark(c->w, c);
    }
    return 1;
}

/* Whether sess holds state on a server the reloaded pool no longer places it on. */
static int session_moved(const struct session *sess, int kind_changed)
{
    if (sess->s == NULL)
        return 0;                       /* DEFERRED: nothing on a server yet */
    if (sess->state == SESSION_ENDING && sess->hold != SESSION_HOLD_BLOCK)
        return 0;                       /* its EXEC is on its way: it ends by itself, and
                                           the pin of a removed server is closed then */
    return kind_changed || sess->srv->removed || (sess->owner != NULL && sess->owner->removed);
}

int session_refresh(struct client *c, int kind_changed)
{
    struct qnode *n, *tmp;
    uint32_t lost = 0;
    const char *label = NULL;

    if (c->closing || c->nsessions == 0)
        return 0;
    QUEUE_FOREACH_SAFE(n, tmp, &c->sessions) {
        struct session *sess = QUEUE_DATA(n, struct session, link);
        if (!session_moved(sess, kind_changed))
            continue;
        struct sconn *s = sess->s;
        label = sess->srv->label;
        sess->s = NULL;
        session_free(sess);
        /* its requests in flight there (a blocked BLPOP) are answered with the error now;
         * client_pin_lost finds no session of it any more */
        sconn_close(s, kind_changed ? "the pool changed kind (reload)"
                                    : "server removed from the pool (reload)", 0);
        lost++;
    }
    if (lost == 0)
        return 0;
    STATS_ADD(&c->pool->stats, sessions_lost, lost);
    log_notice("pool '%s': client %s closed: a reload %s (server '%s'), and its session "
               "there (WATCH, MULTI or blocked command) with it", c->pool->cp->name, c->pc.peer,
               kind_changed ? "changed the pool's kind" : "removed its server", label);
    /* Everything it is owed is written first (a close marker behind it, no extra reply:
     * a client that waits for nothing must not read one), then the close; nothing more
     * is read. Not closed here: the reload walks the clients. */
    c->mops->end(c, PROTO_ERR_SERVER, NULL);
    return 1;
}

int session_blocked(const struct client *c)
{
    struct qnode *n;

    QUEUE_FOREACH(n, &c->sessions) {
        if (QUEUE_DATA(n, struct session, link)->hold == SESSION_HOLD_BLOCK)
            return 1;
    }
    return 0;
}

void session_client_closed(struct client *c)
{
    struct qnode *n;

    while ((n = queue_first(&c->sessions)) != NULL)
        session_free(QUEUE_DATA(n, struct session, link));
}
