/* YAML configuration loader: twemproxy's pool files plus ringleader's keys -> validated, immutable struct conf. */
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

#include "conf.h"
#include "util.h"

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

#define CONF_SLOTS          16384u
/* nutcracker keeps a weight in an int and sums a pool's in a uint32_t: beyond either its
 * arithmetic wraps and there is no placement of its to agree with. */
#define CONF_MAX_WEIGHT     2147483647u
#define CONF_MAX_POOL_WEIGHT 4294967295u
#define CONF_ERRORS_MAX     64         /* errors kept (and printed); more are counted */
#define CONF_SUGGEST_MAX    2          /* "did you mean": at most this many edits away */
#define CONF_MEMCACHE_PORT  11211u     /* twemproxy drops it from the identity */
#define CONF_GLOBAL_KEY     "ringleader"

struct conf_ctx;
struct conf_command;

/*
 * A setter parses `node` into the field at `obj + cmd->offset`. Returns NULL
 * on success or a reason (static, or formatted into ctx->why); a setter that
 * runs out of memory returns conf__enomem.
 */
typedef const char *(*conf_set_fn)(struct conf_ctx *c, const struct conf_command *cmd,
                                   yaml_node_t *node, void *obj);

struct conf_command {
    const char  *name;
    conf_set_fn  set;
    size_t       offset;
    int64_t      min, max;             /* numeric setters: accepted range */
    const char *const *names;          /* enum setter: accepted words, NULL-terminated */
    int          late;                 /* run after every pool has been read */
};

/* One error found while loading; printed sorted by position. */
struct conf_error {
    size_t   line, col;                /* 1-based; 0 for the file as a whole */
    uint32_t seq;                      /* order found: ties keep it */
    char    *text;                     /* the whole message */
};

struct conf_ctx {
    const char    *file;               /* name used in messages */
    yaml_document_t doc;
    struct conf   *conf;
    char          *err;
    size_t         errlen;
    struct conf_error errors[CONF_ERRORS_MAX];
    uint32_t       nerrors;            /* found, kept or not */
    int            errors_oom;         /* a message could not be kept */
    const struct conf_command *run_cmds; /* the table conf__run is running ... */
    size_t         run_ncmds;
    const unsigned char *run_failed;   /* ... and which of its keys failed so far */
    char           why[256];            /* scratch for formatted reasons */
    yaml_node_t   *errnode;             /* a setter may point the message elsewhere */
    yaml_node_t  **pool_name_nodes;     /* per pool: its key node */
    yaml_node_t  **pool_nodes;          /* per pool: value node of each command */
    size_t         npool_cmds;
};

static const char conf__enomem[] = "out of memory";
/* A setter's answer when a nested parser already reported its errors. */
static const char conf__reported[] = "";

/* ------------------------------------------------------------------ errors */

static void conf__vmsg(struct conf_ctx *c, const yaml_mark_t *m, const char *key,
                       const char *fmt, va_list ap)
{
    char text[1024];
    int n;

    c->nerrors++;
    if (c->nerrors > CONF_ERRORS_MAX)
        return;                        /* counted in the last line of the report */
    if (m == NULL)
        n = snprintf(text, sizeof(text), "%s: ", c->file);
    else if (key != NULL)
        n = snprintf(text, sizeof(text), "%s:%zu:%zu: key '%s': ", c->file, m->line + 1,
                     m->column + 1, key);
    else
        n = snprintf(text, sizeof(text), "%s:%zu:%zu: ", c->file, m->line + 1, m->column + 1);
    if (n < 0 || (size_t)n >= sizeof(text))
        n = 0;
    vsnprintf(text + n, sizeof(text) - (size_t)n, fmt, ap);
    struct conf_error *e = &c->errors[c->nerrors - 1];
    e->line = m ? m->line + 1 : 0;
    e->col = m ? m->column + 1 : 0;
    e->seq = c->nerrors;
    e->text = strdup(text);
    if (e->text == NULL)
        c->errors_oom = 1;
}

