/* Fuzz target for the memcache protocol: request and reply parsers, forward/frag_write, and multi-get merging. */
#include "config.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache.h"
#include "proto/proto.h"

/*
 * The first input byte chooses what is exercised and how; the rest is the
 * wire data. Every invariant failure aborts (so libFuzzer and the replay
 * driver both report it), independent of NDEBUG:
 *   - parse_* never consumes more than it was given; >0 == hdr_len;
 *   - keys (requests) and the item key (replies) lie inside the header;
 *   - an incomplete input consumes nothing, and a request's header is
 *     reported complete exactly when its last byte arrives (prefix check);
 *   - forward() writes the header minus at most the recorded cut, ending in
 *     '\n'; a fragment written by frag_write() parses back to its keys;
 *     the single-key gets of an input, joined, parse back to their keys;
 *   - merge() either fails or writes a reply that parses as items + END or
 *     as one error line.
 */

#define FUZZ_CHECK(cond)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                              \
        }                                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct proto_ops *ops = &proto_memcache_ops;

/* A heap copy of exactly n bytes, so that any over-read trips ASan. */
static char *dup_exact(const uint8_t *p, size_t n)
{
    char *c = malloc(n ? n : 1);
    FUZZ_CHECK(c != NULL);
    if (n)
        memcpy(c, p, n);
    return c;
}

/*
 * A model of how memcached 1.6.18 reads a request line (proto_text.c),
 * written from its behaviour, not from the proxy's parser: the line ends
 * at the first '\n'; one '\r' before it is dropped when the line has more
 * than one byte; the rest is a C string (it ends at the first NUL); tokens
 * are separated by spaces only; a line longer than 2048 bytes is read only
 * when it starts, after at most 100 spaces, with "get " or "gets " (else
 * memcached may close the connection when the line spans reads). Numbers
 * are read as strtol reads them. What the proxy forwards must be one such
 * line that the model reads as the command, keys and lengths the proxy
 * parsed.
 */
#define MODEL_TOKENS 80

struct mc_model {
    size_t consumed;               /* the line's bytes, '\n' included */
    uint32_t ntok;                 /* tokens (may exceed MODEL_TOKENS) */
    struct { const char *p; size_t n; } tok[MODEL_TOKENS];
};

/* Returns 0 with m filled in, -1 if memcached would not read one line. */
static int model_mc_line(const char *b, size_t n, struct mc_model *m)
{
    memset(m, 0, sizeof(*m));
    const char *nl = memchr(b, '\n', n);
    if (nl == NULL)
        return -1;
    size_t len = (size_t)(nl - b);
    if (len + 1 > 2048) {
        size_t sp = 0;
        while (sp < len && b[sp] == ' ')
            sp++;
        if (sp > 100 || !(len - sp >= 4 && (memcmp(b + sp, "get ", 4) == 0 ||
                                            (len - sp >= 5 && memcmp(b + sp, "gets ", 5) == 0))))
            return -1;
    }
    m->consumed = len + 1;
    if (len > 1 && b[len - 1] == '\r')
        len--;
    const char *z = memchr(b, '\0', len);
    if (z != NULL)
        len = (size_t)(z - b);
    size_t i = 0;
    while (i < len) {
        while (i < len && b[i] == ' ')
            i++;
        if (i == len)
            break;
        size_t st = i;
        while (i < len && b[i] != ' ')
            i++;
        if (m->ntok < MODEL_TOKENS) {
            m->tok[m->ntok].p = b + st;
            m->tok[m->ntok].n = i - st;
        }
        m->ntok++;
    }
    return 0;
}

static int model_tok_is(const struct mc_model *m, uint32_t i, const char *s)
{
    return i < m->ntok && i < MODEL_TOKENS && m->tok[i].n == strlen(s) &&
           memcmp(m->tok[i].p, s, m->tok[i].n) == 0;
}

