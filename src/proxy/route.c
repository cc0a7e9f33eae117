/* Routing: a key's owner, and where a request goes given health, replicas, bounded loads and warm-up. */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "health.h"
#include "proxy/proxy.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/worker.h"
#include "util.h"

#define ROUTE_SPILL_WARM_S 10   /* writes follow a key's reads' spill server this long */

const char *route_key(const struct proto_ops *ops, const struct proto_req *req, const char *buf,
                      uint32_t k, char *dec, size_t *len)
{
    return ops->key_bytes(req, buf, k, dec, len);
}

/* The route's pool for one key, or NULL when no prefix matches. */
static struct wpool *route_key_pool(struct wpool *pool, const struct proto_req *req,
                                    const char *buf, uint32_t k)
{
    const struct conf_pool *cp = pool->cp;
    char dec[PROTO_KEY_DECODED_MAX];
    size_t len;
    const char *key = route_key(pool->ops, req, buf, k, dec, &len);

    for (uint32_t i = 0; i < cp->nroutes; i++) {
        size_t n = strlen(cp->routes[i].prefix);
        if (n > len || memcmp(key, cp->routes[i].prefix, n) != 0)
            continue;
        struct worker *w = pool->w;
        for (uint32_t j = 0; j < w->npools; j++)
            if (w->pools[j] != NULL && strcmp(w->pools[j]->cp->name, cp->routes[i].pool) == 0)
                return w->pools[j];
        return NULL;    /* the target pool failed to open in this worker: stay */
    }
    return NULL;
}

struct wpool *route_pool(struct wpool *pool, const struct proto_req *req, const char *buf,
                         int *mixed)
{
    *mixed = 0;
    if (pool->cp->nroutes == 0 || req->nkeys == 0 || (req->flags & PROTO_RF_NOKEY))
        return pool;
    struct wpool *first = route_key_pool(pool, req, buf, 0);
    for (uint32_t k = 1; k < req->nkeys; k++) {
        if (route_key_pool(pool, req, buf, k) != first) {
            *mixed = 1;
            break;
        }
    }
    return first ? first : pool;
}

uint32_t route_owner(const struct wpool *pool, const struct proto_req *req, const char *buf,
                     uint32_t k, uint64_t *hash)
{
    const struct ring *r = pool->ring;
    char dec[PROTO_KEY_DECODED_MAX];
    size_t len;
    const char *key = route_key(pool->ops, req, buf, k, dec, &len);
    uint64_t h = ring_key_hash(r, key, len);
    if (hash)
        *hash = h;
    return dist_lookup(&r->dist, h) % r->nservers;
}

static void route_send(struct route *rt, struct server *to)
{
    rt->kind = ROUTE_SEND;
    rt->n = 1;
    rt->to[0] = to;
}

/* The key's preference list, live servers only; returns how many. */
static uint32_t route_live_prefs(const struct wpool *pool, const struct proto_req *req,
                                 const char *buf, uint32_t want, uint32_t *live)
{
    uint32_t pref[RING_MAX_PREF], n, nlive = 0;
    char dec[PROTO_KEY_DECODED_MAX];
    size_t len;
    const char *key = route_key(pool->ops, req, buf, 0, dec, &len);

    n = ring_preference(pool->ring, key, len, pref, RL_MIN(RL_MIN(want, pool->nservers),
                                                            RING_MAX_PREF));
    for (uint32_t i = 0; i < n; i++)
        if (health_up(pool->servers[pref[i]]->health))
            live[nlive++] = pref[i];
    return nlive;
}

/*
 * The owner is down (down is not removed: the ring is unchanged). The pool's
 * on_down says what happens: failover to the next live server of the key's
 * preference list, a miss, or an error at once. When more than half of the
 * pool is down the health signal itself is suspect: fail open and send to
 * the owner anyway. Whoever finds the retry time come sends the probe that
 * can bring the owner back. Returns the server index to use, or UINT32_MAX
 * with rt filled in (MISS or FAIL).
 */
