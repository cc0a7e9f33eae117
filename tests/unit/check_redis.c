/* Unit tests for the Redis protocol: parsers fed whole and byte by byte, the command table, fragments, merges, local commands. */
#include "config.h"

#include "check_main.h"
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/buf.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "lib/util.h"

static const struct proto_ops *R = &proto_redis_ops;

/* Build a RESP request from space-separated words ("~" stands for a space
 * inside a word). Returns its length; out must hold it. */
static size_t mk(char *out, const char *line)
{
    static char words[64][1024];
    int n = 0;
    const char *s = line;
    while (*s) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        int l = 0;
        while (*s && *s != ' ') {
            words[n][l++] = *s == '~' ? ' ' : *s;
            s++;
        }
        words[n][l] = '\0';
        n++;
    }
    size_t len = (size_t)sprintf(out, "*%d\r\n", n);
    for (int i = 0; i < n; i++)
        len += (size_t)sprintf(out + len, "$%zu\r\n%s\r\n", strlen(words[i]), words[i]);
    return len;
}

struct res {
    int rc;
    struct proto_req req;
    char keys[16][64];
    struct proto_key k[16];     /* the offsets: req.keys is freed with the parser */
    char err[600];
    char fwd[4096];             /* what forward() writes (SINGLE, SAME, BROADCAST) */
    size_t fwd_len;
};

static void snap(struct res *r, int rc, const struct proto_req *req, const char *buf)
{
    memset(r, 0, sizeof(*r));
    r->rc = rc;
    r->req = *req;
    for (uint32_t i = 0; i < req->nkeys && i < 16; i++) {
        char dec[PROTO_KEY_DECODED_MAX];
        size_t klen;
        const char *key = R->key_bytes(req, buf, i, dec, &klen);
        r->k[i] = req->keys[i];
        snprintf(r->keys[i], sizeof(r->keys[i]), "%.*s", (int)klen, key);
    }
    if (rc > 0 && (req->kind == PROTO_REQ_SINGLE || req->kind == PROTO_REQ_SAME ||
                   req->kind == PROTO_REQ_BROADCAST)) {
        struct buf out;
        buf_init(&out);
        ck_assert_int_eq(R->forward(req, buf, &out), 0);
        if (buf_len(&out) < sizeof(r->fwd)) {
            memcpy(r->fwd, buf_rptr(&out), buf_len(&out));
            r->fwd_len = buf_len(&out);
        }
        buf_free(&out);
    }
    r->req.keys = NULL;
    r->req.u.redis.inl = NULL;  /* parser memory, freed with it: r->fwd has the bytes */
    if (req->err)
        snprintf(r->err, sizeof(r->err), "%.*s", (int)req->err_len, req->err);
}

/* Parse buf[0..len) whole, then again with a fresh parser one byte at a
 * time: every proper prefix must be "incomplete" (0), and the final call
 * must give the same result. Returns the whole-parse result. */
static struct res parse_both(const char *buf, size_t len, uint32_t pflags)
{
    struct proto_parser p1 = { .flags = pflags }, p2 = { .flags = pflags };
    struct proto_req req;
    struct res a, b;

    int rc = R->parse_req(&p1, buf, len, &req);
    snap(&a, rc, &req, buf);
    if (rc > 0) {
        for (size_t i = 0; i < (size_t)rc; i++) {
            int r = R->parse_req(&p2, buf, i, &req);
            ck_assert_msg(r == 0, "prefix %zu of %zu gave %d", i, len, r);
        }
        int r = R->parse_req(&p2, buf, (size_t)rc, &req);
        snap(&b, r, &req, buf);
        ck_assert_int_eq(b.rc, a.rc);
        ck_assert_int_eq(b.req.kind, a.req.kind);
        ck_assert_uint_eq(b.req.cmd, a.req.cmd);
        ck_assert_uint_eq(b.req.flags, a.req.flags);
        ck_assert_uint_eq(b.req.nkeys, a.req.nkeys);
        ck_assert_uint_eq(b.req.sess, a.req.sess);
        ck_assert_int_eq(b.req.block_ms, a.req.block_ms);
        ck_assert_uint_eq(b.req.server, a.req.server);
        for (uint32_t i = 0; i < a.req.nkeys && i < 16; i++)
            ck_assert_str_eq(b.keys[i], a.keys[i]);
        ck_assert_str_eq(b.err, a.err);
    }
    proto_parser_free(&p1);
    proto_parser_free(&p2);
    return a;
}

static struct res req_of(const char *line, uint32_t pflags)
{
    static char buf[65536];
    size_t len = mk(buf, line);
    struct res r = parse_both(buf, len, pflags);
    if (r.rc > 0)
        ck_assert_uint_eq((size_t)r.rc, len);
    return r;
}

#define AUTHED PROTO_PF_AUTHED

static const char *cmd_name(const struct res *r)
{
    return r->req.cmd < redis_ncommands ? redis_commands[r->req.cmd].name : "?";
}

/* ------------------------------------------------------------ requests */

