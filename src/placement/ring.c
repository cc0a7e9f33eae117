/* struct ring: one pool's immutable placement (hash, tag, distribution, servers), its checksum and analysis. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "lib/buf.h"
#include "lib/invariant.h"
#include "conf/conf.h"
#include "dist/ketama.h"
#include "placement/ring.h"

#define RING_CHECKSUM_VERSION 1
#define RING_DEFAULT_SAMPLES  (1u << 20)


static uint32_t ring_zone_id(const struct ring *r, const char *zone)
{
    if (zone == NULL || zone[0] == '\0')
        return 0;
    for (uint32_t z = 1; z < r->nzones; z++)
        if (strcmp(r->zones[z], zone) == 0)
            return z;
    return UINT32_MAX;
}

static char *strings_put(char **cursor, const char *s)
{
    size_t n = strlen(s) + 1;
    char *at = *cursor;

    memcpy(at, s, n);
    *cursor += n;
    return at;
}

static int append_field(struct buf *b, const char *s)
{
    if (s == NULL)
        s = "";
    return buf_appendf(b, " %zu:%s", strlen(s), s);   /* length-prefixed: no escaping */
}

/*
 * The canonical text the checksum covers, one item per line: a version, the
 * distribution, the hash (and its seed only where the hash takes one), the
 * tag, the parameters of this distribution only (defaults made explicit),
 * then each server in config order with its identity, address, weight and
 * zone.  Nothing that does not decide placement (pool name, listen address,
 * timeouts) and nothing machine-specific (pointers) is in it.
 */
static int ring_canonical_text(const struct ring *r, const struct conf_pool *pool,
                               const struct dist_params *params, struct buf *b)
{
    int rc = 0;

    rc |= buf_appendf(b, "ringleader-ring %d\ndistribution %s\nhash %s\n",
                      RING_CHECKSUM_VERSION, dist_name(r->dist.type), hash_name(r->hash));
    if (hash_is_seedable(r->hash))
        rc |= buf_appendf(b, "seed %" PRIu64 "\n", r->hash_seed);
    if (r->has_tag)
        rc |= buf_appendf(b, "hash_tag %02x%02x\n", (unsigned char)r->tag[0],
                          (unsigned char)r->tag[1]);
    if (r->dist.ops->canonical != NULL)
        rc |= r->dist.ops->canonical(params, b);
    for (uint32_t i = 0; i < pool->nservers; i++) {
        const struct conf_server *s = &pool->servers[i];
        rc |= buf_append_str(b, "server");
        rc |= append_field(b, r->servers[i].ident);
        rc |= append_field(b, s->addr.text);
        rc |= buf_appendf(b, " %u", s->weight);
        rc |= append_field(b, s->zone);
        rc |= buf_append(b, "\n", 1);
    }
    return rc == 0 ? 0 : -ENOMEM;
}

struct ring *ring_build(const struct conf_pool *pool, char *err, size_t errlen)
{
    uint32_t n = pool->nservers;
    struct dist_server *ds = NULL;
    struct ring *r = NULL;
    struct buf text;
    size_t strsize = 1;     /* zones[0] = "" */
    char *cursor;

    buf_init(&text);
    if (n == 0) {
        snprintf(err, errlen, "pool '%s' has no servers", pool->name ? pool->name : "");
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        const struct conf_server *s = &pool->servers[i];
        if (s->ident == NULL || s->ident[0] == '\0') {
            snprintf(err, errlen, "server %u of pool '%s' has no identity", i,
                     pool->name ? pool->name : "");
            return NULL;
        }
        strsize += strlen(s->ident) + 1 + strlen(s->label ? s->label : s->ident) + 1;
        if (s->addr.text != NULL)
            strsize += strlen(s->addr.text) + 1;
        if (s->zone != NULL)
            strsize += strlen(s->zone) + 1;
    }

    r = calloc(1, sizeof(*r));
    if (r == NULL)
        goto nomem;
    r->servers = calloc(n, sizeof(*r->servers));
    r->zones = calloc(n + 1, sizeof(*r->zones));
    r->strings = malloc(strsize);
    ds = calloc(n, sizeof(*ds));
    if (r->servers == NULL || r->zones == NULL || r->strings == NULL || ds == NULL)
        goto nomem;

