/* ringleader-ring owners: the servers that own each key, as text, TSV or JSON. */
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

/* ---------------------------------------------------------------- owner query */

/* key<TAB>owner per key, nothing else; stdout is block-buffered by main. */
static int tool_query_tsv(const struct ring *r, struct key_source *ks)
{
    const char *key;
    size_t len;
    int rc;

    while ((rc = tool__key_next(ks, &key, &len)) == 1) {
        const char *label = tool__label(r, ring_owner(r, key, len));
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

    tool__print_ring_head(tc, pi, r->epoch);
    printf("\nkey\towner\tpreference (%u)\n", npref);
    while ((rc = tool__key_next(ks, &key, &len)) == 1) {
        uint32_t n = ring_preference(r, key, len, pref, npref);
        tool__put_key(stdout, key, len);
        printf("\t%s\t", tool__label(r, ring_owner(r, key, len)));
        for (uint32_t i = 0; i < n; i++)
            printf("%s%s", i ? " " : "", tool__label(r, pref[i]));
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
                             "checksum", tool__json_checksum(r->checksum),
                             "distribution", dist_name(r->dist.type),
                             "hash", hash_name(r->hash),
                             "servers", (int)r->nservers,
                             "keys", keys);
    if (root == NULL)
        return -ENOMEM;

    while ((rc = tool__key_next(ks, &key, &len)) == 1) {
        uint32_t n = ring_preference(r, key, len, pref, npref);
        json_t *list = json_array();
        for (uint32_t i = 0; list != NULL && i < n; i++)
            if (json_array_append_new(list, json_string(tool__label(r, pref[i]))) != 0) {
                json_decref(list);
                list = NULL;
            }
        json_t *item = json_pack("{s:o, s:s, s:o}", "key", tool__json_key(key, len),
                                 "owner", tool__label(r, ring_owner(r, key, len)),
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
    tool__json_emit(root);       /* a failed write shows in ferror(stdout), checked by main */
    return 0;
}

int tool__query(const struct tool_opts *o, const struct tool_conf *tc)
{
    struct key_source ks;
    int pi = tool__pick_pool(tc, o->pool), rc;

    if (pi < 0)
        return TOOL_EXIT_USAGE;
    const struct ring *r = tc->rings[pi];
    uint32_t npref = tool__pref_len(o, &tc->conf->pools[pi], r);

    tool__key_source_init(&ks, o->keys, o->nkeys);
    if (o->tsv)
        rc = tool_query_tsv(r, &ks);
    else if (o->json)
        rc = tool_query_json(tc, (uint32_t)pi, npref, &ks);
    else
        rc = tool_query_text(tc, (uint32_t)pi, npref, &ks);
    tool__key_source_free(&ks);
    if (rc < 0) {
        fprintf(stderr, "ringleader-ring: %s\n", rc == -EIO ? "error reading keys from stdin"
                                                           : strerror(-rc));
        return TOOL_EXIT_ERROR;
    }
    return TOOL_EXIT_OK;
}
