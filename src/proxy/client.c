/* Client connections: read, parse in place, route, fan out, answer in order, backpressure. */
#include "config.h"

#include <alloca.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "health.h"
#include "log.h"
#include "proto/memcache.h"
#include "pool_numbers.h"
#include "proxy/client.h"
#include "proxy/msg.h"
#include "proxy/proxy.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/worker.h"
#include "ring.h"
#include "util.h"

#define CLIENT_IBUF_KEEP   (256 * 1024)    /* free a larger input buffer once idle */
#define CLIENT_MAX_INFLIGHT 256            /* requests a client may have unanswered */
#define CLIENT_READ_CHUNK  16384

static void client_process(struct client *c);

/* ------------------------------------------------------------------ output */

int client_write_bytes(struct client *c, const char *p, size_t n)
{
    if (buf_append(&c->obuf, p, n) < 0) {
        c->closing = 1;
        return -ENOMEM;
    }
    worker_mark_client(c->w, c);
    return 0;
}

static size_t client_pending_bytes(const struct client *c)
{
    return buf_len(&c->obuf) + buf_len(&c->wbuf) + c->held_bytes;
}

static void client_on_close(uv_handle_t *h)
{
    struct client *c = h->data;

    wpool_unref(c->pool);
    buf_free(&c->ibuf);
    buf_free(&c->obuf);
    buf_free(&c->wbuf);
    proto_parser_free(&c->parser);
    free(c);
}

void client_close(struct client *c)
{
    struct worker *w = c->w;

    if (c->h.handle.data == NULL || uv_is_closing(&c->h.handle))
        return;
    c->closing = 1;
    if (c->dirty) {
        struct client **pp = &w->dirty_clients;
        while (*pp != NULL && *pp != c)
            pp = &(*pp)->dirty_next;
        if (*pp == c)
            *pp = c->dirty_next;
        c->dirty = 0;
    }
    /* Messages still owed a reply by a server stay there as orphans. */
    struct msg *m = c->head;
    while (m != NULL) {
        struct msg *next = m->cnext;
        m->cnext = NULL;
        m->client = NULL;
        if (!(m->flags & MSG_F_SENT) && m->nfrag_pending == 0)
            msg_put(w, m);
        m = next;
    }
    c->head = c->tail = NULL;
    c->nmsgs = 0;
    if (c->prev)
        c->prev->next = c->next;
    else
        w->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    atomic_fetch_sub(&c->pool->shared->clients, 1);
    STATS_ADD(&c->pool->stats, client_connections, -1);
    w->curr_connections--;
    uv_close(&c->h.handle, client_on_close);
}

/* Close when everything owed has been answered and written. */
static void client_maybe_finish(struct client *c)
{
    if ((c->eof || c->closing) && c->head == NULL && buf_len(&c->obuf) == 0 && !c->writing)
        client_close(c);
}

static void client_read_start(struct client *c);

/* A client paused for backpressure reads again once its queued reply
 * bytes fall under half the limit; then the input it already holds. */
static void client_check_resume(struct client *c)
{
    if (!c->paused || c->closing || c->eof ||
        client_pending_bytes(c) >= c->w->proxy->client_output_limit / 2 ||
        c->nmsgs > CLIENT_MAX_INFLIGHT / 2)
        return;
    c->paused = 0;
    client_read_start(c);
    client_process(c);
}

static void client_write_cb(uv_write_t *req, int status)
{
    struct client *c = req->data;

    c->writing = 0;
    c->wbuf.rpos = c->wbuf.wpos = 0;
    if (uv_is_closing(&c->h.handle))
        return;
    if (status < 0) {
        STATS_ADD(&c->pool->stats, client_err, 1);
        client_close(c);
        return;
    }
    if (buf_len(&c->obuf) > 0) {
        client_flush(c);
        return;
    }
    client_check_resume(c);
    client_maybe_finish(c);
}

