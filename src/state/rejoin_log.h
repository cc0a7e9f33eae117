/* The keys written for a down server's keyspace while it was away: a bounded set shared by every worker, taken when it returns. */
#ifndef RL_REJOIN_LOG_H
#define RL_REJOIN_LOG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct health;
struct rejoin_journal;

/* What an entry asks for when the server returns. */
#define REJOIN_E_OWNER 0x1      /* delete the key on the returning server itself */
#define REJOIN_E_ALSO  0x2      /* delete it on `also`, the server that took the write */

#define REJOIN_KEY_MAX           1024   /* a longer key is not remembered: the log overflows */
#define REJOIN_LOG_BYTES_PER_KEY 128    /* key bytes allowed per rejoin_log_keys entry */

struct rejoin_entry {
    uint64_t       hash;
    struct health *also;        /* the failover server that took the write, or NULL */
    uint32_t       off;         /* the key: keys[off .. off + len) of its set */
    uint16_t       len;
    uint8_t        flags;       /* REJOIN_E_* */
};

/*
 * A set of entries, unique by (key, also); flags of a repeated key are OR'ed.
 * The log holds one; a rejoin round takes it whole (rejoin_log_take) and owns
 * it then. All zero is an empty set.
 */
struct rejoin_set {
    struct rejoin_entry *e;
    uint32_t             n, cap;
    uint32_t            *slot;  /* open addressing: entry index + 1, 0 empty */
    uint32_t             nslot; /* power of two, or 0 */
    char                *keys;
    size_t               klen, kcap;
};

/*
 * One server's log. Every call takes the log's mutex: only writes of a down
 * server's keys and its rejoin touch it, never a request to a live server.
 * The health record's state is read and changed under the same mutex, which is
 * what makes "the server is up" and "nothing is left to invalidate" one fact.
 */
struct rejoin_log {
    uv_mutex_t             mu;
    struct health         *h;          /* the server it belongs to */
    struct rejoin_set      set;
    int                    overflowed; /* a key was not kept (the bound, or a huge key) */
    atomic_uint            nkeys;      /* for readers without the lock (stats) */
    atomic_uint_fast64_t   nbytes;
    struct rejoin_journal *journal;    /* where additions are journalled, or NULL */
    uint64_t               journalled; /* K records since the last clear */
    char                  *ident;      /* "pool\tident\taddr": the journal's name for it */
    struct rejoin_log     *next;       /* every log of the process (rejoin_store) */
};

/* Outcomes of rejoin_log_add. */
enum rejoin_add {
    REJOIN_ADDED,       /* a new entry (journalled) */
    REJOIN_MERGED,      /* the key was there already */
    REJOIN_OVERFLOW,    /* not kept: the log is full; the rejoin will flush instead */
    REJOIN_IS_UP        /* the server is up by now: route the write again instead */
};

/* A log for server h named `ident` (copied). NULL without memory. */
struct rejoin_log *rejoin_log_new(struct health *h, const char *ident,
                                  struct rejoin_journal *journal);
void rejoin_log_free(struct rejoin_log *l);

/*
 * Remember key[0..len) with flags (REJOIN_E_*) and the server that took the
 * write (also, or NULL), keeping at most max_keys entries (and
 * max_keys x REJOIN_LOG_BYTES_PER_KEY key bytes). Refused with REJOIN_IS_UP
 * when the server's health is HEALTH_UP: the write was routed before it came
 * back, and must be routed again.
 */
enum rejoin_add rejoin_log_add(struct rejoin_log *l, const char *key, size_t len,
                               struct health *also, unsigned flags, uint32_t max_keys);

/* Take every entry into *out (which the caller frees with rejoin_set_free);
 * returns whether the log had overflowed (cleared now). */
int rejoin_log_take(struct rejoin_log *l, struct rejoin_set *out);

/* A round failed: put its entries back (none is lost), and the overflow the
 * round took (rejoin_log_take's answer). */
void rejoin_log_restore(struct rejoin_log *l, const struct rejoin_set *s, uint32_t max_keys,
                        int overflowed);

/*
 * The end of a rejoin: when no entry asks for the returning server itself any
 * more, take the rest (deletes for the failover servers) into *out, move the
 * server from REJOINING to UP, and return 1 — one atomic step for every
 * worker's rejoin_log_add. Returns 0 (nothing changed) while entries for the
 * server remain (writes routed just before it started rejoining).
 * `drop_owner`: after a flush, entries for the server itself are moot: take
 * them too.
 */
int rejoin_log_finish(struct rejoin_log *l, struct rejoin_set *out, int drop_owner,
                      uint64_t now_ms);

/* The server is no longer configured: forget every entry and the overflow, and
 * clear its journal records (they would keep the journal from being truncated).
 * Its health state is left alone. Returns how many entries it had (-1: none,
 * and no overflow or journal record either). */
long rejoin_log_forget(struct rejoin_log *l, int *overflowed);

/* Entries and key bytes now (relaxed atomics: for stats readers). */
void rejoin_log_size(const struct rejoin_log *l, uint32_t *keys, uint64_t *bytes);

/* Whether the set has an entry with REJOIN_E_OWNER. */
int rejoin_set_has_owner(const struct rejoin_set *s);

/* Add to a set (the journal's replay, the log itself): 1 added, 0 merged, -1 no memory.
 * len may be 0 (Redis's empty key; key may be NULL then): a key like any other. */
int rejoin_set_add(struct rejoin_set *s, uint64_t hash, const char *key, size_t len,
                   struct health *also, unsigned flags);

void rejoin_set_free(struct rejoin_set *s);

#endif
