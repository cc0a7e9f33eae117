/* Unit tests for the YAML loader: twemproxy files, ringleader keys, defaults, and every error message. */
#include "config.h"

#include "check_main.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

static char errbuf[512];

static const char *srcdir(void)
{
    const char *d = getenv("top_srcdir");
    return d != NULL ? d : TOP_SRCDIR;
}

/* Load a YAML text; the test fails with the message when it does not load. */
static struct conf *load_ok(const char *text)
{
    struct conf *c = NULL;
    errbuf[0] = '\0';
    int rc = conf_load_buffer("t.yml", text, strlen(text), &c, errbuf, sizeof(errbuf));
    ck_assert_msg(rc == 0, "expected to load, got: %s", errbuf);
    ck_assert_ptr_nonnull(c);
    return c;
}

/* Load a YAML text that must fail with a message starting with `prefix` and containing `part`. */
static void load_err(const char *text, const char *prefix, const char *part)
{
    struct conf *c = (struct conf *)1;
    errbuf[0] = '\0';
    int rc = conf_load_buffer("t.yml", text, strlen(text), &c, errbuf, sizeof(errbuf));
    ck_assert_msg(rc == -1, "expected an error '%s' for:\n%s", prefix, text);
    ck_assert_ptr_null(c);
    ck_assert_msg(strncmp(errbuf, prefix, strlen(prefix)) == 0,
                  "message '%s' does not start with '%s'", errbuf, prefix);
    if (part != NULL)
        ck_assert_msg(strstr(errbuf, part) != NULL, "message '%s' lacks '%s'", errbuf, part);
}

#define POOL_HEAD "p:\n  listen: 127.0.0.1:22121\n"
#define ONE_SERVER "  servers:\n   - 127.0.0.1:11211:1\n"

/* ------------------------------------------------------------ vectors */

struct vec_expect {
    const char *file;
    enum hash_type hash;
    enum dist_type dist;
    uint32_t weights[4];
    int named;
    int hash_tag;
};

static void check_vector_common(const struct conf *c, const char *file)
{
    ck_assert_uint_eq(c->npools, 1);
    const struct conf_pool *p = &c->pools[0];
    ck_assert_str_eq(p->listen.text, "127.0.0.1:41000");
    ck_assert_str_eq(p->listen.host, "127.0.0.1");
    ck_assert_uint_eq(p->listen.port, 41000);
    ck_assert_int_eq(p->timeout_ms, 2000);
    ck_assert_int_eq(p->auto_eject_hosts, 0);
    ck_assert_int_eq(p->protocol, CONF_PROTO_MEMCACHE);
    ck_assert_uint_eq(p->nservers, 4);
    ck_assert_str_eq(c->path, file);
    for (uint32_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(p->servers[i].addr.port, 41001 + i);
        ck_assert_str_eq(p->servers[i].addr.host, "127.0.0.1");
    }
}

START_TEST(test_twemproxy_vectors)
{
    static const struct vec_expect v[] = {
        { "ketama-fnv1a_64-weighted-1-1-2-3.yml", HASH_FNV1A_64, DIST_KETAMA, { 1, 1, 2, 3 }, 1, 0 },
        { "ketama-md5-hostport.yml", HASH_MD5, DIST_KETAMA, { 1, 1, 1, 1 }, 0, 0 },
        { "ketama-md5-named.yml", HASH_MD5, DIST_KETAMA, { 1, 1, 1, 1 }, 1, 0 },
        { "ketama-murmur-hashtag.yml", HASH_MURMUR, DIST_KETAMA, { 1, 1, 1, 1 }, 1, 1 },
        { "modula-fnv1a_64-named.yml", HASH_FNV1A_64, DIST_MODULA, { 1, 1, 1, 1 }, 1, 0 },
        { "modula-fnv1a_64-weighted-1-1-2-3.yml", HASH_FNV1A_64, DIST_MODULA, { 1, 1, 2, 3 }, 1, 0 },
    };
    static const char *names[] = { "alpha", "beta", "gamma", "delta" };

    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
        char path[1024];
        struct conf *c = NULL;
        snprintf(path, sizeof(path), "%s/tests/vectors/twemproxy/%s", srcdir(), v[k].file);
        int rc = conf_load(path, &c, errbuf, sizeof(errbuf));
        ck_assert_msg(rc == 0, "%s: %s", path, errbuf);
        check_vector_common(c, path);
        const struct conf_pool *p = &c->pools[0];
        ck_assert_int_eq(p->hash, v[k].hash);
        ck_assert_int_eq(p->dist, v[k].dist);
        ck_assert_int_eq(p->has_hash_tag, v[k].hash_tag);
        if (v[k].hash_tag)
            ck_assert_int_eq(memcmp(p->hash_tag, "{}", 2), 0);
        for (uint32_t i = 0; i < 4; i++) {
            const struct conf_server *s = &p->servers[i];
            char hp[32];
            snprintf(hp, sizeof(hp), "127.0.0.1:%u", 41001 + i);
            ck_assert_uint_eq(s->weight, v[k].weights[i]);
            if (v[k].named) {
                ck_assert_str_eq(s->name, names[i]);
                ck_assert_str_eq(s->ident, names[i]);
                ck_assert_str_eq(s->label, names[i]);
            } else {
                ck_assert_ptr_null(s->name);
                ck_assert_str_eq(s->ident, hp);
                ck_assert_str_eq(s->label, hp);
            }
            ck_assert_int_eq(s->line, 9 + (int)i + (v[k].hash_tag ? 1 : 0));
        }
        conf_free(c);
    }
}
END_TEST

/* Every allhash file: ketama-<hash>-named.yml / modula-<hash>-named.yml. */
START_TEST(test_allhash_vectors)
{
    char dirpath[1024];
    DIR *d;
    struct dirent *e;
    int seen = 0;

    snprintf(dirpath, sizeof(dirpath), "%s/tests/vectors/twemproxy/allhash", srcdir());
    d = opendir(dirpath);
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".yml") != 0)
            continue;
        char path[2048], hashname[64];
        struct conf *c = NULL;
        enum hash_type want;
        const char *dash = strchr(e->d_name, '-');
        const char *end = strstr(e->d_name, "-named.yml");
        ck_assert_ptr_nonnull(dash);
        ck_assert_ptr_nonnull(end);
        snprintf(hashname, sizeof(hashname), "%.*s", (int)(end - dash - 1), dash + 1);
        ck_assert_int_eq(hash_from_name(hashname, strlen(hashname), &want), 0);

        snprintf(path, sizeof(path), "%s/%s", dirpath, e->d_name);
        int rc = conf_load(path, &c, errbuf, sizeof(errbuf));
        ck_assert_msg(rc == 0, "%s: %s", path, errbuf);
        check_vector_common(c, path);
        ck_assert_int_eq(c->pools[0].hash, want);
        ck_assert_int_eq(c->pools[0].dist,
                         strncmp(e->d_name, "ketama", 6) == 0 ? DIST_KETAMA : DIST_MODULA);
        ck_assert_str_eq(c->pools[0].servers[3].ident, "delta");
        conf_free(c);
        seen++;
    }
    closedir(d);
    ck_assert_int_eq(seen, 24);
}
END_TEST

/* ------------------------------------------------------------ defaults */

START_TEST(test_on_down_follows_auto_eject_hosts)
{
    const char *base = "p:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:2:1\n";
    char text[512];
    struct conf *c = NULL;
    char err[512];

    snprintf(text, sizeof(text), "%s  auto_eject_hosts: true\n", base);
    ck_assert_int_eq(conf_load_buffer("t.yml", text, strlen(text), &c, err, sizeof(err)), 0);
    ck_assert_int_eq(c->pools[0].on_down, CONF_ON_DOWN_FAILOVER);
    ck_assert_int_eq(c->pools[0].eject, 1);
    conf_free(c);
    snprintf(text, sizeof(text), "%s  auto_eject_hosts: false\n  on_down: miss\n", base);
    ck_assert_int_eq(conf_load_buffer("t.yml", text, strlen(text), &c, err, sizeof(err)), 0);
    ck_assert_int_eq(c->pools[0].on_down, CONF_ON_DOWN_MISS);
    ck_assert_int_eq(c->pools[0].eject, 1);
    conf_free(c);
}
END_TEST

