/* Sessions: a client's run of requests on a server connection of its own (transactions, WATCH, blocking commands). */
#ifndef RL_PROXY_SESSION_H
#define RL_PROXY_SESSION_H

#include <stdint.h>

#include "lib/buf.h"
#include "proto/proto.h"
#include "lib/queue.h"

struct client;
struct server;
struct sconn;
struct wpool;

/*
 * A session holds one pinned connection (server_pin) for a run of one
 * client's requests that a shared connection cannot carry. The protocol says
 * what each request does (proto_req.sess, PROTO_SS_*); this file carries it
 * out:
 *
 *   no session ──OPEN (WATCH k)──────────────▶ PINNED ──END (UNWATCH)─┐
 *        │                                      │  ▲                    │
 *        ├──BEGIN (MULTI)──▶ DEFERRED ──keyed───┘  └──BEGIN (MULTI)     ▼
 *        │                   (held, answered        (atomic)         ENDING ──idle──▶ gone
 *        │                    sess_begun/queued)        └──END (EXEC)──▲
 *        └──BLOCK (BLPOP)──▶ a one-shot session, ENDING at once ───────┘
 *
 * - Placement: the keys of the request that places it, routed as any request
 *   is (routes:, the ring or slot map, on_down): the session is pinned where
 *   routing sends them, and remembers their owner; every later key of the
 *   session must have the same owner, else CROSSSLOT (the pool's servers, not
 *   a ring lookup of its own, decide).
 * - Atomic part (after BEGIN): every request belongs to the session; a keyless
 *   one goes to its server; one the proxy refuses spoils it, and its COMMIT
 *   then sends the protocol's sess_abort and answers PROTO_ERR_ABORTED.
 * - Outside the atomic part (WATCH held): a request whose keys are all on the
 *   session's server goes through the pin, any other the usual way.
 * - Order: the backend sees the client's requests in order. A request that
 *   opens or places a session, or that takes another path to the servers than
 *   the client's previous one, waits until everything the client asked before
 *   is answered (SESSION_WAIT: the client is paused and the request read
 *   again); after END or BLOCK nothing more is read until it is answered
 *   (CLIENT_IN_HOLD), so nothing overtakes it.
 * - End: with keep (the protocol's pin_reset) once its last request is
 *   answered; without when the client closes (a command blocked there never
 *   completes for nobody); a session whose pin fails ends the client too (its
 *   watches and queued commands are gone, as with a direct connection).
 *
 * Subscriptions (pub/sub) fit as one more kind: a session per server, placed
 * by a channel, never ENDING while subscribed.
 */

enum session_kind {
    SESSION_TX,         /* WATCH / MULTI ... EXEC: at most one per client */
    SESSION_ONESHOT     /* one blocking request on a server the client holds no session to */
};

enum session_state {
    SESSION_DEFERRED,   /* atomic part begun, no server yet: requests held */
    SESSION_PINNED,     /* on its pinned connection */
    SESSION_ENDING      /* its last request is sent: released once the pin is idle */
};

struct session {
    struct qnode        link;       /* client's sessions */
    struct client      *c;
    enum session_kind   kind;
    enum session_state  state;
    struct wpool       *pool;       /* the pool its keys route in (routes:) */
    struct server      *srv;        /* where it is pinned (routing's choice) */
    struct sconn       *s;          /* the pinned connection (PINNED, ENDING) */
    struct server      *owner;      /* the owner of the keys that placed it */
    uint8_t             atomic;     /* inside the atomic part (BEGIN sent or held) */
    uint8_t             spoiled;    /* a request of the atomic part was refused */
    uint8_t             hold;       /* the client reads nothing until the pin is idle:
                                       SESSION_HOLD_END or SESSION_HOLD_BLOCK */
    uint8_t             via_pin;    /* the client's last request to a server went through s */
    struct buf          held;       /* DEFERRED: requests to send first once placed */
    uint32_t            nheld;      /* ... each owed a reply to swallow */
};

#define SESSION_HOLD_END   1   /* its last request (EXEC ...) is unanswered */
#define SESSION_HOLD_BLOCK 2   /* a blocking request is unanswered */

/* What session_request did with a request. */
enum session_verdict {
    SESSION_PASS,       /* not the session's business: dispatch it as usual */
    SESSION_DONE,       /* dispatched (sent, held or answered) */
    SESSION_WAIT        /* not now: nothing consumed; read it again once the client's
                           earlier requests are answered */
};

/*
 * A parsed request of client c (its header buf[0..hdr_len), body_len bytes
 * after it) that has session flags, or comes while c holds a session. Called
 * by forward_request (c->nsessions or req->sess set) before anything is
 * queued for it.
 */
enum session_verdict session_request(struct client *c, const struct proto_req *req,
                                     const char *buf);

/* c's pinned connection s answered everything it was sent: 1 when a session
 * held the client for it (the hold is over: parse again), else 0. */
int session_pin_idle(struct client *c, struct sconn *s);

/* s, pinned by c, failed (its requests were answered with errors): 1 when it was a
 * session's (which is over), else 0. */
int session_pin_lost(struct client *c, struct sconn *s);

/* Whether c waits for a blocking request (its EOF then closes it at once). */
int session_blocked(const struct client *c);

/*
 * A reload changed c's pool: a session pinned to a server that left the pool (its pin's
 * server or its keys' owner), or to any server when the pool changed kind (kind_changed:
 * plain to cluster or back, where keys have other owners), has lost what the client
 * holds there (its WATCH, its queued commands, its blocked command); one whose last
 * request (EXEC, UNWATCH) is in flight ends by itself and is left alone. Its pin is closed
 * (a request in flight there, a blocked one, gets the protocol's error), and the client
 * is closed once everything it is owed is written, as a dropped direct connection would
 * be; counted in sessions_lost, logged. 1 when c is being closed so, else 0.
 */
int session_refresh(struct client *c, int kind_changed);

/* c closes: forget its sessions (its pins are closed by the caller). */
void session_client_closed(struct client *c);

#endif
