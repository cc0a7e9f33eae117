/* The request log's writer: per-worker bounded buffers of JSON lines, written to a file by a thread of its own. */
#ifndef RL_STATS_REQLOG_H
#define RL_STATS_REQLOG_H

#include <stddef.h>
#include <stdint.h>

/*
 * Workers append whole lines to their own buffer (reqlog_append: a mutex only the writer
 * thread also takes, once per pass); a writer thread swaps each buffer for an empty one
 * every REQLOG_FLUSH_MS (sooner when one is half full) and writes it to the file with
 * write(2), off every worker's loop. A line that does not fit in its worker's buffer is
 * dropped and counted: memory stays bounded whatever the disk does. The file is opened
 * with O_APPEND; reqlog_reopen (SIGUSR1) closes and opens the path again for logrotate.
 */

#define REQLOG_FLUSH_MS 100
#define REQLOG_BUF_DEFAULT (1u << 20)   /* bytes per worker */

struct reqlog;

struct reqlog_counts {
    uint64_t lines;         /* lines written to the file */
    uint64_t bytes;         /* ... their bytes */
    uint64_t dropped;       /* lines lost: a full buffer, or a failed write */
    uint64_t reopens;       /* times the file was opened again (SIGUSR1, a new path) */
    int      open;          /* a file is open */
};

/* nbufs buffers (one per worker) of cap bytes. NULL: out of memory. No thread runs until a
 * path is set. */
struct reqlog *reqlog_create(uint32_t nbufs, size_t cap);

/* Log to path (NULL: stop logging; what is buffered is written first). The writer opens it
 * on its next pass (a failure is logged and retried each pass, lines counted dropped). 0,
 * or -errno when the thread cannot start. Any thread. */
int reqlog_set_path(struct reqlog *r, const char *path);

/* Close and open the file again on the writer's next pass (SIGUSR1). Any thread. */
void reqlog_reopen(struct reqlog *r);

/* Append line[0..n) (with its '\n') to buffer i. 0, or -1 when it did not fit (counted
 * dropped). Called by buffer i's worker only. */
int reqlog_append(struct reqlog *r, uint32_t i, const char *line, size_t n);

/* Whether lines go anywhere now (a path is set). */
int reqlog_on(const struct reqlog *r);

void reqlog_counts(struct reqlog *r, struct reqlog_counts *out);

/* Write what is buffered, stop the thread, close the file, free. NULL is a no-op. */
void reqlog_destroy(struct reqlog *r);

#endif
