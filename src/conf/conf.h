/* struct conf: a YAML file (twemproxy's format plus ringleader's keys), validated and immutable. */
#ifndef RL_CONF_H
#define RL_CONF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "hash/hash.h"
#include "dist/dist.h"

enum conf_proto { CONF_PROTO_MEMCACHE, CONF_PROTO_REDIS };
enum conf_on_down { CONF_ON_DOWN_FAILOVER, CONF_ON_DOWN_MISS, CONF_ON_DOWN_ERROR };
enum conf_read_from { CONF_READ_PRIMARY, CONF_READ_ANY_LIVE, CONF_READ_LOCAL_ZONE };
enum conf_write_to { CONF_WRITE_PRIMARY, CONF_WRITE_ALL, CONF_WRITE_ALL_ASYNC };
/* What a server that was down gets before it serves reads again (docs/routing.md). */
enum conf_rejoin { CONF_REJOIN_INVALIDATE, CONF_REJOIN_FLUSH, CONF_REJOIN_TRUST };
/* collapse_gets: identical gets for one server share one request. */
enum conf_collapse { CONF_COLLAPSE_OFF, CONF_COLLAPSE_QUEUED, CONF_COLLAPSE_INFLIGHT };

/* A place to listen or connect: TCP host:port or a unix socket path. */
struct conf_addr {
    char    *text;      /* as written, e.g. "127.0.0.1:22121" or "/tmp/rl.sock" */
    char    *host;      /* TCP host (name or literal), NULL for unix */
    uint16_t port;
    char    *path;      /* unix socket path, NULL for TCP */
    int      perm;      /* unix listen permissions (e.g. 0666), -1 if not given */
};

struct conf_server {
    struct conf_addr addr;
    uint32_t weight;    /* > 0 */
    char    *name;      /* NULL when not given */
    char    *ident;     /* name, else host:port, else host when port 11211 (twemproxy) */
    char    *label;     /* name, else host:port (what the vectors and the tool print) */
    char    *zone;      /* NULL when not given */
    int      line, col; /* where it was written, for messages */
};

/* shadow: a copy of the pool's requests goes to another pool (docs/routing.md). */
struct conf_shadow {
    char    *pool;          /* the shadow pool's name; NULL: no shadow */
    double   fraction;      /* share of the keyspace shadowed, by key hash: 1.0 */
    int      compare;       /* compare each shadow reply with the primary's: 0 */
    uint32_t queue_limit;   /* copies waiting on one shadow server connection at most: 1000 */
    uint32_t batch_ms;      /* copies wait up to this long to go out together: 1 (0: at once) */
};

/* leases: a missed key's first reader recomputes it; the others' reads wait for the store. */
struct conf_leases {
    uint32_t ttl_ms;        /* 0: off; else how long reads of a missed key wait: 2000 */
    uint32_t max_waiters;   /* held reads over all keys (and leases outstanding): 10000 */
    char     prefix[65];    /* lease_prefix: a fleet-wide lease is a key of the servers
                               named prefix + key ("": per proxy) */
    int      meta;          /* memcached pools: the lease is memcached's own (mg ... N) */
};

/* near_cache: values kept by the proxy (src/proxy/nearcache.c, docs/nearcache.md) */
enum conf_nc_keys { CONF_NC_HOT, CONF_NC_ALL, CONF_NC_PREFIX };
struct conf_near_cache {
    int      on;            /* the pool has a near_cache section */
    uint64_t size;          /* bytes over all workers: 64 MiB */
    uint64_t max_value;     /* larger replies are never kept: 64 KiB */
    uint32_t ttl_ms;        /* Redis: 0 = until invalidated; memcached: required, > 0 */
    enum conf_nc_keys keys; /* hot (default), all, or the prefixes below */
    char   **prefixes;
    uint32_t nprefixes;
};

struct conf_route {
    char *prefix;       /* key prefix */
    char *pool;         /* target pool name */
};

/* redis_cluster: cluster_zones: a node whose address matches gets the zone. */
struct conf_zone_rule {
    char *match;        /* "host:port", "host", or an IPv4 network "10.0.1.0/24" */
    char *zone;
};

