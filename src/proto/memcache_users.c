/* memcached and users: each command's categories, namespaces added to request lines and taken off reply lines (docs/security.md). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "conf/conf.h"
#include "lib/buf.h"
#include "proto/memcache.h"
#include "proto/memcache_int.h"
#include "proto/proto.h"

uint32_t memcache__category(uint16_t cmd)
{
    switch (cmd) {
    case MEMCACHE_CMD_GET: case MEMCACHE_CMD_GETS: case MEMCACHE_CMD_MG:
        return CONF_CAT_READ;
    case MEMCACHE_CMD_GAT: case MEMCACHE_CMD_GATS:
        return CONF_CAT_READ | CONF_CAT_WRITE;      /* reads, and sets the expiry */
    case MEMCACHE_CMD_SET: case MEMCACHE_CMD_ADD: case MEMCACHE_CMD_REPLACE:
    case MEMCACHE_CMD_APPEND: case MEMCACHE_CMD_PREPEND: case MEMCACHE_CMD_CAS:
    case MEMCACHE_CMD_DELETE: case MEMCACHE_CMD_INCR: case MEMCACHE_CMD_DECR:
    case MEMCACHE_CMD_TOUCH: case MEMCACHE_CMD_MS: case MEMCACHE_CMD_MD: case MEMCACHE_CMD_MA:
        return CONF_CAT_WRITE;
    case MEMCACHE_CMD_MN: case MEMCACHE_CMD_VERSION: case MEMCACHE_CMD_QUIT:
        return 0;
    case MEMCACHE_CMD_FLUSH_ALL:
        return CONF_CAT_WRITE | CONF_CAT_DANGEROUS;
    case MEMCACHE_CMD_ME:                           /* a key's internals */
        return CONF_CAT_ADMIN | CONF_CAT_READ;
    case MEMCACHE_CMD_STATS: case MEMCACHE_CMD_VERBOSITY:
    default:
        return CONF_CAT_ADMIN;
    }
}

void memcache__perm_name(uint16_t cmd, char *out, size_t len)
{
    snprintf(out, len, "%s", cmd < MEMCACHE_CMD_COUNT && memcache__cmds[cmd].name != NULL
                             ? memcache__cmds[cmd].name : "unknown");
}

size_t memcache__perm_error(int what, const char *name, char *out, size_t len)
{
    int n;
    if (what == PROTO_PERM_CMD)
        n = snprintf(out, len, "CLIENT_ERROR permission denied: this user may not run '%s'\r\n",
                     name);
    else
        n = snprintf(out, len, "CLIENT_ERROR permission denied: this user may not use this key\r\n");
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

int memcache__ns_request(const struct proto_req *req, const char *buf, const struct proto_ns *ns,
                         struct buf *out, const char **why)
{
    if (req->flags & (PROTO_RF_KEYB64 | PROTO_RF_KEYBYTES)) {
        *why = "CLIENT_ERROR base64 keys (the meta b flag) cannot carry a namespace\r\n";
        return -1;
    }
    if (req->u.mc.nul_cut) {
        *why = "CLIENT_ERROR bad command line format\r\n";
        return -1;
    }
    size_t at = 0;
    for (uint32_t k = 0; k < req->nkeys; k++) {
        size_t off = req->keys[k].off;
        if (off < at || off > req->hdr_len)
            return -1;
        if (buf_append(out, buf + at, off - at) < 0 || buf_append(out, ns->prefix, ns->len) < 0)
            return -ENOMEM;
        at = off;
    }
    if (buf_append(out, buf + at, (size_t)req->hdr_len + (size_t)req->body_len - at) < 0)
        return -ENOMEM;
    return 0;
}

int memcache__ns_reply_cmd(uint16_t cmd)
{
    switch (cmd) {
    case MEMCACHE_CMD_GET: case MEMCACHE_CMD_GETS: case MEMCACHE_CMD_GAT:
    case MEMCACHE_CMD_GATS: case MEMCACHE_CMD_MG: case MEMCACHE_CMD_MS:
    case MEMCACHE_CMD_MD: case MEMCACHE_CMD_MA:
        return 1;
    default:
        return 0;
    }
}

/*
 * VALUE <key> <flags> <bytes> [<cas>] lines lose the prefix of their key; a meta reply's
 * k<key> flag too. The data after a VALUE or VA line is copied as it is.
 */
int memcache__ns_reply(uint16_t cmd, const char *b, size_t len, const struct proto_ns *ns,
                       struct buf *out)
{
    size_t at = 0;

    if (!memcache__ns_reply_cmd(cmd))
        return 0;
    while (at < len) {
        const char *nl = memchr(b + at, '\n', len - at);
        if (nl == NULL)
            return -1;
        size_t eol = (size_t)(nl - b) + 1;
        uint32_t end = (uint32_t)eol - 1;
        if (end > at && b[end - 1] == '\r')
            end--;
        struct mc_tok t;
        uint32_t pos = (uint32_t)at;
        uint64_t data = 0;
        int is_value = 0, is_va = 0;
        if (!memcache__next(b, &pos, end, &t))
            goto copy_line;
        is_value = t.len == 5 && memcmp(b + t.off, "VALUE", 5) == 0;
        is_va = t.len == 2 && memcmp(b + t.off, "VA", 2) == 0;
        int meta = is_va || (t.len == 2 && (memcmp(b + t.off, "HD", 2) == 0 ||
                                            memcmp(b + t.off, "NF", 2) == 0 ||
                                            memcmp(b + t.off, "NS", 2) == 0 ||
                                            memcmp(b + t.off, "EX", 2) == 0));
        if (!is_value && !meta)
            goto copy_line;
        /* rewrite the line token by token */
        if (buf_append(out, b + t.off, t.len) < 0)
            return -ENOMEM;
        uint32_t ti = 0;
        while (memcache__next(b, &pos, end, &t)) {
            const char *s = b + t.off;
            size_t n = t.len;
            ti++;
            if (buf_append(out, " ", 1) < 0)
                return -ENOMEM;
            if (is_value && ti == 1 && n >= ns->len && memcmp(s, ns->prefix, ns->len) == 0) {
                s += ns->len;
                n -= ns->len;
            } else if (meta && !(is_va && ti == 1) && n > ns->len && s[0] == 'k' &&
                       memcmp(s + 1, ns->prefix, ns->len) == 0) {
                if (buf_append(out, "k", 1) < 0)
                    return -ENOMEM;
                s += 1 + ns->len;
                n -= 1 + ns->len;
            }
            if ((is_value && ti == 3) || (is_va && ti == 1)) {
                uint64_t v = 0;
                for (size_t i = 0; i < n; i++) {
                    if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - 9) / 10)
                        return -1;
                    v = v * 10 + (uint64_t)(s[i] - '0');
                }
                data = v + 2;
            }
            if (buf_append(out, s, n) < 0)
                return -ENOMEM;
        }
        if (buf_append(out, b + end, eol - end) < 0)
            return -ENOMEM;
        at = eol;
        if (data > 0) {
            if (data > len - at)
                return -1;
            if (buf_append(out, b + at, (size_t)data) < 0)
                return -ENOMEM;
            at += (size_t)data;
        }
        continue;
copy_line:
        if (buf_append(out, b + at, eol - at) < 0)
            return -ENOMEM;
        at = eol;
    }
    return 1;
}
