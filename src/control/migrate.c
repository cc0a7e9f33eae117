/* The migration engine: when a reload changes which server owns keys of a `migrate: true` Redis pool, SCAN every server and MIGRATE each key to its new owner. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "conf/conf.h"
#include "control/migrate.h"
#include "control/proxy.h"
#include "control/sentinel_link.h"
#include "lib/log.h"
#include "lib/util.h"
#include "placement/ring.h"
#include "proxy/snapshot.h"
#include "state/registry.h"

/*
 * One job per migrating pool (docs/reload.md). Its servers are the pool's servers now
 * plus those the reload removed (drained first, so that the workers can close the
 * connections they keep to them for their keys' moves soonest) plus, after a restart,
 * those the state file names. Each server is
 * walked with SCAN, database by database: INFO keyspace first (the databases with keys,
 * and their keys for `remaining`), the pool's redis_db, then each other one (clients may
 * SELECT any; MIGRATE names the database walked); each key found is placed on
 * the new ring exactly as routing places it (ring_owner: hash_tag applied) and, when its
 * owner is another server, moved there by
 *
 *     MIGRATE host port "" db timeout [REPLACE] [AUTH pw | AUTH2 user pw] KEYS k1 k2 ...
 *
 * REPLACE when the server is the key's owner on the previous ring: a key still there is
 * one no request has touched since the ring changed (the workers move a key before any
 * request acts on it, src/proxy/migrate.c), so it is the newest copy. Without REPLACE
 * for a key found anywhere else (a stray: an operator's partial copy, a migration before
 * a restart): if the owner has the key too, the owner's copy wins (BUSYKEY is counted as a
 * conflict and the stray is left, logged).
 *
 * One exchange at a time per job, each on a link of its own (sentinel_link.c: connect,
 * AUTH, SELECT, the command, its reply). A server that cannot be reached is retried every
 * second and the migration is not done until it was walked: never skipped.
 */

#define MIG_SCAN_MAX      1000   /* a page's keys: well under the link's 4096 elements */
#define MIG_BATCH_MAX     100    /* keys per MIGRATE: the source is blocked while it runs */
#define MIG_TIMEOUT_MS    10000
#define MIG_RETRY_MS      1000
#define MIG_MIGRATE_TIMEOUT "5000"

enum mig_sstate { MIG_S_DBSIZE, MIG_S_SCAN, MIG_S_DONE };

/* The misplaced keys of the last SCAN page, copied (the link frees its replies). */
struct mig_key {
    char  *s;
    size_t n;
};

struct mig_keys {
    struct mig_key *k;
    size_t n, next;
};

struct mig_server {
    char       *host;
    uint16_t    port;
    char       *label;
    char       *ident;
    uint32_t    now;            /* index in the new pool, or UINT32_MAX: removed */
    uint32_t    was;            /* index in the previous ring, or UINT32_MAX */
    enum mig_sstate state;
    uint64_t    cursor;
    uint64_t    dbsize;         /* keys over the databases to walk (INFO keyspace) */
    int         db;             /* the database walked now */
    int        *dbs;            /* the databases with keys, the pool's first; walked in turn */
    uint32_t    ndbs, dbi;
    uint64_t    scanned, moved, errors, conflicts;
    uint32_t    failures;       /* exchanges failed in a row (down) */
    uint32_t    count_div;      /* SCAN's COUNT divided by this: doubled by a reply too
                                   large for the link (it comes back malformed) */
    /* its walk, one exchange at a time (every server of a job walks at once) */
    struct mig_job *job;
    int         walked;         /* its last page's keys are moved too */
    struct mig_keys *keys;      /* the misplaced keys of its last SCAN page */
    uint8_t    *bdone;          /* keys[i]: 0 pending, 2 in the MIGRATE under way, 1 done */
    struct sentinel_link *link;
    uv_timer_t  timer;
    char        last_error[160];
};

struct mig_job {
    struct mig_job    *next;
    struct migrate    *mg;
    char              *pool;
    struct snapshot   *snap;      /* holds ring, prev_ring and conf (a reference) */
    uint32_t           pi;        /* pool index in snap */
    const struct ring *prev;      /* NULL: a heal after a restart */
    char              *prev_lines;  /* the state file's lines that rebuild prev, or NULL */
    struct mig_server *srv;
    uint32_t           nsrv;
    uint32_t           rate;
    uint64_t           started_ms, done_ms;
    uint64_t           moved_total;
    uint32_t           timers;    /* server timers not closed yet (the job goes with the last) */
    int                stopped;
};

struct migrate {
    struct proxy   *p;
    uv_mutex_t      mu;           /* the admin thread reads progress */
    struct mig_job *jobs;
    char           *state_path;
    int             started;      /* the state file was read */
};

struct mig_server;
static void srv_step(struct mig_server *s);

static void keys_free(struct mig_keys *ks)
{
    if (ks == NULL)
        return;
    for (size_t i = 0; i < ks->n; i++)
        free(ks->k[i].s);
    free(ks->k);
    free(ks);
}

/* ------------------------------------------------------------------ RESP out */

static int put_bulk(struct buf *b, const char *s, size_t n)
{
    return buf_appendf(b, "$%zu\r\n", n) < 0 || buf_append(b, s, n) < 0 ||
           buf_append(b, "\r\n", 2) < 0 ? -1 : 0;
}

static int put_str(struct buf *b, const char *s)
{
    return put_bulk(b, s, strlen(s));
}

