/* Stats: summing per-worker counters, the stats-port JSON, the Prometheus exposition and -D. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "stats/stats.h"
#include "lib/util.h"

/* ---- field tables */

#define STATS_POOL_ROW(n, t, d)   { #n, STATS_##t, d, offsetof(struct stats_pool, n) },
#define STATS_SERVER_ROW(n, t, d) { #n, STATS_##t, d, offsetof(struct stats_server, n) },

const struct stats_field stats_pool_fields[] = { STATS_POOL_CODEC(STATS_POOL_ROW) };
const size_t stats_pool_nfields = sizeof(stats_pool_fields) / sizeof(stats_pool_fields[0]);
const struct stats_field stats_server_fields[] = { STATS_SERVER_CODEC(STATS_SERVER_ROW) };
const size_t stats_server_nfields = sizeof(stats_server_fields) / sizeof(stats_server_fields[0]);

static inline int64_t field_get(const void *st, const struct stats_field *f)
{
    return *(const int64_t *)((const char *)st + f->offset);
}

/* ---- summing */

static inline int64_t ld(const int64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

#define STATS_ADD_COUNTER(n)   dst->n += ld(&src->n);
#define STATS_ADD_GAUGE(n)     dst->n += ld(&src->n);
#define STATS_ADD_TIMESTAMP(n) { int64_t t_ = ld(&src->n); if (t_ > dst->n) dst->n = t_; }
#define STATS_SUM(n, t, d)     STATS_ADD_##t(n)

void stats_pool_add(struct stats_pool *dst, const struct stats_pool *src)
{
    STATS_POOL_CODEC(STATS_SUM)
}

void stats_server_add(struct stats_server *dst, const struct stats_server *src)
{
    STATS_SERVER_CODEC(STATS_SUM)
}

void stats_sum_pool(struct stats_pool *dst, const struct stats_pool *const *srcs, size_t n,
                    size_t count)
{
    for (size_t i = 0; i < count; i++) {
        dst[i] = (struct stats_pool){0};
        for (size_t w = 0; w < n; w++)
            stats_pool_add(&dst[i], &srcs[w][i]);
    }
}

void stats_sum_server(struct stats_server *dst, const struct stats_server *const *srcs,
                      size_t n, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        dst[i] = (struct stats_server){0};
        for (size_t w = 0; w < n; w++)
            stats_server_add(&dst[i], &srcs[w][i]);
    }
}

/* ---- the view */

int stats_view_alloc(struct stats_view *v, size_t npools, const size_t *nservers,
                     const size_t *nhot)
{
    *v = (struct stats_view){ .service = "ringleader" };
    if (npools == 0)
        return 0;
    v->pools = calloc(npools, sizeof(*v->pools));
    if (v->pools == NULL)
        return -ENOMEM;
    v->npools = npools;
    for (size_t i = 0; i < npools; i++) {
        struct stats_view_pool *p = &v->pools[i];
        if (nservers[i]) {
            p->servers = calloc(nservers[i], sizeof(*p->servers));
            if (p->servers == NULL)
                goto fail;
            p->nservers = nservers[i];
        }
        if (nhot && nhot[i]) {
            p->hot_keys = calloc(nhot[i], sizeof(*p->hot_keys));
            if (p->hot_keys == NULL)
                goto fail;
        }
    }
    return 0;
fail:
    stats_view_free(v);
    return -ENOMEM;
}

void stats_view_free(struct stats_view *v)
{
    for (size_t i = 0; i < v->npools; i++) {
        free(v->pools[i].servers);
        free(v->pools[i].hot_keys);
        free(v->pools[i].cmds);
        free(v->pools[i].errs);
    }
    free(v->pools);
    free(v->users);
    *v = (struct stats_view){0};
}

/* ---- keys and names as text */

/* Length of the printable UTF-8 sequence at p (1..4), or 0 if p starts no such sequence. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    if (c >= 0x20 && c < 0x7f)
        return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;               /* ASCII controls, DEL, continuation bytes, 0xc0/c1, 0xf5+ */
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0x80 && cp < 0xa0))
        return 0;               /* overlong, surrogates, beyond Unicode, C1 controls */
    return len;
}

int stats_key_display(const char *key, size_t len, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)key;
    size_t o = 0;
    int printable = 1;

    if (outlen == 0)
        return 0;
    for (size_t i = 0; i < len;) {
        size_t s = utf8_seq(p + i, len - i);
        if (s == 0) {
            printable = 0;
            if (o + 4 >= outlen)
                break;
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[p[i] >> 4];
            out[o++] = hex[p[i] & 15];
            i++;
        } else {
            if (o + s >= outlen)
                break;
            memcpy(out + o, p + i, s);
            o += s;
            i += s;
        }
    }
    out[o] = '\0';
    return printable;
}

static void hex_encode(const char *key, size_t len, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = hex[(unsigned char)key[i] >> 4];
        out[2 * i + 1] = hex[(unsigned char)key[i] & 15];
    }
    out[2 * len] = '\0';
}

#define KEY_TEXT_MAX (4 * HOTKEYS_KEY_MAX + 1)
#define NAME_TEXT_MAX 1024

/* A NUL-terminated name as printable text (config strings are normally already so). */
static const char *name_text(const char *s, char *tmp)
{
    if (s == NULL)
        return "";
    stats_key_display(s, strlen(s), tmp, NAME_TEXT_MAX);
    return tmp;
}

/* ---- JSON */

static int jset(json_t *obj, const char *key, json_t *val)
{
    /* _new steals val, also on failure; NULL val makes it fail. */
    return json_object_set_new(obj, key, val) == 0 ? 0 : -ENOMEM;
}

