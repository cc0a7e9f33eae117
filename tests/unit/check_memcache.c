/* Unit tests for the memcached text/meta protocol: parsers (whole and byte by byte), forwarding, fragments, merging. */
#include "config.h"

#include "check_main.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/memcache.h"
#include "proto/proto.h"

static const struct proto_ops *ops = &proto_memcache_ops;

/* ------------------------------------------------------------ helpers */

struct preq {
    struct proto_parser p;
    struct proto_req r;
    int rc;
};

static void preq_init(struct preq *x, uint32_t item_max, uint32_t pflags)
{
    memset(x, 0, sizeof(*x));
    x->p.item_size_max = item_max;
    x->p.flags = pflags;
}

/*
 * Parse the first request of s all at once, and again feeding one more byte
 * at a time to a second parser: every prefix shorter than the header must
 * return 0, and the first complete one must give the same result.
 */
static void parse_checked(struct preq *x, const char *s, size_t len, uint32_t item_max,
                          uint32_t pflags)
{
    preq_init(x, item_max, pflags);
    x->rc = ops->parse_req(&x->p, s, len, &x->r);
    ck_assert_uint_eq(x->p.u.mc.scan, x->rc == 0 ? len : 0);

    struct preq y;
    preq_init(&y, item_max, pflags);
    int rc = 0;
    size_t k;
    for (k = 1; k <= len; k++) {
        rc = ops->parse_req(&y.p, s, k, &y.r);
        if (rc != 0)
            break;
    }
    if (x->rc == 0) {
        ck_assert_int_eq(rc, 0);
        proto_parser_free(&y.p);
        return;
    }
    ck_assert_int_eq(rc, x->rc);
    if (rc > 0)
        ck_assert_uint_eq(k, (size_t)rc);   /* complete exactly at the '\n' */
    ck_assert_int_eq(y.r.kind, x->r.kind);
    ck_assert_uint_eq(y.r.cmd, x->r.cmd);
    ck_assert_uint_eq(y.r.flags, x->r.flags);
    ck_assert_uint_eq(y.r.hdr_len, x->r.hdr_len);
    ck_assert_uint_eq(y.r.body_len, x->r.body_len);
    ck_assert_uint_eq(y.r.nkeys, x->r.nkeys);
    for (uint32_t i = 0; i < x->r.nkeys; i++) {
        ck_assert_uint_eq(y.r.keys[i].off, x->r.keys[i].off);
        ck_assert_uint_eq(y.r.keys[i].len, x->r.keys[i].len);
    }
    ck_assert_uint_eq(y.r.err_len, x->r.err_len);
    if (x->r.err)
        ck_assert_int_eq(memcmp(y.r.err, x->r.err, x->r.err_len), 0);
    ck_assert_int_eq(memcmp(&y.r.u.mc, &x->r.u.mc, sizeof(x->r.u.mc)), 0);
    proto_parser_free(&y.p);
}

static struct preq *req(const char *s)
{
    static struct preq x;
    proto_parser_free(&x.p);
    parse_checked(&x, s, strlen(s), 0, 0);
    return &x;
}

static struct preq *req_with(const char *s, uint32_t item_max, uint32_t pflags)
{
    static struct preq x;
    proto_parser_free(&x.p);
    parse_checked(&x, s, strlen(s), item_max, pflags);
    return &x;
}

static void assert_key(const struct preq *x, const char *s, uint32_t i, const char *key)
{
    ck_assert_uint_lt(i, x->r.nkeys);
    ck_assert_uint_eq(x->r.keys[i].len, strlen(key));
    ck_assert_int_eq(memcmp(s + x->r.keys[i].off, key, strlen(key)), 0);
}

static void assert_err(const struct preq *x, const char *err)
{
    ck_assert_int_eq(x->r.kind, PROTO_REQ_ERROR);
    ck_assert_ptr_nonnull(x->r.err);
    ck_assert_uint_eq(x->r.err_len, strlen(err));
    ck_assert_int_eq(memcmp(x->r.err, err, x->r.err_len), 0);
}

/* forward() of the first request of s, as a NUL-terminated string. */
static char *fwd(const char *s)
{
    static char out[4096];
    struct preq x;
    parse_checked(&x, s, strlen(s), 0, PROTO_PF_ALLOW_FLUSH);
    ck_assert_int_gt(x.rc, 0);
    struct buf b;
    buf_init(&b);
    ck_assert_int_eq(ops->forward(&x.r, s, &b), 0);
    ck_assert_uint_lt(buf_len(&b), sizeof(out));
    memcpy(out, buf_rptr(&b), buf_len(&b));
    out[buf_len(&b)] = '\0';
    buf_free(&b);
    proto_parser_free(&x.p);
    return out;
}

/* Reply parse, whole and byte by byte (same checks as requests). */
static int rsp_checked(const char *s, size_t len, uint16_t cmd, uint16_t rflags,
                       struct proto_rsp *out)
{
    struct proto_parser p;
    memset(&p, 0, sizeof(p));
    int rc = ops->parse_rsp(&p, s, len, cmd, rflags, out);
    struct proto_parser q;
    memset(&q, 0, sizeof(q));
    struct proto_rsp r;
    int rc2 = 0;
    size_t k;
    for (k = 1; k <= len; k++) {
        rc2 = ops->parse_rsp(&q, s, k, cmd, rflags, &r);
        if (rc2 != 0)
            break;
    }
    if (rc > 0) {
        ck_assert_int_eq(rc2, rc);
        ck_assert_uint_eq(k, (size_t)rc);
        ck_assert_uint_eq(r.hdr_len, out->hdr_len);
        ck_assert_uint_eq(r.body_len, out->body_len);
        ck_assert_uint_eq(r.flags, out->flags);
        ck_assert_uint_eq(r.key.off, out->key.off);
        ck_assert_uint_eq(r.key.len, out->key.len);
    } else if (rc < 0) {
        ck_assert_int_lt(rc2, 0);
    } else {
        ck_assert_int_eq(rc2, 0);
    }
    return rc;
}

static int rsp(const char *s, uint16_t cmd, uint16_t rflags, struct proto_rsp *out)
{
    return rsp_checked(s, strlen(s), cmd, rflags, out);
}

static void buf_set(struct buf *b, const char *s)
{
    buf_init(b);
    ck_assert_int_eq(buf_append(b, s, strlen(s)), 0);
}

static int buf_eq(const struct buf *b, const char *s)
{
    /* An empty buffer may have no storage at all. */
    return buf_len(b) == strlen(s) && (buf_len(b) == 0 || memcmp(buf_rptr(b), s, buf_len(b)) == 0);
}

#define ck_assert_buf(b, s) \
    ck_assert_msg(buf_eq((b), (s)), "got '%.*s', want '%s'", (int)buf_len(b), buf_rptr(b), (s))

/* ------------------------------------------------------------ storage */

START_TEST(test_storage_commands)
{
    static const struct { const char *line; uint16_t cmd; } c[] = {
        { "set foo 5 0 3\r\nbar\r\n", MEMCACHE_CMD_SET },
        { "add foo 5 0 3\r\nbar\r\n", MEMCACHE_CMD_ADD },
        { "replace foo 5 0 3\r\nbar\r\n", MEMCACHE_CMD_REPLACE },
        { "append foo 5 0 3\r\nbar\r\n", MEMCACHE_CMD_APPEND },
        { "prepend foo 5 0 3\r\nbar\r\n", MEMCACHE_CMD_PREPEND },
        { "cas foo 5 0 3 12345\r\nbar\r\n", MEMCACHE_CMD_CAS },
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct preq *x = req(c[i].line);
        size_t hdr = strchr(c[i].line, '\n') - c[i].line + 1;
        ck_assert_int_eq(x->rc, (int)hdr);
        ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
        ck_assert_uint_eq(x->r.cmd, c[i].cmd);
        ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE);
        ck_assert_uint_eq(x->r.body_len, 5);
        ck_assert_uint_eq(x->r.nkeys, 1);
        assert_key(x, c[i].line, 0, "foo");
    }
}
END_TEST

START_TEST(test_storage_noreply_bare_newline_and_negative_exptime)
{
    const char *s = "set k 0 -1 10 noreply\n";
    struct preq *x = req(s);
    ck_assert_int_eq(x->rc, (int)strlen(s));
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE | PROTO_RF_NOREPLY);
    ck_assert_uint_eq(x->r.body_len, 12);
    /* A sixth token other than noreply is ignored, as memcached does. */
    x = req("set k 0 0 1 2\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE);
    x = req("cas k 0 0 1 99 noreply\r\n");
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE | PROTO_RF_NOREPLY);
    ck_assert_uint_eq(x->r.body_len, 3);
    x = req("set   k  0 0  0\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.body_len, 2);
    assert_key(x, "set   k  0 0  0\r\n", 0, "k");
}
END_TEST

