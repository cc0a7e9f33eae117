/* struct buf: growth, compaction and formatted appends. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/buf.h"

int buf_reserve(struct buf *b, size_t n)
{
    size_t used = buf_len(b);

    /* Every growth sees the positions in order: a wpos pushed past cap by a
     * write that skipped buf_produce is caught here, not after the next memcpy. */
    RL_ASSERT(b->rpos <= b->wpos && b->wpos <= b->cap && (b->data != NULL || b->cap == 0));
    if (buf_room(b) >= n)
        return 0;
    /* Compact when the unread part plus n fits and the move is cheap enough. */
    if (b->cap - used >= n && b->rpos > 0) {
        memmove(b->data, b->data + b->rpos, used);
        b->rpos = 0;
        b->wpos = used;
        return 0;
    }
    size_t cap = b->cap ? b->cap : BUF_STD_SIZE;
    while (cap - used < n) {
        if (cap > SIZE_MAX / 2)
            return -ENOMEM;
        cap *= 2;
    }
    char *d;
    if (b->rpos == 0 || used == 0) {
        /* Nothing consumed at the front: realloc, which the allocator may do
         * in place for a large buffer (a value arriving in many reads). */
        d = realloc(b->data, cap);
        if (d == NULL)
            return -ENOMEM;
    } else {
        d = malloc(cap);
        if (d == NULL)
            return -ENOMEM;
        memcpy(d, b->data + b->rpos, used);
        free(b->data);
    }
    b->data = d;
    b->rpos = 0;
    b->wpos = used;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    int rc = buf_reserve(b, n);
    if (rc < 0)
        return rc;
    memcpy(b->data + b->wpos, p, n);
    buf_produce(b, n);
    return 0;
}

int buf_append_b64(struct buf *b, const void *src, size_t n)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t need = (n + 2) / 3 * 4;
    int rc = buf_reserve(b, need);
    if (rc < 0)
        return rc;
    char *w = b->data + b->wpos;
    const unsigned char *p = src;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *w++ = alphabet[v >> 18];
        *w++ = alphabet[(v >> 12) & 63];
        *w++ = alphabet[(v >> 6) & 63];
        *w++ = alphabet[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        *w++ = alphabet[v >> 18];
        *w++ = alphabet[(v >> 12) & 63];
        *w++ = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
        *w++ = '=';
    }
    buf_produce(b, need);
    return 0;
}

int buf_appendf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    char small[256];

    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n < sizeof(small))
        return buf_append(b, small, (size_t)n);
    int rc = buf_reserve(b, (size_t)n + 1);
    if (rc < 0)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->wpos, (size_t)n + 1, fmt, ap);
    va_end(ap);
    buf_produce(b, (size_t)n);
    return 0;
}

void buf_free(struct buf *b)
{
    free(b->data);
    buf_init(b);
}
