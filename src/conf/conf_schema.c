/* The keyword tables and the walk over them: each pool and the global section read, defaulted and checked, then the whole tree built. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "conf/conf.h"
#include "conf/conf_int.h"
#include "lib/util.h"

/*
 * How loading works.
 *
 * libyaml's document API turns the text into a node tree (it rejects
 * malformed YAML with a mark we report). We then walk the tree with
 * keyword tables in three steps, all before returning anything:
 *
 *   1. the root mapping: pool names (duplicates are ours to detect: libyaml
 *      keeps both keys) and the optional `ringleader:` section;
 *   2. each pool's mapping: every key is looked up in conf_pool_commands,
 *      unknown and repeated keys are errors, and the value nodes are
 *      remembered by command; setters then run in table order, so a setter
 *      may rely on the keys listed before it (hash_seed after hash, slots
 *      after servers); defaults and cross-key checks follow;
 *   3. keys that refer to other pools (routes), and checks across pools
 *      (listen addresses).
 *
 * Every message is "FILE:LINE:COL: key 'K': reason" with the position of
 * the offending node (libyaml's marks are 0-based; we print 1-based).
 *
 * Every error of a file is reported, not only the first: a failed key is
 * recorded and the walk goes on with the next key, server and pool, so one
 * `ringleader -t` lists them all, sorted by position. What cannot go on is
 * a YAML syntax error (libyaml stops there), and checks that combine keys
 * are skipped when one of those keys already failed (their verdict would be
 * about a value that is not there): no error follows from another. An
 * unknown key gets the nearest known one (edit distance at most 2) as a
 * suggestion.
 */


/* ----------------------------------------------------------- keyword tables */

static const char *const conf_proto_names[] = { "memcache", "redis", NULL };
static const char *const conf_read_names[] = { "primary", "any-live", "local-zone", NULL };
static const char *const conf_write_names[] = { "primary", "all", "all-async", NULL };
static const char *const conf_on_down_names[] = { "failover", "miss", "error", NULL };
static const char *const conf_rejoin_names[] = { "invalidate", "flush", "trust", NULL };

#define P(f) offsetof(struct conf_pool, f)
/*
 * Pool keys, in the order their setters run: a setter may read fields set
 * by the rows above it (hash_seed reads hash; slots reads servers, dist).
 */
