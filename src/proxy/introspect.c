/* Introspection, observed at each request's delivery: commandstats, errorstats, SLOWLOG, the sampled request log. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "hash/hash.h"
#include "lib/buf.h"
#include "lib/log.h"
#include "lib/util.h"
#include "proxy/client.h"
#include "proxy/hub.h"
#include "proxy/introspect.h"
#include "proxy/msg.h"
#include "proxy/server.h"
#include "proxy/worker.h"
#include "stats/reqlog.h"

/* ------------------------------------------------------------------ sampling */

static uint64_t ins_rand(struct introspect *in)
{
    uint64_t x = in->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    in->rng = x;
    return x * UINT64_C(2685821657736338717);
}

/* Requests until the next sampled one: geometric with parameter p (each request is
 * sampled with probability p, independently), so that one countdown per request replaces
 * a random draw per request. */
static uint64_t ins_skip(struct introspect *in)
{
    if (in->sample <= 0.0)
        return UINT64_MAX;
    if (in->sample >= 1.0)
        return 1;
    double u = ((double)(ins_rand(in) >> 11) + 0.5) / 9007199254740992.0;  /* (0, 1) */
    double k = floor(log(u) / log1p(-in->sample)) + 1.0;
    return k >= 1e18 ? UINT64_MAX : (uint64_t)k;
}

/* ------------------------------------------------------------------ set-up */

static void ins_slow_clear(struct introspect *in)
{
    for (uint32_t i = 0; i < in->slow_cap; i++) {
        free(in->slow[i].resp);
        in->slow[i].resp = NULL;
    }
    in->slow_n = 0;
    in->slow_head = 0;
}

int introspect_bind(struct wpool *wp, const struct conf_global *g)
{
    struct introspect *in = wp->ins;
    int fresh = in == NULL;

    if (fresh) {
        if ((in = calloc(1, sizeof(*in))) == NULL)
            return -ENOMEM;
        in->ncmds = wp->ops->ncmds != NULL ? wp->ops->ncmds() : 0;
        in->mask = 1;
        while (in->mask <= in->ncmds)
            in->mask = in->mask * 2 + 1;        /* 2^k - 1 > ncmds: a row for the rest */
        if ((in->cmd = calloc((size_t)in->mask + 1, sizeof(*in->cmd))) == NULL) {
            free(in);
            return -ENOMEM;
        }
        uv_mutex_init(&in->slow_mu);
        in->rng = (uv_hrtime() ^ ((uint64_t)wp->w->id << 32) ^ ((uint64_t)wp->index << 48)) |
                  1u;
    }
    uint32_t cap = wp->ops->slow_entry != NULL ? g->slowlog_max_len : 0;
    if (fresh || cap != in->slow_cap) {
        struct ins_slow *ring = cap ? calloc(cap, sizeof(*ring)) : NULL;
        if (cap != 0 && ring == NULL) {
            if (fresh) {
                free(in->cmd);
                uv_mutex_destroy(&in->slow_mu);
                free(in);
            }
            return -ENOMEM;
        }
        uv_mutex_lock(&in->slow_mu);
        ins_slow_clear(in);         /* a new length starts the ring afresh, as Redis trims */
        free(in->slow);
        in->slow = ring;
        in->slow_cap = cap;
        uv_mutex_unlock(&in->slow_mu);
    }
    uint64_t slow_us = g->slowlog_threshold_us < 0 ? UINT64_MAX
                                                  : (uint64_t)g->slowlog_threshold_us;
    const struct conf_request_log *rl = &g->request_log;
    in->sample = rl->path != NULL && wp->w->hub->reqlog != NULL ? rl->sample : 0.0;
    in->errors_all = rl->path != NULL && wp->w->hub->reqlog != NULL && rl->errors;
    in->key_hash = rl->key_hash;
    wp->ins = in;
    wp->ins_cmd = in->cmd;
    wp->ins_mask = in->mask;
    /* no SLOWLOG here (memcached, or slowlog_max_len 0) and no request log: nothing is
     * done with a slow request */
    wp->ins_slow_us = cap > 0 || in->sample > 0.0 ? slow_us : UINT64_MAX;
    wp->ins_sample_left = ins_skip(in);
    wp->ins_capture = (slow_us != UINT64_MAX && cap > 0) || in->sample > 0.0 || in->errors_all;
    return 0;
}

