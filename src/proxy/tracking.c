/* Client-side caching for the proxy's clients: CLIENT TRACKING state, the keys tracking clients read, and the invalidations they are owed, from every server of the pool. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "conf/conf.h"
#include "lib/keytab.h"
#include "lib/log.h"
#include "lib/util.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "proxy/client.h"
#include "proxy/hub.h"
#include "proxy/msg.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/stage.h"
#include "proxy/tracking.h"
#include "proxy/users.h"
#include "proxy/worker.h"

/*
 * docs/nearcache.md ("Client-side caching through the proxy") is the user's page; this
 * is how it is built.
 *
 * A client that turns CLIENT TRACKING on gets a struct trk_client (reference counted:
 * the client holds one reference, every key entry naming it one more, so that a closed
 * client's entries are dropped lazily, as Redis drops them).
 *
 * Per worker (struct trk_worker): a table of keys that tracking clients in default mode
 * (or OPTIN/OPTOUT, per CLIENT CACHING) read through this worker, each with the clients
 * that read it; the list of tracking clients (the BCAST ones match keys by their
 * prefixes); and an inbox other workers post invalidations to for a REDIRECT target that
 * lives here.
 *
 * Per pool and worker (struct trk_pool): one connection of its own to each server of the
 * pool, RESP3, with `CLIENT TRACKING on BCAST` (no prefix: every key the server
 * changes, in any database), opened when a client of the worker turns tracking on and
 * released when none is left. The server pushes `>invalidate [keys]` for every write it
 * executes (batched per event loop), or `>invalidate _` on a flush.
 *
 * Why BCAST on the server and the keys table in the proxy, not the clients' reads sent
 * on a tracking connection (as the near cache's fills are): a tracking client's reads
 * stay on the shared connections, in their RESP2 or RESP3 shapes, for every read command
 * (MGET split over servers, reads in a transaction), with no second connection per
 * protocol and no REDIRECT between the proxy's own connections; what the server
 * invalidates is what it changed, and the proxy decides which of its clients read it.
 * The cost: each server sends every changed key to each worker with tracking clients.
 *
 * The race (a read answered with v1, a write of the key, the write's invalidation read
 * by the proxy before the read's reply): a key is remembered when its read is forwarded,
 * so an invalidation read later names it; and an invalidation is put in the client's
 * stream after every reply the client is owed at that moment, so the client reads v1
 * and then the invalidation, never the other way round.
 *
 * Writes through the proxy invalidate at once, in this worker (before they are
 * forwarded; for the writer itself after its reply, as Redis 7.0 orders them), and the
 * server's own invalidation of the write follows on the tracking connection. For
 * default-mode clients that second one finds the key gone from the table (unless read
 * again meanwhile: then it is sent, one more invalidation than Redis would send). For
 * BCAST clients it is skipped for a client that has read nothing since the local one
 * (an `echo` record per key: the client cannot hold a value that needs it), so a write
 * through the proxy gives a BCAST client one invalidation, as Redis does.
 *
 * A tracking connection that is not acknowledged yet when a client turns tracking on
 * holds that client's input, and the command's +OK, until it is (or fails), so that no
 * read of the client runs on a server before the server tracks the proxy's connection,
 * and no write another client sends after the +OK goes unreported. A read of a key whose
 * server's tracking connection is not on (lost, being re-opened) marks that server; its
 * next acknowledgment flushes every tracking client of the worker, as does the loss of
 * a tracking connection that was on, a flush through the proxy or on a server, and a
 * pool's ring change.
 */

#define TRK_MAX_KEYS        (1u << 18)  /* keys remembered per worker: past it, the oldest
                                         * is invalidated (Redis: tracking-table-max-keys) */
#define TRK_ECHO_MAX        4096        /* writes through the proxy awaiting their echo */
#define TRK_TAB_MIN         64
#define TRK_RETRY_MS        1000        /* a tracking connection refused or lost */
#define TRK_OWN_TIMEOUT_MS  5000        /* its CLIENT TRACKING in a pool without a timeout */

enum trk_state { TRK_NONE, TRK_ASKED, TRK_ON };

struct trk_worker;
struct trk_pool;

struct trk_client {
    struct client     *c;           /* NULL once the client closed */
    struct trk_worker *tw;
    uint32_t           refs;
    uint32_t           opts;        /* PROTO_TRK_* */
    uint8_t            on;
    uint8_t            broken;      /* its REDIRECT target was gone at a send */
    uint8_t            flushed;     /* the last thing sent was a flush, and no read since */
    uint8_t            held;        /* on its pool's holds: input waits for tracking */
    uint8_t            owe_next;    /* held by the CLIENT TRACKING being answered now */
    struct msg        *owed;        /* that command's +OK, sent when the hold ends */
    struct msg_watch   owed_watch;  /* ... told if the client leaves first */
    uint64_t           caching_at;  /* c->nreq of its CLIENT CACHING (0: none) */
    int64_t            redirect;    /* 0: its own connection */
    uint64_t           read_seq;    /* tw->seq at its last tracked read */
    char             **pre;         /* BCAST prefixes */
    uint32_t          *plen;
    uint32_t           npre;
    struct qnode       link;        /* tw->clients, while on */
    struct qnode       hold_link;   /* tp->holds */
    struct trk_pool   *hold_tp;
};

struct trk_key {
    struct keytab_node  node;       /* tw->keys */
    struct qnode        age;        /* tw->ages: oldest first */
    struct trk_client **who;
    uint32_t            nwho, capwho;
    char                key[];
};

struct trk_echo {
    struct keytab_node node;        /* tw->echoes */
    struct qnode       age;
    uint64_t           seq;         /* tw->seq when the write was forwarded */
    char               key[];
};

struct trk_worker {
    struct worker   *w;
    struct qnode     clients;       /* trk_client.link: tracking on */
    uint32_t         nclients;
    uint32_t         nbcast;        /* ... of which in BCAST mode */
    uint64_t         seq;
    struct keytab    keys;          /* struct trk_key */
    struct qnode     ages;
    struct keytab    echoes;        /* struct trk_echo */
    struct qnode     eages;
    struct qnode     pools;         /* trk_pool.link */
    uv_mutex_t       mu;            /* the inbox: any worker posts */
    struct buf       inbox;         /* [u64 id][u32 len][bytes] ... */
};

struct trk_srv {
    struct sconn_holder holder;
    struct msg_watch    tw;
    struct trk_pool    *tp;
    struct server      *srv;
    struct sconn       *pin;
    uint64_t            retry_ms;
    uint8_t             state;      /* enum trk_state */
    uint8_t             unsafe;     /* a key of it was read while not on */
};

struct trk_pool {
    struct wpool      *pool;
    struct trk_worker *tw;
    struct qnode       link;        /* tw->pools */
    uint32_t           refs;        /* the pool's, one per CLIENT TRACKING in flight */
    int                dead;
    struct qnode       holds;       /* trk_client.hold_link */
    uint32_t           nts;
    struct trk_srv    *ts;
};

