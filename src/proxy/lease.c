/* Leases (the pool key leases:): a missed key's first reader recomputes it, the other reads of the key wait for its store. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include <xxhash.h>

#include "conf/conf.h"
#include "lib/invariant.h"
#include "lib/util.h"
#include "proto/memcache.h"
#include "proto/redis.h"
#include "proxy/client.h"
#include "proxy/lease.h"
#include "proxy/msg.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "stats/stats.h"

/* ------------------------------------------------------------------ the map (pure) */

#define LEASE_BUCKETS_MIN 64u

int lease_map_init(struct lease_map *lm)
{
    memset(lm, 0, sizeof(*lm));
    if (keytab_init(&lm->keys, LEASE_BUCKETS_MIN, offsetof(struct lease, key) -
                                                  offsetof(struct lease, node)) < 0)
        return -ENOMEM;
    queue_init(&lm->age);
    queue_init(&lm->holding);
    return 0;
}

void lease_map_clear(struct lease_map *lm)
{
    while (!queue_empty(&lm->age)) {     /* every lease is on it, in the map or not */
        struct lease *l = QUEUE_DATA(queue_first(&lm->age), struct lease, age);
        RL_ASSERT(l->nheld == 0 && queue_empty(&l->held));
        queue_remove(&l->age);
        free(l);
    }
    keytab_free(&lm->keys);
    queue_init(&lm->age);
    queue_init(&lm->holding);
}

struct lease *lease_map_find(const struct lease_map *lm, const char *key, size_t len)
{
    struct keytab_node *e = keytab_find(&lm->keys, XXH3_64bits(key, len), key, len);
    return e != NULL ? KEYTAB_DATA(e, struct lease, node) : NULL;
}

struct lease *lease_map_add(struct lease_map *lm, const char *key, size_t len,
                            uint64_t deadline_ms)
{
    if (len > UINT32_MAX)
        return NULL;
    struct lease *l = calloc(1, sizeof(*l) + len);
    if (l == NULL)
        return NULL;
    l->node.hash = XXH3_64bits(key, len);
    l->node.klen = (uint32_t)len;
    memcpy(l->key, key, len);
    l->deadline_ms = deadline_ms;
    queue_init(&l->held);
    keytab_add(&lm->keys, &l->node);
    queue_insert_tail(&lm->age, &l->age);
    return l;
}

void lease_map_remove(struct lease_map *lm, struct lease *l)
{
    RL_ASSERT(l->nheld == 0 && queue_empty(&l->held) && l->cand == NULL);
    keytab_remove(&lm->keys, &l->node);
    queue_remove(&l->age);
    if (queue_linked(&l->holding))
        queue_remove(&l->holding);
    free(l);
}

uint64_t lease_map_next_due(const struct lease_map *lm)
{
    uint64_t due = UINT64_MAX;
    const struct qnode *n = queue_first(&lm->age);

    if (n != NULL)
        due = QUEUE_DATA(n, struct lease, age)->deadline_ms;
    QUEUE_FOREACH(n, &lm->holding) {
        const struct lease *l = QUEUE_DATA(n, struct lease, holding);
        due = RL_MIN(due, l->probe_ms);
    }
    return due;
}

uint64_t lease_probe_next(struct lease *l, uint64_t now_ms)
{
    if (l->young_ms == 0)
        l->young_ms = now_ms + LEASE_YOUNG_MS;
    uint32_t cap = now_ms < l->young_ms ? LEASE_PROBE_YOUNG_MS : LEASE_PROBE_MAX_MS;
    l->backoff_ms = l->backoff_ms == 0 ? LEASE_PROBE_MIN_MS
                                       : RL_MIN(l->backoff_ms * 2, cap);
    l->probe_ms = now_ms + l->backoff_ms;
    return l->probe_ms;
}

/* ------------------------------------------------------------------ a pool's table */

/* One per pool and worker, made at the pool's first lease-eligible read. */
struct lease_table {
    uv_timer_t       timer;     /* the next lease end or re-read (unreferenced: it keeps
                                   no loop alive) */
    struct wpool    *pool;
    struct lease_map map;
    uint32_t         nheld;     /* held reads over all leases: max_waiters bounds it */
    uint64_t         due_ms;    /* what the timer is set for; UINT64_MAX: stopped */
    char             miss[32];  /* the protocol's miss reply to miss_cmd (lease_is_miss) */
    uint8_t          miss_len;
    uint8_t          miss_valid;
    uint16_t         miss_cmd;
    uint16_t         miss_rflags;
    struct msg_watch take;      /* the fleet-wide lease requests report here */
    struct msg_watch probe;     /* and the re-reads of held keys */
};

enum lease_end_why { LEASE_END_STORE, LEASE_END_TIMEOUT };

static void lease_timer_cb(uv_timer_t *h);
static void lease_take_done(struct msg_watch *wt, struct worker *w, struct msg *om, int ok);
static void lease_probe_done(struct msg_watch *wt, struct worker *w, struct msg *om, int ok);
static int lease_meta(const struct wpool *pool);
static int lease_meta_send(struct lease_table *t, struct msg *m);
static void lease_meta_found(struct lease_table *t, struct lease *l, const struct lease_mg *g);
static int lease_own_send_as(struct wpool *pool, const char *key, size_t klen,
                             uint16_t rflags, uint16_t cmd, const char *line, size_t len,
                             const char *rec, size_t reclen, struct msg_watch *wt);
static int lease_own_send(struct wpool *pool, const char *key, size_t klen, uint16_t rflags,
                          const char *line, size_t len, struct msg_watch *wt);

static struct lease_table *lease_table_get(struct wpool *pool)
{
    struct lease_table *t = pool->lease;

    if (t != NULL)
        return t;
    if ((t = calloc(1, sizeof(*t))) == NULL)
        return NULL;
    if (lease_map_init(&t->map) < 0) {
        free(t);
        return NULL;
    }
    uv_timer_init(&pool->w->loop, &t->timer);
    uv_unref((uv_handle_t *)&t->timer);
    t->timer.data = t;
    t->take.done = lease_take_done;
    t->probe.done = lease_probe_done;
    t->pool = pool;
    t->due_ms = UINT64_MAX;
    pool->lease = t;
    return t;
}

/* Set the timer for what is due next (or stop it). */
static void lease_arm(struct lease_table *t)
{
    uint64_t due = lease_map_next_due(&t->map);

    if (due == t->due_ms)
        return;
    t->due_ms = due;
    if (due == UINT64_MAX) {
        uv_timer_stop(&t->timer);
        return;
    }
    uint64_t now = uv_now(t->timer.loop);
    uv_timer_start(&t->timer, lease_timer_cb, due > now ? due - now : 0, 0);
}

/*
 * m->reqcopy holds [u32 key length][u64 arrival, usec][key][the request as forwarded]:
 * what a held read needs to be found by its key and sent again, and when it came (its
 * start_us is its latest send's, for the servers' latency). 0, or -ENOMEM (m is not
 * followed).
 */
struct lease_rec {
    uint32_t klen;
    uint64_t since_us;
};

static int lease_record(struct msg *m, const char *key, size_t klen, const char *req,
                        size_t rlen)
{
    struct lease_rec h = { .klen = (uint32_t)klen, .since_us = m->start_us };

    if (klen > UINT32_MAX || rlen > SIZE_MAX - sizeof(h) - klen)
        return -ENOMEM;
    /* Allocated to size, not as a pooled buffer (BUF_STD_SIZE): one per read followed. */
    size_t n = sizeof(h) + klen + rlen;
    char *d = malloc(n);
    if (d == NULL)
        return -ENOMEM;
    memcpy(d, &h, sizeof(h));
    memcpy(d + sizeof(h), key, klen);
    memcpy(d + sizeof(h) + klen, req, rlen);
    buf_free(&m->reqcopy);
    m->reqcopy.data = d;
    m->reqcopy.cap = n;
    m->reqcopy.rpos = 0;
    m->reqcopy.wpos = n;
    msg_charge(m);
    return 0;
}

/* What lease_record kept: 0, or -1 when m holds no such record. */
static int lease_recorded(const struct msg *m, const char **key, size_t *klen, const char **req,
                          size_t *rlen)
{
    size_t n = buf_len(&m->reqcopy);
    struct lease_rec h;

    if (n < sizeof(h))
        return -1;
    memcpy(&h, buf_rptr(&m->reqcopy), sizeof(h));
    if (n - sizeof(h) < h.klen)
        return -1;
    *key = buf_rptr(&m->reqcopy) + sizeof(h);
    *klen = h.klen;
    *req = *key + h.klen;
    *rlen = n - sizeof(h) - h.klen;
    return 0;
}

/* When m arrived (lease_record), or its start. */
static uint64_t lease_since_us(const struct msg *m)
{
    struct lease_rec h;

    if (buf_len(&m->reqcopy) < sizeof(h))
        return m->start_us;
    memcpy(&h, buf_rptr(&m->reqcopy), sizeof(h));
    return h.since_us;
}

/* Whether m's complete reply is the protocol's miss for its command (byte for byte: an
 * error reply, or a hit, is not). The miss of the last command asked is kept in t: a
 * stampede asks one command over and over. */
static int lease_is_miss(struct lease_table *t, const struct proto_ops *ops, const struct msg *m)
{
    if (m->items != 0 || (m->flags & MSG_F_STREAMED))
        return 0;
    if (!t->miss_valid || t->miss_cmd != m->cmd || t->miss_rflags != m->rflags) {
        struct buf miss;
        buf_init(&miss);
        t->miss_valid = ops->miss_reply(m->cmd, m->rflags, &miss) == 0 &&
                        buf_len(&miss) <= sizeof(t->miss);
        if (t->miss_valid) {
            memcpy(t->miss, buf_rptr(&miss), buf_len(&miss));
            t->miss_len = (uint8_t)buf_len(&miss);
            t->miss_cmd = m->cmd;
            t->miss_rflags = m->rflags;
        }
        buf_free(&miss);
        if (!t->miss_valid)
            return 0;
    }
    return buf_len(&m->rsp) == t->miss_len && memcmp(buf_rptr(&m->rsp), t->miss, t->miss_len) == 0;
}

/* m waits in l's list (its reply so far, a miss, is dropped); `fresh`: a read held for
 * the first time (counted). */
static void lease_hold(struct lease_table *t, struct lease *l, struct msg *m, int fresh,
                       uint64_t now_ms)
{
    struct client *c = m->client;

    if (c != NULL)
        c->held_bytes -= RL_MIN(c->held_bytes, buf_len(&m->rsp));
    m->rsp.rpos = m->rsp.wpos = 0;
    m->items = 0;
    m->state = MSG_SENT;        /* owed an answer, by the lease */
    m->sconn = NULL;
    m->server = NULL;           /* it is sent again wherever its key routes then */
    m->lease = LEASE_M_HELD;
    m->flags &= (uint16_t)~MSG_F_STAGED;
    queue_insert_tail(&l->held, &m->sq);
    l->nheld++;
    t->nheld++;
    if (!queue_linked(&l->holding)) {
        queue_insert_tail(&t->map.holding, &l->holding);
        if (l->probe_ms == 0)
            lease_probe_next(l, now_ms);
    }
    if (fresh)
        STATS_ADD(&t->pool->stats, lease_reads_held, 1);
}

