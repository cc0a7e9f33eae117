/* Rejoin: what was written for a down server's keys is remembered, and invalidated on it (or it is flushed) before it serves reads again. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "state/health.h"
#include "lib/log.h"
#include "proxy/msg.h"
#include "state/registry.h"
#include "proxy/snapshot.h"
#include "proxy/rejoin.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "state/rejoin_journal.h"
#include "state/rejoin_log.h"
#include "lib/util.h"

#define REJOIN_WINDOW        256    /* invalidations in flight at once per rejoin */
#define REJOIN_ROUNDS_MAX    16     /* then it flushes: writes keep being routed for it */
#define REJOIN_TIMEOUT_MS    1000   /* for each request, in a pool without a timeout */

/* ------------------------------------------------------------------ remembering */

/* Remember one key for server `p` of the pool (not up): its rejoin deletes it
 * there (unless the write reached it) and on `also`. -1: p is up by now. */
static int rejoin_note_one(struct wpool *pool, const struct route_key *k, uint32_t p,
                           uint32_t also, int reached)
{
    struct health *h = pool->view.health[p];
    unsigned flags = reached ? 0 : REJOIN_E_OWNER;

    if (also != ROUTE_NONE && also != p)
        flags |= REJOIN_E_ALSO;
    if (flags == 0 || h->rejoin == NULL)
        return 0;
    enum rejoin_add rc = rejoin_log_add(h->rejoin, k->bytes, k->len,
                                        (flags & REJOIN_E_ALSO) ? pool->view.health[also] : NULL,
                                        flags, pool->cp->rejoin_log_keys);
    if (rc == REJOIN_IS_UP)
        return -1;
    if (rc != REJOIN_OVERFLOW)      /* an overflow is counted when it flushes */
        STATS_ADD(&pool->stats, rejoin_logged, 1);
    return 0;
}

int rejoin_note(struct wpool *pool, const struct route_key *rk, uint32_t n,
                const struct route *rt)
{
    const struct conf_pool *cp = pool->cp;
    const struct ring *ring = pool->view.ring;
    uint32_t nrep = RL_MIN(RL_MIN(cp->replicas > 1 ? cp->replicas : 1, ring->nservers),
                           RING_MAX_PREF);
    uint32_t also = ROUTE_NONE;
    int again = 0;

    if (cp->rejoin != CONF_REJOIN_INVALIDATE)
        return 0;
    if ((rt->events & ROUTE_EV_FAILOVER) && (rt->kind == ROUTE_SEND || rt->kind == ROUTE_COPIES))
        also = rt->to[0];
    for (uint32_t k = 0; k < n; k++) {
        uint32_t pref[RING_MAX_PREF];
        uint32_t np = 1;
        pref[0] = rk[k].owner;
        if (nrep > 1)
            np = ring_preference_hash(ring, rk[k].hash, pref, nrep);
        for (uint32_t i = 0; i < np; i++) {
            uint32_t p = pref[i];
            if (health_up(pool->view.health[p]))
                continue;
            int reached = 0;
            for (uint32_t t = 0; (rt->kind == ROUTE_SEND || rt->kind == ROUTE_COPIES) && t < rt->n; t++)
                reached |= rt->to[t] == p;
            if (rejoin_note_one(pool, &rk[k], p, also, reached) < 0)
                again = 1;
        }
    }
    return again;
}

int rejoin_note_fanout(struct wpool *pool, const struct route_key *rk, const uint32_t *to,
                       uint32_t n)
{
    int again = 0;

    if (pool->cp->rejoin != CONF_REJOIN_INVALIDATE)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (to[i] != rk[i].owner && !health_up(pool->view.health[rk[i].owner]) &&
            rejoin_note_one(pool, &rk[i], rk[i].owner, to[i], 0) < 0)
            again = 1;
    return again;
}

/* ------------------------------------------------------------------ the rejoin */