static json_t *jstr(const char *s)
{
    char tmp[NAME_TEXT_MAX];
    return json_string(name_text(s, tmp));
}

static int json_server(json_t *pool, const struct stats_view_server *s)
{
    json_t *o = json_object();
    char tmp[NAME_TEXT_MAX];
    if (o == NULL)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < stats_server_nfields && rc == 0; i++)
        rc = jset(o, stats_server_fields[i].name,
                  json_integer(field_get(&s->stats, &stats_server_fields[i])));
    if (rc == 0)
        rc = jset(o, "state", json_string(s->up ? "up" : s->rejoining ? "rejoining" : "down"));
    if (rc == 0)
        rc = jset(o, "weight", json_integer(s->weight));
    if (rc == 0)
        rc = jset(o, "keyspace_share", json_real(s->keyspace_share));
    if (rc == 0)
        rc = jset(o, "latency_p50_us", json_integer((json_int_t)histogram_percentile(&s->latency, 0.5)));
    if (rc == 0)
        rc = jset(o, "latency_p99_us", json_integer((json_int_t)histogram_percentile(&s->latency, 0.99)));
    if (rc == 0)
        rc = jset(o, "latency_p999_us", json_integer((json_int_t)histogram_percentile(&s->latency, 0.999)));
    if (rc == 0 && s->role != NULL)
        rc = jset(o, "role", jstr(s->role));
    if (rc == 0 && s->role != NULL)
        rc = jset(o, "slots", json_integer(s->slots));
    if (rc < 0) {
        json_decref(o);
        return rc;
    }
    return jset(pool, name_text(s->name, tmp), o);
}

int stats_key_json(struct json_t *obj, const char *key, size_t len)
{
    char stack[KEY_TEXT_MAX], *text = stack;

    /* keys of the hot-key table fit the stack; /ring's may be as long as a query string */
    if (len > HOTKEYS_KEY_MAX && (text = malloc(4 * len + 1)) == NULL)
        return -ENOMEM;
    int printable = stats_key_display(key, len, text,
                                      len > HOTKEYS_KEY_MAX ? 4 * len + 1 : sizeof(stack));
    int rc = jset(obj, "key", json_string(text));
    if (rc == 0 && !printable) {
        hex_encode(key, len, text);        /* 2 * len + 1 bytes: fits */
        rc = jset(obj, "key_hex", json_string(text));
    }
    if (text != stack)
        free(text);
    return rc;
}

static json_t *json_hot_keys(const struct stats_view_pool *p)
{
    json_t *a = json_array();
    if (a == NULL)
        return NULL;
    for (size_t i = 0; i < p->nhot_keys; i++) {
        const struct stats_hot_key *h = &p->hot_keys[i];
        json_t *o = json_object();
        if (o == NULL || json_array_append_new(a, o) < 0)
            goto fail;
        if (stats_key_json(o, h->entry.key, h->entry.len) < 0)
            goto fail;
        if (jset(o, "count", json_integer((json_int_t)h->entry.count)) < 0 ||
            jset(o, "error", json_integer((json_int_t)h->entry.error)) < 0 ||
            jset(o, "owner", h->owner ? jstr(h->owner) : json_null()) < 0)
            goto fail;
    }
    return a;
fail:
    json_decref(a);
    return NULL;
}

/* Requests of the busiest server over the mean per server: skew at a glance. */
double stats_requests_max_over_mean(const struct stats_view_pool *p)
{
    double sum = 0, max = 0;
    for (size_t s = 0; s < p->nservers; s++) {
        double r = (double)p->servers[s].stats.requests;
        sum += r;
        if (r > max)
            max = r;
    }
    return sum > 0 ? max / (sum / (double)p->nservers) : 0.0;
}

static const char *cluster_state_name(int ok)
{
    return ok > 0 ? "ok" : ok == 0 ? "fail" : "unknown";
}

static int json_cluster(json_t *o, const struct stats_view_cluster *c)
{
    int rc = jset(o, "cluster_epoch", json_integer((json_int_t)c->epoch));
    if (rc == 0)
        rc = jset(o, "cluster_state", jstr(cluster_state_name(c->state_ok)));
    if (rc == 0)
        rc = jset(o, "cluster_refreshes", json_integer((json_int_t)c->refreshes));
    if (rc == 0)
        rc = jset(o, "cluster_refresh_errors", json_integer((json_int_t)c->refresh_errors));
    if (rc == 0)
        rc = jset(o, "cluster_map_changes", json_integer((json_int_t)c->map_changes));
    if (rc == 0)
        rc = jset(o, "cluster_refresh_asked", json_integer((json_int_t)c->refresh_asked));
    if (rc == 0)
        rc = jset(o, "cluster_refreshed_at", json_integer(c->refreshed_at));
    if (rc == 0)
        rc = jset(o, "cluster_refresh_error", jstr(c->refresh_error));
    return rc;
}

