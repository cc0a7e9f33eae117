/* Configuration values: scalars, numbers, addresses and the generic setters the keyword tables use. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
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

/* ------------------------------------------------------------------ scalars */

/*
 * The text of a scalar node, or NULL with a reason in c->why when the node
 * is not a scalar or (allow_empty == 0) is empty / YAML null.
 */
const char *conf__scalar(struct conf_ctx *c, yaml_node_t *node, size_t *len,
                         int allow_empty)
{
    if (node->type != YAML_SCALAR_NODE) {
        conf__why(c, "expected a single value, found %s", conf__node_kind(node));
        return NULL;
    }
    const char *s = (const char *)node->data.scalar.value;
    size_t n = node->data.scalar.length;
    int plain = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;

    if (!allow_empty && (n == 0 || (plain && (strcmp(s, "~") == 0 || strcmp(s, "null") == 0)))) {
        conf__why(c, "has no value");
        return NULL;
    }
    if (memchr(s, '\0', n) != NULL) {
        conf__why(c, "contains a NUL byte");
        return NULL;
    }
    *len = n;
    return s;
}

int conf__has_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (isspace((unsigned char)s[i]) || iscntrl((unsigned char)s[i]))
            return 1;
    return 0;
}

/* Parse a decimal integer in [min, max]; NULL or a reason. */
static const char *conf__int_in(struct conf_ctx *c, const char *s, size_t n, int64_t min,
                                int64_t max, int64_t *out)
{
    int64_t v;

    if (util_parse_i64(s, n, &v) < 0)
        return conf__why(c, "'%.*s' is not a whole number", (int)RL_MIN(n, 64), s);
    if (v < min || v > max) {
        if (max == INT32_MAX || max == INT64_MAX || max == UINT32_MAX)
            return conf__why(c, "%lld is out of range: must be at least %lld", (long long)v,
                             (long long)min);
        return conf__why(c, "%lld is out of range: must be %lld..%lld", (long long)v,
                         (long long)min, (long long)max);
    }
    *out = v;
    return NULL;
}

/* ------------------------------------------------------------------ addresses */

void conf_addr_free(struct conf_addr *addr)
{
    if (addr == NULL)
        return;
    free(addr->text);
    free(addr->host);
    free(addr->path);
    memset(addr, 0, sizeof(*addr));
    addr->perm = -1;
}

int conf_addr_copy(struct conf_addr *dst, const struct conf_addr *src)
{
    memset(dst, 0, sizeof(*dst));
    dst->port = src->port;
    dst->perm = src->perm;
    if ((src->text && (dst->text = strdup(src->text)) == NULL) ||
        (src->host && (dst->host = strdup(src->host)) == NULL) ||
        (src->path && (dst->path = strdup(src->path)) == NULL)) {
        conf_addr_free(dst);
        return -ENOMEM;
    }
    return 0;
}

/*
 * Split "host:port" (host may be a [bracketed] IPv6 literal) into freshly
 * allocated host and port. Returns 0, or -1 with a reason; *enomem set when
 * the failure is an allocation.
 */
static int conf__parse_hostport(const char *s, size_t n, char **host, uint16_t *port,
                                char *err, size_t errlen)
{
    const char *colon = NULL;
    uint64_t p;

    for (size_t i = n; i > 0; i--) {
        if (s[i - 1] == ':') {
            colon = s + i - 1;
            break;
        }
    }
    if (colon == NULL) {
        snprintf(err, errlen, "'%.*s' has no port: expected host:port", (int)n, s);
        return -1;
    }
    const char *h = s;
    size_t hlen = (size_t)(colon - s);
    const char *ps = colon + 1;
    size_t plen = n - hlen - 1;

    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen == 0) {
        snprintf(err, errlen, "'%.*s' has an empty host", (int)n, s);
        return -1;
    }
    if (conf__has_space(h, hlen)) {
        snprintf(err, errlen, "'%.*s': the host contains a space", (int)n, s);
        return -1;
    }
    if (plen == 0) {
        snprintf(err, errlen, "'%.*s' has no port: expected host:port", (int)n, s);
        return -1;
    }
    if (util_parse_u64(ps, plen, UINT64_MAX, &p) < 0) {
        snprintf(err, errlen, "'%.*s': port '%.*s' is not a number", (int)n, s, (int)plen, ps);
        return -1;
    }
    if (p == 0 || p > 65535) {
        snprintf(err, errlen, "'%.*s': port %.*s is out of range 1..65535", (int)n, s,
                 (int)plen, ps);
        return -1;
    }
    *host = util_strndup(h, hlen);
    if (*host == NULL) {
        snprintf(err, errlen, "%s", conf__enomem);
        return -1;
    }
    *port = (uint16_t)p;
    return 0;
}

