/* Pub/sub: a client's subscriptions, the pinned connection per server that carries them, and their messages merged into its one stream. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "state/health.h"
#include "lib/log.h"
#include "proxy/client.h"
#include "proxy/cluster_worker.h"
#include "proxy/forward.h"
#include "proxy/msg.h"
#include "proxy/hub.h"
#include "proxy/snapshot.h"
#include "proxy/pubsub.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/worker.h"
#include "lib/util.h"

/* ------------------------------------------------------------------ what a client holds */

/* One subscribed name: a channel or shard channel with the server it is subscribed on, or
 * a pattern (srv NULL: on every server of the pool). */
struct pubsub_name {
    struct server *srv;
    uint64_t       hash;
    uint32_t       len;
    char           bytes[];
};

/* Channels by name: open addressing, linear probing, deletion by backward shift (no
 * tombstones), at most half full. Redis keeps a dict; its mass unsubscribe goes in its
 * table's order, and so does the proxy's in its own. */
struct pubsub_set {
    struct pubsub_name **slot;
    uint32_t             cap;      /* a power of two, 0 before the first name */
    uint32_t             n;
};

/* A server the client's subscriptions need, and its pinned connection. */
struct pubsub_pin {
    struct server *srv;
    struct sconn  *s;
    uint32_t       names;          /* channels and shard channels subscribed there */
};

struct pubsub {
    struct pubsub_set    channels;
    struct pubsub_set    shards;
    struct pubsub_name **patterns; /* in subscription order, as Redis's list */
    uint32_t             npatterns, patcap;
    /* A cluster pool: the one node carrying the patterns (a cluster propagates every
     * PUBLISH to every node, so a pattern on each would deliver a message once per node);
     * NULL in other pools (patterns on every server) or while there are none. */
    struct server       *patsrv;
    struct pubsub_pin   *pins;
    uint32_t             npins, pincap;
    size_t               mem;      /* bytes of names and tables */
    uint64_t             soft_since_ms; /* over the soft output limit since (0: under it) */
};

static uint64_t name_hash(const char *p, size_t n)
{
    return XXH3_64bits(p, n);
}

static int name_is(const struct pubsub_name *e, uint64_t h, const char *p, size_t n)
{
    return e->hash == h && e->len == n && memcmp(e->bytes, p, n) == 0;
}

/* The slot holding name p[0..n) (hash h), or the empty slot where it would go. */
static uint32_t set_probe(const struct pubsub_set *t, uint64_t h, const char *p, size_t n)
{
    uint32_t mask = t->cap - 1, i = (uint32_t)h & mask;
    while (t->slot[i] != NULL && !name_is(t->slot[i], h, p, n))
        i = (i + 1) & mask;
    return i;
}

static struct pubsub_name *set_find(const struct pubsub_set *t, uint64_t h, const char *p, size_t n)
{
    return t->cap == 0 ? NULL : t->slot[set_probe(t, h, p, n)];
}

/* Room for one more name; 0 or -ENOMEM. */
static int set_reserve(struct pubsub *ps, struct pubsub_set *t)
{
    if ((t->n + 1) * 2 <= t->cap)
        return 0;
    uint32_t cap = t->cap ? t->cap * 2 : 16;
    if (cap == 0)
        return -ENOMEM;
    struct pubsub_name **slot = calloc(cap, sizeof(*slot));
    if (slot == NULL)
        return -ENOMEM;
    struct pubsub_set grown = { slot, cap, t->n };
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->slot[i] != NULL)
            slot[set_probe(&grown, t->slot[i]->hash, t->slot[i]->bytes, t->slot[i]->len)] = t->slot[i];
    ps->mem += (size_t)(cap - t->cap) * sizeof(*slot);
    free(t->slot);
    *t = grown;
    return 0;
}

/* Take e out of its slot i, shifting back the names probed past it. */
static void set_remove_at(struct pubsub_set *t, uint32_t i)
{
    uint32_t mask = t->cap - 1, j = i;
    t->slot[i] = NULL;
    t->n--;
    for (;;) {
        j = (j + 1) & mask;
        struct pubsub_name *e = t->slot[j];
        if (e == NULL)
            return;
        uint32_t home = (uint32_t)e->hash & mask;
        /* e may move to the hole at i when its home is not within (i, j] */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            t->slot[i] = e;
            t->slot[j] = NULL;
            i = j;
        }
    }
}

static struct pubsub_name *name_new(struct pubsub *ps, uint64_t h, const char *p, size_t n,
                                    struct server *srv)
{
    struct pubsub_name *e = malloc(sizeof(*e) + n + 1);
    if (e == NULL)
        return NULL;
    e->srv = srv;
    e->hash = h;
    e->len = (uint32_t)n;
    memcpy(e->bytes, p, n);
    e->bytes[n] = '\0';
    ps->mem += sizeof(*e) + n + 1;
    return e;
}

