/* What the distributions share: a stateless destroy, the identity order, preference lists by rehashing. */
#include "config.h"

#include <string.h>

#include "dist/dist.h"
#include "hash/hash.h"

void dist__destroy_stateless(struct dist *d)
{
    d->impl = NULL;
}

/* qsort-style order: shorter identity first, then bytewise (memcmp). */
int dist__ident_cmp(const struct dist_server *a, const struct dist_server *b)
{
    if (a->ident_len != b->ident_len)
        return a->ident_len < b->ident_len ? -1 : 1;
    return memcmp(a->ident, b->ident, a->ident_len);
}

static int pref_seen(const uint32_t *out, uint32_t count, uint32_t s)
{
    for (uint32_t i = 0; i < count; i++)
        if (out[i] == s)
            return 1;
    return 0;
}

/*
 * out[0] is lookup(hash); then lookup(h1), lookup(h2), ... with h(i+1) =
 * mix(h(i)), keeping servers not seen yet, for a bounded number of probes;
 * whatever is still missing is filled in index order after out[0].  Cost is
 * O(want^2) comparisons, fine for want <= RING_MAX_PREF.
 */
uint32_t dist__preference_by_rehash(const struct dist *d, uint64_t hash, uint32_t *out,
                                    uint32_t want)
{
    uint32_t n = d->nservers, count = 0;
    uint64_t h = hash;

    if (want > n)
        want = n;
    if (want == 0)
        return 0;
    out[count++] = d->ops->lookup(d, hash);
    for (uint32_t probe = 0; count < want && probe < 4 * want + 16; probe++) {
        h = hash_mix64(h);
        uint32_t s = d->ops->lookup(d, h);
        if (!pref_seen(out, count, s))
            out[count++] = s;
    }
    for (uint32_t i = 1; count < want && i < n; i++) {
        uint32_t s = (out[0] + i) % n;
        if (!pref_seen(out, count, s))
            out[count++] = s;
    }
    return count;
}
