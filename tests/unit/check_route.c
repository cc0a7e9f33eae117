/* Unit tests for routing (src/proxy/route.c): decisions from a pool view and a hashed key, no sockets. */
#include "config.h"

#include "check_main.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement/cluster_map.h"
#include "conf/conf.h"
#include "state/health.h"
#include "state/registry.h"
#include "proxy/route.h"
#include "placement/ring.h"

#define MAXS 16

/* A pool from YAML, its ring, and health records the test sets by hand. */
struct fixture {
    struct conf       *conf;
    struct ring       *ring;
    struct health      health[MAXS];
    struct health     *hp[MAXS];
    struct pool_shared shared;
    struct route_rule  rules[4];
    struct route_pool  rp;
};

static void fx_init(struct fixture *f, const char *yaml)
{
    char err[512] = "";
    memset(f, 0, sizeof(*f));
    ck_assert_msg(conf_load_buffer("t.yml", yaml, strlen(yaml), &f->conf, err, sizeof(err)) == 0,
                  "conf: %s", err);
    const struct conf_pool *cp = &f->conf->pools[0];
    f->ring = ring_build(cp, err, sizeof(err));
    ck_assert_msg(f->ring != NULL, "ring: %s", err);
    ck_assert_uint_le(cp->nservers, MAXS);
    for (uint32_t i = 0; i < cp->nservers; i++)
        f->hp[i] = &f->health[i];
    for (uint32_t i = 0; i < cp->nroutes && i < 4; i++) {
        f->rules[i].prefix = cp->routes[i].prefix;
        f->rules[i].len = (uint32_t)strlen(cp->routes[i].prefix);
        f->rules[i].pool = ROUTE_NONE;
        for (uint32_t j = 0; j < f->conf->npools; j++)
            if (strcmp(f->conf->pools[j].name, cp->routes[i].pool) == 0)
                f->rules[i].pool = j;
    }
    f->rp = (struct route_pool){
        .cp = cp, .ring = f->ring, .health = f->hp, .nservers = cp->nservers,
        .shared = &f->shared, .zone = f->conf->global.zone, .rules = f->rules,
    };
}

static void fx_free(struct fixture *f)
{
    ring_unref(f->ring);
    conf_free(f->conf);
}

static void fx_down(struct fixture *f, uint32_t i)
{
    atomic_store(&f->health[i].state, HEALTH_DOWN);
}

static struct route_key fx_key(const struct fixture *f, const char *key)
{
    struct route_key rk = { .bytes = key, .len = strlen(key) };
    route_key_place(&f->rp, &rk);
    return rk;
}

/* A key owned by server `owner` (searched over key:<i>), in buf. */
static struct route_key fx_key_of(const struct fixture *f, uint32_t owner, char *buf, size_t len)
{
    for (int i = 0; i < 100000; i++) {
        snprintf(buf, len, "key:%d", i);
        struct route_key rk = fx_key(f, buf);
        if (rk.owner == owner)
            return rk;
    }
    ck_abort_msg("no key owned by server %u", owner);
    return (struct route_key){ 0 };
}

#define POOL4(extra)                                                                  \
    "p:\n  listen: 127.0.0.1:1\n  auto_eject_hosts: true\n" extra                     \
    "  servers:\n    - 127.0.0.1:11001:1 a\n    - 127.0.0.1:11002:1 b\n"              \
    "    - 127.0.0.1:11003:1 c\n    - 127.0.0.1:11004:1 d\n"