/* One returning server's rejoin, on the worker whose probe brought it back. */
struct rejoin_round {
    struct msg_watch  watch;        /* its invalidations and flush report here */
    struct server    *srv;
    struct rejoin_set set;          /* the entries of this round */
    uint32_t          next;         /* the next entry of set to send */
    uint32_t          pending;      /* requests to srv not answered yet */
    uint32_t          rounds;
    uint64_t          acked;        /* deletes srv acknowledged, all rounds */
    uint64_t          started_ms;
    int               over;         /* the set was taken from an overflowed log */
    int               flushing;     /* the request pending is a flush of srv */
    int               flushed;      /* a flush of srv was acknowledged */
    int               failed;
};

static void rejoin_round_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok);
static void rejoin_also_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok);
static const struct msg_watch rejoin_also_watch = { rejoin_also_done, 0 };

/*
 * Queue one of the proxy's own requests on srv: the delete of key[0..len), or
 * with `flush` the protocol's flush, watched by wt, with the pool's timeout
 * (REJOIN_TIMEOUT_MS without one). 0, or -1 (nothing queued).
 */
static int rejoin_send(struct server *srv, const struct msg_watch *wt, const char *key,
                       size_t len, int flush)
{
    struct worker *w = srv->w;
    const struct proto_ops *ops = srv->pool->ops;
    const char *reason = NULL;
    struct sconn *s = server_pick(srv, 0, 0, &reason);
    struct msg *m = s != NULL ? msg_get(w) : NULL;
    uint16_t cmd = 0;

    if (m == NULL)
        return -1;
    struct buf *out = &s->conn.obuf;
    size_t before = buf_len(out);
    int rc;
    if (flush) {
        rc = buf_append_str(out, ops->flush);
        cmd = ops->flush_cmd;
    } else {
        rc = ops->invalidate(key, len, out, &cmd);
    }
    if (rc < 0) {
        buf_truncate(out, before);
        msg_put(w, m);
        return -1;
    }
    m->role = MSG_OWN;
    m->cmd = cmd;
    m->rflags = PROTO_RF_WRITE;
    m->watch = (struct msg_watch *)wt;
    m->start_us = worker_now_us(w);
    m->req_bytes = buf_len(out) - before;
    STATS_ADD(&srv->stats, requests, 1);
    STATS_ADD(&srv->stats, request_bytes, m->req_bytes);
    sconn_enqueue(s, m);
    if (srv->pool->cp->timeout_ms <= 0)
        sconn_deadline_in(s, m, REJOIN_TIMEOUT_MS);
    sconn_mark(w, s);
    return 0;
}

/* The server of srv's pool whose health record is h, or NULL. */
static struct server *rejoin_server_of(const struct server *srv, const struct health *h)
{
    const struct wpool *pool = srv->pool;
    for (uint32_t i = 0; h != NULL && i < pool->nservers; i++)
        if (pool->servers[i]->health == h)
            return pool->servers[i];
    return NULL;
}

/* Deletes of set's keys on the servers that took their writes: best effort (a
 * failover server that does not answer keeps its copy, as without rejoin). */
static void rejoin_send_also(struct server *srv, const struct rejoin_set *set)
{
    struct server *last = NULL;
    const struct health *last_h = NULL;

    for (uint32_t i = 0; i < set->n; i++) {
        const struct rejoin_entry *e = &set->e[i];
        if (!(e->flags & REJOIN_E_ALSO) || e->also == NULL)
            continue;
        if (e->also != last_h) {
            last_h = e->also;
            last = rejoin_server_of(srv, e->also);
        }
        if (last == NULL || last == srv || last->removed)
            continue;
        if (rejoin_send(last, &rejoin_also_watch, set->keys + e->off, e->len, 0) == 0)
            STATS_ADD(&srv->pool->stats, rejoin_invalidations, 1);
    }
}

static void rejoin_also_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    (void)wt;
    (void)w;
    if (!ok || (m->flags & MSG_F_ERROR))
        log_info("server '%s': a rejoin's delete of a copy it took was not acknowledged; "
                 "the copy stays", m->server->label);
}

