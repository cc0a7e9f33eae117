/* The memcached protocol's reply side: the resumable reply parser, forwarding a request's line and fragments, merging a multi-get's replies. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/invariant.h"
#include "proto/memcache.h"
#include "proto/memcache_int.h"
#include "proto/proto.h"
#include "lib/util.h"

/* ------------------------------------------------------------------ replies */

static bool mc_line_is(const char *s, size_t n, const char *lit, size_t litn)
{
    return n == litn && memcmp(s, lit, n) == 0;
}

static bool mc_line_starts(const char *s, size_t n, const char *lit, size_t litn)
{
    return n >= litn && memcmp(s, lit, litn) == 0;
}

#define LINE_IS(s, n, lit)     mc_line_is((s), (n), lit, sizeof(lit) - 1)
#define LINE_STARTS(s, n, lit) mc_line_starts((s), (n), lit, sizeof(lit) - 1)

/* An error line: ERROR, or CLIENT_ERROR / SERVER_ERROR with or without a reason. */
static bool mc_is_error_line(const char *s, size_t n)
{
    /* First the one byte that tells nearly every line apart (VALUE, END, STORED...):
     * each reply's every line meets this test */
    if (n < 5 || (s[0] != 'E' && s[0] != 'C' && s[0] != 'S'))
        return false;
    return LINE_IS(s, n, "ERROR") || LINE_STARTS(s, n, "ERROR ") ||
           LINE_IS(s, n, "CLIENT_ERROR") || LINE_STARTS(s, n, "CLIENT_ERROR ") ||
           LINE_IS(s, n, "SERVER_ERROR") || LINE_STARTS(s, n, "SERVER_ERROR ");
}

/* "VALUE <key> <flags> <bytes>[ <cas>]": fills the key and the byte count. */
static bool mc_value_line(const char *s, uint32_t n, struct proto_key *key, uint64_t *bytes)
{
    struct mc_tok t[5];
    uint64_t v;
    uint32_t nt = memcache__tokens(s, 6, n, t, 4);   /* after "VALUE " */
    /* A server's key needs no CR test: the proxy asked for it (and compares it
     * byte for byte with the key it asked for), and the line is already cut. */
    if (nt < 3 || nt > 4 || t[0].len == 0 || t[0].len > MEMCACHE_KEY_MAX ||
        !memcache__tok_u64(s, &t[1], UINT32_MAX, &v) || !memcache__tok_u64(s, &t[2], UINT32_MAX, bytes) ||
        (nt == 4 && !memcache__tok_u64(s, &t[3], UINT64_MAX, &v)))
        return false;
    key->off = t[0].off;
    key->len = t[0].len;
    return true;
}

/* A meta reply: two upper-case letters, then the end or a space. */
static uint32_t mc_meta_code(const char *s, size_t n)
{
    if (n < 2 || (n > 2 && s[2] != ' '))
        return 0;
    static const struct { char c[2]; uint32_t bit; } codes[] = {
        { "VA", R_VA }, { "HD", R_HD }, { "EN", R_EN }, { "NF", R_NF },
        { "NS", R_NS }, { "EX", R_EX }, { "MN", R_MN },
    };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (s[0] == codes[i].c[0] && s[1] == codes[i].c[1])
            return codes[i].bit;
    return 0;
}

/*
 * One reply unit of buf[0..len) for command cmd. *scan is the resume offset
 * of the '\n' search. Returns the header length, 0 if incomplete, <0 if the
 * bytes are not a reply this command can get.
 */
