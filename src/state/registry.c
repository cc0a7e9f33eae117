/* A hashed registry of records by byte-string key (open addressing, XXH3), for records kept across reloads. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "lib/invariant.h"
#include "state/registry.h"

struct registry_slot {
    uint64_t hash;
    char    *key;         /* NULL: empty slot */
    size_t   len;
    void    *value;
};

struct registry {
    size_t                size;     /* of each record */
    size_t                count;
    size_t                cap;      /* power of two */
    struct registry_slot *slots;
};

struct registry *registry_new(size_t size)
{
    struct registry *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->size = size;
    r->cap = 16;
    r->slots = calloc(r->cap, sizeof(*r->slots));
    if (r->slots == NULL) {
        free(r);
        return NULL;
    }
    return r;
}

void registry_free(struct registry *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->cap; i++) {
        free(r->slots[i].key);
        free(r->slots[i].value);
    }
    free(r->slots);
    free(r);
}

/* Double the table; 0 or -1 (the table is unchanged). */
static int registry_grow(struct registry *r)
{
    size_t cap = r->cap * 2;
    struct registry_slot *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return -1;
    size_t moved = 0;
    for (size_t i = 0; i < r->cap; i++) {
        if (r->slots[i].key == NULL)
            continue;
        size_t j = (size_t)r->slots[i].hash & (cap - 1);
        while (slots[j].key != NULL)
            j = (j + 1) & (cap - 1);
        slots[j] = r->slots[i];
        moved++;
    }
    /* The count says how full the table is, which decides when it grows: a count
     * that drifted from the records would let the table fill up (a probe that
     * never ends) or free records still in use. */
    RL_ASSERT(moved == r->count);
    free(r->slots);
    r->slots = slots;
    r->cap = cap;
    return 0;
}

void *registry_get(struct registry *r, const void *key, size_t len)
{
    uint64_t h = XXH3_64bits(key, len);
    size_t i = (size_t)h & (r->cap - 1);

    for (; r->slots[i].key != NULL; i = (i + 1) & (r->cap - 1)) {
        struct registry_slot *s = &r->slots[i];
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)
            return s->value;
    }
    if ((r->count + 1) * 2 > r->cap) {
        if (registry_grow(r) < 0)
            return NULL;
        return registry_get(r, key, len);   /* at most once more: the table now has room */
    }
    char *k = malloc(len ? len : 1);
    void *v = calloc(1, r->size);
    if (k == NULL || v == NULL) {
        free(k);
        free(v);
        return NULL;
    }
    memcpy(k, key, len);
    r->slots[i] = (struct registry_slot){ h, k, len, v };
    r->count++;
    return v;
}

size_t registry_count(const struct registry *r)
{
    return r->count;
}
