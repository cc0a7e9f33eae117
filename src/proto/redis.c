/* The Redis protocol (RESP2, RESP3 replies): resumable request/reply parsers, routing by the command table, fragments, merges, pub/sub. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "util.h"

/*
 * Requests.
 *
 * A request is a RESP array of bulk strings, or an inline line of words
 * (telnet, nc). Both are parsed in place: every argument is recorded as an
 * offset/length pair in p->keys (the parser's array, grown once per
 * connection), then the command table decides the kind and the keys are
 * compacted in place at the front of that same array.
 *
 * Resuming: while a RESP request is incomplete, p->u.redis.state is
 * REQ_MULTIBULK with argc the argument count, done the arguments already
 * recorded, start where the request starts (after skipped empty requests)
 * and scan the offset of the next argument. Only the bounded "$<len>" line
 * of the argument being waited for is re-read; a 100 MB value is not
 * rescanned.
 *
 * Agreement with the server. Every byte the proxy forwards is read by
 * redis-server 7.0 (networking.c) exactly as the proxy read it:
 *   - numbers ("*<n>", "$<n>", numkeys) follow string2ll: no sign but '-',
 *     no leading zero, no "-0", no space; anything else is the protocol
 *     error Redis itself answers, and the client is closed as Redis does;
 *   - a header line is found by its '\r' (Redis: strchr, so a NUL before
 *     it would make Redis wait forever; the proxy refuses it);
 *   - an inline line (telnet, nc) is split as sdssplitargs splits it
 *     (quotes, escapes, \xHH) and always re-sent as a RESP array written
 *     into parser memory (p->dec), so the server never parses inline text;
 *     an inline line with a NUL, which Redis would wait on forever (strchr
 *     stops there), closes the client with an error instead.
 *
 * Annotations for the same protocol's forward/frag_write/local/key_bytes
 * (req->u.redis): start, where the request starts in buf (empty requests
 * "*0\r\n" or blank lines before it are consumed with it and not
 * forwarded); argc, the argument count (for LOCAL requests p->keys[0..argc)
 * still holds every argument when local() is called); inl, for an inline
 * request, its RESP re-encoding (inl_len bytes), which keys[] are offsets
 * into instead of buf. Fragments are always written as RESP arrays.
 *
 * Error replies that need formatting (unknown command, wrong arity ...) are
 * written into p->u.redis.err: memory the parser owns, valid until its next
 * call, as req->err must be.
 */

#define REQ_IDLE        0
#define REQ_MULTIBULK   1


#define REDIS_MAX_REQ           (1024u * 1024 * 1024) /* Redis's client-query-buffer-limit */
#define REDIS_UNAUTH_MAX_ARGS   10u                   /* Redis's limits before AUTH */
#define REDIS_UNAUTH_MAX_BULK   16384u
#define REDIS_ERR_ROOM          PROTO_REDIS_ERR_MAX   /* bytes of a formatted error reply */

#define ERR_OOM         "-ERR out of memory\r\n"
#define ERR_MBULK       "-ERR Protocol error: invalid multibulk length\r\n"
#define ERR_BULK        "-ERR Protocol error: invalid bulk length\r\n"
#define ERR_BIG_MBULK   "-ERR Protocol error: too big mbulk count string\r\n"
#define ERR_BIG_BULK    "-ERR Protocol error: too big bulk count string\r\n"
#define ERR_BIG_INLINE  "-ERR Protocol error: too big inline request\r\n"
#define ERR_BIG_REQ     "-ERR Protocol error: request larger than 1 GiB\r\n"
#define ERR_UNBALANCED  "-ERR Protocol error: unbalanced quotes in request\r\n"
#define ERR_INLINE_NUL  "-ERR Protocol error: NUL byte in inline request\r\n"
#define ERR_HDR_NUL     "-ERR Protocol error: NUL byte in a header line\r\n"
#define ERR_UNAUTH_MBULK "-ERR Protocol error: unauthenticated multibulk length\r\n"
#define ERR_UNAUTH_BULK "-ERR Protocol error: unauthenticated bulk length\r\n"
#define ERR_NOAUTH      "-NOAUTH Authentication required.\r\n"
#define ERR_NOTINT      "-ERR value is not an integer or out of range\r\n"
#define ERR_NK_NEG      "-ERR Number of keys can't be negative\r\n"
#define ERR_NK_BIG      "-ERR Number of keys can't be greater than number of args\r\n"
#define ERR_NK_ZERO     "-ERR numkeys should be greater than 0\r\n"
#define ERR_SYNTAX      "-ERR syntax error\r\n"
#define ERR_MULTI_NESTED "-ERR MULTI calls can not be nested\r\n"
#define ERR_WATCH_MULTI "-ERR WATCH inside MULTI is not allowed\r\n"
#define ERR_EXEC_ALONE  "-ERR EXEC without MULTI\r\n"
#define ERR_DISCARD_ALONE "-ERR DISCARD without MULTI\r\n"
#define ERR_CURSOR      "-ERR invalid cursor\r\n"
#define ERR_CURSOR_OLD  "-ERR invalid cursor: the pool changed during the scan (a reload, " \
                        "or a new slot map); start again from cursor 0\r\n"

static void req_reset(struct proto_parser *p)
{
    struct proto_redis_parser *r = &p->u.redis;
    r->state = REQ_IDLE;
    r->scan = r->start = r->argc = r->done = 0;
}

/* A fatal error: msg[0..len) is the reply, then the client is closed. */
static int req_fatal_n(struct proto_parser *p, struct proto_req *req, const char *msg,
                       size_t len)
{
    req_reset(p);
    req->kind = PROTO_REQ_ERROR;
    req->flags |= PROTO_RF_CLOSE;
    req->err = msg;
    req->err_len = (uint32_t)len;
    return -1;
}

static int req_fatal(struct proto_parser *p, struct proto_req *req, const char *msg)
{
    return req_fatal_n(p, req, msg, strlen(msg));
}

static void req_static_error(struct proto_req *req, const char *msg)
{
    req->kind = PROTO_REQ_ERROR;
    req->nkeys = 0;
    req->err = msg;
    req->err_len = (uint32_t)strlen(msg);
}

/*
 * Format an error reply "-<fmt>\r\n" into the parser's error buffer. CR
 * and LF inside are turned into spaces (as Redis does) so that a client's
 * argument cannot inject protocol. Never fails; a longer text is cut.
 */
