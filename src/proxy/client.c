/* Client connections: read, parse in place, answer in order, backpressure, memory and time limits, streamed bodies. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "lib/log.h"
#include "proxy/client.h"
#include "proxy/client_list.h"
#include "proxy/forward.h"
#include "proxy/introspect.h"
#include "proxy/mcbin_transport.h"
#include "proto/memcache_binary.h"
#include "proxy/msg.h"
#include "proxy/hub.h"
#include "proxy/snapshot.h"
#include "proxy/pubsub.h"
#include "state/registry.h"
#include "proxy/server.h"
#include "proxy/session.h"
#include "proxy/tracking.h"
#include "proxy/tls.h"
#include "proxy/worker.h"
#include "lib/util.h"

#define CLIENT_MAX_INFLIGHT 256            /* requests a client may have unanswered */
#define CLIENT_LINGER_MS    2000           /* a finished client's input read and dropped at most
                                              (and never past drain_timeout) */
#define CLIENT_READ_CHUNK   16384
#define CLIENT_MEM_STEP     (16u * 1024)   /* report memory use in steps of this much */
#define CLIENT_MEM_HOLD_MIN (64u * 1024)   /* over memory_limit, a client holding more is refused */
#define CLIENT_STREAM_AHEAD (1024u * 1024) /* streamed body bytes queued to the server at most */
#define CLIENT_HOLD_INPUT   (1024u * 1024) /* input read ahead of a held request at most */
#define CLIENT_STUCK_MS     1000           /* over memory_limit, a client that wrote nothing out
                                              this long while holding large replies is closed */
#define CLIENT_HOLD_MAX_MS  10000          /* ... and one that holds a shared server connection
                                              stopped (its other clients wait) this long */

static void client_process(struct client *c);

/* ------------------------------------------------------------------ memory */

static uint64_t client_memory_limit(const struct client *c)
{
    return c->w->snap->conf->global.memory_limit;
}

/* Reply bytes a client may have unread before it is paused (reloadable). */
static size_t client_output_limit(const struct client *c)
{
    return atomic_load_explicit(&c->w->hub->client_output_limit, memory_order_relaxed);
}

static int64_t proxy_memory(const struct client *c)
{
    return atomic_load_explicit(&c->w->hub->mem_used, memory_order_relaxed);
}

size_t client_held_memory(const struct client *c)
{
    return (size_t)c->nmsgs * sizeof(struct msg) + c->held_cost;
}

/* What the client makes the proxy hold, at what it costs (the buffers' capacity, not the
 * bytes in them; each queued message's struct): its connection's buffers, its messages
 * (their replies and request copies: msg_charge) and its subscriptions. */
static size_t client_mem_usage(const struct client *c)
{
    return c->conn.ibuf.cap + c->conn.obuf.cap + c->conn.wbuf.cap + client_held_memory(c) +
           (c->pubsub != NULL ? pubsub_memory(c) : 0);
}

/* What CLIENT LIST shows of c on any worker (struct client_pub): relaxed stores, from its
 * read and flush paths. */
void client_publish(struct client *c)
{
    struct client_pub *p = &c->pub;
    uint32_t f = 0, sub = 0, psub = 0, ssub = 0;
    const struct buf *in = &c->conn.ibuf;

    if (c->parser.flags & PROTO_PF_VARIANT)
        f |= PROTO_CL_VARIANT;
    if (c->parser.flags & PROTO_PF_ATOMIC)
        f |= PROTO_CL_MULTI;
    if (c->paused)
        f |= PROTO_CL_PAUSED;
    if (c->eof || c->closing)
        f |= PROTO_CL_CLOSING;
    if (c->nsessions != 0 && session_blocked(c))
        f |= PROTO_CL_BLOCKED;
    if (c->pubsub != NULL)
        pubsub_counts(c, &sub, &psub, &ssub);
    if ((c->parser.flags & PROTO_PF_SUBSCRIBED) || sub + psub + ssub > 0)
        f |= PROTO_CL_SUBSCRIBED;
    atomic_store_explicit(&p->flags, f, memory_order_relaxed);
    atomic_store_explicit(&p->sub, sub, memory_order_relaxed);
    atomic_store_explicit(&p->psub, psub, memory_order_relaxed);
    atomic_store_explicit(&p->ssub, ssub, memory_order_relaxed);
    atomic_store_explicit(&p->qbuf, buf_len(in), memory_order_relaxed);
    atomic_store_explicit(&p->qbuf_free, in->cap - buf_len(in), memory_order_relaxed);
    atomic_store_explicit(&p->rbs, in->cap, memory_order_relaxed);
    atomic_store_explicit(&p->obl, conn_output(&c->conn), memory_order_relaxed);
    atomic_store_explicit(&p->oll, c->nmsgs, memory_order_relaxed);
    atomic_store_explicit(&p->omem, c->held_bytes + conn_output(&c->conn), memory_order_relaxed);
    atomic_store_explicit(&p->tot, client_mem_usage(c), memory_order_relaxed);
}

/*
 * CLIENT LIST's line of c, kept current where it matters: a client in a transaction, a
 * session or a subscription, paused or closing (whose flags and counts change with its
 * requests), or one that just changed state, publishes at every sync; a plain client's
 * byte counts (qbuf, obl, omem, ...) are published by its worker's tick, once a second
 * (worker.c), and at accept: publishing them at every read and flush was a sixth of a
 * plain GET's instructions.
 */
#define CLIENT_PUB_BUSY (1u << 16)
static inline void client_publish_sync(struct client *c)
{
    uint32_t st = (c->parser.flags & (PROTO_PF_VARIANT | PROTO_PF_ATOMIC | PROTO_PF_SUBSCRIBED)) |
                  (c->pubsub != NULL || c->nsessions != 0 || c->paused || c->eof || c->closing
                       ? CLIENT_PUB_BUSY : 0);
    if (st == c->pub_state && !(st & ~(uint32_t)PROTO_PF_VARIANT))
        return;
    c->pub_state = st;
    client_publish(c);
}

/* Bring the proxy-wide count up to date with this client's use (in steps,
 * so the shared counter is touched rarely; `exact` on close). */
static inline void client_mem_sync(struct client *c, int exact)
{
    if (!exact)
        client_publish_sync(c);
    size_t now = exact ? 0 : client_mem_usage(c);
    int64_t delta = (int64_t)now - (int64_t)c->mem_reported;

    if (delta == 0 || (!exact && delta < (int64_t)CLIENT_MEM_STEP &&
                       delta > -(int64_t)CLIENT_MEM_STEP && now != 0))
        return;
    atomic_fetch_add_explicit(&c->w->hub->mem_used, delta, memory_order_relaxed);
    c->mem_reported = now;
}

/* Whether the proxy is over memory_limit with this client holding a large
 * part of it (then it is the one refused: small clients stay served). */
