/* struct cluster_map: a Redis Cluster's slot map — its nodes, their roles, which master serves each slot, its checksum. */
#ifndef RL_CLUSTER_MAP_H
#define RL_CLUSTER_MAP_H

#include <stddef.h>
#include <stdint.h>

#define CLUSTER_SLOTS     16384
#define CLUSTER_NONE      UINT32_MAX
#define CLUSTER_ID_LEN    40        /* a node id: 40 hex digits */
#define CLUSTER_HOST_MAX  256       /* an IP or a hostname */
#define CLUSTER_ADDR_MAX  (CLUSTER_HOST_MAX + 16)   /* "host:port", "[v6]:port" */
#define CLUSTER_NODES_MAX 4096      /* more nodes than any cluster has: a map claiming
                                       more is refused as malformed */

enum cluster_role { CLUSTER_MASTER, CLUSTER_REPLICA };

/* What CLUSTER SHARDS says of a node (CLUSTER SLOTS says nothing: online). */
enum cluster_health { CLUSTER_ONLINE, CLUSTER_LOADING, CLUSTER_FAILED };

struct cluster_node {
    char     id[CLUSTER_ID_LEN + 1];  /* "" when the reply gave none (Redis < 4) */
    char     host[CLUSTER_HOST_MAX];
    uint16_t port;
    char     addr[CLUSTER_ADDR_MAX];  /* "host:port" ("[host]:port" for IPv6): its identity */
    uint8_t  role;                    /* enum cluster_role */
    uint8_t  health;                  /* enum cluster_health */
    uint32_t master;                  /* a replica's master (node index); a master: itself */
    uint32_t nslots;                  /* slots it serves (masters) */
};

/*
 * The map, once cluster_map_finish() ran: nodes sorted by address (so two
 * proxies reading the same cluster from different nodes index it alike), every
 * replica after its master's index resolved, owner[] the serving master of
 * each slot (CLUSTER_NONE: no node serves it, the cluster answers CLUSTERDOWN).
 */
struct cluster_map {
    struct cluster_node *nodes;
    uint32_t nnodes;
    uint32_t cap;
    uint32_t owner[CLUSTER_SLOTS];
    uint64_t current_epoch;           /* CLUSTER INFO cluster_current_epoch (0: unknown) */
    int      state_ok;                /* CLUSTER INFO cluster_state:ok (-1: unknown) */
    uint64_t checksum;                /* XXH64 of the canonical text (cluster_map_finish) */
};

/* A new empty map (calloc'd, owner[] all CLUSTER_NONE); NULL without memory. */
struct cluster_map *cluster_map_new(void);
void cluster_map_free(struct cluster_map *m);

/*
 * Add a node (or find it: the same address is one node). Returns its index, or -1
 * (no memory, more than CLUSTER_NODES_MAX nodes, a host too long or empty, port 0).
 * A node added twice keeps its first role unless the second says master.
 */
int64_t cluster_map_node(struct cluster_map *m, const char *id, const char *host, size_t hostlen,
                         uint16_t port, enum cluster_role role, enum cluster_health health);

/* Slots lo..hi (inclusive) are served by master node `node`. 0, or -1 when lo > hi or
 * hi >= CLUSTER_SLOTS. */
int cluster_map_slots(struct cluster_map *m, uint32_t lo, uint32_t hi, uint32_t node);

/* Replica node `replica` replicates master node `master` (indices). */
void cluster_map_replica_of(struct cluster_map *m, uint32_t replica, uint32_t master);

/*
 * Sort the nodes by address, remap owners and masters, count slots, compute the
 * checksum. 0, or -1 when the map has no node (nothing a proxy could use).
 */
int cluster_map_finish(struct cluster_map *m);

/* The node with address `addr` ("host:port"), or CLUSTER_NONE. */
uint32_t cluster_map_find(const struct cluster_map *m, const char *addr);

/* Redis Cluster's keyslot: CRC16-XMODEM of the key's hash tag ({...}) or of the key. */
uint32_t cluster_keyslot(const char *key, size_t len);

/* "host:port", or "[host]:port" when host holds a ':' (IPv6), into out. */
void cluster_addr_format(char *out, size_t outlen, const char *host, size_t hostlen,
                         uint16_t port);

/* The canonical text the checksum covers (for tests and ringleader-ring); 0 or -ENOMEM. */
struct buf;
int cluster_map_canonical(const struct cluster_map *m, struct buf *out);

/*
 * What routing and the stats read of a map, by node index (the index of the node's
 * server in its pool): one allocation, immutable once built, owned by a snapshot.
 */
struct cluster_view {
    uint32_t  nnodes;
    uint8_t  *role;           /* enum cluster_role */
    uint8_t  *usable;         /* 1: online (not failed, not loading): may serve reads */
    uint32_t *nslots;
    uint32_t *first;          /* [nnodes + 1]: master i's replicas are list[first[i] .. first[i + 1]) */
    uint32_t *list;
    uint64_t  current_epoch;
    int       state_ok;       /* 1 ok, 0 fail, -1 unknown */
    uint64_t  checksum;       /* the map's */
};

/* Build the view of a finished map (m NULL: n masters with no replicas, for a pool that
 * has no map yet); NULL without memory. */
struct cluster_view *cluster_view_build(const struct cluster_map *m, uint32_t n);
void cluster_view_free(struct cluster_view *v);

/* Human names. */
const char *cluster_role_name(enum cluster_role r);
const char *cluster_health_name(enum cluster_health h);

#endif