static void lease_unhold(struct lease_table *t, struct lease *l, struct msg *m)
{
    RL_ASSERT(m->lease == LEASE_M_HELD && l->nheld > 0 && t->nheld > 0);
    queue_remove(&m->sq);
    l->nheld--;
    t->nheld--;
    if (l->nheld == 0 && queue_linked(&l->holding))
        queue_remove(&l->holding);
}

/* The candidate of a fleet-wide lease (which kept its miss for the win) joins the reads
 * to be sent again. */
static void lease_cand_clear(struct msg *m)
{
    struct client *c = m->client;

    if (c != NULL)
        c->held_bytes -= RL_MIN(c->held_bytes, buf_len(&m->rsp));
    m->rsp.rpos = m->rsp.wpos = 0;
    m->items = 0;
    m->lease = LEASE_M_HELD;
}

/* How long m was held: from its arrival to its release (counters by bucket). */
static void lease_hold_time(struct lease_table *t, const struct msg *m)
{
    struct stats_pool *st = &t->pool->stats;
    uint64_t now = worker_now_us(t->pool->w);
    uint64_t since = lease_since_us(m);
    uint64_t us = now > since ? now - since : 0;

    STATS_ADD(st, lease_hold_time, us);
    if (us <= 10000)
        STATS_ADD(st, lease_hold_le_10ms, 1);
    else if (us <= 100000)
        STATS_ADD(st, lease_hold_le_100ms, 1);
    else if (us <= 1000000)
        STATS_ADD(st, lease_hold_le_1s, 1);
    else
        STATS_ADD(st, lease_hold_over_1s, 1);
}

/*
 * Send held read m (out of every list) again, where its key routes now, its reply
 * followed as `mark` says: answered as if it arrived now. A read whose client went away
 * is dropped; one that cannot be sent is answered with the error the client would have
 * had then.
 */
static void lease_resend(struct lease_table *t, struct msg *m, enum lease_mark mark)
{
    struct wpool *pool = t->pool;
    struct worker *w = pool->w;
    const char *key, *req, *reason = "no live server for this key";
    size_t klen, rlen;
    struct route rt;

    m->lease = LEASE_M_NONE;
    if (m->client == NULL) {            /* its client closed while it was held */
        m->state = MSG_DONE;
        msg_release(w, m);
        return;
    }
    if (lease_meta(pool)) {             /* read again as `mg ... N` */
        if (lease_meta_send(t, m) == 0)
            return;
        goto fail;
    }
    if (lease_recorded(m, &key, &klen, &req, &rlen) < 0)
        goto fail;
    struct route_key rk = { .bytes = key, .len = klen };
    route_key_place(&pool->view, &rk);
    route_request(&pool->view, &rk, m->rflags, 1, 0, w->rr, uv_now(&w->loop), &rt);
    if (rt.kind != ROUTE_SEND)
        goto fail;
    struct server *srv = pool->servers[rt.to[0]];
    reason = NULL;
    struct sconn *s = server_pick(srv, rk.hash, m->rflags, &reason);
    if (s == NULL) {
        if (reason == NULL)
            reason = "no connection";
        goto fail;
    }
    if (buf_append(&s->conn.obuf, req, rlen) < 0) {
        reason = "out of memory";
        goto fail;
    }
    m->state = MSG_NEW;
    m->items = 0;
    m->req_bytes = rlen;
    m->start_us = worker_now_us(w);     /* the server's latency counts from this send */
    m->lease = (uint8_t)mark;
    if (mark != LEASE_M_NONE)
        m->flags |= MSG_F_STAGED;       /* lease_reply sees its reply */
    STATS_ADD(&srv->stats, requests, 1);
    STATS_ADD(&srv->stats, request_bytes, rlen);
    sconn_enqueue(s, m);
    sconn_mark(w, s);
    return;

fail:
    m->state = MSG_NEW;
    msg_fail(w, m, PROTO_ERR_SERVER, reason);
}

/* ------------------------------------------------------------------ fleet-wide leases */

/*
 * lease_prefix: the first proxy to miss a key takes the fleet-wide lease from the key's
 * server, as a key of its own, added only if absent: memcached `add <prefix><key> 0 <s> 1`
 * (whole seconds, rounded up), Redis `SET <prefix><key> 1 NX PX <ttl_ms>`. A proxy that
 * gets it answers its reader's miss (one recomputation in the fleet); one that does not
 * holds the reader as if another reader of its own had won, and its re-reads find the
 * value wherever it is stored. A write of the key through a proxy deletes the lease key.
 */

/* prefix + key into out (room for LEASE_KEY_MAX): its length, or 0 when the key cannot
 * be one (too long, or bytes a memcached text key cannot carry). */
#define LEASE_KEY_MAX 320

static size_t lease_fleet_key(const struct wpool *pool, const char *key, size_t klen, char *out)
{
    const char *prefix = pool->cp->leases.prefix;
    size_t pl = strlen(prefix);
    int redis = pool->cp->protocol == CONF_PROTO_REDIS;

    if (pl + klen > (redis ? LEASE_KEY_MAX : 250))
        return 0;
    for (size_t i = 0; !redis && i < klen; i++)
        if ((unsigned char)key[i] <= ' ' || (unsigned char)key[i] == 0x7f)
            return 0;
    memcpy(out, prefix, pl);
    memcpy(out + pl, key, klen);
    return pl + klen;
}

/* The connection key k's requests take (its server, by the pool's routing), or NULL. */
static struct sconn *lease_conn(struct wpool *pool, const char *key, size_t klen,
                                struct server **srv)
{
    struct route_key rk = { .bytes = key, .len = klen };
    struct route rt;
    const char *reason = NULL;

    route_key_place(&pool->view, &rk);
    route_request(&pool->view, &rk, PROTO_RF_WRITE, 1, 0, pool->w->rr,
                  uv_now(&pool->w->loop), &rt);
    if (rt.kind != ROUTE_SEND)
        return NULL;
    *srv = pool->servers[rt.to[0]];
    return server_pick(*srv, rk.hash, 0, &reason);
}

/* The lease key is written by the proxy only: its request bytes and the command id its
 * reply parses as. 0, or -1. */
static int lease_fleet_take_req(const struct wpool *pool, const char *lk, size_t lkl,
                                struct buf *out, uint16_t *cmd)
{
    char num[32];
    uint32_t ttl = pool->cp->leases.ttl_ms;

    if (pool->cp->protocol == CONF_PROTO_REDIS) {
        const struct redis_command *set = redis_command_find("SET");
        if (set == NULL)
            return -1;
        *cmd = (uint16_t)(set - redis_commands);
        int n = snprintf(num, sizeof(num), "%u", ttl);
        char hdr[64];
        snprintf(hdr, sizeof(hdr), "*6\r\n$3\r\nSET\r\n$%zu\r\n", lkl);
        char tail[96];
        snprintf(tail, sizeof(tail), "\r\n$1\r\n1\r\n$2\r\nNX\r\n$2\r\nPX\r\n$%d\r\n%s\r\n",
                 n, num);
        return buf_append_str(out, hdr) < 0 || buf_append(out, lk, lkl) < 0 ||
               buf_append_str(out, tail) < 0 ? -1 : 0;
    }
    *cmd = MEMCACHE_CMD_ADD;
    snprintf(num, sizeof(num), " 0 %u 1\r\n1\r\n", (ttl + 999) / 1000);
    return buf_append_str(out, "add ") < 0 || buf_append(out, lk, lkl) < 0 ||
           buf_append_str(out, num) < 0 ? -1 : 0;
}

/* Ask for l's fleet-wide lease: 0 when asked (lease_take_done answers), -1 when it cannot
 * be (the lease is then this proxy's alone). */
static int lease_fleet_take(struct lease_table *t, struct lease *l)
{
    struct wpool *pool = t->pool;
    struct worker *w = pool->w;
    char lk[LEASE_KEY_MAX];
    size_t lkl = lease_fleet_key(pool, l->key, l->node.klen, lk);
    struct server *srv;
    struct sconn *s = lkl > 0 ? lease_conn(pool, l->key, l->node.klen, &srv) : NULL;
    uint16_t cmd;

    if (s == NULL)
        return -1;
    struct msg *om = msg_get(w);
    if (om == NULL)
        return -1;
    size_t before = buf_len(&s->conn.obuf);
    if (lease_fleet_take_req(pool, lk, lkl, &s->conn.obuf, &cmd) < 0 ||
        lease_record(om, l->key, l->node.klen, "", 0) < 0) {
        buf_truncate(&s->conn.obuf, before);
        msg_put(w, om);
        return -1;
    }
    om->role = MSG_OWN;
    om->cmd = cmd;
    om->nkeys = 1;
    om->start_us = worker_now_us(w);
    om->req_bytes = buf_len(&s->conn.obuf) - before;
    om->watch = &t->take;
    t->take.keep_reply = 1;
    pool->refs++;               /* the table lives until its answer (lease_take_done) */
    STATS_ADD(&srv->stats, requests, 1);
    STATS_ADD(&srv->stats, request_bytes, om->req_bytes);
    sconn_enqueue(s, om);
    sconn_mark(w, s);
    return 0;
}

/* The lease key goes (a write of the key passed): the next expiry's first miss takes it. */
static void lease_fleet_release(struct lease_table *t, const char *key, size_t klen)
{
    struct wpool *pool = t->pool;
    char lk[LEASE_KEY_MAX];
    size_t lkl;
    struct server *srv;
    struct sconn *s;
    uint16_t cmd;

    if (pool->cp->leases.prefix[0] == 0 || pool->ops->invalidate == NULL ||
        (lkl = lease_fleet_key(pool, key, klen, lk)) == 0 ||
        (s = lease_conn(pool, key, klen, &srv)) == NULL)
        return;
    struct msg *dm = msg_get(pool->w);
    if (dm == NULL)
        return;
    size_t before = buf_len(&s->conn.obuf);
    if (pool->ops->invalidate(lk, lkl, &s->conn.obuf, &cmd) < 0) {
        buf_truncate(&s->conn.obuf, before);
        msg_put(pool->w, dm);
        return;
    }
    dm->role = MSG_DISCARD;     /* its reply is swallowed */
    dm->cmd = cmd;
    dm->req_bytes = buf_len(&s->conn.obuf) - before;
    sconn_enqueue(s, dm);
    sconn_mark(pool->w, s);
}

/* The lease ends (its key was stored, deleted, seen on the server, or its ttl passed):
 * every read it held is sent again, in the order they were held. */