START_TEST(test_group_keys_by_server)
{
    /* keys 0..6 to servers 2, 0, 2, NONE, 1, 0, 2 of 3 */
    const uint32_t of[] = { 2, 0, 2, ROUTE_NONE, 1, 0, 2 };
    uint32_t first[4], idx[7];
    route_group(of, 7, 3, first, idx);
    ck_assert_uint_eq(first[0], 0);
    ck_assert_uint_eq(first[1], 2);
    ck_assert_uint_eq(first[2], 3);
    ck_assert_uint_eq(first[3], 6);         /* the key to none is in no group */
    const uint32_t want[] = { 1, 5, 4, 0, 2, 6 };   /* each group in key order */
    for (int i = 0; i < 6; i++)
        ck_assert_uint_eq(idx[i], want[i]);
    route_group(of, 0, 3, first, idx);
    ck_assert_uint_eq(first[3], 0);
}
END_TEST

START_TEST(test_owner_up_is_the_route)
{
    struct fixture f;
    fx_init(&f, POOL4(""));
    struct route rt;
    for (int i = 0; i < 200; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        struct route_key rk = fx_key(&f, key);
        ck_assert_uint_eq(rk.owner, ring_owner(f.ring, key, strlen(key)));
        ck_assert_uint_eq(rk.hash, ring_key_hash(f.ring, key, strlen(key)));
        route_request(&f.rp, &rk, 0, 1, 0, 0, 1000, &rt);
        ck_assert_int_eq(rt.kind, ROUTE_SEND);
        ck_assert_uint_eq(rt.n, 1);
        ck_assert_uint_eq(rt.to[0], rk.owner);
        ck_assert_uint_eq(rt.probe, ROUTE_NONE);
        ck_assert_uint_eq(rt.events, 0);
    }
    fx_free(&f);
}
END_TEST

START_TEST(test_owner_down_fails_over_along_the_preference_list)
{
    struct fixture f;
    char key[32];
    fx_init(&f, POOL4(""));
    struct route_key rk = fx_key_of(&f, 2, key, sizeof(key));
    uint32_t pref[4];
    ck_assert_uint_eq(ring_preference(f.ring, key, strlen(key), pref, 4), 4);
    ck_assert_uint_eq(pref[0], 2);
    fx_down(&f, 2);
    struct route rt;
    route_request(&f.rp, &rk, 0, 1, 0, 0, 1000, &rt);
    ck_assert_int_eq(rt.kind, ROUTE_SEND);
    ck_assert_uint_eq(rt.to[0], pref[1]);
    ck_assert_uint_eq(rt.probe, 2);                 /* the caller may probe the owner */
    ck_assert(rt.events & ROUTE_EV_FAILOVER);
    fx_down(&f, pref[1]);                           /* half down: still failover */
    route_request(&f.rp, &rk, 0, 1, 0, 0, 1000, &rt);
    ck_assert_uint_eq(rt.to[0], pref[2]);
    /* multi-key requests: each key on its own */
    route_clear(&rt);
    ck_assert_uint_eq(route_fanout_server(&f.rp, &rk, &rt), pref[2]);
    ck_assert(rt.events & ROUTE_EV_FAILOVER);
    fx_free(&f);
}
END_TEST

START_TEST(test_most_down_fails_open_to_the_owner)
{
    struct fixture f;
    char key[32];
    fx_init(&f, POOL4(""));
    struct route_key rk = fx_key_of(&f, 0, key, sizeof(key));
    fx_down(&f, 0);
    fx_down(&f, 1);
    fx_down(&f, 2);
    struct route rt;
    route_request(&f.rp, &rk, 0, 1, 0, 0, 1000, &rt);
    ck_assert_int_eq(rt.kind, ROUTE_SEND);
    ck_assert_uint_eq(rt.to[0], 0);                 /* the health signal is suspect */
    ck_assert(rt.events & ROUTE_EV_FAIL_OPEN);
    ck_assert(!(rt.events & ROUTE_EV_FAILOVER));
    fx_free(&f);
}
END_TEST

