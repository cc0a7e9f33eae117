/* Key hash functions: twemproxy's twelve (bit-exact, quirks included) plus xxh3, xxh64 and murmur3. */
#ifndef RL_HASH_H
#define RL_HASH_H

#include <stddef.h>
#include <stdint.h>

enum hash_type {
    HASH_ONE_AT_A_TIME,
    HASH_MD5,
    HASH_CRC16,
    HASH_CRC32,
    HASH_CRC32A,
    HASH_FNV1_64,
    HASH_FNV1A_64,
    HASH_FNV1_32,
    HASH_FNV1A_32,
    HASH_HSIEH,
    HASH_MURMUR,
    HASH_JENKINS,
    HASH_XXH3,
    HASH_XXH64,
    HASH_MURMUR3,
    HASH_COUNT
};

/*
 * Hash `len` bytes of `key`.  The twemproxy hashes return a 32-bit value
 * (zero-extended); xxh3, xxh64 and murmur3 (x64_128, low 64 bits) return 64
 * bits.  `seed` is used only by the seedable hashes (xxh3, xxh64, murmur3);
 * the twemproxy hashes ignore it so that placement stays nutcracker-exact.
 */
uint64_t hash_compute(enum hash_type type, uint64_t seed, const char *key, size_t len);

/* Name as written in YAML ("fnv1a_64"); NULL for an out-of-range type. */
const char *hash_name(enum hash_type type);

/* Parse a YAML hash name. Returns 0 and sets *out, or -1 if unknown. */
int hash_from_name(const char *name, size_t len, enum hash_type *out);

/* 1 if the hash takes a seed (hash_seed is accepted only for these). */
int hash_is_seedable(enum hash_type type);

/* The individual functions, exposed for tests and for distributions. */
uint32_t hash_one_at_a_time(const char *key, size_t len);
uint32_t hash_md5(const char *key, size_t len);
uint32_t hash_crc16(const char *key, size_t len);
uint32_t hash_crc32(const char *key, size_t len);
uint32_t hash_crc32a(const char *key, size_t len);
uint32_t hash_fnv1_64(const char *key, size_t len);
uint32_t hash_fnv1a_64(const char *key, size_t len);
uint32_t hash_fnv1_32(const char *key, size_t len);
uint32_t hash_fnv1a_32(const char *key, size_t len);
uint32_t hash_hsieh(const char *key, size_t len);
uint32_t hash_murmur(const char *key, size_t len);
uint32_t hash_jenkins(const char *key, size_t len);
uint64_t hash_xxh3(uint64_t seed, const char *key, size_t len);
uint64_t hash_xxh64(uint64_t seed, const char *key, size_t len);
uint64_t hash_murmur3(uint64_t seed, const char *key, size_t len);

/* A 64-bit finaliser (splitmix64) used to derive independent hashes. */
static inline uint64_t hash_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

#endif
