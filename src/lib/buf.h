/* struct buf: a contiguous byte buffer with read and write positions, grown on demand. */
#ifndef RL_BUF_H
#define RL_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lib/invariant.h"

#define BUF_STD_SIZE 16384   /* the size pooled buffers start with */

struct buf {
    char  *data;
    size_t rpos;     /* first unread byte */
    size_t wpos;     /* one past the last written byte */
    size_t cap;
};

static inline size_t buf_len(const struct buf *b) { return b->wpos - b->rpos; }
static inline char  *buf_rptr(const struct buf *b) { return b->data + b->rpos; }
static inline char  *buf_wptr(const struct buf *b) { return b->data + b->wpos; }
static inline size_t buf_room(const struct buf *b) { return b->cap - b->wpos; }

/* Mark n bytes read; resets both positions when the buffer empties. */
static inline void buf_consume(struct buf *b, size_t n)
{
    RL_ASSERT(n <= buf_len(b));
    b->rpos += n;
    if (b->rpos == b->wpos)
        b->rpos = b->wpos = 0;
}

/* Mark n bytes written at buf_wptr(), into room reserved before (buf_reserve):
 * a count past the room would expose bytes never written, or past the end. */
static inline void buf_produce(struct buf *b, size_t n)
{
    RL_ASSERT(n <= buf_room(b));
    b->wpos += n;
}

/* Keep only the first len unread bytes: the undo of appends that failed part
 * way. len is relative to rpos (a buf_len() taken before), never an absolute
 * wpos: buf_reserve may have compacted the buffer meanwhile. */
static inline void buf_truncate(struct buf *b, size_t len)
{
    RL_ASSERT(len <= buf_len(b));
    b->wpos = b->rpos + len;
}

/*
 * Make room for n more bytes at the write end: compacts (moves unread bytes
 * to the front) when that is enough, else grows to the next power of two.
 * Returns 0, or -ENOMEM (the buffer is unchanged).
 */
int buf_reserve(struct buf *b, size_t n);

/* Append n bytes; 0 or -ENOMEM. */
int buf_append(struct buf *b, const void *p, size_t n);

static inline int buf_append_str(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

/* Append n bytes as padded base64 (RFC 4648's alphabet); 0 or -ENOMEM. */
int buf_append_b64(struct buf *b, const void *p, size_t n);

/* printf-style append; 0 or -ENOMEM. */
int buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Release the memory (the struct may be reused after buf_init). */
void buf_free(struct buf *b);
static inline void buf_init(struct buf *b) { b->data = NULL; b->rpos = b->wpos = b->cap = 0; }

/* Swap two buffers (double buffering of writes). */
static inline void buf_swap(struct buf *a, struct buf *b)
{
    struct buf t = *a;
    *a = *b;
    *b = t;
}

#endif