START_TEST(test_on_down_miss_and_error)
{
    struct fixture f;
    char key[32];
    struct route rt;

    fx_init(&f, POOL4("  on_down: miss\n"));
    struct route_key rk = fx_key_of(&f, 3, key, sizeof(key));
    fx_down(&f, 3);
    route_request(&f.rp, &rk, PROTO_RF_RETRIEVAL, 1, 0, 0, 1000, &rt);
    ck_assert_int_eq(rt.kind, ROUTE_MISS);
    ck_assert_uint_eq(rt.probe, 3);
    route_clear(&rt);
    ck_assert_uint_eq(route_fanout_server(&f.rp, &rk, &rt), 3);  /* its fragment answers */
    fx_free(&f);

    fx_init(&f, POOL4("  on_down: error\n"));
    rk = fx_key_of(&f, 1, key, sizeof(key));
    fx_down(&f, 1);
    route_request(&f.rp, &rk, 0, 1, 0, 0, 1000, &rt);
    ck_assert_int_eq(rt.kind, ROUTE_FAIL);
    ck_assert_int_eq(rt.err, PROTO_ERR_DOWN);
    ck_assert_uint_eq(rt.down, 1);
    fx_free(&f);
}
END_TEST

START_TEST(test_replicas_write_to_all_live_and_read_rotation)
{
    struct fixture f;
    char key[32];
    struct route rt;
    fx_init(&f, POOL4("  replicas: 3\n  write_to: all\n  read_from: any-live\n"));
    struct route_key rk = fx_key_of(&f, 1, key, sizeof(key));
    uint32_t pref[4];
    ring_preference(f.ring, key, strlen(key), pref, 3);

    route_request(&f.rp, &rk, PROTO_RF_WRITE, 1, 0, 0, 1000, &rt);
    ck_assert_int_eq(rt.kind, ROUTE_COPIES);
    ck_assert_uint_eq(rt.n, 3);
    for (uint32_t i = 0; i < 3; i++)
        ck_assert_uint_eq(rt.to[i], pref[i]);
    ck_assert_int_eq(rt.async, 0);
    fx_down(&f, pref[1]);
    route_request(&f.rp, &rk, PROTO_RF_WRITE, 1, 0, 0, 1000, &rt);
    ck_assert_uint_eq(rt.n, 2);                     /* the live replicas only */
    ck_assert_uint_eq(rt.to[0], pref[0]);
    ck_assert_uint_eq(rt.to[1], pref[2]);

    /* reads rotate over the live replicas with the caller's counter */
    route_request(&f.rp, &rk, PROTO_RF_RETRIEVAL, 1, 0, 0, 1000, &rt);
    ck_assert_uint_eq(rt.to[0], pref[0]);
    ck_assert(rt.events & ROUTE_EV_RR);
    route_request(&f.rp, &rk, PROTO_RF_RETRIEVAL, 1, 0, 1, 1000, &rt);
    ck_assert_uint_eq(rt.to[0], pref[2]);
    /* a script routed by its body has no replicas */
    route_request(&f.rp, &rk, PROTO_RF_WRITE, 1, 1, 0, 1000, &rt);
    ck_assert_int_eq(rt.kind, ROUTE_SEND);
    fx_free(&f);
}
END_TEST

START_TEST(test_replicas_local_zone)
{
    struct fixture f;
    struct route rt;
    fx_init(&f, "ringleader:\n  zone: z2\n"
                "p:\n  listen: 127.0.0.1:1\n  replicas: 2\n  read_from: local-zone\n"
                "  servers:\n"
                "    - { address: 127.0.0.1:11001, name: a, zone: z1 }\n"
                "    - { address: 127.0.0.1:11002, name: b, zone: z2 }\n"
                "    - { address: 127.0.0.1:11003, name: c, zone: z1 }\n"
                "    - { address: 127.0.0.1:11004, name: d, zone: z2 }\n");
    for (int i = 0; i < 100; i++) {
        char key[32];
        snprintf(key, sizeof(key), "z%d", i);
        struct route_key rk = fx_key(&f, key);
        route_request(&f.rp, &rk, PROTO_RF_RETRIEVAL, 1, 0, 0, 1000, &rt);
        ck_assert_int_eq(rt.kind, ROUTE_SEND);
        /* two replicas in distinct zones: one is always in z2 */
        ck_assert_str_eq(f.ring->zones[f.ring->servers[rt.to[0]].zone], "z2");
    }
    fx_free(&f);
}
END_TEST