static const struct conf_command conf_pool_commands[] = {
    /* twemproxy */
    { "listen",               conf__set_addr,     P(listen), 0, 0, NULL, 0 },
    { "hash",                 conf__set_hash,     P(hash), 0, 0, NULL, 0 },
    { "hash_tag",             conf__set_hash_tag, 0, 0, 0, NULL, 0 },
    { "distribution",         conf__set_dist,     P(dist), 0, 0, NULL, 0 },
    { "timeout",              conf__set_timeout,  P(timeout_ms), 0, INT32_MAX, NULL, 0 },
    { "backlog",              conf__set_int,      P(backlog), 0, INT32_MAX, NULL, 0 },
    { "preconnect",           conf__set_bool,     P(preconnect), 0, 0, NULL, 0 },
    { "redis",                conf__set_redis,    0, 0, 0, NULL, 0 },
    { "redis_auth",           conf__set_string,   P(redis_auth), 0, 0, NULL, 0 },
    { "redis_db",             conf__set_int,      P(redis_db), 0, INT32_MAX, NULL, 0 },
    { "redis_username",       conf__set_string,   P(redis_username), 0, 0, NULL, 0 },
    { "server_connections",   conf__set_u32,      P(server_connections), 1, 65535, NULL, 0 },
    { "auto_eject_hosts",     conf__set_bool,     P(auto_eject_hosts), 0, 0, NULL, 0 },
    { "server_retry_timeout", conf__set_int,      P(server_retry_timeout_ms), 0, INT32_MAX, NULL, 0 },
    { "server_failure_limit", conf__set_u32,      P(server_failure_limit), 0, UINT32_MAX, NULL, 0 },
    { "tcpkeepalive",         conf__set_bool,     P(tcpkeepalive), 0, 0, NULL, 0 },
    { "client_connections",   conf__set_u32,      P(client_connections), 0, UINT32_MAX, NULL, 0 },
    { "max_pinned",           conf__set_u32,      P(max_pinned), 0, 1000000, NULL, 0 },
    { "servers",              conf__set_servers,  0, 0, 0, NULL, 0 },
    /* ringleader */
    { "protocol",             conf__set_protocol, P(protocol), 0, 0, conf_proto_names, 0 },
    { "hash_seed",            conf__set_hash_seed, 0, 0, 0, NULL, 0 },
    { "vnodes",               conf__set_u32,      P(vnodes), 1, 4096, NULL, 0 },
    { "maglev_table_size",    conf__set_u32,      P(maglev_table_size), 3, 16777213, NULL, 0 },
    { "probes",               conf__set_u32,      P(probes), 1, 1024, NULL, 0 },
    { "balance_factor",       conf__set_factor,   P(balance_factor), 0, 0, NULL, 0 },
    { "replicas",             conf__set_u32,      P(replicas), 1, 64, NULL, 0 },
    { "read_from",            conf__set_enum,     P(read_from), 0, 0, conf_read_names, 0 },
    { "write_to",             conf__set_enum,     P(write_to), 0, 0, conf_write_names, 0 },
    { "on_down",              conf__set_enum,     P(on_down), 0, 0, conf_on_down_names, 0 },
    { "warmup",               conf__set_u32,      P(warmup_s), 0, 86400, NULL, 0 },
    { "item_size_max",        conf__set_u32,      P(item_size_max), 1024, 1073741824, NULL, 0 },
    { "allow_flush",          conf__set_bool,     P(allow_flush), 0, 0, NULL, 0 },
    { "coalesce_gets",        conf__set_bool,     P(coalesce_gets), 0, 0, NULL, 0 },
    { "rejoin",               conf__set_enum,     P(rejoin), 0, 0, conf_rejoin_names, 0 },
    { "rejoin_log_keys",      conf__set_u32,      P(rejoin_log_keys), 0, 100000000, NULL, 0 },
    { "failover_ttl",         conf__set_u32,      P(failover_ttl), 0, 2592000, NULL, 0 },
    { "collapse_gets",        conf__set_collapse, P(collapse_gets), 0, 0, NULL, 0 },
    { "scripts",              conf__set_bool,     P(scripts), 0, 0, NULL, 0 },
    { "slots",                conf__set_slots,    0, 0, 0, NULL, 0 },
    { "routes",               conf__set_routes,   0, 0, 0, NULL, 1 },
    { "redis_cluster",        conf__set_bool,     P(redis_cluster), 0, 0, NULL, 0 },
    { "cluster_refresh",      conf__set_u32,      P(cluster_refresh_s), 0, 86400, NULL, 0 },
    { "cluster_zones",        conf__set_cluster_zones, 0, 0, 0, NULL, 0 },
    { "shadow",               conf__set_shadow,   0, 0, 0, NULL, 1 },
    { "tls",                  conf__set_tls,      P(tls), 0, 0, NULL, 0 },
    { "leases",               conf__set_leases,   P(leases), 0, 0, NULL, 0 },
    { "server_tls",           conf__set_tls,      P(server_tls), 0, 0, NULL, 0 },
    { "sentinel",             conf__set_sentinel, P(sentinel), 0, 0, NULL, 0 },
    { "resolve_interval",     conf__set_u32,      P(resolve_interval_s), 1, 86400, NULL, 0 },
    { "discovery",            conf__set_discovery, P(discovery), 0, 0, NULL, 0 },
    { "near_cache",           conf__set_near_cache, 0, 0, 0, NULL, 1 },
    { "migrate",              conf__set_bool,     P(migrate), 0, 0, NULL, 0 },
    { "migrate_rate",         conf__set_u32,      P(migrate_rate), 1, 10000000, NULL, 0 },
};
#undef P

/* The row of a pool key in conf_pool_commands (the key must be there). */
static size_t conf__pool_index(const char *name)
{
    for (size_t i = 0; i < RL_ARRAY_SIZE(conf_pool_commands); i++)
        if (strcmp(conf_pool_commands[i].name, name) == 0)
            return i;
    return 0;
}

/* The value node a pool gave for a key (NULL when absent). */
static yaml_node_t *conf__pool_value(yaml_node_t **values, const char *name)
{
    for (size_t i = 0; i < RL_ARRAY_SIZE(conf_pool_commands); i++)
        if (strcmp(conf_pool_commands[i].name, name) == 0)
            return values[i];
    return NULL;
}

