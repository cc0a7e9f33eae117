/* Setters for the structured keys of a pool: servers, slots, routes, cluster zones, collapse, shadow and tls. */
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

/* ---------------------------------------------------------------- servers */

void conf__server_free(struct conf_server *s)
{
    conf_addr_free(&s->addr);
    free(s->name);
    free(s->ident);
    free(s->label);
    free(s->zone);
}

/*
 * Parse twemproxy's "host:port:weight [name]" or "/path:weight [name]".
 * The name is what follows the first run of spaces and must itself have no
 * spaces. Fills addr, weight and name; NULL or a reason.
 */
static const char *conf__server_from_string(struct conf_ctx *c, struct conf_server *srv,
                                            const char *s, size_t n)
{
    const char *sp = NULL, *colon = NULL;
    size_t alen;
    uint64_t w;
    char buf[200];
    char *addrtext;

    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ' || s[i] == '\t') {
            sp = s + i;
            break;
        }
    }
    alen = sp != NULL ? (size_t)(sp - s) : n;
    if (sp != NULL) {
        const char *name = sp;
        size_t nlen = n - alen;

        while (nlen > 0 && (*name == ' ' || *name == '\t')) {
            name++;
            nlen--;
        }
        while (nlen > 0 && isspace((unsigned char)name[nlen - 1]))
            nlen--;
        if (nlen > 0) {
            if (conf__has_space(name, nlen))
                return conf__why(c, "'%.*s': a server name must be one word", (int)n, s);
            srv->name = util_strndup(name, nlen);
            if (srv->name == NULL)
                return conf__enomem;
        }
    }
    for (size_t i = alen; i > 0; i--) {
        if (s[i - 1] == ':') {
            colon = s + i - 1;
            break;
        }
    }
    if (colon == NULL || (s[0] != '/' && memchr(s, ':', (size_t)(colon - s)) == NULL))
        return conf__why(c, "'%.*s' is not \"host:port:weight [name]\" or "
                         "\"/path/to/socket:weight [name]\"", (int)n, s);
    size_t wlen = alen - (size_t)(colon - s) - 1;
    if (util_parse_u64(colon + 1, wlen, UINT64_MAX, &w) < 0)
        return conf__why(c, "'%.*s': weight '%.*s' is not a positive whole number", (int)n, s,
                         (int)wlen, colon + 1);
    if (w == 0 || w > CONF_MAX_WEIGHT)
        return conf__why(c, "'%.*s': weight %.*s is out of range 1..%u (nutcracker's)", (int)n, s,
                         (int)wlen, colon + 1, CONF_MAX_WEIGHT);
    srv->weight = (uint32_t)w;

    addrtext = util_strndup(s, (size_t)(colon - s));
    if (addrtext == NULL)
        return conf__enomem;
    int rc = conf_parse_addr(addrtext, &srv->addr, buf, sizeof(buf));
    free(addrtext);
    if (rc < 0)
        return conf__why(c, "%s", buf);
    if (srv->addr.perm != -1)
        return conf__why(c, "'%.*s': a server address takes no permissions", (int)n, s);
    return NULL;
}

static const char *conf__set_server_addr(struct conf_ctx *c, const struct conf_command *cmd,
                                         yaml_node_t *node, void *obj)
{
    struct conf_server *srv = obj;
    const char *why = conf__set_addr(c, cmd, node, obj);

    if (why == NULL && srv->addr.perm != -1)
        return conf__why(c, "'%s': a server address takes no permissions", srv->addr.text);
    return why;
}

static const struct conf_command conf_server_commands[] = {
    { "address", conf__set_server_addr, offsetof(struct conf_server, addr), 0, 0, NULL, 0 },
    { "weight", conf__set_u32, offsetof(struct conf_server, weight), 1, CONF_MAX_WEIGHT, NULL, 0 },
    { "name", conf__set_word, offsetof(struct conf_server, name), 0, 0, NULL, 0 },
    { "zone", conf__set_word, offsetof(struct conf_server, zone), 0, 0, NULL, 0 },
};