START_TEST(test_storage_errors_swallow_nothing_like_memcached)
{
    const char *bad = "CLIENT_ERROR bad command line format\r\n";
    struct preq *x;
    /* memcached 1.6.18 refuses a malformed storage line without swallowing
     * the data block, even when the count parsed; so does the proxy. */
    x = req("set foo abc 0 5\r\n");
    assert_err(x, bad);
    ck_assert_uint_eq(x->r.body_len, 0);
    x = req("set foo 0 xyz 5\r\n");
    assert_err(x, bad);
    ck_assert_uint_eq(x->r.body_len, 0);
    x = req("set foo 4294967296 0 5\r\n");
    assert_err(x, bad);
    ck_assert_uint_eq(x->r.body_len, 0);
    x = req("set foo 0 0 5 noreply extra\r\n");
    assert_err(x, "ERROR\r\n");
    ck_assert_uint_eq(x->r.body_len, 0);
    x = req("cas foo 0 0 5 notanumber\r\n");
    assert_err(x, bad);
    ck_assert_uint_eq(x->r.body_len, 0);
    x = req("cas foo 0 0 5\r\n");                /* missing cas unique */
    assert_err(x, "ERROR\r\n");
    ck_assert_uint_eq(x->r.body_len, 0);
    /* The count is unusable: nothing is swallowed. */
    x = req("set foo 0 0 abc\r\n");
    assert_err(x, bad);
    ck_assert_uint_eq(x->r.body_len, 0);
    x = req("set foo 0 0 -1\r\n");
    assert_err(x, bad);
    ck_assert_uint_eq(x->r.body_len, 0);
    x = req("set foo 0 0\r\n");
    assert_err(x, "ERROR\r\n");
    ck_assert_uint_eq(x->r.body_len, 0);
    x = req("set\r\n");
    assert_err(x, "ERROR\r\n");
    x = req("set foo 0 0 99999999999\r\n");
    assert_err(x, bad);
    ck_assert_uint_eq(x->r.body_len, 0);
    ck_assert_uint_eq(x->r.flags, 0);
}
END_TEST

START_TEST(test_storage_key_rules)
{
    char line[600];
    char key[300];
    memset(key, 'k', sizeof(key));
    key[250] = '\0';
    snprintf(line, sizeof(line), "set %s 0 0 1\r\n", key);
    struct preq *x = req(line);
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.keys[0].len, 250);
    key[250] = 'k';
    key[251] = '\0';
    snprintf(line, sizeof(line), "set %s 0 0 1\r\n", key);
    x = req(line);
    assert_err(x, "CLIENT_ERROR bad command line format\r\n");
    ck_assert_uint_eq(x->r.body_len, 0);
    /* memcached splits on spaces only: tabs, \x10 (memaslap), DEL are key bytes */
    x = req("set a\tb 0 0 1\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    assert_key(x, "set a\tb 0 0 1\r\n", 0, "a\tb");
    x = req("set a\x7f 0 0 1\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    x = req("get \x10\x01\x1f\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.keys[0].len, 3);
    /* a CR inside a key (memcached takes it) is refused */
    x = req("set a\rb 0 0 1\r\n");
    assert_err(x, "CLIENT_ERROR bad command line format\r\n");
    x = req("get a\r\r\n");
    assert_err(x, "CLIENT_ERROR bad command line format\r\n");
    x = req("set caf\xc3\xa9 0 0 1\r\n");       /* UTF-8 bytes are fine */
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
}
END_TEST

START_TEST(test_item_size_max)
{
    struct preq *x = req("set big 0 0 1048576\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    x = req("set big 0 0 1048577\r\n");
    assert_err(x, "SERVER_ERROR object too large for cache\r\n");
    ck_assert_uint_eq(x->r.body_len, 1048579);
    x = req_with("set big 0 0 101\r\n", 100, 0);
    assert_err(x, "SERVER_ERROR object too large for cache\r\n");
    ck_assert_uint_eq(x->r.body_len, 103);
    x = req_with("set big 0 0 100 noreply\r\n", 100, 0);
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    x = req_with("ms big 101 T0\r\n", 100, 0);
    assert_err(x, "SERVER_ERROR object too large for cache\r\n");
    ck_assert_uint_eq(x->r.body_len, 103);
}
END_TEST

/* ------------------------------------------------------------ retrieval */

START_TEST(test_get_single_and_multi)
{
    const char *s = "get foo\r\n";
    struct preq *x = req(s);
    ck_assert_int_eq(x->rc, 9);
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_GET);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_RETRIEVAL);
    ck_assert_uint_eq(x->r.body_len, 0);
    assert_key(x, s, 0, "foo");

    s = "gets a  bb ccc a\r\n";
    x = req(s);
    ck_assert_int_eq(x->r.kind, PROTO_REQ_FANOUT);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_GETS);
    ck_assert_uint_eq(x->r.nkeys, 4);
    assert_key(x, s, 0, "a");
    assert_key(x, s, 1, "bb");
    assert_key(x, s, 2, "ccc");
    assert_key(x, s, 3, "a");

    s = "gat 100 k1 k2\r\n";
    x = req(s);
    ck_assert_int_eq(x->r.kind, PROTO_REQ_FANOUT);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_GAT);
    assert_key(x, s, 0, "k1");
    assert_key(x, s, 1, "k2");
    x = req("gats -1 k1\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_GATS);
}
END_TEST

START_TEST(test_get_errors)
{
    assert_err(req("get\r\n"), "ERROR\r\n");
    assert_err(req("get    \r\n"), "ERROR\r\n");
    assert_err(req("gets\r\n"), "ERROR\r\n");
    assert_err(req("gat\r\n"), "ERROR\r\n");
    assert_err(req("gat 10\r\n"), "END\r\n");          /* memcached finds nothing */
    assert_err(req("gat abc foo\r\n"), "CLIENT_ERROR invalid exptime argument\r\n");
    char line[600], key[260];
    memset(key, 'x', 251);
    key[251] = '\0';
    snprintf(line, sizeof(line), "get a %s\r\n", key);
    assert_err(req(line), "CLIENT_ERROR bad command line format\r\n");
}
END_TEST

START_TEST(test_get_many_keys_long_line)
{
    /* 1,000 keys of 40 bytes: ~41 KB, beyond the 2 KiB line limit. */
    size_t cap = 4 + 1000 * 41 + 2 + 1;
    char *s = malloc(cap);
    size_t n = 0;
    memcpy(s, "get", 3);
    n = 3;
    for (int i = 0; i < 1000; i++)
        n += (size_t)sprintf(s + n, " key:%035d", i);
    memcpy(s + n, "\r\n", 3);
    n += 2;
    struct preq x;
    preq_init(&x, 0, 0);
    /* Not complete: 0 and the scan position advanced. */
    ck_assert_int_eq(ops->parse_req(&x.p, s, n - 1, &x.r), 0);
    ck_assert_uint_eq(x.p.u.mc.scan, n - 1);
    ck_assert_int_eq(ops->parse_req(&x.p, s, n, &x.r), (int)n);
    ck_assert_uint_eq(x.p.u.mc.scan, 0);
    ck_assert_int_eq(x.r.kind, PROTO_REQ_FANOUT);
    ck_assert_uint_eq(x.r.nkeys, 1000);
    ck_assert_uint_eq(x.r.keys[999].len, 39);
    ck_assert_int_eq(memcmp(s + x.r.keys[999].off, "key:00000000000000000000000000000000999", 39), 0);
    proto_parser_free(&x.p);
    free(s);
}
END_TEST

START_TEST(test_line_too_long)
{
    char *s = malloc(MEMCACHE_RETRIEVAL_LINE_MAX + 16);
    struct preq x;

    /* A non-retrieval line: 2048 bytes without '\n' is fatal. */
    memset(s, 'a', MEMCACHE_LINE_MAX);
    memcpy(s, "set ", 4);
    preq_init(&x, 0, 0);
    ck_assert_int_eq(ops->parse_req(&x.p, s, MEMCACHE_LINE_MAX - 1, &x.r), 0);
    int rc = ops->parse_req(&x.p, s, MEMCACHE_LINE_MAX, &x.r);
    ck_assert_int_lt(rc, 0);
    assert_err(&x, "CLIENT_ERROR line too long\r\n");
    ck_assert_uint_eq(x.p.u.mc.scan, 0);
    /* 2047 bytes plus the '\n' is still a line. */
    preq_init(&x, 0, 0);
    memcpy(s, "zzz ", 4);
    s[MEMCACHE_LINE_MAX - 1] = '\n';
    ck_assert_int_eq(ops->parse_req(&x.p, s, MEMCACHE_LINE_MAX, &x.r), MEMCACHE_LINE_MAX);
    assert_err(&x, "ERROR\r\n");

    /* A get line may be longer, up to MEMCACHE_RETRIEVAL_LINE_MAX. */
    memset(s, 'k', MEMCACHE_RETRIEVAL_LINE_MAX + 16);
    memcpy(s, "get ", 4);
    for (size_t i = 100; i < MEMCACHE_RETRIEVAL_LINE_MAX; i += 100)
        s[i] = ' ';
    preq_init(&x, 0, 0);
    ck_assert_int_eq(ops->parse_req(&x.p, s, 5000, &x.r), 0);
    ck_assert_int_eq(ops->parse_req(&x.p, s, MEMCACHE_RETRIEVAL_LINE_MAX - 1, &x.r), 0);
    rc = ops->parse_req(&x.p, s, MEMCACHE_RETRIEVAL_LINE_MAX, &x.r);
    ck_assert_int_lt(rc, 0);
    assert_err(&x, "CLIENT_ERROR line too long\r\n");
    proto_parser_free(&x.p);
    free(s);
}
END_TEST

