/* The redis protocol: the command table's shape, shared by the parser, the table and the tests. */
#ifndef RL_PROTO_REDIS_H
#define RL_PROTO_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "lib/util.h"

/* Redis's own request limits (server.c, networking.c). */
#define REDIS_MAX_ARGS        1048576u            /* multibulk length */
#define REDIS_MAX_BULK        (512u * 1024 * 1024) /* proto-max-bulk-len default */
#define REDIS_MAX_INLINE      (64u * 1024)        /* PROTO_INLINE_MAX_SIZE */
#define REDIS_MAX_NAME        32                  /* longer names are unknown commands */

/* Whether the n bytes at s are `word`, ASCII letters in either case (as Redis's
 * strcasecmp compares option names and map keys; no locale). */
static inline int redis__word_is(const char *s, size_t n, const char *word)
{
    size_t i = 0;
    for (; word[i] != '\0'; i++) {
        if (i == n)
            return 0;               /* s is shorter */
        unsigned char a = (unsigned char)s[i], b = (unsigned char)word[i];
        if ((a >= 'a' && a <= 'z' ? a - 32 : a) != (b >= 'a' && b <= 'z' ? b - 32 : b))
            return 0;
    }
    return i == n;
}

/*
 * A reply that is still incomplete once this many bytes of whole elements
 * have been parsed is handed to the core as a non-final unit (the elements
 * so far), so that a huge LRANGE or HGETALL streams instead of being
 * buffered whole. Every smaller reply is exactly one unit.
 */
#define REDIS_RSP_UNIT_MAX    (1024u * 1024)

/* Command flags (struct redis_command.flags). */
#define REDIS_CMD_READ       0x00001  /* reads data ("readonly" in COMMAND) */
#define REDIS_CMD_WRITE      0x00002  /* modifies data */
#define REDIS_CMD_FANOUT     0x00004  /* keys split per server, replies merged */
#define REDIS_CMD_SAME       0x00008  /* several keys that must share one server */
#define REDIS_CMD_LOCAL      0x00010  /* answered by the proxy: see .local */
#define REDIS_CMD_REFUSED    0x00020  /* "command 'X' is not supported by ringleader" */
#define REDIS_CMD_NOKEY      0x00040  /* numkeys may be 0: routed by argument 1 (script) */
#define REDIS_CMD_BROADCAST  0x00080  /* sent to every server, replies merged */
#define REDIS_CMD_CONTAINER  0x00100  /* has subcommands "NAME|SUB" (OBJECT, XINFO ...) */
#define REDIS_CMD_MOVABLE    0x00200  /* keys counted by a numkeys argument */
#define REDIS_CMD_STOREOPT   0x00400  /* a STORE/STOREDIST <key> option adds a key */
#define REDIS_CMD_FLUSH      0x00800  /* refused unless PROTO_PF_ALLOW_FLUSH, then broadcast */
#define REDIS_CMD_NOAUTH     0x01000  /* allowed before AUTH */
#define REDIS_CMD_HIT        0x02000  /* single-key read: a nil reply counts as a miss */
#define REDIS_CMD_INTERNAL   0x04000  /* a routing variant, not listed by COMMAND */
#define REDIS_CMD_VARIANTS   0x08000  /* "NAME|ARG1" INTERNAL entries may refine it (INFO keyspace) */
#define REDIS_CMD_NKINPUT    0x10000  /* numkeys 0: "at least 1 input key is needed" (sorted-set ops) */
#define REDIS_CMD_SCRIPT     0x20000  /* runs a script: refused under PROTO_PF_DENY_SCRIPTS */
#define REDIS_CMD_STREAMS    0x40000  /* keys: the first half of what follows STREAMS (XREAD) */
#define REDIS_CMD_CURSOR     0x80000  /* SCAN: argument 1 is a pool cursor (INDEXED) */
#define REDIS_CMD_DBOPT     0x100000  /* a DB <n> option after the keys: refused (COPY) */
#define REDIS_CMD_CHANNEL   0x200000  /* the "keys" are pub/sub channels: PROTO_RF_CHANNEL */
#define REDIS_CMD_SUBOK     0x400000  /* allowed in RESP2 subscribed mode (PING, QUIT, RESET,
                                       * the (un)subscriptions) */
