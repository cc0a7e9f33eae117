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

/* Parse a decimal unsigned integer of exactly len bytes; 0 or -1 (empty,
 * non-digit, overflow of max). */
int util_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out);
/* Signed variant, accepting a leading '-'. */
int util_parse_i64(const char *s, size_t len, int64_t *out);

/* strndup that returns NULL on allocation failure (never aborts). */
char *util_strndup(const char *s, size_t n);

#endif