START_TEST(test_defaults)
{
    struct conf *c = load_ok(POOL_HEAD ONE_SERVER);
    const struct conf_pool *p = &c->pools[0];

    ck_assert_str_eq(p->name, "p");
    ck_assert_int_eq(p->line, 1);
    ck_assert_int_eq(p->col, 1);
    ck_assert_int_eq(p->hash, HASH_FNV1A_64);
    ck_assert_int_eq(p->dist, DIST_KETAMA);
    ck_assert_int_eq(p->timeout_ms, -1);
    ck_assert_int_eq(p->backlog, 512);
    ck_assert_int_eq(p->preconnect, 0);
    ck_assert_int_eq(p->protocol, CONF_PROTO_MEMCACHE);
    ck_assert_ptr_null(p->redis_auth);
    ck_assert_int_eq(p->redis_db, 0);
    ck_assert_uint_eq(p->server_connections, 1);
    ck_assert_int_eq(p->auto_eject_hosts, 0);
    ck_assert_int_eq(p->server_retry_timeout_ms, 30000);
    ck_assert_uint_eq(p->server_failure_limit, 2);
    ck_assert_int_eq(p->tcpkeepalive, 0);
    ck_assert_uint_eq(p->client_connections, 0);
    ck_assert_int_eq(p->has_hash_tag, 0);
    ck_assert_int_eq(p->has_hash_seed, 0);
    ck_assert_uint_eq(p->vnodes, 160);
    ck_assert_uint_eq(p->maglev_table_size, 65537);
    ck_assert_uint_eq(p->probes, 21);
    ck_assert_ptr_null(p->slot_map);
    ck_assert(p->balance_factor == 0.0);
    ck_assert_uint_eq(p->replicas, 1);
    ck_assert_int_eq(p->read_from, CONF_READ_PRIMARY);
    ck_assert_int_eq(p->write_to, CONF_WRITE_PRIMARY);
    /* no on_down and auto_eject_hosts false (twemproxy's default): never
     * marked down, each request tries its server */
    ck_assert_int_eq(p->on_down, CONF_ON_DOWN_FAILOVER);
    ck_assert_int_eq(p->eject, 0);
    ck_assert_uint_eq(p->warmup_s, 0);
    ck_assert_uint_eq(p->item_size_max, 1048576);
    ck_assert_int_eq(p->allow_flush, 0);
    ck_assert_int_eq(p->scripts, 1);          /* redis-py locks use EVALSHA */
    ck_assert_ptr_null(p->redis_username);
    ck_assert_uint_eq(p->nroutes, 0);
    ck_assert_int_eq(p->listen.perm, -1);
    ck_assert_ptr_null(p->listen.path);

    /* port 11211 drops out of the identity, as in twemproxy; not out of the label */
    ck_assert_str_eq(p->servers[0].ident, "127.0.0.1");
    ck_assert_str_eq(p->servers[0].label, "127.0.0.1:11211");
    ck_assert_ptr_null(p->servers[0].zone);

    const struct conf_global *g = &c->global;
    ck_assert_uint_eq(g->workers, 0);
    ck_assert_str_eq(g->stats_listen.text, "127.0.0.1:22222");
    ck_assert_uint_eq(g->stats_listen.port, 22222);
    ck_assert_int_eq(g->stats_interval_ms, 30000);
    ck_assert_ptr_null(g->admin_listen.text);
    ck_assert_ptr_null(g->admin_token);
    ck_assert_ptr_null(g->log_file);
    ck_assert_int_eq(g->log_level, 5);
    ck_assert_int_eq(g->watch, 0);
    ck_assert_ptr_null(g->zone);
    ck_assert_int_eq(g->drain_timeout_ms, 5000);
    ck_assert_uint_eq(g->client_output_limit, 8u << 20);
    conf_free(c);
}
END_TEST

START_TEST(test_default_hash_follows_distribution)
{
    static const struct { const char *dist; enum hash_type hash; } t[] = {
        { "ketama", HASH_FNV1A_64 }, { "modula", HASH_FNV1A_64 }, { "random", HASH_FNV1A_64 },
        { "rendezvous", HASH_XXH3 }, { "jump", HASH_XXH3 }, { "maglev", HASH_XXH3 },
        { "slots", HASH_XXH3 }, { "multiprobe", HASH_XXH3 }, { "anchor", HASH_XXH3 },
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char y[256];
        snprintf(y, sizeof(y), POOL_HEAD "  distribution: %s\n" ONE_SERVER, t[i].dist);
        struct conf *c = load_ok(y);
        enum dist_type d;
        ck_assert_int_eq(dist_from_name(t[i].dist, strlen(t[i].dist), &d), 0);
        ck_assert_int_eq(c->pools[0].dist, d);
        ck_assert_msg(c->pools[0].hash == t[i].hash, "%s", t[i].dist);
        conf_free(c);
    }
    /* an explicit hash always wins */
    struct conf *c = load_ok(POOL_HEAD "  distribution: jump\n  hash: md5\n" ONE_SERVER);
    ck_assert_int_eq(c->pools[0].hash, HASH_MD5);
    conf_free(c);
}
END_TEST

/* ------------------------------------------------------------ full files */