/* Where a key of a nested mapping was written (1-based), for messages built
 * after loading (the TLS contexts are built from files by src/proxy/tls.c). */
struct conf_pos {
    int line, col;
};

/* A pool's `tls:` (its listener accepts TLS) or `server_tls:` (it connects to
 * its servers over TLS). File paths are read when the snapshot is built, not
 * here: loading stays free of I/O beyond the YAML file itself. */
struct conf_tls {
    char    *cert;                /* PEM certificate chain (listener: required) */
    char    *key;                 /* PEM private key (with cert) */
    char    *ca;                  /* PEM CA bundle: client_auth (listener), verify (servers);
                                     NULL for servers: the system's trust store */
    int      client_auth;         /* listener: require a client certificate signed by ca */
    int      verify;              /* servers: verify the certificate and its name: 1 */
    char    *server_name;         /* servers: name to verify and send as SNI (NULL: the host) */
    int      min_version;         /* 12 or 13 (TLS 1.2 / 1.3): 12; 1.3 is used when both allow */
    char    *ciphers;             /* TLS 1.2 cipher list (OpenSSL syntax), NULL: OpenSSL's */
    char    *ciphersuites;        /* TLS 1.3 suites, NULL: OpenSSL's */
    const char *section;          /* "tls" or "server_tls", for messages */
    struct conf_pos at, at_cert, at_key, at_ca, at_ciphers, at_ciphersuites;
};

/* sentinel: the pool's one server is the master Redis Sentinel names (src/control/sentinel.c). */
struct conf_sentinel {
    char    *master;              /* the name the sentinels monitor */
    struct conf_addr *addrs;      /* the sentinels, asked in this order */
    uint32_t naddrs;
    char    *auth;                /* sentinel_auth: AUTH to the sentinels; NULL: none */
    char    *username;            /* sentinel_username; NULL: default */
    enum conf_read_from read_from;  /* primary, or any-live: reads to live replicas too */
};

