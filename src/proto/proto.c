/* Helpers shared by the protocol parsers. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "proto/proto.h"

/* Grow *mem (of *cap elements of size elem, first the first capacity) by
 * doubling to at least n elements; 0 or -ENOMEM (unchanged). */
static int proto_grow(void **mem, uint32_t *cap, uint32_t n, size_t elem, uint32_t first)
{
    if (n <= *cap)
        return 0;
    uint32_t c = *cap ? *cap : first;
    while (c < n) {
        if (c > UINT32_MAX / 2)
            return -ENOMEM;
        c *= 2;
    }
    void *m = realloc(*mem, (size_t)c * elem);
    if (m == NULL)
        return -ENOMEM;
    *mem = m;
    *cap = c;
    return 0;
}

int proto__keys_grow(struct proto_parser *p, uint32_t n)
{
    void *m = p->keys;
    int rc = proto_grow(&m, &p->keycap, n, sizeof(*p->keys), 16);
    p->keys = m;
    return rc;
}

int proto__dec_reserve(struct proto_parser *p, uint32_t n)
{
    void *m = p->dec;
    int rc = proto_grow(&m, &p->deccap, n, 1, 256);
    p->dec = m;
    return rc;
}

void proto_parser_free(struct proto_parser *p)
{
    free(p->keys);
    free(p->dec);
    p->keys = NULL;
    p->dec = NULL;
    p->keycap = p->deccap = 0;
}
