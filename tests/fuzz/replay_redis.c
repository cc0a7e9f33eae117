/* Runs the Redis fuzz target without libFuzzer: the seed corpus, then fixed-seed mutations of it. */
#include "config.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SEEDS   512
#define REPLAY_MAX  8192

struct seed {
    uint8_t *data;
    size_t len;
};

/* xorshift64*: deterministic, so a failure reproduces from the iteration number. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static int load_corpus(const char *dir, struct seed *seeds, int max)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return -1;
    while (n < max && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4400];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        uint8_t *buf = malloc(REPLAY_MAX);
        size_t len = buf ? fread(buf, 1, REPLAY_MAX, f) : 0;
        fclose(f);
        if (buf == NULL)
            continue;
        seeds[n].data = buf;
        seeds[n].len = len;
        n++;
    }
    closedir(d);
    return n;
}

/* One mutation in place of buf[0..*len) (capacity REPLAY_MAX). */
static void mutate(uint8_t *buf, size_t *len, const struct seed *seeds, int nseeds, uint64_t *s)
{
    static const char *const tokens[] = {
        "\r\n", "*", "$", "$-1\r\n", "*-1\r\n", ":", "+OK\r\n", "-ERR x\r\n", "*3\r\n",
        "$3\r\nGET\r\n", "0", "-1", "1048576", "536870912", "\"", "'", " ", "\\", "\xff",
        "$4\r\nMGET\r\n", "$4\r\nEVAL\r\n", "$4\r\nAUTH\r\n", "$5\r\nHELLO\r\n", "2147483648",
    };
    size_t n = *len;
    switch (rnd(s) % 7) {
    case 0:     /* flip a byte */
        if (n)
            buf[rnd(s) % n] ^= (uint8_t)(1u << (rnd(s) % 8));
        break;
    case 1:     /* set a byte */
        if (n)
            buf[rnd(s) % n] = (uint8_t)rnd(s);
        break;
    case 2: {   /* delete a range */
        if (n < 2)
            break;
        size_t at = rnd(s) % n, k = 1 + rnd(s) % (n - at < 16 ? n - at : 16);
        memmove(buf + at, buf + at + k, n - at - k);
        *len = n - k;
        break;
    }
    case 3: {   /* insert a protocol token */
        const char *t = tokens[rnd(s) % (sizeof(tokens) / sizeof(tokens[0]))];
        size_t tl = strlen(t), at = n ? rnd(s) % (n + 1) : 0;
        if (n + tl > REPLAY_MAX)
            break;
        memmove(buf + at + tl, buf + at, n - at);
        memcpy(buf + at, t, tl);
        *len = n + tl;
        break;
    }
    case 4: {   /* duplicate a chunk (pipelines, repeated elements) */
        if (n < 2)
            break;
        size_t at = rnd(s) % n, k = 1 + rnd(s) % (n - at);
        if (n + k > REPLAY_MAX)
            break;
        memmove(buf + at + k, buf + at, n - at);
        *len = n + k;
        break;
    }
    case 5: {   /* splice the tail of another seed */
        const struct seed *o = &seeds[rnd(s) % nseeds];
        if (o->len < 2)
            break;
        size_t at = n ? rnd(s) % n : 0, from = 1 + rnd(s) % (o->len - 1);
        size_t k = o->len - from;
        if (at + k > REPLAY_MAX)
            k = REPLAY_MAX - at;
        memcpy(buf + at, o->data + from, k);
        *len = at + k;
        break;
    }
    default:    /* change the mode byte */
        if (n)
            buf[0] = (uint8_t)rnd(s);
        break;
    }
}

int main(int argc, char **argv)
{
    const char *top = getenv("top_srcdir");
    char dir[4096];
    struct seed seeds[MAX_SEEDS];
    long iters = argc > 1 ? strtol(argv[1], NULL, 10) : 200000;

    snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/redis", top ? top : ".");
    int n = load_corpus(dir, seeds, MAX_SEEDS);
    if (n <= 0) {
        fprintf(stderr, "replay_redis: no seed corpus in %s\n", dir);
        return 1;
    }
    for (int i = 0; i < n; i++)
        LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].len);

    uint8_t *buf = malloc(REPLAY_MAX);
    if (buf == NULL)
        return 1;
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (long it = 0; it < iters; it++) {
        const struct seed *base = &seeds[rnd(&s) % n];
        size_t len = base->len;
        memcpy(buf, base->data, len);
        int k = 1 + (int)(rnd(&s) % 4);
        for (int j = 0; j < k; j++)
            mutate(buf, &len, seeds, n, &s);
        LLVMFuzzerTestOneInput(buf, len);
    }
    printf("replay_redis: %d seeds, %ld mutations, no invariant broken\n", n, iters);
    free(buf);
    for (int i = 0; i < n; i++)
        free(seeds[i].data);
    return 0;
}
