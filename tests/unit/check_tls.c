/* Unit tests for the TLS transport: two transports wired back to back in memory (no socket, no loop), and context building. */
#include "config.h"

#include "check_main.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "conf/conf.h"
#include "proxy/conn.h"
#include "proxy/tls.h"

/* ------------------------------------------------------------------ certificates
 * Made here with OpenSSL's API into a temporary directory: a CA, a leaf it
 * signs for "localhost" / 127.0.0.1, a self-signed stranger, an expired leaf. */

/* The fixture runs before the tests (Check's asserts work only inside them). */
static void need(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "check_tls: making the test certificates failed at %s\n", what);
        ERR_print_errors_fp(stderr);
        exit(EXIT_FAILURE);
    }
}

static char dir[64];
static char ca_crt[128], leaf_crt[128], leaf_key[128], other_key[128], stranger_crt[128],
    stranger_key[128], expired_crt[128];

static void write_pem(const char *path, X509 *x, EVP_PKEY *k)
{
    FILE *f = fopen(path, "w");
    need(f != NULL, path);
    if (x != NULL)
        need(PEM_write_X509(f, x) == 1, path);
    if (k != NULL)
        need(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) == 1, path);
    fclose(f);
}

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    need(e != NULL, value);
    X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
}

/* A certificate for key, signed by (issuer, signer), or self-signed. */
static X509 *make_cert(EVP_PKEY *key, X509 *issuer, EVP_PKEY *signer, const char *cn,
                       long serial, long from_days, long to_days, int ca)
{
    X509 *x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
    X509_gmtime_adj(X509_getm_notBefore(x), from_days * 86400L);
    X509_gmtime_adj(X509_getm_notAfter(x), to_days * 86400L);
    X509_set_pubkey(x, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                               (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, X509_get_subject_name(issuer != NULL ? issuer : x));
    if (ca) {
        add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign");
    } else {
        add_ext(x, issuer != NULL ? issuer : x, NID_subject_alt_name,
                "DNS:localhost,IP:127.0.0.1");
    }
    need(X509_sign(x, signer != NULL ? signer : key, EVP_sha256()) > 0, cn);
    return x;
}

static void certs_make(void)
{
    snprintf(dir, sizeof(dir), "/tmp/check_tls.XXXXXX");
    need(mkdtemp(dir) != NULL, dir);
    snprintf(ca_crt, sizeof(ca_crt), "%s/ca.crt", dir);
    snprintf(leaf_crt, sizeof(leaf_crt), "%s/leaf.crt", dir);
    snprintf(leaf_key, sizeof(leaf_key), "%s/leaf.key", dir);
    snprintf(other_key, sizeof(other_key), "%s/other.key", dir);
    snprintf(stranger_crt, sizeof(stranger_crt), "%s/stranger.crt", dir);
    snprintf(stranger_key, sizeof(stranger_key), "%s/stranger.key", dir);
    snprintf(expired_crt, sizeof(expired_crt), "%s/expired.crt", dir);

    EVP_PKEY *cak = EVP_EC_gen("P-256"), *lk = EVP_EC_gen("P-256"), *ok = EVP_EC_gen("P-256"),
             *sk = EVP_EC_gen("P-256");
    X509 *ca = make_cert(cak, NULL, NULL, "check CA", 1, 0, 30, 1);
    X509 *leaf = make_cert(lk, ca, cak, "localhost", 2, 0, 30, 0);
    X509 *stranger = make_cert(sk, NULL, NULL, "localhost", 3, 0, 30, 0);
    X509 *expired = make_cert(lk, ca, cak, "localhost", 4, -10, -1, 0);
    write_pem(ca_crt, ca, NULL);
    write_pem(leaf_crt, leaf, NULL);
    write_pem(leaf_key, NULL, lk);
    write_pem(other_key, NULL, ok);
    write_pem(stranger_crt, stranger, NULL);
    write_pem(stranger_key, NULL, sk);
    write_pem(expired_crt, expired, NULL);
    X509_free(ca);
    X509_free(leaf);
    X509_free(stranger);
    X509_free(expired);
    EVP_PKEY_free(cak);
    EVP_PKEY_free(lk);
    EVP_PKEY_free(ok);
    EVP_PKEY_free(sk);
}

static void certs_remove(void)
{
    const char *files[] = { ca_crt, leaf_crt, leaf_key, other_key, stranger_crt, stranger_key,
                            expired_crt };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        unlink(files[i]);
    rmdir(dir);
}

/* ------------------------------------------------------------------ a pair */

struct side {
    struct conn c;          /* first: the events callback finds the side from the conn */
    int hs_calls;
    int hs_status;
};

static void on_handshake(struct conn *c, int status)
{
    struct side *s = (struct side *)(void *)c;
    s->hs_calls++;
    s->hs_status = status;
}

static const struct conn_events events = { .on_handshake = on_handshake };

static struct conf_tls settings(const char *cert, const char *key, const char *ca)
{
    struct conf_tls t;
    memset(&t, 0, sizeof(t));
    t.cert = (char *)cert;
    t.key = (char *)key;
    t.ca = (char *)ca;
    t.verify = 1;
    t.min_version = 12;
    t.section = cert != NULL && ca == NULL ? "tls" : "server_tls";
    t.at.line = t.at_cert.line = t.at_key.line = t.at_ca.line = 1;
    t.at.col = t.at_cert.col = t.at_key.col = t.at_ca.col = 1;
    return t;
}

static struct tls_ctx *ctx_accept(void)
{
    char err[512];
    struct conf_tls t = settings(leaf_crt, leaf_key, NULL);
    struct tls_ctx *ctx = tls_ctx_build("check.yml", "p", &t, TLS_ROLE_ACCEPT, err, sizeof(err));
    ck_assert_msg(ctx != NULL, "%s", err);
    return ctx;
}

static struct tls_ctx *ctx_connect(const char *ca)
{
    char err[512];
    struct conf_tls t = settings(NULL, NULL, ca);
    struct tls_ctx *ctx = tls_ctx_build("check.yml", "p", &t, TLS_ROLE_CONNECT, err, sizeof(err));
    ck_assert_msg(ctx != NULL, "%s", err);
    return ctx;
}

static void side_init(struct side *s)
{
    memset(s, 0, sizeof(*s));
    s->c.ev = &events;
    s->c.tp = &transport_plain;
    s->c.fd = -1;
}

/* Move up to `step` ciphertext bytes (0: all) from one side's tx to the
 * other's rx and let it decode. Returns what decode returned (0 when there
 * was nothing to move). */
static ssize_t deliver(struct side *from, struct side *to, size_t step)
{
    struct buf *tx = from->c.tp->tx(&from->c), *rx = to->c.tp->rx(&to->c);
    size_t n = buf_len(tx);
    if (n == 0)
        return 0;
    if (step != 0 && step < n)
        n = step;
    ck_assert_int_eq(buf_append(rx, buf_rptr(tx), n), 0);
    buf_consume(tx, n);
    return to->c.tp->decode(&to->c);
}

/* Exchange flights until neither side handshakes or nothing moves. */
static void handshake(struct side *cl, struct side *sv, size_t step)
{
    ck_assert_int_eq(cl->c.tp->encode(&cl->c), 0);     /* the ClientHello */
    for (int round = 0; round < 10000; round++) {
        struct buf *ctx_ = cl->c.tp->tx(&cl->c), *stx = sv->c.tp->tx(&sv->c);
        if (buf_len(ctx_) == 0 && buf_len(stx) == 0)
            break;
        ck_assert_int_ge(deliver(cl, sv, step), 0);
        ck_assert_int_ge(deliver(sv, cl, step), 0);
    }
}

/* Plaintext from one side to the other: write, encode, move, decode. */
static void send_plain(struct side *from, struct side *to, const char *p, size_t n)
{
    ck_assert_int_eq(buf_append(&from->c.obuf, p, n), 0);
    while (buf_len(&from->c.obuf) > 0 || buf_len(from->c.tp->tx(&from->c)) > 0) {
        ck_assert_int_eq(from->c.tp->encode(&from->c), 0);
        ck_assert_int_ge(deliver(from, to, 0), 0);
    }
}

static void pair_up(struct side *cl, struct side *sv, struct tls_ctx *cctx, struct tls_ctx *sctx,
                    const char *peer, struct tls_session *cache)
{
    side_init(cl);
    side_init(sv);
    ck_assert_int_eq(tls_attach(&sv->c, sctx, NULL, NULL, 1000), 0);
    ck_assert_int_eq(tls_attach(&cl->c, cctx, peer, cache, 1000), 0);
    ck_assert(tls_is(&cl->c) && tls_is(&sv->c));
    ck_assert(conn_handshaking(&cl->c) && conn_handshaking(&sv->c));
}

/* Contexts and a pair that finished its handshake (bytes moved `step` at a time). */
static void pair_open(struct side *cl, struct side *sv, struct tls_ctx **cctx,
                      struct tls_ctx **sctx, const char *peer, size_t step)
{
    *sctx = ctx_accept();
    *cctx = ctx_connect(ca_crt);
    pair_up(cl, sv, *cctx, *sctx, peer, NULL);
    handshake(cl, sv, step);
}

static void pair_close(struct side *cl, struct side *sv, struct tls_ctx *cctx,
                       struct tls_ctx *sctx)
{
    conn_release(&cl->c);
    conn_release(&sv->c);
    tls_ctx_free(cctx);
    tls_ctx_free(sctx);
}

/* ------------------------------------------------------------------ tests */

START_TEST(test_handshake_then_plaintext_both_ways)
{
    struct tls_ctx *sctx, *cctx;
    struct side cl, sv;
    pair_open(&cl, &sv, &cctx, &sctx, "localhost", 0);
    ck_assert(!conn_handshaking(&cl.c) && !conn_handshaking(&sv.c));
    ck_assert_int_eq(cl.hs_calls, 1);
    ck_assert_int_eq(cl.hs_status, 0);
    ck_assert_int_eq(sv.hs_calls, 1);
    ck_assert_int_eq(sv.hs_status, 0);
    ck_assert(!tls_resumed(&cl.c));
    ck_assert(!tls_expired(&cl.c, 5000));          /* done: no deadline any more */

    send_plain(&cl, &sv, "get k\r\n", 7);
    ck_assert_uint_eq(buf_len(&sv.c.ibuf), 7);
    ck_assert_int_eq(memcmp(buf_rptr(&sv.c.ibuf), "get k\r\n", 7), 0);
    send_plain(&sv, &cl, "END\r\n", 5);
    ck_assert_uint_eq(buf_len(&cl.c.ibuf), 5);
    ck_assert_int_eq(memcmp(buf_rptr(&cl.c.ibuf), "END\r\n", 5), 0);

    pair_close(&cl, &sv, cctx, sctx);
}
END_TEST

START_TEST(test_one_byte_at_a_time)
{
    struct tls_ctx *sctx, *cctx;
    struct side cl, sv;
    pair_open(&cl, &sv, &cctx, &sctx, "127.0.0.1", 1);
    ck_assert(!conn_handshaking(&cl.c) && !conn_handshaking(&sv.c));
    /* A record fed a byte at a time yields nothing until it is whole. */
    ck_assert_int_eq(buf_append(&cl.c.obuf, "version\r\n", 9), 0);
    ck_assert_int_eq(cl.c.tp->encode(&cl.c), 0);
    size_t total = buf_len(cl.c.tp->tx(&cl.c));
    ck_assert_uint_gt(total, 9);
    for (size_t i = 0; i + 1 < total; i++)
        ck_assert_int_eq(deliver(&cl, &sv, 1), 0);
    ck_assert_int_eq(deliver(&cl, &sv, 1), 9);
    ck_assert_int_eq(memcmp(buf_rptr(&sv.c.ibuf), "version\r\n", 9), 0);
    pair_close(&cl, &sv, cctx, sctx);
}
END_TEST

START_TEST(test_large_transfer_in_bounded_encodes)
{
    struct tls_ctx *sctx, *cctx;
    struct side cl, sv;
    pair_open(&cl, &sv, &cctx, &sctx, "localhost", 0);
    size_t n = 3u << 20;
    char *big = malloc(n);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)(i * 7 + (i >> 11));
    ck_assert_int_eq(buf_append(&sv.c.obuf, big, n), 0);
    ck_assert_int_eq(sv.c.tp->encode(&sv.c), 0);
    /* One encode takes a bounded part: the rest waits in obuf for the next. */
    ck_assert_uint_gt(buf_len(&sv.c.obuf), 0);
    ck_assert_uint_lt(buf_len(sv.c.tp->tx(&sv.c)), 1u << 20);
    while (buf_len(&sv.c.obuf) > 0 || buf_len(sv.c.tp->tx(&sv.c)) > 0) {
        ck_assert_int_eq(sv.c.tp->encode(&sv.c), 0);
        ck_assert_int_ge(deliver(&sv, &cl, 100000), 0);
    }
    ck_assert_uint_eq(buf_len(&cl.c.ibuf), n);
    ck_assert_int_eq(memcmp(buf_rptr(&cl.c.ibuf), big, n), 0);
    free(big);
    pair_close(&cl, &sv, cctx, sctx);
}
END_TEST

