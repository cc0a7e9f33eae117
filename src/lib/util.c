/* Small helpers shared by every module. */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "lib/util.h"

uint64_t util_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t util_now_ms(void)
{
    return util_now_us() / 1000u;
}

uint64_t util_wall_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
}

int util_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    uint64_t v;
    int neg;

    if (util_parse_dec(s, len, 0, &v, &neg) < 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

int util_parse_i64(const char *s, size_t len, int64_t *out)
{
    return util_parse_dec_i64(s, len, UTIL_DEC_MINUS, out);
}

char *util_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p == NULL)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}
