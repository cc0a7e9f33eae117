/* RESP replies read and written: numbers, line types, one element's end, bulk and verbatim strings. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/invariant.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "proto/redis_int.h"
#include "lib/util.h"

/* ---------------------------------------------------------------- RESP */

#define RSP_LINE_MAX  (64u * 1024)   /* +simple / -error / :int / $ / * lines */

/*
 * Replies are RESP2 or RESP3 (a client that said HELLO 3 has server connections that
 * did too): every type Redis 7.0 sends is known, and each reply's end is found in place.
 *
 *   line types    + simple  - error  : integer  _ null  # boolean  , double  ( big number
 *   length types  $ bulk ($-1 null)  ! blob error  = verbatim (a "txt:" prefix in its data)
 *   aggregates    * array (*-1 null)  ~ set  > push  % map (2n elements)
 *                 | attribute: 2n elements annotating the element that follows it
 *
 * Streamed strings and aggregates ($?, *? ...) are in the RESP3 specification but Redis
 * never sends them; like anything else that is not a reply, they close the connection.
 */

/* A line type's payload other than the RESP2 ones the callers read first: "_" empty, "#"
 * one of t f; doubles and big numbers are passed through unread. */
int redis__rsp_line_ok(char t, const char *num, size_t numlen)
{
    switch (t) {
    case ',': case '(':
        return 1;
    case '_':
        return numlen == 0;
    case '#':
        return numlen == 1 && (num[0] == 't' || num[0] == 'f');
    default:
        return 0;
    }
}

/*
 * Skip whole RESP elements from *pos until *pending reaches 0. An aggregate
 * adds its element count to *pending (a map's and an attribute's are pairs;
 * an attribute annotates the element after it and is none itself), so nested
 * aggregates need no stack and a reply claiming 2^31 elements costs nothing
 * until they arrive.
 * Returns 1 when *pending is 0, 0 when more bytes are needed (*pos and
 * *pending describe the elements completed so far), -1 on garbage.
 */
int redis__rsp_scan(const char *buf, size_t len, size_t *pos, uint64_t *pending)
{
    size_t at = *pos;
    uint64_t left = *pending;
    int rc = 1;

    while (left > 0) {
        if (at >= len) {
            rc = 0;
            break;
        }
        int64_t n;
        size_t eol = redis__rsp_count(buf, len, at, &n);     /* the '\n' */
        int counted = eol != 0;                         /* n is the line's number */
        RL_ASSERT(!counted || (eol > at + 1 && eol < len));
        if (!counted) {
            size_t room = len - at < RSP_LINE_MAX ? len - at : RSP_LINE_MAX;
            const char *nl = memchr(buf + at, '\n', room);
            if (nl == NULL) {
                if (room >= RSP_LINE_MAX)
                    return -1;
                rc = 0;
                break;
            }
            eol = (size_t)(nl - buf);
            if (eol < at + 2 || buf[eol - 1] != '\r')
                return -1;
        }
        const char *num = buf + at + 1;
        size_t numlen = eol - 1 - at - 1;
        char t = buf[at];
        switch (t) {
        case '+':
        case '-':
            at = eol + 1;
            break;
        case ':':
            if (!counted && redis__parse_num(num, numlen, &n) < 0)
                return -1;
            at = eol + 1;
            break;
        case '$':
        case '!':
        case '=':
            if ((!counted && redis__parse_num(num, numlen, &n) < 0) || n < (t == '$' ? -1 : 0) ||
                n > (int64_t)REDIS_MAX_BULK)
                return -1;
            if (n >= 0) {
                size_t end = eol + 1 + (size_t)n + 2;
                if (end > len) {
                    rc = 0;
                    goto out;
                }
                if (buf[end - 2] != '\r' || buf[end - 1] != '\n')
                    return -1;
                at = end;
            } else {
                at = eol + 1;
            }
            break;
        case '*':
        case '~':
        case '>':
        case '%':
        case '|':
            if ((!counted && redis__parse_num(num, numlen, &n) < 0) || n < (t == '*' ? -1 : 0) ||
                n > INT32_MAX)
                return -1;
            at = eol + 1;
            if (n > 0)
                left += (t == '%' || t == '|') ? 2 * (uint64_t)n : (uint64_t)n;
            if (t == '|')
                continue;           /* annotates the next element: not one itself */
            break;
        default:
            if (!redis__rsp_line_ok(t, num, numlen))
                return -1;
            at = eol + 1;
            break;
        }
        left--;
    }
out:
    RL_ASSERT(at <= len);               /* where the next call resumes: within the bytes */
    *pos = at;
    *pending = left;
    return rc;
}

