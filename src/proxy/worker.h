/* struct worker: one thread, one libuv loop, its own client and server connections. */
#ifndef RL_PROXY_WORKER_H
#define RL_PROXY_WORKER_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "conf.h"
#include "proto/proto.h"
#include "ring.h"
#include "hotkeys.h"
#include "stats.h"

struct proxy;
struct snapshot;
struct client;
struct sconn;
struct server;
struct msg;
struct pool_shared;

union rl_handle {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t    tcp;
    uv_pipe_t   pipe;
};

struct listener {
    union rl_handle   h;
    struct worker    *w;
    struct wpool     *pool;
    int               is_unix;
};

/* A pool as one worker runs it. A reload updates it in place when the pool
 * keeps its name and protocol (clients stay attached and route by the new
 * ring); a pool the reload removed is retired and freed when its last
 * client and server are gone. */
struct wpool {
    struct worker          *w;
    struct wpool           *next;       /* retired list */
    uint32_t                refs;       /* clients + server objects pointing here */
    int                     retired;
    struct snapshot        *hold;       /* retired: the snapshot its cp lives in */
    uint64_t                retired_at;
    uint32_t                index;
    const struct conf_pool *cp;
    const struct proto_ops *ops;
    struct ring            *ring;
    struct server         **servers;    /* [ring->nservers], by ring index */
    struct health         **health;     /* [nservers], the snapshot's shared records */
    const struct ring      *prev_ring;  /* warm-up: the ring before the last reload, or NULL */
    uint64_t                warm_until; /* ... retried on until this monotonic ms */
    uint32_t               *prev_map;   /* prev_ring server index -> servers[] index or UINT32_MAX */
    uint32_t                nservers;
    struct listener        *listener;
    struct pool_shared     *shared;
    struct stats_pool       stats;
    struct hotkeys          hot;        /* this worker's hot keys (single writer) */
    struct hotkeys_snapshot *hot_pub;   /* published every second under w->mu */
};

struct worker {
    struct proxy     *proxy;
    uint32_t          id;
    uv_loop_t         loop;
    uv_thread_t       thread;
    uv_async_t        async;          /* main -> worker: new snapshot, stop */
    uv_check_t        flush;          /* batched writes, after each round of I/O */
    uv_timer_t        drain_timer;
    uv_timer_t        stats_timer;    /* publishes hot-key snapshots */
    atomic_int        stop;           /* 1: drain; 2: close now */
    struct snapshot  *snap;
    struct wpool    **pools;          /* [npools], in config order */
    uint32_t          npools;
    struct wpool     *retired;        /* removed by a reload, draining */
    uv_mutex_t        mu;             /* held while pools change and while stats are read */
    struct msg       *free_msgs;
    uint32_t          nfree_msgs;
    struct client    *clients;        /* every open client */
    struct server    *servers;        /* every server object (incl. draining) */
    struct client    *dirty_clients;  /* output to flush this iteration */
    struct sconn     *dirty_sconns;
    uint32_t         *scratch;        /* per-key server index for fan-out */
    uint32_t          scratch_cap;
    uint32_t          rr;             /* read_from: any-live rotation */
    uint64_t          now_us;         /* monotonic clock, read once per loop iteration */
    int               now_valid;      /* now_us was read in this iteration */
    uint64_t          curr_connections;
    uint64_t          total_connections;
    uint64_t          drain_deadline;
    int               started;
    int               closing;
};

/* Set up a worker's loop, pools, servers and listeners (in the calling
 * thread; the loop then runs in the worker's own). A pool listening on a
 * unix path gets a dup of the snapshot's socket. 0, or -errno with err. */
int  worker_init(struct worker *w, struct proxy *p, uint32_t id, struct snapshot *snap,
                 char *err, size_t errlen);

/* Bind and listen on a unix socket path (permissions from the config). */
int  worker_listen_unix(const struct conf_addr *a, int backlog, char *err, size_t errlen);
int  worker_start(struct worker *w);  /* spawns the thread */
void worker_join(struct worker *w);
void worker_wake(struct worker *w);    /* from any thread */

/* Adopt w->proxy->current if it changed (worker thread, from its async
 * callback: the main thread wakes every worker when it publishes). */
void worker_adopt_snapshot(struct worker *w);

/* A client or server stops pointing at a pool. */
void wpool_unref(struct wpool *wp);

/* Schedule a flush of this connection's output at the end of the iteration. */
void worker_mark_client(struct worker *w, struct client *c);

/* uv_try_write for a socket stream with nothing queued: send(2) with MSG_DONTWAIT, which
 * skips the VFS layer write(2) goes through (a tenth of the per-request syscall cost
 * unpipelined). Bytes written, UV_EAGAIN, or a negative libuv error. */
int  worker_try_send(uv_stream_t *st, const char *p, size_t n);

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

/* A libuv alloc callback's work for a connection reading into in: at least chunk bytes of
 * room after its data, handed out as *b (len 0, which libuv reports as UV_ENOBUFS, when
 * memory runs out). */
void worker_read_room(struct buf *in, size_t chunk, uv_buf_t *b);
void worker_mark_sconn(struct worker *w, struct sconn *s);

#endif
