/* Listening sockets: opened by the main thread when a snapshot is built, handed to the workers. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conf/conf.h"
#include "proxy/listen.h"

/* A TCP listening socket with SO_REUSEPORT: an fd or -errno with err. */
static int listen_tcp(const struct conf_addr *a, int backlog, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    char port[8];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(port, sizeof(port), "%u", a->port);
    int rc = getaddrinfo(a->host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "listen %s: %s", a->text, gai_strerror(rc));
        return -EINVAL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        goto fail;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, backlog) < 0) {
        rc = -errno;
        close(fd);
        goto fail;
    }
    freeaddrinfo(res);
    return fd;
fail:
    snprintf(err, errlen, "listen %s: %s", a->text, strerror(-rc));
    freeaddrinfo(res);
    return rc;
}

/* A unix listening socket at a->path (replacing a stale file): fd or -errno. */
static int listen_unix(const struct conf_addr *a, int backlog, char *err, size_t errlen)
{
    struct sockaddr_un sun;
    if (strlen(a->path) >= sizeof(sun.sun_path)) {
        snprintf(err, errlen, "listen %s: path too long", a->path);
        return -ENAMETOOLONG;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "listen %s: %s", a->path, strerror(errno));
        return -errno;
    }
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    memcpy(sun.sun_path, a->path, strlen(a->path) + 1);
    unlink(a->path);
    if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || listen(fd, backlog) < 0) {
        int rc = -errno;
        snprintf(err, errlen, "listen %s: %s", a->path, strerror(errno));
        close(fd);
        return rc;
    }
    /* 0777 unless `listen: PATH MODE` says otherwise: what nutcracker's daemon gives (it
     * runs with umask 0), so a client user that could connect to nutcracker's socket can
     * connect to this one; bind() alone would leave 0777 & ~umask (0755 under -d). */
    mode_t mode = a->perm >= 0 ? (mode_t)a->perm : 0777;
    if (chmod(a->path, mode) < 0) {
        int rc = -errno;
        snprintf(err, errlen, "listen %s: chmod %04o: %s", a->path, (unsigned)mode,
                 strerror(errno));
        close(fd);
        unlink(a->path);
        return rc;
    }
    return fd;
}

static int listen_dupfd(int fd)
{
    int r = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    return r < 0 ? -errno : r;
}

void listen_close(int *fds, uint32_t nworkers)
{
    for (uint32_t i = 0; i < nworkers; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

int listen_open(const struct conf_addr *a, int backlog, uint32_t nworkers, int *fds,
                char *err, size_t errlen)
{
    for (uint32_t i = 0; i < nworkers; i++)
        fds[i] = -1;
    for (uint32_t i = 0; i < nworkers; i++) {
        if (a->path != NULL)
            fds[i] = i == 0 ? listen_unix(a, backlog, err, errlen)
                            : listen_dupfd(fds[0]);
        else
            fds[i] = listen_tcp(a, backlog, err, errlen);
        if (fds[i] < 0) {
            int rc = fds[i];
            if (a->path != NULL && i > 0)
                snprintf(err, errlen, "listen %s: %s", a->path, strerror(-rc));
            fds[i] = -1;
            listen_close(fds, nworkers);
            return rc;
        }
    }
    return 0;
}

int listen_dup(const int *from, uint32_t nworkers, int *fds)
{
    for (uint32_t i = 0; i < nworkers; i++)
        fds[i] = -1;
    for (uint32_t i = 0; i < nworkers; i++) {
        fds[i] = listen_dupfd(from[i]);
        if (fds[i] < 0) {
            int rc = fds[i];
            fds[i] = -1;
            listen_close(fds, nworkers);
            return rc;
        }
    }
    return 0;
}
