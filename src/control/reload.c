/* Hot reload: read and validate a new file, build rings off the workers' loops, publish, report. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "conf/conf_lint.h"
#include "lib/log.h"
#include "control/notify.h"
#include "control/cluster.h"
#include "control/etcd_source.h"
#include "control/sentinel.h"
#include "control/proxy.h"
#include "state/registry.h"
#include "proxy/rejoin.h"
#include "proxy/worker.h"
#include "control/migrate.h"
#include "control/reload.h"
#include "stats/reqlog.h"
#include "control/snapshot_build.h"
#include "placement/ring.h"
#include "lib/util.h"

#define RELOAD_DEBOUNCE_MS 200
#define RELOAD_SAMPLES     200000   /* sampled moved fraction (ketama is exact) */

static const struct conf_pool *find_pool(const struct conf *c, const char *name)
{
    for (uint32_t i = 0; c != NULL && i < c->npools; i++)
        if (strcmp(c->pools[i].name, name) == 0)
            return &c->pools[i];
    return NULL;
}


static int addr_eq(const struct conf_addr *a, const struct conf_addr *b)
{
    if (a->text == NULL || b->text == NULL)
        return a->text == b->text;
    return strcmp(a->text, b->text) == 0;
}

/* Settings a running process cannot take: say so, apply the rest. */
static void reload_restart_needed(const struct conf *o, const struct conf *n, char *out, size_t len)
{
    out[0] = '\0';
    size_t k = 0;
#define NOTE(cond, what)                                                               \
    do {                                                                               \
        if ((cond) && k < len)                                                         \
            k += (size_t)snprintf(out + k, len - k, "%s%s", k ? ", " : "", what);      \
    } while (0)
    NOTE(o->global.workers != n->global.workers, "ringleader.workers");
    NOTE(!addr_eq(&o->global.stats_listen, &n->global.stats_listen), "ringleader.stats_listen");
    NOTE(!addr_eq(&o->global.admin_listen, &n->global.admin_listen), "ringleader.admin");
    NOTE((o->global.admin_token == NULL) != (n->global.admin_token == NULL) ||
         (o->global.admin_token && strcmp(o->global.admin_token, n->global.admin_token)),
         "ringleader.admin_token");
    NOTE((o->global.admin_hosts == NULL) != (n->global.admin_hosts == NULL) ||
         (o->global.admin_hosts && strcmp(o->global.admin_hosts, n->global.admin_hosts)),
         "ringleader.admin_hosts");
    NOTE(o->global.watch != n->global.watch, "ringleader.watch");
    NOTE((o->global.log_file == NULL) != (n->global.log_file == NULL) ||
         (o->global.log_file && strcmp(o->global.log_file, n->global.log_file)),
         "ringleader.log_file");
    NOTE((o->global.rejoin_log == NULL) != (n->global.rejoin_log == NULL) ||
         (o->global.rejoin_log && strcmp(o->global.rejoin_log, n->global.rejoin_log)),
         "ringleader.rejoin_log");
#undef NOTE
}

int reload_run(struct proxy *p, const char *trigger, char *err, size_t errlen)
{
    struct reload *rl = p->reload;
    struct conf *conf = NULL;

    if (rl->old != NULL) {
        /* Workers are still moving to the previous one: run after it. */
        rl->pending = 1;
        snprintf(err, errlen, "a reload is in progress; this one will follow it");
        return 0;
    }
    /* the file, with the pools document of its config_source (etcd_source.c) */
    int rc = etcd_source_conf_load(p, &conf, err, errlen);
    return reload_apply(p, trigger, rc == 0 ? conf : NULL, err, errlen);
}

