/* One server connection: connect and hello, the queue of requests awaiting replies, timeouts, reading and matching replies, back-off, close. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "lib/invariant.h"
#include "state/health.h"
#include "lib/log.h"
#include "proxy/client.h"
#include "proxy/collapse.h"
#include "proxy/join.h"
#include "proxy/msg.h"
#include "proxy/hub.h"
#include "proxy/snapshot.h"
#include "proxy/server.h"
#include "proxy/server_int.h"
#include "proxy/sentinel_worker.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "lib/util.h"


static void sconn_process(struct sconn *s);
static void sconn_timer_cb(uv_timer_t *t);

/* ------------------------------------------------------------------ health */

/* Drop one of the things keeping a closing connection alive (its two
 * handles, a pending name resolution); the last one frees it. */
static void sconn_unref(struct sconn *s)
{
    if (--s->closes_pending > 0)
        return;
    struct server *srv = s->server;
    conn_release(&s->conn);
    buf_free(&s->jkeys);
    collapse_free(s);
    proto_parser_free(&s->parser);
    free(s);
    srv->nopen--;
    server__free_if_idle(srv);
}

static void sconn_on_close(uv_handle_t *h)
{
    sconn_unref(h->data);
}

/* Reconnect no sooner than the back-off allows (doubling from 50 ms to 2 s). */
static void server_backoff(struct server *srv)
{
    srv->backoff_ms = srv->backoff_ms ? RL_MIN(srv->backoff_ms * 2, SCONN_BACKOFF_MAX_MS)
                                      : SCONN_BACKOFF_MIN_MS;
    srv->retry_at_ms = uv_now(&srv->w->loop) + srv->backoff_ms;
}

/* The TLS handshake of s failed (why): counted, logged, and the server
 * backs off as after a failed connect; the requests queued on s are failed
 * by the close with the failure's text (`SERVER_ERROR tls: ...`). */
void sconn__tls_failed(struct sconn *s, enum tls_fail why)
{
    struct server *srv = s->server;
    const char *reason = tls_fail_text(why), *detail = "";

    if (why != TLS_FAIL_CLOSED && why != TLS_FAIL_TIMEOUT)
        tls_failure(&s->conn, NULL, &detail);
    TLS_COUNT(&srv->stats, why, 0);
    log_warn("server '%s' (%s) of pool '%s': %s%s%s", srv->label, srv->addr.text,
             srv->pool->cp->name, reason, detail[0] ? ": " : "", detail);
    srv->tls_failure = reason;
    server_backoff(srv);
    sconn_close(s, reason, 1);
}

static void sconn_on_handshake(struct conn *c, int status)
{
    struct sconn *s = CONN_OWNER(c, struct sconn, conn);

    if (status < 0)
        return;                     /* the read error that follows closes it */
    TLS_COUNT(&s->server->stats, TLS_FAIL_NONE, tls_resumed(c));
    s->server->tls_failure = NULL;
    s->server->backoff_ms = 0;
    sconn_mark(s->server->w, s);     /* what was queued meanwhile goes now */
}

static void sconn_on_read(struct conn *c, ssize_t nread)
{
    struct sconn *s = CONN_OWNER(c, struct sconn, conn);

    if (nread > 0) {
        s->progress_ms = uv_now(&s->server->w->loop);     /* the server is answering */
        sconn_process(s);
        if (s->state == SCONN_CONNECTED && buf_len(&c->ibuf) == 0 && c->ibuf.cap > CONN_BUF_KEEP)
            buf_free(&c->ibuf);
        if (s->state == SCONN_CONNECTED && conn_transport_output(c) > 0)
            sconn_mark(s->server->w, s);   /* e.g. a TLS key update's answer */
        return;
    }
    if (nread == 0) {
        if (conn_output(c) > 0)
            sconn_mark(s->server->w, s);   /* the transport has bytes of its own */
        return;
    }
    if (conn_handshaking(c)) {   /* TLS: not done, or failed (a TLS 1.3 server refuses our
                                    certificate after our side is done; a bad record) */
        sconn__tls_failed(s, nread == UV_EOF ? TLS_FAIL_CLOSED : tls_failure(c, NULL, NULL));
        return;
    }
    if (nread == UV_EOF) {
        STATS_ADD(&s->server->stats, server_eof, 1);
        sconn_close(s, "connection closed by server", 0);
    } else {
        sconn_close(s, uv_strerror((int)nread), 1);
    }
}

static void sconn_on_written(struct conn *c, int status)
{
    struct sconn *s = CONN_OWNER(c, struct sconn, conn);

    if (s->state == SCONN_CLOSING)
        return;
    if (status < 0) {
        sconn_close(s, uv_strerror(status), 1);
        return;
    }
    sconn_flush(s);
}

static const struct conn_events sconn_events = {
    .on_read = sconn_on_read,
    .on_written = sconn_on_written,
    .on_handshake = sconn_on_handshake,
};

