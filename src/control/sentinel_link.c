/* One connection to a sentinel or a master on a libuv loop: commands out, RESP replies in as trees (a question and its answer, or a subscription). */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "control/sentinel.h"
#include "control/sentinel_link.h"
#include "lib/buf.h"
#include "lib/util.h"

#define SENTINEL_READ_CHUNK      4096
#define SENTINEL_REPLY_MAX       (1u << 20)   /* a reply larger than this ends the link */
#define SENTINEL_DEPTH_MAX       4
#define SENTINEL_ELEMS_MAX       4096

/* ------------------------------------------------------------------ RESP replies */

static void sresp_clear(struct sentinel_resp *r)
{
    for (size_t i = 0; r->elem != NULL && i < r->n; i++)
        sresp_clear(&r->elem[i]);
    free(r->elem);
    free(r->str);
    memset(r, 0, sizeof(*r));
}

static void sresp_free(struct sentinel_resp *r)
{
    if (r != NULL) {
        sresp_clear(r);
        free(r);
    }
}

/* The line at p[0..n) up to CRLF: its length without CRLF, -1 when not whole yet. */
static long sresp_line(const char *p, size_t n)
{
    const char *cr = memchr(p, '\r', n);
    if (cr == NULL || (size_t)(cr - p) + 1 >= n)
        return -1;
    return (long)(cr - p);
}

/*
 * Parse one reply at p[0..n) into r (zeroed by the caller). Returns the bytes it took
 * (> 0), 0 when more input is needed, -1 when malformed or beyond the limits, -2 without
 * memory; r holds what was built either way (sresp_clear it).
 */
static long sresp_parse(const char *p, size_t n, struct sentinel_resp *r, int depth)
{
    long ll = sresp_line(p, n);
    char num[32];

    if (ll < 0)
        return 0;       /* the line is not whole: the caller bounds what it buffers */
    if (ll < 1 || p[ll + 1] != '\n')
        return -1;
    r->type = p[0];
    size_t hdr = (size_t)ll + 2;
    switch (r->type) {
    case '+':
    case '-':
        if ((r->str = util_strndup(p + 1, (size_t)ll - 1)) == NULL)
            return -2;
        r->len = (size_t)ll - 1;
        return (long)hdr;
    case ':':
    case '$':
    case '*': {
        if (ll - 1 >= (long)sizeof(num) || ll < 2)
            return -1;
        memcpy(num, p + 1, (size_t)ll - 1);
        num[ll - 1] = '\0';
        char *end;
        r->num = strtoll(num, &end, 10);
        if (*end != '\0')
            return -1;
        if (r->type == ':')
            return (long)hdr;
        if (r->num < 0)
            return r->num == -1 ? (long)hdr : -1;          /* nil */
        if (r->type == '$') {
            if (r->num > (long long)SENTINEL_REPLY_MAX)
                return -1;
            size_t len = (size_t)r->num;
            if (n < hdr + len + 2)
                return 0;
            if (p[hdr + len] != '\r' || p[hdr + len + 1] != '\n')
                return -1;
            if ((r->str = util_strndup(p + hdr, len)) == NULL)
                return -2;
            r->len = len;
            return (long)(hdr + len + 2);
        }
        if (depth >= SENTINEL_DEPTH_MAX || r->num > SENTINEL_ELEMS_MAX)
            return -1;
        r->elem = calloc(r->num ? (size_t)r->num : 1, sizeof(*r->elem));
        if (r->elem == NULL)
            return -2;
        r->n = (size_t)r->num;
        size_t off = hdr;
        for (size_t i = 0; i < r->n; i++) {
            long k = sresp_parse(p + off, n - off, &r->elem[i], depth + 1);
            if (k <= 0)
                return k;
            off += (size_t)k;
        }
        return (long)off;
    }
    default:
        return -1;
    }
}