START_TEST(test_req_resp_single_key)
{
    struct res r = req_of("SET foo bar", AUTHED);
    ck_assert_int_gt(r.rc, 0);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert_str_eq(cmd_name(&r), "SET");
    ck_assert_uint_eq(r.req.nkeys, 1);
    ck_assert_str_eq(r.keys[0], "foo");
    ck_assert(r.req.flags & PROTO_RF_WRITE);
    ck_assert_uint_eq(r.req.body_len, 0);

    r = req_of("get k", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert(r.req.flags & PROTO_RF_RETRIEVAL);
    ck_assert(!(r.req.flags & PROTO_RF_WRITE));
}
END_TEST

START_TEST(test_req_binary_key_and_empty_arg)
{
    static const char s[] = "*3\r\n$3\r\nSET\r\n$5\r\na\r\nb\0\r\n$0\r\n\r\n";
    struct res r = parse_both(s, sizeof(s) - 1, AUTHED);
    ck_assert_int_eq(r.rc, (int)sizeof(s) - 1);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(r.k[0].len, 5);
    ck_assert_int_eq(memcmp(s + r.k[0].off, "a\r\nb\0", 5), 0);
}
END_TEST

START_TEST(test_req_pipeline_consumes_one_at_a_time)
{
    char buf[256];
    size_t a = mk(buf, "GET a");
    size_t b = mk(buf + a, "GET b");
    struct proto_parser p = { .flags = AUTHED };
    struct proto_req req;
    ck_assert_int_eq(R->parse_req(&p, buf, a + b, &req), (int)a);
    ck_assert_int_eq(R->parse_req(&p, buf + a, b, &req), (int)b);
    ck_assert_int_eq(memcmp(buf + a + req.keys[0].off, "b", 1), 0);
    proto_parser_free(&p);
}
END_TEST

START_TEST(test_req_inline)
{
    static const char s1[] = "get foo\r\n";
    struct res r = parse_both(s1, sizeof(s1) - 1, AUTHED);
    ck_assert_int_eq(r.rc, (int)sizeof(s1) - 1);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert_str_eq(r.keys[0], "foo");
    /* its keys are in the RESP re-encoding: the core must use key_bytes */
    ck_assert(r.req.flags & PROTO_RF_KEYBYTES);
    ck_assert(!(req_of("get foo", AUTHED).req.flags & PROTO_RF_KEYBYTES));

    static const char s2[] = "  SET  'a b'   \"c d\"\n";
    r = parse_both(s2, sizeof(s2) - 1, AUTHED);
    ck_assert_int_eq(r.rc, (int)sizeof(s2) - 1);
    ck_assert_str_eq(cmd_name(&r), "SET");
    ck_assert_str_eq(r.keys[0], "a b");

    /* escapes are decoded as sdssplitargs decodes them */
    static const char s3[] = "set \"a\\nb\\x41\\x4g\\q\" 'c\\'d\\n'\r\n";
    r = parse_both(s3, sizeof(s3) - 1, AUTHED);
    ck_assert_int_eq(r.rc, (int)sizeof(s3) - 1);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert_str_eq(r.keys[0], "a\nbAx4gq");
    /* ... and the request is forwarded as RESP, never as inline text */
    static const char w3[] = "*3\r\n$3\r\nset\r\n$8\r\na\nbAx4gq\r\n$5\r\nc'd\\n\r\n";
    ck_assert_uint_eq(r.fwd_len, sizeof(w3) - 1);
    ck_assert_int_eq(memcmp(r.fwd, w3, r.fwd_len), 0);

    static const char s4[] = "set \"ab c\r\n";
    r = parse_both(s4, sizeof(s4) - 1, AUTHED);
    ck_assert_int_lt(r.rc, 0);
    ck_assert_str_eq(r.err, "-ERR Protocol error: unbalanced quotes in request\r\n");
}
END_TEST

START_TEST(test_req_empty_requests_skipped)
{
    char buf[128];
    size_t pre = (size_t)sprintf(buf, "*0\r\n\r\n*-1\r\n");
    size_t len = pre + mk(buf + pre, "GET k");
    struct res r = parse_both(buf, len, AUTHED);
    ck_assert_int_eq(r.rc, (int)len);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert_str_eq(r.keys[0], "k");
    struct buf out;
    buf_init(&out);
    ck_assert_int_eq(R->forward(&r.req, buf, &out), 0);
    ck_assert_uint_eq(buf_len(&out), len - pre);   /* the empty ones are not forwarded */
    ck_assert_int_eq(memcmp(buf_rptr(&out), buf + pre, len - pre), 0);
    buf_free(&out);

    /* nothing but empties: incomplete, nothing consumed */
    struct proto_parser p = { .flags = AUTHED };
    struct proto_req req;
    ck_assert_int_eq(R->parse_req(&p, buf, pre, &req), 0);
    proto_parser_free(&p);
}
END_TEST

/* s is fatal with err, whole and when it arrives one byte at a time (the
 * earlier prefixes are incomplete, or the same error). */
static void expect_fatal(const char *s, size_t len, uint32_t pflags, const char *err)
{
    struct proto_parser p = { .flags = pflags };
    struct proto_req req;
    int rc = R->parse_req(&p, s, len, &req);
    ck_assert_int_lt(rc, 0);
    ck_assert_int_eq(req.kind, PROTO_REQ_ERROR);
    ck_assert_uint_eq(req.err_len, strlen(err));
    ck_assert_int_eq(memcmp(req.err, err, req.err_len), 0);
    proto_parser_free(&p);
    if (len > 4096)
        return;
    struct proto_parser q = { .flags = pflags };
    rc = 0;
    for (size_t i = 1; i <= len && rc == 0; i++)
        rc = R->parse_req(&q, s, i, &req);
    ck_assert_int_lt(rc, 0);
    ck_assert_uint_eq(req.err_len, strlen(err));
    ck_assert_int_eq(memcmp(req.err, err, req.err_len), 0);
    proto_parser_free(&q);
}

#define FATAL(s, f, e) expect_fatal(s, sizeof(s) - 1, f, e)

START_TEST(test_req_fatal_errors)
{
    FATAL("*abc\r\n", AUTHED, "-ERR Protocol error: invalid multibulk length\r\n");
    FATAL("*1048577\r\n", AUTHED, "-ERR Protocol error: invalid multibulk length\r\n");
    FATAL("*1\r\n$-1\r\n", AUTHED, "-ERR Protocol error: invalid bulk length\r\n");
    FATAL("*1\r\n$536870913\r\n", AUTHED, "-ERR Protocol error: invalid bulk length\r\n");
    FATAL("*1\r\n$x\r\n", AUTHED, "-ERR Protocol error: invalid bulk length\r\n");
    FATAL("*2\r\n$3\r\nGET\r\nx\r\n", AUTHED, "-ERR Protocol error: expected '$', got 'x'\r\n");
    FATAL("*2\r\n:3\r\n", AUTHED, "-ERR Protocol error: expected '$', got ':'\r\n");
    /* Redis shows a CR or LF as a space, every other byte as it is */
    FATAL("*2\r\n$3\r\nGET\r\n\n\r\n", AUTHED, "-ERR Protocol error: expected '$', got ' '\r\n");
    FATAL("*2\r\n$3\r\nGET\r\n\x10\r\n", AUTHED, "-ERR Protocol error: expected '$', got '\x10'\r\n");
    /* before AUTH, Redis's tighter limits */
    FATAL("*11\r\n", 0, "-ERR Protocol error: unauthenticated multibulk length\r\n");
    FATAL("*1\r\n$16385\r\n", 0, "-ERR Protocol error: unauthenticated bulk length\r\n");

    /* limits exactly at the edge are accepted (incomplete) */
    struct proto_parser p = { .flags = AUTHED };
    struct proto_req req;
    static const char ok[] = "*1048576\r\n$536870912\r\n";
    ck_assert_int_eq(R->parse_req(&p, ok, sizeof(ok) - 1, &req), 0);
    proto_parser_free(&p);

    /* a header line that never ends */
    char *big = malloc(70000);
    big[0] = '*';
    memset(big + 1, '1', 69999);
    expect_fatal(big, 70000, AUTHED, "-ERR Protocol error: too big mbulk count string\r\n");
    memset(big, 'a', 70000);
    expect_fatal(big, 70000, AUTHED, "-ERR Protocol error: too big inline request\r\n");
    free(big);
}
END_TEST

START_TEST(test_req_big_value_resumes_without_rescanning)
{
    /* SET k <1 MiB> arriving in 4 KiB pieces: p->scan stays at the value's
     * "$" line, so each call reads one bounded line, not the whole request. */
    size_t vlen = 1 << 20;
    char *buf = malloc(vlen + 64);
    size_t len = (size_t)sprintf(buf, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%zu\r\n", vlen);
    size_t vline = len - (size_t)snprintf(NULL, 0, "$%zu\r\n", vlen);
    memset(buf + len, 'v', vlen);
    len += vlen;
    memcpy(buf + len, "\r\n", 2);
    len += 2;
    struct proto_parser p = { .flags = AUTHED };
    struct proto_req req;
    for (size_t have = 4096; have < len; have += 4096) {
        ck_assert_int_eq(R->parse_req(&p, buf, have, &req), 0);
        ck_assert_uint_eq(p.u.redis.scan, vline);
    }
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    ck_assert_uint_eq(req.nkeys, 1);
    ck_assert_uint_eq(p.u.redis.scan, 0);
    proto_parser_free(&p);
    free(buf);
}
END_TEST

/* A value at least body_min long that is still arriving is the request's
 * body: the header ends where its bytes start, the core forwards them as
 * they come. Not when it is a key, or when the request goes to more than
 * one server or is answered here; a refusal carries its body to drop. */
static void expect_split(const char *head, size_t vlen, uint32_t body_min, int split,
                         enum proto_kind kind)
{
    char *buf = malloc(vlen + 256);
    size_t hl = (size_t)sprintf(buf, "%s$%zu\r\n", head, vlen);
    memset(buf + hl, 'v', vlen);
    memcpy(buf + hl + vlen, "\r\n", 2);
    struct proto_parser p = { .flags = AUTHED, .body_min = body_min };
    struct proto_req req;
    int rc = R->parse_req(&p, buf, hl + 100, &req);         /* part of the value */
    if (split) {
        ck_assert_msg(rc == (int)hl, "%s: rc %d, header %zu", head, rc, hl);
        ck_assert_uint_eq(req.body_len, vlen + 2);
        ck_assert_uint_eq(req.hdr_len, hl);
        ck_assert_int_eq(req.kind, kind);
        ck_assert_uint_eq(p.u.redis.state, 0);            /* the next request starts afresh */
        struct buf out;
        buf_init(&out);
        if (kind != PROTO_REQ_ERROR) {
            ck_assert_int_eq(R->forward(&req, buf, &out), 0);   /* the header as sent */
            ck_assert_uint_eq(buf_len(&out), hl);
            ck_assert(memcmp(buf_rptr(&out), buf, hl) == 0);
        }
        buf_free(&out);
    } else {
        ck_assert_msg(rc == 0, "%s: rc %d", head, rc);
        /* and whole, it is one ordinary request */
        rc = R->parse_req(&p, buf, hl + vlen + 2, &req);
        ck_assert_int_eq(rc, (int)(hl + vlen + 2));
        ck_assert_uint_eq(req.body_len, 0);
    }
    proto_parser_free(&p);
    free(buf);
}

START_TEST(test_req_large_last_argument_is_a_body)
{
    expect_split("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n", 300000, 262144, 1, PROTO_REQ_SINGLE);
    expect_split("*4\r\n$4\r\nHSET\r\n$1\r\nh\r\n$1\r\nf\r\n", 300000, 262144, 1,
                 PROTO_REQ_SINGLE);
    expect_split("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n", 300000, 0, 0, 0);       /* off */
    expect_split("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n", 1000, 262144, 0, 0);     /* small */
    expect_split("*2\r\n$3\r\nGET\r\n", 300000, 262144, 0, 0);             /* a key */
    expect_split("*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n", 300000, 262144, 0,
                 0);                                                       /* fan-out */
    expect_split("*2\r\n$4\r\nECHO\r\n", 300000, 262144, 0, 0);            /* local */
    expect_split("*3\r\n$5\r\nNOSET\r\n$1\r\nk\r\n", 300000, 262144, 1,
                 PROTO_REQ_ERROR);                                         /* refused */
}
END_TEST

/* --------------------------------------------------------------- table */

START_TEST(test_table_sorted_and_consistent)
{
    for (size_t i = 0; i < redis_ncommands; i++) {
        const struct redis_command *c = &redis_commands[i];
        if (i > 0)
            ck_assert_msg(strcmp(redis_commands[i - 1].name, c->name) < 0, "%s out of order", c->name);
        ck_assert_ptr_eq(redis_command_find(c->name), c);
        if (c->flags & REDIS_CMD_REFUSED)
            continue;           /* Redis's own data, never routed (SUNSUBSCRIBE's range is odd) */
        int absar = c->arity < 0 ? -c->arity : c->arity;
        ck_assert_msg(c->arity != 0, "%s: arity 0", c->name);
        if (c->first > 0) {
            /* the first key fits in the minimum argument count */
            /* (a command that may go without its keys: PUBSUB NUMSUB, UNSUBSCRIBE) */
            int optional = c->local != REDIS_LOCAL_NONE || REDIS_CMD_SUB_OF(c->flags) != 0;
            ck_assert_msg(c->first < absar || optional,
                          "%s: first %d arity %d", c->name, c->first, c->arity);
            ck_assert_msg(c->step >= 1, "%s: step", c->name);
            if (c->last >= 0) {
                ck_assert_msg(c->last >= c->first && c->last < absar, "%s: last", c->name);
                ck_assert_msg((c->last - c->first + 1) % c->step == 0, "%s: step", c->name);
            } else {
                /* -1: the last argument; a fixed arity would make it a fixed index */
                ck_assert_msg(c->arity < 0 && (c->first <= absar + c->last || optional),
                              "%s: last %d", c->name, c->last);
            }
        } else {
            ck_assert_msg(c->last == 0 && c->step == 0, "%s: keyless range", c->name);
        }
        if (c->numkeys > 0)
            ck_assert_msg(c->numkeys < absar && (c->flags & REDIS_CMD_MOVABLE), "%s: numkeys", c->name);
        /* several keys must be routed: SAME or FANOUT */
        int multi = (c->first > 0 && c->last != c->first) || c->numkeys || (c->flags & REDIS_CMD_STOREOPT);
        if (multi && REDIS_CMD_SUB_OF(c->flags) == 0)   /* subscriptions: names per server */
            ck_assert_msg(c->flags & (REDIS_CMD_SAME | REDIS_CMD_FANOUT), "%s: multi-key", c->name);
        /* every command the proxy forwards has a key to route by */
        if (!(c->flags & (REDIS_CMD_REFUSED | REDIS_CMD_LOCAL | REDIS_CMD_BROADCAST |
                          REDIS_CMD_FLUSH | REDIS_CMD_CONTAINER | REDIS_CMD_STREAMS |
                          REDIS_CMD_CURSOR)) &&
            REDIS_CMD_SESSION(c) == REDIS_SESS_NONE)
            ck_assert_msg(c->first > 0 || c->numkeys > 0, "%s: forwarded without a key", c->name);
        if (c->flags & REDIS_CMD_LOCAL)
            ck_assert_msg(c->local != REDIS_LOCAL_NONE, "%s: local handler", c->name);
        if (c->flags & (REDIS_CMD_FANOUT | REDIS_CMD_BROADCAST | REDIS_CMD_FLUSH | REDIS_CMD_CURSOR))
            ck_assert_msg(c->merge != REDIS_MERGE_NONE, "%s: merge", c->name);
        if (strchr(c->name, '|')) {
            char parent[64];
            snprintf(parent, sizeof(parent), "%.*s", (int)(strchr(c->name, '|') - c->name), c->name);
            const struct redis_command *pc = redis_command_find(parent);
            ck_assert_msg(pc && (pc->flags & (REDIS_CMD_CONTAINER | REDIS_CMD_VARIANTS)), "%s: parent", c->name);
        }
    }
}
END_TEST

START_TEST(test_table_covers_keyed_commands)
{
    static const char *const must[] = {
        "APPEND", "BITCOUNT", "BITFIELD", "BITFIELD_RO", "BITOP", "BITPOS", "COPY", "DECR",
        "DUMP", "EXPIRE", "EXPIRETIME", "GEOADD", "GEODIST", "GEOHASH", "GEOPOS", "GEORADIUS",
        "GEORADIUSBYMEMBER", "GEOSEARCH", "GEOSEARCHSTORE", "GETDEL", "GETEX", "GETRANGE",
        "HDEL", "HGETALL", "HINCRBYFLOAT", "HRANDFIELD", "HSCAN", "HSTRLEN", "LCS", "LINSERT",
        "LMOVE", "LMPOP", "LPOS", "MEMORY|USAGE", "OBJECT|ENCODING", "OBJECT|FREQ",
        "PERSIST", "PEXPIREAT", "PFADD", "PFCOUNT", "PFMERGE", "RESTORE", "RPOPLPUSH",
        "SINTERCARD", "SMISMEMBER", "SORT", "SORT_RO", "SSCAN", "SUBSTR", "TYPE", "XACK",
        "XADD", "XAUTOCLAIM", "XCLAIM", "XDEL", "XGROUP|CREATE", "XGROUP|CREATECONSUMER",
        "XGROUP|DELCONSUMER", "XGROUP|DESTROY", "XGROUP|SETID", "XINFO|CONSUMERS",
        "XINFO|GROUPS", "XINFO|STREAM", "XLEN", "XPENDING", "XRANGE", "XREVRANGE", "XSETID",
        "XTRIM", "ZADD", "ZDIFF", "ZDIFFSTORE", "ZINTER", "ZINTERCARD", "ZMPOP", "ZMSCORE",
        "ZRANGESTORE", "ZRANDMEMBER", "ZUNION", "ZUNIONSTORE", "TTL", "PTTL", "TOUCH",
    };
    for (size_t i = 0; i < RL_ARRAY_SIZE(must); i++) {
        const struct redis_command *c = redis_command_find(must[i]);
        ck_assert_msg(c != NULL, "%s missing", must[i]);
        ck_assert_msg(!(c->flags & REDIS_CMD_REFUSED), "%s refused", must[i]);
    }
}
END_TEST

START_TEST(test_lookup_case_insensitive)
{
    ck_assert_ptr_eq(redis_command_lookup("gEt", 3), redis_command_find("GET"));
    ck_assert_ptr_eq(redis_command_lookup("zrangestore", 11), redis_command_find("ZRANGESTORE"));
    ck_assert_ptr_null(redis_command_lookup("GETX", 4));
    ck_assert_ptr_null(redis_command_lookup("GE", 2));
    ck_assert_ptr_null(redis_command_lookup("G\0T", 3));
    ck_assert_ptr_null(redis_command_lookup("", 0));
    ck_assert_ptr_null(redis_command_lookup("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 40));
    struct res r = req_of("gEt k", AUTHED);
    ck_assert_str_eq(cmd_name(&r), "GET");
}
END_TEST

/* ------------------------------------------------------ classification */

START_TEST(test_arity_errors_redis_text)
{
    struct res r = req_of("GET", AUTHED);
    ck_assert_int_gt(r.rc, 0);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_ERROR);
    ck_assert_str_eq(r.err, "-ERR wrong number of arguments for 'get' command\r\n");
    r = req_of("set a", AUTHED);
    ck_assert_str_eq(r.err, "-ERR wrong number of arguments for 'set' command\r\n");
    r = req_of("MSET a 1 b", AUTHED);
    ck_assert_str_eq(r.err, "-ERR wrong number of arguments for 'mset' command\r\n");
    r = req_of("OBJECT ENCODING", AUTHED);
    ck_assert_str_eq(r.err, "-ERR wrong number of arguments for 'object|encoding' command\r\n");
    r = req_of("OBJECT", AUTHED);
    ck_assert_str_eq(r.err, "-ERR wrong number of arguments for 'object' command\r\n");
    r = req_of("PING a b", AUTHED);     /* ping's arity is -1: local() checks */
    ck_assert_int_eq(r.req.kind, PROTO_REQ_LOCAL);
}
END_TEST

START_TEST(test_unknown_command_text)
{
    struct res r = req_of("foo a b", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_ERROR);
    ck_assert_str_eq(r.err, "-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n");
    r = req_of("foo", AUTHED);
    ck_assert_str_eq(r.err, "-ERR unknown command 'foo', with args beginning with: \r\n");
    /* long arguments are cut as Redis cuts them: 128 bytes of argument list */
    char line[1200];
    strcpy(line, "nope ");
    memset(line + 5, 'x', 300);
    strcpy(line + 305, " y");
    r = req_of(line, AUTHED);
    char want[400];
    char xs[129];
    memset(xs, 'x', 128);
    xs[128] = '\0';
    snprintf(want, sizeof(want), "-ERR unknown command 'nope', with args beginning with: '%s' \r\n", xs);
    ck_assert_str_eq(r.err, want);
    r = req_of("OBJECT nosuch k", AUTHED);
    ck_assert_str_eq(r.err, "-ERR unknown subcommand 'nosuch'. Try OBJECT HELP.\r\n");
    /* CR/LF in an argument cannot break the reply line */
    static const char s[] = "*2\r\n$3\r\nfoo\r\n$3\r\na\r\n\r\n";
    r = parse_both(s, sizeof(s) - 1, AUTHED);
    ck_assert_str_eq(r.err, "-ERR unknown command 'foo', with args beginning with: 'a  ' \r\n");
}
END_TEST

static void expect_refused(const char *line, const char *name)
{
    struct res r = req_of(line, AUTHED);
    char want[200];
    snprintf(want, sizeof(want), "-ERR command '%s' is not supported by ringleader\r\n", name);
    ck_assert_int_gt(r.rc, 0);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_ERROR);
    ck_assert_str_eq(r.err, want);
}

START_TEST(test_copy_db_option)
{
    static const char *lines[] = { "COPY a b DB 1", "copy a b replace db 0", "COPY db b dB 2" };
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        struct res r = req_of(lines[i], AUTHED);
        ck_assert_int_gt(r.rc, 0);
        ck_assert_int_eq(r.req.kind, PROTO_REQ_ERROR);
        ck_assert_str_eq(r.err, "-ERR COPY's DB option is not supported by ringleader "
                         "(it writes another database, which the pool never reads)\r\n");
    }
}
END_TEST

START_TEST(test_refusals)
{
    expect_refused("MONITOR", "MONITOR");
    expect_refused("script kill", "SCRIPT KILL");
    expect_refused("client pause 10", "CLIENT PAUSE");
    expect_refused("CONFIG GET maxmemory", "CONFIG GET");
    expect_refused("DEBUG SLEEP 0", "DEBUG");
    expect_refused("SHUTDOWN", "SHUTDOWN");
    expect_refused("FLUSHALL", "FLUSHALL");
    expect_refused("FLUSHDB", "FLUSHDB");
    expect_refused("SCRIPT DEBUG yes", "SCRIPT DEBUG");
    expect_refused("MEMORY STATS", "MEMORY STATS");
    expect_refused("OBJECT HELP", "OBJECT HELP");
    expect_refused("SWAPDB 0 1", "SWAPDB");
    expect_refused("MOVE k 1", "MOVE");
    expect_refused("CLUSTER INFO", "CLUSTER INFO");
    expect_refused("MONITOR", "MONITOR");
    expect_refused("REPLICAOF no one", "REPLICAOF");

    struct res r = req_of("FLUSHALL", AUTHED | PROTO_PF_ALLOW_FLUSH);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_BROADCAST);
    ck_assert_uint_eq(redis_commands[r.req.cmd].merge, REDIS_MERGE_OK);
}
END_TEST

struct kcase {
    const char *line;
    enum proto_kind kind;
    const char *keys[5];
};

START_TEST(test_classification)
{
    static const struct kcase cases[] = {
        { "MGET a b c", PROTO_REQ_FANOUT, { "a", "b", "c" } },
        { "MGET a", PROTO_REQ_SINGLE, { "a" } },
        { "MSET a 1 b 2", PROTO_REQ_FANOUT, { "a", "b" } },
        { "DEL a b", PROTO_REQ_FANOUT, { "a", "b" } },
        { "UNLINK a b", PROTO_REQ_FANOUT, { "a", "b" } },
        { "EXISTS a b a", PROTO_REQ_FANOUT, { "a", "b", "a" } },
        { "TOUCH a b", PROTO_REQ_FANOUT, { "a", "b" } },
        { "MSETNX a 1 b 2", PROTO_REQ_SAME, { "a", "b" } },
        { "RENAME a b", PROTO_REQ_SAME, { "a", "b" } },
        { "SMOVE a b m", PROTO_REQ_SAME, { "a", "b" } },
        { "SINTER a b c", PROTO_REQ_SAME, { "a", "b", "c" } },
        { "SINTER a", PROTO_REQ_SINGLE, { "a" } },
        { "SINTERCARD 2 a b LIMIT 1", PROTO_REQ_SAME, { "a", "b" } },
        { "ZUNIONSTORE d 2 a b WEIGHTS 1 2", PROTO_REQ_SAME, { "d", "a", "b" } },
        { "ZUNION 2 a b", PROTO_REQ_SAME, { "a", "b" } },
        { "ZDIFF 1 a", PROTO_REQ_SINGLE, { "a" } },
        { "ZRANGESTORE d s 0 -1", PROTO_REQ_SAME, { "d", "s" } },
        { "LMOVE a b LEFT RIGHT", PROTO_REQ_SAME, { "a", "b" } },
        { "LMPOP 2 a b LEFT", PROTO_REQ_SAME, { "a", "b" } },
        { "ZMPOP 1 z MIN", PROTO_REQ_SINGLE, { "z" } },
        { "PFCOUNT a b", PROTO_REQ_SAME, { "a", "b" } },
        { "PFMERGE d a b", PROTO_REQ_SAME, { "d", "a", "b" } },
        { "COPY a b", PROTO_REQ_SAME, { "a", "b" } },
        { "COPY a b REPLACE", PROTO_REQ_SAME, { "a", "b" } },
        { "COPY a b DB", PROTO_REQ_SAME, { "a", "b" } },   /* the server's syntax error */
        { "COPY a b DB x", PROTO_REQ_SAME, { "a", "b" } }, /* the server's integer error */
        { "COPY a b DB 01", PROTO_REQ_SAME, { "a", "b" } },
        { "BITOP AND d a b", PROTO_REQ_SAME, { "d", "a", "b" } },
        { "GEOSEARCHSTORE d s FROMMEMBER m BYRADIUS 1 km", PROTO_REQ_SAME, { "d", "s" } },
        { "GEORADIUS g 0 0 1 km STORE dst", PROTO_REQ_SAME, { "g", "dst" } },
        { "GEORADIUS g 0 0 1 km COUNT 3 STOREDIST dd", PROTO_REQ_SAME, { "g", "dd" } },
        { "GEORADIUSBYMEMBER g STORE 1 km", PROTO_REQ_SINGLE, { "g" } },
        { "SORT s BY store GET store LIMIT 0 5", PROTO_REQ_SINGLE, { "s" } },
        { "SORT s BY w STORE out", PROTO_REQ_SAME, { "s", "out" } },
        { "SORT_RO s", PROTO_REQ_SINGLE, { "s" } },
        { "EVAL return~1 2 a b x", PROTO_REQ_SAME, { "a", "b" } },
        { "EVALSHA abc 1 k", PROTO_REQ_SINGLE, { "k" } },
        { "FCALL_RO f 1 k", PROTO_REQ_SINGLE, { "k" } },
        { "OBJECT ENCODING k", PROTO_REQ_SINGLE, { "k" } },
        { "object freq k", PROTO_REQ_SINGLE, { "k" } },
        { "XINFO STREAM s FULL", PROTO_REQ_SINGLE, { "s" } },
        { "XGROUP CREATE s g $", PROTO_REQ_SINGLE, { "s" } },
        { "MEMORY USAGE k", PROTO_REQ_SINGLE, { "k" } },
        { "XADD s * f v", PROTO_REQ_SINGLE, { "s" } },
        { "BITFIELD_RO k GET u8 0", PROTO_REQ_SINGLE, { "k" } },
        { "LPOS l x RANK 1", PROTO_REQ_SINGLE, { "l" } },
        { "RESTORE k 0 x", PROTO_REQ_SINGLE, { "k" } },
        { "PING", PROTO_REQ_LOCAL, { NULL } },
        { "ECHO x", PROTO_REQ_LOCAL, { NULL } },
        { "SELECT 0", PROTO_REQ_LOCAL, { NULL } },
        { "COMMAND", PROTO_REQ_LOCAL, { NULL } },
        { "COMMAND COUNT", PROTO_REQ_LOCAL, { NULL } },
        { "INFO", PROTO_REQ_BROADCAST, { NULL } },
        { "INFO server clients", PROTO_REQ_BROADCAST, { NULL } },
        { "INFO keyspace", PROTO_REQ_BROADCAST, { NULL } },
        { "DBSIZE", PROTO_REQ_BROADCAST, { NULL } },
        { "TIME", PROTO_REQ_LOCAL, { NULL } },
        { "CLIENT SETNAME n", PROTO_REQ_LOCAL, { NULL } },
        { "QUIT", PROTO_REQ_LOCAL, { NULL } },
    };
    for (size_t i = 0; i < RL_ARRAY_SIZE(cases); i++) {
        struct res r = req_of(cases[i].line, AUTHED);
        ck_assert_msg(r.rc > 0, "%s: rc %d", cases[i].line, r.rc);
        ck_assert_msg(r.req.kind == cases[i].kind, "%s: kind %d (%s)", cases[i].line, r.req.kind, r.err);
        uint32_t n = 0;
        while (n < 5 && cases[i].keys[n])
            n++;
        ck_assert_msg(r.req.nkeys == n, "%s: %u keys", cases[i].line, r.req.nkeys);
        for (uint32_t k = 0; k < n; k++)
            ck_assert_msg(strcmp(r.keys[k], cases[i].keys[k]) == 0, "%s: key %u = %s",
                          cases[i].line, k, r.keys[k]);
    }
    struct res r = req_of("QUIT", AUTHED);
    ck_assert(r.req.flags & PROTO_RF_CLOSE);
    r = req_of("DBSIZE", AUTHED);
    ck_assert_uint_eq(redis_commands[r.req.cmd].merge, REDIS_MERGE_SUM);
    r = req_of("INFO keyspace", AUTHED);
    ck_assert_uint_eq(redis_commands[r.req.cmd].merge, REDIS_MERGE_KEYSPACE);
}
END_TEST