static void lease_end(struct lease_table *t, struct lease *l, enum lease_end_why why)
{
    struct qnode list, *n;

    queue_init(&list);
    if (l->cand != NULL) {      /* its fleet-wide lease was still being asked for */
        struct msg *m = l->cand;
        l->cand = NULL;
        lease_cand_clear(m);
        queue_insert_tail(&list, &m->sq);
    }
    while ((n = queue_first(&l->held)) != NULL) {
        struct msg *m = QUEUE_DATA(n, struct msg, sq);
        lease_unhold(t, l, m);
        queue_insert_tail(&list, &m->sq);
    }
    if (why == LEASE_END_STORE)
        lease_fleet_release(t, l->key, l->node.klen);
    lease_map_remove(&t->map, l);
    /* The list is detached from the lease before any answer: answering may close a
     * client, which touches no lease but releases nothing held either. */
    while ((n = queue_first(&list)) != NULL) {
        struct msg *m = QUEUE_DATA(n, struct msg, sq);
        queue_remove(n);
        if (m->client != NULL) {
            lease_hold_time(t, m);
            if (why == LEASE_END_STORE)
                STATS_ADD(&t->pool->stats, lease_released_store, 1);
            else
                STATS_ADD(&t->pool->stats, lease_released_timeout, 1);
        }
        lease_resend(t, m, LEASE_M_READ);
    }
}

/*
 * A re-read of l's key: the proxy's own get, with the bytes of its oldest held read, while
 * every held read stays held (and counted against max_waiters). 0 when sent (its answer
 * comes to lease_probe_done), -1 when it could not be (the next one is tried later).
 */
static int lease_probe(struct lease_table *t, struct lease *l)
{
    struct wpool *pool = t->pool;
    struct msg *m = QUEUE_DATA(queue_first(&l->held), struct msg, sq);
    const char *key, *req;
    size_t klen, rlen;

    if (lease_meta(pool)) {             /* `mg <key> v f c`: still the vivified item? */
        char line[300];
        int n = snprintf(line, sizeof(line), "mg %.*s v f c\r\n", (int)l->node.klen, l->key);
        if (n <= 0 || (size_t)n >= sizeof(line) ||
            lease_own_send(pool, l->key, l->node.klen, m->rflags, line, (size_t)n, &t->probe) < 0)
            return -1;
        l->probing = 1;
        return 0;
    }
    if (lease_recorded(m, &key, &klen, &req, &rlen) < 0 ||
        lease_own_send_as(pool, key, klen, m->rflags, m->cmd, req, rlen, req, rlen,
                          &t->probe) < 0)
        return -1;
    l->probing = 1;
    return 0;
}

/*
 * A re-read found l's key stored (elsewhere: through another proxy, straight to the
 * server). The held reads that asked exactly what the re-read asked get its reply now;
 * the others are sent again (lease_end), and the lease ends.
 */
/* Whether held read m asked exactly the request req[0..len) (lease_found). */
struct lease_same_req {
    const char *req;
    size_t      len;
};

static int lease_asked_same(const struct msg *m, const void *arg)
{
    const struct lease_same_req *q = arg;
    const char *key, *req;
    size_t klen, rlen;
    return lease_recorded(m, &key, &klen, &req, &rlen) == 0 && rlen == q->len &&
           memcmp(req, q->req, q->len) == 0;
}

/*
 * The held reads of l that `pick` chooses are released by a store and each answered by
 * `answer` (a read whose client an earlier answer closed is freed); the lease ends, and
 * the others are sent again (lease_end).
 */
static void lease_release_held(struct lease_table *t, struct lease *l,
                               int (*pick)(const struct msg *m, const void *arg),
                               const void *pick_arg,
                               void (*answer)(struct worker *w, struct msg *m, const void *arg),
                               const void *answer_arg)
{
    struct worker *w = t->pool->w;
    struct qnode list, *n, *tmp;

    queue_init(&list);
    QUEUE_FOREACH_SAFE(n, tmp, &l->held) {
        struct msg *m = QUEUE_DATA(n, struct msg, sq);
        if (m->client == NULL || !pick(m, pick_arg))
            continue;
        lease_unhold(t, l, m);
        queue_insert_tail(&list, &m->sq);
    }
    lease_end(t, l, LEASE_END_STORE);
    while ((n = queue_first(&list)) != NULL) {
        struct msg *m = QUEUE_DATA(n, struct msg, sq);
        queue_remove(n);
        m->lease = LEASE_M_NONE;
        if (m->client == NULL) {        /* closed by an answer before it */
            m->state = MSG_DONE;
            msg_release(w, m);
            continue;
        }
        lease_hold_time(t, m);
        STATS_ADD(&t->pool->stats, lease_released_store, 1);
        answer(w, m, answer_arg);
    }
}

/* A reply for every released read: its bytes and the hits it holds (0: as it is). */
struct lease_reply {
    const char *p;
    size_t      len;
    uint32_t    items;
};

static void lease_answer_reply(struct worker *w, struct msg *m, const void *arg)
{
    const struct lease_reply *r = arg;
    if (r->items != 0)
        m->items = r->items;
    m->state = MSG_NEW;
    msg_answer(w, m, r->p, r->len, 0);
}

/* The held reads of l that `pick` chooses get `reply` (items: the hits it holds). */
static void lease_answer_held(struct lease_table *t, struct lease *l,
                              int (*pick)(const struct msg *m, const void *arg),
                              const void *arg, const char *reply, size_t len, uint32_t items)
{
    struct lease_reply r = { reply, len, items };
    lease_release_held(t, l, pick, arg, lease_answer_reply, &r);
}

static void lease_found(struct lease_table *t, struct lease *l, const char *preq, size_t plen,
                        const struct msg *om)
{
    struct lease_same_req q = { preq, plen };
    lease_answer_held(t, l, lease_asked_same, &q, buf_rptr(&om->rsp), buf_len(&om->rsp), 0);
}

/* A re-read's answer: a hit ends the lease (lease_found); a miss, an error or a failure
 * leaves the reads held for the next one. */
static void lease_probe_done(struct msg_watch *wt, struct worker *w, struct msg *om, int ok)
{
    struct lease_table *t = QUEUE_DATA(wt, struct lease_table, probe);
    struct wpool *pool = t->pool;
    const char *key, *req;
    size_t klen, rlen;

    (void)w;
    struct lease *l = lease_recorded(om, &key, &klen, &req, &rlen) == 0
                      ? lease_map_find(&t->map, key, klen) : NULL;
    if (l != NULL && lease_meta(pool)) {
        /* the item stored (no W or Z any more), or gone (deleted, expired): the held
         * reads read the key again, one of them winning the next lease if it is gone */
        struct lease_mg g;
        l->probing = 0;
        if (ok && !(om->flags & (MSG_F_ERROR | MSG_F_RSPLOST))) {
            lease_mg_parse(buf_rptr(&om->rsp), buf_len(&om->rsp), &g);
            if (g.kind == LEASE_MG_VALUE && !g.win && !g.z)
                lease_meta_found(t, l, &g);     /* the value: the held gets get it now */
            else if (g.kind == LEASE_MG_MISS || (g.kind == LEASE_MG_HEAD && !g.win && !g.z))
                lease_end(t, l, LEASE_END_STORE);
        }
    } else if (l != NULL) {
        l->probing = 0;
        if (ok && om->items > 0 && !(om->flags & (MSG_F_ERROR | MSG_F_RSPLOST)) &&
            l->cand == NULL)
            lease_found(t, l, req, rlen, om);
    }
    lease_arm(t);
    wpool_unref(pool);          /* last: it may free the pool, and t with it */
}

/* Due: leases whose ttl passed end (released by timeout), held reads whose client went
 * away are dropped, and each lease whose re-read is due sends one (lease_probe), unless
 * the last one is still out. */
static void lease_timer_cb(uv_timer_t *h)
{
    struct lease_table *t = h->data;
    uint64_t now = uv_now(h->loop);
    struct qnode *n, *tmp, *mn, *mtmp;

    t->due_ms = UINT64_MAX;
    while ((n = queue_first(&t->map.age)) != NULL) {
        struct lease *l = QUEUE_DATA(n, struct lease, age);
        if (l->deadline_ms > now)
            break;
        lease_end(t, l, LEASE_END_TIMEOUT);
    }
    QUEUE_FOREACH_SAFE(n, tmp, &t->map.holding) {
        struct lease *l = QUEUE_DATA(n, struct lease, holding);
        QUEUE_FOREACH_SAFE(mn, mtmp, &l->held) {
            struct msg *m = QUEUE_DATA(mn, struct msg, sq);
            if (m->client == NULL || m->client->eof || m->client->closing) {
                /* Its client closed (or sent its end, and would be kept open until
                 * answered): it is sent now, unfollowed, and answered if still read. */
                lease_unhold(t, l, m);
                STATS_ADD(&t->pool->stats, lease_dropped, 1);
                lease_resend(t, m, LEASE_M_NONE);
            }
        }
        if (l->nheld == 0 || l->probe_ms > now)
            continue;
        lease_probe_next(l, now);
        if (!l->probing && lease_probe(t, l) == 0)
            STATS_ADD(&t->pool->stats, lease_rereads, 1);
    }
    lease_arm(t);
}

/* The servers answered a fleet-wide lease request (or it failed: then the lease is this
 * proxy's). Won: the candidate gets its miss and recomputes. Lost: another proxy's reader
 * recomputes; the candidate is held. */
static void lease_take_done(struct msg_watch *wt, struct worker *w, struct msg *om, int ok)
{
    struct lease_table *t = QUEUE_DATA(wt, struct lease_table, take);
    struct wpool *pool = t->pool;
    const char *key, *req, *r = buf_rptr(&om->rsp);
    size_t klen, rlen, n = buf_len(&om->rsp);
    int won = 1;

    if (ok && !(om->flags & MSG_F_ERROR) &&
        ((n == 12 && memcmp(r, "NOT_STORED\r\n", 12) == 0) ||
         (n == 5 && memcmp(r, "$-1\r\n", 5) == 0) || (n == 3 && memcmp(r, "_\r\n", 3) == 0)))
        won = 0;
    struct lease *l = lease_recorded(om, &key, &klen, &req, &rlen) == 0
                      ? lease_map_find(&t->map, key, klen) : NULL;
    if (l != NULL && l->cand != NULL) {
        struct msg *m = l->cand;
        l->cand = NULL;
        if (m->client == NULL) {
            m->lease = LEASE_M_NONE;
            m->state = MSG_DONE;
            msg_release(w, m);
        } else if (won) {
            STATS_ADD(&pool->stats, leases_won, 1);
            m->lease = LEASE_M_NONE;
            msg_complete(w, m);         /* its miss, kept */
        } else {
            STATS_ADD(&pool->stats, lease_fleet_lost, 1);
            lease_hold(t, l, m, 1, uv_now(&w->loop));
        }
    }
    lease_arm(t);
    wpool_unref(pool);          /* last: it may free the pool, and t with it */
}

static void lease_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

