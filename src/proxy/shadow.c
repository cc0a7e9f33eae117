/* Shadow pools: a copy of a pool's requests also goes to another pool; its replies are dropped, or compared with the primary's. */
#include "config.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "state/health.h"
#include "lib/log.h"
#include "proxy/client.h"
#include "proxy/msg.h"
#include "state/registry.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "stats/stats.h"
#include "lib/util.h"

/*
 * shadow: {pool, fraction, compare, queue_limit}. After the primary request m
 * of client c (pool `pool`, keys rk placed in it) was written to its servers,
 * a copy goes to the shadow pool, routed there by that pool's own ring and
 * health. The copy is the proxy's own request (MSG_OWN): the client's reply
 * never waits for it and never sees it. A copy is not sent (shadow_dropped)
 * when the shadow pool has no live server for the key or the connection it
 * would go to already holds queue_limit requests (a slow or frozen shadow);
 * one that times out or loses its connection counts as shadow_failed.
 *
 * `fraction` samples keys by a hash of their bytes, so a key is shadowed
 * always or never. A multi-key request is split over the shadow pool's
 * servers (its sampled keys); with `compare`, the reply of a single-server
 * request is compared with the primary's (the protocol's reply_equal): the
 * pool counts shadow_compared and shadow_mismatches, and logs one mismatched
 * key at most once a second. Replies that streamed (over 64 KiB), primaries
 * that failed, and multi-key or replicated requests are not compared.
 */

#define SHADOW_KEY_SAMPLE 64    /* bytes of a mismatched key kept for the log */

/*
 * A compared request: the primary's and the shadow's outcome, whichever
 * comes first waits here for the other. Holds a reference on the primary's
 * pool (its counters), which a reload may retire meanwhile.
 */
struct shadow_pair {
    struct msg_watch primary;
    struct msg_watch shadow;
    struct wpool    *pool;
    struct buf       a, b;          /* the primary's and the shadow's reply */
    uint16_t         cmd;
    uint8_t          a_state, b_state;   /* SHADOW_* */
    uint8_t          klen;
    char             key[SHADOW_KEY_SAMPLE];
};

enum { SHADOW_WAIT, SHADOW_REPLY, SHADOW_NONE };

/* ------------------------------------------------------------------ outcomes */

static void shadow_log_mismatch(struct wpool *pool, const struct shadow_pair *p)
{
    struct pool_shared *sh = pool->view.shared;
    uint64_t now_s = util_now_ms() / 1000;
    uint64_t last = atomic_load_explicit(&sh->shadow_log_s, memory_order_relaxed);

    if (now_s <= last ||
        !atomic_compare_exchange_strong(&sh->shadow_log_s, &last, now_s))
        return;                 /* one line a second per pool, over every worker */
    char shown[4 * SHADOW_KEY_SAMPLE + 1];
    stats_key_display(p->key, p->klen, shown, sizeof(shown));
    log_warn("pool '%s': shadow pool '%s' answered differently for key '%s'%s (%lld "
             "mismatch%s on this worker; one key is logged a second at most)",
             pool->cp->name, pool->cp->shadow.pool, shown,
             p->klen == SHADOW_KEY_SAMPLE ? "..." : "",
             (long long)pool->stats.shadow_mismatches,
             pool->stats.shadow_mismatches == 1 ? "" : "es");
}

static void shadow_pair_done(struct worker *w, struct shadow_pair *p)
{
    struct wpool *pool = p->pool;

    if (p->a_state == SHADOW_WAIT || p->b_state == SHADOW_WAIT)
        return;
    if (p->a_state == SHADOW_REPLY && p->b_state == SHADOW_REPLY) {
        const struct proto_ops *ops = pool->ops;
        size_t al = buf_len(&p->a), bl = buf_len(&p->b);
        const char *ap = al ? buf_rptr(&p->a) : "", *bp = bl ? buf_rptr(&p->b) : "";
        int same = ops->reply_equal != NULL ? ops->reply_equal(p->cmd, ap, al, bp, bl)
                                            : al == bl && memcmp(ap, bp, al) == 0;
        STATS_ADD(&pool->stats, shadow_compared, 1);
        if (!same) {
            STATS_ADD(&pool->stats, shadow_mismatches, 1);
            shadow_log_mismatch(pool, p);
        }
    }
    (void)w;
    buf_free(&p->a);
    buf_free(&p->b);
    wpool_unref(pool);
    free(p);
}

/* The client's request is answered: keep its reply for the comparison. */
static void shadow_primary_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    struct shadow_pair *p =
        (struct shadow_pair *)(void *)((char *)wt - offsetof(struct shadow_pair, primary));

    p->a_state = SHADOW_NONE;
    if (ok && m->client != NULL && !(m->flags & (MSG_F_STREAMED | MSG_F_ERROR)) &&
        buf_append(&p->a, buf_rptr(&m->rsp), buf_len(&m->rsp)) == 0)
        p->a_state = SHADOW_REPLY;
    shadow_pair_done(w, p);
}

