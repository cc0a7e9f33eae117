/* One connection to a sentinel or a master on a libuv loop: commands out, RESP replies in as trees (a question and its answer, or a subscription). */
#ifndef RL_CONTROL_SENTINEL_LINK_H
#define RL_CONTROL_SENTINEL_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "lib/buf.h"

#define SENTINEL_REPLIES_MAX 4      /* replies a link waits for before its callback */

/* One reply, as a tree: type '+', '-', ':', '$' (str NULL: nil), '*' (elem NULL: nil). */
struct sentinel_resp {
    char          type;
    long long     num;
    char         *str;
    size_t        len;
    struct sentinel_resp *elem;
    size_t        n;
};

struct sentinel_link;

/*
 * One TCP connection to a sentinel or a master: connect, write the commands given, read
 * `want` replies (the first `skip` must not be errors: AUTH) and call cb once with them;
 * everything within timeout_ms. A link with a push callback stays open after that (a
 * subscription): each further reply goes to push, and push(arg, NULL) says it ended.
 */
typedef void (*sentinel_link_cb)(void *arg, struct sentinel_resp *const *r, uint32_t n, const char *err);
typedef void (*sentinel_link_push_cb)(void *arg, const struct sentinel_resp *r);

/*
 * Start a link to host:port (a name is resolved on the loop's thread pool) that writes
 * cmds (taken: the link owns the buffer, cmds is left empty) and reads want replies
 * (at most SENTINEL_REPLIES_MAX), of which the first skip are AUTH's: cb gets the others.
 * cb is never called from inside this function. NULL when it could not start (no memory;
 * cb is not called).
 */
struct sentinel_link *sentinel_link_start(uv_loop_t *loop, const char *host, uint16_t port,
                                          struct buf *cmds, uint32_t skip, uint32_t want,
                                          uint32_t timeout_ms, sentinel_link_cb cb,
                                          sentinel_link_push_cb push, void *arg);

/* Stop a link (NULL: nothing): neither callback is called again; its memory goes when its
 * handles close. */
void sentinel_link_cancel(struct sentinel_link *l);

/* A command as a RESP array of bulk strings appended to b. 0 or -ENOMEM. */
int sentinel_resp_command(struct buf *b, int argc, const char *const *argv);

/* AUTH [user] password appended to b when there is a password: the replies it adds (0 or
 * 1), or -1 without memory. */
int sentinel_resp_auth(struct buf *b, const char *user, const char *pass);

#endif
