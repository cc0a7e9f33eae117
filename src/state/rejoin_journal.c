/* rejoin_log: PATH — the rejoin logs journalled to a file (append-only, fsync batched) so that a restarted proxy still invalidates. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "lib/buf.h"
#include "lib/invariant.h"
#include "lib/log.h"
#include "state/rejoin_journal.h"
#include "state/rejoin_log.h"

/* Records kept for the next try while the file cannot be written, at most (a full disk
 * must not take the proxy's memory too): past it they are dropped, and said so. */
#define JOURNAL_BUF_MAX (64u << 20)

/* One key of a server's pending records, as read back from the file. */
struct replay_key {
    char    *key;
    size_t   len;
    char    *also;          /* "pool\tident\taddr" of the server that took the write, or NULL */
    unsigned flags;
};

/* A server with pending records in the file. */
struct replay_group {
    char                *ident;
    struct replay_key   *keys;
    size_t               n, cap;
    int                  overflowed;
    struct replay_group *next;
};

struct rejoin_journal {
    uv_mutex_t           mu;        /* buf and live: workers append, the main loop writes */
    struct buf           buf;
    uint64_t             live;      /* K records not cleared, file and buffer */
    int                  fd;
    char                *path;
    int                  failed;    /* the last write failed (logged once until it works) */
    size_t               header;    /* bytes of the header line: the file is never cut shorter */
    struct replay_group *groups;    /* what the file held at open, until replayed */
};

/* ------------------------------------------------------------------ base64 */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(unsigned char c)
{
    const char *p = c ? strchr(b64_alphabet, c) : NULL;
    return p ? (int)(p - b64_alphabet) : -1;
}

/* Decode s[0..n) into out (room for n bytes); the length, or -1 if not base64. */
static long b64_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    if (n % 4 != 0)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            v[k] = s[i + k] == '=' && i + 4 == n && k >= 2 ? 0 : b64_value((unsigned char)s[i + k]);
            if (v[k] < 0)
                return -1;
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (char)(x >> 16);
        if (s[i + 2] != '=')
            out[o++] = (char)(x >> 8);
        if (s[i + 3] != '=')
            out[o++] = (char)x;
    }
    return (long)o;
}

/* ------------------------------------------------------------------ records */

/* Append "<type>\t<ident>[\t<rest>]\n"; the caller holds j->mu. */
static int journal_line(struct rejoin_journal *j, char type, const char *ident)
{
    char t[2] = { type, '\t' };
    return buf_append(&j->buf, t, 2) < 0 || buf_append_str(&j->buf, ident) < 0 ? -ENOMEM : 0;
}

int rejoin_journal_key(struct rejoin_journal *j, const char *ident, const char *key, size_t len,
                       const char *also, unsigned flags)
{
    int kept = 0;

    if (j == NULL)
        return 0;
    uv_mutex_lock(&j->mu);
    size_t before = buf_len(&j->buf);
    /* also is "pool\tident\taddr": its ident and addr follow the flags */
    const char *also_rest = also != NULL ? strchr(also, '\t') : NULL;
    if (journal_line(j, 'K', ident) < 0 ||
        buf_appendf(&j->buf, "\t%u\t", flags) < 0 ||
        buf_append_str(&j->buf, also_rest != NULL ? also_rest + 1 : "-\t-") < 0 ||
        buf_append(&j->buf, "\t", 1) < 0 || buf_append_b64(&j->buf, key, len) < 0 ||
        buf_append(&j->buf, "\n", 1) < 0)
        buf_truncate(&j->buf, before);     /* no memory: the record is lost */
    else
        j->live++, kept = 1;
    uv_mutex_unlock(&j->mu);
    return kept;
}

int rejoin_journal_overflow(struct rejoin_journal *j, const char *ident)
{
    int kept = 0;

    if (j == NULL)
        return 0;
    uv_mutex_lock(&j->mu);
    size_t before = buf_len(&j->buf);
    if (journal_line(j, 'O', ident) < 0 || buf_append(&j->buf, "\n", 1) < 0)
        buf_truncate(&j->buf, before);
    else
        j->live++, kept = 1;    /* an overflow is pending until the server's clear */
    uv_mutex_unlock(&j->mu);
    return kept;
}

