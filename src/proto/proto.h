/* Protocol ops: the contract between the forwarding core and a wire protocol (memcached, Redis). */
#ifndef RL_PROTO_H
#define RL_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"

/*
 *  client bytes --parse_req--> struct proto_req --(core routes by keys)-->
 *     SINGLE/SAME : forward() writes the header to the server's output,
 *                   then the core copies body_len more bytes verbatim
 *     FANOUT      : frag_write() once per server with that server's keys
 *     BROADCAST   : forward() to every server of the pool
 *     LOCAL       : local() writes the reply itself
 *     ERROR       : err is the reply; body_len more bytes are swallowed
 *     SESSION     : forward() to the server of the client's session (a keyless
 *                   request inside a transaction)
 *     INDEXED     : frag_write() to the pool's server number req->server (a SCAN
 *                   cursor names it); merge_env() rewrites its reply
 *  server bytes --parse_rsp--> struct proto_rsp units (a VALUE item, an END,
 *     a status line, a whole RESP reply) until one carries PROTO_SF_FINAL;
 *     fragments are joined by merge() in the client's key order.
 *
 * Parsers are pure: no sockets, no allocation on the common path (the key
 * array grows once per connection, then is reused), resumable (0 = need
 * more and nothing consumed; a parser may remember how far it scanned in
 * its struct proto_parser), offsets rather than pointers.
 */

enum proto_kind {
    PROTO_REQ_SINGLE,     /* one key: routed by keys[0] */
    PROTO_REQ_SAME,       /* several keys that must share one server, else CROSSSLOT */
    PROTO_REQ_FANOUT,     /* several keys split per server, replies merged */
    PROTO_REQ_BROADCAST,  /* sent to every server, replies merged (flush_all ...) */
    PROTO_REQ_LOCAL,      /* answered by the proxy */
    PROTO_REQ_ERROR,      /* answered with err; body_len bytes swallowed */
    PROTO_REQ_SESSION,    /* no key: sent to the server of the client's session (below) */
    PROTO_REQ_INDEXED,    /* sent to the pool's server req->server, reply through merge_env */
    PROTO_REQ_SUBSCRIBE   /* (un)subscribes the client: req->sub says what, keys[] are the
                           * names (none: every name of that class); see pubsub.c */
};

/* PROTO_REQ_SUBSCRIBE: the class of names (channels are placed like keys, on their owner;
 * patterns on every server; shard channels like channels, counted apart) and the way. */
#define PROTO_SUB_CHANNEL   1
#define PROTO_SUB_PATTERN   2
#define PROTO_SUB_SHARD     3
#define PROTO_SUB_CLASS     0x03
#define PROTO_SUB_UNSUB     0x04  /* unsubscribe (else subscribe) */

/* Request flags. */
#define PROTO_RF_NOREPLY    0x0001  /* client wants no reply: the core discards the server's */
#define PROTO_RF_QUIET      0x0002  /* meta q flag: parse_rsp marks suppressed units */
#define PROTO_RF_RETRIEVAL  0x0004  /* get/gets/gat/gats/mg: count hits and misses */
#define PROTO_RF_WRITE      0x0008  /* modifies data (replicas, on_down: miss) */
#define PROTO_RF_CLOSE      0x0010  /* close the connection after this reply (quit, fatal) */
#define PROTO_RF_KEYB64     0x0020  /* meta b flag: keys are base64; hash the decoded bytes */
#define PROTO_RF_NOKEY      0x0040  /* SINGLE request routed by a non-key argument (EVAL 0) */
#define PROTO_RF_KEYBYTES   0x0080  /* keys[] are not the key bytes in buf: read them
                                     * through proto_ops.key_bytes (meta b, Redis inline) */
#define PROTO_RF_CHANNEL    0x0100  /* keys[0] is a pub/sub channel: placed on its owner only
                                     * (never copied, spread or failed over), so that
                                     * publishers and subscribers meet on one server */
#define PROTO_RF_VARIANT    0x0200  /* the client speaks the protocol's second variant
                                     * (Redis RESP3): server connections of that variant
                                     * carry it and the replies the proxy writes are in it */
#define PROTO_RF_NOAUTH     0x0400  /* an ERROR request refused because the client has not
                                     * authenticated (counted apart: refused_auth) */
#define PROTO_RF_READ       0x0800  /* only reads (Redis: the command table's read flag, no
                                     * script): a sentinel pool's replica may serve it */
#define PROTO_RF_SCRIPT     0x1000  /* a script (Redis EVAL, FCALL, their _RO forms): it may
                                     * read its declared keys, as CLIENT TRACKING remembers */

/*
 * Sessions: a run of one client's requests on a server connection of its own
 * (pinned), for what a shared connection cannot carry: a transaction, the keys
 * it watches, a command that blocks there. parse_req says what each request does
 * to the client's session in req->sess, reading the state the core keeps in the
 * parser's flags (PROTO_PF_SESSION, PROTO_PF_ATOMIC); the core (proxy/session.c)
 * pins, places, holds and ends. "The server of its keys" is the one routing
 * gives them; every later key of the session must have the same owner.
 */
#define PROTO_SS_OPEN    0x01  /* opens a session on the server of its keys (WATCH), or
                                * continues the open one, whose server its keys must be on */
