/* memcached's binary protocol for clients: request frames to meta/text requests, text replies back to the frames memcached 1.6 answers. */
#ifndef RL_PROTO_MEMCACHE_BINARY_H
#define RL_PROTO_MEMCACHE_BINARY_H

#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"

/*
 * A binary client is served by translation (docs/protocol-memcache-binary.md):
 *
 *   client frames --mcbin_decode--> meta/text requests --(the text path: routing,
 *   stages, servers)--> text replies, in request order --mcbin_encode--> frames
 *
 * Every frame becomes exactly one text request that gets exactly one reply (quiet
 * frames are sent non-quiet and silenced here; a frame answered by the proxy alone
 * rides on `mn`, whose MN carries its answer), so the replies are matched to the
 * frames by order: `pend` keeps one record per frame whose reply is still due.
 * Both directions are pure and resumable: no sockets, bounded state (a partial
 * frame's header, extras and key at most: MCBIN_PREFIX_MAX bytes unconsumed), values
 * streamed with a remaining-bytes counter.
 */

#define MCBIN_HDR_LEN       24
#define MCBIN_REQ_MAGIC     0x80
#define MCBIN_RES_MAGIC     0x81
#define MCBIN_KEY_MAX       250                   /* memcached's KEY_MAX_LENGTH */
#define MCBIN_PREFIX_MAX    (MCBIN_HDR_LEN + 255 + MCBIN_KEY_MAX)
#define MCBIN_BODY_MAX      (1024u * 1024u * 1024u)  /* ITEM_SIZE_MAX_UPPER_LIMIT */

/* Opcodes memcached 1.6 serves (protocol_binary.h). */
enum mcbin_opcode {
    MCBIN_GET = 0x00, MCBIN_SET = 0x01, MCBIN_ADD = 0x02, MCBIN_REPLACE = 0x03,
    MCBIN_DELETE = 0x04, MCBIN_INCR = 0x05, MCBIN_DECR = 0x06, MCBIN_QUIT = 0x07,
    MCBIN_FLUSH = 0x08, MCBIN_GETQ = 0x09, MCBIN_NOOP = 0x0a, MCBIN_VERSION = 0x0b,
    MCBIN_GETK = 0x0c, MCBIN_GETKQ = 0x0d, MCBIN_APPEND = 0x0e, MCBIN_PREPEND = 0x0f,
    MCBIN_STAT = 0x10, MCBIN_SETQ = 0x11, MCBIN_ADDQ = 0x12, MCBIN_REPLACEQ = 0x13,
    MCBIN_DELETEQ = 0x14, MCBIN_INCRQ = 0x15, MCBIN_DECRQ = 0x16, MCBIN_QUITQ = 0x17,
    MCBIN_FLUSHQ = 0x18, MCBIN_APPENDQ = 0x19, MCBIN_PREPENDQ = 0x1a,
    MCBIN_TOUCH = 0x1c, MCBIN_GAT = 0x1d, MCBIN_GATQ = 0x1e,
    MCBIN_SASL_LIST = 0x20, MCBIN_SASL_AUTH = 0x21, MCBIN_SASL_STEP = 0x22,
    MCBIN_GATK = 0x23, MCBIN_GATKQ = 0x24
};

/* Reply statuses (memcached 1.6's, plus ETMPFAIL for what only a proxy meets). */
enum mcbin_status {
    MCBIN_OK = 0x0000,
    MCBIN_ENOENT = 0x0001,
    MCBIN_EEXISTS = 0x0002,
    MCBIN_E2BIG = 0x0003,
    MCBIN_EINVAL = 0x0004,
    MCBIN_NOT_STORED = 0x0005,
    MCBIN_DELTA_BADVAL = 0x0006,
    MCBIN_AUTH_ERROR = 0x0020,
    MCBIN_UNKNOWN = 0x0081,
    MCBIN_ENOMEM = 0x0082,
    MCBIN_ETMPFAIL = 0x0086     /* a server failed or timed out (the proxy's reason) */
};

/* Decoder states. */
enum mcbin_in {
    MCBIN_IN_FRAME = 0,   /* at a frame's header */
    MCBIN_IN_VALUE,       /* copying a storage frame's value (left bytes) */
    MCBIN_IN_SWALLOW,     /* dropping left bytes (memcached's swallow) */
    MCBIN_IN_CLOSED       /* the connection ends: everything is dropped */
};

/* Encoder states. */
enum mcbin_out {
    MCBIN_OUT_REPLY = 0,  /* at a reply line */
    MCBIN_OUT_VALUE,      /* copying a value (left bytes, then its CRLF) */
    MCBIN_OUT_STATS       /* inside a stats reply's STAT lines */
};

struct mcbin {
    uint8_t    in;        /* enum mcbin_in */
    uint8_t    out;       /* enum mcbin_out */
    uint64_t   in_left;
    uint64_t   out_left;  /* value bytes still to copy, its CRLF excluded */
    uint8_t    out_crlf;  /* bytes of the value's CRLF still to drop */
    struct buf pend;      /* one record per frame whose reply is due, in order */
    uint32_t   npend;
};

void mcbin_init(struct mcbin *b);
void mcbin_free(struct mcbin *b);

/*
 * Translate the client's frames in in[0..len) into text requests appended to text.
 * *used gets the bytes consumed: whole frames, and a storage frame's value or a
 * swallowed body as far as it goes; a partial frame prefix (at most MCBIN_PREFIX_MAX
 * bytes) is left for the next call. Malformed input is answered as memcached 1.6
 * answers it, in order (a reply, then `quit` when memcached closes). Returns 0, or
 * -ENOMEM (then text may hold a part of a request: close the connection).
 */
int mcbin_decode(struct mcbin *b, const char *in, size_t len, size_t *used, struct buf *text);

/*
 * Translate the text replies in in[0..len) (the proxy's answers to what mcbin_decode
 * wrote, in order) into binary frames appended to out. *used gets the bytes consumed
 * (whole reply units; a value's bytes as they come). Returns 0, -ENOMEM, or -EPROTO
 * for a reply that matches no pending frame (a bug: close the connection).
 */
int mcbin_encode(struct mcbin *b, const char *in, size_t len, size_t *used, struct buf *out);

/* Whether a connection's first byte says it speaks the binary protocol. */
static inline int mcbin_detect(const char *p, size_t len)
{
    return len > 0 && (uint8_t)p[0] == MCBIN_REQ_MAGIC;
}

#endif