/*
 * Write the pool's hello (Redis AUTH/SELECT) into s's output and queue one
 * HELLO message per reply to swallow. All or nothing: 0, or -ENOMEM with
 * nothing written or queued (the connection must not be used then: a
 * reply nobody swallows would reach a client).
 */
int sconn__hello(struct sconn *s, int reset)
{
    struct server *srv = s->server;
    const struct proto_ops *ops = srv->pool->ops;
    const struct conf_pool *cp = srv->pool->cp;
    struct buf *out = &s->conn.obuf;
    size_t before = buf_len(out);
    int n = 0, nreset = 0;

    if (reset) {
        if (ops->pin_reset == NULL || (nreset = ops->pin_reset(out)) < 0)
            goto undo;
    }
    if (ops->server_hello != NULL) {
        const struct proto_hello hello = {
            .username = cp->redis_username, .password = cp->redis_auth,
            .db = s->db != 0 ? s->db - 1 : cp->redis_db,    /* SELECT's, or the pool's */
            .replica_reads = cp->replica_reads,
            .variant = s->variant,
        };
        int h = ops->server_hello(&hello, out);
        if (h < 0)
            goto undo;
        n = h;
    }
    return sconn_enqueue_own(s, MSG_HELLO, n + nreset, before);
undo:
    buf_truncate(out, before);
    return -ENOMEM;
}

int sconn_enqueue_own(struct sconn *s, enum msg_role role, int n, size_t before)
{
    struct worker *w = s->server->w;
    struct buf *out = &s->conn.obuf;
    struct msg *ms[8];

    if (n > (int)RL_ARRAY_SIZE(ms))
        goto undo;
    for (int i = 0; i < n; i++) {
        if ((ms[i] = msg_get(w)) == NULL) {
            while (i-- > 0)
                msg_put(w, ms[i]);
            goto undo;
        }
    }
    for (int i = 0; i < n; i++) {
        ms[i]->role = role;
        ms[i]->cmd = s->server->pool->ops->probe_cmd;
        ms[i]->req_bytes = i == 0 ? buf_len(out) - before : 0;
        sconn_enqueue(s, ms[i]);
    }
    return 0;
undo:
    buf_truncate(out, before);
    return -ENOMEM;
}

static void sconn_connect_cb(uv_connect_t *req, int status)
{
    struct sconn *s = req->data;
    struct server *srv = s->server;

    if (s->state == SCONN_CLOSING)
        return;
    if (status < 0) {
        log_warn("connect to server '%s' (%s) failed: %s", srv->label, srv->addr.text,
                 uv_strerror(status));
        server_backoff(srv);
        srv->tls_failure = NULL;
        sconn_close(s, uv_strerror(status), 1);
        return;
    }
    s->state = SCONN_CONNECTED;
    if (!tls_is(&s->conn))
        srv->backoff_ms = 0;        /* TLS: once its handshake is done */
    STATS_ADD(&srv->stats, server_connections, 1);
    if (tls_is(&s->conn))
        STATS_ADD(&srv->stats, tls_connections, 1);
    if (!srv->addr.path) {
        uv_tcp_nodelay(&s->conn.h.tcp, 1);
        if (srv->pool->cp->tcpkeepalive)
            uv_tcp_keepalive(&s->conn.h.tcp, 1, 60);
    }
    int rc = conn_read_start(&s->conn);
    if (rc < 0) {
        sconn_close(s, uv_strerror(rc), 1);
        return;
    }
    sconn_mark(srv->w, s);
    if (!s->is_pin && srv->pool->pins_seen)
        server__pins_ready(srv, s->variant);    /* in use and reachable: sessions may follow */
}

static void sconn_start_connect(struct sconn *s, const struct sockaddr *sa)
{
    s->state = SCONN_CONNECTING;
    s->creq.data = s;
    int rc = uv_tcp_connect(&s->creq, &s->conn.h.tcp, sa, sconn_connect_cb);
    if (rc < 0)
        sconn_connect_cb(&s->creq, rc);
}

static void sconn_gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct sconn *s = req->data;

    s->resolving = 0;
    if (s->state == SCONN_CLOSING) {
        if (res)
            uv_freeaddrinfo(res);
        sconn_unref(s);    /* the resolution held the connection open */
        return;
    }
    s->closes_pending--;
    if (status < 0 || res == NULL) {
        if (res)
            uv_freeaddrinfo(res);
        sconn_connect_cb(&s->creq, status < 0 ? status : UV_EAI_NONAME);
        return;
    }
    sconn_start_connect(s, res->ai_addr);
    uv_freeaddrinfo(res);
}

