/* struct hotkeys: space-saving sketch with an open-addressing index and a min-heap, two generations. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL     /* the hash of a short key is a few ns: keep it out of a PLT call */
#include <xxhash.h>

#include "hotkeys.h"

#define HK_MASK (HOTKEYS_INDEX_SIZE - 1)

_Static_assert((HOTKEYS_INDEX_SIZE & HK_MASK) == 0, "index size must be a power of two");
_Static_assert(HOTKEYS_INDEX_SIZE >= 2 * HOTKEYS_CAPACITY, "index load factor must stay <= 1/2");
_Static_assert(HOTKEYS_CAPACITY < 255 && HOTKEYS_KEY_MAX <= 255, "uint8_t fields");

static void gen_clear(struct hotkeys_gen *g)
{
    g->n = 0;
    memset(g->index, 0, sizeof(g->index));
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

/* ---- min-heap of counts */

static inline void heap_set(struct hotkeys_gen *g, unsigned pos, struct hotkeys_heap_node nd)
{
    g->heap[pos] = nd;
    g->c[nd.ci].heap_pos = (uint8_t)pos;
}

static void heap_down(struct hotkeys_gen *g, unsigned pos)
{
    struct hotkeys_heap_node nd = g->heap[pos];
    for (;;) {
        unsigned l = 2 * pos + 1;
        if (l >= g->n)
            break;
        unsigned m = l;
        if (l + 1 < g->n && g->heap[l + 1].count < g->heap[l].count)
            m = l + 1;
        if (g->heap[m].count >= nd.count)
            break;
        heap_set(g, pos, g->heap[m]);
        pos = m;
    }
    heap_set(g, pos, nd);
}

static void heap_up(struct hotkeys_gen *g, unsigned pos)
{
    struct hotkeys_heap_node nd = g->heap[pos];
    while (pos > 0) {
        unsigned p = (pos - 1) / 2;
        if (g->heap[p].count <= nd.count)
            break;
        heap_set(g, pos, g->heap[p]);
        pos = p;
    }
    heap_set(g, pos, nd);
}

static inline uint64_t counter_count(const struct hotkeys_gen *g, const struct hotkeys_counter *c)
{
    return g->heap[c->heap_pos].count;
}

/* ---- index: linear probing over hash -> counter index + 1 */

/* The slot holding the key, or the empty slot where it would go (never full: load <= 1/2). */
static unsigned index_find(const struct hotkeys_gen *g, uint64_t h, const char *key, size_t len,
                           int *found)
{
    unsigned s = (unsigned)h & HK_MASK;
    for (;;) {
        uint8_t v = g->index[s];
        if (v == 0) {
            *found = 0;
            return s;
        }
        const struct hotkeys_counter *c = &g->c[v - 1];
        if (c->hash == h && c->len == len && memcmp(c->key, key, len) == 0) {
            *found = 1;
            return s;
        }
        s = (s + 1) & HK_MASK;
    }
}

/* Remove slot s, shifting back later entries of the cluster that may sit there. */
static void index_delete(struct hotkeys_gen *g, unsigned s)
{
    unsigned hole = s;
    unsigned j = s;
    for (;;) {
        j = (j + 1) & HK_MASK;
        uint8_t v = g->index[j];
        if (v == 0)
            break;
        unsigned home = (unsigned)g->c[v - 1].hash & HK_MASK;
        /* Move j into the hole unless its home lies cyclically in (hole, j]. */
        if (((j - home) & HK_MASK) >= ((j - hole) & HK_MASK)) {
            g->index[hole] = v;
            hole = j;
        }
    }
    g->index[hole] = 0;
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
    } else {
        for (size_t i = 0; i < len; i++)
            dst[i] = src[i];
    }
}

/* The slot that holds counter ci (it is there: every counter in use is indexed). */
static unsigned index_slot_of(const struct hotkeys_gen *g, uint8_t ci)
{
    unsigned s = (unsigned)g->c[ci].hash & HK_MASK;
    while (g->index[s] != ci + 1)
        s = (s + 1) & HK_MASK;
    return s;
}

