/* Unit and property tests for the distributions: balance, movement, weights, preference lists, bounded loads. */
#include "config.h"

#include "check_main.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "dist/dist.h"
#include "dist/dist_schemes.h"
#include "hash/hash.h"

/* dist_ops_of lives in dist.c (the placement branch); until that is merged it
 * may be missing, so the ketama test checks for it at run time. */
#pragma weak dist_ops_of

#define NKEYS 100000u
#define NKEYS_BIG 1000000u

/* The sanitizer build looks for memory errors, which fewer keys find as well: its three
 * slowest tests (minutes under ASan) run on a fifth of the keys or requests there, half
 * for the weights' shares (a 5% bound). The release build checks the numbers at full size. */
#ifdef RL_SANITIZERS
#define SCALED(n, d) ((n) / (d))
#else
#define SCALED(n, d) (n)
#endif
#define NKEYS_WEIGHTS SCALED(NKEYS_BIG, 2)
#define PREF_KEYS SCALED(2000u, 5)
#define BOUNDED_REQS SCALED(100000u, 5)

/* ---------------------------------------------------------------- fixtures */

struct pool {
    uint32_t n;
    struct dist_server *s;
    char (*names)[32];
};

/* n servers named "cache-<i>.example:11211" with the given weights (NULL: 1). */
static struct pool pool_make(uint32_t n, const uint32_t *weights)
{
    struct pool p = {.n = n};
    p.s = calloc(n ? n : 1, sizeof(*p.s));
    p.names = calloc(n ? n : 1, sizeof(*p.names));
    ck_assert_ptr_nonnull(p.s);
    ck_assert_ptr_nonnull(p.names);
    for (uint32_t i = 0; i < n; i++) {
        int len = snprintf(p.names[i], sizeof(p.names[i]), "cache-%u.example:11211", i);
        p.s[i].ident = p.names[i];
        p.s[i].ident_len = (size_t)len;
        p.s[i].weight = weights ? weights[i] : 1;
    }
    return p;
}

/* The same pool without server `drop` (later servers shift down). */
static struct pool pool_without(const struct pool *in, uint32_t drop)
{
    struct pool p = {.n = in->n - 1};
    p.s = calloc(p.n ? p.n : 1, sizeof(*p.s));
    p.names = calloc(p.n ? p.n : 1, sizeof(*p.names));
    for (uint32_t i = 0, j = 0; i < in->n; i++) {
        if (i == drop)
            continue;
        memcpy(p.names[j], in->names[i], sizeof(p.names[j]));
        p.s[j] = in->s[i];
        p.s[j].ident = p.names[j];
        j++;
    }
    return p;
}

static void pool_free(struct pool *p)
{
    free(p->s);
    free(p->names);
}

static uint64_t *key_hashes(uint32_t nkeys)
{
    uint64_t *h = malloc((size_t)nkeys * sizeof(*h));
    ck_assert_ptr_nonnull(h);
    char buf[32];
    for (uint32_t i = 0; i < nkeys; i++) {
        int len = snprintf(buf, sizeof(buf), "key:%u", i);
        h[i] = XXH3_64bits(buf, (size_t)len);
    }
    return h;
}

static void build_ok(const struct dist_ops *ops, struct dist *d, const struct dist_params *prm,
                     const struct pool *p)
{
    char err[256] = "";
    memset(d, 0, sizeof(*d));
    d->ops = ops;        /* dist_build's job; the tests call the ops directly */
    int rc = ops->build(d, prm, p->s, p->n, err, sizeof(err));
    ck_assert_msg(rc == 0, "%s build failed: %s", ops->name, err);
    ck_assert_uint_eq(d->nservers, p->n);
}

static void counts_of(const struct dist *d, const uint64_t *h, uint32_t nkeys, uint64_t *counts)
{
    memset(counts, 0, d->nservers * sizeof(*counts));
    for (uint32_t i = 0; i < nkeys; i++) {
        uint32_t o = dist_lookup(d, h[i]);
        ck_assert_uint_lt(o, d->nservers);
        counts[o]++;
    }
}

static double max_over_mean(const uint64_t *counts, uint32_t n, uint64_t total)
{
    uint64_t mx = 0;
    for (uint32_t i = 0; i < n; i++)
        mx = counts[i] > mx ? counts[i] : mx;
    return (double)mx / ((double)total / n);
}

/* Deterministic PRNG for the tests (splitmix64). */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* ---------------------------------------------------------------- names */

