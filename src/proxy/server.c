/* A backend server in a worker: its health, its connection slots, picking a connection, probes, pinned connections. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "state/health.h"
#include "lib/log.h"
#include "proxy/client.h"
#include "proxy/collapse.h"
#include "proxy/join.h"
#include "proxy/msg.h"
#include "proxy/hub.h"
#include "proxy/snapshot.h"
#include "proxy/pubsub.h"
#include "proxy/server.h"
#include "proxy/server_int.h"
#include "proxy/sentinel_worker.h"
#include "proxy/worker.h"
#include "lib/util.h"



/* ------------------------------------------------------------------ health */

void server_failed(struct server *srv, const char *reason)
{
    const struct conf_pool *cp = srv->pool->cp;
    if (srv->pool->cworker != NULL)
        srv->pool->up->cluster_node_failed(srv);    /* the map may be stale: refresh it */
    if (cp->sentinel != NULL)
        sentinel_worker_failed(srv);                /* the master may have moved: ask again */
    if (srv->health == NULL || !cp->eject)
        return;     /* never ejected: each request tries the server itself */
    uint32_t retry = cp->server_retry_timeout_ms > 0 ? (uint32_t)cp->server_retry_timeout_ms : 30000;
    uint64_t wall = util_wall_us();
    if (health_failure(srv->health, util_now_ms(), cp->server_failure_limit, retry, wall)) {
        log_warn("server '%s' (%s) of pool '%s' is down after %u failure(s) in a row (%s); "
                 "its keys stay its own, requests for them follow on_down until a probe succeeds",
                 srv->label, srv->addr.text, cp->name, cp->server_failure_limit, reason);
        STATS_ADD(&srv->pool->stats, server_ejects, 1);
        __atomic_store_n(&srv->stats.server_ejected_at, (int64_t)wall, __ATOMIC_RELAXED);
    }
}

void server__succeeded(struct server *srv)
{
    if (srv->health == NULL || health_up(srv->health)) {
        if (srv->health != NULL)
            health_ok(srv->health);     /* the common case: up, failures counted afresh */
        return;
    }
    int rejoin = srv->pool->cp->rejoin != CONF_REJOIN_TRUST;
    if (!health_success(srv->health, util_now_ms(), rejoin))
        return;
    if (rejoin)
        srv->pool->up->rejoin_begin(srv);   /* up once what it missed is invalidated */
    else
        log_notice("server '%s' (%s) of pool '%s' is up again", srv->label, srv->addr.text,
                   srv->pool->cp->name);
}

struct server *server_create(struct worker *w, struct wpool *pool, const struct conf_server *cs)
{
    struct server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->w = w;
    s->pool = pool;
    s->nconns = pool->cp->server_connections ? pool->cp->server_connections : 1;
    /* a Redis pool's clients may SELECT PROTO_DBS databases: a set of slots for each,
     * filled on demand (docs/redis.md) */
    uint32_t sets = pool->cp->protocol == CONF_PROTO_REDIS && !pool->cp->redis_cluster
                    ? SERVER_DB_SETS : 1;
    s->nslots = s->nconns * PROTO_VARIANTS * sets;
    s->conns = calloc(s->nslots, sizeof(*s->conns));
    if (s->conns == NULL)
        goto fail;
    if ((s->ident = strdup(cs->ident)) == NULL)
        goto fail_conns;
    if ((s->label = strdup(cs->label ? cs->label : cs->ident)) == NULL)
        goto fail_ident;
    if (conf_addr_copy(&s->addr, &cs->addr) < 0)
        goto fail_label;
    queue_init(&s->pins);
    queue_init(&s->idle_pins);
    queue_insert_tail(&w->servers, &s->link);
    pool->refs++;
    return s;

fail_label:
    free(s->label);
fail_ident:
    free(s->ident);
fail_conns:
    free(s->conns);
fail:
    free(s);
    return NULL;
}

void server__free_if_idle(struct server *s)
{
    /* Only when no connection object is left, closing ones included: their
     * close callbacks still point here. */
    if (!s->removed || s->nopen > 0)
        return;
    queue_remove(&s->link);
    struct wpool *wp = s->pool;
    tls_session_clear(&s->tls_session);
    conf_addr_free(&s->addr);
    free(s->conns);
    free(s->ident);
    free(s->label);
    free(s);
    wpool_unref(wp);
}

