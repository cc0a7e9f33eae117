/* Admin HTTP endpoint on libmicrohttpd: Host and cross-site checks, routing, bearer token, one-line errors; bodies come from the core's callbacks. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "control/admin.h"
#include "lib/buf.h"

/*
 * Staying reachable for /health under slow or stalled clients. libmicrohttpd cannot evict a
 * connection nor bound the time a request's headers take, so: room for many connections
 * (each costs a descriptor and ADMIN_MEMORY_LIMIT at most: 8 MB for all of them), an idle
 * timeout that closes a stalled one within seconds, and a pool of threads, so that a
 * POST /reload waiting for the main loop, or a slow reader of /metrics, holds one thread
 * while the others answer. 100 clients that send half a request and stop leave /health
 * answering at once (tests/integration/test_admin.py); a client that trickles a byte every
 * few seconds keeps its slot, and it takes ADMIN_CONN_LIMIT of them to fill the endpoint:
 * bind it to loopback or a management network (docs/admin.md).
 */
#define ADMIN_CONN_LIMIT     512
#define ADMIN_CONN_TIMEOUT_S 5
#define ADMIN_THREADS        2
#define ADMIN_MEMORY_LIMIT   (16 * 1024)   /* per connection: headers and query string */

struct admin {
    struct MHD_Daemon      *daemon;
    const struct admin_ops *ops;
    void                   *ctx;
    char                   *token;         /* NULL: no token required */
    char                   *hosts;         /* names allowed in Host besides addresses and
                                              localhost, separated by spaces; NULL: none */
    uint16_t                port;
};

#define CT_TEXT    "text/plain; charset=utf-8"
#define CT_HTML    "text/html; charset=utf-8"
/* The page's script and styles are inline and it only reads /stats from where it came. */
#define PAGE_CSP   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; " \
                   "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* The status page (src/control/admin_page.html, made a C string at build time). */
static const char admin_page[] =
#include "src/control/admin_page.h"
    ;
#define CT_JSON    "application/json"
#define CT_METRICS "text/plain; version=0.0.4; charset=utf-8"

/* ---- responses */

static enum MHD_Result admin_send(struct MHD_Connection *c, unsigned status, const char *ctype,
                                  const void *body, size_t len, const char *hname, const char *hval)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (r == NULL)
        return MHD_NO;                     /* out of memory: MHD closes the connection */
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (ok == MHD_YES)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (ok == MHD_YES && hname)
        ok = MHD_add_response_header(r, hname, hval);
    if (ok == MHD_YES)
        ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