START_TEST(test_ops_names_match_dist_names)
{
    const struct { enum dist_type t; const struct dist_ops *ops; } t[] = {
        {DIST_RENDEZVOUS, &dist_rendezvous_ops}, {DIST_JUMP, &dist_jump_ops},
        {DIST_MAGLEV, &dist_maglev_ops},         {DIST_SLOTS, &dist_slots_ops},
        {DIST_MULTIPROBE, &dist_multiprobe_ops}, {DIST_ANCHOR, &dist_anchor_ops},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        ck_assert_str_eq(t[i].ops->name, dist_name(t[i].t));
}
END_TEST

START_TEST(test_zero_servers_rejected)
{
    const struct dist_ops *all[] = {&dist_rendezvous_ops, &dist_jump_ops, &dist_maglev_ops,
                                    &dist_slots_ops, &dist_multiprobe_ops, &dist_anchor_ops};
    struct dist_server one = {.ident = "a", .ident_len = 1, .weight = 1};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        struct dist d = {0};
        char err[128] = "";
        ck_assert_int_eq(all[i]->build(&d, NULL, &one, 0, err, sizeof(err)), -1);
        ck_assert_msg(strlen(err) > 0, "%s: no reason given", all[i]->name);
    }
}
END_TEST

/* ---------------------------------------------------------------- jump */

static void jump_growth(uint32_t n)
{
    struct pool a = pool_make(n, NULL), b = pool_make(n + 1, NULL);
    struct dist da, db;
    build_ok(&dist_jump_ops, &da, NULL, &a);
    build_ok(&dist_jump_ops, &db, NULL, &b);
    uint64_t *h = key_hashes(NKEYS);
    uint32_t moved = 0;
    for (uint32_t i = 0; i < NKEYS; i++) {
        uint32_t x = dist_lookup(&da, h[i]), y = dist_lookup(&db, h[i]);
        if (x != y) {
            moved++;
            ck_assert_uint_eq(y, n);  /* only into the new bucket */
        }
    }
    double frac = (double)moved / NKEYS;
    ck_assert_msg(frac <= 1.0 / (n + 1) + 0.01, "jump %u->%u moved %.4f", n, n + 1, frac);
    ck_assert_msg(frac >= 0.5 / (n + 1), "jump %u->%u moved only %.4f: new bucket starved",
                  n, n + 1, frac);
    dist_jump_ops.destroy(&da);
    dist_jump_ops.destroy(&db);
    free(h);
    pool_free(&a);
    pool_free(&b);
}

START_TEST(test_jump_growth_moves_fair_share_into_new_bucket)
{
    jump_growth(10);
    jump_growth(100);
}
END_TEST

START_TEST(test_jump_refuses_unequal_weights)
{
    uint32_t w[] = {1, 1, 2};
    struct pool p = pool_make(3, w);
    struct dist d;
    char err[256] = "";
    ck_assert_int_eq(dist_jump_ops.build(&d, NULL, p.s, p.n, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "weights are not supported"));
    uint32_t same[] = {5, 5, 5};
    pool_free(&p);
    p = pool_make(3, same);
    build_ok(&dist_jump_ops, &d, NULL, &p);
    dist_jump_ops.destroy(&d);
    pool_free(&p);
}
END_TEST

/* ---------------------------------------------------------------- rendezvous */

static void rendezvous_removal(const uint32_t *weights)
{
    struct pool a = pool_make(50, weights);
    const uint32_t drop = 17;
    struct pool b = pool_without(&a, drop);
    struct dist da, db;
    build_ok(&dist_rendezvous_ops, &da, NULL, &a);
    build_ok(&dist_rendezvous_ops, &db, NULL, &b);
    uint64_t *h = key_hashes(NKEYS);
    uint32_t moved = 0, owned = 0;
    for (uint32_t i = 0; i < NKEYS; i++) {
        uint32_t x = dist_lookup(&da, h[i]), y = dist_lookup(&db, h[i]);
        if (x == drop) {
            owned++;
            continue;
        }
        if (strcmp(a.names[x], b.names[y]) != 0)
            moved++;
    }
    ck_assert_uint_eq(moved, 0);       /* every other key stays */
    ck_assert_uint_gt(owned, 0);
    dist_rendezvous_ops.destroy(&da);
    dist_rendezvous_ops.destroy(&db);
    free(h);
    pool_free(&a);
    pool_free(&b);
}

START_TEST(test_rendezvous_removal_moves_only_removed_keys)
{
    rendezvous_removal(NULL);
    uint32_t w[50];
    for (uint32_t i = 0; i < 50; i++)
        w[i] = 1 + i % 10;
    rendezvous_removal(w);
}
END_TEST

START_TEST(test_rendezvous_order_independent)
{
    /* Reversing the config order must give every key the same server. */
    struct pool a = pool_make(20, NULL), b = pool_make(20, NULL);
    for (uint32_t i = 0; i < 20; i++) {
        memcpy(b.names[i], a.names[19 - i], sizeof(b.names[i]));
        b.s[i].ident_len = a.s[19 - i].ident_len;
    }
    struct dist da, db;
    build_ok(&dist_rendezvous_ops, &da, NULL, &a);
    build_ok(&dist_rendezvous_ops, &db, NULL, &b);
    uint64_t *h = key_hashes(NKEYS / 10);
    for (uint32_t i = 0; i < NKEYS / 10; i++)
        ck_assert_str_eq(a.names[dist_lookup(&da, h[i])], b.names[dist_lookup(&db, h[i])]);
    dist_rendezvous_ops.destroy(&da);
    dist_rendezvous_ops.destroy(&db);
    free(h);
    pool_free(&a);
    pool_free(&b);
}
END_TEST

