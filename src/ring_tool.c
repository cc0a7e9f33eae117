/* ringleader-ring: offline placement tool — key owners, balance and the movement a config change causes. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "ring.h"

#define TOOL_DEFAULT_CONF     "conf/ringleader.yml"   /* the daemon's default too */
#define TOOL_DEFAULT_SAMPLES  1000000u
#define TOOL_DEFAULT_PREF     3u
#define TOOL_TOP_FLOWS        12u
#define TOOL_OUTBUF           (1u << 16)

/* Exit statuses: documented in docs/ring-tool.md. */
#define TOOL_EXIT_OK     0
#define TOOL_EXIT_ERROR  1   /* bad config, I/O error, out of memory */
#define TOOL_EXIT_USAGE  2   /* bad options, unknown pool */

enum tool_mode { TOOL_QUERY, TOOL_BALANCE, TOOL_DIFF };

struct tool_opts {
    const char *conf_path;
    const char *pool;        /* NULL: the only pool (query) or every pool */
    const char *diff_path;
    enum tool_mode mode;
    int         tsv;
    int         json;
    uint32_t    npref;       /* 0: the pool's default */
    uint32_t    samples;
    char      **keys;        /* argv tail; none: keys come from stdin */
    int         nkeys;
};

/* One loaded file: the config and one ring per pool, in file order. */
struct tool_conf {
    const char  *path;
    struct conf *conf;
    struct ring **rings;
};

/* Where the keys of a query come from: the command line, else stdin line by line. */
struct key_source {
    char  **argv;
    int     argc;
    int     next;
    FILE   *in;
    char   *line;            /* getline's buffer, reused: no allocation per key */
    size_t  cap;
};

static void tool_usage(FILE *f)
{
    fprintf(f,
            "Usage: ringleader-ring [-c conf file] [-p pool] [-n N] [--tsv|--json] [KEY...]\n"
            "       ringleader-ring [-c conf file] [-p pool] --balance [--samples N] [--json]\n"
            "       ringleader-ring [-c conf file] [-p pool] --diff NEW.yml [--samples N] [--json]\n"
            "\n"
            "Offline placement: builds each pool's ring from the same YAML as ringleader.\n"
            "With no KEY arguments, keys are read from standard input, one per line.\n"
            "\n"
            "Options:\n"
            "  -h, --help          : this help\n"
            "  -V, --version       : show version and exit\n"
            "  -c, --conf-file=S   : configuration file (default: %s)\n"
            "  -p, --pool=S        : pool to use (may be omitted when the file has one pool)\n"
            "  -n, --count=N       : preference list length (default: min(3, servers), or the\n"
            "                        pool's replicas if larger; at most %d)\n"
            "      --tsv           : one line per key, key<TAB>owner, nothing else\n"
            "      --json          : one JSON document (query, --balance, --diff)\n"
            "  -b, --balance       : each server's share of the keyspace and of sample keys\n"
            "  -d, --diff=S        : what changes from the -c file to this one, per pool\n"
            "  -s, --samples=N     : sample keys \"key:<i>\" for --balance/--diff (default: %u)\n"
            "\n"
            "Exit status: 0 ok, 1 bad configuration or I/O error, 2 usage error or unknown pool.\n",
            TOOL_DEFAULT_CONF, RING_MAX_PREF, TOOL_DEFAULT_SAMPLES);
}

/* ---------------------------------------------------------------- loading */

static void tool_conf_free(struct tool_conf *tc)
{
    if (tc->conf != NULL && tc->rings != NULL)
        for (uint32_t i = 0; i < tc->conf->npools; i++)
            ring_unref(tc->rings[i]);
    free(tc->rings);
    conf_free(tc->conf);
    tc->rings = NULL;
    tc->conf = NULL;
}

/*
 * Load `path` and build a ring for every pool. Returns TOOL_EXIT_OK with tc
 * filled (free with tool_conf_free), or TOOL_EXIT_ERROR after printing the
 * reason: conf_load's message verbatim (it names file:line:col and key).
 */
