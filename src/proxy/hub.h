/* struct hub: what the worker threads share with the control thread, and the callbacks through which they report to it. */
#ifndef RL_PROXY_HUB_H
#define RL_PROXY_HUB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

struct cluster;
struct reqlog;
struct sentinel;
struct snapshot;
struct worker;

/*
 * Workers never call the control layer. Control owns one hub, publishes snapshots in it,
 * and installs the callbacks below before the first worker starts; a worker reaches
 * control only through them (news goes up, calls go down). Every callback runs on the
 * calling worker's thread and must be thread-safe on control's side.
 */

/* Why a worker asks for a Redis Cluster map refresh (counted per reason). */
enum cluster_why {
    CLUSTER_WHY_MOVED,
    CLUSTER_WHY_NODE_FAILED,
    CLUSTER_WHY_DOWN,           /* CLUSTERDOWN */
    CLUSTER_WHY_TRYAGAIN,
    CLUSTER_WHY_UNKNOWN_NODE,   /* a MOVED / ASK named a node the map does not have */
    CLUSTER_WHY_COUNT
};

/* Why a worker asks a sentinel pool's sentinels for the master again (counted per reason). */
enum sentinel_why {
    SENTINEL_WHY_FAILED,        /* the master's connection failed */
    SENTINEL_WHY_READONLY,      /* -READONLY: the server is a replica now */
    SENTINEL_WHY_LOADING,       /* -LOADING: the server is loading its data set */
    SENTINEL_WHY_COUNT
};

struct hub_ops {
    /* A worker adopted the published snapshot; `failed`: not every pool could be
     * applied (out of memory). Called once per worker per publication. */
    void (*adopted)(void *ctx, int failed);
    /* A worker saw a sign that a cluster pool's map changed (a redirect, a failed
     * node, CLUSTERDOWN, ...): fetch it again soon. */
    void (*cluster_refresh)(void *ctx, struct cluster *cl, enum cluster_why why);
    /* A sentinel pool's master failed or answered as no master does: ask the sentinels
     * again (sentinel.c). */
    void (*sentinel_refresh)(void *ctx, struct sentinel *sn, enum sentinel_why why);
    /* A pool's numbers over every worker, for memcached `stats` and Redis INFO. */
    void (*pool_numbers)(void *ctx, struct snapshot *snap, const char *pool, uint32_t worker,
                         proto_stat_fn emit, void *arg);
};

struct hub {
    _Atomic(struct snapshot *) current;     /* published by control, adopted by workers */
    atomic_int_fast64_t   mem_used;         /* client input and output held, all workers */
    atomic_uint_fast64_t  next_client_id;
    atomic_size_t         client_output_limit;  /* pause a client beyond this (reloadable) */
    size_t                buf_size;         /* -m: a client's read size, 0: the default */
    uint64_t              start_wall_us;    /* the process's start, for uptime */
    struct worker        *workers;          /* [nworkers]: CLIENT LIST reads every one's
                                             * clients under its clients_mu */
    uint32_t              nworkers;
    const struct hub_ops *ops;
    void                 *ctx;              /* control's, passed to every callback */
    /* introspection (introspect.c): SLOWLOG ids, unique in the process; the request log's
     * writer (control creates it before the workers, sets its path from the config) */
    atomic_uint_fast64_t  slowlog_ids;
    struct reqlog        *reqlog;
};

#endif