/* ---------------------------------------------------------------- maglev */

static void maglev_even(uint32_t n)
{
    struct pool p = pool_make(n, NULL);
    struct dist d;
    struct dist_params prm = {.maglev_table_size = 65537};
    build_ok(&dist_maglev_ops, &d, &prm, &p);
    uint32_t *c = calloc(n, sizeof(*c));
    dist_maglev_slot_counts(&d, c);
    double ideal = 65537.0 / n;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_msg(fabs(c[i] - ideal) <= 1.0, "maglev n=%u server %u has %u slots, ideal %.2f",
                      n, i, c[i], ideal);
        sum += c[i];
    }
    ck_assert_uint_eq(sum, 65537);
    free(c);
    dist_maglev_ops.destroy(&d);
    pool_free(&p);
}

START_TEST(test_maglev_every_backend_gets_m_over_n)
{
    maglev_even(3);
    maglev_even(100);
}
END_TEST

START_TEST(test_maglev_removal_moves_little)
{
    struct pool a = pool_make(100, NULL);
    const uint32_t drop = 37;
    struct pool b = pool_without(&a, drop);
    struct dist da, db;
    build_ok(&dist_maglev_ops, &da, NULL, &a);
    build_ok(&dist_maglev_ops, &db, NULL, &b);
    /* Table comparison: hash s lands in slot s, so every slot is one probe. */
    uint32_t moved = 0;
    for (uint64_t s = 0; s < 65537; s++)
        if (strcmp(a.names[dist_lookup(&da, s)], b.names[dist_lookup(&db, s)]) != 0)
            moved++;
    double frac = moved / 65537.0;
    ck_assert_msg(frac <= 0.02, "maglev 100->99 changed %.4f of the table", frac);
    ck_assert_msg(frac >= 0.0099, "maglev moved %.4f, less than the removed share", frac);
    /* And over real keys. */
    uint64_t *h = key_hashes(NKEYS);
    moved = 0;
    for (uint32_t i = 0; i < NKEYS; i++)
        if (strcmp(a.names[dist_lookup(&da, h[i])], b.names[dist_lookup(&db, h[i])]) != 0)
            moved++;
    ck_assert_msg((double)moved / NKEYS <= 0.02, "maglev moved %.4f of keys",
                  (double)moved / NKEYS);
    free(h);
    dist_maglev_ops.destroy(&da);
    dist_maglev_ops.destroy(&db);
    pool_free(&a);
    pool_free(&b);
}
END_TEST

START_TEST(test_maglev_table_size_validated)
{
    struct pool p = pool_make(10, NULL);
    struct dist d;
    char err[256];
    struct dist_params bad = {.maglev_table_size = 65536};
    ck_assert_int_eq(dist_maglev_ops.build(&d, &bad, p.s, p.n, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "prime"));
    struct dist_params small = {.maglev_table_size = 7};
    ck_assert_int_eq(dist_maglev_ops.build(&d, &small, p.s, p.n, err, sizeof(err)), -1);
    struct dist_params ok = {.maglev_table_size = 1009};
    build_ok(&dist_maglev_ops, &d, &ok, &p);
    uint64_t *h = key_hashes(1000);
    for (uint32_t i = 0; i < 1000; i++)   /* lookup is table[hash % M] */
        ck_assert_uint_eq(dist_lookup(&d, h[i]), dist_lookup(&d, h[i] % 1009));
    free(h);
    dist_maglev_ops.destroy(&d);
    pool_free(&p);
}
END_TEST

/* ---------------------------------------------------------------- weights */

static void weighted_shares(const struct dist_ops *ops, const uint32_t *w, uint32_t n)
{
    struct pool p = pool_make(n, w);
    struct dist d;
    build_ok(ops, &d, NULL, &p);
    uint64_t *h = key_hashes(NKEYS_WEIGHTS);
    uint64_t *c = calloc(n, sizeof(*c));
    counts_of(&d, h, NKEYS_WEIGHTS, c);
    uint64_t W = 0;
    for (uint32_t i = 0; i < n; i++)
        W += w[i];
    for (uint32_t i = 0; i < n; i++) {
        double want = (double)w[i] / W, got = (double)c[i] / NKEYS_WEIGHTS;
        ck_assert_msg(fabs(got - want) / want <= 0.05,
                      "%s: server %u (weight %u) share %.4f, expected %.4f", ops->name, i,
                      w[i], got, want);
    }
    free(c);
    free(h);
    ops->destroy(&d);
    pool_free(&p);
}

