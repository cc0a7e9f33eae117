/* Unit tests for the request lifecycle (src/proxy/msg.c): merge, failures, timeouts, re-dispatch, orphans — no sockets. */
#include "config.h"

#include "check_main.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "proto/memcache.h"
#include "proxy/client.h"
#include "proxy/hub.h"
#include "proxy/introspect.h"
#include "proxy/msg.h"
#include "state/registry.h"
#include "proxy/server.h"
#include "proxy/snapshot.h"
#include "proxy/worker.h"

/* A worker with one memcached pool, and one client of it, on a loop that is
 * never given a socket (server connections do get a handle: their connect to
 * a closed port never completes before the test tears them down). */
struct fixture {
    struct hub          hub;
    struct worker       w;
    struct conf        *conf;
    struct snapshot     snap;
    struct pool_shared  shared;
    struct wpool        pool;
    struct client      *c;
    uint32_t            loops;
};

static void fx_init(struct fixture *f)
{
    static const char yaml[] =
        "mc:\n  listen: 127.0.0.1:1\n  timeout: 500\n"
        "  servers:\n    - 127.0.0.1:1:1 a\n    - 127.0.0.1:2:1 b\n";
    char err[256];
    memset(f, 0, sizeof(*f));
    ck_assert_int_eq(conf_load_buffer("t.yml", yaml, sizeof(yaml) - 1, &f->conf, err,
                                      sizeof(err)), 0);
    atomic_init(&f->hub.client_output_limit, 8u << 20);
    f->snap.conf = f->conf;
    atomic_init(&f->snap.refs, 1);
    struct worker *w = &f->w;
    w->hub = &f->hub;
    w->snap = &f->snap;
    queue_init(&w->retired);
    queue_init(&w->free_msgs);
    queue_init(&w->clients);
    queue_init(&w->servers);
    sched_init(&w->sched);
    ck_assert_int_eq(uv_loop_init(&w->loop), 0);
    f->pool.w = w;
    f->pool.cp = &f->conf->pools[0];
    f->pool.ops = &proto_memcache_ops;
    f->pool.view.cp = f->pool.cp;
    f->pool.view.shared = &f->shared;
    f->pool.refs = 1;               /* the test's own */
    ck_assert_int_eq(introspect_bind(&f->pool, &f->conf->global), 0);  /* as wpool_bind */
    struct client *c = calloc(1, sizeof(*c));
    ck_assert_ptr_nonnull(c);
    c->w = w;
    c->mops = &client_msg_ops;
    c->pool = &f->pool;
    queue_init(&c->msgs);
    queue_init(&c->holder.pins);
    f->c = c;
}

/* Close what is left and check the loop ends with nothing open. */
static void fx_free(struct fixture *f)
{
    struct qnode *n;
    if (f->c != NULL) {
        conn_release(&f->c->conn);
        free(f->c);
    }
    for (int i = 0; i < 100 && uv_run(&f->w.loop, UV_RUN_NOWAIT) != 0; i++)
        ;
    ck_assert_int_eq(uv_loop_close(&f->w.loop), 0);
    while ((n = queue_first(&f->w.free_msgs)) != NULL) {
        struct msg *m = QUEUE_DATA(n, struct msg, cq);
        queue_remove(n);
        buf_free(&m->rsp);
        free(m);
    }
    free(f->w.scratch);
    introspect_free(&f->pool);
    conf_free(f->conf);
}

/* A client request in reply order. */
static struct msg *fx_request(struct fixture *f, uint16_t cmd)
{
    struct msg *m = msg_get(&f->w);
    ck_assert_ptr_nonnull(m);
    m->role = MSG_REQUEST;
    m->cmd = cmd;
    m->rflags = PROTO_RF_RETRIEVAL;
    m->client = f->c;
    queue_insert_tail(&f->c->msgs, &m->cq);
    f->c->nmsgs++;
    return m;
}

/* Make p a fan-out parent of `nfrag` fragments over the keys of `line`
 * (key i in fragment key_frag[i]), each fragment "sent" (as if queued). */