int reload_apply(struct proxy *p, const char *trigger, struct conf *conf, char *err, size_t errlen)
{
    struct reload *rl = p->reload;
    struct reload_state *rs = &rl->st;
    uint64_t t0 = util_now_us();

    notify_reloading();
    struct snapshot *old = atomic_load(&p->hub.current);
    int rc = conf != NULL ? 0 : -1;
    if (rc == 0 && rejoin_store_check(p->rejoin, conf->global.rejoin_log, err, errlen) < 0) {
        conf_free(conf);        /* not a journal: refused now rather than at the next start */
        rc = -1;
    }
    struct snapshot *snap = NULL;
    if (rc == 0) {
        conf_lint_log(conf);
        snap = snapshot_build(p, conf, old, err, errlen);
    }

    uv_mutex_lock(&rs->mu);
    rs->last_us = util_wall_us();
    snprintf(rs->last_trigger, sizeof(rs->last_trigger), "%s", trigger);
    if (snap == NULL) {
        rs->failed++;
        rs->last_ok = 0;
        snprintf(rs->last_error, sizeof(rs->last_error), "%s", err);
        uv_mutex_unlock(&rs->mu);
        log_error("reload (%s) refused, the running configuration keeps serving: %s", trigger,
                  err);
        notify_ready();
        return -1;
    }

    /* Per-pool report: epochs, checksums, servers in and out, keys moved. */
    const struct conf *oc = old->conf, *nc = snap->conf;
    uint32_t n = 0, cap = oc->npools + nc->npools;
    struct reload_pool_report *rep = calloc(cap ? cap : 1, sizeof(*rep));
    for (uint32_t i = 0; rep != NULL && i < nc->npools; i++) {
        const struct conf_pool *np = &nc->pools[i];
        struct reload_pool_report *r = &rep[n++];
        snprintf(r->name, sizeof(r->name), "%s", np->name);
        r->new_epoch = snap->pools[i].ring->epoch;
        r->new_checksum = snap->pools[i].ring->checksum;
        const struct conf_pool *op = find_pool(oc, np->name);
        const struct ring *or = NULL;
        if (op != NULL && op->protocol == np->protocol)
            or = old->pools[op - oc->pools].ring;
        for (uint32_t s = 0; s < np->nservers; s++)
            r->added += !conf_pool_has_server(or ? op : NULL, &np->servers[s], s);
        if (or == NULL) {
            r->moved = 1.0;
            r->floor = 1.0;
            continue;
        }
        r->old_epoch = or->epoch;
        r->old_checksum = or->checksum;
        for (uint32_t s = 0; s < op->nservers; s++)
            r->removed += !conf_pool_has_server(np, &op->servers[s], s);
        if (or == snap->pools[i].ring)
            continue;   /* unchanged ring: nothing moved */
        atomic_fetch_add(&snap->pools[i].shared->reloads, 1);
        r->moved = ring_moved_fraction(or, snap->pools[i].ring, RELOAD_SAMPLES, &r->floor);
    }
    for (uint32_t i = 0; rep != NULL && i < oc->npools; i++) {
        const struct conf_pool *op = &oc->pools[i];
        const struct conf_pool *np = find_pool(nc, op->name);
        if (np != NULL && np->protocol == op->protocol)
            continue;
        struct reload_pool_report *r = &rep[n++];
        snprintf(r->name, sizeof(r->name), "%s", op->name);
        r->old_epoch = old->pools[i].ring->epoch;
        r->old_checksum = old->pools[i].ring->checksum;
        r->removed = op->nservers;
        r->moved = r->floor = 1.0;
    }
    reload_restart_needed(oc, nc, rs->restart_needed, sizeof(rs->restart_needed));
    free(rs->pools);
    rs->pools = rep;
    rs->npools = rep ? n : 0;
    rs->count++;
    rs->last_ok = 1;
    rs->last_error[0] = '\0';
    uv_mutex_unlock(&rs->mu);

    if (nc->global.client_output_limit)
        atomic_store(&p->hub.client_output_limit, nc->global.client_output_limit);
    migrate_publishing(snap, old);
    reload_publish(p, snap);

    uint64_t built_us = util_now_us() - t0;
    log_notice("reload (%s): new configuration published in %.1f ms", trigger,
               (double)built_us / 1000.0);
    for (uint32_t i = 0; rep != NULL && i < n; i++) {
        struct reload_pool_report *r = &rep[i];
        log_notice("reload: pool '%s' epoch %llu -> %llu, checksum %016llx -> %016llx, "
                   "+%u -%u servers, moved %.4f of the keyspace (floor %.4f)",
                   r->name, (unsigned long long)r->old_epoch, (unsigned long long)r->new_epoch,
                   (unsigned long long)r->old_checksum, (unsigned long long)r->new_checksum,
                   r->added, r->removed, r->moved, r->floor);
    }
    if (rs->restart_needed[0] != '\0')
        log_warn("reload: these settings changed but need a restart to apply: %s",
                 rs->restart_needed);
    return 0;
}

