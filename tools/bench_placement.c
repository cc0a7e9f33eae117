/* bench_placement: ns per key placement (hash + lookup) and ring build time, per distribution. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conf/conf.h"
#include "placement/ring.h"

#define BENCH_KEYS    (1u << 16)     /* distinct keys, cycled (more than fits in L1/L2) */
#define BENCH_KEY_LEN 20
#define BENCH_MAX_SERVERS 1000

/* One row of the table; other distributions add rows here. */
struct bench_case {
    enum dist_type dist;
    enum hash_type hash;
    uint32_t nservers;
    uint32_t lookups;
};

static const struct bench_case bench_cases[] = {
    { DIST_KETAMA, HASH_FNV1A_64, 1000, 5000000 },
    { DIST_KETAMA, HASH_XXH3,     1000, 5000000 },
    { DIST_KETAMA, HASH_MD5,      1000, 2000000 },
    { DIST_MODULA, HASH_FNV1A_64, 1000, 5000000 },
    { DIST_MODULA, HASH_XXH3,     1000, 5000000 },
    { DIST_RANDOM, HASH_XXH3,     1000, 5000000 },
    { DIST_RENDEZVOUS, HASH_XXH3, 1000, 100000 },
    { DIST_JUMP, HASH_XXH3,       1000, 5000000 },
    { DIST_MAGLEV, HASH_XXH3,     1000, 5000000 },
    { DIST_SLOTS, HASH_XXH3,      1000, 5000000 },
    { DIST_MULTIPROBE, HASH_XXH3, 1000, 2000000 },
    { DIST_ANCHOR, HASH_XXH3,     1000, 5000000 },
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct bench_pool {
    struct conf_pool pool;
    struct conf_server servers[BENCH_MAX_SERVERS];
    char text[BENCH_MAX_SERVERS][2][32];
};

/* n servers 10.0.x.y:11212 of equal weight (ketama: 160 points each). */
static void bench_pool_init(struct bench_pool *bp, const struct bench_case *c)
{
    memset(&bp->pool, 0, sizeof(bp->pool));
    bp->pool.name = "bench";
    bp->pool.dist = c->dist;
    bp->pool.hash = c->hash;
    bp->pool.servers = bp->servers;
    bp->pool.nservers = c->nservers;
    for (uint32_t i = 0; i < c->nservers; i++) {
        struct conf_server *s = &bp->servers[i];
        memset(s, 0, sizeof(*s));
        snprintf(bp->text[i][0], sizeof(bp->text[i][0]), "10.0.%u.%u:11212", i / 250, i % 250);
        snprintf(bp->text[i][1], sizeof(bp->text[i][1]), "server-%04u", i);
        s->addr.text = bp->text[i][0];
        s->weight = 1;
        s->ident = s->label = s->name = bp->text[i][1];
    }
}

int main(int argc, char **argv)
{
    static struct bench_pool bp;
    static char keys[BENCH_KEYS][BENCH_KEY_LEN];
    double scale = argc > 1 ? atof(argv[1]) : 1.0;   /* e.g. 0.1 for a quick run */
    uint64_t rng = 0x243f6a8885a308d3ULL;

    for (uint32_t i = 0; i < BENCH_KEYS; i++) {
        char text[32];
        rng = hash_mix64(rng);
        snprintf(text, sizeof(text), "user:%015llu",
                 (unsigned long long)(rng % 1000000000000000ULL));
        memcpy(keys[i], text, BENCH_KEY_LEN);
    }

    printf("%-12s %-10s %7s %12s %12s %9s %9s %10s\n", "dist", "hash", "servers", "ns/lookup",
           "Mlookups/s", "hash ns", "dist ns", "build ms");
    for (size_t ci = 0; ci < sizeof(bench_cases) / sizeof(bench_cases[0]); ci++) {
        const struct bench_case *c = &bench_cases[ci];
        char err[256];
        if (dist_ops_of(c->dist) == NULL)
            continue;            /* not linked into this build */
        bench_pool_init(&bp, c);

        /* build: best of three */
        double best = 1e30;
        struct ring *r = NULL;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_ns();
            struct ring *nr = ring_build(&bp.pool, err, sizeof(err));
            double t = now_ns() - t0;
            if (nr == NULL)
                break;
            best = t < best ? t : best;
            ring_unref(r);
            r = nr;
        }
        if (r == NULL) {
            printf("%-12s %-10s %7u   build failed: %s\n", dist_name(c->dist),
                   hash_name(c->hash), c->nservers, err);
            continue;
        }

        uint32_t n = (uint32_t)(c->lookups * scale);
        uint64_t sink = 0;
        for (uint32_t i = 0; i < BENCH_KEYS; i++)      /* warm up */
            sink += ring_owner(r, keys[i], BENCH_KEY_LEN);
        double t0 = now_ns();
        for (uint32_t i = 0; i < n; i++)
            sink += ring_owner(r, keys[i & (BENCH_KEYS - 1)], BENCH_KEY_LEN);
        double ns = (now_ns() - t0) / (n ? n : 1);

        /* the two halves alone: hashing, and the lookup of a precomputed hash */
        static uint64_t hashes[BENCH_KEYS];
        t0 = now_ns();
        for (uint32_t i = 0; i < n; i++)
            sink += ring_key_hash(r, keys[i & (BENCH_KEYS - 1)], BENCH_KEY_LEN);
        double hash_ns = (now_ns() - t0) / (n ? n : 1);
        for (uint32_t i = 0; i < BENCH_KEYS; i++)
            hashes[i] = ring_key_hash(r, keys[i], BENCH_KEY_LEN);
        t0 = now_ns();
        for (uint32_t i = 0; i < n; i++)
            sink += dist_lookup(&r->dist, hashes[i & (BENCH_KEYS - 1)]);
        double lookup_ns = (now_ns() - t0) / (n ? n : 1);

        printf("%-12s %-10s %7u %12.1f %12.2f %9.1f %9.1f %10.2f%s\n", dist_name(c->dist),
               hash_name(c->hash), c->nservers, ns, 1e3 / ns, hash_ns, lookup_ns, best / 1e6,
               sink == 42 ? " " : "");
        ring_unref(r);
    }
    return 0;
}
