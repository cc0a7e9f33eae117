/* Upgrading the binary in place: the listening sockets handed to a successor process over a unix socket (docs/upgrade.md). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conf/conf.h"
#include "control/admin.h"
#include "control/daemon.h"
#include "control/proxy.h"
#include "control/reload.h"
#include "control/upgrade.h"
#include "lib/buf.h"
#include "lib/log.h"
#include "proxy/listen.h"
#include "proxy/snapshot.h"

#define UPGRADE_MAGIC      "ringleader-upgrade 1"
#define UPGRADE_FDS_PER_MSG 64          /* well under the kernel's SCM_MAX_FD (253) */
#define UPGRADE_TEXT_MAX   (1u << 20)   /* a description longer than this is not ours */
#define UPGRADE_SEND_MS    5000         /* the running process's bound on one send */

/* What the description names, one line per socket, in the order the fds follow. */
enum upgrade_kind { UPGRADE_POOL, UPGRADE_STATS, UPGRADE_ADMIN, UPGRADE_SOCKET };

static const char *const upgrade_kind_names[] = {
    [UPGRADE_POOL] = "pool", [UPGRADE_STATS] = "stats", [UPGRADE_ADMIN] = "admin",
    [UPGRADE_SOCKET] = "upgrade",
};

struct upgrade_entry {
    enum upgrade_kind kind;
    uint32_t          worker;         /* a pool's: the worker that listened on it */
    char             *addr;           /* the address as configured (conf_addr.text) */
    int               fd;             /* -1 once taken */
};

struct upgrade_inherit {
    int                   conn;       /* the conversation with the predecessor */
    int                   served;     /* upgrade_complete ran: what is left is ours to end */
    uint64_t              upgrades;   /* handoffs before this one */
    uint32_t              workers;
    struct upgrade_entry *e;
    size_t                n;
};

/* A connection to the upgrade socket: a successor ("T") or someone asking for one ("S"). */
struct upgrade_conn {
    uv_pipe_t       pipe;
    struct upgrade *u;
    pid_t           pid;            /* SO_PEERCRED's */
    int             sent;           /* a successor's: the sockets went out, "R" awaited */
};

/* The running process's side: its upgrade socket, at most one successor in conversation,
 * at most one successor it started itself and whoever asked for that. */
struct upgrade {
    struct proxy        *p;
    char                *path;
    char               **argv;      /* this process's command line + --upgrade-from path */
    uv_pipe_t            server;
    struct upgrade_conn *successor;
    struct upgrade_conn *requester;
    uv_process_t         child;
    pid_t                child_pid; /* 0: none running */
    unsigned             handles;   /* open: the server, connections, the child's */
    int                  closing;   /* upgrade_close: freed when the last handle closes */
    int                  handed;    /* the successor holds the upgrade socket */
    int                  inherited; /* the socket came from a predecessor */
    upgrade_handed_cb    on_handed;
};

/* ------------------------------------------------------------------ both sides */

/* Whether the peer of a unix socket is root or our own user: the socket file's mode
 * already says so for the path, this says it for the process at the other end. 0 with
 * *pid, or -errno / -EPERM with err. */
static int upgrade_peer_check(int fd, pid_t *pid, char *err, size_t errlen)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
        int e = errno;
        snprintf(err, errlen, "SO_PEERCRED: %s", strerror(e));
        return -e;
    }
    if (cr.uid != 0 && cr.uid != geteuid()) {
        snprintf(err, errlen, "process %d of uid %u is neither root nor uid %u", (int)cr.pid,
                 (unsigned)cr.uid, (unsigned)geteuid());
        return -EPERM;
    }
    *pid = cr.pid;
    return 0;
}

/* Wait until fd is ready for events, at most ms. 0, or -ETIMEDOUT / -errno. */
static int upgrade_wait(int fd, short events, int ms)
{
    struct pollfd pfd = { .fd = fd, .events = events };
    int rc;
    do
        rc = poll(&pfd, 1, ms);
    while (rc < 0 && errno == EINTR);
    if (rc < 0)
        return -errno;
    return rc == 0 ? -ETIMEDOUT : 0;
}

