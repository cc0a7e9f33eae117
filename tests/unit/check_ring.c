/* Unit tests for struct ring and the twemproxy distributions (ketama, modula, random). */
#include "config.h"

#include "check_main.h"
#include <math.h>
#include <md5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "dist/dist.h"
#include "dist/ketama.h"
#include "placement/ring.h"

#define S(lit) (lit), (sizeof(lit) - 1)
#define MAXS 32

/* A hand-built pool (the YAML loader is tested elsewhere). */
struct fixture {
    struct conf_pool pool;
    struct conf_server servers[MAXS];
    char text[MAXS][3][64];
};

static void fx_init(struct fixture *f, enum dist_type dist, enum hash_type hash)
{
    memset(f, 0, sizeof(*f));
    f->pool.name = "pool";
    f->pool.dist = dist;
    f->pool.hash = hash;
    f->pool.servers = f->servers;
}

/* name may be NULL: identity is then host:port (or host for port 11211). */
static void fx_add(struct fixture *f, const char *name, uint16_t port, uint32_t weight,
                   const char *zone)
{
    uint32_t i = f->pool.nservers++;
    struct conf_server *s = &f->servers[i];

    snprintf(f->text[i][0], 64, "127.0.0.1:%u", port);
    snprintf(f->text[i][1], 64, port == 11211 ? "127.0.0.1" : "127.0.0.1:%u", port);
    s->addr.text = f->text[i][0];
    s->addr.host = "127.0.0.1";
    s->addr.port = port;
    s->weight = weight;
    s->name = (char *)name;
    s->ident = name ? (char *)name : f->text[i][1];
    s->label = name ? (char *)name : f->text[i][0];
    s->zone = (char *)zone;
}

static struct ring *fx_build(struct fixture *f)
{
    char err[256] = "";
    struct ring *r = ring_build(&f->pool, err, sizeof(err));
    ck_assert_msg(r != NULL, "ring_build: %s", err);
    return r;
}

static void fx_four(struct fixture *f, enum dist_type dist, enum hash_type hash,
                    const uint32_t w[4])
{
    static const char *names[4] = { "alpha", "beta", "gamma", "delta" };
    fx_init(f, dist, hash);
    for (int i = 0; i < 4; i++)
        fx_add(f, names[i], (uint16_t)(41001 + i), w ? w[i] : 1, NULL);
}

/* ------------------------------------------------------------ hash_tag */

static void expect_tagged(const struct ring *r, const char *key, const char *want)
{
    const char *out;
    size_t len;
    ring_tagged(r, key, strlen(key), &out, &len);
    ck_assert_msg(len == strlen(want) && memcmp(out, want, len) == 0,
                  "tag of '%s' is '%.*s', want '%s'", key, (int)len, out, want);
}

START_TEST(test_tag_rules)
{
    struct fixture f;
    fx_four(&f, DIST_KETAMA, HASH_MURMUR, NULL);
    f.pool.has_hash_tag = 1;
    memcpy(f.pool.hash_tag, "{}", 2);
    struct ring *r = fx_build(&f);

    expect_tagged(r, "{}x", "{}x");            /* empty tag: whole key */
    expect_tagged(r, "{x}{y}", "x");           /* first tag wins */
    expect_tagged(r, "a}b{c}", "c");           /* close brace before open is ignored */
    expect_tagged(r, "no{close:1", "no{close:1");
    expect_tagged(r, "pre{tag7}post", "tag7");
    expect_tagged(r, "{user1}:field2", "user1");
    expect_tagged(r, "plain", "plain");
    expect_tagged(r, "", "");
    ck_assert_uint_eq(ring_key_hash(r, S("{user1}:field2")), ring_key_hash(r, S("user1")));
    ck_assert_uint_eq(ring_owner(r, S("a}b{c3}")), ring_owner(r, S("c3")));
    ring_unref(r);

    /* without hash_tag braces are ordinary bytes */
    f.pool.has_hash_tag = 0;
    r = fx_build(&f);
    expect_tagged(r, "{x}{y}", "{x}{y}");
    ring_unref(r);

    /* any two characters work as a tag */
    f.pool.has_hash_tag = 1;
    memcpy(f.pool.hash_tag, "::", 2);
    r = fx_build(&f);
    expect_tagged(r, "a:bc:d", "bc");
    expect_tagged(r, "a::d", "a::d");
    ring_unref(r);
}
END_TEST

