/* Unit tests for the memcached binary protocol's translation: frames to meta/text requests (whole and byte by byte), text replies to frames. */
#include "config.h"

#include "check_main.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache_binary.h"

/* ------------------------------------------------------------ helpers */

/* A request frame into out (returns its length). */
static size_t frame(char *out, uint8_t op, const char *key, size_t klen, const char *ext,
                    size_t elen, const char *val, size_t vlen, uint32_t opaque, uint64_t cas)
{
    uint8_t *h = (uint8_t *)out;
    uint32_t body = (uint32_t)(klen + elen + vlen);

    memset(h, 0, MCBIN_HDR_LEN);
    h[0] = MCBIN_REQ_MAGIC;
    h[1] = op;
    h[2] = (uint8_t)(klen >> 8);
    h[3] = (uint8_t)klen;
    h[4] = (uint8_t)elen;
    for (int i = 0; i < 4; i++) {
        h[8 + i] = (uint8_t)(body >> (24 - 8 * i));
        h[12 + i] = (uint8_t)(opaque >> (24 - 8 * i));
    }
    for (int i = 0; i < 8; i++)
        h[16 + i] = (uint8_t)(cas >> (56 - 8 * i));
    if (elen)
        memcpy(out + MCBIN_HDR_LEN, ext, elen);
    if (klen)
        memcpy(out + MCBIN_HDR_LEN + elen, key, klen);
    if (vlen)
        memcpy(out + MCBIN_HDR_LEN + elen + klen, val, vlen);
    return MCBIN_HDR_LEN + body;
}

/* Decode in[0..len) whole into text; then again byte by byte: the same text, every
 * byte consumed (or left as a partial prefix the same way). Returns npend. */
static uint32_t decode_checked(const char *in, size_t len, struct buf *text, struct mcbin *b)
{
    size_t used = 0;

    mcbin_init(b);
    ck_assert_int_eq(mcbin_decode(b, in, len, &used, text), 0);

    struct mcbin y;
    struct buf t2, pendin;
    mcbin_init(&y);
    buf_init(&t2);
    buf_init(&pendin);
    for (size_t i = 0; i < len; i++) {
        buf_append(&pendin, in + i, 1);
        size_t u = 0;
        ck_assert_int_eq(mcbin_decode(&y, buf_rptr(&pendin), buf_len(&pendin), &u, &t2), 0);
        buf_consume(&pendin, u);
    }
    ck_assert_uint_eq(buf_len(&pendin), len - used);
    ck_assert_uint_eq(buf_len(&t2), buf_len(text));
    ck_assert(buf_len(text) == 0 || memcmp(buf_rptr(&t2), buf_rptr(text), buf_len(text)) == 0);
    ck_assert_uint_eq(y.npend, b->npend);
    mcbin_free(&y);
    buf_free(&t2);
    buf_free(&pendin);
    return b->npend;
}

static void text_is(const struct buf *t, const char *want)
{
    size_t n = strlen(want);
    if (buf_len(t) != n || memcmp(buf_rptr(t), want, n) != 0)
        ck_abort_msg("text %.*s != %s", (int)buf_len(t), buf_rptr(t), want);
}

/* Encode the reply text whole, and again split at every position: the same frames. */
static void encode_checked(struct mcbin *b, const char *rsp, struct buf *out)
{
    size_t len = strlen(rsp), used = 0;
    struct buf copy;
    buf_init(&copy);
    buf_append(&copy, buf_rptr(&b->pend), buf_len(&b->pend));
    struct mcbin saved = *b;

    for (size_t cut = 1; cut < len; cut++) {
        struct mcbin x = saved;
        buf_init(&x.pend);
        buf_append(&x.pend, buf_rptr(&copy), buf_len(&copy));
        struct buf o, in;
        buf_init(&o);
        buf_init(&in);
        buf_append(&in, rsp, cut);
        size_t u = 0;
        ck_assert_int_eq(mcbin_encode(&x, buf_rptr(&in), buf_len(&in), &u, &o), 0);
        buf_consume(&in, u);
        buf_append(&in, rsp + cut, len - cut);
        ck_assert_int_eq(mcbin_encode(&x, buf_rptr(&in), buf_len(&in), &u, &o), 0);
        buf_consume(&in, u);
        ck_assert_uint_eq(buf_len(&in), 0);
        struct buf whole;
        buf_init(&whole);
        struct mcbin z = saved;
        buf_init(&z.pend);
        buf_append(&z.pend, buf_rptr(&copy), buf_len(&copy));
        ck_assert_int_eq(mcbin_encode(&z, rsp, len, &u, &whole), 0);
        ck_assert_uint_eq(u, len);
        ck_assert_uint_eq(buf_len(&o), buf_len(&whole));
        ck_assert(buf_len(&o) == 0 || memcmp(buf_rptr(&o), buf_rptr(&whole), buf_len(&o)) == 0);
        mcbin_free(&x);
        mcbin_free(&z);
        buf_free(&o);
        buf_free(&in);
        buf_free(&whole);
    }
    buf_free(&copy);
    ck_assert_int_eq(mcbin_encode(b, rsp, len, &used, out), 0);
    ck_assert_uint_eq(used, len);
    ck_assert_uint_eq(b->npend, 0);
}

