/* The memcached text and meta protocol's request side: the command table, tokens, base64 keys and the resumable request parser. */
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

/*
 * Requests are one line, "<cmd> <args>\r\n" (a bare "\n" is accepted, as
 * memcached does), optionally followed by a data block whose length the
 * line announces. parse_req() consumes only the line; the core forwards or
 * swallows body_len more bytes itself. Lines are bounded (MEMCACHE_LINE_MAX,
 * or MEMCACHE_RETRIEVAL_LINE_MAX for get/gets), so an incomplete line is
 * re-scanned for its '\n' from p->u.mc.scan, the offset the previous call
 * looked up to, and parsed only once complete.
 *
 * The line is read as memcached 1.6 reads it (proto_text.c): one "\r"
 * before the "\n" is dropped, the rest is a C string, so the line ends at
 * its first NUL; tokens are separated by spaces only, so every other byte
 * (tab, \x10, DEL ...) belongs to a token; numbers are what strtol/strtoul
 * read whole (a '+' or leading zeros included). Whatever the proxy accepts,
 * it forwards so that memcached reads the same command, keys and lengths:
 * a line cut at a NUL is forwarded up to the NUL and ended with "\r\n".
 * Where memcached would read bytes in a way the proxy does not model
 * (numbers it truncates, a key with a CR), the request is refused.
 *
 * Rewriting is limited to that and to what keeps every request answered:
 * forward() removes " noreply" and a meta command's q flag, recorded by the
 * parser as one cut [u.mc.cut_off, + cut_len) of the line. The server then
 * always replies, the core drops replies the client did not ask for
 * (NOREPLY) and parse_rsp() marks the units the quiet mode hides
 * (PROTO_SF_SUPPRESS), so a reply can never be matched to the wrong request.
 */

/* Indexed by enum memcache_cmd. Quiet semantics checked against memcached
 * 1.6.18: mg hides only EN (a hit's HD is still sent); ms, md and ma hide
 * HD. memcached also hides an ma's VA when the q flag is set and the item
 * existed, but shows it when N created the item; a reply line cannot tell
 * the two apart, so VA is always shown (the client asked for the value). */
