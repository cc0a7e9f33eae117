/* struct ring: the immutable placement snapshot of one pool (hash, tag, distribution, servers). */
#ifndef RL_RING_H
#define RL_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "hash/hash.h"
#include "dist/dist.h"

struct conf_pool;

#define RING_MAX_PREF 64   /* longest preference list a caller may ask for */

struct ring_server {
    const char *ident;     /* what the distribution hashes and stats print */
    const char *label;     /* name if configured, else host:port (vector/tool output) */
    const char *addr;      /* its address as configured ("host:port", a path), or NULL:
                              how a server a reload removed is still reached (migrate) */
    uint32_t    weight;
    uint32_t    zone;      /* zone id, 0 = none; ids index ring->zones */
    uint32_t    conf_index;/* index in conf_pool->servers (== ring index) */
    double      keyspace_share; /* of the 2^32 (or 2^64) hashes it owns: ring_shares at
                                   build (exact for ketama and modula, else sampled) */
};

/* Hashes sampled for keyspace_share where the distribution has no points to measure. */
#define RING_SHARE_SAMPLES 20000

struct ring {
    atomic_uint      refs;
    uint64_t         epoch;       /* set by whoever publishes the ring (1 at start) */
    uint64_t         checksum;    /* hash of the canonical inputs, see ring_build */
    enum hash_type   hash;
    uint64_t         hash_seed;
    int              has_tag;
    char             tag[2];
    struct dist      dist;
    uint32_t         nservers;
    struct ring_server *servers;  /* config order */
    uint32_t         nzones;
    char           **zones;       /* zones[0] = "" */
    char            *strings;     /* one allocation behind every ident/label/zone */
};

/*
 * Build a ring from a validated pool. Pure: no I/O. Returns a ring with one
 * reference (epoch 1), or NULL with a reason in err.
 */
struct ring *ring_build(const struct conf_pool *pool, char *err, size_t errlen);

void ring_ref(struct ring *r);
void ring_unref(struct ring *r);   /* frees on the last reference */

/* The part of a key that is hashed, after hash_tag (see twemproxy's rule). */
void ring_tagged(const struct ring *r, const char *key, size_t len,
                 const char **out, size_t *outlen);

/* Key hash with the tag applied; a pool with one server skips hashing. */
uint64_t ring_key_hash(const struct ring *r, const char *key, size_t len);

/* Owner of a key: a server index < nservers. */
uint32_t ring_owner(const struct ring *r, const char *key, size_t len);

/*
 * Preference list: up to `want` distinct servers (want <= RING_MAX_PREF),
 * distinct zones first, out[0] the owner. Returns the count written.
 */
uint32_t ring_preference(const struct ring *r, const char *key, size_t len,
                         uint32_t *out, uint32_t want);

/* The same from the key's hash (ring_key_hash), for callers that hashed once. */
uint32_t ring_preference_hash(const struct ring *r, uint64_t hash, uint32_t *out, uint32_t want);

/* Exact share of the keyspace owned by each server (shares[nservers], sums
 * to 1): from the ring's points where the distribution has them, else by
 * sampling `samples` hashes. */
void ring_shares(const struct ring *r, double *shares, uint32_t samples);

/*
 * Fraction of the keyspace whose owner differs between two rings over the
 * same or different servers (matched by ident), estimated over `samples`
 * uniformly spread hashes (exact for ketama by walking both point sets).
 * `floor` receives the least fraction any scheme must move for that change.
 */
double ring_moved_fraction(const struct ring *a, const struct ring *b, uint32_t samples,
                           double *floor);

#endif