static struct trk_worker *trk_of(const struct worker *w)
{
    return w->trk;
}

/* ------------------------------------------------------------------ messages */

static int trk_v3(const struct client *c)
{
    return (c->parser.flags & PROTO_PF_VARIANT) != 0;
}

/* Put p[0..n) in c's stream after every reply c is owed now (a push waits its turn). */
static void trk_deliver(struct client *c, const char *p, size_t n)
{
    if (c->closing || conn_closing(&c->conn))
        return;
    if (queue_empty(&c->msgs)) {
        if (buf_append(&c->conn.obuf, p, n) < 0) {
            c->mops->close(c);
            return;
        }
        client_mark(c->w, c);
        return;
    }
    struct msg *pm = QUEUE_DATA(c->msgs.prev, struct msg, cq);
    if ((pm->flags & MSG_F_PUSHES) && pm->state == MSG_DONE) {
        if (buf_append(&pm->rsp, p, n) < 0) {
            c->mops->close(c);
            return;
        }
        c->held_bytes += n;
        msg_charge(pm);
        return;
    }
    pm = msg_get(c->w);
    if (pm == NULL || buf_append(&pm->rsp, p, n) < 0) {
        if (pm != NULL)
            msg_put(c->w, pm);
        c->mops->close(c);
        return;
    }
    pm->role = MSG_REQUEST;
    pm->state = MSG_DONE;
    pm->flags |= MSG_F_PUSHES;
    pm->client = c;
    c->held_bytes += n;
    queue_insert_tail(&c->msgs, &pm->cq);
    c->nmsgs++;
    msg_charge(pm);
}

/* The client with this id on w, or NULL. */
static struct client *trk_local_client(struct worker *w, uint64_t id)
{
    struct qnode *q;
    QUEUE_FOREACH(q, &w->clients) {
        struct client *c = QUEUE_DATA(q, struct client, link);
        if (c->pc.id == id)
            return c->closing ? NULL : c;
    }
    return NULL;
}

/*
 * An invalidation for client `to`, formatted for it: `arr` a RESP array of keys, or
 * (n 0) a flush; `redirected`: to is another client's REDIRECT target. A RESP3 client
 * gets a push; a RESP2 target a `message` on __redis__:invalidate when it is subscribed
 * (Redis's CLIENT_PUBSUB), else nothing; a RESP2 client nothing on its own connection.
 */
static void trk_emit(struct client *to, const char *arr, size_t n, int redirected)
{
    char head[64];
    int v3 = trk_v3(to);
    const char *h;

    if (v3)
        h = ">2\r\n$10\r\ninvalidate\r\n";
    else if (redirected && ((to->parser.flags & PROTO_PF_SUBSCRIBED) || to->pubsub != NULL))
        h = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n";
    else
        return;
    const char *null = v3 ? "_\r\n" : "$-1\r\n";     /* Redis's shared.null */
    size_t hl = strlen(h);
    if (n == 0) {
        memcpy(head, h, hl);
        memcpy(head + hl, null, strlen(null));
        trk_deliver(to, head, hl + strlen(null));
        return;
    }
    struct buf b;
    buf_init(&b);
    if (buf_append(&b, h, hl) == 0 && buf_append(&b, arr, n) == 0)
        trk_deliver(to, buf_rptr(&b), buf_len(&b));
    buf_free(&b);
}

/* Post an invalidation (as trk_emit takes it) for client `id` to the worker that has it:
 * 1 posted, 0 no such client. */
static int trk_post(struct worker *self, uint64_t id, const char *p, size_t n)
{
    struct hub *hub = self->hub;

    if (hub == NULL || hub->workers == NULL)
        return 0;
    for (uint32_t i = 0; i < hub->nworkers; i++) {
        struct worker *w = &hub->workers[i];
        if (w == self || !w->started || atomic_load(&w->stop) || w->trk == NULL)
            continue;
        int found = 0;
        struct qnode *q;
        uv_mutex_lock(&w->clients_mu);
        QUEUE_FOREACH(q, &w->clients) {
            if (QUEUE_DATA(q, struct client, link)->pc.id == id) {
                found = 1;
                break;
            }
        }
        uv_mutex_unlock(&w->clients_mu);
        if (!found)
            continue;
        struct trk_worker *tw = w->trk;
        uint32_t len = (uint32_t)n;
        uv_mutex_lock(&tw->mu);
        if (buf_append(&tw->inbox, &id, sizeof(id)) == 0 &&
            buf_append(&tw->inbox, &len, sizeof(len)) == 0)
            (void)buf_append(&tw->inbox, p, n);
        uv_mutex_unlock(&tw->mu);
        uv_async_send(&w->async);
        return 1;
    }
    return 0;
}

void tracking_inbox(struct worker *w)
{
    struct trk_worker *tw = trk_of(w);
    struct buf b;

    if (tw == NULL)
        return;
    buf_init(&b);
    uv_mutex_lock(&tw->mu);
    buf_swap(&b, &tw->inbox);
    uv_mutex_unlock(&tw->mu);
    const char *p = buf_len(&b) ? buf_rptr(&b) : "";
    size_t n = buf_len(&b), off = 0;
    while (off + 12 <= n) {
        uint64_t id;
        uint32_t len;
        memcpy(&id, p + off, 8);
        memcpy(&len, p + off + 8, 4);
        off += 12;
        if (len > n - off)
            break;
        struct client *c = trk_local_client(w, id);
        if (c != NULL)
            trk_emit(c, p + off, len, 1);
        off += len;
    }
    buf_free(&b);
}

/*
 * An invalidation for tc: keys k[0..n) (lens kl), or a flush (k NULL). Sent as Redis's
 * sendTrackingMessage sends it: to tc itself, or to its REDIRECT target, here or on
 * another worker; a target that is gone marks tc broken and tells it (RESP3)
 * `tracking-redir-broken`.
 */
