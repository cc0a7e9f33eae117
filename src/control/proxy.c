/* struct proxy: loads the configuration, builds snapshots, runs the workers and the main loop. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "placement/cluster_map.h"
#include "conf/conf_lint.h"
#include "state/health.h"
#include "lib/log.h"
#include "control/notify.h"
#include "control/ops_rate.h"
#include "proto/proto.h"
#include "control/cluster.h"
#include "proxy/listen.h"
#include "control/observe.h"
#include "control/pool_numbers.h"
#include "control/proxy.h"
#include "state/registry.h"
#include "proxy/rejoin.h"
#include "proxy/tls.h"
#include "proxy/worker.h"
#include "control/reload.h"
#include "control/signals.h"
#include "lib/util.h"

/* ------------------------------------------------------------------ snapshots */

/* The wire protocol of each conf_proto. */
static const struct proto_ops *const proxy_protocols[] = {
    [CONF_PROTO_MEMCACHE] = &proto_memcache_ops,
    [CONF_PROTO_REDIS] = &proto_redis_ops,
};

/* Keyspace share of the busiest server over the mean share, from the shares
 * the ring measured when it was built, for the stats' skew figure. */
static double proxy_key_skew(const struct ring *r)
{
    double max = 0;
    for (uint32_t i = 0; i < r->nservers; i++)
        if (r->servers[i].keyspace_share > max)
            max = r->servers[i].keyspace_share;
    return max * (double)r->nservers;
}

/* The health record of a server: kept across reloads for the same pool,
 * identity and address, so a reload never resets a down server to up. A new
 * one gets its rejoin log (with what the journal kept for it). */
static struct health *proxy_health(struct proxy *p, const struct conf_pool *cp,
                                   const struct conf_server *cs)
{
    char key[1024];
    int n = snprintf(key, sizeof(key), "%s%c%s%c%s", cp->name, 0, cs->ident, 0, cs->addr.text);
    if (n < 0 || (size_t)n >= sizeof(key))
        return NULL;
    struct health *h = registry_get(p->healths, key, (size_t)n);
    if (h != NULL && h->rejoin == NULL && p->rejoin != NULL &&
        rejoin_store_attach(p->rejoin, h, cp, cs, p->healths) < 0)
        return NULL;
    return h;
}

/* The pool's ring: the old snapshot's when placement is unchanged (its
 * epoch with it), else the new one with epoch + 1 and, with warmup, the old
 * ring to ask on misses. 0, or -1 with err. */
static int proxy_pool_ring(struct snapshot_pool *sp, const struct conf *conf,
                           const struct conf_pool *cp, const struct snapshot *old, char *err,
                           size_t errlen)
{
    char rerr[256] = "";
    int j = snapshot_pool_index(old, cp->name, cp->protocol);

    /* A rebuild of the same file (a cluster's slot map changed) keeps every other
     * pool's ring as it is, without building it again. */
    if (j >= 0 && !cp->redis_cluster && conf_base(old->conf) == conf_base((struct conf *)conf)) {
        const struct snapshot_pool *op = &old->pools[j];
        ring_ref(op->ring);
        sp->ring = op->ring;
        if (op->prev_ring != NULL) {        /* its warm-up window goes on */
            ring_ref(op->prev_ring);
            sp->prev_ring = op->prev_ring;
            sp->warm_until_ms = op->warm_until_ms;
        }
        return 0;
    }
    sp->ring = ring_build(cp, rerr, sizeof(rerr));
    if (sp->ring == NULL) {
        snprintf(err, errlen, "pool '%s': %s", cp->name, rerr);
        return -1;
    }
    if (sp->cview != NULL && sp->cview->checksum != 0)
        sp->ring->checksum = sp->cview->checksum;   /* a cluster pool's: its slot map's */
    if (j < 0)
        return 0;
    struct ring *or = old->pools[j].ring;
    if (or->checksum == sp->ring->checksum) {
        ring_unref(sp->ring);
        ring_ref(or);
        sp->ring = or;
        return 0;
    }
    sp->ring->epoch = or->epoch + 1;
    if (cp->warmup_s > 0) {     /* route.c asks the protocol what warms */
        ring_ref(or);
        sp->prev_ring = or;
        sp->warm_until_ms = util_now_ms() + (uint64_t)cp->warmup_s * 1000u;
    }
    return 0;
}