/* AUTH, and SELECT of database db: the replies they add. */
static int put_hello(struct buf *b, const struct conf_pool *cp, int db)
{
    int n = 0;
    if (cp->redis_auth != NULL) {
        if (cp->redis_username != NULL) {
            if (buf_append(b, "*3\r\n", 4) < 0 || put_str(b, "AUTH") < 0 ||
                put_str(b, cp->redis_username) < 0 || put_str(b, cp->redis_auth) < 0)
                return -1;
        } else if (buf_append(b, "*2\r\n", 4) < 0 || put_str(b, "AUTH") < 0 ||
                   put_str(b, cp->redis_auth) < 0) {
            return -1;
        }
        n++;
    }
    if (db != 0) {
        char d[16];
        snprintf(d, sizeof(d), "%d", db);
        if (buf_append(b, "*2\r\n", 4) < 0 || put_str(b, "SELECT") < 0 || put_str(b, d) < 0)
            return -1;
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------ the state file */

/* a + b in new memory, or NULL. */
static char *str_cat(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (s != NULL) {
        memcpy(s, a, na);
        memcpy(s + na, b, nb + 1);
    }
    return s;
}

/* The configured state file's path for conf, in new memory, or NULL. */
static char *state_path_of(const struct conf *c)
{
    if (c->global.migrate_state != NULL)
        return strdup(c->global.migrate_state);
    return c->path != NULL ? str_cat(c->path, ".migrate") : NULL;
}

static const char *state_path(struct migrate *mg, const struct conf *c)
{
    free(mg->state_path);
    mg->state_path = state_path_of(c);
    return mg->state_path;
}

/*
 * The state file: one line per server of each running migration, "POOL HOST:PORT", the
 * servers that may hold keys that are not theirs (the previous ring's and the pool's),
 * and one per server of the ring it moves from, "POOL prev CHECKSUM IDENT ADDRESS WEIGHT
 * ZONE" (ZONE "-" for none), from which a restarted proxy rebuilds that ring.
 * Written whole (a temporary file renamed) when a migration starts or ends; absent when
 * none runs. A restarted proxy walks every server it names.
 */
static void state_write(struct migrate *mg)
{
    if (mg->state_path == NULL)
        return;
    int any = 0;
    for (struct mig_job *j = mg->jobs; j != NULL; j = j->next)
        any |= j->done_ms == 0 && !j->stopped;
    if (!any) {
        if (remove(mg->state_path) < 0 && errno != ENOENT)
            log_warn("migrate: cannot remove '%s': %s", mg->state_path, strerror(errno));
        return;
    }
    char *tmp = str_cat(mg->state_path, ".tmp");
    if (tmp == NULL)
        return;
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        log_warn("migrate: cannot write the state file '%s': %s", tmp, strerror(errno));
        free(tmp);
        return;
    }
    for (struct mig_job *j = mg->jobs; j != NULL; j = j->next) {
        for (uint32_t i = 0; j->done_ms == 0 && i < j->nsrv; i++)
            fprintf(f, "%s %s:%u\n", j->pool, j->srv[i].host, j->srv[i].port);
        if (j->done_ms == 0 && j->prev_lines != NULL)
            fputs(j->prev_lines, f);
    }
    int bad = fflush(f) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, mg->state_path) < 0)
        log_warn("migrate: cannot write the state file '%s': %s", mg->state_path,
                 strerror(errno));
    free(tmp);
}

/* A field of a state line: printable, without spaces. */
static int state_field_ok(const char *f)
{
    if (f == NULL || *f == '\0')
        return 0;
    for (; *f != '\0'; f++)
        if ((unsigned char)*f <= ' ' || *f == 0x7f)
            return 0;
    return 1;
}

/* The "prev" lines of pool `name` whose ring (checksum sum) was built from op, or NULL
 * (a field the line format cannot hold: the restart then heals without the ring). */
static char *state_prev_lines(const char *name, const struct conf_pool *op, uint64_t sum)
{
    struct buf b;
    buf_init(&b);
    for (uint32_t i = 0; i < op->nservers; i++) {
        const struct conf_server *cs = &op->servers[i];
        if (!state_field_ok(cs->ident) || !state_field_ok(cs->addr.text) ||
            (cs->zone != NULL && !state_field_ok(cs->zone)) || !state_field_ok(name) ||
            buf_appendf(&b, "%s prev %016" PRIx64 " %s %s %u %s\n", name, sum, cs->ident,
                        cs->addr.text, cs->weight, cs->zone ? cs->zone : "-") < 0) {
            buf_free(&b);
            return NULL;
        }
    }
    if (buf_append(&b, "", 1) < 0) {
        buf_free(&b);
        return NULL;
    }
    return b.data;      /* buf's storage, NUL-terminated; freed with free() */
}

struct ring *migrate_state_ring(const struct conf *conf, const struct conf_pool *cp,
                                const struct ring *now)
{
    char *path = state_path_of(conf);
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    struct conf_server *sv = NULL;
    uint32_t n = 0;
    uint64_t sum = 0;
    char line[2048];
    struct ring *r = NULL;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char pool[512], what[8], ck[32], ident[512], addr[512], zone[256];
        unsigned weight;
        if (sscanf(line, "%511s %7s %31s %511s %511s %u %255s", pool, what, ck, ident, addr,
                   &weight, zone) != 7 || strcmp(what, "prev") != 0 ||
            strcmp(pool, cp->name) != 0 || weight == 0)
            continue;
        struct conf_server *nv = realloc(sv, (n + 1) * sizeof(*nv));
        if (nv == NULL)
            goto out;
        sv = nv;
        memset(&sv[n], 0, sizeof(sv[n]));
        sv[n].ident = strdup(ident);
        sv[n].label = sv[n].ident;
        sv[n].addr.text = strdup(addr);
        sv[n].weight = weight;
        sv[n].zone = strcmp(zone, "-") == 0 ? NULL : strdup(zone);
        n++;
        if (sv[n - 1].ident == NULL || sv[n - 1].addr.text == NULL)
            goto out;
        sum = strtoull(ck, NULL, 16);
    }
    if (n > 0) {
        struct conf_pool tmp = *cp;
        char err[256];
        tmp.servers = sv;
        tmp.nservers = n;
        r = ring_build(&tmp, err, sizeof(err));
        if (r == NULL) {
            log_warn("migrate: pool '%s': the previous ring of '%s' cannot be rebuilt (%s): "
                     "its keys are healed without it", cp->name, path, err);
        } else if (r->checksum != sum || (now != NULL && r->checksum == now->checksum)) {
            if (r->checksum != sum)
                log_warn("migrate: pool '%s': the previous ring '%s' names was built with "
                         "other settings (checksum %016" PRIx64 ", rebuilt %016" PRIx64
                         "): its keys are healed without it", cp->name, path, sum, r->checksum);
            ring_unref(r);
            r = NULL;
        } else {
            log_notice("migrate: pool '%s': a migration from ring %016" PRIx64 " was left "
                       "unfinished (%s): requests move its keys first again", cp->name, sum,
                       path);
        }
    }
