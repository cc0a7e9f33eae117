/* Server health shared by every worker: consecutive failures, down/up, probes, flap damping. Down is not removed. */
#ifndef RL_HEALTH_H
#define RL_HEALTH_H

#include <stdatomic.h>
#include <stdint.h>

enum health_state {
    HEALTH_UP = 0,
    HEALTH_DOWN,      /* failed server_failure_limit times in a row; waiting for retry_at */
    HEALTH_PROBING,   /* one worker is probing it (memcached version, Redis PING) */
    HEALTH_REJOINING  /* it answered, and is being made safe to read before it is up again:
                       * the writes it missed are invalidated on it, or it is flushed
                       * (rejoin: invalidate | flush, src/proxy/rejoin.c); reads still go
                       * where on_down says, writes reach it */
};

struct rejoin_log;

/*
 * One backend's health, shared by all workers through atomics (no lock).
 * The ring never changes on health: a down server keeps its keys, and
 * requests for them go where the pool's on_down says until it is back.
 */
struct health {
    atomic_int           state;
    atomic_uint          failures;      /* consecutive */
    atomic_uint_fast64_t retry_at_ms;   /* DOWN: a probe may start at this monotonic time */
    atomic_uint_fast64_t up_since_ms;
    atomic_uint_fast64_t ejected_at_us; /* wall clock of the last transition to down */
    atomic_uint          flaps;         /* went down again soon after coming up */
    atomic_uint          ejects;        /* transitions to down */
    atomic_uint          inflight;      /* requests sent and not answered, all workers */
    atomic_uint          inflight_peak; /* the most ever in flight at once */
    atomic_uint          pinned;        /* pinned connections open, all workers (max_pinned) */
    struct rejoin_log   *rejoin;        /* the keys written for it while it was away (set when
                                           the snapshot is built; NULL: rejoin: trust) */
};

/* Bounded loads' in-flight accounting (only for pools with balance_factor). */
static inline void health_inflight_add(struct health *h)
{
    unsigned n = atomic_fetch_add_explicit(&h->inflight, 1, memory_order_relaxed) + 1;
    unsigned peak = atomic_load_explicit(&h->inflight_peak, memory_order_relaxed);
    while (n > peak && !atomic_compare_exchange_weak(&h->inflight_peak, &peak, n))
        ;
}

static inline void health_inflight_sub(struct health *h)
{
    atomic_fetch_sub_explicit(&h->inflight, 1, memory_order_relaxed);
}

/* Whether requests may be sent. When the server is down and its retry time
 * has come, exactly one caller gets *probe = 1 (it must send a probe and
 * report the outcome); everyone else keeps seeing it down. */
static inline int health_up(struct health *h)
{
    return atomic_load_explicit(&h->state, memory_order_relaxed) == HEALTH_UP;
}
int health_try_probe(struct health *h, uint64_t now_ms);

static inline enum health_state health_state(struct health *h)
{
    return (enum health_state)atomic_load_explicit(&h->state, memory_order_relaxed);
}

/* A reply from a server that is up: its failure count starts again (the
 * common case of health_success, inline: it runs for every reply). */
static inline void health_ok(struct health *h)
{
    if (atomic_load_explicit(&h->failures, memory_order_relaxed) != 0)
        atomic_store_explicit(&h->failures, 0, memory_order_relaxed);
}

/* A reply arrived (or a probe succeeded): the failure count resets; a down
 * or probing server comes back: up, or with `rejoin` REJOINING (and up only
 * by health_rejoined). Returns 1 to the one caller that moved it. */
int health_success(struct health *h, uint64_t now_ms, int rejoin);

/* REJOINING -> UP (its invalidations are acknowledged). 1 when it moved. */
int health_rejoined(struct health *h, uint64_t now_ms);

/* REJOINING -> DOWN: the invalidations were not acknowledged; the next
 * probe waits longer, as after a failed probe. 1 when it moved. */
int health_rejoin_failed(struct health *h, uint64_t now_ms, uint32_t retry_ms, uint64_t wall_us);

/* Down at once, probed at the first request (a restarted proxy whose journal
 * holds invalidations for the server: it must not serve reads before them). */
void health_mark_down(struct health *h, uint64_t wall_us);

/*
 * A failure (connect refused, reset, timeout). With `limit` consecutive
 * failures an up server goes down for retry_ms, doubled for each recent
 * flap (down again within HEALTH_FLAP_WINDOW of coming up), capped at
 * 64 x retry_ms; a failed probe puts it back down with the next doubling.
 * Returns 1 when this call took the server down.
 */
int health_failure(struct health *h, uint64_t now_ms, uint32_t limit, uint32_t retry_ms,
                   uint64_t wall_us);

#define HEALTH_FLAP_WINDOW_MS 60000

#endif