/* ident and label as twemproxy: see conf.h. */
static int conf__server_names(struct conf_server *srv)
{
    char buf[300];
    const struct conf_addr *a = &srv->addr;

    if (srv->name != NULL) {
        srv->ident = strdup(srv->name);
        srv->label = strdup(srv->name);
    } else if (a->path != NULL) {
        /*
         * nutcracker hashes an unnamed unix server as "path:" (its parser
         * takes the byte after the path, the ':' before the weight, as part
         * of the name); keep that so ketama places keys as it did.
         */
        snprintf(buf, sizeof(buf), "%s:", a->path);
        srv->ident = strdup(buf);
        srv->label = strdup(a->path);
    } else {
        /* the host as written (brackets kept), then the port */
        const char *colon = strrchr(a->text, ':');
        size_t hlen = (size_t)(colon - a->text);

        snprintf(buf, sizeof(buf), "%s", a->text);
        srv->label = strdup(buf);
        if (a->port == CONF_MEMCACHE_PORT)
            srv->ident = util_strndup(a->text, hlen);
        else
            srv->ident = strdup(buf);
    }
    return srv->ident != NULL && srv->label != NULL ? 0 : -1;
}

static int conf__server_parse(struct conf_ctx *c, struct conf_server *srv, yaml_node_t *item)
{
    srv->line = (int)item->start_mark.line + 1;
    srv->col = (int)item->start_mark.column + 1;
    srv->addr.perm = -1;

    if (item->type == YAML_SCALAR_NODE) {
        size_t n;
        const char *s = conf__scalar(c, item, &n, 0);
        const char *why = s == NULL ? c->why : conf__server_from_string(c, srv, s, n);
        if (why != NULL)
            return conf__fail(c, item, "servers", "%s", why);
    } else if (item->type == YAML_MAPPING_NODE) {
        enum { N = RL_ARRAY_SIZE(conf_server_commands) };
        yaml_node_t *keys[N], *values[N];

        unsigned char failed[N] = { 0 };
        srv->weight = 1;
        int errors = conf__collect(c, conf_server_commands, N, item, keys, values, "server",
                                   failed);
        if (values[0] == NULL && !failed[0])
            errors -= conf__fail(c, item, "address",
                                 "missing: a server needs address: \"host:port\" or a socket path");
        errors += conf__run(c, conf_server_commands, N, keys, values, srv, 0, failed);
        if (errors > 0)
            return -1;
    } else {
        return conf__fail(c, item, "servers",
                          "expected \"host:port:weight [name]\" or a mapping, found %s",
                          conf__node_kind(item));
    }
    if (conf__server_names(srv) < 0)
        return conf__fail(c, item, "servers", "%s", conf__enomem);
    return 0;
}

struct conf_sortkey {
    const char *key;
    uint32_t    idx;
};

