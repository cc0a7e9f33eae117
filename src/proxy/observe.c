/* The proxy's stats as a reader sees them: per-worker counters summed into a view, the stats port. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "proxy/observe.h"
#include "proxy/proxy.h"
#include "proxy/server.h"
#include "proxy/worker.h"
#include "reload.h"
#include "ring.h"
#include "stats.h"
#include "util.h"

static struct wpool *worker_pool(struct worker *w, const char *name)
{
    for (uint32_t i = 0; i < w->npools; i++)
        if (w->pools[i] != NULL && strcmp(w->pools[i]->cp->name, name) == 0)
            return w->pools[i];
    return NULL;
}

static void add_server(struct stats_view_server *vs, const struct server *s)
{
    stats_server_add(&vs->stats, &s->stats);
    histogram_merge(&vs->latency, &s->latency);
}

int observe_view(struct proxy *p, struct snapshot *snap, struct stats_view *v)
{
    const struct conf *conf = snap->conf;
    size_t *nsrv = calloc(conf->npools + 1, sizeof(*nsrv));
    size_t *nhot = calloc(conf->npools + 1, sizeof(*nhot));
    int rc = -ENOMEM;

    if (nsrv == NULL || nhot == NULL)
        goto out;
    for (uint32_t i = 0; i < conf->npools; i++) {
        nsrv[i] = conf->pools[i].nservers;
        nhot[i] = HOTKEYS_TOP;
    }
    if (stats_view_alloc(v, conf->npools, nsrv, nhot) < 0)
        goto out;

    static char host[256];
    if (host[0] == '\0' && gethostname(host, sizeof(host) - 1) < 0)
        snprintf(host, sizeof(host), "localhost");
    v->service = "ringleader";
    v->source = host;
    v->version = PACKAGE_VERSION;
    v->uptime = (int64_t)((util_wall_us() - p->start_wall_us) / 1000000u);
    v->timestamp = (int64_t)(util_wall_us() / 1000000u);

    const struct hotkeys_snapshot **snaps = calloc(p->nworkers, sizeof(*snaps));
    if (snaps == NULL) {
        stats_view_free(v);
        goto out;
    }
    for (uint32_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        const struct ring *r = snap->rings[i];
        struct stats_view_pool *vp = &v->pools[i];
        vp->name = cp->name;
        vp->epoch = r->epoch;
        snprintf(vp->checksum, sizeof(vp->checksum), "%016llx", (unsigned long long)r->checksum);
        vp->distribution = dist_name(cp->dist);
        for (uint32_t s = 0; s < cp->nservers; s++) {
            vp->servers[s].name = cp->servers[s].ident;
            vp->servers[s].up = 1;
        }
        if (p->reload != NULL) {
            struct reload_state *rs = p->reload;
            uv_mutex_lock(&rs->mu);
            vp->reloads = rs->count;
            if (rs->last_us) {
                snprintf(vp->last_reload, sizeof(vp->last_reload), "%.*s",
                         (int)sizeof(vp->last_reload) - 1, rs->last_ok ? "ok" : rs->last_error);
                vp->last_reload_at = (int64_t)(rs->last_us / 1000000u);
            }
            uv_mutex_unlock(&rs->mu);
        }
    }
    for (uint32_t wi = 0; wi < p->nworkers; wi++) {
        struct worker *w = &p->workers[wi];
        uv_mutex_lock(&w->mu);
        v->curr_connections += (int64_t)__atomic_load_n(&w->curr_connections, __ATOMIC_RELAXED);
        v->total_connections += (int64_t)__atomic_load_n(&w->total_connections, __ATOMIC_RELAXED);
        for (uint32_t i = 0; i < conf->npools; i++) {
            const struct conf_pool *cp = &conf->pools[i];
            struct wpool *wp = worker_pool(w, cp->name);
            if (wp == NULL)
                continue;
            stats_pool_add(&v->pools[i].stats, &wp->stats);
            /* Servers by identity: a worker may still run the previous
             * snapshot for a moment during a reload. */
            for (uint32_t s = 0; s < wp->nservers; s++) {
                const struct server *srv = wp->servers[s];
                for (uint32_t k = 0; k < cp->nservers; k++) {
                    if (strcmp(cp->servers[k].ident, srv->ident) == 0) {
                        add_server(&v->pools[i].servers[k], srv);
                        break;
                    }
                }
            }
        }
        uv_mutex_unlock(&w->mu);
    }
    /* Hot keys: merge the workers' published windows (copied under their locks). */
    struct hotkeys_snapshot *copies = calloc(p->nworkers, sizeof(*copies));
    struct hotkeys_entry *top = calloc(HOTKEYS_TOP, sizeof(*top));
    for (uint32_t i = 0; copies != NULL && top != NULL && i < conf->npools; i++) {
        size_t n = 0;
        for (uint32_t wi = 0; wi < p->nworkers; wi++) {
            struct worker *w = &p->workers[wi];
            uv_mutex_lock(&w->mu);
            struct wpool *wp = worker_pool(w, conf->pools[i].name);
            if (wp != NULL) {
                copies[n] = *wp->hot_pub;
                snaps[n] = &copies[n];
                n++;
            }
            uv_mutex_unlock(&w->mu);
        }
        int k = hotkeys_merge(snaps, n, top, HOTKEYS_TOP);
        struct stats_view_pool *vp = &v->pools[i];
        vp->nhot_keys = 0;
        for (int j = 0; j < k; j++) {
            if (top[j].count == 0)
                continue;
            struct stats_hot_key *hk = &vp->hot_keys[vp->nhot_keys++];
            hk->entry = top[j];
            uint32_t owner = ring_owner(snap->rings[i], top[j].key, top[j].len);
            hk->owner = conf->pools[i].servers[owner].label;
        }
    }
    free(copies);
    free(top);
    free(snaps);
    rc = 0;