void rejoin_journal_clear(struct rejoin_journal *j, const char *ident, uint64_t journalled)
{
    if (j == NULL)
        return;
    uv_mutex_lock(&j->mu);
    size_t before = buf_len(&j->buf);
    if (journal_line(j, 'C', ident) < 0 || buf_append(&j->buf, "\n", 1) < 0)
        buf_truncate(&j->buf, before);
    /* Overflow records count too: what is left over is forgotten with the clear. */
    j->live = j->live > journalled ? j->live - journalled : 0;
    uv_mutex_unlock(&j->mu);
}

/* ------------------------------------------------------------------ read back */

static struct replay_group *replay_group(struct rejoin_journal *j, const char *ident, size_t n,
                                         int create)
{
    for (struct replay_group *g = j->groups; g != NULL; g = g->next)
        if (strlen(g->ident) == n && memcmp(g->ident, ident, n) == 0)
            return g;
    if (!create)
        return NULL;
    struct replay_group *g = calloc(1, sizeof(*g));
    if (g == NULL || (g->ident = malloc(n + 1)) == NULL) {
        free(g);
        return NULL;
    }
    memcpy(g->ident, ident, n);
    g->ident[n] = '\0';
    g->next = j->groups;
    j->groups = g;
    return g;
}

static void replay_group_clear(struct replay_group *g)
{
    for (size_t i = 0; i < g->n; i++) {
        free(g->keys[i].key);
        free(g->keys[i].also);
    }
    free(g->keys);
    g->keys = NULL;
    g->n = g->cap = 0;
    g->overflowed = 0;
}

/* The tab-separated fields of line[0..n); returns how many (at most max). */
static size_t journal_fields(const char *line, size_t n, const char **f, size_t *fl, size_t max)
{
    size_t k = 0, start = 0;
    for (size_t i = 0; i <= n && k < max; i++) {
        if (i == n || line[i] == '\t') {
            f[k] = line + start;
            fl[k] = i - start;
            k++;
            start = i + 1;
        }
    }
    return k;
}

/* One complete line; a line that does not read is skipped (logged). 0 or -ENOMEM. */
static int journal_record(struct rejoin_journal *j, const char *line, size_t n)
{
    const char *f[9];
    size_t fl[9];
    size_t nf = journal_fields(line, n, f, fl, 9);

    if (nf < 4 || fl[0] != 1)
        return 0;
    size_t idlen = (size_t)(f[3] + fl[3] - f[1]);   /* "pool\tident\taddr" */
    char type = f[0][0];
    if (type == 'C') {
        struct replay_group *g = replay_group(j, f[1], idlen, 0);
        if (g != NULL)
            replay_group_clear(g);
        return 0;
    }
    struct replay_group *g = replay_group(j, f[1], idlen, 1);
    if (g == NULL)
        return -ENOMEM;
    if (type == 'O') {
        g->overflowed = 1;
        return 0;
    }
    if (type != 'K' || nf != 8)
        return 0;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        struct replay_key *k = realloc(g->keys, cap * sizeof(*k));
        if (k == NULL)
            return -ENOMEM;
        g->keys = k;
        g->cap = cap;
    }
    struct replay_key *k = &g->keys[g->n];
    memset(k, 0, sizeof(*k));
    k->flags = (unsigned)strtoul(f[4], NULL, 10);
    k->key = malloc(fl[7] + 1);
    if (k->key == NULL)
        return -ENOMEM;
    long len = b64_decode(f[7], fl[7], k->key);
    if (len < 0) {
        free(k->key);
        return 0;
    }
    k->len = (size_t)len;
    if (!(fl[5] == 1 && f[5][0] == '-')) {
        size_t plen = fl[1], alen = (size_t)(f[6] + fl[6] - f[5]);
        k->also = malloc(plen + 1 + alen + 1);
        if (k->also == NULL) {
            free(k->key);
            return -ENOMEM;
        }
        memcpy(k->also, f[1], plen);
        k->also[plen] = '\t';
        memcpy(k->also + plen + 1, f[5], alen);
        k->also[plen + 1 + alen] = '\0';
    }
    g->n++;
    return 0;
}