/* Send len bytes with nfds descriptors attached to the first byte (the kernel delivers
 * them with it), waiting for room up to ms each time. 0 or -errno. */
static int upgrade_send(int fd, const char *p, size_t len, const int *fds, size_t nfds, int ms)
{
    union {
        char           buf[CMSG_SPACE(sizeof(int) * UPGRADE_FDS_PER_MSG)];
        struct cmsghdr align;
    } u;

    while (len > 0) {
        struct iovec iov = { .iov_base = (void *)p, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (nfds > 0) {
            memset(&u, 0, sizeof(u));
            mh.msg_control = u.buf;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
            memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
        }
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            int rc = upgrade_wait(fd, POLLOUT, ms);
            if (rc < 0)
                return rc;
            continue;
        }
        if (n < 0)
            return -errno;
        p += n;
        len -= (size_t)n;
        nfds = 0;                       /* went with the first byte */
    }
    return 0;
}

/* Read exactly len bytes, taking any descriptors that come with them into fds (room for
 * *nfds; *nfds is set to how many came). 0, -ECONNRESET at end of file, -errno. */
static int upgrade_recv(int fd, char *p, size_t len, int *fds, size_t *nfds, int ms)
{
    size_t room = nfds ? *nfds : 0, got = 0;
    union {
        char           buf[CMSG_SPACE(sizeof(int) * UPGRADE_FDS_PER_MSG)];
        struct cmsghdr align;
    } u;

    while (len > 0) {
        struct iovec iov = { .iov_base = p, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                             .msg_controllen = sizeof(u.buf) };
        int rc = upgrade_wait(fd, POLLIN, ms);
        if (rc < 0)
            return rc;
        ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0)
            return -errno;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            int *in = (int *)CMSG_DATA(cm);
            for (size_t i = 0; i < k; i++) {
                if (got < room)
                    fds[got++] = in[i];
                else
                    close(in[i]);       /* more than announced: not ours to keep */
            }
        }
        if (n == 0)
            return -ECONNRESET;
        p += n;
        len -= (size_t)n;
    }
    if (nfds)
        *nfds = got;
    return 0;
}

/* ------------------------------------------------------------------ the running process */

/* The description and the descriptors of everything a successor takes over. Each fd is
 * ours (not dup'd): the successor gets its own copies from the kernel. 0, or -ENOMEM. */
static int upgrade_describe(struct upgrade *u, struct buf *text, int **fdsp, size_t *nfdsp)
{
    struct proxy *p = u->p;
    struct snapshot *snap = atomic_load(&p->hub.current);
    const struct conf *conf = snap->conf;
    size_t cap = (size_t)conf->npools * p->nworkers + 3, n = 0;
    int *fds = malloc(cap * sizeof(*fds));

    if (fds == NULL)
        return -ENOMEM;
    int rc = buf_appendf(text, "%s\nupgrades %" PRIu64 "\nworkers %u\n", UPGRADE_MAGIC,
                         p->upgrades, p->nworkers);
    for (uint32_t i = 0; rc == 0 && i < conf->npools; i++) {
        const int *lf = snap->pools[i].listen_fds;
        for (uint32_t w = 0; lf != NULL && rc == 0 && w < p->nworkers; w++) {
            if (lf[w] < 0)
                continue;
            rc = buf_appendf(text, "pool %u %s\n", w, conf->pools[i].listen.text);
            fds[n++] = lf[w];
        }
    }
    if (rc == 0 && p->stats_open) {
        uv_os_fd_t fd;
        if (uv_fileno((uv_handle_t *)&p->stats_server, &fd) == 0) {
            rc = buf_appendf(text, "stats 0 %s\n", p->stats_effective);
            fds[n++] = fd;
        }
    }
    if (rc == 0 && p->admin != NULL && admin_listen_fd(p->admin) >= 0) {
        rc = buf_appendf(text, "admin 0 %s\n", conf->global.admin_listen.text);
        fds[n++] = admin_listen_fd(p->admin);
    }
    uv_os_fd_t ufd;
    if (rc == 0 && uv_fileno((uv_handle_t *)&u->server, &ufd) == 0) {
        rc = buf_appendf(text, "upgrade 0 %s\n", u->path);
        fds[n++] = ufd;
    }
    if (rc == 0)
        rc = buf_appendf(text, "end %zu\n", n);
    if (rc < 0) {
        free(fds);
        return -ENOMEM;
    }
    *fdsp = fds;
    *nfdsp = n;
    return 0;
}

