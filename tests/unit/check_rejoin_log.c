/* Unit tests for the rejoin log (the bounded shared key set) and its journal. */
#include "config.h"

#include "check_main.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "state/health.h"
#include "state/rejoin_journal.h"
#include "state/rejoin_log.h"

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

/* The header line of a journal, as rejoin_journal_open writes it. */
#define JOURNAL_HEADER REJOIN_JOURNAL_MAGIC "\t1\n"

/* The whole file at path (a static buffer, NUL-terminated; its length in *len). */
static const char *read_file(const char *path, size_t *len)
{
    static char text[1 << 16];
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    size_t n = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    text[n] = '\0';
    if (len != NULL)
        *len = n;
    return text;
}

/* A scratch file holding text[0..len); its path in path (mkstemp's template). */
static void write_file(char *path, const char *text, size_t len)
{
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
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
    /* the header stays: the file still says it is a journal */
    ck_assert_str_eq(read_file(path, NULL), JOURNAL_HEADER);
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

/* Issue 22 item 7: rejoin_log naming a file that is not a journal (a mistyped path to
 * the configuration) truncated it 100 ms after start. It is refused now, byte for byte
 * as it was. */
START_TEST(test_journal_refuses_what_is_not_one)
{
    static const struct { const char *text; size_t len; const char *why; } files[] = {
        { "pools:\n  p:\n    listen: 127.0.0.1:22121\n    servers:\n    - 127.0.0.1:11211:1\n",
          0, "not a rejoin journal" },
        { "K\tno newline: one line, not a journal", 0, "not a rejoin journal" },
        { "\x7f" "ELF\x02\x01\x01\0\0\0\n\0\xff", 14, "not a rejoin journal" },
        /* a record, then something that is not one */
        { "C\tp\ta\t127.0.0.1:1\nhello\n", 0, "not a rejoin journal" },
        { REJOIN_JOURNAL_MAGIC "\t2\nK\tp\ta\tx\t1\t-\t-\tYQ==\n", 0, "another format" },
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char path[] = "/tmp/check_rejoin_XXXXXX";
        size_t len = files[i].len ? files[i].len : strlen(files[i].text);
        write_file(path, files[i].text, len);
        char err[512] = "";
        ck_assert_int_eq(rejoin_journal_check(path, err, sizeof(err)), -1);
        ck_assert_ptr_nonnull(strstr(err, path));
        ck_assert_ptr_nonnull(strstr(err, files[i].why));
        err[0] = '\0';
        ck_assert_ptr_null(rejoin_journal_open(path, err, sizeof(err)));
        ck_assert_ptr_nonnull(strstr(err, path));
        ck_assert_ptr_nonnull(strstr(err, files[i].why));
        size_t got;
        const char *now = read_file(path, &got);
        ck_assert_uint_eq(got, len);
        ck_assert_int_eq(memcmp(now, files[i].text, len), 0);
        unlink(path);
    }
    /* not a regular file */
    char err[512] = "";
    ck_assert_ptr_null(rejoin_journal_open("/tmp", err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "/tmp"));
    /* no file yet, an empty one, a journal: fine */
    ck_assert_int_eq(rejoin_journal_check("/tmp/check_rejoin_does_not_exist", err, sizeof(err)), 0);
    char path[] = "/tmp/check_rejoin_XXXXXX";
    write_file(path, "", 0);
    ck_assert_int_eq(rejoin_journal_check(path, err, sizeof(err)), 0);
    struct rejoin_journal *j = rejoin_journal_open(path, err, sizeof(err));
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(read_file(path, NULL), JOURNAL_HEADER);   /* adopted: the header first */
    ck_assert_int_eq(rejoin_journal_check(path, err, sizeof(err)), 0);
    rejoin_journal_close(j);
    ck_assert_str_eq(read_file(path, NULL), JOURNAL_HEADER);   /* nothing pending: kept */
    unlink(path);
    /* the header cut short (a crash as it was written): written again */
    char cut[] = "/tmp/check_rejoin_XXXXXX";
    write_file(cut, REJOIN_JOURNAL_MAGIC "\t", strlen(REJOIN_JOURNAL_MAGIC) + 1);
    j = rejoin_journal_open(cut, err, sizeof(err));
    ck_assert_ptr_nonnull(j);
    rejoin_journal_close(j);
    ck_assert_str_eq(read_file(cut, NULL), JOURNAL_HEADER);
    unlink(cut);
}
END_TEST

/* A journal of the version before the header (records only, a last one cut short by a
 * crash) is read and rewritten with the header, its records kept. */
START_TEST(test_journal_upgrades_the_format_before_the_header)
{
    static const char old[] =
        "K\tp\ta\t127.0.0.1:1\t3\tb\t127.0.0.1:2\tYQ==\n"
        "K\tp\ta\t127.0.0.1:1\t1\t-\t-\t\n"
        "K\tp\tc\t127.0.0.1:3\t1\t-\t-\tYmM=\n"
        "C\tp\tc\t127.0.0.1:3\n"
        "O\tp\td\t127.0.0.1:4\n"
        "K\tp\ta\t127.0.0.1:1\t1\t-\t-\tcGF";
    char path[] = "/tmp/check_rejoin_XXXXXX";
    write_file(path, old, sizeof(old) - 1);
    char err[512] = "";
    ck_assert_int_eq(rejoin_journal_check(path, err, sizeof(err)), 0);
    struct rejoin_journal *j = rejoin_journal_open(path, err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_uint_eq(rejoin_journal_pending(j), 3);    /* a's two keys, d's overflow */
    const char *now = read_file(path, NULL);
    ck_assert_int_eq(strncmp(now, JOURNAL_HEADER, strlen(JOURNAL_HEADER)), 0);
    const char *cut = strrchr(old, '\n') + 1;
    ck_assert_uint_eq(strlen(now), strlen(JOURNAL_HEADER) + (size_t)(cut - old));
    ck_assert_int_eq(memcmp(now + strlen(JOURNAL_HEADER), old, (size_t)(cut - old)), 0);
    struct collected c = { 0 };
    ck_assert_int_eq(rejoin_journal_replay(j, "p\ta\t127.0.0.1:1", collect, &c), 0);
    ck_assert_int_eq(c.n, 2);
    ck_assert_uint_eq(c.lens[0], 1);
    ck_assert_str_eq(c.also[0], "p\tb\t127.0.0.1:2");
    ck_assert_uint_eq(c.lens[1], 0);
    ck_assert_int_eq(rejoin_journal_replay(j, "p\td\t127.0.0.1:4", collect, &c), 1);
    rejoin_journal_close(j);
    /* read again: the same records, now as a journal with its header */
    j = rejoin_journal_open(path, err, sizeof(err));
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(rejoin_journal_pending(j), 3);
    rejoin_journal_close(j);
    unlink(path);
}
END_TEST

struct forgotten {
    int    n;
    char   ident[64];
    size_t keys;
    int    overflowed;
};

static void note_forgotten(void *arg, const char *ident, size_t keys, int overflowed)
{
    struct forgotten *f = arg;
    f->n++;
    snprintf(f->ident, sizeof(f->ident), "%s", ident);
    f->keys = keys;
    f->overflowed = overflowed;
}

/* Issue 22 item 7: records of a server no longer configured kept the journal from ever
 * being emptied. They are forgotten once every configured server is attached. */
START_TEST(test_journal_forgets_unconfigured_servers)
{
    static const char text[] = JOURNAL_HEADER
        "K\tp\ta\tx\t1\t-\t-\tYQ==\n"
        "K\tp\tgone\ty\t1\t-\t-\tYg==\n"
        "K\tp\tgone\ty\t1\t-\t-\tYw==\n"
        "O\tp\tgone\ty\n";
    char path[] = "/tmp/check_rejoin_XXXXXX";
    write_file(path, text, sizeof(text) - 1);
    char err[512];
    struct rejoin_journal *j = rejoin_journal_open(path, err, sizeof(err));
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(rejoin_journal_pending(j), 4);
    /* server a is configured: attached, its key replayed into its log */
    struct health *h = health_new(HEALTH_DOWN);
    struct rejoin_log *l = rejoin_log_new(h, "p\ta\tx", j);
    struct collected c = { 0 };
    ck_assert_int_eq(rejoin_journal_replay(j, "p\ta\tx", collect, &c), 0);
    l->journalled = (uint64_t)c.n;
    struct forgotten f = { 0 };
    ck_assert_uint_eq(rejoin_journal_forget(j, note_forgotten, &f), 1);
    ck_assert_int_eq(f.n, 1);
    ck_assert_str_eq(f.ident, "p\tgone\ty");
    ck_assert_uint_eq(f.keys, 2);
    ck_assert_int_eq(f.overflowed, 1);
    ck_assert_uint_eq(rejoin_journal_pending(j), 1);
    ck_assert_uint_eq(rejoin_journal_forget(j, note_forgotten, &f), 0);   /* once */
    /* a rejoins: nothing is pending, and the file is its header again */
    atomic_store(&h->state, HEALTH_REJOINING);
    struct rejoin_set rest;
    ck_assert_int_eq(rejoin_log_finish(l, &rest, 1, 1), 1);
    rejoin_set_free(&rest);
    ck_assert_uint_eq(rejoin_journal_pending(j), 0);
    ck_assert_int_eq(rejoin_journal_sync(j), 0);
    ck_assert_str_eq(read_file(path, NULL), JOURNAL_HEADER);
    rejoin_journal_close(j);

    /* a log whose server a reload removed: forgotten, its records cleared */
    j = rejoin_journal_open(path, err, sizeof(err));
    l->journal = j;
    atomic_store(&h->state, HEALTH_DOWN);
    ck_assert_int_eq(rejoin_log_add(l, "k", 1, NULL, REJOIN_E_OWNER, 10), REJOIN_ADDED);
    ck_assert_uint_eq(rejoin_journal_pending(j), 1);
    int over = -1;
    ck_assert_int_eq(rejoin_log_forget(l, &over), 1);
    ck_assert_int_eq(over, 0);
    ck_assert_int_eq(rejoin_log_forget(l, &over), -1);     /* nothing left */
    ck_assert_uint_eq(rejoin_journal_pending(j), 0);
    ck_assert_int_eq(rejoin_journal_sync(j), 0);
    ck_assert_str_eq(read_file(path, NULL), JOURNAL_HEADER);
    rejoin_journal_close(j);
    rejoin_log_free(l);
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

static Suite *rejoin_log_suite(void)
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
    tcase_add_test(tc, test_journal_refuses_what_is_not_one);
    tcase_add_test(tc, test_journal_upgrades_the_format_before_the_header);
    tcase_add_test(tc, test_journal_forgets_unconfigured_servers);
    tcase_add_test(tc, test_journal_open_reports_a_missing_directory);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(rejoin_log_suite)
