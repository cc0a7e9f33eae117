/* struct cluster_map: a Redis Cluster's slot map — nodes, roles, slot owners, checksum. Pure: no I/O. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "lib/buf.h"
#include "lib/invariant.h"
#include "placement/cluster_map.h"
#include "hash/hash.h"

#define CLUSTER_CANON_VERSION 1

struct cluster_map *cluster_map_new(void)
{
    struct cluster_map *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    for (uint32_t s = 0; s < CLUSTER_SLOTS; s++)
        m->owner[s] = CLUSTER_NONE;
    m->state_ok = -1;
    return m;
}

void cluster_map_free(struct cluster_map *m)
{
    if (m == NULL)
        return;
    free(m->nodes);
    free(m);
}

void cluster_addr_format(char *out, size_t outlen, const char *host, size_t hostlen,
                         uint16_t port)
{
    if (memchr(host, ':', hostlen) != NULL)
        snprintf(out, outlen, "[%.*s]:%u", (int)hostlen, host, port);
    else
        snprintf(out, outlen, "%.*s:%u", (int)hostlen, host, port);
}

uint32_t cluster_map_find(const struct cluster_map *m, const char *addr)
{
    for (uint32_t i = 0; i < m->nnodes; i++)
        if (strcmp(m->nodes[i].addr, addr) == 0)
            return i;
    return CLUSTER_NONE;
}

int64_t cluster_map_node(struct cluster_map *m, const char *id, const char *host, size_t hostlen,
                         uint16_t port, enum cluster_role role, enum cluster_health health)
{
    char addr[CLUSTER_ADDR_MAX];

    if (hostlen == 0 || hostlen >= CLUSTER_HOST_MAX || port == 0 ||
        memchr(host, '\0', hostlen) != NULL)
        return -1;
    cluster_addr_format(addr, sizeof(addr), host, hostlen, port);
    uint32_t at = cluster_map_find(m, addr);
    if (at != CLUSTER_NONE) {
        struct cluster_node *n = &m->nodes[at];
        if (role == CLUSTER_MASTER && n->role != CLUSTER_MASTER) {
            n->role = CLUSTER_MASTER;
            n->master = at;
        }
        return at;
    }
    if (m->nnodes >= CLUSTER_NODES_MAX)
        return -1;
    if (m->nnodes == m->cap) {
        uint32_t cap = m->cap ? m->cap * 2 : 8;
        struct cluster_node *g = realloc(m->nodes, cap * sizeof(*g));
        if (g == NULL)
            return -1;
        m->nodes = g;
        m->cap = cap;
    }
    struct cluster_node *n = &m->nodes[m->nnodes];
    memset(n, 0, sizeof(*n));
    if (id != NULL)
        snprintf(n->id, sizeof(n->id), "%s", id);
    memcpy(n->host, host, hostlen);
    n->host[hostlen] = '\0';
    n->port = port;
    memcpy(n->addr, addr, sizeof(addr));
    n->role = (uint8_t)role;
    n->health = (uint8_t)health;
    n->master = m->nnodes;
    return m->nnodes++;
}

int cluster_map_slots(struct cluster_map *m, uint32_t lo, uint32_t hi, uint32_t node)
{
    if (lo > hi || hi >= CLUSTER_SLOTS || node >= m->nnodes)
        return -1;
    for (uint32_t s = lo; s <= hi; s++)
        m->owner[s] = node;
    return 0;
}

void cluster_map_replica_of(struct cluster_map *m, uint32_t replica, uint32_t master)
{
    if (replica >= m->nnodes || master >= m->nnodes || replica == master)
        return;
    m->nodes[replica].role = CLUSTER_REPLICA;
    m->nodes[replica].master = master;
}

static int node_cmp(const void *a, const void *b)
{
    return strcmp(((const struct cluster_node *)a)->addr, ((const struct cluster_node *)b)->addr);
}

int cluster_map_finish(struct cluster_map *m)
{
    if (m->nnodes == 0)
        return -1;
    /* Remember each node's old index in its master field's place, sort, then
     * translate: old -> new through a map. */
    uint32_t *was = malloc(m->nnodes * sizeof(*was));
    uint32_t *to = malloc(m->nnodes * sizeof(*to));
    uint32_t *master = malloc(m->nnodes * sizeof(*master));
    if (was == NULL || to == NULL || master == NULL) {
        free(was);
        free(to);
        free(master);
        return -1;
    }
    for (uint32_t i = 0; i < m->nnodes; i++) {
        master[i] = m->nodes[i].master;
        m->nodes[i].nslots = i;         /* the old index rides along the sort */
    }
    qsort(m->nodes, m->nnodes, sizeof(*m->nodes), node_cmp);
    for (uint32_t i = 0; i < m->nnodes; i++) {
        was[i] = m->nodes[i].nslots;
        to[was[i]] = i;
    }
    for (uint32_t i = 0; i < m->nnodes; i++) {
        RL_ASSERT(master[was[i]] < m->nnodes);     /* cluster_map_replica_of checked it */
        m->nodes[i].master = to[master[was[i]]];
        m->nodes[i].nslots = 0;
    }
    for (uint32_t s = 0; s < CLUSTER_SLOTS; s++) {
        if (m->owner[s] == CLUSTER_NONE)
            continue;
        RL_ASSERT(m->owner[s] < m->nnodes);        /* cluster_map_slots checked it */
        m->owner[s] = to[m->owner[s]];
        m->nodes[m->owner[s]].nslots++;
    }
    /* A node serving slots is a master whatever a stale line said. */
    for (uint32_t i = 0; i < m->nnodes; i++) {
        if (m->nodes[i].nslots > 0) {
            m->nodes[i].role = CLUSTER_MASTER;
            m->nodes[i].master = i;
        } else if (m->nodes[i].role == CLUSTER_REPLICA &&
                   m->nodes[m->nodes[i].master].role != CLUSTER_MASTER) {
            m->nodes[i].master = i;     /* a replica of a replica: follow nothing */
        }
    }
    free(was);
    free(to);
    free(master);

    struct buf text;
    buf_init(&text);
    int rc = cluster_map_canonical(m, &text);
    if (rc == 0)
        m->checksum = XXH64(buf_rptr(&text), buf_len(&text), 0);
    buf_free(&text);
    return rc == 0 ? 0 : -1;
}

