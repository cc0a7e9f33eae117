/* Unit tests for the lease map (src/proxy/lease.c) and the leases: key: the bookkeeping, no sockets. */
#include "config.h"

#include "check_main.h"
#include <stdio.h>
#include <string.h>

#include "conf/conf.h"
#include "proxy/lease.h"

START_TEST(test_find_add_remove)
{
    struct lease_map lm;
    ck_assert_int_eq(lease_map_init(&lm), 0);
    ck_assert_ptr_null(lease_map_find(&lm, "k", 1));
    struct lease *a = lease_map_add(&lm, "k", 1, 100);
    struct lease *b = lease_map_add(&lm, "kk", 2, 200);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_eq(lease_map_find(&lm, "k", 1), a);
    ck_assert_ptr_eq(lease_map_find(&lm, "kk", 2), b);
    ck_assert_ptr_null(lease_map_find(&lm, "k\0", 2));    /* bytes and length */
    ck_assert_ptr_null(lease_map_find(&lm, "K", 1));
    ck_assert_uint_eq(lm.keys.n, 2);
    lease_map_remove(&lm, a);
    ck_assert_ptr_null(lease_map_find(&lm, "k", 1));
    ck_assert_ptr_eq(lease_map_find(&lm, "kk", 2), b);
    ck_assert_uint_eq(lm.keys.n, 1);
    lease_map_clear(&lm);
    ck_assert_uint_eq(lm.keys.n, 0);
}
END_TEST

/* Past as many leases as chains the map doubles them; every key is still found. */
START_TEST(test_grows_and_finds_every_key)
{
    struct lease_map lm;
    char key[32];
    ck_assert_int_eq(lease_map_init(&lm), 0);
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(key, sizeof(key), "key:%d", i);
        ck_assert_ptr_nonnull(lease_map_add(&lm, key, (size_t)n, (uint64_t)i));
    }
    ck_assert_uint_ge(lm.keys.mask + 1, 4096);
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(key, sizeof(key), "key:%d", i);
        struct lease *l = lease_map_find(&lm, key, (size_t)n);
        ck_assert_ptr_nonnull(l);
        ck_assert_uint_eq(l->deadline_ms, (uint64_t)i);
    }
    /* remove every other one, from the middle of chains */
    for (int i = 0; i < 5000; i += 2) {
        int n = snprintf(key, sizeof(key), "key:%d", i);
        lease_map_remove(&lm, lease_map_find(&lm, key, (size_t)n));
    }
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(key, sizeof(key), "key:%d", i);
        ck_assert((lease_map_find(&lm, key, (size_t)n) != NULL) == (i % 2 == 1));
    }
    lease_map_clear(&lm);
}
END_TEST

/* The next due time: the oldest lease's end, or a held key's earlier re-read; the
 * re-reads back off from LEASE_PROBE_MIN_MS doubling to LEASE_PROBE_YOUNG_MS for the first
 * LEASE_YOUNG_MS, then to LEASE_PROBE_MAX_MS. */
START_TEST(test_next_due_and_backoff)
{
    struct lease_map lm;
    ck_assert_int_eq(lease_map_init(&lm), 0);
    ck_assert_uint_eq(lease_map_next_due(&lm), UINT64_MAX);
    struct lease *a = lease_map_add(&lm, "a", 1, 2000);
    lease_map_add(&lm, "b", 1, 2500);
    ck_assert_uint_eq(lease_map_next_due(&lm), 2000);
    queue_insert_tail(&lm.holding, &a->holding);
    ck_assert_uint_eq(lease_probe_next(a, 1000), 1000 + LEASE_PROBE_MIN_MS);
    ck_assert_uint_eq(lease_map_next_due(&lm), 1000 + LEASE_PROBE_MIN_MS);
    uint64_t last = 0, now = 1000;
    for (int i = 0; i < 100; i++) {
        uint64_t next = lease_probe_next(a, now);
        ck_assert_uint_le(next - now, now < 1000 + LEASE_YOUNG_MS ? LEASE_PROBE_YOUNG_MS
                                                                  : LEASE_PROBE_MAX_MS);
        ck_assert_uint_ge(next - now, last);
        last = next - now;
        now = next;
    }
    ck_assert_uint_eq(last, LEASE_PROBE_MAX_MS);
    lease_map_remove(&lm, a);           /* leaves the holding list too */
    ck_assert(queue_empty(&lm.holding));
    ck_assert_uint_eq(lease_map_next_due(&lm), 2500);
    lease_map_clear(&lm);
}
END_TEST

