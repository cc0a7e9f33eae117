/* The migration engine: when a reload changes which server owns keys of a `migrate: true` Redis pool, SCAN every server and MIGRATE each key to its new owner. */
#ifndef RL_CONTROL_MIGRATE_H
#define RL_CONTROL_MIGRATE_H

#include <jansson.h>

#include "lib/buf.h"

struct conf;
struct conf_pool;
struct proxy;
struct ring;
struct snapshot;

/*
 * Every worker runs snapshot `cur`, which replaced `old` (NULL at start): start a
 * migration for each `migrate: true` pool whose ring changed (cur's prev_ring is set and is
 * not the ring a running migration already moves from), and, at start, finish what the
 * state file says was left (main thread).
 */
void migrate_adopted(struct proxy *p, struct snapshot *cur, struct snapshot *old);

/*
 * snap is about to be published in place of old (main thread): a pool whose keys start
 * moving is marked migrating now, before any worker routes by the new ring, so that no
 * request of a moved key reaches its new owner before the key (src/proxy/migrate.c).
 */
void migrate_publishing(struct snapshot *snap, const struct snapshot *old);

/*
 * At start: the ring a migration of pool cp that a stopped proxy left unfinished moved
 * from, rebuilt from the state file (the pool's settings, the servers the file lists), or
 * NULL (none, or the file's checksum does not match: the walk then heals without it).
 * `now` is the pool's ring; a previous ring equal to it is NULL too.
 */
struct ring *migrate_state_ring(const struct conf *conf, const struct conf_pool *cp,
                                const struct ring *now);

/* Progress for /stats and /health: {"pool": {...}} (admin thread: takes the lock). */
json_t *migrate_json(struct proxy *p);
/* Prometheus lines appended to out. 0 or -ENOMEM. */
int migrate_prometheus(struct proxy *p, struct buf *out);

/* Stop every migration (shutdown): links are cancelled, the state file stays. */
void migrate_stop(struct proxy *p);
void migrate_free(struct proxy *p);

#endif
