/* Redis replies of a fanned-out command merged into one for the client (MGET, DEL, KEYS, INFO, SCAN ...). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "proto/redis_int.h"
#include "lib/util.h"

/* ----------------------------------------------------------------- merge */

/* Copy the first fragment reply that is an error; 1 if one was, 0 if none. */
static int merge_first_error(struct buf *const *frag, uint32_t nfrag, struct buf *out, int *rc)
{
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t len = buf_len(frag[f]);
        if (len > 0 && (d[0] == '-' || d[0] == '!')) {
            int64_t end = redis__element_end(d, len, 0);
            *rc = end < 0 ? -1 : buf_append(out, d, (size_t)end);
            return 1;
        }
    }
    return 0;
}

/* MGET (per 1): one array of the fragments' elements in the client's key order; PUBSUB
 * NUMSUB (per 2): the [channel, count] pairs in that order. */
static int merge_array(uint32_t per, uint32_t nkeys, const uint32_t *key_frag,
                       struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    size_t stack_pos[32];
    uint64_t stack_left[32];
    size_t *fpos = stack_pos;
    uint64_t *fleft = stack_left;
    int rc = -1;

    if (key_frag == NULL)
        return -1;
    if (nfrag > RL_ARRAY_SIZE(stack_pos)) {
        fpos = malloc(nfrag * sizeof(*fpos));
        fleft = malloc(nfrag * sizeof(*fleft));
        if (fpos == NULL || fleft == NULL) {
            rc = -ENOMEM;
            goto out;
        }
    }
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t len = buf_len(frag[f]), eol;
        int64_t n;
        if (len == 0 || d[0] != '*' || redis__rsp_line(d, len, &eol) != 1 ||
            redis__parse_num(d + 1, eol - 2, &n) < 0 || n < 0)
            goto out;
        fpos[f] = eol + 1;
        fleft[f] = (uint64_t)n;
    }
    if (buf_appendf(out, "*%" PRIu64 "\r\n", (uint64_t)nkeys * per) < 0) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < nkeys; i++) {
        uint32_t f = key_frag[i];
        if (f >= nfrag || fleft[f] < per)
            goto out;
        const char *d = buf_rptr(frag[f]);
        size_t at = fpos[f];
        for (uint32_t e = 0; e < per; e++) {
            int64_t end = redis__element_end(d, buf_len(frag[f]), at);
            if (end < 0)
                goto out;
            at = (size_t)end;
        }
        if (buf_append(out, d + fpos[f], at - fpos[f]) < 0) {
            rc = -ENOMEM;
            goto out;
        }
        fpos[f] = at;
        fleft[f] -= per;
    }
    rc = 0;
    for (uint32_t f = 0; f < nfrag; f++)
        if (fleft[f] != 0)
            rc = -1;
out:
    if (fpos != stack_pos)
        free(fpos);
    if (fleft != stack_left)
        free(fleft);
    return rc;
}

static int merge_ok(struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t len = buf_len(frag[f]);
        if (len >= 5 && memcmp(d, "+OK\r\n", 5) == 0)
            continue;
        int64_t end = redis__element_end(d, len, 0);
        if (end < 0)
            return -1;
        return buf_append(out, d, (size_t)end);      /* the first reply that is not +OK */
    }
    return buf_append(out, "+OK\r\n", 5);
}

/* DEL, EXISTS ... (max 0): the integers summed. PUBSUB NUMPAT (max 1): the largest; a
 * pattern subscribed through the proxy is subscribed on every server, so each server
 * counts every such pattern and the largest count is the pool's. */
static int merge_ints(struct buf *const *frag, uint32_t nfrag, int max, struct buf *out)
{
    int64_t acc = 0;
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t len = buf_len(frag[f]), eol;
        int64_t n;
        if (len == 0 || d[0] != ':' || redis__rsp_line(d, len, &eol) != 1 ||
            redis__parse_num(d + 1, eol - 2, &n) < 0)
            return -1;
        if (max)
            acc = f == 0 || n > acc ? n : acc;
        else if (__builtin_add_overflow(acc, n, &acc))
            return -1;          /* no server counts past int64: malformed */
    }
    return buf_appendf(out, ":%" PRId64 "\r\n", acc);
}

