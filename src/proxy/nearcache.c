/* The near cache (near_cache:): gets answered from values the proxy keeps, which a server's invalidations, writes through the proxy, ring changes and lost connections evict. */
#include "config.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL     /* a hit hashes its key: keep it out of a PLT call */
#include <xxhash.h>

#include "conf/conf.h"
#include "lib/keytab.h"
#include "lib/log.h"
#include "lib/util.h"
#include "proto/memcache.h"
#include "proto/redis.h"
#include "proxy/client.h"
#include "proxy/msg.h"
#include "proxy/nearcache.h"
#include "proxy/route.h"
#include "proxy/snapshot.h"
#include "proxy/server.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "state/health.h"
#include "state/registry.h"
#include "stats/hotkeys.h"
#include "stats/stats.h"

/*
 * docs/nearcache.md is the user's page; this is how it is built.
 *
 * Per pool and worker, a store (struct nearcache): a hash table of entries by key, in one
 * LRU list, bounded by near_cache.size / workers bytes. An entry is a key, the server it
 * was read from, and the reply a client's `GET key` (Redis) or `get key` (memcached) gets,
 * byte for byte — a Redis bulk string is the same in RESP2 and RESP3, and only values
 * (not nulls, not errors) are kept, so the bytes fit every client of the pool.
 *
 * A value enters only through a fill: on a miss of a key near_cache.keys admits, the
 * client's get is forwarded as always, and the stage sends a get of its own (MSG_OWN,
 * watched). The entry exists from the fill's send as a marker (NC_FILLING); the fill
 * stores its value only if, when its reply arrives,
 *   - the marker is still there (no invalidation, write or eviction of the key came
 *     between the send and the reply: each removes the marker),
 *   - the key's write slot (below) is what it was at the send, and had no write in
 *     flight then,
 *   - Redis: the fill went on the server's tracking connection, whose CLIENT TRACKING on
 *     was acknowledged before the fill's reply (same connection, in order), and that
 *     connection was not lost meanwhile.
 *
 * Redis: one tracking connection per server per worker, a pinned connection in RESP3
 * with CLIENT TRACKING on (default mode: the server remembers the keys this connection
 * read). Its invalidations arrive as pushes on the same connection, in order with its
 * replies, so an invalidation the server sent before a fill's reply is processed before
 * that reply (which then finds its marker gone), and one sent after it evicts the stored
 * value. The shared connections that carry the clients' requests are untouched (their
 * replies keep their shapes; a REDIRECT scheme would need tracking on all of them and
 * would order invalidations on another socket than the replies).
 *
 * Write slots (pool_shared.nc_slot, over every worker): a write, delete, expire or flush
 * through the proxy adds to its keys' slots (by a hash of the key) before it is forwarded
 * — a count of writes begun in the high bits and of writes in flight in the low ones —
 * and again when it is answered or failed. A hit needs its slot unchanged since the fill,
 * so once any worker has forwarded a write, no worker serves the key's old value; a fill
 * needs no write in flight at its send and none begun before its reply, so it never
 * stores a value a write through the proxy may have overtaken on another connection.
 */

#define NC_PEND_BITS   20
#define NC_PEND_MASK   ((UINT64_C(1) << NC_PEND_BITS) - 1)
#define NC_BEGIN       ((UINT64_C(1) << NC_PEND_BITS) + 1)   /* begun +1, in flight +1 */
#define NC_END         ((UINT64_C(1) << NC_PEND_BITS) - 1)   /* begun +1, in flight -1 */
#define NC_HOT_SLOTS   256          /* the hot set: key hashes, open addressing */
#define NC_HOT_MIN     8            /* a hot key: at least this many gets in its window */
#define NC_HOT_EVERY_MS 1000        /* the hot set is read again from the sketch */
#define NC_TRACK_RETRY_MS 1000      /* a tracking connection refused or lost: retry after */
#define NC_OWN_TIMEOUT_MS 5000      /* the proxy's own requests in a pool without a timeout */
#define NC_TAB_MIN     64
#define NC_HOT_BATCH   16           /* hits counted into the hot-key sketch at once */

enum nc_state { NC_FILLING, NC_VALID };
enum nc_track { NC_TRACK_NONE, NC_TRACK_ASKED, NC_TRACK_ON };
enum nc_cause { NC_EV_INVALIDATION, NC_EV_WRITE, NC_EV_RING, NC_EV_CONN, NC_EV_LRU };

