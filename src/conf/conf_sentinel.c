/* The `sentinel:` section of a pool: the master name, the sentinels that follow it, their credentials and where reads go. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "conf/conf.h"
#include "conf/conf_int.h"
#include "lib/util.h"

#define CONF_SENTINELS_MAX 64   /* sentinels of one pool, at most (Redis runs 3 or 5) */

static const char *const conf_sentinel_read_names[] = { "primary", "any-live", NULL };

/* Sentinel addresses: "host:port" each, TCP only (a sentinel is reached over the network). */
static const char *conf__set_sentinel_addrs(struct conf_ctx *c, const struct conf_command *cmd,
                                            yaml_node_t *node, void *obj)
{
    struct conf_sentinel *s = obj;
    char err[200];

    (void)cmd;
    if (node->type != YAML_SEQUENCE_NODE)
        return conf__why(c, "expected a list of sentinel addresses (host:port), found %s",
                         conf__node_kind(node));
    size_t n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (n == 0)
        return conf__why(c, "the list of sentinels is empty: give at least one host:port");
    if (n > CONF_SENTINELS_MAX)
        return conf__why(c, "%zu sentinels; at most %d", n, CONF_SENTINELS_MAX);
    s->addrs = calloc(n, sizeof(*s->addrs));
    if (s->addrs == NULL)
        return conf__enomem;
    for (yaml_node_item_t *it = node->data.sequence.items.start;
         it < node->data.sequence.items.top; it++) {
        yaml_node_t *item = yaml_document_get_node(&c->doc, *it);
        size_t len;
        const char *t = conf__scalar(c, item, &len, 0);
        c->errnode = item;
        if (t == NULL)
            return c->why;
        struct conf_addr *a = &s->addrs[s->naddrs];
        if (conf_parse_addr(t, a, err, sizeof(err)) < 0)
            return conf__why(c, "sentinel '%s': %s", t, err);
        s->naddrs++;
        if (a->host == NULL || a->perm != -1)
            return conf__why(c, "sentinel '%s' is not host:port (sentinels are reached over TCP)", t);
        for (uint32_t k = 0; k + 1 < s->naddrs; k++)
            if (strcmp(s->addrs[k].text, a->text) == 0)
                return conf__why(c, "sentinel '%s' is listed twice", t);
    }
    c->errnode = NULL;
    return NULL;
}

#define S(f) offsetof(struct conf_sentinel, f)
static const struct conf_command conf_sentinel_commands[] = {
    { "master",            conf__set_word,           S(master), 0, 0, NULL, 0 },
    { "sentinels",         conf__set_sentinel_addrs, 0, 0, 0, NULL, 0 },
    { "sentinel_auth",     conf__set_string,         S(auth), 0, 0, NULL, 0 },
    { "sentinel_username", conf__set_string,         S(username), 0, 0, NULL, 0 },
    { "read_from",         conf__set_enum,           S(read_from), 0, 0, conf_sentinel_read_names, 0 },
};
#undef S

void conf__sentinel_free(struct conf_sentinel *s)
{
    if (s == NULL)
        return;
    free(s->master);
    for (uint32_t i = 0; i < s->naddrs; i++)
        conf_addr_free(&s->addrs[i]);
    free(s->addrs);
    free(s->auth);
    free(s->username);
    free(s);
}

/*
 * sentinel: {master: NAME, sentinels: [host:port, ...], sentinel_auth, sentinel_username,
 * read_from}. The pool's one server is the master the sentinels name (src/control/sentinel.c);
 * what only holds with the rest of the pool (redis, no servers:) is checked by
 * conf__pool_sentinel.
 */
const char *conf__set_sentinel(struct conf_ctx *c, const struct conf_command *cmd,
                               yaml_node_t *node, void *obj)
{
    enum { N = RL_ARRAY_SIZE(conf_sentinel_commands) };
    struct conf_sentinel **slot = (struct conf_sentinel **)((char *)obj + cmd->offset);
    yaml_node_t *keys[N], *values[N];
    unsigned char failed[N] = { 0 };

    if (node->type != YAML_MAPPING_NODE)
        return conf__why(c, "expected a mapping (master, sentinels, ...), found %s",
                         conf__node_kind(node));
    struct conf_sentinel *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return conf__enomem;
    conf__sentinel_free(*slot);
    *slot = s;
    s->read_from = CONF_READ_PRIMARY;
    int errors = conf__collect(c, conf_sentinel_commands, N, node, keys, values, "sentinel", failed);
    errors += conf__run(c, conf_sentinel_commands, N, keys, values, s, 0, failed);
    if (errors > 0)
        return conf__reported;          /* each bad key has its message */
    if (s->master == NULL)
        return conf__why(c, "sentinel needs master: the name the sentinels monitor (e.g. mymaster)");
    if (s->naddrs == 0)
        return conf__why(c, "sentinel needs sentinels: a list of host:port");
    return NULL;
}

/*
 * Checks of a pool with `sentinel:` against its other keys: it speaks Redis, its server is
 * the master (no servers:), and it is not a cluster pool. Returns the errors recorded (as a
 * negative count, as conf__fail).
 */
int conf__pool_sentinel(struct conf_ctx *c, struct conf_pool *pool, yaml_node_t *sentinel,
                        yaml_node_t *servers, yaml_node_t *cluster, int explicit_memcache)
{
    int errors = 0;

    if (sentinel == NULL)
        return 0;
    if (servers != NULL)
        errors -= conf__fail(c, servers, "servers", "a sentinel pool's one server is the master "
                             "its sentinels name; remove servers");
    if (cluster != NULL && pool->redis_cluster)
        errors -= conf__fail(c, sentinel, "sentinel", "a Redis Cluster pool follows its own "
                             "failovers; remove sentinel or redis_cluster");
    if (explicit_memcache)
        errors -= conf__fail(c, sentinel, "sentinel", "a sentinel pool speaks Redis; remove the "
                             "memcache protocol");
    if (pool->server_tls != NULL)
        errors -= conf__fail(c, sentinel, "sentinel", "server_tls with sentinel is not supported "
                             "yet (the sentinels and ROLE are asked in plaintext); remove one");
    pool->protocol = CONF_PROTO_REDIS;
    return errors;
}