static int client_mem_over(struct client *c, size_t more)
{
    client_mem_sync(c, 0);
    return (uint64_t)proxy_memory(c) + more > client_memory_limit(c) &&
           client_mem_usage(c) + more >= CLIENT_MEM_HOLD_MIN;
}

int client_memory_over(struct client *c)
{
    return client_mem_over(c, 0);
}

/* ------------------------------------------------------------------ output */

int client_write_bytes(struct client *c, const char *p, size_t n)
{
    if (buf_append(&c->conn.obuf, p, n) < 0) {
        c->closing = 1;
        return -ENOMEM;
    }
    client_mark(c->w, c);
    return 0;
}

static size_t client_pending_bytes(const struct client *c)
{
    return conn_output(&c->conn) + c->held_bytes;
}

/*
 * A large value streaming from s to a client that reads it slowly is held back at the
 * server (its connection not read) once the client's output passes half its limit, when
 * that costs nobody else (s is the client's own pinned connection), or when buffering
 * it does cost: the proxy is past half its memory_limit. Below that a shared connection
 * goes on (other clients' replies behind the value are not delayed) and the value is
 * buffered, as nutcracker buffers it.
 */
void client_stream_check(struct client *c, struct sconn *s)
{
    if (c->holding != NULL || s == NULL ||
        conn_output(&c->conn) <= client_output_limit(c) / 2)
        return;
    client_mem_sync(c, 0);
    if (!s->is_pin && (uint64_t)proxy_memory(c) <= client_memory_limit(c) / 2)
        return;
    if (sconn_hold(s, &c->holder))
        c->holding = s;
}

static void client_hold_lost(struct sconn_holder *h, struct sconn *s)
{
    struct client *c = CONN_OWNER(h, struct client, holder);

    if (c->holding == s)
        c->holding = NULL;
}

/* The server connection c's output stopped reads again once most of it is written (or
 * with `now`, as c goes). */
static void client_hold_check(struct client *c, int now)
{
    struct sconn *s = c->holding;

    if (s == NULL || (!now && conn_output(&c->conn) > client_output_limit(c) / 4))
        return;
    c->holding = NULL;
    sconn_release_hold(s);
}

static void client_on_close(uv_handle_t *h)
{
    struct client *c = CONN_OWNER(h->data, struct client, conn);

    users_close(c);
    wpool_unref(c->pool);
    conn_release(&c->conn);
    proto_parser_free(&c->parser);
    free(c);
}

/* Drop every message queued for the client: ones still owed a reply by a
 * server stay there as orphans. */
static void client_drop_msgs(struct client *c)
{
    struct qnode *n;

    while ((n = queue_first(&c->msgs)) != NULL) {
        struct msg *m = QUEUE_DATA(n, struct msg, cq);
        queue_remove(n);
        m->client = NULL;
        msg_release(c->w, m);
    }
    c->nmsgs = 0;
    c->held_cost = 0;       /* what the dropped messages' children hold is nobody's now */
}

void client_close(struct client *c)
{
    struct worker *w = c->w;
    struct qnode *n;

    if (conn_closing(&c->conn))
        return;
    c->closing = 1;
    client_unmark(w, c);
    c->stream = NULL;
    c->stream_msg = NULL;
    /* A pinned connection is closed with the client: a command blocked there
     * must not complete for nobody. */
    session_client_closed(c);
    client_hold_check(c, 1);        /* the rest of the value is read for nobody */
    while ((n = queue_first(&c->holder.pins)) != NULL)
        sconn_unpin(QUEUE_DATA(n, struct sconn, client_link), 0);
    pubsub_free(c);
    tracking_client_gone(c);
    client_drop_msgs(c);
    c->held_bytes = 0;
    c->held_cost = 0;
    uv_mutex_lock(&w->clients_mu);         /* CLIENT LIST on another worker reads the list */
    queue_remove(&c->link);
    uv_mutex_unlock(&w->clients_mu);
    atomic_fetch_sub(&c->pool->view.shared->clients, 1);
    STATS_ADD(&c->pool->stats, client_connections, -1);
    if (tls_is(&c->conn))
        STATS_ADD(&c->pool->stats, tls_connections, -1);
    w->curr_connections--;
    client_mem_sync(c, 1);
    conn_close(&c->conn, client_on_close);
}

/* Whether c sent what the proxy has not read or not parsed (a reason to linger). */
static int client_unread(struct client *c)
{
    int n = 0;
    return buf_len(&c->conn.ibuf) > 0 ||
           (c->conn.fd >= 0 && (ioctl(c->conn.fd, FIONREAD, &n) < 0 || n > 0));
}

/*
 * The proxy ends a connection with everything answered (a stop, an upgrade, a pool a
 * reload removed): a FIN after the last reply, then whatever the client still sends is
 * read and dropped until it closes too, or for CLIENT_LINGER_MS. Closing at once with its
 * unsent requests unread in our buffer would reset the connection: its next send fails
 * and replies it has not read yet may be lost, so it cannot tell what was answered. With
 * the FIN it reads every reply, then the end: whatever it sent after them was not read,
 * and goes again on a new connection. A client with nothing unread is closed at once (a
 * close with nothing unread is a FIN too): an idle pooled connection does not hold up a
 * stop. (TLS ends with its close_notify instead.)
 */
static void client_linger(struct client *c)
{
    /* The FIN first, whatever follows: should the client's next requests arrive between
     * a look at the socket and the close, the reset they cause comes after the FIN, and
     * the client reads its replies and the end all the same. */
    if (c->conn.fd < 0 || shutdown(c->conn.fd, SHUT_WR) < 0 || !client_unread(c)) {
        client_close(c);
        return;
    }
    c->lingering = 1;
    c->linger_until = uv_now(&c->w->loop) + CLIENT_LINGER_MS;
    buf_consume(&c->conn.ibuf, buf_len(&c->conn.ibuf));    /* never to be parsed */
    if (conn_read_start(&c->conn) < 0)
        client_close(c);
}

/* Close when everything owed has been answered and written. */
static void client_maybe_finish(struct client *c)
{
    if ((c->eof || c->closing) && queue_empty(&c->msgs) && buf_len(&c->conn.obuf) == 0 &&
        !c->conn.writing) {
        if (c->finishing && !c->closing && !c->lingering && !tls_is(&c->conn))
            client_linger(c);
        else if (!c->lingering)
            client_close(c);
    }
}

void client_finish(struct client *c)
{
    c->finishing = !c->eof;     /* a client that ended first needs no lingering close */
    c->eof = 1;
    conn_read_stop(&c->conn);
    client_maybe_finish(c);
}

int client_draining(const struct client *c, uint64_t now)
{
    if (c->lingering)
        return now < c->linger_until;
    return !queue_empty(&c->msgs) || buf_len(&c->conn.obuf) > 0 || c->conn.writing;
}