static void trk_send(struct trk_client *tc, const char *const *k, const uint32_t *kl, uint32_t n)
{
    struct client *c = tc->c;
    struct buf b;

    if (c == NULL || !tc->on)
        return;
    if (k == NULL) {
        if (tc->flushed)
            return;             /* nothing read since the last flush: it holds nothing */
        tc->flushed = 1;
    }
    if (tc->redirect == 0 && !trk_v3(c))
        return;                 /* RESP2 without REDIRECT: Redis sends nothing */
    /* a user sees the keys of its namespace and patterns only, by its own names (as
     * Redis filters BCAST invalidations by the tracking client's ACL key permissions) */
    int user = users_of(c) != NULL;
    uint32_t shown = 0;
    struct buf keys;
    int rc = 0;
    buf_init(&keys);
    buf_init(&b);
    for (uint32_t i = 0; k != NULL && rc == 0 && i < n; i++) {
        const char *nm = k[i];
        size_t nl = kl[i];
        if (user && !users_key_out(c, k[i], kl[i], &nm, &nl))
            continue;
        rc = buf_appendf(&keys, "$%zu\r\n", nl);
        if (rc == 0)
            rc = buf_append(&keys, nm, nl);
        if (rc == 0)
            rc = buf_append(&keys, "\r\n", 2);
        shown++;
    }
    if (k != NULL && shown == 0 && rc == 0) {
        buf_free(&keys);
        return;                 /* none of them is the user's */
    }
    if (k != NULL)
        STATS_ADD(&c->pool->stats, tracking_invalidations, 1);
    else
        STATS_ADD(&c->pool->stats, tracking_flushes, 1);
    if (k != NULL && rc == 0) {
        rc = buf_appendf(&b, "*%" PRIu32 "\r\n", shown);
        if (rc == 0)
            rc = buf_append(&b, buf_len(&keys) ? buf_rptr(&keys) : "", buf_len(&keys));
    }
    buf_free(&keys);
    const char *arr = buf_len(&b) ? buf_rptr(&b) : "";
    if (rc < 0) {
        /* no memory for the keys: a flush says at least as much */
        arr = "";
        buf_truncate(&b, 0);
    }
    if (tc->redirect == 0) {
        trk_emit(c, arr, buf_len(&b), 0);
    } else {
        struct client *to = trk_local_client(c->w, (uint64_t)tc->redirect);
        if (to != NULL) {
            trk_emit(to, arr, buf_len(&b), 1);
        } else if (!trk_post(c->w, (uint64_t)tc->redirect, arr, buf_len(&b))) {
            tc->broken = 1;
            atomic_fetch_or_explicit(&c->pub.trk_flags, PROTO_CL_TRK_BROKEN,
                                     memory_order_relaxed);
            char msg[96];
            int ml = snprintf(msg, sizeof(msg), ">2\r\n$21\r\ntracking-redir-broken\r\n:%" PRId64
                              "\r\n", tc->redirect);
            if (trk_v3(c) && ml > 0 && (size_t)ml < sizeof(msg))
                trk_deliver(c, msg, (size_t)ml);
        }
    }
    buf_free(&b);
}

/* ------------------------------------------------------------------ clients */

static void trk_client_unref(struct trk_client *tc)
{
    if (--tc->refs > 0)
        return;
    for (uint32_t i = 0; i < tc->npre; i++)
        free(tc->pre[i]);
    free(tc->pre);
    free(tc->plen);
    free(tc);
}

static void trk_prefixes_free(struct trk_client *tc)
{
    for (uint32_t i = 0; i < tc->npre; i++)
        free(tc->pre[i]);
    free(tc->pre);
    free(tc->plen);
    tc->pre = NULL;
    tc->plen = NULL;
    tc->npre = 0;
}

/* Whether BCAST client tc's prefixes match the server key k[0..n). The prefixes are the
 * client's names: a namespaced user's are matched after its namespace. */
static int trk_prefix_match(const struct trk_client *tc, const char *k, size_t n)
{
    const struct conf_user *u = tc->c != NULL ? users_of(tc->c) : NULL;
    if (u != NULL && u->ns_len > 0) {
        if (n < u->ns_len || memcmp(k, u->ns, u->ns_len) != 0)
            return 0;
        k += u->ns_len;
        n -= u->ns_len;
    }
    for (uint32_t i = 0; i < tc->npre; i++)
        if (tc->plen[i] <= n && memcmp(tc->pre[i], k, tc->plen[i]) == 0)
            return 1;
    return 0;
}

/* ------------------------------------------------------------------ the keys table */

static struct trk_key *trk_find(const struct trk_worker *tw, uint64_t h, const char *k, size_t n)
{
    struct keytab_node *e = keytab_find(&tw->keys, h, k, n);
    return e != NULL ? KEYTAB_DATA(e, struct trk_key, node) : NULL;
}

static void trk_key_free(struct trk_worker *tw, struct trk_key *e)
{
    keytab_remove(&tw->keys, &e->node);
    queue_remove(&e->age);
    for (uint32_t i = 0; i < e->nwho; i++)
        trk_client_unref(e->who[i]);
    free(e->who);
    free(e);
}

/* Every client that read e's key gets its invalidation (but `skip`: a NOLOOP writer);
 * the key is forgotten. */
static void trk_key_fire(struct trk_worker *tw, struct trk_key *e, const struct trk_client *skip)
{
    const char *k = e->key;
    uint32_t kl = e->node.klen;
    for (uint32_t i = 0; i < e->nwho; i++) {
        struct trk_client *tc = e->who[i];
        if (tc != skip && !(tc->opts & PROTO_TRK_BCAST))
            trk_send(tc, &k, &kl, 1);
    }
    trk_key_free(tw, e);
}

/* tc read key: remembered. Without memory the client gets a flush instead (it may
 * hold a value nobody will invalidate). */
static void trk_remember(struct trk_worker *tw, struct trk_client *tc, const char *k, size_t n)
{
    uint64_t h = XXH3_64bits(k, n);
    struct trk_key *e = trk_find(tw, h, k, n);

    if (e == NULL) {
        while (tw->keys.n >= TRK_MAX_KEYS && !queue_empty(&tw->ages))
            trk_key_fire(tw, QUEUE_DATA(queue_first(&tw->ages), struct trk_key, age), NULL);
        e = calloc(1, sizeof(*e) + n);
        if (e == NULL)
            goto nomem;
        e->node.hash = h;
        e->node.klen = (uint32_t)n;
        memcpy(e->key, k, n);
        keytab_add(&tw->keys, &e->node);
        queue_insert_tail(&tw->ages, &e->age);
    }
    for (uint32_t i = 0; i < e->nwho; i++)
        if (e->who[i] == tc)
            return;
    if (e->nwho == e->capwho) {
        uint32_t cap = e->capwho ? e->capwho * 2 : 2;
        struct trk_client **nw = realloc(e->who, cap * sizeof(*nw));
        if (nw == NULL)
            goto nomem;
        e->who = nw;
        e->capwho = cap;
    }
    e->who[e->nwho++] = tc;
    tc->refs++;
    return;
nomem:
    tc->flushed = 0;
    trk_send(tc, NULL, NULL, 0);
}

/* Every key of the table goes (after a flush was sent to everyone). */
static void trk_forget_all(struct trk_worker *tw)
{
    while (!queue_empty(&tw->ages))
        trk_key_free(tw, QUEUE_DATA(queue_first(&tw->ages), struct trk_key, age));
}

/* A flush for every tracking client of the worker; the table is emptied. */
static void trk_flush_all(struct trk_worker *tw)
{
    struct qnode *q;
    QUEUE_FOREACH(q, &tw->clients)
        trk_send(QUEUE_DATA(q, struct trk_client, link), NULL, NULL, 0);
    trk_forget_all(tw);
}

/* ------------------------------------------------------------------ echoes */

static struct trk_echo *trk_echo_find(const struct trk_worker *tw, uint64_t h, const char *k,
                                      size_t n)
{
    struct keytab_node *e = keytab_find(&tw->echoes, h, k, n);
    return e != NULL ? KEYTAB_DATA(e, struct trk_echo, node) : NULL;
}

