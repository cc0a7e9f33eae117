/* The memcached side of membership safety: rejoin invalidations, failover_ttl, collapsible gets, shadow reply comparison. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache.h"
#include "proto/proto.h"
#include "lib/util.h"

/* memcached reads an exptime above this many seconds as a unix time (REALTIME_MAXDELTA). */
#define MC_REALTIME_MAXDELTA 2592000

/* ------------------------------------------------------------------ tokens */

struct mcs_tok {
    size_t off, len;
};

/* Up to max space-separated tokens of s[0..n) (memcached splits on spaces
 * only); returns how many there are, counting past max. */
static size_t mcs_tokens(const char *s, size_t n, struct mcs_tok *t, size_t max)
{
    size_t k = 0, i = 0;
    while (i < n) {
        while (i < n && s[i] == ' ')
            i++;
        if (i == n)
            break;
        size_t start = i;
        while (i < n && s[i] != ' ')
            i++;
        if (k < max)
            t[k] = (struct mcs_tok){ start, i - start };
        k++;
    }
    return k;
}

/* ------------------------------------------------------------------ rejoin */

/* A key the text protocol carries as it is: no space, no line end, no NUL. */
static bool mcs_text_key(const char *key, size_t len)
{
    if (len == 0 || len > MEMCACHE_KEY_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c == ' ' || c == '\r' || c == '\n' || c == '\0')
            return false;
    }
    return true;
}

/* `delete <key>`, or for a key the text protocol cannot carry (a meta
 * command's base64 key, decoded) `md <base64> b`: memcached 1.6 stores that
 * key under its decoded bytes, as the proxy placed it. */
int memcache__invalidate(const char *key, size_t len, struct buf *out, uint16_t *cmd)
{
    if (mcs_text_key(key, len)) {
        *cmd = MEMCACHE_CMD_DELETE;
        if (buf_append_str(out, "delete ") < 0 || buf_append(out, key, len) < 0 ||
            buf_append_str(out, "\r\n") < 0)
            return -ENOMEM;
        return 0;
    }
    *cmd = MEMCACHE_CMD_MD;
    /* reserved whole first: the appends cannot fail half way */
    if (buf_reserve(out, 3 + (len + 2) / 3 * 4 + 4) != 0 || buf_append_str(out, "md ") < 0 ||
        buf_append_b64(out, key, len) < 0 || buf_append_str(out, " b\r\n") < 0)
        return -ENOMEM;
    return 0;
}

/* ------------------------------------------------------------------ failover_ttl */

/*
 * An exptime e capped at ttl seconds from now, as memcached reads it: 0 never
 * expires, a negative one already has, up to 30 days is relative, above that
 * a unix time. Returns 1 with *out when it must change.
 */
static int mcs_cap(int64_t e, uint32_t ttl, int64_t now_s, int64_t *out)
{
    if (e < 0)
        return 0;
    if (e > MC_REALTIME_MAXDELTA) {
        if (e <= now_s || e - now_s <= (int64_t)ttl)
            return 0;
    } else if (e != 0 && e <= (int64_t)ttl) {
        return 0;
    }
    *out = ttl;
    return 1;
}

/* The number of token t of line s, as memcached's safe_strtol reads an exptime (a 32-bit
 * int); 0, or -1 for one it refuses (left as it is: capping it would make a request the
 * server refuses one it stores). */
static int mcs_number(const char *s, const struct mcs_tok *t, size_t skip, int64_t *v)
{
    if (t->len <= skip || util_parse_dec_i64(s + t->off + skip, t->len - skip,
                                             UTIL_DEC_PLUS | UTIL_DEC_MINUS, v) < 0)
        return -1;
    return *v >= INT32_MIN && *v <= INT32_MAX ? 0 : -1;
}

/*
 * Rewrite the line at out[start..) with token `which` (or, meta, every token
 * starting with one of `flags`) capped; `add`: a meta flag to append when the
 * line has none of them. The new line must stay within MEMCACHE_LINE_MAX (a
 * longer one is left as it is: 0).
 */
