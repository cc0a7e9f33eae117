/* The Redis side of membership safety: rejoin invalidations, failover_ttl, collapsible gets. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "lib/util.h"

#define RS_ARGS_MAX 16      /* the commands whose TTL is capped take fewer */

static uint16_t rs_cmd(const char *name)
{
    const struct redis_command *c = redis_command_find(name);
    return c != NULL ? (uint16_t)(c - redis_commands) : REDIS_CMD_NONE;
}

/* ------------------------------------------------------------------ rejoin */

int redis__invalidate(const char *key, size_t len, struct buf *out, uint16_t *cmd)
{
    *cmd = rs_cmd("DEL");
    if (buf_appendf(out, "*2\r\n$3\r\nDEL\r\n$%zu\r\n", len) < 0 || buf_append(out, key, len) < 0 ||
        buf_append(out, "\r\n", 2) < 0)
        return -ENOMEM;
    return 0;
}

/* ------------------------------------------------------------------ failover_ttl */

struct rs_arg {
    size_t off, len;        /* the argument's bytes, from the request's start */
};

/* The arguments of the RESP request s[0..n) (as forwarded: well formed). Returns
 * their count, or -1 when there are more than max or it does not read. */
static long rs_args(const char *s, size_t n, struct rs_arg *a, size_t max)
{
    size_t pos = 1, cnt = 0;
    uint64_t argc;

    if (n < 4 || s[0] != '*')
        return -1;
    const char *cr = memchr(s, '\r', n);
    if (cr == NULL || util_parse_u64(s + 1, (size_t)(cr - s) - 1, max, &argc) < 0)
        return -1;
    pos = (size_t)(cr - s) + 2;
    for (; cnt < argc; cnt++) {
        if (pos >= n || s[pos] != '$')
            return -1;
        cr = memchr(s + pos, '\r', n - pos);
        uint64_t len;
        if (cr == NULL || util_parse_u64(s + pos + 1, (size_t)(cr - s) - pos - 1, n, &len) < 0)
            return -1;
        a[cnt].off = (size_t)(cr - s) + 2;
        a[cnt].len = (size_t)len;
        pos = a[cnt].off + a[cnt].len + 2;
        if (pos > n)
            return -1;
    }
    return (long)cnt;
}

static int rs_is(const char *s, const struct rs_arg *a, const char *upper)
{
    return redis__word_is(s + a->off, a->len, upper);
}

/* The new value of a TTL argument in `unit` (1 s, 1000 ms; `at`: a unix time),
 * or -1 when v needs no cap, or is one Redis 7.0 refuses ("invalid expire time": not a
 * number, not positive, or overflowing once in milliseconds from now): capping that
 * would store what the server refuses. */
static int64_t rs_cap(const char *s, const struct rs_arg *a, int64_t unit, int at, uint32_t ttl,
                      int64_t now_s)
{
    int64_t v;
    if (util_parse_dec_i64(s + a->off, a->len, REDIS_DEC, &v) < 0 || v <= 0)
        return -1;
    int64_t per_ms = unit == 1 ? 1000 : 1;       /* unit 1: seconds */
    if (v > INT64_MAX / per_ms || (!at && v * per_ms > INT64_MAX - now_s * 1000))
        return -1;
    int64_t cap = at ? (now_s + (int64_t)ttl) * unit : (int64_t)ttl * unit;
    return v > cap ? cap : -1;
}

/*
 * Write the request s[0..n) with argument `which` replaced by `num` (when
 * which >= 0), argument `drop` left out (when >= 0) and, with `add`, the two
 * arguments add and num appended; into out at start.
 */