struct nc_server;

struct nc_entry {
    struct keytab_node node;        /* nc->keys, by the key's XXH3 */
    struct qnode      lru;          /* nc->lru: least recently used first */
    struct nc_server *ns;           /* read from */
    uint64_t          id;           /* a fill knows its marker by it */
    uint64_t          slot_v;       /* the key's write slot when the value was read */
    uint64_t          expires_ms;   /* ttl_ms: not served from then on; 0: never */
    uint64_t          place;        /* the key's placement hash (the hot-key sketch's) */
    uint32_t          hits_due;     /* hits not counted in the hot-key sketch yet */
    char             *rsp;          /* the reply (NC_VALID) */
    uint32_t          rsp_len;
    uint8_t           state;        /* enum nc_state */
    char              key[];
};

/* A server of the pool as the store sees it (Redis: its tracking connection). */
struct nc_server {
    struct sconn_holder holder;     /* holds the tracking connection */
    struct msg_watch    tw;         /* CLIENT TRACKING on's outcome */
    struct nearcache   *nc;
    struct server      *srv;
    struct sconn       *pin;        /* the tracking connection, or NULL */
    uint64_t            gen;        /* a new one for every tracking connection lost */
    uint64_t            retry_ms;   /* no new tracking connection before */
    uint8_t             track;      /* enum nc_track */
};

struct nearcache {
    struct wpool       *pool;
    uint32_t            refs;       /* the pool's, and one per fill or write in flight */
    int                 dead;       /* dropped: fills store nothing, writes count nothing */
    int                 count_hot;  /* hot_keys: hits are counted in the sketch */
    uint16_t            get_cmd;    /* Redis: GET's command id */
    uint64_t            budget;     /* bytes this worker keeps */
    uint64_t            bytes;
    struct keytab       keys;       /* struct nc_entry */
    struct qnode        lru;
    uint64_t            next_id;
    struct nc_server   *ns;         /* [nns]: by server index when made */
    uint32_t            nns;
    uint64_t            hot_at_ms;  /* when the hot set was read */
    uint64_t            hot[NC_HOT_SLOTS];
};

/* A fill in flight: its marker, and what must not change before its reply. */
struct nc_fill {
    struct msg_watch    watch;
    struct nearcache   *nc;
    struct nc_server   *ns;
    uint64_t            id;
    uint64_t            hash;
    uint64_t            slot_v;
    uint64_t            gen;
    uint32_t            slot;
};

/* A write in flight: the slots it added to, taken back at its outcome. */
struct nc_write {
    struct msg_watch      watch;
    atomic_uint_fast64_t *slots;    /* the pool's nc_slot */
    uint32_t              n;        /* UINT32_MAX: every slot (a flush) */
    uint32_t              slot[];
};

/* ------------------------------------------------------------------ entries */

static inline uint32_t nc_slot_of(uint64_t hash)
{
    return (uint32_t)(hash >> 17) & (POOL_NC_SLOTS - 1);
}

static inline uint64_t nc_slot_load(const struct wpool *pool, uint32_t slot)
{
    return atomic_load_explicit(&pool->view.shared->nc_slot[slot], memory_order_acquire);
}

static void nc_count(struct nearcache *nc, enum nc_cause why)
{
    struct stats_pool *st = &nc->pool->stats;
    switch (why) {
    case NC_EV_INVALIDATION: STATS_ADD(st, near_cache_evict_invalidation, 1); break;
    case NC_EV_WRITE:        STATS_ADD(st, near_cache_evict_write, 1); break;
    case NC_EV_RING:         STATS_ADD(st, near_cache_evict_ring, 1); break;
    case NC_EV_CONN:         STATS_ADD(st, near_cache_evict_conn, 1); break;
    case NC_EV_LRU:          STATS_ADD(st, near_cache_evict_lru, 1); break;
    }
}

static size_t nc_cost(const struct nc_entry *e)
{
    return sizeof(*e) + e->node.klen + e->rsp_len;
}

static struct nc_entry *nc_find(const struct nearcache *nc, uint64_t h, const char *key,
                                size_t len)
{
    struct keytab_node *e = keytab_find(&nc->keys, h, key, len);
    return e != NULL ? KEYTAB_DATA(e, struct nc_entry, node) : NULL;
}