out:
    for (uint32_t i = 0; i < n; i++) {
        free(sv[i].ident);
        free(sv[i].addr.text);
        free(sv[i].zone);
    }
    free(sv);
    if (f != NULL)
        fclose(f);
    free(path);
    return r;
}

/* The state file's "prev" lines for pool `name`, as they are, or NULL. */
static char *state_prev_read(const char *path, const char *name)
{
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    struct buf b;
    char line[2048];
    buf_init(&b);
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char pool[512], what[8];
        if (sscanf(line, "%511s %7s", pool, what) == 2 && strcmp(pool, name) == 0 &&
            strcmp(what, "prev") == 0 && buf_append_str(&b, line) < 0)
            break;
    }
    if (f != NULL)
        fclose(f);
    if (buf_len(&b) == 0 || buf_append(&b, "", 1) < 0) {
        buf_free(&b);
        return NULL;
    }
    return b.data;
}

/* ------------------------------------------------------------------ jobs */

static void job_free(struct mig_job *j)
{
    for (uint32_t i = 0; i < j->nsrv; i++) {
        free(j->srv[i].host);
        free(j->srv[i].label);
        free(j->srv[i].ident);
        keys_free(j->srv[i].keys);
        free(j->srv[i].bdone);
        free(j->srv[i].dbs);
    }
    free(j->srv);
    free(j->pool);
    free(j->prev_lines);
    if (j->snap != NULL)
        snapshot_unref(j->snap);
    free(j);
}

static void srv_timer_closed(uv_handle_t *h)
{
    struct mig_job *j = ((struct mig_server *)h->data)->job;
    if (--j->timers == 0)
        job_free(j);
}

/* Stop j and free it: its links are cancelled, its memory goes when its timers close. */
static void job_close(struct mig_job *j)
{
    j->stopped = 1;
    if (j->timers == 0) {       /* never started */
        job_free(j);
        return;
    }
    for (uint32_t i = 0; i < j->nsrv; i++) {
        sentinel_link_cancel(j->srv[i].link);
        j->srv[i].link = NULL;
        uv_timer_stop(&j->srv[i].timer);
        uv_close((uv_handle_t *)&j->srv[i].timer, srv_timer_closed);
    }
}

static int job_add_server(struct mig_job *j, const char *host, uint16_t port, const char *label,
                          const char *ident, uint32_t now)
{
    for (uint32_t i = 0; i < j->nsrv; i++)
        if (j->srv[i].port == port && strcmp(j->srv[i].host, host) == 0)
            return 0;
    struct mig_server *n = realloc(j->srv, (j->nsrv + 1) * sizeof(*n));
    if (n == NULL)
        return -1;
    j->srv = n;
    struct mig_server *s = &n[j->nsrv];
    memset(s, 0, sizeof(*s));
    s->host = strdup(host);
    s->label = strdup(label);
    s->ident = strdup(ident != NULL ? ident : label);
    s->port = port;
    s->now = now;
    s->was = UINT32_MAX;
    if (s->host == NULL || s->label == NULL || s->ident == NULL) {
        free(s->host);
        free(s->label);
        free(s->ident);
        return -1;
    }
    j->nsrv++;
    return 0;
}

static const struct conf_pool *job_cp(const struct mig_job *j)
{
    return &j->snap->conf->pools[j->pi];
}

static const struct ring *job_ring(const struct mig_job *j)
{
    return j->snap->pools[j->pi].ring;
}

static void srv_timer_cb(uv_timer_t *t)
{
    srv_step(t->data);
}

static void srv_later(struct mig_server *s, uint64_t ms)
{
    uv_timer_start(&s->timer, srv_timer_cb, ms, 0);
}

/* The word pool_shared.migrating holds for ring r: state 4 once it is published and until
 * every worker runs it (moved keys still go to their old owner), then 1 while its keys
 * move, 3 once the removed servers are drained (src/proxy/migrate.c reads it). */
static uint64_t mig_word(const struct ring *r, unsigned state)
{
    return (r->checksum & ~(uint64_t)7) | state;
}

/* The pool's record of what moves, when the snapshot published now still moves from j's
 * previous ring (a later reload's migration owns the record then). */
static struct pool_shared *job_shared(const struct mig_job *j)
{
    const struct snapshot *cur = atomic_load(&j->mg->p->hub.current);
    const struct conf_pool *cp = &j->snap->conf->pools[j->pi];
    int ci = cur != NULL ? snapshot_pool_index(cur, cp->name, cp->protocol) : -1;
    if (ci < 0 || cur->pools[ci].prev_ring != j->prev)
        return NULL;
    return j->snap->pools[j->pi].shared;
}

/* Every server walked: the pool's keys are all on their owners. */
static void job_finish(struct mig_job *j)
{
    struct migrate *mg = j->mg;
    uint64_t scanned = 0, errors = 0, conflicts = 0;
    for (uint32_t i = 0; i < j->nsrv; i++) {
        scanned += j->srv[i].scanned;
        errors += j->srv[i].errors;
        conflicts += j->srv[i].conflicts;
    }
    uv_mutex_lock(&mg->mu);
    j->done_ms = util_now_ms();
    uv_mutex_unlock(&mg->mu);
    struct pool_shared *sh = job_shared(j);
    uint_fast64_t w1 = mig_word(job_ring(j), 1), w3 = mig_word(job_ring(j), 3);
    if (sh != NULL && !atomic_compare_exchange_strong(&sh->migrating, &w1, 0))
        atomic_compare_exchange_strong(&sh->migrating, &w3, 0);
    log_notice("migrate: pool '%s': done in %.1f s: %" PRIu64 " keys scanned, %" PRIu64
               " moved, %" PRIu64 " errors retried, %" PRIu64 " conflicts", j->pool,
               (double)(j->done_ms - j->started_ms) / 1000.0, scanned, j->moved_total, errors,
               conflicts);
    state_write(mg);
}

