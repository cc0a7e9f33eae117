/* Weighted rendezvous (highest random weight) hashing: each key ranks every server by a score. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "dist/dist_helpers.h"
#include "hash/hash.h"

/*
 * Score of server i for key hash h (Schindelhauer & Schomaker's weighted
 * form, as in Resch's "logarithmic method"):
 *
 *     u     = uniform in (0,1) from hash_mix64(h ^ seed_i)
 *     score = -w_i / ln(u)
 *
 * The owner is the server with the highest score; P(i wins) = w_i / W exactly.
 * seed_i hashes the server's identity, never its position, so the score of a
 * server for a key depends on nothing but that pair: removing a server moves
 * exactly that server's keys and adding one takes keys only for itself.
 *
 * When every weight is equal, -1/ln(u) is increasing in u, so comparing the
 * 64-bit mix itself gives the same order without a log (the fast path). In
 * the weighted path the score, a positive double, is compared through its bit
 * pattern, which orders positive doubles exactly like their values. Ties
 * (probability ~2^-53) are broken by the seed, then the index.
 */

struct rv_server {
    uint64_t seed;
    double   weight;
};

struct rendezvous {
    uint32_t          n;
    int               equal;     /* all weights equal: compare raw mixes */
    struct rv_server *s;
};

static inline uint64_t rv_key(const struct rendezvous *r, uint64_t hash, uint32_t i)
{
    uint64_t m = hash_mix64(hash ^ r->s[i].seed);
    if (r->equal)
        return m;
    double u = ((double)(m >> 11) + 0.5) * 0x1p-53;    /* (0,1), never 0 or 1 */
    double score = r->s[i].weight / -log(u);
    uint64_t bits;
    memcpy(&bits, &score, sizeof(bits));
    return bits;
}

/* 1 if (ka, a) ranks strictly before (kb, b). A total order. */
static inline int rv_before(const struct rendezvous *r, uint64_t ka, uint32_t a, uint64_t kb,
                            uint32_t b)
{
    if (ka != kb)
        return ka > kb;
    if (r->s[a].seed != r->s[b].seed)
        return r->s[a].seed > r->s[b].seed;
    return a < b;
}

static int rendezvous_build(struct dist *d, const struct dist_params *p,
                            const struct dist_server *servers, uint32_t n, char *err,
                            size_t errlen)
{
    if (n == 0) {
        dist__set_err(err, errlen, "rendezvous: a pool needs at least one server");
        return -1;
    }
    struct rendezvous *r = calloc(1, sizeof(*r));
    if (r == NULL)
        goto oom;
    r->s = calloc(n, sizeof(*r->s));
    if (r->s == NULL)
        goto oom_r;
    r->n = n;
    r->equal = dist__weights_equal(servers, n);
    for (uint32_t i = 0; i < n; i++) {
        if (servers[i].weight == 0) {
            dist__set_err(err, errlen, "rendezvous: server '%.*s' has weight 0",
                          (int)servers[i].ident_len, servers[i].ident);
            goto fail;
        }
        r->s[i].seed = dist__ident_seed(&servers[i], DIST_SEED_IDENT);
        r->s[i].weight = (double)servers[i].weight;
    }
    d->ops = &dist_rendezvous_ops;
    d->type = DIST_RENDEZVOUS;
    d->nservers = n;
    d->impl = r;
    return 0;

fail:
    free(r->s);
    free(r);
    return -1;
oom_r:
    free(r);
oom:
    dist__set_err(err, errlen, "rendezvous: out of memory for %u servers", n);
    return -1;
}

static uint32_t rendezvous_lookup(const struct dist *d, uint64_t hash)
{
    const struct rendezvous *r = d->impl;
    uint32_t best = 0;
    uint64_t bkey = rv_key(r, hash, 0);
    if (r->equal) {
        /* The hot path, kept free of the weighted branch and of the log. */
        for (uint32_t i = 1; i < r->n; i++) {
            uint64_t m = hash_mix64(hash ^ r->s[i].seed);
            if (m > bkey || (m == bkey && rv_before(r, m, i, bkey, best))) {
                best = i;
                bkey = m;
            }
        }
        return best;
    }
    for (uint32_t i = 1; i < r->n; i++) {
        uint64_t k = rv_key(r, hash, i);
        if (rv_before(r, k, i, bkey, best)) {
            best = i;
            bkey = k;
        }
    }
    return best;
}

#define RV_CHUNK 64

/*
 * Servers by descending score. Partial selection: one pass over the servers
 * keeps the best RV_CHUNK in a small sorted array (O(n) scores, O(n log k)
 * expected moves); a list longer than RV_CHUNK takes further passes, each
 * restricted to servers ranked after the last one already written.
 */
static uint32_t rendezvous_preference(const struct dist *d, uint64_t hash, uint32_t *out,
                                      uint32_t want)
{
    const struct rendezvous *r = d->impl;
    if (want > r->n)
        want = r->n;

    uint64_t keys[RV_CHUNK];
    uint32_t idx[RV_CHUNK];
    uint32_t k = 0;
    int bounded = 0;
    uint64_t bound_key = 0;
    uint32_t bound_idx = 0;

    while (k < want) {
        uint32_t cap = want - k < RV_CHUNK ? want - k : RV_CHUNK;
        uint32_t m = 0;
        for (uint32_t i = 0; i < r->n; i++) {
            uint64_t key = rv_key(r, hash, i);
            if (bounded && !rv_before(r, bound_key, bound_idx, key, i))
                continue;                       /* already written */
            if (m == cap && !rv_before(r, key, i, keys[m - 1], idx[m - 1]))
                continue;                       /* not in the top cap */
            uint32_t j = m < cap ? m++ : m - 1; /* slot to fill, then bubble up */
            while (j > 0 && rv_before(r, key, i, keys[j - 1], idx[j - 1])) {
                keys[j] = keys[j - 1];
                idx[j] = idx[j - 1];
                j--;
            }
            keys[j] = key;
            idx[j] = i;
        }
        if (m == 0)
            break;
        memcpy(out + k, idx, m * sizeof(*idx));
        k += m;
        bounded = 1;
        bound_key = keys[m - 1];
        bound_idx = idx[m - 1];
    }
    return k;
}

static void rendezvous_destroy(struct dist *d)
{
    struct rendezvous *r = d->impl;
    if (r != NULL) {
        free(r->s);
        free(r);
    }
    d->impl = NULL;
}

const struct dist_ops dist_rendezvous_ops = {
    .name = "rendezvous",
    .build = rendezvous_build,
    .lookup = rendezvous_lookup,
    .preference = rendezvous_preference,
    .destroy = rendezvous_destroy,
};