#define G(f) offsetof(struct conf_global, f)
static const struct conf_command conf_global_commands[] = {
    { "workers",             conf__set_u32,    G(workers), 0, 1024, NULL, 0 },
    { "stats_listen",        conf__set_local_addr, G(stats_listen), 0, 0, NULL, 0 },
    { "stats_interval",      conf__set_int,    G(stats_interval_ms), 1, INT32_MAX, NULL, 0 },
    { "admin",               conf__set_local_addr, G(admin_listen), 0, 0, NULL, 0 },
    { "admin_token",         conf__set_string, G(admin_token), 0, 0, NULL, 0 },
    { "admin_hosts",         conf__set_words,  G(admin_hosts), 0, 0, NULL, 0 },
    { "log_file",            conf__set_string, G(log_file), 0, 0, NULL, 0 },
    { "log_level",           conf__set_int,    G(log_level), 0, 11, NULL, 0 },
    { "watch",               conf__set_bool,   G(watch), 0, 0, NULL, 0 },
    { "zone",                conf__set_word,   G(zone), 0, 0, NULL, 0 },
    { "drain_timeout",       conf__set_int,    G(drain_timeout_ms), 0, INT32_MAX, NULL, 0 },
    { "client_output_limit", conf__set_u32,    G(client_output_limit), 1024, UINT32_MAX, NULL, 0 },
    { "memory_limit",        conf__set_u64,    G(memory_limit), 1048576, INT64_MAX, NULL, 0 },
    { "client_timeout",      conf__set_int,    G(client_timeout_s), 0, 86400 * 365, NULL, 0 },
    { "client_header_timeout", conf__set_int,  G(client_header_timeout_s), 0, 86400, NULL, 0 },
    { "stream_threshold",    conf__set_u32,    G(stream_threshold), 4096, UINT32_MAX, NULL, 0 },
    { "latency_histograms",  conf__set_bool,   G(latency_histograms), 0, 0, NULL, 0 },
    { "hot_keys",            conf__set_bool,   G(hot_keys), 0, 0, NULL, 0 },
    { "rejoin_log",          conf__set_string, G(rejoin_log), 0, 0, NULL, 0 },
    { "tls_handshake_timeout", conf__set_int,  G(tls_handshake_timeout_s), 1, 3600, NULL, 0 },
    { "pubsub_output_limit", conf__set_u64,    G(pubsub_output_limit), 0, INT64_MAX, NULL, 0 },
    { "pubsub_output_soft_limit", conf__set_u64, G(pubsub_output_soft_limit), 0, INT64_MAX, NULL, 0 },
    { "pubsub_output_soft_seconds", conf__set_int, G(pubsub_output_soft_s), 0, 86400, NULL, 0 },
    { "dns_servers",         conf__set_dns_servers, G(dns_servers), 0, 0, NULL, 0 },
    { "config_source",       conf__set_config_source, G(config_source), 0, 0, NULL, 0 },
    { "users",               conf__set_users,  0, 0, 0, NULL, 0 },
    { "slowlog_threshold_us", conf__set_int,   G(slowlog_threshold_us), -1, INT32_MAX, NULL, 0 },
    { "slowlog_max_len",     conf__set_u32,    G(slowlog_max_len), 0, 1000000, NULL, 0 },
    { "request_log",         conf__set_request_log, G(request_log), 0, 0, NULL, 0 },
    { "migrate_state",       conf__set_string, G(migrate_state), 0, 0, NULL, 0 },
};
#undef G

static int conf__table_has(const struct conf_command *cmds, size_t ncmds, const char *name)
{
    for (size_t i = 0; i < ncmds; i++)
        if (strcmp(cmds[i].name, name) == 0)
            return 1;
    return 0;
}

/* A key unknown to the pool or the global table that the other one has: the message names
 * the section it belongs to (conf_table.c asks, through the context). */
static int conf__misplaced(struct conf_ctx *c, yaml_node_t *k, const char *name,
                           const struct conf_command *cmds)
{
    if (cmds == conf_pool_commands &&
        conf__table_has(conf_global_commands, RL_ARRAY_SIZE(conf_global_commands), name))
        return conf__fail(c, k, name, "unknown pool key: '%s' is a setting of the '"
                          CONF_GLOBAL_KEY ":' section", name);
    if (cmds == conf_global_commands &&
        conf__table_has(conf_pool_commands, RL_ARRAY_SIZE(conf_pool_commands), name))
        return conf__fail(c, k, name, "unknown " CONF_GLOBAL_KEY " key: '%s' is a pool key, "
                          "set in each pool", name);
    return 0;
}

