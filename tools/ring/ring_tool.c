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
#include <unistd.h>

#include "placement/cluster_map.h"
#include "conf/conf.h"
#include "proto/proto.h"
#include "control/cluster_fetch.h"
#include "placement/ring.h"
#include "ring_plot.h"
#include "lib/buf.h"
#include "lib/util.h"

#define TOOL_DEFAULT_CONF     "conf/ringleader.yml"   /* the daemon's default too */
#define TOOL_DEFAULT_SAMPLES  1000000u
#define TOOL_DEFAULT_PREF     3u
#define TOOL_TOP_FLOWS        12u
#define TOOL_OUTBUF           (1u << 16)

/* Exit statuses: documented in docs/ring-tool.md. */
#define TOOL_EXIT_OK     0
#define TOOL_EXIT_ERROR  1   /* bad config, I/O error, out of memory */
#define TOOL_EXIT_USAGE  2   /* bad options, unknown pool */

enum tool_mode { TOOL_QUERY, TOOL_BALANCE, TOOL_DIFF, TOOL_CLUSTER };

struct tool_opts {
    const char *conf_path;
    const char *pool;        /* NULL: the only pool (query) or every pool */
    const char *diff_path;
    enum tool_mode mode;
    int         tsv;
    int         json;
    uint32_t    npref;       /* 0: the pool's default */
    uint32_t    samples;
    const char *svg_path;    /* --svg: also draw --balance / --diff there */
    const char *keys_path;   /* --keys: sample keys from this file ("-": stdin) */
    const char *shards_path; /* --cluster-shards: a saved CLUSTER SHARDS (or SLOTS) reply */
    const char *cluster_addr; /* --cluster: a node to ask for its map, "host:port" */
    const char *cluster_user; /* --cluster-user: the ACL user to AUTH as (password:
                                 REDISCLI_AUTH, as redis-cli reads it) */
    char      **keys;        /* argv tail; none: keys come from stdin */
    int         nkeys;
};

/*
 * The sample keys of --balance and --diff: "key:0" .. "key:N-1" (the twemproxy vectors'
 * key set), or every line of --keys FILE as it is (the trailing \n, then \r, removed):
 * real keys show what a hash does with them, which key:<i> may not (fnv1a_64 sends "a" ..
 * "z" to one server).
 */
struct tool_samples {
    uint32_t  count;
    char     *data;          /* the file, NULL for key:<i> */
    size_t   *start;         /* [count] */
    uint32_t *len;           /* [count] */
    char      what[600];     /* how the text and the plots name them */
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
            "       ringleader-ring [-c conf file] [-p pool] --balance [--samples N | --keys FILE]\n"
            "                       [--json] [--svg FILE]\n"
            "       ringleader-ring [-c conf file] [-p pool] --diff NEW.yml [--samples N | --keys FILE]\n"
            "                       [--json] [--svg FILE]\n"
            "       ringleader-ring --cluster HOST:PORT | --cluster-shards FILE [--tsv|--json] [KEY...]\n"
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
            "  -k, --keys=FILE     : sample keys from FILE, one a line, instead (\"-\": stdin)\n"
            "      --svg=FILE      : also draw --balance (bars against fair shares) or --diff\n"
            "                        (a from -> to matrix of the keys that move) as SVG\n"
            "      --cluster-shards=FILE : where keys go in a Redis Cluster: FILE holds a raw\n"
            "                        CLUSTER SHARDS (or CLUSTER SLOTS) reply as a node sent it;\n"
            "                        each key's slot, master and replicas (no -c file needed)\n"
            "      --cluster=HOST:PORT : the same, with the map asked of that cluster node\n"
            "                        (AUTH first when REDISCLI_AUTH holds a password)\n"
            "      --cluster-user=USER : the ACL user for that AUTH (default: default)\n"
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

/* ---------------------------------------------------------------- a cluster's map */

/* The map the node at addr ("host:port") serves: the proxy's own fetch (CLUSTER INFO +
 * SHARDS, SLOTS for Redis < 7), after AUTH when REDISCLI_AUTH holds a password (as
 * redis-cli reads it: never in argv), as `user` with an ACL user. NULL after a message. */
static struct cluster_map *tool_cluster_fetch(const char *addr, const char *user)
{
    const char *pass = getenv("REDISCLI_AUTH");
    struct proto_hello h;
    struct cluster_map *m = NULL;
    char err[512];

