/* Redis Sentinel pools on the main thread: each pool's master asked of its sentinels, confirmed with ROLE, followed through +switch-master, published to the workers as a new snapshot. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "conf/conf.h"
#include "control/proxy.h"
#include "control/sentinel.h"
#include "control/sentinel_link.h"
#include "lib/buf.h"
#include "lib/log.h"
#include "lib/queue.h"
#include "lib/util.h"

#define SENTINEL_STEP_MAX_MS     1000   /* one sentinel's or master's answer, at most */
#define SENTINEL_BACKOFF_MIN_MS  100    /* between rounds while news keeps coming */
#define SENTINEL_BACKOFF_MAX_MS  1000
#define SENTINEL_CHECK_MS        5000   /* a round after a good one, pub/sub or not */
#define SENTINEL_SUB_RETRY_MAX_MS 2000  /* a sentinel's pub/sub reconnects within this */
#define SENTINEL_PUBLISH_RETRY_MS 10    /* a reload is being adopted: publish after it */
#define SENTINEL_BUILD_RETRY_MS  1000   /* a snapshot could not be built */
#define SENTINEL_LOG_EVERY_MS    60000  /* a pool whose rounds keep failing: a line a minute */
#define SENTINEL_SWITCH_CHANNEL  "+switch-master"
#define SENTINEL_SDOWN_CHANNEL   "+sdown"       /* a replica (or master) seen down */
#define SENTINEL_UNSDOWN_CHANNEL "-sdown"       /* ... and up again */

/* ------------------------------------------------------------------ records */

struct sentinel_registry;

enum sentinel_phase { SENTINEL_IDLE, SENTINEL_ASKING, SENTINEL_CONFIRMING, SENTINEL_LISTING };

struct sentinel {
    struct qnode             link;
    struct sentinel_registry *reg;
    char                    *pool;          /* the pool's name: the record's key */
    /* from the configuration last built (main thread) */
    char                    *master_name;
    char                   **addrs;         /* the sentinels, "host:port" */
    uint32_t                 naddrs;
    char                    *key;           /* master name and sentinels: a change drops the master */
    char                    *s_user, *s_pass;   /* sentinel_username / sentinel_auth */
    char                    *m_user, *m_pass;   /* the pool's redis_username / redis_auth */
    uint32_t                 step_ms;
    int                      any_live;      /* read_from: any-live: the replicas are followed */
    /* the master in use (main thread; "" none) and, with any_live, its live replicas
     * (sorted: a snapshot's server order does not depend on the sentinels' answer order) */
    char                     master[SENTINEL_ADDR_MAX];
    char                     replicas[SENTINEL_REPLICAS_MAX][SENTINEL_ADDR_MAX];
    uint32_t                 nreplicas;
    /* a round (main thread) */
    uv_loop_t               *loop;          /* the round's: the main loop, or a private one */
    int                      sync;          /* the round is a start-up one (no publish) */
    enum sentinel_phase      phase;
    struct sentinel_link            *lk;
    uint32_t                 first;         /* the sentinel that answered last */
    uint32_t                 tried;         /* sentinels asked this round */
    uint32_t                 asking;        /* the index asked now */
    char                     cand[SENTINEL_ADDR_MAX];   /* the address it named */
    char                     cand_rep[SENTINEL_REPLICAS_MAX][SENTINEL_ADDR_MAX]; /* its replicas */
    uint32_t                 ncand_rep;
    char                     round_err[1024];
    int                      active;
    uv_timer_t               timer;
    int                      timer_open;
    uint64_t                 due_ms;
    uint64_t                 last_start_ms;
    uint32_t                 backoff_ms;
    int                      again;
    uint64_t                 fail_logged_ms;
    uint32_t                 fail_rounds;
    /* any thread */
    atomic_int               wanted;
    atomic_uint_fast64_t     requested[SENTINEL_WHY_COUNT];
    uv_mutex_t               mu;            /* st */
    struct sentinel_stats    st;
};

/* One sentinel's pub/sub connection, shared by every pool that lists that sentinel with
 * the same credentials. */
struct sentinel_sub {
    struct qnode             link;
    struct sentinel_registry *reg;
    char                    *addr;
    char                    *user, *pass;
    struct sentinel_link            *lk;
    int                      subscribed;
    int                      was_subscribed;    /* a reconnect may have missed a switch */
    int                      used;
    uv_timer_t               timer;
    uint32_t                 backoff_ms;
};

struct sentinel_registry {
    struct proxy        *p;
    sentinel_rebuild_fn  rebuild;
    struct qnode         records;
    struct qnode         subs;
    uv_async_t           async;             /* workers: a round is wanted */
    uv_timer_t           publish_timer;
    int                  open;
    int                  publish_pending;
};

static void sentinel_round_start(struct sentinel *sn);
static void sentinel_schedule(struct sentinel *sn, int now);
static void sentinel_timer_cb(uv_timer_t *t);
static void sentinel_publish_timer_cb(uv_timer_t *t);
static void sentinel_sub_connect(struct sentinel_sub *sub);
static void sentinel_sub_timer_cb(uv_timer_t *t);

static void sentinel_strv_free(char **v, uint32_t n)
{
    for (uint32_t i = 0; v != NULL && i < n; i++)
        free(v[i]);
    free(v);
}

