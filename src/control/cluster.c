/* Redis Cluster pools on the main thread: each pool's slot map, fetched and refreshed (one refresh in flight per pool), published to the workers as a new snapshot. */
#include "config.h"

#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "placement/cluster_map.h"
#include "conf/conf.h"
#include "lib/log.h"
#include "proto/proto.h"
#include "control/cluster.h"
#include "control/cluster_fetch.h"
#include "control/proxy.h"
#include "lib/queue.h"
#include "placement/ring.h"
#include "lib/util.h"

#define CLUSTER_BACKOFF_MIN_MS   100
#define CLUSTER_BACKOFF_MAX_MS   1000
#define CLUSTER_LOADING_MS       1000    /* the periodic refresh while a node is loading */
#define CLUSTER_EVIDENCE_TRIES   5       /* refreshes after a worker's sign of a change that
                                            the first answer did not show yet */
#define CLUSTER_FETCH_MAX_MS     1000    /* one node's answer, at most */
#define CLUSTER_PUBLISH_RETRY_MS 10      /* a reload is being adopted: publish after it */
#define CLUSTER_BUILD_RETRY_MS   1000    /* a snapshot could not be built (no memory) */
#define CLUSTER_SELF_LOG_MS      60000   /* a map naming the proxy: logged once a minute */
#define CLUSTER_SELF_ADDRS       8       /* addresses of one name compared */

struct cluster {
    struct qnode             link;
    struct cluster_registry *reg;
    char                    *name;
    /* from the configuration last built (main thread) */
    char                   **seeds;
    uint32_t                 nseeds;
    char                    *seed_key;      /* the seeds joined: a change drops the map */
    char                    *user, *password;
    uint32_t                 fetch_ms;      /* one node's answer */
    uint32_t                 refresh_s;     /* cluster_refresh */
    /* the map (main thread) */
    struct cluster_map      *map;
    int                      tried_sync;    /* a start-up fetch was made for these seeds */
    char                     last_good[CLUSTER_ADDR_MAX];
    /* refresh (main thread) */
    int                      active;        /* a pool of the current snapshot */
    struct cluster_fetch    *fetch;
    char                   **cand;          /* this round's addresses, in order */
    uint32_t                 ncand, cand_i;
    uv_timer_t               timer;
    int                      timer_open;
    uint64_t                 due_ms;        /* the timer's due time (0: not armed) */
    uint64_t                 last_start_ms;
    uint32_t                 backoff_ms;
    int                      again;         /* asked while a refresh was in flight */
    uint32_t                 evidence;      /* a worker saw the map change (MOVED, a node
                                               failing, a sunsubscribe ...): refreshes left
                                               while answers still show the old map */
    int                      skip_last;     /* the next round asks another node first */
    uint64_t                 self_logged_ms;/* when a map naming the proxy was last logged */
    uint64_t                 fail_logged_ms;/* when a failed round was last logged (0: none
                                               since the last map) */
    uint32_t                 fail_rounds;   /* failed rounds not logged yet */
    /* any thread */
    atomic_int               wanted;
    atomic_uint_fast64_t     requested[CLUSTER_WHY_COUNT];
    uv_mutex_t               mu;            /* st */
    struct cluster_stats     st;
};

struct cluster_registry {
    struct proxy *p;
    cluster_rebuild_fn rebuild;             /* the owner's: build and publish a snapshot */
    struct qnode  clusters;
    uv_async_t    async;                    /* workers: a refresh is wanted */
    uv_timer_t    publish_timer;
    int           open;                     /* the handles exist (main loop) */
    int           publish_pending;
    int           publishing;               /* a map of ours is being published (not a reload) */
};

static void cluster_start_round(struct cluster *cl);
static void cluster_note_error(struct cluster *cl, const char *err);
static void cluster_schedule(struct cluster *cl);
static void cluster_publish_timer_cb(uv_timer_t *t);

/* ------------------------------------------------------------------ records */

static void cluster_strv_free(char **v, uint32_t n)
{
    for (uint32_t i = 0; v != NULL && i < n; i++)
        free(v[i]);
    free(v);
}

static struct cluster *cluster_find(struct cluster_registry *reg, const char *name)
{
    struct qnode *n;
    QUEUE_FOREACH(n, &reg->clusters) {
        struct cluster *cl = QUEUE_DATA(n, struct cluster, link);
        if (strcmp(cl->name, name) == 0)
            return cl;
    }
    return NULL;
}

static void cluster_timer_cb(uv_timer_t *t);