/* ------------------------------------------------------------ other commands */

START_TEST(test_delete_incr_touch)
{
    struct preq *x = req("delete foo\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_DELETE);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE);
    x = req("delete foo 0\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    x = req("delete foo noreply\r\n");
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE | PROTO_RF_NOREPLY);
    x = req("delete foo 0 noreply\r\n");
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE | PROTO_RF_NOREPLY);
    /* Regression (found by the fuzzer): a lone "noreply" is the key. */
    x = req("delete noreply\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE);
    assert_key(x, "delete noreply\r\n", 0, "noreply");
    ck_assert_str_eq(fwd("delete noreply\r\n"), "delete noreply\r\n");
    const char *usage = "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
    assert_err(req("delete foo 1\r\n"), usage);
    assert_err(req("delete foo noreply x\r\n"), usage);
    assert_err(req("delete\r\n"), "ERROR\r\n");      /* memcached: wrong token count */

    x = req("incr n 18446744073709551615\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_INCR);
    x = req("decr n 1 noreply\r\n");
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_DECR);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE | PROTO_RF_NOREPLY);
    const char *delta = "CLIENT_ERROR invalid numeric delta argument\r\n";
    assert_err(req("incr n 18446744073709551616\r\n"), delta);
    /* 19 digits take the parser's unchecked loop, 20 and more the checked one */
    ck_assert_uint_eq(req("incr n 9999999999999999999\r\n")->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(req("incr n 000000000000000000018446744073709551615\r\n")->r.kind,
                      PROTO_REQ_SINGLE);
    assert_err(req("incr n 99999999999999999999\r\n"), delta);
    assert_err(req("incr n 0000000000000000000018446744073709551616\r\n"), delta);
    assert_err(req("incr n 999999999999999999x\r\n"), delta);
    assert_err(req("incr n -1\r\n"), delta);
    assert_err(req("incr n abc\r\n"), delta);
    assert_err(req("incr n\r\n"), "ERROR\r\n");

    x = req("touch t 100 noreply\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_TOUCH);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE | PROTO_RF_NOREPLY);
    assert_err(req("touch t abc\r\n"), "CLIENT_ERROR invalid exptime argument\r\n");
}
END_TEST

START_TEST(test_meta_commands)
{
    const char *s = "mg foo v k O123\r\n";
    struct preq *x = req(s);
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_MG);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_RETRIEVAL);
    assert_key(x, s, 0, "foo");
    x = req("mg foo q v\r\n");
    ck_assert_uint_eq(x->r.flags, PROTO_RF_RETRIEVAL | PROTO_RF_QUIET);

    s = "ms foo 5 T0 F1 q\r\n";
    x = req(s);
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_MS);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE | PROTO_RF_QUIET);
    ck_assert_uint_eq(x->r.body_len, 7);
    assert_key(x, s, 0, "foo");
    x = req("md foo q\r\n");
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_MD);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE | PROTO_RF_QUIET);
    x = req("ma foo N0 J5 v\r\n");
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_MA);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_WRITE);

    s = "mg Zm9v b v\r\n";
    x = req(s);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_RETRIEVAL | PROTO_RF_KEYB64 | PROTO_RF_KEYBYTES);
    assert_key(x, s, 0, "Zm9v");

    x = req("mn\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_LOCAL);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_MN);
}
END_TEST

