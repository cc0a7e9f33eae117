/* ringleader-ring diff: the keys a configuration change moves, server to server, with its plot. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "placement/cluster_map.h"
#include "conf/conf.h"
#include "proto/proto.h"
#include "control/cluster_fetch.h"
#include "placement/ring.h"
#include "ring_plot.h"
#include "ring_tool.h"
#include "lib/buf.h"
#include "lib/util.h"

static int tool_draw_diff(FILE *f, const void *plots, uint32_t n)
{
    return plot_diff_svg(f, plots, n);
}

/* ---------------------------------------------------------------- diff */

struct tool_flow {
    uint32_t from, to;     /* old ring index, new ring index */
    uint32_t count;
};

static int flow_cmp(const void *pa, const void *pb)
{
    const struct tool_flow *a = pa, *b = pb;
    if (a->count != b->count)
        return a->count < b->count ? 1 : -1;
    if (a->from != b->from)
        return a->from < b->from ? -1 : 1;
    return a->to < b->to ? -1 : a->to > b->to;
}

/* One pool's change, old and/or new side absent for a pool only in one file. */
struct tool_pool_diff {
    const char *name;
    const struct conf_pool *op, *np;
    const struct ring *or, *nr;
    uint64_t old_epoch, new_epoch;
    double moved, floor;
    int moved_exact;
    uint32_t samples, sample_moved;
    struct tool_flow *flows;    /* non-zero moved cells of the from->to matrix, largest first */
    uint32_t nflows;
    uint64_t *stayed;           /* [old servers]: sample keys that kept their owner */
    int live;                   /* --live ran: */
    struct tool_live lv;
};


static int tool_same_hashing(const struct ring *a, const struct ring *b)
{
    return a->hash == b->hash && a->hash_seed == b->hash_seed && a->has_tag == b->has_tag &&
           (!a->has_tag || memcmp(a->tag, b->tag, 2) == 0);
}

/*
 * Place the sample keys on both rings and count, for each moved key, the
 * (old owner, new owner) cell, and for each old server the keys it kept;
 * owners are matched by identity as the daemon matches servers. Fills
 * d->flows and d->stayed; 0 or -ENOMEM.
 */
static int tool_diff_flows(struct tool_pool_diff *d, const struct tool_samples *ks)
{
    const struct ring *a = d->or, *b = d->nr;
    uint32_t *map = malloc(b->nservers * sizeof(*map));
    uint32_t *cells = calloc((size_t)a->nservers * b->nservers, sizeof(*cells));
    char key[32];
    int rc = -ENOMEM;

    d->stayed = calloc(a->nservers, sizeof(*d->stayed));
    if (map == NULL || cells == NULL || d->stayed == NULL)
        goto out;
    for (uint32_t j = 0; j < b->nservers; j++) {
        map[j] = UINT32_MAX;
        for (uint32_t i = 0; i < a->nservers && map[j] == UINT32_MAX; i++)
            if (strcmp(a->servers[i].ident, b->servers[j].ident) == 0)
                map[j] = i;
    }
    d->samples = ks->count;
    for (uint32_t k = 0; k < ks->count; k++) {
        size_t len;
        const char *kk = tool__sample(ks, k, key, &len);
        uint32_t from = ring_owner(a, kk, len), to = ring_owner(b, kk, len);
        if (map[to] != from) {
            cells[(size_t)from * b->nservers + to]++;
            d->sample_moved++;
        } else {
            d->stayed[from]++;
        }
    }
    uint32_t n = 0;
    for (size_t c = 0; c < (size_t)a->nservers * b->nservers; c++)
        n += cells[c] != 0;
    d->flows = calloc(n ? n : 1, sizeof(*d->flows));
    if (d->flows == NULL)
        goto out;
    for (size_t c = 0; c < (size_t)a->nservers * b->nservers; c++)
        if (cells[c] != 0)
            d->flows[d->nflows++] = (struct tool_flow){ (uint32_t)(c / b->nservers),
                                                        (uint32_t)(c % b->nservers), cells[c] };
    qsort(d->flows, d->nflows, sizeof(*d->flows), flow_cmp);
    rc = 0;
out:
    free(map);
    free(cells);
    return rc;
}

