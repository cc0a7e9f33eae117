/* struct proxy: the process — configuration snapshots, worker threads, the main loop. */
#ifndef RL_PROXY_PROXY_H
#define RL_PROXY_PROXY_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "conf/conf.h"
#include "proxy/route.h"
#include "placement/ring.h"

struct admin;
struct cluster;
struct cluster_registry;
struct cluster_view;
struct health;
struct pool_shared;
struct tls_ctx;
struct proto_ops;
struct registry;
struct reload;
struct rejoin_store;
struct worker;
struct signals;
struct ops_rate;

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
};

struct snapshot {
    atomic_uint           refs;
    uint64_t              generation;
    uint32_t              nworkers;
    struct conf          *conf;
    struct snapshot_pool *pools;          /* [conf->npools] */
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

struct proxy_options {
    const char *conf_path;
    const char *stats_addr;       /* -a (overrides ringleader: stats_listen host) */
    int         verbosity;        /* -v, or -1: ringleader.log_level */
    const char *log_file;         /* -o, or NULL: ringleader.log_file */
    int         stats_port;       /* -s; 0: config or default */
    int         stats_interval_ms;/* -i */
    uint32_t    workers;          /* --workers; 0: config or one per CPU */
    size_t      buf_size;         /* -m: initial I/O buffer size */
};

struct proxy {
    uv_loop_t                  loop;          /* main thread: signals, stats port, reload */
    struct proxy_options       opt;
    _Atomic(struct snapshot *) current;
    uv_mutex_t                 snap_mu;       /* publish vs readers taking a reference */
    uint32_t                   nworkers;
    struct worker             *workers;
    uint64_t                   start_wall_us;
    char                       hostname[256]; /* the stats document's source */
    atomic_uint_fast64_t       next_client_id;
    atomic_int                 stopping;
    atomic_int_fast64_t        mem_used;      /* client input and output held, all workers */
    size_t                     client_output_limit; /* pause a client beyond this */
    char                       stats_effective[300]; /* host:port the stats port listens on */
    struct registry           *pools_shared;  /* pool name -> struct pool_shared */
    struct registry           *healths;       /* pool, identity, address -> struct health */
    uv_signal_t                sigterm, sigint, sighup;
    struct signals            *signals;       /* TTIN, TTOU, USR1, USR2 (signals.c) */
    struct ops_rate           *ops_rate;      /* requests per second for INFO (ops_rate.c) */
    uv_tcp_t                   stats_server;
    int                        stats_open;
    struct reload             *reload;        /* reload.c: acks, history, POST /reload */
    struct admin              *admin;         /* the admin endpoint, or NULL */
    struct cluster_registry   *clusters;      /* Redis Cluster pools' maps (cluster.c) */
    struct rejoin_store       *rejoin;        /* every server's rejoin log, the journal */
};

/* Load the config, build rings, start workers and the stats port; runs
 * until a stop signal, then drains. Returns the process exit status. */
int proxy_run(struct proxy_options *opt);

/*
 * Build a snapshot from a loaded conf (takes ownership of conf; a cluster pool's servers
 * become its nodes in a configuration derived from it, conf_derive): rings,
 * shared records, listening sockets for every worker (the old snapshot's
 * are passed on for listen addresses it already has). Pools whose ring is
 * unchanged against `old` keep its ring and epoch; changed ones get epoch +
 * 1. NULL with err (an unbuildable ring, a listener that cannot be opened,
 * no memory): nothing of the new configuration is left open.
 */
struct snapshot *proxy_snapshot_build(struct proxy *p, struct conf *conf,
                                      const struct snapshot *old, char *err, size_t errlen);

#endif
