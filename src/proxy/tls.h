/* TLS: contexts built from a pool's tls / server_tls settings, and the TLS transport (OpenSSL over the connection's own buffers). */
#ifndef RL_PROXY_TLS_H
#define RL_PROXY_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/conn.h"
#include "stats/stats.h"

struct conf;
struct conf_tls;
struct ssl_ctx_st;
struct ssl_session_st;

/*
 * A context is one side of one pool: the listener's (TLS_ROLE_ACCEPT) or the
 * one its server connections use (TLS_ROLE_CONNECT), an OpenSSL SSL_CTX with
 * the certificate, key, CAs, versions and ciphers of the settings read in.
 * It is built with the snapshot (main thread, off the data path) and owned
 * by it; a connection's SSL holds its own reference to the SSL_CTX, so a
 * reload that builds new contexts leaves open connections on theirs.
 */
enum tls_role { TLS_ROLE_ACCEPT, TLS_ROLE_CONNECT };

struct tls_ctx;

/*
 * Build a context from settings t of pool `pool`, loaded from config file
 * `file` (for messages). Every file is read now: an unreadable file, a key
 * that does not match its certificate, a certificate that is expired or not
 * yet valid, a cipher list that matches nothing are errors
 * "FILE:LINE:COL: key 'tls.cert': reason" in err. NULL on error.
 */
struct tls_ctx *tls_ctx_build(const char *file, const char *pool, const struct conf_tls *t,
                              enum tls_role role, char *err, size_t errlen);
void tls_ctx_free(struct tls_ctx *ctx);

/* The certificates of a context's files and when each expires. */
struct tls_cert_info {
    const char *key;        /* "tls.cert", "tls.ca", "server_tls.cert", "server_tls.ca" */
    const char *path;       /* as configured (points into the conf) */
    int64_t     not_after;  /* unix seconds; the earliest of the file's certificates */
};
#define TLS_CTX_FILES_MAX 2
/* Fills out[0..n) (n >= TLS_CTX_FILES_MAX); returns how many. */
size_t tls_ctx_certs(const struct tls_ctx *ctx, struct tls_cert_info *out, size_t n);

/* Build (and free) every TLS context of conf: what `ringleader -t` checks
 * beyond the YAML. 0, or -1 with the first error in err. */
int tls_conf_check(const struct conf *conf, char *err, size_t errlen);

/*
 * The session a server connection can resume (TLS_ROLE_CONNECT): the last
 * one the server gave a connection of this worker, with the SSL_CTX it was
 * made under (a session of another context is not offered). Owned by the
 * server object (one per server and worker: no lock); tls_session_clear
 * when it goes.
 */
struct tls_session {
    struct ssl_session_st *sess;
    struct ssl_ctx_st     *ctx;
};
void tls_session_clear(struct tls_session *s);

/* Why a handshake failed; the stats count each (STATS_TLS_CODEC). */
enum tls_fail {
    TLS_FAIL_NONE,
    TLS_FAIL_VERIFY,      /* a certificate was refused: the peer's by us, or ours by the peer */
    TLS_FAIL_PROTOCOL,    /* not TLS, no version or cipher in common, a malformed record */
    TLS_FAIL_CLOSED,      /* the peer closed or reset the connection during the handshake */
    TLS_FAIL_TIMEOUT,     /* not done within tls_handshake_timeout */
    TLS_FAIL_OTHER        /* out of memory or an internal error */
};

/* The TLS transport (see transport.h for the hooks' contracts). */
extern const struct transport transport_tls;

/*
 * Make c, whose handle is initialised but not yet reading, a TLS connection
 * under ctx: c->tp becomes &transport_tls and c->tpd its state (freed by the
 * transport's release, from conn_release). `peer` (TLS_ROLE_CONNECT) is the
 * name to verify and send as SNI (an IP literal is verified as an address
 * and sent no SNI), NULL to check the chain only; `cache` (connect) the
 * session slot to resume from and update. The handshake must be done by
 * deadline_ms (the loop's clock; tls_expired). 0, or -ENOMEM with c
 * unchanged.
 */
int tls_attach(struct conn *c, const struct tls_ctx *ctx, const char *peer,
               struct tls_session *cache, uint64_t deadline_ms);

/* After the handshake failed (on_handshake status < 0, or a read error on a
 * TLS connection): why, with a fixed text for replies ("tls: certificate
 * verify failed") in *reason and OpenSSL's own words in *detail. */
enum tls_fail tls_failure(const struct conn *c, const char **reason, const char **detail);

/*
 * Whether client connection c (accepted by a pool, plaintext or TLS) may stay connected
 * now that a reload gave its pool the listener context ctx (NULL: the pool takes
 * plaintext). 1 yes; 0 no, with the reason in *why (static text, or text kept in c's
 * transport until it is released): a plaintext client of a pool that now takes TLS only;
 * under client_auth whose ca or setting changed, a client without a certificate or with
 * one the new ca refuses, or still handshaking under the previous settings. A client
 * already checked under the same client_auth and ca bytes is not checked again.
 */
int tls_client_admitted(struct conn *c, const struct tls_ctx *ctx, const char **why);

/* Whether the finished handshake resumed a session. */
int  tls_resumed(const struct conn *c);

/* Whether c is still handshaking at now_ms past its deadline; the caller
 * closes it (and counts TLS_FAIL_TIMEOUT). */
int  tls_expired(const struct conn *c, uint64_t now_ms);

/* The fixed reply text of a failure kind ("tls: handshake timed out", ...). */
const char *tls_fail_text(enum tls_fail why);

/* Count a handshake's outcome in a stats block that has the STATS_TLS_CODEC
 * fields (a pool's for clients, a server's for server connections). */
#define TLS_COUNT(st, why, resumed)                                             \
    do {                                                                         \
        switch (why) {                                                           \
        case TLS_FAIL_NONE:                                                      \
            STATS_ADD(st, tls_handshakes, 1);                                    \
            if (resumed)                                                         \
                STATS_ADD(st, tls_resumptions, 1);                               \
            break;                                                               \
        case TLS_FAIL_VERIFY:   STATS_ADD(st, tls_verify_failures, 1); break;   \
        case TLS_FAIL_PROTOCOL: STATS_ADD(st, tls_protocol_errors, 1); break;   \
        case TLS_FAIL_CLOSED:   STATS_ADD(st, tls_handshake_aborts, 1); break;  \
        case TLS_FAIL_TIMEOUT:  STATS_ADD(st, tls_handshake_timeouts, 1); break; \
        case TLS_FAIL_OTHER:    STATS_ADD(st, tls_handshake_errors, 1); break;  \
        }                                                                        \
    } while (0)

/* Whether c runs the TLS transport. */
static inline int tls_is(const struct conn *c)
{
    return c->tp == &transport_tls;
}

#endif
