/* near_cache: {size, keys, max_value, ttl_ms}: the values a pool's proxy keeps (src/proxy/nearcache.c). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_int.h"
#include "lib/util.h"

#define NC_DEFAULT_SIZE      (UINT64_C(64) << 20)
#define NC_DEFAULT_MAX_VALUE (UINT64_C(64) << 10)
#define NC_MAX_SIZE          (UINT64_C(1) << 40)
#define NC_MAX_TTL_MS        86400000u
#define NC_MAX_PREFIXES      256

void conf__near_cache_free(struct conf_near_cache *nc)
{
    for (uint32_t i = 0; i < nc->nprefixes; i++)
        free(nc->prefixes[i]);
    free(nc->prefixes);
    nc->prefixes = NULL;
    nc->nprefixes = 0;
}

/* keys: hot | all | [prefix, ...] */
static const char *nc_keys(struct conf_ctx *c, yaml_node_t *v, struct conf_near_cache *nc)
{
    size_t n;
    const char *s;

    if (v->type == YAML_SCALAR_NODE) {
        if ((s = conf__scalar(c, v, &n, 0)) == NULL)
            return c->why;
        if (n == 3 && memcmp(s, "hot", 3) == 0)
            nc->keys = CONF_NC_HOT;
        else if (n == 3 && memcmp(s, "all", 3) == 0)
            nc->keys = CONF_NC_ALL;
        else
            return conf__why(c, "keys '%.*s' is not hot, all or a list of prefixes",
                             (int)RL_MIN(n, 64), s);
        return NULL;
    }
    if (v->type != YAML_SEQUENCE_NODE)
        return conf__why(c, "keys: expected hot, all or a list of prefixes, found %s",
                         conf__node_kind(v));
    size_t count = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (count == 0 || count > NC_MAX_PREFIXES)
        return conf__why(c, "keys: a list of 1 to %d prefixes", NC_MAX_PREFIXES);
    conf__near_cache_free(nc);
    if ((nc->prefixes = calloc(count, sizeof(*nc->prefixes))) == NULL)
        return conf__enomem;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++) {
        yaml_node_t *e = yaml_document_get_node(&c->doc, *it);
        c->errnode = e;
        if ((s = conf__scalar(c, e, &n, 0)) == NULL)
            return c->why;
        if ((nc->prefixes[nc->nprefixes] = util_strndup(s, n)) == NULL)
            return conf__enomem;
        nc->nprefixes++;
    }
    nc->keys = CONF_NC_PREFIX;
    return NULL;
}

/* near_cache: {size: BYTES, keys: hot|all|[prefixes], max_value: BYTES, ttl_ms: N}; runs after
 * the pool's other keys (its protocol decides whether ttl_ms is required). */
const char *conf__set_near_cache(struct conf_ctx *c, const struct conf_command *cmd,
                                 yaml_node_t *node, void *obj)
{
    struct conf_pool *pool = obj;
    struct conf_near_cache *nc = &pool->near_cache;
    const char *why;

    (void)cmd;
    if (node->type != YAML_MAPPING_NODE)
        return conf__why(c, "expected {size: 64MiB, keys: hot|all|[prefixes], max_value: 64KiB, "
                         "ttl_ms: N}, found %s", conf__node_kind(node));
    nc->on = 1;
    nc->size = NC_DEFAULT_SIZE;
    nc->max_value = NC_DEFAULT_MAX_VALUE;
    nc->keys = CONF_NC_HOT;
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start;
         pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(&c->doc, pair->value);
        const char *ks = k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";

        c->errnode = v;
        if (strcmp(ks, "size") == 0) {
            why = conf__bytes(c, v, "size", 4096, NC_MAX_SIZE, &nc->size);
        } else if (strcmp(ks, "max_value") == 0) {
            why = conf__bytes(c, v, "max_value", 1, UINT64_C(1) << 30, &nc->max_value);
        } else if (strcmp(ks, "keys") == 0) {
            why = nc_keys(c, v, nc);
        } else if (strcmp(ks, "ttl_ms") == 0) {
            uint64_t t;
            why = conf__bytes(c, v, "ttl_ms", 0, NC_MAX_TTL_MS, &t);
            if (why == NULL && strspn((const char *)v->data.scalar.value, "0123456789") !=
                                   v->data.scalar.length)
                why = conf__why(c, "ttl_ms '%s' is not a number of milliseconds",
                                (const char *)v->data.scalar.value);
            nc->ttl_ms = (uint32_t)t;
        } else {
            c->errnode = k;
            why = conf__why(c, "unknown key '%s' in near_cache (expected size, keys, max_value, "
                            "ttl_ms)", ks);
        }
        if (why != NULL)
            return why;
    }
    c->errnode = node;
    if (pool->protocol != CONF_PROTO_REDIS && nc->ttl_ms == 0)
        return conf__why(c, "near_cache of a memcached pool needs ttl_ms > 0: memcached cannot "
                         "say when a key changes, so ttl_ms bounds how long a value written "
                         "elsewhere may be served");
    if (nc->max_value > nc->size)
        nc->max_value = nc->size;
    c->errnode = NULL;
    return NULL;
}
