/* memcached's binary protocol for clients: frames to meta/text requests and text replies back (see memcache_binary.h). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "proto/memcache_binary.h"

/* What a pending frame's text reply looks like (selects its translation). */
enum mcbin_kind {
    MCBIN_K_GET,      /* mg ... v: VA (hit) or EN */
    MCBIN_K_TOUCH,    /* mg ... T: HD (hit, no value) or EN */
    MCBIN_K_STORE,    /* ms: HD, NS, EX, NF */
    MCBIN_K_DELETE,   /* md: HD, NF, EX */
    MCBIN_K_ARITH,    /* ma ... v: VA (the number), NF, EX, NS */
    MCBIN_K_LOCAL,    /* mn: MN, answered with the record's status */
    MCBIN_K_VERSION,  /* version: VERSION x */
    MCBIN_K_STAT,     /* stats [sub]: STAT lines, then END */
    MCBIN_K_FLUSH     /* flush_all: OK */
};

/* How a storage frame's failure reads in binary (memcached's complete_update_bin). */
enum mcbin_mode { MCBIN_M_SET, MCBIN_M_ADD, MCBIN_M_REPLACE, MCBIN_M_CAS, MCBIN_M_APPEND };

#define MCBIN_PF_QUIET  0x01   /* a quiet opcode: successes (and get misses) are silent */
#define MCBIN_PF_KEY    0x02   /* the reply carries the key; its bytes follow the record */

/* One frame whose reply is due, in struct mcbin.pend (unaligned: copied in and out). */
struct mcbin_pend {
    uint8_t  opcode;       /* as the client sent it (replies echo it) */
    uint8_t  kind;         /* enum mcbin_kind */
    uint8_t  flags;        /* MCBIN_PF_* */
    uint8_t  mode;         /* enum mcbin_mode (STORE) */
    uint16_t status;       /* LOCAL: the answer */
    uint16_t keylen;       /* PF_KEY: key bytes after the record */
    uint32_t opaque;       /* as sent, network order */
};

void mcbin_init(struct mcbin *b)
{
    memset(b, 0, sizeof(*b));
    buf_init(&b->pend);
}

void mcbin_free(struct mcbin *b)
{
    buf_free(&b->pend);
    b->npend = 0;
}

/* ------------------------------------------------------------------ wire helpers */

static inline uint16_t mcbin_rd16(const char *p)
{
    const uint8_t *u = (const uint8_t *)p;
    return (uint16_t)((uint16_t)u[0] << 8 | u[1]);
}