START_TEST(test_session_resumed_from_the_slot)
{
    struct tls_ctx *sctx = ctx_accept(), *cctx = ctx_connect(ca_crt);
    struct tls_session slot = { NULL, NULL };
    struct side cl, sv;
    pair_up(&cl, &sv, cctx, sctx, "localhost", &slot);
    handshake(&cl, &sv, 0);
    send_plain(&sv, &cl, "x", 1);       /* the ticket came with the first flight after */
    ck_assert_ptr_nonnull(slot.sess);
    /* conn_close's orderly end: a connection released without its close_notify
     * (reset, failed) leaves a session OpenSSL marks as not to be resumed. */
    cl.c.tp->shutdown(&cl.c);
    conn_release(&cl.c);
    conn_release(&sv.c);

    pair_up(&cl, &sv, cctx, sctx, "localhost", &slot);
    handshake(&cl, &sv, 0);
    ck_assert(!conn_handshaking(&cl.c));
    ck_assert(tls_resumed(&cl.c));
    ck_assert(tls_resumed(&sv.c));
    cl.c.tp->shutdown(&cl.c);
    conn_release(&cl.c);
    conn_release(&sv.c);

    /* A slot filled under another context is not offered. */
    struct tls_ctx *cctx2 = ctx_connect(ca_crt);
    pair_up(&cl, &sv, cctx2, sctx, "localhost", &slot);
    handshake(&cl, &sv, 0);
    ck_assert(!conn_handshaking(&cl.c));
    ck_assert(!tls_resumed(&cl.c));
    conn_release(&cl.c);
    conn_release(&sv.c);

    tls_session_clear(&slot);
    ck_assert_ptr_null(slot.sess);
    tls_ctx_free(cctx2);
    tls_ctx_free(cctx);
    tls_ctx_free(sctx);
}
END_TEST

