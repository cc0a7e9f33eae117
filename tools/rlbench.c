/* rlbench: closed-loop, verifying load generator for memcached and Redis servers and proxies. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

/*
 * The model (one thread, one epoll set):
 *
 *   conn[i] --(up to P requests in flight, FIFO)--> server[i % nservers]
 *
 * Every connection keeps its window of P requests full: after each read, the
 * replies are matched in order against the in-flight queue, verified and timed,
 * and as many new requests as slots were freed are formatted into the
 * connection's write buffer and sent with one write(). With P = 1 this is the
 * classic request/reply loop; with P = 16 the pipeline never drains.
 *
 * Values are a function of the key number (RLB value_fill), so a GET reply can
 * be checked byte for byte without remembering what was written. In direct mode
 * (several --server) key n lives on server n % nservers and each connection only
 * asks its own server for the keys it owns, the way a client-side hashing
 * library would; through a proxy there is one target and every key is fair game.
 *
 * Nothing is allocated after start-up: buffers and queues are sized from -P and
 * --value-size once.
 *
 * With --tls every connection is TLS (OpenSSL on the socket, handshake done with
 * the blocking connect, before the clock starts; the certificate is not verified:
 * this measures the target's cost, not a client's trust).
 */

#define RLB_MAX_SERVERS 64
#define RLB_MAX_EVENTS 256
#define RLB_REQ_OVERHEAD 128         /* command, key and framing around a value */
#define RLB_PATTERN_PERIOD 62        /* [A-Za-z0-9] */
#define RLB_LINE_MAX 1024            /* a reply header line longer than this is garbage */

/* Log-linear histogram of nanoseconds: values below 2^HIST_SUB_BITS are exact,
 * above that each power of two is split into 2^(HIST_SUB_BITS-1) buckets, so
 * every bucket is within 1/64 (1.6 %) of its values. */
#define HIST_SUB_BITS 7
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_HALF (HIST_SUB / 2)
#define HIST_BUCKETS (HIST_SUB + (64 - HIST_SUB_BITS) * HIST_HALF)

enum rlb_proto { RLB_MEMCACHE, RLB_REDIS, RLB_MEMCACHE_BINARY };
enum rlb_op { RLB_GET, RLB_SET };

struct rlb_hist {
    uint64_t count[HIST_BUCKETS];
    uint64_t n;
    uint64_t sum;
    uint64_t max;
};

struct rlb_opts {
    struct sockaddr_storage addr[RLB_MAX_SERVERS];
    socklen_t addrlen[RLB_MAX_SERVERS];
    char name[RLB_MAX_SERVERS][128];
    unsigned nservers;
    const char *host;
    const char *port;
    enum rlb_proto proto;
    unsigned conns;
    unsigned pipeline;
    unsigned ratio_get;
    unsigned ratio_set;
    uint32_t keys;
    uint32_t value_size;
    uint64_t requests;             /* 0: bounded by duration */
    double duration;               /* seconds; 0: bounded by requests */
    bool prefill;
    bool prefill_only;
    bool expect_hits;              /* a GET miss counts as an error */
    bool json;
    double hot_share;              /* fraction of GETs sent for the hot key (0: none) */
    uint64_t seed;
    double timeout;                /* seconds without any reply before giving up */
    bool tls;                      /* every connection speaks TLS */
    const char *auth;              /* Redis: "user:pass" sent as AUTH on every connection */
    double rate;                   /* requests/s over every connection (open loop); 0: closed */
    bool rate_sleep;               /* --rate-sleep: pace by sleeping only (no spinning) */
};

struct rlb_stats {
    struct rlb_hist hist;
    uint64_t done;                 /* replies received, whatever they said */
    uint64_t gets;
    uint64_t sets;
    uint64_t hits;
    uint64_t misses;
    uint64_t error_replies;        /* ERROR, CLIENT_ERROR, SERVER_ERROR, -ERR ... */
    uint64_t mismatches;           /* a well-framed reply with the wrong content */
    uint64_t protocol_errors;      /* framing lost: the connection is closed */
    uint64_t disconnects;          /* requests lost with a closed connection */
    uint64_t timeouts;             /* requests still unanswered at the end */
};

struct rlb_inflight {
    uint64_t sent_ns;
    uint32_t key;
    uint8_t op;
};

struct rlb_conn {
    int fd;
    SSL *ssl;                      /* --tls */
    unsigned server;
    bool dead;
    bool want_out;
    char *wbuf;
    size_t wlen, wpos, wcap;
    char *rbuf;
    size_t rlen, rpos, rcap;
    struct rlb_inflight *q;
    unsigned qhead, qlen;
    uint64_t rng;
    uint64_t next_ns;              /* --rate: when this connection's next request is due */
};

struct rlb_bench {
    struct rlb_opts o;
    struct rlb_conn *conns;
    int epfd;
    bool prefilling;
    bool stop_issuing;
    uint64_t paced_end_ns;         /* --rate with --duration: no request is due from here on */
    uint64_t issued;
    uint64_t limit;                /* requests to issue in this phase; UINT64_MAX: time-bound */
    uint32_t prefill_next[RLB_MAX_SERVERS];
    uint64_t inflight;
    unsigned live;
    char *pattern;                 /* value_size + RLB_PATTERN_PERIOD bytes */
    char *scratch;                 /* expected value of the reply being checked */
    SSL_CTX *tls;                  /* --tls */
    char vlen_str[16];
    size_t vlen_len;
    struct rlb_stats st;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: fast, seedable, good enough to pick keys and operations. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static unsigned hist_index(uint64_t v)
{
    if (v < HIST_SUB)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - (HIST_SUB_BITS - 1);
    return HIST_SUB + (shift - 1) * HIST_HALF + (unsigned)((v >> shift) - HIST_HALF);
}

/* Midpoint of the values bucket idx holds. */
static double hist_value(unsigned idx)
{
    if (idx < HIST_SUB)
        return idx;
    unsigned shift = (idx - HIST_SUB) / HIST_HALF + 1;
    uint64_t lo = ((uint64_t)((idx - HIST_SUB) % HIST_HALF) + HIST_HALF) << shift;
    return (double)lo + (double)((1ull << shift) - 1) / 2.0;
}

static void hist_record(struct rlb_hist *h, uint64_t v)
{
    h->count[hist_index(v)]++;
    h->n++;
    h->sum += v;
    if (v > h->max)
        h->max = v;
}

/* The q-quantile (0..1) in nanoseconds; 0 for an empty histogram. */
static double hist_quantile(const struct rlb_hist *h, double q)
{
    if (h->n == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)h->n);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->count[i];
        if (seen >= rank) {
            double v = hist_value(i);
            return v > (double)h->max ? (double)h->max : v;
        }
    }
    return (double)h->max;
}