static int conf__sortkey_cmp(const void *a, const void *b)
{
    const struct conf_sortkey *x = a, *y = b;
    int r = strcmp(x->key, y->key);

    if (r != 0)
        return r;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/*
 * Find a repeated key among n items (O(n log n): pools of thousands of
 * servers stay fast). Returns -1 when all differ, else the index of the
 * later item of the first repeat in file order, with its earlier twin in
 * *first. Items whose key is NULL are skipped. -2 on allocation failure.
 */
static int64_t conf__find_dup(const char *const *keys, uint32_t n, uint32_t *first)
{
    struct conf_sortkey *v = malloc((size_t)n * sizeof(*v) + 1);
    uint32_t m = 0;
    int64_t found = -1;

    if (v == NULL)
        return -2;
    for (uint32_t i = 0; i < n; i++) {
        if (keys[i] != NULL) {
            v[m].key = keys[i];
            v[m].idx = i;
            m++;
        }
    }
    qsort(v, m, sizeof(*v), conf__sortkey_cmp);
    for (uint32_t i = 1; i < m; i++) {
        if (strcmp(v[i - 1].key, v[i].key) == 0 && (found < 0 || v[i].idx < (uint32_t)found)) {
            found = v[i].idx;
            *first = v[i - 1].idx;
            /* the earliest twin of this key */
            for (uint32_t j = i - 1; j > 0 && strcmp(v[j - 1].key, v[i].key) == 0; j--)
                *first = v[j - 1].idx;
        }
    }
    free(v);
    return found;
}

const char *conf__set_servers(struct conf_ctx *c, const struct conf_command *cmd,
                              yaml_node_t *node, void *obj)
{
    struct conf_pool *pool = obj;
    uint32_t n, first;
    const char **keys;
    int64_t dup;

    if (node->type != YAML_SEQUENCE_NODE)
        return conf__why(c, "expected a list of servers, found %s", conf__node_kind(node));
    n = (uint32_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (n == 0)
        return conf__why(c, "pool '%s' has no servers", pool->name);
    pool->servers = calloc(n, sizeof(*pool->servers));
    if (pool->servers == NULL)
        return conf__enomem;
    uint32_t bad = 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        yaml_node_t *item = yaml_document_get_node(&c->doc, node->data.sequence.items.start[i]);
        pool->nservers = i + 1;
        if (conf__server_parse(c, &pool->servers[i], item) < 0)
            bad++;          /* reported; the other servers are still read */
        else
            total += pool->servers[i].weight;
    }
    if (bad > 0)
        return conf__reported;
    if (total > CONF_MAX_POOL_WEIGHT)
        return conf__why(c, "the weights of pool '%s' add up to %llu, more than %u (nutcracker "
                         "sums them in 32 bits)", pool->name, (unsigned long long)total,
                         CONF_MAX_POOL_WEIGHT);

    keys = malloc((size_t)n * sizeof(*keys));
    if (keys == NULL)
        return conf__enomem;
    /* Same address (the backend would be listed twice), same name, same
     * identity (twemproxy's check: two points sets hashed from one string). */
    for (int pass = 0; pass < 3; pass++) {
        for (uint32_t i = 0; i < n; i++) {
            const struct conf_server *s = &pool->servers[i];
            keys[i] = pass == 0 ? s->addr.text : pass == 1 ? s->name : s->ident;
        }
        dup = conf__find_dup(keys, n, &first);
        if (dup == -2) {
            free(keys);
            return conf__enomem;
        }
        if (dup >= 0) {
            const struct conf_server *a = &pool->servers[first], *b = &pool->servers[dup];
            static const char *const what[] = { "address", "name", "identity" };
            free(keys);
            c->errnode = yaml_document_get_node(&c->doc,
                                                node->data.sequence.items.start[dup]);
            return conf__why(c, "duplicate server %s '%s' in pool '%s' (first at line %d)",
                             what[pass], pass == 0 ? b->addr.text : b->ident, pool->name,
                             a->line);
        }
    }
    free(keys);
    return NULL;
}

/* ------------------------------------------------------------------ slots */

static int64_t conf__server_by_name(const struct conf_pool *pool, const char *s)
{
    for (uint32_t i = 0; i < pool->nservers; i++) {
        const struct conf_server *srv = &pool->servers[i];
        if ((srv->name != NULL && strcmp(srv->name, s) == 0) || strcmp(srv->label, s) == 0)
            return i;
    }
    return -1;
}

/* Parse "a-b" or "a" into an inclusive slot range. */
static const char *conf__slot_range(struct conf_ctx *c, const char *s, size_t n, uint32_t *lo,
                                    uint32_t *hi)
{
    const char *dash = memchr(s, '-', n);
    uint64_t a, b;

    if (dash == NULL) {
        if (util_parse_u64(s, n, UINT64_MAX, &a) < 0)
            return conf__why(c, "'%.*s' is not a slot range like 0-5460", (int)n, s);
        b = a;
    } else if (util_parse_u64(s, (size_t)(dash - s), UINT64_MAX, &a) < 0 ||
               util_parse_u64(dash + 1, n - (size_t)(dash - s) - 1, UINT64_MAX, &b) < 0) {
        return conf__why(c, "'%.*s' is not a slot range like 0-5460", (int)n, s);
    }
    if (a > b || b >= CONF_SLOTS)
        return conf__why(c, "'%.*s' is not a range within 0-%u", (int)n, s, CONF_SLOTS - 1);
    *lo = (uint32_t)a;
    *hi = (uint32_t)b;
    return NULL;
}

const char *conf__set_slots(struct conf_ctx *c, const struct conf_command *cmd,
                            yaml_node_t *node, void *obj)
{
    struct conf_pool *pool = obj;
    yaml_node_pair_t *pair;

    if (conf__key_failed(c, "servers") || conf__key_failed(c, "distribution"))
        return conf__reported;      /* the map names servers of a list that did not read */
    if (pool->dist != DIST_SLOTS)
        return conf__why(c, "a slot map needs distribution: slots (this pool uses %s)",
                         dist_name(pool->dist));
    if (node->type != YAML_MAPPING_NODE)
        return conf__why(c, "expected a mapping of server name to slot ranges, found %s",
                         conf__node_kind(node));
    pool->slot_map = malloc(CONF_SLOTS * sizeof(uint32_t));
    if (pool->slot_map == NULL)
        return conf__enomem;
    for (uint32_t i = 0; i < CONF_SLOTS; i++)
        pool->slot_map[i] = UINT32_MAX;

    for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(&c->doc, pair->value);
        size_t n;
        const char *name = conf__scalar(c, k, &n, 0);
        int64_t idx;

        c->errnode = k;
        if (name == NULL)
            return c->why;
        idx = conf__server_by_name(pool, name);
        if (idx < 0)
            return conf__why(c, "'%s' is not a server of pool '%s'", name, pool->name);

        yaml_node_t *single = v;
        yaml_node_item_t *it = NULL, *end = NULL;
        if (v->type == YAML_SEQUENCE_NODE) {
            it = v->data.sequence.items.start;
            end = v->data.sequence.items.top;
            single = NULL;
        }
        do {
            yaml_node_t *r = single != NULL ? single : yaml_document_get_node(&c->doc, *it);
            uint32_t lo = 0, hi = 0;
            const char *s;

            c->errnode = r;
            if ((s = conf__scalar(c, r, &n, 0)) == NULL)
                return c->why;
            if (conf__slot_range(c, s, n, &lo, &hi) != NULL)
                return c->why;
            for (uint32_t slot = lo; slot <= hi; slot++) {
                if (pool->slot_map[slot] != UINT32_MAX)
                    return conf__why(c, "slot %u is given to both '%s' and '%s'", slot,
                                     pool->servers[pool->slot_map[slot]].label, name);
                pool->slot_map[slot] = (uint32_t)idx;
            }
        } while (single == NULL && ++it < end);
    }
    c->errnode = NULL;
    for (uint32_t slot = 0; slot < CONF_SLOTS; slot++) {
        if (pool->slot_map[slot] == UINT32_MAX) {
            uint32_t last = slot;
            while (last + 1 < CONF_SLOTS && pool->slot_map[last + 1] == UINT32_MAX)
                last++;
            return conf__why(c, "slots %u-%u are not given to any server (all %u must be)", slot,
                             last, CONF_SLOTS);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ routes */

const struct conf_pool *conf__pool_by_name(const struct conf *conf, const char *name)
{
    for (uint32_t i = 0; i < conf->npools; i++)
        if (conf->pools[i].name != NULL && strcmp(conf->pools[i].name, name) == 0)
            return &conf->pools[i];
    return NULL;
}

/* routes: [{prefix: "user:", pool: users}, ...]; runs after all pools are read. */
const char *conf__set_routes(struct conf_ctx *c, const struct conf_command *cmd,
                             yaml_node_t *node, void *obj)
{
    struct conf_pool *pool = obj;
    uint32_t n;

    if (node->type != YAML_SEQUENCE_NODE)
        return conf__why(c, "expected a list of {prefix, pool}, found %s", conf__node_kind(node));
    n = (uint32_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    pool->routes = calloc(n + 1, sizeof(*pool->routes));
    if (pool->routes == NULL)
        return conf__enomem;
    for (uint32_t i = 0; i < n; i++) {
        yaml_node_t *item = yaml_document_get_node(&c->doc, node->data.sequence.items.start[i]);
        struct conf_route *r = &pool->routes[i];
        const struct conf_pool *target;
        yaml_node_pair_t *pair;
        yaml_node_t *prefix_node = NULL, *pool_node = NULL;

        pool->nroutes = i + 1;
        c->errnode = item;
        if (item->type != YAML_MAPPING_NODE)
            return conf__why(c, "each route is {prefix: ..., pool: ...}, found %s",
                             conf__node_kind(item));
        for (pair = item->data.mapping.pairs.start; pair < item->data.mapping.pairs.top; pair++) {
            yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
            yaml_node_t *v = yaml_document_get_node(&c->doc, pair->value);
            const char *ks = k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";

            c->errnode = k;
            if (strcmp(ks, "prefix") == 0 && prefix_node == NULL)
                prefix_node = v;
            else if (strcmp(ks, "pool") == 0 && pool_node == NULL)
                pool_node = v;
            else if (strcmp(ks, "prefix") == 0 || strcmp(ks, "pool") == 0)
                return conf__why(c, "'%s' is given twice in one route", ks);
            else
                return conf__why(c, "unknown key '%s' in a route (expected prefix and pool)", ks);
        }
        c->errnode = item;
        if (prefix_node == NULL || pool_node == NULL)
            return conf__why(c, "a route needs both prefix and pool");

        size_t plen, tlen;
        const char *p, *t;
        c->errnode = prefix_node;
        if ((p = conf__scalar(c, prefix_node, &plen, 0)) == NULL)
            return c->why;
        c->errnode = pool_node;
        if ((t = conf__scalar(c, pool_node, &tlen, 0)) == NULL)
            return c->why;
        target = conf__pool_by_name(c->conf, t);
        if (target == NULL)
            return conf__why(c, "route '%s' goes to pool '%s', which does not exist", p, t);
        if (target->protocol != pool->protocol)
            return conf__why(c, "route '%s' goes to pool '%s', which speaks %s, not %s", p, t,
                             target->protocol == CONF_PROTO_REDIS ? "redis" : "memcache",
                             pool->protocol == CONF_PROTO_REDIS ? "redis" : "memcache");
        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(pool->routes[j].prefix, p) == 0) {
                c->errnode = prefix_node;
                return conf__why(c, "prefix '%s' is routed twice", p);
            }
        }
        r->prefix = util_strndup(p, plen);
        r->pool = util_strndup(t, tlen);
        if (r->prefix == NULL || r->pool == NULL)
            return conf__enomem;
    }
    c->errnode = NULL;
    return NULL;
}

/* An IPv4 network "a.b.c.d/n" into net/mask; 0, or -1 when it is not one. */
int conf__ipv4_net(const char *s, uint32_t *net, uint32_t *mask)
{
    unsigned a, b, c, d, bits;
    char tail;
    if (sscanf(s, "%u.%u.%u.%u/%u%c", &a, &b, &c, &d, &bits, &tail) != 5 || a > 255 ||
        b > 255 || c > 255 || d > 255 || bits > 32)
        return -1;
    *mask = bits == 0 ? 0 : UINT32_MAX << (32 - bits);
    *net = ((a << 24) | (b << 16) | (c << 8) | d) & *mask;
    return 0;
}

/* cluster_zones: {"10.0.1.0/24": eu-1a, "10.0.2.7:7000": eu-1b, ...}: the zone of the
 * cluster's nodes by address, for read_from: local-zone (a seed's own zone: also). */
const char *conf__set_cluster_zones(struct conf_ctx *c, const struct conf_command *cmd,
                                    yaml_node_t *node, void *obj)
{
    struct conf_pool *pool = obj;
    yaml_node_pair_t *pair;
    uint32_t n;

    (void)cmd;
    if (node->type != YAML_MAPPING_NODE)
        return conf__why(c, "expected a mapping of node addresses or networks to zones, "
                         "found %s", conf__node_kind(node));
    n = (uint32_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
    pool->cluster_zones = calloc(n + 1, sizeof(*pool->cluster_zones));
    if (pool->cluster_zones == NULL)
        return conf__enomem;
    for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(&c->doc, pair->value);
        size_t kl, vl;
        const char *ks, *vs;
        uint32_t net, mask;

        c->errnode = k;
        if ((ks = conf__scalar(c, k, &kl, 0)) == NULL)
            return c->why;
        if (kl == 0 || conf__has_space(ks, kl))
            return conf__why(c, "'%.*s' is not a node address or network", (int)RL_MIN(kl, 64), ks);
        if (memchr(ks, '/', kl) != NULL && conf__ipv4_net(ks, &net, &mask) < 0)
            return conf__why(c, "'%.*s' is not an IPv4 network (a.b.c.d/n)", (int)RL_MIN(kl, 64), ks);
        c->errnode = v;
        if ((vs = conf__scalar(c, v, &vl, 0)) == NULL)
            return c->why;
        if (vl == 0 || conf__has_space(vs, vl))
            return conf__why(c, "zone '%.*s' must be a word", (int)RL_MIN(vl, 64), vs);
        struct conf_zone_rule *r = &pool->cluster_zones[pool->ncluster_zones++];
        r->match = util_strndup(ks, kl);
        r->zone = util_strndup(vs, vl);
        if (r->match == NULL || r->zone == NULL)
            return conf__enomem;
    }
    c->errnode = NULL;
    return NULL;
}

/* collapse_gets: true (identical gets queued together share one request), false, or
 * inflight (they may also join one already sent). */
const char *conf__set_collapse(struct conf_ctx *c, const struct conf_command *cmd,
                               yaml_node_t *node, void *obj)
{
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);
    enum conf_collapse *field = (enum conf_collapse *)(void *)((char *)obj + cmd->offset);

    if (s == NULL)
        return c->why;
    if (strcmp(s, "true") == 0)
        *field = CONF_COLLAPSE_QUEUED;
    else if (strcmp(s, "false") == 0)
        *field = CONF_COLLAPSE_OFF;
    else if (strcmp(s, "inflight") == 0)
        *field = CONF_COLLAPSE_INFLIGHT;
    else
        return conf__why(c, "'%.*s' is not true, false or inflight", (int)RL_MIN(n, 64), s);
    return NULL;
}

/* the keys of leases: */
static const struct conf_command conf__lease_keys[] = {
    { "ttl_ms",      conf__set_u32, offsetof(struct conf_leases, ttl_ms),      1, 600000,   NULL, 0 },
    { "max_waiters", conf__set_u32, offsetof(struct conf_leases, max_waiters), 1, 10000000, NULL, 0 },
    { "meta",        conf__set_bool, offsetof(struct conf_leases, meta),        0, 0,        NULL, 0 },
};

/* leases: {ttl_ms: N, max_waiters: N, lease_prefix: S, meta: BOOL} (an empty mapping takes
 * the defaults), or false. */
const char *conf__set_leases(struct conf_ctx *c, const struct conf_command *cmd,
                             yaml_node_t *node, void *obj)
{
    struct conf_leases *l = (struct conf_leases *)(void *)((char *)obj + cmd->offset);
    yaml_node_pair_t *pair;

    if (node->type == YAML_SCALAR_NODE) {
        size_t n;
        const char *s = conf__scalar(c, node, &n, 0);
        if (s == NULL)
            return c->why;
        if (strcmp(s, "false") == 0) {
            l->ttl_ms = 0;
            return NULL;
        }
        return conf__why(c, "expected {ttl_ms: N, max_waiters: N} or false, found '%.*s'",
                         (int)RL_MIN(n, 64), s);
    }
    if (node->type != YAML_MAPPING_NODE)
        return conf__why(c, "expected {ttl_ms: N, max_waiters: N} or false, found %s",
                         conf__node_kind(node));
    l->ttl_ms = 2000;
    l->max_waiters = 10000;
    l->prefix[0] = 0;
    l->meta = 0;
    for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(&c->doc, pair->value);
        const char *ks = k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";
        const struct conf_command *lk = NULL;

        c->errnode = k;
        if (strcmp(ks, "lease_prefix") == 0) {
            size_t n;
            c->errnode = v;
            const char *p = conf__scalar(c, v, &n, 0);
            if (p == NULL)
                return c->why;
            if (n == 0 || n >= sizeof(l->prefix))
                return conf__why(c, "lease_prefix must be 1 to %zu bytes",
                                 sizeof(l->prefix) - 1);
            for (size_t i = 0; i < n; i++)
                if ((unsigned char)p[i] <= ' ' || (unsigned char)p[i] >= 0x7f)
                    return conf__why(c, "lease_prefix: byte %zu is a space, a control "
                                     "character or not ASCII (it begins memcached keys)", i);
            memcpy(l->prefix, p, n);
            l->prefix[n] = 0;
            continue;
        }
        for (size_t i = 0; i < RL_ARRAY_SIZE(conf__lease_keys) && lk == NULL; i++)
            if (strcmp(ks, conf__lease_keys[i].name) == 0)
                lk = &conf__lease_keys[i];
        if (lk == NULL)
            return conf__why(c, "unknown key '%s' in leases (expected ttl_ms, max_waiters, "
                             "lease_prefix, meta)", ks);
        c->errnode = v;
        const char *why = lk->set(c, lk, v, l);
        if (why != NULL) {
            char msg[200];
            snprintf(msg, sizeof(msg), "%s", why);      /* why may be c->why itself */
            return conf__why(c, "leases.%s: %s", lk->name, msg);
        }
    }
    if (l->meta && l->prefix[0] != 0) {
        c->errnode = node;
        return conf__why(c, "leases: meta (memcached's own leases) and lease_prefix (a lease "
                         "key) are two ways to a fleet-wide lease; choose one");
    }
    c->errnode = NULL;
    return NULL;
}