static void client_read_start(struct client *c)
{
    if (conn_read_start(&c->conn) < 0)
        client_close(c);
}

/* Whether the client must not be read: replies it has not read, requests
 * it has outstanding (whose replies are still to come), and its share of
 * the proxy's memory when that is over the limit, are bounded. */
static int client_over_limits(struct client *c)
{
    size_t pending = client_pending_bytes(c);
    if (pending > client_output_limit(c) || c->nmsgs >= CLIENT_MAX_INFLIGHT)
        return 1;
    return pending >= CLIENT_MEM_HOLD_MIN && (uint64_t)proxy_memory(c) > client_memory_limit(c);
}

static void client_pause(struct client *c)
{
    if (c->paused)
        return;
    c->paused = 1;
    STATS_ADD(&c->pool->stats, client_paused, 1);
    conn_read_stop(&c->conn);
}

/* A client paused for backpressure reads again once its queued reply bytes
 * fall under half the limit (and, streaming, once the server took the body
 * bytes queued for it); then the input it already holds is parsed. */
static void client_check_resume(struct client *c)
{
    if (!c->paused || c->closing || c->eof)
        return;
    if (client_pending_bytes(c) >= client_output_limit(c) / 2 ||
        c->nmsgs > CLIENT_MAX_INFLIGHT / 2)
        return;
    if (c->in == CLIENT_IN_STREAM && c->stream != NULL &&
        conn_output(&c->stream->conn) > CLIENT_STREAM_AHEAD / 2)
        return;
    if (c->in == CLIENT_IN_HOLD)
        return;                 /* nothing is parsed until the streamed request is answered */
    c->paused = 0;
    client_read_start(c);
    client_process(c);
}

static void client_on_written(struct conn *conn, int status)
{
    struct client *c = CONN_OWNER(conn, struct client, conn);

    if (status < 0) {
        STATS_ADD(&c->pool->stats, client_err, 1);
        client_close(c);
        return;
    }
    c->active_ms = uv_now(&c->w->loop);
    c->written_ms = c->active_ms;
    client_hold_check(c, 0);
    if (buf_len(&conn->obuf) > 0 || conn_transport_output(conn) > 0) {
        client_flush(c);
        return;
    }
    client_check_resume(c);
    client_maybe_finish(c);
}

/* When c's output last moved: a write completed or began, or the bytes libuv still has
 * to write for it went down (a large write goes out in parts). */
static uint64_t client_written_ms(struct client *c, uint64_t now)
{
    size_t q = c->conn.writing ? uv_stream_get_write_queue_size(&c->conn.h.stream) : 0;
    if (q != c->write_queue_seen) {
        c->write_queue_seen = q;
        c->written_ms = now;
    }
    return c->written_ms;
}

/*
 * A client that holds large unread replies while the proxy is over memory_limit, and
 * whose output has not moved for CLIENT_STUCK_MS: it is why the proxy is out of memory,
 * and it is closed (1). A client that reads, however slowly, is not: a large value
 * streaming to it holds its server connection instead (client_stream_check), and what it
 * holds otherwise is bounded by client_output_limit and its requests in flight.
 */

static int client_stuck_over_memory(struct client *c, uint64_t now)
{
    if (!c->conn.writing || client_pending_bytes(c) <= client_output_limit(c) ||
        (uint64_t)proxy_memory(c) <= client_memory_limit(c) ||
        now - client_written_ms(c, now) < CLIENT_STUCK_MS)
        return 0;
    STATS_ADD(&c->pool->stats, memory_refused, 1);
    log_warn("pool '%s': client %s closed: %zu reply bytes unread, nothing written for %u ms, "
             "and memory_limit reached", c->pool->cp->name, c->pc.peer, client_pending_bytes(c),
             (unsigned)(now - c->written_ms));
    client_close(c);
    return 1;
}

void client_flush(struct client *c)
{
    if (conn_closing(&c->conn))
        return;
    int was_writing = c->conn.writing;
    if (conn_flush(&c->conn) < 0) {
        STATS_ADD(&c->pool->stats, client_err, 1);
        client_close(c);
        return;
    }
    client_mem_sync(c, 0);
    client_hold_check(c, 0);
    if (c->conn.writing) {
        /* Output left over for the event loop (written_ms matters only then: the
         * common reply went out whole, and costs no clock read). */
        uint64_t now = uv_now(&c->w->loop);
        if (!was_writing)
            c->written_ms = now;                /* its output starts going out now */
        (void)client_stuck_over_memory(c, now);
        return;
    }
    client_check_resume(c);
    client_maybe_finish(c);
}

/* Deliver every completed message at the front of the queue, in order. */
void client_advance(struct client *c)
{
    struct worker *w = c->w;
    struct qnode *n;

    while ((n = queue_first(&c->msgs)) != NULL) {
        struct msg *m = QUEUE_DATA(n, struct msg, cq);
        if (m->state != MSG_DONE && m->state != MSG_ZOMBIE)
            break;
        if (__builtin_expect(c->cu.fl & USERS_F_REPLY, 0))
            users_reply(c, m);
        introspect_done(c, m);      /* commandstats, SLOWLOG, the request log */
        size_t len = buf_len(&m->rsp);
        if (len > 0) {
            c->held_bytes -= RL_MIN(c->held_bytes, len);
            if (buf_len(&c->conn.obuf) == 0 && !(m->flags & MSG_F_STREAMED))
                buf_swap(&c->conn.obuf, &m->rsp);     /* hand over, no copy */
            else if (buf_append(&c->conn.obuf, buf_rptr(&m->rsp), len) < 0)
                c->closing = 1;
            client_mark(w, c);
        }
        if (m->charged != 0) {      /* msg_uncharge, inline: its payer is c (a request);
                                       one delivered as it was answered was never charged */
            c->held_cost -= RL_MIN(c->held_cost, m->charged);
            m->charged = 0;
        }
        queue_remove(n);
        c->nmsgs--;
        m->client = NULL;
        if (m->flags & MSG_F_CLOSE) {
            c->eof = 1;
            c->closing = 1;
        }
        if (m->state == MSG_DONE && m->frags == NULL)
            msg_put(w, m);          /* held by nothing else: the common case */
        else
            msg_release(w, m);
        if (c->closing)
            break;
    }
    if (queue_empty(&c->msgs))
        c->held_cost = 0;           /* nothing is held: no charge can be left over */
    if (c->paused)
        client_mark(w, c);   /* the flush decides whether to read again */
    if (c->closing) {
        client_drop_msgs(c);        /* what is queued behind a close */
        conn_read_stop(&c->conn);
        client_mark(w, c);
    }
}

/* ------------------------------------------------------------------ streamed bodies */

/* The streamed body is whole: the request's timeout starts, and nothing
 * more is parsed until it is answered. */
