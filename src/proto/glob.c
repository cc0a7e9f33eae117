/* Glob patterns as Redis ACL key patterns read them: matching and escaping. */
#include "config.h"

#include "proto/glob.h"

/* The token at pat[*pi] (not `*`) against byte c: 1 it matches, 0 not; *pi moves past it. */
static int glob_one(const char *pat, size_t plen, size_t *pi, unsigned char c)
{
    size_t i = *pi;
    unsigned char p = (unsigned char)pat[i];

    if (p == '?') {
        *pi = i + 1;
        return 1;
    }
    if (p == '\\' && i + 1 < plen) {
        *pi = i + 2;
        return (unsigned char)pat[i + 1] == c;
    }
    if (p != '[') {
        *pi = i + 1;
        return p == c;
    }
    /* a set: [^...] negates; it ends at `]` or at the pattern's end */
    i++;
    int neg = 0, hit = 0;
    if (i < plen && pat[i] == '^') {
        neg = 1;
        i++;
    }
    while (i < plen && pat[i] != ']') {
        unsigned char a = (unsigned char)pat[i];
        if (a == '\\' && i + 1 < plen) {
            if ((unsigned char)pat[i + 1] == c)
                hit = 1;
            i += 2;
        } else if (i + 2 < plen && pat[i + 1] == '-') {
            unsigned char lo = a, hi = (unsigned char)pat[i + 2];
            if (lo > hi) {
                unsigned char t = lo;
                lo = hi;
                hi = t;
            }
            if (c >= lo && c <= hi)
                hit = 1;
            i += 3;
        } else {
            if (a == c)
                hit = 1;
            i++;
        }
    }
    if (i < plen)
        i++;                    /* the closing `]` */
    *pi = i;
    return neg ? !hit : hit;
}

int glob_match(const char *pat, size_t plen, const char *s, size_t slen)
{
    size_t pi = 0, si = 0;
    size_t star_p = (size_t)-1, star_s = 0;     /* the last `*`: where to go on from */

    while (si < slen) {
        if (pi < plen && pat[pi] == '*') {
            while (pi < plen && pat[pi] == '*')
                pi++;
            if (pi == plen)
                return 1;       /* a trailing star takes the rest */
            star_p = pi;
            star_s = si;
            continue;
        }
        if (pi < plen) {
            size_t next = pi;
            if (glob_one(pat, plen, &next, (unsigned char)s[si])) {
                pi = next;
                si++;
                continue;
            }
        }
        if (star_p == (size_t)-1)
            return 0;
        pi = star_p;            /* the star takes one more byte */
        si = ++star_s;
    }
    while (pi < plen && pat[pi] == '*')
        pi++;
    return pi == plen;
}

size_t glob_escape(const char *pat, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = pat[i];
        if (ch == '*' || ch == '?' || ch == '[' || ch == ']' || ch == '\\')
            out[o++] = '\\';
        out[o++] = ch;
    }
    return o;
}