START_TEST(test_weights_give_proportional_shares)
{
    const uint32_t w4[] = {1, 1, 2, 3};
    const uint32_t w10[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    weighted_shares(&dist_rendezvous_ops, w4, 4);
    weighted_shares(&dist_rendezvous_ops, w10, 10);
    weighted_shares(&dist_maglev_ops, w4, 4);
    weighted_shares(&dist_maglev_ops, w10, 10);
}
END_TEST

/* ---------------------------------------------------------------- preference lists */

static void preference_props(const struct dist_ops *ops, uint32_t n)
{
    struct pool p = pool_make(n, NULL);
    struct dist d;
    build_ok(ops, &d, NULL, &p);
    uint64_t *h = key_hashes(PREF_KEYS);
    const uint32_t wants[] = {1, 2, 3, 8, n, n + 5};
    uint32_t *out = malloc((n + 5) * sizeof(*out));
    uint8_t *seen = malloc(n);
    for (size_t wi = 0; wi < sizeof(wants) / sizeof(wants[0]); wi++) {
        uint32_t want = wants[wi];
        uint32_t expect = want < n ? want : n;
        for (uint32_t i = 0; i < PREF_KEYS; i++) {
            uint32_t got = dist_preference(&d, h[i], out, want);
            ck_assert_msg(got == expect, "%s n=%u want=%u: %u entries", ops->name, n, want, got);
            ck_assert_uint_eq(out[0], dist_lookup(&d, h[i]));
            memset(seen, 0, n);
            for (uint32_t k = 0; k < got; k++) {
                ck_assert_uint_lt(out[k], n);
                ck_assert_msg(!seen[out[k]], "%s n=%u want=%u: server %u repeated", ops->name,
                              n, want, out[k]);
                seen[out[k]] = 1;
            }
            /* A shorter list is a prefix of a longer one. */
            if (want > 1) {
                uint32_t one;
                ck_assert_uint_eq(dist_preference(&d, h[i], &one, 1), 1);
                ck_assert_uint_eq(one, out[0]);
            }
        }
    }
    ck_assert_uint_eq(dist_preference(&d, h[0], out, 0), 0);
    free(seen);
    free(out);
    free(h);
    ops->destroy(&d);
    pool_free(&p);
}

START_TEST(test_preference_lists_distinct_and_led_by_owner)
{
    const struct dist_ops *all[] = {&dist_rendezvous_ops, &dist_jump_ops, &dist_maglev_ops,
                                    &dist_slots_ops, &dist_multiprobe_ops, &dist_anchor_ops};
    const uint32_t ns[] = {1, 2, 7, 100};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        for (size_t j = 0; j < sizeof(ns) / sizeof(ns[0]); j++)
            preference_props(all[i], ns[j]);
}
END_TEST

START_TEST(test_rendezvous_preference_is_score_order)
{
    /* Rank 2 of rendezvous is the owner once rank 1 is removed. */
    struct pool a = pool_make(30, NULL);
    struct dist da;
    build_ok(&dist_rendezvous_ops, &da, NULL, &a);
    uint64_t *h = key_hashes(2000);
    for (uint32_t i = 0; i < 2000; i++) {
        uint32_t out[3];
        ck_assert_uint_eq(dist_preference(&da, h[i], out, 3), 3);
        struct pool b = pool_without(&a, out[0]);
        struct dist db;
        build_ok(&dist_rendezvous_ops, &db, NULL, &b);
        ck_assert_str_eq(b.names[dist_lookup(&db, h[i])], a.names[out[1]]);
        dist_rendezvous_ops.destroy(&db);
        pool_free(&b);
        if (i == 50)
            break;   /* 50 rebuilds is plenty */
    }
    free(h);
    dist_rendezvous_ops.destroy(&da);
    pool_free(&a);
}
END_TEST

/* ---------------------------------------------------------------- bounded loads */

struct loads {
    uint32_t *v;
};

static uint32_t loads_get(void *ctx, uint32_t server)
{
    return ((struct loads *)ctx)->v[server];
}

/* Skewed workload: 30% of requests for one hot key, the rest spread over
 * 10,000 keys. */
static uint64_t skewed_key(uint64_t *rng, const uint64_t *h)
{
    uint64_t r = rng_next(rng);
    if (r % 100 < 30)
        return h[0];
    return h[1 + (r >> 32) % 10000];
}

/*
 * Place BOUNDED_REQS (100,000) requests one at a time with the full preference list.
 * completions: keep ~2,000 in flight, completing a random one per step.
 * Returns the highest load any server reached; asserts the cap at every step
 * when bounded.
 */
static uint32_t bounded_sim(const struct dist_ops *ops, int bounded, int completions,
                            double factor)
{
    const uint32_t n = 20, reqs = BOUNDED_REQS, inflight_target = 2000;
    struct pool p = pool_make(n, NULL);
    struct dist d;
    build_ok(ops, &d, NULL, &p);
    uint64_t *h = key_hashes(10001);
    struct loads L = {.v = calloc(n, sizeof(uint32_t))};
    uint32_t *inflight = malloc(reqs * sizeof(uint32_t));
    uint32_t ninflight = 0, peak = 0;
    uint64_t total = 0, rng = 42;
    uint32_t pref[20];

    for (uint32_t r = 0; r < reqs; r++) {
        uint64_t kh = skewed_key(&rng, h);
        uint32_t s;
        if (bounded) {
            uint32_t np = dist_preference(&d, kh, pref, n);
            ck_assert_uint_eq(np, n);
            s = dist_bounded_pick(pref, np, loads_get, &L, n, factor);
        } else {
            s = dist_lookup(&d, kh);
        }
        L.v[s]++;
        total++;
        inflight[ninflight++] = s;
        /* The bound, computed independently: ceil(c * mean after placing). */
        uint64_t cap = (uint64_t)ceil(factor * (double)total / n - 1e-9);
        if (bounded)
            ck_assert_msg(L.v[s] <= cap, "step %u: server %u at %u > cap %llu", r, s, L.v[s],
                          (unsigned long long)cap);
        if (L.v[s] > peak)
            peak = L.v[s];
        if (bounded && !completions)   /* loads only grow: nobody is ever above */
            for (uint32_t i = 0; i < n; i++)
                ck_assert_uint_le(L.v[i], cap);
        if (completions && ninflight > inflight_target) {
            uint32_t k = (uint32_t)(rng_next(&rng) % ninflight);
            L.v[inflight[k]]--;
            total--;
            inflight[k] = inflight[--ninflight];
        }
    }
    free(inflight);
    free(L.v);
    free(h);
    ops->destroy(&d);
    pool_free(&p);
    return peak;
}

START_TEST(test_bounded_loads_never_exceed_cap)
{
    const double c = 1.25;
    /* No completions: final mean is 100000/20 = 5000, cap 6250 (a fifth under sanitizers). */
    const uint32_t cap = BOUNDED_REQS / 20 * 5 / 4;
    uint32_t peak = bounded_sim(&dist_rendezvous_ops, 1, 0, c);
    ck_assert_uint_le(peak, cap);
    uint32_t unbounded = bounded_sim(&dist_rendezvous_ops, 0, 0, c);
    ck_assert_msg(unbounded > 2 * cap, "hot server only reached %u", unbounded);

    /* With completions (~2000 in flight, mean 100, cap 125). */
    peak = bounded_sim(&dist_maglev_ops, 1, 1, c);
    ck_assert_uint_le(peak, 126);
    unbounded = bounded_sim(&dist_maglev_ops, 0, 1, c);
    ck_assert_msg(unbounded > 2 * 125, "hot server only reached %u in flight", unbounded);

    /* factor 1 is the tightest bound that holds; below 1 is clamped to it. */
    bounded_sim(&dist_jump_ops, 1, 0, 1.0);
    bounded_sim(&dist_anchor_ops, 1, 1, 1.0);
}
END_TEST

START_TEST(test_bounded_pick_rules)
{
    uint32_t v[4] = {10, 0, 0, 0};   /* sum 10; mean after = 11/4; cap(1.25) = ceil(3.4375) = 4 */
    struct loads L = {.v = v};
    uint32_t pref[4] = {0, 2, 1, 3};
    ck_assert_uint_eq(dist_bounded_pick(pref, 4, loads_get, &L, 4, 1.25), 2);
    v[0] = 3;   /* sum 3, cap ceil(1.25) = 2: server 0 has 3 -> next */
    ck_assert_uint_eq(dist_bounded_pick(pref, 4, loads_get, &L, 4, 1.25), 2);
    v[0] = 1;   /* sum 1, cap ceil(0.625) = 1: 1 is not below 1 */
    ck_assert_uint_eq(dist_bounded_pick(pref, 4, loads_get, &L, 4, 1.25), 2);
    v[0] = 0;
    ck_assert_uint_eq(dist_bounded_pick(pref, 4, loads_get, &L, 4, 1.25), 0);
    /* Short list and nobody with room: the owner. */
    v[0] = 5; v[2] = 5;
    ck_assert_uint_eq(dist_bounded_pick(pref, 2, loads_get, &L, 4, 1.0), 0);
    /* factor below 1 (and NaN) act as 1. */
    v[0] = 1; v[1] = 1; v[2] = 0; v[3] = 1;   /* sum 3, cap ceil(4/4) = 1 */
    ck_assert_uint_eq(dist_bounded_pick(pref, 4, loads_get, &L, 4, 0.5), 2);
    ck_assert_uint_eq(dist_bounded_pick(pref, 4, loads_get, &L, 4, NAN), 2);
}
END_TEST

/* ---------------------------------------------------------------- slots */

static void slots_even(uint32_t n)
{
    struct pool p = pool_make(n, NULL);
    struct dist d;
    build_ok(&dist_slots_ops, &d, NULL, &p);
    uint32_t *c = calloc(n, sizeof(*c));
    uint32_t prev = 0;
    for (uint64_t s = 0; s < DIST_SLOTS_COUNT; s++) {
        uint32_t o = dist_lookup(&d, s);
        ck_assert_uint_lt(o, n);
        ck_assert_uint_ge(o, prev);    /* contiguous ranges in config order */
        ck_assert_uint_eq(dist_lookup(&d, s + ((uint64_t)7 << 14)), o);   /* only 14 bits */
        prev = o;
        c[o]++;
    }
    uint32_t lo = DIST_SLOTS_COUNT / n, hi = (DIST_SLOTS_COUNT + n - 1) / n, sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_uint_ge(c[i], lo);
        ck_assert_uint_le(c[i], hi);
        sum += c[i];
    }
    ck_assert_uint_eq(sum, DIST_SLOTS_COUNT);
    free(c);
    dist_slots_ops.destroy(&d);
    pool_free(&p);
}

