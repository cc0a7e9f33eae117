/* One slot-map fetch from one cluster node: connect, hello, the protocol's map query, replies into a struct cluster_map. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "placement/cluster_map.h"
#include "conf/conf.h"
#include "control/cluster_fetch.h"
#include "proxy/conn.h"
#include "proxy/tls.h"
#include "lib/util.h"

#define FETCH_READ_CHUNK  16384
#define FETCH_REPLIES_MAX 8
#define FETCH_REPLY_MAX   (64u * 1024 * 1024)   /* a map reply larger than this is refused */

enum fetch_state { FETCH_RESOLVING, FETCH_CONNECTING, FETCH_READING, FETCH_DONE };

struct cluster_fetch {
    struct conn              conn;
    uv_timer_t               timer;
    uv_connect_t             creq;
    uv_getaddrinfo_t         gai;
    const struct proto_ops  *ops;
    enum fetch_state         state;
    int                      fallback;      /* the query sent is the fallback form */
    int                      conn_open;     /* conn_init succeeded */
    int                      resolving;     /* a getaddrinfo is pending */
    uint32_t                 pending;       /* handles and requests still to end before free */
    uint32_t                 skip;          /* hello replies to read past */
    uint32_t                 want;          /* map replies expected */
    uint32_t                 got;
    struct buf               rsp[FETCH_REPLIES_MAX];   /* whole replies */
    uint64_t                 body_left;     /* of the unit being read */
    int                      body_into;     /* which reply gets it (-1: a hello's, dropped) */
    int                      body_final;    /* the body ends its reply */
    struct proto_parser      parser;
    struct proto_hello       hello;
    char                     host[CLUSTER_HOST_MAX];
    uint16_t                 port;
    cluster_fetch_cb         cb;
    void                    *arg;
};

static void fetch_unref(struct cluster_fetch *f)
{
    if (--f->pending > 0)
        return;
    if (f->conn_open)
        conn_release(&f->conn);
    for (uint32_t i = 0; i < FETCH_REPLIES_MAX; i++)
        buf_free(&f->rsp[i]);
    proto_parser_free(&f->parser);
    free((char *)f->hello.username);
    free((char *)f->hello.password);
    free(f);
}

static void fetch_conn_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    fetch_unref(CONN_OWNER(c, struct cluster_fetch, conn));
}

static void fetch_timer_closed(uv_handle_t *h)
{
    fetch_unref(h->data);
}

/* End the fetch: the callback (once, unless cancelled), then every handle closes. */
static void fetch_end(struct cluster_fetch *f, struct cluster_map *m, const char *err)
{
    if (f->state == FETCH_DONE) {
        cluster_map_free(m);
        return;
    }
    f->state = FETCH_DONE;
    if (f->cb != NULL) {
        cluster_fetch_cb cb = f->cb;
        f->cb = NULL;
        cb(f->arg, m, err);
    } else {
        cluster_map_free(m);
    }
    uv_timer_stop(&f->timer);
    uv_close((uv_handle_t *)&f->timer, fetch_timer_closed);
    if (f->resolving)
        uv_cancel((uv_req_t *)&f->gai);     /* its callback drops its reference */
    if (f->conn_open && !conn_closing(&f->conn))
        conn_close(&f->conn, fetch_conn_closed);
}

static void fetch_fail(struct cluster_fetch *f, const char *fmt, const char *what)
{
    char err[512];
    snprintf(err, sizeof(err), fmt, what);
    fetch_end(f, NULL, err);
}

static void fetch_timeout_cb(uv_timer_t *t)
{
    fetch_fail(t->data, "%s", "timed out");
}

/* Write the hello and the map query (fallback or not) to the output. 0 or -ENOMEM. */
static int fetch_send_query(struct cluster_fetch *f, int with_hello)
{
    struct buf *out = &f->conn.obuf;
    if (with_hello && f->ops->server_hello != NULL) {
        int n = f->ops->server_hello(&f->hello, out);
        if (n < 0)
            return -ENOMEM;
        f->skip = (uint32_t)n;
    }
    int n = f->ops->cluster->map_query(f->fallback, out);
    if (n <= 0 || n > FETCH_REPLIES_MAX)
        return -ENOMEM;
    f->want = (uint32_t)n;
    f->got = 0;
    for (uint32_t i = 0; i < FETCH_REPLIES_MAX; i++)
        f->rsp[i].rpos = f->rsp[i].wpos = 0;
    return conn_flush(&f->conn) < 0 ? -EIO : 0;
}

