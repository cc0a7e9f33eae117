/* TLS: contexts from a pool's settings, and a transport that runs OpenSSL over the connection's own buffers (no socket BIO). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "conf/conf.h"
#include "lib/invariant.h"
#include "proxy/conn.h"
#include "proxy/tls.h"
#include "lib/util.h"

/*
 * Where the bytes go.
 *
 *   socket --uv_read--> t->rx --tls_bio_read--> SSL --SSL_read--> c->ibuf
 *   c->obuf --SSL_write--> SSL --tls_bio_write--> t->tx --send/uv_write--> socket
 *
 * The BIO is ours: it reads from t->rx and appends to t->tx, so OpenSSL never
 * touches the socket and never blocks; conn.c does every syscall (transport.h).
 * A memory BIO pair would add a copy in each direction for nothing.
 */

#define TLS_READ_ROOM  16384        /* plaintext room reserved in ibuf per SSL_read */
#define TLS_ENCODE_MAX (256u << 10) /* plaintext encrypted per encode: tx stays bounded */
#define TLS_AUTH_SUM   32           /* SHA-256 of what admits a client certificate */
#define TLS_CA_READ_MAX (16u << 20) /* a CA file larger than this: its first bytes summed */

struct tls_ctx {
    SSL_CTX             *ssl;
    enum tls_role        role;
    int                  verify;        /* connect: verify the server's certificate */
    int                  client_auth;   /* accept: a client certificate is required */
    unsigned char        auth_sum[TLS_AUTH_SUM];   /* accept: client_auth and the ca file's
                                                      bytes: equal sums admit alike */
    struct tls_cert_info certs[TLS_CTX_FILES_MAX];
    size_t               ncerts;
};

enum tls_state {
    TLS_HANDSHAKE,  /* no plaintext flows yet */
    TLS_OPEN,
    TLS_FAILED      /* the handshake or a record failed: nothing more flows */
};

struct tls_conn {
    SSL                *ssl;
    struct buf          rx;             /* ciphertext read, not yet taken by OpenSSL */
    struct buf          tx;             /* ciphertext to send */
    struct tls_session *cache;          /* connect: where sessions are kept */
    uint64_t            deadline_ms;    /* the handshake's */
    uint64_t            produced;       /* ciphertext bytes OpenSSL wrote, ever */
    enum tls_state      state;
    enum tls_fail       why;
    uint8_t             role;
    uint8_t             resumed;
    unsigned char       auth_sum[TLS_AUTH_SUM];    /* accept: the rules its certificate
                                                      was (or is being) checked under */
    char                detail[160];    /* OpenSSL's words for the failure */
};

/* ------------------------------------------------------------------ the BIO */

static BIO_METHOD *tls_bio_method;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static int tls_bio_write(BIO *b, const char *p, int n)
{
    struct tls_conn *t = BIO_get_data(b);

    BIO_clear_retry_flags(b);
    if (n <= 0)
        return 0;
    if (buf_append(&t->tx, p, (size_t)n) < 0)
        return -1;
    t->produced += (uint64_t)n;
    return n;
}

static int tls_bio_read(BIO *b, char *p, int n)
{
    struct tls_conn *t = BIO_get_data(b);
    size_t have = buf_len(&t->rx);

    BIO_clear_retry_flags(b);
    if (have == 0) {
        BIO_set_retry_read(b);     /* the socket's EOF reaches the owner through uv_read */
        return -1;
    }
    size_t k = (size_t)n < have ? (size_t)n : have;
    memcpy(p, buf_rptr(&t->rx), k);
    buf_consume(&t->rx, k);
    return (int)k;
}

static long tls_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    struct tls_conn *t = BIO_get_data(b);

    (void)num;
    (void)ptr;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;                   /* conn.c sends tx when the owner flushes */
    case BIO_CTRL_PENDING:
        return (long)buf_len(&t->rx);
    case BIO_CTRL_WPENDING:
        return (long)buf_len(&t->tx);
    default:
        return 0;
    }
}

static int tls_bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static void tls_init_once(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ringleader conn");
    if (m == NULL)
        return;
    BIO_meth_set_write(m, tls_bio_write);
    BIO_meth_set_read(m, tls_bio_read);
    BIO_meth_set_ctrl(m, tls_bio_ctrl);
    BIO_meth_set_create(m, tls_bio_create);
    tls_bio_method = m;
}