static char *sentinel_strdup0(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

/* Everything of pool cp the record follows: master name, sentinels in order, credentials,
 * timeout ("\001" between fields: no field holds it unescaped... and a clash only costs a
 * question to the sentinels). A new string, or NULL without memory. */
static char *sentinel_key(const struct conf_pool *cp)
{
    const struct conf_sentinel *cs = cp->sentinel;
    struct buf key;
    int rc = 0;

    buf_init(&key);
    rc |= buf_appendf(&key, "%s\001%d\001%d\001%s\001%s\001%s\001%s", cs->master, cp->timeout_ms,
                      (int)cs->read_from,
                      cs->username ? cs->username : "", cs->auth ? cs->auth : "",
                      cp->redis_username ? cp->redis_username : "",
                      cp->redis_auth ? cp->redis_auth : "");
    for (uint32_t i = 0; i < cs->naddrs; i++)
        rc |= buf_appendf(&key, "\001%s", cs->addrs[i].text);
    rc |= buf_append(&key, "", 1);
    char *out = rc == 0 ? strdup(buf_rptr(&key)) : NULL;
    buf_free(&key);
    return out;
}

/* The new record's settings from pool cp. 0, or -1 without memory. */
static int sentinel_configure(struct sentinel *sn, const struct conf_pool *cp)
{
    const struct conf_sentinel *cs = cp->sentinel;

    sn->addrs = calloc(cs->naddrs, sizeof(*sn->addrs));
    if (sn->addrs == NULL)
        return -1;
    sn->naddrs = cs->naddrs;
    for (uint32_t i = 0; i < cs->naddrs; i++)
        if ((sn->addrs[i] = strdup(cs->addrs[i].text)) == NULL)
            return -1;
    sn->master_name = strdup(cs->master);
    sn->s_user = sentinel_strdup0(cs->username);
    sn->s_pass = sentinel_strdup0(cs->auth);
    sn->m_user = sentinel_strdup0(cp->redis_username);
    sn->m_pass = sentinel_strdup0(cp->redis_auth);
    if (sn->master_name == NULL || (cs->username && sn->s_user == NULL) ||
        (cs->auth && sn->s_pass == NULL) || (cp->redis_username && sn->m_user == NULL) ||
        (cp->redis_auth && sn->m_pass == NULL))
        return -1;
    uint32_t t = cp->timeout_ms > 0 ? (uint32_t)cp->timeout_ms : SENTINEL_STEP_MAX_MS;
    sn->step_ms = RL_MIN(t, (uint32_t)SENTINEL_STEP_MAX_MS);
    sn->any_live = cs->read_from == CONF_READ_ANY_LIVE;
    snprintf(sn->st.master_name, sizeof(sn->st.master_name), "%s", cs->master);
    return 0;
}

static void sentinel_record_free(struct sentinel *sn)
{
    sentinel_strv_free(sn->addrs, sn->naddrs);
    free(sn->master_name);
    free(sn->key);
    free(sn->s_user);
    free(sn->s_pass);
    free(sn->m_user);
    free(sn->m_pass);
    free(sn->pool);
    uv_mutex_destroy(&sn->mu);
    free(sn);
}

/*
 * The record of pool cp's settings (made when missing). A record is never changed by a
 * build: a reload that changes the settings gets a record of its own, and the running
 * pool keeps following with its own until the new snapshot is published (a refused reload
 * leaves it as it was). NULL without memory.
 */
static struct sentinel *sentinel_get(struct sentinel_registry *reg, const struct conf_pool *cp)
{
    struct qnode *n;
    char *key = sentinel_key(cp);

    if (key == NULL)
        return NULL;
    QUEUE_FOREACH(n, &reg->records) {
        struct sentinel *sn = QUEUE_DATA(n, struct sentinel, link);
        if (strcmp(sn->pool, cp->name) == 0 && strcmp(sn->key, key) == 0) {
            free(key);
            return sn;
        }
    }
    struct sentinel *sn = calloc(1, sizeof(*sn));
    if (sn == NULL) {
        free(key);
        return NULL;
    }
    sn->key = key;
    uv_mutex_init(&sn->mu);
    if ((sn->pool = strdup(cp->name)) == NULL || sentinel_configure(sn, cp) < 0) {
        sentinel_record_free(sn);
        return NULL;
    }
    sn->reg = reg;
    sn->backoff_ms = SENTINEL_BACKOFF_MIN_MS;
    if (reg->open) {
        uv_timer_init(&reg->p->loop, &sn->timer);
        sn->timer.data = sn;
        sn->timer_open = 1;
    }
    queue_insert_tail(&reg->records, &sn->link);
    return sn;
}

static void sentinel_note_error(struct sentinel *sn, const char *err)
{
    snprintf(sn->round_err, sizeof(sn->round_err), "%s", err);
}

/* ------------------------------------------------------------------ publish */

/* Have a snapshot with every sentinel pool's master built and published (after the
 * publish in progress, if any). */
static void sentinel_publish(struct sentinel_registry *reg)
{
    struct proxy *p = reg->p;
    char err[1024] = "";
    int rc = 1;

    if (!atomic_load(&p->stopping))
        rc = reg->rebuild(p, err, sizeof(err));
    reg->publish_pending = rc != 0;
    if (rc < 0)
        log_error("sentinel: new master not published: %s (retrying)", err);
    if (rc != 0 && reg->open && !atomic_load(&p->stopping))
        uv_timer_start(&reg->publish_timer, sentinel_publish_timer_cb,
                       rc > 0 ? SENTINEL_PUBLISH_RETRY_MS : SENTINEL_BUILD_RETRY_MS, 0);
}

static void sentinel_publish_timer_cb(uv_timer_t *t)
{
    struct sentinel_registry *reg = t->data;
    if (reg->publish_pending)
        sentinel_publish(reg);
}

/* ------------------------------------------------------------------ a round */

static void sentinel_ask_next(struct sentinel *sn);
static void sentinel_round_end(struct sentinel *sn, const char *addr);

/* Whether the round's replicas differ from the ones in use (never without any_live). */
static int sentinel_replicas_differ(const struct sentinel *sn)
{
    if (!sn->any_live)
        return 0;
    if (sn->ncand_rep != sn->nreplicas)
        return 1;
    for (uint32_t i = 0; i < sn->ncand_rep; i++)
        if (strcmp(sn->cand_rep[i], sn->replicas[i]) != 0)
            return 1;
    return 0;
}

/* The round's replicas as "a, b" ("none") for the log. */
static void sentinel_replicas_text(const struct sentinel *sn, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < sn->ncand_rep && at < len; i++) {
        int k = snprintf(out + at, len - at, "%s%s", i ? ", " : "", sn->cand_rep[i]);
        if (k < 0)
            break;
        at += (size_t)k;
    }
    if (sn->ncand_rep == 0)
        snprintf(out, len, "none (reads go to the master)");
}

static int sentinel_addr_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/*
 * One entry of SENTINEL REPLICAS (a flat list of field, value) into the round's list
 * when the replica can serve reads: no s_down / o_down / disconnected flag, its link to
 * the master "ok", a parsable address other than the master's, not listed already.
 */