static void trk_echo_drop(struct trk_worker *tw, struct trk_echo *e)
{
    keytab_remove(&tw->echoes, &e->node);
    queue_remove(&e->age);
    free(e);
}

static void trk_echo_put(struct trk_worker *tw, const char *k, size_t n, uint64_t seq)
{
    uint64_t h = XXH3_64bits(k, n);
    struct trk_echo *e = trk_echo_find(tw, h, k, n);

    if (e != NULL) {
        e->seq = seq;
        queue_remove(&e->age);
        queue_insert_tail(&tw->eages, &e->age);
        return;
    }
    if (tw->echoes.n >= TRK_ECHO_MAX)   /* a lost record costs one more invalidation, no more */
        trk_echo_drop(tw, QUEUE_DATA(queue_first(&tw->eages), struct trk_echo, age));
    if ((e = calloc(1, sizeof(*e) + n)) == NULL)
        return;
    e->node.hash = h;
    e->node.klen = (uint32_t)n;
    e->seq = seq;
    memcpy(e->key, k, n);
    keytab_add(&tw->echoes, &e->node);
    queue_insert_tail(&tw->eages, &e->age);
}

/* ------------------------------------------------------------------ invalidation */

/*
 * Keys k[0..n) changed: `writer` wrote them through this worker (local: before the
 * write is forwarded), or a server said so (writer NULL). Default-mode readers get one
 * message per key; each BCAST client one message with the keys its prefixes match.
 */
static void trk_changed(struct trk_worker *tw, const char *const *k, const uint32_t *kl,
                        uint32_t n, struct trk_client *writer, int local)
{
    const struct trk_client *skip = writer != NULL && (writer->opts & PROTO_TRK_NOLOOP) ? writer : NULL;
    uint64_t seq = local ? ++tw->seq : 0;
    uint64_t *echo = NULL;

    if (!local && n > 0 && tw->echoes.n > 0 && (echo = calloc(n, sizeof(*echo))) != NULL) {
        for (uint32_t i = 0; i < n; i++) {
            struct trk_echo *e = trk_echo_find(tw, XXH3_64bits(k[i], kl[i]), k[i], kl[i]);
            if (e != NULL) {
                echo[i] = e->seq;
                trk_echo_drop(tw, e);
            }
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t h = XXH3_64bits(k[i], kl[i]);
        struct trk_key *e = trk_find(tw, h, k[i], kl[i]);
        if (e != NULL)
            trk_key_fire(tw, e, skip);
        if (local && tw->nbcast > 0)
            trk_echo_put(tw, k[i], kl[i], seq);
    }
    if (tw->nbcast == 0) {
        free(echo);
        return;
    }
    struct qnode *q;
    const char **mk = NULL;
    uint32_t *ml = NULL;
    QUEUE_FOREACH(q, &tw->clients) {
        struct trk_client *tc = QUEUE_DATA(q, struct trk_client, link);
        if (!(tc->opts & PROTO_TRK_BCAST) || tc == skip)
            continue;
        if (mk == NULL) {
            mk = malloc(n * sizeof(*mk) + 1);
            ml = malloc(n * sizeof(*ml) + 1);
            if (mk == NULL || ml == NULL) {
                trk_send(tc, NULL, NULL, 0);
                free(mk);
                free(ml);
                mk = NULL;
                ml = NULL;
                continue;
            }
        }
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (!trk_prefix_match(tc, k[i], kl[i]))
                continue;
            if (echo != NULL && echo[i] != 0 && tc->read_seq < echo[i])
                continue;       /* told at the write, and read nothing since */
            mk[m] = k[i];
            ml[m] = kl[i];
            m++;
        }
        if (m > 0)
            trk_send(tc, mk, ml, m);
    }
    free(mk);
    free(ml);
    free(echo);
}

/* ------------------------------------------------------------------ tracking connections */

static const struct sconn_holder_ops trk_holder_ops;

static struct trk_srv *trk_srv_of_holder(struct sconn_holder *h)
{
    return (struct trk_srv *)(void *)((char *)h - offsetof(struct trk_srv, holder));
}

static void trk_pool_unref(struct trk_pool *tp)
{
    if (--tp->refs > 0)
        return;
    free(tp->ts);
    free(tp);
}

/* The hold ends: the CLIENT TRACKING that began it is answered now, so that a write
 * another client sends after reading its +OK reaches servers that track already. */
static void trk_unhold(struct trk_client *tc)
{
    if (!tc->held)
        return;
    queue_remove(&tc->hold_link);
    tc->held = 0;
    tc->hold_tp = NULL;
    tc->owe_next = 0;
    struct msg *m = tc->owed;
    if (m != NULL && tc->c != NULL) {
        tc->owed = NULL;
        m->watch = NULL;
        msg_answer(tc->c->w, m, "+OK\r\n", 5, 0);
    }
}

/* The client left with its +OK unsent: the message is freed with the client's. */
static void trk_owed_gone(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    struct trk_client *tc = (struct trk_client *)(void *)((char *)wt -
                                                          offsetof(struct trk_client, owed_watch));
    (void)w;
    (void)m;
    (void)ok;
    tc->owed = NULL;
}

int tracking_defer_reply(struct client *c, struct msg *m)
{
    struct trk_client *tc = c->trk;
    if (tc == NULL || !tc->owe_next)
        return 0;
    tc->owe_next = 0;
    if (!tc->held || buf_len(&m->rsp) != 5 || memcmp(buf_rptr(&m->rsp), "+OK\r\n", 5) != 0)
        return 0;
    m->rsp.rpos = m->rsp.wpos = 0;      /* written again when the hold ends */
    tc->owed = m;
    m->watch = &tc->owed_watch;
    return 1;
}

/* Clients whose input waits on tp's tracking connections go on once none is asked. */
static void trk_holds_check(struct trk_pool *tp)
{
    for (uint32_t i = 0; i < tp->nts && !tp->dead; i++)
        if (tp->ts[i].state == TRK_ASKED)
            return;
    while (!queue_empty(&tp->holds)) {
        struct trk_client *tc = QUEUE_DATA(queue_first(&tp->holds), struct trk_client, hold_link);
        trk_unhold(tc);
        if (tc->c != NULL)
            tc->c->mops->resume(tc->c);
    }
}

static void trk_pin_lost(struct sconn_holder *h, struct sconn *s)
{
    struct trk_srv *ts = trk_srv_of_holder(h);
    struct trk_pool *tp = ts->tp;
    int was_on = ts->state == TRK_ON;

    (void)s;
    ts->pin = NULL;
    ts->state = TRK_NONE;
    ts->retry_ms = util_now_ms() + TRK_RETRY_MS;
    if (tp->dead)
        return;
    if (was_on || ts->unsafe) {
        /* what its server changed meanwhile is unknown: everything goes */
        ts->unsafe = 1;
        trk_flush_all(tp->tw);
    }
    trk_holds_check(tp);
}

/* Read a RESP length line at p[*off..n) after `type`: the number; -2 malformed. */
/* A push on a tracking connection: `>2 $10 invalidate *N $k key ...`, or a flush
 * (`_`); anything else, or a malformed one, is taken as a flush. */