/* ------------------------------------------------------------------ pools */

static void conf__pool_defaults(struct conf_pool *pool)
{
    pool->listen.perm = -1;
    pool->protocol = CONF_PROTO_MEMCACHE;
    pool->hash = HASH_FNV1A_64;
    pool->dist = DIST_KETAMA;
    pool->timeout_ms = -1;
    pool->backlog = 512;
    pool->redis_db = 0;
    pool->server_connections = 1;
    pool->server_retry_timeout_ms = 30000;
    pool->server_failure_limit = 2;
    pool->vnodes = 160;
    pool->maglev_table_size = 65537;
    pool->probes = 21;
    pool->replicas = 1;
    pool->read_from = CONF_READ_PRIMARY;
    pool->write_to = CONF_WRITE_PRIMARY;
    pool->on_down = CONF_ON_DOWN_FAILOVER;
    pool->item_size_max = 1048576;
    pool->coalesce_gets = 1;
    pool->scripts = 1;
    pool->max_pinned = 1000;
    pool->cluster_refresh_s = 30;
    pool->rejoin = CONF_REJOIN_INVALIDATE;
    pool->rejoin_log_keys = 100000;
    pool->shadow.fraction = 1.0;
    pool->shadow.queue_limit = 1000;
    pool->shadow.batch_ms = 1;
    pool->migrate_rate = 20000;
}

static int conf__is_prime(uint32_t n)
{
    if (n < 2)
        return 0;
    for (uint32_t d = 2; (uint64_t)d * d <= n; d++)
        if (n % d == 0)
            return 0;
    return 1;
}

/* Within CONF_SUGGEST_MAX edits of the global section's name, not it: a likely typo. */
static int conf__near_global(const char *name)
{
    return strcmp(name, CONF_GLOBAL_KEY) != 0 &&
           conf__distance(name, CONF_GLOBAL_KEY, CONF_SUGGEST_MAX) <= CONF_SUGGEST_MAX;
}

/*
 * redis_cluster: true. The placement is the cluster's own (CRC16 of the hash tag, the slot
 * map the cluster publishes), so the keys that choose a placement are errors, with the
 * reason; the pool becomes a Redis pool whose servers are seeds. Returns the errors
 * recorded (as a negative count, as conf__fail).
 */
