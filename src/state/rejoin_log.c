/* The keys written for a down server's keyspace while it was away: a bounded set shared by every worker, taken when it returns. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "lib/invariant.h"
#include "state/health.h"
#include "state/rejoin_journal.h"
#include "state/rejoin_log.h"

/* ------------------------------------------------------------------ sets */

void rejoin_set_free(struct rejoin_set *s)
{
    free(s->e);
    free(s->slot);
    free(s->keys);
    memset(s, 0, sizeof(*s));
}

int rejoin_set_has_owner(const struct rejoin_set *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->e[i].flags & REJOIN_E_OWNER)
            return 1;
    return 0;
}

static uint64_t rejoin_slot_hash(uint64_t hash, const struct health *also)
{
    return hash ^ ((uint64_t)(uintptr_t)also * UINT64_C(0x9e3779b97f4a7c15));
}

/* Rebuild the index with room for twice the entries; 0 or -ENOMEM (unchanged). */
static int rejoin_set_reindex(struct rejoin_set *s, uint32_t want)
{
    uint32_t nslot = 16;
    while (nslot < want * 2)
        nslot *= 2;
    uint32_t *slot = calloc(nslot, sizeof(*slot));
    if (slot == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t j = (uint32_t)rejoin_slot_hash(s->e[i].hash, s->e[i].also) & (nslot - 1);
        while (slot[j] != 0)
            j = (j + 1) & (nslot - 1);
        slot[j] = i + 1;
    }
    free(s->slot);
    s->slot = slot;
    s->nslot = nslot;
    return 0;
}

int rejoin_set_add(struct rejoin_set *s, uint64_t hash, const char *key, size_t len,
                   struct health *also, unsigned flags)
{
    if ((s->n + 1) * 2 > s->nslot && rejoin_set_reindex(s, s->n + 1) < 0)
        return -1;
    uint32_t j = (uint32_t)rejoin_slot_hash(hash, also) & (s->nslot - 1);
    for (; s->slot[j] != 0; j = (j + 1) & (s->nslot - 1)) {
        struct rejoin_entry *e = &s->e[s->slot[j] - 1];
        if (e->hash == hash && e->also == also && e->len == len &&
            (len == 0 || memcmp(s->keys + e->off, key, len) == 0)) {
            e->flags |= (uint8_t)flags;
            return 0;
        }
    }
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 64;
        struct rejoin_entry *e = realloc(s->e, cap * sizeof(*e));
        if (e == NULL)
            return -1;
        s->e = e;
        s->cap = cap;
    }
    /* The key buffer exists once the set has an entry, even one of empty keys only
     * (Redis has the empty key): keys + off is then always a valid pointer, and a key
     * of length 0 (which may come as NULL) is never handed to memcpy or memcmp. */
    if (s->keys == NULL || s->kcap - s->klen < len) {
        size_t cap = s->kcap ? s->kcap : 4096;
        while (cap - s->klen < len)
            cap *= 2;
        char *k = realloc(s->keys, cap);
        if (k == NULL)
            return -1;
        s->keys = k;
        s->kcap = cap;
    }
    /* Room for the entry and its key, and an entry's narrow fields hold both: a key
     * longer than 64 KiB or keys past 4 GiB would be recorded as another key. */
    RL_ASSERT(s->n < s->cap && s->kcap - s->klen >= len);
    RL_ASSERT(len <= UINT16_MAX && s->klen <= UINT32_MAX);
    if (len > 0)
        memcpy(s->keys + s->klen, key, len);
    s->e[s->n] = (struct rejoin_entry){ .hash = hash, .also = also, .off = (uint32_t)s->klen,
                                        .len = (uint16_t)len, .flags = (uint8_t)flags };
    s->klen += len;
    s->slot[j] = ++s->n;
    return 1;
}

/* ------------------------------------------------------------------ the log */

struct rejoin_log *rejoin_log_new(struct health *h, const char *ident,
                                  struct rejoin_journal *journal)
{
    struct rejoin_log *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    if ((l->ident = strdup(ident)) == NULL) {
        free(l);
        return NULL;
    }
    if (uv_mutex_init(&l->mu) != 0) {
        free(l->ident);
        free(l);
        return NULL;
    }
    l->h = h;
    l->journal = journal;
    return l;
}

void rejoin_log_free(struct rejoin_log *l)
{
    if (l == NULL)
        return;
    rejoin_set_free(&l->set);
    uv_mutex_destroy(&l->mu);
    free(l->ident);
    free(l);
}

