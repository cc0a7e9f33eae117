/* The memcached protocol's ops table, with the replies the proxy makes for it: errors, misses, warm-up and joined gets. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache.h"
#include "proto/memcache_int.h"
#include "proto/proto.h"
#include "lib/util.h"

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
    buf_produce(out, 13 + n + 2);
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
    if (cmd >= MEMCACHE_CMD_COUNT || !(memcache__cmds[cmd].replies & R_VALUE))
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
    buf_produce(out, k->len + 3);
    return (int)(keep + k->len + 3);
}

/* ---- introspection (src/proxy/introspect.c) */

static uint16_t mc_ncmds(void)
{
    return MEMCACHE_CMD_COUNT;
}

/* The request log's key: the word after the command (every keyed command has its first
 * key there), within the request's first bytes req[0..n). */
static int mc_req_key(uint16_t cmd, const char *req, size_t n, const char **key, size_t *len,
                      uint64_t *full)
{
    size_t i = 0;

    if (cmd == MEMCACHE_CMD_NONE || cmd >= MEMCACHE_CMD_COUNT || cmd >= MEMCACHE_CMD_MN)
        return 0;
    while (i < n && req[i] != ' ' && req[i] != '\r' && req[i] != '\n')
        i++;
    while (i < n && req[i] == ' ')
        i++;
    size_t s = i;
    while (i < n && req[i] != ' ' && req[i] != '\r' && req[i] != '\n')
        i++;
    if (i == s)
        return 0;
    *key = req + s;
    *len = i - s;
    *full = i - s;
    return 1;
}

const struct proto_ops proto_memcache_ops = {
    .name = "memcache",
    .parse_req = memcache__parse_req,
    .parse_rsp = memcache__parse_rsp,
    .forward = memcache__forward,
    .frag_write = memcache__frag_write,
    .merge = memcache__merge,
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
    .category = memcache__category,
    .perm_name = memcache__perm_name,
    .ns_request = memcache__ns_request,
    .ns_reply = memcache__ns_reply,
    .ns_reply_cmd = memcache__ns_reply_cmd,
    .perm_error = memcache__perm_error,
    .ncmds = mc_ncmds,
    .cmd_name = memcache_cmd_name,
    .req_key = mc_req_key,
};