static void sentinel_replica_take(struct sentinel *sn, const struct sentinel_resp *e)
{
    const char *ip = NULL, *port = NULL, *flags = NULL, *link = NULL;
    char addr[SENTINEL_ADDR_MAX], aerr[200];
    struct conf_addr a;

    if (e->type != '*' || e->elem == NULL || sn->ncand_rep >= SENTINEL_REPLICAS_MAX)
        return;
    for (size_t i = 0; i + 1 < e->n; i += 2) {
        const struct sentinel_resp *k = &e->elem[i], *v = &e->elem[i + 1];
        if (k->type != '$' || v->type != '$' || k->str == NULL || v->str == NULL)
            continue;
        if (strcmp(k->str, "ip") == 0)
            ip = v->str;
        else if (strcmp(k->str, "port") == 0)
            port = v->str;
        else if (strcmp(k->str, "flags") == 0)
            flags = v->str;
        else if (strcmp(k->str, "master-link-status") == 0)
            link = v->str;
    }
    if (ip == NULL || port == NULL || flags == NULL || link == NULL ||
        strstr(flags, "s_down") != NULL || strstr(flags, "o_down") != NULL ||
        strstr(flags, "disconnected") != NULL || strcmp(link, "ok") != 0)
        return;
    int v6 = strchr(ip, ':') != NULL;
    snprintf(addr, sizeof(addr), "%s%s%s:%s", v6 ? "[" : "", ip, v6 ? "]" : "", port);
    int ok = conf_parse_addr(addr, &a, aerr, sizeof(aerr)) == 0 && a.host != NULL;
    conf_addr_free(&a);
    if (!ok || strcmp(addr, sn->cand) == 0)
        return;
    for (uint32_t i = 0; i < sn->ncand_rep; i++)
        if (strcmp(sn->cand_rep[i], addr) == 0)
            return;
    snprintf(sn->cand_rep[sn->ncand_rep++], SENTINEL_ADDR_MAX, "%s", addr);
}

/* The answer to SENTINEL REPLICAS: the round ends with the confirmed master and the live
 * replicas; no answer keeps the replicas in use for the same master (none for another:
 * they were its replicas) and the round still counts, the master being confirmed. */
static void sentinel_listed(void *arg, struct sentinel_resp *const *r, uint32_t n, const char *err)
{
    struct sentinel *sn = arg;

    sn->lk = NULL;
    sn->ncand_rep = 0;
    if (err == NULL && n == 1 && r[0]->type == '*' && r[0]->elem != NULL) {
        for (size_t i = 0; i < r[0]->n; i++)
            sentinel_replica_take(sn, &r[0]->elem[i]);
        qsort(sn->cand_rep, sn->ncand_rep, sizeof(sn->cand_rep[0]), sentinel_addr_cmp);
    } else if (!(err == NULL && n == 1 && r[0]->type == '*')) {
        log_info("pool '%s': sentinel %s: SENTINEL REPLICAS %s: %.150s; %s", sn->pool,
                 sn->addrs[sn->asking], sn->master_name,
                 err ? err : (n == 1 && r[0]->type == '-' ? r[0]->str : "unexpected reply"),
                 strcmp(sn->master, sn->cand) == 0 ? "the replicas in use are kept" :
                 "reads go to the master");
        if (strcmp(sn->master, sn->cand) == 0) {
            memcpy(sn->cand_rep, sn->replicas, sizeof(sn->cand_rep));
            sn->ncand_rep = sn->nreplicas;
        }
    }
    sentinel_round_end(sn, sn->cand);
}

/* The master is confirmed: with any-live, ask the sentinel that named it for its
 * replicas; else the round ends. */
static void sentinel_confirmed(struct sentinel *sn)
{
    struct conf_addr a;
    char aerr[200];

    sn->ncand_rep = 0;
    if (!sn->any_live) {
        sentinel_round_end(sn, sn->cand);
        return;
    }
    if (conf_parse_addr(sn->addrs[sn->asking], &a, aerr, sizeof(aerr)) == 0 && a.host != NULL) {
        struct buf cmds;
        buf_init(&cmds);
        int skip = sentinel_resp_auth(&cmds, sn->s_user, sn->s_pass);
        const char *q[3] = { "SENTINEL", "REPLICAS", sn->master_name };
        if (skip >= 0 && sentinel_resp_command(&cmds, 3, q) == 0) {
            sn->phase = SENTINEL_LISTING;
            sn->lk = sentinel_link_start(sn->loop, a.host, a.port, &cmds, (uint32_t)skip,
                                         (uint32_t)skip + 1, sn->step_ms, sentinel_listed,
                                         NULL, sn);
        }
        buf_free(&cmds);
    }
    conf_addr_free(&a);
    if (sn->lk == NULL)
        sentinel_listed(sn, NULL, 0, "cannot ask (out of memory)");
}

