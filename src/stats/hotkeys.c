/* struct hotkeys: space-saving sketch (stream-summary order, grouped tag index), two generations. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL     /* the hash of a short key is a few ns: keep it out of a PLT call */
#include <xxhash.h>

#include "lib/invariant.h"
#include "stats/hotkeys.h"

#define HK_GMASK   (HOTKEYS_GROUPS - 1)
#define HK_SPILLED 0xFFFF
#define HK_LO      0x0101010101010101ULL
#define HK_LOW7    0x7F7F7F7F7F7F7F7FULL

_Static_assert((HOTKEYS_GROUPS & HK_GMASK) == 0, "the group count must be a power of two");
_Static_assert(HOTKEYS_GROUPS * 8 >= 4 * HOTKEYS_CAPACITY, "keep the index at most 1/4 full");
_Static_assert(HOTKEYS_CAPACITY < 255 && HOTKEYS_KEY_MAX < 255, "uint8_t fields");

/* A cut key's sketch hash is its kept bytes' hash xor place times an odd constant: one
 * hash per place (multiplying by an odd number is a bijection), so cut keys that route
 * apart are told apart by the hash compare alone. */
#define HK_PLACE_MIX 0x9E3779B97F4A7C15ULL

/* Bytes held for a counter length (HOTKEYS_KEY_MAX + 1 marks a cut key). */
static inline size_t key_held(size_t klen)
{
    return klen > HOTKEYS_KEY_MAX ? HOTKEYS_KEY_MAX : klen;
}

/* The sketch hash of a key; *klen becomes its counter length (see key_held). */
static inline uint64_t key_hash(const char *key, size_t *klen, uint64_t place)
{
    if (__builtin_expect(*klen <= HOTKEYS_KEY_MAX, 1))
        return XXH3_64bits(key, *klen);
    *klen = HOTKEYS_KEY_MAX + 1;
    return XXH3_64bits(key, HOTKEYS_KEY_MAX) ^ (place * HK_PLACE_MIX);
}

static void gen_clear(struct hotkeys_gen *g)
{
    g->n = 0;
    memset(g->group, 0, sizeof(g->group));
    memset(g->away, 0, sizeof(g->away));
    g->nspill = 0;
    g->nfree = HOTKEYS_CAPACITY;
    for (unsigned i = 0; i < HOTKEYS_CAPACITY; i++)
        g->bfree[i] = (uint8_t)i;
}

void hotkeys_init(struct hotkeys *hk, uint64_t window_ms, uint64_t now_ms)
{
    hk->window_ms = window_ms ? window_ms : 1;
    hk->cur_start_ms = now_ms;
    hk->cur = 0;
    gen_clear(&hk->gen[0]);
    gen_clear(&hk->gen[1]);
}

/* Make gen[cur] the generation holding now_ms. */
static void hk_rotate(struct hotkeys *hk, uint64_t now_ms)
{
    if (now_ms < hk->cur_start_ms + hk->window_ms)
        return;
    uint64_t windows = (now_ms - hk->cur_start_ms) / hk->window_ms;
    hk->cur ^= 1;
    gen_clear(&hk->gen[hk->cur]);
    if (windows >= 2)                       /* the old current is older than one window */
        gen_clear(&hk->gen[hk->cur ^ 1]);
    hk->cur_start_ms += windows * hk->window_ms;
}

/* ---- stream-summary order: order[] sorted by count descending, runs of equal count */

static inline struct hotkeys_bucket *bucket_of(struct hotkeys_gen *g, unsigned ci)
{
    return &g->bucket[g->bkt[ci]];
}

static inline uint8_t bucket_new(struct hotkeys_gen *g, uint64_t count, unsigned at)
{
    RL_ASSERT(g->nfree > 0);                /* never empty: at most one run per counter */
    uint8_t b = g->bfree[--g->nfree];
    g->bucket[b] = (struct hotkeys_bucket){ count, (uint8_t)at, (uint8_t)at };
    return b;
}

static inline void order_set(struct hotkeys_gen *g, unsigned at, uint8_t ci)
{
    g->order[at] = ci;
    g->pos[ci] = (uint8_t)at;
}

/* Count one more for counter ci: move it to the front of its run, then into the run before
 * it when that run's count is one more, else into a run of its own. */