static void trk_unsolicited(struct sconn_holder *h, struct sconn *s, const char *p, size_t n)
{
    struct trk_srv *ts = trk_srv_of_holder(h);
    struct trk_worker *tw = ts->tp->tw;
    size_t off = 0;
    const char **k = NULL;
    uint32_t *kl = NULL;
    uint64_t count = 0;

    (void)s;
    if (ts->tp->dead)
        return;
    if (redis_invalidation(p, n, &off, &count) != 0)
        goto all;
    k = malloc((size_t)count * sizeof(*k) + 1);
    kl = malloc((size_t)count * sizeof(*kl) + 1);
    if (k == NULL || kl == NULL)
        goto all;
    for (uint64_t i = 0; i < count; i++) {
        size_t l;
        if (redis_invalidation_key(p, n, &off, &k[i], &l) < 0)
            goto all;
        kl[i] = (uint32_t)l;
    }
    trk_changed(tw, k, kl, (uint32_t)count, NULL, 0);
    free(k);
    free(kl);
    return;
all:
    free(k);
    free(kl);
    trk_flush_all(tw);
}

static const struct sconn_holder_ops trk_holder_ops = {
    .pin_lost = trk_pin_lost,
    .unsolicited = trk_unsolicited,
};

static void trk_track_done(struct msg_watch *wt, struct worker *w, struct msg *m, int ok)
{
    struct trk_srv *ts = (struct trk_srv *)(void *)((char *)wt - offsetof(struct trk_srv, tw));
    struct trk_pool *tp = ts->tp;

    (void)w;
    if (!tp->dead && ts->state == TRK_ASKED) {
        if (ok && !(m->flags & MSG_F_ERROR)) {
            ts->state = TRK_ON;
            if (ts->unsafe) {       /* keys of it were read before it tracked */
                ts->unsafe = 0;
                trk_flush_all(tp->tw);
            }
        } else {
            log_warn("pool '%s': server %s refused CLIENT TRACKING on BCAST: the proxy's "
                     "tracking clients get no invalidations of its keys (asked again in %d ms)",
                     tp->pool->cp->name, ts->srv->label, TRK_RETRY_MS);
            ts->state = TRK_NONE;
            ts->retry_ms = util_now_ms() + TRK_RETRY_MS;
            if (ts->pin != NULL) {
                struct sconn *s = ts->pin;
                ts->pin = NULL;
                sconn_unpin(s, 0);
            }
        }
        trk_holds_check(tp);
    }
    trk_pool_unref(tp);
}

/* Open ts's tracking connection and ask CLIENT TRACKING on BCAST, unless it is on or
 * asked (or refused within the last TRK_RETRY_MS). */
static void trk_srv_open(struct trk_srv *ts)
{
    static const char track[] = "*4\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\non\r\n$5\r\nBCAST\r\n";
    struct trk_pool *tp = ts->tp;
    const char *reason = NULL;

    if (ts->state != TRK_NONE || ts->retry_ms > util_now_ms())
        return;
    struct sconn *s = ts->pin;
    if (s == NULL && (s = server_pin(ts->srv, &ts->holder, 1, &reason)) == NULL) {
        ts->retry_ms = util_now_ms() + TRK_RETRY_MS;
        return;
    }
    struct worker *w = ts->srv->w;
    struct msg *m = msg_get(w);
    size_t before = buf_len(&s->conn.obuf);
    if (m == NULL || buf_append(&s->conn.obuf, track, sizeof(track) - 1) < 0) {
        buf_truncate(&s->conn.obuf, before);
        if (m != NULL)
            msg_put(w, m);
        if (ts->pin == NULL)
            sconn_unpin(s, 0);
        return;
    }
    ts->pin = s;
    ts->state = TRK_ASKED;
    tp->refs++;
    m->role = MSG_OWN;
    m->cmd = tp->pool->ops->probe_cmd;
    m->rflags = PROTO_RF_VARIANT;
    m->watch = &ts->tw;
    m->start_us = worker_now_us(w);
    m->req_bytes = buf_len(&s->conn.obuf) - before;
    STATS_ADD(&ts->srv->stats, requests, 1);
    STATS_ADD(&ts->srv->stats, request_bytes, m->req_bytes);
    sconn_enqueue(s, m);
    if (tp->pool->cp->timeout_ms <= 0)
        sconn_deadline_in(s, m, TRK_OWN_TIMEOUT_MS);
    sconn_mark(w, s);
}

static void trk_srv_close(struct trk_srv *ts)
{
    struct sconn *s = ts->pin;
    ts->pin = NULL;
    ts->state = TRK_NONE;
    ts->unsafe = 0;
    if (s != NULL)
        sconn_unpin(s, 0);
}

/* The pool's tracking state in this worker, made when first needed; NULL: no memory. */
static struct trk_pool *trk_pool_get(struct wpool *wp)
{
    struct trk_worker *tw = trk_of(wp->w);

    if (wp->trk != NULL || tw == NULL)
        return wp->trk;
    struct trk_pool *tp = calloc(1, sizeof(*tp));
    if (tp == NULL)
        return NULL;
    tp->ts = calloc(wp->nservers ? wp->nservers : 1, sizeof(*tp->ts));
    if (tp->ts == NULL) {
        free(tp);
        return NULL;
    }
    tp->pool = wp;
    tp->tw = tw;
    tp->refs = 1;
    tp->nts = wp->nservers;
    queue_init(&tp->holds);
    for (uint32_t i = 0; i < tp->nts; i++) {
        struct trk_srv *ts = &tp->ts[i];
        ts->tp = tp;
        ts->srv = wp->servers[i];
        ts->holder.ops = &trk_holder_ops;
        queue_init(&ts->holder.pins);
        ts->tw.done = trk_track_done;
    }
    queue_insert_tail(&tw->pools, &tp->link);
    wp->trk = tp;
    return tp;
}

static void trk_pool_open(struct trk_pool *tp)
{
    for (uint32_t i = 0; i < tp->nts; i++)
        trk_srv_open(&tp->ts[i]);
}

void tracking_pool_drop(struct wpool *wp)
{
    struct trk_pool *tp = wp->trk;

    if (tp == NULL)
        return;
    wp->trk = NULL;
    tp->dead = 1;
    queue_remove(&tp->link);
    for (uint32_t i = 0; i < tp->nts; i++)
        trk_srv_close(&tp->ts[i]);
    while (!queue_empty(&tp->holds)) {
        struct trk_client *tc = QUEUE_DATA(queue_first(&tp->holds), struct trk_client, hold_link);
        trk_unhold(tc);
        if (tc->c != NULL)
            tc->c->mops->resume(tc->c);
    }
    if (tp->tw->nclients > 0 && atomic_load(&tp->tw->w->running))
        trk_flush_all(tp->tw);      /* a ring change: what moved is not known here */
    trk_pool_unref(tp);
}

