/* The proxy's own numbers for a pool, as (name, value) pairs for the local replies (memcached stats, Redis INFO). */
#include "config.h"

#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "control/ops_rate.h"
#include "control/pool_numbers.h"
#include "control/observe.h"
#include "control/proxy.h"
#include "stats/stats.h"
#include "lib/util.h"

static int64_t tv_us(const struct timeval *tv)
{
    return (int64_t)tv->tv_sec * 1000000 + tv->tv_usec;
}

void pool_numbers_emit(struct proxy *p, struct snapshot *snap, const char *pool, uint32_t worker,
                       proto_stat_fn emit, void *arg)
{
    struct stats_view v;
    struct rusage ru;

    memset(&v, 0, sizeof(v));
    int have = observe_view(p, snap, &v) == 0;
    for (size_t i = 0; have && i < v.npools; i++) {
        const struct stats_view_pool *vp = &v.pools[i];
        if (strcmp(vp->name, pool) != 0)
            continue;
#define POOL_PAIR(name, type, desc) emit(arg, #name, vp->stats.name);
        STATS_POOL_CODEC(POOL_PAIR)
#undef POOL_PAIR
        struct stats_server sum;
        int64_t up = 0;
        memset(&sum, 0, sizeof(sum));
        for (size_t s = 0; s < vp->nservers; s++) {
            stats_server_add(&sum, &vp->servers[s].stats);
            up += vp->servers[s].up != 0;
        }
        /* server_eof stays server_eof; requests becomes server_requests */
#define SERVER_PAIR(name, type, desc) \
        emit(arg, strncmp(#name, "server_", 7) == 0 ? #name : "server_" #name, sum.name);
        STATS_SERVER_CODEC(SERVER_PAIR)
#undef SERVER_PAIR
        emit(arg, "servers_up", up);
        emit(arg, "ops_per_sec", ops_rate_get(p->ops_rate, pool));
        emit(arg, "slowlog_len", vp->slowlog_len);
        break;
    }
    emit(arg, "pid", (int64_t)getpid());
    emit(arg, "threads", (int64_t)p->nworkers);
    emit(arg, "worker", (int64_t)worker);
    emit(arg, "uptime", (int64_t)((util_wall_us() - p->hub.start_wall_us) / 1000000u));
    emit(arg, "time", (int64_t)(util_wall_us() / 1000000u));
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        emit(arg, "rusage_user_us", tv_us(&ru.ru_utime));
        emit(arg, "rusage_system_us", tv_us(&ru.ru_stime));
    }
    if (have) {
        emit(arg, "curr_connections", v.curr_connections);
        emit(arg, "total_connections", v.total_connections);
    }
    if (have)
        stats_view_free(&v);
}
