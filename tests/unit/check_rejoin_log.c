/* Unit tests for the rejoin log (the bounded shared key set) and its journal. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "health.h"
#include "rejoin_journal.h"
#include "rejoin_log.h"

static struct health *health_new(int state)
{
    struct health *h = calloc(1, sizeof(*h));
    atomic_store(&h->state, state);
    return h;
}

static int set_has(const struct rejoin_set *s, const char *key, struct health *also,
                   unsigned flags)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->e[i].len == strlen(key) && memcmp(s->keys + s->e[i].off, key, s->e[i].len) == 0 &&
            s->e[i].also == also && s->e[i].flags == flags)
            return 1;
    return 0;
}

START_TEST(test_add_dedups_by_key_and_server)
{
    struct health *h = health_new(HEALTH_DOWN), *f1 = health_new(HEALTH_UP),
                  *f2 = health_new(HEALTH_UP);
    struct rejoin_log *l = rejoin_log_new(h, "p\ta\t127.0.0.1:1", NULL);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(rejoin_log_add(l, "k1", 2, f1, REJOIN_E_OWNER | REJOIN_E_ALSO, 10), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_add(l, "k1", 2, f1, REJOIN_E_OWNER | REJOIN_E_ALSO, 10), REJOIN_MERGED);
    ck_assert_int_eq(rejoin_log_add(l, "k1", 2, f2, REJOIN_E_ALSO, 10), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_add(l, "k2", 2, NULL, REJOIN_E_OWNER, 10), REJOIN_ADDED);
    /* flags of a repeated key are OR'ed */
    ck_assert_int_eq(rejoin_log_add(l, "k3", 2, f1, REJOIN_E_ALSO, 10), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_add(l, "k3", 2, f1, REJOIN_E_OWNER, 10), REJOIN_MERGED);
    uint32_t keys;
    uint64_t bytes;
    rejoin_log_size(l, &keys, &bytes);
    ck_assert_uint_eq(keys, 4);
    ck_assert_uint_eq(bytes, 8);
    struct rejoin_set s;
    ck_assert_int_eq(rejoin_log_take(l, &s), 0);
    ck_assert_uint_eq(s.n, 4);
    ck_assert(set_has(&s, "k1", f1, REJOIN_E_OWNER | REJOIN_E_ALSO));
    ck_assert(set_has(&s, "k1", f2, REJOIN_E_ALSO));
    ck_assert(set_has(&s, "k2", NULL, REJOIN_E_OWNER));
    ck_assert(set_has(&s, "k3", f1, REJOIN_E_OWNER | REJOIN_E_ALSO));
    ck_assert(rejoin_set_has_owner(&s));
    rejoin_log_size(l, &keys, &bytes);
    ck_assert_uint_eq(keys, 0);     /* taken: the log is empty */
    rejoin_set_free(&s);
    rejoin_log_free(l);
    free(h);
    free(f1);
    free(f2);
}
END_TEST

START_TEST(test_many_keys_grow_the_index)
{
    struct health *h = health_new(HEALTH_DOWN);
    struct rejoin_log *l = rejoin_log_new(h, "p\ta\tx", NULL);
    char key[32];
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(key, sizeof(key), "key:%d", i);
        ck_assert_int_eq(rejoin_log_add(l, key, (size_t)n, NULL, REJOIN_E_OWNER, 100000),
                         REJOIN_ADDED);
    }
    for (int i = 0; i < 5000; i += 7) {
        int n = snprintf(key, sizeof(key), "key:%d", i);
        ck_assert_int_eq(rejoin_log_add(l, key, (size_t)n, NULL, REJOIN_E_OWNER, 100000),
                         REJOIN_MERGED);
    }
    uint32_t keys;
    uint64_t bytes;
    rejoin_log_size(l, &keys, &bytes);
    ck_assert_uint_eq(keys, 5000);
    rejoin_log_free(l);
    free(h);
}
END_TEST