/* ------------------------------------------------------------------ contexts */

/* The first queued OpenSSL error as text ("" when none), and the queue cleared. */
static const char *tls_errtext(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();
    buf[0] = '\0';
    if (e != 0) {
        const char *r = ERR_reason_error_string(e);
        if (r != NULL)
            snprintf(buf, len, "%s", r);
        else
            ERR_error_string_n(e, buf, len);
    }
    ERR_clear_error();
    return buf;
}

/* "FILE:LINE:COL: key 'section.name': " + fmt into err. Always NULL. */
static void *tls_fail_at(char *err, size_t errlen, const char *file, const struct conf_tls *t,
                         const struct conf_pos *at, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static void *tls_fail_at(char *err, size_t errlen, const char *file, const struct conf_tls *t,
                         const struct conf_pos *at, const char *key, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(err, errlen, "%s:%d:%d: key '%s%s%s': ", file, at->line, at->col,
                     t->section, key ? "." : "", key ? key : "");
    if (n < 0 || (size_t)n >= errlen)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return NULL;
}

/* Whether path can be opened for reading; else errno's text in why. */
static int tls_readable(const char *path, char *why, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, len, "cannot read '%s': %s", path, strerror(errno));
        return 0;
    }
    fclose(f);
    return 1;
}

static int64_t tls_asn1_unix(const ASN1_TIME *t)
{
    struct tm tm;
    if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1)
        return 0;
    return (int64_t)timegm(&tm);
}

/* The earliest notAfter of the PEM certificates in path (0 when none). */
static int64_t tls_file_expiry(const char *path)
{
    BIO *b = BIO_new_file(path, "r");
    int64_t min = 0;
    X509 *x;

    if (b == NULL)
        return 0;
    while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL) {
        int64_t na = tls_asn1_unix(X509_get0_notAfter(x));
        if (na != 0 && (min == 0 || na < min))
            min = na;
        X509_free(x);
    }
    ERR_clear_error();              /* the end of the file reads as an error */
    BIO_free(b);
    return min;
}

/* The certificate and key (and the check that they belong together and the
 * certificate is valid now). */
static void *tls_ctx_identity(struct tls_ctx *ctx, const char *file, const struct conf_tls *t,
                              char *err, size_t errlen)
{
    char why[300], ossl[200];

    if (!tls_readable(t->cert, why, sizeof(why)))
        return tls_fail_at(err, errlen, file, t, &t->at_cert, "cert", "%s", why);
    if (!tls_readable(t->key, why, sizeof(why)))
        return tls_fail_at(err, errlen, file, t, &t->at_key, "key", "%s", why);
    if (SSL_CTX_use_certificate_chain_file(ctx->ssl, t->cert) != 1)
        return tls_fail_at(err, errlen, file, t, &t->at_cert, "cert",
                           "'%s' is not a PEM certificate chain: %s", t->cert,
                           tls_errtext(ossl, sizeof(ossl)));
    X509 *leaf = SSL_CTX_get0_certificate(ctx->ssl);
    if (X509_cmp_current_time(X509_get0_notAfter(leaf)) <= 0)
        return tls_fail_at(err, errlen, file, t, &t->at_cert, "cert",
                           "the certificate in '%s' has expired", t->cert);
    if (X509_cmp_current_time(X509_get0_notBefore(leaf)) >= 0)
        return tls_fail_at(err, errlen, file, t, &t->at_cert, "cert",
                           "the certificate in '%s' is not valid yet", t->cert);
    if (SSL_CTX_use_PrivateKey_file(ctx->ssl, t->key, SSL_FILETYPE_PEM) != 1) {
        unsigned long e = ERR_peek_error();
        if (ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH) {
            ERR_clear_error();
            return tls_fail_at(err, errlen, file, t, &t->at_key, "key",
                               "the key in '%s' does not match the certificate in '%s'",
                               t->key, t->cert);
        }
        return tls_fail_at(err, errlen, file, t, &t->at_key, "key",
                           "'%s' is not a PEM private key: %s", t->key,
                           tls_errtext(ossl, sizeof(ossl)));
    }
    if (SSL_CTX_check_private_key(ctx->ssl) != 1) {
        ERR_clear_error();
        return tls_fail_at(err, errlen, file, t, &t->at_key, "key",
                           "the key in '%s' does not match the certificate in '%s'", t->key,
                           t->cert);
    }
    ctx->certs[ctx->ncerts++] = (struct tls_cert_info){
        .key = ctx->role == TLS_ROLE_ACCEPT ? "tls.cert" : "server_tls.cert",
        .path = t->cert, .not_after = tls_asn1_unix(X509_get0_notAfter(leaf)) };
    return ctx;
}