static int tool_conf_load(const char *path, struct tool_conf *tc)
{
    char err[1024] = "";

    memset(tc, 0, sizeof(*tc));
    tc->path = path;
    if (conf_load(path, &tc->conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return TOOL_EXIT_ERROR;
    }
    tc->rings = calloc(tc->conf->npools ? tc->conf->npools : 1, sizeof(*tc->rings));
    if (tc->rings == NULL) {
        fprintf(stderr, "ringleader-ring: %s\n", strerror(ENOMEM));
        goto fail;
    }
    for (uint32_t i = 0; i < tc->conf->npools; i++) {
        tc->rings[i] = ring_build(&tc->conf->pools[i], err, sizeof(err));
        if (tc->rings[i] == NULL) {
            fprintf(stderr, "%s: pool '%s': %s\n", path, tc->conf->pools[i].name, err);
            goto fail;
        }
    }
    return TOOL_EXIT_OK;

fail:
    tool_conf_free(tc);
    return TOOL_EXIT_ERROR;
}

static void tool_list_pools(FILE *f, const struct conf *c)
{
    for (uint32_t i = 0; i < c->npools; i++)
        fprintf(f, "%s%s", i ? ", " : "", c->pools[i].name);
    if (c->npools == 0)
        fputs("(none)", f);
}

/* Pool index of `name` in c (any pool when name is NULL and c has exactly one),
 * or -1 after printing why and the pools there are. */
static int tool_pick_pool(const struct tool_conf *tc, const char *name)
{
    const struct conf *c = tc->conf;

    if (name == NULL) {
        if (c->npools == 1)
            return 0;
        fprintf(stderr, "ringleader-ring: %s has %u pools, choose one with -p: ", tc->path,
                c->npools);
    } else {
        for (uint32_t i = 0; i < c->npools; i++)
            if (strcmp(c->pools[i].name, name) == 0)
                return (int)i;
        fprintf(stderr, "ringleader-ring: no pool '%s' in %s; pools: ", name, tc->path);
    }
    tool_list_pools(stderr, c);
    fputc('\n', stderr);
    return -1;
}

/* ---------------------------------------------------------------- shared helpers */

static const char *tool_label(const struct ring *r, uint32_t s)
{
    return r->servers[s].label;
}

/* Keys are raw bytes: shown as they are, except control bytes as \xNN. */
static void tool_put_key(FILE *f, const char *key, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x20 || c == 0x7f || c == '\\')
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
}

/* A JSON value for a key: the string when it is UTF-8, else {"hex": "..."}. */
static json_t *tool_json_key(const char *key, size_t len)
{
    json_t *s = json_stringn(key, len);
    if (s != NULL)
        return s;
    char *hex = malloc(len * 2 + 1);
    if (hex == NULL)
        return NULL;
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)key[i]);
    hex[len * 2] = '\0';
    s = json_pack("{s:s}", "hex", hex);
    free(hex);
    return s;
}

static json_t *tool_json_checksum(uint64_t checksum)
{
    char text[17];
    snprintf(text, sizeof(text), "%016llx", (unsigned long long)checksum);
    return json_string(text);
}

static int tool_nomem(void)
{
    fprintf(stderr, "ringleader-ring: %s\n", strerror(ENOMEM));
    return TOOL_EXIT_ERROR;
}

/* Print and release a JSON document; TOOL_EXIT_ERROR if it could not be built. */
static int tool_json_emit(json_t *root)
{
    if (root == NULL) {
        fprintf(stderr, "ringleader-ring: cannot build the JSON document: %s\n",
                strerror(ENOMEM));
        return TOOL_EXIT_ERROR;
    }
    int rc = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    json_decref(root);
    fputc('\n', stdout);
    return rc == 0 ? TOOL_EXIT_OK : TOOL_EXIT_ERROR;
}

/* 1 and a key, 0 at the end, -EIO on a read error. The key stays valid until
 * the next call. A trailing \n and then \r are stripped. */
static int key_next(struct key_source *ks, const char **key, size_t *len)
{
    if (ks->argc > 0) {
        if (ks->next >= ks->argc)
            return 0;
        *key = ks->argv[ks->next];
        *len = strlen(*key);
        ks->next++;
        return 1;
    }
    errno = 0;
    ssize_t n = getline(&ks->line, &ks->cap, ks->in);
    if (n < 0)
        return ferror(ks->in) ? -EIO : 0;
    if (n > 0 && ks->line[n - 1] == '\n')
        n--;
    if (n > 0 && ks->line[n - 1] == '\r')
        n--;
    *key = ks->line;
    *len = (size_t)n;
    return 1;
}

static void key_source_init(struct key_source *ks, char **argv, int argc)
{
    memset(ks, 0, sizeof(*ks));
    ks->argv = argv;
    ks->argc = argc;
    ks->in = stdin;
}

static void key_source_free(struct key_source *ks)
{
    free(ks->line);
}

/* The preference list length: -n, else min(3, servers) or replicas if larger. */
static uint32_t tool_pref_len(const struct tool_opts *o, const struct conf_pool *p,
                              const struct ring *r)
{
    uint32_t n = o->npref;
    if (n == 0) {
        n = TOOL_DEFAULT_PREF;
        if (p->replicas > n)
            n = p->replicas;
    }
    if (n > r->nservers)
        n = r->nservers;
    if (n > RING_MAX_PREF)
        n = RING_MAX_PREF;
    return n;
}

/*
 * max/mean and stddev/mean of each server's share relative to its fair
 * share (weight / total weight): with equal weights these are exactly the
 * max/mean and coefficient of variation of the shares themselves.
 */
