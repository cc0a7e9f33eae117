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

    /* A client flush may resume a paused client whose buffered requests
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

static int worker_build_pools(struct worker *w, struct snapshot *snap, const int *unix_fds,
                              char *err, size_t errlen)
{
    const struct conf *conf = snap->conf;

    w->pools = calloc(conf->npools, sizeof(*w->pools));
    if (w->pools == NULL)
        return -ENOMEM;
    w->npools = conf->npools;
    for (uint32_t i = 0; i < conf->npools; i++) {
        struct wpool *wp = &w->pools[i];
        const struct conf_pool *cp = &conf->pools[i];
        wp->w = w;
        wp->index = i;
        wp->cp = cp;
        wp->ops = cp->protocol == CONF_PROTO_REDIS ? &proto_redis_ops : &proto_memcache_ops;
        wp->ring = snap->rings[i];
        wp->shared = snap->shared[i];
        wp->nservers = cp->nservers;
        wp->servers = calloc(cp->nservers, sizeof(*wp->servers));
        if (wp->servers == NULL)
            return -ENOMEM;
        for (uint32_t s = 0; s < cp->nservers; s++) {
            wp->servers[s] = server_create(w, wp, &cp->servers[s]);
            if (wp->servers[s] == NULL)
                return -ENOMEM;
        }
        int rc = worker_listen(w, wp, unix_fds ? unix_fds[i] : -1, err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

void worker_adopt_snapshot(struct worker *w)
{
    /* Reload (a new snapshot while running) is handled in reload.c once it
     * exists; until then the snapshot never changes. */
    (void)w;
}

/* ------------------------------------------------------------------ shutdown */

static void worker_close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, h->data == NULL ? NULL : NULL);
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
        server_destroy(s);
    }
    uv_timer_stop(&w->drain_timer);
    uv_close((uv_handle_t *)&w->drain_timer, NULL);
    uv_close((uv_handle_t *)&w->async, NULL);
    uv_close((uv_handle_t *)&w->flush, NULL);
    (void)worker_close_walk;
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
        for (uint32_t i = 0; i < w->npools; i++) {
            struct listener *l = w->pools[i].listener;
            if (l != NULL) {
                uv_close(&l->h.handle, (uv_close_cb)free);
                w->pools[i].listener = NULL;
            }
        }
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
    if (!stop)
        worker_adopt_snapshot(w);
}

/* ------------------------------------------------------------------ lifecycle */

int worker_init(struct worker *w, struct proxy *p, uint32_t id, struct snapshot *snap,
                const int *unix_fds, char *err, size_t errlen)
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
    snapshot_ref(snap);
    w->snap = snap;
    rc = worker_build_pools(w, snap, unix_fds, err, errlen);
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
        if (!w->pools[i].cp->preconnect)
            continue;
        for (uint32_t s = 0; s < w->pools[i].nservers; s++)
            server_preconnect(w->pools[i].servers[s]);
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
    /* Close anything left (handles of a worker that never ran). */
    uv_walk(&w->loop, worker_close_walk, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&w->loop);
    if (rc != 0)
        log_warn("worker %u: loop not closed cleanly: %s", w->id, uv_strerror(rc));
    for (uint32_t i = 0; i < w->npools; i++)
        free(w->pools[i].servers);
    free(w->pools);
    while (w->free_msgs != NULL) {
        struct msg *m = w->free_msgs;
        w->free_msgs = m->cnext;
        free(m);
    }
    free(w->scratch);
    if (w->snap)
        snapshot_unref(w->snap);
}