/* KEYS: the servers' arrays as one. */
static int merge_concat(struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    uint64_t total = 0;
    size_t eol[nfrag ? nfrag : 1];

    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        int64_t n;
        if (d[0] != '*' || redis__rsp_line(d, buf_len(frag[f]), &eol[f]) != 1 ||
            redis__parse_num(d + 1, eol[f] - 2, &n) < 0 || n < 0)
            return -1;
        total += (uint64_t)n;
    }
    if (buf_appendf(out, "*%" PRIu64 "\r\n", total) < 0)
        return -ENOMEM;
    for (uint32_t f = 0; f < nfrag; f++)
        if (buf_append(out, buf_rptr(frag[f]) + eol[f] + 1, buf_len(frag[f]) - eol[f] - 1) < 0)
            return -ENOMEM;
    return 0;
}

/* SCRIPT EXISTS: an array of 0/1 per sha from each server; 1 only where every
 * server has the script (EVALSHA may run on any of them). */
static int merge_and(struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    const char *d0 = buf_rptr(frag[0]);
    size_t len0 = buf_len(frag[0]), eol;
    int64_t n;

    if (d0[0] != '*' || redis__rsp_line(d0, len0, &eol) != 1 || redis__parse_num(d0 + 1, eol - 2, &n) < 0 ||
        n < 0)
        return -1;
    size_t pos[nfrag];
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t e;
        if (buf_len(frag[f]) < eol + 1 || memcmp(d, d0, eol + 1) != 0 ||
            redis__rsp_line(d, buf_len(frag[f]), &e) != 1)
            return -1;                  /* every server answers as many */
        pos[f] = e + 1;
    }
    if (buf_append(out, d0, eol + 1) < 0)
        return -ENOMEM;
    for (int64_t i = 0; i < n; i++) {
        int all = 1;
        for (uint32_t f = 0; f < nfrag; f++) {
            const char *d = buf_rptr(frag[f]) + pos[f];
            size_t left = buf_len(frag[f]) - pos[f], e;
            int64_t v;
            if (left == 0 || d[0] != ':' || redis__rsp_line(d, left, &e) != 1 ||
                redis__parse_num(d + 1, e - 2, &v) < 0)
                return -1;
            all &= v == 1;
            pos[f] += e + 1;
        }
        if (buf_append_str(out, all ? ":1\r\n" : ":0\r\n") < 0)
            return -ENOMEM;
    }
    return 0;
}

struct keyspace_db {
    uint64_t db, keys, expires, ttl_weighted;
};

/* Read "keys=1,expires=0,avg_ttl=0" style fields; missing ones stay 0. */
static uint64_t ks_field(const char *s, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i + nl < len; i++) {
        if ((i == 0 || s[i - 1] == ',' || s[i - 1] == ':') && memcmp(s + i, name, nl) == 0 &&
            s[i + nl] == '=') {
            uint64_t v = 0;
            for (size_t j = i + nl + 1; j < len && s[j] >= '0' && s[j] <= '9'; j++)
                v = v * 10 + (uint64_t)(s[j] - '0');
            return v;
        }
    }
    return 0;
}

static int merge_keyspace(struct buf *const *frag, uint32_t nfrag, int verbatim, struct buf *out)
{
    struct keyspace_db *dbs = NULL;
    size_t ndb = 0;
    struct buf body;
    int rc = -1;

    buf_init(&body);
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *s;
        size_t n;
        if (redis__text(buf_rptr(frag[f]), buf_len(frag[f]), &s, &n) < 0)
            goto out;
        const char *e = s + n;
        while (s < e) {
            const char *le = memchr(s, '\n', (size_t)(e - s));
            size_t ll = le ? (size_t)(le - s) : (size_t)(e - s);
            if (ll > 2 && memcmp(s, "db", 2) == 0 && s[2] >= '0' && s[2] <= '9') {
                uint64_t db = 0;
                size_t i = 2;
                while (i < ll && s[i] >= '0' && s[i] <= '9')
                    db = db * 10 + (uint64_t)(s[i++] - '0');
                size_t k;
                for (k = 0; k < ndb && dbs[k].db != db; k++)
                    ;
                if (k == ndb) {
                    struct keyspace_db *g = realloc(dbs, (ndb + 1) * sizeof(*dbs));
                    if (g == NULL) {
                        rc = -ENOMEM;
                        goto out;
                    }
                    dbs = g;
                    memset(&dbs[ndb++], 0, sizeof(*dbs));
                    dbs[k].db = db;
                }
                uint64_t ex = ks_field(s, ll, "expires");
                dbs[k].keys += ks_field(s, ll, "keys");
                dbs[k].expires += ex;
                dbs[k].ttl_weighted += ks_field(s, ll, "avg_ttl") * ex;
            }
            s += ll + 1;
        }
    }
    /* Redis lists the databases in order. */
    for (size_t i = 1; i < ndb; i++)
        for (size_t j = i; j > 0 && dbs[j - 1].db > dbs[j].db; j--) {
            struct keyspace_db t = dbs[j];
            dbs[j] = dbs[j - 1];
            dbs[j - 1] = t;
        }
    if (buf_append_str(&body, "# Keyspace\r\n") < 0)
        goto nomem;
    for (size_t i = 0; i < ndb; i++)
        if (buf_appendf(&body, "db%" PRIu64 ":keys=%" PRIu64 ",expires=%" PRIu64
                        ",avg_ttl=%" PRIu64 "\r\n", dbs[i].db, dbs[i].keys, dbs[i].expires,
                        dbs[i].expires ? dbs[i].ttl_weighted / dbs[i].expires : 0) < 0)
            goto nomem;
    rc = redis__append_text(out, verbatim, buf_rptr(&body), buf_len(&body));
    goto out;