void introspect_free(struct wpool *wp)
{
    struct introspect *in = wp->ins;

    if (in == NULL)
        return;
    ins_slow_clear(in);
    free(in->slow);
    free(in->cmd);
    uv_mutex_destroy(&in->slow_mu);
    free(in);
    wp->ins = NULL;
    wp->ins_cmd = NULL;
    wp->ins_capture = 0;
}

/* ------------------------------------------------------------------ the rare requests */

/* The error's first word ("ERR", "WRONGTYPE", "CLIENT_ERROR") from reply p[0..n). */
static void ins_err_name(const char *p, size_t n, char *out)
{
    size_t i = 0, k = 0;

    if (n > 0 && p[0] == '-')
        i = 1;
    else if (n > 0 && p[0] == '!') {          /* RESP3 blob error: its text follows */
        const char *nl = memchr(p, '\n', n);
        i = nl ? (size_t)(nl - p) + 1 : n;
    }
    for (; i < n && k + 1 < INS_ERR_NAME; i++) {
        char ch = p[i];
        if (ch == ' ' || ch == '\r' || ch == '\n')
            break;
        out[k++] = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                   (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ? ch : '_';
    }
    if (k == 0)
        memcpy(out, "ERR", 4);
    else
        out[k] = '\0';
}

static void ins_err_count(struct introspect *in, const char *name)
{
    unsigned n = atomic_load_explicit(&in->nerr, memory_order_relaxed);
    for (unsigned i = 0; i < n; i++)
        if (strcmp(in->err[i].name, name) == 0) {
            STATS_ADD(&in->err[i], count, 1);
            return;
        }
    if (n == INS_ERR_MAX)
        return;                 /* past 128 prefixes (Redis stops tracking there too) */
    memcpy(in->err[n].name, name, strlen(name) + 1);
    in->err[n].count = 1;
    atomic_store_explicit(&in->nerr, n + 1, memory_order_release);
}

/* A request log line, written into a fixed buffer by hand: no printf, no allocation.
 * `over` when it did not fit (a pool name or key of thousands of escaped bytes): the line
 * is not written. */
struct ins_line {
    char   b[2048];
    size_t n;
    int    over;
};

static void lw_raw(struct ins_line *l, const char *p, size_t n)
{
    if (l->n + n > sizeof(l->b)) {
        l->over = 1;
        return;
    }
    memcpy(l->b + l->n, p, n);
    l->n += n;
}

#define lw_lit(l, s) lw_raw((l), (s), sizeof(s) - 1)

static void lw_u64(struct ins_line *l, uint64_t v, int width)
{
    char d[24];
    int i = (int)sizeof(d);
    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
        width--;
    } while (v > 0 || width > 0);
    lw_raw(l, d + i, sizeof(d) - (size_t)i);
}

/* The body of a JSON string (no quotes): '"', '\' and bytes outside printable ASCII
 * escaped. */
static void lw_json(struct ins_line *l, const char *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (l->n + 6 * n > sizeof(l->b)) {
        l->over = 1;
        return;
    }
    char *o = l->b + l->n;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '"' || ch == '\\') {
            *o++ = '\\';
            *o++ = (char)ch;
        } else if (ch < 0x20 || ch >= 0x7f) {
            *o++ = '\\';
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[ch >> 4];
            *o++ = hex[ch & 15];
        } else {
            *o++ = (char)ch;
        }
    }
    l->n = (size_t)(o - l->b);
}

static void lw_str(struct ins_line *l, const char *field_lit, size_t flen, const char *p)
{
    lw_raw(l, field_lit, flen);
    lw_json(l, p, strlen(p));
    lw_lit(l, "\"");
}

#define LW_FIELD(name) ",\"" name "\":\""

