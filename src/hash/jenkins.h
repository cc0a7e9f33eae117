/* Bob Jenkins' lookup3 hashlittle() with a caller-chosen initval (hash_jenkins uses 13). */
#ifndef RL_HASH_JENKINS_H
#define RL_HASH_JENKINS_H

#include <stddef.h>
#include <stdint.h>

/* lookup3's hashlittle(key, len, initval); exposed for the published test vectors. */
uint32_t hash__lookup3(const void *key, size_t len, uint32_t initval);

#endif