/* The mg replies leases: {meta: true} reads: what W, Z, X, f, c and the value say; anything
 * malformed or cut short is OTHER (answered as an error, never read past its end). */
START_TEST(test_mg_parse)
{
    struct lease_mg g;
    const char *r;

    r = "VA 3 f7 c42 W\r\nabc\r\n";
    lease_mg_parse(r, strlen(r), &g);
    ck_assert_int_eq(g.kind, LEASE_MG_VALUE);
    ck_assert(g.win && !g.z && !g.stale);
    ck_assert_uint_eq(g.flags, 7);
    ck_assert_uint_eq(g.cas, 42);
    ck_assert_uint_eq(g.dlen, 3);
    ck_assert(memcmp(g.data, "abc", 3) == 0);
    r = "VA 0 f0 c9 Z\r\n\r\n";
    lease_mg_parse(r, strlen(r), &g);
    ck_assert_int_eq(g.kind, LEASE_MG_VALUE);
    ck_assert(!g.win && g.z && !g.stale && g.dlen == 0);
    r = "VA 3 c23 Z X\r\nabc\r\n";
    lease_mg_parse(r, strlen(r), &g);
    ck_assert(g.z && g.stale && !g.win);
    r = "HD c25 Z\r\n";
    lease_mg_parse(r, strlen(r), &g);
    ck_assert_int_eq(g.kind, LEASE_MG_HEAD);
    ck_assert(g.z && g.cas == 25);
    r = "EN\r\n";
    lease_mg_parse(r, strlen(r), &g);
    ck_assert_int_eq(g.kind, LEASE_MG_MISS);
    r = "HD\r\n";
    lease_mg_parse(r, strlen(r), &g);
    ck_assert_int_eq(g.kind, LEASE_MG_HEAD);
    ck_assert(!g.win && !g.z);
    const char *bad[] = {
        "VA 5 f0\r\nabc\r\n",       /* the value cut short */
        "VA 3 f0\r\nabc",             /* no \r\n after it */
        "VA x\r\n",                   /* no size */
        "VA\r\n",
        "VA 99999999999999999999999 f1\r\n",
        "VA 18446744073709551616 f1\r\n",     /* 2^64 */
        "VA 1 c18446744073709551617\r\nx\r\n",
        "VA 1 fz\r\nx\r\n",         /* a flag that is not a number */
        "VAL 1\r\nx\r\n",
        "SERVER_ERROR out of memory\r\n",
        "CLIENT_ERROR bad command line format\r\n",
        "EN",                           /* no line end */
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        lease_mg_parse(bad[i], strlen(bad[i]), &g);
        ck_assert_msg(g.kind == LEASE_MG_OTHER, "%s", bad[i]);
    }
}
END_TEST

static int conf_try(const char *yaml, struct conf **out, char *err, size_t errlen)
{
    return conf_load_buffer("t.yml", yaml, strlen(yaml), out, err, errlen);
}

