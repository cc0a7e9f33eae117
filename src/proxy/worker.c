/* struct worker: a thread running one libuv loop with its own listeners, clients and servers. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "proto/proto.h"
#include "proxy/client.h"
#include "proxy/msg.h"
#include "proxy/proxy.h"
#include "proxy/server.h"
#include "proxy/worker.h"

/* ------------------------------------------------------------------ dirty lists */

void worker_mark_client(struct worker *w, struct client *c)
{
    if (c->dirty)
        return;
    c->dirty = 1;
    c->dirty_next = w->dirty_clients;
    w->dirty_clients = c;
}

void worker_mark_sconn(struct worker *w, struct sconn *s)
{
    if (s->dirty)
        return;
    s->dirty = 1;
    s->dirty_next = w->dirty_sconns;
    w->dirty_sconns = s;
}

/* After each round of I/O callbacks: one write per connection with
 * everything queued to it during the round (requests from many clients to
 * one server go out in a single write). Servers first, then clients. */
static void worker_flush_cb(uv_check_t *h)
{
    struct worker *w = h->data;

    /* Servers first: their requests start the round trip that dominates a request's
     * latency when the backends are across a network, and the client writes overlap it.
     * A client flush may resume a paused client whose buffered requests
     * dirty servers again: loop until both lists are empty, or the next
     * poll could sleep on unsent requests. Each round consumes input. */
    while (w->dirty_sconns != NULL || w->dirty_clients != NULL) {
        while (w->dirty_sconns != NULL) {
            struct sconn *s = w->dirty_sconns;
            w->dirty_sconns = s->dirty_next;
            s->dirty = 0;
            sconn_flush(s);
        }
        while (w->dirty_clients != NULL) {
            struct client *c = w->dirty_clients;
            w->dirty_clients = c->dirty_next;
            c->dirty = 0;
            client_flush(c);
        }
    }
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

/* Open a TCP listening socket with SO_REUSEPORT, so every worker has its
 * own and the kernel spreads connections over them. Returns an fd or -errno. */
static int listener_tcp_socket(const struct conf_addr *a, int backlog, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    char port[8];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(port, sizeof(port), "%u", a->port);
    int rc = getaddrinfo(a->host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "listen %s: %s", a->text, gai_strerror(rc));
        return -EINVAL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        goto fail;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, backlog) < 0) {
        rc = -errno;
        close(fd);
        goto fail;
    }
    freeaddrinfo(res);
    return fd;
fail:
    snprintf(err, errlen, "listen %s: %s", a->text, strerror(-rc));
    freeaddrinfo(res);
    return rc;
}

int worker_listen_unix(const struct conf_addr *a, int backlog, char *err, size_t errlen)
{
    struct sockaddr_un sun;
    if (strlen(a->path) >= sizeof(sun.sun_path)) {
        snprintf(err, errlen, "listen %s: path too long", a->path);
        return -ENAMETOOLONG;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    strcpy(sun.sun_path, a->path);
    unlink(a->path);
    if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || listen(fd, backlog) < 0) {
        int rc = -errno;
        snprintf(err, errlen, "listen %s: %s", a->path, strerror(errno));
        close(fd);
        return rc;
    }
    if (a->perm >= 0)
        chmod(a->path, (mode_t)a->perm);
    return fd;
}

static int worker_listen(struct worker *w, struct wpool *pool, int unix_fd, char *err,
                         size_t errlen)
{
    const struct conf_addr *a = &pool->cp->listen;
    struct listener *l = calloc(1, sizeof(*l));
    int rc, fd;

    if (l == NULL)
        return -ENOMEM;
    l->w = w;
    l->pool = pool;
    l->is_unix = a->path != NULL;
    if (l->is_unix) {
        fd = dup(unix_fd);
        if (fd < 0) {
            free(l);
            return -errno;
        }
        rc = uv_pipe_init(&w->loop, &l->h.pipe, 0);
        if (rc == 0)
            rc = uv_pipe_open(&l->h.pipe, fd);
    } else {
        fd = listener_tcp_socket(a, pool->cp->backlog > 0 ? pool->cp->backlog : 512, err, errlen);
        if (fd < 0) {
            free(l);
            return fd;
        }
        rc = uv_tcp_init(&w->loop, &l->h.tcp);
        if (rc == 0)
            rc = uv_tcp_open(&l->h.tcp, fd);
    }
    l->h.handle.data = l;
    if (rc == 0)
        rc = uv_listen(&l->h.stream, pool->cp->backlog > 0 ? pool->cp->backlog : 512,
                       listener_connection_cb);
    if (rc < 0) {
        snprintf(err, errlen, "listen %s: %s", a->text, uv_strerror(rc));
        uv_close(&l->h.handle, (uv_close_cb)free);
        return rc;
    }
    pool->listener = l;
    return 0;
}

