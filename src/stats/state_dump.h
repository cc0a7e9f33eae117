/* The one-screen state dump (SIGUSR2): pools, epochs, servers and their state, connections, from the stats view. */
#ifndef RL_STATE_DUMP_H
#define RL_STATE_DUMP_H

#include <stddef.h>

#include "stats/stats.h"

struct buf;

/* At most this many server lines per pool; the rest are summed up in one line. */
#define STATE_DUMP_SERVERS_MAX 8

/*
 * Append the dump of v to out as lines ending in '\n', without timestamps (the caller logs
 * each line). One line for the process, then per pool one line and at most
 * STATE_DUMP_SERVERS_MAX server lines: down servers first (they are what an operator looks
 * for), then the busiest; the servers left out are counted on one more line. So the dump
 * of P pools is at most 1 + P * (STATE_DUMP_SERVERS_MAX + 2) lines whatever their size.
 * pid and workers are the process's (the view does not carry them). Returns 0 or -ENOMEM.
 */
int state_dump_render(const struct stats_view *v, long pid, unsigned workers, struct buf *out);

#endif