static void fx_fanout(struct fixture *f, struct msg *p, const char *line, uint32_t nkeys,
                      const uint32_t *key_frag, uint32_t nfrag, struct msg **frags)
{
    p->frags = calloc(nfrag, sizeof(*p->frags) + sizeof(struct buf *));
    p->key_frag = malloc(nkeys * (sizeof(*p->key_frag) + sizeof(*p->keys)));
    ck_assert(p->frags != NULL && p->key_frag != NULL);
    p->keys = (struct proto_key *)(void *)(p->key_frag + nkeys);
    ck_assert_int_eq(buf_append_str(&p->reqcopy, line), 0);
    uint32_t off = 4;                   /* after "get " */
    for (uint32_t i = 0; i < nkeys; i++) {
        const char *sp = strpbrk(line + off, " \r");
        p->keys[i].off = off;
        p->keys[i].len = (uint32_t)(sp - (line + off));
        p->key_frag[i] = key_frag[i];
        off += p->keys[i].len + 1;
    }
    p->nkeys = nkeys;
    p->nfrag = p->nfrag_pending = nfrag;
    for (uint32_t i = 0; i < nfrag; i++) {
        struct msg *fm = msg_get(&f->w);
        fm->role = MSG_FRAG;
        fm->parent = p;
        fm->cmd = p->cmd;
        fm->rflags = p->rflags;
        fm->state = MSG_SENT;
        p->frags[i] = fm;
        frags[i] = fm;
    }
}

static void fx_reply(struct msg *m, const char *bytes)
{
    msg_reply_bytes(m, bytes, strlen(bytes), 0, 0);
}

static void fx_assert_output(struct fixture *f, const char *want)
{
    size_t n = buf_len(&f->c->conn.obuf);
    ck_assert_msg(n == strlen(want) && memcmp(buf_rptr(&f->c->conn.obuf), want, n) == 0,
                  "client output is '%.*s', not '%s'", (int)n, buf_rptr(&f->c->conn.obuf), want);
}

START_TEST(test_fanout_merges_in_key_order_whatever_order_fragments_finish)
{
    struct fixture f;
    struct msg *fr[2];
    static const uint32_t kf[3] = { 0, 1, 0 };
    fx_init(&f);
    struct msg *p = fx_request(&f, MEMCACHE_CMD_GET);
    fx_fanout(&f, p, "get k1 k2 k3\r\n", 3, kf, 2, fr);
    fx_reply(fr[1], "VALUE k2 0 1\r\nB\r\nEND\r\n");
    fr[1]->items = 1;                                   /* (counted by the reply parser) */
    msg_complete(&f.w, fr[1]);
    ck_assert_uint_eq(buf_len(&f.c->conn.obuf), 0);   /* waits for the other fragment */
    /* what the fragments hold for the client counts against it */
    ck_assert_uint_ge(f.c->held_cost, fr[1]->rsp.cap);
    ck_assert_uint_ge(fr[1]->rsp.cap, BUF_STD_SIZE);
    fx_reply(fr[0], "VALUE k1 0 1\r\nA\r\n");           /* a reply may come in parts */
    fx_reply(fr[0], "VALUE k3 0 1\r\nC\r\nEND\r\n");
    fr[0]->items = 2;
    ck_assert_uint_ge(f.c->held_cost, fr[0]->rsp.cap + fr[1]->rsp.cap);
    msg_complete(&f.w, fr[0]);
    fx_assert_output(&f, "VALUE k1 0 1\r\nA\r\nVALUE k2 0 1\r\nB\r\nVALUE k3 0 1\r\nC\r\nEND\r\n");
    ck_assert(queue_empty(&f.c->msgs));
    ck_assert_uint_eq(f.c->held_cost, 0);               /* delivered: nothing held */
    ck_assert_uint_eq(f.w.nfree_msgs, 3);               /* parent and fragments are free */
    ck_assert_int_eq(f.pool.stats.hits, 3);
    fx_free(&f);
}
END_TEST

START_TEST(test_error_in_one_fragment_is_the_reply)
{
    struct fixture f;
    struct msg *fr[2];
    static const uint32_t kf[2] = { 0, 1 };
    fx_init(&f);
    struct msg *p = fx_request(&f, MEMCACHE_CMD_GET);
    fx_fanout(&f, p, "get k1 k2\r\n", 2, kf, 2, fr);
    fr[0]->state = MSG_NEW;                             /* never sent: answered here */
    msg_fail(&f.w, fr[0], PROTO_ERR_SERVER, "connection refused");
    ck_assert_int_eq(fr[0]->state, MSG_DONE);
    fx_reply(fr[1], "VALUE k2 0 1\r\nB\r\nEND\r\n");
    msg_complete(&f.w, fr[1]);
    fx_assert_output(&f, "SERVER_ERROR connection refused\r\n");
    ck_assert_uint_eq(f.w.nfree_msgs, 3);
    fx_free(&f);
}
END_TEST

