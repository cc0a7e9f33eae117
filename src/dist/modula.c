/* modula: twemproxy's hash % total-weight over the servers in identity order, each repeated weight times. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

#define MODULA_MAX_TABLE (1u << 24)   /* slots of the weighted table */

struct modula {
    uint32_t  size;       /* total weight */
    uint32_t *table;      /* server index per slot */
};

static int modula_build(struct dist *d, const struct dist_params *p,
                        const struct dist_server *servers, uint32_t n, char *err, size_t errlen)
{
    struct modula *m = NULL;
    uint32_t *order = NULL;
    uint64_t total = 0;

    for (uint32_t i = 0; i < n; i++)
        total += servers[i].weight;
    if (total > MODULA_MAX_TABLE) {
        snprintf(err, errlen, "modula: total weight %llu exceeds %u",
                 (unsigned long long)total, MODULA_MAX_TABLE);
        return -1;
    }
    m = calloc(1, sizeof(*m));
    order = malloc(n * sizeof(*order));
    if (m == NULL || order == NULL)
        goto nomem;
    m->table = malloc(total * sizeof(*m->table));
    if (m->table == NULL)
        goto nomem;

    /* insertion sort by identity (stable; pools are small and this is not hot) */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        while (j > 0 && dist__ident_cmp(&servers[order[j - 1]], &servers[i]) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t w = 0; w < servers[order[r]].weight; w++)
            m->table[m->size++] = order[r];
    free(order);
    d->impl = m;
    /* the header too, so that ops->build alone yields a usable dist */
    d->ops = &dist_modula_ops;
    d->type = DIST_MODULA;
    d->nservers = n;
    return 0;

nomem:
    if (m != NULL)
        free(m->table);
    free(m);
    free(order);
    snprintf(err, errlen, "modula: %s", strerror(ENOMEM));
    return -1;
}

static uint32_t modula_lookup(const struct dist *d, uint64_t hash)
{
    const struct modula *m = d->impl;

    return m->table[hash % m->size];
}

/* The key's slot, then the following slots (wrapping), skipping repeats. */
static uint32_t modula_preference(const struct dist *d, uint64_t hash, uint32_t *out,
                                  uint32_t want)
{
    const struct modula *m = d->impl;
    uint32_t count = 0, at = (uint32_t)(hash % m->size);

    if (want > d->nservers)
        want = d->nservers;
    for (uint32_t step = 0; step < m->size && count < want; step++) {
        uint32_t s = m->table[at], seen = 0;
        for (uint32_t j = 0; j < count && !seen; j++)
            seen = out[j] == s;
        if (!seen)
            out[count++] = s;
        if (++at == m->size)
            at = 0;
    }
    return count;   /* every server has weight >= 1, so all are in the table */
}

static void modula_destroy(struct dist *d)
{
    struct modula *m = d->impl;

    if (m != NULL)
        free(m->table);
    free(m);
    d->impl = NULL;
}

static void modula_shares(const struct dist *d, double *shares)
{
    const struct modula *m = d->impl;

    for (uint32_t i = 0; i < m->size; i++)
        shares[m->table[i]] += 1.0;
    for (uint32_t s = 0; s < d->nservers; s++)
        shares[s] /= m->size;
}

const struct dist_ops dist_modula_ops = {
    .name = "modula",
    .build = modula_build,
    .lookup = modula_lookup,
    .preference = modula_preference,
    .destroy = modula_destroy,
    .shares = modula_shares,
};
