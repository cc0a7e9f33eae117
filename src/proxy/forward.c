/* Forwarding: a parsed request becomes messages on server connections (one, fragments, copies, broadcast), or is answered here. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement/cluster_map.h"
#include "state/health.h"
#include "lib/log.h"
#include "proxy/client.h"
#include "proxy/cluster_worker.h"
#include "proxy/forward.h"
#include "proxy/introspect.h"
#include "proxy/join.h"
#include "proxy/msg.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/snapshot.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "stats/hotkeys.h"
#include "lib/util.h"

/* ------------------------------------------------------------------ messages */

struct msg *forward_msg(struct client *c, const struct proto_req *req)
{
    struct msg *m = msg_get(c->w);
    if (m == NULL)
        return NULL;
    STATS_ADD(&c->pool->stats, requests, 1);
    m->role = MSG_REQUEST;
    m->cmd = req->cmd;
    m->rflags = req->flags;
    m->db = client_db(c);
    m->nkeys = req->nkeys;
    /* every request is timed (commandstats, SLOWLOG: introspect_done reads the clock at
     * its answer anyway, and the worker's clock is read once an iteration) */
    m->start_us = worker_now_us(c->w);
    introspect_capture(c, m, req);
    if (req->flags & PROTO_RF_NOREPLY) {
        m->flags |= MSG_F_NOREPLY;      /* not in the reply order at all */
        return m;
    }
    m->client = c;
    queue_insert_tail(&c->msgs, &m->cq);
    c->nmsgs++;
    return m;
}

void forward_retract(struct client *c, struct msg *m)
{
    STATS_ADD(&c->pool->stats, requests, -1);
    if (m->client != NULL) {
        msg_uncharge(m);
        queue_remove(&m->cq);
        c->nmsgs--;
        m->client = NULL;
    }
    msg_put(c->w, m);
}

/* m is answered here, not by a server: its reply (if any) is in m->rsp. */
void forward_answer(struct client *c, struct msg *m)
{
    if (!(m->flags & MSG_F_NOREPLY))
        c->held_bytes += buf_len(&m->rsp);
    msg_complete(c->w, m);
}

/*
 * Answer m here with a protocol error (it was never sent), counted by why: a refusal of
 * what the client asked (keys on different servers, a bound of the proxy, an aborted
 * transaction's commit, counted in transactions_aborted) is the application's doing and
 * has a counter of its own; only a request the proxy could not forward (no server, no
 * connection, no memory) is a forward_error, which the shipped alerts watch.
 */
void forward_refuse(struct client *c, struct msg *m, enum proto_err code, const char *reason)
{
    switch (code) {
    case PROTO_ERR_CROSSSLOT:
    case PROTO_ERR_CROSSSLOT_SLOT:
        STATS_ADD(&c->pool->stats, crossslot, 1);
        break;
    case PROTO_ERR_LIMIT:
        STATS_ADD(&c->pool->stats, refused_limit, 1);
        break;
    case PROTO_ERR_TARGET:
        STATS_ADD(&c->pool->stats, refused_commands, 1);
        break;
    case PROTO_ERR_ABORTED:
        break;
    default:
        STATS_ADD(&c->pool->stats, forward_error, 1);
        break;
    }
    msg_fail(c->w, m, code, reason);
}

/* Answer m here with a protocol error: a command the proxy does not serve there. */
void forward_refuse_command(struct client *c, struct msg *m, enum proto_err code,
                            const char *reason)
{
    STATS_ADD(&c->pool->stats, refused_commands, 1);
    msg_fail(c->w, m, code, reason);
}

int forward_keys_together(struct client *c, struct wpool *pool, struct msg *m,
                          const struct route_key *rk, uint32_t nkeys)
{
    for (uint32_t i = 1; i < nkeys; i++) {
        if (!route_key_together(&pool->view, &rk[i], &rk[0])) {   /* a cluster: one slot */
            forward_refuse(c, m, pool->view.cluster ? PROTO_ERR_CROSSSLOT_SLOT : PROTO_ERR_CROSSSLOT,
                           "keys in request don't hash to the same server");
            return 0;
        }
    }
    return 1;
}

static void forward_fail_route(struct client *c, struct wpool *pool, struct msg *m,
                               const struct route *rt)
{
    char reason[300];

    if (rt->down != ROUTE_NONE)
        snprintf(reason, sizeof(reason), "server %s is down", pool->servers[rt->down]->label);
    else
        snprintf(reason, sizeof(reason), "no live server for this key");
    forward_refuse(c, m, rt->err, reason);
}

/* ------------------------------------------------------------------ keys and routes */