static int mc_rsp_unit(const char *buf, size_t len, uint16_t cmd, uint16_t rflags,
                       struct proto_rsp *rsp, uint32_t *scan)
{
    memset(rsp, 0, sizeof(*rsp));
    size_t from = *scan <= len ? *scan : 0;
    size_t to = len < MEMCACHE_RSP_LINE_MAX ? len : MEMCACHE_RSP_LINE_MAX;
    const char *nl = from < to ? memchr(buf + from, '\n', to - from) : NULL;
    if (nl == NULL) {
        if (len >= MEMCACHE_RSP_LINE_MAX) {
            *scan = 0;
            return -EPROTO;
        }
        *scan = (uint32_t)len;
        return 0;
    }
    *scan = 0;
    uint32_t n = (uint32_t)(nl - buf);
    rsp->hdr_len = n + 1;
    if (n > 0 && buf[n - 1] == '\r')
        n--;

    if (mc_is_error_line(buf, n)) {
        rsp->flags = PROTO_SF_FINAL | PROTO_SF_ERROR;
        return (int)rsp->hdr_len;
    }
    if (cmd >= MEMCACHE_CMD_COUNT)
        return -EPROTO;
    const struct mc_cmd_def *d = &memcache__cmds[cmd];
    uint32_t kind = 0;
    uint64_t v;

    if (cmd == MEMCACHE_CMD_STATS && (LINE_STARTS(buf, n, "STAT ") || LINE_STARTS(buf, n, "ITEM ")))
        return (int)rsp->hdr_len;   /* a line of `stats <sub>`; END ends them */
    if (LINE_STARTS(buf, n, "VALUE ")) {
        kind = R_VALUE;
        if (!(d->replies & kind) || !mc_value_line(buf, n, &rsp->key, &v))
            return -EPROTO;
        rsp->body_len = v + 2;
        rsp->flags = PROTO_SF_ITEM;
        return (int)rsp->hdr_len;
    }
    if (LINE_IS(buf, n, "END"))
        kind = R_END;
    else if (LINE_IS(buf, n, "STORED"))
        kind = R_STORED;
    else if (LINE_IS(buf, n, "NOT_STORED"))
        kind = R_NOT_STORED;
    else if (LINE_IS(buf, n, "EXISTS"))
        kind = R_EXISTS;
    else if (LINE_IS(buf, n, "NOT_FOUND"))
        kind = R_NOT_FOUND;
    else if (LINE_IS(buf, n, "DELETED"))
        kind = R_DELETED;
    else if (LINE_IS(buf, n, "TOUCHED"))
        kind = R_TOUCHED;
    else if (LINE_IS(buf, n, "OK"))
        kind = R_OK;
    else if (LINE_STARTS(buf, n, "VERSION "))
        kind = R_VERSION;
    else if (n > 0 && buf[0] >= '0' && buf[0] <= '9' && util_parse_u64(buf, n, UINT64_MAX, &v) == 0)
        kind = R_NUMBER;
    else
        kind = mc_meta_code(buf, n);
    if (kind == 0 || !(d->replies & kind))
        return -EPROTO;

    rsp->flags = PROTO_SF_FINAL;
    if (kind == R_VA) {
        struct mc_tok t;
        uint32_t pos = 2;
        if (!memcache__next(buf, &pos, n, &t) || !memcache__tok_u64(buf, &t, UINT32_MAX, &v))
            return -EPROTO;
        rsp->body_len = v + 2;
    }
    if ((rflags & PROTO_RF_QUIET) && (d->quiet_hide & kind))
        rsp->flags |= PROTO_SF_SUPPRESS;
    return (int)rsp->hdr_len;
}

int memcache__parse_rsp(struct proto_parser *p, const char *buf, size_t len, uint16_t cmd,
                        uint16_t rflags, struct proto_rsp *rsp)
{
    int rc = mc_rsp_unit(buf, len, cmd, rflags, rsp, &p->u.mc.scan);
    /* A unit's header is in the buffer: the caller consumes rc bytes of it. */
    RL_ASSERT(rc <= 0 || ((size_t)rc <= len && (uint32_t)rc == rsp->hdr_len));
    return rc;
}

/* ------------------------------------------------------------------ forwarding */