START_TEST(test_wrong_name_fails_verification)
{
    struct tls_ctx *sctx = ctx_accept(), *cctx = ctx_connect(ca_crt);
    struct side cl, sv;
    const char *reason, *detail;
    pair_up(&cl, &sv, cctx, sctx, "cache.elsewhere", NULL);
    ck_assert_int_eq(cl.c.tp->encode(&cl.c), 0);
    ck_assert_int_eq(deliver(&cl, &sv, 0), 0);
    ck_assert_int_eq(deliver(&sv, &cl, 0), UV_EPROTO);
    ck_assert_int_eq(cl.hs_calls, 1);
    ck_assert_int_eq(cl.hs_status, -1);
    ck_assert_int_eq(tls_failure(&cl.c, &reason, &detail), TLS_FAIL_VERIFY);
    ck_assert_str_eq(reason, "tls: certificate verify failed");
    ck_assert_ptr_nonnull(strstr(detail, "mismatch"));
    ck_assert(conn_handshaking(&cl.c));     /* failed: nothing flows */
    ck_assert_int_eq(cl.c.tp->encode(&cl.c), UV_EPROTO);
    pair_close(&cl, &sv, cctx, sctx);
}
END_TEST

START_TEST(test_untrusted_server_fails_verification)
{
    char err[512];
    struct conf_tls t = settings(stranger_crt, stranger_key, NULL);
    struct tls_ctx *sctx = tls_ctx_build("c.yml", "p", &t, TLS_ROLE_ACCEPT, err, sizeof(err));
    struct tls_ctx *cctx = ctx_connect(ca_crt);
    struct side cl, sv;
    ck_assert_ptr_nonnull(sctx);
    pair_up(&cl, &sv, cctx, sctx, "localhost", NULL);
    ck_assert_int_eq(cl.c.tp->encode(&cl.c), 0);
    deliver(&cl, &sv, 0);
    ck_assert_int_eq(deliver(&sv, &cl, 0), UV_EPROTO);
    ck_assert_int_eq(tls_failure(&cl.c, NULL, NULL), TLS_FAIL_VERIFY);
    /* the alert tells the server, which counts a refused certificate too */
    ck_assert_int_lt(deliver(&cl, &sv, 0), 0);
    ck_assert_int_eq(tls_failure(&sv.c, NULL, NULL), TLS_FAIL_VERIFY);
    pair_close(&cl, &sv, cctx, sctx);
}
END_TEST