START_TEST(test_timeout_of_one_fragment_then_its_late_reply)
{
    struct fixture f;
    struct msg *fr[2];
    static const uint32_t kf[2] = { 0, 1 };
    fx_init(&f);
    struct msg *p = fx_request(&f, MEMCACHE_CMD_GET);
    fx_fanout(&f, p, "get k1 k2\r\n", 2, kf, 2, fr);
    msg_fail(&f.w, fr[0], PROTO_ERR_TIMEOUT, "timeout");
    ck_assert_int_eq(fr[0]->state, MSG_ZOMBIE);          /* still owed a reply */
    fx_reply(fr[1], "END\r\n");
    msg_complete(&f.w, fr[1]);
    fx_assert_output(&f, "SERVER_ERROR timeout\r\n");
    ck_assert_uint_eq(f.w.nfree_msgs, 2);               /* the zombie is held by its server */
    fx_reply(fr[0], "VALUE k1 0 1\r\nA\r\nEND\r\n");    /* dropped */
    msg_complete(&f.w, fr[0]);
    ck_assert_uint_eq(f.w.nfree_msgs, 3);
    fx_assert_output(&f, "SERVER_ERROR timeout\r\n");
    fx_free(&f);
}
END_TEST

START_TEST(test_replies_are_delivered_in_request_order)
{
    struct fixture f;
    fx_init(&f);
    struct msg *a = fx_request(&f, MEMCACHE_CMD_GET);
    struct msg *b = fx_request(&f, MEMCACHE_CMD_GET);
    a->state = b->state = MSG_SENT;
    fx_reply(b, "VALUE kb 0 1\r\nb\r\nEND\r\n");
    msg_complete(&f.w, b);
    ck_assert_uint_eq(buf_len(&f.c->conn.obuf), 0);     /* b waits behind a */
    ck_assert_uint_eq(f.c->held_bytes, 22);             /* held in b, counted against the client */
    /* ... at what it costs: b's reply buffer's capacity, not its 22 bytes */
    ck_assert_uint_ge(f.c->held_cost, BUF_STD_SIZE);
    ck_assert_uint_eq(f.c->held_cost, b->rsp.cap + b->req.cap + b->reqcopy.cap);
    ck_assert_uint_ge(client_held_memory(f.c), 2 * sizeof(struct msg) + BUF_STD_SIZE);
    fx_reply(a, "END\r\n");
    msg_complete(&f.w, a);
    fx_assert_output(&f, "END\r\nVALUE kb 0 1\r\nb\r\nEND\r\n");
    ck_assert_uint_eq(f.c->held_bytes, 0);
    ck_assert_uint_eq(f.c->held_cost, 0);
    ck_assert_uint_eq(f.c->nmsgs, 0);
    fx_free(&f);
}
END_TEST

START_TEST(test_async_copies_answer_with_the_first_success)
{
    struct fixture f;
    fx_init(&f);
    struct msg *p = fx_request(&f, MEMCACHE_CMD_SET);
    p->rflags = PROTO_RF_WRITE;
    p->flags |= MSG_F_COPIES | MSG_F_ASYNC;
    p->frags = calloc(2, sizeof(*p->frags));
    p->nfrag = p->nfrag_pending = 2;
    struct msg *cp[2];
    for (int i = 0; i < 2; i++) {
        cp[i] = msg_get(&f.w);
        cp[i]->role = MSG_COPY;
        cp[i]->parent = p;
        cp[i]->cmd = MEMCACHE_CMD_SET;
        cp[i]->state = MSG_SENT;
        p->frags[i] = cp[i];
    }
    fx_reply(cp[1], "STORED\r\n");
    msg_complete(&f.w, cp[1]);
    fx_assert_output(&f, "STORED\r\n");                 /* without waiting for copy 0 */
    ck_assert_ptr_null(cp[0]->parent);                  /* detached: finishes on its own */
    fx_reply(cp[0], "STORED\r\n");
    msg_complete(&f.w, cp[0]);
    ck_assert_uint_eq(f.w.nfree_msgs, 3);
    fx_free(&f);
}
END_TEST