static void req_error(struct proto_parser *p, struct proto_req *req, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void req_error(struct proto_parser *p, struct proto_req *req, const char *fmt, ...)
{
    char *s = p->u.redis.err;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s + 1, REDIS_ERR_ROOM - 3, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if (n > REDIS_ERR_ROOM - 4)
        n = REDIS_ERR_ROOM - 4;
    s[0] = '-';
    for (int i = 1; i <= n; i++)
        if (s[i] == '\r' || s[i] == '\n')
            s[i] = ' ';
    s[n + 1] = '\r';
    s[n + 2] = '\n';
    s[n + 3] = '\0';
    req->kind = PROTO_REQ_ERROR;
    req->nkeys = 0;
    req->err = s;
    req->err_len = (uint32_t)n + 3;
}

/* A number as Redis's string2ll reads it, the whole of [s, s+len): see
 * REDIS_DEC. 0 or -1. */
static int parse_num(const char *s, size_t len, int64_t *out)
{
    return util_parse_dec_i64(s, len, REDIS_DEC, out);
}

static int arg_eq(const char *buf, const struct proto_key *a, const char *upper)
{
    return redis__word_is(buf + a->off, a->len, upper);
}

/* A "DB <n>" among the options that follow the keys, as Redis's COPY reads
 * them (any position, any case). A trailing DB without its number, or a
 * number Redis would not read, is Redis's own error with nothing written:
 * left to the server, so the client gets Redis's text. */
static int has_db_option(const char *buf, const struct redis_command *c,
                         const struct proto_key *args, uint32_t argc)
{
    int64_t db;

    for (uint32_t i = (uint32_t)c->last + 1; i + 1 < argc; i++)
        if (arg_eq(buf, &args[i], "DB") &&
            parse_num(buf + args[i + 1].off, args[i + 1].len, &db) == 0)
            return 1;
    return 0;
}

static void lower_name(const char *name, char *out, size_t cap)
{
    size_t i = 0;
    for (; name[i] != '\0' && i + 1 < cap; i++)
        out[i] = (name[i] >= 'A' && name[i] <= 'Z') ? (char)(name[i] - 'A' + 'a') : name[i];
    out[i] = '\0';
}

/* isspace() in the C locale: what sdssplitargs skips between arguments. */
static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* What ends an unquoted inline argument in sdssplitargs: not \v or \f,
 * which it keeps inside the argument though it skips them before one. */
static int is_word_end(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*
 * Split the inline line s[0..n) (no NUL in it) into arguments exactly as
 * Redis's sdssplitargs does: blanks (isspace) between arguments; "..." with
 * the escapes \xHH \n \r \t \b \a and \<any>; '...' with \' only; a quote
 * may open inside a word ("a\"b c\"" is one argument), and a closing quote
 * must be followed by a blank or the end. The decoded bytes of argument i
 * are written to out + arg[i].off (out holds n bytes: decoding never
 * grows), at most max arguments. Returns the count, -1 for unbalanced
 * quotes (Redis closes the connection), -2 for more than max.
 */
static int64_t inline_split(const char *s, size_t n, char *out, struct proto_key *arg,
                            uint32_t max)
{
    size_t i = 0, o = 0;
    uint32_t argc = 0;

    for (;;) {
        while (i < n && is_space(s[i]))
            i++;
        if (i == n)
            return argc;
        if (argc == max)
            return -2;
        size_t begin = o;
        char quote = 0;             /* '"' or '\'' while inside quotes */
        for (;;) {
            if (quote == 0) {
                if (i == n || is_word_end(s[i]))
                    break;
                if (s[i] == '"' || s[i] == '\'')
                    quote = s[i++];
                else
                    out[o++] = s[i++];
                continue;
            }
            if (i == n)
                return -1;          /* unterminated quotes */
            if (quote == '"' && s[i] == '\\' && i + 3 < n && s[i + 1] == 'x' &&
                hex_value(s[i + 2]) >= 0 && hex_value(s[i + 3]) >= 0) {
                out[o++] = (char)(hex_value(s[i + 2]) * 16 + hex_value(s[i + 3]));
                i += 4;
            } else if (quote == '"' && s[i] == '\\' && i + 1 < n) {
                char c = s[i + 1];
                switch (c) {
                case 'n': c = '\n'; break;
                case 'r': c = '\r'; break;
                case 't': c = '\t'; break;
                case 'b': c = '\b'; break;
                case 'a': c = '\a'; break;
                default: break;
                }
                out[o++] = c;
                i += 2;
            } else if (quote == '\'' && s[i] == '\\' && i + 1 < n && s[i + 1] == '\'') {
                out[o++] = '\'';
                i += 2;
            } else if (s[i] == quote) {
                if (i + 1 < n && !is_space(s[i + 1]))
                    return -1;      /* the closing quote must end the argument */
                i++;
                break;
            } else {
                out[o++] = s[i++];
            }
        }
        arg[argc].off = (uint32_t)begin;
        arg[argc].len = (uint32_t)(o - begin);
        argc++;
    }
}

/* ------------------------------------------------------------------ keys */

/* Options of SORT / GEORADIUS that take arguments, so that an argument equal
 * to "STORE" is not mistaken for the option. */
static const struct {
    const char *name;
    uint8_t nargs;
} store_opts[] = {
    { "BY", 1 }, { "GET", 1 }, { "LIMIT", 2 }, { "COUNT", 1 },
};

/*
 * XREAD / XREADGROUP: where STREAMS is, as Redis's xreadGetKeys finds it
 * (BLOCK and COUNT take one argument, GROUP two, NOACK none; anything else
 * ends the options), so that a stream named "STREAMS" is a key. The index
 * of STREAMS, or -1 when Redis finds no keys (no STREAMS, or an odd or zero
 * number of arguments after it).
 */
static int64_t streams_keys(const char *buf, const struct proto_key *args, uint32_t argc)
{
    for (uint32_t i = 1; i < argc; i++) {
        if (arg_eq(buf, &args[i], "BLOCK") || arg_eq(buf, &args[i], "COUNT")) {
            i++;
        } else if (arg_eq(buf, &args[i], "GROUP")) {
            i += 2;
        } else if (arg_eq(buf, &args[i], "NOACK")) {
            continue;
        } else if (arg_eq(buf, &args[i], "STREAMS")) {
            uint32_t num = argc - i - 1;
            return num == 0 || num % 2 != 0 ? -1 : (int64_t)i;
        } else {
            return -1;
        }
    }
    return -1;
}

/*
 * Compute the keys of command c from its arguments args[0..argc), writing
 * them to keys[] (which may be args itself: key k is always read from an
 * argument index >= k). Returns the number of keys (>= 0), or -1 with
 * *err a static error reply, -2 for a wrong argument count, -3 for a
 * numkeys of 0 where Redis wants "at least 1 input key".
 * *nokey is set when a script with numkeys 0 is routed by its body.
 */
static int keys_extract(const struct redis_command *c, const struct proto_key *args,
                        uint32_t argc, const char *buf, struct proto_key *keys,
                        int *nokey, const char **err)
{
    uint32_t n = 0;
    int64_t store = -1;

    *nokey = 0;
    if (c->flags & REDIS_CMD_STREAMS) {
        int64_t pos = streams_keys(buf, args, argc);
        if (pos < 0) {
            /* No keys Redis would find: the server answers the syntax error
             * (routed by argument 1, as a script without keys is). */
            keys[0] = args[1];
            *nokey = 1;
            return 1;
        }
        uint32_t num = (argc - (uint32_t)pos - 1) / 2;
        for (uint32_t i = 0; i < num; i++)
            keys[i] = args[pos + 1 + i];
        return (int)num;
    }
    if (c->flags & REDIS_CMD_STOREOPT) {
        uint32_t i = (uint32_t)(c->arity < 0 ? -c->arity : c->arity);
        while (i < argc) {
            if (arg_eq(buf, &args[i], "STORE") || arg_eq(buf, &args[i], "STOREDIST")) {
                if (i + 1 >= argc)
                    break;      /* the server answers the syntax error */
                store = i + 1;
                i += 2;
                continue;
            }
            uint32_t skip = 0;
            for (size_t o = 0; o < RL_ARRAY_SIZE(store_opts); o++)
                if (arg_eq(buf, &args[i], store_opts[o].name))
                    skip = store_opts[o].nargs;
            i += 1 + skip;
        }
    }
    if (c->first > 0) {
        int64_t last = c->last >= 0 ? c->last : (int64_t)argc + c->last;
        int64_t step = c->step > 0 ? c->step : 1;
        if (last >= (int64_t)argc || last < c->first)
            return -2;
        if ((last - c->first + 1) % step != 0)
            return -2;          /* MSET with a key but no value */
        for (int64_t i = c->first; i <= last; i += step)
            keys[n++] = args[i];
    }
    if (c->numkeys > 0) {
        int64_t nk;
        const struct proto_key *a = &args[c->numkeys];
        int bad;
        if (c->numkeys >= argc)
            return -2;
        bad = parse_num(buf + a->off, a->len, &nk) < 0;
        /* Each family answers a bad numkeys with its own Redis 7.0 text
         * (the server never extracts keys before the command runs):
         * scripts (evalGenericCommand, fcallCommandGeneric) "not an integer",
         * "can't be negative", "can't be greater than number of args";
         * sorted-set ops (zunionInterDiffGenericCommand) "not an integer",
         * "at least 1 input key", "syntax error"; LMPOP, BLMPOP, ZMPOP, BZMPOP,
         * SINTERCARD (getRangeLongFromObjectOrReply 1..LONG_MAX) "numkeys
         * should be greater than 0" for anything but a positive integer, then
         * when the keys (and for *MPOP the LEFT|RIGHT|MIN|MAX after them) do
         * not fit "syntax error" (*MPOP) or "can't be greater than number of
         * args" (SINTERCARD). */
        if (c->flags & REDIS_CMD_NOKEY) {
            if (bad) {
                *err = ERR_NOTINT;
                return -1;
            }
            if (nk < 0) {
                *err = ERR_NK_NEG;
                return -1;
            }
            if (nk > (int64_t)argc - c->numkeys - 1) {
                *err = ERR_NK_BIG;
                return -1;
            }
        } else if (c->flags & REDIS_CMD_NKINPUT) {
            if (bad) {
                *err = ERR_NOTINT;
                return -1;
            }
            if (nk < 1)
                return -3;      /* the caller names the command in the error */
            if (nk > (int64_t)argc - c->numkeys - 1) {
                *err = ERR_SYNTAX;
                return -1;
            }
        } else {
            int32_t ar = c->arity < 0 ? -c->arity : c->arity;
            int64_t after = ar - c->numkeys - 2;    /* LEFT|RIGHT|MIN|MAX: 1 */
            if (bad || nk < 1) {
                *err = ERR_NK_ZERO;
                return -1;
            }
            if (nk > (int64_t)argc - c->numkeys - 1 - (after > 0 ? after : 0)) {
                *err = after > 0 ? ERR_SYNTAX : ERR_NK_BIG;     /* SINTERCARD: NK_BIG */
                return -1;
            }
        }
        if (nk == 0) {
            keys[n++] = args[1];
            *nokey = 1;
        }
        for (int64_t i = 0; i < nk; i++)
            keys[n++] = args[c->numkeys + 1 + i];
    }
    if (store >= 0)
        keys[n++] = args[store];
    return (int)n;
}

/* ------------------------------------------------------------ classify */

static void unknown_command(struct proto_parser *p, const char *buf, uint32_t argc,
                            struct proto_req *req)
{
    /* Redis 7's text: each argument quoted and followed by a space, the
     * list cut once it reaches 128 bytes. */
    char args[160];
    size_t al = 0;
    const struct proto_key *a = p->keys;

    args[0] = '\0';
    for (uint32_t i = 1; i < argc && al < 128; i++) {
        size_t room = 128 - al;
        size_t n = a[i].len < room ? a[i].len : room;
        args[al++] = '\'';
        memcpy(args + al, buf + a[i].off, n);
        al += n;
        args[al++] = '\'';
        args[al++] = ' ';
        args[al] = '\0';
    }
    int nl = (int)(a[0].len < 128 ? a[0].len : 128);
    req_error(p, req, "ERR unknown command '%.*s', with args beginning with: %.*s",
              nl, buf + a[0].off, (int)al, args);
}

/* ------------------------------------------------------------ sessions */

/* A command the proxy cannot queue in a transaction: refused (and, the caller being
 * inside MULTI, the transaction spoiled), as Redis Cluster refuses what it cannot run. */
static void not_in_multi(struct proto_parser *p, struct proto_req *req,
                         const struct redis_command *c, const char *why)
{
    char name[REDIS_MAX_NAME * 2 + 2];
    size_t i;
    for (i = 0; c->name[i] != '\0' && i + 1 < sizeof(name); i++)
        name[i] = c->name[i] == '|' ? ' ' : c->name[i];
    name[i] = '\0';
    req_error(p, req, "ERR command '%s' inside MULTI is not supported by ringleader (%s)",
              name, why);
}

/*
 * A blocking command's timeout as Redis 7.0 reads it (timeout.c,
 * getTimeoutFromObjectOrReply): seconds as string2ld reads a long double,
 * times 1000 rounded up, or whole milliseconds as string2ll reads them. The
 * milliseconds (0: for ever), or -1 for what Redis refuses (not a number,
 * negative, out of range): that server answers it at once.
 */
static int64_t block_timeout(const char *s, size_t len, int seconds)
{
    int64_t ms;

    if (!seconds)
        return parse_num(s, len, &ms) < 0 || ms < 0 ? -1 : ms;
    char tmp[5 * 1024];                 /* MAX_LONG_DOUBLE_CHARS */
    if (len == 0 || len >= sizeof(tmp))
        return -1;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    char *end;
    errno = 0;
    long double v = strtold(tmp, &end);
    if (isspace((unsigned char)tmp[0]) || *end != '\0' || (size_t)(end - tmp) != len ||
        (errno == ERANGE && (v == HUGE_VALL || v == -HUGE_VALL || fpclassify(v) == FP_ZERO)) ||
        errno == EINVAL || isnan(v))
        return -1;
    v = ceill(v * 1000.0L);
    if (!(v >= 0.0L) || v >= 9.2e18L)   /* negative, or a cast Redis cannot make */
        return -1;
    return (int64_t)v;
}

/* XREAD's BLOCK option, as xreadCommand reads its options (the last BLOCK counts):
 * 1 with *ms, or 0 when the command does not block. */
static int xread_block(const char *buf, const struct proto_key *args, uint32_t argc,
                       int64_t *ms)
{
    int found = 0;
    for (uint32_t i = 1; i < argc; i++) {
        uint32_t more = argc - i - 1;
        if (arg_eq(buf, &args[i], "BLOCK") && more > 0) {
            i++;
            *ms = block_timeout(buf + args[i].off, args[i].len, 0);
            found = 1;
        } else if (arg_eq(buf, &args[i], "COUNT") && more > 0) {
            i++;
        } else if (arg_eq(buf, &args[i], "GROUP") && more >= 2) {
            i += 2;
        } else if (arg_eq(buf, &args[i], "NOACK")) {
            continue;
        } else {
            break;              /* STREAMS, or the syntax error the server answers */
        }
    }
    return found;
}

/*
 * What command c does to the client's session, given the state the core
 * keeps in p->flags. 0: classify the rest as usual (req->sess may be set);
 * 1: req is complete; 2: req is an error that leaves a transaction as it
 * was (Redis answers nested MULTI and WATCH inside MULTI without flagging).
 */
static int req_session(struct proto_parser *p, const char *buf, const struct redis_command *c,
                       const struct proto_key *args, uint32_t argc, struct proto_req *req)
{
    int atomic = (p->flags & PROTO_PF_ATOMIC) != 0;
    int held = (p->flags & PROTO_PF_SESSION) != 0;

    switch ((enum redis_session)REDIS_CMD_SESSION(c)) {
    case REDIS_SESS_MULTI:
        if (atomic) {
            req_static_error(req, ERR_MULTI_NESTED);
            return 2;
        }
        req->kind = PROTO_REQ_SESSION;
        req->sess = PROTO_SS_BEGIN;
        return 1;
    case REDIS_SESS_EXEC:
    case REDIS_SESS_DISCARD:
        if (!atomic) {
            req_static_error(req, REDIS_CMD_SESSION(c) == REDIS_SESS_EXEC ? ERR_EXEC_ALONE
                                                                : ERR_DISCARD_ALONE);
            return 2;
        }
        req->kind = PROTO_REQ_SESSION;
        req->sess = PROTO_SS_END | (REDIS_CMD_SESSION(c) == REDIS_SESS_EXEC ? PROTO_SS_COMMIT : 0);
        return 1;
    case REDIS_SESS_WATCH:
        if (atomic) {
            req_static_error(req, ERR_WATCH_MULTI);
            return 2;
        }
        req->sess = PROTO_SS_OPEN;
        return 0;
    case REDIS_SESS_UNWATCH:
        /* inside MULTI it is queued; after WATCH it ends the session; alone it
         * has nothing to do */
        req->kind = atomic || held ? PROTO_REQ_SESSION : PROTO_REQ_LOCAL;
        req->sess = !atomic && held ? PROTO_SS_END : 0;
        return 1;
    case REDIS_SESS_QUEUE:
        if (!atomic)
            return 0;
        req->kind = PROTO_REQ_SESSION;
        return 1;
    case REDIS_SESS_WAIT:
        if (atomic) {
            req->kind = PROTO_REQ_SESSION;      /* returns at once inside MULTI */
            return 1;
        }
        if (!held) {
            req_error(p, req, "ERR WAIT is supported by ringleader only after WATCH or "
                      "inside MULTI (it counts the writes made on one server connection)");
            return 1;
        }
        req->kind = PROTO_REQ_SESSION;
        req->sess = PROTO_SS_BLOCK;
        req->block_ms = block_timeout(buf + args[2].off, args[2].len, 0);
        return 1;
    case REDIS_SESS_BLOCK_LAST:
    case REDIS_SESS_BLOCK_FIRST:
    case REDIS_SESS_BLOCK_OPT:
        if (atomic)
            return 0;           /* inside MULTI it runs at EXEC and never blocks */
        if (REDIS_CMD_SESSION(c) == REDIS_SESS_BLOCK_OPT) {
            if (!xread_block(buf, args, argc, &req->block_ms))
                return 0;
        } else {
            const struct proto_key *t =
                &args[REDIS_CMD_SESSION(c) == REDIS_SESS_BLOCK_LAST ? argc - 1 : 1];
            req->block_ms = block_timeout(buf + t->off, t->len, 1);
        }
        req->sess = PROTO_SS_BLOCK;
        return 0;
    case REDIS_SESS_NONE:
        break;
    }
    return 0;
}

/*
 * SCAN's cursor names a server of the pool and that server's cursor:
 *
 *     pool cursor = server cursor << 24 | (epoch & 0xff) << 16 | server index
 *
 * read as Redis reads a cursor (strtoul: a sign, digits, nothing after).
 * Cursor 0 starts at server 0; a cursor from another epoch of the pool's ring
 * (a reload changed it during the scan) is refused, since its server index
 * may now name another server.
 */
#define SCAN_INDEX_BITS 16
#define SCAN_TAG_SHIFT  16
#define SCAN_CUR_SHIFT  24

static int scan_cursor(const char *s, size_t len, uint64_t *out)
{
    size_t i = 0;
    int neg = 0;
    uint64_t v = 0;

    if (len > 0 && isspace((unsigned char)s[0]))
        return -1;
    if (i < len && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    size_t digits = i;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
            return -1;                  /* ERANGE */
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == digits)
        return len == 0 || s[0] == '\0' ? (*out = 0, 0) : -1;   /* strtoul read nothing */
    if (i < len && s[i] != '\0')        /* the sds ends at its first NUL for strtoul */
        return -1;
    *out = neg ? (uint64_t)0 - v : v;
    return 0;
}

static int req_cursor(struct proto_parser *p, const char *buf, const struct proto_key *args,
                      struct proto_req *req)
{
    uint64_t cur;

    if (scan_cursor(buf + args[1].off, args[1].len, &cur) < 0) {
        req_static_error(req, ERR_CURSOR);
        return 0;
    }
    if (cur != 0 && ((cur >> SCAN_TAG_SHIFT) & 0xff) != (p->epoch & 0xff)) {
        req_static_error(req, ERR_CURSOR_OLD);
        return 0;
    }
    req->kind = PROTO_REQ_INDEXED;
    req->server = (uint32_t)(cur & ((1u << SCAN_INDEX_BITS) - 1));
    req->u.redis.cursor = cur >> SCAN_CUR_SHIFT;
    return 0;
}

/* Fill req for the complete request whose arguments are p->keys[0..argc). Returns 1
 * for an error that leaves a transaction as it was (Redis does not flag it), else 0. */
static int req_classify(struct proto_parser *p, const char *buf, uint32_t argc,
                        struct proto_req *req)
{
    const struct proto_key *args = p->keys;
    /* the client's variant, on every request: the core picks connections by it */
    _Static_assert(PROTO_RF_VARIANT == PROTO_PF_VARIANT << 4, "the variant's flag bits");
    req->flags |= (uint16_t)((p->flags & PROTO_PF_VARIANT) << 4);
    /* "NAME|SUB" is how the table names a subcommand, never a command Redis
     * knows: sent as a name ("XINFO|STREAM k") it is unknown to Redis too. */
    const struct redis_command *c =
        memchr(buf + args[0].off, '|', args[0].len) != NULL
            ? NULL
            : redis_command_lookup(buf + args[0].off, args[0].len);
    char name[REDIS_MAX_NAME * 2 + 2];

    if (c == NULL) {
        unknown_command(p, buf, argc, req);
        return 0;
    }
    if (argc >= 2 && (c->flags & (REDIS_CMD_CONTAINER | REDIS_CMD_VARIANTS))) {
        size_t nl = strlen(c->name);
        const struct redis_command *sub = NULL;
        if (args[1].len < REDIS_MAX_NAME) {
            memcpy(name, c->name, nl);
            name[nl] = '|';
            for (uint32_t i = 0; i < args[1].len; i++) {
                char ch = buf[args[1].off + i];
                name[nl + 1 + i] = (ch >= 'a' && ch <= 'z') ? (char)(ch - 'a' + 'A') : ch;
            }
            name[nl + 1 + args[1].len] = '\0';
            if (memchr(buf + args[1].off, '\0', args[1].len) == NULL)
                sub = redis_command_find(name);
        }
        if (sub != NULL && (c->flags & REDIS_CMD_VARIANTS) && (uint32_t)sub->arity != argc)
            sub = NULL;         /* INFO keyspace alone is the variant; INFO x y is local */
        if (sub == NULL && (c->flags & REDIS_CMD_CONTAINER)) {
            int sl = (int)(args[1].len < 128 ? args[1].len : 128);
            req_error(p, req, "ERR unknown subcommand '%.*s'. Try %s HELP.", sl,
                      buf + args[1].off, c->name);
            return 0;
        }
        if (sub != NULL)
            c = sub;
    }
    req->cmd = (uint16_t)(c - redis_commands);
    if ((c->arity > 0 && argc != (uint32_t)c->arity) ||
        (c->arity < 0 && argc < (uint32_t)-c->arity)) {
        lower_name(c->name, name, sizeof(name));
        req_error(p, req, "ERR wrong number of arguments for '%s' command", name);
        return 0;
    }
    if (!(p->flags & PROTO_PF_AUTHED) && !(c->flags & REDIS_CMD_NOAUTH)) {
        req_static_error(req, ERR_NOAUTH);
        return 0;
    }
    if ((p->flags & (PROTO_PF_SUBSCRIBED | PROTO_PF_VARIANT)) == PROTO_PF_SUBSCRIBED &&
        !(c->flags & REDIS_CMD_SUBOK)) {
        /* RESP2 subscribed mode, as Redis's processCommand; RESP3 has no such limit */
        lower_name(c->name, name, sizeof(name));
        req_error(p, req, "ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / "
                  "PING / QUIT / RESET are allowed in this context", name);
        return 0;
    }
    if (c->flags & REDIS_CMD_WRITE)
        req->flags |= PROTO_RF_WRITE;
    if ((c->flags & REDIS_CMD_CLOCAL) && (p->flags & PROTO_PF_CLUSTER)) {
        if (p->flags & PROTO_PF_ATOMIC) {
            not_in_multi(p, req, c, "the proxy answers it itself");
            return 0;
        }
        req->kind = PROTO_REQ_LOCAL;        /* a cluster pool's one-node cluster */
        return 0;
    }
    if ((c->flags & REDIS_CMD_REFUSED) ||
        ((c->flags & REDIS_CMD_FLUSH) && !(p->flags & PROTO_PF_ALLOW_FLUSH))) {
        size_t i;
        for (i = 0; c->name[i] != '\0' && i + 1 < sizeof(name); i++)
            name[i] = c->name[i] == '|' ? ' ' : c->name[i];
        name[i] = '\0';
        req_error(p, req, "ERR command '%s' is not supported by ringleader", name);
        return 0;
    }
    if ((c->flags & REDIS_CMD_DBOPT) && has_db_option(buf, c, args, argc)) {
        req_error(p, req, "ERR %s's DB option is not supported by ringleader "
                  "(it writes another database, which the pool never reads)", c->name);
        return 0;
    }
    if ((c->flags & REDIS_CMD_SCRIPT) && (p->flags & PROTO_PF_DENY_SCRIPTS)) {
        req_error(p, req, "ERR command '%s' is not allowed through this proxy "
                  "(the pool has scripts: false)", c->name);
        return 0;
    }
    int atomic = (p->flags & PROTO_PF_ATOMIC) != 0;
    if (REDIS_CMD_SESSION(c) != REDIS_SESS_NONE) {
        int r = req_session(p, buf, c, args, argc, req);
        if (r != 0)
            return r - 1;
    }
    if ((c->flags & REDIS_CMD_SUB(0x07)) != 0) {
        if (atomic) {
            not_in_multi(p, req, c, "the proxy keeps a client's subscriptions");
            return 0;
        }
        /* the names are every argument after the command's (keys[k] is read from k + 1) */
        for (uint32_t i = 1; i < argc; i++)
            p->keys[i - 1] = args[i];
        req->kind = PROTO_REQ_SUBSCRIBE;
        req->sub = REDIS_CMD_SUB_OF(c->flags);
        req->nkeys = argc - 1;
        return 0;
    }
    if (c->flags & REDIS_CMD_LOCAL) {
        if (c->local == REDIS_LOCAL_RESET)
            req->sess |= PROTO_SS_RESET;
        if (atomic && c->local != REDIS_LOCAL_QUIT && c->local != REDIS_LOCAL_RESET) {
            not_in_multi(p, req, c, "the proxy answers it itself");
            return 0;
        }
        req->kind = PROTO_REQ_LOCAL;
        if (c->local == REDIS_LOCAL_QUIT)
            req->flags |= PROTO_RF_CLOSE;
        return 0;
    }
    if (c->flags & (REDIS_CMD_BROADCAST | REDIS_CMD_FLUSH | REDIS_CMD_CURSOR)) {
        if (atomic) {
            not_in_multi(p, req, c, "it needs every server");
            return 0;
        }
        if (c->flags & REDIS_CMD_CURSOR)
            return req_cursor(p, buf, args, req);
        req->kind = PROTO_REQ_BROADCAST;
        return 0;
    }

    const char *err = NULL;
    int nokey;
    int n = keys_extract(c, args, argc, buf, p->keys, &nokey, &err);
    if (atomic && (n <= 0 || nokey)) {
        /* Inside MULTI Redis queues what it cannot check yet (bad numkeys, a
         * script without keys) and answers at EXEC: so does its server. */
        req->kind = PROTO_REQ_SESSION;
        return 0;
    }
    if (n == -2 && c->local != REDIS_LOCAL_NONE) {
        req->kind = PROTO_REQ_LOCAL;    /* keys it may go without (PUBSUB NUMSUB) */
        return 0;
    }
    if (n == -2 || n == 0) {
        lower_name(c->name, name, sizeof(name));
        req_error(p, req, "ERR wrong number of arguments for '%s' command", name);
        return 0;
    }
    if (n == -3) {
        lower_name(c->name, name, sizeof(name));
        req_error(p, req, "ERR at least 1 input key is needed for '%s' command", name);
        return 0;
    }
    if (n < 0) {
        req_static_error(req, err);
        return 0;
    }
    req->nkeys = (uint32_t)n;
    if (nokey)
        req->flags |= PROTO_RF_NOKEY;
    if (c->flags & REDIS_CMD_HIT)
        req->flags |= PROTO_RF_RETRIEVAL;
    if (c->flags & REDIS_CMD_CHANNEL)
        req->flags |= PROTO_RF_CHANNEL;
    if (n == 1)
        req->kind = PROTO_REQ_SINGLE;
    else if (c->flags & REDIS_CMD_FANOUT)
        req->kind = PROTO_REQ_FANOUT;
    else
        req->kind = PROTO_REQ_SAME;
    return 0;
}

/* Classify, and inside MULTI mark the refusals that spoil the transaction (Redis
 * flags it for an unknown command, a wrong arity, a missing AUTH ...). */
static void req_classify_all(struct proto_parser *p, const char *buf, uint32_t argc,
                             struct proto_req *req)
{
    int keeps = req_classify(p, buf, argc, req);
    if (req->kind == PROTO_REQ_ERROR && (p->flags & PROTO_PF_ATOMIC) && !keeps)
        req->sess |= PROTO_SS_SPOIL;
}

/* ---------------------------------------------------------- parse_req */

/* Finish a request spanning buf[start..end) with argc arguments recorded
 * in p->keys as offsets into base (buf, or an inline request's RESP). */
static int req_done(struct proto_parser *p, const char *base, size_t start, size_t end,
                    uint32_t argc, struct proto_req *req)
{
    req_reset(p);
    req->hdr_len = (uint32_t)end;
    req->u.redis.start = (uint32_t)start;
    req->u.redis.argc = argc;
    req_classify_all(p, base, argc, req);
    req->keys = p->keys;
    return (int)end;
}

/*
 * A request whose last argument (n bytes at data) is large and still
 * arriving: classify it now with the bytes of that argument that are here,
 * and when it goes to one server and that argument is not a key, end its
 * header at the argument's data and make the argument (and its CRLF, which
 * Redis skips unread as the proxy does) the body, so that the core can
 * forward it as it arrives. A refusal (unknown command, arity, NOAUTH ...)
 * is returned the same way, its body to be dropped. Returns 1 with req
 * filled in, 0 to wait for the whole request as usual (nothing changed).
 */
static int req_split_body(struct proto_parser *p, const char *buf, size_t len, size_t start,
                          size_t data, uint64_t n, uint32_t argc, struct proto_req *req)
{
    uint32_t last = argc - 1;
    p->keys[last].off = (uint32_t)data;
    p->keys[last].len = (uint32_t)RL_MIN((uint64_t)(len - data), n);  /* what is here */
    req_classify_all(p, buf, argc, req);
    int ok = req->kind == PROTO_REQ_ERROR || req->kind == PROTO_REQ_SINGLE;
    for (uint32_t k = 0; ok && req->kind == PROTO_REQ_SINGLE && k < req->nkeys; k++)
        ok = p->keys[k].off != (uint32_t)data;
    if (!ok) {
        uint16_t cmd = REDIS_CMD_NONE;
        memset(req, 0, sizeof(*req));
        req->cmd = cmd;
        req->keys = p->keys;
        return 0;
    }
    req_reset(p);
    req->hdr_len = (uint32_t)data;
    req->body_len = n + 2;
    req->u.redis.start = (uint32_t)start;
    req->u.redis.argc = argc;
    req->keys = p->keys;
    return 1;
}

static size_t dec_digits(uint64_t v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/*
 * An inline request: the line at buf[pos..], split as Redis splits it and
 * re-encoded as a RESP array in p->dec (after the decoded arguments, which
 * it is written from): req->u.redis.inl. keys[] are offsets into it.
 */
static int parse_inline(struct proto_parser *p, const char *buf, size_t len, size_t pos,
                        struct proto_req *req)
{
    const char *nl = memchr(buf + pos, '\n', len - pos);
    size_t eol = nl ? (size_t)(nl - buf) : len;
    /* Redis finds the '\n' with strchr: past a NUL it never finds it and
     * waits on that connection for good. Refuse at once instead. */
    if (memchr(buf + pos, '\0', eol - pos) != NULL)
        return req_fatal(p, req, ERR_INLINE_NUL);
    if (eol - pos > REDIS_MAX_INLINE)
        return req_fatal(p, req, ERR_BIG_INLINE);
    if (nl == NULL)
        return 0;
    size_t end = eol;
    if (end > pos && buf[end - 1] == '\r')
        end--;

    /* Decoded arguments: at most the line's bytes, at most one argument
     * per two bytes of line. */
    size_t n = end - pos;
    uint32_t maxargs = (uint32_t)(n / 2 + 1);
    if (proto__keys_reserve(p, maxargs) < 0 || proto__dec_reserve(p, (uint32_t)n + 1) < 0)
        return req_fatal(p, req, ERR_OOM);
    int64_t argc = inline_split(buf + pos, n, p->dec, p->keys, maxargs);
    if (argc < 0)
        return req_fatal(p, req, ERR_UNBALANCED);
    if (argc == 0)              /* the caller skips blank lines: cannot happen */
        return req_fatal(p, req, ERR_UNBALANCED);
    size_t resp = 1 + dec_digits((uint64_t)argc) + 2;
    for (int64_t a = 0; a < argc; a++)
        resp += 1 + dec_digits(p->keys[a].len) + 2 + p->keys[a].len + 2;
    if (n + resp > UINT32_MAX / 2 || proto__dec_reserve(p, (uint32_t)(n + resp)) < 0)
        return req_fatal(p, req, ERR_OOM);
    char *w = p->dec + n;
    w += sprintf(w, "*%" PRId64 "\r\n", argc);
    for (int64_t a = 0; a < argc; a++) {
        struct proto_key *k = &p->keys[a];
        w += sprintf(w, "$%" PRIu32 "\r\n", k->len);
        memmove(w, p->dec + k->off, k->len);
        k->off = (uint32_t)(w - (p->dec + n));
        w += k->len;
        *w++ = '\r';
        *w++ = '\n';
    }
    req->u.redis.inl = p->dec + n;
    req->u.redis.inl_len = (uint32_t)resp;
    int rc = req_done(p, req->u.redis.inl, pos, eol + 1, (uint32_t)argc, req);
    if (req->nkeys > 0)
        req->flags |= PROTO_RF_KEYBYTES;    /* keys are in the re-encoding, not in buf */
    return rc;
}

/* Find the end of the header line starting at pos ("*3\r\n", "$5\r\n"):
 * the offset of its '\r' (Redis reads the byte after it as the '\n'
 * whatever it is, and so does the proxy), 0 if incomplete, -1 if longer
 * than Redis allows, -2 if incomplete with a NUL in it: Redis looks for the
 * '\r' with strchr, which stops at the NUL, and would wait forever. */
static inline int64_t header_line(const char *buf, size_t len, size_t pos)
{
    const char *cr = memchr(buf + pos, '\r', len - pos);
    if (cr == NULL || (size_t)(cr - buf) + 1 >= len) {
        if (memchr(buf + pos, '\0', len - pos) != NULL)
            return -2;
        if (len - pos > REDIS_MAX_INLINE)
            return -1;
        return 0;
    }
    return cr - buf;
}

/* A complete header line buf[pos..cr) Redis would not have read to its
 * '\r' (a NUL in it) gets ERR_HDR_NUL, else err: the proxy tells the NUL
 * apart only once a line is refused, off the common path. */
static int header_refused(struct proto_parser *p, struct proto_req *req, const char *buf,
                          size_t pos, int64_t cr, const char *err)
{
    if (memchr(buf + pos, '\0', (size_t)cr - pos) != NULL)
        return req_fatal(p, req, ERR_HDR_NUL);
    return req_fatal(p, req, err);
}

/* Redis's reply to a multibulk whose next argument does not start with
 * '$', byte for byte: its text with the offending byte, a CR or LF shown as
 * a space (Redis maps them so the reply stays one line), any other byte,
 * a NUL included, as it is. */
static int req_expected_dollar(struct proto_parser *p, struct proto_req *req, char got)
{
    static const char head[] = "-ERR Protocol error: expected '$', got '";
    char *e = p->u.redis.err;
    size_t n = sizeof(head) - 1;
    memcpy(e, head, n);
    e[n++] = (got == '\r' || got == '\n') ? ' ' : got;
    memcpy(e + n, "'\r\n", 3);
    return req_fatal_n(p, req, e, n + 3);
}

static int redis_parse_req(struct proto_parser *p, const char *buf, size_t len,
                           struct proto_req *req)
{
    struct proto_redis_parser *r = &p->u.redis;
    size_t pos = 0, start;
    uint64_t argc, done;
    int authed = (p->flags & PROTO_PF_AUTHED) != 0;

    memset(req, 0, sizeof(*req));
    req->cmd = REDIS_CMD_NONE;
    req->keys = p->keys;

    if (r->state == REQ_MULTIBULK) {
        argc = r->argc;
        done = r->done;
        start = r->start;
        pos = r->scan;
        goto args;
    }

    for (;;) {                  /* skip empty requests */
        if (pos >= len)
            return 0;
        if (buf[pos] != '*') {
            size_t i = pos;
            while (i < len && buf[i] != '\n' && is_space(buf[i]))
                i++;        /* the blanks sdssplitargs skips */
            if (i < len && buf[i] == '\n') {
                pos = i + 1;    /* a blank line: Redis ignores it */
                continue;
            }
            return parse_inline(p, buf, len, pos, req);
        }
        int64_t cr = header_line(buf, len, pos);
        if (cr == -1)
            return req_fatal(p, req, ERR_BIG_MBULK);
        if (cr == -2)
            return req_fatal(p, req, ERR_HDR_NUL);
        if (cr == 0)
            return 0;
        int64_t n;
        if (parse_num(buf + pos + 1, (size_t)cr - pos - 1, &n) < 0 || n > (int64_t)REDIS_MAX_ARGS)
            return header_refused(p, req, buf, pos, cr, ERR_MBULK);
        if (!authed && n > (int64_t)REDIS_UNAUTH_MAX_ARGS)
            return req_fatal(p, req, ERR_UNAUTH_MBULK);
        if (n <= 0) {
            pos = (size_t)cr + 2;   /* "*0" and "*-1" are ignored, as Redis does */
            continue;
        }
        start = pos;
        argc = (uint64_t)n;
        done = 0;
        pos = (size_t)cr + 2;
        break;
    }

args:
    while (done < argc) {
        if (pos >= len)
            goto more;
        /* Redis's order: the line first (a NUL anywhere from here to its
         * '\r', the first byte included, would make it wait forever), then
         * the '$', then the number. */
        int64_t cr = header_line(buf, len, pos);
        if (cr == -1)
            return req_fatal(p, req, ERR_BIG_BULK);
        if (cr == -2)
            return req_fatal(p, req, ERR_HDR_NUL);
        if (cr == 0)
            goto more;
        if (buf[pos] != '$') {
            if (memchr(buf + pos, '\0', (size_t)cr - pos) != NULL)
                return req_fatal(p, req, ERR_HDR_NUL);
            return req_expected_dollar(p, req, buf[pos]);
        }
        int64_t n;
        if (parse_num(buf + pos + 1, (size_t)cr - pos - 1, &n) < 0 || n < 0 ||
            n > (int64_t)REDIS_MAX_BULK)
            return header_refused(p, req, buf, pos, cr, ERR_BULK);
        if (!authed && n > (int64_t)REDIS_UNAUTH_MAX_BULK)
            return req_fatal(p, req, ERR_UNAUTH_BULK);
        size_t data = (size_t)cr + 2;
        size_t next = data + (size_t)n + 2;
        if (next - start > REDIS_MAX_REQ)
            return req_fatal(p, req, ERR_BIG_REQ);
        if (proto__keys_reserve(p, (uint32_t)done + 1) < 0)
            return req_fatal(p, req, ERR_OOM);
        if (next > len) {
            if (done + 1 == argc && p->body_min != 0 && (uint64_t)n >= p->body_min &&
                req_split_body(p, buf, len, start, data, (uint64_t)n, (uint32_t)argc, req))
                return (int)data;
            goto more;          /* the "$<n>" line is read again next time: bounded */
        }
        p->keys[done].off = (uint32_t)data;
        p->keys[done].len = (uint32_t)n;
        done++;
        pos = next;
    }
    return req_done(p, buf, start, pos, (uint32_t)argc, req);

more:
    r->state = REQ_MULTIBULK;
    r->argc = (uint32_t)argc;
    r->done = (uint32_t)done;
    r->start = (uint32_t)start;
    r->scan = (uint32_t)pos;
    req->keys = p->keys;
    return 0;
}

/* ---------------------------------------------------------- parse_rsp */

#define RSP_IDLE      0
#define RSP_ARRAY     1
#define RSP_LINE_MAX  (64u * 1024)   /* +simple / -error / :int / $ / * lines */

/*
 * Replies are RESP2 or RESP3 (a client that said HELLO 3 has server connections that
 * did too): every type Redis 7.0 sends is known, and each reply's end is found in place.
 *
 *   line types    + simple  - error  : integer  _ null  # boolean  , double  ( big number
 *   length types  $ bulk ($-1 null)  ! blob error  = verbatim (a "txt:" prefix in its data)
 *   aggregates    * array (*-1 null)  ~ set  > push  % map (2n elements)
 *                 | attribute: 2n elements annotating the element that follows it
 *
 * Streamed strings and aggregates ($?, *? ...) are in the RESP3 specification but Redis
 * never sends them; like anything else that is not a reply, they close the connection.
 */

/*
 * The usual form of a bulk, array, push or integer line at buf[at..len): 1 to 18 digits,
 * the first not 0, then CRLF ("$100", "*3"), which string2ll reads as the same number.
 * Returns the offset of its '\n' with *n set, or 0 for any other type or form or a line
 * not all here (the caller's memchr and parse_num decide those). Saves both on most
 * header lines.
 */
static inline size_t rsp_count(const char *buf, size_t len, size_t at, int64_t *n)
{
    char t = buf[at];
    if (t != '$' && t != '*' && t != ':' && t != '>')
        return 0;
    size_t i = at + 1, end = len - i < 18 ? len : i + 18;
    if (i >= end || buf[i] < '1' || buf[i] > '9')
        return 0;
    int64_t v = buf[i++] - '0';
    while (i < end && buf[i] >= '0' && buf[i] <= '9')
        v = v * 10 + (buf[i++] - '0');
    if (i + 1 >= len || buf[i] != '\r' || buf[i + 1] != '\n')
        return 0;
    *n = v;
    return i + 1;
}

/* A line type's payload other than the RESP2 ones the callers read first: "_" empty, "#"
 * one of t f; doubles and big numbers are passed through unread. */
static int rsp_line_ok(char t, const char *num, size_t numlen)
{
    switch (t) {
    case ',': case '(':
        return 1;
    case '_':
        return numlen == 0;
    case '#':
        return numlen == 1 && (num[0] == 't' || num[0] == 'f');
    default:
        return 0;
    }
}

/*
 * Skip whole RESP elements from *pos until *pending reaches 0. An aggregate
 * adds its element count to *pending (a map's and an attribute's are pairs;
 * an attribute annotates the element after it and is none itself), so nested
 * aggregates need no stack and a reply claiming 2^31 elements costs nothing
 * until they arrive.
 * Returns 1 when *pending is 0, 0 when more bytes are needed (*pos and
 * *pending describe the elements completed so far), -1 on garbage.
 */
static int rsp_scan(const char *buf, size_t len, size_t *pos, uint64_t *pending)
{
    size_t at = *pos;
    uint64_t left = *pending;
    int rc = 1;

    while (left > 0) {
        if (at >= len) {
            rc = 0;
            break;
        }
        int64_t n;
        size_t eol = rsp_count(buf, len, at, &n);     /* the '\n' */
        int counted = eol != 0;                         /* n is the line's number */
        if (!counted) {
            size_t room = len - at < RSP_LINE_MAX ? len - at : RSP_LINE_MAX;
            const char *nl = memchr(buf + at, '\n', room);
            if (nl == NULL) {
                if (room >= RSP_LINE_MAX)
                    return -1;
                rc = 0;
                break;
            }
            eol = (size_t)(nl - buf);
            if (eol < at + 2 || buf[eol - 1] != '\r')
                return -1;
        }
        const char *num = buf + at + 1;
        size_t numlen = eol - 1 - at - 1;
        char t = buf[at];
        switch (t) {
        case '+':
        case '-':
            at = eol + 1;
            break;
        case ':':
            if (!counted && parse_num(num, numlen, &n) < 0)
                return -1;
            at = eol + 1;
            break;
        case '$':
        case '!':
        case '=':
            if ((!counted && parse_num(num, numlen, &n) < 0) || n < (t == '$' ? -1 : 0) ||
                n > (int64_t)REDIS_MAX_BULK)
                return -1;
            if (n >= 0) {
                size_t end = eol + 1 + (size_t)n + 2;
                if (end > len) {
                    rc = 0;
                    goto out;
                }
                if (buf[end - 2] != '\r' || buf[end - 1] != '\n')
                    return -1;
                at = end;
            } else {
                at = eol + 1;
            }
            break;
        case '*':
        case '~':
        case '>':
        case '%':
        case '|':
            if ((!counted && parse_num(num, numlen, &n) < 0) || n < (t == '*' ? -1 : 0) ||
                n > INT32_MAX)
                return -1;
            at = eol + 1;
            if (n > 0)
                left += (t == '%' || t == '|') ? 2 * (uint64_t)n : (uint64_t)n;
            if (t == '|')
                continue;           /* annotates the next element: not one itself */
            break;
        default:
            if (!rsp_line_ok(t, num, numlen))
                return -1;
            at = eol + 1;
            break;
        }
        left--;
    }
out:
    *pos = at;
    *pending = left;
    return rc;
}

static int rsp_line(const char *buf, size_t len, size_t *eol)
{
    size_t room = len < RSP_LINE_MAX ? len : RSP_LINE_MAX;
    const char *nl = memchr(buf, '\n', room);
    if (nl == NULL)
        return room >= RSP_LINE_MAX ? -1 : 0;
    *eol = (size_t)(nl - buf);
    if (*eol < 2 || buf[*eol - 1] != '\r')
        return -1;
    return 1;
}

/* Whether the whole aggregate buf[0..len) (header line ending at eol) is a pub/sub message
 * on a subscribed connection: its first element is "message", "pmessage" or "smessage"
 * (subscribe confirmations and the rest are replies to what was asked). */
static int rsp_is_message(const char *buf, size_t len, size_t eol)
{
    const char *e = buf + eol + 1;
    size_t n = len - eol - 1;
    return (n >= 13 && memcmp(e, "$7\r\nmessage\r\n", 13) == 0) ||
           (n >= 14 && (memcmp(e, "$8\r\npmessage\r\n", 14) == 0 ||
                        memcmp(e, "$8\r\nsmessage\r\n", 14) == 0));
}

/*
 * One unit per reply: every line type and every aggregate is one unit of hdr_len bytes;
 * a top-level bulk string, blob error or verbatim string is its "$<n>\r\n" line with
 * body_len = n + 2, so a large value streams through. An aggregate still incomplete after
 * REDIS_RSP_UNIT_MAX bytes of whole elements is handed over in units of whole elements,
 * except on a subscribed connection (PROTO_PF_SUBSCRIBED), where each aggregate is one
 * whole unit and a message is marked PROTO_SF_PUSH, as a top-level RESP3 push always is.
 * State between calls (an incomplete aggregate): p->u.redis.state RSP_ARRAY,
 * p->u.redis.pending the elements still pending, p->u.redis.scan the bytes of whole
 * elements already walked.
 */
static int redis_parse_rsp(struct proto_parser *p, const char *buf, size_t len, uint16_t cmd,
                           uint16_t rflags, struct proto_rsp *rsp)
{
    size_t pos, eol;
    uint64_t pending;
    int64_t n;
    int r, counted;             /* counted: n is the header line's number (rsp_count) */
    char top;                   /* the unit's type byte; 0 for the rest of a split aggregate */

    (void)cmd;
    memset(rsp, 0, sizeof(*rsp));
    if (p->u.redis.state == RSP_ARRAY) {
        pos = p->u.redis.scan;
        pending = p->u.redis.pending;
        top = pos == 0 ? 0 : buf[0];
        goto scan;
    }
    if (len == 0)
        return 0;
    if (len >= 5 && memcmp(buf, "+OK\r\n", 5) == 0) {
        rsp->hdr_len = 5;       /* the commonest reply of all (SET), without a line scan */
        rsp->flags = PROTO_SF_FINAL;
        return 5;
    }
    eol = rsp_count(buf, len, 0, &n);
    counted = eol != 0;
    if (!counted) {
        r = rsp_line(buf, len, &eol);
        if (r <= 0)
            return r;
    }
    top = buf[0];
    switch (top) {
    case '$':                   /* RESP2's types first: the common replies */
        if ((!counted && parse_num(buf + 1, eol - 2, &n) < 0) || n < -1)
            return -1;
        if (n >= 0) {
            rsp->body_len = (uint64_t)n + 2;
            if (rflags & PROTO_RF_RETRIEVAL)
                rsp->flags |= PROTO_SF_ITEM;
        }
        break;
    case '+':
        break;
    case '-':
        rsp->flags |= PROTO_SF_ERROR;
        if ((p->flags & PROTO_PF_CLUSTER) && redis__cluster_error(buf, eol))
            rsp->flags |= PROTO_SF_CLUSTER;
        break;
    case ':':
        if (!counted && parse_num(buf + 1, eol - 2, &n) < 0)
            return -1;
        break;
    case '*':
    case '~':
    case '>':
    case '%':
    case '|':
        if ((!counted && parse_num(buf + 1, eol - 2, &n) < 0) || n < (top == '*' ? -1 : 0) ||
            n > INT32_MAX)
            return -1;
        if (n > 0 || top == '|') {
            pos = eol + 1;
            pending = (uint64_t)(n > 0 ? n : 0) * ((top == '%' || top == '|') ? 2u : 1u) +
                      (top == '|');
            goto scan;
        }
        if (top == '>')
            rsp->flags |= PROTO_SF_PUSH;
        break;
    case '!':
    case '=':
        if ((!counted && parse_num(buf + 1, eol - 2, &n) < 0) || n < 0)
            return -1;
        if (top == '!')
            rsp->flags |= PROTO_SF_ERROR;
        rsp->body_len = (uint64_t)n + 2;
        break;
    default:
        if (!rsp_line_ok(top, buf + 1, eol - 2))
            return -1;
        break;
    }
    rsp->hdr_len = (uint32_t)(eol + 1);
    rsp->flags |= PROTO_SF_FINAL;
    return (int)rsp->hdr_len;

scan:
    r = rsp_scan(buf, len, &pos, &pending);
    if (r < 0) {
        p->u.redis.state = RSP_IDLE;
        p->u.redis.scan = 0;
        p->u.redis.pending = 0;
        return -1;
    }
    if (r == 1) {
        p->u.redis.state = RSP_IDLE;
        p->u.redis.scan = 0;
        p->u.redis.pending = 0;
        rsp->hdr_len = (uint32_t)pos;
        rsp->flags |= PROTO_SF_FINAL;
        if (p->flags & PROTO_PF_SUBSCRIBED) {
            /* messages are out of band; confirmations (RESP3 pushes too) are replies */
            if ((top == '*' || top == '>') && rsp_line(buf, pos, &eol) == 1 &&
                rsp_is_message(buf, pos, eol))
                rsp->flags |= PROTO_SF_PUSH;
        } else if (top == '>') {
            rsp->flags |= PROTO_SF_PUSH;
        }
        return (int)pos;
    }
    if (pos >= REDIS_RSP_UNIT_MAX && !(p->flags & PROTO_PF_SUBSCRIBED) && top != '>') {
        /* Hand over the whole elements so far; the rest of the aggregate
         * continues from offset 0 of the next call's buffer. */
        p->u.redis.state = RSP_ARRAY;
        p->u.redis.scan = 0;
        p->u.redis.pending = pending;
        rsp->hdr_len = (uint32_t)pos;
        return (int)pos;
    }
    p->u.redis.state = RSP_ARRAY;
    p->u.redis.scan = (uint32_t)pos;
    p->u.redis.pending = pending;
    return 0;
}

/* ------------------------------------------------- forward / fragments */

/* The bytes key offsets and arguments of req are relative to. */
static const char *req_base(const struct proto_req *req, const char *buf)
{
    return req->u.redis.inl != NULL ? req->u.redis.inl : buf;
}

/* A RESP request as it came (less the empty requests before it); an inline
 * one as its RESP re-encoding. 0 or -ENOMEM. */
static int redis_forward(const struct proto_req *req, const char *buf, struct buf *out)
{
    if (req->u.redis.inl != NULL)
        return buf_append(out, req->u.redis.inl, req->u.redis.inl_len);
    size_t start = req->u.redis.start;
    return buf_append(out, buf + start, req->hdr_len - start);
}

/* proto_ops.key_bytes: a key's bytes as the server reads them. */
static const char *redis_key_bytes(const struct proto_req *req, const char *buf, uint32_t k,
                                   char *dec, size_t *len)
{
    (void)dec;
    *len = req->keys[k].len;
    return req_base(req, buf) + req->keys[k].off;
}

static int append_bulk(struct buf *out, const char *s, size_t n)
{
    if (buf_appendf(out, "$%zu\r\n", n) < 0 || buf_append(out, s, n) < 0 ||
        buf_append(out, "\r\n", 2) < 0)
        return -ENOMEM;
    return 0;
}

int redis__text(const char *d, size_t len, const char **text, size_t *tlen)
{
    size_t eol;
    int64_t n;
    if (len == 0 || (d[0] != '$' && d[0] != '=') || rsp_line(d, len, &eol) != 1 ||
        parse_num(d + 1, eol - 2, &n) < 0 || n < 0 || eol + 1 + (size_t)n + 2 > len)
        return -1;
    *text = d + eol + 1;
    *tlen = (size_t)n;
    if (d[0] == '=') {
        if (n < 4)
            return -1;
        *text += 4;             /* "txt:" */
        *tlen -= 4;
    }
    return 0;
}

int redis__append_text(struct buf *out, int verbatim, const char *s, size_t n)
{
    if (!verbatim)
        return append_bulk(out, s, n);
    if (buf_appendf(out, "=%zu\r\ntxt:", n + 4) < 0 || buf_append(out, s, n) < 0 ||
        buf_append(out, "\r\n", 2) < 0)
        return -ENOMEM;
    return 0;
}

/* The argument following key k in the request (MSET's value): in RESP,
 * whether as sent or re-encoded from an inline line, the next "$<n>". */
static int arg_after(const struct proto_req *req, const char *buf, const struct proto_key *k,
                     struct proto_key *v)
{
    const char *base = req_base(req, buf);
    size_t at = (size_t)k->off + k->len + 2;    /* past the key's CRLF */
    size_t end = req->u.redis.inl != NULL ? req->u.redis.inl_len : req->hdr_len;

    if (at >= end)
        return -1;
    buf = base;
    int64_t cr = header_line(buf, end, at);
    int64_t n;
    if (cr <= 0 || buf[at] != '$' || parse_num(buf + at + 1, (size_t)cr - at - 1, &n) < 0)
        return -1;
    v->off = (uint32_t)(cr + 2);
    v->len = (uint32_t)n;
    return 0;
}

/* SCAN for the server the pool cursor names: its own cursor in place of the
 * pool's, every other argument as the client sent it. 0 or -ENOMEM. */
static int scan_write(const struct proto_req *req, const char *buf, struct buf *out)
{
    const char *base = req_base(req, buf);
    char num[24];
    int nl = snprintf(num, sizeof(num), "%" PRIu64, req->u.redis.cursor);

    if (buf_appendf(out, "*%" PRIu32 "\r\n", req->u.redis.argc) < 0)
        return -ENOMEM;
    for (uint32_t i = 0; i < req->u.redis.argc; i++) {
        const struct proto_key *a = &req->keys[i];
        if (i == 1 ? append_bulk(out, num, (size_t)nl) < 0
                   : append_bulk(out, base + a->off, a->len) < 0)
            return -ENOMEM;
    }
    return 0;
}

static int redis_frag_write(const struct proto_req *req, const char *buf, const uint32_t *idx,
                            uint32_t n, struct buf *out)
{
    if (req->cmd >= redis_ncommands)
        return -EINVAL;
    const struct redis_command *c = &redis_commands[req->cmd];
    if (c->flags & REDIS_CMD_CURSOR)
        return scan_write(req, buf, out);
    uint32_t per = c->step > 1 ? 2 : 1;
    const char *bar = strchr(c->name, '|');     /* a subcommand: PUBSUB NUMSUB */
    size_t nl = bar != NULL ? (size_t)(bar - c->name) : strlen(c->name);

    if (buf_appendf(out, "*%" PRIu64 "\r\n", 1 + (bar != NULL) + (uint64_t)n * per) < 0 ||
        append_bulk(out, c->name, nl) < 0 || (bar != NULL && append_bulk(out, bar + 1, strlen(bar + 1)) < 0))
        return -ENOMEM;
    const char *base = req_base(req, buf);
    for (uint32_t i = 0; i < n; i++) {
        const struct proto_key *k = &req->keys[idx[i]];
        if (append_bulk(out, base + k->off, k->len) < 0)
            return -ENOMEM;
        if (per == 2) {
            struct proto_key v;
            if (arg_after(req, buf, k, &v) < 0)
                return -EINVAL;
            if (append_bulk(out, base + v.off, v.len) < 0)
                return -ENOMEM;
        }
    }
    return 0;
}

/* ----------------------------------------------------------------- merge */

int64_t redis__element_end(const char *buf, size_t len, size_t pos)
{
    uint64_t pending = 1;
    if (rsp_scan(buf, len, &pos, &pending) != 1)
        return -1;
    return (int64_t)pos;
}

/* Copy the first fragment reply that is an error; 1 if one was, 0 if none. */
static int merge_first_error(struct buf *const *frag, uint32_t nfrag, struct buf *out, int *rc)
{
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t len = buf_len(frag[f]);
        if (len > 0 && (d[0] == '-' || d[0] == '!')) {
            int64_t end = redis__element_end(d, len, 0);
            *rc = end < 0 ? -1 : buf_append(out, d, (size_t)end);
            return 1;
        }
    }
    return 0;
}

/* MGET (per 1): one array of the fragments' elements in the client's key order; PUBSUB
 * NUMSUB (per 2): the [channel, count] pairs in that order. */
static int merge_array(uint32_t per, uint32_t nkeys, const uint32_t *key_frag,
                       struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    size_t stack_pos[32];
    uint64_t stack_left[32];
    size_t *fpos = stack_pos;
    uint64_t *fleft = stack_left;
    int rc = -1;

    if (key_frag == NULL)
        return -1;
    if (nfrag > RL_ARRAY_SIZE(stack_pos)) {
        fpos = malloc(nfrag * sizeof(*fpos));
        fleft = malloc(nfrag * sizeof(*fleft));
        if (fpos == NULL || fleft == NULL) {
            rc = -ENOMEM;
            goto out;
        }
    }
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t len = buf_len(frag[f]), eol;
        int64_t n;
        if (len == 0 || d[0] != '*' || rsp_line(d, len, &eol) != 1 ||
            parse_num(d + 1, eol - 2, &n) < 0 || n < 0)
            goto out;
        fpos[f] = eol + 1;
        fleft[f] = (uint64_t)n;
    }
    if (buf_appendf(out, "*%" PRIu64 "\r\n", (uint64_t)nkeys * per) < 0) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < nkeys; i++) {
        uint32_t f = key_frag[i];
        if (f >= nfrag || fleft[f] < per)
            goto out;
        const char *d = buf_rptr(frag[f]);
        size_t at = fpos[f];
        for (uint32_t e = 0; e < per; e++) {
            int64_t end = redis__element_end(d, buf_len(frag[f]), at);
            if (end < 0)
                goto out;
            at = (size_t)end;
        }
        if (buf_append(out, d + fpos[f], at - fpos[f]) < 0) {
            rc = -ENOMEM;
            goto out;
        }
        fpos[f] = at;
        fleft[f] -= per;
    }
    rc = 0;
    for (uint32_t f = 0; f < nfrag; f++)
        if (fleft[f] != 0)
            rc = -1;
out:
    if (fpos != stack_pos)
        free(fpos);
    if (fleft != stack_left)
        free(fleft);
    return rc;
}

