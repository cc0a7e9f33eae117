/* Routing: a pure function from a pool view and a hashed key to a decision (server, copies, miss, error). */
#include "config.h"

#include <stdatomic.h>
#include <string.h>

#include "lib/invariant.h"
#include "placement/cluster_map.h"
#include "state/health.h"
#include "state/registry.h"
#include "proxy/route.h"
#include "lib/util.h"

#define ROUTE_SPILL_WARM_S 10   /* writes follow a key's reads' spill server this long */

uint32_t route_walk(const struct route_pool *rp, uint32_t s)
{
    const struct cluster_view *cv = rp->cluster;

    if (rp->cp->sentinel != NULL)
        return s == 0 && rp->nservers > 0 ? 0 : rp->nservers;  /* the master: replicas copy it */
    if (cv == NULL)
        return s < rp->nservers ? s : rp->nservers;
    for (; s < rp->nservers; s++)
        if (s < cv->nnodes && cv->nslots[s] > 0)
            return s;
    return rp->nservers;
}

void route_group(const uint32_t *of, uint32_t nkeys, uint32_t n, uint32_t *first,
                 uint32_t *idx)
{
    uint32_t sum = 0;

    memset(first, 0, (size_t)(n + 1) * sizeof(*first));
    for (uint32_t i = 0; i < nkeys; i++)
        if (of[i] < n)
            first[of[i]]++;                     /* counts */
    for (uint32_t g = 0; g < n; g++) {
        sum += first[g];
        first[g] = sum;                         /* ends */
    }
    for (uint32_t i = nkeys; i-- > 0;)
        if (of[i] < n)
            idx[--first[of[i]]] = i;            /* ends become starts */
    first[n] = sum;
}

void route_clear(struct route *rt)
{
    rt->kind = ROUTE_SEND;
    rt->n = 0;
    rt->async = 0;
    rt->events = 0;
    rt->probe = ROUTE_NONE;
    rt->warm_from = ROUTE_NONE;
    rt->err = PROTO_ERR_SERVER;
    rt->down = ROUTE_NONE;
}

uint32_t route_rule_pool(const struct route_pool *rp, const char *key, size_t len)
{
    const struct conf_pool *cp = rp->cp;

    for (uint32_t i = 0; i < cp->nroutes; i++) {
        const struct route_rule *r = &rp->rules[i];
        if (r->len <= len && memcmp(key, r->prefix, r->len) == 0)
            return r->pool;
    }
    return ROUTE_NONE;
}

void route_key_place(const struct route_pool *rp, struct route_key *rk)
{
    const struct ring *r = rp->ring;

    rk->hash = ring_key_hash(r, rk->bytes, rk->len);
    rk->owner = r->nservers == 1 ? 0 : dist_lookup(&r->dist, rk->hash);
    RL_ASSERT(rk->owner < r->nservers);     /* an index of the pool's servers */
}

/* Server i's health; i indexes the pool's servers (health[] has nservers). */
static int route_up(const struct route_pool *rp, uint32_t i)
{
    RL_ASSERT(i < rp->nservers);
    return health_up(rp->health[i]);
}

static int route_rejoining(const struct route_pool *rp, uint32_t i)
{
    RL_ASSERT(i < rp->nservers);
    return health_state(rp->health[i]) == HEALTH_REJOINING;
}

static void route_send(struct route *rt, uint32_t to)
{
    rt->kind = ROUTE_SEND;
    rt->n = 1;
    rt->to[0] = to;
}

/* A copy to a and one to b, each answered before the client is (the first's reply). */
static void route_send_two(struct route *rt, uint32_t a, uint32_t b)
{
    rt->kind = ROUTE_COPIES;
    rt->n = 2;
    rt->async = 0;
    rt->to[0] = a;
    rt->to[1] = b;
}


/* The key's preference list, live servers only; returns how many. */
static uint32_t route_live_prefs(const struct route_pool *rp, const struct route_key *rk,
                                 uint32_t want, uint32_t *live)
{
    uint32_t pref[RING_MAX_PREF], n, nlive = 0;

    n = ring_preference_hash(rp->ring, rk->hash, pref,
                             RL_MIN(RL_MIN(want, rp->nservers), RING_MAX_PREF));
    for (uint32_t i = 0; i < n; i++)
        if (route_up(rp, pref[i]))
            live[nlive++] = pref[i];
    return nlive;
}

/*
 * The owner is down (down is not removed: the ring is unchanged). The pool's
 * on_down says what happens: failover to the next live server of the key's
 * preference list, a miss, or an error at once. When more than half of the
 * pool is down the health signal itself is suspect: fail open and send to
 * the owner anyway. The owner's probe may be due (rt->probe). Returns the
 * server to use, or ROUTE_NONE with rt filled in (MISS or FAIL).
 */
