/* Redis Sentinel pools on the main thread: each pool's master, asked of its sentinels, confirmed with ROLE, followed through +switch-master, and published to the workers as a new snapshot. */
#ifndef RL_CONTROL_SENTINEL_H
#define RL_CONTROL_SENTINEL_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/hub.h"

struct conf;
struct proxy;
struct snapshot;
struct snapshot_pool;

/*
 *  start / reload (snapshot build, no master known yet):
 *     SENTINEL get-master-addr-by-name M to each sentinel in turn, ROLE on the address it
 *     names: the first "master" is the pool's one server (synchronously, bounded)
 *  main loop:
 *     +switch-master on any sentinel's pub/sub        ─┐
 *     a worker: the master failed, -READONLY, -LOADING ─┼─▶ a round (as above, async,
 *     every SENTINEL_CHECK_MS                          ─┘   spaced by a back-off)
 *     ──▶ an address that differs and says ROLE master ──▶ snapshot rebuilt (the pool's one
 *     server, identity the master name, at the new address) ──▶ published as a reload is
 *
 * read_from: any-live: a round that confirmed the master also asks that sentinel
 * SENTINEL REPLICAS M (the replicas without s_down / o_down / disconnected whose link to
 * the master is ok); +sdown / -sdown of a replica start a round too. The snapshot's
 * servers are the master (index 0, owner of every key: one ring identity) then the
 * replicas (sorted); route.c sends read-only commands to a live one of them in turn,
 * everything else to the master. Another replica list is published as a master change is.
 *
 * The proxy never publishes an address whose ROLE is not master.
 */

/* One sentinel pool's record, kept by pool name for the proxy's life. */
struct sentinel;

#define SENTINEL_ADDR_MAX 300
#define SENTINEL_REPLICAS_MAX 16    /* replicas of one master that serve reads (any-live) */

/* Numbers for the stats (any thread). */
struct sentinel_stats {
    char     master_name[128];          /* what the sentinels monitor */
    char     master[SENTINEL_ADDR_MAX]; /* host:port of the master in use ("" none) */
    char     previous[SENTINEL_ADDR_MAX]; /* the one before the last switch ("" none) */
    uint64_t switches;                  /* master changes published since start */
    uint64_t rounds;                    /* rounds that confirmed a master */
    uint64_t round_errors;              /* rounds where no sentinel named a confirmed master */
    uint64_t switch_messages;           /* +switch-master messages for this master */
    uint64_t requested[SENTINEL_WHY_COUNT];   /* workers' news */
    uint64_t switched_at_us;            /* wall clock of the last switch (0: none) */
    uint32_t subscribed;                /* of its sentinels, those whose pub/sub is live */
    uint32_t replicas;                  /* read_from: any-live: live replicas in use */
    uint64_t replica_changes;           /* replica lists published for the same master */
    char     last_error[256];           /* of the last failed round ("" after a good one) */
};

/* How a changed master reaches the workers (proxy.c installs reload.c's reload_rebuild):
 * 0 published, 1 not now (asked again in 10 ms), -1 with err (asked again in 1 s). */
typedef int (*sentinel_rebuild_fn)(struct proxy *p, char *err, size_t errlen);

/* Set up / start (the main loop exists) / close (loop still running) / free (after). */
int  sentinel_registry_init(struct proxy *p, sentinel_rebuild_fn rebuild);
void sentinel_registry_start(struct proxy *p);
void sentinel_registry_close(struct proxy *p);
void sentinel_registry_free(struct proxy *p);

/*
 * Snapshot build (main thread), for the sentinel pool `pool` of derived configuration
 * `conf`: the pool's record (a master asked now when it has none, or its sentinels
 * changed); the pool's one server becomes the master, identity the master name. 0, or -1
 * with err (no sentinel named a master that ROLE confirmed, or no memory).
 */
int  sentinel_snapshot_pool(struct proxy *p, struct conf *conf, uint32_t pool,
                            struct snapshot_pool *sp, char *err, size_t errlen);

/* A snapshot was published: its sentinel pools are followed from now on. */
void sentinel_snapshot_published(struct proxy *p, const struct snapshot *snap);

/* Ask the sentinels again soon (any thread). */
void sentinel_refresh_request(struct sentinel *sn, enum sentinel_why why);

/* The record's numbers (any thread). */
void sentinel_stats_read(struct sentinel *sn, struct sentinel_stats *out);

#endif
