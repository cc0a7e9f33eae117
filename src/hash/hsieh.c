/* Paul Hsieh's SuperFastHash in twemproxy's variant (initial hash 0, signed third tail byte). */
#include "config.h"

#include "hash/hash.h"

static inline uint32_t le16(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
}

/*
 * Differences from the published SuperFastHash, all kept for nutcracker
 * compatibility: the hash starts at 0 instead of the length (so the empty
 * key gives 0); with three tail bytes the third is widened as a signed
 * `char`; with one tail byte it is unsigned.
 */
uint32_t hash_hsieh(const char *key, size_t len)
{
    const unsigned char *p = (const unsigned char *)key;
    uint32_t h = 0, tmp;
    size_t rem = len & 3;

    if (len == 0)
        return 0;
    for (size_t blocks = len >> 2; blocks > 0; blocks--, p += 4) {
        h += le16(p);
        tmp = (le16(p + 2) << 11) ^ h;
        h = (h << 16) ^ tmp;
        h += h >> 11;
    }
    switch (rem) {
    case 3:
        h += le16(p);
        h ^= h << 16;
        h ^= (uint32_t)(int32_t)(signed char)p[2] << 18;
        h += h >> 11;
        break;
    case 2:
        h += le16(p);
        h ^= h << 11;
        h += h >> 17;
        break;
    case 1:
        h += p[0];
        h ^= h << 10;
        h += h >> 1;
        break;
    default:
        break;
    }
    h ^= h << 3;
    h += h >> 5;
    h ^= h << 4;
    h += h >> 17;
    h ^= h << 25;
    h += h >> 6;
    return h;
}
