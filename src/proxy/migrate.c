/* migrate: while a Redis pool's keys move to their new owners, a request for a key that moved first moves that key, then runs on its new owner. */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "lib/buf.h"
#include "lib/util.h"
#include "placement/ring.h"
#include "proto/redis.h"
#include "lib/log.h"
#include "proxy/client.h"
#include "proxy/migrate.h"
#include "proxy/msg.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "state/registry.h"
#include "stats/stats.h"

/*
 * The rule (docs/reload.md): once every worker routes by the new ring and until the
 * control's scan has moved every key (pool_shared.migrating), a request whose keys had
 * another owner under the previous ring is preceded by
 *
 *     MIGRATE <new owner> "" <db> <timeout> REPLACE [AUTH|AUTH2 ...] KEYS <its keys>
 *
 * on the previous owner, and is sent to the new owner only when that answered +OK or
 * +NOKEY. A key is therefore on its previous owner only while nobody has touched it since
 * the ring changed: the copy there is the newest there is, REPLACE is right, and whatever
 * a request then does on the new owner (a read, HSET, LPUSH, EXPIRE, DEL) acts on the
 * whole value with its TTL. The control's bulk move (src/control/migrate.c) sends the
 * same MIGRATE; the server runs one at a time, so whichever comes second finds nothing.
 *
 * A key whose previous owner the reload removed (a shrink) moves the same way: the worker
 * keeps that server as retiring (wpool.retiring, in no ring) until the control reports the
 * removed servers drained (MIG_ST_DRAINED) or the migration over.
 *
 * A multi-server request (MGET over servers) with moved keys moves them with one MIGRATE
 * per pair of previous and new owner, then goes on (mig_fan_start, below).
 *
 * What cannot be moved that way is answered -TRYAGAIN: a single-server request whose keys
 * had several previous owners, a request body that streams, a move that failed.
 */

#define MIG_TIMEOUT_MS 5000

/* pool_shared.migrating: the ring's checksum (low bits cleared) | these */
#define MIG_ST_MOVING   0x1u    /* keys move: a request moves its keys first */
#define MIG_ST_DRAINED  0x2u    /* the servers the reload removed are drained */
#define MIG_ST_PENDING  0x4u    /* published, not every worker runs the ring yet */
#define MIG_ST_MASK     0x7u
#define MIG_TRYAGAIN "-TRYAGAIN ringleader: a key of this request is moving to its new server; retry\r\n"

static uint16_t mig_cmd_id(void)
{
    static uint16_t id = UINT16_MAX;     /* the table is constant: a race writes the same */
    if (id == UINT16_MAX) {
        const struct redis_command *c = redis_command_find("MIGRATE");
        id = c != NULL ? (uint16_t)(c - redis_commands) : REDIS_CMD_NONE;
    }
    return id;
}

static int mig_bulk(struct buf *b, const char *s, size_t n)
{
    return buf_appendf(b, "$%zu\r\n", n) < 0 || buf_append(b, s, n) < 0 ||
           buf_append(b, "\r\n", 2) < 0 ? -1 : 0;
}

static int mig_bulk_u(struct buf *b, unsigned long long v)
{
    char t[24];
    int n = snprintf(t, sizeof(t), "%llu", v);
    return mig_bulk(b, t, (size_t)n);
}

/* MIGRATE to `to` of the keys rk[k] with grp[k] == g (grp NULL: every key; n of them),
 * appended to b. 0, or -1 without memory. */