/*
 * Parse a place to listen or connect: "host:port", "[v6]:port", "/path" or
 * "/path PERM" (octal permissions for a unix listener, as nutcracker's
 * `listen: /tmp/sock 0666`). Weights are not part of an address (servers
 * parse them before calling this). Returns 0 with addr's strings allocated
 * (free with conf_addr_free), or -1 with a reason in err and addr zeroed.
 */
int conf_parse_addr(const char *text, struct conf_addr *addr, char *err, size_t errlen)
{
    size_t n = strlen(text);

    memset(addr, 0, sizeof(*addr));
    addr->perm = -1;
    while (n > 0 && isspace((unsigned char)text[n - 1]))
        n--;
    while (n > 0 && isspace((unsigned char)*text)) {
        text++;
        n--;
    }
    if (n == 0) {
        snprintf(err, errlen, "the address is empty");
        return -1;
    }

    if (text[0] == '/') {
        size_t plen = n;
        const char *sp = memchr(text, ' ', n);

        if (sp != NULL) {
            const char *perm = sp + 1;
            size_t permlen = n - (size_t)(perm - text);
            uint64_t mode = 0;

            while (permlen > 0 && *perm == ' ') {
                perm++;
                permlen--;
            }
            plen = (size_t)(sp - text);
            for (size_t i = 0; i < permlen; i++) {
                if (perm[i] < '0' || perm[i] > '7' || mode > 0777) {
                    snprintf(err, errlen, "'%.*s': permissions '%.*s' are not octal like 0666",
                             (int)n, text, (int)permlen, perm);
                    return -1;
                }
                mode = mode * 8 + (uint64_t)(perm[i] - '0');
            }
            if (permlen == 0 || permlen > 4 || mode > 0777) {
                snprintf(err, errlen, "'%.*s': permissions must be octal 0..0777, like 0666",
                         (int)n, text);
                return -1;
            }
            addr->perm = (int)mode;
        }
        if (plen < 2) {
            snprintf(err, errlen, "'%.*s' is not a unix socket path", (int)n, text);
            return -1;
        }
        addr->path = util_strndup(text, plen);
        addr->text = util_strndup(text, plen);
        if (addr->path == NULL || addr->text == NULL)
            goto enomem;
        return 0;
    }

    if (conf__parse_hostport(text, n, &addr->host, &addr->port, err, errlen) < 0) {
        conf_addr_free(addr);
        return -1;
    }
    addr->text = util_strndup(text, n);
    if (addr->text == NULL)
        goto enomem;
    return 0;

enomem:
    conf_addr_free(addr);
    snprintf(err, errlen, "%s", conf__enomem);
    return -1;
}

/* Parse the address node into a conf_addr at obj + offset. */
const char *conf__set_addr(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj)
{
    struct conf_addr *addr = (struct conf_addr *)((char *)obj + cmd->offset);
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);
    char buf[200];

    if (s == NULL)
        return c->why;
    conf_addr_free(addr);
    if (conf_parse_addr(s, addr, buf, sizeof(buf)) < 0)
        return conf__why(c, "%s", buf);
    return NULL;
}

/*
 * The stats and admin addresses: as conf__set_addr, and ":port" means 127.0.0.1:port (the
 * safe place for an endpoint that answers without a token); stored as "127.0.0.1:port".
 */
const char *conf__set_local_addr(struct conf_ctx *c, const struct conf_command *cmd,
                                 yaml_node_t *node, void *obj)
{
    struct conf_addr *addr = (struct conf_addr *)((char *)obj + cmd->offset);
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);
    char buf[200], text[300];

    if (s == NULL)
        return c->why;
    if (s[0] != ':')
        return conf__set_addr(c, cmd, node, obj);
    snprintf(text, sizeof(text), "127.0.0.1%.*s", (int)RL_MIN(n, 200), s);
    conf_addr_free(addr);
    if (conf_parse_addr(text, addr, buf, sizeof(buf)) < 0)
        return conf__why(c, "%s", buf);
    if (addr->path != NULL || addr->perm != -1)
        return conf__why(c, "'%s' is not host:port or :port", s);
    return NULL;
}

/* --------------------------------------------------------------- setters */