static int mcs_rewrite(struct buf *out, size_t start, int which, const char *flags, char add,
                       uint32_t ttl, int64_t now_s)
{
    char *line = buf_rptr(out) + start;
    size_t n = buf_len(out) - start;
    size_t content = memcache__strip_eol(line, n);
    struct mcs_tok t[MEMCACHE_META_TOKENS_MAX + 2];
    size_t nt = mcs_tokens(line, content, t, RL_ARRAY_SIZE(t));
    char nl[MEMCACHE_LINE_MAX + 32];
    size_t w = 0;
    int changed = 0, seen = 0;

    if (nt > RL_ARRAY_SIZE(t) || content + 24 > MEMCACHE_LINE_MAX)
        return 0;
    for (size_t i = 0; i < nt; i++) {
        int64_t e, capped;
        const char *tok = line + t[i].off;
        size_t skip = 0;
        int cap = 0;
        if (flags != NULL) {
            cap = i >= 2 && t[i].len > 1 && strchr(flags, tok[0]) != NULL;
            skip = 1;
        } else {
            cap = (int)i == which;
        }
        nl[w++] = ' ';
        if (cap) {
            seen = 1;
            if (mcs_number(line, &t[i], skip, &e) == 0 && mcs_cap(e, ttl, now_s, &capped)) {
                w += (size_t)snprintf(nl + w, sizeof(nl) - w, "%.*s%" PRId64, (int)skip, tok,
                                      capped);
                changed = 1;
                continue;
            }
        }
        memcpy(nl + w, tok, t[i].len);
        w += t[i].len;
    }
    if (flags != NULL && add != 0 && !seen) {
        /* one token more than memcached takes would be refused before its data block
         * is read, and the value would then be read as commands: left as it is */
        if (nt + 1 > MEMCACHE_META_TOKENS_MAX)
            return 0;
        w += (size_t)snprintf(nl + w, sizeof(nl) - w, " %c%" PRIu32, add, ttl);
        changed = 1;
    }
    if (!changed || w - 1 + 2 > MEMCACHE_LINE_MAX)
        return 0;
    /* the line ends as it did (its "\r\n", or a bare "\n") */
    memcpy(nl + w, line + content, n - content);
    w += n - content;
    buf_truncate(out, start);
    return buf_append(out, nl + 1, w - 1) < 0 ? -ENOMEM : 1;
}

int memcache__ttl_cap(uint16_t cmd, struct buf *out, size_t start, uint32_t ttl, int64_t now_s)
{
    switch (cmd) {
    case MEMCACHE_CMD_SET:
    case MEMCACHE_CMD_ADD:
    case MEMCACHE_CMD_REPLACE:
    case MEMCACHE_CMD_CAS:
        return mcs_rewrite(out, start, 3, NULL, 0, ttl, now_s);    /* <cmd> <key> <flags> <exptime> */
    case MEMCACHE_CMD_TOUCH:
    case MEMCACHE_CMD_GAT:
    case MEMCACHE_CMD_GATS:
        return mcs_rewrite(out, start, cmd == MEMCACHE_CMD_TOUCH ? 2 : 1, NULL, 0, ttl, now_s);
    case MEMCACHE_CMD_MS:
        return mcs_rewrite(out, start, -1, "T", 'T', ttl, now_s);  /* none given: T<ttl> */
    case MEMCACHE_CMD_MG:
    case MEMCACHE_CMD_MA:
        return mcs_rewrite(out, start, -1, "TN", 0, ttl, now_s);   /* touch, vivify */
    default:
        return 0;     /* append/prepend keep the item's TTL; the rest carry none */
    }
}

/* ------------------------------------------------------------------ collapse */

/*
 * get and gets of one key, and mg without flags that act per request (N and R:
 * the stampede protection of memcached's own, which hands the recache to one
 * client; q: quiet mode; T: a touch, a write that failover_ttl caps per request;
 * E is not an mg flag). Identical bytes are then identical requests.
 */