/* The pool's listening sockets: the old snapshot's for an address it
 * already listens on, else new ones. 0, or -errno with err. */
static int proxy_pool_listen(struct proxy *p, struct snapshot_pool *sp, const struct conf_pool *cp,
                             const struct snapshot *old, char *err, size_t errlen)
{
    sp->listen_fds = malloc(p->nworkers * sizeof(*sp->listen_fds));
    if (sp->listen_fds == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    for (uint32_t k = 0; old != NULL && k < old->conf->npools; k++) {
        const struct conf_addr *oa = &old->conf->pools[k].listen;
        if (old->pools[k].listen_fds != NULL && old->pools[k].listen_fds[0] >= 0 &&
            strcmp(oa->text, cp->listen.text) == 0) {
            int rc = listen_dup(old->pools[k].listen_fds, p->nworkers, sp->listen_fds);
            if (rc < 0)
                snprintf(err, errlen, "pool '%s': listen %s: %s", cp->name, cp->listen.text,
                         strerror(-rc));
            return rc;
        }
    }
    char lerr[512] = "";
    int rc = listen_open(&cp->listen, cp->backlog > 0 ? cp->backlog : 512, p->nworkers,
                         sp->listen_fds, lerr, sizeof(lerr));
    if (rc < 0)
        snprintf(err, errlen, "pool '%s': %s", cp->name, lerr);
    return rc;
}

/* The pool's TLS contexts, from its files as they are now. 0, or -1 with
 * err (the reload fails and the running contexts stay). */
static int proxy_pool_tls(struct snapshot_pool *sp, const struct conf *conf,
                          const struct conf_pool *cp, char *err, size_t errlen)
{
    if (cp->tls != NULL &&
        (sp->tls = tls_ctx_build(conf->path, cp->name, cp->tls, TLS_ROLE_ACCEPT, err,
                                 errlen)) == NULL)
        return -1;
    if (cp->server_tls != NULL &&
        (sp->server_tls = tls_ctx_build(conf->path, cp->name, cp->server_tls, TLS_ROLE_CONNECT,
                                        err, errlen)) == NULL)
        return -1;
    return 0;
}

/* `routes:` rules with their target pools resolved to indices of conf. */
static struct route_rule *proxy_pool_rules(const struct conf *conf, const struct conf_pool *cp)
{
    struct route_rule *rules = calloc(cp->nroutes ? cp->nroutes : 1, sizeof(*rules));
    if (rules == NULL)
        return NULL;
    for (uint32_t i = 0; i < cp->nroutes; i++) {
        rules[i].prefix = cp->routes[i].prefix;
        rules[i].len = (uint32_t)strlen(cp->routes[i].prefix);
        rules[i].pool = ROUTE_NONE;
        for (uint32_t j = 0; j < conf->npools; j++)
            if (strcmp(conf->pools[j].name, cp->routes[i].pool) == 0)
                rules[i].pool = j;
    }
    return rules;
}

struct snapshot *proxy_snapshot_build(struct proxy *p, struct conf *conf,
                                      const struct snapshot *old, char *err, size_t errlen)
{
    struct snapshot *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        conf_free(conf);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    atomic_init(&s->refs, 1);
    for (uint32_t i = 0; i < conf->npools; i++) {
        if (!conf->pools[i].redis_cluster)
            continue;
        /* the cluster pools' servers are their nodes: a derived configuration */
        struct conf *d = conf_derive(conf);
        conf_free(conf);
        if (d == NULL) {
            free(s);
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
        conf = d;
        break;
    }
    s->conf = conf;
    s->nworkers = p->nworkers;
    s->generation = old ? old->generation + 1 : 1;
    s->pools = calloc(conf->npools ? conf->npools : 1, sizeof(*s->pools));
    if (s->pools == NULL)
        goto nomem;
    for (uint32_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        struct snapshot_pool *sp = &s->pools[i];
        sp->ops = proxy_protocols[cp->protocol];
        if (proxy_pool_tls(sp, conf, cp, err, errlen) < 0)    /* the slot map's fetch uses it */
            goto fail;
        if (cp->redis_cluster && cluster_snapshot_pool(p, conf, i, sp, err, errlen) < 0)
            goto fail;
        if (proxy_pool_ring(sp, conf, cp, old, err, errlen) < 0)
            goto fail;
        sp->keys_max_over_mean = proxy_key_skew(sp->ring);
        sp->shadow = ROUTE_NONE;
        for (uint32_t j = 0; cp->shadow.pool != NULL && j < conf->npools; j++)
            if (j != i && strcmp(conf->pools[j].name, cp->shadow.pool) == 0)
                sp->shadow = j;
        sp->shared = registry_get(p->pools_shared, cp->name, strlen(cp->name));
        sp->health = calloc(cp->nservers ? cp->nservers : 1, sizeof(*sp->health));
        sp->rules = proxy_pool_rules(conf, cp);
        if (sp->shared == NULL || sp->health == NULL || sp->rules == NULL)
            goto nomem;
        for (uint32_t k = 0; k < cp->nservers; k++)
            if ((sp->health[k] = proxy_health(p, cp, &cp->servers[k])) == NULL)
                goto nomem;
        if (proxy_pool_listen(p, sp, cp, old, err, errlen) < 0)
            goto fail;
    }
    return s;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    snapshot_unref(s);
    return NULL;
}

/* ------------------------------------------------------------------ signals */

static void proxy_stop(struct proxy *p, int force)
{
    notify_stopping();
    atomic_store(&p->stopping, 1);
    /* New connections are refused from now on (the workers close their own
     * listeners when they see the stop). While a reload is being adopted a
     * worker may still copy the current snapshot's sockets: those close
     * when the last worker has acknowledged (reload.c). */
    if (p->reload == NULL || p->reload->old == NULL)
        snapshot_close_listeners(atomic_load(&p->hub.current));
    for (uint32_t i = 0; i < p->nworkers; i++) {
        atomic_store(&p->workers[i].stop, force ? 2 : 1);
        worker_wake(&p->workers[i]);
    }
    uv_signal_stop(&p->sigterm);
    uv_signal_stop(&p->sigint);
    uv_signal_stop(&p->sighup);
    uv_stop(&p->loop);
}

static void proxy_signal_cb(uv_signal_t *h, int signum)
{
    struct proxy *p = h->data;

    switch (signum) {
    case SIGTERM:
    case SIGINT:
        log_notice("signal %d: stopping (draining in-flight requests)", signum);
        proxy_stop(p, 0);
        break;
    case SIGHUP: {
        char err[1024];
        log_reopen();
        reload_run(p, "SIGHUP", err, sizeof(err));
        break;
    }
    default:
        break;
    }
}

/* ------------------------------------------------------------------ run */

static uint32_t proxy_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

/* Unlink the unix sockets the configuration listened on. */
static void proxy_unlink_sockets(const struct snapshot *snap)
{
    for (uint32_t i = 0; snap != NULL && i < snap->conf->npools; i++)
        if (snap->conf->pools[i].listen.path != NULL && snap->pools[i].listen_fds != NULL)
            unlink(snap->conf->pools[i].listen.path);
}

/* Start the workers, the stats port and the admin endpoint, then run the
 * main loop until a stop signal. 0 after a clean stop, -1 when start-up
 * failed (the message is out). */
static int proxy_serve(struct proxy *p, struct snapshot *snap)
{
    const struct conf *conf = snap->conf;
    const struct proxy_options *opt = &p->opt;
    char err[1024] = "";

    p->workers = calloc(p->nworkers, sizeof(*p->workers));
    if (p->workers == NULL)
        return -1;
    for (uint32_t i = 0; i < p->nworkers; i++) {
        if (worker_init(&p->workers[i], &p->hub, i, snap, err, sizeof(err)) < 0) {
            fprintf(stderr, "ringleader: %s\n", err);
            log_error("%s", err);
            return -1;      /* a start-up failure exits: set-up workers are left to the exit */
        }
    }
    /* The stats port: -a/-s win over ringleader.stats_listen, else 127.0.0.1:22222. */
    const struct conf_addr *sl = &conf->global.stats_listen;
    const char *shost = opt->stats_addr ? opt->stats_addr : (sl->host ? sl->host : "127.0.0.1");
    int sport = opt->stats_port ? opt->stats_port : (sl->port ? sl->port : 22222);
    snprintf(p->stats_effective, sizeof(p->stats_effective), "%s:%d", shost, sport);
    if (observe_stats_listen(p, shost, sport, err, sizeof(err)) < 0) {
        fprintf(stderr, "ringleader: %s\n", err);
        log_error("%s", err);
        return -1;
    }
    const struct conf_addr *al = &conf->global.admin_listen;
    if (observe_admin_start(p, al->text, conf->global.admin_token, conf->global.admin_hosts,
                            err, sizeof(err)) < 0) {
        fprintf(stderr, "ringleader: admin endpoint: %s\n", err);
        log_error("admin endpoint: %s", err);
        return -1;
    }
    if (p->admin != NULL)
        log_notice("admin endpoint on %s", al->text);
    for (uint32_t i = 0; i < p->nworkers; i++) {
        if (worker_start(&p->workers[i]) != 0) {
            log_error("cannot start worker thread %u", i);
            for (uint32_t j = 0; j < i; j++) {
                atomic_store(&p->workers[j].stop, 2);
                worker_wake(&p->workers[j]);
                worker_join(&p->workers[j]);
            }
            return -1;
        }
    }
    for (uint32_t i = 0; i < conf->npools; i++)
        log_notice("pool '%s' (%s, %s, %u servers) listening on %s", conf->pools[i].name,
                   snap->pools[i].ops->name, dist_name(conf->pools[i].dist),
                   conf->pools[i].nservers, conf->pools[i].listen.text);
    log_notice("ringleader-%s started: %u worker(s), pid %d", PACKAGE_VERSION, p->nworkers,
               (int)getpid());
    notify_ready();

    uv_run(&p->loop, UV_RUN_DEFAULT);

    for (uint32_t i = 0; i < p->nworkers; i++)
        worker_join(&p->workers[i]);
    log_notice("stopped");
    return 0;
}

/* ------------------------------------------------------------------ the workers' news */

static void proxy_hub_adopted(void *ctx, int failed)
{
    reload_worker_adopted(ctx, failed);
}

static void proxy_hub_cluster_refresh(void *ctx, struct cluster *cl, enum cluster_why why)
{
    cluster_refresh_request(cl, why);
}

static void proxy_hub_pool_numbers(void *ctx, struct snapshot *snap, const char *pool,
                                   uint32_t worker, proto_stat_fn emit, void *arg)
{
    pool_numbers_emit(ctx, snap, pool, worker, emit, arg);
}

/* What the workers may tell the main loop (src/proxy/hub.h). */
static const struct hub_ops proxy_hub_ops = {
    .adopted = proxy_hub_adopted,
    .cluster_refresh = proxy_hub_cluster_refresh,
    .pool_numbers = proxy_hub_pool_numbers,
};

int proxy_run(struct proxy_options *opt)
{
    struct proxy *p = calloc(1, sizeof(*p));
    char err[1024] = "";
    struct conf *conf = NULL;
    struct snapshot *snap = NULL;
    int status = 1;

    if (p == NULL)
        return 1;
    p->opt = *opt;
    p->hub.start_wall_us = util_wall_us();
    p->hub.buf_size = opt->buf_size;
    p->hub.ops = &proxy_hub_ops;
    p->hub.ctx = p;
    if (gethostname(p->hostname, sizeof(p->hostname) - 1) < 0 || p->hostname[0] == '\0')
        snprintf(p->hostname, sizeof(p->hostname), "localhost");
    uv_mutex_init(&p->snap_mu);
    p->pools_shared = registry_new(sizeof(struct pool_shared));
    p->healths = registry_new(sizeof(struct health));
    if (p->pools_shared == NULL || p->healths == NULL || cluster_registry_init(p) < 0) {
        fprintf(stderr, "ringleader: out of memory\n");
        goto out_registries;
    }
    if (conf_load(opt->conf_path, &conf, err, sizeof(err)) < 0) {
        log_error("configuration: %s", err);
        fprintf(stderr, "ringleader: %s\n", err);
        goto out_registries;
    }
    conf_lint_log(conf);
    atomic_store(&p->hub.client_output_limit, conf->global.client_output_limit
                                                  ? conf->global.client_output_limit : 8u << 20);
    /* -v and -o win over ringleader.log_level and ringleader.log_file. */
    if (opt->verbosity < 0)
        log_set_level(conf->global.log_level);
    if (opt->log_file == NULL && conf->global.log_file != NULL &&
        log_init(log_level_current, conf->global.log_file) < 0)
        fprintf(stderr, "ringleader: cannot open log file '%s'\n", conf->global.log_file);
    p->nworkers = opt->workers ? opt->workers
                               : (conf->global.workers ? conf->global.workers : proxy_cpus());
    p->rejoin = rejoin_store_open(conf->global.rejoin_log, err, sizeof(err));
    if (p->rejoin == NULL) {
        log_error("rejoin_log: %s", err);
        fprintf(stderr, "ringleader: rejoin_log: %s\n", err);
        conf_free(conf);
        goto out_registries;
    }
    snap = proxy_snapshot_build(p, conf, NULL, err, sizeof(err));
    if (snap == NULL) {
        fprintf(stderr, "ringleader: %s\n", err);
        goto out_registries;
    }
    atomic_store(&p->hub.current, snap);
    rejoin_store_prune(p->rejoin, snap);    /* every configured server has its log now */

    uv_loop_init(&p->loop);
    p->loop.data = p;
    rejoin_store_start(p->rejoin, &p->loop);
    uv_signal_init(&p->loop, &p->sigterm);
    uv_signal_init(&p->loop, &p->sigint);
    uv_signal_init(&p->loop, &p->sighup);
    p->sigterm.data = p->sigint.data = p->sighup.data = p;
    uv_signal_start(&p->sigterm, proxy_signal_cb, SIGTERM);
    uv_signal_start(&p->sigint, proxy_signal_cb, SIGINT);
    uv_signal_start(&p->sighup, proxy_signal_cb, SIGHUP);
    p->signals = signals_start(p);
    p->ops_rate = ops_rate_start(p);
    cluster_registry_start(p);
    if (reload_init(p, snap->conf->global.watch) < 0) {
        fprintf(stderr, "ringleader: out of memory\n");
        goto out_loop;
    }
    if (proxy_serve(p, snap) == 0)
        status = 0;

out_loop:
    uv_close((uv_handle_t *)&p->sigterm, NULL);
    uv_close((uv_handle_t *)&p->sigint, NULL);
    uv_close((uv_handle_t *)&p->sighup, NULL);
    signals_close(p->signals);
    ops_rate_close(p->ops_rate);
    observe_admin_stop(p);
    observe_stats_close(p);
    reload_close(p);
    cluster_registry_close(p);
    rejoin_store_close(p->rejoin);      /* the workers are gone: nothing uses a log now */
    p->rejoin = NULL;
    uv_run(&p->loop, UV_RUN_DEFAULT);
    uv_loop_close(&p->loop);
    free(p->workers);
    reload_free(p);
    snap = atomic_exchange(&p->hub.current, NULL);
    proxy_unlink_sockets(snap);      /* the unix sockets we listened on go with us */
    snapshot_unref(snap);
out_registries:
    cluster_registry_free(p);
    rejoin_store_close(p->rejoin);
    registry_free(p->pools_shared);
    registry_free(p->healths);
    uv_mutex_destroy(&p->snap_mu);
    free(p);
    return status;
}
