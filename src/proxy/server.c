/* Server connections: connect, batched writes, reply parsing and matching, timeouts, reconnect back-off. */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "health.h"
#include "log.h"
#include "proxy/client.h"
#include "proxy/msg.h"
#include "proxy/proxy.h"
#include "proxy/server.h"
#include "proxy/worker.h"
#include "util.h"

#define SCONN_BACKOFF_MIN_MS 50
#define SCONN_BACKOFF_MAX_MS 2000
#define SCONN_IBUF_KEEP      (256 * 1024)  /* shrink a reply buffer beyond this once idle */
#define SCONN_STREAM_MIN     (64 * 1024)   /* values above this stream to the client */

static void sconn_close(struct sconn *s, const char *reason, int is_error);
static void sconn_process(struct sconn *s);
static void sconn_timer_cb(uv_timer_t *t);

/* ------------------------------------------------------------------ stats */


/* ------------------------------------------------------------------ health */

/* A failure of this server (connect, reset, garbage, timeout): counted in
 * the shared health record; the limit-th in a row takes it down. */
static void server_failed(struct server *srv, const char *reason)
{
    const struct conf_pool *cp = srv->pool->cp;
    if (srv->health == NULL || !cp->eject)
        return;     /* never ejected: each request tries the server itself */
    uint32_t retry = cp->server_retry_timeout_ms > 0 ? (uint32_t)cp->server_retry_timeout_ms : 30000;
    uint64_t wall = util_wall_us();
    if (health_failure(srv->health, util_now_ms(), cp->server_failure_limit, retry, wall)) {
        log_warn("server '%s' (%s) of pool '%s' is down after %u failure(s) in a row (%s); "
                 "its keys stay its own, requests for them follow on_down until a probe succeeds",
                 srv->label, srv->addr.text, cp->name, cp->server_failure_limit, reason);
        STATS_ADD(&srv->pool->stats, server_ejects, 1);
        __atomic_store_n(&srv->stats.server_ejected_at, (int64_t)wall, __ATOMIC_RELAXED);
    }
}

static void server_succeeded(struct server *srv)
{
    if (srv->health != NULL && health_success(srv->health, util_now_ms()))
        log_notice("server '%s' (%s) of pool '%s' is up again", srv->label, srv->addr.text,
                   srv->pool->cp->name);
}

/* ------------------------------------------------------------------ server */

static int addr_copy(struct conf_addr *dst, const struct conf_addr *src)
{
    memset(dst, 0, sizeof(*dst));
    dst->port = src->port;
    dst->perm = src->perm;
    if (src->text && (dst->text = strdup(src->text)) == NULL)
        return -ENOMEM;
    if (src->host && (dst->host = strdup(src->host)) == NULL)
        return -ENOMEM;
    if (src->path && (dst->path = strdup(src->path)) == NULL)
        return -ENOMEM;
    return 0;
}

static void addr_release(struct conf_addr *a)
{
    free(a->text);
    free(a->host);
    free(a->path);
    memset(a, 0, sizeof(*a));
}

struct server *server_create(struct worker *w, struct wpool *pool, const struct conf_server *cs)
{
    struct server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->w = w;
    s->pool = pool;
    s->nconns = pool->cp->server_connections ? pool->cp->server_connections : 1;
    s->conns = calloc(s->nconns, sizeof(*s->conns));
    s->ident = strdup(cs->ident);
    s->label = strdup(cs->label ? cs->label : cs->ident);
    if (s->conns == NULL || s->ident == NULL || s->label == NULL ||
        addr_copy(&s->addr, &cs->addr) < 0) {
        addr_release(&s->addr);
        free(s->conns);
        free(s->ident);
        free(s->label);
        free(s);
        return NULL;
    }
    s->next = w->servers;
    w->servers = s;
    pool->refs++;
    return s;
}

static void server_free_if_idle(struct server *s)
{
    /* Only when no connection object is left, closing ones included: their
     * close callbacks still point here. */
    if (!s->removed || s->nopen > 0)
        return;
    struct server **pp = &s->w->servers;
    while (*pp != NULL && *pp != s)
        pp = &(*pp)->next;
    if (*pp == s)
        *pp = s->next;
    struct wpool *wp = s->pool;
    addr_release(&s->addr);
    free(s->conns);
    free(s->ident);
    free(s->label);
    free(s);
    wpool_unref(wp);
}

void server_destroy(struct server *s, int now)
{
    s->removed = 1;
    for (uint32_t i = 0; i < s->nconns; i++) {
        struct sconn *c = s->conns[i];
        if (c == NULL)
            continue;
        if (now || c->head == NULL)
            sconn_close(c, "server removed", 0);
        /* else: closed by sconn_reply_done once its last reply is in */
    }
    server_free_if_idle(s);
}

/* ------------------------------------------------------------------ connect */

/* Drop one of the things keeping a closing connection alive (its two
 * handles, a pending name resolution); the last one frees it. */