START_TEST(test_meta_errors)
{
    struct preq *x;
    assert_err(req("mg\r\n"), "ERROR\r\n");
    assert_err(req("ms\r\n"), "ERROR\r\n");
    assert_err(req("ms foo\r\n"), "CLIENT_ERROR bad command line format\r\n");
    x = req("ms foo x\r\n");
    assert_err(x, "CLIENT_ERROR bad command line format\r\n");
    ck_assert_uint_eq(x->r.body_len, 0);
    x = req("ms foo 2 q q\r\n");
    assert_err(x, "CLIENT_ERROR duplicate flag\r\n");
    ck_assert_uint_eq(x->r.body_len, 4);
    assert_err(req("mg foo q v q\r\n"), "CLIENT_ERROR duplicate flag\r\n");
    x = req("ms foo 2 b\r\n");
    assert_err(x, "CLIENT_ERROR error decoding key\r\n");
    ck_assert_uint_eq(x->r.body_len, 4);
    assert_err(req("mg Zm9v= b\r\n"), "CLIENT_ERROR error decoding key\r\n");
    /* memcached 1.6 refuses more than 19 tokens without swallowing an ms
     * value; the proxy refuses first and keeps the stream in sync. */
    x = req("mg k a c d e f g h i j k l m n o p r s\r\n");     /* 19 tokens */
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    x = req("mg k a c d e f g h i j k l m n o p r s t\r\n");   /* 20 tokens */
    assert_err(x, "CLIENT_ERROR options flags are too long\r\n");
    x = req("ms k 3 a c d e f g h i j k l m n o p r s\r\n");
    assert_err(x, "CLIENT_ERROR options flags are too long\r\n");
    ck_assert_uint_eq(x->r.body_len, 5);
    x = req("me foo\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_ERROR);
    ck_assert_int_eq(strncmp(x->r.err, "CLIENT_ERROR ", 13), 0);
    ck_assert_int_eq(memcmp(x->r.err + x->r.err_len - 2, "\r\n", 2), 0);
}
END_TEST

START_TEST(test_long_get_with_oversized_token_waits_for_its_line)
{
    /* A 3 KiB key is never valid, but the line is read whole before it is
     * judged (a NUL later in it could still end it before the key, as in
     * memcached): bounded by MEMCACHE_RETRIEVAL_LINE_MAX, not refused early,
     * so every prefix is simply incomplete. */
    char line[3100];
    memcpy(line, "get ", 4);
    memset(line + 4, 'a', 3072);
    memcpy(line + 4 + 3072, "\r\n", 2);
    struct preq x;
    parse_checked(&x, line, 4 + 3072 + 2, 0, 0);
    assert_err(&x, "CLIENT_ERROR bad command line format\r\n");
    proto_parser_free(&x.p);
    memcpy(line + 4 + 100, "\0", 1);           /* memcached reads "get aaa...a" (100) */
    parse_checked(&x, line, 4 + 3072 + 2, 0, 0);
    ck_assert_int_eq(x.r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x.r.keys[0].len, 100);
    proto_parser_free(&x.p);
}
END_TEST

START_TEST(test_local_commands)
{
    struct preq *x = req("version\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_BROADCAST);    /* the servers' (memcache_local.c) */
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_VERSION);
    x = req("quit\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_LOCAL);
    ck_assert_uint_eq(x->r.flags, PROTO_RF_CLOSE);
    x = req("stats\r\n");                 /* the servers' summed with the proxy's */
    ck_assert_int_eq(x->r.kind, PROTO_REQ_BROADCAST);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_STATS);
    /* per-server sub-statistics go to every server (merged in memcache_local.c); what
     * would change every server is refused; an unknown argument is ERROR, as memcached
     * answers it (memcapable checks it) */
    x = req("stats slabs\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_BROADCAST);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_STATS);
    ck_assert_int_eq(req("stats cachedump 1 0\r\n")->r.kind, PROTO_REQ_BROADCAST);
    assert_err(req("stats reset\r\n"), "CLIENT_ERROR stats reset and stats detail change every "
               "server: send them to each server directly\r\n");
    assert_err(req("stats noreply\r\n"), "ERROR\r\n");
    x = req("verbosity 1\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_LOCAL);
    x = req("verbosity 1 noreply\r\n");
    ck_assert_uint_eq(x->r.flags, PROTO_RF_NOREPLY);
    assert_err(req("verbosity\r\n"), "ERROR\r\n");
    assert_err(req("verbosity x\r\n"), "CLIENT_ERROR bad command line format\r\n");
}
END_TEST

static void render(void *ctx, proto_stat_fn emit, void *arg)
{
    *(int *)ctx += 1;
    emit(arg, "curr_connections", 3);
}

START_TEST(test_local_replies)
{
    int calls = 0;
    struct proto_env env = { .version = "0.1.0", .render_stats = render, .ctx = &calls };
    struct proto_client c;
    memset(&c, 0, sizeof(c));
    static const struct { const char *line; const char *reply; int rc; } t[] = {
        { "verbosity 1\r\n", "OK\r\n", 0 },
        { "verbosity 1 noreply\r\n", "", 0 },
        { "mn\r\n", "MN\r\n", 0 },
        { "stats\r\n", "STAT version 0.1.0\r\nSTAT pointer_size 64\r\nSTAT curr_connections 3\r\n"
                         "STAT ringleader_version 0.1.0\r\nEND\r\n", 0 },
        { "quit\r\n", "", PROTO_LOCAL_CLOSE },
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct preq *x = req(t[i].line);
        struct buf b;
        buf_init(&b);
        ck_assert_int_eq(ops->local(&c, &x->p, &x->r, t[i].line, &env, &b), t[i].rc);
        ck_assert_buf(&b, t[i].reply);
        buf_free(&b);
    }
    ck_assert_int_eq(calls, 1);
    env.render_stats = NULL;
    struct preq *x = req("stats\r\n");
    struct buf b;
    buf_init(&b);
    ck_assert_int_eq(ops->local(&c, &x->p, &x->r, "stats\r\n", &env, &b), 0);
    ck_assert_buf(&b, "STAT version 0.1.0\r\nSTAT pointer_size 64\r\n"
                      "STAT ringleader_version 0.1.0\r\nEND\r\n");
    buf_free(&b);
}
END_TEST

START_TEST(test_flush_all)
{
    const char *refused = "CLIENT_ERROR flush_all is not allowed through this proxy "
                          "(set allow_flush: true on the pool)\r\n";
    assert_err(req("flush_all\r\n"), refused);
    struct preq *x = req_with("flush_all\r\n", 0, PROTO_PF_ALLOW_FLUSH);
    ck_assert_int_eq(x->r.kind, PROTO_REQ_BROADCAST);
    ck_assert_uint_eq(x->r.cmd, MEMCACHE_CMD_FLUSH_ALL);
    x = req_with("flush_all 10 noreply\r\n", 0, PROTO_PF_ALLOW_FLUSH);
    ck_assert_int_eq(x->r.kind, PROTO_REQ_BROADCAST);
    ck_assert_uint_eq(x->r.flags & PROTO_RF_NOREPLY, PROTO_RF_NOREPLY);
    x = req_with("flush_all noreply\r\n", 0, PROTO_PF_ALLOW_FLUSH);
    ck_assert_uint_eq(x->r.flags & PROTO_RF_NOREPLY, PROTO_RF_NOREPLY);
    assert_err(req_with("flush_all abc\r\n", 0, PROTO_PF_ALLOW_FLUSH),
               "CLIENT_ERROR invalid exptime argument\r\n");
    assert_err(req_with("flush_all 1 2 3\r\n", 0, PROTO_PF_ALLOW_FLUSH), "ERROR\r\n");
}
END_TEST

START_TEST(test_unknown_and_empty)
{
    struct preq *x = req("bogus a b c\r\n");
    assert_err(x, "ERROR\r\n");
    ck_assert_int_eq(x->rc, 13);
    ck_assert_uint_eq(x->r.body_len, 0);
    assert_err(req("GET foo\r\n"), "ERROR\r\n");     /* commands are case-sensitive */
    x = req("\r\n");
    assert_err(x, "ERROR\r\n");
    ck_assert_int_eq(x->rc, 2);
    x = req("\n");
    assert_err(x, "ERROR\r\n");
    ck_assert_int_eq(x->rc, 1);
    assert_err(req("   \r\n"), "ERROR\r\n");
    assert_err(req("getx foo\r\n"), "ERROR\r\n");
    /* Incomplete lines consume nothing. */
    x = req("get foo");
    ck_assert_int_eq(x->rc, 0);
    x = req("");
    ck_assert_int_eq(x->rc, 0);
}
END_TEST

START_TEST(test_pipelined_requests)
{
    const char *s = "set a 0 0 1\r\nx\r\nget a b\r\ndelete a noreply\r\nmn\r\n";
    size_t len = strlen(s), off = 0;
    struct proto_parser p;
    memset(&p, 0, sizeof(p));
    struct proto_req r;
    static const uint16_t want[] = { MEMCACHE_CMD_SET, MEMCACHE_CMD_GET, MEMCACHE_CMD_DELETE,
                                     MEMCACHE_CMD_MN };
    for (int i = 0; i < 4; i++) {
        int rc = ops->parse_req(&p, s + off, len - off, &r);
        ck_assert_int_gt(rc, 0);
        ck_assert_uint_eq(r.cmd, want[i]);
        off += (size_t)rc + r.body_len;
    }
    ck_assert_uint_eq(off, len);
    ck_assert_int_eq(ops->parse_req(&p, s + off, 0, &r), 0);
    proto_parser_free(&p);
}
END_TEST

/* ------------------------------------------------------------ forward, fragments */

START_TEST(test_forward_strips_noreply_and_q)
{
    ck_assert_str_eq(fwd("set foo 1 2 3 noreply\r\nabc\r\n"), "set foo 1 2 3\r\n");
    ck_assert_str_eq(fwd("set foo 1 2 3\r\nabc\r\n"), "set foo 1 2 3\r\n");
    ck_assert_str_eq(fwd("cas  foo 1 2 3 77   noreply\n"), "cas  foo 1 2 3 77\n");
    ck_assert_str_eq(fwd("delete foo 0 noreply\r\n"), "delete foo 0\r\n");
    ck_assert_str_eq(fwd("delete foo noreply\r\n"), "delete foo\r\n");
    ck_assert_str_eq(fwd("incr foo 5 noreply\r\n"), "incr foo 5\r\n");
    ck_assert_str_eq(fwd("touch foo 5 noreply\r\n"), "touch foo 5\r\n");
    ck_assert_str_eq(fwd("flush_all noreply\r\n"), "flush_all\r\n");
    ck_assert_str_eq(fwd("flush_all 0 noreply\r\n"), "flush_all 0\r\n");
    ck_assert_str_eq(fwd("mg foo q v\r\n"), "mg foo v\r\n");
    ck_assert_str_eq(fwd("mg foo v q\r\n"), "mg foo v\r\n");
    ck_assert_str_eq(fwd("ms foo 2 q T0\r\nhi\r\n"), "ms foo 2 T0\r\n");
    ck_assert_str_eq(fwd("md foo   q\r\n"), "md foo\r\n");
    ck_assert_str_eq(fwd("ma foo q\r\n"), "ma foo\r\n");
    /* Nothing else changes, "noreply" as a key included. */
    ck_assert_str_eq(fwd("get noreply\r\n"), "get noreply\r\n");
    ck_assert_str_eq(fwd("mg qkey v Oq\r\n"), "mg qkey v Oq\r\n");
}
END_TEST

/*
 * Join the requests of reqs (each a whole request) the way the core does:
 * forward() the first joinable one, join() each next one while it can.
 * Returns the server bytes; *njoined counts the requests joined.
 */
static char *join_all(const char *const *reqs, uint32_t n, uint32_t *njoined)
{
    static char out[8192];
    struct buf b;
    uint32_t open = 0;

    buf_init(&b);
    *njoined = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct preq x;
        parse_checked(&x, reqs[i], strlen(reqs[i]), 0, 0);
        ck_assert_int_gt(x.rc, 0);
        int rc = open > 0 && ops->joinable(&x.r) ? ops->join(&x.r, reqs[i], &b, open) : 0;
        ck_assert_int_ge(rc, 0);
        if (rc > 0) {
            open = (uint32_t)rc;
            (*njoined)++;
        } else {
            size_t before = buf_len(&b);
            ck_assert_int_eq(ops->forward(&x.r, reqs[i], &b), 0);
            open = ops->joinable(&x.r) ? (uint32_t)(buf_len(&b) - before) : 0;
        }
        proto_parser_free(&x.p);
    }
    ck_assert_uint_lt(buf_len(&b), sizeof(out));
    memcpy(out, buf_rptr(&b), buf_len(&b));
    out[buf_len(&b)] = '\0';
    buf_free(&b);
    return out;
}

START_TEST(test_join_single_key_gets)
{
    uint32_t nj;
    const char *three[] = { "get a\r\n", "get bb\n", "get  c  \r\n" };
    ck_assert_str_eq(join_all(three, 3, &nj), "get a bb c\r\n");
    ck_assert_uint_eq(nj, 2);
    /* Only plain single-key get joins; anything else ends the line. */
    const char *mixed[] = { "get a\r\n", "gets b\r\n", "get c\r\n", "get d e\r\n",
                            "get f\r\n", "mg g v\r\n", "get h\r\n", "get noreply\r\n" };
    ck_assert_str_eq(join_all(mixed, 8, &nj),
                     "get a\r\ngets b\r\nget c\r\nget d e\r\nget f\r\nmg g v\r\n"
                     "get h noreply\r\n");
    ck_assert_uint_eq(nj, 1);
    /* A line stops growing at MEMCACHE_JOIN_LINE_MAX bytes. */
    static char keys[40][260];
    const char *many[40];
    for (int i = 0; i < 40; i++) {
        snprintf(keys[i], sizeof(keys[i]), "get %0200d\r\n", i);
        many[i] = keys[i];
    }
    const char *out = join_all(many, 40, &nj);
    ck_assert_uint_eq(nj, 40 - 4);      /* 10 keys of 200 bytes fit a line of 2,048: 4 lines */
    const char *line = out;
    for (int n = 0; n < 4; n++) {
        const char *nl = strchr(line, '\n');
        ck_assert_ptr_nonnull(nl);
        ck_assert_uint_le((size_t)(nl + 1 - line), MEMCACHE_JOIN_LINE_MAX);
        ck_assert_int_eq(strncmp(line, "get ", 4), 0);
        line = nl + 1;
    }
    ck_assert_str_eq(line, "");
    /* join() refuses an open line that is not a get. */
    struct preq x;
    struct buf b;
    buf_init(&b);
    buf_set(&b, "set k 0 0 1\r\n");
    parse_checked(&x, "get z\r\n", 7, 0, 0);
    ck_assert_int_eq(ops->join(&x.r, "get z\r\n", &b, (uint32_t)buf_len(&b)), 0);
    ck_assert(buf_eq(&b, "set k 0 0 1\r\n"));
    proto_parser_free(&x.p);
    buf_free(&b);
}
END_TEST

START_TEST(test_frag_write)
{
    const char *s = "get a bb ccc dddd\r\n";
    struct preq *x = req(s);
    uint32_t idx[] = { 3, 1 };
    struct buf b;
    buf_init(&b);
    ck_assert_int_eq(ops->frag_write(&x->r, s, idx, 2, &b), 0);
    ck_assert_buf(&b, "get dddd bb\r\n");
    buf_free(&b);

    s = "gats  -5 k1 k2 k3\r\n";
    x = req(s);
    uint32_t idx2[] = { 0, 2 };
    buf_init(&b);
    ck_assert_int_eq(ops->frag_write(&x->r, s, idx2, 2, &b), 0);
    ck_assert_buf(&b, "gats -5 k1 k3\r\n");
    buf_free(&b);
}
END_TEST

/* Merge helper: request line s, fragment replies, key->fragment map. */
static int merge_run(const char *s, const char **replies, uint32_t nfrag, const uint32_t *kf,
                     struct buf *out)
{
    struct preq *x = req(s);
    struct buf fb[8];
    struct buf *fp[8];
    for (uint32_t f = 0; f < nfrag; f++) {
        buf_set(&fb[f], replies[f]);
        fp[f] = &fb[f];
    }
    buf_init(out);
    int rc = ops->merge(x->r.cmd, s, x->r.keys, x->r.nkeys, kf, fp, nfrag, out);
    for (uint32_t f = 0; f < nfrag; f++)
        buf_free(&fb[f]);
    return rc;
}

START_TEST(test_merge_orders_items_by_client_keys)
{
    /* keys a b c d: a,c on fragment 1; b,d on fragment 0; c is a miss. */
    const char *rep[] = {
        "VALUE b 0 2\r\nbb\r\nVALUE d 7 1 99\r\nd\r\nEND\r\n",
        "VALUE a 1 1\r\na\r\nEND\r\n",
    };
    uint32_t kf[] = { 1, 0, 1, 0 };
    struct buf out;
    ck_assert_int_eq(merge_run("get a b c d\r\n", rep, 2, kf, &out), 0);
    ck_assert_buf(&out, "VALUE a 1 1\r\na\r\nVALUE b 0 2\r\nbb\r\nVALUE d 7 1 99\r\nd\r\nEND\r\n");
    buf_free(&out);
}
END_TEST

START_TEST(test_merge_duplicates_and_misses)
{
    /* get x y x: x twice on fragment 0, y missing on fragment 1. */
    const char *rep[] = {
        "VALUE x 0 1\r\n1\r\nVALUE x 0 1\r\n1\r\nEND\r\n",
        "END\r\n",
    };
    uint32_t kf[] = { 0, 1, 0 };
    struct buf out;
    ck_assert_int_eq(merge_run("get x y x\r\n", rep, 2, kf, &out), 0);
    ck_assert_buf(&out, "VALUE x 0 1\r\n1\r\nVALUE x 0 1\r\n1\r\nEND\r\n");
    buf_free(&out);

    const char *none[] = { "END\r\n", "END\r\n" };
    ck_assert_int_eq(merge_run("get x y x\r\n", none, 2, kf, &out), 0);
    ck_assert_buf(&out, "END\r\n");
    buf_free(&out);

    /* A value whose data contains "END\r\n" and "VALUE" is not confused. */
    const char *tricky[] = { "VALUE x 0 12\r\nEND\r\nVALUE z\r\nEND\r\n", "END\r\n" };
    uint32_t kf2[] = { 0, 1 };
    ck_assert_int_eq(merge_run("get x y\r\n", tricky, 2, kf2, &out), 0);
    ck_assert_buf(&out, "VALUE x 0 12\r\nEND\r\nVALUE z\r\nEND\r\n");
    buf_free(&out);
}
END_TEST

START_TEST(test_merge_error_fragment)
{
    const char *rep[] = {
        "VALUE a 0 1\r\na\r\nEND\r\n",
        "SERVER_ERROR out of memory writing get response\r\n",
        "CLIENT_ERROR later\r\n",
    };
    uint32_t kf[] = { 0, 1, 2 };
    struct buf out;
    ck_assert_int_eq(merge_run("get a b c\r\n", rep, 3, kf, &out), 0);
    ck_assert_buf(&out, "SERVER_ERROR out of memory writing get response\r\n");
    buf_free(&out);
    /* An error after some items counts too. */
    const char *rep2[] = { "VALUE a 0 1\r\na\r\nSERVER_ERROR boom\r\n", "END\r\n" };
    ck_assert_int_eq(merge_run("get a b\r\n", rep2, 2, kf, &out), 0);
    ck_assert_buf(&out, "SERVER_ERROR boom\r\n");
    buf_free(&out);
}
END_TEST

START_TEST(test_merge_malformed)
{
    uint32_t kf[] = { 0, 1 };
    struct buf out;
    const char *trunc[] = { "VALUE a 0 5\r\nab", "END\r\n" };
    ck_assert_int_lt(merge_run("get a b\r\n", trunc, 2, kf, &out), 0);
    ck_assert_uint_eq(buf_len(&out), 0);
    buf_free(&out);
    const char *noend[] = { "VALUE a 0 1\r\na\r\n", "END\r\n" };
    ck_assert_int_lt(merge_run("get a b\r\n", noend, 2, kf, &out), 0);
    buf_free(&out);
    const char *stray[] = { "VALUE zz 0 1\r\na\r\nEND\r\n", "END\r\n" };   /* unasked key */
    ck_assert_int_lt(merge_run("get a b\r\n", stray, 2, kf, &out), 0);
    buf_free(&out);
    const char *junk[] = { "END\r\nextra", "END\r\n" };
    ck_assert_int_lt(merge_run("get a b\r\n", junk, 2, kf, &out), 0);
    buf_free(&out);
    const char *wrong[] = { "STORED\r\n", "END\r\n" };
    ck_assert_int_lt(merge_run("get a b\r\n", wrong, 2, kf, &out), 0);
    buf_free(&out);
}
END_TEST

START_TEST(test_merge_broadcast)
{
    struct buf fb[3], *fp[3], out;
    const char *ok[] = { "OK\r\n", "OK\r\n", "OK\r\n" };
    for (int i = 0; i < 3; i++) {
        buf_set(&fb[i], ok[i]);
        fp[i] = &fb[i];
    }
    buf_init(&out);
    ck_assert_int_eq(ops->merge(MEMCACHE_CMD_FLUSH_ALL, "flush_all\r\n", NULL, 0, NULL, fp, 3, &out), 0);
    ck_assert_buf(&out, "OK\r\n");
    buf_free(&out);
    buf_free(&fb[1]);
    buf_set(&fb[1], "SERVER_ERROR nope\r\n");
    buf_free(&fb[2]);
    buf_set(&fb[2], "ERROR\r\n");
    buf_init(&out);
    ck_assert_int_eq(ops->merge(MEMCACHE_CMD_FLUSH_ALL, "flush_all\r\n", NULL, 0, NULL, fp, 3, &out), 0);
    ck_assert_buf(&out, "SERVER_ERROR nope\r\n");
    buf_free(&out);
    buf_free(&fb[0]);
    buf_set(&fb[0], "OK");   /* no line at all */
    buf_init(&out);
    ck_assert_int_lt(ops->merge(MEMCACHE_CMD_FLUSH_ALL, "flush_all\r\n", NULL, 0, NULL, fp, 3, &out), 0);
    buf_free(&out);
    for (int i = 0; i < 3; i++)
        buf_free(&fb[i]);
}
END_TEST

/* ------------------------------------------------------------ replies */

START_TEST(test_rsp_retrieval)
{
    struct proto_rsp r;
    const char *s = "VALUE foo 5 3\r\nbar\r\n";
    ck_assert_int_eq(rsp(s, MEMCACHE_CMD_GET, PROTO_RF_RETRIEVAL, &r), 15);
    ck_assert_uint_eq(r.flags, PROTO_SF_ITEM);
    ck_assert_uint_eq(r.body_len, 5);
    ck_assert_uint_eq(r.key.off, 6);
    ck_assert_uint_eq(r.key.len, 3);
    ck_assert_int_eq(rsp("VALUE foo 5 3 12345\r\n", MEMCACHE_CMD_GETS, 0, &r), 21);
    ck_assert_uint_eq(r.flags, PROTO_SF_ITEM);
    ck_assert_int_eq(rsp("END\r\n", MEMCACHE_CMD_GET, 0, &r), 5);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL);
    ck_assert_uint_eq(r.body_len, 0);
    ck_assert_int_eq(rsp("END\n", MEMCACHE_CMD_GAT, 0, &r), 4);
    /* Malformed VALUE lines. */
    ck_assert_int_lt(rsp("VALUE foo 5\r\n", MEMCACHE_CMD_GET, 0, &r), 0);
    ck_assert_int_lt(rsp("VALUE foo x 3\r\n", MEMCACHE_CMD_GET, 0, &r), 0);
    ck_assert_int_lt(rsp("VALUE foo 5 4294967296\r\n", MEMCACHE_CMD_GET, 0, &r), 0);
    ck_assert_int_lt(rsp("VALUE foo 5 3 1 2\r\n", MEMCACHE_CMD_GET, 0, &r), 0);
    ck_assert_int_lt(rsp("VALUE  5 3\r\n", MEMCACHE_CMD_GET, 0, &r), 0);
    ck_assert_int_lt(rsp("STORED\r\n", MEMCACHE_CMD_GET, 0, &r), 0);
    ck_assert_int_eq(rsp("VALUE foo 5 3", MEMCACHE_CMD_GET, 0, &r), 0);
}
END_TEST

START_TEST(test_rsp_status_lines)
{
    struct proto_rsp r;
    static const struct { const char *line; uint16_t cmd; } ok[] = {
        { "STORED\r\n", MEMCACHE_CMD_SET }, { "NOT_STORED\r\n", MEMCACHE_CMD_ADD },
        { "EXISTS\r\n", MEMCACHE_CMD_CAS }, { "NOT_FOUND\r\n", MEMCACHE_CMD_CAS },
        { "DELETED\r\n", MEMCACHE_CMD_DELETE }, { "NOT_FOUND\r\n", MEMCACHE_CMD_DELETE },
        { "TOUCHED\r\n", MEMCACHE_CMD_TOUCH }, { "OK\r\n", MEMCACHE_CMD_FLUSH_ALL },
        { "42\r\n", MEMCACHE_CMD_INCR }, { "18446744073709551615\r\n", MEMCACHE_CMD_DECR },
        { "NOT_FOUND\r\n", MEMCACHE_CMD_INCR }, { "VERSION 1.6.18\r\n", MEMCACHE_CMD_VERSION },
        { "HD\r\n", MEMCACHE_CMD_MS }, { "NS O1\r\n", MEMCACHE_CMD_MS },
        { "EX\r\n", MEMCACHE_CMD_MS }, { "NF\r\n", MEMCACHE_CMD_MS },
        { "HD kfoo O9\r\n", MEMCACHE_CMD_MD }, { "NF\r\n", MEMCACHE_CMD_MD },
        { "EX\r\n", MEMCACHE_CMD_MD }, { "HD t-1\r\n", MEMCACHE_CMD_MA },
        { "NS\r\n", MEMCACHE_CMD_MA }, { "HD c1 f0\r\n", MEMCACHE_CMD_MG },
        { "MN\r\n", MEMCACHE_CMD_MN },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        ck_assert_int_eq(rsp(ok[i].line, ok[i].cmd, 0, &r), (int)strlen(ok[i].line));
        ck_assert_uint_eq(r.flags, PROTO_SF_FINAL);
        ck_assert_uint_eq(r.body_len, 0);
    }
    static const struct { const char *line; uint16_t cmd; } bad[] = {
        { "VALUE a 0 1\r\n", MEMCACHE_CMD_DELETE }, { "DELETED\r\n", MEMCACHE_CMD_SET },
        { "STORED\r\n", MEMCACHE_CMD_MS }, { "HD\r\n", MEMCACHE_CMD_SET },
        { "EN\r\n", MEMCACHE_CMD_MS }, { "VA 1\r\n", MEMCACHE_CMD_MD },
        { "42\r\n", MEMCACHE_CMD_DELETE }, { "42x\r\n", MEMCACHE_CMD_INCR },
        { "18446744073709551616\r\n", MEMCACHE_CMD_INCR }, { "HDX\r\n", MEMCACHE_CMD_MS },
        { "hello\r\n", MEMCACHE_CMD_GET }, { "\r\n", MEMCACHE_CMD_SET },
        { "STORED\r\n", MEMCACHE_CMD_COUNT }, { "VERSION\r\n", MEMCACHE_CMD_VERSION },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(rsp(bad[i].line, bad[i].cmd, 0, &r) < 0, "accepted %s", bad[i].line);
}
END_TEST

START_TEST(test_rsp_meta_values_and_quiet)
{
    struct proto_rsp r;
    ck_assert_int_eq(rsp("VA 2 f0 c9\r\nhi\r\n", MEMCACHE_CMD_MG, PROTO_RF_RETRIEVAL, &r), 12);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL);
    ck_assert_uint_eq(r.body_len, 4);
    ck_assert_int_eq(rsp("VA 1\r\n", MEMCACHE_CMD_MA, 0, &r), 6);
    ck_assert_uint_eq(r.body_len, 3);
    ck_assert_int_lt(rsp("VA x\r\n", MEMCACHE_CMD_MG, 0, &r), 0);
    ck_assert_int_lt(rsp("VA\r\n", MEMCACHE_CMD_MG, 0, &r), 0);
    ck_assert_int_eq(rsp("EN\r\n", MEMCACHE_CMD_MG, 0, &r), 4);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL);

    /* Quiet: what memcached 1.6.18 itself hides for each command. */
    uint16_t q = PROTO_RF_QUIET;
    rsp("EN\r\n", MEMCACHE_CMD_MG, q | PROTO_RF_RETRIEVAL, &r);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL | PROTO_SF_SUPPRESS);
    rsp("HD\r\n", MEMCACHE_CMD_MG, q, &r);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL);
    rsp("VA 1\r\n", MEMCACHE_CMD_MG, q, &r);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL);
    rsp("HD\r\n", MEMCACHE_CMD_MS, q, &r);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL | PROTO_SF_SUPPRESS);
    rsp("NS\r\n", MEMCACHE_CMD_MS, q, &r);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL);
    rsp("HD\r\n", MEMCACHE_CMD_MD, q, &r);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL | PROTO_SF_SUPPRESS);
    rsp("NF\r\n", MEMCACHE_CMD_MD, q, &r);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL);
    rsp("HD\r\n", MEMCACHE_CMD_MA, q, &r);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL | PROTO_SF_SUPPRESS);
    rsp("NF\r\n", MEMCACHE_CMD_MA, q, &r);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL);
    rsp("SERVER_ERROR x\r\n", MEMCACHE_CMD_MS, q, &r);
    ck_assert_uint_eq(r.flags, PROTO_SF_FINAL | PROTO_SF_ERROR);
}
END_TEST

