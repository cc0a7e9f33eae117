/* request_log: {path, sample, errors, key}: the sampled JSON-lines request log (src/proxy/introspect.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "conf/conf_int.h"
#include "lib/util.h"

/* A fraction 0..1 ("0.01", "1", "0"). */
static const char *rlog_sample(struct conf_ctx *c, yaml_node_t *v, double *out)
{
    size_t n;
    const char *s = conf__scalar(c, v, &n, 0);
    char text[64], *end;

    if (s == NULL)
        return c->why;
    if (n == 0 || n >= sizeof(text))
        goto bad;
    memcpy(text, s, n);
    text[n] = '\0';
    double x = strtod(text, &end);
    if (*end != '\0' || !(x >= 0.0 && x <= 1.0))
        goto bad;
    *out = x;
    return NULL;
bad:
    return conf__why(c, "sample '%.*s' is not a fraction from 0 to 1 (0.01: one request in "
                     "a hundred)", (int)RL_MIN(n, 64), s);
}

/* request_log: {path: FILE, sample: 0.01, errors: all|sampled, key: plain|hash} */
const char *conf__set_request_log(struct conf_ctx *c, const struct conf_command *cmd,
                                  yaml_node_t *node, void *obj)
{
    struct conf_request_log *rl = (struct conf_request_log *)((char *)obj + cmd->offset);
    const char *why = NULL;
    size_t n;
    const char *s;

    if (node->type != YAML_MAPPING_NODE)
        return conf__why(c, "expected {path: FILE, sample: 0.01, errors: all, key: plain|hash}, "
                         "found %s", conf__node_kind(node));
    free(rl->path);
    rl->path = NULL;
    rl->sample = 0.01;
    rl->errors = 1;
    rl->key_hash = 0;
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start;
         pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(&c->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(&c->doc, pair->value);
        const char *ks = k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";

        c->errnode = v;
        if (strcmp(ks, "path") == 0) {
            if ((s = conf__scalar(c, v, &n, 0)) == NULL)
                return c->why;
            free(rl->path);
            if ((rl->path = util_strndup(s, n)) == NULL)
                return conf__enomem;
        } else if (strcmp(ks, "sample") == 0) {
            why = rlog_sample(c, v, &rl->sample);
        } else if (strcmp(ks, "errors") == 0) {
            if ((s = conf__scalar(c, v, &n, 0)) == NULL)
                return c->why;
            if (n == 3 && memcmp(s, "all", 3) == 0)
                rl->errors = 1;
            else if (n == 7 && memcmp(s, "sampled", 7) == 0)
                rl->errors = 0;
            else
                why = conf__why(c, "errors '%.*s' is not all or sampled", (int)RL_MIN(n, 64), s);
        } else if (strcmp(ks, "key") == 0) {
            if ((s = conf__scalar(c, v, &n, 0)) == NULL)
                return c->why;
            if (n == 5 && memcmp(s, "plain", 5) == 0)
                rl->key_hash = 0;
            else if (n == 4 && memcmp(s, "hash", 4) == 0)
                rl->key_hash = 1;
            else
                why = conf__why(c, "key '%.*s' is not plain or hash", (int)RL_MIN(n, 64), s);
        } else {
            c->errnode = k;
            why = conf__why(c, "unknown key '%s' in request_log (expected path, sample, errors, "
                            "key)", ks);
        }
        if (why != NULL)
            return why;
    }
    c->errnode = node;
    if (rl->path == NULL)
        return conf__why(c, "request_log needs a path");
    c->errnode = NULL;
    return NULL;
}