const struct mc_cmd_def memcache__cmds[MEMCACHE_CMD_COUNT] = {
    [MEMCACHE_CMD_NONE]      = { "", 0, 0, 0, 0, 0 },
    [MEMCACHE_CMD_GET]       = { "get", 3, MC_SYN_GET, PROTO_RF_RETRIEVAL, R_VALUE | R_END, 0 },
    [MEMCACHE_CMD_GETS]      = { "gets", 4, MC_SYN_GET, PROTO_RF_RETRIEVAL, R_VALUE | R_END, 0 },
    [MEMCACHE_CMD_GAT]       = { "gat", 3, MC_SYN_GAT, PROTO_RF_RETRIEVAL, R_VALUE | R_END, 0 },
    [MEMCACHE_CMD_GATS]      = { "gats", 4, MC_SYN_GAT, PROTO_RF_RETRIEVAL, R_VALUE | R_END, 0 },
    [MEMCACHE_CMD_SET]       = { "set", 3, MC_SYN_STORE, PROTO_RF_WRITE, STORE_REPLIES, 0 },
    [MEMCACHE_CMD_ADD]       = { "add", 3, MC_SYN_STORE, PROTO_RF_WRITE, STORE_REPLIES, 0 },
    [MEMCACHE_CMD_REPLACE]   = { "replace", 7, MC_SYN_STORE, PROTO_RF_WRITE, STORE_REPLIES, 0 },
    [MEMCACHE_CMD_APPEND]    = { "append", 6, MC_SYN_STORE, PROTO_RF_WRITE, STORE_REPLIES, 0 },
    [MEMCACHE_CMD_PREPEND]   = { "prepend", 7, MC_SYN_STORE, PROTO_RF_WRITE, STORE_REPLIES, 0 },
    [MEMCACHE_CMD_CAS]       = { "cas", 3, MC_SYN_CAS, PROTO_RF_WRITE, STORE_REPLIES, 0 },
    [MEMCACHE_CMD_DELETE]    = { "delete", 6, MC_SYN_DELETE, PROTO_RF_WRITE,
                                 R_DELETED | R_NOT_FOUND, 0 },
    [MEMCACHE_CMD_INCR]      = { "incr", 4, MC_SYN_ARITH, PROTO_RF_WRITE, R_NUMBER | R_NOT_FOUND, 0 },
    [MEMCACHE_CMD_DECR]      = { "decr", 4, MC_SYN_ARITH, PROTO_RF_WRITE, R_NUMBER | R_NOT_FOUND, 0 },
    [MEMCACHE_CMD_TOUCH]     = { "touch", 5, MC_SYN_TOUCH, PROTO_RF_WRITE,
                                 R_TOUCHED | R_NOT_FOUND, 0 },
    [MEMCACHE_CMD_MG]        = { "mg", 2, MC_SYN_META, PROTO_RF_RETRIEVAL, R_VA | R_HD | R_EN, R_EN },
    [MEMCACHE_CMD_MS]        = { "ms", 2, MC_SYN_META_SET, PROTO_RF_WRITE,
                                 R_HD | R_NS | R_EX | R_NF, R_HD },
    [MEMCACHE_CMD_MD]        = { "md", 2, MC_SYN_META, PROTO_RF_WRITE, R_HD | R_NF | R_EX, R_HD },
    [MEMCACHE_CMD_MA]        = { "ma", 2, MC_SYN_META, PROTO_RF_WRITE,
                                 R_HD | R_VA | R_NF | R_NS | R_EX, R_HD },
    [MEMCACHE_CMD_MN]        = { "mn", 2, MC_SYN_MN, 0, R_MN, 0 },
    [MEMCACHE_CMD_ME]        = { "me", 2, MC_SYN_ME, 0, 0, 0 },
    [MEMCACHE_CMD_VERSION]   = { "version", 7, MC_SYN_VERSION, 0, R_VERSION, 0 },
    [MEMCACHE_CMD_VERBOSITY] = { "verbosity", 9, MC_SYN_VERBOSITY, 0, R_OK, 0 },
    [MEMCACHE_CMD_QUIT]      = { "quit", 4, MC_SYN_QUIT, PROTO_RF_CLOSE, 0, 0 },
    [MEMCACHE_CMD_STATS]     = { "stats", 5, MC_SYN_STATS, 0, R_END, 0 },
    [MEMCACHE_CMD_FLUSH_ALL] = { "flush_all", 9, MC_SYN_FLUSH, PROTO_RF_WRITE, R_OK, 0 },
};

const char *memcache_cmd_name(uint16_t cmd)
{
    if (cmd == MEMCACHE_CMD_NONE || cmd >= MEMCACHE_CMD_COUNT)
        return NULL;
    return memcache__cmds[cmd].name;
}

/* Replies the parser gives for refused requests (memcached's wording). */
#define S_ERROR          "ERROR\r\n"
#define S_BAD_FORMAT     "CLIENT_ERROR bad command line format\r\n"
#define S_BAD_DELETE     "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
#define S_BAD_EXPTIME    "CLIENT_ERROR invalid exptime argument\r\n"
#define S_BAD_DELTA      "CLIENT_ERROR invalid numeric delta argument\r\n"
#define S_TOO_LARGE      "SERVER_ERROR object too large for cache\r\n"
#define S_LINE_TOO_LONG  "CLIENT_ERROR line too long\r\n"
#define S_NOMEM          "SERVER_ERROR out of memory\r\n"
#define S_DUP_FLAG       "CLIENT_ERROR duplicate flag\r\n"
#define S_FLAGS_TOO_LONG "CLIENT_ERROR options flags are too long\r\n"
#define S_BAD_B64        "CLIENT_ERROR error decoding key\r\n"
#define S_TOO_MANY_KEYS  "CLIENT_ERROR too many keys\r\n"
#define S_ME_REFUSED     "CLIENT_ERROR meta debug (me) is not supported through this proxy\r\n"
#define S_STATS_REFUSED  "CLIENT_ERROR stats reset and stats detail change every server: " \
                         "send them to each server directly\r\n"