#define PROTO_SS_BEGIN   0x02  /* begins the session's atomic part (MULTI): from here every
                                * request belongs to the session, and one the proxy refuses
                                * spoils it. With no server yet, it is answered at once with
                                * proto_ops.sess_begun and sent, with the keyless requests
                                * after it (answered sess_queued), once a keyed one places it */
#define PROTO_SS_END     0x04  /* the session ends once this is answered (EXEC, DISCARD,
                                * UNWATCH); nothing more is read from the client until then */
#define PROTO_SS_COMMIT  0x08  /* commits the atomic part (EXEC): in a spoiled session the
                                * server gets sess_abort instead and the client
                                * PROTO_ERR_ABORTED */
#define PROTO_SS_BLOCK   0x10  /* may block on the server (BLPOP ...): it runs on a pinned
                                * connection (the session's, or one of its own for this
                                * request), nothing more is read from the client until it is
                                * answered, and its timeout is block_ms instead of the pool's */
#define PROTO_SS_SPOIL   0x20  /* an ERROR that spoils the atomic part (Redis flags the
                                * transaction: EXEC then answers EXECABORT) */
#define PROTO_SS_RESET   0x40  /* ends every session of the client at once (RESET, LOCAL) */

struct proto_key {
    uint32_t off;   /* from the start of the request's buffer */
    uint32_t len;
};

/* Bytes by address (a pub/sub name the core holds). */
struct proto_name {
    const char *bytes;
    uint32_t    len;
};

/* Protocol-private annotations of one request, read only by the same
 * protocol's forward(), frag_write(), join(), local() and key_bytes(). */
struct proto_mc_req {
    uint32_t cut_off;      /* forward() leaves out [cut_off, cut_off + cut_len): */
    uint32_t cut_len;      /*   " noreply" or a meta q flag; cut_len 0: nothing */
    uint32_t line_end;     /* nul_cut: where memcached's line ends (the first NUL) */
    uint32_t exp_off;      /* gat/gats: the exptime token, for frag_write() */
    uint32_t exp_len;
    uint8_t  nul_cut;      /* the line held a NUL: forward() ends it at line_end + "\r\n" */
};

struct proto_redis_req {
    uint32_t    start;     /* where the request starts in buf (skipped empty requests before) */
    uint32_t    argc;      /* arguments; keys[0..argc) holds them all for LOCAL requests */
    const char *inl;       /* an inline line's RESP re-encoding (parser memory), which
                            * forward() sends and keys[] are offsets into; NULL: RESP
                            * as sent, keys[] are offsets into buf */
    uint32_t    inl_len;
    uint64_t    cursor;    /* INDEXED (SCAN): the cursor to send that server */
};

struct proto_req {
    enum proto_kind kind;
    uint16_t cmd;          /* the protocol's own command id */
    uint16_t flags;        /* PROTO_RF_* */
    uint8_t  sess;         /* PROTO_SS_*: what it does to the client's session */
    uint32_t server;       /* INDEXED: the pool's server it goes to (the core checks it) */
    int64_t  block_ms;     /* PROTO_SS_BLOCK: how long the server may hold it: ms, 0 for
                            * ever, -1 unknown (a bad timeout: the server refuses it at
                            * once, the pool's timeout applies) */
    uint32_t hdr_len;      /* bytes of buf this request consumed (memcached: the line) */
    uint64_t body_len;     /* bytes following the header: forwarded (or swallowed for ERROR) */
    uint32_t nkeys;
    struct proto_key *keys;        /* owned by the parser; valid until its next call;
                                    * with PROTO_RF_KEYBYTES read the bytes through
                                    * proto_ops.key_bytes, else they are in buf */
    const char *err;       /* ERROR: the complete reply, e.g. "CLIENT_ERROR bad format\r\n";
                            * a fatal return may have none (err_len 0): close silently */
    uint32_t err_len;
    const char *why;       /* fatal return: a static reason for the log line, or NULL */
    uint8_t     sub;       /* SUBSCRIBE: PROTO_SUB_* class | PROTO_SUB_UNSUB */
    union {
        struct proto_mc_req    mc;
        struct proto_redis_req redis;
    } u;                   /* protocol-private */
};

/* Reply unit flags. */
#define PROTO_SF_FINAL     0x0001  /* last unit of the reply to the request */
#define PROTO_SF_ITEM      0x0002  /* one value of a retrieval (a hit) */
#define PROTO_SF_ERROR     0x0008  /* an error reply (SERVER_ERROR, -ERR ...) */
#define PROTO_SF_SUPPRESS  0x0010  /* not for the client (quiet mode) */
#define PROTO_SF_PUSH      0x0020  /* out of band: a pub/sub message (Redis RESP2 message
                                    * array on a subscribed connection, a RESP3 push), the
                                    * reply of no request; always one whole unit */
#define PROTO_SF_CLUSTER   0x0040  /* a cluster's redirect or retry error (PROTO_PF_CLUSTER
                                    * parsers only): proto_ops.cluster->redirect says which */

struct proto_rsp {
    uint32_t hdr_len;      /* bytes of this unit in buf */
    uint64_t body_len;     /* bytes following it, passed verbatim */
    uint16_t flags;        /* PROTO_SF_* */
    struct proto_key key;  /* ITEM: the key, relative to buf */
};