static int conf__pool_cluster(struct conf_ctx *c, struct conf_pool *pool, yaml_node_t **values,
                              const unsigned char *failed)
{
    static const struct {
        const char *key;
        const char *why;
    } unused[] = {
        { "hash", "keys go by CRC16 of the hash tag, as Redis Cluster defines it" },
        { "distribution", "the slot map comes from the cluster itself" },
        { "hash_seed", "keys go by CRC16 of the hash tag, as Redis Cluster defines it" },
        { "slots", "the slot map comes from the cluster itself" },
        { "vnodes", "the slot map comes from the cluster itself" },
        { "maglev_table_size", "the slot map comes from the cluster itself" },
        { "probes", "the slot map comes from the cluster itself" },
        { "replicas", "the cluster's own replicas serve reads (read_from)" },
        { "write_to", "writes go to the slot's master" },
        { "balance_factor", "a slot is served by its master (and replicas with read_from)" },
        { "warmup", "the cluster moves keys with their slots (MIGRATE)" },
        { "on_down", "the cluster fails over by itself; requests follow its slot map" },
        { "rejoin", "a node the cluster brings back rejoins as the cluster decides" },
        { "rejoin_log_keys", "a node the cluster brings back rejoins as the cluster decides" },
        { "failover_ttl", "writes go to the slot's master, never to a failover server" },
        { "collapse_gets", "not yet: gets collapsed onto one that is redirected are untested" },
        { "leases", "not yet: a held read is not re-sent through the cluster's redirects" },
    };
    int errors = 0;
    yaml_node_t *v;

    if (!pool->redis_cluster) {
        if ((v = conf__pool_value(values, "cluster_refresh")) != NULL)
            errors -= conf__fail(c, v, "cluster_refresh", "needs redis_cluster: true");
        if ((v = conf__pool_value(values, "cluster_zones")) != NULL)
            errors -= conf__fail(c, v, "cluster_zones", "needs redis_cluster: true");
        return errors;
    }
    for (size_t i = 0; i < RL_ARRAY_SIZE(unused); i++)
        if ((v = conf__pool_value(values, unused[i].key)) != NULL)
            errors -= conf__fail(c, v, unused[i].key, "not used with redis_cluster: true (%s); "
                                 "remove it", unused[i].why);
    v = conf__pool_value(values, "hash_tag");
    if (v != NULL && !failed[conf__pool_index("hash_tag")] &&
        (!pool->has_hash_tag || pool->hash_tag[0] != '{' || pool->hash_tag[1] != '}'))
        errors -= conf__fail(c, v, "hash_tag", "a Redis Cluster's hash tag is \"{}\"; remove it");
    int explicit_memcache =
        (conf__pool_value(values, "protocol") != NULL || conf__pool_value(values, "redis") != NULL) &&
        pool->protocol != CONF_PROTO_REDIS;
    if (explicit_memcache)
        errors -= conf__fail(c, conf__pool_value(values, "redis_cluster"), "redis_cluster",
                             "a Redis Cluster pool speaks Redis; remove the memcache protocol");
    if ((v = conf__pool_value(values, "redis_db")) != NULL && pool->redis_db != 0)
        errors -= conf__fail(c, v, "redis_db", "a Redis Cluster has only database 0");
    pool->protocol = CONF_PROTO_REDIS;
    pool->hash = HASH_CRC16;
    pool->dist = DIST_SLOTS;
    pool->has_hash_tag = 1;
    pool->hash_tag[0] = '{';
    pool->hash_tag[1] = '}';
    pool->eject = 1;            /* a dead node is seen as down at once: reads avoid it */
    pool->rejoin = CONF_REJOIN_TRUST;   /* ... and comes back as the cluster says */
    pool->replica_reads = pool->read_from != CONF_READ_PRIMARY;
    return errors;
}

/*
 * Read one pool (everything but late keys) and apply defaults and checks. Every error is
 * recorded; a check that combines keys runs only when none of them failed. Returns the
 * number of errors of the pool.
 */
