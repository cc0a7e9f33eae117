/* Unit tests for stats: summing workers, twemproxy-compatible JSON, Prometheus output (promtool), -D and docs in sync. */
#include "config.h"

#include "check_main.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/buf.h"
#include "stats/stats.h"

static const char *srcdir(void)
{
    const char *d = getenv("top_srcdir");
    return d ? d : ".";
}

static json_t *load_sample(void)
{
    char path[4096];
    json_error_t err;
    snprintf(path, sizeof(path), "%s/tests/vectors/twemproxy/stats-sample-ketama-md5-named.json", srcdir());
    json_t *j = json_load_file(path, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", path, err.text);
    return j;
}

static const struct stats_field *pool_field(const char *name)
{
    for (size_t i = 0; i < stats_pool_nfields; i++)
        if (strcmp(stats_pool_fields[i].name, name) == 0)
            return &stats_pool_fields[i];
    return NULL;
}

static const struct stats_field *server_field(const char *name)
{
    for (size_t i = 0; i < stats_server_nfields; i++)
        if (strcmp(stats_server_fields[i].name, name) == 0)
            return &stats_server_fields[i];
    return NULL;
}

static void set_field(void *st, const struct stats_field *f, int64_t v)
{
    *(int64_t *)((char *)st + f->offset) = v;
}

/* A view holding exactly the numbers of nutcracker's sample, plus extension values. */
static void view_from_sample(struct stats_view *v, json_t *sample)
{
    size_t npools = 0, nservers[8] = {0};
    const char *k;
    json_t *val;
    json_object_foreach(sample, k, val) {
        if (!json_is_object(val))
            continue;
        const char *sk;
        json_t *sv;
        json_object_foreach(val, sk, sv)
            if (json_is_object(sv))
                nservers[npools]++;
        npools++;
    }
    size_t nhot[8] = { 3, 3, 3, 3, 3, 3, 3, 3 };
    ck_assert_int_eq(stats_view_alloc(v, npools, nservers, nhot), 0);
    v->service = json_string_value(json_object_get(sample, "service"));
    v->source = json_string_value(json_object_get(sample, "source"));
    v->version = json_string_value(json_object_get(sample, "version"));
    v->uptime = json_integer_value(json_object_get(sample, "uptime"));
    v->timestamp = json_integer_value(json_object_get(sample, "timestamp"));
    v->total_connections = json_integer_value(json_object_get(sample, "total_connections"));
    v->curr_connections = json_integer_value(json_object_get(sample, "curr_connections"));
    size_t p = 0;
    json_object_foreach(sample, k, val) {
        if (!json_is_object(val))
            continue;
        struct stats_view_pool *vp = &v->pools[p++];
        vp->name = k;
        vp->epoch = 3;
        strcpy(vp->checksum, "9f86d081884c7d65");
        vp->distribution = "ketama";
        vp->reloads = 2;
        strcpy(vp->last_reload, "ok");
        vp->last_reload_at = 1795976500;
        size_t s = 0;
        const char *sk;
        json_t *sv;
        json_object_foreach(val, sk, sv) {
            if (!json_is_object(sv)) {
                const struct stats_field *f = pool_field(sk);
                ck_assert_msg(f != NULL, "twemproxy pool field %s missing from STATS_POOL_CODEC", sk);
                set_field(&vp->stats, f, json_integer_value(sv));
                continue;
            }
            struct stats_view_server *srv = &vp->servers[s++];
            srv->name = sk;
            srv->up = s != 2;
            histogram_init(&srv->latency);
            for (uint64_t us = 1; us <= 1000; us++)
                histogram_record(&srv->latency, us * 10);
            const char *fk;
            json_t *fv;
            json_object_foreach(sv, fk, fv) {
                const struct stats_field *f = server_field(fk);
                ck_assert_msg(f != NULL, "twemproxy server field %s missing from STATS_SERVER_CODEC", fk);
                set_field(&srv->stats, f, json_integer_value(fv));
            }
        }
        /* Hot keys: printable, UTF-8, and binary. */
        static const char bin[] = { 'k', 0, (char)0xff, '"', '\\', '\n', (char)0xc3 };
        struct stats_hot_key *hk = vp->hot_keys;
        memcpy(hk[0].entry.key, "user:42", 7);
        hk[0].entry.len = 7;
        hk[0].entry.count = 900;
        hk[0].entry.error = 4;
        hk[0].owner = vp->servers[0].name;
        memcpy(hk[1].entry.key, "cl\xc3\xa9", 4);   /* "clé" */
        hk[1].entry.len = 4;
        hk[1].entry.count = 500;
        hk[1].owner = vp->servers[1].name;
        memcpy(hk[2].entry.key, bin, sizeof(bin));
        hk[2].entry.len = sizeof(bin);
        hk[2].entry.count = 100;
        hk[2].entry.error = 100;
        hk[2].owner = NULL;
        vp->nhot_keys = 3;
    }
}

static json_t *render_and_parse(const struct stats_view *v, struct buf *out)
{
    buf_init(out);
    ck_assert_int_eq(stats_render_json(v, out), 0);
    json_error_t err;
    json_t *j = json_loadb(buf_rptr(out), buf_len(out), 0, &err);
    ck_assert_msg(j != NULL, "our JSON does not parse: %s", err.text);
    return j;
}

/* Every key of `want` is in `got` with the same type (and value for scalars), and the keys
 * of `want` appear in `got` in the same relative order. */
static void assert_superset(json_t *want, json_t *got, const char *path)
{
    ck_assert_msg(json_typeof(want) == json_typeof(got), "%s: type %d, want %d", path,
                  json_typeof(got), json_typeof(want));
    if (!json_is_object(want)) {
        ck_assert_msg(json_equal(want, got), "%s: value differs", path);
        return;
    }
    const char *k;
    json_t *wv;
    void *it_prev = NULL;
    size_t last_pos = 0;
    json_object_foreach(want, k, wv) {
        char sub[512];
        snprintf(sub, sizeof(sub), "%s.%s", path, k);
        json_t *gv = json_object_get(got, k);
        ck_assert_msg(gv != NULL, "%s missing", sub);
        /* Position of k in got. */
        size_t pos = 0;
        for (void *it = json_object_iter(got); it; it = json_object_iter_next(got, it), pos++)
            if (strcmp(json_object_iter_key(it), k) == 0)
                break;
        ck_assert_msg(it_prev == NULL || pos > last_pos, "%s out of twemproxy's order", sub);
        it_prev = wv;
        last_pos = pos;
        assert_superset(wv, gv, sub);
    }
}

START_TEST(test_json_has_every_twemproxy_field_with_same_nesting_types_values)
{
    json_t *sample = load_sample();
    struct stats_view v;
    view_from_sample(&v, sample);
    struct buf out;
    json_t *ours = render_and_parse(&v, &out);
    assert_superset(sample, ours, "$");
    /* The first seven fields in twemproxy's order, then the pools. */
    static const char *head[] = { "service", "source", "version", "uptime", "timestamp",
                                  "total_connections", "curr_connections" };
    void *it = json_object_iter(ours);
    for (size_t i = 0; i < 7; i++, it = json_object_iter_next(ours, it))
        ck_assert_str_eq(json_object_iter_key(it), head[i]);
    ck_assert(json_is_object(json_object_iter_value(it)));
    json_decref(ours);
    json_decref(sample);
    buf_free(&out);
    stats_view_free(&v);
}
END_TEST

#define CHECK_POOL_EXT(n, t, d) ck_assert_msg(json_object_get(pool, #n) != NULL, "pool field " #n " missing");
#define CHECK_SERVER_EXT(n, t, d) ck_assert_msg(json_object_get(srv, #n) != NULL, "server field " #n " missing");

START_TEST(test_json_extensions_and_key_escaping)
{
    json_t *sample = load_sample();
    struct stats_view v;
    view_from_sample(&v, sample);
    struct buf out;
    json_t *ours = render_and_parse(&v, &out);
    json_t *pool = json_object_get(ours, "alpha_pool");
    ck_assert_ptr_nonnull(pool);
    STATS_POOL_EXT_CODEC(CHECK_POOL_EXT)
    for (size_t i = 0; i < stats_pool_nfields; i++)
        ck_assert(json_is_integer(json_object_get(pool, stats_pool_fields[i].name)));
    ck_assert_int_eq(json_integer_value(json_object_get(pool, "epoch")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(pool, "ring_checksum")), "9f86d081884c7d65");
    ck_assert_str_eq(json_string_value(json_object_get(pool, "distribution")), "ketama");
    ck_assert_str_eq(json_string_value(json_object_get(pool, "last_reload")), "ok");
    json_t *srv = json_object_get(pool, "alpha");
    ck_assert_ptr_nonnull(srv);
    STATS_SERVER_EXT_CODEC(CHECK_SERVER_EXT)
    for (size_t i = 0; i < stats_server_nfields; i++)
        ck_assert(json_is_integer(json_object_get(srv, stats_server_fields[i].name)));
    ck_assert_str_eq(json_string_value(json_object_get(srv, "state")), "down");   /* 2nd server */
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(pool, "beta"), "state")), "up");
    /* 10, 20, ..., 10000 us: p50 = 5000, p99 = 9900, p999 = 10000 */
    ck_assert_int_eq(json_integer_value(json_object_get(srv, "latency_p50_us")), 5000);
    ck_assert_int_eq(json_integer_value(json_object_get(srv, "latency_p99_us")), 9900);
    ck_assert_int_eq(json_integer_value(json_object_get(srv, "latency_p999_us")), 10000);

    json_t *hot = json_object_get(pool, "hot_keys");
    ck_assert(json_is_array(hot));
    ck_assert_uint_eq(json_array_size(hot), 3);
    json_t *h0 = json_array_get(hot, 0), *h1 = json_array_get(hot, 1), *h2 = json_array_get(hot, 2);
    ck_assert_str_eq(json_string_value(json_object_get(h0, "key")), "user:42");
    ck_assert_ptr_null(json_object_get(h0, "key_hex"));
    ck_assert_int_eq(json_integer_value(json_object_get(h0, "count")), 900);
    ck_assert_int_eq(json_integer_value(json_object_get(h0, "error")), 4);
    ck_assert_str_eq(json_string_value(json_object_get(h0, "owner")), "beta");
    ck_assert_str_eq(json_string_value(json_object_get(h1, "key")), "cl\xc3\xa9");   /* UTF-8 kept */
    ck_assert_ptr_null(json_object_get(h1, "key_hex"));
    /* Binary: NUL, 0xff, a newline and a lone lead byte are \xHH; quote and backslash stay. */
    ck_assert_str_eq(json_string_value(json_object_get(h2, "key")), "k\\x00\\xff\"\\\\x0a\\xc3");
    ck_assert_str_eq(json_string_value(json_object_get(h2, "key_hex")), "6b00ff225c0ac3");
    ck_assert(json_is_null(json_object_get(h2, "owner")));
    json_decref(ours);
    json_decref(sample);
    buf_free(&out);
    stats_view_free(&v);
}
END_TEST

