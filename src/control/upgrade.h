/* Upgrading the binary in place: the listening sockets handed to a successor process over a unix socket (docs/upgrade.md). */
#ifndef RL_CONTROL_UPGRADE_H
#define RL_CONTROL_UPGRADE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct conf_addr;
struct pidfile;
struct proxy;
struct upgrade;
struct upgrade_inherit;

/*
 * The handoff, on a unix socket only root and the proxy's own user may use (mode 0600 and
 * the peer's SO_PEERCRED checked by both sides):
 *
 *   successor                                 running process
 *                                             (or started by it, when asked by "S")
 *   connect, "T"           ───────────────▶   (peer uid checked)
 *                          ◀───────────────   the description (text, length first),
 *                                             then every fd (SCM_RIGHTS, in chunks):
 *                                             each worker's listener of each pool, the
 *                                             stats and admin listeners, the upgrade
 *                                             socket, and the count of upgrades so far
 *   build, start workers, write the pid file
 *   "R"                    ───────────────▶   MAINPID=successor to systemd; stops
 *                                             accepting (closes its own copies), drains
 *                          ◀───────────────   "K"
 *   READY=1
 *
 * Until "R" the running process changes nothing: a successor that fails (its
 * configuration, a file, a port) ends the conversation by exiting and the running one
 * goes on as before. Both processes hold the same sockets from the first "T" on, so a
 * connection waiting in a listener's queue is accepted by one of them, never reset.
 */

/* The running process: told that its successor serves (after "R"). The callback stops
 * accepting and drains; the upgrade socket is the successor's from then on. */
typedef void (*upgrade_handed_cb)(struct proxy *p, pid_t successor);

/*
 * Listen for a successor on path (created mode 0600; a stale socket file nobody answers
 * on is replaced, a live one refused), or on the upgrade socket a predecessor handed over
 * in inh. argv: this process's command line (argv[0] the binary's path), for a successor
 * it starts itself when asked ("S", upgrade_request); NULL: it never does. Sets
 * p->upgrade. 0, or -errno with err.
 */
int  upgrade_listen(struct proxy *p, const char *path, char *const *argv,
                    struct upgrade_inherit *inh, upgrade_handed_cb handed, char *err,
                    size_t errlen);

/* Stop listening for a successor (main loop; before it runs its last time): the socket
 * file is removed unless a successor holds the socket. */
void upgrade_close(struct proxy *p);

/*
 * The successor, before anything else is opened: connect to path, check who answers,
 * receive the description and the sockets. Blocking, bounded by timeout_ms per step.
 * NULL with err when there is nothing to take over (no process there, refused, a
 * protocol error): the caller exits, and the running process goes on.
 */
struct upgrade_inherit *upgrade_receive(const char *path, int timeout_ms, char *err,
                                        size_t errlen);

/*
 * Ask the process on path's upgrade socket to start its successor ("S": the binary at its
 * own path, with its own options and --upgrade-from path, as its child) and wait for the
 * outcome, bounded by timeout_ms. 0 when the successor serves, -1 when it did not (the
 * old process still serves), -errno when nobody could be asked; what happened, one line,
 * in out.
 */
int  upgrade_request(const char *path, int timeout_ms, char *out, size_t outlen);

/* How many handoffs the received sockets have been through, and how many workers
 * listened on each pool's address (one socket each). */
uint64_t upgrade_inherit_count(const struct upgrade_inherit *inh);
uint32_t upgrade_inherit_workers(const struct upgrade_inherit *inh);

/*
 * A pool's listening sockets from inh when the predecessor listened on the same address
 * (a->text): fds[0..nworkers) are filled, the inherited ones first (ownership moves to
 * fds), a worker beyond the predecessor's count with a new socket in the same
 * SO_REUSEPORT group (a unix socket: a dup). 1 when taken, 0 when the address was not
 * inherited (nothing touched), -errno with err.
 */
int  upgrade_take_pool(struct upgrade_inherit *inh, const struct conf_addr *a, int backlog,
                       uint32_t nworkers, int *fds, char *err, size_t errlen);

/* The stats ("stats") or admin ("admin") listener inherited for addr: the fd (owned by
 * the caller now), or -1 when the predecessor listened elsewhere or not at all. */
int  upgrade_take_fd(struct upgrade_inherit *inh, const char *kind, const char *addr);

/*
 * The successor serves: replace the pid file (pf/path, when path is not NULL) with this
 * process's, tell the predecessor ("R") and wait for its "K" (bounded). 0, or -errno with
 * err (the predecessor vanished: this process serves anyway).
 */
int  upgrade_complete(struct upgrade_inherit *inh, struct pidfile *pf, const char *path,
                      int timeout_ms, char *err, size_t errlen);

/* Close what was inherited and not taken (a pool the new file no longer has; once
 * upgrade_complete ran, a unix listener's file is removed too), and the conversation.
 * NULL is fine. */
void upgrade_inherit_free(struct upgrade_inherit *inh);

#endif
