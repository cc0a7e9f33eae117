/* The proxy's stats as a reader sees them: per-worker counters summed into a view, the stats port. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "placement/cluster_map.h"
#include "state/health.h"
#include "lib/log.h"
#include "control/cluster.h"
#include "control/sentinel.h"
#include "control/migrate.h"
#include "control/observe.h"
#include "control/proxy.h"
#include "state/registry.h"
#include "state/user_state.h"
#include "proxy/introspect.h"
#include "proxy/server.h"
#include "proxy/tls.h"
#include "proxy/worker.h"
#include "state/rejoin_log.h"
#include "control/reload.h"
#include "control/etcd_source.h"
#include "control/resolve.h"
#include "placement/ring.h"
#include "stats/reqlog.h"
#include "stats/stats.h"
#include "lib/util.h"

static struct wpool *worker_pool(struct worker *w, const char *name)
{
    for (uint32_t i = 0; i < w->npools; i++)
        if (w->pools[i] != NULL && strcmp(w->pools[i]->cp->name, name) == 0)
            return w->pools[i];
    return NULL;
}

static void add_server(struct stats_view_server *vs, const struct server *s)
{
    /* The worker counts every request in flight in out_queue_bytes and the
     * unsent ones in in_queue too (server.c, sconn_inqueue); it never writes
     * out_queue: twemproxy's out_queue is what is on the wire. */
    int64_t in_flight = __atomic_load_n(&s->stats.in_flight, __ATOMIC_RELAXED);
    int64_t in_queue = __atomic_load_n(&s->stats.in_queue, __ATOMIC_RELAXED);
    int64_t in_queue_bytes = __atomic_load_n(&s->stats.in_queue_bytes, __ATOMIC_RELAXED);

    stats_server_add(&vs->stats, &s->stats);
    vs->stats.out_queue += in_flight - in_queue;
    vs->stats.out_queue_bytes -= in_queue_bytes;
    histogram_merge(&vs->latency, &s->latency);
}

/* A sentinel pool's master and switches (sentinel.c's record). */
static void observe_sentinel(struct sentinel *sn, struct stats_view_pool *vp)
{
    struct sentinel_stats st;
    sentinel_stats_read(sn, &st);
    struct stats_view_sentinel *v = &vp->sentinel;
    vp->is_sentinel = 1;
    snprintf(v->master_name, sizeof(v->master_name), "%s", st.master_name);
    snprintf(v->master, sizeof(v->master), "%s", st.master);
    snprintf(v->previous, sizeof(v->previous), "%s", st.previous);
    v->switches = st.switches;
    v->rounds = st.rounds;
    v->round_errors = st.round_errors;
    v->switch_messages = st.switch_messages;
    for (int w = 0; w < SENTINEL_WHY_COUNT; w++)
        v->asked += st.requested[w];
    v->switched_at = (int64_t)(st.switched_at_us / 1000000u);
    v->subscribed = st.subscribed;
    snprintf(v->error, sizeof(v->error), "%s", st.last_error);
}

/* A cluster pool's map and refreshes (cluster.c's record). */
static void observe_cluster(struct cluster *cl, struct stats_view_pool *vp)
{
    struct cluster_stats st;
    cluster_stats_read(cl, &st);
    vp->is_cluster = 1;
    vp->cluster.epoch = st.current_epoch;
    vp->cluster.state_ok = st.state_ok;
    vp->cluster.refreshes = st.refreshes;
    vp->cluster.refresh_errors = st.refresh_errors;
    vp->cluster.map_changes = st.map_changes;
    for (int w = 0; w < CLUSTER_WHY_COUNT; w++)
        vp->cluster.refresh_asked += st.requested[w];
    vp->cluster.refreshed_at = (int64_t)(st.last_refresh_us / 1000000u);
    snprintf(vp->cluster.refresh_error, sizeof(vp->cluster.refresh_error), "%s", st.last_error);
}

/* A hot key's owner in ring r: from its bytes when the sketch holds them all, else from
 * the placement hash recorded with it (the bytes held are a prefix, which another server
 * may own). Computed now, so a reload that moves the key names its new owner. */
static uint32_t hot_key_owner(const struct ring *r, const struct hotkeys_entry *e)
{
    if (!e->cut)
        return ring_owner(r, e->key, e->len);
    return r->nservers == 1 ? 0 : dist_lookup(&r->dist, e->place);   /* as route_key_place */
}