static uint32_t route_down(struct wpool *pool, const struct proto_req *req, const char *buf,
                           uint32_t k, uint32_t owner, struct route *rt)
{
    struct server *srv = pool->servers[owner];

    if (health_try_probe(srv->health, util_now_ms()))
        server_probe(srv);
    uint32_t down = 0;
    for (uint32_t i = 0; i < pool->nservers; i++)
        down += !health_up(pool->servers[i]->health);
    if (down * 2 > pool->nservers) {
        STATS_ADD(&pool->stats, fail_open, 1);
        return owner;
    }
    switch (pool->cp->on_down) {
    case CONF_ON_DOWN_FAILOVER: {
        uint32_t pref[RING_MAX_PREF];
        char dec[PROTO_KEY_DECODED_MAX];
        size_t len;
        const char *key = route_key(pool->ops, req, buf, k, dec, &len);
        uint32_t n = ring_preference(pool->ring, key, len, pref,
                                     RL_MIN(pool->nservers, RING_MAX_PREF));
        for (uint32_t i = 0; i < n; i++) {
            if (pref[i] != owner && health_up(pool->servers[pref[i]]->health)) {
                STATS_ADD(&pool->stats, failovers, 1);
                return pref[i];
            }
        }
        rt->kind = ROUTE_FAIL;
        rt->err = PROTO_ERR_DOWN;
        snprintf(rt->reason, sizeof(rt->reason), "no live server for this key");
        return UINT32_MAX;
    }
    case CONF_ON_DOWN_MISS:
        rt->kind = ROUTE_MISS;
        return UINT32_MAX;
    case CONF_ON_DOWN_ERROR:
    default:
        rt->kind = ROUTE_FAIL;
        rt->err = PROTO_ERR_DOWN;
        snprintf(rt->reason, sizeof(rt->reason), "server %s is down", srv->label);
        return UINT32_MAX;
    }
}

uint32_t route_key_server(struct wpool *pool, const struct proto_req *req, const char *buf,
                          uint32_t k, uint32_t owner)
{
    struct route rt;
    if (health_up(pool->servers[owner]->health) || pool->cp->on_down != CONF_ON_DOWN_FAILOVER)
        return owner;   /* other policies answer the owner's fragment (client.c) */
    uint32_t to = route_down(pool, req, buf, k, owner, &rt);
    return to == UINT32_MAX ? owner : to;
}

/* The zone name of ring server i ("" when none). */
static const char *route_zone_of(const struct ring *r, uint32_t i)
{
    return r->zones && r->servers[i].zone < r->nzones ? r->zones[r->servers[i].zone] : "";
}

/*
 * replicas: R. A key's replicas are the first R servers of its preference
 * list (distinct zones first). Writes (write_to all / all-async) go to every
 * live replica; reads go to one live replica chosen by read_from. Returns 0
 * when every replica is down (on_down decides), else 1 with rt filled in.
 */
static int route_replicas(struct wpool *pool, const struct proto_req *req, const char *buf,
                          uint32_t *rr, struct route *rt)
{
    const struct conf_pool *cp = pool->cp;
    uint32_t live[RING_MAX_PREF];
    uint32_t nlive = route_live_prefs(pool, req, buf, cp->replicas, live);

    if (nlive == 0)
        return 0;
    if (req->flags & PROTO_RF_WRITE) {
        if (cp->write_to == CONF_WRITE_PRIMARY || nlive == 1) {
            route_send(rt, pool->servers[live[0]]);
            return 1;
        }
        rt->kind = ROUTE_COPIES;
        rt->n = nlive;
        rt->async = cp->write_to == CONF_WRITE_ALL_ASYNC;
        for (uint32_t i = 0; i < nlive; i++)
            rt->to[i] = pool->servers[live[i]];
        return 1;
    }
    uint32_t pick = live[0];
    if (cp->read_from == CONF_READ_ANY_LIVE) {
        pick = live[(*rr)++ % nlive];
    } else if (cp->read_from == CONF_READ_LOCAL_ZONE) {
        const char *zone = pool->w->snap->conf->global.zone;
        for (uint32_t i = 0; zone != NULL && i < nlive; i++) {
            if (strcmp(route_zone_of(pool->ring, live[i]), zone) == 0) {
                pick = live[i];
                break;
            }
        }
    }
    route_send(rt, pool->servers[pick]);
    return 1;
}

static uint32_t route_load(void *ctx, uint32_t i)
{
    const struct wpool *pool = ctx;
    return atomic_load_explicit(&pool->servers[i]->health->inflight, memory_order_relaxed);
}

