/* struct worker: one thread, one libuv loop, its own listeners, clients and server connections. */
#ifndef RL_PROXY_WORKER_H
#define RL_PROXY_WORKER_H

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <uv.h>

#include "conf/conf.h"
#include "stats/hotkeys.h"
#include "proto/proto.h"
#include "proxy/conn.h"
#include "proxy/msg.h"
#include "proxy/route.h"
#include "proxy/sched.h"
#include "proxy/stage.h"
#include "lib/invariant.h"
#include "lib/queue.h"
#include "placement/ring.h"
#include "stats/stats.h"

struct client;
struct cworker;
struct introspect;
struct nearcache;
struct trk_pool;
struct trk_worker;
struct msg;
struct pool_shared;
struct hub;
struct server;
struct sconn;
struct snapshot;
struct tls_ctx;

struct listener {
    union rl_handle   h;
    struct worker    *w;
    struct wpool     *pool;
    int               is_unix;
};

/*
 * A pool as one worker runs it. A reload updates it in place when the pool
 * keeps its name and protocol (clients stay attached and route by the new
 * ring); a pool the reload removed is retired and freed when its last
 * client and server are gone.
 */
/*
 * What the modules below a pool's features (server.c, sconn.c, the inline wpool_unref)
 * tell the ones above, through the table worker.c installs in each pool: they call up
 * by no name, so the link graph goes one way (docs/architecture.md).
 *   free: a retired pool's last reference is gone (worker.c frees it);
 *   cluster_reply: a cluster's redirect for m on s (cworker_reply, cluster_worker.h);
 *   cluster_node_failed: a cluster node's connection failed (cworker_node_failed);
 *   rejoin_begin: srv answered while down and rejoins (rejoin.h).
 */
struct wpool_up {
    void (*free)(struct wpool *wp);
    int  (*cluster_reply)(struct sconn *s, struct msg *m, const char *rsp, size_t len);
    void (*cluster_node_failed)(struct server *srv);
    void (*rejoin_begin)(struct server *srv);
};

struct wpool {
    struct route_pool        view;       /* what routing reads (route.h) */
    struct worker           *w;
    struct qnode             retired_link;
    uint32_t                 refs;       /* clients + server objects pointing here */
    const struct wpool_up   *up;         /* calls up from below (worker.c installs them) */
    int                      retired;
    struct snapshot         *hold;       /* retired: the snapshot its cp lives in */
    uint64_t                 retired_at;
    uint32_t                 index;      /* in the snapshot's pools */
    const struct conf_pool  *cp;
    const struct snapshot   *snap;       /* the snapshot cp is of (users: its users) */
    const struct proto_ops  *ops;
    struct server          **servers;    /* [nservers], by ring index */
    uint32_t                 nservers;
    uint32_t                *prev_map;   /* warm-up: view.prev_map's storage */
    /* migrate: prev_ring index -> the server a reload removed, kept (in no ring) while
     * its keys move so that a request moves its key from there first; NULL elsewhere
     * (worker.c wpool_retiring; src/proxy/migrate.c reads it), or no array */
    struct server          **retiring;   /* [nretiring] */
    uint32_t                 nretiring;
    uint64_t                 retiring_seen; /* the ring (checksum | 1) whose migration was
                                            seen running, else 0 */
    int                      retain_req; /* keep each request's bytes for re-dispatch (msg.req) */
    struct listener         *listener;
    const struct tls_ctx    *tls;        /* the snapshot's: clients accepted now use it */
    const struct tls_ctx    *server_tls; /* ... and server connections opened now */
    struct stats_pool        stats;
    struct hotkeys           hot;        /* this worker's hot keys (single writer) */
    struct hotkeys_snapshot *hot_pub;    /* published every second under w->mu */
    struct cworker          *cworker;    /* a Redis Cluster pool's redirects and parked
                                            requests (cluster_worker.c), else NULL */
    uint32_t                 shadow;     /* shadow: the shadow pool's index, or ROUTE_NONE */
    struct stage_chain       chain;      /* the stages its requests pass (stage.h) */
    struct lease_table      *lease;      /* leases: held reads by key (lease.c), or NULL */
    struct msg_watch         shadow_watch; /* its uncompared copies report here (shadow.c) */
    uint8_t                  pins_seen;  /* a client took a pinned connection here: the
                                            servers in use keep ready ones (server.c) */
    struct nearcache        *nc;         /* near_cache: this worker's store (nearcache.c) */
    struct trk_pool         *trk;        /* CLIENT TRACKING's connections (tracking.c) */
    struct introspect       *ins;        /* commandstats, errorstats, SLOWLOG, the request
                                            log's sampling (introspect.c); never NULL once
                                            bound */
    /* ... what every request reads of it, here to save a load (introspect.h) */
    struct proto_cmdstat    *ins_cmd;    /* [ins_mask + 1] by command id & ins_mask */
    uint64_t                 ins_slow_us;     /* SLOWLOG threshold (UINT64_MAX: none) */
    uint64_t                 ins_sample_left; /* requests to the next sampled one */
    uint32_t                 ins_mask;
    int                      ins_capture;     /* keep each request's first bytes */
};

