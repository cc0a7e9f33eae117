/* ketama: twemproxy's consistent-hash ring (MD5 points, float32 weighting), with a bucketed lookup. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <md5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "dist/dist.h"
#include "dist/ketama.h"

/*
 * Layout: points[] ascending, each with its server beside it so that the
 * lookup's last step touches one cache line.  A lookup first reads
 * first[h >> shift], the index of the first point at or after the start of
 * h's bucket (about one point per bucket), then scans a couple of entries:
 * two cache misses per lookup where a binary search over 160,000 points
 * takes about eighteen steps.
 */
struct ketama {
    uint32_t  npoints;
    uint32_t  shift;      /* 32 - log2(number of buckets) */
    struct ketama_point *points;
    uint32_t *first;      /* (1 << (32 - shift)) + 1 entries; last = npoints */
};

/* While building, owner holds the server's rank in twemproxy's sorted order. */
static int point_cmp(const void *pa, const void *pb)
{
    const struct ketama_point *a = pa, *b = pb;

    if (a->value != b->value)
        return a->value < b->value ? -1 : 1;
    /* glibc's qsort (merge sort) keeps equal points in insertion order,
     * i.e. in server order; make that explicit and portable */
    return a->owner < b->owner ? -1 : a->owner > b->owner;
}

/*
 * Sort points by value, keeping equal values in insertion order (which is
 * server rank order, as point_cmp states): a stable LSD radix sort, two
 * passes of 16 bits. For 1,000 servers x 160 points it takes a fraction
 * of qsort's time. 0, or -1 when the scratch space cannot be allocated
 * (the caller falls back to qsort).
 */
static int ketama_sort(struct ketama_point *pts, uint64_t np)
{
    struct ketama_point *tmp = malloc(np * sizeof(*tmp));
    uint32_t *count = malloc(65537 * sizeof(*count));
    if (tmp == NULL || count == NULL) {
        free(tmp);
        free(count);
        return -1;
    }
    for (int pass = 0; pass < 2; pass++) {
        struct ketama_point *src = pass ? tmp : pts, *dst = pass ? pts : tmp;
        int shift = pass * 16;
        memset(count, 0, 65537 * sizeof(*count));
        for (uint64_t i = 0; i < np; i++)
            count[((src[i].value >> shift) & 0xffff) + 1]++;
        for (uint32_t b = 0; b < 65536; b++)
            count[b + 1] += count[b];
        for (uint64_t i = 0; i < np; i++)
            dst[count[(src[i].value >> shift) & 0xffff]++] = src[i];
    }
    free(tmp);
    free(count);
    return 0;
}

struct ranked {
    const struct dist_server *servers;
    uint32_t index;
};

static int ranked_cmp(const void *pa, const void *pb)
{
    const struct ranked *a = pa, *b = pb;
    int c = dist__ident_cmp(&a->servers[a->index], &b->servers[b->index]);

    return c != 0 ? c : (a->index < b->index ? -1 : a->index > b->index);
}

/*
 * Points of one server, exactly as nutcracker 0.5.0 computes them, in
 * float32: floorf(pct * vnodes / 4 * n + 1e-10) * 4 with pct = w / W.  The
 * 1e-10 is a double literal, so that sum is formed in double and rounded
 * back to float before floorf.  vnodes = 160 is twemproxy's constant.
 */
static uint32_t ketama_points_of(uint32_t weight, uint64_t total, uint32_t vnodes, uint32_t n)
{
    /* volatile: each step rounded to float, never contracted into an FMA */
    volatile float pct = (float)weight / (float)total;
    volatile float x = pct * (float)vnodes;
    x = x / 4;
    x = x * (float)n;
    volatile float y = (float)((double)x + 0.0000000001);
    return (uint32_t)(floorf(y) * 4);
}

static void ketama_free(struct ketama *k)
{
    if (k == NULL)
        return;
    free(k->points);
    free(k->first);
    free(k);
}

