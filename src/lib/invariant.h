/* Invariants that fail loudly: RL_ASSERT, on in debug and sanitizer builds, compiled out in release. */
#ifndef RL_LIB_INVARIANT_H
#define RL_LIB_INVARIANT_H

#include "config.h"     /* NDEBUG, RL_DEBUG, RL_SANITIZERS decide, whoever includes this first */

/*
 * RL_ASSERT(cond) states what must hold where a wrong state would otherwise corrupt
 * silently: a lifecycle's state changes, queue insertion and removal, buffer bounds,
 * reference counts, the thread that owns an object. When it does not hold, the process
 * logs the condition with file:line and function and aborts (the sanitizers then print
 * the stack). Release builds (NDEBUG without RL_SANITIZERS or RL_DEBUG) compile it out:
 * `cond` is not evaluated, so it must have no side effects.
 *
 * RL_ASSERTS is 1 when assertions are compiled in.
 */
#if defined(RL_DEBUG) || defined(RL_SANITIZERS) || !defined(NDEBUG)
#define RL_ASSERTS 1
#define RL_ASSERT(cond) \
    (__builtin_expect(!!(cond), 1) ? (void)0 : rl_assert_fail(#cond, __FILE__, __LINE__, __func__))
#else
#define RL_ASSERTS 0
#define RL_ASSERT(cond) ((void)sizeof(!(cond)))
#endif

/* Log the failed condition (stderr and the log) and abort. */
void rl_assert_fail(const char *cond, const char *file, int line, const char *func)
    __attribute__((noreturn, cold));

#endif