/* Start connecting s (a literal address at once, a name through getaddrinfo). */
static void sconn_connect(struct sconn *s)
{
    struct server *srv = s->server;

    if (srv->addr.path) {
        s->state = SCONN_CONNECTING;
        s->creq.data = s;
        uv_pipe_connect(&s->creq, &s->conn.h.pipe, srv->addr.path, sconn_connect_cb);
        return;
    }
    struct sockaddr_storage ss;
    if (uv_ip4_addr(srv->addr.host, srv->addr.port, (struct sockaddr_in *)&ss) == 0 ||
        uv_ip6_addr(srv->addr.host, srv->addr.port, (struct sockaddr_in6 *)&ss) == 0) {
        sconn_start_connect(s, (struct sockaddr *)&ss);
        return;
    }
    char port[8];
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof(port), "%u", srv->addr.port);
    s->state = SCONN_RESOLVING;
    s->gai.data = s;
    s->closes_pending++;
    s->resolving = 1;
    int rc = uv_getaddrinfo(&srv->w->loop, &s->gai, sconn_gai_cb, srv->addr.host, port, &hints);
    if (rc < 0) {
        s->closes_pending--;
        s->resolving = 0;
        sconn_connect_cb(&s->creq, rc);
    }
}

/*
 * A new connection object for srv, in srv->conns[slot] (or a pinned one
 * with SCONN_PIN_SLOT) of the protocol's `variant` (its hello says which), its
 * hello queued, connecting. NULL without memory; a connection that failed at
 * once comes back CLOSING.
 */
struct sconn *sconn__open(struct server *srv, uint32_t slot, uint8_t variant, uint8_t db)
{
    struct worker *w = srv->w;
    struct sconn *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->server = srv;
    s->slot = slot;
    s->variant = variant;
    s->db = db;
    s->parser.item_size_max = srv->pool->cp->item_size_max;
    if (srv->pool->cp->redis_cluster)
        s->parser.flags |= PROTO_PF_CLUSTER;    /* its MOVED/ASK/TRYAGAIN are followed */
    queue_init(&s->sent);
    if (conn_init(&s->conn, &w->loop, srv->addr.path != NULL, &sconn_events, &transport_plain,
                  SCONN_READ_CHUNK) < 0) {
        free(s);
        return NULL;
    }
    const struct tls_ctx *tls = srv->pool->server_tls;
    if (tls != NULL) {
        const struct conf_tls *ct = srv->pool->cp->server_tls;
        const char *peer = ct != NULL && ct->server_name ? ct->server_name : srv->addr.host;
        uint64_t deadline = uv_now(&w->loop) +
                            (uint64_t)w->snap->conf->global.tls_handshake_timeout_s * 1000u;
        if (tls_attach(&s->conn, tls, peer, &srv->tls_session, deadline) < 0) {
            s->conn.h.handle.data = NULL;
            uv_close((uv_handle_t *)&s->conn.h.handle, (uv_close_cb)free);
            return NULL;
        }
    }
    uv_timer_init(&w->loop, &s->timer);
    s->timer.data = s;
    s->closes_pending = 2;
    srv->nopen++;
    if (slot != SCONN_PIN_SLOT) {
        srv->conns[slot] = s;
    } else {
        s->is_pin = 1;      /* counted in health->pinned until it closes */
        STATS_ADD(&srv->stats, pinned_connections, 1);
    }
    if (sconn__hello(s, 0) < 0) {
        sconn_close(s, "out of memory", 0);
        return s;
    }
    sconn_connect(s);
    return s;
}

static void sconn_arm(struct sconn *s, uint64_t after_ms)
{
    uv_timer_start(&s->timer, sconn_timer_cb, after_ms, 0);
    s->timer_armed = 1;
}

void sconn_enqueue(struct sconn *s, struct msg *m)
{
    RL_ASSERT(worker_on_thread(s->server->w));
    /* in one queue at a time; a message is queued new, or again after its reply (warm-up's
     * second ask) */
    RL_ASSERT((m->state == MSG_NEW || m->state == MSG_SENT) && !queue_linked(&m->sq));
    struct server *srv = s->server;
    int timeout = srv->pool->cp->timeout_ms;
    int internal = m->role >= MSG_HELLO;

    m->sconn = s;
    m->server = srv;
    m->state = MSG_SENT;
    queue_insert_tail(&s->sent, &m->sq);
    join_queued(s, m);
    if (s->ctab != NULL)
        collapse_queued(s, m);
    s->inflight++;
    if (internal)
        return;
    s->unsent_n++;
    s->unsent_bytes += m->req_bytes;
    STATS_ADD(&srv->stats, in_flight, 1);
    STATS_ADD(&srv->stats, out_queue_bytes, m->req_bytes);   /* all in flight; see sconn_inqueue */
    if (srv->pool->cp->balance_factor > 0 && srv->health)
        health_inflight_add(srv->health);
    if (timeout > 0) {
        m->deadline_ms = uv_now(&srv->w->loop) + (uint64_t)timeout;
        if (!s->timer_armed)
            sconn_arm(s, (uint64_t)timeout);
    }
}

