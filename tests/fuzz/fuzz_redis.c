/* libFuzzer target for the Redis protocol: parse_req, parse_rsp, frag_write, merge, local, and users' namespaces both ways. */
/*
 * Build and run with libFuzzer from a configured build directory (for its
 * config.h): `make fuzz-redis`, then
 *
 *   tests/fuzz/fuzz_redis -max_total_time=600 -jobs=1 corpus ../../tests/fuzz/corpus/redis
 *
 * `make check` runs the same target without libFuzzer through
 * tests/fuzz/replay_redis.c (the seed corpus plus fixed-seed mutations).
 *
 * Input: byte 0 chooses the mode (bits 0-1: 0/3 requests, 1 replies,
 * 2 merge) and flags (bit 2: authenticated / RETRIEVAL, bit 3: allow
 * flush); the rest is the wire data. Every invariant of the proto.h
 * contract that the harness can check aborts when broken.
 */
#include "config.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/proto.h"
#include "proto/redis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "fuzz_redis: %s:%d: %s\n", __FILE__, __LINE__, #x); abort(); } } while (0)

static const struct proto_ops *R = &proto_redis_ops;

/* Everything a request result says, for comparing two parses. */
struct snap {
    int rc;
    enum proto_kind kind;
    uint16_t cmd, flags;
    uint32_t nkeys;
    uint32_t keys[8][2];
    char err[600];
    uint32_t err_len;
};

static void snap_req(struct snap *s, int rc, const struct proto_req *req)
{
    memset(s, 0, sizeof(*s));
    s->rc = rc;
    if (rc == 0)
        return;
    s->kind = req->kind;
    s->cmd = req->cmd;
    s->flags = req->flags;
    s->nkeys = req->nkeys;
    for (uint32_t i = 0; i < req->nkeys && i < 8; i++) {
        s->keys[i][0] = req->keys[i].off;
        s->keys[i][1] = req->keys[i].len;
    }
    if (req->err != NULL) {
        CHECK(req->err_len >= 3 && req->err_len < sizeof(s->err));
        memcpy(s->err, req->err, req->err_len);
        s->err_len = req->err_len;
        CHECK(req->err[0] == '-');
        CHECK(memcmp(req->err + req->err_len - 2, "\r\n", 2) == 0);
        CHECK(memchr(req->err, '\n', req->err_len - 1) == NULL);   /* one line */
    }
}

static void check_req(const char *buf, size_t len, int rc, const struct proto_req *req)
{
    CHECK(rc <= (int)len);
    if (rc < 0) {
        CHECK(req->err != NULL && req->err_len > 0);
        return;
    }
    if (rc == 0)
        return;
    CHECK(req->hdr_len == (uint32_t)rc);
    CHECK(req->body_len == 0);
    CHECK(req->u.redis.start < (uint32_t)rc);
    if (req->kind == PROTO_REQ_ERROR)
        CHECK(req->err != NULL);
    uint64_t keyroom = req->u.redis.inl ? req->u.redis.inl_len : (uint64_t)rc;
    for (uint32_t i = 0; i < req->nkeys; i++)
        CHECK((uint64_t)req->keys[i].off + req->keys[i].len <= keyroom);
    if (req->kind == PROTO_REQ_SINGLE)
        CHECK(req->nkeys == 1);
    if (req->kind == PROTO_REQ_SAME || req->kind == PROTO_REQ_FANOUT)
        CHECK(req->nkeys >= 2);
    (void)buf;
}

/*
 * A model of how redis-server 7.0 reads a request (networking.c
 * processMultibulkBuffer), written from its behaviour, not from the
 * proxy's parser: "*<n>" then n times "$<len>" and len bytes plus two;
 * each header line ends at its '\r', searched as strchr searches (a NUL
 * first means Redis would wait forever); numbers are string2ll's: '-' the
 * only sign, no leading zero, no "-0", at most 20 bytes; a count above
 * INT_MAX or a bulk above 512 MB is an error. The proxy forwards nothing
 * else than such arrays (inline lines are re-encoded).
 */
#define MODEL_ARGS 64

struct redis_model {
    size_t consumed;
    uint32_t argc;
    struct { const char *p; size_t n; } arg[MODEL_ARGS];
};