void client_flush(struct client *c)
{
    if (uv_is_closing(&c->h.handle))
        return;
    if (c->writing)
        return;
    if (buf_len(&c->obuf) == 0) {
        client_maybe_finish(c);
        return;
    }
    int n = worker_try_send(&c->h.stream, buf_rptr(&c->obuf), RL_MIN(buf_len(&c->obuf), 1u << 30));
    if (n > 0)
        buf_consume(&c->obuf, (size_t)n);
    else if (n < 0 && n != UV_EAGAIN) {
        STATS_ADD(&c->pool->stats, client_err, 1);
        client_close(c);
        return;
    }
    if (buf_len(&c->obuf) == 0) {
        if (c->obuf.cap > CLIENT_IBUF_KEEP)
            buf_free(&c->obuf);
        client_check_resume(c);
        client_maybe_finish(c);
        return;
    }
    buf_swap(&c->obuf, &c->wbuf);
    uv_buf_t b = uv_buf_init(buf_rptr(&c->wbuf), (unsigned)buf_len(&c->wbuf));
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, &c->h.stream, &b, 1, client_write_cb);
    if (rc < 0) {
        client_close(c);
        return;
    }
    c->writing = 1;
}

/* Deliver every completed message at the head of the queue, in order. */
void client_advance(struct client *c)
{
    struct worker *w = c->w;
    struct msg *m;

    while ((m = c->head) != NULL && (m->flags & MSG_F_DONE)) {
        size_t n = buf_len(&m->rsp);
        if (n > 0) {
            c->held_bytes -= RL_MIN(c->held_bytes, n);
            if (buf_len(&c->obuf) == 0 && !(m->flags & MSG_F_STREAMED)) {
                buf_swap(&c->obuf, &m->rsp);     /* hand over, no copy */
            } else if (buf_append(&c->obuf, buf_rptr(&m->rsp), n) < 0) {
                c->closing = 1;
            }
            worker_mark_client(w, c);
        }
        c->head = m->cnext;
        if (c->head == NULL)
            c->tail = NULL;
        c->nmsgs--;
        m->cnext = NULL;
        m->client = NULL;
        if (m->flags & MSG_F_CLOSE) {
            c->eof = 1;
            c->closing = 1;
        }
        if (!(m->flags & MSG_F_SENT))
            msg_put(w, m);
        if (c->closing)
            break;
    }
    if (c->paused)
        worker_mark_client(w, c);   /* the flush decides whether to read again */
    if (c->closing) {
        /* Drop what is queued behind a close. */
        while ((m = c->head) != NULL) {
            c->head = m->cnext;
            m->cnext = NULL;
            m->client = NULL;
            if (!(m->flags & MSG_F_SENT) && m->nfrag_pending == 0)
                msg_put(w, m);
        }
        c->tail = NULL;
        c->nmsgs = 0;
        if (!uv_is_closing(&c->h.handle))
            uv_read_stop(&c->h.stream);
        worker_mark_client(w, c);
    }
}

/* ------------------------------------------------------------------ requests */

static struct msg *client_new_msg(struct client *c, const struct proto_req *req)
{
    struct msg *m = msg_get(c->w);
    if (m == NULL)
        return NULL;
    m->cmd = req->cmd;
    m->rflags = req->flags;
    m->nkeys = req->nkeys;
    m->start_us = worker_now_us(c->w);
    if (req->flags & PROTO_RF_NOREPLY) {
        m->flags |= MSG_F_NOREPLY;      /* not in the reply order at all */
        return m;
    }
    m->client = c;
    if (c->tail)
        c->tail->cnext = m;
    else
        c->head = m;
    c->tail = m;
    c->nmsgs++;
    return m;
}

/* m is answered here, not by a server: done at once. A noreply request's message is put
 * back (0: m is gone); otherwise its reply, already in m->rsp, is held for delivery. */
static int client_answered_here(struct client *c, struct msg *m)
{
    m->flags |= MSG_F_DONE;
    if (m->flags & MSG_F_NOREPLY) {
        msg_put(c->w, m);
        return 0;
    }
    c->held_bytes += buf_len(&m->rsp);
    return 1;
}