static int merge_ok(struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t len = buf_len(frag[f]);
        if (len >= 5 && memcmp(d, "+OK\r\n", 5) == 0)
            continue;
        int64_t end = redis__element_end(d, len, 0);
        if (end < 0)
            return -1;
        return buf_append(out, d, (size_t)end);      /* the first reply that is not +OK */
    }
    return buf_append(out, "+OK\r\n", 5);
}

/* DEL, EXISTS ... (max 0): the integers summed. PUBSUB NUMPAT (max 1): the largest; a
 * pattern subscribed through the proxy is subscribed on every server, so each server
 * counts every such pattern and the largest count is the pool's. */
static int merge_ints(struct buf *const *frag, uint32_t nfrag, int max, struct buf *out)
{
    int64_t acc = 0;
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t len = buf_len(frag[f]), eol;
        int64_t n;
        if (len == 0 || d[0] != ':' || rsp_line(d, len, &eol) != 1 ||
            parse_num(d + 1, eol - 2, &n) < 0)
            return -1;
        if (max)
            acc = f == 0 || n > acc ? n : acc;
        else if (__builtin_add_overflow(acc, n, &acc))
            return -1;          /* no server counts past int64: malformed */
    }
    return buf_appendf(out, ":%" PRId64 "\r\n", acc);
}

