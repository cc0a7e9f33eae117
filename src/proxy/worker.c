/* struct worker: a thread running one libuv loop with its own listeners, clients and servers. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/invariant.h"
#include "lib/log.h"
#include "proto/proto.h"
#include "proxy/client.h"
#include "proxy/cluster_worker.h"
#include "proxy/msg.h"
#include "proxy/hub.h"
#include "proxy/lease.h"
#include "proxy/migrate.h"
#include "proxy/nearcache.h"
#include "proxy/tracking.h"
#include "proxy/rejoin.h"
#include "proxy/snapshot.h"
#include "state/registry.h"
#include "proxy/server.h"
#include "proxy/introspect.h"
#include "proxy/worker.h"

#define WORKER_HOTKEY_WINDOW_MS 60000

/* ------------------------------------------------------------------ flush */

/* The schedule's callbacks (sched.h): what a dirty connection's flush is. */
static void worker_flush_sconn(struct sched_node *n)
{
    sconn_flush(QUEUE_DATA(n, struct sconn, sched));
}

static void worker_flush_client(struct sched_node *n)
{
    client_flush(QUEUE_DATA(n, struct client, sched));
}

/* After each round of I/O callbacks. */
static void worker_flush_cb(uv_check_t *h)
{
    struct worker *w = h->data;

    /* its own callbacks, inlined: the hot path calls sconn_flush and client_flush directly */
    sched_flush_with(&w->sched, worker_flush_sconn, worker_flush_client);
    w->now_valid = 0;           /* the next iteration reads the clock afresh */
}

/* ------------------------------------------------------------------ listeners */

static void listener_connection_cb(uv_stream_t *st, int status)
{
    struct listener *l = st->data;

    if (status < 0) {
        log_warn("accept on pool '%s': %s", l->pool->cp->name, uv_strerror(status));
        return;
    }
    if (l->w->closing)
        return;
    client_accept(l);
}

/* Listen on this worker's socket of the snapshot's pool (a dup of it: the
 * snapshot keeps its own for the next one). 0, or a libuv error with err. */
static int worker_listen(struct worker *w, struct wpool *wp, const struct snapshot *snap,
                         char *err, size_t errlen)
{
    const struct conf_addr *a = &wp->cp->listen;
    const int *fds = snap->pools[wp->index].listen_fds;
    struct listener *l = calloc(1, sizeof(*l));
    int rc;

    if (l == NULL)
        return UV_ENOMEM;
    l->w = w;
    l->pool = wp;
    l->is_unix = a->path != NULL;
    int fd = fds != NULL ? dup(fds[w->id]) : -1;
    if (fd < 0) {
        snprintf(err, errlen, "listen %s: %s", a->text, strerror(errno));
        free(l);
        return UV_EBADF;
    }
    rc = l->is_unix ? uv_pipe_init(&w->loop, &l->h.pipe, 0) : uv_tcp_init(&w->loop, &l->h.tcp);
    if (rc < 0) {
        close(fd);
        free(l);
        snprintf(err, errlen, "listen %s: %s", a->text, uv_strerror(rc));
        return rc;
    }
    l->h.handle.data = l;
    rc = l->is_unix ? uv_pipe_open(&l->h.pipe, fd) : uv_tcp_open(&l->h.tcp, fd);
    if (rc < 0)
        close(fd);
    if (rc == 0)
        rc = uv_listen(&l->h.stream, wp->cp->backlog > 0 ? wp->cp->backlog : 512,
                       listener_connection_cb);
    if (rc < 0) {
        snprintf(err, errlen, "listen %s: %s", a->text, uv_strerror(rc));
        uv_close(&l->h.handle, (uv_close_cb)free);
        return rc;
    }
    wp->listener = l;
    return 0;
}

static void listener_close(struct wpool *wp)
{
    if (wp->listener != NULL) {
        uv_close(&wp->listener->h.handle, (uv_close_cb)free);
        wp->listener = NULL;
    }
}

/* ------------------------------------------------------------------ pools */

