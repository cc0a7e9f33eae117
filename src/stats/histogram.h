/* struct histogram: a fixed-size latency histogram in microseconds, 2 significant digits, 0 us to 60 s. */
#ifndef RL_HISTOGRAM_H
#define RL_HISTOGRAM_H

#include <stddef.h>
#include <stdint.h>

/*
 * Buckets are log-linear in base 10 and hold a value rounded UP to two significant
 * digits, so each bucket is identified by its inclusive upper bound:
 *
 *   index 0..100      upper bound = index            (exact: 0, 1, ..., 100 us)
 *   index 101..190    110, 120, ..., 1000            (width 10 us)
 *   index 191..280    1100, 1200, ..., 10000         (width 100 us)
 *   ...               ... up to 60,000,000 us (60 s), index 600
 *   index 601         overflow (> 60 s); its upper bound is the largest value recorded
 *
 * A bucket's upper bound overstates a value by less than 10% (less than 1% at the top
 * of each decade). Every "nice" decimal boundary (50 us, 250 us, 2.5 ms, 1 s ...) is
 * the upper bound of a bucket, so the Prometheus buckets derived from the fine ones
 * are exact, not interpolated. 602 buckets: 4.8 KB per histogram, no allocation.
 *
 * Concurrency: one writer (the worker that owns it) calls histogram_record; any thread
 * may read it with histogram_merge (relaxed atomic loads and stores: no torn counters,
 * no lock; a reader may see a count and its bucket a moment apart).
 */
#define HISTOGRAM_MAX_US     60000000ULL
#define HISTOGRAM_NBUCKETS   602
#define HISTOGRAM_OVERFLOW   (HISTOGRAM_NBUCKETS - 1)

struct histogram {
    uint64_t count;                          /* values recorded */
    uint64_t sum_us;                         /* their sum (for Prometheus _sum and means) */
    uint64_t max_us;                         /* the largest value recorded */
    uint64_t buckets[HISTOGRAM_NBUCKETS];
};

/* The Prometheus `le` boundaries in microseconds, ascending; +Inf is implied after them. */
extern const uint64_t histogram_prom_bounds_us[];
#define HISTOGRAM_PROM_NBOUNDS 14

static inline void histogram_init(struct histogram *h)
{
    *h = (struct histogram){0};
}

/* The bucket index of a value: 0..HISTOGRAM_OVERFLOW. */
size_t histogram_index(uint64_t us);

/* The inclusive upper bound of bucket i (i < HISTOGRAM_OVERFLOW); UINT64_MAX for the
 * overflow bucket (use h->max_us for its recorded maximum). */
uint64_t histogram_upper(size_t i);

/* Record one value. Single writer; cheap (a few compares, three relaxed stores). */
void histogram_record(struct histogram *h, uint64_t us);

/* dst += src (counts, sums; max of maxima). src may be written concurrently by its
 * owner; dst must belong to the caller. */
void histogram_merge(struct histogram *dst, const struct histogram *src);

/*
 * The value at quantile q (0 <= q <= 1): the upper bound of the bucket holding the
 * ceil(q * count)-th smallest value (at least the first). Returns 0 for an empty
 * histogram; for the overflow bucket returns max_us. Never less than the true value,
 * and less than 10% above it (when <= 60 s).
 */
uint64_t histogram_percentile(const struct histogram *h, double q);

/* Mean in microseconds (0 when empty). */
double histogram_mean(const struct histogram *h);

/*
 * Cumulative counts at the Prometheus boundaries: cum[i] = number of values
 * <= histogram_prom_bounds_us[i] for i < HISTOGRAM_PROM_NBOUNDS, and
 * cum[HISTOGRAM_PROM_NBOUNDS] = count (the +Inf bucket). cum must hold
 * HISTOGRAM_PROM_NBOUNDS + 1 entries. Non-decreasing by construction.
 */
void histogram_cumulative(const struct histogram *h, uint64_t *cum);

#endif
