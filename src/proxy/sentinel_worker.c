/* A sentinel pool's news from the worker, through the hub (the worker never calls control): the master failed, or answered as no master does. */
#include "config.h"

#include <string.h>

#include "proxy/hub.h"
#include "proxy/sentinel_worker.h"
#include "proxy/server.h"
#include "proxy/snapshot.h"
#include "proxy/worker.h"

/* The control record of srv's pool in the snapshot the worker runs, or NULL (not a
 * sentinel pool, or a pool a reload retired: its news is nobody's). */
static struct sentinel *sentinel_worker_record(const struct server *srv)
{
    const struct wpool *wp = srv->pool;
    const struct snapshot *snap = srv->w->snap;

    if (wp->cp->sentinel == NULL || wp->retired || snap == NULL ||
        wp->index >= snap->conf->npools || &snap->conf->pools[wp->index] != wp->cp)
        return NULL;
    return snap->pools[wp->index].sentinel;
}

static void sentinel_worker_tell(struct server *srv, enum sentinel_why why)
{
    struct sentinel *sn = sentinel_worker_record(srv);
    const struct hub *hub = srv->w->hub;

    if (sn != NULL && hub->ops->sentinel_refresh != NULL)
        hub->ops->sentinel_refresh(hub->ctx, sn, why);
}

void sentinel_worker_failed(struct server *srv)
{
    sentinel_worker_tell(srv, SENTINEL_WHY_FAILED);
}

void sentinel_worker_error(struct server *srv, const char *rsp, size_t len)
{
    if (len >= 9 && memcmp(rsp, "-READONLY", 9) == 0)
        sentinel_worker_tell(srv, SENTINEL_WHY_READONLY);
    else if (len >= 8 && memcmp(rsp, "-LOADING", 8) == 0)
        sentinel_worker_tell(srv, SENTINEL_WHY_LOADING);
}
