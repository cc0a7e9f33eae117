/* Warm-up after a reload: a miss at a key's new owner is asked of its previous owner, and a hit there is copied over. */
#include "config.h"

#include "conf/conf.h"
#include "proxy/client.h"
#include "proxy/msg.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "stats/stats.h"
#include "lib/util.h"

/* m (a get routed to the key's new owner) asks `prev` on a miss: remember
 * the key and the command. Without memory m is simply not warmed. */
static void warmup_mark(struct msg *m, const char *key, size_t len, struct server *prev,
                        uint16_t cmd)
{
    if (buf_append(&m->reqcopy, key, len) < 0)
        return;
    m->warm = MSG_WARM_ASK;
    m->flags |= MSG_F_STAGED;           /* warmup_reply sees its reply */
    m->warm_to = prev;
    m->warm_cmd = cmd;
}

/* First step: the new owner missed; ask the previous owner (the protocol's
 * fetch: for memcached a meta get for value, flags and TTL). 1 when re-sent,
 * 0 to answer the miss. */
static int warmup_ask(struct worker *w, struct msg *m)
{
    struct server *old = m->warm_to;
    struct server *now = m->server;
    const char *reason = NULL;
    struct sconn *s = server_pick(old, 0, 0, &reason);
    uint16_t fetch_cmd;

    if (s == NULL)
        return 0;
    size_t before = buf_len(&s->conn.obuf);
    if (now->pool->ops->warm_fetch(m->warm_cmd, m->reqcopy.data, buf_len(&m->reqcopy),
                                   &s->conn.obuf, &fetch_cmd) < 0) {
        buf_truncate(&s->conn.obuf, before);
        return 0;
    }
    if (m->client != NULL)
        m->client->held_bytes -= RL_MIN(m->client->held_bytes, buf_len(&m->rsp));
    m->rsp.rpos = m->rsp.wpos = 0;
    m->warm = MSG_WARM_FETCH;
    m->warm_to = now;               /* where a hit gets copied */
    m->cmd = fetch_cmd;
    m->items = 0;
    m->req_bytes = buf_len(&s->conn.obuf) - before;
    STATS_ADD(&now->pool->stats, warm_retries, 1);
    sconn_enqueue(s, m);
    sconn_mark(w, s);
    return 1;
}

/* Second step: the previous owner answered the fetch. A hit becomes the
 * client's reply and is copied to the new owner (memcached: with its flags
 * and TTL); anything else is the miss the client would have seen. */
static void warmup_finish(struct worker *w, struct msg *m)
{
    struct buf reply, copy;
    struct client *c = m->client;
    uint16_t copy_cmd = 0;
    const struct proto_ops *ops = m->warm_to->pool->ops;

    buf_init(&reply);
    buf_init(&copy);
    int rc = ops->warm_reply(m->warm_cmd, buf_rptr(&m->rsp), buf_len(&m->rsp),
                             m->reqcopy.data, buf_len(&m->reqcopy), &reply, &copy, &copy_cmd);
    c->held_bytes -= RL_MIN(c->held_bytes, buf_len(&m->rsp));
    buf_free(&m->rsp);
    m->cmd = m->warm_cmd;
    m->rsp = reply;             /* the hit, the miss, or nothing when malformed */
    m->items = 0;
    if (rc == 1) {
        m->items = 1;
        STATS_ADD(&m->warm_to->pool->stats, warm_hits, 1);
        const char *reason = NULL;
        struct sconn *s = server_pick(m->warm_to, 0, 0, &reason);
        struct msg *cp = s ? msg_get(w) : NULL;
        if (cp != NULL && buf_append(&s->conn.obuf, buf_rptr(&copy), buf_len(&copy)) == 0) {
            cp->role = MSG_DISCARD;         /* its reply is swallowed */
            cp->cmd = copy_cmd;
            cp->req_bytes = buf_len(&copy);
            sconn_enqueue(s, cp);
            sconn_mark(w, s);
        } else if (cp != NULL) {
            msg_put(w, cp);
        }
    } else if (rc < 0 && buf_len(&m->rsp) == 0) {
        ops->error_reply(PROTO_ERR_SERVER, "malformed reply from a server", &m->rsp);
    }
    buf_free(&copy);
    c->held_bytes += buf_len(&m->rsp);
}

/*
 * m's reply is complete and m has left its server queue. For the first ask,
 * a miss is re-sent to the previous owner: returns 1 (m is queued again;
 * its completion comes later). For that second ask, the previous owner's
 * answer becomes the client's reply (a hit is also copied to the new
 * owner). Returns 0 when m completes now.
 */
static int warmup_reply(struct worker *w, struct msg *m)
{
    int live = m->client != NULL && m->state == MSG_SENT && !(m->flags & MSG_F_ERROR);
    enum msg_warm stage = (enum msg_warm)m->warm;

    if (stage == MSG_WARM_NONE)
        return 0;               /* another stage's message (a lease's): not warmup's to clear */

    if (stage == MSG_WARM_ASK && live && m->items == 0) {
        STATS_ADD(&m->server->stats, misses, 1);
        if (warmup_ask(w, m))
            return 1;
    } else if (stage == MSG_WARM_FETCH && live) {
        warmup_finish(w, m);
    }
    m->warm = MSG_WARM_NONE;
    m->flags &= (uint16_t)~MSG_F_STAGED;
    m->rflags |= PROTO_RF_RETRIEVAL;
    return 0;
}

/* ------------------------------------------------------------------ the stage */

static int warmup_wanted(const struct conf_pool *cp, const struct conf_global *g)
{
    return cp->warmup_s > 0;
}

/* A single-key get routed to a key's new owner while the pool warms up: on a miss
 * there, its previous owner is asked (warmup_reply). */
static enum stage_verdict warmup_routed(struct stage_req *r)
{
    const struct route *rt = r->rt;
    struct wpool *pool = r->pool;

    if (r->owner == NULL && rt->kind == ROUTE_SEND && rt->warm_from != ROUTE_NONE &&
        r->req->nkeys == 1 && pool->ops->warmable != NULL && pool->ops->warmable(r->req->cmd))
        warmup_mark(r->m, r->rk[0].bytes, r->rk[0].len, pool->servers[rt->warm_from],
                    r->req->cmd);
    return STAGE_PASS;
}

const struct stage stage_warmup = {
    .name = "warmup",
    .wanted = warmup_wanted,
    .routed = warmup_routed,
    .reply = warmup_reply,
};
