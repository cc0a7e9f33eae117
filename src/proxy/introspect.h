/* Introspection, observed at each request's delivery: commandstats, errorstats, SLOWLOG, the sampled request log. */
#ifndef RL_PROXY_INTROSPECT_H
#define RL_PROXY_INTROSPECT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <uv.h>

#include "proto/proto.h"
#include "proxy/client.h"
#include "proxy/msg.h"
#include "proxy/worker.h"
#include "stats/stats.h"

struct buf;
struct conf_global;
struct hub;

/*
 * Like the counters and the hot-key sketch, an observer of every request rather than a
 * stage: client_advance calls introspect_done as it delivers each reply (in order, to the
 * client). The common case costs the two counters of the command's row (per worker and
 * pool, single writer, indexed by the protocol's command id), one subtraction with the
 * loop's cached clock (read already for the servers' latency histograms), and one test
 * that sends the rare request (slow, an error, the request log's next sample) to
 * introspect__note. The request's first MSG_HEAD_MAX bytes are copied at parse time
 * (forward_msg) for SLOWLOG's arguments and the request log's key.
 *
 * Readers on any thread (INFO commandstats, SLOWLOG, /metrics) walk every worker's pool
 * of the same name under that worker's `mu` (pools stay put), and a pool's SLOWLOG ring
 * under its own `slow_mu`, which the owner takes only to add a slow request.
 */

#define INS_ERR_MAX   128       /* distinct error prefixes kept per worker and pool, as
                                   Redis stops tracking errorstats past 128 */
#define INS_ERR_NAME  32

struct ins_err {
    char    name[INS_ERR_NAME];
    int64_t count;
};

struct ins_slow {
    uint64_t id;
    char    *resp;              /* the entry as SLOWLOG GET shows it */
    size_t   len;
};

/*
 * What every request reads lives in its wpool (ins_cmd, ins_mask, ins_slow_us,
 * ins_sample_left, ins_capture); the rest here. The command rows are a power of two
 * above ncmds: id & mask is a row, and an id beyond the protocol's (none, the proxy's
 * own last word) lands in a row past ncmds that no reader shows.
 */
struct introspect {
    uint16_t              ncmds;
    uint32_t              mask;
    struct proto_cmdstat *cmd;          /* [mask + 1] */
    atomic_uint           nerr;         /* err[0..nerr) are in use (release-stored) */
    struct ins_err        err[INS_ERR_MAX];
    uv_mutex_t            slow_mu;
    struct ins_slow      *slow;         /* ring of slow_cap, newest at slow_head - 1 */
    uint32_t              slow_cap, slow_n, slow_head;
    /* the request log */
    double                sample;       /* 0: off */
    int                   errors_all;
    int                   key_hash;
    uint64_t              rng;          /* xorshift64* state */
    uint64_t              slow_sec;     /* slow requests logged beyond the sample: in this */
    uint32_t              slow_logged;  /* second, this many (INS_SLOW_LINES_PER_S at most) */
};

#define INS_SLOW_LINES_PER_S 100

/* Set up (or update, at a reload) wp's introspection from the configuration; wp->ins is
 * allocated the first time. 0, or -ENOMEM (wp->ins stays NULL or as it was). */
int  introspect_bind(struct wpool *wp, const struct conf_global *g);
void introspect_free(struct wpool *wp);

/* The rare requests: a slow one's SLOWLOG entry, an error's counts, a request log line. */
void introspect__note(struct client *c, struct msg *m, uint64_t usec);

/* m is c's request req, parsed from the bytes at the front of c's input: keep its first
 * bytes (a fixed-size copy when the buffer's allocation has them, which it nearly always
 * has) and its size. */
static inline void introspect_capture(struct client *c, struct msg *m, const struct proto_req *req)
{
    if (!c->pool->ins_capture)
        return;
    const struct buf *in = &c->conn.ibuf;

    if (__builtin_expect(in->cap - in->rpos >= MSG_HEAD_MAX, 1)) {
        memcpy(m->head, in->data + in->rpos, MSG_HEAD_MAX);
        m->head_len = req->hdr_len;         /* clamped where it is read */
    }
}

/* Whether m was answered with an error: the proxy's (MSG_F_ERROR) or its server's (rerr),
 * read as one word (rerr and flags are neighbours in struct msg). */
#define INS_ERR_WORD_MASK (((uint32_t)MSG_F_ERROR << 16) | 0xff00u)
_Static_assert(offsetof(struct msg, rerr) + 1 == offsetof(struct msg, flags) &&
               offsetof(struct msg, lease) + 1 == offsetof(struct msg, rerr),
               "lease, rerr and flags make one 32-bit word");
static inline int introspect__errored(const struct msg *m)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t word;
    memcpy(&word, &m->lease, sizeof(word));
    return (word & INS_ERR_WORD_MASK) != 0;
#else
    return (m->flags & MSG_F_ERROR) || m->rerr;
#endif
}

/* m (a client's request) is delivered to c now, its reply in m->rsp. */
static inline void introspect_done(struct client *c, struct msg *m)
{
    struct wpool *wp = c->pool;
    uint64_t usec = worker_now_us(c->w) - m->start_us;
    struct proto_cmdstat *st = &wp->ins_cmd[m->cmd & wp->ins_mask];

    STATS_ADD(st, calls, 1);
    STATS_ADD(st, usec, usec);
    if (__builtin_expect(usec >= wp->ins_slow_us || introspect__errored(m) ||
                         --wp->ins_sample_left == 0, 0))
        introspect__note(c, m, usec);
}

/* ---- readers (any thread): the pool named `pool` over every worker of hub */
void     introspect_cmdstats(struct hub *hub, const char *pool, proto_cmdstat_fn visit, void *arg);
void     introspect_errorstats(struct hub *hub, const char *pool, proto_errstat_fn visit,
                               void *arg);
/* Newest first, at most n (n < 0: all, up to slowlog_max_len) RESP entries appended to out;
 * *count how many. 0 or -ENOMEM. */
int      introspect_slowlog_get(struct hub *hub, const char *pool, uint32_t max_len, long n,
                                struct buf *out, uint64_t *count);
uint64_t introspect_slowlog_len(struct hub *hub, const char *pool, uint32_t max_len);
void     introspect_slowlog_reset(struct hub *hub, const char *pool);

#endif
