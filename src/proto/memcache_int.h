/* Internals the memcached protocol's files share (memcache_request.c, memcache_reply.c, memcache.c, memcache_local.c): the command table, tokens, the parsers and merge. */
#ifndef RL_PROTO_MEMCACHE_INT_H
#define RL_PROTO_MEMCACHE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"
#include "lib/util.h"
#include "proto/memcache.h"
#include "proto/proto.h"

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

/* The command table (memcache_request.c), indexed by enum memcache_cmd. */
extern const struct mc_cmd_def memcache__cmds[MEMCACHE_CMD_COUNT];

/* A token of a line: buf[off, off + len). */
struct mc_tok {
    uint32_t off;
    uint32_t len;
};

/* Tokens as memcached reads them, inline: every request and reply line is cut here.
 * Next space-separated token of buf[*pos..end) (memcached separates on ' '
 * only: tabs and other control bytes stay inside tokens). Returns false at
 * the end of the line. */
static inline bool memcache__next(const char *buf, uint32_t *pos, uint32_t end, struct mc_tok *t)
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
static inline uint32_t memcache__tokens(const char *buf, uint32_t pos, uint32_t end,
                                        struct mc_tok *t, uint32_t max)
{
    uint32_t n = 0;
    struct mc_tok scratch;
    while (memcache__next(buf, &pos, end, n < max ? &t[n] : &scratch)) {
        if (n == max)
            return max + 1;
        n++;
    }
    return n;
}

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

/* An unsigned number of at most max (inline: every VALUE line reads two). */
static inline bool memcache__tok_u64(const char *buf, const struct mc_tok *t, uint64_t max,
                                     uint64_t *out)
{
    uint64_t v;
    int neg;
    if (util_parse_dec(buf + t->off, t->len, MC_DEC, &v, &neg) < 0 || (neg && v != 0) ||
        v > max)
        return false;
    *out = v;
    return true;
}

/* proto_ops.parse_req (memcache_request.c). */
int memcache__parse_req(struct proto_parser *p, const char *buf, size_t len,
                        struct proto_req *req);

/* proto_ops.parse_rsp, .forward, .frag_write and .merge (memcache_reply.c). */
int memcache__parse_rsp(struct proto_parser *p, const char *buf, size_t len, uint16_t cmd,
                        uint16_t rflags, struct proto_rsp *rsp);
int memcache__forward(const struct proto_req *req, const char *buf, struct buf *out);
int memcache__frag_write(const struct proto_req *req, const char *buf, const uint32_t *idx,
                         uint32_t n, struct buf *out);
int memcache__merge(uint16_t cmd, const char *reqbuf, const struct proto_key *keys,
                    uint32_t nkeys, const uint32_t *key_frag, struct buf *const *frag,
                    uint32_t nfrag, struct buf *out);

/* users (memcache_users.c): proto_ops.category, perm_name, ns_request, ns_reply, ns_reply_cmd. */
uint32_t memcache__category(uint16_t cmd);
void memcache__perm_name(uint16_t cmd, char *out, size_t len);
int  memcache__ns_request(const struct proto_req *req, const char *buf, const struct proto_ns *ns,
                          struct buf *out, const char **why);
int  memcache__ns_reply(uint16_t cmd, const char *rsp, size_t len, const struct proto_ns *ns,
                        struct buf *out);
int  memcache__ns_reply_cmd(uint16_t cmd);
size_t memcache__perm_error(int what, const char *name, char *out, size_t len);

#endif