/* strtol of a whole token: optional sign, decimal digits; -1 if not that. */
static int model_strtol(const struct mc_model *m, uint32_t i, long long *v)
{
    if (i >= m->ntok || i >= MODEL_TOKENS)
        return -1;
    const char *p = m->tok[i].p;
    size_t n = m->tok[i].n, k = 0;
    int neg = 0;
    if (k < n && (p[k] == '+' || p[k] == '-'))
        neg = p[k++] == '-';
    if (k == n)
        return -1;
    long long x = 0;
    for (; k < n; k++) {
        if (p[k] < '0' || p[k] > '9' || x > (LLONG_MAX - 9) / 10)
            return -1;
        x = x * 10 + (p[k] - '0');
    }
    *v = neg ? -x : x;
    return 0;
}

/* The bytes the proxy forwarded for request r (parsed from buf) are read by
 * the model as that command, with key k at token kt and the data block the
 * proxy expects, and with nothing that would silence the reply. */
static void model_check_forward(const struct proto_req *r, const char *buf, const char *out,
                                size_t n)
{
    struct mc_model m;
    FUZZ_CHECK(model_mc_line(out, n, &m) == 0);
    FUZZ_CHECK(m.consumed == n);
    const char *name = memcache_cmd_name(r->cmd);
    FUZZ_CHECK(name != NULL && model_tok_is(&m, 0, name));
    uint32_t kt = (r->cmd == MEMCACHE_CMD_GAT || r->cmd == MEMCACHE_CMD_GATS) ? 2 : 1;
    for (uint32_t k = 0; k < r->nkeys; k++) {
        FUZZ_CHECK(kt + k < m.ntok);
        if (kt + k >= MODEL_TOKENS)
            break;              /* a long joined line: the model kept the first tokens */
        FUZZ_CHECK(m.tok[kt + k].n == r->keys[k].len &&
                   memcmp(m.tok[kt + k].p, buf + r->keys[k].off, r->keys[k].len) == 0);
    }
    long long v;
    switch (r->cmd) {
    case MEMCACHE_CMD_GET: case MEMCACHE_CMD_GETS: case MEMCACHE_CMD_GAT: case MEMCACHE_CMD_GATS:
        FUZZ_CHECK(m.ntok == kt + r->nkeys && r->body_len == 0);
        break;
    case MEMCACHE_CMD_SET: case MEMCACHE_CMD_ADD: case MEMCACHE_CMD_REPLACE:
    case MEMCACHE_CMD_APPEND: case MEMCACHE_CMD_PREPEND: case MEMCACHE_CMD_CAS:
        /* memcached dispatches a storage line by its token count */
        FUZZ_CHECK(m.ntok == (r->cmd == MEMCACHE_CMD_CAS ? 6u : 5u) ||
                   (m.ntok == (r->cmd == MEMCACHE_CMD_CAS ? 7u : 6u) &&
                    !model_tok_is(&m, m.ntok - 1, "noreply")));
        FUZZ_CHECK(model_strtol(&m, 4, &v) == 0 && v >= 0 && (uint64_t)v + 2 == r->body_len);
        break;
    case MEMCACHE_CMD_MS:
        FUZZ_CHECK(model_strtol(&m, 2, &v) == 0 && v >= 0 && (uint64_t)v + 2 == r->body_len);
        /* fall through */
    case MEMCACHE_CMD_MG: case MEMCACHE_CMD_MD: case MEMCACHE_CMD_MA:
        for (uint32_t i = 2; i < m.ntok && i < MODEL_TOKENS; i++)
            FUZZ_CHECK(m.tok[i].p[0] != 'q');      /* the proxy must see every reply */
        break;
    case MEMCACHE_CMD_DELETE: case MEMCACHE_CMD_INCR: case MEMCACHE_CMD_DECR:
    case MEMCACHE_CMD_TOUCH: case MEMCACHE_CMD_FLUSH_ALL: case MEMCACHE_CMD_VERBOSITY:
        /* the commands memcached reads a trailing noreply of (set_noreply_maybe);
         * "delete noreply" deletes the key "noreply" */
        FUZZ_CHECK(!model_tok_is(&m, m.ntok - 1, "noreply") || m.ntok == 2);
        FUZZ_CHECK(r->body_len == 0);
        break;
    default:                    /* version, stats ...: a "noreply" is only an argument */
        FUZZ_CHECK(r->body_len == 0);
        break;
    }
}