START_TEST(test_plaintext_gets_no_reply)
{
    struct tls_ctx *sctx = ctx_accept();
    struct side sv;
    side_init(&sv);
    ck_assert_int_eq(tls_attach(&sv.c, sctx, NULL, NULL, 1000), 0);
    struct buf *rx = sv.c.tp->rx(&sv.c);
    ck_assert_int_eq(buf_append(rx, "get foo\r\n", 9), 0);
    ck_assert_int_eq(sv.c.tp->decode(&sv.c), UV_EPROTO);
    ck_assert_uint_eq(buf_len(sv.c.tp->tx(&sv.c)), 0);   /* not even an alert */
    ck_assert_int_eq(tls_failure(&sv.c, NULL, NULL), TLS_FAIL_PROTOCOL);
    ck_assert_int_eq(sv.hs_status, -1);
    conn_release(&sv.c);
    tls_ctx_free(sctx);
}
END_TEST

START_TEST(test_garbage_after_handshake_and_close_notify)
{
    struct tls_ctx *sctx, *cctx;
    struct side cl, sv;
    pair_open(&cl, &sv, &cctx, &sctx, "localhost", 0);
    struct buf *rx = sv.c.tp->rx(&sv.c);
    ck_assert_int_eq(buf_append(rx, "\x17\x03\x03\x00\x10garbagegarbage!!", 21), 0);
    ck_assert_int_eq(sv.c.tp->decode(&sv.c), UV_EPROTO);
    ck_assert_int_eq(tls_failure(&sv.c, NULL, NULL), TLS_FAIL_PROTOCOL);
    ck_assert(conn_handshaking(&sv.c));
    /* the client's orderly close reaches the other side as EOF */
    struct side sv2;
    side_init(&sv2);
    ck_assert_int_eq(tls_attach(&sv2.c, sctx, NULL, NULL, 1000), 0);
    conn_release(&cl.c);
    side_init(&cl);
    ck_assert_int_eq(tls_attach(&cl.c, cctx, "localhost", NULL, 1000), 0);
    handshake(&cl, &sv2, 0);
    cl.c.tp->shutdown(&cl.c);
    ck_assert_uint_gt(buf_len(cl.c.tp->tx(&cl.c)), 0);
    ck_assert_int_eq(deliver(&cl, &sv2, 0), UV_EOF);
    conn_release(&cl.c);
    conn_release(&sv.c);
    conn_release(&sv2.c);
    tls_ctx_free(cctx);
    tls_ctx_free(sctx);
}
END_TEST

