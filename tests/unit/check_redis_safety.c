/* Unit tests for the Redis side of membership safety: invalidations, failover_ttl rewrites, collapsible gets. */
#include "config.h"

#include "check_main.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/proto.h"
#include "proto/redis.h"

static const struct proto_ops *ops = &proto_redis_ops;
#define NOW 1800000000LL

/* The RESP array of the NULL-terminated arguments. */
static void resp(struct buf *b, ...)
{
    va_list ap;
    const char *a;
    int n = 0;
    va_start(ap, b);
    while (va_arg(ap, const char *) != NULL)
        n++;
    va_end(ap);
    buf_appendf(b, "*%d\r\n", n);
    va_start(ap, b);
    while ((a = va_arg(ap, const char *)) != NULL)
        buf_appendf(b, "$%zu\r\n%s\r\n", strlen(a), a);
    va_end(ap);
}

/* Parse req[0..len) (authenticated), forward it after a prefix, cap its TTL; the
 * rewritten request must parse as the same command; out gets it NUL-terminated. */
static int capped(const struct buf *req, uint32_t ttl, char *out, size_t cap)
{
    struct proto_parser p;
    struct proto_req r;
    struct buf b;

    memset(&p, 0, sizeof(p));
    p.flags = PROTO_PF_AUTHED;
    ck_assert_int_eq(ops->parse_req(&p, buf_rptr(req), buf_len(req), &r), (int)buf_len(req));
    buf_init(&b);
    buf_append_str(&b, "+prefix");
    ck_assert_int_eq(ops->forward(&r, buf_rptr(req), &b), 0);
    int rc = ops->ttl_cap(r.cmd, &b, 7, ttl, NOW);
    ck_assert_int_ge(rc, 0);
    snprintf(out, cap, "%.*s", (int)(buf_len(&b) - 7), buf_rptr(&b) + 7);
    struct proto_parser q;
    struct proto_req r2;
    memset(&q, 0, sizeof(q));
    q.flags = PROTO_PF_AUTHED;
    ck_assert_int_eq(ops->parse_req(&q, out, strlen(out), &r2), (int)strlen(out));
    ck_assert_int_eq(r2.cmd, r.cmd);
    ck_assert_int_eq(r2.kind, r.kind);
    proto_parser_free(&p);
    proto_parser_free(&q);
    buf_free(&b);
    return rc;
}

#define CAPPED(want_rc, want, ...)                                  \
    do {                                                            \
        struct buf in_, w_;                                         \
        char out_[512];                                             \
        buf_init(&in_);                                             \
        buf_init(&w_);                                              \
        resp(&in_, __VA_ARGS__, NULL);                              \
        ck_assert_int_eq(capped(&in_, 30, out_, sizeof(out_)), want_rc); \
        if (want != NULL) {                                         \
            ck_assert_str_eq(out_, want);                           \
        }                                                           \
        buf_free(&in_);                                             \
        buf_free(&w_);                                              \
    } while (0)

START_TEST(test_ttl_cap_set)
{
    CAPPED(1, "*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nEX\r\n$2\r\n30\r\n", "SET", "k", "v");
    CAPPED(1, "*5\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nex\r\n$2\r\n30\r\n",
           "set", "k", "v", "ex", "1000");
    CAPPED(0, NULL, "SET", "k", "v", "EX", "10");
    CAPPED(1, "*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$5\r\n30000\r\n",
           "SET", "k", "v", "PX", "900000");
    CAPPED(0, NULL, "SET", "k", "v", "PX", "5000");
    CAPPED(1, "*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$4\r\nEXAT\r\n$10\r\n1800000030\r\n",
           "SET", "k", "v", "EXAT", "1900000000");
    CAPPED(0, NULL, "SET", "k", "v", "KEEPTTL");
    CAPPED(1, "*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nEX\r\n$2\r\n30\r\n",
           "SET", "k", "v", "NX");
    /* a value that reads like an option is a value */
    CAPPED(1, "*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nEX\r\n$2\r\nEX\r\n$2\r\n30\r\n", "SET", "k", "EX");
    /* what Redis 7.0 refuses ("invalid expire time"), left for it to refuse: seconds past
     * LLONG_MAX/1000, milliseconds that overflow from now */
    CAPPED(0, NULL, "SET", "k", "v", "EX", "9223372036854776");
    CAPPED(0, NULL, "SET", "k", "v", "PX", "9223372036854775000");
    CAPPED(0, NULL, "SETEX", "k", "9223372036854775807", "v");
}
END_TEST

