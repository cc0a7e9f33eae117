/* struct msg: one request's lifecycle from parse to reply — fragments, copies, merge, failure, re-dispatch, release. */
#include "config.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "lib/invariant.h"
#include "proxy/client.h"
#include "proxy/msg.h"
#include "proxy/server.h"
#include "proxy/worker.h"
#include "stats/stats.h"
#include "lib/util.h"

#define MSG_FREE_MAX     4096   /* messages a worker keeps for reuse */
#define MSG_KEEP_RSP_MAX 1024   /* ... of which this many keep their reply buffer */

/* ------------------------------------------------------------------ allocation */

struct msg *msg_get(struct worker *w)
{
    struct qnode *n = queue_first(&w->free_msgs);
    struct msg *m;
    struct buf rsp;

    RL_ASSERT(worker_on_thread(w));
    if (n != NULL) {
        RL_ASSERT(w->nfree_msgs > 0);
        queue_remove(n);
        w->nfree_msgs--;
        m = QUEUE_DATA(n, struct msg, cq);
        rsp = m->rsp;                 /* a reply buffer travels with the message */
    } else {
        m = malloc(sizeof(*m));
        if (m == NULL)
            return NULL;
        buf_init(&rsp);
    }
    memset(m, 0, offsetof(struct msg, head));   /* head: only head_len's bytes are read */
    rsp.rpos = rsp.wpos = 0;
    m->rsp = rsp;
    return m;
}

/*
 * Back to the free list. A reply buffer of the standard size stays with
 * the message (replies are buffered until complete, so every request uses
 * one: keeping it avoids a malloc/free pair per request); larger ones, and
 * any beyond MSG_KEEP_RSP_MAX kept messages, are released.
 */
static inline void msg_watched(struct worker *w, struct msg *m, int ok);

void msg_put(struct worker *w, struct msg *m)
{
    /* nothing holds it any more: no queue, no client, no server waiting to answer it */
    RL_ASSERT(!queue_linked(&m->sq));
    RL_ASSERT(m->client == NULL || !queue_linked(&m->cq));
    RL_ASSERT(m->state != MSG_SENT && m->state != MSG_ZOMBIE && m->state != MSG_PARKED);
    RL_ASSERT(m->waiters == NULL || !(m->flags & MSG_F_LEADER));
    if (m->watch != NULL && m->role < MSG_HELLO)
        msg_watched(w, m, 0);   /* a client's request never answered (its client left
                                   first): told so once (the proxy's own requests keep
                                   their watchers' rules: sconn.c) */
    /* Most messages have none of these: free(NULL) still costs a call into
     * the allocator, four per request. */
    if (m->reqcopy.data != NULL)
        buf_free(&m->reqcopy);
    if (m->req.data != NULL)
        buf_free(&m->req);
    if (m->frags != NULL) {
        free(m->frags);     /* one allocation with the merge's buffer array */
        free(m->key_frag);  /* one allocation with keys */
    }
    if (w->nfree_msgs >= MSG_FREE_MAX) {
        buf_free(&m->rsp);
        free(m);
        return;
    }
    if (m->rsp.cap > BUF_STD_SIZE || w->nfree_msgs >= MSG_KEEP_RSP_MAX)
        buf_free(&m->rsp);
    RL_ASSERT(!queue_linked(&m->cq));
    queue_insert_head(&w->free_msgs, &m->cq);
    w->nfree_msgs++;
}

static int msg_internal(const struct msg *m)
{
    return m->role >= MSG_HELLO;
}

static int msg_child(const struct msg *m)
{
    return m->role == MSG_FRAG || m->role == MSG_COPY;
}

const struct proto_ops *msg_ops(const struct msg *m)
{
    if (m->server != NULL)
        return m->server->pool->ops;
    if (m->client != NULL)
        return m->client->pool->ops;
    if (m->parent != NULL)
        return msg_ops(m->parent);
    return NULL;
}

/* ------------------------------------------------------------------ release */

void msg_release(struct worker *w, struct msg *m)
{
    if (m->state == MSG_SENT || m->state == MSG_ZOMBIE || m->state == MSG_PARKED)
        return;                 /* still owed a reply by a server, or to be re-sent */
    if (m->client != NULL)
        return;                 /* still in its client's queue */
    if (msg_child(m) && m->parent != NULL)
        return;                 /* the parent frees it after merging */
    if (m->nfrag_pending > 0)
        return;                 /* orphaned parent: children still out */
    for (uint32_t i = 0; m->frags != NULL && i < m->nfrag; i++) {
        struct msg *f = m->frags[i];
        if (f == NULL)
            continue;
        m->frags[i] = NULL;
        f->parent = NULL;
        msg_release(w, f);
    }
    msg_put(w, m);
}

