/* Small helpers shared by every module. */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "util.h"

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

int util_parse_dec(const char *s, size_t len, unsigned grammar, uint64_t *mag, int *neg)
{
    size_t i = 0;
    int minus = 0;
    uint64_t v = 0;

    if (len > 0 && ((s[0] == '-' && (grammar & UTIL_DEC_MINUS)) ||
                    (s[0] == '+' && (grammar & UTIL_DEC_PLUS)))) {
        minus = s[0] == '-';
        i = 1;
    }
    if (i == len)
        return -1;
    if ((grammar & UTIL_DEC_CANON) &&
        (len > 20 || (s[i] == '0' && (len - i > 1 || minus))))
        return -1;
    for (; i < len; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (minus && v > (uint64_t)INT64_MAX + 1)
        return -1;
    *mag = v;
    *neg = minus;
    return 0;
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

int util_parse_dec_i64(const char *s, size_t len, unsigned grammar, int64_t *out)
{
    uint64_t v;
    int neg;

    if (util_parse_dec(s, len, grammar, &v, &neg) < 0 || (!neg && v > INT64_MAX))
        return -1;
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
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
