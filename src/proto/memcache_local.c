/* memcached commands the proxy answers itself (stats, mn, verbosity, quit), and version and `stats <sub>` merged over the servers. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache.h"
#include "proto/memcache_int.h"
#include "proto/proto.h"

#define LOCAL_ERROR "ERROR\r\n"

/* The numbers render_stats gave, in a growing array: a fixed one would drop the last
 * silently once the core gives more. `nomem`: one could not be kept (the reply fails). */
struct local_stats {
    const char **name;
    int64_t     *value;
    unsigned     n, cap;
    int          nomem;
};

static void local_stats_collect(void *arg, const char *name, int64_t value)
{
    struct local_stats *ls = arg;
    if (ls->nomem)
        return;
    if (ls->n == ls->cap) {
        unsigned cap = ls->cap ? 2 * ls->cap : 128;
        const char **nm = realloc(ls->name, cap * sizeof(*nm));
        if (nm != NULL)
            ls->name = nm;
        int64_t *v = nm != NULL ? realloc(ls->value, cap * sizeof(*v)) : NULL;
        if (v == NULL) {
            ls->nomem = 1;
            return;
        }
        ls->value = v;
        ls->cap = cap;
    }
    ls->name[ls->n] = name;
    ls->value[ls->n] = value;
    ls->n++;
}

/* The value of a number render_stats gave, or -1 (and *found 0) when it gave none. */
static int64_t local_stats_get(const struct local_stats *ls, const char *name, int *found)
{
    for (unsigned i = 0; i < ls->n; i++)
        if (strcmp(ls->name[i], name) == 0) {
            *found = 1;
            return ls->value[i];
        }
    *found = 0;
    return -1;
}

static int stat_line(struct buf *out, const char *name, int64_t v)
{
    return buf_appendf(out, "STAT %s %" PRId64 "\r\n", name, v);
}

/* Seconds with microseconds, as memcached prints rusage: "0.123456". */
static int stat_seconds(struct buf *out, const char *name, int64_t us)
{
    return buf_appendf(out, "STAT %s %" PRId64 ".%06" PRId64 "\r\n", name, us / 1000000,
                       us % 1000000);
}

static size_t line_at(const char *s, size_t n, size_t *whole);
static int is_error_line(const char *s, size_t n);
static long version_rank(const char *s, size_t n);

/* Whether a server's `stats` reply answered (it is not an error line). */
static int server_answered(const struct buf *f)
{
    size_t whole, n = line_at(buf_rptr(f), buf_len(f), &whole);
    return whole > 0 && !is_error_line(buf_rptr(f), n);
}

/* The value of "STAT <name> <value>" in one server's `stats` reply; 1 if found. */
static int server_stat(const struct buf *f, const char *name, const char **v, size_t *vlen)
{
    const char *s = buf_rptr(f);
    size_t left = buf_len(f), nl = strlen(name);
    for (;;) {
        size_t whole, n = line_at(s, left, &whole);
        if (whole == 0 || (n == 3 && memcmp(s, "END", 3) == 0))
            return 0;
        if (n > 6 + nl && memcmp(s, "STAT ", 5) == 0 && memcmp(s + 5, name, nl) == 0 &&
            s[5 + nl] == ' ') {
            *v = s + 6 + nl;
            *vlen = n - 6 - nl;
            return 1;
        }
        s += whole;
        left -= whole;
    }
}

/* A numeric field summed over the servers that answered it; 1 if any had it. */
static int servers_sum(struct buf *const *frag, uint32_t nfrag, const char *name, int64_t *out)
{
    int any = 0;
    *out = 0;
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *v;
        size_t vl;
        int64_t x = 0;
        size_t i = 0;
        if (!server_answered(frag[f]) || !server_stat(frag[f], name, &v, &vl) || vl == 0)
            continue;
        for (; i < vl && isdigit((unsigned char)v[i]) && x < INT64_MAX / 10 - 10; i++)
            x = x * 10 + (v[i] - '0');
        if (i != vl)
            continue;                   /* not a counter (or too large): left out */
        *out += x;
        any = 1;
    }
    return any;
}

