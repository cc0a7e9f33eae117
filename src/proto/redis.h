/* The redis protocol: command ids shared by its parser and tests. */
#ifndef RL_PROTO_REDIS_H
#define RL_PROTO_REDIS_H

#include "proto/proto.h"

#endif