START_TEST(test_client_closed_mid_request_leaves_an_orphan_that_absorbs_the_reply)
{
    struct fixture f;
    fx_init(&f);
    ck_assert_int_eq(conn_init(&f.c->conn, &f.w.loop, 0, NULL, &transport_plain, 4096), 0);
    queue_insert_tail(&f.w.clients, &f.c->link);
    f.pool.refs++;                                      /* the client's */
    atomic_store(&f.shared.clients, 1);
    f.w.curr_connections = 1;
    struct msg *m = fx_request(&f, MEMCACHE_CMD_GET);
    m->state = MSG_SENT;
    struct client *c = f.c;
    f.c = NULL;                                         /* freed by its close callback */
    client_close(c);
    ck_assert_ptr_null(m->client);
    ck_assert_uint_eq(f.w.nfree_msgs, 0);               /* held by its server queue */
    fx_reply(m, "VALUE k 0 1\r\nx\r\nEND\r\n");         /* goes nowhere */
    msg_complete(&f.w, m);
    ck_assert_uint_eq(f.w.nfree_msgs, 1);
    ck_assert_uint_eq(atomic_load(&f.shared.clients), 0);
    fx_free(&f);
    ck_assert_uint_eq(f.pool.refs, 1);                  /* the client let go of its pool */
}
END_TEST

START_TEST(test_resend_moves_a_request_to_another_server_with_its_bytes)
{
    struct fixture f;
    fx_init(&f);
    struct server *a = server_create(&f.w, &f.pool, &f.conf->pools[0].servers[0]);
    struct server *b = server_create(&f.w, &f.pool, &f.conf->pools[0].servers[1]);
    ck_assert(a != NULL && b != NULL);
    struct msg *m = fx_request(&f, MEMCACHE_CMD_GET);
    ck_assert_int_eq(buf_append_str(&m->req, "get k\r\n"), 0);
    ck_assert_int_eq(server_resend(&f.w, m, a, NULL, 0), 0);
    ck_assert_int_eq(m->state, MSG_SENT);
    struct sconn *sa = m->sconn;
    ck_assert_ptr_nonnull(sa);
    ck_assert_ptr_eq(m->server, a);
    ck_assert_int_eq(server_resend(&f.w, m, b, NULL, 0), -1);  /* only a NEW request moves */
    /* the server answered "not mine": take it out of a's queue, send it to b */
    sconn_unqueue(sa, m);
    ck_assert_int_eq(m->state, MSG_NEW);
    ck_assert(queue_empty(&sa->sent));
    ck_assert_int_eq(server_resend(&f.w, m, b, "ASKING\r\n", 8), 0);
    struct sconn *sb = m->sconn;
    ck_assert_ptr_nonnull(sb);
    ck_assert_ptr_ne(sb, sa);
    ck_assert_uint_eq(m->resends, 2);
    ck_assert_uint_eq(sb->inflight, 2);                 /* the prefix's reply is swallowed */
    struct msg *first = QUEUE_DATA(queue_first(&sb->sent), struct msg, sq);
    ck_assert_int_eq(first->role, MSG_DISCARD);
    ck_assert_uint_eq(buf_len(&sb->conn.obuf), 15);
    ck_assert(memcmp(buf_rptr(&sb->conn.obuf), "ASKING\r\nget k\r\n", 15) == 0);
    /* the server goes away: the request is answered with an error, in order */
    server_destroy(a, 1);
    server_destroy(b, 1);
    ck_assert_int_eq(m->state, MSG_DONE);
    ck_assert_uint_eq(buf_len(&f.c->conn.obuf), strlen("SERVER_ERROR server removed\r\n"));
    fx_free(&f);
}
END_TEST

static Suite *msg_suite(void)
{
    Suite *s = suite_create("msg");
    TCase *tc = tcase_create("lifecycle");
    tcase_add_test(tc, test_fanout_merges_in_key_order_whatever_order_fragments_finish);
    tcase_add_test(tc, test_error_in_one_fragment_is_the_reply);
    tcase_add_test(tc, test_timeout_of_one_fragment_then_its_late_reply);
    tcase_add_test(tc, test_replies_are_delivered_in_request_order);
    tcase_add_test(tc, test_async_copies_answer_with_the_first_success);
    tcase_add_test(tc, test_client_closed_mid_request_leaves_an_orphan_that_absorbs_the_reply);
    tcase_add_test(tc, test_resend_moves_a_request_to_another_server_with_its_bytes);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(msg_suite)
