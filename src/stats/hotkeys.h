/* struct hotkeys: top-k hot keys of a pool over a sliding window (space-saving sketch, bounded memory). */
#ifndef RL_HOTKEYS_H
#define RL_HOTKEYS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Space-saving (Metwally, Agrawal, El Abbadi 2005): HOTKEYS_CAPACITY counters; a key
 * already monitored increments its counter; a new key takes over the counter with the
 * smallest count c, starting at c + 1 with error c. For every monitored key
 *     count - error <= true count <= count,
 * and a key not monitored was seen at most min-count times. Any key seen more than
 * N / HOTKEYS_CAPACITY times in N touches is monitored.
 *
 * A key longer than HOTKEYS_KEY_MAX bytes is kept as its first HOTKEYS_KEY_MAX bytes, marked
 * cut, with its placement hash (the hash the pool's ring places the whole key by): two cut
 * keys are one key when they share those bytes and that hash, and then they share an owner.
 * The reader names the owner of a cut key from its placement hash, never from the bytes
 * kept (their owner is another server's as often as not).
 *
 * Sliding window: two generations of counters. Touches go to the current one; every
 * window_ms it becomes the previous one and a fresh current one starts (after a silence
 * of two windows or more, both are empty). The reported estimate of a key is the SUM of
 * its current and previous generation estimates, so it counts the requests of the last
 * window_ms to 2 * window_ms (the previous full window plus the current partial one).
 * A sum keeps the bounds above true bounds; a weighted blend would not.
 *
 * Concurrency: one writer. hotkeys_touch and hotkeys_snapshot are called by the owner
 * (the worker thread); the owner publishes snapshots (plain data) for the stats reader,
 * which merges the workers' snapshots with hotkeys_merge.
 *
 * Layout per generation: the counters; the stream-summary order of the original paper
 * (counter indices sorted by count, descending, cut into runs of equal count, each run a
 * bucket holding the count once), so that both an increment and finding the least counted
 * key are O(1): an increment swaps the counter to the front of its run and joins it to the
 * run before (count + 1) or to a new run; the victim of an eviction is the last counter;
 * and an index from key hash to counter in groups of eight slots whose tags one 64-bit
 * compare tests (src/hotkeys.c says how). A touch is an inlined XXH3 hash, one group
 * compare, a memcmp and a constant number of small-array moves; a new key adds clearing
 * one slot and filling another.
 */
#define HOTKEYS_CAPACITY   64
#define HOTKEYS_KEY_MAX    128
#define HOTKEYS_GROUPS     64      /* index groups of 8 slots; power of two */
#define HOTKEYS_TOP        20      /* the merged list's length */
#define HOTKEYS_SNAP_MAX   (2 * HOTKEYS_CAPACITY)

struct hotkeys_counter {
    uint64_t hash;
    uint64_t error;
    uint64_t place;                /* the whole key's placement hash */
    uint8_t  len;                  /* <= HOTKEYS_KEY_MAX bytes held, HOTKEYS_KEY_MAX + 1: cut */
    char     key[HOTKEYS_KEY_MAX];
};

/* A run of counters with equal count: order[first..last]. */
struct hotkeys_bucket {
    uint64_t count;
    uint8_t  first, last;
};

/* The small arrays keep probing, deleting and reordering off the 150-byte counters: they
 * touch a counter only when its hash tag matches. */
/* Eight index slots: a tag byte each (0: empty), packed so that one 64-bit compare tests
 * all eight, and the counter each slot points at. */
struct hotkeys_group {
    uint64_t tags;
    uint8_t  ci[8];
};

struct hotkeys_gen {
    uint32_t n;                               /* counters in use */
    uint32_t nfree;                           /* entries in bfree[] */
    uint32_t nspill;                          /* entries in spill[] */
    uint16_t where[HOTKEYS_CAPACITY];         /* counter -> its slot (group * 8 + way), or HK_SPILLED */
    uint8_t  order[HOTKEYS_CAPACITY];         /* counter indices, count descending */
    uint8_t  pos[HOTKEYS_CAPACITY];           /* counter -> its place in order[] */
    uint8_t  bkt[HOTKEYS_CAPACITY];           /* counter -> its bucket */
    uint8_t  bfree[HOTKEYS_CAPACITY];         /* unused buckets */
    uint8_t  spill[HOTKEYS_CAPACITY];         /* counters whose two groups were full */
    uint8_t  away[HOTKEYS_GROUPS];            /* keys of this first group held elsewhere */
    struct hotkeys_group group[HOTKEYS_GROUPS];
    struct hotkeys_bucket bucket[HOTKEYS_CAPACITY];
    struct hotkeys_counter c[HOTKEYS_CAPACITY];
};

struct hotkeys {
    uint64_t window_ms;
    uint64_t cur_start_ms;
    unsigned cur;                             /* 0 or 1: which gen[] is current */
    struct hotkeys_gen gen[2];
};

/* One key's estimate: true count in [count - error, count]. */
struct hotkeys_entry {
    uint64_t count;
    uint64_t error;
    uint64_t place;     /* the placement hash given to hotkeys_touch (the last one seen) */
    uint32_t len;       /* bytes in key[] */
    uint32_t cut;       /* 1: the key was longer than len; its owner is place's, not key[]'s */
    char     key[HOTKEYS_KEY_MAX];
};

/* A worker's window at one moment, as plain data the owner can publish. */
struct hotkeys_snapshot {
    uint64_t floor;     /* a key not listed was seen at most this many times */
    size_t   n;
    struct hotkeys_entry e[HOTKEYS_SNAP_MAX];
};

/* Start empty with a window of window_ms (> 0) beginning at now_ms. */
void hotkeys_init(struct hotkeys *hk, uint64_t window_ms, uint64_t now_ms);

/* Count one request for key (len bytes, any bytes; cut to HOTKEYS_KEY_MAX, see above).
 * place: the key's placement hash in its pool (ring_key_hash of the whole key: the
 * request path has it already), kept for the reader to name a cut key's owner.
 * now_ms is the caller's clock (the loop's cached time), non-decreasing. */
void hotkeys_touch(struct hotkeys *hk, const char *key, size_t len, uint64_t place,
                   uint64_t now_ms);

/* Count n requests for key at once (n >= 1): as n hotkeys_touch calls, with one lookup
 * (a caller that answers many requests itself, the near cache, counts them in batches). */
void hotkeys_touch_n(struct hotkeys *hk, const char *key, size_t len, uint64_t place,
                     uint64_t now_ms, uint32_t n);

/* Fill snap with every monitored key of the window ending at now_ms (current plus
 * previous generation, per the rule above), unsorted. Owner only (it may rotate). */
void hotkeys_snapshot(struct hotkeys *hk, uint64_t now_ms, struct hotkeys_snapshot *snap);

/* 0 when the internal order of both generations is consistent (order[] and pos[] are inverse
 * permutations, counts descend, every run is a maximal span of one count, the index finds
 * every counter); else a negative line number of the broken rule. For tests. */
int hotkeys_verify(const struct hotkeys *hk);

/* The two index groups of a key (and place, as hotkeys_touch), and 1 if some generation
 * keeps it in its spill list. For tests that crowd the index. */
void hotkeys_key_groups(const char *key, size_t len, uint64_t place, unsigned *first,
                        unsigned *second);
int  hotkeys_spilled(const struct hotkeys *hk, const char *key, size_t len, uint64_t place);

/*
 * Merge n workers' snapshots into the k (<= HOTKEYS_TOP is typical) keys with the largest
 * estimated counts, written to out[] sorted by count descending, then by key. A key
 * absent from a snapshot is counted there as that snapshot's floor, with the same error,
 * so the bounds stay true bounds. Returns the number of entries written (0..k), or
 * -ENOMEM. Does not modify the snapshots.
 */
int hotkeys_merge(const struct hotkeys_snapshot *const *snaps, size_t n,
                  struct hotkeys_entry *out, size_t k);

#endif