struct observe_cmds {
    struct stats_view_pool   *vp;
    const struct proto_ops   *ops;
    size_t                    cap;
};

static void observe_cmd(void *arg, uint16_t cmd, const struct proto_cmdstat *st)
{
    struct observe_cmds *oc = arg;
    const char *name = oc->ops->cmd_name != NULL ? oc->ops->cmd_name(cmd) : NULL;
    if (name == NULL)
        return;
    if (oc->vp->ncmds == oc->cap) {
        size_t cap = oc->cap ? 2 * oc->cap : 32;
        struct stats_cmd *c = realloc(oc->vp->cmds, cap * sizeof(*c));
        if (c == NULL)
            return;             /* a row left out of /metrics: never a wrong one */
        oc->vp->cmds = c;
        oc->cap = cap;
    }
    oc->vp->cmds[oc->vp->ncmds++] = (struct stats_cmd){
        .name = name, .calls = st->calls, .usec = st->usec, .rejected = st->rejected_calls,
        .failed = st->failed_calls };
}

static void observe_err(void *arg, const char *prefix, int64_t count)
{
    struct stats_view_pool *vp = arg;
    struct stats_err *e = realloc(vp->errs, (vp->nerrs + 1) * sizeof(*e));
    if (e == NULL)
        return;
    vp->errs = e;
    snprintf(e[vp->nerrs].name, sizeof(e[vp->nerrs].name), "%s", prefix);
    e[vp->nerrs].count = count;
    vp->nerrs++;
}

/* Pool i's commandstats, errorstats and SLOWLOG length over every worker. */
static void observe_introspect(struct proxy *p, struct snapshot *snap, uint32_t i,
                               struct stats_view_pool *vp)
{
    const char *name = snap->conf->pools[i].name;
    struct observe_cmds oc = { vp, snap->pools[i].ops, 0 };

    introspect_cmdstats(&p->hub, name, observe_cmd, &oc);
    introspect_errorstats(&p->hub, name, observe_err, vp);
    vp->slowlog_len = (int64_t)introspect_slowlog_len(&p->hub, name,
                                                       snap->conf->global.slowlog_max_len);
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

    v->service = "ringleader";
    v->source = p->hostname;
    v->version = PACKAGE_VERSION;
    v->uptime = (int64_t)((util_wall_us() - p->hub.start_wall_us) / 1000000u);
    v->upgrades = (int64_t)p->upgrades;
    v->timestamp = (int64_t)(util_wall_us() / 1000000u);

