/* Rejoin: what was written for a down server's keys is remembered, and invalidated on it (or it is flushed) before it serves reads again. */
#ifndef RL_PROXY_REJOIN_H
#define RL_PROXY_REJOIN_H

#include <stdint.h>
#include <uv.h>

#include "conf/conf.h"

struct health;
struct registry;
struct route;
struct route_key;
struct server;
struct wpool;

/*
 * The lifecycle of a server of a pool that marks servers down, with
 * rejoin: invalidate (the default) or flush:
 *
 *   UP ──failures──▶ DOWN ──retry time──▶ PROBING ──reply──▶ REJOINING ──acknowledged──▶ UP
 *                     ▲                      │                   │
 *                     └────────failed────────┴────not answered───┘
 *
 * DOWN / PROBING: its keys' reads and writes go where on_down says; each write
 *   (or delete) of one of its keys is remembered in its rejoin log, with the
 *   failover server that took it (rejoin_note, from forward.c).
 * REJOINING: reads still go where on_down says; writes go to it as well (after
 *   the failover server, which serves the reads meanwhile), so nothing it gets
 *   from now on needs invalidating. The worker whose probe succeeded takes the
 *   log and sends the invalidations, pipelined with the pool's timeout (1 s when
 *   it has none): a delete of every remembered key on the server and on the
 *   failover server that took it. When every delete to the server is
 *   acknowledged, the log is checked again under its lock: writes routed just
 *   before the server started rejoining may have been remembered meanwhile
 *   (another round for them); when none is left the server is UP in the same
 *   step (rejoin_log_finish), and a write that was routed for it while it was
 *   not up but remembered only now is routed again instead.
 * A log past rejoin_log_keys (or rejoin: flush) makes the round a flush of the
 * server (flush_all / FLUSHDB), logged and counted. A delete or flush that is
 * not acknowledged (an error, a timeout, the connection lost) puts the log back
 * as it was and the server down again, to be probed later.
 */

/*
 * A write of keys rk[0..n) (one request) was routed by rt with
 * ROUTE_EV_DOWN_WRITE or ROUTE_EV_REJOIN_COPY: remember each key for every
 * server of its keyspace that does not get it. Returns 1 when one of those
 * servers came up meanwhile: the request must be routed again.
 */
int  rejoin_note(struct wpool *pool, const struct route_key *rk, uint32_t n,
                 const struct route *rt);

/* The same for a multi-key write split per server: key i goes to server to[i]. */
int  rejoin_note_fanout(struct wpool *pool, const struct route_key *rk, const uint32_t *to,
                        uint32_t n);

/* srv answered while down and is now REJOINING (server.c): invalidate, then up. */
void rejoin_begin(struct server *srv);

/* ------------------------------------------------------------------ the process's logs */

struct rejoin_store;

/* The logs of every server and the journal (rejoin_log: PATH, or NULL for
 * none), read back now. NULL with err. rejoin_store_start: sync the journal
 * from a timer on `loop` (the main thread's) from now on. */
struct rejoin_store *rejoin_store_open(const char *path, char *err, size_t errlen);
void rejoin_store_start(struct rejoin_store *st, uv_loop_t *loop);

/*
 * Give health record h (new: server cs of pool cp) its log (main thread,
 * before any worker sees h). What the journal held for it is loaded, and then
 * h starts down, to be probed and invalidated before it serves. `healths`
 * finds the records of the servers that took its writes. 0 or -ENOMEM.
 */
int  rejoin_store_attach(struct rejoin_store *st, struct health *h, const struct conf_pool *cp,
                         const struct conf_server *cs, struct registry *healths);

struct snapshot;

/*
 * Every server of snapshot `snap` is attached (the start, and a reload every
 * worker has adopted): what the journal read back for servers that are not in
 * it, and the logs of servers a reload removed, are forgotten (logged), so that
 * they do not keep the journal from being emptied. A server configured again
 * later starts with nothing remembered (writes made while it was not configured
 * were not remembered either).
 */
void rejoin_store_prune(struct rejoin_store *st, const struct snapshot *snap);

/* What a reload's configuration names as rejoin_log (path, or NULL), checked:
 * the journal open already is fine (it is read at start only), another file must
 * be one a restart would adopt (rejoin_journal_check). 0, or -1 with err. */
int  rejoin_store_check(const struct rejoin_store *st, const char *path, char *err,
                        size_t errlen);

/* After the workers are gone: sync the journal, free every log (then the loop
 * runs once more to close the timer). */
void rejoin_store_close(struct rejoin_store *st);

#endif
