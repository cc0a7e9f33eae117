/* FNV-1 and FNV-1a hashes as twemproxy computes them (sign-extended bytes, 32-bit results). */
#include "config.h"

#include "hash/hash.h"

#define FNV64_OFFSET 0xcbf29ce484222325ULL
#define FNV64_PRIME  0x00000100000001b3ULL
#define FNV32_OFFSET 0x811c9dc5u
#define FNV32_PRIME  0x01000193u

/*
 * twemproxy reads the key through a plain `char *` and widens each byte with
 * a cast, so on x86-64 (signed char) a byte >= 0x80 enters the hash
 * sign-extended (0xe9 becomes 0xffffffe9).  Placement of non-ASCII keys
 * depends on it; byte_of() reproduces that widening on every platform.
 */
static inline uint32_t byte_of(const char *key, size_t i)
{
    return (uint32_t)(int32_t)(signed char)key[i];
}

/* 64-bit FNV-1, truncated to the low 32 bits. */
uint32_t hash_fnv1_64(const char *key, size_t len)
{
    uint64_t h = FNV64_OFFSET;

    for (size_t i = 0; i < len; i++) {
        h *= FNV64_PRIME;
        h ^= (uint64_t)(int64_t)(signed char)key[i];
    }
    return (uint32_t)h;
}

/*
 * twemproxy's "fnv1a_64" runs in 32 bits with the low halves of the 64-bit
 * offset (0x84222325) and prime (0x1b3).  The low 32 bits of a product only
 * depend on the low 32 bits of its factors, so this equals the low half of a
 * true 64-bit FNV-1a over the same (sign-extended) bytes.
 */
uint32_t hash_fnv1a_64(const char *key, size_t len)
{
    uint32_t h = (uint32_t)FNV64_OFFSET;

    for (size_t i = 0; i < len; i++) {
        h ^= byte_of(key, i);
        h *= (uint32_t)FNV64_PRIME;
    }
    return h;
}

uint32_t hash_fnv1_32(const char *key, size_t len)
{
    uint32_t h = FNV32_OFFSET;

    for (size_t i = 0; i < len; i++) {
        h *= FNV32_PRIME;
        h ^= byte_of(key, i);
    }
    return h;
}

uint32_t hash_fnv1a_32(const char *key, size_t len)
{
    uint32_t h = FNV32_OFFSET;

    for (size_t i = 0; i < len; i++) {
        h ^= byte_of(key, i);
        h *= FNV32_PRIME;
    }
    return h;
}
