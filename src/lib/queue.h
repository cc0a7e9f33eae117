/* Intrusive doubly linked queues: O(1) insert and unlink, no allocation, one idiom for the whole tree. */
#ifndef RL_QUEUE_H
#define RL_QUEUE_H

#include <stddef.h>

#include "lib/invariant.h"

/*
 * A queue is a circular list through a sentinel `struct qnode` (the head);
 * an element embeds a `struct qnode` and is recovered with QUEUE_DATA.
 * An element's node is all zero while it is in no queue (calloc'd or
 * memset objects start that way, and queue_remove leaves it so), which is
 * what queue_linked() tests. A head must be queue_init()ed before use.
 *
 *   head <-> a <-> b <-> c <-> head      queue_first(head) == a
 *
 * Elements may be removed while walking with QUEUE_FOREACH_SAFE.
 */
struct qnode {
    struct qnode *next;
    struct qnode *prev;
};

#define QUEUE_DATA(node, type, field) ((type *)(void *)((char *)(node) - offsetof(type, field)))

static inline void queue_init(struct qnode *head)
{
    head->next = head->prev = head;
}

static inline int queue_empty(const struct qnode *head)
{
    return head->next == head;
}

/* Whether an element's node is in some queue. */
static inline int queue_linked(const struct qnode *n)
{
    return n->next != NULL;
}

static inline void queue_insert_tail(struct qnode *head, struct qnode *n)
{
    RL_ASSERT(head->next != NULL && !queue_linked(n));    /* an initialised queue; n in none */
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}

static inline void queue_insert_head(struct qnode *head, struct qnode *n)
{
    RL_ASSERT(head->next != NULL && !queue_linked(n));
    n->next = head->next;
    n->prev = head;
    head->next->prev = n;
    head->next = n;
}

/* Unlink an element (it must be linked); its node is zero afterwards. */
static inline void queue_remove(struct qnode *n)
{
    RL_ASSERT(queue_linked(n) && n->prev->next == n && n->next->prev == n);
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = NULL;
}

/* The first / last element's node, or NULL when the queue is empty. */
static inline struct qnode *queue_first(const struct qnode *head)
{
    return head->next == head ? NULL : head->next;
}

static inline struct qnode *queue_last(const struct qnode *head)
{
    return head->prev == head ? NULL : head->prev;
}

/* The element after n in the queue headed by head, or NULL at the end. */
static inline struct qnode *queue_next(const struct qnode *head, const struct qnode *n)
{
    return n->next == head ? NULL : n->next;
}

#define QUEUE_FOREACH(n, head) for ((n) = (head)->next; (n) != (head); (n) = (n)->next)

#define QUEUE_FOREACH_SAFE(n, tmp, head) \
    for ((n) = (head)->next, (tmp) = (n)->next; (n) != (head); (n) = (tmp), (tmp) = (n)->next)

#endif
