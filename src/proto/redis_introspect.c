/* Redis introspection: SLOWLOG entries and subcommands, INFO commandstats and errorstats, command names. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/util.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "proto/redis_int.h"

/* Redis's slowlog.h limits: arguments shown, bytes of each. */
#define SLOW_ARGC_MAX   32
#define SLOW_STRING_MAX 128

/* ------------------------------------------------------------------ names */

static char *lower_names;            /* one NUL-terminated lower-case name per command */
static const char **lower_of;
static pthread_once_t lower_once = PTHREAD_ONCE_INIT;

static void lower_build(void)
{
    size_t total = 0;
    for (size_t i = 0; i < redis_ncommands; i++)
        total += strlen(redis_commands[i].name) + 1;
    lower_names = malloc(total);
    lower_of = calloc(redis_ncommands, sizeof(*lower_of));
    if (lower_names == NULL || lower_of == NULL) {
        free(lower_names);
        free(lower_of);
        lower_names = NULL;
        lower_of = NULL;
        return;
    }
    char *p = lower_names;
    for (size_t i = 0; i < redis_ncommands; i++) {
        const char *n = redis_commands[i].name;
        lower_of[i] = p;
        for (; *n; n++)
            *p++ = (*n >= 'A' && *n <= 'Z') ? (char)(*n - 'A' + 'a') : *n;
        *p++ = '\0';
    }
}

uint16_t redis__ncmds(void)
{
    return (uint16_t)redis_ncommands;
}

/* "get", "client|list" (Redis 7.0's commandstats names), or NULL. */
const char *redis__cmd_name(uint16_t cmd)
{
    pthread_once(&lower_once, lower_build);
    if (cmd >= redis_ncommands || lower_of == NULL)
        return NULL;
    return lower_of[cmd];
}

/* ------------------------------------------------------------------ a request's prefix */

/* Digits of a RESP header at s[*i..n) up to "\r\n"; *i past it. -1: cut or not a number. */
static int64_t head_num(const char *s, size_t n, size_t *i)
{
    int64_t v = 0;
    size_t j = *i, start = j;
    while (j < n && s[j] >= '0' && s[j] <= '9' && v < INT64_MAX / 10)
        v = v * 10 + (s[j++] - '0');
    if (j == start || j + 1 >= n || s[j] != '\r' || s[j + 1] != '\n')
        return -1;
    *i = j + 2;
    return v;
}

/*
 * Walk the arguments of a request prefix req[0..n): each one's bytes there and its whole
 * length. Returns the argument count the request announced (an inline request: the words
 * found), and calls each(arg, i, bytes, have, full) for the arguments whose header is in
 * the prefix; *seen gets how many those were.
 */
typedef int (*head_arg_fn)(void *arg, uint32_t i, const char *p, size_t have, uint64_t full);

static int64_t head_args(const char *req, size_t n, head_arg_fn each, void *arg, uint32_t *seen)
{
    size_t i = 0;
    *seen = 0;
    while (i < n && (req[i] == '\r' || req[i] == '\n'))
        i++;                                /* empty requests before it */
    if (i < n && req[i] == '*') {
        i++;
        int64_t argc = head_num(req, n, &i);
        if (argc < 0)
            return 0;
        for (int64_t a = 0; a < argc; a++) {
            if (i >= n || req[i] != '$')
                break;
            i++;
            int64_t len = head_num(req, n, &i);
            if (len < 0)
                break;
            size_t have = (size_t)RL_MIN((uint64_t)len, (uint64_t)(n - i));
            if (each(arg, (uint32_t)a, req + i, have, (uint64_t)len) != 0)
                break;
            (*seen)++;
            if ((uint64_t)(n - i) < (uint64_t)len + 2)
                break;                      /* the prefix ends inside it */
            i += (size_t)len + 2;
        }
        return argc;
    }
    /* inline: words separated by spaces, up to the end of the line */
    uint32_t a = 0;
    while (i < n && req[i] != '\r' && req[i] != '\n') {
        while (i < n && req[i] == ' ')
            i++;
        size_t s = i;
        while (i < n && req[i] != ' ' && req[i] != '\r' && req[i] != '\n')
            i++;
        if (i > s) {
            if (each(arg, a, req + s, i - s, i - s) != 0)
                break;
            a++;
            (*seen)++;
        }
    }
    return a;
}

