/* Logging to stderr or a file, one write(2) per message so lines from workers never interleave. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"

atomic_int log_level_current = LOG_NOTICE_;
/* Set at start (before the workers run); a rotation keeps the number and swaps the file. */
static atomic_int log_fd = STDERR_FILENO;
static char log_path[1024];

int log_init(int level, const char *path)
{
    atomic_store(&log_level_current, level);
    if (path == NULL || *path == '\0') {
        int old = atomic_exchange(&log_fd, STDERR_FILENO);
        if (old != STDERR_FILENO)
            close(old);
        log_path[0] = '\0';
        return 0;
    }
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    snprintf(log_path, sizeof(log_path), "%s", path);
    int old = atomic_exchange(&log_fd, fd);
    if (old != STDERR_FILENO)
        close(old);
    return 0;
}

int log_reopen(void)
{
    int cur = atomic_load(&log_fd);
    if (log_path[0] == '\0' || cur == STDERR_FILENO)
        return 0;
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    /* dup2 replaces the file behind `cur` in one step: a worker's write(2) goes to the
     * old file or the new one, never to a descriptor that is closed or reused. */
    int rc = dup3(fd, cur, O_CLOEXEC) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

void log_set_level(int level)
{
    if (level < LOG_EMERG_)
        level = LOG_EMERG_;
    if (level > LOG_PVERB_)
        level = LOG_PVERB_;
    atomic_store(&log_level_current, level);
}

int log_level_step(int delta)
{
    int level = atomic_load(&log_level_current) + delta;
    log_set_level(level);
    return atomic_load(&log_level_current);
}

void log_write(int level, const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    struct timeval tv;
    struct tm tm;
    const char *base = strrchr(file, '/');

    (void)level;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(msg, sizeof(msg), "[%Y-%m-%d %H:%M:%S", &tm);
    n += (size_t)snprintf(msg + n, sizeof(msg) - n, ".%03ld] %s:%d ", (long)tv.tv_usec / 1000,
                          base ? base + 1 : file, line);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg + n, sizeof(msg) - n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    n += (size_t)m;
    if (n > sizeof(msg) - 2)
        n = sizeof(msg) - 2;
    msg[n++] = '\n';
    ssize_t w = write(atomic_load_explicit(&log_fd, memory_order_relaxed), msg, n);
    (void)w;
}

void log_hexdump(int level, const char *file, int line, const char *what, const char *p, size_t n)
{
    /* Bytes from a server may be a cached value: log how many there are and
     * a hex prefix of at most LOG_HEX_PREFIX of them, never the value. */
    char hex[LOG_HEX_PREFIX * 2 + 1];
    size_t k = n < LOG_HEX_PREFIX ? n : LOG_HEX_PREFIX;

    for (size_t i = 0; i < k; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)p[i]);
    hex[2 * k] = '\0';
    log_write(level, file, line, "%s (%zu bytes, first %zu in hex): %s%s", what, n, k, hex,
              n > k ? "..." : "");
}
