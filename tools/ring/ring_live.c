/* ringleader-ring --diff --live: the keys and bytes a change would move, counted on the running Redis servers of the old file. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "conf/conf.h"
#include "control/sentinel_link.h"
#include "lib/buf.h"
#include "placement/ring.h"
#include "ring_tool.h"

/* The serialized size of each key, summed on the server: DUMP is what MIGRATE sends. */
#define LIVE_SCRIPT "local n = 0 for _, k in ipairs(KEYS) do local d = redis.call('DUMP', k) " \
                    "if d then n = n + #d end end return n"
#define LIVE_COUNT  "1000"
#define LIVE_TIMEOUT_MS 10000

/* One exchange's outcome, copied out of the link's replies (it frees them). */
struct live_x {
    int        done;
    char       err[200];
    uint64_t   cursor;
    long long  num;
    char     **keys;
    size_t    *lens;
    size_t     nkeys;
};

static void live_free_keys(struct live_x *x)
{
    for (size_t i = 0; i < x->nkeys; i++)
        free(x->keys[i]);
    free(x->keys);
    free(x->lens);
    x->keys = NULL;
    x->lens = NULL;
    x->nkeys = 0;
}

static void live_cb(void *arg, struct sentinel_resp *const *r, uint32_t n, const char *err)
{
    struct live_x *x = arg;
    x->done = 1;
    if (err != NULL || n < 1) {
        snprintf(x->err, sizeof(x->err), "%s", err ? err : "no reply");
        return;
    }
    const struct sentinel_resp *t = r[0];
    if (t->type == '-') {
        snprintf(x->err, sizeof(x->err), "%.150s", t->str ? t->str : "error");
    } else if (t->type == ':') {
        x->num = t->num;
    } else if (t->type == '*' && t->n == 2 && t->elem[0].type == '$' && t->elem[1].type == '*') {
        const struct sentinel_resp *ks = &t->elem[1];
        x->cursor = strtoull(t->elem[0].str ? t->elem[0].str : "0", NULL, 10);
        x->keys = calloc(ks->n ? ks->n : 1, sizeof(*x->keys));
        x->lens = calloc(ks->n ? ks->n : 1, sizeof(*x->lens));
        for (size_t i = 0; x->keys != NULL && x->lens != NULL && i < ks->n; i++) {
            if (ks->elem[i].type != '$' || ks->elem[i].str == NULL)
                continue;
            char *k = malloc(ks->elem[i].len ? ks->elem[i].len : 1);
            if (k == NULL)
                break;
            memcpy(k, ks->elem[i].str, ks->elem[i].len);
            x->keys[x->nkeys] = k;
            x->lens[x->nkeys++] = ks->elem[i].len;
        }
        if (x->keys == NULL || x->lens == NULL)
            snprintf(x->err, sizeof(x->err), "out of memory");
    } else {
        snprintf(x->err, sizeof(x->err), "unexpected reply");
    }
}

static int put_bulk(struct buf *b, const char *s, size_t n)
{
    return buf_appendf(b, "$%zu\r\n", n) < 0 || buf_append(b, s, n) < 0 ||
           buf_append(b, "\r\n", 2) < 0 ? -1 : 0;
}

/* AUTH/SELECT of the pool, then `cmd` (a whole RESP array), to host:port on loop; the
 * outcome in *x. 0, or -1 with x->err. */
static int live_exchange(uv_loop_t *loop, const struct conf_pool *cp, const char *host,
                         uint16_t port, struct buf *cmd, struct live_x *x)
{
    struct buf b;
    int skip = 0;
    buf_init(&b);
    if (cp->redis_auth != NULL) {
        int r = sentinel_resp_auth(&b, cp->redis_username, cp->redis_auth);
        if (r < 0)
            goto nomem;
        skip += r;
    }
    if (cp->redis_db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", cp->redis_db);
        const char *argv[] = { "SELECT", db };
        if (sentinel_resp_command(&b, 2, argv) < 0)
            goto nomem;
        skip++;
    }
    if (buf_append(&b, cmd->data, buf_len(cmd)) < 0)
        goto nomem;
    memset(x, 0, sizeof(*x));
    struct sentinel_link *l = sentinel_link_start(loop, host, port, &b, (uint32_t)skip,
                                                  (uint32_t)skip + 1, LIVE_TIMEOUT_MS, live_cb,
                                                  NULL, x);
    buf_free(&b);
    if (l == NULL) {
        snprintf(x->err, sizeof(x->err), "cannot connect");
        return -1;
    }
    uv_run(loop, UV_RUN_DEFAULT);       /* until the link's handles are closed */
    if (!x->done)
        snprintf(x->err, sizeof(x->err), "no answer");
    return x->err[0] ? -1 : 0;
nomem:
    buf_free(&b);
    snprintf(x->err, sizeof(x->err), "out of memory");
    return -1;
}

