/* Fuzz target for the memcached binary protocol's translation: frames to text requests and text replies to frames. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache.h"
#include "proto/memcache_binary.h"
#include "proto/proto.h"

/*
 * The first input byte chooses the direction (bit 0) and a chunk size (bits 1..3);
 * the rest is wire data. Every invariant failure aborts, independent of NDEBUG:
 *   decode: never consumes more than it was given; fed in chunks it writes the same
 *     text and keeps the same pending frames as fed whole; the text it writes parses
 *     with the proxy's own memcached parser without a fatal error, and into exactly
 *     one request per pending frame (besides `quit`): the replies, one per request,
 *     are what keeps the frames and their answers in step;
 *   encode: (frames, then 0xff, then reply text) never consumes more than it was
 *     given, writes whole frames with the response magic, the same fed in two parts
 *     as fed whole.
 */

#define FUZZ_CHECK(cond)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                              \
        }                                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A buffer's unread bytes, "" for one never allocated (no arithmetic on NULL). */
static const char *bptr(const struct buf *b)
{
    return b->data != NULL ? buf_rptr(b) : "";
}

/* Decode in[0..n) in chunks of `chunk` bytes into text; returns the bytes left over. */
static size_t decode_chunked(struct mcbin *b, const char *in, size_t n, size_t chunk,
                             struct buf *text)
{
    struct buf pending;
    buf_init(&pending);
    for (size_t pos = 0; pos < n; pos += chunk) {
        size_t k = n - pos < chunk ? n - pos : chunk;
        FUZZ_CHECK(buf_append(&pending, in + pos, k) == 0);
        size_t used = 0;
        FUZZ_CHECK(mcbin_decode(b, bptr(&pending), buf_len(&pending), &used, text) == 0);
        FUZZ_CHECK(used <= buf_len(&pending));
        buf_consume(&pending, used);
    }
    size_t left = buf_len(&pending);
    buf_free(&pending);
    return left;
}

/* Requests the proxy's text parser reads in text (quit not counted); -1 on a fatal parse. */
static long count_requests(const struct buf *text)
{
    struct proto_parser p;
    struct proto_req r;
    const char *t = bptr(text);
    size_t len = buf_len(text), pos = 0;
    long n = 0;

    memset(&p, 0, sizeof(p));
    while (pos < len) {
        int rc = proto_memcache_ops.parse_req(&p, t + pos, len - pos, &r);
        if (rc < 0) {
            n = -1;
            break;
        }
        if (rc == 0)
            break;
        if (r.cmd != MEMCACHE_CMD_QUIT)
            n++;
        uint64_t whole = (uint64_t)r.hdr_len + r.body_len;
        if (whole > len - pos)
            break;          /* a value still streaming */
        pos += (size_t)whole;
    }
    proto_parser_free(&p);
    return n;
}

static void fuzz_decode(const char *in, size_t n, size_t chunk)
{
    struct mcbin a, b;
    struct buf ta, tb;
    size_t used = 0;

    mcbin_init(&a);
    mcbin_init(&b);
    buf_init(&ta);
    buf_init(&tb);
    FUZZ_CHECK(mcbin_decode(&a, in, n, &used, &ta) == 0);
    FUZZ_CHECK(used <= n);
    FUZZ_CHECK(a.in != MCBIN_IN_FRAME || n - used < MCBIN_PREFIX_MAX);   /* bounded prefix */
    size_t left = decode_chunked(&b, in, n, chunk, &tb);
    FUZZ_CHECK(left == n - used);
    FUZZ_CHECK(a.npend == b.npend);
    FUZZ_CHECK(buf_len(&ta) == buf_len(&tb) &&
               (buf_len(&ta) == 0 || memcmp(bptr(&ta), bptr(&tb), buf_len(&ta)) == 0));
    long reqs = count_requests(&ta);
    FUZZ_CHECK(reqs >= 0);
    FUZZ_CHECK((uint64_t)reqs == a.npend);
    mcbin_free(&a);
    mcbin_free(&b);
    buf_free(&ta);
    buf_free(&tb);
}

/* Whole frames with the response magic from the start of out (the last may be cut). */
static void check_frames(const struct buf *out)
{
    if (buf_len(out) == 0)
        return;
    const uint8_t *p = (const uint8_t *)bptr(out);
    size_t len = buf_len(out), pos = 0;
    while (len - pos >= MCBIN_HDR_LEN) {
        FUZZ_CHECK(p[pos] == MCBIN_RES_MAGIC);
        uint32_t body = (uint32_t)p[pos + 8] << 24 | (uint32_t)p[pos + 9] << 16 |
                        (uint32_t)p[pos + 10] << 8 | p[pos + 11];
        uint16_t klen = (uint16_t)(p[pos + 2] << 8 | p[pos + 3]);
        FUZZ_CHECK((uint32_t)klen + p[pos + 4] <= body);
        if (body > len - pos - MCBIN_HDR_LEN)
            break;
        pos += MCBIN_HDR_LEN + body;
    }
}

static void fuzz_encode(const char *in, size_t n, size_t chunk)
{
    const char *sep = memchr(in, 0xff, n);
    size_t flen = sep ? (size_t)(sep - in) : n;
    const char *rsp = sep ? sep + 1 : in + n;
    size_t rlen = n - flen - (sep ? 1 : 0);
    struct mcbin a, b;
    struct buf text, oa, ob;
    size_t used = 0, u2 = 0;

    mcbin_init(&a);
    buf_init(&text);
    buf_init(&oa);
    buf_init(&ob);
    FUZZ_CHECK(mcbin_decode(&a, in, flen, &used, &text) == 0);
    b = a;
    buf_init(&b.pend);
    if (buf_len(&a.pend) > 0)
        FUZZ_CHECK(buf_append(&b.pend, bptr(&a.pend), buf_len(&a.pend)) == 0);

    int rc = mcbin_encode(&a, rsp, rlen, &used, &oa);
    FUZZ_CHECK(used <= rlen);
    check_frames(&oa);

    size_t cut = chunk < rlen ? chunk : rlen;
    int rc2 = mcbin_encode(&b, rsp, cut, &u2, &ob);
    FUZZ_CHECK(u2 <= cut);
    if (rc2 == 0) {
        struct buf rest;
        buf_init(&rest);
        if (rlen > u2)
            FUZZ_CHECK(buf_append(&rest, rsp + u2, rlen - u2) == 0);
        size_t u3 = 0;
        rc2 = mcbin_encode(&b, bptr(&rest), buf_len(&rest), &u3, &ob);
        u2 += u3;
        buf_free(&rest);
    }
    if (rc == 0 && rc2 == 0) {
        FUZZ_CHECK(u2 == used);
        FUZZ_CHECK(buf_len(&oa) == buf_len(&ob) &&
                   (buf_len(&oa) == 0 || memcmp(bptr(&oa), bptr(&ob), buf_len(&oa)) == 0));
    }
    mcbin_free(&a);
    mcbin_free(&b);
    buf_free(&text);
    buf_free(&oa);
    buf_free(&ob);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    size_t chunk = (size_t)((mode >> 1) & 7) + 1;
    char *copy = malloc(size);      /* exactly the input's bytes: over-reads trip ASan */
    FUZZ_CHECK(copy != NULL);
    memcpy(copy, data + 1, size - 1);
    if (mode & 1)
        fuzz_encode(copy, size - 1, chunk);
    else
        fuzz_decode(copy, size - 1, chunk);
    free(copy);
    return 0;
}
