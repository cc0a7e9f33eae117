/* ringleader-ring's shared pieces: options, the loaded configurations, key sources and the helpers each subcommand uses. */
#ifndef RL_TOOLS_RING_TOOL_H
#define RL_TOOLS_RING_TOOL_H

#include <stdint.h>
#include <stdio.h>
#include <jansson.h>

#include "conf/conf.h"
#include "placement/ring.h"

#define TOOL_DEFAULT_CONF     "conf/ringleader.yml"   /* the daemon's default too */
#define TOOL_DEFAULT_SAMPLES  1000000u
#define TOOL_DEFAULT_PREF     3u
#define TOOL_TOP_FLOWS        12u
#define TOOL_OUTBUF           (1u << 16)

/* Exit statuses: documented in docs/ring-tool.md. */
#define TOOL_EXIT_OK     0
#define TOOL_EXIT_ERROR  1   /* bad config, I/O error, out of memory */
#define TOOL_EXIT_USAGE  2   /* bad options, unknown pool */
#define TOOL_EXIT_DIFFER 3   /* --fleet: the proxies do not all run one ring per pool */

enum tool_mode { TOOL_QUERY, TOOL_BALANCE, TOOL_DIFF, TOOL_CLUSTER, TOOL_FLEET };

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
    const char *fleet;       /* --fleet: admin URLs, comma-separated */
    char      **keys;        /* argv tail; none: keys come from stdin */
    int         nkeys;
    int         live;        /* --live: --diff also counts keys and bytes on the servers */
};

/* --diff --live (ring_live.c): the keys on the old pool's Redis servers (SCAN) that the new
 * ring places elsewhere, and their DUMP sizes (what MIGRATE sends). */
struct tool_live {
    uint64_t scanned, moving, bytes;
    uint32_t servers;
    char     err[300];
};

struct conf_pool;
struct ring;
/* 0, or -1 with out->err. */
int tool__live(const struct conf_pool *op, const struct conf_pool *np, const struct ring *nr,
               struct tool_live *out);

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

/* Loading, output and key helpers, sample keys, plots (ring_tool.c). */
void tool__list_pools(FILE *f, const struct conf *c);
int tool__pick_pool(const struct tool_conf *tc, const char *name);
/* Why a redis_cluster pool has no ring to ask (on stderr, naming --cluster/--cluster-shards). */
void tool__no_ring(const char *path, const struct conf_pool *p);
const char *tool__label(const struct ring *r, uint32_t s);
void tool__put_key(FILE *f, const char *key, size_t len);
json_t *tool__json_key(const char *key, size_t len);
json_t *tool__json_checksum(uint64_t checksum);
int tool__nomem(void);
int tool__json_emit(json_t *root);
int tool__key_next(struct key_source *ks, const char **key, size_t *len);
void tool__key_source_init(struct key_source *ks, char **argv, int argc);
void tool__key_source_free(struct key_source *ks);
uint32_t tool__pref_len(const struct tool_opts *o, const struct conf_pool *p,
                        const struct ring *r);
void tool__spread(const double *share, const struct ring *r, double *maxmean, double *cv);
int tool__shares_exact(const struct ring *r);
void tool__print_ring_head(const struct tool_conf *tc, uint32_t pi, uint64_t epoch);
void tool__samples_free(struct tool_samples *ks);
int tool__samples_load(const struct tool_opts *o, struct tool_samples *ks);
const char *tool__sample(const struct tool_samples *ks, uint32_t i, char scratch[32],
                         size_t *len);
int tool__svg_write(const char *path, int (*draw)(FILE *, const void *, uint32_t),
                    const void *plots, uint32_t n);

/* The subcommands: each returns a TOOL_EXIT_* status after saying why on stderr. */
int tool__query(const struct tool_opts *o, const struct tool_conf *tc);
int tool__balance(const struct tool_opts *o, const struct tool_conf *tc);
int tool__diff(const struct tool_opts *o, const struct tool_conf *oc,
               const struct tool_conf *nc);
int tool__cluster(const struct tool_opts *o);
/* --fleet (ring_fleet.c): each pool's checksum on every proxy; TOOL_EXIT_DIFFER when not one. */
int tool__fleet(const struct tool_opts *o);

#endif