START_TEST(test_one_server_and_empty_key)
{
    struct fixture f;
    fx_init(&f, DIST_KETAMA, HASH_FNV1A_64);
    fx_add(&f, NULL, 11211, 1, NULL);
    struct ring *r = fx_build(&f);
    ck_assert_str_eq(r->servers[0].ident, "127.0.0.1");      /* port 11211 is implied */
    ck_assert_str_eq(r->servers[0].label, "127.0.0.1:11211");
    ck_assert_uint_eq(ring_key_hash(r, S("anything")), 0);   /* one server: no hashing */
    ck_assert_uint_eq(ring_owner(r, S("anything")), 0);
    uint32_t out[4];
    ck_assert_uint_eq(ring_preference(r, S("k"), out, 4), 1);
    ck_assert_uint_eq(out[0], 0);
    ring_unref(r);

    fx_four(&f, DIST_KETAMA, HASH_FNV1A_64, NULL);
    r = fx_build(&f);
    ck_assert_uint_eq(ring_key_hash(r, "", 0), 0);           /* empty key hashes to 0 */
    ck_assert_uint_ne(ring_key_hash(r, S("a")), 0);
    ck_assert_uint_eq(ring_owner(r, "", 0), dist_lookup(&r->dist, 0));
    ring_unref(r);
}
END_TEST

/* ------------------------------------------------------------ ketama */

static uint32_t count_points(const struct ring *r, uint32_t server)
{
    const struct ketama_point *pt;
    uint32_t np = dist__ketama_points(&r->dist, &pt), c = 0;
    for (uint32_t i = 0; i < np; i++)
        c += pt[i].owner == server;
    return c;
}

START_TEST(test_ketama_points)
{
    struct fixture f;
    const struct ketama_point *pt;

    fx_four(&f, DIST_KETAMA, HASH_MD5, NULL);
    struct ring *r = fx_build(&f);
    for (uint32_t s = 0; s < 4; s++)
        ck_assert_uint_eq(count_points(r, s), 160);
    /* md5("alpha-0") = 094656c1 977d226c 830785ed 9aea98e6: four points of alpha */
    uint32_t np = dist__ketama_points(&r->dist, &pt);
    static const uint32_t alpha0[4] = { 0xc1564609, 0x6c227d97, 0xed850783, 0xe698ea9a };
    for (int x = 0; x < 4; x++) {
        int found = 0;
        for (uint32_t i = 0; i < np; i++)
            found |= pt[i].value == alpha0[x] && pt[i].owner == 0;
        ck_assert_msg(found, "point %08x of alpha-0 missing", alpha0[x]);
    }
    for (uint32_t i = 1; i < np; i++)
        ck_assert_uint_le(pt[i - 1].value, pt[i].value);
    ring_unref(r);

    /* weights 1,1,2,3: twemproxy's float32 formula gives 88, 88, 180, 272 */
    static const uint32_t w[4] = { 1, 1, 2, 3 };
    fx_four(&f, DIST_KETAMA, HASH_MD5, w);
    r = fx_build(&f);
    ck_assert_uint_eq(count_points(r, 0), 88);
    ck_assert_uint_eq(count_points(r, 1), 88);
    ck_assert_uint_eq(count_points(r, 2), 180);
    ck_assert_uint_eq(count_points(r, 3), 272);
    ring_unref(r);

    /* vnodes scales the points per server */
    fx_four(&f, DIST_KETAMA, HASH_MD5, NULL);
    f.pool.vnodes = 40;
    r = fx_build(&f);
    for (uint32_t s = 0; s < 4; s++)
        ck_assert_uint_eq(count_points(r, s), 40);
    ring_unref(r);
}
END_TEST

