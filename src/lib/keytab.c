/* Intrusive chained hash tables of entries that carry their own key (keytab.h). */
#include "config.h"

#include <stdlib.h>

#include "lib/invariant.h"
#include "lib/keytab.h"

int keytab_init(struct keytab *t, uint32_t cap, size_t key_off)
{
    t->tab = calloc(cap, sizeof(*t->tab));
    t->mask = cap - 1;
    t->n = 0;
    t->key_off = key_off;
    return t->tab != NULL ? 0 : -1;
}

void keytab_free(struct keytab *t)
{
    free(t->tab);
    t->tab = NULL;
    t->n = 0;
}

/* Twice the chains; without the memory the chains just grow longer. */
static void keytab_grow(struct keytab *t)
{
    uint32_t cap = (t->mask + 1) * 2;
    struct keytab_node **nt = cap > t->mask + 1 ? calloc(cap, sizeof(*nt)) : NULL;

    if (nt == NULL)
        return;
    for (uint32_t i = 0; i <= t->mask; i++) {
        struct keytab_node *e = t->tab[i], *next;
        for (; e != NULL; e = next) {
            next = e->next;
            e->next = nt[e->hash & (cap - 1)];
            nt[e->hash & (cap - 1)] = e;
        }
    }
    free(t->tab);
    t->tab = nt;
    t->mask = cap - 1;
}

void keytab_add(struct keytab *t, struct keytab_node *e)
{
    if (t->n + 1 > t->mask + 1)
        keytab_grow(t);
    struct keytab_node **head = &t->tab[e->hash & t->mask];
    e->next = *head;
    *head = e;
    t->n++;
}

void keytab_remove(struct keytab *t, struct keytab_node *e)
{
    struct keytab_node **pp = &t->tab[e->hash & t->mask];
    while (*pp != NULL && *pp != e)
        pp = &(*pp)->next;
    RL_ASSERT(*pp == e);        /* in the table it is taken out of */
    if (*pp != e)
        return;
    *pp = e->next;
    e->next = NULL;
    t->n--;
}