static void upgrade_free(struct upgrade *u)
{
    for (char **a = u->argv; a != NULL && *a != NULL; a++)
        free(*a);
    free(u->argv);
    free(u->path);
    free(u);
}

/* Every handle's close callback: the last one after upgrade_close frees u. */
static void upgrade_handle_closed(struct upgrade *u)
{
    if (--u->handles == 0 && u->closing)
        upgrade_free(u);
}

static void upgrade_conn_closed(uv_handle_t *h)
{
    struct upgrade_conn *c = h->data;
    struct upgrade *u = c->u;

    free(c);
    upgrade_handle_closed(u);
}

static void upgrade_conn_end(struct upgrade_conn *c)
{
    struct upgrade *u = c->u;

    if (u->successor == c)
        u->successor = NULL;
    if (u->requester == c)
        u->requester = NULL;
    if (!uv_is_closing((uv_handle_t *)&c->pipe))
        uv_close((uv_handle_t *)&c->pipe, upgrade_conn_closed);
}

/* Tell whoever asked for the upgrade how it went (one line), and end that conversation. */
static void upgrade_tell(struct upgrade *u, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void upgrade_tell(struct upgrade *u, const char *fmt, ...)
{
    struct upgrade_conn *c = u->requester;
    char line[512];
    uv_os_fd_t fd;
    va_list ap;

    if (c == NULL)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0)
        (void)upgrade_send(fd, line, (size_t)n, NULL, 0, UPGRADE_SEND_MS);
    upgrade_conn_end(c);
}

/* "T": send the description and the sockets. Synchronous: a few hundred bytes and the
 * descriptors fit the socket's buffer; each send is bounded anyway. */
static void upgrade_hand_over(struct upgrade_conn *c)
{
    struct upgrade *u = c->u;
    struct proxy *p = u->p;
    struct buf text;
    int *fds = NULL;
    size_t nfds = 0;
    uv_os_fd_t fd;
    int rc;

    if (u->successor != NULL || atomic_load(&p->stopping) ||
        (p->reload != NULL && p->reload->old != NULL)) {
        log_warn("upgrade: process %d refused: %s", (int)c->pid,
                 u->successor != NULL ? "another successor is taking over"
                 : atomic_load(&p->stopping) ? "this process is stopping"
                 : "a reload is being adopted; try again");
        upgrade_conn_end(c);
        return;
    }
    u->successor = c;
    buf_init(&text);
    rc = upgrade_describe(u, &text, &fds, &nfds);
    if (rc == 0)
        rc = uv_fileno((uv_handle_t *)&c->pipe, &fd);
    if (rc == 0) {
        uint32_t len = htonl((uint32_t)buf_len(&text));
        rc = upgrade_send(fd, (const char *)&len, sizeof(len), NULL, 0, UPGRADE_SEND_MS);
        if (rc == 0)
            rc = upgrade_send(fd, buf_rptr(&text), buf_len(&text), NULL, 0, UPGRADE_SEND_MS);
        for (size_t i = 0; rc == 0 && i < nfds; i += UPGRADE_FDS_PER_MSG) {
            size_t k = nfds - i < UPGRADE_FDS_PER_MSG ? nfds - i : UPGRADE_FDS_PER_MSG;
            rc = upgrade_send(fd, "F", 1, fds + i, k, UPGRADE_SEND_MS);
        }
    }
    buf_free(&text);
    free(fds);
    if (rc < 0) {
        log_error("upgrade: handing the sockets to process %d: %s; still serving here",
                  (int)c->pid, strerror(-rc));
        upgrade_conn_end(c);
        return;
    }
    c->sent = 1;
    log_notice("upgrade: %zu sockets handed to process %d; serving until it says it serves",
               nfds, (int)c->pid);
}