/* e's hits not counted in the hot-key sketch yet go there now. */
static void nc_hot_flush(struct nearcache *nc, struct nc_entry *e)
{
    if (e->hits_due > 0 && nc->count_hot)
        hotkeys_touch_n(&nc->pool->hot, e->key, e->node.klen, e->place, uv_now(&nc->pool->w->loop),
                        e->hits_due);
    e->hits_due = 0;
}

/* Take e out and free it; a value (not a marker) is counted as evicted for `why`. */
static void nc_evict(struct nearcache *nc, struct nc_entry *e, enum nc_cause why)
{
    nc_hot_flush(nc, e);
    keytab_remove(&nc->keys, &e->node);
    queue_remove(&e->lru);
    if (e->state == NC_VALID) {
        nc_count(nc, why);
        STATS_ADD(&nc->pool->stats, near_cache_entries, -1);
    }
    STATS_ADD(&nc->pool->stats, near_cache_bytes, -(int64_t)nc_cost(e));
    nc->bytes -= nc_cost(e);
    free(e->rsp);
    free(e);
}

/* Every entry read from ns (or all of them, ns NULL). */
static void nc_evict_server(struct nearcache *nc, const struct nc_server *ns, enum nc_cause why)
{
    struct qnode *q, *tmp;
    QUEUE_FOREACH_SAFE(q, tmp, &nc->lru) {
        struct nc_entry *e = QUEUE_DATA(q, struct nc_entry, lru);
        if (ns == NULL || e->ns == ns)
            nc_evict(nc, e, why);
    }
}

static void nc_evict_key(struct nearcache *nc, const char *key, size_t len, enum nc_cause why)
{
    uint64_t h = XXH3_64bits(key, len);
    struct nc_entry *e = nc_find(nc, h, key, len);
    if (e != NULL)
        nc_evict(nc, e, why);
}

/* Room for `need` more bytes within the budget: the least recently used go. */
static void nc_make_room(struct nearcache *nc, size_t need)
{
    while (nc->bytes + need > nc->budget && !queue_empty(&nc->lru))
        nc_evict(nc, QUEUE_DATA(queue_first(&nc->lru), struct nc_entry, lru), NC_EV_LRU);
}

/* A marker for a fill of key from ns, or NULL (no memory, no room). */
static struct nc_entry *nc_mark(struct nearcache *nc, struct nc_server *ns, uint64_t h,
                                const char *key, size_t len)
{
    struct nc_entry *e = malloc(sizeof(*e) + len);
    if (e == NULL)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->ns = ns;
    e->node.hash = h;
    e->id = ++nc->next_id;
    e->node.klen = (uint32_t)len;
    e->state = NC_FILLING;
    memcpy(e->key, key, len);
    nc_make_room(nc, nc_cost(e));
    keytab_add(&nc->keys, &e->node);
    queue_insert_tail(&nc->lru, &e->lru);
    nc->bytes += nc_cost(e);
    STATS_ADD(&nc->pool->stats, near_cache_bytes, (int64_t)nc_cost(e));
    return e;
}

/* ------------------------------------------------------------------ the store */

static void nc_unref(struct nearcache *nc)
{
    if (--nc->refs > 0)
        return;
    free(nc->ns);
    keytab_free(&nc->keys);
    free(nc);
}

static const struct sconn_holder_ops nc_holder_ops;
static void nc_track_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok);

static struct nearcache *nc_create(struct wpool *pool)
{
    const struct conf_near_cache *cnc = &pool->cp->near_cache;
    struct nearcache *nc = calloc(1, sizeof(*nc));
    uint32_t workers = pool->w->snap != NULL && pool->w->snap->nworkers > 0
                           ? pool->w->snap->nworkers : 1;

    if (nc == NULL)
        return NULL;
    nc->pool = pool;
    nc->refs = 1;
    nc->count_hot = pool->w->snap != NULL && pool->w->snap->conf->global.hot_keys;
    nc->budget = cnc->size / workers;
    int t = keytab_init(&nc->keys, NC_TAB_MIN, offsetof(struct nc_entry, key) -
                                               offsetof(struct nc_entry, node));
    nc->nns = pool->nservers;
    nc->ns = calloc(nc->nns ? nc->nns : 1, sizeof(*nc->ns));
    if (t < 0 || nc->ns == NULL) {
        keytab_free(&nc->keys);
        free(nc->ns);
        free(nc);
        return NULL;
    }
    queue_init(&nc->lru);
    for (uint32_t i = 0; i < nc->nns; i++) {
        struct nc_server *ns = &nc->ns[i];
        ns->nc = nc;
        ns->srv = pool->servers[i];
        ns->holder.ops = &nc_holder_ops;
        queue_init(&ns->holder.pins);
        ns->tw.done = nc_track_done;
    }
    if (pool->cp->protocol == CONF_PROTO_REDIS) {
        nc->get_cmd = UINT16_MAX;
        for (size_t i = 0; i < redis_ncommands; i++)
            if (strcmp(redis_commands[i].name, "GET") == 0)
                nc->get_cmd = (uint16_t)i;
    }
    return nc;
}