/* The bytes key k is placed by, decoded into dec when the protocol needs it. */
static void forward_key(const struct wpool *pool, const struct proto_req *req, const char *buf,
                        uint32_t k, char *dec, struct route_key *rk)
{
    if ((req->flags & PROTO_RF_KEYBYTES) && pool->ops->key_bytes != NULL) {
        rk->bytes = pool->ops->key_bytes(req, buf, k, dec, &rk->len);
    } else {
        rk->bytes = buf + req->keys[k].off;
        rk->len = req->keys[k].len;
    }
}

void forward__key(const struct wpool *pool, const struct proto_req *req, const char *buf,
                  uint32_t k, char *dec, struct route_key *rk)
{
    forward_key(pool, req, buf, k, dec, rk);
}

/* The pool a key belongs to by the client pool's `routes:` rules. */
static struct wpool *forward_key_pool(struct client *c, const struct route_key *rk)
{
    struct wpool *pool = c->pool;
    if (pool->cp->nroutes == 0)
        return pool;
    uint32_t i = route_rule_pool(&pool->view, rk->bytes, rk->len);
    if (i == ROUTE_NONE || i >= c->w->npools || c->w->pools[i] == NULL)
        return pool;        /* no rule, or its pool failed to open in this worker */
    return c->w->pools[i];
}

/* Carry out what routing asked for besides the destination: counters, a
 * probe of a down owner whose retry time may have come, the spill memory. */
static void forward_route_effects(struct client *c, struct wpool *pool, const struct route *rt,
                                  const struct route_key *rk)
{
    if (rt->events == 0 && rt->probe == ROUTE_NONE)
        return;                         /* the owner, up: nothing to do */
    if (rt->events & ROUTE_EV_FAILOVER)
        STATS_ADD(&pool->stats, failovers, 1);
    if (rt->events & ROUTE_EV_FAIL_OPEN)
        STATS_ADD(&pool->stats, fail_open, 1);
    if (rt->events & ROUTE_EV_RR)
        c->w->rr++;
    if ((rt->events & ROUTE_EV_SPILL) && rt->kind == ROUTE_SEND) {
        STATS_ADD(&pool->servers[rt->to[0]]->stats, spills, 1);
        route_spill_note(&pool->view, rk, rt->to[0], util_now_ms());
    }
    if (rt->probe != ROUTE_NONE && health_try_probe(pool->view.health[rt->probe], util_now_ms()))
        server_probe(pool->servers[rt->probe]);
}

/* The route is not the plain one and the pool has stages that look at routes: they see
 * it, and one that changed where the request goes (a write remembered for a server that
 * came back meanwhile) has it routed once more. r: the request as the stages see it, or
 * NULL when the pool's stages look only at routes (then it is built here). */
static void __attribute__((noinline)) forward_route_staged(struct client *c, struct wpool *pool,
                                                           struct msg *m,
                                                           const struct proto_req *req,
                                                           const char *buf,
                                                           const struct route_key *rk,
                                                           struct route *rt, struct stage_req *r)
{
    struct stage_req here;

    if (r == NULL) {
        here = (struct stage_req){ .c = c, .pool = pool, .m = m, .req = req, .buf = buf,
                                   .rk = rk, .rt = rt };
        r = &here;
    }

    if (stage_routed(&pool->chain, r) != STAGE_AGAIN)
        return;
    route_request(&pool->view, &r->rk[0], req->flags, req->kind == PROTO_REQ_SINGLE,
                  (req->flags & PROTO_RF_NOKEY) != 0, c->w->rr, uv_now(&c->w->loop), r->rt);
    if (r->rt->events != 0 || r->rt->warm_from != ROUTE_NONE)
        stage_routed(&pool->chain, r);      /* once more, to mark the route taken */
}

/*
 * Route a SINGLE or SAME request m by its keys rk, into *rt; r is the request as the
 * pool's stages see it, or NULL. The decision's side effects are carried out once, for
 * the route taken.
 */
static inline void forward_route(struct client *c, struct wpool *pool, struct msg *m,
                                 const struct proto_req *req, const char *buf,
                                 const struct route_key *rk, struct route *rt,
                                 struct stage_req *r)
{
    if (req->flags & PROTO_RF_CHANNEL)
        route_channel(&pool->view, &rk[0], rt);        /* PUBLISH: to the owner only */
    else
        route_request(&pool->view, &rk[0], req->flags, req->kind == PROTO_REQ_SINGLE,
                      (req->flags & PROTO_RF_NOKEY) != 0, c->w->rr, uv_now(&c->w->loop), rt);
    if (__builtin_expect((rt->events != 0 || rt->warm_from != ROUTE_NONE) &&
                         (pool->chain.hooks & STAGE_H_ROUTED), 0))
        forward_route_staged(c, pool, m, req, buf, rk, rt, r);
    forward_route_effects(c, pool, rt, &rk[0]);
}

