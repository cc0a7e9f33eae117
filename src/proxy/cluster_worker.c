/* A Redis Cluster pool in one worker: MOVED / ASK / TRYAGAIN followed inside the request lifecycle, requests parked until the map knows their node, fan-out by slot. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement/cluster_map.h"
#include "lib/log.h"
#include "proxy/client.h"
#include "proxy/hub.h"
#include "proxy/cluster_worker.h"
#include "proxy/msg.h"
#include "proxy/server.h"
#include "proxy/worker.h"
#include "stats/stats.h"
#include "lib/util.h"

#define CWORKER_TRYAGAIN_MIN_MS  10
#define CWORKER_TRYAGAIN_MAX_MS  200
#define CWORKER_RESEND_RETRY_MS  20      /* a known node with no connection to take it yet */
#define CWORKER_NO_TIMEOUT_MS    5000    /* how long a pool without timeout: parks a request */
#define CWORKER_ERR_MAX          160

/*
 * A parked request: re-sent to `addr` (after ASKING when `ask`) once the node is in the
 * map this worker runs and `wake_ms` has come; answered with `err` (the redirect the
 * node sent) at its deadline.
 */
struct park {
    struct qnode link;
    struct msg  *m;
    uint64_t     wake_ms;
    uint64_t     deadline_ms;
    uint8_t      ask;
    char         addr[CLUSTER_ADDR_MAX];
    uint16_t     errlen;
    char         err[CWORKER_ERR_MAX];
};

struct cworker {
    struct wpool   *wp;
    struct cluster *cl;
    uv_timer_t      timer;          /* the next parked request's wake-up or deadline */
    int             timer_open;
    uint64_t        armed_ms;       /* when the timer is due (cworker_now_ms), 0: not armed */
    int             closing;
    struct qnode    parked;
    uint32_t        nparked;
    uint32_t       *stamp;          /* fan-out by slot: stamp[slot] == cur: group[slot] is set */
    uint32_t       *group;
    uint32_t        cur;
};

/* Tell control that the map may have changed (hub.h): it fetches the map again. */
static void cworker_refresh(struct cworker *cw, enum cluster_why why)
{
    const struct hub *hub = cw->wp->w->hub;
    hub->ops->cluster_refresh(hub->ctx, cw->cl, why);
}

static uint64_t cworker_now_ms(struct cworker *cw)
{
    return worker_now_us(cw->wp->w) / 1000;
}

/* ------------------------------------------------------------------ fan-out by slot */

uint32_t cworker_fanout(struct wpool *wp, const struct route_key *rk, uint32_t nkeys,
                        uint16_t rflags, uint32_t rr, uint32_t *frag_of, uint32_t *target,
                        struct route *rt)
{
    struct cworker *cw = wp->cworker;
    uint32_t nfrag = 0;

    if (cw == NULL)
        return 0;               /* not created (no memory): the caller's no-memory answer */
    if (cw->stamp == NULL) {
        cw->stamp = calloc(CLUSTER_SLOTS, sizeof(*cw->stamp));
        cw->group = malloc(CLUSTER_SLOTS * sizeof(*cw->group));
        if (cw->stamp == NULL || cw->group == NULL) {
            free(cw->stamp);
            free(cw->group);
            cw->stamp = cw->group = NULL;
            return 0;
        }
    }
    if (++cw->cur == 0) {           /* the stamps wrapped: forget them all */
        memset(cw->stamp, 0, CLUSTER_SLOTS * sizeof(*cw->stamp));
        cw->cur = 1;
    }
    route_clear(rt);
    for (uint32_t i = 0; i < nkeys; i++) {
        uint32_t slot = route_key_slot(&rk[i]);
        if (cw->stamp[slot] != cw->cur) {
            struct route one;
            cw->stamp[slot] = cw->cur;
            cw->group[slot] = nfrag;
            route_request(&wp->view, &rk[i], rflags, 0, 0, rr, 0, &one);
            target[nfrag++] = one.to[0];
            rt->events |= one.events;
            if (one.probe != ROUTE_NONE)
                rt->probe = one.probe;
        }
        frag_of[i] = cw->group[slot];
    }
    return nfrag;
}

/* ------------------------------------------------------------------ parking */

static void cworker_arm(struct cworker *cw);