/*
 * One line per node in address order (id, role, health, a replica's master),
 * then each run of slots with one owner. The replication offsets and the
 * epochs are left out: they change while the placement does not.
 */
int cluster_map_canonical(const struct cluster_map *m, struct buf *out)
{
    int rc = buf_appendf(out, "ringleader-cluster %d\n", CLUSTER_CANON_VERSION);
    for (uint32_t i = 0; rc == 0 && i < m->nnodes; i++) {
        const struct cluster_node *n = &m->nodes[i];
        rc = buf_appendf(out, "node %s %s %s %s", n->addr, n->id[0] ? n->id : "-",
                         cluster_role_name(n->role), cluster_health_name(n->health));
        if (rc == 0 && n->role == CLUSTER_REPLICA && n->master != i)
            rc = buf_appendf(out, " of %s", m->nodes[n->master].addr);
        if (rc == 0)
            rc = buf_append(out, "\n", 1);
    }
    for (uint32_t s = 0; rc == 0 && s < CLUSTER_SLOTS;) {
        uint32_t e = s;
        while (e + 1 < CLUSTER_SLOTS && m->owner[e + 1] == m->owner[s])
            e++;
        rc = buf_appendf(out, "slots %u-%u %s\n", s, e,
                         m->owner[s] == CLUSTER_NONE ? "-" : m->nodes[m->owner[s]].addr);
        s = e + 1;
    }
    return rc == 0 ? 0 : -ENOMEM;
}

struct cluster_view *cluster_view_build(const struct cluster_map *m, uint32_t n)
{
    if (m != NULL)
        n = m->nnodes;
    size_t size = sizeof(struct cluster_view) + (size_t)n * (2 * sizeof(uint8_t)) +
                  (size_t)n * sizeof(uint32_t) * 3 + sizeof(uint32_t) + 16;
    struct cluster_view *v = calloc(1, size);
    if (v == NULL)
        return NULL;
    v->nnodes = n;
    v->nslots = (uint32_t *)(void *)(v + 1);
    v->first = v->nslots + n;
    v->list = v->first + n + 1;
    v->role = (uint8_t *)(v->list + n);
    v->usable = v->role + n;
    v->state_ok = -1;
    if (m == NULL) {
        for (uint32_t i = 0; i < n; i++) {
            v->role[i] = CLUSTER_MASTER;
            v->usable[i] = 1;
        }
        return v;
    }
    v->current_epoch = m->current_epoch;
    v->state_ok = m->state_ok;
    v->checksum = m->checksum;
    uint32_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct cluster_node *nd = &m->nodes[i];
        v->role[i] = nd->role;
        v->usable[i] = nd->health == CLUSTER_ONLINE;
        v->nslots[i] = nd->nslots;
        v->first[i] = at;
        for (uint32_t r = 0; r < n && nd->role == CLUSTER_MASTER; r++)
            if (r != i && m->nodes[r].role == CLUSTER_REPLICA && m->nodes[r].master == i) {
                RL_ASSERT(at < n);      /* a replica follows one master: n entries at most */
                v->list[at++] = r;
            }
    }
    v->first[n] = at;
    return v;
}

void cluster_view_free(struct cluster_view *v)
{
    free(v);
}

uint32_t cluster_keyslot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        const char *from = open + 1;
        const char *close = memchr(from, '}', (size_t)(key + len - from));
        if (close != NULL && close != from) {
            key = from;
            len = (size_t)(close - from);
        }
    }
    return hash_crc16(key, len) & (CLUSTER_SLOTS - 1);
}

const char *cluster_role_name(enum cluster_role r)
{
    return r == CLUSTER_MASTER ? "master" : "replica";
}

const char *cluster_health_name(enum cluster_health h)
{
    switch (h) {
    case CLUSTER_LOADING: return "loading";
    case CLUSTER_FAILED:  return "failed";
    case CLUSTER_ONLINE:
    default:              return "online";
    }
}