static void sconn_unref(struct sconn *s)
{
    if (--s->closes_pending > 0)
        return;
    struct server *srv = s->server;
    buf_free(&s->ibuf);
    buf_free(&s->obuf);
    buf_free(&s->wbuf);
    buf_free(&s->jkeys);
    proto_parser_free(&s->parser);
    free(s);
    srv->nopen--;
    server_free_if_idle(srv);
}

static void sconn_on_close(uv_handle_t *h)
{
    sconn_unref(h->data);
}

static void sconn_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    struct sconn *s = h->data;

    (void)suggested;
    worker_read_room(&s->ibuf, 16384, b);
}

static void sconn_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct sconn *s = st->data;

    (void)b;
    if (nread > 0) {
        s->ibuf.wpos += (size_t)nread;
        sconn_process(s);
        if (s->state == SCONN_CONNECTED && buf_len(&s->ibuf) == 0 && s->ibuf.cap > SCONN_IBUF_KEEP)
            buf_free(&s->ibuf);
        return;
    }
    if (nread == 0)
        return;
    if (nread == UV_EOF) {
        STATS_ADD(&s->server->stats, server_eof, 1);
        sconn_close(s, "connection closed by server", 0);
    } else {
        sconn_close(s, uv_strerror((int)nread), 1);
    }
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
        srv->backoff_ms = srv->backoff_ms ? RL_MIN(srv->backoff_ms * 2, SCONN_BACKOFF_MAX_MS)
                                          : SCONN_BACKOFF_MIN_MS;
        srv->retry_at_ms = uv_now(&srv->w->loop) + srv->backoff_ms;
        sconn_close(s, uv_strerror(status), 1);
        return;
    }
    s->state = SCONN_CONNECTED;
    srv->backoff_ms = 0;
    STATS_ADD(&srv->stats, server_connections, 1);
    if (!srv->addr.path) {
        uv_tcp_nodelay(&s->h.tcp, 1);
        if (srv->pool->cp->tcpkeepalive)
            uv_tcp_keepalive(&s->h.tcp, 1, 60);
    }
    int rc = uv_read_start(&s->h.stream, sconn_alloc_cb, sconn_read_cb);
    if (rc < 0) {
        sconn_close(s, uv_strerror(rc), 1);
        return;
    }
    worker_mark_sconn(srv->w, s);
}