START_TEST(test_bounded_loads_spill_and_write_follow)
{
    struct fixture f;
    char key[32];
    struct route rt;
    fx_init(&f, POOL4("  balance_factor: 1.25\n  distribution: rendezvous\n"));
    struct route_key rk = fx_key_of(&f, 0, key, sizeof(key));
    route_request(&f.rp, &rk, PROTO_RF_RETRIEVAL, 1, 0, 0, 5000, &rt);
    ck_assert_uint_eq(rt.to[0], 0);                 /* no load: the owner */
    ck_assert(!(rt.events & ROUTE_EV_SPILL));
    atomic_store(&f.health[0].inflight, 100);       /* the owner is far above the mean */
    route_request(&f.rp, &rk, PROTO_RF_RETRIEVAL, 1, 0, 0, 5000, &rt);
    ck_assert_uint_ne(rt.to[0], 0);
    ck_assert(rt.events & ROUTE_EV_SPILL);
    uint32_t spill = rt.to[0];
    /* until the caller notes the spill, a write goes to the owner alone */
    route_request(&f.rp, &rk, PROTO_RF_WRITE, 1, 0, 0, 5000, &rt);
    ck_assert_int_eq(rt.kind, ROUTE_SEND);
    route_spill_note(&f.rp, &rk, spill, 5000);
    route_request(&f.rp, &rk, PROTO_RF_WRITE, 1, 0, 0, 6000, &rt);
    ck_assert_int_eq(rt.kind, ROUTE_COPIES);        /* owner and the server reads spilled to */
    ck_assert_uint_eq(rt.n, 2);
    ck_assert_uint_eq(rt.to[0], 0);
    ck_assert_uint_eq(rt.to[1], spill);
    route_request(&f.rp, &rk, PROTO_RF_WRITE, 1, 0, 0, 5000 + 11000, &rt);
    ck_assert_int_eq(rt.kind, ROUTE_SEND);          /* the memory of the spill expired */
    fx_free(&f);
}
END_TEST

START_TEST(test_prefix_rules)
{
    struct fixture f;
    fx_init(&f, "p:\n  listen: 127.0.0.1:1\n  routes:\n    - { prefix: 'sess:', pool: q }\n"
                "    - { prefix: 's', pool: r }\n"
                "  servers:\n    - 127.0.0.1:11001:1\n"
                "q:\n  listen: 127.0.0.1:2\n  servers:\n    - 127.0.0.1:11002:1\n"
                "r:\n  listen: 127.0.0.1:3\n  servers:\n    - 127.0.0.1:11003:1\n");
    ck_assert_uint_eq(route_rule_pool(&f.rp, "sess:1", 6), 1);   /* first match, in order */
    ck_assert_uint_eq(route_rule_pool(&f.rp, "sx", 2), 2);
    ck_assert_uint_eq(route_rule_pool(&f.rp, "x", 1), ROUTE_NONE);
    ck_assert_uint_eq(route_rule_pool(&f.rp, "", 0), ROUTE_NONE);
    fx_free(&f);
}
END_TEST