/* Every map reply is in: read them; ask the fallback form, or end. */
static void fetch_replies_done(struct cluster_fetch *f)
{
    const char *rsp[FETCH_REPLIES_MAX];
    size_t len[FETCH_REPLIES_MAX];
    char err[512] = "";

    for (uint32_t i = 0; i < f->got; i++) {
        rsp[i] = buf_len(&f->rsp[i]) ? buf_rptr(&f->rsp[i]) : "";
        len[i] = buf_len(&f->rsp[i]);
    }
    struct cluster_map *m = cluster_map_new();
    if (m == NULL) {
        fetch_fail(f, "%s", "out of memory");
        return;
    }
    int rc = f->ops->cluster->map_parse(f->fallback, tls_is(&f->conn), rsp, len, f->got,
                                        f->host, m, err, sizeof(err));
    if (rc == 0 && !f->fallback) {
        cluster_map_free(m);
        f->fallback = 1;
        if (fetch_send_query(f, 0) < 0)
            fetch_fail(f, "%s", "cannot send the fallback query");
        return;
    }
    if (rc <= 0) {
        cluster_map_free(m);
        fetch_fail(f, "%s", err[0] ? err : "the node does not describe its cluster");
        return;
    }
    if (cluster_map_finish(m) < 0) {
        cluster_map_free(m);
        fetch_fail(f, "%s", "the node knows no cluster node (an empty slot map)");
        return;
    }
    fetch_end(f, m, NULL);
}

/* Replies: hello ones are read past (an error there fails the fetch), map ones kept whole. */
static void fetch_process(struct cluster_fetch *f)
{
    struct buf *in = &f->conn.ibuf;

    while (f->state == FETCH_READING && buf_len(in) > 0) {
        if (f->body_left > 0) {
            size_t n = (size_t)RL_MIN((uint64_t)buf_len(in), f->body_left);
            if (f->body_into >= 0 && buf_append(&f->rsp[f->body_into], buf_rptr(in), n) < 0) {
                fetch_fail(f, "%s", "out of memory");
                return;
            }
            buf_consume(in, n);
            f->body_left -= n;
            if (f->body_left > 0)
                return;
            if (f->body_into >= 0 && f->body_final && ++f->got == f->want)
                fetch_replies_done(f);
            continue;
        }
        struct proto_rsp r;
        int rc = f->ops->parse_rsp(&f->parser, buf_rptr(in), buf_len(in), f->ops->probe_cmd, 0, &r);
        if (rc == 0)
            return;
        if (rc < 0) {
            fetch_fail(f, "%s", "malformed reply");
            return;
        }
        int idx = -1;
        if (f->skip > 0) {
            if (r.flags & PROTO_SF_ERROR) {
                char what[200];
                size_t n = RL_MIN((size_t)r.hdr_len, sizeof(what) - 1);
                for (size_t i = 0; i < n; i++) {
                    char ch = buf_rptr(in)[i];
                    what[i] = (ch >= 0x20 && ch < 0x7f) ? ch : ' ';
                }
                what[n] = '\0';
                fetch_fail(f, "the node refused the hello: %s", what);
                return;
            }
            if (r.flags & PROTO_SF_FINAL)
                f->skip--;
        } else {
            idx = (int)f->got;
            if (buf_len(&f->rsp[idx]) + r.hdr_len + r.body_len > FETCH_REPLY_MAX ||
                buf_append(&f->rsp[idx], buf_rptr(in), r.hdr_len) < 0) {
                fetch_fail(f, "%s", "reply too large or out of memory");
                return;
            }
        }
        buf_consume(in, r.hdr_len);
        if (r.body_len > 0) {           /* counted when the body is in */
            f->body_left = r.body_len;
            f->body_into = idx;
            f->body_final = (r.flags & PROTO_SF_FINAL) != 0;
            continue;
        }
        if (idx >= 0 && (r.flags & PROTO_SF_FINAL) && ++f->got == f->want)
            fetch_replies_done(f);
    }
}

