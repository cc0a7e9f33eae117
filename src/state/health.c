/* Server health shared by every worker: consecutive failures, down/up, probes, flap damping. */
#include "config.h"

#include "state/health.h"

int health_try_probe(struct health *h, uint64_t now_ms)
{
    int expected = HEALTH_DOWN;

    if (atomic_load_explicit(&h->state, memory_order_relaxed) != HEALTH_DOWN)
        return 0;
    if (now_ms < atomic_load_explicit(&h->retry_at_ms, memory_order_relaxed))
        return 0;
    return atomic_compare_exchange_strong(&h->state, &expected, HEALTH_PROBING);
}

int health_success(struct health *h, uint64_t now_ms, int rejoin)
{
    health_ok(h);
    int st = atomic_load_explicit(&h->state, memory_order_relaxed);
    if (st == HEALTH_UP || st == HEALTH_REJOINING)
        return 0;
    if (!atomic_compare_exchange_strong(&h->state, &st, rejoin ? HEALTH_REJOINING : HEALTH_UP))
        return 0;
    if (!rejoin)
        atomic_store(&h->up_since_ms, now_ms);
    return 1;
}

int health_rejoined(struct health *h, uint64_t now_ms)
{
    int st = HEALTH_REJOINING;

    if (!atomic_compare_exchange_strong(&h->state, &st, HEALTH_UP))
        return 0;
    atomic_store(&h->up_since_ms, now_ms);
    return 1;
}

static void health_down(struct health *h, uint64_t now_ms, uint32_t retry_ms, unsigned flaps,
                        uint64_t wall_us)
{
    unsigned shift = flaps > 6 ? 6 : flaps;
    atomic_store(&h->retry_at_ms, now_ms + ((uint64_t)retry_ms << shift));
    atomic_store(&h->ejected_at_us, wall_us);
    atomic_fetch_add(&h->ejects, 1);
}

int health_rejoin_failed(struct health *h, uint64_t now_ms, uint32_t retry_ms, uint64_t wall_us)
{
    int st = HEALTH_REJOINING;

    if (!atomic_compare_exchange_strong(&h->state, &st, HEALTH_DOWN))
        return 0;
    unsigned flaps = (unsigned)atomic_fetch_add(&h->flaps, 1) + 1;   /* as health_failure */
    health_down(h, now_ms, retry_ms, flaps, wall_us);
    return 1;
}

void health_mark_down(struct health *h, uint64_t wall_us)
{
    atomic_store(&h->retry_at_ms, 0);
    atomic_store(&h->ejected_at_us, wall_us);
    atomic_store(&h->state, HEALTH_DOWN);
}

int health_failure(struct health *h, uint64_t now_ms, uint32_t limit, uint32_t retry_ms,
                   uint64_t wall_us)
{
    unsigned n = atomic_fetch_add(&h->failures, 1) + 1;
    int st = atomic_load(&h->state);

    if (st == HEALTH_PROBING) {
        /* The probe failed: down again, waiting longer each time. */
        unsigned flaps = atomic_fetch_add(&h->flaps, 1) + 1;
        if (atomic_compare_exchange_strong(&h->state, &st, HEALTH_DOWN))
            health_down(h, now_ms, retry_ms, flaps, wall_us);
        return 0;
    }
    if (st != HEALTH_UP || n < (limit ? limit : 1))
        return 0;
    if (!atomic_compare_exchange_strong(&h->state, &st, HEALTH_DOWN))
        return 0;
    /* Flap damping: down again soon after coming back waits longer. */
    uint64_t up_since = atomic_load(&h->up_since_ms);
    unsigned flaps = 0;
    if (up_since != 0 && now_ms - up_since < HEALTH_FLAP_WINDOW_MS)
        flaps = atomic_fetch_add(&h->flaps, 1) + 1;
    else
        atomic_store(&h->flaps, 0);
    health_down(h, now_ms, retry_ms, flaps, wall_us);
    return 1;
}