/* The reply frame at out + off: its fields; returns the offset after it. */
struct rframe {
    uint8_t  magic, op, extlen;
    uint16_t keylen, status;
    uint32_t bodylen, opaque;
    uint64_t cas;
    const char *body;
};

static size_t rframe_at(const struct buf *out, size_t off, struct rframe *f)
{
    const uint8_t *h = (const uint8_t *)buf_rptr(out) + off;
    ck_assert_uint_ge(buf_len(out), off + MCBIN_HDR_LEN);
    f->magic = h[0];
    f->op = h[1];
    f->keylen = (uint16_t)(h[2] << 8 | h[3]);
    f->extlen = h[4];
    f->status = (uint16_t)(h[6] << 8 | h[7]);
    f->bodylen = (uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | (uint32_t)h[10] << 8 | h[11];
    f->opaque = (uint32_t)h[12] << 24 | (uint32_t)h[13] << 16 | (uint32_t)h[14] << 8 | h[15];
    f->cas = 0;
    for (int i = 0; i < 8; i++)
        f->cas = f->cas << 8 | h[16 + i];
    f->body = (const char *)h + MCBIN_HDR_LEN;
    ck_assert_uint_ge(buf_len(out), off + MCBIN_HDR_LEN + f->bodylen);
    ck_assert_uint_eq(f->magic, MCBIN_RES_MAGIC);
    return off + MCBIN_HDR_LEN + f->bodylen;
}

/* ------------------------------------------------------------ decoding */

START_TEST(test_decode_storage_and_retrieval)
{
    char in[512];
    size_t n = 0;
    const char ext[8] = { 0, 0, 0, 5, 0, 0, 0, 100 };
    n += frame(in + n, MCBIN_SET, "k1", 2, ext, 8, "hello", 5, 1, 0);
    n += frame(in + n, MCBIN_ADDQ, "k1", 2, ext, 8, "", 0, 2, 0);
    n += frame(in + n, MCBIN_REPLACE, "k1", 2, ext, 8, "x", 1, 3, 77);
    n += frame(in + n, MCBIN_GETKQ, "k1", 2, NULL, 0, NULL, 0, 4, 0);
    n += frame(in + n, MCBIN_APPEND, "k1", 2, NULL, 0, "++", 2, 5, 0);
    n += frame(in + n, MCBIN_DELETE, "k1", 2, NULL, 0, NULL, 0, 6, 9);
    n += frame(in + n, MCBIN_NOOP, NULL, 0, NULL, 0, NULL, 0, 7, 0);

    struct buf text;
    struct mcbin b;
    buf_init(&text);
    ck_assert_uint_eq(decode_checked(in, n, &text, &b), 7);
    text_is(&text, "ms k1 5 F5 T100 c\r\nhello\r\n"
                   "ms k1 0 F5 T100 c ME\r\n\r\n"
                   "ms k1 1 F5 T100 c C77\r\nx\r\n"
                   "mg k1 f v c\r\n"
                   "ms k1 2 MA c\r\n++\r\n"
                   "md k1 C9\r\n"
                   "mn\r\n");
    mcbin_free(&b);
    buf_free(&text);
}
END_TEST

START_TEST(test_decode_arith_touch_flush_stat)
{
    char in[512];
    size_t n = 0;
    char ext[20] = { 0 };
    ext[7] = 3;                 /* delta 3 */
    ext[15] = 10;               /* initial 10 */
    n += frame(in + n, MCBIN_INCR, "c", 1, ext, 20, NULL, 0, 1, 0);
    memset(ext + 16, 0xff, 4);  /* no create */
    n += frame(in + n, MCBIN_DECRQ, "c", 1, ext, 20, NULL, 0, 2, 5);
    const char t[4] = { 0, 0, 0, 60 };
    n += frame(in + n, MCBIN_TOUCH, "c", 1, t, 4, NULL, 0, 3, 0);
    n += frame(in + n, MCBIN_GATK, "c", 1, t, 4, NULL, 0, 4, 0);
    n += frame(in + n, MCBIN_FLUSH, NULL, 0, t, 4, NULL, 0, 5, 0);
    n += frame(in + n, MCBIN_FLUSHQ, NULL, 0, NULL, 0, NULL, 0, 6, 0);
    n += frame(in + n, MCBIN_STAT, "items", 5, NULL, 0, NULL, 0, 7, 0);
    n += frame(in + n, MCBIN_VERSION, NULL, 0, NULL, 0, NULL, 0, 8, 0);

    struct buf text;
    struct mcbin b;
    buf_init(&text);
    ck_assert_uint_eq(decode_checked(in, n, &text, &b), 8);
    text_is(&text, "ma c D3 MI v c N0 J10\r\n"
                   "ma c D3 MD v c C5\r\n"
                   "mg c T60 f c\r\n"
                   "mg c T60 f v c\r\n"
                   "flush_all 60\r\n"
                   "flush_all\r\n"
                   "stats items\r\n"
                   "version\r\n");
    mcbin_free(&b);
    buf_free(&text);
}
END_TEST

START_TEST(test_decode_keys_the_text_protocol_cannot_carry_go_base64)
{
    char in[256];
    size_t n = frame(in, MCBIN_GET, "a b\r\n", 5, NULL, 0, NULL, 0, 1, 0);
    struct buf text;
    struct mcbin b;
    buf_init(&text);
    decode_checked(in, n, &text, &b);
    text_is(&text, "mg YSBiDQo= f v c b\r\n");
    mcbin_free(&b);
    buf_free(&text);
}
END_TEST

START_TEST(test_decode_malformed_as_memcached)
{
    char in[1024];
    struct buf text, out;
    struct mcbin b;
    size_t used;
    struct rframe f;

    /* a bad magic closes without a reply */
    size_t n = frame(in, MCBIN_GET, "k", 1, NULL, 0, NULL, 0, 1, 0);
    in[0] = (char)0x81;
    buf_init(&text);
    decode_checked(in, n, &text, &b);
    text_is(&text, "quit\r\n");
    ck_assert_int_eq(b.in, MCBIN_IN_CLOSED);
    ck_assert_int_eq(mcbin_decode(&b, in, n, &used, &text), 0);   /* dropped */
    ck_assert_uint_eq(used, n);
    mcbin_free(&b);
    buf_free(&text);

    /* a key over 250: Invalid arguments, then the close */
    char key[251];
    memset(key, 'k', sizeof(key));
    n = frame(in, MCBIN_GETQ, key, sizeof(key), NULL, 0, NULL, 0, 0x01020304, 0);
    buf_init(&text);
    buf_init(&out);
    decode_checked(in, n, &text, &b);
    text_is(&text, "mn\r\nquit\r\n");
    encode_checked(&b, "MN\r\n", &out);
    ck_assert_uint_eq(rframe_at(&out, 0, &f), buf_len(&out));
    ck_assert_uint_eq(f.status, MCBIN_EINVAL);
    ck_assert_uint_eq(f.op, MCBIN_GETQ);
    ck_assert_uint_eq(f.opaque, 0x01020304);
    ck_assert(f.bodylen == 17 && memcmp(f.body, "Invalid arguments", 17) == 0);
    mcbin_free(&b);
    buf_free(&text);
    buf_free(&out);

    /* keylen past bodylen: Unknown command, then the close */
    n = frame(in, MCBIN_GET, "kk", 2, NULL, 0, NULL, 0, 1, 0);
    in[11] = 1;
    buf_init(&text);
    buf_init(&out);
    decode_checked(in, n, &text, &b);
    text_is(&text, "mn\r\nquit\r\n");
    encode_checked(&b, "MN\r\n", &out);
    rframe_at(&out, 0, &f);
    ck_assert_uint_eq(f.status, MCBIN_UNKNOWN);
    mcbin_free(&b);
    buf_free(&text);
    buf_free(&out);

    /* an unknown opcode: answered, and bodylen bytes after its key swallowed */
    n = frame(in, 0x50, "k", 1, NULL, 0, NULL, 0, 1, 0);
    memcpy(in + n, "X", 1);      /* swallowed: memcached's count includes the key */
    n += 1;
    n += frame(in + n, MCBIN_NOOP, NULL, 0, NULL, 0, NULL, 0, 2, 0);
    buf_init(&text);
    decode_checked(in, n, &text, &b);
    text_is(&text, "mn\r\nmn\r\n");
    mcbin_free(&b);
    buf_free(&text);
}
END_TEST

START_TEST(test_decode_value_streams_and_prefix_is_bounded)
{
    char in[64];
    const char ext[8] = { 0 };
    size_t n = frame(in, MCBIN_SET, "k", 1, ext, 8, NULL, 0, 1, 0);
    /* announce a 1 MiB value: the header translates at once, the value as it comes */
    uint32_t body = 1 + 8 + (1u << 20);
    for (int i = 0; i < 4; i++)
        in[8 + i] = (char)(body >> (24 - 8 * i));
    struct buf text;
    struct mcbin b;
    size_t used;
    buf_init(&text);
    mcbin_init(&b);
    ck_assert_int_eq(mcbin_decode(&b, in, n, &used, &text), 0);
    ck_assert_uint_eq(used, n);
    text_is(&text, "ms k 1048576 F0 T0 c\r\n");
    ck_assert_int_eq(b.in, MCBIN_IN_VALUE);
    ck_assert_uint_eq(b.in_left, 1u << 20);
    ck_assert_int_eq(mcbin_decode(&b, "abc", 3, &used, &text), 0);
    ck_assert_uint_eq(used, 3);
    ck_assert_uint_eq(b.in_left, (1u << 20) - 3);
    mcbin_free(&b);
    buf_free(&text);

    /* a header that announces a 64 KiB key is refused before its bytes arrive */
    memset(in, 0, MCBIN_HDR_LEN);
    in[0] = (char)MCBIN_REQ_MAGIC;
    in[2] = (char)0xff;
    in[3] = (char)0xff;
    in[8] = 1;
    buf_init(&text);
    mcbin_init(&b);
    ck_assert_int_eq(mcbin_decode(&b, in, MCBIN_HDR_LEN, &used, &text), 0);
    ck_assert_uint_eq(used, MCBIN_HDR_LEN);
    text_is(&text, "mn\r\nquit\r\n");
    mcbin_free(&b);
    buf_free(&text);
}
END_TEST

/* ------------------------------------------------------------ encoding */

START_TEST(test_encode_gets_quiet_and_keys)
{
    char in[512];
    size_t n = 0;
    n += frame(in + n, MCBIN_GET, "k1", 2, NULL, 0, NULL, 0, 1, 0);
    n += frame(in + n, MCBIN_GETKQ, "k2", 2, NULL, 0, NULL, 0, 2, 0);
    n += frame(in + n, MCBIN_GETQ, "k3", 2, NULL, 0, NULL, 0, 3, 0);
    n += frame(in + n, MCBIN_GETK, "k4", 2, NULL, 0, NULL, 0, 4, 0);
    n += frame(in + n, MCBIN_GET, "k5", 2, NULL, 0, NULL, 0, 5, 0);
    struct buf text, out;
    struct mcbin b;
    buf_init(&text);
    buf_init(&out);
    decode_checked(in, n, &text, &b);
    encode_checked(&b, "VA 5 f7 c99\r\nhello\r\n"   /* get hit */
                       "VA 1 f0 c3\r\nx\r\n"         /* getkq hit: said, with its key */
                       "EN\r\n"                      /* getq miss: silent */
                       "EN\r\n"                      /* getk miss: the key, no text */
                       "EN\r\n", &out);              /* get miss: Not found */
    struct rframe f;
    size_t off = rframe_at(&out, 0, &f);
    ck_assert(f.op == MCBIN_GET && f.status == 0 && f.extlen == 4 && f.bodylen == 9 &&
              f.cas == 99 && f.opaque == 1 && memcmp(f.body, "\0\0\0\7hello", 9) == 0);
    off = rframe_at(&out, off, &f);
    ck_assert(f.op == MCBIN_GETKQ && f.keylen == 2 && f.bodylen == 7 &&
              memcmp(f.body, "\0\0\0\0k2x", 7) == 0);
    off = rframe_at(&out, off, &f);
    ck_assert(f.op == MCBIN_GETK && f.status == MCBIN_ENOENT && f.keylen == 2 &&
              f.bodylen == 2 && f.opaque == 4 && memcmp(f.body, "k4", 2) == 0);
    off = rframe_at(&out, off, &f);
    ck_assert(f.status == MCBIN_ENOENT && f.bodylen == 9 && memcmp(f.body, "Not found", 9) == 0);
    ck_assert_uint_eq(off, buf_len(&out));
    mcbin_free(&b);
    buf_free(&text);
    buf_free(&out);
}
END_TEST

START_TEST(test_encode_storage_statuses)
{
    char in[1024];
    size_t n = 0;
    const char ext[8] = { 0 };
    n += frame(in + n, MCBIN_SETQ, "a", 1, ext, 8, "v", 1, 1, 0);     /* HD: silent */
    n += frame(in + n, MCBIN_ADD, "a", 1, ext, 8, "v", 1, 2, 0);      /* NS: exists */
    n += frame(in + n, MCBIN_REPLACEQ, "a", 1, ext, 8, "v", 1, 3, 0); /* NS: not found */
    n += frame(in + n, MCBIN_SET, "a", 1, ext, 8, "v", 1, 4, 5);      /* EX */
    n += frame(in + n, MCBIN_APPEND, "a", 1, NULL, 0, "v", 1, 5, 0);  /* NS: not stored */
    n += frame(in + n, MCBIN_SET, "a", 1, ext, 8, "v", 1, 6, 0);      /* too large */
    n += frame(in + n, MCBIN_SET, "a", 1, ext, 8, "v", 1, 7, 0);      /* HD c */
    n += frame(in + n, MCBIN_DELETEQ, "a", 1, NULL, 0, NULL, 0, 8, 0);/* NF: said */
    n += frame(in + n, MCBIN_INCR, "a", 1, (const char[20]){ 0 }, 20, NULL, 0, 9, 0);
    n += frame(in + n, MCBIN_INCRQ, "a", 1, (const char[20]){ 0 }, 20, NULL, 0, 10, 0);
    n += frame(in + n, MCBIN_DECR, "a", 1, (const char[20]){ 0 }, 20, NULL, 0, 11, 0);
    n += frame(in + n, MCBIN_GET, "a", 1, NULL, 0, NULL, 0, 12, 0);
    struct buf text, out;
    struct mcbin b;
    buf_init(&text);
    buf_init(&out);
    decode_checked(in, n, &text, &b);
    encode_checked(&b, "HD c1\r\nNS\r\nNS\r\nEX\r\nNS\r\n"
                       "SERVER_ERROR object too large for cache\r\n"
                       "HD c42\r\nNF\r\n"
                       "VA 2 c8\r\n15\r\n"
                       "VA 2 c9\r\n16\r\n"
                       "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
                       "SERVER_ERROR backend timeout\r\n", &out);
    static const struct { uint16_t status; uint32_t opaque; uint64_t cas; } want[] = {
        { MCBIN_EEXISTS, 2, 0 }, { MCBIN_ENOENT, 3, 0 }, { MCBIN_EEXISTS, 4, 0 },
        { MCBIN_NOT_STORED, 5, 0 }, { MCBIN_E2BIG, 6, 0 }, { 0, 7, 42 },
        { MCBIN_ENOENT, 8, 0 }, { 0, 9, 8 }, { MCBIN_DELTA_BADVAL, 11, 0 },
        { MCBIN_ETMPFAIL, 12, 0 },
    };
    size_t off = 0;
    struct rframe f;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        off = rframe_at(&out, off, &f);
        ck_assert_uint_eq(f.status, want[i].status);
        ck_assert_uint_eq(f.opaque, want[i].opaque);
        ck_assert_uint_eq(f.cas, want[i].cas);
        if (want[i].opaque == 9)
            ck_assert(f.bodylen == 8 && memcmp(f.body, "\0\0\0\0\0\0\0\x0f", 8) == 0);
        if (want[i].opaque == 12)
            ck_assert(f.bodylen == 15 && memcmp(f.body, "backend timeout", 15) == 0);
    }
    ck_assert_uint_eq(off, buf_len(&out));
    mcbin_free(&b);
    buf_free(&text);
    buf_free(&out);
}
END_TEST