START_TEST(test_deadline)
{
    struct tls_ctx *sctx = ctx_accept();
    struct side sv;
    const char *reason;
    side_init(&sv);
    ck_assert_int_eq(tls_attach(&sv.c, sctx, NULL, NULL, 1000), 0);
    ck_assert(!tls_expired(&sv.c, 999));
    ck_assert(tls_expired(&sv.c, 1000));
    ck_assert_int_eq(tls_failure(&sv.c, &reason, NULL), TLS_FAIL_TIMEOUT);
    ck_assert_str_eq(reason, "tls: handshake timed out");
    conn_release(&sv.c);
    struct conn plain;
    memset(&plain, 0, sizeof(plain));
    plain.tp = &transport_plain;
    ck_assert(!tls_expired(&plain, 1u << 30));
    tls_ctx_free(sctx);
}
END_TEST

/* tls_ctx_build's message for settings s: NULL when it builds. */
static const char *build_error(struct conf_tls *s, enum tls_role role, char *err, size_t n)
{
    s->at_cert = (struct conf_pos){ 4, 11 };
    s->at_key = (struct conf_pos){ 5, 10 };
    s->at_ca = (struct conf_pos){ 6, 9 };
    struct tls_ctx *ctx = tls_ctx_build("pools.yml", "p", s, role, err, n);
    if (ctx == NULL)
        return err;
    tls_ctx_free(ctx);
    return NULL;
}

