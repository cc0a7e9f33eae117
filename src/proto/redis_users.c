/* Redis and users: each command's categories and ACL name, namespaces added to requests and taken off replies (docs/security.md). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "lib/buf.h"
#include "proto/glob.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "proto/redis_int.h"

/* ------------------------------------------------------------------ categories */

/*
 * A command's categories: read or write from the table's flags, then what the name adds.
 * A command runs when every category it is in is granted (KEYS is read and dangerous: a
 * user needs both). The lists name the table's entries ("NAME" or "NAME|SUB").
 */
static const char *const cat_connection[] = {   /* none: every user may run them */
    "ACL|HELP", "ACL|WHOAMI", "ASKING", "AUTH", "CLIENT|CACHING", "CLIENT|GETNAME",
    "CLIENT|GETREDIR", "CLIENT|HELP", "CLIENT|ID", "CLIENT|INFO", "CLIENT|NO-TOUCH",
    "CLIENT|REPLY", "CLIENT|SETINFO", "CLIENT|SETNAME", "CLIENT|TRACKING",
    "CLIENT|TRACKINGINFO", "CLUSTER|INFO", "CLUSTER|KEYSLOT", "CLUSTER|MYID", "CLUSTER|NODES",
    "CLUSTER|SHARDS", "CLUSTER|SLOTS", "COMMAND", "COMMAND|COUNT", "COMMAND|DOCS",
    "COMMAND|GETKEYS", "COMMAND|GETKEYSANDFLAGS", "COMMAND|HELP", "COMMAND|INFO",
    "COMMAND|LIST", "ECHO", "HELLO", "LOLWUT", "PING", "QUIT", "READONLY", "READWRITE",
    "RESET", "SELECT", "TIME", NULL
};
static const char *const cat_transactions[] = {
    "DISCARD", "EXEC", "MULTI", "UNWATCH", "WATCH", NULL
};
static const char *const cat_pubsub[] = {
    "PSUBSCRIBE", "PUBLISH", "PUBSUB", "PUBSUB|CHANNELS", "PUBSUB|HELP", "PUBSUB|NUMPAT",
    "PUBSUB|NUMSUB", "PUBSUB|SHARDCHANNELS", "PUBSUB|SHARDNUMSUB", "PUNSUBSCRIBE",
    "SPUBLISH", "SSUBSCRIBE", "SUBSCRIBE", "SUNSUBSCRIBE", "UNSUBSCRIBE", NULL
};
static const char *const cat_scripts[] = {      /* besides the table's script flag */
    "FUNCTION", "FUNCTION|DELETE", "FUNCTION|DUMP", "FUNCTION|FLUSH", "FUNCTION|HELP",
    "FUNCTION|KILL", "FUNCTION|LIST", "FUNCTION|LOAD", "FUNCTION|RESTORE", "FUNCTION|STATS",
    "SCRIPT", "SCRIPT|DEBUG", "SCRIPT|EXISTS", "SCRIPT|FLUSH", "SCRIPT|HELP", "SCRIPT|KILL",
    "SCRIPT|LOAD", NULL
};
static const char *const cat_blocking[] = {     /* besides the table's blocking sessions */
    "WAIT", "XREAD", "XREADGROUP", NULL
};
static const char *const cat_dangerous[] = {
    "ACL", "ACL|CAT", "ACL|DELUSER", "ACL|DRYRUN", "ACL|GENPASS", "ACL|GETUSER", "ACL|LIST",
    "ACL|LOAD", "ACL|LOG", "ACL|SAVE", "ACL|SETUSER", "ACL|USERS", "BGREWRITEAOF", "BGSAVE",
    "CLIENT|KILL", "CLIENT|LIST", "CLIENT|NO-EVICT", "CLIENT|PAUSE", "CLIENT|UNBLOCK",
    "CLIENT|UNPAUSE", "CONFIG", "CONFIG|GET", "CONFIG|HELP", "CONFIG|RESETSTAT",
    "CONFIG|REWRITE", "CONFIG|SET", "DEBUG", "FAILOVER", "FLUSHALL", "FLUSHDB",
    "FUNCTION|FLUSH", "FUNCTION|RESTORE", "KEYS", "LASTSAVE", "MIGRATE", "MODULE",
    "MODULE|HELP", "MODULE|LIST", "MODULE|LOAD", "MODULE|LOADEX", "MODULE|UNLOAD", "MONITOR",
    "PFDEBUG", "PFSELFTEST", "PSYNC", "REPLCONF", "REPLICAOF", "RESTORE", "RESTORE-ASKING",
    "ROLE", "SAVE", "SCRIPT|FLUSH", "SHUTDOWN", "SLAVEOF", "SORT", "SWAPDB", "SYNC", NULL
};
static const char *const cat_admin[] = {        /* server administration, not dangerous */
    "CLIENT", "CLUSTER", "INFO", "LATENCY", "LATENCY|DOCTOR", "LATENCY|GRAPH", "LATENCY|HELP",
    "LATENCY|HISTOGRAM", "LATENCY|HISTORY", "LATENCY|LATEST", "LATENCY|RESET", "MEMORY",
    "MEMORY|DOCTOR", "MEMORY|HELP", "MEMORY|MALLOC-STATS", "MEMORY|PURGE", "MEMORY|STATS",
    "SLOWLOG", "SLOWLOG|GET", "SLOWLOG|HELP", "SLOWLOG|LEN", "SLOWLOG|RESET", NULL
};

