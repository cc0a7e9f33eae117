/* Unit tests for the replies built from the proxy's own numbers: memcached version/stats and stats <sub> merged over the servers, Redis INFO merged, CLIENT SETINFO. */
#include "config.h"

#include "check_main.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache.h"
#include "proto/proto.h"
#include "proto/redis.h"

/* ---------------------------------------------------------------- a fake core */

static const char *const names[] = { "alpha", "127.0.0.1:11212", "gamma" };

static void numbers(void *ctx, proto_stat_fn emit, void *arg)
{
    (void)ctx;
    emit(arg, "requests", 1234);
    emit(arg, "hits", 70);
    emit(arg, "misses", 30);
    emit(arg, "client_connections", 5);
    emit(arg, "client_rejected", 2);
    emit(arg, "ops_per_sec", 17);
    emit(arg, "pid", 4242);
    emit(arg, "threads", 2);
    emit(arg, "worker", 1);
    emit(arg, "uptime", 3600);
    emit(arg, "time", 1700000000);
    emit(arg, "rusage_user_us", 1500001);
    emit(arg, "rusage_system_us", 250);
    emit(arg, "curr_connections", 9);
    emit(arg, "total_connections", 90);
}

static const char *server_name(void *ctx, uint32_t i)
{
    (void)ctx;
    return i < 3 ? names[i] : "?";
}

static const struct proto_env env = {
    .version = "0.1.0", .uptime_s = 3600, .now_us = 1700000000123456ULL, .pool_name = "cache",
    .nservers = 3, .render_stats = numbers, .server_name = server_name,
};

static struct buf *mkbuf(const char *s)
{
    struct buf *b = malloc(sizeof(*b));
    buf_init(b);
    buf_append_str(b, s);
    return b;
}

static void freebufs(struct buf **b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        buf_free(b[i]);
        free(b[i]);
    }
}

static char *text_of(struct buf *b)
{
    static char out[65536];
    snprintf(out, sizeof(out), "%.*s", (int)buf_len(b), buf_rptr(b));
    return out;
}

/* ---------------------------------------------------------------- memcached */

/* `version`: every server's, the lowest (libmemcached reads major.minor.micro and refuses a
 * major of 0, the proxy's own); a server down is left out */
START_TEST(test_mc_version_is_the_lowest_backends)
{
    struct proto_parser p;
    struct proto_req r;
    memset(&p, 0, sizeof(p));
    ck_assert_int_eq(proto_memcache_ops.parse_req(&p, "version\r\n", 9, &r), 9);
    ck_assert_int_eq(r.kind, PROTO_REQ_BROADCAST);
    proto_parser_free(&p);

    struct buf *f[3] = { mkbuf("VERSION 1.6.18\r\n"), mkbuf("SERVER_ERROR server down\r\n"),
                         mkbuf("VERSION 1.6.9\r\n") };
    struct buf out;
    buf_init(&out);
    ck_assert_int_eq(proto_memcache_ops.merge_env(MEMCACHE_CMD_VERSION, "version\r\n", f, 3, &env,
                                                  &out), 0);
    ck_assert_str_eq(text_of(&out), "VERSION 1.6.9\r\n");
    out.rpos = out.wpos = 0;
    ck_assert_int_eq(proto_memcache_ops.merge_env(MEMCACHE_CMD_VERSION, "version\r\n", f + 1, 1,
                                                  &env, &out), 0);
    ck_assert_str_eq(text_of(&out), "SERVER_ERROR server down\r\n");
    buf_free(&out);
    freebufs(f, 3);
}
END_TEST

static const char *mc_merge(const char *line, struct buf **frag, uint32_t n, int *rc);

/* `stats` with the servers' replies: memcached's general fields first, in its order; what
 * only the servers know summed over those that answered (a server down left out), their
 * lowest version; the proxy's own where the client talks to the proxy */
