/* AnchorHash (Mendelson, Vargaftik, Barabash, Lorenz, Keslassy, Orda; 2020): consistent hashing over a fixed bucket capacity. */
#include "config.h"

#include <stdlib.h>

#include "dist/dist.h"
#include "dist/dist_helpers.h"
#include "dist/dist_schemes.h"
#include "hash/hash.h"

/*
 * The "anchor" is a set of a buckets (the capacity); servers 0..n-1 are the
 * working buckets 0..n-1, and buckets n..a-1 start out removed, as if removed
 * in the order a-1, a-2, ..., n. A key first hashes to one of the a buckets;
 * if that bucket is removed, it rehashes (with a hash seeded by the bucket)
 * into the working set as it was when that bucket was removed, following the
 * replacement chain K for buckets removed even earlier, until it lands on a
 * working bucket. Per bucket b:
 *
 *   A[b]  0 if working, else the working-set size right after b's removal
 *   W, L  the working set as an array (W) and each bucket's place in it (L)
 *   K[b]  the bucket that took b's place in W when b was removed
 *   R     stack of removed buckets (LIFO: an add restores the last removal)
 *
 * Removing a bucket moves exactly its keys; restoring it moves them back;
 * balance is that of a uniform hash. A lookup costs 1 + ln(a/n) expected hops.
 *
 * Capacity: params->anchor_capacity, else 2 x servers rounded UP to a power
 * of two. The first hash is taken modulo the capacity, so changing the
 * capacity reshuffles every key: the rounding keeps the default stable while
 * a pool grows or shrinks inside one power-of-two band, and an operator who
 * plans to grow should set it explicitly (docs/distributions.md).
 *
 * With a config-driven rebuild the buckets are config positions: appending a
 * server (bucket n) or dropping the last one is the minimal move, exactly as
 * the paper's add and remove. Removing a server from the middle through the
 * config renumbers the later ones; dist_anchor_remove/dist_anchor_add give
 * the in-place operations on a private copy (tests, the ring tool).
 */

#define ANCHOR_SEED UINT64_C(0x616e63686f726861)   /* "anchorha" */

struct anchor {
    uint32_t  a;         /* capacity */
    uint32_t  nservers;  /* buckets < nservers are servers */
    uint32_t  working;   /* N, the working-set size */
    uint32_t  rtop;      /* entries in R */
    uint32_t *A, *K, *L, *W, *R;
};

static inline uint32_t anchor_reduce(uint64_t x, uint32_t range)
{
    return (uint32_t)(((unsigned __int128)x * range) >> 64);
}

static void anchor_free(struct anchor *an)
{
    if (an == NULL)
        return;
    free(an->A);
    free(an);
}

static int anchor_build(struct dist *d, const struct dist_params *p,
                        const struct dist_server *servers, uint32_t n, char *err,
                        size_t errlen)
{
    if (n == 0) {
        dist__set_err(err, errlen, "anchor: a pool needs at least one server");
        return -1;
    }
    if (n > (1u << 30)) {
        dist__set_err(err, errlen, "anchor: too many servers (%u)", n);
        return -1;
    }
    for (uint32_t i = 1; i < n; i++) {
        if (servers[i].weight != servers[0].weight) {
            dist__set_err(err, errlen,
                          "anchor: weights are not supported (server '%.*s' has weight %u, "
                          "'%.*s' has %u); use distribution rendezvous or maglev",
                          (int)servers[0].ident_len, servers[0].ident, servers[0].weight,
                          (int)servers[i].ident_len, servers[i].ident, servers[i].weight);
            return -1;
        }
    }
    uint32_t a;
    if (p != NULL && p->anchor_capacity != 0) {
        a = p->anchor_capacity;
        if (a < n) {
            dist__set_err(err, errlen, "anchor_capacity %u is smaller than the %u servers",
                          a, n);
            return -1;
        }
        if (a > (1u << 30)) {
            dist__set_err(err, errlen, "anchor_capacity %u is above the limit of %u", a,
                          1u << 30);
            return -1;
        }
    } else {
        a = 1;
        while (a < 2 * n)
            a <<= 1;
    }

    struct anchor *an = calloc(1, sizeof(*an));
    if (an == NULL)
        goto oom;
    an->A = malloc((size_t)a * 5 * sizeof(uint32_t));   /* one block: A K L W R */
    if (an->A == NULL)
        goto oom;
    an->K = an->A + a;
    an->L = an->K + a;
    an->W = an->L + a;
    an->R = an->W + a;
    an->a = a;
    an->nservers = n;
    for (uint32_t b = 0; b < a; b++) {
        an->A[b] = 0;
        an->K[b] = an->L[b] = an->W[b] = b;
    }
    an->rtop = 0;
    for (uint32_t b = a; b-- > n;) {
        an->R[an->rtop++] = b;
        an->A[b] = b;
    }
    an->working = n;

    d->ops = &dist_anchor_ops;
    d->type = DIST_ANCHOR;
    d->nservers = n;
    d->impl = an;
    return 0;

oom:
    anchor_free(an);
    dist__set_err(err, errlen, "anchor: out of memory for capacity %u", a);
    return -1;
}