static void name_free(struct pubsub *ps, struct pubsub_name *e)
{
    ps->mem -= sizeof(*e) + e->len + 1;
    free(e);
}

static struct pubsub_pin *pin_of_server(struct pubsub *ps, const struct server *srv)
{
    for (uint32_t i = 0; i < ps->npins; i++)
        if (ps->pins[i].srv == srv)
            return &ps->pins[i];
    return NULL;
}

static struct pubsub_pin *pin_of_conn(struct pubsub *ps, const struct sconn *s)
{
    for (uint32_t i = 0; i < ps->npins; i++)
        if (ps->pins[i].s == s)
            return &ps->pins[i];
    return NULL;
}

/* Forget pin (its connection is let go or gone). */
static void pin_drop(struct pubsub *ps, struct pubsub_pin *pin)
{
    *pin = ps->pins[--ps->npins];
}

/* Whether the fragments of a subscription are still in flight on s. */
static int pin_busy(const struct sconn *s)
{
    struct qnode *n;
    QUEUE_FOREACH(n, &s->sent) {
        if (QUEUE_DATA(n, struct msg, sq)->role == MSG_FRAG)
            return 1;
    }
    return 0;
}

/* The subscriptions of Redis's two counts: channels and patterns; shard channels. */
static uint64_t count_of(const struct pubsub *ps, uint8_t cls)
{
    return cls == PROTO_SUB_SHARD ? ps->shards.n : (uint64_t)ps->channels.n + ps->npatterns;
}

static uint64_t count_total(const struct pubsub *ps)
{
    return (uint64_t)ps->channels.n + ps->npatterns + ps->shards.n;
}

static void pubsub_set_free(struct pubsub *ps, struct pubsub_set *t)
{
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->slot[i] != NULL)
            name_free(ps, t->slot[i]);
    free(t->slot);
    memset(t, 0, sizeof(*t));
}

static void pubsub_destroy(struct client *c)
{
    struct pubsub *ps = c->pubsub;

    if (ps == NULL)
        return;
    pubsub_set_free(ps, &ps->channels);
    pubsub_set_free(ps, &ps->shards);
    for (uint32_t i = 0; i < ps->npatterns; i++)
        name_free(ps, ps->patterns[i]);
    free(ps->patterns);
    free(ps->pins);
    free(ps);
    c->pubsub = NULL;
}

/* The client leaves subscribed mode, or enters it: its parser's flag and the gauge. */
static void pubsub_mode(struct client *c, int on)
{
    int was = (c->parser.flags & PROTO_PF_SUBSCRIBED) != 0;
    if (on == was)
        return;
    if (on)
        c->parser.flags |= PROTO_PF_SUBSCRIBED;
    else
        c->parser.flags &= ~(uint32_t)PROTO_PF_SUBSCRIBED;
    STATS_ADD(&c->pool->stats, pubsub_clients, on ? 1 : -1);
}

void pubsub_free(struct client *c)
{
    pubsub_mode(c, 0);
    pubsub_destroy(c);
}

size_t pubsub_memory(const struct client *c)
{
    return c->pubsub != NULL ? c->pubsub->mem : 0;
}

void pubsub_counts(const struct client *c, uint32_t *sub, uint32_t *psub, uint32_t *ssub)
{
    const struct pubsub *ps = c->pubsub;
    *sub = ps != NULL ? ps->channels.n : 0;
    *psub = ps != NULL ? ps->npatterns : 0;
    *ssub = ps != NULL ? ps->shards.n : 0;
}

/* Whether pin carries the client's patterns. */
static int pin_has_patterns(const struct pubsub *ps, const struct pubsub_pin *pin)
{
    return ps->npatterns > 0 && (ps->patsrv == NULL || ps->patsrv == pin->srv);
}

/* Let go of every pin that carries nothing and has nothing in flight. */
static void pubsub_release_unused(struct client *c)
{
    struct pubsub *ps = c->pubsub;
    for (uint32_t i = ps->npins; i-- > 0;) {
        struct pubsub_pin *pin = &ps->pins[i];
        if (pin->names == 0 && !pin_has_patterns(ps, pin) && !pin_busy(pin->s)) {
            struct sconn *s = pin->s;
            pin_drop(ps, pin);
            sconn_unpin(s, 1);
        }
    }
}

/* ------------------------------------------------------------------ requests */

/* What one name of a request does: where it goes when it changes something. */
struct pubsub_step {
    struct proto_name name;
    uint64_t          hash;
    struct server    *srv;     /* a channel's server (NULL: a pattern, every pinned one) */
    uint8_t           sent;    /* it changes the client's subscriptions: the servers hear it */
};