/* Writes n in decimal at dst (room for 10 bytes); returns the length. */
static size_t fmt_u32(char *dst, uint32_t n)
{
    char tmp[10];
    size_t len = 0;
    do {
        tmp[len++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    for (size_t i = 0; i < len; i++)
        dst[i] = tmp[len - 1 - i];
    return len;
}

/* "key:<n>" at dst; returns the length (at most 14). */
static size_t key_fmt(char *dst, uint32_t n)
{
    memcpy(dst, "key:", 4);
    return 4 + fmt_u32(dst + 4, n);
}

/* The value of key n: its number and '|', then the [A-Za-z0-9] cycle shifted by
 * n, cut to value_size bytes. Writes exactly value_size bytes at dst. */
static void value_fill(const struct rlb_bench *b, char *dst, uint32_t n)
{
    size_t size = b->o.value_size;
    char hdr[12];
    size_t h = fmt_u32(hdr, n);
    hdr[h++] = '|';
    if (h > size)
        h = size;
    memcpy(dst, hdr, h);
    memcpy(dst + h, b->pattern + n % RLB_PATTERN_PERIOD + h, size - h);
}

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: rlbench [options]\n"
        "  --host H --port P          one target (a proxy or a server); default 127.0.0.1:11211\n"
        "  --server H:P               direct mode, repeatable: connections round-robin over the\n"
        "                             servers, key n owned by server n %% nservers\n"
        "  --proto memcache|memcache-binary|redis  default memcache\n"
        "  -c, --connections N        default 50\n"
        "  -P, --pipeline N           requests in flight per connection, default 1\n"
        "  --ratio G:S                GETs to SETs, default 1:0 (0:1 SET only, 9:1 mixed)\n"
        "  --keys N                   keyspace key:0 .. key:N-1, default 10000\n"
        "  --value-size N             bytes, default 100\n"
        "  -n, --requests N           stop after N requests (default 100000 unless --duration)\n"
        "  -d, --duration S           stop issuing after S seconds (fractions allowed)\n"
        "  --prefill                  SET every key once through the target first (so GETs hit;\n"
        "                             implies --expect-hits)\n"
        "  --prefill-only             only the prefill phase, then exit\n"
        "  --expect-hits              a GET miss is an error (keys were prefilled earlier)\n"
        "  --hot-key-share F          send a fraction F (0..1) of the GETs for one key, key:0\n"
        "                             (in direct mode: the first key each server owns)\n"
        "  --seed N                   default 1\n"
        "  --timeout S                give up after S seconds without a reply, default 10\n"
        "  --json                     print one JSON line instead of the text summary\n"
        "  --tls                      connect with TLS (certificates are not verified)\n"
        "  --auth USER:PASS           Redis: AUTH USER PASS on every connection first (plaintext)\n"
        "  --rate R                   open loop: R requests/s over every connection, each timed\n"
        "                             from when it was due (a connection still waits for its\n"
        "                             pipeline slot); default closed loop\n"
        "  --rate-sleep               with --rate: wait by sleeping only, never spinning\n"
        "                             (requests go out up to a millisecond late, in small\n"
        "                             bursts): a background load that must not take a core\n"
        "Exit status: 0 all replies correct, 1 errors were seen, 2 usage or connect failure.\n");
}

static int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v > max || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

/* Resolves host:port into slot i of the options; 0 or -1 with a message. */
static int opts_add_server(struct rlb_opts *o, const char *host, const char *port)
{
    if (o->nservers >= RLB_MAX_SERVERS) {
        fprintf(stderr, "rlbench: at most %d servers\n", RLB_MAX_SERVERS);
        return -1;
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || !res) {
        fprintf(stderr, "rlbench: %s:%s: %s\n", host, port, gai_strerror(rc));
        return -1;
    }
    unsigned i = o->nservers++;
    memcpy(&o->addr[i], res->ai_addr, res->ai_addrlen);
    o->addrlen[i] = res->ai_addrlen;
    snprintf(o->name[i], sizeof o->name[i], "%s:%s", host, port);
    freeaddrinfo(res);
    return 0;
}

