/* CLIENT LIST / INFO / KILL over the proxy's clients of a pool, on every worker. */
#ifndef RL_PROXY_CLIENT_LIST_H
#define RL_PROXY_CLIENT_LIST_H

#include "proto/proto.h"

struct client;

/*
 * Visit every client of asker's pool over every worker (asker's thread; it holds no
 * worker lock): visit(arg, row) for each, one worker's clients at a time under that
 * worker's locks. With `kill` the ones visit matched are marked and their workers woken
 * to close them (asker itself after its reply). Returns how many matched, or -ENOMEM.
 */
int client_list_walk(struct client *asker, int kill, proto_client_fn visit, void *arg);

#endif
