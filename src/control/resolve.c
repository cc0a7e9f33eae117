/* DNS on the main loop (c-ares): servers' host names re-resolved, SRV discovery, the last good answers kept. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include <ares.h>
#include <uv.h>

#include "control/proxy.h"
#include "control/resolve.h"
#include "lib/log.h"
#include "lib/queue.h"
#include "lib/util.h"

/*
 * How it works.
 *
 * Every name the configuration resolves here is an entry: a host name (its address) or an
 * SRV name (its records). An entry keeps its last good answer: a failure or an empty
 * answer changes nothing but the counters and the log, so a pool never loses its servers
 * to DNS. The main loop's timer asks each entry again every resolve_interval; c-ares'
 * sockets are watched with uv_poll handles and its timeouts with a uv_timer, so nothing
 * waits, and the workers never see DNS at all: an answer that changes something has the
 * configuration in effect built again (reload_apply: epoch, movement report, warm-up and
 * rejoin as a file reload) with the servers the entries give (resolve_snapshot_pool).
 *
 * A name asked for the first time (start-up, a reload that adds it) is resolved at once on
 * a channel of its own, synchronously and bounded by RESOLVE_SYNC_MS, so that the first
 * snapshot already connects to the right address.
 */

#define RESOLVE_DEFAULT_S   30      /* resolve_interval when dns_servers asks for it */
#define RESOLVE_SYNC_MS     5000    /* start-up resolution: at most this long in all */
#define RESOLVE_TIMEOUT_MS  1000    /* per try, per resolver */
#define RESOLVE_TRIES       2
#define RESOLVE_TICK_MS     100     /* how often due entries are looked for (the delay past a due time) */
#define RESOLVE_RETRY_MS    100     /* a rebuild waits this long while a reload is applied */
#define RESOLVE_ERR_LEN     160

enum resolve_kind { RESOLVE_HOST, RESOLVE_SRV };

struct resolve_srv {
    char    *target;
    uint16_t port;
    uint16_t weight;
};

struct resolve_entry {
    struct qnode        link;
    enum resolve_kind   kind;
    char               *name;
    uint32_t            interval_s;     /* the least of the pools that use it */
    uint64_t            due_ms;         /* next question (loop time) */
    int                 pending;        /* a question is out */
    int                 have;           /* a good answer is kept */
    int                 tried;          /* asked at least once */
    int                 failing;        /* the last answer failed (logged once per run) */
    int                 used;           /* by the snapshot in effect (pruning) */
    char                addr[INET6_ADDRSTRLEN];   /* HOST: the kept address */
    struct resolve_srv *srv;            /* SRV: the kept records, sorted */
    uint32_t            nsrv;
    uint64_t            queries, failures, changes;
    char                last_error[RESOLVE_ERR_LEN];
};

struct resolve_poll {
    struct qnode    link;
    uv_poll_t       poll;
    ares_socket_t   fd;
    struct resolve *r;
};

struct resolve {
    struct proxy   *p;
    uv_mutex_t      mu;             /* entries' answers and counters vs the admin thread */
    struct qnode    entries;
    ares_channel    channel;        /* the loop's, NULL until resolve_start */
    int             started;
    char           *servers;        /* dns_servers in effect ("ip:port ..."), NULL: default */
    uv_timer_t      tick;           /* due entries */
    uv_timer_t      timeout;        /* c-ares' own timeouts */
    uv_timer_t      rebuild;        /* an answer changed: build and publish */
    struct qnode    polls;          /* struct resolve_poll */
    int             changed;        /* a rebuild is wanted */
    uint64_t        rebuilds;
    resolve_rebuild_fn rebuild_fn;  /* proxy.c's: build and apply */
};

/* ------------------------------------------------------------------ entries */

static void resolve_srv_free(struct resolve_srv *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(v[i].target);
    free(v);
}

static struct resolve_entry *resolve_find(struct resolve *r, enum resolve_kind kind,
                                          const char *name)
{
    struct qnode *n;
    QUEUE_FOREACH(n, &r->entries) {
        struct resolve_entry *e = QUEUE_DATA(n, struct resolve_entry, link);
        if (e->kind == kind && strcmp(e->name, name) == 0)
            return e;
    }
    return NULL;
}