void nearcache_drop(struct wpool *wp)
{
    struct nearcache *nc = wp->nc;

    if (nc == NULL)
        return;
    wp->nc = NULL;
    nc->count_hot = 0;      /* the pool's sketch may be going too */
    nc_evict_server(nc, NULL, NC_EV_RING);
    nc->dead = 1;           /* before the unpins: their fills fail and must store nothing */
    for (uint32_t i = 0; i < nc->nns; i++) {
        struct sconn *s = nc->ns[i].pin;
        nc->ns[i].pin = NULL;
        if (s != NULL)
            sconn_unpin(s, 0);
    }
    nc_unref(nc);
}

/* ------------------------------------------------------------------ Redis tracking */

static struct nc_server *nc_server_of_holder(struct sconn_holder *h)
{
    return (struct nc_server *)(void *)((char *)h - offsetof(struct nc_server, holder));
}

/* The tracking connection failed or closed: what was read there may have changed
 * unseen, so all of it goes now, before the next get of the server's keys. */
static void nc_pin_lost(struct sconn_holder *h, struct sconn *s)
{
    struct nc_server *ns = nc_server_of_holder(h);
    struct nearcache *nc = ns->nc;

    (void)s;
    ns->pin = NULL;
    ns->track = NC_TRACK_NONE;
    ns->gen++;
    ns->retry_ms = util_now_ms() + NC_TRACK_RETRY_MS;
    if (!nc->dead)
        nc_evict_server(nc, ns, NC_EV_CONN);
}

/*
 * A push on the tracking connection: `>2 $10 invalidate *N $k key ...` evicts each key,
 * `>2 $10 invalidate _` (a flush on the server, or the server dropping keys from its
 * tracking table) evicts everything read from it. Anything else, or a malformed one,
 * evicts everything too: what it meant cannot be known.
 */
static void nc_unsolicited(struct sconn_holder *h, struct sconn *s, const char *p, size_t n)
{
    struct nc_server *ns = nc_server_of_holder(h);
    struct nearcache *nc = ns->nc;
    size_t off = 0;
    uint64_t count = 0;

    (void)s;
    if (nc->dead)
        return;
    if (redis_invalidation(p, n, &off, &count) != 0)
        goto all;
    for (uint64_t i = 0; i < count; i++) {
        const char *key;
        size_t klen;
        if (redis_invalidation_key(p, n, &off, &key, &klen) < 0)
            goto all;
        nc_evict_key(nc, key, klen, NC_EV_INVALIDATION);
    }
    return;
all:
    nc_evict_server(nc, ns, NC_EV_INVALIDATION);
}

static const struct sconn_holder_ops nc_holder_ops = {
    .pin_lost = nc_pin_lost,
    .unsolicited = nc_unsolicited,
};

static void nc_track_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    struct nc_server *ns = (struct nc_server *)(void *)((char *)wt - offsetof(struct nc_server, tw));
    struct nearcache *nc = ns->nc;

    (void)w;
    if (!nc->dead && ns->track == NC_TRACK_ASKED) {
        if (ok && !(m->flags & MSG_F_ERROR)) {
            ns->track = NC_TRACK_ON;
        } else {
            log_warn("pool '%s': server %s refused CLIENT TRACKING: its keys are not near-cached "
                     "(asked again in %d ms)", nc->pool->cp->name, ns->srv->label,
                     NC_TRACK_RETRY_MS);
            ns->track = NC_TRACK_NONE;  /* fills on the connection store nothing meanwhile */
            ns->retry_ms = util_now_ms() + NC_TRACK_RETRY_MS;
        }
    }
    nc_unref(nc);
}