/* A TLS connection's failure: "tls: certificate verify failed (<OpenSSL's words>)". */
static void fetch_tls_fail(struct cluster_fetch *f, ssize_t nread)
{
    const char *reason = NULL, *detail = NULL;
    enum tls_fail why = tls_failure(&f->conn, &reason, &detail);
    char what[400];

    if (why == TLS_FAIL_NONE && nread == UV_EOF) {
        fetch_fail(f, "%s", "connection closed by the node");
        return;
    }
    if (why == TLS_FAIL_NONE)
        why = TLS_FAIL_CLOSED;
    snprintf(what, sizeof(what), "%s%s%s%s", reason ? reason : tls_fail_text(why),
             detail && detail[0] ? " (" : "", detail ? detail : "", detail && detail[0] ? ")" : "");
    fetch_fail(f, "%s", what);
}

static void fetch_on_read(struct conn *c, ssize_t nread)
{
    struct cluster_fetch *f = CONN_OWNER(c, struct cluster_fetch, conn);
    if (nread > 0) {
        fetch_process(f);
        return;
    }
    if (nread == 0) {               /* the transport's own bytes (a handshake): flush its output,
                                       and the query once the handshake is done */
        if (f->state == FETCH_READING && !conn_closing(c) && conn_flush(c) < 0)
            fetch_fail(f, "%s", "write failed");
        return;
    }
    if (tls_is(c)) {
        fetch_tls_fail(f, nread);
        return;
    }
    fetch_fail(f, "%s", nread == UV_EOF ? "connection closed by the node"
                                        : uv_strerror((int)nread));
}

static void fetch_on_written(struct conn *c, int status)
{
    struct cluster_fetch *f = CONN_OWNER(c, struct cluster_fetch, conn);
    if (status < 0)
        fetch_fail(f, "%s", uv_strerror(status));
    else if (f->state == FETCH_READING && conn_flush(&f->conn) < 0)
        fetch_fail(f, "%s", "write failed");
}

static const struct conn_events fetch_events = {
    .on_read = fetch_on_read,
    .on_written = fetch_on_written,
};

static void fetch_connect_cb(uv_connect_t *req, int status)
{
    struct cluster_fetch *f = req->data;
    if (f->state == FETCH_DONE)
        return;
    if (status < 0) {
        fetch_fail(f, "connect: %s", uv_strerror(status));
        return;
    }
    f->state = FETCH_READING;
    uv_tcp_nodelay(&f->conn.h.tcp, 1);
    if (conn_read_start(&f->conn) < 0 || fetch_send_query(f, 1) < 0)
        fetch_fail(f, "%s", "cannot send the query");
}

static void fetch_connect(struct cluster_fetch *f, const struct sockaddr *sa)
{
    f->state = FETCH_CONNECTING;
    f->creq.data = f;
    int rc = uv_tcp_connect(&f->creq, &f->conn.h.tcp, sa, fetch_connect_cb);
    if (rc < 0)
        fetch_fail(f, "connect: %s", uv_strerror(rc));
}

static void fetch_gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct cluster_fetch *f = req->data;
    f->resolving = 0;
    if (f->state == FETCH_DONE || status < 0 || res == NULL) {
        if (f->state != FETCH_DONE)
            fetch_fail(f, "resolve: %s", uv_strerror(status < 0 ? status : UV_EAI_NONAME));
        if (res)
            uv_freeaddrinfo(res);
        fetch_unref(f);
        return;
    }
    fetch_connect(f, res->ai_addr);
    uv_freeaddrinfo(res);
    fetch_unref(f);
}