/* ------------------------------------------------------------------ pools */

static void wpool_free(struct wpool *wp)
{
    struct worker *w = wp->w;
    struct wpool **pp = &w->retired;
    while (*pp != NULL && *pp != wp)
        pp = &(*pp)->next;
    if (*pp == wp)
        *pp = wp->next;
    if (wp->hold != NULL)
        snapshot_unref(wp->hold);
    free(wp->servers);
    free(wp->hot_pub);
    free(wp->prev_map);
    free(wp);
}

void wpool_unref(struct wpool *wp)
{
    if (--wp->refs == 0 && wp->retired)
        wpool_free(wp);
}

/* Point a pool at pool i of a snapshot (config, protocol, ring). */
static void wpool_bind(struct wpool *wp, struct snapshot *snap, uint32_t i)
{
    const struct conf_pool *cp = &snap->conf->pools[i];
    wp->index = i;
    wp->cp = cp;
    wp->ops = cp->protocol == CONF_PROTO_REDIS ? &proto_redis_ops : &proto_memcache_ops;
    wp->ring = snap->rings[i];
    wp->shared = snap->shared[i];
    wp->health = snap->health[i];
    wp->prev_ring = snap->prev_rings[i];
    wp->warm_until = snap->warm_until_ms[i];
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
    for (uint32_t j = 0; j < wp->nservers; j++)
        if (wp->servers[j] != NULL)
            server_destroy(wp->servers[j], 0);
    free(wp->servers);
    wp->servers = nsrv;
    wp->nservers = cp->nservers;
    for (uint32_t i = 0; i < cp->nservers; i++)
        nsrv[i]->health = wp->health[i];
    /* warm-up: where each server of the previous ring is now */
    free(wp->prev_map);
    wp->prev_map = NULL;
    if (wp->prev_ring != NULL) {
        const struct ring *pr = wp->prev_ring;
        wp->prev_map = malloc(pr->nservers * sizeof(*wp->prev_map));
        for (uint32_t j = 0; wp->prev_map != NULL && j < pr->nservers; j++) {
            wp->prev_map[j] = UINT32_MAX;
            for (uint32_t i = 0; i < cp->nservers; i++)
                if (strcmp(pr->servers[j].ident, cp->servers[i].ident) == 0)
                    wp->prev_map[j] = i;
        }
        if (wp->prev_map == NULL)
            wp->prev_ring = NULL;
    }
    return 0;
}

static int worker_listen_pool(struct worker *w, struct wpool *wp, struct snapshot *snap,
                              char *err, size_t errlen)
{
    int unix_fd = snap->unix_fds ? snap->unix_fds[wp->index] : -1;
    return worker_listen(w, wp, unix_fd, err, errlen);
}

#define WORKER_HOTKEY_WINDOW_MS 60000

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
    wpool_bind(wp, snap, i);
    if (wpool_servers(w, wp) < 0 || worker_listen_pool(w, wp, snap, err, errlen) < 0) {
        for (uint32_t s = 0; s < wp->nservers; s++)
            server_destroy(wp->servers[s], 1);
        free(wp->servers);
        free(wp->hot_pub);
        free(wp);
        return NULL;
    }
    return wp;
}

static void listener_close(struct wpool *wp)
{
    if (wp->listener != NULL) {
        uv_close(&wp->listener->h.handle, (uv_close_cb)free);
        wp->listener = NULL;
    }
}

/* A pool the new config no longer has: stop accepting, let its clients
 * finish what they asked (they read nothing more), close them after the
 * drain timeout; its servers drain and close. */
static void wpool_retire(struct worker *w, struct wpool *wp, struct snapshot *old)
{
    listener_close(wp);
    wp->retired = 1;
    snapshot_ref(old);
    wp->hold = old;
    wp->retired_at = uv_now(&w->loop);
    /* The retired list's own reference first: freeing the last server
     * below must not free the pool under this loop. */
    wp->next = w->retired;
    w->retired = wp;
    wp->refs++;
    for (struct client *c = w->clients, *next; c != NULL; c = next) {
        next = c->next;
        if (c->pool != wp)
            continue;
        c->eof = 1;
        if (!uv_is_closing(&c->h.handle))
            uv_read_stop(&c->h.stream);
        if (c->head == NULL && buf_len(&c->obuf) == 0 && !c->writing)
            client_close(c);
    }
    uint32_t n = wp->nservers;
    wp->nservers = 0;
    for (uint32_t s = 0; s < n; s++)
        server_destroy(wp->servers[s], 0);
    wpool_unref(wp);
}

/* Clients of a retired pool still waiting for replies after the drain
 * timeout are closed: a removed pool does not linger. */