/* Whether field f[0..n) is base64 as buf_append_b64 writes it. */
static int b64_valid(const char *f, size_t n)
{
    if (n % 4 != 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        int pad = f[i] == '=' && i + 2 >= n && (i + 1 == n || f[i + 1] == '=');
        if (!pad && b64_value((unsigned char)f[i]) < 0)
            return 0;
    }
    return 1;
}

/*
 * Whether line[0..n) is a record exactly as this code writes them: the type, a
 * server's three non-empty name fields, and for K digits, an also pair ("-\t-" or
 * two non-empty fields) and base64 (possibly empty: Redis's empty key). What tells
 * a journal of the format before the header (REJOIN_JOURNAL_MAGIC) from a file
 * that is no journal at all.
 */
static int journal_record_valid(const char *line, size_t n)
{
    const char *f[9];
    size_t fl[9];
    size_t nf = journal_fields(line, n, f, fl, 9);

    if (nf < 4 || fl[0] != 1 || fl[1] == 0 || fl[2] == 0 || fl[3] == 0)
        return 0;
    switch (f[0][0]) {
    case 'C':
    case 'O':
        return nf == 4;
    case 'K':
        if (nf != 8 || fl[4] == 0 || fl[4] > 3 || fl[5] == 0 || fl[6] == 0)
            return 0;
        for (size_t i = 0; i < fl[4]; i++)
            if (f[4][i] < '0' || f[4][i] > '9')
                return 0;
        if ((fl[5] == 1 && f[5][0] == '-') != (fl[6] == 1 && f[6][0] == '-'))
            return 0;
        return b64_valid(f[7], fl[7]);
    default:
        return 0;
    }
}

enum journal_kind {
    JOURNAL_EMPTY,      /* no byte: adopted, the header written */
    JOURNAL_CURRENT,    /* the header line of this format */
    JOURNAL_CUT,        /* the magic, then the header line cut short: a crash as it was
                         * written to an empty file; written again */
    JOURNAL_NEWER,      /* the magic with another version: not ours to read or cut */
    JOURNAL_OLD,        /* no header, every complete line a record: the format before it */
    JOURNAL_FOREIGN     /* anything else: refused, left as it is */
};

/* What text[0..len), a whole file, is. */
static enum journal_kind journal_kind(const char *text, size_t len)
{
    static const char magic[] = REJOIN_JOURNAL_MAGIC "\t";
    size_t ml = sizeof(magic) - 1;

    if (len == 0)
        return JOURNAL_EMPTY;
    if (len >= ml && memcmp(text, magic, ml) == 0) {
        const char *nl = memchr(text, '\n', len);
        char want[32];
        int wl = snprintf(want, sizeof(want), "%s\t%d", REJOIN_JOURNAL_MAGIC,
                          REJOIN_JOURNAL_VERSION);
        if (nl != NULL && (size_t)(nl - text) == (size_t)wl && memcmp(text, want, (size_t)wl) == 0)
            return JOURNAL_CURRENT;
        if (nl == NULL && len <= (size_t)wl && memcmp(text, want, len) == 0)
            return JOURNAL_CUT;
        return JOURNAL_NEWER;
    }
    /* The format before the header: records only, perhaps a last one cut short by a
     * crash (which must at least begin like one). Not one complete line: no
     * evidence that it is a journal, and a file of one line without a newline is
     * far likelier something else. */
    size_t pos = 0, lines = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        if (nl == NULL)
            break;
        size_t n = (size_t)(nl - (text + pos));
        if (!journal_record_valid(text + pos, n))
            return JOURNAL_FOREIGN;
        lines++;
        pos += n + 1;
    }
    if (lines == 0)
        return JOURNAL_FOREIGN;
    if (pos < len && (len - pos < 2 || !strchr("KOC", text[pos]) || text[pos + 1] != '\t'))
        return JOURNAL_FOREIGN;
    return JOURNAL_OLD;
}