const char *conf__set_bool(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj)
{
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);

    if (s == NULL)
        return c->why;
    /* nutcracker accepts exactly these two words; so do we. */
    if (strcmp(s, "true") == 0)
        *(int *)((char *)obj + cmd->offset) = 1;
    else if (strcmp(s, "false") == 0)
        *(int *)((char *)obj + cmd->offset) = 0;
    else
        return conf__why(c, "'%.*s' is not true or false", (int)RL_MIN(n, 64), s);
    return NULL;
}

/* An integer scalar within the command's [min, max] into *v; NULL or why. */
static const char *conf__number(struct conf_ctx *c, const struct conf_command *cmd,
                                yaml_node_t *node, int64_t *v)
{
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);

    if (s == NULL || conf__int_in(c, s, n, cmd->min, cmd->max, v) != NULL)
        return c->why;
    return NULL;
}

const char *conf__set_int(struct conf_ctx *c, const struct conf_command *cmd,
                          yaml_node_t *node, void *obj)
{
    int64_t v;

    if (conf__number(c, cmd, node, &v) != NULL)
        return c->why;
    *(int *)((char *)obj + cmd->offset) = (int)v;
    return NULL;
}

const char *conf__set_u32(struct conf_ctx *c, const struct conf_command *cmd,
                          yaml_node_t *node, void *obj)
{
    int64_t v;

    if (conf__number(c, cmd, node, &v) != NULL)
        return c->why;
    *(uint32_t *)((char *)obj + cmd->offset) = (uint32_t)v;
    return NULL;
}

const char *conf__set_u64(struct conf_ctx *c, const struct conf_command *cmd,
                          yaml_node_t *node, void *obj)
{
    int64_t v;

    if (conf__number(c, cmd, node, &v) != NULL)
        return c->why;
    *(uint64_t *)((char *)obj + cmd->offset) = (uint64_t)v;
    return NULL;
}

/* timeout: nutcracker treats 0 like "no timeout"; we store both as -1. */
const char *conf__set_timeout(struct conf_ctx *c, const struct conf_command *cmd,
                              yaml_node_t *node, void *obj)
{
    const char *why = conf__set_int(c, cmd, node, obj);
    int *t = (int *)((char *)obj + cmd->offset);

    if (why == NULL && *t == 0)
        *t = -1;
    return why;
}

const char *conf__set_string(struct conf_ctx *c, const struct conf_command *cmd,
                             yaml_node_t *node, void *obj)
{
    char **field = (char **)((char *)obj + cmd->offset);
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);

    if (s == NULL)
        return c->why;
    free(*field);
    *field = util_strndup(s, n);
    return *field == NULL ? conf__enomem : NULL;
}

/* A name-like string: non-empty, no spaces or control characters. */
const char *conf__set_word(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj)
{
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);

    if (s == NULL)
        return c->why;
    if (conf__has_space(s, n))
        return conf__why(c, "'%.*s' must not contain spaces", (int)RL_MIN(n, 64), s);
    return conf__set_string(c, cmd, node, obj);
}

/* Append the word of scalar node w to *field (words separated by a space; *used its length). */
static const char *conf__append_word(struct conf_ctx *c, yaml_node_t *w, char **field, size_t *used)
{
    size_t n;
    const char *t = w ? conf__scalar(c, w, &n, 0) : NULL;

    if (t == NULL)
        return w ? c->why : conf__why(c, "a list item is missing");
    if (conf__has_space(t, n))
        return conf__why(c, "'%.*s' must not contain spaces", (int)RL_MIN(n, 64), t);
    char *grown = realloc(*field, *used + n + 2);
    if (grown == NULL)
        return conf__enomem;
    *field = grown;
    if (*used > 0)
        grown[(*used)++] = ' ';
    memcpy(grown + *used, t, n);
    *used += n;
    grown[*used] = '\0';
    return NULL;
}

/* A list of words ([a, b], or one word) stored as one string, the words separated by a space. */
const char *conf__set_words(struct conf_ctx *c, const struct conf_command *cmd,
                                   yaml_node_t *node, void *obj)
{
    char **field = (char **)((char *)obj + cmd->offset);
    const char *why = NULL;
    size_t used = 0;

    if (node->type != YAML_SCALAR_NODE && node->type != YAML_SEQUENCE_NODE)
        return conf__why(c, "expected a list of names, found %s", conf__node_kind(node));
    free(*field);
    *field = NULL;
    if (node->type == YAML_SCALAR_NODE)
        return conf__append_word(c, node, field, &used);
    for (yaml_node_item_t *it = node->data.sequence.items.start;
         why == NULL && it < node->data.sequence.items.top; it++)
        why = conf__append_word(c, yaml_document_get_node(&c->doc, *it), field, &used);
    return why;
}

