/* Bob Jenkins' one-at-a-time hash, with twemproxy's sign-extended bytes. */
#include "config.h"

#include "hash/hash.h"

uint32_t hash_one_at_a_time(const char *key, size_t len)
{
    uint32_t h = 0;

    for (size_t i = 0; i < len; i++) {
        h += (uint32_t)(int32_t)(signed char)key[i];   /* x86-64 `char` widening */
        h += h << 10;
        h ^= h >> 6;
    }
    h += h << 3;
    h ^= h >> 11;
    h += h << 15;
    return h;
}