START_TEST(test_bound_overflows_and_flags_the_log)
{
    struct health *h = health_new(HEALTH_DOWN);
    struct rejoin_log *l = rejoin_log_new(h, "p\ta\tx", NULL);
    ck_assert_int_eq(rejoin_log_add(l, "a", 1, NULL, REJOIN_E_OWNER, 2), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_add(l, "b", 1, NULL, REJOIN_E_OWNER, 2), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_add(l, "c", 1, NULL, REJOIN_E_OWNER, 2), REJOIN_OVERFLOW);
    /* a key longer than REJOIN_KEY_MAX is never kept */
    char big[REJOIN_KEY_MAX + 1];
    memset(big, 'x', sizeof(big));
    ck_assert_int_eq(rejoin_log_add(l, big, sizeof(big), NULL, REJOIN_E_OWNER, 1000),
                     REJOIN_OVERFLOW);
    struct rejoin_set s;
    ck_assert_int_eq(rejoin_log_take(l, &s), 1);    /* overflowed: the rejoin flushes */
    ck_assert_uint_eq(s.n, 2);
    rejoin_set_free(&s);
    ck_assert_int_eq(rejoin_log_take(l, &s), 0);    /* the flag went with the take */
    rejoin_set_free(&s);
    /* zero keys remembered: every write overflows (rejoin_log_keys: 0 always flushes) */
    ck_assert_int_eq(rejoin_log_add(l, "a", 1, NULL, REJOIN_E_OWNER, 0), REJOIN_OVERFLOW);
    rejoin_log_free(l);
    free(h);
}
END_TEST

START_TEST(test_up_server_refuses_and_finish_is_atomic)
{
    struct health *h = health_new(HEALTH_UP), *f = health_new(HEALTH_UP);
    struct rejoin_log *l = rejoin_log_new(h, "p\ta\tx", NULL);
    /* routed while down, remembered once up: route again */
    ck_assert_int_eq(rejoin_log_add(l, "k", 1, NULL, REJOIN_E_OWNER, 10), REJOIN_IS_UP);
    atomic_store(&h->state, HEALTH_REJOINING);
    ck_assert_int_eq(rejoin_log_add(l, "k", 1, f, REJOIN_E_OWNER | REJOIN_E_ALSO, 10), REJOIN_ADDED);
    struct rejoin_set rest;
    /* an entry for the server itself: not up yet */
    ck_assert_int_eq(rejoin_log_finish(l, &rest, 0, 1), 0);
    ck_assert_int_eq(health_state(h), HEALTH_REJOINING);
    struct rejoin_set s;
    rejoin_log_take(l, &s);
    /* only a copy on the failover server left: up, and the copy handed over */
    ck_assert_int_eq(rejoin_log_add(l, "j", 1, f, REJOIN_E_ALSO, 10), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_finish(l, &rest, 0, 1), 1);
    ck_assert_int_eq(health_state(h), HEALTH_UP);
    ck_assert_uint_eq(rest.n, 1);
    ck_assert(set_has(&rest, "j", f, REJOIN_E_ALSO));
    rejoin_set_free(&rest);
    ck_assert_int_eq(rejoin_log_add(l, "j", 1, f, REJOIN_E_ALSO, 10), REJOIN_IS_UP);
    /* a failed round puts its entries back, and its overflow */
    atomic_store(&h->state, HEALTH_DOWN);
    rejoin_log_restore(l, &s, 10, 1);
    rejoin_set_free(&s);
    ck_assert_int_eq(rejoin_log_take(l, &s), 1);
    ck_assert(set_has(&s, "k", f, REJOIN_E_OWNER | REJOIN_E_ALSO));
    rejoin_set_free(&s);
    /* after a flush entries for the server itself are moot */
    atomic_store(&h->state, HEALTH_REJOINING);
    ck_assert_int_eq(rejoin_log_add(l, "z", 1, NULL, REJOIN_E_OWNER, 10), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_finish(l, &rest, 1, 1), 1);
    ck_assert_uint_eq(rest.n, 1);
    rejoin_set_free(&rest);
    rejoin_log_free(l);
    free(h);
    free(f);
}
END_TEST

struct collected {
    int n;
    char keys[8][64];
    size_t lens[8];
    char also[8][64];
    unsigned flags[8];
};

static void collect(void *arg, const char *key, size_t len, const char *also, unsigned flags)
{
    struct collected *c = arg;
    if (c->n >= 8)
        return;
    memcpy(c->keys[c->n], key, len);
    c->lens[c->n] = len;
    snprintf(c->also[c->n], sizeof(c->also[0]), "%s", also ? also : "-");
    c->flags[c->n] = flags;
    c->n++;
}

static void add_to_set(void *arg, const char *key, size_t len, const char *also, unsigned flags)
{
    (void)also;
    ck_assert_int_ge(rejoin_set_add(arg, XXH3_64bits(key, len), key, len, NULL, flags), 0);
}

