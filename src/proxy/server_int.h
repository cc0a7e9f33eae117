/* What server.c and sconn.c share, and nobody else: a server and its connections. */
#ifndef RL_PROXY_SERVER_INT_H
#define RL_PROXY_SERVER_INT_H

#include <stdint.h>

#include "proxy/server.h"
#include "proxy/tls.h"

#define SCONN_BACKOFF_MIN_MS 50
#define SCONN_BACKOFF_MAX_MS 2000
#define SCONN_READ_CHUNK     16384
#define SCONN_READ_BODY      (128 * 1024)  /* read room inside a large value: fewer, larger
                                              reads (the input buffer stays under CONN_BUF_KEEP) */
#define SCONN_STREAM_MIN     (64 * 1024)   /* reply values above this stream to the client */
#define SERVER_IDLE_PINS_MAX 8             /* reset pinned connections kept per server and worker */
#define SERVER_READY_PINS    2             /* ... of them opened ahead of demand, per variant */
#define SERVER_DB_SETS       (1 + PROTO_DBS) /* a Redis server's slot sets: the pool's
                                              database, and each one a client may SELECT */

/* server.c */
void server__free_if_idle(struct server *s);
void server__succeeded(struct server *srv);
void server__pins_ready(struct server *srv, uint8_t variant);

/* sconn.c */
int sconn__hello(struct sconn *s, int reset);
struct sconn *sconn__open(struct server *srv, uint32_t slot, uint8_t variant, uint8_t db);
void sconn__tls_failed(struct sconn *s, enum tls_fail why);

#endif
