/* Hash dispatch and names; the functions themselves live beside this file. */
#include "config.h"

#include <string.h>

#include "hash/hash.h"

static const char *const hash_names[HASH_COUNT] = {
    [HASH_ONE_AT_A_TIME] = "one_at_a_time",
    [HASH_MD5] = "md5",
    [HASH_CRC16] = "crc16",
    [HASH_CRC32] = "crc32",
    [HASH_CRC32A] = "crc32a",
    [HASH_FNV1_64] = "fnv1_64",
    [HASH_FNV1A_64] = "fnv1a_64",
    [HASH_FNV1_32] = "fnv1_32",
    [HASH_FNV1A_32] = "fnv1a_32",
    [HASH_HSIEH] = "hsieh",
    [HASH_MURMUR] = "murmur",
    [HASH_JENKINS] = "jenkins",
    [HASH_XXH3] = "xxh3",
    [HASH_XXH64] = "xxh64",
    [HASH_MURMUR3] = "murmur3",
};

const char *hash_name(enum hash_type type)
{
    return (unsigned)type < HASH_COUNT ? hash_names[type] : NULL;
}

int hash_from_name(const char *name, size_t len, enum hash_type *out)
{
    for (unsigned i = 0; i < HASH_COUNT; i++) {
        if (strlen(hash_names[i]) == len && memcmp(hash_names[i], name, len) == 0) {
            *out = (enum hash_type)i;
            return 0;
        }
    }
    return -1;
}

int hash_is_seedable(enum hash_type type)
{
    return type == HASH_XXH3 || type == HASH_XXH64 || type == HASH_MURMUR3;
}

/*
 * Dispatch on the configured hash.  A switch (not a table of pointers) so
 * the compiler can inline the common hashes into the caller's loop.
 */
uint64_t hash_compute(enum hash_type type, uint64_t seed, const char *key, size_t len)
{
    switch (type) {
    case HASH_ONE_AT_A_TIME: return hash_one_at_a_time(key, len);
    case HASH_MD5:           return hash_md5(key, len);
    case HASH_CRC16:         return hash_crc16(key, len);
    case HASH_CRC32:         return hash_crc32(key, len);
    case HASH_CRC32A:        return hash_crc32a(key, len);
    case HASH_FNV1_64:       return hash_fnv1_64(key, len);
    case HASH_FNV1A_64:      return hash_fnv1a_64(key, len);
    case HASH_FNV1_32:       return hash_fnv1_32(key, len);
    case HASH_FNV1A_32:      return hash_fnv1a_32(key, len);
    case HASH_HSIEH:         return hash_hsieh(key, len);
    case HASH_MURMUR:        return hash_murmur(key, len);
    case HASH_JENKINS:       return hash_jenkins(key, len);
    case HASH_XXH3:          return hash_xxh3(seed, key, len);
    case HASH_XXH64:         return hash_xxh64(seed, key, len);
    case HASH_MURMUR3:       return hash_murmur3(seed, key, len);
    case HASH_COUNT:         break;
    }
    return 0;   /* unreachable for a validated type */
}
