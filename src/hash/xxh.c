/* xxh3 and xxh64 through libxxhash (the default, seedable hashes). */
#include "config.h"

#include <xxhash.h>

#include "hash/hash.h"

uint64_t hash_xxh3(uint64_t seed, const char *key, size_t len)
{
    return XXH3_64bits_withSeed(key, len, seed);
}

uint64_t hash_xxh64(uint64_t seed, const char *key, size_t len)
{
    return XXH64(key, len, seed);
}
