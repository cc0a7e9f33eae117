/* Hot reload: read and validate a new file, build rings off the workers' loops, publish, report. */
#ifndef RL_RELOAD_H
#define RL_RELOAD_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "lib/buf.h"

struct proxy;
struct snapshot;

/* What one reload did to one pool (the numbers ringleader-ring --diff prints). */
struct reload_pool_report {
    char     name[128];
    uint64_t old_epoch, new_epoch;      /* 0: the pool did not exist on that side */
    uint64_t old_checksum, new_checksum;
    uint32_t added, removed;            /* servers, matched by identity and address */
    double   moved;                     /* fraction of the keyspace whose owner changed */
    double   floor;                     /* least any scheme must move for that change */
};

/* The history readers on other threads see (stats, admin), under mu. */
struct reload_state {
    uv_mutex_t  mu;
    uint64_t    count;              /* reloads applied */
    uint64_t    failed;             /* reloads refused (invalid file, listener that cannot open ...) */
    uint64_t    last_us;            /* wall clock of the last attempt */
    int         last_ok;
    char        last_trigger[32];
    char        last_error[1024];
    char        restart_needed[512];/* settings that changed but need a restart */
    struct reload_pool_report *pools;
    uint32_t    npools;
};

/* POST /reload's handshake between the admin thread and the main loop. */
enum reload_admin {
    RELOAD_ADMIN_IDLE,      /* no request */
    RELOAD_ADMIN_ASKED,     /* the admin thread waits for the main loop */
    RELOAD_ADMIN_ANSWERED   /* status and text are set */
};

struct reload {
    struct proxy       *p;
    struct reload_state st;
    /* workers acknowledge a published snapshot */
    uv_async_t          ack_async;
    atomic_uint         acks;
    atomic_uint         worker_errors;
    struct snapshot    *old;        /* released once every worker moved on */
    int                 pending;    /* another reload asked while one runs */
    /* POST /reload */
    uv_async_t          admin_async;
    uv_mutex_t          admin_mu;
    uv_cond_t           admin_cond;
    enum reload_admin   admin_state;
    int                 admin_status;
    char                admin_text[1200];
    /* watch: the config file's directory, changes debounced */
    uv_fs_event_t       watch;
    uv_timer_t          debounce;
    int                 watching;
    char                watch_name[256];
};

/* Set up reload state on the proxy's main loop; with `watch` the config
 * file's directory is watched (atomic renames included) and changes reload
 * after a short debounce. 0 or -ENOMEM. */
int  reload_init(struct proxy *p, int watch);
void reload_close(struct proxy *p);   /* close handles (main loop still runs); answers a
                                         waiting POST /reload with 503 */
void reload_free(struct proxy *p);    /* after the main loop ended */

/*
 * Reload now (main thread). Returns 0 when the new configuration was
 * published (workers switch at their next safe point), -1 when it was
 * refused: the old configuration keeps serving; the reason is in err and
 * in stats. Listening sockets the new configuration needs are opened here,
 * so one that cannot be opened refuses the reload.
 */
int  reload_run(struct proxy *p, const char *trigger, char *err, size_t errlen);
/* The same with a configuration already loaded (conf, owned; NULL: refused with err), for
 * sources other than the file: DNS discovery (resolve.c). Only when !reload_busy(p). */
int  reload_apply(struct proxy *p, const char *trigger, struct conf *conf, char *err,
                  size_t errlen);

/*
 * Publish snap (built from the configuration in effect or a new one) as the current
 * snapshot: every worker adopts it at its next safe point; the previous one is released
 * once all have (main thread). Only when !reload_busy(p): one publish at a time. A
 * Redis Cluster pool's new slot map is published this way too (cluster.c).
 */
void reload_publish(struct proxy *p, struct snapshot *snap);
/* A Redis Cluster pool's map changed: the configuration in effect built again with every
 * cluster's current map and published (cluster.h's cluster_rebuild_fn). */
int  reload_rebuild(struct proxy *p, char *err, size_t errlen);
/* Whether a published snapshot is still being adopted (or reloads are not set up). */
int  reload_busy(const struct proxy *p);

/* A worker adopted the published snapshot (worker thread); `failed`: it
 * could not apply every pool (out of memory). */
void reload_worker_adopted(struct proxy *p, int failed);

/* POST /reload (admin thread): ask the main loop to reload and wait for its
 * answer. Returns the HTTP status (200 applied, 409 busy, 422 refused, 503
 * shutting down) with the text in out. */
int  reload_admin_request(struct proxy *p, struct buf *out);

#endif
