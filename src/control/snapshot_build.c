/* Snapshot builds (main thread): a loaded configuration made into rings, protocols, shared records and listening sockets for every worker. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/cluster.h"
#include "control/sentinel.h"
#include "placement/cluster_map.h"
#include "control/proxy.h"
#include "control/resolve.h"
#include "control/migrate.h"
#include "control/snapshot_build.h"
#include "control/upgrade.h"
#include "lib/util.h"
#include "proto/proto.h"
#include "proxy/listen.h"
#include "proxy/rejoin.h"
#include "proxy/tls.h"
#include "state/health.h"
#include "state/registry.h"

/* The wire protocol of each conf_proto. */
static const struct proto_ops *const build_protocols[] = {
    [CONF_PROTO_MEMCACHE] = &proto_memcache_ops,
    [CONF_PROTO_REDIS] = &proto_redis_ops,
};

/* Keyspace share of the busiest server over the mean share, from the shares
 * the ring measured when it was built, for the stats' skew figure. */
static double build_key_skew(const struct ring *r)
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
static struct health *build_health(struct proxy *p, const struct conf_pool *cp,
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
static int build_pool_ring(struct snapshot_pool *sp, const struct conf *conf,
                           const struct conf_pool *cp, const struct snapshot *old, char *err,
                           size_t errlen)
{
    char rerr[256] = "";
    int j = snapshot_pool_index(old, cp->name, cp->protocol);

    /* A rebuild of the same file (a cluster's slot map changed) keeps every other
     * pool's ring as it is, without building it again. */
    if (j >= 0 && !cp->redis_cluster && cp->sentinel == NULL && !resolve_pool_wanted(conf, cp) &&
        conf_base(old->conf) == conf_base((struct conf *)conf)) {
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
        if (cp->migrate && old->pools[j].prev_ring != NULL) {  /* its migration goes on */
            ring_ref(old->pools[j].prev_ring);
            sp->prev_ring = old->pools[j].prev_ring;
        }
        return 0;
    }
    sp->ring->epoch = or->epoch + 1;
    if (cp->migrate) {          /* migrate.c's previous owners; no warm-up window */
        ring_ref(or);
        sp->prev_ring = or;
        sp->warm_until_ms = 0;
    } else if (cp->warmup_s > 0) {     /* route.c asks the protocol what warms */
        ring_ref(or);
        sp->prev_ring = or;
        sp->warm_until_ms = util_now_ms() + (uint64_t)cp->warmup_s * 1000u;
    }
    return 0;
}

/* The pool's listening sockets: the old snapshot's for an address it
 * already listens on, else new ones. 0, or -errno with err. */
static int build_pool_listen(struct proxy *p, struct snapshot_pool *sp, const struct conf_pool *cp,
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
    /* An upgrade's successor takes the sockets its predecessor listens on: both accept
     * from the same queues until the predecessor lets go (upgrade.c). */
    int rc = upgrade_take_pool(p->inherit, &cp->listen, cp->backlog > 0 ? cp->backlog : 512,
                               p->nworkers, sp->listen_fds, lerr, sizeof(lerr));
    if (rc == 0)
        rc = listen_open(&cp->listen, cp->backlog > 0 ? cp->backlog : 512, p->nworkers,
                         sp->listen_fds, lerr, sizeof(lerr));
    if (rc < 0)
        snprintf(err, errlen, "pool '%s': %s", cp->name, lerr);
    return rc < 0 ? rc : 0;
}

/* The pool's TLS contexts, from its files as they are now. 0, or -1 with
 * err (the reload fails and the running contexts stay). */
static int build_pool_tls(struct snapshot_pool *sp, const struct conf *conf,
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
static struct route_rule *build_pool_rules(const struct conf *conf, const struct conf_pool *cp)
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

struct snapshot *snapshot_build(struct proxy *p, struct conf *conf, const struct snapshot *old,
                                char *err, size_t errlen)
{
    struct snapshot *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        conf_free(conf);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    atomic_init(&s->refs, 1);
    for (uint32_t i = 0; i < conf->npools; i++) {
        if (!conf->pools[i].redis_cluster && conf->pools[i].sentinel == NULL &&
            !resolve_pool_wanted(conf, &conf->pools[i]))
            continue;
        /* the cluster pools' servers are their nodes, a sentinel pool's its master: a
         * derived configuration */
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
        sp->ops = build_protocols[cp->protocol];
        if (build_pool_tls(sp, conf, cp, err, errlen) < 0)    /* the slot map's fetch uses it */
            goto fail;
        if (cp->redis_cluster && cluster_snapshot_pool(p, conf, i, sp, err, errlen) < 0)
            goto fail;
        if (cp->sentinel != NULL && sentinel_snapshot_pool(p, conf, i, sp, err, errlen) < 0)
            goto fail;
        if (resolve_pool_wanted(conf, cp) && resolve_snapshot_pool(p, conf, i, err, errlen) < 0)
            goto fail;
        if (build_pool_ring(sp, conf, cp, old, err, errlen) < 0)
            goto fail;
        if (old == NULL && cp->migrate)     /* a migration a stopped proxy left unfinished */
            sp->prev_ring = migrate_state_ring(conf, cp, sp->ring);
        sp->keys_max_over_mean = build_key_skew(sp->ring);
        sp->shadow = ROUTE_NONE;
        for (uint32_t j = 0; cp->shadow.pool != NULL && j < conf->npools; j++)
            if (j != i && strcmp(conf->pools[j].name, cp->shadow.pool) == 0)
                sp->shadow = j;
        sp->shared = registry_get(p->pools_shared, cp->name, strlen(cp->name));
        sp->health = calloc(cp->nservers ? cp->nservers : 1, sizeof(*sp->health));
        sp->rules = build_pool_rules(conf, cp);
        if (sp->shared == NULL || sp->health == NULL || sp->rules == NULL)
            goto nomem;
        for (uint32_t k = 0; k < cp->nservers; k++)
            if ((sp->health[k] = build_health(p, cp, &cp->servers[k])) == NULL)
                goto nomem;
        if (build_pool_listen(p, sp, cp, old, err, errlen) < 0)
            goto fail;
    }
    /* users: each one's shared numbers and buckets, by name (a reload keeps them) */
    s->users = calloc(conf->global.nusers ? conf->global.nusers : 1, sizeof(*s->users));
    if (s->users == NULL)
        goto nomem;
    for (uint32_t i = 0; i < conf->global.nusers; i++) {
        const char *name = conf->global.users[i].name;
        if ((s->users[i] = registry_get(p->users_shared, name, strlen(name))) == NULL)
            goto nomem;
    }
    return s;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    snapshot_unref(s);
    return NULL;
}