static int slow_more_bytes(struct buf *out, const char *p, size_t have, uint64_t more)
{
    char tail[64];
    int tl = snprintf(tail, sizeof(tail), "... (%" PRIu64 " more bytes)", more);
    if (buf_appendf(out, "$%zu\r\n", have + (size_t)tl) < 0 || buf_append(out, p, have) < 0 ||
        buf_append(out, tail, (size_t)tl) < 0 || buf_append(out, "\r\n", 2) < 0)
        return -ENOMEM;
    return 0;
}

struct slow_arg {
    const char *p;
    size_t      have;
    uint64_t    full;
};

struct slow_args {
    struct slow_arg a[SLOW_ARGC_MAX];
    uint32_t        n;
};

static int slow_collect(void *arg, uint32_t i, const char *p, size_t have, uint64_t full)
{
    struct slow_args *sa = arg;
    (void)i;
    if (sa->n == SLOW_ARGC_MAX)
        return 1;
    sa->a[sa->n].p = p;
    sa->a[sa->n].have = have;
    sa->a[sa->n].full = full;
    sa->n++;
    return 0;
}

/*
 * As Redis's slowlogCreateEntry: at most 32 elements, the 32nd "... (N more arguments)"
 * when there are more; an argument over 128 bytes shows 128 and "... (N more bytes)". The
 * proxy keeps a prefix of each request (MSG_HEAD_MAX bytes): an argument it cuts shows
 * what it has and how many bytes are missing, and the arguments after the prefix are
 * "... (N more arguments)" the same way.
 */
int redis__slow_entry(const char *req, size_t n, const struct proto_slow *e, struct buf *out)
{
    struct slow_args sa;
    uint32_t seen;

    sa.n = 0;
    int64_t argc = head_args(req, n, slow_collect, &sa, &seen);
    uint32_t slots = argc > SLOW_ARGC_MAX ? SLOW_ARGC_MAX - 1 : (uint32_t)argc;
    uint32_t k = RL_MIN(slots, sa.n);
    int tail = (int64_t)k < argc;
    const char *addr = e->addr ? e->addr : "";
    const char *name = e->name ? e->name : "";

    if (buf_appendf(out, "*6\r\n:%" PRIu64 "\r\n:%" PRId64 "\r\n:%" PRIu64 "\r\n*%" PRIu32 "\r\n",
                    e->id, e->time_s, e->usec, k + (uint32_t)tail) < 0)
        return -ENOMEM;
    for (uint32_t i = 0; i < k; i++) {
        const struct slow_arg *a = &sa.a[i];
        size_t have = RL_MIN(a->have, (size_t)SLOW_STRING_MAX);
        int rc = a->full > have ? slow_more_bytes(out, a->p, have, a->full - have)
                                : redis__append_bulk(out, a->p, have);
        if (rc < 0)
            return -ENOMEM;
    }
    if (tail) {
        char more[64];
        int ml = snprintf(more, sizeof(more), "... (%" PRId64 " more arguments)", argc - (int64_t)k);
        if (redis__append_bulk(out, more, (size_t)ml) < 0)
            return -ENOMEM;
    }
    if (redis__append_bulk(out, addr, strlen(addr)) < 0 ||
        redis__append_bulk(out, name, strlen(name)) < 0)
        return -ENOMEM;
    return 0;
}

struct key_find {
    uint32_t    want;
    const char *p;
    size_t      have;
    uint64_t    full;
    int         found;
};

static int key_arg(void *arg, uint32_t i, const char *p, size_t have, uint64_t full)
{
    struct key_find *kf = arg;
    if (i != kf->want)
        return 0;
    kf->p = p;
    kf->have = have;
    kf->full = full;
    kf->found = 1;
    return 1;
}

int redis__req_key(uint16_t cmd, const char *req, size_t n, const char **key, size_t *len,
                   uint64_t *full)
{
    if (cmd >= redis_ncommands || redis_commands[cmd].first <= 0)
        return 0;
    struct key_find kf = { (uint32_t)redis_commands[cmd].first, NULL, 0, 0, 0 };
    uint32_t seen;
    head_args(req, n, key_arg, &kf, &seen);
    if (!kf.found)
        return 0;
    *key = kf.p;
    *len = kf.have;
    *full = kf.full;
    return 1;
}

/* ------------------------------------------------------------------ SLOWLOG */

static const char *const slowlog_help[] = {
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
};

