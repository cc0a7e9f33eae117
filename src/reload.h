/* Hot reload: read and validate a new file, build rings off the workers' loops, publish, report. */
#ifndef RL_RELOAD_H
#define RL_RELOAD_H

#include <stdint.h>
#include <uv.h>

#include "buf.h"

struct proxy;

/* What one reload did to one pool (the numbers ringleader-ring --diff prints). */
struct reload_pool_report {
    char     name[128];
    uint64_t old_epoch, new_epoch;      /* 0: the pool did not exist on that side */
    uint64_t old_checksum, new_checksum;
    uint32_t added, removed;            /* servers, matched by identity and address */
    double   moved;                     /* fraction of the keyspace whose owner changed */
    double   floor;                     /* least any scheme must move for that change */
};

struct reload_state {
    uv_mutex_t  mu;                 /* readers (stats, admin) vs the main thread */
    uint64_t    count;              /* reloads applied */
    uint64_t    failed;             /* reloads refused (invalid file ...) */
    uint64_t    last_us;            /* wall clock of the last attempt */
    int         last_ok;
    char        last_trigger[32];
    char        last_error[1024];
    char        restart_needed[512];/* settings that changed but need a restart */
    struct reload_pool_report *pools;
    uint32_t    npools;
    uv_fs_event_t watch;
    uv_timer_t  debounce;
    int         watching;
    char        watch_name[256];
};

/* Set up reload state; with `watch` the config file's directory is watched
 * (atomic renames included) and changes reload after a short debounce. */
int  reload_init(struct proxy *p, int watch);
void reload_close(struct proxy *p);   /* close handles (main loop still runs) */
void reload_free(struct proxy *p);    /* after the main loop ended */

/*
 * Reload now (main thread). Returns 0 when the new configuration was
 * published (workers switch at their next safe point), -1 when it was
 * refused: the old rings keep serving; the reason is in err and in stats.
 */
int  reload_run(struct proxy *p, const char *trigger, char *err, size_t errlen);

/* A worker acknowledged the new snapshot (main thread, via async). */
void reload_on_ack(struct proxy *p);

#endif