static struct cluster *cluster_get(struct cluster_registry *reg, const char *name)
{
    struct cluster *cl = cluster_find(reg, name);
    if (cl != NULL)
        return cl;
    cl = calloc(1, sizeof(*cl));
    if (cl == NULL || (cl->name = strdup(name)) == NULL) {
        free(cl);
        return NULL;
    }
    cl->reg = reg;
    cl->backoff_ms = CLUSTER_BACKOFF_MIN_MS;
    cl->st.state_ok = -1;
    uv_mutex_init(&cl->mu);
    if (reg->open) {
        uv_timer_init(&reg->p->loop, &cl->timer);
        cl->timer.data = cl;
        cl->timer_open = 1;
    }
    queue_insert_tail(&reg->clusters, &cl->link);
    return cl;
}

/* The seeds and hello of pool cp (its servers are the seeds at this point). Returns 1
 * when the seeds changed (the map is then dropped), 0, or -1 without memory. */
static int cluster_configure(struct cluster *cl, const struct conf_pool *cp)
{
    size_t keylen = 1;
    for (uint32_t i = 0; i < cp->nservers; i++)
        keylen += strlen(cp->servers[i].addr.text) + 1;
    char *key = malloc(keylen);
    char **seeds = calloc(cp->nservers ? cp->nservers : 1, sizeof(*seeds));
    char *user = cp->redis_username ? strdup(cp->redis_username) : NULL;
    char *pw = cp->redis_auth ? strdup(cp->redis_auth) : NULL;
    if (key == NULL || seeds == NULL || (cp->redis_username && user == NULL) ||
        (cp->redis_auth && pw == NULL))
        goto nomem;
    key[0] = '\0';
    for (uint32_t i = 0; i < cp->nservers; i++) {
        strcat(key, cp->servers[i].addr.text);
        strcat(key, " ");
        if ((seeds[i] = strdup(cp->servers[i].addr.text)) == NULL) {
            cluster_strv_free(seeds, i);
            seeds = NULL;
            goto nomem;
        }
    }
    int changed = cl->seed_key == NULL || strcmp(cl->seed_key, key) != 0;
    cluster_strv_free(cl->seeds, cl->nseeds);
    free(cl->seed_key);
    free(cl->user);
    free(cl->password);
    cl->seeds = seeds;
    cl->nseeds = cp->nservers;
    cl->seed_key = key;
    cl->user = user;
    cl->password = pw;
    uint32_t t = cp->timeout_ms > 0 ? (uint32_t)cp->timeout_ms : CLUSTER_FETCH_MAX_MS;
    cl->fetch_ms = RL_MIN(t, (uint32_t)CLUSTER_FETCH_MAX_MS);
    cl->refresh_s = cp->cluster_refresh_s;
    if (changed) {
        /* a fetch from the old seeds' cluster must not bring its map back */
        cluster_fetch_cancel(cl->fetch);
        cl->fetch = NULL;
        cluster_strv_free(cl->cand, cl->ncand);
        cl->cand = NULL;
        cl->ncand = cl->cand_i = 0;
        cluster_map_free(cl->map);
        cl->map = NULL;
        cl->tried_sync = 0;
        cl->last_good[0] = '\0';
    }
    return changed;
nomem:
    free(key);
    free(seeds);
    free(user);
    free(pw);
    return -1;
}

static void cluster_hello(const struct cluster *cl, struct proto_hello *h)
{
    memset(h, 0, sizeof(*h));
    h->username = cl->user;
    h->password = cl->password;
}

/* ------------------------------------------------------------------ the proxy itself */

/*
 * A slot map (or a seed) that names one of the proxy's own listening sockets would make
 * the proxy its own node: each request sent there comes back as a client's, is routed by
 * the same map, and goes round without end (a misconfigured or hostile node can announce
 * any address). Such an address is never dialled: a map naming it is refused as a failed
 * fetch, a seed naming it fails the configuration.
 */

/* An IP address, v4-mapped v6 folded to v4, to compare. */
struct cluster_ip {
    int           family;         /* AF_INET, AF_INET6 */
    unsigned char a[16];
};

static void cluster_ip_from_sa(const struct sockaddr *sa, struct cluster_ip *ip)
{
    memset(ip, 0, sizeof(*ip));
    if (sa->sa_family == AF_INET) {
        ip->family = AF_INET;
        memcpy(ip->a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a6)) {
            ip->family = AF_INET;
            memcpy(ip->a, &a6->s6_addr[12], 4);
        } else {
            ip->family = AF_INET6;
            memcpy(ip->a, a6, 16);
        }
    }
}

/* The addresses of host (an IP literal, or a name resolved now: the caller asks only
 * for hosts sharing a port with a listener). Returns how many (0: none). */
