/* The keys of membership from other systems: dns_servers, discovery (SRV) and config_source (etcd). */
#include "config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "conf/conf.h"
#include "conf/conf_int.h"
#include "lib/util.h"

/* An IP literal ("127.0.0.1", "::1"), not a name: a resolver is asked by address. */
static int conf__ip_literal(const char *host)
{
    unsigned char sa[16];
    return inet_pton(AF_INET, host, sa) == 1 || inet_pton(AF_INET6, host, sa) == 1;
}

/*
 * dns_servers: [127.0.0.1:5353, ...] (or one). Each an IP literal with a port; stored as
 * the words "ip:port" separated by a space. A name would need a resolver to find the
 * resolver.
 */
const char *conf__set_dns_servers(struct conf_ctx *c, const struct conf_command *cmd,
                                  yaml_node_t *node, void *obj)
{
    const char *why = conf__set_words(c, cmd, node, obj);
    char *field = *(char **)((char *)obj + cmd->offset);

    if (why != NULL || field == NULL)
        return why;
    for (const char *w = field; *w != '\0';) {
        size_t n = strcspn(w, " ");
        char word[300], aerr[256];
        struct conf_addr a;

        snprintf(word, sizeof(word), "%.*s", (int)RL_MIN(n, sizeof(word) - 1), w);
        if (conf_parse_addr(word, &a, aerr, sizeof(aerr)) < 0)
            return conf__why(c, "'%s': %s", word, aerr);
        int ok = a.host != NULL && conf__ip_literal(a.host);
        conf_addr_free(&a);
        if (!ok)
            return conf__why(c, "'%s' is not an IP address and port (e.g. 127.0.0.1:53)", word);
        w += n;
        while (*w == ' ')
            w++;
    }
    return NULL;
}

/* discovery: srv:_service._proto.name — the servers are the name's SRV records. */
const char *conf__set_discovery(struct conf_ctx *c, const struct conf_command *cmd,
                                yaml_node_t *node, void *obj)
{
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);

    if (s == NULL)
        return c->why;
    if (n <= 4 || strncmp(s, "srv:", 4) != 0 || conf__has_space(s, n) || n > 4 + 253)
        return conf__why(c, "'%.*s' is not srv:NAME (e.g. srv:_memcache._tcp.cache.internal)",
                         (int)RL_MIN(n, 64), s);
    char **field = (char **)((char *)obj + cmd->offset);
    free(*field);
    *field = util_strndup(s + 4, n - 4);
    return *field == NULL ? conf__enomem : NULL;
}

/* config_source: etcd://host:port/key — the pools document is that etcd key's value. */
const char *conf__set_config_source(struct conf_ctx *c, const struct conf_command *cmd,
                                    yaml_node_t *node, void *obj)
{
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);
    static const char scheme[] = "etcd://";

    if (s == NULL)
        return c->why;
    const char *hp = s + sizeof(scheme) - 1;
    const char *slash = n > sizeof(scheme) - 1 ? memchr(hp, '/', n - (size_t)(hp - s)) : NULL;
    if (n <= sizeof(scheme) - 1 || strncmp(s, scheme, sizeof(scheme) - 1) != 0 ||
        conf__has_space(s, n) || slash == NULL || slash == hp || slash + 1 == s + n)
        return conf__why(c, "'%.*s' is not etcd://HOST:PORT/KEY (e.g. "
                         "etcd://127.0.0.1:2379/ringleader/pools)", (int)RL_MIN(n, 80), s);
    char hostport[300], aerr[256] = "not host:port";
    struct conf_addr a;
    snprintf(hostport, sizeof(hostport), "%.*s", (int)RL_MIN((size_t)(slash - hp), 299), hp);
    int rc = conf_parse_addr(hostport, &a, aerr, sizeof(aerr));
    int tcp = rc == 0 && a.host != NULL;
    if (rc == 0)
        conf_addr_free(&a);
    if (!tcp)
        return conf__why(c, "etcd address '%s': %s", hostport, rc < 0 ? aerr : "not host:port");
    return conf__set_string(c, cmd, node, obj);
}

const char *conf__config_source_of(struct conf_ctx *c, yaml_node_t *global_key)
{
    yaml_node_t *root = yaml_document_get_root_node(&c->doc);

    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top;
         pr++) {
        if (yaml_document_get_node(&c->doc, pr->key) != global_key)
            continue;
        yaml_node_t *map = yaml_document_get_node(&c->doc, pr->value);
        if (map == NULL || map->type != YAML_MAPPING_NODE)
            return NULL;
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top;
             q++) {
            yaml_node_t *k = yaml_document_get_node(&c->doc, q->key);
            yaml_node_t *v = yaml_document_get_node(&c->doc, q->value);
            if (k != NULL && k->type == YAML_SCALAR_NODE && v != NULL &&
                v->type == YAML_SCALAR_NODE &&
                strcmp((const char *)k->data.scalar.value, "config_source") == 0)
                return (const char *)v->data.scalar.value;
        }
        return NULL;
    }
    return NULL;
}