START_TEST(test_slots_even_split_covers_every_slot)
{
    slots_even(1);
    slots_even(3);
    slots_even(7);
    slots_even(100);
    slots_even(DIST_SLOTS_COUNT);
    struct pool p = pool_make(DIST_SLOTS_COUNT + 1, NULL);
    struct dist d;
    char err[128];
    ck_assert_int_eq(dist_slots_ops.build(&d, NULL, p.s, p.n, err, sizeof(err)), -1);
    pool_free(&p);
}
END_TEST

START_TEST(test_slots_map_honoured)
{
    uint32_t *map = malloc(DIST_SLOTS_COUNT * sizeof(*map));
    uint64_t rng = 7;
    for (uint32_t s = 0; s < DIST_SLOTS_COUNT; s++)
        map[s] = (uint32_t)(rng_next(&rng) % 5);
    struct pool p = pool_make(6, NULL);   /* server 5 owns no slot */
    struct dist d;
    struct dist_params prm = {.slot_map = map};
    build_ok(&dist_slots_ops, &d, &prm, &p);
    for (uint64_t s = 0; s < DIST_SLOTS_COUNT; s++)
        ck_assert_uint_eq(dist_lookup(&d, s), map[s]);
    /* Preference: owner, then owners of the following slots, slot-less last. */
    uint32_t out[6];
    ck_assert_uint_eq(dist_preference(&d, 100, out, 6), 6);
    ck_assert_uint_eq(out[0], map[100]);
    uint32_t s = 101;
    while (map[s] == map[100])
        s++;
    ck_assert_uint_eq(out[1], map[s]);
    ck_assert_uint_eq(out[5], 5);
    dist_slots_ops.destroy(&d);

    map[9] = 6;   /* out of range */
    char err[256] = "";
    ck_assert_int_eq(dist_slots_ops.build(&d, &prm, p.s, p.n, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "slot 9"));
    free(map);
    pool_free(&p);
}
END_TEST


