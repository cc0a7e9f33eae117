/* modula: twemproxy's hash % total-weight over the servers in identity order, each taking weight slots. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

/*
 * nutcracker builds a table of total-weight entries, each server repeated weight times
 * in identity order, and picks table[hash % total]. The same placement needs only the end
 * of each server's run: slot s belongs to the first rank whose run ends after s. That keeps
 * memory at O(servers) for any weight (nutcracker's own example gives 100000), where a table
 * of 2^31 entries could not be built; a lookup bisects the runs (a handful of steps).
 */
struct modula {
    uint64_t  total;      /* total weight: the number of slots */
    uint32_t  n;
    uint32_t *order;      /* rank -> server index (config order) */
    uint64_t *ends;       /* rank -> one past the last slot of that server */
};

static int modula_build(struct dist *d, const struct dist_params *p,
                        const struct dist_server *servers, uint32_t n, char *err, size_t errlen)
{
    struct modula *m = calloc(1, sizeof(*m));
    uint32_t *order = malloc((n ? n : 1) * sizeof(*order));
    uint64_t *ends = malloc((n ? n : 1) * sizeof(*ends));

    if (m == NULL || order == NULL || ends == NULL) {
        free(m);
        free(order);
        free(ends);
        snprintf(err, errlen, "modula: %s", strerror(ENOMEM));
        return -1;
    }
    /* insertion sort by identity (stable; pools are small and this is not hot) */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        while (j > 0 && dist__ident_cmp(&servers[order[j - 1]], &servers[i]) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (uint32_t r = 0; r < n; r++) {
        m->total += servers[order[r]].weight;
        ends[r] = m->total;
    }
    m->n = n;
    m->order = order;
    m->ends = ends;
    d->impl = m;
    /* the header too, so that ops->build alone yields a usable dist */
    d->ops = &dist_modula_ops;
    d->type = DIST_MODULA;
    d->nservers = n;
    return 0;
}

/* The rank owning slot s < total: the first whose run ends after s. */
static uint32_t modula_rank(const struct modula *m, uint64_t s)
{
    uint32_t lo = 0, hi = m->n - 1;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (m->ends[mid] > s)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static uint32_t modula_lookup(const struct dist *d, uint64_t hash)
{
    const struct modula *m = d->impl;

    return m->order[modula_rank(m, hash % m->total)];
}

/* The key's server, then the servers whose runs follow (wrapping): the distinct servers a
 * walk over nutcracker's table from the key's slot meets, in that order. */
static uint32_t modula_preference(const struct dist *d, uint64_t hash, uint32_t *out,
                                  uint32_t want)
{
    const struct modula *m = d->impl;
    uint32_t r = modula_rank(m, hash % m->total);

    if (want > m->n)
        want = m->n;
    for (uint32_t i = 0; i < want; i++)
        out[i] = m->order[(r + i) % m->n];
    return want;   /* every server has weight >= 1, so each has a run */
}

static void modula_destroy(struct dist *d)
{
    struct modula *m = d->impl;

    if (m != NULL) {
        free(m->order);
        free(m->ends);
    }
    free(m);
    d->impl = NULL;
}

/* Each server owns its run of slots: weight / total, exactly. */
static void modula_shares(const struct dist *d, double *shares)
{
    const struct modula *m = d->impl;

    for (uint32_t k = 0; k < m->n; k++)
        shares[m->order[k]] = (double)(m->ends[k] - (k ? m->ends[k - 1] : 0)) / (double)m->total;
}

const struct dist_ops dist_modula_ops = {
    .name = "modula",
    .build = modula_build,
    .lookup = modula_lookup,
    .preference = modula_preference,
    .destroy = modula_destroy,
    .shares = modula_shares,
};