struct cluster_fetch *cluster_fetch_start(uv_loop_t *loop, const struct proto_ops *ops,
                                          const struct proto_hello *hello,
                                          const struct cluster_fetch_tls *tls, const char *host,
                                          uint16_t port, uint32_t timeout_ms,
                                          cluster_fetch_cb cb, void *arg)
{
    struct cluster_fetch *f;

    if (ops->cluster == NULL || strlen(host) >= sizeof(f->host))
        return NULL;
    f = calloc(1, sizeof(*f));
    if (f == NULL)
        return NULL;
    f->ops = ops;
    f->cb = cb;
    f->arg = arg;
    f->port = port;
    f->body_into = -1;
    f->parser.flags = PROTO_PF_CLUSTER;
    snprintf(f->host, sizeof(f->host), "%s", host);
    f->hello.db = 0;
    f->hello.username = hello && hello->username ? strdup(hello->username) : NULL;
    f->hello.password = hello && hello->password ? strdup(hello->password) : NULL;
    if ((hello && hello->username && f->hello.username == NULL) ||
        (hello && hello->password && f->hello.password == NULL) ||
        conn_init(&f->conn, loop, 0, &fetch_events, &transport_plain, FETCH_READ_CHUNK) < 0) {
        free((char *)f->hello.username);
        free((char *)f->hello.password);
        free(f);
        return NULL;
    }
    f->conn_open = 1;
    if (tls != NULL && tls->ctx != NULL) {
        /* the handshake's deadline is the fetch's own timer */
        const char *peer = tls->server_name ? tls->server_name : f->host;
        if (tls_attach(&f->conn, tls->ctx, peer, NULL, UINT64_MAX) < 0) {
            f->pending = 1;
            f->state = FETCH_DONE;
            f->cb = NULL;
            conn_close(&f->conn, fetch_conn_closed);   /* frees f */
            return NULL;
        }
    }
    uv_timer_init(loop, &f->timer);
    f->timer.data = f;
    f->pending = 2;                 /* the connection's handle and the timer */
    uv_timer_start(&f->timer, fetch_timeout_cb, timeout_ms ? timeout_ms : 1000, 0);

    struct sockaddr_storage ss;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) == 0 ||
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) == 0) {
        fetch_connect(f, (struct sockaddr *)&ss);
        return f;
    }
    char ps[8];
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof(ps), "%u", port);
    f->state = FETCH_RESOLVING;
    f->gai.data = f;
    f->pending++;
    f->resolving = 1;
    int rc = uv_getaddrinfo(loop, &f->gai, fetch_gai_cb, f->host, ps, &hints);
    if (rc < 0) {
        f->resolving = 0;
        f->pending--;
        fetch_fail(f, "resolve: %s", uv_strerror(rc));
    }
    return f;
}

void cluster_fetch_cancel(struct cluster_fetch *f)
{
    if (f == NULL)
        return;
    f->cb = NULL;
    fetch_end(f, NULL, NULL);
}

/* ------------------------------------------------------------------ synchronous */

struct fetch_sync {
    struct cluster_map *m;
    char                err[512];
    int                 done;
};

static void fetch_sync_cb(void *arg, struct cluster_map *m, const char *err)
{
    struct fetch_sync *s = arg;
    s->m = m;
    s->done = 1;
    if (err != NULL)
        snprintf(s->err, sizeof(s->err), "%s", err);
}

int cluster_fetch_sync(const struct proto_ops *ops, const struct proto_hello *hello,
                       const struct cluster_fetch_tls *tls, const char *const *addrs,
                       uint32_t n, uint32_t timeout_ms,
                       struct cluster_map **out, uint32_t *from, char *err, size_t errlen)
{
    uv_loop_t loop;
    int rc = -1;

    *out = NULL;
    snprintf(err, errlen, "no address to ask");
    if (uv_loop_init(&loop) != 0) {
        snprintf(err, errlen, "cannot make a loop");
        return -1;
    }
    for (uint32_t i = 0; i < n && rc < 0; i++) {
        struct conf_addr a;
        char aerr[256];
        if (conf_parse_addr(addrs[i], &a, aerr, sizeof(aerr)) < 0 || a.host == NULL) {
            snprintf(err, errlen, "%s: %s", addrs[i], a.host == NULL ? "not host:port" : aerr);
            conf_addr_free(&a);
            continue;
        }
        struct fetch_sync s = { NULL, "", 0 };
        struct cluster_fetch *f = cluster_fetch_start(&loop, ops, hello, tls, a.host, a.port,
                                                      timeout_ms, fetch_sync_cb, &s);
        conf_addr_free(&a);
        if (f == NULL) {
            snprintf(err, errlen, "%s: out of memory", addrs[i]);
            continue;
        }
        uv_run(&loop, UV_RUN_DEFAULT);      /* ends when the fetch's handles are closed */
        if (s.m != NULL) {
            *out = s.m;
            if (from != NULL)
                *from = i;
            rc = 0;
        } else {
            snprintf(err, errlen, "%s: %s", addrs[i], s.err[0] ? s.err : "no answer");
        }
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
}
