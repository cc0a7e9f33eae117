/* struct histogram: log-linear latency buckets (2 significant digits), percentiles, Prometheus buckets. */
#include "config.h"

#include <math.h>

#include "lib/invariant.h"
#include "stats/histogram.h"

const uint64_t histogram_prom_bounds_us[HISTOGRAM_PROM_NBOUNDS] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000,
};

/* Decade d (1..6) covers (10^(d+1), 10^(d+2)] in steps of 10^d; its first index: */
#define HIST_DECADE_BASE(d) (101 + 90 * ((d) - 1))

size_t histogram_index(uint64_t us)
{
    if (us <= 100)
        return (size_t)us;
    if (us > HISTOGRAM_MAX_US)
        return HISTOGRAM_OVERFLOW;
    uint64_t step = 10;
    size_t d = 1;
    while (us > step * 100) {       /* at most 5 rounds: 60 s < 10^8 */
        step *= 10;
        d++;
    }
    uint64_t m = (us + step - 1) / step;    /* 11..100: two significant digits, rounded up */
    size_t i = HIST_DECADE_BASE(d) + (size_t)(m - 11);
    /* histogram_record adds at this index unchecked: a bucket past the table
     * would count into sum_us and the fields after it */
    RL_ASSERT(m >= 11 && m <= 100 && i < HISTOGRAM_OVERFLOW);
    return i;
}

uint64_t histogram_upper(size_t i)
{
    if (i <= 100)
        return i;
    if (i >= HISTOGRAM_OVERFLOW)
        return UINT64_MAX;
    size_t j = i - 101;
    uint64_t step = 10;
    for (size_t d = j / 90; d > 0; d--)
        step *= 10;
    return (uint64_t)(j % 90 + 11) * step;
}

static inline uint64_t hist_load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* Single writer: load-add-store needs no read-modify-write instruction, only
 * atomicity of the store so that concurrent readers never see a torn value. */
static inline void hist_add(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, *p + v, __ATOMIC_RELAXED);
}

void histogram_record(struct histogram *h, uint64_t us)
{
    hist_add(&h->buckets[histogram_index(us)], 1);
    hist_add(&h->sum_us, us);
    if (us > h->max_us)
        __atomic_store_n(&h->max_us, us, __ATOMIC_RELAXED);
    hist_add(&h->count, 1);
}

void histogram_merge(struct histogram *dst, const struct histogram *src)
{
    uint64_t count = 0;
    for (size_t i = 0; i < HISTOGRAM_NBUCKETS; i++) {
        uint64_t b = hist_load(&src->buckets[i]);
        dst->buckets[i] += b;
        count += b;
    }
    /* The count is the sum of the buckets we copied, so the merged histogram is
     * self-consistent even if the writer moved on meanwhile. */
    dst->count += count;
    dst->sum_us += hist_load(&src->sum_us);
    uint64_t m = hist_load(&src->max_us);
    if (m > dst->max_us)
        dst->max_us = m;
}

uint64_t histogram_percentile(const struct histogram *h, double q)
{
    uint64_t count = 0;
    for (size_t i = 0; i < HISTOGRAM_NBUCKETS; i++)
        count += hist_load(&h->buckets[i]);
    if (count == 0)
        return 0;
    if (!(q > 0.0))             /* also NaN */
        q = 0.0;
    if (q > 1.0)
        q = 1.0;
    uint64_t rank = (uint64_t)ceil(q * (double)count);
    if (rank == 0)
        rank = 1;
    if (rank > count)
        rank = count;
    uint64_t cum = 0;
    for (size_t i = 0; i < HISTOGRAM_NBUCKETS; i++) {
        cum += hist_load(&h->buckets[i]);
        if (cum >= rank)
            return i == HISTOGRAM_OVERFLOW ? hist_load(&h->max_us) : histogram_upper(i);
    }
    return hist_load(&h->max_us);     /* not reached: cum ends at count */
}

double histogram_mean(const struct histogram *h)
{
    uint64_t n = hist_load(&h->count);
    return n ? (double)hist_load(&h->sum_us) / (double)n : 0.0;
}

void histogram_cumulative(const struct histogram *h, uint64_t *cum)
{
    uint64_t acc = 0;
    size_t b = 0;
    for (size_t i = 0; i < HISTOGRAM_NBUCKETS; i++) {
        /* Close every boundary that bucket i lies above. */
        while (b < HISTOGRAM_PROM_NBOUNDS && histogram_upper(i) > histogram_prom_bounds_us[b])
            cum[b++] = acc;
        acc += hist_load(&h->buckets[i]);
    }
    while (b < HISTOGRAM_PROM_NBOUNDS)
        cum[b++] = acc;
    cum[HISTOGRAM_PROM_NBOUNDS] = acc;
}
