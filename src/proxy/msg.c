/* struct msg allocation from a per-worker free list: no malloc per request in steady state. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "proxy/msg.h"
#include "proxy/worker.h"

#define MSG_FREE_MAX     4096   /* messages a worker keeps for reuse */
#define MSG_KEEP_RSP_MAX 1024   /* ... of which this many keep their reply buffer */

struct msg *msg_get(struct worker *w)
{
    struct msg *m = w->free_msgs;
    struct buf rsp;

    if (m != NULL) {
        w->free_msgs = m->cnext;
        w->nfree_msgs--;
        rsp = m->rsp;                 /* a reply buffer travels with the message */
    } else {
        m = malloc(sizeof(*m));
        if (m == NULL)
            return NULL;
        buf_init(&rsp);
    }
    memset(m, 0, sizeof(*m));
    rsp.rpos = rsp.wpos = 0;
    m->rsp = rsp;
    return m;
}

/*
 * Back to the free list. A reply buffer of the standard size stays with
 * the message (replies are buffered until complete, so every request uses
 * one: keeping it avoids a malloc/free pair per request); larger ones, and
 * any beyond MSG_KEEP_RSP_MAX kept messages, are released.
 */
void msg_put(struct worker *w, struct msg *m)
{
    buf_free(&m->reqcopy);
    if (m->frags != NULL) {
        free(m->frags);
        free(m->key_frag);
        free(m->keys);
    }
    if (w->nfree_msgs >= MSG_FREE_MAX) {
        buf_free(&m->rsp);
        free(m);
        return;
    }
    if (m->rsp.cap > BUF_STD_SIZE || w->nfree_msgs >= MSG_KEEP_RSP_MAX)
        buf_free(&m->rsp);
    m->cnext = w->free_msgs;
    w->free_msgs = m;
    w->nfree_msgs++;
}