START_TEST(test_journal_round_trip)
{
    char path[] = "/tmp/check_rejoin_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[256];
    struct rejoin_journal *j = rejoin_journal_open(path, err, sizeof(err));
    ck_assert_ptr_nonnull(j);
    struct health *h = health_new(HEALTH_DOWN), *f = health_new(HEALTH_UP),
                  *g = health_new(HEALTH_DOWN);
    struct rejoin_log *lf = rejoin_log_new(f, "p\tb\t127.0.0.1:2", j);
    f->rejoin = lf;
    struct rejoin_log *l = rejoin_log_new(h, "p\ta\t127.0.0.1:1", j);
    struct rejoin_log *lg = rejoin_log_new(g, "p\tc\t127.0.0.1:3", j);
    /* a binary key, a key with tabs and newlines: base64 in the file */
    ck_assert_int_eq(rejoin_log_add(l, "a\tb\nc\0d", 7, f, REJOIN_E_OWNER | REJOIN_E_ALSO, 10),
                     REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_add(l, "plain", 5, NULL, REJOIN_E_OWNER, 10), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_add(lg, "gone", 4, NULL, REJOIN_E_OWNER, 10), REJOIN_ADDED);
    ck_assert_uint_eq(rejoin_journal_pending(j), 3);
    /* g rejoins: its record is cleared */
    atomic_store(&g->state, HEALTH_REJOINING);
    struct rejoin_set s, rest;
    rejoin_log_take(lg, &s);
    rejoin_set_free(&s);
    ck_assert_int_eq(rejoin_log_finish(lg, &rest, 0, 1), 1);
    rejoin_set_free(&rest);
    ck_assert_uint_eq(rejoin_journal_pending(j), 2);
    ck_assert_int_eq(rejoin_journal_sync(j), 0);
    rejoin_journal_close(j);
    /* a crash mid-line leaves a partial record: ignored */
    FILE *fp = fopen(path, "a");
    fputs("K\tp\ta\t127.0.0.1:1\t1\t-\t-\tcGFy", fp);
    fclose(fp);

    j = rejoin_journal_open(path, err, sizeof(err));
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(rejoin_journal_pending(j), 2);
    struct collected c = { 0 };
    ck_assert_int_eq(rejoin_journal_replay(j, "p\ta\t127.0.0.1:1", collect, &c), 0);
    ck_assert_int_eq(c.n, 2);
    ck_assert_uint_eq(c.lens[0], 7);
    ck_assert_int_eq(memcmp(c.keys[0], "a\tb\nc\0d", 7), 0);
    ck_assert_str_eq(c.also[0], "p\tb\t127.0.0.1:2");
    ck_assert_uint_eq(c.flags[0], REJOIN_E_OWNER | REJOIN_E_ALSO);
    ck_assert_uint_eq(c.lens[1], 5);
    ck_assert_str_eq(c.also[1], "-");
    /* the cleared server has nothing, and a replayed one nothing more */
    ck_assert_int_eq(rejoin_journal_replay(j, "p\tc\t127.0.0.1:3", collect, &c), -1);
    ck_assert_int_eq(rejoin_journal_replay(j, "p\ta\t127.0.0.1:1", collect, &c), -1);
    rejoin_journal_close(j);
    rejoin_log_free(l);
    rejoin_log_free(lf);
    rejoin_log_free(lg);
    free(h);
    free(f);
    free(g);
    unlink(path);
}
END_TEST

START_TEST(test_journal_overflow_and_truncate)
{
    char path[] = "/tmp/check_rejoin_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    char err[256];
    struct rejoin_journal *j = rejoin_journal_open(path, err, sizeof(err));
    struct health *h = health_new(HEALTH_DOWN);
    struct rejoin_log *l = rejoin_log_new(h, "p\ta\tx", j);
    ck_assert_int_eq(rejoin_log_add(l, "a", 1, NULL, REJOIN_E_OWNER, 1), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_add(l, "b", 1, NULL, REJOIN_E_OWNER, 1), REJOIN_OVERFLOW);
    ck_assert_int_eq(rejoin_journal_sync(j), 0);
    rejoin_journal_close(j);
    j = rejoin_journal_open(path, err, sizeof(err));
    struct collected c = { 0 };
    ck_assert_int_eq(rejoin_journal_replay(j, "p\ta\tx", collect, &c), 1);  /* overflowed */
    ck_assert_int_eq(c.n, 1);
    rejoin_journal_close(j);
    /* once every server rejoined, the file is emptied */
    j = rejoin_journal_open(path, err, sizeof(err));
    l->journal = j;
    l->journalled = 2;          /* what this log wrote before the restart */
    atomic_store(&h->state, HEALTH_REJOINING);
    struct rejoin_set rest;
    ck_assert_int_eq(rejoin_log_finish(l, &rest, 1, 1), 1);
    rejoin_set_free(&rest);
    ck_assert_uint_eq(rejoin_journal_pending(j), 0);
    ck_assert_int_eq(rejoin_journal_sync(j), 0);
    FILE *fp = fopen(path, "r");
    fseek(fp, 0, SEEK_END);
    ck_assert_int_eq(ftell(fp), 0);
    fclose(fp);
    rejoin_journal_close(j);
    rejoin_log_free(l);
    free(h);
    unlink(path);
}
END_TEST

