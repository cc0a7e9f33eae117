/* Maglev hashing (Eisenbud et al., NSDI 2016): a prime-sized lookup table filled by per-server permutations. */
#include "config.h"

#include <stdlib.h>

#include "lib/buf.h"
#include "dist/dist.h"
#include "dist/dist_helpers.h"
#include "dist/dist_schemes.h"
#include "hash/hash.h"

/*
 * Each server i walks its own permutation of the M slots,
 *
 *     slot_j(i) = (offset_i + j * skip_i) mod M,
 *     offset_i  = h1(ident_i) mod M,  skip_i = h2(ident_i) mod (M - 1) + 1,
 *
 * with h1, h2 two differently seeded XXH3 hashes of the identity (never the
 * position, so the table does not depend on config order). M prime makes every
 * skip coprime with M, so each walk visits every slot. Servers take turns
 * claiming the next free slot of their walk until the table is full; with
 * equal weights every server ends with floor(M/n) or ceil(M/n) slots.
 *
 * Weights: each round every server earns w_i credits, and takes one turn per
 * w_max credits it holds (keeping the remainder). The heaviest servers take
 * one turn per round, a server of half the weight one turn every other round,
 * and so on, so slot counts (and key shares) are w_i/W up to a turn or two.
 * Equal weights reduce to the paper's one turn per server per round.
 *
 * Lookup is table[hash % M]: one division and one load.
 */

#define MAGLEV_DEFAULT_M 65537u
#define MAGLEV_MAX_M     (1u << 24)

struct maglev {
    uint32_t  m;
    uint32_t  n;
    uint32_t *table;
};

static int maglev_is_prime(uint32_t m)
{
    if (m < 2)
        return 0;
    if (m % 2 == 0)
        return m == 2;
    for (uint32_t f = 3; (uint64_t)f * f <= m; f += 2)
        if (m % f == 0)
            return 0;
    return 1;
}

static int maglev_build(struct dist *d, const struct dist_params *p,
                        const struct dist_server *servers, uint32_t n, char *err,
                        size_t errlen)
{
    uint32_t m = p != NULL && p->maglev_table_size != 0 ? p->maglev_table_size
                                                         : MAGLEV_DEFAULT_M;
    struct maglev *mg = NULL;
    uint64_t *walk = NULL;     /* per server: next position, skip, credit */
    int rc = -1;

    if (n == 0) {
        dist__set_err(err, errlen, "maglev: a pool needs at least one server");
        return -1;
    }
    if (m > MAGLEV_MAX_M || !maglev_is_prime(m)) {
        dist__set_err(err, errlen, "maglev_table_size %u must be a prime no larger than %u "
                      "(65537 is the default)", m, MAGLEV_MAX_M);
        return -1;
    }
    if (m < n) {
        dist__set_err(err, errlen, "maglev_table_size %u is smaller than the %u servers "
                      "(use a prime of at least 100 x servers)", m, n);
        return -1;
    }
    uint32_t wmax = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (servers[i].weight == 0) {
            dist__set_err(err, errlen, "maglev: server '%.*s' has weight 0",
                          (int)servers[i].ident_len, servers[i].ident);
            return -1;
        }
        if (servers[i].weight > wmax)
            wmax = servers[i].weight;
    }

    mg = calloc(1, sizeof(*mg));
    if (mg == NULL)
        goto oom;
    mg->table = malloc((size_t)m * sizeof(*mg->table));
    if (mg->table == NULL)
        goto oom;
    walk = malloc((size_t)n * 3 * sizeof(*walk));
    if (walk == NULL)
        goto oom;
    mg->m = m;
    mg->n = n;

    for (uint32_t i = 0; i < m; i++)
        mg->table[i] = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        walk[3 * i] = dist__ident_seed(&servers[i], DIST_SEED_OFFSET) % m;
        walk[3 * i + 1] = dist__ident_seed(&servers[i], DIST_SEED_SKIP) % (m - 1) + 1;
        walk[3 * i + 2] = 0;
    }

    /* Every pass gives the heaviest servers a turn, so this ends after at
     * most m passes; each turn claims exactly one free slot. */
    uint32_t filled = 0;
    while (filled < m) {
        for (uint32_t i = 0; i < n && filled < m; i++) {
            walk[3 * i + 2] += servers[i].weight;
            while (walk[3 * i + 2] >= wmax && filled < m) {
                walk[3 * i + 2] -= wmax;
                uint64_t c = walk[3 * i], skip = walk[3 * i + 1];
                while (mg->table[c] != UINT32_MAX) {
                    c += skip;
                    if (c >= m)
                        c -= m;
                }
                mg->table[c] = i;
                filled++;
                c += skip;
                walk[3 * i] = c >= m ? c - m : c;
            }
        }
    }
    free(walk);
    d->ops = &dist_maglev_ops;
    d->type = DIST_MAGLEV;
    d->nservers = n;
    d->impl = mg;
    return 0;

oom:
    dist__set_err(err, errlen, "maglev: out of memory for a table of %u slots", m);
    free(walk);
    if (mg != NULL)
        free(mg->table);
    free(mg);
    return rc;
}

static uint32_t maglev_lookup(const struct dist *d, uint64_t hash)
{
    const struct maglev *mg = d->impl;
    return mg->table[hash % mg->m];
}

/* Walk the table forward from the key's slot, keeping each server the first
 * time it appears; servers never met in a whole lap (possible only with tiny
 * weights or tables) follow in index order. */
static uint32_t maglev_preference(const struct dist *d, uint64_t hash, uint32_t *out,
                                  uint32_t want)
{
    const struct maglev *mg = d->impl;
    if (want > mg->n)
        want = mg->n;
    if (want == 0)
        return 0;
    uint32_t k = 0;
    uint32_t s = (uint32_t)(hash % mg->m);
    for (uint32_t step = 0; step < mg->m && k < want; step++) {
        uint32_t v = mg->table[s];
        if (!dist__pref_has(out, k, v))
            out[k++] = v;
        if (++s == mg->m)
            s = 0;
    }
    for (uint32_t v = 0; v < mg->n && k < want; v++)
        if (!dist__pref_has(out, k, v))
            out[k++] = v;
    return k;
}

static void maglev_destroy(struct dist *d)
{
    struct maglev *mg = d->impl;
    if (mg != NULL) {
        free(mg->table);
        free(mg);
    }
    d->impl = NULL;
}

void dist_maglev_slot_counts(const struct dist *d, uint32_t *counts)
{
    const struct maglev *mg = d->impl;
    for (uint32_t i = 0; i < mg->n; i++)
        counts[i] = 0;
    for (uint32_t s = 0; s < mg->m; s++)
        counts[mg->table[s]]++;
}

static int maglev_canonical(const struct dist_params *p, struct buf *out)
{
    return buf_appendf(out, "maglev_table_size %u\n",
                       p->maglev_table_size ? p->maglev_table_size : MAGLEV_DEFAULT_M);
}

const struct dist_ops dist_maglev_ops = {
    .name = "maglev",
    .build = maglev_build,
    .lookup = maglev_lookup,
    .preference = maglev_preference,
    .destroy = maglev_destroy,
    .canonical = maglev_canonical,
};