/* The entry of name (made when new); NULL without memory. The interval is the least asked. */
static struct resolve_entry *resolve_get(struct resolve *r, enum resolve_kind kind,
                                         const char *name, uint32_t interval_s)
{
    struct resolve_entry *e = resolve_find(r, kind, name);
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL || (e->name = strdup(name)) == NULL) {
            free(e);
            return NULL;
        }
        e->kind = kind;
        e->interval_s = interval_s;
        uv_mutex_lock(&r->mu);
        queue_insert_tail(&r->entries, &e->link);
        uv_mutex_unlock(&r->mu);
    }
    if (interval_s < e->interval_s)
        e->interval_s = interval_s;
    e->used = 1;
    return e;
}

static void resolve_entry_free(struct resolve_entry *e)
{
    resolve_srv_free(e->srv, e->nsrv);
    free(e->name);
    free(e);
}

/* A failed or empty answer: counted, logged when it starts failing or fails otherwise; the
 * kept answer stays (main thread). */
static void resolve_fail(struct resolve *r, struct resolve_entry *e, const char *why)
{
    uv_mutex_lock(&r->mu);
    e->failures++;
    int again = e->failing && strcmp(e->last_error, why) == 0;
    snprintf(e->last_error, sizeof(e->last_error), "%s", why);
    e->failing = 1;
    uv_mutex_unlock(&r->mu);
    if (!again)
        log_warn("dns: %s %s: %s; %s", e->kind == RESOLVE_SRV ? "SRV" : "name", e->name, why,
                 e->have ? "the last good answer stays in use" : "no answer kept yet");
}

static void resolve_ok(struct resolve *r, struct resolve_entry *e)
{
    if (e->failing)
        log_notice("dns: %s %s answers again", e->kind == RESOLVE_SRV ? "SRV" : "name", e->name);
    e->failing = 0;
}

static int resolve_srv_cmp(const void *pa, const void *pb)
{
    const struct resolve_srv *a = pa, *b = pb;
    int c = strcmp(a->target, b->target);
    return c != 0 ? c : (int)a->port - (int)b->port;
}

/* ------------------------------------------------------------------ answers */

static void resolve_changed(struct resolve *r);
static void resolve_query(struct resolve *r, ares_channel ch, struct resolve_entry *e);

struct resolve_ask {
    struct resolve       *r;
    struct resolve_entry *e;
    ares_channel          ch;
};

static void resolve_host_cb(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
    struct resolve_ask *a = arg;
    struct resolve *r = a->r;
    struct resolve_entry *e = a->e;
    char text[INET6_ADDRSTRLEN] = "";

    (void)timeouts;
    e->pending = 0;
    if (status == ARES_SUCCESS && res != NULL) {
        /* the first IPv4 address, else the first IPv6 one: one address per server */
        const struct ares_addrinfo_node *pick = NULL;
        for (const struct ares_addrinfo_node *n = res->nodes; n != NULL; n = n->ai_next)
            if (pick == NULL || (pick->ai_family != AF_INET && n->ai_family == AF_INET))
                pick = n;
        if (pick != NULL && pick->ai_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)pick->ai_addr)->sin_addr, text,
                      sizeof(text));
        else if (pick != NULL && pick->ai_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)pick->ai_addr)->sin6_addr, text,
                      sizeof(text));
    }
    if (res != NULL)
        ares_freeaddrinfo(res);
    if (status == ARES_EDESTRUCTION || status == ARES_ECANCELLED) {
        free(a);
        return;
    }
    if (text[0] == '\0') {
        resolve_fail(r, e, status == ARES_SUCCESS ? "no address in the answer"
                                                  : ares_strerror(status));
    } else {
        resolve_ok(r, e);
        if (!e->have || strcmp(e->addr, text) != 0) {
            if (e->have)
                log_notice("dns: %s now resolves to %s (was %s): its servers reconnect there, "
                           "no key moves", e->name, text, e->addr);
            uv_mutex_lock(&r->mu);
            int had = e->have;
            snprintf(e->addr, sizeof(e->addr), "%s", text);
            e->have = 1;
            e->changes += had;
            uv_mutex_unlock(&r->mu);
            /* a first answer on the loop's channel: the snapshot has the bare name there */
            if (had || a->ch == r->channel)
                resolve_changed(r);
        }
    }
    free(a);
}