/*
 * The line as memcached is to read it: the line less the recorded cut; a
 * line cut at a NUL ends at the NUL with "\r\n" (the bytes after it, which
 * memcached would ignore, are not sent). The common case is one copy.
 * 0 or -ENOMEM (out unchanged).
 */
int memcache__forward(const struct proto_req *req, const char *buf, struct buf *out)
{
    const struct proto_mc_req *m = &req->u.mc;
    uint32_t cut = m->cut_off, cutlen = m->cut_len;
    uint32_t end = m->nul_cut ? m->line_end : req->hdr_len;
    if (cutlen == 0 || (uint64_t)cut + cutlen > end)
        cut = end, cutlen = 0;
    if (cutlen == 0 && !m->nul_cut)
        return buf_append(out, buf, req->hdr_len);
    size_t n = end - cutlen + (m->nul_cut ? 2 : 0);
    if (buf_reserve(out, n) != 0)
        return -ENOMEM;
    char *w = buf_wptr(out);
    memcpy(w, buf, cut);
    memcpy(w + cut, buf + cut + cutlen, end - cut - cutlen);
    if (m->nul_cut)
        memcpy(w + end - cutlen, "\r\n", 2);
    buf_produce(out, n);
    return 0;
}

int memcache__frag_write(const struct proto_req *req, const char *buf, const uint32_t *idx,
                         uint32_t n, struct buf *out)
{
    const struct mc_cmd_def *d = &memcache__cmds[req->cmd < MEMCACHE_CMD_COUNT ? req->cmd : 0];
    bool gat = d->syntax == MC_SYN_GAT;
    size_t need = d->len + 2 + (gat ? 1 + req->u.mc.exp_len : 0);
    for (uint32_t i = 0; i < n; i++)
        need += 1 + req->keys[idx[i]].len;
    if (buf_reserve(out, need) != 0)
        return -ENOMEM;
    char *w = buf_wptr(out);
    memcpy(w, d->name, d->len);
    w += d->len;
    if (gat) {
        *w++ = ' ';
        memcpy(w, buf + req->u.mc.exp_off, req->u.mc.exp_len);
        w += req->u.mc.exp_len;
    }
    for (uint32_t i = 0; i < n; i++) {
        const struct proto_key *k = &req->keys[idx[i]];
        *w++ = ' ';
        memcpy(w, buf + k->off, k->len);
        w += k->len;
    }
    *w++ = '\r';
    *w++ = '\n';
    buf_produce(out, need);
    return 0;
}

/* Length of the first line of s[0..n) including its '\n', 0 if none. */
static size_t mc_first_line(const char *s, size_t n)
{
    const char *nl = memchr(s, '\n', n);
    return nl ? (size_t)(nl - s) + 1 : 0;
}

/* BROADCAST (flush_all): OK if every server said OK, else the first error
 * line; -1 if a reply is neither. */
static int mc_merge_broadcast(struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *s = buf_rptr(frag[f]);
        size_t n = mc_first_line(s, buf_len(frag[f]));
        if (n == 0)
            return -1;
        size_t content = memcache__strip_eol(s, n);
        if (LINE_IS(s, content, "OK"))
            continue;
        if (!mc_is_error_line(s, content))
            return -1;
        return buf_append(out, s, n);
    }
    return buf_append_str(out, "OK\r\n");
}

/* Walk a fragment's complete retrieval reply: items, then END as the last
 * bytes. Returns 0 if it is that, 1 if it carries an error line (whose
 * offset and length are stored in *err_off, *err_len), -1 if malformed. */
static int mc_frag_check(uint16_t cmd, const char *s, size_t n, size_t *err_off,
                         size_t *err_len)
{
    size_t off = 0;
    struct proto_rsp r;
    for (;;) {
        uint32_t scan = 0;
        int rc = mc_rsp_unit(s + off, n - off, cmd, 0, &r, &scan);
        if (rc <= 0)
            return -1;
        if (r.flags & PROTO_SF_ERROR) {
            *err_off = off;
            *err_len = (size_t)rc;
            return 1;
        }
        if (r.flags & PROTO_SF_FINAL)
            return off + (size_t)rc == n ? 0 : -1;
        if (r.body_len > n - off - (size_t)rc)
            return -1;
        off += (size_t)rc + r.body_len;
    }
}