static const char *conf__word_at(const void *arg, int i);
static int conf__count(const char *const *names);

/* One of cmd->names; stores its index as an int (the enums here are int-sized). */
const char *conf__set_enum(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj)
{
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);
    char list[160] = "";
    size_t used = 0;

    if (s == NULL)
        return c->why;
    for (int i = 0; cmd->names[i] != NULL; i++) {
        if (strcmp(cmd->names[i], s) == 0) {
            *(int *)((char *)obj + cmd->offset) = i;
            return NULL;
        }
        int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                         cmd->names[i]);
        if (w > 0 && (size_t)w < sizeof(list) - used)
            used += (size_t)w;
    }
    const char *near = conf__suggest(s, conf__count(cmd->names), conf__word_at, cmd->names);
    if (near != NULL)
        return conf__why(c, "'%.*s' is not one of: %s; did you mean '%s'?", (int)RL_MIN(n, 64),
                         s, list, near);
    return conf__why(c, "'%.*s' is not one of: %s", (int)RL_MIN(n, 64), s, list);
}

/* "a, b, c" of the n names that name(i) gives, for "expected one of" messages. */
static void conf__name_list(char *list, size_t cap, int n, const char *(*name)(int))
{
    size_t used = 0;
    list[0] = '\0';
    for (int i = 0; i < n; i++) {
        int w = snprintf(list + used, cap - used, "%s%s", i ? ", " : "", name(i));
        if (w > 0 && (size_t)w < cap - used)
            used += (size_t)w;
    }
}

static const char *conf__hash_name(int i)
{
    return hash_name((enum hash_type)i);
}

static const char *conf__dist_name(int i)
{
    return dist_name((enum dist_type)i);
}

static const char *conf__hash_name_at(const void *arg, int i)
{
    return hash_name((enum hash_type)i);
}

static const char *conf__dist_name_at(const void *arg, int i)
{
    return dist_name((enum dist_type)i);
}

static const char *conf__word_at(const void *arg, int i)
{
    return ((const char *const *)arg)[i];
}

static int conf__count(const char *const *names)
{
    int n = 0;
    while (names[n] != NULL)
        n++;
    return n;
}

const char *conf__set_hash(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj)
{
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);
    enum hash_type h;
    char list[300];

    if (s == NULL)
        return c->why;
    if (hash_from_name(s, n, &h) == 0) {
        *(enum hash_type *)((char *)obj + cmd->offset) = h;
        return NULL;
    }
    const char *near = conf__suggest(s, HASH_COUNT, conf__hash_name_at, NULL);
    if (near != NULL)
        return conf__why(c, "unknown hash '%.*s'; did you mean '%s'?", (int)RL_MIN(n, 64), s, near);
    conf__name_list(list, sizeof(list), HASH_COUNT, conf__hash_name);
    return conf__why(c, "unknown hash '%.*s'; expected one of: %s", (int)RL_MIN(n, 64), s, list);
}

const char *conf__set_dist(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj)
{
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);
    enum dist_type d;
    char list[200];

    if (s == NULL)
        return c->why;
    if (dist_from_name(s, n, &d) == 0) {
        *(enum dist_type *)((char *)obj + cmd->offset) = d;
        return NULL;
    }
    const char *near = conf__suggest(s, DIST_COUNT, conf__dist_name_at, NULL);
    if (near != NULL)
        return conf__why(c, "unknown distribution '%.*s'; did you mean '%s'?", (int)RL_MIN(n, 64),
                         s, near);
    conf__name_list(list, sizeof(list), DIST_COUNT, conf__dist_name);
    return conf__why(c, "unknown distribution '%.*s'; expected one of: %s",
                     (int)RL_MIN(n, 64), s, list);
}

const char *conf__set_hash_tag(struct conf_ctx *c, const struct conf_command *cmd,
                               yaml_node_t *node, void *obj)
{
    struct conf_pool *pool = obj;
    size_t n;
    const char *s = conf__scalar(c, node, &n, 1);

    if (s == NULL)
        return c->why;
    if (n != 2)
        return conf__why(c, "'%.*s' must be exactly 2 characters, like \"{}\"",
                         (int)RL_MIN(n, 64), s);
    pool->has_hash_tag = 1;
    memcpy(pool->hash_tag, s, 2);
    return NULL;
}