static void client_stream_whole(struct client *c)
{
    c->in = CLIENT_IN_HOLD;
    if (c->stream_msg != NULL && c->stream_msg->sconn == c->stream)
        sconn_deadline(c->stream, c->stream_msg);
}

/* Copy what the input holds of a streaming body to its server. */
static void client_stream_copy(struct client *c)
{
    struct buf *in = &c->conn.ibuf;
    size_t n = (size_t)RL_MIN((uint64_t)buf_len(in), c->stream_left);

    if (n > 0) {
        if (buf_append(&c->stream->conn.obuf, buf_rptr(in), n) < 0) {
            c->closing = 1;
            return;
        }
        STATS_ADD(&c->stream->server->stats, request_bytes, n);
        buf_consume(in, n);
        c->stream_left -= n;
        sconn_mark(c->w, c->stream);
    }
    if (c->stream_left == 0)
        client_stream_whole(c);
    else if (conn_output(&c->stream->conn) > CLIENT_STREAM_AHEAD)
        client_pause(c);            /* the server is slower than the client */
}

static void client_pin_idle(struct sconn_holder *h, struct sconn *s)
{
    struct client *c = CONN_OWNER(h, struct client, holder);

    if (c->pubsub != NULL && pubsub_pin_idle(c, s))
        return;                         /* a subscription connection: nothing waits on it */
    if (c->stream != s) {
        if (session_pin_idle(c, s))     /* a session's hold is over */
            goto parse;
        return;
    }
    if (c->in != CLIENT_IN_HOLD)
        return;
    c->stream = NULL;
    c->stream_msg = NULL;
    c->in = CLIENT_IN_PARSE;
    sconn_unpin(s, 1);
parse:
    if (c->paused) {
        client_check_resume(c);
        return;
    }
    client_process(c);
}

static void client_pin_writable(struct sconn_holder *h, struct sconn *s)
{
    struct client *c = CONN_OWNER(h, struct client, holder);

    if (c->stream == s && c->in == CLIENT_IN_STREAM)
        client_check_resume(c);
}

static void client_pin_lost(struct sconn_holder *h, struct sconn *s)
{
    struct client *c = CONN_OWNER(h, struct client, holder);

    if (c->pubsub != NULL && pubsub_pin_lost(c, s))
        return;
    if (c->stream != s) {
        /* A session's: its requests were answered with errors; what the client
         * holds in its input is parsed again from the flush (paused until). */
        if (session_pin_lost(c, s) && !c->closing) {
            client_pause(c);
            client_mark(c->w, c);
        }
        return;
    }
    /* Its request was answered with the error; the rest of the body is dropped. */
    if (c->in == CLIENT_IN_STREAM) {
        c->in = CLIENT_IN_SWALLOW;
        c->swallow = c->stream_left;
    } else {
        c->in = CLIENT_IN_PARSE;
    }
    c->stream = NULL;
    c->stream_msg = NULL;
    c->stream_left = 0;
    client_mark(c->w, c);    /* its flush resumes the client */
}

static void client_pin_push(struct sconn_holder *h, struct sconn *s, const char *p, size_t n)
{
    pubsub_message(s, p, n);
}

static int client_pin_dropped(struct sconn_holder *h, struct sconn *s,
                              const struct proto_name *name)
{
    return pubsub_dropped(s, name);
}

/* What the client's pinned server connections tell it (server.h). */
static const struct sconn_holder_ops client_holder_ops = {
    .pin_idle = client_pin_idle,
    .pin_writable = client_pin_writable,
    .pin_lost = client_pin_lost,
    .hold_lost = client_hold_lost,
    .push = client_pin_push,
    .dropped = client_pin_dropped,
};

/*
 * A request with a large body that is not all here: stream it when it goes
 * to one server, after everything the client asked before it is answered
 * (so the backend sees the client's requests in order). Returns 1 when the
 * request was taken (streaming, or answered with its body to drop), 0 to
 * buffer it as usual, -1 to wait for the client's earlier replies.
 */
static int client_try_stream(struct client *c, const struct proto_req *req, const char *p,
                             size_t len)
{
    if (c->nmsgs > 0)
        return -1;
    uint64_t avail = RL_MIN((uint64_t)(len - req->hdr_len), req->body_len);
    int answered;
    struct msg *m = forward_stream(c, req, p, avail, &answered);
    if (m == NULL && !answered)
        return 0;
    if (m == NULL) {
        buf_consume(&c->conn.ibuf, req->hdr_len);
        c->in = CLIENT_IN_SWALLOW;
        c->swallow = req->body_len;
        return 1;
    }
    buf_consume(&c->conn.ibuf, req->hdr_len + (size_t)avail);
    c->stream = m->sconn;
    c->stream_msg = m;
    c->stream_left = req->body_len - avail;
    c->in = CLIENT_IN_STREAM;
    if (c->stream_left == 0)
        client_stream_whole(c);
    return 1;
}

/* ------------------------------------------------------------------ dispatch */

#define CLIENT_WAIT 1       /* client_request: not now */

/*
 * One complete request of c, to whoever takes it: a session's (session.c), a
 * subscription (pubsub.c), else the request path (forward.c). Each of those calls
 * down only; the choice is made here, above them. 0 when it was taken; CLIENT_WAIT
 * when a session says it must wait until c's earlier requests are answered: nothing
 * was consumed or queued, the caller reads it again then.
 */
static inline int client_request(struct client *c, const struct proto_req *req,
                                 const char *buf)
{
    c->nreq++;
    atomic_store_explicit(&c->pub.cmd, req->cmd, memory_order_relaxed);
    atomic_store_explicit(&c->pub.last_ms, uv_now(&c->w->loop), memory_order_relaxed);
    if (req->sess != 0 || c->nsessions != 0) {
        enum session_verdict v = session_request(c, req, buf);
        if (v != SESSION_PASS)
            return v == SESSION_WAIT ? CLIENT_WAIT : 0;
    }
    if (req->kind == PROTO_REQ_SUBSCRIBE) {
        struct msg *m = forward_msg(c, req);
        if (m == NULL)
            c->closing = 1;
        else
            pubsub_request(c, m, req, buf);
        return 0;
    }
    forward_request(c, req, buf);
    return 0;
}

/* ------------------------------------------------------------------ parsing */

/*
 * End the client's input: a last reply (the protocol's error `code` with
 * `why`, or the parser's own error text `err`), delivered after what it
 * asked before, then the connection closes; nothing more is read.
 */