/* Answer m locally with a protocol error (it was never sent). */
static void client_fail(struct client *c, struct msg *m, enum proto_err code, const char *reason)
{
    m->flags |= MSG_F_ERROR;
    STATS_ADD(&c->pool->stats, forward_error, 1);
    if (!(m->flags & MSG_F_NOREPLY))
        c->pool->ops->error_reply(code, reason, &m->rsp);
    (void)client_answered_here(c, m);
}

/* The pool a keyed request goes to (routes pick it by key prefix), or NULL after failing
 * m when its keys belong to different pools. */
static struct wpool *client_route_pool(struct client *c, struct msg *m,
                                       const struct proto_req *req, const char *buf)
{
    int mixed;
    struct wpool *pool = route_pool(c->pool, req, buf, &mixed);
    if (mixed) {
        STATS_ADD(&c->pool->stats, crossslot, 1);
        client_fail(c, m, PROTO_ERR_CROSSSLOT, "keys in request belong to different pools");
        return NULL;
    }
    return pool;
}

enum client_write {
    CLIENT_WRITE_WHOLE,     /* forward() the header, then the body as is */
    CLIENT_WRITE_HEADER,    /* forward() only (a broadcast carries no body) */
    CLIENT_WRITE_FRAG       /* frag_write() with keys idx[0..n) */
};

/*
 * Write a request (or one fragment of it) to a connection of srv and queue
 * m for its reply; the header is rewritten by the protocol's forward() or
 * frag_write(), a body is copied as is. 0, or -1 with the error m is to be
 * answered with in *code and *reason (nothing was queued then).
 */
static int client_enqueue(struct wpool *pool, struct msg *m, struct server *srv, uint64_t hint,
                          const struct proto_req *req, const char *buf, const uint32_t *idx,
                          uint32_t n, enum client_write how, enum proto_err *code,
                          const char **reason)
{
    struct sconn *s = server_pick(srv, hint, reason);

    m->server = srv;
    if (s == NULL) {
        *code = PROTO_ERR_SERVER;
        if (*reason == NULL)
            *reason = "no connection";
        return -1;
    }
    const struct proto_ops *ops = pool->ops;
    size_t before = buf_len(&s->obuf);
    int rc;
    if (how == CLIENT_WRITE_WHOLE && pool->cp->coalesce_gets && ops->joinable != NULL &&
        !(m->flags & (MSG_F_FRAG | MSG_F_WARM)) && ops->joinable(req)) {
        rc = sconn_write_joinable(s, ops, m, req, buf);
    } else {
        rc = how == CLIENT_WRITE_FRAG ? ops->frag_write(req, buf, idx, n, &s->obuf)
                                      : ops->forward(req, buf, &s->obuf);
        if (rc == 0 && how == CLIENT_WRITE_WHOLE && req->body_len > 0)
            rc = buf_append(&s->obuf, buf + req->hdr_len, req->body_len);
    }
    if (rc < 0) {
        s->obuf.wpos = s->obuf.rpos + before;
        *code = PROTO_ERR_NOMEM;
        *reason = "out of memory";
        return -1;
    }
    m->req_bytes = buf_len(&s->obuf) - before;
    STATS_ADD(&srv->stats, requests, 1);
    STATS_ADD(&srv->stats, request_bytes, m->req_bytes);
    sconn_enqueue(s, m);
    worker_mark_sconn(pool->w, s);
    return 0;
}

/* Send one whole request to one server. */
static void client_send(struct client *c, struct msg *m, struct server *srv, uint64_t hint,
                        const struct proto_req *req, const char *buf)
{
    enum proto_err code;
    const char *reason = NULL;

    if (client_enqueue(c->pool, m, srv, hint, req, buf, NULL, 0, CLIENT_WRITE_WHOLE, &code,
                       &reason) < 0)
        client_fail(c, m, code, reason);
}