START_TEST(test_context_errors_name_the_key_and_place)
{
    char err[600];
    struct conf_tls t = settings("/nonexistent/x.crt", leaf_key, NULL);
    const char *e = build_error(&t, TLS_ROLE_ACCEPT, err, sizeof(err));
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e, "pools.yml:4:11: key 'tls.cert': cannot read '/nonexistent/x.crt': "
                        "No such file or directory");

    t = settings(leaf_crt, other_key, NULL);
    e = build_error(&t, TLS_ROLE_ACCEPT, err, sizeof(err));
    ck_assert_ptr_nonnull(e);
    ck_assert_msg(strstr(e, "pools.yml:5:10: key 'tls.key': the key in") == e &&
                  strstr(e, "does not match the certificate"), "%s", e);

    t = settings(expired_crt, leaf_key, NULL);
    e = build_error(&t, TLS_ROLE_ACCEPT, err, sizeof(err));
    ck_assert_ptr_nonnull(e);
    ck_assert_msg(strstr(e, "pools.yml:4:11: key 'tls.cert':") == e && strstr(e, "expired"),
                  "%s", e);

    t = settings(NULL, NULL, leaf_key);   /* a key is no CA bundle */
    e = build_error(&t, TLS_ROLE_CONNECT, err, sizeof(err));
    ck_assert_ptr_nonnull(e);
    ck_assert_msg(strstr(e, "pools.yml:6:9: key 'server_tls.ca':") == e, "%s", e);

    t = settings(leaf_crt, leaf_key, NULL);
    t.ciphers = (char *)"NO-SUCH-CIPHER";
    t.at_ciphers = (struct conf_pos){ 7, 14 };
    e = build_error(&t, TLS_ROLE_ACCEPT, err, sizeof(err));
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e, "pools.yml:7:14: key 'tls.ciphers': no cipher matches 'NO-SUCH-CIPHER'");

    /* a good one, and what it says about its certificates */
    t = settings(leaf_crt, leaf_key, ca_crt);
    t.client_auth = 1;
    struct tls_ctx *ctx = tls_ctx_build("pools.yml", "p", &t, TLS_ROLE_ACCEPT, err, sizeof(err));
    ck_assert_msg(ctx != NULL, "%s", err);
    struct tls_cert_info ci[TLS_CTX_FILES_MAX];
    ck_assert_uint_eq(tls_ctx_certs(ctx, ci, TLS_CTX_FILES_MAX), 2);
    ck_assert_str_eq(ci[0].key, "tls.cert");
    ck_assert_str_eq(ci[1].key, "tls.ca");
    ck_assert_int_gt(ci[0].not_after, (int64_t)time(NULL) + 29 * 86400);
    ck_assert_int_lt(ci[0].not_after, (int64_t)time(NULL) + 31 * 86400);
    tls_ctx_free(ctx);
}
END_TEST

