/* The configuration object and its loading: twemproxy's pool files plus ringleader's keys -> validated, immutable struct conf. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "conf/conf.h"
#include "conf/conf_int.h"
#include "lib/util.h"

/* ------------------------------------------------------------------ load */

static void conf__pool_free(struct conf_pool *pool)
{
    free(pool->name);
    conf_addr_free(&pool->listen);
    free(pool->redis_auth);
    free(pool->redis_username);
    free(pool->slot_map);
    for (uint32_t i = 0; i < pool->nroutes; i++) {
        free(pool->routes[i].prefix);
        free(pool->routes[i].pool);
    }
    free(pool->routes);
    for (uint32_t i = 0; i < pool->ncluster_zones; i++) {
        free(pool->cluster_zones[i].match);
        free(pool->cluster_zones[i].zone);
    }
    free(pool->cluster_zones);
    free(pool->shadow.pool);
    free(pool->discovery);
    conf__near_cache_free(&pool->near_cache);
    conf__tls_free(pool->tls);
    conf__tls_free(pool->server_tls);
    conf__sentinel_free(pool->sentinel);
    for (uint32_t i = 0; i < pool->nservers; i++)
        conf__server_free(&pool->servers[i]);
    free(pool->servers);
}

/* A derived configuration owns its pools array and the server lists it replaced. */
static void conf__derived_free(struct conf *d)
{
    for (uint32_t i = 0; i < d->npools; i++) {
        if (d->pools[i].slot_map != d->base->pools[i].slot_map)
            free(d->pools[i].slot_map);
        if (d->pools[i].servers == d->base->pools[i].servers)
            continue;
        for (uint32_t k = 0; k < d->pools[i].nservers; k++)
            conf__server_free(&d->pools[i].servers[k]);
        free(d->pools[i].servers);
    }
    free(d->pools);
    struct conf *base = d->base;
    free(d);
    conf_free(base);
}

void conf_ref(struct conf *conf)
{
    atomic_fetch_add_explicit(&conf->refs, 1, memory_order_relaxed);
}

struct conf *conf_base(struct conf *conf)
{
    return conf->base != NULL ? conf->base : conf;
}

struct conf *conf_derive(struct conf *base)
{
    base = conf_base(base);
    struct conf *d = malloc(sizeof(*d));
    if (d == NULL)
        return NULL;
    *d = *base;
    d->pools = malloc((base->npools ? base->npools : 1) * sizeof(*d->pools));
    if (d->pools == NULL) {
        free(d);
        return NULL;
    }
    memcpy(d->pools, base->pools, base->npools * sizeof(*d->pools));
    atomic_init(&d->refs, 1);
    d->base = base;
    conf_ref(base);
    return d;
}

void conf_derive_servers(struct conf *d, uint32_t pool, struct conf_server *servers, uint32_t n,
                         uint32_t *slot_map)
{
    struct conf_pool *p = &d->pools[pool];
    if (p->servers != d->base->pools[pool].servers) {
        for (uint32_t k = 0; k < p->nservers; k++)
            conf__server_free(&p->servers[k]);
        free(p->servers);
    }
    if (p->slot_map != d->base->pools[pool].slot_map)
        free(p->slot_map);
    p->servers = servers;
    p->nservers = n;
    p->slot_map = slot_map;
}