START_TEST(test_every_key)
{
    const char *y =
        "ringleader:\n"
        "  workers: 4\n"
        "  stats_listen: 127.0.0.1:23222\n"
        "  stats_interval: 10000\n"
        "  admin: 127.0.0.1:23223\n"
        "  admin_token: s3cret\n"
        "  log_file: /var/log/rl.log\n"
        "  log_level: 7\n"
        "  watch: true\n"
        "  zone: z1\n"
        "  drain_timeout: 2500\n"
        "  client_output_limit: 1048576\n"
        "cache:\n"
        "  listen: 127.0.0.1:22121\n"
        "  hash: xxh64\n"
        "  hash_tag: \"{}\"\n"
        "  distribution: ketama\n"
        "  timeout: 400\n"
        "  backlog: 1024\n"
        "  preconnect: true\n"
        "  redis: false\n"
        "  server_connections: 2\n"
        "  auto_eject_hosts: true\n"
        "  server_retry_timeout: 2000\n"
        "  server_failure_limit: 3\n"
        "  tcpkeepalive: true\n"
        "  client_connections: 1000\n"
        "  protocol: memcache\n"
        "  vnodes: 200\n"
        "  maglev_table_size: 131071\n"
        "  probes: 11\n"
        "  hash_seed: 0x10\n"
        "  balance_factor: 1.25\n"
        "  replicas: 2\n"
        "  read_from: local-zone\n"
        "  write_to: all-async\n"
        "  on_down: miss\n"
        "  warmup: 30\n"
        "  item_size_max: 2097152\n"
        "  allow_flush: true\n"
        "  scripts: false\n"
        "  redis_username: ringleader\n"
        "  routes:\n"
        "    - {prefix: \"sess:\", pool: mc2}\n"
        "  servers:\n"
        "   - {address: \"127.0.0.1:11211\", weight: 2, name: a, zone: z1}\n"
        "   - address: 127.0.0.1:11212\n"
        "     zone: z2\n"
        "   - 127.0.0.1:11213:3 c\n"
        "sessions:\n"
        "  listen: /tmp/rl-sessions.sock 0660\n"
        "  redis: true\n"
        "  redis_auth: pw\n"
        "  redis_db: 3\n"
        "  protocol: redis\n"
        "  routes: [{prefix: \"x\", pool: sessions}]\n"
        "  servers:\n"
        "   - /var/run/redis.sock:1 r1\n"
        "   - /var/run/redis2.sock:1\n"
        "   - \"[::1]:6379:1\"\n"
        "mc2:\n"
        "  listen: 127.0.0.1:22123\n"
        "  timeout: 0\n"
        "  routes: [{prefix: \"a:\", pool: cache}, {prefix: \"b:\", pool: mc2}]\n"
        "  servers: [\"10.0.0.1:11211:1\"]\n";
    struct conf *c = load_ok(y);
    const struct conf_global *g = &c->global;

    ck_assert_uint_eq(g->workers, 4);
    ck_assert_str_eq(g->stats_listen.text, "127.0.0.1:23222");
    ck_assert_int_eq(g->stats_interval_ms, 10000);
    ck_assert_str_eq(g->admin_listen.host, "127.0.0.1");
    ck_assert_uint_eq(g->admin_listen.port, 23223);
    ck_assert_str_eq(g->admin_token, "s3cret");
    ck_assert_str_eq(g->log_file, "/var/log/rl.log");
    ck_assert_int_eq(g->log_level, 7);
    ck_assert_int_eq(g->watch, 1);
    ck_assert_str_eq(g->zone, "z1");
    ck_assert_int_eq(g->drain_timeout_ms, 2500);
    ck_assert_uint_eq(g->client_output_limit, 1048576);

    ck_assert_uint_eq(c->npools, 3);
    const struct conf_pool *p = conf_pool_find(c, "cache");
    ck_assert_ptr_eq(p, &c->pools[0]);
    ck_assert_int_eq(p->line, 13);
    ck_assert_int_eq(p->hash, HASH_XXH64);
    ck_assert_int_eq(p->has_hash_tag, 1);
    ck_assert_int_eq(p->dist, DIST_KETAMA);
    ck_assert_int_eq(p->timeout_ms, 400);
    ck_assert_int_eq(p->backlog, 1024);
    ck_assert_int_eq(p->preconnect, 1);
    ck_assert_int_eq(p->protocol, CONF_PROTO_MEMCACHE);
    ck_assert_uint_eq(p->server_connections, 2);
    ck_assert_int_eq(p->auto_eject_hosts, 1);
    ck_assert_int_eq(p->server_retry_timeout_ms, 2000);
    ck_assert_uint_eq(p->server_failure_limit, 3);
    ck_assert_int_eq(p->tcpkeepalive, 1);
    ck_assert_uint_eq(p->client_connections, 1000);
    ck_assert_uint_eq(p->vnodes, 200);
    ck_assert_uint_eq(p->maglev_table_size, 131071);
    ck_assert_uint_eq(p->probes, 11);
    ck_assert_int_eq(p->has_hash_seed, 1);
    ck_assert_uint_eq(p->hash_seed, 16);
    ck_assert(p->balance_factor == 1.25);
    ck_assert_uint_eq(p->replicas, 2);
    ck_assert_int_eq(p->read_from, CONF_READ_LOCAL_ZONE);
    ck_assert_int_eq(p->write_to, CONF_WRITE_ALL_ASYNC);
    ck_assert_int_eq(p->on_down, CONF_ON_DOWN_MISS);
    ck_assert_uint_eq(p->warmup_s, 30);
    ck_assert_uint_eq(p->item_size_max, 2097152);
    ck_assert_int_eq(p->allow_flush, 1);
    ck_assert_int_eq(p->scripts, 0);
    ck_assert_str_eq(p->redis_username, "ringleader");
    ck_assert_uint_eq(p->nroutes, 1);
    ck_assert_str_eq(p->routes[0].prefix, "sess:");
    ck_assert_str_eq(p->routes[0].pool, "mc2");

    /* mapping-form servers with zones, mixed with the string form */
    ck_assert_uint_eq(p->nservers, 3);
    ck_assert_str_eq(p->servers[0].addr.text, "127.0.0.1:11211");
    ck_assert_uint_eq(p->servers[0].weight, 2);
    ck_assert_str_eq(p->servers[0].name, "a");
    ck_assert_str_eq(p->servers[0].ident, "a");
    ck_assert_str_eq(p->servers[0].zone, "z1");
    ck_assert_int_eq(p->servers[0].line, 46);
    ck_assert_int_eq(p->servers[0].col, 6);
    ck_assert_uint_eq(p->servers[1].weight, 1);
    ck_assert_ptr_null(p->servers[1].name);
    ck_assert_str_eq(p->servers[1].ident, "127.0.0.1:11212");
    ck_assert_str_eq(p->servers[1].label, "127.0.0.1:11212");
    ck_assert_str_eq(p->servers[1].zone, "z2");
    ck_assert_str_eq(p->servers[2].name, "c");
    ck_assert_uint_eq(p->servers[2].weight, 3);
    ck_assert_ptr_null(p->servers[2].zone);

    /* unix listen with permissions; unix and IPv6 servers */
    p = conf_pool_find(c, "sessions");
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(p->listen.path, "/tmp/rl-sessions.sock");
    ck_assert_str_eq(p->listen.text, "/tmp/rl-sessions.sock");
    ck_assert_ptr_null(p->listen.host);
    ck_assert_int_eq(p->listen.perm, 0660);
    ck_assert_int_eq(p->protocol, CONF_PROTO_REDIS);
    ck_assert_str_eq(p->redis_auth, "pw");
    ck_assert_int_eq(p->redis_db, 3);
    ck_assert_str_eq(p->servers[0].addr.path, "/var/run/redis.sock");
    ck_assert_str_eq(p->servers[0].ident, "r1");
    /* nutcracker hashes an unnamed unix server as "path:" */
    ck_assert_str_eq(p->servers[1].ident, "/var/run/redis2.sock:");
    ck_assert_str_eq(p->servers[1].label, "/var/run/redis2.sock");
    ck_assert_str_eq(p->servers[2].addr.host, "::1");
    ck_assert_uint_eq(p->servers[2].addr.port, 6379);
    ck_assert_str_eq(p->servers[2].ident, "[::1]:6379");

    p = conf_pool_find(c, "mc2");
    ck_assert_int_eq(p->timeout_ms, -1);    /* 0 means none, as in nutcracker */
    ck_assert_uint_eq(p->nroutes, 2);
    ck_assert_str_eq(p->routes[1].pool, "mc2");
    ck_assert_str_eq(p->servers[0].ident, "10.0.0.1");
    ck_assert_ptr_null(conf_pool_find(c, "nope"));
    ck_assert_ptr_null(conf_pool_find(c, "ringleader"));
    conf_free(c);
}
END_TEST

START_TEST(test_slots_map)
{
    const char *y =
        POOL_HEAD
        "  distribution: slots\n"
        "  servers:\n"
        "   - 127.0.0.1:7000:1 a\n"
        "   - 127.0.0.1:7001:1 b\n"
        "   - 127.0.0.1:7002:1\n"
        "  slots:\n"
        "    a: [\"0-5460\"]\n"
        "    b: [\"5461-10921\", \"16383\"]\n"
        "    127.0.0.1:7002: \"10922-16382\"\n";
    struct conf *c = load_ok(y);
    const uint32_t *m = c->pools[0].slot_map;
    ck_assert_ptr_nonnull(m);
    ck_assert_uint_eq(m[0], 0);
    ck_assert_uint_eq(m[5460], 0);
    ck_assert_uint_eq(m[5461], 1);
    ck_assert_uint_eq(m[10921], 1);
    ck_assert_uint_eq(m[10922], 2);
    ck_assert_uint_eq(m[16382], 2);
    ck_assert_uint_eq(m[16383], 1);
    conf_free(c);
}
END_TEST

START_TEST(test_slots_errors)
{
    const char *head = POOL_HEAD "  distribution: slots\n"
                       "  servers:\n   - 127.0.0.1:7000:1 a\n   - 127.0.0.1:7001:1 b\n";
    char y[1024];

    snprintf(y, sizeof(y), "%s  slots:\n    a: [\"0-8000\"]\n    b: [\"8001-16000\"]\n", head);
    load_err(y, "t.yml:8:5: key 'slots': ", "slots 16001-16383 are not given to any server");

    snprintf(y, sizeof(y), "%s  slots:\n    a: [\"0-8000\"]\n    b: [\"8000-16383\"]\n", head);
    load_err(y, "t.yml:9:9: key 'slots': ", "slot 8000 is given to both 'a' and 'b'");

    snprintf(y, sizeof(y), "%s  slots:\n    a: [\"0-16383\"]\n    zz: [\"1\"]\n", head);
    load_err(y, "t.yml:9:5: key 'slots': ", "'zz' is not a server of pool 'p'");

    snprintf(y, sizeof(y), "%s  slots:\n    a: [\"0-16384\"]\n", head);
    load_err(y, "t.yml:8:9: key 'slots': ", "not a range within 0-16383");

    snprintf(y, sizeof(y), "%s  slots:\n    a: [\"9-3\"]\n", head);
    load_err(y, "t.yml:8:9: key 'slots': ", "not a range");

    load_err(POOL_HEAD "  slots:\n    a: [\"0-16383\"]\n" "  servers:\n   - 127.0.0.1:7000:1 a\n",
             "t.yml:4:5: key 'slots': ", "needs distribution: slots");
}
END_TEST

START_TEST(test_large_pool)
{
    size_t cap = 64 + 1000 * 40;
    char *y = malloc(cap);
    size_t n = (size_t)snprintf(y, cap, "big:\n  listen: 127.0.0.1:22121\n  distribution: jump\n"
                                "  servers:\n");
    for (int i = 0; i < 1000; i++)
        n += (size_t)snprintf(y + n, cap - n, "   - 10.0.%d.%d:11211:1 s%d\n", i / 250, i % 250, i);
    struct conf *c = load_ok(y);
    ck_assert_uint_eq(c->pools[0].nservers, 1000);
    ck_assert_str_eq(c->pools[0].servers[999].name, "s999");
    ck_assert_str_eq(c->pools[0].servers[999].addr.host, "10.0.3.249");
    conf_free(c);

    /* a duplicate at the end of a large pool points at its own line */
    n += (size_t)snprintf(y + n, cap - n, "   - 10.0.0.5:11211:1 other\n");
    load_err(y, "t.yml:1005:6: key 'servers': ",
             "duplicate server address '10.0.0.5:11211' in pool 'big' (first at line 10)");
    free(y);
}
END_TEST

