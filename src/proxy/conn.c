/* struct conn: socket reads into a buffer, batched writes through the transport, close. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/invariant.h"
#include "proxy/conn.h"
#include "lib/util.h"

const struct transport transport_plain = { .name = "plain" };

void conn_read_room(struct buf *in, size_t chunk, uv_buf_t *b)
{
    if (buf_reserve(in, chunk) < 0) {
        b->base = NULL;
        b->len = 0;
        return;
    }
    b->base = buf_wptr(in);
    b->len = buf_room(in);
}

static struct buf *conn_tx(struct conn *c)
{
    return c->tp->tx ? c->tp->tx(c) : &c->obuf;
}

static void conn_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    struct conn *c = h->data;

    (void)suggested;
    conn_read_room(c->rx, c->chunk, b);
}

static void conn_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct conn *c = st->data;

    (void)b;
    if (nread == 0)
        return;                 /* EAGAIN: libuv's "nothing", not an error */
    if (nread < 0) {
        uv_read_stop(st);
        c->ev->on_read(c, nread);
        return;
    }
    buf_produce(c->rx, (size_t)nread);     /* into the room conn_alloc_cb gave */
    if (c->tp->decode != NULL) {
        nread = c->tp->decode(c);
        if (nread < 0)
            uv_read_stop(st);
    }
    c->ev->on_read(c, nread);
}

int conn_init(struct conn *c, uv_loop_t *loop, int is_unix, const struct conn_events *ev,
              const struct transport *tp, uint32_t chunk)
{
    int rc = is_unix ? uv_pipe_init(loop, &c->h.pipe, 0) : uv_tcp_init(loop, &c->h.tcp);
    if (rc < 0)
        return rc;
    c->h.handle.data = c;
    c->ev = ev;
    c->tp = tp;
    c->chunk = chunk;
    c->fd = -1;
    c->is_unix = (uint8_t)(is_unix != 0);
    return 0;
}

int conn_read_start(struct conn *c)
{
    /* The handle is open now (accepted or connected): what the hot path
     * needs of the transport and the socket is looked up once. */
    c->rx = c->tp->rx ? c->tp->rx(c) : &c->ibuf;
    if (c->fd < 0 && uv_fileno(&c->h.handle, &c->fd) != 0)
        c->fd = -1;
    return uv_read_start(&c->h.stream, conn_alloc_cb, conn_read_cb);
}

void conn_read_stop(struct conn *c)
{
    if (!conn_closing(c))
        uv_read_stop(&c->h.stream);
}

/* A send without the VFS layer write(2) goes through (a tenth of the
 * per-request syscall cost unpipelined). Bytes written, UV_EAGAIN, or a
 * negative libuv error. */
static inline int conn_try_send(struct conn *c, const char *p, size_t n)
{
    uv_os_fd_t fd = c->fd;
    if (fd < 0) {
        uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
        return uv_try_write(&c->h.stream, &b, 1);
    }
    for (int tries = 0; tries < 8; tries++) {
        /* syscall(2), not send(3): the libc wrapper is a cancellation point and,
         * in a threaded process, brackets every call with two atomic updates of
         * the thread's cancel state; workers are never cancelled. */
        ssize_t r = syscall(SYS_sendto, fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0);
        if (r >= 0)
            return (int)r;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return UV_EAGAIN;
        if (errno != EINTR)
            return uv_translate_sys_error(errno);
    }
    return UV_EAGAIN;
}

static void conn_write_cb(uv_write_t *req, int status)
{
    struct conn *c = req->data;

    RL_ASSERT(c->writing);
    c->writing = 0;
    c->wbuf.rpos = c->wbuf.wpos = 0;
    if (uv_is_closing(&c->h.handle))
        return;
    c->ev->on_written(c, status);
}

/* Send what tx holds: 0 when all of it went out at once (or it was empty), 1
 * when a uv_write carries the rest, or a negative libuv error. */
static inline int conn_send(struct conn *c, struct buf *tx)
{
    if (buf_len(tx) == 0)
        return 0;
    int n = conn_try_send(c, buf_rptr(tx), RL_MIN(buf_len(tx), 1u << 30));
    if (n > 0)
        buf_consume(tx, (size_t)n);
    else if (n < 0 && n != UV_EAGAIN)
        return n;
    if (buf_len(tx) == 0) {
        if (tx->cap > CONN_BUF_KEEP)
            buf_free(tx);
        return 0;
    }
    /* One uv_write at a time: a second would reuse wreq and replace the bytes
     * the first is still writing. */
    RL_ASSERT(!c->writing && buf_len(&c->wbuf) == 0);
    buf_swap(tx, &c->wbuf);
    uv_buf_t b = uv_buf_init(buf_rptr(&c->wbuf), (unsigned)buf_len(&c->wbuf));
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, &c->h.stream, &b, 1, conn_write_cb);
    if (rc < 0)
        return rc;
    c->writing = 1;
    return 1;
}

int conn_flush(struct conn *c)
{
    if (c->writing)
        return 0;
    if (c->tp->encode == NULL) {
        int rc = conn_send(c, &c->obuf);
        return rc < 0 ? rc : 0;
    }
    /* A transport encodes a bounded part of obuf at a time: go on while the
     * socket takes everything and the encoder takes more. */
    for (;;) {
        size_t before = buf_len(&c->obuf);
        int rc = c->tp->encode(c);
        if (rc < 0)
            return rc;
        rc = conn_send(c, conn_tx(c));
        if (rc != 0)
            return rc < 0 ? rc : 0;
        if (buf_len(&c->obuf) == 0 || buf_len(&c->obuf) == before)
            return 0;
    }
}

void conn_close(struct conn *c, uv_close_cb cb)
{
    if (c->tp->shutdown != NULL && c->fd >= 0 && !c->writing) {
        c->tp->shutdown(c);
        struct buf *tx = conn_tx(c);
        if (buf_len(tx) > 0)
            (void)conn_try_send(c, buf_rptr(tx), buf_len(tx));
    }
    uv_close(&c->h.handle, cb);
}

void conn_release(struct conn *c)
{
    if (c->tp != NULL && c->tp->release != NULL)
        c->tp->release(c);
    c->tpd = NULL;
    buf_free(&c->ibuf);
    buf_free(&c->obuf);
    buf_free(&c->wbuf);
}