static void client_last_reply(struct client *c, enum proto_err code, const char *why,
                              const char *err, size_t err_len)
{
    struct msg *m = msg_get(c->w);

    if (m != NULL) {
        m->role = MSG_REQUEST;
        m->cmd = UINT16_MAX;            /* no command's (introspect.c: errorstats only) */
        m->start_us = worker_now_us(c->w);
        m->client = c;
        m->flags |= MSG_F_CLOSE | MSG_F_ERROR;
        queue_insert_tail(&c->msgs, &m->cq);
        c->nmsgs++;
        if (why != NULL)
            c->pool->ops->error_reply(code, why, &m->rsp);
        else if (err != NULL)
            buf_append(&m->rsp, err, err_len);
        c->held_bytes += buf_len(&m->rsp);
        msg_complete(c->w, m);
    }
    c->eof = 1;
    conn_read_stop(&c->conn);
    buf_consume(&c->conn.ibuf, buf_len(&c->conn.ibuf));
    client_advance(c);
}

/* A client over memory_limit: an error, then closed. */
static void client_refuse(struct client *c, const char *why)
{
    STATS_ADD(&c->pool->stats, memory_refused, 1);
    log_warn("pool '%s': client %s refused: %s", c->pool->cp->name, c->pc.peer, why);
    client_last_reply(c, PROTO_ERR_SERVER, why, NULL, 0);
}

/* A request the parser could not resynchronise after: its reply, then close. */
static void client_fatal(struct client *c, const struct proto_req *req)
{
    STATS_ADD(&c->pool->stats, client_err, 1);
    if (req->why != NULL)       /* e.g. memcached binary protocol: closed without a reply */
        log_info("pool '%s': client %s closed: %s", c->pool->cp->name, c->pc.peer, req->why);
    client_last_reply(c, PROTO_ERR_SERVER, NULL, req->err, req->err_len);
}

/* Parse and dispatch every complete request in the input buffer. */
static void client_process(struct client *c)
{
    const struct proto_ops *ops = c->pool->ops;
    struct buf *in = &c->conn.ibuf;
    uint32_t threshold = c->w->snap->conf->global.stream_threshold;

    while (!c->closing && !c->paused) {
        size_t len = buf_len(in);
        if (c->in == CLIENT_IN_SWALLOW) {
            size_t n = (size_t)RL_MIN((uint64_t)len, c->swallow);
            buf_consume(in, n);
            c->swallow -= n;
            if (c->swallow > 0)
                break;
            c->in = CLIENT_IN_PARSE;
            continue;
        }
        if (c->in == CLIENT_IN_STREAM) {
            if (len == 0)
                break;
            client_stream_copy(c);
            continue;
        }
        if (c->in == CLIENT_IN_HOLD) {
            if (len >= CLIENT_HOLD_INPUT)
                client_pause(c);    /* read on once the held request is answered */
            break;
        }
        if (len == 0 || len < c->need)
            break;
        if (client_over_limits(c)) {
            client_pause(c);
            break;
        }
        struct proto_req req;
        const char *p = buf_rptr(in);
        int rc = ops->parse_req(&c->parser, p, len, &req);
        if (rc == 0) {
            if (c->partial_ms == 0)
                c->partial_ms = uv_now(&c->w->loop);
            if (len >= CLIENT_MEM_HOLD_MIN && client_mem_over(c, 0))
                client_refuse(c, "memory_limit reached");
            break;
        }
        if (rc < 0) {
            client_fatal(c, &req);
            break;
        }
        /* users (users.c): one test for everyone else; a namespaced client's request is
         * checked once rewritten, below */
        if (__builtin_expect(c->cu.fl != 0, 0) && !(c->cu.fl & USERS_F_NS))
            users_check(c, &req, p);
        if (req.body_len > 0 && req.kind != PROTO_REQ_ERROR) {
            /* A request is forwarded whole (header and body in one piece, so
             * no other client's request can land inside it) or, when its body
             * is large, streamed on a connection of its own. */
            uint64_t total = (uint64_t)req.hdr_len + req.body_len;
            if ((uint64_t)len < total) {
                if (req.body_len >= threshold && !(c->cu.fl & USERS_F_NS)) {
                    int s = client_try_stream(c, &req, p, len);
                    if (s > 0) {
                        c->need = 0;
                        c->partial_ms = 0;
                        continue;
                    }
                    if (s < 0) {
                        client_pause(c);    /* resumed when its replies are in */
                        break;
                    }
                }
                if (total > SIZE_MAX / 2 || client_mem_over(c, (size_t)(total - len))) {
                    client_refuse(c, "memory_limit reached");
                    break;
                }
                if (buf_reserve(in, (size_t)total - len) < 0) {
                    c->closing = 1;
                    break;
                }
                c->need = (size_t)total;
                c->partial_ms = 0;          /* the header is whole; the body may take its time */
                break;
            }
        }
        c->need = 0;
        c->partial_ms = 0;
        uint32_t hdr_len = req.hdr_len;
        uint64_t body_len = req.body_len;
        int refused = req.kind == PROTO_REQ_ERROR;
        const char *rp = p;
        if (__builtin_expect(c->cu.fl & USERS_F_NS, 0) && !refused)
            rp = users_namespace(c, &req, p);   /* the request is whole here */
        if (client_request(c, &req, rp) == CLIENT_WAIT) {
            client_pause(c);        /* read again once its earlier requests are answered */
            break;
        }
        if (refused && body_len > 0) {
            buf_consume(in, hdr_len);
            c->in = CLIENT_IN_SWALLOW;
            c->swallow = body_len;
        } else {
            buf_consume(in, hdr_len + (size_t)body_len);
        }
        if (req.flags & PROTO_RF_CLOSE) {
            c->eof = 1;
            conn_read_stop(&c->conn);
            break;
        }
    }
    if (buf_len(in) == 0) {
        c->partial_ms = 0;
        if (in->cap > CONN_BUF_KEEP)
            buf_free(in);
    }
    client_mem_sync(c, 0);
    if (c->closing)
        client_advance(c);
    client_maybe_finish(c);
}

/* ------------------------------------------------------------------ reading */

/* A TLS client's handshake ended (from inside the transport's decode). */
static void client_on_handshake(struct conn *conn, int status)
{
    struct client *c = CONN_OWNER(conn, struct client, conn);

    if (status == 0) {
        TLS_COUNT(&c->pool->stats, TLS_FAIL_NONE, tls_resumed(conn));
        client_mark(c->w, c);        /* session tickets to send */
    }
    /* a failure is counted by the read error that follows */
}

/* A TLS client whose handshake failed or did not finish: counted, logged,
 * closed (with the transport's alert, if it has one to send). */
static void client_tls_failed(struct client *c, enum tls_fail why)
{
    const char *detail = "";

    if (why != TLS_FAIL_CLOSED)
        tls_failure(&c->conn, NULL, &detail);
    TLS_COUNT(&c->pool->stats, why, 0);
    log_info("pool '%s': client %s: %s%s%s", c->pool->cp->name, c->pc.peer, tls_fail_text(why),
             detail[0] ? ": " : "", detail);
    client_close(c);
}

