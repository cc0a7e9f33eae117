/* ringleader-ring balance: each server's share of the keys, its spread, and its plot. */
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

/* ---------------------------------------------------------------- balance */

struct tool_balance {
    double *exact;         /* ring_shares */
    double *sampled;       /* share of the sample keys */
    double  exact_maxmean, exact_cv, sampled_maxmean, sampled_cv;
    uint64_t wsum;
};

/* Fill b for ring r: keyspace shares (estimated over `samples` hashes where not exact) and
 * the shares of the sample keys; 0, or -ENOMEM. Free b->exact and b->sampled. */
static int tool_balance_compute(const struct ring *r, uint32_t samples,
                                const struct tool_samples *ks, struct tool_balance *b)
{
    char key[32];

    memset(b, 0, sizeof(*b));
    b->exact = calloc(r->nservers, sizeof(double));
    b->sampled = calloc(r->nservers, sizeof(double));
    if (b->exact == NULL || b->sampled == NULL) {
        free(b->exact);
        free(b->sampled);
        return -ENOMEM;
    }
    ring_shares(r, b->exact, samples);
    for (uint32_t i = 0; i < ks->count; i++) {
        size_t len;
        const char *k = tool__sample(ks, i, key, &len);
        b->sampled[ring_owner(r, k, len)] += 1.0;
    }
    for (uint32_t s = 0; s < r->nservers; s++) {
        b->sampled[s] /= ks->count;
        b->wsum += r->servers[s].weight;
    }
    tool__spread(b->exact, r, &b->exact_maxmean, &b->exact_cv);
    tool__spread(b->sampled, r, &b->sampled_maxmean, &b->sampled_cv);
    return 0;
}

static void tool_balance_text(const struct tool_conf *tc, uint32_t pi, uint32_t samples,
                              const struct tool_samples *ks, const struct tool_balance *b)
{
    const struct ring *r = tc->rings[pi];
    int w = (int)strlen("stddev/mean"), ww = 6;

    for (uint32_t s = 0; s < r->nservers; s++) {
        char digits[16];
        if ((int)strlen(tool__label(r, s)) > w)
            w = (int)strlen(tool__label(r, s));
        int n = snprintf(digits, sizeof(digits), "%u", r->servers[s].weight);
        if (n > ww)
            ww = n;             /* nutcracker's weights reach 2147483647 */
    }
    tool__print_ring_head(tc, pi, r->epoch);
    printf("samples   %s\n\n", ks->what);
    printf("%-*s  %*s  %9s  %9s  %9s\n", w, "server", ww, "weight", "fair",
           tool__shares_exact(r) ? "keyspace" : "keyspace~", "keys");
    for (uint32_t s = 0; s < r->nservers; s++)
        printf("%-*s  %*u  %8.3f%%  %8.3f%%  %8.3f%%\n", w, tool__label(r, s), ww,
               r->servers[s].weight, 100.0 * r->servers[s].weight / (double)b->wsum,
               100.0 * b->exact[s], 100.0 * b->sampled[s]);
    printf("%-*s  %*s  %9s  %9.4f  %9.4f\n", w, "max/mean", ww, "", "", b->exact_maxmean,
           b->sampled_maxmean);
    printf("%-*s  %*s  %9s  %9.4f  %9.4f\n", w, "stddev/mean", ww, "", "", b->exact_cv,
           b->sampled_cv);
    if (!tool__shares_exact(r))
        printf("(keyspace~: %s has no points to measure; estimated over %u hashes)\n",
               dist_name(r->dist.type), samples);
}

/* One pool's balance as plot_balance_svg draws it (servers[] is allocated: free it). */
static int tool_balance_plot(const struct tool_conf *tc, uint32_t pi, const struct tool_samples *ks,
                             const struct tool_balance *b, struct plot_balance *pb)
{
    const struct ring *r = tc->rings[pi];
    struct plot_server *ps = calloc(r->nservers, sizeof(*ps));

    if (ps == NULL)
        return -ENOMEM;
    for (uint32_t s = 0; s < r->nservers; s++)
        ps[s] = (struct plot_server){ tool__label(r, s), r->servers[s].weight,
                                      r->servers[s].weight / (double)b->wsum, b->exact[s],
                                      b->sampled[s] };
    *pb = (struct plot_balance){ .pool = tc->conf->pools[pi].name,
                                 .distribution = dist_name(r->dist.type),
                                 .hash = hash_name(r->hash),
                                 .keyspace_exact = tool__shares_exact(r),
                                 .samples_what = ks->what,
                                 .keyspace_max_over_mean = b->exact_maxmean,
                                 .sample_max_over_mean = b->sampled_maxmean,
                                 .servers = ps, .nservers = r->nservers };
    snprintf(pb->checksum, sizeof(pb->checksum), "%016llx", (unsigned long long)r->checksum);
    return 0;
}