/* The servers the reload removed are all walked: their keys are elsewhere now. */
static void job_removed_check(struct mig_job *j)
{
    for (uint32_t i = 0; i < j->nsrv; i++)
        if (j->srv[i].now == UINT32_MAX && !j->srv[i].walked)
            return;
    struct pool_shared *sh = job_shared(j);
    uint_fast64_t w1 = mig_word(job_ring(j), 1);
    if (sh != NULL)
        atomic_compare_exchange_strong(&sh->migrating, &w1, mig_word(job_ring(j), 3));
}

static void job_fail(struct mig_job *j, struct mig_server *s, const char *err)
{
    uv_mutex_lock(&j->mg->mu);
    s->errors++;
    s->failures++;
    snprintf(s->last_error, sizeof(s->last_error), "%s", err);
    uv_mutex_unlock(&j->mg->mu);
    if (s->failures == 1 || s->failures % 30 == 0)
        log_warn("migrate: pool '%s': server %s: %s (retried every %d ms)", j->pool, s->label,
                 err, MIG_RETRY_MS);
}


static void srv_keys_drop(struct mig_server *s)
{
    keys_free(s->keys);
    s->keys = NULL;
}

static void migrate_cb(void *arg, struct sentinel_resp *const *r, uint32_t n, const char *err);

/*
 * Send the next MIGRATE of the current server's pending keys: every pending key with the
 * same destination and the same REPLACE choice as the first one. 1 when sent, 0 when no key
 * is pending, -1 on failure.
 */
static int srv_send_migrate(struct mig_server *s)
{
    struct mig_job *j = s->job;
    struct mig_keys *ks = s->keys;
    const struct conf_pool *cp = job_cp(j);
    const struct ring *ring = job_ring(j);

    while (ks != NULL && ks->next < ks->n && s->bdone[ks->next])
        ks->next++;
    if (ks == NULL || ks->next >= ks->n)
        return 0;
    uint32_t dst = UINT32_MAX;
    int replace = 0;
    size_t cnt = 0;
    struct buf cmd, body;
    buf_init(&cmd);
    buf_init(&body);
    for (size_t i = ks->next; i < ks->n; i++) {
        if (s->bdone[i])
            continue;
        uint32_t o = ring_owner(ring, ks->k[i].s, ks->k[i].n);
        int rep = j->prev != NULL && s->was != UINT32_MAX &&
                  ring_owner(j->prev, ks->k[i].s, ks->k[i].n) == s->was;
        if (dst == UINT32_MAX) {
            dst = o;
            replace = rep;
        } else if (o != dst || rep != replace) {
            continue;
        }
        if (cnt == MIG_BATCH_MAX)
            break;
        s->bdone[i] = 2;            /* in this MIGRATE */
        if (put_bulk(&body, ks->k[i].s, ks->k[i].n) < 0)
            goto nomem;
        cnt++;
    }
    const struct conf_server *d = &cp->servers[dst];
    char port[8], db[16];
    snprintf(port, sizeof(port), "%u", d->addr.port);
    snprintf(db, sizeof(db), "%d", s->db);
    int hello = put_hello(&cmd, cp, s->db);
    if (hello < 0)
        goto nomem;
    size_t argc = 6 + (size_t)replace + 1 + cnt;
    if (cp->redis_auth != NULL)
        argc += cp->redis_username != NULL ? 3 : 2;
    if (buf_appendf(&cmd, "*%zu\r\n", argc) < 0 || put_str(&cmd, "MIGRATE") < 0 ||
        put_str(&cmd, d->addr.host ? d->addr.host : "127.0.0.1") < 0 || put_str(&cmd, port) < 0 ||
        put_bulk(&cmd, "", 0) < 0 || put_str(&cmd, db) < 0 ||
        put_str(&cmd, MIG_MIGRATE_TIMEOUT) < 0 || (replace && put_str(&cmd, "REPLACE") < 0))
        goto nomem;
    if (cp->redis_auth != NULL) {
        if ((cp->redis_username != NULL &&
             (put_str(&cmd, "AUTH2") < 0 || put_str(&cmd, cp->redis_username) < 0)) ||
            (cp->redis_username == NULL && put_str(&cmd, "AUTH") < 0) ||
            put_str(&cmd, cp->redis_auth) < 0)
            goto nomem;
    }
    if (put_str(&cmd, "KEYS") < 0 || buf_append(&cmd, body.data, buf_len(&body)) < 0)
        goto nomem;
    buf_free(&body);
    s->link = sentinel_link_start(&j->mg->p->loop, s->host, s->port, &cmd, (uint32_t)hello,
                                  (uint32_t)hello + 1, MIG_TIMEOUT_MS, migrate_cb, NULL, s);
    buf_free(&cmd);
    if (s->link == NULL)
        return -1;
    return 1;
nomem:
    buf_free(&cmd);
    buf_free(&body);
    return -1;
}

/* The keys the last MIGRATE carried: moved (or gone), or back to pending. */
static void srv_batch_mark(struct mig_server *s, int ok)
{
    struct mig_job *j = s->job;
    struct mig_keys *ks = s->keys;
    size_t n = 0;
    for (size_t i = 0; ks != NULL && i < ks->n; i++)
        if (s->bdone[i] == 2) {
            s->bdone[i] = ok ? 1 : 0;
            n++;
        }
    if (ok) {
        uv_mutex_lock(&j->mg->mu);
        s->moved += n;
        j->moved_total += n;
        uv_mutex_unlock(&j->mg->mu);
    }
}

/* The delay the rate asks for before the next MIGRATE (ms). */
static uint64_t job_pace(const struct mig_job *j)
{
    uint64_t due = j->started_ms + j->moved_total * 1000u / (j->rate ? j->rate : 1);
    uint64_t now = util_now_ms();
    return due > now ? due - now : 0;
}