    const struct hotkeys_snapshot **snaps = calloc(p->nworkers, sizeof(*snaps));
    if (snaps == NULL) {
        stats_view_free(v);
        goto out;
    }
    for (uint32_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        const struct ring *r = snap->pools[i].ring;
        struct stats_view_pool *vp = &v->pools[i];
        vp->name = cp->name;
        vp->epoch = r->epoch;
        snprintf(vp->checksum, sizeof(vp->checksum), "%016llx", (unsigned long long)r->checksum);
        vp->distribution = dist_name(cp->dist);
        vp->keys_max_over_mean = snap->pools[i].keys_max_over_mean;
        const struct cluster_view *cv = snap->pools[i].cview;
        for (int side = 0; side < 2; side++) {
            struct tls_cert_info ci[TLS_CTX_FILES_MAX];
            size_t n = tls_ctx_certs(side ? snap->pools[i].server_tls : snap->pools[i].tls, ci,
                                     TLS_CTX_FILES_MAX);
            for (size_t k = 0; k < n && vp->ntls_certs < STATS_TLS_CERTS_MAX; k++)
                vp->tls_certs[vp->ntls_certs++] = (struct stats_tls_cert){
                    .key = ci[k].key, .file = ci[k].path, .not_after = ci[k].not_after };
        }
        for (uint32_t s = 0; s < cp->nservers; s++) {
            vp->servers[s].name = cp->servers[s].ident;
            vp->servers[s].up = health_up(snap->pools[i].health[s]);
            vp->servers[s].rejoining =
                health_state(snap->pools[i].health[s]) == HEALTH_REJOINING;
            vp->servers[s].weight = cp->servers[s].weight;
            vp->servers[s].keyspace_share = r->servers[s].keyspace_share;
            if (cv != NULL && s < cv->nnodes) {
                vp->servers[s].role = cluster_role_name(cv->role[s]);
                vp->servers[s].slots = cv->nslots[s];
            }
        }
        if (snap->pools[i].cluster != NULL)
            observe_cluster(snap->pools[i].cluster, vp);
        if (snap->pools[i].sentinel != NULL)
            observe_sentinel(snap->pools[i].sentinel, vp);
        vp->nhot_keys = 0;
        if (p->reload != NULL) {
            struct reload_state *rs = &p->reload->st;
            uv_mutex_lock(&rs->mu);
            vp->reloads = atomic_load(&snap->pools[i].shared->reloads);
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
    /* Introspection: commandstats, errorstats, SLOWLOG (each under the workers' locks), the
     * request log's counts. */
    for (uint32_t i = 0; i < conf->npools; i++)
        observe_introspect(p, snap, i, &v->pools[i]);
    struct reqlog_counts rlc;
    reqlog_counts(p->hub.reqlog, &rlc);
    v->request_log_written = (int64_t)rlc.lines;
    v->request_log_dropped = (int64_t)rlc.dropped;
    v->request_log_bytes = (int64_t)rlc.bytes;
    /* The rejoin logs: one per server, shared by the workers. */
    for (uint32_t i = 0; i < conf->npools; i++) {
        for (uint32_t k = 0; k < conf->pools[i].nservers; k++) {
            const struct rejoin_log *l = snap->pools[i].health[k]->rejoin;
            uint32_t keys = 0;
            uint64_t bytes = 0;
            if (l != NULL)
                rejoin_log_size(l, &keys, &bytes);
            v->pools[i].servers[k].stats.rejoin_log_keys = keys;
            v->pools[i].servers[k].stats.rejoin_log_bytes = (int64_t)bytes;
        }
    }
    /* In flight over every worker, and its peak, from the shared records
     * (kept where bounded loads needs them). */
    for (uint32_t i = 0; i < conf->npools; i++) {
        if (conf->pools[i].balance_factor <= 0)
            continue;
        for (uint32_t k = 0; k < conf->pools[i].nservers; k++) {
            struct health *h = snap->pools[i].health[k];
            v->pools[i].servers[k].stats.in_flight = atomic_load(&h->inflight);
            v->pools[i].servers[k].stats.in_flight_peak = atomic_load(&h->inflight_peak);
        }
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
            uint32_t owner = hot_key_owner(snap->pools[i].ring, &top[j]);
            hk->owner = conf->pools[i].servers[owner].label;
        }
    }
    free(copies);
    free(top);
    free(snaps);
    /* users: their shared records, as they are now */
    if (conf->global.nusers > 0 && snap->users != NULL) {
        v->users = calloc(conf->global.nusers, sizeof(*v->users));
        if (v->users == NULL) {
            stats_view_free(v);
            rc = -ENOMEM;
            goto out;
        }
        v->nusers = conf->global.nusers;
        for (uint32_t i = 0; i < conf->global.nusers; i++) {
            struct stats_view_user *vu = &v->users[i];
            const struct user_state *st = snap->users[i];
            vu->name = conf->global.users[i].name;
#define USER_VIEW(n, t, d) vu->n = (int64_t)atomic_load_explicit(&st->n, memory_order_relaxed);
            STATS_USER_CODEC(USER_VIEW)
#undef USER_VIEW
        }
    }
    rc = 0;
out:
    free(nsrv);
    free(nhot);
    return rc;
}

/*
 * The migrations' progress (control/migrate.c): Prometheus lines appended, or a
 * "migrate" member added to the JSON document that starts at out[start] (its last '}').
 */
static int observe_migrate(struct proxy *p, int prometheus, struct buf *out, size_t start)
{
    if (p->migrate == NULL)
        return 0;
    if (prometheus)
        return migrate_prometheus(p, out);
    json_t *j = migrate_json(p);
    if (j == NULL)
        return -ENOMEM;
    int rc = 0;
    if (json_object_size(j) > 0) {
        char *txt = json_dumps(j, JSON_COMPACT);
        size_t last = buf_len(out);
        while (last > start && buf_rptr(out)[last - 1] != '}')
            last--;
        if (txt == NULL) {
            rc = -ENOMEM;
        } else if (last > start) {      /* out[last - 1] is the document's closing brace */
            struct buf tail;
            buf_init(&tail);
            rc = buf_append(&tail, buf_rptr(out) + last - 1, buf_len(out) - (last - 1));
            buf_truncate(out, last - 1);
            rc |= buf_appendf(out, ",\"migrate\":%s", txt);
            rc |= buf_append(out, buf_rptr(&tail), buf_len(&tail));
            buf_free(&tail);
        }
        free(txt);
    }
    json_decref(j);
    return rc < 0 ? -ENOMEM : 0;
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
        size_t start = buf_len(out);
        rc = prometheus ? stats_render_prometheus(&v, out) : stats_render_json(&v, out);
        stats_view_free(&v);
        if (rc == 0)
            rc = observe_migrate(p, prometheus, out, start);
    }
    snapshot_unref(snap);
    return rc;
}