int redis__slowlog(int what, const char *buf, const struct proto_key *args, uint32_t argc,
                   const struct proto_env *env, struct buf *out)
{
    switch (what) {
    case REDIS_LOCAL_SLOWLOG_HELP:
        if (buf_appendf(out, "*%zu\r\n", RL_ARRAY_SIZE(slowlog_help)) < 0)
            return -ENOMEM;
        for (size_t i = 0; i < RL_ARRAY_SIZE(slowlog_help); i++)
            if (buf_appendf(out, "+%s\r\n", slowlog_help[i]) < 0)
                return -ENOMEM;
        return 0;
    case REDIS_LOCAL_SLOWLOG_LEN:
        return buf_appendf(out, ":%" PRIu64 "\r\n",
                           env && env->slowlog_len ? env->slowlog_len(env->ctx) : 0);
    case REDIS_LOCAL_SLOWLOG_RESET:
        if (env && env->slowlog_reset)
            env->slowlog_reset(env->ctx);
        return buf_append_str(out, "+OK\r\n");
    case REDIS_LOCAL_SLOWLOG_GET: {
        long count = 10;
        if (argc > 3)
            return buf_append_str(out, "-ERR Unknown subcommand or wrong number of arguments "
                                  "for 'get'. Try SLOWLOG HELP.\r\n");
        if (argc == 3) {
            int64_t v;
            if (util_parse_i64(buf + args[2].off, args[2].len, &v) < 0 || v < -1)
                return buf_append_str(out, "-ERR value is out of range, value must between -1 "
                                      "and 9223372036854775807\r\n");
            count = v < 0 ? -1 : (long)RL_MIN(v, (int64_t)LONG_MAX);
        }
        struct buf entries;
        uint64_t k = 0;
        buf_init(&entries);
        if (env && env->slowlog_get && env->slowlog_get(env->ctx, count, &entries, &k) < 0) {
            buf_free(&entries);
            return -ENOMEM;
        }
        int rc = buf_appendf(out, "*%" PRIu64 "\r\n", k);
        if (rc == 0 && buf_len(&entries) > 0)
            rc = buf_append(out, buf_rptr(&entries), buf_len(&entries));
        buf_free(&entries);
        return rc < 0 ? -ENOMEM : 0;
    }
    default:
        return buf_append_str(out, "-ERR internal error: not a SLOWLOG subcommand\r\n");
    }
}

/* ------------------------------------------------------------------ INFO */

struct cmdstat_render {
    struct buf *b;
    int         rc;
};

static void cmdstat_line(void *arg, uint16_t cmd, const struct proto_cmdstat *st)
{
    struct cmdstat_render *r = arg;
    const char *name = redis__cmd_name(cmd);
    if (r->rc < 0 || name == NULL || (st->calls == 0 && st->rejected_calls == 0 &&
                                      st->failed_calls == 0))
        return;
    double per = st->calls > 0 ? (double)st->usec / (double)st->calls : 0.0;
    r->rc = buf_appendf(r->b, "cmdstat_%s:calls=%" PRId64 ",usec=%" PRId64
                        ",usec_per_call=%.2f,rejected_calls=%" PRId64 ",failed_calls=%" PRId64
                        "\r\n", name, st->calls, st->usec, per, st->rejected_calls,
                        st->failed_calls);
}

int redis__info_commandstats(struct buf *b, const struct proto_env *env)
{
    struct cmdstat_render r = { b, 0 };
    if (buf_append_str(b, "# Commandstats\r\n") < 0)
        return -ENOMEM;
    if (env && env->cmdstats)
        env->cmdstats(env->ctx, cmdstat_line, &r);
    return r.rc < 0 ? -ENOMEM : 0;
}

static void errstat_line(void *arg, const char *prefix, int64_t count)
{
    struct cmdstat_render *r = arg;
    if (r->rc == 0)
        r->rc = buf_appendf(r->b, "errorstat_%s:count=%" PRId64 "\r\n", prefix, count);
}

int redis__info_errorstats(struct buf *b, const struct proto_env *env)
{
    struct cmdstat_render r = { b, 0 };
    if (buf_append_str(b, "# Errorstats\r\n") < 0)
        return -ENOMEM;
    if (env && env->errorstats)
        env->errorstats(env->ctx, errstat_line, &r);
    return r.rc < 0 ? -ENOMEM : 0;
}
