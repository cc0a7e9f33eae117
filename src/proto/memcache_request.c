/* The memcached text and meta protocol: resumable request/reply parsers, multi-get fragmenting and merging. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache.h"
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

/* How a command's line is laid out (selects the parse handler). */
enum mc_syntax {
    MC_SYN_GET,        /* <cmd> <key>* */
    MC_SYN_GAT,        /* <cmd> <exptime> <key>* */
    MC_SYN_STORE,      /* <cmd> <key> <flags> <exptime> <bytes> [noreply] */
    MC_SYN_CAS,        /* cas <key> <flags> <exptime> <bytes> <cas> [noreply] */
    MC_SYN_DELETE,     /* delete <key> [0] [noreply] */
    MC_SYN_ARITH,      /* incr|decr <key> <u64> [noreply] */
    MC_SYN_TOUCH,      /* touch <key> <exptime> [noreply] */
    MC_SYN_META,       /* mg|md|ma <key> <flag>* */
    MC_SYN_META_SET,   /* ms <key> <datalen> <flag>* */
    MC_SYN_MN,
    MC_SYN_ME,
    MC_SYN_VERSION,
    MC_SYN_VERBOSITY,
    MC_SYN_QUIT,
    MC_SYN_STATS,
    MC_SYN_FLUSH
};

/* Reply lines, as bits: which a command accepts, which quiet mode hides. */
enum {
    R_VALUE = 1u << 0, R_END = 1u << 1, R_STORED = 1u << 2, R_NOT_STORED = 1u << 3,
    R_EXISTS = 1u << 4, R_NOT_FOUND = 1u << 5, R_DELETED = 1u << 6, R_TOUCHED = 1u << 7,
    R_OK = 1u << 8, R_NUMBER = 1u << 9, R_VERSION = 1u << 10,
    R_VA = 1u << 11, R_HD = 1u << 12, R_EN = 1u << 13, R_NF = 1u << 14, R_NS = 1u << 15,
    R_EX = 1u << 16, R_MN = 1u << 17
};

struct mc_cmd_def {
    const char *name;
    uint8_t     len;
    uint8_t     syntax;      /* enum mc_syntax */
    uint16_t    rflags;      /* PROTO_RF_* every valid request of it carries */
    uint32_t    replies;     /* R_* a server may answer (errors always allowed) */
    uint32_t    quiet_hide;  /* R_* hidden from the client under the meta q flag */
};

#define STORE_REPLIES (R_STORED | R_NOT_STORED | R_EXISTS | R_NOT_FOUND)

/* Indexed by enum memcache_cmd. Quiet semantics checked against memcached
 * 1.6.18: mg hides only EN (a hit's HD is still sent); ms, md and ma hide
 * HD. memcached also hides an ma's VA when the q flag is set and the item
 * existed, but shows it when N created the item; a reply line cannot tell
 * the two apart, so VA is always shown (the client asked for the value). */
