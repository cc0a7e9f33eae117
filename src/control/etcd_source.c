/* config_source: etcd — the pools document read and watched from an etcd v3 key (HTTP/JSON gateway). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>
#include <uv.h>

#include "control/etcd_source.h"
#include "control/proxy.h"
#include "lib/buf.h"
#include "lib/log.h"
#include "lib/util.h"
#include "proto/memcache.h"

/*
 * Why the HTTP/JSON gateway, libcurl and a thread.
 *
 * etcd's v3 API is gRPC; its gateway (/v3/kv/range, /v3/watch, keys and values in base64)
 * speaks the same API as JSON over HTTP, and every etcd since 3.4 serves it on the client
 * port. libcurl and jansson are the whole client: no gRPC stack, no generated code.
 *
 * The watch is one long HTTP response: a line of JSON per batch of events. It runs on a
 * thread of its own with blocking libcurl calls (a stop flag the progress callback reads
 * ends it within a second). The thread only reads: each new document goes to the main loop
 * through a uv_async, and the main loop applies it as a reload (reload_run: the file with
 * that document), with every reload rule. Driving libcurl's multi interface from the libuv
 * loop instead would save the thread at the price of socket and timer plumbing for one
 * connection that is idle nearly always; the thread keeps the main loop's code what it is.
 *
 * etcd unreachable: the pools in effect keep serving; the watch is tried again after a
 * back-off (ETCD_BACKOFF_MIN_MS doubling to ETCD_BACKOFF_MAX_MS) from the revision after
 * the last one seen, so no change made meanwhile is missed (etcd replays it). A revision
 * compacted away meanwhile is read again whole (/v3/kv/range).
 */

#define ETCD_RANGE_TIMEOUT_MS   3000
#define ETCD_CONNECT_TIMEOUT_MS 2000
#define ETCD_BACKOFF_MIN_MS     100
#define ETCD_BACKOFF_MAX_MS     5000
#define ETCD_DOC_MAX            (16u << 20)     /* a pools document larger than this is refused */
#define ETCD_LINE_MAX           (48u << 20)     /* a watch line (base64 of the document) */

struct etcd_source {
    struct proxy   *p;
    uv_mutex_t      mu;             /* everything below the thread writes */
    uv_cond_t       cond;           /* back-off waits, woken by the stop */
    char           *url;            /* config_source as written */
    char           *endpoint;       /* "http://host:port" */
    char           *key;            /* the key, as bytes */
    char           *key_b64;
    char           *doc;            /* the last document read (NULL: none yet) */
    size_t          doclen;
    uint64_t        doc_rev;        /* its mod_revision */
    int             deleted;        /* the key was deleted at doc_rev */
    uint64_t        seen_rev;       /* the store's revision last seen: the watch goes on after it */
    int             need_range;     /* the watch's history was compacted: read the key whole */
    int             watching;       /* a watch is established */
    uint64_t        reads, watches, failures, events;
    char            last_error[512];
    /* the main loop's */
    uint64_t        notified_rev;
    int             notified_deleted;
    uv_async_t      async;
    int             async_open;
    uv_thread_t     thread;
    int             thread_started;
    atomic_int      stop;
    etcd_source_changed_fn changed; /* proxy.c's: a reload */
};

/* ------------------------------------------------------------------ HTTP */

struct etcd_call {
    struct etcd_source *s;
    struct buf          body;       /* the response (range) or the unparsed line (watch) */
    int                 watch;
    char                err[256];   /* a line that stopped the watch */
};

static int etcd_watch_line(struct etcd_call *c, const char *line, size_t len);

static size_t etcd_write_cb(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct etcd_call *c = arg;
    size_t n = size * nmemb;

    if (buf_append(&c->body, ptr, n) < 0)
        return 0;
    if (!c->watch)
        return buf_len(&c->body) > 2u * ETCD_LINE_MAX ? 0 : n;
    for (;;) {
        char *start = buf_rptr(&c->body);
        char *nl = memchr(start, '\n', buf_len(&c->body));
        if (nl == NULL)
            break;
        size_t len = (size_t)(nl - start);
        if (len > 0 && etcd_watch_line(c, start, len) < 0)
            return 0;       /* ends the transfer */
        buf_consume(&c->body, len + 1);
    }
    return buf_len(&c->body) > ETCD_LINE_MAX ? 0 : n;
}

