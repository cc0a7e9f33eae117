/* Benchmark of the non-twemproxy distributions: ns per lookup (xxh3 of a 20-byte key included) and build time. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "dist/dist.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct bench_case {
    enum dist_type type;
    const char *note;
    int weighted;     /* weights 1..10 instead of all 1 */
};

int main(int argc, char **argv)
{
    uint32_t lookups = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 2000000;
    const struct bench_case cases[] = {
        {.type = DIST_MAGLEV, .note = "M=65537"},
        {.type = DIST_JUMP, .note = ""},
        {.type = DIST_RENDEZVOUS, .note = "equal weights"},
        {.type = DIST_RENDEZVOUS, .note = "weights 1..10", .weighted = 1},
        {.type = DIST_MAGLEV, .note = "weights 1..10", .weighted = 1},
        {.type = DIST_MULTIPROBE, .note = "21 probes"},
        {.type = DIST_ANCHOR, .note = "capacity 256"},
        {.type = DIST_SLOTS, .note = "even split"},
    };
    enum { NSERV = 100, NBUILD = 1000, NKEYS = 1 << 16 };

    static struct dist_server servers[NBUILD];
    static char names[NBUILD][32];
    for (uint32_t i = 0; i < NBUILD; i++) {
        int len = snprintf(names[i], sizeof(names[i]), "cache-%u.example:11211", i);
        servers[i].ident = names[i];
        servers[i].ident_len = (size_t)len;
        servers[i].weight = 1;
    }
    /* 20-byte keys, distinct, precomputed so only hashing is timed. */
    static char keys[NKEYS][21];
    for (uint32_t i = 0; i < NKEYS; i++)
        snprintf(keys[i], sizeof(keys[i]), "user:session:%07u", i);

    printf("%-12s %-14s %12s %14s %16s\n", "dist", "note", "ns/lookup", "lookups/s",
           "build 1000 (ms)");
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (uint32_t i = 0; i < NBUILD; i++)
            servers[i].weight = cases[c].weighted ? 1 + i % 10 : 1;
        struct dist d;
        char err[256];
        if (dist_build(&d, cases[c].type, NULL, servers, NSERV, err, sizeof(err)) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        const struct dist_ops *ops = d.ops;
        uint64_t sink = 0;
        for (uint32_t i = 0; i < NKEYS; i++)   /* warm up */
            sink += ops->lookup(&d, XXH3_64bits(keys[i], 20));
        /* Best of 5 runs: the machine may be shared. */
        double per = 1e30;
        for (int run = 0; run < 5; run++) {
            double t0 = now_ns();
            for (uint32_t i = 0; i < lookups / 5; i++)
                sink += ops->lookup(&d, XXH3_64bits(keys[i & (NKEYS - 1)], 20));
            double t = (now_ns() - t0) / (lookups / 5);
            per = t < per ? t : per;
        }
        dist_destroy(&d);

        double b0 = now_ns();
        int rounds = 0;
        do {
            if (dist_build(&d, cases[c].type, NULL, servers, NBUILD, err, sizeof(err)) != 0) {
                fprintf(stderr, "%s: %s\n", ops->name, err);
                return 1;
            }
            dist_destroy(&d);
            rounds++;
        } while (now_ns() - b0 < 2e8 && rounds < 100);
        double build_ms = (now_ns() - b0) / rounds / 1e6;
        printf("%-12s %-14s %12.1f %14.0f %16.3f   (%llu)\n", ops->name, cases[c].note, per,
               1e9 / per, build_ms, (unsigned long long)(sink & 1));
    }
    /* The hash alone, for reference. */
    uint64_t sink = 0;
    double per = 1e30;
    for (int run = 0; run < 5; run++) {
        double t0 = now_ns();
        for (uint32_t i = 0; i < lookups / 5; i++)
            sink += XXH3_64bits(keys[i & (NKEYS - 1)], 20);
        double t = (now_ns() - t0) / (lookups / 5);
        per = t < per ? t : per;
    }
    printf("%-12s %-14s %12.1f   (%llu)\n", "xxh3 only", "20-byte key", per,
           (unsigned long long)(sink & 1));
    return 0;
}