START_TEST(test_parse_addr)
{
    struct conf_addr a;
    char e[200];

    ck_assert_int_eq(conf_parse_addr("localhost:22121", &a, e, sizeof(e)), 0);
    ck_assert_str_eq(a.host, "localhost");
    ck_assert_uint_eq(a.port, 22121);
    ck_assert_int_eq(a.perm, -1);
    conf_addr_free(&a);
    ck_assert_int_eq(conf_parse_addr("/tmp/x.sock 0666", &a, e, sizeof(e)), 0);
    ck_assert_str_eq(a.path, "/tmp/x.sock");
    ck_assert_int_eq(a.perm, 0666);
    conf_addr_free(&a);
    ck_assert_int_eq(conf_parse_addr("/tmp/x.sock 0888", &a, e, sizeof(e)), -1);
    ck_assert_ptr_nonnull(strstr(e, "not octal"));
    ck_assert_int_eq(conf_parse_addr("/tmp/x.sock 07777", &a, e, sizeof(e)), -1);
    ck_assert_int_eq(conf_parse_addr("host", &a, e, sizeof(e)), -1);
    ck_assert_ptr_nonnull(strstr(e, "no port"));
    ck_assert_int_eq(conf_parse_addr(":80", &a, e, sizeof(e)), -1);
    ck_assert_ptr_nonnull(strstr(e, "empty host"));
    ck_assert_int_eq(conf_parse_addr("h:0", &a, e, sizeof(e)), -1);
    ck_assert_ptr_nonnull(strstr(e, "out of range 1..65535"));
    ck_assert_int_eq(conf_parse_addr("h:65536", &a, e, sizeof(e)), -1);
    ck_assert_int_eq(conf_parse_addr("h:x1", &a, e, sizeof(e)), -1);
    ck_assert_ptr_nonnull(strstr(e, "not a number"));
    ck_assert_int_eq(conf_parse_addr("", &a, e, sizeof(e)), -1);
    ck_assert_ptr_null(a.text);
}
END_TEST

/* ------------------------------------------------------------ errors */

START_TEST(test_error_unknown_key)
{
    load_err(POOL_HEAD "  hashing: md5\n" ONE_SERVER, "t.yml:3:3: key 'hashing': ",
             "unknown pool key");
    load_err("ringleader:\n  wokers: 2\n" POOL_HEAD ONE_SERVER, "t.yml:2:3: key 'wokers': ",
             "unknown ringleader key");
    load_err(POOL_HEAD "  servers:\n   - {address: \"h:1\", wieght: 2}\n",
             "t.yml:4:23: key 'wieght': ", "unknown server key");
}
END_TEST

START_TEST(test_error_wrong_type)
{
    load_err(POOL_HEAD "  timeout: [1, 2]\n" ONE_SERVER, "t.yml:3:12: key 'timeout': ",
             "expected a single value, found a list");
    load_err(POOL_HEAD "  timeout: 4s\n" ONE_SERVER, "t.yml:3:12: key 'timeout': ",
             "'4s' is not a whole number");
    load_err(POOL_HEAD "  timeout: -5\n" ONE_SERVER, "t.yml:3:12: key 'timeout': ",
             "out of range");
    load_err(POOL_HEAD "  backlog:\n" ONE_SERVER, "t.yml:", "key 'backlog': has no value");
    load_err(POOL_HEAD "  redis: yes\n" ONE_SERVER, "t.yml:3:10: key 'redis': ",
             "'yes' is not true or false");
    load_err(POOL_HEAD "  servers: 127.0.0.1:11211:1\n", "t.yml:3:12: key 'servers': ",
             "expected a list of servers");
    load_err("p: 3\n", "t.yml:1:4: key 'p': ", "a pool is a mapping");
    load_err(POOL_HEAD "  server_connections: 0\n" ONE_SERVER,
             "t.yml:3:23: key 'server_connections': ", "must be 1..65535");
    load_err(POOL_HEAD "  balance_factor: 1.0\n" ONE_SERVER, "t.yml:3:19: key 'balance_factor': ",
             "greater than 1.0");
    load_err(POOL_HEAD "  read_from: nearest\n" ONE_SERVER, "t.yml:3:14: key 'read_from': ",
             "is not one of: primary, any-live, local-zone");
    load_err(POOL_HEAD "  on_down: retry\n" ONE_SERVER, "t.yml:3:12: key 'on_down': ",
             "failover, miss, error");
    load_err(POOL_HEAD "  write_to: some\n" ONE_SERVER, "t.yml:3:13: key 'write_to': ", NULL);
    load_err(POOL_HEAD "  protocol: http\n" ONE_SERVER, "t.yml:3:13: key 'protocol': ",
             "memcache, redis");
    load_err("ringleader: []\n" POOL_HEAD ONE_SERVER, "t.yml:1:13: key 'ringleader': ",
             "expected a mapping");
    load_err("ringleader:\n  log_level: 12\n" POOL_HEAD ONE_SERVER,
             "t.yml:2:14: key 'log_level': ", "must be 0..11");
}
END_TEST

START_TEST(test_error_bad_address)
{
    load_err("p:\n  listen: 127.0.0.1\n" ONE_SERVER, "t.yml:2:11: key 'listen': ", "no port");
    load_err("p:\n  listen: 127.0.0.1:0\n" ONE_SERVER, "t.yml:2:11: key 'listen': ",
             "port 0 is out of range 1..65535");
    load_err("p:\n  listen: 127.0.0.1:70000\n" ONE_SERVER, "t.yml:2:11: key 'listen': ",
             "out of range");
    load_err("p:\n  listen: \":22121\"\n" ONE_SERVER, "t.yml:2:11: key 'listen': ",
             "empty host");
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:1\n", "t.yml:4:6: key 'servers': ",
             "is not \"host:port:weight [name]\"");
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:0:1\n", "t.yml:4:6: key 'servers': ",
             "port 0 is out of range");
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:65536:1\n", "t.yml:4:6: key 'servers': ",
             "out of range");
    load_err(POOL_HEAD "  servers:\n   - :11211:1\n", "t.yml:4:6: key 'servers': ",
             "empty host");
    load_err(POOL_HEAD "  servers:\n   - {address: \"10.0.0.1\"}\n", "t.yml:4:16: key 'address': ",
             "no port");
    load_err(POOL_HEAD "  servers:\n   - {weight: 2}\n", "t.yml:4:6: key 'address': ",
             "missing");
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:11211:1 two words\n",
             "t.yml:4:6: key 'servers': ", "one word");
}
END_TEST

START_TEST(test_error_weight)
{
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:11211:0\n", "t.yml:4:6: key 'servers': ",
             "weight 0 is out of range 1..2147483647");
    /* nutcracker's limit: its weight is an int. */
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:11211:2147483648\n",
             "t.yml:4:6: key 'servers': ", "weight 2147483648 is out of range 1..2147483647");
    /* ... and its pool total a uint32_t */
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:11211:2147483647\n   - 127.0.0.1:11212:2147483647\n"
             "   - 127.0.0.1:11213:2\n", "t.yml:4:4: key 'servers': ",
             "add up to 4294967296, more than 4294967295");
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:11211:-1\n", "t.yml:4:6: key 'servers': ",
             "weight '-1' is not a positive whole number");
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:11211:heavy a\n",
             "t.yml:4:6: key 'servers': ", "weight 'heavy'");
    load_err(POOL_HEAD "  servers:\n   - {address: \"h:1\", weight: 0}\n",
             "t.yml:4:31: key 'weight': ", "out of range");
    load_err(POOL_HEAD "  servers:\n   - {address: \"h:1\", weight: two}\n",
             "t.yml:4:31: key 'weight': ", "'two' is not a whole number");
}
END_TEST

/* nutcracker's own example gives 100000; every weight it accepts loads, and places. */
START_TEST(test_weight_as_nutcracker_accepts)
{
    struct conf *c = load_ok(POOL_HEAD "  servers:\n   - 127.0.0.1:11214:100000\n"
                             "   - 127.0.0.1:11215:1\n   - 127.0.0.1:11216:2147483647\n"
                             "   - 127.0.0.1:11217:01\n");
    ck_assert_uint_eq(c->pools[0].servers[0].weight, 100000);
    ck_assert_uint_eq(c->pools[0].servers[2].weight, 2147483647u);
    ck_assert_uint_eq(c->pools[0].servers[3].weight, 1);
    conf_free(c);
    c = load_ok(POOL_HEAD "  servers:\n   - {address: \"h:1\", weight: 2147483647}\n");
    ck_assert_uint_eq(c->pools[0].servers[0].weight, 2147483647u);
    conf_free(c);
}
END_TEST