void lease_free(struct wpool *wp)
{
    struct lease_table *t = wp->lease;
    struct qnode *n, *mn;

    if (t == NULL)
        return;
    wp->lease = NULL;
    QUEUE_FOREACH(n, &t->map.age) {
        struct lease *l = QUEUE_DATA(n, struct lease, age);
        if (l->cand != NULL) {
            lease_cand_clear(l->cand);
            queue_insert_tail(&l->held, &l->cand->sq);
            l->nheld++;
            t->nheld++;
            l->cand = NULL;
        }
        while ((mn = queue_first(&l->held)) != NULL) {
            struct msg *m = QUEUE_DATA(mn, struct msg, sq);
            lease_unhold(t, l, m);
            m->lease = LEASE_M_NONE;
            if (m->client == NULL) {
                m->state = MSG_DONE;
                msg_release(wp->w, m);
            } else {
                /* a client of another pool whose key routed here (routes:), and a
                 * reload removed this pool */
                m->state = MSG_NEW;
                msg_fail(wp->w, m, PROTO_ERR_SERVER, "the key's pool was removed");
            }
        }
    }
    lease_map_clear(&t->map);
    if (uv_is_closing((uv_handle_t *)&t->timer))
        free(t);                /* closed with the loop (the worker's end) */
    else
        uv_close((uv_handle_t *)&t->timer, lease_timer_closed);
}

/* ------------------------------------------------------------------ meta: memcached's own leases */

/*
 * leases: {meta: true} (memcached pools): the lease is memcached's. A client's single-key
 * get or gets is read by the proxy as `mg <key> v f c N<s>` (s: ttl_ms in whole seconds,
 * rounded up), which makes memcached vivify a missing key as an empty item and hand the
 * first reader in the whole fleet the win flag W, the others Z:
 *
 *   W          this client won: it gets its miss (END) and recomputes;
 *   Z (no X)   a reader anywhere won: this read is held (as a local lease's), its key
 *              re-read with `mg <key> v f c` until the item is stored (its value
 *              answers the held gets at once), gone, or ttl_ms;
 *   a value    the value in the client's own shape (VALUE key flags bytes [cas]);
 *   Z and X    an item memcached marked stale (md I): its value, as a plain get sees it.
 *
 * The empty item is never a value a client sees through the proxy: the commands that
 * would see it as one (docs/routing.md section 14 lists what memcached answers) are
 * answered as if the key were missing while the proxy knows the item is the empty one
 * (it has the key's lease, and no write of the key is out): replace, append, prepend
 * NOT_STORED; cas, incr, decr, touch NOT_FOUND; gat, gats END; a delete goes and its
 * DELETED is a NOT_FOUND; an add stores over it (`ms <key> <n> F T C<its cas>`). A meta
 * client's mg without N is read with N added and answered in its own shape; its ms in
 * replace/append/prepend mode is NS, its ma NF, its md's HD an NF, its ms in add mode
 * goes with C<its cas> (lease_meta_client_write).
 */

static int lease_meta(const struct wpool *pool)
{
    return pool->cp->leases.meta && pool->cp->protocol == CONF_PROTO_MEMCACHE;
}

/* Whether key can go on a meta command line as it is. */
static int lease_mc_key_ok(const char *key, size_t klen)
{
    if (klen == 0 || klen > 250)
        return 0;
    for (size_t i = 0; i < klen; i++)
        if ((unsigned char)key[i] <= ' ' || (unsigned char)key[i] == 0x7f)
            return 0;
    return 1;
}

/* The connection key's requests go to (its server by the pool's routing), or NULL. */
static struct sconn *lease_read_conn(struct wpool *pool, const char *key, size_t klen,
                                     uint16_t rflags, struct server **srv)
{
    struct worker *w = pool->w;
    struct route_key rk = { .bytes = key, .len = klen };
    struct route rt;
    const char *reason = NULL;

    route_key_place(&pool->view, &rk);
    route_request(&pool->view, &rk, rflags, 1, 0, w->rr, uv_now(&w->loop), &rt);
    if (rt.kind != ROUTE_SEND)
        return NULL;
    *srv = pool->servers[rt.to[0]];
    return server_pick(*srv, rk.hash, rflags, &reason);
}

/* The proxy's own request `line` (command cmd) for key's server, reported to wt, with
 * rec[0..reclen) recorded as its request (lease_recorded): 0, or -1. */
static int lease_own_send_as(struct wpool *pool, const char *key, size_t klen,
                             uint16_t rflags, uint16_t cmd, const char *line, size_t len,
                             const char *rec, size_t reclen, struct msg_watch *wt)
{
    struct worker *w = pool->w;
    struct server *srv;
    struct sconn *s = lease_read_conn(pool, key, klen, rflags, &srv);
    struct msg *om = s != NULL ? msg_get(w) : NULL;

    if (om == NULL)
        return -1;
    size_t before = buf_len(&s->conn.obuf);
    if (buf_append(&s->conn.obuf, line, len) < 0 || lease_record(om, key, klen, rec, reclen) < 0) {
        buf_truncate(&s->conn.obuf, before);
        msg_put(w, om);
        return -1;
    }
    om->role = MSG_OWN;
    om->cmd = cmd;
    om->rflags = rflags;
    om->nkeys = 1;
    om->start_us = worker_now_us(w);
    om->req_bytes = len;
    om->watch = wt;
    wt->keep_reply = 1;
    pool->refs++;               /* the table lives until its answer */
    STATS_ADD(&srv->stats, requests, 1);
    STATS_ADD(&srv->stats, request_bytes, len);
    sconn_enqueue(s, om);
    sconn_mark(w, s);
    return 0;
}

/* The proxy's own meta request `line` for key's server, reported to wt: 0, or -1. */
static int lease_own_send(struct wpool *pool, const char *key, size_t klen, uint16_t rflags,
                          const char *line, size_t len, struct msg_watch *wt)
{
    return lease_own_send_as(pool, key, klen, rflags, MEMCACHE_CMD_MG, line, len, "", 0, wt);
}

/* One client read out as `mg ... N`: its answer comes to lease_meta_done. */
struct lease_mreq {
    struct msg_watch    watch;  /* first: the watch is the request */
    struct lease_table *t;
    struct msg         *m;
};

static void lease_meta_done(struct msg_watch *wt, struct worker *w, struct msg *om, int ok);

/* Whether the mg line p[0..n) (no line end) has a flag token starting with f after its
 * key. */
static int lease_mg_has(const char *p, size_t n, char f)
{
    size_t i = 0;

    for (int tok = 0; i < n; tok++) {
        while (i < n && p[i] == ' ')
            i++;
        if (i < n && tok >= 2 && p[i] == f)
            return 1;
        while (i < n && p[i] != ' ')
            i++;
    }
    return 0;
}

/* Read m's key (recorded) as `mg <key> v f c N<s>` (a client's mg: its own line, with N<s>,
 * and c when it has none); m waits (LEASE_M_META). 0, or -1. */
static int lease_meta_send(struct lease_table *t, struct msg *m)
{
    struct wpool *pool = t->pool;
    const char *key, *req;
    size_t klen, rlen;
    char line[600];
    unsigned secs = (pool->cp->leases.ttl_ms + 999) / 1000;
    int n;

    if (lease_recorded(m, &key, &klen, &req, &rlen) < 0 || !lease_mc_key_ok(key, klen))
        return -1;
    if (m->cmd == MEMCACHE_CMD_MG)
        n = rlen < 500 ? snprintf(line, sizeof(line), "%.*s N%u%s\r\n", (int)rlen, req, secs,
                                  lease_mg_has(req, rlen, 'c') ? "" : " c") : -1;
    else
        n = snprintf(line, sizeof(line), "mg %.*s v f c N%u\r\n", (int)klen, key, secs);
    struct lease_mreq *mr = calloc(1, sizeof(*mr));
    if (n <= 0 || (size_t)n >= sizeof(line) || mr == NULL) {
        free(mr);
        return -1;
    }
    mr->watch.done = lease_meta_done;
    mr->t = t;
    mr->m = m;
    if (lease_own_send(pool, key, klen, m->rflags, line, (size_t)n, &mr->watch) < 0) {
        free(mr);
        return -1;
    }
    m->state = MSG_SENT;        /* owed an answer, by lease_meta_done */
    m->sconn = NULL;
    m->server = NULL;
    m->items = 0;
    m->lease = LEASE_M_META;
    m->flags &= (uint16_t)~MSG_F_STAGED;
    return 0;
}

/* Answer m (waiting, in no queue) with p[0..n). */
static void lease_answer(struct worker *w, struct msg *m, const char *p, size_t n, int error)
{
    m->lease = LEASE_M_NONE;
    m->state = MSG_NEW;
    msg_answer(w, m, p, n, error);
}

/*
 * A client's mg (its line line[0..ll)) answered from the reply p[0..n) to it with N<s>
 * (and c): `miss`: as memcached answers that mg on a missing key (EN with the O and k
 * flags it asked for); else the reply, less the W and Z the proxy's N brought and the c
 * the proxy added.
 */
static void lease_mg_client(struct worker *w, struct msg *m, const char *line, size_t ll,
                            const char *p, size_t n, int miss)
{
    size_t hl = 0, i = 0;
    int added_c = !lease_mg_has(line, ll, 'c');
    struct buf out;

    while (hl + 1 < n && !(p[hl] == '\r' && p[hl + 1] == '\n'))
        hl++;
    buf_init(&out);
    int rc = buf_append_str(&out, miss ? "EN" : "");
    for (int tok = 0; rc == 0 && i < hl; tok++) {
        while (i < hl && p[i] == ' ')
            i++;
        size_t b = i;
        while (i < hl && p[i] != ' ')
            i++;
        if (i == b)
            break;
        char f = p[b];
        int lease_flag = (i - b == 1 && (f == 'W' || f == 'Z')) || (added_c && f == 'c');
        int keep = miss ? tok >= 1 && (f == 'O' || f == 'k')
                        : tok == 0 || (tok == 1 && memcmp(p, "VA", 2) == 0) || !lease_flag;
        if (keep && (out.wpos > out.rpos ? buf_append(&out, " ", 1) : 0) == 0)
            rc = buf_append(&out, p + b, i - b);
    }
    if (rc == 0)
        rc = buf_append(&out, p + hl, miss ? 2 : n - hl);     /* \r\n, and any value */
    if (rc < 0) {
        buf_free(&out);
        m->lease = LEASE_M_NONE;
        m->state = MSG_NEW;
        msg_fail(w, m, PROTO_ERR_NOMEM, "out of memory");
        return;
    }
    if (!miss && memcmp(p, "VA", 2) == 0)
        m->items = 1;
    lease_answer(w, m, buf_rptr(&out), buf_len(&out), 0);
    buf_free(&out);
}

/* Answer m (a get or gets of key, waiting in no queue) with the value g read, in the
 * client's shape: VALUE <key> <flags> <bytes> [<cas>], the value, END. */