/* The bucketed lookup agrees with a plain scan, including on and next to every point. */
START_TEST(test_ketama_lookup_matches_scan)
{
    struct fixture f;
    fx_init(&f, DIST_KETAMA, HASH_XXH3);
    for (int i = 0; i < 20; i++)
        fx_add(&f, NULL, (uint16_t)(20000 + i), 1 + i % 3, NULL);
    struct ring *r = fx_build(&f);
    const struct ketama_point *pt;
    uint32_t np = dist__ketama_points(&r->dist, &pt);

    for (uint32_t k = 0; k < 200000; k++) {
        uint32_t h;
        if (k < 3 * np)
            h = pt[k / 3].value + (k % 3) - 1;    /* point - 1, point, point + 1 */
        else
            h = (uint32_t)hash_mix64(k);
        uint32_t want = pt[0].owner;
        for (uint32_t i = 0; i < np; i++)
            if (pt[i].value >= h) { want = pt[i].owner; break; }
        ck_assert_uint_eq(dist_lookup(&r->dist, h), want);
    }
    ck_assert_uint_eq(dist_lookup(&r->dist, 0), pt[0].owner);
    ck_assert_uint_eq(dist_lookup(&r->dist, UINT32_MAX),
                      pt[np - 1].value == UINT32_MAX ? pt[np - 1].owner : pt[0].owner);
    ring_unref(r);
}
END_TEST

/* ------------------------------------------------------------ preference lists */

static void assert_distinct(const uint32_t *out, uint32_t n, uint32_t nservers)
{
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_uint_lt(out[i], nservers);
        for (uint32_t j = 0; j < i; j++)
            ck_assert_uint_ne(out[i], out[j]);
    }
}

START_TEST(test_preference_distinct)
{
    static const enum dist_type types[] = { DIST_KETAMA, DIST_MODULA, DIST_RANDOM };
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        struct fixture f;
        fx_init(&f, types[t], HASH_FNV1A_64);
        for (int i = 0; i < 12; i++)
            fx_add(&f, NULL, (uint16_t)(30000 + i), 1 + i % 4, NULL);
        struct ring *r = fx_build(&f);
        for (int k = 0; k < 2000; k++) {
            char key[32];
            uint32_t out[RING_MAX_PREF];
            int len = snprintf(key, sizeof(key), "key:%d", k);
            uint32_t n = ring_preference(r, key, (size_t)len, out, 5);
            ck_assert_uint_eq(n, 5);
            assert_distinct(out, n, 12);
            if (types[t] != DIST_RANDOM)
                ck_assert_uint_eq(out[0], ring_owner(r, key, (size_t)len));
            n = ring_preference(r, key, (size_t)len, out, RING_MAX_PREF);   /* capped at n */
            ck_assert_uint_eq(n, 12);
            assert_distinct(out, n, 12);
        }
        ring_unref(r);
    }
}
END_TEST

START_TEST(test_preference_modula_walks_table)
{
    struct fixture f;
    static const uint32_t w[4] = { 1, 1, 2, 3 };
    fx_four(&f, DIST_MODULA, HASH_FNV1A_64, w);
    struct ring *r = fx_build(&f);
    /* sorted order: beta, alpha, delta, gamma; table b a d d d g g */
    static const uint32_t table[7] = { 1, 0, 3, 3, 3, 2, 2 };
    static const uint32_t want[7][4] = {
        { 1, 0, 3, 2 }, { 0, 3, 2, 1 }, { 3, 2, 1, 0 }, { 3, 2, 1, 0 },
        { 3, 2, 1, 0 }, { 2, 1, 0, 3 }, { 2, 1, 0, 3 },
    };
    for (uint64_t h = 0; h < 14; h++) {
        uint32_t out[4];
        ck_assert_uint_eq(dist_lookup(&r->dist, h), table[h % 7]);
        ck_assert_uint_eq(dist_preference(&r->dist, h, out, 4), 4);
        ck_assert_mem_eq(out, want[h % 7], sizeof(out));
    }
    ring_unref(r);
}
END_TEST