static void wpool_free(struct wpool *wp)
{
    if (queue_linked(&wp->retired_link))
        queue_remove(&wp->retired_link);
    nearcache_drop(wp);
    tracking_pool_drop(wp);
    cworker_free(wp->cworker);
    lease_free(wp);
    introspect_free(wp);
    if (wp->hold != NULL)
        snapshot_unref(wp->hold);
    free(wp->servers);
    free(wp->hot_pub);
    free(wp->prev_map);
    free(wp->retiring);     /* its servers are gone: they held references */
    free(wp);
}

/* Point a pool at pool i of a snapshot (config, protocol, ring, routing view). */
static void wpool_bind(struct wpool *wp, struct snapshot *snap, uint32_t i)
{
    const struct snapshot_pool *sp = &snap->pools[i];
    const struct conf_pool *cp = &snap->conf->pools[i];

    wp->index = i;
    wp->cp = cp;
    wp->snap = snap;
    wp->ops = sp->ops;
    wp->view.cp = cp;
    wp->view.ring = sp->ring;
    wp->view.health = sp->health;
    wp->view.nservers = cp->nservers;
    wp->view.prev_ring = sp->prev_ring;
    wp->view.prev_map = NULL;
    wp->view.warm_until_ms = sp->warm_until_ms;
    wp->view.shared = sp->shared;
    wp->view.zone = snap->conf->global.zone;
    wp->view.rules = sp->rules;
    wp->view.cluster = sp->cview;
    stage_chain_build(&wp->chain, cp, &snap->conf->global);
    tracking_pool_bound(wp);    /* armed while a client of the worker tracks */
    /* a cluster pool follows redirects: it keeps each request's bytes to re-send them */
    wp->retain_req = sp->cluster != NULL;
    if (sp->cluster != NULL && wp->cworker == NULL &&
        (wp->cworker = cworker_create(wp, sp->cluster)) == NULL)
        log_error("worker %u: pool '%s': out of memory: cluster redirects reach the clients",
                  wp->w->id, cp->name);
    if (sp->cluster == NULL && wp->cworker != NULL) {
        cworker_free(wp->cworker);
        wp->cworker = NULL;
    }
    wp->shadow = sp->shadow;
    wp->tls = sp->tls;
    wp->server_tls = sp->server_tls;
    if (introspect_bind(wp, &snap->conf->global) < 0)
        log_error("worker %u: pool '%s': out of memory: introspection keeps its settings",
                  wp->w->id, cp->name);
}

/* warm-up: where each server of the previous ring is now. */
static void wpool_prev_map(struct wpool *wp)
{
    const struct ring *pr = wp->view.prev_ring;
    const struct conf_pool *cp = wp->cp;

    free(wp->prev_map);
    wp->prev_map = NULL;
    if (pr == NULL)
        return;
    wp->prev_map = malloc(pr->nservers * sizeof(*wp->prev_map));
    if (wp->prev_map == NULL) {
        wp->view.prev_ring = NULL;      /* no warm-up rather than no pool */
        return;
    }
    for (uint32_t j = 0; j < pr->nservers; j++) {
        wp->prev_map[j] = ROUTE_NONE;
        for (uint32_t i = 0; i < cp->nservers; i++)
            if (strcmp(pr->servers[j].ident, cp->servers[i].ident) == 0)
                wp->prev_map[j] = i;
    }
    wp->view.prev_map = wp->prev_map;
}

/*
 * Give the pool its server array for its (new) config: servers present
 * before (same identity and address) keep their object and connections;
 * new ones are created; the others drain their in-flight requests and close.
 */
