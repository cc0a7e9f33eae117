/* migrate: the servers a reload removed that a worker keeps reaching while their keys move (src/proxy/migrate.c). */
#ifndef RL_PROXY_MIGRATE_H
#define RL_PROXY_MIGRATE_H

#include <stdint.h>

struct server;
struct worker;
struct wpool;

/*
 * A shrink (docs/reload.md, "Shrink"): a server the reload removed still holds keys until
 * the migration has moved them. While the pool migrates from the previous ring, the worker
 * keeps such a server as *retiring* (wpool.retiring, by previous-ring index): in no ring,
 * reached only by the migrate stage, which moves a key from there before its request runs
 * on the key's new owner, as for a grow.
 *
 * migrate_retiring_bind: after the pool's servers were matched to its (new) config;
 * left[0..nleft) are the servers the config dropped: those the pool still migrates from
 * are taken as retiring (their slots set to NULL), the others stay for the caller to
 * close. Retiring servers of the previous binding that are no longer wanted are closed
 * (their in-flight requests finish). No migration, no array: nothing is kept.
 *
 * migrate_retiring_tick: once a second: closes them once the control reports the removed
 * servers drained, or the migration over or replaced.
 *
 * migrate_retiring_drop: closes them all (the pool retires or is freed).
 */
void migrate_retiring_bind(struct worker *w, struct wpool *wp, struct server **left,
                           uint32_t nleft);
void migrate_retiring_tick(struct wpool *wp);
void migrate_retiring_drop(struct wpool *wp);

#endif