START_TEST(test_rsp_errors_and_limits)
{
    struct proto_rsp r;
    static const char *errs[] = { "ERROR\r\n", "CLIENT_ERROR bad data chunk\r\n",
                                  "SERVER_ERROR out of memory\r\n", "SERVER_ERROR\r\n" };
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(rsp(errs[i], MEMCACHE_CMD_SET, 0, &r), (int)strlen(errs[i]));
        ck_assert_uint_eq(r.flags, PROTO_SF_FINAL | PROTO_SF_ERROR);
        ck_assert_int_eq(rsp(errs[i], MEMCACHE_CMD_GET, 0, &r), (int)strlen(errs[i]));
    }
    ck_assert_int_lt(rsp("ERRORS\r\n", MEMCACHE_CMD_SET, 0, &r), 0);
    ck_assert_int_lt(rsp("SERVER_ERRORx\r\n", MEMCACHE_CMD_SET, 0, &r), 0);

    /* A reply line longer than 8 KiB is garbage; a shorter one is awaited. */
    char *s = malloc(MEMCACHE_RSP_LINE_MAX + 1);
    memset(s, 'x', MEMCACHE_RSP_LINE_MAX + 1);
    memcpy(s, "SERVER_ERROR ", 13);
    struct proto_parser p;
    memset(&p, 0, sizeof(p));
    ck_assert_int_eq(ops->parse_rsp(&p, s, MEMCACHE_RSP_LINE_MAX - 1, MEMCACHE_CMD_SET, 0, &r), 0);
    ck_assert_int_lt(ops->parse_rsp(&p, s, MEMCACHE_RSP_LINE_MAX, MEMCACHE_CMD_SET, 0, &r), 0);
    free(s);
}
END_TEST