void sconn_deadline_in(struct sconn *s, struct msg *m, uint64_t ms)
{
    m->deadline_ms = uv_now(&s->server->w->loop) + ms;
    if (!s->timer_armed)
        sconn_arm(s, ms);
}

void sconn_deadline(struct sconn *s, struct msg *m)
{
    int timeout = s->server->pool->cp->timeout_ms;

    if (timeout <= 0)
        return;
    m->deadline_ms = uv_now(&s->server->w->loop) + (uint64_t)timeout;
    if (!s->timer_armed)
        sconn_arm(s, (uint64_t)timeout);
}

/*
 * twemproxy's queue gauges at the cost of two counter updates per request:
 * in_flight and out_queue_bytes count every request queued to the server
 * until its reply (enqueue / dequeue); after each flush the requests queued
 * since the output last drained completely are reported as in_queue /
 * in_queue_bytes while bytes of them are still unsent, and the stats view
 * takes them out of out_queue (= in_flight - in_queue). `drained`: the
 * output is all on the wire, or never will be (closing).
 */
static void sconn_inqueue(struct sconn *s, int drained)
{
    struct server *srv = s->server;
    uint32_t n = drained ? 0 : s->unsent_n;
    uint64_t b = drained ? 0 : s->unsent_bytes;

    if (n != s->rep_unsent_n) {
        STATS_ADD(&srv->stats, in_queue, (int64_t)n - (int64_t)s->rep_unsent_n);
        STATS_ADD(&srv->stats, in_queue_bytes, (int64_t)b - (int64_t)s->rep_unsent_bytes);
        s->rep_unsent_n = n;
        s->rep_unsent_bytes = b;
    }
    if (drained) {
        s->unsent_n = 0;
        s->unsent_bytes = 0;
    }
}

/* A shared connection of a server a reload removed closes once nothing waits on it. */
static void sconn_close_if_drained(struct sconn *s)
{
    if (s->server->removed && queue_empty(&s->sent) && s->pinned == NULL &&
        s->state != SCONN_CLOSING)
        sconn_close(s, "server removed by a reload, drained", 0);
}

static void sconn_dequeue(struct sconn *s, struct msg *m)
{
    struct server *srv = s->server;

    queue_remove(&m->sq);
    if ((m->flags & (MSG_F_JKEY | MSG_F_CTABLE)) || s->join_tail == m) {
        if ((m->flags & MSG_F_JKEY) || s->join_tail == m)
            join_forget(s, m);
        if (m->flags & MSG_F_CTABLE)
            collapse_forget(s, m);
    }
    m->sconn = NULL;
    s->inflight--;
    if (m->role >= MSG_HELLO)
        return;
    STATS_ADD(&srv->stats, in_flight, -1);
    STATS_ADD(&srv->stats, out_queue_bytes, -(int64_t)m->req_bytes);
    if (srv->pool->cp->balance_factor > 0 && srv->health)
        health_inflight_sub(srv->health);
}

/* The first message of the queue, whose reply is complete. */
static struct msg *sconn_pop(struct sconn *s)
{
    struct msg *m = QUEUE_DATA(queue_first(&s->sent), struct msg, sq);
    sconn_dequeue(s, m);
    return m;
}

void sconn_unqueue(struct sconn *s, struct msg *m)
{
    sconn_dequeue(s, m);
    m->state = MSG_NEW;
}

static void sconn_timeouts(struct sconn *s, uint64_t now, int timeout);

static void sconn_timer_cb(uv_timer_t *t)
{
    struct sconn *s = t->data;
    struct worker *w = s->server->w;
    uint64_t now = uv_now(&w->loop);
    int timeout = s->server->pool->cp->timeout_ms;

    s->timer_armed = 0;
    sconn_timeouts(s, now, timeout);
    sched_flush(&w->sched);    /* the errors go out now, not at the next I/O event */
}

/*
 * When m times out: `timeout` after it was sent, or after the last reply bytes s read,
 * whichever is later. A server answers in order, so while it sends a reply (a large value,
 * another request's reply ahead of m's) it is making progress on m too: the timeout is
 * for a server that stops answering (as memcached's proxy times out a connection that
 * stops sending), not for a reply in progress. A probe keeps its own deadline.
 */
static inline uint64_t sconn_due(const struct sconn *s, const struct msg *m, int timeout)
{
    uint64_t alive = timeout > 0 ? s->progress_ms + (uint64_t)timeout : 0;
    return m->role == MSG_PROBE ? m->deadline_ms : RL_MAX(m->deadline_ms, alive);
}