/* "R": the successor serves. What it holds is its own now; this process stops. */
static void upgrade_handed(struct upgrade_conn *c)
{
    struct upgrade *u = c->u;
    uv_os_fd_t fd;

    u->handed = 1;
    u->on_handed(u->p, c->pid);
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0)
        (void)upgrade_send(fd, "K", 1, NULL, 0, UPGRADE_SEND_MS);
    upgrade_tell(u, "ok: process %d serves (upgrade %" PRIu64 "); process %d drains and exits",
                 (int)c->pid, u->p->upgrades + 1, (int)getpid());
    /* The successor accepts on the upgrade socket now; ours would sit on a connection. */
    upgrade_close(u->p);
}

static void upgrade_child_closed(uv_handle_t *h)
{
    upgrade_handle_closed(h->data);
}

static void upgrade_child_exit(uv_process_t *h, int64_t status, int signum)
{
    struct upgrade *u = h->data;

    if (!u->handed) {
        log_error("upgrade: the new process %d exited (status %d, signal %d) before serving; "
                  "still serving here", (int)u->child_pid, (int)status, signum);
        upgrade_tell(u, "failed: the new process %d exited (status %d, signal %d) before "
                     "serving (its log says why); process %d still serves", (int)u->child_pid,
                     (int)status, signum, (int)getpid());
    }
    u->child_pid = 0;
    if (!uv_is_closing((uv_handle_t *)h))
        uv_close((uv_handle_t *)h, upgrade_child_closed);
}

/* "S": start a successor from the binary at this process's own path, with its options,
 * as this process's child: under systemd it is in the service's control group, where
 * MAINPID= may point. The asker hears the outcome (upgrade_tell). */
static void upgrade_spawn(struct upgrade_conn *c)
{
    struct upgrade *u = c->u;
    uv_stdio_container_t stdio[3] = {
        { .flags = UV_IGNORE },
        { .flags = UV_INHERIT_FD, .data.fd = 1 },
        { .flags = UV_INHERIT_FD, .data.fd = 2 },
    };
    uv_process_options_t po = {
        .exit_cb = upgrade_child_exit, .file = u->argv[0], .args = u->argv,
        .stdio_count = 3, .stdio = stdio,
    };

    if (u->argv == NULL || u->requester != NULL || u->child_pid != 0 ||
        u->successor != NULL) {
        log_warn("upgrade: process %d asked for an upgrade while one runs: refused",
                 (int)c->pid);
        upgrade_conn_end(c);
        return;
    }
    u->requester = c;
    u->child.data = u;
    u->handles++;
    int rc = uv_spawn(&u->p->loop, &u->child, &po);
    if (rc < 0) {
        log_error("upgrade: cannot start %s: %s", u->argv[0], uv_strerror(rc));
        upgrade_tell(u, "failed: cannot start %s: %s", u->argv[0], uv_strerror(rc));
        uv_close((uv_handle_t *)&u->child, upgrade_child_closed);  /* initialised anyway */
        return;
    }
    u->child_pid = u->child.pid;
    log_notice("upgrade: asked by process %d: started %s as process %d", (int)c->pid,
               u->argv[0], (int)u->child_pid);
}

static void upgrade_alloc_cb(uv_handle_t *h, size_t size, uv_buf_t *b)
{
    static char one[16];        /* main loop only; the first byte is all that counts */
    (void)h;
    (void)size;
    *b = uv_buf_init(one, sizeof(one));
}

static void upgrade_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct upgrade_conn *c = s->data;
    struct upgrade *u = c->u;

    if (nread == 0)
        return;
    if (nread < 0) {
        if (c->sent && !u->handed)
            log_error("upgrade: process %d ended the handoff before serving (its log says "
                      "why); still serving here", (int)c->pid);
        upgrade_conn_end(c);            /* an asker that left hears nothing */
        return;
    }
    if (u->successor != c && u->requester != c && b->base[0] == 'T')
        upgrade_hand_over(c);
    else if (u->successor != c && u->requester != c && b->base[0] == 'S')
        upgrade_spawn(c);
    else if (u->successor == c && c->sent && b->base[0] == 'R')
        upgrade_handed(c);
    else {
        log_warn("upgrade: process %d sent '%c' out of turn: conversation ended", (int)c->pid,
                 b->base[0]);
        upgrade_conn_end(c);
    }
}