#define S_FLUSH_REFUSED  "CLIENT_ERROR flush_all is not allowed through this proxy " \
                         "(set allow_flush: true on the pool)\r\n"

/* ------------------------------------------------------------------ tokens */

static bool mc_tok_is(const char *buf, const struct mc_tok *t, const char *s, size_t n)
{
    return t->len == n && memcmp(buf + t->off, s, n) == 0;
}

#define TOK_IS(buf, t, lit) mc_tok_is((buf), (t), lit, sizeof(lit) - 1)

/* A signed 32-bit number (exptime: negative means already expired). */
static bool mc_tok_i32(const char *buf, const struct mc_tok *t)
{
    int64_t v;
    return util_parse_dec_i64(buf + t->off, t->len, MC_DEC, &v) == 0 && v >= INT32_MIN &&
           v <= INT32_MAX;
}

/* A data block length memcached accepts: 0 .. INT32_MAX - 2. */
static bool mc_tok_bytes(const char *buf, const struct mc_tok *t, uint64_t *out)
{
    return memcache__tok_u64(buf, t, (uint64_t)INT32_MAX - 2, out);
}

/* 1..250 bytes. A key cannot hold a space or a NUL (the line ends there)
 * nor a LF. memcached takes a CR inside a key, but a CR is where line
 * readers part ways (one before the LF is dropped, the next one is a key
 * byte: "get a\r\r\n" asks for "a\r"; a client reading the VALUE line
 * back may not agree), so the proxy refuses keys that hold one. */
static bool mc_key_valid(const char *buf, const struct mc_tok *t)
{
    return t->len > 0 && t->len <= MEMCACHE_KEY_MAX &&
           memchr(buf + t->off, '\r', t->len) == NULL;
}

/* ------------------------------------------------------------------ base64 */

