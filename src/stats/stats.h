/* Counters, declared once: the X-macro lists below generate the structs, the JSON and Prometheus names and -D. */
#ifndef RL_STATS_H
#define RL_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stats/histogram.h"
#include "stats/hotkeys.h"

struct buf;
struct json_t;

/* ACTION(name, type, description); type is COUNTER (only grows), GAUGE, or TIMESTAMP.
 * The first block is twemproxy's, field for field. */
/* TLS, counted per pool for its clients and per server for its connections. */
#define STATS_TLS_CODEC(ACTION)                                                             \
    ACTION(tls_connections,     GAUGE,   "# TLS connections open")                        \
    ACTION(tls_handshakes,      COUNTER, "# TLS handshakes completed")                    \
    ACTION(tls_resumptions,     COUNTER, "# of those that resumed a session (ticket or cached session)") \
    ACTION(tls_verify_failures, COUNTER, "# TLS handshakes failed: a certificate was refused (missing, untrusted, expired, wrong name)") \
    ACTION(tls_protocol_errors, COUNTER, "# TLS handshakes failed: not TLS, no common version or cipher, malformed") \
    ACTION(tls_handshake_aborts, COUNTER, "# TLS handshakes failed: the peer closed the connection") \
    ACTION(tls_handshake_timeouts, COUNTER, "# TLS handshakes not done within tls_handshake_timeout") \
    ACTION(tls_handshake_errors, COUNTER, "# TLS handshakes failed otherwise (out of memory, internal)") \

