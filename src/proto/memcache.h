/* The memcache protocol: command ids shared by its parser and tests. */
#ifndef RL_PROTO_MEMCACHE_H
#define RL_PROTO_MEMCACHE_H

#include "proto/proto.h"

/* Decode a base64 key (meta b flag) for hashing; decoded length or -1. */
int memcache_key_decode(const char *b64, size_t len, char *out, size_t cap);

#endif