/* memcached 1.6's detection, once per connection: a client of a memcached pool whose
 * first byte is the binary request magic speaks the binary protocol, through the
 * translating transport (mcbin_transport.h). 0, or -1 when c was closed. */
static int client_sniff(struct client *c)
{
    c->sniffed = 1;
    if (c->pool->ops != &proto_memcache_ops || c->conn.tp != &transport_plain ||
        !mcbin_detect(buf_rptr(&c->conn.ibuf), buf_len(&c->conn.ibuf)))
        return 0;
    if (mcbin_transport_attach(&c->conn) < 0) {
        STATS_ADD(&c->pool->stats, client_err, 1);
        client_close(c);
        return -1;
    }
    return 0;
}

/* A binary frame whose header is not whole (held by the transport, not in the input):
 * client_header_timeout counts from now, as for a text request's partial line. */
static inline void client_partial_frame(struct client *c)
{
    if (c->conn.tp == &transport_mcbin && c->partial_ms == 0 && !c->closing &&
        mcbin_transport_partial(&c->conn) > 0)
        c->partial_ms = uv_now(&c->w->loop);
}

static void client_on_read(struct conn *conn, ssize_t nread)
{
    struct client *c = CONN_OWNER(conn, struct client, conn);

    if (c->lingering) {         /* sent after its last reply: dropped (client_linger) */
        if (nread < 0)
            client_close(c);
        else
            buf_consume(&c->conn.ibuf, buf_len(&c->conn.ibuf));
        return;
    }
    if (nread > 0) {
        c->active_ms = uv_now(&c->w->loop);
        if (!c->sniffed && client_sniff(c) < 0)
            return;
        client_process(c);
        client_partial_frame(c);
        if (conn_transport_output(conn) > 0 && !conn_closing(conn))
            client_mark(c->w, c);    /* e.g. a TLS key update's answer */
        return;
    }
    if (nread == 0) {
        client_partial_frame(c);
        if (conn_output(conn) > 0)
            client_mark(c->w, c);
        return;
    }
    if (conn_handshaking(conn)) {
        client_tls_failed(c, nread == UV_EOF ? TLS_FAIL_CLOSED : tls_failure(conn, NULL, NULL));
        return;
    }
    if (nread == UV_EOF) {
        STATS_ADD(&c->pool->stats, client_eof, 1);
        c->eof = 1;             /* answer what was asked, then close */
        if (c->in == CLIENT_IN_STREAM || session_blocked(c)) {
            /* half a body, or a blocking command whose answer nobody will read:
             * the pinned connection goes with the client, now */
            client_close(c);
            return;
        }
        client_maybe_finish(c);
        return;
    }
    STATS_ADD(&c->pool->stats, client_err, 1);
    client_close(c);
}

static const struct conn_events client_events = {
    .on_read = client_on_read,
    .on_written = client_on_written,
    .on_handshake = client_on_handshake,
};

/* ------------------------------------------------------------------ timeouts */

void client_check_timeouts(struct client *c, uint64_t now_ms)
{
    const struct conf_global *g = &c->w->snap->conf->global;

    if (c->closing)
        return;
    if (tls_expired(&c->conn, now_ms)) {
        client_tls_failed(c, TLS_FAIL_TIMEOUT);
        return;
    }
    if (g->client_header_timeout_s > 0 && c->partial_ms != 0 && c->in == CLIENT_IN_PARSE &&
        now_ms - c->partial_ms >= (uint64_t)g->client_header_timeout_s * 1000u) {
        STATS_ADD(&c->pool->stats, client_timeouts, 1);
        log_info("pool '%s': client %s closed: a request's header was not whole after %d s",
                 c->pool->cp->name, c->pc.peer, g->client_header_timeout_s);
        client_close(c);
        return;
    }
    client_mem_sync(c, 0);
    if (client_stuck_over_memory(c, now_ms))
        return;
    if (c->holding != NULL && !c->holding->is_pin && c->conn.writing &&
        now_ms - client_written_ms(c, now_ms) >= CLIENT_HOLD_MAX_MS) {
        /* Its value is cut, but the other clients whose replies wait behind it on that
         * connection are not held hostage by a client that stopped reading. */
        STATS_ADD(&c->pool->stats, client_timeouts, 1);
        log_warn("pool '%s': client %s closed: it read nothing for %u ms while a server "
                 "connection waited for it", c->pool->cp->name, c->pc.peer,
                 (unsigned)(now_ms - c->written_ms));
        client_close(c);
        return;
    }
    if (g->client_timeout_s > 0 && queue_empty(&c->msgs) && c->in == CLIENT_IN_PARSE &&
        !(c->parser.flags & PROTO_PF_SUBSCRIBED) &&     /* as Redis: subscribers wait */
        now_ms - c->active_ms >= (uint64_t)g->client_timeout_s * 1000u) {
        STATS_ADD(&c->pool->stats, client_timeouts, 1);
        client_close(c);
    }
}

/* ------------------------------------------------------------------ accept and reload */

static uint64_t pool_epoch(const struct wpool *pool)
{
    return pool->view.ring != NULL ? pool->view.ring->epoch : 0;
}

/* What the parser takes from the pool's configuration: at accept and after a
 * reload (client_refresh), so a new per-pool setting is set in one place. */
static void client_parser_conf(struct client *c)
{
    const struct conf_pool *cp = c->pool->cp;

    c->parser.item_size_max = cp->item_size_max;
    c->parser.body_min = c->w->snap->conf->global.stream_threshold;
    c->parser.epoch = pool_epoch(c->pool);
    c->parser.flags &= ~(uint32_t)(PROTO_PF_ALLOW_FLUSH | PROTO_PF_DENY_SCRIPTS | PROTO_PF_CLUSTER);
    if (cp->allow_flush)
        c->parser.flags |= PROTO_PF_ALLOW_FLUSH;
    if (!cp->scripts)
        c->parser.flags |= PROTO_PF_DENY_SCRIPTS;
    if (cp->redis_cluster)
        c->parser.flags |= PROTO_PF_CLUSTER;
}

/*
 * A reload made the pool's listener refuse what this client is (plaintext on a pool now
 * TLS-only, or a certificate client_auth no longer admits): as a new connection would be,
 * it is closed, after the replies to what it had already asked (its bytes not yet parsed
 * are dropped, nothing more is read). A half-streamed body or a blocking command closes
 * it at once. Called while the worker walks its clients: closed at the next flush.
 */
static void client_revoke(struct client *c, const char *why)
{
    STATS_ADD(&c->pool->stats, tls_reload_closed, 1);
    log_info("pool '%s': client %s closed by the reload: %s", c->pool->cp->name, c->pc.peer,
             why);
    c->eof = 1;
    conn_read_stop(&c->conn);
    buf_consume(&c->conn.ibuf, buf_len(&c->conn.ibuf));
    if (c->in == CLIENT_IN_STREAM || session_blocked(c)) {
        c->closing = 1;
        client_drop_msgs(c);
    }
    client_mark(c->w, c);
}

