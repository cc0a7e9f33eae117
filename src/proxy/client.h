/* Client connections: read, parse, route, fan out, answer in order, backpressure. */
#ifndef RL_PROXY_CLIENT_H
#define RL_PROXY_CLIENT_H

#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "proto/proto.h"
#include "proxy/worker.h"

struct msg;

struct client {
    union rl_handle     h;
    uv_write_t          wreq;
    struct worker      *w;
    struct wpool       *pool;
    struct client      *prev, *next;    /* worker's list */
    struct client      *dirty_next;
    struct buf          ibuf;
    struct buf          obuf;           /* filling */
    struct buf          wbuf;           /* being written */
    struct msg         *head, *tail;    /* reply order */
    uint32_t            nmsgs;
    size_t              held_bytes;     /* reply bytes waiting in queued msgs */
    uint64_t            swallow;        /* body bytes of a refused request to drop */
    size_t              need;           /* bytes a pending request needs in ibuf */
    struct proto_parser parser;
    struct proto_client pc;
    int                 writing;
    int                 dirty;
    int                 paused;         /* reading stopped for backpressure */
    int                 eof;            /* no more input: close when answered */
    int                 closing;
    int                 is_unix;
};

/* Accept one connection from a listener (worker thread). */
void client_accept(struct listener *l);

/* A message of this client is complete: deliver what can be delivered. */
void client_advance(struct client *c);

/* Append reply bytes for the head message directly. */
int client_write_bytes(struct client *c, const char *p, size_t n);

/* Flush output (called from the worker's flush). */
void client_flush(struct client *c);

/* Close now (worker shutdown or fatal error). */
void client_close(struct client *c);

/* What the protocol's local() and merge_env() get: the pool's and the process's numbers
 * (pool_numbers.c, which takes every worker's lock in turn: never call it holding one). */
void client_env(struct client *c, struct proto_env *env);

#endif