out:
    free(nsrv);
    free(nhot);
    return rc;
}

int observe_render(struct proxy *p, int prometheus, struct buf *out)
{
    struct snapshot *snap = observe_snapshot(p);
    struct stats_view v;
    int rc;

    if (snap == NULL)
        return -EAGAIN;
    memset(&v, 0, sizeof(v));
    rc = observe_view(p, snap, &v);
    if (rc == 0) {
        rc = prometheus ? stats_render_prometheus(&v, out) : stats_render_json(&v, out);
        stats_view_free(&v);
    }
    snapshot_unref(snap);
    return rc;
}

/* The current snapshot with a reference (readers on other threads take it
 * under the reload lock so the main thread cannot free it meanwhile). */
struct snapshot *observe_snapshot(struct proxy *p)
{
    uv_mutex_lock(&p->snap_mu);
    struct snapshot *s = atomic_load(&p->current);
    if (s != NULL)
        snapshot_ref(s);
    uv_mutex_unlock(&p->snap_mu);
    return s;
}

/* ------------------------------------------------------------------ stats port */

struct stats_conn {
    uv_tcp_t   tcp;
    uv_write_t wreq;
    struct buf out;
};

static void stats_conn_closed(uv_handle_t *h)
{
    struct stats_conn *sc = h->data;
    buf_free(&sc->out);
    free(sc);
}

static void stats_conn_written(uv_write_t *req, int status)
{
    struct stats_conn *sc = req->data;
    (void)status;
    uv_close((uv_handle_t *)&sc->tcp, stats_conn_closed);
}

/* twemproxy's stats port: one JSON document on connect, then close. */
static void stats_accept_cb(uv_stream_t *server, int status)
{
    struct proxy *p = server->data;
    struct stats_conn *sc;

    if (status < 0)
        return;
    sc = calloc(1, sizeof(*sc));
    if (sc == NULL)
        return;
    uv_tcp_init(&p->loop, &sc->tcp);
    sc->tcp.data = sc;
    if (uv_accept(server, (uv_stream_t *)&sc->tcp) < 0 ||
        observe_render(p, 0, &sc->out) < 0) {
        uv_close((uv_handle_t *)&sc->tcp, stats_conn_closed);
        return;
    }
    buf_append(&sc->out, "\n", 1);
    uv_buf_t b = uv_buf_init(buf_rptr(&sc->out), (unsigned)buf_len(&sc->out));
    sc->wreq.data = sc;
    if (uv_write(&sc->wreq, (uv_stream_t *)&sc->tcp, &b, 1, stats_conn_written) < 0)
        uv_close((uv_handle_t *)&sc->tcp, stats_conn_closed);
}

int observe_stats_listen(struct proxy *p, const char *host, int port, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    int rc;

    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0) {
        snprintf(err, errlen, "stats address '%s' is not an IP address", host);
        return -EINVAL;
    }
    uv_tcp_init(&p->loop, &p->stats_server);
    p->stats_server.data = p;
    rc = uv_tcp_bind(&p->stats_server, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&p->stats_server, 64, stats_accept_cb);
    if (rc < 0) {
        snprintf(err, errlen, "stats port %s:%d: %s", host, port, uv_strerror(rc));
        uv_close((uv_handle_t *)&p->stats_server, NULL);
        return rc;
    }
    p->stats_open = 1;
    return 0;
}

void observe_stats_close(struct proxy *p)
{
    if (p->stats_open) {
        uv_close((uv_handle_t *)&p->stats_server, NULL);
        p->stats_open = 0;
    }
}
