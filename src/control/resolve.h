/* DNS on the main loop (c-ares): servers' host names re-resolved, SRV discovery, the last good answers kept. */
#ifndef RL_CONTROL_RESOLVE_H
#define RL_CONTROL_RESOLVE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "conf/conf.h"

struct proxy;

/* What an answer that changes a pool's servers calls (proxy.c installs it: the
 * configuration in effect built again and applied as a reload): 0 done, 1 busy (asked
 * again shortly), -1 refused (err). */
typedef int (*resolve_rebuild_fn)(struct proxy *p, char *err, size_t errlen);

/* The proxy's resolver state (p->resolve); 0 or -ENOMEM. Nothing runs until resolve_start. */
int  resolve_init(struct proxy *p, resolve_rebuild_fn rebuild);
/* On the main loop (initialised): re-resolution every pool's resolve_interval. */
void resolve_start(struct proxy *p);
void resolve_close(struct proxy *p);    /* handles closed; the loop runs once more */
void resolve_free(struct proxy *p);     /* after the loop ended */

/* Whether pool cp's servers are resolved here rather than by each worker's getaddrinfo:
 * discovery, or a host name with resolve_interval or dns_servers. */
int  resolve_pool_wanted(const struct conf *conf, const struct conf_pool *cp);

/*
 * Replace pool `pool` of the derived configuration conf by its servers as DNS gives them
 * now: discovery's SRV records (targets as identities, SRV weight), else the pool's own
 * servers with each host name's address (the name stays the identity: a new address moves
 * no key). A name never answered yet is asked now, synchronously and bounded (start-up, a
 * reload that adds it). 0, or -1 with err (SRV discovery with no answer and no servers:).
 */
int  resolve_snapshot_pool(struct proxy *p, struct conf *conf, uint32_t pool, char *err,
                           size_t errlen);

/* What DNS gives pool cp (for /config): a new JSON object, or NULL when it resolves nothing
 * here. Main thread or admin thread (under the resolver's lock). */
json_t *resolve_pool_json(struct proxy *p, const struct conf_pool *cp);

#endif
