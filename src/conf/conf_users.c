/* users: the global list of who a client is, what it may run and touch, its namespace, rate and connections (docs/security.md). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "conf/conf_int.h"
#include "lib/util.h"

#define USERS_MAX        1024
#define USER_PATTERNS_MAX 256
#define USER_NAME_MAX    63      /* proto_client.user holds 64 bytes */

static const char *const user_categories[] = {
    "read", "write", "admin", "scripts", "pubsub", "blocking", "transactions", "dangerous", NULL
};

static void user_free(struct conf_user *u)
{
    free(u->name);
    for (uint32_t i = 0; i < u->npools; i++)
        free(u->pools[i]);
    free(u->pools);
    for (uint32_t i = 0; i < u->nkeys; i++)
        free(u->keys[i]);
    free(u->keys);
    free(u->keys_len);
    free(u->keys_prefix);
    free(u->ns);
    free(u->clients);
}

void conf__users_free(struct conf_global *g)
{
    for (uint32_t i = 0; i < g->nusers; i++)
        user_free(&g->users[i]);
    free(g->users);
    g->users = NULL;
    g->nusers = 0;
}

const struct conf_user *conf_user_find(const struct conf *conf, const char *name, size_t len)
{
    for (uint32_t i = 0; i < conf->global.nusers; i++) {
        const struct conf_user *u = &conf->global.users[i];
        if (strlen(u->name) == len && memcmp(u->name, name, len) == 0)
            return u;
    }
    return NULL;
}

int conf_user_has_pool(const struct conf_user *u, const char *pool)
{
    for (uint32_t i = 0; i < u->npools; i++)
        if (strcmp(u->pools[i], pool) == 0)
            return 1;
    return 0;
}

int conf_pool_has_users(const struct conf *conf, const char *pool)
{
    for (uint32_t i = 0; i < conf->global.nusers; i++)
        if (conf_user_has_pool(&conf->global.users[i], pool))
            return 1;
    return 0;
}

static size_t seq_len(const yaml_node_t *v)
{
    return (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
}

/* A list of words (or one word) into out[n]; NULL or a reason. */
static const char *user_strings(struct conf_ctx *c, yaml_node_t *v, const char *what,
                                int words, char ***out, uint32_t *n)
{
    if (v->type == YAML_SCALAR_NODE) {
        size_t len;
        const char *s = conf__scalar(c, v, &len, 0);
        if (s == NULL)
            return c->why;
        if ((*out = calloc(1, sizeof(char *))) == NULL ||
            ((*out)[0] = util_strndup(s, len)) == NULL)
            return conf__enomem;
        *n = 1;
        return NULL;
    }
    if (v->type != YAML_SEQUENCE_NODE)
        return conf__why(c, "%s: expected a list, found %s", what, conf__node_kind(v));
    size_t count = seq_len(v);
    if (count == 0 || count > USER_PATTERNS_MAX)
        return conf__why(c, "%s: a list of 1 to %d entries", what, USER_PATTERNS_MAX);
    if ((*out = calloc(count, sizeof(char *))) == NULL)
        return conf__enomem;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++) {
        yaml_node_t *e = yaml_document_get_node(&c->doc, *it);
        size_t len;
        c->errnode = e;
        const char *s = conf__scalar(c, e, &len, 0);
        if (s == NULL)
            return c->why;
        if (words && conf__has_space(s, len))
            return conf__why(c, "%s: '%.*s' must be a word", what, (int)RL_MIN(len, 64), s);
        if (((*out)[*n] = util_strndup(s, len)) == NULL)
            return conf__enomem;
        (*n)++;
    }
    c->errnode = NULL;
    return NULL;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static int sha256(const void *p, size_t n, uint8_t out[32])
{
    unsigned int len = 0;
    return EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) == 1 && len == 32 ? 0 : -1;
}

/* password_file: its first line (without the line end) hashed; the file is read here,
 * at load, so that a missing or empty file is an error of the document. */
static const char *user_password_file(struct conf_ctx *c, const char *path, uint8_t out[32])
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return conf__why(c, "password_file '%s': %s", path, strerror(errno));
    char line[1024];
    size_t n = 0;
    int ch;
    while ((ch = fgetc(f)) != EOF && ch != '\n' && n < sizeof(line))
        line[n++] = (char)ch;
    int toolong = ch != EOF && ch != '\n';
    fclose(f);
    if (n > 0 && line[n - 1] == '\r')
        n--;
    if (toolong)
        return conf__why(c, "password_file '%s': its first line is over %zu bytes", path,
                         sizeof(line));
    if (n == 0)
        return conf__why(c, "password_file '%s': its first line is empty", path);
    int r = sha256(line, n, out);
    memset(line, 0, sizeof(line));
    return r < 0 ? conf__enomem : NULL;
}