static void lease_meta_value(struct worker *w, struct msg *m, const char *key, size_t klen,
                             const struct lease_mg *g)
{
    char hdr[360];
    int hn = m->cmd == MEMCACHE_CMD_GETS
             ? snprintf(hdr, sizeof(hdr), "VALUE %.*s %" PRIu64 " %zu %" PRIu64 "\r\n",
                        (int)klen, key, g->flags, g->dlen, g->cas)
             : snprintf(hdr, sizeof(hdr), "VALUE %.*s %" PRIu64 " %zu\r\n", (int)klen, key,
                        g->flags, g->dlen);
    struct client *c = m->client;
    m->lease = LEASE_M_NONE;
    m->state = MSG_NEW;
    m->items = 1;
    size_t before = buf_len(&m->rsp);
    if (hn <= 0 || (size_t)hn >= sizeof(hdr) || buf_append(&m->rsp, hdr, (size_t)hn) < 0 ||
        buf_append(&m->rsp, g->data, g->dlen) < 0 ||
        buf_append_str(&m->rsp, "\r\nEND\r\n") < 0) {
        buf_truncate(&m->rsp, before);
        msg_fail(w, m, PROTO_ERR_NOMEM, "out of memory");
        return;
    }
    if (!c->closing && !(m->flags & MSG_F_NOREPLY))
        c->held_bytes += buf_len(&m->rsp) - before;
    else
        buf_truncate(&m->rsp, before);
    msg_charge(m);
    msg_complete(w, m);
}

/* The key and the value a meta re-read found, for each held get (lease_meta_value). */
struct lease_meta_hit {
    const char            *key;
    size_t                 klen;
    const struct lease_mg *g;
};

static int lease_is_get_or_gets(const struct msg *m, const void *arg)
{
    (void)arg;
    return m->cmd == MEMCACHE_CMD_GET || m->cmd == MEMCACHE_CMD_GETS;
}

static void lease_answer_meta(struct worker *w, struct msg *m, const void *arg)
{
    const struct lease_meta_hit *h = arg;
    lease_meta_value(w, m, h->key, h->klen, h->g);
}

/*
 * meta: a re-read (`mg <key> v f c`) found l's key stored: its held gets and getses get
 * the value at once, in their shape; the others (a client's mg) read it again.
 */
static void lease_meta_found(struct lease_table *t, struct lease *l, const struct lease_mg *g)
{
    char key[256];
    struct lease_meta_hit h = { key, RL_MIN(l->node.klen, sizeof(key)), g };
    memcpy(key, l->key, h.klen);        /* l goes with the lease's end */
    lease_release_held(t, l, lease_is_get_or_gets, NULL, lease_answer_meta, &h);
}

/* What m's `mg ... N` said, in m's own terms (see above). */
static void lease_meta_answer(struct lease_table *t, struct msg *m, const struct msg *om)
{
    struct wpool *pool = t->pool;
    struct worker *w = pool->w;
    const struct conf_leases *cl = &pool->cp->leases;
    const char *p = buf_rptr(&om->rsp), *key, *req;
    size_t n = buf_len(&om->rsp), klen, rlen;
    struct lease_mg g;
    uint64_t now = uv_now(&w->loop);

    if (lease_recorded(m, &key, &klen, &req, &rlen) < 0) {
        lease_answer(w, m, "SERVER_ERROR lease read lost\r\n", 30, 1);
        return;
    }
    lease_mg_parse(p, n, &g);
    struct lease *l = lease_map_find(&t->map, key, klen);
    if (g.kind == LEASE_MG_OTHER) {     /* an error line: the client's, as it is */
        if (om->flags & MSG_F_ERROR)
            lease_answer(w, m, p, n, 1);
        else
            lease_answer(w, m, "SERVER_ERROR unexpected reply to a lease read\r\n", 47, 1);
        return;
    }
    int mg = m->cmd == MEMCACHE_CMD_MG;
    if (g.kind == LEASE_MG_MISS || (!mg && g.kind != LEASE_MG_VALUE)) {
        if (mg)
            lease_answer(w, m, p, n, 0);        /* the client's own EN */
        else
            lease_answer(w, m, "END\r\n", 5, 0);
        return;
    }
    if (g.win) {                        /* this client recomputes */
        if (l == NULL && t->map.keys.n < cl->max_waiters)
            l = lease_map_add(&t->map, key, klen, now + cl->ttl_ms);
        if (l != NULL)
            l->pcas = g.cas;
        STATS_ADD(&pool->stats, leases_won, 1);
        if (mg)
            lease_mg_client(w, m, req, rlen, p, n, 1);
        else
            lease_answer(w, m, "END\r\n", 5, 0);
        return;
    }
    if (g.z && !g.stale) {              /* a reader somewhere recomputes: wait for it */
        if (l == NULL && t->map.keys.n < cl->max_waiters)
            l = lease_map_add(&t->map, key, klen, now + cl->ttl_ms);
        if (l != NULL)
            l->pcas = g.cas;
        if (m->client->eof || m->client->closing || l == NULL ||
            t->nheld >= cl->max_waiters) {
            if (m->client->eof || m->client->closing)
                STATS_ADD(&pool->stats, lease_dropped, 1);
            else
                STATS_ADD(&pool->stats, lease_overflow, 1);
            if (mg)
                lease_mg_client(w, m, req, rlen, p, n, 1);
            else
                lease_answer(w, m, "END\r\n", 5, 0);
        } else {
            lease_hold(t, l, m, 1, now);
        }
        return;
    }
    if (mg) {                           /* its own reply, less the c the proxy added */
        lease_mg_client(w, m, req, rlen, p, n, 0);
        if (l != NULL && !g.z)
            lease_end(t, l, LEASE_END_STORE);
        return;
    }
    lease_meta_value(w, m, key, klen, &g);
    if (l != NULL && !g.z)              /* stored where this proxy did not see */
        lease_end(t, l, LEASE_END_STORE);
}

static void lease_meta_done(struct msg_watch *wt, struct worker *w, struct msg *om, int ok)
{
    struct lease_mreq *mr = (struct lease_mreq *)(void *)wt;
    struct lease_table *t = mr->t;
    struct msg *m = mr->m;
    struct wpool *pool = t->pool;

    free(mr);
    if (m->client == NULL) {            /* its client closed while it was out */
        m->lease = LEASE_M_NONE;
        m->state = MSG_DONE;
        msg_release(w, m);
    } else if (!ok || (om->flags & MSG_F_RSPLOST)) {
        m->lease = LEASE_M_NONE;
        m->state = MSG_NEW;
        msg_fail(w, m, PROTO_ERR_SERVER, "no reply to the lease read");
    } else {
        lease_meta_answer(t, m, om);
    }
    lease_arm(t);
    wpool_unref(pool);          /* last: it may free the pool, and t with it */
}

/* meta: a single-key get or gets. Held at once while its key has a lease here, else read
 * as `mg ... N`. STAGE_PASS (as without leases) when it cannot be. */
static enum stage_verdict lease_meta_read(struct stage_req *r)
{
    struct msg *m = r->m;
    struct wpool *pool = r->pool;
    const struct conf_leases *cl = &pool->cp->leases;

    if ((m->flags & MSG_F_NOREPLY) || m->client == NULL || m->client->eof ||
        !lease_mc_key_ok(r->rk[0].bytes, r->rk[0].len))
        return STAGE_PASS;
    size_t ll = 0;
    if (r->req->cmd == MEMCACHE_CMD_MG) {       /* its line, less its end */
        ll = r->req->hdr_len;
        while (ll > 0 && (r->buf[ll - 1] == '\n' || r->buf[ll - 1] == '\r'))
            ll--;
        if (lease_mg_has(r->buf, ll, 'b') || memchr(r->buf, '\0', ll) != NULL)
            return STAGE_PASS;                  /* a base64 key: not read by the proxy */
    }
    struct lease_table *t = lease_table_get(pool);
    if (t == NULL || lease_record(m, r->rk[0].bytes, r->rk[0].len, r->buf, ll) < 0)
        return STAGE_PASS;
    struct lease *l = t->map.keys.n > 0 ? lease_map_find(&t->map, r->rk[0].bytes, r->rk[0].len)
                                   : NULL;
    if (l != NULL && t->nheld < cl->max_waiters) {
        lease_hold(t, l, m, 1, uv_now(&pool->w->loop));
        lease_arm(t);
        return STAGE_TAKEN;
    }
    if (lease_meta_send(t, m) < 0)
        return STAGE_PASS;
    return STAGE_TAKEN;
}

/* meta: a command that would see the vivified item as a value, answered as if the key
 * were missing while this proxy knows the item is the empty one. */
static enum stage_verdict lease_meta_local(struct stage_req *r, const char *ans, size_t n)
{
    struct lease_table *t = r->pool->lease;
    struct lease *l = t != NULL && t->map.keys.n > 0
                      ? lease_map_find(&t->map, r->rk[0].bytes, r->rk[0].len) : NULL;

    if (l == NULL || l->pcas == 0 || l->storing)
        return STAGE_PASS;
    msg_answer(r->c->w, r->m, ans, n, 0);
    return STAGE_TAKEN;
}

/* The tokens of the line p[0..n) (to its end): up to max, their offsets and lengths;
 * the count, or max + 1 when there are more. */
static int lease_tokens(const char *p, size_t n, size_t *tb, size_t *tl, int max)
{
    size_t i = 0;
    int nt = 0;

    while (i < n && p[i] != '\r' && p[i] != '\n') {
        while (i < n && p[i] == ' ')
            i++;
        size_t b = i;
        while (i < n && p[i] != ' ' && p[i] != '\r' && p[i] != '\n')
            i++;
        if (i == b)
            break;
        if (nt == max)
            return max + 1;
        tb[nt] = b;
        tl[nt++] = i - b;
    }
    return nt;
}

#define LEASE_META_TOKENS 24
#define LEASE_SET_KEEP_MAX 65536u       /* a set's value kept to answer held gets */

/*
 * meta: a meta client's write (ms, md, ma) of a key whose empty item this proxy knows.
 * Its flags must be ones the proxy can answer for (the O and k it echoes, c, and the ms
 * F, T, M; md none else; ma D and M): else it goes as it is (a meta client that sends
 * q, b, I, N, C, ... speaks memcached's leases itself). An ms in replace, append or
 * prepend mode is answered NS, an ma NF, as on a missing key, with the flags memcached
 * echoes (O, k, and c as c0). An ms in add mode and an md are left to the write hook.
 */
static enum stage_verdict lease_meta_client_write(struct stage_req *r)
{
    const char *p = r->buf;
    size_t tb[LEASE_META_TOKENS], tl[LEASE_META_TOKENS];
    int nt = lease_tokens(p, r->req->hdr_len, tb, tl, LEASE_META_TOKENS);
    uint16_t cmd = r->req->cmd;
    int first = cmd == MEMCACHE_CMD_MS ? 3 : 2;     /* ms <key> <datalen> <flags> */
    char mode = 'S';