static int in_list(const char *const *list, const char *name)
{
    for (; *list != NULL; list++)
        if (strcmp(*list, name) == 0)
            return 1;
    return 0;
}

/* The categories of table entry c (by name; its routing variants are read as the command
 * they refine). */
static uint32_t cat_of(const struct redis_command *c)
{
    char name[64];
    size_t n = strlen(c->name);
    if (n >= sizeof(name))
        n = sizeof(name) - 1;
    memcpy(name, c->name, n);
    name[n] = '\0';
    if (c->flags & REDIS_CMD_INTERNAL) {
        char *bar = strchr(name, '|');
        if (bar != NULL)
            *bar = '\0';
    }
    if (in_list(cat_connection, name))
        return 0;
    uint32_t cat = 0;
    if (c->flags & REDIS_CMD_READ)
        cat |= CONF_CAT_READ;
    if (c->flags & REDIS_CMD_WRITE)
        cat |= CONF_CAT_WRITE;
    if (in_list(cat_transactions, name))
        cat |= CONF_CAT_TRANSACTIONS;
    if (in_list(cat_pubsub, name))
        cat |= CONF_CAT_PUBSUB;
    if ((c->flags & REDIS_CMD_SCRIPT) || in_list(cat_scripts, name))
        cat |= CONF_CAT_SCRIPTS;
    enum redis_session s = REDIS_CMD_SESSION(c);
    if (s == REDIS_SESS_BLOCK_LAST || s == REDIS_SESS_BLOCK_FIRST || in_list(cat_blocking, name))
        cat |= CONF_CAT_BLOCKING;
    if (in_list(cat_dangerous, name))
        cat |= CONF_CAT_DANGEROUS;
    if (in_list(cat_admin, name))
        cat |= CONF_CAT_ADMIN;
    if (cat == 0)
        cat = CONF_CAT_ADMIN;   /* anything else the table knows: administration */
    if (strcmp(name, "SORT") == 0 || strcmp(name, "KEYS") == 0 || strcmp(name, "FLUSHALL") == 0 ||
        strcmp(name, "FLUSHDB") == 0 || strcmp(name, "SWAPDB") == 0 ||
        strcmp(name, "RESTORE") == 0 || strcmp(name, "MIGRATE") == 0)
        return cat;             /* data commands that are also dangerous */
    if (cat & CONF_CAT_DANGEROUS)
        cat |= CONF_CAT_ADMIN;  /* the rest of the dangerous ones administer the server */
    return cat;
}