START_TEST(test_slots_agree_with_redis_cluster_keyslot)
{
    /* Redis Cluster: slot = CRC16-XMODEM(key) mod 16384. The expected slots
     * are CLUSTER KEYSLOT's answers (foo 12182, somekey 11058 are in the
     * Redis docs; all four checked against an independent XMODEM). Only the
     * low 14 bits of the pool hash are used, so twemproxy's crc16, whose
     * upper bits carry its quirk, still gives Redis's slot. */
    const struct { const char *key; uint32_t slot; } t[] = {
        {"foo", 12182}, {"bar", 5061}, {"hello", 866}, {"somekey", 11058},
    };
    uint32_t *map = calloc(DIST_SLOTS_COUNT, sizeof(*map));
    struct pool p = pool_make(2, NULL);
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        memset(map, 0, DIST_SLOTS_COUNT * sizeof(*map));
        map[t[i].slot] = 1;
        struct dist_params prm = {.slot_map = map};
        struct dist d;
        build_ok(&dist_slots_ops, &d, &prm, &p);
        uint64_t h = hash_crc16(t[i].key, strlen(t[i].key));
        ck_assert_msg(dist_lookup(&d, h) == 1, "%s: slot %llu, Redis says %u", t[i].key,
                      (unsigned long long)(h & 16383), t[i].slot);
        dist_slots_ops.destroy(&d);
    }
    free(map);
    pool_free(&p);
}
END_TEST