/* The timer's work: fail what is overdue, close a hung connection, re-arm. */
static void sconn_timeouts(struct sconn *s, uint64_t now, int timeout)
{
    struct server *srv = s->server;
    struct worker *w = srv->w;
    struct qnode *n;

    if (s->held_by != NULL) {
        /* The proxy stopped reading (backpressure): the server is not late, the client
         * is slow. Nothing times out until reading resumes. */
        sconn_arm(s, timeout > 0 ? (uint64_t)timeout : 1000);
        return;
    }
    int unread = 0;
    if (s->conn.fd >= 0 && ioctl(s->conn.fd, FIONREAD, &unread) == 0 && unread > 0)
        s->progress_ms = now;   /* it answered: the proxy has not read it yet (a busy loop) */
    n = queue_first(&s->sent);
    struct msg *m = n ? QUEUE_DATA(n, struct msg, sq) : NULL;
    /* A server that has sat on a timed-out request for 4 timeouts is hung:
     * close it so the requests behind it fail fast instead of piling up. */
    if (m != NULL && m->state == MSG_ZOMBIE && timeout > 0 &&
        sconn_due(s, m, timeout) + 3u * (uint64_t)timeout <= now) {
        sconn_close(s, "server hung after a timeout", 1);
        return;
    }
    for (; n != NULL; n = queue_next(&s->sent, n)) {
        m = QUEUE_DATA(n, struct msg, sq);
        if (m->role == MSG_PROBE) {
            if (m->deadline_ms <= now) {
                sconn_close(s, "health probe timed out", 1);
                return;
            }
            break;
        }
        if (m->state == MSG_ZOMBIE || m->role >= MSG_HELLO || m->deadline_ms == 0)
            continue;
        if (sconn_due(s, m, timeout) > now)
            break;
        STATS_ADD(&srv->stats, server_timedout, 1);
        if (s->pinned != NULL) {
            /* What a pinned connection still runs (a blocking pop, a transaction)
             * could complete there for nobody: it goes, and the failure with it. */
            msg_fail(w, m, PROTO_ERR_TIMEOUT, "timeout");
            sconn_close(s, "timeout on a pinned connection", 0);
            return;
        }
        server_failed(srv, "timeout");
        msg_fail(w, m, PROTO_ERR_TIMEOUT, "timeout");
    }
    if (queue_empty(&s->sent))
        return;
    uint64_t next = timeout > 0 ? (uint64_t)timeout : 1000;
    if (n != NULL) {
        m = QUEUE_DATA(n, struct msg, sq);
        uint64_t due = sconn_due(s, m, timeout);
        next = due > now ? due - now : 1;
    }
    sconn_arm(s, next);         /* the next deadline, or the zombie at the head again */
}

/* m's reply is complete: account for it and hand it to the lifecycle. */
static void sconn_reply_done(struct sconn *s)
{
    struct server *srv = s->server;
    struct worker *w = srv->w;
    struct msg *m = sconn_pop(s);

    switch ((enum msg_role)m->role) {
    case MSG_PROBE:
        server__succeeded(srv);
        msg_complete(w, m);
        return;
    case MSG_HELLO:
    case MSG_DISCARD:
        msg_complete(w, m);
        return;
    default:
        break;
    }
    server__succeeded(srv);
    STATS_ADD(&srv->stats, responses, 1);
    if (w->snap->conf->global.latency_histograms) {
        uint64_t now_us = worker_now_us(w);
        histogram_record(&srv->latency, now_us > m->start_us ? now_us - m->start_us : 0);
    }
    if ((m->flags & MSG_F_STAGED) && srv->pool->chain.reply(&srv->pool->chain, w, m))
        return;
    if (m->rflags & PROTO_RF_RETRIEVAL) {
        uint32_t misses = m->nkeys > m->items ? m->nkeys - m->items : 0;
        STATS_ADD(&srv->stats, hits, m->items);
        STATS_ADD(&srv->stats, misses, misses);
        if (m->role == MSG_REQUEST && m->client != NULL) {
            STATS_ADD(&m->client->pool->stats, hits, m->items);
            STATS_ADD(&m->client->pool->stats, misses, misses);
        }
    }
    msg_complete(w, m);
    if (s->pinned != NULL && queue_empty(&s->sent) && s->pinned->ops->pin_idle != NULL)
        s->pinned->ops->pin_idle(s->pinned, s);
    else
        sconn_close_if_drained(s);
}

/* m's part of a joined get is over: its reply ends as a lone get's would. */
static void sconn_join_done(struct sconn *s, struct msg *m)
{
    const char *end = s->server->pool->ops->join_miss;

    msg_reply_bytes(m, end, strlen(end), 0, 0);
    sconn_reply_done(s);
}

/* The server sent bytes that are not a reply for what was asked: the
 * connection is beyond repair (no later reply could be trusted to match). */
static void sconn_garbage(struct sconn *s, const char *what, const char *p, size_t n)
{
    log_hexdump(LOG_WARN_, __FILE__, __LINE__, what, p, n);
    sconn_close(s, what, 1);
}

/* A push on a connection that is not subscribed (a server sending what nobody asked
 * for, such as invalidations): dropped, logged once per connection. */