    if (nt > LEASE_META_TOKENS || nt < first)
        return STAGE_PASS;
    for (int i = first; i < nt; i++) {
        char f = p[tb[i]];
        if (f == 'O' || f == 'k')
            continue;
        if (cmd == MEMCACHE_CMD_MS && (f == 'c' || f == 'F' || f == 'T'))
            continue;
        if (cmd == MEMCACHE_CMD_MS && f == 'M' && tl[i] == 2) {
            mode = (char)(p[tb[i] + 1] & ~0x20);        /* upper case */
            continue;
        }
        if (cmd == MEMCACHE_CMD_MA && (f == 'D' || f == 'M'))
            continue;
        return STAGE_PASS;
    }
    if (cmd == MEMCACHE_CMD_MD || (cmd == MEMCACHE_CMD_MS && (mode == 'S' || mode == 'E')))
        return STAGE_PASS;
    if (cmd == MEMCACHE_CMD_MS && mode != 'R' && mode != 'A' && mode != 'P')
        return STAGE_PASS;
    char ans[600];
    size_t an = 0;
    memcpy(ans, cmd == MEMCACHE_CMD_MS ? "NS" : "NF", 2);
    an = 2;
    for (int i = first; i < nt; i++) {
        char f = p[tb[i]];
        if (f != 'O' && f != 'k' && f != 'c')
            continue;
        size_t need = f == 'k' ? 2 + r->rk[0].len : f == 'c' ? 3 : 1 + tl[i];
        if (an + need + 2 > sizeof(ans))
            return STAGE_PASS;
        ans[an++] = ' ';
        if (f == 'k') {
            ans[an++] = 'k';
            memcpy(ans + an, r->rk[0].bytes, r->rk[0].len);
            an += r->rk[0].len;
        } else if (f == 'c') {
            memcpy(ans + an, "c0", 2);
            an += 2;
        } else {
            memcpy(ans + an, p + tb[i], tl[i]);
            an += tl[i];
        }
    }
    memcpy(ans + an, "\r\n", 2);
    return lease_meta_local(r, ans, an + 2);
}

/*
 * meta: a multi-key get or gets (never held, never a lease) is read as one
 * `mg <key> v f c` per key, without N, and answered as memcached answers it when no lease
 * exists: the keys whose item is memcached's empty one (W or Z without X) are missing.
 */
#define LEASE_MGET_MAX 64

struct lease_mget;
struct lease_mget_key {
    struct msg_watch   watch;   /* first: the watch is the key's read */
    struct lease_mget *g;
    struct buf         rsp;
    int                ok;
};

struct lease_mget {
    struct lease_table   *t;
    struct msg           *m;
    uint32_t              n, pending;
    struct lease_mget_key k[];
};

/* Every key's read is back (or failed): m's answer, and g goes. */
static void lease_mget_finish(struct lease_mget *g)
{
    struct worker *w = g->t->pool->w;
    struct msg *m = g->m;
    const char *err = NULL;
    size_t errn = 0;
    struct buf out;
    int failed = 0;

    buf_init(&out);
    for (uint32_t i = 0; i < g->n && m->client != NULL; i++) {
        struct lease_mget_key *k = &g->k[i];
        const char *key, *req;
        size_t klen, rlen;
        struct lease_mg mg;
        if (!k->ok) {
            failed = 1;
            break;
        }
        lease_mg_parse(buf_rptr(&k->rsp), buf_len(&k->rsp), &mg);
        if (mg.kind == LEASE_MG_OTHER) {
            err = buf_rptr(&k->rsp);
            errn = buf_len(&k->rsp);
            break;
        }
        if (mg.kind != LEASE_MG_VALUE || ((mg.win || mg.z) && !mg.stale))
            continue;                   /* missing, or the empty item */
        /* the key: the request recorded each, in order, as "<klen><key>" */
        if (lease_recorded(m, &key, &klen, &req, &rlen) < 0) {
            failed = 1;
            break;
        }
        size_t off = 0;
        for (uint32_t j = 0; j < i && off + 1 <= rlen; j++)
            off += 1 + (unsigned char)req[off];
        if (off >= rlen || off + 1 + (unsigned char)req[off] > rlen) {
            failed = 1;
            break;
        }
        char hdr[360];
        int hn = m->cmd == MEMCACHE_CMD_GETS
                 ? snprintf(hdr, sizeof(hdr), "VALUE %.*s %" PRIu64 " %zu %" PRIu64 "\r\n",
                            (int)(unsigned char)req[off], req + off + 1, mg.flags, mg.dlen,
                            mg.cas)
                 : snprintf(hdr, sizeof(hdr), "VALUE %.*s %" PRIu64 " %zu\r\n",
                            (int)(unsigned char)req[off], req + off + 1, mg.flags, mg.dlen);
        if (hn <= 0 || (size_t)hn >= sizeof(hdr) || buf_append(&out, hdr, (size_t)hn) < 0 ||
            buf_append(&out, mg.data, mg.dlen) < 0 || buf_append_str(&out, "\r\n") < 0) {
            failed = 1;
            break;
        }
        m->items++;
    }
    if (m->client == NULL) {
        m->lease = LEASE_M_NONE;
        m->state = MSG_DONE;
        msg_release(w, m);
    } else if (failed) {
        m->lease = LEASE_M_NONE;
        m->state = MSG_NEW;
        msg_fail(w, m, PROTO_ERR_SERVER, "no reply to a read of the multi-key get");
    } else if (err != NULL) {
        lease_answer(w, m, err, errn, 1);
    } else if (buf_append_str(&out, "END\r\n") < 0) {
        m->lease = LEASE_M_NONE;
        m->state = MSG_NEW;
        msg_fail(w, m, PROTO_ERR_NOMEM, "out of memory");
    } else {
        lease_answer(w, m, buf_rptr(&out), buf_len(&out), 0);
    }
    buf_free(&out);
    for (uint32_t i = 0; i < g->n; i++)
        buf_free(&g->k[i].rsp);
    free(g);
}

static void lease_mget_done(struct msg_watch *wt, struct worker *w, struct msg *om, int ok)
{
    struct lease_mget_key *k = (struct lease_mget_key *)(void *)wt;
    struct lease_mget *g = k->g;
    struct wpool *pool = g->t->pool;

    (void)w;
    k->ok = ok && !(om->flags & MSG_F_RSPLOST) &&
            buf_append(&k->rsp, buf_rptr(&om->rsp), buf_len(&om->rsp)) == 0;
    if (--g->pending == 0)
        lease_mget_finish(g);
    wpool_unref(pool);          /* last: it may free the pool */
}

static enum stage_verdict lease_meta_mget(struct stage_req *r)
{
    struct msg *m = r->m;
    struct wpool *pool = r->pool;
    uint32_t n = r->req->nkeys;
    size_t rec = 0;

    if (n > LEASE_MGET_MAX || (m->flags & MSG_F_NOREPLY) || m->client == NULL ||
        m->client->eof)
        return STAGE_PASS;
    for (uint32_t i = 0; i < n; i++) {
        if (!lease_mc_key_ok(r->rk[i].bytes, r->rk[i].len))
            return STAGE_PASS;
        rec += 1 + r->rk[i].len;
    }
    struct lease_table *t = lease_table_get(pool);
    struct lease_mget *g = t != NULL ? calloc(1, sizeof(*g) + n * sizeof(g->k[0])) : NULL;
    char *keys = g != NULL ? malloc(rec) : NULL;
    if (keys == NULL) {
        free(g);
        return STAGE_PASS;
    }
    /* each key, in order, as "<klen><key>" (a key is at most 250 bytes) */
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        keys[off] = (char)(unsigned char)r->rk[i].len;
        memcpy(keys + off + 1, r->rk[i].bytes, r->rk[i].len);
        off += 1 + r->rk[i].len;
    }
    int recorded = lease_record(m, r->rk[0].bytes, r->rk[0].len, keys, rec);
    free(keys);
    if (recorded < 0) {
        free(g);
        return STAGE_PASS;
    }
    g->t = t;
    g->m = m;
    g->n = n;
    g->pending = n;
    m->state = MSG_SENT;        /* owed an answer, by lease_mget_finish */
    m->sconn = NULL;
    m->server = NULL;
    m->items = 0;
    m->lease = LEASE_M_META;
    for (uint32_t i = 0; i < n; i++) {
        struct lease_mget_key *k = &g->k[i];
        char line[300];
        int ln = snprintf(line, sizeof(line), "mg %.*s v f c\r\n", (int)r->rk[i].len,
                          r->rk[i].bytes);
        k->watch.done = lease_mget_done;
        k->g = g;
        buf_init(&k->rsp);
        if (ln <= 0 || (size_t)ln >= sizeof(line) ||
            lease_own_send(pool, r->rk[i].bytes, r->rk[i].len, m->rflags, line, (size_t)ln,
                           &k->watch) < 0) {
            /* the rest are not sent: they count as failed; the sent ones finish it */
            g->pending -= n - i;
            if (g->pending == 0)
                lease_mget_finish(g);
            return STAGE_TAKEN;
        }
    }
    return STAGE_TAKEN;
}

static enum stage_verdict lease_meta_request(struct stage_req *r)
{
    if (r->req->nkeys > 1 && r->m->db == 0 && r->pool->cp->leases.ttl_ms > 0 &&
        (r->req->cmd == MEMCACHE_CMD_GET || r->req->cmd == MEMCACHE_CMD_GETS))
        return lease_meta_mget(r);
    if (r->req->nkeys != 1 || r->m->db != 0 || r->pool->cp->leases.ttl_ms == 0)
        return STAGE_PASS;
    switch (r->req->cmd) {
    case MEMCACHE_CMD_GET:
    case MEMCACHE_CMD_GETS:
        return lease_meta_read(r);
    case MEMCACHE_CMD_MG:
        return r->pool->ops->collapsible(r->req, r->buf) ? lease_meta_read(r) : STAGE_PASS;
    case MEMCACHE_CMD_REPLACE:
    case MEMCACHE_CMD_APPEND:
    case MEMCACHE_CMD_PREPEND:
        return lease_meta_local(r, "NOT_STORED\r\n", 12);
    case MEMCACHE_CMD_CAS:
    case MEMCACHE_CMD_INCR:
    case MEMCACHE_CMD_DECR:
    case MEMCACHE_CMD_TOUCH:
        return lease_meta_local(r, "NOT_FOUND\r\n", 11);
    case MEMCACHE_CMD_GAT:
    case MEMCACHE_CMD_GATS:
        return lease_meta_local(r, "END\r\n", 5);
    case MEMCACHE_CMD_MS:
    case MEMCACHE_CMD_MA:
        return r->pool->lease != NULL && r->pool->lease->map.keys.n > 0
               ? lease_meta_client_write(r) : STAGE_PASS;
    default:
        return STAGE_PASS;
    }
}

/*
 * A meta client's ms in add mode (ME) or md of the key's empty item, its header just
 * written to s from `before`, flags as lease_meta_client_write accepts them: the ms goes
 * with C<the item's cas> in place of its mode (its EX or NF is then the NS an add gets);
 * the md goes as it is, its HD answered NF (the empty item goes, the held reads read
 * again).
 */
