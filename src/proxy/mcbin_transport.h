/* The memcached binary protocol as a transport: a binary client's frames become text requests on the way in, the text replies frames on the way out. */
#ifndef RL_PROXY_MCBIN_TRANSPORT_H
#define RL_PROXY_MCBIN_TRANSPORT_H

#include "proxy/conn.h"

/*
 * A client of a memcached pool whose first byte is the binary request magic
 * (memcached 1.6's per-connection detection) gets this transport in place of the
 * plain one: the bytes read so far (c->ibuf) become the transport's raw input, and
 * from then on
 *
 *   socket --read--> rx --mcbin_decode--> c->ibuf (meta/text requests: the text path)
 *   c->obuf (text replies) --mcbin_encode--> tx --send--> socket
 *
 * so routing, stages, limits and every server see a text client (proto/memcache_binary.h).
 * Returns the plaintext bytes now in c->ibuf (>= 0), or a negative libuv error (then
 * the connection keeps the plain transport and must be closed). Plain connections only.
 */
ssize_t mcbin_transport_attach(struct conn *c);

extern const struct transport transport_mcbin;

/* Bytes of a frame not whole yet (its header, extras or key) that c's transport holds:
 * client_header_timeout applies to them as to a text request's partial line. */
size_t mcbin_transport_partial(const struct conn *c);

#endif