#define REDIS_CMD_CLOCAL    0x800000  /* REFUSED, but answered here (.local) in a cluster pool
                                       * (PROTO_PF_CLUSTER): CLUSTER SLOTS, READONLY ... */
#define REDIS_CMD_SESS(s)    ((uint32_t)(s) << 24)   /* what it does to a session (below) */
#define REDIS_CMD_SESSION(c) ((enum redis_session)(((c)->flags >> 24) & 0xf))
/* An (un)subscription: PROTO_SUB_* class | PROTO_SUB_UNSUB in bits 28..30 of the flags; its
 * names are every argument after the command's. */
#define REDIS_CMD_SUB(what)  ((uint32_t)(what) << 28)
#define REDIS_CMD_SUB_OF(fl) ((uint8_t)(((fl) >> 28) & 0x07))

/* The number grammar of Redis's string2ll, for util_parse_dec: what every
 * number the proxy reads in a request must follow. */
#define REDIS_DEC            (UTIL_DEC_MINUS | UTIL_DEC_CANON)

/* How the replies of a FANOUT or BROADCAST request are joined. */
enum redis_merge {
    REDIS_MERGE_NONE,
    REDIS_MERGE_ARRAY,     /* MGET: one array in the client's key order */
    REDIS_MERGE_OK,        /* MSET, FLUSHALL: +OK if all are, else the first error */
    REDIS_MERGE_SUM,       /* DEL, EXISTS, DBSIZE ...: integers summed */
    REDIS_MERGE_KEYSPACE,  /* INFO keyspace: keys= and expires= summed per db */
    REDIS_MERGE_INFO,      /* INFO: the backends' sections and the proxy's own (merge_env) */
    REDIS_MERGE_PAIRS,     /* PUBSUB NUMSUB: [channel, count] pairs in the client's order */
    REDIS_MERGE_MAX,       /* PUBSUB NUMPAT: the largest integer */
    REDIS_MERGE_UNION,     /* PUBSUB CHANNELS: every server's elements, each once */
    REDIS_MERGE_CONCAT,    /* KEYS: the arrays one after the other */
    REDIS_MERGE_FIRST,     /* SCRIPT LOAD, PUBSUB HELP: the first error, else the first reply */
    REDIS_MERGE_AND,       /* SCRIPT EXISTS: 1 where every server says 1 */
    REDIS_MERGE_RANDOM,    /* RANDOMKEY: a random non-nil reply (merge_env) */
    REDIS_MERGE_SCAN       /* SCAN: the server's cursor re-encoded as a pool cursor (merge_env) */
};

/* What a command does to a client's session (struct redis_command.session). */
enum redis_session {
    REDIS_SESS_NONE,
    REDIS_SESS_MULTI,
    REDIS_SESS_EXEC,
    REDIS_SESS_DISCARD,
    REDIS_SESS_WATCH,
    REDIS_SESS_UNWATCH,
    REDIS_SESS_QUEUE,        /* LOCAL outside MULTI, sent to the server inside (PING, ECHO, TIME) */
    REDIS_SESS_BLOCK_LAST,   /* blocks; the timeout is the last argument, seconds (BLPOP) */
    REDIS_SESS_BLOCK_FIRST,  /* blocks; the timeout is argument 1, seconds (BLMPOP) */
    REDIS_SESS_BLOCK_OPT,    /* blocks with a BLOCK <ms> option (XREAD, XREADGROUP) */
    REDIS_SESS_WAIT          /* WAIT numreplicas <ms>: only on a session's connection */
};