static void check_req(const struct proto_req *r, int rc, size_t len)
{
    FUZZ_CHECK((size_t)rc <= len);
    FUZZ_CHECK(r->hdr_len == (uint32_t)rc);
    FUZZ_CHECK(r->kind <= PROTO_REQ_ERROR);
    if (r->kind == PROTO_REQ_ERROR) {
        FUZZ_CHECK(r->err != NULL && r->err_len >= 2);
        FUZZ_CHECK(memcmp(r->err + r->err_len - 2, "\r\n", 2) == 0);
        FUZZ_CHECK(r->nkeys == 0);
        return;
    }
    if (r->kind == PROTO_REQ_SINGLE)
        FUZZ_CHECK(r->nkeys == 1);
    if (r->kind == PROTO_REQ_FANOUT)
        FUZZ_CHECK(r->nkeys > 1);
    for (uint32_t i = 0; i < r->nkeys; i++) {
        FUZZ_CHECK(r->keys[i].len >= 1 && r->keys[i].len <= MEMCACHE_KEY_MAX);
        FUZZ_CHECK((uint64_t)r->keys[i].off + r->keys[i].len <= r->hdr_len);
    }
}

/* Same result from a fresh parser on exactly the header, and 0 one byte short. */
static void check_req_prefix(const char *buf, int rc, uint32_t item_max, uint32_t pflags,
                             const struct proto_req *want)
{
    struct proto_parser p;
    struct proto_req r;
    memset(&p, 0, sizeof(p));
    p.item_size_max = item_max;
    p.flags = pflags;
    char *h = dup_exact((const uint8_t *)buf, (size_t)rc);
    FUZZ_CHECK(ops->parse_req(&p, h, (size_t)rc - 1, &r) == 0);
    FUZZ_CHECK(p.u.mc.scan <= (uint32_t)rc - 1);
    FUZZ_CHECK(ops->parse_req(&p, h, (size_t)rc, &r) == rc);
    FUZZ_CHECK(r.kind == want->kind && r.cmd == want->cmd && r.flags == want->flags);
    FUZZ_CHECK(r.body_len == want->body_len && r.nkeys == want->nkeys);
    free(h);
    proto_parser_free(&p);
}

static void check_forward(const struct proto_req *r, const char *buf)
{
    struct buf out;
    buf_init(&out);
    FUZZ_CHECK(ops->forward(r, buf, &out) == 0);
    size_t n = buf_len(&out);
    FUZZ_CHECK(n >= 1 && n <= r->hdr_len + 2);
    FUZZ_CHECK(n == (r->u.mc.nul_cut ? r->u.mc.line_end + 2u : r->hdr_len) - r->u.mc.cut_len);
    FUZZ_CHECK(buf_rptr(&out)[n - 1] == '\n');
    model_check_forward(r, buf, buf_rptr(&out), n);
    /* The forwarded line is itself a valid request of the same command. */
    struct proto_parser p;
    struct proto_req r2;
    memset(&p, 0, sizeof(p));
    p.flags = PROTO_PF_ALLOW_FLUSH;
    p.item_size_max = UINT32_MAX;
    int rc = ops->parse_req(&p, buf_rptr(&out), n, &r2);
    FUZZ_CHECK(rc == (int)n);
    FUZZ_CHECK(r2.cmd == r->cmd && r2.nkeys == r->nkeys && r2.body_len == r->body_len);
    FUZZ_CHECK(!(r2.flags & (PROTO_RF_NOREPLY | PROTO_RF_QUIET)));
    proto_parser_free(&p);
    buf_free(&out);
}