/* hash_seed: decimal or 0x-hex 64-bit; only for a seedable hash (set before us). */
const char *conf__set_hash_seed(struct conf_ctx *c, const struct conf_command *cmd,
                                yaml_node_t *node, void *obj)
{
    struct conf_pool *pool = obj;
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);
    uint64_t v = 0;

    if (s == NULL)
        return c->why;
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        if (n > 18)
            return conf__why(c, "'%s' does not fit in 64 bits", s);
        for (size_t i = 2; i < n; i++) {
            int d = isdigit((unsigned char)s[i]) ? s[i] - '0'
                    : isxdigit((unsigned char)s[i]) ? (tolower((unsigned char)s[i]) - 'a' + 10)
                    : -1;
            if (d < 0)
                return conf__why(c, "'%s' is not a number", s);
            v = (v << 4) | (uint64_t)d;
        }
    } else if (util_parse_u64(s, n, UINT64_MAX, &v) < 0) {
        return conf__why(c, "'%.*s' is not a non-negative 64-bit number", (int)RL_MIN(n, 64), s);
    }
    pool->has_hash_seed = 1;
    pool->hash_seed = v;
    return NULL;
}

const char *conf__set_protocol(struct conf_ctx *c, const struct conf_command *cmd,
                               yaml_node_t *node, void *obj)
{
    return conf__set_enum(c, cmd, node, obj);
}

/* `redis: true|false` is twemproxy's spelling of the protocol. */
const char *conf__set_redis(struct conf_ctx *c, const struct conf_command *cmd,
                            yaml_node_t *node, void *obj)
{
    struct conf_pool *pool = obj;
    int redis = 0;
    struct conf_command b = *cmd;

    b.offset = 0;
    if (conf__set_bool(c, &b, node, &redis) != NULL)
        return c->why;
    pool->protocol = redis ? CONF_PROTO_REDIS : CONF_PROTO_MEMCACHE;
    return NULL;
}

const char *conf__set_factor(struct conf_ctx *c, const struct conf_command *cmd,
                             yaml_node_t *node, void *obj)
{
    size_t n;
    const char *s = conf__scalar(c, node, &n, 0);
    char *end;
    double v;

    if (s == NULL)
        return c->why;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end != s + n || !isfinite(v))
        return conf__why(c, "'%.*s' is not a number", (int)RL_MIN(n, 64), s);
    if (v <= 1.0)
        return conf__why(c, "%g must be greater than 1.0 (e.g. 1.25: at most 25%% above "
                         "the mean load)", v);
    *(double *)((char *)obj + cmd->offset) = v;
    return NULL;
}

/* A byte count: digits, optionally followed by KiB, MiB or GiB (or KB, MB, GB: the same
 * binary units, as Redis's own maxmemory reads them). */
const char *conf__bytes(struct conf_ctx *c, yaml_node_t *v, const char *what, uint64_t min,
                        uint64_t max, uint64_t *out)
{
    size_t n;
    const char *s = conf__scalar(c, v, &n, 0);
    if (s == NULL)
        return c->why;
    size_t i = 0;
    uint64_t x = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (x > (UINT64_MAX - 9) / 10)
            return conf__why(c, "%s '%.*s' is too large", what, (int)RL_MIN(n, 64), s);
        x = x * 10 + (uint64_t)(s[i++] - '0');
    }
    unsigned shift = 0;
    const char *unit = s + i;
    size_t ul = n - i;
    if (i == 0)
        goto bad;
    if (ul == 0)
        shift = 0;
    else if ((ul == 3 && strncmp(unit, "KiB", 3) == 0) || (ul == 2 && strncmp(unit, "KB", 2) == 0))
        shift = 10;
    else if ((ul == 3 && strncmp(unit, "MiB", 3) == 0) || (ul == 2 && strncmp(unit, "MB", 2) == 0))
        shift = 20;
    else if ((ul == 3 && strncmp(unit, "GiB", 3) == 0) || (ul == 2 && strncmp(unit, "GB", 2) == 0))
        shift = 30;
    else
        goto bad;
    if (x > (max >> shift))
        return conf__why(c, "%s '%.*s' is over %" PRIu64 " bytes", what, (int)RL_MIN(n, 64), s,
                         max);
    x <<= shift;
    if (x < min)
        return conf__why(c, "%s '%.*s' is under %" PRIu64 " bytes", what, (int)RL_MIN(n, 64), s,
                         min);
    *out = x;
    return NULL;
bad:
    return conf__why(c, "%s '%.*s' is not a byte count (digits, then optionally KiB, MiB "
                     "or GiB)", what, (int)RL_MIN(n, 64), s);
}