static void order_increment(struct hotkeys_gen *g, uint8_t ci)
{
    uint8_t b = g->bkt[ci];
    struct hotkeys_bucket *run = &g->bucket[b];
    unsigned f = run->first;
    unsigned p = g->pos[ci];
    uint64_t count = run->count + 1;

    if (p != f) {
        order_set(g, p, g->order[f]);
        order_set(g, f, ci);
    }
    struct hotkeys_bucket *prev = f > 0 ? bucket_of(g, g->order[f - 1]) : NULL;
    int join = prev != NULL && prev->count == count;
    if (run->last == f) {                   /* ci was alone in its run */
        if (join) {
            prev->last = (uint8_t)f;
            g->bkt[ci] = g->bkt[g->order[f - 1]];
            RL_ASSERT(g->nfree < HOTKEYS_CAPACITY);     /* b was in use: not free already */
            g->bfree[g->nfree++] = b;
        } else {
            run->count = count;
        }
        return;
    }
    run->first = (uint8_t)(f + 1);
    if (join) {
        prev->last = (uint8_t)f;
        g->bkt[ci] = g->bkt[g->order[f - 1]];
    } else {
        g->bkt[ci] = bucket_new(g, count, f);
    }
}

/* Append counter ci (== g->n) with a count of 1, the least a counter can hold. */
static void order_append(struct hotkeys_gen *g, uint8_t ci)
{
    RL_ASSERT(g->n < HOTKEYS_CAPACITY && ci == g->n);
    unsigned at = g->n++;
    order_set(g, at, ci);
    if (at > 0 && bucket_of(g, g->order[at - 1])->count == 1) {
        g->bkt[ci] = g->bkt[g->order[at - 1]];
        bucket_of(g, ci)->last = (uint8_t)at;
    } else {
        g->bkt[ci] = bucket_new(g, 1, at);
    }
}

static inline uint64_t counter_count(const struct hotkeys_gen *g, const struct hotkeys_counter *c)
{
    return g->bucket[g->bkt[c - g->c]].count;
}

/* ---- index: a key's hash picks two groups of eight slots; a slot holds a tag byte of the
 * hash and a counter. A key goes into its first group unless that is full, then into its
 * second; away[] counts, per first group, its keys held elsewhere, so a lookup compares
 * the eight tags of one group at once (no probing loop, whose length would be a branch
 * miss per touch) and looks further only when away[] says so. A deletion clears one byte.
 * When both groups are full (64 keys over 512 slots: all but impossible) the counter goes
 * to a small spill list. */

static inline uint8_t hash_tag(uint64_t h)
{
    uint8_t t = (uint8_t)(h >> 56);
    return t ? t : 1;                       /* 0 marks an empty slot */
}

static inline unsigned group_a(uint64_t h)
{
    return (unsigned)h & HK_GMASK;
}

static inline unsigned group_b(uint64_t h)
{
    unsigned a = (unsigned)h & HK_GMASK, b = (unsigned)(h >> 20) & HK_GMASK;
    return b != a ? b : a ^ 1;
}

/* The high bit of each byte of x that is zero (exact: no borrow between bytes). */
static inline uint64_t zero_bytes(uint64_t x)
{
    uint64_t y = (x & HK_LOW7) + HK_LOW7;
    return ~(y | x | HK_LOW7);
}

static inline int counter_is(const struct hotkeys_gen *g, unsigned ci, uint64_t h,
                             const char *key, size_t len)
{
    const struct hotkeys_counter *c = &g->c[ci];
    return c->hash == h && c->len == len && memcmp(c->key, key, key_held(len)) == 0;
}

static inline int group_find(const struct hotkeys_gen *g, unsigned gi, uint64_t h, uint8_t t,
                             const char *key, size_t len)
{
    const struct hotkeys_group *gr = &g->group[gi];
    for (uint64_t m = zero_bytes(gr->tags ^ (HK_LO * t)); m != 0; m &= m - 1) {
        unsigned ci = gr->ci[__builtin_ctzll(m) >> 3];
        if (counter_is(g, ci, h, key, len))
            return (int)ci;
    }
    return -1;
}

/* The counter holding the key, or -1. */
static int index_find(const struct hotkeys_gen *g, uint64_t h, const char *key, size_t len)
{
    uint8_t t = hash_tag(h);
    unsigned a = group_a(h);
    int ci = group_find(g, a, h, t, key, len);
    if (ci >= 0 || g->away[a] == 0)
        return ci;
    ci = group_find(g, group_b(h), h, t, key, len);
    for (uint32_t i = 0; ci < 0 && i < g->nspill; i++)
        if (counter_is(g, g->spill[i], h, key, len))
            ci = g->spill[i];
    return ci;
}