/* What a namespace does to a command's request (ns_request) ... */
#define RQ_PATTERN_KEYS 0x01u   /* its keys are patterns (PSUBSCRIBE) */
#define RQ_KEYS         0x02u   /* KEYS: argument 1 is a pattern */
#define RQ_SCAN         0x04u   /* SCAN: MATCH's pattern (added when absent) */
#define RQ_SORT         0x08u   /* SORT: BY and GET patterns refused */
#define RQ_LISTS        0x10u   /* PUBSUB CHANNELS ...: every tenant's names, refused */

/* ... and to its reply (ns_reply). */
enum ns_shape { NS_NONE, NS_NAMES, NS_SCAN, NS_ONE, NS_FIRST, NS_PUSH, NS_STREAMS };

struct cmd_users {
    uint8_t cat;                /* CONF_CAT_* */
    uint8_t req;                /* RQ_* */
    uint8_t shape;              /* enum ns_shape */
};

static int name_in(const char *n, const char *const *list)
{
    return in_list(list, n);
}

static struct cmd_users users_of_cmd(const struct redis_command *c)
{
    static const char *const firsts[] = { "BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX", "BLMPOP",
                                          "LMPOP", "BZMPOP", "ZMPOP", NULL };
    static const char *const lists[] = { "PUBSUB|CHANNELS", "PUBSUB|NUMSUB", "PUBSUB|NUMPAT",
                                         "PUBSUB|SHARDCHANNELS", "PUBSUB|SHARDNUMSUB", NULL };
    struct cmd_users u = { .cat = (uint8_t)cat_of(c) };
    const char *n = c->name;
    if (strcmp(n, "PSUBSCRIBE") == 0 || strcmp(n, "PUNSUBSCRIBE") == 0)
        u.req |= RQ_PATTERN_KEYS;
    if (strcmp(n, "KEYS") == 0)
        u.req |= RQ_KEYS;
    if (strcmp(n, "SCAN") == 0)
        u.req |= RQ_SCAN;
    if (strcmp(n, "SORT") == 0 || strcmp(n, "SORT_RO") == 0)
        u.req |= RQ_SORT;
    if (name_in(n, lists))
        u.req |= RQ_LISTS;
    if (strcmp(n, "KEYS") == 0)
        u.shape = NS_NAMES;
    else if (strcmp(n, "SCAN") == 0)
        u.shape = NS_SCAN;
    else if (strcmp(n, "RANDOMKEY") == 0)
        u.shape = NS_ONE;
    else if (name_in(n, firsts))
        u.shape = NS_FIRST;
    else if (strcmp(n, "XREAD") == 0 || strcmp(n, "XREADGROUP") == 0)
        u.shape = NS_STREAMS;
    else if (REDIS_CMD_SUB_OF(c->flags) != 0)
        u.shape = NS_PUSH;      /* (un)subscriptions: their confirmations */
    return u;
}

static _Atomic(struct cmd_users *) cmd_table;  /* built once: [redis_ncommands] (never
                                                  * freed: the process's, like the table) */

static void cmd_table_build(void)
{
    struct cmd_users *t = calloc(redis_ncommands, sizeof(*t));
    if (t == NULL)
        return;
    for (size_t i = 0; i < redis_ncommands; i++)
        t[i] = users_of_cmd(&redis_commands[i]);
    atomic_store_explicit(&cmd_table, t, memory_order_release);
}

static pthread_once_t cmd_once = PTHREAD_ONCE_INIT;

/* What users know of command cmd (< redis_ncommands). */
static struct cmd_users cmd_users(uint16_t cmd)
{
    struct cmd_users *t = atomic_load_explicit(&cmd_table, memory_order_acquire);
    if (__builtin_expect(t == NULL, 0)) {
        pthread_once(&cmd_once, cmd_table_build);
        t = atomic_load_explicit(&cmd_table, memory_order_acquire);
        if (t == NULL)
            return users_of_cmd(&redis_commands[cmd]);
    }
    return t[cmd];
}