/* How many lines err has. */
static int lines_of(const char *s)
{
    int n = *s ? 1 : 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Every error of a file, sorted by line, each with FILE:LINE:COL, in one message. */
START_TEST(test_error_every_one_reported)
{
    static char big[8192];
    struct conf *c = (struct conf *)1;
    const char *y =
        "ringleader:\n"
        "  workers: many\n"                          /* 2: not a number */
        "  wokers: 2\n"                              /* 3: unknown, did you mean */
        "a:\n"
        "  listen: 127.0.0.1:22121\n"
        "  timeout: 4s\n"                            /* 6: not a number */
        "  hahs: md5\n"                              /* 7: unknown */
        "  servers:\n"
        "   - 127.0.0.1:11211:0\n"                   /* 9: weight */
        "   - 127.0.0.1:11212:1\n"
        "   - nohostport\n"                          /* 11: not host:port:weight */
        "b:\n"                                       /* 12: no listen */
        "  distribution: ketamma\n"                  /* 13: unknown, did you mean */
        "  servers:\n"
        "   - 127.0.0.1:11213:1\n"
        "c:\n"
        "  listen: 127.0.0.1:22121\n"                /* 17: same as a's */
        "  servers:\n"
        "   - 127.0.0.1:11214:1\n";
    ck_assert_int_eq(conf_load_buffer("t.yml", y, strlen(y), &c, big, sizeof(big)), -1);
    ck_assert_ptr_null(c);
    static const char *const want[] = {
        "t.yml:2:12: key 'workers': 'many' is not a whole number",
        "t.yml:3:3: key 'wokers': unknown ringleader key; did you mean 'workers'?",
        "t.yml:6:12: key 'timeout': '4s' is not a whole number",
        "t.yml:7:3: key 'hahs': unknown pool key; did you mean 'hash'?",
        "t.yml:9:6: key 'servers': '127.0.0.1:11211:0': weight 0 is out of range",
        "t.yml:11:6: key 'servers': 'nohostport' is not",
        "t.yml:12:1: key 'listen': missing in pool 'b'",
        "t.yml:13:17: key 'distribution': unknown distribution 'ketamma'; did you mean 'ketama'?",
        "t.yml:17:11: key 'listen': pool 'c' listens on 127.0.0.1:22121, which pool 'a' (line 4)",
    };
    ck_assert_int_eq(lines_of(big), (int)(sizeof(want) / sizeof(want[0])));
    const char *line = big;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        ck_assert_msg(strncmp(line, want[i], strlen(want[i])) == 0, "line %zu: '%.*s' is not '%s'",
                      i + 1, (int)strcspn(line, "\n"), line, want[i]);
        line += strcspn(line, "\n") + 1;
    }
}
END_TEST

/* A check that combines keys is not run on a key that failed: no error follows from another. */
START_TEST(test_error_no_cascade)
{
    static char big[4096];
    struct conf *c = NULL;
    const char *y = POOL_HEAD "  distribution: slots\n  replicas: 2\n"
                    "  servers:\n   - 127.0.0.1:11211:1 a\n   - bad\n"
                    "  slots:\n    a: 0-16383\n";
    ck_assert_int_eq(conf_load_buffer("t.yml", y, strlen(y), &c, big, sizeof(big)), -1);
    ck_assert_msg(lines_of(big) == 1, "only the server error, got:\n%s", big);
    ck_assert_ptr_nonnull(strstr(big, "t.yml:7:6: key 'servers': 'bad'"));
    /* an unknown hash: no "takes no seed" about the default it fell back to */
    y = POOL_HEAD "  hash: xxh33\n  hash_seed: 7\n" ONE_SERVER;
    ck_assert_int_eq(conf_load_buffer("t.yml", y, strlen(y), &c, big, sizeof(big)), -1);
    ck_assert_msg(lines_of(big) == 1, "only the hash error, got:\n%s", big);
    ck_assert_ptr_nonnull(strstr(big, "did you mean 'xxh3'?"));
}
END_TEST

/* Suggestions: within two edits of a known key, and where a key belongs. */
START_TEST(test_error_did_you_mean)
{
    load_err(POOL_HEAD "  server_retry_timout: 10\n" ONE_SERVER, "t.yml:3:3: key 'server_retry_timout': ",
             "did you mean 'server_retry_timeout'?");
    load_err(POOL_HEAD "  auto_eject_host: true\n" ONE_SERVER, "t.yml:3:3: ",
             "did you mean 'auto_eject_hosts'?");
    load_err(POOL_HEAD "  servers:\n   - {adress: \"h:1\"}\n", "t.yml:4:7: key 'adress': ",
             "unknown server key; did you mean 'address'?");
    load_err(POOL_HEAD "  on_down: failvoer\n" ONE_SERVER, "t.yml:3:12: ", "did you mean 'failover'?");
    /* far from everything: no guess */
    load_err(POOL_HEAD "  colour: blue\n" ONE_SERVER, "t.yml:3:3: key 'colour': ", "unknown pool key");
    ck_assert_ptr_null(strstr(errbuf, "did you mean"));
    /* a key of the other section */
    load_err(POOL_HEAD "  workers: 2\n" ONE_SERVER, "t.yml:3:3: key 'workers': ",
             "is a setting of the 'ringleader:' section");
    load_err("ringleader:\n  timeout: 100\n" POOL_HEAD ONE_SERVER, "t.yml:2:3: key 'timeout': ",
             "is a pool key");
    /* the global section misspelt reads as a pool */
    load_err("ringleadr:\n  workers: 2\n" POOL_HEAD ONE_SERVER, "t.yml:1:1: key 'listen': ",
             "did you mean the 'ringleader:' section?");
}
END_TEST

/* More errors than fit: whole lines, then how many are left out. */
START_TEST(test_error_many_are_counted)
{
    static char text[16384], big[1024];
    size_t n = (size_t)snprintf(text, sizeof(text), POOL_HEAD "  servers:\n");
    for (int i = 0; i < 100; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "   - 127.0.0.1:%d:0\n", 20000 + i);
    struct conf *c = NULL;
    ck_assert_int_eq(conf_load_buffer("t.yml", text, n, &c, big, sizeof(big)), -1);
    const char *last = strrchr(big, '\n');
    ck_assert_ptr_nonnull(last);
    int shown = lines_of(big) - 1, more = 0;
    ck_assert_int_eq(sscanf(last + 1, "t.yml: %d more errors not shown", &more), 1);
    ck_assert_int_eq(shown + more, 100);
    ck_assert_ptr_nonnull(strstr(big, "t.yml:4:6: key 'servers': '127.0.0.1:20000:0'"));
}
END_TEST

START_TEST(test_error_duplicates)
{
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:11211:1 a\n   - 127.0.0.1:11211:2 b\n",
             "t.yml:5:6: key 'servers': ",
             "duplicate server address '127.0.0.1:11211' in pool 'p' (first at line 4)");
    load_err(POOL_HEAD "  servers:\n   - 127.0.0.1:11211:1 a\n   - 127.0.0.1:11212:1 a\n",
             "t.yml:5:6: key 'servers': ", "duplicate server name 'a'");
    load_err(POOL_HEAD "  servers:\n   - 10.0.0.1:11211:1\n   - 10.0.0.2:11211:1 10.0.0.1\n",
             "t.yml:5:6: key 'servers': ", "duplicate server identity '10.0.0.1'");
    load_err(POOL_HEAD ONE_SERVER "p:\n  listen: 127.0.0.1:22122\n" ONE_SERVER,
             "t.yml:5:1: key 'p': ", "duplicate pool name (first at line 1)");
    load_err(POOL_HEAD ONE_SERVER "q:\n  listen: 127.0.0.1:22121\n" ONE_SERVER,
             "t.yml:6:11: key 'listen': ",
             "pool 'q' listens on 127.0.0.1:22121, which pool 'p' (line 1) already uses");
    load_err(POOL_HEAD ONE_SERVER "q:\n  listen: 0.0.0.0:22121\n" ONE_SERVER,
             "t.yml:6:11: key 'listen': ", "already uses");
    load_err(POOL_HEAD "  timeout: 1\n  timeout: 2\n" ONE_SERVER, "t.yml:4:3: key 'timeout': ",
             "given twice (first at line 3)");
    load_err("p:\n  listen: 127.0.0.1:22222\n" ONE_SERVER, "t.yml:2:11: key 'listen': ",
             "the stats address");
}
END_TEST

