/* struct proxy: the process — configuration snapshots, worker threads, the stats port. */
#ifndef RL_PROXY_PROXY_H
#define RL_PROXY_PROXY_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "conf.h"
#include "ring.h"

struct worker;
struct reload_state;
struct health;
struct admin;
struct signals;
struct ops_rate;

/* State of a pool shared by every worker (atomics), kept across reloads by name. */
#define POOL_SPILL_SLOTS 1024

struct pool_shared {
    atomic_uint clients;          /* client connections over all workers */
    atomic_uint_fast64_t reloads; /* reloads that changed this pool's ring */
    /* bounded loads: the last server a key's read spilled to, and when
     * (seconds); a direct-mapped table by key hash, races only blur it */
    atomic_uint_fast64_t spill_key[POOL_SPILL_SLOTS];
    atomic_uint          spill_server[POOL_SPILL_SLOTS];
    atomic_uint          spill_sec[POOL_SPILL_SLOTS];
};

/*
 * What workers route by: a configuration and one ring per pool. Immutable
 * once published; workers adopt a new one at a safe point (their async
 * callback) and drop the old; the last reference frees it.
 */
struct snapshot {
    atomic_uint       refs;
    uint64_t          generation;
    struct conf      *conf;
    struct ring     **rings;      /* [conf->npools] */
    struct pool_shared **shared;  /* [conf->npools], owned by struct proxy */
    int              *unix_fds;   /* [conf->npools]: listening unix socket or -1 (owned) */
    struct health  ***health;     /* [pool][server]: shared records, owned by struct proxy */
    /* warm-up: the ring a pool had before the reload that built this
     * snapshot (NULL when unchanged, or warmup is off) and until when
     * (monotonic ms) a miss is retried on the key's previous owner */
    struct ring     **prev_rings;
    uint64_t         *warm_until_ms;
    double           *keys_max_over_mean; /* [conf->npools], from ring_shares at build */
};

void snapshot_ref(struct snapshot *s);
void snapshot_unref(struct snapshot *s);

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
    uv_loop_t                loop;          /* main thread: signals, stats port, reload */
    struct proxy_options     opt;
    _Atomic(struct snapshot *) current;
    uv_mutex_t               snap_mu;       /* publish vs readers taking a reference */
    uint32_t                 nworkers;
    struct worker           *workers;
    uint64_t                 start_wall_us;
    atomic_uint_fast64_t     next_client_id;
    atomic_int               stopping;
    size_t                   client_output_limit; /* pause a client beyond this */
    char                     stats_effective[300]; /* host:port the stats port listens on */
    /* pool_shared records, one per pool name ever seen */
    struct pool_shared     **shared;
    char                   **shared_names;
    uint32_t                 nshared;
    /* health records, one per pool/server identity/address ever seen */
    struct health          **healths;
    char                   **health_keys;
    uint32_t                 nhealth;
    uint32_t                 health_cursor;  /* where the next lookup probably is */
    uv_signal_t              sigterm, sigint, sighup;
    struct signals          *signals;       /* TTIN, TTOU, USR1, USR2 (signals.c) */
    struct ops_rate         *ops_rate;      /* requests per second for INFO (ops_rate.c) */
    uv_tcp_t                 stats_server;
    int                      stats_open;
    uv_timer_t               stop_timer;
    /* reload: one at a time; workers acknowledge adoption */
    uv_async_t               reload_async;
    atomic_uint              reload_acks;
    atomic_uint              reload_worker_errors;
    struct snapshot         *reload_old;     /* released once every worker moved on */
    int                      reload_pending; /* another reload asked while one runs */
    struct reload_state     *reload;         /* history and per-pool report (reload.c) */
    /* admin endpoint: POST /reload waits on the main loop's answer */
    struct admin            *admin;
    int                      admin_inited;
    uv_async_t               admin_async;
    uv_mutex_t               admin_mu;
    uv_cond_t                admin_cond;
    int                      admin_reload_state;   /* 0 idle, 1 asked, 2 answered */
    int                      admin_reload_status;
    char                     admin_reload_text[1200];
};

/* Load the config, build rings, start workers and the stats port; runs
 * until a stop signal, then drains. Returns the process exit status. */
int proxy_run(struct proxy_options *opt);

/* Build a snapshot from a loaded conf (takes ownership of conf): rings,
 * shared pool records, unix listening sockets (reused from `old` for paths
 * it already listens on). Pools whose ring is unchanged against `old`
 * keep its ring and epoch; changed ones get epoch + 1. NULL with err. */
struct snapshot *proxy_snapshot_build(struct proxy *p, struct conf *conf,
                                      const struct snapshot *old, char *err, size_t errlen);

#endif