static json_t *json_tls_certs(const struct stats_view_pool *p)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < p->ntls_certs; i++) {
        json_t *o = json_object();
        if (o == NULL || json_array_append_new(a, o) < 0 ||
            jset(o, "key", jstr(p->tls_certs[i].key)) < 0 ||
            jset(o, "file", jstr(p->tls_certs[i].file)) < 0 ||
            jset(o, "not_after", json_integer(p->tls_certs[i].not_after)) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* A sentinel pool's master, by name and address, and how often it moved. */
static int json_sentinel(json_t *o, const struct stats_view_sentinel *s)
{
    int rc = jset(o, "sentinel_master_name", jstr(s->master_name));
    if (rc == 0)
        rc = jset(o, "sentinel_master", jstr(s->master));
    if (rc == 0)
        rc = jset(o, "sentinel_previous_master", jstr(s->previous));
    if (rc == 0)
        rc = jset(o, "sentinel_switches", json_integer((json_int_t)s->switches));
    if (rc == 0)
        rc = jset(o, "sentinel_switched_at", json_integer(s->switched_at));
    if (rc == 0)
        rc = jset(o, "sentinel_rounds", json_integer((json_int_t)s->rounds));
    if (rc == 0)
        rc = jset(o, "sentinel_round_errors", json_integer((json_int_t)s->round_errors));
    if (rc == 0)
        rc = jset(o, "sentinel_switch_messages", json_integer((json_int_t)s->switch_messages));
    if (rc == 0)
        rc = jset(o, "sentinel_asked", json_integer((json_int_t)s->asked));
    if (rc == 0)
        rc = jset(o, "sentinel_subscribed", json_integer((json_int_t)s->subscribed));
    if (rc == 0)
        rc = jset(o, "sentinel_error", jstr(s->error));
    return rc;
}

static int json_pool(json_t *root, const struct stats_view_pool *p)
{
    json_t *o = json_object();
    char tmp[NAME_TEXT_MAX];
    int rc = 0;
    if (o == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < stats_pool_nfields && rc == 0; i++)
        rc = jset(o, stats_pool_fields[i].name,
                  json_integer(field_get(&p->stats, &stats_pool_fields[i])));
    if (rc == 0)
        rc = jset(o, "epoch", json_integer((json_int_t)p->epoch));
    if (rc == 0)
        rc = jset(o, "ring_checksum", jstr(p->checksum));
    if (rc == 0)
        rc = jset(o, "distribution", jstr(p->distribution));
    if (rc == 0)
        rc = jset(o, "reloads", json_integer((json_int_t)p->reloads));
    if (rc == 0)
        rc = jset(o, "last_reload", jstr(p->last_reload));
    if (rc == 0)
        rc = jset(o, "last_reload_at", json_integer(p->last_reload_at));
    if (rc == 0)
        rc = jset(o, "hot_keys", json_hot_keys(p));
    if (rc == 0)
        rc = jset(o, "keys_max_over_mean", json_real(p->keys_max_over_mean));
    if (rc == 0)
        rc = jset(o, "requests_max_over_mean", json_real(stats_requests_max_over_mean(p)));
    if (rc == 0 && p->is_cluster)
        rc = json_cluster(o, &p->cluster);
    if (rc == 0 && p->is_sentinel)
        rc = json_sentinel(o, &p->sentinel);
    if (rc == 0)
        rc = jset(o, "tls_certs", json_tls_certs(p));
    if (rc == 0)
        rc = jset(o, "slowlog_len", json_integer(p->slowlog_len));
    for (size_t i = 0; i < p->nservers && rc == 0; i++)
        rc = json_server(o, &p->servers[i]);
    if (rc < 0) {
        json_decref(o);
        return rc;
    }
    return jset(root, name_text(p->name, tmp), o);
}

static int json_to_buf(const char *s, size_t n, void *data)
{
    return buf_append(data, s, n) == 0 ? 0 : -1;
}

int stats_render_json(const struct stats_view *v, struct buf *out)
{
    json_t *root = json_object();
    int rc = 0;
    if (root == NULL)
        return -ENOMEM;
    rc = jset(root, "service", jstr(v->service ? v->service : "ringleader"));
    if (rc == 0)
        rc = jset(root, "source", jstr(v->source));
    if (rc == 0)
        rc = jset(root, "version", jstr(v->version));
    if (rc == 0)
        rc = jset(root, "uptime", json_integer(v->uptime));
    if (rc == 0)
        rc = jset(root, "timestamp", json_integer(v->timestamp));
    if (rc == 0)
        rc = jset(root, "total_connections", json_integer(v->total_connections));
    if (rc == 0)
        rc = jset(root, "curr_connections", json_integer(v->curr_connections));
    for (size_t i = 0; i < v->npools && rc == 0; i++)
        rc = json_pool(root, &v->pools[i]);
    /* After twemproxy's document (its fields, then the pools): readers of its layout
     * expect the pools right after curr_connections. */
    if (rc == 0)
        rc = jset(root, "upgrades", json_integer(v->upgrades));
    /* users: under "ringleader" (which no pool may be named), only when configured */
    if (rc == 0 && v->nusers > 0) {
        json_t *rl = json_object(), *us = json_object();
        rc = rl == NULL || us == NULL ? -ENOMEM : 0;
        for (size_t i = 0; i < v->nusers && rc == 0; i++) {
            json_t *u = json_object();
            rc = u == NULL ? -ENOMEM : 0;
#define STATS_USER_JSON(n, t, d) if (rc == 0) rc = jset(u, #n, json_integer(v->users[i].n));
            STATS_USER_CODEC(STATS_USER_JSON)
#undef STATS_USER_JSON
            if (rc == 0)
                rc = jset(us, v->users[i].name, u);
            else
                json_decref(u);
        }
        if (rc == 0)
            rc = jset(rl, "users", us);
        else
            json_decref(us);
        if (rc == 0)
            rc = jset(root, "ringleader", rl);
        else
            json_decref(rl);
    }
    if (rc == 0)
        rc = jset(root, "request_log_written", json_integer(v->request_log_written));
    if (rc == 0)
        rc = jset(root, "request_log_dropped", json_integer(v->request_log_dropped));
    if (rc == 0)
        rc = jset(root, "request_log_bytes", json_integer(v->request_log_bytes));
    /* Insertion order is kept (jansson >= 2.8): twemproxy's field order. */
    if (rc == 0 && json_dump_callback(root, json_to_buf, out, JSON_PRESERVE_ORDER) < 0)
        rc = -ENOMEM;
    json_decref(root);
    return rc;
}

/* ---- Prometheus text format 0.0.4 */

/* Append s as a label value: backslash, double quote and newline escaped. */
static int prom_label(struct buf *out, const char *s)
{
    char tmp[NAME_TEXT_MAX];
    s = name_text(s, tmp);
    for (const char *p = s; *p; p++) {
        const char *e = NULL;
        if (*p == '\\')
            e = "\\\\";
        else if (*p == '"')
            e = "\\\"";
        else if (*p == '\n')
            e = "\\n";
        int rc = e ? buf_append_str(out, e) : buf_append(out, p, 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* HELP and TYPE lines. Descriptions "# x" become "Number of x". */
static int prom_head(struct buf *out, const char *name, const char *type, const char *desc)
{
    int rc = buf_appendf(out, "# HELP %s ", name);
    if (rc == 0 && strncmp(desc, "# ", 2) == 0) {
        rc = buf_append_str(out, "Number of ");
        desc += 2;
    }
    for (const char *p = desc; rc == 0 && *p; p++)
        rc = *p == '\\' ? buf_append_str(out, "\\\\") :
             *p == '\n' ? buf_append_str(out, "\\n") : buf_append(out, p, 1);
    if (rc == 0)
        rc = buf_appendf(out, "\n# TYPE %s %s\n", name, type);
    return rc;
}

/* name{pool="..."[,server="..."]} followed by a space; labels may be NULL. */
static int prom_series(struct buf *out, const char *name, const char *pool, const char *server)
{
    int rc = buf_append_str(out, name);
    if (rc == 0 && pool) {
        rc = buf_append_str(out, "{pool=\"");
        if (rc == 0)
            rc = prom_label(out, pool);
        if (rc == 0 && server) {
            rc = buf_append_str(out, "\",server=\"");
            if (rc == 0)
                rc = prom_label(out, server);
        }
        if (rc == 0)
            rc = buf_append_str(out, "\"}");
    }
    if (rc == 0)
        rc = buf_append_str(out, " ");
    return rc;
}

/* Microseconds as seconds, exactly (no binary float rounding): 250 -> 0.00025. */
static int prom_seconds(struct buf *out, uint64_t us)
{
    char frac[8];
    snprintf(frac, sizeof(frac), "%06" PRIu64, us % 1000000);
    size_t n = 6;
    while (n > 0 && frac[n - 1] == '0')
        n--;
    frac[n] = '\0';
    return n ? buf_appendf(out, "%" PRIu64 ".%s", us / 1000000, frac)
             : buf_appendf(out, "%" PRIu64, us / 1000000);
}

/* The metric name of a counter field: prefix + name (a server field loses its own
 * "server_" prefix: server_eof -> ringleader_server_eof_total) + the type's suffix. */
static void prom_name(char *dst, size_t n, const char *prefix, const struct stats_field *f)
{
    const char *name = f->name;
    if (strcmp(prefix, "ringleader_server_") == 0 && strncmp(name, "server_", 7) == 0)
        name += 7;
    snprintf(dst, n, "%s%s%s", prefix, name,
             f->type == STATS_COUNTER ? "_total" :
             f->type == STATS_TIMESTAMP ? "_timestamp_seconds" : "");
}

static const char *prom_type(enum stats_type t)
{
    return t == STATS_COUNTER ? "counter" : "gauge";
}

static int prom_value(struct buf *out, const struct stats_field *f, int64_t v)
{
    if (f->type == STATS_TIMESTAMP)     /* usec since the epoch -> seconds */
        return v < 0 ? buf_append_str(out, "0\n") :
               (prom_seconds(out, (uint64_t)v) == 0 ? buf_append_str(out, "\n") : -ENOMEM);
    return buf_appendf(out, "%" PRId64 "\n", v);
}

#define TRY(x) do { if ((rc = (x)) < 0) return rc; } while (0)

static int prom_globals(const struct stats_view *v, struct buf *out)
{
    int rc;
    TRY(prom_head(out, "ringleader_info", "gauge", "version and host of this proxy"));
    TRY(buf_append_str(out, "ringleader_info{version=\""));
    TRY(prom_label(out, v->version));
    TRY(buf_append_str(out, "\",source=\""));
    TRY(prom_label(out, v->source));
    TRY(buf_append_str(out, "\"} 1\n"));
    TRY(prom_head(out, "ringleader_uptime_seconds", "gauge", "seconds since the proxy started"));
    TRY(buf_appendf(out, "ringleader_uptime_seconds %" PRId64 "\n", v->uptime));
    TRY(prom_head(out, "ringleader_upgrades_total", "counter",
                  "times the listeners were handed to a new process"));
    TRY(buf_appendf(out, "ringleader_upgrades_total %" PRId64 "\n", v->upgrades));
    TRY(prom_head(out, "ringleader_connections_total", "counter", "# client connections accepted"));
    TRY(buf_appendf(out, "ringleader_connections_total %" PRId64 "\n", v->total_connections));
    TRY(prom_head(out, "ringleader_connections", "gauge", "# client connections open"));
    TRY(buf_appendf(out, "ringleader_connections %" PRId64 "\n", v->curr_connections));
    return 0;
}

static int prom_counters(const struct stats_view *v, struct buf *out)
{
    char name[128];
    int rc;
    for (size_t f = 0; f < stats_pool_nfields; f++) {
        const struct stats_field *fd = &stats_pool_fields[f];
        prom_name(name, sizeof(name), "ringleader_pool_", fd);
        TRY(prom_head(out, name, prom_type(fd->type), fd->desc));
        for (size_t i = 0; i < v->npools; i++) {
            TRY(prom_series(out, name, v->pools[i].name, NULL));
            TRY(prom_value(out, fd, field_get(&v->pools[i].stats, fd)));
        }
    }
    for (size_t f = 0; f < stats_server_nfields; f++) {
        const struct stats_field *fd = &stats_server_fields[f];
        prom_name(name, sizeof(name), "ringleader_server_", fd);
        TRY(prom_head(out, name, prom_type(fd->type), fd->desc));
        for (size_t i = 0; i < v->npools; i++)
            for (size_t s = 0; s < v->pools[i].nservers; s++) {
                const struct stats_view_server *sv = &v->pools[i].servers[s];
                TRY(prom_series(out, name, v->pools[i].name, sv->name));
                TRY(prom_value(out, fd, field_get(&sv->stats, fd)));
            }
    }
    return 0;
}

static int prom_servers(const struct stats_view *v, struct buf *out)
{
    int rc;
    TRY(prom_head(out, "ringleader_server_up", "gauge", "1 when the server is up, 0 when down"));
    for (size_t i = 0; i < v->npools; i++)
        for (size_t s = 0; s < v->pools[i].nservers; s++) {
            TRY(prom_series(out, "ringleader_server_up", v->pools[i].name, v->pools[i].servers[s].name));
            TRY(buf_appendf(out, "%d\n", v->pools[i].servers[s].up ? 1 : 0));
        }

    TRY(prom_head(out, "ringleader_server_weight", "gauge", "the server's weight in the configuration"));
    for (size_t i = 0; i < v->npools; i++)
        for (size_t s = 0; s < v->pools[i].nservers; s++) {
            TRY(prom_series(out, "ringleader_server_weight", v->pools[i].name, v->pools[i].servers[s].name));
            TRY(buf_appendf(out, "%" PRIu32 "\n", v->pools[i].servers[s].weight));
        }
    TRY(prom_head(out, "ringleader_server_keyspace_share", "gauge",
                  "share of the keyspace the ring gives the server (fair share: weight / total weight)"));
    for (size_t i = 0; i < v->npools; i++)
        for (size_t s = 0; s < v->pools[i].nservers; s++) {
            TRY(prom_series(out, "ringleader_server_keyspace_share", v->pools[i].name, v->pools[i].servers[s].name));
            TRY(buf_appendf(out, "%.17g\n", v->pools[i].servers[s].keyspace_share));
        }

    const char *h = "ringleader_server_latency_seconds";
    TRY(prom_head(out, h, "histogram", "request latency seen by the proxy, send to reply"));
    for (size_t i = 0; i < v->npools; i++)
        for (size_t s = 0; s < v->pools[i].nservers; s++) {
            const struct stats_view_server *sv = &v->pools[i].servers[s];
            uint64_t cum[HISTOGRAM_PROM_NBOUNDS + 1];
            histogram_cumulative(&sv->latency, cum);
            for (size_t b = 0; b <= HISTOGRAM_PROM_NBOUNDS; b++) {
                TRY(buf_appendf(out, "%s_bucket{pool=\"", h));
                TRY(prom_label(out, v->pools[i].name));
                TRY(buf_append_str(out, "\",server=\""));
                TRY(prom_label(out, sv->name));
                TRY(buf_append_str(out, "\",le=\""));
                if (b < HISTOGRAM_PROM_NBOUNDS)
                    TRY(prom_seconds(out, histogram_prom_bounds_us[b]));
                else
                    TRY(buf_append_str(out, "+Inf"));
                TRY(buf_appendf(out, "\"} %" PRIu64 "\n", cum[b]));
            }
            TRY(buf_appendf(out, "%s_sum{pool=\"", h));
            TRY(prom_label(out, v->pools[i].name));
            TRY(buf_append_str(out, "\",server=\""));
            TRY(prom_label(out, sv->name));
            TRY(buf_append_str(out, "\"} "));
            TRY(prom_seconds(out, sv->latency.sum_us));
            TRY(buf_appendf(out, "\n%s_count{pool=\"", h));
            TRY(prom_label(out, v->pools[i].name));
            TRY(buf_append_str(out, "\",server=\""));
            TRY(prom_label(out, sv->name));
            /* The +Inf bucket, not h->count: the two always agree in the output. */
            TRY(buf_appendf(out, "\"} %" PRIu64 "\n", cum[HISTOGRAM_PROM_NBOUNDS]));
        }
    return 0;
}

/* A cluster pool's numbers (families only when some pool is a cluster pool). */
static int prom_clusters(const struct stats_view *v, struct buf *out)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        { "ringleader_pool_cluster_epoch", "gauge", "the cluster's current epoch (CLUSTER INFO of the node last asked)" },
        { "ringleader_pool_cluster_state_ok", "gauge", "1 when the node last asked says cluster_state:ok, 0 when fail, -1 unknown" },
        { "ringleader_pool_cluster_refreshes_total", "counter", "# slot map fetches that brought a map" },
        { "ringleader_pool_cluster_refresh_errors_total", "counter", "# slot map fetches that failed" },
        { "ringleader_pool_cluster_map_changes_total", "counter", "# slot maps that differed from the one before" },
        { "ringleader_pool_cluster_refresh_asked_total", "counter", "# refreshes the workers asked for" },
        { "ringleader_pool_cluster_refreshed_at_timestamp_seconds", "gauge", "time of the last slot map in seconds since the epoch" },
        { "ringleader_server_slots", "gauge", "slots a cluster node serves" },
        { "ringleader_server_master", "gauge", "1 for a cluster node that is a master in the slot map, 0 for a replica" },
    };
    int rc, any = 0;
    for (size_t i = 0; i < v->npools; i++)
        any |= v->pools[i].is_cluster;
    if (!any)
        return 0;
    for (size_t f = 0; f < RL_ARRAY_SIZE(fam); f++) {
        TRY(prom_head(out, fam[f].name, fam[f].type, fam[f].help));
        for (size_t i = 0; i < v->npools; i++) {
            const struct stats_view_pool *p = &v->pools[i];
            const struct stats_view_cluster *c = &p->cluster;
            if (!p->is_cluster)
                continue;
            if (f >= 7) {
                for (size_t s = 0; s < p->nservers; s++) {
                    const struct stats_view_server *sv = &p->servers[s];
                    if (sv->role == NULL)
                        continue;
                    TRY(prom_series(out, fam[f].name, p->name, sv->name));
                    TRY(buf_appendf(out, "%" PRId64 "\n", f == 7 ? sv->slots
                                    : (int64_t)(strcmp(sv->role, "master") == 0)));
                }
                continue;
            }
            int64_t val = f == 0 ? (int64_t)c->epoch : f == 1 ? c->state_ok :
                          f == 2 ? (int64_t)c->refreshes : f == 3 ? (int64_t)c->refresh_errors :
                          f == 4 ? (int64_t)c->map_changes : f == 5 ? (int64_t)c->refresh_asked :
                          c->refreshed_at;
            TRY(prom_series(out, fam[f].name, p->name, NULL));
            TRY(buf_appendf(out, "%" PRId64 "\n", val));
        }
    }
    return 0;
}

/* A sentinel pool's master and its switches (families only when some pool has sentinel:). */
static int prom_sentinels(const struct stats_view *v, struct buf *out)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        { "ringleader_pool_sentinel_master_info", "gauge", "the master a sentinel pool writes to (always 1; label master: host:port)" },
        { "ringleader_pool_sentinel_switches_total", "counter", "# masters the sentinels named that replaced the one in use" },
        { "ringleader_pool_sentinel_round_errors_total", "counter", "# rounds where no sentinel named a master that ROLE confirms" },
        { "ringleader_pool_sentinel_subscribed", "gauge", "sentinels whose +switch-master subscription is live" },
    };
    int rc, any = 0;
    for (size_t i = 0; i < v->npools; i++)
        any |= v->pools[i].is_sentinel;
    if (!any)
        return 0;
    for (size_t f = 0; f < RL_ARRAY_SIZE(fam); f++) {
        TRY(prom_head(out, fam[f].name, fam[f].type, fam[f].help));
        for (size_t i = 0; i < v->npools; i++) {
            const struct stats_view_sentinel *sn = &v->pools[i].sentinel;
            if (!v->pools[i].is_sentinel)
                continue;
            if (f == 0) {
                TRY(buf_append_str(out, "ringleader_pool_sentinel_master_info{pool=\""));
                TRY(prom_label(out, v->pools[i].name));
                TRY(buf_append_str(out, "\",master=\""));
                TRY(prom_label(out, sn->master));
                TRY(buf_append_str(out, "\"} 1\n"));
                continue;
            }
            TRY(prom_series(out, fam[f].name, v->pools[i].name, NULL));
            TRY(buf_appendf(out, "%" PRIu64 "\n", f == 1 ? sn->switches :
                            f == 2 ? sn->round_errors : (uint64_t)sn->subscribed));
        }
    }
    return 0;
}

static int prom_pools(const struct stats_view *v, struct buf *out)
{
    int rc;
    TRY(prom_head(out, "ringleader_pool_epoch", "gauge", "ring generation of the pool: grows by one whenever its ring changes"));
    for (size_t i = 0; i < v->npools; i++) {
        TRY(prom_series(out, "ringleader_pool_epoch", v->pools[i].name, NULL));
        TRY(buf_appendf(out, "%" PRIu64 "\n", v->pools[i].epoch));
    }
    TRY(prom_head(out, "ringleader_pool_ring_info", "gauge", "checksum and distribution of the pool's ring (always 1)"));
    for (size_t i = 0; i < v->npools; i++) {
        TRY(buf_append_str(out, "ringleader_pool_ring_info{pool=\""));
        TRY(prom_label(out, v->pools[i].name));
        TRY(buf_append_str(out, "\",checksum=\""));
        TRY(prom_label(out, v->pools[i].checksum));
        TRY(buf_append_str(out, "\",distribution=\""));
        TRY(prom_label(out, v->pools[i].distribution));
        TRY(buf_append_str(out, "\"} 1\n"));
    }
    TRY(prom_head(out, "ringleader_pool_reloads_total", "counter", "# reloads that changed the pool's ring"));
    for (size_t i = 0; i < v->npools; i++) {
        TRY(prom_series(out, "ringleader_pool_reloads_total", v->pools[i].name, NULL));
        TRY(buf_appendf(out, "%" PRIu64 "\n", v->pools[i].reloads));
    }
    TRY(prom_head(out, "ringleader_pool_last_reload_timestamp_seconds", "gauge", "time of the last reload in seconds since the epoch (0: none yet)"));
    for (size_t i = 0; i < v->npools; i++) {
        TRY(prom_series(out, "ringleader_pool_last_reload_timestamp_seconds", v->pools[i].name, NULL));
        TRY(buf_appendf(out, "%" PRId64 "\n", v->pools[i].last_reload_at));
    }
    TRY(prom_head(out, "ringleader_pool_last_reload_success", "gauge", "1 when the last reload succeeded or none happened yet, 0 when it failed"));
    for (size_t i = 0; i < v->npools; i++) {
        const char *r = v->pools[i].last_reload;
        TRY(prom_series(out, "ringleader_pool_last_reload_success", v->pools[i].name, NULL));
        TRY(buf_appendf(out, "%d\n", (r[0] == '\0' || strcmp(r, "ok") == 0) ? 1 : 0));
    }

    /* Balance: requests per server, max and mean over the pool's servers. */
    TRY(prom_head(out, "ringleader_pool_server_requests_max", "gauge", "largest request count of one server of the pool"));
    for (size_t i = 0; i < v->npools; i++) {
        int64_t m = 0;
        for (size_t s = 0; s < v->pools[i].nservers; s++)
            if (v->pools[i].servers[s].stats.requests > m)
                m = v->pools[i].servers[s].stats.requests;
        TRY(prom_series(out, "ringleader_pool_server_requests_max", v->pools[i].name, NULL));
        TRY(buf_appendf(out, "%" PRId64 "\n", m));
    }
    TRY(prom_head(out, "ringleader_pool_server_requests_mean", "gauge", "mean request count over the pool's servers"));
    for (size_t i = 0; i < v->npools; i++) {
        double sum = 0;
        for (size_t s = 0; s < v->pools[i].nservers; s++)
            sum += (double)v->pools[i].servers[s].stats.requests;
        TRY(prom_series(out, "ringleader_pool_server_requests_mean", v->pools[i].name, NULL));
        TRY(buf_appendf(out, "%.17g\n", v->pools[i].nservers ? sum / (double)v->pools[i].nservers : 0.0));
    }

    TRY(prom_head(out, "ringleader_pool_keys_max_over_mean", "gauge", "keyspace share of the busiest server over the mean share, from the ring (1 = even)"));
    for (size_t i = 0; i < v->npools; i++) {
        TRY(prom_series(out, "ringleader_pool_keys_max_over_mean", v->pools[i].name, NULL));
        TRY(buf_appendf(out, "%.17g\n", v->pools[i].keys_max_over_mean));
    }
    TRY(prom_head(out, "ringleader_pool_requests_max_over_mean", "gauge", "requests of the busiest server over the mean per server (1 = even)"));
    for (size_t i = 0; i < v->npools; i++) {
        TRY(prom_series(out, "ringleader_pool_requests_max_over_mean", v->pools[i].name, NULL));
        TRY(buf_appendf(out, "%.17g\n", stats_requests_max_over_mean(&v->pools[i])));
    }

    TRY(prom_head(out, "ringleader_tls_cert_expiry_seconds", "gauge", "when a certificate file of the pool's TLS settings expires (its earliest certificate), seconds since the epoch"));
    for (size_t i = 0; i < v->npools; i++)
        for (size_t k = 0; k < v->pools[i].ntls_certs; k++) {
            const struct stats_tls_cert *tc = &v->pools[i].tls_certs[k];
            TRY(buf_append_str(out, "ringleader_tls_cert_expiry_seconds{pool=\""));
            TRY(prom_label(out, v->pools[i].name));
            TRY(buf_append_str(out, "\",key=\""));
            TRY(prom_label(out, tc->key));
            TRY(buf_append_str(out, "\",file=\""));
            TRY(prom_label(out, tc->file));
            TRY(buf_appendf(out, "\"} %" PRId64 "\n", tc->not_after));
        }

    TRY(prom_head(out, "ringleader_pool_hot_key_requests", "gauge", "estimated requests of a hot key over the hot-key window (an upper bound)"));
    for (size_t i = 0; i < v->npools; i++)
        for (size_t k = 0; k < v->pools[i].nhot_keys; k++) {
            const struct stats_hot_key *hk = &v->pools[i].hot_keys[k];
            char text[KEY_TEXT_MAX], hex[2 * HOTKEYS_KEY_MAX + 1];
            int printable = stats_key_display(hk->entry.key, hk->entry.len, text, sizeof(text));
            TRY(buf_append_str(out, "ringleader_pool_hot_key_requests{pool=\""));
            TRY(prom_label(out, v->pools[i].name));
            TRY(buf_append_str(out, "\",key=\""));
            TRY(prom_label(out, text));
            if (!printable) {
                hex_encode(hk->entry.key, hk->entry.len, hex);
                TRY(buf_append_str(out, "\",key_hex=\""));
                TRY(buf_append_str(out, hex));
            }
            TRY(buf_append_str(out, "\",owner=\""));
            TRY(prom_label(out, hk->owner));
            TRY(buf_appendf(out, "\"} %" PRIu64 "\n", hk->entry.count));
        }
    return 0;
}

/* users: ringleader_user_<field>{user="name"} */
static int prom_users(const struct stats_view *v, struct buf *out)
{
    int rc;
    if (v->nusers == 0)
        return 0;
#define STATS_USER_PROM(n, t, d)                                                            \
    TRY(prom_head(out, STATS_##t == STATS_COUNTER ? "ringleader_user_" #n "_total"          \
                                                  : "ringleader_user_" #n,                 \
                  prom_type(STATS_##t), d));                                                \
    for (size_t i = 0; i < v->nusers; i++) {                                                \
        TRY(buf_append_str(out, STATS_##t == STATS_COUNTER ? "ringleader_user_" #n "_total{user=\"" \
                                                          : "ringleader_user_" #n "{user=\"")); \
        TRY(prom_label(out, v->users[i].name));                                             \
        TRY(buf_appendf(out, "\"} %" PRId64 "\n", v->users[i].n));                         \
    }
    STATS_USER_CODEC(STATS_USER_PROM)
#undef STATS_USER_PROM
    return 0;
}

/* SLOWLOG, commandstats, errorstats and the request log (docs/introspection.md). */
static int prom_introspect(const struct stats_view *v, struct buf *out)
{
    static const struct {
        const char *name, *desc;
        size_t      off;
    } cmd_series[] = {
        { "ringleader_command_calls_total", "# requests answered, by command (INFO commandstats calls)",
          offsetof(struct stats_cmd, calls) },
        { "ringleader_command_usec_total", "microseconds from parse to reply, by command (usec)",
          offsetof(struct stats_cmd, usec) },
        { "ringleader_command_rejected_total", "# requests the proxy answered with an error without a server (rejected_calls)",
          offsetof(struct stats_cmd, rejected) },
        { "ringleader_command_failed_total", "# requests answered with an error after reaching a server (failed_calls)",
          offsetof(struct stats_cmd, failed) },
    };
    int rc;

    TRY(prom_head(out, "ringleader_request_log_lines_total", "counter",
                  "# request log lines written"));
    TRY(buf_appendf(out, "ringleader_request_log_lines_total %" PRId64 "\n", v->request_log_written));
    TRY(prom_head(out, "ringleader_request_log_dropped_total", "counter",
                  "# request log lines lost: a worker's buffer was full, or a write failed"));
    TRY(buf_appendf(out, "ringleader_request_log_dropped_total %" PRId64 "\n",
                    v->request_log_dropped));
    TRY(prom_head(out, "ringleader_slowlog_entries", "gauge", "# SLOWLOG entries of the pool"));
    for (size_t i = 0; i < v->npools; i++) {
        TRY(buf_append_str(out, "ringleader_slowlog_entries{pool=\""));
        TRY(prom_label(out, v->pools[i].name));
        TRY(buf_appendf(out, "\"} %" PRId64 "\n", v->pools[i].slowlog_len));
    }
    for (size_t k = 0; k < sizeof(cmd_series) / sizeof(cmd_series[0]); k++) {
        TRY(prom_head(out, cmd_series[k].name, "counter", cmd_series[k].desc));
        for (size_t i = 0; i < v->npools; i++)
            for (size_t c = 0; c < v->pools[i].ncmds; c++) {
                const struct stats_cmd *sc = &v->pools[i].cmds[c];
                int64_t val = *(const int64_t *)(const void *)((const char *)sc + cmd_series[k].off);
                TRY(buf_appendf(out, "%s{pool=\"", cmd_series[k].name));
                TRY(prom_label(out, v->pools[i].name));
                TRY(buf_append_str(out, "\",command=\""));
                TRY(prom_label(out, sc->name));
                TRY(buf_appendf(out, "\"} %" PRId64 "\n", val));
            }
    }
    TRY(prom_head(out, "ringleader_error_replies_total", "counter",
                  "# error replies, by prefix (INFO errorstats)"));
    for (size_t i = 0; i < v->npools; i++)
        for (size_t e = 0; e < v->pools[i].nerrs; e++) {
            TRY(buf_append_str(out, "ringleader_error_replies_total{pool=\""));
            TRY(prom_label(out, v->pools[i].name));
            TRY(buf_append_str(out, "\",prefix=\""));
            TRY(prom_label(out, v->pools[i].errs[e].name));
            TRY(buf_appendf(out, "\"} %" PRId64 "\n", v->pools[i].errs[e].count));
        }
    return 0;
}

int stats_render_prometheus(const struct stats_view *v, struct buf *out)
{
    int rc;
    TRY(prom_globals(v, out));
    TRY(prom_counters(v, out));
    TRY(prom_servers(v, out));
    TRY(prom_pools(v, out));
    TRY(prom_clusters(v, out));
    TRY(prom_sentinels(v, out));
    TRY(prom_users(v, out));
    TRY(prom_introspect(v, out));
    return 0;
}

/* ---- -D */

static const char *type_name(enum stats_type t)
{
    switch (t) {
    case STATS_COUNTER:   return "counter";
    case STATS_GAUGE:     return "gauge";
    case STATS_TIMESTAMP: return "timestamp";
    case STATS_STRING:    return "string";
    case STATS_LIST:      return "list";
    }
    return "?";
}

#define STATS_DESCRIBE_EXT(n, t, d) fprintf(f, "  %-20s %-10s \"%s\"\n", #n, type_name(STATS_##t), d);

void stats_describe(FILE *f)
{
    fprintf(f, "global stats:\n");
    STATS_GLOBAL_CODEC(STATS_DESCRIBE_EXT)
    fprintf(f, "\npool stats:\n");
    for (size_t i = 0; i < stats_pool_nfields; i++)
        fprintf(f, "  %-20s %-10s \"%s\"\n", stats_pool_fields[i].name,
                type_name(stats_pool_fields[i].type), stats_pool_fields[i].desc);
    STATS_POOL_EXT_CODEC(STATS_DESCRIBE_EXT)
    fprintf(f, "\nserver stats:\n");
    for (size_t i = 0; i < stats_server_nfields; i++)
        fprintf(f, "  %-20s %-10s \"%s\"\n", stats_server_fields[i].name,
                type_name(stats_server_fields[i].type), stats_server_fields[i].desc);
    STATS_SERVER_EXT_CODEC(STATS_DESCRIBE_EXT)
    fprintf(f, "\ncluster pool stats (redis_cluster: true):\n");
    STATS_CLUSTER_POOL_EXT_CODEC(STATS_DESCRIBE_EXT)
    fprintf(f, "\ncluster node stats:\n");
    STATS_CLUSTER_SERVER_EXT_CODEC(STATS_DESCRIBE_EXT)
    fprintf(f, "\nuser stats (users:, under \"ringleader\": {\"users\": {NAME: ...}}):\n");
    STATS_USER_CODEC(STATS_DESCRIBE_EXT)
}