static void check_frag(const struct proto_req *r, const char *buf)
{
    uint32_t idx[8];
    uint32_t n = r->nkeys < 8 ? r->nkeys : 8;
    for (uint32_t i = 0; i < n; i++)
        idx[i] = r->nkeys - 1 - i;
    struct buf out;
    buf_init(&out);
    FUZZ_CHECK(ops->frag_write(r, buf, idx, n, &out) == 0);
    struct proto_req fr = *r;       /* the fragment's keys, as the model must read them */
    struct proto_key fk[8];
    for (uint32_t i = 0; i < n; i++)
        fk[i] = r->keys[idx[i]];
    fr.keys = fk;
    fr.nkeys = n;
    model_check_forward(&fr, buf, buf_rptr(&out), buf_len(&out));
    struct proto_parser p;
    struct proto_req r2;
    memset(&p, 0, sizeof(p));
    int rc = ops->parse_req(&p, buf_rptr(&out), buf_len(&out), &r2);
    FUZZ_CHECK(rc == (int)buf_len(&out));
    FUZZ_CHECK(r2.cmd == r->cmd && r2.nkeys == n);
    for (uint32_t i = 0; i < n; i++) {
        const struct proto_key *a = &r->keys[idx[i]], *b = &r2.keys[i];
        FUZZ_CHECK(a->len == b->len && memcmp(buf + a->off, buf_rptr(&out) + b->off, a->len) == 0);
    }
    proto_parser_free(&p);
    buf_free(&out);
}

/*
 * Get coalescing: every joinable request of the input is written to one
 * output the way the core does (forward() opens a line, join() extends it
 * while it can). The output must parse back as get lines carrying exactly
 * those keys, in order, each joined line within MEMCACHE_JOIN_LINE_MAX.
 */
struct joiner {
    struct buf out;
    struct buf keys;      /* [u8 len][key] per joinable request, in order */
    uint32_t open;        /* bytes of the open line, 0: none */
};

static void join_add(struct joiner *j, const struct proto_req *r, const char *buf)
{
    if (!ops->joinable(r))
        return;
    const struct proto_key *k = &r->keys[0];
    FUZZ_CHECK(k->len <= MEMCACHE_KEY_MAX);
    int rc = j->open > 0 ? ops->join(r, buf, &j->out, j->open) : 0;
    FUZZ_CHECK(rc >= 0);
    if (rc > 0) {
        j->open = (uint32_t)rc;
    } else {
        size_t before = buf_len(&j->out);
        FUZZ_CHECK(ops->forward(r, buf, &j->out) == 0);
        j->open = (uint32_t)(buf_len(&j->out) - before);
    }
    uint8_t len = (uint8_t)k->len;
    FUZZ_CHECK(buf_append(&j->keys, &len, 1) == 0 && buf_append(&j->keys, buf + k->off, len) == 0);
}

static void join_check(struct joiner *j)
{
    struct proto_parser p;
    memset(&p, 0, sizeof(p));
    size_t n = buf_len(&j->out), off = 0, koff = 0;
    /* No joinable request: nothing was ever written, and an unallocated
     * buffer has no bytes to point at (buf_rptr would be NULL + 0). */
    const char *s = n ? buf_rptr(&j->out) : "", *kp = n ? buf_rptr(&j->keys) : "";
    while (off < n) {
        struct proto_req r;
        int rc = ops->parse_req(&p, s + off, n - off, &r);
        FUZZ_CHECK(rc > 0 && r.cmd == MEMCACHE_CMD_GET && r.nkeys >= 1);
        FUZZ_CHECK(r.nkeys == 1 || (size_t)rc <= MEMCACHE_JOIN_LINE_MAX);
        /* memcached reads the joined line as one get of exactly these keys */
        model_check_forward(&r, s + off, s + off, (size_t)rc);
        for (uint32_t i = 0; i < r.nkeys; i++) {
            FUZZ_CHECK(koff < buf_len(&j->keys));
            uint8_t len = (uint8_t)kp[koff];
            FUZZ_CHECK(r.keys[i].len == len && memcmp(s + off + r.keys[i].off, kp + koff + 1, len) == 0);
            koff += 1u + len;
        }
        off += (size_t)rc;
    }
    FUZZ_CHECK(koff == buf_len(&j->keys));
    proto_parser_free(&p);
    buf_free(&j->out);
    buf_free(&j->keys);
}

