/* Listening sockets: opened by the main thread when a snapshot is built, handed to the workers. */
#ifndef RL_PROXY_LISTEN_H
#define RL_PROXY_LISTEN_H

#include <stddef.h>
#include <stdint.h>

struct conf_addr;

/*
 * Open one listening socket per worker for a pool's listen address:
 * TCP sockets with SO_REUSEPORT, so every worker accepts on its own and the
 * kernel spreads connections; a unix socket is one socket, dup'd per
 * worker. fds[0..nworkers) receive them (non-blocking, close-on-exec).
 * 0, or -errno with a reason in err and nothing left open.
 */
int  listen_open(const struct conf_addr *a, int backlog, uint32_t nworkers, int *fds,
                 char *err, size_t errlen);

/* Duplicate another snapshot's sockets for the same address: 0 or -errno. */
int  listen_dup(const int *from, uint32_t nworkers, int *fds);

void listen_close(int *fds, uint32_t nworkers);

#endif