/* shadow's plain keys (pool and fraction are read by conf__set_shadow itself) */
static const struct conf_command conf__shadow_keys[] = {
    { "compare",     conf__set_bool, offsetof(struct conf_shadow, compare),     0, 0,       NULL, 0 },
    { "queue_limit", conf__set_u32,  offsetof(struct conf_shadow, queue_limit), 1, 1000000, NULL, 0 },
    { "batch_ms",    conf__set_u32,  offsetof(struct conf_shadow, batch_ms),    0, 100,     NULL, 0 },
};

/* shadow: {pool: NAME, fraction: F, compare: BOOL, queue_limit: N, batch_ms: N}; runs after all pools
 * are read (the shadow pool must exist and speak the same protocol). */
const char *conf__set_shadow(struct conf_ctx *c, const struct conf_command *cmd,
                             yaml_node_t *node, void *obj)
{
    struct conf_pool *pool = obj;
    struct conf_shadow *sh = &pool->shadow;
    yaml_node_pair_t *pair;
    yaml_node_t *pool_node = NULL;

    (void)cmd;
    if (node->type != YAML_MAPPING_NODE)
        return conf__why(c, "expected {pool: NAME, fraction: 0..1, compare: true|false}, found %s",
                         conf__node_kind(node));
    for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(&c->doc, pair->value);
        const char *ks = k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";
        size_t n;
        const char *s;

        c->errnode = k;
        if (strcmp(ks, "pool") == 0) {
            pool_node = v;
            c->errnode = v;
            if ((s = conf__scalar(c, v, &n, 0)) == NULL)
                return c->why;
            free(sh->pool);
            if ((sh->pool = util_strndup(s, n)) == NULL)
                return conf__enomem;
        } else if (strcmp(ks, "fraction") == 0) {
            char *end;
            c->errnode = v;
            if ((s = conf__scalar(c, v, &n, 0)) == NULL)
                return c->why;
            errno = 0;
            double f = strtod(s, &end);
            if (errno != 0 || end != s + n || !isfinite(f) || f <= 0 || f > 1)
                return conf__why(c, "fraction '%.*s' is not a number in (0, 1]",
                                 (int)RL_MIN(n, 64), s);
            sh->fraction = f;
        } else {
            const struct conf_command *sk = NULL;
            for (size_t i = 0; i < RL_ARRAY_SIZE(conf__shadow_keys) && sk == NULL; i++)
                if (strcmp(ks, conf__shadow_keys[i].name) == 0)
                    sk = &conf__shadow_keys[i];
            if (sk == NULL)
                return conf__why(c, "unknown key '%s' in shadow (expected pool, fraction, "
                                 "compare, queue_limit, batch_ms)", ks);
            c->errnode = v;
            const char *why = sk->set(c, sk, v, sh);
            if (why != NULL)
                return why;
        }
    }
    c->errnode = node;
    if (pool_node == NULL)
        return conf__why(c, "shadow needs a pool");
    c->errnode = pool_node;
    const struct conf_pool *target = conf__pool_by_name(c->conf, sh->pool);
    if (target == NULL)
        return conf__why(c, "shadow pool '%s' does not exist", sh->pool);
    if (target == pool)
        return conf__why(c, "pool '%s' cannot be its own shadow", sh->pool);
    if (target->protocol != pool->protocol)
        return conf__why(c, "shadow pool '%s' speaks %s, not %s", sh->pool,
                         target->protocol == CONF_PROTO_REDIS ? "redis" : "memcache",
                         pool->protocol == CONF_PROTO_REDIS ? "redis" : "memcache");
    c->errnode = NULL;
    return NULL;
}