/* The lowest `version` of the servers that answered (as the `version` command answers). */
static int servers_version(struct buf *const *frag, uint32_t nfrag, const char **best,
                           size_t *best_len)
{
    long best_rank = -1;
    *best = NULL;
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *v;
        size_t vl;
        if (!server_answered(frag[f]) || !server_stat(frag[f], "version", &v, &vl))
            continue;
        long rank = version_rank(v, vl);
        if (*best == NULL || (rank >= 0 && (best_rank < 0 || rank < best_rank))) {
            *best = v;
            *best_len = vl;
            best_rank = rank;
        }
    }
    return *best != NULL;
}

/* INFO commandstats and errorstats as `stats` numbers (docs/introspection.md):
 * cmdstat_<command>_calls, _usec, _rejected_calls, _failed_calls; errorstat_<PREFIX>. */
struct local_cmdstat {
    struct buf *out;
    int         rc;
};

static void local_cmdstat(void *arg, uint16_t cmd, const struct proto_cmdstat *st)
{
    struct local_cmdstat *l = arg;
    const char *name = memcache_cmd_name(cmd);
    if (l->rc < 0 || name == NULL)
        return;
    l->rc = buf_appendf(l->out, "STAT cmdstat_%s_calls %" PRId64 "\r\n"
                        "STAT cmdstat_%s_usec %" PRId64 "\r\n"
                        "STAT cmdstat_%s_rejected_calls %" PRId64 "\r\n"
                        "STAT cmdstat_%s_failed_calls %" PRId64 "\r\n", name, st->calls, name,
                        st->usec, name, st->rejected_calls, name, st->failed_calls);
}

static void local_errstat(void *arg, const char *prefix, int64_t count)
{
    struct local_cmdstat *l = arg;
    if (l->rc == 0)
        l->rc = buf_appendf(l->out, "STAT errorstat_%s %" PRId64 "\r\n", prefix, count);
}

static int local_introspect(const struct proto_env *env, struct buf *out)
{
    struct local_cmdstat l = { out, 0 };
    if (env->cmdstats != NULL)
        env->cmdstats(env->ctx, local_cmdstat, &l);
    if (l.rc == 0 && env->errorstats != NULL)
        env->errorstats(env->ctx, local_errstat, &l);
    return l.rc < 0 ? -ENOMEM : 0;
}

/*
 * `stats`: memcached's general fields in memcached's order, then ringleader's own counters
 * under their stats-port names. `stats` is sent to every server of the pool (frag[0..nfrag),
 * in the pool's order; none when answered without them): what only the servers know
 * (curr_items, bytes, limit_maxbytes, evictions, get_hits, get_misses, cmd_set ...) is
 * their sum, over the servers that answered, as Redis INFO sums used_memory; version is
 * the lowest of theirs, as the `version` command answers. What the client talks to is the
 * proxy's (pid, uptime, connections, threads, rusage): the pool's over every worker and the
 * process's (pool_numbers.c), equal to the stats port's. A field no server answered is
 * left out rather than made up. docs/protocol-memcache.md lists each field's source.
 */
