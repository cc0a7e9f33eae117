/* Unit tests for struct buf: growth, compaction, formatted appends. */
#include "config.h"

#include "check_main.h"
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"

START_TEST(test_append_grows_and_keeps_bytes)
{
    struct buf b;
    buf_init(&b);
    char chunk[1000];
    for (size_t i = 0; i < sizeof(chunk); i++)
        chunk[i] = (char)i;
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(buf_append(&b, chunk, sizeof(chunk)), 0);
    ck_assert_uint_eq(buf_len(&b), 100000);
    ck_assert_uint_ge(b.cap, 100000);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(memcmp(b.data + i * 1000, chunk, sizeof(chunk)), 0);
    buf_free(&b);
    ck_assert_ptr_null(b.data);
}
END_TEST

START_TEST(test_reserve_compacts_before_growing)
{
    struct buf b;
    buf_init(&b);
    ck_assert_int_eq(buf_reserve(&b, 10), 0);
    size_t cap = b.cap;
    memset(b.data, 'x', cap);
    b.wpos = cap;
    buf_consume(&b, cap - 10);      /* 10 unread bytes left at the end */
    ck_assert_int_eq(buf_reserve(&b, cap - 20), 0);
    ck_assert_uint_eq(b.cap, cap);   /* compacted, not grown */
    ck_assert_uint_eq(b.rpos, 0);
    ck_assert_uint_eq(buf_len(&b), 10);
    buf_consume(&b, 10);
    ck_assert_uint_eq(b.wpos, 0);    /* empty resets positions */
    buf_free(&b);
}
END_TEST

START_TEST(test_appendf_long_output)
{
    struct buf b;
    buf_init(&b);
    char big[600];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert_int_eq(buf_appendf(&b, "%s-%d", big, 42), 0);
    ck_assert_uint_eq(buf_len(&b), 599 + 3);
    ck_assert_int_eq(memcmp(b.data + 599, "-42", 3), 0);
    buf_free(&b);
}
END_TEST

static Suite *buf_suite(void)
{
    Suite *s = suite_create("buf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_append_grows_and_keeps_bytes);
    tcase_add_test(tc, test_reserve_compacts_before_growing);
    tcase_add_test(tc, test_appendf_long_output);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(buf_suite)
