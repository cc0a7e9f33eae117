/* twemproxy's "md5" key hash: the first four digest bytes, little-endian (digest from libmd). */
#include "config.h"

#include <md5.h>

#include "hash/hash.h"

uint32_t hash_md5(const char *key, size_t len)
{
    MD5_CTX ctx;
    unsigned char d[MD5_DIGEST_LENGTH];

    MD5Init(&ctx);
    MD5Update(&ctx, (const unsigned char *)key, len);
    MD5Final(d, &ctx);
    return (uint32_t)d[0] | ((uint32_t)d[1] << 8) | ((uint32_t)d[2] << 16) |
           ((uint32_t)d[3] << 24);
}
