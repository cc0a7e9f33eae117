/* The memcache protocol: STUB. */
#include "config.h"

#include "proto/memcache.h"