void client_refresh(struct client *c)
{
    const char *why = NULL;
    const struct conf_pool *cp = c->pool->cp;
    uint32_t was_cluster = c->parser.flags & PROTO_PF_CLUSTER;
    int had = c->pc.auth != NULL;
    int changed = (c->pc.auth == NULL) != (cp->redis_auth == NULL) ||
                  (had && strcmp(c->pc.auth, cp->redis_auth) != 0);

    client_parser_conf(c);
    c->pc.pool_db = cp->redis_db;       /* under the worker's mu, which CLIENT LIST holds */
    if (!c->pc.selected || c->pc.db == cp->redis_db || cp->redis_cluster) {
        c->pc.db = cp->redis_db;        /* a database SELECT chose stays the client's */
        c->pc.selected = 0;
    }
    /* A password added or changed makes connected clients authenticate (again);
     * a password removed lets them in. */
    c->pc.auth = cp->redis_auth;
    if (changed) {
        c->pc.authed = cp->redis_auth == NULL;
        if (c->pc.authed)
            c->parser.flags |= PROTO_PF_AUTHED;
        else
            c->parser.flags &= ~(uint32_t)PROTO_PF_AUTHED;
    }
    int kind_changed = (c->parser.flags & PROTO_PF_CLUSTER) != was_cluster;
    pubsub_refresh(c, kind_changed);
    session_refresh(c, kind_changed);
    users_refresh(c);
    if (!c->eof && !c->closing && !tls_client_admitted(&c->conn, c->pool->tls, &why))
        client_revoke(c, why);
}

