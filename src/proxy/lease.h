/* Leases (the pool key leases:): a missed key's first reader recomputes it, the other reads of the key wait for its store. */
#ifndef RL_PROXY_LEASE_H
#define RL_PROXY_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/keytab.h"
#include "lib/queue.h"

struct msg;
struct wpool;

/*
 * What a cache-aside client sees (docs/routing.md, "Leases"):
 *
 *   get k ─▶ miss: no lease on k ──▶ the client gets the miss: it won the lease
 *   get k ─▶ (lease on k) ─────────▶ held, not sent ─┐
 *   get k ─▶ miss (sent before the lease) ──────────▶ held ─┤
 *                                                           ├─▶ re-sent to the server,
 *   set k ─▶ queued ─▶ the lease ends (released by store) ──┘   answered as if it arrived
 *   ttl_ms passes ─▶ the lease ends (released by timeout) ──┘   then: the first miss among
 *   a re-read (backing off) finds k stored ─────────────────┘   them wins the next lease
 *
 * A lease lives in the proxy's worker (one table per pool and worker); what crosses
 * proxies is the store itself: a held reader's re-read finds the value a set through
 * another proxy (or straight to the server) wrote.
 */

/* What the lease stage knows of a message (struct msg.lease). */
enum lease_mark {
    LEASE_M_NONE = 0,
    LEASE_M_READ,       /* a read sent to its server: its reply decides (lease_reply) */
    LEASE_M_HELD,       /* waiting in a lease's list (linked through its sq) */
    LEASE_M_WRITE,      /* a write of a leased key: its reply ends the lease */
    LEASE_M_META,       /* meta: a get whose `mg ... N` is out (lease_meta_done answers) */
    LEASE_M_ADD,        /* meta: an add of a vivified key, sent as `ms ... C<its cas>` */
    LEASE_M_DEL         /* meta: a delete of a vivified key (its DELETED is a NOT_FOUND) */
};

/* Re-reads of a held key (the proxy's own get of it, the held reads staying held) back
 * off from LEASE_PROBE_MIN_MS, doubling, to LEASE_PROBE_YOUNG_MS for the first
 * LEASE_YOUNG_MS of the hold (a recomputation usually lands there), then on to
 * LEASE_PROBE_MAX_MS: a value stored without passing through this proxy releases its
 * readers within about LEASE_PROBE_YOUNG_MS of its store while the hold is young, and
 * LEASE_PROBE_MAX_MS after (plus a round trip). */
#define LEASE_PROBE_MIN_MS   1u
#define LEASE_PROBE_YOUNG_MS 8u
#define LEASE_YOUNG_MS       250u
#define LEASE_PROBE_MAX_MS   100u

/*
 * One lease: key bytes, when it ends, its held reads. Pure bookkeeping (no I/O): the
 * table below is what check_lease tests.
 */
struct lease {
    struct keytab_node node;    /* the table's keys (its klen: the key's length) */
    struct qnode  age;          /* the table's leases in the order they were won */
    struct qnode  holding;      /* in the table's list of leases with held reads */
    struct qnode  held;         /* held messages, by their sq (oldest first) */
    uint64_t      deadline_ms;  /* ttl_ms after it was won */
    uint64_t      probe_ms;     /* the next re-read while reads are held */
    uint64_t      young_ms;     /* until then re-reads back off to LEASE_PROBE_YOUNG_MS */
    uint32_t      backoff_ms;
    uint32_t      nheld;
    uint8_t       probing;      /* a re-read of the key is out */
    uint8_t       storing;      /* meta: a write of the key is out (its reply ends the lease) */
    uint64_t      pcas;         /* meta: the cas of the item memcached vivified (the win's
                                   placeholder: empty, never stored), 0 unknown */
    struct msg   *cand;         /* lease_prefix: the read whose miss asks the servers for the
                                   fleet-wide lease (answered with its miss if won, else held) */
    char          key[];
};

struct lease_map {
    struct keytab  keys;        /* struct lease; keys.n: how many */
    struct qnode   age;         /* oldest first: deadline order for one ttl */
    struct qnode   holding;     /* leases with held reads */
};

/* An empty map; 0 or -ENOMEM. lease_map_clear frees every lease (their held lists must
 * be empty) and the buckets. */
int  lease_map_init(struct lease_map *lm);
void lease_map_clear(struct lease_map *lm);
/* The lease of key[0..len), or NULL. */
struct lease *lease_map_find(const struct lease_map *lm, const char *key, size_t len);
/* A new lease of key (not in the map) ending at deadline_ms; NULL without memory. */
struct lease *lease_map_add(struct lease_map *lm, const char *key, size_t len,
                            uint64_t deadline_ms);
/* Take l out of the map and free it (its held list must be empty). */
void lease_map_remove(struct lease_map *lm, struct lease *l);
/* When something is next due (a lease's end, a re-read of a held key), or UINT64_MAX. */
uint64_t lease_map_next_due(const struct lease_map *lm);
/* The next re-read time after a re-read at now: the backoff doubles up to the cap
 * (LEASE_PROBE_YOUNG_MS before l->young_ms, LEASE_PROBE_MAX_MS after; the first call sets
 * young_ms). */
uint64_t lease_probe_next(struct lease *l, uint64_t now_ms);

/* leases: {meta: true}: what a memcached mg reply says, as far as the proxy reads it. */
enum { LEASE_MG_OTHER, LEASE_MG_VALUE, LEASE_MG_HEAD, LEASE_MG_MISS };
struct lease_mg {
    int         kind;           /* LEASE_MG_*: VA, HD, EN; OTHER: an error or not one */
    uint64_t    flags, cas;     /* its f and c flags (0 when absent) */
    int         win, z, stale;  /* W, Z, X */
    const char *data;           /* VA: the value, dlen bytes (within the reply) */
    size_t      dlen;
};
/* Read the reply p[0..n) (a whole one: its line and, for VA, the value and its \r\n);
 * anything malformed or truncated is LEASE_MG_OTHER. */
void lease_mg_parse(const char *p, size_t n, struct lease_mg *g);
/* The decimal number p[0..n) (1 to 20 digits, at most UINT64_MAX): 0, or -1. */
int  lease_mg_num(const char *p, size_t n, uint64_t *out);

/* A pool is freed: its held reads (their clients are gone) and leases with it. */
void lease_free(struct wpool *wp);

#endif