#define STATS_POOL_CODEC(ACTION)                                                            \
    ACTION(client_eof,          COUNTER, "# eof on client connections")                   \
    ACTION(client_err,          COUNTER, "# errors on client connections")                \
    ACTION(client_connections,  GAUGE,   "# active client connections")                   \
    ACTION(server_ejects,       COUNTER, "# times backend server was ejected")            \
    ACTION(forward_error,       COUNTER, "# times we encountered a forwarding error")     \
    ACTION(fragments,           COUNTER, "# fragments created from a multi-vector request") \
    ACTION(requests,            COUNTER, "# requests from clients")                       \
    ACTION(local_replies,       COUNTER, "# requests answered by the proxy itself")       \
    ACTION(client_errors_sent,  COUNTER, "# protocol errors answered to clients")         \
    ACTION(crossslot,           COUNTER, "# multi-key requests refused: keys on different servers") \
    ACTION(refused_commands,    COUNTER, "# requests refused: a command the proxy does not serve there (inside a transaction, pub/sub, a pool with replicas, a stale SCAN cursor)") \
    ACTION(refused_auth,        COUNTER, "# requests refused before the client authenticated (NOAUTH)") \
    ACTION(refused_limit,       COUNTER, "# requests refused by a bound of the proxy on one client (commands queued before a transaction's first key)") \
    ACTION(client_paused,       COUNTER, "# times a client was paused for backpressure")  \
    ACTION(client_rejected,     COUNTER, "# connections refused over client_connections") \
    ACTION(hits,                COUNTER, "# memcached retrieval hits")                    \
    ACTION(misses,              COUNTER, "# memcached retrieval misses")                  \
    ACTION(failovers,           COUNTER, "# requests sent to a later server of the preference list") \
    ACTION(fail_open,           COUNTER, "# requests sent to a down server because most were down") \
    ACTION(warm_retries,        COUNTER, "# misses after a reload retried on the key's previous owner") \
    ACTION(warm_hits,           COUNTER, "# of those found there and copied to the new owner") \
    ACTION(streamed_requests,   COUNTER, "# requests whose large body streamed to a pinned connection") \
    ACTION(pin_refused,         COUNTER, "# pinned connections refused over max_pinned")    \
    ACTION(transactions,        COUNTER, "# sessions pinned for WATCH or MULTI (Redis)")     \
    ACTION(transactions_aborted, COUNTER, "# transactions answered EXECABORT for a request the proxy refused inside") \
    ACTION(blocking_requests,   COUNTER, "# blocking requests (BLPOP, XREAD BLOCK ...) sent on a pinned connection") \
    ACTION(blocked_clients,     GAUGE,   "# clients waiting for the answer to a blocking request") \
    ACTION(sessions_lost,       COUNTER, "# sessions whose pinned connection failed (their client was closed)") \
    ACTION(memory_refused,      COUNTER, "# clients closed because memory_limit was reached") \
    ACTION(client_timeouts,     COUNTER, "# clients closed idle (client_timeout) or with a late header") \
    ACTION(cluster_moved,       COUNTER, "# MOVED replies of a cluster pool's nodes (the request follows)") \
    ACTION(cluster_ask,         COUNTER, "# ASK replies of a cluster pool's nodes (the request follows)") \
    ACTION(cluster_tryagain,    COUNTER, "# TRYAGAIN replies of a cluster pool's nodes (retried after a pause)") \
    ACTION(cluster_down,        COUNTER, "# CLUSTERDOWN replies of a cluster pool's nodes (retried after a pause)") \
    ACTION(cluster_redirect_limit, COUNTER, "# requests redirected 5 times: the client got the last redirect") \
    ACTION(cluster_parked,      COUNTER, "# requests parked until the slot map knew their node, or TRYAGAIN's pause") \
    ACTION(rejoin_logged,       COUNTER, "# writes of a down server's keys remembered for its rejoin") \
    ACTION(rejoin_invalidations, COUNTER, "# deletes sent to returning servers and to the servers that took their writes") \
    ACTION(rejoin_flushes,      COUNTER, "# returning servers flushed before serving (rejoin: flush, or a fallback)") \
    ACTION(rejoin_fallbacks,    COUNTER, "# rejoins that flushed because the log passed rejoin_log_keys") \
    ACTION(rejoin_failed,       COUNTER, "# rejoins whose invalidations were not acknowledged: down again") \
    ACTION(failover_ttl_capped, COUNTER, "# writes to a failover server sent with failover_ttl as their TTL cap") \
    ACTION(collapsed_gets,      COUNTER, "# gets answered with an identical queued get's reply (collapse_gets)") \
    ACTION(shadow_sent,         COUNTER, "# copies sent to the shadow pool") \
    ACTION(shadow_dropped,      COUNTER, "# copies not sent: shadow server down, over queue_limit, no connection") \
    ACTION(shadow_failed,       COUNTER, "# copies sent that timed out or whose connection failed") \
    ACTION(shadow_compared,     COUNTER, "# shadow replies compared with the primary's (compare: true)") \
    ACTION(shadow_mismatches,   COUNTER, "# of those that differed from the primary's reply") \
    ACTION(pubsub_clients,      GAUGE,   "# clients in subscribed mode (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE)") \
    ACTION(pubsub_messages,     COUNTER, "# pub/sub messages delivered to subscribed clients") \
    ACTION(pubsub_closed,       COUNTER, "# subscribers closed: output over pubsub_output_limit, or a subscription connection lost") \
    ACTION(pubsub_dropped,      COUNTER, "# shard channels a Redis Cluster node unsubscribed (its slot moved away): the client got sunsubscribe") \
    ACTION(tls_reload_closed,   COUNTER, "# clients closed by a reload's tls: plaintext on a pool now TLS-only, or a certificate client_auth no longer admits") \
    ACTION(leases_won,          COUNTER, "# misses that won a lease (leases:): their clients recompute the key") \
    ACTION(lease_reads_held,    COUNTER, "# reads of a leased key held until its store, delete or ttl_ms") \
    ACTION(lease_released_store, COUNTER, "# held reads released by a write of the key, or the key seen stored") \
    ACTION(lease_released_timeout, COUNTER, "# held reads released by ttl_ms") \
    ACTION(lease_overflow,      COUNTER, "# reads of a leased key answered at once: max_waiters reads held") \
    ACTION(lease_dropped,       COUNTER, "# held reads dropped: their client closed") \
    ACTION(lease_fleet_lost,    COUNTER, "# misses whose fleet-wide lease (lease_prefix) another proxy held: held, not answered") \
    ACTION(lease_rereads,       COUNTER, "# re-reads of keys with held reads, to see whether they were stored elsewhere") \
    ACTION(lease_hold_time,     COUNTER, "total microseconds released reads were held (with the buckets: the hold time histogram)") \
    ACTION(lease_hold_le_10ms,  COUNTER, "# released reads held at most 10 ms") \
    ACTION(lease_hold_le_100ms, COUNTER, "# released reads held 10 to 100 ms") \
    ACTION(lease_hold_le_1s,    COUNTER, "# released reads held 100 ms to 1 s") \
    ACTION(lease_hold_over_1s,  COUNTER, "# released reads held over 1 s") \
    ACTION(near_cache_hits,     COUNTER, "# gets answered from the near cache") \
    ACTION(near_cache_misses,   COUNTER, "# gets of near-cached keys forwarded: not kept, or not valid any more") \
    ACTION(near_cache_fills,    COUNTER, "# values stored in the near cache") \
    ACTION(near_cache_fill_races, COUNTER, "# fills not stored: an invalidation or a write came while the value was read") \
    ACTION(near_cache_evict_invalidation, COUNTER, "# near-cache entries evicted by a server's invalidation (or flush)") \
    ACTION(near_cache_evict_write, COUNTER, "# near-cache entries evicted by a write, delete, expire or flush through the proxy") \
    ACTION(near_cache_evict_ring, COUNTER, "# near-cache entries evicted because their key's owner changed (reload, cluster map, failover)") \
    ACTION(near_cache_evict_conn, COUNTER, "# near-cache entries evicted because their server's tracking connection was lost") \
    ACTION(near_cache_evict_lru, COUNTER, "# near-cache entries evicted for room (size) or past ttl_ms") \
    ACTION(near_cache_bytes,    GAUGE,   "bytes held by the near cache") \
    ACTION(near_cache_entries,  GAUGE,   "# values held by the near cache") \
    ACTION(tracking_invalidations, COUNTER, "# invalidation messages (keys) sent to the pool's CLIENT TRACKING clients") \
    ACTION(tracking_flushes,    COUNTER, "# flushes (null-key invalidations) sent to the pool's CLIENT TRACKING clients") \
    ACTION(migrate_key_moves,   COUNTER, "# requests whose keys were first moved from their previous owner (migrate)") \
    ACTION(migrate_refused,     COUNTER, "# requests answered -TRYAGAIN during a migration (keys on several previous owners, a removed server not drained yet, a failed move)") \
    STATS_TLS_CODEC(ACTION)                                                                 \