static void upgrade_connection_cb(uv_stream_t *server, int status)
{
    struct upgrade *u = server->data;
    struct upgrade_conn *c;
    char err[256];
    uv_os_fd_t fd;

    if (status < 0 || (c = calloc(1, sizeof(*c))) == NULL)
        return;
    c->u = u;
    uv_pipe_init(server->loop, &c->pipe, 0);
    c->pipe.data = c;
    u->handles++;
    if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0 ||
        uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0) {
        upgrade_conn_end(c);
        return;
    }
    if (upgrade_peer_check(fd, &c->pid, err, sizeof(err)) < 0) {
        log_warn("upgrade: connection on %s refused: %s", u->path, err);
        upgrade_conn_end(c);
        return;
    }
    if (uv_read_start((uv_stream_t *)&c->pipe, upgrade_alloc_cb, upgrade_read_cb) < 0)
        upgrade_conn_end(c);
}

/* The address of the unix socket at path: 0, or -1 with err when the path does not fit. */
static int upgrade_sun(struct sockaddr_un *sun, const char *path, char *err, size_t errlen)
{
    size_t len = strlen(path);

    if (len >= sizeof(sun->sun_path)) {
        snprintf(err, errlen, "upgrade socket '%s': path too long", path);
        return -1;
    }
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    memcpy(sun->sun_path, path, len + 1);
    return 0;
}

/* A new unix socket at path, mode 0600. An existing file is replaced only when nothing
 * answers on it (a process that ended without removing it); a live one is refused, since
 * two proxies on one path would take each other's successors. fd or -errno with err. */
static int upgrade_socket_open(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sun;
    int fd = -1, e;

    if (upgrade_sun(&sun, path, err, errlen) < 0)
        return -ENAMETOOLONG;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0) {
        close(fd);
        snprintf(err, errlen, "upgrade socket '%s': a running process listens on it "
                 "(upgrade from it with --upgrade-from)", path);
        return -EADDRINUSE;
    }
    close(fd);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
    /* Nobody but us may connect, from the first moment the name exists. */
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
    umask(old);
    if (rc < 0 || listen(fd, 4) < 0)
        goto fail;
    return fd;
fail:
    e = errno;
    if (fd >= 0)
        close(fd);
    snprintf(err, errlen, "upgrade socket '%s': %s", path, strerror(e));
    return -e;
}

static void upgrade_server_closed(uv_handle_t *h)
{
    upgrade_handle_closed(h->data);
}

/* The successor's command line: ours (argv[0] is the binary's path, where the new one is
 * installed), without a previous --upgrade-from, with --upgrade-from path. NULL: no memory. */
static char **upgrade_argv(char *const *argv, const char *path)
{
    size_t n = 0;
    while (argv != NULL && argv[n] != NULL)
        n++;
    char **out = calloc(n + 3, sizeof(*out));
    size_t k = 0;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(argv[i], "--upgrade-from") == 0) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--upgrade-from=", 15) == 0)
            continue;
        if ((out[k++] = strdup(argv[i])) == NULL)
            goto nomem;
    }
    if ((out[k++] = strdup("--upgrade-from")) == NULL || (out[k++] = strdup(path)) == NULL)
        goto nomem;
    return out;
nomem:
    for (size_t i = 0; i < k; i++)
        free(out[i]);
    free(out);
    return NULL;
}