static void shadow_copy_failed(struct wpool *pool, struct msg *m, int ok)
{
    if (!ok) {
        STATS_ADD(&pool->stats, shadow_failed, 1);
        log_debug("pool '%s': a shadow copy to '%s' failed", pool->cp->name, m->server->label);
    }
}

/* A compared copy is answered (or failed). */
static void shadow_compared_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    struct shadow_pair *p =
        (struct shadow_pair *)(void *)((char *)wt - offsetof(struct shadow_pair, shadow));

    shadow_copy_failed(p->pool, m, ok);
    p->b_state = SHADOW_NONE;
    if (ok && !(m->flags & MSG_F_RSPLOST)) {
        buf_swap(&p->b, &m->rsp);
        p->b_state = SHADOW_REPLY;
    }
    shadow_pair_done(w, p);
}

/* A copy nobody compares (struct wpool.shadow_watch). */
static void shadow_copy_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    struct wpool *pool = (struct wpool *)(void *)((char *)wt - offsetof(struct wpool, shadow_watch));

    (void)w;
    shadow_copy_failed(pool, m, ok);
    wpool_unref(pool);
}

/* ------------------------------------------------------------------ sending */

/* Whether a key is in the shadowed fraction of the keyspace. */
static int shadow_sampled(double fraction, const char *key, size_t len)
{
    if (fraction >= 1.0)
        return 1;
    return (double)(XXH3_64bits(key, len) >> 11) * 0x1.0p-53 < fraction;
}

/* Carry out a shadow routing decision's side effects that keep the shadow
 * pool healthy (a due probe), and count its failovers there. */
static void shadow_route_effects(struct wpool *sp, const struct route *rt)
{
    if (rt->events & ROUTE_EV_FAILOVER)
        STATS_ADD(&sp->stats, failovers, 1);
    if (rt->probe != ROUTE_NONE && health_try_probe(sp->view.health[rt->probe], util_now_ms()))
        server_probe(sp->servers[rt->probe]);
}

/*
 * Write one copy (the whole request, or the keys idx[0..n) of it) to server
 * srv of the shadow pool, watched by wt. 0, or -1 when it is not sent (over
 * queue_limit, no connection, no memory).
 */
static int shadow_send(struct wpool *pool, struct server *srv, uint64_t hint,
                       const struct proto_req *req, const char *buf, const uint32_t *idx,
                       uint32_t n, struct msg_watch *wt)
{
    struct worker *w = pool->w;
    const char *reason = NULL;
    /* of the client's protocol variant (RESP3), as the primary's copy: the replies compare */
    struct sconn *s = server_pick(srv, hint, req->flags, &reason);

    if (s == NULL || s->inflight >= pool->cp->shadow.queue_limit)
        return -1;
    struct msg *m = msg_get(w);
    if (m == NULL)
        return -1;
    const struct proto_ops *ops = srv->pool->ops;
    struct buf *out = &s->conn.obuf;
    size_t before = buf_len(out);
    int rc = idx != NULL ? ops->frag_write(req, buf, idx, n, out) : ops->forward(req, buf, out);
    if (rc == 0 && idx == NULL && req->body_len > 0)
        rc = buf_append(out, buf + req->hdr_len, (size_t)req->body_len);
    if (rc < 0) {
        buf_truncate(out, before);
        msg_put(w, m);
        return -1;
    }
    m->role = MSG_OWN;
    m->cmd = req->cmd;
    m->rflags = req->flags & (uint16_t)~PROTO_RF_NOREPLY;
    m->nkeys = idx != NULL ? n : req->nkeys;
    m->start_us = worker_now_us(w);
    m->req_bytes = buf_len(out) - before;
    m->watch = wt;
    STATS_ADD(&srv->stats, requests, 1);
    STATS_ADD(&srv->stats, request_bytes, m->req_bytes);
    sconn_enqueue(s, m);
    sconn_mark_lazy(w, s, pool->cp->shadow.batch_ms);
    STATS_ADD(&pool->stats, shadow_sent, 1);
    return 0;
}

/* An uncompared copy to srv: the pool's own watch, holding a reference. */
static void shadow_send_plain(struct wpool *pool, struct server *srv, uint64_t hint,
                              const struct proto_req *req, const char *buf, const uint32_t *idx,
                              uint32_t n)
{
    pool->shadow_watch.done = shadow_copy_done;
    pool->refs++;
    if (shadow_send(pool, srv, hint, req, buf, idx, n, &pool->shadow_watch) < 0) {
        pool->refs--;
        STATS_ADD(&pool->stats, shadow_dropped, 1);
    }
}