#define STATS_SERVER_CODEC(ACTION)                                                          \
    ACTION(server_eof,          COUNTER, "# eof on server connections")                   \
    ACTION(server_err,          COUNTER, "# errors on server connections")                \
    ACTION(server_timedout,     COUNTER, "# timeouts on server connections")              \
    ACTION(server_connections,  GAUGE,   "# active server connections")                   \
    ACTION(server_ejected_at,   TIMESTAMP, "timestamp when server was ejected in usec since epoch") \
    ACTION(requests,            COUNTER, "# requests")                                    \
    ACTION(request_bytes,       COUNTER, "total request bytes")                           \
    ACTION(responses,           COUNTER, "# responses")                                   \
    ACTION(response_bytes,      COUNTER, "total response bytes")                          \
    ACTION(in_queue,            GAUGE,   "# requests queued whose bytes are not all on the wire") \
    ACTION(in_queue_bytes,      GAUGE,   "request bytes queued, not yet on the wire")     \
    ACTION(out_queue,           GAUGE,   "# requests sent, awaiting a reply")             \
    ACTION(out_queue_bytes,     GAUGE,   "request bytes sent, awaiting a reply")          \
    ACTION(hits,                COUNTER, "# memcached retrieval hits")                    \
    ACTION(misses,              COUNTER, "# memcached retrieval misses")                  \
    ACTION(in_flight,           GAUGE,   "# requests sent and not yet answered")          \
    ACTION(spills,              COUNTER, "# requests placed here by bounded loads")       \
    ACTION(in_flight_peak,      GAUGE,   "# most requests in flight at once (bounded-loads pools)") \
    ACTION(joined_gets,         COUNTER, "# single-key gets sent inside another get's command") \
    ACTION(pinned_connections,  GAUGE,   "# connections pinned to a client or kept reset for the next") \
    ACTION(ready_pins,          GAUGE,   "# of those idle, reset or opened ahead, for the next session") \
    ACTION(rejoin_log_keys,     GAUGE,   "# keys remembered for this server's rejoin (shared by the workers)") \
    ACTION(rejoin_log_bytes,    GAUGE,   "bytes of the keys remembered for this server's rejoin") \
    STATS_TLS_CODEC(ACTION)                                                                 \