static void tool_spread(const double *share, const struct ring *r, double *maxmean, double *cv)
{
    uint64_t wsum = 0;
    double sum = 0.0, sq = 0.0, max = 0.0;

    for (uint32_t i = 0; i < r->nservers; i++)
        wsum += r->servers[i].weight;
    for (uint32_t i = 0; i < r->nservers; i++) {
        double x = share[i] / ((double)r->servers[i].weight / (double)wsum);
        sum += x;
        if (x > max)
            max = x;
    }
    double mean = sum / r->nservers;
    for (uint32_t i = 0; i < r->nservers; i++) {
        double x = share[i] / ((double)r->servers[i].weight / (double)wsum) - mean;
        sq += x * x;
    }
    *maxmean = mean > 0 ? max / mean : 0.0;
    *cv = mean > 0 ? sqrt(sq / r->nservers) / mean : 0.0;
}

static int tool_shares_exact(const struct ring *r)
{
    return r->nservers == 1 || r->dist.type == DIST_KETAMA || r->dist.type == DIST_MODULA;
}

static void tool_print_ring_head(const struct tool_conf *tc, uint32_t pi, uint64_t epoch)
{
    const struct ring *r = tc->rings[pi];

    printf("pool      %s\n", tc->conf->pools[pi].name);
    printf("epoch     %" PRIu64 "\n", epoch);
    printf("checksum  %016llx\n", (unsigned long long)r->checksum);
    printf("ring      %s, hash %s, %u server%s\n", dist_name(r->dist.type), hash_name(r->hash),
           r->nservers, r->nservers == 1 ? "" : "s");
}

/* ---------------------------------------------------------------- owner query */

/* key<TAB>owner per key, nothing else; stdout is block-buffered by main. */
static int tool_query_tsv(const struct ring *r, struct key_source *ks)
{
    const char *key;
    size_t len;
    int rc;

    while ((rc = key_next(ks, &key, &len)) == 1) {
        const char *label = tool_label(r, ring_owner(r, key, len));
        fwrite(key, 1, len, stdout);
        putchar('\t');
        fputs(label, stdout);
        putchar('\n');
    }
    return rc;
}

static int tool_query_text(const struct tool_conf *tc, uint32_t pi, uint32_t npref,
                           struct key_source *ks)
{
    const struct ring *r = tc->rings[pi];
    uint32_t pref[RING_MAX_PREF];
    const char *key;
    size_t len;
    int rc;

    tool_print_ring_head(tc, pi, r->epoch);
    printf("\nkey\towner\tpreference (%u)\n", npref);
    while ((rc = key_next(ks, &key, &len)) == 1) {
        uint32_t n = ring_preference(r, key, len, pref, npref);
        tool_put_key(stdout, key, len);
        printf("\t%s\t", tool_label(r, ring_owner(r, key, len)));
        for (uint32_t i = 0; i < n; i++)
            printf("%s%s", i ? " " : "", tool_label(r, pref[i]));
        putchar('\n');
    }
    return rc;
}

static int tool_query_json(const struct tool_conf *tc, uint32_t pi, uint32_t npref,
                           struct key_source *ks)
{
    const struct ring *r = tc->rings[pi];
    uint32_t pref[RING_MAX_PREF];
    const char *key;
    size_t len;
    int rc;
    json_t *keys = json_array();
    json_t *root = json_pack("{s:s, s:I, s:o, s:s, s:s, s:i, s:o}",
                             "pool", tc->conf->pools[pi].name,
                             "epoch", (json_int_t)r->epoch,
                             "checksum", tool_json_checksum(r->checksum),
                             "distribution", dist_name(r->dist.type),
                             "hash", hash_name(r->hash),
                             "servers", (int)r->nservers,
                             "keys", keys);
    if (root == NULL)
        return -ENOMEM;

    while ((rc = key_next(ks, &key, &len)) == 1) {
        uint32_t n = ring_preference(r, key, len, pref, npref);
        json_t *list = json_array();
        for (uint32_t i = 0; list != NULL && i < n; i++)
            if (json_array_append_new(list, json_string(tool_label(r, pref[i]))) != 0) {
                json_decref(list);
                list = NULL;
            }
        json_t *item = json_pack("{s:o, s:s, s:o}", "key", tool_json_key(key, len),
                                 "owner", tool_label(r, ring_owner(r, key, len)),
                                 "preference", list);
        if (item == NULL || json_array_append_new(keys, item) != 0) {
            json_decref(root);
            return -ENOMEM;
        }
    }
    if (rc < 0) {
        json_decref(root);
        return rc;
    }
    tool_json_emit(root);       /* a failed write shows in ferror(stdout), checked by main */
    return 0;
}