static int wpool_servers(struct worker *w, struct wpool *wp)
{
    const struct conf_pool *cp = wp->cp;
    struct server **nsrv = calloc(cp->nservers ? cp->nservers : 1, sizeof(*nsrv));
    if (nsrv == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < cp->nservers; i++) {
        const struct conf_server *cs = &cp->servers[i];
        /* Most reloads keep the order: try the same position first, so a
         * 1,000-server pool is matched in O(n), not O(n^2). */
        for (uint32_t t = 0; t <= wp->nservers; t++) {
            uint32_t j = t == 0 ? i : t - 1;
            if (j >= wp->nservers || (t > 0 && j == i))
                continue;
            struct server *old = wp->servers[j];
            if (old != NULL && strcmp(old->ident, cs->ident) == 0 &&
                strcmp(old->addr.text, cs->addr.text) == 0) {
                nsrv[i] = old;
                wp->servers[j] = NULL;
                break;
            }
        }
        if (nsrv[i] == NULL) {
            nsrv[i] = server_create(w, wp, cs);
            if (nsrv[i] == NULL) {
                /* keep what we had: put the reused ones back */
                for (uint32_t k = 0; k < i; k++)
                    for (uint32_t j = 0; j < wp->nservers; j++)
                        if (wp->servers[j] == NULL) {
                            wp->servers[j] = nsrv[k];
                            break;
                        }
                free(nsrv);
                return -ENOMEM;
            }
            if (w->started && cp->preconnect)
                server_preconnect(nsrv[i]);
        }
    }
    struct server **left = wp->servers;
    uint32_t nleft = wp->nservers;
    wp->servers = nsrv;
    wp->nservers = cp->nservers;
    for (uint32_t i = 0; i < cp->nservers; i++) {
        nsrv[i]->health = wp->view.health[i];
        nsrv[i]->index = i;
    }
    wpool_prev_map(wp);
    /* a shrink: the removed servers the pool still migrates from stay reachable */
    if (wp->retiring != NULL || (wp->cp->migrate && wp->view.prev_ring != NULL))
        migrate_retiring_bind(w, wp, left, nleft);
    for (uint32_t j = 0; j < nleft; j++)
        if (left[j] != NULL)
            server_destroy(left[j], 0);
    free(left);
    return 0;
}

static const struct wpool_up worker_wpool_up = {
    .free = wpool_free,
    .cluster_reply = cworker_reply,
    .cluster_node_failed = cworker_node_failed,
    .rejoin_begin = rejoin_begin,
};

static struct wpool *wpool_create(struct worker *w, struct snapshot *snap, uint32_t i,
                                  char *err, size_t errlen)
{
    struct wpool *wp = calloc(1, sizeof(*wp));
    if (wp == NULL)
        return NULL;
    wp->hot_pub = calloc(1, sizeof(*wp->hot_pub));
    if (wp->hot_pub == NULL) {
        free(wp);
        return NULL;
    }
    hotkeys_init(&wp->hot, WORKER_HOTKEY_WINDOW_MS, uv_now(&w->loop));
    wp->w = w;
    wp->up = &worker_wpool_up;
    wpool_bind(wp, snap, i);
    if (wp->ins == NULL || wpool_servers(w, wp) < 0 ||
        worker_listen(w, wp, snap, err, errlen) < 0) {
        introspect_free(wp);
        for (uint32_t s = 0; s < wp->nservers; s++)
            server_destroy(wp->servers[s], 1);
        migrate_retiring_drop(wp);
        free(wp->servers);
        free(wp->prev_map);
        free(wp->hot_pub);
        free(wp);
        return NULL;
    }
    return wp;
}

/* A pool the new config no longer has: stop accepting, let its clients
 * finish what they asked (they read nothing more), close them after the
 * drain timeout; its servers drain and close. */
static void wpool_retire(struct worker *w, struct wpool *wp, struct snapshot *old)
{
    struct qnode *n, *tmp;

    listener_close(wp);
    nearcache_drop(wp);         /* releases its tracking connections: the servers can close */
    tracking_pool_drop(wp);
    wp->retired = 1;
    snapshot_ref(old);
    wp->hold = old;
    wp->retired_at = uv_now(&w->loop);
    /* The retired list's own reference first: freeing the last server
     * below must not free the pool under this loop. */
    queue_insert_tail(&w->retired, &wp->retired_link);
    wp->refs++;
    QUEUE_FOREACH_SAFE(n, tmp, &w->clients) {
        struct client *c = QUEUE_DATA(n, struct client, link);
        if (c->pool == wp)
            client_finish(c);
    }
    uint32_t ns = wp->nservers;
    wp->nservers = 0;
    for (uint32_t s = 0; s < ns; s++)
        server_destroy(wp->servers[s], 0);
    migrate_retiring_drop(wp);
    wpool_unref(wp);
}