static int tool_draw_balance(FILE *f, const void *plots, uint32_t n)
{
    return plot_balance_svg(f, plots, n);
}

static json_t *tool_balance_json(const struct tool_conf *tc, uint32_t pi,
                                 const struct tool_samples *ks, const struct tool_balance *b)
{
    const struct ring *r = tc->rings[pi];
    json_t *servers = json_array();

    for (uint32_t s = 0; servers != NULL && s < r->nservers; s++) {
        json_t *o = json_pack("{s:s, s:s, s:i, s:f, s:f, s:f}",
                              "server", tool__label(r, s), "ident", r->servers[s].ident,
                              "weight", (int)r->servers[s].weight,
                              "fair_share", r->servers[s].weight / (double)b->wsum,
                              "keyspace_share", b->exact[s], "sample_share", b->sampled[s]);
        if (o == NULL || json_array_append_new(servers, o) != 0) {
            json_decref(servers);
            return NULL;
        }
    }
    return json_pack("{s:s, s:I, s:o, s:s, s:s, s:b, s:I, s:s, s:o,"
                     " s:{s:f, s:f}, s:{s:f, s:f}}",
                     "pool", tc->conf->pools[pi].name, "epoch", (json_int_t)r->epoch,
                     "checksum", tool__json_checksum(r->checksum),
                     "distribution", dist_name(r->dist.type), "hash", hash_name(r->hash),
                     "keyspace_exact", tool__shares_exact(r), "samples", (json_int_t)ks->count,
                     "sample_keys", ks->what,
                     "servers", servers,
                     "keyspace", "max_over_mean", b->exact_maxmean,
                     "stddev_over_mean", b->exact_cv,
                     "sample", "max_over_mean", b->sampled_maxmean,
                     "stddev_over_mean", b->sampled_cv);
}

/* --balance: the chosen pool, or every pool when -p is absent. */
int tool__balance(const struct tool_opts *o, const struct tool_conf *tc)
{
    uint32_t first = 0, last = tc->conf->npools, nplots = 0;
    json_t *pools = o->json ? json_array() : NULL;
    struct plot_balance *plots = NULL;
    struct tool_samples ks;
    int rc = TOOL_EXIT_OK;

    if (o->pool != NULL) {
        int pi = tool__pick_pool(tc, o->pool);
        if (pi < 0) {
            json_decref(pools);
            return TOOL_EXIT_USAGE;
        }
        first = (uint32_t)pi;
        last = first + 1;
    }
    if (tool__samples_load(o, &ks) != TOOL_EXIT_OK) {
        json_decref(pools);
        return TOOL_EXIT_ERROR;
    }
    if (o->svg_path != NULL && (plots = calloc(last - first, sizeof(*plots))) == NULL)
        rc = tool__nomem();
    for (uint32_t pi = first; rc == TOOL_EXIT_OK && pi < last; pi++) {
        struct tool_balance b;
        if (tc->conf->pools[pi].redis_cluster) {    /* every pool (no -p): a cluster's left out */
            tool__no_ring(tc->path, &tc->conf->pools[pi]);
            continue;
        }
        if (tool_balance_compute(tc->rings[pi], o->samples, &ks, &b) != 0) {
            rc = tool__nomem();
            break;
        }
        if (plots != NULL && tool_balance_plot(tc, pi, &ks, &b, &plots[nplots++]) != 0)
            rc = tool__nomem();
        if (o->json) {
            json_t *one = tool_balance_json(tc, pi, &ks, &b);
            if (pools != NULL && (one == NULL || json_array_append_new(pools, one) != 0)) {
                json_decref(pools);
                pools = NULL;
            }
        } else {
            if (pi != first)
                putchar('\n');
            tool_balance_text(tc, pi, o->samples, &ks, &b);
        }
        /* the plot keeps its own copy of the numbers */
        free(b.exact);
        free(b.sampled);
    }
    if (rc == TOOL_EXIT_OK && plots != NULL)
        rc = tool__svg_write(o->svg_path, tool_draw_balance, plots, nplots);
    for (uint32_t i = 0; plots != NULL && i < nplots; i++)
        free((void *)plots[i].servers);
    free(plots);
    tool__samples_free(&ks);
    if (o->json) {
        int jr = tool__json_emit(pools ? json_pack("{s:o}", "pools", pools) : NULL);
        return rc != TOOL_EXIT_OK ? rc : jr;
    }
    json_decref(pools);
    return rc;
}