/* Answer m here with an error (no subscription changed), counted as forward_refuse counts. */
static void pubsub_fail(struct client *c, struct msg *m, enum proto_err code, const char *why)
{
    forward_refuse(c, m, code, why);
}

/* A pin for server srv (taken now when c has none there); NULL with *reason. */
static struct pubsub_pin *pubsub_pin(struct client *c, struct server *srv, const char **reason)
{
    struct pubsub *ps = c->pubsub;
    struct pubsub_pin *pin = pin_of_server(ps, srv);

    if (pin != NULL)
        return pin;
    if (ps->npins == ps->pincap) {
        uint32_t cap = ps->pincap ? ps->pincap * 2 : 4;
        struct pubsub_pin *g = realloc(ps->pins, cap * sizeof(*g));
        if (g == NULL) {
            *reason = "out of memory";
            return NULL;
        }
        ps->pins = g;
        ps->pincap = cap;
    }
    struct sconn *s = server_pin(srv, &c->holder, (c->parser.flags & PROTO_PF_VARIANT) != 0,
                                 reason);
    if (s == NULL)
        return NULL;
    s->parser.flags |= PROTO_PF_SUBSCRIBED;
    pin = &ps->pins[ps->npins++];
    pin->srv = srv;
    pin->s = s;
    pin->names = 0;
    return pin;
}

/*
 * Plan: each name's server (a new channel's owner, which must be up; the server an
 * existing one is subscribed on), and a pin on every server that may hear of it — for a
 * pattern, every server of the pool. Nothing changes yet. 0, or -1 with m answered.
 */
static int pubsub_plan(struct client *c, struct msg *m, uint8_t sub, struct pubsub_step *st,
                       uint32_t n)
{
    struct pubsub *ps = c->pubsub;
    struct wpool *pool = c->pool;
    uint8_t cls = sub & PROTO_SUB_CLASS;
    int unsub = (sub & PROTO_SUB_UNSUB) != 0;
    const char *reason = NULL;
    int patterns = 0;
    uint32_t slot0 = 0;

    for (uint32_t i = 0; i < n; i++) {
        st[i].srv = NULL;
        if (cls == PROTO_SUB_PATTERN) {
            patterns = 1;
            continue;
        }
        if (cls == PROTO_SUB_SHARD && pool->view.cluster != NULL) {
            /* Redis Cluster refuses shard channels of two slots in one command */
            struct route_key rk = { .bytes = st[i].name.bytes, .len = st[i].name.len };
            route_key_place(&pool->view, &rk);
            if (i == 0)
                slot0 = route_key_slot(&rk);
            else if (route_key_slot(&rk) != slot0) {
                pubsub_fail(c, m, PROTO_ERR_CROSSSLOT_SLOT, NULL);
                return -1;
            }
        }
        struct pubsub_set *t = cls == PROTO_SUB_SHARD ? &ps->shards : &ps->channels;
        struct pubsub_name *e = set_find(t, st[i].hash, st[i].name.bytes, st[i].name.len);
        if (e != NULL) {
            st[i].srv = e->srv;
            continue;
        }
        if (unsub)
            continue;               /* not subscribed: nothing to tell anyone */
        struct route_key rk = { .bytes = st[i].name.bytes, .len = st[i].name.len };
        struct route rt;
        route_key_place(&pool->view, &rk);
        route_channel(&pool->view, &rk, &rt);
        if (rt.probe != ROUTE_NONE && health_try_probe(pool->view.health[rt.probe], util_now_ms()))
            server_probe(pool->servers[rt.probe]);
        if (rt.kind != ROUTE_SEND) {
            char why[300];
            snprintf(why, sizeof(why), "server %s is down", pool->servers[rt.down]->label);
            pubsub_fail(c, m, PROTO_ERR_DOWN, why);
            return -1;
        }
        st[i].srv = pool->servers[rt.to[0]];
    }
    uint32_t had = ps->npins;
    for (uint32_t i = 0; i < n; i++)
        if (st[i].srv != NULL && pubsub_pin(c, st[i].srv, &reason) == NULL)
            goto refused;
    if (patterns && !unsub && pool->view.cluster != NULL) {
        if (ps->patsrv == NULL || ps->npatterns == 0) {
            /* the first pattern: the node of its slot (clients spread over the masters) */
            struct route_key rk = { .bytes = st[0].name.bytes, .len = st[0].name.len };
            struct route rt;
            route_key_place(&pool->view, &rk);
            route_channel(&pool->view, &rk, &rt);
            if (rt.kind != ROUTE_SEND) {
                char why[300];
                snprintf(why, sizeof(why), "server %s is down", pool->servers[rt.down]->label);
                pubsub_fail(c, m, PROTO_ERR_DOWN, why);
                goto unpin;
            }
            ps->patsrv = pool->servers[rt.to[0]];
        }
        if (pubsub_pin(c, ps->patsrv, &reason) == NULL)
            goto refused;
    } else if (patterns && !unsub) {
        for (uint32_t k = 0; k < pool->nservers; k++)
            if (pubsub_pin(c, pool->servers[k], &reason) == NULL)
                goto refused;
    }
    return 0;

refused:
    pubsub_fail(c, m, PROTO_ERR_SERVER, reason != NULL ? reason : "no connection");
unpin:
    /* the pins taken for this request go back (nothing was sent on them) */
    while (ps->npins > had) {
        struct sconn *s = ps->pins[ps->npins - 1].s;
        ps->npins--;
        sconn_unpin(s, 1);
    }
    if (ps->npatterns == 0)
        ps->patsrv = NULL;
    return -1;
}

