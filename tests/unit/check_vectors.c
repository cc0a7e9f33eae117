/* Placement compatibility: every key of every nutcracker capture lands on the server nutcracker chose. */
#include "config.h"

#include "check_main.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "conf/conf.h"
#include "placement/ring.h"

#define VECTOR_DIRS_MAX 2

struct run_result {
    unsigned long rows;
    unsigned long matched;
    char first_miss[256];
};

/*
 * Place every `key<TAB>label` row of `tsv_gz` with the pool of `yml` and
 * count the rows whose owner's label matches.  Fails the test on a broken
 * file or configuration.
 */
static void run_vector(const char *yml, const char *tsv_gz, struct run_result *res)
{
    char err[512] = "", cmd[8192], line[4096];
    struct conf *conf = NULL;

    memset(res, 0, sizeof(*res));
    ck_assert_msg(conf_load(yml, &conf, err, sizeof(err)) == 0, "%s: %s", yml, err);
    ck_assert_uint_eq(conf->npools, 1);
    struct ring *r = ring_build(&conf->pools[0], err, sizeof(err));
    ck_assert_msg(r != NULL, "%s: %s", yml, err);

    snprintf(cmd, sizeof(cmd), "gzip -dc '%s'", tsv_gz);
    FILE *in = popen(cmd, "r");
    ck_assert_msg(in != NULL, "cannot run %s", cmd);
    while (fgets(line, sizeof(line), in) != NULL) {
        size_t n = strlen(line);
        ck_assert_msg(n > 0 && line[n - 1] == '\n', "%s: line too long", tsv_gz);
        line[--n] = '\0';
        char *tab = memchr(line, '\t', n);
        ck_assert_msg(tab != NULL, "%s: row without a tab", tsv_gz);
        const char *label = tab + 1;
        uint32_t owner = ring_owner(r, line, (size_t)(tab - line));

        res->rows++;
        if (strcmp(r->servers[owner].label, label) == 0)
            res->matched++;
        else if (res->first_miss[0] == '\0')
            snprintf(res->first_miss, sizeof(res->first_miss), "%.*s -> %s, nutcracker %s",
                     (int)(tab - line), line, r->servers[owner].label, label);
    }
    ck_assert_int_eq(pclose(in), 0);
    ring_unref(r);
    conf_free(conf);
}

START_TEST(test_every_vector_matches_nutcracker)
{
    const char *top = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
    static const char *const subdirs[VECTOR_DIRS_MAX] = { "", "/allhash" };
    unsigned files = 0;
    unsigned long rows = 0;

    for (int d = 0; d < VECTOR_DIRS_MAX; d++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/tests/vectors/twemproxy%s", top, subdirs[d]);
        DIR *dh = opendir(dir);
        ck_assert_msg(dh != NULL, "cannot open %s (top_srcdir=%s)", dir, top);
        struct dirent *de;
        while ((de = readdir(dh)) != NULL) {
            size_t n = strlen(de->d_name);
            if (n < 5 || strcmp(de->d_name + n - 4, ".yml") != 0)
                continue;
            char yml[4400], tsv[4400];
            struct run_result res;
            snprintf(yml, sizeof(yml), "%s/%s", dir, de->d_name);
            snprintf(tsv, sizeof(tsv), "%s/%.*s.tsv.gz", dir, (int)(n - 4), de->d_name);
            run_vector(yml, tsv, &res);
            ck_assert_msg(res.rows > 0, "%s: no rows", tsv);
            ck_assert_msg(res.matched == res.rows, "%s: %lu of %lu rows differ, first: %s",
                          de->d_name, res.rows - res.matched, res.rows, res.first_miss);
            files++;
            rows += res.rows;
        }
        closedir(dh);
    }
    /* 10 runs at the top (4 of them with nutcracker's large weights) plus 12 hashes x
     * {ketama, modula}; 210,900 rows in all */
    ck_assert_uint_eq(files, 34);
    ck_assert_uint_eq(rows, 8 * 20000 + 20900 + 20000 + 24 * 1200);
}
END_TEST

static Suite *vectors_suite(void)
{
    Suite *s = suite_create("vectors");
    TCase *tc = tcase_create("twemproxy");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_every_vector_matches_nutcracker);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(vectors_suite)
