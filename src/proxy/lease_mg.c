/* leases: {meta: true}: reading memcached's mg replies (W, Z, X, f, c, the value); pure, fuzzed. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "proxy/lease.h"

int lease_mg_num(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;

    if (n == 0 || n > 20)
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint64_t d = (uint64_t)(p[i] - '0');
        if (p[i] < '0' || p[i] > '9' || v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static void lease_mg_read(const char *p, size_t n, struct lease_mg *g)
{
    memset(g, 0, sizeof(*g));
    g->kind = LEASE_MG_OTHER;
    size_t hl = 0;
    while (hl + 1 < n && !(p[hl] == '\r' && p[hl + 1] == '\n'))
        hl++;
    if (hl + 1 >= n || hl < 2 || (hl > 2 && p[2] != ' '))
        return;
    int kind = memcmp(p, "VA", 2) == 0 ? LEASE_MG_VALUE : memcmp(p, "HD", 2) == 0
               ? LEASE_MG_HEAD : memcmp(p, "EN", 2) == 0 ? LEASE_MG_MISS : LEASE_MG_OTHER;
    if (kind == LEASE_MG_OTHER)
        return;
    uint64_t size = 0;
    int need_size = kind == LEASE_MG_VALUE;
    size_t i = 2;
    while (i < hl) {
        while (i < hl && p[i] == ' ')
            i++;
        size_t b = i;
        while (i < hl && p[i] != ' ')
            i++;
        if (i == b)
            break;
        const char *tk = p + b;
        size_t tl = i - b;
        if (need_size) {
            if (lease_mg_num(tk, tl, &size) < 0)
                return;
            need_size = 0;
            continue;
        }
        if (tk[0] == 'f' && lease_mg_num(tk + 1, tl - 1, &g->flags) < 0)
            return;
        if (tk[0] == 'c' && lease_mg_num(tk + 1, tl - 1, &g->cas) < 0)
            return;
        if (tl == 1 && tk[0] == 'W')
            g->win = 1;
        if (tl == 1 && tk[0] == 'Z')
            g->z = 1;
        if (tl == 1 && tk[0] == 'X')
            g->stale = 1;
    }
    if (need_size)
        return;
    if (kind == LEASE_MG_VALUE) {
        if (size > n || n - (hl + 2) < size + 2)
            return;
        g->data = p + hl + 2;
        g->dlen = (size_t)size;
    }
    g->kind = kind;
}

void lease_mg_parse(const char *p, size_t n, struct lease_mg *g)
{
    lease_mg_read(p, n, g);
    if (g->kind == LEASE_MG_OTHER)      /* nothing half-read survives a refusal */
        memset(g, 0, sizeof(*g));
}