static int mig_write_keys(struct buf *b, const struct conf_pool *cp, const struct server *to,
                          int db, const struct route_key *rk, uint32_t nkeys,
                          const uint32_t *grp, uint32_t g, uint32_t n)
{
    uint32_t argc = 7 + 1 + n;          /* MIGRATE h p "" db t REPLACE [AUTH..] KEYS k.. */
    if (cp->redis_auth != NULL)
        argc += cp->redis_username != NULL ? 3 : 2;
    const char *host = to->addr.host != NULL ? to->addr.host : "127.0.0.1";
    int rc = buf_appendf(b, "*%u\r\n", argc) < 0 || mig_bulk(b, "MIGRATE", 7) < 0 ||
             mig_bulk(b, host, strlen(host)) < 0 || mig_bulk_u(b, to->addr.port) < 0 ||
             mig_bulk(b, "", 0) < 0 || mig_bulk_u(b, (unsigned)db) < 0 ||
             mig_bulk_u(b, MIG_TIMEOUT_MS) < 0 || mig_bulk(b, "REPLACE", 7) < 0;
    if (rc == 0 && cp->redis_auth != NULL) {
        if (cp->redis_username != NULL)
            rc = mig_bulk(b, "AUTH2", 5) < 0 ||
                 mig_bulk(b, cp->redis_username, strlen(cp->redis_username)) < 0;
        else
            rc = mig_bulk(b, "AUTH", 4) < 0;
        rc = rc || mig_bulk(b, cp->redis_auth, strlen(cp->redis_auth)) < 0;
    }
    rc = rc || mig_bulk(b, "KEYS", 4) < 0;
    for (uint32_t k = 0; rc == 0 && k < nkeys; k++)
        if (grp == NULL || grp[k] == g)
            rc = mig_bulk(b, rk[k].bytes, rk[k].len);
    return rc ? -1 : 0;
}

/* MIGRATE of r's keys to `to` appended to b. 0, or -1 without memory. */
static int mig_write(struct buf *b, const struct stage_req *r, const struct server *to, int db)
{
    return mig_write_keys(b, r->pool->cp, to, db, r->rk, r->req->nkeys, NULL, 0,
                          r->req->nkeys);
}

static enum stage_verdict mig_refuse(struct stage_req *r)
{
    STATS_ADD(&r->pool->stats, migrate_refused, 1);
    msg_answer(r->c->w, r->m, MIG_TRYAGAIN, sizeof(MIG_TRYAGAIN) - 1, 1);
    return STAGE_TAKEN;
}

static int mig_wanted(const struct conf_pool *cp, const struct conf_global *g)
{
    (void)g;
    return cp->migrate && cp->protocol == CONF_PROTO_REDIS;
}

enum mig_case {
    MIG_HOME,           /* no key of the request moved (or the pool does not migrate) */
    MIG_MOVE,           /* its keys moved from one server to one: *from, *to */
    MIG_FAN,            /* a multi-server request with moved keys: one MIGRATE per old
                         * and new owner, then the request (mig_fan_start) */
    MIG_REFUSE          /* moved in a way no MIGRATE first can serve */
};

/* Where r's keys were on the previous ring, while the pool migrates by r's ring: *fromp
 * the previous owner (a server of the pool, or a retiring one), *top the index now. */
static enum mig_case mig_case(const struct stage_req *r, struct server **fromp, uint32_t *top,
                              uint64_t *stp)
{
    const struct wpool *pool = r->pool;
    const struct route_pool *rp = &pool->view;
    const struct proto_req *req = r->req;

    if (rp->prev_ring == NULL || rp->prev_map == NULL || r->rk == NULL || rp->shared == NULL)
        return MIG_HOME;
    uint64_t st = atomic_load_explicit(&rp->shared->migrating, memory_order_acquire);
    if (!(st & (MIG_ST_MOVING | MIG_ST_PENDING)) ||
        (st & ~(uint64_t)MIG_ST_MASK) != (rp->ring->checksum & ~(uint64_t)MIG_ST_MASK) ||
        (req->flags & PROTO_RF_NOKEY) || req->nkeys == 0)
        return MIG_HOME;
    *stp = st;

    struct server *from = NULL;
    uint32_t to = r->rk[0].owner;
    int moved = 0, several = 0, unreachable = 0;
    for (uint32_t k = 0; k < req->nkeys; k++) {
        uint32_t o = ring_owner(rp->prev_ring, r->rk[k].bytes, r->rk[k].len);
        uint32_t was = o < rp->prev_ring->nservers ? rp->prev_map[o] : ROUTE_NONE;
        struct server *ws;
        if (was == ROUTE_NONE) {
            if (st & MIG_ST_DRAINED)
                continue;               /* a removed server, drained: nothing left there */
            ws = o < pool->nretiring ? pool->retiring[o] : NULL;
            if (ws == NULL)
                unreachable = 1;        /* not kept (no memory, no address) */
        } else if (was == r->rk[k].owner) {
            continue;
        } else {
            ws = pool->servers[was];
        }
        if (moved && ws != from)
            several = 1;
        if (r->rk[k].owner != to)
            several = 1;
        moved = 1;
        from = ws;
    }
    if (!moved)
        return MIG_HOME;
    if (unreachable || req->body_len > 0)
        return MIG_REFUSE;
    if (req->kind == PROTO_REQ_FANOUT)
        return MIG_FAN;
    if (several || (req->kind != PROTO_REQ_SINGLE && req->kind != PROTO_REQ_SAME))
        return MIG_REFUSE;
    *fromp = from;
    *top = to;
    return MIG_MOVE;
}