static int cluster_resolve(const char *host, struct cluster_ip *out, int max)
{
    struct addrinfo hints, *res = NULL, *ai;
    int n = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST;
    if (getaddrinfo(host, NULL, &hints, &res) != 0) {
        hints.ai_flags = 0;
        if (getaddrinfo(host, NULL, &hints, &res) != 0)
            return 0;
    }
    for (ai = res; ai != NULL && n < max; ai = ai->ai_next)
        if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6)
            cluster_ip_from_sa(ai->ai_addr, &out[n++]);
    freeaddrinfo(res);
    return n;
}

static int cluster_ip_unspecified(const struct cluster_ip *ip)
{
    static const unsigned char zero[16];
    return memcmp(ip->a, zero, ip->family == AF_INET ? 4 : 16) == 0;
}

/* Whether a connection to ip stays on this host: loopback (all of 127.0.0.0/8 reaches
 * the loopback interface), the unspecified address, or an address of an interface. */
static int cluster_ip_local(const struct cluster_ip *ip)
{
    struct ifaddrs *ifs = NULL, *i;
    int local = 0;

    if (cluster_ip_unspecified(ip) || (ip->family == AF_INET && ip->a[0] == 127) ||
        (ip->family == AF_INET6 && IN6_IS_ADDR_LOOPBACK((const struct in6_addr *)ip->a)))
        return 1;
    if (getifaddrs(&ifs) != 0)
        return 0;
    for (i = ifs; i != NULL && !local; i = i->ifa_next) {
        struct cluster_ip a;
        if (i->ifa_addr == NULL ||
            (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
            continue;
        cluster_ip_from_sa(i->ifa_addr, &a);
        local = a.family == ip->family && memcmp(a.a, ip->a, a.family == AF_INET ? 4 : 16) == 0;
    }
    freeifaddrs(ifs);
    return local;
}

/* Whether the listener lhost:port takes a connection to the node host's addresses
 * (node, *nn of them, resolved on first need: *nn < 0 until then). */
static int cluster_listener_takes(const char *lhost, const char *host, struct cluster_ip *node,
                                  int *nn)
{
    struct cluster_ip l[CLUSTER_SELF_ADDRS];
    int nl;

    if (strcasecmp(lhost, host) == 0)
        return 1;
    if (*nn < 0)
        *nn = cluster_resolve(host, node, CLUSTER_SELF_ADDRS);
    nl = cluster_resolve(lhost, l, CLUSTER_SELF_ADDRS);
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < *nn; j++) {
            if (cluster_ip_unspecified(&l[i])) {
                /* a wildcard listener takes every local address (a v6 one the v4 ones
                 * too, unless v6only: taken as yes, the safe side) */
                if ((l[i].family == AF_INET6 || node[j].family == AF_INET) &&
                    cluster_ip_local(&node[j]))
                    return 1;
            } else if (l[i].family == node[j].family &&
                       memcmp(l[i].a, node[j].a, l[i].family == AF_INET ? 4 : 16) == 0) {
                return 1;
            }
        }
    return 0;
}

/*
 * Whether host:port is one of the proxy's own listening sockets under conf: a pool's
 * `listen`, the admin port, the stats port. With the listener's address into `which`
 * ("pool 'x' 127.0.0.1:22121"). Names are resolved only for a listener's port.
 */
static int cluster_is_self(const struct proxy *p, const struct conf *conf, const char *host,
                           uint16_t port, char *which, size_t wlen)
{
    struct cluster_ip node[CLUSTER_SELF_ADDRS];
    int nn = -1;
    const struct conf_addr *sl = &conf->global.stats_listen, *al = &conf->global.admin_listen;
    const char *shost = p->opt.stats_addr ? p->opt.stats_addr : (sl->host ? sl->host : "127.0.0.1");
    int sport = p->opt.stats_port ? p->opt.stats_port : (sl->port ? sl->port : 22222);

    for (uint32_t i = 0; i < conf->npools; i++) {
        const struct conf_addr *la = &conf->pools[i].listen;
        if (la->host != NULL && la->port == port &&
            cluster_listener_takes(la->host, host, node, &nn)) {
            snprintf(which, wlen, "pool '%s' listen %s", conf->pools[i].name, la->text);
            return 1;
        }
    }
    if (al->text != NULL && al->host != NULL && al->port == port &&
        cluster_listener_takes(al->host, host, node, &nn)) {
        snprintf(which, wlen, "the admin port %s", al->text);
        return 1;
    }
    if (sport == port && cluster_listener_takes(shost, host, node, &nn)) {
        snprintf(which, wlen, "the stats port %s:%d", shost, sport);
        return 1;
    }
    return 0;
}

/* The first node of m that is the proxy itself (CLUSTER_NONE: none), with the reason
 * into err. */
static uint32_t cluster_map_self(const struct cluster *cl, const struct conf *conf,
                                 const struct cluster_map *m, char *err, size_t errlen)
{
    char which[200];
    for (uint32_t i = 0; i < m->nnodes; i++)
        if (cluster_is_self(cl->reg->p, conf, m->nodes[i].host, m->nodes[i].port, which,
                            sizeof(which))) {
            snprintf(err, errlen, "the slot map names node %.200s, which is this proxy (%.150s): "
                     "map refused", m->nodes[i].addr, which);
            return i;
        }
    return CLUSTER_NONE;
}

/* A map naming the proxy was refused: counted (cluster_refresh_errors, the reason in
 * cluster_refresh_error), logged at most once a minute per pool. */
static void cluster_note_self(struct cluster *cl, const char *from, const char *err)
{
    uint64_t now = util_now_ms() + 1;     /* 0 means never: the first is logged */
    cluster_note_error(cl, err);
    if (cl->self_logged_ms == 0 || now - cl->self_logged_ms >= CLUSTER_SELF_LOG_MS) {
        cl->self_logged_ms = now;
        log_warn("pool '%s': slot map from %s: %s (a node announcing this proxy's address "
                 "would make it send requests to itself; logged once a minute)", cl->name,
                 from, err);
    }
}

/* ------------------------------------------------------------------ stats */

static void cluster_note_map(struct cluster *cl, const struct cluster_map *m, const char *from,
                             int changed)
{
    uv_mutex_lock(&cl->mu);
    cl->st.refreshes++;
    cl->st.map_changes += changed;
    cl->st.last_refresh_us = util_wall_us();
    cl->st.current_epoch = m->current_epoch;
    cl->st.state_ok = m->state_ok;
    cl->st.last_error[0] = '\0';
    snprintf(cl->st.last_node, sizeof(cl->st.last_node), "%s", from);
    uv_mutex_unlock(&cl->mu);
}

static void cluster_note_error(struct cluster *cl, const char *err)
{
    uv_mutex_lock(&cl->mu);
    cl->st.refresh_errors++;
    snprintf(cl->st.last_error, sizeof(cl->st.last_error), "%.255s", err);
    uv_mutex_unlock(&cl->mu);
}

void cluster_stats_read(struct cluster *cl, struct cluster_stats *out)
{
    uv_mutex_lock(&cl->mu);
    *out = cl->st;
    uv_mutex_unlock(&cl->mu);
    for (int i = 0; i < CLUSTER_WHY_COUNT; i++)
        out->requested[i] = atomic_load_explicit(&cl->requested[i], memory_order_relaxed);
}

uint64_t cluster_checksum(const struct cluster *cl)
{
    return cl->map != NULL ? cl->map->checksum : 0;
}

/* ------------------------------------------------------------------ snapshot build */

/* The pool's servers for map m: its nodes in map order, zones by cluster_zones (or the
 * seed at that address); the slot map with unserved slots on node 0 (which answers
 * CLUSTERDOWN, or MOVED when it knows better). */
static int cluster_servers(const struct conf_pool *cp, const struct cluster_map *m,
                           struct conf_server **out, uint32_t **slot_map, char *err,
                           size_t errlen)
{
    struct conf_server *sv = calloc(m->nnodes, sizeof(*sv));
    uint32_t *sm = malloc(CLUSTER_SLOTS * sizeof(*sm));
    if (sv == NULL || sm == NULL)
        goto nomem;
    for (uint32_t i = 0; i < m->nnodes; i++) {
        const struct cluster_node *n = &m->nodes[i];
        char aerr[256];
        if (conf_server_init(&sv[i], n->addr, conf_zone_match(cp, n->host, n->port), aerr,
                             sizeof(aerr)) < 0) {
            for (uint32_t k = 0; k < i; k++)
                conf_server_free(&sv[k]);
            free(sv);
            free(sm);
            snprintf(err, errlen, "pool '%s': cluster node %s: %s", cp->name, n->addr, aerr);
            return -1;
        }
    }
    for (uint32_t s = 0; s < CLUSTER_SLOTS; s++)
        sm[s] = m->owner[s] == CLUSTER_NONE ? 0 : m->owner[s];
    *out = sv;
    *slot_map = sm;
    return 0;
nomem:
    free(sv);
    free(sm);
    snprintf(err, errlen, "out of memory");
    return -1;
}

int cluster_snapshot_pool(struct proxy *p, struct conf *conf, uint32_t pool,
                          struct snapshot_pool *sp, char *err, size_t errlen)
{
    struct conf_pool *cp = &conf->pools[pool];
    struct cluster *cl = cluster_get(p->clusters, cp->name);

    /* before the record takes these seeds: a refused configuration leaves it as it was */
    for (uint32_t i = 0; i < cp->nservers; i++) {
        char which[200];
        if (cp->servers[i].addr.host != NULL &&
            cluster_is_self(p, conf, cp->servers[i].addr.host, cp->servers[i].addr.port, which,
                            sizeof(which))) {
            snprintf(err, errlen, "pool '%s': seed %s is this proxy itself (%s): a cluster "
                     "pool's seeds must be the cluster's nodes", cp->name,
                     cp->servers[i].addr.text, which);
            return -1;
        }
    }
    if (cl == NULL || cluster_configure(cl, cp) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (cl->map == NULL && !cl->tried_sync) {
        /* the first map of these seeds: now, so that the first request routes right */
        struct proto_hello h;
        struct cluster_map *m = NULL;
        char ferr[512];
        uint32_t from = 0;
        struct cluster_fetch_tls tls = { sp->server_tls,
                                         cp->server_tls ? cp->server_tls->server_name : NULL };
        cluster_hello(cl, &h);
        cl->tried_sync = 1;
        if (cluster_fetch_sync(sp->ops, &h, &tls, (const char *const *)cl->seeds, cl->nseeds,
                               cl->fetch_ms, &m, &from, ferr, sizeof(ferr)) == 0 &&
            cluster_map_self(cl, conf, m, ferr, sizeof(ferr)) != CLUSTER_NONE) {
            cluster_map_free(m);
            cluster_note_self(cl, cl->seeds[from], ferr);
            log_warn("pool '%s': the seeds serve as nodes until a refresh brings a map "
                     "without this proxy in it", cp->name);
        } else if (m != NULL) {
            cl->map = m;
            snprintf(cl->last_good, sizeof(cl->last_good), "%s", cl->seeds[from]);
            cluster_note_map(cl, m, cl->seeds[from], 1);
            log_notice("pool '%s': slot map from %s: %u node(s), checksum %016" PRIx64
                       ", cluster epoch %" PRIu64 "%s", cp->name, cl->seeds[from], m->nnodes,
                       m->checksum, m->current_epoch, m->state_ok == 0 ? ", cluster_state:fail" : "");
        } else {
            cluster_note_error(cl, ferr);
            log_warn("pool '%s': no seed gave a slot map (%s); the seeds serve as nodes "
                     "until a refresh succeeds", cp->name, ferr);
        }
    }
    if (cl->map != NULL) {
        /* a reload may have added a listener at one of the map's nodes */
        char serr[512];
        if (cluster_map_self(cl, conf, cl->map, serr, sizeof(serr)) != CLUSTER_NONE) {
            cluster_note_self(cl, "the map in use", serr);
            cluster_map_free(cl->map);
            cl->map = NULL;
            cl->last_good[0] = '\0';
        }
    }
    sp->cluster = cl;
    if (cl->map == NULL) {
        sp->cview = cluster_view_build(NULL, cp->nservers);
        if (sp->cview == NULL)
            goto nomem;
        return 0;
    }
    struct conf_server *servers;
    uint32_t *slot_map;
    if (cluster_servers(cp, cl->map, &servers, &slot_map, err, errlen) < 0)
        return -1;
    conf_derive_servers(conf, pool, servers, cl->map->nnodes, slot_map);
    sp->cview = cluster_view_build(cl->map, 0);
    if (sp->cview == NULL)
        goto nomem;
    return 0;
nomem:
    snprintf(err, errlen, "out of memory");
    return -1;
}

/* ------------------------------------------------------------------ publish */

/* Have a snapshot of the configuration in effect built with every cluster's current map
 * and published (through the owner's rebuild: after the publish in progress, if any). */
static void cluster_publish(struct cluster_registry *reg)
{
    struct proxy *p = reg->p;
    char err[1024] = "";
    int rc = 1;

    if (!atomic_load(&p->stopping)) {
        reg->publishing = 1;
        rc = reg->rebuild(p, err, sizeof(err));
        reg->publishing = 0;
    }
    reg->publish_pending = rc != 0;
    if (rc < 0)
        log_error("cluster slot map not published: %s (retrying)", err);
    if (rc != 0 && reg->open && !atomic_load(&p->stopping))
        uv_timer_start(&reg->publish_timer, cluster_publish_timer_cb,
                       rc > 0 ? CLUSTER_PUBLISH_RETRY_MS : CLUSTER_BUILD_RETRY_MS, 0);
}

static void cluster_publish_timer_cb(uv_timer_t *t)
{
    struct cluster_registry *reg = t->data;
    if (reg->publish_pending)
        cluster_publish(reg);       /* re-arms the timer itself when it must wait again */
}

/* ------------------------------------------------------------------ refresh */

/* Arm the refresh timer for at (monotonic ms, the loop's clock) unless it is due sooner. */
static void cluster_arm(struct cluster *cl, uint64_t at)
{
    uint64_t now = uv_now(&cl->reg->p->loop);
    if (!cl->timer_open || (cl->due_ms != 0 && cl->due_ms <= at))
        return;
    cl->due_ms = at;
    uv_timer_start(&cl->timer, cluster_timer_cb, at > now ? at - now : 0, 0);
}

/* The periodic refresh after the last one: every cluster_refresh seconds, every second
 * while the map has a node loading (a replica that has just synced is "loading" in
 * CLUSTER SHARDS until the cluster bus carries a replication offset for it: reads with
 * read_from would wait for the next period to reach it). */
static void cluster_arm_periodic(struct cluster *cl)
{
    uint64_t every = (uint64_t)cl->refresh_s * 1000u;

    for (uint32_t i = 0; cl->map != NULL && i < cl->map->nnodes; i++)
        if (cl->map->nodes[i].health == CLUSTER_LOADING) {
            every = every > 0 ? RL_MIN(every, (uint64_t)CLUSTER_LOADING_MS) : CLUSTER_LOADING_MS;
            break;
        }
    if (every > 0)
        cluster_arm(cl, cl->last_start_ms + every);
}

/* A refresh now if the back-off allows, else when it does. */
static void cluster_schedule(struct cluster *cl)
{
    if (!cl->active || atomic_load(&cl->reg->p->stopping))
        return;
    if (cl->fetch != NULL) {
        cl->again = 1;
        return;
    }
    uint64_t now = uv_now(&cl->reg->p->loop);
    uint64_t earliest = cl->last_start_ms ? cl->last_start_ms + cl->backoff_ms : now;
    if (earliest <= now) {
        cluster_start_round(cl);
        return;
    }
    cluster_arm(cl, earliest);
}

static void cluster_timer_cb(uv_timer_t *t)
{
    struct cluster *cl = t->data;
    cl->due_ms = 0;
    if (cl->fetch != NULL)
        cl->again = 1;
    else if (cl->active && !atomic_load(&cl->reg->p->stopping))
        cluster_start_round(cl);
}

static int cluster_cand_has(const struct cluster *cl, const char *addr)
{
    for (uint32_t i = 0; i < cl->ncand; i++)
        if (strcmp(cl->cand[i], addr) == 0)
            return 1;
    return 0;
}

static void cluster_cand_add(struct cluster *cl, const char *addr, uint32_t cap)
{
    if (cl->ncand < cap && addr[0] != '\0' && !cluster_cand_has(cl, addr)) {
        char *a = strdup(addr);
        if (a != NULL)
            cl->cand[cl->ncand++] = a;
    }
}

/* Who to ask, in order: the node that answered last, the map's online masters, its
 * online replicas, the seeds, then the nodes the map says failed. */
static void cluster_candidates(struct cluster *cl)
{
    uint32_t cap = (cl->map ? cl->map->nnodes : 0) + cl->nseeds + 1;
    cluster_strv_free(cl->cand, cl->ncand);
    cl->ncand = cl->cand_i = 0;
    cl->cand = calloc(cap, sizeof(*cl->cand));
    if (cl->cand == NULL)
        return;
    if (!cl->skip_last)     /* else the node that answered last, still with the old map,
                               comes in its place in the order below */
        cluster_cand_add(cl, cl->last_good, cap);
    cl->skip_last = 0;
    for (int pass = 0; pass < 2 && cl->map != NULL; pass++)
        for (uint32_t i = 0; i < cl->map->nnodes; i++) {
            const struct cluster_node *n = &cl->map->nodes[i];
            if (n->health == CLUSTER_ONLINE && n->role == (pass == 0 ? CLUSTER_MASTER : CLUSTER_REPLICA))
                cluster_cand_add(cl, n->addr, cap);
        }
    for (uint32_t i = 0; i < cl->nseeds; i++)
        cluster_cand_add(cl, cl->seeds[i], cap);
    for (uint32_t i = 0; cl->map != NULL && i < cl->map->nnodes; i++)
        cluster_cand_add(cl, cl->map->nodes[i].addr, cap);
}

static void cluster_fetched(void *arg, struct cluster_map *m, const char *err);

/* Ask the round's next candidate; at the end of the candidates the round failed. */
static void cluster_ask_next(struct cluster *cl)
{
    struct proxy *p = cl->reg->p;
    struct proto_hello h;
    const struct snapshot *cur = atomic_load(&p->hub.current);
    const struct proto_ops *ops = NULL;
    struct cluster_fetch_tls tls = { NULL, NULL };

    for (uint32_t i = 0; cur != NULL && i < cur->conf->npools; i++)
        if (strcmp(cur->conf->pools[i].name, cl->name) == 0) {
            const struct conf_tls *ct = cur->conf->pools[i].server_tls;
            ops = cur->pools[i].ops;
            tls.ctx = cur->pools[i].server_tls;     /* the SSL holds its own reference */
            tls.server_name = ct != NULL ? ct->server_name : NULL;
        }
    cluster_hello(cl, &h);
    while (ops != NULL && cl->cand_i < cl->ncand) {
        struct conf_addr a;
        char aerr[256];
        const char *addr = cl->cand[cl->cand_i];
        if (conf_parse_addr(addr, &a, aerr, sizeof(aerr)) == 0 && a.host != NULL) {
            cl->fetch = cluster_fetch_start(&p->loop, ops, &h, &tls, a.host, a.port, cl->fetch_ms,
                                            cluster_fetched, cl);
            conf_addr_free(&a);
            if (cl->fetch != NULL)
                return;
        } else {
            conf_addr_free(&a);
        }
        cl->cand_i++;
    }
    /* every node and seed failed: ask again when something asks for it, or periodically */
    cl->backoff_ms = RL_MIN(cl->backoff_ms * 2, (uint32_t)CLUSTER_BACKOFF_MAX_MS);
    /* a cluster that stays unreachable (or keeps naming the proxy) while clients keep
     * asking fails a round a second: one line a minute, with the count */
    uint64_t now = util_now_ms() + 1;
    cl->fail_rounds++;
    if (cl->fail_logged_ms == 0 || now - cl->fail_logged_ms >= CLUSTER_SELF_LOG_MS) {
        log_warn("pool '%s': slot map refresh failed: no node or seed gave a usable map "
                 "(%u round(s) since the last such line; logged at most once a minute)",
                 cl->name, cl->fail_rounds);
        cl->fail_logged_ms = now;
        cl->fail_rounds = 0;
    }
    if (cl->again) {
        cl->again = 0;
        cluster_schedule(cl);
    } else {
        cluster_arm_periodic(cl);
    }
}

static void cluster_start_round(struct cluster *cl)
{
    cl->last_start_ms = uv_now(&cl->reg->p->loop);
    cl->again = 0;
    cluster_candidates(cl);
    cluster_ask_next(cl);
}

static void cluster_fetched(void *arg, struct cluster_map *m, const char *err)
{
    struct cluster *cl = arg;
    const char *from = cl->cand_i < cl->ncand ? cl->cand[cl->cand_i] : "?";

    cl->fetch = NULL;
    if (m == NULL) {
        log_info("pool '%s': slot map from %s: %s", cl->name, from, err ? err : "failed");
        cluster_note_error(cl, err ? err : "failed");
        cl->cand_i++;
        cluster_ask_next(cl);
        return;
    }
    const struct snapshot *cur = atomic_load(&cl->reg->p->hub.current);
    char serr[512];
    if (cur != NULL && cluster_map_self(cl, cur->conf, m, serr, sizeof(serr)) != CLUSTER_NONE) {
        /* never dialled: as a fetch that failed, the next candidate is asked */
        cluster_map_free(m);
        cluster_note_self(cl, from, serr);
        cl->cand_i++;
        cluster_ask_next(cl);
        return;
    }
    cl->fail_logged_ms = 0;
    cl->fail_rounds = 0;
    int changed = cl->map == NULL || cl->map->checksum != m->checksum;
    snprintf(cl->last_good, sizeof(cl->last_good), "%s", from);
    cluster_note_map(cl, m, from, changed);
    if (changed) {
        cluster_map_free(cl->map);
        cl->map = m;
        cl->backoff_ms = CLUSTER_BACKOFF_MIN_MS;
        cl->evidence = 0;
        cluster_publish(cl->reg);
    } else {
        /* a worker saw a change this node does not show yet (the node asked may learn of
         * a slot's move after the node that answered MOVED): ask again, another first */
        if (cl->evidence > 0) {
            cl->evidence--;
            cl->again = 1;
            cl->skip_last = 1;
        }
        if (cl->map->current_epoch != m->current_epoch || cl->map->state_ok != m->state_ok) {
            cl->map->current_epoch = m->current_epoch;
            cl->map->state_ok = m->state_ok;
        }
        cluster_map_free(m);
        cl->backoff_ms = RL_MIN(cl->backoff_ms * 2, (uint32_t)CLUSTER_BACKOFF_MAX_MS);
    }
    if (cl->again) {
        cl->again = 0;
        cluster_schedule(cl);
    } else {
        cluster_arm_periodic(cl);
    }
}

void cluster_refresh_request(struct cluster *cl, enum cluster_why why)
{
    atomic_fetch_add_explicit(&cl->requested[why], 1, memory_order_relaxed);
    if (atomic_exchange_explicit(&cl->wanted, 1, memory_order_acq_rel) == 0 && cl->reg->open)
        uv_async_send(&cl->reg->async);
}

static void cluster_async_cb(uv_async_t *a)
{
    struct cluster_registry *reg = a->data;
    struct qnode *n;
    QUEUE_FOREACH(n, &reg->clusters) {
        struct cluster *cl = QUEUE_DATA(n, struct cluster, link);
        if (atomic_exchange_explicit(&cl->wanted, 0, memory_order_acq_rel)) {
            cl->evidence = CLUSTER_EVIDENCE_TRIES;
            cluster_schedule(cl);
        }
    }
}

void cluster_snapshot_published(struct proxy *p, const struct snapshot *snap)
{
    struct cluster_registry *reg = p->clusters;
    struct qnode *n;

    if (reg == NULL)
        return;
    QUEUE_FOREACH(n, &reg->clusters) {
        struct cluster *cl = QUEUE_DATA(n, struct cluster, link);
        int active = 0;
        for (uint32_t i = 0; i < snap->conf->npools; i++)
            active |= snap->pools[i].cluster == cl;
        if (active && reg->open && (!cl->active || !reg->publishing)) {
            cl->active = 1;
            cluster_schedule(cl);       /* fetched at start and on every reload */
        } else if (!active && cl->active) {
            cl->active = 0;
            cluster_fetch_cancel(cl->fetch);
            cl->fetch = NULL;
            if (cl->timer_open)
                uv_timer_stop(&cl->timer);
            cl->due_ms = 0;
        }
    }
}

/* ------------------------------------------------------------------ registry */

int cluster_registry_init(struct proxy *p, cluster_rebuild_fn rebuild)
{
    struct cluster_registry *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return -ENOMEM;
    reg->p = p;
    reg->rebuild = rebuild;
    queue_init(&reg->clusters);
    p->clusters = reg;
    return 0;
}

void cluster_registry_start(struct proxy *p)
{
    struct cluster_registry *reg = p->clusters;
    struct qnode *n;

    uv_async_init(&p->loop, &reg->async, cluster_async_cb);
    reg->async.data = reg;
    uv_timer_init(&p->loop, &reg->publish_timer);
    reg->publish_timer.data = reg;
    reg->open = 1;
    QUEUE_FOREACH(n, &reg->clusters) {
        struct cluster *cl = QUEUE_DATA(n, struct cluster, link);
        uv_timer_init(&p->loop, &cl->timer);
        cl->timer.data = cl;
        cl->timer_open = 1;
        cl->last_start_ms = uv_now(&p->loop);   /* the start-up fetch was the first round */
    }
    cluster_snapshot_published(p, atomic_load(&p->hub.current));
    QUEUE_FOREACH(n, &reg->clusters) {
        struct cluster *cl = QUEUE_DATA(n, struct cluster, link);
        if (cl->active && cl->map != NULL)
            cluster_arm_periodic(cl);
    }
}

void cluster_registry_close(struct proxy *p)
{
    struct cluster_registry *reg = p->clusters;
    struct qnode *n;

    if (reg == NULL || !reg->open)
        return;
    reg->open = 0;
    QUEUE_FOREACH(n, &reg->clusters) {
        struct cluster *cl = QUEUE_DATA(n, struct cluster, link);
        cluster_fetch_cancel(cl->fetch);
        cl->fetch = NULL;
        cl->active = 0;
        if (cl->timer_open) {
            uv_close((uv_handle_t *)&cl->timer, NULL);
            cl->timer_open = 0;
        }
    }
    uv_close((uv_handle_t *)&reg->async, NULL);
    uv_close((uv_handle_t *)&reg->publish_timer, NULL);
}

void cluster_registry_free(struct proxy *p)
{
    struct cluster_registry *reg = p->clusters;
    struct qnode *n;

    if (reg == NULL)
        return;
    while ((n = queue_first(&reg->clusters)) != NULL) {
        struct cluster *cl = QUEUE_DATA(n, struct cluster, link);
        queue_remove(n);
        cluster_map_free(cl->map);
        cluster_strv_free(cl->seeds, cl->nseeds);
        cluster_strv_free(cl->cand, cl->ncand);
        free(cl->seed_key);
        free(cl->user);
        free(cl->password);
        free(cl->name);
        uv_mutex_destroy(&cl->mu);
        free(cl);
    }
    free(reg);
    p->clusters = NULL;
}