START_TEST(test_ttl_cap_other_commands)
{
    CAPPED(1, "*4\r\n$5\r\nSETEX\r\n$1\r\nk\r\n$2\r\n30\r\n$1\r\nv\r\n", "SETEX", "k", "1000", "v");
    CAPPED(0, NULL, "SETEX", "k", "5", "v");
    CAPPED(1, "*4\r\n$6\r\nPSETEX\r\n$1\r\nk\r\n$5\r\n30000\r\n$1\r\nv\r\n",
           "PSETEX", "k", "99999999", "v");
    CAPPED(1, "*4\r\n$5\r\nGETEX\r\n$1\r\nk\r\n$2\r\nEX\r\n$2\r\n30\r\n", "GETEX", "k", "PERSIST");
    CAPPED(0, NULL, "GETEX", "k");
    CAPPED(1, "*3\r\n$6\r\nEXPIRE\r\n$1\r\nk\r\n$2\r\n30\r\n", "EXPIRE", "k", "100");
    CAPPED(1, "*3\r\n$8\r\nEXPIREAT\r\n$1\r\nk\r\n$10\r\n1800000030\r\n",
           "EXPIREAT", "k", "1900000000");
    /* other writes carry no TTL: unchanged (docs/redis.md) */
    CAPPED(0, NULL, "HSET", "h", "f", "v");
    CAPPED(0, NULL, "INCR", "k");
    CAPPED(0, NULL, "SETNX", "k", "v");
}
END_TEST

START_TEST(test_invalidate_and_flush)
{
    struct buf b;
    uint16_t cmd;
    buf_init(&b);
    ck_assert_int_eq(ops->invalidate("a\r\nb", 4, &b, &cmd), 0);
    const char want[] = "*2\r\n$3\r\nDEL\r\n$4\r\na\r\nb\r\n";
    ck_assert_uint_eq(buf_len(&b), sizeof(want) - 1);
    ck_assert_int_eq(memcmp(buf_rptr(&b), want, sizeof(want) - 1), 0);
    ck_assert_uint_lt(cmd, redis_ncommands);
    ck_assert_str_eq(redis_commands[cmd].name, "DEL");
    ck_assert_str_eq(ops->flush, "*1\r\n$7\r\nFLUSHDB\r\n");
    buf_free(&b);
}
END_TEST

static int collapsible(const char *s)
{
    struct proto_parser p;
    struct proto_req r;
    memset(&p, 0, sizeof(p));
    p.flags = PROTO_PF_AUTHED;
    ck_assert_int_eq(ops->parse_req(&p, s, strlen(s), &r), (int)strlen(s));
    int rc = ops->collapsible(&r, s);
    proto_parser_free(&p);
    return rc;
}

START_TEST(test_collapsible_get)
{
    ck_assert_int_eq(collapsible("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), 1);
    ck_assert_int_eq(collapsible("GET k\r\n"), 1);      /* inline: forwarded as RESP */
    ck_assert_int_eq(collapsible("*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n"), 0);
    ck_assert_int_eq(collapsible("*2\r\n$6\r\nGETDEL\r\n$1\r\nk\r\n"), 0);
    ck_assert_int_eq(collapsible("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"), 0);
}
END_TEST

static Suite *redis_safety_suite(void)
{
    Suite *s = suite_create("redis_safety");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ttl_cap_set);
    tcase_add_test(tc, test_ttl_cap_other_commands);
    tcase_add_test(tc, test_invalidate_and_flush);
    tcase_add_test(tc, test_collapsible_get);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(redis_safety_suite)