/* ------------------------------------------------------------ misc */

START_TEST(test_error_reply)
{
    static const struct { enum proto_err code; const char *reason; const char *want; } t[] = {
        { PROTO_ERR_TIMEOUT, NULL, "SERVER_ERROR timeout\r\n" },
        { PROTO_ERR_NOMEM, NULL, "SERVER_ERROR out of memory\r\n" },
        { PROTO_ERR_DOWN, "server 10.0.0.1:11211 is down", "SERVER_ERROR server 10.0.0.1:11211 is down\r\n" },
        { PROTO_ERR_SERVER, "connection reset", "SERVER_ERROR connection reset\r\n" },
        { PROTO_ERR_SERVER, "evil\r\nEND", "SERVER_ERROR evil  END\r\n" },
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct buf b;
        buf_init(&b);
        ck_assert_int_eq(ops->error_reply(t[i].code, t[i].reason, &b), 0);
        ck_assert_buf(&b, t[i].want);
        buf_free(&b);
    }
}
END_TEST

START_TEST(test_key_decode)
{
    char out[16];
    ck_assert_int_eq(memcache_key_decode("Zm9v", 4, out, sizeof(out)), 3);
    ck_assert_int_eq(memcmp(out, "foo", 3), 0);
    ck_assert_int_eq(memcache_key_decode("Zm8=", 4, out, sizeof(out)), 2);
    ck_assert_int_eq(memcmp(out, "fo", 2), 0);
    ck_assert_int_eq(memcache_key_decode("Zm8", 3, out, sizeof(out)), -1);  /* unpadded */
    ck_assert_int_eq(memcache_key_decode("Zg==", 4, out, sizeof(out)), 1);
    ck_assert_int_eq(out[0], 'f');
    ck_assert_int_eq(memcache_key_decode("AP8=", 4, out, sizeof(out)), 2);
    ck_assert_int_eq((unsigned char)out[1], 0xff);
    ck_assert_int_eq(memcache_key_decode("", 0, out, sizeof(out)), 0);
    ck_assert_int_eq(memcache_key_decode("Z", 1, out, sizeof(out)), -1);
    ck_assert_int_eq(memcache_key_decode("Zm9=v", 5, out, sizeof(out)), -1);
    ck_assert_int_eq(memcache_key_decode("Zm=v", 4, out, sizeof(out)), -1);
    ck_assert_int_eq(memcache_key_decode("Z===", 4, out, sizeof(out)), -1);
    ck_assert_int_eq(memcache_key_decode("Zm!v", 4, out, sizeof(out)), -1);
    ck_assert_int_eq(memcache_key_decode("Zh==", 4, out, sizeof(out)), 1);  /* stray bits ignored */
    ck_assert_int_eq(out[0], 'f');
    ck_assert_int_eq(memcache_key_decode("Zm9vYmFy", 8, out, 5), -1);        /* too small */
}
END_TEST

