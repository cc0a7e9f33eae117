/* The redis protocol: STUB. */
#include "config.h"

#include "proto/redis.h"
