/* Unit tests for struct histogram: bucket bounds, percentiles against known distributions, merge, Prometheus buckets. */
#include "config.h"

#include "check_main.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stats/histogram.h"

/* A small deterministic generator (xorshift64*), so failures reproduce. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}
static double rng_unit(void)
{
    return (double)(rng() >> 11) / 9007199254740992.0;   /* [0, 1) */
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

START_TEST(test_bucket_bounds_cover_every_value_within_ten_percent)
{
    size_t prev = 0;
    for (uint64_t v = 0; v <= HISTOGRAM_MAX_US; v += (v < 200000 ? 1 : 997)) {
        size_t i = histogram_index(v);
        ck_assert_uint_lt(i, HISTOGRAM_OVERFLOW);
        ck_assert_uint_ge(i, prev);                 /* monotonic */
        prev = i;
        uint64_t ub = histogram_upper(i);
        ck_assert_uint_ge(ub, v);
        ck_assert(v <= 100 ? ub == v : (double)ub < (double)v * 1.1);
        if (i > 0)
            ck_assert_uint_lt(histogram_upper(i - 1), v);   /* v is in the first bucket that holds it */
    }
    ck_assert_uint_eq(histogram_index(HISTOGRAM_MAX_US), HISTOGRAM_OVERFLOW - 1);
    ck_assert_uint_eq(histogram_upper(HISTOGRAM_OVERFLOW - 1), HISTOGRAM_MAX_US);
    ck_assert_uint_eq(histogram_index(HISTOGRAM_MAX_US + 1), HISTOGRAM_OVERFLOW);
    ck_assert_uint_eq(histogram_index(UINT64_MAX), HISTOGRAM_OVERFLOW);
    for (size_t i = 1; i < HISTOGRAM_OVERFLOW; i++)
        ck_assert_uint_lt(histogram_upper(i - 1), histogram_upper(i));
    /* Two significant digits: 1234 -> 1300, 99999 -> 100000, 100001 -> 110000. */
    ck_assert_uint_eq(histogram_upper(histogram_index(1234)), 1300);
    ck_assert_uint_eq(histogram_upper(histogram_index(99999)), 100000);
    ck_assert_uint_eq(histogram_upper(histogram_index(100001)), 110000);
}
END_TEST

START_TEST(test_prometheus_bounds_are_exact_bucket_bounds)
{
    for (size_t b = 0; b < HISTOGRAM_PROM_NBOUNDS; b++) {
        uint64_t le = histogram_prom_bounds_us[b];
        ck_assert_uint_eq(histogram_upper(histogram_index(le)), le);
        ck_assert_uint_gt(histogram_index(le + 1), histogram_index(le));
        if (b)
            ck_assert_uint_gt(le, histogram_prom_bounds_us[b - 1]);
    }
}
END_TEST

START_TEST(test_percentiles_of_uniform_1_to_100000)
{
    struct histogram h;
    histogram_init(&h);
    for (uint64_t v = 1; v <= 100000; v++)
        histogram_record(&h, v);
    ck_assert_uint_eq(h.count, 100000);
    ck_assert_uint_eq(histogram_percentile(&h, 0.5), 50000);
    ck_assert_uint_eq(histogram_percentile(&h, 0.99), 99000);
    ck_assert_uint_eq(histogram_percentile(&h, 0.999), 100000);   /* 99900 -> 2 digits: 100000 */
    ck_assert_uint_eq(histogram_percentile(&h, 0.0), 1);
    ck_assert_uint_eq(histogram_percentile(&h, 1.0), 100000);
    ck_assert_uint_eq(histogram_percentile(&h, 0.00042), 42);     /* exact below 100 us */
    ck_assert(fabs(histogram_mean(&h) - 50000.5) < 1e-6);
}
END_TEST

