/* The Redis protocol's request parser: RESP arrays and inline lines, parsed in place and resumable. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/invariant.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "proto/redis_int.h"
#include "lib/util.h"

/*
 * Requests.
 *
 * A request is a RESP array of bulk strings, or an inline line of words
 * (telnet, nc). Both are parsed in place: every argument is recorded as an
 * offset/length pair in p->keys (the parser's array, grown once per
 * connection), then the command table decides the kind and the keys are
 * compacted in place at the front of that same array.
 *
 * Resuming: while a RESP request is incomplete, p->u.redis.state is
 * REQ_MULTIBULK with argc the argument count, done the arguments already
 * recorded, start where the request starts (after skipped empty requests)
 * and scan the offset of the next argument. Only the bounded "$<len>" line
 * of the argument being waited for is re-read; a 100 MB value is not
 * rescanned.
 *
 * Agreement with the server. Every byte the proxy forwards is read by
 * redis-server 7.0 (networking.c) exactly as the proxy read it:
 *   - numbers ("*<n>", "$<n>", numkeys) follow string2ll: no sign but '-',
 *     no leading zero, no "-0", no space; anything else is the protocol
 *     error Redis itself answers, and the client is closed as Redis does;
 *   - a header line is found by its '\r' (Redis: strchr, so a NUL before
 *     it would make Redis wait forever; the proxy refuses it);
 *   - an inline line (telnet, nc) is split as sdssplitargs splits it
 *     (quotes, escapes, \xHH) and always re-sent as a RESP array written
 *     into parser memory (p->dec), so the server never parses inline text;
 *     an inline line with a NUL, which Redis would wait on forever (strchr
 *     stops there), closes the client with an error instead.
 *
 * Annotations for the same protocol's forward/frag_write/local/key_bytes
 * (req->u.redis): start, where the request starts in buf (empty requests
 * "*0\r\n" or blank lines before it are consumed with it and not
 * forwarded); argc, the argument count (for LOCAL requests p->keys[0..argc)
 * still holds every argument when local() is called); inl, for an inline
 * request, its RESP re-encoding (inl_len bytes), which keys[] are offsets
 * into instead of buf. Fragments are always written as RESP arrays.
 *
 * Error replies that need formatting (unknown command, wrong arity ...) are
 * written into p->u.redis.err: memory the parser owns, valid until its next
 * call, as req->err must be.
 */

#define REQ_IDLE        0
#define REQ_MULTIBULK   1


#define REDIS_MAX_REQ           (1024u * 1024 * 1024) /* Redis's client-query-buffer-limit */
#define REDIS_UNAUTH_MAX_ARGS   10u                   /* Redis's limits before AUTH */
#define REDIS_UNAUTH_MAX_BULK   16384u

#define ERR_OOM         "-ERR out of memory\r\n"
#define ERR_MBULK       "-ERR Protocol error: invalid multibulk length\r\n"
#define ERR_BULK        "-ERR Protocol error: invalid bulk length\r\n"
#define ERR_BIG_MBULK   "-ERR Protocol error: too big mbulk count string\r\n"
#define ERR_BIG_BULK    "-ERR Protocol error: too big bulk count string\r\n"
#define ERR_BIG_INLINE  "-ERR Protocol error: too big inline request\r\n"
#define ERR_BIG_REQ     "-ERR Protocol error: request larger than 1 GiB\r\n"
#define ERR_UNBALANCED  "-ERR Protocol error: unbalanced quotes in request\r\n"
#define ERR_INLINE_NUL  "-ERR Protocol error: NUL byte in inline request\r\n"
#define ERR_HDR_NUL     "-ERR Protocol error: NUL byte in a header line\r\n"
#define ERR_UNAUTH_MBULK "-ERR Protocol error: unauthenticated multibulk length\r\n"
#define ERR_UNAUTH_BULK "-ERR Protocol error: unauthenticated bulk length\r\n"

static void req_reset(struct proto_parser *p)
{
    struct proto_redis_parser *r = &p->u.redis;
    r->state = REQ_IDLE;
    r->scan = r->start = r->argc = r->done = 0;
}

/* A fatal error: msg[0..len) is the reply, then the client is closed. */
static int req_fatal_n(struct proto_parser *p, struct proto_req *req, const char *msg,
                       size_t len)
{
    req_reset(p);
    req->kind = PROTO_REQ_ERROR;
    req->flags |= PROTO_RF_CLOSE;
    req->err = msg;
    req->err_len = (uint32_t)len;
    return -1;
}

static int req_fatal(struct proto_parser *p, struct proto_req *req, const char *msg)
{
    return req_fatal_n(p, req, msg, strlen(msg));
}

