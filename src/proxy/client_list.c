/* CLIENT LIST / INFO / KILL over the proxy's clients of a pool, on every worker. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "proxy/client.h"
#include "proxy/client_list.h"
#include "proxy/hub.h"
#include "proxy/worker.h"
#include "lib/util.h"

/*
 * Why a walk under each worker's clients_mu, and not a request to each worker through its
 * async handle: the answer is built in the asking worker, at once, like every other local
 * reply, so CLIENT LIST needs no message that waits for N threads (and no care for a worker
 * that stops meanwhile); and the request path takes no lock for it. What changes on the
 * request path is published by the owner in relaxed atomics (struct client_pub: a few
 * stores per read or flush); what is fixed at accept is set before the client joins the
 * list; the list itself, the names and the database change under clients_mu, which only
 * an accept, a close, CLIENT SETNAME/SETINFO, SELECT, RESET and this walk take. The
 * walk holds one worker's lock at a time (never two), after that worker's `mu` (its pools
 * and their names change under it during a reload): mu then clients_mu, the order every
 * taker keeps.
 *
 * A kill marks the client (atomic) and wakes its worker, which closes it in its own
 * thread (client_reap); the asking client itself is ended after its reply, as Redis does.
 */

static void client_row(struct client *c, const struct client *asker, uint64_t now_ms,
                       uint64_t wall_ms, struct proto_client_row *r)
{
    const struct client_pub *p = &c->pub;
    uint64_t last = atomic_load_explicit(&p->last_ms, memory_order_relaxed);
    uint64_t rbs = atomic_load_explicit(&p->rbs, memory_order_relaxed);

    memset(r, 0, sizeof(*r));
    r->id = c->pc.id;
    r->addr = c->pc.peer;
    r->laddr = p->laddr;
    r->name = c->pc.name;
    r->lib_name = c->pc.lib_name;
    r->lib_ver = c->pc.lib_ver;
    r->user = c->pc.user;
    r->pool = c->pool->cp->name;
    r->fd = p->fd;
    r->db = c->pc.db;
    r->flags = atomic_load_explicit(&p->flags, memory_order_relaxed) |
               atomic_load_explicit(&p->trk_flags, memory_order_relaxed) |
               (c == asker ? PROTO_CL_SELF : 0);
    r->redir = (r->flags & PROTO_CL_TRACKING) ? atomic_load_explicit(&p->redir, memory_order_relaxed)
                                              : -1;
    r->multi = (r->flags & PROTO_CL_MULTI) ? 0 : -1;
    r->sub = atomic_load_explicit(&p->sub, memory_order_relaxed);
    r->psub = atomic_load_explicit(&p->psub, memory_order_relaxed);
    r->ssub = atomic_load_explicit(&p->ssub, memory_order_relaxed);
    r->cmd = atomic_load_explicit(&p->cmd, memory_order_relaxed);
    r->age_s = wall_ms >= c->pc.created_ms ? (wall_ms - c->pc.created_ms) / 1000 : 0;
    r->idle_s = now_ms >= last ? (now_ms - last) / 1000 : 0;
    r->qbuf = atomic_load_explicit(&p->qbuf, memory_order_relaxed);
    r->qbuf_free = atomic_load_explicit(&p->qbuf_free, memory_order_relaxed);
    r->rbs = rbs;
    r->rbp = rbs;
    r->obl = atomic_load_explicit(&p->obl, memory_order_relaxed);
    r->oll = atomic_load_explicit(&p->oll, memory_order_relaxed);
    r->omem = atomic_load_explicit(&p->omem, memory_order_relaxed);
    r->tot_mem = atomic_load_explicit(&p->tot, memory_order_relaxed);
}

/* One worker's clients of pool `pool`: visit each; returns how many matched, or -ENOMEM. */
static int client_list_worker(struct worker *w, const struct client *asker, const char *pool,
                              int kill, proto_client_fn visit, void *arg)
{
    uint64_t now_ms = uv_hrtime() / 1000000u, wall_ms = util_wall_us() / 1000;
    struct qnode *n;
    int matched = 0, marked = 0;

    uv_mutex_lock(&w->mu);
    uv_mutex_lock(&w->clients_mu);
    QUEUE_FOREACH(n, &w->clients) {
        struct client *c = QUEUE_DATA(n, struct client, link);
        struct proto_client_row r;
        if (c->pool != asker->pool && strcmp(c->pool->cp->name, pool) != 0)
            continue;
        if (atomic_load(&c->kill) != 0 && c != asker)
            continue;       /* killed, closing on its worker: gone, as in Redis */
        client_row(c, asker, now_ms, wall_ms, &r);
        int v = visit(arg, &r);
        if (v < 0) {
            matched = -ENOMEM;
            break;
        }
        if (v == 0)
            continue;
        matched++;
        if (kill) {
            atomic_store(&c->kill, c == asker ? 2 : 1);
            marked = 1;
        }
    }
    uv_mutex_unlock(&w->clients_mu);
    uv_mutex_unlock(&w->mu);
    if (marked) {
        atomic_store(&w->kills, 1);
        uv_async_send(&w->async);   /* its thread closes them (client_reap) */
    }
    return matched;
}

int client_list_walk(struct client *asker, int kill, proto_client_fn visit, void *arg)
{
    struct hub *hub = asker->w->hub;
    const char *pool = asker->pool->cp->name;
    int total = 0;

    if (hub->workers == NULL)       /* a worker without control (unit tests): its own */
        return client_list_worker(asker->w, asker, pool, kill, visit, arg);
    for (uint32_t i = 0; i < hub->nworkers; i++) {
        struct worker *w = &hub->workers[i];
        /* a worker stopping is draining its clients; its lock goes with its loop */
        if (!w->started || (w != asker->w && atomic_load(&w->stop)))
            continue;
        int n = client_list_worker(w, asker, pool, kill, visit, arg);
        if (n < 0)
            return n;
        total += n;
    }
    return total;
}