int conf_server_init(struct conf_server *s, const char *addr, const char *zone, char *err,
                     size_t errlen)
{
    memset(s, 0, sizeof(*s));
    if (conf_parse_addr(addr, &s->addr, err, errlen) < 0)
        return -1;
    s->weight = 1;
    s->ident = strdup(addr);
    s->label = strdup(addr);
    s->zone = zone != NULL ? strdup(zone) : NULL;
    if (s->ident == NULL || s->label == NULL || (zone != NULL && s->zone == NULL)) {
        conf__server_free(s);
        memset(s, 0, sizeof(*s));
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

void conf_server_free(struct conf_server *s)
{
    conf__server_free(s);
}

const char *conf_zone_match(const struct conf_pool *p, const char *host, uint16_t port)
{
    char hp[300];
    uint32_t net, mask;
    unsigned a, b, c, d;
    char tail;
    int v4 = sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a < 256 && b < 256 &&
             c < 256 && d < 256;
    uint32_t ip = v4 ? (a << 24) | (b << 16) | (c << 8) | d : 0;

    snprintf(hp, sizeof(hp), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    for (uint32_t i = 0; i < p->ncluster_zones; i++) {
        const char *m = p->cluster_zones[i].match;
        if (strcmp(m, hp) == 0 || strcmp(m, host) == 0)
            return p->cluster_zones[i].zone;
        if (v4 && strchr(m, '/') != NULL && conf__ipv4_net(m, &net, &mask) == 0 &&
            (ip & mask) == net)
            return p->cluster_zones[i].zone;
    }
    /* a seed's own zone: the first server line at that address */
    for (uint32_t i = 0; i < p->nservers; i++)
        if (p->servers[i].zone != NULL && p->servers[i].addr.text != NULL &&
            strcmp(p->servers[i].addr.text, hp) == 0)
            return p->servers[i].zone;
    return NULL;
}

void conf_free(struct conf *conf)
{
    if (conf == NULL)
        return;
    if (atomic_fetch_sub_explicit(&conf->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (conf->base != NULL) {
        conf__derived_free(conf);
        return;
    }
    for (uint32_t i = 0; i < conf->npools; i++)
        conf__pool_free(&conf->pools[i]);
    free(conf->pools);
    conf_addr_free(&conf->global.stats_listen);
    conf_addr_free(&conf->global.admin_listen);
    free(conf->global.admin_token);
    free(conf->global.admin_hosts);
    free(conf->global.log_file);
    free(conf->global.zone);
    free(conf->global.rejoin_log);
    free(conf->global.dns_servers);
    free(conf->global.config_source);
    conf__users_free(&conf->global);
    free(conf->global.request_log.path);
    free(conf->global.migrate_state);
    free(conf->source);
    free(conf->path);
    free(conf);
}

static int conf__same_server(const struct conf_server *a, const struct conf_server *b)
{
    return strcmp(a->ident, b->ident) == 0 && strcmp(a->addr.text, b->addr.text) == 0;
}

int conf_pool_has_server(const struct conf_pool *p, const struct conf_server *s, uint32_t hint)
{
    if (p == NULL)
        return 0;
    if (hint < p->nservers && conf__same_server(&p->servers[hint], s))
        return 1;   /* the usual case: a reload keeps the order */
    for (uint32_t i = 0; i < p->nservers; i++)
        if (conf__same_server(&p->servers[i], s))
            return 1;
    return 0;
}

const struct conf_pool *conf_pool_find(const struct conf *conf, const char *name)
{
    if (conf == NULL || name == NULL)
        return NULL;
    return conf__pool_by_name(conf, name);
}

/* Report a libyaml parser failure with its mark (libyaml stops at the first). */
static int conf__yaml_error(struct conf_ctx *c, const yaml_parser_t *parser)
{
    const yaml_mark_t *m = &parser->problem_mark;
    const char *problem = parser->problem != NULL ? parser->problem : "cannot be read";

    if (parser->error == YAML_MEMORY_ERROR)
        return conf__fail_file(c, "%s", conf__enomem);
    c->nerrors++;
    if (c->nerrors > CONF_ERRORS_MAX)
        return -1;
    struct conf_error *e = &c->errors[c->nerrors - 1];
    char text[1024];
    if (parser->context != NULL)
        snprintf(text, sizeof(text), "%s:%zu:%zu: YAML syntax error: %s %s (line %zu)", c->file,
                 m->line + 1, m->column + 1, problem, parser->context,
                 parser->context_mark.line + 1);
    else
        snprintf(text, sizeof(text), "%s:%zu:%zu: YAML syntax error: %s", c->file, m->line + 1,
                 m->column + 1, problem);
    e->line = m->line + 1;
    e->col = m->column + 1;
    e->seq = c->nerrors;
    e->text = strdup(text);
    if (e->text == NULL)
        c->errors_oom = 1;
    return -1;
}

/* Walk the loaded document into c->conf, recording every error. 0, or -1 when there was
 * any (the messages are in c->errors). source_lines: conf_load_source's document's lines. */
static int conf__load(const char *name, const char *text, size_t len, uint32_t source_lines,
                      struct conf **out, char *err, size_t errlen)
{
    struct conf_ctx c;
    yaml_parser_t parser;
    yaml_document_t extra;
    char dummy[1];
    int rc = -1;

    memset(&c, 0, sizeof(c));
    c.source_lines = source_lines;
    c.file = name != NULL ? name : "(config)";
    c.err = err != NULL && errlen > 0 ? err : dummy;
    c.errlen = err != NULL && errlen > 0 ? errlen : sizeof(dummy);
    c.err[0] = '\0';
    *out = NULL;

    if (!yaml_parser_initialize(&parser)) {
        snprintf(c.err, c.errlen, "%s: %s", c.file, conf__enomem);
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &c.doc)) {
        conf__yaml_error(&c, &parser);
        goto out_parser;
    }
    /* One document only, as nutcracker: a second would be silently ignored. */
    if (yaml_document_get_root_node(&c.doc) != NULL) {
        if (!yaml_parser_load(&parser, &extra)) {
            conf__yaml_error(&c, &parser);
            goto out_doc;
        }
        yaml_node_t *r2 = yaml_document_get_root_node(&extra);
        if (r2 != NULL) {
            conf__fail(&c, r2, NULL, "a second YAML document ('---'): put every pool in one");
            yaml_document_delete(&extra);
            goto out_doc;
        }
        yaml_document_delete(&extra);
    }

    c.conf = calloc(1, sizeof(*c.conf));
    if (c.conf != NULL)
        atomic_init(&c.conf->refs, 1);
    if (c.conf == NULL || (c.conf->path = strdup(c.file)) == NULL) {
        conf__fail_file(&c, "%s", conf__enomem);
        goto out_conf;
    }
    if (conf__build(&c) < 0)
        goto out_conf;
    *out = c.conf;
    c.conf = NULL;
    rc = 0;

out_conf:
    conf_free(c.conf);
    free(c.pool_nodes);
    free(c.pool_name_nodes);
out_doc:
    yaml_document_delete(&c.doc);
out_parser:
    yaml_parser_delete(&parser);
    if (rc != 0)
        conf__report(&c);
    return rc;
}

int conf_load_buffer(const char *name, const char *text, size_t len, struct conf **out,
                     char *err, size_t errlen)
{
    return conf__load(name, text, len, 0, out, err, errlen);
}

/* The whole file at path in *text (malloc'd, NUL-terminated), its length in *len; 0, or -1
 * with err. */
static int conf__read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
    FILE *f;
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc = -1;

    f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        if (cap - len < 4096) {
            size_t ncap = cap ? cap * 2 : 16384;
            char *p = ncap > cap ? realloc(text, ncap) : NULL;
            if (p == NULL) {
                snprintf(err, errlen, "%s: %s", path, conf__enomem);
                goto out;
            }
            text = p;
            cap = ncap;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        goto out;
    }
    text[len] = '\0';
    *out = text;
    *outlen = len;
    text = NULL;
    rc = 0;
out:
    free(text);
    fclose(f);
    return rc;
}

int conf_load(const char *path, struct conf **out, char *err, size_t errlen)
{
    char *text;
    size_t len;

    *out = NULL;
    if (conf__read_file(path, &text, &len, err, errlen) < 0)
        return -1;
    int rc = conf_load_buffer(path, text, len, out, err, errlen);
    free(text);
    return rc;
}

/*
 * One text: the document first (its messages keep their lines), a newline, then the file
 * (its global section; conf__build refuses pools after source_lines). Both are block
 * mappings at the top, so the text is their union.
 */
int conf_load_source(const char *path, const char *name, uint64_t rev, const char *doc,
                     size_t len, struct conf **out, char *err, size_t errlen)
{
    char *file, *text;
    size_t flen;
    uint32_t lines = 1;
    int rc = -1;

    *out = NULL;
    if (conf__read_file(path, &file, &flen, err, errlen) < 0)
        return -1;
    text = malloc(len + flen + 2);
    if (text == NULL) {
        snprintf(err, errlen, "%s: %s", name, conf__enomem);
        goto out;
    }
    memcpy(text, doc, len);
    text[len] = '\n';
    memcpy(text + len + 1, file, flen);
    for (size_t i = 0; i < len; i++)
        lines += doc[i] == '\n';
    rc = conf__load(name, text, len + 1 + flen, lines, out, err, errlen);
    if (rc == 0) {
        char *p = strdup(path), *src = strdup(name);
        if (p == NULL || src == NULL) {
            free(p);
            free(src);
            conf_free(*out);
            *out = NULL;
            snprintf(err, errlen, "%s: %s", name, conf__enomem);
            rc = -1;
        } else {
            free((*out)->path);
            (*out)->path = p;       /* relative TLS paths and reloads: the file's */
            (*out)->source = src;
            (*out)->source_rev = rev;
        }
    }
    free(text);
out:
    free(file);
    return rc;
}