    memset(&h, 0, sizeof(h));
    if (pass != NULL && pass[0] != '\0') {
        h.username = user;
        h.password = pass;
    }
    if (cluster_fetch_sync(&proto_redis_ops, &h, NULL, &addr, 1, 5000, &m, NULL, err,
                           sizeof(err)) < 0) {
        fprintf(stderr, "ringleader-ring: %s%s\n", strstr(err, "hello") ? "AUTH refused: " : "",
                err);
        return NULL;
    }
    return m;
}

/* The map of a saved CLUSTER SHARDS reply (or CLUSTER SLOTS: the fallback form), read
 * with the proxy's own parser. NULL after a message. */
static struct cluster_map *tool_cluster_load(const char *path)
{
    static const char no_info[] = "$0\r\n\r\n";     /* CLUSTER INFO is not in the file */
    const struct proto_cluster_ops *co = proto_redis_ops.cluster;
    char err[512] = "";
    struct cluster_map *m = NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    FILE *f = fopen(path, "rb");

    if (f == NULL) {
        fprintf(stderr, "ringleader-ring: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (len == cap) {
            char *t = cap < (64u << 20) ? realloc(text, cap ? cap * 2 : 65536) : NULL;
            if (t == NULL) {
                fprintf(stderr, "ringleader-ring: %s: too large or out of memory\n", path);
                goto fail;
            }
            text = t;
            cap = cap ? cap * 2 : 65536;
        }
        size_t n = fread(text + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        fprintf(stderr, "ringleader-ring: %s: %s\n", path, strerror(errno));
        goto fail;
    }
    for (int fallback = 0; fallback < 2; fallback++) {
        const char *rsp[2] = { no_info, text };
        size_t rlen[2] = { sizeof(no_info) - 1, len };
        char ferr[512] = "";
        m = cluster_map_new();
        if (m == NULL) {
            tool_nomem();
            goto fail;
        }
        if (co->map_parse(fallback, 0, rsp, rlen, 2, "127.0.0.1", m, ferr, sizeof(ferr)) == 1 &&
            cluster_map_finish(m) == 0)
            break;
        if (fallback == 0)
            snprintf(err, sizeof(err), "%s", ferr);
        cluster_map_free(m);
        m = NULL;
    }
    if (m == NULL)
        fprintf(stderr, "ringleader-ring: %s: not a CLUSTER SHARDS or CLUSTER SLOTS reply (%s)\n",
                path, err);
fail:
    fclose(f);
    free(text);
    return m;
}

/* Each key's slot, the master serving it and that master's replicas. */
static int tool_cluster(const struct tool_opts *o)
{
    struct cluster_map *m = o->cluster_addr != NULL
                                ? tool_cluster_fetch(o->cluster_addr, o->cluster_user)
                                : tool_cluster_load(o->shards_path);
    struct key_source ks;
    const char *key;
    size_t len;
    int r, rc = TOOL_EXIT_OK;
    json_t *root = NULL, *arr = NULL;

    if (m == NULL)
        return TOOL_EXIT_ERROR;
    if (o->json) {
        root = json_object();
        arr = json_array();
        if (root == NULL || arr == NULL || json_object_set_new(root, "keys", arr) < 0) {
            json_decref(root);
            cluster_map_free(m);
            return tool_nomem();
        }
        json_object_set_new(root, "checksum", tool_json_checksum(m->checksum));
        json_object_set_new(root, "nodes", json_integer(m->nnodes));
    } else if (!o->tsv) {
        printf("# cluster map: %u node(s), checksum %016llx\n", m->nnodes,
               (unsigned long long)m->checksum);
    }
    key_source_init(&ks, o->keys, o->nkeys);
    while ((r = key_next(&ks, &key, &len)) > 0) {
        uint32_t slot = cluster_keyslot(key, len);
        uint32_t own = m->owner[slot];
        const char *master = own == CLUSTER_NONE ? "-" : m->nodes[own].addr;
        if (o->json) {
            json_t *reps = json_array();
            for (uint32_t i = 0; reps != NULL && own != CLUSTER_NONE && i < m->nnodes; i++)
                if (m->nodes[i].role == CLUSTER_REPLICA && m->nodes[i].master == own && i != own)
                    json_array_append_new(reps, json_string(m->nodes[i].addr));
            json_t *e = json_pack("{s:o,s:I,s:s,s:o}", "key", tool_json_key(key, len),
                                  "slot", (json_int_t)slot, "master", master,
                                  "replicas", reps != NULL ? reps : json_array());
            if (e == NULL || json_array_append_new(arr, e) < 0) {
                rc = tool_nomem();
                break;
            }
            continue;
        }
        tool_put_key(stdout, key, len);
        if (o->tsv) {
            printf("\t%s\n", master);
            continue;
        }
        printf("\tslot %u\t%s", slot, master);
        for (uint32_t i = 0; own != CLUSTER_NONE && i < m->nnodes; i++)
            if (m->nodes[i].role == CLUSTER_REPLICA && m->nodes[i].master == own && i != own)
                printf("\treplica %s", m->nodes[i].addr);
        putchar('\n');
    }
    if (r < 0) {
        fprintf(stderr, "ringleader-ring: reading keys: %s\n", strerror(EIO));
        rc = TOOL_EXIT_ERROR;
    }
    key_source_free(&ks);
    if (root != NULL)
        rc = rc == TOOL_EXIT_OK ? tool_json_emit(root) : (json_decref(root), rc);
    cluster_map_free(m);
    return rc;
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

/* ---------------------------------------------------------------- sample keys */

static void tool_samples_free(struct tool_samples *ks)
{
    free(ks->data);
    free(ks->start);
    free(ks->len);
    memset(ks, 0, sizeof(*ks));
}

/*
 * The sample keys: o->samples generated ones, or every line of o->keys_path. Returns
 * TOOL_EXIT_OK, or TOOL_EXIT_ERROR after saying why (unreadable, empty, out of memory).
 */
static int tool_samples_load(const struct tool_opts *o, struct tool_samples *ks)
{
    memset(ks, 0, sizeof(*ks));
    if (o->keys_path == NULL) {
        ks->count = o->samples;
        snprintf(ks->what, sizeof(ks->what), "%u keys \"key:<i>\"", o->samples);
        return TOOL_EXIT_OK;
    }
    int is_stdin = strcmp(o->keys_path, "-") == 0;
    FILE *in = is_stdin ? stdin : fopen(o->keys_path, "rb");
    size_t len = 0, cap = 0, nlines = 0;
    if (in == NULL) {
        fprintf(stderr, "ringleader-ring: --keys %s: %s\n", o->keys_path, strerror(errno));
        return TOOL_EXIT_ERROR;
    }
    for (;;) {
        if (cap - len < 65536) {
            char *g = realloc(ks->data, cap ? cap * 2 : 1 << 20);
            if (g == NULL)
                goto nomem;
            ks->data = g;
            cap = cap ? cap * 2 : 1 << 20;
        }
        size_t got = fread(ks->data + len, 1, cap - len - 1, in);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(in)) {
        fprintf(stderr, "ringleader-ring: --keys %s: %s\n", o->keys_path, strerror(errno));
        goto fail;
    }
    if (len > 0 && ks->data[len - 1] != '\n')
        ks->data[len++] = '\n';        /* a last line without its newline */
    for (size_t i = 0; i < len; i++)
        nlines += ks->data[i] == '\n';
    if (nlines == 0 || nlines > UINT32_MAX) {
        fprintf(stderr, "ringleader-ring: --keys %s: %s\n", o->keys_path,
                nlines ? "more than 4294967295 keys" : "no keys in it");
        goto fail;
    }
    ks->start = malloc(nlines * sizeof(*ks->start));
    ks->len = malloc(nlines * sizeof(*ks->len));
    if (ks->start == NULL || ks->len == NULL)
        goto nomem;
    for (size_t i = 0, begin = 0; i < len; i++) {
        if (ks->data[i] != '\n')
            continue;
        size_t n = i - begin;
        if (n > 0 && ks->data[i - 1] == '\r')
            n--;
        ks->start[ks->count] = begin;
        ks->len[ks->count++] = (uint32_t)(n > UINT32_MAX ? UINT32_MAX : n);
        begin = i + 1;
    }
    snprintf(ks->what, sizeof(ks->what), "%u keys of %s", ks->count,
             is_stdin ? "standard input" : o->keys_path);
    if (!is_stdin)
        fclose(in);
    return TOOL_EXIT_OK;
nomem:
    fprintf(stderr, "ringleader-ring: --keys %s: %s\n", o->keys_path, strerror(ENOMEM));
fail:
    if (!is_stdin)
        fclose(in);
    tool_samples_free(ks);
    return TOOL_EXIT_ERROR;
}

/* Sample key i (< count); scratch holds a generated one. */
static const char *tool_sample(const struct tool_samples *ks, uint32_t i, char scratch[32],
                               size_t *len)
{
    if (ks->data == NULL) {
        *len = (size_t)snprintf(scratch, 32, "key:%u", i);
        return scratch;
    }
    *len = ks->len[i];
    return ks->data + ks->start[i];
}

/* ---------------------------------------------------------------- balance */

struct tool_balance {
    double *exact;         /* ring_shares */
    double *sampled;       /* share of the sample keys */
    double  exact_maxmean, exact_cv, sampled_maxmean, sampled_cv;
    uint64_t wsum;
};

/* Fill b for ring r: keyspace shares (estimated over `samples` hashes where not exact) and
 * the shares of the sample keys; 0, or -ENOMEM. Free b->exact and b->sampled. */
static int tool_balance_compute(const struct ring *r, uint32_t samples,
                                const struct tool_samples *ks, struct tool_balance *b)
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
    for (uint32_t i = 0; i < ks->count; i++) {
        size_t len;
        const char *k = tool_sample(ks, i, key, &len);
        b->sampled[ring_owner(r, k, len)] += 1.0;
    }
    for (uint32_t s = 0; s < r->nservers; s++) {
        b->sampled[s] /= ks->count;
        b->wsum += r->servers[s].weight;
    }
    tool_spread(b->exact, r, &b->exact_maxmean, &b->exact_cv);
    tool_spread(b->sampled, r, &b->sampled_maxmean, &b->sampled_cv);
    return 0;
}

static void tool_balance_text(const struct tool_conf *tc, uint32_t pi, uint32_t samples,
                              const struct tool_samples *ks, const struct tool_balance *b)
{
    const struct ring *r = tc->rings[pi];
    int w = (int)strlen("stddev/mean"), ww = 6;

    for (uint32_t s = 0; s < r->nservers; s++) {
        char digits[16];
        if ((int)strlen(tool_label(r, s)) > w)
            w = (int)strlen(tool_label(r, s));
        int n = snprintf(digits, sizeof(digits), "%u", r->servers[s].weight);
        if (n > ww)
            ww = n;             /* nutcracker's weights reach 2147483647 */
    }
    tool_print_ring_head(tc, pi, r->epoch);
    printf("samples   %s\n\n", ks->what);
    printf("%-*s  %*s  %9s  %9s  %9s\n", w, "server", ww, "weight", "fair",
           tool_shares_exact(r) ? "keyspace" : "keyspace~", "keys");
    for (uint32_t s = 0; s < r->nservers; s++)
        printf("%-*s  %*u  %8.3f%%  %8.3f%%  %8.3f%%\n", w, tool_label(r, s), ww,
               r->servers[s].weight, 100.0 * r->servers[s].weight / (double)b->wsum,
               100.0 * b->exact[s], 100.0 * b->sampled[s]);
    printf("%-*s  %*s  %9s  %9.4f  %9.4f\n", w, "max/mean", ww, "", "", b->exact_maxmean,
           b->sampled_maxmean);
    printf("%-*s  %*s  %9s  %9.4f  %9.4f\n", w, "stddev/mean", ww, "", "", b->exact_cv,
           b->sampled_cv);
    if (!tool_shares_exact(r))
        printf("(keyspace~: %s has no points to measure; estimated over %u hashes)\n",
               dist_name(r->dist.type), samples);
}

/* One pool's balance as plot_balance_svg draws it (servers[] is allocated: free it). */
static int tool_balance_plot(const struct tool_conf *tc, uint32_t pi, const struct tool_samples *ks,
                             const struct tool_balance *b, struct plot_balance *pb)
{
    const struct ring *r = tc->rings[pi];
    struct plot_server *ps = calloc(r->nservers, sizeof(*ps));

    if (ps == NULL)
        return -ENOMEM;
    for (uint32_t s = 0; s < r->nservers; s++)
        ps[s] = (struct plot_server){ tool_label(r, s), r->servers[s].weight,
                                      r->servers[s].weight / (double)b->wsum, b->exact[s],
                                      b->sampled[s] };
    *pb = (struct plot_balance){ .pool = tc->conf->pools[pi].name,
                                 .distribution = dist_name(r->dist.type),
                                 .hash = hash_name(r->hash),
                                 .keyspace_exact = tool_shares_exact(r),
                                 .samples_what = ks->what,
                                 .keyspace_max_over_mean = b->exact_maxmean,
                                 .sample_max_over_mean = b->sampled_maxmean,
                                 .servers = ps, .nservers = r->nservers };
    snprintf(pb->checksum, sizeof(pb->checksum), "%016llx", (unsigned long long)r->checksum);
    return 0;
}

/* Write the plots (--svg) and free them; TOOL_EXIT_OK or TOOL_EXIT_ERROR after saying why. */
static int tool_svg_write(const char *path, int (*draw)(FILE *, const void *, uint32_t),
                          const void *plots, uint32_t n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "ringleader-ring: --svg %s: %s\n", path, strerror(errno));
        return TOOL_EXIT_ERROR;
    }
    int rc = draw(f, plots, n);
    if (fclose(f) != 0 || rc != 0) {
        fprintf(stderr, "ringleader-ring: --svg %s: %s\n", path, strerror(errno ? errno : EIO));
        return TOOL_EXIT_ERROR;
    }
    return TOOL_EXIT_OK;
}