static int mc_b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int memcache_key_decode(const char *b64, size_t len, char *out, size_t cap)
{
    /* memcached decodes only padded base64 (a multiple of 4 characters) and
     * refuses anything else with "error decoding key"; so does the proxy, so
     * that it never hashes a key the server would refuse. At most two '='
     * and only at the end. */
    if (len % 4 != 0)
        return -1;
    size_t pad = 0;
    while (pad < 2 && len > pad && b64[len - 1 - pad] == '=')
        pad++;
    size_t n = len - pad;
    if (n % 4 == 1)
        return -1;
    size_t outlen = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    if (outlen > cap || outlen > INT32_MAX)
        return -1;
    uint32_t acc = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = mc_b64_value((unsigned char)b64[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        if (i % 4 == 3) {
            out[o++] = (char)(acc >> 16);
            out[o++] = (char)(acc >> 8);
            out[o++] = (char)acc;
            acc = 0;
        }
    }
    /* Stray low bits in the last symbol are ignored, as memcached does. */
    switch (n % 4) {
    case 2:
        out[o++] = (char)(acc >> 4);
        break;
    case 3:
        out[o++] = (char)(acc >> 10);
        out[o++] = (char)(acc >> 2);
        break;
    }
    return (int)o;
}

/* ------------------------------------------------------------------ requests */

/* Everything a handler needs about the current line. */
struct mc_line {
    const char *buf;
    uint32_t    pos;      /* just after the command token */
    uint32_t    end;      /* end of the line's content (before "\r\n" / "\n") */
    uint16_t    cmd;
    struct mc_tok cmdtok; /* the command word */
};

static void mc_refuse(struct proto_req *req, const char *err, uint64_t body_len)
{
    req->kind = PROTO_REQ_ERROR;
    req->flags = 0;
    req->nkeys = 0;
    req->err = err;
    req->err_len = (uint32_t)strlen(err);
    req->body_len = body_len;
    req->u.mc.cut_off = req->u.mc.cut_len = 0;
}

static uint32_t mc_item_max(const struct proto_parser *p)
{
    return p->item_size_max ? p->item_size_max : MEMCACHE_ITEM_SIZE_MAX;
}

/* Record the trailing "noreply" token t (preceded by token prev) as the cut
 * forward() removes, and flag the request. */
static void mc_cut_noreply(struct proto_req *req, const struct mc_tok *prev,
                           const struct mc_tok *t)
{
    req->flags |= PROTO_RF_NOREPLY;
    req->u.mc.cut_off = prev->off + prev->len;
    req->u.mc.cut_len = t->off + t->len - req->u.mc.cut_off;
}

static int mc_set_key(struct proto_parser *p, struct proto_req *req, const struct mc_tok *k)
{
    if (proto__keys_reserve(p, 1) != 0)
        return -ENOMEM;
    req->keys = p->keys;
    p->keys[0].off = k->off;
    p->keys[0].len = k->len;
    req->nkeys = 1;
    return 0;
}

static void mc_single(struct proto_parser *p, struct proto_req *req, const struct mc_tok *key,
                      uint16_t rflags, uint64_t body_len)
{
    if (mc_set_key(p, req, key) != 0) {
        mc_refuse(req, S_NOMEM, body_len);
        return;
    }
    req->kind = PROTO_REQ_SINGLE;
    req->flags |= rflags;
    req->body_len = body_len;
}

static void mc_req_get(struct proto_parser *p, const struct mc_line *l, struct proto_req *req)
{
    const char *buf = l->buf;
    uint32_t pos = l->pos;
    struct mc_tok t;

    if (memcache__cmds[l->cmd].syntax == MC_SYN_GAT) {
        if (!memcache__next(buf, &pos, l->end, &t))
            return mc_refuse(req, S_ERROR, 0);
        if (!mc_tok_i32(buf, &t))
            return mc_refuse(req, S_BAD_EXPTIME, 0);
        req->u.mc.exp_off = t.off;
        req->u.mc.exp_len = t.len;
    }
    uint32_t n = 0;
    while (memcache__next(buf, &pos, l->end, &t)) {
        if (!mc_key_valid(buf, &t))
            return mc_refuse(req, S_BAD_FORMAT, 0);
        if (n == MEMCACHE_RETRIEVAL_KEYS_MAX)
            return mc_refuse(req, S_TOO_MANY_KEYS, 0);
        if (proto__keys_reserve(p, n + 1) != 0)
            return mc_refuse(req, S_NOMEM, 0);
        p->keys[n].off = t.off;
        p->keys[n].len = t.len;
        n++;
    }
    if (n == 0)     /* memcached: a gat without keys finds nothing, a get is an ERROR */
        return mc_refuse(req, memcache__cmds[l->cmd].syntax == MC_SYN_GAT ? "END\r\n" : S_ERROR, 0);
    req->keys = p->keys;
    req->nkeys = n;
    req->kind = n == 1 ? PROTO_REQ_SINGLE : PROTO_REQ_FANOUT;
    req->flags |= PROTO_RF_RETRIEVAL;
}

/* set/add/replace/append/prepend/cas. A malformed line is refused without
 * swallowing anything, exactly as memcached 1.6 does (the data line that
 * follows is then read as a command and answered ERROR): clients are written
 * against that behaviour. A well-formed request over item_size_max swallows
 * its data block, as memcached does, and the connection stays in step. */
static void mc_req_store(struct proto_parser *p, const struct mc_line *l, struct proto_req *req)
{
    const char *buf = l->buf;
    struct mc_tok t[8];
    uint32_t need = memcache__cmds[l->cmd].syntax == MC_SYN_CAS ? 5 : 4;
    uint32_t n = memcache__tokens(buf, l->pos, l->end, t, 7);
    uint64_t bytes = 0, v;
    uint64_t body = 0;

    if (n >= 4 && mc_tok_bytes(buf, &t[3], &bytes))
        body = bytes + 2;
    if (n < need || n > need + 1)
        return mc_refuse(req, S_ERROR, 0);        /* memcached: wrong token count */
    if (!mc_key_valid(buf, &t[0]) || !memcache__tok_u64(buf, &t[1], UINT32_MAX, &v) ||
        !mc_tok_i32(buf, &t[2]) || body == 0 ||
        (need == 5 && !memcache__tok_u64(buf, &t[4], UINT64_MAX, &v)))
        return mc_refuse(req, S_BAD_FORMAT, 0);
    if (bytes > mc_item_max(p))
        return mc_refuse(req, S_TOO_LARGE, body);
    /* Like memcached, a last token other than "noreply" is ignored. */
    if (n == need + 1 && TOK_IS(buf, &t[need], "noreply"))
        mc_cut_noreply(req, &t[need - 1], &t[need]);
    mc_single(p, req, &t[0], PROTO_RF_WRITE, body);
}

static void mc_req_delete(struct proto_parser *p, const struct mc_line *l, struct proto_req *req)
{
    const char *buf = l->buf;
    struct mc_tok t[4];
    uint32_t n = memcache__tokens(buf, l->pos, l->end, t, 3);

    if (n == 0 || n > 3)
        return mc_refuse(req, S_ERROR, 0);
    if (!mc_key_valid(buf, &t[0]))
        return mc_refuse(req, S_BAD_FORMAT, 0);
    /* memcached tolerates a legacy hold time of 0: delete <key> [0] [noreply]. */
    bool ok = n == 1 ||
              (n == 2 && (TOK_IS(buf, &t[1], "0") || TOK_IS(buf, &t[1], "noreply"))) ||
              (n == 3 && TOK_IS(buf, &t[1], "0") && TOK_IS(buf, &t[2], "noreply"));
    if (!ok)
        return mc_refuse(req, S_BAD_DELETE, 0);
    /* n >= 2: "delete noreply" deletes the key "noreply". */
    if (n >= 2 && TOK_IS(buf, &t[n - 1], "noreply"))
        mc_cut_noreply(req, &t[n - 2], &t[n - 1]);
    mc_single(p, req, &t[0], PROTO_RF_WRITE, 0);
}

/* incr/decr <key> <delta> [noreply] and touch <key> <exptime> [noreply]. */
static void mc_req_key_arg(struct proto_parser *p, const struct mc_line *l,
                           struct proto_req *req)
{
    const char *buf = l->buf;
    struct mc_tok t[4];
    uint32_t n = memcache__tokens(buf, l->pos, l->end, t, 3);
    uint64_t v;

    if (n < 2 || n > 3)
        return mc_refuse(req, S_ERROR, 0);
    if (!mc_key_valid(buf, &t[0]))
        return mc_refuse(req, S_BAD_FORMAT, 0);
    if (memcache__cmds[l->cmd].syntax == MC_SYN_ARITH) {
        if (!memcache__tok_u64(buf, &t[1], UINT64_MAX, &v))
            return mc_refuse(req, S_BAD_DELTA, 0);
    } else if (!mc_tok_i32(buf, &t[1])) {
        return mc_refuse(req, S_BAD_EXPTIME, 0);
    }
    if (n == 3 && TOK_IS(buf, &t[2], "noreply"))
        mc_cut_noreply(req, &t[1], &t[2]);
    mc_single(p, req, &t[0], PROTO_RF_WRITE, 0);
}

/* mg/md/ma <key> <flag>* and ms <key> <datalen> <flag>*. The proxy checks
 * what memcached would refuse without swallowing an ms data block (too many
 * tokens) and what it must understand itself (q, b); other flags are the
 * server's business. */
static void mc_req_meta(struct proto_parser *p, const struct mc_line *l, struct proto_req *req)
{
    const char *buf = l->buf;
    uint32_t pos = l->pos;
    bool is_set = memcache__cmds[l->cmd].syntax == MC_SYN_META_SET;
    struct mc_tok key, t, prev;
    uint64_t bytes = 0, body = 0;
    uint32_t ntok = 2;             /* command and key */
    uint16_t flags = 0;
    char scratch[MEMCACHE_KEY_MAX];

    if (!memcache__next(buf, &pos, l->end, &key))
        return mc_refuse(req, S_ERROR, 0);
    prev = key;
    if (is_set) {
        if (!memcache__next(buf, &pos, l->end, &t) || !mc_tok_bytes(buf, &t, &bytes))
            return mc_refuse(req, S_BAD_FORMAT, 0);
        body = bytes + 2;
        prev = t;
        ntok++;
    }
    if (!mc_key_valid(buf, &key))
        return mc_refuse(req, S_BAD_FORMAT, body);
    while (memcache__next(buf, &pos, l->end, &t)) {
        if (++ntok > MEMCACHE_META_TOKENS_MAX)
            return mc_refuse(req, S_FLAGS_TOO_LONG, body);
        char f = buf[t.off];
        if (f == 'q') {
            if (flags & PROTO_RF_QUIET)
                return mc_refuse(req, S_DUP_FLAG, body);
            flags |= PROTO_RF_QUIET;
            req->u.mc.cut_off = prev.off + prev.len;
            req->u.mc.cut_len = t.off + t.len - req->u.mc.cut_off;
        } else if (f == 'b') {
            flags |= PROTO_RF_KEYB64 | PROTO_RF_KEYBYTES;
        }
        prev = t;
    }
    if ((flags & PROTO_RF_KEYB64) &&
        memcache_key_decode(buf + key.off, key.len, scratch, sizeof(scratch)) <= 0)
        return mc_refuse(req, S_BAD_B64, body);
    if (is_set && bytes > mc_item_max(p))
        return mc_refuse(req, S_TOO_LARGE, body);
    req->flags |= flags;
    mc_single(p, req, &key, memcache__cmds[l->cmd].rflags, body);
}

static void mc_req_local(struct proto_req *req, uint16_t rflags)
{
    req->kind = PROTO_REQ_LOCAL;
    req->flags |= rflags;
}

static void mc_req_verbosity(const struct mc_line *l, struct proto_req *req)
{
    struct mc_tok t[3];
    uint32_t n = memcache__tokens(l->buf, l->pos, l->end, t, 2);
    uint64_t v;

    if (n == 0 || n > 2)
        return mc_refuse(req, S_ERROR, 0);
    if (TOK_IS(l->buf, &t[n - 1], "noreply")) {
        req->flags |= PROTO_RF_NOREPLY;
        n--;
    }
    if (n == 1 && !memcache__tok_u64(l->buf, &t[0], UINT32_MAX, &v))
        return mc_refuse(req, S_BAD_FORMAT, 0);
    mc_req_local(req, 0);
}

static void mc_req_flush(struct proto_parser *p, const struct mc_line *l, struct proto_req *req)
{
    const char *buf = l->buf;
    struct mc_tok t[3];
    uint32_t n = memcache__tokens(buf, l->pos, l->end, t, 2);

    if (n > 2)
        return mc_refuse(req, S_ERROR, 0);
    bool noreply = n > 0 && TOK_IS(buf, &t[n - 1], "noreply");
    /* The delay is the first token unless that is the noreply; like
     * memcached, a second token other than noreply is ignored. */
    if (n > 0 && !(n == 1 && noreply) && !mc_tok_i32(buf, &t[0]))
        return mc_refuse(req, S_BAD_EXPTIME, 0);
    if (!(p->flags & PROTO_PF_ALLOW_FLUSH))
        return mc_refuse(req, S_FLUSH_REFUSED, 0);
    if (noreply)
        mc_cut_noreply(req, n == 2 ? &t[0] : &l->cmdtok, &t[n - 1]);
    req->kind = PROTO_REQ_BROADCAST;
    req->flags |= PROTO_RF_WRITE;
}

/*
 * `stats` alone is sent to every server and answered from their numbers summed and the
 * proxy's own (memcache_local.c). The per-server statistics are
 * sent to every server and merged with the server named on each line (memcache_local.c):
 * items, slabs, settings, sizes, conns, and cachedump (whose ITEM lines memcdump reads).
 * reset and detail change the servers' state and are refused; any other argument is
 * ERROR, as memcached answers an unknown stats argument.
 */
static void mc_req_stats(const struct mc_line *l, struct proto_req *req)
{
    static const char *const broadcast[] = { "items", "slabs", "settings", "sizes", "conns",
                                             "cachedump" };
    struct mc_tok t;
    uint32_t at = l->pos;

    if (!memcache__next(l->buf, &at, l->end, &t)) {
        req->kind = PROTO_REQ_BROADCAST;
        return;
    }
    for (size_t i = 0; i < sizeof(broadcast) / sizeof(broadcast[0]); i++) {
        if (mc_tok_is(l->buf, &t, broadcast[i], strlen(broadcast[i]))) {
            req->kind = PROTO_REQ_BROADCAST;   /* the servers check the arguments */
            return;
        }
    }
    if (TOK_IS(l->buf, &t, "reset") || TOK_IS(l->buf, &t, "detail"))
        return mc_refuse(req, S_STATS_REFUSED, 0);
    mc_refuse(req, S_ERROR, 0);
}

/* Find the command token's table entry, MEMCACHE_CMD_NONE if unknown. */
static uint16_t mc_lookup(const char *s, uint32_t n)
{
    for (uint16_t c = 1; c < MEMCACHE_CMD_COUNT; c++)
        if (memcache__cmds[c].len == n && memcache__cmds[c].name[0] == s[0] &&
            memcmp(memcache__cmds[c].name, s, n) == 0)
            return c;
    return MEMCACHE_CMD_NONE;
}

/*
 * Whether an unterminated line longer than MEMCACHE_LINE_MAX may grow to
 * MEMCACHE_RETRIEVAL_LINE_MAX: memcached 1.6 reads on past 2048 bytes only
 * for a line that starts, after at most 100 spaces, with "get " or "gets "
 * (try_read_command_ascii); any other line it closes the connection on
 * when it spans reads, gat and gats included (measured), so those keep the
 * short bound and the proxy never forwards one memcached may refuse.
 */
static bool mc_is_long_get(const char *buf, size_t len)
{
    size_t i = 0;
    while (i < len && i <= 100 && buf[i] == ' ')
        i++;
    if (i > 100 || len - i < 5)
        return false;
    return memcmp(buf + i, "get ", 4) == 0 || memcmp(buf + i, "gets ", 5) == 0;
}

/*
 * Find the end of the line starting at buf. Returns the index of its '\n',
 * -1 if it is incomplete (p->u.mc.scan remembers how far was searched), -2
 * if it is longer than max.
 */
static long mc_find_eol(struct proto_parser *p, const char *buf, size_t len, size_t max)
{
    size_t from = p->u.mc.scan <= len ? p->u.mc.scan : 0;
    size_t to = len < max ? len : max;
    if (from < to) {
        const char *nl = memchr(buf + from, '\n', to - from);
        if (nl != NULL)
            return nl - buf;
    }
    if (len >= max)
        return -2;
    p->u.mc.scan = (uint32_t)len;
    return -1;
}

/* Whether every key of req lies within the line's first end bytes: the core
 * hashes, forwards and compares keys by these offsets into the client's buffer.
 * (Only RL_ASSERT calls it: a release build does not compile the call.) */
static inline bool mc_keys_within(const struct proto_req *req, uint32_t end)
{
    for (uint32_t i = 0; i < req->nkeys; i++)
        if ((uint64_t)req->keys[i].off + req->keys[i].len > end)
            return false;
    return true;
}

/* The first byte of a memcached binary protocol request. */
#define MC_BINARY_MAGIC 0x80

int memcache__parse_req(struct proto_parser *p, const char *buf, size_t len,
                        struct proto_req *req)
{
    memset(req, 0, sizeof(*req));
    req->keys = p->keys;

    if (len > 0 && (unsigned char)buf[0] == MC_BINARY_MAGIC) {
        /* A binary request cannot be answered in text, nor its end found:
         * close at once, as nutcracker does, instead of waiting for a '\n'. */
        req->kind = PROTO_REQ_ERROR;
        req->flags = PROTO_RF_CLOSE;
        req->why = "memcached binary protocol request (not supported)";
        return -EPROTONOSUPPORT;
    }
    long eol = mc_find_eol(p, buf, len, MEMCACHE_LINE_MAX);
    if (eol == -2 && mc_is_long_get(buf, len))
        eol = mc_find_eol(p, buf, len, MEMCACHE_RETRIEVAL_LINE_MAX);
    if (eol == -1)
        return 0;
    p->u.mc.scan = 0;
    if (eol == -2) {
        mc_refuse(req, S_LINE_TOO_LONG, 0);
        req->flags = PROTO_RF_CLOSE;
        return -EMSGSIZE;
    }

    struct mc_line l = { .buf = buf, .end = (uint32_t)eol };
    if (l.end > 0 && buf[l.end - 1] == '\r')
        l.end--;
    req->hdr_len = (uint32_t)eol + 1;
    /* memcached reads the line as a C string: it ends at the first NUL. */
    const char *nul = memchr(buf, '\0', l.end);
    if (nul != NULL) {
        l.end = (uint32_t)(nul - buf);
        req->u.mc.nul_cut = 1;
        req->u.mc.line_end = l.end;
    }

    struct mc_tok t;
    uint32_t pos = 0;
    if (!memcache__next(buf, &pos, l.end, &t)) {
        mc_refuse(req, S_ERROR, 0);
        return (int)req->hdr_len;
    }
    l.pos = pos;
    l.cmdtok = t;
    l.cmd = mc_lookup(buf + t.off, t.len);
    req->cmd = l.cmd;
    if (l.cmd == MEMCACHE_CMD_NONE) {
        mc_refuse(req, S_ERROR, 0);
        return (int)req->hdr_len;
    }

    switch (memcache__cmds[l.cmd].syntax) {
    case MC_SYN_GET:
    case MC_SYN_GAT:
        mc_req_get(p, &l, req);
        break;
    case MC_SYN_STORE:
    case MC_SYN_CAS:
        mc_req_store(p, &l, req);
        break;
    case MC_SYN_DELETE:
        mc_req_delete(p, &l, req);
        break;
    case MC_SYN_ARITH:
    case MC_SYN_TOUCH:
        mc_req_key_arg(p, &l, req);
        break;
    case MC_SYN_META:
    case MC_SYN_META_SET:
        mc_req_meta(p, &l, req);
        break;
    case MC_SYN_ME:
        mc_refuse(req, S_ME_REFUSED, 0);
        break;
    case MC_SYN_VERBOSITY:
        mc_req_verbosity(&l, req);
        break;
    case MC_SYN_FLUSH:
        mc_req_flush(p, &l, req);
        break;
    case MC_SYN_STATS:
        mc_req_stats(&l, req);
        break;
    case MC_SYN_VERSION:
        /* every server's, the lowest answered (memcache_local.c) */
        req->kind = PROTO_REQ_BROADCAST;
        break;
    case MC_SYN_MN:
    case MC_SYN_QUIT:
        mc_req_local(req, memcache__cmds[l.cmd].rflags);
        break;
    }
    /* What is consumed is this line, and the keys are in it. */
    RL_ASSERT(req->hdr_len <= len && mc_keys_within(req, l.end));
    return (int)req->hdr_len;
}