/* Per-connection parser state of each protocol (client or server side). */
struct proto_mc_parser {
    uint32_t scan;         /* resume offset of an incomplete line's '\n' search */
};

#define PROTO_REDIS_ERR_MAX 512   /* bytes of a formatted Redis error reply */

struct proto_redis_parser {
    uint32_t state;        /* idle, or inside a multibulk request / an array reply */
    uint32_t scan;         /* multibulk: offset of the next argument; array: bytes walked */
    uint32_t start;        /* multibulk: where the request starts */
    uint32_t argc;         /* multibulk: arguments announced */
    uint32_t done;         /* multibulk: arguments recorded in keys[] */
    uint64_t pending;      /* array reply: elements still to come */
    char     err[PROTO_REDIS_ERR_MAX];  /* a formatted error reply; req->err points here */
};

struct proto_parser {
    union {
        struct proto_mc_parser    mc;
        struct proto_redis_parser redis;
    } u;                    /* protocol-private */
    struct proto_key *keys; /* grows to the largest request seen on this connection */
    uint32_t keycap;
    uint32_t deccap;
    char    *dec;           /* decoded request bytes (Redis quoted inline arguments);
                             * grows like keys */
    uint32_t item_size_max; /* memcached: values above this are refused */
    uint64_t epoch;         /* the client's pool's ring epoch (Redis SCAN cursors carry it) */
    uint32_t body_min;      /* Redis: a request whose last argument is at least this long
                             * and not all here yet is returned at that argument's data,
                             * the argument as body_len, when it is not a key and the
                             * request goes to one server (0: never) */
    uint32_t flags;         /* PROTO_PF_* */
};

#define PROTO_PF_ALLOW_FLUSH  0x0001  /* broadcast flush_all / FLUSHALL / FLUSHDB */
#define PROTO_PF_AUTHED       0x0002  /* Redis: client passed AUTH (or none needed) */
#define PROTO_PF_DENY_SCRIPTS 0x0004  /* Redis: refuse EVAL*, FCALL*, SCRIPT, FUNCTION
                                       * (pool scripts: false) */
#define PROTO_PF_SESSION      0x0008  /* the client holds a session (set by the core) */
#define PROTO_PF_ATOMIC       0x0010  /* ... inside its atomic part (set by the core) */
#define PROTO_PF_VARIANT      0x0020  /* the connection speaks the second variant (Redis
                                       * RESP3): a client's requests carry PROTO_RF_VARIANT;
                                       * set and cleared by local() (HELLO 3, HELLO 2, RESET) */