int memcache__collapsible(const struct proto_req *req, const char *buf)
{
    if (req->kind != PROTO_REQ_SINGLE || req->nkeys != 1 || req->body_len != 0)
        return 0;
    if (req->cmd == MEMCACHE_CMD_GET || req->cmd == MEMCACHE_CMD_GETS)
        return req->flags == PROTO_RF_RETRIEVAL;
    if (req->cmd != MEMCACHE_CMD_MG || (req->flags & (PROTO_RF_NOREPLY | PROTO_RF_QUIET)))
        return 0;
    const struct proto_key *k = &req->keys[0];
    size_t from = (size_t)k->off + k->len;
    size_t end = memcache__strip_eol(buf, req->hdr_len);
    struct mcs_tok t[MEMCACHE_META_TOKENS_MAX + 1];
    size_t nt = mcs_tokens(buf + from, end > from ? end - from : 0, t, RL_ARRAY_SIZE(t));
    if (nt > RL_ARRAY_SIZE(t))
        return 0;
    for (size_t i = 0; i < nt; i++) {
        char f = buf[from + t[i].off];
        if (f == 'N' || f == 'R' || f == 'q' || f == 'T')
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ shadow compare */

/* The line starting at s[0..n) including its "\n" (0 if none). */
static size_t mcs_line(const char *s, size_t n)
{
    const char *nl = memchr(s, '\n', n);
    return nl ? (size_t)(nl - s) + 1 : 0;
}

/* "VALUE k f n [cas]": equal but for the cas. */
static bool mcs_value_equal(const char *a, size_t al, const char *b, size_t bl, uint64_t *bytes)
{
    struct mcs_tok ta[6], tb[6];
    size_t na = mcs_tokens(a, al, ta, 6), nb = mcs_tokens(b, bl, tb, 6);
    if (na < 4 || nb < 4 || na > 5 || nb > 5)
        return false;
    for (size_t i = 1; i < 4; i++)
        if (ta[i].len != tb[i].len || memcmp(a + ta[i].off, b + tb[i].off, ta[i].len) != 0)
            return false;
    return util_parse_u64(a + ta[3].off, ta[3].len, UINT32_MAX, bytes) == 0;
}

/* Meta replies: the same code, value and client flags (f), key (k) and
 * opaque (O); a cas, TTL, size, or access flags may differ between pools. */
static bool mcs_meta_equal(const char *a, size_t al, const char *b, size_t bl)
{
    if (al < 2 || bl < 2 || a[0] != b[0] || a[1] != b[1])
        return false;
    struct mcs_tok ta[MEMCACHE_META_TOKENS_MAX + 2], tb[MEMCACHE_META_TOKENS_MAX + 2];
    size_t na = mcs_tokens(a, al, ta, RL_ARRAY_SIZE(ta));
    size_t nb = mcs_tokens(b, bl, tb, RL_ARRAY_SIZE(tb));
    if (na > RL_ARRAY_SIZE(ta) || nb > RL_ARRAY_SIZE(tb))
        return al == bl && memcmp(a, b, al) == 0;
    static const char kept[] = "fkO";
    for (size_t i = 1; i < na; i++) {
        char f = a[ta[i].off];
        bool value_len = i == 1 && a[0] == 'V' && a[1] == 'A';
        if (!value_len && strchr(kept, f) == NULL)
            continue;
        size_t j = value_len ? 1 : 0;
        for (size_t k = 1; !value_len && k < nb; k++)
            if (b[tb[k].off] == f)
                j = k;
        if (j == 0 || j >= nb || ta[i].len != tb[j].len ||
            memcmp(a + ta[i].off, b + tb[j].off, ta[i].len) != 0)
            return false;
    }
    return true;
}

int memcache__reply_equal(uint16_t cmd, const char *a, size_t alen, const char *b, size_t blen)
{
    bool retrieval = cmd == MEMCACHE_CMD_GET || cmd == MEMCACHE_CMD_GETS ||
                     cmd == MEMCACHE_CMD_GAT || cmd == MEMCACHE_CMD_GATS;
    bool meta = cmd == MEMCACHE_CMD_MG || cmd == MEMCACHE_CMD_MS || cmd == MEMCACHE_CMD_MD ||
                cmd == MEMCACHE_CMD_MA;
    size_t pa = 0, pb = 0;

    if (!retrieval && !meta)
        return alen == blen && memcmp(a, b, alen) == 0;
    while (pa < alen && pb < blen) {
        const char *la = a + pa, *lb = b + pb;
        size_t na = mcs_line(la, alen - pa), nb = mcs_line(lb, blen - pb);
        if (na == 0 || nb == 0)
            return 0;
        size_t ca = memcache__strip_eol(la, na), cb = memcache__strip_eol(lb, nb);
        uint64_t bytes = 0;
        bool data = false;
        if (retrieval && ca > 6 && memcmp(la, "VALUE ", 6) == 0) {
            if (!mcs_value_equal(la, ca, lb, cb, &bytes))
                return 0;
            data = true;
        } else if (meta) {
            if (!mcs_meta_equal(la, ca, lb, cb))
                return 0;
            struct mcs_tok t[2];
            if (ca >= 2 && la[0] == 'V' && la[1] == 'A') {
                if (mcs_tokens(la, ca, t, 2) < 2 ||
                    util_parse_u64(la + t[1].off, t[1].len, UINT32_MAX, &bytes) < 0)
                    return 0;
                data = true;
            }
        } else if (ca != cb || memcmp(la, lb, ca) != 0) {
            return 0;
        }
        pa += na;
        pb += nb;
        if (data) {
            /* the data block and its "\r\n" */
            if (alen - pa < bytes + 2 || blen - pb < bytes + 2 ||
                memcmp(a + pa, b + pb, (size_t)bytes + 2) != 0)
                return 0;
            pa += (size_t)bytes + 2;
            pb += (size_t)bytes + 2;
        }
    }
    return pa == alen && pb == blen;
}