/* The server of this worker's pool at addr ("host:port"), or NULL. */
static struct server *cworker_server(struct cworker *cw, const char *addr)
{
    struct wpool *wp = cw->wp;
    for (uint32_t i = 0; i < wp->nservers; i++)
        if (strcmp(wp->servers[i]->addr.text, addr) == 0)
            return wp->servers[i];
    return NULL;
}

/* Whether anyone still wants m's answer. */
static int cworker_wanted(const struct msg *m)
{
    if (m->role == MSG_FRAG)
        return m->parent != NULL && m->parent->client != NULL;
    return m->client != NULL;
}

static void cworker_unpark(struct cworker *cw, struct park *pk)
{
    queue_remove(&pk->link);
    cw->nparked--;
    free(pk);
}

/* Send m to srv now (after ASKING when ask). 0, or -1 when no connection takes it yet. */
static int cworker_send(struct cworker *cw, struct msg *m, struct server *srv, int ask)
{
    const struct proto_cluster_ops *co = cw->wp->ops->cluster;
    m->state = MSG_NEW;
    return server_resend(cw->wp->w, m, srv, ask ? co->asking : NULL, ask ? strlen(co->asking) : 0);
}

/* One parked request's turn: released, answered, re-sent, or left for later. Returns
 * 1 when it left the queue. */
static int cworker_visit(struct cworker *cw, struct park *pk, uint64_t now, int closing)
{
    struct worker *w = cw->wp->w;
    struct msg *m = pk->m;

    if (m->state == MSG_ZOMBIE || !cworker_wanted(m)) {
        /* answered meanwhile (it failed), or nobody waits: let it go */
        if (m->state == MSG_ZOMBIE) {
            m->state = MSG_DONE;
            cworker_unpark(cw, pk);
            msg_release(w, m);
        } else {
            cworker_unpark(cw, pk);
            m->state = MSG_NEW;     /* its answer goes to nobody: released on the way */
            msg_fail(w, m, PROTO_ERR_SERVER, "client gone");
        }
        return 1;
    }
    if (closing || now >= pk->deadline_ms) {
        queue_remove(&pk->link);
        cw->nparked--;
        msg_answer(w, m, pk->err, pk->errlen, 1);
        free(pk);
        return 1;
    }
    if (now < pk->wake_ms)
        return 0;
    struct server *srv = cworker_server(cw, pk->addr);
    if (srv == NULL)
        return 0;                   /* still not in the map: wait for the next one */
    if (cworker_send(cw, m, srv, pk->ask) < 0) {
        m->state = MSG_PARKED;
        pk->wake_ms = now + CWORKER_RESEND_RETRY_MS;
        return 0;
    }
    cworker_unpark(cw, pk);
    return 1;
}

/* Visit every parked request (in the order parked), then arm the timer for the next. */
static void cworker_run(struct cworker *cw, int closing)
{
    struct qnode *n, *tmp;
    struct wpool *wp = cw->wp;
    uint64_t now = cworker_now_ms(cw);

    /* An answer may close its client, which may be a retired pool's last: the pool
     * (and this) must outlive the walk. Closing (the loop's end, or the pool's free)
     * no client is left to answer. */
    if (!closing)
        wp->refs++;
    QUEUE_FOREACH_SAFE(n, tmp, &cw->parked)
        cworker_visit(cw, QUEUE_DATA(n, struct park, link), now, closing);
    if (!closing)
        cworker_arm(cw);
    sched_flush(&wp->w->sched);
    if (!closing)
        wpool_unref(wp);
}

static void cworker_timer_cb(uv_timer_t *t)
{
    struct cworker *cw = t->data;
    cw->armed_ms = 0;
    cworker_run(cw, 0);
}

/* When a parked request is next to be looked at: its wake, or its deadline if sooner
 * (or once its wake has passed: it waits for a map naming its node). */
static uint64_t park_due(const struct park *pk, uint64_t now)
{
    return pk->wake_ms > now ? RL_MIN(pk->wake_ms, pk->deadline_ms) : pk->deadline_ms;
}

static void cworker_arm_at(struct cworker *cw, uint64_t at, uint64_t now)
{
    cw->armed_ms = at;
    uv_timer_start(&cw->timer, cworker_timer_cb, at > now ? at - now : 1, 0);
}