static void sconn_push_dropped(struct sconn *s, const char *p, size_t n)
{
    if (s->push_logged)
        return;
    s->push_logged = 1;
    log_hexdump(LOG_INFO_, __FILE__, __LINE__, "push frame from a server dropped (no client "
                "subscribed on this connection; later ones are not logged)", p, n);
}

/*
 * A reply unit on a subscribed connection that is not a message: one confirmation of an
 * (un)subscription, which gets one per name it carried (the fragment's nkeys; the proxy
 * wrote the client's own confirmations when it sent it, pubsub.c), or the error that
 * answers all of it (kept: the client gets it), or a reply to the proxy's own hello. The
 * reset's reply on a connection no client holds any more ends its subscribed mode.
 */
static void sconn_sub_reply(struct sconn *s, struct msg *m, const char *p, const struct proto_rsp *rsp)
{
    struct buf *in = &s->conn.ibuf;
    int error = (rsp->flags & PROTO_SF_ERROR) != 0;

    if (m->role < MSG_HELLO)
        STATS_ADD(&s->server->stats, response_bytes, rsp->hdr_len);
    if (error) {
        m->flags |= MSG_F_ERROR;
        msg_reply_bytes(m, p, rsp->hdr_len, 0, 0);
    }
    buf_consume(in, rsp->hdr_len);
    if (!error && m->role == MSG_FRAG && ++m->items < m->nkeys)
        return;                         /* confirmations of its other names are due */
    int hello = m->role == MSG_HELLO;
    sconn_reply_done(s);
    if (hello && s->pinned == NULL && s->state == SCONN_CONNECTED)
        s->parser.flags &= ~(uint32_t)PROTO_PF_SUBSCRIBED;
}

/*
 * The next unit of a subscribed connection's input (first: its queue's first message, or
 * NULL), or of a shared one whose queue is empty. A message goes to the holding client
 * (pubsub.c); a confirmation, an error or the hello's reply to the queue's first message.
 * 1: a unit was taken, go on; 0: more input is needed; 2: a unit with a body (never sent
 * there), left for the caller's usual path to parse again; -1: the connection was closed.
 */
static int sconn_sub_unit(struct sconn *s, struct qnode *first)
{
    const struct proto_ops *ops = s->server->pool->ops;
    struct buf *in = &s->conn.ibuf;
    const char *p = buf_rptr(in);
    size_t len = buf_len(in);
    struct msg *m = first != NULL ? QUEUE_DATA(first, struct msg, sq) : NULL;
    struct proto_rsp rsp;

    int tracked = s->pinned != NULL && s->pinned->ops->unsolicited != NULL;
    if (!(s->parser.flags & PROTO_PF_SUBSCRIBED) && !tracked) {
        sconn_garbage(s, "unsolicited reply from server", p, len);
        return -1;
    }
    int rc = ops->parse_rsp(&s->parser, p, len, m != NULL ? m->cmd : ops->probe_cmd,
                            m != NULL ? m->rflags : 0, &rsp);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        sconn_garbage(s, "malformed reply from server", p, len);
        return -1;
    }
    if ((rsp.flags & PROTO_SF_PUSH) && !(s->parser.flags & PROTO_PF_SUBSCRIBED)) {
        s->pinned->ops->unsolicited(s->pinned, s, p, rsp.hdr_len);   /* tracked */
        buf_consume(in, rsp.hdr_len);
        return 1;
    }
    if (!(s->parser.flags & PROTO_PF_SUBSCRIBED)) {
        sconn_garbage(s, "unsolicited reply from server", p, rsp.hdr_len);
        return -1;
    }
    if (rsp.flags & PROTO_SF_PUSH) {
        if (s->pinned != NULL && s->pinned->ops->push != NULL)
            s->pinned->ops->push(s->pinned, s, p, rsp.hdr_len);  /* else nobody's any more */
        buf_consume(in, rsp.hdr_len);
        return 1;
    }
    struct proto_name dropped;
    if (!(rsp.flags & PROTO_SF_ERROR) && rsp.body_len == 0 && ops->sub_dropped != NULL &&
        ops->sub_dropped(p, rsp.hdr_len, &dropped) == 1 && s->pinned != NULL &&
        s->pinned->ops->dropped != NULL && s->pinned->ops->dropped(s->pinned, s, &dropped)) {
        buf_consume(in, rsp.hdr_len);   /* the server's own unsubscription */
        return 1;
    }
    if (m == NULL) {
        sconn_garbage(s, "unsolicited reply from server", p, rsp.hdr_len);
        return -1;
    }
    if (rsp.body_len > 0)
        return 2;
    sconn_sub_reply(s, m, p, &rsp);
    return 1;
}

