/* Unit tests for the memcached side of membership safety: invalidations, failover_ttl rewrites, collapsible gets, reply comparison. */
#include "config.h"

#include "check_main.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache.h"
#include "proto/proto.h"

static const struct proto_ops *ops = &proto_memcache_ops;
#define NOW 1800000000LL       /* a wall clock in the future of every test */

/* Parse one request (whole), check it is complete. */
static void parse(struct proto_parser *p, struct proto_req *r, const char *s)
{
    memset(p, 0, sizeof(*p));
    ck_assert_int_eq(ops->parse_req(p, s, strlen(s), r), (int)strlen(s));
}

/* What forward() and then ttl_cap() make of a request line (NUL-terminated out). */
static int capped(const char *line, uint32_t ttl, char *out, size_t cap)
{
    struct proto_parser p;
    struct proto_req r;
    struct buf b;

    parse(&p, &r, line);
    buf_init(&b);
    ck_assert_int_eq(buf_append_str(&b, "prefix"), 0);   /* other requests before it */
    ck_assert_int_eq(ops->forward(&r, line, &b), 0);
    int rc = ops->ttl_cap(r.cmd, &b, 6, ttl, NOW);
    ck_assert_int_ge(rc, 0);
    ck_assert_int_eq(memcmp(buf_rptr(&b), "prefix", 6), 0);
    snprintf(out, cap, "%.*s", (int)(buf_len(&b) - 6), buf_rptr(&b) + 6);
    /* what is forwarded parses as the same command and key */
    struct proto_parser q;
    struct proto_req r2;
    parse(&q, &r2, out);
    ck_assert_int_eq(r2.cmd, r.cmd);
    ck_assert_uint_eq(r2.nkeys, r.nkeys);
    ck_assert_int_eq(r2.kind, r.kind);
    proto_parser_free(&p);
    proto_parser_free(&q);
    buf_free(&b);
    return rc;
}

