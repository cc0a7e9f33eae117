/* random: twemproxy's "random" distribution, any server for any request, uniform and weight-blind. */
#include "config.h"

#include <stdint.h>

#include "dist/dist.h"
#include "hash/hash.h"

static int random_build(struct dist *d, const struct dist_params *p,
                        const struct dist_server *servers, uint32_t n, char *err, size_t errlen)
{
    d->impl = NULL;      /* nothing to precompute: only the server count matters */
    /* the header too, so that ops->build alone yields a usable dist */
    d->ops = &dist_random_ops;
    d->type = DIST_RANDOM;
    d->nservers = n;
    return 0;
}

/*
 * A fresh choice on every call, whatever the hash (twemproxy calls random()).
 * The generator is a per-thread counter mixed with the key hash: no lock and
 * no shared cache line between workers; its first value differs per thread
 * because the counter's address does.
 */
static uint32_t random_lookup(const struct dist *d, uint64_t hash)
{
    static _Thread_local uint64_t counter;
    uint64_t r = hash_mix64(hash ^ (++counter * 0x9e3779b97f4a7c15ULL) ^
                            (uint64_t)(uintptr_t)&counter);

    return (uint32_t)(((r >> 32) * d->nservers) >> 32);
}

static uint32_t random_preference(const struct dist *d, uint64_t hash, uint32_t *out,
                                  uint32_t want)
{
    return dist__preference_by_rehash(d, hash, out, want);
}

const struct dist_ops dist_random_ops = {
    .name = "random",
    .build = random_build,
    .lookup = random_lookup,
    .preference = random_preference,
    .destroy = dist__destroy_stateless,
};