struct conf_pool {
    char    *name;
    int      line, col;
    struct conf_addr listen;
    enum conf_proto protocol;     /* `redis: true` or `protocol: redis` */
    enum hash_type hash;          /* default fnv1a_64 for ketama/modula/random, else xxh3 */
    int      has_hash_seed;
    uint64_t hash_seed;
    int      has_hash_tag;
    char     hash_tag[2];
    enum dist_type dist;          /* default ketama */
    int      timeout_ms;          /* -1: none (twemproxy's default) */
    int      backlog;             /* 512 */
    int      preconnect;
    char    *redis_auth;          /* NULL: none */
    char    *redis_username;      /* ACL user the hello authenticates as; NULL: default */
    int      redis_db;            /* 0 */
    uint32_t server_connections;  /* 1 */
    int      auto_eject_hosts;    /* 0 */
    int      server_retry_timeout_ms; /* 30000 */
    uint32_t server_failure_limit;    /* 2 */
    int      tcpkeepalive;
    uint32_t client_connections;  /* 0: unlimited */
    uint32_t max_pinned;          /* pinned connections per server over all workers: 1000 (0: none) */
    struct conf_tls *tls;         /* the listener accepts TLS only, or NULL */
    struct conf_tls *server_tls;  /* connect to the servers over TLS, or NULL */
    /* ringleader extensions */
    uint32_t vnodes;              /* ketama points per server at equal weight: 160 */
    uint32_t maglev_table_size;   /* 65537 */
    uint32_t probes;              /* multiprobe: 21 */
    uint32_t *slot_map;           /* slots: 16384 entries, or NULL for an even split */
    double   balance_factor;      /* 0: off; else > 1.0 */
    uint32_t replicas;            /* 1 */
    enum conf_read_from read_from;
    enum conf_write_to write_to;
    enum conf_on_down on_down;
    int      eject;               /* mark failing servers down: auto_eject_hosts or on_down given */
    uint32_t warmup_s;            /* 0: off */
    uint32_t item_size_max;       /* memcached value limit: 1 MiB */
    int      allow_flush;         /* broadcast flush_all / FLUSHALL / FLUSHDB */
    int      scripts;             /* Redis: forward EVAL*, FCALL*: 1 */
    int      coalesce_gets;       /* memcached: join single-key gets to one server: 1 */
    enum conf_rejoin rejoin;      /* invalidate (default), flush, trust */
    uint32_t rejoin_log_keys;     /* keys remembered per down server: 100000 */
    uint32_t failover_ttl;        /* seconds: the longest TTL a write to a failover server
                                     carries; 0: off */
    enum conf_collapse collapse_gets; /* off (default), queued (true), inflight */
    struct conf_leases leases;    /* leases: (proxy/lease.c) */
    struct conf_shadow shadow;
    struct conf_near_cache near_cache;
    struct conf_route *routes;
    uint32_t nroutes;
    /* Redis Cluster (redis_cluster: true): servers are seeds until the snapshot
     * replaces them with the cluster's nodes (conf_derive_servers) */
    int      redis_cluster;
    uint32_t cluster_refresh_s;   /* periodic slot map refresh: 30 (0: only on events) */
    struct conf_zone_rule *cluster_zones;
    uint32_t ncluster_zones;
    int      replica_reads;       /* derived: redis_cluster with read_from other than primary
                                     (node connections send READONLY) */
    struct conf_server *servers;  /* YAML order */
    uint32_t nservers;
    struct conf_sentinel *sentinel; /* NULL: servers are listed; else none are, and the
                                       snapshot's one server is the master (conf_derive) */
    /* DNS (docs/operations.md): host names of servers: re-resolved by the main loop every
     * resolve_interval seconds (0: not given); discovery: the SRV name whose records are
     * the servers ("_memcache._tcp.example"), NULL: none */
    uint32_t resolve_interval_s;
    char    *discovery;
    /* migrate (Redis pools, docs/reload.md): a reload that changes owners moves the keys
     * (src/control/migrate.c), at most migrate_rate keys/s over the pool: 20000 */
    int      migrate;
    uint32_t migrate_rate;
};

/* users: (src/conf/conf_users.c, docs/security.md): who a client is, what it may run and
 * touch, its namespace and rate. Command categories (a command is allowed when every
 * category it is in is granted; connection commands are in none): */
#define CONF_CAT_READ         0x01u
#define CONF_CAT_WRITE        0x02u
#define CONF_CAT_ADMIN        0x04u
#define CONF_CAT_SCRIPTS      0x08u
#define CONF_CAT_PUBSUB       0x10u
#define CONF_CAT_BLOCKING     0x20u
#define CONF_CAT_TRANSACTIONS 0x40u
#define CONF_CAT_DANGEROUS    0x80u
#define CONF_CAT_ALL          0xffu

struct conf_cidr {
    uint8_t  v6;                  /* IPv6 (else IPv4 in the first 4 bytes) */
    uint8_t  bits;                /* prefix length */
    uint8_t  addr[16];            /* network, masked */
};

struct conf_user {
    char    *name;
    int      line, col;
    uint8_t  sha256[32];          /* SHA-256 of the password (password_sha256, or the
                                     password_file's line hashed at load) */
    int      has_password;        /* 0: no password (a memcached-only user: clients) */
    char   **pools;               /* pool names it may use */
    uint32_t npools;
    uint32_t commands;            /* CONF_CAT_* granted: all when not given */
    char   **keys;                /* Redis ACL glob patterns ("*": any), seen through the
                                     namespace (the client's own names) */
    uint32_t nkeys;               /* 0: every key */
    uint32_t *keys_len;           /* [nkeys] each pattern's length */
    uint32_t *keys_prefix;        /* [nkeys] a pattern that is a literal then one `*`: the
                                     literal's length (matched by memcmp), else UINT32_MAX */
    char    *ns;                  /* namespace: the prefix added to keys and channels, NULL */
    uint32_t ns_len;
    uint64_t rate_ops;            /* requests per second per proxy, 0: no limit */
    uint64_t rate_bytes;          /* request and reply bytes per second, 0: no limit */
    uint32_t burst_ms;            /* the bucket holds this long at the rate: 100 */
    uint32_t max_connections;     /* 0: no limit */
    struct conf_cidr *clients;    /* memcached clients matched by address */
    uint32_t nclients;
};