/* Compare one pool across the files; 0 or -ENOMEM. Epochs are what a daemon
 * started on the old file shows, then after reloading the new one. */
static int tool_diff_pool(struct tool_pool_diff *d, uint32_t samples,
                          const struct tool_samples *ks)
{
    if (d->or == NULL) {                      /* new pool */
        d->new_epoch = 1;
        d->moved = d->floor = 1.0;
        d->moved_exact = 1;
        return 0;
    }
    d->old_epoch = d->or->epoch;
    if (d->nr == NULL) {                      /* removed pool */
        d->moved = d->floor = 1.0;
        d->moved_exact = 1;
        return 0;
    }
    if (d->or->checksum == d->nr->checksum) {
        d->new_epoch = d->old_epoch;
        d->moved_exact = 1;
        return 0;
    }
    d->new_epoch = d->old_epoch + 1;
    d->moved = ring_moved_fraction(d->or, d->nr, samples, &d->floor);
    if (d->moved < 0)
        return -ENOMEM;
    d->moved_exact = tool_same_hashing(d->or, d->nr) && d->or->dist.type == DIST_KETAMA &&
                     d->nr->dist.type == DIST_KETAMA;
    return tool_diff_flows(d, ks);
}

/* " label" for each of p's servers not in `other`, or " -"; then a newline. */
static void tool_print_servers_not_in(const struct conf_pool *p, const struct conf_pool *other)
{
    uint32_t n = 0;

    for (uint32_t s = 0; p != NULL && s < p->nservers; s++) {
        if (conf_pool_has_server(other, &p->servers[s], s))
            continue;
        printf(" %s", p->servers[s].label);
        n++;
    }
    printf("%s\n", n ? "" : " -");
}

static void tool_diff_text(const struct tool_pool_diff *d)
{
    printf("pool      %s%s\n", d->name,
           d->or == NULL ? " (new)" : d->nr == NULL ? " (removed)" : "");
    if (d->or != NULL && d->nr != NULL)
        printf("epoch     %" PRIu64 " -> %" PRIu64 "\n", d->old_epoch, d->new_epoch);
    else if (d->or != NULL)
        printf("epoch     %" PRIu64 " -> -\n", d->old_epoch);
    else
        printf("epoch     - -> %" PRIu64 "\n", d->new_epoch);
    printf("checksum  ");
    if (d->or != NULL)
        printf("%016llx", (unsigned long long)d->or->checksum);
    else
        printf("-");
    printf(" -> ");
    if (d->nr != NULL)
        printf("%016llx\n", (unsigned long long)d->nr->checksum);
    else
        printf("-\n");
    printf("servers   %u -> %u\n", d->op ? d->op->nservers : 0, d->np ? d->np->nservers : 0);
    printf("added    ");
    tool_print_servers_not_in(d->np, d->op);
    printf("removed  ");
    tool_print_servers_not_in(d->op, d->np);
    printf("moved     %.4f%% of the keyspace (%s), floor %.4f%%", 100.0 * d->moved,
           d->moved_exact ? "exact" : "estimated", 100.0 * d->floor);
    if (d->floor > 0 && d->or != NULL && d->nr != NULL)
        printf(" (%.2fx the floor)", d->moved / d->floor);
    putchar('\n');
    if (d->live)
        printf("live      %" PRIu64 " of %" PRIu64 " keys on %u server(s) would move, %" PRIu64
               " bytes (DUMP, as MIGRATE sends them)\n", d->lv.moving, d->lv.scanned,
               d->lv.servers, d->lv.bytes);
    if (d->samples == 0)
        return;
    printf("flows     %.4f%% of %u sample keys moved; from -> to, largest first:\n",
           100.0 * d->sample_moved / d->samples, d->samples);
    int w = 4;
    for (uint32_t f = 0; f < d->nflows && f < TOOL_TOP_FLOWS; f++)
        if ((int)strlen(d->or->servers[d->flows[f].from].label) > w)
            w = (int)strlen(d->or->servers[d->flows[f].from].label);
    uint32_t rest = d->sample_moved;
    for (uint32_t f = 0; f < d->nflows && f < TOOL_TOP_FLOWS; f++) {
        const struct tool_flow *fl = &d->flows[f];
        printf("  %-*s -> %-20s %8.4f%%\n", w, d->or->servers[fl->from].label,
               d->nr->servers[fl->to].label, 100.0 * fl->count / d->samples);
        rest -= fl->count;
    }
    if (d->nflows > TOOL_TOP_FLOWS)
        printf("  (%u more flows, %.4f%% together)\n", d->nflows - TOOL_TOP_FLOWS,
               100.0 * rest / d->samples);
}