    atomic_init(&r->refs, 1);
    r->epoch = 1;
    r->hash = pool->hash;
    r->hash_seed = pool->has_hash_seed ? pool->hash_seed : 0;
    r->has_tag = pool->has_hash_tag;
    if (r->has_tag)
        memcpy(r->tag, pool->hash_tag, 2);
    r->nservers = n;
    cursor = r->strings;
    r->zones[0] = strings_put(&cursor, "");
    r->nzones = 1;
    for (uint32_t i = 0; i < n; i++) {
        const struct conf_server *s = &pool->servers[i];
        struct ring_server *rs = &r->servers[i];

        rs->ident = strings_put(&cursor, s->ident);
        rs->label = strings_put(&cursor, s->label ? s->label : s->ident);
        rs->addr = s->addr.text != NULL ? strings_put(&cursor, s->addr.text) : NULL;
        rs->weight = s->weight;
        rs->conf_index = i;
        rs->zone = ring_zone_id(r, s->zone);
        if (rs->zone == UINT32_MAX) {
            rs->zone = r->nzones;
            r->zones[r->nzones++] = strings_put(&cursor, s->zone);
        }
        ds[i] = (struct dist_server){ rs->ident, strlen(rs->ident), rs->weight, rs->zone };
    }

    struct dist_params params = {
        .vnodes = pool->vnodes,
        .maglev_table_size = pool->maglev_table_size,
        .probes = pool->probes,
        .slot_map = pool->slot_map,
    };
    if (dist_build(&r->dist, pool->dist, &params, ds, n, err, errlen) != 0)
        goto fail;

    if (ring_canonical_text(r, pool, &params, &text) != 0)
        goto nomem;
    r->checksum = XXH64(buf_rptr(&text), buf_len(&text), 0);
    buf_free(&text);
    /* each server's share, once: the stats and the status page show it beside its weight */
    double *shares = malloc(n * sizeof(*shares));
    if (shares == NULL)
        goto nomem;
    ring_shares(r, shares, RING_SHARE_SAMPLES);
    for (uint32_t i = 0; i < n; i++)
        r->servers[i].keyspace_share = shares[i];
    free(shares);
    free(ds);
    return r;

nomem:
    snprintf(err, errlen, "pool '%s': %s", pool->name ? pool->name : "", strerror(ENOMEM));
fail:
    buf_free(&text);
    free(ds);
    if (r != NULL) {
        dist_destroy(&r->dist);
        free(r->servers);
        free(r->zones);
        free(r->strings);
        free(r);
    }
    return NULL;
}

void ring_ref(struct ring *r)
{
    unsigned was = atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    RL_ASSERT(was > 0);         /* a freed ring is not brought back */
}

void ring_unref(struct ring *r)
{
    if (r == NULL)
        return;
    unsigned was = atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel);
    RL_ASSERT(was > 0);         /* one unref too many frees it twice */
    if (was != 1)
        return;
    dist_destroy(&r->dist);
    free(r->servers);
    free(r->zones);
    free(r->strings);
    free(r);
}

/*
 * twemproxy's hash_tag rule: the first tag[0], then the first tag[1] after
 * it; when both exist with at least one byte between, only those bytes are
 * hashed, otherwise the whole key.
 */
void ring_tagged(const struct ring *r, const char *key, size_t len,
                 const char **out, size_t *outlen)
{
    *out = key;
    *outlen = len;
    if (!r->has_tag || len == 0)
        return;
    const char *open = memchr(key, r->tag[0], len);
    if (open == NULL)
        return;
    const char *from = open + 1;
    const char *close = memchr(from, r->tag[1], (size_t)(key + len - from));
    if (close == NULL || close == from)
        return;
    *out = from;
    *outlen = (size_t)(close - from);
}

uint64_t ring_key_hash(const struct ring *r, const char *key, size_t len)
{
    const char *k;
    size_t klen;

    if (r->nservers == 1 && r->dist.type != DIST_SLOTS)
        return 0;           /* (a slot is the key's own, whoever serves it) */
    ring_tagged(r, key, len, &k, &klen);
    if (klen == 0)
        return 0;
    return hash_compute(r->hash, r->hash_seed, k, klen);
}

uint32_t ring_owner(const struct ring *r, const char *key, size_t len)
{
    if (r->nservers == 1)
        return 0;
    return dist_lookup(&r->dist, ring_key_hash(r, key, len));
}

/*
 * The distribution's preference order, stable-partitioned so that the
 * first server of each zone not yet covered comes before any repeat of a
 * zone.  With no zones configured this is the distribution's order as is.
 * out[0] is always the owner.
 */
