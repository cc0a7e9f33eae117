/* Internals the configuration files share: the loading context, the keyword table row, diagnostics, setters and the walk. */
#ifndef RL_CONF_CONF_INT_H
#define RL_CONF_CONF_INT_H

#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#include "conf/conf.h"

#define CONF_SLOTS          16384u
/* nutcracker keeps a weight in an int and sums a pool's in a uint32_t: beyond either its
 * arithmetic wraps and there is no placement of its to agree with. */
#define CONF_MAX_WEIGHT     2147483647u
#define CONF_MAX_POOL_WEIGHT 4294967295u
#define CONF_ERRORS_MAX     64         /* errors kept (and printed); more are counted */
#define CONF_SUGGEST_MAX    2          /* "did you mean": at most this many edits away */
#define CONF_MEMCACHE_PORT  11211u     /* twemproxy drops it from the identity */
#define CONF_GLOBAL_KEY     "ringleader"

struct conf_ctx;
struct conf_command;

/*
 * A setter parses `node` into the field at `obj + cmd->offset`. Returns NULL
 * on success or a reason (static, or formatted into ctx->why); a setter that
 * runs out of memory returns conf__enomem.
 */
typedef const char *(*conf_set_fn)(struct conf_ctx *c, const struct conf_command *cmd,
                                   yaml_node_t *node, void *obj);

struct conf_command {
    const char  *name;
    conf_set_fn  set;
    size_t       offset;
    int64_t      min, max;             /* numeric setters: accepted range */
    const char *const *names;          /* enum setter: accepted words, NULL-terminated */
    int          late;                 /* run after every pool has been read */
};

/* One error found while loading; printed sorted by position. */
struct conf_error {
    size_t   line, col;                /* 1-based; 0 for the file as a whole */
    uint32_t seq;                      /* order found: ties keep it */
    char    *text;                     /* the whole message */
};

struct conf_ctx {
    const char    *file;               /* name used in messages */
    yaml_document_t doc;
    struct conf   *conf;
    char          *err;
    size_t         errlen;
    struct conf_error errors[CONF_ERRORS_MAX];
    uint32_t       nerrors;            /* found, kept or not */
    int            errors_oom;         /* a message could not be kept */
    const struct conf_command *run_cmds; /* the table conf__run is running ... */
    size_t         run_ncmds;
    const unsigned char *run_failed;   /* ... and which of its keys failed so far */
    char           why[256];            /* scratch for formatted reasons */
    yaml_node_t   *errnode;             /* a setter may point the message elsewhere */
    yaml_node_t  **pool_name_nodes;     /* per pool: its key node */
    yaml_node_t  **pool_nodes;          /* per pool: value node of each command */
    size_t         npool_cmds;
    uint32_t       source_lines;        /* conf_load_source: the document's lines (the
                                           file's follow), 0: a file alone */
    /* An unknown key another section has: its message, or 0 (conf_schema.c's; NULL: none) */
    int          (*misplaced)(struct conf_ctx *c, yaml_node_t *k, const char *name,
                              const struct conf_command *cmds);
};

/* A setter's answers (conf_diag.c): out of memory, and "a nested parser already
 * reported its errors" (compared by address, so defined once). */
extern const char conf__enomem[];
extern const char conf__reported[];