/* Queue one of the store's own requests (bytes written into s's output from `before`). */
static void nc_own_send(struct sconn *s, struct msg *m, uint16_t cmd, uint16_t rflags,
                        struct msg_watch *wt, size_t before)
{
    struct server *srv = s->server;
    struct worker *w = srv->w;

    m->role = MSG_OWN;
    m->cmd = cmd;
    m->rflags = rflags;
    m->watch = wt;
    m->start_us = worker_now_us(w);
    m->req_bytes = buf_len(&s->conn.obuf) - before;
    STATS_ADD(&srv->stats, requests, 1);
    STATS_ADD(&srv->stats, request_bytes, m->req_bytes);
    sconn_enqueue(s, m);
    if (srv->pool->cp->timeout_ms <= 0)
        sconn_deadline_in(s, m, NC_OWN_TIMEOUT_MS);
    sconn_mark(w, s);
}

/* The server's tracking connection, opened (and CLIENT TRACKING on asked) when there is
 * none: NULL when it cannot be had now. */
static struct sconn *nc_tracking(struct nearcache *nc, struct nc_server *ns)
{
    static const char track[] = "*3\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\non\r\n";
    const char *reason = NULL;

    if (ns->pin != NULL && ns->track != NC_TRACK_NONE)
        return ns->pin;
    if (ns->retry_ms > util_now_ms())
        return NULL;
    struct sconn *s = ns->pin;
    if (s == NULL && (s = server_pin(ns->srv, &ns->holder, 1, &reason)) == NULL) {
        ns->retry_ms = util_now_ms() + NC_TRACK_RETRY_MS;
        return NULL;
    }
    struct msg *m = msg_get(ns->srv->w);
    size_t before = buf_len(&s->conn.obuf);
    if (m == NULL || buf_append(&s->conn.obuf, track, sizeof(track) - 1) < 0) {
        buf_truncate(&s->conn.obuf, before);
        if (m != NULL)
            msg_put(ns->srv->w, m);
        if (ns->pin == NULL)
            sconn_unpin(s, 0);
        return NULL;
    }
    ns->pin = s;
    ns->track = NC_TRACK_ASKED;
    nc->refs++;
    nc_own_send(s, m, ns->srv->pool->ops->probe_cmd, PROTO_RF_VARIANT, &ns->tw, before);
    return s;
}

/* ------------------------------------------------------------------ fills */

/* The value a fill may keep: a Redis bulk string (not a null, not an error), a memcached
 * hit of one value. */
static int nc_storable(const struct nearcache *nc, const char *p, size_t n)
{
    if (n == 0 || n > nc->pool->cp->near_cache.max_value || n > UINT32_MAX)
        return 0;
    if (nc->pool->cp->protocol == CONF_PROTO_REDIS)
        return p[0] == '$' && n >= 4 && p[1] != '-';
    return n > 6 && memcmp(p, "VALUE ", 6) == 0 && n >= 5 && memcmp(p + n - 5, "END\r\n", 5) == 0;
}

static void nc_fill_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    struct nc_fill *f = (struct nc_fill *)(void *)wt;
    struct nearcache *nc = f->nc;

    (void)w;
    if (nc->dead)
        goto out;
    struct nc_entry *e = NULL;
    for (struct keytab_node *k = nc->keys.tab[f->hash & nc->keys.mask]; k != NULL && e == NULL;
         k = k->next) {
        struct nc_entry *c = KEYTAB_DATA(k, struct nc_entry, node);
        if (c->id == f->id)
            e = c;
    }
    if (e == NULL || e->state != NC_FILLING) {
        STATS_ADD(&nc->pool->stats, near_cache_fill_races, 1);
        goto out;                   /* invalidated, written or evicted since the send */
    }
    const char *p = buf_len(&m->rsp) ? buf_rptr(&m->rsp) : "";
    size_t n = buf_len(&m->rsp);
    int keep = ok && !(m->flags & (MSG_F_ERROR | MSG_F_RSPLOST)) && nc_storable(nc, p, n);
    if (keep && nc->pool->cp->protocol == CONF_PROTO_REDIS &&
        (f->ns->track != NC_TRACK_ON || f->ns->gen != f->gen))
        keep = 0;                   /* not read under tracking that still holds */
    if (keep && nc_slot_load(nc->pool, f->slot) != f->slot_v) {
        STATS_ADD(&nc->pool->stats, near_cache_fill_races, 1);
        keep = 0;                   /* a write through the proxy began meanwhile */
    }
    if (keep && sizeof(*e) + e->node.klen + n > nc->budget)
        keep = 0;                   /* larger than this worker's share */
    if (!keep || (e->rsp = malloc(n)) == NULL) {
        nc_evict(nc, e, NC_EV_LRU);
        goto out;
    }
    memcpy(e->rsp, p, n);
    nc->bytes -= nc_cost(e);
    STATS_ADD(&nc->pool->stats, near_cache_bytes, -(int64_t)nc_cost(e));
    e->rsp_len = (uint32_t)n;
    e->state = NC_VALID;
    e->slot_v = f->slot_v;
    uint32_t ttl = nc->pool->cp->near_cache.ttl_ms;
    e->expires_ms = ttl > 0 ? uv_now(&nc->pool->w->loop) + ttl : 0;
    queue_remove(&e->lru);
    nc_make_room(nc, nc_cost(e));
    queue_insert_tail(&nc->lru, &e->lru);
    nc->bytes += nc_cost(e);
    STATS_ADD(&nc->pool->stats, near_cache_bytes, (int64_t)nc_cost(e));
    STATS_ADD(&nc->pool->stats, near_cache_entries, 1);
    STATS_ADD(&nc->pool->stats, near_cache_fills, 1);