/* ------------------------------------------------------------------ memory */

/* The client whose held_cost m's buffers count in: its own, or its parent's (NULL: none,
 * e.g. the proxy's own requests, or a client that went away). */
static inline struct client *msg_payer(const struct msg *m)
{
    if (m->role == MSG_REQUEST)
        return m->client;
    if (msg_child(m) && m->parent != NULL && m->parent->role == MSG_REQUEST)
        return m->parent->client;
    return NULL;
}

/* m's charge in c's held_cost becomes cost. */
static inline void msg_charge_set(struct msg *m, struct client *c, size_t cost)
{
    if (cost == m->charged)
        return;
    c->held_cost = c->held_cost - RL_MIN(c->held_cost, m->charged) + cost;
    m->charged = cost;
}

/* The charge of a client's request that is not a parent: its buffers. The common one
 * (a reply whole behind another), inline. */
static inline void msg_charge_bufs(struct msg *m, struct client *c)
{
    msg_charge_set(m, c, m->rsp.cap + m->req.cap + m->reqcopy.cap);
}

void msg_charge(struct msg *m)
{
    struct client *c = msg_payer(m);
    if (c == NULL)
        return;
    size_t cost = m->rsp.cap + m->req.cap + m->reqcopy.cap;
    if (msg_child(m))
        cost += sizeof(*m);     /* a queued message's own struct is counted per message */
    if (m->frags != NULL)       /* a parent's arrays (msg_put frees them) */
        cost += (size_t)m->nfrag * (sizeof(struct msg *) + sizeof(struct buf *)) +
                (m->key_frag != NULL ? (size_t)m->nkeys * (sizeof(uint32_t) +
                                                            sizeof(struct proto_key)) : 0);
    msg_charge_set(m, c, cost);
}

void msg_uncharge(struct msg *m)
{
    struct client *c = msg_payer(m);
    if (c != NULL)
        c->held_cost -= RL_MIN(c->held_cost, m->charged);
    m->charged = 0;
}

/* ------------------------------------------------------------------ replies */

void msg_reply_bytes(struct msg *m, const char *p, size_t n, int big, int drop)
{
    if (drop || msg_internal(m) || m->state != MSG_SENT || (m->flags & MSG_F_NOREPLY))
        return;
    if (m->role != MSG_REQUEST) {
        if (m->role == MSG_OWN) {
            if (m->watch != NULL && m->watch->keep_reply && buf_append(&m->rsp, p, n) < 0)
                m->flags |= MSG_F_RSPLOST;
            return;
        }
        /* a fragment or a copy: its parent merges or picks */
        if (m->parent != NULL && buf_append(&m->rsp, p, n) < 0)
            m->flags |= MSG_F_ERROR;
        msg_charge(m);
        return;
    }
    struct client *c = m->client;
    if (m->flags & MSG_F_LEADER) {
        /* Its followers get copies of the whole reply, whoever is left to read it. */
        if (buf_append(&m->rsp, p, n) < 0)
            m->flags |= MSG_F_RSPLOST;
        else if (c != NULL)
            c->held_bytes += n;
        msg_charge(m);
        return;
    }
    if (c == NULL || c->closing)
        return;
    /* A reply is held until complete, so a server that fails mid-reply
     * leaves the client a clean error instead of half a value; only a
     * large value streams straight out (its request being the first). A
     * warm-up ask may still be replaced by the previous owner's answer. */
    if ((big || (m->flags & MSG_F_STREAMED)) && queue_first(&c->msgs) == &m->cq &&
        m->warm == MSG_WARM_NONE && !(c->cu.fl & USERS_F_NS)) {  /* names rewritten whole */
        if (!(m->flags & MSG_F_STREAMED) && buf_len(&m->rsp) > 0) {
            c->mops->write(c, buf_rptr(&m->rsp), buf_len(&m->rsp));
            c->held_bytes -= RL_MIN(c->held_bytes, buf_len(&m->rsp));
            m->rsp.rpos = m->rsp.wpos = 0;
        }
        m->flags |= MSG_F_STREAMED;
        c->mops->write(c, p, n);
        c->mops->stream_check(c, m->sconn);     /* a slow reader holds the server back */
        return;
    }
    /* Charged when its buffer grows; the capacity it came with is charged once it is
     * whole and waits behind another (msg_answered): a reply in progress holds at most
     * the standard buffer uncounted, one per server connection. */
    size_t cap = m->rsp.cap;
    if (buf_append(&m->rsp, p, n) == 0)
        c->held_bytes += n;
    if (m->rsp.cap != cap)
        msg_charge(m);
}

