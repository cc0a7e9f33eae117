/* Requests per second of each pool over the last full second, sampled on the main loop while someone asks. */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "lib/log.h"
#include "control/ops_rate.h"
#include "control/observe.h"
#include "control/proxy.h"
#include "stats/stats.h"
#include "lib/util.h"

#define OPS_RATE_PERIOD_MS 1000
#define OPS_RATE_IDLE_MS   60000     /* stop sampling this long after the last read */
#define OPS_RATE_POOLS_MAX 256       /* pools followed; more read 0 */

struct ops_rate_pool {
    char     name[128];
    int64_t  requests;               /* at the last sample */
    int64_t  rate;                   /* per second between the last two samples */
    int      sampled;
};

struct ops_rate {
    struct proxy        *p;
    uv_timer_t           timer;
    uv_mutex_t           mu;         /* pools[] vs readers on the workers */
    atomic_uint_fast64_t wanted_until_ms;
    uint64_t             last_ms;    /* monotonic time of the last sample, 0: none */
    struct ops_rate_pool pools[OPS_RATE_POOLS_MAX];
    uint32_t             npools;
};

static void ops_rate_sample(uv_timer_t *t)
{
    struct ops_rate *r = t->data;
    uint64_t now = util_now_ms();

    if (now > atomic_load(&r->wanted_until_ms)) {
        r->last_ms = 0;              /* idle: the next sampling starts afresh */
        return;
    }
    struct snapshot *snap = observe_snapshot(r->p);
    struct stats_view v;
    if (snap == NULL)
        return;
    memset(&v, 0, sizeof(v));
    if (observe_view(r->p, snap, &v) < 0) {
        snapshot_unref(snap);
        return;
    }
    uint64_t dt = r->last_ms ? now - r->last_ms : 0;
    uv_mutex_lock(&r->mu);
    for (uint32_t i = 0; i < r->npools; i++)
        r->pools[i].sampled = 0;
    uint32_t n = 0;
    for (size_t i = 0; i < v.npools && n < OPS_RATE_POOLS_MAX; i++, n++) {
        struct ops_rate_pool *rp = &r->pools[n];
        int64_t req = v.pools[i].stats.requests;
        /* the same pool in the same slot keeps its history; another starts over */
        int same = n < r->npools && strcmp(rp->name, v.pools[i].name) == 0;
        rp->rate = same && dt > 0 && req >= rp->requests
                   ? (int64_t)((uint64_t)(req - rp->requests) * 1000u / dt) : 0;
        rp->requests = req;
        rp->sampled = 1;
        snprintf(rp->name, sizeof(rp->name), "%s", v.pools[i].name);
    }
    r->npools = n;
    uv_mutex_unlock(&r->mu);
    r->last_ms = now;
    stats_view_free(&v);
    snapshot_unref(snap);
}

struct ops_rate *ops_rate_start(struct proxy *p)
{
    struct ops_rate *r = calloc(1, sizeof(*r));

    if (r == NULL || uv_mutex_init(&r->mu) != 0) {
        free(r);
        log_error("ops rate: out of memory: instantaneous_ops_per_sec will read 0");
        return NULL;
    }
    r->p = p;
    uv_timer_init(&p->loop, &r->timer);
    r->timer.data = r;
    uv_timer_start(&r->timer, ops_rate_sample, OPS_RATE_PERIOD_MS, OPS_RATE_PERIOD_MS);
    /* an idle proxy's timer must not keep the loop alive on its own */
    uv_unref((uv_handle_t *)&r->timer);
    return r;
}

static void ops_rate_closed(uv_handle_t *h)
{
    struct ops_rate *r = h->data;
    uv_mutex_destroy(&r->mu);
    free(r);
}

void ops_rate_close(struct ops_rate *r)
{
    if (r != NULL)
        uv_close((uv_handle_t *)&r->timer, ops_rate_closed);
}

int64_t ops_rate_get(struct ops_rate *r, const char *pool)
{
    int64_t rate = 0;

    if (r == NULL)
        return 0;
    atomic_store(&r->wanted_until_ms, util_now_ms() + OPS_RATE_IDLE_MS);
    uv_mutex_lock(&r->mu);
    for (uint32_t i = 0; i < r->npools; i++)
        if (r->pools[i].sampled && strcmp(r->pools[i].name, pool) == 0)
            rate = r->pools[i].rate;
    uv_mutex_unlock(&r->mu);
    return rate;
}