/* The current snapshot with a reference (readers on other threads take it
 * under the reload lock so the main thread cannot free it meanwhile). */
struct snapshot *observe_snapshot(struct proxy *p)
{
    uv_mutex_lock(&p->snap_mu);
    struct snapshot *s = atomic_load(&p->hub.current);
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

int observe_stats_listen(struct proxy *p, const char *host, int port, int fd, char *err,
                         size_t errlen)
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
    rc = fd >= 0 ? uv_tcp_open(&p->stats_server, fd)
                 : uv_tcp_bind(&p->stats_server, (struct sockaddr *)&ss, 0);
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

/* ------------------------------------------------------------------ admin endpoint */

#include <jansson.h>

#include "control/admin.h"
#include "state/health.h"

static int admin_stats_json(void *ctx, struct buf *out)
{
    return observe_render(ctx, 0, out);
}

static int admin_metrics(void *ctx, struct buf *out)
{
    return observe_render(ctx, 1, out);
}

/* 200 when every pool has a live server, else 503 naming the pools that have none. */
static int admin_health(void *ctx, struct buf *out)
{
    struct proxy *p = ctx;
    struct snapshot *s = observe_snapshot(p);
    int status = 200;

    if (s == NULL || atomic_load(&p->stopping)) {
        buf_append_str(out, "draining\n");
        if (s)
            snapshot_unref(s);
        return 503;
    }
    for (uint32_t i = 0; i < s->conf->npools; i++) {
        uint32_t live = 0;
        for (uint32_t k = 0; k < s->conf->pools[i].nservers; k++)
            live += health_up(s->pools[i].health[k]);
        if (live == 0) {
            buf_appendf(out, "pool '%s': no live server\n", s->conf->pools[i].name);
            status = 503;
        }
    }
    if (status == 200)
        buf_append_str(out, "ok\n");
    json_t *mj = p->migrate != NULL ? migrate_json(p) : NULL;
    const char *mpool;
    json_t *mp;
    json_object_foreach(mj, mpool, mp)
        if (strcmp(json_string_value(json_object_get(mp, "state")), "running") == 0)
            buf_appendf(out, "pool '%s': migrating: %" JSON_INTEGER_FORMAT " keys moved, %"
                        JSON_INTEGER_FORMAT " left to scan, %" JSON_INTEGER_FORMAT
                        " errors, eta %.0f s\n", mpool,
                        json_integer_value(json_object_get(mp, "moved")),
                        json_integer_value(json_object_get(mp, "remaining")),
                        json_integer_value(json_object_get(mp, "errors")),
                        json_real_value(json_object_get(mp, "eta_s")));
    json_decref(mj);
    /* A refused reload leaves the running configuration serving: still
     * healthy, but an operator polling /health must see it. */
    if (p->reload != NULL) {
        uv_mutex_lock(&p->reload->st.mu);
        if (p->reload->st.last_us != 0 && !p->reload->st.last_ok)
            buf_appendf(out, "last reload failed (the running configuration keeps serving): %s\n",
                        p->reload->st.last_error);
        uv_mutex_unlock(&p->reload->st.mu);
    }
    snapshot_unref(s);
    return status;
}

static int json_out(json_t *j, struct buf *out)
{
    if (j == NULL)
        return -ENOMEM;
    char *txt = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (txt == NULL)
        return -ENOMEM;
    int rc = buf_append_str(out, txt);
    buf_append_str(out, "\n");
    free(txt);
    return rc;
}

static int admin_ring(void *ctx, const char *pool, const char *key, size_t keylen, struct buf *out)
{
    struct proxy *p = ctx;
    struct snapshot *s = observe_snapshot(p);
    if (s == NULL)
        return 500;
    int idx = -1;
    for (uint32_t i = 0; i < s->conf->npools; i++)
        if (strcmp(s->conf->pools[i].name, pool) == 0)
            idx = (int)i;
    if (idx < 0) {
        buf_appendf(out, "no pool named '%s'\n", pool);
        snapshot_unref(s);
        return 404;
    }
    const struct conf_pool *cp = &s->conf->pools[idx];
    const struct ring *r = s->pools[idx].ring;
    const struct cluster_view *cv = s->pools[idx].cview;
    uint32_t pref[RING_MAX_PREF];
    uint32_t want = cp->nservers < RING_MAX_PREF ? cp->nservers : RING_MAX_PREF;
    uint32_t n;
    if (cv != NULL) {
        /* a cluster pool: the slot's master, then its replicas */
        uint32_t m = ring_owner(r, key, keylen);
        n = 0;
        pref[n++] = m;
        for (uint32_t k = m < cv->nnodes ? cv->first[m] : 0;
             m < cv->nnodes && k < cv->first[m + 1] && n < RING_MAX_PREF; k++)
            pref[n++] = cv->list[k];
    } else {
        n = ring_preference(r, key, keylen, pref, want);
    }
    char sum[32];
    snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)r->checksum);
    json_t *list = json_array();
    for (uint32_t i = 0; i < n; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "server", json_string(cp->servers[pref[i]].label));
        json_object_set_new(e, "state", json_string(health_up(s->pools[idx].health[pref[i]]) ? "up" : "down"));
        if (cv != NULL && pref[i] < cv->nnodes)
            json_object_set_new(e, "role", json_string(cluster_role_name(cv->role[pref[i]])));
        json_array_append_new(list, e);
    }
    json_t *j = json_object();
    json_object_set_new(j, "pool", json_string(cp->name));
    /* any bytes may be asked for: shown as the stats show keys (JSON strings are UTF-8) */
    if (stats_key_json(j, key, keylen) < 0) {
        json_decref(list);
        json_decref(j);
        snapshot_unref(s);
        return 500;
    }
    json_object_set_new(j, "owner", json_string(cp->servers[pref[0]].label));
    json_object_set_new(j, "preference", list);
    json_object_set_new(j, "epoch", json_integer((json_int_t)r->epoch));
    json_object_set_new(j, "checksum", json_string(sum));
    if (cv != NULL) {
        json_object_set_new(j, "slot", json_integer(cluster_keyslot(key, keylen)));
        json_object_set_new(j, "cluster_epoch", json_integer((json_int_t)cv->current_epoch));
    }
    snapshot_unref(s);
    return json_out(j, out) == 0 ? 200 : 500;
}