/* Clients of a retired pool still waiting for replies after the drain
 * timeout are closed: a removed pool does not linger. */
static void worker_expire_retired(struct worker *w)
{
    uint64_t now = uv_now(&w->loop);
    int drain = w->snap->conf->global.drain_timeout_ms > 0 ? w->snap->conf->global.drain_timeout_ms : 0;
    struct qnode *pn, *n, *tmp;

    QUEUE_FOREACH(pn, &w->retired) {
        struct wpool *wp = QUEUE_DATA(pn, struct wpool, retired_link);
        if (now < wp->retired_at + (uint64_t)drain)
            continue;
        QUEUE_FOREACH_SAFE(n, tmp, &w->clients) {
            struct client *c = QUEUE_DATA(n, struct client, link);
            if (c->pool == wp)
                client_close(c);
        }
    }
}

static int worker_build_pools(struct worker *w, struct snapshot *snap, char *err, size_t errlen)
{
    const struct conf *conf = snap->conf;

    w->pools = calloc(conf->npools ? conf->npools : 1, sizeof(*w->pools));
    if (w->pools == NULL)
        return -ENOMEM;
    w->npools = conf->npools;
    for (uint32_t i = 0; i < conf->npools; i++) {
        w->pools[i] = wpool_create(w, snap, i, err, errlen);
        if (w->pools[i] == NULL)
            return err[0] ? -EINVAL : -ENOMEM;
    }
    return 0;
}

/* A pool that stays across the reload: rebind it, update its servers, its
 * clients' settings and, when its address changed, its listener. 0, or -1
 * when something could not be applied (logged). */
static int wpool_update(struct worker *w, struct wpool *wp, struct snapshot *snap, uint32_t i)
{
    const struct conf_pool *cp = &snap->conf->pools[i];
    int listen_changed = strcmp(wp->cp->listen.text, cp->listen.text) != 0;
    char err[512] = "";
    struct qnode *n;
    int rc = 0;

    nearcache_drop(wp);         /* its ring, servers or settings may change: all evicted */
    tracking_pool_drop(wp);
    wpool_bind(wp, snap, i);
    if (wpool_servers(w, wp) < 0) {
        log_error("worker %u: pool '%s': out of memory updating servers", w->id, cp->name);
        rc = -1;
    }
    if (wp->cworker != NULL)
        cworker_adopted(wp->cworker, snap->pools[i].cluster);   /* parked requests' nodes */
    QUEUE_FOREACH(n, &w->clients) {
        struct client *c = QUEUE_DATA(n, struct client, link);
        if (c->pool == wp)
            client_refresh(c);
    }
    if (listen_changed || wp->listener == NULL) {
        listener_close(wp);
        if (worker_listen(w, wp, snap, err, sizeof(err)) < 0) {
            log_error("worker %u: pool '%s': %s", w->id, cp->name, err);
            rc = -1;
        }
    }
    if (wp->listener != NULL)
        wp->listener->pool = wp;
    return rc;
}

/*
 * Switch to the proxy's current snapshot if it changed: called at safe
 * points (the worker's async callback), never in the middle of a request.
 * Requests already sent finish where they went; requests parsed from now
 * on route by the new rings. Acknowledges to the main thread.
 */