out:
    nc_unref(nc);
    free(f);
}

/* Send a fill of the request's key (r->rk[0]) to its owner ns: a marker now, the value
 * when the reply comes (nc_fill_done). Nothing when it cannot be done now. */
static void nc_fill(struct nearcache *nc, struct nc_server *ns, struct stage_req *r, uint64_t h)
{
    struct wpool *pool = r->pool;
    const struct route_key *rk = &r->rk[0];
    uint32_t slot = nc_slot_of(h);
    uint64_t v = nc_slot_load(pool, slot);
    struct sconn *s;
    const char *reason = NULL;

    if (v & NC_PEND_MASK)
        return;                     /* a write of the slot's keys is in flight */
    if (pool->cp->protocol == CONF_PROTO_REDIS)
        s = nc_tracking(nc, ns);
    else
        s = server_pick(ns->srv, rk->hash, 0, &reason);
    if (s == NULL)
        return;
    struct nc_fill *f = calloc(1, sizeof(*f));
    struct msg *m = f != NULL ? msg_get(pool->w) : NULL;
    struct nc_entry *e = m != NULL ? nc_mark(nc, ns, h, rk->bytes, rk->len) : NULL;
    size_t before = buf_len(&s->conn.obuf);
    if (e != NULL)
        e->place = rk->hash;
    if (e == NULL || pool->ops->forward(r->req, r->buf, &s->conn.obuf) < 0) {
        buf_truncate(&s->conn.obuf, before);
        if (e != NULL)
            nc_evict(nc, e, NC_EV_LRU);
        if (m != NULL)
            msg_put(pool->w, m);
        free(f);
        return;
    }
    f->watch.done = nc_fill_done;
    f->watch.keep_reply = 1;
    f->nc = nc;
    f->ns = ns;
    f->id = e->id;
    f->hash = h;
    f->slot = slot;
    f->slot_v = v;
    f->gen = ns->gen;
    nc->refs++;
    uint16_t rflags = (uint16_t)(r->req->flags & ~(PROTO_RF_NOREPLY | PROTO_RF_VARIANT));
    if (pool->cp->protocol == CONF_PROTO_REDIS)
        rflags |= PROTO_RF_VARIANT;
    nc_own_send(s, m, r->req->cmd, rflags, &f->watch, before);
}

/* ------------------------------------------------------------------ writes */

static void nc_write_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    struct nc_write *wr = (struct nc_write *)(void *)wt;

    (void)w;
    (void)m;
    (void)ok;
    if (wr->n == UINT32_MAX) {
        for (uint32_t i = 0; i < POOL_NC_SLOTS; i++)
            atomic_fetch_add_explicit(&wr->slots[i], NC_END, memory_order_acq_rel);
    } else {
        for (uint32_t i = 0; i < wr->n; i++)
            atomic_fetch_add_explicit(&wr->slots[wr->slot[i]], NC_END, memory_order_acq_rel);
    }
    free(wr);
}

/*
 * A write (or a flush: all) through the proxy, before it is forwarded: this worker's
 * copies of its keys go, and its slots say so to every worker until it is answered.
 * Without memory for the record the slots still change (a write begun), and the writes'
 * in-flight count is not kept: fills of those keys then wait for a later write to end.
 */
