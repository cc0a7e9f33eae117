/* Plain driver for a libFuzzer target: replays a seed corpus and fixed-seed mutations of it, so `make check` runs the fuzz invariants without libFuzzer. */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Built once per target with REPLAY_CORPUS naming its corpus folder under
 * tests/fuzz/corpus/ (found through $top_srcdir, which `make check` exports,
 * or the first argument). Runs every seed, then REPLAY_MUTATIONS inputs made
 * by mutating seeds with a fixed-seed generator (REPLAY_SEED), so a failure
 * reproduces exactly; the failing input is written to replay-crash.bin
 * before the target's invariant check aborts.
 */

#ifndef REPLAY_CORPUS
#error "define REPLAY_CORPUS to the corpus folder name"
#endif
#define REPLAY_MUTATIONS 200000
#define REPLAY_SEED      0x5eed5eedu
#define REPLAY_MAX_SEEDS 256
#define REPLAY_MAX_INPUT 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seed {
    uint8_t *data;
    size_t   len;
};

static uint64_t rng_state;

/* The input being run, saved by the abort handler (signal-safe calls only). */
static const uint8_t *cur_input;
static size_t cur_len;

static void on_abort(int sig)
{
    int fd = open("replay-crash.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        if (cur_input != NULL && write(fd, cur_input, cur_len) < 0)
            cur_len = 0;
        close(fd);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static uint32_t rng(void)
{
    /* xorshift64*: small, deterministic, good enough to pick mutations. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}

/* Tokens the protocol cares about, spliced in to reach deeper states. */
static const char *const dict[] = {
    "\r\n", "\n", " ", "noreply", " q", " b", "get ", "gets ", "gat ", "set ", "cas ",
    "ms ", "mg ", "md ", "ma ", "mn", "VALUE ", "END\r\n", "VA ", "HD", "EN\r\n",
    "SERVER_ERROR ", "CLIENT_ERROR ", "ERROR", "0", "1", "-1", "4294967295", "4294967296",
    "2147483647", "18446744073709551615", "99999999999999999999", "\xff", "\x00", "\t",
    "flush_all", "delete ", "incr ", "touch ", "Zm9v", "==",
};

static size_t mutate(uint8_t *buf, size_t len, size_t cap, const struct seed *seeds, size_t nseeds)
{
    int rounds = 1 + (int)(rng() % 4);
    for (int i = 0; i < rounds; i++) {
        size_t pos = len ? rng() % (len + 1) : 0;
        switch (rng() % 7) {
        case 0:   /* flip a bit */
            if (len)
                buf[rng() % len] ^= (uint8_t)(1u << (rng() % 8));
            break;
        case 1:   /* random byte */
            if (len)
                buf[rng() % len] = (uint8_t)rng();
            break;
        case 2: { /* delete a run */
            if (!len)
                break;
            size_t at = rng() % len, n = 1 + rng() % 16;
            if (n > len - at)
                n = len - at;
            memmove(buf + at, buf + at + n, len - at - n);
            len -= n;
            break;
        }
        case 3: { /* insert a dictionary token */
            const char *t = dict[rng() % (sizeof(dict) / sizeof(dict[0]))];
            size_t n = strlen(t) ? strlen(t) : 1;
            if (len + n > cap)
                break;
            memmove(buf + pos + n, buf + pos, len - pos);
            memcpy(buf + pos, t, n);
            len += n;
            break;
        }
        case 4: { /* duplicate a run */
            if (!len)
                break;
            size_t at = rng() % len, n = 1 + rng() % 64;
            if (n > len - at)
                n = len - at;
            if (len + n > cap)
                break;
            uint8_t run[64];
            memcpy(run, buf + at, n);
            memmove(buf + pos + n, buf + pos, len - pos);
            memcpy(buf + pos, run, n);
            len += n;
            break;
        }
        case 5: { /* splice in part of another seed */
            const struct seed *s = &seeds[rng() % nseeds];
            if (!s->len)
                break;
            size_t at = rng() % s->len, n = 1 + rng() % s->len;
            if (n > s->len - at)
                n = s->len - at;
            if (len + n > cap)
                break;
            memmove(buf + pos + n, buf + pos, len - pos);
            memcpy(buf + pos, s->data + at, n);
            len += n;
            break;
        }
        default:  /* truncate */
            len = pos;
            break;
        }
    }
    return len;
}

/* Seeds in name order, so the mutation sequence is the same everywhere. */
static int load_seeds(const char *dir, struct seed *seeds, size_t *nseeds)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "replay: cannot open corpus %s\n", dir);
        return -1;
    }
    char path[8192];
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.' && *nseeds < REPLAY_MAX_SEEDS) {
            snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
            FILE *f = fopen(path, "rb");
            uint8_t *b = f ? malloc(REPLAY_MAX_INPUT) : NULL;
            if (b != NULL) {
                seeds[*nseeds].data = b;
                seeds[*nseeds].len = fread(b, 1, REPLAY_MAX_INPUT, f);
                (*nseeds)++;
            }
            if (f != NULL)
                fclose(f);
        }
        free(names[i]);
    }
    free(names);
    return 0;
}

int main(int argc, char **argv)
{
    char dir[4096];
    if (argc > 1) {
        snprintf(dir, sizeof(dir), "%s", argv[1]);
    } else {
        const char *top = getenv("top_srcdir");
        snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s", top ? top : ".", REPLAY_CORPUS);
    }
    struct seed seeds[REPLAY_MAX_SEEDS];
    size_t nseeds = 0;
    if (load_seeds(dir, seeds, &nseeds) != 0 || nseeds == 0) {
        fprintf(stderr, "replay: no seeds in %s\n", dir);
        return 1;
    }
    signal(SIGABRT, on_abort);
    for (size_t i = 0; i < nseeds; i++) {
        cur_input = seeds[i].data;
        cur_len = seeds[i].len;
        LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].len);
    }

    uint8_t *buf = malloc(REPLAY_MAX_INPUT);
    if (buf == NULL)
        return 1;
    rng_state = REPLAY_SEED;
    for (long i = 0; i < REPLAY_MUTATIONS; i++) {
        const struct seed *s = &seeds[rng() % nseeds];
        memcpy(buf, s->data, s->len);
        size_t len = mutate(buf, s->len, REPLAY_MAX_INPUT, seeds, nseeds);
        /* Hand the target an exact-size heap copy so over-reads trip ASan. */
        uint8_t *in = malloc(len ? len : 1);
        if (in == NULL)
            return 1;
        memcpy(in, buf, len);
        cur_input = in;
        cur_len = len;
        LLVMFuzzerTestOneInput(in, len);
        free(in);
    }
    printf("replay %s: %zu seeds, %d mutations, no invariant failed\n", REPLAY_CORPUS, nseeds,
           REPLAY_MUTATIONS);
    free(buf);
    for (size_t i = 0; i < nseeds; i++)
        free(seeds[i].data);
    return 0;
}