/* KEYS: the servers' arrays as one. */
static int merge_concat(struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    uint64_t total = 0;
    size_t eol[nfrag ? nfrag : 1];

    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        int64_t n;
        if (d[0] != '*' || rsp_line(d, buf_len(frag[f]), &eol[f]) != 1 ||
            parse_num(d + 1, eol[f] - 2, &n) < 0 || n < 0)
            return -1;
        total += (uint64_t)n;
    }
    if (buf_appendf(out, "*%" PRIu64 "\r\n", total) < 0)
        return -ENOMEM;
    for (uint32_t f = 0; f < nfrag; f++)
        if (buf_append(out, buf_rptr(frag[f]) + eol[f] + 1, buf_len(frag[f]) - eol[f] - 1) < 0)
            return -ENOMEM;
    return 0;
}

/* SCRIPT EXISTS: an array of 0/1 per sha from each server; 1 only where every
 * server has the script (EVALSHA may run on any of them). */
static int merge_and(struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    const char *d0 = buf_rptr(frag[0]);
    size_t len0 = buf_len(frag[0]), eol;
    int64_t n;

    if (d0[0] != '*' || rsp_line(d0, len0, &eol) != 1 || parse_num(d0 + 1, eol - 2, &n) < 0 ||
        n < 0)
        return -1;
    size_t pos[nfrag];
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t e;
        if (buf_len(frag[f]) < eol + 1 || memcmp(d, d0, eol + 1) != 0 ||
            rsp_line(d, buf_len(frag[f]), &e) != 1)
            return -1;                  /* every server answers as many */
        pos[f] = e + 1;
    }
    if (buf_append(out, d0, eol + 1) < 0)
        return -ENOMEM;
    for (int64_t i = 0; i < n; i++) {
        int all = 1;
        for (uint32_t f = 0; f < nfrag; f++) {
            const char *d = buf_rptr(frag[f]) + pos[f];
            size_t left = buf_len(frag[f]) - pos[f], e;
            int64_t v;
            if (left == 0 || d[0] != ':' || rsp_line(d, left, &e) != 1 ||
                parse_num(d + 1, e - 2, &v) < 0)
                return -1;
            all &= v == 1;
            pos[f] += e + 1;
        }
        if (buf_append_str(out, all ? ":1\r\n" : ":0\r\n") < 0)
            return -ENOMEM;
    }
    return 0;
}

