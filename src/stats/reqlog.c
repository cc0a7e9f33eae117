/* The request log's writer: per-worker bounded buffers of JSON lines, written to a file by a thread of its own. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "lib/log.h"
#include "stats/reqlog.h"

struct reqlog_buf {
    uv_mutex_t mu;
    char      *data;
    size_t     len;
    uint64_t   nlines;
};

struct reqlog {
    uint32_t            nbufs;
    size_t              cap;
    struct reqlog_buf  *bufs;
    char               *spare;          /* the writer's: swapped with a full buffer */
    uv_mutex_t          mu;             /* path, wake */
    uv_cond_t           cond;
    char               *path;           /* NULL: not logging */
    int                 reopen;         /* open the path again on the next pass */
    int                 fd;             /* writer thread's */
    uv_thread_t         thread;
    int                 running;
    atomic_int          stop;
    atomic_int          on;
    atomic_uint_fast64_t lines, bytes, dropped, reopens;
    atomic_int          open;
    int                 open_failed;    /* logged once until it opens */
};

struct reqlog *reqlog_create(uint32_t nbufs, size_t cap)
{
    struct reqlog *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->nbufs = nbufs;
    r->cap = cap;
    r->fd = -1;
    r->bufs = calloc(nbufs ? nbufs : 1, sizeof(*r->bufs));
    r->spare = malloc(cap);
    if (r->bufs == NULL || r->spare == NULL)
        goto fail;
    for (uint32_t i = 0; i < nbufs; i++) {
        if ((r->bufs[i].data = malloc(cap)) == NULL)
            goto fail;
        uv_mutex_init(&r->bufs[i].mu);
    }
    uv_mutex_init(&r->mu);
    uv_cond_init(&r->cond);
    return r;
fail:
    if (r->bufs != NULL)
        for (uint32_t i = 0; i < nbufs; i++)
            if (r->bufs[i].data != NULL) {
                free(r->bufs[i].data);
                uv_mutex_destroy(&r->bufs[i].mu);
            }
    free(r->bufs);
    free(r->spare);
    free(r);
    return NULL;
}

int reqlog_on(const struct reqlog *r)
{
    return r != NULL && atomic_load_explicit(&r->on, memory_order_relaxed);
}

int reqlog_append(struct reqlog *r, uint32_t i, const char *line, size_t n)
{
    struct reqlog_buf *b = &r->bufs[i];
    int wake = 0;

    uv_mutex_lock(&b->mu);
    if (b->len + n > r->cap) {
        uv_mutex_unlock(&b->mu);
        atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
        return -1;
    }
    memcpy(b->data + b->len, line, n);
    b->len += n;
    b->nlines++;
    wake = b->len >= r->cap / 2 && b->len - n < r->cap / 2;
    uv_mutex_unlock(&b->mu);
    if (wake)
        uv_cond_signal(&r->cond);       /* half full: write it now, not at the next tick */
    return 0;
}

/* Writer thread: open (or reopen) the file when asked. */
static void reqlog_open(struct reqlog *r)
{
    char *path = NULL;

    uv_mutex_lock(&r->mu);
    int again = r->reopen;
    r->reopen = 0;
    if (r->path != NULL && (again || r->fd < 0))
        path = strdup(r->path);
    int close_only = r->path == NULL && r->fd >= 0;
    uv_mutex_unlock(&r->mu);
    if (close_only || (path != NULL && r->fd >= 0)) {
        close(r->fd);
        r->fd = -1;
        atomic_store(&r->open, 0);
    }
    if (path == NULL)
        return;
    r->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (r->fd < 0) {
        if (!r->open_failed)
            log_error("request_log: cannot open %s: %s (lines are dropped until it opens)",
                      path, strerror(errno));
        r->open_failed = 1;
    } else {
        r->open_failed = 0;
        atomic_store(&r->open, 1);
        atomic_fetch_add(&r->reopens, 1);
    }
    free(path);
}

/* Writer thread: every buffer's lines to the file. */
static void reqlog_pass(struct reqlog *r)
{
    for (uint32_t i = 0; i < r->nbufs; i++) {
        struct reqlog_buf *b = &r->bufs[i];
        uv_mutex_lock(&b->mu);
        char *data = b->data;
        size_t len = b->len;
        uint64_t nlines = b->nlines;
        if (len > 0) {
            b->data = r->spare;
            b->len = 0;
            b->nlines = 0;
            r->spare = data;
        }
        uv_mutex_unlock(&b->mu);
        if (len == 0)
            continue;
        size_t off = 0;
        while (r->fd >= 0 && off < len) {
            ssize_t w = write(r->fd, data + off, len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        if (off == len) {
            atomic_fetch_add(&r->lines, nlines);
            atomic_fetch_add(&r->bytes, len);
        } else {
            atomic_fetch_add(&r->dropped, nlines);  /* no file, or a failed write: lost */
        }
    }
}

static void reqlog_main(void *arg)
{
    struct reqlog *r = arg;

    for (;;) {
        reqlog_open(r);
        reqlog_pass(r);
        if (atomic_load(&r->stop))
            break;
        uv_mutex_lock(&r->mu);
        if (!atomic_load(&r->stop) && !r->reopen)
            (void)uv_cond_timedwait(&r->cond, &r->mu, (uint64_t)REQLOG_FLUSH_MS * 1000000u);
        uv_mutex_unlock(&r->mu);
    }
    reqlog_pass(r);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}

int reqlog_set_path(struct reqlog *r, const char *path)
{
    char *copy = NULL;

    if (path != NULL && (copy = strdup(path)) == NULL)
        return -ENOMEM;
    uv_mutex_lock(&r->mu);
    int changed = (r->path == NULL) != (copy == NULL) ||
                  (copy != NULL && strcmp(r->path, copy) != 0);
    free(r->path);
    r->path = copy;
    if (changed)
        r->reopen = 1;
    uv_mutex_unlock(&r->mu);
    atomic_store(&r->on, copy != NULL);
    if (changed)
        uv_cond_signal(&r->cond);
    if (copy != NULL && !r->running) {
        int rc = uv_thread_create(&r->thread, reqlog_main, r);
        if (rc < 0) {
            atomic_store(&r->on, 0);
            return rc;
        }
        r->running = 1;
    }
    return 0;
}

void reqlog_reopen(struct reqlog *r)
{
    if (r == NULL)
        return;
    uv_mutex_lock(&r->mu);
    r->reopen = 1;
    uv_mutex_unlock(&r->mu);
    uv_cond_signal(&r->cond);
}

void reqlog_counts(struct reqlog *r, struct reqlog_counts *out)
{
    memset(out, 0, sizeof(*out));
    if (r == NULL)
        return;
    out->lines = atomic_load(&r->lines);
    out->bytes = atomic_load(&r->bytes);
    out->dropped = atomic_load(&r->dropped);
    out->reopens = atomic_load(&r->reopens);
    out->open = atomic_load(&r->open);
}

void reqlog_destroy(struct reqlog *r)
{
    if (r == NULL)
        return;
    if (r->running) {
        atomic_store(&r->stop, 1);
        uv_mutex_lock(&r->mu);
        uv_cond_signal(&r->cond);
        uv_mutex_unlock(&r->mu);
        uv_thread_join(&r->thread);
    }
    for (uint32_t i = 0; i < r->nbufs; i++) {
        free(r->bufs[i].data);
        uv_mutex_destroy(&r->bufs[i].mu);
    }
    uv_cond_destroy(&r->cond);
    uv_mutex_destroy(&r->mu);
    free(r->bufs);
    free(r->spare);
    free(r->path);
    free(r);
}