static uint32_t route_down(const struct route_pool *rp, const struct route_key *rk,
                           struct route *rt)
{
    uint32_t owner = rk->owner;

    rt->probe = owner;
    uint32_t down = 0;
    for (uint32_t i = 0; i < rp->nservers; i++)
        down += !route_up(rp, i);
    if (down * 2 > rp->nservers) {
        rt->events |= ROUTE_EV_FAIL_OPEN;
        return owner;
    }
    switch (rp->cp->on_down) {
    case CONF_ON_DOWN_FAILOVER: {
        uint32_t pref[RING_MAX_PREF];
        uint32_t n = ring_preference_hash(rp->ring, rk->hash, pref,
                                          RL_MIN(rp->nservers, RING_MAX_PREF));
        for (uint32_t i = 0; i < n; i++) {
            if (pref[i] != owner && route_up(rp, pref[i])) {
                rt->events |= ROUTE_EV_FAILOVER;
                return pref[i];
            }
        }
        rt->kind = ROUTE_FAIL;
        rt->err = PROTO_ERR_DOWN;
        rt->down = ROUTE_NONE;          /* "no live server for this key" */
        return ROUTE_NONE;
    }
    case CONF_ON_DOWN_MISS:
        rt->kind = ROUTE_MISS;
        return ROUTE_NONE;
    case CONF_ON_DOWN_ERROR:
    default:
        rt->kind = ROUTE_FAIL;
        rt->err = PROTO_ERR_DOWN;
        rt->down = owner;
        return ROUTE_NONE;
    }
}

uint32_t route_fanout_server(const struct route_pool *rp, const struct route_key *rk,
                             struct route *rt)
{
    if (route_up(rp, rk->owner))
        return rk->owner;
    if (rp->cp->on_down != CONF_ON_DOWN_FAILOVER) {
        rt->probe = rk->owner;
        return rk->owner;   /* other policies answer the owner's fragment */
    }
    struct route scratch;
    route_clear(&scratch);
    uint32_t to = route_down(rp, rk, &scratch);
    rt->probe = scratch.probe;
    rt->events |= scratch.events;
    return to == ROUTE_NONE ? rk->owner : to;
}

/* The zone name of ring server i ("" when none). */
static const char *route_zone_of(const struct ring *r, uint32_t i)
{
    return r->zones && r->servers[i].zone < r->nzones ? r->zones[r->servers[i].zone] : "";
}

/*
 * A write while some of the key's R replicas are not up: a rejoining one gets
 * it too (after the live ones, which serve the reads), a down one has it
 * remembered for its rejoin (ROUTE_EV_DOWN_WRITE).
 */
static void route_replica_writes(const struct route_pool *rp, const struct route_key *rk,
                                 uint32_t *live, uint32_t *nlive, struct route *rt)
{
    uint32_t pref[RING_MAX_PREF];
    uint32_t n = ring_preference_hash(rp->ring, rk->hash, pref,
                                      RL_MIN(RL_MIN(rp->cp->replicas, rp->nservers), RING_MAX_PREF));
    for (uint32_t i = 0; i < n; i++) {
        if (route_up(rp, pref[i]))
            continue;
        if (route_rejoining(rp, pref[i])) {
            RL_ASSERT(*nlive < RING_MAX_PREF);     /* live[] and pref[] are that long */
            live[(*nlive)++] = pref[i];
        }
        else
            rt->events |= ROUTE_EV_DOWN_WRITE;
    }
}

/* A read among the live candidates cand[0..n) (n > 0, the owner first): read_from
 * any-live rotates over them, local-zone takes the first in this proxy's zone, else
 * (or with no zone of its own) the first. */
static uint32_t route_read_pick(const struct route_pool *rp, const uint32_t *cand, uint32_t n,
                                uint32_t rr, struct route *rt)
{
    if (rp->cp->read_from == CONF_READ_ANY_LIVE) {
        rt->events |= ROUTE_EV_RR;
        return cand[rr % n];
    }
    if (rp->cp->read_from == CONF_READ_LOCAL_ZONE && rp->zone != NULL)
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(route_zone_of(rp->ring, cand[i]), rp->zone) == 0)
                return cand[i];
    return cand[0];
}

/*
 * replicas: R. A key's replicas are the first R servers of its preference
 * list (distinct zones first). Writes (write_to all / all-async) go to every
 * live replica; reads go to one live replica chosen by read_from. Returns 0
 * when every replica is down (on_down decides), else 1 with rt filled in.
 */