static int model_string2ll(const char *s, size_t n, long long *v)
{
    size_t i = 0;
    int neg = 0;
    if (n == 0 || n >= 21)
        return -1;
    if (n == 1 && s[0] == '0') {
        *v = 0;
        return 0;
    }
    if (s[0] == '-') {
        neg = 1;
        if (++i == n)
            return -1;
    }
    if (s[i] < '1' || s[i] > '9')
        return -1;
    unsigned long long x = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || x > (ULLONG_MAX - 9) / 10)
            return -1;
        x = x * 10 + (unsigned)(s[i] - '0');
    }
    if (neg ? x > (unsigned long long)LLONG_MAX + 1 : x > (unsigned long long)LLONG_MAX)
        return -1;
    *v = neg ? (long long)(0 - x) : (long long)x;
    return 0;
}

/* The header line at b[pos]: its number and the position after "\r?". */
static int model_header(const char *b, size_t n, size_t pos, long long *v, size_t *next)
{
    size_t i = pos + 1;
    while (i < n && b[i] != '\r' && b[i] != '\0')
        i++;
    if (i >= n || b[i] == '\0' || i + 2 > n)
        return -1;
    if (model_string2ll(b + pos + 1, i - pos - 1, v) < 0)
        return -1;
    *next = i + 2;
    return 0;
}

static int model_redis_read(const char *b, size_t n, struct redis_model *m)
{
    long long c, l;
    size_t pos;
    memset(m, 0, sizeof(*m));
    if (n == 0 || b[0] != '*' || model_header(b, n, 0, &c, &pos) < 0 || c <= 0 || c > INT_MAX)
        return -1;
    for (long long a = 0; a < c; a++) {
        if (pos >= n || b[pos] != '$' || model_header(b, n, pos, &l, &pos) < 0 || l < 0 ||
            l > 512LL * 1024 * 1024 || (size_t)l + 2 > n - pos)
            return -1;
        if (m->argc < MODEL_ARGS) {
            m->arg[m->argc].p = b + pos;
            m->arg[m->argc].n = (size_t)l;
        }
        m->argc++;
        pos += (size_t)l + 2;
    }
    m->consumed = pos;
    return 0;
}

static int model_arg_is(const struct redis_model *m, uint32_t i, const char *s, size_t n)
{
    return i < m->argc && i < MODEL_ARGS && m->arg[i].n == n && memcmp(m->arg[i].p, s, n) == 0;
}

static int model_name_is(const struct redis_model *m, uint32_t i, const char *upper, size_t n)
{
    if (i >= m->argc || i >= MODEL_ARGS || m->arg[i].n != n)
        return 0;
    for (size_t k = 0; k < n; k++) {
        char ch = m->arg[i].p[k];
        if (ch >= 'a' && ch <= 'z')
            ch = (char)(ch - 'a' + 'A');
        if (ch != upper[k])
            return 0;
    }
    return 1;
}

/* What the proxy forwarded for req is read by the model as req's command
 * (and subcommand), every argument the proxy counted, and each of its keys
 * as one of the arguments. */
static void model_check_forward(const struct proto_req *req, const char *buf, const char *out,
                                size_t n)
{
    struct redis_model m;
    CHECK(model_redis_read(out, n, &m) == 0);
    CHECK(m.consumed == n);
    CHECK(m.argc == req->u.redis.argc);
    CHECK(req->cmd < redis_ncommands);
    const char *name = redis_commands[req->cmd].name, *bar = strchr(name, '|');
    CHECK(model_name_is(&m, 0, name, bar ? (size_t)(bar - name) : strlen(name)));
    if (bar != NULL)
        CHECK(model_name_is(&m, 1, bar + 1, strlen(bar + 1)));
    for (uint32_t k = 0; k < req->nkeys; k++) {
        char dec[PROTO_KEY_DECODED_MAX];
        size_t klen;
        const char *key = R->key_bytes(req, buf, k, dec, &klen);
        int found = m.argc > MODEL_ARGS;
        for (uint32_t i = 1; i < m.argc && i < MODEL_ARGS && !found; i++)
            found = model_arg_is(&m, i, key, klen);
        CHECK(found);
    }
}

/* Write the fragments of a FANOUT request (keys alternately on two
 * servers) and parse them back: each must be one request with its keys. */