static void index_delete(struct hotkeys_gen *g, uint8_t ci)
{
    unsigned w = g->where[ci];
    unsigned a = group_a(g->c[ci].hash);
    if (w == HK_SPILLED || w >> 3 != a) {
        RL_ASSERT(g->away[a] > 0);          /* counted when inserted: a wrap hides keys */
        g->away[a]--;
    }
    if (w == HK_SPILLED) {
        for (uint32_t i = 0; i < g->nspill; i++)
            if (g->spill[i] == ci) {
                g->spill[i] = g->spill[--g->nspill];
                break;
            }
        return;
    }
    g->group[w >> 3].tags &= ~(0xFFULL << ((w & 7) * 8));
}

/* Into the first group when it has room (nearly always: it holds one key on average),
 * else the second, else the spill list. */
static void index_insert(struct hotkeys_gen *g, uint8_t ci, uint64_t h)
{
    unsigned a = group_a(h), gi = a;
    uint64_t e = zero_bytes(g->group[a].tags);
    if (e == 0) {
        g->away[a]++;
        gi = group_b(h);
        e = zero_bytes(g->group[gi].tags);
        if (e == 0) {
            RL_ASSERT(g->nspill < HOTKEYS_CAPACITY);    /* one entry per counter at most */
            g->spill[g->nspill++] = ci;
            g->where[ci] = HK_SPILLED;
            return;
        }
    }
    unsigned way = (unsigned)__builtin_ctzll(e) >> 3;
    g->group[gi].tags |= (uint64_t)hash_tag(h) << (way * 8);
    g->group[gi].ci[way] = ci;
    g->where[ci] = (uint16_t)(gi * 8 + way);
}

/* Copy a key of at most HOTKEYS_KEY_MAX bytes. GCC inlines memcpy of a bounded variable
 * length as `rep movsq`, whose start-up cost dominated a touch; 8-byte moves (the last one
 * overlapping) are a few cycles and never read past src + len. */
static inline void key_copy(char *dst, const char *src, size_t len)
{
    if (len >= 8) {
        for (size_t i = 0; i + 8 < len; i += 8)
            memcpy(dst + i, src + i, 8);
        memcpy(dst + len - 8, src + len - 8, 8);
    } else if (len >= 4) {                  /* short keys the same way: two moves that */
        memcpy(dst, src, 4);                /* may overlap, not a byte loop */
        memcpy(dst + len - 4, src + len - 4, 4);
    } else if (len >= 2) {
        memcpy(dst, src, 2);
        memcpy(dst + len - 2, src + len - 2, 2);
    } else if (len == 1) {
        dst[0] = src[0];
    }
}

void hotkeys_touch(struct hotkeys *hk, const char *key, size_t len, uint64_t place,
                   uint64_t now_ms)
{
    if (now_ms >= hk->cur_start_ms + hk->window_ms)
        hk_rotate(hk, now_ms);
    struct hotkeys_gen *g = &hk->gen[hk->cur];
    uint64_t h = key_hash(key, &len, place);
    int found = index_find(g, h, key, len);
    struct hotkeys_counter *c;
    uint8_t ci;

    if (found >= 0) {
        order_increment(g, (uint8_t)found);
        return;
    }
    if (g->n < HOTKEYS_CAPACITY) {
        ci = (uint8_t)g->n;
        c = &g->c[ci];
        c->error = 0;
        c->hash = h;
        c->place = place;
        c->len = (uint8_t)len;
        key_copy(c->key, key, key_held(len));
        index_insert(g, ci, h);
        order_append(g, ci);
        return;
    }
    /* Full: the least counted key gives its counter (and its count, as error) to this one. */
    ci = g->order[HOTKEYS_CAPACITY - 1];
    c = &g->c[ci];
    index_delete(g, ci);
    index_insert(g, ci, h);
    c->error = counter_count(g, c);
    c->hash = h;
    c->place = place;
    c->len = (uint8_t)len;
    key_copy(c->key, key, key_held(len));
    order_increment(g, ci);
}