static void rejoin_log_publish(struct rejoin_log *l)
{
    atomic_store_explicit(&l->nkeys, l->set.n, memory_order_relaxed);
    atomic_store_explicit(&l->nbytes, l->set.klen, memory_order_relaxed);
}

/* Mark the log overflowed (under its lock), journalled once. */
static void rejoin_log_overflow(struct rejoin_log *l)
{
    if (l->overflowed)
        return;
    l->overflowed = 1;
    l->journalled += (uint64_t)rejoin_journal_overflow(l->journal, l->ident);
}

enum rejoin_add rejoin_log_add(struct rejoin_log *l, const char *key, size_t len,
                               struct health *also, unsigned flags, uint32_t max_keys)
{
    uint64_t hash = XXH3_64bits(key, len);
    enum rejoin_add rc;

    uv_mutex_lock(&l->mu);
    if (health_state(l->h) == HEALTH_UP) {
        rc = REJOIN_IS_UP;
    } else if (len > REJOIN_KEY_MAX || l->set.n >= max_keys ||
               l->set.klen + len > (size_t)max_keys * REJOIN_LOG_BYTES_PER_KEY) {
        /* A key already there would merge, but finding out costs a lookup the
         * full log does not need: it flushes anyway. */
        rejoin_log_overflow(l);
        rc = REJOIN_OVERFLOW;
    } else {
        int a = rejoin_set_add(&l->set, hash, key, len, also, flags);
        if (a < 0) {
            rejoin_log_overflow(l);     /* no memory: flushing stays correct */
            rc = REJOIN_OVERFLOW;
        } else if (a == 0) {
            rc = REJOIN_MERGED;
        } else {
            l->journalled += (uint64_t)rejoin_journal_key(
                l->journal, l->ident, key, len,
                also != NULL && also->rejoin != NULL ? also->rejoin->ident : NULL, flags);
            rc = REJOIN_ADDED;
        }
        rejoin_log_publish(l);
    }
    uv_mutex_unlock(&l->mu);
    return rc;
}

int rejoin_log_take(struct rejoin_log *l, struct rejoin_set *out)
{
    uv_mutex_lock(&l->mu);
    *out = l->set;
    memset(&l->set, 0, sizeof(l->set));
    int over = l->overflowed;
    l->overflowed = 0;
    rejoin_log_publish(l);
    uv_mutex_unlock(&l->mu);
    return over;
}

void rejoin_log_restore(struct rejoin_log *l, const struct rejoin_set *s, uint32_t max_keys,
                        int overflowed)
{
    uv_mutex_lock(&l->mu);
    if (overflowed)
        l->overflowed = 1;
    for (uint32_t i = 0; i < s->n; i++) {
        const struct rejoin_entry *e = &s->e[i];
        if (l->set.n >= max_keys || rejoin_set_add(&l->set, e->hash, s->keys + e->off, e->len,
                                                   e->also, e->flags) < 0) {
            l->overflowed = 1;      /* the journal still has them: no new record */
            break;
        }
    }
    rejoin_log_publish(l);
    uv_mutex_unlock(&l->mu);
}

int rejoin_log_finish(struct rejoin_log *l, struct rejoin_set *out, int drop_owner,
                      uint64_t now_ms)
{
    int done = 0;

    memset(out, 0, sizeof(*out));
    uv_mutex_lock(&l->mu);
    if (drop_owner || (!l->overflowed && !rejoin_set_has_owner(&l->set))) {
        *out = l->set;
        memset(&l->set, 0, sizeof(l->set));
        l->overflowed = 0;
        (void)health_rejoined(l->h, now_ms);
        done = 1;
        rejoin_journal_clear(l->journal, l->ident, l->journalled);
        l->journalled = 0;
        rejoin_log_publish(l);
    }
    uv_mutex_unlock(&l->mu);
    return done;
}

long rejoin_log_forget(struct rejoin_log *l, int *overflowed)
{
    long had = -1;

    uv_mutex_lock(&l->mu);
    *overflowed = l->overflowed;
    if (l->set.n > 0 || l->overflowed || l->journalled > 0) {
        had = (long)l->set.n;
        rejoin_set_free(&l->set);
        l->overflowed = 0;
        rejoin_journal_clear(l->journal, l->ident, l->journalled);
        l->journalled = 0;
        rejoin_log_publish(l);
    }
    uv_mutex_unlock(&l->mu);
    return had;
}

void rejoin_log_size(const struct rejoin_log *l, uint32_t *keys, uint64_t *bytes)
{
    *keys = atomic_load_explicit(&((struct rejoin_log *)l)->nkeys, memory_order_relaxed);
    *bytes = atomic_load_explicit(&((struct rejoin_log *)l)->nbytes, memory_order_relaxed);
}