/* Log-normal latencies (median ~800 us, long tail): every quantile within [exact, exact * 1.1]. */
START_TEST(test_percentiles_of_lognormal_match_sorted_sample)
{
    enum { N = 200000 };
    uint64_t *v = malloc(N * sizeof(*v));
    ck_assert_ptr_nonnull(v);
    struct histogram h;
    histogram_init(&h);
    for (size_t i = 0; i < N; i++) {
        double u1 = rng_unit() + 1e-12, u2 = rng_unit();
        double z = sqrt(-2.0 * log(u1)) * cos(2 * M_PI * u2);
        v[i] = (uint64_t)exp(log(800.0) + 1.2 * z);
        histogram_record(&h, v[i]);
    }
    qsort(v, N, sizeof(*v), cmp_u64);
    const double qs[] = { 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999 };
    for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
        uint64_t exact = v[(size_t)ceil(qs[k] * N) - 1];
        uint64_t got = histogram_percentile(&h, qs[k]);
        ck_assert_uint_ge(got, exact);
        ck_assert_msg((double)got <= (double)exact * 1.1 + 1, "q=%g exact=%lu got=%lu",
                      qs[k], (unsigned long)exact, (unsigned long)got);
    }
    /* Prometheus buckets: exact counts of values <= each bound. */
    uint64_t cum[HISTOGRAM_PROM_NBOUNDS + 1];
    histogram_cumulative(&h, cum);
    for (size_t b = 0; b < HISTOGRAM_PROM_NBOUNDS; b++) {
        uint64_t n = 0;
        while (n < N && v[n] <= histogram_prom_bounds_us[b])
            n++;
        ck_assert_uint_eq(cum[b], n);
    }
    ck_assert_uint_eq(cum[HISTOGRAM_PROM_NBOUNDS], N);
    free(v);
}
END_TEST

START_TEST(test_merge_equals_recording_into_one)
{
    struct histogram a, b, all, m;
    histogram_init(&a);
    histogram_init(&b);
    histogram_init(&all);
    histogram_init(&m);
    for (int i = 0; i < 50000; i++) {
        uint64_t x = rng() % 3000000;
        histogram_record(i % 3 ? &a : &b, x);
        histogram_record(&all, x);
    }
    histogram_merge(&m, &a);
    histogram_merge(&m, &b);
    ck_assert_int_eq(memcmp(&m, &all, sizeof(m)), 0);
    ck_assert_uint_eq(histogram_percentile(&m, 0.99), histogram_percentile(&all, 0.99));
}
END_TEST

START_TEST(test_empty_and_overflow)
{
    struct histogram h;
    histogram_init(&h);
    ck_assert_uint_eq(histogram_percentile(&h, 0.5), 0);
    ck_assert(histogram_mean(&h) == 0.0);
    uint64_t cum[HISTOGRAM_PROM_NBOUNDS + 1];
    histogram_cumulative(&h, cum);
    for (size_t b = 0; b <= HISTOGRAM_PROM_NBOUNDS; b++)
        ck_assert_uint_eq(cum[b], 0);

    histogram_record(&h, 10);
    histogram_record(&h, 75000000);          /* 75 s: beyond the range */
    ck_assert_uint_eq(h.buckets[HISTOGRAM_OVERFLOW], 1);
    ck_assert_uint_eq(histogram_percentile(&h, 1.0), 75000000);  /* the recorded maximum */
    ck_assert_uint_eq(histogram_percentile(&h, 0.5), 10);
    ck_assert_uint_eq(histogram_percentile(&h, NAN), 10);
    histogram_cumulative(&h, cum);
    ck_assert_uint_eq(cum[HISTOGRAM_PROM_NBOUNDS - 1], 1);   /* <= 1 s */
    ck_assert_uint_eq(cum[HISTOGRAM_PROM_NBOUNDS], 2);       /* +Inf */
}
END_TEST

static Suite *histogram_suite(void)
{
    Suite *s = suite_create("histogram");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_bucket_bounds_cover_every_value_within_ten_percent);
    tcase_add_test(tc, test_prometheus_bounds_are_exact_bucket_bounds);
    tcase_add_test(tc, test_percentiles_of_uniform_1_to_100000);
    tcase_add_test(tc, test_percentiles_of_lognormal_match_sorted_sample);
    tcase_add_test(tc, test_merge_equals_recording_into_one);
    tcase_add_test(tc, test_empty_and_overflow);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(histogram_suite)
