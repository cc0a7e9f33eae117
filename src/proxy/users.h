/* Users on the request path: who a client is, what it may run and touch, its namespace, its rate (docs/security.md). */
#ifndef RL_PROXY_USERS_H
#define RL_PROXY_USERS_H

#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"

struct client;
struct conf_user;
struct msg;
struct proto_req;
struct user_state;

/* What a client's requests pass (struct client_user.fl); 0: none (a pool without users,
 * or the default user), and then the request path tests only this byte. */
#define USERS_F_CHECK   0x01u   /* requests: categories, keys, rate (a user is bound) */
#define USERS_F_NS      0x02u   /* names rewritten both ways (the user has a namespace) */
#define USERS_F_REPLY   0x04u   /* replies: counted (bytes), maybe filtered or rewritten */
#define USERS_F_NOBODY  0x08u   /* a memcached client no user matches: every request refused */

/*
 * A client's user, inside struct client. Per request accessor for the other parts of
 * issue 28 (the request log, SLOWLOG): `users_of(c)` gives the configured user or NULL
 * (default); the name is also in c->pc.user (empty: default), which other threads read
 * under pc.guard.
 */
struct client_user {
    uint8_t                  fl;        /* USERS_F_* */
    uint8_t                  logged;    /* Redis: authenticated (as a user or default) */
    const struct conf_user  *u;         /* NULL: default, or nobody yet */
    struct user_state       *st;        /* its shared numbers (registry), NULL with u */
    const char              *nobody;    /* USERS_F_NOBODY: the refusal */
    struct buf               scratch;   /* a namespaced request as rewritten */
    char                     err[224];  /* a refusal's text (the request's err points here) */
};

const struct conf_user *users_of(const struct client *c);

/* A new client of its pool (after client_accept has set it up): bound by address
 * (memcached), or made to authenticate (Redis); its login callback installed. 0, or -1
 * when it must be closed (max_connections: logged, counted). */
int  users_accept(struct client *c);

/* A reload changed the snapshot: bind the client's user again by name; a user removed,
 * or no longer given the client's pool, ends the client. */
void users_refresh(struct client *c);

/* The client closes: its connection leaves its user's count. */
void users_close(struct client *c);

/* A parsed request of a client with USERS_F_CHECK or USERS_F_NOBODY (and not NS, whose
 * requests go through users_namespace): refused (req becomes the protocol's error, its
 * lengths kept) or admitted (counted, rate taken). */
void users_check(struct client *c, struct proto_req *req, const char *buf);

/* A whole request of a USERS_F_NS client: rewritten with the namespace into the client's
 * scratch buffer and parsed again into req, then checked (users_check); returns the
 * buffer req's offsets point into (buf itself when nothing was rewritten). */
const char *users_namespace(struct client *c, struct proto_req *req, const char *buf);

/* A server key k[0..n) in a message to c that is not a reply (CLIENT TRACKING's
 * invalidations): 1 when c's user may see it, with *name and *len its name as the client
 * knows it (the namespace taken off); 0 when it is outside the user's namespace or key
 * patterns. Without a user (default): 1, the name as it is. */
int  users_key_out(const struct client *c, const char *k, size_t n, const char **name,
                   size_t *len);

/* m's reply is about to be delivered to c (USERS_F_REPLY): counted, names filtered and
 * the namespace taken off. */
void users_reply(struct client *c, struct msg *m);

/* A pub/sub push for a USERS_F_NS client: p[0..n) without the namespace, into out (the
 * protocol's push_write follows). 1 written, 0 unchanged (write p as it is), -ENOMEM. */
int  users_push(struct client *c, const char *p, size_t n, struct buf *out);

#endif