/* Session resumption of server connections: OpenSSL hands every session
 * (TLS 1.3: every ticket) the server gives us here; the latest is kept in
 * the server's slot for its next connection. */
static int tls_new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
    struct tls_conn *t = SSL_get_app_data(ssl);
    struct tls_session *slot = t != NULL ? t->cache : NULL;

    if (slot == NULL || !SSL_SESSION_is_resumable(sess))
        return 0;
    SSL_CTX *sc = SSL_get_SSL_CTX(ssl);
    if (slot->ctx != sc) {
        SSL_CTX_up_ref(sc);
        SSL_CTX_free(slot->ctx);
        slot->ctx = sc;
    }
    SSL_SESSION_free(slot->sess);
    slot->sess = sess;
    return 1;                       /* we keep the reference */
}

void tls_session_clear(struct tls_session *s)
{
    SSL_SESSION_free(s->sess);
    SSL_CTX_free(s->ctx);
    s->sess = NULL;
    s->ctx = NULL;
}

/* The sum of what admits a client (accept contexts): client_auth, and the bytes of the
 * ca file (a reload that rewrites the file under the same name changes it). */
static void tls_auth_sum(const struct conf_tls *t, unsigned char out[TLS_AUTH_SUM])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char flag = t->client_auth ? 1 : 0, chunk[16384];
    unsigned int n = 0;
    size_t total = 0;

    memset(out, 0, TLS_AUTH_SUM);
    out[0] = flag;                  /* without memory: the flag alone tells them apart */
    if (md == NULL)
        return;
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1 || EVP_DigestUpdate(md, &flag, 1) != 1)
        goto out;
    FILE *f = t->client_auth && t->ca != NULL ? fopen(t->ca, "rb") : NULL;
    if (f != NULL) {
        size_t k;
        while (total < TLS_CA_READ_MAX && (k = fread(chunk, 1, sizeof(chunk), f)) > 0) {
            EVP_DigestUpdate(md, chunk, k);
            total += k;
        }
        fclose(f);
    }
    if (EVP_DigestFinal_ex(md, out, &n) != 1)
        memset(out + 1, 0, TLS_AUTH_SUM - 1);
out:
    EVP_MD_CTX_free(md);
    ERR_clear_error();
}

struct tls_ctx *tls_ctx_build(const char *file, const char *pool, const struct conf_tls *t,
                              enum tls_role role, char *err, size_t errlen)
{
    char why[300], ossl[200];
    struct tls_ctx *ctx;