nomem:
    rc = -ENOMEM;
out:
    free(dbs);
    buf_free(&body);
    return rc;
}

struct union_elem {
    const char *p;
    size_t      len;
};

static int union_bytes(const struct union_elem *x, const struct union_elem *y)
{
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

/* By name: an element's bytes after its header line ("$<n>\r\n"). */
static int union_cmp(const void *a, const void *b)
{
    struct union_elem x = *(const struct union_elem *)a, y = *(const struct union_elem *)b;
    const char *ex = memchr(x.p, '\n', x.len), *ey = memchr(y.p, '\n', y.len);
    if (ex != NULL && ey != NULL) {
        x.len -= (size_t)(ex + 1 - x.p);
        x.p = ex + 1;
        y.len -= (size_t)(ey + 1 - y.p);
        y.p = ey + 1;
    }
    return union_bytes(&x, &y);
}

/* PUBSUB CHANNELS / SHARDCHANNELS: every server's channels, each once (a channel is on its
 * owner through the proxy, but a backend's own clients may subscribe anywhere), sorted
 * (Redis lists them in its hash table's order, which no two servers share). */
static int merge_union(struct buf *const *frag, uint32_t nfrag, struct buf *out)
{
    struct union_elem *el = NULL;
    size_t nel = 0, cap = 0;
    int rc = -1;

    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        size_t len = buf_len(frag[f]), eol;
        int64_t n;
        if (len == 0 || (d[0] != '*' && d[0] != '~') || redis__rsp_line(d, len, &eol) != 1 ||
            redis__parse_num(d + 1, eol - 2, &n) < 0 || n < 0)
            goto out;
        size_t at = eol + 1;
        for (int64_t i = 0; i < n; i++) {
            int64_t end = redis__element_end(d, len, at);
            if (end < 0)
                goto out;
            if (nel == cap) {
                size_t nc = cap ? cap * 2 : 64;
                struct union_elem *g = realloc(el, nc * sizeof(*el));
                if (g == NULL) {
                    rc = -ENOMEM;
                    goto out;
                }
                el = g;
                cap = nc;
            }
            el[nel].p = d + at;
            el[nel].len = (size_t)end - at;
            nel++;
            at = (size_t)end;
        }
    }
    if (nel > 1)
        qsort(el, nel, sizeof(*el), union_cmp);
    size_t uniq = 0;
    for (size_t i = 0; i < nel; i++)
        if (i == 0 || union_cmp(&el[i - 1], &el[i]) != 0)
            uniq++;
    rc = buf_appendf(out, "*%zu\r\n", uniq) < 0 ? -ENOMEM : 0;
    for (size_t i = 0; rc == 0 && i < nel; i++)
        if ((i == 0 || union_cmp(&el[i - 1], &el[i]) != 0) && buf_append(out, el[i].p, el[i].len) < 0)
            rc = -ENOMEM;
out:
    free(el);
    return rc;
}