START_TEST(test_ttl_cap_classic_commands)
{
    char out[256];
    ck_assert_int_eq(capped("set k 5 0 3\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "set k 5 30 3\r\n");
    ck_assert_int_eq(capped("add k 0 1000 3\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "add k 0 30 3\r\n");
    ck_assert_int_eq(capped("replace k 0 10 3\r\n", 30, out, sizeof(out)), 0);  /* shorter: kept */
    ck_assert_str_eq(out, "replace k 0 10 3\r\n");
    ck_assert_int_eq(capped("cas k 0 0 3 77\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "cas k 0 30 3 77\r\n");
    ck_assert_int_eq(capped("set k 0 -1 3\r\n", 30, out, sizeof(out)), 0);   /* expired already */
    /* a unix time: beyond now + ttl is capped (relative), before it kept */
    ck_assert_int_eq(capped("set k 0 1800001000 3\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "set k 0 30 3\r\n");
    ck_assert_int_eq(capped("set k 0 1800000010 3\r\n", 30, out, sizeof(out)), 0);
    /* noreply is gone from what is forwarded; a bare LF line ends as it did */
    ck_assert_int_eq(capped("set k 0 0 3 noreply\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "set k 0 30 3\r\n");
    ck_assert_int_eq(capped("set  k  0  0  3\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "set k 0 30 3\n");
    ck_assert_int_eq(capped("touch k 0\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "touch k 30\r\n");
    ck_assert_int_eq(capped("gat 0 k\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "gat 30 k\r\n");
    ck_assert_int_eq(capped("gats 5 k\r\n", 30, out, sizeof(out)), 0);
    /* append and prepend keep the item's TTL; reads and deletes carry none */
    ck_assert_int_eq(capped("append k 0 0 3\r\n", 30, out, sizeof(out)), 0);
    ck_assert_int_eq(capped("get k\r\n", 30, out, sizeof(out)), 0);
    ck_assert_int_eq(capped("delete k\r\n", 30, out, sizeof(out)), 0);
}
END_TEST

START_TEST(test_ttl_cap_meta_commands)
{
    char out[256];
    ck_assert_int_eq(capped("ms k 3\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "ms k 3 T30\r\n");
    ck_assert_int_eq(capped("ms k 3 T0 F5\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "ms k 3 T30 F5\r\n");
    ck_assert_int_eq(capped("ms k 3 F5 T7\r\n", 30, out, sizeof(out)), 0);
    ck_assert_int_eq(capped("ms k 3 T100 q\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "ms k 3 T30\r\n");        /* q is the proxy's to strip */
    ck_assert_int_eq(capped("mg k v T100\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "mg k v T30\r\n");
    ck_assert_int_eq(capped("mg k v N0\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "mg k v N30\r\n");
    ck_assert_int_eq(capped("mg k v\r\n", 30, out, sizeof(out)), 0);     /* no touch */
    ck_assert_int_eq(capped("ma k N0 D1\r\n", 30, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "ma k N30 D1\r\n");
    /* a key starting with T is a key, not a flag */
    ck_assert_int_eq(capped("mg T5 v\r\n", 30, out, sizeof(out)), 0);
    /* an exptime memcached's safe_strtol refuses stays refused: not capped */
    ck_assert_int_eq(capped("mg k v T4294967296\r\n", 30, out, sizeof(out)), 0);
    ck_assert_int_eq(capped("ms k 3 T-2147483649\r\n", 30, out, sizeof(out)), 0);
    /* ms at memcached's 19 tokens: a T added would make 20, refused before the data
     * block is read (the value then read as commands): left as it is */
    ck_assert_int_eq(capped("ms k 3 c F1 I k O1 s M1 a b1 c1 d1 e1 f1 g1 h1 i1\r\n", 30, out,
                            sizeof(out)), 0);
    ck_assert_int_eq(capped("ms k 3 c F1 I k O1 s M1 a b1 c1 d1 e1 f1 g1 h1\r\n", 30, out,
                            sizeof(out)), 1);
    ck_assert_str_eq(out, "ms k 3 c F1 I k O1 s M1 a b1 c1 d1 e1 f1 g1 h1 T30\r\n");
}
END_TEST

START_TEST(test_invalidate_text_and_base64_keys)
{
    struct buf b;
    uint16_t cmd;
    buf_init(&b);
    ck_assert_int_eq(ops->invalidate("user:1", 6, &b, &cmd), 0);
    ck_assert_int_eq(cmd, MEMCACHE_CMD_DELETE);
    ck_assert_int_eq((int)buf_len(&b), 15);
    ck_assert_int_eq(memcmp(buf_rptr(&b), "delete user:1\r\n", 15), 0);
    b.rpos = b.wpos = 0;
    /* bytes the text protocol cannot carry (a meta base64 key, decoded) */
    ck_assert_int_eq(ops->invalidate("a b\r\n", 5, &b, &cmd), 0);
    ck_assert_int_eq(cmd, MEMCACHE_CMD_MD);
    ck_assert_int_eq((int)buf_len(&b), (int)strlen("md YSBiDQo= b\r\n"));
    ck_assert_int_eq(memcmp(buf_rptr(&b), "md YSBiDQo= b\r\n", buf_len(&b)), 0);
    /* which the parser reads back as a meta delete of those bytes */
    struct proto_parser p;
    struct proto_req r;
    char line[64];
    snprintf(line, sizeof(line), "%.*s", (int)buf_len(&b), buf_rptr(&b));
    parse(&p, &r, line);
    char dec[PROTO_KEY_DECODED_MAX];
    size_t len;
    const char *k = ops->key_bytes(&r, line, 0, dec, &len);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(memcmp(k, "a b\r\n", 5), 0);
    proto_parser_free(&p);
    buf_free(&b);
    ck_assert_str_eq(ops->flush, "flush_all\r\n");
}
END_TEST

static int collapsible(const char *line)
{
    struct proto_parser p;
    struct proto_req r;
    parse(&p, &r, line);
    int rc = ops->collapsible(&r, line);
    proto_parser_free(&p);
    return rc;
}

START_TEST(test_collapsible_gets)
{
    ck_assert_int_eq(collapsible("get k\r\n"), 1);
    ck_assert_int_eq(collapsible("gets k\r\n"), 1);
    ck_assert_int_eq(collapsible("mg k v f t\r\n"), 1);
    ck_assert_int_eq(collapsible("mg k\r\n"), 1);
    ck_assert_int_eq(collapsible("get a b\r\n"), 0);     /* multi-key: fragments */
    ck_assert_int_eq(collapsible("gat 10 k\r\n"), 0);
    ck_assert_int_eq(collapsible("mg k v N30\r\n"), 0);  /* memcached's own stampede guard */
    ck_assert_int_eq(collapsible("mg k v R30\r\n"), 0);
    ck_assert_int_eq(collapsible("mg k v q\r\n"), 0);
    ck_assert_int_eq(collapsible("mg k v T30\r\n"), 0);  /* a touch: a write */
    ck_assert_int_eq(collapsible("delete k\r\n"), 0);
    ck_assert_int_eq(collapsible("set k 0 0 1\r\n"), 0);
}
END_TEST

static int same(uint16_t cmd, const char *a, const char *b)
{
    return ops->reply_equal(cmd, a, strlen(a), b, strlen(b));
}

START_TEST(test_reply_equal)
{
    ck_assert(same(MEMCACHE_CMD_GET, "VALUE k 0 3\r\nabc\r\nEND\r\n", "VALUE k 0 3\r\nabc\r\nEND\r\n"));
    ck_assert(same(MEMCACHE_CMD_GETS, "VALUE k 0 3 11\r\nabc\r\nEND\r\n",
                   "VALUE k 0 3 97\r\nabc\r\nEND\r\n"));      /* the cas unique is the pool's */
    ck_assert(!same(MEMCACHE_CMD_GET, "VALUE k 0 3\r\nabc\r\nEND\r\n", "VALUE k 0 3\r\nabd\r\nEND\r\n"));
    ck_assert(!same(MEMCACHE_CMD_GET, "VALUE k 0 3\r\nabc\r\nEND\r\n", "VALUE k 1 3\r\nabc\r\nEND\r\n"));
    ck_assert(!same(MEMCACHE_CMD_GET, "VALUE k 0 3\r\nabc\r\nEND\r\n", "END\r\n"));
    ck_assert(!same(MEMCACHE_CMD_GET, "END\r\n", "VALUE k 0 3\r\nabc\r\nEND\r\n"));
    ck_assert(same(MEMCACHE_CMD_GET, "END\r\n", "END\r\n"));
    /* a value that looks like a line stays data */
    ck_assert(!same(MEMCACHE_CMD_GET, "VALUE k 0 5\r\nEND\r\n\r\nEND\r\n", "VALUE k 0 5\r\nEND\r\nx\r\nEND\r\n"));
    ck_assert(same(MEMCACHE_CMD_MG, "VA 2 f5 t30 c9\r\nhi\r\n", "VA 2 f5 t29 c1\r\nhi\r\n"));
    ck_assert(!same(MEMCACHE_CMD_MG, "VA 2 f5\r\nhi\r\n", "VA 2 f6\r\nhi\r\n"));
    ck_assert(!same(MEMCACHE_CMD_MG, "VA 2 f5\r\nhi\r\n", "VA 2 f5\r\nho\r\n"));
    ck_assert(!same(MEMCACHE_CMD_MG, "VA 2\r\nhi\r\n", "EN\r\n"));
    ck_assert(same(MEMCACHE_CMD_MG, "HD t5\r\n", "HD t7\r\n"));
    ck_assert(same(MEMCACHE_CMD_SET, "STORED\r\n", "STORED\r\n"));
    ck_assert(!same(MEMCACHE_CMD_SET, "STORED\r\n", "NOT_STORED\r\n"));
    ck_assert(!same(MEMCACHE_CMD_DELETE, "DELETED\r\n", "NOT_FOUND\r\n"));
}
END_TEST

static Suite *memcache_safety_suite(void)
{
    Suite *s = suite_create("memcache_safety");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ttl_cap_classic_commands);
    tcase_add_test(tc, test_ttl_cap_meta_commands);
    tcase_add_test(tc, test_invalidate_text_and_base64_keys);
    tcase_add_test(tc, test_collapsible_gets);
    tcase_add_test(tc, test_reply_equal);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(memcache_safety_suite)