/* A one-line error: "<status> <reason>\n". */
static enum MHD_Result admin_error(struct MHD_Connection *c, unsigned status, const char *hname,
                                   const char *hval, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static enum MHD_Result admin_error(struct MHD_Connection *c, unsigned status, const char *hname,
                                   const char *hval, const char *fmt, ...)
{
    char line[256];
    int n = snprintf(line, sizeof(line), "%u ", status);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    return admin_send(c, status, CT_TEXT, line, len, hname, hval);
}

/* Send a callback's body with status, or 500 when the callback failed. */
static enum MHD_Result admin_reply(struct MHD_Connection *c, int status, const char *ctype,
                                   struct buf *b)
{
    enum MHD_Result ok;
    if (status < 100 || status > 599)
        ok = admin_error(c, 500, NULL, NULL, "internal error (%d)", status);
    else
        ok = admin_send(c, (unsigned)status, ctype, buf_rptr(b), buf_len(b), NULL, NULL);
    buf_free(b);
    return ok;
}

/* ---- authorization */

/* Compare without an early exit, so timing does not reveal a prefix of the token. */
static int token_equal(const char *given, size_t glen, const char *token)
{
    size_t tlen = strlen(token);
    unsigned char diff = (unsigned char)(glen != tlen);
    for (size_t i = 0; i < glen; i++)
        diff |= (unsigned char)given[i] ^ (unsigned char)token[i < tlen ? i : 0];
    return diff == 0;
}

static int admin_authorized(const struct admin *a, struct MHD_Connection *c)
{
    if (a->token == NULL)
        return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    h += 7;
    while (*h == ' ')
        h++;
    size_t len = strlen(h);
    while (len > 0 && (h[len - 1] == ' ' || h[len - 1] == '\t'))
        len--;
    return token_equal(h, len, a->token);
}

/* ---- who may ask: Host and Origin (DNS rebinding, cross-site requests)
 *
 * A page on a hostile site can make the browser send requests here: by rebinding its own
 * name to 127.0.0.1 (then it reads the answers as same-origin) or by submitting a form
 * (then it cannot read, but a POST acts). Rebinding needs a name the attacker owns, and the
 * browser puts that name in Host; so Host must be an IP address (nobody else can serve a page
 * from this endpoint's address), localhost (browsers resolve it to loopback themselves) or a
 * name the operator listed in admin_hosts. The port is not compared: port forwards and
 * published container ports change it without changing who can reach the endpoint. A
 * browser always sends Host; a request without one (HTTP/1.0) is not a browser's. A form
 * can only send the three content types below and cannot send Authorization, so a POST with
 * one of them needs the token; and a cross-site Origin is refused outright. */

/* 1 when the host part of "host[:port]" or "[v6][:port]" (len bytes) may be served. */
static int admin_host_allowed(const struct admin *a, const char *h, size_t len)
{
    char name[256];
    const char *port = NULL;

    if (len == 0 || len >= sizeof(name))
        return 0;
    if (h[0] == '[') {                         /* an IPv6 literal, nothing else is bracketed */
        const char *close = memchr(h, ']', len);
        if (close == NULL || (size_t)(close - h) - 1 >= sizeof(name))
            return 0;
        memcpy(name, h + 1, (size_t)(close - h) - 1);
        name[close - h - 1] = '\0';
        if (close + 1 < h + len && close[1] != ':')
            return 0;
        port = close + 1 < h + len ? close + 2 : NULL;
        struct in6_addr a6;
        if (inet_pton(AF_INET6, name, &a6) != 1)
            return 0;
    } else {
        const char *colon = memchr(h, ':', len);
        size_t nlen = colon ? (size_t)(colon - h) : len;
        memcpy(name, h, nlen);
        name[nlen] = '\0';
        port = colon ? colon + 1 : NULL;
    }
    if (port != NULL) {                        /* digits only: "host:" or "host:x" is no Host */
        size_t plen = len - (size_t)(port - h);
        if (plen == 0 || plen > 5 || strspn(port, "0123456789") < plen)
            return 0;
    }
    if (h[0] == '[')
        return 1;
    struct in_addr a4;
    if (inet_pton(AF_INET, name, &a4) == 1 || strcasecmp(name, "localhost") == 0)
        return 1;
    size_t nlen = strlen(name);
    for (const char *l = nlen == 0 ? NULL : a->hosts; l != NULL && *l != '\0';) {
        size_t wl = strcspn(l, " ");
        if (wl == nlen && strncasecmp(l, name, nlen) == 0)
            return 1;
        l += wl;
        l += strspn(l, " ");
    }
    return 0;
}

/* 1 when the Origin header (if any) is this endpoint: http(s)://<an allowed host>. */
static int admin_origin_allowed(const struct admin *a, struct MHD_Connection *c)
{
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (o == NULL)
        return 1;
    if (strncasecmp(o, "http://", 7) == 0)
        o += 7;
    else if (strncasecmp(o, "https://", 8) == 0)
        o += 8;
    else
        return 0;                              /* "null" (a sandboxed or file page), other schemes */
    size_t len = strlen(o);
    if (len > 0 && o[len - 1] == '/')
        len--;
    return admin_host_allowed(a, o, len);
}

/* 1 when the request carries a content type that an HTML form (or a fetch without a CORS
 * preflight) can send: its media type, parameters and case aside. */
static int admin_form_content(struct MHD_Connection *c)
{
    static const char *const form[] = { "application/x-www-form-urlencoded",
                                         "multipart/form-data", "text/plain" };
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (ct == NULL)
        return 0;
    ct += strspn(ct, " \t");
    size_t len = strcspn(ct, ";");
    while (len > 0 && (ct[len - 1] == ' ' || ct[len - 1] == '\t'))
        len--;
    for (size_t i = 0; i < sizeof(form) / sizeof(form[0]); i++)
        if (strlen(form[i]) == len && strncasecmp(ct, form[i], len) == 0)
            return 1;
    return 0;
}

/* Answer a request that may not be served here (0 when it may): 421 for a foreign Host,
 * 403 for a cross-site Origin. */
static int admin_refuse_foreign(const struct admin *a, struct MHD_Connection *c,
                                const char *version, enum MHD_Result *ret)
{
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    int http10 = strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
    if (host == NULL ? !http10 : !admin_host_allowed(a, host, strlen(host))) {
        *ret = admin_error(c, 421, NULL, NULL, "misdirected request: Host must be an IP address, "
                           "localhost or a name listed in admin_hosts");
        return 1;
    }
    if (!admin_origin_allowed(a, c)) {
        *ret = admin_error(c, 403, NULL, NULL, "forbidden: a cross-site request (Origin is not "
                           "this endpoint)");
        return 1;
    }
    return 0;
}

/* ---- routing */

enum admin_route { R_NONE, R_PAGE, R_METRICS, R_STATS, R_HEALTH, R_RING, R_CONFIG, R_RELOAD };

static const struct {
    const char      *path;
    enum admin_route route;
    int              post;      /* 1: POST only; 0: GET and HEAD */
} admin_routes[] = {
    { "/",        R_PAGE,    0 },
    { "/metrics", R_METRICS, 0 },
    { "/stats",   R_STATS,   0 },
    { "/health",  R_HEALTH,  0 },
    { "/ring",    R_RING,    0 },
    { "/config",  R_CONFIG,  0 },
    { "/reload",  R_RELOAD,  1 },
};

/* Marks a POST whose (ignored) body is being read. */
static const char admin_post_marker;

static enum MHD_Result admin_handle(void *cls, struct MHD_Connection *c, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **req_cls)
{
    struct admin *a = cls;
    size_t r;
    enum MHD_Result refused;

    /* First, on the headers: nothing is read, routed or run for a foreign page. */
    if (*req_cls == NULL && admin_refuse_foreign(a, c, version, &refused))
        return refused;
    for (r = 0; r < sizeof(admin_routes) / sizeof(admin_routes[0]); r++)
        if (strcmp(url, admin_routes[r].path) == 0)
            break;
    if (r == sizeof(admin_routes) / sizeof(admin_routes[0])) {
        if (*upload_data_size) {           /* drain a body before answering */
            *upload_data_size = 0;
            return MHD_YES;
        }
        return admin_error(c, 404, NULL, NULL, "not found: try / /metrics /stats /health /ring /config /reload");
    }

    int is_get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    int is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    if (admin_routes[r].post ? !is_post : !is_get) {
        if (*upload_data_size) {
            *upload_data_size = 0;
            return MHD_YES;
        }
        return admin_error(c, 405, MHD_HTTP_HEADER_ALLOW, admin_routes[r].post ? "POST" : "GET, HEAD",
                           "method not allowed: %s %s", admin_routes[r].post ? "POST" : "GET",
                           admin_routes[r].path);
    }

    if (is_post) {
        /* Called first with the headers, then with the body in pieces, then once more
         * with nothing: answer on that last call. The body is not used. */
        if (*req_cls == NULL) {
            *req_cls = (void *)&admin_post_marker;
            return MHD_YES;
        }
        if (*upload_data_size) {
            *upload_data_size = 0;
            return MHD_YES;
        }
    }

    struct buf b;
    buf_init(&b);
    const struct admin_ops *ops = a->ops;
    switch (admin_routes[r].route) {
    case R_PAGE:
        buf_free(&b);
        return admin_send(c, 200, CT_HTML, admin_page, sizeof(admin_page) - 1,
                          "Content-Security-Policy", PAGE_CSP);
    case R_METRICS:
        if (ops->get_metrics == NULL)
            break;
        return admin_reply(c, ops->get_metrics(a->ctx, &b) == 0 ? 200 : -1, CT_METRICS, &b);
    case R_STATS:
        if (ops->get_stats_json == NULL)
            break;
        return admin_reply(c, ops->get_stats_json(a->ctx, &b) == 0 ? 200 : -1, CT_JSON, &b);
    case R_CONFIG:
        if (ops->config == NULL)
            break;
        return admin_reply(c, ops->config(a->ctx, &b) == 0 ? 200 : -1, CT_JSON, &b);
    case R_HEALTH: {
        if (ops->health == NULL)
            break;
        int st = ops->health(a->ctx, &b);
        return admin_reply(c, st == 200 || st == 503 ? st : -1, CT_TEXT, &b);
    }
    case R_RING: {
        if (ops->ring == NULL)
            break;
        const char *pool = NULL, *key = NULL;
        size_t plen = 0, klen = 0;
        if (MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, "pool", 4, &pool, &plen) != MHD_YES ||
            pool == NULL || plen == 0)
            return admin_error(c, 400, NULL, NULL, "missing parameter: pool (/ring?pool=P&key=K)");
        if (MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, "key", 3, &key, &klen) != MHD_YES ||
            key == NULL)
            return admin_error(c, 400, NULL, NULL, "missing parameter: key (/ring?pool=P&key=K)");
        if (memchr(pool, '\0', plen) != NULL)
            return admin_error(c, 404, NULL, NULL, "no such pool");
        int st = ops->ring(a->ctx, pool, key, klen, &b);
        return admin_reply(c, st == 200 || st == 404 ? st : -1, st == 200 ? CT_JSON : CT_TEXT, &b);
    }
    case R_RELOAD: {
        if (!admin_authorized(a, c))
            return admin_error(c, 401, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"ringleader\"",
                               "unauthorized: send Authorization: Bearer <admin_token>");
        if (a->token == NULL && admin_form_content(c))
            return admin_error(c, 403, NULL, NULL, "forbidden: a form's content type (send no "
                               "body or no Content-Type, or set admin_token and send it)");
        if (ops->reload == NULL)
            break;
        return admin_reply(c, ops->reload(a->ctx, &b), CT_TEXT, &b);
    }
    case R_NONE:
        break;
    }
    buf_free(&b);
    return admin_error(c, 501, NULL, NULL, "not implemented: %s", admin_routes[r].path);
}