int upgrade_listen(struct proxy *p, const char *path, char *const *argv,
                   struct upgrade_inherit *inh, upgrade_handed_cb handed, char *err,
                   size_t errlen)
{
    struct upgrade *u = calloc(1, sizeof(*u));
    int fd = -1, rc;

    if (u == NULL || (u->path = strdup(path)) == NULL ||
        (argv != NULL && argv[0] != NULL && (u->argv = upgrade_argv(argv, path)) == NULL)) {
        if (u != NULL)
            upgrade_free(u);
        snprintf(err, errlen, "upgrade socket: out of memory");
        return -ENOMEM;
    }
    u->p = p;
    u->on_handed = handed;
    if (inh != NULL)
        fd = upgrade_take_fd(inh, "upgrade", path);
    u->inherited = fd >= 0;
    if (fd < 0 && (fd = upgrade_socket_open(path, err, errlen)) < 0) {
        upgrade_free(u);
        return fd;
    }
    uv_pipe_init(&p->loop, &u->server, 0);
    u->server.data = u;
    u->handles++;
    rc = uv_pipe_open(&u->server, fd);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&u->server, 4, upgrade_connection_cb);
    if (rc < 0) {
        snprintf(err, errlen, "upgrade socket '%s': %s", path, uv_strerror(rc));
        u->handed = 1;                  /* the file is not ours to remove */
        p->upgrade = u;
        upgrade_close(p);
        return rc;
    }
    p->upgrade = u;
    return 0;
}

void upgrade_close(struct proxy *p)
{
    struct upgrade *u = p->upgrade;

    if (u == NULL)
        return;
    p->upgrade = NULL;
    u->closing = 1;
    /* The file is the predecessor's until this successor serves (p->inherit is freed
     * then): one that fails must not take it from under the process that listens. */
    if (!u->handed && !(u->inherited && p->inherit != NULL))
        unlink(u->path);
    if (u->successor != NULL)
        upgrade_conn_end(u->successor);
    if (u->requester != NULL)
        upgrade_tell(u, "failed: process %d is stopping", (int)getpid());
    /* A child still running goes on (it may be the successor); only our handle closes,
     * or the loop would wait for its exit. */
    if (u->child_pid != 0 && !uv_is_closing((uv_handle_t *)&u->child))
        uv_close((uv_handle_t *)&u->child, upgrade_child_closed);
    uv_close((uv_handle_t *)&u->server, upgrade_server_closed);
}

/* ------------------------------------------------------------------ the successor */

/* A connected, checked socket to path: fd, or -errno with err. */
static int upgrade_connect(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sun;
    pid_t pid;

    if (upgrade_sun(&sun, path, err, errlen) < 0)
        return -ENAMETOOLONG;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        int e = errno;
        snprintf(err, errlen, "upgrade socket '%s': %s (is a ringleader with "
                 "--upgrade-socket running?)", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    /* The other way round too: sockets from a stranger would be served as ours. */
    int rc = upgrade_peer_check(fd, &pid, err, errlen);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}


/* Parse the description: its lines after the magic, into inh. 0 or -EPROTO / -ENOMEM. */
static int upgrade_parse(struct upgrade_inherit *inh, char *text, size_t *nfds)
{
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    if (line == NULL || strcmp(line, UPGRADE_MAGIC) != 0)
        return -EPROTO;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        char word[16], addr[1100];
        unsigned long long v;
        unsigned w;
        if (sscanf(line, "upgrades %llu", &v) == 1) {
            inh->upgrades = v;
        } else if (sscanf(line, "workers %u", &w) == 1) {
            inh->workers = w;
        } else if (sscanf(line, "end %llu", &v) == 1) {
            *nfds = (size_t)v;
            return *nfds == inh->n ? 0 : -EPROTO;
        } else if (sscanf(line, "%15s %u %1099[^\n]", word, &w, addr) == 3) {
            int kind = -1;
            for (int k = 0; k <= UPGRADE_SOCKET; k++)
                if (strcmp(word, upgrade_kind_names[k]) == 0)
                    kind = k;
            if (kind < 0)
                return -EPROTO;
            struct upgrade_entry *e = realloc(inh->e, (inh->n + 1) * sizeof(*e));
            if (e == NULL)
                return -ENOMEM;
            inh->e = e;
            e[inh->n] = (struct upgrade_entry){ .kind = kind, .worker = w, .fd = -1,
                                                .addr = strdup(addr) };
            if (e[inh->n++].addr == NULL)
                return -ENOMEM;
        } else {
            return -EPROTO;
        }
    }
    return -EPROTO;
}

