/* Redis Cluster pools on the main thread: each pool's slot map, fetched and refreshed (one refresh in flight per pool), and published to the workers as a new snapshot. */
#ifndef RL_PROXY_CLUSTER_H
#define RL_PROXY_CLUSTER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/hub.h"

struct cluster_map;
struct conf;
struct conf_pool;
struct proxy;
struct snapshot;
struct snapshot_pool;

/*
 *  worker: MOVED, a node's connection failed,      main loop (one fetch per pool):
 *  CLUSTERDOWN, TRYAGAIN, a node not in the map  ──▶ cluster_refresh_request ──async──▶
 *     refresh: CLUSTER INFO + CLUSTER SHARDS from a known node or a seed (cluster_fetch)
 *     ──▶ map changed (checksum) ──▶ snapshot rebuilt from the same configuration
 *     ──▶ published as a reload is (the owner's rebuild: reload_rebuild) ──▶ every worker adopts it
 *
 * Refreshes are spaced by a back-off (100 ms, doubling to 1 s while refreshes find
 * nothing new and requests keep coming; back to 100 ms when the map changes), and run
 * every cluster_refresh seconds besides.
 */


/* One cluster pool's record, kept by name for the proxy's life (a reload that removes
 * the pool leaves it idle). What other threads read of it are atomics. */
struct cluster;

/* Numbers for the stats (any thread). */
struct cluster_stats {
    uint64_t refreshes;          /* fetches that brought a map */
    uint64_t refresh_errors;     /* fetches that failed (a node down, refused ...) */
    uint64_t map_changes;        /* maps that differed from the one before */
    uint64_t requested[CLUSTER_WHY_COUNT];
    uint64_t last_refresh_us;    /* wall clock of the last map fetched (0: never) */
    uint64_t current_epoch;      /* the cluster's (CLUSTER INFO cluster_current_epoch) */
    int      state_ok;           /* cluster_state: 1 ok, 0 fail, -1 unknown */
    char     last_error[256];    /* of the last failed fetch ("" when the last one worked) */
    char     last_node[300];     /* the node the last map came from */
};

/*
 * How a map that changed reaches the workers: the owner (proxy.c installs reload.c's
 * reload_rebuild) builds a snapshot of the configuration in effect, with every cluster's
 * current map, and publishes it. 0 published, 1 not now (a publish is being adopted: asked
 * again in 10 ms), -1 with err (asked again in 1 s). Called on the main thread.
 */
typedef int (*cluster_rebuild_fn)(struct proxy *p, char *err, size_t errlen);

/* Set up / close (main loop still running) / free (after it ended). */
int  cluster_registry_init(struct proxy *p, cluster_rebuild_fn rebuild);
void cluster_registry_start(struct proxy *p);   /* once the main loop exists */
void cluster_registry_close(struct proxy *p);
void cluster_registry_free(struct proxy *p);

/*
 * Snapshot build (main thread), for the cluster pool `pool` of derived configuration
 * `conf` (conf_derive): the pool's record, with a map fetched now when it has none or
 * its seeds changed (synchronously: every seed in turn, each within the pool's timeout,
 * at most 1 s); the pool's servers become the map's nodes (conf_derive_servers) and sp
 * gets the view and the record. Without any answering seed the seeds stay the servers
 * (all slots spread over them) and refreshes keep trying. 0, or -1 with err (no memory).
 */
int  cluster_snapshot_pool(struct proxy *p, struct conf *conf, uint32_t pool,
                           struct snapshot_pool *sp, char *err, size_t errlen);

/* The map's checksum a pool's ring carries (ring_checksum: two proxies on the same map
 * agree), 0 while the pool has no map. */
uint64_t cluster_checksum(const struct cluster *cl);

/* A snapshot was published: the clusters it has are refreshed from now on. */
void cluster_snapshot_published(struct proxy *p, const struct snapshot *snap);

/* Ask for a refresh (any thread). */
void cluster_refresh_request(struct cluster *cl, enum cluster_why why);

/* The record's numbers (any thread). */
void cluster_stats_read(struct cluster *cl, struct cluster_stats *out);

#endif
