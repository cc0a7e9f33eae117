/* Bob Jenkins' lookup3 hashlittle(), byte-at-a-time form; twemproxy's "jenkins" is initval 13. */
#include "config.h"

#include "hash/hash.h"
#include "hash/jenkins.h"

#define ROT32(x, k) (((x) << (k)) | ((x) >> (32 - (k))))

#define LOOKUP3_MIX(a, b, c) do {                  \
        a -= c; a ^= ROT32(c, 4);  c += b;         \
        b -= a; b ^= ROT32(a, 6);  a += c;         \
        c -= b; c ^= ROT32(b, 8);  b += a;         \
        a -= c; a ^= ROT32(c, 16); c += b;         \
        b -= a; b ^= ROT32(a, 19); a += c;         \
        c -= b; c ^= ROT32(b, 4);  b += a;         \
    } while (0)

#define LOOKUP3_FINAL(a, b, c) do {                \
        c ^= b; c -= ROT32(b, 14);                 \
        a ^= c; a -= ROT32(c, 11);                 \
        b ^= a; b -= ROT32(a, 25);                 \
        c ^= b; c -= ROT32(b, 16);                 \
        a ^= c; a -= ROT32(c, 4);                  \
        b ^= a; b -= ROT32(a, 14);                 \
        c ^= b; c -= ROT32(b, 24);                 \
    } while (0)

static inline uint32_t le32_partial(const unsigned char *p, size_t n)
{
    uint32_t v = 0;

    for (size_t i = 0; i < n; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

/*
 * hashlittle() reads the key as little-endian 32-bit words, with the final
 * partial block zero-padded.  Reading bytes gives the same value on every
 * alignment, which is what the word-reading variants are specified to do.
 */
uint32_t hash__lookup3(const void *key, size_t len, uint32_t initval)
{
    const unsigned char *k = key;
    uint32_t a, b, c;

    a = b = c = 0xdeadbeefu + (uint32_t)len + initval;
    while (len > 12) {
        a += le32_partial(k, 4);
        b += le32_partial(k + 4, 4);
        c += le32_partial(k + 8, 4);
        LOOKUP3_MIX(a, b, c);
        len -= 12;
        k += 12;
    }
    if (len == 0)
        return c;     /* lookup3 skips the final mix for an empty tail */
    a += le32_partial(k, len < 4 ? len : 4);
    if (len > 4)
        b += le32_partial(k + 4, len < 8 ? len - 4 : 4);
    if (len > 8)
        c += le32_partial(k + 8, len - 8);
    LOOKUP3_FINAL(a, b, c);
    return c;
}

uint32_t hash_jenkins(const char *key, size_t len)
{
    return hash__lookup3(key, len, 13);
}
