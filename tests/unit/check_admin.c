/* Unit tests for the admin HTTP endpoint: every route over a real socket with fake callbacks, auth, errors, garbage. */
#include "config.h"

#include <arpa/inet.h>
#include "check_main.h"
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/admin.h"
#include "lib/buf.h"

/* ---- fake core */

struct fake {
    atomic_int healthy;
    atomic_int fail_stats;
    atomic_int calls_reload;
    atomic_int calls_ring;
    char last_key[64];
    size_t last_keylen;
};

static int fake_stats(void *ctx, struct buf *out)
{
    struct fake *f = ctx;
    if (atomic_load(&f->fail_stats))
        return -ENOMEM;
    return buf_append_str(out, "{\"service\": \"ringleader\"}");
}

static int fake_metrics(void *ctx, struct buf *out)
{
    return buf_append_str(out, "# TYPE ringleader_up gauge\nringleader_up 1\n");
}

static int fake_health(void *ctx, struct buf *out)
{
    struct fake *f = ctx;
    int ok = atomic_load(&f->healthy);
    buf_append_str(out, ok ? "ok\n" : "draining\n");
    return ok ? 200 : 503;
}

static int fake_ring(void *ctx, const char *pool, const char *key, size_t keylen, struct buf *out)
{
    struct fake *f = ctx;
    atomic_fetch_add(&f->calls_ring, 1);
    if (strcmp(pool, "alpha") != 0) {
        buf_append_str(out, "no such pool\n");
        return 404;
    }
    f->last_keylen = keylen < sizeof(f->last_key) ? keylen : sizeof(f->last_key);
    memcpy(f->last_key, key, f->last_keylen);
    return buf_appendf(out, "{\"pool\": \"alpha\", \"keylen\": %zu, \"owner\": \"beta\"}", keylen) == 0 ? 200 : -1;
}

static int fake_config(void *ctx, struct buf *out)
{
    return buf_append_str(out, "{\"alpha\": {}}");
}

static int fake_reload(void *ctx, struct buf *out)
{
    struct fake *f = ctx;
    atomic_fetch_add(&f->calls_reload, 1);
    buf_append_str(out, "reloaded: 1 pool changed\n");
    return 200;
}

static const struct admin_ops fake_ops = {
    .get_stats_json = fake_stats, .get_metrics = fake_metrics, .health = fake_health,
    .ring = fake_ring, .config = fake_config, .reload = fake_reload,
};

/* ---- a raw HTTP client */

struct reply {
    int status;
    char head[4096];
    char body[32768];       /* the status page is about 10 KB */
    size_t body_len;
};

static int connect_to(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;                 /* the server may close early on garbage: fine */
        p += w;
        n -= (size_t)w;
    }
}

/* Read until the server closes (bounded by a 5 s poll per read); returns bytes read. */
static size_t recv_all(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (int rounds = 0; rounds < 10000 && n + 1 < cap; rounds++) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        if (poll(&pfd, 1, 5000) <= 0)
            break;
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return n;
}

static void request(uint16_t port, const char *raw, size_t len, struct reply *rep)
{
    static char in[40000];
    int fd = connect_to(port);
    send_all(fd, raw, len);
    size_t n = recv_all(fd, in, sizeof(in));
    close(fd);
    memset(rep, 0, sizeof(*rep));
    rep->status = -1;
    if (n < 12 || sscanf(in, "HTTP/1.%*d %d", &rep->status) != 1)
        return;
    char *end = strstr(in, "\r\n\r\n");
    ck_assert_ptr_nonnull(end);
    size_t hl = (size_t)(end - in);
    ck_assert_uint_lt(hl, sizeof(rep->head));
    memcpy(rep->head, in, hl);
    rep->body_len = n - hl - 4;
    ck_assert_uint_lt(rep->body_len, sizeof(rep->body));
    memcpy(rep->body, end + 4, rep->body_len);
    rep->body[rep->body_len] = '\0';
}

static void get(uint16_t port, const char *method, const char *path, const char *extra, struct reply *rep)
{
    char raw[4096];
    int n = snprintf(raw, sizeof(raw), "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%s\r\n",
                     method, path, extra ? extra : "");
    request(port, raw, (size_t)n, rep);
}

static int has_header(const struct reply *r, const char *line)
{
    return strcasestr(r->head, line) != NULL;
}

/* ---- tests */

static struct fake fk;
static struct admin *adm;
static uint16_t port;

