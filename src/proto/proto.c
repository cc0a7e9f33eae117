/* Helpers shared by the protocol parsers. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "proto/proto.h"

int proto__keys_reserve(struct proto_parser *p, uint32_t n)
{
    if (n <= p->keycap)
        return 0;
    uint32_t cap = p->keycap ? p->keycap : 16;
    while (cap < n) {
        if (cap > UINT32_MAX / 2)
            return -ENOMEM;
        cap *= 2;
    }
    struct proto_key *k = realloc(p->keys, (size_t)cap * sizeof(*k));
    if (k == NULL)
        return -ENOMEM;
    p->keys = k;
    p->keycap = cap;
    return 0;
}

int proto__dec_reserve(struct proto_parser *p, uint32_t n)
{
    if (n <= p->deccap)
        return 0;
    uint32_t cap = p->deccap ? p->deccap : 256;
    while (cap < n) {
        if (cap > UINT32_MAX / 2)
            return -ENOMEM;
        cap *= 2;
    }
    char *d = realloc(p->dec, cap);
    if (d == NULL)
        return -ENOMEM;
    p->dec = d;
    p->deccap = cap;
    return 0;
}

void proto_parser_free(struct proto_parser *p)
{
    free(p->keys);
    free(p->dec);
    p->keys = NULL;
    p->dec = NULL;
    p->keycap = p->deccap = 0;
}