static int local_stats(const struct proto_env *env, struct buf *const *frag, uint32_t nfrag,
                       struct buf *out)
{
    enum { LS_PROXY, LS_SECONDS, LS_SERVERS, LS_VERSION, LS_POINTER };
    /* memcached's name, where it comes from, the proxy's number it is */
    static const struct { const char *mc; int src; const char *ours; } general[] = {
        { "pid", LS_PROXY, "pid" }, { "uptime", LS_PROXY, "uptime" }, { "time", LS_PROXY, "time" },
        { "version", LS_VERSION, NULL }, { "pointer_size", LS_POINTER, NULL },
        { "rusage_user", LS_SECONDS, "rusage_user_us" },
        { "rusage_system", LS_SECONDS, "rusage_system_us" },
        { "curr_connections", LS_PROXY, "curr_connections" },
        { "total_connections", LS_PROXY, "total_connections" },
        { "cmd_get", LS_SERVERS, NULL }, { "cmd_set", LS_SERVERS, NULL },
        { "cmd_flush", LS_SERVERS, NULL }, { "cmd_touch", LS_SERVERS, NULL },
        { "get_hits", LS_SERVERS, NULL }, { "get_misses", LS_SERVERS, NULL },
        { "get_expired", LS_SERVERS, NULL }, { "get_flushed", LS_SERVERS, NULL },
        { "delete_misses", LS_SERVERS, NULL }, { "delete_hits", LS_SERVERS, NULL },
        { "incr_misses", LS_SERVERS, NULL }, { "incr_hits", LS_SERVERS, NULL },
        { "decr_misses", LS_SERVERS, NULL }, { "decr_hits", LS_SERVERS, NULL },
        { "cas_misses", LS_SERVERS, NULL }, { "cas_hits", LS_SERVERS, NULL },
        { "cas_badval", LS_SERVERS, NULL }, { "touch_hits", LS_SERVERS, NULL },
        { "touch_misses", LS_SERVERS, NULL },
        { "bytes_read", LS_SERVERS, NULL }, { "bytes_written", LS_SERVERS, NULL },
        { "limit_maxbytes", LS_SERVERS, NULL }, { "threads", LS_PROXY, "threads" },
        { "bytes", LS_SERVERS, NULL }, { "curr_items", LS_SERVERS, NULL },
        { "total_items", LS_SERVERS, NULL }, { "expired_unfetched", LS_SERVERS, NULL },
        { "evicted_unfetched", LS_SERVERS, NULL }, { "evicted_active", LS_SERVERS, NULL },
        { "evictions", LS_SERVERS, NULL }, { "reclaimed", LS_SERVERS, NULL },
    };
    struct local_stats ls;
    uint32_t answered = 0;
    int rc = 0, found;
    int64_t v;

    memset(&ls, 0, sizeof(ls));
    if (env != NULL && env->render_stats != NULL)
        env->render_stats(env->ctx, local_stats_collect, &ls);
    if (ls.nomem) {
        rc = -ENOMEM;                   /* a field would be missing: no reply rather */
        goto out;
    }
    for (uint32_t f = 0; f < nfrag; f++)
        answered += server_answered(frag[f]);
    for (size_t i = 0; rc == 0 && i < sizeof(general) / sizeof(general[0]); i++) {
        const char *mc = general[i].mc;
        switch (general[i].src) {
        case LS_VERSION: {
            const char *sv;
            size_t svl;
            if (servers_version(frag, nfrag, &sv, &svl)) {
                rc = buf_appendf(out, "STAT version %.*s\r\n", (int)svl, sv);
            } else if (env != NULL) {   /* no server answered: the proxy's, as before */
                const char *pv = env->version ? env->version : "";
                rc = buf_appendf(out, "STAT version %s\r\n",
                                 isdigit((unsigned char)pv[0]) ? pv : "0.0.0");
            }
            break;
        }
        case LS_POINTER:
            rc = stat_line(out, mc, (int64_t)(8 * sizeof(void *)));
            break;
        case LS_SERVERS:
            if (servers_sum(frag, nfrag, mc, &v))
                rc = stat_line(out, mc, v);
            break;
        default:
            v = local_stats_get(&ls, general[i].ours, &found);
            if (found)
                rc = general[i].src == LS_SECONDS ? stat_seconds(out, mc, v) : stat_line(out, mc, v);
            break;
        }
    }
    if (env == NULL)
        goto end;
    if (rc == 0)
        rc = buf_appendf(out, "STAT ringleader_version %s\r\n", env->version ? env->version : "");
    if (rc == 0 && nfrag > 0)
        rc = buf_appendf(out, "STAT ringleader_servers %" PRIu32 "\r\n"
                         "STAT ringleader_servers_answering %" PRIu32 "\r\n", nfrag, answered);
    /* ringleader's own, except those printed above under memcached's names */
    for (unsigned i = 0; rc == 0 && i < ls.n; i++) {
        int dup = 0;
        for (size_t g = 0; g < sizeof(general) / sizeof(general[0]) && !dup; g++)
            dup = general[g].ours != NULL && strcmp(general[g].ours, ls.name[i]) == 0;
        if (!dup)
            rc = stat_line(out, ls.name[i], ls.value[i]);
    }
    if (rc == 0)
        rc = local_introspect(env, out);
end:
    if (rc == 0)
        rc = buf_append_str(out, "END\r\n");
out:
    free(ls.name);
    free(ls.value);
    return rc;
}