/* The rejoin could not be completed: the entries go back, the server down again. */
static void rejoin_fail(struct rejoin_round *r, const char *why)
{
    struct server *srv = r->srv;
    const struct conf_pool *cp = srv->pool->cp;
    uint32_t retry = cp->server_retry_timeout_ms > 0 ? (uint32_t)cp->server_retry_timeout_ms
                                                     : 30000;

    r->failed = 1;
    if (srv->health->rejoin != NULL && (r->set.n > 0 || r->over))
        rejoin_log_restore(srv->health->rejoin, &r->set, cp->rejoin_log_keys, r->over);
    rejoin_set_free(&r->set);
    r->next = 0;
    if (health_rejoin_failed(srv->health, util_now_ms(), retry, util_wall_us())) {
        STATS_ADD(&srv->pool->stats, rejoin_failed, 1);
        log_warn("server '%s' (%s) of pool '%s': %s; it stays down (its keys keep following "
                 "on_down) and is probed again later", srv->label, srv->addr.text, cp->name,
                 why);
    }
}

/* Send the round's next invalidations, up to the window. 0, or -1 (not sent). */
static int rejoin_fill(struct rejoin_round *r)
{
    struct server *srv = r->srv;

    while (r->next < r->set.n && r->pending < REJOIN_WINDOW) {
        const struct rejoin_entry *e = &r->set.e[r->next];
        if (e->flags & REJOIN_E_OWNER) {
            if (rejoin_send(srv, &r->watch, r->set.keys + e->off, e->len, 0) < 0)
                return -1;
            r->pending++;
            STATS_ADD(&srv->pool->stats, rejoin_invalidations, 1);
        }
        r->next++;
    }
    return 0;
}

/* Up: nothing is left to invalidate on the server, which takes reads from now on. */
static void rejoin_up(struct rejoin_round *r, struct rejoin_set *rest)
{
    struct server *srv = r->srv;

    rejoin_send_also(srv, rest);
    rejoin_set_free(rest);
    if (r->flushed)
        log_notice("server '%s' (%s) of pool '%s' is up again, flushed first (%llu ms)",
                   srv->label, srv->addr.text, srv->pool->cp->name,
                   (unsigned long long)(util_now_ms() - r->started_ms));
    else
        log_notice("server '%s' (%s) of pool '%s' is up again (%llu invalidation%s "
                   "acknowledged in %u round%s, %llu ms)", srv->label, srv->addr.text,
                   srv->pool->cp->name, (unsigned long long)r->acked, r->acked == 1 ? "" : "s",
                   r->rounds, r->rounds == 1 ? "" : "s",
                   (unsigned long long)(util_now_ms() - r->started_ms));
}

/* Start a flush of the server (rejoin: flush, or a fallback). 0 or -1. */
static int rejoin_flush(struct rejoin_round *r)
{
    if (rejoin_send(r->srv, &r->watch, NULL, 0, 1) < 0)
        return -1;
    r->pending++;
    r->flushing = 1;
    STATS_ADD(&r->srv->pool->stats, rejoin_flushes, 1);
    return 0;
}

/*
 * The next step of a rejoin whose last round (if any) was acknowledged: the
 * copies its entries left on failover servers are deleted; then a flush (rejoin:
 * flush), or up when the log holds nothing for the server any more, or another
 * round of what it holds. Frees r when the rejoin is over.
 */