static int tool_query(const struct tool_opts *o, const struct tool_conf *tc)
{
    struct key_source ks;
    int pi = tool_pick_pool(tc, o->pool), rc;

    if (pi < 0)
        return TOOL_EXIT_USAGE;
    const struct ring *r = tc->rings[pi];
    uint32_t npref = tool_pref_len(o, &tc->conf->pools[pi], r);

    key_source_init(&ks, o->keys, o->nkeys);
    if (o->tsv)
        rc = tool_query_tsv(r, &ks);
    else if (o->json)
        rc = tool_query_json(tc, (uint32_t)pi, npref, &ks);
    else
        rc = tool_query_text(tc, (uint32_t)pi, npref, &ks);
    key_source_free(&ks);
    if (rc < 0) {
        fprintf(stderr, "ringleader-ring: %s\n", rc == -EIO ? "error reading keys from stdin"
                                                           : strerror(-rc));
        return TOOL_EXIT_ERROR;
    }
    return TOOL_EXIT_OK;
}

/* ---------------------------------------------------------------- balance */

struct tool_balance {
    double *exact;         /* ring_shares */
    double *sampled;       /* share of the sample keys */
    double  exact_maxmean, exact_cv, sampled_maxmean, sampled_cv;
    uint64_t wsum;
};

/* Fill b for ring r; 0, or -ENOMEM. Free b->exact and b->sampled. */
static int tool_balance_compute(const struct ring *r, uint32_t samples, struct tool_balance *b)
{
    char key[32];

    memset(b, 0, sizeof(*b));
    b->exact = calloc(r->nservers, sizeof(double));
    b->sampled = calloc(r->nservers, sizeof(double));
    if (b->exact == NULL || b->sampled == NULL) {
        free(b->exact);
        free(b->sampled);
        return -ENOMEM;
    }
    ring_shares(r, b->exact, samples);
    for (uint32_t i = 0; i < samples; i++) {
        int len = snprintf(key, sizeof(key), "key:%u", i);
        b->sampled[ring_owner(r, key, (size_t)len)] += 1.0;
    }
    for (uint32_t s = 0; s < r->nservers; s++) {
        b->sampled[s] /= samples;
        b->wsum += r->servers[s].weight;
    }
    tool_spread(b->exact, r, &b->exact_maxmean, &b->exact_cv);
    tool_spread(b->sampled, r, &b->sampled_maxmean, &b->sampled_cv);
    return 0;
}

static void tool_balance_text(const struct tool_conf *tc, uint32_t pi, uint32_t samples,
                              const struct tool_balance *b)
{
    const struct ring *r = tc->rings[pi];
    int w = (int)strlen("stddev/mean");

    for (uint32_t s = 0; s < r->nservers; s++)
        if ((int)strlen(tool_label(r, s)) > w)
            w = (int)strlen(tool_label(r, s));
    tool_print_ring_head(tc, pi, r->epoch);
    printf("samples   %u keys \"key:<i>\"\n\n", samples);
    printf("%-*s  %6s  %9s  %9s  %9s\n", w, "server", "weight", "fair",
           tool_shares_exact(r) ? "keyspace" : "keyspace~", "keys");
    for (uint32_t s = 0; s < r->nservers; s++)
        printf("%-*s  %6u  %8.3f%%  %8.3f%%  %8.3f%%\n", w, tool_label(r, s),
               r->servers[s].weight, 100.0 * r->servers[s].weight / (double)b->wsum,
               100.0 * b->exact[s], 100.0 * b->sampled[s]);
    printf("%-*s  %6s  %9s  %9.4f  %9.4f\n", w, "max/mean", "", "", b->exact_maxmean,
           b->sampled_maxmean);
    printf("%-*s  %6s  %9s  %9.4f  %9.4f\n", w, "stddev/mean", "", "", b->exact_cv,
           b->sampled_cv);
    if (!tool_shares_exact(r))
        printf("(keyspace~: %s has no points to measure; estimated over %u hashes)\n",
               dist_name(r->dist.type), samples);
}

static json_t *tool_balance_json(const struct tool_conf *tc, uint32_t pi, uint32_t samples,
                                 const struct tool_balance *b)
{
    const struct ring *r = tc->rings[pi];
    json_t *servers = json_array();

    for (uint32_t s = 0; servers != NULL && s < r->nservers; s++) {
        json_t *o = json_pack("{s:s, s:s, s:i, s:f, s:f, s:f}",
                              "server", tool_label(r, s), "ident", r->servers[s].ident,
                              "weight", (int)r->servers[s].weight,
                              "fair_share", r->servers[s].weight / (double)b->wsum,
                              "keyspace_share", b->exact[s], "sample_share", b->sampled[s]);
        if (o == NULL || json_array_append_new(servers, o) != 0) {
            json_decref(servers);
            return NULL;
        }
    }
    return json_pack("{s:s, s:I, s:o, s:s, s:s, s:b, s:i, s:o,"
                     " s:{s:f, s:f}, s:{s:f, s:f}}",
                     "pool", tc->conf->pools[pi].name, "epoch", (json_int_t)r->epoch,
                     "checksum", tool_json_checksum(r->checksum),
                     "distribution", dist_name(r->dist.type), "hash", hash_name(r->hash),
                     "keyspace_exact", tool_shares_exact(r), "samples", (int)samples,
                     "servers", servers,
                     "keyspace", "max_over_mean", b->exact_maxmean,
                     "stddev_over_mean", b->exact_cv,
                     "sample", "max_over_mean", b->sampled_maxmean,
                     "stddev_over_mean", b->sampled_cv);
}

