/* struct snapshot: what the workers route by (a configuration, its rings, protocols and listeners), immutable once published. */
#ifndef RL_PROXY_SNAPSHOT_H
#define RL_PROXY_SNAPSHOT_H

#include <stdatomic.h>
#include <stdint.h>

#include "conf/conf.h"

struct cluster;
struct cluster_view;
struct health;
struct sentinel;
struct pool_shared;
struct proto_ops;
struct ring;
struct route_rule;
struct tls_ctx;
struct user_state;

/*
 * What workers route by: a configuration and, per pool, its ring, protocol,
 * shared records and listening sockets. Immutable once published; workers
 * adopt a new one at a safe point (their async callback) and drop the old;
 * the last reference frees it.
 */
struct snapshot_pool {
    struct ring              *ring;
    const struct proto_ops   *ops;
    struct pool_shared       *shared;     /* owned by the proxy's registry */
    struct health           **health;     /* [nservers], owned by the proxy's registry */
    struct route_rule        *rules;      /* [cp->nroutes], pool names resolved */
    int                      *listen_fds; /* [nworkers] listening sockets (owned), or NULL */
    /* warm-up: the ring the pool had before the reload that built this
     * snapshot (NULL when unchanged, or warmup is off) and until when
     * (monotonic ms) a miss is retried on the key's previous owner */
    struct ring              *prev_ring;
    uint64_t                  warm_until_ms;
    double                    keys_max_over_mean;   /* from ring_shares at build */
    /* a Redis Cluster pool (redis_cluster): the proxy's record of it (refreshes) and
     * the roles and replicas of the slot map this snapshot's ring was built from (owned) */
    struct cluster           *cluster;
    struct cluster_view      *cview;
    uint32_t                  shadow;     /* shadow: {pool}'s index, or ROUTE_NONE */
    /* TLS contexts of the listener and of the server connections (NULL:
     * plaintext), built from the files with the snapshot: a reload re-reads
     * them, and open connections keep the context they started with */
    struct tls_ctx           *tls;
    struct tls_ctx           *server_tls;
    /* a sentinel pool (conf_pool.sentinel): the proxy's record of it, which workers
     * tell of a failing master (hub.h's sentinel_refresh) */
    struct sentinel          *sentinel;
};

struct snapshot {
    atomic_uint           refs;
    uint64_t              generation;
    uint32_t              nworkers;
    struct conf          *conf;
    struct snapshot_pool *pools;          /* [conf->npools] */
    struct user_state   **users;          /* [conf->global.nusers], owned by the proxy's
                                             registry (kept across reloads by name) */
};

void snapshot_ref(struct snapshot *s);
void snapshot_unref(struct snapshot *s);

/* Close the snapshot's listening sockets once every worker listens on its
 * own copies (main thread): a snapshot that lives on for a retired pool's
 * clients, or for shutdown, must not keep accepting into a backlog nobody
 * reads. Its ring and records stay. */
void snapshot_close_listeners(struct snapshot *s);

/* Pool `name` of protocol `proto` in a snapshot, or -1. */
int  snapshot_pool_index(const struct snapshot *s, const char *name, enum conf_proto proto);

#endif