static void worker_expire_retired(struct worker *w)
{
    uint64_t now = uv_now(&w->loop);
    int drain = w->snap->conf->global.drain_timeout_ms > 0 ? w->snap->conf->global.drain_timeout_ms : 0;

    for (struct wpool *wp = w->retired; wp != NULL; wp = wp->next) {
        if (now < wp->retired_at + (uint64_t)drain)
            continue;
        for (struct client *c = w->clients, *next; c != NULL; c = next) {
            next = c->next;
            if (c->pool == wp)
                client_close(c);
        }
    }
}

/* Clients of a pool that stays: settings that live in the client. */
static void wpool_refresh_clients(struct worker *w, struct wpool *wp)
{
    for (struct client *c = w->clients; c != NULL; c = c->next) {
        if (c->pool != wp)
            continue;
        c->parser.item_size_max = wp->cp->item_size_max;
        c->parser.flags &= ~(uint32_t)(PROTO_PF_ALLOW_FLUSH | PROTO_PF_DENY_SCRIPTS);
        if (wp->cp->allow_flush)
            c->parser.flags |= PROTO_PF_ALLOW_FLUSH;
        if (!wp->cp->scripts)
            c->parser.flags |= PROTO_PF_DENY_SCRIPTS;
        c->pc.auth = wp->cp->redis_auth;
        c->pc.db = wp->cp->redis_db;
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

/*
 * Switch to the proxy's current snapshot if it changed: called at safe
 * points (the worker's async callback), never in the middle of a request.
 * Requests already sent finish where they went; requests parsed from now
 * on route by the new rings. Acknowledges to the main thread.
 */
void worker_adopt_snapshot(struct worker *w)
{
    struct proxy *p = w->proxy;
    struct snapshot *snap = atomic_load_explicit(&p->current, memory_order_acquire);

    if (snap == NULL || snap == w->snap)
        return;
    snapshot_ref(snap);
    struct snapshot *old = w->snap;
    const struct conf *nc = snap->conf;
    struct wpool **npools = calloc(nc->npools ? nc->npools : 1, sizeof(*npools));
    char err[512] = "";
    int failed = 0;

    uv_mutex_lock(&w->mu);
    if (npools == NULL) {
        failed = 1;
        goto out;
    }
    for (uint32_t i = 0; i < nc->npools; i++) {
        const struct conf_pool *cp = &nc->pools[i];
        struct wpool *wp = NULL;
        for (uint32_t j = 0; j < w->npools; j++) {
            struct wpool *o = w->pools[j];
            if (o != NULL && strcmp(o->cp->name, cp->name) == 0 && o->cp->protocol == cp->protocol) {
                wp = o;
                w->pools[j] = NULL;
                break;
            }
        }
        if (wp == NULL) {
            wp = wpool_create(w, snap, i, err, sizeof(err));
            if (wp == NULL) {
                log_error("worker %u: pool '%s' not opened: %s", w->id, cp->name,
                          err[0] ? err : "out of memory");
                continue;
            }
            npools[i] = wp;
            continue;
        }
        int listen_changed = strcmp(wp->cp->listen.text, cp->listen.text) != 0;
        wpool_bind(wp, snap, i);
        if (wpool_servers(w, wp) < 0)
            log_error("worker %u: pool '%s': out of memory updating servers", w->id, cp->name);
        wpool_refresh_clients(w, wp);
        if (listen_changed || wp->listener == NULL) {
            listener_close(wp);
            if (worker_listen_pool(w, wp, snap, err, sizeof(err)) < 0)
                log_error("worker %u: pool '%s': %s", w->id, cp->name, err);
        }
        if (wp->listener != NULL)
            wp->listener->pool = wp;
        npools[i] = wp;
    }
    for (uint32_t j = 0; j < w->npools; j++)
        if (w->pools[j] != NULL)
            wpool_retire(w, w->pools[j], old);
    free(w->pools);
    w->pools = npools;
    w->npools = nc->npools;
    /* A pool that failed to open is left out of this worker. */
    for (uint32_t i = 0; i < w->npools; i++)
        if (w->pools[i] == NULL)
            failed = 1;
out:
    uv_mutex_unlock(&w->mu);
    if (npools == NULL) {
        snapshot_unref(snap);
        log_error("worker %u: out of memory adopting a new configuration", w->id);
    } else {
        w->snap = snap;
        snapshot_unref(old);
    }
    atomic_fetch_add(&p->reload_acks, 1);
    if (failed)
        atomic_fetch_add(&p->reload_worker_errors, 1);
    uv_async_send(&p->reload_async);
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
    for (struct client *c = w->clients; c != NULL; c = c->next)
        if (c->head != NULL || buf_len(&c->obuf) > 0 || c->writing)
            return 0;
    return 1;
}

static void worker_finish(struct worker *w)
{
    while (w->clients != NULL)
        client_close(w->clients);
    for (struct server *s = w->servers, *next; s != NULL; s = next) {
        next = s->next;
        server_destroy(s, 1);
    }
    uv_timer_stop(&w->drain_timer);
    uv_close((uv_handle_t *)&w->drain_timer, NULL);
    uv_close((uv_handle_t *)&w->stats_timer, NULL);
    uv_close((uv_handle_t *)&w->async, NULL);
    uv_close((uv_handle_t *)&w->flush, NULL);
}

static void worker_drain_cb(uv_timer_t *t)
{
    struct worker *w = t->data;
    uint64_t deadline = w->drain_deadline;

    if (worker_drained(w) || uv_now(&w->loop) >= deadline || atomic_load(&w->stop) >= 2)
        worker_finish(w);
}

static void worker_async_cb(uv_async_t *a)
{
    struct worker *w = a->data;
    int stop = atomic_load(&w->stop);

    if (stop && !w->closing) {
        w->closing = 1;
        for (uint32_t i = 0; i < w->npools; i++)
            if (w->pools[i] != NULL)
                listener_close(w->pools[i]);
        /* Idle clients are closed now; busy ones when answered. */
        for (struct client *c = w->clients, *next; c != NULL; c = next) {
            next = c->next;
            c->eof = 1;
            if (!uv_is_closing(&c->h.handle))
                uv_read_stop(&c->h.stream);
            if (c->head == NULL && buf_len(&c->obuf) == 0 && !c->writing)
                client_close(c);
        }
        int drain_ms = w->snap->conf->global.drain_timeout_ms;
        w->drain_deadline = uv_now(&w->loop) + (uint64_t)(drain_ms > 0 ? drain_ms : 0);
        uv_timer_start(&w->drain_timer, worker_drain_cb, 0, 20);
        return;
    }
    if (!stop && !w->closing)
        worker_adopt_snapshot(w);
}

/* ------------------------------------------------------------------ lifecycle */

/* Publish each pool's hot keys for the stats reader (the sketch itself is
 * this thread's alone). */
static void worker_stats_cb(uv_timer_t *t)
{
    struct worker *w = t->data;
    uint64_t now = uv_now(&w->loop);

    uv_mutex_lock(&w->mu);
    for (uint32_t i = 0; i < w->npools; i++)
        if (w->pools[i] != NULL)
            hotkeys_snapshot(&w->pools[i]->hot, now, w->pools[i]->hot_pub);
    uv_mutex_unlock(&w->mu);
    if (w->retired != NULL)
        worker_expire_retired(w);
}

int worker_init(struct worker *w, struct proxy *p, uint32_t id, struct snapshot *snap,
                char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    w->proxy = p;
    w->id = id;
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
    uv_timer_init(&w->loop, &w->stats_timer);
    w->stats_timer.data = w;
    uv_timer_start(&w->stats_timer, worker_stats_cb, 1000, 1000);
    uv_mutex_init(&w->mu);
    snapshot_ref(snap);
    w->snap = snap;
    rc = worker_build_pools(w, snap, err, errlen);
    if (rc < 0) {
        if (err[0] == '\0')
            snprintf(err, errlen, "worker %u: %s", id, uv_strerror(rc));
        return rc;
    }
    w->started = 1;
    return 0;
}

static void worker_main(void *arg)
{
    struct worker *w = arg;

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
void worker_join(struct worker *w)
{
    uv_thread_join(&w->thread);
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
    while (w->retired != NULL)
        wpool_free(w->retired);
    uv_mutex_destroy(&w->mu);
    while (w->free_msgs != NULL) {
        struct msg *m = w->free_msgs;
        w->free_msgs = m->cnext;
        buf_free(&m->rsp);
        free(m);
    }
    free(w->scratch);
    if (w->snap)
        snapshot_unref(w->snap);
}

int worker_try_send(uv_stream_t *st, const char *p, size_t n)
{
    uv_os_fd_t fd;
    if (uv_fileno((const uv_handle_t *)st, &fd) != 0) {
        uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
        return uv_try_write(st, &b, 1);
    }
    for (int tries = 0; tries < 8; tries++) {
        /* syscall(2), not send(3): the libc wrapper is a cancellation point and,
         * in a threaded process, brackets every call with two atomic updates of
         * the thread's cancel state; workers are never cancelled. */
        ssize_t r = syscall(SYS_sendto, fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0);
        if (r >= 0)
            return (int)r;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return UV_EAGAIN;
        if (errno != EINTR)
            return uv_translate_sys_error(errno);
    }
    return UV_EAGAIN;
}

void worker_read_room(struct buf *in, size_t chunk, uv_buf_t *b)
{
    if (buf_reserve(in, chunk) < 0) {
        b->base = NULL;
        b->len = 0;
        return;
    }
    b->base = buf_wptr(in);
    b->len = buf_room(in);
}
