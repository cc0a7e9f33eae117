/* Redis requests classified by the command table: their keys, kind, session effects and SCAN cursors. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "proto/redis_int.h"
#include "lib/util.h"

#define REDIS_ERR_ROOM          PROTO_REDIS_ERR_MAX   /* bytes of a formatted error reply */

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
            redis__parse_num(buf + args[i + 1].off, args[i + 1].len, &db) == 0)
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
        bad = redis__parse_num(buf + a->off, a->len, &nk) < 0;
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
        return redis__parse_num(s, len, &ms) < 0 || ms < 0 ? -1 : ms;
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
    const struct redis_command *c = redis_command_of_request(buf + args[0].off, args[0].len);
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
        req->flags |= PROTO_RF_NOAUTH;
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
    else if ((c->flags & (REDIS_CMD_READ | REDIS_CMD_SCRIPT)) == REDIS_CMD_READ)
        req->flags |= PROTO_RF_READ;
    if (c->flags & REDIS_CMD_SCRIPT)
        req->flags |= PROTO_RF_SCRIPT;
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
void redis__req_classify_all(struct proto_parser *p, const char *buf, uint32_t argc,
                             struct proto_req *req)
{
    int keeps = req_classify(p, buf, argc, req);
    if (req->kind == PROTO_REQ_ERROR && (p->flags & PROTO_PF_ATOMIC) && !keeps)
        req->sess |= PROTO_SS_SPOIL;
}

int redis__keys_extract(const struct redis_command *c, const struct proto_key *args,
                        uint32_t argc, const char *buf, struct proto_key *keys, int *nokey,
                        const char **err)
{
    return keys_extract(c, args, argc, buf, keys, nokey, err);
}