static int conf__pool_parse(struct conf_ctx *c, uint32_t idx, yaml_node_t *name_node,
                            yaml_node_t *map)
{
    enum { N = RL_ARRAY_SIZE(conf_pool_commands) };
    struct conf_pool *pool = &c->conf->pools[idx];
    yaml_node_t **values = &c->pool_nodes[(size_t)idx * 2 * N];
    yaml_node_t **keys = values + N;
    unsigned char failed[N];
    int errors = 0;

    memset(failed, 0, sizeof(failed));
    pool->line = (int)name_node->start_mark.line + 1;
    pool->col = (int)name_node->start_mark.column + 1;
    if (map->type != YAML_MAPPING_NODE)
        return -conf__fail(c, map, pool->name,
                           "a pool is a mapping of keys (listen, servers, ...), found %s%s",
                           conf__node_kind(map), conf__near_global(pool->name) ?
                           "; did you mean the '" CONF_GLOBAL_KEY ":' section?" : "");
    errors += conf__collect(c, conf_pool_commands, N, map, keys, values, "pool", failed);

    /* A distribution other than twemproxy's defaults to xxh3 unless a hash is given. */
    errors += conf__run(c, conf_pool_commands, N, keys, values, pool, 0, failed);
#define FAILED(key) failed[conf__pool_index(key)]
#define GIVEN(key) (conf__pool_value(values, key) != NULL)
    if (!GIVEN("hash") && pool->dist != DIST_KETAMA && pool->dist != DIST_MODULA &&
        pool->dist != DIST_RANDOM)
        pool->hash = HASH_XXH3;

    if (!GIVEN("listen") && !FAILED("listen"))
        errors -= conf__fail(c, name_node, "listen", "missing in pool '%s' (e.g. 127.0.0.1:22121)%s",
                             pool->name, conf__near_global(pool->name) ?
                             "; did you mean the '" CONF_GLOBAL_KEY ":' section?" : "");
    if (!GIVEN("servers") && !FAILED("servers") && !GIVEN("sentinel") && !GIVEN("discovery"))
        errors -= conf__fail(c, name_node, "servers", "pool '%s' has no servers", pool->name);
    if (GIVEN("redis") && GIVEN("protocol") && !FAILED("redis") && !FAILED("protocol")) {
        int redis = strcmp((const char *)conf__pool_value(values, "redis")->data.scalar.value, "true") == 0;
        if (redis != (pool->protocol == CONF_PROTO_REDIS))
            errors -= conf__fail(c, conf__pool_value(values, "protocol"), "protocol",
                                 "'%s' contradicts redis: %s on line %zu",
                                 (const char *)conf__pool_value(values, "protocol")->data.scalar.value,
                                 redis ? "true" : "false",
                                 conf__pool_value(values, "redis")->start_mark.line + 1);
    }
    if (pool->has_hash_seed && !FAILED("hash") && !hash_is_seedable(pool->hash))
        errors -= conf__fail(c, conf__pool_value(values, "hash_seed"), "hash_seed",
                             "hash %s takes no seed; use xxh3, xxh64 or murmur3%s",
                             hash_name(pool->hash),
                             GIVEN("hash") ? "" : " (set hash: explicitly)");
    /* twemproxy's auto_eject_hosts: false means a dead server is never
     * ejected: each request tries it and fails on its own. true means it is
     * routed around. Down is never removed here (the ring does not change):
     * servers are marked down, and requests for them follow on_down
     * (default failover), when auto_eject_hosts is true or on_down is given. */
    pool->eject = pool->auto_eject_hosts || GIVEN("on_down");
    /* replicas: R means writes reach R servers unless write_to says otherwise */
    if (pool->replicas > 1 && !GIVEN("write_to"))
        pool->write_to = CONF_WRITE_ALL;
    if (GIVEN("servers") && !FAILED("servers") && !FAILED("replicas") &&
        pool->replicas > pool->nservers)
        errors -= conf__fail(c, conf__pool_value(values, "replicas"), "replicas",
                             "%u is more than the %u server(s) of pool '%s'", pool->replicas,
                             pool->nservers, pool->name);
    yaml_node_t *mt = conf__pool_value(values, "maglev_table_size");
    if (mt == NULL)
        mt = conf__pool_value(values, "servers");
    if (pool->dist == DIST_MAGLEV && !FAILED("maglev_table_size")) {
        if (!conf__is_prime(pool->maglev_table_size))
            errors -= conf__fail(c, mt, "maglev_table_size", "%u is not a prime number (65537 is)",
                                 pool->maglev_table_size);
        else if (GIVEN("servers") && !FAILED("servers") &&
                 pool->maglev_table_size < pool->nservers)
            errors -= conf__fail(c, mt, "maglev_table_size",
                                 "%u is smaller than the %u servers of pool '%s'",
                                 pool->maglev_table_size, pool->nservers, pool->name);
    }
    errors += conf__pool_cluster(c, pool, values, failed);
    errors += conf__pool_sentinel(c, pool, conf__pool_value(values, "sentinel"),
                                  conf__pool_value(values, "servers"),
                                  conf__pool_value(values, "redis_cluster"),
                                  (GIVEN("protocol") || GIVEN("redis")) &&
                                  pool->protocol != CONF_PROTO_REDIS);
    if (GIVEN("discovery") && pool->redis_cluster)
        errors -= conf__fail(c, conf__pool_value(values, "discovery"), "discovery",
                             "a Redis Cluster's nodes come from the cluster itself");
    if (GIVEN("discovery") && GIVEN("sentinel"))
        errors -= conf__fail(c, conf__pool_value(values, "discovery"), "discovery",
                             "a sentinel pool's server is the master its sentinels name");
    if (GIVEN("leases") && pool->leases.meta && pool->protocol == CONF_PROTO_REDIS)
        errors -= conf__fail(c, conf__pool_value(values, "leases"), "leases",
                             "meta is memcached's own leases (mg ... N); a Redis pool takes "
                             "a fleet-wide lease with lease_prefix");
    if (GIVEN("migrate") && !FAILED("migrate"))
        errors += conf__pool_migrate(c, pool, conf__pool_value(values, "migrate"),
                                     conf__pool_value(values, "warmup"));
#undef FAILED
#undef GIVEN
    return errors;
}