static void migrate_cb(void *arg, struct sentinel_resp *const *r, uint32_t n, const char *err)
{
    struct mig_server *s = arg;
    struct mig_job *j = s->job;
    s->link = NULL;
    if (err != NULL || n < 1) {
        srv_batch_mark(s, 0);
        job_fail(j, s, err ? err : "no reply");
        srv_later(s, MIG_RETRY_MS);
        return;
    }
    const struct sentinel_resp *x = r[0];
    if (x->type == '+') {           /* OK, or NOKEY: none was there any more */
        srv_batch_mark(s, 1);
        s->failures = 0;
    } else if (x->type == '-' && x->str != NULL && strstr(x->str, "BUSYKEY") != NULL) {
        /* a stray whose owner has the key too: the owner's copy wins, the stray stays */
        struct mig_keys *ks = s->keys;
        for (size_t i = 0; ks != NULL && i < ks->n; i++)
            if (s->bdone[i] == 2) {
                s->bdone[i] = 1;
                uv_mutex_lock(&j->mg->mu);
                s->conflicts++;
                uv_mutex_unlock(&j->mg->mu);
                log_warn("migrate: pool '%s': key '%.*s' on %s is also on its owner; the "
                         "owner's copy is kept, this one left in place", j->pool,
                         (int)RL_MIN(ks->k[i].n, 100), ks->k[i].s, s->label);
            }
    } else {
        srv_batch_mark(s, 0);
        job_fail(j, s, x->str ? x->str : "MIGRATE failed");
        srv_later(s, MIG_RETRY_MS);
        return;
    }
    srv_later(s, job_pace(j));
}

/*
 * INFO keyspace's reply (`db3:keys=12,expires=0,...` per database with keys): the
 * databases to walk after the pool's own (clients may SELECT any; the stage moves their
 * keys first in theirs, the walk finishes them) and the keys they hold. -1: no memory.
 */
static int srv_keyspace(struct mig_server *s, const struct conf_pool *cp,
                        const struct sentinel_resp *x)
{
    uint64_t total = 0;
    uint32_t n = 0, cap = 0;
    int *dbs = NULL;

    if (x->type == '$' && x->str != NULL) {
        const char *p = x->str, *end = x->str + x->len;
        while (p < end) {
            const char *eol = memchr(p, '\n', (size_t)(end - p));
            const char *le = eol != NULL ? eol : end;
            int db;
            unsigned long long keys;
            char line[96];
            size_t ll = RL_MIN((size_t)(le - p), sizeof(line) - 1);
            memcpy(line, p, ll);
            line[ll] = '\0';
            if (sscanf(line, "db%d:keys=%llu", &db, &keys) == 2 && db >= 0) {
                if (n == cap) {
                    cap = cap ? cap * 2 : 8;
                    int *nd = realloc(dbs, cap * sizeof(*nd));
                    if (nd == NULL) {
                        free(dbs);
                        return -1;
                    }
                    dbs = nd;
                }
                dbs[n++] = db;
                total += keys;
            }
            p = le + (eol != NULL);
        }
    }
    uv_mutex_lock(&s->job->mg->mu);
    free(s->dbs);
    s->dbs = dbs;
    s->ndbs = n;
    s->dbi = 0;
    s->db = cp->redis_db;
    s->dbsize = total;
    uv_mutex_unlock(&s->job->mg->mu);
    return 0;
}

static void scan_cb(void *arg, struct sentinel_resp *const *r, uint32_t n, const char *err)
{
    struct mig_server *s = arg;
    struct mig_job *j = s->job;
    s->link = NULL;
    if (err != NULL || n < 1) {
        if (err != NULL && strstr(err, "malformed") != NULL && s->count_div < 64)
            s->count_div = s->count_div ? s->count_div * 2 : 2;
        job_fail(j, s, err ? err : "no reply");
        srv_later(s, MIG_RETRY_MS);
        return;
    }
    uint32_t k = 0;
    if (s->state == MIG_S_DBSIZE) {
        if (srv_keyspace(s, job_cp(j), r[0]) < 0) {
            job_fail(j, s, "out of memory");
            srv_later(s, MIG_RETRY_MS);
            return;
        }
        k = 1;
    }
    if (k >= n || r[k]->type != '*' || r[k]->n != 2 || r[k]->elem[0].type != '$' ||
        r[k]->elem[1].type != '*') {
        job_fail(j, s, r[k < n ? k : 0]->type == '-' && r[k < n ? k : 0]->str
                       ? r[k < n ? k : 0]->str : "malformed SCAN reply");
        srv_later(s, MIG_RETRY_MS);
        return;
    }
    s->failures = 0;
    const struct sentinel_resp *keys = &r[k]->elem[1];
    uint64_t cursor = strtoull(r[k]->elem[0].str ? r[k]->elem[0].str : "0", NULL, 10);
    const struct ring *ring = job_ring(j);
    struct mig_keys *ks = calloc(1, sizeof(*ks));
    if (ks != NULL && keys->n > 0 && (ks->k = calloc(keys->n, sizeof(*ks->k))) == NULL) {
        free(ks);
        ks = NULL;
    }
    free(s->bdone);
    s->bdone = ks != NULL ? calloc(keys->n ? keys->n : 1, 1) : NULL;
    if (ks == NULL || s->bdone == NULL) {
        keys_free(ks);
        job_fail(j, s, "out of memory");
        srv_later(s, MIG_RETRY_MS);
        return;
    }
    for (size_t i = 0; i < keys->n; i++) {
        const struct sentinel_resp *e = &keys->elem[i];
        if (e->type != '$' || e->str == NULL)
            continue;
        uint32_t o = ring_owner(ring, e->str, e->len);
        if (o == s->now)
            continue;           /* at home */
        char *c = malloc(e->len ? e->len : 1);
        if (c == NULL)
            continue;           /* the next walk finds it again */
        memcpy(c, e->str, e->len);
        ks->k[ks->n].s = c;
        ks->k[ks->n].n = e->len;
        ks->n++;
    }
    srv_keys_drop(s);
    s->keys = ks;
    uv_mutex_lock(&j->mg->mu);
    s->scanned += keys->n;
    s->cursor = cursor;
    s->state = cursor == 0 ? MIG_S_DONE : MIG_S_SCAN;
    uv_mutex_unlock(&j->mg->mu);
    /* the page's keys are moved before the next SCAN (srv_step) */
    srv_later(s, 0);
}