/* The round ended: addr is the confirmed master, or NULL (sn->round_err says why). */
static void sentinel_round_end(struct sentinel *sn, const char *addr)
{
    struct sentinel_registry *reg = sn->reg;
    uint64_t now = util_now_ms() + 1;

    sn->phase = SENTINEL_IDLE;
    sn->lk = NULL;
    if (addr == NULL) {
        uv_mutex_lock(&sn->mu);
        sn->st.round_errors++;
        snprintf(sn->st.last_error, sizeof(sn->st.last_error), "%.255s", sn->round_err);
        uv_mutex_unlock(&sn->mu);
        sn->backoff_ms = RL_MIN(sn->backoff_ms * 2, (uint32_t)SENTINEL_BACKOFF_MAX_MS);
        sn->fail_rounds++;
        if (!sn->sync && (sn->fail_logged_ms == 0 || now - sn->fail_logged_ms >= SENTINEL_LOG_EVERY_MS)) {
            log_warn("pool '%s': no sentinel named a master '%s' that ROLE confirms (%s); "
                     "%u round(s) since the last such line, logged at most once a minute",
                     sn->pool, sn->master_name, sn->round_err, sn->fail_rounds);
            sn->fail_logged_ms = now;
            sn->fail_rounds = 0;
        }
        if (!sn->sync)
            sentinel_schedule(sn, 0);   /* again after the back-off: the failover is coming */
        return;
    }
    sn->fail_logged_ms = 0;
    sn->fail_rounds = 0;
    int changed = strcmp(sn->master, addr) != 0;
    int rchanged = sentinel_replicas_differ(sn);
    uv_mutex_lock(&sn->mu);
    sn->st.rounds++;
    sn->st.last_error[0] = '\0';
    if (changed && sn->master[0] != '\0') {
        snprintf(sn->st.previous, sizeof(sn->st.previous), "%s", sn->master);
        sn->st.switches++;
        sn->st.switched_at_us = util_wall_us();
    }
    snprintf(sn->st.master, sizeof(sn->st.master), "%s", addr);
    if (rchanged && !changed && sn->master[0] != '\0')
        sn->st.replica_changes++;
    sn->st.replicas = sn->ncand_rep;
    uv_mutex_unlock(&sn->mu);
    if (rchanged) {
        char list[1024];
        sentinel_replicas_text(sn, list, sizeof(list));
        if (!sn->sync || changed)
            log_notice("pool '%s': replicas of '%s' that serve reads: %s (sentinel %s)",
                       sn->pool, sn->master_name, list, sn->addrs[sn->asking]);
        memcpy(sn->replicas, sn->cand_rep, sizeof(sn->replicas));
        sn->nreplicas = sn->ncand_rep;
    }
    if (!changed && rchanged) {
        /* the same master, other replicas: a new snapshot (no key moves: every key is
         * the master's) */
        sn->backoff_ms = SENTINEL_BACKOFF_MIN_MS;
        if (!sn->sync) {
            sentinel_publish(reg);
            sentinel_schedule(sn, 0);
        }
        return;
    }
    if (!changed) {
        sn->backoff_ms = RL_MIN(sn->backoff_ms * 2, (uint32_t)SENTINEL_BACKOFF_MAX_MS);
        if (!sn->sync)
            sentinel_schedule(sn, 0);
        return;
    }
    if (sn->sync) {
        log_notice("pool '%s': master '%s' is %s (sentinel %s, ROLE master)", sn->pool,
                   sn->master_name, addr, sn->addrs[sn->first]);
    } else {
        log_notice("pool '%s': master '%s' moved from %s to %s (sentinel %s, ROLE master): "
                   "new requests go there, keys stay where they were", sn->pool,
                   sn->master_name, sn->master[0] ? sn->master : "(none)", addr,
                   sn->addrs[sn->first]);
    }
    snprintf(sn->master, sizeof(sn->master), "%s", addr);
    sn->backoff_ms = SENTINEL_BACKOFF_MIN_MS;
    if (!sn->sync) {
        sentinel_publish(reg);
        sentinel_schedule(sn, 0);
    }
}

/* The master's ROLE: "master" confirms the candidate; anything else, the next sentinel. */
static void sentinel_roled(void *arg, struct sentinel_resp *const *r, uint32_t n, const char *err)
{
    struct sentinel *sn = arg;
    char why[1024];

    sn->lk = NULL;
    if (err == NULL && n == 1 && r[0]->type == '*' && r[0]->n >= 1 &&
        r[0]->elem[0].type == '$' && r[0]->elem[0].str != NULL &&
        strcmp(r[0]->elem[0].str, "master") == 0) {
        sn->first = sn->asking;
        sentinel_confirmed(sn);
        return;
    }
    if (err != NULL)
        snprintf(why, sizeof(why), "%s named by sentinel %s: ROLE: %s", sn->cand,
                 sn->addrs[sn->asking], err);
    else if (n == 1 && r[0]->type == '-')
        snprintf(why, sizeof(why), "%s named by sentinel %s: ROLE: %.100s", sn->cand,
                 sn->addrs[sn->asking], r[0]->str);
    else
        snprintf(why, sizeof(why), "%s named by sentinel %s is not a master (ROLE: %.40s)",
                 sn->cand, sn->addrs[sn->asking],
                 n == 1 && r[0]->type == '*' && r[0]->n >= 1 && r[0]->elem[0].str ?
                 r[0]->elem[0].str : "?");
    sentinel_note_error(sn, why);
    log_info("pool '%s': %s", sn->pool, why);
    sn->tried++;
    sentinel_ask_next(sn);
}

/* A sentinel's answer to get-master-addr-by-name: ["ip", "port"], or nil (unknown name). */
static void sentinel_asked(void *arg, struct sentinel_resp *const *r, uint32_t n, const char *err)
{
    struct sentinel *sn = arg;
    const char *at = sn->addrs[sn->asking];
    char why[1024];

    sn->lk = NULL;
    if (err != NULL) {
        snprintf(why, sizeof(why), "sentinel %s: %s", at, err);
    } else if (n != 1 || r[0]->type != '*' || r[0]->n != 2 || r[0]->elem[0].type != '$' ||
               r[0]->elem[1].type != '$' || r[0]->elem[0].str == NULL ||
               r[0]->elem[1].str == NULL) {
        if (n == 1 && r[0]->type == '-')
            snprintf(why, sizeof(why), "sentinel %s: %.150s", at, r[0]->str);
        else
            snprintf(why, sizeof(why), "sentinel %s does not know master '%s'", at,
                     sn->master_name);
    } else {
        struct conf_addr a;
        char aerr[200];
        const char *host = r[0]->elem[0].str;
        int v6 = strchr(host, ':') != NULL;
        snprintf(sn->cand, sizeof(sn->cand), "%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "",
                 r[0]->elem[1].str);
        if (conf_parse_addr(sn->cand, &a, aerr, sizeof(aerr)) == 0 && a.host != NULL) {
            struct buf cmds;
            buf_init(&cmds);
            int skip = sentinel_resp_auth(&cmds, sn->m_user, sn->m_pass);
            const char *role[1] = { "ROLE" };
            if (skip >= 0 && sentinel_resp_command(&cmds, 1, role) == 0) {
                sn->phase = SENTINEL_CONFIRMING;
                sn->lk = sentinel_link_start(sn->loop, a.host, a.port, &cmds, (uint32_t)skip,
                                     (uint32_t)skip + 1, sn->step_ms, sentinel_roled, NULL, sn);
            }
            buf_free(&cmds);
            conf_addr_free(&a);
            if (sn->lk != NULL)
                return;
            snprintf(why, sizeof(why), "%s: out of memory", sn->cand);
        } else {
            conf_addr_free(&a);
            snprintf(why, sizeof(why), "sentinel %s named '%s': %s", at, sn->cand, aerr);
        }
    }
    sentinel_note_error(sn, why);
    log_info("pool '%s': %s", sn->pool, why);
    sn->tried++;
    sentinel_ask_next(sn);
}

/* Ask the round's next sentinel (the one that answered last first, then the list's
 * order); none left: the round failed. */