static void nc_write(struct nearcache *nc, struct stage_req *r, int all)
{
    struct wpool *pool = r->pool;
    atomic_uint_fast64_t *slots = pool->view.shared->nc_slot;
    uint32_t n = all ? 0 : r->req->nkeys;
    struct nc_write *wr = NULL;

    if (r->m->watch == NULL && (wr = malloc(sizeof(*wr) + n * sizeof(uint32_t))) != NULL) {
        wr->watch.done = nc_write_done;
        wr->watch.keep_reply = 0;
        wr->slots = slots;
        wr->n = all ? UINT32_MAX : n;
    }
    uint64_t add = wr != NULL ? NC_BEGIN : (UINT64_C(1) << NC_PEND_BITS);
    if (all) {
        if (nc != NULL)
            nc_evict_server(nc, NULL, NC_EV_WRITE);
        for (uint32_t i = 0; i < POOL_NC_SLOTS; i++)
            atomic_fetch_add_explicit(&slots[i], add, memory_order_acq_rel);
    } else {
        for (uint32_t k = 0; k < n; k++) {
            uint64_t h = XXH3_64bits(r->rk[k].bytes, r->rk[k].len);
            if (nc != NULL) {
                struct nc_entry *e = nc_find(nc, h, r->rk[k].bytes, r->rk[k].len);
                if (e != NULL)
                    nc_evict(nc, e, NC_EV_WRITE);
            }
            uint32_t slot = nc_slot_of(h);
            atomic_fetch_add_explicit(&slots[slot], add, memory_order_acq_rel);
            if (wr != NULL)
                wr->slot[k] = slot;
        }
    }
    if (wr != NULL)
        r->m->watch = &wr->watch;
}

void nearcache_write(struct wpool *wp, struct msg *m, const struct proto_req *req,
                     const struct route_key *rk)
{
    struct stage_req r = { .pool = wp, .m = m, .req = req, .rk = rk };

    if (wp->view.shared != NULL && req->nkeys > 0)
        nc_write(wp->nc, &r, 0);
}

/* ------------------------------------------------------------------ the stage */

static int nc_wanted(const struct conf_pool *cp, const struct conf_global *g)
{
    (void)g;
    return cp->near_cache.on;
}

/* Whether near_cache.keys admits the key. */
static int nc_admits(struct nearcache *nc, const struct wpool *pool, const char *key,
                     size_t len, uint64_t h)
{
    const struct conf_near_cache *cnc = &pool->cp->near_cache;

    switch (cnc->keys) {
    case CONF_NC_ALL:
        return 1;
    case CONF_NC_PREFIX:
        for (uint32_t i = 0; i < cnc->nprefixes; i++) {
            size_t pl = strlen(cnc->prefixes[i]);
            if (len >= pl && memcmp(key, cnc->prefixes[i], pl) == 0)
                return 1;
        }
        return 0;
    case CONF_NC_HOT:
        break;
    }
    /* hot: the keys this worker's sketch names with at least NC_HOT_MIN gets in its
     * window (read again once a second, when the worker publishes it) */
    uint64_t now = uv_now(&pool->w->loop);
    if (now - nc->hot_at_ms >= NC_HOT_EVERY_MS || nc->hot_at_ms == 0) {
        const struct hotkeys_snapshot *hs = pool->hot_pub;
        memset(nc->hot, 0, sizeof(nc->hot));
        nc->hot_at_ms = now;
        for (size_t i = 0; hs != NULL && i < hs->n; i++) {
            const struct hotkeys_entry *he = &hs->e[i];
            if (he->cut || he->count - he->error < NC_HOT_MIN)
                continue;
            uint64_t hh = XXH3_64bits(he->key, he->len) | 1;
            for (uint32_t j = 0; j < NC_HOT_SLOTS; j++) {
                uint64_t *slot = &nc->hot[(hh + j) & (NC_HOT_SLOTS - 1)];
                if (*slot == 0 || *slot == hh) {
                    *slot = hh;
                    break;
                }
            }
        }
    }
    h |= 1;
    for (uint32_t j = 0; j < NC_HOT_SLOTS; j++) {
        uint64_t v = nc->hot[(h + j) & (NC_HOT_SLOTS - 1)];
        if (v == h)
            return 1;
        if (v == 0)
            return 0;
    }
    return 0;
}