static inline uint32_t anchor_bucket(const struct anchor *an, uint64_t hash)
{
    uint32_t b = anchor_reduce(hash_mix64(hash ^ ANCHOR_SEED), an->a);
    while (an->A[b] > 0) {                       /* b is removed */
        uint64_t hb = hash_mix64(hash ^ hash_mix64(ANCHOR_SEED + b));
        uint32_t h = anchor_reduce(hb, an->A[b]);
        while (an->A[h] >= an->A[b])             /* h was removed before b */
            h = an->K[h];
        b = h;
    }
    return b;
}

static uint32_t anchor_lookup(const struct dist *d, uint64_t hash)
{
    return anchor_bucket(d->impl, hash);
}

/* Rehash preference: owners of hash_mix64(hash + r * golden), r = 1, 2, ...,
 * each server once (bounded tries), then the remaining working servers in
 * index order. Every rank is as balanced as the lookup. */
static uint32_t anchor_preference(const struct dist *d, uint64_t hash, uint32_t *out,
                                  uint32_t want)
{
    const struct anchor *an = d->impl;
    if (want > an->working)
        want = an->working;
    if (want == 0)
        return 0;
    uint32_t k = 0;
    out[k++] = anchor_bucket(an, hash);
    uint32_t tries = 4 * want + 16;
    for (uint32_t r = 1; k < want && r <= tries; r++) {
        uint32_t b = anchor_bucket(an, hash + (uint64_t)r * DIST_GOLDEN);
        if (!dist__pref_has(out, k, b))
            out[k++] = b;
    }
    for (uint32_t b = 0; b < an->nservers && k < want; b++)
        if (an->A[b] == 0 && !dist__pref_has(out, k, b))
            out[k++] = b;
    return k;
}

static void anchor_destroy(struct dist *d)
{
    anchor_free(d->impl);
    d->impl = NULL;
}

int dist_anchor_remove(struct dist *d, uint32_t server)
{
    struct anchor *an = d->impl;
    if (server >= an->nservers || an->A[server] != 0 || an->working <= 1)
        return -1;
    uint32_t b = server;
    an->R[an->rtop++] = b;
    an->working--;
    uint32_t n = an->working;
    an->A[b] = n;
    an->W[an->L[b]] = an->W[n];
    an->L[an->W[n]] = an->L[b];
    an->K[b] = an->W[n];
    return 0;
}

int dist_anchor_add(struct dist *d, uint32_t *server)
{
    struct anchor *an = d->impl;
    if (an->rtop == 0)
        return -1;
    uint32_t b = an->R[an->rtop - 1];
    if (b >= an->nservers)
        return -1;               /* the next bucket is capacity, not a server */
    an->rtop--;
    uint32_t n = an->working;
    an->A[b] = 0;
    an->L[an->W[n]] = n;
    an->W[an->L[b]] = b;
    an->K[b] = b;
    an->working++;
    *server = b;
    return 0;
}

const struct dist_ops dist_anchor_ops = {
    .name = "anchor",
    .build = anchor_build,
    .lookup = anchor_lookup,
    .preference = anchor_preference,
    .destroy = anchor_destroy,
};