struct keyspace_db {
    uint64_t db, keys, expires, ttl_weighted;
};

/* Read "keys=1,expires=0,avg_ttl=0" style fields; missing ones stay 0. */
static uint64_t ks_field(const char *s, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i + nl < len; i++) {
        if ((i == 0 || s[i - 1] == ',' || s[i - 1] == ':') && memcmp(s + i, name, nl) == 0 &&
            s[i + nl] == '=') {
            uint64_t v = 0;
            for (size_t j = i + nl + 1; j < len && s[j] >= '0' && s[j] <= '9'; j++)
                v = v * 10 + (uint64_t)(s[j] - '0');
            return v;
        }
    }
    return 0;
}

static int merge_keyspace(struct buf *const *frag, uint32_t nfrag, int verbatim, struct buf *out)
{
    struct keyspace_db *dbs = NULL;
    size_t ndb = 0;
    struct buf body;
    int rc = -1;

    buf_init(&body);
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *s;
        size_t n;
        if (redis__text(buf_rptr(frag[f]), buf_len(frag[f]), &s, &n) < 0)
            goto out;
        const char *e = s + n;
        while (s < e) {
            const char *le = memchr(s, '\n', (size_t)(e - s));
            size_t ll = le ? (size_t)(le - s) : (size_t)(e - s);
            if (ll > 2 && memcmp(s, "db", 2) == 0 && s[2] >= '0' && s[2] <= '9') {
                uint64_t db = 0;
                size_t i = 2;
                while (i < ll && s[i] >= '0' && s[i] <= '9')
                    db = db * 10 + (uint64_t)(s[i++] - '0');
                size_t k;
                for (k = 0; k < ndb && dbs[k].db != db; k++)
                    ;
                if (k == ndb) {
                    struct keyspace_db *g = realloc(dbs, (ndb + 1) * sizeof(*dbs));
                    if (g == NULL) {
                        rc = -ENOMEM;
                        goto out;
                    }
                    dbs = g;
                    memset(&dbs[ndb++], 0, sizeof(*dbs));
                    dbs[k].db = db;
                }
                uint64_t ex = ks_field(s, ll, "expires");
                dbs[k].keys += ks_field(s, ll, "keys");
                dbs[k].expires += ex;
                dbs[k].ttl_weighted += ks_field(s, ll, "avg_ttl") * ex;
            }
            s += ll + 1;
        }
    }
    /* Redis lists the databases in order. */
    for (size_t i = 1; i < ndb; i++)
        for (size_t j = i; j > 0 && dbs[j - 1].db > dbs[j].db; j--) {
            struct keyspace_db t = dbs[j];
            dbs[j] = dbs[j - 1];
            dbs[j - 1] = t;
        }
    if (buf_append_str(&body, "# Keyspace\r\n") < 0)
        goto nomem;
    for (size_t i = 0; i < ndb; i++)
        if (buf_appendf(&body, "db%" PRIu64 ":keys=%" PRIu64 ",expires=%" PRIu64
                        ",avg_ttl=%" PRIu64 "\r\n", dbs[i].db, dbs[i].keys, dbs[i].expires,
                        dbs[i].expires ? dbs[i].ttl_weighted / dbs[i].expires : 0) < 0)
            goto nomem;
    rc = redis__append_text(out, verbatim, buf_rptr(&body), buf_len(&body));
    goto out;