static void sconn_process(struct sconn *s)
{
    struct server *srv = s->server;
    const struct proto_ops *ops = srv->pool->ops;
    struct buf *in = &s->conn.ibuf;

    while (s->state == SCONN_CONNECTED && buf_len(in) > 0) {
        const char *p = buf_rptr(in);
        size_t len = buf_len(in);

        if (s->rx == SCONN_RX_BODY) {
            size_t n = (size_t)RL_MIN((uint64_t)len, s->body_left);
            msg_reply_bytes(s->cur, p, n, s->body_big, s->body_drop);
            if (s->cur->role < MSG_HELLO)
                STATS_ADD(&srv->stats, response_bytes, n);
            buf_consume(in, n);
            s->body_left -= n;
            if (s->body_left > 0)
                continue;
            s->rx = SCONN_RX_UNIT;
            s->conn.chunk = SCONN_READ_CHUNK;
            struct msg *done = s->cur;
            int join_end = s->body_join_end;
            s->cur = NULL;
            s->body_join_end = 0;
            if (join_end)
                sconn_join_done(s, done);
            else if (s->body_final)
                sconn_reply_done(s);
            continue;
        }
        struct qnode *first = queue_first(&s->sent);
        if (first == NULL || (s->parser.flags & PROTO_PF_SUBSCRIBED)) {
            int rc = sconn_sub_unit(s, first);      /* subscribed mode, or nothing asked */
            if (rc == 1)
                continue;
            if (rc == 0)
                break;
            if (rc < 0)
                return;
        }
        struct msg *m = QUEUE_DATA(first, struct msg, sq);
        struct proto_rsp rsp;
        int rc = ops->parse_rsp(&s->parser, p, len, m->cmd, m->rflags, &rsp);
        if (rc == 0)
            break;
        if (rc < 0) {
            sconn_garbage(s, "malformed reply from server", p, len);
            return;
        }
        if ((rsp.flags & PROTO_SF_PUSH) && s->pinned != NULL &&
            s->pinned->ops->unsolicited != NULL) {
            s->pinned->ops->unsolicited(s->pinned, s, p, rsp.hdr_len);  /* tracked */
            buf_consume(in, rsp.hdr_len);
            continue;
        }
        if (rsp.flags & PROTO_SF_PUSH) {
            sconn_push_dropped(s, p, rsp.hdr_len);  /* a push nobody asked for: dropped */
            buf_consume(in, rsp.hdr_len);
            continue;
        }
        if ((rsp.flags & PROTO_SF_CLUSTER) && srv->pool->cworker != NULL &&
            srv->pool->up->cluster_reply(s, m, p, rsp.hdr_len)) {
            /* m follows the cluster's redirect (its reply is not its answer) */
            server__succeeded(srv);
            buf_consume(in, rsp.hdr_len);
            sconn_close_if_drained(s);
            continue;
        }
        int join_end = 0;
        if (m->flags & MSG_F_JKEY) {
            int j = join_match(s, m, p, &rsp);
            if (j < 0) {
                sconn_garbage(s, "server returned a key not asked for", p, rsp.hdr_len);
                return;
            }
            if (j == 0) {
                /* m's part of a joined get ended before this unit, which is
                 * left for the next member: m missed, or an error line ends
                 * the whole command and every member gets a copy. */
                if (rsp.flags & PROTO_SF_ERROR) {
                    msg_reply_bytes(m, p, rsp.hdr_len, 0, 0);
                    sconn_reply_done(s);
                } else {
                    sconn_join_done(s, m);
                }
                continue;
            }
            join_end = (m->flags & MSG_F_JOINED) != 0;  /* m's item: its reply ends after it */
        }
        int drop = (rsp.flags & PROTO_SF_SUPPRESS) ? 1 : 0;
        if (rsp.flags & PROTO_SF_ITEM)
            m->items++;
        if (rsp.flags & PROTO_SF_ERROR) {
            if (m->role == MSG_HELLO) {
                log_hexdump(LOG_ERR_, __FILE__, __LINE__, "server refused the connection hello",
                            p, rsp.hdr_len);
                if (s->db != 0) {
                    /* a database a client SELECTed that this server does not have (fewer
                     * than 16): its requests fail rather than reach another database; not
                     * the server's failure (no ejection) */
                    s->db_refused = 1;
                    sconn_close(s, "the server refused SELECT of the client's database", 0);
                    return;
                }
            } else if (m->role == MSG_OWN) {
                m->flags |= MSG_F_ERROR;    /* not acknowledged: its watcher is told so */
            } else {
                m->rerr = 1;                /* its client's failed_calls, errorstats */
            }
            if (srv->pool->cp->sentinel != NULL)
                sentinel_worker_error(srv, p, rsp.hdr_len);  /* -READONLY: ask the sentinels */
        }
        int big = rsp.body_len > SCONN_STREAM_MIN;
        msg_reply_bytes(m, p, rsp.hdr_len, big, drop);
        if (m->role < MSG_HELLO)   /* not the proxy's own AUTH/SELECT/probes */
            STATS_ADD(&srv->stats, response_bytes, rsp.hdr_len);
        buf_consume(in, rsp.hdr_len);
        if (rsp.body_len > 0) {
            s->rx = SCONN_RX_BODY;
            s->cur = m;
            s->body_left = rsp.body_len;
            s->body_drop = (uint8_t)drop;
            s->body_big = (uint8_t)big;
            s->body_final = join_end || (rsp.flags & PROTO_SF_FINAL) != 0;
            s->body_join_end = (uint8_t)join_end;
            if (big)
                s->conn.chunk = SCONN_READ_BODY;
            continue;
        }
        if (join_end)
            sconn_join_done(s, m);
        else if (rsp.flags & PROTO_SF_FINAL)
            sconn_reply_done(s);
    }
}