    pthread_once(&tls_once, tls_init_once);
    if (tls_bio_method == NULL || (ctx = calloc(1, sizeof(*ctx))) == NULL) {
        snprintf(err, errlen, "pool '%s': %s: out of memory", pool, t->section);
        return NULL;
    }
    ctx->role = role;
    ctx->verify = t->verify;
    ERR_clear_error();
    ctx->ssl = SSL_CTX_new(role == TLS_ROLE_ACCEPT ? TLS_server_method() : TLS_client_method());
    if (ctx->ssl == NULL) {
        tls_fail_at(err, errlen, file, t, &t->at, NULL, "cannot create a TLS context: %s",
                    tls_errtext(ossl, sizeof(ossl)));
        goto fail_ctx;
    }
    SSL_CTX_set_min_proto_version(ctx->ssl, t->min_version == 13 ? TLS1_3_VERSION
                                                                 : TLS1_2_VERSION);
    SSL_CTX_set_options(ctx->ssl, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    /* The BIO appends whatever it is given: OpenSSL may write from a buffer
     * that moved between calls (obuf compacts). */
    SSL_CTX_set_mode(ctx->ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
    if (t->ciphers != NULL && SSL_CTX_set_cipher_list(ctx->ssl, t->ciphers) != 1) {
        ERR_clear_error();
        tls_fail_at(err, errlen, file, t, &t->at_ciphers, "ciphers",
                    "no cipher matches '%s'", t->ciphers);
        goto fail_ssl;
    }
    if (t->ciphersuites != NULL && SSL_CTX_set_ciphersuites(ctx->ssl, t->ciphersuites) != 1) {
        ERR_clear_error();
        tls_fail_at(err, errlen, file, t, &t->at_ciphersuites, "ciphersuites",
                    "no TLS 1.3 cipher suite matches '%s'", t->ciphersuites);
        goto fail_ssl;
    }
    if (t->cert != NULL && tls_ctx_identity(ctx, file, t, err, errlen) == NULL)
        goto fail_ssl;
    int want_ca = role == TLS_ROLE_ACCEPT ? t->client_auth : t->verify;
    if (t->ca != NULL && want_ca) {
        if (!tls_readable(t->ca, why, sizeof(why))) {
            tls_fail_at(err, errlen, file, t, &t->at_ca, "ca", "%s", why);
            goto fail_ssl;
        }
        if (SSL_CTX_load_verify_locations(ctx->ssl, t->ca, NULL) != 1) {
            tls_fail_at(err, errlen, file, t, &t->at_ca, "ca",
                        "'%s' holds no PEM certificate: %s", t->ca,
                        tls_errtext(ossl, sizeof(ossl)));
            goto fail_ssl;
        }
        ctx->certs[ctx->ncerts++] = (struct tls_cert_info){
            .key = role == TLS_ROLE_ACCEPT ? "tls.ca" : "server_tls.ca",
            .path = t->ca, .not_after = tls_file_expiry(t->ca) };
    } else if (want_ca && SSL_CTX_set_default_verify_paths(ctx->ssl) != 1) {
        tls_fail_at(err, errlen, file, t, &t->at, NULL,
                    "cannot load the system's trust store: %s", tls_errtext(ossl, sizeof(ossl)));
        goto fail_ssl;
    }
    if (role == TLS_ROLE_ACCEPT) {
        /* Clients resume with stateless tickets (one per handshake), valid on
         * every worker: no session cache, so no lock shared by the workers. */
        unsigned char sid[SSL_MAX_SID_CTX_LENGTH];
        size_t n = strlen(pool) < sizeof(sid) ? strlen(pool) : sizeof(sid);
        memcpy(sid, pool, n);
        SSL_CTX_set_session_id_context(ctx->ssl, sid, (unsigned)n);
        SSL_CTX_set_session_cache_mode(ctx->ssl, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_num_tickets(ctx->ssl, 1);
        SSL_CTX_set_options(ctx->ssl, SSL_OP_CIPHER_SERVER_PREFERENCE);
        ctx->client_auth = t->client_auth;
        tls_auth_sum(t, ctx->auth_sum);
        if (t->client_auth) {
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(t->ca);
            if (names != NULL)
                SSL_CTX_set_client_CA_list(ctx->ssl, names);
            ERR_clear_error();
            SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        } else {
            SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_NONE, NULL);
        }
    } else {
        SSL_CTX_set_verify(ctx->ssl, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
        SSL_CTX_set_session_cache_mode(ctx->ssl, SSL_SESS_CACHE_CLIENT |
                                                 SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(ctx->ssl, tls_new_session_cb);
    }
    return ctx;

fail_ssl:
    SSL_CTX_free(ctx->ssl);
fail_ctx:
    free(ctx);
    return NULL;
}

void tls_ctx_free(struct tls_ctx *ctx)
{
    if (ctx == NULL)
        return;
    SSL_CTX_free(ctx->ssl);       /* connections still open hold their own references */
    free(ctx);
}

size_t tls_ctx_certs(const struct tls_ctx *ctx, struct tls_cert_info *out, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; ctx != NULL && i < ctx->ncerts && k < n; i++)
        out[k++] = ctx->certs[i];
    return k;
}

int tls_conf_check(const struct conf *conf, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        for (int side = 0; side < 2; side++) {
            const struct conf_tls *t = side ? cp->server_tls : cp->tls;
            if (t == NULL)
                continue;
            struct tls_ctx *ctx = tls_ctx_build(conf->path, cp->name, t,
                                                side ? TLS_ROLE_CONNECT : TLS_ROLE_ACCEPT,
                                                err, errlen);
            if (ctx == NULL)
                return -1;
            tls_ctx_free(ctx);
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ failures */

static const char *const tls_fail_texts[] = {
    [TLS_FAIL_NONE] = "tls: ok",
    [TLS_FAIL_VERIFY] = "tls: certificate verify failed",
    [TLS_FAIL_PROTOCOL] = "tls: protocol error",
    [TLS_FAIL_CLOSED] = "tls: connection closed during the handshake",
    [TLS_FAIL_TIMEOUT] = "tls: handshake timed out",
    [TLS_FAIL_OTHER] = "tls: handshake failed",
};

const char *tls_fail_text(enum tls_fail why)
{
    return tls_fail_texts[why];
}

/* Reasons that mean a certificate was refused, by us or by the peer's alert. */
static int tls_reason_is_cert(int r)
{
    switch (r) {
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
    case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
        return 1;
    default:
        return 0;
    }
}

/* The handshake or a record failed with SSL_get_error() `e`: classify,
 * remember OpenSSL's words, stop the connection's traffic. */
static void tls_failed(struct tls_conn *t, int e)
{
    unsigned long err = ERR_peek_error();
    long vr = SSL_get_verify_result(t->ssl);
    int in_hs = t->state == TLS_HANDSHAKE;

    RL_ASSERT(t->state != TLS_FAILED);      /* nothing flows after a failure to fail again */
    if (in_hs && vr != X509_V_OK) {
        t->why = TLS_FAIL_VERIFY;
        snprintf(t->detail, sizeof(t->detail), "%s", X509_verify_cert_error_string(vr));
    } else if (err == 0 && (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN)) {
        t->why = in_hs ? TLS_FAIL_CLOSED : TLS_FAIL_PROTOCOL;
        snprintf(t->detail, sizeof(t->detail), "%s",
                 e == SSL_ERROR_ZERO_RETURN ? "closed by the peer" : "unexpected end");
    } else if (ERR_GET_LIB(err) == ERR_LIB_SSL && tls_reason_is_cert(ERR_GET_REASON(err))) {
        t->why = TLS_FAIL_VERIFY;
    } else if (ERR_GET_REASON(err) == ERR_R_MALLOC_FAILURE) {
        t->why = TLS_FAIL_OTHER;
    } else {
        t->why = TLS_FAIL_PROTOCOL;
    }
    if (err != 0 && t->detail[0] == '\0')
        tls_errtext(t->detail, sizeof(t->detail));
    ERR_clear_error();
    t->state = TLS_FAILED;
}

enum tls_fail tls_failure(const struct conn *c, const char **reason, const char **detail)
{
    const struct tls_conn *t = c->tpd;
    enum tls_fail why = t != NULL ? t->why : TLS_FAIL_OTHER;

    if (why == TLS_FAIL_NONE)
        why = TLS_FAIL_OTHER;
    if (reason != NULL)
        *reason = tls_fail_texts[why];
    if (detail != NULL)
        *detail = t != NULL && t->detail[0] ? t->detail : "no detail";
    return why;
}

int tls_resumed(const struct conn *c)
{
    const struct tls_conn *t = c->tpd;
    return t != NULL && t->resumed;
}

int tls_expired(const struct conn *c, uint64_t now_ms)
{
    const struct tls_conn *t = c->tpd;
    if (!tls_is(c) || t == NULL || t->state != TLS_HANDSHAKE || now_ms < t->deadline_ms)
        return 0;
    ((struct tls_conn *)c->tpd)->why = TLS_FAIL_TIMEOUT;   /* what tls_failure says now */
    return 1;
}

/* ------------------------------------------------------------------ the transport */

static void tls_notify(struct conn *c, int status)
{
    if (c->ev->on_handshake != NULL)
        c->ev->on_handshake(c, status);
}

/* One step of the handshake: 1 done now, 0 wants more bytes, -1 failed
 * (the owner has been told either way). */
static int tls_handshake_step(struct conn *c, struct tls_conn *t)
{
    uint64_t before = t->produced;
    RL_ASSERT(t->state == TLS_HANDSHAKE);   /* a handshake is stepped until it ends, once */
    int r = SSL_do_handshake(t->ssl);

    if (r == 1) {
        t->state = TLS_OPEN;
        t->resumed = (uint8_t)(SSL_session_reused(t->ssl) == 1);
        tls_notify(c, 0);
        return 1;
    }
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    tls_failed(t, e);
    /* A listener that never said anything answers nothing: plaintext sent
     * to a TLS port gets no bytes back, not even an alert. */
    if (t->role == TLS_ROLE_ACCEPT && before == 0)
        t->tx.rpos = t->tx.wpos = 0;
    tls_notify(c, -1);
    return -1;
}

static struct buf *tls_rx(struct conn *c)
{
    return &((struct tls_conn *)c->tpd)->rx;
}

static struct buf *tls_tx(struct conn *c)
{
    return &((struct tls_conn *)c->tpd)->tx;
}

/* Ciphertext arrived in rx: handshake, then decrypt every whole record into
 * ibuf. Plaintext bytes added, or UV_EOF (close_notify), UV_EPROTO. */
static ssize_t tls_decode(struct conn *c)
{
    struct tls_conn *t = c->tpd;
    ssize_t total = 0;

    if (t->state == TLS_HANDSHAKE) {
        int r = tls_handshake_step(c, t);
        if (r <= 0)
            return r < 0 ? UV_EPROTO : 0;
    }
    if (t->state != TLS_OPEN)
        return UV_EPROTO;
    for (;;) {
        if (buf_reserve(&c->ibuf, TLS_READ_ROOM) < 0)
            return UV_ENOMEM;
        size_t room = buf_room(&c->ibuf);
        int n = SSL_read(t->ssl, buf_wptr(&c->ibuf), room > INT32_MAX ? INT32_MAX : (int)room);
        if (n > 0) {
            buf_produce(&c->ibuf, (size_t)n);
            total += n;
            continue;
        }
        int e = SSL_get_error(t->ssl, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return total;
        if (e == SSL_ERROR_ZERO_RETURN)         /* close_notify: an orderly end */
            return total > 0 ? total : UV_EOF;
        tls_failed(t, e);
        return total > 0 ? total : UV_EPROTO;
    }
}

/* obuf's plaintext into tx (at most TLS_ENCODE_MAX of it per call, so the
 * ciphertext waiting in memory stays bounded; conn_flush calls again once
 * tx went out). A connecting side's first call sends the ClientHello. */
static int tls_encode(struct conn *c)
{
    struct tls_conn *t = c->tpd;

    if (t->state == TLS_HANDSHAKE) {
        if (t->role == TLS_ROLE_CONNECT && tls_handshake_step(c, t) < 0)
            return UV_EPROTO;
        if (t->state != TLS_OPEN)
            return 0;               /* obuf waits for the handshake */
    }
    if (t->state != TLS_OPEN)
        return UV_EPROTO;
    size_t done = 0;
    while (buf_len(&c->obuf) > 0 && done < TLS_ENCODE_MAX) {
        size_t len = buf_len(&c->obuf);
        int n = SSL_write(t->ssl, buf_rptr(&c->obuf), len > INT32_MAX ? INT32_MAX : (int)len);
        if (n <= 0) {
            int e = SSL_get_error(t->ssl, n);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
                return 0;
            tls_failed(t, e);
            return UV_EPROTO;
        }
        buf_consume(&c->obuf, (size_t)n);
        done += (size_t)n;
    }
    return 0;
}

static int tls_handshaking(const struct conn *c)
{
    return ((const struct tls_conn *)c->tpd)->state != TLS_OPEN;
}

static void tls_shutdown(struct conn *c)
{
    struct tls_conn *t = c->tpd;

    if (t->state == TLS_OPEN) {
        (void)SSL_shutdown(t->ssl);     /* close_notify into tx; no answer awaited */
        ERR_clear_error();
    }
}

static void tls_release(struct conn *c)
{
    struct tls_conn *t = c->tpd;

    if (t == NULL)
        return;
    SSL_free(t->ssl);                   /* and the BIO, and its SSL_CTX reference */
    buf_free(&t->rx);
    buf_free(&t->tx);
    free(t);
}

const struct transport transport_tls = {
    .name = "tls",
    .rx = tls_rx,
    .decode = tls_decode,
    .tx = tls_tx,
    .encode = tls_encode,
    .handshaking = tls_handshaking,
    .shutdown = tls_shutdown,
    .release = tls_release,
};

/* Whether s is an IPv4 or IPv6 literal. */
static int tls_is_ip(const char *s)
{
    unsigned char tmp[16];
    return inet_pton(AF_INET, s, tmp) == 1 || inet_pton(AF_INET6, s, tmp) == 1;
}

int tls_attach(struct conn *c, const struct tls_ctx *ctx, const char *peer,
               struct tls_session *cache, uint64_t deadline_ms)
{
    struct tls_conn *t = calloc(1, sizeof(*t));
    BIO *bio = NULL;

    /* Attached once, before the first byte: a second would leak the first's state
     * and drop the bytes its buffers hold. */
    RL_ASSERT(c->tpd == NULL && c->tp == &transport_plain);
    if (t == NULL)
        return -ENOMEM;
    t->ssl = SSL_new(ctx->ssl);
    if (t->ssl == NULL)
        goto fail_conn;
    bio = BIO_new(tls_bio_method);
    if (bio == NULL)
        goto fail_ssl;
    BIO_set_data(bio, t);
    SSL_set_bio(t->ssl, bio, bio);      /* the SSL owns the BIO now */
    SSL_set_app_data(t->ssl, t);
    SSL_set_read_ahead(t->ssl, 1);      /* take every record rx holds in one go */
    t->role = (uint8_t)ctx->role;
    t->deadline_ms = deadline_ms;
    if (ctx->role == TLS_ROLE_ACCEPT) {
        SSL_set_accept_state(t->ssl);
        memcpy(t->auth_sum, ctx->auth_sum, TLS_AUTH_SUM);
    } else {
        SSL_set_connect_state(t->ssl);
        if (peer != NULL && peer[0] != '\0') {
            if (tls_is_ip(peer)) {
                if (ctx->verify &&
                    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), peer) != 1)
                    goto fail_ssl;
            } else {
                if (SSL_set_tlsext_host_name(t->ssl, peer) != 1 ||
                    (ctx->verify && SSL_set1_host(t->ssl, peer) != 1))
                    goto fail_ssl;
            }
        }
        t->cache = cache;
        if (cache != NULL && cache->sess != NULL && cache->ctx == ctx->ssl)
            SSL_set_session(t->ssl, cache->sess);
    }
    c->tp = &transport_tls;
    c->tpd = t;
    return 0;

fail_ssl:
    SSL_free(t->ssl);
fail_conn:
    ERR_clear_error();
    free(t);
    return -ENOMEM;
}

int tls_client_admitted(struct conn *c, const struct tls_ctx *ctx, const char **why)
{
    struct tls_conn *t;
    X509_STORE_CTX *sc;
    int ok;

    *why = NULL;
    if (ctx == NULL)
        return 1;                   /* the pool takes plaintext now: TLS is still fine */
    if (!tls_is(c)) {
        *why = "plaintext, and the listener now takes TLS only";
        return 0;
    }
    t = c->tpd;
    if (!ctx->client_auth || memcmp(t->auth_sum, ctx->auth_sum, TLS_AUTH_SUM) == 0)
        return 1;                   /* nothing asked, or asked as before */
    if (t->state != TLS_OPEN) {
        *why = "its handshake began under the previous tls settings";
        return 0;
    }
    X509 *leaf = SSL_get0_peer_certificate(t->ssl);
    if (leaf == NULL) {
        *why = "no client certificate, and client_auth now requires one";
        return 0;
    }
    sc = X509_STORE_CTX_new();
    if (sc == NULL || X509_STORE_CTX_init(sc, SSL_CTX_get_cert_store(ctx->ssl), leaf,
                                          SSL_get_peer_cert_chain(t->ssl)) != 1) {
        X509_STORE_CTX_free(sc);
        ERR_clear_error();
        *why = "out of memory checking its client certificate";
        return 0;
    }
    X509_STORE_CTX_set_default(sc, "ssl_client");
    ok = X509_verify_cert(sc) == 1;
    if (!ok) {
        snprintf(t->detail, sizeof(t->detail), "client certificate refused by the new ca: %s",
                 X509_verify_cert_error_string(X509_STORE_CTX_get_error(sc)));
        *why = t->detail;
    } else {
        memcpy(t->auth_sum, ctx->auth_sum, TLS_AUTH_SUM);  /* checked: not again */
    }
    X509_STORE_CTX_free(sc);
    ERR_clear_error();
    return ok;
}