/* A JSON array of the labels of `p`'s servers that are not in `other`. */
static json_t *tool_json_servers_not_in(const struct conf_pool *p, const struct conf_pool *other)
{
    json_t *a = json_array();
    for (uint32_t s = 0; a != NULL && p != NULL && s < p->nservers; s++)
        if (!conf_pool_has_server(other, &p->servers[s], s) &&
            json_array_append_new(a, json_string(p->servers[s].label)) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *tool_diff_json(const struct tool_pool_diff *d)
{
    json_t *flows = json_array();
    for (uint32_t f = 0; flows != NULL && f < d->nflows && f < TOOL_TOP_FLOWS; f++) {
        const struct tool_flow *fl = &d->flows[f];
        json_t *o = json_pack("{s:s, s:s, s:f}", "from", d->or->servers[fl->from].label,
                              "to", d->nr->servers[fl->to].label,
                              "fraction", (double)fl->count / d->samples);
        if (o == NULL || json_array_append_new(flows, o) != 0) {
            json_decref(flows);
            flows = NULL;
        }
    }
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:f, s:b, s:i, s:f, s:i, s:o}",
                     "pool", d->name,
                     "old_epoch", d->or ? json_integer((json_int_t)d->old_epoch) : json_null(),
                     "new_epoch", d->nr ? json_integer((json_int_t)d->new_epoch) : json_null(),
                     "old_checksum", d->or ? tool__json_checksum(d->or->checksum) : json_null(),
                     "new_checksum", d->nr ? tool__json_checksum(d->nr->checksum) : json_null(),
                     "added", tool_json_servers_not_in(d->np, d->op),
                     "removed", tool_json_servers_not_in(d->op, d->np),
                     "moved", d->moved, "floor", d->floor, "moved_exact", d->moved_exact,
                     "samples", (int)d->samples,
                     "sample_moved", d->samples ? (double)d->sample_moved / d->samples : 0.0,
                     "flows_total", (int)d->nflows, "flows", flows);
}

static const struct conf_pool *tool_find_pool(const struct conf *c, const char *name,
                                              enum conf_proto proto, uint32_t *index)
{
    for (uint32_t i = 0; i < c->npools; i++)
        if (strcmp(c->pools[i].name, name) == 0 && c->pools[i].protocol == proto) {
            *index = i;
            return &c->pools[i];
        }
    return NULL;
}

/* One pool's change as plot_diff_svg draws it; the arrays are allocated (tool_diff_plot_free). */
static int tool_diff_plot(const struct tool_pool_diff *d, const struct tool_samples *ks,
                          struct plot_diff *pd)
{
    uint32_t no = d->or ? d->or->nservers : 0, nn = d->nr ? d->nr->nservers : 0;
    const char **ol = calloc(no + 1, sizeof(*ol)), **nl = calloc(nn + 1, sizeof(*nl));
    int64_t *kept = calloc(no + 1, sizeof(*kept));
    uint64_t *stayed = calloc(no + 1, sizeof(*stayed));
    struct plot_flow *fl = calloc(d->nflows + 1, sizeof(*fl));

