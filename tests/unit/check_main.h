/*
 * check_main.h - the one runner of every unit program.
 *
 * Each tests/unit/check_<x>.c builds its Suite in a function and ends with CHECK_MAIN(fn):
 * the run, the count of failures and the exit status are written once, here. Check reads
 * CK_TIMEOUT_MULTIPLIER (set by Makefile.am for the sanitizer build) and CK_FORK itself.
 */
#ifndef RL_CHECK_MAIN_H
#define RL_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

/* Runs every test of s (and frees s) with the given fork status; the number that failed. */
static inline int check_run(Suite *s, enum fork_status fork)
{
    SRunner *sr = srunner_create(s);
    if (fork != CK_FORK_GETENV)
        srunner_set_fork_status(sr, fork);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

/* The main of a unit program whose only work is its suite. */
#define CHECK_MAIN(suite_fn) \
    int main(void) { return check_run(suite_fn(), CK_FORK_GETENV) ? EXIT_FAILURE : EXIT_SUCCESS; }

#endif
