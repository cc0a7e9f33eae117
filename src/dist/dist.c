/* Distribution names, the vtable dispatch, and helpers shared by the schemes. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "dist/dist.h"
#include "hash/hash.h"

/* Every scheme's ops table is referenced strongly (declared in dist.h), so
 * linking dist.o pulls each scheme's object out of libringleader.a. */

static const char *const dist_names[DIST_COUNT] = {
    [DIST_KETAMA] = "ketama",
    [DIST_MODULA] = "modula",
    [DIST_RANDOM] = "random",
    [DIST_RENDEZVOUS] = "rendezvous",
    [DIST_JUMP] = "jump",
    [DIST_MAGLEV] = "maglev",
    [DIST_SLOTS] = "slots",
    [DIST_MULTIPROBE] = "multiprobe",
    [DIST_ANCHOR] = "anchor",
};

const char *dist_name(enum dist_type type)
{
    return (unsigned)type < DIST_COUNT ? dist_names[type] : NULL;
}

int dist_from_name(const char *name, size_t len, enum dist_type *out)
{
    for (unsigned i = 0; i < DIST_COUNT; i++) {
        if (strlen(dist_names[i]) == len && memcmp(dist_names[i], name, len) == 0) {
            *out = (enum dist_type)i;
            return 0;
        }
    }
    return -1;
}

/* The ops table of a scheme, or NULL for an out-of-range type. */
const struct dist_ops *dist_ops_of(enum dist_type type)
{
    switch (type) {
    case DIST_KETAMA:     return &dist_ketama_ops;
    case DIST_MODULA:     return &dist_modula_ops;
    case DIST_RANDOM:     return &dist_random_ops;
    case DIST_RENDEZVOUS: return &dist_rendezvous_ops;
    case DIST_JUMP:       return &dist_jump_ops;
    case DIST_MAGLEV:     return &dist_maglev_ops;
    case DIST_SLOTS:      return &dist_slots_ops;
    case DIST_MULTIPROBE: return &dist_multiprobe_ops;
    case DIST_ANCHOR:     return &dist_anchor_ops;
    case DIST_COUNT:      break;
    }
    return NULL;
}

/*
 * Build `d` for servers[0..n).  On success returns 0 and d owns its state
 * (release it with dist_destroy).  On failure returns -1, writes a reason
 * into err and leaves d zeroed, so dist_destroy(d) stays harmless.
 */
int dist_build(struct dist *d, enum dist_type type, const struct dist_params *p,
               const struct dist_server *servers, uint32_t n, char *err, size_t errlen)
{
    static const struct dist_params defaults;
    const struct dist_ops *ops = dist_ops_of(type);

    memset(d, 0, sizeof(*d));
    if (ops == NULL) {
        snprintf(err, errlen, "distribution '%s' is not available",
                 dist_name(type) ? dist_name(type) : "?");
        return -1;
    }
    if (n == 0) {
        snprintf(err, errlen, "distribution '%s' needs at least one server", ops->name);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (servers[i].weight == 0) {
            snprintf(err, errlen, "server '%.*s' has weight 0", (int)servers[i].ident_len,
                     servers[i].ident);
            return -1;
        }
    }
    d->ops = ops;
    d->type = type;
    d->nservers = n;
    if (ops->build(d, p ? p : &defaults, servers, n, err, errlen) != 0) {
        memset(d, 0, sizeof(*d));
        return -1;
    }
    return 0;
}

/* Release what dist_build allocated; d is zeroed and may be built again. */
void dist_destroy(struct dist *d)
{
    if (d->ops != NULL && d->ops->destroy != NULL)
        d->ops->destroy(d);
    memset(d, 0, sizeof(*d));
}