/* The global `ringleader:` section. */
static int conf__global_parse(struct conf_ctx *c, yaml_node_t *map)
{
    enum { N = RL_ARRAY_SIZE(conf_global_commands) };
    yaml_node_t *keys[N], *values[N];
    struct conf_global *g = &c->conf->global;

    if (map->type != YAML_MAPPING_NODE)
        return conf__fail(c, map, CONF_GLOBAL_KEY,
                          "expected a mapping of global settings, found %s",
                          conf__node_kind(map));
    int errors = conf__collect(c, conf_global_commands, N, map, keys, values, CONF_GLOBAL_KEY,
                               NULL);
    errors += conf__run(c, conf_global_commands, N, keys, values, g, 0, NULL);
    return errors > 0 ? -1 : 0;
}

static int conf__global_defaults(struct conf_global *g)
{
    char buf[64];

    g->workers = 0;
    g->stats_interval_ms = 30000;
    g->admin_listen.perm = -1;
    g->log_level = 5;
    g->drain_timeout_ms = 5000;
    g->latency_histograms = 1;
    g->hot_keys = 1;
    g->client_output_limit = 8u << 20;
    g->memory_limit = UINT64_C(1) << 30;
    g->client_header_timeout_s = 60;
    g->stream_threshold = 256u * 1024;
    g->pubsub_output_limit = 32u << 20;
    g->pubsub_output_soft_limit = 8u << 20;
    g->pubsub_output_soft_s = 60;
    g->tls_handshake_timeout_s = 5;
    g->slowlog_threshold_us = 10000;
    g->slowlog_max_len = 128;
    return conf_parse_addr("127.0.0.1:22222", &g->stats_listen, buf, sizeof(buf));
}

/* Two listeners collide when their text matches, or on one port with a wildcard host. */
static int conf__addr_clash(const struct conf_addr *a, const struct conf_addr *b)
{
    if (a->text == NULL || b->text == NULL)
        return 0;
    if (a->path != NULL || b->path != NULL)
        return a->path != NULL && b->path != NULL && strcmp(a->path, b->path) == 0;
    if (a->port != b->port)
        return 0;
    if (strcmp(a->host, b->host) == 0)
        return 1;
    for (int i = 0; i < 2; i++) {
        const char *h = i ? b->host : a->host;
        if (strcmp(h, "0.0.0.0") == 0 || strcmp(h, "::") == 0 || strcmp(h, "*") == 0)
            return 1;
    }
    return 0;
}

/* Pools on one listen address, or on the stats or admin address: each clash once, at the
 * later pool. Pools whose listen did not parse are left out. */
static void conf__check_listeners(struct conf_ctx *c)
{
    enum { N = RL_ARRAY_SIZE(conf_pool_commands) };
    struct conf *conf = c->conf;

    for (uint32_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *p = &conf->pools[i];
        yaml_node_t *at = conf__pool_value(&c->pool_nodes[(size_t)i * 2 * N], "listen");

        if (p->listen.text == NULL)
            continue;
        for (uint32_t j = 0; j < i; j++) {
            const struct conf_pool *q = &conf->pools[j];
            if (conf__addr_clash(&p->listen, &q->listen)) {
                conf__fail(c, at, "listen",
                           "pool '%s' listens on %s, which pool '%s' (line %d) already uses (%s)",
                           p->name, p->listen.text, q->name, q->line, q->listen.text);
                break;
            }
        }
        if (conf__addr_clash(&p->listen, &conf->global.stats_listen))
            conf__fail(c, at, "listen", "pool '%s' listens on %s, the stats address",
                       p->name, p->listen.text);
        if (conf__addr_clash(&p->listen, &conf->global.admin_listen))
            conf__fail(c, at, "listen", "pool '%s' listens on %s, the admin address",
                       p->name, p->listen.text);
    }
}

