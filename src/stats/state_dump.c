/* The one-screen state dump (SIGUSR2): pools, epochs, servers and their state, connections, from the stats view. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "stats/state_dump.h"

/* Errors a server's connections saw: refused or reset, closed under a request, timed out. */
static int64_t server_errors(const struct stats_view_server *s)
{
    return s->stats.server_err + s->stats.server_eof;
}

struct ranked {
    const struct stats_view_server *s;
};

/* Down before up, then by requests, most first; then by name for a stable order. */
static int ranked_cmp(const void *pa, const void *pb)
{
    const struct stats_view_server *a = ((const struct ranked *)pa)->s;
    const struct stats_view_server *b = ((const struct ranked *)pb)->s;

    if (a->up != b->up)
        return a->up - b->up;
    if (a->stats.requests != b->stats.requests)
        return a->stats.requests > b->stats.requests ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int dump_pool(const struct stats_view *v, const struct stats_view_pool *p,
                     struct buf *out)
{
    size_t up = 0, shown;
    int64_t conns = 0;
    int w = 6;
    struct ranked *order = malloc((p->nservers ? p->nservers : 1) * sizeof(*order));

    if (order == NULL)
        return -ENOMEM;
    for (size_t s = 0; s < p->nservers; s++) {
        order[s].s = &p->servers[s];
        up += p->servers[s].up != 0;
        conns += p->servers[s].stats.server_connections;
        if ((int)strlen(p->servers[s].name) > w)
            w = (int)strlen(p->servers[s].name);
    }
    if (w > 40)
        w = 40;
    qsort(order, p->nservers, sizeof(*order), ranked_cmp);

    int rc = buf_appendf(out, "pool '%s': %s, epoch %" PRIu64 ", checksum %s, %" PRId64
                         " client connections, %zu servers (%zu up, %zu down), %" PRId64
                         " server connections", p->name, p->distribution, p->epoch,
                         p->checksum, p->stats.client_connections, p->nservers, up,
                         p->nservers - up, conns);
    if (rc == 0 && p->last_reload[0] != '\0')
        rc = buf_appendf(out, ", last reload %s %" PRId64 " s ago",
                         strcmp(p->last_reload, "ok") == 0 ? "ok" : "FAILED",
                         v->timestamp - p->last_reload_at);
    if (rc == 0)
        rc = buf_append_str(out, "\n");
    shown = p->nservers < STATE_DUMP_SERVERS_MAX ? p->nservers : STATE_DUMP_SERVERS_MAX;
    for (size_t i = 0; rc == 0 && i < shown; i++) {
        const struct stats_view_server *s = order[i].s;
        rc = buf_appendf(out, "  %-*.*s %-4s  connections %" PRId64 "  requests %" PRId64
                         "  in flight %" PRId64 "  errors %" PRId64 "  timeouts %" PRId64 "\n",
                         w, w, s->name, s->up ? "up" : "DOWN", s->stats.server_connections,
                         s->stats.requests, s->stats.in_flight, server_errors(s),
                         s->stats.server_timedout);
    }
    if (rc == 0 && shown < p->nservers) {
        int64_t req = 0, err = 0;
        size_t down = 0;
        for (size_t i = shown; i < p->nservers; i++) {
            req += order[i].s->stats.requests;
            err += server_errors(order[i].s) + order[i].s->stats.server_timedout;
            down += order[i].s->up == 0;
        }
        rc = buf_appendf(out, "  ... %zu more servers (%zu down): %" PRId64 " requests, %" PRId64
                         " errors and timeouts together\n", p->nservers - shown, down, req, err);
    }
    free(order);
    return rc;
}

int state_dump_render(const struct stats_view *v, long pid, unsigned workers, struct buf *out)
{
    int rc = buf_appendf(out, "%s %s on %s, pid %ld, up %" PRId64 " s, %u worker%s, %" PRId64
                         " client connections (%" PRId64 " accepted since start), %zu pool%s\n",
                         v->service ? v->service : "ringleader", v->version ? v->version : "",
                         v->source ? v->source : "?", pid, v->uptime, workers,
                         workers == 1 ? "" : "s", v->curr_connections, v->total_connections,
                         v->npools, v->npools == 1 ? "" : "s");
    for (size_t i = 0; rc == 0 && i < v->npools; i++)
        rc = dump_pool(v, &v->pools[i], out);
    return rc;
}