static void resolve_srv_cb(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
    struct resolve_ask *a = arg;
    struct resolve *r = a->r;
    struct resolve_entry *e = a->e;
    struct ares_srv_reply *reply = NULL;
    struct resolve_srv *v = NULL;
    uint32_t n = 0;

    (void)timeouts;
    e->pending = 0;
    if (status == ARES_EDESTRUCTION || status == ARES_ECANCELLED)
        goto out;
    if (status == ARES_SUCCESS)
        status = ares_parse_srv_reply(abuf, alen, &reply);
    if (status != ARES_SUCCESS) {
        resolve_fail(r, e, ares_strerror(status));
        goto out;
    }
    for (struct ares_srv_reply *s = reply; s != NULL; s = s->next)
        n++;
    v = calloc(n ? n : 1, sizeof(*v));
    if (v == NULL) {
        resolve_fail(r, e, "out of memory");
        goto out;
    }
    n = 0;
    for (struct ares_srv_reply *s = reply; s != NULL; s = s->next) {
        if (s->host == NULL || s->host[0] == '\0' || strcmp(s->host, ".") == 0 || s->port == 0)
            continue;       /* "." is RFC 2782's "not available here" */
        if ((v[n].target = strdup(s->host)) == NULL) {
            resolve_fail(r, e, "out of memory");
            goto out;
        }
        v[n].port = s->port;
        v[n].weight = s->weight;
        n++;
    }
    if (n == 0) {
        resolve_fail(r, e, "an empty answer");
        goto out;
    }
    /* one order whatever the server's: every proxy builds the same ring */
    qsort(v, n, sizeof(*v), resolve_srv_cmp);
    resolve_ok(r, e);
    int same = e->have && e->nsrv == n;
    for (uint32_t i = 0; same && i < n; i++)
        same = strcmp(e->srv[i].target, v[i].target) == 0 && e->srv[i].port == v[i].port &&
               e->srv[i].weight == v[i].weight;
    if (same)
        goto out;
    /* the targets are names too: theirs are asked on the same channel */
    for (uint32_t i = 0; i < n; i++) {
        struct resolve_entry *t = resolve_get(r, RESOLVE_HOST, v[i].target, e->interval_s);
        if (t != NULL && !t->have && !t->pending)
            resolve_query(r, a->ch, t);
    }
    if (e->have)
        log_notice("dns: SRV %s: %u record(s), was %u", e->name, n, e->nsrv);
    uv_mutex_lock(&r->mu);
    struct resolve_srv *old = e->srv;
    uint32_t nold = e->nsrv;
    int had = e->have;
    e->srv = v;
    e->nsrv = n;
    e->have = 1;
    e->changes += had;
    uv_mutex_unlock(&r->mu);
    v = old;
    n = nold;
    if (had || a->ch == r->channel)
        resolve_changed(r);
out:
    resolve_srv_free(v, n);
    if (reply != NULL)
        ares_free_data(reply);
    free(a);
}

/* Ask e's question on channel ch (the loop's or a start-up one). */
static void resolve_query(struct resolve *r, ares_channel ch, struct resolve_entry *e)
{
    struct resolve_ask *a = malloc(sizeof(*a));
    if (a == NULL) {
        resolve_fail(r, e, "out of memory");
        return;
    }
    a->r = r;
    a->e = e;
    a->ch = ch;
    e->pending = 1;
    e->tried = 1;
    uv_mutex_lock(&r->mu);
    e->queries++;
    uv_mutex_unlock(&r->mu);
    if (e->kind == RESOLVE_SRV) {
        ares_query(ch, e->name, 1 /* C_IN */, 33 /* T_SRV */, resolve_srv_cb, a);
    } else {
        struct ares_addrinfo_hints hints;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        ares_getaddrinfo(ch, e->name, NULL, &hints, resolve_host_cb, a);
    }
}

/* ------------------------------------------------------------------ channels */

/* "ip:port ip:port" as c-ares' CSV, IPv6 in brackets as written. */
static int resolve_set_servers(ares_channel ch, const char *servers)
{
    if (servers == NULL)
        return ARES_SUCCESS;
    char *csv = strdup(servers);
    if (csv == NULL)
        return ARES_ENOMEM;
    for (char *c = csv; *c != '\0'; c++)
        if (*c == ' ')
            *c = ',';
    int rc = ares_set_servers_ports_csv(ch, csv);
    free(csv);
    return rc;
}

static void resolve_sock_state_cb(void *data, ares_socket_t fd, int readable, int writable);