/* --balance: the chosen pool, or every pool when -p is absent. */
static int tool_balance(const struct tool_opts *o, const struct tool_conf *tc)
{
    uint32_t first = 0, last = tc->conf->npools;
    json_t *pools = o->json ? json_array() : NULL;

    if (o->pool != NULL) {
        int pi = tool_pick_pool(tc, o->pool);
        if (pi < 0) {
            json_decref(pools);
            return TOOL_EXIT_USAGE;
        }
        first = (uint32_t)pi;
        last = first + 1;
    }
    for (uint32_t pi = first; pi < last; pi++) {
        struct tool_balance b;
        if (tool_balance_compute(tc->rings[pi], o->samples, &b) != 0) {
            json_decref(pools);
            return tool_nomem();
        }
        if (o->json) {
            json_t *one = tool_balance_json(tc, pi, o->samples, &b);
            if (pools != NULL && (one == NULL || json_array_append_new(pools, one) != 0)) {
                json_decref(pools);
                pools = NULL;
            }
        } else {
            if (pi != first)
                putchar('\n');
            tool_balance_text(tc, pi, o->samples, &b);
        }
        free(b.exact);
        free(b.sampled);
    }
    if (o->json)
        return tool_json_emit(pools ? json_pack("{s:o}", "pools", pools) : NULL);
    return TOOL_EXIT_OK;
}

/* ---------------------------------------------------------------- diff */

struct tool_flow {
    uint32_t from, to;     /* old ring index, new ring index */
    uint32_t count;
};

static int flow_cmp(const void *pa, const void *pb)
{
    const struct tool_flow *a = pa, *b = pb;
    if (a->count != b->count)
        return a->count < b->count ? 1 : -1;
    if (a->from != b->from)
        return a->from < b->from ? -1 : 1;
    return a->to < b->to ? -1 : a->to > b->to;
}

/* One pool's change, old and/or new side absent for a pool only in one file. */
struct tool_pool_diff {
    const char *name;
    const struct conf_pool *op, *np;
    const struct ring *or, *nr;
    uint64_t old_epoch, new_epoch;
    double moved, floor;
    int moved_exact;
    uint32_t samples, sample_moved;
    struct tool_flow *flows;    /* non-zero moved cells of the from->to matrix, largest first */
    uint32_t nflows;
};


static int tool_same_hashing(const struct ring *a, const struct ring *b)
{
    return a->hash == b->hash && a->hash_seed == b->hash_seed && a->has_tag == b->has_tag &&
           (!a->has_tag || memcmp(a->tag, b->tag, 2) == 0);
}

/*
 * Sample keys "key:<i>" on both rings and count, for each moved key, the
 * (old owner, new owner) cell; owners are matched by identity as the daemon
 * matches servers. Fills d->flows; 0 or -ENOMEM.
 */
static int tool_diff_flows(struct tool_pool_diff *d, uint32_t samples)
{
    const struct ring *a = d->or, *b = d->nr;
    uint32_t *map = malloc(b->nservers * sizeof(*map));
    uint32_t *cells = calloc((size_t)a->nservers * b->nservers, sizeof(*cells));
    char key[32];
    int rc = -ENOMEM;

    if (map == NULL || cells == NULL)
        goto out;
    for (uint32_t j = 0; j < b->nservers; j++) {
        map[j] = UINT32_MAX;
        for (uint32_t i = 0; i < a->nservers && map[j] == UINT32_MAX; i++)
            if (strcmp(a->servers[i].ident, b->servers[j].ident) == 0)
                map[j] = i;
    }
    d->samples = samples;
    for (uint32_t k = 0; k < samples; k++) {
        int len = snprintf(key, sizeof(key), "key:%u", k);
        uint32_t from = ring_owner(a, key, (size_t)len), to = ring_owner(b, key, (size_t)len);
        if (map[to] != from) {
            cells[(size_t)from * b->nservers + to]++;
            d->sample_moved++;
        }
    }
    uint32_t n = 0;
    for (size_t c = 0; c < (size_t)a->nservers * b->nservers; c++)
        n += cells[c] != 0;
    d->flows = calloc(n ? n : 1, sizeof(*d->flows));
    if (d->flows == NULL)
        goto out;
    for (size_t c = 0; c < (size_t)a->nservers * b->nservers; c++)
        if (cells[c] != 0)
            d->flows[d->nflows++] = (struct tool_flow){ (uint32_t)(c / b->nservers),
                                                        (uint32_t)(c % b->nservers), cells[c] };
    qsort(d->flows, d->nflows, sizeof(*d->flows), flow_cmp);
    rc = 0;
out:
    free(map);
    free(cells);
    return rc;
}