/* The timer for the soonest parked request (a walk: after a run, not per park). */
static void cworker_arm(struct cworker *cw)
{
    struct qnode *n;
    uint64_t next = UINT64_MAX, now = cworker_now_ms(cw);

    if (!cw->timer_open)
        return;
    QUEUE_FOREACH(n, &cw->parked) {
        uint64_t at = park_due(QUEUE_DATA(n, struct park, link), now);
        if (at < next)
            next = at;
    }
    if (next == UINT64_MAX) {
        uv_timer_stop(&cw->timer);
        cw->armed_ms = 0;
        return;
    }
    cworker_arm_at(cw, next, now);
}

/* The deadline of a request parked now: its own, from when it came. */
static uint64_t cworker_deadline_ms(const struct cworker *cw, const struct msg *m)
{
    const struct conf_pool *cp = cw->wp->cp;
    return m->start_us / 1000 + (cp->timeout_ms > 0 ? (uint64_t)cp->timeout_ms
                                                    : CWORKER_NO_TIMEOUT_MS);
}

/* Park m (taken out of its connection's queue) for addr; `err` is its answer should the
 * deadline come first. 0, or -1 when the queue is full (m untouched). */
static int cworker_park(struct cworker *cw, struct msg *m, const char *addr, int ask,
                        uint64_t wake_ms, const char *err, size_t errlen)
{
    if (cw->closing || cw->nparked >= CWORKER_PARKED_MAX)
        return -1;
    struct park *pk = calloc(1, sizeof(*pk));
    if (pk == NULL)
        return -1;
    pk->m = m;
    pk->wake_ms = wake_ms;
    pk->deadline_ms = cworker_deadline_ms(cw, m);
    pk->ask = (uint8_t)ask;
    snprintf(pk->addr, sizeof(pk->addr), "%s", addr);
    pk->errlen = (uint16_t)RL_MIN(errlen, sizeof(pk->err));
    memcpy(pk->err, err, pk->errlen);
    if (errlen > sizeof(pk->err)) {     /* keep a well-formed line */
        pk->err[sizeof(pk->err) - 2] = '\r';
        pk->err[sizeof(pk->err) - 1] = '\n';
    }
    m->state = MSG_PARKED;
    m->server = NULL;               /* the server may leave with the next map */
    queue_insert_tail(&cw->parked, &pk->link);
    cw->nparked++;
    STATS_ADD(&cw->wp->stats, cluster_parked, 1);
    uint64_t now = cworker_now_ms(cw), at = park_due(pk, now);
    if (cw->timer_open && (cw->armed_ms == 0 || at < cw->armed_ms))
        cworker_arm_at(cw, at, now);    /* sooner than the timer: no walk per park */
    return 0;
}

/* ------------------------------------------------------------------ replies */