/* Parses argv into o; 0, or -1 after printing why. */
static int opts_parse(struct rlb_opts *o, int argc, char **argv)
{
    enum { O_HOST = 256, O_PORT, O_SERVER, O_PROTO, O_RATIO, O_KEYS, O_VSIZE, O_PREFILL,
           O_PREFILL_ONLY, O_EXPECT, O_SEED, O_HOT, O_TIMEOUT, O_JSON, O_HELP, O_TLS, O_RATE,
           O_RATE_SLEEP, O_AUTH };
    static const struct option longopts[] = {
        { "host", required_argument, NULL, O_HOST },
        { "port", required_argument, NULL, O_PORT },
        { "server", required_argument, NULL, O_SERVER },
        { "proto", required_argument, NULL, O_PROTO },
        { "connections", required_argument, NULL, 'c' },
        { "pipeline", required_argument, NULL, 'P' },
        { "ratio", required_argument, NULL, O_RATIO },
        { "keys", required_argument, NULL, O_KEYS },
        { "value-size", required_argument, NULL, O_VSIZE },
        { "requests", required_argument, NULL, 'n' },
        { "duration", required_argument, NULL, 'd' },
        { "prefill", no_argument, NULL, O_PREFILL },
        { "prefill-only", no_argument, NULL, O_PREFILL_ONLY },
        { "expect-hits", no_argument, NULL, O_EXPECT },
        { "seed", required_argument, NULL, O_SEED },
        { "hot-key-share", required_argument, NULL, O_HOT },
        { "timeout", required_argument, NULL, O_TIMEOUT },
        { "json", no_argument, NULL, O_JSON },
        { "tls", no_argument, NULL, O_TLS },
        { "rate", required_argument, NULL, O_RATE },
        { "rate-sleep", no_argument, NULL, O_RATE_SLEEP },
        { "auth", required_argument, NULL, O_AUTH },
        { "help", no_argument, NULL, O_HELP },
        { NULL, 0, NULL, 0 },
    };
    uint64_t v;
    char *end;
    int c, li = -1;

    *o = (struct rlb_opts){ .proto = RLB_MEMCACHE, .conns = 50, .pipeline = 1, .ratio_get = 1,
                            .ratio_set = 0, .keys = 10000, .value_size = 100, .seed = 1,
                            .timeout = 10 };
    while ((c = getopt_long(argc, argv, "c:P:n:d:h", longopts, &li)) != -1) {
        switch (c) {
        case O_HOST: o->host = optarg; break;
        case O_TLS: o->tls = true; break;
        case O_AUTH: o->auth = optarg; break;
        case O_RATE_SLEEP: o->rate_sleep = true; break;
        case O_PORT: o->port = optarg; break;
        case O_SERVER: {
            char hostbuf[256];
            const char *colon = strrchr(optarg, ':');
            if (!colon || colon == optarg || (size_t)(colon - optarg) >= sizeof hostbuf) {
                fprintf(stderr, "rlbench: --server wants host:port, not '%s'\n", optarg);
                return -1;
            }
            memcpy(hostbuf, optarg, (size_t)(colon - optarg));
            hostbuf[colon - optarg] = '\0';
            if (opts_add_server(o, hostbuf, colon + 1) < 0)
                return -1;
            break;
        }
        case O_PROTO:
            if (strcmp(optarg, "memcache") == 0 || strcmp(optarg, "memcached") == 0)
                o->proto = RLB_MEMCACHE;
            else if (strcmp(optarg, "redis") == 0)
                o->proto = RLB_REDIS;
            else if (strcmp(optarg, "memcache-binary") == 0)
                o->proto = RLB_MEMCACHE_BINARY;
            else {
                fprintf(stderr, "rlbench: --proto is memcache, memcache-binary or redis\n");
                return -1;
            }
            break;
        case 'c':
            if (parse_uint(optarg, 100000, &v) < 0 || v == 0)
                goto bad;
            o->conns = (unsigned)v;
            break;
        case 'P':
            if (parse_uint(optarg, 100000, &v) < 0 || v == 0)
                goto bad;
            o->pipeline = (unsigned)v;
            break;
        case O_RATIO: {
            unsigned long g = strtoul(optarg, &end, 10);
            if (*end != ':' || end == optarg)
                goto bad;
            const char *s2 = end + 1;
            unsigned long s = strtoul(s2, &end, 10);
            if (*end || end == s2 || g + s == 0 || g > 1000000 || s > 1000000)
                goto bad;
            o->ratio_get = (unsigned)g;
            o->ratio_set = (unsigned)s;
            break;
        }
        case O_KEYS:
            if (parse_uint(optarg, UINT32_MAX, &v) < 0 || v == 0)
                goto bad;
            o->keys = (uint32_t)v;
            break;
        case O_VSIZE:
            if (parse_uint(optarg, 64u << 20, &v) < 0 || v == 0)
                goto bad;
            o->value_size = (uint32_t)v;
            break;
        case 'n':
            if (parse_uint(optarg, UINT64_MAX / 2, &v) < 0 || v == 0)
                goto bad;
            o->requests = v;
            break;
        case 'd':
            o->duration = strtod(optarg, &end);
            if (*end || end == optarg || !(o->duration > 0) || o->duration > 86400)
                goto bad;
            break;
        case O_PREFILL: o->prefill = true; break;
        case O_PREFILL_ONLY: o->prefill = o->prefill_only = true; break;
        case O_EXPECT: o->expect_hits = true; break;
        case O_HOT:
            o->hot_share = strtod(optarg, &end);
            if (*end || end == optarg || !(o->hot_share >= 0 && o->hot_share <= 1))
                goto bad;
            break;
        case O_SEED:
            if (parse_uint(optarg, UINT64_MAX, &o->seed) < 0)
                goto bad;
            break;
        case O_TIMEOUT:
            o->timeout = strtod(optarg, &end);
            if (*end || end == optarg || !(o->timeout > 0))
                goto bad;
            break;
        case O_RATE:
            o->rate = strtod(optarg, &end);
            if (*end || end == optarg || !(o->rate > 0 && o->rate <= 1e8))
                goto bad;
            break;
        case O_JSON: o->json = true; break;
        case 'h':
        case O_HELP: usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        li = -1;
        continue;
    bad:
        if (li >= 0)
            fprintf(stderr, "rlbench: bad value '%s' for --%s\n", optarg, longopts[li].name);
        else
            fprintf(stderr, "rlbench: bad value '%s' for -%c\n", optarg, c);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "rlbench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->nservers && (o->host || o->port)) {
        fprintf(stderr, "rlbench: --server excludes --host/--port\n");
        return -1;
    }
    if (!o->nservers &&
        opts_add_server(o, o->host ? o->host : "127.0.0.1", o->port ? o->port : "11211") < 0)
        return -1;
    if (o->keys < o->nservers) {
        fprintf(stderr, "rlbench: --keys must be at least the number of servers\n");
        return -1;
    }
    if (o->requests && o->duration > 0) {
        fprintf(stderr, "rlbench: --requests and --duration exclude each other\n");
        return -1;
    }
    if (o->rate_sleep && !(o->rate > 0)) {
        fprintf(stderr, "rlbench: --rate-sleep paces --rate; give --rate\n");
        return -1;
    }
    if (!o->requests && !(o->duration > 0))
        o->requests = 100000;
    if (o->prefill)
        o->expect_hits = true;
    return 0;
}

/* Opens connection i (blocking connect, then non-blocking), sizes its buffers
 * and registers it; 0 or -1 after printing why. The caller frees on failure. */
static int conn_open(struct rlb_bench *b, struct rlb_conn *c, unsigned i)
{
    const struct rlb_opts *o = &b->o;
    unsigned s = i % o->nservers;
    int one = 1;

    c->fd = -1;
    c->server = s;
    c->rng = o->seed * 0x9E3779B97F4A7C15ULL + i + 1;
    if (c->rng == 0)
        c->rng = 1;
    c->wcap = (size_t)o->pipeline * (o->value_size + RLB_REQ_OVERHEAD);
    c->rcap = (size_t)2 * (o->value_size + RLB_REQ_OVERHEAD);
    if (c->rcap < 65536)
        c->rcap = 65536;
    c->wbuf = malloc(c->wcap);
    c->rbuf = malloc(c->rcap);
    c->q = calloc(o->pipeline, sizeof *c->q);
    if (!c->wbuf || !c->rbuf || !c->q) {
        fprintf(stderr, "rlbench: out of memory\n");
        return -1;
    }
    c->fd = socket(o->addr[s].ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&o->addr[s], o->addrlen[s]) < 0) {
        fprintf(stderr, "rlbench: connect %s: %s\n", o->name[s], strerror(errno));
        return -1;
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (b->tls != NULL) {
        c->ssl = SSL_new(b->tls);
        if (c->ssl == NULL || SSL_set_fd(c->ssl, c->fd) != 1 || SSL_connect(c->ssl) != 1) {
            char why[200] = "out of memory";
            unsigned long e = ERR_get_error();
            if (e != 0)
                ERR_error_string_n(e, why, sizeof why);
            fprintf(stderr, "rlbench: TLS handshake with %s: %s\n", o->name[s], why);
            return -1;
        }
    }
    if (o->auth != NULL && c->ssl == NULL) {
        /* AUTH user pass, and its +OK, before the clock starts (blocking) */
        const char *colon = strchr(o->auth, ':');
        char req[512], rsp[64];
        if (colon == NULL) {
            fprintf(stderr, "rlbench: --auth USER:PASS\n");
            return -1;
        }
        int ul = (int)(colon - o->auth), pl = (int)strlen(colon + 1);
        int n = snprintf(req, sizeof req, "*3\r\n$4\r\nAUTH\r\n$%d\r\n%.*s\r\n$%d\r\n%s\r\n",
                         ul, ul, o->auth, pl, colon + 1);
        ssize_t got = 0;
        if (n <= 0 || (size_t)n >= sizeof req || write(c->fd, req, (size_t)n) != n ||
            (got = read(c->fd, rsp, 5)) != 5 || memcmp(rsp, "+OK\r\n", 5) != 0) {
            fprintf(stderr, "rlbench: AUTH refused by %s\n", o->name[s]);
            return -1;
        }
    }
    if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0)
        return -1;
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
    if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        fprintf(stderr, "rlbench: epoll_ctl: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* Closes a connection that failed: its unanswered requests are lost. */
static void conn_fail(struct rlb_bench *b, struct rlb_conn *c, const char *why)
{
    if (c->dead)
        return;
    if (why)
        fprintf(stderr, "rlbench: connection to %s: %s (%u requests lost)\n",
                b->o.name[c->server], why, c->qlen);
    b->st.disconnects += c->qlen;
    b->inflight -= c->qlen;
    c->qlen = 0;
    epoll_ctl(b->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    SSL_free(c->ssl);
    c->ssl = NULL;
    close(c->fd);
    c->fd = -1;
    c->dead = true;
    b->live--;
}

/* Picks the next request for c: 0 with *key and *op set, or -1 when this phase has
 * nothing more for this connection. */
static int conn_next(struct rlb_bench *b, struct rlb_conn *c, uint32_t *key, uint8_t *op)
{
    const struct rlb_opts *o = &b->o;
    if (b->stop_issuing || b->issued >= b->limit)
        return -1;
    if (b->prefilling) {
        uint32_t n = b->prefill_next[c->server];
        if (n >= o->keys)
            return -1;
        b->prefill_next[c->server] = n + o->nservers;
        *key = n;
        *op = RLB_SET;
        return 0;
    }
    uint64_t r = rng_next(&c->rng);
    uint32_t n = (uint32_t)((r >> 32) % o->keys);
    n = n - n % o->nservers + c->server;
    if (n >= o->keys)
        n = c->server;
    *key = n;
    *op = (uint32_t)r % (o->ratio_get + o->ratio_set) < o->ratio_get ? RLB_GET : RLB_SET;
    /* The hot key: a second draw, so the share is independent of the key and
     * operation draws; 2^53 steps are fine enough for any share. */
    if (o->hot_share > 0 && *op == RLB_GET &&
        (double)(rng_next(&c->rng) >> 11) < o->hot_share * 9007199254740992.0)
        *key = c->server;
    return 0;
}

/* Appends one request to c's write buffer (which has room for P of them). */
static void conn_format(struct rlb_bench *b, struct rlb_conn *c, uint32_t key, uint8_t op)
{
    char *p = c->wbuf + c->wlen;
    char keybuf[16];
    size_t klen = key_fmt(keybuf, key);

    if (b->o.proto == RLB_MEMCACHE_BINARY) {
        /* memcached's binary GET or SET (flags 0, no expiry); the opaque is the key */
        uint32_t extlen = op == RLB_GET ? 0 : 8;
        uint32_t body = extlen + (uint32_t)klen + (op == RLB_GET ? 0 : b->o.value_size);
        uint8_t h[24] = { 0x80, op == RLB_GET ? 0x00 : 0x01, 0, (uint8_t)klen, (uint8_t)extlen };
        for (int i = 0; i < 4; i++) {
            h[8 + i] = (uint8_t)(body >> (24 - 8 * i));
            h[12 + i] = (uint8_t)(key >> (24 - 8 * i));
        }
        memcpy(p, h, sizeof h), p += sizeof h;
        memset(p, 0, extlen), p += extlen;
        memcpy(p, keybuf, klen), p += klen;
        if (op == RLB_SET)
            value_fill(b, p, key), p += b->o.value_size;
        c->wlen = (size_t)(p - c->wbuf);
        return;
    }
    if (b->o.proto == RLB_MEMCACHE) {
        if (op == RLB_GET) {
            memcpy(p, "get ", 4), p += 4;
            memcpy(p, keybuf, klen), p += klen;
        } else {
            memcpy(p, "set ", 4), p += 4;
            memcpy(p, keybuf, klen), p += klen;
            memcpy(p, " 0 0 ", 5), p += 5;
            memcpy(p, b->vlen_str, b->vlen_len), p += b->vlen_len;
            memcpy(p, "\r\n", 2), p += 2;
            value_fill(b, p, key), p += b->o.value_size;
        }
    } else {
        if (op == RLB_GET) {
            memcpy(p, "*2\r\n$3\r\nGET\r\n$", 14), p += 14;
        } else {
            memcpy(p, "*3\r\n$3\r\nSET\r\n$", 14), p += 14;
        }
        p += fmt_u32(p, (uint32_t)klen);
        memcpy(p, "\r\n", 2), p += 2;
        memcpy(p, keybuf, klen), p += klen;
        if (op == RLB_SET) {
            memcpy(p, "\r\n$", 3), p += 3;
            memcpy(p, b->vlen_str, b->vlen_len), p += b->vlen_len;
            memcpy(p, "\r\n", 2), p += 2;
            value_fill(b, p, key), p += b->o.value_size;
        }
    }
    memcpy(p, "\r\n", 2), p += 2;
    c->wlen = (size_t)(p - c->wbuf);
}

/* write(2), or SSL_write with --tls: bytes taken, or -1 with errno (EAGAIN
 * when the socket or the TLS engine wants to wait, EPROTO for a TLS error). */
static ssize_t conn_send(struct rlb_conn *c, const char *p, size_t n)
{
    if (c->ssl == NULL)
        return write(c->fd, p, n);
    int r = SSL_write(c->ssl, p, (int)n);
    if (r > 0)
        return r;
    int e = SSL_get_error(c->ssl, r);
    ERR_clear_error();
    errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : EPROTO;
    return -1;
}

/* read(2), or SSL_read with --tls: bytes, 0 at the end, or -1 with errno. */
static ssize_t conn_recv(struct rlb_conn *c, char *p, size_t n)
{
    if (c->ssl == NULL)
        return read(c->fd, p, n);
    int r = SSL_read(c->ssl, p, (int)n);
    if (r > 0)
        return r;
    int e = SSL_get_error(c->ssl, r);
    ERR_clear_error();
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : EPROTO;
    return -1;
}

/* Sends what is buffered; arms EPOLLOUT when the socket is full. */
static void conn_flush(struct rlb_bench *b, struct rlb_conn *c)
{
    while (c->wpos < c->wlen) {
        ssize_t n = conn_send(c, c->wbuf + c->wpos, c->wlen - c->wpos);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                if (!c->want_out) {
                    struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };
                    epoll_ctl(b->epfd, EPOLL_CTL_MOD, c->fd, &ev);
                    c->want_out = true;
                }
                return;
            }
            conn_fail(b, c, strerror(errno));
            return;
        }
        c->wpos += (size_t)n;
    }
    c->wpos = c->wlen = 0;
    if (c->want_out) {
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
        epoll_ctl(b->epfd, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = false;
    }
}

/* Tops c's window up to P requests and sends them. New requests are only
 * added once the previous batch has left the buffer, so a request's send time
 * is taken right before its own write. */
static void conn_fill(struct rlb_bench *b, struct rlb_conn *c)
{
    if (c->dead || c->wlen || c->qlen == b->o.pipeline)
        return;
    unsigned added = 0;
    uint64_t t = now_ns();
    bool paced = b->o.rate > 0 && !b->prefilling;
    while (c->qlen < b->o.pipeline) {
        uint32_t key;
        uint8_t op;
        if (paced && (c->next_ns > t || (b->paced_end_ns && c->next_ns >= b->paced_end_ns)))
            break;
        if (conn_next(b, c, &key, &op) < 0)
            break;
        struct rlb_inflight *r = &c->q[(c->qhead + c->qlen) % b->o.pipeline];
        r->key = key;
        r->op = op;
        /* Open loop: latency counts from when the request was due, so a late
         * reply also charges the requests it held back (no coordinated omission). */
        r->sent_ns = paced ? c->next_ns : t;
        if (paced)
            c->next_ns += (uint64_t)(1e9 * b->o.conns / b->o.rate);
        c->qlen++;
        b->issued++;
        b->inflight++;
        conn_format(b, c, key, op);
        added++;
    }
    if (added)
        conn_flush(b, c);
}

static bool line_is(const char *p, size_t len, const char *lit)
{
    size_t l = strlen(lit);
    return len == l && memcmp(p, lit, l) == 0;
}

static bool line_starts(const char *p, size_t len, const char *lit)
{
    size_t l = strlen(lit);
    return len >= l && memcmp(p, lit, l) == 0;
}

enum rlb_verdict { V_OK, V_HIT, V_MISS, V_ERROR_REPLY, V_MISMATCH };

/*
 * Parses one memcached reply for request r at p[0..avail).
 * Returns >0 bytes consumed with *v set, 0 when more bytes are needed (nothing
 * consumed), -1 when the stream cannot be framed any more.
 */
static ssize_t mc_parse(struct rlb_bench *b, const struct rlb_inflight *r, const char *p,
                        size_t avail, enum rlb_verdict *v)
{
    const char *nl = memchr(p, '\n', avail < RLB_LINE_MAX ? avail : RLB_LINE_MAX);
    if (!nl)
        return avail < RLB_LINE_MAX ? 0 : -1;
    size_t line = (size_t)(nl - p) + 1;
    if (line < 2 || nl[-1] != '\r')
        return -1;
    size_t len = line - 2;

    if (line_starts(p, len, "SERVER_ERROR") || line_starts(p, len, "CLIENT_ERROR") ||
        line_is(p, len, "ERROR")) {
        *v = V_ERROR_REPLY;
        return (ssize_t)line;
    }
    if (r->op == RLB_SET) {
        if (line_is(p, len, "STORED"))
            *v = V_OK;
        else if (line_is(p, len, "NOT_STORED") || line_is(p, len, "EXISTS") ||
                 line_is(p, len, "NOT_FOUND"))
            *v = V_MISMATCH;
        else
            return -1;
        return (ssize_t)line;
    }
    if (line_is(p, len, "END")) {
        *v = V_MISS;
        return (ssize_t)line;
    }
    if (!line_starts(p, len, "VALUE "))
        return -1;

    /* VALUE <key> <flags> <bytes>[ <cas>] */
    char key[16];
    size_t klen = key_fmt(key, r->key);
    const char *f = p + 6, *e = p + len;
    const char *sp = memchr(f, ' ', (size_t)(e - f));
    if (!sp)
        return -1;
    bool key_ok = (size_t)(sp - f) == klen && memcmp(f, key, klen) == 0;
    char num[32];
    size_t nlen = (size_t)(e - sp - 1);
    if (nlen >= sizeof num)
        return -1;
    memcpy(num, sp + 1, nlen);
    num[nlen] = '\0';
    char *end;
    unsigned long flags = strtoul(num, &end, 10);
    if (*end != ' ')
        return -1;
    unsigned long long bytes = strtoull(end + 1, &end, 10);
    if (*end != '\0' && *end != ' ')
        return -1;
    if (bytes > (64u << 20))
        return -1;
    size_t need = line + (size_t)bytes + 2 + 5;
    if (need > b->conns[0].rcap)       /* larger than any value we write: cannot buffer */
        return -1;
    if (avail < need)
        return 0;
    const char *data = p + line;
    if (memcmp(data + bytes, "\r\nEND\r\n", 7) != 0)
        return -1;
    bool ok = key_ok && flags == 0 && bytes == b->o.value_size;
    if (ok) {
        value_fill(b, b->scratch, r->key);
        ok = memcmp(data, b->scratch, b->o.value_size) == 0;
    }
    *v = ok ? V_HIT : V_MISMATCH;
    return (ssize_t)need;
}

/* Parses one memcached binary reply for request r; same contract as mc_parse. */
static ssize_t mcbin_parse(struct rlb_bench *b, const struct rlb_inflight *r, const char *p,
                           size_t avail, enum rlb_verdict *v)
{
    const uint8_t *h = (const uint8_t *)p;
    if (avail < 24)
        return 0;
    uint32_t body = (uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | (uint32_t)h[10] << 8 | h[11];
    uint32_t opaque = (uint32_t)h[12] << 24 | (uint32_t)h[13] << 16 | (uint32_t)h[14] << 8 | h[15];
    uint16_t status = (uint16_t)(h[6] << 8 | h[7]);
    uint16_t klen = (uint16_t)(h[2] << 8 | h[3]);
    if (h[0] != 0x81 || body > (64u << 20) || h[4] + klen > body)
        return -1;
    size_t need = 24 + (size_t)body;
    if (need > b->conns[0].rcap)
        return -1;
    if (avail < need)
        return 0;
    if (h[1] != (r->op == RLB_GET ? 0x00 : 0x01) || opaque != r->key) {
        *v = V_MISMATCH;                   /* an answer to another request */
    } else if (status == 1 && r->op == RLB_GET) {
        *v = V_MISS;
    } else if (status == 2 || status == 5) {
        *v = V_MISMATCH;
    } else if (status != 0) {
        *v = V_ERROR_REPLY;
    } else if (r->op == RLB_SET) {
        *v = V_OK;
    } else {
        const char *data = p + 24 + h[4] + klen;
        uint32_t flags = (uint32_t)h[24] << 24 | (uint32_t)h[25] << 16 | (uint32_t)h[26] << 8 | h[27];
        bool ok = h[4] == 4 && flags == 0 && body - 4 - klen == b->o.value_size;
        if (ok) {
            value_fill(b, b->scratch, r->key);
            ok = memcmp(data, b->scratch, b->o.value_size) == 0;
        }
        *v = ok ? V_HIT : V_MISMATCH;
    }
    return (ssize_t)need;
}

/* Parses one RESP reply for request r; same contract as mc_parse. */
static ssize_t redis_parse(struct rlb_bench *b, const struct rlb_inflight *r, const char *p,
                           size_t avail, enum rlb_verdict *v)
{
    const char *nl = memchr(p, '\n', avail < RLB_LINE_MAX ? avail : RLB_LINE_MAX);
    if (!nl)
        return avail < RLB_LINE_MAX ? 0 : -1;
    size_t line = (size_t)(nl - p) + 1;
    if (line < 3 || nl[-1] != '\r')
        return -1;
    size_t len = line - 2;

    switch (p[0]) {
    case '-':
        *v = V_ERROR_REPLY;
        return (ssize_t)line;
    case '+':
        *v = r->op == RLB_SET && line_is(p, len, "+OK") ? V_OK : V_MISMATCH;
        return (ssize_t)line;
    case ':':
        *v = V_MISMATCH;
        return (ssize_t)line;
    case '$': {
        if (line_is(p, len, "$-1")) {
            *v = r->op == RLB_GET ? V_MISS : V_MISMATCH;
            return (ssize_t)line;
        }
        char num[24];
        if (len - 1 >= sizeof num)
            return -1;
        memcpy(num, p + 1, len - 1);
        num[len - 1] = '\0';
        char *end;
        unsigned long long bytes = strtoull(num, &end, 10);
        if (*end || end == num || bytes > (64u << 20))
            return -1;
        size_t need = line + (size_t)bytes + 2;
        if (need > b->conns[0].rcap)
            return -1;
        if (avail < need)
            return 0;
        if (memcmp(p + line + bytes, "\r\n", 2) != 0)
            return -1;
        bool ok = r->op == RLB_GET && bytes == b->o.value_size;
        if (ok) {
            value_fill(b, b->scratch, r->key);
            ok = memcmp(p + line, b->scratch, b->o.value_size) == 0;
        }
        *v = ok ? V_HIT : V_MISMATCH;
        return (ssize_t)need;
    }
    default:
        /* Arrays and anything else are not what GET or SET answer; we cannot
         * skip a nested reply without a full parser, so framing is lost. */
        return -1;
    }
}

/* Reads what is there, settles every complete reply, refills the window. */
static void conn_read(struct rlb_bench *b, struct rlb_conn *c)
{
again:
    if (c->rpos > 0) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    ssize_t n = conn_recv(c, c->rbuf + c->rlen, c->rcap - c->rlen);
    if (n == 0) {
        conn_fail(b, c, "closed by peer");
        return;
    }
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_fail(b, c, strerror(errno));
        return;
    }
    uint64_t t = now_ns();
    c->rlen += (size_t)n;

    while (c->rpos < c->rlen) {
        if (c->qlen == 0) {
            b->st.protocol_errors++;
            conn_fail(b, c, "reply without a request");
            return;
        }
        struct rlb_inflight *r = &c->q[c->qhead];
        enum rlb_verdict v = V_MISMATCH;
        const char *p = c->rbuf + c->rpos;
        size_t avail = c->rlen - c->rpos;
        ssize_t used = b->o.proto == RLB_MEMCACHE ? mc_parse(b, r, p, avail, &v)
                       : b->o.proto == RLB_MEMCACHE_BINARY ? mcbin_parse(b, r, p, avail, &v)
                       : redis_parse(b, r, p, avail, &v);
        if (used == 0)
            break;
        if (used < 0) {
            b->st.protocol_errors++;
            conn_fail(b, c, "unparsable reply");
            return;
        }
        c->rpos += (size_t)used;
        hist_record(&b->st.hist, t - r->sent_ns);
        b->st.done++;
        if (r->op == RLB_GET)
            b->st.gets++;
        else
            b->st.sets++;
        switch (v) {
        case V_OK: break;
        case V_HIT: b->st.hits++; break;
        case V_MISS: b->st.misses++; break;
        case V_ERROR_REPLY: b->st.error_replies++; break;
        case V_MISMATCH: b->st.mismatches++; break;
        }
        c->qhead = (c->qhead + 1) % b->o.pipeline;
        c->qlen--;
        b->inflight--;
    }
    if (c->rpos == c->rlen)
        c->rpos = c->rlen = 0;
    conn_fill(b, c);
    /* TLS may hold decrypted bytes that epoll will not announce again. */
    if (c->ssl != NULL && !c->dead && SSL_pending(c->ssl) > 0)
        goto again;
}

static uint64_t stats_errors(const struct rlb_bench *b)
{
    const struct rlb_stats *s = &b->st;
    return s->error_replies + s->mismatches + s->protocol_errors + s->disconnects + s->timeouts +
           (b->o.expect_hits ? s->misses : 0);
}

/*
 * Runs one phase (prefill or measurement) to its end: every request issued and
 * answered, every connection dead, or --timeout seconds without progress.
 * Returns the elapsed nanoseconds from the first send to the last reply.
 */
/* --rate: how long epoll may sleep before the next request is due. Under a
 * millisecond it spins (0): epoll's timeout is in whole milliseconds, and a
 * request sent late would be charged the lateness of the load generator. */
static int pace_wait_ms(const struct rlb_bench *b)
{
    uint64_t t = now_ns(), due = UINT64_MAX;
    for (unsigned i = 0; i < b->o.conns; i++) {
        const struct rlb_conn *c = &b->conns[i];
        if (!c->dead && c->qlen < b->o.pipeline && c->next_ns < due)
            due = c->next_ns;
    }
    if (due == UINT64_MAX)
        return 50;                       /* every window full: a reply comes first */
    if (b->o.rate_sleep) {
        if (due <= t)
            return 0;
        uint64_t up = (due - t + 999999) / 1000000;
        return up > 49 ? 49 : (int)up;
    }
    if (due <= t + 1000000)
        return 0;
    uint64_t ms = (due - t) / 1000000 - 1;
    return ms > 49 ? 49 : (int)ms;
}

static uint64_t bench_phase(struct rlb_bench *b)
{
    struct epoll_event evs[RLB_MAX_EVENTS];
    uint64_t start = now_ns();
    uint64_t deadline = b->prefilling || b->o.duration <= 0
                            ? 0 : start + (uint64_t)(b->o.duration * 1e9);
    uint64_t timeout_ns = (uint64_t)(b->o.timeout * 1e9);
    uint64_t last_progress = start, last_done = b->st.done, end = start;

    bool paced = b->o.rate > 0 && !b->prefilling;

    b->stop_issuing = false;
    /* Open loop: the schedule is the workload. Every request due before the deadline
     * goes, late if the box is busy (its latency counts from when it was due), so the
     * count is the rate times the duration whatever the load; none due after it does. */
    b->paced_end_ns = paced ? deadline : 0;
    b->issued = 0;
    for (unsigned i = 0; i < b->o.conns; i++) {
        /* --rate: the connections' schedules interleave evenly */
        if (paced)
            b->conns[i].next_ns = start + (uint64_t)(1e9 * i / b->o.rate);
        conn_fill(b, &b->conns[i]);
    }

    for (;;) {
        if (b->inflight == 0 && (!paced || b->stop_issuing || b->issued >= b->limit))
            break;                       /* nothing in flight and conn_fill found nothing */
        int n = epoll_wait(b->epfd, evs, RLB_MAX_EVENTS, paced ? pace_wait_ms(b) : 50);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "rlbench: epoll_wait: %s\n", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            struct rlb_conn *c = evs[i].data.ptr;
            if (c->dead)
                continue;
            if (evs[i].events & EPOLLIN)
                conn_read(b, c);
            else if (evs[i].events & (EPOLLERR | EPOLLHUP))
                conn_fail(b, c, "socket error");
            if (!c->dead && (evs[i].events & EPOLLOUT))
                conn_flush(b, c);
            if (!c->dead && c->wlen == 0)
                conn_fill(b, c);
        }
        if (paced)
            for (unsigned i = 0; i < b->o.conns; i++)
                conn_fill(b, &b->conns[i]);
        uint64_t t = now_ns();
        if (b->st.done != last_done) {
            last_done = b->st.done;
            last_progress = t;
            end = t;
        }
        if (deadline && t >= deadline && !paced)
            b->stop_issuing = true;
        if (deadline && paced && !b->stop_issuing) {
            bool due = false;           /* a live connection still has a request before it */
            for (unsigned i = 0; i < b->o.conns && !due; i++)
                due = !b->conns[i].dead && b->conns[i].next_ns < deadline;
            b->stop_issuing = !due;
        }
        if (b->live == 0)
            break;
        if (t - last_progress > timeout_ns) {
            fprintf(stderr, "rlbench: no reply for %.1f s, giving up on %" PRIu64 " requests\n",
                    b->o.timeout, b->inflight);
            b->st.timeouts += b->inflight;
            break;
        }
    }
    return end > start ? end - start : 1;
}

