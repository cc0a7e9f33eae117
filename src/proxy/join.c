/* Get joining: single-key gets queued for one server in one write travel as one multi-key line. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "lib/invariant.h"
#include "proxy/join.h"
#include "proxy/msg.h"
#include "proxy/server.h"
#include "proxy/worker.h"
#include "stats/stats.h"

/*
 * State in struct sconn: jkeys holds one entry [u8 len][key] per joinable
 * get in the queue, in queue order; join_tail is the queue's last message
 * while it is such a get whose line is still unsent, join_len and join_n the
 * length and keys of that open line.
 */

int join_write(struct sconn *s, const struct proto_ops *ops, struct msg *m,
               const struct proto_req *req, const char *buf)
{
    const struct proto_key *k = &req->keys[0];
    struct buf *out = &s->conn.obuf;
    int rc = 0;

    /* The keys are the queue's, one per joinable get in queue order: a message
     * recorded twice, or from another thread, shifts every later match. */
    RL_ASSERT(worker_on_thread(s->server->w));
    RL_ASSERT(!(m->flags & (MSG_F_JKEY | MSG_F_JOINED)));
    if (k->len > UINT8_MAX || buf_reserve(&s->jkeys, k->len + 1u) != 0)
        return -ENOMEM;
    if (s->join_tail != NULL && s->join_n < ops->join_keys_max &&
        (rc = ops->join(req, buf, out, s->join_len)) > 0) {
        s->join_tail->flags |= MSG_F_JOINED;
        s->join_len = (uint32_t)rc;
        s->join_n++;
        STATS_ADD(&s->server->stats, joined_gets, 1);
    } else if (rc == 0) {
        size_t before = buf_len(out);
        if ((rc = ops->forward(req, buf, out)) == 0) {
            s->join_len = (uint32_t)(buf_len(out) - before);
            s->join_n = 1;
        }
    }
    if (rc < 0)
        return rc;
    char *e = buf_wptr(&s->jkeys);              /* room reserved above */
    e[0] = (char)(uint8_t)k->len;
    memcpy(e + 1, buf + k->off, k->len);
    buf_produce(&s->jkeys, k->len + 1u);
    m->flags |= MSG_F_JKEY;
    return 0;
}

void join_queued(struct sconn *s, struct msg *m)
{
    s->join_tail = (m->flags & MSG_F_JKEY) ? m : NULL;  /* anything else ends an open line */
}

void join_sent(struct sconn *s)
{
    s->join_tail = NULL;
}

int join_match(const struct sconn *s, const struct msg *m, const char *p,
               const struct proto_rsp *rsp)
{
    const char *e = buf_rptr(&s->jkeys);
    if (buf_len(&s->jkeys) == 0 || buf_len(&s->jkeys) < 1u + (uint8_t)e[0])
        return -1;                      /* the queue and its keys disagree: fail safe */
    uint32_t klen = (uint8_t)e[0];
    int item = (rsp->flags & PROTO_SF_ITEM) != 0;
    int mine = item && m->items == 0 && rsp->key.len == klen &&
               memcmp(p + rsp->key.off, e + 1, klen) == 0;

    if (m->flags & MSG_F_JOINED)
        return mine;
    return item && !mine ? -1 : 1;
}

void join_forget(struct sconn *s, struct msg *m)
{
    if (m->flags & MSG_F_JKEY) {
        RL_ASSERT(buf_len(&s->jkeys) > 0);     /* its key is the oldest one there */
        buf_consume(&s->jkeys, 1u + (uint8_t)*buf_rptr(&s->jkeys));
        if (buf_len(&s->jkeys) == 0 && s->jkeys.cap > CONN_BUF_KEEP)
            buf_free(&s->jkeys);        /* a long pipeline's keys: do not keep the space */
    }
    if (s->join_tail == m)
        s->join_tail = NULL;
    m->flags &= (uint16_t)~(MSG_F_JKEY | MSG_F_JOINED);
}