int cworker_reply(struct sconn *s, struct msg *m, const char *rsp, size_t len)
{
    struct server *srv = s->server;
    struct wpool *wp = srv->pool;
    struct cworker *cw = wp->cworker;
    struct proto_redirect rd;
    char addr[CLUSTER_ADDR_MAX];

    if (cw == NULL || wp->ops->cluster == NULL || wp->ops->cluster->redirect(rsp, len, &rd) < 0)
        return 0;
    if (rd.kind == PROTO_REDIR_DOWN) {
        STATS_ADD(&wp->stats, cluster_down, 1);
        cworker_refresh(cw, CLUSTER_WHY_DOWN);
    }
    /* Only a client's request or fragment on a shared connection, with its bytes kept,
     * can go elsewhere. */
    if ((m->role != MSG_REQUEST && m->role != MSG_FRAG) || m->state != MSG_SENT ||
        s->is_pin || buf_len(&m->req) == 0 || !cworker_wanted(m))
        return 0;
    if (rd.kind == PROTO_REDIR_TRYAGAIN || rd.kind == PROTO_REDIR_DOWN) {
        /* Neither ran the command: the same request again after a pause, until its
         * deadline (a cluster is down for a moment while it fails over) */
        if (rd.kind == PROTO_REDIR_TRYAGAIN) {
            STATS_ADD(&wp->stats, cluster_tryagain, 1);
            cworker_refresh(cw, CLUSTER_WHY_TRYAGAIN);
        }
        if (m->retries >= 32)
            return 0;
        uint64_t backoff = RL_MIN((uint64_t)CWORKER_TRYAGAIN_MIN_MS << RL_MIN(m->retries, 8u),
                                  (uint64_t)CWORKER_TRYAGAIN_MAX_MS);
        uint64_t now = cworker_now_ms(cw);
        if (now + backoff >= cworker_deadline_ms(cw, m))
            return 0;               /* the slot stays busy past the deadline: the error */
        sconn_unqueue(s, m);
        if (cworker_park(cw, m, srv->addr.text, 0, now + backoff, rsp, len) < 0) {
            m->state = MSG_NEW;
            msg_answer(wp->w, m, rsp, len, 1);
            return 1;
        }
        m->retries++;
        return 1;
    }
    if (rd.kind == PROTO_REDIR_MOVED) {
        STATS_ADD(&wp->stats, cluster_moved, 1);
        cworker_refresh(cw, CLUSTER_WHY_MOVED);
    } else {
        STATS_ADD(&wp->stats, cluster_ask, 1);
    }
    if (m->redirects >= CWORKER_REDIRECTS_MAX) {
        STATS_ADD(&wp->stats, cluster_redirect_limit, 1);
        log_info("pool '%s': a request was redirected %u times; its client gets the last "
                 "redirect", wp->cp->name, (unsigned)m->redirects);
        return 0;
    }
    const char *host = rd.host[0] ? rd.host : srv->addr.host;
    cluster_addr_format(addr, sizeof(addr), host, strlen(host), rd.port);
    struct server *to = cworker_server(cw, addr);
    sconn_unqueue(s, m);
    m->redirects++;
    if (to != NULL && cworker_send(cw, m, to, rd.kind == PROTO_REDIR_ASK) == 0)
        return 1;
    if (to == NULL)
        cworker_refresh(cw, CLUSTER_WHY_UNKNOWN_NODE);
    uint64_t now = cworker_now_ms(cw);
    if (cworker_park(cw, m, addr, rd.kind == PROTO_REDIR_ASK,
                     to == NULL ? now : now + CWORKER_RESEND_RETRY_MS, rsp, len) < 0) {
        m->state = MSG_NEW;
        msg_answer(wp->w, m, rsp, len, 1);
    }
    return 1;
}

void cworker_node_failed(struct server *srv)
{
    struct cworker *cw = srv->pool->cworker;
    if (cw != NULL)
        cworker_refresh(cw, CLUSTER_WHY_NODE_FAILED);
}

void cworker_slot_left(struct server *srv)
{
    struct cworker *cw = srv->pool->cworker;
    if (cw != NULL)
        cworker_refresh(cw, CLUSTER_WHY_MOVED);
}

/* ------------------------------------------------------------------ life */

static void cworker_timer_closed(uv_handle_t *h)
{
    struct cworker *cw = h->data;
    cw->timer_open = 0;
    if (cw->wp == NULL)
        free(cw);               /* freed while the handle was closing */
}

struct cworker *cworker_create(struct wpool *wp, struct cluster *cl)
{
    struct cworker *cw = calloc(1, sizeof(*cw));
    if (cw == NULL)
        return NULL;
    cw->wp = wp;
    cw->cl = cl;
    queue_init(&cw->parked);
    uv_timer_init(&wp->w->loop, &cw->timer);
    cw->timer.data = cw;
    cw->timer_open = 1;
    return cw;
}

void cworker_adopted(struct cworker *cw, struct cluster *cl)
{
    cw->cl = cl;
    if (!queue_empty(&cw->parked))
        cworker_run(cw, 0);
}

void cworker_close(struct cworker *cw)
{
    if (cw == NULL || cw->closing)
        return;
    cw->closing = 1;
    cworker_run(cw, 1);
    if (cw->timer_open)
        uv_close((uv_handle_t *)&cw->timer, cworker_timer_closed);
}

void cworker_free(struct cworker *cw)
{
    if (cw == NULL)
        return;
    /* Parked requests were answered when the loop closed (cworker_close); a pool freed
     * before that (a retired pool) answers them now. */
    if (!cw->closing)
        cworker_close(cw);
    free(cw->stamp);
    free(cw->group);
    cw->wp = NULL;
    if (!cw->timer_open)
        free(cw);
}