/* Compare one pool across the files; 0 or -ENOMEM. Epochs are what a daemon
 * started on the old file shows, then after reloading the new one. */
static int tool_diff_pool(struct tool_pool_diff *d, uint32_t samples)
{
    if (d->or == NULL) {                      /* new pool */
        d->new_epoch = 1;
        d->moved = d->floor = 1.0;
        d->moved_exact = 1;
        return 0;
    }
    d->old_epoch = d->or->epoch;
    if (d->nr == NULL) {                      /* removed pool */
        d->moved = d->floor = 1.0;
        d->moved_exact = 1;
        return 0;
    }
    if (d->or->checksum == d->nr->checksum) {
        d->new_epoch = d->old_epoch;
        d->moved_exact = 1;
        return 0;
    }
    d->new_epoch = d->old_epoch + 1;
    d->moved = ring_moved_fraction(d->or, d->nr, samples, &d->floor);
    if (d->moved < 0)
        return -ENOMEM;
    d->moved_exact = tool_same_hashing(d->or, d->nr) && d->or->dist.type == DIST_KETAMA &&
                     d->nr->dist.type == DIST_KETAMA;
    return tool_diff_flows(d, samples);
}

/* " label" for each of p's servers not in `other`, or " -"; then a newline. */
static void tool_print_servers_not_in(const struct conf_pool *p, const struct conf_pool *other)
{
    uint32_t n = 0;

    for (uint32_t s = 0; p != NULL && s < p->nservers; s++) {
        if (conf_pool_has_server(other, &p->servers[s], s))
            continue;
        printf(" %s", p->servers[s].label);
        n++;
    }
    printf("%s\n", n ? "" : " -");
}

static void tool_diff_text(const struct tool_pool_diff *d)
{
    printf("pool      %s%s\n", d->name,
           d->or == NULL ? " (new)" : d->nr == NULL ? " (removed)" : "");
    if (d->or != NULL && d->nr != NULL)
        printf("epoch     %" PRIu64 " -> %" PRIu64 "\n", d->old_epoch, d->new_epoch);
    else if (d->or != NULL)
        printf("epoch     %" PRIu64 " -> -\n", d->old_epoch);
    else
        printf("epoch     - -> %" PRIu64 "\n", d->new_epoch);
    printf("checksum  ");
    if (d->or != NULL)
        printf("%016llx", (unsigned long long)d->or->checksum);
    else
        printf("-");
    printf(" -> ");
    if (d->nr != NULL)
        printf("%016llx\n", (unsigned long long)d->nr->checksum);
    else
        printf("-\n");
    printf("servers   %u -> %u\n", d->op ? d->op->nservers : 0, d->np ? d->np->nservers : 0);
    printf("added    ");
    tool_print_servers_not_in(d->np, d->op);
    printf("removed  ");
    tool_print_servers_not_in(d->op, d->np);
    printf("moved     %.4f%% of the keyspace (%s), floor %.4f%%", 100.0 * d->moved,
           d->moved_exact ? "exact" : "estimated", 100.0 * d->floor);
    if (d->floor > 0 && d->or != NULL && d->nr != NULL)
        printf(" (%.2fx the floor)", d->moved / d->floor);
    putchar('\n');
    if (d->samples == 0)
        return;
    printf("flows     %.4f%% of %u sample keys moved; from -> to, largest first:\n",
           100.0 * d->sample_moved / d->samples, d->samples);
    int w = 4;
    for (uint32_t f = 0; f < d->nflows && f < TOOL_TOP_FLOWS; f++)
        if ((int)strlen(d->or->servers[d->flows[f].from].label) > w)
            w = (int)strlen(d->or->servers[d->flows[f].from].label);
    uint32_t rest = d->sample_moved;
    for (uint32_t f = 0; f < d->nflows && f < TOOL_TOP_FLOWS; f++) {
        const struct tool_flow *fl = &d->flows[f];
        printf("  %-*s -> %-20s %8.4f%%\n", w, d->or->servers[fl->from].label,
               d->nr->servers[fl->to].label, 100.0 * fl->count / d->samples);
        rest -= fl->count;
    }
    if (d->nflows > TOOL_TOP_FLOWS)
        printf("  (%u more flows, %.4f%% together)\n", d->nflows - TOOL_TOP_FLOWS,
               100.0 * rest / d->samples);
}