/* Server k of op in np (identity and address), or UINT32_MAX. */
static uint32_t live_index(const struct conf_pool *np, const struct conf_server *s)
{
    for (uint32_t i = 0; i < np->nservers; i++)
        if (strcmp(np->servers[i].ident, s->ident) == 0 &&
            strcmp(np->servers[i].addr.text, s->addr.text) == 0)
            return i;
    return UINT32_MAX;
}

int tool__live(const struct conf_pool *op, const struct conf_pool *np, const struct ring *nr,
               struct tool_live *out)
{
    uv_loop_t loop;
    struct buf cmd;
    struct live_x x;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (uv_loop_init(&loop) != 0) {
        snprintf(out->err, sizeof(out->err), "no event loop");
        return -1;
    }
    buf_init(&cmd);
    memset(&x, 0, sizeof(x));
    for (uint32_t s = 0; rc == 0 && s < op->nservers; s++) {
        const struct conf_server *cs = &op->servers[s];
        const char *host = cs->addr.host ? cs->addr.host : "127.0.0.1";
        uint32_t home = live_index(np, cs);
        uint64_t cursor = 0;
        do {
            char cur[24];
            snprintf(cur, sizeof(cur), "%" PRIu64, cursor);
            const char *scan[] = { "SCAN", cur, "COUNT", LIVE_COUNT };
            buf_truncate(&cmd, 0);
            if (sentinel_resp_command(&cmd, 4, scan) < 0 ||
                live_exchange(&loop, op, host, cs->addr.port, &cmd, &x) < 0) {
                snprintf(out->err, sizeof(out->err), "%s: %s", cs->label, x.err[0] ? x.err
                         : "out of memory");
                rc = -1;
                break;
            }
            cursor = x.cursor;
            out->scanned += x.nkeys;
            size_t moving = 0;
            struct buf ev;
            buf_init(&ev);
            for (size_t i = 0; i < x.nkeys; i++)
                if (home == UINT32_MAX || ring_owner(nr, x.keys[i], x.lens[i]) != home) {
                    moving++;
                    if (put_bulk(&ev, x.keys[i], x.lens[i]) < 0)
                        rc = -1;
                }
            live_free_keys(&x);
            if (rc == 0 && moving > 0) {
                char nk[24];
                snprintf(nk, sizeof(nk), "%zu", moving);
                buf_truncate(&cmd, 0);
                if (buf_appendf(&cmd, "*%zu\r\n", moving + 3) < 0 ||
                    put_bulk(&cmd, "EVAL", 4) < 0 ||
                    put_bulk(&cmd, LIVE_SCRIPT, strlen(LIVE_SCRIPT)) < 0 ||
                    put_bulk(&cmd, nk, strlen(nk)) < 0 ||
                    buf_append(&cmd, ev.data, buf_len(&ev)) < 0) {
                    rc = -1;
                } else if (live_exchange(&loop, op, host, cs->addr.port, &cmd, &x) < 0) {
                    snprintf(out->err, sizeof(out->err), "%s: %s", cs->label, x.err);
                    rc = -1;
                } else {
                    out->moving += moving;
                    out->bytes += x.num > 0 ? (uint64_t)x.num : 0;
                }
            }
            buf_free(&ev);
            if (rc < 0 && out->err[0] == '\0')
                snprintf(out->err, sizeof(out->err), "out of memory");
        } while (rc == 0 && cursor != 0);
        out->servers++;
    }
    live_free_keys(&x);
    buf_free(&cmd);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
}