START_TEST(test_encode_stats_version_noop)
{
    char in[256];
    size_t n = 0;
    n += frame(in + n, MCBIN_STAT, NULL, 0, NULL, 0, NULL, 0, 1, 0);
    n += frame(in + n, MCBIN_VERSION, NULL, 0, NULL, 0, NULL, 0, 2, 0);
    n += frame(in + n, MCBIN_NOOP, NULL, 0, NULL, 0, NULL, 0, 3, 0);
    n += frame(in + n, MCBIN_STAT, "bogus", 5, NULL, 0, NULL, 0, 4, 0);
    struct buf text, out;
    struct mcbin b;
    buf_init(&text);
    buf_init(&out);
    decode_checked(in, n, &text, &b);
    encode_checked(&b, "STAT pid 12\r\nSTAT version 1.6.18\r\nEND\r\nVERSION 1.6.18\r\nMN\r\n"
                       "ERROR\r\n", &out);
    struct rframe f;
    size_t off = rframe_at(&out, 0, &f);
    ck_assert(f.keylen == 3 && f.bodylen == 5 && memcmp(f.body, "pid12", 5) == 0);
    off = rframe_at(&out, off, &f);
    ck_assert(f.keylen == 7 && memcmp(f.body, "version1.6.18", 13) == 0);
    off = rframe_at(&out, off, &f);
    ck_assert(f.op == MCBIN_STAT && f.bodylen == 0 && f.status == 0);
    off = rframe_at(&out, off, &f);
    ck_assert(f.op == MCBIN_VERSION && f.bodylen == 6 && memcmp(f.body, "1.6.18", 6) == 0);
    off = rframe_at(&out, off, &f);
    ck_assert(f.op == MCBIN_NOOP && f.bodylen == 0 && f.opaque == 3);
    off = rframe_at(&out, off, &f);
    ck_assert(f.op == MCBIN_STAT && f.status == MCBIN_ENOENT);
    ck_assert_uint_eq(off, buf_len(&out));
    mcbin_free(&b);
    buf_free(&text);
    buf_free(&out);
}
END_TEST