/* One request log line (a JSON object and '\n'). */
static void ins_log(struct client *c, struct msg *m, uint64_t usec, int error, const char *ename,
                    size_t out_bytes, int slow)
{
    struct worker *w = c->w;
    struct wpool *wp = c->pool;
    struct introspect *in = wp->ins;
    const char *cmd = wp->ops->cmd_name != NULL ? wp->ops->cmd_name(m->cmd) : NULL;
    const char *user = c->pc.user[0] ? c->pc.user : "default";
    struct ins_line l;
    uint64_t now = util_wall_us();

    l.n = 0;
    l.over = 0;
    lw_lit(&l, "{\"ts\":");
    lw_u64(&l, now / 1000000, 1);
    lw_lit(&l, ".");
    lw_u64(&l, now % 1000000, 6);
    lw_str(&l, LW_FIELD("user"), sizeof(LW_FIELD("user")) - 1, user);
    lw_str(&l, LW_FIELD("client"), sizeof(LW_FIELD("client")) - 1, c->pc.peer);
    lw_str(&l, LW_FIELD("pool"), sizeof(LW_FIELD("pool")) - 1, wp->cp->name);
    if (cmd != NULL)
        lw_str(&l, LW_FIELD("command"), sizeof(LW_FIELD("command")) - 1, cmd);
    else
        lw_lit(&l, ",\"command\":null");
    const char *key;
    size_t klen;
    uint64_t full;
    if (wp->ops->req_key != NULL && m->head_len > 0 &&
        wp->ops->req_key(m->cmd, m->head, m->head_len, &key, &klen, &full)) {
        if (in->key_hash) {
            static const char hex[] = "0123456789abcdef";
            uint64_t h = hash_xxh3(0, key, klen);
            char hx[16];
            for (int i = 15; i >= 0; i--, h >>= 4)
                hx[i] = hex[h & 15];
            lw_lit(&l, LW_FIELD("key_hash"));
            lw_raw(&l, hx, sizeof(hx));
            lw_lit(&l, "\"");
        } else {
            lw_lit(&l, LW_FIELD("key"));
            lw_json(&l, key, klen);
            lw_lit(&l, "\"");
        }
        if (full > klen) {
            lw_lit(&l, ",\"key_len\":");
            lw_u64(&l, full, 1);
        }
    }
    if (m->server != NULL)
        lw_str(&l, LW_FIELD("server"), sizeof(LW_FIELD("server")) - 1, m->server->addr.text);
    else
        lw_lit(&l, ",\"server\":null");
    lw_lit(&l, ",\"bytes_in\":");
    lw_u64(&l, m->req_bytes, 1);
    lw_lit(&l, ",\"bytes_out\":");
    lw_u64(&l, out_bytes, 1);
    lw_lit(&l, ",\"latency_us\":");
    lw_u64(&l, usec, 1);
    if (error) {
        lw_lit(&l, ",\"result\":\"error\"");
        lw_str(&l, LW_FIELD("error"), sizeof(LW_FIELD("error")) - 1, ename);
    } else {
        lw_lit(&l, ",\"result\":\"ok\"");
    }
    if (slow)
        lw_lit(&l, ",\"slow\":true");
    lw_lit(&l, "}\n");
    if (!l.over)
        (void)reqlog_append(w->hub->reqlog, w->id, l.b, l.n);
}

/* A SLOWLOG entry for m, in the pool's ring (newest replaces the oldest). */
static void ins_slow(struct client *c, struct msg *m, uint64_t usec)
{
    struct worker *w = c->w;
    struct introspect *in = c->pool->ins;
    char name[256];
    struct buf e;
    const char *server = m->server != NULL ? m->server->addr.text : "";
    uint64_t now = util_wall_us();

    snprintf(name, sizeof(name), "name=%s user=%s server=%s", c->pc.name,
             c->pc.user[0] ? c->pc.user : "default", server);
    struct proto_slow s = {
        .id = atomic_fetch_add_explicit(&w->hub->slowlog_ids, 1, memory_order_relaxed),
        .time_s = (int64_t)((now - RL_MIN(now, usec)) / 1000000),   /* when it began */
        .usec = usec,
        .addr = c->pc.peer,
        .name = name,
    };
    buf_init(&e);
    char *copy = NULL;
    if (c->pool->ops->slow_entry(m->head, m->head_len, &s, &e) < 0 ||
        (copy = malloc(buf_len(&e))) == NULL) {
        buf_free(&e);
        return;
    }
    memcpy(copy, buf_rptr(&e), buf_len(&e));
    uv_mutex_lock(&in->slow_mu);
    struct ins_slow *slot = &in->slow[in->slow_head];
    free(slot->resp);
    slot->id = s.id;
    slot->len = buf_len(&e);
    slot->resp = copy;
    in->slow_head = (in->slow_head + 1) % in->slow_cap;
    if (in->slow_n < in->slow_cap)
        in->slow_n++;
    uv_mutex_unlock(&in->slow_mu);
    buf_free(&e);
}