#define STATS_FIELD(name, type, desc) int64_t name;

/* Add to a counter of this worker's (single writer): a relaxed atomic store,
 * so readers on other threads never see a torn value; no lock, no RMW. */
#define STATS_ADD(st, field, n) \
    __atomic_store_n(&(st)->field, (st)->field + (int64_t)(n), __ATOMIC_RELAXED)

struct stats_pool {
    STATS_POOL_CODEC(STATS_FIELD)
};

struct stats_server {
    STATS_SERVER_CODEC(STATS_FIELD)
};


/* ---- the field tables, generated from the lists (renderers, -D, docs test) */

enum stats_type {
    STATS_COUNTER, STATS_GAUGE, STATS_TIMESTAMP,
    STATS_STRING, STATS_LIST                /* only in the *_EXT_CODEC lists */
};

struct stats_field {
    const char     *name;
    enum stats_type type;
    const char     *desc;
    size_t          offset;             /* of the int64_t in its struct */
};

extern const struct stats_field stats_pool_fields[];
extern const size_t stats_pool_nfields;
extern const struct stats_field stats_server_fields[];
extern const size_t stats_server_nfields;

/* Fields ringleader adds outside the counter structs (computed or from the ring/health),
 * as (JSON name, type, description): printed by -D and kept in docs/stats.md. */
#define STATS_POOL_EXT_CODEC(ACTION)                                                        \
    ACTION(epoch,          GAUGE,     "ring generation: grows by one whenever the pool's ring changes") \
    ACTION(ring_checksum,  STRING,     "hex checksum of the ring's canonical inputs: equal checksums place every key alike") \
    ACTION(distribution,   STRING,     "the distribution (placement algorithm) of the pool") \
    ACTION(reloads,        COUNTER,   "# reloads that changed the pool's ring")          \
    ACTION(last_reload,    STRING,     "result of the last reload: ok or the error")      \
    ACTION(last_reload_at, TIMESTAMP, "time of the last reload in seconds since epoch")  \
    ACTION(hot_keys,       LIST,      "top keys by estimated requests over the hot-key window: key, count, error, owner") \
    ACTION(keys_max_over_mean,     GAUGE, "share of the keyspace of the busiest server over the mean share (1.0 = even), from the ring") \
    ACTION(requests_max_over_mean, GAUGE, "requests of the busiest server over the mean per server (1.0 = even)") \
    ACTION(tls_certs,      LIST,      "each certificate file of the pool's tls/server_tls (key, file, not_after: when its earliest certificate expires, seconds since epoch); empty without TLS") \
    ACTION(slowlog_len,    GAUGE,     "SLOWLOG entries of the pool over every worker (Redis pools; docs/introspection.md)") \

#define STATS_SERVER_EXT_CODEC(ACTION)                                                      \
    ACTION(state,           STRING, "up, down or rejoining (health; down is not removed)") \
    ACTION(weight,          GAUGE, "the server's weight in the configuration")           \
    ACTION(keyspace_share,  GAUGE, "share of the keyspace the ring gives the server (fair share: weight / total weight)") \
    ACTION(latency_p50_us,  GAUGE, "median request latency in usec")                     \
    ACTION(latency_p99_us,  GAUGE, "99th percentile request latency in usec")            \
    ACTION(latency_p999_us, GAUGE, "99.9th percentile request latency in usec")          \