/* No tracking client is left in the worker: its tracking connections go. */
static void trk_worker_idle(struct trk_worker *tw)
{
    struct qnode *q;
    if (tw->nclients > 0)
        return;
    QUEUE_FOREACH(q, &tw->pools) {
        struct trk_pool *tp = QUEUE_DATA(q, struct trk_pool, link);
        for (uint32_t i = 0; i < tp->nts; i++)
            trk_srv_close(&tp->ts[i]);
    }
    trk_forget_all(tw);
}

/* ------------------------------------------------------------------ the command */

static void trk_arm(struct trk_worker *tw, int on);

static void trk_publish(struct client *c)
{
    struct trk_client *tc = c->trk;
    unsigned f = 0;
    if (tc != NULL && tc->on) {
        f |= PROTO_CL_TRACKING;
        if (tc->broken)
            f |= PROTO_CL_TRK_BROKEN;
        if (tc->opts & PROTO_TRK_BCAST)
            f |= PROTO_CL_TRK_BCAST;
    }
    atomic_store_explicit(&c->pub.trk_flags, f, memory_order_relaxed);
    atomic_store_explicit(&c->pub.redir, tc != NULL && tc->on ? tc->redirect : -1,
                          memory_order_relaxed);
}

static void trk_off(struct client *c)
{
    struct trk_client *tc = c->trk;
    if (tc == NULL || !tc->on)
        return;
    tc->on = 0;
    tc->broken = 0;
    if (tc->opts & PROTO_TRK_BCAST)
        tc->tw->nbcast--;
    tc->opts = 0;
    tc->caching_at = 0;
    trk_prefixes_free(tc);
    trk_unhold(tc);
    queue_remove(&tc->link);
    if (--tc->tw->nclients == 0)
        trk_arm(tc->tw, 0);
    trk_publish(c);
    trk_worker_idle(tc->tw);
}

static int trk_bad_prefix(struct buf *out, const char *a, size_t al, const char *b, size_t bl,
                          int existing)
{
    /* Redis prints them as C strings: up to a NUL; a CR or LF would end the line */
    char x[129], y[129];
    size_t xl = 0, yl = 0;
    for (; xl < al && xl < 128 && a[xl] != '\0'; xl++)
        x[xl] = (a[xl] == '\r' || a[xl] == '\n') ? ' ' : a[xl];
    for (; yl < bl && yl < 128 && b[yl] != '\0'; yl++)
        y[yl] = (b[yl] == '\r' || b[yl] == '\n') ? ' ' : b[yl];
    x[xl] = y[yl] = '\0';
    return buf_appendf(out, "-ERR Prefix '%s' overlaps with %s prefix '%s'. Prefixes for a "
                       "single client must not overlap.\r\n", x,
                       existing ? "an existing" : "another provided", y);
}

static int trk_overlap(const char *a, size_t al, const char *b, size_t bl)
{
    return memcmp(a, b, al < bl ? al : bl) == 0;
}

static int trk_on(struct client *c, const struct proto_tracking *t, struct buf *out)
{
    struct trk_client *tc = c->trk;
    uint32_t o = t->opts;
    int was_on = tc != NULL && tc->on;

    if (!(o & PROTO_TRK_BCAST) && t->nprefix > 0)
        return buf_append_str(out, "-ERR PREFIX option requires BCAST mode to be enabled\r\n");
    if (was_on && !!(tc->opts & PROTO_TRK_BCAST) != !!(o & PROTO_TRK_BCAST))
        return buf_append_str(out, "-ERR You can't switch BCAST mode on/off before disabling "
                              "tracking for this client, and then re-enabling it with a "
                              "different mode.\r\n");
    if ((o & PROTO_TRK_BCAST) && (o & (PROTO_TRK_OPTIN | PROTO_TRK_OPTOUT)))
        return buf_append_str(out, "-ERR OPTIN and OPTOUT are not compatible with BCAST\r\n");
    if ((o & PROTO_TRK_OPTIN) && (o & PROTO_TRK_OPTOUT))
        return buf_append_str(out, "-ERR You can't specify both OPTIN mode and OPTOUT mode\r\n");
    if (was_on && (((o & PROTO_TRK_OPTIN) && (tc->opts & PROTO_TRK_OPTOUT)) ||
                   ((o & PROTO_TRK_OPTOUT) && (tc->opts & PROTO_TRK_OPTIN))))
        return buf_append_str(out, "-ERR You can't switch OPTIN/OPTOUT mode before disabling "
                              "tracking for this client, and then re-enabling it with a "
                              "different mode.\r\n");
    if (o & PROTO_TRK_BCAST) {
        for (uint32_t i = 0; i < t->nprefix; i++) {
            const struct proto_name *p = &t->prefix[i];
            for (uint32_t j = 0; was_on && j < tc->npre; j++)
                if (trk_overlap(tc->pre[j], tc->plen[j], p->bytes, p->len))
                    return trk_bad_prefix(out, p->bytes, p->len, tc->pre[j], tc->plen[j], 1);
            for (uint32_t j = i + 1; j < t->nprefix; j++)
                if (trk_overlap(p->bytes, p->len, t->prefix[j].bytes, t->prefix[j].len))
                    return trk_bad_prefix(out, p->bytes, p->len, t->prefix[j].bytes,
                                          t->prefix[j].len, 0);
        }
    }
    struct trk_worker *tw = trk_of(c->w);
    struct trk_pool *tp = trk_pool_get(c->pool);
    if (tw == NULL || tp == NULL)
        return -ENOMEM;
    if (tc == NULL) {
        if ((tc = calloc(1, sizeof(*tc))) == NULL)
            return -ENOMEM;
        tc->c = c;
        tc->tw = tw;
        tc->refs = 1;
        tc->owed_watch.done = trk_owed_gone;
        c->trk = tc;
    }
    /* the prefixes: BCAST with none is the empty prefix (every key); added to those
     * it has (a prefix it has already is not added twice) */
    if (o & PROTO_TRK_BCAST) {
        uint32_t add = t->nprefix ? t->nprefix : 1;
        char **np = realloc(tc->pre, (tc->npre + add) * sizeof(*np));
        if (np == NULL)
            return -ENOMEM;
        tc->pre = np;
        uint32_t *nl = realloc(tc->plen, (tc->npre + add) * sizeof(*nl));
        if (nl == NULL)
            return -ENOMEM;
        tc->plen = nl;
        for (uint32_t i = 0; i < add; i++) {
            const char *pb = t->nprefix ? t->prefix[i].bytes : "";
            uint32_t pl = t->nprefix ? t->prefix[i].len : 0;
            int dup = 0;
            for (uint32_t j = 0; j < tc->npre && !dup; j++)
                dup = tc->plen[j] == pl && memcmp(tc->pre[j], pb, pl) == 0;
            if (dup)
                continue;
            char *s = malloc(pl + 1);
            if (s == NULL)
                return -ENOMEM;
            memcpy(s, pb, pl);
            s[pl] = '\0';
            tc->pre[tc->npre] = s;
            tc->plen[tc->npre] = pl;
            tc->npre++;
        }
    }
    if (tc->on && (tc->opts & PROTO_TRK_BCAST))
        tw->nbcast--;
    if (o & PROTO_TRK_BCAST)
        tw->nbcast++;
    tc->opts = o;
    tc->redirect = t->redirect;
    tc->broken = 0;
    if (!tc->on) {
        tc->on = 1;
        tc->flushed = 0;
        queue_insert_tail(&tw->clients, &tc->link);
        if (tw->nclients++ == 0)
            trk_arm(tw, 1);
    }
    trk_publish(c);
    /* no read of it may run on a server before the server tracks this worker's
     * connection: its input waits for the acknowledgments */
    trk_pool_open(tp);
    int asked = 0;
    for (uint32_t i = 0; i < tp->nts; i++)
        asked |= tp->ts[i].state == TRK_ASKED;
    if (asked && !tc->held && c->in == CLIENT_IN_PARSE && c->nsessions == 0) {
        tc->held = 1;
        tc->owe_next = 1;
        tc->hold_tp = tp;
        queue_insert_tail(&tp->holds, &tc->hold_link);
        c->in = CLIENT_IN_HOLD;
    }
    return buf_append_str(out, "+OK\r\n");
}

