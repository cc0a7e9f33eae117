/* check_users.c: users' pieces in the protocol layer — glob matching as Redis's ACL patterns, command categories, namespaces added to requests and taken off replies. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "lib/buf.h"
#include "proto/glob.h"
#include "proto/memcache.h"
#include "proto/proto.h"
#include "proto/redis.h"

#include "check_main.h"

static int gm(const char *p, const char *s)
{
    return glob_match(p, strlen(p), s, strlen(s));
}

/* Redis's stringmatchlen answers for these (redis-server 7.0.15's KEYS over the same names). */
START_TEST(glob_redis_rules)
{
    ck_assert(gm("*", ""));
    ck_assert(gm("*", "abc"));
    ck_assert(gm("billing:*", "billing:"));
    ck_assert(gm("billing:*", "billing:x:y"));
    ck_assert(!gm("billing:*", "billing"));
    ck_assert(!gm("billing:*", "xbilling:a"));
    ck_assert(gm("h?llo", "hello"));
    ck_assert(!gm("h?llo", "hllo"));
    ck_assert(gm("h[ae]llo", "hallo"));
    ck_assert(!gm("h[ae]llo", "hillo"));
    ck_assert(gm("h[^e]llo", "hallo"));
    ck_assert(!gm("h[^e]llo", "hello"));
    ck_assert(gm("h[a-b]llo", "hbllo"));
    ck_assert(gm("h[b-a]llo", "hallo"));          /* a reversed range reads in order */
    ck_assert(!gm("h[a-b]llo", "hcllo"));
    ck_assert(gm("a\\*b", "a*b"));
    ck_assert(!gm("a\\*b", "axb"));
    ck_assert(gm("[\\]]", "]"));
    ck_assert(gm("*a*b*c*", "xxaxxbxxcxx"));
    ck_assert(!gm("*a*b*c*", "xxaxxcxxbxx"));
    ck_assert(gm("a**b", "ab"));
    ck_assert(gm("[abc", "a"));                    /* a set never closed ends with the pattern */
    ck_assert(!gm("", "a"));
    ck_assert(gm("", ""));
    /* a long run of stars against a long miss ends (no exponential backtracking) */
    char pat[202], s[4001];
    for (int i = 0; i < 200; i += 2) {
        pat[i] = '*';
        pat[i + 1] = 'a';
    }
    pat[200] = 'b';
    pat[201] = '\0';
    memset(s, 'a', 4000);
    s[4000] = '\0';
    ck_assert(!gm(pat, s));
}
END_TEST

START_TEST(glob_escape_round_trip)
{
    const char *ns = "we*ird[ns]?\\:";
    char esc[64], full[128];
    size_t n = glob_escape(ns, strlen(ns), esc);
    snprintf(full, sizeof(full), "%.*s*", (int)n, esc);
    ck_assert(gm(full, "we*ird[ns]?\\:key"));
    ck_assert(!gm(full, "weXird[ns]?\\:key"));
}
END_TEST

static const struct redis_command *cmd(const char *name)
{
    const struct redis_command *c = redis_command_find(name);
    ck_assert_msg(c != NULL, "%s", name);
    return c;
}

static uint32_t cat(const char *name)
{
    return proto_redis_ops.category((uint16_t)(cmd(name) - redis_commands));
}