int rejoin_journal_parse(struct rejoin_journal *j, const char *text, size_t len)
{
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        if (nl == NULL)
            break;                          /* cut short by a crash: ignored */
        size_t n = (size_t)(nl - (text + pos));
        if (journal_record(j, text + pos, n) < 0)
            return -ENOMEM;
        pos += n + 1;
    }
    uint64_t live = 0;
    for (struct replay_group *g = j->groups; g != NULL; g = g->next)
        live += g->n + (uint64_t)g->overflowed;
    j->live = live;
    return 0;
}

int rejoin_journal_replay(struct rejoin_journal *j, const char *ident, rejoin_replay_fn fn,
                          void *arg)
{
    if (j == NULL)
        return -1;
    struct replay_group *g = replay_group(j, ident, strlen(ident), 0);
    if (g == NULL || (g->n == 0 && !g->overflowed))
        return -1;
    for (size_t i = 0; i < g->n; i++)
        fn(arg, g->keys[i].key, g->keys[i].len, g->keys[i].also, g->keys[i].flags);
    int over = g->overflowed;
    replay_group_clear(g);
    return over;
}

size_t rejoin_journal_forget(struct rejoin_journal *j, rejoin_forget_fn fn, void *arg)
{
    size_t n = 0;

    if (j == NULL)
        return 0;
    uv_mutex_lock(&j->mu);
    for (struct replay_group *g = j->groups; g != NULL; g = g->next) {
        if (g->n == 0 && !g->overflowed)
            continue;
        uint64_t recs = g->n + (uint64_t)g->overflowed;
        if (fn != NULL)
            fn(arg, g->ident, g->n, g->overflowed);
        size_t before = buf_len(&j->buf);
        /* the file says so too: a restart with the server configured again must not
         * find the records this run dropped */
        if (journal_line(j, 'C', g->ident) < 0 || buf_append(&j->buf, "\n", 1) < 0)
            buf_truncate(&j->buf, before);
        j->live = j->live > recs ? j->live - recs : 0;
        replay_group_clear(g);
        n++;
    }
    uv_mutex_unlock(&j->mu);
    return n;
}

size_t rejoin_journal_pending(const struct rejoin_journal *j)
{
    return j != NULL ? (size_t)j->live : 0;
}

/* ------------------------------------------------------------------ the file */

/* The whole of the file open on fd into *text (malloc'ed, the caller frees; NULL when
 * empty) and *len. 0, or -1 with err naming path. */