static int ketama_build(struct dist *d, const struct dist_params *p,
                        const struct dist_server *servers, uint32_t n, char *err, size_t errlen)
{
    uint32_t vnodes = p->vnodes ? p->vnodes : KETAMA_DEFAULT_VNODES;
    struct ranked *order = NULL;
    struct ketama_point *pts = NULL;
    struct ketama *k = NULL;
    uint64_t total_weight = 0, npoints = 0;
    char *text = NULL;
    size_t textcap = 0;

    for (uint32_t i = 0; i < n; i++)
        total_weight += servers[i].weight;
    for (uint32_t i = 0; i < n; i++)
        npoints += ketama_points_of(servers[i].weight, total_weight, vnodes, n);
    if (npoints == 0 || npoints > KETAMA_MAX_POINTS) {
        snprintf(err, errlen, "ketama: %llu points for %u servers with vnodes %u "
                 "(must be between 1 and %u)", (unsigned long long)npoints, n, vnodes,
                 KETAMA_MAX_POINTS);
        return -1;
    }

    order = malloc(n * sizeof(*order));
    pts = malloc(npoints * sizeof(*pts));
    k = calloc(1, sizeof(*k));
    if (order == NULL || pts == NULL || k == NULL)
        goto nomem;
    for (uint32_t i = 0; i < n; i++)
        order[i] = (struct ranked){ servers, i };
    qsort(order, n, sizeof(*order), ranked_cmp);

    /* md5("<ident>-<i>") for i = 0 .. points/4 - 1, four little-endian points per digest */
    uint64_t np = 0;
    for (uint32_t r = 0; r < n; r++) {
        const struct dist_server *s = &servers[order[r].index];
        uint32_t count = ketama_points_of(s->weight, total_weight, vnodes, n);
        size_t need = s->ident_len + 16;

        if (need > textcap) {
            char *t = realloc(text, need);
            if (t == NULL)
                goto nomem;
            text = t;
            textcap = need;
        }
        memcpy(text, s->ident, s->ident_len);
        for (uint32_t i = 0; i < count / 4; i++) {
            unsigned char dg[MD5_DIGEST_LENGTH];
            MD5_CTX ctx;
            /* "-<i>" in decimal, without snprintf's cost per point */
            char digits[12];
            int nd = 0, len = 0;
            uint32_t v = i;
            do {
                digits[nd++] = (char)('0' + v % 10);
                v /= 10;
            } while (v != 0);
            text[s->ident_len + (size_t)len++] = '-';
            while (nd > 0)
                text[s->ident_len + (size_t)len++] = digits[--nd];

            MD5Init(&ctx);
            MD5Update(&ctx, (const unsigned char *)text, s->ident_len + (size_t)len);
            MD5Final(dg, &ctx);
            for (int x = 0; x < 4; x++) {
                const unsigned char *b = dg + 4 * x;
                pts[np].value = (uint32_t)b[0] | ((uint32_t)b[1] << 8) |
                                ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
                pts[np].owner = r;
                np++;
            }
        }
    }
    if (ketama_sort(pts, np) < 0)
        qsort(pts, np, sizeof(*pts), point_cmp);

    /* about one point per bucket: 2^bits >= npoints / 2, between 2 and 2^20 buckets */
    uint32_t bits = 1;
    while (bits < 20 && (1ull << bits) < np / 2)
        bits++;
    k->npoints = (uint32_t)np;
    k->shift = 32 - bits;
    k->first = malloc(((1ull << bits) + 1) * sizeof(uint32_t));
    if (k->first == NULL)
        goto nomem;
    for (uint64_t i = 0; i < np; i++)
        pts[i].owner = order[pts[i].owner].index;     /* rank -> config index */
    uint64_t pi = 0;
    for (uint64_t b = 0; b < (1ull << bits); b++) {
        uint64_t start = b << k->shift;
        while (pi < np && pts[pi].value < start)
            pi++;
        k->first[b] = (uint32_t)pi;
    }
    k->first[1ull << bits] = (uint32_t)np;
    k->points = pts;                                  /* the ring keeps the array */

    free(text);
    free(order);
    d->impl = k;
    /* the header too, so that ops->build alone yields a usable dist */
    d->ops = &dist_ketama_ops;
    d->type = DIST_KETAMA;
    d->nservers = n;
    return 0;

nomem:
    free(text);
    free(pts);
    free(order);
    ketama_free(k);
    snprintf(err, errlen, "ketama: %s", strerror(ENOMEM));
    return -1;
}