void worker_adopt_snapshot(struct worker *w)
{
    struct hub *hub = w->hub;
    struct snapshot *snap = atomic_load_explicit(&hub->current, memory_order_acquire);

    if (snap == NULL || snap == w->snap)
        return;
    snapshot_ref(snap);
    struct snapshot *old = w->snap;
    const struct conf *nc = snap->conf;
    struct wpool **npools = calloc(nc->npools ? nc->npools : 1, sizeof(*npools));
    int failed = 0;

    uv_mutex_lock(&w->mu);
    if (npools == NULL) {
        failed = 1;
        goto out;
    }
    for (uint32_t i = 0; i < nc->npools; i++) {
        const struct conf_pool *cp = &nc->pools[i];
        struct wpool *wp = NULL;
        int j = snapshot_pool_index(old, cp->name, cp->protocol);
        if (j >= 0 && (uint32_t)j < w->npools && w->pools[j] != NULL) {
            wp = w->pools[j];
            w->pools[j] = NULL;
            if (wpool_update(w, wp, snap, i) < 0)
                failed = 1;
            npools[i] = wp;
            continue;
        }
        char err[512] = "";
        npools[i] = wpool_create(w, snap, i, err, sizeof(err));
        if (npools[i] == NULL) {
            log_error("worker %u: pool '%s' not opened: %s", w->id, cp->name,
                      err[0] ? err : "out of memory");
            failed = 1;
        }
    }
    for (uint32_t j = 0; j < w->npools; j++)
        if (w->pools[j] != NULL)
            wpool_retire(w, w->pools[j], old);
    free(w->pools);
    w->pools = npools;
    w->npools = nc->npools;
out:
    uv_mutex_unlock(&w->mu);
    if (npools == NULL) {
        snapshot_unref(snap);
        log_error("worker %u: out of memory adopting a new configuration", w->id);
    } else {
        w->snap = snap;
        snapshot_unref(old);
    }
    hub->ops->adopted(hub->ctx, failed);
}

/* ------------------------------------------------------------------ shutdown */

/* After the worker's loop ended normally every handle is closed; this only
 * finds handles when something is left open by a bug, and closes them so
 * uv_loop_close() can succeed (their memory is left to process exit). */
static void worker_close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static int worker_drained(struct worker *w)
{
    struct qnode *n;

    uint64_t now = uv_now(&w->loop);

    QUEUE_FOREACH(n, &w->clients)
        if (client_draining(QUEUE_DATA(n, struct client, link), now))
            return 0;
    /* The proxy's own requests too (shadow copies, invalidations, probes): closing a
     * connection with replies unread resets it, and what it had not delivered is lost.
     * Each ends by its reply or its pool's timeout, within drain_timeout or not. */
    QUEUE_FOREACH(n, &w->servers) {
        const struct server *srv = QUEUE_DATA(n, struct server, link);
        for (uint32_t i = 0; i < srv->nslots; i++)
            if (srv->conns[i] != NULL && srv->conns[i]->inflight > 0 &&
                srv->conns[i]->state == SCONN_CONNECTED)
                return 0;
    }
    return 1;
}

static void worker_finish(struct worker *w)
{
    struct qnode *n, *tmp;

    while ((n = queue_first(&w->clients)) != NULL)
        client_close(QUEUE_DATA(n, struct client, link));
    for (uint32_t i = 0; i < w->npools; i++)
        if (w->pools[i] != NULL)
            cworker_close(w->pools[i]->cworker);
    QUEUE_FOREACH(n, &w->retired)
        cworker_close(QUEUE_DATA(n, struct wpool, retired_link)->cworker);
    QUEUE_FOREACH_SAFE(n, tmp, &w->servers)
        server_destroy(QUEUE_DATA(n, struct server, link), 1);
    uv_timer_stop(&w->drain_timer);
    uv_close((uv_handle_t *)&w->drain_timer, NULL);
    sched_close(&w->sched);
    uv_close((uv_handle_t *)&w->tick, NULL);
    uv_close((uv_handle_t *)&w->async, NULL);
    uv_close((uv_handle_t *)&w->flush, NULL);
}