struct upgrade_inherit *upgrade_receive(const char *path, int timeout_ms, char *err,
                                        size_t errlen)
{
    struct upgrade_inherit *inh = calloc(1, sizeof(*inh));
    char *text = NULL;
    int *fds = NULL;
    size_t nfds = 0;
    uint32_t len;
    int rc;

    if (inh == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    inh->conn = upgrade_connect(path, err, errlen);
    if (inh->conn < 0)
        goto fail;
    if ((rc = upgrade_send(inh->conn, "T", 1, NULL, 0, timeout_ms)) < 0 ||
        (rc = upgrade_recv(inh->conn, (char *)&len, sizeof(len), NULL, NULL, timeout_ms)) < 0)
        goto io;
    len = ntohl(len);
    if (len == 0 || len > UPGRADE_TEXT_MAX || (text = malloc(len + 1)) == NULL) {
        rc = len > UPGRADE_TEXT_MAX ? -EPROTO : -ENOMEM;
        goto io;
    }
    if ((rc = upgrade_recv(inh->conn, text, len, NULL, NULL, timeout_ms)) < 0)
        goto io;
    text[len] = '\0';
    if ((rc = upgrade_parse(inh, text, &nfds)) < 0)
        goto io;
    fds = malloc((nfds ? nfds : 1) * sizeof(*fds));
    if (fds == NULL) {
        rc = -ENOMEM;
        goto io;
    }
    for (size_t got = 0; got < nfds;) {
        char byte;
        size_t k = nfds - got < UPGRADE_FDS_PER_MSG ? nfds - got : UPGRADE_FDS_PER_MSG;
        size_t want = k;
        if ((rc = upgrade_recv(inh->conn, &byte, 1, fds + got, &k, timeout_ms)) < 0)
            goto io;
        if (k != want) {
            for (size_t i = 0; i < k; i++)
                close(fds[got + i]);
            rc = -EPROTO;
            goto io;
        }
        for (size_t i = 0; i < k; i++)
            inh->e[got + i].fd = fds[got + i];
        got += k;
    }
    free(fds);
    free(text);
    return inh;
io:
    snprintf(err, errlen, "upgrade socket '%s': receiving the sockets: %s", path,
             rc == -EPROTO ? "not a ringleader upgrade conversation" : strerror(-rc));
fail:
    free(fds);
    free(text);
    upgrade_inherit_free(inh);
    return NULL;
}

int upgrade_request(const char *path, int timeout_ms, char *out, size_t outlen)
{
    size_t n = 0;
    int fd = upgrade_connect(path, out, outlen);

    if (fd < 0)
        return fd;
    int rc = upgrade_send(fd, "S", 1, NULL, 0, timeout_ms);
    while (rc == 0 && n + 1 < outlen) {
        rc = upgrade_recv(fd, out + n, 1, NULL, NULL, timeout_ms);
        if (rc == 0 && out[n] == '\n')
            break;
        n += rc == 0;
    }
    close(fd);
    if (rc < 0 && n == 0) {
        snprintf(out, outlen, "no answer from %s: %s", path,
                 rc == -ECONNRESET ? "the running process ended the conversation"
                                   : strerror(-rc));
        return -1;
    }
    out[n] = '\0';
    return strncmp(out, "ok", 2) == 0 ? 0 : -1;
}

uint64_t upgrade_inherit_count(const struct upgrade_inherit *inh)
{
    return inh->upgrades;
}

uint32_t upgrade_inherit_workers(const struct upgrade_inherit *inh)
{
    return inh->workers;
}

int upgrade_take_pool(struct upgrade_inherit *inh, const struct conf_addr *a, int backlog,
                      uint32_t nworkers, int *fds, char *err, size_t errlen)
{
    int found = 0;

    if (inh == NULL)
        return 0;
    for (uint32_t w = 0; w < nworkers; w++)
        fds[w] = -1;
    for (size_t i = 0; i < inh->n; i++) {
        struct upgrade_entry *e = &inh->e[i];
        if (e->kind != UPGRADE_POOL || e->fd < 0 || strcmp(e->addr, a->text) != 0)
            continue;
        found = 1;
        /* The caller raised its count to the predecessor's: a socket left to nobody would
         * reset the connections the kernel still queues on it. */
        if (e->worker < nworkers && fds[e->worker] < 0) {
            fds[e->worker] = e->fd;
            e->fd = -1;
        }
    }
    if (!found)
        return 0;
    for (uint32_t w = 0; w < nworkers; w++) {
        if (fds[w] >= 0)
            continue;
        int rc;
        if (a->path != NULL) {          /* one unix socket for every worker */
            rc = fds[0] >= 0 ? fcntl(fds[0], F_DUPFD_CLOEXEC, 0) : -1;
            rc = rc < 0 ? -(errno ? errno : EBADF) : rc;
            if (rc >= 0)
                fds[w] = rc;
            else
                snprintf(err, errlen, "listen %s: %s", a->text, strerror(-rc));
        } else {                        /* one more in the SO_REUSEPORT group */
            rc = listen_open(a, backlog, 1, &fds[w], err, errlen);
        }
        if (rc < 0) {
            listen_close(fds, nworkers);
            return rc;
        }
    }
    return 1;
}

int upgrade_take_fd(struct upgrade_inherit *inh, const char *kind, const char *addr)
{
    for (size_t i = 0; inh != NULL && addr != NULL && i < inh->n; i++) {
        struct upgrade_entry *e = &inh->e[i];
        if (e->fd >= 0 && strcmp(upgrade_kind_names[e->kind], kind) == 0 &&
            strcmp(e->addr, addr) == 0) {
            int fd = e->fd;
            e->fd = -1;
            return fd;
        }
    }
    return -1;
}

int upgrade_complete(struct upgrade_inherit *inh, struct pidfile *pf, const char *path,
                     int timeout_ms, char *err, size_t errlen)
{
    char byte = 0;
    int rc = 0;

    inh->served = 1;
    /* The pid file names us before the predecessor lets go: whoever reads it between the
     * two finds a process that serves. */
    if (path != NULL && pidfile_take_over(pf, path, err, errlen) < 0)
        log_error("upgrade: %s", err);
    if ((rc = upgrade_send(inh->conn, "R", 1, NULL, 0, timeout_ms)) < 0 ||
        (rc = upgrade_recv(inh->conn, &byte, 1, NULL, NULL, timeout_ms)) < 0 || byte != 'K') {
        snprintf(err, errlen, "the previous process did not confirm the handoff: %s",
                 rc < 0 ? strerror(-rc) : "unexpected answer");
        return rc < 0 ? rc : -EPROTO;
    }
    return 0;
}

/* A unix listener nobody will use again leaves no file behind: the predecessor left it
 * to us (and a failed successor must not take it from under the predecessor). */
static void upgrade_unlink_unix(int fd)
{
    struct sockaddr_un sun;
    socklen_t len = sizeof(sun);

    memset(&sun, 0, sizeof(sun));
    if (getsockname(fd, (struct sockaddr *)&sun, &len) == 0 && sun.sun_family == AF_UNIX &&
        len > offsetof(struct sockaddr_un, sun_path) && sun.sun_path[0] == '/')
        unlink(sun.sun_path);       /* ENOENT for the next worker's copy: harmless */
}

void upgrade_inherit_free(struct upgrade_inherit *inh)
{
    if (inh == NULL)
        return;
    for (size_t i = 0; i < inh->n; i++) {
        const struct upgrade_entry *e = &inh->e[i];
        /* one line per address (a pool's sockets come one per worker, in a row) */
        if (e->fd >= 0 && inh->served && (i == 0 || inh->e[i - 1].kind != e->kind ||
                                          strcmp(inh->e[i - 1].addr, e->addr) != 0))
            log_notice("upgrade: %s %s of the previous process is not in this configuration: "
                       "closed", upgrade_kind_names[e->kind], e->addr);
        if (e->fd >= 0 && inh->served)
            upgrade_unlink_unix(e->fd);
        if (e->fd >= 0)
            close(e->fd);
    }
    for (size_t i = 0; i < inh->n; i++)
        free(inh->e[i].addr);
    free(inh->e);
    if (inh->conn >= 0)
        close(inh->conn);
    free(inh);
}