START_TEST(test_conf_leases)
{
    struct conf *c = NULL;
    char err[512] = "";

    ck_assert_int_eq(conf_try("p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n", &c, err, sizeof(err)), 0);
    ck_assert_uint_eq(c->pools[0].leases.ttl_ms, 0);        /* off unless asked for */
    conf_free(c);
    ck_assert_int_eq(conf_try("p:\n  listen: 127.0.0.1:22121\n  leases: {}\n  servers:\n   - 127.0.0.1:11211:1\n",
                              &c, err, sizeof(err)), 0);
    ck_assert_uint_eq(c->pools[0].leases.ttl_ms, 2000);
    ck_assert_uint_eq(c->pools[0].leases.max_waiters, 10000);
    conf_free(c);
    ck_assert_int_eq(conf_try("p:\n  listen: 127.0.0.1:22121\n  leases:\n    ttl_ms: 500\n    max_waiters: 7\n"
                              "  servers:\n   - 127.0.0.1:11211:1\n", &c, err, sizeof(err)), 0);
    ck_assert_uint_eq(c->pools[0].leases.ttl_ms, 500);
    ck_assert_uint_eq(c->pools[0].leases.max_waiters, 7);
    conf_free(c);
    ck_assert_int_eq(conf_try("p:\n  listen: 127.0.0.1:22121\n  leases: false\n  servers:\n   - 127.0.0.1:11211:1\n",
                              &c, err, sizeof(err)), 0);
    ck_assert_uint_eq(c->pools[0].leases.ttl_ms, 0);
    conf_free(c);
    ck_assert_int_eq(conf_try("p:\n  listen: 127.0.0.1:22121\n  leases: {lease_prefix: \"__l:\"}\n"
                              "  servers:\n   - 127.0.0.1:11211:1\n", &c, err, sizeof(err)), 0);
    ck_assert_str_eq(c->pools[0].leases.prefix, "__l:");
    ck_assert_int_eq(c->pools[0].leases.meta, 0);
    conf_free(c);
    ck_assert_int_eq(conf_try("p:\n  listen: 127.0.0.1:22121\n  leases: {meta: true}\n"
                              "  servers:\n   - 127.0.0.1:11211:1\n", &c, err, sizeof(err)), 0);
    ck_assert_int_eq(c->pools[0].leases.meta, 1);
    ck_assert_uint_eq(c->pools[0].leases.ttl_ms, 2000);
    conf_free(c);
    const char *bad[][2] = {
        { "p:\n  listen: 127.0.0.1:22121\n  leases: {ttl_ms: 0}\n  servers:\n   - 127.0.0.1:11211:1\n", "ttl_ms" },
        { "p:\n  listen: 127.0.0.1:22121\n  leases: {max_waiters: 0}\n  servers:\n   - 127.0.0.1:11211:1\n", "max_waiters" },
        { "p:\n  listen: 127.0.0.1:22121\n  leases: {ttl: 5}\n  servers:\n   - 127.0.0.1:11211:1\n", "unknown key 'ttl'" },
        { "p:\n  listen: 127.0.0.1:22121\n  leases: {lease_prefix: \"a b\"}\n"
          "  servers:\n   - 127.0.0.1:11211:1\n", "lease_prefix: byte 1" },
        { "p:\n  listen: 127.0.0.1:22121\n  leases: {lease_prefix: "
          "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}\n"
          "  servers:\n   - 127.0.0.1:11211:1\n", "1 to 64 bytes" },
        { "p:\n  listen: 127.0.0.1:22121\n  leases: 5\n  servers:\n   - 127.0.0.1:11211:1\n", "expected {ttl_ms" },
        { "p:\n  listen: 127.0.0.1:22121\n  leases: {meta: true, lease_prefix: \"__l:\"}\n"
          "  servers:\n   - 127.0.0.1:11211:1\n", "choose one" },
        { "p:\n  listen: 127.0.0.1:22121\n  redis: true\n  leases: {meta: true}\n"
          "  servers:\n   - 127.0.0.1:6379:1\n", "a Redis pool takes" },
        { "p:\n  listen: 127.0.0.1:22121\n  leases: {meta: 3}\n"
          "  servers:\n   - 127.0.0.1:11211:1\n", "meta" },
        { "p:\n  listen: 127.0.0.1:22121\n  redis_cluster: true\n  redis: true\n  leases: {}\n"
          "  servers:\n   - 127.0.0.1:7000:1\n", "leases" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        c = NULL;
        err[0] = 0;
        ck_assert_msg(conf_try(bad[i][0], &c, err, sizeof(err)) != 0, "accepted: %s", bad[i][0]);
        ck_assert_msg(strstr(err, bad[i][1]) != NULL, "%s: %s", bad[i][1], err);
    }
}
END_TEST

static Suite *lease_suite(void)
{
    Suite *s = suite_create("lease");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_find_add_remove);
    tcase_add_test(tc, test_grows_and_finds_every_key);
    tcase_add_test(tc, test_next_due_and_backoff);
    tcase_add_test(tc, test_conf_leases);
    tcase_add_test(tc, test_mg_parse);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(lease_suite)