static const struct mc_cmd_def mc_cmds[MEMCACHE_CMD_COUNT] = {
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
    return mc_cmds[cmd].name;
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

struct mc_tok {
    uint32_t off;
    uint32_t len;
};

/* Next space-separated token of buf[*pos..end) (memcached separates on ' '
 * only: tabs and other control bytes stay inside tokens). Returns false at
 * the end of the line. */
static bool mc_next(const char *buf, uint32_t *pos, uint32_t end, struct mc_tok *t)
{
    uint32_t i = *pos;
    while (i < end && buf[i] == ' ')
        i++;
    if (i == end) {
        *pos = i;
        return false;
    }
    t->off = i;
    while (i < end && buf[i] != ' ')
        i++;
    t->len = i - t->off;
    *pos = i;
    return true;
}

/* Up to max tokens into t; returns how many there were, max + 1 if more. */
static uint32_t mc_tokens(const char *buf, uint32_t pos, uint32_t end, struct mc_tok *t,
                          uint32_t max)
{
    uint32_t n = 0;
    struct mc_tok scratch;
    while (mc_next(buf, &pos, end, n < max ? &t[n] : &scratch)) {
        if (n == max)
            return max + 1;
        n++;
    }
    return n;
}

static bool mc_tok_is(const char *buf, const struct mc_tok *t, const char *s, size_t n)
{
    return t->len == n && memcmp(buf + t->off, s, n) == 0;
}

#define TOK_IS(buf, t, lit) mc_tok_is((buf), (t), lit, sizeof(lit) - 1)

/*
 * Numbers, as memcached's safe_strtoul/safe_strtol/safe_strtoull read them
 * (strtoul and strtol: an optional sign, then decimal digits, leading zeros
 * allowed), narrowed to what they read without surprise: the proxy refuses
 * a value memcached would silently truncate to 32 bits (flags 4294967296 is
 * stored as 0, a length of 99999999999 becomes 1215752191), a trailing
 * blank other than a space (memcached stops at it), and an unsigned number
 * with a '-' unless it is zero ("-0": strtoull reads 0). Refusing is safe;
 * accepting must give memcached's value.
 */
#define MC_DEC (UTIL_DEC_PLUS | UTIL_DEC_MINUS)

/* An unsigned number of at most max. */
static bool mc_tok_u64(const char *buf, const struct mc_tok *t, uint64_t max, uint64_t *out)
{
    uint64_t v;
    int neg;
    if (util_parse_dec(buf + t->off, t->len, MC_DEC, &v, &neg) < 0 || (neg && v != 0) ||
        v > max)
        return false;
    *out = v;
    return true;
}

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
    return mc_tok_u64(buf, t, (uint64_t)INT32_MAX - 2, out);
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

    if (mc_cmds[l->cmd].syntax == MC_SYN_GAT) {
        if (!mc_next(buf, &pos, l->end, &t))
            return mc_refuse(req, S_ERROR, 0);
        if (!mc_tok_i32(buf, &t))
            return mc_refuse(req, S_BAD_EXPTIME, 0);
        req->u.mc.exp_off = t.off;
        req->u.mc.exp_len = t.len;
    }
    uint32_t n = 0;
    while (mc_next(buf, &pos, l->end, &t)) {
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
        return mc_refuse(req, mc_cmds[l->cmd].syntax == MC_SYN_GAT ? "END\r\n" : S_ERROR, 0);
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
    uint32_t need = mc_cmds[l->cmd].syntax == MC_SYN_CAS ? 5 : 4;
    uint32_t n = mc_tokens(buf, l->pos, l->end, t, 7);
    uint64_t bytes = 0, v;
    uint64_t body = 0;

    if (n >= 4 && mc_tok_bytes(buf, &t[3], &bytes))
        body = bytes + 2;
    if (n < need || n > need + 1)
        return mc_refuse(req, S_ERROR, 0);        /* memcached: wrong token count */
    if (!mc_key_valid(buf, &t[0]) || !mc_tok_u64(buf, &t[1], UINT32_MAX, &v) ||
        !mc_tok_i32(buf, &t[2]) || body == 0 ||
        (need == 5 && !mc_tok_u64(buf, &t[4], UINT64_MAX, &v)))
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
    uint32_t n = mc_tokens(buf, l->pos, l->end, t, 3);

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
    uint32_t n = mc_tokens(buf, l->pos, l->end, t, 3);
    uint64_t v;

    if (n < 2 || n > 3)
        return mc_refuse(req, S_ERROR, 0);
    if (!mc_key_valid(buf, &t[0]))
        return mc_refuse(req, S_BAD_FORMAT, 0);
    if (mc_cmds[l->cmd].syntax == MC_SYN_ARITH) {
        if (!mc_tok_u64(buf, &t[1], UINT64_MAX, &v))
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
    bool is_set = mc_cmds[l->cmd].syntax == MC_SYN_META_SET;
    struct mc_tok key, t, prev;
    uint64_t bytes = 0, body = 0;
    uint32_t ntok = 2;             /* command and key */
    uint16_t flags = 0;
    char scratch[MEMCACHE_KEY_MAX];

    if (!mc_next(buf, &pos, l->end, &key))
        return mc_refuse(req, S_ERROR, 0);
    prev = key;
    if (is_set) {
        if (!mc_next(buf, &pos, l->end, &t) || !mc_tok_bytes(buf, &t, &bytes))
            return mc_refuse(req, S_BAD_FORMAT, 0);
        body = bytes + 2;
        prev = t;
        ntok++;
    }
    if (!mc_key_valid(buf, &key))
        return mc_refuse(req, S_BAD_FORMAT, body);
    while (mc_next(buf, &pos, l->end, &t)) {
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
    mc_single(p, req, &key, mc_cmds[l->cmd].rflags, body);
}

static void mc_req_local(struct proto_req *req, uint16_t rflags)
{
    req->kind = PROTO_REQ_LOCAL;
    req->flags |= rflags;
}

static void mc_req_verbosity(const struct mc_line *l, struct proto_req *req)
{
    struct mc_tok t[3];
    uint32_t n = mc_tokens(l->buf, l->pos, l->end, t, 2);
    uint64_t v;

    if (n == 0 || n > 2)
        return mc_refuse(req, S_ERROR, 0);
    if (TOK_IS(l->buf, &t[n - 1], "noreply")) {
        req->flags |= PROTO_RF_NOREPLY;
        n--;
    }
    if (n == 1 && !mc_tok_u64(l->buf, &t[0], UINT32_MAX, &v))
        return mc_refuse(req, S_BAD_FORMAT, 0);
    mc_req_local(req, 0);
}

static void mc_req_flush(struct proto_parser *p, const struct mc_line *l, struct proto_req *req)
{
    const char *buf = l->buf;
    struct mc_tok t[3];
    uint32_t n = mc_tokens(buf, l->pos, l->end, t, 2);

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
 * `stats` alone is the proxy's own (LOCAL, memcache_local.c). The per-server statistics are
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

    if (!mc_next(l->buf, &at, l->end, &t)) {
        mc_req_local(req, mc_cmds[l->cmd].rflags);
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
        if (mc_cmds[c].len == n && memcmp(mc_cmds[c].name, s, n) == 0)
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

/* The first byte of a memcached binary protocol request. */
#define MC_BINARY_MAGIC 0x80

static int mc_parse_req(struct proto_parser *p, const char *buf, size_t len,
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
    if (!mc_next(buf, &pos, l.end, &t)) {
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

    switch (mc_cmds[l.cmd].syntax) {
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
        mc_req_local(req, mc_cmds[l.cmd].rflags);
        break;
    }
    return (int)req->hdr_len;
}

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
    return LINE_IS(s, n, "ERROR") || LINE_STARTS(s, n, "ERROR ") ||
           LINE_IS(s, n, "CLIENT_ERROR") || LINE_STARTS(s, n, "CLIENT_ERROR ") ||
           LINE_IS(s, n, "SERVER_ERROR") || LINE_STARTS(s, n, "SERVER_ERROR ");
}

/* "VALUE <key> <flags> <bytes>[ <cas>]": fills the key and the byte count. */
static bool mc_value_line(const char *s, uint32_t n, struct proto_key *key, uint64_t *bytes)
{
    struct mc_tok t[5];
    uint64_t v;
    uint32_t nt = mc_tokens(s, 6, n, t, 4);   /* after "VALUE " */
    /* A server's key needs no CR test: the proxy asked for it (and compares it
     * byte for byte with the key it asked for), and the line is already cut. */
    if (nt < 3 || nt > 4 || t[0].len == 0 || t[0].len > MEMCACHE_KEY_MAX ||
        !mc_tok_u64(s, &t[1], UINT32_MAX, &v) || !mc_tok_u64(s, &t[2], UINT32_MAX, bytes) ||
        (nt == 4 && !mc_tok_u64(s, &t[3], UINT64_MAX, &v)))
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
    const struct mc_cmd_def *d = &mc_cmds[cmd];
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
        if (!mc_next(buf, &pos, n, &t) || !mc_tok_u64(buf, &t, UINT32_MAX, &v))
            return -EPROTO;
        rsp->body_len = v + 2;
    }
    if ((rflags & PROTO_RF_QUIET) && (d->quiet_hide & kind))
        rsp->flags |= PROTO_SF_SUPPRESS;
    return (int)rsp->hdr_len;
}

static int mc_parse_rsp(struct proto_parser *p, const char *buf, size_t len, uint16_t cmd,
                        uint16_t rflags, struct proto_rsp *rsp)
{
    return mc_rsp_unit(buf, len, cmd, rflags, rsp, &p->u.mc.scan);
}

/* ------------------------------------------------------------------ forwarding */

/*
 * The line as memcached is to read it: the line less the recorded cut; a
 * line cut at a NUL ends at the NUL with "\r\n" (the bytes after it, which
 * memcached would ignore, are not sent). The common case is one copy.
 * 0 or -ENOMEM (out unchanged).
 */
static int mc_forward(const struct proto_req *req, const char *buf, struct buf *out)
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
    out->wpos += n;
    return 0;
}

static int mc_frag_write(const struct proto_req *req, const char *buf, const uint32_t *idx,
                         uint32_t n, struct buf *out)
{
    const struct mc_cmd_def *d = &mc_cmds[req->cmd < MEMCACHE_CMD_COUNT ? req->cmd : 0];
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
    out->wpos += need;
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
static int mc_merge(uint16_t cmd, const char *reqbuf, const struct proto_key *keys,
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
    if (cmd >= MEMCACHE_CMD_COUNT || !(mc_cmds[cmd].replies & R_VALUE))
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

/* ------------------------------------------------------------------ errors */

static int mc_error_reply(enum proto_err code, const char *reason, struct buf *out)
{
    const char *fixed = NULL;
    switch (code) {
    case PROTO_ERR_TIMEOUT:
        fixed = "timeout";
        break;
    case PROTO_ERR_NOMEM:
        fixed = "out of memory";
        break;
    case PROTO_ERR_CROSSSLOT:
    case PROTO_ERR_CROSSSLOT_SLOT:
        if (reason == NULL)
            fixed = "keys map to different servers";
        break;
    case PROTO_ERR_DOWN:
        if (reason == NULL)
            fixed = "no server available";
        break;
    case PROTO_ERR_SERVER:
    case PROTO_ERR_ABORTED:         /* memcached has no sessions: never asked */
    case PROTO_ERR_LIMIT:
    case PROTO_ERR_TARGET:
        if (reason == NULL)
            fixed = "backend error";
        break;
    }
    const char *r = fixed ? fixed : reason;
    size_t n = strnlen(r, 512);
    if (buf_reserve(out, sizeof("SERVER_ERROR \r\n") - 1 + n) != 0)
        return -ENOMEM;
    char *w = buf_wptr(out);
    memcpy(w, "SERVER_ERROR ", 13);
    w += 13;
    /* A reason must never end the line early or smuggle a second reply. */
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)r[i];
        *w++ = (ch < 0x20 || ch == 0x7f) ? ' ' : (char)ch;
    }
    *w++ = '\r';
    *w++ = '\n';
    out->wpos += 13 + n + 2;
    return 0;
}

/* on_down: miss. Reads miss (END / EN), writes are not stored, deletes and
 * arithmetic find nothing. */
static int mc_miss_reply(uint16_t cmd, uint16_t rflags, struct buf *out)
{
    (void)rflags;
    switch (cmd) {
    case MEMCACHE_CMD_GET:
    case MEMCACHE_CMD_GETS:
    case MEMCACHE_CMD_GAT:
    case MEMCACHE_CMD_GATS:
        return buf_append_str(out, "END\r\n");
    case MEMCACHE_CMD_MG:
        return buf_append_str(out, "EN\r\n");
    case MEMCACHE_CMD_MS:
        return buf_append_str(out, "NS\r\n");
    case MEMCACHE_CMD_MD:
    case MEMCACHE_CMD_MA:
        return buf_append_str(out, "NF\r\n");
    case MEMCACHE_CMD_DELETE:
    case MEMCACHE_CMD_INCR:
    case MEMCACHE_CMD_DECR:
    case MEMCACHE_CMD_TOUCH:
        return buf_append_str(out, "NOT_FOUND\r\n");
    default:
        return buf_append_str(out, "NOT_STORED\r\n");
    }
}

/* A fragment of a multi-get in which every key missed. */
static int mc_frag_miss(uint16_t cmd, uint16_t rflags, uint32_t nkeys, struct buf *out)
{
    (void)rflags;
    (void)nkeys;
    if (cmd >= MEMCACHE_CMD_COUNT || !(mc_cmds[cmd].replies & R_VALUE))
        return -1;
    return buf_append_str(out, "END\r\n") < 0 ? -1 : 0;
}

/* A memcached connection keeps no state between requests: nothing to reset. */
static int mc_pin_reset(struct buf *out)
{
    (void)out;
    return 0;
}

/* ------------------------------------------------------------------ keys */

/* proto_ops.key_bytes: a meta command's base64 key is placed by its
 * decoding (as memcached stores it), every other key by its bytes. */
static const char *mc_key_bytes(const struct proto_req *req, const char *buf, uint32_t k,
                                char *dec, size_t *len)
{
    const char *key = buf + req->keys[k].off;
    *len = req->keys[k].len;
    if (req->flags & PROTO_RF_KEYB64) {
        int n = memcache_key_decode(key, *len, dec, PROTO_KEY_DECODED_MAX);
        if (n >= 0) {
            *len = (size_t)n;
            return dec;
        }
    }
    return key;
}

/* ------------------------------------------------------------------ warm-up */

static int mc_warmable(uint16_t cmd)
{
    return cmd == MEMCACHE_CMD_GET || cmd == MEMCACHE_CMD_GETS;
}

/* A meta get of the key for value, flags and remaining TTL (and cas for gets). */
static int mc_warm_fetch(uint16_t cmd, const char *key, size_t len, struct buf *out,
                         uint16_t *fetch_cmd)
{
    int with_cas = cmd == MEMCACHE_CMD_GETS;
    *fetch_cmd = MEMCACHE_CMD_MG;
    if (buf_append_str(out, "mg ") < 0 || buf_append(out, key, len) < 0)
        return -ENOMEM;
    return buf_append_str(out, with_cas ? " v f t c\r\n" : " v f t\r\n");
}

/* Value of a meta return flag (e.g. 'f' in "f30") among the tokens of a VA
 * line, or NULL; *n gets its length. */
static const char *mc_meta_flag(const char *line, size_t len, char flag, size_t *n)
{
    size_t i = 0;
    while (i < len) {
        while (i < len && line[i] == ' ')
            i++;
        size_t s = i;
        while (i < len && line[i] != ' ')
            i++;
        if (i > s && line[s] == flag) {
            *n = i - s - 1;
            return line + s + 1;
        }
    }
    return NULL;
}

/* A VA hit becomes "VALUE key flags len [cas]" ... END for the client and
 * "ms key len F<flags> T<ttl>" for the new owner; anything else is END. */
static int mc_warm_reply(uint16_t cmd, const char *rsp, size_t len, const char *key, size_t klen,
                         struct buf *client, struct buf *copy, uint16_t *copy_cmd)
{
    int with_cas = cmd == MEMCACHE_CMD_GETS;
    *copy_cmd = MEMCACHE_CMD_MS;
    const char *nl = memchr(rsp, '\n', len);
    if (nl == NULL || nl == rsp || nl[-1] != '\r')
        return -1;
    size_t ll = (size_t)(nl - rsp) - 1;
    if (ll >= 2 && memcmp(rsp, "EN", 2) == 0)
        return buf_append_str(client, "END\r\n") < 0 ? -ENOMEM : 0;
    if (ll < 4 || memcmp(rsp, "VA ", 3) != 0)
        return -1;
    uint64_t vlen;
    size_t i = 3, s = 3;
    while (i < ll && rsp[i] != ' ')
        i++;
    if (util_parse_u64(rsp + s, i - s, UINT32_MAX, &vlen) < 0)
        return -1;
    const char *data = nl + 1;
    if ((size_t)(rsp + len - data) < vlen + 2)
        return -1;
    size_t fn = 0, tn = 0, cn = 0;
    const char *f = mc_meta_flag(rsp + i, ll - i, 'f', &fn);
    const char *t = mc_meta_flag(rsp + i, ll - i, 't', &tn);
    const char *c = mc_meta_flag(rsp + i, ll - i, 'c', &cn);
    int64_t ttl = 0;
    if (t != NULL && util_parse_i64(t, tn, &ttl) < 0)
        return -1;
    /* t-1 means no expiry: T0 stores it the same way. */
    if (buf_append_str(client, "VALUE ") < 0 || buf_append(client, key, klen) < 0 ||
        buf_appendf(client, " %.*s %llu", f ? (int)fn : 1, f ? f : "0",
                    (unsigned long long)vlen) < 0 ||
        (with_cas && c != NULL && buf_appendf(client, " %.*s", (int)cn, c) < 0) ||
        buf_append_str(client, "\r\n") < 0 || buf_append(client, data, (size_t)vlen + 2) < 0 ||
        buf_append_str(client, "END\r\n") < 0 ||
        buf_append_str(copy, "ms ") < 0 || buf_append(copy, key, klen) < 0 ||
        buf_appendf(copy, " %llu F%.*s T%lld\r\n", (unsigned long long)vlen,
                    f ? (int)fn : 1, f ? f : "0", ttl > 0 ? (long long)ttl : 0LL) < 0 ||
        buf_append(copy, data, (size_t)vlen + 2) < 0)
        return -ENOMEM;
    return 1;
}

/* ------------------------------------------------------------------ coalescing */

/*
 * Single-key `get`s to one server in one write are joined into one
 * `get k1 k2 ...` line: memcached answers a pipeline of separate gets with
 * one send (and one TCP segment) per get, but a multi-key get with one. Only
 * plain `get` joins (gets, gat and meta commands keep their own lines), and
 * a line stays within MEMCACHE_JOIN_LINE_MAX bytes and MEMCACHE_JOIN_KEYS_MAX
 * keys.
 */
static int mc_joinable(const struct proto_req *req)
{
    return req->cmd == MEMCACHE_CMD_GET && req->kind == PROTO_REQ_SINGLE && req->nkeys == 1 &&
           req->body_len == 0 && req->flags == PROTO_RF_RETRIEVAL;
}

static int mc_join(const struct proto_req *req, const char *buf, struct buf *out,
                   uint32_t open_len)
{
    const struct proto_key *k = &req->keys[0];

    if (open_len < 6 || buf_len(out) < open_len ||
        (size_t)open_len + k->len + 3 > MEMCACHE_JOIN_LINE_MAX)
        return 0;
    const char *line = buf_wptr(out) - open_len;
    if (memcmp(line, "get ", 4) != 0 || line[open_len - 1] != '\n')
        return 0;
    uint32_t keep = open_len - 1;               /* drop "\n", a "\r" and trailing blanks */
    while (keep > 4 && (line[keep - 1] == '\r' || line[keep - 1] == ' '))
        keep--;
    if (buf_reserve(out, k->len + 3) != 0)
        return -ENOMEM;
    out->wpos -= open_len - keep;
    char *w = buf_wptr(out);
    w[0] = ' ';
    memcpy(w + 1, buf + k->off, k->len);
    w[1 + k->len] = '\r';
    w[2 + k->len] = '\n';
    out->wpos += k->len + 3;
    return (int)(keep + k->len + 3);
}

const struct proto_ops proto_memcache_ops = {
    .name = "memcache",
    .parse_req = mc_parse_req,
    .parse_rsp = mc_parse_rsp,
    .forward = mc_forward,
    .frag_write = mc_frag_write,
    .merge = mc_merge,
    .merge_env = memcache__merge_env,
    .local = memcache__local,
    .error_reply = mc_error_reply,
    .server_hello = NULL,       /* memcached needs no hello */
    .key_bytes = mc_key_bytes,
    .probe = "version\r\n",
    .probe_cmd = MEMCACHE_CMD_VERSION,
    .miss_reply = mc_miss_reply,
    .frag_miss = mc_frag_miss,
    .pin_reset = mc_pin_reset,
    .warmable = mc_warmable,
    .warm_fetch = mc_warm_fetch,
    .warm_reply = mc_warm_reply,
    .joinable = mc_joinable,
    .join = mc_join,
    .join_miss = "END\r\n",
    .join_keys_max = MEMCACHE_JOIN_KEYS_MAX,
    .invalidate = memcache__invalidate,
    .flush = "flush_all\r\n",
    .flush_cmd = MEMCACHE_CMD_FLUSH_ALL,
    .ttl_cap = memcache__ttl_cap,
    .collapsible = memcache__collapsible,
    .reply_equal = memcache__reply_equal,
};