/* request_log: {path, sample, errors, key}: JSON lines of sampled requests (conf_introspect.c) */
struct conf_request_log {
    char    *path;              /* NULL: no request log */
    double   sample;            /* fraction of requests logged: 0.01 */
    int      errors;            /* 1: every error reply is logged (errors: all), 0: sampled */
    int      key_hash;          /* 1: the key's hash instead of its bytes (key: hash) */
};

struct conf_global {
    uint32_t workers;             /* 0: one per CPU */
    struct conf_addr stats_listen;  /* default 127.0.0.1:22222 (overridden by -s/-a) */
    int      stats_interval_ms;   /* 30000 (-i) */
    struct conf_addr admin_listen;  /* default none (text NULL) */
    char    *admin_token;         /* NULL: POSTs allowed without a token */
    char    *admin_hosts;         /* names the admin endpoint answers to besides addresses
                                     and localhost, separated by spaces; NULL: none */
    char    *log_file;            /* NULL: stderr */
    int      log_level;           /* 5 (LOG_NOTICE) like nutcracker's default */
    int      watch;               /* reload when the file changes */
    char    *zone;                /* this proxy's zone for read_from: local-zone */
    int      drain_timeout_ms;    /* graceful shutdown/reload drain: 5000 */
    uint32_t client_output_limit; /* pause a client beyond this many queued reply bytes: 8 MiB */
    uint64_t memory_limit;        /* client input and output held by the proxy, all clients: 1 GiB */
    int      client_timeout_s;    /* close a client idle this long: 0 (never, as memcached) */
    int      client_header_timeout_s; /* a request's header must be whole this long after its
                                         first byte: 60 (0: no deadline) */
    uint32_t stream_threshold;    /* request bodies above this stream to a pinned connection: 256 KiB */
    int      latency_histograms;  /* per-server latency histograms on the request path: 1 */
    int      hot_keys;            /* the hot-key sketch on the request path: 1 */
    char    *rejoin_log;          /* journal of the rejoin logs (a restart keeps them); NULL */
    int      tls_handshake_timeout_s; /* a TLS handshake not done this long closes: 5 */
    uint64_t pubsub_output_limit;      /* a subscriber with more reply bytes unread is
                                          closed: 32 MiB (0: no limit), as Redis's
                                          client-output-buffer-limit pubsub 32mb 8mb 60 */
    uint64_t pubsub_output_soft_limit; /* ... or with more than this: 8 MiB (0: none) */
    int      pubsub_output_soft_s;     /* ... for this long: 60 */
    char    *dns_servers;         /* resolvers "ip:port ip:port" (c-ares); NULL: resolv.conf */
    char    *config_source;       /* "etcd://host:port/key": the pools come from there; NULL */
    struct conf_user *users;      /* users: (docs/security.md), file order */
    uint32_t nusers;
    /* introspection (src/proxy/introspect.c, docs/introspection.md) */
    int      slowlog_threshold_us;  /* SLOWLOG: requests at least this slow: 10000 (0: every
                                       request; -1: none), Redis's slowlog-log-slower-than */
    uint32_t slowlog_max_len;       /* entries kept per pool and worker: 128 */
    struct conf_request_log request_log;
    char    *migrate_state;       /* migrations in progress (docs/reload.md); NULL: the
                                     configuration file's path + ".migrate" */
};

struct conf {
    char    *path;
    struct conf_global global;
    struct conf_pool *pools;      /* file order */
    uint32_t npools;
    atomic_uint refs;             /* conf_ref / conf_free */
    struct conf *base;            /* a derived configuration (conf_derive): the one whose
                                     strings it shares (held by a reference); NULL: none */
    char    *source;              /* where the pools came from when not the file
                                     (config_source), NULL: the file */
    uint64_t source_rev;          /* ... and that document's revision there */
};