static int lease_meta_client_write_out(struct stage_req *r, struct lease *l, struct sconn *s,
                                       size_t before)
{
    struct msg *m = r->m;
    struct buf *out = &s->conn.obuf;
    const char *p = buf_rptr(out) + before;
    size_t n = buf_len(out) - before;
    size_t tb[LEASE_META_TOKENS], tl[LEASE_META_TOKENS];
    int nt = lease_tokens(p, n, tb, tl, LEASE_META_TOKENS);
    int ms = r->req->cmd == MEMCACHE_CMD_MS, first = ms ? 3 : 2, mode_at = -1;

    if (nt > LEASE_META_TOKENS || nt < first)
        return 0;
    for (int i = first; i < nt; i++) {
        char f = p[tb[i]];
        if (f == 'O' || f == 'k')
            continue;
        if (ms && (f == 'c' || f == 'F' || f == 'T'))
            continue;
        if (ms && f == 'M' && tl[i] == 2 && (p[tb[i] + 1] & ~0x20) == 'E') {
            mode_at = i;
            continue;
        }
        return 0;               /* a flag the proxy does not answer for: as it is */
    }
    if (lease_record(m, r->rk[0].bytes, r->rk[0].len, "", 0) < 0)
        return 0;
    if (!ms) {
        m->lease = LEASE_M_DEL;
        m->flags |= MSG_F_STAGED;
        return 0;
    }
    if (mode_at < 0)
        return 0;               /* a set: it stores over the empty item as it is */
    char hdr[600];
    int hn = snprintf(hdr, sizeof(hdr), "%.*sC%" PRIu64 "%.*s", (int)tb[mode_at], p, l->pcas,
                      (int)(n - tb[mode_at] - tl[mode_at]), p + tb[mode_at] + tl[mode_at]);
    if (hn <= 0 || (size_t)hn >= sizeof(hdr))
        return 0;
    buf_truncate(out, before);
    if (buf_append(out, hdr, (size_t)hn) < 0)
        return -ENOMEM;
    m->lease = LEASE_M_ADD;
    m->flags |= MSG_F_STAGED;
    return 0;
}

/*
 * meta: the header of an add or a delete of a key whose vivified item this proxy knows
 * (its lease, no write out) was written to s. An add goes as `ms <key> <bytes> F<flags>
 * T<exptime> C<the item's cas>` (memcached's add fails on the item; this stores over it
 * unless someone stored first); a delete goes as it is, its DELETED answered NOT_FOUND.
 */
static int lease_meta_write(struct stage_req *r, struct msg *wm, struct sconn *s, size_t before)
{
    struct msg *m = r->m;
    struct lease_table *t = r->pool->lease;
    uint16_t cmd = r->req->cmd;

    if (wm != m || m->role != MSG_REQUEST || t == NULL || t->map.keys.n == 0 || r->rk == NULL ||
        r->req->nkeys != 1 || (m->flags & MSG_F_NOREPLY) || m->db != 0 ||
        (cmd != MEMCACHE_CMD_ADD && cmd != MEMCACHE_CMD_DELETE && cmd != MEMCACHE_CMD_MS &&
         cmd != MEMCACHE_CMD_MD))
        return 0;
    struct lease *l = lease_map_find(&t->map, r->rk[0].bytes, r->rk[0].len);
    if (l == NULL || l->pcas == 0 || l->storing)
        return 0;
    if (cmd == MEMCACHE_CMD_MS || cmd == MEMCACHE_CMD_MD)
        return lease_meta_client_write_out(r, l, s, before);
    if (cmd == MEMCACHE_CMD_DELETE) {
        if (lease_record(m, r->rk[0].bytes, r->rk[0].len, "", 0) < 0)
            return 0;
        m->lease = LEASE_M_DEL;
        m->flags |= MSG_F_STAGED;
        return 0;
    }
    /* add <key> <flags> <exptime> <bytes>\r\n */
    struct buf *out = &s->conn.obuf;
    const char *p = buf_rptr(out) + before;
    size_t tb[5], tl[5];
    if (lease_tokens(p, buf_len(out) - before, tb, tl, 5) != 5)
        return 0;               /* not the plain form: sent as it is */
    char hdr[400];
    int hn = snprintf(hdr, sizeof(hdr), "ms %.*s %.*s F%.*s T%.*s C%" PRIu64 "\r\n",
                      (int)tl[1], p + tb[1], (int)tl[4], p + tb[4], (int)tl[2], p + tb[2],
                      (int)tl[3], p + tb[3], l->pcas);
    if (hn <= 0 || (size_t)hn >= sizeof(hdr) ||
        lease_record(m, r->rk[0].bytes, r->rk[0].len, "add", 3) < 0)
        return 0;
    buf_truncate(out, before);
    if (buf_append(out, hdr, (size_t)hn) < 0)
        return -ENOMEM;
    m->cmd = MEMCACHE_CMD_MS;   /* its reply is an ms reply (translated at lease_reply) */
    m->lease = LEASE_M_ADD;
    m->flags |= MSG_F_STAGED;
    return 0;
}

/* m's reply, p[0..n), replaced by the client's own. */
static void lease_rsp_set(struct msg *m, const char *p, size_t n)
{
    struct client *c = m->client;

    if (c != NULL)
        c->held_bytes -= RL_MIN(c->held_bytes, buf_len(&m->rsp));
    m->rsp.rpos = m->rsp.wpos = 0;
    if (buf_append(&m->rsp, p, n) == 0 && c != NULL)
        c->held_bytes += n;
}

/* Whether m, an add of the empty item sent as ms, was a meta client's ms (else a text
 * add: lease_meta_write records "add"). */
static int lease_meta_was_ms(const struct msg *m)
{
    const char *key, *req;
    size_t klen, rlen;

    return lease_recorded(m, &key, &klen, &req, &rlen) == 0 && rlen == 0;
}

/* An add sent as ms, or a delete of the vivified item, is answered: in the client's terms. */
static void lease_meta_write_reply(struct msg *m)
{
    const char *p = buf_rptr(&m->rsp);
    size_t n = buf_len(&m->rsp);

    if (m->lease == LEASE_M_ADD && lease_meta_was_ms(m)) {
        /* a meta client's ME sent with C: EX (stored first) and NF (gone) are its NS */
        if (n >= 4 && (memcmp(p, "EX", 2) == 0 || memcmp(p, "NF", 2) == 0) &&
            (p[2] == ' ' || p[2] == '\r')) {
            char tmp[600];
            if (n <= sizeof(tmp)) {
                memcpy(tmp, p, n);
                memcpy(tmp, "NS", 2);
                lease_rsp_set(m, tmp, n);
            }
        }
        return;
    }
    if (m->cmd == MEMCACHE_CMD_MD) {
        if (n >= 4 && memcmp(p, "HD", 2) == 0 && (p[2] == ' ' || p[2] == '\r')) {
            char tmp[600];
            if (n <= sizeof(tmp)) {
                memcpy(tmp, p, n);
                memcpy(tmp, "NF", 2);
                lease_rsp_set(m, tmp, n);
            }
        }
        return;
    }
    if (m->lease == LEASE_M_ADD) {
        m->cmd = MEMCACHE_CMD_ADD;
        if (n == 4 && memcmp(p, "HD\r\n", 4) == 0)
            lease_rsp_set(m, "STORED\r\n", 8);
        else if (n == 4 && (memcmp(p, "NS\r\n", 4) == 0 || memcmp(p, "EX\r\n", 4) == 0 ||
                            memcmp(p, "NF\r\n", 4) == 0))
            lease_rsp_set(m, "NOT_STORED\r\n", 12);
    } else if (n == 9 && memcmp(p, "DELETED\r\n", 9) == 0) {
        lease_rsp_set(m, "NOT_FOUND\r\n", 11);
    }
}

/* ------------------------------------------------------------------ collapse_gets */

/*
 * m, a read that leads identical gets (collapse.c), missed: its followers would each get
 * a copy of the miss, and each recompute. They are held on l instead (they were
 * recorded as m was, before collapse joined them), or, past max_waiters, answered with
 * the miss now.
 */
static void lease_take_followers(struct lease_table *t, struct lease *l, struct msg *m,
                                 uint64_t now_ms)
{
    struct worker *w = t->pool->w;
    uint32_t max = t->pool->cp->leases.max_waiters;

    if (!(m->flags & MSG_F_LEADER))
        return;
    struct msg *f = m->waiters;
    m->waiters = NULL;
    m->flags &= (uint16_t)~MSG_F_LEADER;
    while (f != NULL) {
        struct msg *next = f->waiters;
        f->waiters = NULL;
        f->flags &= (uint16_t)~MSG_F_FOLLOWER;
        if (f->client != NULL && f->lease == LEASE_M_READ && t->nheld < max) {
            lease_hold(t, l, f, 1, now_ms);
        } else {
            if (f->client != NULL && f->lease == LEASE_M_READ)
                STATS_ADD(&t->pool->stats, lease_overflow, 1);
            f->lease = LEASE_M_NONE;
            f->state = MSG_NEW;
            msg_answer(w, f, buf_rptr(&m->rsp), buf_len(&m->rsp), 0);
        }
        f = next;
    }
}

/* ------------------------------------------------------------------ the stage */

static int lease_wanted(const struct conf_pool *cp, const struct conf_global *g)
{
    (void)g;
    return cp->leases.ttl_ms > 0;
}

/*
 * lease_prefix: the lease keys are the proxy's. A client's command that names one (any of
 * its keys, in any command: a read would show the proxy's token, a write or a delete would
 * take or drop another reader's lease) is refused with the protocol's client error,
 * counted in refused_commands. Commands inside a pinned session (MULTI, WATCH, blocking)
 * pass no stage and are not refused (docs/routing.md section 14).
 */
static enum stage_verdict lease_prefix_request(struct stage_req *r)
{
    const char *prefix = r->pool->cp->leases.prefix;
    size_t pl;

    if (prefix[0] == 0 || r->rk == NULL)
        return STAGE_PASS;
    pl = strlen(prefix);
    for (uint32_t k = 0; k < r->req->nkeys; k++) {
        if (r->rk[k].len < pl || memcmp(r->rk[k].bytes, prefix, pl) != 0)
            continue;
        static const char mc[] = "CLIENT_ERROR key is reserved for the proxy's leases "
                                 "(lease_prefix)\r\n";
        static const char rd[] = "-ERR key is reserved for the proxy's leases "
                                 "(lease_prefix)\r\n";
        int redis = r->pool->cp->protocol == CONF_PROTO_REDIS;
        STATS_ADD(&r->c->pool->stats, refused_commands, 1);
        msg_answer(r->c->w, r->m, redis ? rd : mc, redis ? sizeof(rd) - 1 : sizeof(mc) - 1, 1);
        return STAGE_TAKEN;
    }
    return STAGE_PASS;
}

static enum stage_verdict lease_stage_request(struct stage_req *r)
{
    if (r->rk == NULL)
        return STAGE_PASS;
    if (r->pool->cp->leases.prefix[0] != 0)
        return lease_prefix_request(r);
    if (lease_meta(r->pool))
        return lease_meta_request(r);
    return STAGE_PASS;
}

