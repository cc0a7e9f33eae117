/* The hot-key sketch as a stage: the first key of every keyed request is counted. */
#include "config.h"

#include "conf/conf.h"
#include "proto/proto.h"
#include "proxy/route.h"
#include "proxy/stage.h"
#include "proxy/worker.h"
#include "stats/hotkeys.h"

static int hot_wanted(const struct conf_pool *cp, const struct conf_global *g)
{
    return g->hot_keys;
}

static enum stage_verdict hot_request(struct stage_req *r)
{
    if (r->req->kind != PROTO_REQ_FANOUT)
        hotkeys_touch(&r->pool->hot, r->rk[0].bytes, r->rk[0].len, uv_now(&r->pool->w->loop));
    return STAGE_PASS;
}

const struct stage stage_hotkeys = {
    .name = "hot_keys",
    .wanted = hot_wanted,
    .request = hot_request,
};
