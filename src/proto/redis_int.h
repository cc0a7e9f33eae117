/* Internals the Redis protocol's files share: RESP helpers, the classifier, the parser and merge entry points, SCAN's cursor layout. */
#ifndef RL_PROTO_REDIS_INT_H
#define RL_PROTO_REDIS_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/util.h"
#include "proto/proto.h"
#include "proto/redis.h"

/*
 * SCAN's cursor names a server of the pool and that server's cursor:
 *
 *     pool cursor = server cursor << 24 | (epoch & 0xff) << 16 | server index
 *
 * read as Redis reads a cursor (strtoul: a sign, digits, nothing after).
 * Cursor 0 starts at server 0; a cursor from another epoch of the pool's ring
 * (a reload changed it during the scan) is refused, since its server index
 * may now name another server.
 */
#define SCAN_INDEX_BITS 16
#define SCAN_TAG_SHIFT  16
#define SCAN_CUR_SHIFT  24

/*
 * The usual form of a bulk, array, push or integer line at buf[at..len): 1 to 18 digits,
 * the first not 0, then CRLF ("$100", "*3"), which string2ll reads as the same number.
 * Returns the offset of its '\n' with *n set, or 0 for any other type or form or a line
 * not all here (the caller's memchr and redis__parse_num decide those). Saves both on most
 * header lines.
 */
static inline size_t redis__rsp_count(const char *buf, size_t len, size_t at, int64_t *n)
{
    char t = buf[at];
    if (t != '$' && t != '*' && t != ':' && t != '>')
        return 0;
    size_t i = at + 1, end = len - i < 18 ? len : i + 18;
    if (i >= end || buf[i] < '1' || buf[i] > '9')
        return 0;
    int64_t v = buf[i++] - '0';
    while (i < end && buf[i] >= '0' && buf[i] <= '9')
        v = v * 10 + (buf[i++] - '0');
    if (i + 1 >= len || buf[i] != '\r' || buf[i + 1] != '\n')
        return 0;
    *n = v;
    return i + 1;
}

/* Find the end of the header line starting at pos ("*3\r\n", "$5\r\n"):
 * the offset of its '\r' (Redis reads the byte after it as the '\n'
 * whatever it is, and so does the proxy), 0 if incomplete, -1 if longer
 * than Redis allows, -2 if incomplete with a NUL in it: Redis looks for the
 * '\r' with strchr, which stops at the NUL, and would wait forever. */
static inline int64_t redis__header_line(const char *buf, size_t len, size_t pos)
{
    const char *cr = memchr(buf + pos, '\r', len - pos);
    if (cr == NULL || (size_t)(cr - buf) + 1 >= len) {
        if (memchr(buf + pos, '\0', len - pos) != NULL)
            return -2;
        if (len - pos > REDIS_MAX_INLINE)
            return -1;
        return 0;
    }
    return cr - buf;
}

/* A number as Redis's string2ll reads it, the whole of [s, s+len): see REDIS_DEC. 0 or
 * -1. Inline: every length of every request passes here. */
static inline int redis__parse_num(const char *s, size_t len, int64_t *out)
{
    return util_parse_dec_i64(s, len, REDIS_DEC, out);
}

/* RESP reading and writing (redis_resp.c). */
int redis__rsp_line_ok(char t, const char *num, size_t numlen);
int redis__rsp_scan(const char *buf, size_t len, size_t *pos, uint64_t *pending);
int redis__rsp_line(const char *buf, size_t len, size_t *eol);
int redis__append_bulk(struct buf *out, const char *s, size_t n);

/* Classification by the command table (redis_classify.c). */
void redis__req_classify_all(struct proto_parser *p, const char *buf, uint32_t argc,
                             struct proto_req *req);

/* proto_ops.parse_req (redis_request.c). */
int redis__parse_req(struct proto_parser *p, const char *buf, size_t len,
                     struct proto_req *req);

/* proto_ops.merge and .merge_env (redis_merge.c). */
int redis__merge(uint16_t cmd, const char *reqbuf, const struct proto_key *keys,
                 uint32_t nkeys, const uint32_t *key_frag, struct buf *const *frag,
                 uint32_t nfrag, struct buf *out);
int redis__merge_env(uint16_t cmd, const char *reqbuf, struct buf *const *frag,
                     uint32_t nfrag, const struct proto_env *env, struct buf *out);

/* users (redis_users.c): proto_ops.category, perm_name, ns_request, ns_reply, ns_reply_cmd. */
uint32_t redis__category(uint16_t cmd);
void redis__perm_name(uint16_t cmd, char *out, size_t len);
int  redis__ns_request(const struct proto_req *req, const char *buf, const struct proto_ns *ns,
                       struct buf *out, const char **why);
int  redis__ns_reply(uint16_t cmd, const char *rsp, size_t len, const struct proto_ns *ns,
                     struct buf *out);
int  redis__ns_reply_cmd(uint16_t cmd);
size_t redis__perm_error(int what, const char *name, char *out, size_t len);

#endif
