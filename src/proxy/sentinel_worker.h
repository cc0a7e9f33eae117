/* A sentinel pool's news from the worker: its master failed, or answered -READONLY / -LOADING; control asks the sentinels again. */
#ifndef RL_PROXY_SENTINEL_WORKER_H
#define RL_PROXY_SENTINEL_WORKER_H

#include <stddef.h>

struct server;

/* srv's connection failed (server_failed): for a sentinel pool, the master may have moved. */
void sentinel_worker_failed(struct server *srv);

/* srv answered the error reply rsp[0..len) (sconn.c): -READONLY or -LOADING from a
 * sentinel pool's master means it is a master no longer (or not yet). */
void sentinel_worker_error(struct server *srv, const char *rsp, size_t len);

#endif