/* A fragment of parent for nkeys of its keys (or a copy of it). */
static struct msg *client_new_frag(struct worker *w, struct msg *parent,
                                   const struct proto_req *req, uint32_t nkeys)
{
    struct msg *fm = msg_get(w);
    if (fm == NULL)
        return NULL;
    fm->flags = MSG_F_FRAG;
    fm->parent = parent;
    fm->cmd = req->cmd;
    fm->rflags = req->flags & (uint16_t)~PROTO_RF_NOREPLY;
    fm->nkeys = nkeys;
    fm->start_us = parent->start_us;
    return fm;
}

/*
 * Send copies of one request to several servers (replicated writes,
 * bounded loads' warm spill servers). The client gets the first copy that
 * did not fail (in the order given), after all of them, or with `async`
 * as soon as one succeeds (the others finish in the background).
 */
static void client_copies(struct client *c, struct msg *m, const struct proto_req *req,
                          const char *buf, struct server *const *targets, uint32_t n, int async)
{
    struct worker *w = c->w;
    struct wpool *pool = c->pool;

    m->frags = calloc(n, sizeof(*m->frags));
    if (m->frags == NULL) {
        client_fail(c, m, PROTO_ERR_NOMEM, "out of memory");
        return;
    }
    m->flags |= MSG_F_REPLICA | (async ? MSG_F_ASYNC : 0);
    m->nfrag = n;
    m->nfrag_pending = n;
    STATS_ADD(&pool->stats, fragments, n);
    for (uint32_t f = 0; f < n; f++) {
        struct msg *fm = client_new_frag(w, m, req, req->nkeys);
        if (fm == NULL) {
            m->nfrag = f;
            m->nfrag_pending -= n - f;
            if (m->nfrag_pending == 0)
                client_fail(c, m, PROTO_ERR_NOMEM, "out of memory");
            return;
        }
        m->frags[f] = fm;
        enum proto_err code;
        const char *reason = NULL;
        if (client_enqueue(pool, fm, targets[f], f, req, buf, NULL, 0, CLIENT_WRITE_WHOLE,
                           &code, &reason) < 0) {
            log_info("pool '%s': copy to server '%s' not sent: %s", pool->cp->name,
                     targets[f]->label, reason);
            server_fail_msg(w, fm, code, reason);
        }
    }
}

/* warm-up: remember the key and its previous owner; server.c asks that
 * owner when the new one misses (see route.c). */
static void client_warm_mark(struct client *c, struct msg *m, const struct proto_req *req,
                             const char *buf, struct server *prev)
{
    char dec[512];
    size_t len;
    const char *key = route_key(req, buf, 0, dec, &len);
    if (buf_append(&m->reqcopy, key, len) < 0)
        return;
    m->flags |= MSG_F_WARM;
    m->warm = prev;
    m->warm_cmd = req->cmd;
}