/* The next exchange of server s: a pending MIGRATE, else the next SCAN page; when its last
 * page's keys are moved, s is walked, and the job is done when every server is. */
static void srv_step(struct mig_server *s)
{
    struct mig_job *j = s->job;
    if (j->stopped || s->link != NULL || j->done_ms != 0 || s->walked)
        return;
    const struct conf_pool *cp = job_cp(j);
    int rc = srv_send_migrate(s);
    if (rc > 0)
        return;
    if (rc < 0) {
        job_fail(j, s, "could not start a connection");
        srv_later(s, MIG_RETRY_MS);
        return;
    }
    srv_keys_drop(s);
    if (s->state == MIG_S_DONE) {
        /* this database is walked (its last page moved): the next one with keys */
        while (s->dbi < s->ndbs && s->dbs[s->dbi] == cp->redis_db)
            s->dbi++;
        if (s->dbi < s->ndbs) {
            uv_mutex_lock(&j->mg->mu);
            s->db = s->dbs[s->dbi++];
            s->cursor = 0;
            s->state = MIG_S_SCAN;
            uv_mutex_unlock(&j->mg->mu);
        }
    }
    if (s->state == MIG_S_DONE) {
        uv_mutex_lock(&j->mg->mu);
        s->walked = 1;
        uv_mutex_unlock(&j->mg->mu);
        job_removed_check(j);
        for (uint32_t i = 0; i < j->nsrv; i++)
            if (!j->srv[i].walked)
                return;
        job_finish(j);
        return;
    }
    /* SCAN (with DBSIZE first) */
    struct buf cmd;
    buf_init(&cmd);
    int hello = put_hello(&cmd, cp, s->state == MIG_S_DBSIZE ? cp->redis_db : s->db);
    char cur[24], count[16];
    snprintf(cur, sizeof(cur), "%" PRIu64, s->cursor);
    uint32_t c = j->rate / 10;
    c = c > MIG_SCAN_MAX ? MIG_SCAN_MAX : c;
    c /= s->count_div ? s->count_div : 1;
    snprintf(count, sizeof(count), "%u", c < 10 ? 10 : c);
    int extra = s->state == MIG_S_DBSIZE;
    if (extra) {                /* the walk starts in the pool's database */
        s->db = cp->redis_db;
        s->cursor = 0;
    }
    if (hello < 0 ||
        (extra && (buf_append(&cmd, "*2\r\n", 4) < 0 || put_str(&cmd, "INFO") < 0 ||
                   put_str(&cmd, "keyspace") < 0)) ||
        buf_append(&cmd, "*4\r\n", 4) < 0 || put_str(&cmd, "SCAN") < 0 ||
        put_str(&cmd, cur) < 0 || put_str(&cmd, "COUNT") < 0 || put_str(&cmd, count) < 0) {
        buf_free(&cmd);
        srv_later(s, MIG_RETRY_MS);
        return;
    }
    s->link = sentinel_link_start(&j->mg->p->loop, s->host, s->port, &cmd, (uint32_t)hello,
                                  (uint32_t)(hello + 1 + extra), MIG_TIMEOUT_MS, scan_cb,
                                  NULL, s);
    buf_free(&cmd);
    if (s->link == NULL) {
        job_fail(j, s, "could not start a connection");
        srv_later(s, MIG_RETRY_MS);
    }
}

/* ------------------------------------------------------------------ start */

static struct migrate *mg_get(struct proxy *p)
{
    if (p->migrate == NULL) {
        struct migrate *mg = calloc(1, sizeof(*mg));
        if (mg == NULL)
            return NULL;
        mg->p = p;
        uv_mutex_init(&mg->mu);
        p->migrate = mg;
    }
    return p->migrate;
}

static struct mig_job *job_new(struct migrate *mg, struct snapshot *cur, uint32_t i,
                               const struct ring *prev)
{
    const struct conf_pool *cp = &cur->conf->pools[i];
    struct mig_job *j = calloc(1, sizeof(*j));
    if (j == NULL || (j->pool = strdup(cp->name)) == NULL) {
        free(j);
        return NULL;
    }
    j->mg = mg;
    snapshot_ref(cur);
    j->snap = cur;
    j->pi = i;
    j->prev = prev;
    j->rate = cp->migrate_rate;
    j->started_ms = util_now_ms();
    return j;
}

static void job_start(struct migrate *mg, struct mig_job *j)
{
    /* the removed servers first: the workers keep them (retiring) until drained */
    for (uint32_t a = 0, b = 0; b < j->nsrv; b++)
        if (j->srv[b].now == UINT32_MAX) {
            struct mig_server t = j->srv[a];
            j->srv[a++] = j->srv[b];
            j->srv[b] = t;
        }
    const struct ring *prev = j->prev;
    for (uint32_t k = 0; prev != NULL && k < j->nsrv; k++)
        for (uint32_t q = 0; q < prev->nservers; q++)
            if (strcmp(prev->servers[q].ident, j->srv[k].ident) == 0)
                j->srv[k].was = q;
    uv_mutex_lock(&mg->mu);
    for (struct mig_job **pp = &mg->jobs; *pp != NULL; pp = &(*pp)->next)
        if (strcmp((*pp)->pool, j->pool) == 0) {      /* a migration before this one */
            struct mig_job *o = *pp;
            *pp = o->next;
            job_close(o);
            break;
        }
    j->next = mg->jobs;
    mg->jobs = j;
    uv_mutex_unlock(&mg->mu);
    struct pool_shared *sh = j->snap->pools[j->pi].shared;
    if (sh != NULL && prev != NULL) {
        unsigned removed = 0;
        for (uint32_t k = 0; k < j->nsrv; k++)
            removed |= j->srv[k].now == UINT32_MAX;
        atomic_store_explicit(&sh->migrating, mig_word(job_ring(j), removed ? 1u : 3u),
                              memory_order_release);
    }
    log_notice("migrate: pool '%s': moving the keys whose owner changed over %u server(s), "
               "at most %u keys/s%s", j->pool, j->nsrv, j->rate,
               prev == NULL ? " (finishing a migration the state file names)" : "");
    state_write(mg);
    for (uint32_t k = 0; k < j->nsrv; k++) {     /* every server walks at once */
        j->srv[k].job = j;
        uv_timer_init(&mg->p->loop, &j->srv[k].timer);
        j->srv[k].timer.data = &j->srv[k];
        j->timers++;
    }
    for (uint32_t k = 0; k < j->nsrv; k++)
        srv_later(&j->srv[k], 0);
}