static inline uint32_t mcbin_rd32(const char *p)
{
    const uint8_t *u = (const uint8_t *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

static inline uint64_t mcbin_rd64(const char *p)
{
    return (uint64_t)mcbin_rd32(p) << 32 | mcbin_rd32(p + 4);
}

static inline void mcbin_wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void mcbin_wr64(uint8_t *p, uint64_t v)
{
    mcbin_wr32(p, (uint32_t)(v >> 32));
    mcbin_wr32(p + 4, (uint32_t)v);
}

/* A reply header as memcached's add_bin_header writes it (datatype 0). 0 or -ENOMEM. */
static int mcbin_header(struct buf *out, const struct mcbin_pend *pd, uint16_t status,
                        uint8_t extlen, uint16_t keylen, uint32_t bodylen, uint64_t cas)
{
    uint8_t h[MCBIN_HDR_LEN];

    h[0] = MCBIN_RES_MAGIC;
    h[1] = pd->opcode;
    h[2] = (uint8_t)(keylen >> 8);
    h[3] = (uint8_t)keylen;
    h[4] = extlen;
    h[5] = 0;
    h[6] = (uint8_t)(status >> 8);
    h[7] = (uint8_t)status;
    mcbin_wr32(h + 8, bodylen);
    memcpy(h + 12, &pd->opaque, 4);
    mcbin_wr64(h + 16, cas);
    return buf_append(out, h, sizeof(h));
}

/* memcached's write_bin_error texts. */
static const char *mcbin_status_text(uint16_t status)
{
    switch (status) {
    case MCBIN_ENOMEM:       return "Out of memory";
    case MCBIN_UNKNOWN:      return "Unknown command";
    case MCBIN_ENOENT:       return "Not found";
    case MCBIN_EINVAL:       return "Invalid arguments";
    case MCBIN_EEXISTS:      return "Data exists for key.";
    case MCBIN_E2BIG:        return "Too large.";
    case MCBIN_DELTA_BADVAL: return "Non-numeric server-side value for incr or decr";
    case MCBIN_NOT_STORED:   return "Not stored.";
    case MCBIN_AUTH_ERROR:   return "Auth failure.";
    default:                 return "Temporary failure";
    }
}

/* An error reply: status and its text (or text[0..len) when given). Errors are never
 * silenced by a quiet opcode (memcached's write_bin_error ignores noreply). */
static int mcbin_error(struct buf *out, const struct mcbin_pend *pd, uint16_t status,
                       const char *text, size_t len)
{
    if (text == NULL) {
        text = mcbin_status_text(status);
        len = strlen(text);
    }
    if (mcbin_header(out, pd, status, 0, 0, (uint32_t)len, 0) < 0 ||
        buf_append(out, text, len) < 0)
        return -ENOMEM;
    return 0;
}

/* ------------------------------------------------------------------ decoding */

static int mcbin_push(struct mcbin *b, const struct mcbin_pend *pd, const char *key)
{
    size_t keep = buf_len(&b->pend);

    if (buf_append(&b->pend, pd, sizeof(*pd)) < 0)
        return -ENOMEM;
    if ((pd->flags & MCBIN_PF_KEY) && buf_append(&b->pend, key, pd->keylen) < 0) {
        buf_truncate(&b->pend, keep);
        return -ENOMEM;
    }
    b->npend++;
    return 0;
}

/* The key as the text protocol can carry it: as sent unless a byte would end its token
 * or its line where memcached reads text (a space, CR, LF, NUL: memcached splits tokens
 * on spaces only, so other bytes stay in the key), else base64 (the caller adds the meta
 * b flag). 1 when base64. */
static int mcbin_key(struct buf *text, const char *key, uint16_t len, int *rc)
{
    for (uint16_t i = 0; i < len; i++) {
        uint8_t ch = (uint8_t)key[i];
        if (ch == ' ' || ch == '\r' || ch == '\n' || ch == '\0') {
            *rc = buf_append_b64(text, key, len);
            return 1;
        }
    }
    *rc = buf_append(text, key, len);
    return 0;
}

/* The whole connection ends after status's reply (memcached's close_after_write):
 * the answer rides on mn, then quit stops the text path reading. */
static int mcbin_fatal(struct mcbin *b, struct mcbin_pend *pd, uint16_t status, struct buf *text)
{
    pd->kind = MCBIN_K_LOCAL;
    pd->flags = 0;
    pd->status = status;
    b->in = MCBIN_IN_CLOSED;
    if (mcbin_push(b, pd, NULL) < 0 || buf_append_str(text, "mn\r\nquit\r\n") < 0)
        return -ENOMEM;
    return 0;
}

/* An answer of the proxy's own, in its turn. */
static int mcbin_local(struct mcbin *b, struct mcbin_pend *pd, uint16_t status, struct buf *text)
{
    pd->kind = MCBIN_K_LOCAL;
    pd->status = status;
    pd->flags &= (uint8_t)~MCBIN_PF_KEY;
    if (mcbin_push(b, pd, NULL) < 0 || buf_append_str(text, "mn\r\n") < 0)
        return -ENOMEM;
    return 0;
}

/* A quiet opcode's loud twin, or op itself (*quiet says which). */
static uint8_t mcbin_base(uint8_t op, int *quiet)
{
    *quiet = 1;
    switch (op) {
    case MCBIN_GETQ:     return MCBIN_GET;
    case MCBIN_GETKQ:    return MCBIN_GETK;
    case MCBIN_SETQ:     return MCBIN_SET;
    case MCBIN_ADDQ:     return MCBIN_ADD;
    case MCBIN_REPLACEQ: return MCBIN_REPLACE;
    case MCBIN_DELETEQ:  return MCBIN_DELETE;
    case MCBIN_INCRQ:    return MCBIN_INCR;
    case MCBIN_DECRQ:    return MCBIN_DECR;
    case MCBIN_QUITQ:    return MCBIN_QUIT;
    case MCBIN_FLUSHQ:   return MCBIN_FLUSH;
    case MCBIN_APPENDQ:  return MCBIN_APPEND;
    case MCBIN_PREPENDQ: return MCBIN_PREPEND;
    case MCBIN_GATQ:     return MCBIN_GAT;
    case MCBIN_GATKQ:    return MCBIN_GATK;
    default:
        *quiet = 0;
        return op;
    }
}

/* A binary expiration (unsigned 32 bits) as the text protocol reads one (a signed 32-bit
 * number): past INT32_MAX, an absolute time after January 2038, it is capped there. */
static uint32_t mcbin_exptime(const char *p)
{
    uint32_t t = mcbin_rd32(p);
    return t > INT32_MAX ? (uint32_t)INT32_MAX : t;
}

/* Append " b" when the key went as base64, then the line's end. */
static int mcbin_line_end(struct buf *text, int b64)
{
    return buf_append_str(text, b64 ? " b\r\n" : "\r\n");
}

/*
 * One frame at p[0..n): >0 bytes consumed (the header, extras and key; a value or a
 * swallowed body is left to the caller through b->in; when the connection ends, the
 * header, and MCBIN_IN_CLOSED drops the rest), 0 when the prefix is not all
 * here, -ENOMEM. The checks and their order are memcached 1.6's
 * (try_read_command_binary, dispatch_bin_command).
 */
static int mcbin_frame(struct mcbin *b, const char *p, size_t n, struct buf *text)
{
    if (n < MCBIN_HDR_LEN)
        return 0;

    struct mcbin_pend pd;
    memset(&pd, 0, sizeof(pd));
    pd.opcode = (uint8_t)p[1];
    memcpy(&pd.opaque, p + 12, 4);

    if ((uint8_t)p[0] != MCBIN_REQ_MAGIC) {
        /* memcached closes without a word */
        b->in = MCBIN_IN_CLOSED;
        return buf_append_str(text, "quit\r\n") < 0 ? -ENOMEM : MCBIN_HDR_LEN;
    }
    uint16_t keylen = mcbin_rd16(p + 2);
    uint8_t extlen = (uint8_t)p[4];
    uint32_t bodylen = mcbin_rd32(p + 8);
    uint64_t cas = mcbin_rd64(p + 16);

    /* memcached waits for the key's bytes before these checks; the answer is the same */
    if (keylen > bodylen || (uint32_t)keylen + extlen > bodylen)
        return mcbin_fatal(b, &pd, MCBIN_UNKNOWN, text) < 0 ? -ENOMEM : MCBIN_HDR_LEN;
    if (bodylen > MCBIN_BODY_MAX || keylen > MCBIN_KEY_MAX)
        return mcbin_fatal(b, &pd, MCBIN_EINVAL, text) < 0 ? -ENOMEM : MCBIN_HDR_LEN;

    size_t pre = (size_t)MCBIN_HDR_LEN + extlen + keylen;
    if (n < pre)
        return 0;
    const char *ext = p + MCBIN_HDR_LEN;
    const char *key = ext + extlen;
    uint32_t rest = bodylen - extlen - keylen;
    int quiet;
    uint8_t op = mcbin_base(pd.opcode, &quiet);
    int rc = 0, b64 = 0, bad = 0;

    pd.flags = quiet ? MCBIN_PF_QUIET : 0;
    pd.keylen = keylen;

    switch (op) {
    case MCBIN_VERSION:
        if (extlen != 0 || keylen != 0 || bodylen != 0) {
            bad = 1;
            break;
        }
        pd.kind = MCBIN_K_VERSION;
        rc = buf_append_str(text, "version\r\n");
        break;
    case MCBIN_FLUSH:
        if (keylen != 0 || bodylen != extlen || (extlen != 0 && extlen != 4)) {
            bad = 1;
            break;
        }
        pd.kind = MCBIN_K_FLUSH;
        if (extlen == 4 && mcbin_rd32(ext) != 0)
            rc = buf_appendf(text, "flush_all %" PRIu32 "\r\n", mcbin_exptime(ext));
        else
            rc = buf_append_str(text, "flush_all\r\n");
        break;
    case MCBIN_NOOP:
        if (extlen != 0 || keylen != 0 || bodylen != 0) {
            bad = 1;
            break;
        }
        return mcbin_local(b, &pd, MCBIN_OK, text) < 0 ? -ENOMEM : (int)pre;
    case MCBIN_QUIT:
        if (extlen != 0 || keylen != 0 || bodylen != 0) {
            bad = 1;
            break;
        }
        /* the reply (none for quitq), then the connection closes */
        pd.kind = MCBIN_K_LOCAL;
        pd.status = MCBIN_OK;
        b->in = MCBIN_IN_CLOSED;
        if (mcbin_push(b, &pd, NULL) < 0 || buf_append_str(text, "mn\r\nquit\r\n") < 0)
            return -ENOMEM;
        return (int)pre;
    case MCBIN_SET:
    case MCBIN_ADD:
    case MCBIN_REPLACE:
        if (extlen != 8 || keylen == 0 || bodylen < (uint32_t)keylen + 8) {
            bad = 1;
            break;
        }
        pd.kind = MCBIN_K_STORE;
        pd.mode = cas != 0 ? MCBIN_M_CAS : op == MCBIN_ADD ? MCBIN_M_ADD
                : op == MCBIN_REPLACE ? MCBIN_M_REPLACE : MCBIN_M_SET;
        if (buf_append_str(text, "ms ") < 0)
            return -ENOMEM;
        b64 = mcbin_key(text, key, keylen, &rc);
        if (rc == 0)
            rc = buf_appendf(text, " %" PRIu32 " F%" PRIu32 " T%" PRIu32 " c", rest,
                             mcbin_rd32(ext), mcbin_exptime(ext + 4));
        if (rc == 0 && cas != 0)
            rc = buf_appendf(text, " C%" PRIu64, cas);
        else if (rc == 0 && op != MCBIN_SET)
            rc = buf_append_str(text, op == MCBIN_ADD ? " ME" : " MR");
        if (rc == 0)
            rc = mcbin_line_end(text, b64);
        b->in = MCBIN_IN_VALUE;
        b->in_left = rest;
        break;
    case MCBIN_APPEND:
    case MCBIN_PREPEND:
        if (keylen == 0 || extlen != 0) {
            bad = 1;
            break;
        }
        pd.kind = MCBIN_K_STORE;
        pd.mode = MCBIN_M_APPEND;
        if (buf_append_str(text, "ms ") < 0)
            return -ENOMEM;
        b64 = mcbin_key(text, key, keylen, &rc);
        if (rc == 0)
            rc = buf_appendf(text, " %" PRIu32 " %s c", rest, op == MCBIN_APPEND ? "MA" : "MP");
        if (rc == 0 && cas != 0)
            rc = buf_appendf(text, " C%" PRIu64, cas);
        if (rc == 0)
            rc = mcbin_line_end(text, b64);
        b->in = MCBIN_IN_VALUE;
        b->in_left = rest;
        break;
    case MCBIN_GET:
    case MCBIN_GETK:
        if (extlen != 0 || bodylen != keylen || keylen == 0) {
            bad = 1;
            break;
        }
        pd.kind = MCBIN_K_GET;
        if (op == MCBIN_GETK)
            pd.flags |= MCBIN_PF_KEY;
        if (buf_append_str(text, "mg ") < 0)
            return -ENOMEM;
        b64 = mcbin_key(text, key, keylen, &rc);
        if (rc == 0)
            rc = buf_append_str(text, " f v c");
        if (rc == 0)
            rc = mcbin_line_end(text, b64);
        break;
    case MCBIN_TOUCH:
    case MCBIN_GAT:
    case MCBIN_GATK:
        if (extlen != 4 || keylen == 0) {
            bad = 1;
            break;
        }
        pd.kind = op == MCBIN_TOUCH ? MCBIN_K_TOUCH : MCBIN_K_GET;
        if (op == MCBIN_GATK)
            pd.flags |= MCBIN_PF_KEY;
        if (buf_append_str(text, "mg ") < 0)
            return -ENOMEM;
        b64 = mcbin_key(text, key, keylen, &rc);
        if (rc == 0)
            rc = buf_appendf(text, " T%" PRIu32 " f%s c", mcbin_exptime(ext),
                             op == MCBIN_TOUCH ? "" : " v");
        if (rc == 0)
            rc = mcbin_line_end(text, b64);
        break;
    case MCBIN_DELETE:
        if (keylen == 0 || extlen != 0 || bodylen != keylen) {
            bad = 1;
            break;
        }
        pd.kind = MCBIN_K_DELETE;
        if (buf_append_str(text, "md ") < 0)
            return -ENOMEM;
        b64 = mcbin_key(text, key, keylen, &rc);
        if (rc == 0 && cas != 0)
            rc = buf_appendf(text, " C%" PRIu64, cas);
        if (rc == 0)
            rc = mcbin_line_end(text, b64);
        break;
    case MCBIN_INCR:
    case MCBIN_DECR:
        if (keylen == 0 || extlen != 20 || bodylen != (uint32_t)keylen + 20) {
            bad = 1;
            break;
        }
        pd.kind = MCBIN_K_ARITH;
        if (buf_append_str(text, "ma ") < 0)
            return -ENOMEM;
        b64 = mcbin_key(text, key, keylen, &rc);
        if (rc == 0)
            rc = buf_appendf(text, " D%" PRIu64 " M%c v c", mcbin_rd64(ext),
                             op == MCBIN_INCR ? 'I' : 'D');
        /* expiration 0xffffffff: no item is created on a miss */
        if (rc == 0 && mcbin_rd32(ext + 16) != 0xffffffffu)
            rc = buf_appendf(text, " N%" PRIu32 " J%" PRIu64, mcbin_exptime(ext + 16),
                             mcbin_rd64(ext + 8));
        if (rc == 0 && cas != 0)
            rc = buf_appendf(text, " C%" PRIu64, cas);
        if (rc == 0)
            rc = mcbin_line_end(text, b64);
        break;
    case MCBIN_STAT:
        if (extlen != 0) {
            bad = 1;
            break;
        }
        for (uint16_t i = 0; i < keylen; i++) {
            uint8_t ch = (uint8_t)key[i];
            if (ch < 0x20 || ch >= 0x7f)   /* no text stats group has such a name */
                return mcbin_local(b, &pd, MCBIN_ENOENT, text) < 0 ? -ENOMEM : (int)pre;
        }
        pd.kind = MCBIN_K_STAT;
        rc = buf_append_str(text, keylen ? "stats " : "stats");
        if (rc == 0)
            rc = buf_append(text, key, keylen);
        if (rc == 0)
            rc = buf_append_str(text, "\r\n");
        break;
    case MCBIN_SASL_LIST:
        if (extlen != 0 || keylen != 0 || bodylen != 0) {
            bad = 1;
            break;
        }
        /* memcached without SASL */
        return mcbin_local(b, &pd, MCBIN_UNKNOWN, text) < 0 ? -ENOMEM : (int)pre;
    case MCBIN_SASL_AUTH:
    case MCBIN_SASL_STEP:
        if (extlen != 0 || keylen == 0) {
            bad = 1;
            break;
        }
        if (mcbin_local(b, &pd, MCBIN_UNKNOWN, text) < 0)
            return -ENOMEM;
        b->in = rest ? MCBIN_IN_SWALLOW : MCBIN_IN_FRAME;
        b->in_left = rest;
        return (int)pre;
    default:
        /* memcached swallows bodylen more bytes after the header, extras and key
         * (write_bin_error(..., bodylen)): those of an unknown frame's body and,
         * when it had extras or a key, as many of what follows */
        if (mcbin_local(b, &pd, MCBIN_UNKNOWN, text) < 0)
            return -ENOMEM;
        b->in = bodylen ? MCBIN_IN_SWALLOW : MCBIN_IN_FRAME;
        b->in_left = bodylen;
        return (int)pre;
    }
    if (bad)
        return mcbin_fatal(b, &pd, MCBIN_EINVAL, text) < 0 ? -ENOMEM : MCBIN_HDR_LEN;
    if (rc < 0 || mcbin_push(b, &pd, key) < 0)
        return -ENOMEM;
    if (b->in == MCBIN_IN_VALUE && b->in_left == 0) {
        b->in = MCBIN_IN_FRAME;
        if (buf_append_str(text, "\r\n") < 0)
            return -ENOMEM;
    }
    return (int)pre;
}

int mcbin_decode(struct mcbin *b, const char *in, size_t len, size_t *used, struct buf *text)
{
    size_t pos = 0;
    int rc = 0;

    while (pos < len) {
        size_t avail = len - pos;
        if (b->in == MCBIN_IN_CLOSED) {
            pos = len;
            break;
        }
        if (b->in == MCBIN_IN_SWALLOW || b->in == MCBIN_IN_VALUE) {
            size_t k = avail < b->in_left ? avail : (size_t)b->in_left;
            if (b->in == MCBIN_IN_VALUE && buf_append(text, in + pos, k) < 0) {
                rc = -ENOMEM;
                break;
            }
            pos += k;
            b->in_left -= k;
            if (b->in_left > 0)
                break;
            if (b->in == MCBIN_IN_VALUE && buf_append_str(text, "\r\n") < 0) {
                rc = -ENOMEM;
                break;
            }
            b->in = MCBIN_IN_FRAME;
            continue;
        }
        int n = mcbin_frame(b, in + pos, avail, text);
        if (n < 0) {
            rc = n;
            break;
        }
        if (n == 0)
            break;
        pos += (size_t)n;
    }
    *used = pos;
    return rc;
}

/* ------------------------------------------------------------------ encoding */

static void mcbin_peek(const struct mcbin *b, struct mcbin_pend *pd, const char **key)
{
    memcpy(pd, buf_rptr(&b->pend), sizeof(*pd));
    *key = buf_rptr(&b->pend) + sizeof(*pd);
}

static void mcbin_pop(struct mcbin *b)
{
    struct mcbin_pend pd;
    memcpy(&pd, buf_rptr(&b->pend), sizeof(pd));
    buf_consume(&b->pend, sizeof(pd) + ((pd.flags & MCBIN_PF_KEY) ? pd.keylen : 0));
    b->npend--;
}

/* Whether line[0..len) starts with the word w (followed by a space or its end). */
static int mcbin_word(const char *line, size_t len, const char *w)
{
    size_t n = strlen(w);
    return len >= n && memcmp(line, w, n) == 0 && (len == n || line[n] == ' ');
}

/* A meta reply's flag f's number (f<digits>), 0 when absent. */
static uint64_t mcbin_meta_num(const char *line, size_t len, char f)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (line[i] == ' ' && line[i + 1] == f) {
            uint64_t v = 0;
            for (size_t j = i + 2; j < len && line[j] >= '0' && line[j] <= '9'; j++)
                v = v * 10 + (uint64_t)(line[j] - '0');
            return v;
        }
    }
    return 0;
}