START_TEST(test_error_hash_dist)
{
    load_err(POOL_HEAD "  hash: sha1\n" ONE_SERVER, "t.yml:3:9: key 'hash': ",
             "unknown hash 'sha1'; expected one of: ");
    load_err(POOL_HEAD "  distribution: consistent\n" ONE_SERVER,
             "t.yml:3:17: key 'distribution': ", "unknown distribution 'consistent'");
    load_err(POOL_HEAD "  hash_tag: \"{\"\n" ONE_SERVER, "t.yml:3:13: key 'hash_tag': ",
             "must be exactly 2 characters");
    load_err(POOL_HEAD "  hash_tag: \"{}}\"\n" ONE_SERVER, "t.yml:3:13: key 'hash_tag': ", NULL);
    load_err(POOL_HEAD "  hash_seed: 7\n" ONE_SERVER, "t.yml:3:14: key 'hash_seed': ",
             "hash fnv1a_64 takes no seed");
    load_err(POOL_HEAD "  hash: md5\n  hash_seed: 7\n" ONE_SERVER, "t.yml:4:14: key 'hash_seed': ",
             "hash md5 takes no seed");
    /* a seed is fine with a seedable hash, explicit or by default */
    struct conf *c = load_ok(POOL_HEAD "  distribution: maglev\n  hash_seed: 7\n" ONE_SERVER);
    ck_assert_int_eq(c->pools[0].hash, HASH_XXH3);
    ck_assert_uint_eq(c->pools[0].hash_seed, 7);
    conf_free(c);
    load_err(POOL_HEAD "  distribution: maglev\n  maglev_table_size: 65536\n" ONE_SERVER,
             "t.yml:4:22: key 'maglev_table_size': ", "not a prime");
}
END_TEST

START_TEST(test_error_pool_shape)
{
    load_err(POOL_HEAD "  timeout: 10\n", "t.yml:1:1: key 'servers': ", "pool 'p' has no servers");
    load_err(POOL_HEAD "  servers: []\n", "t.yml:3:12: key 'servers': ", "pool 'p' has no servers");
    load_err("p:\n" ONE_SERVER, "t.yml:1:1: key 'listen': ", "missing in pool 'p'");
    load_err(POOL_HEAD "  redis: true\n  protocol: memcache\n" ONE_SERVER,
             "t.yml:4:13: key 'protocol': ", "contradicts redis: true on line 3");
    load_err(POOL_HEAD "  replicas: 3\n  servers:\n   - a:1:1\n   - b:1:1\n",
             "t.yml:3:13: key 'replicas': ", "3 is more than the 2 server(s) of pool 'p'");
    load_err("ringleader:\n  workers: 2\n", "t.yml:1:1: ", "no pools");
}
END_TEST

START_TEST(test_error_routes)
{
    load_err(POOL_HEAD "  routes:\n    - {prefix: \"u:\", pool: users}\n" ONE_SERVER,
             "t.yml:4:28: key 'routes': ", "route 'u:' goes to pool 'users', which does not exist");
    load_err(POOL_HEAD "  routes:\n    - {prefix: \"u:\"}\n" ONE_SERVER,
             "t.yml:4:7: key 'routes': ", "needs both prefix and pool");
    load_err(POOL_HEAD "  routes:\n    - {prefix: \"u:\", pool: p, to: x}\n" ONE_SERVER,
             "t.yml:4:31: key 'routes': ", "unknown key 'to'");
    load_err(POOL_HEAD "  routes:\n    - {prefix: \"u:\", pool: r}\n" ONE_SERVER
             "r:\n  listen: 127.0.0.1:22122\n  redis: true\n" ONE_SERVER,
             "t.yml:4:28: key 'routes': ", "which speaks redis, not memcache");
    load_err(POOL_HEAD "  routes:\n    - {prefix: \"u:\", pool: p}\n    - {prefix: \"u:\", pool: p}\n"
             ONE_SERVER, "t.yml:5:16: key 'routes': ", "prefix 'u:' is routed twice");
}
END_TEST

START_TEST(test_error_yaml_and_empty)
{
    load_err("", "t.yml:1:1: ", "the file is empty");
    load_err("# only a comment\n", "t.yml:1:1: ", "the file is empty");
    load_err(POOL_HEAD "  servers: [a\n", "t.yml:", "YAML syntax error");
    load_err("p:\n  listen: 127.0.0.1:22121\n   hash: md5\n", "t.yml:3:8: ",
             "YAML syntax error: mapping values are not allowed in this context");
    load_err("p:\n\tlisten: x\n", "t.yml:2:1: ", "YAML syntax error");
    load_err("- a\n- b\n", "t.yml:1:1: ", "expected a mapping of pool names");
    load_err(POOL_HEAD ONE_SERVER "---\nq: 1\n", "t.yml:6:1: ", "a second YAML document");

    struct conf *c = (struct conf *)1;
    ck_assert_int_eq(conf_load("/nonexistent/rl.yml", &c, errbuf, sizeof(errbuf)), -1);
    ck_assert_ptr_null(c);
    ck_assert_str_eq(errbuf, "/nonexistent/rl.yml: cannot open: No such file or directory");
}
END_TEST

/* A tiny error buffer truncates the message; it never overflows. */
START_TEST(test_error_small_buffer)
{
    char small[12];
    struct conf *c = NULL;
    const char *y = POOL_HEAD "  hashing: md5\n" ONE_SERVER;
    ck_assert_int_eq(conf_load_buffer("t.yml", y, strlen(y), &c, small, sizeof(small)), -1);
    ck_assert_str_eq(small, "t.yml:3:3: ");
    ck_assert_int_eq(conf_load_buffer("t.yml", y, strlen(y), &c, NULL, 0), -1);
}
END_TEST

START_TEST(test_example_files)
{
    static const char *files[] = { "conf/ringleader.yml", "conf/examples/twemproxy.yml",
                                   "conf/examples/extensions.yml" };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char path[1024];
        struct conf *c = NULL;
        snprintf(path, sizeof(path), "%s/%s", srcdir(), files[i]);
        ck_assert_msg(conf_load(path, &c, errbuf, sizeof(errbuf)) == 0, "%s", errbuf);
        ck_assert_uint_ge(c->npools, 1);
        conf_free(c);
    }
}
END_TEST

/* ------------------------------------------------------------ redis_cluster */

/* ------------------------------------------------------------ shadow */

#define SHADOW_NEXT "n:\n  listen: 127.0.0.1:22123\n" ONE_SERVER

START_TEST(test_shadow)
{
    struct conf *c = load_ok(POOL_HEAD ONE_SERVER "  shadow: {pool: n}\n" SHADOW_NEXT);
    const struct conf_shadow *sh = &c->pools[0].shadow;
    ck_assert_str_eq(sh->pool, "n");
    ck_assert(sh->fraction == 1.0);
    ck_assert_int_eq(sh->compare, 0);
    ck_assert_uint_eq(sh->queue_limit, 1000);
    ck_assert_uint_eq(sh->batch_ms, 1);
    ck_assert_ptr_null(c->pools[1].shadow.pool);
    conf_free(c);

    c = load_ok(POOL_HEAD ONE_SERVER "  shadow:\n    pool: n\n    fraction: 0.25\n"
                "    compare: true\n    queue_limit: 20\n    batch_ms: 0\n" SHADOW_NEXT);
    sh = &c->pools[0].shadow;
    ck_assert(sh->fraction == 0.25);
    ck_assert_int_eq(sh->compare, 1);
    ck_assert_uint_eq(sh->queue_limit, 20);
    ck_assert_uint_eq(sh->batch_ms, 0);
    conf_free(c);

    load_err(POOL_HEAD ONE_SERVER "  shadow: {pool: n, batch_ms: 101}\n" SHADOW_NEXT, "t.yml:5:31:",
             "101 is out of range: must be 0..100");
    load_err(POOL_HEAD ONE_SERVER "  shadow: {pool: n, fraction: 0}\n" SHADOW_NEXT, "t.yml:5:",
             "is not a number in (0, 1]");
    load_err(POOL_HEAD ONE_SERVER "  shadow: {pool: n, batch: 1}\n" SHADOW_NEXT, "t.yml:5:",
             "unknown key 'batch' in shadow (expected pool, fraction, compare, queue_limit, "
             "batch_ms)");
    load_err(POOL_HEAD ONE_SERVER "  shadow: {fraction: 1}\n" SHADOW_NEXT, "t.yml:5:",
             "shadow needs a pool");
}
END_TEST

/* ------------------------------------------------------------ near_cache */

