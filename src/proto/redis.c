/* The Redis protocol's ops table, with the reply parser, forwarding and fragments, errors, hello and pub/sub. */
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
#include "lib/invariant.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "proto/redis_int.h"
#include "lib/util.h"

/* ---------------------------------------------------------- parse_rsp */

#define RSP_IDLE      0
#define RSP_ARRAY     1

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
    int r, counted;             /* counted: n is the header line's number (redis__rsp_count) */
    char top;                   /* the unit's type byte; 0 for the rest of a split aggregate */

    (void)cmd;
    memset(rsp, 0, sizeof(*rsp));
    if (p->u.redis.state == RSP_ARRAY) {
        /* An aggregate that is not over, whose walked bytes are still in the buffer. */
        RL_ASSERT(p->u.redis.pending > 0 && p->u.redis.scan <= len);
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
    eol = redis__rsp_count(buf, len, 0, &n);
    counted = eol != 0;
    if (!counted) {
        r = redis__rsp_line(buf, len, &eol);
        if (r <= 0)
            return r;
    }
    top = buf[0];
    switch (top) {
    case '$':                   /* RESP2's types first: the common replies */
        if ((!counted && redis__parse_num(buf + 1, eol - 2, &n) < 0) || n < -1)
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
        if (!counted && redis__parse_num(buf + 1, eol - 2, &n) < 0)
            return -1;
        break;
    case '*':
    case '~':
    case '>':
    case '%':
    case '|':
        if ((!counted && redis__parse_num(buf + 1, eol - 2, &n) < 0) || n < (top == '*' ? -1 : 0) ||
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
        if ((!counted && redis__parse_num(buf + 1, eol - 2, &n) < 0) || n < 0)
            return -1;
        if (top == '!')
            rsp->flags |= PROTO_SF_ERROR;
        rsp->body_len = (uint64_t)n + 2;
        break;
    default:
        if (!redis__rsp_line_ok(top, buf + 1, eol - 2))
            return -1;
        break;
    }
    rsp->hdr_len = (uint32_t)(eol + 1);
    rsp->flags |= PROTO_SF_FINAL;
    return (int)rsp->hdr_len;

scan:
    r = redis__rsp_scan(buf, len, &pos, &pending);
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
            if ((top == '*' || top == '>') && redis__rsp_line(buf, pos, &eol) == 1 &&
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
    int64_t cr = redis__header_line(buf, end, at);
    int64_t n;
    if (cr <= 0 || buf[at] != '$' || redis__parse_num(buf + at + 1, (size_t)cr - at - 1, &n) < 0)
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
        if (i == 1 ? redis__append_bulk(out, num, (size_t)nl) < 0
                   : redis__append_bulk(out, base + a->off, a->len) < 0)
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
        redis__append_bulk(out, c->name, nl) < 0 || (bar != NULL && redis__append_bulk(out, bar + 1, strlen(bar + 1)) < 0))
        return -ENOMEM;
    const char *base = req_base(req, buf);
    for (uint32_t i = 0; i < n; i++) {
        const struct proto_key *k = &req->keys[idx[i]];
        if (redis__append_bulk(out, base + k->off, k->len) < 0)
            return -ENOMEM;
        if (per == 2) {
            struct proto_key v;
            if (arg_after(req, buf, k, &v) < 0)
                return -EINVAL;
            if (redis__append_bulk(out, base + v.off, v.len) < 0)
                return -ENOMEM;
        }
    }
    return 0;
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
            (h->password != NULL && (redis__append_bulk(out, user, strlen(user)) < 0 ||
                                     redis__append_bulk(out, h->password, strlen(h->password)) < 0)))
            return -ENOMEM;
        n++;
    } else if (h->password != NULL) {
        int rc = h->username != NULL
                     ? (buf_append_str(out, "*3\r\n$4\r\nAUTH\r\n") < 0 ||
                        redis__append_bulk(out, h->username, strlen(h->username)) < 0)
                     : buf_append_str(out, "*2\r\n$4\r\nAUTH\r\n") < 0;
        if (rc || redis__append_bulk(out, h->password, strlen(h->password)) < 0)
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
        if (buf_append_str(out, "*2\r\n$6\r\nSELECT\r\n") < 0 || redis__append_bulk(out, num, (size_t)l) < 0)
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
    if (buf_appendf(out, "*%" PRIu32 "\r\n", n + 1) < 0 || redis__append_bulk(out, cmd, strlen(cmd)) < 0)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        if (redis__append_bulk(out, names[i].bytes, names[i].len) < 0)
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
        redis__append_bulk(out, kind, strlen(kind)) < 0 ||
        (name != NULL ? redis__append_bulk(out, name, len)
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
    .parse_req = redis__parse_req,
    .parse_rsp = redis_parse_rsp,
    .forward = redis_forward,
    .merge_copy = redis_forward,    /* INFO's merge reads its sections from the RESP form */
    .frag_write = redis_frag_write,
    .merge = redis__merge,
    .merge_env = redis__merge_env,
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
    .category = redis__category,
    .perm_name = redis__perm_name,
    .ns_request = redis__ns_request,
    .ns_reply = redis__ns_reply,
    .ns_reply_cmd = redis__ns_reply_cmd,
    .perm_error = redis__perm_error,
    .ncmds = redis__ncmds,
    .cmd_name = redis__cmd_name,
    .slow_entry = redis__slow_entry,
    .req_key = redis__req_key,
};