START_TEST(test_key_display_rules)
{
    char out[64];
    ck_assert_int_eq(stats_key_display("abc", 3, out, sizeof(out)), 1);
    ck_assert_str_eq(out, "abc");
    ck_assert_int_eq(stats_key_display("\xe2\x82\xac", 3, out, sizeof(out)), 1);   /* euro sign */
    ck_assert_int_eq(stats_key_display("\xc0\xaf", 2, out, sizeof(out)), 0);     /* overlong '/' */
    ck_assert_str_eq(out, "\\xc0\\xaf");
    ck_assert_int_eq(stats_key_display("\xed\xa0\x80", 3, out, sizeof(out)), 0); /* surrogate */
    ck_assert_int_eq(stats_key_display("\xc2\x85", 2, out, sizeof(out)), 0);     /* C1 control */
    ck_assert_int_eq(stats_key_display("a\x7f", 2, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "a\\x7f");
    /* Truncation never splits an escape or a character. */
    ck_assert_int_eq(stats_key_display("\x01\x02\x03", 3, out, 9), 0);
    ck_assert_str_eq(out, "\\x01\\x02");
}
END_TEST

START_TEST(test_sum_of_workers_is_exact)
{
    enum { W = 5, N = 3 };
    struct stats_server per[W][N];
    struct stats_pool pp[W][2];
    struct stats_server want[N] = {{0}};
    struct stats_pool pwant[2] = {{0}};
    uint64_t x = 88172645463325252ULL;
    memset(per, 0, sizeof(per));
    memset(pp, 0, sizeof(pp));
    for (int w = 0; w < W; w++)
        for (int i = 0; i < N; i++)
            for (size_t f = 0; f < stats_server_nfields; f++) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                int64_t val = (int64_t)(x % 1000000007ULL);
                const struct stats_field *fd = &stats_server_fields[f];
                set_field(&per[w][i], fd, val);
                int64_t *acc = (int64_t *)((char *)&want[i] + fd->offset);
                if (fd->type == STATS_TIMESTAMP)
                    *acc = val > *acc ? val : *acc;
                else
                    *acc += val;
            }
    for (int w = 0; w < W; w++)
        for (int i = 0; i < 2; i++)
            for (size_t f = 0; f < stats_pool_nfields; f++) {
                int64_t val = w * 1000 + i * 100 + (int64_t)f;
                set_field(&pp[w][i], &stats_pool_fields[f], val);
                *(int64_t *)((char *)&pwant[i] + stats_pool_fields[f].offset) += val;
            }
    const struct stats_server *srcs[W];
    const struct stats_pool *psrcs[W];
    for (int w = 0; w < W; w++) {
        srcs[w] = per[w];
        psrcs[w] = pp[w];
    }
    struct stats_server got[N];
    struct stats_pool pgot[2];
    memset(got, 0xab, sizeof(got));     /* the sum overwrites, it does not accumulate */
    stats_sum_server(got, srcs, W, N);
    stats_sum_pool(pgot, psrcs, W, 2);
    ck_assert_int_eq(memcmp(got, want, sizeof(got)), 0);
    ck_assert_int_eq(memcmp(pgot, pwant, sizeof(pgot)), 0);
    ck_assert_int_eq(pgot[1].requests, (0 + 1000 + 2000 + 3000 + 4000) + 5 * 100 + 5 * (int64_t)(pool_field("requests") - stats_pool_fields));
}
END_TEST

