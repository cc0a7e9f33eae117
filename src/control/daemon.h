/* Running as a daemon: detaching from the terminal, and the pid file. */
#ifndef RL_DAEMON_H
#define RL_DAEMON_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Detach (-d): fork, setsid, fork again, umask 022, stdin/stdout/stderr to /dev/null. The
 * working directory is kept, as nutcracker keeps it, so relative paths (the file, its
 * log_file and unix sockets, -o, -p) keep their meaning for reloads and reopens. The original process does not return: it waits until the daemon calls
 * daemon_ready() and exits 0 then, or with the daemon's status if it exits first (so
 * `ringleader -d ... && next` sees a failed start, and the pid file exists when it
 * returns). Returns 0 in the daemon, or -errno with nothing forked (reason in err).
 */
int  daemon_detach(char *err, size_t errlen);

/* In the daemon: tell the waiting parent that start-up went well (a no-op elsewhere). */
void daemon_ready(void);

struct pidfile {
    char  *path;
    dev_t  dev;               /* what we created, so that removal takes only ours */
    ino_t  ino;
};

/*
 * Create path holding our pid, mode 0644
 * whatever the umask, without following a symbolic link: O_CREAT|O_EXCL|O_NOFOLLOW. An
 * existing file is read (never through a link): if it names a live process the start is
 * refused; if that process is gone it is stale, removed and created anew (once). Returns 0,
 * or -errno with a reason naming the file in err.
 */
int  pidfile_create(struct pidfile *pf, const char *path, char *err, size_t errlen);

/*
 * An upgrade's successor: path names this process from now on, replacing the running
 * one's file in one rename (a reader never sees it missing or empty), which the previous
 * process then leaves alone (pidfile_remove). 0, or -errno with err.
 */
int  pidfile_take_over(struct pidfile *pf, const char *path, char *err, size_t errlen);

/* Remove the pid file if it is still the one we created; free pf. */
void pidfile_remove(struct pidfile *pf);

#endif