/* A JSON array of the labels of `p`'s servers that are not in `other`. */
static json_t *tool_json_servers_not_in(const struct conf_pool *p, const struct conf_pool *other)
{
    json_t *a = json_array();
    for (uint32_t s = 0; a != NULL && p != NULL && s < p->nservers; s++)
        if (!conf_pool_has_server(other, &p->servers[s], s) &&
            json_array_append_new(a, json_string(p->servers[s].label)) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *tool_diff_json(const struct tool_pool_diff *d)
{
    json_t *flows = json_array();
    for (uint32_t f = 0; flows != NULL && f < d->nflows && f < TOOL_TOP_FLOWS; f++) {
        const struct tool_flow *fl = &d->flows[f];
        json_t *o = json_pack("{s:s, s:s, s:f}", "from", d->or->servers[fl->from].label,
                              "to", d->nr->servers[fl->to].label,
                              "fraction", (double)fl->count / d->samples);
        if (o == NULL || json_array_append_new(flows, o) != 0) {
            json_decref(flows);
            flows = NULL;
        }
    }
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:f, s:b, s:i, s:f, s:i, s:o}",
                     "pool", d->name,
                     "old_epoch", d->or ? json_integer((json_int_t)d->old_epoch) : json_null(),
                     "new_epoch", d->nr ? json_integer((json_int_t)d->new_epoch) : json_null(),
                     "old_checksum", d->or ? tool_json_checksum(d->or->checksum) : json_null(),
                     "new_checksum", d->nr ? tool_json_checksum(d->nr->checksum) : json_null(),
                     "added", tool_json_servers_not_in(d->np, d->op),
                     "removed", tool_json_servers_not_in(d->op, d->np),
                     "moved", d->moved, "floor", d->floor, "moved_exact", d->moved_exact,
                     "samples", (int)d->samples,
                     "sample_moved", d->samples ? (double)d->sample_moved / d->samples : 0.0,
                     "flows_total", (int)d->nflows, "flows", flows);
}

static const struct conf_pool *tool_find_pool(const struct conf *c, const char *name,
                                              enum conf_proto proto, uint32_t *index)
{
    for (uint32_t i = 0; i < c->npools; i++)
        if (strcmp(c->pools[i].name, name) == 0 && c->pools[i].protocol == proto) {
            *index = i;
            return &c->pools[i];
        }
    return NULL;
}

/* Report one pool pair (text or into `out`); TOOL_EXIT_* */
static int tool_diff_one(const struct tool_opts *o, struct tool_pool_diff *d, json_t *out,
                         int *first)
{
    int rc = TOOL_EXIT_OK;

    if (tool_diff_pool(d, o->samples) != 0) {
        rc = tool_nomem();
    } else if (o->json) {
        json_t *one = tool_diff_json(d);
        if (one == NULL || json_array_append_new(out, one) != 0)
            rc = tool_json_emit(NULL);
    } else {
        if (!*first)
            putchar('\n');
        tool_diff_text(d);
    }
    *first = 0;
    free(d->flows);
    return rc;
}

/*
 * --diff: every pool present in either file (matched by name and protocol,
 * as the daemon's reload matches them), or only -p's.
 */
static int tool_diff(const struct tool_opts *o, const struct tool_conf *oc,
                     const struct tool_conf *nc)
{
    json_t *pools = o->json ? json_array() : NULL;
    int first = 1, rc = TOOL_EXIT_OK, found = 0;

    if (o->json && pools == NULL)
        return tool_json_emit(NULL);
    for (uint32_t i = 0; rc == TOOL_EXIT_OK && i < oc->conf->npools; i++) {
        const struct conf_pool *op = &oc->conf->pools[i];
        uint32_t j = 0;
        if (o->pool != NULL && strcmp(o->pool, op->name) != 0)
            continue;
        const struct conf_pool *np = tool_find_pool(nc->conf, op->name, op->protocol, &j);
        struct tool_pool_diff d = { .name = op->name, .op = op, .np = np,
                                    .or = oc->rings[i], .nr = np ? nc->rings[j] : NULL };
        found = 1;
        rc = tool_diff_one(o, &d, pools, &first);
    }
    for (uint32_t j = 0; rc == TOOL_EXIT_OK && j < nc->conf->npools; j++) {
        const struct conf_pool *np = &nc->conf->pools[j];
        uint32_t i = 0;
        if (o->pool != NULL && strcmp(o->pool, np->name) != 0)
            continue;
        found = 1;
        if (tool_find_pool(oc->conf, np->name, np->protocol, &i) != NULL)
            continue;
        struct tool_pool_diff d = { .name = np->name, .np = np, .nr = nc->rings[j] };
        rc = tool_diff_one(o, &d, pools, &first);
    }
    if (rc == TOOL_EXIT_OK && !found) {
        fprintf(stderr, "ringleader-ring: no pool '%s' in %s or %s; pools: ", o->pool,
                oc->path, nc->path);
        tool_list_pools(stderr, oc->conf);
        fputs("; ", stderr);
        tool_list_pools(stderr, nc->conf);
        fputc('\n', stderr);
        rc = TOOL_EXIT_USAGE;
    }
    if (o->json && rc == TOOL_EXIT_OK)
        return tool_json_emit(json_pack("{s:s, s:s, s:o}", "old", oc->path, "new", nc->path,
                                        "pools", pools));
    json_decref(pools);
    return rc;
}