/* ---- start and stop */

/* Parse "host:port", "[v6]:port" or ":port" into a socket address. 0, or -1 with err. */
static int admin_parse_addr(const char *addr, struct sockaddr_storage *ss, char *err, size_t errlen)
{
    char host[256];
    const char *colon, *hs;
    size_t hlen;

    if (addr == NULL || *addr == '\0') {
        snprintf(err, errlen, "admin: no listen address");
        return -1;
    }
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (close == NULL || close[1] != ':') {
            snprintf(err, errlen, "admin: bad address '%s': want [v6]:port", addr);
            return -1;
        }
        hs = addr + 1;
        hlen = (size_t)(close - hs);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (colon == NULL) {
            snprintf(err, errlen, "admin: bad address '%s': want host:port", addr);
            return -1;
        }
        hs = addr;
        hlen = (size_t)(colon - addr);
    }
    if (hlen >= sizeof(host)) {
        snprintf(err, errlen, "admin: host name too long in '%s'", addr);
        return -1;
    }
    memcpy(host, hs, hlen);
    host[hlen] = '\0';
    if (hlen == 0)
        strcpy(host, "127.0.0.1");             /* loopback unless told otherwise */
    char *end;
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno || port > 65535) {
        snprintf(err, errlen, "admin: bad port in '%s'", addr);
        return -1;
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV }, *res = NULL;
    char pstr[8];
    snprintf(pstr, sizeof(pstr), "%lu", port);
    int rc = getaddrinfo(host, pstr, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(err, errlen, "admin: cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

struct admin *admin_start(const char *addr, const char *token, const char *hosts,
                          const struct admin_ops *ops, void *ctx, char *err, size_t errlen)
{
    return admin_start_on(-1, addr, token, hosts, ops, ctx, err, errlen);
}

struct admin *admin_start_on(int listen_fd, const char *addr, const char *token,
                             const char *hosts, const struct admin_ops *ops, void *ctx,
                             char *err, size_t errlen)
{
    char dummy[1];
    if (err == NULL || errlen == 0) {
        err = dummy;
        errlen = sizeof(dummy);
    }
    err[0] = '\0';
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (admin_parse_addr(addr, &ss, err, errlen) < 0)
        return NULL;

    struct admin *a = calloc(1, sizeof(*a));
    if (a == NULL)
        goto nomem;
    a->ops = ops;
    a->ctx = ctx;
    if (token && *token && (a->token = strdup(token)) == NULL)
        goto nomem;
    if (hosts && *hosts && (a->hosts = strdup(hosts)) == NULL)
        goto nomem;

    /* ITC, not a shutdown() of the listener, wakes the threads at the stop: a listener
     * handed to an upgrade's successor is the successor's too (admin_quiesce). */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ITC;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    a->daemon = MHD_start_daemon(flags, 0, NULL, NULL, admin_handle, a,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                 MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)ADMIN_CONN_LIMIT,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)ADMIN_CONN_TIMEOUT_S,
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)ADMIN_MEMORY_LIMIT,
                                 MHD_OPTION_THREAD_POOL_SIZE, (unsigned)ADMIN_THREADS,
                                 MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)ADMIN_CONN_LIMIT,
                                 MHD_OPTION_END);
    if (a->daemon == NULL) {
        snprintf(err, errlen, "admin: cannot listen on %s (address in use or not permitted?)", addr);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(a->daemon, MHD_DAEMON_INFO_BIND_PORT);
    a->port = info ? info->port : 0;
    return a;
nomem:
    snprintf(err, errlen, "admin: out of memory");
fail:
    if (a) {
        free(a->token);
        free(a->hosts);
    }
    free(a);
    return NULL;
}

int admin_listen_fd(const struct admin *a)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(a->daemon,
                                                            MHD_DAEMON_INFO_LISTEN_FD);
    return info != NULL ? info->listen_fd : -1;
}

void admin_quiesce(struct admin *a)
{
    MHD_socket fd = MHD_quiesce_daemon(a->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

uint16_t admin_port(const struct admin *a)
{
    return a->port;
}

void admin_stop(struct admin *a)
{
    if (a == NULL)
        return;
    MHD_stop_daemon(a->daemon);
    free(a->token);
    free(a->hosts);
    free(a);
}