/* ------------------------------------------------------------------ tls */

static const char *const conf_tls_version_names[] = { "1.2", "1.3", NULL };

#define T(f) offsetof(struct conf_tls, f)
/* The keys of `tls:` and `server_tls:` (which of them a side takes is
 * checked by conf__set_tls). */
static const struct conf_command conf_tls_commands[] = {
    { "cert",          conf__set_string, T(cert), 0, 0, NULL, 0 },
    { "key",           conf__set_string, T(key), 0, 0, NULL, 0 },
    { "ca",            conf__set_string, T(ca), 0, 0, NULL, 0 },
    { "client_auth",   conf__set_bool,   T(client_auth), 0, 0, NULL, 0 },
    { "verify",        conf__set_bool,   T(verify), 0, 0, NULL, 0 },
    { "server_name",   conf__set_word,   T(server_name), 0, 0, NULL, 0 },
    { "min_version",   conf__set_enum,   T(min_version), 0, 0, conf_tls_version_names, 0 },
    { "ciphers",       conf__set_word,   T(ciphers), 0, 0, NULL, 0 },
    { "ciphersuites",  conf__set_word,   T(ciphersuites), 0, 0, NULL, 0 },
};
#undef T

void conf__tls_free(struct conf_tls *t)
{
    if (t == NULL)
        return;
    free(t->cert);
    free(t->key);
    free(t->ca);
    free(t->server_name);
    free(t->ciphers);
    free(t->ciphersuites);
    free(t);
}

