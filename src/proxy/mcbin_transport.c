/* The memcached binary protocol as a transport over a plain connection (see mcbin_transport.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "lib/invariant.h"
#include "proto/memcache_binary.h"
#include "proxy/mcbin_transport.h"

struct mcbin_conn {
    struct mcbin st;
    struct buf   rx;    /* frames as read, a partial one at most left over */
    struct buf   tx;    /* frames to send */
};

static struct mcbin_conn *mcbin_of(const struct conn *c)
{
    return c->tpd;
}

static struct buf *mcbin_rx(struct conn *c)
{
    return &mcbin_of(c)->rx;
}

static struct buf *mcbin_tx(struct conn *c)
{
    return &mcbin_of(c)->tx;
}

/* rx's frames into c->ibuf; the text bytes added, or UV_ENOMEM. Everything but a
 * partial frame prefix is taken, so input never waits here behind the text path's
 * own limits (which pause the reads). */
static ssize_t mcbin_decode_rx(struct conn *c)
{
    struct mcbin_conn *t = mcbin_of(c);
    size_t before = buf_len(&c->ibuf), used = 0;

    if (buf_len(&t->rx) == 0)
        return 0;
    int rc = mcbin_decode(&t->st, buf_rptr(&t->rx), buf_len(&t->rx), &used, &c->ibuf);
    buf_consume(&t->rx, used);
    if (rc < 0)
        return UV_ENOMEM;
    if (buf_len(&t->rx) == 0 && t->rx.cap > CONN_BUF_KEEP)
        buf_free(&t->rx);
    return (ssize_t)(buf_len(&c->ibuf) - before);
}

/* What one encode takes of c->obuf at most: conn_flush sends it and comes back for more,
 * so a deep pipeline of large replies is not held twice over (text and frames). Every
 * reply line the text path writes is far shorter, so each call makes progress. */
#define MCBIN_ENCODE_STEP (256u * 1024)

/* c->obuf's complete replies into tx; 0 or a libuv error (a reply that matches no
 * frame, or no memory: the connection closes). */
static int mcbin_encode_tx(struct conn *c)
{
    struct mcbin_conn *t = mcbin_of(c);
    size_t used = 0, len = buf_len(&c->obuf);

    if (len == 0)
        return 0;
    if (len > MCBIN_ENCODE_STEP)
        len = MCBIN_ENCODE_STEP;
    int rc = mcbin_encode(&t->st, buf_rptr(&c->obuf), len, &used, &t->tx);
    buf_consume(&c->obuf, used);
    if (rc < 0)
        return rc == -ENOMEM ? UV_ENOMEM : UV_EPROTO;
    return 0;
}

static void mcbin_release(struct conn *c)
{
    struct mcbin_conn *t = mcbin_of(c);

    if (t == NULL)
        return;
    mcbin_free(&t->st);
    buf_free(&t->rx);
    buf_free(&t->tx);
    free(t);
}

const struct transport transport_mcbin = {
    .name = "memcache-binary",
    .rx = mcbin_rx,
    .decode = mcbin_decode_rx,
    .tx = mcbin_tx,
    .encode = mcbin_encode_tx,
    .release = mcbin_release,
};

size_t mcbin_transport_partial(const struct conn *c)
{
    const struct mcbin_conn *t = mcbin_of(c);
    return t->st.in == MCBIN_IN_FRAME ? buf_len(&t->rx) : 0;
}

ssize_t mcbin_transport_attach(struct conn *c)
{
    RL_ASSERT(c->tpd == NULL && c->tp == &transport_plain);
    struct mcbin_conn *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return UV_ENOMEM;
    mcbin_init(&t->st);
    buf_swap(&t->rx, &c->ibuf);     /* what was read is the first frames */
    c->tpd = t;
    c->tp = &transport_mcbin;
    c->rx = &t->rx;
    return mcbin_decode_rx(c);
}