nomem:
    rc = -ENOMEM;
out:
    free(dbs);
    buf_free(&body);
    return rc;
}

struct union_elem {
    const char *p;
    size_t      len;
};

static int union_bytes(const struct union_elem *x, const struct union_elem *y)
{
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

/* By name: an element's bytes after its header line ("$<n>\r\n"). */
static int union_cmp(const void *a, const void *b)
{
    struct union_elem x = *(const struct union_elem *)a, y = *(const struct union_elem *)b;
    const char *ex = memchr(x.p, '\n', x.len), *ey = memchr(y.p, '\n', y.len);
    if (ex != NULL && ey != NULL) {
        x.len -= (size_t)(ex + 1 - x.p);
        x.p = ex + 1;
        y.len -= (size_t)(ey + 1 - y.p);
        y.p = ey + 1;
    }
    return union_bytes(&x, &y);
}

/* PUBSUB CHANNELS / SHARDCHANNELS: every server's channels, each once (a channel is on its
 * owner through the proxy, but a backend's own clients may subscribe anywhere), sorted
 * (Redis lists them in its hash table's order, which no two servers share). */
static int merge_union(struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    struct union_elem *el = NULL;
    size_t nel = 0, cap = 0;
    int rc = -1;

    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t len = buf_len(frag[f]), eol;
        int64_t n;
        if (len == 0 || (d[0] != '*' && d[0] != '~') || rsp_line(d, len, &eol) != 1 ||
            parse_num(d + 1, eol - 2, &n) < 0 || n < 0)
            goto out;
        size_t at = eol + 1;
        for (int64_t i = 0; i < n; i++) {
            int64_t end = redis__element_end(d, len, at);
            if (end < 0)
                goto out;
            if (nel == cap) {
                size_t nc = cap ? cap * 2 : 64;
                struct union_elem *g = realloc(el, nc * sizeof(*el));
                if (g == NULL) {
                    rc = -ENOMEM;
                    goto out;
                }
                el = g;
                cap = nc;
            }
            el[nel].p = d + at;
            el[nel].len = (size_t)end - at;
            nel++;
            at = (size_t)end;
        }
    }
    if (nel > 1)
        qsort(el, nel, sizeof(*el), union_cmp);
    size_t uniq = 0;
    for (size_t i = 0; i < nel; i++)
        if (i == 0 || union_cmp(&el[i - 1], &el[i]) != 0)
            uniq++;
    rc = buf_appendf(out, "*%zu\r\n", uniq) < 0 ? -ENOMEM : 0;
    for (size_t i = 0; rc == 0 && i < nel; i++)
        if ((i == 0 || union_cmp(&el[i - 1], &el[i]) != 0) && buf_append(out, el[i].p, el[i].len) < 0)
            rc = -ENOMEM;
out:
    free(el);
    return rc;
}