static int journal_slurp(int fd, const char *path, char **text, size_t *len, char *err,
                         size_t errlen)
{
    struct stat st;

    *text = NULL;
    *len = 0;
    if (fstat(fd, &st) < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file, so not a rejoin journal", path);
        return -1;
    }
    if (st.st_size == 0)
        return 0;
    char *t = malloc((size_t)st.st_size);
    if (t == NULL) {
        snprintf(err, errlen, "%s: out of memory reading it", path);
        return -1;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = pread(fd, t + got, (size_t)st.st_size - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            free(t);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    *text = t;
    *len = got;
    return 0;
}

/* Why a file of this kind is refused, into err (JOURNAL_NEWER and JOURNAL_FOREIGN). */
static void journal_refusal(enum journal_kind kind, const char *path, char *err, size_t errlen)
{
    if (kind == JOURNAL_NEWER)
        snprintf(err, errlen, "%s: a rejoin journal of another format than this ringleader "
                 "reads (its first line is not '%s<TAB>%d'), left as it is: run the "
                 "ringleader that wrote it, or remove the file", path, REJOIN_JOURNAL_MAGIC,
                 REJOIN_JOURNAL_VERSION);
    else
        snprintf(err, errlen, "%s: exists and is not a rejoin journal (it does not begin "
                 "with the line '%s<TAB>%d'), left as it is: point rejoin_log at a file of "
                 "its own (a new or an empty one), or remove this one if it is a journal "
                 "nobody needs", path, REJOIN_JOURNAL_MAGIC, REJOIN_JOURNAL_VERSION);
}

int rejoin_journal_check(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;           /* created at start */
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *text;
    size_t len;
    int rc = journal_slurp(fd, path, &text, &len, err, errlen);
    close(fd);
    if (rc < 0)
        return -1;
    enum journal_kind kind = journal_kind(text, len);
    free(text);
    if (kind == JOURNAL_NEWER || kind == JOURNAL_FOREIGN) {
        journal_refusal(kind, path, err, errlen);
        return -1;
    }
    return 0;
}

/* Write all of p[0..n) to fd. 0 or -errno. */
static int journal_write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/*
 * A journal of the format before the header (text[0..len), JOURNAL_OLD): its
 * complete records are written after a header to a new file beside it, which
 * then replaces it (a crash leaves the old file or the new one, never half of
 * either); j->fd is the new file's then. 0, or -1 with err (the old file as it was).
 */
static int journal_upgrade(struct rejoin_journal *j, const char *hdr, size_t hlen,
                           const char *text, size_t len, char *err, size_t errlen)
{
    size_t plen = strlen(j->path);
    char *tmp = malloc(plen + sizeof(".XXXXXX"));
    if (tmp == NULL) {
        snprintf(err, errlen, "%s: out of memory", j->path);
        return -1;
    }
    memcpy(tmp, j->path, plen);
    memcpy(tmp + plen, ".XXXXXX", sizeof(".XXXXXX"));
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: rewriting it with a header: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    const char *nl = memrchr(text, '\n', len);     /* the record a crash cut short: dropped */
    size_t keep = nl != NULL ? (size_t)(nl - text) + 1 : 0;
    int rc = journal_write_all(fd, hdr, hlen);
    if (rc == 0)
        rc = journal_write_all(fd, text, keep);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, j->path) < 0)
        rc = -errno;
    if (rc < 0) {
        snprintf(err, errlen, "%s: rewriting it with a header: %s", j->path, strerror(-rc));
        close(fd);
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    /* from now on appended to: O_APPEND, as the file open() gave */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_APPEND) < 0) {
        snprintf(err, errlen, "%s: %s", j->path, strerror(errno));
        close(fd);
        return -1;
    }
    close(j->fd);
    j->fd = fd;
    log_notice("rejoin_log %s: a journal of the format before the header line (%zu bytes): "
               "rewritten with it, its records kept", j->path, keep);
    return 0;
}

/*
 * Read the file open on j->fd: adopt it (an empty file gets the header), upgrade
 * it (the format before the header) or refuse it. A refused file is not written
 * to, cut or replaced. 0, or -1 with err naming the path.
 */
static int journal_read(struct rejoin_journal *j, char *err, size_t errlen)
{
    char hdr[64];
    int hl = snprintf(hdr, sizeof(hdr), "%s\t%d\n", REJOIN_JOURNAL_MAGIC, REJOIN_JOURNAL_VERSION);
    char *text;
    size_t len, skip = 0;
    int rc = -1, w;

    j->header = (size_t)hl;
    if (journal_slurp(j->fd, j->path, &text, &len, err, errlen) < 0)
        return -1;
    enum journal_kind kind = journal_kind(text, len);
    switch (kind) {
    case JOURNAL_CUT:
    case JOURNAL_EMPTY:
        w = kind == JOURNAL_CUT && ftruncate(j->fd, 0) < 0 ? -errno : 0;
        if (w == 0)
            w = journal_write_all(j->fd, hdr, (size_t)hl);
        if (w == 0 && fdatasync(j->fd) < 0)
            w = -errno;
        if (w < 0) {
            snprintf(err, errlen, "%s: writing its header: %s", j->path, strerror(-w));
            break;
        }
        len = 0;
        rc = 0;
        break;
    case JOURNAL_CURRENT: {
        /* A record a crash cut short would run into the next one appended: cut it
         * (the file is a journal: this code wrote those bytes). */
        const char *nl = memrchr(text, '\n', len);
        size_t keep = (size_t)(nl - text) + 1;
        if (keep < len && ftruncate(j->fd, (off_t)keep) < 0) {
            snprintf(err, errlen, "%s: cutting a record left incomplete: %s", j->path,
                     strerror(errno));
            break;
        }
        skip = (size_t)hl;
        rc = 0;
        break;
    }
    case JOURNAL_OLD:
        rc = journal_upgrade(j, hdr, (size_t)hl, text, len, err, errlen);
        break;
    case JOURNAL_NEWER:
    case JOURNAL_FOREIGN:
        journal_refusal(kind, j->path, err, errlen);
        break;
    }
    if (rc == 0 && len > skip && rejoin_journal_parse(j, text + skip, len - skip) < 0) {
        snprintf(err, errlen, "%s: out of memory reading it back", j->path);
        rc = -1;
    }
    free(text);
    return rc;
}