static struct conf_pos conf__pos(const yaml_node_t *n)
{
    struct conf_pos p = { 1, 1 };
    if (n != NULL) {
        p.line = (int)n->start_mark.line + 1;
        p.col = (int)n->start_mark.column + 1;
    }
    return p;
}

/*
 * tls: / server_tls: — a mapping of TLS settings into a struct conf_tls at
 * obj + offset. What can be checked without reading a file is checked here
 * (a listener needs cert and key, client_auth needs ca, keys of the other
 * side are refused); the files themselves are read when the snapshot is
 * built (src/proxy/tls.c), with the positions kept here for its messages.
 */
const char *conf__set_tls(struct conf_ctx *c, const struct conf_command *cmd,
                          yaml_node_t *node, void *obj)
{
    enum { N = RL_ARRAY_SIZE(conf_tls_commands) };
    struct conf_tls **slot = (struct conf_tls **)((char *)obj + cmd->offset);
    yaml_node_t *keys[N], *values[N];
    int listener = strcmp(cmd->name, "tls") == 0;

    if (node->type != YAML_MAPPING_NODE)
        return conf__why(c, "expected a mapping of TLS settings (cert, key, ca, ...), found %s",
                         conf__node_kind(node));
    struct conf_tls *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return conf__enomem;
    conf__tls_free(*slot);
    *slot = t;
    t->verify = 1;
    t->section = listener ? "tls" : "server_tls";
    t->at = conf__pos(node);
    unsigned char failed[N] = { 0 };
    int errors = conf__collect(c, conf_tls_commands, N, node, keys, values, t->section, failed);
    errors += conf__run(c, conf_tls_commands, N, keys, values, t, 0, failed);
    if (errors > 0)
        return conf__reported;          /* each bad key has its message */
    t->min_version = 12 + t->min_version;   /* the index of "1.2" / "1.3" */
    t->at_cert = conf__pos(values[0]);
    t->at_key = conf__pos(values[1]);
    t->at_ca = conf__pos(values[2]);
    t->at_ciphers = conf__pos(values[7]);
    t->at_ciphersuites = conf__pos(values[8]);
    /* keys of the other side */
    static const int listener_only[] = { 3 }, servers_only[] = { 4, 5 };
    const int *bad = listener ? servers_only : listener_only;
    size_t nbad = listener ? RL_ARRAY_SIZE(servers_only) : RL_ARRAY_SIZE(listener_only);
    for (size_t i = 0; i < nbad; i++) {
        if (keys[bad[i]] != NULL) {
            c->errnode = keys[bad[i]];
            return conf__why(c, "'%s' is a key of %s, not of %s", conf_tls_commands[bad[i]].name,
                             listener ? "server_tls" : "tls", t->section);
        }
    }
    if (listener && (t->cert == NULL || t->key == NULL))
        return conf__why(c, "a TLS listener needs cert and key (%s missing)",
                         t->cert == NULL ? "cert" : "key");
    if ((t->cert == NULL) != (t->key == NULL)) {
        c->errnode = keys[t->cert == NULL ? 1 : 0];
        return conf__why(c, "cert and key go together (%s is missing)",
                         t->cert == NULL ? "cert" : "key");
    }
    if (t->client_auth && t->ca == NULL) {
        c->errnode = keys[3];
        return conf__why(c, "client_auth needs ca: the CA that signs the client certificates");
    }
    return NULL;
}
