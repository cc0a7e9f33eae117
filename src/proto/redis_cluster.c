/* Redis Cluster in the protocol: reading CLUSTER SHARDS / SLOTS / INFO into a slot map, MOVED/ASK/TRYAGAIN/CLUSTERDOWN, and the one-node cluster a client of a cluster pool sees. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "lib/buf.h"
#include "placement/cluster_map.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "lib/util.h"

/* ------------------------------------------------------------------ a RESP reader
 *
 * The map replies are read whole, off the data path (the main loop's refresh, the
 * tool), by a small cursor: every element is checked, nothing is trusted to be in
 * bounds, and a reply that is not the shape Redis sends is refused as malformed.
 */

struct rcur {
    const char *b;
    size_t      len;
    size_t      pos;
};

/* The line of the element at the cursor: its type byte and body [*s, *s + *n). */
static int rcur_line(struct rcur *c, char *type, const char **s, size_t *n)
{
    if (c->pos >= c->len)
        return -1;
    const char *start = c->b + c->pos;
    const char *nl = memchr(start, '\n', c->len - c->pos);
    if (nl == NULL || nl - start < 2 || nl[-1] != '\r')
        return -1;
    *type = start[0];
    *s = start + 1;
    *n = (size_t)(nl - start) - 2;
    c->pos = (size_t)(nl - c->b) + 1;
    return 0;
}

static int rcur_int(struct rcur *c, int64_t *v)
{
    char t;
    const char *s;
    size_t n;
    if (rcur_line(c, &t, &s, &n) < 0 || t != ':' || util_parse_dec_i64(s, n, REDIS_DEC, v) < 0)
        return -1;
    return 0;
}

static int rcur_array(struct rcur *c, int64_t *count)
{
    char t;
    const char *s;
    size_t n;
    if (rcur_line(c, &t, &s, &n) < 0 || t != '*' ||
        util_parse_dec_i64(s, n, REDIS_DEC, count) < 0 || *count < -1 || *count > INT32_MAX)
        return -1;
    return 0;
}

/* A bulk or simple string (a nil bulk gives *s NULL). */
static int rcur_str(struct rcur *c, const char **str, size_t *slen)
{
    char t;
    const char *s;
    size_t n;
    int64_t blen;
    if (rcur_line(c, &t, &s, &n) < 0)
        return -1;
    if (t == '+') {
        *str = s;
        *slen = n;
        return 0;
    }
    if (t != '$' || util_parse_dec_i64(s, n, REDIS_DEC, &blen) < 0 || blen < -1)
        return -1;
    if (blen == -1) {
        *str = NULL;
        *slen = 0;
        return 0;
    }
    if ((uint64_t)blen + 2 > c->len - c->pos || c->b[c->pos + (size_t)blen] != '\r' ||
        c->b[c->pos + (size_t)blen + 1] != '\n')
        return -1;
    *str = c->b + c->pos;
    *slen = (size_t)blen;
    c->pos += (size_t)blen + 2;
    return 0;
}

/* Skip one element of any type, nested ones included (the reply parser's own scan). */
static int rcur_skip(struct rcur *c)
{
    int64_t end = redis__element_end(c->b, c->len, c->pos);
    if (end < 0)
        return -1;
    c->pos = (size_t)end;
    return 0;
}

static int str_is(const char *s, size_t n, const char *want)
{
    return s != NULL && redis__word_is(s, n, want);
}

/* An error reply's text into err (sanitized, without the '-' and CRLF). */
static void error_text(const char *rsp, size_t len, const char *what, char *err, size_t errlen)
{
    size_t n = 0;
    while (n + 1 < len && rsp[1 + n] != '\r' && n < 200)
        n++;
    char clean[208];
    for (size_t i = 0; i < n; i++)
        clean[i] = (rsp[1 + i] >= 0x20 && rsp[1 + i] < 0x7f) ? rsp[1 + i] : '?';
    clean[n] = '\0';
    snprintf(err, errlen, "%s: %s", what, clean);
}

