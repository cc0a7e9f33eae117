/* Client-side caching for the proxy's clients: CLIENT TRACKING through the proxy, invalidations from every server of the pool. */
#ifndef RL_PROXY_TRACKING_H
#define RL_PROXY_TRACKING_H

#include <stdint.h>

struct buf;
struct client;
struct msg;
struct proto_req;
struct proto_tracking;
struct route_key;
struct worker;
struct wpool;

/*
 * docs/nearcache.md ("Client-side caching through the proxy") is the user's page. The
 * stage is stage_tracking (stage.h): it remembers the keys tracking clients read and
 * sends invalidations for the writes it forwards; this header is what the rest of the
 * worker calls.
 */

/* The worker's tick (once a second): tracking connections re-opened where needed. */
void tracking_tick(struct worker *w);

/* A worker's tables (made with the worker, before any other worker can post to it);
 * 0 or -ENOMEM. tracking_worker_free: at the worker's end. */
int  tracking_worker_init(struct worker *w);
void tracking_worker_free(struct worker *w);

/* The worker's async callback: invalidations other workers posted for its clients
 * (a REDIRECT target on this worker). */
void tracking_inbox(struct worker *w);

/* proto_env.tracking for c: CLIENT TRACKING, CACHING, GETREDIR, TRACKINGINFO. */
int  tracking_command(struct client *c, const struct proto_tracking *t, int v3, struct buf *out);

/* c closes (before its messages are dropped), or was RESET (its tracking ends). */
void tracking_client_gone(struct client *c);
/* The local reply m of a CLIENT TRACKING that held its client's input until the
 * servers track the worker's connections waits with the input: 1 if kept (answered when
 * the hold ends), 0 to answer it now. */
int  tracking_defer_reply(struct client *c, struct msg *m);
void tracking_client_reset(struct client *c);

/* A request of c's session (MULTI, WATCH: session.c, which the stages do not see), its
 * keys placed in rk: remembered (a read) or invalidated (a write) as the stage does. */
void tracking_session(struct client *c, struct wpool *wp, const struct proto_req *req,
                      const struct route_key *rk);

/* The pool's chain of stages was (re)built: the tracking stage runs in it while the
 * worker has tracking clients. */
void tracking_pool_bound(struct wpool *wp);

/* The pool's configuration, ring or cluster map may change, or it goes (worker.c, where
 * it drops the near cache): its tracking connections are released and every tracking
 * client of the worker gets a flush (a null invalidation). */
void tracking_pool_drop(struct wpool *wp);

#endif