static void sentinel_ask_next(struct sentinel *sn)
{
    while (sn->tried < sn->naddrs) {
        uint32_t i = (sn->first + sn->tried) % sn->naddrs;
        struct conf_addr a;
        char aerr[200];
        sn->asking = i;
        if (conf_parse_addr(sn->addrs[i], &a, aerr, sizeof(aerr)) == 0 && a.host != NULL) {
            struct buf cmds;
            buf_init(&cmds);
            int skip = sentinel_resp_auth(&cmds, sn->s_user, sn->s_pass);
            const char *q[3] = { "SENTINEL", "get-master-addr-by-name", sn->master_name };
            if (skip >= 0 && sentinel_resp_command(&cmds, 3, q) == 0) {
                sn->phase = SENTINEL_ASKING;
                sn->lk = sentinel_link_start(sn->loop, a.host, a.port, &cmds, (uint32_t)skip,
                                     (uint32_t)skip + 1, sn->step_ms, sentinel_asked, NULL, sn);
            }
            buf_free(&cmds);
        }
        conf_addr_free(&a);
        if (sn->lk != NULL)
            return;
        sn->tried++;
    }
    if (sn->round_err[0] == '\0')
        sentinel_note_error(sn, "no sentinel could be asked");
    sentinel_round_end(sn, NULL);
}

static void sentinel_round_start(struct sentinel *sn)
{
    sn->last_start_ms = uv_now(sn->loop);
    sn->again = 0;
    sn->tried = 0;
    sn->round_err[0] = '\0';
    if (sn->first >= sn->naddrs)
        sn->first = 0;
    sentinel_ask_next(sn);
}

/* ------------------------------------------------------------------ scheduling */

static void sentinel_arm(struct sentinel *sn, uint64_t at)
{
    uint64_t now = uv_now(&sn->reg->p->loop);
    if (!sn->timer_open || (sn->due_ms != 0 && sn->due_ms <= at))
        return;
    sn->due_ms = at;
    uv_timer_start(&sn->timer, sentinel_timer_cb, at > now ? at - now : 0, 0);
}

#define SENTINEL_NEWS   1   /* a worker's news: a round, spaced by the back-off */
#define SENTINEL_URGENT 2   /* +switch-master: a round now */

/*
 * A round now (news: `now`, spaced by the back-off; +switch-master: at once) or the next periodic one (after a
 * good round, SENTINEL_CHECK_MS; after a failed one, the back-off). One round at a time:
 * news during a round runs another after it.
 */
static void sentinel_schedule(struct sentinel *sn, int now_wanted)
{
    struct proxy *p = sn->reg->p;
    if (!sn->active || !sn->reg->open || atomic_load(&p->stopping))
        return;
    if (sn->phase != SENTINEL_IDLE) {
        sn->again = RL_MAX(sn->again, now_wanted);
        return;
    }
    uint64_t now = uv_now(&p->loop);
    uint64_t spaced = sn->last_start_ms + sn->backoff_ms;
    if (now_wanted || sn->again) {
        int urgent = now_wanted == SENTINEL_URGENT || sn->again == SENTINEL_URGENT;
        sn->again = 0;
        if (spaced <= now || urgent) {
            sn->loop = &p->loop;
            sn->sync = 0;
            sentinel_round_start(sn);
            return;
        }
        sentinel_arm(sn, spaced);
        return;
    }
    int failing = sn->st.last_error[0] != '\0';     /* main thread: the only writer */
    sentinel_arm(sn, failing ? spaced : sn->last_start_ms + SENTINEL_CHECK_MS);
}

static void sentinel_timer_cb(uv_timer_t *t)
{
    struct sentinel *sn = t->data;
    sn->due_ms = 0;
    if (sn->phase != SENTINEL_IDLE) {
        sn->again = 1;
        return;
    }
    if (sn->active && sn->reg->open && !atomic_load(&sn->reg->p->stopping)) {
        sn->loop = &sn->reg->p->loop;
        sn->sync = 0;
        sentinel_round_start(sn);
    }
}

void sentinel_refresh_request(struct sentinel *sn, enum sentinel_why why)
{
    atomic_fetch_add_explicit(&sn->requested[why], 1, memory_order_relaxed);
    if (atomic_exchange_explicit(&sn->wanted, 1, memory_order_acq_rel) == 0 && sn->reg->open)
        uv_async_send(&sn->reg->async);
}

static void sentinel_async_cb(uv_async_t *a)
{
    struct sentinel_registry *reg = a->data;
    struct qnode *n;
    QUEUE_FOREACH(n, &reg->records) {
        struct sentinel *sn = QUEUE_DATA(n, struct sentinel, link);
        if (atomic_exchange_explicit(&sn->wanted, 0, memory_order_acq_rel))
            sentinel_schedule(sn, SENTINEL_NEWS);
    }
}

/* ------------------------------------------------------------------ pub/sub */

static int sentinel_lists(const struct sentinel *sn, const char *addr)
{
    for (uint32_t i = 0; i < sn->naddrs; i++)
        if (strcmp(sn->addrs[i], addr) == 0)
            return 1;
    return 0;
}

static int sentinel_sub_matches(const struct sentinel_sub *sub, const struct sentinel *sn)
{
    return sentinel_lists(sn, sub->addr) &&
           ((sub->user == NULL && sn->s_user == NULL) ||
            (sub->user && sn->s_user && strcmp(sub->user, sn->s_user) == 0)) &&
           ((sub->pass == NULL && sn->s_pass == NULL) ||
            (sub->pass && sn->s_pass && strcmp(sub->pass, sn->s_pass) == 0));
}

/* The number of sn's sentinels whose subscription is live, into its stats. */
static void sentinel_count_subs(struct sentinel_registry *reg)
{
    struct qnode *n, *m;
    QUEUE_FOREACH(n, &reg->records) {
        struct sentinel *sn = QUEUE_DATA(n, struct sentinel, link);
        uint32_t live = 0;
        QUEUE_FOREACH(m, &reg->subs) {
            struct sentinel_sub *sub = QUEUE_DATA(m, struct sentinel_sub, link);
            live += sub->subscribed && sentinel_sub_matches(sub, sn);
        }
        uv_mutex_lock(&sn->mu);
        sn->st.subscribed = live;
        uv_mutex_unlock(&sn->mu);
    }
}

/* News for the pools that follow master `name` through this sentinel. */
/* msg: 0 a reconnect (news for all), 1 +switch-master, 2 a replica's +sdown / -sdown
 * (news for the pools that read from replicas). */
