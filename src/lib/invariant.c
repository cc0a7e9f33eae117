/* The failure of an RL_ASSERT: say which condition, where, and abort. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "lib/invariant.h"
#include "lib/log.h"

void rl_assert_fail(const char *cond, const char *file, int line, const char *func)
{
    /* stderr first: the log may be a file that is not flushed before abort() */
    fprintf(stderr, "ringleader: %s:%d: %s: assertion failed: %s\n", file, line, func, cond);
    fflush(stderr);
    log_error("%s:%d: %s: assertion failed: %s", file, line, func, cond);
    abort();
}