static int client_scratch(struct worker *w, uint32_t n)
{
    if (n <= w->scratch_cap)
        return 0;
    uint32_t cap = w->scratch_cap ? w->scratch_cap : 64;
    while (cap < n)
        cap *= 2;
    uint32_t *p = realloc(w->scratch, (size_t)cap * 2 * sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    w->scratch = p;
    w->scratch_cap = cap;
    return 0;
}

/*
 * Split a multi-key request per server. The parent keeps a copy of the
 * header and the key offsets for merge(); each fragment is a message of
 * its own in its server's queue. Allocation here is per multi-key request
 * (the merge map), not per key.
 */
static void client_fanout(struct client *c, struct wpool *pool, struct msg *m,
                          const struct proto_req *req, const char *buf, int broadcast)
{
    struct worker *w = c->w;
    uint32_t nkeys = broadcast ? 0 : req->nkeys;
    uint32_t nsrv = pool->nservers;

    if (client_scratch(w, RL_MAX(nkeys, nsrv) + 1) < 0)
        goto nomem;
    uint32_t *owner = w->scratch;                    /* owner[i] for key i */
    uint32_t *slot = w->scratch + w->scratch_cap;    /* server -> fragment + 1 */
    memset(slot, 0, (size_t)nsrv * sizeof(*slot));

    uint32_t nfrag = 0;
    if (broadcast) {
        nfrag = nsrv;
    } else {
        for (uint32_t i = 0; i < nkeys; i++) {
            owner[i] = route_key_server(pool, req, buf, i,
                                        route_owner(pool, req, buf, i, NULL));
            if (slot[owner[i]] == 0)
                slot[owner[i]] = ++nfrag;
        }
    }
    if (nfrag == 0) {
        client_fail(c, m, PROTO_ERR_SERVER, "no server to send to");
        return;
    }
    m->frags = calloc(nfrag, sizeof(*m->frags));
    m->key_frag = nkeys ? malloc((size_t)nkeys * sizeof(*m->key_frag)) : NULL;
    m->keys = nkeys ? malloc((size_t)nkeys * sizeof(*m->keys)) : NULL;
    if (m->frags == NULL || (nkeys && (m->key_frag == NULL || m->keys == NULL)) ||
        buf_append(&m->reqcopy, buf, req->hdr_len) < 0)
        goto nomem;
    m->nfrag = nfrag;
    for (uint32_t i = 0; i < nkeys; i++) {
        m->key_frag[i] = slot[owner[i]] - 1;
        m->keys[i] = req->keys[i];
    }

    struct server **target = alloca(nfrag * sizeof(*target));
    if (broadcast) {
        for (uint32_t s = 0; s < nsrv; s++)
            target[s] = pool->servers[s];
    } else {
        for (uint32_t s = 0; s < nsrv; s++)
            if (slot[s])
                target[slot[s] - 1] = pool->servers[s];
    }
    /* Each fragment's keys, in the client's order, with one counting pass:
     * fragment f's keys are idx[first[f] .. first[f + 1]). (owner and slot
     * are free again: key_frag and target hold what they said.) */
    uint32_t *idx = owner, *first = slot;
    memset(first, 0, (size_t)(nfrag + 1) * sizeof(*first));
    for (uint32_t i = 0; i < nkeys; i++)
        first[m->key_frag[i]]++;                    /* counts */
    for (uint32_t f = 0, sum = 0; f < nfrag; f++) {
        sum += first[f];
        first[f] = sum;                             /* ends */
    }
    for (uint32_t i = nkeys; i-- > 0;)
        idx[--first[m->key_frag[i]]] = i;           /* ends become starts */
    first[nfrag] = nkeys;

    m->nfrag_pending = nfrag;
    STATS_ADD(&pool->stats, fragments, nfrag);
    for (uint32_t f = 0; f < nfrag; f++) {
        const uint32_t *fidx = broadcast ? NULL : idx + first[f];
        uint32_t n = broadcast ? 0 : first[f + 1] - first[f];
        struct msg *fm = client_new_frag(w, m, req, n);
        if (fm == NULL) {
            m->nfrag = f;
            m->nfrag_pending -= nfrag - f;
            /* the fragments already sent complete on their own */
            goto nomem_late;
        }
        m->frags[f] = fm;
        struct server *srv = target[f];
        fm->server = srv;
        if (!broadcast && !health_up(srv->health) && pool->cp->on_down != CONF_ON_DOWN_FAILOVER) {
            /* on_down miss: a memcached multi-get's fragment is all misses;
             * anything else (and on_down error) fails the fragment at once */
            if (pool->cp->on_down == CONF_ON_DOWN_MISS && (req->flags & PROTO_RF_RETRIEVAL) &&
                pool->cp->protocol == CONF_PROTO_MEMCACHE) {
                pool->ops->miss_reply(req->cmd, req->flags, &fm->rsp);
                server_msg_done(w, fm);
            } else {
                char reason[300];
                snprintf(reason, sizeof(reason), "server %s is down", srv->label);
                server_fail_msg(w, fm, PROTO_ERR_DOWN, reason);
            }
            continue;
        }
        enum proto_err code;
        const char *reason = NULL;
        if (client_enqueue(pool, fm, srv, f, req, buf, fidx, n,
                           broadcast ? CLIENT_WRITE_HEADER : CLIENT_WRITE_FRAG, &code, &reason) < 0)
            server_fail_msg(w, fm, code, reason);
    }
    return;

nomem_late:
    if (m->nfrag_pending == 0) {
        m->flags |= MSG_F_DONE;
        pool->ops->error_reply(PROTO_ERR_NOMEM, "out of memory", &m->rsp);
    }
    return;
nomem:
    free(m->frags);
    free(m->key_frag);
    free(m->keys);
    m->frags = NULL;
    m->key_frag = NULL;
    m->keys = NULL;
    m->nfrag = m->nfrag_pending = 0;
    client_fail(c, m, PROTO_ERR_NOMEM, "out of memory");
}

static void client_dispatch(struct client *c, const struct proto_req *req, const char *buf)
{
    struct wpool *pool = c->pool;
    struct msg *m = client_new_msg(c, req);

    if (m == NULL) {
        c->closing = 1;
        return;
    }
    STATS_ADD(&pool->stats, requests, 1);
    switch (req->kind) {
    case PROTO_REQ_ERROR:
        STATS_ADD(&pool->stats, client_errors_sent, 1);
        m->flags |= MSG_F_ERROR;
        if (req->flags & PROTO_RF_CLOSE)
            m->flags |= MSG_F_CLOSE;
        if (!(m->flags & MSG_F_NOREPLY))
            buf_append(&m->rsp, req->err, req->err_len);
        if (!client_answered_here(c, m))
            return;
        break;

    case PROTO_REQ_LOCAL: {
        struct proto_env env;
        client_env(c, &env);
        STATS_ADD(&pool->stats, local_replies, 1);
        m->flags |= MSG_F_DONE;
        int rc = pool->ops->local(&c->pc, &c->parser, req, buf, &env, &m->rsp);
        if (rc == PROTO_LOCAL_CLOSE || (req->flags & PROTO_RF_CLOSE))
            m->flags |= MSG_F_CLOSE;
        if (!client_answered_here(c, m))
            return;
        break;
    }

    case PROTO_REQ_SAME:
    case PROTO_REQ_SINGLE: {
        if ((pool = client_route_pool(c, m, req, buf)) == NULL)
            goto out;
        uint64_t hash = 0;
        uint32_t owner = route_owner(pool, req, buf, 0, &hash);
        if (c->w->snap->conf->global.hot_keys)
            hotkeys_touch(&pool->hot, buf + req->keys[0].off, req->keys[0].len,
                          uv_now(&c->w->loop));
        for (uint32_t i = 1; req->kind == PROTO_REQ_SAME && i < req->nkeys; i++) {
            if (route_owner(pool, req, buf, i, NULL) != owner) {
                STATS_ADD(&pool->stats, crossslot, 1);
                client_fail(c, m, PROTO_ERR_CROSSSLOT, "keys in request don't hash to the same server");
                goto out;
            }
        }
        struct route rt;
        route_request(pool, req, buf, owner, hash, &c->w->rr, &rt);
        switch (rt.kind) {
        case ROUTE_SEND:
            if (rt.warm_from != NULL)
                client_warm_mark(c, m, req, buf, rt.warm_from);
            client_send(c, m, rt.to[0], hash, req, buf);
            break;
        case ROUTE_COPIES:
            client_copies(c, m, req, buf, rt.to, rt.n, rt.async);
            break;
        case ROUTE_MISS:
            if (!(m->flags & MSG_F_NOREPLY))
                pool->ops->miss_reply(req->cmd, req->flags, &m->rsp);
            if (!client_answered_here(c, m))
                return;
            break;
        case ROUTE_FAIL:
            client_fail(c, m, rt.err, rt.reason);
            break;
        }
        break;
    }

    case PROTO_REQ_FANOUT:
        if ((pool = client_route_pool(c, m, req, buf)) == NULL)
            goto out;
        client_fanout(c, pool, m, req, buf, 0);
        break;
    case PROTO_REQ_BROADCAST:
        client_fanout(c, c->pool, m, req, buf, 1);
        break;
    }
out:
    if (c->head == m && (m->flags & MSG_F_DONE))
        client_advance(c);
}

/* Parse and dispatch every complete request in the input buffer. */
static void client_process(struct client *c)
{
    const struct proto_ops *ops = c->pool->ops;
    size_t limit = c->w->proxy->client_output_limit;

    while (!c->closing && !c->paused) {
        size_t len = buf_len(&c->ibuf);
        if (c->swallow > 0) {
            size_t n = (size_t)RL_MIN((uint64_t)len, c->swallow);
            buf_consume(&c->ibuf, n);
            c->swallow -= n;
            if (c->swallow > 0)
                break;
            continue;
        }
        if (len == 0 || len < c->need)
            break;
        /* Backpressure: replies the client has not read, and requests it
         * has outstanding (whose replies are still to come), are bounded;
         * past either limit it is not read until it catches up. */
        if (client_pending_bytes(c) > limit || c->nmsgs >= CLIENT_MAX_INFLIGHT) {
            c->paused = 1;
            STATS_ADD(&c->pool->stats, client_paused, 1);
            uv_read_stop(&c->h.stream);
            break;
        }
        struct proto_req req;
        memset(&req, 0, sizeof(req));
        const char *p = buf_rptr(&c->ibuf);
        int rc = ops->parse_req(&c->parser, p, len, &req);
        if (rc == 0)
            break;
        if (rc < 0) {
            struct msg *m = client_new_msg(c, &req);
            STATS_ADD(&c->pool->stats, client_err, 1);
            if (m != NULL) {
                m->flags |= MSG_F_DONE | MSG_F_CLOSE | MSG_F_ERROR;
                if (req.err)
                    buf_append(&m->rsp, req.err, req.err_len);
                c->held_bytes += buf_len(&m->rsp);
            }
            c->eof = 1;
            uv_read_stop(&c->h.stream);
            buf_consume(&c->ibuf, len);
            client_advance(c);
            break;
        }
        if (req.body_len > 0 && req.kind != PROTO_REQ_ERROR) {
            /* Forward the request whole: header and body in one piece, so
             * no other client's request can land inside it. */
            uint64_t total = (uint64_t)req.hdr_len + req.body_len;
            if ((uint64_t)len < total) {
                if (total > SIZE_MAX / 2 || buf_reserve(&c->ibuf, (size_t)total - len) < 0) {
                    c->closing = 1;
                    break;
                }
                c->need = (size_t)total;
                break;
            }
        }
        c->need = 0;
        client_dispatch(c, &req, p);
        if (req.kind == PROTO_REQ_ERROR) {
            buf_consume(&c->ibuf, req.hdr_len);
            c->swallow = req.body_len;
        } else {
            buf_consume(&c->ibuf, req.hdr_len + req.body_len);
        }
        if (req.flags & PROTO_RF_CLOSE) {
            c->eof = 1;
            uv_read_stop(&c->h.stream);
            break;
        }
    }
    if (buf_len(&c->ibuf) == 0 && c->ibuf.cap > CLIENT_IBUF_KEEP)
        buf_free(&c->ibuf);
    if (c->closing)
        client_advance(c);
    client_maybe_finish(c);
}

/* ------------------------------------------------------------------ reading */

static void client_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    struct client *c = h->data;

    (void)suggested;
    worker_read_room(&c->ibuf, c->w->proxy->opt.buf_size ? c->w->proxy->opt.buf_size
                                                        : CLIENT_READ_CHUNK, b);
}