static void sentinel_sub_news(struct sentinel_sub *sub, const char *name, size_t len, int msg)
{
    struct qnode *n;
    QUEUE_FOREACH(n, &sub->reg->records) {
        struct sentinel *sn = QUEUE_DATA(n, struct sentinel, link);
        if (msg == 2) {
            if (sn->active && sn->any_live && sentinel_sub_matches(sub, sn) &&
                strlen(sn->master_name) == len && memcmp(sn->master_name, name, len) == 0) {
                log_info("pool '%s': sentinel %s: a replica of '%s' went down or up", sn->pool,
                         sub->addr, sn->master_name);
                sentinel_schedule(sn, SENTINEL_NEWS);
            }
            continue;
        }
        if (!sn->active || !sentinel_sub_matches(sub, sn) ||
            (name != NULL && (strlen(sn->master_name) != len ||
                              memcmp(sn->master_name, name, len) != 0)))
            continue;
        if (msg) {
            uv_mutex_lock(&sn->mu);
            sn->st.switch_messages++;
            uv_mutex_unlock(&sn->mu);
            log_info("pool '%s': sentinel %s: +switch-master for '%s'", sn->pool, sub->addr,
                     sn->master_name);
            for (uint32_t i = 0; i < sn->naddrs; i++)
                if (strcmp(sn->addrs[i], sub->addr) == 0)
                    sn->first = i;      /* it knows the new master: asked first */
        }
        sentinel_schedule(sn, msg ? SENTINEL_URGENT : SENTINEL_NEWS);
    }
}

/* A subscription's message: ["message", "+switch-master", "<name> <old ip> <old port>
 * <new ip> <new port>"]; NULL: the connection ended. */
static void sentinel_sub_push(void *arg, const struct sentinel_resp *r)
{
    struct sentinel_sub *sub = arg;
    if (r == NULL) {
        sub->lk = NULL;
        sub->subscribed = 0;
        sentinel_count_subs(sub->reg);
        log_info("sentinel %s: pub/sub connection lost; reconnecting", sub->addr);
        if (sub->reg->open && sub->used)
            uv_timer_start(&sub->timer, sentinel_sub_timer_cb, sub->backoff_ms, 0);
        return;
    }
    if (r->type != '*' || r->n != 3 || r->elem[0].str == NULL || r->elem[1].str == NULL ||
        r->elem[2].str == NULL || strcmp(r->elem[0].str, "message") != 0)
        return;
    const char *payload = r->elem[2].str;
    if (strcmp(r->elem[1].str, SENTINEL_SDOWN_CHANNEL) == 0 ||
        strcmp(r->elem[1].str, SENTINEL_UNSDOWN_CHANNEL) == 0) {
        /* "slave <ip>:<port> <ip> <port> @ <master> <ip> <port>": that master's pools
         * that read from replicas ask again (a master's own +sdown: its failover will
         * say +switch-master) */
        const char *at = strstr(payload, " @ ");
        if (strncmp(payload, "slave ", 6) != 0 || at == NULL)
            return;
        at += 3;
        const char *end = strchr(at, ' ');
        sentinel_sub_news(sub, at, end ? (size_t)(end - at) : strlen(at), 2);
        return;
    }
    if (strcmp(r->elem[1].str, SENTINEL_SWITCH_CHANNEL) != 0)
        return;
    const char *sp = strchr(payload, ' ');
    sentinel_sub_news(sub, payload, sp ? (size_t)(sp - payload) : strlen(payload), 1);
}

/* The subscription's confirmation (or its failure: try again after a back-off). */
static void sentinel_sub_confirmed(void *arg, struct sentinel_resp *const *r, uint32_t n, const char *err)
{
    struct sentinel_sub *sub = arg;
    int ok = err == NULL && n == 3;
    for (uint32_t i = 0; ok && i < n; i++)
        ok = r[i]->type == '*';
    if (!ok) {
        log_info("sentinel %s: cannot subscribe to " SENTINEL_SWITCH_CHANNEL ": %s", sub->addr,
                 err ? err : (n >= 1 && r[0]->type == '-' ? r[0]->str : "unexpected reply"));
        if (err == NULL)
            sentinel_link_cancel(sub->lk);      /* refused: the connection is of no use */
        sub->lk = NULL;
        sub->backoff_ms = RL_MIN(sub->backoff_ms * 2, (uint32_t)SENTINEL_SUB_RETRY_MAX_MS);
        if (sub->reg->open && sub->used)
            uv_timer_start(&sub->timer, sentinel_sub_timer_cb, sub->backoff_ms, 0);
        return;
    }
    sub->subscribed = 1;
    sub->backoff_ms = SENTINEL_BACKOFF_MIN_MS;
    sentinel_count_subs(sub->reg);
    if (sub->was_subscribed)
        sentinel_sub_news(sub, NULL, 0, 0);     /* a switch may have gone by meanwhile */
    sub->was_subscribed = 1;
}

static void sentinel_sub_connect(struct sentinel_sub *sub)
{
    struct conf_addr a;
    char aerr[200];
    struct proxy *p = sub->reg->p;

    if (sub->lk != NULL || !sub->used || !sub->reg->open || atomic_load(&p->stopping))
        return;
    if (conf_parse_addr(sub->addr, &a, aerr, sizeof(aerr)) == 0 && a.host != NULL) {
        struct buf cmds;
        buf_init(&cmds);
        int skip = sentinel_resp_auth(&cmds, sub->user, sub->pass);
        /* three confirmations: with AUTH's, within SENTINEL_REPLIES_MAX */
        const char *q[4] = { "SUBSCRIBE", SENTINEL_SWITCH_CHANNEL, SENTINEL_SDOWN_CHANNEL,
                             SENTINEL_UNSDOWN_CHANNEL };
        if (skip >= 0 && sentinel_resp_command(&cmds, 4, q) == 0)
            sub->lk = sentinel_link_start(&p->loop, a.host, a.port, &cmds, (uint32_t)skip,
                                  (uint32_t)skip + 3, SENTINEL_STEP_MAX_MS,
                                  sentinel_sub_confirmed, sentinel_sub_push, sub);
        buf_free(&cmds);
    }
    conf_addr_free(&a);
    if (sub->lk == NULL)
        uv_timer_start(&sub->timer, sentinel_sub_timer_cb, SENTINEL_SUB_RETRY_MAX_MS, 0);
}