/* ------------------------------------------------------------------ multi-server requests */

/*
 * A multi-server request (MGET, MSET, DEL, EXISTS, ... over servers) with moved keys:
 * one MIGRATE per pair of previous and new owner, each on the previous owner's
 * connection as the proxy's own request; once all have answered +OK or +NOKEY the
 * request goes on (c->mops->again: parsed again from its bytes, through the stages after
 * this one, split over its servers as any request), else it is answered -TRYAGAIN. The
 * client's input waits meanwhile (as CLIENT TRACKING's does), so that none of its later
 * requests overtakes this one. While the ring is only published (MIG_ST_PENDING: some
 * worker may still write a moved key on its old owner) the moves wait, checked every
 * MIG_FAN_POLL_MS, for at most MIG_FAN_WAIT_MS.
 */
#define MIG_FAN_POLL_MS  2
#define MIG_FAN_WAIT_MS  10000

struct mig_fan;

struct mig_fan_move {
    struct msg_watch  watch;        /* its MIGRATE's outcome */
    struct mig_fan   *fan;
    struct server    *from;
    uint32_t          to;           /* the new owner's index */
    uint32_t          nkeys;
};

struct mig_fan {
    struct msg_watch     watch;     /* the client's request: told if its client leaves */
    struct client       *c;
    struct msg          *m;         /* NULL once its client left */
    struct wpool        *pool;
    const struct ring   *ring;      /* the ring the moves were decided by */
    uint64_t             word;      /* pool_shared.migrating's ring bits for it */
    struct buf           wire;      /* the request as the servers read it */
    struct route_key    *keys;      /* the moved keys (bytes in `kbytes`), by group */
    uint32_t            *kgrp;
    uint32_t             nkeys;
    char                *kbytes;
    uv_timer_t           timer;     /* MIG_ST_PENDING: the moves wait */
    uint8_t              timer_on;
    uint8_t              sending;   /* in mig_fan_send: an answer does not end the fan */
    uint64_t             waited_ms;
    uint32_t             pending;   /* MIGRATEs not answered yet */
    uint32_t             failed;
    uint32_t             ng;
    struct mig_fan_move  moves[];
};

static void mig_fan_free(struct mig_fan *f)
{
    if (f->pool != NULL)
        wpool_unref(f->pool);
    buf_free(&f->wire);
    free(f->keys);
    free(f->kgrp);
    free(f->kbytes);
    free(f);
}

static void mig_fan_closed(uv_handle_t *h)
{
    mig_fan_free(h->data);
}

/* The fan is over: its request goes on (again) or is refused, and its client reads on
 * (`inside`: still in the stage's own call, whose caller reads on; only refused). */