/* Copies of one request: the client gets the first copy (in preference
 * order) that did not fail, else the first copy's error. */
static void msg_pick_copy(struct msg *p)
{
    struct msg *pick = NULL;
    for (uint32_t i = 0; i < p->nfrag && pick == NULL; i++)
        if (p->frags[i] != NULL && p->frags[i]->state == MSG_DONE &&
            !(p->frags[i]->flags & MSG_F_ERROR))
            pick = p->frags[i];
    for (uint32_t i = 0; i < p->nfrag && pick == NULL; i++)
        if (p->frags[i] != NULL &&
            (p->frags[i]->state == MSG_DONE || p->frags[i]->state == MSG_ZOMBIE))
            pick = p->frags[i];
    p->rsp.rpos = p->rsp.wpos = 0;
    if (pick != NULL)
        buf_swap(&p->rsp, &pick->rsp);
}

/* Join the fragments' replies in the client's key order (the protocol's
 * merge reads them in place). */
static void msg_merge_frags(struct msg *p, struct client *c)
{
    const struct proto_ops *ops = c->pool->ops;
    struct buf **bufs = (struct buf **)(void *)(p->frags + p->nfrag);
    uint64_t items = 0;

    size_t total = 0;
    for (uint32_t i = 0; i < p->nfrag; i++) {
        bufs[i] = &p->frags[i]->rsp;
        items += p->frags[i]->items;
        total += buf_len(bufs[i]);
    }
    /* The merged reply is about the fragments' size: one allocation, instead of doubling
     * (a copy and fresh pages each time) through a large multi-get's megabytes. Without
     * the memory the merge fails on its own. */
    if (total > BUF_STD_SIZE)
        (void)buf_reserve(&p->rsp, total);
    int rc;
    if (p->key_frag == NULL && ops->merge_env != NULL) {
        /* a broadcast whose reply mixes the servers' with the proxy's own (INFO) */
        struct proto_env env;
        c->mops->env(c, &env);
        if (p->nfrag == 1 && p->frags[0]->server != NULL) {
            env.target = p->frags[0]->server->index;    /* INDEXED: the server it named */
            env.next_target = route_walk(&c->pool->view, env.target + 1);
        }
        rc = ops->merge_env(p->cmd, p->reqcopy.data, bufs, p->nfrag, &env, &p->rsp);
    } else {
        rc = ops->merge(p->cmd, p->reqcopy.data, p->keys, p->nkeys, p->key_frag, bufs, p->nfrag,
                        &p->rsp);
    }
    if (rc < 0) {
        p->rsp.rpos = p->rsp.wpos = 0;
        ops->error_reply(PROTO_ERR_SERVER, "malformed reply from a server", &p->rsp);
        STATS_ADD(&c->pool->stats, forward_error, 1);
    }
    if (p->rflags & PROTO_RF_RETRIEVAL) {
        STATS_ADD(&c->pool->stats, hits, items);
        STATS_ADD(&c->pool->stats, misses, p->nkeys > items ? p->nkeys - items : 0);
    }
}

/* A built reply stands when every fragment succeeded; else the first failure replaces it
 * and closes the client (the servers did not do what its reply said). */
static void msg_check_built(struct msg *p, struct client *c)
{
    for (uint32_t i = 0; i < p->nfrag; i++) {
        struct msg *f = p->frags[i];
        if (f == NULL || !(f->flags & MSG_F_ERROR))
            continue;
        p->rsp.rpos = p->rsp.wpos = 0;   /* counted in held_bytes only once it is done */
        buf_swap(&p->rsp, &f->rsp);
        p->flags |= MSG_F_ERROR | MSG_F_CLOSE;
        STATS_ADD(&c->pool->stats, forward_error, 1);
        return;
    }
}

/* Every child of parent p is answered (or, for all-async copies, the first
 * one succeeded): build p's reply and deliver it. */