#define PROTO_PF_SUBSCRIBED   0x0040  /* the connection is in subscribed mode: a client's
                                       * (set and cleared by the core's pubsub.c), or a server
                                       * connection carrying subscriptions, whose parse_rsp
                                       * then tells messages (PROTO_SF_PUSH) from replies */
#define PROTO_PF_CLUSTER      0x0080  /* the pool is a cluster (redis_cluster): a server
                                       * side parser flags PROTO_SF_CLUSTER replies; a client
                                       * side one answers the cluster's own commands */

/* Connection variants a protocol may have (Redis: RESP2 and RESP3). */
#define PROTO_VARIANTS 2

/* Room a caller of key_bytes() gives for a decoded key: memcached's
 * KEY_MAX_LENGTH, the most a meta command's base64 key may decode to. */
#define PROTO_KEY_DECODED_MAX 250

/* What a server connection says first (proto_ops.server_hello). */
struct proto_hello {
    const char *username;  /* Redis ACL user (redis_username), NULL: the default user */
    const char *password;  /* redis_auth, NULL: none */
    int         db;        /* redis_db */
    int         variant;   /* the connection's variant (Redis: 1 asks for RESP3) */
    int         replica_reads; /* the connection may serve reads from a replica (Redis
                                * Cluster READONLY) */
};

/* Databases a client may SELECT (0..PROTO_DBS-1: Redis's default `databases 16`); each
 * one other than the pool's has its own shared server connections, opened on demand. */
#define PROTO_DBS 16

/* Per-client state the proxy keeps for local commands. */
struct proto_client {
    uint64_t    id;
    char        name[64];         /* CLIENT SETNAME */
    char        lib_name[64];     /* CLIENT SETINFO LIB-NAME (Redis 7.2 clients send it) */
    char        lib_ver[32];      /* CLIENT SETINFO LIB-VER */
    char        user[64];         /* the user it authenticated as ("default": the pool's
                                     password, or none); changes under guard */
    const char *auth;             /* pool password, NULL if none */
    int         db;               /* its database: the pool's redis_db, or SELECT's */
    int         pool_db;          /* the pool's redis_db */
    int         authed;
    char        peer[64];         /* "ip:port" */
    uint64_t    created_ms;
    int         selected;         /* SELECT chose db: a reload keeps it (else the pool's) */
    /* users (docs/security.md): check user[0..ulen) with password pass[0..plen) and, when
     * they match, make the client that user (its name in `user`, under guard): 1 accepted,
     * 0 refused. "default" with pass NULL: the pool's password was checked, the client is
     * the default user; user NULL: the client is nobody until it authenticates again.
     * NULL: the pool has no users (only "default" exists). */
    int       (*login)(struct proto_client *c, const char *user, size_t ulen, const char *pass,
                       size_t plen);
    /* Called with 1 before and 0 after this client's name, lib-name, lib-ver or db change,
     * which other threads read (CLIENT LIST over every worker); NULL: nobody reads them. */
    void      (*guard)(struct proto_client *c, int locked);
};

/* ---- CLIENT LIST / INFO / KILL over the proxy's clients (proto_env.clients) */

#define PROTO_CL_SUBSCRIBED 0x01    /* in subscribed mode (RESP2) or holding subscriptions */
#define PROTO_CL_MULTI      0x02    /* inside MULTI */
#define PROTO_CL_BLOCKED    0x04    /* waiting for a blocking command's reply */
#define PROTO_CL_VARIANT    0x08    /* speaks the protocol's second variant (RESP3) */
#define PROTO_CL_PAUSED     0x10    /* not read now (backpressure): no read event */
#define PROTO_CL_CLOSING    0x20    /* closes once its replies are written */
#define PROTO_CL_SELF       0x40    /* the client asking */
#define PROTO_CL_TRACKING   0x80    /* CLIENT TRACKING on (flag t) */
#define PROTO_CL_TRK_BROKEN 0x100   /* ... its REDIRECT target is gone (flag R) */
#define PROTO_CL_TRK_BCAST  0x200   /* ... in BCAST mode (flag B) */

/* One of the proxy's clients as CLIENT LIST shows it (strings valid during the visit). */
struct proto_client_row {
    uint64_t    id;
    const char *addr, *laddr, *name, *lib_name, *lib_ver, *user;
    int         fd, db, multi;
    uint32_t    flags;              /* PROTO_CL_* */
    uint32_t    sub, psub, ssub;
    uint32_t    cmd;                /* the protocol's id of its last command (UINT32_MAX: none) */
    uint64_t    age_s, idle_s;
    uint64_t    qbuf, qbuf_free, rbs, rbp, obl, oll, omem, tot_mem;
    int64_t     redir;              /* CLIENT TRACKING's REDIRECT id: 0 none, -1 not tracking */
    const char *pool;               /* the proxy's pool (a trailing pool= field), or NULL */
};

/* ---- CLIENT TRACKING, CACHING, GETREDIR, TRACKINGINFO (Redis): local() reads the
 * syntax (Redis 7.0's order of errors up to the REDIRECT check) and the core, which
 * keeps every client's tracking state, answers (proto_env.tracking). */
enum proto_trk_what { PROTO_TRK_ON, PROTO_TRK_OFF, PROTO_TRK_CACHING, PROTO_TRK_GETREDIR,
                      PROTO_TRK_INFO };

#define PROTO_TRK_BCAST   0x01
#define PROTO_TRK_OPTIN   0x02
#define PROTO_TRK_OPTOUT  0x04
#define PROTO_TRK_NOLOOP  0x08

struct proto_tracking {
    enum proto_trk_what      what;
    uint32_t                 opts;      /* ON: PROTO_TRK_* */
    int                      yes;       /* CACHING: 1 yes, 0 no, -1 neither (syntax error) */
    int64_t                  redirect;  /* ON: a client id that exists now, 0: none */
    uint32_t                 nprefix;   /* ON: PREFIX arguments, in order */
    const struct proto_name *prefix;
};

/* Look at one client: 1 when it matches what the caller asks for (a kill then ends it),
 * 0 when not, -ENOMEM to stop the walk. */
typedef int (*proto_client_fn)(void *arg, const struct proto_client_row *row);

/* One of the proxy's own numbers, by its name (stats.h's, or the few proto_env documents);
 * the protocol formats it: memcached "STAT name value", Redis "name:value". */
typedef void (*proto_stat_fn)(void *arg, const char *name, int64_t value);

/* One SLOWLOG entry's fields besides the arguments (proto_ops.slow_entry). */
struct proto_slow {
    uint64_t    id;
    int64_t     time_s;         /* when it was parsed, unix seconds */
    uint64_t    usec;           /* parse to reply complete */
    const char *addr;           /* the client's "ip:port" */
    const char *name;           /* the client-name field's text */
};

/* One command's numbers (INFO commandstats: Redis 7.0's names). */
struct proto_cmdstat {
    int64_t calls, usec, rejected_calls, failed_calls;
};
typedef void (*proto_cmdstat_fn)(void *arg, uint16_t cmd, const struct proto_cmdstat *st);
/* One error prefix's count (INFO errorstats: "ERR", "WRONGTYPE", "CLIENT_ERROR"). */
typedef void (*proto_errstat_fn)(void *arg, const char *prefix, int64_t count);

/* What the proxy offers local commands (version, stats, INFO, TIME ...) and merge_env. */
struct proto_env {
    const char *version;              /* PACKAGE_VERSION */
    uint64_t    uptime_s;
    uint64_t    now_us;               /* wall clock */
    const char *pool_name;
    uint32_t    nservers;
    /* The proxy's numbers for this pool (summed over every worker) and the process: calls
     * emit(arg, name, value) once per number, in a fixed order; may be NULL. Names: every
     * field of STATS_POOL_CODEC, the server counters summed over the pool's servers as
     * "server_<field>" (server_requests, server_request_bytes, ...), and pid, threads,
     * worker (the one serving this client), uptime, time, rusage_user_us,
     * rusage_system_us, curr_connections, total_connections (the process's),
     * servers_up, ops_per_sec (requests of the pool in the last full second). */
    void      (*render_stats)(void *ctx, proto_stat_fn emit, void *arg);
    int         variant;              /* the client's (PROTO_PF_VARIANT): merge_env writes
                                       * its reply in it */
    /* The label of server i of the pool (i < nservers): BROADCAST fragment i went to it. */
    const char *(*server_name)(void *ctx, uint32_t i);
    /* The address this client connected to, "ip:port" into out (a cluster pool answers
     * CLUSTER SLOTS with it); may be NULL. 0, or -1 when it is not an IP address. */
    int       (*local_addr)(void *ctx, char *out, size_t outlen);
    uint64_t    epoch;                /* the pool's ring epoch (SCAN cursors carry it) */
    uint32_t    target;               /* INDEXED merge_env: the server it went to */
    uint32_t    next_target;          /* ... and the one a walk over the pool visits next
                                       * (nservers: none; a cluster pool's walk skips
                                       * replicas) */
    int         cluster;              /* the pool is a cluster pool (redis_cluster) */
    /* Every client of this pool over every worker, the asking one included: visit(arg,
     * row) for each; with `kill`, the ones it matched are closed (the asking one after its
     * reply). Returns how many matched, or -ENOMEM. NULL: only the asking client is known. */
    int       (*clients)(void *ctx, int kill, proto_client_fn visit, void *arg);
    /* CLIENT TRACKING and its family for this client: appends the reply (in `v3`'s
     * protocol) to out; 0 or -ENOMEM. NULL: tracking is never on (CLIENT TRACKING on is
     * refused). */
    int       (*tracking)(void *ctx, const struct proto_tracking *t, int v3, struct buf *out);
    void       *ctx;
    /* INFO commandstats / errorstats, memcached `stats` (NULL: none): the pool's numbers
     * over every worker; cmdstats calls visit once per command id that was called (or
     * refused), errorstats once per error prefix. */
    void      (*cmdstats)(void *ctx, proto_cmdstat_fn visit, void *arg);
    void      (*errorstats)(void *ctx, proto_errstat_fn visit, void *arg);
    /* SLOWLOG (NULL: none): the pool's entries over every worker, newest first, at most n
     * (n < 0: the default of 10 as Redis), each already a RESP array; 0, or -ENOMEM. */
    int       (*slowlog_get)(void *ctx, long n, struct buf *out, uint64_t *count);
    uint64_t  (*slowlog_len)(void *ctx);
    void      (*slowlog_reset)(void *ctx);
};
/* Errors the core asks the protocol to phrase. */
enum proto_err {
    PROTO_ERR_SERVER,      /* backend failed: reason given */
    PROTO_ERR_TIMEOUT,     /* backend timed out */
    PROTO_ERR_CROSSSLOT,   /* keys on different servers */
    PROTO_ERR_CROSSSLOT_SLOT, /* keys in different slots of a cluster pool */
    PROTO_ERR_NOMEM,       /* proxy out of memory */
    PROTO_ERR_DOWN,        /* no live server (on_down: error) */
    PROTO_ERR_ABORTED,     /* a spoiled session's commit (EXECABORT) */
    PROTO_ERR_LIMIT,       /* a bound of the proxy refused it (max_pinned): reason given */
    PROTO_ERR_TARGET       /* INDEXED: no such server (the pool changed): reason given */
};

#define PROTO_LOCAL_CLOSE 1
#define PROTO_LOCAL_RESET 2   /* the client's connection state is reset (Redis RESET): its
                               * subscriptions and pins end */

/* ---- clusters (proto_ops.cluster) */

struct cluster_map;

#define PROTO_HOST_MAX 256

/* What a PROTO_SF_CLUSTER error reply says. */
enum proto_redirect_kind {
    PROTO_REDIR_MOVED,      /* the slot is served elsewhere for good: re-send there */
    PROTO_REDIR_ASK,        /* this one request: ask the named node (after the asking prefix) */
    PROTO_REDIR_TRYAGAIN,   /* the slot is moving: the same request again a little later */
    PROTO_REDIR_DOWN        /* the cluster cannot serve the slot now */
};

struct proto_redirect {
    enum proto_redirect_kind kind;
    uint32_t slot;                  /* MOVED/ASK */
    char     host[PROTO_HOST_MAX];  /* MOVED/ASK: "" means the host of the node that answered */
    uint16_t port;
};

struct proto_cluster_ops {
    /* The requests that fetch a node's slot map (`fallback`: the older form, for a node
     * that does not know the first), written to out; returns how many replies follow,
     * or -ENOMEM. */
    int (*map_query)(int fallback, struct buf *out);
    /* Read those replies (rsp[i], len[i], each one whole reply) into m, an empty map;
     * host is the node's that answered (for entries naming no host). 1: the map is in m
     * (cluster_map_finish not run yet); 0: the node does not know this form (ask again
     * with the fallback); -1: refused or malformed, err says why. `tls`: the map was
     * asked over TLS, whose nodes are reached at their TLS port (Redis CLUSTER SHARDS
     * "tls-port") where they name one, else at "port"; without, "port" first. */
    int (*map_parse)(int fallback, int tls, const char *const *rsp, const size_t *len, uint32_t n,
                     const char *host, struct cluster_map *m, char *err, size_t errlen);
    /* A reply flagged PROTO_SF_CLUSTER (rsp[0..len), the whole unit): what it says.
     * 0, or -1 when it cannot be read (then it is passed on as any error). */
    int (*redirect)(const char *rsp, size_t len, struct proto_redirect *rd);
    /* What precedes a request sent after ASK (Redis ASKING); its reply is discarded. */
    const char *asking;
};

/* A user's namespace and key patterns, as ns_request and ns_reply read them (users.c). */
struct proto_ns {
    const char *prefix;     /* added to names on the way in, taken off on the way out */
    size_t      len;        /* 0: none */
    /* Whether the server's name[0..n) (prefix included) may be shown; NULL: every name. */
    int       (*visible)(void *arg, const char *name, size_t n);
    void       *arg;
};

struct proto_ops {
    const char *name;     /* "memcache", "redis" */

    /* Parse the next request in buf[0..len).
     * >0: bytes consumed (== req->hdr_len); req filled in.
     *  0: incomplete, nothing consumed.
     * <0: fatal (line too long, garbage that cannot be resynchronised, a
     *     protocol the proxy does not speak): req->err[0..err_len) is the
     *     reply to send before the connection is closed (err_len 0: none),
     *     req->why, when set, a reason for the log line. */
    int (*parse_req)(struct proto_parser *p, const char *buf, size_t len, struct proto_req *req);

    /* Parse the next reply unit for a request with command `cmd` and flags
     * `rflags`. >0 consumed (== rsp->hdr_len), 0 incomplete, <0 garbage from
     * the server (the core closes that server connection). */
    int (*parse_rsp)(struct proto_parser *p, const char *buf, size_t len, uint16_t cmd,
                     uint16_t rflags, struct proto_rsp *rsp);

    /* Write the request header (buf[0..hdr_len)) to a server's output,
     * rewritten as the protocol needs (noreply and q stripped so that
     * every request gets a reply the core can match). 0 or -ENOMEM. */
    int (*forward)(const struct proto_req *req, const char *buf, struct buf *out);

    /* FANOUT: write one server's fragment carrying keys idx[0..n) of req.
     * For Redis MSET the values travel with their keys. 0 or -ENOMEM. */
    int (*frag_write)(const struct proto_req *req, const char *buf, const uint32_t *idx,
                      uint32_t n, struct buf *out);

    /* FANOUT/BROADCAST: join the fragments' complete replies frag[0..nfrag)
     * into the client's reply. key_frag[i] is the fragment that carried key
     * i (NULL for BROADCAST); keys/reqbuf are the request's keys and a copy
     * of its header. 0, or -1 if a fragment reply is malformed. */
    int (*merge)(uint16_t cmd, const char *reqbuf, const struct proto_key *keys, uint32_t nkeys,
                 const uint32_t *key_frag, struct buf *const *frag, uint32_t nfrag,
                 struct buf *out);

    /* BROADCAST whose reply the protocol builds with the proxy's own numbers or the
     * servers' names (memcached `stats items` naming the server on each line, Redis INFO
     * completing the backends' sections): called instead of merge for every BROADCAST
     * when set. frag[i] is server i's complete reply (an error reply when it failed or is
     * down); env as for local(). 0, -1 if a fragment is malformed, -ENOMEM. */
    int (*merge_env)(uint16_t cmd, const char *reqbuf, struct buf *const *frag, uint32_t nfrag,
                     const struct proto_env *env, struct buf *out);

    /* FANOUT/BROADCAST: the copy of the request that merge and merge_env get as reqbuf,
     * appended to out. Optional (NULL: its header as it came, from buf[0], which the
     * keys' offsets point into). 0 or -ENOMEM. */
    int (*merge_copy)(const struct proto_req *req, const char *buf, struct buf *out);

    /* LOCAL: write the reply. Returns 0, PROTO_LOCAL_CLOSE, PROTO_LOCAL_RESET or -ENOMEM. */
    int (*local)(struct proto_client *c, struct proto_parser *p, const struct proto_req *req,
                 const char *buf, const struct proto_env *env, struct buf *out);

    /* Phrase an error for the client. 0 or -ENOMEM. */
    int (*error_reply)(enum proto_err code, const char *reason, struct buf *out);

    /* Requests a server connection sends when it opens (Redis AUTH/SELECT),
     * written to out; returns how many replies to swallow, or -ENOMEM.
     * Optional (NULL: the protocol says nothing first). */
    int (*server_hello)(const struct proto_hello *h, struct buf *out);

    /* The bytes request key k is placed by: the key as sent, or its
     * decoding (a meta command's base64 key, written to dec, which holds
     * PROTO_KEY_DECODED_MAX bytes; a quoted Redis inline argument, in the
     * parser's memory). *len gets their length. Valid while req and buf are.
     * A key that does not decode is placed by its bytes as sent. Only a
     * request with PROTO_RF_KEYBYTES needs it: the keys of any other are
     * buf + keys[k].off, keys[k].len. */
    const char *(*key_bytes)(const struct proto_req *req, const char *buf, uint32_t k,
                             char *dec, size_t *len);

    /* Health probe request (memcached "version", Redis PING) and the
     * command id its reply is parsed as. */
    const char *probe;
    uint16_t    probe_cmd;

    /* on_down: miss — the reply a request gets while its server is down:
     * a miss for a read, a refusal for a write. 0 or -ENOMEM. */
    int (*miss_reply)(uint16_t cmd, uint16_t rflags, struct buf *out);

    /* Optional. on_down: miss for one fragment of a multi-key read whose
     * server is down: a fragment reply in which each of its nkeys keys
     * missed, as merge() reads it. 0, or -1 when the protocol has none (the
     * fragment then fails). */
    int (*frag_miss)(uint16_t cmd, uint16_t rflags, uint32_t nkeys, struct buf *out);

    /* Optional (NULL: a pinned connection is closed after use, never reused).
     * Write what returns a pinned server connection to a fresh state (Redis
     * RESET) before the hello is sent again; returns the replies to swallow
     * (0 for a protocol whose connections keep no state), or -ENOMEM. */
    int (*pin_reset)(struct buf *out);

    /* Sessions (all NULL: the protocol has none; see PROTO_SS_*). sess_begun: the reply
     * to a BEGIN answered before its session has a server; sess_queued: the reply to a
     * request held with it. sess_abort: write what abandons the atomic part on the
     * server (Redis DISCARD); returns the replies to swallow, or -ENOMEM. */
    const char *sess_begun;
    const char *sess_queued;
    int (*sess_abort)(struct buf *out);
    /* Optional: write what switches a connection that holds a session (WATCH) to
     * protocol `variant` without ending it (Redis HELLO 2 / HELLO 3), so that a pinned
     * connection speaks its client's protocol; returns the replies to swallow, or
     * -ENOMEM. */
    int (*sess_variant)(uint8_t variant, struct buf *out);

    /* Warm-up after a reload (all NULL: the protocol has none). warmable:
     * whether a miss of request cmd may be retried on the key's previous
     * owner. warm_fetch: write the request that fetches key from there with
     * what a copy needs; *fetch_cmd is the id its reply parses as; 0 or
     * -ENOMEM. warm_reply: from the fetch's complete reply, write the
     * client's reply to cmd (a hit, or the miss it would have had) and, on
     * a hit, the request that copies the value to the new owner (*copy_cmd
     * its reply's id); 1 hit, 0 miss, -1 malformed, -ENOMEM. */
    int (*warmable)(uint16_t cmd);
    int (*warm_fetch)(uint16_t cmd, const char *key, size_t len, struct buf *out,
                      uint16_t *fetch_cmd);
    int (*warm_reply)(uint16_t cmd, const char *rsp, size_t len, const char *key, size_t klen,
                      struct buf *client, struct buf *copy, uint16_t *copy_cmd);

    /* Coalescing of single-key retrievals (both NULL: the protocol has none).
     * joinable: whether req may share one server command with others of its
     * kind. join: append the key of req, a joinable request, to the command
     * line that ends out (open_len bytes, written by forward() or join());
     * returns the line's new length, 0 when that line cannot take it (left as
     * it was), or -ENOMEM.
     * The server then answers the joined command with one reply whose items
     * come in key order, misses absent; join_miss is the reply a member whose
     * key had no item gets, and the reply to a member with an item is that
     * item followed by join_miss; join_keys_max bounds the keys of a line. */
    int (*joinable)(const struct proto_req *req);
    int (*join)(const struct proto_req *req, const char *buf, struct buf *out, uint32_t open_len);
    const char *join_miss;
    uint32_t    join_keys_max;

    /* Redis Cluster backends (NULL: the protocol has no cluster). */
    const struct proto_cluster_ops *cluster;
    /* Pub/sub (all NULL: the protocol has none; PROTO_REQ_SUBSCRIBE is never parsed).
     * sub_write: the command that makes a server connection do `sub` (PROTO_SUB_*) for
     * names[0..n) (n > 0). sub_reply: one confirmation the client gets, in its variant,
     * for name (NULL: a mass unsubscribe that had nothing to drop) after which it holds
     * `count` subscriptions of the class. push_write: a PROTO_SF_PUSH unit rewritten for a
     * client of `variant`. Each 0 or -ENOMEM. */
    int (*sub_write)(uint8_t sub, const struct proto_name *names, uint32_t n, struct buf *out);
    int (*sub_reply)(uint8_t sub, int variant, const char *name, size_t len, uint64_t count,
                     struct buf *out);
    int (*push_write)(int variant, const char *unit, size_t len, struct buf *out);
    /* sub_dropped (NULL: the protocol has none): whether unit[0..len), one whole reply
     * unit of a subscribed server connection, is the shape of a server ending a shard
     * subscription (Redis's `sunsubscribe` confirmation, which Redis Cluster also sends
     * unasked when the channel's slot leaves the node); 1 with *name set inside unit, 0
     * when it is something else. Pure. */
    int (*sub_dropped)(const char *unit, size_t len, struct proto_name *name);
    /* Rejoin (docs/routing.md; invalidate NULL: a pool of this protocol trusts a
     * returning server). invalidate: write the request that deletes key[0..len),
     * whatever its bytes (memcached `delete`, or `md` with a base64 key for bytes
     * the text protocol cannot carry; Redis DEL), *cmd the id its reply parses as;
     * 0 or -ENOMEM. flush: the request that empties a server (flush_all, FLUSHDB),
     * flush_cmd its reply's id. */
    int (*invalidate)(const char *key, size_t len, struct buf *out, uint16_t *cmd);
    const char *flush;
    uint16_t    flush_cmd;

    /* failover_ttl (optional): the request header forward() just wrote at
     * buf_rptr(out) + start (to the end of out) is going to a failover server:
     * cap the TTL it sets at ttl seconds from now (now_s: the wall clock), as its
     * server reads TTLs. 1 when rewritten, 0 when it sets none to cap (unchanged),
     * -ENOMEM (unchanged). */
    int (*ttl_cap)(uint16_t cmd, struct buf *out, size_t start, uint32_t ttl, int64_t now_s);

    /* collapse_gets (optional): whether req, whose bytes are in buf, is a
     * single-key get that may share one server request with others whose
     * forwarded bytes are identical. */
    int (*collapsible)(const struct proto_req *req, const char *buf);

    /* shadow compare (optional; NULL: byte for byte): whether two complete
     * replies to cmd from different pools say the same (memcached: a cas unique
     * or a meta TTL differs between pools without the data differing). */
    int (*reply_equal)(uint16_t cmd, const char *a, size_t alen, const char *b, size_t blen);

    /* users (docs/security.md; all NULL: the protocol has none). category: the CONF_CAT_*
     * categories of command cmd (a command runs when every one is granted; 0: a connection
     * command every user may run). perm_name: its name as the protocol's permission errors
     * spell it ("config|get"), into out. ns_request: req (a whole request in buf: header
     * and body) with ns->prefix added to every key and channel, and to the pattern of a
     * command that lists names (SCAN MATCH, KEYS), written to out as the client would
     * have sent it; 0, -1 when it cannot be (*why: the error reply), -ENOMEM. ns_reply:
     * the complete reply rsp[0..len) to cmd (cmd PROTO_NS_PUSH: one pub/sub push unit;
     * PROTO_NS_PUSH_ANY: replies that may be pub/sub confirmations) with the prefix taken off
     * the names it carries and the names ns->visible refuses left out, written to out;
     * 1 rewritten, 0 nothing to change (out untouched), -1 malformed, -ENOMEM. ns_reply_cmd:
     * whether cmd's replies carry names (ns_reply is worth calling). */
    uint32_t (*category)(uint16_t cmd);
    void (*perm_name)(uint16_t cmd, char *out, size_t len);
    int  (*ns_request)(const struct proto_req *req, const char *buf,
                       const struct proto_ns *ns, struct buf *out, const char **why);
    int  (*ns_reply)(uint16_t cmd, const char *rsp, size_t len, const struct proto_ns *ns,
                     struct buf *out);
    int  (*ns_reply_cmd)(uint16_t cmd);
    /* perm_error: the refusal, in out (len bytes of room), of command `name` (what
     * PROTO_PERM_CMD), of a key (PROTO_PERM_KEY) or a channel (PROTO_PERM_CHANNEL) the user
     * may not use (Redis 7.0's NOPERM texts; memcached: CLIENT_ERROR); its length. */
    size_t (*perm_error)(int what, const char *name, char *out, size_t len);
    /* Introspection (commandstats, SLOWLOG, the request log: src/proxy/introspect.c).
     * ncmds: command ids are below what it returns. cmd_name: the lower-case name of id cmd as the
     * protocol's own server names it in its statistics (Redis "get", "client|list";
     * memcached "get"), NULL for an id that names no command. */
    uint16_t  (*ncmds)(void);
    const char *(*cmd_name)(uint16_t cmd);
    /* SLOWLOG (NULL: the protocol has none): one entry as the protocol's SLOWLOG GET shows
     * it, from the request's first bytes req[0..n) (a prefix of the request: arguments cut
     * there are shown cut, with what is missing said). 0 or -ENOMEM. */
    int (*slow_entry)(const char *req, size_t n, const struct proto_slow *e, struct buf *out);
    /* The request log's key: the first key of command cmd within req[0..n) (a prefix of
     * the request), *len its bytes there and *full its whole length. 1 found, 0 none. */
    int (*req_key)(uint16_t cmd, const char *req, size_t n, const char **key, size_t *len,
                   uint64_t *full);
};

#define PROTO_PERM_CMD     0
#define PROTO_PERM_KEY     1
#define PROTO_PERM_CHANNEL 2

#define PROTO_NS_PUSH     0xfffeu
#define PROTO_NS_PUSH_ANY 0xfffdu

extern const struct proto_ops proto_memcache_ops;
extern const struct proto_ops proto_redis_ops;

/* Key array growth shared by the parsers: room for n keys; 0 or -ENOMEM. Inline test
 * first: the parsers ask once per argument, and the array nearly always has room. */
int proto__keys_grow(struct proto_parser *p, uint32_t n);
static inline int proto__keys_reserve(struct proto_parser *p, uint32_t n)
{
    return __builtin_expect(n <= p->keycap, 1) ? 0 : proto__keys_grow(p, n);
}
/* Decode buffer growth: room for n bytes in p->dec; 0 or -ENOMEM. */
int proto__dec_reserve(struct proto_parser *p, uint32_t n);
/* Free what a parser grew (keys, dec); the struct may be reused zeroed. */
void proto_parser_free(struct proto_parser *p);

#endif