/* A command as a RESP array of bulk strings into b. 0 or -ENOMEM. */
int sentinel_resp_command(struct buf *b, int argc, const char *const *argv)
{
    int rc = buf_appendf(b, "*%d\r\n", argc);
    for (int i = 0; i < argc && rc == 0; i++)
        rc = buf_appendf(b, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    return rc < 0 ? -ENOMEM : 0;
}

/* AUTH [user] password, when there is a password. Returns the replies it adds (0 or 1). */
int sentinel_resp_auth(struct buf *b, const char *user, const char *pass)
{
    if (pass == NULL)
        return 0;
    const char *argv[3] = { "AUTH", user ? user : pass, pass };
    return sentinel_resp_command(b, user ? 3 : 2, argv) < 0 ? -1 : 1;
}

/* ------------------------------------------------------------------ a link */

struct sentinel_link {
    uv_tcp_t          tcp;
    uv_timer_t        timer;
    uv_connect_t      creq;
    uv_write_t        wreq;
    uv_getaddrinfo_t  gai;
    int               resolving;
    int               ended;
    uint32_t          pending;      /* handles and requests to end before the free */
    struct buf        in, out;
    uint32_t          skip, want, got;
    struct sentinel_resp     *r[SENTINEL_REPLIES_MAX];
    sentinel_link_cb          cb;
    sentinel_link_push_cb     push;
    void             *arg;
    char              host[SENTINEL_ADDR_MAX];
    uint16_t          port;
    char              err_later[200];   /* a failure found while starting, told from the loop */
};

static void slink_unref(struct sentinel_link *l)
{
    if (--l->pending > 0)
        return;
    for (uint32_t i = 0; i < SENTINEL_REPLIES_MAX; i++)
        sresp_free(l->r[i]);
    buf_free(&l->in);
    buf_free(&l->out);
    free(l);
}

static void slink_closed(uv_handle_t *h)
{
    slink_unref(h->data);
}

/* End the link: the callback (unless cancelled or already called), then its handles close. */
static void slink_end(struct sentinel_link *l, const char *err)
{
    if (l->ended)
        return;
    l->ended = 1;
    if (err != NULL && l->cb != NULL) {
        sentinel_link_cb cb = l->cb;
        l->cb = NULL;
        cb(l->arg, NULL, 0, err);
    } else if (l->push != NULL && l->cb == NULL && l->arg != NULL) {
        sentinel_link_push_cb push = l->push;
        l->push = NULL;
        push(l->arg, NULL);         /* a live subscription ended */
    }
    uv_timer_stop(&l->timer);
    uv_close((uv_handle_t *)&l->timer, slink_closed);
    if (l->resolving)
        uv_cancel((uv_req_t *)&l->gai);
    uv_close((uv_handle_t *)&l->tcp, slink_closed);
}

static void slink_fail(struct sentinel_link *l, const char *fmt, const char *what)
{
    char err[400];
    snprintf(err, sizeof(err), fmt, what);
    slink_end(l, err);
}

void sentinel_link_cancel(struct sentinel_link *l)
{
    if (l == NULL)
        return;
    l->cb = NULL;
    l->push = NULL;
    l->arg = NULL;
    slink_end(l, NULL);
}

static void slink_timeout_cb(uv_timer_t *t)
{
    slink_fail(t->data, "%s", "timed out");
}

/* Replies in l->in: the first ones to cb, later ones (a subscription's) to push. */
static void slink_process(struct sentinel_link *l)
{
    while (!l->ended && buf_len(&l->in) > 0) {
        struct sentinel_resp *r = calloc(1, sizeof(*r));
        if (r == NULL) {
            slink_fail(l, "%s", "out of memory");
            return;
        }
        long k = sresp_parse(buf_rptr(&l->in), buf_len(&l->in), r, 0);
        if (k <= 0) {
            sresp_free(r);
            if (k == 0 && buf_len(&l->in) <= SENTINEL_REPLY_MAX)
                return;
            slink_fail(l, "%s", k == -2 ? "out of memory" : "malformed reply");
            return;
        }
        buf_consume(&l->in, (size_t)k);
        if (l->got < l->want) {
            if (l->got < l->skip && r->type == '-') {
                char what[200];
                snprintf(what, sizeof(what), "%.150s", r->str);
                sresp_free(r);
                slink_fail(l, "AUTH refused: %s", what);
                return;
            }
            l->r[l->got++] = r;
            if (l->got < l->want)
                continue;
            sentinel_link_cb cb = l->cb;
            l->cb = NULL;
            if (l->push == NULL) {
                if (cb != NULL)
                    cb(l->arg, l->r + l->skip, l->want - l->skip, NULL);
                slink_end(l, NULL);
                return;
            }
            uv_timer_stop(&l->timer);   /* a subscription lives on */
            if (cb != NULL)
                cb(l->arg, l->r + l->skip, l->want - l->skip, NULL);
            continue;
        }
        if (l->push != NULL && l->arg != NULL)
            l->push(l->arg, r);
        sresp_free(r);
    }
}

static void slink_alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct sentinel_link *l = h->data;
    (void)hint;
    if (buf_reserve(&l->in, SENTINEL_READ_CHUNK) < 0) {
        b->base = NULL;
        b->len = 0;
        return;
    }
    b->base = buf_wptr(&l->in);
    b->len = buf_room(&l->in);
}