static void msg_parent_done(struct worker *w, struct msg *p)
{
    struct client *c = p->client;

    if (c == NULL) {            /* orphan: nobody wants the reply */
        msg_release(w, p);
        return;
    }
    if (p->flags & MSG_F_COPIES)
        msg_pick_copy(p);
    else if (p->flags & MSG_F_BUILT)
        msg_check_built(p, c);
    else
        msg_merge_frags(p, c);
    for (uint32_t i = 0; i < p->nfrag; i++) {
        struct msg *f = p->frags[i];
        if (f == NULL)
            continue;           /* an all-async copy already detached */
        msg_uncharge(f);
        p->frags[i] = NULL;
        f->parent = NULL;
        msg_release(w, f);
    }
    p->state = MSG_DONE;
    c->held_bytes += buf_len(&p->rsp);
    msg_charge(p);
    c->mops->advance(c);
}

/* m has its answer (a reply, or an error): hand it on. */
static void msg_answered(struct worker *w, struct msg *m)
{
    if (msg_child(m)) {
        struct msg *p = m->parent;
        if (p == NULL) {
            msg_release(w, m);
            return;
        }
        /* all-async: the first copy to succeed answers; the others finish
         * on their own (orphans, freed when answered) */
        if ((p->flags & MSG_F_ASYNC) && !(m->flags & MSG_F_ERROR) && p->client != NULL) {
            p->nfrag_pending = 0;
            for (uint32_t i = 0; i < p->nfrag; i++) {
                struct msg *f = p->frags[i];
                if (f != NULL && f != m && (f->state == MSG_SENT || f->state == MSG_NEW)) {
                    msg_uncharge(f);
                    f->parent = NULL;
                    p->frags[i] = NULL;
                }
            }
            msg_parent_done(w, p);
            return;
        }
        msg_charge(m);
        if (--p->nfrag_pending == 0)
            msg_parent_done(w, p);
        return;
    }
    struct client *c = m->client;
    if (c != NULL) {
        /* Delivered now (the client's first) it holds nothing; else its buffers wait. */
        if (queue_first(&c->msgs) != &m->cq) {
            if (m->role == MSG_REQUEST && m->frags == NULL)
                msg_charge_bufs(m, c);
            else
                msg_charge(m);
        }
        c->mops->advance(c);
        return;
    }
    msg_release(w, m);
}

/* ------------------------------------------------------------------ waiters */

/*
 * A leader's waiters (collapse.c joins identical gets to one that is sent): the leader's
 * outcome is theirs. msg_waiters_take detaches the waiters of leader L, copying L's
 * complete reply into each when `complete`; it is called while L is alive, before L is
 * answered (which may free it). msg_waiters_complete / _fail then answer them.
 */
static struct msg *msg_waiters_take(struct msg *leader, int complete)
{
    struct msg *first = leader->waiters;

    leader->waiters = NULL;
    leader->flags &= (uint16_t)~MSG_F_LEADER;
    for (struct msg *f = first; complete && f != NULL; f = f->waiters) {
        if ((leader->flags & MSG_F_RSPLOST) ||
            buf_append(&f->rsp, buf_rptr(&leader->rsp), buf_len(&leader->rsp)) < 0) {
            f->flags |= MSG_F_RSPLOST;      /* msg_waiters_complete answers it with an error */
            continue;
        }
        f->items = leader->items;
    }
    return first;
}

static void msg_waiters_complete(struct worker *w, struct msg *f)
{
    while (f != NULL) {
        struct msg *next = f->waiters;
        struct client *c = f->client;

        f->waiters = NULL;
        f->flags &= (uint16_t)~MSG_F_FOLLOWER;
        if (f->flags & MSG_F_RSPLOST) {
            f->state = MSG_NEW;
            msg_fail(w, f, PROTO_ERR_NOMEM, "out of memory");
        } else {
            if (c != NULL) {
                c->held_bytes += buf_len(&f->rsp);
                if (f->rflags & PROTO_RF_RETRIEVAL) {
                    STATS_ADD(&c->pool->stats, hits, f->items);
                    STATS_ADD(&c->pool->stats, misses, f->nkeys > f->items ? f->nkeys - f->items : 0);
                }
            }
            msg_complete(w, f);
        }
        f = next;
    }
}