START_TEST(test_warm_up_asks_the_previous_owner)
{
    struct fixture f;
    char err[256];
    fx_init(&f, POOL4(""));
    /* the previous ring had servers a and b only: keys that moved to c or d ask them */
    struct fixture old;
    fx_init(&old, "p:\n  listen: 127.0.0.1:1\n  servers:\n"
                  "    - 127.0.0.1:11001:1 a\n    - 127.0.0.1:11002:1 b\n");
    uint32_t map[2] = { 0, 1 };
    f.rp.prev_ring = old.ring;
    f.rp.prev_map = map;
    f.rp.warm_until_ms = 10000;
    int asked = 0, kept = 0;
    for (int i = 0; i < 300; i++) {
        char key[32];
        struct route rt;
        snprintf(key, sizeof(key), "warm:%u:%d", (unsigned)i * 2654435761u, i);
        struct route_key rk = fx_key(&f, key);
        uint32_t before = ring_owner(old.ring, key, strlen(key));
        route_request(&f.rp, &rk, PROTO_RF_RETRIEVAL, 1, 0, 0, 5000, &rt);
        if (rt.to[0] == before) {
            ck_assert_uint_eq(rt.warm_from, ROUTE_NONE);
            kept++;
        } else {
            ck_assert_uint_eq(rt.warm_from, before);
            asked++;
        }
        route_request(&f.rp, &rk, PROTO_RF_RETRIEVAL, 1, 0, 0, 10000, &rt);
        ck_assert_uint_eq(rt.warm_from, ROUTE_NONE);    /* the window closed */
        route_request(&f.rp, &rk, PROTO_RF_WRITE, 1, 0, 0, 5000, &rt);
        ck_assert_uint_eq(rt.warm_from, ROUTE_NONE);    /* only reads warm */
    }
    ck_assert_int_gt(asked, 50);
    ck_assert_int_gt(kept, 50);
    (void)err;
    fx_free(&old);
    fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------ cluster pools */

/*
 * A cluster pool as a snapshot builds it: 4 nodes (a, b masters; c replicates a, d
 * replicates b), slots 0..8191 on a, the rest on b; zones z1 (a, c) and z2 (b, d).
 */
struct cfixture {
    struct fixture      f;
    struct cluster_map *map;
    struct cluster_view *view;
};

static void cfx_init(struct cfixture *cf, const char *read_from, const char *zone)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "ringleader:\n  zone: %s\n"
             "cl:\n  listen: 127.0.0.1:1\n  redis_cluster: true\n  read_from: %s\n"
             "  cluster_zones:\n    \"10.0.0.1:7000\": z1\n    \"10.0.0.3:7000\": z1\n"
             "    \"10.0.0.2:7000\": z2\n    \"10.0.0.4:7000\": z2\n"
             "  servers:\n    - 10.0.0.1:7000:1\n    - 10.0.0.2:7000:1\n"
             "    - 10.0.0.3:7000:1\n    - 10.0.0.4:7000:1\n", zone, read_from);
    char err[512] = "";
    struct fixture *f = &cf->f;
    memset(cf, 0, sizeof(*cf));
    ck_assert_msg(conf_load_buffer("t.yml", yaml, strlen(yaml), &f->conf, err, sizeof(err)) == 0,
                  "conf: %s", err);
    struct conf_pool *cp = &f->conf->pools[0];
    struct cluster_map *m = cluster_map_new();
    const char *hosts[] = { "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4" };
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(cluster_map_node(m, "", hosts[i], 8, 7000,
                                          i < 2 ? CLUSTER_MASTER : CLUSTER_REPLICA,
                                          CLUSTER_ONLINE), i);
    cluster_map_slots(m, 0, 8191, 0);
    cluster_map_slots(m, 8192, 16383, 1);
    cluster_map_replica_of(m, 2, 0);
    cluster_map_replica_of(m, 3, 1);
    ck_assert_int_eq(cluster_map_finish(m), 0);
    /* the snapshot's servers are the nodes in map order, with their zones */
    for (uint32_t i = 0; i < 4; i++) {
        free(cp->servers[i].zone);
        cp->servers[i].zone = strdup(conf_zone_match(cp, m->nodes[i].host, 7000));
    }
    cp->slot_map = malloc(CLUSTER_SLOTS * sizeof(uint32_t));
    memcpy(cp->slot_map, m->owner, CLUSTER_SLOTS * sizeof(uint32_t));
    f->ring = ring_build(cp, err, sizeof(err));
    ck_assert_msg(f->ring != NULL, "ring: %s", err);
    for (uint32_t i = 0; i < 4; i++)
        f->hp[i] = &f->health[i];
    cf->map = m;
    cf->view = cluster_view_build(m, 0);
    f->rp = (struct route_pool){
        .cp = cp, .ring = f->ring, .health = f->hp, .nservers = 4, .shared = &f->shared,
        .zone = f->conf->global.zone, .rules = f->rules, .cluster = cf->view,
    };
}

