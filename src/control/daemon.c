/* Running as a daemon: detaching from the terminal, and the pid file. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/daemon.h"

/* The write end of the pipe the -d parent waits on, -1 when there is none. Set once in
 * daemon_detach before any thread exists, cleared by daemon_ready on the main thread. */
static int daemon_ready_fd = -1;

int daemon_detach(char *err, size_t errlen)
{
    int ready[2];
    char byte;

    if (pipe2(ready, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "cannot daemonize: pipe: %s", strerror(errno));
        return -errno;
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(ready[0]);
        close(ready[1]);
        snprintf(err, errlen, "cannot daemonize: fork: %s", strerror(e));
        return -e;
    }
    if (pid > 0) {
        /* The original process: wait for the daemon's word. A byte means it is up; end of
         * file means it exited before (its reason is in its log). */
        close(ready[1]);
        ssize_t n;
        do
            n = read(ready[0], &byte, 1);
        while (n < 0 && errno == EINTR);
        if (n == 1)
            _exit(0);
        fprintf(stderr, "ringleader: the daemon exited during start-up (see its log)\n");
        _exit(1);
    }
    close(ready[0]);
    if (setsid() < 0)
        _exit(1);
    /* Fork again: the session leader exits, so the daemon can never acquire a
     * controlling terminal. */
    pid = fork();
    if (pid < 0)
        _exit(1);
    if (pid > 0)
        _exit(0);
    umask(022);
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        dup2(fd, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        if (fd > STDERR_FILENO)
            close(fd);
    }
    daemon_ready_fd = ready[1];
    return 0;
}

void daemon_ready(void)
{
    if (daemon_ready_fd < 0)
        return;
    ssize_t n;
    do
        n = write(daemon_ready_fd, "1", 1);
    while (n < 0 && errno == EINTR);
    close(daemon_ready_fd);
    daemon_ready_fd = -1;
}

/* The pid an existing pid file names: >0, 0 when it holds no pid, -errno when it cannot be
 * read (-ELOOP: a symbolic link). */
static long pidfile_read(const char *path)
{
    char text[32];
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -EINVAL;
    }
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *end;
    long pid = strtol(text, &end, 10);
    if (end == text || (*end != '\n' && *end != '\0') || pid <= 0)
        return 0;
    return pid;
}

int pidfile_create(struct pidfile *pf, const char *path, char *err, size_t errlen)
{
    char text[32];
    int fd = -1, e = 0;

    memset(pf, 0, sizeof(*pf));
    for (int attempt = 0; attempt < 2; attempt++) {
        /* O_EXCL never follows a link, not even a dangling one: EEXIST instead. */
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST)
            break;
        long pid = pidfile_read(path);
        if (pid == -ELOOP) {
            snprintf(err, errlen, "pid file '%s' is a symbolic link: refusing to write through it",
                     path);
            return -ELOOP;
        }
        if (pid < 0) {
            snprintf(err, errlen, "pid file '%s' exists and is not a regular file I can read: %s",
                     path, strerror((int)-pid));
            return (int)pid;
        }
        if (pid > 0 && pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) {
            snprintf(err, errlen, "pid file '%s' names process %ld, which is running: is "
                     "another ringleader using it?", path, pid);
            return -EEXIST;
        }
        /* Stale: its process is gone (or it holds no pid). */
        if (unlink(path) < 0 && errno != ENOENT) {
            e = errno;
            snprintf(err, errlen, "cannot remove the stale pid file '%s': %s", path, strerror(e));
            return -e;
        }
    }
    if (fd < 0) {
        e = errno;
        snprintf(err, errlen, "cannot create pid file '%s': %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    int n = snprintf(text, sizeof(text), "%ld\n", (long)getpid());
    /* 0644 whatever the umask: monitoring reads it as another user. */
    if (fchmod(fd, 0644) < 0 || write(fd, text, (size_t)n) != n || fstat(fd, &st) < 0) {
        e = errno ? errno : EIO;
        close(fd);
        unlink(path);
        snprintf(err, errlen, "cannot write pid file '%s': %s", path, strerror(e));
        return -e;
    }
    if (close(fd) < 0) {
        e = errno;
        unlink(path);
        snprintf(err, errlen, "cannot write pid file '%s': %s", path, strerror(e));
        return -e;
    }
    pf->path = strdup(path);
    if (pf->path == NULL) {
        unlink(path);
        snprintf(err, errlen, "cannot write pid file '%s': %s", path, strerror(ENOMEM));
        return -ENOMEM;
    }
    pf->dev = st.st_dev;
    pf->ino = st.st_ino;
    return 0;
}

int pidfile_take_over(struct pidfile *pf, const char *path, char *err, size_t errlen)
{
    char tmp[4096];
    struct pidfile made;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.upgrade", path) >= sizeof(tmp)) {
        snprintf(err, errlen, "pid file '%s': path too long", path);
        return -ENAMETOOLONG;
    }
    int rc = pidfile_create(&made, tmp, err, errlen);
    if (rc < 0)
        return rc;
    if (rename(tmp, path) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot replace pid file '%s': %s", path, strerror(-rc));
        pidfile_remove(&made);
        return rc;
    }
    free(made.path);
    pf->path = strdup(path);
    if (pf->path == NULL) {
        snprintf(err, errlen, "pid file '%s': out of memory", path);
        return -ENOMEM;
    }
    pf->dev = made.dev;
    pf->ino = made.ino;
    return 0;
}

void pidfile_remove(struct pidfile *pf)
{
    struct stat st;

    if (pf->path == NULL)
        return;
    /* Only ours: someone may have put another file in its place (the inode number alone
     * does not say: a file created after ours was removed may get the same one). */
    if (lstat(pf->path, &st) == 0 && st.st_dev == pf->dev && st.st_ino == pf->ino &&
        pidfile_read(pf->path) == (long)getpid())
        unlink(pf->path);
    free(pf->path);
    pf->path = NULL;
}
