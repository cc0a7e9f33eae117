/* Logging: level-gated macros that skip evaluating their arguments, file:line on each message. */
#ifndef RL_LOG_H
#define RL_LOG_H

#include <stdatomic.h>
#include <stddef.h>

enum log_level {
    LOG_EMERG_ = 0, LOG_ALERT_, LOG_CRIT_, LOG_ERR_, LOG_WARN_, LOG_NOTICE_, LOG_INFO_,
    LOG_DEBUG_, LOG_VERB_, LOG_VVERB_, LOG_VVVERB_, LOG_PVERB_
};

extern atomic_int log_level_current;   /* the only process-wide setting: read-mostly */

int  log_init(int level, const char *path);  /* 0 or -errno */
/* Reopen the log file by its path (SIGHUP, SIGUSR1: after logrotate moved it away). The new
 * file takes over the descriptor number the workers write to (dup2), so no thread ever writes
 * to a closed or reused descriptor. 0, or -errno (the old file stays in use); 0 on stderr. */
int  log_reopen(void);
void log_set_level(int level);
/* Move the level by delta (SIGTTIN +1, SIGTTOU -1), clamped to LOG_EMERG_..LOG_PVERB_;
 * returns the new level. */
int  log_level_step(int delta);
void log_write(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Log `what`, the byte count n and a hex dump of at most the first
 * LOG_HEX_PREFIX bytes of p (protocol garbage from a peer, which may hold
 * cached values: never more). */
#define LOG_HEX_PREFIX 32
void log_hexdump(int level, const char *file, int line, const char *what, const char *p, size_t n);

#define log_enabled(lvl) ((lvl) <= atomic_load_explicit(&log_level_current, memory_order_relaxed))
#define log_at(lvl, ...)                                                    \
    do {                                                                    \
        if (log_enabled(lvl))                                               \
            log_write((lvl), __FILE__, __LINE__, __VA_ARGS__);              \
    } while (0)

/* Written whatever the level: what an operator asked for (a level change, a state dump). */
#define log_always(...) log_write(LOG_NOTICE_, __FILE__, __LINE__, __VA_ARGS__)

#define log_error(...)  log_at(LOG_ERR_, __VA_ARGS__)
#define log_warn(...)   log_at(LOG_WARN_, __VA_ARGS__)
#define log_notice(...) log_at(LOG_NOTICE_, __VA_ARGS__)
#define log_info(...)   log_at(LOG_INFO_, __VA_ARGS__)
#define log_debug(...)  log_at(LOG_DEBUG_, __VA_ARGS__)

#endif