static int etcd_progress_cb(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    struct etcd_call *c = arg;
    return atomic_load(&c->s->stop) ? 1 : 0;
}

/* POST body to endpoint + path; 0 with the response read (range) or the stream ended
 * (watch), or -1 with err. */
static int etcd_post(struct etcd_call *c, const char *path, const char *body, long timeout_ms,
                     char *err, size_t errlen)
{
    char url[600];
    CURL *h = curl_easy_init();
    struct curl_slist *hdr = NULL;
    char cerr[CURL_ERROR_SIZE] = "";

    if (h == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(url, sizeof(url), "%s%s", c->s->endpoint, path);
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, etcd_write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)ETCD_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 10L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 5L);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, etcd_progress_cb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    if (c->err[0] != '\0') {
        snprintf(err, errlen, "%s", c->err);
        return -1;
    }
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "%s: %s", url, cerr[0] ? cerr : curl_easy_strerror(rc));
        return -1;
    }
    if (status != 200) {
        snprintf(err, errlen, "%s: HTTP %ld", url, status);
        return -1;
    }
    return 0;
}

/* etcd's int64s are JSON strings ("123"); 0 when absent. */
static uint64_t etcd_u64(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    if (json_is_string(v))
        return strtoull(json_string_value(v), NULL, 10);
    if (json_is_integer(v))
        return (uint64_t)json_integer_value(v);
    return 0;
}

/* Decode a base64 value (NULL or "" is empty) into a new NUL-terminated string; NULL when
 * it is not base64 or too large. */
static char *etcd_b64(const char *b64, size_t *len)
{
    size_t n = b64 ? strlen(b64) : 0;
    char *out = malloc(n / 4 * 3 + 4);
    if (out == NULL || n / 4 * 3 > ETCD_DOC_MAX) {
        free(out);
        return NULL;
    }
    int got = n ? memcache_key_decode(b64, n, out, n / 4 * 3 + 3) : 0;
    if (got < 0) {
        free(out);
        return NULL;
    }
    out[got] = '\0';
    *len = (size_t)got;
    return out;
}

/* Keep a new document (or the key's deletion) at revision rev and tell the main loop. */
static void etcd_keep(struct etcd_source *s, char *doc, size_t len, uint64_t rev, int deleted)
{
    uv_mutex_lock(&s->mu);
    free(s->doc);
    s->doc = doc;
    s->doclen = len;
    s->doc_rev = rev;
    s->deleted = deleted;
    if (rev > s->seen_rev)
        s->seen_rev = rev;
    s->events++;
    uv_mutex_unlock(&s->mu);
    if (s->async_open)
        uv_async_send(&s->async);
}