START_TEST(test_dispatch_reaches_every_scheme)
{
    /* dist_ops_of must hand out these tables (strong links: a weak one would
     * leave the scheme out of a static link), and dist_build must work. */
    const struct { enum dist_type t; const struct dist_ops *ops; } t[] = {
        {DIST_RENDEZVOUS, &dist_rendezvous_ops}, {DIST_JUMP, &dist_jump_ops},
        {DIST_MAGLEV, &dist_maglev_ops},         {DIST_SLOTS, &dist_slots_ops},
        {DIST_MULTIPROBE, &dist_multiprobe_ops}, {DIST_ANCHOR, &dist_anchor_ops},
    };
    if (!dist_ops_of) {
        fprintf(stderr, "check_dist: dist_ops_of missing; skipping the dispatch test\n");
        return;
    }
    struct pool p = pool_make(9, NULL);
    uint64_t *h = key_hashes(1000);
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        ck_assert_ptr_eq(dist_ops_of(t[i].t), t[i].ops);
        struct dist d, direct;
        char err[256] = "";
        ck_assert_msg(dist_build(&d, t[i].t, NULL, p.s, p.n, err, sizeof(err)) == 0, "%s: %s",
                      t[i].ops->name, err);
        ck_assert_int_eq(d.type, t[i].t);
        build_ok(t[i].ops, &direct, NULL, &p);
        for (uint32_t k = 0; k < 1000; k++)
            ck_assert_uint_eq(dist_lookup(&d, h[k]), dist_lookup(&direct, h[k]));
        dist_destroy(&d);
        t[i].ops->destroy(&direct);
    }
    free(h);
    pool_free(&p);
}
END_TEST

/* ---------------------------------------------------------------- multiprobe */

START_TEST(test_multiprobe_balance)
{
    struct pool p = pool_make(100, NULL);
    uint64_t *h = key_hashes(NKEYS_BIG);
    uint64_t c[100];
    struct dist d;
    build_ok(&dist_multiprobe_ops, &d, NULL, &p);   /* default: 21 probes */
    counts_of(&d, h, NKEYS_BIG, c);
    double r21 = max_over_mean(c, 100, NKEYS_BIG);
    ck_assert_msg(r21 < 1.2, "multiprobe k=21: max/mean %.3f", r21);
    dist_multiprobe_ops.destroy(&d);

    /* One probe is plain one-point-per-server consistent hashing: far worse. */
    struct dist_params one = {.probes = 1};
    build_ok(&dist_multiprobe_ops, &d, &one, &p);
    counts_of(&d, h, NKEYS_BIG, c);
    double r1 = max_over_mean(c, 100, NKEYS_BIG);
    ck_assert_msg(r1 > 2.0, "multiprobe k=1: max/mean only %.3f", r1);
    dist_multiprobe_ops.destroy(&d);
    free(h);
    pool_free(&p);
}
END_TEST

START_TEST(test_multiprobe_removal_moves_only_removed_keys)
{
    /* Points depend on identity only: other keys' best probe is unchanged. */
    struct pool a = pool_make(100, NULL);
    struct pool b = pool_without(&a, 42);
    struct dist da, db;
    build_ok(&dist_multiprobe_ops, &da, NULL, &a);
    build_ok(&dist_multiprobe_ops, &db, NULL, &b);
    uint64_t *h = key_hashes(NKEYS);
    for (uint32_t i = 0; i < NKEYS; i++) {
        uint32_t x = dist_lookup(&da, h[i]);
        if (x != 42)
            ck_assert_str_eq(a.names[x], b.names[dist_lookup(&db, h[i])]);
    }
    free(h);
    dist_multiprobe_ops.destroy(&da);
    dist_multiprobe_ops.destroy(&db);
    pool_free(&a);
    pool_free(&b);
}
END_TEST

/* ---------------------------------------------------------------- anchor */

START_TEST(test_anchor_remove_and_restore)
{
    struct pool p = pool_make(50, NULL);
    struct dist d;
    struct dist_params prm = {.anchor_capacity = 128};
    build_ok(&dist_anchor_ops, &d, &prm, &p);
    uint64_t *h = key_hashes(NKEYS);
    uint32_t *orig = malloc(NKEYS * sizeof(*orig));
    for (uint32_t i = 0; i < NKEYS; i++)
        orig[i] = dist_lookup(&d, h[i]);

    const uint32_t gone[] = {17, 3, 40};
    for (size_t g = 0; g < 3; g++) {
        uint32_t before[NKEYS / 10];
        for (uint32_t i = 0; i < NKEYS / 10; i++)
            before[i] = dist_lookup(&d, h[i]);
        ck_assert_int_eq(dist_anchor_remove(&d, gone[g]), 0);
        for (uint32_t i = 0; i < NKEYS / 10; i++) {
            uint32_t now = dist_lookup(&d, h[i]);
            ck_assert_uint_ne(now, gone[g]);
            if (before[i] != gone[g])
                ck_assert_uint_eq(now, before[i]);   /* only its keys moved */
        }
    }
    ck_assert_int_eq(dist_anchor_remove(&d, 17), -1);   /* already out */
    for (size_t g = 3; g-- > 0;) {
        uint32_t back;
        ck_assert_int_eq(dist_anchor_add(&d, &back), 0);
        ck_assert_uint_eq(back, gone[g]);
    }
    uint32_t none;
    ck_assert_int_eq(dist_anchor_add(&d, &none), -1);
    for (uint32_t i = 0; i < NKEYS; i++)
        ck_assert_uint_eq(dist_lookup(&d, h[i]), orig[i]);   /* all restored */

    free(orig);
    free(h);
    dist_anchor_ops.destroy(&d);
    pool_free(&p);
}
END_TEST