START_TEST(test_eval_numkeys)
{
    struct res r = req_of("EVAL return~1 0", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert(r.req.flags & PROTO_RF_NOKEY);
    ck_assert_uint_eq(r.req.nkeys, 1);
    ck_assert_str_eq(r.keys[0], "return 1");     /* routed by the script body */
    r = req_of("EVALSHA deadbeef 0 a1", AUTHED);
    ck_assert(r.req.flags & PROTO_RF_NOKEY);
    ck_assert_str_eq(r.keys[0], "deadbeef");
    r = req_of("EVAL s 2 a", AUTHED);
    ck_assert_str_eq(r.err, "-ERR Number of keys can't be greater than number of args\r\n");
    r = req_of("EVAL s -1", AUTHED);
    ck_assert_str_eq(r.err, "-ERR Number of keys can't be negative\r\n");
    r = req_of("EVAL s x", AUTHED);
    ck_assert_str_eq(r.err, "-ERR value is not an integer or out of range\r\n");
    r = req_of("ZUNION 0 a", AUTHED);
    ck_assert_str_eq(r.err, "-ERR at least 1 input key is needed for 'zunion' command\r\n");
    r = req_of("ZDIFFSTORE d 0 a", AUTHED);
    ck_assert_str_eq(r.err, "-ERR at least 1 input key is needed for 'zdiffstore' command\r\n");
    r = req_of("LMPOP 0 a LEFT", AUTHED);
    ck_assert_str_eq(r.err, "-ERR numkeys should be greater than 0\r\n");
    r = req_of("SINTERCARD 0 a", AUTHED);
    ck_assert_str_eq(r.err, "-ERR numkeys should be greater than 0\r\n");
    /* each family's own texts, as redis-server 7.0.15 answers them (the
     * upstream suite's "LMPOP/ZMPOP/BZMPOP with illegal argument" tests) */
    static const struct { const char *line, *err; } bad[] = {
        { "LMPOP a k LEFT", "-ERR numkeys should be greater than 0\r\n" },
        { "LMPOP -1 k LEFT", "-ERR numkeys should be greater than 0\r\n" },
        { "LMPOP 01 k LEFT", "-ERR numkeys should be greater than 0\r\n" },
        { "LMPOP 9223372036854775808 k LEFT", "-ERR numkeys should be greater than 0\r\n" },
        { "LMPOP 2 k LEFT", "-ERR syntax error\r\n" },   /* no room for LEFT */
        { "LMPOP 3 k LEFT", "-ERR syntax error\r\n" },
        { "BLMPOP 0 a k LEFT", "-ERR numkeys should be greater than 0\r\n" },
        { "BLMPOP 0 2 k LEFT", "-ERR syntax error\r\n" },
        { "ZMPOP -1 k MIN", "-ERR numkeys should be greater than 0\r\n" },
        { "ZMPOP 2 k MIN", "-ERR syntax error\r\n" },
        { "BZMPOP 1 1.5 k MIN", "-ERR numkeys should be greater than 0\r\n" },
        { "BZMPOP 1 9 k MIN", "-ERR syntax error\r\n" },
        { "SINTERCARD x a", "-ERR numkeys should be greater than 0\r\n" },
        { "SINTERCARD -1 a", "-ERR numkeys should be greater than 0\r\n" },
        { "SINTERCARD 2 a", "-ERR Number of keys can't be greater than number of args\r\n" },
        { "ZUNION -1 a", "-ERR at least 1 input key is needed for 'zunion' command\r\n" },
        { "ZINTERCARD -1 a", "-ERR at least 1 input key is needed for 'zintercard' command\r\n" },
        { "ZUNION x a", "-ERR value is not an integer or out of range\r\n" },
        { "ZUNION 2 a", "-ERR syntax error\r\n" },
        { "ZINTERSTORE d 3 a b", "-ERR syntax error\r\n" },
    };
    for (size_t i = 0; i < RL_ARRAY_SIZE(bad); i++) {
        r = req_of(bad[i].line, AUTHED);
        ck_assert_msg(strcmp(r.err, bad[i].err) == 0, "%s: %s", bad[i].line, r.err);
    }
    r = req_of("LMPOP 1 k LEFT", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    r = req_of("SINTERCARD 2 a b", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SAME);
    r = req_of("EVAL s 1 k", AUTHED);
    ck_assert(!(r.req.flags & PROTO_RF_NOKEY));
    ck_assert(r.req.flags & PROTO_RF_WRITE);
}
END_TEST

/* ------------------------------------------------------------- replies */

struct rres {
    int rc;
    struct proto_rsp rsp;
};

/* Parse one reply unit whole, then byte by byte with a fresh parser. */
static struct rres rsp_both(const char *s, size_t len, uint16_t rflags)
{
    struct proto_parser p1 = { 0 }, p2 = { 0 };
    struct rres a;
    struct proto_rsp rsp;
    uint16_t cmd = (uint16_t)(redis_command_find("GET") - redis_commands);

    a.rc = R->parse_rsp(&p1, s, len, cmd, rflags, &a.rsp);
    if (a.rc > 0) {
        for (size_t i = 0; i < (size_t)a.rc; i++)
            ck_assert_msg(R->parse_rsp(&p2, s, i, cmd, rflags, &rsp) == 0, "prefix %zu", i);
        int rc = R->parse_rsp(&p2, s, (size_t)a.rc, cmd, rflags, &rsp);
        ck_assert_int_eq(rc, a.rc);
        ck_assert_uint_eq(rsp.hdr_len, a.rsp.hdr_len);
        ck_assert_uint_eq(rsp.body_len, a.rsp.body_len);
        ck_assert_uint_eq(rsp.flags, a.rsp.flags);
        ck_assert_uint_eq(p2.u.redis.state, 0);
    } else if (a.rc < 0) {
        /* garbage is also garbage when it arrives byte by byte */
        int rc = 0;
        for (size_t i = 1; i <= len && rc == 0; i++)
            rc = R->parse_rsp(&p2, s, i, cmd, rflags, &rsp);
        ck_assert_int_lt(rc, 0);
    }
    return a;
}

#define RSP(s, f) rsp_both(s, sizeof(s) - 1, f)

START_TEST(test_rsp_types)
{
    struct rres r = RSP("+OK\r\n", 0);
    ck_assert_int_eq(r.rc, 5);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL);
    r = RSP("-ERR bad thing\r\n", 0);
    ck_assert_int_eq(r.rc, 16);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL | PROTO_SF_ERROR);
    r = RSP(":-42\r\n", 0);
    ck_assert_int_eq(r.rc, 6);
    r = RSP("$-1\r\n", PROTO_RF_RETRIEVAL);
    ck_assert_int_eq(r.rc, 5);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL);
    r = RSP("$-1\r\n", 0);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL);
    /* a top-level bulk: its header, the value streams as body */
    r = RSP("$5\r\nhello\r\n", PROTO_RF_RETRIEVAL);
    ck_assert_int_eq(r.rc, 4);
    ck_assert_uint_eq(r.rsp.body_len, 7);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL | PROTO_SF_ITEM);
    r = RSP("$0\r\n\r\n", 0);
    ck_assert_int_eq(r.rc, 4);
    ck_assert_uint_eq(r.rsp.body_len, 2);
    r = RSP("*-1\r\n", 0);
    ck_assert_int_eq(r.rc, 5);
    r = RSP("*0\r\n", 0);
    ck_assert_int_eq(r.rc, 4);
    static const char arr[] = "*3\r\n$1\r\na\r\n$-1\r\n:7\r\n+trailing";
    r = RSP(arr, 0);
    ck_assert_int_eq(r.rc, (int)sizeof(arr) - 1 - 9);
    ck_assert_uint_eq(r.rsp.body_len, 0);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL);
    static const char nested[] = "*2\r\n*2\r\n*1\r\n+x\r\n*-1\r\n*3\r\n:1\r\n-E in array\r\n$2\r\n\r\n\r\n";
    r = RSP(nested, 0);
    ck_assert_int_eq(r.rc, (int)sizeof(nested) - 1);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL);    /* an error inside an array is data */
}
END_TEST

