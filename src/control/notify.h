/* Telling the service manager (and the -d parent) where start-up, reloads and shutdown are. */
#ifndef RL_NOTIFY_H
#define RL_NOTIFY_H

#include <sys/types.h>

/*
 * Main thread only. Each is a no-op when nobody listens: without $NOTIFY_SOCKET (not run by
 * systemd with Type=notify), or when built without libsystemd (configure says which).
 *
 * notify_ready:     every listener is open and the workers run (systemd READY=1, and the
 *                   -d parent exits 0, see daemon.h); after a reload: the reload is done.
 * notify_reloading: a reload started (RELOADING=1; READY=1 follows when it is over).
 * notify_stopping:  the proxy is draining and will exit (STOPPING=1).
 * notify_status:    a one-line status for `systemctl status` (STATUS=...).
 * notify_mainpid:   an upgrade's successor serves: the service's main process is pid now
 *                   (MAINPID=; sent by the current main process, which NotifyAccess=main
 *                   accepts, before the successor's READY=1).
 */
void notify_ready(void);
void notify_reloading(void);
void notify_stopping(void);
void notify_mainpid(pid_t pid);
void notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