/* isspace() in the C locale: what sdssplitargs skips between arguments. */
static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* What ends an unquoted inline argument in sdssplitargs: not \v or \f,
 * which it keeps inside the argument though it skips them before one. */
static int is_word_end(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*
 * Split the inline line s[0..n) (no NUL in it) into arguments exactly as
 * Redis's sdssplitargs does: blanks (isspace) between arguments; "..." with
 * the escapes \xHH \n \r \t \b \a and \<any>; '...' with \' only; a quote
 * may open inside a word ("a\"b c\"" is one argument), and a closing quote
 * must be followed by a blank or the end. The decoded bytes of argument i
 * are written to out + arg[i].off (out holds n bytes: decoding never
 * grows), at most max arguments. Returns the count, -1 for unbalanced
 * quotes (Redis closes the connection), -2 for more than max.
 */
static int64_t inline_split(const char *s, size_t n, char *out, struct proto_key *arg,
                            uint32_t max)
{
    size_t i = 0, o = 0;
    uint32_t argc = 0;

    for (;;) {
        while (i < n && is_space(s[i]))
            i++;
        if (i == n)
            return argc;
        if (argc == max)
            return -2;
        size_t begin = o;
        char quote = 0;             /* '"' or '\'' while inside quotes */
        for (;;) {
            if (quote == 0) {
                if (i == n || is_word_end(s[i]))
                    break;
                if (s[i] == '"' || s[i] == '\'')
                    quote = s[i++];
                else
                    out[o++] = s[i++];
                continue;
            }
            if (i == n)
                return -1;          /* unterminated quotes */
            if (quote == '"' && s[i] == '\\' && i + 3 < n && s[i + 1] == 'x' &&
                hex_value(s[i + 2]) >= 0 && hex_value(s[i + 3]) >= 0) {
                out[o++] = (char)(hex_value(s[i + 2]) * 16 + hex_value(s[i + 3]));
                i += 4;
            } else if (quote == '"' && s[i] == '\\' && i + 1 < n) {
                char c = s[i + 1];
                switch (c) {
                case 'n': c = '\n'; break;
                case 'r': c = '\r'; break;
                case 't': c = '\t'; break;
                case 'b': c = '\b'; break;
                case 'a': c = '\a'; break;
                default: break;
                }
                out[o++] = c;
                i += 2;
            } else if (quote == '\'' && s[i] == '\\' && i + 1 < n && s[i + 1] == '\'') {
                out[o++] = '\'';
                i += 2;
            } else if (s[i] == quote) {
                if (i + 1 < n && !is_space(s[i + 1]))
                    return -1;      /* the closing quote must end the argument */
                i++;
                break;
            } else {
                out[o++] = s[i++];
            }
        }
        arg[argc].off = (uint32_t)begin;
        arg[argc].len = (uint32_t)(o - begin);
        argc++;
    }
}

/* ---------------------------------------------------------- parse_req */

/* Finish a request spanning buf[start..end) with argc arguments recorded
 * in p->keys as offsets into base (buf, or an inline request's RESP). */
static int req_done(struct proto_parser *p, const char *base, size_t start, size_t end,
                    uint32_t argc, struct proto_req *req)
{
    req_reset(p);
    req->hdr_len = (uint32_t)end;
    req->u.redis.start = (uint32_t)start;
    req->u.redis.argc = argc;
    redis__req_classify_all(p, base, argc, req);
    /* The keys were compacted in place from the arguments: never more of them. */
    RL_ASSERT(start <= end && req->nkeys <= argc);
    req->keys = p->keys;
    return (int)end;
}

/*
 * A request whose last argument (n bytes at data) is large and still
 * arriving: classify it now with the bytes of that argument that are here,
 * and when it goes to one server and that argument is not a key, end its
 * header at the argument's data and make the argument (and its CRLF, which
 * Redis skips unread as the proxy does) the body, so that the core can
 * forward it as it arrives. A refusal (unknown command, arity, NOAUTH ...)
 * is returned the same way, its body to be dropped. Returns 1 with req
 * filled in, 0 to wait for the whole request as usual (nothing changed).
 */
static int req_split_body(struct proto_parser *p, const char *buf, size_t len, size_t start,
                          size_t data, uint64_t n, uint32_t argc, struct proto_req *req)
{
    uint32_t last = argc - 1;
    p->keys[last].off = (uint32_t)data;
    p->keys[last].len = (uint32_t)RL_MIN((uint64_t)(len - data), n);  /* what is here */
    redis__req_classify_all(p, buf, argc, req);
    int ok = req->kind == PROTO_REQ_ERROR || req->kind == PROTO_REQ_SINGLE;
    for (uint32_t k = 0; ok && req->kind == PROTO_REQ_SINGLE && k < req->nkeys; k++)
        ok = p->keys[k].off != (uint32_t)data;
    if (!ok) {
        uint16_t cmd = REDIS_CMD_NONE;
        memset(req, 0, sizeof(*req));
        req->cmd = cmd;
        req->keys = p->keys;
        return 0;
    }
    req_reset(p);
    req->hdr_len = (uint32_t)data;
    req->body_len = n + 2;
    req->u.redis.start = (uint32_t)start;
    req->u.redis.argc = argc;
    req->keys = p->keys;
    return 1;
}

static size_t dec_digits(uint64_t v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/*
 * An inline request: the line at buf[pos..], split as Redis splits it and
 * re-encoded as a RESP array in p->dec (after the decoded arguments, which
 * it is written from): req->u.redis.inl. keys[] are offsets into it.
 */
static int parse_inline(struct proto_parser *p, const char *buf, size_t len, size_t pos,
                        struct proto_req *req)
{
    const char *nl = memchr(buf + pos, '\n', len - pos);
    size_t eol = nl ? (size_t)(nl - buf) : len;
    /* Redis finds the '\n' with strchr: past a NUL it never finds it and
     * waits on that connection for good. Refuse at once instead. */
    if (memchr(buf + pos, '\0', eol - pos) != NULL)
        return req_fatal(p, req, ERR_INLINE_NUL);
    if (eol - pos > REDIS_MAX_INLINE)
        return req_fatal(p, req, ERR_BIG_INLINE);
    if (nl == NULL)
        return 0;
    size_t end = eol;
    if (end > pos && buf[end - 1] == '\r')
        end--;

    /* Decoded arguments: at most the line's bytes, at most one argument
     * per two bytes of line. */
    size_t n = end - pos;
    uint32_t maxargs = (uint32_t)(n / 2 + 1);
    if (proto__keys_reserve(p, maxargs) < 0 || proto__dec_reserve(p, (uint32_t)n + 1) < 0)
        return req_fatal(p, req, ERR_OOM);
    int64_t argc = inline_split(buf + pos, n, p->dec, p->keys, maxargs);
    if (argc < 0)
        return req_fatal(p, req, ERR_UNBALANCED);
    if (argc == 0)              /* the caller skips blank lines: cannot happen */
        return req_fatal(p, req, ERR_UNBALANCED);
    size_t resp = 1 + dec_digits((uint64_t)argc) + 2;
    for (int64_t a = 0; a < argc; a++)
        resp += 1 + dec_digits(p->keys[a].len) + 2 + p->keys[a].len + 2;
    if (n + resp > UINT32_MAX / 2 || proto__dec_reserve(p, (uint32_t)(n + resp)) < 0)
        return req_fatal(p, req, ERR_OOM);
    char *w = p->dec + n;
    w += sprintf(w, "*%" PRId64 "\r\n", argc);
    for (int64_t a = 0; a < argc; a++) {
        struct proto_key *k = &p->keys[a];
        w += sprintf(w, "$%" PRIu32 "\r\n", k->len);
        memmove(w, p->dec + k->off, k->len);
        k->off = (uint32_t)(w - (p->dec + n));
        w += k->len;
        *w++ = '\r';
        *w++ = '\n';
    }
    req->u.redis.inl = p->dec + n;
    req->u.redis.inl_len = (uint32_t)resp;
    int rc = req_done(p, req->u.redis.inl, pos, eol + 1, (uint32_t)argc, req);
    if (req->nkeys > 0)
        req->flags |= PROTO_RF_KEYBYTES;    /* keys are in the re-encoding, not in buf */
    return rc;
}

/* A complete header line buf[pos..cr) Redis would not have read to its
 * '\r' (a NUL in it) gets ERR_HDR_NUL, else err: the proxy tells the NUL
 * apart only once a line is refused, off the common path. */
static int header_refused(struct proto_parser *p, struct proto_req *req, const char *buf,
                          size_t pos, int64_t cr, const char *err)
{
    if (memchr(buf + pos, '\0', (size_t)cr - pos) != NULL)
        return req_fatal(p, req, ERR_HDR_NUL);
    return req_fatal(p, req, err);
}

/* Redis's reply to a multibulk whose next argument does not start with
 * '$', byte for byte: its text with the offending byte, a CR or LF shown as
 * a space (Redis maps them so the reply stays one line), any other byte,
 * a NUL included, as it is. */
static int req_expected_dollar(struct proto_parser *p, struct proto_req *req, char got)
{
    static const char head[] = "-ERR Protocol error: expected '$', got '";
    char *e = p->u.redis.err;
    size_t n = sizeof(head) - 1;
    memcpy(e, head, n);
    e[n++] = (got == '\r' || got == '\n') ? ' ' : got;
    memcpy(e + n, "'\r\n", 3);
    return req_fatal_n(p, req, e, n + 3);
}

int redis__parse_req(struct proto_parser *p, const char *buf, size_t len,
                     struct proto_req *req)
{
    struct proto_redis_parser *r = &p->u.redis;
    size_t pos = 0, start;
    uint64_t argc, done;
    int authed = (p->flags & PROTO_PF_AUTHED) != 0;

    memset(req, 0, sizeof(*req));
    req->cmd = REDIS_CMD_NONE;
    req->keys = p->keys;

    if (r->state == REQ_MULTIBULK) {
        /* Resumed on the same bytes, grown: the arguments recorded are still there,
         * and one at least is awaited. */
        RL_ASSERT(r->done < r->argc && r->start <= r->scan && r->scan <= len);
        argc = r->argc;
        done = r->done;
        start = r->start;
        pos = r->scan;
        goto args;
    }

    for (;;) {                  /* skip empty requests */
        if (pos >= len)
            return 0;
        if (buf[pos] != '*') {
            size_t i = pos;
            while (i < len && buf[i] != '\n' && is_space(buf[i]))
                i++;        /* the blanks sdssplitargs skips */
            if (i < len && buf[i] == '\n') {
                pos = i + 1;    /* a blank line: Redis ignores it */
                continue;
            }
            return parse_inline(p, buf, len, pos, req);
        }
        int64_t cr = redis__header_line(buf, len, pos);
        if (cr == -1)
            return req_fatal(p, req, ERR_BIG_MBULK);
        if (cr == -2)
            return req_fatal(p, req, ERR_HDR_NUL);
        if (cr == 0)
            return 0;
        int64_t n;
        if (redis__parse_num(buf + pos + 1, (size_t)cr - pos - 1, &n) < 0 || n > (int64_t)REDIS_MAX_ARGS)
            return header_refused(p, req, buf, pos, cr, ERR_MBULK);
        if (!authed && n > (int64_t)REDIS_UNAUTH_MAX_ARGS)
            return req_fatal(p, req, ERR_UNAUTH_MBULK);
        if (n <= 0) {
            pos = (size_t)cr + 2;   /* "*0" and "*-1" are ignored, as Redis does */
            continue;
        }
        start = pos;
        argc = (uint64_t)n;
        done = 0;
        pos = (size_t)cr + 2;
        break;
    }

args:
    while (done < argc) {
        if (pos >= len)
            goto more;
        /* Redis's order: the line first (a NUL anywhere from here to its
         * '\r', the first byte included, would make it wait forever), then
         * the '$', then the number. */
        int64_t cr = redis__header_line(buf, len, pos);
        if (cr == -1)
            return req_fatal(p, req, ERR_BIG_BULK);
        if (cr == -2)
            return req_fatal(p, req, ERR_HDR_NUL);
        if (cr == 0)
            goto more;
        if (buf[pos] != '$') {
            if (memchr(buf + pos, '\0', (size_t)cr - pos) != NULL)
                return req_fatal(p, req, ERR_HDR_NUL);
            return req_expected_dollar(p, req, buf[pos]);
        }
        int64_t n;
        if (redis__parse_num(buf + pos + 1, (size_t)cr - pos - 1, &n) < 0 || n < 0 ||
            n > (int64_t)REDIS_MAX_BULK)
            return header_refused(p, req, buf, pos, cr, ERR_BULK);
        if (!authed && n > (int64_t)REDIS_UNAUTH_MAX_BULK)
            return req_fatal(p, req, ERR_UNAUTH_BULK);
        size_t data = (size_t)cr + 2;
        size_t next = data + (size_t)n + 2;
        if (next - start > REDIS_MAX_REQ)
            return req_fatal(p, req, ERR_BIG_REQ);
        if (proto__keys_reserve(p, (uint32_t)done + 1) < 0)
            return req_fatal(p, req, ERR_OOM);
        if (next > len) {
            if (done + 1 == argc && p->body_min != 0 && (uint64_t)n >= p->body_min &&
                req_split_body(p, buf, len, start, data, (uint64_t)n, (uint32_t)argc, req))
                return (int)data;
            goto more;          /* the "$<n>" line is read again next time: bounded */
        }
        p->keys[done].off = (uint32_t)data;
        p->keys[done].len = (uint32_t)n;
        done++;
        pos = next;
    }
    return req_done(p, buf, start, pos, (uint32_t)argc, req);

more:
    RL_ASSERT(done < argc && start <= pos && pos <= len);
    r->state = REQ_MULTIBULK;
    r->argc = (uint32_t)argc;
    r->done = (uint32_t)done;
    r->start = (uint32_t)start;
    r->scan = (uint32_t)pos;
    req->keys = p->keys;
    return 0;
}