int redis__merge(uint16_t cmd, const char *reqbuf, const struct proto_key *keys,
                 uint32_t nkeys, const uint32_t *key_frag, struct buf *const *frag,
                 uint32_t nfrag, struct buf *out)
{
    size_t mark = buf_len(out);
    int rc;

    (void)reqbuf;
    (void)keys;
    if (cmd >= redis_ncommands || nfrag == 0)
        return -1;
    /* A fragment's reply is never empty; checking that first also keeps
     * buf_rptr() off a buffer that was never allocated (NULL + 0). */
    for (uint32_t f = 0; f < nfrag; f++)
        if (buf_len(frag[f]) == 0)
            return -1;
    if (merge_first_error(frag, nfrag, out, &rc) == 0) {
        switch (redis_commands[cmd].merge) {
        case REDIS_MERGE_ARRAY:
            rc = merge_array(1, nkeys, key_frag, frag, nfrag, out);
            break;
        case REDIS_MERGE_PAIRS:
            rc = merge_array(2, nkeys, key_frag, frag, nfrag, out);
            break;
        case REDIS_MERGE_MAX:
            rc = merge_ints(frag, nfrag, 1, out);
            break;
        case REDIS_MERGE_UNION:
            rc = merge_union(frag, nfrag, out);
            break;
        case REDIS_MERGE_OK:
            rc = merge_ok(frag, nfrag, out);
            break;
        case REDIS_MERGE_SUM:
            rc = merge_ints(frag, nfrag, 0, out);
            break;
        case REDIS_MERGE_KEYSPACE:
            /* the servers' replies are of the client's variant: verbatim for RESP3 */
            rc = merge_keyspace(frag, nfrag, buf_rptr(frag[0])[0] == '=', out);
            break;
        case REDIS_MERGE_CONCAT:
            rc = merge_concat(frag, nfrag, out);
            break;
        case REDIS_MERGE_AND:
            rc = merge_and(frag, nfrag, out);
            break;
        case REDIS_MERGE_FIRST: {
            int64_t end = redis__element_end(buf_rptr(frag[0]), buf_len(frag[0]), 0);
            rc = end < 0 ? -1 : buf_append(out, buf_rptr(frag[0]), (size_t)end);
            break;
        }
        default:
            rc = -1;
        }
    }
    if (rc != 0) {
        buf_truncate(out, mark);    /* nothing half-written reaches the client */
        return rc == -ENOMEM ? -ENOMEM : -1;
    }
    return 0;
}

/*
 * BROADCASTs whose reply needs the proxy (proto_ops.merge_env). INFO (not INFO keyspace
 * alone): the servers that answered give the Keyspace section as INFO keyspace merges it,
 * then redis_local.c builds the rest from their replies and the proxy's own numbers; a
 * server down or failing is left out there instead of failing the whole INFO. Every other
 * broadcast merges as redis__merge does.
 */
/* RANDOMKEY: a key from a server picked at random among those that have one (so a
 * key of a small server is likelier than in one Redis: uniform per server, not per
 * key); nil when none has any (RESP3's null to a RESP3 client, whose servers send it);
 * the first error when none has a key and one failed. */
static int merge_random(struct buf *const *frag, uint32_t nfrag, const struct proto_env *env,
                        struct buf *out)
{
    uint32_t have = 0, pick;
    int64_t err = -1;

    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        if (buf_len(frag[f]) >= 2 && d[0] == '$' && d[1] != '-')
            have++;
        else if (d[0] == '-' && err < 0)
            err = f;
        else if (d[0] != '$' && d[0] != '-' && d[0] != '_')
            return -1;
    }
    if (have == 0) {
        if (err < 0)
            return buf_append_str(out, env->variant ? "_\r\n" : "$-1\r\n");
        int64_t end = redis__element_end(buf_rptr(frag[err]), buf_len(frag[err]), 0);
        return end < 0 ? -1 : buf_append(out, buf_rptr(frag[err]), (size_t)end);
    }
    uint64_t x = env->now_us * 0x9e3779b97f4a7c15ull;     /* the clock, mixed */
    pick = (uint32_t)((x >> 32) % have);
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *d = buf_rptr(frag[f]);
        if (buf_len(frag[f]) >= 2 && d[0] == '$' && d[1] != '-' && pick-- == 0) {
            int64_t end = redis__element_end(d, buf_len(frag[f]), 0);
            return end < 0 ? -1 : buf_append(out, d, (size_t)end);
        }
    }
    return -1;
}