static void msg_waiters_fail(struct worker *w, struct msg *f, enum proto_err code,
                             const char *reason)
{
    while (f != NULL) {
        struct msg *next = f->waiters;

        f->waiters = NULL;
        f->flags &= (uint16_t)~MSG_F_FOLLOWER;
        f->state = MSG_NEW;         /* in no server queue: failed, it is done */
        msg_fail(w, f, code, reason);
        f = next;
    }
}


/* Tell m's watcher, once, what became of it. */
static inline void msg_watched(struct worker *w, struct msg *m, int ok)
{
    struct msg_watch *wt = m->watch;

    if (wt != NULL) {
        m->watch = NULL;
        wt->done(wt, w, m, ok);
    }
}

/* msg_complete of a message someone waits for: its watcher, its followers. */
static void __attribute__((noinline)) msg_complete_watched(struct worker *w, struct msg *m)
{
    msg_watched(w, m, 1);
    if (m->flags & MSG_F_LEADER) {
        /* The followers get their copies after m is answered: delivering m may free it. */
        struct msg *followers = msg_waiters_take(m, 1);
        msg_answered(w, m);
        msg_waiters_complete(w, followers);
        return;
    }
    msg_answered(w, m);
}

void msg_complete(struct worker *w, struct msg *m)
{
    RL_ASSERT(m->state != MSG_PARKED);     /* a parked message is re-sent, not answered */
    RL_ASSERT(!queue_linked(&m->sq));      /* taken off its server's queue first */
    if (m->state == MSG_ZOMBIE) {   /* the late reply of an answered request */
        m->state = MSG_DONE;
        msg_release(w, m);
        return;
    }
    if (m->state == MSG_DONE)
        return;
    m->state = MSG_DONE;
    if (msg_internal(m)) {
        msg_release(w, m);
        return;
    }
    if (m->watch != NULL || (m->flags & MSG_F_LEADER)) {
        msg_complete_watched(w, m);
        return;
    }
    msg_answered(w, m);
}

void msg_fail(struct worker *w, struct msg *m, enum proto_err code, const char *reason)
{
    if (msg_internal(m) || m->state == MSG_ZOMBIE || m->state == MSG_DONE)
        return;
    const struct proto_ops *ops = msg_ops(m);
    struct client *c = m->client;

    m->flags |= MSG_F_ERROR;
    if (msg_child(m)) {
        if (m->parent != NULL && ops != NULL) {
            m->rsp.rpos = m->rsp.wpos = 0;
            ops->error_reply(code, reason, &m->rsp);
        }
    } else if (c != NULL && !(m->flags & MSG_F_NOREPLY)) {
        if (m->flags & MSG_F_STREAMED) {
            /* Half a reply already went out: the stream cannot be mended. */
            c->eof = 1;
            c->closing = 1;
        } else {
            c->held_bytes -= RL_MIN(c->held_bytes, buf_len(&m->rsp));
            m->rsp.rpos = m->rsp.wpos = 0;
            ops->error_reply(code, reason, &m->rsp);
            c->held_bytes += buf_len(&m->rsp);
        }
    }
    m->warm = MSG_WARM_NONE;
    m->flags &= (uint16_t)~MSG_F_STAGED;   /* failed: no stage acts on its reply */
    /* A parked message stays held by its queue, which releases it (as a zombie). */
    m->state = (m->state == MSG_SENT || m->state == MSG_PARKED) ? MSG_ZOMBIE : MSG_DONE;
    msg_watched(w, m, 0);
    if (m->flags & MSG_F_LEADER) {
        struct msg *followers = msg_waiters_take(m, 0);
        msg_answered(w, m);
        msg_waiters_fail(w, followers, code, reason);
        return;
    }
    msg_answered(w, m);
}

void msg_answer(struct worker *w, struct msg *m, const char *p, size_t n, int error)
{
    if (msg_internal(m) || m->state == MSG_SENT || m->state == MSG_ZOMBIE ||
        m->state == MSG_DONE)
        return;
    m->state = MSG_NEW;
    if (error)
        m->flags |= MSG_F_ERROR;
    if (msg_child(m)) {
        if (m->parent != NULL && buf_append(&m->rsp, p, n) < 0)
            m->flags |= MSG_F_ERROR;
    } else if (m->client != NULL && !(m->flags & MSG_F_NOREPLY) && !m->client->closing) {
        if (buf_append(&m->rsp, p, n) == 0)
            m->client->held_bytes += n;
    }
    msg_complete(w, m);
}