/* A Redis Cluster pool's extra fields (docs/cluster.md), present only for such pools. */
#define STATS_CLUSTER_POOL_EXT_CODEC(ACTION)                                                \
    ACTION(cluster_epoch,          GAUGE, "a cluster pool's cluster epoch (CLUSTER INFO cluster_current_epoch of the node last asked)") \
    ACTION(cluster_state,          STRING, "a cluster pool's cluster_state as the node last asked says it: ok, fail or unknown") \
    ACTION(cluster_refreshes,      COUNTER, "# slot map fetches of a cluster pool that brought a map") \
    ACTION(cluster_refresh_errors, COUNTER, "# slot map fetches of a cluster pool that failed (a node down or refusing)") \
    ACTION(cluster_map_changes,    COUNTER, "# slot maps of a cluster pool that differed from the one before (each publishes a new epoch)") \
    ACTION(cluster_refresh_asked,  COUNTER, "# refreshes the workers asked for (MOVED, a node failing, CLUSTERDOWN, TRYAGAIN, an unknown node)") \
    ACTION(cluster_refreshed_at,   TIMESTAMP, "time of a cluster pool's last slot map in seconds since epoch") \
    ACTION(cluster_refresh_error,  STRING, "the last failed fetch's reason (\"\" after a good one)") \

#define STATS_CLUSTER_SERVER_EXT_CODEC(ACTION)                                              \
    ACTION(role,            STRING, "a cluster node's role in the slot map: master or replica") \
    ACTION(slots,           GAUGE, "slots a cluster node serves (masters)")              \

/* The document's top-level fields (struct stats_view), as (JSON name, type, description):
 * printed first by -D so that it names every field of the stats document. */
#define STATS_GLOBAL_CODEC(ACTION)                                                          \
    ACTION(service,           STRING,    "service name: ringleader (twemproxy writes nutcracker)") \
    ACTION(source,            STRING,    "host name of the proxy")                         \
    ACTION(version,           STRING,    "version of the proxy")                           \
    ACTION(uptime,            GAUGE,     "seconds since this process started (an upgrade starts a new one)") \
    ACTION(timestamp,         TIMESTAMP, "time of this document in seconds since epoch")   \
    ACTION(total_connections, COUNTER,   "# client connections accepted since start")      \
    ACTION(curr_connections,  GAUGE,     "# client connections open")                      \
    ACTION(upgrades,          COUNTER,   "# times the listeners were handed to a new process since the first one opened them") \
    ACTION(request_log_written, COUNTER, "# request log lines written (docs/introspection.md)") \
    ACTION(request_log_dropped, COUNTER, "# request log lines lost: a worker's buffer was full, or a write failed") \
    ACTION(request_log_bytes, COUNTER,   "bytes of the request log lines written")        \

/* ---- summing per-worker counters (generated from the lists above)
 *
 * COUNTER and GAUGE fields add up; a TIMESTAMP takes the latest. The sources may be
 * written concurrently by their worker: each field is read with a relaxed atomic load
 * (never torn); the sum is not a snapshot of one instant. */
void stats_pool_add(struct stats_pool *dst, const struct stats_pool *src);
void stats_server_add(struct stats_server *dst, const struct stats_server *src);
/* dst = the sum of n arrays (one per worker) of count elements each; srcs[w][i]. */
void stats_sum_pool(struct stats_pool *dst, const struct stats_pool *const *srcs, size_t n,
                    size_t count);
void stats_sum_server(struct stats_server *dst, const struct stats_server *const *srcs,
                      size_t n, size_t count);

/* ---- the view: everything a renderer prints, already summed over the workers.
 *
 * The core fills it on the reader's thread (stats port, admin): strings point into the
 * configuration (or any storage outliving the render), arrays belong to the view and are
 * allocated by stats_view_alloc. Nothing in here is shared with the workers. */