/* ------------------------------------------------------------------ writing */

/*
 * Write a request (or one fragment of it) to `via`, or to a shared
 * connection of srv when via is NULL, and queue m for its reply; the header
 * is rewritten by the protocol's forward() or frag_write(), `body` bytes of
 * the body are copied as they are. 0, or -1 with the error m is to be
 * answered with in *code and *reason (nothing was written then).
 */
int forward_write(struct wpool *pool, struct msg *m, struct server *srv, struct sconn *via,
                  uint64_t hint, const struct proto_req *req, const char *buf,
                  const uint32_t *idx, uint32_t n, enum forward_how how, uint64_t body,
                  struct stage_req *r, enum proto_err *code, const char **reason)
{
    struct sconn *s = via != NULL ? via : __builtin_expect(m->db == 0, 1)
                      ? server_pick(srv, hint, m->rflags, reason)
                      : server_pick_db(srv, hint, m->rflags, m->db, reason);

    m->server = srv;
    if (s == NULL) {
        *code = PROTO_ERR_SERVER;
        if (*reason == NULL)
            *reason = "no connection";
        return -1;
    }
    const struct proto_ops *ops = pool->ops;
    struct buf *out = &s->conn.obuf;
    size_t before = buf_len(out);
    int rc;
    /* stages see the bytes of a whole request (not a fragment, not a session's) */
    int staged = r != NULL && (pool->chain.hooks & STAGE_H_WRITE);
    int join = pool->cp->coalesce_gets && how == FORWARD_WHOLE && via == NULL &&
               m->role == MSG_REQUEST && m->warm == MSG_WARM_NONE && ops->joinable != NULL &&
               ops->joinable(req);
    if (join && !staged) {
        rc = join_write(s, ops, m, req, buf);
    } else {
        rc = how == FORWARD_FRAG ? ops->frag_write(req, buf, idx, n, out)
                                 : ops->forward(req, buf, out);
        if (rc == 0 && how == FORWARD_WHOLE) {
            if (staged) {
                rc = stage_write(&pool->chain, r, m, s, before);
                if (rc > 0) {
                    buf_truncate(out, before);
                    return 0;           /* a stage took it (it waits for an identical get) */
                }
            }
            if (rc == 0 && join) {
                buf_truncate(out, before);     /* joined to the connection's get */
                rc = join_write(s, ops, m, req, buf);
            } else if (rc == 0 && body > 0) {
                rc = buf_append(out, buf + req->hdr_len, (size_t)body);
            }
        }
    }
    if (rc == 0 && pool->retain_req)
        rc = buf_append(&m->req, buf_rptr(out) + before, buf_len(out) - before);
    if (rc < 0) {
        buf_truncate(out, before);
        buf_free(&m->req);
        *code = PROTO_ERR_NOMEM;
        *reason = "out of memory";
        return -1;
    }
    m->req_bytes = buf_len(out) - before;
    STATS_ADD(&srv->stats, requests, 1);
    STATS_ADD(&srv->stats, request_bytes, m->req_bytes);
    sconn_enqueue(s, m);
    if (r != NULL && (pool->chain.hooks & STAGE_H_QUEUED))
        stage_queued(&pool->chain, r, m, s);
    sconn_mark(pool->w, s);
    return 0;
}

/* Send one whole request to one server. 0, or -1 when m was answered with an
 * error instead (it may be gone then). */
static int forward_send(struct client *c, struct wpool *pool, struct msg *m, struct server *srv,
                        uint64_t hint, const struct proto_req *req, const char *buf,
                        struct stage_req *r)
{
    enum proto_err code;
    const char *reason = NULL;

    if (forward_write(pool, m, srv, NULL, hint, req, buf, NULL, 0, FORWARD_WHOLE, req->body_len,
                      r, &code, &reason) < 0) {
        forward_refuse(c, m, code, reason);
        return -1;
    }
    return 0;
}

