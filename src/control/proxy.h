/* struct proxy: the process — configuration snapshots, worker threads, the main loop. */
#ifndef RL_PROXY_PROXY_H
#define RL_PROXY_PROXY_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "conf/conf.h"
#include "placement/ring.h"
#include "proxy/hub.h"
#include "proxy/route.h"
#include "proxy/snapshot.h"

struct admin;
struct cluster;
struct cluster_registry;
struct sentinel_registry;
struct cluster_view;
struct health;
struct pool_shared;
struct tls_ctx;
struct proto_ops;
struct registry;
struct reload;
struct resolve;
struct etcd_source;
struct rejoin_store;
struct worker;
struct signals;
struct ops_rate;
struct pidfile;
struct upgrade;
struct upgrade_inherit;

struct proxy_options {
    const char *conf_path;
    const char *stats_addr;       /* -a (overrides ringleader: stats_listen host) */
    int         verbosity;        /* -v, or -1: ringleader.log_level */
    const char *log_file;         /* -o, or NULL: ringleader.log_file */
    int         stats_port;       /* -s; 0: config or default */
    int         stats_interval_ms;/* -i */
    uint32_t    workers;          /* --workers; 0: config or one per CPU */
    size_t      buf_size;         /* -m: initial I/O buffer size */
    const char *upgrade_socket;   /* --upgrade-socket: where a successor takes over, or NULL */
    const char *upgrade_from;     /* --upgrade-from: take over from the process there */
    const char *pid_path;         /* -p with --upgrade-from: replaced once serving */
    struct pidfile *pidfile;      /*   and recorded here for main's removal */
    char *const *argv;            /* the command line, for a successor started on request */
};

struct proxy {
    uv_loop_t                  loop;          /* main thread: signals, stats port, reload */
    struct proxy_options       opt;
    struct hub                 hub;           /* shared with the workers: the published
                                                 snapshot, memory, ids, callbacks */
    uv_mutex_t                 snap_mu;       /* publish vs readers taking a reference */
    uint32_t                   nworkers;
    struct worker             *workers;
    char                       hostname[256]; /* the stats document's source */
    atomic_int                 stopping;
    char                       stats_effective[300]; /* host:port the stats port listens on */
    struct registry           *pools_shared;  /* pool name -> struct pool_shared */
    struct registry           *users_shared;  /* user name -> struct user_state */
    struct registry           *healths;       /* pool, identity, address -> struct health */
    uv_signal_t                sigterm, sigint, sighup;
    struct signals            *signals;       /* TTIN, TTOU, USR1, USR2 (signals.c) */
    struct ops_rate           *ops_rate;      /* requests per second for INFO (ops_rate.c) */
    uv_tcp_t                   stats_server;
    int                        stats_open;
    struct reload             *reload;        /* reload.c: acks, history, POST /reload */
    struct admin              *admin;         /* the admin endpoint, or NULL */
    struct cluster_registry   *clusters;      /* Redis Cluster pools' maps (cluster.c) */
    struct sentinel_registry  *sentinels;     /* Redis Sentinel pools' masters (sentinel.c) */
    struct rejoin_store       *rejoin;        /* every server's rejoin log, the journal */
    struct upgrade            *upgrade;       /* the upgrade socket (upgrade.c), or NULL */
    struct upgrade_inherit    *inherit;       /* what a predecessor handed over, until serving */
    uint64_t                   upgrades;      /* handoffs since the first process listened */
    int                        handed_over;   /* a successor serves: drain, leave its files */
    struct resolve            *resolve;       /* DNS names and SRV discovery (resolve.c) */
    struct etcd_source        *etcd;          /* config_source: etcd (etcd_source.c), or NULL */
    struct migrate            *migrate;       /* migrate: pools' keys moving (migrate.c), or NULL */
};

/* Load the config, build rings, start workers and the stats port; runs
 * until a stop signal, then drains. Returns the process exit status. */
int proxy_run(struct proxy_options *opt);

#endif