/* Index of the point owning h: the first point >= h, wrapping to 0. */
static inline uint32_t ketama_find(const struct ketama *k, uint32_t h)
{
    uint32_t b = h >> k->shift;
    uint32_t lo = k->first[b], hi = k->first[b + 1];

    /* every point in [lo, hi) lies in h's bucket; the answer is in [lo, hi] */
    while (hi - lo > 8) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (k->points[mid].value < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (lo < hi && k->points[lo].value < h)
        lo++;
    return lo == k->npoints ? 0 : lo;
}

/* twemproxy's key hashes are 32 bits; a 64-bit hash is used through its low half. */
static uint32_t ketama_lookup(const struct dist *d, uint64_t hash)
{
    const struct ketama *k = d->impl;

    return k->points[ketama_find(k, (uint32_t)hash)].owner;
}

/* Clockwise walk from the key's point collecting distinct servers; servers
 * with no point at all (a tiny weight) are appended in index order. */
static uint32_t ketama_preference(const struct dist *d, uint64_t hash, uint32_t *out,
                                  uint32_t want)
{
    const struct ketama *k = d->impl;
    uint32_t count = 0, at = ketama_find(k, (uint32_t)hash);

    if (want > d->nservers)
        want = d->nservers;
    for (uint32_t step = 0; step < k->npoints && count < want; step++) {
        uint32_t s = k->points[at].owner, seen = 0;
        for (uint32_t j = 0; j < count && !seen; j++)
            seen = out[j] == s;
        if (!seen)
            out[count++] = s;
        if (++at == k->npoints)
            at = 0;
    }
    for (uint32_t s = 0; s < d->nservers && count < want; s++) {
        uint32_t seen = 0;
        for (uint32_t j = 0; j < count && !seen; j++)
            seen = out[j] == s;
        if (!seen)
            out[count++] = s;
    }
    return count;
}

static void ketama_destroy(struct dist *d)
{
    ketama_free(d->impl);
    d->impl = NULL;
}

uint32_t dist__ketama_points(const struct dist *d, const struct ketama_point **points)
{
    const struct ketama *k = d->impl;

    *points = k->points;
    return k->npoints;
}

static int ketama_canonical(const struct dist_params *p, struct buf *out)
{
    return buf_appendf(out, "vnodes %u\n", p->vnodes ? p->vnodes : KETAMA_DEFAULT_VNODES);
}

/* Point i owns (points[i-1], points[i]]; point 0 also owns the wrap. */
static void ketama_shares(const struct dist *d, double *shares)
{
    const struct ketama *k = d->impl;
    const struct ketama_point *pt = k->points;
    uint32_t np = k->npoints;

    for (uint32_t i = 1; i < np; i++)
        shares[pt[i].owner] += (double)(pt[i].value - pt[i - 1].value);
    shares[pt[0].owner] += (double)pt[0].value + 1.0 + (double)(UINT32_MAX - pt[np - 1].value);
    for (uint32_t s = 0; s < d->nservers; s++)
        shares[s] /= 4294967296.0;
}

const struct dist_ops dist_ketama_ops = {
    .name = "ketama",
    .build = ketama_build,
    .lookup = ketama_lookup,
    .preference = ketama_preference,
    .destroy = ketama_destroy,
    .canonical = ketama_canonical,
    .shares = ketama_shares,
};