static int rs_rebuild(struct buf *out, size_t start, const char *s, const struct rs_arg *a,
                      long argc, long which, long drop, const char *add, int64_t num)
{
    struct buf nb;
    char digits[24];
    int dl = snprintf(digits, sizeof(digits), "%" PRId64, num);
    long total = argc - (drop >= 0) + (add != NULL ? 2 : 0);

    buf_init(&nb);
    int rc = buf_appendf(&nb, "*%ld\r\n", total);
    for (long i = 0; rc == 0 && i < argc; i++) {
        if (i == drop)
            continue;
        if (i == which)
            rc = buf_appendf(&nb, "$%d\r\n%s\r\n", dl, digits);
        else
            rc = buf_appendf(&nb, "$%zu\r\n", a[i].len) < 0 ||
                 buf_append(&nb, s + a[i].off, a[i].len) < 0 || buf_append(&nb, "\r\n", 2) < 0
                     ? -ENOMEM : 0;
    }
    if (rc == 0 && add != NULL)
        rc = buf_appendf(&nb, "$%zu\r\n%s\r\n$%d\r\n%s\r\n", strlen(add), add, dl, digits);
    if (rc == 0) {
        buf_truncate(out, start);
        rc = buf_append(out, buf_rptr(&nb), buf_len(&nb));
    }
    buf_free(&nb);
    return rc < 0 ? -ENOMEM : 1;
}

/*
 * SET (EX/PX/EXAT/PXAT capped; none given: EX ttl appended; KEEPTTL keeps the
 * key's TTL, which on a failover server came from a capped write), SETEX,
 * PSETEX, GETEX (PERSIST becomes EX ttl), EXPIRE, PEXPIRE, EXPIREAT,
 * PEXPIREAT. Every other write keeps what it carries (docs/redis.md).
 */
int redis__ttl_cap(uint16_t cmd, struct buf *out, size_t start, uint32_t ttl, int64_t now_s)
{
    if (cmd >= redis_ncommands)
        return 0;
    const char *name = redis_commands[cmd].name;
    const char *s = buf_rptr(out) + start;
    size_t n = buf_len(out) - start;
    struct rs_arg a[RS_ARGS_MAX];
    long argc = rs_args(s, n, a, RS_ARGS_MAX);
    int64_t v;

    if (argc < 2)
        return 0;
    if (strcmp(name, "SETEX") == 0 || strcmp(name, "PSETEX") == 0) {
        if (argc != 4 || (v = rs_cap(s, &a[2], name[0] == 'P' ? 1000 : 1, 0, ttl, now_s)) < 0)
            return 0;
        return rs_rebuild(out, start, s, a, argc, 2, -1, NULL, v);
    }
    if (strcmp(name, "EXPIRE") == 0 || strcmp(name, "PEXPIRE") == 0 ||
        strcmp(name, "EXPIREAT") == 0 || strcmp(name, "PEXPIREAT") == 0) {
        int ms = name[0] == 'P', at = strstr(name, "AT") != NULL;
        if (argc < 3 || (v = rs_cap(s, &a[2], ms ? 1000 : 1, at, ttl, now_s)) < 0)
            return 0;
        return rs_rebuild(out, start, s, a, argc, 2, -1, NULL, v);
    }
    int set = strcmp(name, "SET") == 0, getex = strcmp(name, "GETEX") == 0;
    if (!set && !getex)
        return 0;
    for (long i = set ? 3 : 2; i < argc; i++) {
        static const struct { const char *opt; int64_t unit; int at; } opts[] = {
            { "EX", 1, 0 }, { "PX", 1000, 0 }, { "EXAT", 1, 1 }, { "PXAT", 1000, 1 },
        };
        if (rs_is(s, &a[i], "KEEPTTL"))
            return 0;
        if (getex && rs_is(s, &a[i], "PERSIST"))
            return rs_rebuild(out, start, s, a, argc, -1, i, "EX", ttl);
        for (size_t o = 0; o < RL_ARRAY_SIZE(opts); o++) {
            if (!rs_is(s, &a[i], opts[o].opt))
                continue;
            if (i + 1 >= argc ||
                (v = rs_cap(s, &a[i + 1], opts[o].unit, opts[o].at, ttl, now_s)) < 0)
                return 0;
            return rs_rebuild(out, start, s, a, argc, i + 1, -1, NULL, v);
        }
    }
    if (getex)
        return 0;           /* GETEX without an option leaves the TTL alone */
    return rs_rebuild(out, start, s, a, argc, -1, -1, "EX", ttl);
}

/* ------------------------------------------------------------------ collapse */

/* GET of one key: identical bytes are identical requests. */
int redis__collapsible(const struct proto_req *req, const char *buf)
{
    (void)buf;
    return req->kind == PROTO_REQ_SINGLE && req->nkeys == 1 && req->cmd < redis_ncommands &&
           strcmp(redis_commands[req->cmd].name, "GET") == 0;
}