/* SCAN: server env->target's reply with its cursor re-encoded as a pool cursor (the
 * next server's start when it is done, 0 after the last). */
static int merge_scan(struct buf *const *frag, uint32_t nfrag, const struct proto_env *env,
                      struct buf *out)
{
    const char *d = buf_rptr(frag[0]);
    size_t len = buf_len(frag[0]), eol, pos;
    int64_t n, cl;
    uint64_t sc = 0, next;

    if (nfrag != 1)
        return -1;
    if (d[0] == '-') {
        int64_t end = redis__element_end(d, len, 0);
        return end < 0 ? -1 : buf_append(out, d, (size_t)end);
    }
    if (d[0] != '*' || redis__rsp_line(d, len, &eol) != 1 || redis__parse_num(d + 1, eol - 2, &n) < 0 ||
        n != 2)
        return -1;
    pos = eol + 1;
    if (pos >= len || d[pos] != '$' || redis__rsp_line(d + pos, len - pos, &eol) != 1 ||
        redis__parse_num(d + pos + 1, eol - 2, &cl) < 0 || cl <= 0 || cl > 20 ||
        pos + eol + 1 + (size_t)cl + 2 > len)
        return -1;
    const char *num = d + pos + eol + 1;
    for (int64_t i = 0; i < cl; i++) {
        if (num[i] < '0' || num[i] > '9' || sc > (UINT64_MAX - 9) / 10)
            return -1;
        sc = sc * 10 + (uint64_t)(num[i] - '0');
    }
    uint64_t tag = (env->epoch & 0xff) << SCAN_TAG_SHIFT;
    if (sc >= (1ull << (64 - SCAN_CUR_SHIFT)))
        return -1;                      /* a table of 2^40 buckets: not a Redis server's */
    if (sc != 0)
        next = sc << SCAN_CUR_SHIFT | tag | env->target;
    else if (env->next_target < env->nservers)
        next = tag | env->next_target;
    else
        next = 0;
    char nb[24];
    int nl = snprintf(nb, sizeof(nb), "%" PRIu64, next);
    pos += eol + 1 + (size_t)cl + 2;    /* the array of keys, as the server sent it */
    if (buf_append_str(out, "*2\r\n") < 0 || redis__append_bulk(out, nb, (size_t)nl) < 0 ||
        buf_append(out, d + pos, len - pos) < 0)
        return -ENOMEM;
    return 0;
}

int redis__merge_env(uint16_t cmd, const char *reqbuf, struct buf *const *frag,
                     uint32_t nfrag, const struct proto_env *env, struct buf *out)
{
    if (cmd < redis_ncommands && (redis_commands[cmd].merge == REDIS_MERGE_RANDOM ||
                                  redis_commands[cmd].merge == REDIS_MERGE_SCAN)) {
        size_t mark = buf_len(out);
        for (uint32_t f = 0; f < nfrag; f++)
            if (buf_len(frag[f]) == 0)
                return -1;
        int rc = redis_commands[cmd].merge == REDIS_MERGE_RANDOM
                     ? merge_random(frag, nfrag, env, out)
                     : merge_scan(frag, nfrag, env, out);
        if (rc != 0)
            buf_truncate(out, mark);
        return rc;
    }
    if (cmd >= redis_ncommands || redis_commands[cmd].merge != REDIS_MERGE_INFO)
        return redis__merge(cmd, reqbuf, NULL, 0, NULL, frag, nfrag, out);
    const struct redis_command *ks = redis_command_find("INFO|KEYSPACE");
    struct buf *answered[nfrag ? nfrag : 1];
    struct buf keyspace;
    uint32_t n = 0;
    int rc = 0;

    for (uint32_t f = 0; f < nfrag; f++)
        if (buf_len(frag[f]) > 0 && (buf_rptr(frag[f])[0] == '$' || buf_rptr(frag[f])[0] == '='))
            answered[n++] = frag[f];
    buf_init(&keyspace);
    if (n > 0 && ks != NULL)
        rc = redis__merge((uint16_t)(ks - redis_commands), reqbuf, NULL, 0, NULL, answered, n,
                         &keyspace);
    if (rc != -ENOMEM)
        rc = redis__info_merge(reqbuf, frag, nfrag, rc == 0 && n > 0 ? &keyspace : NULL, env, out);
    buf_free(&keyspace);
    return rc;
}