/* A child of parent for nkeys of its keys (a fragment) or all (a copy). */
static struct msg *forward_new_child(struct worker *w, struct msg *parent, enum msg_role role,
                                     const struct proto_req *req, uint32_t nkeys)
{
    struct msg *fm = msg_get(w);
    if (fm == NULL)
        return NULL;
    fm->role = (uint8_t)role;
    fm->parent = parent;
    fm->cmd = req->cmd;
    fm->rflags = req->flags & (uint16_t)~PROTO_RF_NOREPLY;
    fm->db = parent->db;
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
static void forward_copies(struct client *c, struct wpool *pool, struct stage_req *r)
{
    struct worker *w = c->w;
    struct msg *m = r->m;
    const struct proto_req *req = r->req;
    const struct route *rt = r->rt;
    uint32_t n = rt->n;

    m->frags = calloc(n, sizeof(*m->frags));
    if (m->frags == NULL) {
        forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
        return;
    }
    m->flags |= MSG_F_COPIES | (rt->async ? MSG_F_ASYNC : 0);
    m->nfrag = n;
    m->nfrag_pending = n;
    STATS_ADD(&pool->stats, fragments, n);
    for (uint32_t f = 0; f < n; f++) {
        struct msg *fm = forward_new_child(w, m, MSG_COPY, req, req->nkeys);
        if (fm == NULL) {
            m->nfrag = f;
            m->nfrag_pending -= n - f;
            if (m->nfrag_pending == 0)
                forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
            return;
        }
        m->frags[f] = fm;
        struct server *srv = pool->servers[rt->to[f]];
        enum proto_err code;
        const char *reason = NULL;
        if (f == 0)
            fm->flags |= m->flags & MSG_F_FAILOVER;     /* a rejoining owner's failover server */
        if (forward_write(pool, fm, srv, NULL, f, req, r->buf, NULL, 0, FORWARD_WHOLE,
                          req->body_len, r, &code, &reason) < 0) {
            log_info("pool '%s': copy to server '%s' not sent: %s", pool->cp->name, srv->label,
                     reason);
            msg_fail(w, fm, code, reason);
        }
    }
}

/* ------------------------------------------------------------------ fan-out */

/*
 * Allocate the parent's merge state: the children array with room for the
 * merge's buffer pointers behind it, the key map with the key copies behind
 * it, and a copy of the header (merge reads the keys there). 0 or -ENOMEM.
 */
static int forward_fanout_alloc(struct msg *m, const struct proto_ops *ops,
                                const struct proto_req *req, const char *buf, uint32_t nfrag,
                                uint32_t nkeys)
{
    m->frags = calloc(nfrag, sizeof(*m->frags) + sizeof(struct buf *));
    if (m->frags == NULL)
        return -ENOMEM;
    if (nkeys > 0) {
        m->key_frag = malloc((size_t)nkeys * (sizeof(*m->key_frag) + sizeof(*m->keys)));
        if (m->key_frag == NULL)
            return -ENOMEM;
        m->keys = (struct proto_key *)(void *)(m->key_frag + nkeys);   /* 4-byte aligned */
    }
    return ops->merge_copy != NULL ? ops->merge_copy(req, buf, &m->reqcopy)
                                   : buf_append(&m->reqcopy, buf, req->hdr_len);
}

/* A fragment for a down server whose pool answers instead of failing over. */
static void forward_frag_down(struct client *c, struct wpool *pool, struct msg *fm,
                              const struct proto_req *req, struct server *srv)
{
    if (pool->cp->on_down == CONF_ON_DOWN_MISS && (req->flags & PROTO_RF_RETRIEVAL) &&
        pool->ops->frag_miss != NULL &&
        pool->ops->frag_miss(req->cmd, req->flags, fm->nkeys, &fm->rsp) == 0) {
        msg_complete(c->w, fm);     /* all its keys missed */
        return;
    }
    char reason[300];
    snprintf(reason, sizeof(reason), "server %s is down", srv->label);
    msg_fail(c->w, fm, PROTO_ERR_DOWN, reason);
}

/*
 * Split a multi-key request per server (FANOUT_KEYS), or send it to every
 * server (FANOUT_ALL) or to server `which` alone (INDEXED, written by frag_write). Each fragment is a message of its own in its server's queue;
 * merge() joins their replies in the client's key order. Allocation is per
 * multi-key request (the merge map), not per key.
 */
#define FANOUT_KEYS UINT32_MAX           /* split by keys */
#define FANOUT_ALL  (UINT32_MAX - 1)     /* every server (a broadcast) */

static void forward_fanout(struct client *c, struct wpool *pool, struct msg *m,
                           const struct proto_req *req, const char *buf,
                           const struct route_key *rk, uint32_t which, struct stage_req *r)
{
    struct worker *w = c->w;
    int broadcast = which != FANOUT_KEYS;
    uint32_t nkeys = broadcast ? 0 : req->nkeys;
    uint32_t nsrv = pool->nservers;
    uint32_t nfrag = 0;
    /* a cluster pool splits per slot: up to one fragment per key */
    uint32_t nmax = pool->view.cluster != NULL ? RL_MAX(nsrv, nkeys) : nsrv;

    /* scratch: frag[nkeys] | slot[nsrv] (server -> fragment + 1) | first[nmax + 1] | target[nmax] */
    if (worker_scratch(w, nkeys + nsrv + 2 * nmax + 1) < 0)
        goto nomem;
    uint32_t *owner = w->scratch;       /* each key's fragment */
    uint32_t *slot = owner + nkeys;
    uint32_t *first = slot + nsrv;
    uint32_t *target = first + nmax + 1;

    if (which < nsrv) {
        nfrag = 1;              /* INDEXED: the one server it names */
        target[0] = which;
    } else if (broadcast) {
        for (uint32_t s = route_walk(&pool->view, 0); s < nsrv; s = route_walk(&pool->view, s + 1))
            target[nfrag++] = s;        /* a cluster's masters that serve slots */
    } else if (pool->view.cluster != NULL) {
        struct route rt;
        nfrag = cworker_fanout(pool, rk, nkeys, req->flags, w->rr, owner, target, &rt);
        if (nfrag == 0)
            goto nomem;
        forward_route_effects(c, pool, &rt, &rk[0]);
    } else {
        struct route rt;
        for (int pass = 0; pass < 2; pass++) {
            route_clear(&rt);
            nfrag = 0;
            memset(slot, 0, (size_t)nsrv * sizeof(*slot));
            for (uint32_t i = 0; i < nkeys; i++) {
                owner[i] = route_fanout_server(&pool->view, &rk[i], &rt);
                if (slot[owner[i]] == 0) {
                    target[nfrag] = owner[i];
                    slot[owner[i]] = ++nfrag;
                }
            }
            /* The stages see a placement that is not the plain one (a write failed
             * over is remembered for the rejoin first, and placed again if a server
             * came back meanwhile). */
            if (pass > 0 || r == NULL || !(pool->chain.hooks & STAGE_H_ROUTED) || rt.events == 0)
                break;
            r->rt = &rt;
            r->owner = owner;
            enum stage_verdict v = stage_routed(&pool->chain, r);
            r->owner = NULL;
            if (v != STAGE_AGAIN)
                break;
        }
        forward_route_effects(c, pool, &rt, &rk[0]);   /* once, for the placement taken */
        for (uint32_t i = 0; i < nkeys; i++)
            owner[i] = slot[owner[i]] - 1;      /* each key's server -> its fragment */
    }
    if (nfrag == 0) {
        forward_refuse(c, m, PROTO_ERR_SERVER, "no server to send to");
        return;
    }
    if (forward_fanout_alloc(m, pool->ops, req, buf, nfrag, nkeys) < 0)
        goto nomem;
    m->nfrag = nfrag;
    for (uint32_t i = 0; i < nkeys; i++) {
        m->key_frag[i] = owner[i];
        m->keys[i] = req->keys[i];
    }
    /* Each fragment's keys, in the client's order: fragment f's keys are
     * idx[first[f] .. first[f + 1]) (idx reuses owner, which key_frag now says). */
    uint32_t *idx = owner;
    route_group(m->key_frag, nkeys, nfrag, first, idx);

    m->nfrag_pending = nfrag;
    STATS_ADD(&pool->stats, fragments, nfrag);
    for (uint32_t f = 0; f < nfrag; f++) {
        const uint32_t *fidx = broadcast ? NULL : idx + first[f];
        uint32_t n = broadcast ? 0 : first[f + 1] - first[f];
        struct msg *fm = forward_new_child(w, m, MSG_FRAG, req, n);
        if (fm == NULL) {
            /* the fragments already sent complete on their own */
            m->nfrag = f;
            m->nfrag_pending -= nfrag - f;
            if (m->nfrag_pending == 0)
                forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
            return;
        }
        m->frags[f] = fm;
        struct server *srv = pool->servers[target[f]];
        fm->server = srv;
        if (!broadcast && !health_up(srv->health) && pool->cp->on_down != CONF_ON_DOWN_FAILOVER) {
            forward_frag_down(c, pool, fm, req, srv);
            continue;
        }
        enum proto_err code;
        const char *reason = NULL;
        if (forward_write(pool, fm, srv, NULL, f, req, buf, fidx, n,
                          which == FANOUT_ALL ? FORWARD_HEADER : FORWARD_FRAG, 0, NULL, &code,
                          &reason) < 0)
            msg_fail(w, fm, code, reason);
    }
    return;

nomem:
    free(m->frags);
    free(m->key_frag);
    m->frags = NULL;
    m->key_frag = NULL;
    m->keys = NULL;
    m->nfrag = m->nfrag_pending = 0;
    forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
}

/* ------------------------------------------------------------------ local replies */

static void forward_local(struct client *c, struct msg *m, const struct proto_req *req,
                          const char *buf)
{
    struct wpool *pool = c->pool;
    struct proto_env env;

    c->mops->env(c, &env);
    STATS_ADD(&pool->stats, local_replies, 1);
    int rc = pool->ops->local(&c->pc, &c->parser, req, buf, &env, &m->rsp);
    if (rc == PROTO_LOCAL_CLOSE || (req->flags & PROTO_RF_CLOSE))
        m->flags |= MSG_F_CLOSE;
    if (rc == PROTO_LOCAL_RESET)
        c->mops->reset(c);          /* RESET ends every subscription (pubsub.c) */
    if (c->in == CLIENT_IN_HOLD && c->mops->defer(c, m))
        return;                     /* CLIENT TRACKING: +OK once the servers track */
    forward_answer(c, m);
}

/* ------------------------------------------------------------------ dispatch */

/*
 * Route a keyed request: the pool of its keys (all in one, else refused),
 * each key placed once. rk[0..nkeys) are filled (w->rkeys for several).
 * Returns the pool, or NULL after answering m (mixed pools, no memory).
 */
struct wpool *forward_place(struct client *c, struct msg *m, const struct proto_req *req,
                            const char *buf, struct route_key **rkp, char *dec)
{
    struct worker *w = c->w;
    uint32_t nkeys = req->nkeys;
    struct route_key *rk = *rkp;

    if (nkeys > 1) {
        if (worker_rkeys(w, nkeys) < 0) {
            forward_refuse(c, m, PROTO_ERR_NOMEM, "out of memory");
            return NULL;
        }
        rk = *rkp = w->rkeys;
    }
    forward_key(c->pool, req, buf, 0, dec, &rk[0]);
    /* pub/sub channels live in the client's pool: `routes:` are for keys */
    int channel = (req->flags & PROTO_RF_CHANNEL) != 0;
    struct wpool *pool = channel ? c->pool : forward_key_pool(c, &rk[0]);
    route_key_place(&pool->view, &rk[0]);
    for (uint32_t i = 1; i < nkeys; i++) {
        /* dec is used by a meta command's base64 key only, and a meta
         * command has one key; a Redis inline request's keys are in the
         * parser's memory. */
        forward_key(c->pool, req, buf, i, dec, &rk[i]);
        if (!channel && c->pool->cp->nroutes > 0 && forward_key_pool(c, &rk[i]) != pool) {
            forward_refuse(c, m, PROTO_ERR_CROSSSLOT, "keys in request belong to different pools");
            return NULL;
        }
        route_key_place(&pool->view, &rk[i]);
    }
    return pool;
}

/* A SINGLE or SAME request: one server (or copies of it), by its keys. */
static void forward_keyed(struct client *c, struct msg *m, const struct proto_req *req,
                          const char *buf)
{
    struct route_key one, *rk = &one;
    char dec[PROTO_KEY_DECODED_MAX];
    struct wpool *pool = forward_place(c, m, req, buf, &rk, dec);

    if (pool == NULL)
        return;
    struct route rt;
    /* r is filled for a pool with stages that see more than unusual routes */
    struct stage_req r, *staged = NULL;
    if (__builtin_expect(pool->chain.hooks & ~STAGE_H_ROUTED, 0)) {
        r = (struct stage_req){ .c = c, .pool = pool, .m = m, .req = req, .buf = buf,
                                .rk = rk, .rt = &rt };
        staged = &r;
        if ((pool->chain.hooks & STAGE_H_REQUEST) && stage_request(&pool->chain, &r) != STAGE_PASS)
            return;
    }
    /* an observer of every keyed request that goes on (one a stage answered, a near-cache
     * hit, is counted by that stage: nearcache.c counts its hits in batches) */
    if (c->w->snap->conf->global.hot_keys)
        hotkeys_touch(&pool->hot, rk[0].bytes, rk[0].len, rk[0].hash, uv_now(&c->w->loop));
    if (req->kind == PROTO_REQ_SAME && !forward_keys_together(c, pool, m, rk, req->nkeys))
        return;
    forward_route(c, pool, m, req, buf, rk, &rt, staged);
    switch (rt.kind) {
    case ROUTE_SEND: {
        int sent = forward_send(c, pool, m, pool->servers[rt.to[0]], rk[0].hash, req, buf,
                                staged);
        if (pool->chain.hooks & STAGE_H_SENT)
            stage_sent(&pool->chain, &r, sent == 0);    /* m: unless answered (gone) */
        break;
    }
    case ROUTE_COPIES:
        r = (struct stage_req){ .c = c, .pool = pool, .m = m, .req = req, .buf = buf,
                                .rk = rk, .rt = &rt, .marks = staged ? r.marks : 0 };
        forward_copies(c, pool, &r);
        if (pool->chain.hooks & STAGE_H_SENT)
            stage_sent(&pool->chain, &r, 0);
        break;
    case ROUTE_MISS:
        if (!(m->flags & MSG_F_NOREPLY))
            pool->ops->miss_reply(req->cmd, req->flags, &m->rsp);
        forward_answer(c, m);
        break;
    case ROUTE_FAIL:
        forward_fail_route(c, pool, m, &rt);
        break;
    }
}

/* INDEXED: to the one server of the pool the request names (a SCAN cursor). */
static void forward_indexed(struct client *c, struct msg *m, const struct proto_req *req,
                            const char *buf)
{
    struct wpool *pool = c->pool;
    char reason[160];
    /* the server named, or (cursor 0 in a cluster pool: server 0 may be a replica) the
     * first one the walk visits from there */
    uint32_t s = route_walk(&pool->view, req->server);

    if (s >= pool->nservers) {
        snprintf(reason, sizeof(reason), "invalid cursor: the pool has no server %" PRIu32
                 " (it changed during the scan); start again from cursor 0", req->server);
        forward_refuse(c, m, PROTO_ERR_TARGET, reason);
        return;
    }
    forward_fanout(c, pool, m, req, buf, NULL, s, NULL);
}

/* A FANOUT request: its keys placed, through the pool's stages (those after `after`, a
 * stage that held it and sends it on; NULL: all), split over its servers. */
static void forward_split(struct client *c, struct msg *m, const struct proto_req *req,
                          const char *buf, const struct stage *after)
{
    struct route_key *rk = NULL;
    char dec[PROTO_KEY_DECODED_MAX];
    struct wpool *kp = forward_place(c, m, req, buf, &rk, dec);
    if (kp == NULL)
        return;
    struct stage_req r = { .c = c, .pool = kp, .m = m, .req = req, .buf = buf, .rk = rk };
    if ((kp->chain.hooks & STAGE_H_REQUEST) &&
        stage_request_after(&kp->chain, &r, after) != STAGE_PASS)
        return;
    forward_fanout(c, kp, m, req, buf, rk, FANOUT_KEYS, &r);
    if (kp->chain.hooks & STAGE_H_SENT)
        stage_sent(&kp->chain, &r, 0);
}

void forward_request(struct client *c, const struct proto_req *req, const char *buf)
{
    struct wpool *pool = c->pool;
    struct msg *m = forward_msg(c, req);

    if (m == NULL) {
        c->closing = 1;
        return;
    }
    switch (req->kind) {
    case PROTO_REQ_ERROR:
        STATS_ADD(&pool->stats, client_errors_sent, 1);
        if (req->flags & PROTO_RF_NOAUTH)
            STATS_ADD(&pool->stats, refused_auth, 1);
        m->flags |= MSG_F_ERROR;
        if (req->flags & PROTO_RF_CLOSE)
            m->flags |= MSG_F_CLOSE;
        if (!(m->flags & MSG_F_NOREPLY))
            buf_append(&m->rsp, req->err, req->err_len);
        forward_answer(c, m);
        break;
    case PROTO_REQ_LOCAL:
        forward_local(c, m, req, buf);
        break;
    case PROTO_REQ_SAME:
    case PROTO_REQ_SINGLE:
        forward_keyed(c, m, req, buf);
        break;
    case PROTO_REQ_FANOUT:
        forward_split(c, m, req, buf, NULL);
        break;
    case PROTO_REQ_BROADCAST: {
        /* the request hooks see a broadcast too (rk NULL): a flush evicts near-cached keys */
        struct stage_req r = { .c = c, .pool = pool, .m = m, .req = req, .buf = buf };
        if ((pool->chain.hooks & STAGE_H_REQUEST) && stage_request(&pool->chain, &r) != STAGE_PASS)
            break;
        forward_fanout(c, pool, m, req, buf, NULL, FANOUT_ALL, NULL);
        break;
    }
    case PROTO_REQ_INDEXED:
        forward_indexed(c, m, req, buf);
        break;
    case PROTO_REQ_SESSION:     /* the session it belongs to is gone (its server failed) */
        forward_refuse(c, m, PROTO_ERR_SERVER, "no session for this request");
        break;
    case PROTO_REQ_SUBSCRIBE:   /* client.c gives these to pubsub.c: never here */
        RL_ASSERT(!"a subscription request reached forward_request");
        forward_refuse(c, m, PROTO_ERR_SERVER, "subscription request not handled");
        break;
    }
}

void forward_again(struct client *c, struct msg *m, const struct proto_req *req,
                   const char *buf, const struct stage *after)
{
    if (req->kind != PROTO_REQ_FANOUT) {     /* the only kind a stage sends on */
        forward_refuse(c, m, PROTO_ERR_SERVER, "a held request did not parse again");
        return;
    }
    forward_split(c, m, req, buf, after);
}

/* ------------------------------------------------------------------ for sessions */

struct wpool *forward_place_bytes(struct client *c, const char *bytes, size_t len,
                                  struct route_key *rk)
{
    rk->bytes = bytes;
    rk->len = len;
    struct wpool *pool = forward_key_pool(c, rk);
    route_key_place(&pool->view, rk);
    return pool;
}

struct server *forward_pick(struct client *c, struct wpool *pool, struct msg *m,
                            const struct proto_req *req, const struct route_key *rk)
{
    struct route rt;

    /* A session is where the keys' writes go: the owner (or on_down's choice),
     * never a replica chosen for reading. */
    route_request(&pool->view, rk, req->flags | PROTO_RF_WRITE, req->kind == PROTO_REQ_SINGLE,
                  0, c->w->rr, uv_now(&c->w->loop), &rt);
    forward_route_effects(c, pool, &rt, rk);
    switch (rt.kind) {
    case ROUTE_SEND:
        if (rt.events & ROUTE_EV_REJOIN_COPY) {
            /* the owner itself while it rejoins (no failover server): its keys written
             * while it was away are not all deleted yet, and a session reads there */
            forward_refuse(c, m, PROTO_ERR_SERVER, "the keys' server is rejoining; retry");
            return NULL;
        }
        return pool->servers[rt.to[0]];
    case ROUTE_COPIES:
        if (rt.events & ROUTE_EV_REJOIN_COPY)
            return pool->servers[rt.to[0]];     /* the owner rejoins: its failover server,
                                                   which serves its reads meanwhile; the
                                                   session's writes are remembered for the
                                                   rejoin (session_note_write) */
        forward_refuse_command(c, m, PROTO_ERR_SERVER, "transactions and blocking commands need "
                       "one server per key: the pool has replicas");
        return NULL;
    case ROUTE_MISS:
        pool->ops->miss_reply(req->cmd, req->flags, &m->rsp);
        forward_answer(c, m);
        return NULL;
    case ROUTE_FAIL:
        forward_fail_route(c, pool, m, &rt);
        return NULL;
    }
    return NULL;
}

/* ------------------------------------------------------------------ streaming */

struct msg *forward_stream(struct client *c, const struct proto_req *req, const char *buf,
                           uint64_t avail, int *answered)
{
    struct route_key rk;
    char dec[PROTO_KEY_DECODED_MAX];
    struct route rt;

    *answered = 0;
    if (req->kind != PROTO_REQ_SINGLE || req->nkeys != 1 || req->sess != 0 || c->nsessions != 0)
        return NULL;                /* a session's requests go through it, whole */
    forward_key(c->pool, req, buf, 0, dec, &rk);
    struct wpool *pool = (req->flags & PROTO_RF_CHANNEL) ? c->pool : forward_key_pool(c, &rk);
    if (pool->view.cluster != NULL)
        return NULL;                /* buffered: a MOVED or ASK re-sends the whole request,
                                       which a pinned stream cannot (its node's redirect
                                       would reach the client) */
    route_key_place(&pool->view, &rk);
    if (req->flags & PROTO_RF_CHANNEL)
        route_channel(&pool->view, &rk, &rt);
    else
        route_request(&pool->view, &rk, req->flags, 1, (req->flags & PROTO_RF_NOKEY) != 0,
                      c->w->rr, uv_now(&c->w->loop), &rt);
    if (rt.kind == ROUTE_COPIES || (rt.events & (ROUTE_EV_DOWN_WRITE | ROUTE_EV_REJOIN_COPY)) ||
        ((rt.events & ROUTE_EV_FAILOVER) && pool->cp->failover_ttl > 0))
        return NULL;                /* buffered: every copy needs the whole body, a write
                                       for a down server is remembered first, and one to
                                       a failover server carries failover_ttl */
    if (rt.kind != ROUTE_SEND) {
        forward_request(c, req, buf);   /* answered here; its body is dropped */
        *answered = 1;
        return NULL;
    }
    struct server *srv = pool->servers[rt.to[0]];
    const char *reason = NULL;
    struct sconn *s = server_pin_db(srv, &c->holder, (c->parser.flags & PROTO_PF_VARIANT) != 0,
                                    client_db(c), &reason);
    if (s == NULL) {
        log_info("pool '%s': large request buffered, not streamed: %s", pool->cp->name, reason);
        return NULL;
    }
    forward_route_effects(c, pool, &rt, &rk);
    struct msg *m = forward_msg(c, req);
    enum proto_err code;
    if (m == NULL) {
        sconn_unpin(s, 1);
        return NULL;
    }
    STATS_ADD(&c->pool->stats, streamed_requests, 1);
    if (forward_write(pool, m, srv, s, 0, req, buf, NULL, 0, FORWARD_WHOLE, avail, NULL, &code,
                      &reason) < 0) {
        forward_refuse(c, m, code, reason);
        sconn_unpin(s, 1);
        *answered = 1;
        return NULL;
    }
    m->deadline_ms = 0;             /* the pool's timeout runs once the body is whole */
    return m;
}