START_TEST(test_preference_zones_first)
{
    struct fixture f;
    static const char *zones[3] = { "us-east-1a", "us-east-1b", "us-east-1c" };
    fx_init(&f, DIST_KETAMA, HASH_FNV1A_64);
    for (int i = 0; i < 9; i++)
        fx_add(&f, NULL, (uint16_t)(31000 + i), 1, zones[i / 3]);   /* 3 per zone */
    struct ring *r = fx_build(&f);
    ck_assert_uint_eq(r->nzones, 4);
    int reordered = 0;

    for (int k = 0; k < 3000; k++) {
        char key[32];
        uint32_t out[9], plain[9];
        int len = snprintf(key, sizeof(key), "key:%d", k);
        uint32_t n = ring_preference(r, key, (size_t)len, out, 9);
        ck_assert_uint_eq(n, 9);
        assert_distinct(out, n, 9);
        ck_assert_uint_eq(out[0], ring_owner(r, key, (size_t)len));
        /* the first three cover the three zones */
        ck_assert_uint_ne(r->servers[out[0]].zone, r->servers[out[1]].zone);
        ck_assert_uint_ne(r->servers[out[0]].zone, r->servers[out[2]].zone);
        ck_assert_uint_ne(r->servers[out[1]].zone, r->servers[out[2]].zone);
        /* and the order is a stable partition of the distribution's walk */
        dist_preference(&r->dist, ring_key_hash(r, key, (size_t)len), plain, 9);
        uint32_t expect[9], ne = 0, used[9] = { 0 }, covered = 0;
        for (int i = 0; i < 9; i++)
            if (!(covered & (1u << r->servers[plain[i]].zone))) {
                covered |= 1u << r->servers[plain[i]].zone;
                expect[ne++] = plain[i];
                used[i] = 1;
            }
        for (int i = 0; i < 9; i++)
            if (!used[i])
                expect[ne++] = plain[i];
        ck_assert_mem_eq(out, expect, sizeof(expect));
        reordered |= memcmp(out, plain, sizeof(plain)) != 0;
        /* a short list is the prefix of the long one */
        uint32_t two[2];
        ck_assert_uint_eq(ring_preference(r, key, (size_t)len, two, 2), 2);
        ck_assert_mem_eq(two, out, sizeof(two));
    }
    ck_assert(reordered);    /* zones actually changed some lists */
    ring_unref(r);
}
END_TEST

/* ------------------------------------------------------------ checksum */

static uint64_t checksum_of(struct fixture *f)
{
    struct ring *r = fx_build(f);
    uint64_t c = r->checksum;
    ck_assert_uint_eq(r->epoch, 1);
    ring_unref(r);
    return c;
}

START_TEST(test_checksum)
{
    struct fixture f;
    fx_four(&f, DIST_KETAMA, HASH_XXH3, NULL);
    f.pool.has_hash_seed = 1;
    f.pool.hash_seed = 7;
    uint64_t base = checksum_of(&f);
    ck_assert_uint_eq(checksum_of(&f), base);             /* stable across builds */

    /* not part of placement: the pool name, listen address, timeouts */
    f.pool.name = "another-name";
    f.pool.timeout_ms = 400;
    f.pool.listen.text = "127.0.0.1:9999";
    ck_assert_uint_eq(checksum_of(&f), base);
    /* an explicit default equals the implicit one */
    f.pool.vnodes = 160;
    ck_assert_uint_eq(checksum_of(&f), base);

#define CHANGED(stmt) do {                                   \
        struct fixture g = f;                                \
        g.pool.servers = g.servers;                          \
        for (uint32_t i_ = 0; i_ < g.pool.nservers; i_++) {  \
            g.servers[i_].addr.text = g.text[i_][0];         \
            if (g.servers[i_].name == NULL)                  \
                g.servers[i_].ident = g.text[i_][1];         \
        }                                                    \
        struct fixture *fp = &g;                             \
        stmt;                                                \
        ck_assert_msg(checksum_of(fp) != base, "checksum ignores: %s", #stmt); \
    } while (0)

    CHANGED(fp->pool.dist = DIST_MODULA);
    CHANGED(fp->pool.hash = HASH_XXH64);
    CHANGED(fp->pool.hash_seed = 8);
    CHANGED((fp->pool.has_hash_tag = 1, memcpy(fp->pool.hash_tag, "{}", 2)));
    CHANGED(fp->pool.vnodes = 80);
    CHANGED(fp->servers[2].ident = "gamma2");
    CHANGED(fp->servers[2].addr.text = "127.0.0.1:41999");
    CHANGED(fp->servers[3].weight = 2);
    CHANGED(fp->servers[1].zone = "z1");
    CHANGED((fp->servers[0] = f.servers[1], fp->servers[1] = f.servers[0]));   /* order */
    CHANGED(fp->pool.nservers = 3);
#undef CHANGED

    /* a tag with different characters differs too */
    f.pool.has_hash_tag = 1;
    memcpy(f.pool.hash_tag, "{}", 2);
    uint64_t braces = checksum_of(&f);
    memcpy(f.pool.hash_tag, "[]", 2);
    ck_assert_uint_ne(checksum_of(&f), braces);

    /* a seed is ignored (and not hashed) for the twemproxy hashes */
    fx_four(&f, DIST_KETAMA, HASH_FNV1A_64, NULL);
    uint64_t unseeded = checksum_of(&f);
    f.pool.has_hash_seed = 1;
    f.pool.hash_seed = 99;
    ck_assert_uint_eq(checksum_of(&f), unseeded);
}
END_TEST

