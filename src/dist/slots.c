/* Redis Cluster style slots: 16384 hash slots, each owned by one server. */
#include "config.h"

#include <stdlib.h>
#include <xxhash.h>

#include "lib/buf.h"
#include "dist/dist.h"
#include "dist/dist_helpers.h"
#include "dist/dist_schemes.h"

/*
 * slot = key hash & 16383. For this distribution the ring hashes the (tagged)
 * key with CRC16-XMODEM, Redis Cluster's keyslot function, whatever `hash:`
 * says, so a pool of cluster-mode masters with the same slot map agrees with
 * the cluster on every key's slot (see docs/distributions.md). This file only
 * masks: any hash whose low 14 bits are uniform works.
 *
 * Slot map: params->slot_map (16384 server indices) when given, else
 * contiguous ranges in config order, sized by weight (equal weights: an even
 * split, the first 16384 mod n servers one slot larger, as redis-cli would
 * lay out a fresh cluster).
 *
 * Preference: the slot's owner, then the owners of the following slots in
 * order (wrapping), each server once; servers owning no slot come last in
 * index order. run_end[] lets the walk jump over a server's whole range.
 */

struct slots {
    uint32_t n;
    uint32_t owner[DIST_SLOTS_COUNT];
    uint16_t run_end[DIST_SLOTS_COUNT];   /* first slot after s's run of one owner (mod 16384) */
};

static int slots_build(struct dist *d, const struct dist_params *p,
                       const struct dist_server *servers, uint32_t n, char *err,
                       size_t errlen)
{
    if (n == 0) {
        dist__set_err(err, errlen, "slots: a pool needs at least one server");
        return -1;
    }
    if (n > DIST_SLOTS_COUNT) {
        dist__set_err(err, errlen, "slots: %u servers but only %u slots", n, DIST_SLOTS_COUNT);
        return -1;
    }
    struct slots *st = malloc(sizeof(*st));
    if (st == NULL) {
        dist__set_err(err, errlen, "slots: out of memory");
        return -1;
    }
    st->n = n;

    if (p != NULL && p->slot_map != NULL) {
        for (uint32_t s = 0; s < DIST_SLOTS_COUNT; s++) {
            if (p->slot_map[s] >= n) {
                dist__set_err(err, errlen, "slots: slot %u is mapped to server %u, but the "
                              "pool has %u servers", s, p->slot_map[s], n);
                free(st);
                return -1;
            }
            st->owner[s] = p->slot_map[s];
        }
    } else {
        uint64_t total = 0, cum = 0;
        for (uint32_t i = 0; i < n; i++)
            total += servers[i].weight;
        if (total == 0) {
            dist__set_err(err, errlen, "slots: every server has weight 0");
            free(st);
            return -1;
        }
        uint32_t start = 0;
        for (uint32_t i = 0; i < n; i++) {
            cum += servers[i].weight;
            uint32_t end = (uint32_t)((cum * DIST_SLOTS_COUNT) / total);
            if (end == start) {
                dist__set_err(err, errlen, "slots: server '%.*s' (weight %u) would own no "
                              "slot; raise its weight or give a slot map",
                              (int)servers[i].ident_len, servers[i].ident, servers[i].weight);
                free(st);
                return -1;
            }
            for (uint32_t s = start; s < end; s++)
                st->owner[s] = i;
            start = end;
        }
    }

    /* Runs, computed backwards; the run touching the end continues at slot 0. */
    uint32_t last = DIST_SLOTS_COUNT - 1;
    uint32_t next = 0;   /* first slot of the run after slot `last` */
    if (st->owner[last] == st->owner[0]) {
        /* The wrapping run ends where slot 0's run ends. */
        uint32_t e = 0;
        while (e < DIST_SLOTS_COUNT && st->owner[e] == st->owner[0])
            e++;
        next = e % DIST_SLOTS_COUNT;
    }
    for (uint32_t s = DIST_SLOTS_COUNT; s-- > 0;) {
        if (s < last && st->owner[s] != st->owner[s + 1])
            next = s + 1;
        st->run_end[s] = (uint16_t)next;
    }

    d->ops = &dist_slots_ops;
    d->type = DIST_SLOTS;
    d->nservers = n;
    d->impl = st;
    return 0;
}

static uint32_t slots_lookup(const struct dist *d, uint64_t hash)
{
    const struct slots *st = d->impl;
    return st->owner[hash & (DIST_SLOTS_COUNT - 1)];
}

static uint32_t slots_preference(const struct dist *d, uint64_t hash, uint32_t *out,
                                 uint32_t want)
{
    const struct slots *st = d->impl;
    if (want > st->n)
        want = st->n;
    uint32_t k = 0;
    uint32_t s = (uint32_t)(hash & (DIST_SLOTS_COUNT - 1));
    /* Each run visited advances at least one slot: at most 16384 steps. */
    for (uint32_t steps = 0; steps < DIST_SLOTS_COUNT && k < want; steps++) {
        uint32_t v = st->owner[s];
        if (!dist__pref_has(out, k, v))
            out[k++] = v;
        uint32_t e = st->run_end[s];
        if (e == s)
            break;  /* one owner holds every slot */
        s = e;
    }
    for (uint32_t v = 0; v < st->n && k < want; v++)
        if (!dist__pref_has(out, k, v))
            out[k++] = v;
    return k;
}

static void slots_destroy(struct dist *d)
{
    free(d->impl);
    d->impl = NULL;
}

static int slots_canonical(const struct dist_params *p, struct buf *out)
{
    if (p->slot_map == NULL)
        return buf_appendf(out, "slot_map even\n");
    return buf_appendf(out, "slot_map %016llx\n", (unsigned long long)
                       XXH64(p->slot_map, DIST_SLOTS_COUNT * sizeof(uint32_t), 0));
}

const struct dist_ops dist_slots_ops = {
    .name = "slots",
    .build = slots_build,
    .lookup = slots_lookup,
    .preference = slots_preference,
    .destroy = slots_destroy,
    .canonical = slots_canonical,
};