/* VA's length: the number after "VA ". */
static uint64_t mcbin_va_len(const char *line, size_t len)
{
    uint64_t v = 0;
    for (size_t j = 3; j < len && line[j] >= '0' && line[j] <= '9'; j++)
        v = v * 10 + (uint64_t)(line[j] - '0');
    return v;
}

/* An error line of the text protocol as memcached's binary status. */
static int mcbin_text_error(struct buf *out, const struct mcbin_pend *pd, const char *line,
                            size_t len)
{
    static const char too_large[] = "SERVER_ERROR object too large";
    static const char oom[] = "SERVER_ERROR out of memory";
    static const char nonnum[] = "CLIENT_ERROR cannot increment or decrement non-numeric";
    static const char noflush[] = "CLIENT_ERROR flush_all is not allowed";

    if (len >= sizeof(too_large) - 1 && memcmp(line, too_large, sizeof(too_large) - 1) == 0)
        return mcbin_error(out, pd, MCBIN_E2BIG, NULL, 0);
    if (len >= sizeof(oom) - 1 && memcmp(line, oom, sizeof(oom) - 1) == 0)
        return mcbin_error(out, pd, MCBIN_ENOMEM, NULL, 0);
    if (len >= sizeof(nonnum) - 1 && memcmp(line, nonnum, sizeof(nonnum) - 1) == 0)
        return mcbin_error(out, pd, MCBIN_DELTA_BADVAL, NULL, 0);
    if (len >= sizeof(noflush) - 1 && memcmp(line, noflush, sizeof(noflush) - 1) == 0)
        return mcbin_error(out, pd, MCBIN_AUTH_ERROR, NULL, 0);
    if (mcbin_word(line, len, "SERVER_ERROR")) {
        size_t skip = len > 13 ? 13 : len;     /* the reason after "SERVER_ERROR " */
        return mcbin_error(out, pd, MCBIN_ETMPFAIL, line + skip, len - skip);
    }
    if (mcbin_word(line, len, "ERROR"))
        return mcbin_error(out, pd, pd->kind == MCBIN_K_STAT ? MCBIN_ENOENT : MCBIN_UNKNOWN,
                           NULL, 0);
    return mcbin_error(out, pd, pd->kind == MCBIN_K_STAT ? MCBIN_ENOENT : MCBIN_EINVAL, NULL, 0);
}