static void rejoin_next(struct rejoin_round *r)
{
    struct server *srv = r->srv;
    struct rejoin_log *log = srv->health->rejoin;
    const struct conf_pool *cp = srv->pool->cp;

    while (r->pending == 0) {
        if (srv->removed) {
            rejoin_fail(r, "removed by a reload while rejoining");
            break;
        }
        if (r->set.n > 0)
            rejoin_send_also(srv, &r->set);
        rejoin_set_free(&r->set);
        r->next = 0;
        r->over = 0;
        if (!r->flushed && (cp->rejoin == CONF_REJOIN_FLUSH || log == NULL)) {
            if (rejoin_flush(r) < 0)
                rejoin_fail(r, "its flush could not be sent");
            break;
        }
        struct rejoin_set rest;
        if (log == NULL) {          /* flushed, and nothing to remember: up */
            memset(&rest, 0, sizeof(rest));
            (void)health_rejoined(srv->health, util_now_ms());
            rejoin_up(r, &rest);
            break;
        }
        if (rejoin_log_finish(log, &rest, r->flushed, util_now_ms())) {
            rejoin_up(r, &rest);
            break;
        }
        /* Keys for the server itself: invalidate them (another round, or a flush). */
        r->over = rejoin_log_take(log, &r->set);
        if (r->over || ++r->rounds > REJOIN_ROUNDS_MAX) {
            STATS_ADD(&srv->pool->stats, rejoin_fallbacks, 1);
            log_warn("server '%s' (%s) of pool '%s': %s; it is flushed instead", srv->label,
                     srv->addr.text, cp->name,
                     r->over ? "more was written for it while it was away than rejoin_log_keys "
                               "remembers"
                             : "writes routed for it while it was down keep arriving");
            if (rejoin_flush(r) < 0)
                rejoin_fail(r, "its flush could not be sent");
            break;
        }
        if (rejoin_fill(r) < 0) {
            rejoin_fail(r, "its invalidations could not be sent");
            break;
        }
    }
    if (r->pending == 0)
        free(r);
}

static void rejoin_round_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    struct rejoin_round *r =
        (struct rejoin_round *)(void *)((char *)wt - offsetof(struct rejoin_round, watch));
    (void)w;
    r->pending--;
    if (r->failed) {
        if (r->pending == 0)
            free(r);
        return;
    }
    if (!ok || (m->flags & MSG_F_ERROR)) {
        rejoin_fail(r, r->flushing ? "its flush was refused, timed out or lost its connection"
                                   : "an invalidation was refused, timed out or lost its "
                                     "connection");
        if (r->pending == 0)
            free(r);
        return;
    }
    if (r->flushing) {
        r->flushing = 0;
        r->flushed = 1;
    } else {
        r->acked++;
    }
    if (r->pending > REJOIN_WINDOW / 2)
        return;
    if (r->next < r->set.n) {
        if (rejoin_fill(r) < 0) {
            rejoin_fail(r, "its invalidations could not be sent");
            if (r->pending == 0)
                free(r);
        }
        return;
    }
    if (r->pending == 0)
        rejoin_next(r);
}

void rejoin_begin(struct server *srv)
{
    struct rejoin_round *r = calloc(1, sizeof(*r));
    const struct conf_pool *cp = srv->pool->cp;
    uint32_t keys = 0;
    uint64_t bytes = 0;

    if (r == NULL) {
        uint32_t retry = cp->server_retry_timeout_ms > 0 ? (uint32_t)cp->server_retry_timeout_ms
                                                         : 30000;
        health_rejoin_failed(srv->health, util_now_ms(), retry, util_wall_us());
        log_error("server '%s' of pool '%s': out of memory starting its rejoin; it stays down",
                  srv->label, cp->name);
        return;
    }
    r->watch.done = rejoin_round_done;
    r->srv = srv;
    r->started_ms = util_now_ms();
    if (srv->health->rejoin != NULL)
        rejoin_log_size(srv->health->rejoin, &keys, &bytes);
    log_notice("server '%s' (%s) of pool '%s' answers again; before it serves reads: %s",
               srv->label, srv->addr.text, cp->name,
               cp->rejoin == CONF_REJOIN_FLUSH ? "a flush (rejoin: flush)"
               : keys == 0 ? "nothing was written for it meanwhile"
                           : "invalidating the keys written for it meanwhile");
    if (keys > 0)
        log_info("server '%s': %u key(s), %llu bytes to invalidate", srv->label, keys,
                 (unsigned long long)bytes);
    rejoin_next(r);
}