/* A count (digits), or with `bytes` a byte count (conf__bytes: KiB, MiB, GiB); above 0. */
static const char *user_amount(struct conf_ctx *c, yaml_node_t *v, const char *what, int bytes,
                               uint64_t *out)
{
    uint64_t x = 0;
    if (bytes) {
        const char *why = conf__bytes(c, v, what, 0, UINT64_C(1) << 50, &x);
        if (why != NULL)
            return why;
    } else {
        size_t n, i = 0;
        const char *s = conf__scalar(c, v, &n, 0);
        if (s == NULL)
            return c->why;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (x > (UINT64_C(1) << 50))
                return conf__why(c, "%s '%.*s' is too large", what, (int)RL_MIN(n, 64), s);
            x = x * 10 + (uint64_t)(s[i++] - '0');
        }
        if (i == 0 || i < n)
            return conf__why(c, "%s '%.*s' is not a number", what, (int)RL_MIN(n, 64), s);
        if (x > (UINT64_C(1) << 50))
            return conf__why(c, "%s '%.*s' is too large", what, (int)RL_MIN(n, 64), s);
    }
    if (x == 0)
        return conf__why(c, "%s must be above 0 (leave it out for no limit)", what);
    *out = x;
    return NULL;
}

/* "10.0.0.0/8", "::1/128", or an address alone (a /32 or /128). */
static int user_cidr(const char *s, struct conf_cidr *out)
{
    char host[64];
    const char *slash = strchr(s, '/');
    size_t hl = slash ? (size_t)(slash - s) : strlen(s);
    if (hl == 0 || hl >= sizeof(host))
        return -1;
    memcpy(host, s, hl);
    host[hl] = '\0';
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, host, out->addr) == 1)
        out->v6 = 0;
    else if (inet_pton(AF_INET6, host, out->addr) == 1)
        out->v6 = 1;
    else
        return -1;
    unsigned max = out->v6 ? 128 : 32, bits = max;
    if (slash != NULL) {
        char *end;
        unsigned long b = strtoul(slash + 1, &end, 10);
        if (end == slash + 1 || *end != '\0' || b > max)
            return -1;
        bits = (unsigned)b;
    }
    out->bits = (uint8_t)bits;
    for (unsigned i = 0; i < 16; i++) {
        unsigned keep = bits >= (i + 1) * 8 ? 8 : bits > i * 8 ? bits - i * 8 : 0;
        out->addr[i] &= (uint8_t)(keep == 0 ? 0 : 0xffu << (8 - keep));
    }
    return 0;
}

