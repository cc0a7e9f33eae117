/* struct proxy: loads the configuration, builds snapshots, runs the workers and the main loop. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf_lint.h"
#include "state/health.h"
#include "lib/log.h"
#include "control/migrate.h"
#include "control/notify.h"
#include "control/ops_rate.h"
#include "proto/proto.h"
#include "control/cluster.h"
#include "control/sentinel.h"
#include "control/observe.h"
#include "control/pool_numbers.h"
#include "control/proxy.h"
#include "stats/reqlog.h"
#include "state/registry.h"
#include "state/user_state.h"
#include "proxy/rejoin.h"
#include "proxy/worker.h"
#include "control/reload.h"
#include "control/resolve.h"
#include "control/etcd_source.h"
#include "control/signals.h"
#include "control/snapshot_build.h"
#include "control/upgrade.h"
#include "control/admin.h"
#include "lib/util.h"

/* How long a successor waits for each step of the handoff, and for the predecessor's
 * last word: a bound against a hung peer, not a pace. */
#define UPGRADE_WAIT_MS 10000

/* ------------------------------------------------------------------ signals */

static void proxy_stop(struct proxy *p, int force)
{
    if (!p->handed_over)
        notify_stopping();      /* after an upgrade the service is the successor's */
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

/* An upgrade's successor serves (upgrade.c): it holds every listener, so this process
 * lets go of its copies and drains, as on SIGTERM, without telling the service manager
 * it stops, and leaves the unix sockets' files to the successor. */
static void proxy_handed_over(struct proxy *p, pid_t successor)
{
    p->handed_over = 1;
    notify_mainpid(successor);
    log_notice("upgrade: process %d serves now (upgrade %llu): stopping here, draining "
               "in-flight requests", (int)successor, (unsigned long long)p->upgrades + 1);
    observe_stats_close(p);
    if (p->admin != NULL)
        admin_quiesce(p->admin);
    proxy_stop(p, 0);
}

/* ------------------------------------------------------------------ run */

static uint32_t proxy_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

/* Unlink the unix sockets the configuration listened on; not after an upgrade (the
 * successor listens on them), nor when this process was a successor that never served
 * (its predecessor still does: p->inherit is freed once serving). */
static void proxy_unlink_sockets(const struct proxy *p, const struct snapshot *snap)
{
    int theirs = p->handed_over || p->inherit != NULL;
    for (uint32_t i = 0; snap != NULL && !theirs && i < snap->conf->npools; i++)
        if (snap->conf->pools[i].listen.path != NULL && snap->pools[i].listen_fds != NULL)
            unlink(snap->conf->pools[i].listen.path);
}

/* Workers [from, to) were set up and never started: a start-up that failed frees them
 * (their pools hold the snapshot, their loops the inherited listeners). */
static void proxy_discard_workers(struct proxy *p, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to; i++)
        worker_discard(&p->workers[i]);
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
    p->hub.workers = p->workers;        /* CLIENT LIST walks them (client_list.c) */
    p->hub.nworkers = p->nworkers;
    for (uint32_t i = 0; i < p->nworkers; i++) {
        if (worker_init(&p->workers[i], &p->hub, i, snap, err, sizeof(err)) < 0) {
            fprintf(stderr, "ringleader: %s\n", err);
            log_error("%s", err);
            proxy_discard_workers(p, 0, i);
            return -1;
        }
    }
    /* The stats port: -a/-s win over ringleader.stats_listen, else 127.0.0.1:22222. */
    const struct conf_addr *sl = &conf->global.stats_listen;
    const char *shost = opt->stats_addr ? opt->stats_addr : (sl->host ? sl->host : "127.0.0.1");
    int sport = opt->stats_port ? opt->stats_port : (sl->port ? sl->port : 22222);
    snprintf(p->stats_effective, sizeof(p->stats_effective), "%s:%d", shost, sport);
    if (observe_stats_listen(p, shost, sport,
                             upgrade_take_fd(p->inherit, "stats", p->stats_effective), err,
                             sizeof(err)) < 0) {
        fprintf(stderr, "ringleader: %s\n", err);
        log_error("%s", err);
        proxy_discard_workers(p, 0, p->nworkers);
        return -1;
    }
    const struct conf_addr *al = &conf->global.admin_listen;
    if (observe_admin_start(p, al->text, conf->global.admin_token, conf->global.admin_hosts,
                            upgrade_take_fd(p->inherit, "admin", al->text), err,
                            sizeof(err)) < 0) {
        fprintf(stderr, "ringleader: admin endpoint: %s\n", err);
        log_error("admin endpoint: %s", err);
        proxy_discard_workers(p, 0, p->nworkers);
        return -1;
    }
    if (p->admin != NULL)
        log_notice("admin endpoint on %s", al->text);
    /* Before any worker accepts: a process that cannot be upgraded later refuses to start. */
    const char *upath = opt->upgrade_from ? opt->upgrade_from : opt->upgrade_socket;
    if (upath != NULL &&
        upgrade_listen(p, upath, opt->argv, p->inherit, proxy_handed_over, err,
                       sizeof(err)) < 0) {
        fprintf(stderr, "ringleader: %s\n", err);
        log_error("%s", err);
        proxy_discard_workers(p, 0, p->nworkers);
        return -1;
    }
    for (uint32_t i = 0; i < p->nworkers; i++) {
        if (worker_start(&p->workers[i]) != 0) {
            log_error("cannot start worker thread %u", i);
            for (uint32_t j = 0; j < i; j++) {
                atomic_store(&p->workers[j].stop, 2);
                worker_wake(&p->workers[j]);
                worker_join(&p->workers[j]);
            }
            proxy_discard_workers(p, i, p->nworkers);
            return -1;
        }
    }
    for (uint32_t i = 0; i < conf->npools; i++)
        log_notice("pool '%s' (%s, %s, %u servers) listening on %s", conf->pools[i].name,
                   snap->pools[i].ops->name, dist_name(conf->pools[i].dist),
                   conf->pools[i].nservers, conf->pools[i].listen.text);
    log_notice("ringleader-%s started: %u worker(s), pid %d", PACKAGE_VERSION, p->nworkers,
               (int)getpid());
    if (p->inherit != NULL) {
        if (upgrade_complete(p->inherit, opt->pidfile, opt->pid_path, UPGRADE_WAIT_MS, err,
                             sizeof(err)) < 0)
            log_error("upgrade: %s", err);
        else
            log_notice("upgrade %llu: the previous process let go of the listeners",
                       (unsigned long long)p->upgrades);
        upgrade_inherit_free(p->inherit);   /* what the new file does not listen on */
        p->inherit = NULL;
    }
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

static void proxy_hub_sentinel_refresh(void *ctx, struct sentinel *sn, enum sentinel_why why)
{
    (void)ctx;
    sentinel_refresh_request(sn, why);
}

static void proxy_hub_pool_numbers(void *ctx, struct snapshot *snap, const char *pool,
                                   uint32_t worker, proto_stat_fn emit, void *arg)
{
    pool_numbers_emit(ctx, snap, pool, worker, emit, arg);
}

/* ------------------------------------------------------------------ other sources */

/* DNS answers changed a pool's servers (resolve.c): the configuration in effect built again
 * with them and applied as a reload (epoch, movement report, warm-up, rejoin). 1: busy. */
static int proxy_dns_rebuild(struct proxy *p, char *err, size_t errlen)
{
    if (reload_busy(p))
        return 1;
    struct conf *base = conf_base(atomic_load(&p->hub.current)->conf);
    conf_ref(base);
    return reload_apply(p, "dns", base, err, errlen) < 0 ? -1 : 0;
}

/* config_source's document changed (etcd_source.c): a reload reads it with the file. */
static void proxy_etcd_changed(struct proxy *p)
{
    char err[1024];
    reload_run(p, "etcd", err, sizeof(err));
}

/* What the workers may tell the main loop (src/proxy/hub.h). */
static const struct hub_ops proxy_hub_ops = {
    .adopted = proxy_hub_adopted,
    .cluster_refresh = proxy_hub_cluster_refresh,
    .pool_numbers = proxy_hub_pool_numbers,
    .sentinel_refresh = proxy_hub_sentinel_refresh,
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
    p->users_shared = registry_new(sizeof(struct user_state));
    if (p->pools_shared == NULL || p->healths == NULL || p->users_shared == NULL ||
        cluster_registry_init(p, reload_rebuild) < 0 ||
        sentinel_registry_init(p, reload_rebuild) < 0) {
        fprintf(stderr, "ringleader: out of memory\n");
        goto out_registries;
    }
    if (resolve_init(p, proxy_dns_rebuild) < 0 || etcd_source_init(p, proxy_etcd_changed) < 0) {
        fprintf(stderr, "ringleader: out of memory\n");
        goto out_registries;
    }
    if (etcd_source_conf_load(p, &conf, err, sizeof(err)) < 0) {
        log_error("configuration: %s", err);
        fprintf(stderr, "ringleader: %s\n", err);
        goto out_registries;
    }
    if (opt->upgrade_from != NULL) {
        /* Only once the file is good: a successor that cannot start never asks. */
        p->inherit = upgrade_receive(opt->upgrade_from, UPGRADE_WAIT_MS, err, sizeof(err));
        if (p->inherit == NULL) {
            log_error("upgrade: %s", err);
            fprintf(stderr, "ringleader: upgrade: %s\n", err);
            conf_free(conf);
            goto out_registries;
        }
        p->upgrades = upgrade_inherit_count(p->inherit) + 1;
        log_notice("upgrade %llu: took over %s's sockets", (unsigned long long)p->upgrades,
                   opt->upgrade_from);
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
    if (p->inherit != NULL && p->nworkers < upgrade_inherit_workers(p->inherit)) {
        /* Each of the predecessor's SO_REUSEPORT sockets has its own queue: one left
         * without a worker would hold connections nobody accepts. */
        log_warn("upgrade: %u workers, not %u: the running process listens with %u sockets "
                 "per pool (fewer takes a restart)", upgrade_inherit_workers(p->inherit),
                 p->nworkers, upgrade_inherit_workers(p->inherit));
        p->nworkers = upgrade_inherit_workers(p->inherit);
    }
    /* the request log's writer: buffers for every worker; a thread once a path is set */
    if ((p->hub.reqlog = reqlog_create(p->nworkers, REQLOG_BUF_DEFAULT)) == NULL ||
        reqlog_set_path(p->hub.reqlog, conf->global.request_log.path) < 0)
        log_error("request_log: out of memory or no thread: not logging");
    p->rejoin = rejoin_store_open(conf->global.rejoin_log, err, sizeof(err));
    if (p->rejoin == NULL) {
        log_error("rejoin_log: %s", err);
        fprintf(stderr, "ringleader: rejoin_log: %s\n", err);
        conf_free(conf);
        goto out_registries;
    }
    snap = snapshot_build(p, conf, NULL, err, sizeof(err));
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
    sentinel_registry_start(p);
    resolve_start(p);
    etcd_source_start(p);
    if (reload_init(p, snap->conf->global.watch) < 0) {
        fprintf(stderr, "ringleader: out of memory\n");
        goto out_loop;
    }
    migrate_adopted(p, snap, NULL);     /* a migration the state file says is unfinished */
    if (proxy_serve(p, snap) == 0)
        status = 0;

out_loop:
    uv_close((uv_handle_t *)&p->sigterm, NULL);
    uv_close((uv_handle_t *)&p->sigint, NULL);
    uv_close((uv_handle_t *)&p->sighup, NULL);
    signals_close(p->signals);
    ops_rate_close(p->ops_rate);
    upgrade_close(p);
    observe_admin_stop(p);
    observe_stats_close(p);
    migrate_stop(p);
    reload_close(p);
    cluster_registry_close(p);
    sentinel_registry_close(p);
    resolve_close(p);
    etcd_source_close(p);
    rejoin_store_close(p->rejoin);      /* the workers are gone: nothing uses a log now */
    p->rejoin = NULL;
    uv_run(&p->loop, UV_RUN_DEFAULT);
    uv_loop_close(&p->loop);
    free(p->workers);
    reqlog_destroy(p->hub.reqlog);      /* what the workers logged last is written */
    p->hub.reqlog = NULL;
    migrate_free(p);
    reload_free(p);
    snap = atomic_exchange(&p->hub.current, NULL);
    proxy_unlink_sockets(p, snap);      /* the unix sockets we listened on go with us */
    snapshot_unref(snap);
out_registries:
    reqlog_destroy(p->hub.reqlog);          /* a failed start (NULL after a run) */
    upgrade_inherit_free(p->inherit);       /* a failed start: the predecessor goes on */
    cluster_registry_free(p);
    sentinel_registry_free(p);
    resolve_free(p);
    etcd_source_free(p);
    rejoin_store_close(p->rejoin);
    registry_free(p->pools_shared);
    registry_free(p->users_shared);
    registry_free(p->healths);
    uv_mutex_destroy(&p->snap_mu);
    free(p);
    return status;
}