static void fanout_roundtrip(const char *buf, const struct proto_req *req)
{
    uint32_t n = req->nkeys, na = 0, nb = 0;
    uint32_t *ia = malloc(n * sizeof(*ia)), *ib = malloc(n * sizeof(*ib));
    struct proto_key *keys = malloc(n * sizeof(*keys));
    CHECK(ia && ib && keys);
    memcpy(keys, req->keys, n * sizeof(*keys));
    for (uint32_t i = 0; i < n; i++) {
        if (i % 2)
            ib[nb++] = i;
        else
            ia[na++] = i;
    }
    struct proto_req copy = *req;
    copy.keys = keys;
    for (int side = 0; side < 2; side++) {
        struct buf out;
        buf_init(&out);
        uint32_t *idx = side ? ib : ia, cnt = side ? nb : na;
        if (cnt == 0)
            continue;
        CHECK(R->frag_write(&copy, buf, idx, cnt, &out) == 0);
        /* the server reads the command and, in order, each key (and, for
         * MSET-like commands, its value after it) */
        struct redis_model m;
        CHECK(model_redis_read(buf_rptr(&out), buf_len(&out), &m) == 0);
        CHECK(m.consumed == buf_len(&out));
        uint32_t per = redis_commands[req->cmd].step > 1 ? 2 : 1;
        CHECK(m.argc == 1 + cnt * per);
        CHECK(model_name_is(&m, 0, redis_commands[req->cmd].name,
                            strlen(redis_commands[req->cmd].name)));
        for (uint32_t i = 0; i < cnt; i++) {
            char dec[PROTO_KEY_DECODED_MAX];
            size_t klen;
            const char *key = R->key_bytes(&copy, buf, idx[i], dec, &klen);
            CHECK(1 + i * per >= MODEL_ARGS || model_arg_is(&m, 1 + i * per, key, klen));
        }
        struct proto_parser p = { .flags = PROTO_PF_AUTHED };
        struct proto_req fr;
        int rc = R->parse_req(&p, buf_rptr(&out), buf_len(&out), &fr);
        CHECK(rc == (int)buf_len(&out));
        CHECK(fr.cmd == req->cmd);
        CHECK(fr.nkeys == cnt);
        for (uint32_t i = 0; i < cnt; i++) {
            char dec[PROTO_KEY_DECODED_MAX];
            size_t klen;
            const char *key = R->key_bytes(&copy, buf, idx[i], dec, &klen);
            const struct proto_key *a = &fr.keys[i];
            CHECK(a->len == klen);
            CHECK(memcmp(buf_rptr(&out) + a->off, key, a->len) == 0);
        }
        proto_parser_free(&p);
        buf_free(&out);
    }
    free(ia);
    free(ib);
    free(keys);
}

/* SLOWLOG's entry and the request log's key from prefixes of the request as the proxy
 * keeps them (its first 64 bytes; half; five): one whole RESP array of six elements, a
 * key inside the prefix. */
static void fuzz_introspect(const char *req, size_t n, const struct proto_req *pr)
{
    struct proto_slow e = { .id = 7, .time_s = 1, .usec = 2, .addr = "1.2.3.4:5", .name = "x" };
    struct buf out;

    buf_init(&out);
    size_t ks[3] = { n < 64 ? n : 64, n / 2 < 64 ? n / 2 : 31, n < 5 ? n : 5 };
    for (int i = 0; i < 3; i++) {
        size_t k = ks[i];
        char *copy = malloc(k ? k : 1);   /* exactly k bytes: ASan sees a read past them */
        CHECK(copy != NULL);
        memcpy(copy, req, k);
        out.rpos = out.wpos = 0;
        CHECK(R->slow_entry(copy, k, &e, &out) == 0);
        CHECK(buf_len(&out) >= 4 && memcmp(buf_rptr(&out), "*6\r\n", 4) == 0);
        CHECK(redis__element_end(buf_rptr(&out), buf_len(&out), 0) == (int64_t)buf_len(&out));
        const char *key;
        size_t klen;
        uint64_t full;
        if (R->req_key(pr->cmd, copy, k, &key, &klen, &full))
            CHECK(key >= copy && key + klen <= copy + k && full >= klen);
        free(copy);
    }
    buf_free(&out);
}

