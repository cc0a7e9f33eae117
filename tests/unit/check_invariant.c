/* Unit tests for RL_ASSERT (src/lib/invariant.h): a broken invariant aborts where assertions are compiled in, and costs nothing where they are not. */
#include "config.h"

#include "check_main.h"
#include <signal.h>
#include <stdlib.h>

#include "lib/buf.h"
#include "lib/invariant.h"
#include "lib/queue.h"
#include "proto/proto.h"

static int evaluated;

static int side_effect(void)
{
    evaluated++;
    return 0;
}

#if RL_ASSERTS
/* Each of these runs in its own process (Check forks) and must die of SIGABRT. */
START_TEST(test_consume_past_the_end_aborts)
{
    struct buf b;
    buf_init(&b);
    ck_assert_int_eq(buf_append(&b, "abc", 3), 0);
    buf_consume(&b, 4);             /* one byte more than the buffer holds */
}
END_TEST

START_TEST(test_double_insert_aborts)
{
    struct qnode head, n = { NULL, NULL };
    queue_init(&head);
    queue_insert_tail(&head, &n);
    queue_insert_tail(&head, &n);   /* already linked: would corrupt the queue */
}
END_TEST

START_TEST(test_remove_unlinked_aborts)
{
    struct qnode n = { NULL, NULL };
    queue_remove(&n);
}
END_TEST

START_TEST(test_produce_past_room_aborts)
{
    struct buf b;
    buf_init(&b);
    ck_assert_int_eq(buf_reserve(&b, 8), 0);
    buf_produce(&b, buf_room(&b) + 1);  /* would mark a byte past the end as written */
}
END_TEST

START_TEST(test_truncate_past_length_aborts)
{
    struct buf b;
    buf_init(&b);
    ck_assert_int_eq(buf_append(&b, "abcdef", 6), 0);
    buf_consume(&b, 4);
    buf_truncate(&b, 4);                /* 2 unread bytes: would expose 2 consumed ones */
}
END_TEST

START_TEST(test_reserve_sees_wpos_past_cap)
{
    struct buf b;
    buf_init(&b);
    ck_assert_int_eq(buf_append(&b, "abc", 3), 0);
    b.wpos = b.cap + 1;                 /* a raw write that skipped buf_produce */
    (void)buf_reserve(&b, 1);
}
END_TEST

/* The Redis request parser resumes an incomplete request from where it stopped: called
 * again with fewer bytes than it had walked (the buffer consumed or replaced under it),
 * it would read arguments that are no longer there. */
START_TEST(test_parser_resumed_on_fewer_bytes_aborts)
{
    static const char req[] = "*2\r\n$3\r\nGET\r\n$3\r\nfo";
    struct proto_parser p = { .flags = PROTO_PF_AUTHED };
    struct proto_req r;
    ck_assert_int_eq(proto_redis_ops.parse_req(&p, req, sizeof(req) - 1, &r), 0);
    (void)proto_redis_ops.parse_req(&p, req, 4, &r);
}
END_TEST

START_TEST(test_false_condition_aborts)
{
    RL_ASSERT(side_effect() == 1);
}
END_TEST
#else
START_TEST(test_release_does_not_evaluate)
{
    RL_ASSERT(side_effect() == 1);
    ck_assert_int_eq(evaluated, 0);
}
END_TEST
#endif

START_TEST(test_true_conditions_pass)
{
    struct qnode head, n = { NULL, NULL };
    queue_init(&head);
    queue_insert_tail(&head, &n);
    queue_remove(&n);
    ck_assert(queue_empty(&head));
    RL_ASSERT(1 + 1 == 2);
}
END_TEST

static Suite *invariant_suite(void)
{
    Suite *s = suite_create("invariant");
    TCase *tc = tcase_create("core");
#if RL_ASSERTS
    tcase_add_test_raise_signal(tc, test_consume_past_the_end_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_double_insert_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_remove_unlinked_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_produce_past_room_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_truncate_past_length_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_reserve_sees_wpos_past_cap, SIGABRT);
    tcase_add_test_raise_signal(tc, test_parser_resumed_on_fewer_bytes_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_false_condition_aborts, SIGABRT);
#else
    tcase_add_test(tc, test_release_does_not_evaluate);
#endif
    tcase_add_test(tc, test_true_conditions_pass);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(invariant_suite)
