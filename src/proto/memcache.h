/* The memcache protocol: command ids shared by its parser and tests. */
#ifndef RL_PROTO_MEMCACHE_H
#define RL_PROTO_MEMCACHE_H

#include "proto/proto.h"

#endif
