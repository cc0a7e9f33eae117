/* The proxy's stats as a reader sees them: per-worker counters summed into a view, the stats port. */
#ifndef RL_PROXY_OBSERVE_H
#define RL_PROXY_OBSERVE_H

#include <stddef.h>

#include "lib/buf.h"
#include "stats/stats.h"

struct proxy;
struct snapshot;

/* The current snapshot, referenced (any thread); snapshot_unref when done. */
struct snapshot *observe_snapshot(struct proxy *p);

/* Sum every worker's counters for the pools of snap into v (any thread;
 * takes each worker's lock briefly). 0 or -ENOMEM; stats_view_free(v). */
int observe_view(struct proxy *p, struct snapshot *snap, struct stats_view *v);

/* Render the stats JSON (twemproxy's document) or Prometheus text. */
int observe_render(struct proxy *p, int prometheus, struct buf *out);

/* The stats port on the main loop; fd >= 0: a listening socket already open for it (an
 * upgrade's, owned from here on). 0, or -errno with a reason. */
int  observe_stats_listen(struct proxy *p, const char *host, int port, int fd, char *err,
                          size_t errlen);
void observe_stats_close(struct proxy *p);

/* The admin HTTP endpoint (its own thread) when addr is not NULL; the
 * reload it asks for runs on the main loop. hosts: admin_hosts (admin_start); fd >= 0:
 * a listening socket already open (admin_start_on). 0 or -errno with a reason. */
int  observe_admin_start(struct proxy *p, const char *addr, const char *token,
                         const char *hosts, int fd, char *err, size_t errlen);
void observe_admin_stop(struct proxy *p);   /* main loop still running */

#endif
