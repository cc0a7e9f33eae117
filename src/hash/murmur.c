/* MurmurHash2 as twemproxy seeds it ("murmur"), and MurmurHash3 x64_128 ("murmur3", low 64 bits). */
#include "config.h"

#include <string.h>

#include "hash/hash.h"

static inline uint32_t load_le32(const unsigned char *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));      /* the build refuses big-endian hosts */
    return v;
}

static inline uint64_t load_le64(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

/* MurmurHash2 (32-bit) with twemproxy's seed 0xdeadbeef * len, unsigned bytes. */
uint32_t hash_murmur(const char *key, size_t len)
{
    const uint32_t m = 0x5bd1e995u;
    const unsigned char *p = (const unsigned char *)key;
    uint32_t seed = 0xdeadbeefu * (uint32_t)len;
    uint32_t h = seed ^ (uint32_t)len;
    size_t n = len;

    for (; n >= 4; n -= 4, p += 4) {
        uint32_t k = load_le32(p);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (n) {
    case 3: h ^= (uint32_t)p[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)p[1] << 8;  /* fall through */
    case 1: h ^= p[0]; h *= m; break;
    default: break;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/*
 * MurmurHash3_x64_128 as published by Austin Appleby, returning the first
 * (low) 64-bit half.  The reference takes a 32-bit seed and starts both
 * lanes at it; a 64-bit seed starts both lanes at the full value, which is
 * the reference for every seed below 2^32.
 */
uint64_t hash_murmur3(uint64_t seed, const char *key, size_t len)
{
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    const unsigned char *p = (const unsigned char *)key;
    uint64_t h1 = seed, h2 = seed, k1, k2;
    size_t nblocks = len / 16;

    for (size_t i = 0; i < nblocks; i++, p += 16) {
        k1 = load_le64(p);
        k2 = load_le64(p + 8);
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }

    k1 = k2 = 0;
    switch (len & 15) {
    case 15: k2 ^= (uint64_t)p[14] << 48; /* fall through */
    case 14: k2 ^= (uint64_t)p[13] << 40; /* fall through */
    case 13: k2 ^= (uint64_t)p[12] << 32; /* fall through */
    case 12: k2 ^= (uint64_t)p[11] << 24; /* fall through */
    case 11: k2 ^= (uint64_t)p[10] << 16; /* fall through */
    case 10: k2 ^= (uint64_t)p[9] << 8;   /* fall through */
    case 9:  k2 ^= (uint64_t)p[8];
             k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
             /* fall through */
    case 8:  k1 ^= (uint64_t)p[7] << 56;  /* fall through */
    case 7:  k1 ^= (uint64_t)p[6] << 48;  /* fall through */
    case 6:  k1 ^= (uint64_t)p[5] << 40;  /* fall through */
    case 5:  k1 ^= (uint64_t)p[4] << 32;  /* fall through */
    case 4:  k1 ^= (uint64_t)p[3] << 24;  /* fall through */
    case 3:  k1 ^= (uint64_t)p[2] << 16;  /* fall through */
    case 2:  k1 ^= (uint64_t)p[1] << 8;   /* fall through */
    case 1:  k1 ^= (uint64_t)p[0];
             k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
             break;
    default: break;
    }

    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 += h2;
    return h1;
}