static void stats_print(const struct rlb_bench *b, uint64_t elapsed_ns)
{
    const struct rlb_opts *o = &b->o;
    const struct rlb_stats *s = &b->st;
    double secs = (double)elapsed_ns / 1e9;
    double ops = (double)s->done / secs;
    double p50 = hist_quantile(&s->hist, 0.50) / 1e3;
    double p99 = hist_quantile(&s->hist, 0.99) / 1e3;
    double p999 = hist_quantile(&s->hist, 0.999) / 1e3;
    double mean = s->hist.n ? (double)s->hist.sum / (double)s->hist.n / 1e3 : 0;
    double max = (double)s->hist.max / 1e3;
    const char *proto = o->proto == RLB_MEMCACHE ? "memcache"
                      : o->proto == RLB_MEMCACHE_BINARY ? "memcache-binary" : "redis";
    char target[RLB_MAX_SERVERS * 24 + 16];
    size_t tl = 0;

    target[0] = '\0';
    for (unsigned i = 0; i < o->nservers && tl + 130 < sizeof target; i++)
        tl += (size_t)snprintf(target + tl, sizeof target - tl, "%s%s", i ? "," : "",
                               o->name[i]);
    if (o->json) {
        printf("{\"target\":\"%s\",\"direct\":%s,\"proto\":\"%s\",\"connections\":%u,"
               "\"pipeline\":%u,\"ratio\":\"%u:%u\",\"keys\":%" PRIu32 ",\"value_size\":%" PRIu32
               ",\"requests\":%" PRIu64 ",\"elapsed_s\":%.6f,\"ops_per_sec\":%.1f,"
               "\"p50_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,\"mean_us\":%.2f,"
               "\"max_us\":%.2f,\"gets\":%" PRIu64 ",\"sets\":%" PRIu64 ",\"hits\":%" PRIu64
               ",\"misses\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"error_replies\":%" PRIu64
               ",\"mismatches\":%" PRIu64 ",\"protocol_errors\":%" PRIu64
               ",\"disconnects\":%" PRIu64 ",\"timeouts\":%" PRIu64 "}\n",
               target, o->nservers > 1 ? "true" : "false", proto, o->conns, o->pipeline,
               o->ratio_get, o->ratio_set, o->keys, o->value_size, s->done, secs, ops, p50, p99,
               p999, mean, max, s->gets, s->sets, s->hits, s->misses, stats_errors(b),
               s->error_replies, s->mismatches, s->protocol_errors, s->disconnects, s->timeouts);
        return;
    }
    printf("rlbench: %s %s, %u connections, pipeline %u, get:set %u:%u, %" PRIu32
           " keys, %" PRIu32 "-byte values\n",
           proto, target, o->conns, o->pipeline, o->ratio_get, o->ratio_set, o->keys,
           o->value_size);
    printf("  %" PRIu64 " requests in %.3f s: %.0f ops/s\n", s->done, secs, ops);
    printf("  latency us: p50 %.1f  p99 %.1f  p999 %.1f  mean %.1f  max %.1f\n", p50, p99, p999,
           mean, max);
    printf("  gets %" PRIu64 " (hits %" PRIu64 ", misses %" PRIu64 "), sets %" PRIu64 "\n",
           s->gets, s->hits, s->misses, s->sets);
    printf("  errors %" PRIu64 ": error replies %" PRIu64 ", mismatches %" PRIu64
           ", protocol errors %" PRIu64 ", lost on disconnect %" PRIu64 ", timeouts %" PRIu64
           "%s\n",
           stats_errors(b), s->error_replies, s->mismatches, s->protocol_errors, s->disconnects,
           s->timeouts, o->expect_hits && s->misses ? " (+ misses, keys were prefilled)" : "");
}