static int resolve_channel_new(struct resolve *r, ares_channel *out, int on_loop)
{
    struct ares_options o;
    int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;

    memset(&o, 0, sizeof(o));
    o.timeout = RESOLVE_TIMEOUT_MS;
    o.tries = RESOLVE_TRIES;
    if (on_loop) {
        o.sock_state_cb = resolve_sock_state_cb;
        o.sock_state_cb_data = r;
        mask |= ARES_OPT_SOCK_STATE_CB;
    }
    int rc = ares_init_options(out, &o, mask);
    if (rc != ARES_SUCCESS)
        return rc;
    rc = resolve_set_servers(*out, r->servers);
    if (rc != ARES_SUCCESS) {
        ares_destroy(*out);
        *out = NULL;
    }
    return rc;
}

static void resolve_poll_close_cb(uv_handle_t *h)
{
    free(h->data);
}

static void resolve_arm_timeout(struct resolve *r);

static void resolve_poll_cb(uv_poll_t *h, int status, int events)
{
    struct resolve_poll *rp = h->data;
    struct resolve *r = rp->r;
    ares_socket_t fd = rp->fd;

    /* an error on the socket: c-ares reads it and finds out */
    ares_process_fd(r->channel, status < 0 || (events & UV_READABLE) ? fd : ARES_SOCKET_BAD,
                    status < 0 || (events & UV_WRITABLE) ? fd : ARES_SOCKET_BAD);
    resolve_arm_timeout(r);
}

static void resolve_sock_state_cb(void *data, ares_socket_t fd, int readable, int writable)
{
    struct resolve *r = data;
    struct resolve_poll *rp = NULL;
    struct qnode *n;

    QUEUE_FOREACH(n, &r->polls) {
        struct resolve_poll *q = QUEUE_DATA(n, struct resolve_poll, link);
        if (q->fd == fd) {
            rp = q;
            break;
        }
    }
    if (!readable && !writable) {
        if (rp != NULL) {
            queue_remove(&rp->link);
            uv_poll_stop(&rp->poll);
            uv_close((uv_handle_t *)&rp->poll, resolve_poll_close_cb);
        }
        return;
    }
    if (rp == NULL) {
        rp = calloc(1, sizeof(*rp));
        if (rp == NULL)
            return;         /* c-ares' timeout ends the question */
        if (uv_poll_init_socket(&r->p->loop, &rp->poll, fd) < 0) {
            free(rp);
            return;
        }
        rp->fd = fd;
        rp->r = r;
        rp->poll.data = rp;
        queue_insert_tail(&r->polls, &rp->link);
    }
    uv_poll_start(&rp->poll, (readable ? UV_READABLE : 0) | (writable ? UV_WRITABLE : 0),
                  resolve_poll_cb);
}