/*
 * Bounded loads (balance_factor): a read goes to the first live server of
 * the key's preference list whose in-flight count (over every worker) is
 * under ceil(balance_factor x mean); the spill is remembered per key so that
 * a write of the key within ROUTE_SPILL_WARM_S seconds reaches the server
 * that served its reads too. Returns 1 with rt filled in, 0 for the usual
 * route.
 */
static int route_bounded(struct wpool *pool, const struct proto_req *req, const char *buf,
                         uint32_t owner, uint64_t hash, struct route *rt)
{
    struct pool_shared *sh = pool->shared;
    uint32_t slot = (uint32_t)(hash & (POOL_SPILL_SLOTS - 1));
    uint32_t now_s = (uint32_t)(util_now_ms() / 1000);

    if (req->flags & PROTO_RF_WRITE) {
        if (atomic_load_explicit(&sh->spill_key[slot], memory_order_relaxed) != hash ||
            now_s - atomic_load_explicit(&sh->spill_sec[slot], memory_order_relaxed) >
                ROUTE_SPILL_WARM_S)
            return 0;
        uint32_t spill = atomic_load_explicit(&sh->spill_server[slot], memory_order_relaxed);
        if (spill >= pool->nservers || spill == owner ||
            !health_up(pool->servers[spill]->health) || !health_up(pool->servers[owner]->health))
            return 0;
        rt->kind = ROUTE_COPIES;
        rt->n = 2;
        rt->async = 0;
        rt->to[0] = pool->servers[owner];
        rt->to[1] = pool->servers[spill];
        return 1;
    }
    if (!(req->flags & PROTO_RF_RETRIEVAL))
        return 0;
    uint32_t live[RING_MAX_PREF];
    uint32_t nlive = route_live_prefs(pool, req, buf, pool->nservers, live);
    if (nlive == 0)
        return 0;
    uint32_t pick = dist_bounded_pick(live, nlive, route_load, pool, pool->nservers,
                                      pool->cp->balance_factor);
    if (pick != owner) {
        STATS_ADD(&pool->servers[pick]->stats, spills, 1);
        atomic_store_explicit(&sh->spill_key[slot], hash, memory_order_relaxed);
        atomic_store_explicit(&sh->spill_server[slot], pick, memory_order_relaxed);
        atomic_store_explicit(&sh->spill_sec[slot], now_s, memory_order_relaxed);
    }
    route_send(rt, pool->servers[pick]);
    return 1;
}

/*
 * warmup: for a while after a reload moved keys, a get of a key whose owner
 * changed that misses on the new owner is asked of the previous owner
 * (server.c does it when the miss comes back) and a hit there is copied to
 * the new owner: mcrouter's WarmUpRoute, from the ring diff.
 */
static struct server *route_warm_from(struct wpool *pool, const struct proto_req *req,
                                      const char *buf, uint32_t owner)
{
    if (pool->prev_ring == NULL || req->nkeys != 1 || pool->ops->warmable == NULL ||
        !pool->ops->warmable(req->cmd) || uv_now(&pool->w->loop) >= pool->warm_until)
        return NULL;
    char dec[PROTO_KEY_DECODED_MAX];
    size_t len;
    const char *key = route_key(pool->ops, req, buf, 0, dec, &len);
    uint32_t o = ring_owner(pool->prev_ring, key, len);
    if (o >= pool->prev_ring->nservers)
        return NULL;
    uint32_t now = pool->prev_map[o];
    if (now == UINT32_MAX || now == owner || !health_up(pool->servers[now]->health))
        return NULL;
    return pool->servers[now];
}

void route_request(struct wpool *pool, const struct proto_req *req, const char *buf,
                   uint32_t owner, uint64_t hash, uint32_t *rr, struct route *rt)
{
    rt->warm_from = NULL;
    rt->async = 0;
    if (pool->cp->replicas > 1 && !(req->flags & PROTO_RF_NOKEY) &&
        route_replicas(pool, req, buf, rr, rt))
        return;
    if (pool->cp->balance_factor > 0 && req->kind == PROTO_REQ_SINGLE &&
        route_bounded(pool, req, buf, owner, hash, rt))
        return;
    uint32_t to = owner;
    if (!health_up(pool->servers[owner]->health)) {
        to = route_down(pool, req, buf, 0, owner, rt);
        if (to == UINT32_MAX)
            return;
    }
    route_send(rt, pool->servers[to]);
    rt->warm_from = route_warm_from(pool, req, buf, to);
}
