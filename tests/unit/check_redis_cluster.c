/* Unit tests for Redis Cluster in the protocol: keyslot, CLUSTER SHARDS / SLOTS / INFO into a slot map (real replies, whole and cut short), redirects, the one-node cluster a client sees. */
#include "config.h"

#include "check_main.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "placement/cluster_map.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "lib/util.h"

static const struct proto_ops *R = &proto_redis_ops;

static const char *srcdir(void)
{
    const char *d = getenv("top_srcdir");
    return d ? d : ".";
}

/* A saved reply of tests/vectors/cluster (captured from a redis-server 7.0.15 cluster of
 * 3 masters and 3 replicas, see tests/vectors/cluster/README.md). */
static char *vector(const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/vectors/cluster/%s", srcdir(), name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    char *b = malloc(1 << 20);
    ck_assert_ptr_nonnull(b);
    *len = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* map_parse of (INFO reply, map reply) into a finished map, or NULL with the rc. */
static struct cluster_map *parse(int fallback, const char *info, size_t ilen, const char *rsp,
                                 size_t len, int *rc, char *err)
{
    const char *r[2] = { info, rsp };
    size_t l[2] = { ilen, len };
    struct cluster_map *m = cluster_map_new();
    ck_assert_ptr_nonnull(m);
    err[0] = '\0';
    *rc = R->cluster->map_parse(fallback, 0, r, l, 2, "10.9.9.9", m, err, 512);
    if (*rc != 1) {
        cluster_map_free(m);
        return NULL;
    }
    ck_assert_int_eq(cluster_map_finish(m), 0);
    return m;
}

static const char INFO_OK[] = "$73\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n"
                              "cluster_current_epoch:6\r\n\r\n";

START_TEST(test_keyslot_is_redis_clusters)
{
    /* Redis's own CLUSTER KEYSLOT answers (redis-cli against 7.0.15). */
    ck_assert_uint_eq(cluster_keyslot("foo", 3), 12182);
    ck_assert_uint_eq(cluster_keyslot("bar", 3), 5061);
    ck_assert_uint_eq(cluster_keyslot("hello", 5), 866);
    ck_assert_uint_eq(cluster_keyslot("somekey", 7), 11058);
    ck_assert_uint_eq(cluster_keyslot("", 0), 0);
    /* hash tags: the first {...} with something inside */
    ck_assert_uint_eq(cluster_keyslot("{user1000}.following", 20),
                      cluster_keyslot("{user1000}.followers", 20));
    ck_assert_uint_eq(cluster_keyslot("{user1000}.following", 20), cluster_keyslot("user1000", 8));
    ck_assert_uint_eq(cluster_keyslot("foo{}{bar}", 10), cluster_keyslot("foo{}{bar}", 10));
    ck_assert_uint_ne(cluster_keyslot("foo{}{bar}", 10), cluster_keyslot("bar", 3));
    ck_assert_uint_eq(cluster_keyslot("foo{{bar}}zap", 13), cluster_keyslot("{bar", 4));
    ck_assert_uint_eq(cluster_keyslot("foo{bar}{zap}", 13), cluster_keyslot("bar", 3));
    ck_assert_uint_eq(cluster_keyslot("{", 1), cluster_keyslot("{", 1));
    ck_assert_uint_eq(cluster_keyslot("a{b", 3), cluster_keyslot("a{b", 3));
}
END_TEST

static void check_3x1(const struct cluster_map *m)
{
    uint32_t masters = 0, replicas = 0;
    ck_assert_uint_eq(m->nnodes, 6);
    for (uint32_t i = 0; i < m->nnodes; i++) {
        const struct cluster_node *n = &m->nodes[i];
        if (i > 0)
            ck_assert_int_lt(strcmp(m->nodes[i - 1].addr, n->addr), 0);   /* sorted */
        ck_assert_str_eq(n->host, "127.0.0.1");
        if (n->role == CLUSTER_MASTER) {
            masters++;
            ck_assert_uint_eq(n->master, i);
            ck_assert(n->nslots == 5461 || n->nslots == 5462);
        } else {
            replicas++;
            ck_assert_uint_ne(n->master, i);
            ck_assert_int_eq(m->nodes[n->master].role, CLUSTER_MASTER);
            ck_assert_uint_eq(n->nslots, 0);
        }
    }
    ck_assert_uint_eq(masters, 3);
    ck_assert_uint_eq(replicas, 3);
    for (uint32_t s = 0; s < CLUSTER_SLOTS; s++) {
        ck_assert_uint_lt(m->owner[s], m->nnodes);
        ck_assert_int_eq(m->nodes[m->owner[s]].role, CLUSTER_MASTER);
    }
    /* the contiguous thirds of redis-cli --cluster create */
    ck_assert_uint_eq(m->owner[0], m->owner[5460]);
    ck_assert_uint_ne(m->owner[5460], m->owner[5461]);
    ck_assert_uint_eq(m->owner[5461], m->owner[10922]);
    ck_assert_uint_ne(m->owner[10922], m->owner[10923]);
    ck_assert_uint_eq(m->owner[10923], m->owner[16383]);
}

/* A one-shard CLUSTER SHARDS of a node with `ports` ("$4\r\nport\r\n:7000\r\n"...; npairs
 * counts them) parsed as a TLS fetch or not: the port the map keeps. */
static uint16_t shards_port(const char *ports, int npairs, int tls)
{
    char rsp[512], err[512];
    snprintf(rsp, sizeof(rsp), "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n"
             "$5\r\nnodes\r\n*1\r\n*%d\r\n$2\r\nip\r\n$8\r\n10.0.0.5\r\n"
             "$4\r\nrole\r\n$6\r\nmaster\r\n%s", 2 * (npairs + 2), ports);
    const char *r[2] = { INFO_OK, rsp };
    size_t l[2] = { sizeof(INFO_OK) - 1, strlen(rsp) };
    struct cluster_map *m = cluster_map_new();
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(R->cluster->map_parse(0, tls, r, l, 2, "h", m, err, sizeof(err)), 1);
    ck_assert_int_eq(cluster_map_finish(m), 0);
    ck_assert_uint_eq(m->nnodes, 1);
    uint16_t port = m->nodes[0].port;
    cluster_map_free(m);
    return port;
}

START_TEST(test_shards_tls_port)
{
    /* Redis 7 with tls-cluster yes: "port" is the plaintext port (absent with port 0),
     * "tls-port" the TLS one */
    const char both[] = "$4\r\nport\r\n:7000\r\n$8\r\ntls-port\r\n:7443\r\n";
    const char tls_only[] = "$8\r\ntls-port\r\n:7443\r\n";
    const char plain[] = "$4\r\nport\r\n:7000\r\n";
    ck_assert_uint_eq(shards_port(both, 2, 1), 7443);
    ck_assert_uint_eq(shards_port(both, 2, 0), 7000);
    ck_assert_uint_eq(shards_port(tls_only, 1, 1), 7443);
    ck_assert_uint_eq(shards_port(tls_only, 1, 0), 7443);   /* its only address */
    ck_assert_uint_eq(shards_port(plain, 1, 1), 7000);
    ck_assert_uint_eq(shards_port(plain, 1, 0), 7000);
}
END_TEST

START_TEST(test_shards_and_slots_of_a_real_cluster)
{
    size_t sl, tl, il;
    char err[512];
    int rc;
    char *shards = vector("shards-3x1.resp", &sl);
    char *slots = vector("slots-3x1.resp", &tl);
    char *info = vector("info-3x1.resp", &il);

    struct cluster_map *a = parse(0, info, il, shards, sl, &rc, err);
    ck_assert_msg(a != NULL, "%d %s", rc, err);
    check_3x1(a);
    ck_assert_int_eq(a->state_ok, 1);
    ck_assert_uint_eq(a->current_epoch, 6);
    for (uint32_t i = 0; i < a->nnodes; i++)
        ck_assert_uint_eq(strlen(a->nodes[i].id), 40);
    struct cluster_map *b = parse(1, info, il, slots, tl, &rc, err);
    ck_assert_msg(b != NULL, "%d %s", rc, err);
    check_3x1(b);
    /* the same placement either way (SLOTS says nothing of health: the checksums differ) */
    for (uint32_t s = 0; s < CLUSTER_SLOTS; s++)
        ck_assert_str_eq(a->nodes[a->owner[s]].addr, b->nodes[b->owner[s]].addr);
    for (uint32_t i = 0; i < a->nnodes; i++) {
        ck_assert_str_eq(a->nodes[i].addr, b->nodes[i].addr);
        ck_assert_int_eq(a->nodes[i].role, b->nodes[i].role);
        ck_assert_uint_eq(a->nodes[i].master, b->nodes[i].master);
    }
    /* the checksum is of the map, not of the reply: parsed again, the same */
    struct cluster_map *c = parse(0, info, il, shards, sl, &rc, err);
    ck_assert_uint_eq(a->checksum, c->checksum);
    ck_assert_uint_ne(a->checksum, 0);
    cluster_map_free(a);
    cluster_map_free(b);
    cluster_map_free(c);
    free(shards);
    free(slots);
    free(info);
}
END_TEST

START_TEST(test_node_order_does_not_change_the_map)
{
    /* Two nodes may list the shards and nodes in different orders. */
    static const char one[] =
        "*2\r\n"
        "*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:8191\r\n$5\r\nnodes\r\n*2\r\n"
        "*6\r\n$2\r\nip\r\n$8\r\n10.0.0.2\r\n$4\r\nport\r\n:7000\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
        "*6\r\n$2\r\nip\r\n$8\r\n10.0.0.9\r\n$4\r\nport\r\n:7000\r\n$4\r\nrole\r\n$7\r\nreplica\r\n"
        "*4\r\n$5\r\nslots\r\n*2\r\n:8192\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
        "*6\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n$4\r\nport\r\n:7000\r\n$4\r\nrole\r\n$6\r\nmaster\r\n";
    static const char two[] =
        "*2\r\n"
        "*4\r\n$5\r\nslots\r\n*2\r\n:8192\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
        "*6\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n$4\r\nport\r\n:7000\r\n"
        "*4\r\n$5\r\nnodes\r\n*2\r\n"
        "*6\r\n$2\r\nip\r\n$8\r\n10.0.0.9\r\n$4\r\nport\r\n:7000\r\n$4\r\nrole\r\n$7\r\nreplica\r\n"
        "*6\r\n$2\r\nip\r\n$8\r\n10.0.0.2\r\n$4\r\nport\r\n:7000\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
        "$5\r\nslots\r\n*2\r\n:0\r\n:8191\r\n";
    char err[512];
    int rc;
    struct cluster_map *a = parse(0, INFO_OK, sizeof(INFO_OK) - 1, one, sizeof(one) - 1, &rc, err);
    ck_assert_msg(a != NULL, "%s", err);
    struct cluster_map *b = parse(0, INFO_OK, sizeof(INFO_OK) - 1, two, sizeof(two) - 1, &rc, err);
    ck_assert_msg(b != NULL, "%s", err);
    ck_assert_uint_eq(a->checksum, b->checksum);
    ck_assert_uint_eq(a->nnodes, 3);
    ck_assert_str_eq(a->nodes[0].addr, "10.0.0.1:7000");
    ck_assert_str_eq(a->nodes[1].addr, "10.0.0.2:7000");
    ck_assert_str_eq(a->nodes[2].addr, "10.0.0.9:7000");
    ck_assert_uint_eq(a->nodes[2].master, 1);
    ck_assert_uint_eq(a->owner[0], 1);
    ck_assert_uint_eq(a->owner[16383], 0);
    ck_assert_uint_eq(a->nodes[0].nslots, 8192);
    /* one slot moved: another checksum */
    struct buf t;
    buf_init(&t);
    ck_assert_int_eq(cluster_map_canonical(a, &t), 0);
    ck_assert_ptr_nonnull(strstr(buf_rptr(&t), "slots 0-8191 10.0.0.2:7000\n"));
    buf_free(&t);
    b->owner[5] = 0;
    ck_assert_int_eq(cluster_map_finish(b), 0);
    ck_assert_uint_ne(a->checksum, b->checksum);
    cluster_map_free(a);
    cluster_map_free(b);
}
END_TEST

START_TEST(test_a_failed_master_and_its_promoted_replica)
{
    size_t sl, il;
    char err[512];
    int rc;
    char *shards = vector("shards-failed-master.resp", &sl);
    char *info = vector("info-3x1.resp", &il);
    struct cluster_map *m = parse(0, info, il, shards, sl, &rc, err);
    ck_assert_msg(m != NULL, "%s", err);
    uint32_t failed = CLUSTER_NONE, masters = 0;
    for (uint32_t i = 0; i < m->nnodes; i++) {
        if (m->nodes[i].health == CLUSTER_FAILED)
            failed = i;
        if (m->nodes[i].role == CLUSTER_MASTER && m->nodes[i].nslots > 0)
            masters++;
    }
    ck_assert_uint_ne(failed, CLUSTER_NONE);
    ck_assert_uint_eq(m->nodes[failed].nslots, 0);       /* its slots went to the replica */
    ck_assert_uint_eq(masters, 3);
    ck_assert_uint_eq(m->nnodes, 6);
    for (uint32_t s = 0; s < CLUSTER_SLOTS; s++)
        ck_assert_uint_ne(m->owner[s], failed);
    cluster_map_free(m);
    free(shards);
    free(info);
}
END_TEST

START_TEST(test_master_failed_before_promotion_keeps_its_slots)
{
    static const char r[] =
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*2\r\n"
        "*8\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n$4\r\nport\r\n:7000\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
        "$6\r\nhealth\r\n$4\r\nfail\r\n"
        "*8\r\n$2\r\nip\r\n$8\r\n10.0.0.2\r\n$4\r\nport\r\n:7000\r\n$4\r\nrole\r\n$7\r\nreplica\r\n"
        "$6\r\nhealth\r\n$6\r\nonline\r\n";
    char err[512];
    int rc;
    struct cluster_map *m = parse(0, INFO_OK, sizeof(INFO_OK) - 1, r, sizeof(r) - 1, &rc, err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert_uint_eq(m->owner[0], 0);
    ck_assert_int_eq(m->nodes[0].health, CLUSTER_FAILED);
    ck_assert_int_eq(m->nodes[1].role, CLUSTER_REPLICA);
    ck_assert_uint_eq(m->nodes[1].master, 0);
    cluster_map_free(m);
}
END_TEST

START_TEST(test_replies_cut_short_or_refused)
{
    size_t sl, tl, il;
    char err[512];
    int rc;
    char *shards = vector("shards-3x1.resp", &sl);
    char *slots = vector("slots-3x1.resp", &tl);
    char *info = vector("info-3x1.resp", &il);

    /* a reply cut anywhere is refused as malformed, never read past its end */
    for (size_t n = 0; n < sl; n++) {
        char *cut = malloc(n ? n : 1);
        memcpy(cut, shards, n);
        ck_assert_ptr_null(parse(0, info, il, cut, n, &rc, err));
        ck_assert_int_eq(rc, -1);
        free(cut);
    }
    for (size_t n = 0; n < tl; n++) {
        char *cut = malloc(n ? n : 1);
        memcpy(cut, slots, n);
        ck_assert_ptr_null(parse(1, info, il, cut, n, &rc, err));
        ck_assert_int_eq(rc, -1);
        free(cut);
    }
    /* Redis 6 does not know SHARDS: ask the fallback */
    static const char unk[] = "-ERR unknown subcommand 'shards'. Try CLUSTER HELP.\r\n";
    ck_assert_ptr_null(parse(0, info, il, unk, sizeof(unk) - 1, &rc, err));
    ck_assert_int_eq(rc, 0);
    static const char off[] = "-ERR This instance has cluster support disabled\r\n";
    ck_assert_ptr_null(parse(1, off, sizeof(off) - 1, off, sizeof(off) - 1, &rc, err));
    ck_assert_int_eq(rc, -1);
    ck_assert_ptr_nonnull(strstr(err, "cluster support disabled"));
    static const char noauth[] = "-NOAUTH Authentication required.\r\n";
    ck_assert_ptr_null(parse(0, noauth, sizeof(noauth) - 1, shards, sl, &rc, err));
    ck_assert_int_eq(rc, -1);
    ck_assert_ptr_nonnull(strstr(err, "NOAUTH"));
    /* slots out of range, a port of 0, trailing bytes */
    static const char bad1[] = "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\na\r\n:1\r\n";
    ck_assert_ptr_null(parse(1, info, il, bad1, sizeof(bad1) - 1, &rc, err));
    static const char bad2[] = "*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\na\r\n:0\r\n";
    ck_assert_ptr_null(parse(1, info, il, bad2, sizeof(bad2) - 1, &rc, err));
    static const char bad3[] = "*0\r\n:1\r\n";
    ck_assert_ptr_null(parse(1, info, il, bad3, sizeof(bad3) - 1, &rc, err));
    /* an empty map is read, and is nothing a pool can use */
    static const char none[] = "*0\r\n";
    struct cluster_map *m = cluster_map_new();
    const char *r[2] = { info, none };
    size_t l[2] = { il, 4 };
    ck_assert_int_eq(R->cluster->map_parse(0, 0, r, l, 2, "h", m, err, sizeof(err)), 1);
    ck_assert_int_eq(cluster_map_finish(m), -1);
    cluster_map_free(m);
    free(shards);
    free(slots);
    free(info);
}
END_TEST

START_TEST(test_unknown_endpoint_is_the_node_that_answered)
{
    static const char r[] = "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$0\r\n\r\n:7001\r\n$1\r\nx\r\n";
    char err[512];
    int rc;
    struct cluster_map *m = parse(1, INFO_OK, sizeof(INFO_OK) - 1, r, sizeof(r) - 1, &rc, err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert_str_eq(m->nodes[0].addr, "10.9.9.9:7001");
    cluster_map_free(m);
    static const char v6[] = "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$3\r\n::1\r\n:7001\r\n";
    m = parse(1, INFO_OK, sizeof(INFO_OK) - 1, v6, sizeof(v6) - 1, &rc, err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert_str_eq(m->nodes[0].addr, "[::1]:7001");
    ck_assert_uint_eq(cluster_map_find(m, "[::1]:7001"), 0);
    cluster_map_free(m);
}
END_TEST

/* ---------------------------------------------------------------- redirects */

static struct proto_redirect redirect(const char *line, int *rc)
{
    struct proto_redirect rd;
    *rc = R->cluster->redirect(line, strlen(line), &rd);
    return rd;
}

START_TEST(test_redirect_replies)
{
    int rc;
    struct proto_redirect rd = redirect("-MOVED 3999 127.0.0.1:6381\r\n", &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(rd.kind, PROTO_REDIR_MOVED);
    ck_assert_uint_eq(rd.slot, 3999);
    ck_assert_str_eq(rd.host, "127.0.0.1");
    ck_assert_uint_eq(rd.port, 6381);
    rd = redirect("-ASK 16383 redis-3.cluster:7000\r\n", &rc);
    ck_assert_int_eq(rd.kind, PROTO_REDIR_ASK);
    ck_assert_uint_eq(rd.slot, 16383);
    ck_assert_str_eq(rd.host, "redis-3.cluster");
    rd = redirect("-MOVED 1 ::1:7000\r\n", &rc);       /* Redis writes IPv6 bare */
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(rd.host, "::1");
    ck_assert_uint_eq(rd.port, 7000);
    rd = redirect("-MOVED 1 :7000\r\n", &rc);          /* unknown endpoint: the node's host */
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(rd.host, "");
    rd = redirect("-TRYAGAIN Multiple keys request during rehashing of slot\r\n", &rc);
    ck_assert_int_eq(rd.kind, PROTO_REDIR_TRYAGAIN);
    rd = redirect("-CLUSTERDOWN The cluster is down\r\n", &rc);
    ck_assert_int_eq(rd.kind, PROTO_REDIR_DOWN);
    redirect("-MOVED 16384 127.0.0.1:6381\r\n", &rc);
    ck_assert_int_eq(rc, -1);
    redirect("-MOVED 12 127.0.0.1\r\n", &rc);
    ck_assert_int_eq(rc, -1);
    redirect("-MOVED 12 127.0.0.1:0\r\n", &rc);
    ck_assert_int_eq(rc, -1);
    redirect("-MOVED x 127.0.0.1:1\r\n", &rc);
    ck_assert_int_eq(rc, -1);
    redirect("-ERR MOVED 1 a:1\r\n", &rc);
    ck_assert_int_eq(rc, -1);
}
END_TEST

/* parse_rsp flags a cluster's errors only on a cluster pool's connection. */
START_TEST(test_reply_flag_only_for_cluster_pools)
{
    static const char *lines[] = { "-MOVED 1 a:1\r\n", "-ASK 1 a:1\r\n", "-TRYAGAIN x\r\n",
                                   "-CLUSTERDOWN y\r\n" };
    static const char *plain[] = { "-ERR MOVED\r\n", "-MOVEDX\r\n", "+MOVED 1 a:1\r\n",
                                   "-ASKING\r\n", "-CLUSTER\r\n" };
    for (size_t i = 0; i < RL_ARRAY_SIZE(lines); i++) {
        struct proto_parser p;
        struct proto_rsp r;
        memset(&p, 0, sizeof(p));
        ck_assert_int_eq(R->parse_rsp(&p, lines[i], strlen(lines[i]), 0, 0, &r), (int)strlen(lines[i]));
        ck_assert(!(r.flags & PROTO_SF_CLUSTER));
        p.flags = PROTO_PF_CLUSTER;
        ck_assert_int_eq(R->parse_rsp(&p, lines[i], strlen(lines[i]), 0, 0, &r), (int)strlen(lines[i]));
        ck_assert(r.flags & PROTO_SF_CLUSTER);
        ck_assert(r.flags & PROTO_SF_ERROR);
        ck_assert(r.flags & PROTO_SF_FINAL);
    }
    for (size_t i = 0; i < RL_ARRAY_SIZE(plain); i++) {
        struct proto_parser p;
        struct proto_rsp r;
        memset(&p, 0, sizeof(p));
        p.flags = PROTO_PF_CLUSTER;
        ck_assert_int_gt(R->parse_rsp(&p, plain[i], strlen(plain[i]), 0, 0, &r), 0);
        ck_assert(!(r.flags & PROTO_SF_CLUSTER));
    }
}
END_TEST

/* ---------------------------------------------------------------- the one-node cluster */

static int local_addr(void *ctx, char *out, size_t len)
{
    (void)ctx;
    snprintf(out, len, "10.1.2.3:22122");
    return 0;
}

static const struct proto_env ENV = {
    .version = "1.2.3", .pool_name = "cl", .local_addr = local_addr, .epoch = 7, .cluster = 1,
};

static const char *say(uint32_t pflags, const char *line, int *kind)
{
    static char out[4096];
    char req[512];
    struct proto_parser p;
    struct proto_client c;
    struct proto_req r;
    struct buf b;
    size_t n = (size_t)snprintf(req, sizeof(req), "%s\r\n", line);

    memset(&p, 0, sizeof(p));
    memset(&c, 0, sizeof(c));
    p.flags = PROTO_PF_AUTHED | pflags;
    ck_assert_int_eq(R->parse_req(&p, req, n, &r), (int)n);
    *kind = r.kind;
    if (r.kind != PROTO_REQ_LOCAL) {
        snprintf(out, sizeof(out), "%.*s", (int)r.err_len, r.err ? r.err : "");
        proto_parser_free(&p);
        return out;
    }
    buf_init(&b);
    ck_assert_int_ge(R->local(&c, &p, &r, req, &ENV, &b), 0);
    snprintf(out, sizeof(out), "%.*s", (int)buf_len(&b), buf_len(&b) ? buf_rptr(&b) : "");
    buf_free(&b);
    proto_parser_free(&p);
    return out;
}

/* The reply is one whole RESP element (the reply parser agrees). */
static void one_reply(const char *s)
{
    struct proto_parser p;
    struct proto_rsp r;
    memset(&p, 0, sizeof(p));
    size_t n = strlen(s);
    int rc = R->parse_rsp(&p, s, n, 0, 0, &r);
    ck_assert_int_gt(rc, 0);
    ck_assert_uint_eq((uint64_t)rc + r.body_len, n);
    ck_assert(r.flags & PROTO_SF_FINAL);
}

START_TEST(test_cluster_commands_answered_as_one_node)
{
    int kind;
    const char *s = say(PROTO_PF_CLUSTER, "CLUSTER SLOTS", &kind);
    ck_assert_int_eq(kind, PROTO_REQ_LOCAL);
    one_reply(s);
    ck_assert_ptr_nonnull(strstr(s, "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$8\r\n10.1.2.3\r\n:22122\r\n$40\r\n"));
    char id[41];
    const char *at = strstr(s, "$40\r\n") + 5;
    memcpy(id, at, 40);
    id[40] = '\0';
    /* the same id everywhere, 40 hex digits */
    for (int i = 0; i < 40; i++)
        ck_assert(strchr("0123456789abcdef", id[i]) != NULL);
    s = say(PROTO_PF_CLUSTER, "CLUSTER MYID", &kind);
    ck_assert_ptr_nonnull(strstr(s, id));
    s = say(PROTO_PF_CLUSTER, "cluster shards", &kind);
    one_reply(s);
    ck_assert_ptr_nonnull(strstr(s, id));
    ck_assert_ptr_nonnull(strstr(s, "$6\r\nhealth\r\n$6\r\nonline\r\n"));
    /* what the shard parser reads of it: one master owning every slot */
    {
        struct cluster_map *m = cluster_map_new();
        const char *r[2] = { INFO_OK, s };
        size_t l[2] = { sizeof(INFO_OK) - 1, strlen(s) };
        char err[256];
        ck_assert_int_eq(R->cluster->map_parse(0, 0, r, l, 2, "h", m, err, sizeof(err)), 1);
        ck_assert_int_eq(cluster_map_finish(m), 0);
        ck_assert_uint_eq(m->nnodes, 1);
        ck_assert_uint_eq(m->nodes[0].nslots, CLUSTER_SLOTS);
        ck_assert_str_eq(m->nodes[0].addr, "10.1.2.3:22122");
        cluster_map_free(m);
    }
    s = say(PROTO_PF_CLUSTER, "CLUSTER NODES", &kind);
    one_reply(s);
    ck_assert_ptr_nonnull(strstr(s, " 10.1.2.3:22122@0 myself,master - 0 0 7 connected 0-16383\n"));
    s = say(PROTO_PF_CLUSTER, "CLUSTER INFO", &kind);
    one_reply(s);
    ck_assert_ptr_nonnull(strstr(s, "cluster_state:ok\r\n"));
    ck_assert_ptr_nonnull(strstr(s, "cluster_current_epoch:7\r\n"));
    ck_assert_str_eq(say(PROTO_PF_CLUSTER, "CLUSTER KEYSLOT foo", &kind), ":12182\r\n");
    ck_assert_str_eq(say(PROTO_PF_CLUSTER, "CLUSTER KEYSLOT {user1000}.x", &kind), ":3443\r\n");
    ck_assert_str_eq(say(PROTO_PF_CLUSTER, "READONLY", &kind), "+OK\r\n");
    ck_assert_str_eq(say(PROTO_PF_CLUSTER, "READWRITE", &kind), "+OK\r\n");
    ck_assert_str_eq(say(PROTO_PF_CLUSTER, "ASKING", &kind), "+OK\r\n");
    ck_assert_str_eq(say(PROTO_PF_CLUSTER, "CLUSTER KEYSLOT", &kind),
                     "-ERR wrong number of arguments for 'cluster|keyslot' command\r\n");
    /* the rest of CLUSTER stays refused */
    s = say(PROTO_PF_CLUSTER, "CLUSTER FAILOVER", &kind);
    ck_assert_int_eq(kind, PROTO_REQ_ERROR);
    ck_assert_str_eq(s, "-ERR command 'CLUSTER FAILOVER' is not supported by ringleader\r\n");
    /* a pool that is not a cluster refuses them all, as before */
    s = say(0, "CLUSTER SLOTS", &kind);
    ck_assert_int_eq(kind, PROTO_REQ_ERROR);
    ck_assert_str_eq(s, "-ERR command 'CLUSTER SLOTS' is not supported by ringleader\r\n");
    s = say(0, "READONLY", &kind);
    ck_assert_int_eq(kind, PROTO_REQ_ERROR);
}
END_TEST

START_TEST(test_hello_sends_readonly_for_replica_reads)
{
    struct buf b;
    buf_init(&b);
    struct proto_hello h = { .password = "pw", .replica_reads = 1 };
    ck_assert_int_eq(R->server_hello(&h, &b), 2);
    ck_assert_uint_eq(buf_len(&b), strlen("*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*1\r\n$8\r\nREADONLY\r\n"));
    ck_assert(memcmp(buf_rptr(&b), "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*1\r\n$8\r\nREADONLY\r\n", buf_len(&b)) == 0);
    buf_free(&b);
    buf_init(&b);
    struct proto_hello q = { 0 };
    ck_assert_int_eq(R->server_hello(&q, &b), 0);
    buf_free(&b);
    /* the map query: CLUSTER INFO then CLUSTER SHARDS (or SLOTS) */
    buf_init(&b);
    ck_assert_int_eq(R->cluster->map_query(0, &b), 2);
    ck_assert(memcmp(buf_rptr(&b), "*2\r\n$7\r\nCLUSTER\r\n$4\r\nINFO\r\n*2\r\n$7\r\nCLUSTER\r\n$6\r\nSHARDS\r\n", buf_len(&b)) == 0);
    buf_free(&b);
}
END_TEST

START_TEST(test_view_of_a_map)
{
    size_t sl, il;
    char err[512];
    int rc;
    char *shards = vector("shards-3x1.resp", &sl);
    char *info = vector("info-3x1.resp", &il);
    struct cluster_map *m = parse(0, info, il, shards, sl, &rc, err);
    struct cluster_view *v = cluster_view_build(m, 0);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(v->nnodes, 6);
    ck_assert_uint_eq(v->checksum, m->checksum);
    for (uint32_t i = 0; i < 6; i++) {
        uint32_t nrep = v->first[i + 1] - v->first[i];
        ck_assert_uint_eq(nrep, v->role[i] == CLUSTER_MASTER ? 1 : 0);
        for (uint32_t k = v->first[i]; k < v->first[i + 1]; k++)
            ck_assert_uint_eq(m->nodes[v->list[k]].master, i);
    }
    cluster_view_free(v);
    v = cluster_view_build(NULL, 3);            /* seeds only: all masters */
    ck_assert_uint_eq(v->nnodes, 3);
    ck_assert_int_eq(v->role[2], CLUSTER_MASTER);
    ck_assert_uint_eq(v->first[3], 0);
    cluster_view_free(v);
    cluster_map_free(m);
    free(shards);
    free(info);
}
END_TEST

static Suite *redis_cluster_suite(void)
{
    Suite *s = suite_create("redis_cluster");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_keyslot_is_redis_clusters);
    tcase_add_test(tc, test_shards_and_slots_of_a_real_cluster);
    tcase_add_test(tc, test_shards_tls_port);
    tcase_add_test(tc, test_node_order_does_not_change_the_map);
    tcase_add_test(tc, test_a_failed_master_and_its_promoted_replica);
    tcase_add_test(tc, test_master_failed_before_promotion_keeps_its_slots);
    tcase_add_test(tc, test_replies_cut_short_or_refused);
    tcase_add_test(tc, test_unknown_endpoint_is_the_node_that_answered);
    tcase_add_test(tc, test_redirect_replies);
    tcase_add_test(tc, test_reply_flag_only_for_cluster_pools);
    tcase_add_test(tc, test_cluster_commands_answered_as_one_node);
    tcase_add_test(tc, test_hello_sends_readonly_for_replica_reads);
    tcase_add_test(tc, test_view_of_a_map);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(redis_cluster_suite)