    *pd = (struct plot_diff){ .pool = d->name, .old_epoch = d->old_epoch,
                              .new_epoch = d->new_epoch, .moved = d->moved, .floor = d->floor,
                              .moved_exact = d->moved_exact, .old_labels = ol, .nold = no,
                              .new_labels = nl, .nnew = nn, .kept = kept, .stayed = stayed,
                              .flows = fl, .nflows = d->nflows, .samples = d->samples,
                              .samples_what = ks->what };
    if (ol == NULL || nl == NULL || kept == NULL || stayed == NULL || fl == NULL)
        return -ENOMEM;
    snprintf(pd->old_checksum, sizeof(pd->old_checksum), "%016llx",
             d->or ? (unsigned long long)d->or->checksum : 0ull);
    snprintf(pd->new_checksum, sizeof(pd->new_checksum), "%016llx",
             d->nr ? (unsigned long long)d->nr->checksum : 0ull);
    for (uint32_t j = 0; j < nn; j++)
        nl[j] = d->nr->servers[j].label;
    for (uint32_t i = 0; i < no; i++) {
        ol[i] = d->or->servers[i].label;
        kept[i] = -1;
        for (uint32_t j = 0; j < nn && kept[i] < 0; j++)
            if (strcmp(d->or->servers[i].ident, d->nr->servers[j].ident) == 0)
                kept[i] = j;
        stayed[i] = d->stayed ? d->stayed[i] : 0;
    }
    for (uint32_t k = 0; k < d->nflows; k++)
        fl[k] = (struct plot_flow){ d->flows[k].from, d->flows[k].to, d->flows[k].count };
    return 0;
}

static void tool_diff_plot_free(struct plot_diff *pd)
{
    free((void *)pd->old_labels);
    free((void *)pd->new_labels);
    free((void *)pd->kept);
    free((void *)pd->stayed);
    free((void *)pd->flows);
}

/* Report one pool pair (text or into `out`, and its plot into `plot` when not NULL); TOOL_EXIT_* */
static int tool_diff_one(const struct tool_opts *o, const struct tool_samples *ks,
                         struct tool_pool_diff *d, json_t *out, int *first,
                         struct plot_diff *plot)
{
    int rc = TOOL_EXIT_OK;

    if (tool_diff_pool(d, o->samples, ks) != 0) {
        free(d->flows);
        free(d->stayed);
        return tool__nomem();
    }
    if (o->live && d->op != NULL && d->np != NULL && d->nr != NULL &&
        d->op->protocol == CONF_PROTO_REDIS) {
        d->live = 1;
        if (tool__live(d->op, d->np, d->nr, &d->lv) < 0) {
            fprintf(stderr, "ringleader-ring: --live: pool '%s': %s\n", d->name, d->lv.err);
            free(d->flows);
            free(d->stayed);
            return TOOL_EXIT_ERROR;
        }
    }
    if (o->json) {
        json_t *one = tool_diff_json(d);
        if (one != NULL && d->live)
            json_object_set_new(one, "live", json_pack("{s:I, s:I, s:I, s:i}",
                                "keys", (json_int_t)d->lv.scanned,
                                "moving_keys", (json_int_t)d->lv.moving,
                                "moving_bytes", (json_int_t)d->lv.bytes,
                                "servers", (int)d->lv.servers));
        if (one == NULL || json_array_append_new(out, one) != 0)
            rc = tool__json_emit(NULL);
    } else {
        if (!*first)
            putchar('\n');
        tool_diff_text(d);
    }
    if (rc == TOOL_EXIT_OK && plot != NULL && tool_diff_plot(d, ks, plot) != 0)
        rc = tool__nomem();
    *first = 0;
    free(d->flows);
    free(d->stayed);
    return rc;
}

