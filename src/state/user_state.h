/* What every worker shares of one configured user: its counters, connection count and rate buckets (atomics, kept across reloads by name). */
#ifndef RL_STATE_USER_STATE_H
#define RL_STATE_USER_STATE_H

#include <stdatomic.h>
#include <stdint.h>

/*
 * A rate is a token bucket kept as one atomic number, the generic cell rate algorithm's
 * "theoretical arrival time" (tat, ns on the monotonic clock): each unit costs 1e9 / rate
 * ns; a request of n units is admitted when tat is no further ahead of now than the
 * bucket's depth (burst_ns: burst_ns * rate / 1e9 units may come at once), and then tat
 * moves on by its cost. One compare-and-swap
 * per admitted request, no lock, no refill timer, and the same bucket for every worker: the
 * user's clients share it wherever they are. A refused request changes nothing, so a flood
 * of refusals costs the others nothing but the load of the cache line.
 */
struct user_bucket {
    atomic_uint_fast64_t tat;
};

/* The bucket's price of n units at rate units per second, in ns. */
static inline uint64_t user_bucket_cost(uint64_t rate, uint64_t n)
{
    return (uint64_t)((unsigned __int128)n * 1000000000u / rate);
}

/* 1 admitted (tat moved on), 0 refused: the bucket is more than burst_ns in debt. rate:
 * units per second (> 0). */
static inline int user_bucket_take(struct user_bucket *b, uint64_t now_ns, uint64_t rate,
                                   uint64_t burst_ns, uint64_t n)
{
    uint64_t cost = user_bucket_cost(rate, n);
    uint64_t tat = atomic_load_explicit(&b->tat, memory_order_relaxed);
    for (;;) {
        uint64_t base = tat > now_ns ? tat : now_ns;
        if (base - now_ns > burst_ns)
            return 0;
        if (atomic_compare_exchange_weak_explicit(&b->tat, &tat, base + cost,
                                                  memory_order_relaxed, memory_order_relaxed))
            return 1;
    }
}

/* Charge n units after the fact (reply bytes): the next requests wait for them. */
static inline void user_bucket_charge(struct user_bucket *b, uint64_t now_ns, uint64_t rate,
                                      uint64_t n)
{
    uint64_t cost = user_bucket_cost(rate, n);
    uint64_t tat = atomic_load_explicit(&b->tat, memory_order_relaxed);
    for (;;) {
        uint64_t base = tat > now_ns ? tat : now_ns;
        if (atomic_compare_exchange_weak_explicit(&b->tat, &tat, base + cost,
                                                  memory_order_relaxed, memory_order_relaxed))
            return;
    }
}

/* A user's numbers, summed over every worker (relaxed atomics: counted where they happen). */
struct user_state {
    struct user_bucket ops;
    struct user_bucket bytes;
    atomic_uint          connections;        /* open now */
    atomic_uint_fast64_t connections_total;  /* accepted (authenticated or matched) */
    atomic_uint_fast64_t connections_refused; /* max_connections */
    atomic_uint_fast64_t requests;           /* admitted */
    atomic_uint_fast64_t refused_acl;        /* NOPERM / CLIENT_ERROR: command, key, channel */
    atomic_uint_fast64_t refused_rate;       /* over ops or bytes */
    atomic_uint_fast64_t bytes_in;           /* request bytes admitted */
    atomic_uint_fast64_t bytes_out;          /* reply bytes delivered */
    atomic_uint_fast64_t auth_failures;      /* AUTH with its name and a wrong password */
};

#define USER_STATE_ADD(st, field, n) \
    atomic_fetch_add_explicit(&(st)->field, (n), memory_order_relaxed)

#endif