/* One user's mapping. NULL, or a reason (c->errnode: where). */
static const char *user_parse(struct conf_ctx *c, yaml_node_t *map, struct conf_user *u)
{
    const char *why;
    yaml_node_t *pw_node = NULL;

    if (map->type != YAML_MAPPING_NODE)
        return conf__why(c, "a user is a mapping (name, password_sha256, pools, ...), found %s",
                         conf__node_kind(map));
    u->commands = CONF_CAT_ALL;
    u->burst_ms = 100;
    u->line = (int)map->start_mark.line + 1;
    u->col = (int)map->start_mark.column + 1;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pr->key);
        yaml_node_t *v = yaml_document_get_node(&c->doc, pr->value);
        size_t kl, n;
        const char *key = conf__scalar(c, k, &kl, 0);
        const char *s;
        if (key == NULL)
            return c->why;
        c->errnode = v;
        if (strcmp(key, "name") == 0) {
            if ((s = conf__scalar(c, v, &n, 0)) == NULL)
                return c->why;
            if (conf__has_space(s, n) || n > USER_NAME_MAX)
                return conf__why(c, "name '%.*s': a word of at most %d bytes",
                                 (int)RL_MIN(n, 64), s, USER_NAME_MAX);
            if (n == 7 && memcmp(s, "default", 7) == 0)
                return conf__why(c, "name 'default' is the pool's redis_auth password's user");
            if ((u->name = util_strndup(s, n)) == NULL)
                return conf__enomem;
        } else if (strcmp(key, "password_sha256") == 0) {
            if ((s = conf__scalar(c, v, &n, 0)) == NULL)
                return c->why;
            if (n != 64)
                return conf__why(c, "password_sha256: 64 hex digits (sha256sum's output), "
                                 "found %zu characters", n);
            for (size_t i = 0; i < 32; i++) {
                int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
                if (hi < 0 || lo < 0)
                    return conf__why(c, "password_sha256: not hexadecimal");
                u->sha256[i] = (uint8_t)(hi << 4 | lo);
            }
            if (pw_node != NULL)
                return conf__why(c, "give password_sha256 or password_file, not both");
            pw_node = v;
            u->has_password = 1;
        } else if (strcmp(key, "password_file") == 0) {
            if ((s = conf__scalar(c, v, &n, 0)) == NULL)
                return c->why;
            char path[4096];
            if (n >= sizeof(path))
                return conf__why(c, "password_file: path too long");
            memcpy(path, s, n);
            path[n] = '\0';
            if (pw_node != NULL)
                return conf__why(c, "give password_sha256 or password_file, not both");
            if ((why = user_password_file(c, path, u->sha256)) != NULL)
                return why;
            pw_node = v;
            u->has_password = 1;
        } else if (strcmp(key, "password") == 0) {
            return conf__why(c, "a plain password does not belong in the document: give "
                             "password_sha256 (echo -n PASS | sha256sum) or password_file");
        } else if (strcmp(key, "pools") == 0) {
            if ((why = user_strings(c, v, "pools", 1, &u->pools, &u->npools)) != NULL)
                return why;
            for (uint32_t i = 0; i < u->npools; i++)
                if (conf__pool_by_name(c->conf, u->pools[i]) == NULL)
                    return conf__why(c, "pools: no pool '%s'", u->pools[i]);
        } else if (strcmp(key, "commands") == 0) {
            char **cats = NULL;
            uint32_t ncats = 0;
            why = user_strings(c, v, "commands", 1, &cats, &ncats);
            u->commands = 0;
            for (uint32_t i = 0; why == NULL && i < ncats; i++) {
                uint32_t j;
                for (j = 0; user_categories[j] != NULL; j++)
                    if (strcmp(cats[i], user_categories[j]) == 0)
                        break;
                if (user_categories[j] == NULL) {
                    if (strcmp(cats[i], "all") == 0)
                        u->commands = CONF_CAT_ALL;
                    else
                        why = conf__why(c, "commands: '%s' is not read, write, admin, scripts, "
                                        "pubsub, blocking, transactions, dangerous or all",
                                        cats[i]);
                } else {
                    u->commands |= 1u << j;
                }
            }
            for (uint32_t i = 0; i < ncats; i++)
                free(cats[i]);
            free(cats);
            if (why != NULL)
                return why;
        } else if (strcmp(key, "keys") == 0) {
            if ((why = user_strings(c, v, "keys", 0, &u->keys, &u->nkeys)) != NULL)
                return why;
            for (uint32_t i = 0; i < u->nkeys; i++)
                if (strcmp(u->keys[i], "*") == 0) {     /* every key: no check at all */
                    for (uint32_t j = 0; j < u->nkeys; j++)
                        free(u->keys[j]);
                    free(u->keys);
                    u->keys = NULL;
                    u->nkeys = 0;
                    break;
                }
            if (u->nkeys > 0) {
                u->keys_len = calloc(u->nkeys, sizeof(*u->keys_len));
                u->keys_prefix = calloc(u->nkeys, sizeof(*u->keys_prefix));
                if (u->keys_len == NULL || u->keys_prefix == NULL)
                    return conf__enomem;
            }
            for (uint32_t i = 0; i < u->nkeys; i++) {
                size_t l = strlen(u->keys[i]);
                u->keys_len[i] = (uint32_t)l;
                u->keys_prefix[i] = UINT32_MAX;
                if (l > 0 && u->keys[i][l - 1] == '*' && strcspn(u->keys[i], "*?[]\\") == l - 1)
                    u->keys_prefix[i] = (uint32_t)(l - 1);
            }
        } else if (strcmp(key, "namespace") == 0) {
            if ((s = conf__scalar(c, v, &n, 0)) == NULL)
                return c->why;
            if (conf__has_space(s, n) || n > 128)
                return conf__why(c, "namespace: a prefix without spaces, at most 128 bytes");
            if ((u->ns = util_strndup(s, n)) == NULL)
                return conf__enomem;
            u->ns_len = (uint32_t)n;
        } else if (strcmp(key, "rate") == 0) {
            if (v->type != YAML_MAPPING_NODE)
                return conf__why(c, "rate: expected {ops: N, bytes: SIZE, burst_ms: N}, found %s",
                                 conf__node_kind(v));
            for (yaml_node_pair_t *q = v->data.mapping.pairs.start;
                 q < v->data.mapping.pairs.top; q++) {
                yaml_node_t *rk = yaml_document_get_node(&c->doc, q->key);
                yaml_node_t *rv = yaml_document_get_node(&c->doc, q->value);
                size_t rl;
                const char *rs = conf__scalar(c, rk, &rl, 0);
                uint64_t x;
                if (rs == NULL)
                    return c->why;
                c->errnode = rv;
                if (strcmp(rs, "ops") == 0) {
                    if ((why = user_amount(c, rv, "rate ops", 0, &u->rate_ops)) != NULL)
                        return why;
                } else if (strcmp(rs, "bytes") == 0) {
                    if ((why = user_amount(c, rv, "rate bytes", 1, &u->rate_bytes)) != NULL)
                        return why;
                } else if (strcmp(rs, "burst_ms") == 0) {
                    if ((why = user_amount(c, rv, "rate burst_ms", 0, &x)) != NULL)
                        return why;
                    if (x > 60000)
                        return conf__why(c, "rate burst_ms: at most 60000");
                    u->burst_ms = (uint32_t)x;
                } else {
                    c->errnode = rk;
                    return conf__why(c, "rate: unknown key '%s' (ops, bytes, burst_ms)", rs);
                }
            }
        } else if (strcmp(key, "max_connections") == 0) {
            uint64_t x;
            if ((why = user_amount(c, v, "max_connections", 0, &x)) != NULL)
                return why;
            if (x > UINT32_MAX)
                return conf__why(c, "max_connections: too large");
            u->max_connections = (uint32_t)x;
        } else if (strcmp(key, "clients") == 0) {
            char **nets = NULL;
            uint32_t nn = 0;
            why = user_strings(c, v, "clients", 1, &nets, &nn);
            if (why == NULL && (u->clients = calloc(nn, sizeof(*u->clients))) == NULL)
                why = conf__enomem;
            for (uint32_t i = 0; why == NULL && i < nn; i++) {
                if (user_cidr(nets[i], &u->clients[i]) < 0)
                    why = conf__why(c, "clients: '%s' is not an address or a network "
                                    "(10.0.0.0/8, ::1/128)", nets[i]);
                else
                    u->nclients++;
            }
            for (uint32_t i = 0; i < nn; i++)
                free(nets[i]);
            free(nets);
            if (why != NULL)
                return why;
        } else {
            c->errnode = k;
            return conf__why(c, "unknown key '%s' (name, password_sha256, password_file, pools, "
                             "commands, keys, namespace, rate, max_connections, clients)", key);
        }
    }
    c->errnode = map;
    if (u->name == NULL)
        return conf__why(c, "a user needs a name");
    if (u->npools == 0)
        return conf__why(c, "user '%s' needs pools: the pools it may use", u->name);
    if (!u->has_password && u->nclients == 0)
        return conf__why(c, "user '%s' needs password_sha256 or password_file (Redis), or "
                         "clients (memcached, matched by address)", u->name);
    c->errnode = NULL;
    return NULL;
}

