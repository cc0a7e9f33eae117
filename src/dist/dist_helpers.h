/* Small helpers shared by the non-twemproxy distributions (errors, server seeds, range reduction). */
#ifndef RL_DIST_HELPERS_H
#define RL_DIST_HELPERS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include <xxhash.h>

#include "dist/dist.h"

/* Seeds for the independent hashes of a server identity; fixed forever,
 * since changing one moves keys between releases. */
#define DIST_SEED_IDENT   UINT64_C(0x72696e676c656164)   /* "ringlead" */
#define DIST_SEED_OFFSET  UINT64_C(0x6d61676c65762d6f)   /* maglev offset */
#define DIST_SEED_SKIP    UINT64_C(0x6d61676c65762d73)   /* maglev skip */
#define DIST_GOLDEN       UINT64_C(0x9e3779b97f4a7c15)

/* Write a reason for a person into err (which may be NULL). */
static inline void dist__set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void dist__set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* A server's seed: a hash of its identity only, so that it does not depend on
 * the server's position in the config. */
static inline uint64_t dist__ident_seed(const struct dist_server *s, uint64_t seed)
{
    return XXH3_64bits_withSeed(s->ident, s->ident_len, seed);
}

/* Map a uniform 32-bit value onto [0, range) without a division (Lemire's
 * multiply-shift); bias is below range / 2^32. */
static inline uint32_t dist__reduce32(uint32_t x, uint32_t range)
{
    return (uint32_t)(((uint64_t)x * range) >> 32);
}

/* 1 if every server has the same weight. */
static inline int dist__weights_equal(const struct dist_server *servers, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++)
        if (servers[i].weight != servers[0].weight)
            return 0;
    return 1;
}

/* 1 if v is already in out[0..k). Linear: preference lists are short. */
static inline int dist__pref_has(const uint32_t *out, uint32_t k, uint32_t v)
{
    for (uint32_t i = 0; i < k; i++)
        if (out[i] == v)
            return 1;
    return 0;
}

#endif