START_TEST(categories)
{
    ck_assert_uint_eq(cat("GET"), CONF_CAT_READ);
    ck_assert_uint_eq(cat("SET"), CONF_CAT_WRITE);
    ck_assert_uint_eq(cat("KEYS"), CONF_CAT_READ | CONF_CAT_DANGEROUS);
    ck_assert_uint_eq(cat("BLPOP"), CONF_CAT_WRITE | CONF_CAT_BLOCKING);
    ck_assert_uint_eq(cat("PING"), 0);
    ck_assert_uint_eq(cat("AUTH"), 0);
    ck_assert_uint_eq(cat("ACL|WHOAMI"), 0);
    ck_assert(cat("EVAL") & CONF_CAT_SCRIPTS);
    ck_assert(cat("MULTI") & CONF_CAT_TRANSACTIONS);
    ck_assert(cat("PUBLISH") & CONF_CAT_PUBSUB);
    ck_assert(cat("CONFIG|GET") & CONF_CAT_ADMIN);
    ck_assert(cat("CONFIG|GET") & CONF_CAT_DANGEROUS);
    ck_assert(cat("INFO") & CONF_CAT_ADMIN);
    /* every command of the table is in a category or is a connection command on purpose */
    for (size_t i = 0; i < redis_ncommands; i++) {
        uint32_t c = proto_redis_ops.category((uint16_t)i);
        ck_assert_msg((c & ~CONF_CAT_ALL) == 0, "%s", redis_commands[i].name);
    }
    for (uint16_t i = 1; i < MEMCACHE_CMD_COUNT; i++)
        ck_assert((proto_memcache_ops.category(i) & ~CONF_CAT_ALL) == 0);
    ck_assert_uint_eq(proto_memcache_ops.category(MEMCACHE_CMD_GET), CONF_CAT_READ);
    ck_assert_uint_eq(proto_memcache_ops.category(MEMCACHE_CMD_SET), CONF_CAT_WRITE);
    char name[64];
    proto_redis_ops.perm_name((uint16_t)(cmd("CONFIG|GET") - redis_commands), name, sizeof(name));
    ck_assert_str_eq(name, "config|get");
}
END_TEST

/* Parse a RESP request, rewrite it with the namespace, parse the rewrite: its keys. */
static void ns_redis(const char *in, size_t inlen, const char *want)
{
    struct proto_parser p;
    struct proto_req req;
    memset(&p, 0, sizeof(p));
    p.flags = PROTO_PF_AUTHED;
    int rc = proto_redis_ops.parse_req(&p, in, inlen, &req);
    ck_assert_int_gt(rc, 0);
    struct proto_ns ns = { .prefix = "ns:", .len = 3 };
    struct buf out = { 0 };
    const char *why = NULL;
    ck_assert_int_eq(proto_redis_ops.ns_request(&req, in, &ns, &out, &why), 0);
    ck_assert_uint_eq(buf_len(&out), strlen(want));
    ck_assert(memcmp(buf_rptr(&out), want, strlen(want)) == 0);
    buf_free(&out);
    proto_parser_free(&p);
}

START_TEST(namespace_requests)
{
    const char *mset = "*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n";
    ns_redis(mset, strlen(mset), "*5\r\n$4\r\nMSET\r\n$4\r\nns:a\r\n$1\r\n1\r\n$4\r\nns:b\r\n$1\r\n2\r\n");
    const char *scan = "*2\r\n$4\r\nSCAN\r\n$1\r\n0\r\n";
    ns_redis(scan, strlen(scan), "*4\r\n$4\r\nSCAN\r\n$1\r\n0\r\n$5\r\nMATCH\r\n$4\r\nns:*\r\n");
    const char *scanm = "*4\r\n$4\r\nSCAN\r\n$1\r\n0\r\n$5\r\nmatch\r\n$2\r\nk*\r\n";
    ns_redis(scanm, strlen(scanm), "*4\r\n$4\r\nSCAN\r\n$1\r\n0\r\n$5\r\nmatch\r\n$5\r\nns:k*\r\n");
    const char *eval = "*5\r\n$4\r\nEVAL\r\n$8\r\nreturn 1\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\nv\r\n";
    ns_redis(eval, strlen(eval),
             "*5\r\n$4\r\nEVAL\r\n$8\r\nreturn 1\r\n$1\r\n1\r\n$4\r\nns:k\r\n$1\r\nv\r\n");
    const char *inl = "GET k\r\n";
    ns_redis(inl, strlen(inl), "*2\r\n$3\r\nGET\r\n$4\r\nns:k\r\n");
}
END_TEST

