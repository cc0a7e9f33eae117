/* memcached commands the proxy answers itself (stats, mn, verbosity, quit), and version and `stats <sub>` merged over the servers. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache.h"
#include "proto/memcache_int.h"
#include "proto/proto.h"

#define LOCAL_ERROR "ERROR\r\n"
#define LOCAL_STATS_MAX 256     /* numbers render_stats gives (about 100 today) */

struct local_stats {
    const char *name[LOCAL_STATS_MAX];
    int64_t     value[LOCAL_STATS_MAX];
    unsigned    n;
};

static void local_stats_collect(void *arg, const char *name, int64_t value)
{
    struct local_stats *ls = arg;
    if (ls->n < LOCAL_STATS_MAX) {
        ls->name[ls->n] = name;
        ls->value[ls->n] = value;
        ls->n++;
    }
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

/*
 * `stats`: memcached's general fields where the proxy has a true value, in memcached's
 * order, then ringleader's own counters under their stats-port names. The numbers are the
 * pool's over every worker and the process's (pool_numbers.c), so they equal the stats
 * port's. Fields only a backend knows (curr_items, bytes, evictions, limit_maxbytes, cmd_set,
 * bytes_read ...) are left out rather than made up: `stats` each server, or read the stats
 * port's per-server counters.
 */
static int local_stats(const struct proto_env *env, struct buf *out)
{
    /* memcached's name, the number it is made of (NULL: computed here) */
    static const struct { const char *mc, *ours; } general[] = {
        { "pid", "pid" }, { "uptime", "uptime" }, { "time", "time" },
        { "version", NULL }, { "pointer_size", NULL },
        { "rusage_user", "rusage_user_us" }, { "rusage_system", "rusage_system_us" },
        { "curr_connections", "curr_connections" }, { "total_connections", "total_connections" },
        { "cmd_get", NULL }, { "get_hits", "hits" }, { "get_misses", "misses" },
        { "threads", "threads" },
    };
    struct local_stats ls = { .n = 0 };
    int rc = 0, found;

    if (env == NULL || env->render_stats == NULL)
        return buf_append_str(out, "END\r\n");
    env->render_stats(env->ctx, local_stats_collect, &ls);
    for (size_t i = 0; rc == 0 && i < sizeof(general) / sizeof(general[0]); i++) {
        const char *mc = general[i].mc;
        if (strcmp(mc, "version") == 0) {
            const char *v = env->version ? env->version : "";
            rc = buf_appendf(out, "STAT version %s\r\n", isdigit((unsigned char)v[0]) ? v : "0.0.0");
        } else if (strcmp(mc, "pointer_size") == 0) {
            rc = stat_line(out, mc, (int64_t)(8 * sizeof(void *)));
        } else if (strcmp(mc, "cmd_get") == 0) {
            /* memcached counts every key looked up: a hit or a miss */
            int fh, fm;
            int64_t h = local_stats_get(&ls, "hits", &fh), m = local_stats_get(&ls, "misses", &fm);
            if (fh && fm)
                rc = stat_line(out, mc, h + m);
        } else {
            int64_t v = local_stats_get(&ls, general[i].ours, &found);
            if (found)
                rc = strncmp(mc, "rusage_", 7) == 0 ? stat_seconds(out, mc, v) : stat_line(out, mc, v);
        }
    }
    if (rc == 0)
        rc = buf_appendf(out, "STAT ringleader_version %s\r\n", env->version ? env->version : "");
    /* ringleader's own, except those printed above under memcached's names */
    for (unsigned i = 0; rc == 0 && i < ls.n; i++) {
        int dup = 0;
        for (size_t g = 0; g < sizeof(general) / sizeof(general[0]) && !dup; g++)
            dup = general[g].ours != NULL && strcmp(general[g].ours, ls.name[i]) == 0 &&
                  strcmp(ls.name[i], "hits") != 0 && strcmp(ls.name[i], "misses") != 0;
        if (!dup)
            rc = stat_line(out, ls.name[i], ls.value[i]);
    }
    return rc == 0 ? buf_append_str(out, "END\r\n") : rc;
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
        return local_stats(env, out);
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