struct worker {
    struct hub       *hub;      /* shared with control (hub.h): the only way up */
    uv_thread_t       tid;      /* its thread, once running (worker_on_thread) */
    atomic_int        running;
    uint32_t          id;
    uv_loop_t         loop;
    uv_thread_t       thread;
    uv_async_t        async;          /* main -> worker: new snapshot, stop */
    uv_check_t        flush;          /* after each round of I/O: batched writes */
    uv_timer_t        drain_timer;
    uv_timer_t        tick;           /* once a second: hot keys, client timeouts, retired pools */
    atomic_int        stop;           /* 1: drain; 2: close now */
    struct snapshot  *snap;
    struct wpool    **pools;          /* [npools], in config order */
    uint32_t          npools;
    struct qnode      retired;        /* pools removed by a reload, draining */
    uv_mutex_t        mu;             /* held while pools change and while stats are read */
    uv_mutex_t        clients_mu;     /* held while `clients` changes, and by CLIENT LIST
                                         (any worker) while it reads them (client_list.c) */
    atomic_int        kills;          /* CLIENT KILL marked some of its clients */
    struct trk_worker *trk;           /* CLIENT TRACKING's tables and inbox (tracking.c) */
    struct qnode      free_msgs;
    uint32_t          nfree_msgs;
    struct qnode      clients;        /* every open client */
    struct qnode      servers;        /* every server object (draining ones too) */
    struct sched      sched;          /* output to flush: this iteration, or lazily (sched.h) */
    uint32_t         *scratch;        /* per-key server index for fan-out */
    uint32_t          scratch_cap;
    struct route_key *rkeys;          /* per-key placement for fan-out */
    uint32_t          rkeys_cap;
    uint32_t          rr;             /* read_from: any-live rotation */
    uint64_t          now_us;         /* monotonic clock, read once per loop iteration */
    int               now_valid;      /* now_us was read in this iteration */
    uint64_t          curr_connections;
    uint64_t          total_connections;
    uint64_t          drain_deadline;
    uint32_t          drain_clients;    /* at the stop: client connections, */
    uint64_t          drain_requests;   /*   and their requests in flight (for the log) */
    int               started;
    int               closing;
};

/* Set up a worker's loop, pools, servers and listeners (in the calling
 * thread; the loop then runs in the worker's own). 0, or -errno with err. */
int  worker_init(struct worker *w, struct hub *hub, uint32_t id, struct snapshot *snap,
                 char *err, size_t errlen);
int  worker_start(struct worker *w);  /* spawns the thread */
void worker_join(struct worker *w);
/* Free a worker that worker_init set up and whose thread never started (a start-up
 * that fails after it; worker_init frees what it set up when it fails itself). */
void worker_discard(struct worker *w);
void worker_wake(struct worker *w);    /* from any thread */

/* Adopt the proxy's current snapshot if it changed (worker thread, from its
 * async callback: the main thread wakes every worker when it publishes). */
void worker_adopt_snapshot(struct worker *w);

/* Whether the caller runs on w's own thread (or w has no thread: a unit test's). Its
 * objects are touched from that thread only: RL_ASSERT(worker_on_thread(w)). */
static inline int worker_on_thread(struct worker *w)
{
    uv_thread_t self = uv_thread_self();
    return !atomic_load_explicit(&w->running, memory_order_relaxed) ||
           uv_thread_equal(&w->tid, &self);
}

/* A client or server stops pointing at a pool: the last one frees a retired pool. */
static inline void wpool_unref(struct wpool *wp)
{
    RL_ASSERT(wp->refs > 0);
    if (--wp->refs == 0 && wp->retired)
        wp->up->free(wp);
}

/* The monotonic clock in microseconds, read at most once per loop iteration
 * (by the first read callback that needs it; the flush at the end of the
 * iteration forgets it). Request latencies are measured with it, so they are
 * exact to within one iteration's processing time, a few microseconds. */
static inline uint64_t worker_now_us(struct worker *w)
{
    if (!w->now_valid) {
        w->now_us = uv_hrtime() / 1000;
        w->now_valid = 1;
    }
    return w->now_us;
}

/* Grow *arr (of elements of `size` bytes, *cap of them) to hold n, doubling; 0 or -ENOMEM. */
static inline int worker__grow(void **arr, uint32_t *cap, uint32_t n, size_t size)
{
    if (n <= *cap)
        return 0;
    uint32_t c = *cap ? *cap : 64;
    while (c < n)
        c *= 2;
    void *p = realloc(*arr, (size_t)c * size);
    if (p == NULL)
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

/* Room for n entries in the fan-out scratch array (w->scratch) / the
 * per-key placements (w->rkeys); 0 or -ENOMEM. They grow to the largest
 * request seen and are reused (inline: the request path's modules sit below
 * worker.c and call it no function). */
static inline int worker_scratch(struct worker *w, uint32_t n)
{
    return worker__grow((void **)&w->scratch, &w->scratch_cap, n, sizeof(*w->scratch));
}

static inline int worker_rkeys(struct worker *w, uint32_t n)
{
    return worker__grow((void **)&w->rkeys, &w->rkeys_cap, n, sizeof(*w->rkeys));
}

#endif