static void fuzz_requests(const uint8_t *data, size_t size, uint8_t mode)
{
    struct joiner join;
    buf_init(&join.out);
    buf_init(&join.keys);
    join.open = 0;
    uint32_t item_max = (mode & 0x10) ? 64 : 0;
    uint32_t pflags = (mode & 0x20) ? PROTO_PF_ALLOW_FLUSH : 0;
    char *buf = dup_exact(data, size);
    struct proto_parser p;
    memset(&p, 0, sizeof(p));
    p.item_size_max = item_max;
    p.flags = pflags;
    size_t off = 0;
    for (int guard = 0; off < size && guard < 4096; guard++) {
        struct proto_req r;
        int rc = ops->parse_req(&p, buf + off, size - off, &r);
        if (rc == 0) {
            FUZZ_CHECK(p.u.mc.scan <= size - off);
            break;
        }
        if (rc < 0) {
            FUZZ_CHECK(r.kind == PROTO_REQ_ERROR && (r.err != NULL || r.why != NULL));
            FUZZ_CHECK(p.u.mc.scan == 0);
            break;
        }
        check_req(&r, rc, size - off);
        FUZZ_CHECK(p.u.mc.scan == 0);
        check_req_prefix(buf + off, rc, item_max, pflags, &r);
        if (r.kind == PROTO_REQ_SINGLE || r.kind == PROTO_REQ_BROADCAST)
            check_forward(&r, buf + off);
        join_add(&join, &r, buf + off);
        if (r.kind == PROTO_REQ_FANOUT || (r.kind == PROTO_REQ_SINGLE &&
                                           (r.flags & PROTO_RF_RETRIEVAL) &&
                                           r.cmd != MEMCACHE_CMD_MG))
            check_frag(&r, buf + off);
        uint64_t next = (uint64_t)off + (uint64_t)rc + r.body_len;
        off = next > size ? size : (size_t)next;
    }
    join_check(&join);
    proto_parser_free(&p);
    free(buf);
}

/* m (0..85) picks the command (an out-of-range id included) and quiet mode. */
static void fuzz_replies(const uint8_t *data, size_t size, uint8_t m)
{
    uint16_t cmd = (uint16_t)(m % (MEMCACHE_CMD_COUNT + 1));
    uint16_t rflags = (m / (MEMCACHE_CMD_COUNT + 1)) & 1 ? PROTO_RF_QUIET : 0;
    char *buf = dup_exact(data, size);
    struct proto_parser p;
    memset(&p, 0, sizeof(p));
    size_t off = 0;
    for (int guard = 0; off < size && guard < 4096; guard++) {
        struct proto_rsp r;
        int rc = ops->parse_rsp(&p, buf + off, size - off, cmd, rflags, &r);
        if (rc <= 0) {
            if (rc == 0)
                FUZZ_CHECK(size - off < MEMCACHE_RSP_LINE_MAX);
            break;
        }
        FUZZ_CHECK((size_t)rc <= size - off && r.hdr_len == (uint32_t)rc);
        if (r.flags & PROTO_SF_ITEM) {
            FUZZ_CHECK(r.key.len >= 1 && (uint64_t)r.key.off + r.key.len <= r.hdr_len);
            FUZZ_CHECK(!(r.flags & PROTO_SF_FINAL));
        } else {
            /* every other unit ends the reply, but the STAT/ITEM lines of a
             * forwarded `stats <sub>`, which END ends */
            FUZZ_CHECK((r.flags & PROTO_SF_FINAL) || cmd == MEMCACHE_CMD_STATS);
        }
        if (r.flags & PROTO_SF_SUPPRESS)
            FUZZ_CHECK(rflags & PROTO_RF_QUIET);
        /* One byte short is incomplete and consumes nothing. */
        struct proto_parser q;
        struct proto_rsp r2;
        memset(&q, 0, sizeof(q));
        char *h = dup_exact((const uint8_t *)buf + off, (size_t)rc);
        FUZZ_CHECK(ops->parse_rsp(&q, h, (size_t)rc - 1, cmd, rflags, &r2) == 0);
        FUZZ_CHECK(ops->parse_rsp(&q, h, (size_t)rc, cmd, rflags, &r2) == rc);
        FUZZ_CHECK(r2.flags == r.flags && r2.body_len == r.body_len);
        free(h);
        uint64_t next = (uint64_t)off + (uint64_t)rc + r.body_len;
        off = next > size ? size : (size_t)next;
    }
    free(buf);
}

