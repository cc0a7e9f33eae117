/* Intrusive chained hash tables of entries that carry their own key: one find, add and grow for the near cache, client tracking and leases. */
#ifndef RL_KEYTAB_H
#define RL_KEYTAB_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * An entry embeds a `struct keytab_node` and keeps its key's bytes at a fixed distance
 * from it (a flexible `char key[]` at the entry's end, as the entries here are
 * allocated): `key_off`, given once to keytab_init as
 * offsetof(entry, key) - offsetof(entry, node). The caller hashes the key (XXH3) and
 * recovers the entry from its node with KEYTAB_DATA. The table doubles its chains when
 * it holds as many entries as chains; without the memory the chains grow longer.
 */
struct keytab_node {
    struct keytab_node *next;
    uint64_t            hash;
    uint32_t            klen;
};

struct keytab {
    struct keytab_node **tab;
    uint32_t             mask, n;
    size_t               key_off;
};

#define KEYTAB_DATA(node, type, member) \
    ((type *)(void *)((char *)(node) - offsetof(type, member)))

/* cap: the chains to start with, a power of two. 0, or -1 without memory. */
int  keytab_init(struct keytab *t, uint32_t cap, size_t key_off);
/* The chains go; the entries are the caller's (free them first). */
void keytab_free(struct keytab *t);

static inline const char *keytab_key(const struct keytab *t, const struct keytab_node *e)
{
    return (const char *)e + t->key_off;
}

static inline struct keytab_node *keytab_find(const struct keytab *t, uint64_t h,
                                              const char *k, size_t n)
{
    for (struct keytab_node *e = t->tab[h & t->mask]; e != NULL; e = e->next)
        if (e->hash == h && e->klen == n && memcmp(keytab_key(t, e), k, n) == 0)
            return e;
    return NULL;
}

/* e (its hash, klen and key set) joins the table. */
void keytab_add(struct keytab *t, struct keytab_node *e);
void keytab_remove(struct keytab *t, struct keytab_node *e);

#endif