static void setup(void)
{
    memset(&fk, 0, sizeof(fk));
    atomic_store(&fk.healthy, 1);
    char err[256];
    adm = admin_start("127.0.0.1:0", "s3cret", NULL, &fake_ops, &fk, err, sizeof(err));
    ck_assert_msg(adm != NULL, "admin_start: %s", err);
    port = admin_port(adm);
    ck_assert_uint_gt(port, 0);
}

static void teardown(void)
{
    admin_stop(adm);
    adm = NULL;
}

START_TEST(test_get_endpoints)
{
    struct reply r;
    get(port, "GET", "/metrics", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert(has_header(&r, "Content-Type: text/plain; version=0.0.4"));
    ck_assert_str_eq(r.body, "# TYPE ringleader_up gauge\nringleader_up 1\n");

    get(port, "GET", "/stats", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert(has_header(&r, "Content-Type: application/json"));
    ck_assert_str_eq(r.body, "{\"service\": \"ringleader\"}");

    get(port, "GET", "/config", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"alpha\": {}}");

    get(port, "HEAD", "/stats", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.body_len, 0);
}
END_TEST

START_TEST(test_health_200_then_503)
{
    struct reply r;
    get(port, "GET", "/health", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "ok\n");
    atomic_store(&fk.healthy, 0);
    get(port, "GET", "/health", NULL, &r);
    ck_assert_int_eq(r.status, 503);
    ck_assert_str_eq(r.body, "draining\n");
}
END_TEST

START_TEST(test_ring_parameters)
{
    struct reply r;
    get(port, "GET", "/ring?pool=alpha&key=user%3A42", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(fk.last_keylen, 7);
    ck_assert_int_eq(memcmp(fk.last_key, "user:42", 7), 0);
    ck_assert(has_header(&r, "Content-Type: application/json"));

    get(port, "GET", "/ring?pool=alpha&key=a%00b%FF", NULL, &r);   /* binary key */
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(fk.last_keylen, 4);
    ck_assert_int_eq(memcmp(fk.last_key, "a\0b\xff", 4), 0);

    get(port, "GET", "/ring?pool=alpha&key=", NULL, &r);            /* the empty key is a key */
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(fk.last_keylen, 0);

    get(port, "GET", "/ring?pool=nope&key=x", NULL, &r);
    ck_assert_int_eq(r.status, 404);

    int before = atomic_load(&fk.calls_ring);
    get(port, "GET", "/ring?pool=alpha", NULL, &r);
    ck_assert_int_eq(r.status, 400);
    ck_assert_ptr_nonnull(strstr(r.body, "missing parameter: key"));
    get(port, "GET", "/ring?key=x", NULL, &r);
    ck_assert_int_eq(r.status, 400);
    ck_assert_ptr_nonnull(strstr(r.body, "missing parameter: pool"));
    get(port, "GET", "/ring", NULL, &r);
    ck_assert_int_eq(r.status, 400);
    ck_assert_int_eq(atomic_load(&fk.calls_ring), before);          /* never reached the core */
    /* One line. */
    ck_assert_ptr_eq(strchr(r.body, '\n'), r.body + r.body_len - 1);
}
END_TEST

START_TEST(test_reload_requires_token)
{
    struct reply r;
    const char *body = "Content-Length: 5\r\n\r\nhello";
    char raw[512];

    snprintf(raw, sizeof(raw), "POST /reload HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%s", body);
    request(port, raw, strlen(raw), &r);
    ck_assert_int_eq(r.status, 401);
    ck_assert(has_header(&r, "WWW-Authenticate: Bearer"));

    get(port, "POST", "/reload", "Authorization: Bearer wrong\r\n", &r);
    ck_assert_int_eq(r.status, 401);
    get(port, "POST", "/reload", "Authorization: Bearer s3cre\r\n", &r);    /* a prefix */
    ck_assert_int_eq(r.status, 401);
    get(port, "POST", "/reload", "Authorization: Bearer s3cret2\r\n", &r);  /* longer */
    ck_assert_int_eq(r.status, 401);
    get(port, "POST", "/reload", "Authorization: Basic czNjcmV0\r\n", &r);
    ck_assert_int_eq(r.status, 401);
    ck_assert_int_eq(atomic_load(&fk.calls_reload), 0);

    snprintf(raw, sizeof(raw), "POST /reload HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
             "Authorization: Bearer s3cret\r\n%s", body);
    request(port, raw, strlen(raw), &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "reloaded: 1 pool changed\n");
    get(port, "POST", "/reload", "Authorization: bearer s3cret\r\nContent-Length: 0\r\n", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(atomic_load(&fk.calls_reload), 2);
}
END_TEST

START_TEST(test_405_404_500)
{
    struct reply r;
    get(port, "GET", "/reload", NULL, &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert(has_header(&r, "Allow: POST"));
    get(port, "POST", "/metrics", "Content-Length: 3\r\n\r\nabc", &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert(has_header(&r, "Allow: GET, HEAD"));
    get(port, "DELETE", "/stats", NULL, &r);
    ck_assert_int_eq(r.status, 405);
    get(port, "GET", "/index.html", NULL, &r);
    ck_assert_int_eq(r.status, 404);
    get(port, "GET", "/metricsx", NULL, &r);
    ck_assert_int_eq(r.status, 404);
    get(port, "GET", "/../../etc/passwd", NULL, &r);
    ck_assert_int_eq(r.status, 404);
    ck_assert_ptr_eq(strchr(r.body, '\n'), r.body + r.body_len - 1);
    atomic_store(&fk.fail_stats, 1);
    get(port, "GET", "/stats", NULL, &r);
    ck_assert_int_eq(r.status, 500);
    ck_assert_int_eq(atomic_load(&fk.calls_reload), 0);
}
END_TEST

/* GET / is the status page: one HTML file that reads /stats and may fetch nothing else. */
START_TEST(test_status_page)
{
    struct reply r;
    get(port, "GET", "/", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert(has_header(&r, "Content-Type: text/html; charset=utf-8"));
    ck_assert(has_header(&r, "Content-Security-Policy: default-src 'none'"));
    ck_assert(has_header(&r, "Cache-Control: no-store"));
    ck_assert_ptr_nonnull(strstr(r.body, "<!DOCTYPE html>"));
    ck_assert_ptr_nonnull(strstr(r.body, "fetch(\"stats\""));
    ck_assert_ptr_null(strstr(r.body, "http://"));
    ck_assert_ptr_null(strstr(r.body, "https://"));
    ck_assert_str_eq(r.body + r.body_len - 8, "</html>\n");
    get(port, "HEAD", "/", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    get(port, "POST", "/", "Content-Length: 0\r\n\r\n", &r);
    ck_assert_int_eq(r.status, 405);
}
END_TEST

/* Garbage never crashes the server and never reaches a callback it should not. */
START_TEST(test_garbage_requests)
{
    static const char *junk[] = {
        "\r\n\r\n",
        "GARBAGE\r\n\r\n",
        "GET\r\n\r\n",
        "GET /stats HTTP/9.9\r\n\r\n",
        "GET /stats\r\n\r\n",
        "GET /stats HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        "GET /stats HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "POST /reload HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "GET /ring?pool=%&key=%%% HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /ring?&&&=&=&pool&key HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /stats HTTP/1.1\r\nBad Header Without Colon\r\n\r\n",
        "POST /reload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n\r\n",
        NULL,                                          /* nul_req below */
        "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",      /* a TLS ClientHello start */
    };
    static const char nul_req[] = "GET /st\0ats HTTP/1.1\r\n\r\n";
    struct reply r;
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        if (junk[i] == NULL)
            request(port, nul_req, sizeof(nul_req) - 1, &r);
        else
            request(port, junk[i], strlen(junk[i]), &r);
        ck_assert(r.status == -1 || (r.status >= 200 && r.status < 600));
    }
    /* A long URL and a huge header, random bytes, then a half request closed early. */
    char *big = malloc(200000);
    ck_assert_ptr_nonnull(big);
    int n = snprintf(big, 200000, "GET /ring?pool=alpha&key=");
    memset(big + n, 'k', 150000);
    strcpy(big + n + 150000, " HTTP/1.1\r\nHost: x\r\n\r\n");
    request(port, big, strlen(big), &r);
    ck_assert(r.status == -1 || r.status == 414 || r.status == 431 || r.status == 400);
    uint64_t x = 0x243f6a8885a308d3ULL;
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        big[i] = (char)x;
    }
    request(port, big, 100000, &r);
    free(big);
    for (int i = 0; i < 20; i++) {
        int fd = connect_to(port);
        send_all(fd, "GET /metrics HTTP/1.1\r\nHo", 25);
        close(fd);
    }
    ck_assert_int_eq(atomic_load(&fk.calls_reload), 0);
    /* Still serving. */
    get(port, "GET", "/health", NULL, &r);
    ck_assert_int_eq(r.status, 200);
}
END_TEST

START_TEST(test_no_token_allows_reload)
{
    char err[256];
    struct fake f2;
    memset(&f2, 0, sizeof(f2));
    struct admin *a = admin_start(":0", NULL, NULL, &fake_ops, &f2, err, sizeof(err));   /* loopback */
    ck_assert_msg(a != NULL, "%s", err);
    struct reply r;
    get(admin_port(a), "POST", "/reload", "Content-Length: 0\r\n", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(atomic_load(&f2.calls_reload), 1);
    admin_stop(a);
}
END_TEST

/* Issue 22 item 10: one raw request with the given Host line ("" for none) and extra headers. */
static void ask(uint16_t p, const char *method, const char *path, const char *version,
                const char *host, const char *extra, struct reply *rep)
{
    char raw[2048];
    int n = snprintf(raw, sizeof(raw), "%s %s %s\r\n%s%s%sConnection: close\r\n%s\r\n", method,
                     path, version, *host ? "Host: " : "", host, *host ? "\r\n" : "",
                     extra ? extra : "");
    request(p, raw, (size_t)n, rep);
}

/* DNS rebinding: a Host naming anything but an address, localhost or a listed name is
 * refused before any callback runs, whatever the path. */
START_TEST(test_host_must_be_an_address_localhost_or_listed)
{
    char err[256];
    struct fake f2;
    memset(&f2, 0, sizeof(f2));
    f2.healthy = 1;
    struct admin *a = admin_start("127.0.0.1:0", NULL, "Admin.Example ops", &fake_ops, &f2,
                                  err, sizeof(err));
    ck_assert_msg(a != NULL, "%s", err);
    uint16_t p = admin_port(a);
    struct reply r;
    static const char *const good[] = { "127.0.0.1:1", "127.0.0.1", "10.1.2.3:22223",
                                        "[::1]:22223", "[::1]", "localhost:22223", "LOCALHOST",
                                        "admin.example", "ADMIN.EXAMPLE:8080", "ops:1" };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ask(p, "GET", "/stats", "HTTP/1.1", good[i], NULL, &r);
        ck_assert_msg(r.status == 200, "Host %s: %d", good[i], r.status);
    }
    static const char *const bad[] = { "evil.example", "evil.example:22223", "127.0.0.1.evil.example",
                                       "localhost.evil.example", "admin.example.evil", "x",
                                       "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:80:80", "[::1",
                                       "[evil]:80", "[::1]x", "::1", "example", "op", "" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ask(p, "GET", "/stats", "HTTP/1.1", bad[i], NULL, &r);
        ck_assert_msg(r.status == 421 || (bad[i][0] == '\0' && r.status == 400),
                      "Host '%s': %d", bad[i], r.status);
        ck_assert_ptr_null(strstr(r.body, "ringleader"));      /* nothing of /stats */
        ask(p, "POST", "/reload", "HTTP/1.1", bad[i], "Content-Length: 0\r\n", &r);
        ck_assert_msg(r.status == 421 || (bad[i][0] == '\0' && r.status == 400),
                      "POST with Host '%s': %d", bad[i], r.status);
    }
    ask(p, "GET", "/health", "HTTP/1.1", "evil.example", NULL, &r);
    ck_assert_int_eq(r.status, 421);
    ck_assert_ptr_nonnull(strstr(r.body, "admin_hosts"));      /* says what to do */
    ask(p, "GET", "/health", "HTTP/1.0", "", NULL, &r);         /* no Host: not a browser */
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(atomic_load(&f2.calls_reload), 0);
    admin_stop(a);
}
END_TEST

/* Cross-site: a foreign Origin is refused; without a token a POST with a form's content type
 * is refused, one with none (curl -X POST) or another type is served; a token is enough. */
START_TEST(test_cross_site_origin_and_forms_are_refused)
{
    char err[256];
    struct fake f2;
    memset(&f2, 0, sizeof(f2));
    struct admin *a = admin_start("127.0.0.1:0", NULL, NULL, &fake_ops, &f2, err, sizeof(err));
    ck_assert_msg(a != NULL, "%s", err);
    uint16_t p = admin_port(a);
    struct reply r;
    static const char *const origins[] = { "http://evil.example", "https://evil.example:443",
                                           "null", "file://", "http://localhost.evil.example" };
    for (size_t i = 0; i < sizeof(origins) / sizeof(origins[0]); i++) {
        char h[256];
        snprintf(h, sizeof(h), "Origin: %s\r\nContent-Length: 0\r\n", origins[i]);
        ask(p, "POST", "/reload", "HTTP/1.1", "127.0.0.1", h, &r);
        ck_assert_msg(r.status == 403, "Origin %s: %d", origins[i], r.status);
        ask(p, "GET", "/config", "HTTP/1.1", "127.0.0.1", h, &r);
        ck_assert_msg(r.status == 403, "GET with Origin %s: %d", origins[i], r.status);
    }
    static const char *const forms[] = { "application/x-www-form-urlencoded",
                                         "Multipart/Form-Data; boundary=x", "text/plain",
                                         " text/plain ;charset=UTF-8" };
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        char h[256];
        snprintf(h, sizeof(h), "Content-Type: %s\r\nContent-Length: 3\r\n\r\na=b", forms[i]);
        ask(p, "POST", "/reload", "HTTP/1.1", "127.0.0.1:9", h, &r);
        ck_assert_msg(r.status == 403, "Content-Type %s: %d", forms[i], r.status);
    }
    ck_assert_int_eq(atomic_load(&f2.calls_reload), 0);
    /* what tools send: curl -X POST (no type), a JSON body, the endpoint's own page origin */
    ask(p, "POST", "/reload", "HTTP/1.1", "127.0.0.1:9", "Content-Length: 0\r\n", &r);
    ck_assert_int_eq(r.status, 200);
    ask(p, "POST", "/reload", "HTTP/1.1", "localhost",
        "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", &r);
    ck_assert_int_eq(r.status, 200);
    ask(p, "POST", "/reload", "HTTP/1.1", "127.0.0.1:9",
        "Origin: http://127.0.0.1:9\r\nContent-Length: 0\r\n", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(atomic_load(&f2.calls_reload), 3);
    admin_stop(a);

    /* with a token, the token decides: a form's type with it is served */
    memset(&f2, 0, sizeof(f2));
    a = admin_start("127.0.0.1:0", "s3cret", NULL, &fake_ops, &f2, err, sizeof(err));
    ck_assert_msg(a != NULL, "%s", err);
    ask(admin_port(a), "POST", "/reload", "HTTP/1.1", "127.0.0.1",
        "Content-Type: text/plain\r\nContent-Length: 0\r\n", &r);
    ck_assert_int_eq(r.status, 401);
    ask(admin_port(a), "POST", "/reload", "HTTP/1.1", "127.0.0.1",
        "Authorization: Bearer s3cret\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(atomic_load(&f2.calls_reload), 1);
    admin_stop(a);
}
END_TEST

START_TEST(test_missing_callbacks_answer_501)
{
    char err[256];
    static const struct admin_ops none = { 0 };
    struct admin *a = admin_start("127.0.0.1:0", NULL, NULL, &none, NULL, err, sizeof(err));
    ck_assert_msg(a != NULL, "%s", err);
    struct reply r;
    get(admin_port(a), "GET", "/metrics", NULL, &r);
    ck_assert_int_eq(r.status, 501);
    get(admin_port(a), "GET", "/ring?pool=a&key=b", NULL, &r);
    ck_assert_int_eq(r.status, 501);
    admin_stop(a);
}
END_TEST

START_TEST(test_bad_addresses)
{
    char err[256];
    const char *bad[] = { "", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:8x",
                          "[::1:80", "no.such.host.invalid:80" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        ck_assert_ptr_null(admin_start(bad[i], NULL, NULL, &fake_ops, NULL, err, sizeof(err)));
        ck_assert_msg(strncmp(err, "admin: ", 7) == 0, "no reason for '%s'", bad[i]);
    }
    ck_assert_ptr_null(admin_start(NULL, NULL, NULL, &fake_ops, NULL, err, sizeof(err)));
    /* The port is taken. */
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    ck_assert_ptr_null(admin_start(addr, NULL, NULL, &fake_ops, NULL, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "cannot listen"));
    admin_stop(NULL);
}
END_TEST

static Suite *admin_suite(void)
{
    Suite *s = suite_create("admin");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_get_endpoints);
    tcase_add_test(tc, test_health_200_then_503);
    tcase_add_test(tc, test_ring_parameters);
    tcase_add_test(tc, test_reload_requires_token);
    tcase_add_test(tc, test_405_404_500);
    tcase_add_test(tc, test_status_page);
    tcase_add_test(tc, test_garbage_requests);
    tcase_add_test(tc, test_no_token_allows_reload);
    tcase_add_test(tc, test_missing_callbacks_answer_501);
    tcase_add_test(tc, test_host_must_be_an_address_localhost_or_listed);
    tcase_add_test(tc, test_cross_site_origin_and_forms_are_refused);
    tcase_add_test(tc, test_bad_addresses);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(admin_suite)