void hotkeys_touch_n(struct hotkeys *hk, const char *key, size_t len, uint64_t place,
                     uint64_t now_ms, uint32_t n)
{
    if (n == 0)
        return;
    hotkeys_touch(hk, key, len, place, now_ms);     /* found or taken in: counted once */
    struct hotkeys_gen *g = &hk->gen[hk->cur];
    uint64_t h = key_hash(key, &len, place);
    int found = index_find(g, h, key, len);
    RL_ASSERT(found >= 0);
    for (uint32_t i = 1; i < n && found >= 0; i++)
        order_increment(g, (uint8_t)found);
}

/* ---- reading */

static uint64_t gen_floor(const struct hotkeys_gen *g)
{
    return g->n == HOTKEYS_CAPACITY ? counter_count(g, &g->c[g->order[g->n - 1]]) : 0;
}

/* An entry's key, from its counter. */
static void entry_fill(struct hotkeys_entry *e, const struct hotkeys_counter *c)
{
    e->len = (uint32_t)key_held(c->len);
    e->cut = c->len > HOTKEYS_KEY_MAX;
    e->place = c->place;
    memcpy(e->key, c->key, e->len);
}

void hotkeys_snapshot(struct hotkeys *hk, uint64_t now_ms, struct hotkeys_snapshot *snap)
{
    hk_rotate(hk, now_ms);
    const struct hotkeys_gen *cur = &hk->gen[hk->cur];
    const struct hotkeys_gen *prev = &hk->gen[hk->cur ^ 1];
    uint64_t fcur = gen_floor(cur), fprev = gen_floor(prev);
    size_t n = 0;

    snap->floor = fcur + fprev;
    for (uint32_t i = 0; i < cur->n; i++) {
        const struct hotkeys_counter *c = &cur->c[i];
        struct hotkeys_entry *e = &snap->e[n++];
        int pi = index_find(prev, c->hash, c->key, c->len);
        e->count = counter_count(cur, c);
        e->error = c->error;
        if (pi >= 0) {
            e->count += counter_count(prev, &prev->c[pi]);
            e->error += prev->c[pi].error;
        } else {
            e->count += fprev;
            e->error += fprev;
        }
        entry_fill(e, c);
    }
    for (uint32_t i = 0; i < prev->n; i++) {
        const struct hotkeys_counter *c = &prev->c[i];
        if (index_find(cur, c->hash, c->key, c->len) >= 0)
            continue;                       /* already listed with its current count */
        struct hotkeys_entry *e = &snap->e[n++];
        e->count = counter_count(prev, c) + fcur;
        e->error = c->error + fcur;
        entry_fill(e, c);
    }
    snap->n = n;
}

static int gen_verify(const struct hotkeys_gen *g)
{
    uint8_t seen[HOTKEYS_CAPACITY] = { 0 };
    unsigned runs = 0;
    if (g->n > HOTKEYS_CAPACITY)
        return -__LINE__;
    for (unsigned at = 0; at < g->n; at++) {
        unsigned ci = g->order[at];
        if (ci >= g->n || seen[ci]++ || g->pos[ci] != at)
            return -__LINE__;
        const struct hotkeys_bucket *b = &g->bucket[g->bkt[ci]];
        if (at < b->first || at > b->last || b->last >= g->n || b->count == 0)
            return -__LINE__;
        if (at == b->first) {
            runs++;
            if (at > 0 && g->bucket[g->bkt[g->order[at - 1]]].count <= b->count)
                return -__LINE__;
        } else if (g->bkt[g->order[at - 1]] != g->bkt[ci]) {
            return -__LINE__;
        }
        const struct hotkeys_counter *c = &g->c[ci];
        if (index_find(g, c->hash, c->key, c->len) != (int)ci)
            return -__LINE__;
        unsigned w = g->where[ci];
        if (w != HK_SPILLED && (w / 8 >= HOTKEYS_GROUPS || g->group[w / 8].ci[w % 8] != ci ||
                                ((g->group[w / 8].tags >> (w % 8 * 8)) & 0xFF) != hash_tag(c->hash)))
            return -__LINE__;
    }
    if (g->nfree + runs != HOTKEYS_CAPACITY)
        return -__LINE__;
    unsigned tagged = 0;
    for (unsigned gi = 0; gi < HOTKEYS_GROUPS; gi++)
        tagged += 8 - (unsigned)__builtin_popcountll(zero_bytes(g->group[gi].tags));
    if (tagged + g->nspill != g->n)
        return -__LINE__;
    unsigned away[HOTKEYS_GROUPS] = { 0 };
    for (unsigned ci = 0; ci < g->n; ci++)
        if (g->where[ci] == HK_SPILLED || g->where[ci] >> 3 != group_a(g->c[ci].hash))
            away[group_a(g->c[ci].hash)]++;
    for (unsigned gi = 0; gi < HOTKEYS_GROUPS; gi++)
        if (away[gi] != g->away[gi])
            return -__LINE__;
    return 0;
}