/* ------------------------------------------------------------ shares and movement */

START_TEST(test_shares)
{
    struct fixture f;
    double sh[MAXS], sum = 0;
    static const uint32_t w[4] = { 1, 1, 2, 3 };

    fx_four(&f, DIST_MODULA, HASH_FNV1A_64, w);
    struct ring *r = fx_build(&f);
    ring_shares(r, sh, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq_tol(sh[i], w[i] / 7.0, 1e-12);
    ring_unref(r);

    fx_four(&f, DIST_KETAMA, HASH_FNV1A_64, w);
    r = fx_build(&f);
    ring_shares(r, sh, 0);
    for (int i = 0; i < 4; i++) {
        sum += sh[i];
        ck_assert_double_eq_tol(sh[i], w[i] / 7.0, 0.04);   /* ketama is only near fair */
    }
    ck_assert_double_eq_tol(sum, 1.0, 1e-12);
    /* exact: counting a sweep of the hash space agrees */
    uint32_t cnt[4] = { 0 };
    for (uint64_t h = 0; h < (1ull << 32); h += 4099)
        cnt[dist_lookup(&r->dist, h)]++;
    uint64_t total = cnt[0] + cnt[1] + cnt[2] + cnt[3];
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq_tol((double)cnt[i] / total, sh[i], 0.002);
    ring_unref(r);

    fx_four(&f, DIST_RANDOM, HASH_FNV1A_64, w);
    r = fx_build(&f);
    ring_shares(r, sh, 200000);
    for (int i = 0; i < 4; i++)                      /* random ignores weight */
        ck_assert_double_eq_tol(sh[i], 0.25, 0.01);
    ring_unref(r);
}
END_TEST

START_TEST(test_moved_fraction)
{
    struct fixture f4, f5;
    double floor, sh[MAXS];

    fx_four(&f4, DIST_KETAMA, HASH_FNV1A_64, NULL);
    f5 = f4;
    f5.pool.servers = f5.servers;
    fx_add(&f5, "epsilon", 41005, 1, NULL);
    struct ring *a = fx_build(&f4), *b = fx_build(&f5);

    ck_assert_double_eq(ring_moved_fraction(a, a, 0, &floor), 0.0);
    ck_assert_double_eq(floor, 0.0);

    /* adding a ketama server moves exactly the keys it now owns */
    double moved = ring_moved_fraction(a, b, 0, &floor);
    ring_shares(b, sh, 0);
    ck_assert_double_eq_tol(moved, sh[4], 1e-12);
    ck_assert_double_eq_tol(floor, 0.2, 1e-12);
    /* removing it moves what it owned */
    ck_assert_double_eq_tol(ring_moved_fraction(b, a, 0, &floor), sh[4], 1e-12);
    ck_assert_double_eq_tol(floor, 0.2, 1e-12);

    /* the exact figure agrees with counting keys */
    uint32_t diff = 0, nk = 200000;
    for (uint32_t k = 0; k < nk; k++) {
        char key[32];
        int len = snprintf(key, sizeof(key), "key:%u", k);
        diff += strcmp(a->servers[ring_owner(a, key, (size_t)len)].ident,
                       b->servers[ring_owner(b, key, (size_t)len)].ident) != 0;
    }
    ck_assert_double_eq_tol((double)diff / nk, moved, 0.01);
    ring_unref(b);

    /* reweighting: floor is the sum of the positive share differences */
    f5 = f4;
    f5.pool.servers = f5.servers;
    f5.servers[0].weight = 3;                     /* 1/4 each -> 3/6, 1/6, 1/6, 1/6 */
    b = fx_build(&f5);
    moved = ring_moved_fraction(a, b, 0, &floor);
    ck_assert_double_eq_tol(floor, 0.5 - 0.25, 1e-12);
    ck_assert(moved >= floor - 0.03 && moved < 0.6);
    ring_unref(b);

    /* modula moves most keys when a server is added; sampled */
    struct fixture m4, m5;
    fx_four(&m4, DIST_MODULA, HASH_FNV1A_64, NULL);
    m5 = m4;
    m5.pool.servers = m5.servers;
    fx_add(&m5, "epsilon", 41005, 1, NULL);
    struct ring *ma = fx_build(&m4), *mb = fx_build(&m5);
    moved = ring_moved_fraction(ma, mb, 100000, &floor);
    ck_assert_double_eq_tol(moved, 0.8, 0.01);
    ck_assert_double_eq_tol(floor, 0.2, 1e-12);
    ring_unref(ma);
    ring_unref(mb);

    /* a changed hash function: compared over keys */
    f5 = f4;
    f5.pool.servers = f5.servers;
    f5.pool.hash = HASH_MD5;
    b = fx_build(&f5);
    moved = ring_moved_fraction(a, b, 50000, &floor);
    ck_assert_double_eq(floor, 0.0);
    ck_assert(moved > 0.6);
    ring_unref(b);
    ring_unref(a);
}
END_TEST

/* ------------------------------------------------------------ refcount, errors, registry */

START_TEST(test_refcount_and_errors)
{
    struct fixture f;
    char err[256];
    fx_four(&f, DIST_KETAMA, HASH_FNV1A_64, NULL);
    struct ring *r = fx_build(&f);
    ring_ref(r);
    ck_assert_uint_eq(atomic_load(&r->refs), 2);
    ring_unref(r);
    ck_assert_uint_eq(atomic_load(&r->refs), 1);
    ring_unref(r);   /* frees; ASan checks the rest */

    f.pool.nservers = 0;
    ck_assert_ptr_null(ring_build(&f.pool, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "no servers"));

    fx_four(&f, DIST_KETAMA, HASH_FNV1A_64, NULL);
    f.pool.vnodes = 2;           /* fewer than one hash per server */
    ck_assert_ptr_null(ring_build(&f.pool, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "ketama"));
}
END_TEST

/*
 * The schemes of the other distribution work are linked weakly until they
 * exist; once a scheme's source is in the tree its ops must resolve (a weak
 * reference does not pull a member out of a static archive).
 */
START_TEST(test_other_schemes_linked_when_present)
{
    static const struct { enum dist_type t; const char *file; } other[] = {
        { DIST_RENDEZVOUS, "rendezvous" }, { DIST_JUMP, "jump" }, { DIST_MAGLEV, "maglev" },
        { DIST_SLOTS, "slots" }, { DIST_MULTIPROBE, "multiprobe" }, { DIST_ANCHOR, "anchor" },
    };
    const char *top = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
    struct dist_server srv = { "a", 1, 1, 0 };

    ck_assert_ptr_eq(dist_ops_of(DIST_KETAMA), &dist_ketama_ops);
    ck_assert_ptr_eq(dist_ops_of(DIST_MODULA), &dist_modula_ops);
    ck_assert_ptr_eq(dist_ops_of(DIST_RANDOM), &dist_random_ops);
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        char path[4096], err[128] = "";
        struct dist d;
        snprintf(path, sizeof(path), "%s/src/dist/%s.c", top, other[i].file);
        if (access(path, R_OK) == 0) {
            ck_assert_msg(dist_ops_of(other[i].t) != NULL, "%s exists but is not linked", path);
        } else if (dist_ops_of(other[i].t) == NULL) {
            ck_assert_int_eq(dist_build(&d, other[i].t, NULL, &srv, 1, err, sizeof(err)), -1);
            ck_assert_ptr_nonnull(strstr(err, "is not available"));
            dist_destroy(&d);
        }
    }
}
END_TEST

static Suite *ring_suite(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_tag_rules);
    tcase_add_test(tc, test_one_server_and_empty_key);
    tcase_add_test(tc, test_ketama_points);
    tcase_add_test(tc, test_ketama_lookup_matches_scan);
    tcase_add_test(tc, test_preference_distinct);
    tcase_add_test(tc, test_preference_modula_walks_table);
    tcase_add_test(tc, test_preference_zones_first);
    tcase_add_test(tc, test_checksum);
    tcase_add_test(tc, test_shares);
    tcase_add_test(tc, test_moved_fraction);
    tcase_add_test(tc, test_refcount_and_errors);
    tcase_add_test(tc, test_other_schemes_linked_when_present);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(ring_suite)