int memcache__local(struct proto_client *c, struct proto_parser *p, const struct proto_req *req,
                    const char *buf, const struct proto_env *env, struct buf *out)
{
    (void)c;
    (void)p;
    (void)buf;
    switch (req->cmd) {
    case MEMCACHE_CMD_MN:
        return buf_append_str(out, "MN\r\n");
    case MEMCACHE_CMD_VERBOSITY:
        return (req->flags & PROTO_RF_NOREPLY) ? 0 : buf_append_str(out, "OK\r\n");
    case MEMCACHE_CMD_QUIT:
        return PROTO_LOCAL_CLOSE;
    case MEMCACHE_CMD_STATS:
        return local_stats(env, NULL, 0, out);
    default:
        return buf_append_str(out, LOCAL_ERROR);
    }
}

/* ------------------------------------------------------- stats <sub> over the servers */

/* Length of the line at s[0..n) without its "\r\n" (or "\n"), and of the line with it. */
static size_t line_at(const char *s, size_t n, size_t *whole)
{
    const char *nl = memchr(s, '\n', n);
    if (nl == NULL) {
        *whole = 0;
        return 0;
    }
    *whole = (size_t)(nl - s) + 1;
    size_t len = (size_t)(nl - s);
    return len > 0 && s[len - 1] == '\r' ? len - 1 : len;
}

static int is_error_line(const char *s, size_t n)
{
    return (n >= 5 && memcmp(s, "ERROR", 5) == 0 && (n == 5 || s[5] == ' ')) ||
           (n >= 12 && memcmp(s, "CLIENT_ERROR", 12) == 0) ||
           (n >= 12 && memcmp(s, "SERVER_ERROR", 12) == 0);
}

/* Whether the request line is `stats` alone (memcstat sends a trailing space). */
static int is_plain_stats(const char *reqbuf)
{
    const char *s = reqbuf + 5;              /* after "stats" */
    while (*s == ' ' || *s == '\t')
        s++;
    return *s == '\r' || *s == '\n' || *s == '\0';
}

/* Whether the request line is `stats cachedump ...` (its ITEM lines are kept as sent). */
static int is_cachedump(const char *reqbuf)
{
    const char *s = reqbuf + 5;              /* after "stats" */
    while (*s == ' ' || *s == '\t')
        s++;
    return strncmp(s, "cachedump", 9) == 0;
}

/*
 * `stats items|slabs|settings|sizes|conns`: every server's lines, in the pool's order, each
 * STAT named after its server: "STAT alpha:items:1:number 3" (the label: the server's name,
 * else host:port). A server that failed or is down gives one line saying so,
 * "STAT alpha:error SERVER_ERROR ...". `stats cachedump`: the ITEM lines as the servers
 * sent them (memcdump reads the key after "ITEM "; a key names its server already), and
 * the first error if any server failed, since a dump without one server's keys would look
 * complete. When every server answered an error (a bad argument), that error, as memcached
 * would answer it.
 */