uint32_t redis__category(uint16_t cmd)
{
    if (cmd >= redis_ncommands)
        return CONF_CAT_ALL;
    return cmd_users(cmd).cat;
}

void redis__perm_name(uint16_t cmd, char *out, size_t len)
{
    if (len == 0)
        return;
    if (cmd >= redis_ncommands) {
        snprintf(out, len, "unknown");
        return;
    }
    const struct redis_command *c = &redis_commands[cmd];
    size_t i = 0;
    for (; c->name[i] != '\0' && i + 1 < len; i++) {
        char ch = c->name[i];
        if (ch == '|' && (c->flags & REDIS_CMD_INTERNAL))
            break;
        out[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
    }
    out[i] = '\0';
}

/* Redis 7.0's texts (server.c's ACL refusals, as redis-server 7.0.15 sends them). */
size_t redis__perm_error(int what, const char *name, char *out, size_t len)
{
    int n;
    if (what == PROTO_PERM_CMD)
        n = snprintf(out, len, "-NOPERM this user has no permissions to run the '%s' command\r\n",
                     name);
    else
        n = snprintf(out, len, "-NOPERM this user has no permissions to access one of the %s "
                     "used as arguments\r\n", what == PROTO_PERM_KEY ? "keys" : "channels");
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

/* ------------------------------------------------------------------ requests */

/* "<t><n>\r\n" (a bulk or array header) without printf: every argument of every namespaced
 * request passes here. */
static int append_header(struct buf *out, char t, uint64_t n)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    tmp[--i] = '\n';
    tmp[--i] = '\r';
    do {
        tmp[--i] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    tmp[--i] = t;
    return buf_append(out, tmp + i, sizeof(tmp) - i);
}

static int bulk_prefixed(struct buf *out, const char *pfx, size_t pl, const char *s, size_t n)
{
    if (buf_reserve(out, pl + n + 24) < 0 || append_header(out, '$', pl + n) < 0 ||
        buf_append(out, pfx, pl) < 0 || buf_append(out, s, n) < 0 ||
        buf_append(out, "\r\n", 2) < 0)
        return -ENOMEM;
    return 0;
}

/* The next argument of a whole RESP request at src[*at]: its data's offset and length. */
static int next_arg(const char *src, size_t len, size_t *at, size_t *off, size_t *n)
{
    size_t i = *at;
    if (i >= len || src[i] != '$')
        return -1;
    const char *nl = memchr(src + i, '\n', len - i);
    if (nl == NULL)
        return -1;
    int64_t v;
    size_t eol = (size_t)(nl - src);
    if (eol < i + 2 || redis__parse_num(src + i + 1, eol - 1 - (i + 1), &v) < 0 || v < 0)
        return -1;
    *off = eol + 1;
    *n = (size_t)v;
    if (*off + *n + 2 > len)
        return -1;
    *at = *off + *n + 2;
    return 0;
}

int redis__ns_request(const struct proto_req *req, const char *buf, const struct proto_ns *ns,
                      struct buf *out, const char **why)
{
    const char *src;
    size_t len, base;

    if (req->u.redis.inl != NULL) {
        src = req->u.redis.inl;
        len = req->u.redis.inl_len;
        base = 0;               /* keys[] are offsets into the re-encoding */
    } else {
        src = buf;
        len = (size_t)req->hdr_len + (size_t)req->body_len;
        base = req->u.redis.start;
    }
    size_t at = base;
    if (at >= len || src[at] != '*')
        return -1;
    const char *nl = memchr(src + at, '\n', len - at);
    if (nl == NULL)
        return -1;
    at = (size_t)(nl - src) + 1;
    uint32_t argc = req->u.redis.argc;
    uint8_t rq = req->cmd < redis_ncommands ? cmd_users(req->cmd).req : 0;
    int pattern_keys = (rq & RQ_PATTERN_KEYS) != 0;
    int keys_cmd = (rq & RQ_KEYS) != 0;
    int scan = (rq & RQ_SCAN) != 0;
    int sort = (rq & RQ_SORT) != 0;
    int keyed = req->kind != PROTO_REQ_LOCAL && req->kind != PROTO_REQ_ERROR &&
                !(req->flags & PROTO_RF_NOKEY);
    if (rq & RQ_LISTS) {
        *why = "-ERR PUBSUB lists every tenant's channels: not for a user with a namespace\r\n";
        return -1;
    }
    char esc[2 * 128 + 2];
    size_t el = glob_escape(ns->prefix, ns->len < 128 ? ns->len : 128, esc);
    int scan_match = 0;
    uint32_t k = 0;

    if (append_header(out, '*', argc + (scan ? 2u : 0u)) < 0)
        return -ENOMEM;
    for (uint32_t i = 0; i < argc; i++) {
        size_t off, n;
        if (next_arg(src, len, &at, &off, &n) < 0)
            return -1;
        const char *d = src + off;
        int is_key = 0;
        if (keyed) {
            /* keys[] come in argument order for every command of the table; look on
             * from the last one found, then from the start (a table that lists a key
             * twice, or out of order, is still read right) */
            for (uint32_t tries = 0; tries < req->nkeys && !is_key; tries++, k++) {
                if (k >= req->nkeys)
                    k = 0;
                if (req->keys[k].off == off && req->keys[k].len == n)
                    is_key = 1;
                else if (req->keys[k].off > off)
                    break;
            }
        }
        int rc;
        if (sort && i >= 2 && (redis__word_is(d, n, "BY") || redis__word_is(d, n, "GET"))) {
            *why = "-ERR SORT's BY and GET patterns name other keys: not for a user with a "
                   "namespace\r\n";
            return -1;
        }
        if (keys_cmd && i == 1)
            rc = bulk_prefixed(out, esc, el, d, n);
        else if (scan && i >= 2 && (i % 2) == 0 && redis__word_is(d, n, "MATCH") && i + 1 < argc) {
            rc = bulk_prefixed(out, "", 0, d, n);
            size_t off2, n2;
            if (rc == 0 && next_arg(src, len, &at, &off2, &n2) < 0)
                return -1;
            if (rc == 0)
                rc = bulk_prefixed(out, esc, el, src + off2, n2);
            i++;
            scan_match = 1;
        } else if (is_key && pattern_keys)
            rc = bulk_prefixed(out, esc, el, d, n);
        else if (is_key)
            rc = bulk_prefixed(out, ns->prefix, ns->len, d, n);
        else
            rc = bulk_prefixed(out, "", 0, d, n);
        if (rc < 0)
            return rc;
    }
    if (scan) {
        /* a scan without MATCH lists the namespace: MATCH <prefix>* (one with MATCH
         * gets an argument count two too high: rewrite the header) */
        if (!scan_match) {
            if (bulk_prefixed(out, "", 0, "MATCH", 5) < 0 ||
                bulk_prefixed(out, esc, el, "*", 1) < 0)
                return -ENOMEM;
        } else {
            /* rebuild with the right count: the body after the header line stays */
            const char *o = buf_rptr(out);
            const char *e = memchr(o, '\n', buf_len(out));
            if (e == NULL)
                return -1;
            size_t hl = (size_t)(e - o) + 1;
            char hdr[32];
            int m = snprintf(hdr, sizeof(hdr), "*%" PRIu32 "\r\n", argc);
            struct buf tmp = { 0 };
            if (buf_append(&tmp, hdr, (size_t)m) < 0 ||
                buf_append(&tmp, o + hl, buf_len(out) - hl) < 0) {
                buf_free(&tmp);
                return -ENOMEM;
            }
            buf_swap(&tmp, out);
            buf_free(&tmp);
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ replies */

#define RV_DEPTH 16

/* The end of the RESP value at b[pos] (all of it in b[0..len)): 0 with *end, -1 malformed. */
static int rv_end(const char *b, size_t len, size_t pos, int depth, size_t *end)
{
    if (pos >= len || depth > RV_DEPTH)
        return -1;
    const char *nl = memchr(b + pos, '\n', len - pos);
    if (nl == NULL)
        return -1;
    size_t eol = (size_t)(nl - b);
    size_t next = eol + 1;
    char t = b[pos];
    int64_t n = 0;
    switch (t) {
    case '+': case '-': case ':': case '_': case ',': case '#': case '(':
        *end = next;
        return 0;
    case '$': case '=': case '!':
        if (eol < pos + 2 || redis__parse_num(b + pos + 1, eol - 1 - (pos + 1), &n) < 0)
            return -1;
        if (n < 0) {
            *end = next;
            return 0;
        }
        if (next + (size_t)n + 2 > len)
            return -1;
        *end = next + (size_t)n + 2;
        return 0;
    case '*': case '>': case '~': case '%': case '|':
        if (eol < pos + 2 || redis__parse_num(b + pos + 1, eol - 1 - (pos + 1), &n) < 0)
            return -1;
        if (n < 0) {
            *end = next;
            return 0;
        }
        if (t == '%' || t == '|')
            n *= 2;
        for (int64_t i = 0; i < n; i++)
            if (rv_end(b, len, next, depth + 1, &next) < 0)
                return -1;
        *end = next;
        return 0;
    default:
        return -1;
    }
}

/* The bulk string at b[pos]: its bytes; -1 when it is not one. */
static int rv_bulk(const char *b, size_t len, size_t pos, const char **s, size_t *n, size_t *end)
{
    if (pos >= len || (b[pos] != '$' && b[pos] != '+'))
        return -1;
    if (rv_end(b, len, pos, 0, end) < 0)
        return -1;
    const char *nl = memchr(b + pos, '\n', len - pos);
    if (b[pos] == '+') {
        *s = b + pos + 1;
        *n = (size_t)(nl - b) - 1 - (pos + 1);
        return 0;
    }
    int64_t v;
    if (redis__parse_num(b + pos + 1, (size_t)(nl - b) - 1 - (pos + 1), &v) < 0 || v < 0)
        return -1;
    *s = nl + 1;
    *n = (size_t)v;
    return 0;
}

static int has_prefix(const struct proto_ns *ns, const char *s, size_t n)
{
    return n >= ns->len && memcmp(s, ns->prefix, ns->len) == 0;
}

static int name_visible(const struct proto_ns *ns, const char *s, size_t n)
{
    if (ns->len > 0 && !has_prefix(ns, s, n))
        return 0;
    return ns->visible == NULL || ns->visible(ns->arg, s, n);
}

/* The value at b[pos], a name: written without the prefix (a name outside it as it is). */
static int put_name(const char *b, size_t len, size_t pos, size_t *end, const struct proto_ns *ns,
                    struct buf *out)
{
    const char *s;
    size_t n;
    if (rv_bulk(b, len, pos, &s, &n, end) < 0) {
        if (rv_end(b, len, pos, 0, end) < 0)
            return -1;
        return buf_append(out, b + pos, *end - pos) < 0 ? -ENOMEM : 0;
    }
    if (has_prefix(ns, s, n)) {
        s += ns->len;
        n -= ns->len;
    }
    return redis__append_bulk(out, s, n) < 0 ? -ENOMEM : 0;
}

/* An array of names at b[pos]: those visible, without the prefix. */
static int put_names(const char *b, size_t len, size_t pos, size_t *end,
                     const struct proto_ns *ns, struct buf *out)
{
    if (pos >= len || (b[pos] != '*' && b[pos] != '~'))
        return -1;
    const char *nl = memchr(b + pos, '\n', len - pos);
    int64_t n;
    if (nl == NULL || redis__parse_num(b + pos + 1, (size_t)(nl - b) - 1 - (pos + 1), &n) < 0)
        return -1;
    size_t at = (size_t)(nl - b) + 1;
    if (n < 0) {
        *end = at;
        return buf_append(out, b + pos, at - pos) < 0 ? -ENOMEM : 0;
    }
    struct buf items = { 0 };
    int64_t kept = 0;
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        const char *s;
        size_t sl, e;
        if (rv_bulk(b, len, at, &s, &sl, &e) < 0) {
            rc = -1;
            break;
        }
        at = e;
        if (!name_visible(ns, s, sl))
            continue;
        if (redis__append_bulk(&items, s + ns->len, sl - ns->len) < 0)
            rc = -ENOMEM;
        kept++;
    }
    if (rc == 0 && (buf_appendf(out, "%c%" PRId64 "\r\n", b[pos], kept) < 0 ||
                    buf_append(out, buf_rptr(&items), buf_len(&items)) < 0))
        rc = -ENOMEM;
    buf_free(&items);
    *end = at;
    return rc;
}

/* One pub/sub unit (a message, a confirmation) at b[pos]: the names it carries without
 * the prefix; any other value as it is. */
static int put_push(const char *b, size_t len, size_t pos, size_t *end, const struct proto_ns *ns,
                    struct buf *out)
{
    if (rv_end(b, len, pos, 0, end) < 0)
        return -1;
    if (b[pos] != '*' && b[pos] != '>')
        return buf_append(out, b + pos, *end - pos) < 0 ? -ENOMEM : 0;
    const char *nl = memchr(b + pos, '\n', len - pos);
    int64_t n;
    if (redis__parse_num(b + pos + 1, (size_t)(nl - b) - 1 - (pos + 1), &n) < 0 || n < 2)
        return buf_append(out, b + pos, *end - pos) < 0 ? -ENOMEM : 0;
    size_t at = (size_t)(nl - b) + 1, e;
    const char *kind;
    size_t kl;
    if (rv_bulk(b, len, at, &kind, &kl, &e) < 0)
        return buf_append(out, b + pos, *end - pos) < 0 ? -ENOMEM : 0;
    int names;          /* how many elements after the kind are names */
    if (redis__word_is(kind, kl, "pmessage"))
        names = 2;
    else if (redis__word_is(kind, kl, "message") || redis__word_is(kind, kl, "smessage") ||
             redis__word_is(kind, kl, "subscribe") || redis__word_is(kind, kl, "unsubscribe") ||
             redis__word_is(kind, kl, "psubscribe") || redis__word_is(kind, kl, "punsubscribe") ||
             redis__word_is(kind, kl, "ssubscribe") || redis__word_is(kind, kl, "sunsubscribe"))
        names = 1;
    else
        return buf_append(out, b + pos, *end - pos) < 0 ? -ENOMEM : 0;
    if (buf_append(out, b + pos, e - pos) < 0)      /* header and kind */
        return -ENOMEM;
    at = e;
    for (int64_t i = 1; i < n; i++) {
        int rc;
        if (i <= names && b[at] == '$') {
            /* a pattern carries the escaped prefix: take off whichever it has */
            const char *s;
            size_t sl, e2;
            if (rv_bulk(b, len, at, &s, &sl, &e2) < 0)
                return -1;
            char esc[2 * 128 + 2];
            size_t el = glob_escape(ns->prefix, ns->len < 128 ? ns->len : 128, esc);
            int pat = redis__word_is(kind, kl, "pmessage") ? i == 1 :
                      (redis__word_is(kind, kl, "psubscribe") ||
                       redis__word_is(kind, kl, "punsubscribe"));
            if (pat && sl >= el && memcmp(s, esc, el) == 0)
                rc = redis__append_bulk(out, s + el, sl - el) < 0 ? -ENOMEM : 0;
            else
                rc = put_name(b, len, at, &e2, ns, out);
            at = e2;
        } else {
            size_t e2;
            if (rv_end(b, len, at, 0, &e2) < 0)
                return -1;
            rc = buf_append(out, b + at, e2 - at) < 0 ? -ENOMEM : 0;
            at = e2;
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

static enum ns_shape ns_shape_of(uint16_t cmd)
{
    if (cmd == PROTO_NS_PUSH || cmd == PROTO_NS_PUSH_ANY)
        return NS_PUSH;
    if (cmd >= redis_ncommands)
        return NS_NONE;
    return (enum ns_shape)cmd_users(cmd).shape;
}

int redis__ns_reply_cmd(uint16_t cmd)
{
    return ns_shape_of(cmd) != NS_NONE;
}

int redis__ns_reply(uint16_t cmd, const char *b, size_t len, const struct proto_ns *ns,
                    struct buf *out)
{
    enum ns_shape sh = ns_shape_of(cmd);
    size_t end = 0;
    int rc;

    if (sh == NS_NONE || len == 0 || b[0] == '-')
        return 0;
    switch (sh) {
    case NS_NAMES:
        rc = put_names(b, len, 0, &end, ns, out);
        break;
    case NS_SCAN: {
        if (b[0] != '*')
            return 0;
        const char *nl = memchr(b, '\n', len);
        size_t e;
        if (nl == NULL || rv_end(b, len, (size_t)(nl - b) + 1, 0, &e) < 0)
            return -1;
        if (buf_append(out, b, e) < 0)      /* the header and the cursor */
            return -ENOMEM;
        rc = put_names(b, len, e, &end, ns, out);
        break;
    }
    case NS_ONE: {
        const char *s;
        size_t n;
        if (rv_bulk(b, len, 0, &s, &n, &end) < 0)
            return 0;           /* a null: as it is */
        if (!name_visible(ns, s, n))
            rc = buf_append_str(out, "$-1\r\n") < 0 ? -ENOMEM : 0;
        else
            rc = redis__append_bulk(out, s + ns->len, n - ns->len) < 0 ? -ENOMEM : 0;
        break;
    }
    case NS_FIRST: {
        if (b[0] != '*')
            return 0;
        const char *nl = memchr(b, '\n', len);
        int64_t n;
        if (nl == NULL || redis__parse_num(b + 1, (size_t)(nl - b) - 2, &n) < 0 || n < 1)
            return 0;
        size_t at = (size_t)(nl - b) + 1;
        if (buf_append(out, b, at) < 0)
            return -ENOMEM;
        rc = put_name(b, len, at, &end, ns, out);
        if (rc == 0 && buf_append(out, b + end, len - end) < 0)
            rc = -ENOMEM;
        end = len;
        break;
    }
    case NS_STREAMS: {
        /* XREAD: RESP2 an array of [key, entries] pairs, RESP3 a map key -> entries */
        if (b[0] != '*' && b[0] != '%')
            return 0;
        const char *nl = memchr(b, '\n', len);
        int64_t n;
        if (nl == NULL || redis__parse_num(b + 1, (size_t)(nl - b) - 2, &n) < 0 || n < 0)
            return 0;
        size_t at = (size_t)(nl - b) + 1, e;
        if (buf_append(out, b, at) < 0)
            return -ENOMEM;
        rc = 0;
        for (int64_t i = 0; i < n && rc == 0; i++) {
            if (b[0] == '*') {
                const char *inl = at < len ? memchr(b + at, '\n', len - at) : NULL;
                if (inl == NULL || b[at] != '*') {
                    rc = -1;
                    break;
                }
                size_t hdr = (size_t)(inl - b) + 1;
                if (buf_append(out, b + at, hdr - at) < 0)
                    return -ENOMEM;
                at = hdr;
            }
            rc = put_name(b, len, at, &e, ns, out);          /* the stream's key */
            if (rc == 0 && rv_end(b, len, e, 0, &at) < 0)    /* its entries, as they are */
                rc = -1;
            if (rc == 0 && buf_append(out, b + e, at - e) < 0)
                rc = -ENOMEM;
        }
        end = at;
        break;
    }
    case NS_PUSH:
    default: {
        /* every unit of the buffer (a flood of messages is one buffer) */
        size_t at = 0;
        rc = 0;
        while (at < len && rc == 0) {
            rc = put_push(b, len, at, &end, ns, out);
            at = end;
        }
        end = at;
        break;
    }
    }
    if (rc < 0)
        return rc;
    if (end < len && buf_append(out, b + end, len - end) < 0)
        return -ENOMEM;
    return 1;
}