void reload_publish(struct proxy *p, struct snapshot *snap)
{
    struct reload *rl = p->reload;

    /* Every worker switches at its next safe point. The main thread keeps the old
     * snapshot until all have acknowledged. */
    atomic_store(&rl->acks, 0);
    atomic_store(&rl->worker_errors, 0);
    rl->old = atomic_load(&p->hub.current);
    if (reqlog_set_path(p->hub.reqlog, snap->conf->global.request_log.path) < 0)
        log_error("request_log: cannot start its writer thread: not logging");
    uv_mutex_lock(&p->snap_mu);
    atomic_store_explicit(&p->hub.current, snap, memory_order_release);
    uv_mutex_unlock(&p->snap_mu);
    cluster_snapshot_published(p, snap);
    sentinel_snapshot_published(p, snap);
    for (uint32_t i = 0; i < p->nworkers; i++)
        worker_wake(&p->workers[i]);
}

int reload_rebuild(struct proxy *p, char *err, size_t errlen)
{
    if (reload_busy(p))
        return 1;
    struct snapshot *cur = atomic_load(&p->hub.current);
    struct conf *base = conf_base(cur->conf);
    conf_ref(base);
    struct snapshot *snap = snapshot_build(p, base, cur, err, errlen);
    if (snap == NULL)
        return -1;
    for (uint32_t i = 0; i < snap->conf->npools; i++) {
        const struct ring *nr = snap->pools[i].ring;
        int j = snapshot_pool_index(cur, snap->conf->pools[i].name, snap->conf->pools[i].protocol);
        if (snap->pools[i].cluster == NULL || j < 0 || cur->pools[j].ring == nr)
            continue;
        log_notice("pool '%s': slot map changed: epoch %" PRIu64 " -> %" PRIu64 ", checksum %016"
                   PRIx64 " -> %016" PRIx64 ", %u node(s)", snap->conf->pools[i].name,
                   cur->pools[j].ring->epoch, nr->epoch, cur->pools[j].ring->checksum,
                   nr->checksum, snap->conf->pools[i].nservers);
    }
    reload_publish(p, snap);
    return 0;
}

int reload_busy(const struct proxy *p)
{
    return p->reload == NULL || p->reload->old != NULL;
}

/* Every worker runs the published snapshot: the old one can go, and a
 * reload asked meanwhile runs now (main thread, from the ack async). */
static void reload_ack_cb(uv_async_t *a)
{
    struct proxy *p = a->data;
    struct reload *r = p->reload;

    if (r->old == NULL || atomic_load(&r->acks) < p->nworkers)
        return;
    if (atomic_load(&r->worker_errors) > 0)
        log_error("reload: %u worker(s) could not apply every pool (see errors above)",
                  atomic_load(&r->worker_errors));
    snapshot_close_listeners(r->old);
    migrate_adopted(p, atomic_load(&p->hub.current), r->old);
    snapshot_unref(r->old);
    r->old = NULL;
    rejoin_store_prune(p->rejoin, atomic_load(&p->hub.current));   /* removed servers' records */
    if (atomic_load(&p->stopping))
        snapshot_close_listeners(atomic_load(&p->hub.current));
    log_info("reload: every worker runs the new configuration");
    notify_ready();
    if (r->pending) {
        char err[1024];
        r->pending = 0;
        reload_run(p, "queued", err, sizeof(err));
    }
}

void reload_worker_adopted(struct proxy *p, int failed)
{
    struct reload *r = p->reload;

    atomic_fetch_add(&r->acks, 1);
    if (failed)
        atomic_fetch_add(&r->worker_errors, 1);
    uv_async_send(&r->ack_async);
}

/* ------------------------------------------------------------------ POST /reload */

int reload_admin_request(struct proxy *p, struct buf *out)
{
    struct reload *r = p->reload;
    int status;

    uv_mutex_lock(&r->admin_mu);
    while (r->admin_state != RELOAD_ADMIN_IDLE)     /* one request at a time */
        uv_cond_wait(&r->admin_cond, &r->admin_mu);
    r->admin_state = RELOAD_ADMIN_ASKED;
    uv_async_send(&r->admin_async);
    while (r->admin_state != RELOAD_ADMIN_ANSWERED)
        uv_cond_wait(&r->admin_cond, &r->admin_mu);
    status = r->admin_status;
    buf_append_str(out, r->admin_text);
    buf_append_str(out, "\n");
    r->admin_state = RELOAD_ADMIN_IDLE;
    uv_cond_broadcast(&r->admin_cond);
    uv_mutex_unlock(&r->admin_mu);
    return status;
}

/* Answer the waiting request (under admin_mu). */
static void reload_admin_answer(struct reload *r, int status, const char *fmt, const char *arg)
{
    r->admin_status = status;
    snprintf(r->admin_text, sizeof(r->admin_text), fmt, arg);
    r->admin_state = RELOAD_ADMIN_ANSWERED;
    uv_cond_broadcast(&r->admin_cond);
}

