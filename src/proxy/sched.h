/* The worker's flush schedule: which connections have output to write, and the loop that writes it. */
#ifndef RL_PROXY_SCHED_H
#define RL_PROXY_SCHED_H

#include <stdint.h>
#include <uv.h>

#include "lib/queue.h"

/*
 * Where a connection stands in the schedule (one in each struct client and struct
 * sconn). `dirty`: on the dirty list, written at the end of this iteration; `lazy`: on
 * the lazy list, written when the lazy timer fires (server connections only).
 */
struct sched_node {
    struct qnode dirty_link;
    struct qnode lazy_link;
    uint8_t      dirty;
    uint8_t      lazy;
};

/* Write one connection's output: the worker installs these (sched calls no connection's
 * code by name); n is the connection's node, taken off the dirty list already. */
typedef void (*sched_flush_cb)(struct sched_node *n);

/* One per worker (struct worker.sched). */
struct sched {
    struct qnode   dirty_sconns;   /* output to write this iteration, servers ... */
    struct qnode   dirty_clients;  /* ... and clients */
    struct qnode   lazy_sconns;    /* output that may wait for lazy_timer (shadow copies) */
    uv_timer_t     lazy_timer;
    int            lazy_off;       /* the worker stops: lazy output goes now */
    sched_flush_cb flush_sconn;
    sched_flush_cb flush_client;
};

/* Empty lists, no callbacks (a unit test's worker needs no more); sched_open then gives
 * it the lazy timer and the callbacks, sched_close closes the timer. */
void sched_init(struct sched *sc);
void sched_open(struct sched *sc, uv_loop_t *loop, sched_flush_cb flush_sconn,
                sched_flush_cb flush_client);
void sched_close(struct sched *sc);

/*
 * Write every dirty connection's output now: servers first, then clients, until both
 * lists are empty (sched_flush_with says why). The loop does it after each round of I/O
 * callbacks; a timer callback that answers requests (a timeout's error) calls it itself,
 * or the reply would wait for the next I/O event to wake the loop. Through the callbacks
 * sched_open installed.
 */
void sched_flush(struct sched *sc);

/*
 * The same with the callbacks given: inline, so that the worker's flush after each round
 * of I/O, which passes its own, calls them directly (the hot path costs what it did when
 * the loop was the worker's).
 *
 * One write per connection with everything queued to it since the last flush (requests
 * from many clients to one server go out in a single write). Servers first: their
 * requests start the round trip that dominates a request's latency when the backends are
 * across a network, and the client writes overlap it. A client flush may resume a paused
 * client whose buffered requests dirty servers again: loop until both lists are empty, or
 * the next poll could sleep on unsent requests. Each round consumes input.
 */
static inline void sched_flush_with(struct sched *sc, sched_flush_cb flush_sconn,
                                    sched_flush_cb flush_client)
{
    struct qnode *q;

    while (!queue_empty(&sc->dirty_sconns) || !queue_empty(&sc->dirty_clients)) {
        while ((q = queue_first(&sc->dirty_sconns)) != NULL) {
            struct sched_node *n = QUEUE_DATA(q, struct sched_node, dirty_link);
            queue_remove(q);
            n->dirty = 0;
            flush_sconn(n);
        }
        while ((q = queue_first(&sc->dirty_clients)) != NULL) {
            struct sched_node *n = QUEUE_DATA(q, struct sched_node, dirty_link);
            queue_remove(q);
            n->dirty = 0;
            flush_client(n);
        }
    }
}

/* The lazy output joins this iteration's flush (the worker stops, or the timer fired). */
void sched_lazy_due(struct sched *sc);

/* From now on lazy output goes at the end of the iteration (the worker drains). */
void sched_lazy_off(struct sched *sc);

/* Flush this server connection's output within delay_ms, with whatever else is queued to
 * it by then (shadow copies: fewer writes and reads, for them and for the server, at a
 * cost nobody waits on). 0 ms: at the end of the iteration. */
void sched_mark_lazy(struct sched *sc, struct sched_node *n, uint32_t delay_ms);

/* Schedule a flush of this connection's output at the end of the iteration (hot: inline,
 * callers assert the worker's thread, see client.h and server.h). */
static inline void sched_mark_sconn(struct sched *sc, struct sched_node *n)
{
    if (n->dirty)
        return;
    n->dirty = 1;
    queue_insert_tail(&sc->dirty_sconns, &n->dirty_link);
}

static inline void sched_mark_client(struct sched *sc, struct sched_node *n)
{
    if (n->dirty)
        return;
    n->dirty = 1;
    queue_insert_tail(&sc->dirty_clients, &n->dirty_link);
}

/* It closes, or its output is written now: take it off the lazy list. */
static inline void sched_unlazy(struct sched_node *n)
{
    if (n->lazy) {
        queue_remove(&n->lazy_link);
        n->lazy = 0;
    }
}

/* It closes: take it off the dirty list (and the lazy one). */
static inline void sched_unmark(struct sched_node *n)
{
    if (n->dirty) {
        queue_remove(&n->dirty_link);
        n->dirty = 0;
    }
    sched_unlazy(n);
}

#endif