static void sconn_start_connect(struct sconn *s, const struct sockaddr *sa)
{
    s->state = SCONN_CONNECTING;
    s->creq.data = s;
    int rc = uv_tcp_connect(&s->creq, &s->h.tcp, sa, sconn_connect_cb);
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

static struct sconn *sconn_open(struct server *srv, uint32_t slot)
{
    struct worker *w = srv->w;
    struct sconn *s = calloc(1, sizeof(*s));
    int rc;

    if (s == NULL)
        return NULL;
    s->server = srv;
    s->parser.item_size_max = srv->pool->cp->item_size_max;
    if (srv->addr.path)
        rc = uv_pipe_init(&w->loop, &s->h.pipe, 0);
    else
        rc = uv_tcp_init(&w->loop, &s->h.tcp);
    if (rc < 0) {
        free(s);
        return NULL;
    }
    uv_timer_init(&w->loop, &s->timer);
    s->h.handle.data = s;
    s->timer.data = s;
    s->closes_pending = 2;
    srv->conns[slot] = s;
    srv->nopen++;

    /* The hello (Redis AUTH/SELECT) goes first; its replies are swallowed. */
    const struct conf_pool *cp = srv->pool->cp;
    if (srv->pool->ops->server_hello) {
        int n = srv->pool->ops->server_hello(cp->redis_auth, cp->redis_db, &s->obuf);
        for (int i = 0; i < n; i++) {
            struct msg *m = msg_get(w);
            if (m == NULL)
                break;
            m->flags = MSG_F_INTERNAL;
            m->server = srv;
            sconn_enqueue(s, m);
            m->deadline_ms = 0;
        }
    }

    if (srv->addr.path) {
        s->state = SCONN_CONNECTING;
        s->creq.data = s;
        uv_pipe_connect(&s->creq, &s->h.pipe, srv->addr.path, sconn_connect_cb);
        return s;
    }
    struct sockaddr_storage ss;
    if (uv_ip4_addr(srv->addr.host, srv->addr.port, (struct sockaddr_in *)&ss) == 0 ||
        uv_ip6_addr(srv->addr.host, srv->addr.port, (struct sockaddr_in6 *)&ss) == 0) {
        sconn_start_connect(s, (struct sockaddr *)&ss);
        return s;
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
    rc = uv_getaddrinfo(&w->loop, &s->gai, sconn_gai_cb, srv->addr.host, port, &hints);
    if (rc < 0) {
        s->closes_pending--;
        s->resolving = 0;
        sconn_connect_cb(&s->creq, rc);
    }
    return s;
}

struct sconn *server_pick(struct server *srv, uint64_t hint, const char **reason)
{
    uint32_t slot = srv->nconns == 1 ? 0 : (uint32_t)(hint % srv->nconns);
    struct sconn *s = srv->conns[slot];

    if (s != NULL && s->state != SCONN_CLOSING)
        return s;
    if (s != NULL) {
        *reason = "connection closing";
        return NULL;
    }
    if (uv_now(&srv->w->loop) < srv->retry_at_ms) {
        /* The last connect failed moments ago: this request fails too, and
         * counts, so the server goes down after server_failure_limit
         * requests rather than after that many reconnect rounds. */
        *reason = "server unreachable (reconnecting)";
        server_failed(srv, *reason);
        return NULL;
    }
    s = sconn_open(srv, slot);
    if (s == NULL) {
        *reason = "out of memory";
        return NULL;
    }
    if (s->state == SCONN_CLOSING) {   /* failed synchronously */
        *reason = "connect failed";
        return NULL;
    }
    return s;
}

void server_probe(struct server *srv)
{
    struct worker *w = srv->w;
    const char *reason = NULL;
    int timeout = srv->pool->cp->timeout_ms > 0 ? srv->pool->cp->timeout_ms : 1000;

    srv->retry_at_ms = 0;           /* the probe is the retry */
    struct sconn *s = server_pick(srv, 0, &reason);
    struct msg *m = s ? msg_get(w) : NULL;
    if (s == NULL || m == NULL || buf_append_str(&s->obuf, srv->pool->ops->probe) < 0) {
        if (m != NULL)
            msg_put(w, m);
        server_failed(srv, reason ? reason : "probe not sent");
        return;
    }
    m->flags = MSG_F_INTERNAL | MSG_F_PROBE;
    m->cmd = srv->pool->ops->probe_cmd;
    sconn_enqueue(s, m);
    m->deadline_ms = uv_now(&w->loop) + (uint64_t)timeout;
    if (!s->timer_armed) {
        uv_timer_start(&s->timer, sconn_timer_cb, (uint64_t)timeout, 0);
        s->timer_armed = 1;
    }
    worker_mark_sconn(w, s);
    log_info("probing server '%s' (%s)", srv->label, srv->addr.text);
}

void server_preconnect(struct server *srv)
{
    const char *reason;
    for (uint32_t i = 0; i < srv->nconns; i++)
        (void)server_pick(srv, i, &reason);
}

/* ------------------------------------------------------------------ queue and timeouts */

void sconn_enqueue(struct sconn *s, struct msg *m)
{
    struct server *srv = s->server;
    int timeout = srv->pool->cp->timeout_ms;

    m->sconn = s;
    m->server = srv;
    m->flags |= MSG_F_SENT;
    m->snext = NULL;
    if (s->tail)
        s->tail->snext = m;
    else
        s->head = m;
    s->tail = m;
    s->join_tail = (m->flags & MSG_F_JKEY) ? m : NULL;  /* anything else ends an open get line */
    s->inflight++;
    if (!(m->flags & MSG_F_INTERNAL))
        STATS_ADD(&srv->stats, in_flight, 1);
    if (srv->pool->cp->balance_factor > 0 && !(m->flags & MSG_F_INTERNAL) && srv->health)
        health_inflight_add(srv->health);
    if (timeout > 0 && !(m->flags & MSG_F_INTERNAL)) {
        m->deadline_ms = uv_now(&srv->w->loop) + (uint64_t)timeout;
        if (!s->timer_armed) {
            uv_timer_start(&s->timer, sconn_timer_cb, (uint64_t)timeout, 0);
            s->timer_armed = 1;
        }
    }
}

int sconn_write_joinable(struct sconn *s, const struct proto_ops *ops, struct msg *m,
                         const struct proto_req *req, const char *buf)
{
    const struct proto_key *k = &req->keys[0];
    int rc = 0;

    if (k->len > UINT8_MAX || buf_reserve(&s->jkeys, k->len + 1u) != 0)
        return -ENOMEM;
    if (s->join_tail != NULL && s->join_n < ops->join_keys_max &&
        (rc = ops->join(req, buf, &s->obuf, s->join_len)) > 0) {
        s->join_tail->flags |= MSG_F_JOINED;
        s->join_len = (uint32_t)rc;
        s->join_n++;
        STATS_ADD(&s->server->stats, joined_gets, 1);
    } else if (rc == 0) {
        size_t before = buf_len(&s->obuf);
        if ((rc = ops->forward(req, buf, &s->obuf)) == 0) {
            s->join_len = (uint32_t)(buf_len(&s->obuf) - before);
            s->join_n = 1;
        }
    }
    if (rc < 0)
        return rc;
    char *e = buf_wptr(&s->jkeys);              /* room reserved above */
    e[0] = (char)(uint8_t)k->len;
    memcpy(e + 1, buf + k->off, k->len);
    s->jkeys.wpos += k->len + 1u;
    m->flags |= MSG_F_JKEY;
    return 0;
}

static struct msg *sconn_pop(struct sconn *s)
{
    struct msg *m = s->head;

    s->head = m->snext;
    if (s->head == NULL)
        s->tail = NULL;
    m->snext = NULL;
    if (m->flags & MSG_F_JKEY) {        /* its key entry leaves with it */
        buf_consume(&s->jkeys, 1u + (uint8_t)*buf_rptr(&s->jkeys));
        if (buf_len(&s->jkeys) == 0 && s->jkeys.cap > SCONN_IBUF_KEEP)
            buf_free(&s->jkeys);        /* a long pipeline's keys: do not keep the space */
    }
    m->flags &= (uint16_t)~(MSG_F_SENT | MSG_F_JKEY | MSG_F_JOINED);
    s->inflight--;
    if (!(m->flags & MSG_F_INTERNAL))
        STATS_ADD(&s->server->stats, in_flight, -1);
    if (s->server->pool->cp->balance_factor > 0 && !(m->flags & MSG_F_INTERNAL) &&
        s->server->health)
        health_inflight_sub(s->server->health);
    return m;
}

/* Give the message its error reply now (timeout, failure). */
static void msg_answer_error(struct worker *w, struct msg *m, enum proto_err code,
                             const char *reason);

static void sconn_timer_cb(uv_timer_t *t)
{
    struct sconn *s = t->data;
    struct server *srv = s->server;
    struct worker *w = srv->w;
    uint64_t now = uv_now(&w->loop);
    int timeout = srv->pool->cp->timeout_ms;

    s->timer_armed = 0;
    if (timeout <= 0)
        return;
    struct msg *m = s->head;
    /* A server that has sat on a timed-out request for 4 timeouts is hung:
     * close it so the requests behind it fail fast instead of piling up. */
    if (m != NULL && (m->flags & MSG_F_ZOMBIE) && m->deadline_ms + 3u * (uint64_t)timeout <= now) {
        sconn_close(s, "server hung after a timeout", 1);
        return;
    }
    for (; m != NULL; m = m->snext) {
        if (m->flags & MSG_F_PROBE) {
            if (m->deadline_ms <= now) {
                sconn_close(s, "health probe timed out", 1);
                return;
            }
            break;
        }
        if (m->flags & (MSG_F_ZOMBIE | MSG_F_INTERNAL))
            continue;
        if (m->deadline_ms > now)
            break;
        STATS_ADD(&srv->stats, server_timedout, 1);
        server_failed(srv, "timeout");
        msg_answer_error(w, m, PROTO_ERR_TIMEOUT, "timeout");
        m->flags |= MSG_F_ZOMBIE;
    }
    uint64_t next = (uint64_t)timeout;
    if (m != NULL)
        next = m->deadline_ms > now ? m->deadline_ms - now : 1;
    else if (s->head != NULL)
        next = (uint64_t)timeout;   /* re-check the zombie at the head */
    if (s->head != NULL) {
        uv_timer_start(&s->timer, sconn_timer_cb, next, 0);
        s->timer_armed = 1;
    }
}

/* ------------------------------------------------------------------ completion */

/* A message left every queue it was in: free or hand on. */
static void msg_release(struct worker *w, struct msg *m)
{
    if (m->flags & MSG_F_SENT)
        return;                 /* still owed a reply by a server */
    if (m->client != NULL)
        return;                 /* still in its client's queue */
    if ((m->flags & MSG_F_FRAG) && m->parent != NULL)
        return;                 /* the parent frees it after merging */
    if (m->nfrag_pending > 0)
        return;                 /* orphaned parent: fragments still out */
    if (m->frags != NULL) {
        for (uint32_t i = 0; i < m->nfrag; i++) {
            struct msg *f = m->frags[i];
            if (f == NULL)
                continue;
            f->parent = NULL;
            msg_release(w, f);
        }
    }
    msg_put(w, m);
}

/* Copies of one request: the client gets the first copy (in preference
 * order) that did not fail, else the first copy's error. */
static void parent_pick_replica(struct msg *p)
{
    struct msg *pick = NULL;
    for (uint32_t i = 0; i < p->nfrag && pick == NULL; i++)
        if (p->frags[i] != NULL && (p->frags[i]->flags & MSG_F_DONE) &&
            !(p->frags[i]->flags & MSG_F_ERROR))
            pick = p->frags[i];
    for (uint32_t i = 0; i < p->nfrag && pick == NULL; i++)
        if (p->frags[i] != NULL && (p->frags[i]->flags & MSG_F_DONE))
            pick = p->frags[i];
    p->rsp.rpos = p->rsp.wpos = 0;
    if (pick != NULL)
        buf_swap(&p->rsp, &pick->rsp);
}

static void parent_merge(struct worker *w, struct msg *p)
{
    struct client *c = p->client;

    if (c == NULL) {            /* orphan: nobody wants the merge */
        msg_release(w, p);
        return;
    }
    if (p->flags & MSG_F_REPLICA) {
        parent_pick_replica(p);
    } else {
        const struct proto_ops *ops = c->pool->ops;
        struct buf *bufs[p->nfrag ? p->nfrag : 1];
        uint64_t items = 0;
        for (uint32_t i = 0; i < p->nfrag; i++) {
            bufs[i] = &p->frags[i]->rsp;
            items += p->frags[i]->items;
        }
        struct proto_env env;
        if (p->key_frag == NULL && ops->merge_env != NULL)
            client_env(c, &env);
        if ((p->key_frag == NULL && ops->merge_env != NULL
                 ? ops->merge_env(p->cmd, p->reqcopy.data, bufs, p->nfrag, &env, &p->rsp)
                 : ops->merge(p->cmd, p->reqcopy.data, p->keys, p->nkeys, p->key_frag, bufs,
                              p->nfrag, &p->rsp)) < 0) {
            p->rsp.rpos = p->rsp.wpos = 0;
            ops->error_reply(PROTO_ERR_SERVER, "malformed reply from a server", &p->rsp);
            STATS_ADD(&c->pool->stats, forward_error, 1);
        }
        if (p->rflags & PROTO_RF_RETRIEVAL) {
            STATS_ADD(&c->pool->stats, hits, items);
            STATS_ADD(&c->pool->stats, misses, p->nkeys - items);
        }
    }
    for (uint32_t i = 0; i < p->nfrag; i++) {
        struct msg *f = p->frags[i];
        if (f == NULL)
            continue;       /* an all-async copy already detached */
        p->frags[i] = NULL;
        f->parent = NULL;
        msg_release(w, f);
    }
    p->flags |= MSG_F_DONE;
    c->held_bytes += buf_len(&p->rsp);
    client_advance(c);
}

/* The reply of m is complete (or m was answered locally with an error). */
static void msg_done(struct worker *w, struct msg *m)
{
    if (m->flags & MSG_F_DONE) {     /* a zombie's late reply */
        msg_release(w, m);
        return;
    }
    m->flags |= MSG_F_DONE;
    if (m->flags & MSG_F_FRAG) {
        struct msg *p = m->parent;
        if (p == NULL) {
            msg_release(w, m);
            return;
        }
        /* all-async: the first copy to succeed answers; the others finish
         * on their own (orphans, freed when answered) */
        if ((p->flags & MSG_F_ASYNC) && !(m->flags & MSG_F_ERROR) && p->client != NULL) {
            p->nfrag_pending = 0;
            for (uint32_t i = 0; i < p->nfrag; i++) {
                struct msg *f = p->frags[i];
                if (f != NULL && f != m && !(f->flags & MSG_F_DONE)) {
                    f->parent = NULL;
                    p->frags[i] = NULL;
                }
            }
            parent_merge(w, p);
            return;
        }
        if (--p->nfrag_pending == 0)
            parent_merge(w, p);
        return;
    }
    if (m->client != NULL) {
        client_advance(m->client);
        return;
    }
    msg_release(w, m);
}

static void msg_answer_error(struct worker *w, struct msg *m, enum proto_err code,
                             const char *reason)
{
    if (m->flags & (MSG_F_DONE | MSG_F_INTERNAL))
        return;
    const struct proto_ops *ops = m->server ? m->server->pool->ops : NULL;
    struct client *c = m->client;
    if (ops == NULL && c != NULL)
        ops = c->pool->ops;
    m->flags |= MSG_F_ERROR;
    if (m->flags & MSG_F_FRAG) {
        if (m->parent != NULL && ops != NULL) {
            m->rsp.rpos = m->rsp.wpos = 0;
            ops->error_reply(code, reason, &m->rsp);
        }
    } else if (c != NULL && !(m->flags & MSG_F_NOREPLY)) {
        if (m->flags & MSG_F_STREAMED) {
            /* Half a reply already went out: the stream cannot be mended. */
            c->eof = 1;
            c->closing = 1;
        } else {
            c->held_bytes -= RL_MIN(c->held_bytes, buf_len(&m->rsp));
            m->rsp.rpos = m->rsp.wpos = 0;
            ops->error_reply(code, reason, &m->rsp);
            c->held_bytes += buf_len(&m->rsp);
        }
    }
    msg_done(w, m);
}

void server_fail_msg(struct worker *w, struct msg *m, enum proto_err code, const char *reason)
{
    msg_answer_error(w, m, code, reason);
}

void server_msg_done(struct worker *w, struct msg *m)
{
    msg_done(w, m);
}

/* ------------------------------------------------------------------ replies */

static void deliver(struct sconn *s, struct msg *m, const char *p, size_t n, int drop)
{
    if (drop || (m->flags & (MSG_F_INTERNAL | MSG_F_ZOMBIE | MSG_F_NOREPLY | MSG_F_DONE)))
        return;
    if (m->flags & MSG_F_FRAG) {
        if (m->parent != NULL && buf_append(&m->rsp, p, n) < 0)
            m->flags |= MSG_F_ERROR;
        return;
    }
    struct client *c = m->client;
    if (c == NULL || c->closing)
        return;
    /* A reply is held until complete, so a server that fails mid-reply
     * leaves the client a clean error instead of half a value; only a
     * large value streams straight out (its request being the head). */
    if (c->head == m && ((m->flags & MSG_F_STREAMED) || s->body_big) &&
        !(m->flags & (MSG_F_WARM | MSG_F_WARM2))) {
        if (!(m->flags & MSG_F_STREAMED) && buf_len(&m->rsp) > 0) {
            client_write_bytes(c, buf_rptr(&m->rsp), buf_len(&m->rsp));
            c->held_bytes -= RL_MIN(c->held_bytes, buf_len(&m->rsp));
            m->rsp.rpos = m->rsp.wpos = 0;
        }
        m->flags |= MSG_F_STREAMED;
        client_write_bytes(c, p, n);
        return;
    }
    if (buf_append(&m->rsp, p, n) == 0)
        c->held_bytes += n;
}

/* warm-up, first step: the new owner missed; ask the previous owner (the
 * protocol's fetch: for memcached a meta get for value, flags and TTL).
 * 1 when re-sent, 0 to answer the miss. */
static int server_warm_retry(struct worker *w, struct msg *m)
{
    struct server *old = m->warm;
    struct server *now = m->server;
    const char *reason = NULL;
    struct sconn *s = server_pick(old, 0, &reason);
    uint16_t fetch_cmd;

    if (s == NULL || now->pool->ops->warm_fetch(m->warm_cmd, m->reqcopy.data,
                                                buf_len(&m->reqcopy), &s->obuf, &fetch_cmd) < 0)
        return 0;
    if (m->client != NULL)
        m->client->held_bytes -= RL_MIN(m->client->held_bytes, buf_len(&m->rsp));
    m->rsp.rpos = m->rsp.wpos = 0;
    m->flags = (uint16_t)((m->flags & ~MSG_F_WARM) | MSG_F_WARM2);
    m->warm = now;                  /* where a hit gets copied */
    m->cmd = fetch_cmd;
    m->items = 0;
    STATS_ADD(&now->pool->stats, warm_retries, 1);
    sconn_enqueue(s, m);
    worker_mark_sconn(w, s);
    return 1;
}

/* warm-up, second step: the previous owner answered the fetch. A hit
 * becomes the client's reply and is copied to the new owner (memcached:
 * with its flags and TTL); anything else is the miss the client would have
 * seen. */
static void server_warm_finish(struct worker *w, struct msg *m)
{
    struct buf client, copy;
    struct client *c = m->client;
    uint16_t copy_cmd = 0;

    buf_init(&client);
    buf_init(&copy);
    int rc = m->warm->pool->ops->warm_reply(m->warm_cmd, buf_rptr(&m->rsp), buf_len(&m->rsp),
                                            m->reqcopy.data, buf_len(&m->reqcopy), &client,
                                            &copy, &copy_cmd);
    c->held_bytes -= RL_MIN(c->held_bytes, buf_len(&m->rsp));
    buf_free(&m->rsp);
    m->cmd = m->warm_cmd;
    m->rsp = client;            /* the hit, the miss, or nothing when malformed */
    if (rc == 1) {
        m->items = 1;
        STATS_ADD(&m->warm->pool->stats, warm_hits, 1);
        const char *reason = NULL;
        struct sconn *s = server_pick(m->warm, 0, &reason);
        struct msg *cp = s ? msg_get(w) : NULL;
        if (cp != NULL && buf_append(&s->obuf, buf_rptr(&copy), buf_len(&copy)) == 0) {
            cp->flags = MSG_F_INTERNAL;     /* its reply is swallowed */
            cp->cmd = copy_cmd;
            sconn_enqueue(s, cp);
            worker_mark_sconn(w, s);
        } else if (cp != NULL) {
            msg_put(w, cp);
        }
    } else {
        if (rc < 0 && buf_len(&m->rsp) == 0)
            c->pool->ops->error_reply(PROTO_ERR_SERVER, "malformed reply from a server", &m->rsp);
        m->items = 0;
    }
    buf_free(&copy);
    c->held_bytes += buf_len(&m->rsp);
}

static void sconn_reply_done(struct sconn *s)
{
    struct server *srv = s->server;
    struct worker *w = srv->w;
    struct msg *m = sconn_pop(s);

    if (m->flags & MSG_F_INTERNAL) {
        if (m->flags & MSG_F_PROBE)
            server_succeeded(srv);
        else if (s->hello_pending)
            s->hello_pending--;
        msg_put(w, m);
        return;
    }
    server_succeeded(srv);
    STATS_ADD(&srv->stats, responses, 1);
    if (w->snap->conf->global.latency_histograms) {
        uint64_t now_us = worker_now_us(w);
        histogram_record(&srv->latency, now_us > m->start_us ? now_us - m->start_us : 0);
    }
    if (m->flags & (MSG_F_WARM | MSG_F_WARM2)) {
        int live = m->client != NULL && !(m->flags & (MSG_F_ZOMBIE | MSG_F_DONE | MSG_F_ERROR));
        if ((m->flags & MSG_F_WARM) && live && m->items == 0) {
            STATS_ADD(&srv->stats, misses, 1);
            if (server_warm_retry(w, m))
                return;
        } else if ((m->flags & MSG_F_WARM2) && live) {
            server_warm_finish(w, m);
        }
        m->flags &= (uint16_t)~(MSG_F_WARM | MSG_F_WARM2);
        m->rflags |= PROTO_RF_RETRIEVAL;
    }
    if (m->rflags & PROTO_RF_RETRIEVAL) {
        STATS_ADD(&srv->stats, hits, m->items);
        STATS_ADD(&srv->stats, misses, (m->nkeys > m->items) ? m->nkeys - m->items : 0);
        if (!(m->flags & MSG_F_FRAG) && m->client != NULL) {
            STATS_ADD(&m->client->pool->stats, hits, m->items);
            STATS_ADD(&m->client->pool->stats, misses,
                     (m->nkeys > m->items) ? m->nkeys - m->items : 0);
        }
    }
    msg_done(w, m);
    if (srv->removed && s->head == NULL)
        sconn_close(s, "server removed by a reload, drained", 0);
}

/*
 * A reply unit for m, a get whose key is at the front of s->jkeys (see
 * client_enqueue): 1 when the unit is m's (its item, or for the last key of
 * a joined command also its END or error), 0 when m was joined to a later
 * key and its part of the reply is over (a miss, or an error line that ends
 * the whole command), -1 when the server sent an item m did not ask for.
 * Items come back in the order the keys were sent, misses absent, so the
 * first item with m's key is m's; matching the key byte for byte means a
 * reply can never reach another request's client.
 */
static int sconn_join_match(struct sconn *s, const struct msg *m, const char *p,
                            const struct proto_rsp *rsp)
{
    const char *e = buf_rptr(&s->jkeys);
    if (buf_len(&s->jkeys) == 0 || buf_len(&s->jkeys) < 1u + (uint8_t)e[0])
        return -1;                      /* the queue and its keys disagree: fail safe */
    uint32_t klen = (uint8_t)e[0];
    int item = (rsp->flags & PROTO_SF_ITEM) != 0;
    int mine = item && m->items == 0 && rsp->key.len == klen &&
               memcmp(p + rsp->key.off, e + 1, klen) == 0;

    if (m->flags & MSG_F_JOINED)
        return mine;
    return item && !mine ? -1 : 1;
}

/* m's part of a joined get is over: its reply ends as a lone get's would. */
static void sconn_join_done(struct sconn *s, struct msg *m)
{
    const char *end = s->server->pool->ops->join_miss;

    deliver(s, m, end, strlen(end), 0);
    sconn_reply_done(s);
}

static void sconn_process(struct sconn *s)
{
    struct server *srv = s->server;
    const struct proto_ops *ops = srv->pool->ops;

    while (s->state == SCONN_CONNECTED && buf_len(&s->ibuf) > 0) {
        const char *p = buf_rptr(&s->ibuf);
        size_t len = buf_len(&s->ibuf);

        if (s->body_left > 0) {
            size_t n = (size_t)RL_MIN((uint64_t)len, s->body_left);
            deliver(s, s->cur, p, n, s->body_drop);
            if (!(s->cur->flags & MSG_F_INTERNAL))
                STATS_ADD(&srv->stats, response_bytes, n);
            buf_consume(&s->ibuf, n);
            s->body_left -= n;
            if (s->body_left == 0 && s->body_final) {
                struct msg *done = s->cur;
                int join_end = s->body_join_end;
                s->cur = NULL;
                s->body_join_end = 0;
                if (join_end)
                    sconn_join_done(s, done);
                else
                    sconn_reply_done(s);
            }
            continue;
        }
        struct msg *m = s->head;
        if (m == NULL) {
            log_hexdump(LOG_WARN_, __FILE__, __LINE__, "unsolicited reply from server", p, len);
            sconn_close(s, "unsolicited reply from server", 1);
            return;
        }
        struct proto_rsp rsp;
        int rc = ops->parse_rsp(&s->parser, p, len, m->cmd, m->rflags, &rsp);
        if (rc == 0)
            break;
        if (rc < 0) {
            log_hexdump(LOG_WARN_, __FILE__, __LINE__, "malformed reply from server", p, len);
            sconn_close(s, "malformed reply from server", 1);
            return;
        }
        int join_end = 0;
        if (m->flags & MSG_F_JKEY) {
            int j = sconn_join_match(s, m, p, &rsp);
            if (j < 0) {
                log_hexdump(LOG_WARN_, __FILE__, __LINE__, "server returned a key not asked for",
                            p, rsp.hdr_len);   /* (or the key queue is out of step) */
                sconn_close(s, "server returned a key not asked for", 1);
                return;
            }
            if (j == 0) {
                /* m's part of a joined get ended before this unit, which is
                 * left for the next member: m missed, or an error line ends
                 * the whole command and every member gets a copy. */
                if (rsp.flags & PROTO_SF_ERROR) {
                    deliver(s, m, p, rsp.hdr_len, 0);
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
        if ((m->flags & MSG_F_INTERNAL) && (rsp.flags & PROTO_SF_ERROR))
            log_hexdump(LOG_ERR_, __FILE__, __LINE__, "server refused the connection hello", p,
                        rsp.hdr_len);
        s->body_big = rsp.body_len > SCONN_STREAM_MIN;
        deliver(s, m, p, rsp.hdr_len, drop);
        if (!(m->flags & MSG_F_INTERNAL))   /* the proxy's own AUTH/SELECT/probes */
            STATS_ADD(&srv->stats, response_bytes, rsp.hdr_len);
        buf_consume(&s->ibuf, rsp.hdr_len);
        if (rsp.body_len > 0) {
            s->cur = m;
            s->body_left = rsp.body_len;
            s->body_drop = drop;
            s->body_final = join_end || (rsp.flags & PROTO_SF_FINAL) != 0;
            s->body_join_end = join_end;
            continue;
        }
        if (join_end)
            sconn_join_done(s, m);
        else if (rsp.flags & PROTO_SF_FINAL)
            sconn_reply_done(s);
    }
}

/* ------------------------------------------------------------------ writes */

static void sconn_write_cb(uv_write_t *req, int status)
{
    struct sconn *s = req->data;

    s->writing = 0;
    s->wbuf.rpos = s->wbuf.wpos = 0;
    if (s->state == SCONN_CLOSING)
        return;
    if (status < 0) {
        sconn_close(s, uv_strerror(status), 1);
        return;
    }
    if (buf_len(&s->obuf) > 0)
        sconn_flush(s);
}

void sconn_flush(struct sconn *s)
{
    if (s->state != SCONN_CONNECTED || s->writing || buf_len(&s->obuf) == 0)
        return;
    s->join_tail = NULL;                /* what is sent can no longer be joined */
    int n = worker_try_send(&s->h.stream, buf_rptr(&s->obuf), RL_MIN(buf_len(&s->obuf), 1u << 30));
    if (n > 0)
        buf_consume(&s->obuf, (size_t)n);
    else if (n < 0 && n != UV_EAGAIN) {
        sconn_close(s, uv_strerror(n), 1);
        return;
    }
    if (buf_len(&s->obuf) == 0)
        return;
    buf_swap(&s->obuf, &s->wbuf);
    uv_buf_t b = uv_buf_init(buf_rptr(&s->wbuf), (unsigned)buf_len(&s->wbuf));
    s->wreq.data = s;
    int rc = uv_write(&s->wreq, &s->h.stream, &b, 1, sconn_write_cb);
    if (rc < 0) {
        sconn_close(s, uv_strerror(rc), 1);
        return;
    }
    s->writing = 1;
}

/* ------------------------------------------------------------------ close */

static void sconn_close(struct sconn *s, const char *reason, int is_error)
{
    struct server *srv = s->server;
    struct worker *w = srv->w;

    if (s->state == SCONN_CLOSING)
        return;
    int was_connected = s->state == SCONN_CONNECTED;
    s->state = SCONN_CLOSING;
    for (uint32_t i = 0; i < srv->nconns; i++)
        if (srv->conns[i] == s)
            srv->conns[i] = NULL;
    if (was_connected)
        STATS_ADD(&srv->stats, server_connections, -1);
    if (is_error)
        STATS_ADD(&srv->stats, server_err, 1);
    if (!srv->removed && (is_error || s->head != NULL))
        server_failed(srv, reason);
    if (s->head != NULL)
        log_warn("server '%s' (%s): %s; failing %u in-flight request(s)", srv->label,
                 srv->addr.text, reason, s->inflight);
    /* Unlink from the worker's dirty list before anything can free us. */
    if (s->dirty) {
        struct sconn **pp = &w->dirty_sconns;
        while (*pp != NULL && *pp != s)
            pp = &(*pp)->dirty_next;
        if (*pp == s)
            *pp = s->dirty_next;
        s->dirty = 0;
    }
    while (s->head != NULL) {
        struct msg *m = sconn_pop(s);
        if (m->flags & MSG_F_INTERNAL) {
            msg_put(w, m);
            continue;
        }
        if (m->flags & (MSG_F_ZOMBIE | MSG_F_DONE)) {
            msg_release(w, m);
            continue;
        }
        msg_answer_error(w, m, PROTO_ERR_SERVER, reason);
    }
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, sconn_on_close);
    if (s->resolving)
        uv_cancel((uv_req_t *)&s->gai);   /* its callback drops the last reference */
    uv_close(&s->h.handle, sconn_on_close);
}