static json_t *addr_json(const struct conf_addr *a)
{
    return a->text ? json_string(a->text) : json_null();
}

/* The configuration in effect, secrets masked. */
static int admin_config(void *ctx, struct buf *out)
{
    struct proxy *p = ctx;
    struct snapshot *s = observe_snapshot(p);
    if (s == NULL)
        return -EAGAIN;
    const struct conf *c = s->conf;
    json_t *root = json_object();
    json_t *g = json_object();
    json_object_set_new(g, "path", json_string(c->path ? c->path : ""));
    json_object_set_new(g, "workers", json_integer(p->nworkers));
    json_object_set_new(g, "stats_listen", json_string(p->stats_effective));
    json_object_set_new(g, "admin", addr_json(&c->global.admin_listen));
    json_object_set_new(g, "admin_token", c->global.admin_token ? json_string("********") : json_null());
    json_object_set_new(g, "admin_hosts", c->global.admin_hosts ? json_string(c->global.admin_hosts) : json_null());
    json_object_set_new(g, "watch", json_boolean(c->global.watch));
    json_object_set_new(g, "zone", c->global.zone ? json_string(c->global.zone) : json_null());
    json_t *src = etcd_source_json(p);
    json_object_set_new(g, "config_source", src ? src : json_null());
    json_object_set_new(root, "ringleader", g);
    json_t *pools = json_object();
    for (uint32_t i = 0; i < c->npools; i++) {
        const struct conf_pool *cp = &c->pools[i];
        json_t *o = json_object();
        json_object_set_new(o, "listen", addr_json(&cp->listen));
        json_object_set_new(o, "protocol", json_string(cp->protocol == CONF_PROTO_REDIS ? "redis" : "memcache"));
        json_object_set_new(o, "hash", json_string(hash_name(cp->hash)));
        json_object_set_new(o, "distribution", json_string(dist_name(cp->dist)));
        if (cp->has_hash_tag)
            json_object_set_new(o, "hash_tag", json_stringn(cp->hash_tag, 2));
        json_object_set_new(o, "timeout", json_integer(cp->timeout_ms));
        json_object_set_new(o, "server_connections", json_integer(cp->server_connections));
        json_object_set_new(o, "auto_eject_hosts", json_boolean(cp->auto_eject_hosts));
        json_object_set_new(o, "server_failure_limit", json_integer(cp->server_failure_limit));
        json_object_set_new(o, "server_retry_timeout", json_integer(cp->server_retry_timeout_ms));
        json_object_set_new(o, "redis_auth", cp->redis_auth ? json_string("********") : json_null());
        json_object_set_new(o, "redis_db", json_integer(cp->redis_db));
        static const char *const on_down[] = {"failover", "miss", "error"};
        json_object_set_new(o, "on_down", json_string(on_down[cp->on_down]));
        json_object_set_new(o, "replicas", json_integer(cp->replicas));
        json_object_set_new(o, "balance_factor", json_real(cp->balance_factor));
        json_object_set_new(o, "epoch", json_integer((json_int_t)s->pools[i].ring->epoch));
        char sum[32];
        snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)s->pools[i].ring->checksum);
        json_object_set_new(o, "ring_checksum", json_string(sum));
        /* where the pools came from (ringleader-ring --fleet compares proxies by these) */
        json_object_set_new(o, "source", json_string(conf_base(s->conf)->source ? conf_base(s->conf)->source : c->path ? c->path : ""));
        json_object_set_new(o, "source_revision", json_integer((json_int_t)conf_base(s->conf)->source_rev));
        json_t *dns = resolve_pool_json(p, &conf_base(s->conf)->pools[i]);
        if (dns != NULL)
            json_object_set_new(o, "dns", dns);
        json_t *servers = json_array();
        for (uint32_t k = 0; k < cp->nservers; k++) {
            const struct conf_server *cs = &cp->servers[k];
            json_t *e = json_object();
            json_object_set_new(e, "address", addr_json(&cs->addr));
            json_object_set_new(e, "weight", json_integer(cs->weight));
            json_object_set_new(e, "name", cs->name ? json_string(cs->name) : json_null());
            json_object_set_new(e, "zone", cs->zone ? json_string(cs->zone) : json_null());
            json_array_append_new(servers, e);
        }
        json_object_set_new(o, "servers", servers);
        json_object_set_new(pools, cp->name, o);
    }
    json_object_set_new(root, "pools", pools);
    snapshot_unref(s);
    return json_out(root, out);
}

/* POST /reload: the reload runs on the main loop; this thread waits for it. */
static int admin_reload(void *ctx, struct buf *out)
{
    return reload_admin_request(ctx, out);
}

static const struct admin_ops observe_admin_ops = {
    .get_stats_json = admin_stats_json,
    .get_metrics = admin_metrics,
    .health = admin_health,
    .ring = admin_ring,
    .config = admin_config,
    .reload = admin_reload,
};

int observe_admin_start(struct proxy *p, const char *addr, const char *token,
                        const char *hosts, int fd, char *err, size_t errlen)
{
    if (addr == NULL)
        return 0;
    p->admin = admin_start_on(fd, addr, token, hosts, &observe_admin_ops, p, err, errlen);
    return p->admin ? 0 : -EINVAL;
}

void observe_admin_stop(struct proxy *p)
{
    if (p->admin != NULL) {
        admin_stop(p->admin);
        p->admin = NULL;
    }
}