/* The servers a state file names for pool `name` (a restart mid-migration). */
static void state_read(struct migrate *mg, struct mig_job *j, const char *name)
{
    FILE *f = mg->state_path ? fopen(mg->state_path, "r") : NULL;
    char line[1200];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char pool[512], addr[600];
        if (sscanf(line, "%511s %599s", pool, addr) != 2 || strcmp(pool, name) != 0)
            continue;
        char *colon = strrchr(addr, ':');
        if (colon == NULL)
            continue;
        *colon = '\0';
        unsigned port = (unsigned)strtoul(colon + 1, NULL, 10);
        if (port == 0 || port > 65535)
            continue;
        uint32_t now = UINT32_MAX;
        const struct conf_pool *cp = job_cp(j);
        for (uint32_t s = 0; s < cp->nservers; s++)
            if (cp->servers[s].addr.port == port && cp->servers[s].addr.host &&
                strcmp(cp->servers[s].addr.host, addr) == 0)
                now = s;
        char label[700];
        snprintf(label, sizeof(label), "%s:%u", addr, port);
        if (now == UINT32_MAX)
            job_add_server(j, addr, (uint16_t)port, label, label, UINT32_MAX);
    }
    if (f != NULL)
        fclose(f);
}

static int state_names(struct migrate *mg, const char *name)
{
    FILE *f = mg->state_path ? fopen(mg->state_path, "r") : NULL;
    char line[1200];
    int found = 0;
    while (!found && f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char pool[512];
        found = sscanf(line, "%511s", pool) == 1 && strcmp(pool, name) == 0;
    }
    if (f != NULL)
        fclose(f);
    return found;
}

void migrate_adopted(struct proxy *p, struct snapshot *cur, struct snapshot *old)
{
    struct migrate *mg = mg_get(p);     /* created at start: the admin thread reads it */
    int first = 0;

    if (mg == NULL)
        return;
    for (uint32_t i = 0; i < cur->conf->npools; i++) {
        const struct conf_pool *cp = &cur->conf->pools[i];
        const struct snapshot_pool *sp = &cur->pools[i];
        if (!cp->migrate)
            continue;
        if (!mg->started) {
            mg->started = 1;
            first = 1;
            state_path(mg, cur->conf);
        }
        int heal = first && state_names(mg, cp->name);
        struct mig_job *run = NULL;
        for (struct mig_job *j = mg->jobs; j != NULL; j = j->next)
            if (strcmp(j->pool, cp->name) == 0)
                run = j;
        int fresh = sp->prev_ring != NULL && (run == NULL || run->prev != sp->prev_ring);
        if (!fresh && !heal)
            continue;
        struct mig_job *j = job_new(mg, cur, i, fresh ? sp->prev_ring : NULL);
        if (j == NULL) {
            log_error("migrate: pool '%s': out of memory: keys are not moved", cp->name);
            continue;
        }
        for (uint32_t s = 0; s < cp->nservers; s++)
            job_add_server(j, cp->servers[s].addr.host ? cp->servers[s].addr.host : "127.0.0.1",
                           cp->servers[s].addr.port, cp->servers[s].label,
                           cp->servers[s].ident, s);
        int oi = old != NULL ? snapshot_pool_index(old, cp->name, cp->protocol) : -1;
        if (fresh && oi >= 0 && old->pools[oi].ring == sp->prev_ring)
            j->prev_lines = state_prev_lines(cp->name, &old->conf->pools[oi],
                                             sp->prev_ring->checksum);
        else if (fresh && old == NULL)      /* rebuilt from the state file at start */
            j->prev_lines = state_prev_read(mg->state_path, cp->name);
        if (oi >= 0) {          /* the servers the reload removed */
            const struct conf_pool *op = &old->conf->pools[oi];
            for (uint32_t s = 0; s < op->nservers; s++)
                if (op->servers[s].addr.host != NULL)
                    job_add_server(j, op->servers[s].addr.host, op->servers[s].addr.port,
                                   op->servers[s].label, op->servers[s].ident, UINT32_MAX);
        }
        if (run != NULL)        /* a migration before this one: its servers too */
            for (uint32_t s = 0; s < run->nsrv; s++)
                job_add_server(j, run->srv[s].host, run->srv[s].port, run->srv[s].label,
                               run->srv[s].ident, UINT32_MAX);
        state_read(mg, j, cp->name);
        /* a server named again by the pool is not removed */
        for (uint32_t s = 0; s < j->nsrv; s++)
            for (uint32_t c = 0; j->srv[s].now == UINT32_MAX && c < cp->nservers; c++)
                if (cp->servers[c].addr.port == j->srv[s].port && cp->servers[c].addr.host &&
                    strcmp(cp->servers[c].addr.host, j->srv[s].host) == 0)
                    j->srv[s].now = c;
        job_start(mg, j);
    }
}