static void mig_fan_end(struct worker *w, struct mig_fan *f, int inside)
{
    struct msg *m = f->m;
    struct client *c = f->c;

    if (m != NULL) {
        m->watch = NULL;
        if (!inside && f->failed == 0 && f->pool->view.ring == f->ring && !c->closing) {
            c->mops->again(c, m, buf_rptr(&f->wire), buf_len(&f->wire), &stage_migrate);
        } else {
            STATS_ADD(&f->pool->stats, migrate_refused, 1);
            msg_answer(w, m, MIG_TRYAGAIN, sizeof(MIG_TRYAGAIN) - 1, 1);
        }
        if (inside)
            c->in = CLIENT_IN_PARSE;
        else
            c->mops->resume(c);
    }
    if (f->timer_on) {
        f->timer_on = 0;
        uv_close((uv_handle_t *)&f->timer, mig_fan_closed);
    } else {
        mig_fan_free(f);
    }
}

static void mig_fan_moved(struct msg_watch *wt, struct worker *w, struct msg *om, int ok)
{
    struct mig_fan_move *mv = (struct mig_fan_move *)(void *)wt;
    struct mig_fan *f = mv->fan;

    if (!ok || (om->flags & MSG_F_ERROR))
        f->failed++;
    if (--f->pending == 0 && !f->sending)
        mig_fan_end(w, f, 0);
}

static void mig_fan_left(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    struct mig_fan *f = (struct mig_fan *)(void *)wt;
    (void)w;
    (void)m;
    (void)ok;
    f->m = NULL;            /* freed once its MIGRATEs are answered (or its wait ends) */
    f->c = NULL;
}

/* The MIGRATEs, each on its previous owner's connection; the caller ends the fan when
 * none is left unanswered (none went out, or every one failed at once). */
static void mig_fan_send(struct worker *w, struct mig_fan *f)
{
    struct wpool *pool = f->pool;
    struct msg *m = f->m;
    int db = m->db != 0 ? m->db - 1 : pool->cp->redis_db;
    const char *reason = NULL;

    f->sending = 1;
    for (uint32_t g = 0; g < f->ng; g++) {
        struct mig_fan_move *mv = &f->moves[g];
        struct sconn *s = m->db == 0 ? server_pick(mv->from, 0, 0, &reason)
                                     : server_pick_db(mv->from, 0, 0, m->db, &reason);
        struct msg *om = s != NULL ? msg_get(w) : NULL;
        size_t before = s != NULL ? buf_len(&s->conn.obuf) : 0;
        if (om == NULL || mig_write_keys(&s->conn.obuf, pool->cp, pool->servers[mv->to], db,
                                         f->keys, f->nkeys, f->kgrp, g, mv->nkeys) < 0) {
            if (s != NULL)
                buf_truncate(&s->conn.obuf, before);
            if (om != NULL)
                msg_put(w, om);
            f->failed++;            /* refused once the sent ones are answered */
            continue;
        }
        if (mv->from->index == UINT32_MAX)  /* a retiring server in use: closed once drained */
            pool->retiring_seen = (f->ring->checksum & ~(uint64_t)MIG_ST_MASK) | 1u;
        om->role = MSG_OWN;
        om->cmd = mig_cmd_id();
        om->watch = &mv->watch;
        om->start_us = worker_now_us(w);
        om->req_bytes = buf_len(&s->conn.obuf) - before;
        STATS_ADD(&mv->from->stats, requests, 1);
        STATS_ADD(&mv->from->stats, request_bytes, om->req_bytes);
        sconn_enqueue(s, om);
        if (pool->cp->timeout_ms <= 0)
            sconn_deadline_in(s, om, 2 * MIG_TIMEOUT_MS);
        f->pending++;
        sconn_mark(w, s);
    }
    f->sending = 0;
}

/* MIG_ST_PENDING: every worker runs the ring now (moves go), or the migration changed
 * (refused), or the client left, or the wait is over. */
