/* Snapshot builds (main thread): from a loaded configuration to what the workers adopt. */
#ifndef RL_CONTROL_SNAPSHOT_BUILD_H
#define RL_CONTROL_SNAPSHOT_BUILD_H

#include <stddef.h>

struct conf;
struct proxy;
struct snapshot;

/*
 * Build a snapshot from a loaded conf (takes ownership of conf; a cluster pool's servers
 * become its nodes in a configuration derived from it, conf_derive): rings,
 * shared records, listening sockets for every worker (the old snapshot's
 * are passed on for listen addresses it already has). Pools whose ring is
 * unchanged against `old` keep its ring and epoch; changed ones get epoch +
 * 1. NULL with err (an unbuildable ring, a listener that cannot be opened,
 * no memory): nothing of the new configuration is left open.
 */
struct snapshot *snapshot_build(struct proxy *p, struct conf *conf, const struct snapshot *old,
                                char *err, size_t errlen);

#endif