/*
 * FANOUT (multi-get): every fragment is checked whole before anything is
 * written, so a malformed fragment never leaves a half-written reply. Each
 * fragment has a cursor; key i takes the next item of its fragment if that
 * item's key is key i, which handles misses and duplicate keys alike since
 * a server answers in the order it was asked. Allocates only for more than
 * 64 fragments. Returns 0, -1 if a fragment is malformed or items are left
 * over, -ENOMEM.
 */
int memcache__merge(uint16_t cmd, const char *reqbuf, const struct proto_key *keys,
                    uint32_t nkeys, const uint32_t *key_frag, struct buf *const *frag,
                    uint32_t nfrag, struct buf *out)
{
    /* A fragment's reply is never empty; checking that first also keeps
     * buf_rptr() off a buffer that was never allocated (NULL + 0). */
    for (uint32_t f = 0; f < nfrag; f++)
        if (buf_len(frag[f]) == 0)
            return -1;
    if (key_frag == NULL)
        return mc_merge_broadcast(frag, nfrag, out);
    if (cmd >= MEMCACHE_CMD_COUNT || !(memcache__cmds[cmd].replies & R_VALUE))
        return -1;

    size_t stack_cur[64];
    size_t *cur = nfrag <= 64 ? stack_cur : malloc(nfrag * sizeof(*cur));
    if (cur == NULL)
        return -ENOMEM;
    int rc = 0;
    const char *err = NULL;
    size_t err_len = 0;
    for (uint32_t f = 0; f < nfrag; f++) {
        size_t eo = 0, el = 0;
        int c = mc_frag_check(cmd, buf_rptr(frag[f]), buf_len(frag[f]), &eo, &el);
        if (c < 0) {
            rc = -1;
            goto done;
        }
        if (c == 1 && err == NULL) {
            err = buf_rptr(frag[f]) + eo;
            err_len = el;
        }
        cur[f] = 0;
    }
    if (err != NULL) {
        rc = buf_append(out, err, err_len);
        goto done;
    }

    for (uint32_t i = 0; i < nkeys; i++) {
        uint32_t f = key_frag[i];
        if (f >= nfrag) {
            rc = -1;
            goto done;
        }
        const char *s = buf_rptr(frag[f]);
        size_t n = buf_len(frag[f]);
        struct proto_rsp r;
        uint32_t scan = 0;
        int u = mc_rsp_unit(s + cur[f], n - cur[f], cmd, 0, &r, &scan);
        if (u <= 0) {
            rc = -1;
            goto done;
        }
        if (!(r.flags & PROTO_SF_ITEM))
            continue;           /* this fragment has no more items: a miss */
        if (r.key.len != keys[i].len ||
            memcmp(s + cur[f] + r.key.off, reqbuf + keys[i].off, r.key.len) != 0)
            continue;           /* the next item is a later key's: a miss */
        size_t unit = (size_t)u + r.body_len;
        /* The fragment is a whole reply, read by this parser with its data blocks:
         * an item never runs past its end (the copy would read past the buffer). */
        RL_ASSERT(unit <= n - cur[f]);
        if ((rc = buf_append(out, s + cur[f], unit)) != 0)
            goto done;
        cur[f] += unit;
    }
    /* Every item must have been claimed by a key, in order. */
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *s = buf_rptr(frag[f]);
        size_t n = buf_len(frag[f]);
        if (!LINE_IS(s + cur[f], memcache__strip_eol(s + cur[f], n - cur[f]), "END")) {
            rc = -1;
            goto done;
        }
    }
    rc = buf_append_str(out, "END\r\n");
done:
    if (cur != stack_cur)
        free(cur);
    return rc;
}