void hotkeys_key_groups(const char *key, size_t len, uint64_t place, unsigned *first,
                        unsigned *second)
{
    uint64_t h = key_hash(key, &len, place);
    *first = group_a(h);
    *second = group_b(h);
}

int hotkeys_spilled(const struct hotkeys *hk, const char *key, size_t len, uint64_t place)
{
    uint64_t h = key_hash(key, &len, place);
    for (unsigned gen = 0; gen < 2; gen++) {
        const struct hotkeys_gen *g = &hk->gen[gen];
        for (uint32_t i = 0; i < g->nspill; i++)
            if (counter_is(g, g->spill[i], h, key, len))
                return 1;
    }
    return 0;
}

int hotkeys_verify(const struct hotkeys *hk)
{
    int rc = gen_verify(&hk->gen[0]);
    return rc ? rc : gen_verify(&hk->gen[1]);
}

/* A listed entry and the snapshot it came from, for grouping equal keys. */
struct hk_item {
    const struct hotkeys_entry *e;
    uint64_t floor;
};

/* Keys in byte order, a cut key after the whole one it starts with; cut keys with the
 * same bytes by placement hash (they are one key only when both agree). */
static int entry_cmp_key(const struct hotkeys_entry *x, const struct hotkeys_entry *y)
{
    size_t m = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->key, y->key, m);
    if (r)
        return r;
    if (x->len != y->len)
        return x->len > y->len ? 1 : -1;
    if (x->cut != y->cut)
        return x->cut ? 1 : -1;
    if (x->cut && x->place != y->place)
        return x->place > y->place ? 1 : -1;
    return 0;
}

static int item_cmp_key(const void *a, const void *b)
{
    return entry_cmp_key(((const struct hk_item *)a)->e, ((const struct hk_item *)b)->e);
}

static int entry_cmp_rank(const void *a, const void *b)
{
    const struct hotkeys_entry *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return entry_cmp_key(x, y);
}

int hotkeys_merge(const struct hotkeys_snapshot *const *snaps, size_t n,
                  struct hotkeys_entry *out, size_t k)
{
    size_t total = 0;
    uint64_t floors = 0;
    for (size_t i = 0; i < n; i++) {
        total += snaps[i]->n;
        floors += snaps[i]->floor;
    }
    if (total == 0 || k == 0)
        return 0;

    int rc = -ENOMEM;
    struct hk_item *items = malloc(total * sizeof(*items));
    struct hotkeys_entry *merged = malloc(total * sizeof(*merged));
    if (items == NULL || merged == NULL)
        goto out;

    size_t t = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < snaps[i]->n; j++)
            items[t++] = (struct hk_item){ &snaps[i]->e[j], snaps[i]->floor };
    qsort(items, total, sizeof(*items), item_cmp_key);

    /* A key appears at most once per snapshot, so in a group of equal keys the floors
     * of the snapshots that list it are summed once each; the others count their floor. */
    size_t m = 0;
    for (size_t i = 0; i < total;) {
        size_t j = i;
        uint64_t cnt = 0, err = 0, present_floors = 0;
        for (; j < total && item_cmp_key(&items[i], &items[j]) == 0; j++) {
            cnt += items[j].e->count;
            err += items[j].e->error;
            present_floors += items[j].floor;
        }
        struct hotkeys_entry *e = &merged[m++];
        e->count = cnt + (floors - present_floors);
        e->error = err + (floors - present_floors);
        e->len = items[i].e->len;
        e->cut = items[i].e->cut;
        e->place = items[i].e->place;
        memcpy(e->key, items[i].e->key, e->len);
        i = j;
    }
    qsort(merged, m, sizeof(*merged), entry_cmp_rank);
    if (k > m)
        k = m;
    memcpy(out, merged, k * sizeof(*out));
    rc = (int)k;
out:
    free(merged);
    free(items);
    return rc;
}
