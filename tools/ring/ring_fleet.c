/* ringleader-ring --fleet: whether every proxy of a fleet runs each pool on the same ring (their admin endpoints' /config). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "tools/ring/ring_tool.h"

#define FLEET_MAX          256             /* proxies in one --fleet */
#define FLEET_TIMEOUT_MS   5000L
#define FLEET_BODY_MAX     (64u << 20)

struct fleet_proxy {
    char   *url;            /* as given, without a trailing '/' */
    json_t *pools;          /* /config's "pools", or NULL when it could not be read */
    char    err[1400];
};

struct fleet_body {
    char  *data;
    size_t len;
};

static size_t fleet_write_cb(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct fleet_body *b = arg;
    size_t n = size * nmemb;
    if (b->len + n > FLEET_BODY_MAX)
        return 0;
    char *grown = realloc(b->data, b->len + n + 1);
    if (grown == NULL)
        return 0;
    memcpy(grown + b->len, ptr, n);
    b->data = grown;
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* GET url/config into fp->pools; 0, or -1 with fp->err. */
static int fleet_fetch(struct fleet_proxy *fp)
{
    char url[1200], cerr[CURL_ERROR_SIZE] = "";
    struct fleet_body b = { NULL, 0 };
    long status = 0;
    CURL *h = curl_easy_init();

    if (h == NULL) {
        snprintf(fp->err, sizeof(fp->err), "out of memory");
        return -1;
    }
    snprintf(url, sizeof(url), "%s%s/config", strstr(fp->url, "://") ? "" : "http://", fp->url);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fleet_write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, FLEET_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    if (rc != CURLE_OK || status != 200) {
        if (rc != CURLE_OK)
            snprintf(fp->err, sizeof(fp->err), "%s", cerr[0] ? cerr : curl_easy_strerror(rc));
        else
            snprintf(fp->err, sizeof(fp->err), "%s: HTTP %ld", url, status);
        free(b.data);
        return -1;
    }
    json_error_t je;
    json_t *root = b.data ? json_loads(b.data, 0, &je) : NULL;
    free(b.data);
    json_t *pools = json_object_get(root, "pools");
    if (!json_is_object(pools)) {
        snprintf(fp->err, sizeof(fp->err), "%s: not a ringleader admin endpoint's /config", url);
        json_decref(root);
        return -1;
    }
    fp->pools = json_incref(pools);
    json_decref(root);
    return 0;
}

static const char *fleet_str(json_t *pool, const char *key)
{
    const char *s = json_string_value(json_object_get(pool, key));
    return s ? s : "-";
}

/* One proxy's line for a pool. */
static void fleet_line(const struct fleet_proxy *fp, json_t *pool, const char *mark)
{
    if (pool == NULL) {
        printf("  %s %-40s no such pool\n", mark, fp->url);
        return;
    }
    printf("  %s %-40s checksum %s epoch %lld source %s revision %lld\n", mark, fp->url,
           fleet_str(pool, "ring_checksum"),
           (long long)json_integer_value(json_object_get(pool, "epoch")),
           fleet_str(pool, "source"),
           (long long)json_integer_value(json_object_get(pool, "source_revision")));
}

int tool__fleet(const struct tool_opts *o)
{
    struct fleet_proxy fleet[FLEET_MAX];
    uint32_t n = 0;
    int status = TOOL_EXIT_OK;
    char *list = strdup(o->fleet);

    if (list == NULL)
        return tool__nomem();
    memset(fleet, 0, sizeof(fleet));
    for (char *save = NULL, *u = strtok_r(list, ",", &save); u != NULL;
         u = strtok_r(NULL, ",", &save)) {
        if (n == FLEET_MAX) {
            fprintf(stderr, "ringleader-ring: --fleet: at most %d proxies\n", FLEET_MAX);
            free(list);
            return TOOL_EXIT_USAGE;
        }
        size_t len = strlen(u);
        while (len > 0 && u[len - 1] == '/')
            u[--len] = '\0';
        if (len > 0)
            fleet[n++].url = u;
    }
    if (n == 0) {
        fprintf(stderr, "ringleader-ring: --fleet wants admin URLs, e.g. "
                "http://10.0.0.1:8080,http://10.0.0.2:8080\n");
        free(list);
        return TOOL_EXIT_USAGE;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    for (uint32_t i = 0; i < n; i++) {
        if (fleet_fetch(&fleet[i]) < 0) {
            fprintf(stderr, "ringleader-ring: --fleet %s: %s\n", fleet[i].url, fleet[i].err);
            status = TOOL_EXIT_ERROR;
        }
    }
    /* every pool any proxy has, in the order they first appear */
    json_t *names = json_array();
    for (uint32_t i = 0; names != NULL && i < n; i++) {
        const char *name;
        json_t *v;
        json_object_foreach(fleet[i].pools, name, v) {
            int seen = 0;
            for (size_t k = 0; k < json_array_size(names) && !seen; k++)
                seen = strcmp(json_string_value(json_array_get(names, k)), name) == 0;
            if (!seen)
                json_array_append_new(names, json_string(name));
        }
    }
    uint32_t reached = 0;
    for (uint32_t i = 0; i < n; i++)
        reached += fleet[i].pools != NULL;
    uint32_t differ = 0;
    for (size_t k = 0; k < json_array_size(names); k++) {
        const char *name = json_string_value(json_array_get(names, k));
        const char *first = NULL;
        int same = 1;
        for (uint32_t i = 0; i < n; i++) {
            if (fleet[i].pools == NULL)
                continue;
            json_t *pool = json_object_get(fleet[i].pools, name);
            const char *sum = pool ? fleet_str(pool, "ring_checksum") : NULL;
            if (sum == NULL || (first != NULL && strcmp(first, sum) != 0))
                same = 0;
            if (first == NULL && sum != NULL)
                first = sum;
        }
        if (same) {
            printf("pool %s: agree: checksum %s on %u proxies\n", name, first, reached);
        } else {
            differ++;
            printf("pool %s: DIFFER:\n", name);
            for (uint32_t i = 0; i < n; i++) {
                if (fleet[i].pools == NULL)
                    continue;
                json_t *pool = json_object_get(fleet[i].pools, name);
                const char *sum = pool ? fleet_str(pool, "ring_checksum") : NULL;
                fleet_line(&fleet[i], pool, sum != NULL && strcmp(sum, first) == 0 ? " " : "*");
            }
        }
    }
    if (reached < n)
        printf("%u of %u proxies could not be read (see above)\n", n - reached, n);
    printf("fleet: %u of %u proxies read, %zu pool(s), %s\n", reached, n,
           json_array_size(names), differ ? "they DIFFER" : reached < n ? "the others agree"
                                                                         : "every pool agrees");
    json_decref(names);
    for (uint32_t i = 0; i < n; i++)
        json_decref(fleet[i].pools);
    free(list);
    curl_global_cleanup();
    if (status != TOOL_EXIT_OK)
        return status;
    return differ ? TOOL_EXIT_DIFFER : TOOL_EXIT_OK;
}