static void worker_drain_cb(uv_timer_t *t)
{
    struct worker *w = t->data;
    uint64_t deadline = w->drain_deadline;

    if (!worker_drained(w) && uv_now(&w->loop) < deadline && atomic_load(&w->stop) < 2)
        return;
    /* What an operator asks after a stop or an upgrade: did anyone lose a reply? */
    uint32_t left = 0;
    uint64_t owed = 0;
    struct qnode *n;
    QUEUE_FOREACH(n, &w->clients) {
        const struct client *c = QUEUE_DATA(n, struct client, link);
        left += c->nmsgs > 0;
        owed += c->nmsgs;
    }
    if (left == 0)
        log_notice("worker %u: drained %u client connections, %" PRIu64 " requests in flight "
                   "answered", w->id, w->drain_clients, w->drain_requests);
    else
        log_warn("worker %u: drain_timeout: %u of %u client connections closed still owed %"
                 PRIu64 " replies", w->id, left, w->drain_clients, owed);
    worker_finish(w);
}

static void worker_async_cb(uv_async_t *a)
{
    struct worker *w = a->data;
    int stop = atomic_load(&w->stop);
    struct qnode *n, *tmp;

    if (atomic_exchange(&w->kills, 0))
        client_reap(w);             /* CLIENT KILL, from any worker */
    tracking_inbox(w);              /* invalidations for REDIRECT targets here */

    if (stop && !w->closing) {
        w->closing = 1;
        sched_lazy_off(&w->sched);  /* copies waiting for their batch go out before the end */
        for (uint32_t i = 0; i < w->npools; i++)
            if (w->pools[i] != NULL)
                listener_close(w->pools[i]);
        QUEUE_FOREACH(n, &w->clients) {
            w->drain_clients++;
            w->drain_requests += QUEUE_DATA(n, struct client, link)->nmsgs;
        }
        /* Idle clients are closed now; busy ones when answered. */
        QUEUE_FOREACH_SAFE(n, tmp, &w->clients)
            client_finish(QUEUE_DATA(n, struct client, link));
        int drain_ms = w->snap->conf->global.drain_timeout_ms;
        w->drain_deadline = uv_now(&w->loop) + (uint64_t)(drain_ms > 0 ? drain_ms : 0);
        uv_timer_start(&w->drain_timer, worker_drain_cb, 0, 20);
        return;
    }
    if (!stop && !w->closing)
        worker_adopt_snapshot(w);
}

/* ------------------------------------------------------------------ lifecycle */

/* Once a second: publish each pool's hot keys for the stats reader (the
 * sketch itself is this thread's alone), close idle and late clients,
 * expire retired pools. */
static void worker_tick_cb(uv_timer_t *t)
{
    struct worker *w = t->data;
    uint64_t now = uv_now(&w->loop);
    const struct conf_global *g = &w->snap->conf->global;
    tracking_tick(w);
    struct qnode *n, *tmp;

    uv_mutex_lock(&w->mu);
    for (uint32_t i = 0; i < w->npools; i++)
        if (w->pools[i] != NULL) {
            hotkeys_snapshot(&w->pools[i]->hot, now, w->pools[i]->hot_pub);
            if (w->pools[i]->retiring != NULL)     /* a shrink's removed servers */
                migrate_retiring_tick(w->pools[i]);
        }
    int tls = 0;
    for (uint32_t i = 0; i < w->npools; i++)
        tls |= w->pools[i] != NULL && w->pools[i]->tls != NULL;
    uv_mutex_unlock(&w->mu);
    if (g->client_timeout_s > 0 || g->client_header_timeout_s > 0 || tls) {
        QUEUE_FOREACH_SAFE(n, tmp, &w->clients)
            client_check_timeouts(QUEUE_DATA(n, struct client, link), now);
    }
    /* CLIENT LIST's numbers of plain clients (client_publish_sync) */
    QUEUE_FOREACH_SAFE(n, tmp, &w->clients)
        client_publish(QUEUE_DATA(n, struct client, link));
    /* Every server: a reload may have turned TLS off while a handshake runs. */
    QUEUE_FOREACH_SAFE(n, tmp, &w->servers)
        server_check_handshakes(QUEUE_DATA(n, struct server, link), now);
    if (!queue_empty(&w->retired))
        worker_expire_retired(w);
}