void migrate_publishing(struct snapshot *snap, const struct snapshot *old)
{
    for (uint32_t i = 0; old != NULL && i < snap->conf->npools; i++) {
        const struct conf_pool *cp = &snap->conf->pools[i];
        const struct snapshot_pool *sp = &snap->pools[i];
        int oi = snapshot_pool_index(old, cp->name, cp->protocol);
        if (!cp->migrate || sp->prev_ring == NULL || sp->shared == NULL || oi < 0 ||
            old->pools[oi].prev_ring == sp->prev_ring)
            continue;
        atomic_store_explicit(&sp->shared->migrating, mig_word(sp->ring, 4u),
                              memory_order_release);
    }
}

/* ------------------------------------------------------------------ progress */

json_t *migrate_json(struct proxy *p)
{
    struct migrate *mg = p->migrate;
    json_t *o = json_object();
    if (mg == NULL || o == NULL)
        return o;
    uint64_t now = util_now_ms();
    uv_mutex_lock(&mg->mu);
    for (struct mig_job *j = mg->jobs; j != NULL; j = j->next) {
        json_t *pj = json_object(), *sv = json_object();
        uint64_t scanned = 0, moved = 0, errors = 0, conflicts = 0, remaining = 0;
        for (uint32_t i = 0; i < j->nsrv; i++) {
            const struct mig_server *s = &j->srv[i];
            uint64_t rem = s->walked || s->state == MIG_S_DONE ? 0
                           : s->dbsize > s->scanned ? s->dbsize - s->scanned : 0;
            scanned += s->scanned;
            moved += s->moved;
            errors += s->errors;
            conflicts += s->conflicts;
            remaining += rem;
            json_object_set_new(sv, s->label, json_pack(
                "{s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:s}",
                "state", s->walked ? "done" : s->failures ? "retrying" : "scanning",
                "removed", s->now == UINT32_MAX,
                "scanned", (json_int_t)s->scanned, "moved", (json_int_t)s->moved,
                "remaining", (json_int_t)rem, "errors", (json_int_t)s->errors,
                "conflicts", (json_int_t)s->conflicts, "last_error", s->last_error));
        }
        uint64_t end = j->done_ms ? j->done_ms : now;
        double secs = (double)(end - j->started_ms) / 1000.0;
        double srate = secs > 0 ? (double)scanned / secs : 0;
        double eta = j->done_ms ? 0 : srate > 0 ? (double)remaining / srate : -1;
        json_object_set_new(pj, "state", json_string(j->done_ms ? "done" : "running"));
        /* the ring it moves keys to: a reader tells this migration from an earlier one */
        json_object_set_new(pj, "epoch",
                            json_integer((json_int_t)j->snap->pools[j->pi].ring->epoch));
        json_object_set_new(pj, "scanned", json_integer((json_int_t)scanned));
        json_object_set_new(pj, "moved", json_integer((json_int_t)moved));
        json_object_set_new(pj, "remaining", json_integer((json_int_t)remaining));
        json_object_set_new(pj, "errors", json_integer((json_int_t)errors));
        json_object_set_new(pj, "conflicts", json_integer((json_int_t)conflicts));
        json_object_set_new(pj, "seconds", json_real(secs));
        json_object_set_new(pj, "keys_per_s", json_real(secs > 0 ? (double)moved / secs : 0));
        json_object_set_new(pj, "eta_s", json_real(eta));
        json_object_set_new(pj, "rate_limit", json_integer(j->rate));
        json_object_set_new(pj, "servers", sv);
        json_object_set_new(o, j->pool, pj);
    }
    uv_mutex_unlock(&mg->mu);
    return o;
}

int migrate_prometheus(struct proxy *p, struct buf *out)
{
    json_t *o = migrate_json(p);
    const char *pool;
    json_t *pj;
    int rc = 0;
    if (o == NULL)
        return -ENOMEM;
    if (json_object_size(o) > 0)
        rc |= buf_appendf(out, "# HELP ringleader_migrate_keys Keys a pool's migration "
                          "scanned, moved, has left to scan, and its errors.\n"
                          "# TYPE ringleader_migrate_keys gauge\n"
                          "# HELP ringleader_migrate_server_keys The same per server of the "
                          "migration.\n"
                          "# TYPE ringleader_migrate_server_keys gauge\n"
                          "# HELP ringleader_migrate_running 1 while a pool's keys move.\n"
                          "# TYPE ringleader_migrate_running gauge\n");
    json_object_foreach(o, pool, pj) {
        static const char *const what[] = { "scanned", "moved", "remaining", "errors",
                                            "conflicts" };
        for (size_t i = 0; i < RL_ARRAY_SIZE(what); i++)
            rc |= buf_appendf(out, "ringleader_migrate_keys{pool=\"%s\",what=\"%s\"} %" JSON_INTEGER_FORMAT "\n",
                              pool, what[i], json_integer_value(json_object_get(pj, what[i])));
        const char *srv;
        json_t *sj;
        json_object_foreach(json_object_get(pj, "servers"), srv, sj) {
            for (size_t i = 0; i < RL_ARRAY_SIZE(what); i++)
                rc |= buf_appendf(out, "ringleader_migrate_server_keys{pool=\"%s\",server=\"%s\","
                                  "what=\"%s\"} %" JSON_INTEGER_FORMAT "\n", pool, srv, what[i],
                                  json_integer_value(json_object_get(sj, what[i])));
        }
        rc |= buf_appendf(out, "ringleader_migrate_running{pool=\"%s\"} %d\n", pool,
                          strcmp(json_string_value(json_object_get(pj, "state")), "running") == 0);
    }
    json_decref(o);
    return rc < 0 ? -ENOMEM : 0;
}

void migrate_stop(struct proxy *p)
{
    struct migrate *mg = p->migrate;
    if (mg == NULL)
        return;
    uv_mutex_lock(&mg->mu);
    while (mg->jobs != NULL) {
        struct mig_job *j = mg->jobs;
        mg->jobs = j->next;
        job_close(j);
    }
    uv_mutex_unlock(&mg->mu);
}

void migrate_free(struct proxy *p)
{
    struct migrate *mg = p->migrate;
    if (mg == NULL)
        return;
    uv_mutex_destroy(&mg->mu);
    free(mg->state_path);
    free(mg);
    p->migrate = NULL;
}