/*
 * --diff: every pool present in either file (matched by name and protocol,
 * as the daemon's reload matches them), or only -p's.
 */
int tool__diff(const struct tool_opts *o, const struct tool_conf *oc,
               const struct tool_conf *nc)
{
    json_t *pools = o->json ? json_array() : NULL;
    int first = 1, rc = TOOL_EXIT_OK, found = 0;
    struct tool_samples ks;
    struct plot_diff *plots = NULL;
    uint32_t nplots = 0;

    if (o->json && pools == NULL)
        return tool__json_emit(NULL);
    if (tool__samples_load(o, &ks) != TOOL_EXIT_OK) {
        json_decref(pools);
        return TOOL_EXIT_ERROR;
    }
    if (o->svg_path != NULL &&
        (plots = calloc(oc->conf->npools + nc->conf->npools + 1, sizeof(*plots))) == NULL)
        rc = tool__nomem();
    for (uint32_t i = 0; rc == TOOL_EXIT_OK && i < oc->conf->npools; i++) {
        const struct conf_pool *op = &oc->conf->pools[i];
        uint32_t j = 0;
        if (o->pool != NULL && strcmp(o->pool, op->name) != 0)
            continue;
        const struct conf_pool *np = tool_find_pool(nc->conf, op->name, op->protocol, &j);
        found = 1;
        if (op->redis_cluster || (np != NULL && np->redis_cluster)) {
            tool__no_ring(op->redis_cluster ? oc->path : nc->path, op->redis_cluster ? op : np);
            if (o->pool != NULL)
                rc = TOOL_EXIT_USAGE;
            continue;
        }
        struct tool_pool_diff d = { .name = op->name, .op = op, .np = np,
                                    .or = oc->rings[i], .nr = np ? nc->rings[j] : NULL };
        rc = tool_diff_one(o, &ks, &d, pools, &first, plots ? &plots[nplots++] : NULL);
    }
    for (uint32_t j = 0; rc == TOOL_EXIT_OK && j < nc->conf->npools; j++) {
        const struct conf_pool *np = &nc->conf->pools[j];
        uint32_t i = 0;
        if (o->pool != NULL && strcmp(o->pool, np->name) != 0)
            continue;
        found = 1;
        if (tool_find_pool(oc->conf, np->name, np->protocol, &i) != NULL)
            continue;
        if (np->redis_cluster) {
            tool__no_ring(nc->path, np);
            if (o->pool != NULL)
                rc = TOOL_EXIT_USAGE;
            continue;
        }
        struct tool_pool_diff d = { .name = np->name, .np = np, .nr = nc->rings[j] };
        rc = tool_diff_one(o, &ks, &d, pools, &first, plots ? &plots[nplots++] : NULL);
    }
    if (rc == TOOL_EXIT_OK && !found) {
        fprintf(stderr, "ringleader-ring: no pool '%s' in %s or %s; pools: ", o->pool,
                oc->path, nc->path);
        tool__list_pools(stderr, oc->conf);
        fputs("; ", stderr);
        tool__list_pools(stderr, nc->conf);
        fputc('\n', stderr);
        rc = TOOL_EXIT_USAGE;
    }
    if (rc == TOOL_EXIT_OK && plots != NULL)
        rc = tool__svg_write(o->svg_path, tool_draw_diff, plots, nplots);
    for (uint32_t k = 0; plots != NULL && k < nplots; k++)
        tool_diff_plot_free(&plots[k]);
    free(plots);
    tool__samples_free(&ks);
    if (o->json && rc == TOOL_EXIT_OK)
        return tool__json_emit(json_pack("{s:s, s:s, s:o}", "old", oc->path, "new", nc->path,
                                        "pools", pools));
    json_decref(pools);
    return rc;
}
