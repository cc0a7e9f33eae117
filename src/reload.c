/* Hot reload: read and validate a new file, build rings off the workers' loops, publish, report. */
#include "config.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "conf_lint.h"
#include "log.h"
#include "notify.h"
#include "proxy/proxy.h"
#include "proxy/worker.h"
#include "reload.h"
#include "ring.h"
#include "util.h"

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
    NOTE(o->global.watch != n->global.watch, "ringleader.watch");
    NOTE((o->global.log_file == NULL) != (n->global.log_file == NULL) ||
         (o->global.log_file && strcmp(o->global.log_file, n->global.log_file)),
         "ringleader.log_file");
#undef NOTE
}

int reload_run(struct proxy *p, const char *trigger, char *err, size_t errlen)
{
    struct reload_state *rs = p->reload;
    struct conf *conf = NULL;
    uint64_t t0 = util_now_us();

    if (p->reload_old != NULL) {
        /* Workers are still moving to the previous one: run after it. */
        p->reload_pending = 1;
        snprintf(err, errlen, "a reload is in progress; this one will follow it");
        return 0;
    }
    notify_reloading();
    struct snapshot *old = atomic_load(&p->current);
    int rc = conf_load(p->opt.conf_path, &conf, err, errlen);
    struct snapshot *snap = NULL;
    if (rc == 0) {
        conf_lint_log(conf);
        snap = proxy_snapshot_build(p, conf, old, err, errlen);
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
        r->new_epoch = snap->rings[i]->epoch;
        r->new_checksum = snap->rings[i]->checksum;
        const struct conf_pool *op = find_pool(oc, np->name);
        const struct ring *or = NULL;
        if (op != NULL && op->protocol == np->protocol)
            or = old->rings[op - oc->pools];
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
        if (or == snap->rings[i])
            continue;   /* unchanged ring: nothing moved */
        atomic_fetch_add(&snap->shared[i]->reloads, 1);
        r->moved = ring_moved_fraction(or, snap->rings[i], RELOAD_SAMPLES, &r->floor);
    }
    for (uint32_t i = 0; rep != NULL && i < oc->npools; i++) {
        const struct conf_pool *op = &oc->pools[i];
        const struct conf_pool *np = find_pool(nc, op->name);
        if (np != NULL && np->protocol == op->protocol)
            continue;
        struct reload_pool_report *r = &rep[n++];
        snprintf(r->name, sizeof(r->name), "%s", op->name);
        r->old_epoch = old->rings[i]->epoch;
        r->old_checksum = old->rings[i]->checksum;
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

    /* Publish: every worker switches at its next safe point. The main
     * thread keeps the old snapshot until all have acknowledged. */
    p->client_output_limit = nc->global.client_output_limit ? nc->global.client_output_limit
                                                            : p->client_output_limit;
    atomic_store(&p->reload_acks, 0);
    atomic_store(&p->reload_worker_errors, 0);
    p->reload_old = old;
    uv_mutex_lock(&p->snap_mu);
    atomic_store_explicit(&p->current, snap, memory_order_release);
    uv_mutex_unlock(&p->snap_mu);
    for (uint32_t i = 0; i < p->nworkers; i++)
        worker_wake(&p->workers[i]);

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

void reload_on_ack(struct proxy *p)
{
    if (p->reload_old == NULL || atomic_load(&p->reload_acks) < p->nworkers)
        return;
    if (atomic_load(&p->reload_worker_errors) > 0)
        log_error("reload: %u worker(s) could not apply every pool (see errors above)",
                  atomic_load(&p->reload_worker_errors));
    snapshot_unref(p->reload_old);
    p->reload_old = NULL;
    log_info("reload: every worker runs the new configuration");
    notify_ready();
    if (p->reload_pending) {
        char err[1024];
        p->reload_pending = 0;
        reload_run(p, "queued", err, sizeof(err));
    }
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
    struct reload_state *rs = p->reload;

    (void)events;
    if (status < 0 || (filename != NULL && strcmp(filename, rs->watch_name) != 0))
        return;
    /* Editors write in several steps (truncate, write, rename): wait for quiet. */
    uv_timer_start(&rs->debounce, reload_debounce_cb, RELOAD_DEBOUNCE_MS, 0);
}

int reload_init(struct proxy *p, int watch)
{
    struct reload_state *rs = calloc(1, sizeof(*rs));
    if (rs == NULL)
        return -ENOMEM;
    uv_mutex_init(&rs->mu);
    p->reload = rs;
    uv_timer_init(&p->loop, &rs->debounce);
    rs->debounce.data = p;
    if (!watch)
        return 0;
    /* Watch the directory, not the file: an atomic rename replaces the
     * inode a file watch would be attached to. */
    char *copy1 = strdup(p->opt.conf_path), *copy2 = strdup(p->opt.conf_path);
    if (copy1 == NULL || copy2 == NULL) {
        free(copy1);
        free(copy2);
        return -ENOMEM;
    }
    snprintf(rs->watch_name, sizeof(rs->watch_name), "%s", basename(copy1));
    uv_fs_event_init(&p->loop, &rs->watch);
    rs->watch.data = p;
    int rc = uv_fs_event_start(&rs->watch, reload_watch_cb, dirname(copy2), 0);
    free(copy1);
    free(copy2);
    if (rc < 0) {
        log_error("watch: cannot watch '%s': %s", p->opt.conf_path, uv_strerror(rc));
        uv_close((uv_handle_t *)&rs->watch, NULL);
        return 0;
    }
    rs->watching = 1;
    log_notice("watching '%s' for changes", p->opt.conf_path);
    return 0;
}

void reload_close(struct proxy *p)
{
    struct reload_state *rs = p->reload;
    if (rs == NULL)
        return;
    if (rs->watching)
        uv_close((uv_handle_t *)&rs->watch, NULL);
    uv_close((uv_handle_t *)&rs->debounce, NULL);
}

void reload_free(struct proxy *p)
{
    struct reload_state *rs = p->reload;
    if (rs == NULL)
        return;
    uv_mutex_destroy(&rs->mu);
    free(rs->pools);
    free(rs);
    p->reload = NULL;
}