static void reload_admin_cb(uv_async_t *a)
{
    struct proxy *p = a->data;
    struct reload *r = p->reload;
    char err[1024] = "";

    uv_mutex_lock(&r->admin_mu);
    int asked = r->admin_state == RELOAD_ADMIN_ASKED;
    uv_mutex_unlock(&r->admin_mu);
    if (!asked)
        return;
    int busy = r->old != NULL;
    int rc = busy ? 0 : reload_run(p, "admin", err, sizeof(err));
    uv_mutex_lock(&r->admin_mu);
    if (busy)
        reload_admin_answer(r, 409, "%s", "a reload is still being applied; try again");
    else if (rc < 0)
        reload_admin_answer(r, 422, "configuration refused, the running one keeps serving: %s",
                            err);
    else
        reload_admin_answer(r, 200, "%s", "reloaded");
    uv_mutex_unlock(&r->admin_mu);
}

/* ------------------------------------------------------------------ file watch */

static void reload_debounce_cb(uv_timer_t *t)
{
    struct proxy *p = t->data;
    char err[1024];
    reload_run(p, "watch", err, sizeof(err));
}

static void reload_watch_cb(uv_fs_event_t *h, const char *filename, int events, int status)
{
    struct proxy *p = h->data;
    struct reload *rs = p->reload;

    (void)events;
    if (status < 0 || (filename != NULL && strcmp(filename, rs->watch_name) != 0))
        return;
    /* Editors write in several steps (truncate, write, rename): wait for quiet. */
    uv_timer_start(&rs->debounce, reload_debounce_cb, RELOAD_DEBOUNCE_MS, 0);
}

int reload_init(struct proxy *p, int watch)
{
    struct reload *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->p = p;
    uv_mutex_init(&r->st.mu);
    uv_mutex_init(&r->admin_mu);
    uv_cond_init(&r->admin_cond);
    p->reload = r;
    uv_async_init(&p->loop, &r->ack_async, reload_ack_cb);
    r->ack_async.data = p;
    uv_async_init(&p->loop, &r->admin_async, reload_admin_cb);
    r->admin_async.data = p;
    uv_timer_init(&p->loop, &r->debounce);
    r->debounce.data = p;
    if (!watch)
        return 0;
    /* Watch the directory, not the file: an atomic rename replaces the
     * inode a file watch would be attached to. */
    char *copy1 = strdup(p->opt.conf_path), *copy2 = strdup(p->opt.conf_path);
    if (copy1 == NULL || copy2 == NULL) {
        free(copy1);
        free(copy2);
        log_error("watch: out of memory; '%s' is not watched", p->opt.conf_path);
        return 0;
    }
    snprintf(r->watch_name, sizeof(r->watch_name), "%s", basename(copy1));
    uv_fs_event_init(&p->loop, &r->watch);
    r->watch.data = p;
    int rc = uv_fs_event_start(&r->watch, reload_watch_cb, dirname(copy2), 0);
    free(copy1);
    free(copy2);
    if (rc < 0) {
        log_error("watch: cannot watch '%s': %s", p->opt.conf_path, uv_strerror(rc));
        uv_close((uv_handle_t *)&r->watch, NULL);
        return 0;
    }
    r->watching = 1;
    log_notice("watching '%s' for changes", p->opt.conf_path);
    return 0;
}

void reload_close(struct proxy *p)
{
    struct reload *r = p->reload;
    if (r == NULL)
        return;
    /* A POST /reload waiting for the main loop would wait forever. */
    uv_mutex_lock(&r->admin_mu);
    if (r->admin_state == RELOAD_ADMIN_ASKED)
        reload_admin_answer(r, 503, "%s", "shutting down");
    uv_mutex_unlock(&r->admin_mu);
    if (r->watching)
        uv_close((uv_handle_t *)&r->watch, NULL);
    uv_close((uv_handle_t *)&r->debounce, NULL);
    uv_close((uv_handle_t *)&r->ack_async, NULL);
    uv_close((uv_handle_t *)&r->admin_async, NULL);
}

void reload_free(struct proxy *p)
{
    struct reload *r = p->reload;
    if (r == NULL)
        return;
    if (r->old != NULL)
        snapshot_unref(r->old);
    uv_mutex_destroy(&r->st.mu);
    uv_mutex_destroy(&r->admin_mu);
    uv_cond_destroy(&r->admin_cond);
    free(r->st.pools);
    free(r);
    p->reload = NULL;
}