static int redis_merge(uint16_t cmd, const char *reqbuf, const struct proto_key *keys,
                       uint32_t nkeys, const uint32_t *key_frag, struct buf *const *frag,
                       uint32_t nfrag, struct buf *out)
{
    size_t mark = out->wpos;
    int rc;

    (void)reqbuf;
    (void)keys;
    if (cmd >= redis_ncommands || nfrag == 0)
        return -1;
    /* A fragment's reply is never empty; checking that first also keeps
     * buf_rptr() off a buffer that was never allocated (NULL + 0). */
    for (uint32_t f = 0; f < nfrag; f++)
        if (buf_len(frag[f]) == 0)
            return -1;
    if (merge_first_error(frag, nfrag, out, &rc) == 0) {
        switch (redis_commands[cmd].merge) {
        case REDIS_MERGE_ARRAY:
            rc = merge_array(1, nkeys, key_frag, frag, nfrag, out);
            break;
        case REDIS_MERGE_PAIRS:
            rc = merge_array(2, nkeys, key_frag, frag, nfrag, out);
            break;
        case REDIS_MERGE_MAX:
            rc = merge_ints(frag, nfrag, 1, out);
            break;
        case REDIS_MERGE_UNION:
            rc = merge_union(frag, nfrag, out);
            break;
        case REDIS_MERGE_OK:
            rc = merge_ok(frag, nfrag, out);
            break;
        case REDIS_MERGE_SUM:
            rc = merge_ints(frag, nfrag, 0, out);
            break;
        case REDIS_MERGE_KEYSPACE:
            /* the servers' replies are of the client's variant: verbatim for RESP3 */
            rc = merge_keyspace(frag, nfrag, buf_rptr(frag[0])[0] == '=', out);
            break;
        case REDIS_MERGE_CONCAT:
            rc = merge_concat(frag, nfrag, out);
            break;
        case REDIS_MERGE_AND:
            rc = merge_and(frag, nfrag, out);
            break;
        case REDIS_MERGE_FIRST: {
            int64_t end = redis__element_end(buf_rptr(frag[0]), buf_len(frag[0]), 0);
            rc = end < 0 ? -1 : buf_append(out, buf_rptr(frag[0]), (size_t)end);
            break;
        }
        default:
            rc = -1;
        }
    }
    if (rc != 0) {
        out->wpos = mark;       /* nothing half-written reaches the client */
        return rc == -ENOMEM ? -ENOMEM : -1;
    }
    return 0;
}

/*
 * BROADCASTs whose reply needs the proxy (proto_ops.merge_env). INFO (not INFO keyspace
 * alone): the servers that answered give the Keyspace section as INFO keyspace merges it,
 * then redis_local.c builds the rest from their replies and the proxy's own numbers; a
 * server down or failing is left out there instead of failing the whole INFO. Every other
 * broadcast merges as redis_merge does.
 */
/* RANDOMKEY: a key from a server picked at random among those that have one (so a
 * key of a small server is likelier than in one Redis: uniform per server, not per
 * key); nil when none has any (RESP3's null to a RESP3 client, whose servers send it);
 * the first error when none has a key and one failed. */
static int merge_random(struct buf *const *frag, uint32_t nfrag, const struct proto_env *env,
                        struct buf *out)
{
    uint32_t have = 0, pick;
    int64_t err = -1;

    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        if (buf_len(frag[f]) >= 2 && d[0] == '$' && d[1] != '-')
            have++;
        else if (d[0] == '-' && err < 0)
            err = f;
        else if (d[0] != '$' && d[0] != '-' && d[0] != '_')
            return -1;
    }
    if (have == 0) {
        if (err < 0)
            return buf_append_str(out, env->variant ? "_\r\n" : "$-1\r\n");
        int64_t end = redis__element_end(buf_rptr(frag[err]), buf_len(frag[err]), 0);
        return end < 0 ? -1 : buf_append(out, buf_rptr(frag[err]), (size_t)end);
    }
    uint64_t x = env->now_us * 0x9e3779b97f4a7c15ull;     /* the clock, mixed */
    pick = (uint32_t)((x >> 32) % have);
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        if (buf_len(frag[f]) >= 2 && d[0] == '$' && d[1] != '-' && pick-- == 0) {
            int64_t end = redis__element_end(d, buf_len(frag[f]), 0);
            return end < 0 ? -1 : buf_append(out, d, (size_t)end);
        }
    }
    return -1;
}

/* SCAN: server env->target's reply with its cursor re-encoded as a pool cursor (the
 * next server's start when it is done, 0 after the last). */
static int merge_scan(struct buf *const *frag, uint32_t nfrag, const struct proto_env *env,
                      struct buf *out)
{
    const char *d = buf_rptr(frag[0]);
    size_t len = buf_len(frag[0]), eol, pos;
    int64_t n, cl;
    uint64_t sc = 0, next;

    if (nfrag != 1)
        return -1;
    if (d[0] == '-') {
        int64_t end = redis__element_end(d, len, 0);
        return end < 0 ? -1 : buf_append(out, d, (size_t)end);
    }
    if (d[0] != '*' || rsp_line(d, len, &eol) != 1 || parse_num(d + 1, eol - 2, &n) < 0 ||
        n != 2)
        return -1;
    pos = eol + 1;
    if (pos >= len || d[pos] != '$' || rsp_line(d + pos, len - pos, &eol) != 1 ||
        parse_num(d + pos + 1, eol - 2, &cl) < 0 || cl <= 0 || cl > 20 ||
        pos + eol + 1 + (size_t)cl + 2 > len)
        return -1;
    const char *num = d + pos + eol + 1;
    for (int64_t i = 0; i < cl; i++) {
        if (num[i] < '0' || num[i] > '9' || sc > (UINT64_MAX - 9) / 10)
            return -1;
        sc = sc * 10 + (uint64_t)(num[i] - '0');
    }
    uint64_t tag = (env->epoch & 0xff) << SCAN_TAG_SHIFT;
    if (sc >= (1ull << (64 - SCAN_CUR_SHIFT)))
        return -1;                      /* a table of 2^40 buckets: not a Redis server's */
    if (sc != 0)
        next = sc << SCAN_CUR_SHIFT | tag | env->target;
    else if (env->next_target < env->nservers)
        next = tag | env->next_target;
    else
        next = 0;
    char nb[24];
    int nl = snprintf(nb, sizeof(nb), "%" PRIu64, next);
    pos += eol + 1 + (size_t)cl + 2;    /* the array of keys, as the server sent it */
    if (buf_append_str(out, "*2\r\n") < 0 || append_bulk(out, nb, (size_t)nl) < 0 ||
        buf_append(out, d + pos, len - pos) < 0)
        return -ENOMEM;
    return 0;
}

static int redis_merge_env(uint16_t cmd, const char *reqbuf, struct buf *const *frag,
                           uint32_t nfrag, const struct proto_env *env, struct buf *out)
{
    if (cmd < redis_ncommands && (redis_commands[cmd].merge == REDIS_MERGE_RANDOM ||
                                  redis_commands[cmd].merge == REDIS_MERGE_SCAN)) {
        size_t mark = out->wpos;
        for (uint32_t f = 0; f < nfrag; f++)
            if (buf_len(frag[f]) == 0)
                return -1;
        int rc = redis_commands[cmd].merge == REDIS_MERGE_RANDOM
                     ? merge_random(frag, nfrag, env, out)
                     : merge_scan(frag, nfrag, env, out);
        if (rc != 0)
            out->wpos = mark;
        return rc;
    }
    if (cmd >= redis_ncommands || redis_commands[cmd].merge != REDIS_MERGE_INFO)
        return redis_merge(cmd, reqbuf, NULL, 0, NULL, frag, nfrag, out);
    const struct redis_command *ks = redis_command_find("INFO|KEYSPACE");
    struct buf *answered[nfrag ? nfrag : 1];
    struct buf keyspace;
    uint32_t n = 0;
    int rc = 0;

    for (uint32_t f = 0; f < nfrag; f++)
        if (buf_len(frag[f]) > 0 && (buf_rptr(frag[f])[0] == '$' || buf_rptr(frag[f])[0] == '='))
            answered[n++] = frag[f];
    buf_init(&keyspace);
    if (n > 0 && ks != NULL)
        rc = redis_merge((uint16_t)(ks - redis_commands), reqbuf, NULL, 0, NULL, answered, n,
                         &keyspace);
    if (rc != -ENOMEM)
        rc = redis__info_merge(reqbuf, frag, nfrag, rc == 0 && n > 0 ? &keyspace : NULL, env, out);
    buf_free(&keyspace);
    return rc;
}