static void fuzz_requests(const char *buf, size_t len, uint32_t pflags)
{
    struct proto_parser p = { .flags = pflags };
    struct proto_client c = { .id = 1, .auth = (pflags & PROTO_PF_AUTHED) ? NULL : "pw" };
    struct proto_env env = { .version = "fuzz", .now_us = 1 };
    struct buf out;
    size_t off = 0;

    buf_init(&out);
    for (int guard = 0; guard < 1000 && off < len; guard++) {
        struct proto_req req;
        uint32_t flags_before = p.flags;
        int rc = R->parse_req(&p, buf + off, len - off, &req);
        check_req(buf + off, len - off, rc, &req);

        /* The same request arriving in pieces gives the same answer. */
        if (rc != 0) {
            struct proto_parser q = { .flags = flags_before };
            struct proto_req r2;
            struct snap a, b;
            snap_req(&a, rc, &req);
            size_t end = rc > 0 ? (size_t)rc : len - off;
            size_t step = end > 512 ? end / 97 + 1 : 1;
            int r = 0;
            for (size_t i = 0; i < end && r == 0; i += step)
                r = R->parse_req(&q, buf + off, i, &r2);
            if (r == 0)
                r = R->parse_req(&q, buf + off, end, &r2);
            snap_req(&b, r, &r2);
            CHECK(a.rc == b.rc);
            if (rc > 0)
                CHECK(memcmp(&a, &b, sizeof(a)) == 0);
            proto_parser_free(&q);
        }
        if (rc <= 0)
            break;
        fuzz_introspect(buf + off, (size_t)rc, &req);
        out.rpos = out.wpos = 0;
        switch (req.kind) {
        case PROTO_REQ_SINGLE:
        case PROTO_REQ_SAME:
        case PROTO_REQ_BROADCAST:
            CHECK(R->forward(&req, buf + off, &out) == 0);
            model_check_forward(&req, buf + off, buf_rptr(&out), buf_len(&out));
            break;
        case PROTO_REQ_FANOUT:
            fanout_roundtrip(buf + off, &req);
            break;
        case PROTO_REQ_LOCAL: {
            int r = R->local(&c, &p, &req, buf + off, &env, &out);
            CHECK(r == 0 || r == PROTO_LOCAL_CLOSE || r == PROTO_LOCAL_RESET);
            /* every local reply is one complete RESP value */
            struct proto_parser rp = { 0 };
            struct proto_rsp rsp;
            size_t at = 0;
            int done = 0;
            while (!done && at < buf_len(&out)) {
                int u = R->parse_rsp(&rp, buf_rptr(&out) + at, buf_len(&out) - at, 0, 0, &rsp);
                CHECK(u > 0);
                at += (size_t)u + rsp.body_len;
                done = (rsp.flags & PROTO_SF_FINAL) != 0;
            }
            CHECK(done && at == buf_len(&out));
            break;
        }
        case PROTO_REQ_SUBSCRIBE:
            /* a class of names, and the names are the arguments after the command's */
            CHECK((req.sub & PROTO_SUB_CLASS) != 0);
            CHECK(req.nkeys == req.u.redis.argc - 1);
            break;
        case PROTO_REQ_SESSION:
        case PROTO_REQ_INDEXED:
        case PROTO_REQ_ERROR:
            break;
        }
        off += (size_t)rc;
    }
    buf_free(&out);
    proto_parser_free(&p);
}

static void fuzz_replies(const char *buf, size_t len, uint16_t rflags)
{
    struct proto_parser p = { 0 };
    size_t off = 0;

    for (int guard = 0; guard < 1000 && off < len; guard++) {
        struct proto_rsp rsp;
        int rc = R->parse_rsp(&p, buf + off, len - off, 0, rflags, &rsp);
        CHECK(rc <= (int)(len - off));
        if (rc <= 0) {
            /* whole-input verdict; byte by byte must agree for a fresh reply */
            if (p.u.redis.state == 0 || rc < 0) {
                struct proto_parser q = { 0 };
                int r = 0;
                for (size_t i = 0; i <= len - off && r == 0; i++)
                    r = R->parse_rsp(&q, buf + off, i, 0, rflags, &rsp);
                CHECK((r < 0) == (rc < 0));
            }
            break;
        }
        CHECK(rsp.hdr_len == (uint32_t)rc);
        if (rsp.flags & PROTO_SF_ERROR)
            CHECK(buf[off] == '-' || buf[off] == '!');     /* RESP3's blob error too */
        if (rsp.body_len) {
            /* a bulk string, RESP3's blob error or verbatim string */
            CHECK(buf[off] == '$' || buf[off] == '!' || buf[off] == '=');
            if (rsp.body_len > len - off - (size_t)rc)
                break;
            off += rsp.body_len;
        }
        off += (size_t)rc;
    }
}

