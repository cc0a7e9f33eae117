/* Jump consistent hash (Lamport & Veach, 2014): servers are buckets 0..n-1 in config order. */
#include "config.h"

#include <stdlib.h>

#include "dist/dist.h"
#include "dist/dist_helpers.h"
#include "hash/hash.h"

/*
 * Jump needs no state but the bucket count: growing from n to n+1 buckets
 * moves exactly the expected 1/(n+1) of the keys, all of them into the new
 * bucket, and nothing else. The price is that buckets are positions: only
 * adding or removing the LAST server of the list is cheap; removing one from
 * the middle renumbers every later server (see docs/distributions.md).
 *
 * Weights: the algorithm has none. A pool whose weights differ is refused at
 * build time with a message naming the servers, rather than approximated
 * (repeating a server over several buckets would break the "append only"
 * rule the moment a weight changes). Equal weights of any value are fine.
 *
 * The key hash is used as the jump key unchanged, so placement matches the
 * paper's reference function for the same 64-bit key.
 */

static inline uint32_t jump_bucket(uint64_t key, uint32_t nbuckets)
{
    int64_t b = -1, j = 0;
    while (j < (int64_t)nbuckets) {
        b = j;
        key = key * UINT64_C(2862933555777941757) + 1;
        /* (key >> 33) + 1 fits in int64: a signed conversion is cheaper. */
        j = (int64_t)((double)(b + 1) *
                      ((double)(INT64_C(1) << 31) / (double)(int64_t)((key >> 33) + 1)));
    }
    return (uint32_t)b;
}

static int jump_build(struct dist *d, const struct dist_params *p,
                      const struct dist_server *servers, uint32_t n, char *err, size_t errlen)
{
    if (n == 0) {
        dist__set_err(err, errlen, "jump: a pool needs at least one server");
        return -1;
    }
    if (n > INT32_MAX) {
        dist__set_err(err, errlen, "jump: too many servers (%u)", n);
        return -1;
    }
    for (uint32_t i = 1; i < n; i++) {
        if (servers[i].weight != servers[0].weight) {
            dist__set_err(err, errlen,
                          "jump: weights are not supported (server '%.*s' has weight %u, "
                          "'%.*s' has %u); give every server the same weight or use "
                          "distribution rendezvous or maglev",
                          (int)servers[0].ident_len, servers[0].ident, servers[0].weight,
                          (int)servers[i].ident_len, servers[i].ident, servers[i].weight);
            return -1;
        }
    }
    d->ops = &dist_jump_ops;
    d->type = DIST_JUMP;
    d->nservers = n;
    d->impl = NULL;    /* nothing to keep: n is the whole state */
    return 0;
}

static uint32_t jump_lookup(const struct dist *d, uint64_t hash)
{
    return jump_bucket(hash, d->nservers);
}

/*
 * Rank r > 0: jump a rehashed key over the n - r servers not yet chosen, and
 * map that position to the server it names among them (the j-th index not in
 * out[0..r), found as the least fixed point of x = j + |{c in out : c <= x}|).
 * So when out[0] is down its keys spread evenly over all the others, and each
 * rank is itself a jump hash over the remaining servers. O(want^2).
 */
static uint32_t jump_preference(const struct dist *d, uint64_t hash, uint32_t *out,
                                uint32_t want)
{
    uint32_t n = d->nservers;
    if (want > n)
        want = n;
    if (want == 0)
        return 0;
    out[0] = jump_bucket(hash, n);
    for (uint32_t r = 1; r < want; r++) {
        uint32_t j = jump_bucket(hash_mix64(hash + (uint64_t)r * DIST_GOLDEN), n - r);
        uint32_t x = j, prev;
        do {
            prev = x;
            uint32_t below = 0;
            for (uint32_t i = 0; i < r; i++)
                below += out[i] <= prev;
            x = j + below;
        } while (x != prev);
        out[r] = x;
    }
    return want;
}

const struct dist_ops dist_jump_ops = {
    .name = "jump",
    .build = jump_build,
    .lookup = jump_lookup,
    .preference = jump_preference,
    .destroy = dist__destroy_stateless,
};