START_TEST(test_hello_and_probe)
{
    ck_assert_ptr_null(ops->server_hello);     /* optional: memcached needs none */
    ck_assert_str_eq(ops->probe, "version\r\n");
    ck_assert_str_eq(ops->name, "memcache");
    struct proto_rsp r;
    ck_assert_int_eq(rsp("VERSION 1.6.18\r\n", MEMCACHE_CMD_VERSION, 0, &r), 16);
    ck_assert_str_eq(memcache_cmd_name(MEMCACHE_CMD_GATS), "gats");
    ck_assert_ptr_null(memcache_cmd_name(MEMCACHE_CMD_NONE));
}
END_TEST


/* ------------------------------------------------------------ agreement with memcached */

/* forward() of s[0..len) (which may hold NULs), into out; its length. */
static size_t fwd_n(const char *s, size_t len, char *out, size_t cap, struct preq *x)
{
    parse_checked(x, s, len, 0, PROTO_PF_ALLOW_FLUSH);
    ck_assert_int_gt(x->rc, 0);
    struct buf b;
    buf_init(&b);
    ck_assert_int_eq(ops->forward(&x->r, s, &b), 0);
    size_t n = buf_len(&b);
    ck_assert_uint_lt(n, cap);
    memcpy(out, buf_rptr(&b), n);
    buf_free(&b);
    proto_parser_free(&x->p);       /* x->r's scalars stay valid, its keys do not */
    return n;
}

#define FWD_N(lit, out, x) fwd_n((lit), sizeof(lit) - 1, (out), sizeof(out), (x))

START_TEST(test_nul_ends_the_line_as_in_memcached)
{
    char out[256];
    struct preq x;
    size_t n;

    /* the attacker's line: memcached reads "incr atk 1 noreply" */
    n = FWD_N("incr atk 1 noreply\0\r\n", out, &x);
    ck_assert_int_eq(x.r.kind, PROTO_REQ_SINGLE);
    ck_assert(x.r.flags & PROTO_RF_NOREPLY);
    ck_assert_uint_eq(x.r.hdr_len, 21);
    ck_assert_uint_eq(n, 12);
    ck_assert_int_eq(memcmp(out, "incr atk 1\r\n", n), 0);

    n = FWD_N("get a\0b c\r\n", out, &x);
    ck_assert_uint_eq(x.r.nkeys, 1);
    ck_assert_int_eq(memcmp(out, "get a\r\n", n), 0);
    n = FWD_N("set k 0 0 1 noreply\0x\r\n", out, &x);
    ck_assert(x.r.flags & PROTO_RF_NOREPLY);
    ck_assert_uint_eq(x.r.body_len, 3);
    ck_assert_int_eq(memcmp(out, "set k 0 0 1\r\n", n), 0);
    n = FWD_N("delete k noreply\0\r\n", out, &x);
    ck_assert(x.r.flags & PROTO_RF_NOREPLY);
    ck_assert_int_eq(memcmp(out, "delete k\r\n", n), 0);
    n = FWD_N("touch k 10 noreply\0zz\r\n", out, &x);
    ck_assert(x.r.flags & PROTO_RF_NOREPLY);
    ck_assert_int_eq(memcmp(out, "touch k 10\r\n", n), 0);
    n = FWD_N("flush_all noreply\0\r\n", out, &x);
    ck_assert_int_eq(x.r.kind, PROTO_REQ_BROADCAST);
    ck_assert_int_eq(memcmp(out, "flush_all\r\n", n), 0);
    /* a q flag past the NUL is not a flag: the server answers */
    n = FWD_N("mg k v\0 q\r\n", out, &x);
    ck_assert(!(x.r.flags & PROTO_RF_QUIET));
    ck_assert_int_eq(memcmp(out, "mg k v\r\n", n), 0);

    /* memcached reads "set a": the wrong token count, nothing swallowed */
    static const char s1[] = "set a\0b 0 0 1\r\n";
    parse_checked(&x, s1, sizeof(s1) - 1, 0, 0);
    assert_err(&x, "ERROR\r\n");
    ck_assert_uint_eq(x.r.body_len, 0);
    static const char s2[] = "\0get a\r\n";
    parse_checked(&x, s2, sizeof(s2) - 1, 0, 0);
    assert_err(&x, "ERROR\r\n");
    /* "get a\r\0\n": the CR is not before the LF, so it is key "a\r": refused */
    static const char s3[] = "get a\r\0\n";
    parse_checked(&x, s3, sizeof(s3) - 1, 0, 0);
    assert_err(&x, "CLIENT_ERROR bad command line format\r\n");
    proto_parser_free(&x.p);
}
END_TEST

START_TEST(test_nul_at_every_position_of_noreply_lines)
{
    static const char *const lines[] = {
        "incr atk 1 noreply\r\n", "set k 0 0 1 noreply\r\n", "delete k noreply\r\n",
        "touch k 1 noreply\r\n", "decr k 5 noreply\r\n", "cas k 0 0 1 7 noreply\r\n",
    };
    for (size_t l = 0; l < sizeof(lines) / sizeof(lines[0]); l++) {
        size_t len = strlen(lines[l]);
        for (size_t at = 0; at + 2 <= len; at++) {
            char s[64];
            memcpy(s, lines[l], at);
            s[at] = '\0';
            memcpy(s + at + 1, lines[l] + at, len - at);
            struct preq x;
            parse_checked(&x, s, len + 1, 0, 0);
            ck_assert_int_gt(x.rc, 0);
            if (x.r.kind != PROTO_REQ_ERROR) {
                /* memcached reads lines[l][0..at): noreply iff it is all there */
                int all = at >= len - 2;
                ck_assert_int_eq(!!(x.r.flags & PROTO_RF_NOREPLY), all);
                struct buf b;
                buf_init(&b);
                ck_assert_int_eq(ops->forward(&x.r, s, &b), 0);
                ck_assert_ptr_null(memchr(buf_rptr(&b), '\0', buf_len(&b)));
                ck_assert(memmem(buf_rptr(&b), buf_len(&b), "noreply", 7) == NULL);
                buf_free(&b);
            }
            proto_parser_free(&x.p);
        }
    }
}
END_TEST