START_TEST(test_rsp_garbage)
{
    ck_assert_int_lt(RSP("%-1\r\n", 0).rc, 0);       /* RESP3 has no null map */
    ck_assert_int_lt(RSP("~-1\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("=-1\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("!-1\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("#x\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("#tt\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("_x\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("$?\r\n", 0).rc, 0);        /* streamed: Redis never sends them */
    ck_assert_int_lt(RSP("*?\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("*1\r\n#y\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("%1\r\n+a\r\n:x\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("hello\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP(":12a\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("$-2\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("$x\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("*-2\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("+OK\n", 0).rc, 0);
    ck_assert_int_lt(RSP("*2\r\n$1\r\nabc\r\n", 0).rc, 0);   /* bulk longer than declared */
    ck_assert_int_lt(RSP("*1\r\n?\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("\r\n", 0).rc, 0);
}
END_TEST

/* Header numbers take string2ll's grammar whether or not they are of the short form the
 * parser reads without memchr (1-18 digits, no leading zero). */
START_TEST(test_rsp_numbers_both_ways)
{
    ck_assert_int_lt(RSP("$01\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("*1\r\n:0123\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("*01\r\n:1\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("$3\r\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("*1\r\n$3\r\r\nabc\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("$+3\r\n", 0).rc, 0);
    ck_assert_int_lt(RSP("*1\r\n$100000000000000000\r\n", 0).rc, 0);  /* over a bulk's limit */
    ck_assert_int_lt(RSP("*1\r\n:9999999999999999999\r\n", 0).rc, 0);  /* over int64 */
    ck_assert_int_eq(RSP("*1\r\n:123456789012345678\r\n", 0).rc, 25);   /* 18 digits */
    ck_assert_int_eq(RSP("*1\r\n:1234567890123456789\r\n", 0).rc, 26);  /* 19: the long way */
    ck_assert_int_eq(RSP(":0\r\n", 0).rc, 4);
    ck_assert_int_eq(RSP("*1\r\n:-0\r\n", 0).rc, -1);    /* string2ll refuses -0 */
    struct rres r = RSP("$12\r\nhello world!\r\n", 0);
    ck_assert_int_eq(r.rc, 5);
    ck_assert_uint_eq(r.rsp.body_len, 14);
    r = RSP("*2\r\n$10\r\n0123456789\r\n*1\r\n+1\r\n", 0);
    ck_assert_int_eq(r.rc, 29);
}
END_TEST

START_TEST(test_rsp_large_array_chunked_linear)
{
    /* 100,000 bulk elements arriving 1 KiB at a time, as a core would feed
     * them: each call resumes from p->scan (which only grows), units are
     * handed over in order, and the whole thing is fast. */
    const uint32_t n = 100000;
    struct buf all;
    buf_init(&all);
    ck_assert_int_eq(buf_appendf(&all, "*%u\r\n", n), 0);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_int_eq(buf_appendf(&all, "$6\r\nv%05u\r\n", i % 100000), 0);
    size_t total = buf_len(&all);
    struct proto_parser p = { 0 };
    struct proto_rsp rsp;
    size_t consumed = 0, avail = 0, units = 0;
    uint32_t last_scan = 0;
    int final = 0;
    clock_t t0 = clock();
    while (!final) {
        avail = avail + 1024 < total ? avail + 1024 : total;
        for (;;) {
            int rc = R->parse_rsp(&p, all.data + consumed, avail - consumed, 0, 0, &rsp);
            ck_assert_int_ge(rc, 0);
            if (rc == 0) {
                ck_assert_uint_ge(p.u.redis.scan, last_scan);
                last_scan = p.u.redis.scan;
                break;
            }
            consumed += (size_t)rc;
            units++;
            last_scan = 0;
            if (rsp.flags & PROTO_SF_FINAL) {
                final = 1;
                break;
            }
        }
        ck_assert(avail < total || final);
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    ck_assert_uint_eq(consumed, total);
    ck_assert_uint_ge(units, 1);
    ck_assert_msg(secs < 1.0, "took %.3fs", secs);
    buf_free(&all);
}
END_TEST

START_TEST(test_rsp_huge_array_streams_in_units)
{
    /* An array larger than REDIS_RSP_UNIT_MAX is handed over as non-final
     * units of whole elements, then a final unit; the bytes add up. */
    struct buf all;
    buf_init(&all);
    const uint32_t n = 50000;
    ck_assert_int_eq(buf_appendf(&all, "*%u\r\n", n), 0);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_int_eq(buf_appendf(&all, "$40\r\n%040u\r\n", i), 0);
    size_t total = buf_len(&all);
    ck_assert_uint_gt(total, 2 * REDIS_RSP_UNIT_MAX);
    struct proto_parser p = { 0 };
    struct proto_rsp rsp;
    size_t consumed = 0, avail = 0;
    int nonfinal = 0, final = 0;
    while (!final) {
        avail = avail + 65536 < total ? avail + 65536 : total;
        int rc;
        while ((rc = R->parse_rsp(&p, all.data + consumed, avail - consumed, 0, 0, &rsp)) > 0) {
            consumed += (size_t)rc;
            if (rsp.flags & PROTO_SF_FINAL) {
                final = 1;
                break;
            }
            nonfinal++;
            ck_assert_uint_ge(rsp.hdr_len, REDIS_RSP_UNIT_MAX);
        }
        ck_assert_int_ge(rc, 0);
    }
    ck_assert_int_ge(nonfinal, 2);
    ck_assert_uint_eq(consumed, total);
    buf_free(&all);
}
END_TEST

/* ----------------------------------------------------- fragments, merge */

static struct buf *mkbuf(const char *s)
{
    struct buf *b = malloc(sizeof(*b));
    buf_init(b);
    buf_append_str(b, s);
    return b;
}

static void freebufs(struct buf **b, int n)
{
    for (int i = 0; i < n; i++) {
        buf_free(b[i]);
        free(b[i]);
    }
}

static void frag_of(const struct proto_req *req, const char *buf, const uint32_t *idx, uint32_t n,
                    const char *want)
{
    struct buf out;
    buf_init(&out);
    ck_assert_int_eq(R->frag_write(req, buf, idx, n, &out), 0);
    ck_assert_uint_eq(buf_len(&out), strlen(want));
    ck_assert_int_eq(memcmp(buf_rptr(&out), want, strlen(want)), 0);
    buf_free(&out);
}

static void merge_to(const struct proto_req *req, const char *buf, const uint32_t *key_frag,
                     struct buf **frag, uint32_t nfrag, int want_rc, const char *want)
{
    struct buf out;
    buf_init(&out);
    buf_append_str(&out, "prev");
    int rc = R->merge(req->cmd, buf, req->keys, req->nkeys, key_frag, frag, nfrag, &out);
    ck_assert_int_eq(rc, want_rc);
    if (rc == 0) {
        ck_assert_msg(buf_len(&out) == 4 + strlen(want) &&
                      memcmp(buf_rptr(&out) + 4, want, strlen(want)) == 0, "merged %.*s",
                      (int)buf_len(&out) - 4, buf_rptr(&out) + 4);
        ck_assert_int_eq(memcmp(buf_rptr(&out) + 4, want, strlen(want)), 0);
    } else {
        ck_assert_uint_eq(buf_len(&out), 4);         /* nothing half-written */
    }
    buf_free(&out);
}

/* A failed merge leaves out as it was, also when out has consumed bytes in front and
 * the merge's first append compacted it (buf_reserve moves the unread bytes to offset
 * 0): the rollback kept an absolute write position, which then exposed the merge's
 * half-written bytes and stale ones after the client's pending output. */
START_TEST(test_failed_merge_after_compaction_leaves_out)
{
    char buf[256];
    size_t len = mk(buf, "mget a b c d");
    struct proto_parser p = { .flags = AUTHED };
    struct proto_req req;
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);

    struct buf out;
    buf_init(&out);
    char fill[BUF_STD_SIZE];
    memset(fill, 'x', sizeof(fill));
    ck_assert_int_eq(buf_append(&out, fill, sizeof(fill)), 0);  /* full: no room left */
    buf_consume(&out, 100);                                     /* 100 free bytes in front */
    size_t before = buf_len(&out);

    uint32_t key_frag[] = { 1, 0, 1, 0 };
    struct buf *fm[2] = { mkbuf("*1\r\n$2\r\nvb\r\n"), mkbuf("*2\r\n$2\r\nva\r\n$2\r\nvc\r\n") };
    int rc = R->merge(req.cmd, buf, req.keys, req.nkeys, key_frag, fm, 2, &out);
    ck_assert_int_eq(rc, -1);
    ck_assert_uint_eq(buf_len(&out), before);
    for (size_t i = 0; i < buf_len(&out); i++)
        ck_assert_msg(buf_rptr(&out)[i] == 'x', "byte %zu is %#x", i, buf_rptr(&out)[i]);
    freebufs(fm, 2);
    buf_free(&out);
    proto_parser_free(&p);
}
END_TEST

START_TEST(test_mget_fragments_and_merge)
{
    char buf[256];
    size_t len = mk(buf, "mget a b c d");
    struct proto_parser p = { .flags = AUTHED };
    struct proto_req req;
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    ck_assert_int_eq(req.kind, PROTO_REQ_FANOUT);

    uint32_t f1[] = { 0, 2 }, f0[] = { 1, 3 };
    frag_of(&req, buf, f1, 2, "*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nc\r\n");
    frag_of(&req, buf, f0, 2, "*3\r\n$4\r\nMGET\r\n$1\r\nb\r\n$1\r\nd\r\n");

    uint32_t key_frag[] = { 1, 0, 1, 0 };
    struct buf *fr[2] = { mkbuf("*2\r\n$2\r\nvb\r\n$-1\r\n"), mkbuf("*2\r\n$2\r\nva\r\n*1\r\n:3\r\n") };
    merge_to(&req, buf, key_frag, fr, 2, 0, "*4\r\n$2\r\nva\r\n$2\r\nvb\r\n*1\r\n:3\r\n$-1\r\n");
    freebufs(fr, 2);

    /* one fragment failed: the client gets that error */
    struct buf *fe[2] = { mkbuf("*2\r\n$2\r\nvb\r\n$-1\r\n"), mkbuf("-ERR timeout\r\n") };
    merge_to(&req, buf, key_frag, fe, 2, 0, "-ERR timeout\r\n");
    freebufs(fe, 2);

    /* a fragment with fewer elements than keys is malformed */
    struct buf *fm[2] = { mkbuf("*1\r\n$2\r\nvb\r\n"), mkbuf("*2\r\n$2\r\nva\r\n$2\r\nvc\r\n") };
    merge_to(&req, buf, key_frag, fm, 2, -1, NULL);
    freebufs(fm, 2);
    struct buf *fx[2] = { mkbuf("*3\r\n$2\r\nvb\r\n$-1\r\n:1\r\n"), mkbuf("*2\r\n$2\r\nva\r\n$2\r\nvc\r\n") };
    merge_to(&req, buf, key_frag, fx, 2, -1, NULL);
    freebufs(fx, 2);
    proto_parser_free(&p);
}
END_TEST

START_TEST(test_mset_fragments_carry_values)
{
    char buf[256];
    size_t len = mk(buf, "MSET k1 v1 k2 value~two k3 v3");
    struct proto_parser p = { .flags = AUTHED };
    struct proto_req req;
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    ck_assert_int_eq(req.kind, PROTO_REQ_FANOUT);
    uint32_t idx[] = { 2, 1 };
    frag_of(&req, buf, idx, 2,
            "*5\r\n$4\r\nMSET\r\n$2\r\nk3\r\n$2\r\nv3\r\n$2\r\nk2\r\n$9\r\nvalue two\r\n");

    uint32_t key_frag[] = { 0, 1, 1 };
    struct buf *ok[2] = { mkbuf("+OK\r\n"), mkbuf("+OK\r\n") };
    merge_to(&req, buf, key_frag, ok, 2, 0, "+OK\r\n");
    freebufs(ok, 2);
    struct buf *bad[3] = { mkbuf("+OK\r\n"), mkbuf("-OOM no memory\r\n"), mkbuf("-ERR second\r\n") };
    merge_to(&req, buf, key_frag, bad, 3, 0, "-OOM no memory\r\n");
    freebufs(bad, 3);
    proto_parser_free(&p);

    /* inline MSET: values found after their keys on the line */
    static const char il[] = "mset a 1 'b c' \"2 3\"  d x\r\n";
    struct proto_parser p2 = { .flags = AUTHED };
    ck_assert_int_eq(R->parse_req(&p2, il, sizeof(il) - 1, &req), (int)sizeof(il) - 1);
    ck_assert_uint_eq(req.nkeys, 3);
    uint32_t idx2[] = { 1, 2, 0 };
    frag_of(&req, il, idx2, 3,
            "*7\r\n$4\r\nMSET\r\n$3\r\nb c\r\n$3\r\n2 3\r\n$1\r\nd\r\n$1\r\nx\r\n$1\r\na\r\n$1\r\n1\r\n");
    proto_parser_free(&p2);
}
END_TEST

START_TEST(test_sum_merges)
{
    const char *cmds[] = { "DEL a b c", "EXISTS a b c", "UNLINK a b c", "TOUCH a b c" };
    for (size_t i = 0; i < RL_ARRAY_SIZE(cmds); i++) {
        char buf[128];
        size_t len = mk(buf, cmds[i]);
        struct proto_parser p = { .flags = AUTHED };
        struct proto_req req;
        ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
        ck_assert_int_eq(req.kind, PROTO_REQ_FANOUT);
        uint32_t key_frag[] = { 1, 0, 1 };
        struct buf *fr[2] = { mkbuf(":1\r\n"), mkbuf(":2\r\n") };
        merge_to(&req, buf, key_frag, fr, 2, 0, ":3\r\n");
        freebufs(fr, 2);
        struct buf *fe[2] = { mkbuf(":1\r\n"), mkbuf("-ERR timeout\r\n") };
        merge_to(&req, buf, key_frag, fe, 2, 0, "-ERR timeout\r\n");
        freebufs(fe, 2);
        struct buf *fg[2] = { mkbuf(":1\r\n"), mkbuf("+what\r\n") };
        merge_to(&req, buf, key_frag, fg, 2, -1, NULL);
        freebufs(fg, 2);
        uint32_t idx[] = { 0, 2 };
        char want[64];
        snprintf(want, sizeof(want), "*3\r\n$%zu\r\n%.*s\r\n$1\r\na\r\n$1\r\nc\r\n",
                 strcspn(cmds[i], " "), (int)strcspn(cmds[i], " "), cmds[i]);
        frag_of(&req, buf, idx, 2, want);
        proto_parser_free(&p);
    }
}
END_TEST

START_TEST(test_broadcast_merges)
{
    char buf[64];
    size_t len = mk(buf, "DBSIZE");
    struct proto_parser p = { .flags = AUTHED };
    struct proto_req req;
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    struct buf *fr[3] = { mkbuf(":10\r\n"), mkbuf(":0\r\n"), mkbuf(":5\r\n") };
    merge_to(&req, buf, NULL, fr, 3, 0, ":15\r\n");
    freebufs(fr, 3);

    len = mk(buf, "INFO KEYSPACE");
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    ck_assert_int_eq(req.kind, PROTO_REQ_BROADCAST);
    const char *a = "# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=100\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n";
    const char *b = "# Keyspace\r\ndb0:keys=4,expires=3,avg_ttl=500\r\n";
    char fa[256], fb[256];
    snprintf(fa, sizeof(fa), "$%zu\r\n%s\r\n", strlen(a), a);
    snprintf(fb, sizeof(fb), "$%zu\r\n%s\r\n", strlen(b), b);
    struct buf *ks[3] = { mkbuf(fa), mkbuf(fb), mkbuf("$12\r\n# Keyspace\r\n\r\n") };
    const char *body = "# Keyspace\r\ndb0:keys=7,expires=4,avg_ttl=400\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n";
    char want[256];
    snprintf(want, sizeof(want), "$%zu\r\n%s\r\n", strlen(body), body);
    merge_to(&req, buf, NULL, ks, 3, 0, want);
    freebufs(ks, 3);

    len = mk(buf, "FLUSHDB");
    p.flags |= PROTO_PF_ALLOW_FLUSH;
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    ck_assert_int_eq(req.kind, PROTO_REQ_BROADCAST);
    struct buf *fl[2] = { mkbuf("+OK\r\n"), mkbuf("+OK\r\n") };
    merge_to(&req, buf, NULL, fl, 2, 0, "+OK\r\n");
    freebufs(fl, 2);
    proto_parser_free(&p);
}
END_TEST

/* --------------------------------------------------------------- local */

struct sess {
    struct proto_parser p;
    struct proto_client c;
    struct proto_env env;
    struct buf out;
    char buf[4096];
};

static void sess_init(struct sess *s, const char *auth)
{
    memset(s, 0, sizeof(*s));
    s->p.flags = auth ? 0 : AUTHED;
    s->c.auth = auth;
    s->c.authed = auth == NULL;
    s->c.id = 42;
    s->c.db = 0;
    strcpy(s->c.peer, "127.0.0.1:5555");
    s->env.version = "0.1.0";
    s->env.now_us = 1700000000123456ULL;
    s->env.uptime_s = 99;
    buf_init(&s->out);
}

/* Send one request through parse_req (and local() if LOCAL); return the
 * reply text the client would see (err for ERROR, "<fwd>" if forwarded). */
static const char *say(struct sess *s, const char *line, int *close)
{
    static char reply[65536];
    struct proto_req req;
    size_t len = mk(s->buf, line);
    int rc = R->parse_req(&s->p, s->buf, len, &req);
    ck_assert_int_eq(rc, (int)len);
    if (close)
        *close = 0;
    if (req.kind == PROTO_REQ_ERROR) {
        snprintf(reply, sizeof(reply), "%.*s", (int)req.err_len, req.err);
        return reply;
    }
    if (req.kind != PROTO_REQ_LOCAL)
        return "<fwd>";
    s->out.rpos = s->out.wpos = 0;
    int r = R->local(&s->c, &s->p, &req, s->buf, &s->env, &s->out);
    ck_assert_int_ge(r, 0);
    if (close)
        *close = r == PROTO_LOCAL_CLOSE;
    snprintf(reply, sizeof(reply), "%.*s", (int)buf_len(&s->out), buf_rptr(&s->out));
    return reply;
}

START_TEST(test_local_basics)
{
    struct sess s;
    int close;
    sess_init(&s, NULL);
    ck_assert_str_eq(say(&s, "PING", NULL), "+PONG\r\n");
    ck_assert_str_eq(say(&s, "ping hi", NULL), "$2\r\nhi\r\n");
    ck_assert_str_eq(say(&s, "PING a b", NULL), "-ERR wrong number of arguments for 'ping' command\r\n");
    ck_assert_str_eq(say(&s, "ECHO x~y", NULL), "$3\r\nx y\r\n");
    ck_assert_str_eq(say(&s, "SELECT 0", NULL), "+OK\r\n");
    ck_assert_str_eq(say(&s, "SELECT 16", NULL), "-ERR DB index is out of range\r\n");
    ck_assert_str_eq(say(&s, "SELECT -1", NULL), "-ERR DB index is out of range\r\n");
    ck_assert_str_eq(say(&s, "SELECT 3", NULL), "+OK\r\n");     /* served (docs/redis.md) */
    ck_assert_int_eq(s.c.db, 3);
    ck_assert_int_eq(s.c.selected, 1);
    ck_assert_str_eq(say(&s, "SELECT 0", NULL), "+OK\r\n");
    ck_assert_int_eq(s.c.selected, 0);
    s.env.cluster = 1;          /* Redis Cluster has database 0 only */
    ck_assert_str_eq(say(&s, "SELECT 3", NULL), "-ERR SELECT is not allowed in cluster mode\r\n");
    s.env.cluster = 0;
    ck_assert_str_eq(say(&s, "SELECT x", NULL), "-ERR value is not an integer or out of range\r\n");
    ck_assert_str_eq(say(&s, "TIME", NULL), "*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n");
    ck_assert_str_eq(say(&s, "CLIENT GETNAME", NULL), "$-1\r\n");
    ck_assert_str_eq(say(&s, "CLIENT SETNAME app1", NULL), "+OK\r\n");
    ck_assert_str_eq(say(&s, "client getname", NULL), "$4\r\napp1\r\n");
    ck_assert_str_eq(say(&s, "CLIENT SETNAME a~b", NULL),
                     "-ERR Client names cannot contain spaces, newlines or special characters.\r\n");
    ck_assert_str_eq(say(&s, "CLIENT ID", NULL), ":42\r\n");
    ck_assert_ptr_nonnull(strstr(say(&s, "CLIENT INFO", NULL), "id=42 addr=127.0.0.1:5555 "));
    ck_assert_ptr_nonnull(strstr(say(&s, "CLIENT LIST", NULL), " idle=0 flags=N db=0 "));
    /* without the core's walk nothing can be killed: Redis's answers for none */
    ck_assert_str_eq(say(&s, "CLIENT KILL 1.2.3.4:5", NULL), "-ERR No such client\r\n");
    ck_assert_str_eq(say(&s, "CLIENT KILL ID 42", NULL), ":0\r\n");
    ck_assert_str_eq(say(&s, "CLIENT KILL ID 0", NULL), "-ERR client-id should be greater than 0\r\n");
    ck_assert_str_eq(say(&s, "CLIENT KILL USER bob", NULL), "-ERR No such user 'bob'\r\n");
    ck_assert_str_eq(say(&s, "CLIENT LIST TYPE x", NULL), "-ERR Unknown client type 'x'\r\n");
    /* INFO goes to every server and is merged with the proxy's numbers (check_info.c) */
    ck_assert_str_eq(say(&s, "INFO", NULL), "<fwd>");
    ck_assert_str_eq(say(&s, "QUIT", &close), "+OK\r\n");
    ck_assert_int_eq(close, 1);
    buf_free(&s.out);
    proto_parser_free(&s.p);
}
END_TEST

START_TEST(test_auth_flows)
{
    struct sess s;
    sess_init(&s, "s3cret");
    ck_assert_str_eq(say(&s, "GET k", NULL), "-NOAUTH Authentication required.\r\n");
    ck_assert_str_eq(say(&s, "PING", NULL), "-NOAUTH Authentication required.\r\n");
    ck_assert_str_eq(say(&s, "KEYS *", NULL), "-NOAUTH Authentication required.\r\n");
    ck_assert_str_eq(say(&s, "AUTH wrong", NULL),
                     "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    ck_assert_str_eq(say(&s, "AUTH s3cre", NULL),
                     "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    ck_assert_str_eq(say(&s, "AUTH bob s3cret", NULL),
                     "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    ck_assert_int_eq(s.c.authed, 0);
    ck_assert_str_eq(say(&s, "HELLO 2", NULL),
                     "-NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                     "HELLO AUTH <user> <pass> option can be used to authenticate the client and "
                     "select the RESP protocol version at the same time\r\n");
    ck_assert_str_eq(say(&s, "AUTH s3cret", NULL), "+OK\r\n");
    ck_assert_int_eq(s.c.authed, 1);
    ck_assert(s.p.flags & PROTO_PF_AUTHED);
    ck_assert_str_eq(say(&s, "GET k", NULL), "<fwd>");
    ck_assert_str_eq(say(&s, "RESET", NULL), "+RESET\r\n");
    ck_assert_str_eq(say(&s, "GET k", NULL), "-NOAUTH Authentication required.\r\n");
    ck_assert_str_eq(say(&s, "AUTH default s3cret", NULL), "+OK\r\n");
    ck_assert_str_eq(say(&s, "GET k", NULL), "<fwd>");
    buf_free(&s.out);
    proto_parser_free(&s.p);

    sess_init(&s, "pw");
    const char *h = say(&s, "HELLO 2 AUTH default pw SETNAME me", NULL);
    ck_assert_int_eq(strncmp(h, "*14\r\n$6\r\nserver\r\n$10\r\nringleader\r\n", 34), 0);
    ck_assert_int_eq(s.c.authed, 1);
    ck_assert_str_eq(s.c.name, "me");
    buf_free(&s.out);
    proto_parser_free(&s.p);

    sess_init(&s, NULL);
    ck_assert_str_eq(say(&s, "AUTH x", NULL),
                     "-ERR AUTH <password> called without any password configured for the default user. "
                     "Are you sure your configuration is correct?\r\n");
    buf_free(&s.out);
    proto_parser_free(&s.p);
}
END_TEST

START_TEST(test_hello)
{
    struct sess s;
    sess_init(&s, NULL);
    ck_assert_str_eq(say(&s, "HELLO 2", NULL),
                     "*14\r\n$6\r\nserver\r\n$10\r\nringleader\r\n$7\r\nversion\r\n$5\r\n0.1.0\r\n"
                     "$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:42\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
                     "$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n");
    ck_assert_str_eq(say(&s, "HELLO 3", NULL),
                     "%7\r\n$6\r\nserver\r\n$10\r\nringleader\r\n$7\r\nversion\r\n$5\r\n0.1.0\r\n"
                     "$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:42\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
                     "$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n");
    ck_assert(s.p.flags & PROTO_PF_VARIANT);
    /* HELLO without a version answers in the protocol the client has */
    ck_assert_int_eq(say(&s, "HELLO", NULL)[0], '%');
    ck_assert_str_eq(say(&s, "CLIENT GETNAME", NULL), "_\r\n");
    ck_assert_int_eq(say(&s, "HELLO 2 SETNAME app", NULL)[0], '*');
    ck_assert(!(s.p.flags & PROTO_PF_VARIANT));
    ck_assert_str_eq(say(&s, "CLIENT GETNAME", NULL), "$3\r\napp\r\n");
    ck_assert_int_eq(say(&s, "HELLO 3 AUTH default nopass-ignored", NULL)[0], '%');
    ck_assert_str_eq(say(&s, "RESET", NULL), "+RESET\r\n");
    ck_assert(!(s.p.flags & PROTO_PF_VARIANT));
    ck_assert_str_eq(say(&s, "HELLO 1", NULL), "-NOPROTO unsupported protocol version\r\n");
    ck_assert_str_eq(say(&s, "HELLO 03", NULL),
                     "-ERR Protocol version is not an integer or out of range\r\n");
    ck_assert_str_eq(say(&s, "HELLO 4", NULL), "-NOPROTO unsupported protocol version\r\n");
    ck_assert_str_eq(say(&s, "HELLO 2 bogus", NULL), "-ERR Syntax error in HELLO option 'bogus'\r\n");
    buf_free(&s.out);
    proto_parser_free(&s.p);
}
END_TEST

/* Count the top-level elements of an array reply. */
static long array_len(const char *s)
{
    ck_assert_int_eq(s[0], '*');
    return strtol(s + 1, NULL, 10);
}

START_TEST(test_command_family)
{
    struct sess s;
    sess_init(&s, NULL);
    char want[32];
    snprintf(want, sizeof(want), ":%zu\r\n", redis_command_listed());
    ck_assert_str_eq(say(&s, "COMMAND COUNT", NULL), want);
    ck_assert_uint_gt(redis_command_listed(), 150);

    /* COMMAND lists as many entries as COMMAND COUNT says, and the reply
     * parses as one complete RESP value */
    const char *all = say(&s, "COMMAND", NULL);
    ck_assert_int_eq(array_len(all), (long)redis_command_listed());
    struct proto_parser rp = { 0 };
    struct proto_rsp rsp;
    ck_assert_int_eq(R->parse_rsp(&rp, all, strlen(all), 0, 0, &rsp), (int)strlen(all));
    ck_assert(rsp.flags & PROTO_SF_FINAL);

    ck_assert_str_eq(say(&s, "COMMAND INFO get", NULL),
                     "*1\r\n*10\r\n$3\r\nget\r\n:2\r\n*1\r\n+readonly\r\n:1\r\n:1\r\n:1\r\n*0\r\n*0\r\n*0\r\n*0\r\n");
    ck_assert_str_eq(say(&s, "COMMAND INFO monitor nosuch", NULL), "*2\r\n$-1\r\n$-1\r\n");
    const char *obj = say(&s, "COMMAND INFO object", NULL);
    ck_assert_ptr_nonnull(strstr(obj, "$15\r\nobject|encoding\r\n:3\r\n"));
    ck_assert_ptr_null(strstr(obj, "object|help"));
    ck_assert_str_eq(say(&s, "COMMAND GETKEYS MSET a 1 b 2", NULL), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
    ck_assert_str_eq(say(&s, "COMMAND GETKEYS EVAL s 2 x y z", NULL), "*2\r\n$1\r\nx\r\n$1\r\ny\r\n");
    ck_assert_str_eq(say(&s, "COMMAND GETKEYS OBJECT ENCODING k", NULL), "*1\r\n$1\r\nk\r\n");
    ck_assert_str_eq(say(&s, "COMMAND GETKEYS PING", NULL), "-ERR wrong number of arguments for 'command|getkeys' command\r\n");
    ck_assert_str_eq(say(&s, "COMMAND GETKEYS PING x", NULL), "-ERR The command has no key arguments\r\n");
    ck_assert_str_eq(say(&s, "COMMAND GETKEYS SET k", NULL), "-ERR Invalid number of arguments specified for command\r\n");
    ck_assert_str_eq(say(&s, "COMMAND GETKEYS nosuch x", NULL), "-ERR Invalid command specified\r\n");
    const char *docs = say(&s, "COMMAND DOCS mget", NULL);
    ck_assert_int_eq(strncmp(docs, "*2\r\n$4\r\nmget\r\n*2\r\n$7\r\nsummary\r\n", 31), 0);
    const char *list = say(&s, "COMMAND LIST", NULL);
    ck_assert_int_eq(array_len(list), (long)redis_command_listed());
    buf_free(&s.out);
    proto_parser_free(&s.p);
}
END_TEST

START_TEST(test_error_reply_hello_probe)
{
    struct buf out;
    buf_init(&out);
    ck_assert_int_eq(R->error_reply(PROTO_ERR_CROSSSLOT, NULL, &out), 0);
    ck_assert_int_eq(R->error_reply(PROTO_ERR_TIMEOUT, NULL, &out), 0);
    ck_assert_int_eq(R->error_reply(PROTO_ERR_SERVER, "connection\r\nreset", &out), 0);
    const char *want = "-CROSSSLOT Keys in request don't hash to the same server\r\n"
                       "-ERR timeout\r\n-ERR server error: connection  reset\r\n";
    ck_assert_uint_eq(buf_len(&out), strlen(want));
    ck_assert_int_eq(memcmp(buf_rptr(&out), want, strlen(want)), 0);
    out.rpos = out.wpos = 0;
    ck_assert_int_eq(R->server_hello(&(struct proto_hello){ NULL, "pw", 2, 0, 0 }, &out), 2);
    want = "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n";
    ck_assert_uint_eq(buf_len(&out), strlen(want));
    ck_assert_int_eq(memcmp(buf_rptr(&out), want, strlen(want)), 0);
    out.rpos = out.wpos = 0;
    /* an ACL user: AUTH user pass */
    ck_assert_int_eq(R->server_hello(&(struct proto_hello){ "proxy", "pw", 0, 0, 0 }, &out), 1);
    want = "*3\r\n$4\r\nAUTH\r\n$5\r\nproxy\r\n$2\r\npw\r\n";
    ck_assert_uint_eq(buf_len(&out), strlen(want));
    ck_assert_int_eq(memcmp(buf_rptr(&out), want, strlen(want)), 0);
    out.rpos = out.wpos = 0;
    ck_assert_int_eq(R->server_hello(&(struct proto_hello){ NULL, NULL, 0, 0, 0 }, &out), 0);
    ck_assert_uint_eq(buf_len(&out), 0);
    /* RESP3 connections: HELLO 3, with its AUTH (the default user unless one is named) */
    ck_assert_int_eq(R->server_hello(&(struct proto_hello){ NULL, NULL, 0, 1, 0 }, &out), 1);
    want = "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n";
    ck_assert_uint_eq(buf_len(&out), strlen(want));
    ck_assert_int_eq(memcmp(buf_rptr(&out), want, strlen(want)), 0);
    out.rpos = out.wpos = 0;
    ck_assert_int_eq(R->server_hello(&(struct proto_hello){ NULL, "pw", 3, 1, 0 }, &out), 2);
    want = "*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$2\r\npw\r\n"
           "*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n";
    ck_assert_uint_eq(buf_len(&out), strlen(want));
    ck_assert_int_eq(memcmp(buf_rptr(&out), want, strlen(want)), 0);
    out.rpos = out.wpos = 0;
    ck_assert_str_eq(R->probe, "*1\r\n$4\r\nPING\r\n");
    ck_assert_str_eq(R->name, "redis");
    buf_free(&out);
}
END_TEST


/* ------------------------------------------------------------ agreement with redis-server */

#define MBULK "-ERR Protocol error: invalid multibulk length\r\n"
#define BULK  "-ERR Protocol error: invalid bulk length\r\n"

START_TEST(test_req_numbers_as_string2ll)
{
    /* every form redis-server 7.0.15 rejects (measured) is Redis's error */
    FATAL("*01\r\n$4\r\nPING\r\n", AUTHED, MBULK);
    FATAL("*-0\r\n", AUTHED, MBULK);
    FATAL("*+1\r\n", AUTHED, MBULK);
    FATAL("* 1\r\n", AUTHED, MBULK);
    FATAL("*1 \r\n", AUTHED, MBULK);
    FATAL("*00\r\n", AUTHED, MBULK);
    FATAL("*\r\n", AUTHED, MBULK);
    FATAL("*-\r\n", AUTHED, MBULK);
    FATAL("*1\n$4\r\nPING\r\n", AUTHED, MBULK);     /* the line runs to the next '\r' */
    FATAL("*1\r\n$04\r\nPING\r\n", AUTHED, BULK);
    FATAL("*1\r\n$-0\r\n", AUTHED, BULK);
    FATAL("*1\r\n$+4\r\nPING\r\n", AUTHED, BULK);
    FATAL("*1\r\n$4 \r\nPING\r\n", AUTHED, BULK);
    FATAL("*1\r\n$99999999999999999999\r\n", AUTHED, BULK);
    FATAL("*1\r\n$-9223372036854775809\r\n", AUTHED, BULK);

    /* accepted forms: "*-5" is an empty request, skipped as Redis skips it */
    char buf[128];
    size_t pre = (size_t)sprintf(buf, "*-5\r\n");
    size_t len = pre + mk(buf + pre, "GET k");
    struct res r = parse_both(buf, len, AUTHED);
    ck_assert_int_eq(r.rc, (int)len);
    ck_assert_str_eq(r.keys[0], "k");
    /* Redis reads the byte after a header's '\r' as its '\n', whatever it is */
    static const char odd[] = "*1\rX$4\r\nPING\r\n";
    r = parse_both(odd, sizeof(odd) - 1, AUTHED);
    ck_assert_int_eq(r.rc, (int)sizeof(odd) - 1);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_LOCAL);

    /* numkeys: Redis answers "not an integer" for 01 and -0 */
    r = req_of("EVAL x 01 k", AUTHED);
    ck_assert_str_eq(r.err, "-ERR value is not an integer or out of range\r\n");
    r = req_of("EVAL x -0", AUTHED);
    ck_assert_str_eq(r.err, "-ERR value is not an integer or out of range\r\n");
    r = req_of("EVAL x +1 k", AUTHED);
    ck_assert_str_eq(r.err, "-ERR value is not an integer or out of range\r\n");
}
END_TEST

START_TEST(test_req_nul_where_redis_would_wait)
{
    static const struct { const char *s; size_t len; const char *err; } t[] = {
        /* Redis looks for a header's '\r' with strchr: it would wait forever */
        { "*1\0\r\n$4\r\nPING\r\n", sizeof("*1\0\r\n$4\r\nPING\r\n") - 1,
          "-ERR Protocol error: NUL byte in a header line\r\n" },
        { "*1\r\n$4\0\r\nPING\r\n", sizeof("*1\r\n$4\0\r\nPING\r\n") - 1,
          "-ERR Protocol error: NUL byte in a header line\r\n" },
        /* ... the first byte of a bulk's line included: its '\r' is looked for first */
        { "*1\r\n\0$4\r\nPING\r\n", sizeof("*1\r\n\0$4\r\nPING\r\n") - 1,
          "-ERR Protocol error: NUL byte in a header line\r\n" },
        /* an inline line is read with strchr too; no need to wait for its '\n' */
        { "get a\0b\r\n", sizeof("get a\0b\r\n") - 1,
          "-ERR Protocol error: NUL byte in inline request\r\n" },
        { "get a\0", sizeof("get a\0") - 1, "-ERR Protocol error: NUL byte in inline request\r\n" },
        { "\0\r\n", sizeof("\0\r\n") - 1, "-ERR Protocol error: NUL byte in inline request\r\n" },
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        expect_fatal(t[i].s, t[i].len, AUTHED, t[i].err);
    /* a NUL inside a bulk is data */
    static const char c[] = "*2\r\n$3\r\nGET\r\n$3\r\na\0b\r\n";
    struct res r = parse_both(c, sizeof(c) - 1, AUTHED);
    ck_assert_int_eq(r.rc, (int)sizeof(c) - 1);
    ck_assert_uint_eq(r.k[0].len, 3);
}
END_TEST

START_TEST(test_req_inline_split_as_sdssplitargs)
{
    struct res r;
    /* \v and \f are skipped between arguments but kept inside one */
    static const char a[] = "\v\fGET a\vb\r\n";
    r = parse_both(a, sizeof(a) - 1, AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert_str_eq(r.keys[0], "a\vb");
    /* a quote may open inside a word */
    static const char b[] = "GET a\"b c\"\r\n";
    r = parse_both(b, sizeof(b) - 1, AUTHED);
    ck_assert_str_eq(r.keys[0], "ab c");
    ck_assert_uint_eq(r.fwd_len, strlen("*2\r\n$3\r\nGET\r\n$4\r\nab c\r\n"));
    ck_assert_int_eq(memcmp(r.fwd, "*2\r\n$3\r\nGET\r\n$4\r\nab c\r\n", r.fwd_len), 0);
    /* a CR inside the line separates; one CR before the LF is dropped */
    static const char c[] = "GET a\rb\r\n";
    r = parse_both(c, sizeof(c) - 1, AUTHED);
    ck_assert_str_eq(r.err, "-ERR wrong number of arguments for 'get' command\r\n");
    static const char d[] = "GET a\r\r\n";
    r = parse_both(d, sizeof(d) - 1, AUTHED);
    ck_assert_str_eq(r.keys[0], "a");
    /* an empty quoted argument is an argument */
    static const char e[] = "GET \"\"\n";
    r = parse_both(e, sizeof(e) - 1, AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(r.k[0].len, 0);
    /* \x00 in quotes decodes to a NUL byte, sent as RESP */
    static const char f[] = "GET \"a\\x00b\"\r\n";
    r = parse_both(f, sizeof(f) - 1, AUTHED);
    ck_assert_uint_eq(r.k[0].len, 3);
    ck_assert_int_eq(memcmp(r.fwd, "*2\r\n$3\r\nGET\r\n$3\r\na\0b\r\n", r.fwd_len), 0);
    /* inline MSET: values travel with their keys into the fragments */
    static const char g[] = "MSET \"k 1\" v1 k2 'v 2'\r\n";
    struct proto_parser p = { .flags = AUTHED };
    struct proto_req req;
    ck_assert_int_eq(R->parse_req(&p, g, sizeof(g) - 1, &req), (int)sizeof(g) - 1);
    ck_assert_int_eq(req.kind, PROTO_REQ_FANOUT);
    uint32_t i1[] = { 1 };
    frag_of(&req, g, i1, 1, "*3\r\n$4\r\nMSET\r\n$2\r\nk2\r\n$3\r\nv 2\r\n");
    uint32_t i0[] = { 0 };
    frag_of(&req, g, i0, 1, "*3\r\n$4\r\nMSET\r\n$3\r\nk 1\r\n$2\r\nv1\r\n");
    proto_parser_free(&p);
    /* Redis closes the connection on these (measured) */
    FATAL("ECHO a\"b c\"d\r\n", AUTHED, "-ERR Protocol error: unbalanced quotes in request\r\n");
    FATAL("ECHO \"a\"x\r\n", AUTHED, "-ERR Protocol error: unbalanced quotes in request\r\n");
    FATAL("PING \"a\\\r\n", AUTHED, "-ERR Protocol error: unbalanced quotes in request\r\n");
    FATAL("PING 'a\r\n", AUTHED, "-ERR Protocol error: unbalanced quotes in request\r\n");
}
END_TEST

START_TEST(test_req_subcommand_names_are_not_commands)
{
    /* the table's "XINFO|STREAM" is not a name Redis knows (libFuzzer) */
    struct res r = req_of("XINFO|STREAM k", AUTHED);
    ck_assert_str_eq(r.err, "-ERR unknown command 'XINFO|STREAM', with args beginning with: 'k' \r\n");
    r = req_of("INFO|KEYSPACE", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_ERROR);
    r = req_of("XINFO STREAM k", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
}
END_TEST

START_TEST(test_req_scripts_refused_when_the_pool_says_so)
{
    struct res r = req_of("EVALSHA abc 1 k", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    const char *names[] = { "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char line[64], want[160];
        snprintf(line, sizeof(line), "%s x 1 k", names[i]);
        r = req_of(line, AUTHED | PROTO_PF_DENY_SCRIPTS);
        ck_assert_int_eq(r.req.kind, PROTO_REQ_ERROR);
        snprintf(want, sizeof(want), "-ERR command '%s' is not allowed through this proxy "
                 "(the pool has scripts: false)\r\n", names[i]);
        ck_assert_str_eq(r.err, want);
    }
    r = req_of("SCRIPT LOAD x", AUTHED);       /* sent to every server ... */
    ck_assert_int_eq(r.req.kind, PROTO_REQ_BROADCAST);
    r = req_of("SCRIPT LOAD x", AUTHED | PROTO_PF_DENY_SCRIPTS);  /* ... unless scripts: false */
    ck_assert_int_eq(r.req.kind, PROTO_REQ_ERROR);
    r = req_of("GET k", AUTHED | PROTO_PF_DENY_SCRIPTS);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
}
END_TEST

/* ------------------------------------------------------------ sessions */

#define ATOMIC (PROTO_PF_SESSION | PROTO_PF_ATOMIC)

static void expect_sess(const char *line, uint32_t pflags, enum proto_kind kind, uint8_t sess,
                        int64_t block_ms)
{
    struct res r = req_of(line, AUTHED | pflags);
    ck_assert_msg(r.req.kind == kind, "%s: kind %d, want %d (%s)", line, r.req.kind, kind, r.err);
    ck_assert_msg(r.req.sess == sess, "%s: sess %#x, want %#x", line, r.req.sess, sess);
    if (sess & PROTO_SS_BLOCK)
        ck_assert_msg(r.req.block_ms == block_ms, "%s: block_ms %" PRId64 ", want %" PRId64,
                      line, r.req.block_ms, block_ms);
}

START_TEST(test_session_transactions)
{
    expect_sess("MULTI", 0, PROTO_REQ_SESSION, PROTO_SS_BEGIN, 0);
    expect_sess("multi", PROTO_PF_SESSION, PROTO_REQ_SESSION, PROTO_SS_BEGIN, 0);
    /* Redis answers these without spoiling the transaction ... */
    expect_sess("MULTI", ATOMIC, PROTO_REQ_ERROR, 0, 0);
    ck_assert_str_eq(req_of("MULTI", AUTHED | ATOMIC).err, "-ERR MULTI calls can not be nested\r\n");
    expect_sess("WATCH k", ATOMIC, PROTO_REQ_ERROR, 0, 0);
    ck_assert_str_eq(req_of("WATCH k", AUTHED | ATOMIC).err, "-ERR WATCH inside MULTI is not allowed\r\n");
    /* ... and these spoil it, as Redis flags it for them */
    expect_sess("FOO", ATOMIC, PROTO_REQ_ERROR, PROTO_SS_SPOIL, 0);
    expect_sess("GET", ATOMIC, PROTO_REQ_ERROR, PROTO_SS_SPOIL, 0);
    expect_sess("DBSIZE", ATOMIC, PROTO_REQ_ERROR, PROTO_SS_SPOIL, 0);
    expect_sess("SCAN 0", ATOMIC, PROTO_REQ_ERROR, PROTO_SS_SPOIL, 0);
    expect_sess("CLIENT SETNAME x", ATOMIC, PROTO_REQ_ERROR, PROTO_SS_SPOIL, 0);
    ck_assert_str_eq(req_of("DBSIZE", AUTHED | ATOMIC).err,
                     "-ERR command 'DBSIZE' inside MULTI is not supported by ringleader "
                     "(it needs every server)\r\n");
    expect_sess("FOO", 0, PROTO_REQ_ERROR, 0, 0);       /* no transaction: nothing to spoil */

    expect_sess("EXEC", 0, PROTO_REQ_ERROR, 0, 0);
    ck_assert_str_eq(req_of("EXEC", AUTHED | PROTO_PF_SESSION).err, "-ERR EXEC without MULTI\r\n");
    ck_assert_str_eq(req_of("discard", AUTHED).err, "-ERR DISCARD without MULTI\r\n");
    expect_sess("EXEC", ATOMIC, PROTO_REQ_SESSION, PROTO_SS_END | PROTO_SS_COMMIT, 0);
    expect_sess("DISCARD", ATOMIC, PROTO_REQ_SESSION, PROTO_SS_END, 0);

    struct res r = req_of("WATCH a b", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SAME);
    ck_assert_uint_eq(r.req.sess, PROTO_SS_OPEN);
    ck_assert_str_eq(r.keys[1], "b");
    expect_sess("UNWATCH", 0, PROTO_REQ_LOCAL, 0, 0);
    expect_sess("UNWATCH", PROTO_PF_SESSION, PROTO_REQ_SESSION, PROTO_SS_END, 0);
    expect_sess("UNWATCH", ATOMIC, PROTO_REQ_SESSION, 0, 0);    /* queued */

    /* keyless commands inside MULTI run on the transaction's server */
    expect_sess("PING", ATOMIC, PROTO_REQ_SESSION, 0, 0);
    expect_sess("ECHO x", ATOMIC, PROTO_REQ_SESSION, 0, 0);
    expect_sess("PING", 0, PROTO_REQ_LOCAL, 0, 0);
    expect_sess("EVAL x 0", ATOMIC, PROTO_REQ_SESSION, 0, 0);
    /* what Redis queues unchecked (bad numkeys) its server answers at EXEC */
    expect_sess("EVAL x y", ATOMIC, PROTO_REQ_SESSION, 0, 0);
    expect_sess("MSET a", ATOMIC, PROTO_REQ_ERROR, PROTO_SS_SPOIL, 0);   /* arity: at once */
    expect_sess("RESET", ATOMIC, PROTO_REQ_LOCAL, PROTO_SS_RESET, 0);
    expect_sess("RESET", 0, PROTO_REQ_LOCAL, PROTO_SS_RESET, 0);
    expect_sess("QUIT", ATOMIC, PROTO_REQ_LOCAL, 0, 0);
    expect_sess("SET k v", ATOMIC, PROTO_REQ_SINGLE, 0, 0);
    expect_sess("MGET a b", ATOMIC, PROTO_REQ_FANOUT, 0, 0);    /* whole, if on its server */
}
END_TEST

START_TEST(test_session_blocking)
{
    expect_sess("BLPOP a b 1.5", 0, PROTO_REQ_SAME, PROTO_SS_BLOCK, 1500);
    expect_sess("brpop a 0", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, 0);
    expect_sess("BLPOP a 0.0001", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, 1);    /* rounded up */
    expect_sess("BLPOP a 0x10", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, 16000);  /* strtold's */
    expect_sess("BLPOP a -1", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, -1);
    expect_sess("BLPOP a abc", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, -1);
    expect_sess("BLPOP a 1e400", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, -1);
    expect_sess("BLPOP a nan", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, -1);
    expect_sess("BLPOP a 1e400", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, -1);
    expect_sess("BLPOP a b 1", ATOMIC, PROTO_REQ_SAME, 0, 0);   /* never blocks in MULTI */
    expect_sess("BLMPOP 2 2 a b LEFT", 0, PROTO_REQ_SAME, PROTO_SS_BLOCK, 2000);
    expect_sess("BZMPOP 0 1 z MIN", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, 0);
    expect_sess("BLMOVE a b LEFT RIGHT 3", 0, PROTO_REQ_SAME, PROTO_SS_BLOCK, 3000);
    expect_sess("BRPOPLPUSH a b 0.25", 0, PROTO_REQ_SAME, PROTO_SS_BLOCK, 250);
    expect_sess("BZPOPMIN z 1", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, 1000);

    struct res r = req_of("XREAD COUNT 2 BLOCK 100 STREAMS s1 s2 0 0", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SAME);
    ck_assert_uint_eq(r.req.sess, PROTO_SS_BLOCK);
    ck_assert_int_eq(r.req.block_ms, 100);
    ck_assert_uint_eq(r.req.nkeys, 2);
    ck_assert_str_eq(r.keys[0], "s1");
    ck_assert_str_eq(r.keys[1], "s2");
    expect_sess("XREAD STREAMS s 0", 0, PROTO_REQ_SINGLE, 0, 0);
    expect_sess("XREAD BLOCK 1.5 STREAMS s 0", 0, PROTO_REQ_SINGLE, PROTO_SS_BLOCK, -1);
    r = req_of("XREADGROUP GROUP g c BLOCK 0 STREAMS s >", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert_int_eq(r.req.block_ms, 0);
    ck_assert_str_eq(r.keys[0], "s");
    r = req_of("XREAD BLOCK 10 STREAMS streams 0", AUTHED);   /* a stream named so */
    ck_assert_str_eq(r.keys[0], "streams");
    /* no keys Redis would find: its server answers the syntax error */
    r = req_of("XREAD BLOCK 10 FOO s 0", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert(r.req.flags & PROTO_RF_NOKEY);

    expect_sess("WAIT 1 100", 0, PROTO_REQ_ERROR, 0, 0);
    expect_sess("WAIT 1 100", PROTO_PF_SESSION, PROTO_REQ_SESSION, PROTO_SS_BLOCK, 100);
    expect_sess("WAIT 1 100", ATOMIC, PROTO_REQ_SESSION, 0, 0);
}
END_TEST

#define ck_buf_eq(b, want) do {                                                   \
        ck_assert_uint_eq(buf_len(b), strlen(want));                             \
        ck_assert_int_eq(memcmp(buf_rptr(b), (want), strlen(want)), 0);          \
    } while (0)

/* INDEXED merge_env as the core calls it: target's reply, the walk's next server after
 * it (next; every server's in a plain pool: target + 1). */
static int merge_env_next(const char *line, uint64_t epoch, uint32_t target, uint32_t next,
                          uint32_t nservers, struct buf **frag, uint32_t nfrag, struct buf *out)
{
    struct res r = req_of(line, AUTHED);
    struct proto_env env = { .nservers = nservers, .epoch = epoch, .target = target,
                             .next_target = next, .now_us = 12345 };
    buf_init(out);
    return R->merge_env(r.req.cmd, "", frag, nfrag, &env, out);
}

static int merge_env_to(const char *line, uint64_t epoch, uint32_t target, uint32_t nservers,
                        struct buf **frag, uint32_t nfrag, struct buf *out)
{
    return merge_env_next(line, epoch, target, target + 1 < nservers ? target + 1 : nservers,
                          nservers, frag, nfrag, out);
}

START_TEST(test_word_is)
{
    ck_assert(redis__word_is("keepttl", 7, "KEEPTTL"));
    ck_assert(redis__word_is("KeepTtl", 7, "KEEPTTL"));
    ck_assert(redis__word_is("tls-port", 8, "tls-port"));
    ck_assert(redis__word_is("TLS-PORT", 8, "tls-port"));
    ck_assert(!redis__word_is("keepttlx", 8, "KEEPTTL"));    /* longer */
    ck_assert(!redis__word_is("keepttl", 6, "KEEPTTL"));     /* shorter */
    ck_assert(!redis__word_is("KEEP\0TL", 7, "KEEPTTL"));   /* a NUL is a byte like others */
    ck_assert(!redis__word_is("\xcb" "EEPTTL", 7, "KEEPTTL")); /* no locale folding */
    ck_assert(redis__word_is("", 0, ""));
}
END_TEST

START_TEST(test_scan_cursor)
{
    struct proto_parser p = { .flags = AUTHED, .epoch = 1 };
    struct proto_req req;
    char buf[256];
    size_t len = mk(buf, "SCAN 0 MATCH a* COUNT 10");
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    ck_assert_int_eq(req.kind, PROTO_REQ_INDEXED);
    ck_assert_uint_eq(req.server, 0);
    frag_of(&req, buf, NULL, 0, "*6\r\n$4\r\nSCAN\r\n$1\r\n0\r\n$5\r\nMATCH\r\n$2\r\na*\r\n"
                                "$5\r\nCOUNT\r\n$2\r\n10\r\n");
    /* server 2, its cursor 5, epoch 1 */
    snprintf(buf, sizeof(buf), "SCAN %llu TYPE string", (5ull << 24) | (1u << 16) | 2u);
    len = mk(buf, buf);
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    ck_assert_int_eq(req.kind, PROTO_REQ_INDEXED);
    ck_assert_uint_eq(req.server, 2);
    frag_of(&req, buf, NULL, 0, "*4\r\n$4\r\nSCAN\r\n$1\r\n5\r\n$4\r\nTYPE\r\n$6\r\nstring\r\n");
    /* a cursor from before a reload changed the ring */
    p.epoch = 2;
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    ck_assert_int_eq(req.kind, PROTO_REQ_ERROR);
    ck_assert_ptr_nonnull(strstr(req.err, "the pool changed during the scan"));
    proto_parser_free(&p);
    ck_assert_str_eq(req_of("SCAN abc", AUTHED).err, "-ERR invalid cursor\r\n");
    ck_assert_str_eq(req_of("SCAN 99999999999999999999999", AUTHED).err, "-ERR invalid cursor\r\n");
    ck_assert_int_eq(req_of("SCAN +0", AUTHED).req.kind, PROTO_REQ_INDEXED);  /* strtoul's */

    /* the reply: the server's cursor becomes a pool cursor */
    struct buf out;
    struct buf *f1[1] = { mkbuf("*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n") };
    ck_assert_int_eq(merge_env_to("SCAN 0", 1, 1, 4, f1, 1, &out), 0);
    ck_buf_eq(&out, "*2\r\n$5\r\n65538\r\n*1\r\n$1\r\na\r\n");   /* server 2 next */
    buf_free(&out);
    ck_assert_int_eq(merge_env_to("SCAN 0", 1, 3, 4, f1, 1, &out), 0);
    ck_buf_eq(&out, "*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n");       /* the last: done */
    buf_free(&out);
    /* a cluster pool's walk: server 1 done, servers 2 and 3 replicas, 4 the next master */
    ck_assert_int_eq(merge_env_next("SCAN 0", 1, 1, 4, 6, f1, 1, &out), 0);
    ck_buf_eq(&out, "*2\r\n$5\r\n65540\r\n*1\r\n$1\r\na\r\n");
    buf_free(&out);
    ck_assert_int_eq(merge_env_next("SCAN 0", 1, 4, 6, 6, f1, 1, &out), 0);
    ck_buf_eq(&out, "*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n");       /* no master left */
    buf_free(&out);
    freebufs(f1, 1);
    struct buf *f2[1] = { mkbuf("*2\r\n$1\r\n7\r\n*0\r\n") };
    ck_assert_int_eq(merge_env_to("SCAN 0", 1, 1, 4, f2, 1, &out), 0);
    ck_buf_eq(&out, "*2\r\n$9\r\n117506049\r\n*0\r\n");
    buf_free(&out);
    freebufs(f2, 1);
    struct buf *f3[1] = { mkbuf("-ERR syntax error\r\n") };
    ck_assert_int_eq(merge_env_to("SCAN 0", 1, 1, 4, f3, 1, &out), 0);
    ck_buf_eq(&out, "-ERR syntax error\r\n");
    buf_free(&out);
    freebufs(f3, 1);
    struct buf *f4[1] = { mkbuf("*2\r\n$3\r\nx12\r\n*0\r\n") };
    ck_assert_int_eq(merge_env_to("SCAN 0", 1, 1, 4, f4, 1, &out), -1);
    buf_free(&out);
    freebufs(f4, 1);
}
END_TEST

START_TEST(test_keyspace_merges)
{
    struct buf out;
    struct buf *k[3] = { mkbuf("*1\r\n$1\r\na\r\n"), mkbuf("*0\r\n"), mkbuf("*2\r\n$1\r\nb\r\n$2\r\ncc\r\n") };
    ck_assert_int_eq(merge_env_to("KEYS *", 1, 0, 3, k, 3, &out), 0);
    ck_buf_eq(&out, "*3\r\n$1\r\na\r\n$1\r\nb\r\n$2\r\ncc\r\n");
    buf_free(&out);
    freebufs(k, 3);

    struct buf *rk[3] = { mkbuf("$-1\r\n"), mkbuf("$1\r\nx\r\n"), mkbuf("$-1\r\n") };
    ck_assert_int_eq(merge_env_to("RANDOMKEY", 1, 0, 3, rk, 3, &out), 0);
    ck_buf_eq(&out, "$1\r\nx\r\n");     /* the one server with a key */
    buf_free(&out);
    freebufs(rk, 3);
    struct buf *rn[2] = { mkbuf("$-1\r\n"), mkbuf("$-1\r\n") };
    ck_assert_int_eq(merge_env_to("RANDOMKEY", 1, 0, 2, rn, 2, &out), 0);
    ck_buf_eq(&out, "$-1\r\n");
    buf_free(&out);
    freebufs(rn, 2);
    struct buf *re[2] = { mkbuf("$-1\r\n"), mkbuf("-ERR down\r\n") };
    ck_assert_int_eq(merge_env_to("RANDOMKEY", 1, 0, 2, re, 2, &out), 0);
    ck_buf_eq(&out, "-ERR down\r\n");  /* no key found, and one failed */
    buf_free(&out);
    freebufs(re, 2);

    struct buf *se[2] = { mkbuf("*3\r\n:1\r\n:0\r\n:1\r\n"), mkbuf("*3\r\n:1\r\n:1\r\n:0\r\n") };
    ck_assert_int_eq(merge_env_to("SCRIPT EXISTS a b c", 1, 0, 2, se, 2, &out), 0);
    ck_buf_eq(&out, "*3\r\n:1\r\n:0\r\n:0\r\n");
    buf_free(&out);
    freebufs(se, 2);
    struct buf *sl[2] = { mkbuf("$2\r\nab\r\n"), mkbuf("$2\r\nab\r\n") };
    ck_assert_int_eq(merge_env_to("SCRIPT LOAD x", 1, 0, 2, sl, 2, &out), 0);
    ck_buf_eq(&out, "$2\r\nab\r\n");
    buf_free(&out);
    freebufs(sl, 2);

    struct buf o;
    buf_init(&o);
    ck_assert_int_eq(R->error_reply(PROTO_ERR_ABORTED, NULL, &o), 0);
    ck_buf_eq(&o, "-EXECABORT Transaction discarded because of previous errors.\r\n");
    buf_free(&o);
}
END_TEST

/* merge_to() over fragment replies a, b: want_rc, and want when 0. */
static void merge2(const struct proto_req *req, const char *buf, const char *a, const char *b,
                   int want_rc, const char *want)
{
    uint32_t kf[] = { 0, 1 };
    struct buf *fr[2] = { mkbuf(a), mkbuf(b) };
    merge_to(req, buf, kf, fr, 2, want_rc, want);
    freebufs(fr, 2);
}

START_TEST(test_merge_sum_overflow_and_empty_fragment)
{
    char buf[64];
    struct res r = req_of("del a b", AUTHED);
    mk(buf, "del a b");
    r.req.keys = r.k;
    /* no server counts past int64: the reply is malformed */
    merge2(&r.req, buf, ":9223372036854775807\r\n", ":1\r\n", -1, NULL);
    merge2(&r.req, buf, ":9223372036854775806\r\n", ":1\r\n", 0, ":9223372036854775807\r\n");
    merge2(&r.req, buf, ":-9223372036854775808\r\n", ":-1\r\n", -1, NULL);
    uint32_t kf[] = { 0, 1 };
    struct buf empty, *e[2];
    buf_init(&empty);                               /* never allocated */
    e[0] = &empty;
    e[1] = mkbuf(":1\r\n");
    merge_to(&r.req, buf, kf, e, 2, -1, NULL);
    freebufs(e + 1, 1);
}
END_TEST

/* ------------------------------------------------------------- RESP3, pub/sub */

START_TEST(test_rsp_resp3_types)
{
    struct rres r = RSP("_\r\n", PROTO_RF_RETRIEVAL);
    ck_assert_int_eq(r.rc, 3);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL);        /* a null is no hit */
    ck_assert_int_eq(RSP("#t\r\n", 0).rc, 4);
    ck_assert_int_eq(RSP("#f\r\n", 0).rc, 4);
    ck_assert_int_eq(RSP(",3.14\r\n", 0).rc, 7);
    ck_assert_int_eq(RSP(",-inf\r\n", 0).rc, 7);
    ck_assert_int_eq(RSP("(3492890328409238509324850943850943825024385\r\n", 0).rc, 46);
    r = RSP("!21\r\nSYNTAX invalid syntax\r\n", 0);
    ck_assert_int_eq(r.rc, 5);
    ck_assert_uint_eq(r.rsp.body_len, 23);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL | PROTO_SF_ERROR);
    r = RSP("=15\r\ntxt:Some string\r\n", PROTO_RF_RETRIEVAL);
    ck_assert_int_eq(r.rc, 5);
    ck_assert_uint_eq(r.rsp.body_len, 17);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL);
    static const char map[] = "%2\r\n+first\r\n:1\r\n$6\r\nsecond\r\n%1\r\n_\r\n~2\r\n#t\r\n,1.5\r\n";
    r = RSP(map, 0);
    ck_assert_int_eq(r.rc, (int)sizeof(map) - 1);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL);
    ck_assert_int_eq(RSP("%0\r\n", 0).rc, 4);
    ck_assert_int_eq(RSP("~0\r\n", 0).rc, 4);
    /* an attribute annotates the reply after it: both are one unit */
    static const char attr[] = "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n"
                               ",0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n";
    r = RSP(attr, 0);
    ck_assert_int_eq(r.rc, (int)sizeof(attr) - 1);
    static const char inner[] = "*2\r\n|1\r\n+ttl\r\n:3600\r\n$1\r\nv\r\n:7\r\n";
    ck_assert_int_eq(RSP(inner, 0).rc, (int)sizeof(inner) - 1);
    /* a push is out of band, whole */
    static const char push[] = ">3\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n:0\r\n";
    r = RSP(push, 0);
    ck_assert_int_eq(r.rc, (int)sizeof(push) - 1);
    ck_assert_uint_eq(r.rsp.flags, PROTO_SF_FINAL | PROTO_SF_PUSH);
    /* a blob error inside an aggregate is data */
    static const char err[] = "*1\r\n!3\r\nERR\r\n";
    ck_assert_uint_eq(RSP(err, 0).rsp.flags, PROTO_SF_FINAL);
}
END_TEST

/* One unit parsed by a subscribed connection's parser, whole and byte by byte. */
static struct rres rsp_subscribed(const char *s, size_t len)
{
    struct proto_parser p1 = { .flags = PROTO_PF_SUBSCRIBED }, p2 = { .flags = PROTO_PF_SUBSCRIBED };
    struct rres a;
    struct proto_rsp rsp;

    a.rc = R->parse_rsp(&p1, s, len, R->probe_cmd, 0, &a.rsp);
    for (size_t i = 0; a.rc > 0 && i < (size_t)a.rc; i++)
        ck_assert_int_eq(R->parse_rsp(&p2, s, i, R->probe_cmd, 0, &rsp), 0);
    return a;
}
#define SUBRSP(s) rsp_subscribed(s, sizeof(s) - 1)

START_TEST(test_rsp_subscribed_messages)
{
    static const char msg2[] = "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n";
    static const char pmsg3[] = ">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n$1\r\nx\r\n";
    static const char smsg[] = "*3\r\n$8\r\nsmessage\r\n$1\r\ns\r\n$0\r\n\r\n";
    static const char conf2[] = "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
    static const char conf3[] = ">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n";
    ck_assert_uint_eq(SUBRSP(msg2).rsp.flags, PROTO_SF_FINAL | PROTO_SF_PUSH);
    ck_assert_uint_eq(SUBRSP(pmsg3).rsp.flags, PROTO_SF_FINAL | PROTO_SF_PUSH);
    ck_assert_uint_eq(SUBRSP(smsg).rsp.flags, PROTO_SF_FINAL | PROTO_SF_PUSH);
    ck_assert_uint_eq(SUBRSP(conf2).rsp.flags, PROTO_SF_FINAL);  /* a reply to what was asked */
    ck_assert_uint_eq(SUBRSP(conf3).rsp.flags, PROTO_SF_FINAL);
    ck_assert_uint_eq(SUBRSP("+RESET\r\n").rsp.flags, PROTO_SF_FINAL);
    /* outside subscribed mode the same array is data (an LRANGE) */
    ck_assert_uint_eq(RSP(msg2, 0).rsp.flags, PROTO_SF_FINAL);
    /* subscribed: an aggregate is one whole unit however large */
    size_t big = 3u << 20;
    char *s = malloc(big + 64);
    int n = sprintf(s, "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$%zu\r\n", big);
    memset(s + n, 'v', big);
    memcpy(s + n + big, "\r\n", 2);
    struct proto_parser p = { .flags = PROTO_PF_SUBSCRIBED };
    struct proto_rsp rsp;
    ck_assert_int_eq(R->parse_rsp(&p, s, (size_t)n + big + 2, R->probe_cmd, 0, &rsp), (int)((size_t)n + big + 2));
    ck_assert_uint_eq(rsp.flags, PROTO_SF_FINAL | PROTO_SF_PUSH);
    free(s);
}
END_TEST

static void expect_bytes(const struct buf *b, const char *want)
{
    ck_assert_uint_eq(buf_len(b), strlen(want));
    ck_assert_int_eq(memcmp(buf_rptr(b), want, strlen(want)), 0);
}

START_TEST(test_sub_ops)
{
    struct buf out;
    buf_init(&out);
    struct proto_name names[2] = { { "a", 1 }, { "news.*", 6 } };
    ck_assert_int_eq(R->sub_write(PROTO_SUB_CHANNEL, names, 2, &out), 0);
    expect_bytes(&out, "*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$6\r\nnews.*\r\n");
    out.rpos = out.wpos = 0;
    ck_assert_int_eq(R->sub_write(PROTO_SUB_SHARD | PROTO_SUB_UNSUB, names, 1, &out), 0);
    expect_bytes(&out, "*2\r\n$12\r\nSUNSUBSCRIBE\r\n$1\r\na\r\n");
    out.rpos = out.wpos = 0;
    ck_assert_int_eq(R->sub_reply(PROTO_SUB_PATTERN, 0, "n*", 2, 3, &out), 0);
    ck_assert_int_eq(R->sub_reply(PROTO_SUB_CHANNEL | PROTO_SUB_UNSUB, 0, NULL, 0, 0, &out), 0);
    expect_bytes(&out, "*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:3\r\n"
                       "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n");
    out.rpos = out.wpos = 0;
    ck_assert_int_eq(R->sub_reply(PROTO_SUB_PATTERN | PROTO_SUB_UNSUB, 1, NULL, 0, 0, &out), 0);
    expect_bytes(&out, ">3\r\n$12\r\npunsubscribe\r\n_\r\n:0\r\n");
    out.rpos = out.wpos = 0;
    static const char m2[] = "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n";
    ck_assert_int_eq(R->push_write(1, m2, sizeof(m2) - 1, &out), 0);
    ck_assert_int_eq(R->push_write(0, buf_rptr(&out), buf_len(&out), &out), 0);
    expect_bytes(&out, ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n"
                       "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n");
    buf_free(&out);
}
END_TEST

/* A server's sunsubscribe (asked or not: Redis Cluster sends it when a slot leaves the
 * node) is told from every other reply of a subscribed connection, in both protocols, and
 * never read past its end: every prefix of it is refused. */
START_TEST(test_sub_dropped)
{
    static const char u2[] = "*3\r\n$12\r\nsunsubscribe\r\n$8\r\n{probe}x\r\n:0\r\n";
    static const char u3[] = ">3\r\n$12\r\nsunsubscribe\r\n$3\r\nabc\r\n:12\r\n";
    struct proto_name nm;

    ck_assert_int_eq(R->sub_dropped(u2, sizeof(u2) - 1, &nm), 1);
    ck_assert_uint_eq(nm.len, 8);
    ck_assert_int_eq(memcmp(nm.bytes, "{probe}x", 8), 0);
    ck_assert_int_eq(R->sub_dropped(u3, sizeof(u3) - 1, &nm), 1);
    ck_assert_uint_eq(nm.len, 3);
    ck_assert_ptr_eq(nm.bytes, u3 + 27);
    /* cut at every byte: the unit is then not whole (the caller gives whole units only,
     * but a shorter buffer must never be read past) */
    for (size_t n = 0; n + 3 < sizeof(u2) - 1; n++)
        ck_assert_int_eq(R->sub_dropped(u2, n, &nm), 0);
    static const char *other[] = {
        "*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:0\r\n",
        "*3\r\n$10\r\nssubscribe\r\n$1\r\na\r\n:1\r\n",
        "*3\r\n$12\r\nsunsubscribe\r\n$-1\r\n:0\r\n",          /* a mass one with nothing */
        "*3\r\n$12\r\nsunsubscribe\r\n$9\r\na\r\n:0\r\n",      /* a length past the end */
        "*3\r\n$12\r\nsunsubscribe\r\n$99999999999\r\na\r\n:0\r\n",
        "*4\r\n$8\r\nsmessage\r\n$1\r\na\r\n$1\r\nb\r\n",
        "-MOVED 5258 127.0.0.1:7000\r\n",
        "+PONG\r\n",
    };
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        ck_assert_int_eq(R->sub_dropped(other[i], strlen(other[i]), &nm), 0);
}
END_TEST

START_TEST(test_req_pubsub_classified)
{
    struct res r = req_of("SUBSCRIBE a {t}b", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SUBSCRIBE);
    ck_assert_uint_eq(r.req.sub, PROTO_SUB_CHANNEL);
    ck_assert_uint_eq(r.req.nkeys, 2);
    r = req_of("punsubscribe", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SUBSCRIBE);
    ck_assert_uint_eq(r.req.sub, PROTO_SUB_PATTERN | PROTO_SUB_UNSUB);
    ck_assert_uint_eq(r.req.nkeys, 0);
    r = req_of("SSUBSCRIBE s", AUTHED);
    ck_assert_uint_eq(r.req.sub, PROTO_SUB_SHARD);
    r = req_of("PUBLISH ch hello", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert(r.req.flags & PROTO_RF_CHANNEL);
    r = req_of("PUBSUB NUMSUB a b", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_FANOUT);
    ck_assert_uint_eq(r.req.nkeys, 2);
    r = req_of("PUBSUB NUMSUB", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_LOCAL);
    r = req_of("PUBSUB CHANNELS n*", AUTHED);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_BROADCAST);
    ck_assert_str_eq(req_of("SUBSCRIBE", AUTHED).err,
                     "-ERR wrong number of arguments for 'subscribe' command\r\n");
    /* RESP2 subscribed mode admits only what Redis admits there */
    r = req_of("GET k", AUTHED | PROTO_PF_SUBSCRIBED);
    ck_assert_str_eq(r.err, "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / "
                            "PING / QUIT / RESET are allowed in this context\r\n");
    r = req_of("CLIENT ID", AUTHED | PROTO_PF_SUBSCRIBED);
    ck_assert_str_eq(r.err, "-ERR Can't execute 'client|id': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / "
                            "PING / QUIT / RESET are allowed in this context\r\n");
    ck_assert_int_eq(req_of("PING", AUTHED | PROTO_PF_SUBSCRIBED).req.kind, PROTO_REQ_LOCAL);
    ck_assert_int_eq(req_of("UNSUBSCRIBE", AUTHED | PROTO_PF_SUBSCRIBED).req.kind, PROTO_REQ_SUBSCRIBE);
    /* RESP3 has no such limit; every request carries the variant */
    r = req_of("GET k", AUTHED | PROTO_PF_SUBSCRIBED | PROTO_PF_VARIANT);
    ck_assert_int_eq(r.req.kind, PROTO_REQ_SINGLE);
    ck_assert(r.req.flags & PROTO_RF_VARIANT);
    ck_assert(!(req_of("GET k", AUTHED).req.flags & PROTO_RF_VARIANT));
}
END_TEST

START_TEST(test_local_resp3_and_subscribed)
{
    struct sess s;
    sess_init(&s, NULL);
    s.p.flags |= PROTO_PF_SUBSCRIBED;
    ck_assert_str_eq(say(&s, "PING", NULL), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    ck_assert_str_eq(say(&s, "PING hi", NULL), "*2\r\n$4\r\npong\r\n$2\r\nhi\r\n");
    s.p.flags |= PROTO_PF_VARIANT;
    ck_assert_str_eq(say(&s, "PING", NULL), "+PONG\r\n");
    ck_assert_str_eq(say(&s, "CLIENT GETREDIR", NULL), ":-1\r\n");
    ck_assert_str_eq(say(&s, "CLIENT TRACKINGINFO", NULL),
                     "%3\r\n$5\r\nflags\r\n~1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n"
                     "$8\r\nprefixes\r\n*0\r\n");
    ck_assert_str_eq(say(&s, "CLIENT TRACKING off", NULL), "+OK\r\n");
    ck_assert(strstr(say(&s, "CLIENT TRACKING on", NULL), "-ERR CLIENT TRACKING is not supported") != NULL);
    ck_assert_str_eq(say(&s, "COMMAND INFO nosuch", NULL), "*1\r\n_\r\n");
    const char *info = say(&s, "CLIENT INFO", NULL);
    ck_assert_int_eq(info[0], '=');
    ck_assert(strstr(info, "\r\ntxt:id=42 ") != NULL && strstr(info, " resp=3 ") != NULL);
    ck_assert_int_eq(say(&s, "COMMAND DOCS get", NULL)[0], '%');
    int rc;
    ck_assert_str_eq(say(&s, "RESET", &rc), "+RESET\r\n");
    ck_assert(!(s.p.flags & (PROTO_PF_VARIANT | PROTO_PF_SUBSCRIBED)));
    ck_assert_str_eq(say(&s, "PUBSUB NUMSUB", NULL), "*0\r\n");
    buf_free(&s.out);
    proto_parser_free(&s.p);
}
END_TEST

START_TEST(test_pubsub_merges)
{
    char buf[128];
    struct proto_parser p = { .flags = AUTHED };
    struct proto_req req;
    size_t len = mk(buf, "PUBSUB NUMSUB a b c");
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    uint32_t kf[3] = { 1, 0, 1 };
    struct buf *ns[2] = { mkbuf("*2\r\n$1\r\nb\r\n:0\r\n"), mkbuf("*4\r\n$1\r\na\r\n:2\r\n$1\r\nc\r\n:1\r\n") };
    merge_to(&req, buf, kf, ns, 2, 0, "*6\r\n$1\r\na\r\n:2\r\n$1\r\nb\r\n:0\r\n$1\r\nc\r\n:1\r\n");
    freebufs(ns, 2);

    len = mk(buf, "PUBSUB CHANNELS");
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    struct buf *ch[3] = { mkbuf("*2\r\n$1\r\nz\r\n$1\r\na\r\n"), mkbuf("*0\r\n"), mkbuf("*2\r\n$1\r\na\r\n$2\r\nbb\r\n") };
    merge_to(&req, buf, NULL, ch, 3, 0, "*3\r\n$1\r\na\r\n$2\r\nbb\r\n$1\r\nz\r\n");
    freebufs(ch, 3);

    len = mk(buf, "PUBSUB NUMPAT");
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    struct buf *np[3] = { mkbuf(":2\r\n"), mkbuf(":3\r\n"), mkbuf(":3\r\n") };
    merge_to(&req, buf, NULL, np, 3, 0, ":3\r\n");
    freebufs(np, 3);

    /* INFO keyspace from RESP3 servers: verbatim strings in, a verbatim string out */
    len = mk(buf, "INFO KEYSPACE");
    ck_assert_int_eq(R->parse_req(&p, buf, len, &req), (int)len);
    struct buf *ks[2] = { mkbuf("=38\r\ntxt:# Keyspace\r\ndb0:keys=1,expires=0\r\n\r\n"),
                          mkbuf("=16\r\ntxt:# Keyspace\r\n\r\n") };
    merge_to(&req, buf, NULL, ks, 2, 0, "=48\r\ntxt:# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n\r\n");
    freebufs(ks, 2);
    proto_parser_free(&p);
}
END_TEST

/* ---- introspection: SLOWLOG entries from a request's kept prefix, the request log's key */

static char *slow_text(const char *req, size_t n)
{
    static char text[2048];
    struct proto_slow e = { .id = 9, .time_s = 100, .usec = 20000, .addr = "1.2.3.4:5",
                            .name = "name= user=default server=s:1" };
    struct buf out;
    buf_init(&out);
    ck_assert_int_eq(proto_redis_ops.slow_entry(req, n, &e, &out), 0);
    ck_assert_uint_lt(buf_len(&out), sizeof(text));
    memcpy(text, buf_rptr(&out), buf_len(&out));
    text[buf_len(&out)] = '\0';
    ck_assert_int_eq(redis__element_end(buf_rptr(&out), buf_len(&out), 0), (int64_t)buf_len(&out));
    buf_free(&out);
    return text;
}

START_TEST(test_slowlog_entry)
{
    const char *get = "*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n";
    ck_assert_str_eq(slow_text(get, strlen(get)),
                     "*6\r\n:9\r\n:100\r\n:20000\r\n*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n"
                     "$9\r\n1.2.3.4:5\r\n$29\r\nname= user=default server=s:1\r\n");
    /* cut inside the key: what is there, and how many bytes are missing */
    ck_assert_ptr_nonnull(strstr(slow_text(get, 19), "*2\r\n$3\r\nGET\r\n$20\r\nfo... (1 more bytes)\r\n"));
    /* cut before the second argument's header */
    ck_assert_ptr_nonnull(strstr(slow_text(get, 14), "*2\r\n$3\r\nGET\r\n$22\r\n... (1 more arguments)\r\n"));
    /* an argument over 128 bytes shows 128 and the rest counted, as Redis */
    char big[400];
    char val[200];
    memset(val, 'v', sizeof(val));
    int n = snprintf(big, sizeof(big), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$200\r\n%.*s\r\n", 200, val);
    char want[300];
    snprintf(want, sizeof(want), "$147\r\n%.*s... (72 more bytes)\r\n", 128, val);
    ck_assert_ptr_nonnull(strstr(slow_text(big, (size_t)n), want));
    /* over 32 arguments: 31 and "... (N more arguments)" */
    struct buf many;
    buf_init(&many);
    ck_assert_int_eq(buf_append_str(&many, "*40\r\n$4\r\nMSET\r\n"), 0);
    for (int i = 1; i < 40; i++)
        ck_assert_int_eq(buf_append_str(&many, "$1\r\nx\r\n"), 0);
    char *t = slow_text(buf_rptr(&many), buf_len(&many));
    ck_assert_ptr_nonnull(strstr(t, "*32\r\n$4\r\nMSET\r\n"));
    ck_assert_ptr_nonnull(strstr(t, "$22\r\n... (9 more arguments)\r\n"));
    buf_free(&many);
    /* inline */
    ck_assert_ptr_nonnull(strstr(slow_text("GET k\r\n", 7), "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"));
    /* nothing kept: an empty argument list */
    ck_assert_ptr_nonnull(strstr(slow_text("", 0), ":20000\r\n*0\r\n"));
}
END_TEST

START_TEST(test_request_log_key)
{
    const char *set = "*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$1\r\nv\r\n";
    const char *key;
    size_t len;
    uint64_t full;
    uint16_t cmd = (uint16_t)(redis_command_find("SET") - redis_commands);
    ck_assert_int_eq(proto_redis_ops.req_key(cmd, set, strlen(set), &key, &len, &full), 1);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(memcmp(key, "hello", 5), 0);
    ck_assert_int_eq(proto_redis_ops.req_key(cmd, set, 20, &key, &len, &full), 1);
    ck_assert_uint_eq(len, 3);
    ck_assert_uint_eq(full, 5);
    uint16_t ping = (uint16_t)(redis_command_find("PING") - redis_commands);
    ck_assert_int_eq(proto_redis_ops.req_key(ping, "*1\r\n$4\r\nPING\r\n", 14, &key, &len, &full), 0);
    ck_assert_str_eq(proto_redis_ops.cmd_name(cmd), "set");
    uint16_t cl = (uint16_t)(redis_command_find("CLIENT|LIST") - redis_commands);
    ck_assert_str_eq(proto_redis_ops.cmd_name(cl), "client|list");
    ck_assert_ptr_null(proto_redis_ops.cmd_name(REDIS_CMD_NONE));
}
END_TEST

/* CLIENT TRACKING invalidation pushes, as the near cache and client tracking read them. */
START_TEST(test_invalidation_push)
{
    static const char keys[] = ">2\r\n$10\r\ninvalidate\r\n*2\r\n$3\r\nabc\r\n$0\r\n\r\n";
    size_t off;
    uint64_t count = 99;
    const char *k;
    size_t kl;

    ck_assert_int_eq(redis_invalidation(keys, sizeof(keys) - 1, &off, &count), 0);
    ck_assert_uint_eq(count, 2);
    ck_assert_int_eq(redis_invalidation_key(keys, sizeof(keys) - 1, &off, &k, &kl), 0);
    ck_assert_uint_eq(kl, 3);
    ck_assert_int_eq(memcmp(k, "abc", 3), 0);
    ck_assert_int_eq(redis_invalidation_key(keys, sizeof(keys) - 1, &off, &k, &kl), 0);
    ck_assert_uint_eq(kl, 0);
    ck_assert_uint_eq(off, sizeof(keys) - 1);
    /* a flush; another push; a key count past the bytes; a key cut short */
    static const char flush[] = ">2\r\n$10\r\ninvalidate\r\n_\r\n";
    ck_assert_int_eq(redis_invalidation(flush, sizeof(flush) - 1, &off, &count), 1);
    static const char msg[] = ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n";
    ck_assert_int_eq(redis_invalidation(msg, sizeof(msg) - 1, &off, &count), -1);
    static const char many[] = ">2\r\n$10\r\ninvalidate\r\n*999999\r\n";
    ck_assert_int_eq(redis_invalidation(many, sizeof(many) - 1, &off, &count), -1);
    static const char cut[] = ">2\r\n$10\r\ninvalidate\r\n*1\r\n$5\r\nab\r\n";
    ck_assert_int_eq(redis_invalidation(cut, sizeof(cut) - 1, &off, &count), 0);
    ck_assert_int_eq(redis_invalidation_key(cut, sizeof(cut) - 1, &off, &k, &kl), -1);
}
END_TEST

static Suite *redis_suite(void)
{
    Suite *s = suite_create("redis");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_req_resp_single_key);
    tcase_add_test(tc, test_req_binary_key_and_empty_arg);
    tcase_add_test(tc, test_req_pipeline_consumes_one_at_a_time);
    tcase_add_test(tc, test_req_inline);
    tcase_add_test(tc, test_req_numbers_as_string2ll);
    tcase_add_test(tc, test_req_nul_where_redis_would_wait);
    tcase_add_test(tc, test_req_inline_split_as_sdssplitargs);
    tcase_add_test(tc, test_req_scripts_refused_when_the_pool_says_so);
    tcase_add_test(tc, test_req_subcommand_names_are_not_commands);
    tcase_add_test(tc, test_merge_sum_overflow_and_empty_fragment);
    tcase_add_test(tc, test_req_empty_requests_skipped);
    tcase_add_test(tc, test_req_fatal_errors);
    tcase_add_test(tc, test_req_big_value_resumes_without_rescanning);
    tcase_add_test(tc, test_req_large_last_argument_is_a_body);
    tcase_add_test(tc, test_table_sorted_and_consistent);
    tcase_add_test(tc, test_table_covers_keyed_commands);
    tcase_add_test(tc, test_lookup_case_insensitive);
    tcase_add_test(tc, test_arity_errors_redis_text);
    tcase_add_test(tc, test_unknown_command_text);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_copy_db_option);
    tcase_add_test(tc, test_classification);
    tcase_add_test(tc, test_eval_numkeys);
    tcase_add_test(tc, test_rsp_types);
    tcase_add_test(tc, test_rsp_resp3_types);
    tcase_add_test(tc, test_rsp_subscribed_messages);
    tcase_add_test(tc, test_sub_ops);
    tcase_add_test(tc, test_req_pubsub_classified);
    tcase_add_test(tc, test_local_resp3_and_subscribed);
    tcase_add_test(tc, test_pubsub_merges);
    tcase_add_test(tc, test_sub_dropped);
    tcase_add_test(tc, test_rsp_garbage);
    tcase_add_test(tc, test_rsp_numbers_both_ways);
    tcase_add_test(tc, test_rsp_large_array_chunked_linear);
    tcase_add_test(tc, test_rsp_huge_array_streams_in_units);
    tcase_add_test(tc, test_failed_merge_after_compaction_leaves_out);
    tcase_add_test(tc, test_mget_fragments_and_merge);
    tcase_add_test(tc, test_mset_fragments_carry_values);
    tcase_add_test(tc, test_sum_merges);
    tcase_add_test(tc, test_broadcast_merges);
    tcase_add_test(tc, test_local_basics);
    tcase_add_test(tc, test_auth_flows);
    tcase_add_test(tc, test_hello);
    tcase_add_test(tc, test_command_family);
    tcase_add_test(tc, test_session_transactions);
    tcase_add_test(tc, test_session_blocking);
    tcase_add_test(tc, test_word_is);
    tcase_add_test(tc, test_scan_cursor);
    tcase_add_test(tc, test_keyspace_merges);
    tcase_add_test(tc, test_error_reply_hello_probe);
    tcase_add_test(tc, test_slowlog_entry);
    tcase_add_test(tc, test_request_log_key);
    tcase_add_test(tc, test_invalidation_push);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(redis_suite)