/* ------------------------------------------------------- errors, hello */

/* reason as the rest of one line (CR and LF shown as spaces), then CRLF. */
static int append_line(struct buf *out, const char *reason)
{
    for (const char *s = reason; *s != '\0'; s++) {
        char ch = (*s == '\r' || *s == '\n') ? ' ' : *s;
        if (buf_append(out, &ch, 1) < 0)
            return -ENOMEM;
    }
    return buf_append(out, "\r\n", 2);
}

static int redis_error_reply(enum proto_err code, const char *reason, struct buf *out)
{
    const char *what;
    switch (code) {
    case PROTO_ERR_CROSSSLOT:
        return buf_append_str(out, "-CROSSSLOT Keys in request don't hash to the same server\r\n");
    case PROTO_ERR_CROSSSLOT_SLOT:     /* Redis Cluster's own words */
        return buf_append_str(out, "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
    case PROTO_ERR_ABORTED:
        return buf_append_str(out, "-EXECABORT Transaction discarded because of previous errors.\r\n");
    case PROTO_ERR_LIMIT:
    case PROTO_ERR_TARGET:
        if (buf_append_str(out, "-ERR ") < 0)
            return -ENOMEM;
        return append_line(out, reason != NULL ? reason : "refused");
    case PROTO_ERR_TIMEOUT:   what = "timeout"; break;
    case PROTO_ERR_NOMEM:     what = "out of memory"; break;
    case PROTO_ERR_DOWN:      what = "no server available"; break;
    case PROTO_ERR_SERVER:
    default:                  what = "server error"; break;
    }
    if (buf_append_str(out, "-ERR ") < 0 || buf_append_str(out, what) < 0)
        return -ENOMEM;
    if (reason != NULL && reason[0] != '\0') {
        if (buf_append(out, ": ", 2) < 0)
            return -ENOMEM;
        for (const char *s = reason; *s != '\0'; s++) {
            char ch = (*s == '\r' || *s == '\n') ? ' ' : *s;
            if (buf_append(out, &ch, 1) < 0)
                return -ENOMEM;
        }
    }
    return buf_append(out, "\r\n", 2);
}

/* AUTH [user] password (RESP3: HELLO 3 with its AUTH option), READONLY for a connection
 * that may read from a cluster replica, then SELECT db when it is not 0. Returns the
 * number of requests written (replies to swallow), or -ENOMEM. */
static int redis_server_hello(const struct proto_hello *h, struct buf *out)
{
    int n = 0;
    char num[16];

    if (h->variant) {
        const char *user = h->username != NULL ? h->username : "default";
        if (buf_append_str(out, h->password != NULL ? "*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n"
                                                    : "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n") < 0 ||
            (h->password != NULL && (append_bulk(out, user, strlen(user)) < 0 ||
                                     append_bulk(out, h->password, strlen(h->password)) < 0)))
            return -ENOMEM;
        n++;
    } else if (h->password != NULL) {
        int rc = h->username != NULL
                     ? (buf_append_str(out, "*3\r\n$4\r\nAUTH\r\n") < 0 ||
                        append_bulk(out, h->username, strlen(h->username)) < 0)
                     : buf_append_str(out, "*2\r\n$4\r\nAUTH\r\n") < 0;
        if (rc || append_bulk(out, h->password, strlen(h->password)) < 0)
            return -ENOMEM;
        n++;
    }
    if (h->replica_reads) {
        if (buf_append_str(out, "*1\r\n$8\r\nREADONLY\r\n") < 0)
            return -ENOMEM;
        n++;
    }
    if (h->db != 0) {
        int l = snprintf(num, sizeof(num), "%d", h->db);
        if (buf_append_str(out, "*2\r\n$6\r\nSELECT\r\n") < 0 || append_bulk(out, num, (size_t)l) < 0)
            return -ENOMEM;
        n++;
    }
    return n;
}

/* RESET (Redis 6.2+) ends a pinned connection's transaction, subscriptions,
 * blocking state, WATCHes, CLIENT settings, database and authentication;
 * the hello then authenticates and selects again. */
static int redis_pin_reset(struct buf *out)
{
    return buf_append_str(out, "*1\r\n$5\r\nRESET\r\n") < 0 ? -ENOMEM : 1;
}

/* A spoiled transaction's EXEC: what the server queued is dropped, as
 * Redis drops it for EXECABORT; the DISCARD's +OK is swallowed. */
static int redis_sess_abort(struct buf *out)
{
    return buf_append_str(out, "*1\r\n$7\r\nDISCARD\r\n") < 0 ? -ENOMEM : 1;
}

/* A client that holds a pinned connection switched protocols (HELLO 2 / 3 outside
 * MULTI): the connection switches too, keeping its WATCHes; its reply is swallowed. */
static int redis_sess_variant(uint8_t variant, struct buf *out)
{
    return buf_append_str(out, variant ? "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"
                                       : "*2\r\n$5\r\nHELLO\r\n$1\r\n2\r\n") < 0 ? -ENOMEM : 1;
}

/* on_down: miss. A read of a down server's key answers nil (RESP3's null to a RESP3
 * client); a write is refused (storing it elsewhere would lose it when the server is back). */
static int redis_miss_reply(uint16_t cmd, uint16_t rflags, struct buf *out)
{
    (void)cmd;
    if (rflags & PROTO_RF_WRITE)
        return buf_append_str(out, "-ERR server down (on_down: miss refuses writes)\r\n");
    return buf_append_str(out, (rflags & PROTO_RF_VARIANT) ? "_\r\n" : "$-1\r\n");
}

/* ------------------------------------------------------------- pub/sub */

/* The (un)subscription commands and the kinds of their confirmations, by PROTO_SUB_* value
 * (class | UNSUB). */
static const char *const sub_commands[8] = {
    [PROTO_SUB_CHANNEL] = "SUBSCRIBE",    [PROTO_SUB_CHANNEL | PROTO_SUB_UNSUB] = "UNSUBSCRIBE",
    [PROTO_SUB_PATTERN] = "PSUBSCRIBE",   [PROTO_SUB_PATTERN | PROTO_SUB_UNSUB] = "PUNSUBSCRIBE",
    [PROTO_SUB_SHARD] = "SSUBSCRIBE",     [PROTO_SUB_SHARD | PROTO_SUB_UNSUB] = "SUNSUBSCRIBE",
};
static const char *const sub_kinds[8] = {
    [PROTO_SUB_CHANNEL] = "subscribe",    [PROTO_SUB_CHANNEL | PROTO_SUB_UNSUB] = "unsubscribe",
    [PROTO_SUB_PATTERN] = "psubscribe",   [PROTO_SUB_PATTERN | PROTO_SUB_UNSUB] = "punsubscribe",
    [PROTO_SUB_SHARD] = "ssubscribe",     [PROTO_SUB_SHARD | PROTO_SUB_UNSUB] = "sunsubscribe",
};

static int redis_sub_write(uint8_t sub, const struct proto_name *names, uint32_t n, struct buf *out)
{
    const char *cmd = sub < 8 ? sub_commands[sub] : NULL;
    if (cmd == NULL || n == 0)
        return -EINVAL;
    if (buf_appendf(out, "*%" PRIu32 "\r\n", n + 1) < 0 || append_bulk(out, cmd, strlen(cmd)) < 0)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        if (append_bulk(out, names[i].bytes, names[i].len) < 0)
            return -ENOMEM;
    return 0;
}

/* One confirmation as Redis 7.0 writes it (pubsub.c addReplyPubsub*Subscribed): an array
 * in RESP2, a push in RESP3, of the kind, the name (a null for a mass unsubscribe that had
 * nothing) and the client's count of that class. */
static int redis_sub_reply(uint8_t sub, int variant, const char *name, size_t len,
                           uint64_t count, struct buf *out)
{
    const char *kind = sub < 8 ? sub_kinds[sub] : NULL;
    if (kind == NULL)
        return -EINVAL;
    if (buf_append_str(out, variant ? ">3\r\n" : "*3\r\n") < 0 ||
        append_bulk(out, kind, strlen(kind)) < 0 ||
        (name != NULL ? append_bulk(out, name, len)
                      : buf_append_str(out, variant ? "_\r\n" : "$-1\r\n")) < 0 ||
        buf_appendf(out, ":%" PRIu64 "\r\n", count) < 0)
        return -ENOMEM;
    return 0;
}

/* A message is the same array in both protocols but for its type byte (pubsub.c's
 * addReplyPubsubMessage): rewritten for a client of the other one. */
static int redis_push_write(int variant, const char *unit, size_t len, struct buf *out)
{
    char t = variant ? '>' : '*';
    if (len == 0)
        return -EINVAL;
    if (buf_append(out, &t, 1) < 0 || buf_append(out, unit + 1, len - 1) < 0)
        return -ENOMEM;
    return 0;
}

/* `*3 $12 sunsubscribe $<n> <name> :<count>` (or its RESP3 push), whole in unit[0..len):
 * 1 with *name, else 0. Digits are bounded: a name longer than 10 digits can say is not
 * one Redis sends. */
static int redis_sub_dropped(const char *unit, size_t len, struct proto_name *name)
{
    static const char kind[] = "3\r\n$12\r\nsunsubscribe\r\n$";
    size_t pos = 1 + sizeof(kind) - 1;
    uint64_t n = 0;
    int digits = 0;

    if (len < pos || (unit[0] != '*' && unit[0] != '>') || memcmp(unit + 1, kind, sizeof(kind) - 1))
        return 0;
    while (pos < len && unit[pos] >= '0' && unit[pos] <= '9' && digits < 10) {
        n = n * 10 + (uint64_t)(unit[pos++] - '0');
        digits++;
    }
    if (digits == 0 || len - pos < 2 || unit[pos] != '\r' || unit[pos + 1] != '\n')
        return 0;
    pos += 2;
    if (n > len - pos || len - pos - n < 3 || unit[pos + n] != '\r' ||
        unit[pos + n + 1] != '\n' || unit[pos + n + 2] != ':')
        return 0;
    name->bytes = unit + pos;
    name->len = (uint32_t)n;
    return 1;
}

const struct proto_ops proto_redis_ops = {
    .name = "redis",
    .parse_req = redis_parse_req,
    .parse_rsp = redis_parse_rsp,
    .forward = redis_forward,
    .merge_copy = redis_forward,    /* INFO's merge reads its sections from the RESP form */
    .frag_write = redis_frag_write,
    .merge = redis_merge,
    .merge_env = redis_merge_env,
    .local = redis__local,
    .error_reply = redis_error_reply,
    .server_hello = redis_server_hello,
    .key_bytes = redis_key_bytes,
    .probe = "*1\r\n$4\r\nPING\r\n",
    .probe_cmd = REDIS_CMD_NONE,
    .miss_reply = redis_miss_reply,
    .pin_reset = redis_pin_reset,
    .cluster = &proto_redis_cluster_ops,
    .invalidate = redis__invalidate,
    .flush = "*1\r\n$7\r\nFLUSHDB\r\n",
    .flush_cmd = REDIS_CMD_NONE,
    .ttl_cap = redis__ttl_cap,
    .collapsible = redis__collapsible,
    .sess_begun = "+OK\r\n",
    .sess_queued = "+QUEUED\r\n",
    .sess_abort = redis_sess_abort,
    .sess_variant = redis_sess_variant,
    .sub_write = redis_sub_write,
    .sub_reply = redis_sub_reply,
    .sub_dropped = redis_sub_dropped,
    .push_write = redis_push_write,
};

int redis__keys_extract(const struct redis_command *c, const struct proto_key *args,
                        uint32_t argc, const char *buf, struct proto_key *keys, int *nokey,
                        const char **err)
{
    return keys_extract(c, args, argc, buf, keys, nokey, err);
}
