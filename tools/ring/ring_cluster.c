/* ringleader-ring cluster: a Redis Cluster's slot map, fetched from a node or read from a file, shown as owners. */
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
            tool__nomem();
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
int tool__cluster(const struct tool_opts *o)
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
            return tool__nomem();
        }
        json_object_set_new(root, "checksum", tool__json_checksum(m->checksum));
        json_object_set_new(root, "nodes", json_integer(m->nnodes));
    } else if (!o->tsv) {
        printf("# cluster map: %u node(s), checksum %016llx\n", m->nnodes,
               (unsigned long long)m->checksum);
    }
    tool__key_source_init(&ks, o->keys, o->nkeys);
    while ((r = tool__key_next(&ks, &key, &len)) > 0) {
        uint32_t slot = cluster_keyslot(key, len);
        uint32_t own = m->owner[slot];
        const char *master = own == CLUSTER_NONE ? "-" : m->nodes[own].addr;
        if (o->json) {
            json_t *reps = json_array();
            for (uint32_t i = 0; reps != NULL && own != CLUSTER_NONE && i < m->nnodes; i++)
                if (m->nodes[i].role == CLUSTER_REPLICA && m->nodes[i].master == own && i != own)
                    json_array_append_new(reps, json_string(m->nodes[i].addr));
            json_t *e = json_pack("{s:o,s:I,s:s,s:o}", "key", tool__json_key(key, len),
                                  "slot", (json_int_t)slot, "master", master,
                                  "replicas", reps != NULL ? reps : json_array());
            if (e == NULL || json_array_append_new(arr, e) < 0) {
                rc = tool__nomem();
                break;
            }
            continue;
        }
        tool__put_key(stdout, key, len);
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
    tool__key_source_free(&ks);
    if (root != NULL)
        rc = rc == TOOL_EXIT_OK ? tool__json_emit(root) : (json_decref(root), rc);
    cluster_map_free(m);
    return rc;
}

/* The preference list length: -n, else min(3, servers) or replicas if larger. */