static int tool_draw_balance(FILE *f, const void *plots, uint32_t n)
{
    return plot_balance_svg(f, plots, n);
}

static int tool_draw_diff(FILE *f, const void *plots, uint32_t n)
{
    return plot_diff_svg(f, plots, n);
}

static json_t *tool_balance_json(const struct tool_conf *tc, uint32_t pi,
                                 const struct tool_samples *ks, const struct tool_balance *b)
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
    return json_pack("{s:s, s:I, s:o, s:s, s:s, s:b, s:I, s:s, s:o,"
                     " s:{s:f, s:f}, s:{s:f, s:f}}",
                     "pool", tc->conf->pools[pi].name, "epoch", (json_int_t)r->epoch,
                     "checksum", tool_json_checksum(r->checksum),
                     "distribution", dist_name(r->dist.type), "hash", hash_name(r->hash),
                     "keyspace_exact", tool_shares_exact(r), "samples", (json_int_t)ks->count,
                     "sample_keys", ks->what,
                     "servers", servers,
                     "keyspace", "max_over_mean", b->exact_maxmean,
                     "stddev_over_mean", b->exact_cv,
                     "sample", "max_over_mean", b->sampled_maxmean,
                     "stddev_over_mean", b->sampled_cv);
}

/* --balance: the chosen pool, or every pool when -p is absent. */
static int tool_balance(const struct tool_opts *o, const struct tool_conf *tc)
{
    uint32_t first = 0, last = tc->conf->npools, nplots = 0;
    json_t *pools = o->json ? json_array() : NULL;
    struct plot_balance *plots = NULL;
    struct tool_samples ks;
    int rc = TOOL_EXIT_OK;

    if (o->pool != NULL) {
        int pi = tool_pick_pool(tc, o->pool);
        if (pi < 0) {
            json_decref(pools);
            return TOOL_EXIT_USAGE;
        }
        first = (uint32_t)pi;
        last = first + 1;
    }
    if (tool_samples_load(o, &ks) != TOOL_EXIT_OK) {
        json_decref(pools);
        return TOOL_EXIT_ERROR;
    }
    if (o->svg_path != NULL && (plots = calloc(last - first, sizeof(*plots))) == NULL)
        rc = tool_nomem();
    for (uint32_t pi = first; rc == TOOL_EXIT_OK && pi < last; pi++) {
        struct tool_balance b;
        if (tool_balance_compute(tc->rings[pi], o->samples, &ks, &b) != 0) {
            rc = tool_nomem();
            break;
        }
        if (plots != NULL && tool_balance_plot(tc, pi, &ks, &b, &plots[nplots++]) != 0)
            rc = tool_nomem();
        if (o->json) {
            json_t *one = tool_balance_json(tc, pi, &ks, &b);
            if (pools != NULL && (one == NULL || json_array_append_new(pools, one) != 0)) {
                json_decref(pools);
                pools = NULL;
            }
        } else {
            if (pi != first)
                putchar('\n');
            tool_balance_text(tc, pi, o->samples, &ks, &b);
        }
        /* the plot keeps its own copy of the numbers */
        free(b.exact);
        free(b.sampled);
    }
    if (rc == TOOL_EXIT_OK && plots != NULL)
        rc = tool_svg_write(o->svg_path, tool_draw_balance, plots, nplots);
    for (uint32_t i = 0; plots != NULL && i < nplots; i++)
        free((void *)plots[i].servers);
    free(plots);
    tool_samples_free(&ks);
    if (o->json) {
        int jr = tool_json_emit(pools ? json_pack("{s:o}", "pools", pools) : NULL);
        return rc != TOOL_EXIT_OK ? rc : jr;
    }
    json_decref(pools);
    return rc;
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
    uint64_t *stayed;           /* [old servers]: sample keys that kept their owner */
};