void server_destroy(struct server *s, int now)
{
    struct qnode *n, *tmp;

    s->removed = 1;
    for (uint32_t i = 0; i < s->nslots; i++) {
        struct sconn *c = s->conns[i];
        if (c == NULL)
            continue;
        if (now || queue_empty(&c->sent))
            sconn_close(c, "server removed", 0);
        /* else: closed by the reply path once its last reply is in */
    }
    QUEUE_FOREACH_SAFE(n, tmp, &s->idle_pins)
        sconn_close(QUEUE_DATA(n, struct sconn, pin_link), "server removed", 0);
    if (now) {
        QUEUE_FOREACH_SAFE(n, tmp, &s->pins)
            sconn_close(QUEUE_DATA(n, struct sconn, pin_link), "server removed", 0);
    }
    server__free_if_idle(s);
}

void server_check_handshakes(struct server *srv, uint64_t now_ms)
{
    struct qnode *n, *tmp;

    for (uint32_t i = 0; i < srv->nslots; i++)
        if (srv->conns[i] != NULL && tls_expired(&srv->conns[i]->conn, now_ms))
            sconn__tls_failed(srv->conns[i], TLS_FAIL_TIMEOUT);
    QUEUE_FOREACH_SAFE(n, tmp, &srv->pins) {
        struct sconn *s = QUEUE_DATA(n, struct sconn, pin_link);
        if (tls_expired(&s->conn, now_ms))
            sconn__tls_failed(s, TLS_FAIL_TIMEOUT);
    }
    QUEUE_FOREACH_SAFE(n, tmp, &srv->idle_pins) {
        struct sconn *s = QUEUE_DATA(n, struct sconn, pin_link);
        if (tls_expired(&s->conn, now_ms))
            sconn__tls_failed(s, TLS_FAIL_TIMEOUT);
    }
}

/* server_pick's slow path: slot is empty or closing. Kept out of line so that the
 * usual pick saves no registers. */
static __attribute__((noinline)) struct sconn *server_pick_open(struct server *srv,
                                                              uint32_t slot, const char **reason)
{
    if (srv->conns[slot] != NULL) {
        *reason = "connection closing";
        return NULL;
    }
    if (uv_now(&srv->w->loop) < srv->retry_at_ms) {
        /* The last connect failed moments ago: this request fails too, and
         * counts, so the server goes down after server_failure_limit
         * requests rather than after that many reconnect rounds. */
        *reason = srv->tls_failure ? srv->tls_failure : "server unreachable (reconnecting)";
        server_failed(srv, *reason);
        return NULL;
    }
    /* slots: [(db * PROTO_VARIANTS + variant) * nconns + i] */
    uint32_t set = slot / srv->nconns;
    struct sconn *s = sconn__open(srv, slot, (uint8_t)(set % PROTO_VARIANTS),
                                  (uint8_t)(set / PROTO_VARIANTS));
    if (s == NULL) {
        *reason = "out of memory";
        return NULL;
    }
    if (s->state == SCONN_CLOSING) {   /* failed synchronously */
        *reason = "connect failed";
        return NULL;
    }
    return s;
}

struct sconn *server_pick(struct server *srv, uint64_t hint, uint16_t rflags, const char **reason)
{
    uint32_t slot = srv->nconns == 1 ? 0 : (uint32_t)(hint % srv->nconns);
    if (rflags & PROTO_RF_VARIANT)
        slot += srv->nconns;    /* RESP2 and RESP3 clients never share a connection */
    struct sconn *s = srv->conns[slot];

    if (s != NULL && s->state != SCONN_CLOSING)
        return s;
    return server_pick_open(srv, slot, reason);
}

struct sconn *server_pick_db(struct server *srv, uint64_t hint, uint16_t rflags, uint8_t db,
                             const char **reason)
{
    uint32_t set = (uint32_t)db * PROTO_VARIANTS + ((rflags & PROTO_RF_VARIANT) ? 1 : 0);
    uint32_t slot = set * srv->nconns + (uint32_t)(hint % srv->nconns);

    if (slot >= srv->nslots) {      /* a database the pool has no slots for (not Redis) */
        *reason = "no such database";
        return NULL;
    }
    struct sconn *s = srv->conns[slot];
    if (s != NULL && s->state != SCONN_CLOSING)
        return s;
    return server_pick_open(srv, slot, reason);
}