static void sentinel_sub_timer_cb(uv_timer_t *t)
{
    sentinel_sub_connect(t->data);
}

/* The subscription to sentinel addr with sn's credentials (made when missing). */
static struct sentinel_sub *sentinel_sub_get(struct sentinel_registry *reg,
                                             const struct sentinel *sn, const char *addr)
{
    struct qnode *n;
    QUEUE_FOREACH(n, &reg->subs) {
        struct sentinel_sub *sub = QUEUE_DATA(n, struct sentinel_sub, link);
        if (strcmp(sub->addr, addr) == 0 && sentinel_sub_matches(sub, sn))
            return sub;
    }
    struct sentinel_sub *sub = calloc(1, sizeof(*sub));
    if (sub == NULL)
        return NULL;
    sub->reg = reg;
    sub->addr = strdup(addr);
    sub->user = sentinel_strdup0(sn->s_user);
    sub->pass = sentinel_strdup0(sn->s_pass);
    if (sub->addr == NULL || (sn->s_user && sub->user == NULL) || (sn->s_pass && sub->pass == NULL)) {
        free(sub->addr);
        free(sub->user);
        free(sub->pass);
        free(sub);
        return NULL;
    }
    sub->backoff_ms = SENTINEL_BACKOFF_MIN_MS;
    uv_timer_init(&reg->p->loop, &sub->timer);
    sub->timer.data = sub;
    queue_insert_tail(&reg->subs, &sub->link);
    return sub;
}

/* Subscriptions for every active pool's sentinels; the ones no pool uses any more end. */
static void sentinel_subs_update(struct sentinel_registry *reg)
{
    struct qnode *n;
    QUEUE_FOREACH(n, &reg->subs)
        QUEUE_DATA(n, struct sentinel_sub, link)->used = 0;
    QUEUE_FOREACH(n, &reg->records) {
        struct sentinel *sn = QUEUE_DATA(n, struct sentinel, link);
        for (uint32_t i = 0; sn->active && i < sn->naddrs; i++) {
            struct sentinel_sub *sub = sentinel_sub_get(reg, sn, sn->addrs[i]);
            if (sub != NULL)
                sub->used = 1;
        }
    }
    QUEUE_FOREACH(n, &reg->subs) {
        struct sentinel_sub *sub = QUEUE_DATA(n, struct sentinel_sub, link);
        if (sub->used && sub->lk == NULL && !uv_is_active((uv_handle_t *)&sub->timer)) {
            sentinel_sub_connect(sub);
        } else if (!sub->used) {
            sentinel_link_cancel(sub->lk);
            sub->lk = NULL;
            sub->subscribed = 0;
            sub->was_subscribed = 0;
            uv_timer_stop(&sub->timer);
        }
    }
    sentinel_count_subs(reg);
}

/* ------------------------------------------------------------------ snapshots */

/* A start-up round on a private loop: every sentinel in turn, each step within step_ms. */
static void sentinel_round_sync(struct sentinel *sn)
{
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0) {
        sentinel_note_error(sn, "cannot make a loop");
        return;
    }
    sn->loop = &loop;
    sn->sync = 1;
    sentinel_round_start(sn);
    uv_run(&loop, UV_RUN_DEFAULT);      /* ends when the round's links are closed */
    sn->sync = 0;
    sn->loop = NULL;
    uv_loop_close(&loop);
}

static void sentinel_servers_free(struct conf_server *s, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        conf_server_free(&s[i]);
    free(s);
}

int sentinel_snapshot_pool(struct proxy *p, struct conf *conf, uint32_t pool,
                           struct snapshot_pool *sp, char *err, size_t errlen)
{
    struct sentinel_registry *reg = p->sentinels;
    const struct conf_pool *cp = &conf->pools[pool];
    struct sentinel *sn = reg != NULL ? sentinel_get(reg, cp) : NULL;

    if (sn == NULL)
        goto nomem;
    if (!sn->active)
        sn->master[0] = '\0';     /* not followed since: what it knew may be stale */
    if (sn->master[0] == '\0' && sn->phase == SENTINEL_IDLE) {
        sentinel_round_sync(sn);
        if (sn->master[0] == '\0') {
            snprintf(err, errlen, "pool '%s': no sentinel named a master '%s' that ROLE "
                     "confirms: %s", cp->name, cp->sentinel->master, sn->round_err);
            return -1;
        }
    } else if (sn->master[0] == '\0') {
        snprintf(err, errlen, "pool '%s': the master '%s' is being asked of the sentinels; "
                 "try again", cp->name, cp->sentinel->master);
        return -1;
    }
    /* The pool's first server: the master, known by its name on the ring (a new address
     * moves no key); with any-live its replicas follow, known by their addresses */
    uint32_t n = 1 + (sn->any_live ? sn->nreplicas : 0);
    struct conf_server *s = calloc(n, sizeof(*s));
    uint32_t *slots = NULL;
    char serr[200];
    if (s == NULL)
        goto nomem;
    for (uint32_t i = 0; i < n; i++) {
        if (conf_server_init(&s[i], i == 0 ? sn->master : sn->replicas[i - 1], NULL, serr,
                             sizeof(serr)) == 0)
            continue;
        snprintf(err, errlen, "pool '%s': %s %s: %s", cp->name, i == 0 ? "master" : "replica",
                 i == 0 ? sn->master : sn->replicas[i - 1], serr);
        sentinel_servers_free(s, i);
        return -1;
    }
    free(s[0].ident);
    free(s[0].label);
    s[0].ident = strdup(cp->sentinel->master);
    s[0].label = strdup(cp->sentinel->master);
    s[0].name = strdup(cp->sentinel->master);
    if (s[0].ident == NULL || s[0].label == NULL || s[0].name == NULL)
        goto nomem_servers;
    if (sn->any_live) {
        /* Every key is the master's whatever the replicas: a slot map of master only (the
         * ring's one identity); a replica that fails is seen as down at once (reads avoid
         * it), comes back when it answers, and a down master is no one's failover */
        if ((slots = calloc(16384, sizeof(*slots))) == NULL)
            goto nomem_servers;
        struct conf_pool *dp = &conf->pools[pool];
        dp->dist = DIST_SLOTS;
        dp->eject = 1;
        dp->rejoin = CONF_REJOIN_TRUST;
        if (dp->on_down == CONF_ON_DOWN_FAILOVER)
            dp->on_down = CONF_ON_DOWN_ERROR;
    }
    conf_derive_servers(conf, pool, s, n, slots);
    sp->sentinel = sn;
    return 0;
nomem_servers:
    sentinel_servers_free(s, n);
nomem:
    snprintf(err, errlen, "out of memory");
    return -1;
}