/*
 * A single-key read (the protocol's collapsible get: memcached get, gets, mg without
 * N, R, q, T; Redis GET) just written to s. Its key and bytes are recorded; while its
 * key has a lease it is held (taken: the bytes are dropped), else it goes, followed
 * (lease_reply). Reads a lease never holds: noreply, a session's (they never reach the
 * write hook), a multi-key get's fragments (neither), a warm-up ask, a cluster pool's.
 */
static int lease_stage_write(struct stage_req *r, struct msg *wm, struct sconn *s,
                             size_t before)
{
    struct msg *m = r->m;
    struct wpool *pool = r->pool;
    const struct conf_leases *cl = &pool->cp->leases;

    if (lease_meta(pool))               /* its reads were taken by the request hook */
        return lease_meta_write(r, wm, s, before);
    /* a read in a database SELECT chose is not held: a lease is a key of the pool's own */
    if (wm != m || m->role != MSG_REQUEST || m->warm != MSG_WARM_NONE || pool->retain_req ||
        m->db != 0 ||
        (m->flags & MSG_F_NOREPLY) || m->client == NULL || m->client->eof || cl->ttl_ms == 0 ||
        pool->ops->collapsible == NULL || !pool->ops->collapsible(r->req, r->buf))
        return 0;
    struct lease_table *t = lease_table_get(pool);
    const struct buf *out = &s->conn.obuf;
    if (t == NULL || lease_record(m, r->rk[0].bytes, r->rk[0].len, buf_rptr(out) + before,
                                  buf_len(out) - before) < 0)
        return 0;
    struct lease *l = t->map.keys.n > 0 ? lease_map_find(&t->map, r->rk[0].bytes, r->rk[0].len)
                                   : NULL;
    if (l != NULL && t->nheld < cl->max_waiters) {
        lease_hold(t, l, m, 1, uv_now(&pool->w->loop));
        lease_arm(t);
        return STAGE_TAKEN;
    }
    /* Over max_waiters it goes: its miss (counted in lease_reply) is answered at once. */
    m->lease = LEASE_M_READ;
    m->flags |= MSG_F_STAGED;
    return 0;
}

/*
 * A write of a key (set, add, cas, ms, delete, SET, DEL, ...) was queued on s. A lease on
 * the key ends when the write is answered (lease_reply): a re-read of the key sent before
 * the write is answered before it, on the key's connection, and is held again instead of
 * winning a new lease with a miss the write is about to end. A write without a reply
 * (noreply), or of several keys, ends the leases now: the held reads go out behind it.
 */
static void lease_stage_queued(struct stage_req *r, struct msg *wm, struct sconn *s)
{
    struct lease_table *t = r->pool->lease;

    (void)s;
    if (t == NULL || t->map.keys.n == 0 || !(r->req->flags & PROTO_RF_WRITE) || r->rk == NULL ||
        r->m->db != 0)                  /* another database's key of that name */
        return;
    int at_reply = r->req->nkeys == 1 && !(r->m->flags & MSG_F_NOREPLY) &&
                   !(wm->flags & MSG_F_NOREPLY) && wm->warm == MSG_WARM_NONE &&
                   (wm->lease == LEASE_M_NONE || wm->lease == LEASE_M_ADD ||
                    wm->lease == LEASE_M_DEL);
    for (uint32_t k = 0; k < r->req->nkeys; k++) {
        struct lease *l = lease_map_find(&t->map, r->rk[k].bytes, r->rk[k].len);
        if (l == NULL)
            continue;
        /* a memcached set with reads held on its key keeps its bytes: its STORED answers
         * the held gets with its value (lease_set_found) */
        int keep = wm->lease == LEASE_M_NONE && l->nheld > 0 &&
                   r->req->cmd == MEMCACHE_CMD_SET &&
                   r->pool->cp->protocol == CONF_PROTO_MEMCACHE &&
                   r->req->body_len <= LEASE_SET_KEEP_MAX;
        if (at_reply && (wm->lease != LEASE_M_NONE ||
                         lease_record(wm, r->rk[k].bytes, r->rk[k].len, r->buf,
                                      keep ? r->req->hdr_len + (size_t)r->req->body_len
                                           : 0) == 0)) {
            if (wm->lease == LEASE_M_NONE)
                wm->lease = LEASE_M_WRITE;
            wm->flags |= MSG_F_STAGED;
            l->storing = 1;             /* meta: no local answer while it is out */
            continue;
        }
        lease_end(t, l, LEASE_END_STORE);
    }
    lease_arm(t);
}

/* A held plain get (the reads a set's own value can answer). */
static int lease_is_get(const struct msg *m, const void *arg)
{
    (void)arg;
    return m->cmd == MEMCACHE_CMD_GET;
}

/*
 * A memcached `set <key> <flags> <exptime> <bytes>` (its line and value in req[0..rlen))
 * of l's key was answered STORED: the held gets get that value now (a get sent then would
 * read it), VALUE <key> <flags> <bytes>, without a read each; the other held reads
 * (gets, whose cas the proxy does not know; mg) are sent again, and the lease ends. 0, or
 * -1 when the set is not one whose value a get would read at once (an exptime that has
 * already passed, a malformed line): then the lease just ends.
 */
static int lease_set_found(struct lease_table *t, struct lease *l, const char *req, size_t rlen)
{
    size_t tb[6], tl[6];
    int nt = lease_tokens(req, rlen, tb, tl, 5);
    uint64_t flags, exptime, bytes;
    size_t eol = 0;

    while (eol + 1 < rlen && !(req[eol] == '\r' && req[eol + 1] == '\n'))
        eol++;
    if (nt != 5 || eol + 1 >= rlen || lease_mg_num(req + tb[2], tl[2], &flags) < 0 ||
        flags > UINT32_MAX || lease_mg_num(req + tb[3], tl[3], &exptime) < 0 ||
        exptime > 30u * 24 * 3600 ||    /* an absolute time, maybe past: not answered */
        lease_mg_num(req + tb[4], tl[4], &bytes) < 0 || rlen - (eol + 2) < bytes + 2)
        return -1;
    char hdr[360];
    int hn = snprintf(hdr, sizeof(hdr), "VALUE %.*s %" PRIu64 " %" PRIu64 "\r\n",
                      (int)l->node.klen, l->key, flags, bytes);
    struct buf out;
    buf_init(&out);
    if (hn <= 0 || (size_t)hn >= sizeof(hdr) || buf_append(&out, hdr, (size_t)hn) < 0 ||
        buf_append(&out, req + eol + 2, (size_t)bytes) < 0 ||
        buf_append_str(&out, "\r\nEND\r\n") < 0) {
        buf_free(&out);
        return -1;
    }
    lease_answer_held(t, l, lease_is_get, NULL, buf_rptr(&out), buf_len(&out), 1);
    buf_free(&out);
    return 0;
}

/* The reply of a write of a leased key (whatever it says: a failed add or cas leaves the
 * value the re-reads find): the lease ends. */
static void lease_write_done(struct msg *m)
{
    const char *key, *req;
    size_t klen, rlen;

    m->lease = LEASE_M_NONE;
    m->flags &= (uint16_t)~MSG_F_STAGED;
    if (m->server == NULL)
        return;
    struct lease_table *t = m->server->pool->lease;
    if (t == NULL || lease_recorded(m, &key, &klen, &req, &rlen) < 0)
        return;
    struct lease *l = lease_map_find(&t->map, key, klen);
    if (l != NULL) {
        if (rlen < 4 || memcmp(req, "set ", 4) != 0 || buf_len(&m->rsp) != 8 ||
            memcmp(buf_rptr(&m->rsp), "STORED\r\n", 8) != 0 ||
            lease_set_found(t, l, req, rlen) < 0)
            lease_end(t, l, LEASE_END_STORE);
        lease_arm(t);
    }
}

/*
 * A followed read's reply is complete (m has left its server's queue). A hit ends the
 * key's lease (the value was stored, here or elsewhere). A miss with no lease on the
 * key wins one: m gets the miss and its client recomputes. A miss while the key has a
 * lease (m was sent before it began, or is a held read sent again) is held: 1 (taken).
 */
static int lease_reply(struct worker *w, struct msg *m)
{
    if (m->lease == LEASE_M_ADD || m->lease == LEASE_M_DEL)
        lease_meta_write_reply(m);
    if (m->lease == LEASE_M_WRITE || m->lease == LEASE_M_ADD || m->lease == LEASE_M_DEL) {
        lease_write_done(m);
        return 0;
    }
    if (m->lease != LEASE_M_READ)
        return 0;
    m->lease = LEASE_M_NONE;
    m->flags &= (uint16_t)~MSG_F_STAGED;
    if (m->server == NULL || m->client == NULL || m->state != MSG_SENT)
        return 0;
    struct wpool *pool = m->server->pool;
    struct lease_table *t = pool->lease;
    const char *key, *req;
    size_t klen, rlen;
    if (t == NULL || lease_recorded(m, &key, &klen, &req, &rlen) < 0)
        return 0;
    if (m->items > 0) {
        struct lease *l = t->map.keys.n > 0 ? lease_map_find(&t->map, key, klen) : NULL;
        if (l != NULL) {
            lease_end(t, l, LEASE_END_STORE);      /* stored where this proxy did not see */
            lease_arm(t);
        }
        return 0;
    }
    if (!lease_is_miss(t, pool->ops, m))
        return 0;                   /* an error: answered as it is */
    const struct conf_leases *cl = &pool->cp->leases;
    uint64_t now = uv_now(&w->loop);
    struct lease *l = lease_map_find(&t->map, key, klen);
    if (l == NULL) {
        if (cl->ttl_ms == 0 || t->map.keys.n >= cl->max_waiters ||
            (l = lease_map_add(&t->map, key, klen, now + cl->ttl_ms)) == NULL)
            return 0;               /* no lease: the miss, as without leases */
        if (cl->prefix[0] != 0 && lease_fleet_take(t, l) == 0) {
            /* m waits, its miss kept, for the fleet's answer (lease_take_done) */
            l->cand = m;
            m->lease = LEASE_M_HELD;
            m->sconn = NULL;
            m->server = NULL;
            lease_take_followers(t, l, m, now);
            lease_arm(t);
            return 1;
        }
        STATS_ADD(&pool->stats, leases_won, 1);
        lease_take_followers(t, l, m, now);
        lease_arm(t);
        return 0;                   /* m won: its client gets the miss */
    }
    if (m->client->eof || m->client->closing) {
        STATS_ADD(&pool->stats, lease_dropped, 1);     /* its client left: answered now */
        return 0;
    }
    if (t->nheld >= cl->max_waiters) {
        STATS_ADD(&pool->stats, lease_overflow, 1);
        return 0;
    }
    lease_take_followers(t, l, m, now);
    lease_hold(t, l, m, 1, now);
    lease_arm(t);
    return 1;
}

const struct stage stage_lease = {
    .name = "lease",
    .wanted = lease_wanted,
    .request = lease_stage_request,
    .write = lease_stage_write,
    .queued = lease_stage_queued,
    .reply = lease_reply,
};