/* Read the key whole: 0 (the document kept, or the key absent: *absent), or -1 with err. */
static int etcd_range(struct etcd_source *s, int *absent, char *err, size_t errlen)
{
    struct etcd_call c;
    char *body = NULL;
    int rc = -1;

    memset(&c, 0, sizeof(c));
    c.s = s;
    *absent = 0;
    json_t *req = json_pack("{s:s}", "key", s->key_b64);
    body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (body == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (etcd_post(&c, "/v3/kv/range", body, ETCD_RANGE_TIMEOUT_MS, err, errlen) < 0)
        goto out;
    json_error_t je;
    json_t *j = json_loadb(buf_rptr(&c.body), buf_len(&c.body), 0, &je);
    if (j == NULL) {
        snprintf(err, errlen, "%s: not JSON: %s", s->url, je.text);
        goto out;
    }
    uint64_t rev = etcd_u64(json_object_get(j, "header"), "revision");
    json_t *kv = json_array_get(json_object_get(j, "kvs"), 0);
    uv_mutex_lock(&s->mu);
    s->reads++;
    if (rev > s->seen_rev)
        s->seen_rev = rev;
    s->need_range = 0;
    uv_mutex_unlock(&s->mu);
    if (kv == NULL) {
        *absent = 1;
        rc = 0;
    } else {
        size_t len;
        char *doc = etcd_b64(json_string_value(json_object_get(kv, "value")), &len);
        if (doc == NULL)
            snprintf(err, errlen, "%s: the value is not base64 or larger than %u bytes", s->url,
                     ETCD_DOC_MAX);
        else {
            etcd_keep(s, doc, len, etcd_u64(kv, "mod_revision"), 0);
            rc = 0;
        }
    }
    json_decref(j);
out:
    free(body);
    buf_free(&c.body);
    return rc;
}

/* One line of the watch stream: 0 to go on, -1 to end it (c->err says why, or a range is
 * wanted). */
static int etcd_watch_line(struct etcd_call *c, const char *line, size_t len)
{
    struct etcd_source *s = c->s;
    json_error_t je;
    json_t *j = json_loadb(line, len, 0, &je);
    if (j == NULL) {
        snprintf(c->err, sizeof(c->err), "%s: a watch line is not JSON: %s", s->url, je.text);
        return -1;
    }
    json_t *res = json_object_get(j, "result");
    if (res == NULL) {
        json_t *e = json_object_get(j, "error");
        json_t *m = json_is_object(e) ? json_object_get(e, "message") : NULL;
        snprintf(c->err, sizeof(c->err), "%s: watch: %s", s->url,
                 json_is_string(m) ? json_string_value(m) : "an answer without a result");
        json_decref(j);
        return -1;
    }
    uint64_t hrev = etcd_u64(json_object_get(res, "header"), "revision");
    if (etcd_u64(res, "compact_revision") != 0) {
        uv_mutex_lock(&s->mu);
        s->need_range = 1;
        uv_mutex_unlock(&s->mu);
        snprintf(c->err, sizeof(c->err), "%s: the revisions after %" PRIu64 " were compacted: "
                 "reading the key again", s->url, s->seen_rev);
        json_decref(j);
        return -1;
    }
    if (json_is_true(json_object_get(res, "created"))) {
        uv_mutex_lock(&s->mu);
        s->watching = 1;
        s->watches++;
        uv_mutex_unlock(&s->mu);
        log_notice("config_source %s: watching from revision %" PRIu64, s->url, s->seen_rev + 1);
    }
    json_t *events = json_object_get(res, "events");
    for (size_t i = 0; i < json_array_size(events); i++) {
        json_t *ev = json_array_get(events, i);
        json_t *kv = json_object_get(ev, "kv");
        uint64_t rev = etcd_u64(kv, "mod_revision");
        json_t *type = json_object_get(ev, "type");
        if (json_is_string(type) && strcmp(json_string_value(type), "DELETE") == 0) {
            etcd_keep(s, NULL, 0, rev, 1);
            continue;
        }
        size_t dlen;
        char *doc = etcd_b64(json_string_value(json_object_get(kv, "value")), &dlen);
        if (doc == NULL) {
            snprintf(c->err, sizeof(c->err), "%s: a value is not base64 or larger than %u "
                     "bytes", s->url, ETCD_DOC_MAX);
            json_decref(j);
            return -1;
        }
        etcd_keep(s, doc, dlen, rev, 0);
    }
    uv_mutex_lock(&s->mu);
    if (hrev > s->seen_rev && json_array_size(events) > 0)
        s->seen_rev = hrev;
    uv_mutex_unlock(&s->mu);
    json_decref(j);
    return 0;
}

/* Watch the key from the revision after the last seen until the stream ends; -1 with err. */
static int etcd_watch(struct etcd_source *s, char *err, size_t errlen)
{
    struct etcd_call c;
    memset(&c, 0, sizeof(c));
    c.s = s;
    c.watch = 1;
    uv_mutex_lock(&s->mu);
    uint64_t from = s->seen_rev + 1;
    uv_mutex_unlock(&s->mu);
    json_t *req = json_pack("{s:{s:s,s:I}}", "create_request", "key", s->key_b64,
                            "start_revision", (json_int_t)from);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (body == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = etcd_post(&c, "/v3/watch", body, 0, err, errlen);
    if (rc == 0)
        snprintf(err, errlen, "%s: the watch ended", s->url);
    free(body);
    buf_free(&c.body);
    return -1;
}

/* The watch thread: watch, and after a failure wait, then watch again from where it was. */
static void etcd_thread(void *arg)
{
    struct etcd_source *s = arg;
    uint32_t backoff = ETCD_BACKOFF_MIN_MS;
    char err[512];

    while (!atomic_load(&s->stop)) {
        uv_mutex_lock(&s->mu);
        int range = s->need_range;
        uv_mutex_unlock(&s->mu);
        int absent = 0;
        int rc = range ? etcd_range(s, &absent, err, sizeof(err)) : 0;
        if (rc == 0 && absent)
            etcd_keep(s, NULL, 0, s->seen_rev, 1);
        if (rc == 0)
            rc = etcd_watch(s, err, sizeof(err));
        if (atomic_load(&s->stop))
            break;
        uv_mutex_lock(&s->mu);
        int was_watching = s->watching;
        s->watching = 0;
        s->failures++;
        snprintf(s->last_error, sizeof(s->last_error), "%s", err);
        if (was_watching)
            backoff = ETCD_BACKOFF_MIN_MS;      /* it worked until now: try again soon */
        log_warn("config_source %s: %s; the pools in effect keep serving, watching again in "
                 "%u ms from revision %" PRIu64, s->url, err, backoff, s->seen_rev + 1);
        if (!atomic_load(&s->stop))
            uv_cond_timedwait(&s->cond, &s->mu, (uint64_t)backoff * 1000000u);
        uv_mutex_unlock(&s->mu);
        backoff = backoff * 2 > ETCD_BACKOFF_MAX_MS ? ETCD_BACKOFF_MAX_MS : backoff * 2;
    }
}

/* ------------------------------------------------------------------ the main loop */

/* A new document (or the key's deletion): applied as a reload. */
static void etcd_async_cb(uv_async_t *a)
{
    struct etcd_source *s = a->data;

    uv_mutex_lock(&s->mu);
    uint64_t rev = s->doc_rev;
    int deleted = s->deleted;
    uv_mutex_unlock(&s->mu);
    if (atomic_load(&s->p->stopping) || (rev == s->notified_rev && deleted == s->notified_deleted))
        return;
    s->notified_rev = rev;
    s->notified_deleted = deleted;
    log_notice("config_source %s: revision %" PRIu64 "%s", s->url, rev,
               deleted ? ": the key was deleted" : "");
    s->changed(s->p);
}

/* Take config_source url (the first time a file names it); 0, or -1 with err. */
static int etcd_configure(struct etcd_source *s, const char *url, char *err, size_t errlen)
{
    const char *hp = url + strlen("etcd://");
    const char *slash = strchr(hp, '/');
    struct buf b;

    memset(&b, 0, sizeof(b));
    s->url = strdup(url);
    s->endpoint = malloc((size_t)(slash - hp) + 8);
    s->key = strdup(slash);
    if (s->url == NULL || s->endpoint == NULL || s->key == NULL ||
        buf_append_b64(&b, s->key, strlen(s->key)) < 0 || buf_append(&b, "", 1) < 0) {
        buf_free(&b);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(s->endpoint, (size_t)(slash - hp) + 8, "http://%.*s", (int)(slash - hp), hp);
    s->key_b64 = strdup(buf_rptr(&b));
    buf_free(&b);
    if (s->key_b64 == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

int etcd_source_conf_load(struct proxy *p, struct conf **out, char *err, size_t errlen)
{
    struct etcd_source *s = p->etcd;
    struct conf *file = NULL;

    *out = NULL;
    if (conf_load(p->opt.conf_path, &file, err, errlen) < 0)
        return -1;
    const char *url = file->global.config_source;
    if (url == NULL) {
        *out = file;
        return 0;
    }
    if (s->url != NULL && strcmp(s->url, url) != 0) {
        snprintf(err, errlen, "%s: config_source changed from %s to %s: that takes a restart",
                 p->opt.conf_path, s->url, url);
        conf_free(file);
        return -1;
    }
    if (s->url == NULL) {
        int absent = 0;
        if (etcd_configure(s, url, err, errlen) < 0 ||
            etcd_range(s, &absent, err, errlen) < 0) {
            conf_free(file);
            return -1;
        }
        if (absent)
            etcd_keep(s, NULL, 0, 0, 1);
    }
    conf_free(file);
    url = s->url;       /* the same text, which outlives the file's configuration */
    uv_mutex_lock(&s->mu);
    char *doc = s->doc ? util_strndup(s->doc, s->doclen) : NULL;
    size_t len = s->doclen;
    uint64_t rev = s->doc_rev;
    int deleted = s->deleted;
    uv_mutex_unlock(&s->mu);
    if (doc == NULL) {
        if (deleted || s->doc == NULL)
            snprintf(err, errlen, "%s: the key holds no pools document%s", url,
                     rev ? " (deleted)" : "");
        else
            snprintf(err, errlen, "out of memory");
        return -1;
    }
    char name[600];
    snprintf(name, sizeof(name), "%s@%" PRIu64, url, rev);
    int rc = conf_load_source(p->opt.conf_path, name, rev, doc, len, out, err, errlen);
    if (rc == 0) {
        free((*out)->source);
        (*out)->source = strdup(url);
        if ((*out)->source == NULL) {
            conf_free(*out);
            *out = NULL;
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
    }
    free(doc);
    return rc;
}

/* ------------------------------------------------------------------ life */

int etcd_source_init(struct proxy *p, etcd_source_changed_fn changed)
{
    struct etcd_source *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        free(s);
        return -ENOMEM;
    }
    s->p = p;
    s->changed = changed;
    uv_mutex_init(&s->mu);
    uv_cond_init(&s->cond);
    atomic_init(&s->stop, 0);
    p->etcd = s;
    return 0;
}

void etcd_source_start(struct proxy *p)
{
    struct etcd_source *s = p->etcd;
    if (s == NULL || s->url == NULL)
        return;
    uv_async_init(&p->loop, &s->async, etcd_async_cb);
    s->async.data = s;
    s->async_open = 1;
    s->notified_rev = s->doc_rev;
    s->notified_deleted = s->deleted;
    if (uv_thread_create(&s->thread, etcd_thread, s) != 0) {
        log_error("config_source %s: cannot start the watch thread: changes are not followed",
                  s->url);
        return;
    }
    s->thread_started = 1;
}

void etcd_source_close(struct proxy *p)
{
    struct etcd_source *s = p->etcd;
    if (s == NULL)
        return;
    atomic_store(&s->stop, 1);
    uv_mutex_lock(&s->mu);
    uv_cond_signal(&s->cond);
    uv_mutex_unlock(&s->mu);
    if (s->thread_started)
        uv_thread_join(&s->thread);       /* within a second: the progress callback */
    s->thread_started = 0;
    if (s->async_open)
        uv_close((uv_handle_t *)&s->async, NULL);
    s->async_open = 0;
}

void etcd_source_free(struct proxy *p)
{
    struct etcd_source *s = p->etcd;
    if (s == NULL)
        return;
    free(s->url);
    free(s->endpoint);
    free(s->key);
    free(s->key_b64);
    free(s->doc);
    uv_mutex_destroy(&s->mu);
    uv_cond_destroy(&s->cond);
    free(s);
    p->etcd = NULL;
    curl_global_cleanup();
}

json_t *etcd_source_json(struct proxy *p)
{
    struct etcd_source *s = p->etcd;
    if (s == NULL || s->url == NULL)
        return NULL;
    uv_mutex_lock(&s->mu);
    json_t *o = json_pack("{s:s,s:I,s:I,s:b,s:I,s:I,s:I,s:I}", "url", s->url,
                          "revision_read", (json_int_t)s->doc_rev,
                          "revision_seen", (json_int_t)s->seen_rev,
                          "watching", s->watching,
                          "reads", (json_int_t)s->reads, "watches", (json_int_t)s->watches,
                          "failures", (json_int_t)s->failures, "events", (json_int_t)s->events);
    if (o != NULL)
        json_object_set_new(o, "last_error", s->last_error[0] ? json_string(s->last_error)
                                                              : json_null());
    uv_mutex_unlock(&s->mu);
    return o;
}