int conf__build(struct conf_ctx *c)
{
    enum { N = RL_ARRAY_SIZE(conf_pool_commands) };
    yaml_node_t *root = yaml_document_get_root_node(&c->doc);
    yaml_node_t *global = NULL;
    yaml_node_pair_t *pair;
    struct conf *conf = c->conf;
    uint32_t npairs, n = 0;
    int *pool_errors = NULL;

    c->misplaced = conf__misplaced;
    if (root == NULL || (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0))
        return conf__fail(c, NULL, NULL, "the file is empty: expected at least one pool");
    if (root->type != YAML_MAPPING_NODE)
        return conf__fail(c, root, NULL,
                          "expected a mapping of pool names to pools, found %s",
                          conf__node_kind(root));
    if (conf__global_defaults(&conf->global) < 0)
        return conf__fail_file(c, "%s", conf__enomem);

    npairs = (uint32_t)(root->data.mapping.pairs.top - root->data.mapping.pairs.start);
    conf->pools = calloc(npairs + 1, sizeof(*conf->pools));
    c->pool_nodes = calloc((size_t)(npairs + 1) * 2 * N, sizeof(yaml_node_t *));
    c->pool_name_nodes = calloc(npairs + 1, sizeof(yaml_node_t *));
    pool_errors = calloc(npairs + 1, sizeof(*pool_errors));
    if (conf->pools == NULL || c->pool_nodes == NULL || c->pool_name_nodes == NULL ||
        pool_errors == NULL) {
        free(pool_errors);
        return conf__fail_file(c, "%s", conf__enomem);
    }

    /* 1. names: every pool exists (for routes) before any is read; a key that cannot be a
     * pool is reported and left out */
    for (pair = root->data.mapping.pairs.start; pair < root->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
        size_t len;
        const char *name = conf__scalar(c, k, &len, 0);
        uint32_t j;

        if (name == NULL) {
            conf__fail(c, k, "?", "a pool name must be a word: %s", c->why);
            continue;
        }
        if (strcmp(name, CONF_GLOBAL_KEY) == 0) {
            if (global != NULL)
                conf__fail(c, k, name, "given twice (first at line %zu)",
                           global->start_mark.line + 1);
            else
                global = k;
            continue;
        }
        if (conf__has_space(name, len)) {
            conf__fail(c, k, name, "a pool name must not contain spaces");
            continue;
        }
        for (j = 0; j < n; j++)
            if (strcmp(conf->pools[j].name, name) == 0)
                break;
        if (j < n) {
            conf__fail(c, k, name, "duplicate pool name (first at line %d)", conf->pools[j].line);
            continue;
        }
        conf__pool_defaults(&conf->pools[n]);
        conf->pools[n].name = util_strndup(name, len);
        conf->pools[n].line = (int)k->start_mark.line + 1;
        conf->pools[n].col = (int)k->start_mark.column + 1;
        c->pool_name_nodes[n] = k;
        conf->npools = ++n;
        if (conf->pools[n - 1].name == NULL) {
            free(pool_errors);
            return conf__fail(c, k, name, "%s", conf__enomem);
        }
    }
    /* config_source: the pools come from there (conf_load_source puts that document
     * first, the file's lines after source_lines); the file itself has none */
    const char *source = global != NULL ? conf__config_source_of(c, global) : NULL;
    for (uint32_t i = 0; source != NULL && i < n; i++)
        if ((uint32_t)conf->pools[i].line > c->source_lines)
            conf__fail(c, c->pool_name_nodes[i], conf->pools[i].name,
                       "a pool in a file with config_source (%s): the pools come from there; "
                       "remove either", source);
    if (n == 0 && c->nerrors == 0 && (source == NULL || c->source_lines > 0))
        conf__fail(c, root, NULL, "no pools: add at least one pool (see conf/ringleader.yml)");

    /* 2. the global section and each pool */
    n = 0;
    for (pair = root->data.mapping.pairs.start; pair < root->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(&c->doc, pair->value);

        if (k == global) {
            conf__global_parse(c, v);
            continue;
        }
        if (n < conf->npools && k == c->pool_name_nodes[n]) {
            pool_errors[n] = conf__pool_parse(c, n, k, v);
            n++;
        }
    }

    /* 3. what refers to other pools (of the pools that read cleanly), what pools share */
    for (uint32_t i = 0; i < conf->npools; i++) {
        yaml_node_t **values = &c->pool_nodes[(size_t)i * 2 * N];
        if (pool_errors[i] == 0)
            conf__run(c, conf_pool_commands, N, values + N, values, &conf->pools[i], 1, NULL);
    }
    conf__check_listeners(c);
    free(pool_errors);
    return c->nerrors > 0 ? -1 : 0;
}