uint32_t ring_preference(const struct ring *r, const char *key, size_t len,
                         uint32_t *out, uint32_t want)
{
    return ring_preference_hash(r, ring_key_hash(r, key, len), out, want);
}

uint32_t ring_preference_hash(const struct ring *r, uint64_t h, uint32_t *out, uint32_t want)
{
    uint32_t cand[RING_MAX_PREF], zones_seen[RING_MAX_PREF];
    unsigned char taken[RING_MAX_PREF] = { 0 };
    uint32_t ncand, count = 0, nseen = 0;

    if (want > RING_MAX_PREF)
        want = RING_MAX_PREF;
    if (want > r->nservers)
        want = r->nservers;
    if (want == 0)
        return 0;
    if (r->nservers == 1) {
        out[0] = 0;
        return 1;
    }
    if (r->nzones <= 2)                  /* no zones, or one zone: nothing to reorder */
        return dist_preference(&r->dist, h, out, want);

    ncand = dist_preference(&r->dist, h, cand,
                            r->nservers < RING_MAX_PREF ? r->nservers : RING_MAX_PREF);
    for (uint32_t i = 0; i < ncand && count < want; i++) {
        RL_ASSERT(cand[i] < r->nservers);   /* the distribution's: an index of servers[] */
        uint32_t z = r->servers[cand[i]].zone, seen = 0;
        for (uint32_t j = 0; j < nseen && !seen; j++)
            seen = zones_seen[j] == z;
        if (seen)
            continue;
        zones_seen[nseen++] = z;
        taken[i] = 1;
        out[count++] = cand[i];
    }
    for (uint32_t i = 0; i < ncand && count < want; i++)
        if (!taken[i])
            out[count++] = cand[i];
    return count;
}

/* The hashes a ring can see: 32-bit values for twemproxy's hashes. */
static uint64_t ring_hash_mask(const struct ring *r)
{
    return hash_is_seedable(r->hash) ? UINT64_MAX : UINT32_MAX;
}

/* i-th of a deterministic, uniformly spread sequence of key hashes. */
static inline uint64_t ring_sample(const struct ring *r, uint32_t i)
{
    return hash_mix64(i) & ring_hash_mask(r);
}

/* Owner of a key *hash* (one-server rings own everything). */
static inline uint32_t ring_hash_owner(const struct ring *r, uint64_t h)
{
    return r->nservers == 1 ? 0 : dist_lookup(&r->dist, h);
}

void ring_shares(const struct ring *r, double *shares, uint32_t samples)
{
    memset(shares, 0, r->nservers * sizeof(*shares));
    if (r->nservers == 1) {
        shares[0] = 1.0;
        return;
    }
    if (r->dist.ops->shares != NULL) {
        r->dist.ops->shares(&r->dist, shares);
        return;
    }
    if (samples == 0)
        samples = RING_DEFAULT_SAMPLES;
    for (uint32_t i = 0; i < samples; i++)
        shares[ring_hash_owner(r, ring_sample(r, i))] += 1.0;
    for (uint32_t s = 0; s < r->nservers; s++)
        shares[s] /= samples;
}

static int ident_ptr_cmp(const void *pa, const void *pb)
{
    const struct ring_server *a = *(const struct ring_server *const *)pa;
    const struct ring_server *b = *(const struct ring_server *const *)pb;

    return strcmp(a->ident, b->ident);
}

/*
 * map[i] = index in `a` of the server of `b` with the same identity, or
 * UINT32_MAX; returns NULL on allocation failure.
 */
static uint32_t *ring_match(const struct ring *a, const struct ring *b)
{
    const struct ring_server **sorted = malloc(a->nservers * sizeof(*sorted));
    uint32_t *map = malloc(b->nservers * sizeof(*map));

    if (sorted == NULL || map == NULL) {
        free(sorted);
        free(map);
        return NULL;
    }
    for (uint32_t i = 0; i < a->nservers; i++)
        sorted[i] = &a->servers[i];
    qsort(sorted, a->nservers, sizeof(*sorted), ident_ptr_cmp);
    for (uint32_t i = 0; i < b->nservers; i++) {
        const struct ring_server *key = &b->servers[i], **hit;
        hit = bsearch(&key, sorted, a->nservers, sizeof(*sorted), ident_ptr_cmp);
        map[i] = hit ? (uint32_t)(*hit - a->servers) : UINT32_MAX;
    }
    free(sorted);
    return map;
}

