/* rejoin_log: PATH — the rejoin logs journalled to a file (append-only, fsync batched) so that a restarted proxy still invalidates. */
#ifndef RL_REJOIN_JOURNAL_H
#define RL_REJOIN_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

/*
 * The file is text, one record a line, fields separated by one tab, after a
 * header line that says what it is (written when the proxy adopts a new or empty
 * file; a non-empty file without it is refused and left untouched, except a
 * journal of the format before it, every complete line a record, which is
 * rewritten with it):
 *
 *   ringleader-rejoin-journal <version>                            the header (1)
 *   K <pool> <ident> <addr> <flags> <also ident or -> <key, base64>   a key remembered
 *   O <pool> <ident> <addr>                                         the log overflowed
 *   C <pool> <ident> <addr>                                         the server rejoined:
 *                                                                   forget its records
 *
 * A server's log is named "pool\tident\taddr" (struct rejoin_log.ident), so a
 * record begins with its type, a tab and that name. Workers append records to a
 * buffer under the journal's mutex (the rejoin log's mutex is held then, so
 * records of one server are in the order its log saw them); the main loop
 * writes the buffer and fdatasync()s it every REJOIN_JOURNAL_SYNC_MS. When no
 * server has a record left the file is truncated to its header. A line cut
 * short by a crash is cut off when the file is read back. Records of servers
 * no longer configured are forgotten (rejoin_journal_forget) so that they do
 * not keep the file from being truncated.
 */
#define REJOIN_JOURNAL_SYNC_MS  100
#define REJOIN_JOURNAL_MAGIC    "ringleader-rejoin-journal"
#define REJOIN_JOURNAL_VERSION  1

struct rejoin_journal;

/* Open (creating) the journal at path and read back what it holds. NULL with a
 * reason in err naming path (the directory is missing, the file is not readable,
 * it is not a journal: then it is left as it was). */
struct rejoin_journal *rejoin_journal_open(const char *path, char *err, size_t errlen);

/* What rejoin_journal_open would refuse, without creating or changing anything
 * (`ringleader -t`, a reload naming another path): 0 (no file yet, an empty one,
 * a journal), or -1 with the reason in err. */
int rejoin_journal_check(const char *path, char *err, size_t errlen);

/* Write what is buffered, fdatasync it, truncate the file when nothing is
 * pending (the main loop's timer, and the close). 0 or -errno (logged). */
int  rejoin_journal_sync(struct rejoin_journal *j);
void rejoin_journal_close(struct rejoin_journal *j);

/* Records (j may be NULL: no journal); key and overflow return 1 when the record
 * is buffered (0: no journal, or no memory). `journalled` of clear: how many K records
 * the server had since its last clear (the journal truncates the file when every
 * server's are cleared). */
int  rejoin_journal_key(struct rejoin_journal *j, const char *ident, const char *key, size_t len,
                        const char *also, unsigned flags);
int  rejoin_journal_overflow(struct rejoin_journal *j, const char *ident);
void rejoin_journal_clear(struct rejoin_journal *j, const char *ident, uint64_t journalled);

/* What the file held for server `ident` at open: fn(arg, key, len, also or NULL, flags)
 * for each key; returns 1 when it had overflowed, 0 when it had keys, -1 for nothing.
 * The records are forgotten by the journal's memory then (not by the file). */
typedef void (*rejoin_replay_fn)(void *arg, const char *key, size_t len, const char *also,
                                 unsigned flags);
int  rejoin_journal_replay(struct rejoin_journal *j, const char *ident, rejoin_replay_fn fn,
                           void *arg);

/* Forget what the file held for servers no replay asked for (no longer configured:
 * called once every configured server is attached): a C record each, logged with
 * fn(arg, ident, keys, overflowed). Returns how many servers. */
typedef void (*rejoin_forget_fn)(void *arg, const char *ident, size_t keys, int overflowed);
size_t rejoin_journal_forget(struct rejoin_journal *j, rejoin_forget_fn fn, void *arg);

/* Read journal records (after the header): what rejoin_journal_open does with the file, for the tests. The
 * pending records are kept in j (opened on /dev/null or a scratch file). 0 or -ENOMEM. */
int  rejoin_journal_parse(struct rejoin_journal *j, const char *text, size_t len);

/* Records buffered and servers with pending records (tests, stats). */
size_t rejoin_journal_pending(const struct rejoin_journal *j);

#endif