START_TEST(test_near_cache)
{
    struct conf *c = load_ok(POOL_HEAD "  redis: true\n" ONE_SERVER "  near_cache: {}\n");
    const struct conf_near_cache *nc = &c->pools[0].near_cache;
    ck_assert_int_eq(nc->on, 1);
    ck_assert_uint_eq(nc->size, 64u << 20);
    ck_assert_uint_eq(nc->max_value, 64u << 10);
    ck_assert_uint_eq(nc->ttl_ms, 0);
    ck_assert_int_eq(nc->keys, CONF_NC_HOT);
    conf_free(c);

    c = load_ok(POOL_HEAD ONE_SERVER "  near_cache:\n    size: 16MiB\n    keys: [\"cfg:\", u]\n"
                "    max_value: 1000\n    ttl_ms: 250\n");
    nc = &c->pools[0].near_cache;
    ck_assert_uint_eq(nc->size, 16u << 20);
    ck_assert_uint_eq(nc->max_value, 1000);
    ck_assert_uint_eq(nc->ttl_ms, 250);
    ck_assert_int_eq(nc->keys, CONF_NC_PREFIX);
    ck_assert_uint_eq(nc->nprefixes, 2);
    ck_assert_str_eq(nc->prefixes[0], "cfg:");
    ck_assert_str_eq(nc->prefixes[1], "u");
    conf_free(c);

    c = load_ok(POOL_HEAD ONE_SERVER);
    ck_assert_int_eq(c->pools[0].near_cache.on, 0);
    conf_free(c);

    load_err(POOL_HEAD ONE_SERVER "  near_cache: {size: 1MiB}\n", "t.yml:5:",
             "near_cache of a memcached pool needs ttl_ms > 0");
    load_err(POOL_HEAD "  redis: true\n" ONE_SERVER "  near_cache: {size: 1TB}\n", "t.yml:",
             "is not a byte count");
    load_err(POOL_HEAD "  redis: true\n" ONE_SERVER "  near_cache: {keys: some}\n", "t.yml:",
             "keys 'some' is not hot, all or a list of prefixes");
    load_err(POOL_HEAD "  redis: true\n" ONE_SERVER "  near_cache: {ttl: 1}\n", "t.yml:",
             "unknown key 'ttl' in near_cache");
    load_err(POOL_HEAD "  redis: true\n" ONE_SERVER "  near_cache: {size: 100}\n", "t.yml:",
             "is under 4096 bytes");
}
END_TEST

#define CL_HEAD "cl:\n  listen: 127.0.0.1:22122\n  redis_cluster: true\n" \
                "  servers:\n   - 10.0.0.1:7000:1\n   - 10.0.0.2:7000:1\n"

START_TEST(test_redis_cluster_pool)
{
    struct conf *c = load_ok(CL_HEAD "  read_from: any-live\n  cluster_refresh: 5\n"
                             "  redis_auth: pw\n  timeout: 2000\n"
                             "  cluster_zones:\n    \"10.0.1.0/24\": eu-1a\n"
                             "    \"10.0.2.7:7001\": eu-1b\n    10.0.3.3: eu-1c\n");
    const struct conf_pool *p = &c->pools[0];
    ck_assert_int_eq(p->redis_cluster, 1);
    ck_assert_int_eq(p->protocol, CONF_PROTO_REDIS);     /* implied */
    ck_assert_int_eq(p->dist, DIST_SLOTS);
    ck_assert_int_eq(p->hash, HASH_CRC16);
    ck_assert_int_eq(p->has_hash_tag, 1);
    ck_assert_int_eq(memcmp(p->hash_tag, "{}", 2), 0);
    ck_assert_int_eq(p->eject, 1);
    ck_assert_int_eq(p->replica_reads, 1);
    ck_assert_uint_eq(p->cluster_refresh_s, 5);
    ck_assert_uint_eq(p->ncluster_zones, 3);
    ck_assert_str_eq(conf_zone_match(p, "10.0.1.77", 7000), "eu-1a");
    ck_assert_str_eq(conf_zone_match(p, "10.0.2.7", 7001), "eu-1b");
    ck_assert_ptr_null(conf_zone_match(p, "10.0.2.7", 7000));
    ck_assert_str_eq(conf_zone_match(p, "10.0.3.3", 1), "eu-1c");
    ck_assert_ptr_null(conf_zone_match(p, "10.0.4.1", 7000));
    conf_free(c);

    c = load_ok(CL_HEAD "  hash_tag: \"{}\"\n  redis: true\n");
    ck_assert_uint_eq(c->pools[0].cluster_refresh_s, 30);
    ck_assert_int_eq(c->pools[0].replica_reads, 0);
    conf_free(c);

    /* server_tls applies to every node and to the slot map's fetches */
    c = load_ok(CL_HEAD "  server_tls:\n    server_name: nodes.internal\n");
    ck_assert_ptr_nonnull(c->pools[0].server_tls);
    ck_assert_str_eq(c->pools[0].server_tls->server_name, "nodes.internal");
    conf_free(c);

    /* a seed's own zone is its node's */
    c = load_ok("cl:\n  listen: 127.0.0.1:22122\n  redis_cluster: true\n  servers:\n"
                "   - {address: \"10.0.0.1:7000\", zone: z9}\n");
    ck_assert_str_eq(conf_zone_match(&c->pools[0], "10.0.0.1", 7000), "z9");
    conf_free(c);
}
END_TEST

START_TEST(test_redis_cluster_errors)
{
    load_err(CL_HEAD "  hash: crc16\n", "t.yml:", "not used with redis_cluster: true (keys go by "
             "CRC16 of the hash tag, as Redis Cluster defines it); remove it");
    load_err(CL_HEAD "  distribution: ketama\n", "t.yml:", "'distribution': not used with "
             "redis_cluster: true (the slot map comes from the cluster itself)");
    load_err(CL_HEAD "  replicas: 2\n", "t.yml:", "'replicas': not used with redis_cluster");
    load_err(CL_HEAD "  on_down: miss\n", "t.yml:", "the cluster fails over by itself");
    load_err(CL_HEAD "  hash_tag: \"<>\"\n", "t.yml:", "a Redis Cluster's hash tag is \"{}\"");
    load_err(CL_HEAD "  redis_db: 2\n", "t.yml:", "a Redis Cluster has only database 0");
    load_err(CL_HEAD "  rejoin: flush\n", "t.yml:", "'rejoin': not used with redis_cluster");
    load_err(CL_HEAD "  failover_ttl: 60\n", "t.yml:", "never to a failover server");
    load_err(CL_HEAD "  collapse_gets: true\n", "t.yml:", "'collapse_gets': not used with");
    load_err(CL_HEAD "  protocol: memcache\n", "t.yml:", "a Redis Cluster pool speaks Redis");
    load_err(CL_HEAD "  redis: false\n", "t.yml:", "a Redis Cluster pool speaks Redis");
    load_err(CL_HEAD "  cluster_zones:\n    \"10.0.1.0/33\": a\n", "t.yml:", "not an IPv4 network");
    load_err(CL_HEAD "  cluster_zones: [a]\n", "t.yml:", "expected a mapping");
    load_err(POOL_HEAD ONE_SERVER "  cluster_refresh: 3\n", "t.yml:",
             "'cluster_refresh': needs redis_cluster: true");
    load_err(POOL_HEAD ONE_SERVER "  cluster_zones:\n    a: b\n", "t.yml:",
             "'cluster_zones': needs redis_cluster: true");
    load_err(CL_HEAD "  cluster_refresh: 100000\n", "t.yml:", "cluster_refresh");
}
END_TEST

/* A derived configuration shares its base's strings and owns what it replaced. */
START_TEST(test_derive_servers)
{
    struct conf *base = load_ok(CL_HEAD);
    struct conf *d = conf_derive(base);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_eq(conf_base(d), base);
    ck_assert_ptr_eq(d->pools[0].name, base->pools[0].name);
    struct conf_server *sv = calloc(3, sizeof(*sv));
    char err[128];
    ck_assert_int_eq(conf_server_init(&sv[0], "10.0.0.1:7000", NULL, err, sizeof(err)), 0);
    ck_assert_int_eq(conf_server_init(&sv[1], "10.0.0.2:7000", "z", err, sizeof(err)), 0);
    ck_assert_int_eq(conf_server_init(&sv[2], "[::1]:7000", NULL, err, sizeof(err)), 0);
    ck_assert_str_eq(sv[2].addr.host, "::1");
    uint32_t *sm = calloc(16384, sizeof(*sm));
    conf_derive_servers(d, 0, sv, 3, sm);
    ck_assert_uint_eq(d->pools[0].nservers, 3);
    ck_assert_uint_eq(base->pools[0].nservers, 2);
    ck_assert_str_eq(d->pools[0].servers[1].ident, "10.0.0.2:7000");
    ck_assert_str_eq(d->pools[0].servers[1].zone, "z");
    /* derived again from a derived one: from its base */
    struct conf *d2 = conf_derive(d);
    ck_assert_ptr_eq(conf_base(d2), base);
    ck_assert_uint_eq(d2->pools[0].nservers, 2);
    conf_free(base);        /* the derived ones hold it */
    ck_assert_str_eq(d->pools[0].name, "cl");
    conf_free(d);
    ck_assert_str_eq(d2->pools[0].name, "cl");
    conf_free(d2);
    struct conf_server bad;                 /* sv went with d */
    ck_assert_int_eq(conf_server_init(&bad, "nope", NULL, err, sizeof(err)), -1);
}
END_TEST