/*
 * Least movement for a change of fair shares (weight / total weight): the
 * total variation distance, i.e. the sum of the positive share differences.
 * It is an added server's new share, a removed server's old share, and the
 * net weight shift for reweighting.
 */
static double ring_floor(const struct ring *a, const struct ring *b, const uint32_t *map)
{
    uint64_t wa = 0, wb = 0;
    double floor = 0.0;
    double *old = calloc(a->nservers, sizeof(*old));

    if (old == NULL)
        return 0.0;
    for (uint32_t i = 0; i < a->nservers; i++)
        wa += a->servers[i].weight;
    for (uint32_t i = 0; i < b->nservers; i++)
        wb += b->servers[i].weight;
    for (uint32_t i = 0; i < a->nservers; i++)
        old[i] = (double)a->servers[i].weight / (double)wa;
    for (uint32_t i = 0; i < b->nservers; i++) {
        double now = (double)b->servers[i].weight / (double)wb;
        double before = map[i] == UINT32_MAX ? 0.0 : old[map[i]];
        if (now > before)
            floor += now - before;
    }
    free(old);
    return floor;
}

/* Exact moved fraction between two ketama rings: merge both point sets and
 * compare the owners of every arc of the 2^32 hash space. */
static double ring_moved_ketama(const struct ring *a, const struct ring *b, const uint32_t *map)
{
    const struct ketama_point *pa, *pb;
    uint32_t na = dist__ketama_points(&a->dist, &pa);
    uint32_t nb = dist__ketama_points(&b->dist, &pb);
    const uint64_t end = UINT64_C(1) << 32;
    uint64_t moved = 0, from = 0;   /* the arc [from, cur] has one owner in each ring */
    uint32_t i = 0, j = 0;

    while (i < na || j < nb) {
        uint64_t ca = i < na ? pa[i].value : end, cb = j < nb ? pb[j].value : end;
        uint64_t cur = ca < cb ? ca : cb;
        uint32_t owner_a = pa[i < na ? i : 0].owner, owner_b = pb[j < nb ? j : 0].owner;

        if (cur + 1 > from && map[owner_b] != owner_a)   /* duplicates give empty arcs */
            moved += cur + 1 - from;
        if (cur + 1 > from)
            from = cur + 1;
        if (ca == cur)
            i++;
        if (cb == cur)
            j++;
    }
    if (from < end && map[pb[0].owner] != pa[0].owner)              /* past the last point: wrap */
        moved += end - from;
    return (double)moved / (double)end;
}

static int ring_same_hashing(const struct ring *a, const struct ring *b)
{
    return a->hash == b->hash && a->hash_seed == b->hash_seed && a->has_tag == b->has_tag &&
           (!a->has_tag || memcmp(a->tag, b->tag, 2) == 0);
}

/*
 * Returns the moved fraction in [0, 1], or -1.0 if memory ran out.  When
 * both rings hash keys the same way the comparison is over key hashes
 * (exact for two ketama rings); when the hashing itself changed it is over
 * `samples` synthetic keys, since the same hash then means different keys.
 */
double ring_moved_fraction(const struct ring *a, const struct ring *b, uint32_t samples,
                           double *floor)
{
    uint32_t *map = ring_match(a, b);
    uint64_t moved = 0;
    double fraction;

    if (floor != NULL)
        *floor = 0.0;
    if (map == NULL)
        return -1.0;
    if (floor != NULL)
        *floor = ring_floor(a, b, map);
    if (samples == 0)
        samples = RING_DEFAULT_SAMPLES;

    if (ring_same_hashing(a, b) && a->dist.type == DIST_KETAMA && b->dist.type == DIST_KETAMA) {
        fraction = ring_moved_ketama(a, b, map);
    } else if (ring_same_hashing(a, b)) {
        for (uint32_t i = 0; i < samples; i++) {
            uint64_t h = ring_sample(a, i);
            moved += map[ring_hash_owner(b, h)] != ring_hash_owner(a, h);
        }
        fraction = (double)moved / samples;
    } else {
        char key[32];
        for (uint32_t i = 0; i < samples; i++) {
            int len = snprintf(key, sizeof(key), "sample:%u", i);
            moved += map[ring_owner(b, key, (size_t)len)] != ring_owner(a, key, (size_t)len);
        }
        fraction = (double)moved / samples;
    }
    free(map);
    return fraction;
}
