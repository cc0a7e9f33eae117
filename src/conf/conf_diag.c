/* Configuration diagnostics: errors kept with file:line:column, sorted and reported, and "did you mean" suggestions. */
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

const char conf__enomem[] = "out of memory";
/* A setter's answer when a nested parser already reported its errors. */
const char conf__reported[] = "";

/* ------------------------------------------------------------------ errors */

static void conf__vmsg(struct conf_ctx *c, const yaml_mark_t *m, const char *key,
                       const char *fmt, va_list ap)
{
    char text[1024];
    int n;

    c->nerrors++;
    if (c->nerrors > CONF_ERRORS_MAX)
        return;                        /* counted in the last line of the report */
    if (m == NULL)
        n = snprintf(text, sizeof(text), "%s: ", c->file);
    else if (key != NULL)
        n = snprintf(text, sizeof(text), "%s:%zu:%zu: key '%s': ", c->file, m->line + 1,
                     m->column + 1, key);
    else
        n = snprintf(text, sizeof(text), "%s:%zu:%zu: ", c->file, m->line + 1, m->column + 1);
    if (n < 0 || (size_t)n >= sizeof(text))
        n = 0;
    vsnprintf(text + n, sizeof(text) - (size_t)n, fmt, ap);
    struct conf_error *e = &c->errors[c->nerrors - 1];
    e->line = m ? m->line + 1 : 0;
    e->col = m ? m->column + 1 : 0;
    e->seq = c->nerrors;
    e->text = strdup(text);
    if (e->text == NULL)
        c->errors_oom = 1;
}

/* Record an error at `node` (NULL: line 1 column 1). Always returns -1. */
int conf__fail(struct conf_ctx *c, const yaml_node_t *node, const char *key,
               const char *fmt, ...)
{
    static const yaml_mark_t start = { 0, 0, 0 };
    va_list ap;

    va_start(ap, fmt);
    conf__vmsg(c, node != NULL ? &node->start_mark : &start, key, fmt, ap);
    va_end(ap);
    return -1;
}

/* An error of the file as a whole (cannot open, out of memory): "FILE: reason". */
int conf__fail_file(struct conf_ctx *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    conf__vmsg(c, NULL, NULL, fmt, ap);
    va_end(ap);
    return -1;
}

static int conf__error_cmp(const void *pa, const void *pb)
{
    const struct conf_error *a = pa, *b = pb;

    if (a->line != b->line)
        return a->line < b->line ? -1 : 1;
    if (a->col != b->col)
        return a->col < b->col ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/*
 * Write the errors found, sorted by position, one per line, into the caller's buffer; what
 * does not fit is counted on a last line. Frees the kept messages.
 */
void conf__report(struct conf_ctx *c)
{
    uint32_t kept = c->nerrors < CONF_ERRORS_MAX ? c->nerrors : CONF_ERRORS_MAX;
    size_t used = 0;
    uint32_t shown = 0;
    const size_t tail = 64;            /* room kept for the "more errors" line */

    qsort(c->errors, kept, sizeof(c->errors[0]), conf__error_cmp);
    c->err[0] = '\0';
    for (uint32_t i = 0; i < kept; i++) {
        const char *t = c->errors[i].text ? c->errors[i].text : conf__enomem;
        size_t n = strlen(t) + (used ? 1 : 0);
        int last = i + 1 == c->nerrors;
        if (used + n + (last ? 0 : tail) + 1 > c->errlen)
            break;
        used += (size_t)snprintf(c->err + used, c->errlen - used, "%s%s", used ? "\n" : "", t);
        shown++;
    }
    if (shown == 0 && c->errlen > 0 && kept > 0) {
        /* Not even one fits whole: the first, cut. */
        snprintf(c->err, c->errlen, "%s", c->errors[0].text ? c->errors[0].text : conf__enomem);
        used = strlen(c->err);
        shown = 1;
    }
    if (shown < c->nerrors && used + 1 < c->errlen)
        snprintf(c->err + used, c->errlen - used, "%s%s: %u more error%s not shown",
                 used ? "\n" : "", c->file, c->nerrors - shown,
                 c->nerrors - shown == 1 ? "" : "s");
    for (uint32_t i = 0; i < kept; i++) {
        free(c->errors[i].text);
        c->errors[i].text = NULL;
    }
}

/* ------------------------------------------------------------ suggestions */

/* Optimal string alignment distance (insertions, deletions, substitutions and swaps of two
 * neighbours count one each), capped: anything above cap is cap + 1. */
size_t conf__distance(const char *a, const char *b, size_t cap)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[3][64];

    if (la >= 63 || lb >= 63)
        return cap + 1;
    if ((la > lb ? la - lb : lb - la) > cap)
        return cap + 1;
    for (size_t j = 0; j <= lb; j++)
        row[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t *cur = row[i % 3], *prev = row[(i + 2) % 3], *pprev = row[(i + 1) % 3];
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t v = prev[j] + 1;
            if (cur[j - 1] + 1 < v)
                v = cur[j - 1] + 1;
            if (prev[j - 1] + cost < v)
                v = prev[j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                pprev[j - 2] + 1 < v)
                v = pprev[j - 2] + 1;
            cur[j] = v;
        }
    }
    size_t d = row[la % 3][lb];
    return d > cap ? cap + 1 : d;
}

/* The nearest of n names (name(i)) to word within CONF_SUGGEST_MAX edits and fewer edits
 * than word has characters (a short stray word is not "corrected"), or NULL. */
const char *conf__suggest(const char *word, int n, const char *(*name)(const void *, int),
                          const void *arg)
{
    const char *best = NULL;
    size_t bestd = CONF_SUGGEST_MAX + 1, wl = strlen(word);

    for (int i = 0; i < n; i++) {
        const char *cand = name(arg, i);
        size_t d = conf__distance(word, cand, CONF_SUGGEST_MAX);
        if (d < bestd && d < wl) {
            best = cand;
            bestd = d;
        }
    }
    return best;
}

const char *conf__cmd_name(const void *arg, int i)
{
    return ((const struct conf_command *)arg)[i].name;
}

const char *conf__why(struct conf_ctx *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);
    return c->why;
}

const char *conf__node_kind(const yaml_node_t *node)
{
    switch (node->type) {
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE:  return "a mapping";
    case YAML_SCALAR_NODE:   return "a single value";
    default:                 return "nothing";
    }
}
