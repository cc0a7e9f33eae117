/* Glob patterns as Redis ACL key patterns read them (`*`, `?`, `[...]`, `[^...]`, ranges, `\` escapes). */
#ifndef RL_PROTO_GLOB_H
#define RL_PROTO_GLOB_H

#include <stddef.h>

/*
 * Whether s[0..slen) matches pat[0..plen), by the rules Redis's ACL key and channel
 * patterns (and KEYS, SCAN MATCH) follow: `*` any run of bytes, `?` one byte, `[abc]`,
 * `[^abc]`, `[a-z]` (a reversed range is read in order), `\x` the byte x (inside brackets
 * too); a `[` that is never closed ends its set at the end of the pattern. Case sensitive.
 * Iterative (one backtracking point: every token but `*` matches exactly one byte), so
 * O(plen * slen) at worst and no recursion.
 */
int glob_match(const char *pat, size_t plen, const char *s, size_t slen);

/* pat[0..n) with every byte a pattern reads specially escaped (`*?[]\`), written to out
 * (room for 2n bytes); returns the length written. */
size_t glob_escape(const char *pat, size_t n, char *out);

#endif