static void mig_fan_poll(uv_timer_t *t)
{
    struct mig_fan *f = t->data;
    struct worker *w = f->c != NULL ? f->c->w : NULL;
    const struct route_pool *rp = &f->pool->view;
    uint64_t st = rp->shared != NULL
                  ? atomic_load_explicit(&rp->shared->migrating, memory_order_acquire) : 0;

    f->waited_ms += MIG_FAN_POLL_MS;
    if (f->m == NULL || w == NULL) {
        mig_fan_end(NULL, f, 0);
        return;
    }
    if ((st & ~(uint64_t)MIG_ST_MASK) == f->word && (st & MIG_ST_PENDING) &&
        f->waited_ms < MIG_FAN_WAIT_MS && rp->ring == f->ring)
        return;                     /* still published only */
    uv_timer_stop(t);
    if ((st & ~(uint64_t)MIG_ST_MASK) != f->word || !(st & MIG_ST_MOVING) ||
        rp->ring != f->ring)
        f->failed++;
    else
        mig_fan_send(w, f);
    if (f->pending == 0)
        mig_fan_end(w, f, 0);
}

/* The moves of r's keys, then r: STAGE_TAKEN, or STAGE_PASS when it cannot be held
 * (the caller refuses it). */
static enum stage_verdict mig_fan_start(struct stage_req *r, uint64_t st)
{
    struct client *c = r->c;
    struct wpool *pool = r->pool;
    const struct route_pool *rp = &pool->view;
    const struct proto_req *req = r->req;
    struct msg *m = r->m;
    struct worker *w = c->w;
    uint32_t n = req->nkeys;

    if (c->in != CLIENT_IN_PARSE || c->nsessions != 0 || m->watch != NULL || c->closing)
        return STAGE_PASS;
    /* each moved key's group: a (previous owner, new owner) pair */
    uint32_t *grp = malloc(n * sizeof(*grp));
    struct server **gfrom = malloc(n * sizeof(*gfrom));
    uint32_t *gto = malloc(n * sizeof(*gto));
    uint32_t *gn = calloc(n, sizeof(*gn));
    struct mig_fan *f = NULL;
    uint32_t ng = 0, nmoved = 0;
    size_t bytes = 0;
    enum stage_verdict v = STAGE_PASS;
    if (grp == NULL || gfrom == NULL || gto == NULL || gn == NULL)
        goto out;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t o = ring_owner(rp->prev_ring, r->rk[k].bytes, r->rk[k].len);
        uint32_t was = o < rp->prev_ring->nservers ? rp->prev_map[o] : ROUTE_NONE;
        struct server *from;
        grp[k] = UINT32_MAX;
        if (was == ROUTE_NONE) {
            if (st & MIG_ST_DRAINED)
                continue;
            from = o < pool->nretiring ? pool->retiring[o] : NULL;
            if (from == NULL)
                goto out;
        } else if (was == r->rk[k].owner) {
            continue;
        } else {
            from = pool->servers[was];
        }
        uint32_t g = 0;
        while (g < ng && !(gfrom[g] == from && gto[g] == r->rk[k].owner))
            g++;
        if (g == ng) {
            gfrom[ng] = from;
            gto[ng] = r->rk[k].owner;
            ng++;
        }
        grp[k] = g;
        gn[g]++;
        nmoved++;
        bytes += r->rk[k].len;
    }
    if (ng == 0)
        goto out;
    f = calloc(1, sizeof(*f) + ng * sizeof(f->moves[0]));
    if (f == NULL)
        goto out;
    f->keys = malloc(nmoved * sizeof(*f->keys));
    f->kgrp = malloc(nmoved * sizeof(*f->kgrp));
    f->kbytes = malloc(bytes + 1);
    if (f->keys == NULL || f->kgrp == NULL || f->kbytes == NULL ||
        pool->ops->forward(req, r->buf, &f->wire) < 0)
        goto out;
    /* the moved keys, copied: the request's bytes are the client's until it returns */
    size_t at = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (grp[k] == UINT32_MAX)
            continue;
        memcpy(f->kbytes + at, r->rk[k].bytes, r->rk[k].len);
        f->keys[f->nkeys] = r->rk[k];
        f->keys[f->nkeys].bytes = f->kbytes + at;
        f->kgrp[f->nkeys] = grp[k];
        f->nkeys++;
        at += r->rk[k].len;
    }
    for (uint32_t g = 0; g < ng; g++) {
        f->moves[g].fan = f;
        f->moves[g].watch.done = mig_fan_moved;
        f->moves[g].from = gfrom[g];
        f->moves[g].to = gto[g];
        f->moves[g].nkeys = gn[g];
    }
    f->ng = ng;
    f->ring = rp->ring;
    f->word = st & ~(uint64_t)MIG_ST_MASK;
    f->watch.done = mig_fan_left;
    if (!(st & MIG_ST_MOVING)) {
        if (uv_timer_init(&w->loop, &f->timer) != 0)
            goto out;
        f->timer.data = f;
        f->timer_on = 1;
    }
    f->pool = pool;
    pool->refs++;
    f->c = c;
    f->m = m;
    m->watch = &f->watch;
    c->in = CLIENT_IN_HOLD;
    STATS_ADD(&pool->stats, migrate_key_moves, 1);
    v = STAGE_TAKEN;
    if (f->timer_on) {
        uv_timer_start(&f->timer, mig_fan_poll, MIG_FAN_POLL_MS, MIG_FAN_POLL_MS);
    } else {
        mig_fan_send(w, f);
        if (f->pending == 0)
            mig_fan_end(w, f, 1);   /* nothing went out: refused now */
    }
    f = NULL;
