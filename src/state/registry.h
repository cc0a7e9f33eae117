/* The records kept across reloads (a pool's shared state by name, a server's health by identity), in a hashed registry. */
#ifndef RL_PROXY_REGISTRY_H
#define RL_PROXY_REGISTRY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* State of a pool shared by every worker (atomics), kept across reloads by name. */
#define POOL_SPILL_SLOTS 1024
#define POOL_NC_SLOTS    16384   /* near_cache: write slots by key hash (nearcache.c) */

struct pool_shared {
    atomic_uint clients;          /* client connections over all workers */
    atomic_uint_fast64_t reloads; /* reloads that changed this pool's ring */
    /* bounded loads: the last server a key's read spilled to, and when
     * (seconds); a direct-mapped table by key hash, races only blur it */
    atomic_uint_fast64_t spill_key[POOL_SPILL_SLOTS];
    atomic_uint          spill_server[POOL_SPILL_SLOTS];
    atomic_uint          spill_sec[POOL_SPILL_SLOTS];
    atomic_uint_fast64_t shadow_log_s;  /* shadow compare: when a mismatch was last logged */
    /* near_cache: per slot of keys, writes begun (high bits) and in flight (low bits), so a
     * write through any worker makes every worker's copy of its keys invalid at once */
    atomic_uint_fast64_t nc_slot[POOL_NC_SLOTS];
    /* migrate: the ring whose keys move to their owners (its checksum, the low 3 bits
     * cleared) | 4 from its publication until every worker runs it | 1 while its keys
     * move | 2 once the servers that reload removed are drained; 0: none.
     * src/control/migrate.c writes it, src/proxy/migrate.c reads it */
    atomic_uint_fast64_t migrating;
};

/*
 * A map from byte-string keys to records the registry allocates (zeroed,
 * `size` bytes) on first lookup and frees with itself. Used by the main
 * thread only (snapshot builds); the records themselves are then shared by
 * the workers through the snapshot. O(1) expected per lookup.
 */
struct registry;

struct registry *registry_new(size_t size);
void registry_free(struct registry *r);

/* The record for key[0..len), created when new; NULL without memory. */
void *registry_get(struct registry *r, const void *key, size_t len);

/* How many records it holds. */
size_t registry_count(const struct registry *r);

#endif