/* Merge: a request chosen by a byte, fragments split on 0xff bytes. */
static void fuzz_merge(const char *buf, size_t len)
{
    static const char *const reqs[] = {
        "*5\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n",
        "*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n",
        "*4\r\n$3\r\nDEL\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
        "*1\r\n$6\r\nDBSIZE\r\n",
        "*2\r\n$4\r\nINFO\r\n$8\r\nkeyspace\r\n",
    };
    if (len < 2)
        return;
    const char *r = reqs[(unsigned char)buf[0] % 5];
    uint32_t nfrag = 1 + (unsigned char)buf[1] % 4;
    buf += 2;
    len -= 2;

    struct proto_parser p = { .flags = PROTO_PF_AUTHED };
    struct proto_req req;
    CHECK(R->parse_req(&p, r, strlen(r), &req) == (int)strlen(r));
    uint32_t key_frag[8];
    for (uint32_t i = 0; i < req.nkeys && i < 8; i++)
        key_frag[i] = (i + (len ? (unsigned char)buf[0] : 0)) % nfrag;

    struct buf fb[4], *frag[4];
    for (uint32_t f = 0; f < nfrag; f++) {
        buf_init(&fb[f]);
        frag[f] = &fb[f];
    }
    uint32_t f = 0;
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)buf[i] == 0xff && f + 1 < nfrag) {
            f++;
            continue;
        }
        CHECK(buf_append(&fb[f], buf + i, 1) == 0);
    }
    struct buf out;
    buf_init(&out);
    int rc = R->merge(req.cmd, r, req.keys, req.nkeys,
                      req.kind == PROTO_REQ_FANOUT ? key_frag : NULL, frag, nfrag, &out);
    CHECK(rc == 0 || rc == -1);
    if (rc != 0) {
        CHECK(buf_len(&out) == 0);
    } else {
        struct proto_parser rp = { 0 };
        struct proto_rsp rsp;
        int u = R->parse_rsp(&rp, buf_rptr(&out), buf_len(&out), 0, 0, &rsp);
        CHECK(u > 0 && (size_t)u + rsp.body_len == buf_len(&out) && (rsp.flags & PROTO_SF_FINAL));
    }
    buf_free(&out);
    for (uint32_t g = 0; g < nfrag; g++)
        buf_free(&fb[g]);
    proto_parser_free(&p);
}

/* users: each whole request rewritten with a namespace parses again to the same command and
 * kind, its keys one prefix longer; the input read as a reply to a command chosen by its first
 * byte is rewritten or refused, never read past its end. */
static void fuzz_users(const char *buf, size_t len)
{
    struct proto_parser p = { .flags = PROTO_PF_AUTHED };
    struct proto_ns ns = { .prefix = "n[s]:", .len = 5 };
    size_t off = 0;
    for (int guard = 0; guard < 200 && off < len; guard++) {
        struct proto_req req;
        int rc = R->parse_req(&p, buf + off, len - off, &req);
        if (rc <= 0)
            break;
        size_t whole = (size_t)rc + (size_t)req.body_len;
        if (whole > len - off)
            break;
        if (req.kind != PROTO_REQ_ERROR && req.kind != PROTO_REQ_LOCAL) {
            struct buf out;
            const char *why = NULL;
            buf_init(&out);
            uint16_t cmd = req.cmd;
            enum proto_kind kind = req.kind;
            uint32_t nkeys = req.nkeys;
            int n = R->ns_request(&req, buf + off, &ns, &out, &why);
            CHECK(n == 0 || n == -1);
            if (n == 0) {
                struct proto_parser q = { .flags = PROTO_PF_AUTHED };
                struct proto_req again;
                int r = R->parse_req(&q, buf_rptr(&out), buf_len(&out), &again);
                CHECK(r > 0 && (size_t)r + again.body_len == buf_len(&out));
                CHECK(again.cmd == cmd && again.nkeys == nkeys);
                CHECK(again.kind == kind || again.kind == PROTO_REQ_ERROR);
                proto_parser_free(&q);
            }
            buf_free(&out);
        }
        off += whole;
    }
    proto_parser_free(&p);
    if (len > 0) {
        struct buf out;
        buf_init(&out);
        uint16_t cmd = (unsigned char)buf[0] % 3 == 0 ? PROTO_NS_PUSH
                       : (uint16_t)((unsigned char)buf[0] * 7u % redis_ncommands);
        int rc = R->ns_reply(cmd, buf + 1, len - 1, &ns, &out);
        CHECK(rc == 0 || rc == 1 || rc == -1);
        if (rc == 0)
            CHECK(buf_len(&out) == 0);
        buf_free(&out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0] & 3;
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    uint32_t pflags = ((data[0] & 4) ? PROTO_PF_AUTHED : 0) | ((data[0] & 8) ? PROTO_PF_ALLOW_FLUSH : 0);

    /* A private copy so that reading past the end is caught by ASan. */
    char *copy = malloc(len ? len : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, buf, len);
    switch (mode) {
    case 0:
        fuzz_requests(copy, len, pflags);
        break;
    case 3:
        fuzz_requests(copy, len, pflags);
        if (data[0] & 16)
            fuzz_users(copy, len);
        break;
    case 1:
        fuzz_replies(copy, len, (data[0] & 4) ? PROTO_RF_RETRIEVAL : 0);
        break;
    case 2:
        fuzz_merge(copy, len);
        break;
    }
    free(copy);
    return 0;
}