void introspect__note(struct client *c, struct msg *m, uint64_t usec)
{
    struct wpool *wp = c->pool;
    struct introspect *in = wp->ins;
    int error = introspect__errored(m);
    int sampled = wp->ins_sample_left == 0;
    int slow = usec >= wp->ins_slow_us;
    char ename[INS_ERR_NAME] = "";
    size_t out_bytes = buf_len(&m->rsp);

    if (sampled)
        wp->ins_sample_left = ins_skip(in);
    if (m->head_len > MSG_HEAD_MAX)
        m->head_len = MSG_HEAD_MAX;
    if (error) {
        uint32_t i = m->cmd & in->mask;
        /* failed: it reached a server (its reply, a timeout, a lost connection); rejected:
         * the proxy answered it without asking one */
        if (m->rerr || m->server != NULL) {
            STATS_ADD(&in->cmd[i], failed_calls, 1);
        } else {
            /* as Redis: a rejected command is no call (introspect_done counted it) */
            STATS_ADD(&in->cmd[i], rejected_calls, 1);
            STATS_ADD(&in->cmd[i], calls, -1);
            STATS_ADD(&in->cmd[i], usec, -(int64_t)usec);
        }
        ins_err_name(buf_rptr(&m->rsp), buf_len(&m->rsp), ename);
        ins_err_count(in, ename);
    }
    if (slow && in->slow_cap > 0 && m->role == MSG_REQUEST && m->cmd < in->ncmds)
        ins_slow(c, m, usec);
    int log = sampled || (error && in->errors_all);
    if (!log && slow && in->sample > 0.0) {
        /* a slow request beyond the sample: logged, at most INS_SLOW_LINES_PER_S a second
         * per worker and pool (an overloaded proxy must not write a line per request) */
        uint64_t sec = worker_now_us(c->w) / 1000000u;
        if (sec != in->slow_sec) {
            in->slow_sec = sec;
            in->slow_logged = 0;
        }
        log = in->slow_logged < INS_SLOW_LINES_PER_S;
        in->slow_logged += (uint32_t)log;
    }
    if (log)
        ins_log(c, m, usec, error, ename, out_bytes, slow);
}

/* ------------------------------------------------------------------ readers */

/* Each worker's pool named `pool`, under that worker's mu. */
typedef void (*ins_pool_fn)(struct introspect *in, void *arg);

static void ins_each(struct hub *hub, const char *pool, ins_pool_fn fn, void *arg)
{
    for (uint32_t i = 0; i < hub->nworkers; i++) {
        struct worker *w = &hub->workers[i];
        uv_mutex_lock(&w->mu);
        for (uint32_t p = 0; p < w->npools; p++) {
            struct wpool *wp = w->pools[p];
            if (wp != NULL && wp->ins != NULL && strcmp(wp->cp->name, pool) == 0) {
                fn(wp->ins, arg);
                break;
            }
        }
        uv_mutex_unlock(&w->mu);
    }
}

struct ins_sum {
    struct proto_cmdstat *sum;
    uint16_t              n;
    int                   nomem;
};

static void ins_sum_cmds(struct introspect *in, void *arg)
{
    struct ins_sum *s = arg;
    if (s->sum == NULL && !s->nomem) {
        s->n = in->ncmds;
        if ((s->sum = calloc((size_t)s->n + 1, sizeof(*s->sum))) == NULL)
            s->nomem = 1;
    }
    if (s->sum == NULL || in->ncmds != s->n)
        return;
    for (uint32_t i = 0; i < s->n; i++) {
        const struct proto_cmdstat *c = &in->cmd[i];
        s->sum[i].calls += __atomic_load_n(&c->calls, __ATOMIC_RELAXED);
        s->sum[i].usec += __atomic_load_n(&c->usec, __ATOMIC_RELAXED);
        s->sum[i].rejected_calls += __atomic_load_n(&c->rejected_calls, __ATOMIC_RELAXED);
        s->sum[i].failed_calls += __atomic_load_n(&c->failed_calls, __ATOMIC_RELAXED);
    }
}

void introspect_cmdstats(struct hub *hub, const char *pool, proto_cmdstat_fn visit, void *arg)
{
    struct ins_sum s = { NULL, 0, 0 };

    ins_each(hub, pool, ins_sum_cmds, &s);
    for (uint32_t i = 0; s.sum != NULL && i < s.n; i++)
        if (s.sum[i].calls || s.sum[i].rejected_calls || s.sum[i].failed_calls)
            visit(arg, (uint16_t)i, &s.sum[i]);
    free(s.sum);
}

struct ins_errsum {
    struct ins_err e[INS_ERR_MAX];
    unsigned       n;
};