/*
 * Apply the names in order, as Redis does, writing each confirmation into m's reply with
 * the client's count after it; mark those that change something. Removed names are kept
 * in gone[] (NULL-terminated: their bytes are still to be sent) for the caller to free. 0
 * or -ENOMEM (the client must then be closed: its state is half changed).
 */
static int pubsub_apply(struct client *c, struct msg *m, uint8_t sub, int variant,
                        struct pubsub_step *st, uint32_t n, struct pubsub_name **gone)
{
    const struct proto_ops *ops = c->pool->ops;
    struct pubsub *ps = c->pubsub;
    uint8_t cls = sub & PROTO_SUB_CLASS;
    int unsub = (sub & PROTO_SUB_UNSUB) != 0;
    struct pubsub_set *t = cls == PROTO_SUB_SHARD ? &ps->shards : &ps->channels;
    uint32_t ngone = 0;

    gone[0] = NULL;
    for (uint32_t i = 0; i < n; i++) {
        const struct proto_name *nm = &st[i].name;
        st[i].sent = 0;
        if (cls == PROTO_SUB_PATTERN) {
            uint32_t at = 0;
            while (at < ps->npatterns && !name_is(ps->patterns[at], st[i].hash, nm->bytes, nm->len))
                at++;
            if (!unsub && at == ps->npatterns) {
                if (ps->npatterns == ps->patcap) {
                    uint32_t cap = ps->patcap ? ps->patcap * 2 : 8;
                    struct pubsub_name **g = realloc(ps->patterns, cap * sizeof(*g));
                    if (g == NULL)
                        return -ENOMEM;
                    ps->mem += (size_t)(cap - ps->patcap) * sizeof(*g);
                    ps->patterns = g;
                    ps->patcap = cap;
                }
                struct pubsub_name *e = name_new(ps, st[i].hash, nm->bytes, nm->len, NULL);
                if (e == NULL)
                    return -ENOMEM;
                ps->patterns[ps->npatterns++] = e;
                st[i].sent = 1;
            } else if (unsub && at < ps->npatterns) {
                gone[ngone++] = ps->patterns[at];
                gone[ngone] = NULL;
                memmove(ps->patterns + at, ps->patterns + at + 1,
                        (ps->npatterns - at - 1) * sizeof(*ps->patterns));
                ps->npatterns--;
                st[i].sent = 1;
            }
        } else if (!unsub) {
            if (set_reserve(ps, t) < 0)
                return -ENOMEM;
            uint32_t at = set_probe(t, st[i].hash, nm->bytes, nm->len);
            if (t->slot[at] == NULL) {
                struct pubsub_name *e = name_new(ps, st[i].hash, nm->bytes, nm->len, st[i].srv);
                if (e == NULL)
                    return -ENOMEM;
                t->slot[at] = e;
                t->n++;
                pin_of_server(ps, st[i].srv)->names++;
                st[i].sent = 1;
            }
        } else if (t->cap > 0) {
            uint32_t at = set_probe(t, st[i].hash, nm->bytes, nm->len);
            struct pubsub_name *e = t->slot[at];
            if (e != NULL) {
                gone[ngone++] = e;
                gone[ngone] = NULL;
                set_remove_at(t, at);
                struct pubsub_pin *pin = pin_of_server(ps, e->srv);
                if (pin != NULL)
                    pin->names--;
                st[i].srv = e->srv;
                st[i].sent = 1;
            }
        }
        if (ops->sub_reply(sub, variant, nm->bytes, nm->len, count_of(ps, cls), &m->rsp) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* Tell each pinned server its part: one fragment of m per server with names for it. */
static int pubsub_send(struct client *c, struct msg *m, uint8_t sub, const struct pubsub_step *st,
                       uint32_t n)
{
    struct worker *w = c->w;
    struct pubsub *ps = c->pubsub;
    const struct proto_ops *ops = c->pool->ops;
    int pattern = (sub & PROTO_SUB_CLASS) == PROTO_SUB_PATTERN;
    uint32_t nfrag = 0, nsent = 0;
    struct proto_name *names = NULL;

    for (uint32_t i = 0; i < n; i++)
        nsent += st[i].sent;
    if (nsent == 0)
        return 0;
    m->frags = calloc(ps->npins, sizeof(*m->frags) + sizeof(struct buf *));
    names = malloc(nsent * sizeof(*names));
    if (m->frags == NULL || names == NULL)
        goto nomem;
    m->flags |= MSG_F_BUILT;
    for (uint32_t p = 0; p < ps->npins; p++) {
        struct pubsub_pin *pin = &ps->pins[p];
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++)
            if (st[i].sent && (pattern ? ps->patsrv == NULL || ps->patsrv == pin->srv
                                       : st[i].srv == pin->srv))
                names[k++] = st[i].name;
        if (k == 0)
            continue;
        struct msg *fm = msg_get(w);
        if (fm == NULL)
            goto nomem;
        struct buf *out = &pin->s->conn.obuf;
        size_t before = buf_len(out);
        if (ops->sub_write(sub, names, k, out) < 0) {
            buf_truncate(out, before);
            msg_put(w, fm);
            goto nomem;
        }
        fm->role = MSG_FRAG;
        fm->parent = m;
        fm->cmd = m->cmd;
        fm->rflags = m->rflags;
        fm->nkeys = k;                      /* one confirmation per name */
        fm->start_us = m->start_us;
        fm->req_bytes = buf_len(out) - before;
        m->frags[nfrag++] = fm;
        m->nfrag = nfrag;
        m->nfrag_pending++;
        STATS_ADD(&pin->srv->stats, requests, 1);
        STATS_ADD(&pin->srv->stats, request_bytes, fm->req_bytes);
        sconn_enqueue(pin->s, fm);
        sconn_mark(w, pin->s);
    }
    STATS_ADD(&c->pool->stats, fragments, nfrag);
    free(names);
    return 0;
nomem:
    free(names);
    return -ENOMEM;
}

void pubsub_request(struct client *c, struct msg *m, const struct proto_req *req, const char *buf)
{
    const struct proto_ops *ops = c->pool->ops;
    uint8_t sub = req->sub, cls = sub & PROTO_SUB_CLASS;
    int unsub = (sub & PROTO_SUB_UNSUB) != 0;
    int variant = (req->flags & PROTO_RF_VARIANT) != 0;
    struct pubsub_step *st = NULL;
    struct pubsub_name **gone = NULL;
    uint32_t n;

    if (ops->sub_write == NULL || ops->sub_reply == NULL) {
        forward_refuse_command(c, m, PROTO_ERR_SERVER, "pub/sub is not supported by this protocol");
        return;
    }
    if (c->pubsub == NULL && (c->pubsub = calloc(1, sizeof(*c->pubsub))) == NULL)
        goto nomem;
    struct pubsub *ps = c->pubsub;

    /* the names: the request's, or for a mass unsubscription every one of the class */
    struct pubsub_set *t = cls == PROTO_SUB_SHARD ? &ps->shards : &ps->channels;
    n = req->nkeys > 0 ? req->nkeys : cls == PROTO_SUB_PATTERN ? ps->npatterns : t->n;
    if (req->nkeys == 0 && (!unsub || n == 0)) {
        /* nothing to drop: Redis still confirms, with a null name */
        if (ops->sub_reply(sub, variant, NULL, 0, count_of(ps, cls), &m->rsp) < 0)
            goto nomem;
        goto done;
    }
    st = malloc((size_t)n * sizeof(*st));
    gone = malloc(((size_t)n + 1) * sizeof(*gone));
    if (st == NULL || gone == NULL)
        goto nomem;
    if (req->nkeys > 0) {
        char dec[PROTO_KEY_DECODED_MAX];
        for (uint32_t i = 0; i < n; i++) {
            struct route_key rk;
            forward__key(c->pool, req, buf, i, dec, &rk);
            st[i].name.bytes = rk.bytes;
            st[i].name.len = (uint32_t)rk.len;
        }
    } else if (cls == PROTO_SUB_PATTERN) {
        for (uint32_t i = 0; i < n; i++) {
            st[i].name.bytes = ps->patterns[i]->bytes;
            st[i].name.len = ps->patterns[i]->len;
        }
    } else {
        for (uint32_t i = 0, k = 0; i < t->cap; i++)
            if (t->slot[i] != NULL) {
                st[k].name.bytes = t->slot[i]->bytes;
                st[k].name.len = t->slot[i]->len;
                k++;
            }
    }
    for (uint32_t i = 0; i < n; i++)
        st[i].hash = name_hash(st[i].name.bytes, st[i].name.len);
    if (pubsub_plan(c, m, sub, st, n) < 0)
        goto out;                       /* answered */
    if (pubsub_apply(c, m, sub, variant, st, n, gone) < 0 || pubsub_send(c, m, sub, st, n) < 0)
        goto broken;
    for (uint32_t i = 0; gone[i] != NULL; i++)
        name_free(ps, gone[i]);
done:
    if (ps->npatterns == 0)
        ps->patsrv = NULL;
    /* Redis: any subscription command enters subscribed mode; it ends with the last name */
    pubsub_mode(c, !unsub || count_total(ps) > 0);
    pubsub_release_unused(c);
    if (m->nfrag_pending == 0) {
        c->held_bytes += buf_len(&m->rsp);
        msg_complete(c->w, m);
    }
    if (count_total(ps) == 0 && ps->npins == 0)
        pubsub_destroy(c);              /* an ordinary client again */
out:
    free(st);
    free(gone);
    return;

broken:
    /* Half applied: the client's subscriptions are no longer what the servers hold. */
    log_warn("pool '%s': client %s closed: out of memory changing its subscriptions",
             c->pool->cp->name, c->pc.peer);
    for (uint32_t i = 0; gone[i] != NULL; i++)
        name_free(c->pubsub, gone[i]);
    free(st);
    free(gone);
    c->eof = 1;
    c->closing = 1;
    c->mops->advance(c);
    return;
nomem:
    free(st);
    free(gone);
    pubsub_fail(c, m, PROTO_ERR_NOMEM, "out of memory");
}

/* ------------------------------------------------------------------ messages */

/* The client's request that waits on s for a reply: a message s sent before that reply
 * belongs before it in the client's stream. NULL: none waits on s. */
static struct msg *pubsub_waiting_on(const struct sconn *s)
{
    struct qnode *n;
    QUEUE_FOREACH(n, &s->sent) {
        struct msg *m = QUEUE_DATA(n, struct msg, sq);
        if (m->role == MSG_FRAG && m->parent != NULL)
            return m->parent;
        if (m->role == MSG_REQUEST)
            return m;
    }
    return NULL;
}

/* A subscriber over its output limits (Redis's client-output-buffer-limit pubsub): 1 when
 * it was closed. */
static int pubsub_over_limit(struct client *c)
{
    const struct conf_global *g = &c->w->snap->conf->global;
    struct pubsub *ps = c->pubsub;
    uint64_t pending = conn_output(&c->conn) + c->held_bytes;
    uint64_t now = uv_now(&c->w->loop);
    int over = g->pubsub_output_limit > 0 && pending > g->pubsub_output_limit;

    if (!over && c->mops->memory_over(c)) {
        /* Messages it does not read are what puts the proxy over memory_limit. */
        STATS_ADD(&c->pool->stats, memory_refused, 1);
        log_warn("pool '%s': subscriber %s closed: %" PRIu64 " bytes of messages unread and "
                 "memory_limit reached", c->pool->cp->name, c->pc.peer, pending);
        c->mops->close(c);
        return 1;
    }

    if (!over && g->pubsub_output_soft_limit > 0 && pending > g->pubsub_output_soft_limit) {
        if (ps->soft_since_ms == 0)
            ps->soft_since_ms = now;
        over = now - ps->soft_since_ms >= (uint64_t)g->pubsub_output_soft_s * 1000u;
    } else if (!over) {
        ps->soft_since_ms = 0;
    }
    if (!over)
        return 0;
    STATS_ADD(&c->pool->stats, pubsub_closed, 1);
    log_warn("pool '%s': subscriber %s closed: %" PRIu64 " bytes of messages unread "
             "(pubsub_output_limit)", c->pool->cp->name, c->pc.peer, pending);
    c->mops->close(c);
    return 1;
}

/* Write p[0..n) into out for c: a server's push rewritten for its variant (push), or
 * bytes already in it. 0 or -ENOMEM. */
static int stream_write(struct client *c, int push, const char *p, size_t n, struct buf *out)
{
    if (push && __builtin_expect(c->cu.fl & USERS_F_NS, 0)) {
        /* the namespace off the channel names first (users.c) */
        struct buf plain = { 0 };
        int rc = users_push(c, p, n, &plain);
        if (rc == 1)
            rc = c->pool->ops->push_write((c->parser.flags & PROTO_PF_VARIANT) != 0,
                                          buf_rptr(&plain), buf_len(&plain), out);
        else if (rc == 0)
            rc = c->pool->ops->push_write((c->parser.flags & PROTO_PF_VARIANT) != 0, p, n, out);
        buf_free(&plain);
        return rc;
    }
    if (push)
        return c->pool->ops->push_write((c->parser.flags & PROTO_PF_VARIANT) != 0, p, n, out);
    return buf_append(out, p, n);
}

/* Put p[0..n), which server connection s sent, into c's stream where it belongs: after
 * every reply c is owed before it (pubsub_waiting_on). c is closed when memory fails. */
static void pubsub_stream(struct client *c, struct sconn *s, int push, const char *p, size_t n)
{
    struct msg *before = pubsub_waiting_on(s);
    struct qnode *head = queue_first(&c->msgs);

    if (head == NULL || (before != NULL && &before->cq == head)) {
        /* nothing owed before it: straight out */
        if (stream_write(c, push, p, n, &c->conn.obuf) < 0) {
            c->mops->close(c);
            return;
        }
        client_mark(c->w, c);
    } else {
        /* just before the request it precedes (inserting at a node's tail puts it before
         * that node), else at the end; into the messages already waiting there, if any
         * (a flood behind one blocked request is one buffer, not a message per push) */
        struct qnode *at = before != NULL ? &before->cq : &c->msgs;
        struct msg *pm = at->prev != &c->msgs ? QUEUE_DATA(at->prev, struct msg, cq) : NULL;
        if (pm != NULL && (pm->flags & MSG_F_PUSHES) && pm->state == MSG_DONE) {
            size_t had = buf_len(&pm->rsp);
            if (stream_write(c, push, p, n, &pm->rsp) < 0) {
                c->mops->close(c);
                return;
            }
            c->held_bytes += buf_len(&pm->rsp) - had;
            msg_charge(pm);
        } else {
            pm = msg_get(c->w);
            if (pm == NULL || stream_write(c, push, p, n, &pm->rsp) < 0) {
                if (pm != NULL)
                    msg_put(c->w, pm);
                c->mops->close(c);
                return;
            }
            pm->role = MSG_REQUEST;
            pm->state = MSG_DONE;
            pm->cmd = UINT16_MAX;           /* no command's (introspect.c counts none) */
            pm->start_us = worker_now_us(c->w);
            pm->flags |= MSG_F_PUSHES;
            pm->client = c;
            c->held_bytes += buf_len(&pm->rsp);
            queue_insert_tail(at, &pm->cq);
            c->nmsgs++;
            msg_charge(pm);
        }
    }
    pubsub_over_limit(c);
}

void pubsub_message(struct sconn *s, const char *p, size_t n)
{
    struct client *c = s->pinned ? CONN_OWNER(s->pinned, struct client, holder) : NULL;

    if (c == NULL || c->closing || c->pubsub == NULL || conn_closing(&c->conn))
        return;             /* let go of, awaiting its reset: nobody's any more */
    STATS_ADD(&c->pool->stats, pubsub_messages, 1);
    pubsub_stream(c, s, 1, p, n);
}

int pubsub_dropped(struct sconn *s, const struct proto_name *nm)
{
    struct client *c = s->pinned ? CONN_OWNER(s->pinned, struct client, holder) : NULL;

    if (c == NULL || c->pubsub == NULL)
        return 0;
    /* A name the client unsubscribed from left the set when it asked (pubsub_request):
     * one still there, on this server, is the server's own drop (its slot moved), even
     * while a SUNSUBSCRIBE of other names waits for its confirmations. */
    struct pubsub *ps = c->pubsub;
    struct pubsub_set *t = &ps->shards;
    uint64_t h = name_hash(nm->bytes, nm->len);
    if (t->cap == 0)
        return 0;
    uint32_t at = set_probe(t, h, nm->bytes, nm->len);
    struct pubsub_name *e = t->slot[at];
    if (e == NULL || e->srv != s->server)
        return 0;
    set_remove_at(t, at);
    struct pubsub_pin *pin = pin_of_conn(ps, s);
    if (pin != NULL)
        pin->names--;
    STATS_ADD(&c->pool->stats, pubsub_dropped, 1);
    cworker_slot_left(s->server);       /* the slot moved: the client may resubscribe */
    struct buf out;
    buf_init(&out);
    int rc = c->pool->ops->sub_reply(PROTO_SUB_SHARD | PROTO_SUB_UNSUB,
                                     (c->parser.flags & PROTO_PF_VARIANT) != 0, e->bytes,
                                     e->len, count_of(ps, PROTO_SUB_SHARD), &out);
    name_free(ps, e);
    if (count_total(ps) == 0)
        pubsub_mode(c, 0);      /* as Redis: the last subscription gone ends subscribed mode */
    if (c->closing || conn_closing(&c->conn)) {
        /* nobody to tell */
    } else if (rc < 0) {
        c->mops->close(c);
    } else {
        pubsub_stream(c, s, 0, buf_rptr(&out), buf_len(&out));
    }
    buf_free(&out);
    if (c->pubsub == NULL || conn_closing(&c->conn))
        return 1;               /* closed meanwhile: its pins went with it */
    pin = pin_of_conn(ps, s);
    if (pin != NULL && pin->names == 0 && !pin_has_patterns(ps, pin) && !pin_busy(s)) {
        pin_drop(ps, pin);
        sconn_unpin(s, 1);
        if (count_total(ps) == 0 && ps->npins == 0)
            pubsub_destroy(c);
    }
    return 1;
}

/* ------------------------------------------------------------------ connections */

int pubsub_pin_idle(struct client *c, struct sconn *s)
{
    struct pubsub *ps = c->pubsub;
    struct pubsub_pin *pin = ps != NULL ? pin_of_conn(ps, s) : NULL;

    if (pin == NULL)
        return 0;
    if (pin->names == 0 && !pin_has_patterns(ps, pin)) {
        pin_drop(ps, pin);
        sconn_unpin(s, 1);
        if (count_total(ps) == 0 && ps->npins == 0 && !(c->parser.flags & PROTO_PF_SUBSCRIBED))
            pubsub_destroy(c);
    }
    return 1;
}

int pubsub_pin_lost(struct client *c, struct sconn *s)
{
    struct pubsub *ps = c->pubsub;
    struct pubsub_pin *pin = ps != NULL ? pin_of_conn(ps, s) : NULL;

    if (pin == NULL)
        return 0;
    pin_drop(ps, pin);
    if (c->closing || c->eof)
        return 1;
    STATS_ADD(&c->pool->stats, pubsub_closed, 1);
    log_warn("pool '%s': subscriber %s closed: its connection to server '%s' was lost, and "
             "the subscriptions there with it", c->pool->cp->name, c->pc.peer, s->server->label);
    /* A last reply after what it is owed (a subscription in flight elsewhere is answered
     * first, its failure if it had a part here), then the close; nothing more is read. */
    char why[300];
    snprintf(why, sizeof(why), "connection to server %s lost with the subscriptions there",
             s->server->label);
    c->mops->end(c, PROTO_ERR_SERVER, why);
    return 1;
}

void pubsub_reset(struct client *c)
{
    struct pubsub *ps = c->pubsub;

    if (ps != NULL) {
        while (ps->npins > 0) {
            struct sconn *s = ps->pins[ps->npins - 1].s;
            ps->npins--;
            sconn_unpin(s, 1);
        }
    }
    pubsub_free(c);
}

static int pool_has_server(const struct wpool *pool, const struct server *srv)
{
    for (uint32_t i = 0; i < pool->nservers; i++)
        if (pool->servers[i] == srv)
            return 1;
    return 0;
}

/*
 * Whether the client's subscriptions are where the pool (after a reload) places them. In
 * a cluster pool (whose map changes arrive as reloads) a channel or the patterns stay
 * right on any node still in the cluster, which hears every PUBLISH; a shard channel
 * whose slot left its node is ended by that node itself (`sunsubscribe`, which
 * pubsub_dropped passes on), so it too needs only its node to stay.
 */
static int pubsub_placed(struct client *c, int kind_changed)
{
    struct pubsub *ps = c->pubsub;
    struct wpool *pool = c->pool;
    const struct pubsub_set *sets[2] = { &ps->channels, &ps->shards };
    int cluster = pool->view.cluster != NULL;

    /* Plain and cluster pools place subscriptions differently (a pattern is on every
     * server of a plain pool, on one node of a cluster): none stays right across. */
    if (kind_changed)
        return 0;
    for (uint32_t i = 0; i < ps->npins; i++)
        if (ps->pins[i].srv->removed)
            return 0;
    if (cluster && ps->npatterns > 0 && (ps->patsrv == NULL || !pool_has_server(pool, ps->patsrv)))
        return 0;
    for (int k = 0; k < 2; k++)
        for (uint32_t i = 0; i < sets[k]->cap; i++) {
            struct pubsub_name *e = sets[k]->slot[i];
            if (e == NULL)
                continue;
            if (cluster) {
                if (!pool_has_server(pool, e->srv))
                    return 0;
                continue;
            }
            struct route_key rk = { .bytes = e->bytes, .len = e->len };
            route_key_place(&pool->view, &rk);
            if (rk.owner >= pool->nservers || pool->servers[rk.owner] != e->srv)
                return 0;
        }
    if (ps->npatterns > 0 && !cluster) {
        if (ps->npins != pool->nservers)
            return 0;
        for (uint32_t i = 0; i < pool->nservers; i++)
            if (pin_of_server(ps, pool->servers[i]) == NULL)
                return 0;
    }
    return 1;
}

void pubsub_refresh(struct client *c, int kind_changed)
{
    if (c->pubsub == NULL || c->closing || pubsub_placed(c, kind_changed))
        return;
    STATS_ADD(&c->pool->stats, pubsub_closed, 1);
    log_notice("pool '%s': subscriber %s closed: a reload moved its channels (it may "
               "resubscribe at once)", c->pool->cp->name, c->pc.peer);
    /* closed by the end-of-round flush once its output is written: the reload walks the
     * clients, so not here */
    c->eof = 1;
    c->closing = 1;
    c->mops->advance(c);
}