static int tool_same_hashing(const struct ring *a, const struct ring *b)
{
    return a->hash == b->hash && a->hash_seed == b->hash_seed && a->has_tag == b->has_tag &&
           (!a->has_tag || memcmp(a->tag, b->tag, 2) == 0);
}

/*
 * Place the sample keys on both rings and count, for each moved key, the
 * (old owner, new owner) cell, and for each old server the keys it kept;
 * owners are matched by identity as the daemon matches servers. Fills
 * d->flows and d->stayed; 0 or -ENOMEM.
 */
static int tool_diff_flows(struct tool_pool_diff *d, const struct tool_samples *ks)
{
    const struct ring *a = d->or, *b = d->nr;
    uint32_t *map = malloc(b->nservers * sizeof(*map));
    uint32_t *cells = calloc((size_t)a->nservers * b->nservers, sizeof(*cells));
    char key[32];
    int rc = -ENOMEM;

    d->stayed = calloc(a->nservers, sizeof(*d->stayed));
    if (map == NULL || cells == NULL || d->stayed == NULL)
        goto out;
    for (uint32_t j = 0; j < b->nservers; j++) {
        map[j] = UINT32_MAX;
        for (uint32_t i = 0; i < a->nservers && map[j] == UINT32_MAX; i++)
            if (strcmp(a->servers[i].ident, b->servers[j].ident) == 0)
                map[j] = i;
    }
    d->samples = ks->count;
    for (uint32_t k = 0; k < ks->count; k++) {
        size_t len;
        const char *kk = tool_sample(ks, k, key, &len);
        uint32_t from = ring_owner(a, kk, len), to = ring_owner(b, kk, len);
        if (map[to] != from) {
            cells[(size_t)from * b->nservers + to]++;
            d->sample_moved++;
        } else {
            d->stayed[from]++;
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
static int tool_diff_pool(struct tool_pool_diff *d, uint32_t samples,
                          const struct tool_samples *ks)
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
    return tool_diff_flows(d, ks);
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

/* One pool's change as plot_diff_svg draws it; the arrays are allocated (tool_diff_plot_free). */
static int tool_diff_plot(const struct tool_pool_diff *d, const struct tool_samples *ks,
                          struct plot_diff *pd)
{
    uint32_t no = d->or ? d->or->nservers : 0, nn = d->nr ? d->nr->nservers : 0;
    const char **ol = calloc(no + 1, sizeof(*ol)), **nl = calloc(nn + 1, sizeof(*nl));
    int64_t *kept = calloc(no + 1, sizeof(*kept));
    uint64_t *stayed = calloc(no + 1, sizeof(*stayed));
    struct plot_flow *fl = calloc(d->nflows + 1, sizeof(*fl));

    *pd = (struct plot_diff){ .pool = d->name, .old_epoch = d->old_epoch,
                              .new_epoch = d->new_epoch, .moved = d->moved, .floor = d->floor,
                              .moved_exact = d->moved_exact, .old_labels = ol, .nold = no,
                              .new_labels = nl, .nnew = nn, .kept = kept, .stayed = stayed,
                              .flows = fl, .nflows = d->nflows, .samples = d->samples,
                              .samples_what = ks->what };
    if (ol == NULL || nl == NULL || kept == NULL || stayed == NULL || fl == NULL)
        return -ENOMEM;
    snprintf(pd->old_checksum, sizeof(pd->old_checksum), "%016llx",
             d->or ? (unsigned long long)d->or->checksum : 0ull);
    snprintf(pd->new_checksum, sizeof(pd->new_checksum), "%016llx",
             d->nr ? (unsigned long long)d->nr->checksum : 0ull);
    for (uint32_t j = 0; j < nn; j++)
        nl[j] = d->nr->servers[j].label;
    for (uint32_t i = 0; i < no; i++) {
        ol[i] = d->or->servers[i].label;
        kept[i] = -1;
        for (uint32_t j = 0; j < nn && kept[i] < 0; j++)
            if (strcmp(d->or->servers[i].ident, d->nr->servers[j].ident) == 0)
                kept[i] = j;
        stayed[i] = d->stayed ? d->stayed[i] : 0;
    }
    for (uint32_t k = 0; k < d->nflows; k++)
        fl[k] = (struct plot_flow){ d->flows[k].from, d->flows[k].to, d->flows[k].count };
    return 0;
}

static void tool_diff_plot_free(struct plot_diff *pd)
{
    free((void *)pd->old_labels);
    free((void *)pd->new_labels);
    free((void *)pd->kept);
    free((void *)pd->stayed);
    free((void *)pd->flows);
}

/* Report one pool pair (text or into `out`, and its plot into `plot` when not NULL); TOOL_EXIT_* */
static int tool_diff_one(const struct tool_opts *o, const struct tool_samples *ks,
                         struct tool_pool_diff *d, json_t *out, int *first,
                         struct plot_diff *plot)
{
    int rc = TOOL_EXIT_OK;

    if (tool_diff_pool(d, o->samples, ks) != 0) {
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
    if (rc == TOOL_EXIT_OK && plot != NULL && tool_diff_plot(d, ks, plot) != 0)
        rc = tool_nomem();
    *first = 0;
    free(d->flows);
    free(d->stayed);
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
    struct tool_samples ks;
    struct plot_diff *plots = NULL;
    uint32_t nplots = 0;

    if (o->json && pools == NULL)
        return tool_json_emit(NULL);
    if (tool_samples_load(o, &ks) != TOOL_EXIT_OK) {
        json_decref(pools);
        return TOOL_EXIT_ERROR;
    }
    if (o->svg_path != NULL &&
        (plots = calloc(oc->conf->npools + nc->conf->npools + 1, sizeof(*plots))) == NULL)
        rc = tool_nomem();
    for (uint32_t i = 0; rc == TOOL_EXIT_OK && i < oc->conf->npools; i++) {
        const struct conf_pool *op = &oc->conf->pools[i];
        uint32_t j = 0;
        if (o->pool != NULL && strcmp(o->pool, op->name) != 0)
            continue;
        const struct conf_pool *np = tool_find_pool(nc->conf, op->name, op->protocol, &j);
        struct tool_pool_diff d = { .name = op->name, .op = op, .np = np,
                                    .or = oc->rings[i], .nr = np ? nc->rings[j] : NULL };
        found = 1;
        rc = tool_diff_one(o, &ks, &d, pools, &first, plots ? &plots[nplots++] : NULL);
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
        rc = tool_diff_one(o, &ks, &d, pools, &first, plots ? &plots[nplots++] : NULL);
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
    if (rc == TOOL_EXIT_OK && plots != NULL)
        rc = tool_svg_write(o->svg_path, tool_draw_diff, plots, nplots);
    for (uint32_t k = 0; plots != NULL && k < nplots; k++)
        tool_diff_plot_free(&plots[k]);
    free(plots);
    tool_samples_free(&ks);
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
    enum { OPT_TSV = 256, OPT_JSON, OPT_SVG, OPT_SHARDS, OPT_CLUSTER, OPT_CLUSTER_USER };
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
        { "keys",      required_argument, NULL, 'k' },
        { "svg",       required_argument, NULL, OPT_SVG },
        { "cluster-shards", required_argument, NULL, OPT_SHARDS },
        { "cluster",   required_argument, NULL, OPT_CLUSTER },
        { "cluster-user", required_argument, NULL, OPT_CLUSTER_USER },
        { NULL, 0, NULL, 0 },
    };
    int c;

    memset(o, 0, sizeof(*o));
    o->conf_path = TOOL_DEFAULT_CONF;
    o->samples = TOOL_DEFAULT_SAMPLES;
    int samples_given = 0;
    while ((c = getopt_long(argc, argv, "hVc:p:n:bd:s:k:", longopts, NULL)) != -1) {
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
            samples_given = 1;
            break;
        case 'k':
            o->keys_path = optarg;
            break;
        case OPT_SVG:
            o->svg_path = optarg;
            break;
        case OPT_SHARDS:
            o->mode = TOOL_CLUSTER;
            o->shards_path = optarg;
            break;
        case OPT_CLUSTER:
            o->mode = TOOL_CLUSTER;
            o->cluster_addr = optarg;
            break;
        case OPT_CLUSTER_USER:
            o->cluster_user = optarg;
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
    if (o->mode == TOOL_CLUSTER && (o->pool != NULL || o->npref || o->svg_path != NULL ||
                                    o->keys_path != NULL || samples_given)) {
        fprintf(stderr, "ringleader-ring: --cluster and --cluster-shards take keys, --tsv or "
                "--json only\n");
        return TOOL_EXIT_USAGE;
    }
    if (o->mode == TOOL_CLUSTER && o->shards_path != NULL && o->cluster_addr != NULL) {
        fprintf(stderr, "ringleader-ring: --cluster or --cluster-shards: one map at a time\n");
        return TOOL_EXIT_USAGE;
    }
    if (o->mode == TOOL_CLUSTER)
        return TOOL_EXIT_OK;
    if (o->mode != TOOL_QUERY && (o->tsv || o->nkeys > 0)) {
        fprintf(stderr, "ringleader-ring: --balance and --diff take no keys and no --tsv\n");
        return TOOL_EXIT_USAGE;
    }
    if (o->mode == TOOL_QUERY && (o->svg_path != NULL || o->keys_path != NULL)) {
        fprintf(stderr, "ringleader-ring: --svg and --keys go with --balance or --diff\n");
        return TOOL_EXIT_USAGE;
    }
    if (o->keys_path != NULL && samples_given) {
        fprintf(stderr, "ringleader-ring: --keys replaces the key:<i> of --samples: give one\n");
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

    if (o.mode == TOOL_CLUSTER) {       /* the cluster's own map: no configuration */
        rc = tool_cluster(&o);
        if (fflush(stdout) != 0 || ferror(stdout)) {
            fprintf(stderr, "ringleader-ring: writing the output: %s\n", strerror(errno));
            return TOOL_EXIT_ERROR;
        }
        return rc;
    }
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
    case TOOL_CLUSTER:
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
