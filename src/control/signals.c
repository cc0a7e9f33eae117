/* The signals nutcracker operators send besides stop and reload: log level, log reopen, state dump. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/buf.h"
#include "lib/log.h"
#include "control/observe.h"
#include "control/proxy.h"
#include "control/signals.h"
#include "stats/reqlog.h"
#include "stats/state_dump.h"
#include "stats/stats.h"

static const int signals_handled[] = { SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2 };
#define SIGNALS_N (sizeof(signals_handled) / sizeof(signals_handled[0]))

struct signals {
    struct proxy *p;
    uv_signal_t   h[SIGNALS_N];
    unsigned      open;         /* handles initialised and not yet closed */
};

static const char *const level_names[] = {
    "emerg", "alert", "crit", "error", "warn", "notice", "info", "debug", "verb", "vverb",
    "vvverb", "pverb",
};

void signals_dump_state(struct proxy *p)
{
    struct snapshot *snap = observe_snapshot(p);
    struct stats_view v;
    struct buf out;

    if (snap == NULL)
        return;
    buf_init(&out);
    memset(&v, 0, sizeof(v));
    if (observe_view(p, snap, &v) < 0) {
        snapshot_unref(snap);
        log_error("SIGUSR2: out of memory building the state dump");
        return;
    }
    int rc = state_dump_render(&v, (long)getpid(), p->nworkers, &out);
    stats_view_free(&v);
    snapshot_unref(snap);
    if (rc < 0) {
        buf_free(&out);
        log_error("SIGUSR2: out of memory building the state dump");
        return;
    }
    /* One log line per dump line: each carries the time and survives line-based shipping. */
    const char *s = buf_rptr(&out), *end = s + buf_len(&out);
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        log_always("state: %.*s", (int)n, s);
        s += n + 1;
    }
    buf_free(&out);
}

static void signals_cb(uv_signal_t *h, int signum)
{
    struct signals *s = h->data;
    int level, rc;

    switch (signum) {
    case SIGTTIN:
    case SIGTTOU:
        level = log_level_step(signum == SIGTTIN ? 1 : -1);
        log_always("%s: log level %s to %d (%s)", signum == SIGTTIN ? "SIGTTIN" : "SIGTTOU",
                   signum == SIGTTIN ? "up" : "down", level, level_names[level]);
        break;
    case SIGUSR1:
        rc = log_reopen();
        if (rc < 0)
            log_error("SIGUSR1: cannot reopen the log file: %s (still writing to the old one)",
                      strerror(-rc));
        else
            log_always("SIGUSR1: log file reopened");
        reqlog_reopen(s->p->hub.reqlog);    /* the request log too, on its writer thread */
        break;
    case SIGUSR2:
        signals_dump_state(s->p);
        break;
    default:
        break;
    }
}

struct signals *signals_start(struct proxy *p)
{
    struct signals *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        log_error("signals: out of memory: SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2 not handled");
        return NULL;
    }
    s->p = p;
    for (unsigned i = 0; i < SIGNALS_N; i++) {
        int rc = uv_signal_init(&p->loop, &s->h[i]);
        if (rc == 0) {
            s->open++;
            s->h[i].data = s;
            rc = uv_signal_start(&s->h[i], signals_cb, signals_handled[i]);
        }
        if (rc < 0) {
            log_error("signals: cannot handle signal %d: %s", signals_handled[i], uv_strerror(rc));
            signals_close(s);
            return NULL;
        }
    }
    return s;
}

static void signals_closed(uv_handle_t *h)
{
    struct signals *s = h->data;

    if (--s->open == 0)
        free(s);
}

void signals_close(struct signals *s)
{
    if (s == NULL)
        return;
    unsigned n = s->open;
    if (n == 0) {
        free(s);
        return;
    }
    for (unsigned i = 0; i < n; i++)
        uv_close((uv_handle_t *)&s->h[i], signals_closed);
}