out:
    if (f != NULL) {
        if (f->timer_on) {
            f->timer_on = 0;
            uv_close((uv_handle_t *)&f->timer, mig_fan_closed);
        } else {
            mig_fan_free(f);
        }
    }
    free(grp);
    free(gfrom);
    free(gto);
    free(gn);
    return v;
}

/* A keyed request during a migration: its keys' previous owner moves them first. */
static enum stage_verdict mig_request(struct stage_req *r)
{
    struct wpool *pool = r->pool;
    const struct route_pool *rp = &pool->view;
    const struct proto_req *req = r->req;
    struct server *old = NULL;
    uint32_t to = ROUTE_NONE;
    uint64_t st = 0;

    switch (mig_case(r, &old, &to, &st)) {
    case MIG_HOME:
        return STAGE_PASS;
    case MIG_FAN:
        return mig_fan_start(r, st) == STAGE_TAKEN ? STAGE_TAKEN : mig_refuse(r);
    case MIG_REFUSE:
        return mig_refuse(r);
    case MIG_MOVE:
        break;
    }
    struct msg *m = r->m;
    struct server *dst = pool->servers[to];
    const char *reason = NULL;
    struct sconn *s = m->db == 0 ? server_pick(old, 0, 0, &reason)
                                 : server_pick_db(old, 0, 0, m->db, &reason);
    if (s == NULL)
        return mig_refuse(r);
    if (old->index == UINT32_MAX)       /* a retiring server in use: closed once drained */
        pool->retiring_seen = (rp->ring->checksum & ~(uint64_t)MIG_ST_MASK) | 1u;
    if (!(st & MIG_ST_MOVING)) {
        /* the ring was just published: until every worker routes by it (a worker still on
         * the previous one writes the key on its old owner) the key stays where it is */
        size_t at = buf_len(&s->conn.obuf);
        if (pool->ops->forward(req, r->buf, &s->conn.obuf) < 0) {
            buf_truncate(&s->conn.obuf, at);
            return mig_refuse(r);
        }
        m->req_bytes = buf_len(&s->conn.obuf) - at;
        STATS_ADD(&old->stats, requests, 1);
        STATS_ADD(&old->stats, request_bytes, m->req_bytes);
        sconn_enqueue(s, m);
        sconn_mark(r->c->w, s);
        return STAGE_TAKEN;
    }
    buf_truncate(&m->reqcopy, 0);
    if (pool->ops->forward(req, r->buf, &m->reqcopy) < 0) {
        buf_free(&m->reqcopy);
        return mig_refuse(r);
    }
    struct buf *out = &s->conn.obuf;
    size_t before = buf_len(out);
    int db = m->db != 0 ? m->db - 1 : pool->cp->redis_db;
    if (mig_write(out, r, dst, db) < 0) {
        buf_truncate(out, before);
        buf_free(&m->reqcopy);
        return mig_refuse(r);
    }
    m->warm = MSG_WARM_MOVE;
    m->warm_to = dst;
    m->mig_ring = rp->ring;
    m->warm_cmd = m->cmd;
    m->cmd = mig_cmd_id();
    m->flags |= MSG_F_STAGED;
    m->req_bytes = buf_len(out) - before;
    STATS_ADD(&pool->stats, migrate_key_moves, 1);
    sconn_enqueue(s, m);
    sconn_mark(r->c->w, s);
    return STAGE_TAKEN;
}

