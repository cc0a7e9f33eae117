/* failover_ttl as a stage: a write sent to a failover server carries at most the pool's failover_ttl. */
#include "config.h"

#include "conf/conf.h"
#include "proxy/msg.h"
#include "proxy/route.h"
#include "proxy/server.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "stats/stats.h"
#include "lib/util.h"

static int failover_ttl_wanted(const struct conf_pool *cp, const struct conf_global *g)
{
    return cp->failover_ttl > 0;
}

/* Routed to a failover server (alone, or as the first of copies while the owner
 * rejoins): mark the request, whose copy to that server is capped when written. */
static enum stage_verdict failover_ttl_routed(struct stage_req *r)
{
    const struct route *rt = r->rt;

    if (r->owner == NULL && (rt->events & ROUTE_EV_FAILOVER) &&
        (rt->kind == ROUTE_SEND || rt->kind == ROUTE_COPIES))
        r->m->flags |= MSG_F_FAILOVER;
    return STAGE_PASS;
}

/* The header of a marked write, just written to s from `before`: the protocol caps its
 * expiry at failover_ttl (memcached exptime, Redis EX/PX where the command allows). */
static int failover_ttl_write(struct stage_req *r, struct msg *wm, struct sconn *s,
                              size_t before)
{
    struct wpool *pool = r->pool;

    if (!(wm->flags & MSG_F_FAILOVER) || pool->ops->ttl_cap == NULL)
        return 0;
    int rc = pool->ops->ttl_cap(r->req->cmd, &s->conn.obuf, before, pool->cp->failover_ttl,
                                (int64_t)(util_wall_us() / 1000000u));
    if (rc > 0)
        STATS_ADD(&pool->stats, failover_ttl_capped, 1);
    return rc < 0 ? rc : 0;
}

const struct stage stage_failover_ttl = {
    .name = "failover_ttl",
    .wanted = failover_ttl_wanted,
    .routed = failover_ttl_routed,
    .write = failover_ttl_write,
};
