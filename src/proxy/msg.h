/* struct msg: one client request on its way to a server and back, and its place in the two queues. */
#ifndef RL_PROXY_MSG_H
#define RL_PROXY_MSG_H

#include <stdint.h>

#include "buf.h"
#include "proto/proto.h"

/*
 * The queues between client and server connections:
 *
 *   client c:  c->head -> m1 -> m2 -> m3 -> NULL     (cnext: reply order)
 *                          |      |     \
 *                          |      |      frags f1, f2 (parent = m3)
 *   sconn s:   s->head -> m1 -> f2 -> ...            (snext: sent, awaiting reply)
 *   sconn t:   t->head -> m2 -> f1 -> ...
 *
 * A server connection answers in the order it was asked, so a reply always
 * belongs to the head of that connection's queue. A client is answered in
 * the order it asked: a reply for a message that is not the client's head
 * waits in m->rsp; the head streams straight into the client's output.
 * A message whose client went away stays in the server queue (client NULL)
 * to absorb its reply, then is freed. A timed-out message is answered at
 * once and stays queued as a zombie for the same reason.
 */

#define MSG_F_DONE     0x0001   /* reply complete (in rsp, or already streamed) */
#define MSG_F_SENT     0x0002   /* in a server connection's queue */
#define MSG_F_ZOMBIE   0x0004   /* answered already (timeout): discard the server's reply */
#define MSG_F_FRAG     0x0008   /* a fragment of parent */
#define MSG_F_STREAMED 0x0010   /* part of the reply went straight to the client */
#define MSG_F_CLOSE    0x0020   /* close the client after this reply */
#define MSG_F_NOREPLY  0x0040   /* client asked for no reply */
#define MSG_F_INTERNAL 0x0080   /* proxy's own request (hello, probe): no client */
#define MSG_F_ERROR    0x0100   /* answered with an error */
#define MSG_F_PROBE    0x0200   /* internal health probe */
#define MSG_F_REPLICA  0x0400   /* parent of copies of one request to several servers */
#define MSG_F_ASYNC    0x0800   /* REPLICA: answer with the first copy, the rest in background */
#define MSG_F_WARM     0x1000   /* warm-up: on a miss, ask the key's previous owner */
#define MSG_F_WARM2    0x2000   /* warm-up: this is that second ask */
#define MSG_F_JKEY     0x4000   /* its key is queued in sconn->jkeys (a joinable get) */
#define MSG_F_JOINED   0x8000   /* a later get was joined to its server command */

struct client;
struct sconn;
struct server;
struct worker;

struct msg {
    struct msg    *cnext;       /* client reply order */
    struct msg    *snext;       /* server connection queue */
    struct client *client;      /* NULL: orphan (client closed) or internal */
    struct msg    *parent;      /* fragment: its multi-key request */
    struct sconn  *sconn;       /* where it was sent */
    struct server *server;
    uint16_t       cmd;
    uint16_t       rflags;      /* PROTO_RF_* of the request */
    uint16_t       flags;       /* MSG_F_* */
    uint32_t       items;       /* retrieval: values returned */
    uint32_t       nkeys;       /* keys the request carried (hits/misses) */
    uint64_t       start_us;
    uint64_t       deadline_ms; /* 0: no timeout */
    uint64_t       req_bytes;
    struct buf     rsp;         /* reply bytes waiting for their turn */
    /* multi-key parent */
    uint32_t       nfrag;
    uint32_t       nfrag_pending;
    struct msg   **frags;
    uint32_t      *key_frag;
    struct proto_key *keys;
    struct buf     reqcopy;     /* copy of the request header (merge reads keys there);
                                   warm-up: the key */
    struct server *warm;        /* warm-up: the key's previous owner */
    uint16_t       warm_cmd;    /* warm-up: get or gets, as the client asked */
};

struct msg *msg_get(struct worker *w);
/* Return a message to the worker's free list; releases its buffers beyond
 * the standard size and any multi-key arrays. */
void msg_put(struct worker *w, struct msg *m);

#endif
