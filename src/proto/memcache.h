/* The memcache protocol: command ids shared by its parser, the core and tests. */
#ifndef RL_PROTO_MEMCACHE_H
#define RL_PROTO_MEMCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

/* Command ids (struct proto_req.cmd). MEMCACHE_CMD_NONE marks a request line
 * that named no known command (an ERROR request). */
enum memcache_cmd {
    MEMCACHE_CMD_NONE = 0,
    MEMCACHE_CMD_GET,
    MEMCACHE_CMD_GETS,
    MEMCACHE_CMD_GAT,
    MEMCACHE_CMD_GATS,
    MEMCACHE_CMD_SET,
    MEMCACHE_CMD_ADD,
    MEMCACHE_CMD_REPLACE,
    MEMCACHE_CMD_APPEND,
    MEMCACHE_CMD_PREPEND,
    MEMCACHE_CMD_CAS,
    MEMCACHE_CMD_DELETE,
    MEMCACHE_CMD_INCR,
    MEMCACHE_CMD_DECR,
    MEMCACHE_CMD_TOUCH,
    MEMCACHE_CMD_MG,
    MEMCACHE_CMD_MS,
    MEMCACHE_CMD_MD,
    MEMCACHE_CMD_MA,
    MEMCACHE_CMD_MN,
    MEMCACHE_CMD_ME,
    MEMCACHE_CMD_VERSION,
    MEMCACHE_CMD_VERBOSITY,
    MEMCACHE_CMD_QUIT,
    MEMCACHE_CMD_STATS,
    MEMCACHE_CMD_FLUSH_ALL,
    MEMCACHE_CMD_COUNT
};

#define MEMCACHE_KEY_MAX        250     /* memcached's KEY_MAX_LENGTH */
#define MEMCACHE_LINE_MAX       2048    /* a request line, terminator included */
/* get/gets lines carry many keys (nutcracker passes a 1,500-key get_many):
 * 1 MiB of keys plus the ordinary line allowance, and at most 65,536 keys
 * (the parser's key array: 512 KiB). Fixed rather than tied to
 * item_size_max so that a pool with huge items does not let one client
 * make the proxy buffer megabytes of unterminated line. gat/gats keep
 * MEMCACHE_LINE_MAX: memcached closes the connection on a longer one. */
#define MEMCACHE_RETRIEVAL_LINE_MAX (1024 * 1024 + MEMCACHE_LINE_MAX)
#define MEMCACHE_RETRIEVAL_KEYS_MAX 65536
#define MEMCACHE_RSP_LINE_MAX   8192    /* a server's reply line */
#define MEMCACHE_JOIN_LINE_MAX  2048    /* a get line joined from single-key gets */
#define MEMCACHE_JOIN_KEYS_MAX  32      /* ... and the keys in it */
#define MEMCACHE_META_TOKENS_MAX 19     /* memcached 1.6 refuses meta lines with more tokens */
#define MEMCACHE_ITEM_SIZE_MAX  (1024u * 1024u)  /* default when item_size_max is 0 */

/* Name of a command id ("get"), or NULL. */
const char *memcache_cmd_name(uint16_t cmd);

/*
 * Decode a meta command's base64 key (standard alphabet, padded to a
 * multiple of 4 characters as memcached requires) into out[0..cap). Returns the decoded length, or -1 if the text
 * is not base64 or the result does not fit in cap.
 */
int memcache_key_decode(const char *b64, size_t len, char *out, size_t cap);

/* What the proxy answers itself (memcache_local.c): proto_ops.local and .merge_env. */
int memcache__local(struct proto_client *c, struct proto_parser *p, const struct proto_req *req,
                    const char *buf, const struct proto_env *env, struct buf *out);
int memcache__merge_env(uint16_t cmd, const char *reqbuf, struct buf *const *frag,
                        uint32_t nfrag, const struct proto_env *env, struct buf *out);

/* Membership safety (memcache_safety.c): proto_ops.invalidate, .ttl_cap, .collapsible,
 * .reply_equal. */
/* The content of the line s[0..n) without its "\r\n" or "\n". */
static inline size_t memcache__strip_eol(const char *s, size_t n)
{
    if (n > 0 && s[n - 1] == '\n')
        n--;
    if (n > 0 && s[n - 1] == '\r')
        n--;
    return n;
}

int memcache__invalidate(const char *key, size_t len, struct buf *out, uint16_t *cmd);
int memcache__ttl_cap(uint16_t cmd, struct buf *out, size_t start, uint32_t ttl, int64_t now_s);
int memcache__collapsible(const struct proto_req *req, const char *buf);
int memcache__reply_equal(uint16_t cmd, const char *a, size_t alen, const char *b, size_t blen);


#endif