/* Re-dispatch (server.h): beside the pick it starts with. */
int server_resend(struct worker *w, struct msg *m, struct server *to, const char *prefix,
                  size_t prefix_len)
{
    const char *reason = NULL;
    struct sconn *s = server_pick_db(to, 0, m->rflags, m->db, &reason);
    struct msg *pm = NULL;

    if (s == NULL || m->state != MSG_NEW || buf_len(&m->req) == 0)
        return -1;
    if (prefix_len > 0) {
        pm = msg_get(w);
        if (pm == NULL)
            return -1;
        pm->role = MSG_DISCARD;
        pm->cmd = m->cmd;
    }
    size_t before = buf_len(&s->conn.obuf);
    if ((prefix_len > 0 && buf_append(&s->conn.obuf, prefix, prefix_len) < 0) ||
        buf_append(&s->conn.obuf, buf_rptr(&m->req), buf_len(&m->req)) < 0) {
        buf_truncate(&s->conn.obuf, before);
        if (pm != NULL)
            msg_put(w, pm);
        return -1;
    }
    if (pm != NULL) {
        pm->req_bytes = prefix_len;
        sconn_enqueue(s, pm);
    }
    if (m->client != NULL)
        m->client->held_bytes -= RL_MIN(m->client->held_bytes, buf_len(&m->rsp));
    m->rsp.rpos = m->rsp.wpos = 0;
    m->items = 0;
    m->resends++;
    m->req_bytes = buf_len(&m->req);
    STATS_ADD(&to->stats, requests, 1);
    STATS_ADD(&to->stats, request_bytes, m->req_bytes + prefix_len);
    sconn_enqueue(s, m);
    sconn_mark(w, s);
    return 0;
}

void server_probe(struct server *srv)
{
    struct worker *w = srv->w;
    const char *reason = NULL;
    int timeout = srv->pool->cp->timeout_ms > 0 ? srv->pool->cp->timeout_ms : 1000;

    srv->retry_at_ms = 0;           /* the probe is the retry */
    struct sconn *s = server_pick(srv, 0, 0, &reason);
    struct msg *m = s ? msg_get(w) : NULL;
    size_t before = s ? buf_len(&s->conn.obuf) : 0;
    if (s == NULL || m == NULL || buf_append_str(&s->conn.obuf, srv->pool->ops->probe) < 0) {
        if (m != NULL)
            msg_put(w, m);
        server_failed(srv, reason ? reason : "probe not sent");
        return;
    }
    m->role = MSG_PROBE;
    m->cmd = srv->pool->ops->probe_cmd;
    m->req_bytes = buf_len(&s->conn.obuf) - before;
    sconn_enqueue(s, m);
    sconn_deadline_in(s, m, (uint64_t)timeout);
    sconn_mark(w, s);
    log_info("probing server '%s' (%s)", srv->label, srv->addr.text);
}

void server_preconnect(struct server *srv)
{
    const char *reason;
    for (uint32_t i = 0; i < srv->nconns; i++)
        (void)server_pick(srv, i, 0, &reason);
}

static void server_idle_push(struct server *srv, struct sconn *s)
{
    queue_insert_tail(&srv->idle_pins, &s->pin_link);
    srv->nidle_pins++;
    STATS_ADD(&srv->stats, ready_pins, 1);
}

static uint32_t server_idle_count(const struct server *srv, uint8_t variant)
{
    const struct qnode *n;
    uint32_t k = 0;

    QUEUE_FOREACH(n, &srv->idle_pins)
        k += QUEUE_DATA(n, const struct sconn, pin_link)->variant == variant;
    return k;
}

/*
 * Keep SERVER_READY_PINS idle pinned connections of `variant` open (connected, hello
 * sent) ahead of demand, so that a session's first request (a blocking command, WATCH,
 * MULTI's first key) is written at once, in the round that read it, not after a
 * connect and AUTH/SELECT while a request another client sent later overtakes it on a
 * shared connection. Only for a protocol whose pins are reset and reused and that has
 * sessions (Redis), in a pool whose clients took pins already (a cache-only pool pays
 * no extra connection), for a server in use and up (called when a shared connection
 * connects, when a pin is taken, and for every connected server at the pool's first
 * pin), not in the reconnect back-off, and while the server's pinned connections over
 * every worker are under half of max_pinned: ready ones never take the bound from the
 * clients that need a pin. Counted in the ready_pins gauge.
 */