#define STATS_CHECKSUM_MAX 65           /* hex digits + NUL */
#define STATS_RELOAD_TEXT_MAX 256

struct stats_hot_key {
    struct hotkeys_entry entry;         /* key bytes, estimated count, error bound */
    const char *owner;                  /* the server the key maps to (name), or NULL */
};

struct stats_view_server {
    const char *name;                   /* twemproxy's identity: the name, else host:port */
    struct stats_server stats;          /* summed (in_flight: the core may store the
                                           shared atomic here instead) */
    int up;                             /* 1 up, 0 down (health) */
    int rejoining;                      /* down, and being made safe to read (rejoin) */
    uint32_t weight;                    /* from the configuration */
    double keyspace_share;              /* from the ring (ring_server.keyspace_share) */
    struct histogram latency;           /* merged over the workers */
    const char *role;                   /* a cluster node's ("master", "replica"), else NULL */
    int64_t slots;                      /* ... and the slots it serves */
};

/* A Redis Cluster pool's slot map and its refreshes. */
struct stats_view_cluster {
    uint64_t epoch;                     /* the cluster's current epoch */
    int      state_ok;                  /* 1 ok, 0 fail, -1 unknown */
    uint64_t refreshes, refresh_errors, map_changes, refresh_asked;
    int64_t  refreshed_at;              /* unix seconds; 0 before the first map */
    char     refresh_error[256];
};

/* A Redis Sentinel pool's master and its switches. */
struct stats_view_sentinel {
    char     master_name[128];          /* what the sentinels monitor */
    char     master[300];               /* host:port in use */
    char     previous[300];             /* the one before the last switch ("" none) */
    uint64_t switches, rounds, round_errors, switch_messages, asked;
    int64_t  switched_at;               /* unix seconds; 0 before the first switch */
    uint32_t subscribed;                /* sentinels whose +switch-master pub/sub is live */
    char     error[256];                /* the last failed round's ("" after a good one) */
};

/* A certificate file of a pool's TLS contexts and when it expires. */
#define STATS_TLS_CERTS_MAX 4
struct stats_tls_cert {
    const char *key;                    /* "tls.cert", "tls.ca", "server_tls.cert", ... */
    const char *file;
    int64_t     not_after;              /* unix seconds */
};

/* Introspection (docs/introspection.md): one command's numbers, one error prefix's count. */
struct stats_cmd {
    const char *name;                   /* the protocol's ("get", "client|list") */
    int64_t calls, usec, rejected, failed;
};
struct stats_err {
    char    name[32];                   /* "ERR", "WRONGTYPE", "CLIENT_ERROR" */
    int64_t count;
};

struct stats_view_pool {
    const char *name;
    struct stats_pool stats;            /* summed */
    uint64_t epoch;
    char checksum[STATS_CHECKSUM_MAX];  /* the ring checksum, lower-case hex */
    const char *distribution;
    uint64_t reloads;                   /* reloads that changed this pool's ring */
    char last_reload[STATS_RELOAD_TEXT_MAX]; /* "ok", or the error; "" before any reload */
    int64_t last_reload_at;             /* unix seconds; 0 before any reload */
    struct stats_hot_key *hot_keys;     /* nhot_keys entries, hottest first */
    size_t nhot_keys;
    struct stats_view_server *servers;
    size_t nservers;
    double keys_max_over_mean;          /* from the ring's keyspace shares (0: unknown) */
    int is_cluster;                     /* a Redis Cluster pool: cluster is filled in */
    struct stats_view_cluster cluster;
    int is_sentinel;                    /* a Redis Sentinel pool: sentinel is filled in */
    struct stats_view_sentinel sentinel;
    struct stats_tls_cert tls_certs[STATS_TLS_CERTS_MAX];
    size_t ntls_certs;
    int64_t slowlog_len;                /* SLOWLOG entries over the workers (Redis pools) */
    struct stats_cmd *cmds;             /* commands called, owned (stats_view_free) */
    size_t ncmds;
    struct stats_err *errs;             /* error prefixes answered, owned */
    size_t nerrs;
};