static void cfx_free(struct cfixture *cf)
{
    cluster_view_free(cf->view);
    cluster_map_free(cf->map);
    fx_free(&cf->f);
}

START_TEST(test_cluster_writes_to_the_slots_master)
{
    struct cfixture cf;
    cfx_init(&cf, "any-live", "z1");
    struct route rt;
    for (int i = 0; i < 500; i++) {
        char key[32];
        snprintf(key, sizeof(key), "w%d", i);
        struct route_key rk = fx_key(&cf.f, key);
        uint32_t slot = cluster_keyslot(key, strlen(key));
        ck_assert_uint_eq(route_key_slot(&rk), slot);
        ck_assert_uint_eq(rk.owner, cf.map->owner[slot]);
        route_request(&cf.f.rp, &rk, PROTO_RF_WRITE, 1, 0, (uint32_t)i, 0, &rt);
        ck_assert_int_eq(rt.kind, ROUTE_SEND);
        ck_assert_uint_eq(rt.to[0], rk.owner);
        /* a master that is down still takes its writes (no other node may) */
        fx_down(&cf.f, rk.owner);
        route_request(&cf.f.rp, &rk, PROTO_RF_WRITE, 1, 0, (uint32_t)i, 0, &rt);
        ck_assert_uint_eq(rt.to[0], rk.owner);
        ck_assert_uint_eq(rt.probe, rk.owner);
        atomic_store(&cf.f.health[rk.owner].state, HEALTH_UP);
    }
    cfx_free(&cf);
}
END_TEST

START_TEST(test_cluster_reads_any_live)
{
    struct cfixture cf;
    cfx_init(&cf, "any-live", "z1");
    struct route rt;
    char key[32];
    struct route_key rk = fx_key_of(&cf.f, 0, key, sizeof(key));   /* a's slot */
    uint32_t seen[4] = { 0 };
    for (uint32_t rr = 0; rr < 100; rr++) {
        route_request(&cf.f.rp, &rk, PROTO_RF_RETRIEVAL, 1, 0, rr, 0, &rt);
        ck_assert(rt.events & ROUTE_EV_RR);
        seen[rt.to[0]]++;
    }
    ck_assert_uint_eq(seen[0], 50);         /* the master and its replica in turn */
    ck_assert_uint_eq(seen[2], 50);
    ck_assert_uint_eq(seen[1] + seen[3], 0);
    /* a replica down, or not online in the map, serves nothing */
    fx_down(&cf.f, 2);
    route_request(&cf.f.rp, &rk, 0, 1, 0, 1, 0, &rt);
    ck_assert_uint_eq(rt.to[0], 0);
    atomic_store(&cf.f.health[2].state, HEALTH_UP);
    cf.view->usable[2] = 0;
    route_request(&cf.f.rp, &rk, 0, 1, 0, 1, 0, &rt);
    ck_assert_uint_eq(rt.to[0], 0);
    cf.view->usable[2] = 1;
    /* the master down: its replica serves every read */
    fx_down(&cf.f, 0);
    for (uint32_t rr = 0; rr < 4; rr++) {
        route_request(&cf.f.rp, &rk, 0, 1, 0, rr, 0, &rt);
        ck_assert_uint_eq(rt.to[0], 2);
    }
    cfx_free(&cf);
}
END_TEST