static int is_unknown_command(const char *rsp, size_t len)
{
    /* Redis < 7 answers CLUSTER SHARDS with "ERR Unknown subcommand or wrong number of
     * arguments for 'shards'..." (6.x) or "ERR unknown subcommand 'shards'..." */
    return len > 5 && rsp[0] == '-' &&
           (strncasecmp(rsp, "-ERR unknown subcommand", 23) == 0 ||
            strncasecmp(rsp, "-ERR unknown command", 20) == 0);
}

/* ------------------------------------------------------------------ CLUSTER INFO */

/* cluster_state and cluster_current_epoch from a CLUSTER INFO bulk. */
static int parse_info(const char *rsp, size_t len, struct cluster_map *m, char *err,
                      size_t errlen)
{
    struct rcur c = { rsp, len, 0 };
    const char *s;
    size_t n;

    if (len > 0 && rsp[0] == '-') {
        error_text(rsp, len, "CLUSTER INFO refused", err, errlen);
        return -1;
    }
    if (rcur_str(&c, &s, &n) < 0 || s == NULL) {
        snprintf(err, errlen, "CLUSTER INFO: not a bulk string");
        return -1;
    }
    const char *e = s + n;
    while (s < e) {
        const char *le = memchr(s, '\n', (size_t)(e - s));
        size_t ll = le ? (size_t)(le - s) : (size_t)(e - s);
        size_t vl = ll;
        if (vl > 0 && s[vl - 1] == '\r')
            vl--;
        if (vl > 14 && memcmp(s, "cluster_state:", 14) == 0)
            m->state_ok = vl == 16 && memcmp(s + 14, "ok", 2) == 0;
        else if (vl > 22 && memcmp(s, "cluster_current_epoch:", 22) == 0) {
            uint64_t v;
            if (util_parse_u64(s + 22, vl - 22, UINT64_MAX, &v) == 0)
                m->current_epoch = v;
        }
        s += ll + 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ CLUSTER SHARDS */

struct shard_node {
    const char *id, *ip, *endpoint, *role, *health;
    size_t idl, ipl, epl, rolel, healthl;
    int64_t port, tls_port;
};

/* One node's map (flat: name, value, ...) into sn. */
static int shards_node(struct rcur *c, struct shard_node *sn)
{
    int64_t nf;
    memset(sn, 0, sizeof(*sn));
    if (rcur_array(c, &nf) < 0 || nf < 0 || nf % 2 != 0)
        return -1;
    for (int64_t f = 0; f < nf; f += 2) {
        const char *k;
        size_t kl;
        if (rcur_str(c, &k, &kl) < 0 || k == NULL)
            return -1;
        size_t at = c->pos;
        if (str_is(k, kl, "port") || str_is(k, kl, "tls-port")) {
            int64_t v;
            if (rcur_int(c, &v) < 0 || v < 0 || v > 65535)
                return -1;
            if (str_is(k, kl, "port"))
                sn->port = v;
            else
                sn->tls_port = v;
            continue;
        }
        const char **dst = NULL;
        size_t *dl = NULL;
        if (str_is(k, kl, "id")) { dst = &sn->id; dl = &sn->idl; }
        else if (str_is(k, kl, "ip")) { dst = &sn->ip; dl = &sn->ipl; }
        else if (str_is(k, kl, "endpoint")) { dst = &sn->endpoint; dl = &sn->epl; }
        else if (str_is(k, kl, "role")) { dst = &sn->role; dl = &sn->rolel; }
        else if (str_is(k, kl, "health")) { dst = &sn->health; dl = &sn->healthl; }
        if (dst != NULL && at < c->len && (c->b[at] == '$' || c->b[at] == '+')) {
            if (rcur_str(c, dst, dl) < 0)
                return -1;
            continue;
        }
        if (rcur_skip(c) < 0)       /* replication-offset, hostname, anything newer */
            return -1;
    }
    return 0;
}

/* The host a node is reached at: its preferred endpoint, else its ip, else (both
 * unknown, "?" or empty) the host of the node that answered. */
static void node_host(const struct shard_node *sn, const char *self, const char **h, size_t *hl)
{
    if (sn->endpoint != NULL && sn->epl > 0 && !(sn->epl == 1 && sn->endpoint[0] == '?')) {
        *h = sn->endpoint;
        *hl = sn->epl;
    } else if (sn->ip != NULL && sn->ipl > 0 && !(sn->ipl == 1 && sn->ip[0] == '?')) {
        *h = sn->ip;
        *hl = sn->ipl;
    } else {
        *h = self;
        *hl = strlen(self);
    }
}

static enum cluster_health node_health(const char *s, size_t n)
{
    if (str_is(s, n, "failed") || str_is(s, n, "fail"))
        return CLUSTER_FAILED;
    if (str_is(s, n, "loading"))
        return CLUSTER_LOADING;
    return CLUSTER_ONLINE;
}

static int64_t add_shard_node(struct cluster_map *m, const struct shard_node *sn,
                              const char *self, int is_master, int tls)
{
    /* a node with both names its plaintext port "port" and its TLS one "tls-port" */
    int64_t port = tls ? (sn->tls_port > 0 ? sn->tls_port : sn->port)
                       : (sn->port > 0 ? sn->port : sn->tls_port);
    char id[CLUSTER_ID_LEN + 1] = "";
    const char *h;
    size_t hl;
    if (sn->id != NULL)
        snprintf(id, sizeof(id), "%.*s", (int)RL_MIN(sn->idl, (size_t)CLUSTER_ID_LEN), sn->id);
    node_host(sn, self, &h, &hl);
    return cluster_map_node(m, id, h, hl, (uint16_t)port,
                            is_master ? CLUSTER_MASTER : CLUSTER_REPLICA,
                            sn->health ? node_health(sn->health, sn->healthl) : CLUSTER_ONLINE);
}

/*
 * CLUSTER SHARDS (7.0): an array of shards, each a flat map with "slots" (start, end
 * pairs) and "nodes" (flat maps: id, port, ip, endpoint, role, health ...). The shard's
 * master serves its slots (a failed master keeps them until a replica is promoted, as
 * the cluster itself says); its replicas follow it.
 */
static int parse_shards(const char *rsp, size_t len, const char *self, int tls,
                        struct cluster_map *m, char *err, size_t errlen)
{
    struct rcur c = { rsp, len, 0 };
    int64_t nshards;

    if (rcur_array(&c, &nshards) < 0 || nshards < 0)
        goto bad;
    for (int64_t sh = 0; sh < nshards; sh++) {
        int64_t nf;
        size_t slots_at = 0;            /* where the shard's "slots" array is */
        int64_t master = -1;
        struct { int64_t idx; int said_master; } members[64];
        uint32_t nmembers = 0;
        if (rcur_array(&c, &nf) < 0 || nf < 0 || nf % 2 != 0)
            goto bad;
        for (int64_t f = 0; f < nf; f += 2) {
            const char *k;
            size_t kl;
            if (rcur_str(&c, &k, &kl) < 0 || k == NULL)
                goto bad;
            if (str_is(k, kl, "slots")) {
                slots_at = c.pos;
                if (rcur_skip(&c) < 0)
                    goto bad;
            } else if (str_is(k, kl, "nodes")) {
                int64_t nn;
                if (rcur_array(&c, &nn) < 0 || nn < 0)
                    goto bad;
                for (int64_t i = 0; i < nn; i++) {
                    struct shard_node sn;
                    if (shards_node(&c, &sn) < 0)
                        goto bad;
                    int said = str_is(sn.role, sn.rolel, "master");
                    /* the shard's live master serves its slots */
                    int is_master = said && master < 0 &&
                                    node_health(sn.health, sn.healthl) != CLUSTER_FAILED;
                    int64_t idx = add_shard_node(m, &sn, self, is_master, tls);
                    if (idx < 0) {
                        snprintf(err, errlen, "CLUSTER SHARDS: a node with no usable address, "
                                 "or more than %u nodes", CLUSTER_NODES_MAX);
                        return -1;
                    }
                    if (is_master)
                        master = idx;
                    else if (nmembers < RL_ARRAY_SIZE(members)) {
                        members[nmembers].idx = idx;
                        members[nmembers++].said_master = said;
                    }
                }
            } else if (rcur_skip(&c) < 0) {
                goto bad;
            }
        }
        /* A failed master keeps its slots until the cluster promotes a replica (it
         * answers CLUSTERDOWN meanwhile, or the promotion comes): it stays the owner. */
        for (uint32_t i = 0; i < nmembers && master < 0 && slots_at != 0; i++)
            if (members[i].said_master)
                master = members[i].idx;
        for (uint32_t i = 0; i < nmembers; i++) {
            struct cluster_node *n = &m->nodes[members[i].idx];
            if (members[i].idx == master || (members[i].said_master && master != members[i].idx)) {
                n->role = CLUSTER_MASTER;           /* a master (maybe failed, no slots) */
                n->master = (uint32_t)members[i].idx;
            } else if (master >= 0) {
                cluster_map_replica_of(m, (uint32_t)members[i].idx, (uint32_t)master);
            }
        }
        if (slots_at == 0)
            continue;
        struct rcur sc = { rsp, len, slots_at };
        int64_t ns;
        if (rcur_array(&sc, &ns) < 0 || ns < 0 || ns % 2 != 0)
            goto bad;
        for (int64_t i = 0; i < ns; i += 2) {
            int64_t lo, hi;
            if (rcur_int(&sc, &lo) < 0 || rcur_int(&sc, &hi) < 0 || lo < 0 || hi >= CLUSTER_SLOTS ||
                lo > hi)
                goto bad;
            if (master >= 0 && cluster_map_slots(m, (uint32_t)lo, (uint32_t)hi, (uint32_t)master) < 0)
                goto bad;
        }
    }
    if (c.pos != len)
        goto bad;
    return 1;
bad:
    snprintf(err, errlen, "CLUSTER SHARDS: malformed reply (at byte %zu)", c.pos);
    return -1;
}

/* ------------------------------------------------------------------ CLUSTER SLOTS */

/* One [ip, port, id, ...] entry of CLUSTER SLOTS: the node's index, or -1. */
static int64_t slots_node(struct rcur *c, const char *self, int is_master, struct cluster_map *m)
{
    int64_t nf, port;
    const char *ip, *id = NULL;
    size_t ipl, idl = 0;

    if (rcur_array(c, &nf) < 0 || nf < 2 || rcur_str(c, &ip, &ipl) < 0 || rcur_int(c, &port) < 0 ||
        port <= 0 || port > 65535)
        return -2;
    if (nf >= 3 && rcur_str(c, &id, &idl) < 0)
        return -2;
    for (int64_t f = 3; f < nf; f++)
        if (rcur_skip(c) < 0)
            return -2;
    if (ip == NULL || ipl == 0 || (ipl == 1 && ip[0] == '?')) {
        ip = self;
        ipl = strlen(self);
    }
    char ids[CLUSTER_ID_LEN + 1] = "";
    if (id != NULL)
        snprintf(ids, sizeof(ids), "%.*s", (int)RL_MIN(idl, (size_t)CLUSTER_ID_LEN), id);
    return cluster_map_node(m, ids, ip, ipl, (uint16_t)port,
                            is_master ? CLUSTER_MASTER : CLUSTER_REPLICA, CLUSTER_ONLINE);
}

/* CLUSTER SLOTS (3.0-6.x): [start, end, master, replica ...] per range. */
static int parse_slots(const char *rsp, size_t len, const char *self, struct cluster_map *m,
                       char *err, size_t errlen)
{
    struct rcur c = { rsp, len, 0 };
    int64_t nr;

    if (rcur_array(&c, &nr) < 0 || nr < 0)
        goto bad;
    for (int64_t r = 0; r < nr; r++) {
        int64_t ne, lo, hi;
        if (rcur_array(&c, &ne) < 0 || ne < 3 || rcur_int(&c, &lo) < 0 || rcur_int(&c, &hi) < 0 ||
            lo < 0 || hi >= CLUSTER_SLOTS || lo > hi)
            goto bad;
        int64_t master = slots_node(&c, self, 1, m);
        if (master == -2)
            goto bad;
        if (master < 0) {
            snprintf(err, errlen, "CLUSTER SLOTS: a node with no usable address");
            return -1;
        }
        if (cluster_map_slots(m, (uint32_t)lo, (uint32_t)hi, (uint32_t)master) < 0)
            goto bad;
        for (int64_t e = 3; e < ne; e++) {
            int64_t rep = slots_node(&c, self, 0, m);
            if (rep == -2)
                goto bad;
            if (rep >= 0)
                cluster_map_replica_of(m, (uint32_t)rep, (uint32_t)master);
        }
    }
    if (c.pos != len)
        goto bad;
    return 1;
bad:
    snprintf(err, errlen, "CLUSTER SLOTS: malformed reply (at byte %zu)", c.pos);
    return -1;
}

/* ------------------------------------------------------------------ the ops */

#define Q_INFO   "*2\r\n$7\r\nCLUSTER\r\n$4\r\nINFO\r\n"
#define Q_SHARDS "*2\r\n$7\r\nCLUSTER\r\n$6\r\nSHARDS\r\n"
#define Q_SLOTS  "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n"

static int redis_map_query(int fallback, struct buf *out)
{
    if (buf_append_str(out, Q_INFO) < 0 || buf_append_str(out, fallback ? Q_SLOTS : Q_SHARDS) < 0)
        return -ENOMEM;
    return 2;
}

static int redis_map_parse(int fallback, int tls, const char *const *rsp, const size_t *len,
                           uint32_t n,
                           const char *host, struct cluster_map *m, char *err, size_t errlen)
{
    if (n != 2) {
        snprintf(err, errlen, "expected 2 replies, got %u", n);
        return -1;
    }
    if (len[0] > 0 && rsp[0][0] == '-') {
        error_text(rsp[0], len[0], "CLUSTER INFO refused", err, errlen);
        return -1;
    }
    if (!fallback && is_unknown_command(rsp[1], len[1]))
        return 0;
    if (len[1] > 0 && rsp[1][0] == '-') {
        error_text(rsp[1], len[1], fallback ? "CLUSTER SLOTS refused" : "CLUSTER SHARDS refused",
                   err, errlen);
        return -1;
    }
    if (parse_info(rsp[0], len[0], m, err, errlen) < 0)
        return -1;
    return fallback ? parse_slots(rsp[1], len[1], host, m, err, errlen)
                    : parse_shards(rsp[1], len[1], host, tls, m, err, errlen);
}

/* "-MOVED 3999 127.0.0.1:6381", "-ASK 3999 host:port", "-TRYAGAIN ...", "-CLUSTERDOWN ...". */
static int redis_redirect(const char *rsp, size_t len, struct proto_redirect *rd)
{
    const char *e = memchr(rsp, '\r', len);
    size_t n = e ? (size_t)(e - rsp) : len;

    memset(rd, 0, sizeof(*rd));
    if (n >= 9 && memcmp(rsp, "-TRYAGAIN", 9) == 0) {
        rd->kind = PROTO_REDIR_TRYAGAIN;
        return 0;
    }
    if (n >= 12 && memcmp(rsp, "-CLUSTERDOWN", 12) == 0) {
        rd->kind = PROTO_REDIR_DOWN;
        return 0;
    }
    size_t at;
    if (n > 7 && memcmp(rsp, "-MOVED ", 7) == 0) {
        rd->kind = PROTO_REDIR_MOVED;
        at = 7;
    } else if (n > 5 && memcmp(rsp, "-ASK ", 5) == 0) {
        rd->kind = PROTO_REDIR_ASK;
        at = 5;
    } else {
        return -1;
    }
    const char *sp = memchr(rsp + at, ' ', n - at);
    if (sp == NULL)
        return -1;
    uint64_t slot;
    if (util_parse_u64(rsp + at, (size_t)(sp - rsp) - at, CLUSTER_SLOTS - 1, &slot) < 0)
        return -1;
    const char *a = sp + 1, *end = rsp + n;
    /* host:port, the port after the last ':' (Redis writes an IPv6 address bare) */
    const char *colon = NULL;
    for (const char *q = a; q < end; q++)
        if (*q == ':')
            colon = q;
    uint64_t port;
    if (colon == NULL || util_parse_u64(colon + 1, (size_t)(end - colon - 1), 65535, &port) < 0 ||
        port == 0)
        return -1;
    size_t hl = (size_t)(colon - a);
    if (hl >= 2 && a[0] == '[' && a[hl - 1] == ']') {
        a++;
        hl -= 2;
    }
    if (hl >= sizeof(rd->host) || (hl == 1 && a[0] == '?'))
        hl = 0;                     /* unknown endpoint: the host that answered */
    memcpy(rd->host, a, hl);
    rd->host[hl] = '\0';
    rd->slot = (uint32_t)slot;
    rd->port = (uint16_t)port;
    return 0;
}

const struct proto_cluster_ops proto_redis_cluster_ops = {
    .map_query = redis_map_query,
    .map_parse = redis_map_parse,
    .redirect = redis_redirect,
    .asking = "*1\r\n$6\r\nASKING\r\n",
};

int redis__cluster_error(const char *rsp, size_t len)
{
    if (len < 5)
        return 0;
    switch (rsp[1]) {
    case 'M': return len > 7 && memcmp(rsp, "-MOVED ", 7) == 0;
    case 'A': return memcmp(rsp, "-ASK ", 5) == 0;
    case 'T': return len >= 9 && memcmp(rsp, "-TRYAGAIN", 9) == 0;
    case 'C': return len >= 12 && memcmp(rsp, "-CLUSTERDOWN", 12) == 0;
    default:  return 0;
    }
}

/* ------------------------------------------------------------------ the one-node cluster
 *
 * A client of a cluster pool that speaks cluster (redis-py RedisCluster, Lettuce,
 * go-redis ClusterClient) asks CLUSTER SLOTS / SHARDS / NODES / INFO first: the proxy
 * is one master owning every slot at the address the client connected to, so such a
 * client sends everything here and never sees a redirect (the proxy follows them).
 */

/* This pool's node id as the client sees it: 40 hex digits from the pool's name and the
 * address, stable across restarts. */
static void local_id(const struct proto_env *env, const char *addr, char id[CLUSTER_ID_LEN + 1])
{
    char seed[512];
    int n = snprintf(seed, sizeof(seed), "ringleader %s %s", env->pool_name ? env->pool_name : "",
                     addr);
    XXH128_hash_t h = XXH3_128bits(seed, (size_t)(n > 0 ? n : 0));
    uint32_t t = XXH32(seed, (size_t)(n > 0 ? n : 0), 0);
    snprintf(id, CLUSTER_ID_LEN + 1, "%016" PRIx64 "%016" PRIx64 "%08" PRIx32,
             (uint64_t)h.high64, (uint64_t)h.low64, t);
}

/* The client's view of the proxy's address: ip and port split. */
static int local_ip_port(const struct proto_env *env, char *addr, size_t addrlen, char *ip,
                         size_t iplen, unsigned *port)
{
    if (env->local_addr == NULL || env->local_addr(env->ctx, addr, addrlen) < 0)
        snprintf(addr, addrlen, "127.0.0.1:0");
    const char *colon = strrchr(addr, ':');
    if (colon == NULL)
        return -1;
    size_t hl = (size_t)(colon - addr);
    const char *h = addr;
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    snprintf(ip, iplen, "%.*s", (int)hl, h);
    *port = (unsigned)strtoul(colon + 1, NULL, 10);
    return 0;
}

static int bulk_str(struct buf *out, const char *s)
{
    return buf_appendf(out, "$%zu\r\n%s\r\n", strlen(s), s);
}

int redis__cluster_local(int what, const char *buf, const struct proto_key *a, uint32_t argc,
                         const struct proto_env *env, struct buf *out)
{
    char addr[CLUSTER_ADDR_MAX], ip[CLUSTER_HOST_MAX], id[CLUSTER_ID_LEN + 1];
    unsigned port = 0;
    uint64_t epoch = env->epoch ? env->epoch : 1;
    int v3 = env->variant;      /* RESP3: maps and verbatim strings, as Redis 7.0 answers */
    int rc = 0;

    switch (what) {
    case REDIS_LOCAL_CLUSTER_OK:          /* READONLY, READWRITE, ASKING */
        return buf_append_str(out, "+OK\r\n");
    case REDIS_LOCAL_CLUSTER_KEYSLOT:
        if (argc < 3)
            return buf_append_str(out, "-ERR wrong number of arguments for 'cluster|keyslot' command\r\n");
        return buf_appendf(out, ":%" PRIu32 "\r\n", cluster_keyslot(buf + a[2].off, a[2].len));
    default:
        break;
    }
    local_ip_port(env, addr, sizeof(addr), ip, sizeof(ip), &port);
    local_id(env, addr, id);
    switch (what) {
    case REDIS_LOCAL_CLUSTER_MYID:
        return bulk_str(out, id);
    case REDIS_LOCAL_CLUSTER_SLOTS:     /* the node's last element: its metadata, empty */
        return buf_appendf(out, "*1\r\n*3\r\n:0\r\n:%u\r\n*4\r\n$%zu\r\n%s\r\n:%u\r\n$%d\r\n%s\r\n%s\r\n",
                           CLUSTER_SLOTS - 1, strlen(ip), ip, port, CLUSTER_ID_LEN, id,
                           v3 ? "%0" : "*0");
    case REDIS_LOCAL_CLUSTER_SHARDS:    /* a shard and a node: flat maps in RESP2 */
        rc |= buf_appendf(out, "*1\r\n%s\r\n$5\r\nslots\r\n*2\r\n:0\r\n:%u\r\n$5\r\nnodes\r\n*1\r\n"
                          "%s\r\n$2\r\nid\r\n", v3 ? "%2" : "*4", CLUSTER_SLOTS - 1,
                          v3 ? "%7" : "*14");
        rc |= bulk_str(out, id);
        rc |= buf_appendf(out, "$4\r\nport\r\n:%u\r\n$2\r\nip\r\n", port);
        rc |= bulk_str(out, ip);
        rc |= buf_append_str(out, "$8\r\nendpoint\r\n");
        rc |= bulk_str(out, ip);
        rc |= buf_append_str(out, "$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n"
                             "$6\r\nhealth\r\n$6\r\nonline\r\n");
        return rc < 0 ? -ENOMEM : 0;
    case REDIS_LOCAL_CLUSTER_NODES: {
        char line[CLUSTER_ADDR_MAX + 160];
        int n = snprintf(line, sizeof(line), "%s %s@0 myself,master - 0 0 %" PRIu64
                         " connected 0-%u\n", id, addr, epoch, CLUSTER_SLOTS - 1);
        return redis__append_text(out, v3, line, (size_t)n);
    }
    case REDIS_LOCAL_CLUSTER_INFO: {
        char info[1024];
        int n = snprintf(info, sizeof(info),
                         "cluster_state:ok\r\ncluster_slots_assigned:%u\r\ncluster_slots_ok:%u\r\n"
                         "cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:1\r\n"
                         "cluster_size:1\r\ncluster_current_epoch:%" PRIu64 "\r\n"
                         "cluster_my_epoch:%" PRIu64 "\r\ncluster_stats_messages_sent:0\r\n"
                         "cluster_stats_messages_received:0\r\n"
                         "total_cluster_links_buffer_limit_exceeded:0\r\n",
                         CLUSTER_SLOTS, CLUSTER_SLOTS, epoch, epoch);
        return redis__append_text(out, v3, info, (size_t)n);
    }
    default:
        return buf_append_str(out, "-ERR internal error: not a cluster command\r\n");
    }
}
