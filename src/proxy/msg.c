/* struct msg allocation from a per-worker free list: no malloc per request in steady state. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "proxy/msg.h"
#include "proxy/worker.h"

#define MSG_FREE_MAX 4096   /* messages a worker keeps for reuse */

struct msg *msg_get(struct worker *w)
{
    struct msg *m = w->free_msgs;

    if (m != NULL) {
        w->free_msgs = m->cnext;
        w->nfree_msgs--;
    } else {
        m = malloc(sizeof(*m));
        if (m == NULL)
            return NULL;
    }
    memset(m, 0, sizeof(*m));
    return m;
}

void msg_put(struct worker *w, struct msg *m)
{
    buf_free(&m->rsp);
    buf_free(&m->reqcopy);
    if (m->frags != NULL) {
        free(m->frags);
        free(m->key_frag);
        free(m->keys);
    }
    if (w->nfree_msgs >= MSG_FREE_MAX) {
        free(m);
        return;
    }
    m->cnext = w->free_msgs;
    w->free_msgs = m;
    w->nfree_msgs++;
}