static int route_replicas(const struct route_pool *rp, const struct route_key *rk,
                          uint16_t rflags, uint32_t rr, struct route *rt)
{
    const struct conf_pool *cp = rp->cp;
    uint32_t live[RING_MAX_PREF];
    uint32_t nlive = route_live_prefs(rp, rk, cp->replicas, live);

    if (nlive == 0)
        return 0;
    if (rflags & PROTO_RF_WRITE) {
        if (nlive < RL_MIN(cp->replicas, rp->nservers))
            route_replica_writes(rp, rk, live, &nlive, rt);
        if (cp->write_to == CONF_WRITE_PRIMARY || nlive == 1) {
            route_send(rt, live[0]);
            return 1;
        }
        rt->kind = ROUTE_COPIES;
        rt->n = nlive;
        rt->async = cp->write_to == CONF_WRITE_ALL_ASYNC;
        memcpy(rt->to, live, nlive * sizeof(*live));
        return 1;
    }
    route_send(rt, route_read_pick(rp, live, nlive, rr, rt));
    return 1;
}

static uint32_t route_load(void *ctx, uint32_t i)
{
    const struct route_pool *rp = ctx;
    return atomic_load_explicit(&rp->health[i]->inflight, memory_order_relaxed);
}

/*
 * Bounded loads (balance_factor): a read goes to the first live server of
 * the key's preference list whose in-flight count (over every worker) is
 * under ceil(balance_factor x mean); the spill is remembered per key (by the
 * caller: ROUTE_EV_SPILL) so that a write of the key within
 * ROUTE_SPILL_WARM_S seconds reaches the server that served its reads too.
 * Returns 1 with rt filled in, 0 for the usual route.
 */
static int route_bounded(const struct route_pool *rp, const struct route_key *rk,
                         uint16_t rflags, uint64_t now_ms, struct route *rt)
{
    const struct pool_shared *sh = rp->shared;
    uint32_t slot = (uint32_t)(rk->hash & (POOL_SPILL_SLOTS - 1));
    uint32_t now_s = (uint32_t)(now_ms / 1000);
    uint32_t owner = rk->owner;

    if (rflags & PROTO_RF_WRITE) {
        if (atomic_load_explicit(&sh->spill_key[slot], memory_order_relaxed) != rk->hash ||
            now_s - atomic_load_explicit(&sh->spill_sec[slot], memory_order_relaxed) >
                ROUTE_SPILL_WARM_S)
            return 0;
        uint32_t spill = atomic_load_explicit(&sh->spill_server[slot], memory_order_relaxed);
        if (spill >= rp->nservers || spill == owner || !route_up(rp, spill) ||
            !route_up(rp, owner))
            return 0;
        route_send_two(rt, owner, spill);
        return 1;
    }
    if (!(rflags & PROTO_RF_RETRIEVAL))
        return 0;
    uint32_t live[RING_MAX_PREF];
    uint32_t nlive = route_live_prefs(rp, rk, rp->nservers, live);
    if (nlive == 0)
        return 0;
    uint32_t pick = dist_bounded_pick(live, nlive, route_load, (void *)rp, rp->nservers,
                                      rp->cp->balance_factor);
    if (pick != owner)
        rt->events |= ROUTE_EV_SPILL;
    route_send(rt, pick);
    return 1;
}

void route_spill_note(const struct route_pool *rp, const struct route_key *rk, uint32_t to,
                      uint64_t now_ms)
{
    struct pool_shared *sh = rp->shared;
    uint32_t slot = (uint32_t)(rk->hash & (POOL_SPILL_SLOTS - 1));

    atomic_store_explicit(&sh->spill_key[slot], rk->hash, memory_order_relaxed);
    atomic_store_explicit(&sh->spill_server[slot], to, memory_order_relaxed);
    atomic_store_explicit(&sh->spill_sec[slot], (uint32_t)(now_ms / 1000), memory_order_relaxed);
}

/*
 * warmup: for a while after a reload moved keys, a get of a key whose owner
 * changed that misses on the new owner is asked of the previous owner
 * (warmup.c does it when the miss comes back) and a hit there is copied to
 * the new owner: mcrouter's WarmUpRoute, from the ring diff. The caller asks
 * only for requests the protocol says warm (proto_ops.warmable).
 */
static uint32_t route_warm_from(const struct route_pool *rp, const struct route_key *rk,
                                uint32_t to, uint64_t now_ms)
{
    if (rp->prev_ring == NULL || now_ms >= rp->warm_until_ms)
        return ROUTE_NONE;
    uint32_t o = ring_owner(rp->prev_ring, rk->bytes, rk->len);
    if (o >= rp->prev_ring->nservers)
        return ROUTE_NONE;
    uint32_t now = rp->prev_map[o];
    if (now == ROUTE_NONE || now == to || !route_up(rp, now))
        return ROUTE_NONE;
    return now;
}

/*
 * A cluster pool: the slot's master (rk->owner: the ring maps slots to masters) takes
 * writes whatever its health (no other node may take them: down, it fails fast and the
 * cluster fails over); a read with read_from any-live goes to one of the master and its
 * replicas that are up and online in the map, in rotation, with local-zone to the first
 * of them in this proxy's zone (the master first), else the master.
 */