/* A success without a body (silent for a quiet opcode). */
static int mcbin_ok(struct buf *out, const struct mcbin_pend *pd, uint64_t cas)
{
    if (pd->flags & MCBIN_PF_QUIET)
        return 0;
    return mcbin_header(out, pd, MCBIN_OK, 0, 0, 0, cas);
}

/*
 * The reply unit whose line is line[0..llen) (CRLF excluded; line + lspan is the byte
 * after its '\n'), more[0..mlen) what follows it. Returns the bytes consumed from the
 * line's start (> 0), 0 when the unit is not all here, or a negative errno.
 */
static int mcbin_unit(struct mcbin *b, const char *line, size_t llen, size_t lspan,
                      size_t mlen, struct buf *out)
{
    struct mcbin_pend pd;
    const char *key;
    int rc = 0;

    mcbin_peek(b, &pd, &key);
    uint16_t klen = (pd.flags & MCBIN_PF_KEY) ? pd.keylen : 0;

    if (pd.kind == MCBIN_K_STAT) {
        if (mcbin_word(line, llen, "STAT")) {
            /* "STAT name value": one frame, the name as its key */
            const char *name = line + 5;
            size_t rest = llen > 5 ? llen - 5 : 0;
            const char *sp = memchr(name, ' ', rest);
            size_t nlen = sp ? (size_t)(sp - name) : rest;
            size_t vlen = sp ? rest - nlen - 1 : 0;
            if (nlen > UINT16_MAX)
                return -EPROTO;
            if (mcbin_header(out, &pd, MCBIN_OK, 0, (uint16_t)nlen, (uint32_t)(nlen + vlen), 0) < 0 ||
                buf_append(out, name, nlen) < 0 || (vlen && buf_append(out, sp + 1, vlen) < 0))
                return -ENOMEM;
            return (int)lspan;
        }
        if (mcbin_word(line, llen, "END") || mcbin_word(line, llen, "RESET") ||
            mcbin_word(line, llen, "OK"))
            rc = mcbin_header(out, &pd, MCBIN_OK, 0, 0, 0, 0);
        else
            rc = mcbin_text_error(out, &pd, line, llen);
        mcbin_pop(b);
        return rc < 0 ? rc : (int)lspan;
    }

    if (mcbin_word(line, llen, "VA")) {
        uint64_t vlen = mcbin_va_len(line, llen);
        uint64_t cas = mcbin_meta_num(line, llen, 'c');
        if (pd.kind == MCBIN_K_ARITH) {
            if (mlen < vlen + 2)
                return 0;
            if (vlen > 20)
                return -EPROTO;
            uint64_t v = 0;
            for (uint64_t i = 0; i < vlen; i++)
                v = v * 10 + (uint64_t)(line[lspan + i] - '0');
            if (!(pd.flags & MCBIN_PF_QUIET)) {
                uint8_t be[8];
                mcbin_wr64(be, v);
                if (mcbin_header(out, &pd, MCBIN_OK, 0, 0, 8, cas) < 0 ||
                    buf_append(out, be, 8) < 0)
                    return -ENOMEM;
            }
            mcbin_pop(b);
            return (int)(lspan + vlen + 2);
        }
        if (pd.kind != MCBIN_K_GET || vlen > UINT32_MAX - 4 - klen)
            return -EPROTO;
        /* a hit is answered even for a quiet opcode; the value streams after */
        uint8_t fl[4];
        mcbin_wr32(fl, (uint32_t)mcbin_meta_num(line, llen, 'f'));
        if (mcbin_header(out, &pd, MCBIN_OK, 4, klen, (uint32_t)(4 + klen + vlen), cas) < 0 ||
            buf_append(out, fl, 4) < 0 || (klen && buf_append(out, key, klen) < 0))
            return -ENOMEM;
        b->out = MCBIN_OUT_VALUE;
        b->out_left = vlen;
        b->out_crlf = 2;
        return (int)lspan;
    }

    switch (pd.kind) {
    case MCBIN_K_GET:
    case MCBIN_K_TOUCH:
        if (mcbin_word(line, llen, "HD") && pd.kind == MCBIN_K_TOUCH) {
            uint8_t fl[4];
            mcbin_wr32(fl, (uint32_t)mcbin_meta_num(line, llen, 'f'));
            if (mcbin_header(out, &pd, MCBIN_OK, 4, 0, 4, mcbin_meta_num(line, llen, 'c')) < 0 ||
                buf_append(out, fl, 4) < 0)
                rc = -ENOMEM;
        } else if (mcbin_word(line, llen, "EN")) {
            if (pd.flags & MCBIN_PF_QUIET)
                rc = 0;
            else if (klen)      /* getk's miss names the key instead of a text */
                rc = (mcbin_header(out, &pd, MCBIN_ENOENT, 0, klen, klen, 0) < 0 ||
                      buf_append(out, key, klen) < 0) ? -ENOMEM : 0;
            else
                rc = mcbin_error(out, &pd, MCBIN_ENOENT, NULL, 0);
        } else {
            rc = mcbin_text_error(out, &pd, line, llen);
        }
        break;
    case MCBIN_K_STORE:
        if (mcbin_word(line, llen, "HD"))
            rc = mcbin_ok(out, &pd, mcbin_meta_num(line, llen, 'c'));
        else if (mcbin_word(line, llen, "NS"))
            rc = mcbin_error(out, &pd, pd.mode == MCBIN_M_ADD ? MCBIN_EEXISTS
                             : pd.mode == MCBIN_M_REPLACE ? MCBIN_ENOENT : MCBIN_NOT_STORED,
                             NULL, 0);
        else if (mcbin_word(line, llen, "EX"))
            rc = mcbin_error(out, &pd, MCBIN_EEXISTS, NULL, 0);
        else if (mcbin_word(line, llen, "NF"))
            rc = mcbin_error(out, &pd, MCBIN_ENOENT, NULL, 0);
        else
            rc = mcbin_text_error(out, &pd, line, llen);
        break;
    case MCBIN_K_DELETE:
    case MCBIN_K_ARITH:
        if (mcbin_word(line, llen, "HD") && pd.kind == MCBIN_K_DELETE)
            rc = mcbin_ok(out, &pd, 0);
        else if (mcbin_word(line, llen, "NF"))
            rc = mcbin_error(out, &pd, MCBIN_ENOENT, NULL, 0);
        else if (mcbin_word(line, llen, "EX"))
            rc = mcbin_error(out, &pd, MCBIN_EEXISTS, NULL, 0);
        else if (mcbin_word(line, llen, "NS"))
            rc = mcbin_error(out, &pd, MCBIN_NOT_STORED, NULL, 0);
        else
            rc = mcbin_text_error(out, &pd, line, llen);
        break;
    case MCBIN_K_LOCAL:
        if (!mcbin_word(line, llen, "MN"))
            rc = mcbin_text_error(out, &pd, line, llen);
        else if (pd.status == MCBIN_OK)
            rc = mcbin_ok(out, &pd, 0);
        else
            rc = mcbin_error(out, &pd, pd.status, NULL, 0);
        break;
    case MCBIN_K_VERSION:
        if (mcbin_word(line, llen, "VERSION") && llen > 8)
            rc = (mcbin_header(out, &pd, MCBIN_OK, 0, 0, (uint32_t)(llen - 8), 0) < 0 ||
                  buf_append(out, line + 8, llen - 8) < 0) ? -ENOMEM : 0;
        else
            rc = mcbin_text_error(out, &pd, line, llen);
        break;
    case MCBIN_K_FLUSH:
        if (mcbin_word(line, llen, "OK"))
            rc = mcbin_ok(out, &pd, 0);
        else
            rc = mcbin_text_error(out, &pd, line, llen);
        break;
    default:
        return -EPROTO;
    }
    if (rc < 0)
        return rc;
    mcbin_pop(b);
    return (int)lspan;
}