START_TEST(test_conf_reads_tls_sections)
{
    const char *yml =
        "mc:\n"
        "  listen: 127.0.0.1:1\n"
        "  servers:\n"
        "    - 127.0.0.1:2:1\n"
        "  tls:\n"
        "    cert: /a.crt\n"
        "    key: /a.key\n"
        "    min_version: \"1.3\"\n"
        "  server_tls:\n"
        "    verify: false\n"
        "    server_name: cache.internal\n"
        "ringleader:\n"
        "  tls_handshake_timeout: 2\n";
    struct conf *conf;
    char err[512];
    ck_assert_msg(conf_load_buffer("t.yml", yml, strlen(yml), &conf, err, sizeof(err)) == 0, "%s",
                  err);
    const struct conf_pool *p = &conf->pools[0];
    ck_assert_ptr_nonnull(p->tls);
    ck_assert_str_eq(p->tls->cert, "/a.crt");
    ck_assert_int_eq(p->tls->min_version, 13);
    ck_assert_int_eq(p->tls->at_cert.line, 6);
    ck_assert_int_eq(p->tls->at_cert.col, 11);
    ck_assert_ptr_nonnull(p->server_tls);
    ck_assert_int_eq(p->server_tls->verify, 0);
    ck_assert_int_eq(p->server_tls->min_version, 12);
    ck_assert_str_eq(p->server_tls->server_name, "cache.internal");
    ck_assert_int_eq(conf->global.tls_handshake_timeout_s, 2);
    conf_free(conf);

    const char *bad[][2] = {
        { "  tls:\n    cert: /a.crt\n", "t.yml:6:5: key 'tls': a TLS listener needs cert and key (key missing)" },
        { "  tls:\n    cert: /a.crt\n    key: /a.key\n    verify: false\n",
          "t.yml:8:5: key 'tls': 'verify' is a key of server_tls, not of tls" },
        { "  server_tls:\n    client_auth: true\n",
          "t.yml:6:5: key 'server_tls': 'client_auth' is a key of tls, not of server_tls" },
        { "  server_tls:\n    key: /k\n", "t.yml:6:5: key 'server_tls': cert and key go together (cert is missing)" },
        { "  tls:\n    cert: /a\n    key: /b\n    min_version: \"1.1\"\n",
          "t.yml:8:18: key 'min_version': '1.1' is not one of: 1.2, 1.3; did you mean '1.2'?" },
        { "  tls: yes\n", "t.yml:5:8: key 'tls': expected a mapping of TLS settings (cert, key, ca, ...), found a single value" },
        { "  tls:\n    crt: /a\n", "t.yml:6:5: key 'crt': unknown tls key; did you mean 'cert'?" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[512];
        snprintf(text, sizeof(text), "mc:\n  listen: 127.0.0.1:1\n  servers:\n    - 127.0.0.1:2:1\n%s",
                 bad[i][0]);
        ck_assert_int_eq(conf_load_buffer("t.yml", text, strlen(text), &conf, err, sizeof(err)), -1);
        ck_assert_str_eq(err, bad[i][1]);
    }
}
END_TEST

static Suite *tls_suite(void)
{
    Suite *s = suite_create("tls");
    TCase *tc = tcase_create("transport");
    tcase_add_test(tc, test_handshake_then_plaintext_both_ways);
    tcase_add_test(tc, test_one_byte_at_a_time);
    tcase_add_test(tc, test_large_transfer_in_bounded_encodes);
    tcase_add_test(tc, test_session_resumed_from_the_slot);
    tcase_add_test(tc, test_wrong_name_fails_verification);
    tcase_add_test(tc, test_untrusted_server_fails_verification);
    tcase_add_test(tc, test_plaintext_gets_no_reply);
    tcase_add_test(tc, test_garbage_after_handshake_and_close_notify);
    tcase_add_test(tc, test_deadline);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("contexts");
    tcase_add_test(tk, test_context_errors_name_the_key_and_place);
    tcase_add_test(tk, test_conf_reads_tls_sections);
    suite_add_tcase(s, tk);
    return s;
}

int main(void)
{
    certs_make();
    int failed = check_run(tls_suite(), CK_FORK_GETENV);
    certs_remove();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