/*
 * The MIGRATE's reply: +OK or +NOKEY sends the request to the new owner (1: m comes back
 * here with that reply, which then completes it); anything else answers the client
 * -TRYAGAIN (0), for the request must not run on a new owner that may lack the value.
 */
static int mig_reply(struct worker *w, struct msg *m)
{
    if (m->warm != MSG_WARM_MOVE)
        return 0;
    /* m->server, the old owner, is alive (its reply is being read); the new owner may
     * have been removed by a reload meanwhile: it is used only while the pool still
     * routes by the ring the move was decided by (the same ring: the same servers) */
    struct wpool *pool = m->server->pool;
    struct server *dst = pool->view.ring == m->mig_ring ? m->warm_to : NULL;
    int ok = dst != NULL && m->client != NULL && m->state == MSG_SENT &&
             !(m->flags & MSG_F_ERROR) && buf_len(&m->rsp) > 0 && buf_rptr(&m->rsp)[0] == '+';

    m->warm = MSG_WARM_NONE;
    m->warm_to = NULL;
    m->mig_ring = NULL;
    m->cmd = m->warm_cmd;
    m->flags &= (uint16_t)~MSG_F_STAGED;
    if (m->client != NULL)
        m->client->held_bytes -= RL_MIN(m->client->held_bytes, buf_len(&m->rsp));
    m->rsp.rpos = m->rsp.wpos = 0;
    m->items = 0;
    if (ok) {
        const char *reason = NULL;
        struct sconn *s = m->db == 0 ? server_pick(dst, 0, 0, &reason)
                                     : server_pick_db(dst, 0, 0, m->db, &reason);
        if (s != NULL && buf_append(&s->conn.obuf, m->reqcopy.data, buf_len(&m->reqcopy)) == 0) {
            m->req_bytes = buf_len(&m->reqcopy);
            buf_free(&m->reqcopy);
            sconn_enqueue(s, m);
            sconn_mark(w, s);
            return 1;
        }
    }
    buf_free(&m->reqcopy);
    if (m->client == NULL)
        return 0;
    STATS_ADD(&pool->stats, migrate_refused, 1);
    if (buf_append(&m->rsp, MIG_TRYAGAIN, sizeof(MIG_TRYAGAIN) - 1) == 0)
        m->client->held_bytes += buf_len(&m->rsp);
    return 0;
}

/*
 * A request on a session's pinned connection (MULTI/EXEC, WATCH, blocking commands) is
 * not moved first (its connection is the session's, not the worker's): while a key of it
 * moves it is refused -TRYAGAIN, and a transaction it was queued in ends EXECABORT.
 */
static enum stage_verdict mig_pinned(struct stage_req *r)
{
    struct server *from;
    uint32_t to;
    uint64_t st;
    return mig_case(r, &from, &to, &st) == MIG_HOME ? STAGE_PASS : mig_refuse(r);
}

/* ------------------------------------------------------------------ retiring servers */

/*
 * Whether the pool still wants the servers its ring's reload removed: while its migration
 * from the previous ring runs (pending or moving) and the removed servers are not drained;
 * and, before that migration was seen running, while it may yet start (a proxy restarted
 * from its state file binds its pools before the control starts the walk). Once seen, a
 * word that no longer names this ring means the migration ended or another replaced it.
 */
