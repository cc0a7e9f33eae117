/* Unit tests for struct hotkeys: space-saving bounds on a Zipf stream, the sliding window, merging workers. */
#include "config.h"

#include "check_main.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stats/hotkeys.h"

static uint64_t rng_state;
static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

/* Zipf(s) over ranks 0..n-1 by inverse CDF on a precomputed table. */
struct zipf {
    size_t n;
    double *cdf;
};

static void zipf_init(struct zipf *z, size_t n, double s)
{
    z->n = n;
    z->cdf = malloc(n * sizeof(double));
    ck_assert_ptr_nonnull(z->cdf);
    double acc = 0;
    for (size_t i = 0; i < n; i++)
        z->cdf[i] = (acc += 1.0 / pow((double)(i + 1), s));
    for (size_t i = 0; i < n; i++)
        z->cdf[i] /= acc;
}

static size_t zipf_next(const struct zipf *z)
{
    double u = (double)(rng() >> 11) / 9007199254740992.0;
    size_t lo = 0, hi = z->n - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (z->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Key of rank r: a shuffled-looking name so rank order is not key order. */
static size_t key_of(size_t r, char *buf)
{
    return (size_t)snprintf(buf, 64, "user:%08lx:profile", (unsigned long)(r * 2654435761u % 100000007u));
}

static const struct hotkeys_entry *find(const struct hotkeys_entry *e, size_t n, const char *k, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (e[i].len == len && memcmp(e[i].key, k, len) == 0)
            return &e[i];
    return NULL;
}

enum { NKEYS = 5000, NTOUCH = 300000, NWORKERS = 4 };

/* One worker: the true top keys are found, in order, and every reported bound holds. */
START_TEST(test_zipf_stream_finds_true_top_keys)
{
    rng_state = 12345;
    struct zipf z;
    zipf_init(&z, NKEYS, 1.1);
    uint64_t *truth = calloc(NKEYS, sizeof(*truth));
    struct hotkeys *hk = malloc(sizeof(*hk));
    struct hotkeys_snapshot *snap = malloc(sizeof(*snap));
    ck_assert(truth && hk && snap);
    hotkeys_init(hk, 60000, 1000);
    char k[64];
    for (size_t i = 0; i < NTOUCH; i++) {
        size_t r = zipf_next(&z);
        truth[r]++;
        hotkeys_touch(hk, k, key_of(r, k), 0, 1000 + i / 100);   /* 3 s of traffic */
    }
    hotkeys_snapshot(hk, 1000 + NTOUCH / 100, snap);
    ck_assert_uint_eq(snap->n, HOTKEYS_CAPACITY);
    /* Space-saving conserves the stream: the counters sum to the touches. */
    uint64_t sum = 0;
    for (size_t i = 0; i < snap->n; i++)
        sum += snap->e[i].count;
    ck_assert_uint_eq(sum, NTOUCH);

    const struct hotkeys_snapshot *one[1] = { snap };
    struct hotkeys_entry top[HOTKEYS_TOP];
    int n = hotkeys_merge(one, 1, top, HOTKEYS_TOP);
    ck_assert_int_eq(n, HOTKEYS_TOP);
    for (int i = 0; i < n; i++) {
        ck_assert(i == 0 || top[i - 1].count >= top[i].count);
        /* Identify the rank of the reported key and check its bounds. */
        size_t r;
        for (r = 0; r < NKEYS; r++) {
            size_t len = key_of(r, k);
            if (len == top[i].len && memcmp(k, top[i].key, len) == 0)
                break;
        }
        ck_assert_uint_lt(r, NKEYS);
        ck_assert_uint_ge(top[i].count, truth[r]);
        ck_assert_uint_le(top[i].count - top[i].error, truth[r]);
    }
    /* The true top 10 are exactly the first ten reported, in order (Zipf 1.1 gaps are wide). */
    for (size_t r = 0; r < 10; r++) {
        size_t len = key_of(r, k);
        ck_assert_msg(top[r].len == len && memcmp(top[r].key, k, len) == 0, "rank %zu misplaced", r);
    }
    free(z.cdf);
    free(truth);
    free(hk);
    free(snap);
}
END_TEST

/* Several workers each see part of the stream; the merged list still finds the top keys. */
START_TEST(test_merge_of_workers_finds_true_top_keys)
{
    rng_state = 777;
    struct zipf z;
    zipf_init(&z, NKEYS, 1.0);
    uint64_t *truth = calloc(NKEYS, sizeof(*truth));
    struct hotkeys *hk = malloc(NWORKERS * sizeof(*hk));
    struct hotkeys_snapshot *snap = malloc(NWORKERS * sizeof(*snap));
    ck_assert(truth && hk && snap);
    for (int w = 0; w < NWORKERS; w++)
        hotkeys_init(&hk[w], 60000, 0);
    char k[64];
    for (size_t i = 0; i < NTOUCH; i++) {
        size_t r = zipf_next(&z);
        truth[r]++;
        hotkeys_touch(&hk[rng() % NWORKERS], k, key_of(r, k), 0, 5000);
    }
    const struct hotkeys_snapshot *ptrs[NWORKERS];
    for (int w = 0; w < NWORKERS; w++) {
        hotkeys_snapshot(&hk[w], 5000, &snap[w]);
        ptrs[w] = &snap[w];
    }
    struct hotkeys_entry top[HOTKEYS_TOP];
    int n = hotkeys_merge(ptrs, NWORKERS, top, HOTKEYS_TOP);
    ck_assert_int_eq(n, HOTKEYS_TOP);
    for (size_t r = 0; r < 10; r++) {
        size_t len = key_of(r, k);
        const struct hotkeys_entry *e = find(top, (size_t)n, k, len);
        ck_assert_msg(e != NULL, "true rank %zu missing from the merged top", r);
        ck_assert_uint_ge(e->count, truth[r]);
        ck_assert_uint_le(e->count - e->error, truth[r]);
    }
    ck_assert_int_eq(hotkeys_merge(ptrs, NWORKERS, top, 3), 3);
    ck_assert_int_eq(hotkeys_merge(ptrs, 0, top, 3), 0);
    free(z.cdf);
    free(truth);
    free(hk);
    free(snap);
}
END_TEST

static uint64_t count_of(struct hotkeys *hk, uint64_t now, const char *key)
{
    static struct hotkeys_snapshot snap;
    hotkeys_snapshot(hk, now, &snap);
    const struct hotkeys_entry *e = find(snap.e, snap.n, key, strlen(key));
    return e ? e->count : 0;
}

/* Under capacity the counts are exact; the window is current + previous generation. */
START_TEST(test_window_keeps_previous_generation_then_forgets)
{
    static struct hotkeys hk;
    hotkeys_init(&hk, 1000, 0);
    for (int i = 0; i < 5; i++)
        hotkeys_touch(&hk, "a", 1, 0, 100);
    hotkeys_touch(&hk, "b", 1, 0, 999);
    ck_assert_uint_eq(count_of(&hk, 999, "a"), 5);
    /* Second window: "a" is still counted through the previous generation. */
    for (int i = 0; i < 3; i++)
        hotkeys_touch(&hk, "a", 1, 0, 1500);
    ck_assert_uint_eq(count_of(&hk, 1500, "a"), 8);
    ck_assert_uint_eq(count_of(&hk, 1500, "b"), 1);
    /* Third window: the first window's touches are gone, the second's remain. */
    hotkeys_touch(&hk, "c", 1, 0, 2100);
    ck_assert_uint_eq(count_of(&hk, 2100, "a"), 3);
    ck_assert_uint_eq(count_of(&hk, 2100, "b"), 0);
    /* Two windows of silence: everything is forgotten, even without touches (snapshot rotates). */
    ck_assert_uint_eq(count_of(&hk, 4000, "a"), 0);
    ck_assert_uint_eq(count_of(&hk, 4000, "c"), 0);
    static struct hotkeys_snapshot snap;
    hotkeys_snapshot(&hk, 4000, &snap);
    ck_assert_uint_eq(snap.n, 0);
    ck_assert_uint_eq(snap.floor, 0);
    /* And it starts again cleanly. */
    hotkeys_touch(&hk, "a", 1, 0, 4100);
    ck_assert_uint_eq(count_of(&hk, 4100, "a"), 1);
}
END_TEST

/* hotkeys_touch_n counts as n touches: the same counts and a consistent order, for a new
 * key, a known one, and a long (cut) one. */
START_TEST(test_touch_n_is_n_touches)
{
    static struct hotkeys a, b;
    char longkey[HOTKEYS_KEY_MAX + 40];
    memset(longkey, 'x', sizeof(longkey));
    hotkeys_init(&a, 1000, 0);
    hotkeys_init(&b, 1000, 0);
    const uint32_t n[] = { 1, 16, 3, 16, 7 };
    const char *keys[] = { "hot", "warm", "hot", "other", "warm" };
    for (int i = 0; i < 5; i++) {
        hotkeys_touch_n(&a, keys[i], strlen(keys[i]), 0, 100, n[i]);
        for (uint32_t j = 0; j < n[i]; j++)
            hotkeys_touch(&b, keys[i], strlen(keys[i]), 0, 100);
        ck_assert_int_eq(hotkeys_verify(&a), 0);
    }
    hotkeys_touch_n(&a, longkey, sizeof(longkey), 9, 100, 5);
    for (int j = 0; j < 5; j++)
        hotkeys_touch(&b, longkey, sizeof(longkey), 9, 100);
    ck_assert_int_eq(hotkeys_verify(&a), 0);
    ck_assert_uint_eq(count_of(&a, 200, "hot"), 4);
    ck_assert_uint_eq(count_of(&a, 200, "warm"), 23);
    ck_assert_uint_eq(count_of(&a, 200, "other"), 16);
    ck_assert_uint_eq(count_of(&a, 200, "hot"), count_of(&b, 200, "hot"));
    ck_assert_uint_eq(count_of(&a, 200, "warm"), count_of(&b, 200, "warm"));
    ck_assert_uint_eq(count_of(&a, 200, "other"), count_of(&b, 200, "other"));
}
END_TEST

/* A hot key of the last window stays on top after the stream moves on to other keys. */
START_TEST(test_window_hot_key_replaced_by_new_hot_key)
{
    static struct hotkeys hk;
    static struct hotkeys_snapshot snap;
    char k[32];
    hotkeys_init(&hk, 1000, 0);
    for (int i = 0; i < 2000; i++) {
        hotkeys_touch(&hk, "old-hot", 7, 0, (uint64_t)i / 4);
        int len = snprintf(k, sizeof(k), "noise%d", i);
        hotkeys_touch(&hk, k, (size_t)len, 0, (uint64_t)i / 4);
    }
    for (int i = 0; i < 4000; i++) {
        hotkeys_touch(&hk, "new-hot", 7, 0, 2000 + (uint64_t)i / 4);
        int len = snprintf(k, sizeof(k), "noise%d", 5000 + i);
        hotkeys_touch(&hk, k, (size_t)len, 0, 2000 + (uint64_t)i / 4);
    }
    hotkeys_snapshot(&hk, 2999, &snap);
    const struct hotkeys_snapshot *p[1] = { &snap };
    struct hotkeys_entry top[2];
    ck_assert_int_eq(hotkeys_merge(p, 1, top, 2), 2);
    ck_assert_int_eq(memcmp(top[0].key, "new-hot", 7), 0);
    ck_assert_uint_ge(top[0].count, 4000);
    ck_assert_ptr_null(find(snap.e, snap.n, "old-hot", 7));   /* two windows old */
}
END_TEST

START_TEST(test_long_and_binary_keys)
{
    static struct hotkeys hk;
    static struct hotkeys_snapshot snap;
    char a[300], b[300];
    memset(a, 'x', sizeof(a));
    memcpy(b, a, sizeof(b));
    b[250] = 'y';                              /* differs only after the first 128 bytes */
    hotkeys_init(&hk, 1000, 0);
    hotkeys_touch(&hk, a, sizeof(a), 0, 1);
    hotkeys_touch(&hk, b, sizeof(b), 0, 1);
    const char bin[] = { 0, (char)0xff, '\n', '"', 0 };
    hotkeys_touch(&hk, bin, sizeof(bin), 0, 1);
    hotkeys_touch(&hk, bin, sizeof(bin) - 1, 0, 1);   /* a prefix is another key */
    hotkeys_touch(&hk, "", 0, 0, 1);
    hotkeys_snapshot(&hk, 1, &snap);
    ck_assert_uint_eq(snap.n, 4);
    const struct hotkeys_entry *e = find(snap.e, snap.n, a, HOTKEYS_KEY_MAX);
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(e->count, 2);
    ck_assert_uint_eq(find(snap.e, snap.n, bin, sizeof(bin))->count, 1);
    ck_assert_uint_eq(find(snap.e, snap.n, bin, sizeof(bin) - 1)->count, 1);
    ck_assert_uint_eq(find(snap.e, snap.n, "", 0)->count, 1);
}
END_TEST

/* A key past HOTKEYS_KEY_MAX bytes keeps the placement hash it was touched with: the reader
 * names its owner from that, not from the prefix held (issue 22, item 9). Cut keys sharing
 * the prefix are one key only when they route alike, in one sketch and in a merge. */
START_TEST(test_cut_keys_keep_their_placement)
{
    static struct hotkeys hk[2];
    static struct hotkeys_snapshot snap[2];
    struct hotkeys_entry top[8];
    char a[200], b[200], whole[HOTKEYS_KEY_MAX];
    memset(a, 'k', sizeof(a));
    memcpy(b, a, sizeof(b));
    b[199] = 'z';                              /* same first 128 bytes, another key */
    memcpy(whole, a, sizeof(whole));           /* exactly those 128 bytes: a whole key */
    for (int w = 0; w < 2; w++) {
        hotkeys_init(&hk[w], 1000, 0);
        for (int i = 0; i < 3; i++)
            hotkeys_touch(&hk[w], a, sizeof(a), 0xa11ce, 1);
        hotkeys_touch(&hk[w], b, sizeof(b), 0xb0b, 1);
        hotkeys_touch(&hk[w], whole, sizeof(whole), 0xa11ce, 1);
        ck_assert_int_eq(hotkeys_verify(&hk[w]), 0);
        hotkeys_snapshot(&hk[w], 1, &snap[w]);
        ck_assert_uint_eq(snap[w].n, 3);
    }
    const struct hotkeys_snapshot *p[2] = { &snap[0], &snap[1] };
    ck_assert_int_eq(hotkeys_merge(p, 2, top, 8), 3);
    ck_assert_uint_eq(top[0].count, 6);        /* a, from both workers */
    ck_assert(top[0].cut);
    ck_assert_uint_eq(top[0].len, HOTKEYS_KEY_MAX);
    ck_assert_uint_eq(top[0].place, 0xa11ce);
    ck_assert_int_eq(memcmp(top[0].key, a, HOTKEYS_KEY_MAX), 0);
    /* count 2 each: the whole key first (a cut key sorts after the whole one it starts with) */
    ck_assert(!top[1].cut && top[1].count == 2 && top[1].len == HOTKEYS_KEY_MAX);
    ck_assert(top[2].cut && top[2].count == 2 && top[2].place == 0xb0b);
    ck_assert(!hotkeys_spilled(&hk[0], b, sizeof(b), 0xb0b));
}
END_TEST

/* Heavy churn through evictions keeps the index consistent: every monitored key is found
 * again (its count grows instead of a second counter appearing) and the counts add up. */
START_TEST(test_eviction_churn_keeps_index_consistent)
{
    static struct hotkeys hk;
    static struct hotkeys_snapshot snap;
    char k[32];
    rng_state = 99;
    hotkeys_init(&hk, 1000000, 0);
    for (int i = 0; i < 200000; i++) {
        int len = snprintf(k, sizeof(k), "k%lu", (unsigned long)(rng() % 300));
        hotkeys_touch(&hk, k, (size_t)len, 0, 1);
        if (i % 97 == 0 || i < 200)
            ck_assert_int_eq(hotkeys_verify(&hk), 0);
    }
    ck_assert_int_eq(hotkeys_verify(&hk), 0);
    hotkeys_snapshot(&hk, 1, &snap);
    ck_assert_uint_eq(snap.n, HOTKEYS_CAPACITY);
    uint64_t sum = 0, least = UINT64_MAX;
    for (size_t i = 0; i < snap.n; i++) {
        sum += snap.e[i].count;
        if (snap.e[i].count < least)
            least = snap.e[i].count;
        for (size_t j = i + 1; j < snap.n; j++)
            ck_assert(!(snap.e[i].len == snap.e[j].len &&
                        memcmp(snap.e[i].key, snap.e[j].key, snap.e[i].len) == 0));
        ck_assert_uint_le(snap.e[i].error, snap.e[i].count);
    }
    ck_assert_uint_eq(sum, 200000);
    ck_assert_uint_eq(snap.floor, least);   /* the floor is the least monitored count */
}
END_TEST

/* Keys crowded into one index group overflow into their second group and, when that is
 * full too, into the spill list; every path keeps finding them, and eviction empties it. */
START_TEST(test_crowded_groups_spill_and_stay_found)
{
    static struct hotkeys hk;
    static struct hotkeys_snapshot snap;
    char keys[40][24];
    size_t lens[40];
    unsigned na = 0, nb = 0, nboth = 0;     /* 8 of first group 0, 8 of first group 5, 4 of (0, 5) */
    unsigned a, b;

    for (unsigned long i = 0; i < 4000000 && (na < 8 || nb < 8 || nboth < 4); i++) {
        char k[24];
        size_t len = (size_t)snprintf(k, sizeof(k), "crowd:%lu", i);
        hotkeys_key_groups(k, len, 0, &a, &b);
        unsigned slot;
        if (a == 0 && b == 5 && nboth < 4)
            slot = 16 + nboth++;
        else if (a == 0 && b != 5 && na < 8)
            slot = na++;
        else if (a == 5 && nb < 8)
            slot = 8 + nb++;
        else
            continue;
        memcpy(keys[slot], k, len);
        lens[slot] = len;
    }
    ck_assert_uint_eq(na, 8);
    ck_assert_uint_eq(nb, 8);
    ck_assert_uint_eq(nboth, 4);

    hotkeys_init(&hk, 1000000, 0);
    for (unsigned round = 1; round <= 3; round++)
        for (unsigned i = 0; i < 20; i++) {
            hotkeys_touch(&hk, keys[i], lens[i], 0, 1);
            ck_assert_int_eq(hotkeys_verify(&hk), 0);
        }
    /* Groups 0 and 5 hold eight keys each, so the last four went to the spill list. */
    for (unsigned i = 16; i < 20; i++)
        ck_assert(hotkeys_spilled(&hk, keys[i], lens[i], 0));
    hotkeys_snapshot(&hk, 1, &snap);
    ck_assert_uint_eq(snap.n, 20);
    for (unsigned i = 0; i < 20; i++) {
        const struct hotkeys_entry *e = find(snap.e, snap.n, keys[i], lens[i]);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->count, 3);     /* found again each round: no second counter */
        ck_assert_uint_eq(e->error, 0);
    }
    /* Churn through other keys until the crowd is evicted: the index drains cleanly. */
    char k[32];
    for (int i = 0; i < 20000; i++) {
        int len = snprintf(k, sizeof(k), "other:%d", i % 500);
        hotkeys_touch(&hk, k, (size_t)len, 0, 1);
        if (i % 101 == 0)
            ck_assert_int_eq(hotkeys_verify(&hk), 0);
    }
    ck_assert_int_eq(hotkeys_verify(&hk), 0);
    for (unsigned i = 16; i < 20; i++)
        ck_assert(!hotkeys_spilled(&hk, keys[i], lens[i], 0));
}
END_TEST

/* Not a pass/fail test: prints the cost of a touch on a skewed stream. */
START_TEST(bench_touch)
{
    enum { KEYS = 100000, N = 2000000 };
    struct zipf z;
    rng_state = 4242;
    zipf_init(&z, KEYS, 0.99);
    char (*names)[40] = malloc(KEYS * sizeof(*names));
    uint8_t *lens = malloc(KEYS);
    uint32_t *seq = malloc(N * sizeof(*seq));
    static struct hotkeys hk;
    ck_assert(names && lens && seq);
    for (size_t r = 0; r < KEYS; r++)
        lens[r] = (uint8_t)snprintf(names[r], sizeof(names[r]), "session:%lu:cart", (unsigned long)r * 7919);
    for (size_t i = 0; i < N; i++)
        seq[i] = (uint32_t)zipf_next(&z);
    hotkeys_init(&hk, 10000, 0);
    struct timespec t0, t1, t2;
    /* Baseline: the same walk over the keys without the sketch (their cache misses). */
    volatile unsigned sink = 0;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    for (size_t i = 0; i < N; i++)
        sink += (unsigned char)names[seq[i]][lens[seq[i]] - 1];
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    (void)sink;
    for (size_t i = 0; i < N; i++)
        hotkeys_touch(&hk, names[seq[i]], lens[seq[i]], 0, i / 1000);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t2);
    double base = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / N;
    double ns = ((double)(t2.tv_sec - t1.tv_sec) * 1e9 + (double)(t2.tv_nsec - t1.tv_nsec)) / N;
    fprintf(stderr, "hotkeys_touch: %.1f ns/touch, %.1f ns above reading the key "
            "(Zipf 0.99 over %d keys, ~20-byte keys)\n", ns, ns - base, KEYS);
    free(z.cdf);
    free(names);
    free(lens);
    free(seq);
}
END_TEST

static Suite *hotkeys_suite(void)
{
    Suite *s = suite_create("hotkeys");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_zipf_stream_finds_true_top_keys);
    tcase_add_test(tc, test_crowded_groups_spill_and_stay_found);
    tcase_add_test(tc, test_merge_of_workers_finds_true_top_keys);
    tcase_add_test(tc, test_window_keeps_previous_generation_then_forgets);
    tcase_add_test(tc, test_window_hot_key_replaced_by_new_hot_key);
    tcase_add_test(tc, test_long_and_binary_keys);
    tcase_add_test(tc, test_cut_keys_keep_their_placement);
    tcase_add_test(tc, test_eviction_churn_keeps_index_consistent);
    tcase_add_test(tc, test_touch_n_is_n_touches);
    tcase_add_test(tc, bench_touch);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(hotkeys_suite)