/* A pool's new settings (a reload) have a record of their own: the pool's counters go on
 * from the record it followed with until now (still active here), so they never go back. */
static void sentinel_carry(struct sentinel_registry *reg, struct sentinel *to)
{
    struct qnode *n;
    QUEUE_FOREACH(n, &reg->records) {
        struct sentinel *from = QUEUE_DATA(n, struct sentinel, link);
        if (from == to || !from->active || strcmp(from->pool, to->pool) != 0)
            continue;
        uv_mutex_lock(&from->mu);
        struct sentinel_stats st = from->st;
        uv_mutex_unlock(&from->mu);
        uv_mutex_lock(&to->mu);
        to->st.switches += st.switches;
        to->st.rounds += st.rounds;
        to->st.round_errors += st.round_errors;
        to->st.switch_messages += st.switch_messages;
        if (to->st.switched_at_us == 0) {
            to->st.switched_at_us = st.switched_at_us;
            snprintf(to->st.previous, sizeof(to->st.previous), "%s", st.previous);
        }
        uv_mutex_unlock(&to->mu);
        for (int w = 0; w < SENTINEL_WHY_COUNT; w++)
            atomic_fetch_add(&to->requested[w], atomic_load(&from->requested[w]));
        return;
    }
}

void sentinel_snapshot_published(struct proxy *p, const struct snapshot *snap)
{
    struct sentinel_registry *reg = p->sentinels;
    struct qnode *n;

    if (reg == NULL || !reg->open)
        return;
    /* the records that start first (their counters carried from the ones they replace),
     * then the ones that stop */
    QUEUE_FOREACH(n, &reg->records) {
        struct sentinel *sn = QUEUE_DATA(n, struct sentinel, link);
        int active = 0;
        for (uint32_t i = 0; i < snap->conf->npools; i++)
            active |= snap->pools[i].sentinel == sn;
        if (active && !sn->active) {
            sentinel_carry(reg, sn);
            sn->active = 2;                         /* started now: not stopped below */
            sn->last_start_ms = uv_now(&p->loop);   /* the build asked: the next is periodic */
            sentinel_schedule(sn, 0);
        }
    }
    QUEUE_FOREACH(n, &reg->records) {
        struct sentinel *sn = QUEUE_DATA(n, struct sentinel, link);
        int active = 0;
        for (uint32_t i = 0; i < snap->conf->npools; i++)
            active |= snap->pools[i].sentinel == sn;
        if (active) {
            sn->active = 1;
        } else if (sn->active) {
            sn->active = 0;
            sentinel_link_cancel(sn->lk);
            sn->lk = NULL;
            sn->phase = SENTINEL_IDLE;
            if (sn->timer_open)
                uv_timer_stop(&sn->timer);
            sn->due_ms = 0;
        }
    }
    sentinel_subs_update(reg);
}

void sentinel_stats_read(struct sentinel *sn, struct sentinel_stats *out)
{
    uv_mutex_lock(&sn->mu);
    *out = sn->st;
    uv_mutex_unlock(&sn->mu);
    for (int w = 0; w < SENTINEL_WHY_COUNT; w++)
        out->requested[w] = atomic_load_explicit(&sn->requested[w], memory_order_relaxed);
}

/* ------------------------------------------------------------------ registry */

int sentinel_registry_init(struct proxy *p, sentinel_rebuild_fn rebuild)
{
    struct sentinel_registry *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return -ENOMEM;
    reg->p = p;
    reg->rebuild = rebuild;
    queue_init(&reg->records);
    queue_init(&reg->subs);
    p->sentinels = reg;
    return 0;
}

void sentinel_registry_start(struct proxy *p)
{
    struct sentinel_registry *reg = p->sentinels;
    struct qnode *n;

    uv_async_init(&p->loop, &reg->async, sentinel_async_cb);
    reg->async.data = reg;
    uv_timer_init(&p->loop, &reg->publish_timer);
    reg->publish_timer.data = reg;
    reg->open = 1;
    QUEUE_FOREACH(n, &reg->records) {
        struct sentinel *sn = QUEUE_DATA(n, struct sentinel, link);
        uv_timer_init(&p->loop, &sn->timer);
        sn->timer.data = sn;
        sn->timer_open = 1;
    }
    sentinel_snapshot_published(p, atomic_load(&p->hub.current));
}

void sentinel_registry_close(struct proxy *p)
{
    struct sentinel_registry *reg = p->sentinels;
    struct qnode *n;

    if (reg == NULL || !reg->open)
        return;
    reg->open = 0;
    QUEUE_FOREACH(n, &reg->records) {
        struct sentinel *sn = QUEUE_DATA(n, struct sentinel, link);
        sentinel_link_cancel(sn->lk);
        sn->lk = NULL;
        sn->phase = SENTINEL_IDLE;
        sn->active = 0;
        if (sn->timer_open) {
            uv_close((uv_handle_t *)&sn->timer, NULL);
            sn->timer_open = 0;
        }
    }
    QUEUE_FOREACH(n, &reg->subs) {
        struct sentinel_sub *sub = QUEUE_DATA(n, struct sentinel_sub, link);
        sentinel_link_cancel(sub->lk);
        sub->lk = NULL;
        uv_close((uv_handle_t *)&sub->timer, NULL);
    }
    uv_close((uv_handle_t *)&reg->async, NULL);
    uv_close((uv_handle_t *)&reg->publish_timer, NULL);
}

void sentinel_registry_free(struct proxy *p)
{
    struct sentinel_registry *reg = p->sentinels;
    struct qnode *n;

    if (reg == NULL)
        return;
    while ((n = queue_first(&reg->records)) != NULL) {
        struct sentinel *sn = QUEUE_DATA(n, struct sentinel, link);
        queue_remove(n);
        sentinel_record_free(sn);
    }
    while ((n = queue_first(&reg->subs)) != NULL) {
        struct sentinel_sub *sub = QUEUE_DATA(n, struct sentinel_sub, link);
        queue_remove(n);
        free(sub->addr);
        free(sub->user);
        free(sub->pass);
        free(sub);
    }
    free(reg);
    p->sentinels = NULL;
}