int redis__rsp_line(const char *buf, size_t len, size_t *eol)
{
    size_t room = len < RSP_LINE_MAX ? len : RSP_LINE_MAX;
    const char *nl = memchr(buf, '\n', room);
    if (nl == NULL)
        return room >= RSP_LINE_MAX ? -1 : 0;
    *eol = (size_t)(nl - buf);
    if (*eol < 2 || buf[*eol - 1] != '\r')
        return -1;
    return 1;
}

int redis__append_bulk(struct buf *out, const char *s, size_t n)
{
    if (buf_appendf(out, "$%zu\r\n", n) < 0 || buf_append(out, s, n) < 0 ||
        buf_append(out, "\r\n", 2) < 0)
        return -ENOMEM;
    return 0;
}

int redis__text(const char *d, size_t len, const char **text, size_t *tlen)
{
    size_t eol;
    int64_t n;
    if (len == 0 || (d[0] != '$' && d[0] != '=') || redis__rsp_line(d, len, &eol) != 1 ||
        redis__parse_num(d + 1, eol - 2, &n) < 0 || n < 0 || eol + 1 + (size_t)n + 2 > len)
        return -1;
    *text = d + eol + 1;
    *tlen = (size_t)n;
    if (d[0] == '=') {
        if (n < 4)
            return -1;
        *text += 4;             /* "txt:" */
        *tlen -= 4;
    }
    return 0;
}

int redis__append_text(struct buf *out, int verbatim, const char *s, size_t n)
{
    if (!verbatim)
        return redis__append_bulk(out, s, n);
    if (buf_appendf(out, "=%zu\r\ntxt:", n + 4) < 0 || buf_append(out, s, n) < 0 ||
        buf_append(out, "\r\n", 2) < 0)
        return -ENOMEM;
    return 0;
}

int64_t redis__element_end(const char *buf, size_t len, size_t pos)
{
    uint64_t pending = 1;
    if (redis__rsp_scan(buf, len, &pos, &pending) != 1)
        return -1;
    return (int64_t)pos;
}

/* ---------------------------------------------------------------- CLIENT TRACKING pushes */

/* A `<type><integer>\r\n` line at p[*off..n): its integer (*off past the line), or -2 when
 * it is not one. */
static int64_t push_len(const char *p, size_t n, size_t *off, char type)
{
    size_t i = *off, digits = 0;
    int neg = 0;
    int64_t v = 0;

    if (i >= n || p[i] != type)
        return -2;
    i++;
    if (i < n && p[i] == '-') {
        neg = 1;
        i++;
    }
    while (i < n && p[i] >= '0' && p[i] <= '9' && digits < 12) {
        v = v * 10 + (p[i++] - '0');
        digits++;
    }
    if (digits == 0 || i + 1 >= n || p[i] != '\r' || p[i + 1] != '\n')
        return -2;
    *off = i + 2;
    return neg ? -v : v;
}

int redis_invalidation(const char *p, size_t n, size_t *off, uint64_t *count)
{
    *off = 0;
    if (push_len(p, n, off, '>') != 2 || push_len(p, n, off, '$') != 10 || *off + 12 > n ||
        memcmp(p + *off, "invalidate\r\n", 12) != 0)
        return -1;
    *off += 12;
    if (*off + 3 <= n && memcmp(p + *off, "_\r\n", 3) == 0)
        return 1;
    int64_t c = push_len(p, n, off, '*');
    if (c < 0 || (uint64_t)c > n)
        return -1;
    *count = (uint64_t)c;
    return 0;
}

int redis_invalidation_key(const char *p, size_t n, size_t *off, const char **key, size_t *len)
{
    int64_t l = push_len(p, n, off, '$');
    if (l < 0 || (uint64_t)l > n - *off || n - *off - (size_t)l < 2)
        return -1;
    *key = p + *off;
    *len = (size_t)l;
    *off += (size_t)l + 2;
    return 0;
}