/* users: (docs/security.md): each user's numbers over every worker, from its shared record
 * (src/state/user_state.h). ACTION(name, type, description) as above. */
#define STATS_USER_CODEC(ACTION)                                                            \
    ACTION(requests,            COUNTER, "# requests admitted (checked and within the rate)") \
    ACTION(refused_acl,         COUNTER, "# requests refused: a command category, key or channel the user may not use") \
    ACTION(refused_rate,        COUNTER, "# requests refused over the user's ops or bytes rate") \
    ACTION(connections,         GAUGE,   "# client connections that are this user now")   \
    ACTION(connections_total,   COUNTER, "# client connections that became this user (AUTH, or matched by address)") \
    ACTION(connections_refused, COUNTER, "# AUTH or connections refused over max_connections") \
    ACTION(auth_failures,       COUNTER, "# AUTH with the user's name and a wrong password (or address)") \
    ACTION(bytes_in,            COUNTER, "# request bytes admitted")                     \
    ACTION(bytes_out,           COUNTER, "# reply bytes delivered")                      \

struct stats_view_user {
    const char *name;
#define STATS_USER_FIELD(n, t, d) int64_t n;
    STATS_USER_CODEC(STATS_USER_FIELD)
#undef STATS_USER_FIELD
};

struct stats_view {
    const char *service;                /* "ringleader" (twemproxy writes "nutcracker") */
    const char *source;                 /* hostname */
    const char *version;
    int64_t uptime;                     /* seconds, this process's */
    int64_t upgrades;                   /* handoffs of the listeners so far */
    int64_t timestamp;                  /* unix seconds */
    int64_t total_connections;          /* accepted since start */
    int64_t curr_connections;
    struct stats_view_pool *pools;
    size_t npools;
    struct stats_view_user *users;      /* users: (malloc'ed, freed by stats_view_free) */
    size_t nusers;
    int64_t request_log_written;        /* lines the request log wrote */
    int64_t request_log_dropped;        /* ... and lost (a full buffer, a failed write) */
    int64_t request_log_bytes;
};

/*
 * Allocate a zeroed view with npools pools, pool i having nservers[i] servers and room for
 * nhot[i] hot keys (all counters zero, histograms empty). Returns 0 or -ENOMEM (view left
 * empty). Free with stats_view_free.
 */
int stats_view_alloc(struct stats_view *v, size_t npools, const size_t *nservers,
                     const size_t *nhot);
void stats_view_free(struct stats_view *v);

/*
 * Append the stats-port JSON document (twemproxy's layout and fields, then ringleader's
 * extensions; see docs/stats.md) to out. Returns 0, -ENOMEM.
 */
int stats_render_json(const struct stats_view *v, struct buf *out);

/* Append the Prometheus text exposition (format 0.0.4) to out. Returns 0, -ENOMEM. */
int stats_render_prometheus(const struct stats_view *v, struct buf *out);

/* Requests of the pool's busiest server over the mean per server (0 when idle). */
double stats_requests_max_over_mean(const struct stats_view_pool *p);

/* Print every field with its type and description (ringleader -D). */
void stats_describe(FILE *f);

/*
 * How a key is shown: printable UTF-8 (valid UTF-8 without C0 controls or DEL) as it is;
 * otherwise every byte that is not part of printable UTF-8 is written as the four
 * characters \xHH and the exact bytes are also given in hex (JSON "key_hex", Prometheus
 * label key_hex). Writes a NUL-terminated string of at most outlen bytes (4 * len + 1
 * suffice) and returns 1 when the key was printable, 0 when it was shown escaped.
 */
int stats_key_display(const char *key, size_t len, char *out, size_t outlen);

/*
 * Set obj's "key" (and "key_hex" when the key is not printable) to key (len bytes, any
 * bytes) by the rule above: the one encoding of key bytes in every JSON document (the
 * hot keys, the admin endpoint's /ring). Returns 0 or -ENOMEM (obj may then hold "key").
 */
int stats_key_json(struct json_t *obj, const char *key, size_t len);

#endif