/* What local() does for a LOCAL command. */
enum redis_local {
    REDIS_LOCAL_NONE,
    REDIS_LOCAL_PING,
    REDIS_LOCAL_ECHO,
    REDIS_LOCAL_QUIT,
    REDIS_LOCAL_SELECT,
    REDIS_LOCAL_AUTH,
    REDIS_LOCAL_HELLO,
    REDIS_LOCAL_RESET,
    REDIS_LOCAL_COMMAND,
    REDIS_LOCAL_COMMAND_COUNT,
    REDIS_LOCAL_COMMAND_INFO,
    REDIS_LOCAL_COMMAND_DOCS,
    REDIS_LOCAL_COMMAND_LIST,
    REDIS_LOCAL_COMMAND_GETKEYS,
    REDIS_LOCAL_INFO,
    REDIS_LOCAL_TIME,
    REDIS_LOCAL_CLIENT_SETNAME,
    REDIS_LOCAL_CLIENT_GETNAME,
    REDIS_LOCAL_CLIENT_ID,
    REDIS_LOCAL_CLIENT_INFO,
    REDIS_LOCAL_CLIENT_LIST,
    REDIS_LOCAL_CLIENT_SETINFO,
    REDIS_LOCAL_CLIENT_NO_EVICT,
    REDIS_LOCAL_CLIENT_NO_TOUCH,
    REDIS_LOCAL_CLIENT_TRACKING,
    REDIS_LOCAL_CLIENT_TRACKINGINFO,
    REDIS_LOCAL_CLIENT_GETREDIR,
    REDIS_LOCAL_CLIENT_CACHING,
    REDIS_LOCAL_EMPTY_ARRAY, /* PUBSUB NUMSUB without channels */
    REDIS_LOCAL_UNWATCH,     /* UNWATCH of a client without a session: nothing is watched */
    /* a cluster pool's one-node cluster (redis_cluster.c) */
    REDIS_LOCAL_CLUSTER_OK,
    REDIS_LOCAL_CLUSTER_KEYSLOT,
    REDIS_LOCAL_CLUSTER_MYID,
    REDIS_LOCAL_CLUSTER_SLOTS,
    REDIS_LOCAL_CLUSTER_SHARDS,
    REDIS_LOCAL_CLUSTER_NODES,
    REDIS_LOCAL_CLUSTER_INFO,
    REDIS_LOCAL_CLIENT_KILL, /* the proxy's own clients, over every worker */
    REDIS_LOCAL_ACL_WHOAMI,  /* the user the client authenticated as (users: docs/security.md) */
    /* the proxy's own SLOWLOG over every worker (redis_introspect.c) */
    REDIS_LOCAL_SLOWLOG_GET,
    REDIS_LOCAL_SLOWLOG_LEN,
    REDIS_LOCAL_SLOWLOG_RESET,
    REDIS_LOCAL_SLOWLOG_HELP
};

/*
 * One command of Redis 7.0 as ringleader treats it. name is upper case;
 * a subcommand is "CONTAINER|SUB" with its arity and key positions counted
 * from the container's name, as Redis's COMMAND reports them. first/last/
 * step are Redis's legacy key range (last -1 = the last argument, -2 the one
 * before); numkeys is the index of a numkeys argument whose keys follow it
 * (in addition to the range, as ZUNIONSTORE's destination).
 */
struct redis_command {
    const char *name;
    int16_t     arity;      /* N exact, -N at least N (the name included) */
    int8_t      first;
    int8_t      last;
    int8_t      step;
    uint8_t     numkeys;
    uint8_t     merge;      /* enum redis_merge */
    uint8_t     local;      /* enum redis_local */
    uint32_t    flags;      /* REDIS_CMD_*, REDIS_CMD_SESS(enum redis_session) and
                             * REDIS_CMD_SUB(what) for (un)subscriptions */
};

/* The table, sorted by name (strcmp order), and its size. */
extern const struct redis_command redis_commands[];
extern const size_t redis_ncommands;

/* Find a command by exact upper-case name (NUL-terminated); NULL if none. */
const struct redis_command *redis_command_find(const char *upper);

/* Case-insensitive lookup of name[0..len); NULL if unknown. */
const struct redis_command *redis_command_lookup(const char *name, size_t len);
/* The same for a request's first argument: a name holding '|' is NULL ("NAME|SUB" is how
 * the table names a subcommand, never a command Redis knows: sent as a name,
 * "XINFO|STREAM k" is unknown to Redis too). */
const struct redis_command *redis_command_of_request(const char *name, size_t len);

/* The number of commands COMMAND and COMMAND COUNT list (top level, not refused). */
size_t redis_command_listed(void);

/* Shared by the Redis protocol's files. */
#define REDIS_CMD_NONE     0xffff   /* req->cmd of a request not in the table */

/* INFO's BROADCAST (REDIS_MERGE_INFO): the reply from the servers' INFO replies frag[] (an
 * error reply for a server that failed), the Keyspace section already merged (a bulk, or
 * NULL) and the proxy's numbers in env. 0, -1 (unreadable request), -ENOMEM. */