static void resolve_timeout_cb(uv_timer_t *t)
{
    struct resolve *r = t->data;
    ares_process_fd(r->channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    resolve_arm_timeout(r);
}

static void resolve_arm_timeout(struct resolve *r)
{
    struct timeval tv, *tvp = ares_timeout(r->channel, NULL, &tv);
    if (tvp == NULL) {
        uv_timer_stop(&r->timeout);
        return;
    }
    uint64_t ms = (uint64_t)tvp->tv_sec * 1000u + (uint64_t)tvp->tv_usec / 1000u + 1;
    uv_timer_start(&r->timeout, resolve_timeout_cb, ms, 0);
}

/* Run a start-up channel until its questions are answered or RESOLVE_SYNC_MS passed. */
static void resolve_sync_run(ares_channel ch)
{
    uint64_t end = util_now_ms() + RESOLVE_SYNC_MS;
    for (;;) {
        fd_set rd, wr;
        struct timeval tv, max = { 0, 100000 };
        FD_ZERO(&rd);
        FD_ZERO(&wr);
        int nfds = ares_fds(ch, &rd, &wr);
        if (nfds == 0)
            break;
        if (util_now_ms() >= end) {
            ares_cancel(ch);
            break;
        }
        struct timeval *tvp = ares_timeout(ch, &max, &tv);
        if (select(nfds, &rd, &wr, NULL, tvp) < 0 && errno != EINTR)
            break;
        ares_process(ch, &rd, &wr);
    }
}

/* ------------------------------------------------------------------ the loop's work */

static void resolve_rebuild_cb(uv_timer_t *t)
{
    struct resolve *r = t->data;
    struct proxy *p = r->p;
    struct qnode *n;
    char err[1024] = "";

    if (!r->changed || atomic_load(&p->stopping))
        return;
    QUEUE_FOREACH(n, &r->entries) {
        if (QUEUE_DATA(n, struct resolve_entry, link)->pending) {
            /* an SRV change asks its new targets: build once they answered */
            uv_timer_start(&r->rebuild, resolve_rebuild_cb, RESOLVE_RETRY_MS, 0);
            return;
        }
    }
    if (r->rebuild_fn(p, err, sizeof(err)) == 1) {   /* a reload is being applied: after it */
        uv_timer_start(&r->rebuild, resolve_rebuild_cb, RESOLVE_RETRY_MS, 0);
        return;
    }
    r->changed = 0;
    r->rebuilds++;
}

static void resolve_changed(struct resolve *r)
{
    r->changed = 1;
    if (r->started && !uv_is_active((uv_handle_t *)&r->rebuild))
        uv_timer_start(&r->rebuild, resolve_rebuild_cb, 0, 0);
}

/* Mark the entries the snapshot in effect uses; drop the others (none is out). */
static void resolve_prune(struct resolve *r)
{
    struct snapshot *s = atomic_load(&r->p->hub.current);
    struct qnode *n, *next;

    QUEUE_FOREACH(n, &r->entries)
        QUEUE_DATA(n, struct resolve_entry, link)->used = 0;
    for (uint32_t i = 0; s != NULL && i < s->conf->npools; i++) {
        const struct conf_pool *cp = &conf_base(s->conf)->pools[i];
        if (!resolve_pool_wanted(conf_base(s->conf), cp))
            continue;
        struct resolve_entry *e;
        if (cp->discovery != NULL && (e = resolve_find(r, RESOLVE_SRV, cp->discovery)) != NULL) {
            e->used = 1;
            for (uint32_t k = 0; k < e->nsrv; k++) {
                struct resolve_entry *t = resolve_find(r, RESOLVE_HOST, e->srv[k].target);
                if (t != NULL)
                    t->used = 1;
            }
        }
        for (uint32_t k = 0; k < cp->nservers; k++)
            if (cp->servers[k].addr.host != NULL &&
                (e = resolve_find(r, RESOLVE_HOST, cp->servers[k].addr.host)) != NULL)
                e->used = 1;
    }
    for (n = r->entries.next; n != &r->entries; n = next) {
        next = n->next;
        struct resolve_entry *e = QUEUE_DATA(n, struct resolve_entry, link);
        if (e->used || e->pending)
            continue;
        uv_mutex_lock(&r->mu);
        queue_remove(&e->link);
        uv_mutex_unlock(&r->mu);
        resolve_entry_free(e);
    }
}

static void resolve_tick_cb(uv_timer_t *t)
{
    struct resolve *r = t->data;
    uint64_t now = uv_now(&r->p->loop);
    struct qnode *n;
    int asked = 0;

    resolve_prune(r);
    QUEUE_FOREACH(n, &r->entries) {
        struct resolve_entry *e = QUEUE_DATA(n, struct resolve_entry, link);
        if (e->pending)
            continue;
        if (e->due_ms == 0)
            e->due_ms = now + (uint64_t)e->interval_s * 1000u;
        if (e->due_ms > now)
            continue;
        e->due_ms = now + (uint64_t)e->interval_s * 1000u;
        resolve_query(r, r->channel, e);
        asked = 1;
    }
    if (asked)
        resolve_arm_timeout(r);
}

/* ------------------------------------------------------------------ snapshots */

static int resolve_is_literal(const char *host)
{
    unsigned char sa[16];
    return inet_pton(AF_INET, host, sa) == 1 || inet_pton(AF_INET6, host, sa) == 1;
}

int resolve_pool_wanted(const struct conf *conf, const struct conf_pool *cp)
{
    /* the file's pool decides: a derived one's servers are addresses already */
    const struct conf *base = conf_base((struct conf *)conf);
    if (cp >= conf->pools && cp < conf->pools + conf->npools)
        cp = &base->pools[cp - conf->pools];
    if (cp->redis_cluster || cp->sentinel != NULL)   /* their servers come from elsewhere */
        return 0;
    if (cp->discovery != NULL)
        return 1;
    if (cp->resolve_interval_s == 0 && conf->global.dns_servers == NULL)
        return 0;
    for (uint32_t i = 0; i < cp->nservers; i++)
        if (cp->servers[i].addr.host != NULL && !resolve_is_literal(cp->servers[i].addr.host))
            return 1;
    return 0;
}

static uint32_t resolve_interval(const struct conf_pool *cp)
{
    return cp->resolve_interval_s ? cp->resolve_interval_s : RESOLVE_DEFAULT_S;
}

/*
 * A server as `orig` is (or an SRV target: ident and label from target:port) at the
 * address `host` (the name's kept address, or the name itself when DNS never answered:
 * the worker then asks its own resolver; NULL: orig's unix socket). 0, or -1 out of memory.
 */
static int resolve_server(struct conf_server *out, const struct conf_server *orig,
                          const char *target, uint16_t port, uint32_t weight, const char *host)
{
    char text[600], ident[300], label[300];
    char err[128];

    memset(out, 0, sizeof(*out));
    if (orig != NULL)
        port = orig->addr.port;
    if (host == NULL) {         /* a unix socket: as written */
        if (conf_addr_copy(&out->addr, &orig->addr) < 0)
            return -1;
    } else {
        snprintf(text, sizeof(text), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
        if (conf_parse_addr(text, &out->addr, err, sizeof(err)) < 0)
            return -1;
    }
    if (orig != NULL) {
        out->weight = orig->weight;
        out->name = orig->name ? strdup(orig->name) : NULL;
        out->ident = strdup(orig->ident);
        out->label = strdup(orig->label);
        out->zone = orig->zone ? strdup(orig->zone) : NULL;
        out->line = orig->line;
        out->col = orig->col;
        if (out->ident == NULL || out->label == NULL || (orig->name && out->name == NULL) ||
            (orig->zone && out->zone == NULL))
            goto nomem;
        return 0;
    }
    /* a servers: line "target:port:weight" would have this identity (twemproxy's rule:
     * the port is left out at 11211) */
    snprintf(label, sizeof(label), "%s:%u", target, port);
    snprintf(ident, sizeof(ident), "%s", port == 11211 ? target : label);
    out->weight = weight ? weight : 1;      /* SRV weight 0: no preference, one share */
    out->ident = strdup(ident);
    out->label = strdup(label);
    if (out->ident == NULL || out->label == NULL)
        goto nomem;
    return 0;
nomem:
    conf_server_free(out);
    memset(out, 0, sizeof(*out));
    return -1;
}

static const char *resolve_addr_of(struct resolve *r, const char *name)
{
    struct resolve_entry *e = resolve_find(r, RESOLVE_HOST, name);
    return e != NULL && e->have ? e->addr : name;
}

/* Ask now what pool cp needs and was never asked (bounded). */
static void resolve_prime(struct resolve *r, const struct conf_pool *cp)
{
    ares_channel ch = NULL;
    uint32_t iv = resolve_interval(cp);
    int need = 0;

    for (int round = 0; round < 2; round++) {   /* SRV first, then its targets' addresses */
        need = 0;
        struct resolve_entry *srv = NULL;
        if (cp->discovery != NULL && (srv = resolve_get(r, RESOLVE_SRV, cp->discovery, iv)) &&
            !srv->tried)
            need = 1;
        for (uint32_t k = 0; k < cp->nservers; k++) {
            const char *h = cp->servers[k].addr.host;
            struct resolve_entry *e;
            if (h != NULL && !resolve_is_literal(h) && (e = resolve_get(r, RESOLVE_HOST, h, iv)) &&
                !e->tried)
                need = 1;
        }
        for (uint32_t k = 0; srv != NULL && k < srv->nsrv; k++) {
            struct resolve_entry *e = resolve_get(r, RESOLVE_HOST, srv->srv[k].target, iv);
            if (e != NULL && !e->tried)
                need = 1;
        }
        if (!need)
            break;
        if (ch == NULL && resolve_channel_new(r, &ch, 0) != ARES_SUCCESS) {
            log_error("dns: cannot set up a resolver; names resolve later");
            return;
        }
        struct qnode *n;
        QUEUE_FOREACH(n, &r->entries) {
            struct resolve_entry *e = QUEUE_DATA(n, struct resolve_entry, link);
            if (!e->tried && !e->pending)
                resolve_query(r, ch, e);
        }
        resolve_sync_run(ch);
    }
    if (ch != NULL)
        ares_destroy(ch);
}

int resolve_snapshot_pool(struct proxy *p, struct conf *conf, uint32_t pool, char *err,
                          size_t errlen)
{
    struct resolve *r = p->resolve;
    const struct conf_pool *cp = &conf_base(conf)->pools[pool];
    struct conf_server *sv = NULL;
    uint32_t n = 0, total = 0;

    /* dns_servers may have changed with the file */
    const char *want = conf->global.dns_servers;
    if ((want == NULL) != (r->servers == NULL) || (want && strcmp(want, r->servers) != 0)) {
        free(r->servers);
        r->servers = want ? strdup(want) : NULL;
        if (r->channel != NULL && resolve_set_servers(r->channel, r->servers) != ARES_SUCCESS)
            log_error("dns: dns_servers '%s' not taken", want);
    }
    resolve_prime(r, cp);
    struct resolve_entry *srv = cp->discovery ? resolve_find(r, RESOLVE_SRV, cp->discovery) : NULL;
    if (srv != NULL && srv->have) {
        sv = calloc(srv->nsrv, sizeof(*sv));
        if (sv == NULL)
            goto nomem;
        total = srv->nsrv;
        for (n = 0; n < srv->nsrv; n++)
            if (resolve_server(&sv[n], NULL, srv->srv[n].target, srv->srv[n].port,
                               srv->srv[n].weight, resolve_addr_of(r, srv->srv[n].target)) < 0)
                goto nomem;
    } else if (cp->nservers > 0) {
        /* the file's servers (discovery: until the SRV name answers) at their addresses */
        sv = calloc(cp->nservers, sizeof(*sv));
        if (sv == NULL)
            goto nomem;
        total = cp->nservers;
        for (n = 0; n < cp->nservers; n++) {
            const struct conf_server *cs = &cp->servers[n];
            const char *h = cs->addr.host;
            if (h == NULL || resolve_is_literal(h)) {
                if (resolve_server(&sv[n], cs, NULL, 0, 0, h) < 0)
                    goto nomem;
                continue;
            }
            if (resolve_server(&sv[n], cs, NULL, 0, 0, resolve_addr_of(r, h)) < 0)
                goto nomem;
        }
        if (srv != NULL)
            log_warn("pool '%s': SRV %s has not answered (%s): its servers: list serves until it "
                     "does", cp->name, cp->discovery, srv->last_error);
    } else {
        snprintf(err, errlen, "pool '%s': discovery srv:%s gave no servers (%s) and the pool "
                 "lists none", cp->name, cp->discovery, srv && srv->last_error[0] ?
                 srv->last_error : "no answer");
        return -1;
    }
    if (cp->replicas > n) {
        for (uint32_t k = 0; k < n; k++)
            conf_server_free(&sv[k]);
        free(sv);
        snprintf(err, errlen, "pool '%s': replicas %u, but DNS gives %u server(s)", cp->name,
                 cp->replicas, n);
        return -1;
    }
    conf_derive_servers(conf, pool, sv, n, conf_base(conf)->pools[pool].slot_map);
    return 0;
nomem:
    /* calloc'd: the entries not made yet are zero, which conf_server_free takes */
    for (uint32_t k = 0; sv != NULL && k < total; k++)
        conf_server_free(&sv[k]);
    free(sv);
    snprintf(err, errlen, "out of memory");
    return -1;
}

json_t *resolve_pool_json(struct proxy *p, const struct conf_pool *cp)
{
    struct resolve *r = p->resolve;
    if (r == NULL)
        return NULL;
    json_t *o = json_object(), *names = json_array();
    int any = 0;

    uv_mutex_lock(&r->mu);
    struct resolve_entry *srv = cp->discovery ? resolve_find(r, RESOLVE_SRV, cp->discovery) : NULL;
    struct qnode *n;
    QUEUE_FOREACH(n, &r->entries) {
        struct resolve_entry *e = QUEUE_DATA(n, struct resolve_entry, link);
        int mine = e->kind == RESOLVE_SRV ? cp->discovery && strcmp(cp->discovery, e->name) == 0
                                          : 0;
        /* cp is the file's pool: its servers' hosts as written, and its SRV's targets */
        for (uint32_t k = 0; !mine && e->kind == RESOLVE_HOST && k < cp->nservers; k++)
            mine = cp->servers[k].addr.host != NULL && strcmp(cp->servers[k].addr.host, e->name) == 0;
        for (uint32_t k = 0; !mine && e->kind == RESOLVE_HOST && srv != NULL && k < srv->nsrv; k++)
            mine = strcmp(srv->srv[k].target, e->name) == 0;
        if (!mine)
            continue;
        any = 1;
        json_t *j = json_object();
        json_object_set_new(j, "name", json_string(e->name));
        json_object_set_new(j, "type", json_string(e->kind == RESOLVE_SRV ? "SRV" : "address"));
        if (e->kind == RESOLVE_HOST)
            json_object_set_new(j, "address", e->have ? json_string(e->addr) : json_null());
        else
            json_object_set_new(j, "records", json_integer(e->nsrv));
        json_object_set_new(j, "interval", json_integer(e->interval_s));
        json_object_set_new(j, "queries", json_integer((json_int_t)e->queries));
        json_object_set_new(j, "failures", json_integer((json_int_t)e->failures));
        json_object_set_new(j, "changes", json_integer((json_int_t)e->changes));
        json_object_set_new(j, "failing", json_boolean(e->failing));
        json_object_set_new(j, "last_error", e->last_error[0] ? json_string(e->last_error)
                                                              : json_null());
        json_array_append_new(names, j);
    }
    uv_mutex_unlock(&r->mu);
    if (!any) {
        json_decref(o);
        json_decref(names);
        return NULL;
    }
    json_object_set_new(o, "discovery", cp->discovery ? json_string(cp->discovery) : json_null());
    json_object_set_new(o, "names", names);
    return o;
}

/* ------------------------------------------------------------------ life */

int resolve_init(struct proxy *p, resolve_rebuild_fn rebuild)
{
    static int library;
    struct resolve *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    if (!library && ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS) {
        free(r);
        return -ENOMEM;
    }
    library = 1;
    r->p = p;
    r->rebuild_fn = rebuild;
    uv_mutex_init(&r->mu);
    queue_init(&r->entries);
    queue_init(&r->polls);
    p->resolve = r;
    return 0;
}

void resolve_start(struct proxy *p)
{
    struct resolve *r = p->resolve;
    if (r == NULL)
        return;
    uv_timer_init(&p->loop, &r->tick);
    uv_timer_init(&p->loop, &r->timeout);
    uv_timer_init(&p->loop, &r->rebuild);
    r->tick.data = r->timeout.data = r->rebuild.data = r;
    r->started = 1;
    if (resolve_channel_new(r, &r->channel, 1) != ARES_SUCCESS) {
        log_error("dns: cannot set up the resolver: names are not re-resolved");
        r->channel = NULL;
        return;
    }
    uv_timer_start(&r->tick, resolve_tick_cb, RESOLVE_TICK_MS, RESOLVE_TICK_MS);
    if (r->changed)
        uv_timer_start(&r->rebuild, resolve_rebuild_cb, 0, 0);
}

void resolve_close(struct proxy *p)
{
    struct resolve *r = p->resolve;
    if (r == NULL || !r->started)
        return;
    if (r->channel != NULL)
        ares_destroy(r->channel);       /* its sockets' handles close through the callback */
    r->channel = NULL;
    while (!queue_empty(&r->polls)) {
        struct resolve_poll *rp = QUEUE_DATA(queue_first(&r->polls), struct resolve_poll, link);
        queue_remove(&rp->link);
        uv_close((uv_handle_t *)&rp->poll, resolve_poll_close_cb);
    }
    uv_close((uv_handle_t *)&r->tick, NULL);
    uv_close((uv_handle_t *)&r->timeout, NULL);
    uv_close((uv_handle_t *)&r->rebuild, NULL);
    r->started = 0;
}

void resolve_free(struct proxy *p)
{
    struct resolve *r = p->resolve;
    if (r == NULL)
        return;
    while (!queue_empty(&r->entries)) {
        struct resolve_entry *e = QUEUE_DATA(queue_first(&r->entries), struct resolve_entry,
                                             link);
        queue_remove(&e->link);
        resolve_entry_free(e);
    }
    free(r->servers);
    uv_mutex_destroy(&r->mu);
    free(r);
    p->resolve = NULL;
}