/* CLIENT CACHING yes|no applies to the client's next command (c->nreq + 1). */
static int trk_caching_now(const struct client *c)
{
    const struct trk_client *tc = c->trk;
    return tc != NULL && tc->caching_at != 0 && tc->caching_at + 1 == c->nreq;
}

static int trk_info(struct client *c, int v3, struct buf *out)
{
    struct trk_client *tc = c->trk;
    int on = tc != NULL && tc->on;
    const char *fl[8];
    int nf = 0;
    int caching = tc != NULL && tc->caching_at == c->nreq;   /* carried on to this one */

    fl[nf++] = on ? "on" : "off";
    if (on && (tc->opts & PROTO_TRK_BCAST))
        fl[nf++] = "bcast";
    if (on && (tc->opts & PROTO_TRK_OPTIN)) {
        fl[nf++] = "optin";
        if (caching)
            fl[nf++] = "caching-yes";
    }
    if (on && (tc->opts & PROTO_TRK_OPTOUT)) {
        fl[nf++] = "optout";
        if (caching)
            fl[nf++] = "caching-no";
    }
    if (on && (tc->opts & PROTO_TRK_NOLOOP))
        fl[nf++] = "noloop";
    if (on && tc->broken)
        fl[nf++] = "broken_redirect";
    if (buf_appendf(out, v3 ? "%%3\r\n" : "*6\r\n") < 0 ||
        buf_append_str(out, "$5\r\nflags\r\n") < 0 ||
        buf_appendf(out, v3 ? "~%d\r\n" : "*%d\r\n", nf) < 0)
        return -ENOMEM;
    for (int i = 0; i < nf; i++)
        if (buf_appendf(out, "$%zu\r\n%s\r\n", strlen(fl[i]), fl[i]) < 0)
            return -ENOMEM;
    if (buf_appendf(out, "$8\r\nredirect\r\n:%" PRId64 "\r\n", on ? tc->redirect : -1) < 0 ||
        buf_append_str(out, "$8\r\nprefixes\r\n") < 0)
        return -ENOMEM;
    /* in the order of Redis's radix tree: byte order */
    uint32_t np = on ? tc->npre : 0;
    if (buf_appendf(out, "*%" PRIu32 "\r\n", np) < 0)
        return -ENOMEM;
    char *done = np ? calloc(np, 1) : NULL;
    if (np && done == NULL)
        return -ENOMEM;
    for (uint32_t k = 0; k < np; k++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t i = 0; i < np; i++) {
            if (done[i])
                continue;
            if (best == UINT32_MAX) {
                best = i;
                continue;
            }
            uint32_t a = tc->plen[i], b = tc->plen[best];
            int cmp = memcmp(tc->pre[i], tc->pre[best], a < b ? a : b);
            if (cmp < 0 || (cmp == 0 && a < b))
                best = i;
        }
        done[best] = 1;
        if (buf_appendf(out, "$%" PRIu32 "\r\n", tc->plen[best]) < 0 ||
            buf_append(out, tc->pre[best], tc->plen[best]) < 0 ||
            buf_append(out, "\r\n", 2) < 0) {
            free(done);
            return -ENOMEM;
        }
    }
    free(done);
    return 0;
}

int tracking_command(struct client *c, const struct proto_tracking *t, int v3, struct buf *out)
{
    struct trk_client *tc = c->trk;
    int on = tc != NULL && tc->on;

    /* Redis keeps CLIENT CACHING's flag over every CLIENT command that follows it (it
     * clears it after any other command): the ones of this family carry it on */
    if (on && trk_caching_now(c))
        tc->caching_at = c->nreq;
    switch (t->what) {
    case PROTO_TRK_ON:
        return trk_on(c, t, out);
    case PROTO_TRK_OFF:
        trk_off(c);
        return buf_append_str(out, "+OK\r\n");
    case PROTO_TRK_CACHING:
        if (!on)
            return buf_append_str(out, "-ERR CLIENT CACHING can be called only when the client "
                                  "is in tracking mode with OPTIN or OPTOUT mode enabled\r\n");
        if (t->yes == 1) {
            if (!(tc->opts & PROTO_TRK_OPTIN))
                return buf_append_str(out, "-ERR CLIENT CACHING YES is only valid when tracking "
                                      "is enabled in OPTIN mode.\r\n");
        } else if (t->yes == 0) {
            if (!(tc->opts & PROTO_TRK_OPTOUT))
                return buf_append_str(out, "-ERR CLIENT CACHING NO is only valid when tracking "
                                      "is enabled in OPTOUT mode.\r\n");
        } else {
            return buf_append_str(out, "-ERR syntax error\r\n");
        }
        tc->caching_at = c->nreq;
        return buf_append_str(out, "+OK\r\n");
    case PROTO_TRK_GETREDIR:
        return buf_appendf(out, ":%" PRId64 "\r\n", on ? tc->redirect : -1);
    case PROTO_TRK_INFO:
        return trk_info(c, v3, out);
    }
    return buf_append_str(out, "-ERR syntax error\r\n");
}

void tracking_client_reset(struct client *c)
{
    trk_off(c);
}

void tracking_client_gone(struct client *c)
{
    struct trk_client *tc = c->trk;
    if (tc == NULL)
        return;
    if (tc->owed != NULL) {     /* never sent: the client's close frees it */
        tc->owed->watch = NULL;
        tc->owed = NULL;
    }
    trk_off(c);
    c->trk = NULL;
    tc->c = NULL;
    trk_client_unref(tc);
}

/* ------------------------------------------------------------------ requests */