START_TEST(test_encode_refuses_a_reply_nobody_asked)
{
    struct mcbin b;
    struct buf out;
    size_t used;
    mcbin_init(&b);
    buf_init(&out);
    ck_assert_int_eq(mcbin_encode(&b, "HD\r\n", 4, &used, &out), -EPROTO);
    ck_assert_uint_eq(buf_len(&out), 0);
    mcbin_free(&b);
}
END_TEST

static Suite *memcache_binary_suite(void)
{
    Suite *s = suite_create("memcache_binary");
    TCase *tc = tcase_create("decode");
    tcase_add_test(tc, test_decode_storage_and_retrieval);
    tcase_add_test(tc, test_decode_arith_touch_flush_stat);
    tcase_add_test(tc, test_decode_keys_the_text_protocol_cannot_carry_go_base64);
    tcase_add_test(tc, test_decode_malformed_as_memcached);
    tcase_add_test(tc, test_decode_value_streams_and_prefix_is_bounded);
    suite_add_tcase(s, tc);
    tc = tcase_create("encode");
    tcase_add_test(tc, test_encode_gets_quiet_and_keys);
    tcase_add_test(tc, test_encode_storage_statuses);
    tcase_add_test(tc, test_encode_stats_version_noop);
    tcase_add_test(tc, test_encode_refuses_a_reply_nobody_asked);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(memcache_binary_suite)