/* ------------------------------------------------------------------ the process's logs */

struct rejoin_store {
    uv_timer_t             timer;       /* syncs the journal (main loop) */
    struct rejoin_journal *journal;     /* NULL: no rejoin_log */
    struct rejoin_log     *logs;        /* every log, freed at close */
    char                  *path;        /* the journal's (rejoin_log at start), or NULL */
    int                    started;     /* the timer is initialised */
};

static void rejoin_store_tick(uv_timer_t *t)
{
    struct rejoin_store *st = t->data;
    rejoin_journal_sync(st->journal);
}

struct rejoin_store *rejoin_store_open(const char *path, char *err, size_t errlen)
{
    struct rejoin_store *st = calloc(1, sizeof(*st));

    if (st == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (path != NULL && (st->path = strdup(path)) == NULL) {
        snprintf(err, errlen, "out of memory");
        free(st);
        return NULL;
    }
    if (path != NULL && (st->journal = rejoin_journal_open(path, err, errlen)) == NULL) {
        free(st->path);
        free(st);
        return NULL;
    }
    return st;
}

void rejoin_store_start(struct rejoin_store *st, uv_loop_t *loop)
{
    uv_timer_init(loop, &st->timer);
    st->timer.data = st;
    st->started = 1;
    if (st->journal != NULL)
        uv_timer_start(&st->timer, rejoin_store_tick, REJOIN_JOURNAL_SYNC_MS,
                       REJOIN_JOURNAL_SYNC_MS);
}

/* The replay of a journal into a new log. */
struct rejoin_replay {
    struct rejoin_log *log;
    struct registry   *healths;
    int                nomem;
};

static void rejoin_replay_key(void *arg, const char *key, size_t len, const char *also,
                              unsigned flags)
{
    struct rejoin_replay *rp = arg;
    struct health *ah = NULL;

    if (also != NULL) {
        /* "pool\tident\taddr" is the registry's "pool\0ident\0addr" */
        char name[1024];
        size_t n = strlen(also);
        if (n < sizeof(name)) {
            for (size_t i = 0; i <= n; i++)
                name[i] = also[i] == '\t' ? '\0' : also[i];
            ah = registry_get(rp->healths, name, n);
        }
    }
    if (rejoin_set_add(&rp->log->set, XXH3_64bits(key, len), key, len, ah, flags) < 0)
        rp->nomem = 1;
    else
        rp->log->journalled++;
}

int rejoin_store_attach(struct rejoin_store *st, struct health *h, const struct conf_pool *cp,
                        const struct conf_server *cs, struct registry *healths)
{
    const char *pool = cp->name;
    char ident[1024];
    int n = snprintf(ident, sizeof(ident), "%s\t%s\t%s", pool, cs->ident, cs->addr.text);
    if (n < 0 || (size_t)n >= sizeof(ident))
        return -ENOMEM;
    struct rejoin_log *l = rejoin_log_new(h, ident, st->journal);
    if (l == NULL)
        return -ENOMEM;
    l->next = st->logs;
    st->logs = l;
    h->rejoin = l;

    struct rejoin_replay rp = { l, healths, 0 };
    int over = rejoin_journal_replay(st->journal, ident, rejoin_replay_key, &rp);
    if (over < 0)
        return 0;
    if (over > 0 || rp.nomem) {
        l->overflowed = 1;
        l->journalled++;
    }
    if (!cp->eject || cp->rejoin == CONF_REJOIN_TRUST) {
        /* The pool no longer invalidates: forget them (and let the journal shrink). */
        struct rejoin_set none;
        rejoin_log_finish(l, &none, 1, util_now_ms());
        rejoin_set_free(&none);
        return 0;
    }
    atomic_store(&l->nkeys, l->set.n);
    atomic_store(&l->nbytes, l->set.klen);
    health_mark_down(h, util_wall_us());
    log_notice("server '%s' (%s) of pool '%s': the rejoin log holds %u key(s)%s written while "
               "it was away: down until they are invalidated on it", cs->label, cs->addr.text,
               pool, l->set.n, l->overflowed ? " and more" : "");
    return 0;
}

/* Say that what was remembered for server `ident` ("pool\tident\taddr") is forgotten. */
static void rejoin_forgotten(void *arg, const char *ident, size_t keys, int overflowed)
{
    (void)arg;
    char name[1024];
    snprintf(name, sizeof(name), "%s", ident);
    char *server = strchr(name, '\t');
    char *addr = server != NULL ? strchr(server + 1, '\t') : NULL;
    if (addr == NULL)
        return;
    *server++ = '\0';
    *addr++ = '\0';
    log_warn("server '%s' (%s) of pool '%s' is no longer configured: the %zu key(s)%s "
             "remembered for its rejoin are forgotten", server, addr, name, keys,
             overflowed ? " and more" : "");
}

/* Whether health record h is one of snap's servers'. */
static int rejoin_configured(const struct snapshot *snap, const struct health *h)
{
    for (uint32_t i = 0; i < snap->conf->npools; i++)
        for (uint32_t k = 0; k < snap->conf->pools[i].nservers; k++)
            if (snap->pools[i].health[k] == h)
                return 1;
    return 0;
}

void rejoin_store_prune(struct rejoin_store *st, const struct snapshot *snap)
{
    if (st == NULL || snap == NULL)
        return;
    for (struct rejoin_log *l = st->logs; l != NULL; l = l->next) {
        if (rejoin_configured(snap, l->h))
            continue;
        int over = 0;
        long had = rejoin_log_forget(l, &over);
        if (had >= 0)
            rejoin_forgotten(NULL, l->ident, (size_t)had, over);
    }
    rejoin_journal_forget(st->journal, rejoin_forgotten, NULL);
}

int rejoin_store_check(const struct rejoin_store *st, const char *path, char *err,
                       size_t errlen)
{
    char why[1024];

    if (path == NULL || (st != NULL && st->path != NULL && strcmp(st->path, path) == 0))
        return 0;
    if (rejoin_journal_check(path, why, sizeof(why)) == 0)
        return 0;
    snprintf(err, errlen, "rejoin_log: %s (a restart would refuse it)", why);
    return -1;
}

static void rejoin_store_closed(uv_handle_t *h)
{
    free(h->data);
}

void rejoin_store_close(struct rejoin_store *st)
{
    if (st == NULL)
        return;
    if (st->started)
        uv_timer_stop(&st->timer);
    rejoin_journal_close(st->journal);
    st->journal = NULL;
    for (struct rejoin_log *l = st->logs, *next; l != NULL; l = next) {
        next = l->next;
        rejoin_log_free(l);
    }
    st->logs = NULL;
    free(st->path);
    st->path = NULL;
    if (st->started)
        uv_close((uv_handle_t *)&st->timer, rejoin_store_closed);
    else
        free(st);
}

/* ------------------------------------------------------------------ the stage */

/*
 * A write routed around a down or rejoining server is remembered for that server's
 * rejoin before it is sent; when the server came back meanwhile the write is routed
 * again (STAGE_AGAIN). A split write: only the keys that failed over.
 */
static enum stage_verdict rejoin_routed(struct stage_req *r)
{
    const struct route *rt = r->rt;

    if (r->owner != NULL)
        return (r->req->flags & PROTO_RF_WRITE) && (rt->events & ROUTE_EV_FAILOVER) &&
               rejoin_note_fanout(r->pool, r->rk, r->owner, r->req->nkeys) != 0
               ? STAGE_AGAIN : STAGE_PASS;
    if ((rt->events & (ROUTE_EV_DOWN_WRITE | ROUTE_EV_REJOIN_COPY)) &&
        rejoin_note(r->pool, r->rk, r->req->nkeys, rt) > 0)
        return STAGE_AGAIN;
    return STAGE_PASS;
}

const struct stage stage_rejoin = {
    .name = "rejoin",
    .routed = rejoin_routed,
};