struct rejoin_journal *rejoin_journal_open(const char *path, char *err, size_t errlen)
{
    struct rejoin_journal *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    buf_init(&j->buf);
    j->fd = -1;
    if ((j->path = strdup(path)) == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    /* No O_TRUNC, and nothing written before journal_read has said it is ours. */
    j->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0600);
    if (j->fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail_path;
    }
    if (journal_read(j, err, errlen) < 0)
        goto fail_fd;
    if (uv_mutex_init(&j->mu) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail_fd;
    }
    return j;

fail_fd:
    close(j->fd);
fail_path:
    free(j->path);
fail:
    for (struct replay_group *g = j->groups, *next; g != NULL; g = next) {
        next = g->next;
        replay_group_clear(g);
        free(g->ident);
        free(g);
    }
    free(j);
    return NULL;
}

int rejoin_journal_sync(struct rejoin_journal *j)
{
    if (j == NULL)
        return 0;
    struct buf out;
    uv_mutex_lock(&j->mu);
    out = j->buf;
    buf_init(&j->buf);
    int truncate = j->live == 0;
    uv_mutex_unlock(&j->mu);

    int rc = 0;
    if (truncate) {
        /* Every record written or buffered is cleared: the file can be its header
         * alone (never less: it says the file is a journal). */
        struct stat st;
        RL_ASSERT(j->header > 0);       /* an adopted file has one: cut to 0 it is no journal */
        if (fstat(j->fd, &st) == 0 && (size_t)st.st_size > j->header &&
            ftruncate(j->fd, (off_t)j->header) < 0)
            rc = -errno;
    } else {
        size_t total = buf_len(&out);
        while (buf_len(&out) > 0) {
            ssize_t w = write(j->fd, buf_rptr(&out), buf_len(&out));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                rc = -errno;
                break;
            }
            buf_consume(&out, (size_t)w);
        }
        if (rc == 0 && total > 0 && fdatasync(j->fd) < 0)
            rc = -errno;
        if (buf_len(&out) > 0 && buf_len(&out) <= JOURNAL_BUF_MAX) {
            /* Not written: kept in front of what was appended since, for the next try. */
            uv_mutex_lock(&j->mu);
            if (buf_append(&out, buf_rptr(&j->buf), buf_len(&j->buf)) == 0)
                buf_swap(&out, &j->buf);
            uv_mutex_unlock(&j->mu);
        } else if (buf_len(&out) > 0) {
            log_error("rejoin_log %s: %zu bytes of records could not be written and are "
                      "dropped: a restart will not invalidate those keys", j->path,
                      buf_len(&out));
        }
    }
    buf_free(&out);
    if (rc < 0 && !j->failed)
        log_error("rejoin_log %s: %s: a restart may not invalidate what was written meanwhile",
                  j->path, strerror(-rc));
    else if (rc == 0 && j->failed)
        log_notice("rejoin_log %s: writing again", j->path);
    j->failed = rc < 0;
    return rc;
}

void rejoin_journal_close(struct rejoin_journal *j)
{
    if (j == NULL)
        return;
    rejoin_journal_sync(j);
    close(j->fd);
    buf_free(&j->buf);
    uv_mutex_destroy(&j->mu);
    for (struct replay_group *g = j->groups, *next; g != NULL; g = next) {
        next = g->next;
        replay_group_clear(g);
        free(g->ident);
        free(g);
    }
    free(j->path);
    free(j);
}