static void bench_free(struct rlb_bench *b)
{
    if (b->conns) {
        for (unsigned i = 0; i < b->o.conns; i++) {
            struct rlb_conn *c = &b->conns[i];
            SSL_free(c->ssl);
            if (c->fd >= 0)
                close(c->fd);
            free(c->wbuf);
            free(c->rbuf);
            free(c->q);
        }
        free(b->conns);
    }
    if (b->epfd >= 0)
        close(b->epfd);
    SSL_CTX_free(b->tls);
    free(b->pattern);
    free(b->scratch);
}

int main(int argc, char **argv)
{
    static const char cycle[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    struct rlb_bench *b = calloc(1, sizeof *b);   /* the histogram is ~30 KB: not on the stack */
    int rc = 2;

    if (!b)
        return 2;
    b->epfd = -1;
    if (opts_parse(&b->o, argc, argv) < 0)
        goto out;
    signal(SIGPIPE, SIG_IGN);

    b->vlen_len = fmt_u32(b->vlen_str, b->o.value_size);
    b->pattern = malloc((size_t)b->o.value_size + RLB_PATTERN_PERIOD);
    b->scratch = malloc(b->o.value_size);
    b->conns = calloc(b->o.conns, sizeof *b->conns);
    b->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!b->pattern || !b->scratch || !b->conns || b->epfd < 0) {
        fprintf(stderr, "rlbench: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < (size_t)b->o.value_size + RLB_PATTERN_PERIOD; i++)
        b->pattern[i] = cycle[i % RLB_PATTERN_PERIOD];
    for (unsigned i = 0; i < b->o.conns; i++)
        b->conns[i].fd = -1;
    if (b->o.tls) {
        b->tls = SSL_CTX_new(TLS_client_method());
        if (b->tls == NULL) {
            fprintf(stderr, "rlbench: cannot create a TLS context\n");
            goto out;
        }
        SSL_CTX_set_verify(b->tls, SSL_VERIFY_NONE, NULL);
        SSL_CTX_set_mode(b->tls, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    }
    for (unsigned i = 0; i < b->o.conns; i++) {
        if (conn_open(b, &b->conns[i], i) < 0)
            goto out;
        b->live++;
    }

    if (b->o.prefill) {
        b->prefilling = true;
        b->limit = UINT64_MAX;
        for (unsigned s = 0; s < b->o.nservers; s++)
            b->prefill_next[s] = s;
        uint64_t ns = bench_phase(b);
        uint64_t errs = stats_errors(b);
        uint64_t sets = b->st.sets;
        if (b->o.prefill_only) {
            stats_print(b, ns);
            rc = errs ? 1 : 0;
            goto out;
        }
        if (!b->o.json)
            fprintf(stderr, "rlbench: prefilled %" PRIu64 " keys in %.2f s, %" PRIu64
                    " errors\n", sets, (double)ns / 1e9, errs);
        if (errs || b->live == 0) {
            stats_print(b, ns);
            rc = 1;
            goto out;
        }
        memset(&b->st, 0, sizeof b->st);
        b->prefilling = false;
    }
    b->limit = b->o.requests ? b->o.requests : UINT64_MAX;
    uint64_t ns = bench_phase(b);
    stats_print(b, ns);
    rc = stats_errors(b) || b->st.done == 0 ? 1 : 0;
out:
    bench_free(b);
    free(b);
    return rc;
}