int worker_init(struct worker *w, struct hub *hub, uint32_t id, struct snapshot *snap,
                char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    w->hub = hub;
    w->id = id;
    queue_init(&w->retired);
    queue_init(&w->free_msgs);
    queue_init(&w->clients);
    queue_init(&w->servers);
    sched_init(&w->sched);
    int rc = uv_loop_init(&w->loop);
    if (rc < 0) {
        snprintf(err, errlen, "uv_loop_init: %s", uv_strerror(rc));
        return rc;
    }
    w->loop.data = w;
    uv_async_init(&w->loop, &w->async, worker_async_cb);
    w->async.data = w;
    uv_check_init(&w->loop, &w->flush);
    w->flush.data = w;
    uv_check_start(&w->flush, worker_flush_cb);
    uv_timer_init(&w->loop, &w->drain_timer);
    w->drain_timer.data = w;
    sched_open(&w->sched, &w->loop, worker_flush_sconn, worker_flush_client);
    uv_timer_init(&w->loop, &w->tick);
    w->tick.data = w;
    uv_timer_start(&w->tick, worker_tick_cb, 1000, 1000);
    uv_mutex_init(&w->mu);
    uv_mutex_init(&w->clients_mu);
    if (tracking_worker_init(w) < 0) {
        snprintf(err, errlen, "worker %u: out of memory", id);
        return -ENOMEM;
    }
    snapshot_ref(snap);
    w->snap = snap;
    rc = worker_build_pools(w, snap, err, errlen);
    if (rc < 0) {
        if (err[0] == '\0')
            snprintf(err, errlen, "worker %u: %s", id, uv_strerror(rc));
        worker_discard(w);
        return rc;
    }
    w->started = 1;
    return 0;
}

static void worker_main(void *arg)
{
    struct worker *w = arg;

    w->tid = uv_thread_self();
    atomic_store(&w->running, 1);

    for (uint32_t i = 0; i < w->npools; i++) {
        if (!w->pools[i]->cp->preconnect)
            continue;
        for (uint32_t s = 0; s < w->pools[i]->nservers; s++)
            server_preconnect(w->pools[i]->servers[s]);
    }
    uv_run(&w->loop, UV_RUN_DEFAULT);
}

int worker_start(struct worker *w)
{
    return uv_thread_create(&w->thread, worker_main, w);
}

void worker_wake(struct worker *w)
{
    uv_async_send(&w->async);
}

/* After the thread ended: free what is left (the loop has no handles). */
static void worker_release(struct worker *w)
{
    struct qnode *n;

    atomic_store(&w->running, 0);   /* what is left is freed from this thread */
    uv_walk(&w->loop, worker_close_walk, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&w->loop);
    if (rc != 0)
        log_warn("worker %u: loop not closed cleanly: %s", w->id, uv_strerror(rc));
    for (uint32_t i = 0; i < w->npools; i++) {
        if (w->pools[i] == NULL)
            continue;
        w->pools[i]->retired = 1;
        wpool_free(w->pools[i]);
    }
    free(w->pools);
    while ((n = queue_first(&w->retired)) != NULL)
        wpool_free(QUEUE_DATA(n, struct wpool, retired_link));
    tracking_worker_free(w);
    uv_mutex_destroy(&w->mu);
    uv_mutex_destroy(&w->clients_mu);
    while ((n = queue_first(&w->free_msgs)) != NULL) {
        struct msg *m = QUEUE_DATA(n, struct msg, cq);
        queue_remove(n);
        buf_free(&m->rsp);
        free(m);
    }
    free(w->scratch);
    free(w->rkeys);
    if (w->snap)
        snapshot_unref(w->snap);
}

void worker_join(struct worker *w)
{
    uv_thread_join(&w->thread);
    worker_release(w);
}

void worker_discard(struct worker *w)
{
    for (uint32_t i = 0; i < w->npools; i++)
        if (w->pools[i] != NULL)
            listener_close(w->pools[i]);
    worker_finish(w);
    worker_release(w);
}