static void client_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct client *c = st->data;

    (void)b;
    if (nread > 0) {
        c->ibuf.wpos += (size_t)nread;
        client_process(c);
        return;
    }
    if (nread == 0)
        return;
    uv_read_stop(st);
    if (nread == UV_EOF) {
        STATS_ADD(&c->pool->stats, client_eof, 1);
        c->eof = 1;             /* answer what was asked, then close */
        client_maybe_finish(c);
        return;
    }
    STATS_ADD(&c->pool->stats, client_err, 1);
    client_close(c);
}

static void client_read_start(struct client *c)
{
    int rc = uv_read_start(&c->h.stream, client_alloc_cb, client_read_cb);
    if (rc < 0)
        client_close(c);
}

/* ------------------------------------------------------------------ accept */

void client_accept(struct listener *l)
{
    struct worker *w = l->w;
    struct wpool *pool = l->pool;
    struct client *c = calloc(1, sizeof(*c));
    int rc;

    if (c == NULL) {
        log_error("out of memory accepting a client on pool '%s'", pool->cp->name);
        return;
    }
    if (l->is_unix)
        rc = uv_pipe_init(&w->loop, &c->h.pipe, 0);
    else
        rc = uv_tcp_init(&w->loop, &c->h.tcp);
    if (rc < 0) {
        free(c);
        return;
    }
    c->h.handle.data = c;
    c->w = w;
    c->pool = pool;
    c->is_unix = l->is_unix;
    if (uv_accept(&l->h.stream, &c->h.stream) < 0) {
        c->h.handle.data = NULL;
        uv_close(&c->h.handle, (uv_close_cb)free);
        return;
    }
    c->next = w->clients;
    if (w->clients)
        w->clients->prev = c;
    w->clients = c;
    pool->refs++;
    w->curr_connections++;
    w->total_connections++;
    STATS_ADD(&pool->stats, client_connections, 1);
    unsigned n = atomic_fetch_add(&pool->shared->clients, 1) + 1;
    if (pool->cp->client_connections && n > pool->cp->client_connections) {
        STATS_ADD(&pool->stats, client_rejected, 1);
        log_warn("pool '%s': client_connections limit %u reached, closing a new connection",
                 pool->cp->name, pool->cp->client_connections);
        client_close(c);
        return;
    }
    if (!l->is_unix) {
        uv_tcp_nodelay(&c->h.tcp, 1);
        if (pool->cp->tcpkeepalive)
            uv_tcp_keepalive(&c->h.tcp, 1, 60);
        struct sockaddr_storage ss;
        int sl = sizeof(ss);
        if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &sl) == 0) {
            char ip[64] = "?";
            int port = 0;
            if (ss.ss_family == AF_INET) {
                uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
                port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
            } else if (ss.ss_family == AF_INET6) {
                uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
                port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
            }
            snprintf(c->pc.peer, sizeof(c->pc.peer), "%s:%d", ip, port);
        }
    } else {
        snprintf(c->pc.peer, sizeof(c->pc.peer), "%s", pool->cp->listen.path);
    }
    c->parser.item_size_max = pool->cp->item_size_max;
    if (pool->cp->allow_flush)
        c->parser.flags |= PROTO_PF_ALLOW_FLUSH;
    if (pool->cp->redis_auth == NULL)
        c->parser.flags |= PROTO_PF_AUTHED;
    c->pc.id = atomic_fetch_add(&w->proxy->next_client_id, 1) + 1;
    c->pc.auth = pool->cp->redis_auth;
    c->pc.db = pool->cp->redis_db;
    c->pc.authed = pool->cp->redis_auth == NULL;
    c->pc.created_ms = util_wall_us() / 1000;
    client_read_start(c);
}

/* ------------------------------------------------------------------ local stats */

/* memcached `stats` / Redis INFO: the pool's numbers over every worker (pool_numbers.c). */
static void client_render_stats(void *ctx, proto_stat_fn emit, void *arg)
{
    struct client *c = ctx;
    pool_numbers_emit(c->w->proxy, c->w->snap, c->pool->cp->name, c->w->id, emit, arg);
}

static const char *client_server_name(void *ctx, uint32_t i)
{
    struct client *c = ctx;
    return i < c->pool->nservers ? c->pool->servers[i]->label : "?";
}

void client_env(struct client *c, struct proto_env *env)
{
    struct proxy *p = c->w->proxy;
    *env = (struct proto_env){
        .version = PACKAGE_VERSION,
        .uptime_s = (util_wall_us() - p->start_wall_us) / 1000000u,
        .now_us = util_wall_us(),
        .pool_name = c->pool->cp->name,
        .nservers = c->pool->nservers,
        .render_stats = client_render_stats,
        .server_name = client_server_name,
        .ctx = c,
    };
}