/* Redis allows the empty key: a log, its set and its journal must take it like any other
 * (a first key of length 0 used to memcpy into the set's NULL key buffer). */
START_TEST(test_empty_key_is_remembered_and_round_trips)
{
    struct health *h = health_new(HEALTH_DOWN);
    struct rejoin_log *l = rejoin_log_new(h, "p\ta\tx", NULL);
    ck_assert_int_eq(rejoin_log_add(l, "", 0, NULL, REJOIN_E_OWNER, 10), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_log_add(l, "", 0, NULL, REJOIN_E_OWNER, 10), REJOIN_MERGED);
    ck_assert_int_eq(rejoin_log_add(l, "k", 1, NULL, REJOIN_E_OWNER, 10), REJOIN_ADDED);
    uint32_t keys;
    uint64_t bytes;
    rejoin_log_size(l, &keys, &bytes);
    ck_assert_uint_eq(keys, 2);
    ck_assert_uint_eq(bytes, 1);
    struct rejoin_set s;
    rejoin_log_take(l, &s);
    ck_assert(set_has(&s, "", NULL, REJOIN_E_OWNER));
    ck_assert(set_has(&s, "k", NULL, REJOIN_E_OWNER));
    /* a failed round puts the empty key back into an empty set */
    rejoin_log_restore(l, &s, 10, 0);
    rejoin_set_free(&s);
    rejoin_log_take(l, &s);
    ck_assert_uint_eq(s.n, 2);
    rejoin_set_free(&s);
    /* a set that only ever held empty keys (the journal's replay adds this way) */
    struct rejoin_set e = { 0 };
    ck_assert_int_eq(rejoin_set_add(&e, 1, NULL, 0, NULL, REJOIN_E_OWNER), 1);
    ck_assert_int_eq(rejoin_set_add(&e, 1, "", 0, NULL, REJOIN_E_OWNER), 0);
    ck_assert_uint_eq(e.n, 1);
    rejoin_set_free(&e);
    rejoin_log_free(l);

    /* through the journal: written, read back, replayed as a key of length 0 */
    char path[] = "/tmp/check_rejoin_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[256];
    struct rejoin_journal *j = rejoin_journal_open(path, err, sizeof(err));
    ck_assert_ptr_nonnull(j);
    l = rejoin_log_new(h, "p\ta\tx", j);
    ck_assert_int_eq(rejoin_log_add(l, "", 0, NULL, REJOIN_E_OWNER, 10), REJOIN_ADDED);
    ck_assert_int_eq(rejoin_journal_sync(j), 0);
    rejoin_journal_close(j);
    rejoin_log_free(l);
    j = rejoin_journal_open(path, err, sizeof(err));
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(rejoin_journal_pending(j), 1);
    struct collected c = { 0 };
    ck_assert_int_eq(rejoin_journal_replay(j, "p\ta\tx", collect, &c), 0);
    ck_assert_int_eq(c.n, 1);
    ck_assert_uint_eq(c.lens[0], 0);
    ck_assert_uint_eq(c.flags[0], REJOIN_E_OWNER);
    rejoin_journal_close(j);
    /* the replay's add into a fresh set, as rejoin_store_attach does it */
    j = rejoin_journal_open(path, err, sizeof(err));
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(rejoin_journal_replay(j, "p\ta\tx", add_to_set, &e), 0);
    ck_assert_uint_eq(e.n, 1);
    ck_assert(set_has(&e, "", NULL, REJOIN_E_OWNER));
    rejoin_set_free(&e);
    rejoin_journal_close(j);
    free(h);
    unlink(path);
}
END_TEST

START_TEST(test_journal_open_reports_a_missing_directory)
{
    char err[256] = "";
    ck_assert_ptr_null(rejoin_journal_open("/nonexistent-dir/rejoin.log", err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent-dir/rejoin.log"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rejoin_log");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_add_dedups_by_key_and_server);
    tcase_add_test(tc, test_many_keys_grow_the_index);
    tcase_add_test(tc, test_bound_overflows_and_flags_the_log);
    tcase_add_test(tc, test_up_server_refuses_and_finish_is_atomic);
    tcase_add_test(tc, test_journal_round_trip);
    tcase_add_test(tc, test_journal_overflow_and_truncate);
    tcase_add_test(tc, test_empty_key_is_remembered_and_round_trips);
    tcase_add_test(tc, test_journal_open_reports_a_missing_directory);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