START_TEST(test_cluster_reads_local_zone_and_primary)
{
    struct cfixture cf;
    char key[32];
    struct route rt;
    cfx_init(&cf, "local-zone", "z2");
    struct route_key rk = fx_key_of(&cf.f, 0, key, sizeof(key));   /* a (z1), replica c (z1) */
    route_request(&cf.f.rp, &rk, 0, 1, 0, 0, 0, &rt);
    ck_assert_uint_eq(rt.to[0], 0);                 /* nothing in z2: the master */
    rk = fx_key_of(&cf.f, 1, key, sizeof(key));     /* b (z2), replica d (z2) */
    route_request(&cf.f.rp, &rk, 0, 1, 0, 0, 0, &rt);
    ck_assert_uint_eq(rt.to[0], 1);                 /* the master is in z2 */
    fx_down(&cf.f, 1);
    route_request(&cf.f.rp, &rk, 0, 1, 0, 0, 0, &rt);
    ck_assert_uint_eq(rt.to[0], 3);                 /* its z2 replica */
    route_request(&cf.f.rp, &rk, PROTO_RF_WRITE, 1, 0, 0, 0, &rt);
    ck_assert_uint_eq(rt.to[0], 1);                 /* writes: the master, down or not */
    cfx_free(&cf);

    cfx_init(&cf, "primary", "z1");
    rk = fx_key_of(&cf.f, 1, key, sizeof(key));
    for (uint32_t rr = 0; rr < 10; rr++) {
        route_request(&cf.f.rp, &rk, 0, 1, 0, rr, 0, &rt);
        ck_assert_uint_eq(rt.to[0], 1);
        ck_assert_uint_eq(rt.events, 0);
    }
    cfx_free(&cf);
}
END_TEST

START_TEST(test_cluster_keys_together_by_slot)
{
    struct cfixture cf;
    cfx_init(&cf, "primary", "z1");
    struct route_key a = fx_key(&cf.f, "{u1}a"), b = fx_key(&cf.f, "{u1}b");
    ck_assert(route_key_together(&cf.f.rp, &a, &b));
    /* two keys of one master but two slots are not together in a cluster pool */
    char k1[32], k2[32];
    struct route_key x = fx_key_of(&cf.f, 0, k1, sizeof(k1)), y;
    for (int i = 0;; i++) {
        snprintf(k2, sizeof(k2), "other:%d", i);
        y = fx_key(&cf.f, k2);
        if (y.owner == x.owner && route_key_slot(&y) != route_key_slot(&x))
            break;
    }
    ck_assert(!route_key_together(&cf.f.rp, &x, &y));
    cf.f.rp.cluster = NULL;                 /* the same keys in a plain pool: one owner */
    ck_assert(route_key_together(&cf.f.rp, &x, &y));
    cf.f.rp.cluster = cf.view;
    cfx_free(&cf);
}
END_TEST

static Suite *route_suite(void)
{
    Suite *s = suite_create("route");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_owner_up_is_the_route);
    tcase_add_test(tc, test_owner_down_fails_over_along_the_preference_list);
    tcase_add_test(tc, test_most_down_fails_open_to_the_owner);
    tcase_add_test(tc, test_on_down_miss_and_error);
    tcase_add_test(tc, test_replicas_write_to_all_live_and_read_rotation);
    tcase_add_test(tc, test_replicas_local_zone);
    tcase_add_test(tc, test_bounded_loads_spill_and_write_follow);
    tcase_add_test(tc, test_prefix_rules);
    tcase_add_test(tc, test_warm_up_asks_the_previous_owner);
    tcase_add_test(tc, test_cluster_writes_to_the_slots_master);
    tcase_add_test(tc, test_cluster_reads_any_live);
    tcase_add_test(tc, test_cluster_reads_local_zone_and_primary);
    tcase_add_test(tc, test_cluster_keys_together_by_slot);
    tcase_add_test(tc, test_group_keys_by_server);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(route_suite)
