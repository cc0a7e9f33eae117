/* Distribution names, the vtable dispatch, and helpers shared by the schemes. */
#include "config.h"

#include <string.h>

#include "dist/dist.h"

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
