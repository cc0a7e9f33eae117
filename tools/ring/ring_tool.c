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
#include "ring_tool.h"
#include "lib/buf.h"
#include "lib/util.h"

static void tool_usage(FILE *f)
{
    fprintf(f,
            "Usage: ringleader-ring [-c conf file] [-p pool] [-n N] [--tsv|--json] [KEY...]\n"
            "       ringleader-ring [-c conf file] [-p pool] --balance [--samples N | --keys FILE]\n"
            "                       [--json] [--svg FILE]\n"
            "       ringleader-ring [-c conf file] [-p pool] --diff NEW.yml [--samples N | --keys FILE]\n"
            "                       [--json] [--svg FILE]\n"
            "       ringleader-ring --cluster HOST:PORT | --cluster-shards FILE [--tsv|--json] [KEY...]\n"
            "       ringleader-ring --fleet URL[,URL...]\n"
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
            "      --live          : --diff also SCANs the old file's Redis servers: the keys\n"
            "                        and bytes (DUMP sizes, as MIGRATE sends them) that move\n"
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
            "      --fleet=URL[,URL...] : whether the proxies at these admin endpoints run each\n"
            "                        pool on one ring (checksum); which ones differ\n"
            "\n"
            "Exit status: 0 ok, 1 bad configuration or I/O error, 2 usage error or unknown pool,\n"
            "3 --fleet: the proxies differ.\n",
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

void tool__list_pools(FILE *f, const struct conf *c)
{
    for (uint32_t i = 0; i < c->npools; i++)
        fprintf(f, "%s%s", i ? ", " : "", c->pools[i].name);
    if (c->npools == 0)
        fputs("(none)", f);
}

/* A Redis Cluster pool has no ring of its own: its servers are only the seeds the map is
 * asked of, and the slot map decides where a key goes. Its "ring" would name a seed as
 * the owner under a checksum no running proxy has, so the question is refused and sent
 * to the modes that read the cluster's map. Returns i, or -1 after printing why. */
void tool__no_ring(const char *path, const struct conf_pool *p)
{
    fprintf(stderr, "ringleader-ring: pool '%s' in %s is a Redis Cluster (redis_cluster: true): "
            "its keys go where the cluster's slot map says, not to a ring of its seeds; ask "
            "the cluster with --cluster HOST:PORT (a node of it) or --cluster-shards FILE "
            "(a saved CLUSTER SHARDS reply)\n", p->name, path);
}

static int tool_pool_has_ring(const struct tool_conf *tc, uint32_t i)
{
    const struct conf_pool *p = &tc->conf->pools[i];

    if (!p->redis_cluster)
        return (int)i;
    tool__no_ring(tc->path, p);
    return -1;
}

/* Pool index of `name` in c (any pool when name is NULL and c has exactly one),
 * or -1 after printing why and the pools there are (or why a cluster pool has no ring). */
int tool__pick_pool(const struct tool_conf *tc, const char *name)
{
    const struct conf *c = tc->conf;

    if (name == NULL) {
        if (c->npools == 1)
            return tool_pool_has_ring(tc, 0);
        fprintf(stderr, "ringleader-ring: %s has %u pools, choose one with -p: ", tc->path,
                c->npools);
    } else {
        for (uint32_t i = 0; i < c->npools; i++)
            if (strcmp(c->pools[i].name, name) == 0)
                return tool_pool_has_ring(tc, i);
        fprintf(stderr, "ringleader-ring: no pool '%s' in %s; pools: ", name, tc->path);
    }
    tool__list_pools(stderr, c);
    fputc('\n', stderr);
    return -1;
}

/* ---------------------------------------------------------------- shared helpers */

const char *tool__label(const struct ring *r, uint32_t s)
{
    return r->servers[s].label;
}

/* Keys are raw bytes: shown as they are, except control bytes as \xNN. */
void tool__put_key(FILE *f, const char *key, size_t len)
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
json_t *tool__json_key(const char *key, size_t len)
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

json_t *tool__json_checksum(uint64_t checksum)
{
    char text[17];
    snprintf(text, sizeof(text), "%016llx", (unsigned long long)checksum);
    return json_string(text);
}

int tool__nomem(void)
{
    fprintf(stderr, "ringleader-ring: %s\n", strerror(ENOMEM));
    return TOOL_EXIT_ERROR;
}

/* Print and release a JSON document; TOOL_EXIT_ERROR if it could not be built. */
int tool__json_emit(json_t *root)
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
int tool__key_next(struct key_source *ks, const char **key, size_t *len)
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

void tool__key_source_init(struct key_source *ks, char **argv, int argc)
{
    memset(ks, 0, sizeof(*ks));
    ks->argv = argv;
    ks->argc = argc;
    ks->in = stdin;
}

void tool__key_source_free(struct key_source *ks)
{
    free(ks->line);
}

uint32_t tool__pref_len(const struct tool_opts *o, const struct conf_pool *p,
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
void tool__spread(const double *share, const struct ring *r, double *maxmean, double *cv)
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

int tool__shares_exact(const struct ring *r)
{
    return r->nservers == 1 || r->dist.type == DIST_KETAMA || r->dist.type == DIST_MODULA;
}

void tool__print_ring_head(const struct tool_conf *tc, uint32_t pi, uint64_t epoch)
{
    const struct ring *r = tc->rings[pi];

    printf("pool      %s\n", tc->conf->pools[pi].name);
    printf("epoch     %" PRIu64 "\n", epoch);
    printf("checksum  %016llx\n", (unsigned long long)r->checksum);
    printf("ring      %s, hash %s, %u server%s\n", dist_name(r->dist.type), hash_name(r->hash),
           r->nservers, r->nservers == 1 ? "" : "s");
}

/* ---------------------------------------------------------------- sample keys */

void tool__samples_free(struct tool_samples *ks)
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
int tool__samples_load(const struct tool_opts *o, struct tool_samples *ks)
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
    tool__samples_free(ks);
    return TOOL_EXIT_ERROR;
}

/* Sample key i (< count); scratch holds a generated one. */
const char *tool__sample(const struct tool_samples *ks, uint32_t i, char scratch[32],
                         size_t *len)
{
    if (ks->data == NULL) {
        *len = (size_t)snprintf(scratch, 32, "key:%u", i);
        return scratch;
    }
    *len = ks->len[i];
    return ks->data + ks->start[i];
}

/* Write the plots (--svg) and free them; TOOL_EXIT_OK or TOOL_EXIT_ERROR after saying why. */
int tool__svg_write(const char *path, int (*draw)(FILE *, const void *, uint32_t),
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
    enum { OPT_TSV = 256, OPT_JSON, OPT_SVG, OPT_SHARDS, OPT_CLUSTER, OPT_CLUSTER_USER, OPT_FLEET,
           OPT_LIVE };
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
        { "fleet",     required_argument, NULL, OPT_FLEET },
        { "live",      no_argument,       NULL, OPT_LIVE },
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
        case OPT_FLEET:
            o->mode = TOOL_FLEET;
            o->fleet = optarg;
            break;
        case OPT_LIVE:
            o->live = 1;
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
    if (o->mode == TOOL_FLEET)
        return TOOL_EXIT_OK;
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
    if (o->live && o->mode != TOOL_DIFF) {
        fprintf(stderr, "ringleader-ring: --live goes with --diff\n");
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

    if (o.mode == TOOL_CLUSTER || o.mode == TOOL_FLEET) {   /* no configuration file */
        rc = o.mode == TOOL_FLEET ? tool__fleet(&o) : tool__cluster(&o);
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
        rc = tool__query(&o, &oc);
        break;
    case TOOL_BALANCE:
        rc = tool__balance(&o, &oc);
        break;
    case TOOL_CLUSTER:
    case TOOL_FLEET:
        break;
    case TOOL_DIFF:
        rc = tool_conf_load(o.diff_path, &nc);
        if (rc == TOOL_EXIT_OK) {
            rc = tool__diff(&o, &oc, &nc);
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
