/* The transport seam: how a connection's bytes become wire bytes and back (plain today, TLS next). */
#ifndef RL_PROXY_TRANSPORT_H
#define RL_PROXY_TRANSPORT_H

#include <stddef.h>
#include <sys/types.h>

struct buf;
struct conn;

/*
 * A connection (src/proxy/conn.h) keeps plaintext in c->ibuf (read) and
 * c->obuf (to write). A transport says where raw socket bytes go and come
 * from and turns one into the other:
 *
 *   socket --uv_read--> rx(c) --decode--> c->ibuf      (plain: rx is ibuf, no decode)
 *   c->obuf --encode--> tx(c) --send/uv_write--> socket (plain: tx is obuf, no encode)
 *
 * Every hook may be NULL, which means the plain behaviour; the plain
 * transport is all NULLs, so the data path of a plain connection is the
 * same syscalls as without a seam (read into ibuf, send from obuf).
 *
 * Contracts:
 * - rx(c): the buffer uv_read fills; conn reserves room in it.
 * - decode(c): raw bytes were added to rx(c); move what they decode to into
 *   c->ibuf. Returns the plaintext bytes added (>= 0; 0 when the bytes were
 *   the transport's own, e.g. a handshake), or a negative libuv error
 *   (UV_EOF for an orderly close by the peer). Output the transport must
 *   send (handshake records) goes to tx(c); conn flushes it.
 * - tx(c): the buffer whose bytes go on the wire.
 * - encode(c): move c->obuf's plaintext into tx(c) (all of it, or what the
 *   transport can take now: a handshake in progress keeps obuf). 0, or a
 *   negative libuv error.
 * - handshaking(c): 1 while no plaintext can flow yet.
 * - shutdown(c): queue an orderly close (TLS close_notify) into tx(c).
 * - release(c): free the private state c->tpd (from the close callback).
 */
struct transport {
    const char *name;
    struct buf *(*rx)(struct conn *c);
    ssize_t     (*decode)(struct conn *c);
    struct buf *(*tx)(struct conn *c);
    int         (*encode)(struct conn *c);
    int         (*handshaking)(const struct conn *c);
    void        (*shutdown)(struct conn *c);
    void        (*release)(struct conn *c);
};

/* TCP and unix sockets as they are. */
extern const struct transport transport_plain;

#endif