/* A merged reply is items then END, or exactly one error line. */
static void check_merged(uint16_t cmd, const struct buf *out)
{
    const char *s = buf_rptr(out);
    size_t n = buf_len(out), off = 0;
    struct proto_parser p;
    memset(&p, 0, sizeof(p));
    for (;;) {
        struct proto_rsp r;
        int rc = ops->parse_rsp(&p, s + off, n - off, cmd, 0, &r);
        FUZZ_CHECK(rc > 0);
        if (r.flags & PROTO_SF_FINAL) {
            FUZZ_CHECK(off + (size_t)rc == n);
            if (r.flags & PROTO_SF_ERROR)
                FUZZ_CHECK(off == 0);
            return;
        }
        FUZZ_CHECK(r.body_len <= n - off - (size_t)rc);
        off += (size_t)rc + r.body_len;
    }
}

/*
 * Merge: the input up to the first '\n' is a get request; the rest is split
 * on 0xff bytes into fragment replies; key i goes to fragment
 * (byte i of the request line) % nfrag.
 */
static void fuzz_merge(const uint8_t *data, size_t size, uint8_t mode)
{
    const uint8_t *nl = memchr(data, '\n', size);
    if (nl == NULL)
        return;
    size_t rlen = (size_t)(nl - data) + 1;
    char *rbuf = dup_exact(data, rlen);
    struct proto_parser p;
    struct proto_req r;
    memset(&p, 0, sizeof(p));
    int rc = ops->parse_req(&p, rbuf, rlen, &r);
    if (rc <= 0 || !(r.kind == PROTO_REQ_FANOUT || r.kind == PROTO_REQ_SINGLE) ||
        !(r.flags & PROTO_RF_RETRIEVAL) || r.cmd == MEMCACHE_CMD_MG)
        goto out_req;

    struct buf frags[8];
    struct buf *fp[8];
    uint32_t nfrag = 0;
    const uint8_t *s = data + rlen, *end = data + size;
    while (nfrag < 8) {
        const uint8_t *sep = memchr(s, 0xff, (size_t)(end - s));
        const uint8_t *e = sep ? sep : end;
        buf_init(&frags[nfrag]);
        /* buf_append of 0 bytes leaves data NULL; keep a valid pointer. */
        FUZZ_CHECK(buf_reserve(&frags[nfrag], 1) == 0);
        FUZZ_CHECK(buf_append(&frags[nfrag], s, (size_t)(e - s)) == 0);
        fp[nfrag] = &frags[nfrag];
        nfrag++;
        if (sep == NULL)
            break;
        s = sep + 1;
    }
    uint32_t *kf = malloc(r.nkeys * sizeof(*kf));
    FUZZ_CHECK(kf != NULL);
    for (uint32_t i = 0; i < r.nkeys; i++)
        kf[i] = (uint32_t)((uint8_t)rbuf[i % rlen] + mode) % nfrag;
    struct buf out;
    buf_init(&out);
    int mrc = ops->merge(r.cmd, rbuf, r.keys, r.nkeys, kf, fp, nfrag, &out);
    if (mrc == 0)
        check_merged(r.cmd, &out);
    buf_free(&out);

    /* Broadcast merge over the same fragments. */
    buf_init(&out);
    if (ops->merge(MEMCACHE_CMD_FLUSH_ALL, rbuf, NULL, 0, NULL, fp, nfrag, &out) == 0) {
        FUZZ_CHECK(buf_len(&out) >= 1 && buf_rptr(&out)[buf_len(&out) - 1] == '\n');
    }
    buf_free(&out);
    free(kf);
    for (uint32_t f = 0; f < nfrag; f++)
        buf_free(&frags[f]);
out_req:
    proto_parser_free(&p);
    free(rbuf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    switch (mode % 3) {
    case 0:
        fuzz_requests(data, size, mode);
        break;
    case 1:
        fuzz_replies(data, size, (uint8_t)(mode / 3));
        break;
    default:
        fuzz_merge(data, size, mode);
        break;
    }
    return 0;
}