/* "ip:port" of a TCP peer into out. */
static void client_peer_name(struct client *c, char *out, size_t len)
{
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    char ip[64] = "?";
    int port = 0;

    if (uv_tcp_getpeername(&c->conn.h.tcp, (struct sockaddr *)&ss, &sl) != 0)
        return;
    if (ss.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    snprintf(out, len, "%s:%d", ip, port);
}

/* The address the client connected to (a cluster pool's CLUSTER SLOTS names it). */
static int client_local_addr(void *ctx, char *out, size_t len)
{
    struct client *c = ctx;
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    char ip[64];

    if (c->conn.is_unix || uv_tcp_getsockname(&c->conn.h.tcp, (struct sockaddr *)&ss, &sl) != 0)
        return -1;
    if (ss.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
        snprintf(out, len, "%s:%d", ip, ntohs(((struct sockaddr_in *)&ss)->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
        snprintf(out, len, "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    } else {
        return -1;
    }
    return 0;
}

/* pc.guard: what CLIENT LIST reads of c on other workers changes under this lock. */
static void client_guard(struct proto_client *pc, int locked)
{
    struct client *c = CONN_OWNER(pc, struct client, pc);
    if (locked)
        uv_mutex_lock(&c->w->clients_mu);
    else
        uv_mutex_unlock(&c->w->clients_mu);
}

void client_accept(struct listener *l)
{
    struct worker *w = l->w;
    struct wpool *pool = l->pool;
    struct client *c = calloc(1, sizeof(*c));
    size_t chunk = w->hub->buf_size ? w->hub->buf_size : CLIENT_READ_CHUNK;

    if (c == NULL) {
        log_error("out of memory accepting a client on pool '%s'", pool->cp->name);
        return;
    }
    if (conn_init(&c->conn, &w->loop, l->is_unix, &client_events, &transport_plain,
                  (uint32_t)chunk) < 0) {
        free(c);
        return;
    }
    if (uv_accept(&l->h.stream, &c->conn.h.stream) < 0 ||
        (pool->tls != NULL &&
         tls_attach(&c->conn, pool->tls, NULL, NULL,
                    uv_now(&w->loop) + (uint64_t)w->snap->conf->global.tls_handshake_timeout_s * 1000u) < 0)) {
        c->conn.h.handle.data = NULL;
        uv_close(&c->conn.h.handle, (uv_close_cb)free);
        return;
    }
    c->mops = &client_msg_ops;
    c->w = w;
    c->pool = pool;
    queue_init(&c->msgs);
    c->holder.ops = &client_holder_ops;
    queue_init(&c->holder.pins);
    queue_init(&c->sessions);
    /* What CLIENT LIST shows and never changes is set before the client joins the list */
    if (!l->is_unix) {
        client_peer_name(c, c->pc.peer, sizeof(c->pc.peer));
        if (client_local_addr(c, c->pub.laddr, sizeof(c->pub.laddr)) < 0)
            snprintf(c->pub.laddr, sizeof(c->pub.laddr), "?:0");
    } else {
        snprintf(c->pc.peer, sizeof(c->pc.peer), "%s:0", pool->cp->listen.path);
        snprintf(c->pub.laddr, sizeof(c->pub.laddr), "%s:0", pool->cp->listen.path);
    }
    uv_os_fd_t fd = -1;
    c->pub.fd = uv_fileno(&c->conn.h.handle, &fd) == 0 ? (int)fd : -1;
    c->pc.id = atomic_fetch_add(&w->hub->next_client_id, 1) + 1;
    c->pc.auth = pool->cp->redis_auth;
    c->pc.db = pool->cp->redis_db;
    c->pc.pool_db = pool->cp->redis_db;
    c->pc.guard = client_guard;
    c->pc.authed = pool->cp->redis_auth == NULL;
    c->pc.created_ms = util_wall_us() / 1000;
    atomic_init(&c->pub.cmd, UINT32_MAX);
    atomic_init(&c->pub.last_ms, uv_now(&w->loop));
    atomic_init(&c->kill, 0);
    uv_mutex_lock(&w->clients_mu);
    queue_insert_tail(&w->clients, &c->link);
    uv_mutex_unlock(&w->clients_mu);
    pool->refs++;
    w->curr_connections++;
    w->total_connections++;
    c->active_ms = uv_now(&w->loop);
    c->written_ms = c->active_ms;
    STATS_ADD(&pool->stats, client_connections, 1);
    if (tls_is(&c->conn))
        STATS_ADD(&pool->stats, tls_connections, 1);
    unsigned n = atomic_fetch_add(&pool->view.shared->clients, 1) + 1;
    if (pool->cp->client_connections && n > pool->cp->client_connections) {
        STATS_ADD(&pool->stats, client_rejected, 1);
        log_warn("pool '%s': client_connections limit %u reached, closing a new connection",
                 pool->cp->name, pool->cp->client_connections);
        client_close(c);
        return;
    }
    if (!l->is_unix) {
        uv_tcp_nodelay(&c->conn.h.tcp, 1);
        if (pool->cp->tcpkeepalive)
            uv_tcp_keepalive(&c->conn.h.tcp, 1, 60);
    }
    client_parser_conf(c);
    if (pool->cp->redis_auth == NULL)
        c->parser.flags |= PROTO_PF_AUTHED;
    users_accept(c);
    c->pub_state = c->parser.flags & PROTO_PF_VARIANT;
    client_publish(c);
    client_read_start(c);
}

/* ------------------------------------------------------------------ local replies */

/* memcached `stats` / Redis INFO: the pool's numbers over every worker (pool_numbers.c). */
static void client_render_stats(void *ctx, proto_stat_fn emit, void *arg)
{
    struct client *c = ctx;
    const struct hub *hub = c->w->hub;
    hub->ops->pool_numbers(hub->ctx, c->w->snap, c->pool->cp->name, c->w->id, emit, arg);
}

static const char *client_server_name(void *ctx, uint32_t i)
{
    struct client *c = ctx;
    return i < c->pool->nservers ? c->pool->servers[i]->label : "?";
}

/* proto_env.clients: CLIENT LIST / INFO / KILL over the pool's clients on every worker. */
static int client_clients(void *ctx, int kill, proto_client_fn visit, void *arg)
{
    struct client *c = ctx;
    client_publish(c);              /* its own line as of now */
    return client_list_walk(c, kill, visit, arg);
}

/* proto_env's introspection: the pool's numbers and SLOWLOG over every worker. */
static void client_cmdstats(void *ctx, proto_cmdstat_fn visit, void *arg)
{
    struct client *c = ctx;
    introspect_cmdstats(c->w->hub, c->pool->cp->name, visit, arg);
}

static void client_errorstats(void *ctx, proto_errstat_fn visit, void *arg)
{
    struct client *c = ctx;
    introspect_errorstats(c->w->hub, c->pool->cp->name, visit, arg);
}

static int client_slowlog_get(void *ctx, long n, struct buf *out, uint64_t *count)
{
    struct client *c = ctx;
    return introspect_slowlog_get(c->w->hub, c->pool->cp->name,
                                  c->w->snap->conf->global.slowlog_max_len, n, out, count);
}

static uint64_t client_slowlog_len(void *ctx)
{
    struct client *c = ctx;
    return introspect_slowlog_len(c->w->hub, c->pool->cp->name,
                                  c->w->snap->conf->global.slowlog_max_len);
}

static void client_slowlog_reset(void *ctx)
{
    struct client *c = ctx;
    introspect_slowlog_reset(c->w->hub, c->pool->cp->name);
}

void client_reap(struct worker *w)
{
    struct qnode *n, *tmp;

    QUEUE_FOREACH_SAFE(n, tmp, &w->clients) {
        struct client *c = QUEUE_DATA(n, struct client, link);
        int k = atomic_exchange(&c->kill, 0);
        if (k == 0 || c->closing || conn_closing(&c->conn))
            continue;
        log_info("pool '%s': client %s (id %" PRIu64 ") closed by CLIENT KILL", c->pool->cp->name,
                 c->pc.peer, c->pc.id);
        if (k == 2)
            client_end(c, PROTO_ERR_SERVER, NULL);   /* the killer: after its reply */
        else
            client_close(c);
    }
}

/* proto_env.tracking: CLIENT TRACKING and its family (tracking.c). */
static int client_tracking(void *ctx, const struct proto_tracking *t, int v3, struct buf *out)
{
    return tracking_command(ctx, t, v3, out);
}

/* A Redis RESET: its subscriptions and its tracking end. */
static void client_reset(struct client *c)
{
    pubsub_reset(c);
    tracking_client_reset(c);
}

void client_resume_input(struct client *c)
{
    if (c->in != CLIENT_IN_HOLD || c->stream != NULL || c->nsessions != 0 || c->closing)
        return;
    c->in = CLIENT_IN_PARSE;
    if (c->paused) {
        client_check_resume(c);
        return;
    }
    client_process(c);
}

void client_env(struct client *c, struct proto_env *env)
{
    const struct hub *hub = c->w->hub;
    uint64_t now_us = util_wall_us();
    *env = (struct proto_env){
        .version = PACKAGE_VERSION,
        .uptime_s = (now_us - hub->start_wall_us) / 1000000u,
        .now_us = now_us,
        .pool_name = c->pool->cp->name,
        .nservers = c->pool->nservers,
        .variant = (c->parser.flags & PROTO_PF_VARIANT) != 0,
        .render_stats = client_render_stats,
        .server_name = client_server_name,
        .local_addr = client_local_addr,
        .epoch = pool_epoch(c->pool),
        .cluster = c->pool->cp->redis_cluster,
        .clients = client_clients,
        .tracking = c->pool->cp->protocol == CONF_PROTO_REDIS ? client_tracking : NULL,
        .ctx = c,
        .cmdstats = client_cmdstats,
        .errorstats = client_errorstats,
        .slowlog_get = client_slowlog_get,
        .slowlog_len = client_slowlog_len,
        .slowlog_reset = client_slowlog_reset,
    };
}

void client_end(struct client *c, enum proto_err code, const char *why)
{
    struct msg *m = msg_get(c->w);
    if (m != NULL) {
        m->role = MSG_REQUEST;
        m->state = MSG_DONE;
        m->cmd = UINT16_MAX;            /* the proxy's last word, no command's */
        m->start_us = worker_now_us(c->w);
        m->client = c;
        m->flags |= MSG_F_CLOSE;
        if (why != NULL) {
            m->flags |= MSG_F_ERROR;
            c->pool->ops->error_reply(code, why, &m->rsp);
            c->held_bytes += buf_len(&m->rsp);
        }
        queue_insert_tail(&c->msgs, &m->cq);
        c->nmsgs++;
    } else {
        c->closing = 1;
    }
    c->eof = 1;
    conn_read_stop(&c->conn);
    client_advance(c);
}

/* msg_client_ops.defer: CLIENT TRACKING's +OK waits with the input it held. */
static int client_defer(struct client *c, struct msg *m)
{
    return c->trk != NULL && tracking_defer_reply(c, m);
}

/* msg_client_ops.again: a request a stage held (its client's input with it) goes on. */
static void client_again(struct client *c, struct msg *m, const char *p, size_t n,
                         const struct stage *after)
{
    struct proto_req req;
    int rc = c->pool->ops->parse_req(&c->parser, p, n, &req);
    if (rc <= 0 || (size_t)rc != n || req.body_len != 0) {
        forward_refuse(c, m, PROTO_ERR_SERVER, "a held request did not parse again");
        return;
    }
    forward_again(c, m, &req, p, after);
}

const struct msg_client_ops client_msg_ops = {
    .advance = client_advance,
    .write = client_write_bytes,
    .stream_check = client_stream_check,
    .env = client_env,
    .reset = client_reset,
    .close = client_close,
    .end = client_end,
    .memory_over = client_memory_over,
    .resume = client_resume_input,
    .defer = client_defer,
    .again = client_again,
};
