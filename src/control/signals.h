/* The signals nutcracker operators send besides stop and reload: log level, log reopen, state dump. */
#ifndef RL_SIGNALS_H
#define RL_SIGNALS_H

struct proxy;
struct signals;

/*
 * On the main loop of p (after uv_loop_init, before uv_run), as nutcracker 0.5.0 does:
 *   SIGTTIN  raise the log level by one (more verbose), up to 11; logged
 *   SIGTTOU  lower it by one, down to 0; logged
 *   SIGUSR1  reopen the log file (logrotate's postrotate, no reload)
 *   SIGUSR2  log the one-screen state dump (state_dump.h)
 * SIGTERM, SIGINT (stop) and SIGHUP (reload and reopen) stay with proxy.c. Without these
 * handlers the kernel's default actions stop (TTIN, TTOU) or kill (USR1, USR2) the process.
 * Returns the handles' owner (stored by the caller in p->signals), or NULL when they
 * could not be set up (logged; the proxy runs on without them).
 */
struct signals *signals_start(struct proxy *p);

/* Close the handles (the loop must run once more to finish); frees itself. NULL is a no-op. */
void signals_close(struct signals *s);

/* What SIGUSR2 logs, line by line (main thread). */
void signals_dump_state(struct proxy *p);

#endif