/* ---------------------------------------------------------------- main */

/* Parse an unsigned decimal in [min, max]; 0 or -EINVAL. */
static int tool_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min || v > max)
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

/* Options into o; TOOL_EXIT_OK to go on, else the status to exit with (-1: exit 0). */
static int tool_parse_args(int argc, char **argv, struct tool_opts *o)
{
    enum { OPT_TSV = 256, OPT_JSON };
    static const struct option longopts[] = {
        { "help",      no_argument,       NULL, 'h' },
        { "version",   no_argument,       NULL, 'V' },
        { "conf-file", required_argument, NULL, 'c' },
        { "pool",      required_argument, NULL, 'p' },
        { "count",     required_argument, NULL, 'n' },
        { "tsv",       no_argument,       NULL, OPT_TSV },
        { "json",      no_argument,       NULL, OPT_JSON },
        { "balance",   no_argument,       NULL, 'b' },
        { "diff",      required_argument, NULL, 'd' },
        { "samples",   required_argument, NULL, 's' },
        { NULL, 0, NULL, 0 },
    };
    int c;

    memset(o, 0, sizeof(*o));
    o->conf_path = TOOL_DEFAULT_CONF;
    o->samples = TOOL_DEFAULT_SAMPLES;
    while ((c = getopt_long(argc, argv, "hVc:p:n:bd:s:", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            tool_usage(stdout);
            return -1;
        case 'V':
            printf("This is ringleader-ring-%s\n", PACKAGE_VERSION);
            return -1;
        case 'c':
            o->conf_path = optarg;
            break;
        case 'p':
            o->pool = optarg;
            break;
        case 'n':
            if (tool_parse_u32(optarg, 1, RING_MAX_PREF, &o->npref) != 0) {
                fprintf(stderr, "ringleader-ring: -n wants 1..%d, not '%s'\n", RING_MAX_PREF,
                        optarg);
                return TOOL_EXIT_USAGE;
            }
            break;
        case OPT_TSV:
            o->tsv = 1;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case 'b':
            o->mode = TOOL_BALANCE;
            break;
        case 'd':
            o->mode = TOOL_DIFF;
            o->diff_path = optarg;
            break;
        case 's':
            if (tool_parse_u32(optarg, 1, 1000000000u, &o->samples) != 0) {
                fprintf(stderr, "ringleader-ring: --samples wants 1..1000000000, not '%s'\n",
                        optarg);
                return TOOL_EXIT_USAGE;
            }
            break;
        default:
            tool_usage(stderr);
            return TOOL_EXIT_USAGE;
        }
    }
    o->keys = argv + optind;
    o->nkeys = argc - optind;
    if (o->tsv && o->json) {
        fprintf(stderr, "ringleader-ring: --tsv and --json exclude each other\n");
        return TOOL_EXIT_USAGE;
    }
    if (o->mode != TOOL_QUERY && (o->tsv || o->nkeys > 0)) {
        fprintf(stderr, "ringleader-ring: --balance and --diff take no keys and no --tsv\n");
        return TOOL_EXIT_USAGE;
    }
    return TOOL_EXIT_OK;
}

int main(int argc, char **argv)
{
    struct tool_opts o;
    struct tool_conf oc, nc;
    int rc = tool_parse_args(argc, argv, &o);

    if (rc != TOOL_EXIT_OK)
        return rc < 0 ? TOOL_EXIT_OK : rc;
    /* 100,000 keys in one call: block-buffer stdout even on a pipe or terminal. */
    setvbuf(stdout, NULL, _IOFBF, TOOL_OUTBUF);

    rc = tool_conf_load(o.conf_path, &oc);
    if (rc != TOOL_EXIT_OK)
        return rc;
    switch (o.mode) {
    case TOOL_QUERY:
        rc = tool_query(&o, &oc);
        break;
    case TOOL_BALANCE:
        rc = tool_balance(&o, &oc);
        break;
    case TOOL_DIFF:
        rc = tool_conf_load(o.diff_path, &nc);
        if (rc == TOOL_EXIT_OK) {
            rc = tool_diff(&o, &oc, &nc);
            tool_conf_free(&nc);
        }
        break;
    }
    tool_conf_free(&oc);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "ringleader-ring: writing the output: %s\n", strerror(errno));
        return TOOL_EXIT_ERROR;
    }
    return rc;
}
