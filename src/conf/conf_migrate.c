/* migrate: true: which pools may move their keys when a reload changes owners (docs/reload.md). */
#include "config.h"

#include "conf/conf_int.h"

/*
 * A pool that migrates is a plain Redis pool: its servers are listed, each key has one
 * owner, and the servers speak MIGRATE. A memcached pool has no command that moves an
 * item with its TTL between servers, and its data is a cache: `warmup` refills it.
 */
int conf__pool_migrate(struct conf_ctx *c, struct conf_pool *pool, yaml_node_t *migrate,
                       yaml_node_t *warmup)
{
    int errors = 0;

    if (!pool->migrate)
        return 0;
    if (pool->protocol != CONF_PROTO_REDIS)
        errors -= conf__fail(c, migrate, "migrate", "moves Redis keys only; a memcached pool "
                             "refills a new owner from the previous one with `warmup: SECONDS`");
    else if (pool->redis_cluster)
        errors -= conf__fail(c, migrate, "migrate", "a Redis Cluster moves its keys with its "
                             "slots; remove it");
    else if (pool->sentinel != NULL)
        errors -= conf__fail(c, migrate, "migrate", "a sentinel pool has one master; remove it");
    else if (pool->replicas > 1)
        errors -= conf__fail(c, migrate, "migrate", "not with replicas: a key has one owner "
                             "while it moves");
    else if (pool->balance_factor > 0)
        errors -= conf__fail(c, migrate, "migrate", "not with balance_factor: a key has one "
                             "owner while it moves");
    if (warmup != NULL && pool->warmup_s > 0)
        errors -= conf__fail(c, warmup, "warmup", "not with migrate: the keys themselves move");
    return errors;
}