START_TEST(test_anchor_append_and_balance)
{
    struct pool a = pool_make(100, NULL), b = pool_make(101, NULL);
    struct dist da, db;
    struct dist_params prm = {.anchor_capacity = 256};
    build_ok(&dist_anchor_ops, &da, &prm, &a);
    build_ok(&dist_anchor_ops, &db, &prm, &b);
    uint64_t *h = key_hashes(NKEYS_BIG);
    uint32_t moved = 0;
    uint64_t c[100] = {0};
    for (uint32_t i = 0; i < NKEYS_BIG; i++) {
        uint32_t x = dist_lookup(&da, h[i]), y = dist_lookup(&db, h[i]);
        c[x]++;
        if (x != y) {
            moved++;
            ck_assert_uint_eq(y, 100);
        }
    }
    ck_assert_msg((double)moved / NKEYS_BIG <= 1.0 / 101 + 0.01, "anchor moved %.4f",
                  (double)moved / NKEYS_BIG);
    ck_assert_uint_gt(moved, 0);
    double r = max_over_mean(c, 100, NKEYS_BIG);
    ck_assert_msg(r < 1.05, "anchor max/mean %.3f", r);
    free(h);
    dist_anchor_ops.destroy(&da);
    dist_anchor_ops.destroy(&db);
    pool_free(&a);
    pool_free(&b);
}
END_TEST

/* ---------------------------------------------------------------- ketama (placement branch) */

START_TEST(test_ketama_160_points_balance)
{
    const struct dist_ops *ops = dist_ops_of ? dist_ops_of(DIST_KETAMA) : NULL;
    if (ops == NULL) {
        fprintf(stderr, "check_dist: ketama not linked (dist_ops_of missing); skipping\n");
        return;
    }
    struct pool p = pool_make(100, NULL);
    struct dist d;
    struct dist_params prm = {.vnodes = 160};
    build_ok(ops, &d, &prm, &p);
    /* ketama consumes 32-bit key hashes. */
    uint64_t *h = key_hashes(NKEYS_BIG);
    for (uint32_t i = 0; i < NKEYS_BIG; i++)
        h[i] &= 0xffffffffu;
    uint64_t c[100];
    counts_of(&d, h, NKEYS_BIG, c);
    double r = max_over_mean(c, 100, NKEYS_BIG);
    ck_assert_msg(r <= 1.3, "ketama 160 points: max/mean %.3f", r);
    fprintf(stderr, "check_dist: ketama 160 points, 100 servers: max/mean %.3f\n", r);
    free(h);
    ops->destroy(&d);
    pool_free(&p);
}
END_TEST

static Suite *dist_suite(void)
{
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("dist");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_ops_names_match_dist_names);
    tcase_add_test(tc, test_zero_servers_rejected);
    tcase_add_test(tc, test_jump_growth_moves_fair_share_into_new_bucket);
    tcase_add_test(tc, test_jump_refuses_unequal_weights);
    tcase_add_test(tc, test_rendezvous_removal_moves_only_removed_keys);
    tcase_add_test(tc, test_rendezvous_order_independent);
    tcase_add_test(tc, test_maglev_every_backend_gets_m_over_n);
    tcase_add_test(tc, test_maglev_removal_moves_little);
    tcase_add_test(tc, test_maglev_table_size_validated);
    tcase_add_test(tc, test_weights_give_proportional_shares);
    tcase_add_test(tc, test_preference_lists_distinct_and_led_by_owner);
    tcase_add_test(tc, test_rendezvous_preference_is_score_order);
    tcase_add_test(tc, test_bounded_loads_never_exceed_cap);
    tcase_add_test(tc, test_bounded_pick_rules);
    tcase_add_test(tc, test_slots_even_split_covers_every_slot);
    tcase_add_test(tc, test_slots_map_honoured);
    tcase_add_test(tc, test_slots_agree_with_redis_cluster_keyslot);
    tcase_add_test(tc, test_dispatch_reaches_every_scheme);
    tcase_add_test(tc, test_multiprobe_balance);
    tcase_add_test(tc, test_multiprobe_removal_moves_only_removed_keys);
    tcase_add_test(tc, test_anchor_remove_and_restore);
    tcase_add_test(tc, test_anchor_append_and_balance);
    tcase_add_test(tc, test_ketama_160_points_balance);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(dist_suite)