static int merge_stats(const char *reqbuf, struct buf *const *frag, uint32_t nfrag,
                       const struct proto_env *env, struct buf *out)
{
    if (is_plain_stats(reqbuf))
        return local_stats(env, frag, nfrag, out);
    int dump = is_cachedump(reqbuf);
    const char *first_err = NULL;
    size_t first_err_len = 0;
    uint32_t failed = 0;

    for (uint32_t f = 0; f < nfrag; f++) {
        size_t whole, n = line_at(buf_rptr(frag[f]), buf_len(frag[f]), &whole);
        if (whole == 0)
            return -1;
        if (is_error_line(buf_rptr(frag[f]), n)) {
            failed++;
            if (first_err == NULL) {
                first_err = buf_rptr(frag[f]);
                first_err_len = whole;
            }
        }
    }
    if (failed == nfrag || (dump && failed > 0))
        return buf_append(out, first_err, first_err_len);
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *s = buf_rptr(frag[f]);
        size_t left = buf_len(frag[f]);
        const char *name = env && env->server_name ? env->server_name(env->ctx, f) : "?";
        for (;;) {
            size_t whole, n = line_at(s, left, &whole);
            int rc = 0;
            if (whole == 0)
                return -1;              /* a fragment always ends with END or an error */
            if (is_error_line(s, n)) {
                rc = buf_appendf(out, "STAT %s:error %.*s\r\n", name, (int)n, s);
                if (rc < 0)
                    return rc;
                break;
            }
            if (n == 3 && memcmp(s, "END", 3) == 0)
                break;
            if (n > 5 && memcmp(s, "STAT ", 5) == 0 && !dump)
                rc = buf_appendf(out, "STAT %s:%.*s\r\n", name, (int)(n - 5), s + 5);
            else if (n > 5 && (memcmp(s, "ITEM ", 5) == 0 || memcmp(s, "STAT ", 5) == 0))
                rc = buf_appendf(out, "%.*s\r\n", (int)n, s);
            else
                return -1;
            if (rc < 0)
                return rc;
            s += whole;
            left -= whole;
        }
    }
    return buf_append_str(out, "END\r\n");
}

/* "1.6.18" -> 1006018 (each part below 1000), -1 if it does not start as x.y.z does. */
static long version_rank(const char *s, size_t n)
{
    long part[3] = { 0, 0, 0 };
    size_t i = 0;
    for (int k = 0; k < 3; k++) {
        if (i >= n || !isdigit((unsigned char)s[i]))
            return k == 0 ? -1 : part[0] * 1000000 + part[1] * 1000 + part[2];
        while (i < n && isdigit((unsigned char)s[i]) && part[k] < 1000)
            part[k] = part[k] * 10 + (s[i++] - '0');
        if (i < n && s[i] == '.')
            i++;
        else
            break;
    }
    return part[0] * 1000000 + part[1] * 1000 + part[2];
}

/*
 * `version`: the lowest version the servers answered, as memcached writes it. The proxy
 * answers for the servers behind it: what a client may rely on is what every one of them
 * supports, and libmemcached refuses the proxy's own 0.x (it reads a major version of 0 as
 * a failure). nutcracker forwards `version` to one server; every server is asked here, and
 * a server that is down is left out. All failed: the first error. (`stats` carries the
 * proxy's own version: ringleader_version.)
 */
static int merge_version(struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    const char *best = NULL, *first_err = NULL;
    size_t best_len = 0, err_len = 0;
    long best_rank = 0;

    for (uint32_t f = 0; f < nfrag; f++) {
        size_t whole, n = line_at(buf_rptr(frag[f]), buf_len(frag[f]), &whole);
        const char *s = buf_rptr(frag[f]);
        if (whole == 0)
            return -1;
        if (is_error_line(s, n)) {
            if (first_err == NULL) {
                first_err = s;
                err_len = whole;
            }
            continue;
        }
        if (n < 9 || memcmp(s, "VERSION ", 8) != 0)
            return -1;
        long rank = version_rank(s + 8, n - 8);
        if (best == NULL || (rank >= 0 && (best_rank < 0 || rank < best_rank))) {
            best = s;
            best_len = whole;
            best_rank = rank;
        }
    }
    if (best != NULL)
        return buf_append(out, best, best_len);
    return first_err ? buf_append(out, first_err, err_len) : -1;
}

int memcache__merge_env(uint16_t cmd, const char *reqbuf, struct buf *const *frag,
                        uint32_t nfrag, const struct proto_env *env, struct buf *out)
{
    if (cmd != MEMCACHE_CMD_STATS && cmd != MEMCACHE_CMD_VERSION)
        return memcache__merge(cmd, reqbuf, NULL, 0, NULL, frag, nfrag, out);
    size_t mark = buf_len(out);
    int rc = cmd == MEMCACHE_CMD_VERSION ? merge_version(frag, nfrag, out)
                                         : merge_stats(reqbuf, frag, nfrag, env, out);
    if (rc != 0)
        buf_truncate(out, mark);    /* nothing half-written reaches the client */
    return rc;
}