void server__pins_ready(struct server *srv, uint8_t variant)
{
    const struct proto_ops *ops = srv->pool->ops;
    uint32_t max = srv->pool->cp->max_pinned;

    if (ops->pin_reset == NULL || ops->sess_begun == NULL || srv->removed ||
        srv->health == NULL || !health_up(srv->health))
        return;                         /* a down server's probe is not followed by more */
    for (uint32_t have = server_idle_count(srv, variant); have < SERVER_READY_PINS; have++) {
        if (uv_now(&srv->w->loop) < srv->retry_at_ms)
            return;
        if (atomic_fetch_add(&srv->health->pinned, 1) >= max / 2) {
            atomic_fetch_sub(&srv->health->pinned, 1);
            return;
        }
        struct sconn *s = sconn__open(srv, SCONN_PIN_SLOT, variant, 0);
        if (s == NULL) {
            atomic_fetch_sub(&srv->health->pinned, 1);
            return;
        }
        if (s->state == SCONN_CLOSING)
            return;                     /* its close gave the count back */
        server_idle_push(srv, s);
    }
}

/* The pool's first pin: every server of it in use (a shared connection of variant
 * connected) gets its ready pins. */
static void server_pool_ready(struct wpool *pool, uint8_t variant)
{
    pool->pins_seen = 1;
    for (uint32_t i = 0; i < pool->nservers; i++) {
        struct server *srv = pool->servers[i];
        for (uint32_t k = 0; k < srv->nconns; k++) {
            const struct sconn *sc = srv->conns[variant * srv->nconns + k];
            if (sc != NULL && sc->state == SCONN_CONNECTED) {
                server__pins_ready(srv, variant);
                break;
            }
        }
    }
}

struct sconn *server_pin(struct server *srv, struct sconn_holder *h, uint8_t variant,
                         const char **reason)
{
    return server_pin_db(srv, h, variant, 0, reason);
}

struct sconn *server_pin_db(struct server *srv, struct sconn_holder *h, uint8_t variant,
                            uint8_t db, const char **reason)
{
    struct qnode *n;
    struct sconn *s = NULL;

    if (!srv->pool->pins_seen)
        server_pool_ready(srv->pool, variant);

    /* idle ones are in the pool's database: another one opens a connection of its own */
    QUEUE_FOREACH(n, &srv->idle_pins) {
        if (db != 0)
            break;
        struct sconn *idle = QUEUE_DATA(n, struct sconn, pin_link);
        if (idle->variant == variant) {
            s = idle;
            break;
        }
    }
    if (s != NULL) {
        queue_remove(&s->pin_link);
        srv->nidle_pins--;
        STATS_ADD(&srv->stats, ready_pins, -1);
    } else {
        uint32_t max = srv->pool->cp->max_pinned;
        if (atomic_fetch_add(&srv->health->pinned, 1) >= max) {
            atomic_fetch_sub(&srv->health->pinned, 1);
            STATS_ADD(&srv->pool->stats, pin_refused, 1);
            *reason = "too many pinned connections to this server (max_pinned)";
            return NULL;
        }
        if (uv_now(&srv->w->loop) < srv->retry_at_ms) {
            atomic_fetch_sub(&srv->health->pinned, 1);
            *reason = "server unreachable (reconnecting)";
            return NULL;
        }
        s = sconn__open(srv, SCONN_PIN_SLOT, variant, db);
        if (s == NULL) {
            atomic_fetch_sub(&srv->health->pinned, 1);
            *reason = "out of memory";
            return NULL;
        }
        if (s->state == SCONN_CLOSING) {
            *reason = "connect failed";
            return NULL;
        }
    }
    s->pinned = h;
    queue_insert_tail(&srv->pins, &s->pin_link);
    queue_insert_tail(&h->pins, &s->client_link);
    server__pins_ready(srv, variant);    /* for the next client's session */
    return s;
}

void sconn_unpin(struct sconn *s, int keep)
{
    struct server *srv = s->server;

    if (s->pinned == NULL)
        return;
    queue_remove(&s->client_link);
    queue_remove(&s->pin_link);
    s->pinned = NULL;
    /* Requests still in flight there belong to the client that let go: their
     * replies are absorbed (they are orphans by now) before the reset's. */
    s->db = 0;      /* the reset's hello selects the pool's database again */
    if (keep && !srv->removed && s->state != SCONN_CLOSING && srv->nidle_pins < SERVER_IDLE_PINS_MAX &&
        sconn__hello(s, 1) == 0) {
        server_idle_push(srv, s);
        sconn_mark(srv->w, s);
        return;
    }
    sconn_close(s, "pinned connection released", 0);
}
