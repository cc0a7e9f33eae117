/* struct proxy: loads the configuration, builds snapshots, runs the workers and the main loop. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf_lint.h"
#include "health.h"
#include "log.h"
#include "notify.h"
#include "proxy/proxy.h"
#include "proxy/observe.h"
#include "proxy/worker.h"
#include "ops_rate.h"
#include "reload.h"
#include "signals.h"
#include "util.h"

/* ------------------------------------------------------------------ snapshots */

void snapshot_ref(struct snapshot *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void snapshot_unref(struct snapshot *s)
{
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (uint32_t i = 0; s->rings != NULL && i < s->conf->npools; i++)
        if (s->rings[i] != NULL)
            ring_unref(s->rings[i]);
    for (uint32_t i = 0; s->unix_fds != NULL && i < s->conf->npools; i++)
        if (s->unix_fds[i] >= 0)
            close(s->unix_fds[i]);
    free(s->unix_fds);
    for (uint32_t i = 0; s->health != NULL && i < s->conf->npools; i++)
        free(s->health[i]);
    for (uint32_t i = 0; s->prev_rings != NULL && i < s->conf->npools; i++)
        if (s->prev_rings[i] != NULL)
            ring_unref(s->prev_rings[i]);
    free(s->prev_rings);
    free(s->warm_until_ms);
    free(s->keys_max_over_mean);
    free(s->health);
    free(s->rings);
    free(s->shared);
    conf_free(s->conf);
    free(s);
}

/* The shared record of a pool, by name; created on first sight. */
static struct pool_shared *proxy_shared(struct proxy *p, const char *name)
{
    for (uint32_t i = 0; i < p->nshared; i++)
        if (strcmp(p->shared_names[i], name) == 0)
            return p->shared[i];
    struct pool_shared **ns = realloc(p->shared, (p->nshared + 1) * sizeof(*ns));
    if (ns == NULL)
        return NULL;
    p->shared = ns;
    char **nn = realloc(p->shared_names, (p->nshared + 1) * sizeof(*nn));
    if (nn == NULL)
        return NULL;
    p->shared_names = nn;
    struct pool_shared *sh = calloc(1, sizeof(*sh));
    char *dup = strdup(name);
    if (sh == NULL || dup == NULL) {
        free(sh);
        free(dup);
        return NULL;
    }
    p->shared[p->nshared] = sh;
    p->shared_names[p->nshared] = dup;
    p->nshared++;
    return sh;
}

#define PROXY_SKEW_SAMPLES 20000   /* hashes sampled where a ring has no points to measure */

/* Keyspace share of the busiest server over the mean share (exact for
 * ketama and modula, sampled otherwise); built with the ring, off the data
 * path, for the stats' skew figure. */
static double proxy_key_skew(const struct ring *r)
{
    double *shares = calloc(r->nservers ? r->nservers : 1, sizeof(*shares));
    double max = 0;
    if (shares == NULL || r->nservers == 0) {
        free(shares);
        return 0;
    }
    ring_shares(r, shares, PROXY_SKEW_SAMPLES);
    for (uint32_t i = 0; i < r->nservers; i++)
        if (shares[i] > max)
            max = shares[i];
    free(shares);
    return max * (double)r->nservers;
}

/* Pool `name` of protocol `proto` in a snapshot, or -1. */
static int snapshot_pool(const struct snapshot *s, const char *name, enum conf_proto proto)
{
    for (uint32_t i = 0; s != NULL && i < s->conf->npools; i++)
        if (strcmp(s->conf->pools[i].name, name) == 0 && s->conf->pools[i].protocol == proto)
            return (int)i;
    return -1;
}

/* The health record of a server: kept across reloads for the same pool,
 * identity and address, so a reload never resets a down server to up. */
static struct health *proxy_health(struct proxy *p, const char *pool, const struct conf_server *cs)
{
    char key[1024];
    snprintf(key, sizeof(key), "%s\n%s\n%s", pool, cs->ident, cs->addr.text);
    /* Servers are looked up in config order, which is the order their
     * records were made in: try the next one first (O(n) per reload for a
     * pool that kept its order), then search. */
    if (p->health_cursor < p->nhealth && strcmp(p->health_keys[p->health_cursor], key) == 0)
        return p->healths[p->health_cursor++];
    for (uint32_t i = 0; i < p->nhealth; i++) {
        if (strcmp(p->health_keys[i], key) == 0) {
            p->health_cursor = i + 1;
            return p->healths[i];
        }
    }
    p->health_cursor = p->nhealth + 1;
    struct health **nh = realloc(p->healths, (p->nhealth + 1) * sizeof(*nh));
    if (nh == NULL)
        return NULL;
    p->healths = nh;
    char **nk = realloc(p->health_keys, (p->nhealth + 1) * sizeof(*nk));
    if (nk == NULL)
        return NULL;
    p->health_keys = nk;
    struct health *h = calloc(1, sizeof(*h));
    char *k = strdup(key);
    if (h == NULL || k == NULL) {
        free(h);
        free(k);
        return NULL;
    }
    p->healths[p->nhealth] = h;
    p->health_keys[p->nhealth] = k;
    p->nhealth++;
    return h;
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
    s->conf = conf;
    s->generation = old ? old->generation + 1 : 1;
    uint32_t n = conf->npools ? conf->npools : 1;
    s->rings = calloc(n, sizeof(*s->rings));
    s->shared = calloc(n, sizeof(*s->shared));
    s->unix_fds = malloc(n * sizeof(*s->unix_fds));
    s->health = calloc(n, sizeof(*s->health));
    s->prev_rings = calloc(n, sizeof(*s->prev_rings));
    s->warm_until_ms = calloc(n, sizeof(*s->warm_until_ms));
    s->keys_max_over_mean = calloc(n, sizeof(*s->keys_max_over_mean));
    if (s->keys_max_over_mean == NULL ||s->rings == NULL || s->shared == NULL || s->unix_fds == NULL || s->health == NULL ||
        s->prev_rings == NULL || s->warm_until_ms == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < n; i++)
        s->unix_fds[i] = -1;
    for (uint32_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        char rerr[256] = "";
        s->rings[i] = ring_build(cp, rerr, sizeof(rerr));
        if (s->rings[i] == NULL) {
            snprintf(err, errlen, "pool '%s': %s", cp->name, rerr);
            goto fail;
        }
        /* Same placement as before: keep the old ring, its epoch with it. */
        int j = snapshot_pool(old, cp->name, cp->protocol);
        if (j >= 0) {
            struct ring *or = old->rings[j];
            if (or->checksum == s->rings[i]->checksum) {
                ring_unref(s->rings[i]);
                ring_ref(or);
                s->rings[i] = or;
            } else {
                s->rings[i]->epoch = or->epoch + 1;
                if (cp->warmup_s > 0) {   /* route.c asks the protocol what warms */
                    ring_ref(or);
                    s->prev_rings[i] = or;
                    s->warm_until_ms[i] = util_now_ms() + (uint64_t)cp->warmup_s * 1000u;
                }
            }
        }
        s->keys_max_over_mean[i] = proxy_key_skew(s->rings[i]);
        s->shared[i] = proxy_shared(p, cp->name);
        s->health[i] = calloc(cp->nservers ? cp->nservers : 1, sizeof(**s->health));
        if (s->shared[i] == NULL || s->health[i] == NULL) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        for (uint32_t k = 0; k < cp->nservers; k++) {
            s->health[i][k] = proxy_health(p, cp->name, &cp->servers[k]);
            if (s->health[i][k] == NULL) {
                snprintf(err, errlen, "out of memory");
                goto fail;
            }
        }
        if (cp->listen.path == NULL)
            continue;
        /* A unix socket already open for this path is passed on as is. */
        for (uint32_t k = 0; old != NULL && k < old->conf->npools; k++) {
            const struct conf_addr *oa = &old->conf->pools[k].listen;
            if (oa->path != NULL && strcmp(oa->path, cp->listen.path) == 0 && old->unix_fds[k] >= 0) {
                s->unix_fds[i] = dup(old->unix_fds[k]);
                break;
            }
        }
        if (s->unix_fds[i] < 0) {
            char lerr[512] = "";
            s->unix_fds[i] = worker_listen_unix(&cp->listen, cp->backlog > 0 ? cp->backlog : 512,
                                                lerr, sizeof(lerr));
            if (s->unix_fds[i] < 0) {
                snprintf(err, errlen, "pool '%s': %s", cp->name, lerr);
                goto fail;
            }
        }
    }
    return s;
fail:
    snapshot_unref(s);
    return NULL;
}

/* ------------------------------------------------------------------ signals */

static void proxy_reload_ack_cb(uv_async_t *a)
{
    reload_on_ack(a->data);
}

static void proxy_stop(struct proxy *p, int force)
{
    notify_stopping();
    atomic_store(&p->stopping, 1);
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

int proxy_run(struct proxy_options *opt)
{
    struct proxy *p = calloc(1, sizeof(*p));
    char err[1024] = "";
    struct conf *conf = NULL;
    int status = 1;

    if (p == NULL)
        return 1;
    p->opt = *opt;
    p->start_wall_us = util_wall_us();
    uv_mutex_init(&p->snap_mu);
    if (conf_load(opt->conf_path, &conf, err, sizeof(err)) < 0) {
        log_error("configuration: %s", err);
        fprintf(stderr, "ringleader: %s\n", err);
        goto out;
    }
    conf_lint_log(conf);
    p->client_output_limit = conf->global.client_output_limit ? conf->global.client_output_limit
                                                              : 8u << 20;
    /* -v and -o win over ringleader.log_level and ringleader.log_file. */
    if (opt->verbosity < 0)
        log_set_level(conf->global.log_level);
    if (opt->log_file == NULL && conf->global.log_file != NULL &&
        log_init(log_level_current, conf->global.log_file) < 0)
        fprintf(stderr, "ringleader: cannot open log file '%s'\n", conf->global.log_file);
    p->nworkers = opt->workers ? opt->workers
                               : (conf->global.workers ? conf->global.workers : proxy_cpus());
    struct snapshot *snap = proxy_snapshot_build(p, conf, NULL, err, sizeof(err));
    if (snap == NULL) {
        fprintf(stderr, "ringleader: %s\n", err);
        goto out;
    }
    atomic_store(&p->current, snap);
    conf = snap->conf;

    uv_loop_init(&p->loop);
    p->loop.data = p;
    uv_signal_init(&p->loop, &p->sigterm);
    uv_signal_init(&p->loop, &p->sigint);
    uv_signal_init(&p->loop, &p->sighup);
    p->sigterm.data = p->sigint.data = p->sighup.data = p;
    uv_signal_start(&p->sigterm, proxy_signal_cb, SIGTERM);
    uv_signal_start(&p->sigint, proxy_signal_cb, SIGINT);
    uv_signal_start(&p->sighup, proxy_signal_cb, SIGHUP);
    p->signals = signals_start(p);
    p->ops_rate = ops_rate_start(p);
    uv_async_init(&p->loop, &p->reload_async, proxy_reload_ack_cb);
    p->reload_async.data = p;
    reload_init(p, conf->global.watch);
    p->workers = calloc(p->nworkers, sizeof(*p->workers));
    if (p->workers == NULL)
        goto out_snap;
    uint32_t inited = 0;
    for (; inited < p->nworkers; inited++) {
        if (worker_init(&p->workers[inited], p, inited, snap, err, sizeof(err)) < 0) {
            fprintf(stderr, "ringleader: %s\n", err);
            log_error("%s", err);
            inited++;
            goto out_workers;
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
        goto out_workers;
    }

    const struct conf_addr *al = &conf->global.admin_listen;
    if (observe_admin_start(p, al->text, conf->global.admin_token, err, sizeof(err)) < 0) {
        fprintf(stderr, "ringleader: admin endpoint: %s\n", err);
        log_error("admin endpoint: %s", err);
        goto out_workers;
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
            goto out_workers;
        }
    }
    for (uint32_t i = 0; i < conf->npools; i++)
        log_notice("pool '%s' (%s, %s, %u servers) listening on %s", conf->pools[i].name,
                   conf->pools[i].protocol == CONF_PROTO_REDIS ? "redis" : "memcache",
                   dist_name(conf->pools[i].dist), conf->pools[i].nservers,
                   conf->pools[i].listen.text);
    log_notice("ringleader-%s started: %u worker(s), pid %d", PACKAGE_VERSION, p->nworkers,
               (int)getpid());
    notify_ready();

    uv_run(&p->loop, UV_RUN_DEFAULT);

    for (uint32_t i = 0; i < p->nworkers; i++)
        worker_join(&p->workers[i]);
    log_notice("stopped");
    status = 0;
    inited = 0;   /* joined above */

out_workers:
    /* A start-up failure exits the process: workers that were set up but
     * never ran are left to the exit rather than unwound handle by handle. */
    (void)inited;
    uv_close((uv_handle_t *)&p->sigterm, NULL);
    uv_close((uv_handle_t *)&p->sigint, NULL);
    uv_close((uv_handle_t *)&p->sighup, NULL);
    signals_close(p->signals);
    ops_rate_close(p->ops_rate);
    uv_close((uv_handle_t *)&p->reload_async, NULL);
    observe_admin_stop(p);
    observe_stats_close(p);
    reload_close(p);
    uv_run(&p->loop, UV_RUN_DEFAULT);
    uv_loop_close(&p->loop);
    free(p->workers);
    reload_free(p);
    observe_admin_free(p);
out_snap:
    if (p->reload_old != NULL)
        snapshot_unref(p->reload_old);
    snap = atomic_exchange(&p->current, NULL);
    /* the unix sockets we listened on go with us */
    for (uint32_t i = 0; snap != NULL && i < snap->conf->npools; i++)
        if (snap->conf->pools[i].listen.path != NULL && snap->unix_fds[i] >= 0)
            unlink(snap->conf->pools[i].listen.path);
    snapshot_unref(snap);
out:
    for (uint32_t i = 0; i < p->nshared; i++) {
        free(p->shared[i]);
        free(p->shared_names[i]);
    }
    free(p->shared);
    free(p->shared_names);
    for (uint32_t i = 0; i < p->nhealth; i++) {
        free(p->healths[i]);
        free(p->health_keys[i]);
    }
    free(p->healths);
    free(p->health_keys);
    uv_mutex_destroy(&p->snap_mu);
    free(p);
    return status;
}