static void ins_sum_errs(struct introspect *in, void *arg)
{
    struct ins_errsum *s = arg;
    unsigned n = atomic_load_explicit(&in->nerr, memory_order_acquire);
    for (unsigned i = 0; i < n; i++) {
        int64_t v = __atomic_load_n(&in->err[i].count, __ATOMIC_RELAXED);
        unsigned k;
        for (k = 0; k < s->n; k++)
            if (strcmp(s->e[k].name, in->err[i].name) == 0)
                break;
        if (k == s->n) {
            if (s->n == INS_ERR_MAX)
                continue;
            memcpy(s->e[k].name, in->err[i].name, INS_ERR_NAME);
            s->e[k].count = 0;
            s->n++;
        }
        s->e[k].count += v;
    }
}

static int ins_err_cmp(const void *a, const void *b)
{
    return strcmp(((const struct ins_err *)a)->name, ((const struct ins_err *)b)->name);
}

void introspect_errorstats(struct hub *hub, const char *pool, proto_errstat_fn visit, void *arg)
{
    struct ins_errsum *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return;
    ins_each(hub, pool, ins_sum_errs, s);
    if (s->n > 1)
        qsort(s->e, s->n, sizeof(s->e[0]), ins_err_cmp);
    for (unsigned i = 0; i < s->n; i++)
        visit(arg, s->e[i].name, s->e[i].count);
    free(s);
}

struct ins_slowcopy {
    struct ins_slow *e;
    size_t           n, cap;
    int              nomem;
    uint64_t         len;
};

static void ins_copy_slow(struct introspect *in, void *arg)
{
    struct ins_slowcopy *s = arg;
    uv_mutex_lock(&in->slow_mu);
    for (uint32_t k = 0; k < in->slow_n && !s->nomem; k++) {
        const struct ins_slow *src = &in->slow[(in->slow_head + in->slow_cap - 1 - k) % in->slow_cap];
        if (s->n == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 64;
            struct ins_slow *e = realloc(s->e, cap * sizeof(*e));
            if (e == NULL) {
                s->nomem = 1;
                break;
            }
            s->e = e;
            s->cap = cap;
        }
        char *copy = malloc(src->len);
        if (copy == NULL) {
            s->nomem = 1;
            break;
        }
        memcpy(copy, src->resp, src->len);
        s->e[s->n].id = src->id;
        s->e[s->n].resp = copy;
        s->e[s->n].len = src->len;
        s->n++;
    }
    uv_mutex_unlock(&in->slow_mu);
}

static void ins_len_slow(struct introspect *in, void *arg)
{
    uint64_t *n = arg;
    uv_mutex_lock(&in->slow_mu);
    *n += in->slow_n;
    uv_mutex_unlock(&in->slow_mu);
}

static void ins_reset_slow(struct introspect *in, void *arg)
{
    (void)arg;
    uv_mutex_lock(&in->slow_mu);
    ins_slow_clear(in);
    uv_mutex_unlock(&in->slow_mu);
}

static int ins_slow_newest_first(const void *a, const void *b)
{
    uint64_t x = ((const struct ins_slow *)a)->id, y = ((const struct ins_slow *)b)->id;
    return x < y ? 1 : x > y ? -1 : 0;
}

int introspect_slowlog_get(struct hub *hub, const char *pool, uint32_t max_len, long n,
                           struct buf *out, uint64_t *count)
{
    struct ins_slowcopy s = { NULL, 0, 0, 0, 0 };
    int rc = 0;

    *count = 0;
    ins_each(hub, pool, ins_copy_slow, &s);
    if (s.nomem) {
        rc = -ENOMEM;
        goto out;
    }
    /* every worker's ring, merged: newest first, as many as one ring of max_len holds */
    if (s.n > 1)
        qsort(s.e, s.n, sizeof(*s.e), ins_slow_newest_first);
    size_t want = RL_MIN(s.n, (size_t)max_len);
    if (n >= 0 && (size_t)n < want)
        want = (size_t)n;
    for (size_t i = 0; i < want; i++)
        if (buf_append(out, s.e[i].resp, s.e[i].len) < 0) {
            rc = -ENOMEM;
            goto out;
        }
    *count = want;
out:
    for (size_t i = 0; i < s.n; i++)
        free(s.e[i].resp);
    free(s.e);
    return rc;
}

uint64_t introspect_slowlog_len(struct hub *hub, const char *pool, uint32_t max_len)
{
    uint64_t n = 0;
    ins_each(hub, pool, ins_len_slow, &n);
    return RL_MIN(n, (uint64_t)max_len);
}

void introspect_slowlog_reset(struct hub *hub, const char *pool)
{
    ins_each(hub, pool, ins_reset_slow, NULL);
}