/* c's write: its keys changed (a flush through the proxy: everything). */
static void trk_written(struct trk_worker *tw, struct client *c, const struct proto_req *req,
                        const struct route_key *rk)
{
    struct trk_client *tc = c->trk;
    struct trk_client *writer = tc != NULL && tc->on ? tc : NULL;
    if (req->kind == PROTO_REQ_BROADCAST) {
        /* a flush through the proxy (FLUSHALL, FLUSHDB): everyone, the writer after its
         * reply; the servers' own flush pushes then find nothing read since */
        trk_flush_all(tw);
        return;
    }
    if (rk == NULL || req->nkeys == 0)
        return;
    const char *one[8] = { 0 };     /* filled below: the initializer quiets -Wmaybe-uninitialized */
    uint32_t onel[8] = { 0 };
    const char **k = req->nkeys <= 8 ? one : malloc(req->nkeys * sizeof(*k));
    uint32_t *kl = req->nkeys <= 8 ? onel : malloc(req->nkeys * sizeof(*kl));
    if (k == NULL || kl == NULL) {
        if (k != one)
            free(k);
        if (kl != onel)
            free(kl);
        trk_flush_all(tw);
        return;
    }
    for (uint32_t i = 0; i < req->nkeys; i++) {
        k[i] = rk[i].bytes;
        kl[i] = rk[i].len;
    }
    trk_changed(tw, k, kl, req->nkeys, writer, 1);
    if (k != one)
        free(k);
    if (kl != onel)
        free(kl);
}

/* What c's request does to its tracking: a read remembers its keys (default mode, as
 * OPTIN/OPTOUT and CLIENT CACHING say), a write invalidates them (for every tracking
 * client of the worker). */
static void trk_request(struct trk_worker *tw, struct client *c, struct wpool *wp,
                        const struct proto_req *req, const struct route_key *rk)
{
    struct trk_client *tc = c->trk;

    /* a write (a script that may write, too) invalidates its keys first; then a read is
     * remembered, and so are a script's declared keys, as Redis 7.0 remembers them for
     * the script's caller */
    if (req->flags & PROTO_RF_WRITE) {
        trk_written(tw, c, req, rk);
        if (req->kind == PROTO_REQ_BROADCAST)
            return;
    }
    int reading = tc != NULL && tc->on && (req->flags & (PROTO_RF_READ | PROTO_RF_SCRIPT)) &&
                  req->nkeys > 0 && rk != NULL;
    if (!reading)
        return;
    tc->read_seq = ++tw->seq;
    tc->flushed = 0;
    if (tc->opts & PROTO_TRK_BCAST)
        return;
    if ((tc->opts & PROTO_TRK_OPTIN) && !trk_caching_now(c))
        return;
    if ((tc->opts & PROTO_TRK_OPTOUT) && trk_caching_now(c))
        return;
    struct trk_pool *tp = trk_pool_get(wp);
    for (uint32_t i = 0; i < req->nkeys; i++) {
        trk_remember(tw, tc, rk[i].bytes, rk[i].len);
        if (tp != NULL && rk[i].owner < tp->nts && tp->ts[rk[i].owner].state != TRK_ON) {
            tp->ts[rk[i].owner].unsafe = 1;     /* flushed at its acknowledgment */
            trk_srv_open(&tp->ts[rk[i].owner]);
        }
    }
}

void tracking_session(struct client *c, struct wpool *wp, const struct proto_req *req,
                      const struct route_key *rk)
{
    struct trk_worker *tw = trk_of(c->w);
    if (tw == NULL || tw->nclients == 0 || wp->cp->protocol != CONF_PROTO_REDIS)
        return;
    trk_request(tw, c, wp, req, rk);
}

static enum stage_verdict trk_stage_request(struct stage_req *r)
{
    struct trk_worker *tw = trk_of(r->c->w);
    if (tw == NULL || tw->nclients == 0)
        return STAGE_PASS;          /* nobody tracks in this worker: one test */
    if (r->pool->trk == NULL) {     /* a pool rebound by a reload: tracked again */
        struct trk_pool *tp = trk_pool_get(r->pool);
        if (tp != NULL)
            trk_pool_open(tp);
    }
    trk_request(tw, r->c, r->pool, r->req, r->rk);
    return STAGE_PASS;
}

static int trk_wanted(const struct conf_pool *cp, const struct conf_global *g)
{
    (void)g;
    return cp->protocol == CONF_PROTO_REDIS;
}

const struct stage stage_tracking = {
    .name = "tracking",
    .wanted = trk_wanted,
    .request = trk_stage_request,
    .dormant = 1,               /* armed while the worker has a tracking client */
};

/* The worker's Redis pools run the stage (on) or not: from its first tracking client
 * to its last. */
static void trk_arm(struct trk_worker *tw, int on)
{
    struct worker *w = tw->w;
    for (uint32_t i = 0; i < w->npools; i++)
        if (w->pools[i] != NULL)
            stage_chain_arm(&w->pools[i]->chain, on);
}

void tracking_pool_bound(struct wpool *wp)
{
    struct trk_worker *tw = trk_of(wp->w);
    stage_chain_arm(&wp->chain, tw != NULL && tw->nclients > 0);
}

/* ------------------------------------------------------------------ the worker */

void tracking_tick(struct worker *w)
{
    struct trk_worker *tw = trk_of(w);
    if (tw == NULL || tw->nclients == 0)
        return;
    /* every pool's servers tracked while anyone tracks: after a reload, a refusal or a
     * lost connection, at most a second later */
    for (uint32_t i = 0; i < w->npools; i++) {
        struct wpool *wp = w->pools[i];
        if (wp == NULL || wp->cp->protocol != CONF_PROTO_REDIS)
            continue;
        struct trk_pool *tp = trk_pool_get(wp);
        if (tp != NULL)
            trk_pool_open(tp);
    }
}

int tracking_worker_init(struct worker *w)
{
    struct trk_worker *tw = calloc(1, sizeof(*tw));
    if (tw == NULL)
        return -ENOMEM;
    int a = keytab_init(&tw->keys, TRK_TAB_MIN, offsetof(struct trk_key, key) -
                                                offsetof(struct trk_key, node));
    int b = keytab_init(&tw->echoes, TRK_TAB_MIN * 4, offsetof(struct trk_echo, key) -
                                                      offsetof(struct trk_echo, node));
    if (a < 0 || b < 0 || uv_mutex_init(&tw->mu) != 0) {
        keytab_free(&tw->keys);
        keytab_free(&tw->echoes);
        free(tw);
        return -ENOMEM;
    }
    tw->w = w;
    queue_init(&tw->clients);
    queue_init(&tw->ages);
    queue_init(&tw->eages);
    queue_init(&tw->pools);
    buf_init(&tw->inbox);
    w->trk = tw;
    return 0;
}

void tracking_worker_free(struct worker *w)
{
    struct trk_worker *tw = w->trk;
    if (tw == NULL)
        return;
    w->trk = NULL;
    trk_forget_all(tw);
    while (!queue_empty(&tw->eages))
        trk_echo_drop(tw, QUEUE_DATA(queue_first(&tw->eages), struct trk_echo, age));
    buf_free(&tw->inbox);
    uv_mutex_destroy(&tw->mu);
    keytab_free(&tw->keys);
    keytab_free(&tw->echoes);
    free(tw);
}
