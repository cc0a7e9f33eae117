/* Requests per second of each pool over the last full second, sampled on the main loop while someone asks. */
#ifndef RL_OPS_RATE_H
#define RL_OPS_RATE_H

#include <stdint.h>

struct proxy;
struct ops_rate;

/*
 * A one-second timer on p's main loop (after uv_loop_init; the caller stores the result in
 * p->ops_rate). It samples the pools' request counters (observe_view) only while rates are
 * being read: for a minute after the last ops_rate_get, so an idle proxy pays nothing.
 * NULL when it cannot be set up (logged; rates then read 0).
 */
struct ops_rate *ops_rate_start(struct proxy *p);

/* Close the timer (the loop must run once more); frees itself. NULL is a no-op. */
void ops_rate_close(struct ops_rate *r);

/* Requests per second of `pool` over the last full second sampled (any thread). 0 before
 * two samples exist: the first read after an idle minute starts the sampling. */
int64_t ops_rate_get(struct ops_rate *r, const char *pool);

#endif