/* The request is a get the store serves: Redis GET of one key, memcached get of one key
 * (gets wants a CAS, mg carries flags: both are forwarded). */
static int nc_cacheable(const struct nearcache *nc, const struct wpool *pool,
                        const struct proto_req *req)
{
    if (req->kind != PROTO_REQ_SINGLE || req->nkeys != 1 || (req->flags & PROTO_RF_NOREPLY))
        return 0;
    if (pool->cp->protocol == CONF_PROTO_REDIS)
        return req->cmd == nc->get_cmd;
    return req->cmd == MEMCACHE_CMD_GET && req->body_len == 0 &&
           (req->flags & ~(uint16_t)PROTO_RF_RETRIEVAL) == 0;
}

/* Answer m with e's reply. */
static void nc_hit(struct stage_req *r, struct nc_entry *e)
{
    struct client *c = r->c;
    struct msg *m = r->m;

    if (buf_append(&m->rsp, e->rsp, e->rsp_len) < 0) {
        msg_fail(c->w, m, PROTO_ERR_NOMEM, "out of memory");
        return;
    }
    c->held_bytes += e->rsp_len;
    STATS_ADD(&r->pool->stats, near_cache_hits, 1);
    msg_complete(c->w, m);
}

static enum stage_verdict nc_request(struct stage_req *r)
{
    struct wpool *pool = r->pool;
    const struct proto_req *req = r->req;
    struct nearcache *nc = pool->nc;

    if (pool->view.shared == NULL)
        return STAGE_PASS;
    if (req->flags & PROTO_RF_WRITE) {
        if (req->kind == PROTO_REQ_BROADCAST)
            nc_write(nc, r, 1);
        else if (r->rk != NULL && req->nkeys > 0)
            nc_write(nc, r, 0);
        return STAGE_PASS;
    }
    /* the cache holds the pool's database: a client that SELECTed another reads the
     * server (its writes above evict the name in any database: more than needed, safe) */
    if (r->rk == NULL || r->m->db != 0)
        return STAGE_PASS;
    if (nc == NULL) {
        if (!pool->cp->near_cache.on || (nc = pool->nc = nc_create(pool)) == NULL)
            return STAGE_PASS;
    }
    if (!nc_cacheable(nc, pool, req))
        return STAGE_PASS;
    const struct route_key *rk = &r->rk[0];
    uint64_t h = XXH3_64bits(rk->bytes, rk->len);
    struct nc_entry *e = nc_find(nc, h, rk->bytes, rk->len);
    struct server *owner = rk->owner < pool->nservers ? pool->servers[rk->owner] : NULL;
    if (e != NULL) {
        if (e->state == NC_FILLING) {
            STATS_ADD(&pool->stats, near_cache_misses, 1);
            return STAGE_PASS;      /* its fill is in flight */
        }
        if (e->ns->srv != owner || owner == NULL || !health_up(owner->health)) {
            nc_evict(nc, e, NC_EV_RING);        /* the key's owner changed or is down */
        } else if (e->expires_ms != 0 && uv_now(&pool->w->loop) >= e->expires_ms) {
            nc_evict(nc, e, NC_EV_LRU);
        } else if (nc_slot_load(pool, nc_slot_of(h)) != e->slot_v) {
            nc_evict(nc, e, NC_EV_WRITE);       /* written through another worker */
        } else {
            queue_remove(&e->lru);
            queue_insert_tail(&nc->lru, &e->lru);
            if (nc->count_hot && ++e->hits_due >= NC_HOT_BATCH)
                nc_hot_flush(nc, e);    /* forward.c counts only what goes on */
            nc_hit(r, e);
            return STAGE_TAKEN;
        }
        STATS_ADD(&pool->stats, near_cache_misses, 1);
    } else if (!nc_admits(nc, pool, rk->bytes, rk->len, h)) {
        return STAGE_PASS;
    } else {
        STATS_ADD(&pool->stats, near_cache_misses, 1);
    }
    /* the owner is read (never a replica or a failover server), and only while up */
    if (owner == NULL || !health_up(owner->health) || rk->owner >= nc->nns ||
        nc->ns[rk->owner].srv != owner)
        return STAGE_PASS;
    nc_fill(nc, &nc->ns[rk->owner], r, h);
    return STAGE_PASS;
}

const struct stage stage_nearcache = {
    .name = "nearcache",
    .wanted = nc_wanted,
    .request = nc_request,
};