static void ns_reply(uint16_t c, const char *in, const char *want)
{
    struct proto_ns ns = { .prefix = "ns:", .len = 3 };
    struct buf out = { 0 };
    int rc = proto_redis_ops.ns_reply(c, in, strlen(in), &ns, &out);
    ck_assert_int_eq(rc, 1);
    ck_assert_uint_eq(buf_len(&out), strlen(want));
    ck_assert_msg(memcmp(buf_rptr(&out), want, strlen(want)) == 0, "%.*s", (int)buf_len(&out),
                  buf_rptr(&out));
    buf_free(&out);
}

START_TEST(namespace_replies)
{
    uint16_t keys = (uint16_t)(cmd("KEYS") - redis_commands);
    uint16_t scan = (uint16_t)(cmd("SCAN") - redis_commands);
    uint16_t rk = (uint16_t)(cmd("RANDOMKEY") - redis_commands);
    ns_reply(keys, "*3\r\n$4\r\nns:a\r\n$5\r\nother\r\n$4\r\nns:b\r\n", "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
    ns_reply(scan, "*2\r\n$2\r\n17\r\n*1\r\n$4\r\nns:a\r\n", "*2\r\n$2\r\n17\r\n*1\r\n$1\r\na\r\n");
    ns_reply(rk, "$5\r\nother\r\n", "$-1\r\n");
    ns_reply(rk, "$4\r\nns:z\r\n", "$1\r\nz\r\n");
    ns_reply(PROTO_NS_PUSH, "*3\r\n$7\r\nmessage\r\n$5\r\nns:ch\r\n$2\r\nhi\r\n",
             "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n");
    ns_reply(PROTO_NS_PUSH, ">4\r\n$8\r\npmessage\r\n$4\r\nns:*\r\n$5\r\nns:ch\r\n$2\r\nhi\r\n",
             ">4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$2\r\nch\r\n$2\r\nhi\r\n");
    uint16_t xr = (uint16_t)(cmd("XREAD") - redis_commands);
    ns_reply(xr, "%1\r\n$5\r\nns:st\r\n*0\r\n", "%1\r\n$2\r\nst\r\n*0\r\n");
    ns_reply(xr, "*1\r\n*2\r\n$5\r\nns:st\r\n*0\r\n", "*1\r\n*2\r\n$2\r\nst\r\n*0\r\n");
    /* malformed replies are refused, never read past their end */
    struct proto_ns ns = { .prefix = "ns:", .len = 3 };
    struct buf out = { 0 };
    ck_assert_int_lt(proto_redis_ops.ns_reply(keys, "*3\r\n$4\r\nns:a\r\n", 13, &ns, &out), 0);
    buf_free(&out);
    /* memcached VALUE lines and meta k flags */
    const char *mc = "VALUE ns:a 0 1\r\nx\r\nVALUE ns:b 5 2 77\r\nyy\r\nEND\r\n";
    ck_assert_int_eq(proto_memcache_ops.ns_reply(MEMCACHE_CMD_GETS, mc, strlen(mc), &ns, &out), 1);
    const char *want = "VALUE a 0 1\r\nx\r\nVALUE b 5 2 77\r\nyy\r\nEND\r\n";
    ck_assert_uint_eq(buf_len(&out), strlen(want));
    ck_assert(memcmp(buf_rptr(&out), want, strlen(want)) == 0);
    buf_free(&out);
    const char *meta = "VA 2 f0 kns:k t-1\r\nab\r\n";
    ck_assert_int_eq(proto_memcache_ops.ns_reply(MEMCACHE_CMD_MG, meta, strlen(meta), &ns, &out), 1);
    want = "VA 2 f0 kk t-1\r\nab\r\n";
    ck_assert_uint_eq(buf_len(&out), strlen(want));
    ck_assert(memcmp(buf_rptr(&out), want, strlen(want)) == 0);
    buf_free(&out);
}
END_TEST

static Suite *users_suite(void)
{
    Suite *s = suite_create("users");
    TCase *tc = tcase_create("proto");
    tcase_add_test(tc, glob_redis_rules);
    tcase_add_test(tc, glob_escape_round_trip);
    tcase_add_test(tc, categories);
    tcase_add_test(tc, namespace_requests);
    tcase_add_test(tc, namespace_replies);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(users_suite)
