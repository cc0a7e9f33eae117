/* struct snapshot: reference counting, lookup, and the release of what a snapshot owns. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "lib/invariant.h"
#include "placement/cluster_map.h"
#include "placement/ring.h"
#include "proxy/listen.h"
#include "proxy/snapshot.h"
#include "proxy/tls.h"

void snapshot_ref(struct snapshot *s)
{
    unsigned was = atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    RL_ASSERT(was > 0);                     /* a freed snapshot is not brought back */
}

void snapshot_unref(struct snapshot *s)
{
    if (s == NULL)
        return;
    unsigned was = atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel);
    RL_ASSERT(was > 0);                     /* one unref too many frees it twice */
    if (was != 1)
        return;
    for (uint32_t i = 0; s->pools != NULL && i < s->conf->npools; i++) {
        struct snapshot_pool *sp = &s->pools[i];
        ring_unref(sp->ring);
        ring_unref(sp->prev_ring);
        if (sp->listen_fds != NULL)
            listen_close(sp->listen_fds, s->nworkers);
        free(sp->listen_fds);
        free(sp->health);
        free(sp->rules);
        cluster_view_free(sp->cview);
        tls_ctx_free(sp->tls);
        tls_ctx_free(sp->server_tls);
    }
    free(s->pools);
    free(s->users);
    conf_free(s->conf);
    free(s);
}

void snapshot_close_listeners(struct snapshot *s)
{
    for (uint32_t i = 0; s != NULL && i < s->conf->npools; i++)
        if (s->pools[i].listen_fds != NULL)
            listen_close(s->pools[i].listen_fds, s->nworkers);
}

int snapshot_pool_index(const struct snapshot *s, const char *name, enum conf_proto proto)
{
    for (uint32_t i = 0; s != NULL && i < s->conf->npools; i++)
        if (strcmp(s->conf->pools[i].name, name) == 0 && s->conf->pools[i].protocol == proto)
            return (int)i;
    return -1;
}