static void slink_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct sentinel_link *l = s->data;
    (void)b;
    if (l->ended)
        return;
    if (nread > 0) {
        buf_produce(&l->in, (size_t)nread);
        slink_process(l);
        return;
    }
    if (nread == UV_ENOBUFS)
        slink_fail(l, "%s", "out of memory");
    else if (nread < 0)
        slink_fail(l, "%s", nread == UV_EOF ? "connection closed" : uv_strerror((int)nread));
}

static void slink_write_cb(uv_write_t *req, int status)
{
    struct sentinel_link *l = req->data;
    if (status < 0 && !l->ended)
        slink_fail(l, "write: %s", uv_strerror(status));
    slink_unref(l);
}

static void slink_connect_cb(uv_connect_t *req, int status)
{
    struct sentinel_link *l = req->data;
    if (l->ended)
        return;
    if (status < 0) {
        slink_fail(l, "connect: %s", uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&l->tcp, 1);
    uv_buf_t b = uv_buf_init(buf_rptr(&l->out), (unsigned)buf_len(&l->out));
    l->wreq.data = l;
    int rc = uv_write(&l->wreq, (uv_stream_t *)&l->tcp, &b, 1, slink_write_cb);
    if (rc == 0)
        l->pending++;
    if (rc < 0 || uv_read_start((uv_stream_t *)&l->tcp, slink_alloc_cb, slink_read_cb) < 0)
        slink_fail(l, "%s", rc < 0 ? uv_strerror(rc) : "cannot read");
}

static void slink_later_cb(uv_timer_t *t)
{
    struct sentinel_link *l = t->data;
    slink_end(l, l->err_later);
}

/* A failure found while starting: told from the loop, so that the owner's callback never
 * runs inside sentinel_link_start (its caller has not stored the link yet). */
static void slink_fail_later(struct sentinel_link *l, const char *fmt, const char *what)
{
    snprintf(l->err_later, sizeof(l->err_later), fmt, what);
    uv_timer_start(&l->timer, slink_later_cb, 0, 0);
}

static void slink_connect(struct sentinel_link *l, const struct sockaddr *sa)
{
    l->creq.data = l;
    int rc = uv_tcp_connect(&l->creq, &l->tcp, sa, slink_connect_cb);
    if (rc < 0)
        slink_fail_later(l, "connect: %s", uv_strerror(rc));
}

static void slink_gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct sentinel_link *l = req->data;
    l->resolving = 0;
    if (!l->ended) {
        if (status < 0 || res == NULL)
            slink_fail(l, "resolve: %s", uv_strerror(status < 0 ? status : UV_EAI_NONAME));
        else
            slink_connect(l, res->ai_addr);
    }
    if (res != NULL)
        uv_freeaddrinfo(res);
    slink_unref(l);
}

/*
 * Start a link to host:port that writes cmds (taken: the link owns the buffer) and reads
 * want replies of which the first skip are AUTH's. NULL when it could not start (no
 * memory; cb is not called, cmds freed).
 */
struct sentinel_link *sentinel_link_start(uv_loop_t *loop, const char *host, uint16_t port,
                                 struct buf *cmds, uint32_t skip, uint32_t want,
                                 uint32_t timeout_ms, sentinel_link_cb cb, sentinel_link_push_cb push, void *arg)
{
    struct sentinel_link *l = calloc(1, sizeof(*l));
    if (l == NULL || strlen(host) >= sizeof(l->host) || want > SENTINEL_REPLIES_MAX ||
        uv_tcp_init(loop, &l->tcp) < 0) {
        free(l);
        buf_free(cmds);
        return NULL;
    }
    l->tcp.data = l;
    uv_timer_init(loop, &l->timer);
    l->timer.data = l;
    l->pending = 2;
    l->out = *cmds;
    buf_init(cmds);
    buf_init(&l->in);
    l->skip = skip;
    l->want = want;
    l->cb = cb;
    l->push = push;
    l->arg = arg;
    l->port = port;
    snprintf(l->host, sizeof(l->host), "%s", host);
    uv_timer_start(&l->timer, slink_timeout_cb, timeout_ms, 0);

    struct sockaddr_storage ss;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) == 0 ||
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) == 0) {
        slink_connect(l, (struct sockaddr *)&ss);
        return l;
    }
    char ps[8];
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof(ps), "%u", port);
    l->gai.data = l;
    l->pending++;
    l->resolving = 1;
    int rc = uv_getaddrinfo(loop, &l->gai, slink_gai_cb, l->host, ps, &hints);
    if (rc < 0) {
        l->resolving = 0;
        l->pending--;
        slink_fail_later(l, "resolve: %s", uv_strerror(rc));
    }
    return l;
}