START_TEST(test_numbers_as_memcached_reads_them)
{
    struct preq *x;
    const char *bad = "CLIENT_ERROR bad command line format\r\n";

    /* strtol/strtoul forms memcached 1.6.18 accepts (measured) */
    x = req("set k +0 +0 +1\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.body_len, 3);
    x = req("set k 0 0 01\r\n");
    ck_assert_uint_eq(x->r.body_len, 3);
    x = req("set k 0 0 -0\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    ck_assert_uint_eq(x->r.body_len, 2);
    x = req("set k 0 -5 1\r\n");                   /* negative exptime: expired */
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    x = req("incr k +1\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    x = req("incr k -0\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    x = req("touch k +10\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    x = req("cas k 0 0 1 +1\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);
    x = req("ms k +1\r\n");
    ck_assert_uint_eq(x->r.body_len, 3);
    x = req("gat +10 k\r\n");
    ck_assert_int_eq(x->r.kind, PROTO_REQ_SINGLE);

    /* refused: what memcached would truncate or read up to a blank */
    x = req("set k 4294967296 0 1\r\n");          /* memcached stores flags 0 */
    assert_err(x, bad);
    x = req("set k 0 0 99999999999\r\n");         /* ... a length of 1215752191 */
    assert_err(x, bad);
    ck_assert_uint_eq(x->r.body_len, 0);
    x = req("set k 0 2147483648 1\r\n");
    assert_err(x, bad);
    x = req("set k 0 0 1\t\r\n");                 /* memcached stops at the tab */
    assert_err(x, bad);
    x = req("set k 0 0 0x1\r\n");
    assert_err(x, bad);
    x = req("set k 0 0 -1\r\n");
    assert_err(x, bad);
    x = req("set k -1 0 1\r\n");
    assert_err(x, bad);
    x = req("set k 0 0 +\r\n");
    assert_err(x, bad);
    x = req("incr k -1\r\n");
    assert_err(x, "CLIENT_ERROR invalid numeric delta argument\r\n");
    x = req("incr k 18446744073709551616\r\n");
    assert_err(x, "CLIENT_ERROR invalid numeric delta argument\r\n");
    x = req("touch k 2147483648\r\n");
    assert_err(x, "CLIENT_ERROR invalid exptime argument\r\n");
    x = req("delete k 00\r\n");                   /* memcached: only "0" itself */
    assert_err(x, "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n");
}
END_TEST

START_TEST(test_cr_lf_variants)
{
    struct preq *x;
    x = req("get a\n");                            /* bare LF ends a line */
    assert_key(x, "get a\n", 0, "a");
    x = req("\r\n");
    assert_err(x, "ERROR\r\n");
    x = req("\n");
    assert_err(x, "ERROR\r\n");
    x = req("get a\rb\r\n");                       /* a CR inside: key "a\rb" */
    assert_err(x, "CLIENT_ERROR bad command line format\r\n");
    x = req("get a \r\n");                         /* trailing space */
    ck_assert_uint_eq(x->r.nkeys, 1);
    x = req("  get   a  b \r\n");                  /* spaces anywhere */
    ck_assert_uint_eq(x->r.nkeys, 2);
    x = req("get\ta\r\n");                         /* a tab does not separate */
    assert_err(x, "ERROR\r\n");
}
END_TEST

START_TEST(test_retrieval_lines_up_to_1mib)
{
    /* nutcracker's 1,500-key get_many, then 10,000 keys in ~1 MiB */
    uint32_t counts[] = { 1500, 10000 };
    for (size_t c = 0; c < 2; c++) {
        size_t cap = 16 + (size_t)counts[c] * 105;
        char *s = malloc(cap);
        size_t n = (size_t)sprintf(s, c ? "gets" : "get");
        for (uint32_t i = 0; i < counts[c]; i++)
            n += (size_t)sprintf(s + n, " %0100u", i);
        n += (size_t)sprintf(s + n, "\r\n");
        ck_assert_uint_le(n, MEMCACHE_RETRIEVAL_LINE_MAX);
        struct preq x;
        preq_init(&x, 0, 0);
        for (size_t have = 1000; have < n; have += 7777)
            ck_assert_int_eq(ops->parse_req(&x.p, s, have, &x.r), 0);
        ck_assert_int_eq(ops->parse_req(&x.p, s, n, &x.r), (int)n);
        ck_assert_int_eq(x.r.kind, PROTO_REQ_FANOUT);
        ck_assert_uint_eq(x.r.nkeys, counts[c]);
        proto_parser_free(&x.p);
        free(s);
    }

    /* gat/gats keep memcached's 2 KiB line: it closes on a longer one */
    char *s = malloc(4096);
    size_t n = (size_t)sprintf(s, "gat 10");
    while (n < 3000)
        n += (size_t)sprintf(s + n, " key%zu", n);
    struct preq x;
    preq_init(&x, 0, 0);
    ck_assert_int_lt(ops->parse_req(&x.p, s, n, &x.r), 0);
    assert_err(&x, "CLIENT_ERROR line too long\r\n");
    /* so does a get that memcached would not know as one: over 100 spaces first */
    memset(s, ' ', 200);
    memcpy(s + 200, "get ", 4);
    memset(s + 204, 'k', 50);
    for (size_t i = 260; i < 3000; i += 60)
        memset(s + i - 6, ' ', 1);
    preq_init(&x, 0, 0);
    ck_assert_int_lt(ops->parse_req(&x.p, s, 3000, &x.r), 0);
    proto_parser_free(&x.p);
    free(s);

    /* more keys than the parser keeps */
    size_t cap = 8 + (MEMCACHE_RETRIEVAL_KEYS_MAX + 1) * 2 + 4;
    s = malloc(cap);
    n = (size_t)sprintf(s, "get");
    for (uint32_t i = 0; i <= MEMCACHE_RETRIEVAL_KEYS_MAX; i++) {
        s[n++] = ' ';
        s[n++] = 'k';
    }
    n += (size_t)sprintf(s + n, "\r\n");
    preq_init(&x, 0, 0);
    ck_assert_int_eq(ops->parse_req(&x.p, s, n, &x.r), (int)n);
    assert_err(&x, "CLIENT_ERROR too many keys\r\n");
    proto_parser_free(&x.p);
    free(s);
}
END_TEST

START_TEST(test_binary_protocol_closes_silently)
{
    static const char bin[] = "\x80\x01\x00\x05\x00\x00\x00\x00";
    struct preq x;
    parse_checked(&x, bin, sizeof(bin) - 1, 0, 0);
    ck_assert_int_lt(x.rc, 0);
    ck_assert_int_eq(x.r.kind, PROTO_REQ_ERROR);
    ck_assert_uint_eq(x.r.err_len, 0);              /* no text reply */
    ck_assert_ptr_nonnull(x.r.why);                 /* a reason to log */
    ck_assert(x.r.flags & PROTO_RF_CLOSE);
    proto_parser_free(&x.p);
}
END_TEST

START_TEST(test_key_bytes_decodes_meta_base64)
{
    char dec[PROTO_KEY_DECODED_MAX];
    size_t len;
    const char *s = "mg Zm9vYmFy b v\r\n";
    struct preq *x = req(s);
    const char *k = ops->key_bytes(&x->r, s, 0, dec, &len);
    ck_assert_uint_eq(len, 6);
    ck_assert_int_eq(memcmp(k, "foobar", 6), 0);
    s = "get a\x10 bb\r\n";
    x = req(s);
    k = ops->key_bytes(&x->r, s, 1, dec, &len);
    ck_assert_ptr_eq(k, s + 7);
    ck_assert_uint_eq(len, 2);
}
END_TEST

START_TEST(test_merge_refuses_an_empty_fragment)
{
    const char *r[] = { "", "END\r\n" };
    uint32_t kf[] = { 0, 1 };
    struct buf out;
    ck_assert_int_eq(merge_run("get a b\r\n", r, 2, kf, &out), -1);
    buf_free(&out);
    struct buf empty, *fp[1] = { &empty };
    buf_init(&empty);                               /* never allocated */
    buf_init(&out);
    ck_assert_int_eq(ops->merge(MEMCACHE_CMD_FLUSH_ALL, "", NULL, 0, NULL, fp, 1, &out), -1);
    buf_free(&out);
}
END_TEST

static Suite *memcache_suite(void)
{
    Suite *s = suite_create("memcache");
    TCase *tc = tcase_create("requests");
    tcase_add_test(tc, test_storage_commands);
    tcase_add_test(tc, test_storage_noreply_bare_newline_and_negative_exptime);
    tcase_add_test(tc, test_storage_errors_swallow_nothing_like_memcached);
    tcase_add_test(tc, test_storage_key_rules);
    tcase_add_test(tc, test_item_size_max);
    tcase_add_test(tc, test_get_single_and_multi);
    tcase_add_test(tc, test_get_errors);
    tcase_add_test(tc, test_get_many_keys_long_line);
    tcase_add_test(tc, test_line_too_long);
    tcase_add_test(tc, test_delete_incr_touch);
    tcase_add_test(tc, test_meta_commands);
    tcase_add_test(tc, test_meta_errors);
    tcase_add_test(tc, test_local_commands);
    tcase_add_test(tc, test_long_get_with_oversized_token_waits_for_its_line);
    tcase_add_test(tc, test_local_replies);
    tcase_add_test(tc, test_flush_all);
    tcase_add_test(tc, test_unknown_and_empty);
    tcase_add_test(tc, test_pipelined_requests);
    suite_add_tcase(s, tc);
    tc = tcase_create("forwarding");
    tcase_add_test(tc, test_forward_strips_noreply_and_q);
    tcase_add_test(tc, test_frag_write);
    tcase_add_test(tc, test_join_single_key_gets);
    tcase_add_test(tc, test_merge_orders_items_by_client_keys);
    tcase_add_test(tc, test_merge_duplicates_and_misses);
    tcase_add_test(tc, test_merge_error_fragment);
    tcase_add_test(tc, test_merge_malformed);
    tcase_add_test(tc, test_merge_broadcast);
    suite_add_tcase(s, tc);
    tc = tcase_create("replies");
    tcase_add_test(tc, test_rsp_retrieval);
    tcase_add_test(tc, test_rsp_status_lines);
    tcase_add_test(tc, test_rsp_meta_values_and_quiet);
    tcase_add_test(tc, test_rsp_errors_and_limits);
    tcase_add_test(tc, test_error_reply);
    tcase_add_test(tc, test_key_decode);
    tcase_add_test(tc, test_hello_and_probe);
    tcase_add_test(tc, test_nul_ends_the_line_as_in_memcached);
    tcase_add_test(tc, test_nul_at_every_position_of_noreply_lines);
    tcase_add_test(tc, test_numbers_as_memcached_reads_them);
    tcase_add_test(tc, test_cr_lf_variants);
    tcase_add_test(tc, test_retrieval_lines_up_to_1mib);
    tcase_add_test(tc, test_binary_protocol_closes_silently);
    tcase_add_test(tc, test_key_bytes_decodes_meta_base64);
    tcase_add_test(tc, test_merge_refuses_an_empty_fragment);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(memcache_suite)
