/* struct conn: a byte stream to a peer (client or server side) — its socket, buffers and transport. */
#ifndef RL_PROXY_CONN_H
#define RL_PROXY_CONN_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "lib/buf.h"
#include "proxy/transport.h"

union rl_handle {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t    tcp;
    uv_pipe_t   pipe;
};

struct conn;

/* What a connection's owner is told (src/proxy/client.c, src/proxy/server.c). */
struct conn_events {
    /* nread > 0: that many new bytes are in c->ibuf; 0: the transport used
     * the bytes itself (its output, if any, wants a flush: conn_output());
     * < 0: UV_EOF or a libuv error, and reading has stopped. */
    void (*on_read)(struct conn *c, ssize_t nread);
    /* A uv_write the connection started has finished with status (0 or a
     * libuv error); c->obuf may hold more to flush. */
    void (*on_written)(struct conn *c, int status);
    /* Optional (transports that handshake): the transport's handshake ended,
     * status 0 (done: plaintext flows, c->obuf may be flushed) or -1 (failed:
     * the read that follows reports the error). Called by the transport from
     * inside its decode or encode, so it must not close the connection or
     * flush: count, log, mark for the end-of-round flush. */
    void (*on_handshake)(struct conn *c, int status);
};

struct conn {
    union rl_handle           h;        /* h.handle.data == this conn */
    uv_write_t                wreq;
    const struct conn_events *ev;
    const struct transport   *tp;
    void                     *tpd;      /* the transport's own state */
    struct buf                ibuf;     /* read, not yet consumed */
    struct buf                obuf;     /* to write, filling */
    struct buf                wbuf;     /* being written by uv_write */
    struct buf               *rx;       /* where socket bytes are read into (ibuf, or the
                                           transport's), set by conn_read_start */
    uv_os_fd_t                fd;       /* the socket, once open (-1 before) */
    uint32_t                  chunk;    /* read room reserved per read */
    uint8_t                   writing;  /* a uv_write is in flight */
    uint8_t                   is_unix;
};

/* The owner of a conn embedded as `field` of a `type`. */
#define CONN_OWNER(c, type, field) ((type *)(void *)((char *)(c) - offsetof(type, field)))

/* Initialise the handle (TCP, or a unix pipe) on loop. 0, or a libuv error
 * (then the handle was not initialised and nothing needs closing). */
int  conn_init(struct conn *c, uv_loop_t *loop, int is_unix, const struct conn_events *ev,
               const struct transport *tp, uint32_t chunk);

int  conn_read_start(struct conn *c);       /* 0 or a libuv error */
void conn_read_stop(struct conn *c);

/*
 * Put c->obuf on the wire: through the transport, then as much as the socket
 * takes at once (send(2) with MSG_DONTWAIT), the rest by a uv_write whose end
 * is reported to ev->on_written. Nothing happens while a write is in flight.
 * The connection must not be closing (the caller knows its own state).
 * Returns 0, or a negative libuv error (the caller closes the connection).
 */
int  conn_flush(struct conn *c);

/* Bytes accepted for writing and not yet on the wire (obuf, transport, wbuf). */
static inline size_t conn_output(const struct conn *c)
{
    size_t n = buf_len(&c->obuf) + buf_len(&c->wbuf);
    if (c->tp->tx != NULL)
        n += buf_len(c->tp->tx((struct conn *)c));
    return n;
}

/* Ciphertext the transport holds for the wire (0 for the plain transport,
 * whose wire bytes are c->obuf itself). */
static inline size_t conn_transport_output(const struct conn *c)
{
    return c->tp->tx != NULL ? buf_len(c->tp->tx((struct conn *)c)) : 0;
}

/* Whether the transport still handshakes (no plaintext can flow). */
static inline int conn_handshaking(const struct conn *c)
{
    return c->tp->handshaking != NULL && c->tp->handshaking(c);
}

/* Start closing the handle; cb is the handle's close callback, which must
 * call conn_release() before freeing the owner. A transport with a shutdown
 * (TLS close_notify) gets one non-blocking send of what it queued, unless a
 * write is in flight. */
void conn_close(struct conn *c, uv_close_cb cb);
static inline int conn_closing(const struct conn *c)
{
    return c->h.handle.data == NULL || uv_is_closing(&c->h.handle);
}

/* Free the buffers and the transport's state. */
void conn_release(struct conn *c);

/* Return an idle buffer's memory when it grew past the standard size. */
#define CONN_BUF_KEEP (256u * 1024)

/* Reserve at least chunk bytes of room after in's data for a read: *b is
 * that room, or len 0 (which libuv reports as UV_ENOBUFS) without memory. */
void conn_read_room(struct buf *in, size_t chunk, uv_buf_t *b);

#endif