static void route_cluster(const struct route_pool *rp, const struct route_key *rk,
                          uint16_t rflags, uint32_t rr, struct route *rt)
{
    const struct cluster_view *cv = rp->cluster;
    uint32_t master = rk->owner, cand[RING_MAX_PREF], n = 0;

    route_send(rt, master);
    if (!route_up(rp, master))
        rt->probe = master;
    if ((rflags & PROTO_RF_WRITE) || rp->cp->read_from == CONF_READ_PRIMARY ||
        master >= cv->nnodes)
        return;
    if (rt->probe == ROUTE_NONE)
        cand[n++] = master;
    for (uint32_t i = cv->first[master]; i < cv->first[master + 1] && n < RING_MAX_PREF; i++) {
        uint32_t r = cv->list[i];
        if (r < rp->nservers && cv->usable[r] && route_up(rp, r))
            cand[n++] = r;
    }
    if (n > 0)
        route_send(rt, route_read_pick(rp, cand, n, rr, rt));
}

/*
 * A write whose owner is not up, routed by on_down to `to` (a failover
 * server, or ROUTE_NONE with rt a miss or an error). A rejoining owner gets
 * the write as well (its reads are not back yet, so the failover server gets
 * it first): COPIES {to, owner}, or the owner alone when on_down sends its
 * reads nowhere. A down owner's write is remembered for its rejoin. Returns 1
 * when rt is final.
 */
static int route_down_write(const struct route_pool *rp, const struct route_key *rk,
                            uint32_t to, struct route *rt)
{
    uint32_t owner = rk->owner;

    if (!route_rejoining(rp, owner)) {
        if (rt->kind != ROUTE_FAIL)
            rt->events |= ROUTE_EV_DOWN_WRITE;
        return 0;
    }
    rt->events |= ROUTE_EV_REJOIN_COPY;
    if (to == ROUTE_NONE) {
        route_send(rt, owner);
        return 1;
    }
    route_send_two(rt, to, owner);
    return 1;
}

/*
 * A sentinel pool with read_from any-live (servers: the master, then its live replicas):
 * a read-only command goes to one of the master (when up) and the replicas that are up,
 * in rotation; everything else to the master whatever its health (it fails fast when
 * down, and the sentinels are asked again).
 */
static void route_sentinel(const struct route_pool *rp, uint16_t rflags, uint32_t rr,
                           struct route *rt)
{
    uint32_t cand[RING_MAX_PREF], n = 0;

    if (!(rflags & PROTO_RF_READ) || (rflags & PROTO_RF_WRITE) || rp->nservers < 2) {
        route_send(rt, 0);
        if (!route_up(rp, 0))
            rt->probe = 0;
        return;
    }
    for (uint32_t i = 0; i < rp->nservers && n < RING_MAX_PREF; i++)
        if (route_up(rp, i))
            cand[n++] = i;
    if (n == 0) {
        route_send(rt, 0);
        rt->probe = 0;
        return;
    }
    rt->events |= ROUTE_EV_RR;
    route_send(rt, cand[rr % n]);
}

void route_request(const struct route_pool *rp, const struct route_key *rk, uint16_t rflags,
                   int single, int nokey, uint32_t rr, uint64_t now_ms, struct route *rt)
{
    route_clear(rt);
    if (rp->cluster != NULL) {
        route_cluster(rp, rk, rflags, rr, rt);
        return;
    }
    if (rp->cp->sentinel != NULL && rp->cp->sentinel->read_from == CONF_READ_ANY_LIVE) {
        route_sentinel(rp, rflags, rr, rt);
        return;
    }
    if (rp->cp->replicas > 1 && !nokey && route_replicas(rp, rk, rflags, rr, rt))
        return;
    if (rp->cp->balance_factor > 0 && single && route_bounded(rp, rk, rflags, now_ms, rt))
        return;
    uint32_t to = rk->owner;
    if (!route_up(rp, to)) {
        to = route_down(rp, rk, rt);
        if ((rflags & PROTO_RF_WRITE) && !(rt->events & ROUTE_EV_FAIL_OPEN) &&
            route_down_write(rp, rk, to, rt))
            return;
        if (to == ROUTE_NONE)
            return;
    }
    route_send(rt, to);
    if (single && (rflags & PROTO_RF_RETRIEVAL))
        rt->warm_from = route_warm_from(rp, rk, to, now_ms);
}

void route_channel(const struct route_pool *rp, const struct route_key *rk, struct route *rt)
{
    route_clear(rt);
    if (!route_up(rp, rk->owner)) {
        rt->kind = ROUTE_FAIL;
        rt->err = PROTO_ERR_DOWN;
        rt->down = rk->owner;
        rt->probe = rk->owner;
        return;
    }
    route_send(rt, rk->owner);
}