/* users: [ {name, password_sha256 | password_file, pools, commands, keys, namespace, rate,
 * max_connections, clients}, ... ] */
const char *conf__set_users(struct conf_ctx *c, const struct conf_command *cmd,
                            yaml_node_t *node, void *obj)
{
    struct conf_global *g = obj;
    (void)cmd;

    if (node->type != YAML_SEQUENCE_NODE)
        return conf__why(c, "expected a list of users, found %s", conf__node_kind(node));
    size_t count = seq_len(node);
    if (count > USERS_MAX)
        return conf__why(c, "at most %d users", USERS_MAX);
    conf__users_free(g);
    if (count == 0)
        return NULL;
    if ((g->users = calloc(count, sizeof(*g->users))) == NULL)
        return conf__enomem;
    int errors = 0;
    for (yaml_node_item_t *it = node->data.sequence.items.start;
         it < node->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(&c->doc, *it);
        struct conf_user *u = &g->users[g->nusers];
        c->errnode = NULL;
        const char *why = user_parse(c, e, u);
        if (why == NULL) {
            for (uint32_t j = 0; j < g->nusers; j++)
                if (strcmp(g->users[j].name, u->name) == 0) {
                    why = conf__why(c, "user '%s' given twice (first at line %d)", u->name,
                                    g->users[j].line);
                    c->errnode = e;
                    break;
                }
        }
        if (why != NULL) {
            if (why != conf__reported)
                conf__fail(c, c->errnode != NULL ? c->errnode : e, "users", "%s", why);
            user_free(u);
            memset(u, 0, sizeof(*u));
            errors++;
            continue;
        }
        g->nusers++;
    }
    c->errnode = NULL;
    return errors > 0 ? conf__reported : NULL;
}