void hotkeys_touch(struct hotkeys *hk, const char *key, size_t len, uint64_t now_ms)
{
    if (now_ms >= hk->cur_start_ms + hk->window_ms)
        hk_rotate(hk, now_ms);
    struct hotkeys_gen *g = &hk->gen[hk->cur];
    if (len > HOTKEYS_KEY_MAX)
        len = HOTKEYS_KEY_MAX;
    uint64_t h = XXH3_64bits(key, len);
    int found;
    unsigned s = index_find(g, h, key, len, &found);
    struct hotkeys_counter *c;
    uint8_t ci;

    if (found) {
        c = &g->c[g->index[s] - 1];
        g->heap[c->heap_pos].count++;
        heap_down(g, c->heap_pos);
        return;
    }
    if (g->n < HOTKEYS_CAPACITY) {
        ci = (uint8_t)g->n++;
        c = &g->c[ci];
        c->error = 0;
        c->hash = h;
        c->len = (uint8_t)len;
        key_copy(c->key, key, len);
        g->index[s] = (uint8_t)(ci + 1);
        g->heap[g->n - 1] = (struct hotkeys_heap_node){ 1, ci };
        heap_up(g, g->n - 1);
        return;
    }
    /* Full: the least counted key gives its counter (and its count, as error) to this one. */
    ci = (uint8_t)g->heap[0].ci;
    c = &g->c[ci];
    index_delete(g, index_slot_of(g, ci));
    /* The deletion may have shifted entries: probe again for the first free slot. */
    s = (unsigned)h & HK_MASK;
    while (g->index[s] != 0)
        s = (s + 1) & HK_MASK;
    g->index[s] = (uint8_t)(ci + 1);
    c->error = g->heap[0].count;
    c->hash = h;
    c->len = (uint8_t)len;
    key_copy(c->key, key, len);
    g->heap[0].count++;
    heap_down(g, 0);
}

/* ---- reading */

static uint64_t gen_floor(const struct hotkeys_gen *g)
{
    return g->n == HOTKEYS_CAPACITY ? g->heap[0].count : 0;
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
        int found;
        unsigned s = index_find(prev, c->hash, c->key, c->len, &found);
        e->count = counter_count(cur, c);
        e->error = c->error;
        if (found) {
            e->count += counter_count(prev, &prev->c[prev->index[s] - 1]);
            e->error += prev->c[prev->index[s] - 1].error;
        } else {
            e->count += fprev;
            e->error += fprev;
        }
        e->len = c->len;
        memcpy(e->key, c->key, c->len);
    }
    for (uint32_t i = 0; i < prev->n; i++) {
        const struct hotkeys_counter *c = &prev->c[i];
        int found;
        index_find(cur, c->hash, c->key, c->len, &found);
        if (found)
            continue;                       /* already listed with its current count */
        struct hotkeys_entry *e = &snap->e[n++];
        e->count = counter_count(prev, c) + fcur;
        e->error = c->error + fcur;
        e->len = c->len;
        memcpy(e->key, c->key, c->len);
    }
    snap->n = n;
}

/* A listed entry and the snapshot it came from, for grouping equal keys. */
struct hk_item {
    const struct hotkeys_entry *e;
    uint64_t floor;
};

static int item_cmp_key(const void *a, const void *b)
{
    const struct hotkeys_entry *x = ((const struct hk_item *)a)->e;
    const struct hotkeys_entry *y = ((const struct hk_item *)b)->e;
    size_t m = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->key, y->key, m);
    if (r)
        return r;
    return (x->len > y->len) - (x->len < y->len);
}

static int entry_cmp_rank(const void *a, const void *b)
{
    const struct hotkeys_entry *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    size_t m = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->key, y->key, m);
    if (r)
        return r;
    return (x->len > y->len) - (x->len < y->len);
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