int mcbin_encode(struct mcbin *b, const char *in, size_t len, size_t *used, struct buf *out)
{
    size_t pos = 0;
    int rc = 0;

    while (pos < len) {
        if (b->out == MCBIN_OUT_VALUE) {
            size_t avail = len - pos;
            size_t k = avail < b->out_left ? avail : (size_t)b->out_left;
            if (k > 0 && buf_append(out, in + pos, k) < 0) {
                rc = -ENOMEM;
                break;
            }
            pos += k;
            b->out_left -= k;
            if (b->out_left > 0)
                break;
            while (b->out_crlf > 0 && pos < len) {
                pos++;
                b->out_crlf--;
            }
            if (b->out_crlf > 0)
                break;
            b->out = MCBIN_OUT_REPLY;
            mcbin_pop(b);
            continue;
        }
        if (b->npend == 0) {
            rc = -EPROTO;
            break;
        }
        const char *line = in + pos;
        const char *nl = memchr(line, '\n', len - pos);
        if (nl == NULL)
            break;
        size_t lspan = (size_t)(nl - line) + 1;
        size_t llen = lspan - 1;
        if (llen > 0 && line[llen - 1] == '\r')
            llen--;
        int n = mcbin_unit(b, line, llen, lspan, len - pos - lspan, out);
        if (n < 0) {
            rc = n;
            break;
        }
        if (n == 0)
            break;
        pos += (size_t)n;
    }
    *used = pos;
    return rc;
}