/*
 * Load and validate a YAML file. Pure: reads the file, opens no socket and
 * resolves no name. Returns 0 and a conf owned by the caller, or -1 with
 * every error of the file in err, one "FILE:LINE:COL: key 'K': reason" per
 * line ('\n' between them, none after the last), sorted by position; when
 * they do not all fit in errlen the last line says how many are left out
 * (64 at most are kept). A YAML syntax error ends the reading: it comes alone.
 */
int conf_load(const char *path, struct conf **out, char *err, size_t errlen);

/* The same from memory; `name` stands for the file name in messages. */
int conf_load_buffer(const char *name, const char *text, size_t len, struct conf **out,
                     char *err, size_t errlen);

/*
 * The file at path (a `ringleader:` section with config_source, no pools) with the pools
 * document doc[0..len) read from `name` at revision rev (etcd: docs/operations.md): one
 * configuration, checked as one file; messages about the document name it. 0, or -1 with
 * err as conf_load.
 */
int conf_load_source(const char *path, const char *name, uint64_t rev, const char *doc,
                     size_t len, struct conf **out, char *err, size_t errlen);

/* Drop a reference (conf_load gives one; conf_ref adds one); the last frees it. Safe on
 * any thread. */
void conf_free(struct conf *conf);
void conf_ref(struct conf *conf);

/*
 * A configuration equal to base (sharing its strings, holding a reference to it) whose
 * pools' server lists conf_derive_servers may replace: a Redis Cluster pool's nodes
 * instead of its seeds. NULL without memory. base may itself be derived (its base is
 * used). conf_derive_servers takes ownership of servers[0..n) (conf_server_init'ed) and
 * of slot_map (16384 server indices for the slots distribution, or NULL).
 */
struct conf *conf_derive(struct conf *base);
void conf_derive_servers(struct conf *derived, uint32_t pool, struct conf_server *servers,
                         uint32_t n, uint32_t *slot_map);
/* The configuration a derived one was derived from, or conf itself. */
struct conf *conf_base(struct conf *conf);

/* A server "host:port" (weight 1, identity and label the address, zone or NULL), for
 * the nodes of a cluster; 0, or -1 with err. Free with conf_server_free. */
int  conf_server_init(struct conf_server *s, const char *addr, const char *zone, char *err,
                      size_t errlen);
void conf_server_free(struct conf_server *s);

/* The zone cluster_zones gives a node at host:port (NULL: none matches). */
const char *conf_zone_match(const struct conf_pool *p, const char *host, uint16_t port);

/* User `name` of a configuration, or NULL. Whether user u may use pool `pool`. */
const struct conf_user *conf_user_find(const struct conf *conf, const char *name, size_t len);
int conf_user_has_pool(const struct conf_user *u, const char *pool);
/* Whether a pool has users (some user names it): its clients must authenticate. */
int conf_pool_has_users(const struct conf *conf, const char *pool);

const struct conf_pool *conf_pool_find(const struct conf *conf, const char *name);

/* Whether pool p has server s: same identity and same address. This is how
 * a reload (and ringleader-ring --diff) decides that a server stayed. `hint`
 * is where s probably is (its own index: reloads usually keep the order). */
int conf_pool_has_server(const struct conf_pool *p, const struct conf_server *s, uint32_t hint);

/* Parse an address: "host:port", "[v6]:port", "/path" or "/path PERM" (octal
 * unix-listener permissions, nutcracker's `listen: /tmp/s 0666`) into addr,
 * allocating its strings (free with conf_addr_free); 0, or -1 with a reason in
 * err and addr zeroed. Server weights and names ("host:port:weight [name]")
 * are split off by the server parser before it calls this. Shared with the CLI. */
int conf_parse_addr(const char *text, struct conf_addr *addr, char *err, size_t errlen);
void conf_addr_free(struct conf_addr *addr);
/* A deep copy of src into dst; 0, or -ENOMEM with dst zeroed. */
int conf_addr_copy(struct conf_addr *dst, const struct conf_addr *src);

#endif