int redis__info_merge(const char *reqbuf, struct buf *const *frag, uint32_t nfrag,
                      const struct buf *keyspace, const struct proto_env *env, struct buf *out);

/* Introspection (redis_introspect.c): proto_ops.cmd_name, .slow_entry and .req_key; the
 * SLOWLOG subcommands (a REDIS_LOCAL_SLOWLOG_*, args[0..argc) offsets into buf); INFO's
 * commandstats and errorstats sections appended to b. Each 0 or -ENOMEM. */
const char *redis__cmd_name(uint16_t cmd);
uint16_t redis__ncmds(void);
int redis__slow_entry(const char *req, size_t n, const struct proto_slow *e, struct buf *out);
int redis__req_key(uint16_t cmd, const char *req, size_t n, const char **key, size_t *len,
                   uint64_t *full);
int redis__slowlog(int what, const char *buf, const struct proto_key *args, uint32_t argc,
                   const struct proto_env *env, struct buf *out);
int redis__info_commandstats(struct buf *b, const struct proto_env *env);
int redis__info_errorstats(struct buf *b, const struct proto_env *env);

/* The text of a bulk string or RESP3 verbatim string reply d[0..len) (without the
 * verbatim's "txt:"); 0, or -1 if d is not one, whole. */
int redis__text(const char *d, size_t len, const char **text, size_t *tlen);

/* Append s[0..n) as a bulk string, or (verbatim) as RESP3's verbatim "txt" string, as Redis
 * answers INFO and CLIENT INFO in each protocol. 0 or -ENOMEM. */
int redis__append_text(struct buf *out, int verbatim, const char *s, size_t n);

/* The end of the one complete RESP2/RESP3 element at buf[pos..len) (nested ones
 * included, read as the reply parser reads them), or -1. */
int64_t redis__element_end(const char *buf, size_t len, size_t pos);

/* LOCAL requests: write the reply (proto_ops.local). */
int redis__local(struct proto_client *c, struct proto_parser *p, const struct proto_req *req,
                 const char *buf, const struct proto_env *env, struct buf *out);

/*
 * The keys of command c given its arguments args[0..argc) (offsets into
 * buf), written to keys[] (which may alias args). Returns the count, -1 with
 * *err a complete static error reply (bad numkeys), -2 for an argument count
 * the command cannot take. *nokey: a script with numkeys 0, routed by its body.
 */
/* A CLIENT TRACKING invalidation push p[0..n) as a tracking connection reads it
 * (RESP3 `>2 $10 invalidate *N $k key ...`; redis_resp.c): 0 with its *count keys, read
 * in turn from *off with redis_invalidation_key (0, or -1 when malformed); 1 for a
 * flush (`_`: every key); -1 for another push or a malformed one. */
int redis_invalidation(const char *p, size_t n, size_t *off, uint64_t *count);
int redis_invalidation_key(const char *p, size_t n, size_t *off, const char **key, size_t *len);

/* Membership safety (redis_safety.c): proto_ops.invalidate, .ttl_cap, .collapsible. */
int redis__invalidate(const char *key, size_t len, struct buf *out, uint16_t *cmd);
int redis__ttl_cap(uint16_t cmd, struct buf *out, size_t start, uint32_t ttl, int64_t now_s);
int redis__collapsible(const struct proto_req *req, const char *buf);

int redis__keys_extract(const struct redis_command *c, const struct proto_key *args,
                        uint32_t argc, const char *buf, struct proto_key *keys, int *nokey,
                        const char **err);

/* Redis Cluster (redis_cluster.c). */
extern const struct proto_cluster_ops proto_redis_cluster_ops;

/* Whether an error reply line (rsp[0..len) up to its CR) is a cluster's MOVED, ASK,
 * TRYAGAIN or CLUSTERDOWN. */
int redis__cluster_error(const char *rsp, size_t len);

/* A cluster pool's local CLUSTER command `what` (enum redis_local) with arguments
 * a[0..argc) in buf: the one-node cluster the client sees. 0 or -ENOMEM. */
int redis__cluster_local(int what, const char *buf, const struct proto_key *a, uint32_t argc,
                         const struct proto_env *env, struct buf *out);

#endif
