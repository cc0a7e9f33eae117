/* Collapsing (collapse_gets): identical single-key gets for one server share one request, and its reply is fanned out. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "conf/conf.h"
#include "proxy/client.h"
#include "proxy/collapse.h"
#include "proxy/msg.h"
#include "proxy/server.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "stats/stats.h"
#include "lib/util.h"

/*
 * Per server connection, allocated at its first collapsible get: the open
 * leaders (a handful: a table scanned linearly), each with its request bytes
 * in `arena`. The arena is reset whenever the table empties, and a table
 * whose arena is full takes no new leaders until then.
 */
#define COLLAPSE_LEADERS   32
#define COLLAPSE_ARENA_MAX (64u * 1024)

struct collapse_leader {
    uint64_t    hash;
    struct msg *m;
    uint32_t    off, len;       /* its request bytes in the arena */
};

struct collapse_table {
    struct collapse_leader l[COLLAPSE_LEADERS];
    uint32_t    n;
    int         inflight;       /* leaders stay open once sent */
    struct buf  arena;
    /* the get collapse_join saw last, found no leader for, and recorded */
    const struct msg *cand;
    uint64_t    cand_hash;
    uint32_t    cand_off, cand_len;
};

static void collapse_close_all(struct collapse_table *t)
{
    for (uint32_t i = 0; i < t->n; i++)
        t->l[i].m->flags &= (uint16_t)~MSG_F_CTABLE;
    t->n = 0;
    t->cand = NULL;
    t->arena.rpos = t->arena.wpos = 0;
}

/* Whether a follower joining leader m now gets all of m's reply. */
static int collapse_joinable(const struct msg *m)
{
    const struct sconn *s = m->sconn;

    if (m->state != MSG_SENT || (m->flags & (MSG_F_STREAMED | MSG_F_RSPLOST)) || s == NULL)
        return 0;
    /* Sent and answered in part: the bytes so far are gone (delivered, or not kept). */
    return buf_len(&m->rsp) == 0 && m->items == 0 &&
           !(s->rx == SCONN_RX_BODY && s->cur == m);
}

int collapse_join(struct sconn *s, struct msg *m, const char *req, size_t len, int inflight)
{
    struct collapse_table *t = s->ctab;

    RL_ASSERT(worker_on_thread(s->server->w));
    if (t == NULL) {
        if ((t = s->ctab = calloc(1, sizeof(*t))) == NULL)
            return 0;
        buf_init(&t->arena);
    }
    t->inflight = inflight;
    t->cand = NULL;
    uint64_t h = XXH3_64bits(req, len);
    for (uint32_t i = 0; i < t->n; i++) {
        struct collapse_leader *l = &t->l[i];
        if (l->hash != h || l->len != len || memcmp(t->arena.data + l->off, req, len) != 0)
            continue;
        if (!collapse_joinable(l->m)) {
            /* Too late to share (its reply is arriving): it leaves the table, and m
             * becomes the leader of the gets after it. */
            l->m->flags &= (uint16_t)~MSG_F_CTABLE;
            *l = t->l[--t->n];
            break;
        }
        /* m is a fresh get: joined twice it would be answered twice, and followers
         * of its own would be dropped from the list it joins. */
        RL_ASSERT(l->m != m && m->waiters == NULL &&
                  !(m->flags & (MSG_F_FOLLOWER | MSG_F_LEADER | MSG_F_CTABLE)));
        m->flags |= MSG_F_FOLLOWER;
        m->state = MSG_SENT;    /* held by its leader until answered */
        m->waiters = l->m->waiters;
        l->m->waiters = m;
        l->m->flags |= MSG_F_LEADER;
        return 1;
    }
    if (t->n == COLLAPSE_LEADERS || buf_len(&t->arena) + len > COLLAPSE_ARENA_MAX ||
        len > UINT32_MAX)
        return 0;
    if (t->n == 0)
        t->arena.rpos = t->arena.wpos = 0;
    t->cand_off = (uint32_t)t->arena.wpos;
    if (buf_append(&t->arena, req, len) < 0)
        return 0;
    t->cand = m;
    t->cand_hash = h;
    t->cand_len = (uint32_t)len;
    return 0;
}

void collapse_lead(struct sconn *s, struct msg *m)
{
    struct collapse_table *t = s->ctab;

    if (t == NULL || t->cand != m || t->n == COLLAPSE_LEADERS)
        return;
    /* In the table twice, it would stay there after collapse_forget (freed). */
    RL_ASSERT(!(m->flags & MSG_F_CTABLE));
    t->l[t->n++] = (struct collapse_leader){ t->cand_hash, m, t->cand_off, t->cand_len };
    m->flags |= MSG_F_CTABLE;
    t->cand = NULL;
}

void collapse_queued(struct sconn *s, const struct msg *m)
{
    struct collapse_table *t = s->ctab;

    /* Anything but the get that was just looked up may change what a later
     * identical get must see (a write, a delete, a touch): leaders close. */
    if (t != NULL && t->n > 0 && m != t->cand)
        collapse_close_all(t);
}

void collapse_sent(struct sconn *s)
{
    struct collapse_table *t = s->ctab;

    if (t != NULL && t->n > 0 && !t->inflight)
        collapse_close_all(t);
}

void collapse_forget(struct sconn *s, struct msg *m)
{
    struct collapse_table *t = s->ctab;

    m->flags &= (uint16_t)~MSG_F_CTABLE;
    if (t == NULL)
        return;
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->l[i].m == m) {
            t->l[i] = t->l[--t->n];
            break;
        }
    }
    if (t->n == 0)
        t->arena.rpos = t->arena.wpos = 0;
}

void collapse_free(struct sconn *s)
{
    if (s->ctab == NULL)
        return;
    buf_free(&s->ctab->arena);
    free(s->ctab);
    s->ctab = NULL;
}

/* ------------------------------------------------------------------ the stage */

static int collapse_wanted(const struct conf_pool *cp, const struct conf_global *g)
{
    return cp->collapse_gets != CONF_COLLAPSE_OFF;
}

/* A collapsible get just written to s: it joins an identical get queued there (taken:
 * it waits for that reply), or, written, it may lead the identical gets after it. */
static int collapse_stage_write(struct stage_req *r, struct msg *wm, struct sconn *s,
                                size_t before)
{
    const struct wpool *pool = r->pool;
    const struct proto_ops *ops = pool->ops;

    if (wm != r->m || wm->warm != MSG_WARM_NONE || ops->collapsible == NULL ||
        !ops->collapsible(r->req, r->buf))
        return 0;
    /* The request as forwarded is what an identical one must match. */
    const struct buf *out = &s->conn.obuf;
    int j = collapse_join(s, wm, buf_rptr(out) + before, buf_len(out) - before,
                          pool->cp->collapse_gets == CONF_COLLAPSE_INFLIGHT);
    if (j > 0) {
        STATS_ADD(&r->pool->stats, collapsed_gets, 1);
        return STAGE_TAKEN;
    }
    r->marks |= STAGE_M_LEAD;
    return 0;
}

static void collapse_stage_queued(struct stage_req *r, struct msg *wm, struct sconn *s)
{
    if ((r->marks & STAGE_M_LEAD) && wm == r->m)
        collapse_lead(s, wm);       /* identical gets queued after it may join it */
}

const struct stage stage_collapse = {
    .name = "collapse",
    .wanted = collapse_wanted,
    .write = collapse_stage_write,
    .queued = collapse_stage_queued,
};
