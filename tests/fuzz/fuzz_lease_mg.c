/* Fuzz target for lease_mg_parse: memcached mg replies as leases: {meta: true} reads them. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/lease.h"

/*
 * The input is one server reply. Every invariant failure aborts (libFuzzer and the replay
 * driver both report it), independent of NDEBUG:
 *   - the kind is one of LEASE_MG_*; OTHER says nothing else (no flag, no value);
 *   - a VALUE's bytes lie inside the input, followed by its "\r\n";
 *   - the header line it read is whole: the input has a "\r\n" before any value;
 *   - the same bytes parse the same way twice, and a prefix cut before the end of the
 *     value is never a VALUE with the whole value (no read past the end).
 */

#define FUZZ_CHECK(cond)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                              \
        }                                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly size bytes: ASan sees any read past the end */
    char *p = malloc(size ? size : 1);
    struct lease_mg g, h;

    if (p == NULL)
        return 0;
    memcpy(p, data, size);
    lease_mg_parse(p, size, &g);
    FUZZ_CHECK(g.kind >= LEASE_MG_OTHER && g.kind <= LEASE_MG_MISS);
    if (g.kind == LEASE_MG_OTHER)
        FUZZ_CHECK(!g.win && !g.z && !g.stale && g.data == NULL && g.dlen == 0);
    if (g.kind != LEASE_MG_OTHER)
        FUZZ_CHECK(memmem(p, size, "\r\n", 2) != NULL);
    if (g.kind == LEASE_MG_VALUE) {
        FUZZ_CHECK(g.data > p && g.data <= p + size);
        FUZZ_CHECK(g.dlen + 2 <= (size_t)(p + size - g.data));
        size_t cut = (size_t)(g.data - p) + g.dlen + 1;                /* one short */
        lease_mg_parse(p, cut, &h);
        FUZZ_CHECK(h.kind == LEASE_MG_OTHER);
    }
    lease_mg_parse(p, size, &h);
    FUZZ_CHECK(h.kind == g.kind && h.win == g.win && h.z == g.z && h.stale == g.stale &&
               h.flags == g.flags && h.cas == g.cas && h.dlen == g.dlen);
    free(p);
    return 0;
}
