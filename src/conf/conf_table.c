/* The walk over a keyword table: each key of a mapping matched to its command, unknown and repeated keys reported, the setters run in table order. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <yaml.h>

#include "conf/conf.h"
#include "conf/conf_int.h"
#include "lib/util.h"

/* The unknown-key message: a near miss (marked failed in failed[], so that it is not also
 * reported missing), or the section the key belongs to. */
static int conf__unknown_key(struct conf_ctx *c, yaml_node_t *k, const char *name,
                             const struct conf_command *cmds, size_t ncmds, const char *what,
                             unsigned char *failed)
{
    const char *near = conf__suggest(name, (int)ncmds, conf__cmd_name, cmds);

    if (near != NULL) {
        for (size_t i = 0; failed != NULL && i < ncmds; i++)
            if (cmds[i].name == near)
                failed[i] = 1;
        return conf__fail(c, k, name, "unknown %s key; did you mean '%s'?", what, near);
    }
    if (c->misplaced != NULL) {
        int rc = c->misplaced(c, k, name, cmds);
        if (rc != 0)
            return rc;
    }
    return conf__fail(c, k, name, "unknown %s key", what);
}

/*
 * Match each key of `map` against cmds: values[i] / keys[i] get the nodes
 * for cmds[i] (NULL when absent). Unknown keys, repeated keys and keys that
 * are not plain words are errors, recorded and skipped; a misspelt key marks
 * the key it was probably meant to be in failed[] (ncmds entries, may be
 * NULL). Returns the number of errors recorded (0: every key is known and
 * given once).
 */
int conf__collect(struct conf_ctx *c, const struct conf_command *cmds, size_t ncmds,
                  yaml_node_t *map, yaml_node_t **keys, yaml_node_t **values,
                  const char *what, unsigned char *failed)
{
    yaml_node_pair_t *pair;
    int errors = 0;

    memset(keys, 0, ncmds * sizeof(*keys));
    memset(values, 0, ncmds * sizeof(*values));
    for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(&c->doc, pair->value);
        size_t i;

        if (k->type != YAML_SCALAR_NODE) {
            errors -= conf__fail(c, k, "?", "a %s key must be a word, found %s", what,
                                 conf__node_kind(k));
            continue;
        }
        const char *name = (const char *)k->data.scalar.value;
        for (i = 0; i < ncmds; i++)
            if (strcmp(cmds[i].name, name) == 0)
                break;
        if (i == ncmds) {
            errors -= conf__unknown_key(c, k, name, cmds, ncmds, what, failed);
            continue;
        }
        if (keys[i] != NULL) {
            errors -= conf__fail(c, k, name, "given twice (first at line %zu)",
                                 keys[i]->start_mark.line + 1);
            continue;
        }
        keys[i] = k;
        values[i] = v;
    }
    return errors;
}

/* Whether the key `name` of the table being run has failed (for setters that read the
 * fields of keys before them: their verdict on a value that is not there helps nobody). */
int conf__key_failed(const struct conf_ctx *c, const char *name)
{
    for (size_t i = 0; c->run_failed != NULL && i < c->run_ncmds; i++)
        if (strcmp(c->run_cmds[i].name, name) == 0)
            return c->run_failed[i];
    return 0;
}

/*
 * Run the setters of the keys present (late ones or the others), every one of them: a
 * failure is recorded and the next key runs. failed[i] (ncmds entries, may be NULL) is set
 * for each key whose setter failed. Returns the number of failed keys.
 */
int conf__run(struct conf_ctx *c, const struct conf_command *cmds, size_t ncmds,
              yaml_node_t **keys, yaml_node_t **values, void *obj, int late,
              unsigned char *failed)
{
    unsigned char scratch[128];
    int errors = 0;

    if (failed == NULL) {
        failed = ncmds <= sizeof(scratch) ? scratch : NULL;
        if (failed != NULL)
            memset(failed, 0, ncmds);
    }
    const struct conf_command *save_cmds = c->run_cmds;
    const unsigned char *save_failed = c->run_failed;
    size_t save_n = c->run_ncmds;
    c->run_cmds = cmds;
    c->run_ncmds = ncmds;
    c->run_failed = failed;
    for (size_t i = 0; i < ncmds; i++) {
        const char *why;

        if (values[i] == NULL || cmds[i].late != late)
            continue;
        c->errnode = NULL;
        why = cmds[i].set(c, &cmds[i], values[i], obj);
        if (why == NULL)
            continue;
        errors++;
        if (failed != NULL)
            failed[i] = 1;
        if (why != conf__reported)     /* a nested parser reported its own */
            conf__fail(c, c->errnode != NULL ? c->errnode : values[i], cmds[i].name, "%s", why);
    }
    c->run_cmds = save_cmds;
    c->run_ncmds = save_n;
    c->run_failed = save_failed;
    return errors;
}
