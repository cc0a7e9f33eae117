/* Warm-up after a reload: a miss at a key's new owner is asked of its previous owner, and a hit there is copied over. */
#ifndef RL_PROXY_WARMUP_H
#define RL_PROXY_WARMUP_H

#include <stddef.h>
#include <stdint.h>

struct msg;
struct server;
struct worker;

/*
 * m's reply is complete and m has left its server queue. For the first ask,
 * a miss is re-sent to the previous owner: returns 1 (m is queued again;
 * its completion comes later). For that second ask, the previous owner's
 * answer becomes the client's reply (a hit is also copied to the new
 * owner). Returns 0 when m completes now.
 */
int  warmup_reply(struct worker *w, struct msg *m);

#endif