START_TEST(test_mc_stats_general_fields)
{
    struct buf *f[3] = {
        mkbuf("STAT pid 11\r\nSTAT uptime 5\r\nSTAT version 1.6.21\r\nSTAT curr_connections 2\r\n"
              "STAT cmd_get 10\r\nSTAT cmd_set 4\r\nSTAT get_hits 7\r\nSTAT get_misses 3\r\n"
              "STAT limit_maxbytes 67108864\r\nSTAT threads 4\r\nSTAT bytes 300\r\n"
              "STAT curr_items 4\r\nSTAT total_items 4\r\nSTAT evictions 1\r\nEND\r\n"),
        mkbuf("SERVER_ERROR no server available: server 127.0.0.1:11212 is down\r\n"),
        mkbuf("STAT pid 12\r\nSTAT version 1.6.9\r\nSTAT cmd_get 5\r\nSTAT cmd_set 2\r\n"
              "STAT get_hits 1\r\nSTAT get_misses 4\r\nSTAT limit_maxbytes 67108864\r\n"
              "STAT bytes 100\r\nSTAT curr_items 2\r\nSTAT total_items 3\r\n"
              "STAT evictions 0\r\nEND\r\n"),
    };
    int rc;
    const char *s = mc_merge("stats \r\n", f, 3, &rc);  /* memcstat sends a trailing space */
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(s,
        "STAT pid 4242\r\nSTAT uptime 3600\r\nSTAT time 1700000000\r\nSTAT version 1.6.9\r\n"
        "STAT pointer_size 64\r\nSTAT rusage_user 1.500001\r\nSTAT rusage_system 0.000250\r\n"
        "STAT curr_connections 9\r\nSTAT total_connections 90\r\nSTAT cmd_get 15\r\n"
        "STAT cmd_set 6\r\nSTAT get_hits 8\r\nSTAT get_misses 7\r\n"
        "STAT limit_maxbytes 134217728\r\nSTAT threads 2\r\nSTAT bytes 400\r\n"
        "STAT curr_items 6\r\nSTAT total_items 7\r\nSTAT evictions 1\r\n"
        "STAT ringleader_version 0.1.0\r\n"
        "STAT ringleader_servers 3\r\nSTAT ringleader_servers_answering 2\r\n"
        "STAT requests 1234\r\nSTAT hits 70\r\nSTAT misses 30\r\nSTAT client_connections 5\r\n"
        "STAT client_rejected 2\r\nSTAT ops_per_sec 17\r\nSTAT worker 1\r\nEND\r\n");
    /* every server down: the proxy's numbers still, none made up for the servers' */
    s = mc_merge("stats\r\n", f + 1, 1, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_null(strstr(s, "curr_items"));
    ck_assert_ptr_null(strstr(s, "get_hits"));
    ck_assert_ptr_nonnull(strstr(s, "STAT version 0.1.0\r\n"));
    ck_assert_ptr_nonnull(strstr(s, "STAT ringleader_servers_answering 0\r\n"));
    ck_assert_ptr_nonnull(strstr(s, "STAT hits 70\r\n"));
    freebufs(f, 3);
}
END_TEST

static const char *mc_merge(const char *line, struct buf **frag, uint32_t n, int *rc)
{
    static struct buf out;
    buf_free(&out);
    buf_init(&out);
    *rc = proto_memcache_ops.merge_env(MEMCACHE_CMD_STATS, line, frag, n, &env, &out);
    return text_of(&out);
}

/* `stats items` from three servers: every line named after its server, one END */
START_TEST(test_mc_stats_sub_names_each_server)
{
    struct buf *f[3] = {
        mkbuf("STAT items:1:number 3\r\nSTAT items:1:age 10\r\nEND\r\n"),
        mkbuf("END\r\n"),
        mkbuf("SERVER_ERROR no server available: server gamma is down\r\n"),
    };
    int rc;
    const char *s = mc_merge("stats items\r\n", f, 3, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(s, "STAT alpha:items:1:number 3\r\nSTAT alpha:items:1:age 10\r\n"
                        "STAT gamma:error SERVER_ERROR no server available: server gamma is down\r\n"
                        "END\r\n");
    freebufs(f, 3);
}
END_TEST

/* `stats cachedump`: ITEM lines as sent (memcdump reads the key after "ITEM "); a failed
 * server fails the dump; a bad argument answered by all is that answer */
START_TEST(test_mc_stats_cachedump)
{
    struct buf *f[3] = {
        mkbuf("ITEM a [1 b; 0 s]\r\nEND\r\n"),
        mkbuf("ITEM b [2 b; 0 s]\r\nITEM c [3 b; 0 s]\r\nEND\r\n"),
        mkbuf("END\r\n"),
    };
    int rc;
    ck_assert_str_eq(mc_merge("stats cachedump 1 0\r\n", f, 3, &rc),
                     "ITEM a [1 b; 0 s]\r\nITEM b [2 b; 0 s]\r\nITEM c [3 b; 0 s]\r\nEND\r\n");
    ck_assert_int_eq(rc, 0);
    buf_free(f[2]);
    buf_init(f[2]);
    buf_append_str(f[2], "SERVER_ERROR timeout\r\n");
    ck_assert_str_eq(mc_merge("stats cachedump 1 0\r\n", f, 3, &rc), "SERVER_ERROR timeout\r\n");
    for (int i = 0; i < 3; i++) {
        buf_free(f[i]);
        buf_init(f[i]);
        buf_append_str(f[i], "CLIENT_ERROR bad command line format\r\n");
    }
    ck_assert_str_eq(mc_merge("stats cachedump x\r\n", f, 3, &rc),
                     "CLIENT_ERROR bad command line format\r\n");
    /* a fragment cut short is malformed: nothing half-written */
    buf_free(f[0]);
    buf_init(f[0]);
    buf_append_str(f[0], "STAT items:1:number 3\r\n");
    ck_assert_str_eq(mc_merge("stats items\r\n", f, 1, &rc), "");
    ck_assert_int_eq(rc, -1);
    freebufs(f, 3);
}
END_TEST

/* the parser hands stats lines over as non-final units and END as the final one */
START_TEST(test_mc_stats_reply_units)
{
    struct proto_parser p;
    struct proto_rsp r;
    const char *s = "STAT items:1:number 3\r\nITEM a [1 b; 0 s]\r\nEND\r\n";

    memset(&p, 0, sizeof(p));
    int n = proto_memcache_ops.parse_rsp(&p, s, strlen(s), MEMCACHE_CMD_STATS, 0, &r);
    ck_assert_int_eq(n, 23);
    ck_assert_uint_eq(r.flags & PROTO_SF_FINAL, 0);
    n = proto_memcache_ops.parse_rsp(&p, s + 23, strlen(s) - 23, MEMCACHE_CMD_STATS, 0, &r);
    ck_assert_int_eq(n, 19);
    ck_assert_uint_eq(r.flags & PROTO_SF_FINAL, 0);
    n = proto_memcache_ops.parse_rsp(&p, s + 42, 5, MEMCACHE_CMD_STATS, 0, &r);
    ck_assert_int_eq(n, 5);
    ck_assert_uint_eq(r.flags & PROTO_SF_FINAL, PROTO_SF_FINAL);
    /* a VALUE line is no reply to stats */
    ck_assert_int_lt(proto_memcache_ops.parse_rsp(&p, "VALUE a 0 1\r\n", 13, MEMCACHE_CMD_STATS,
                                                  0, &r), 0);
}
END_TEST

/* ---------------------------------------------------------------- Redis INFO */

static struct buf *bulk(const char *s)
{
    struct buf *b = malloc(sizeof(*b));
    buf_init(b);
    buf_appendf(b, "$%zu\r\n%s\r\n", strlen(s), s);
    return b;
}

static const char *backend_a =
    "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nprocess_id:11\r\n\r\n"
    "# Memory\r\nused_memory:1048576\r\nused_memory_rss:2097152\r\nused_memory_peak:1048576\r\n"
    "maxmemory:0\r\nmaxmemory_policy:noeviction\r\n\r\n"
    "# Persistence\r\nloading:0\r\nrdb_last_save_time:1700000100\r\nrdb_last_bgsave_status:ok\r\n\r\n"
    "# Stats\r\ntotal_commands_processed:999999\r\nexpired_keys:3\r\nevicted_keys:0\r\n"
    "keyspace_hits:10\r\nkeyspace_misses:1\r\n\r\n"
    "# Keyspace\r\ndb0:keys=5,expires=1,avg_ttl=1000\r\n";
static const char *backend_b =
    "# Server\r\nredis_version:6.2.14\r\n\r\n"
    "# Memory\r\nused_memory:524288\r\nused_memory_rss:524288\r\nused_memory_peak:600000\r\n"
    "maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n\r\n"
    "# Persistence\r\nloading:1\r\nrdb_last_save_time:1700000000\r\nrdb_last_bgsave_status:err\r\n\r\n"
    "# Stats\r\nexpired_keys:4\r\nkeyspace_hits:5\r\nkeyspace_misses:2\r\n\r\n"
    "# Keyspace\r\ndb0:keys=7,expires=3,avg_ttl=3000\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n";

static const char *info_merge(const char *req, int with_down, int *rc)
{
    static struct buf out;
    struct buf *f[3] = { bulk(backend_a), bulk(backend_b),
                         mkbuf("-ERR no server available: server gamma is down\r\n") };
    buf_free(&out);
    buf_init(&out);
    const struct redis_command *c = redis_command_find("INFO");
    ck_assert_ptr_nonnull(c);
    *rc = proto_redis_ops.merge_env((uint16_t)(c - redis_commands), req, f, with_down ? 3 : 2,
                                    &env, &out);
    freebufs(f, 3);
    return text_of(&out);
}

static void has(const char *s, const char *part)
{
    ck_assert_msg(strstr(s, part) != NULL, "'%s' not in:\n%s", part, s);
}

START_TEST(test_info_merges_backends_and_the_proxy)
{
    int rc;
    const char *s = info_merge("*1\r\n$4\r\nINFO\r\n", 1, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(s[0] == '$', "a bulk: %s", s);
    /* every default section, in Redis's order */
    const char *order[] = { "# Server", "# Clients", "# Memory", "# Persistence", "# Stats",
                            "# Replication", "# CPU", "# Modules", "# Cluster", "# Keyspace" };
    const char *at = s;
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        const char *p = strstr(at, order[i]);
        ck_assert_msg(p != NULL, "%s missing or out of order in:\n%s", order[i], s);
        at = p;
    }
    /* the backends': the lowest version, sums, min/max, common value or mixed */
    has(s, "redis_version:6.2.14\r\n");
    has(s, "used_memory:1572864\r\nused_memory_human:1.50M\r\n");
    has(s, "used_memory_rss:2621440\r\n");
    has(s, "maxmemory_policy:mixed\r\n");
    has(s, "mem_fragmentation_ratio:1.67\r\n");
    has(s, "loading:1\r\n");
    has(s, "rdb_last_save_time:1700000000\r\n");
    has(s, "rdb_last_bgsave_status:err\r\n");
    has(s, "expired_keys:7\r\n");
    has(s, "keyspace_hits:15\r\nkeyspace_misses:3\r\n");
    has(s, "# Keyspace\r\ndb0:keys=12,expires=4,avg_ttl=2500\r\ndb2:keys=1,expires=0,avg_ttl=0");
    /* the proxy's */
    has(s, "process_id:4242\r\n");
    has(s, "uptime_in_seconds:3600\r\n");
    has(s, "ringleader_servers:3\r\nringleader_servers_answering:2\r\n");
    has(s, "connected_clients:5\r\n");
    has(s, "blocked_clients:0\r\n");
    has(s, "total_connections_received:90\r\n");
    has(s, "total_commands_processed:1234\r\n");    /* not a backend's 999999 */
    has(s, "instantaneous_ops_per_sec:17\r\n");
    has(s, "rejected_connections:2\r\n");
    has(s, "ringleader_requests:1234\r\n");
    has(s, "used_cpu_sys:0.000250\r\nused_cpu_user:1.500001\r\n");
    has(s, "role:master\r\n");
    has(s, "cluster_enabled:0\r\n");
    ck_assert_ptr_null(strstr(s, "process_id:11"));
    /* a bulk of exactly its length; the last section ends without the blank line */
    size_t len = strtoul(s + 1, NULL, 10);
    const char *body = strstr(s, "\r\n") + 2;
    ck_assert_uint_eq(strlen(body), len + 2);
    ck_assert_msg(strncmp(body + len - 4, "=0\r\n", 4) == 0 && strncmp(body + len - 4, "\r\n\r\n", 4) != 0,
                  "ends with the last line, no blank line: %.20s", body + len - 20);
}
END_TEST

START_TEST(test_info_sections_asked)
{
    int rc;
    const char *s = info_merge("*3\r\n$4\r\nINFO\r\n$6\r\nMEMORY\r\n$8\r\nkeyspace\r\n", 0, &rc);
    ck_assert_int_eq(rc, 0);
    has(s, "# Memory\r\n");
    has(s, "# Keyspace\r\n");
    ck_assert_ptr_null(strstr(s, "# Server"));
    ck_assert_ptr_null(strstr(s, "# Stats"));
    /* inline form, "all" */
    s = info_merge("*2\r\n$4\r\nINFO\r\n$3\r\nall\r\n", 0, &rc);
    ck_assert_int_eq(rc, 0);
    has(s, "# Server");
    has(s, "# Keyspace");
    /* a section nobody has: an empty bulk, as Redis answers */
    s = info_merge("*2\r\n$4\r\nINFO\r\n$5\r\nnosuch\r\n", 0, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(s, "$0\r\n\r\n");
}
END_TEST

START_TEST(test_info_with_every_server_down)
{
    static struct buf out;
    struct buf *f[1] = { mkbuf("-ERR no server available\r\n") };
    const struct redis_command *c = redis_command_find("INFO");
    buf_init(&out);
    ck_assert_int_eq(proto_redis_ops.merge_env((uint16_t)(c - redis_commands), "*1\r\n$4\r\nINFO\r\n",
                                               f, 1, &env, &out), 0);
    const char *s = text_of(&out);
    has(s, "ringleader_servers_answering:0\r\n");
    has(s, "total_commands_processed:1234\r\n");
    ck_assert_ptr_null(strstr(s, "redis_version"));
    ck_assert_ptr_null(strstr(s, "used_memory"));
    has(s, "# Keyspace");
    buf_free(&out);
    freebufs(f, 1);
}
END_TEST

/* As many numbers as the core gives a pool with every feature on, and more: the fixed
 * array INFO kept them in filled up and dropped the last ones (total_connections among
 * them: total_connections_received read 0). Every number given appears, under its name. */
#define MANY_NUMBERS 300

static void many_numbers(void *ctx, proto_stat_fn emit, void *arg)
{
    static char name[MANY_NUMBERS][32];
    (void)ctx;
    for (int i = 0; i < MANY_NUMBERS; i++) {
        snprintf(name[i], sizeof(name[i]), "counter_%d", i);
        emit(arg, name[i], 1000 + i);
    }
    emit(arg, "client_connections", 5);
    emit(arg, "total_connections", 90);     /* given last, as pool_numbers.c does */
}

START_TEST(test_info_keeps_every_number_given)
{
    static struct buf out;
    struct proto_env many = env;
    struct buf *f[1] = { bulk(backend_a) };
    const struct redis_command *c = redis_command_find("INFO");
    char want[64];

    many.render_stats = many_numbers;
    buf_init(&out);
    ck_assert_int_eq(proto_redis_ops.merge_env((uint16_t)(c - redis_commands),
                                               "*1\r\n$4\r\nINFO\r\n", f, 1, &many, &out), 0);
    const char *s = text_of(&out);
    for (int i = 0; i < MANY_NUMBERS; i++) {
        snprintf(want, sizeof(want), "\r\nringleader_counter_%d:%d\r\n", i, 1000 + i);
        has(s, want);
    }
    has(s, "\r\nringleader_total_connections:90\r\n");
    has(s, "\r\ntotal_connections_received:90\r\n");
    has(s, "\r\nconnected_clients:5\r\n");
    buf_free(&out);
    freebufs(f, 1);
}
END_TEST

/* ---------------------------------------------------------------- CLIENT */

static const char *redis_say(struct proto_parser *p, struct proto_client *c, const char *line)
{
    static char req[1024];
    static struct buf b;
    struct proto_req r;
    size_t n = (size_t)snprintf(req, sizeof(req), "%s\r\n", line);

    ck_assert_int_eq(proto_redis_ops.parse_req(p, req, n, &r), (int)n);
    if (r.kind == PROTO_REQ_ERROR)
        return r.err;
    ck_assert_int_eq(r.kind, PROTO_REQ_LOCAL);
    buf_free(&b);
    buf_init(&b);
    ck_assert_int_ge(proto_redis_ops.local(c, p, &r, req, &env, &b), 0);
    return text_of(&b);
}

START_TEST(test_client_setinfo_no_evict_no_touch)
{
    struct proto_parser p;
    struct proto_client c;

    memset(&p, 0, sizeof(p));
    memset(&c, 0, sizeof(c));
    p.flags = PROTO_PF_AUTHED;
    c.id = 7;
    ck_assert_str_eq(redis_say(&p, &c, "CLIENT SETINFO LIB-NAME redis-py"), "+OK\r\n");
    ck_assert_str_eq(redis_say(&p, &c, "client setinfo lib-ver 5.0.1"), "+OK\r\n");
    ck_assert_str_eq(redis_say(&p, &c, "CLIENT SETINFO LIB-COLOR red"),
                     "-ERR Unrecognized option 'LIB-COLOR'\r\n");
    ck_assert_str_eq(redis_say(&p, &c, "CLIENT SETINFO LIB-NAME a~b"), "+OK\r\n");
    ck_assert_ptr_nonnull(strstr(redis_say(&p, &c, "CLIENT INFO"), "lib-name=a~b lib-ver=5.0.1"));
    ck_assert_str_eq(redis_say(&p, &c, "CLIENT NO-EVICT on"), "+OK\r\n");
    ck_assert_str_eq(redis_say(&p, &c, "CLIENT NO-TOUCH OFF"), "+OK\r\n");
    ck_assert_str_eq(redis_say(&p, &c, "CLIENT NO-TOUCH maybe"), "-ERR syntax error\r\n");
    ck_assert_str_eq(redis_say(&p, &c, "CLIENT SETINFO LIB-NAME"),
                     "-ERR wrong number of arguments for 'client|setinfo' command\r\n");
    proto_parser_free(&p);
}
END_TEST

static Suite *local_suite(void)
{
    Suite *s = suite_create("local");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_mc_version_is_the_lowest_backends);
    tcase_add_test(tc, test_mc_stats_general_fields);
    tcase_add_test(tc, test_mc_stats_sub_names_each_server);
    tcase_add_test(tc, test_mc_stats_cachedump);
    tcase_add_test(tc, test_mc_stats_reply_units);
    tcase_add_test(tc, test_info_merges_backends_and_the_proxy);
    tcase_add_test(tc, test_info_sections_asked);
    tcase_add_test(tc, test_info_with_every_server_down);
    tcase_add_test(tc, test_info_keeps_every_number_given);
    tcase_add_test(tc, test_client_setinfo_no_evict_no_touch);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(local_suite)