/* Diagnostics (conf_diag.c). */
int conf__fail(struct conf_ctx *c, const yaml_node_t *node, const char *key,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int conf__fail_file(struct conf_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void conf__report(struct conf_ctx *c);
size_t conf__distance(const char *a, const char *b, size_t cap);
const char *conf__suggest(const char *word, int n, const char *(*name)(const void *, int),
                          const void *arg);
const char *conf__cmd_name(const void *arg, int i);
const char *conf__why(struct conf_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *conf__node_kind(const yaml_node_t *node);

/* Scalars, addresses and the generic setters (conf_values.c). */
/* A byte count: digits, then optionally KiB, MiB, GiB (KB, MB, GB read the same), within
 * [min, max] bytes; NULL, or the reason it is refused. */
const char *conf__bytes(struct conf_ctx *c, yaml_node_t *v, const char *what, uint64_t min,
                        uint64_t max, uint64_t *out);
const char *conf__scalar(struct conf_ctx *c, yaml_node_t *node, size_t *len,
                         int allow_empty);
int conf__has_space(const char *s, size_t n);
const char *conf__set_addr(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj);
const char *conf__set_local_addr(struct conf_ctx *c, const struct conf_command *cmd,
                                 yaml_node_t *node, void *obj);
const char *conf__set_bool(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj);
const char *conf__set_int(struct conf_ctx *c, const struct conf_command *cmd,
                          yaml_node_t *node, void *obj);
const char *conf__set_u32(struct conf_ctx *c, const struct conf_command *cmd,
                          yaml_node_t *node, void *obj);
const char *conf__set_u64(struct conf_ctx *c, const struct conf_command *cmd,
                          yaml_node_t *node, void *obj);
const char *conf__set_timeout(struct conf_ctx *c, const struct conf_command *cmd,
                              yaml_node_t *node, void *obj);
const char *conf__set_string(struct conf_ctx *c, const struct conf_command *cmd,
                             yaml_node_t *node, void *obj);
const char *conf__set_word(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj);
const char *conf__set_words(struct conf_ctx *c, const struct conf_command *cmd,
                            yaml_node_t *node, void *obj);
const char *conf__set_enum(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj);
const char *conf__set_hash(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj);
const char *conf__set_dist(struct conf_ctx *c, const struct conf_command *cmd,
                           yaml_node_t *node, void *obj);
const char *conf__set_hash_tag(struct conf_ctx *c, const struct conf_command *cmd,
                               yaml_node_t *node, void *obj);
const char *conf__set_hash_seed(struct conf_ctx *c, const struct conf_command *cmd,
                                yaml_node_t *node, void *obj);
const char *conf__set_protocol(struct conf_ctx *c, const struct conf_command *cmd,
                               yaml_node_t *node, void *obj);
const char *conf__set_redis(struct conf_ctx *c, const struct conf_command *cmd,
                            yaml_node_t *node, void *obj);
const char *conf__set_factor(struct conf_ctx *c, const struct conf_command *cmd,
                             yaml_node_t *node, void *obj);

/* The structured keys' setters (conf_sections.c). */
void conf__server_free(struct conf_server *s);
const char *conf__set_servers(struct conf_ctx *c, const struct conf_command *cmd,
                              yaml_node_t *node, void *obj);
const char *conf__set_slots(struct conf_ctx *c, const struct conf_command *cmd,
                            yaml_node_t *node, void *obj);
const struct conf_pool *conf__pool_by_name(const struct conf *conf, const char *name);
const char *conf__set_routes(struct conf_ctx *c, const struct conf_command *cmd,
                             yaml_node_t *node, void *obj);
int conf__ipv4_net(const char *s, uint32_t *net, uint32_t *mask);
const char *conf__set_cluster_zones(struct conf_ctx *c, const struct conf_command *cmd,
                                    yaml_node_t *node, void *obj);
const char *conf__set_collapse(struct conf_ctx *c, const struct conf_command *cmd,
                               yaml_node_t *node, void *obj);
const char *conf__set_leases(struct conf_ctx *c, const struct conf_command *cmd,
                             yaml_node_t *node, void *obj);
const char *conf__set_shadow(struct conf_ctx *c, const struct conf_command *cmd,
                             yaml_node_t *node, void *obj);
void conf__tls_free(struct conf_tls *t);
const char *conf__set_near_cache(struct conf_ctx *c, const struct conf_command *cmd,
                                 yaml_node_t *node, void *obj);   /* conf_nearcache.c */
void conf__near_cache_free(struct conf_near_cache *nc);
const char *conf__set_request_log(struct conf_ctx *c, const struct conf_command *cmd,
                                  yaml_node_t *node, void *obj);  /* conf_introspect.c */
const char *conf__set_tls(struct conf_ctx *c, const struct conf_command *cmd,
                          yaml_node_t *node, void *obj);

/* The users: list (conf_users.c). */
const char *conf__set_users(struct conf_ctx *c, const struct conf_command *cmd,
                            yaml_node_t *node, void *obj);
void conf__users_free(struct conf_global *g);

/* The sentinel: section (conf_sentinel.c). */
void conf__sentinel_free(struct conf_sentinel *s);
const char *conf__set_sentinel(struct conf_ctx *c, const struct conf_command *cmd,
                               yaml_node_t *node, void *obj);
int conf__pool_sentinel(struct conf_ctx *c, struct conf_pool *pool, yaml_node_t *sentinel,
                        yaml_node_t *servers, yaml_node_t *cluster, int explicit_memcache);

/* migrate: true: only a plain Redis pool moves its keys (conf_migrate.c). Returns the
 * errors recorded, as a negative count. */
int conf__pool_migrate(struct conf_ctx *c, struct conf_pool *pool, yaml_node_t *migrate,
                       yaml_node_t *warmup);

/* The walk over a keyword table (conf_table.c). */
int conf__collect(struct conf_ctx *c, const struct conf_command *cmds, size_t ncmds,
                  yaml_node_t *map, yaml_node_t **keys, yaml_node_t **values,
                  const char *what, unsigned char *failed);
int conf__key_failed(const struct conf_ctx *c, const char *name);
int conf__run(struct conf_ctx *c, const struct conf_command *cmds, size_t ncmds,
              yaml_node_t **keys, yaml_node_t **values, void *obj, int late,
              unsigned char *failed);

/* DNS and config_source keys (conf_discovery.c). */
const char *conf__set_dns_servers(struct conf_ctx *c, const struct conf_command *cmd,
                                  yaml_node_t *node, void *obj);
const char *conf__set_discovery(struct conf_ctx *c, const struct conf_command *cmd,
                                yaml_node_t *node, void *obj);
const char *conf__set_config_source(struct conf_ctx *c, const struct conf_command *cmd,
                                    yaml_node_t *node, void *obj);
/* The config_source the `ringleader:` section whose key node is global_key gives, or NULL. */
const char *conf__config_source_of(struct conf_ctx *c, yaml_node_t *global_key);

/* The keyword tables, the sections' checks, the whole tree (conf_schema.c). */
int conf__build(struct conf_ctx *c);

#endif