static int mig_retiring_wanted(struct wpool *wp)
{
    const struct route_pool *rp = &wp->view;
    if (!mig_wanted(wp->cp, NULL) || rp->prev_ring == NULL || rp->prev_map == NULL ||
        rp->shared == NULL || rp->ring == NULL)
        return 0;
    uint64_t sum = rp->ring->checksum & ~(uint64_t)MIG_ST_MASK;
    uint64_t st = atomic_load_explicit(&rp->shared->migrating, memory_order_acquire);
    if ((st & ~(uint64_t)MIG_ST_MASK) == sum && (st & (MIG_ST_MOVING | MIG_ST_PENDING))) {
        wp->retiring_seen = sum | 1u;
        return !(st & MIG_ST_DRAINED);
    }
    return wp->retiring_seen != (sum | 1u);
}

static void mig_retiring_close(struct server **v, uint32_t n)
{
    for (uint32_t i = 0; v != NULL && i < n; i++)
        if (v[i] != NULL)
            server_destroy(v[i], 0);    /* in-flight moves finish (mig_reply) */
}

void migrate_retiring_bind(struct worker *w, struct wpool *wp, struct server **left,
                           uint32_t nleft)
{
    struct server **had = wp->retiring;
    uint32_t nhad = wp->nretiring;
    const struct ring *pr = wp->view.prev_ring;

    wp->retiring = NULL;
    wp->nretiring = 0;
    if (!mig_retiring_wanted(wp)) {
        mig_retiring_close(had, nhad);
        free(had);
        return;
    }
    struct server **v = NULL;
    for (uint32_t j = 0; j < pr->nservers; j++) {
        if (wp->prev_map[j] != ROUTE_NONE)
            continue;
        if (v == NULL && (v = calloc(pr->nservers, sizeof(*v))) == NULL)
            break;
        const struct ring_server *rs = &pr->servers[j];
        /* the same server object as before (its connections): dropped by this reload,
         * or retiring since an earlier one */
        for (uint32_t pass = 0; v[j] == NULL && pass < 2; pass++) {
            struct server **c = pass == 0 ? left : had;
            uint32_t n = pass == 0 ? nleft : nhad;
            for (uint32_t i = 0; c != NULL && i < n; i++)
                if (c[i] != NULL && strcmp(c[i]->ident, rs->ident) == 0 && rs->addr != NULL &&
                    strcmp(c[i]->addr.text, rs->addr) == 0) {
                    v[j] = c[i];
                    c[i] = NULL;
                    break;
                }
        }
        if (v[j] == NULL && rs->addr != NULL) {     /* a restart: the state file's ring */
            struct conf_server cs;
            char err[256];
            memset(&cs, 0, sizeof(cs));
            cs.ident = (char *)rs->ident;
            cs.label = (char *)rs->label;
            cs.weight = rs->weight;
            if (conf_parse_addr(rs->addr, &cs.addr, err, sizeof(err)) == 0) {
                v[j] = server_create(w, wp, &cs);
                conf_addr_free(&cs.addr);
            }
        }
        if (v[j] == NULL)
            log_warn("worker %u: pool '%s': removed server '%s' cannot be kept while its keys "
                     "move: its keys are answered -TRYAGAIN until it is drained", w->id,
                     wp->cp->name, rs->label);
        else {
            v[j]->health = NULL;            /* in no ring: never ejected, never rejoins */
            v[j]->index = UINT32_MAX;
        }
    }
    mig_retiring_close(had, nhad);
    free(had);
    wp->retiring = v;
    wp->nretiring = v != NULL ? pr->nservers : 0;
}

void migrate_retiring_tick(struct wpool *wp)
{
    if (wp->retiring == NULL || mig_retiring_wanted(wp))
        return;
    log_info("worker %u: pool '%s': the removed servers are drained: closing them",
             wp->w->id, wp->cp->name);
    migrate_retiring_drop(wp);
}

void migrate_retiring_drop(struct wpool *wp)
{
    struct server **v = wp->retiring;
    uint32_t n = wp->nretiring;
    wp->retiring = NULL;
    wp->nretiring = 0;
    mig_retiring_close(v, n);
    free(v);
}

const struct stage stage_migrate = {
    .name = "migrate",
    .wanted = mig_wanted,
    .request = mig_request,
    .reply = mig_reply,
    .pinned = mig_pinned,
};