/* ---- Prometheus */

static int promtool_missing;

static int run_promtool(const char *text, size_t len, char *msg, size_t msglen)
{
    char path[] = "/tmp/rl-metrics-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(msg, 1, msglen - 1, p);
    msg[n] = '\0';
    int st = pclose(p);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_prometheus_passes_promtool_and_has_the_values)
{
    json_t *sample = load_sample();
    struct stats_view v;
    view_from_sample(&v, sample);
    struct buf out;
    buf_init(&out);
    ck_assert_int_eq(stats_render_prometheus(&v, &out), 0);
    ck_assert_int_eq(buf_append(&out, "", 1), 0);       /* NUL for strstr */
    const char *t = buf_rptr(&out);
    ck_assert_ptr_nonnull(strstr(t, "\nringleader_server_requests_total{pool=\"alpha_pool\",server=\"beta\"} 4820\n"));
    ck_assert_ptr_nonnull(strstr(t, "\nringleader_pool_client_eof_total{pool=\"alpha_pool\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "\nringleader_server_connections{pool=\"alpha_pool\",server=\"gamma\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "\n# TYPE ringleader_server_eof_total counter\n"));
    ck_assert_ptr_nonnull(strstr(t, "\n# HELP ringleader_server_eof_total Number of eof on server connections\n"));
    ck_assert_ptr_nonnull(strstr(t, "\nringleader_pool_epoch{pool=\"alpha_pool\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(t, "\nringleader_pool_ring_info{pool=\"alpha_pool\",checksum=\"9f86d081884c7d65\",distribution=\"ketama\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "\nringleader_server_up{pool=\"alpha_pool\",server=\"alpha\"} 0\n"));
    /* 10..10000 us by 10: 5 values <= 50 us, 25 <= 250 us, 1000 <= 10 ms. */
    ck_assert_ptr_nonnull(strstr(t, "ringleader_server_latency_seconds_bucket{pool=\"alpha_pool\",server=\"beta\",le=\"0.00005\"} 5\n"));
    ck_assert_ptr_nonnull(strstr(t, "ringleader_server_latency_seconds_bucket{pool=\"alpha_pool\",server=\"beta\",le=\"0.00025\"} 25\n"));
    ck_assert_ptr_nonnull(strstr(t, "ringleader_server_latency_seconds_bucket{pool=\"alpha_pool\",server=\"beta\",le=\"0.01\"} 1000\n"));
    ck_assert_ptr_nonnull(strstr(t, "ringleader_server_latency_seconds_bucket{pool=\"alpha_pool\",server=\"beta\",le=\"+Inf\"} 1000\n"));
    ck_assert_ptr_nonnull(strstr(t, "ringleader_server_latency_seconds_sum{pool=\"alpha_pool\",server=\"beta\"} 5.005\n"));
    ck_assert_ptr_nonnull(strstr(t, "ringleader_server_latency_seconds_count{pool=\"alpha_pool\",server=\"beta\"} 1000\n"));
    ck_assert_ptr_nonnull(strstr(t, "ringleader_pool_server_requests_max{pool=\"alpha_pool\"} 5347\n"));
    ck_assert_ptr_nonnull(strstr(t, "ringleader_pool_server_requests_mean{pool=\"alpha_pool\"} 5000\n"));
    ck_assert_ptr_nonnull(strstr(t, "ringleader_pool_hot_key_requests{pool=\"alpha_pool\",key=\"user:42\",owner=\"beta\"} 900\n"));
    /* Label escaping: the display form's backslashes and the quote are escaped again. */
    ck_assert_ptr_nonnull(strstr(t, "ringleader_pool_hot_key_requests{pool=\"alpha_pool\",key=\"k\\\\x00\\\\xff\\\"\\\\\\\\x0a\\\\xc3\",key_hex=\"6b00ff225c0ac3\",owner=\"\"} 100\n"));

    if (access("/usr/bin/promtool", X_OK) != 0 && system("command -v promtool >/dev/null 2>&1") != 0) {
        promtool_missing = 1;
    } else {
        char msg[4096];
        int rc = run_promtool(t, strlen(t), msg, sizeof(msg));
        ck_assert_msg(rc == 0, "promtool check metrics failed (%d):\n%s", rc, msg);
        /* And it does catch a broken exposition. */
        const char *bad = "# TYPE x counter\nx{a=\"b} 1\n";
        ck_assert_int_ne(run_promtool(bad, strlen(bad), msg, sizeof(msg)), 0);
    }
    json_decref(sample);
    buf_free(&out);
    stats_view_free(&v);
}
END_TEST

START_TEST(test_empty_view_renders)
{
    struct stats_view v;
    ck_assert_int_eq(stats_view_alloc(&v, 0, NULL, NULL), 0);
    struct buf out;
    json_t *j = render_and_parse(&v, &out);
    ck_assert_str_eq(json_string_value(json_object_get(j, "service")), "ringleader");
    ck_assert_str_eq(json_string_value(json_object_get(j, "source")), "");
    json_decref(j);
    buf_free(&out);
    buf_init(&out);
    ck_assert_int_eq(stats_render_prometheus(&v, &out), 0);
    ck_assert_uint_gt(buf_len(&out), 0);
    buf_free(&out);
    stats_view_free(&v);
}
END_TEST

/* ---- -D and docs/stats.md */

static char *read_all(FILE *f)
{
    struct buf b;
    buf_init(&b);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        ck_assert_int_eq(buf_append(&b, chunk, n), 0);
    ck_assert_int_eq(buf_append(&b, "", 1), 0);
    return b.data;
}

#define DESCRIBE_HAS_EXT(n, t, d) ck_assert_ptr_nonnull(strstr(text, #n));

START_TEST(test_describe_lists_every_field)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    stats_describe(f);
    fclose(f);
    for (size_t i = 0; i < stats_pool_nfields; i++) {
        ck_assert_ptr_nonnull(strstr(text, stats_pool_fields[i].name));
        ck_assert_ptr_nonnull(strstr(text, stats_pool_fields[i].desc));
    }
    for (size_t i = 0; i < stats_server_nfields; i++) {
        ck_assert_ptr_nonnull(strstr(text, stats_server_fields[i].name));
        ck_assert_ptr_nonnull(strstr(text, stats_server_fields[i].desc));
    }
    STATS_POOL_EXT_CODEC(DESCRIBE_HAS_EXT)
    STATS_SERVER_EXT_CODEC(DESCRIBE_HAS_EXT)
    STATS_CLUSTER_POOL_EXT_CODEC(DESCRIBE_HAS_EXT)
    STATS_CLUSTER_SERVER_EXT_CODEC(DESCRIBE_HAS_EXT)
    STATS_GLOBAL_CODEC(DESCRIBE_HAS_EXT)
    ck_assert_ptr_nonnull(strstr(text, "\n  curr_connections "));
    free(text);
}
END_TEST

/* docs/stats.md names every JSON field `like_this` and every Prometheus family. */
static void docs_has(const char *docs, const char *name)
{
    char quoted[256];
    snprintf(quoted, sizeof(quoted), "`%s`", name);
    ck_assert_msg(strstr(docs, quoted) != NULL, "docs/stats.md does not document `%s`", name);
}

#define DOCS_HAS_EXT(n, t, d) docs_has(docs, #n);

START_TEST(test_docs_list_every_field)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/docs/stats.md", srcdir());
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    char *docs = read_all(f);
    fclose(f);
    for (size_t i = 0; i < stats_pool_nfields; i++)
        docs_has(docs, stats_pool_fields[i].name);
    for (size_t i = 0; i < stats_server_nfields; i++)
        docs_has(docs, stats_server_fields[i].name);
    STATS_POOL_EXT_CODEC(DOCS_HAS_EXT)
    STATS_SERVER_EXT_CODEC(DOCS_HAS_EXT)
    STATS_CLUSTER_POOL_EXT_CODEC(DOCS_HAS_EXT)
    STATS_CLUSTER_SERVER_EXT_CODEC(DOCS_HAS_EXT)

    /* Every metric family the exposition declares. */
    json_t *sample = load_sample();
    struct stats_view v;
    view_from_sample(&v, sample);
    struct buf out;
    buf_init(&out);
    ck_assert_int_eq(stats_render_prometheus(&v, &out), 0);
    ck_assert_int_eq(buf_append(&out, "", 1), 0);
    for (const char *p = buf_rptr(&out); (p = strstr(p, "# TYPE ")) != NULL;) {
        p += 7;
        char name[128];
        size_t n = strcspn(p, " ");
        ck_assert_uint_lt(n, sizeof(name));
        memcpy(name, p, n);
        name[n] = '\0';
        docs_has(docs, name);
    }
    buf_free(&out);
    stats_view_free(&v);
    json_decref(sample);
    free(docs);
}
END_TEST

static Suite *stats_suite(void)
{
    Suite *s = suite_create("stats");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_json_has_every_twemproxy_field_with_same_nesting_types_values);
    tcase_add_test(tc, test_json_extensions_and_key_escaping);
    tcase_add_test(tc, test_key_display_rules);
    tcase_add_test(tc, test_sum_of_workers_is_exact);
    tcase_add_test(tc, test_prometheus_passes_promtool_and_has_the_values);
    tcase_add_test(tc, test_empty_view_renders);
    tcase_add_test(tc, test_describe_lists_every_field);
    tcase_add_test(tc, test_docs_list_every_field);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (check_run(stats_suite(), CK_NOFORK) != 0)   /* promtool_missing is read after the run */
        return EXIT_FAILURE;
    if (promtool_missing) {
        fprintf(stderr, "promtool not found: the Prometheus output was not validated\n");
        return 77;          /* automake: SKIP */
    }
    return EXIT_SUCCESS;
}