void sconn_flush(struct sconn *s)
{
    if (s->state != SCONN_CONNECTED)
        return;
    sconn_unlazy(s->server->w, s);  /* its waiting copies go with this write */
    join_sent(s);                       /* what is sent can no longer be joined */
    if (s->ctab != NULL)
        collapse_sent(s);
    int rc = conn_flush(&s->conn);
    if (rc < 0) {
        sconn_close(s, uv_strerror(rc), 1);
        return;
    }
    if (s->unsent_n > 0)
        sconn_inqueue(s, conn_output(&s->conn) == 0);
    if (s->pinned != NULL && s->pinned->ops->pin_writable != NULL)
        s->pinned->ops->pin_writable(s->pinned, s);
}

int sconn_hold(struct sconn *s, struct sconn_holder *h)
{
    if (s->held_by != NULL || s->state != SCONN_CONNECTED)
        return 0;
    s->held_by = h;
    conn_read_stop(&s->conn);   /* what the input holds already is still processed */
    return 1;
}

void sconn_release_hold(struct sconn *s)
{
    if (s->held_by == NULL)
        return;
    s->held_by = NULL;
    if (s->state != SCONN_CONNECTED)
        return;
    /* The wait was the client's: the server's time starts again now. */
    s->progress_ms = uv_now(&s->server->w->loop);
    int rc = conn_read_start(&s->conn);
    if (rc < 0)
        sconn_close(s, uv_strerror(rc), 1);
}

void sconn_close(struct sconn *s, const char *reason, int is_error)
{
    struct server *srv = s->server;
    struct worker *w = srv->w;

    if (s->state == SCONN_CLOSING)
        return;
    int was_connected = s->state == SCONN_CONNECTED;
    s->state = SCONN_CLOSING;
    if (s->slot != SCONN_PIN_SLOT && srv->conns[s->slot] == s)
        srv->conns[s->slot] = NULL;
    if (s->held_by != NULL) {
        struct sconn_holder *h = s->held_by;
        s->held_by = NULL;
        if (h->ops->hold_lost != NULL)
            h->ops->hold_lost(h, s);
    }
    struct sconn_holder *holder = s->pinned;
    if (holder != NULL) {
        queue_remove(&s->client_link);
        queue_remove(&s->pin_link);
        s->pinned = NULL;
    } else if (queue_linked(&s->pin_link)) {    /* an idle pinned connection */
        queue_remove(&s->pin_link);
        srv->nidle_pins--;
        STATS_ADD(&srv->stats, ready_pins, -1);
    }
    if (s->is_pin) {
        atomic_fetch_sub(&srv->health->pinned, 1);
        STATS_ADD(&srv->stats, pinned_connections, -1);
    }
    if (was_connected)
        STATS_ADD(&srv->stats, server_connections, -1);
    if (was_connected && tls_is(&s->conn))
        STATS_ADD(&srv->stats, tls_connections, -1);
    if (is_error)
        STATS_ADD(&srv->stats, server_err, 1);
    if (!srv->removed && (is_error || (!queue_empty(&s->sent) && !s->db_refused)))
        server_failed(srv, reason);
    if (!queue_empty(&s->sent))
        log_warn("server '%s' (%s): %s; failing %u in-flight request(s)", srv->label,
                 srv->addr.text, reason, s->inflight);
    sconn_unmark(w, s);
    sconn_inqueue(s, 1);
    while (!queue_empty(&s->sent)) {
        struct msg *m = sconn_pop(s);
        if (m->role >= MSG_HELLO || m->state == MSG_ZOMBIE) {
            m->state = MSG_DONE;
            msg_release(w, m);
            continue;
        }
        m->state = MSG_NEW;
        msg_fail(w, m, PROTO_ERR_SERVER, reason);
    }
    if (holder != NULL && holder->ops->pin_lost != NULL)
        holder->ops->pin_lost(holder, s);
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, sconn_on_close);
    if (s->resolving)
        uv_cancel((uv_req_t *)&s->gai);   /* its callback drops the last reference */
    conn_close(&s->conn, sconn_on_close);
}