/* A multi-key request: each sampled key to its server of the shadow pool. */
static void shadow_fanout(struct wpool *pool, struct wpool *sp, const struct proto_req *req,
                          const char *buf, const struct route_key *rk)
{
    struct worker *w = pool->w;
    uint32_t nkeys = req->nkeys, nsrv = sp->nservers;
    double fraction = pool->cp->shadow.fraction;

    /* scratch: server of key i | where each server's keys start | the keys by server */
    if (nsrv == 0 || worker_scratch(w, 2 * nkeys + nsrv + 1) < 0) {
        STATS_ADD(&pool->stats, shadow_dropped, 1);
        return;
    }
    uint32_t *to = w->scratch, *first = to + nkeys, *idx = first + nsrv + 1;
    struct route rt;
    route_clear(&rt);
    for (uint32_t i = 0; i < nkeys; i++) {
        to[i] = ROUTE_NONE;
        if (!shadow_sampled(fraction, rk[i].bytes, rk[i].len))
            continue;
        struct route_key k = { rk[i].bytes, rk[i].len, 0, 0 };
        route_key_place(&sp->view, &k);
        to[i] = route_fanout_server(&sp->view, &k, &rt);
        if (!health_up(sp->view.health[to[i]]))
            to[i] = ROUTE_NONE;     /* down and not failed over: no copy for it */
    }
    shadow_route_effects(sp, &rt);
    route_group(to, nkeys, nsrv, first, idx);
    for (uint32_t s = 0; s < nsrv; s++)
        if (first[s + 1] > first[s])
            shadow_send_plain(pool, sp->servers[s], s, req, buf, idx + first[s],
                              first[s + 1] - first[s]);
}

static void shadow_request(struct client *c, struct wpool *pool, struct msg *m,
                           const struct proto_req *req, const char *buf,
                           const struct route_key *rk)
{
    struct worker *w = c->w;
    struct wpool *sp = pool->shadow < w->npools ? w->pools[pool->shadow] : NULL;
    const struct conf_shadow *cs = &pool->cp->shadow;

    if (sp == NULL || sp == pool || sp->ops != pool->ops)
        return;
    if (req->kind == PROTO_REQ_FANOUT) {
        shadow_fanout(pool, sp, req, buf, rk);
        return;
    }
    if (!shadow_sampled(cs->fraction, rk[0].bytes, rk[0].len))
        return;
    /* Placed and routed in the shadow pool, by its ring and its health. */
    struct route_key k = { rk[0].bytes, rk[0].len, 0, 0 };
    route_key_place(&sp->view, &k);
    for (uint32_t i = 1; req->kind == PROTO_REQ_SAME && i < req->nkeys; i++) {
        struct route_key o = { rk[i].bytes, rk[i].len, 0, 0 };
        route_key_place(&sp->view, &o);
        if (o.owner != k.owner) {
            STATS_ADD(&pool->stats, shadow_dropped, 1);  /* its keys are apart there */
            return;
        }
    }
    struct route rt;
    route_request(&sp->view, &k, req->flags, req->kind == PROTO_REQ_SINGLE,
                  (req->flags & PROTO_RF_NOKEY) != 0, w->rr, uv_now(&w->loop), &rt);
    shadow_route_effects(sp, &rt);
    if ((rt.kind != ROUTE_SEND && rt.kind != ROUTE_COPIES) || rt.n == 0) {
        STATS_ADD(&pool->stats, shadow_dropped, 1);
        return;
    }
    uint32_t first = 0;
    /* Compare only a request that one server of the primary pool answers. */
    if (cs->compare && m != NULL && m->state == MSG_SENT && m->watch == NULL &&
        !(m->flags & (MSG_F_NOREPLY | MSG_F_COPIES)) && m->frags == NULL) {
        struct shadow_pair *p = calloc(1, sizeof(*p));
        if (p != NULL) {
            p->primary.done = shadow_primary_done;
            p->shadow.done = shadow_compared_done;
            p->shadow.keep_reply = 1;
            p->pool = pool;
            p->cmd = req->cmd;
            p->klen = (uint8_t)RL_MIN(rk[0].len, (size_t)SHADOW_KEY_SAMPLE);
            memcpy(p->key, rk[0].bytes, p->klen);
            buf_init(&p->a);
            buf_init(&p->b);
            pool->refs++;
            if (shadow_send(pool, sp->servers[rt.to[0]], k.hash, req, buf, NULL, 0,
                            &p->shadow) == 0) {
                m->watch = &p->primary;
            } else {
                STATS_ADD(&pool->stats, shadow_dropped, 1);
                pool->refs--;
                free(p);
            }
            first = 1;
        }
    }
    for (uint32_t i = first; i < rt.n; i++)
        shadow_send_plain(pool, sp->servers[rt.to[i]], k.hash, req, buf, NULL, 0);
}

/* ------------------------------------------------------------------ the stage */

static int shadow_wanted(const struct conf_pool *cp, const struct conf_global *g)
{
    return cp->shadow.pool != NULL;
}

/* The request went to the primary's servers; r->m is compared when it alone was sent. */
static void shadow_stage_sent(struct stage_req *r, int sent)
{
    if (r->pool->shadow != ROUTE_NONE)
        shadow_request(r->c, r->pool, sent ? r->m : NULL, r->req, r->buf, r->rk);
}

const struct stage stage_shadow = {
    .name = "shadow",
    .wanted = shadow_wanted,
    .sent = shadow_stage_sent,
};
