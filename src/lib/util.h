/* Small helpers: monotonic time, number parsing, string duplication. */
#ifndef RL_UTIL_H
#define RL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define RL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define RL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define RL_MAX(a, b) ((a) > (b) ? (a) : (b))

uint64_t util_now_ms(void);      /* monotonic */
uint64_t util_now_us(void);      /* monotonic */
uint64_t util_wall_us(void);     /* since the epoch */

/*
 * The one decimal integer parser. s[0..len) must be exactly the number (no
 * surrounding bytes: a NUL or a space is a non-digit). What else is allowed
 * is the grammar of the reader it must agree with:
 *   UTIL_DEC_MINUS  a leading '-' (the value is then negative or zero);
 *   UTIL_DEC_PLUS   a leading '+' (memcached: strtoul/strtol accept it);
 *   UTIL_DEC_CANON  Redis's string2ll: no leading zero unless the number is
 *                   "0" itself, no "-0", at most 20 bytes.
 * Leading zeros are otherwise allowed. The magnitude goes to *mag and the
 * sign to *neg; overflow past UINT64_MAX (or, negative, past 2^63) fails.
 * Returns 0, or -1 (empty, a sign alone, a non-digit, overflow); *mag and
 * *neg are only written on success.
 */
#define UTIL_DEC_MINUS  0x1u
#define UTIL_DEC_PLUS   0x2u
#define UTIL_DEC_CANON  0x4u
static inline int util_parse_dec(const char *s, size_t len, unsigned grammar, uint64_t *mag,
                                 int *neg)
{
    /* Inline: the parsers call it once per number with a constant grammar,
     * which then folds away. */
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
    if (__builtin_expect(len - i <= 19, 1)) {
        /* 19 digits are at most 10^19 - 1 < 2^64: no overflow to test for (the test's
         * division, even as a multiply, was most of a short number's cost) */
        for (; i < len; i++) {
            unsigned d = (unsigned char)s[i] - '0';
            if (d > 9)
                return -1;
            v = v * 10 + d;
        }
    } else {
        for (; i < len; i++) {
            unsigned d = (unsigned char)s[i] - '0';
            if (d > 9 || v > (UINT64_MAX - d) / 10)
                return -1;
            v = v * 10 + d;
        }
    }
    if (minus && v > (uint64_t)INT64_MAX + 1)
        return -1;
    *mag = v;
    *neg = minus;
    return 0;
}

/* Digits only (leading zeros allowed), at most max; 0 or -1. */
int util_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out);
/* An optional '-' then digits, within int64_t; 0 or -1. */
int util_parse_i64(const char *s, size_t len, int64_t *out);
/* The signed value of a util_parse_dec grammar within int64_t; 0 or -1. */
static inline int util_parse_dec_i64(const char *s, size_t len, unsigned grammar, int64_t *out)
{
    uint64_t v;
    int neg;

    if (util_parse_dec(s, len, grammar, &v, &neg) < 0 || (!neg && v > INT64_MAX))
        return -1;
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return 0;
}

/* strndup that returns NULL on allocation failure (never aborts). */
char *util_strndup(const char *s, size_t n);

#endif