/* Record an error at `node` (NULL: line 1 column 1). Always returns -1. */
static int conf__fail(struct conf_ctx *c, const yaml_node_t *node, const char *key,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int conf__fail(struct conf_ctx *c, const yaml_node_t *node, const char *key,
                      const char *fmt, ...)
{
    static const yaml_mark_t start = { 0, 0, 0 };
    va_list ap;

    va_start(ap, fmt);
    conf__vmsg(c, node != NULL ? &node->start_mark : &start, key, fmt, ap);
    va_end(ap);
    return -1;
}

/* An error of the file as a whole (cannot open, out of memory): "FILE: reason". */
static int conf__fail_file(struct conf_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int conf__fail_file(struct conf_ctx *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    conf__vmsg(c, NULL, NULL, fmt, ap);
    va_end(ap);
    return -1;
}

static int conf__error_cmp(const void *pa, const void *pb)
{
    const struct conf_error *a = pa, *b = pb;

    if (a->line != b->line)
        return a->line < b->line ? -1 : 1;
    if (a->col != b->col)
        return a->col < b->col ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/*
 * Write the errors found, sorted by position, one per line, into the caller's buffer; what
 * does not fit is counted on a last line. Frees the kept messages.
 */
static void conf__report(struct conf_ctx *c)
{
    uint32_t kept = c->nerrors < CONF_ERRORS_MAX ? c->nerrors : CONF_ERRORS_MAX;
    size_t used = 0;
    uint32_t shown = 0;
    const size_t tail = 64;            /* room kept for the "more errors" line */

    qsort(c->errors, kept, sizeof(c->errors[0]), conf__error_cmp);
    c->err[0] = '\0';
    for (uint32_t i = 0; i < kept; i++) {
        const char *t = c->errors[i].text ? c->errors[i].text : conf__enomem;
        size_t n = strlen(t) + (used ? 1 : 0);
        int last = i + 1 == c->nerrors;
        if (used + n + (last ? 0 : tail) + 1 > c->errlen)
            break;
        used += (size_t)snprintf(c->err + used, c->errlen - used, "%s%s", used ? "\n" : "", t);
        shown++;
    }
    if (shown == 0 && c->errlen > 0 && kept > 0) {
        /* Not even one fits whole: the first, cut. */
        snprintf(c->err, c->errlen, "%s", c->errors[0].text ? c->errors[0].text : conf__enomem);
        used = strlen(c->err);
        shown = 1;
    }
    if (shown < c->nerrors && used + 1 < c->errlen)
        snprintf(c->err + used, c->errlen - used, "%s%s: %u more error%s not shown",
                 used ? "\n" : "", c->file, c->nerrors - shown,
                 c->nerrors - shown == 1 ? "" : "s");
    for (uint32_t i = 0; i < kept; i++) {
        free(c->errors[i].text);
        c->errors[i].text = NULL;
    }
}

/* ------------------------------------------------------------ suggestions */

/* Optimal string alignment distance (insertions, deletions, substitutions and swaps of two
 * neighbours count one each), capped: anything above cap is cap + 1. */
static size_t conf__distance(const char *a, const char *b, size_t cap)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[3][64];

    if (la >= 63 || lb >= 63)
        return cap + 1;
    if ((la > lb ? la - lb : lb - la) > cap)
        return cap + 1;
    for (size_t j = 0; j <= lb; j++)
        row[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t *cur = row[i % 3], *prev = row[(i + 2) % 3], *pprev = row[(i + 1) % 3];
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t v = prev[j] + 1;
            if (cur[j - 1] + 1 < v)
                v = cur[j - 1] + 1;
            if (prev[j - 1] + cost < v)
                v = prev[j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                pprev[j - 2] + 1 < v)
                v = pprev[j - 2] + 1;
            cur[j] = v;
        }
    }
    size_t d = row[la % 3][lb];
    return d > cap ? cap + 1 : d;
}

/* The nearest of n names (name(i)) to word within CONF_SUGGEST_MAX edits and fewer edits
 * than word has characters (a short stray word is not "corrected"), or NULL. */
static const char *conf__suggest(const char *word, int n, const char *(*name)(const void *, int),
                                 const void *arg)
{
    const char *best = NULL;
    size_t bestd = CONF_SUGGEST_MAX + 1, wl = strlen(word);

    for (int i = 0; i < n; i++) {
        const char *cand = name(arg, i);
        size_t d = conf__distance(word, cand, CONF_SUGGEST_MAX);
        if (d < bestd && d < wl) {
            best = cand;
            bestd = d;
        }
    }
    return best;
}

static const char *conf__cmd_name(const void *arg, int i)
{
    return ((const struct conf_command *)arg)[i].name;
}

static const char *conf__why(struct conf_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const char *conf__why(struct conf_ctx *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);
    return c->why;
}

static const char *conf__node_kind(const yaml_node_t *node)
{
    switch (node->type) {
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE:  return "a mapping";
    case YAML_SCALAR_NODE:   return "a single value";
    default:                 return "nothing";
    }
}

/* ------------------------------------------------------------------ scalars */

/*
 * The text of a scalar node, or NULL with a reason in c->why when the node
 * is not a scalar or (allow_empty == 0) is empty / YAML null.
 */
static const char *conf__scalar(struct conf_ctx *c, yaml_node_t *node, size_t *len,
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

static int conf__has_space(const char *s, size_t n)
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
static const char *conf__set_addr(struct conf_ctx *c, const struct conf_command *cmd,
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
static const char *conf__set_local_addr(struct conf_ctx *c, const struct conf_command *cmd,
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

static const char *conf__set_bool(struct conf_ctx *c, const struct conf_command *cmd,
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

static const char *conf__set_int(struct conf_ctx *c, const struct conf_command *cmd,
                                 yaml_node_t *node, void *obj)
{
    int64_t v;

    if (conf__number(c, cmd, node, &v) != NULL)
        return c->why;
    *(int *)((char *)obj + cmd->offset) = (int)v;
    return NULL;
}

static const char *conf__set_u32(struct conf_ctx *c, const struct conf_command *cmd,
                                 yaml_node_t *node, void *obj)
{
    int64_t v;

    if (conf__number(c, cmd, node, &v) != NULL)
        return c->why;
    *(uint32_t *)((char *)obj + cmd->offset) = (uint32_t)v;
    return NULL;
}

static const char *conf__set_u64(struct conf_ctx *c, const struct conf_command *cmd,
                                 yaml_node_t *node, void *obj)
{
    int64_t v;

    if (conf__number(c, cmd, node, &v) != NULL)
        return c->why;
    *(uint64_t *)((char *)obj + cmd->offset) = (uint64_t)v;
    return NULL;
}

/* timeout: nutcracker treats 0 like "no timeout"; we store both as -1. */
static const char *conf__set_timeout(struct conf_ctx *c, const struct conf_command *cmd,
                                     yaml_node_t *node, void *obj)
{
    const char *why = conf__set_int(c, cmd, node, obj);
    int *t = (int *)((char *)obj + cmd->offset);

    if (why == NULL && *t == 0)
        *t = -1;
    return why;
}

static const char *conf__set_string(struct conf_ctx *c, const struct conf_command *cmd,
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
static const char *conf__set_word(struct conf_ctx *c, const struct conf_command *cmd,
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
static const char *conf__set_words(struct conf_ctx *c, const struct conf_command *cmd,
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
static const char *conf__set_enum(struct conf_ctx *c, const struct conf_command *cmd,
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

static const char *conf__set_hash(struct conf_ctx *c, const struct conf_command *cmd,
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

static const char *conf__set_dist(struct conf_ctx *c, const struct conf_command *cmd,
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

static const char *conf__set_hash_tag(struct conf_ctx *c, const struct conf_command *cmd,
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
static const char *conf__set_hash_seed(struct conf_ctx *c, const struct conf_command *cmd,
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

static const char *conf__set_protocol(struct conf_ctx *c, const struct conf_command *cmd,
                                      yaml_node_t *node, void *obj)
{
    return conf__set_enum(c, cmd, node, obj);
}

/* `redis: true|false` is twemproxy's spelling of the protocol. */
static const char *conf__set_redis(struct conf_ctx *c, const struct conf_command *cmd,
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

static const char *conf__set_factor(struct conf_ctx *c, const struct conf_command *cmd,
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

/* ---------------------------------------------------------------- servers */

static void conf__server_free(struct conf_server *s)
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

static int conf__collect(struct conf_ctx *c, const struct conf_command *cmds, size_t ncmds,
                         yaml_node_t *map, yaml_node_t **keys, yaml_node_t **values,
                         const char *what, unsigned char *failed);
static int conf__run(struct conf_ctx *c, const struct conf_command *cmds, size_t ncmds,
                     yaml_node_t **keys, yaml_node_t **values, void *obj, int late,
                     unsigned char *failed);
static int conf__key_failed(const struct conf_ctx *c, const char *name);

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

static const char *conf__set_servers(struct conf_ctx *c, const struct conf_command *cmd,
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

static const char *conf__set_slots(struct conf_ctx *c, const struct conf_command *cmd,
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

static const struct conf_pool *conf__pool_by_name(const struct conf *conf, const char *name)
{
    for (uint32_t i = 0; i < conf->npools; i++)
        if (conf->pools[i].name != NULL && strcmp(conf->pools[i].name, name) == 0)
            return &conf->pools[i];
    return NULL;
}

/* routes: [{prefix: "user:", pool: users}, ...]; runs after all pools are read. */
static const char *conf__set_routes(struct conf_ctx *c, const struct conf_command *cmd,
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
static int conf__ipv4_net(const char *s, uint32_t *net, uint32_t *mask)
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
static const char *conf__set_cluster_zones(struct conf_ctx *c, const struct conf_command *cmd,
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
static const char *conf__set_collapse(struct conf_ctx *c, const struct conf_command *cmd,
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

/* shadow's plain keys (pool and fraction are read by conf__set_shadow itself) */
static const struct conf_command conf__shadow_keys[] = {
    { "compare",     conf__set_bool, offsetof(struct conf_shadow, compare),     0, 0,       NULL, 0 },
    { "queue_limit", conf__set_u32,  offsetof(struct conf_shadow, queue_limit), 1, 1000000, NULL, 0 },
    { "batch_ms",    conf__set_u32,  offsetof(struct conf_shadow, batch_ms),    0, 100,     NULL, 0 },
};

/* shadow: {pool: NAME, fraction: F, compare: BOOL, queue_limit: N, batch_ms: N}; runs after all pools
 * are read (the shadow pool must exist and speak the same protocol). */
static const char *conf__set_shadow(struct conf_ctx *c, const struct conf_command *cmd,
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

static void conf__tls_free(struct conf_tls *t)
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
static const char *conf__set_tls(struct conf_ctx *c, const struct conf_command *cmd,
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
    { "server_tls",           conf__set_tls,      P(server_tls), 0, 0, NULL, 0 },
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
};
#undef G

static int conf__table_has(const struct conf_command *cmds, size_t ncmds, const char *name)
{
    for (size_t i = 0; i < ncmds; i++)
        if (strcmp(cmds[i].name, name) == 0)
            return 1;
    return 0;
}

/* The unknown-key message: a near miss (marked failed in failed[], so that it is not also
 * reported missing), or the section the key belongs to. */
static int conf__unknown_key(struct conf_ctx *c, yaml_node_t *k, const char *name,
                             const struct conf_command *cmds, size_t ncmds, const char *what,
                             unsigned char *failed)
{
    const char *near = conf__suggest(name, (int)ncmds, conf__cmd_name, cmds);

    if (near != NULL) {
        for (size_t i = 0; failed != NULL && i < ncmds; i++)
            if (cmds[i].name == near)
                failed[i] = 1;
        return conf__fail(c, k, name, "unknown %s key; did you mean '%s'?", what, near);
    }
    if (cmds == conf_pool_commands &&
        conf__table_has(conf_global_commands, RL_ARRAY_SIZE(conf_global_commands), name))
        return conf__fail(c, k, name, "unknown pool key: '%s' is a setting of the '"
                          CONF_GLOBAL_KEY ":' section", name);
    if (cmds == conf_global_commands &&
        conf__table_has(conf_pool_commands, RL_ARRAY_SIZE(conf_pool_commands), name))
        return conf__fail(c, k, name, "unknown " CONF_GLOBAL_KEY " key: '%s' is a pool key, "
                          "set in each pool", name);
    return conf__fail(c, k, name, "unknown %s key", what);
}

/*
 * Match each key of `map` against cmds: values[i] / keys[i] get the nodes
 * for cmds[i] (NULL when absent). Unknown keys, repeated keys and keys that
 * are not plain words are errors, recorded and skipped; a misspelt key marks
 * the key it was probably meant to be in failed[] (ncmds entries, may be
 * NULL). Returns the number of errors recorded (0: every key is known and
 * given once).
 */
static int conf__collect(struct conf_ctx *c, const struct conf_command *cmds, size_t ncmds,
                         yaml_node_t *map, yaml_node_t **keys, yaml_node_t **values,
                         const char *what, unsigned char *failed)
{
    yaml_node_pair_t *pair;
    int errors = 0;

    memset(keys, 0, ncmds * sizeof(*keys));
    memset(values, 0, ncmds * sizeof(*values));
    for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(&c->doc, pair->value);
        size_t i;

        if (k->type != YAML_SCALAR_NODE) {
            errors -= conf__fail(c, k, "?", "a %s key must be a word, found %s", what,
                                 conf__node_kind(k));
            continue;
        }
        const char *name = (const char *)k->data.scalar.value;
        for (i = 0; i < ncmds; i++)
            if (strcmp(cmds[i].name, name) == 0)
                break;
        if (i == ncmds) {
            errors -= conf__unknown_key(c, k, name, cmds, ncmds, what, failed);
            continue;
        }
        if (keys[i] != NULL) {
            errors -= conf__fail(c, k, name, "given twice (first at line %zu)",
                                 keys[i]->start_mark.line + 1);
            continue;
        }
        keys[i] = k;
        values[i] = v;
    }
    return errors;
}

/* Whether the key `name` of the table being run has failed (for setters that read the
 * fields of keys before them: their verdict on a value that is not there helps nobody). */
static int conf__key_failed(const struct conf_ctx *c, const char *name)
{
    for (size_t i = 0; c->run_failed != NULL && i < c->run_ncmds; i++)
        if (strcmp(c->run_cmds[i].name, name) == 0)
            return c->run_failed[i];
    return 0;
}

/*
 * Run the setters of the keys present (late ones or the others), every one of them: a
 * failure is recorded and the next key runs. failed[i] (ncmds entries, may be NULL) is set
 * for each key whose setter failed. Returns the number of failed keys.
 */
static int conf__run(struct conf_ctx *c, const struct conf_command *cmds, size_t ncmds,
                     yaml_node_t **keys, yaml_node_t **values, void *obj, int late,
                     unsigned char *failed)
{
    unsigned char scratch[128];
    int errors = 0;

    if (failed == NULL) {
        failed = ncmds <= sizeof(scratch) ? scratch : NULL;
        if (failed != NULL)
            memset(failed, 0, ncmds);
    }
    const struct conf_command *save_cmds = c->run_cmds;
    const unsigned char *save_failed = c->run_failed;
    size_t save_n = c->run_ncmds;
    c->run_cmds = cmds;
    c->run_ncmds = ncmds;
    c->run_failed = failed;
    for (size_t i = 0; i < ncmds; i++) {
        const char *why;

        if (values[i] == NULL || cmds[i].late != late)
            continue;
        c->errnode = NULL;
        why = cmds[i].set(c, &cmds[i], values[i], obj);
        if (why == NULL)
            continue;
        errors++;
        if (failed != NULL)
            failed[i] = 1;
        if (why != conf__reported)     /* a nested parser reported its own */
            conf__fail(c, c->errnode != NULL ? c->errnode : values[i], cmds[i].name, "%s", why);
    }
    c->run_cmds = save_cmds;
    c->run_ncmds = save_n;
    c->run_failed = save_failed;
    return errors;
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
    if (!GIVEN("servers") && !FAILED("servers"))
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

/* ------------------------------------------------------------------ load */

static void conf__pool_free(struct conf_pool *pool)
{
    free(pool->name);
    conf_addr_free(&pool->listen);
    free(pool->redis_auth);
    free(pool->redis_username);
    free(pool->slot_map);
    for (uint32_t i = 0; i < pool->nroutes; i++) {
        free(pool->routes[i].prefix);
        free(pool->routes[i].pool);
    }
    free(pool->routes);
    for (uint32_t i = 0; i < pool->ncluster_zones; i++) {
        free(pool->cluster_zones[i].match);
        free(pool->cluster_zones[i].zone);
    }
    free(pool->cluster_zones);
    free(pool->shadow.pool);
    conf__tls_free(pool->tls);
    conf__tls_free(pool->server_tls);
    for (uint32_t i = 0; i < pool->nservers; i++)
        conf__server_free(&pool->servers[i]);
    free(pool->servers);
}

/* A derived configuration owns its pools array and the server lists it replaced. */
static void conf__derived_free(struct conf *d)
{
    for (uint32_t i = 0; i < d->npools; i++) {
        if (d->pools[i].slot_map != d->base->pools[i].slot_map)
            free(d->pools[i].slot_map);
        if (d->pools[i].servers == d->base->pools[i].servers)
            continue;
        for (uint32_t k = 0; k < d->pools[i].nservers; k++)
            conf__server_free(&d->pools[i].servers[k]);
        free(d->pools[i].servers);
    }
    free(d->pools);
    struct conf *base = d->base;
    free(d);
    conf_free(base);
}

void conf_ref(struct conf *conf)
{
    atomic_fetch_add_explicit(&conf->refs, 1, memory_order_relaxed);
}

struct conf *conf_base(struct conf *conf)
{
    return conf->base != NULL ? conf->base : conf;
}

struct conf *conf_derive(struct conf *base)
{
    base = conf_base(base);
    struct conf *d = malloc(sizeof(*d));
    if (d == NULL)
        return NULL;
    *d = *base;
    d->pools = malloc((base->npools ? base->npools : 1) * sizeof(*d->pools));
    if (d->pools == NULL) {
        free(d);
        return NULL;
    }
    memcpy(d->pools, base->pools, base->npools * sizeof(*d->pools));
    atomic_init(&d->refs, 1);
    d->base = base;
    conf_ref(base);
    return d;
}

void conf_derive_servers(struct conf *d, uint32_t pool, struct conf_server *servers, uint32_t n,
                         uint32_t *slot_map)
{
    struct conf_pool *p = &d->pools[pool];
    if (p->servers != d->base->pools[pool].servers) {
        for (uint32_t k = 0; k < p->nservers; k++)
            conf__server_free(&p->servers[k]);
        free(p->servers);
    }
    if (p->slot_map != d->base->pools[pool].slot_map)
        free(p->slot_map);
    p->servers = servers;
    p->nservers = n;
    p->slot_map = slot_map;
}

int conf_server_init(struct conf_server *s, const char *addr, const char *zone, char *err,
                     size_t errlen)
{
    memset(s, 0, sizeof(*s));
    if (conf_parse_addr(addr, &s->addr, err, errlen) < 0)
        return -1;
    s->weight = 1;
    s->ident = strdup(addr);
    s->label = strdup(addr);
    s->zone = zone != NULL ? strdup(zone) : NULL;
    if (s->ident == NULL || s->label == NULL || (zone != NULL && s->zone == NULL)) {
        conf__server_free(s);
        memset(s, 0, sizeof(*s));
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

void conf_server_free(struct conf_server *s)
{
    conf__server_free(s);
}

const char *conf_zone_match(const struct conf_pool *p, const char *host, uint16_t port)
{
    char hp[300];
    uint32_t net, mask;
    unsigned a, b, c, d;
    char tail;
    int v4 = sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a < 256 && b < 256 &&
             c < 256 && d < 256;
    uint32_t ip = v4 ? (a << 24) | (b << 16) | (c << 8) | d : 0;

    snprintf(hp, sizeof(hp), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    for (uint32_t i = 0; i < p->ncluster_zones; i++) {
        const char *m = p->cluster_zones[i].match;
        if (strcmp(m, hp) == 0 || strcmp(m, host) == 0)
            return p->cluster_zones[i].zone;
        if (v4 && strchr(m, '/') != NULL && conf__ipv4_net(m, &net, &mask) == 0 &&
            (ip & mask) == net)
            return p->cluster_zones[i].zone;
    }
    /* a seed's own zone: the first server line at that address */
    for (uint32_t i = 0; i < p->nservers; i++)
        if (p->servers[i].zone != NULL && p->servers[i].addr.text != NULL &&
            strcmp(p->servers[i].addr.text, hp) == 0)
            return p->servers[i].zone;
    return NULL;
}

void conf_free(struct conf *conf)
{
    if (conf == NULL)
        return;
    if (atomic_fetch_sub_explicit(&conf->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (conf->base != NULL) {
        conf__derived_free(conf);
        return;
    }
    for (uint32_t i = 0; i < conf->npools; i++)
        conf__pool_free(&conf->pools[i]);
    free(conf->pools);
    conf_addr_free(&conf->global.stats_listen);
    conf_addr_free(&conf->global.admin_listen);
    free(conf->global.admin_token);
    free(conf->global.admin_hosts);
    free(conf->global.log_file);
    free(conf->global.zone);
    free(conf->global.rejoin_log);
    free(conf->path);
    free(conf);
}

static int conf__same_server(const struct conf_server *a, const struct conf_server *b)
{
    return strcmp(a->ident, b->ident) == 0 && strcmp(a->addr.text, b->addr.text) == 0;
}

int conf_pool_has_server(const struct conf_pool *p, const struct conf_server *s, uint32_t hint)
{
    if (p == NULL)
        return 0;
    if (hint < p->nservers && conf__same_server(&p->servers[hint], s))
        return 1;   /* the usual case: a reload keeps the order */
    for (uint32_t i = 0; i < p->nservers; i++)
        if (conf__same_server(&p->servers[i], s))
            return 1;
    return 0;
}

const struct conf_pool *conf_pool_find(const struct conf *conf, const char *name)
{
    if (conf == NULL || name == NULL)
        return NULL;
    return conf__pool_by_name(conf, name);
}

/* Report a libyaml parser failure with its mark (libyaml stops at the first). */
static int conf__yaml_error(struct conf_ctx *c, const yaml_parser_t *parser)
{
    const yaml_mark_t *m = &parser->problem_mark;
    const char *problem = parser->problem != NULL ? parser->problem : "cannot be read";

    if (parser->error == YAML_MEMORY_ERROR)
        return conf__fail_file(c, "%s", conf__enomem);
    c->nerrors++;
    if (c->nerrors > CONF_ERRORS_MAX)
        return -1;
    struct conf_error *e = &c->errors[c->nerrors - 1];
    char text[1024];
    if (parser->context != NULL)
        snprintf(text, sizeof(text), "%s:%zu:%zu: YAML syntax error: %s %s (line %zu)", c->file,
                 m->line + 1, m->column + 1, problem, parser->context,
                 parser->context_mark.line + 1);
    else
        snprintf(text, sizeof(text), "%s:%zu:%zu: YAML syntax error: %s", c->file, m->line + 1,
                 m->column + 1, problem);
    e->line = m->line + 1;
    e->col = m->column + 1;
    e->seq = c->nerrors;
    e->text = strdup(text);
    if (e->text == NULL)
        c->errors_oom = 1;
    return -1;
}

/* Walk the loaded document into c->conf, recording every error. 0, or -1 when there was
 * any (the messages are in c->errors). */
static int conf__build(struct conf_ctx *c)
{
    enum { N = RL_ARRAY_SIZE(conf_pool_commands) };
    yaml_node_t *root = yaml_document_get_root_node(&c->doc);
    yaml_node_t *global = NULL;
    yaml_node_pair_t *pair;
    struct conf *conf = c->conf;
    uint32_t npairs, n = 0;
    int *pool_errors = NULL;

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
    if (n == 0 && c->nerrors == 0)
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

int conf_load_buffer(const char *name, const char *text, size_t len, struct conf **out,
                     char *err, size_t errlen)
{
    struct conf_ctx c;
    yaml_parser_t parser;
    yaml_document_t extra;
    char dummy[1];
    int rc = -1;

    memset(&c, 0, sizeof(c));
    c.file = name != NULL ? name : "(config)";
    c.err = err != NULL && errlen > 0 ? err : dummy;
    c.errlen = err != NULL && errlen > 0 ? errlen : sizeof(dummy);
    c.err[0] = '\0';
    *out = NULL;

    if (!yaml_parser_initialize(&parser)) {
        snprintf(c.err, c.errlen, "%s: %s", c.file, conf__enomem);
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &c.doc)) {
        conf__yaml_error(&c, &parser);
        goto out_parser;
    }
    /* One document only, as nutcracker: a second would be silently ignored. */
    if (yaml_document_get_root_node(&c.doc) != NULL) {
        if (!yaml_parser_load(&parser, &extra)) {
            conf__yaml_error(&c, &parser);
            goto out_doc;
        }
        yaml_node_t *r2 = yaml_document_get_root_node(&extra);
        if (r2 != NULL) {
            conf__fail(&c, r2, NULL, "a second YAML document ('---'): put every pool in one");
            yaml_document_delete(&extra);
            goto out_doc;
        }
        yaml_document_delete(&extra);
    }

    c.conf = calloc(1, sizeof(*c.conf));
    if (c.conf != NULL)
        atomic_init(&c.conf->refs, 1);
    if (c.conf == NULL || (c.conf->path = strdup(c.file)) == NULL) {
        conf__fail_file(&c, "%s", conf__enomem);
        goto out_conf;
    }
    if (conf__build(&c) < 0)
        goto out_conf;
    *out = c.conf;
    c.conf = NULL;
    rc = 0;

out_conf:
    conf_free(c.conf);
    free(c.pool_nodes);
    free(c.pool_name_nodes);
out_doc:
    yaml_document_delete(&c.doc);
out_parser:
    yaml_parser_delete(&parser);
    if (rc != 0)
        conf__report(&c);
    return rc;
}

int conf_load(const char *path, struct conf **out, char *err, size_t errlen)
{
    FILE *f;
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc;

    *out = NULL;
    f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        if (cap - len < 4096) {
            size_t ncap = cap ? cap * 2 : 16384;
            char *p = ncap > cap ? realloc(text, ncap) : NULL;
            if (p == NULL) {
                snprintf(err, errlen, "%s: %s", path, conf__enomem);
                rc = -1;
                goto out;
            }
            text = p;
            cap = ncap;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        rc = -1;
        goto out;
    }
    rc = conf_load_buffer(path, text, len, out, err, errlen);
out:
    free(text);
    fclose(f);
    return rc;
}