/* ------------------------------------------------------------ sentinel */

#define SN_HEAD "sn:\n  listen: 127.0.0.1:22123\n"

START_TEST(test_sentinel_pool)
{
    struct conf *c = load_ok(SN_HEAD "  redis_auth: mpw\n  sentinel:\n    master: mymaster\n"
                             "    sentinels: [127.0.0.1:26379, \"[::1]:26380\", s3.internal:26381]\n"
                             "    sentinel_auth: spw\n    sentinel_username: watcher\n"
                             "    read_from: primary\n");
    const struct conf_pool *p = &c->pools[0];
    ck_assert_ptr_nonnull(p->sentinel);
    ck_assert_int_eq(p->protocol, CONF_PROTO_REDIS);     /* implied */
    ck_assert_uint_eq(p->nservers, 0);                   /* the master, at the snapshot */
    ck_assert_str_eq(p->sentinel->master, "mymaster");
    ck_assert_uint_eq(p->sentinel->naddrs, 3);
    ck_assert_str_eq(p->sentinel->addrs[1].host, "::1");
    ck_assert_uint_eq(p->sentinel->addrs[2].port, 26381);
    ck_assert_str_eq(p->sentinel->auth, "spw");
    ck_assert_str_eq(p->sentinel->username, "watcher");
    ck_assert_str_eq(p->redis_auth, "mpw");
    conf_free(c);

    c = load_ok(SN_HEAD "  sentinel:\n    master: m\n    sentinels: [127.0.0.1:1]\n"
                "    read_from: any-live\n");
    ck_assert_int_eq(c->pools[0].sentinel->read_from, CONF_READ_ANY_LIVE);
    ck_assert_int_eq(c->pools[0].replica_reads, 0);     /* no READONLY: not a cluster */
    conf_free(c);
    load_err(SN_HEAD "  sentinel:\n    master: m\n    sentinels: [127.0.0.1:1]\n"
             "    read_from: local-zone\n", "t.yml:", "is not one of: primary, any-live");
    load_err(SN_HEAD "  sentinel:\n    sentinels: [127.0.0.1:1]\n", "t.yml:", "needs master");
    load_err(SN_HEAD "  sentinel:\n    master: m\n", "t.yml:", "needs sentinels");
    load_err(SN_HEAD "  sentinel:\n    master: m\n    sentinels: []\n", "t.yml:",
             "the list of sentinels is empty");
    load_err(SN_HEAD "  sentinel:\n    master: m\n    sentinels: [127.0.0.1:1, 127.0.0.1:1]\n",
             "t.yml:", "listed twice");
    load_err(SN_HEAD "  sentinel:\n    master: m\n    sentinels: [/tmp/s.sock]\n", "t.yml:",
             "is not host:port");
    load_err(SN_HEAD "  sentinel:\n    master: m\n    sentinels: [127.0.0.1:1]\n"
             "    master_name: x\n", "t.yml:", "unknown sentinel key");
    load_err(SN_HEAD ONE_SERVER "  sentinel:\n    master: m\n    sentinels: [127.0.0.1:1]\n",
             "t.yml:", "remove servers");
    load_err(SN_HEAD "  protocol: memcache\n  sentinel:\n    master: m\n"
             "    sentinels: [127.0.0.1:1]\n", "t.yml:", "a sentinel pool speaks Redis");
    load_err(SN_HEAD "  server_tls:\n    verify: false\n  sentinel:\n    master: m\n"
             "    sentinels: [127.0.0.1:1]\n", "t.yml:", "server_tls with sentinel");
    load_err(SN_HEAD "  sentinel: mymaster\n", "t.yml:", "expected a mapping");
}
END_TEST

/* ------------------------------------------------------------ introspection */

START_TEST(test_introspection_settings)
{
    struct conf *c = load_ok(POOL_HEAD ONE_SERVER);
    ck_assert_int_eq(c->global.slowlog_threshold_us, 10000);
    ck_assert_uint_eq(c->global.slowlog_max_len, 128);
    ck_assert_ptr_null(c->global.request_log.path);
    conf_free(c);
    c = load_ok("ringleader:\n  slowlog_threshold_us: -1\n  slowlog_max_len: 0\n"
                "  request_log: {path: /tmp/r.log}\n" POOL_HEAD ONE_SERVER);
    ck_assert_int_eq(c->global.slowlog_threshold_us, -1);
    ck_assert_uint_eq(c->global.slowlog_max_len, 0);
    ck_assert_str_eq(c->global.request_log.path, "/tmp/r.log");
    ck_assert(c->global.request_log.sample == 0.01);    /* the defaults */
    ck_assert_int_eq(c->global.request_log.errors, 1);
    ck_assert_int_eq(c->global.request_log.key_hash, 0);
    conf_free(c);
    c = load_ok("ringleader:\n  request_log: {path: r.log, sample: 1, errors: sampled, key: hash}\n"
                POOL_HEAD ONE_SERVER);
    ck_assert(c->global.request_log.sample == 1.0);
    ck_assert_int_eq(c->global.request_log.errors, 0);
    ck_assert_int_eq(c->global.request_log.key_hash, 1);
    conf_free(c);
    load_err("ringleader:\n  slowlog_threshold_us: -2\n" POOL_HEAD ONE_SERVER, "t.yml:2:", NULL);
    load_err("ringleader:\n  request_log: {sample: 0.5}\n" POOL_HEAD ONE_SERVER, "t.yml:2:",
             "needs a path");
    load_err("ringleader:\n  request_log: {path: r, sample: 1.5}\n" POOL_HEAD ONE_SERVER,
             "t.yml:2:", "not a fraction");
    load_err("ringleader:\n  request_log: {path: r, errors: some}\n" POOL_HEAD ONE_SERVER,
             "t.yml:2:", "all or sampled");
    load_err("ringleader:\n  request_log: {path: r, key: md5}\n" POOL_HEAD ONE_SERVER,
             "t.yml:2:", "plain or hash");
    load_err("ringleader:\n  request_log: {path: r, rate: 3}\n" POOL_HEAD ONE_SERVER,
             "t.yml:2:", "unknown key 'rate'");
    load_err("ringleader:\n  request_log: r.log\n" POOL_HEAD ONE_SERVER, "t.yml:2:", "expected");
}
END_TEST

static Suite *conf_suite(void)
{
    Suite *s = suite_create("conf");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_twemproxy_vectors);
    tcase_add_test(tc, test_allhash_vectors);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_on_down_follows_auto_eject_hosts);
    tcase_add_test(tc, test_default_hash_follows_distribution);
    tcase_add_test(tc, test_every_key);
    tcase_add_test(tc, test_slots_map);
    tcase_add_test(tc, test_slots_errors);
    tcase_add_test(tc, test_large_pool);
    tcase_add_test(tc, test_introspection_settings);
    tcase_add_test(tc, test_parse_addr);
    tcase_add_test(tc, test_error_unknown_key);
    tcase_add_test(tc, test_error_wrong_type);
    tcase_add_test(tc, test_error_bad_address);
    tcase_add_test(tc, test_error_weight);
    tcase_add_test(tc, test_error_duplicates);
    tcase_add_test(tc, test_error_hash_dist);
    tcase_add_test(tc, test_error_pool_shape);
    tcase_add_test(tc, test_error_routes);
    tcase_add_test(tc, test_error_yaml_and_empty);
    tcase_add_test(tc, test_error_small_buffer);
    tcase_add_test(tc, test_weight_as_nutcracker_accepts);
    tcase_add_test(tc, test_error_every_one_reported);
    tcase_add_test(tc, test_error_no_cascade);
    tcase_add_test(tc, test_error_did_you_mean);
    tcase_add_test(tc, test_error_many_are_counted);
    tcase_add_test(tc, test_example_files);
    tcase_add_test(tc, test_shadow);
    tcase_add_test(tc, test_near_cache);
    tcase_add_test(tc, test_redis_cluster_pool);
    tcase_add_test(tc, test_redis_cluster_errors);
    tcase_add_test(tc, test_derive_servers);
    tcase_add_test(tc, test_sentinel_pool);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(conf_suite)
