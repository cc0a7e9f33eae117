/* Users on the request path: binding a client to its user (AUTH, address), the command, key and channel checks, rate buckets, namespaces both ways. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "conf/conf.h"
#include "lib/log.h"
#include "lib/util.h"
#include "proto/glob.h"
#include "proto/proto.h"
#include "proxy/client.h"
#include "proxy/msg.h"
#include "proxy/snapshot.h"
#include "proxy/users.h"
#include "proxy/worker.h"
#include "state/user_state.h"

/*
 * A client of a pool that some user names starts as nobody (Redis: the parser answers
 * -NOAUTH until AUTH; memcached: bound at accept by its address). Once bound to a user,
 * its requests pass users_check (one test of c->cu.fl in client.c for everyone else):
 *
 *   parse ─▶ users_check: category ⊆ granted? keys/channels match? ops and bytes in the
 *            bucket? ─▶ refused: the request becomes the protocol's error (never sent)
 *   (namespace: the whole request is rewritten with the prefix first, parsed again)
 *   reply ─▶ users_reply: bytes counted and charged; names filtered, prefix taken off
 */

const struct conf_user *users_of(const struct client *c)
{
    return c->cu.u;
}

/* The configuration of the client's pool (a reload's new one while the worker adopts it). */
static const struct conf *users_conf(const struct client *c)
{
    return c->pool->snap->conf;
}

/* The snapshot's shared record of user u (of users_conf), or NULL. */
static struct user_state *users_state(const struct client *c, const struct conf_user *u)
{
    const struct conf *conf = users_conf(c);
    ptrdiff_t i = u - conf->global.users;
    if (i < 0 || (uint32_t)i >= conf->global.nusers || c->pool->snap->users == NULL)
        return NULL;
    return c->pool->snap->users[i];
}

static void users_set_name(struct client *c, const char *name)
{
    if (c->pc.guard != NULL)
        c->pc.guard(&c->pc, 1);
    snprintf(c->pc.user, sizeof(c->pc.user), "%s", name);
    if (c->pc.guard != NULL)
        c->pc.guard(&c->pc, 0);
}

/* Leave the current user (its connection count). */
static void users_unbind(struct client *c)
{
    if (c->cu.st != NULL)
        atomic_fetch_sub_explicit(&c->cu.st->connections, 1, memory_order_relaxed);
    c->cu.u = NULL;
    c->cu.st = NULL;
    c->cu.fl &= USERS_F_NOBODY;
}

/* Become user u: 0, or -1 over its max_connections (nothing changed). */
static int users_bind(struct client *c, const struct conf_user *u)
{
    struct user_state *st = users_state(c, u);
    if (st == NULL)
        return -1;
    unsigned n = atomic_fetch_add_explicit(&st->connections, 1, memory_order_relaxed) + 1;
    if (u->max_connections != 0 && n > u->max_connections) {
        atomic_fetch_sub_explicit(&st->connections, 1, memory_order_relaxed);
        USER_STATE_ADD(st, connections_refused, 1);
        return -1;
    }
    users_unbind(c);
    c->cu.u = u;
    c->cu.st = st;
    c->cu.fl = USERS_F_CHECK | USERS_F_REPLY | (u->ns_len > 0 ? USERS_F_NS : 0);
    USER_STATE_ADD(st, connections_total, 1);
    users_set_name(c, u->name);
    return 0;
}

/* SHA-256 fetched once (OpenSSL 3 fetches an implicit EVP_sha256() at every digest: a few
 * million instructions each AUTH otherwise); the process's, never freed. */
static _Atomic(EVP_MD *) users_md;
static pthread_once_t users_md_once = PTHREAD_ONCE_INIT;

static void users_md_fetch(void)
{
    atomic_store(&users_md, EVP_MD_fetch(NULL, "SHA256", NULL));
}

static int users_sha_eq(const uint8_t want[32], const char *pass, size_t n)
{
    uint8_t got[32];
    unsigned int len = 0;
    pthread_once(&users_md_once, users_md_fetch);
    EVP_MD *md = atomic_load(&users_md);
    if (EVP_Digest(pass, n, got, &len, md != NULL ? md : EVP_sha256(), NULL) != 1 || len != 32)
        return 0;
    return CRYPTO_memcmp(want, got, 32) == 0;
}

/* The client's address as bytes (4 or 16), or -1 (a unix socket). */
static int users_peer(struct client *c, uint8_t out[16], int *v6)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    if (c->conn.h.handle.type != UV_TCP ||
        uv_tcp_getpeername(&c->conn.h.tcp, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET) {
        memcpy(out, &((struct sockaddr_in *)&ss)->sin_addr, 4);
        *v6 = 0;
        return 0;
    }
    if (ss.ss_family == AF_INET6) {
        const uint8_t *a = (const uint8_t *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
        static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        if (memcmp(a, mapped, 12) == 0) {       /* ::ffff:a.b.c.d is an IPv4 client */
            memcpy(out, a + 12, 4);
            *v6 = 0;
        } else {
            memcpy(out, a, 16);
            *v6 = 1;
        }
        return 0;
    }
    return -1;
}

/* Whether the client's address is in u's clients (a user without clients: any). */
static int users_addr_ok(struct client *c, const struct conf_user *u)
{
    if (u->nclients == 0)
        return 1;
    uint8_t a[16];
    int v6;
    if (users_peer(c, a, &v6) < 0)
        return 0;
    for (uint32_t i = 0; i < u->nclients; i++) {
        const struct conf_cidr *n = &u->clients[i];
        if (n->v6 != v6)
            continue;
        unsigned bits = n->bits, ok = 1;
        for (unsigned b = 0; b < 16 && ok && bits > 0; b++) {
            unsigned keep = bits >= 8 ? 8 : bits;
            uint8_t mask = (uint8_t)(0xffu << (8 - keep));
            ok = (a[b] & mask) == n->addr[b];
            bits -= keep;
        }
        if (ok)
            return 1;
    }
    return 0;
}

/* proto_client.login (Redis AUTH, HELLO AUTH): see proto.h. */
static int users_login(struct proto_client *pc, const char *user, size_t ulen, const char *pass,
                       size_t plen)
{
    struct client *c = CONN_OWNER(pc, struct client, pc);

    if (user == NULL) {                 /* RESET: nobody until AUTH again */
        users_unbind(c);
        c->cu.logged = 0;
        users_set_name(c, "");
        return 1;
    }
    if (pass == NULL) {                 /* the default user, its password checked */
        users_unbind(c);
        c->cu.logged = 1;
        users_set_name(c, "");
        return 1;
    }
    const struct conf_user *u = conf_user_find(users_conf(c), user, ulen);
    if (u == NULL || !u->has_password || !conf_user_has_pool(u, c->pool->cp->name))
        return 0;
    if (!users_sha_eq(u->sha256, pass, plen) || !users_addr_ok(c, u)) {
        struct user_state *st = users_state(c, u);
        if (st != NULL)
            USER_STATE_ADD(st, auth_failures, 1);
        return 0;
    }
    if (c->cu.u == u)
        return 1;                       /* again as itself */
    if (users_bind(c, u) < 0) {
        log_warn("pool '%s': client %s: user '%s' is at its max_connections (%u)",
                 c->pool->cp->name, c->pc.peer, u->name, u->max_connections);
        return -2;
    }
    c->cu.logged = 1;
    return 1;
}

/* memcached: the first user (file order) given this pool whose clients hold the address. */
static void users_match_address(struct client *c)
{
    const struct conf *conf = users_conf(c);
    users_unbind(c);
    users_set_name(c, "");
    c->cu.fl = USERS_F_NOBODY;
    c->cu.nobody = NULL;
    for (uint32_t i = 0; i < conf->global.nusers; i++) {
        const struct conf_user *u = &conf->global.users[i];
        if (!conf_user_has_pool(u, c->pool->cp->name) || !users_addr_ok(c, u))
            continue;
        if (users_bind(c, u) < 0) {
            log_warn("pool '%s': client %s: user '%s' is at its max_connections (%u)",
                     c->pool->cp->name, c->pc.peer, u->name, u->max_connections);
            c->cu.fl = USERS_F_NOBODY;
            c->cu.nobody = "SERVER_ERROR max_connections reached for this client's user\r\n";
            return;
        }
        return;
    }
    c->cu.nobody = "CLIENT_ERROR no user of this pool matches this client's address\r\n";
}

/* memcached has no AUTH: its clients are known by their address. */
static int users_by_address(const struct client *c)
{
    return c->pool->cp->protocol == CONF_PROTO_MEMCACHE;
}

/* Bind (or not) c by the current snapshot: a client of a pool with users. */
static void users_setup(struct client *c)
{
    if (users_by_address(c)) {
        users_match_address(c);
        return;
    }
    c->pc.login = users_login;
    if (!c->cu.logged && c->pool->cp->redis_auth != NULL && c->pc.authed) {
        c->cu.logged = 1;       /* it gave the pool's password: the default user stays */
    } else if (!c->cu.logged) {
        c->pc.authed = 0;       /* nobody (a pool without a password let it in) */
        c->parser.flags &= ~(uint32_t)PROTO_PF_AUTHED;
    }
}

int users_accept(struct client *c)
{
    if (users_conf(c)->global.nusers == 0 || !conf_pool_has_users(users_conf(c), c->pool->cp->name))
        return 0;
    users_setup(c);
    return 0;
}

void users_refresh(struct client *c)
{
    const struct conf *conf = users_conf(c);
    int pooled = conf->global.nusers > 0 && conf_pool_has_users(conf, c->pool->cp->name);

    if (c->cu.u != NULL) {
        /* the same name, if it is still there and still given this pool */
        char name[64];
        snprintf(name, sizeof(name), "%s", c->cu.u->name);
        const struct conf_user *u = pooled ? conf_user_find(conf, name, strlen(name)) : NULL;
        users_unbind(c);
        if (u == NULL || !conf_user_has_pool(u, c->pool->cp->name) || users_bind(c, u) < 0) {
            log_info("pool '%s': client %s closed by the reload: user '%s' is gone",
                     c->pool->cp->name, c->pc.peer, name);
            users_set_name(c, "");
            c->cu.logged = 0;
            c->mops->end(c, PROTO_ERR_LIMIT, "the reload removed this client's user");
            return;
        }
        if (users_by_address(c) && !users_addr_ok(c, u)) {
            users_match_address(c);
            return;
        }
        return;
    }
    c->pc.login = NULL;
    c->cu.fl = 0;
    if (pooled)
        users_setup(c);
    else if (c->cu.logged == 0 && c->pool->cp->redis_auth == NULL) {
        c->pc.authed = 1;           /* the pool's users are gone: as any client of it */
        c->parser.flags |= PROTO_PF_AUTHED;
    }
}

void users_close(struct client *c)
{
    users_unbind(c);
    buf_free(&c->cu.scratch);
}

/* ------------------------------------------------------------------ requests */

#define USERS_SCRATCH_KEEP (64u * 1024)     /* a namespaced client keeps this much room */

static void users_refuse(struct client *c, struct proto_req *req, const char *text, size_t n)
{
    req->kind = PROTO_REQ_ERROR;
    req->err = text;
    req->err_len = (uint32_t)n;
    req->nkeys = 0;
    /* Redis flags a transaction a refused command was queued in (EXEC then aborts) */
    req->sess = (c->parser.flags & PROTO_PF_ATOMIC) ? PROTO_SS_SPOIL : 0;
    req->flags &= (uint16_t)(PROTO_RF_NOREPLY | PROTO_RF_VARIANT);
}

static int users_name_ok(const struct conf_user *u, const char *s, size_t n)
{
    if (u->nkeys == 0)
        return 1;
    for (uint32_t i = 0; i < u->nkeys; i++) {
        uint32_t pl = u->keys_prefix[i];
        if (pl != UINT32_MAX) {         /* "literal*": the common pattern, by memcmp */
            if (n >= pl && memcmp(s, u->keys[i], pl) == 0)
                return 1;
        } else if (glob_match(u->keys[i], u->keys_len[i], s, n)) {
            return 1;
        }
    }
    return 0;
}

int users_key_out(const struct client *c, const char *k, size_t n, const char **name,
                  size_t *len)
{
    const struct conf_user *u = c->cu.u;

    *name = k;
    *len = n;
    if (u == NULL)
        return 1;
    if (!users_name_ok(u, k, n))
        return 0;
    if (u->ns_len > 0) {
        if (n < u->ns_len || memcmp(k, u->ns, u->ns_len) != 0)
            return 0;
        *name = k + u->ns_len;
        *len = n - u->ns_len;
    }
    return 1;
}

/* proto_ns.visible: a name a reply carries (the server's, namespace included). */
static int users_visible(void *arg, const char *name, size_t n)
{
    return users_name_ok(arg, name, n);
}

void users_check(struct client *c, struct proto_req *req, const char *buf)
{
    const struct proto_ops *ops = c->pool->ops;

    if (req->kind == PROTO_REQ_ERROR)
        return;
    if (c->cu.fl & USERS_F_NOBODY) {
        const char *t = c->cu.nobody;
        users_refuse(c, req, t, strlen(t));
        return;
    }
    const struct conf_user *u = c->cu.u;
    struct user_state *st = c->cu.st;
    if (u == NULL)
        return;
    uint32_t cat = ops->category(req->cmd);
    if ((cat & ~u->commands) != 0) {
        char name[64];
        ops->perm_name(req->cmd, name, sizeof(name));
        size_t n = ops->perm_error(PROTO_PERM_CMD, name, c->cu.err, sizeof(c->cu.err));
        USER_STATE_ADD(st, refused_acl, 1);
        users_refuse(c, req, c->cu.err, n);
        return;
    }
    if (u->nkeys > 0 && req->nkeys > 0 && !(req->flags & PROTO_RF_NOKEY) &&
        req->kind != PROTO_REQ_LOCAL && req->kind != PROTO_REQ_BROADCAST &&
        req->kind != PROTO_REQ_INDEXED) {
        for (uint32_t k = 0; k < req->nkeys; k++) {
            char dec[PROTO_KEY_DECODED_MAX];
            size_t kl = req->keys[k].len;
            const char *kb = buf + req->keys[k].off;
            if (req->flags & PROTO_RF_KEYBYTES)
                kb = ops->key_bytes(req, buf, k, dec, &kl);
            if (!users_name_ok(u, kb, kl)) {
                int chan = req->kind == PROTO_REQ_SUBSCRIBE || (req->flags & PROTO_RF_CHANNEL);
                size_t n = ops->perm_error(chan ? PROTO_PERM_CHANNEL : PROTO_PERM_KEY, "",
                                           c->cu.err, sizeof(c->cu.err));
                USER_STATE_ADD(st, refused_acl, 1);
                users_refuse(c, req, c->cu.err, n);
                return;
            }
        }
    }
    uint64_t bytes = (uint64_t)req->hdr_len + req->body_len;
    if (u->rate_ops != 0 || u->rate_bytes != 0) {
        uint64_t now = worker_now_us(c->w) * 1000;
        const char *what = NULL;
        uint64_t limit = 0;
        if (u->rate_ops != 0 &&
            !user_bucket_take(&st->ops, now, u->rate_ops, (uint64_t)u->burst_ms * 1000000u, 1)) {
            what = "ops";
            limit = u->rate_ops;
        } else if (u->rate_bytes != 0 &&
                   !user_bucket_take(&st->bytes, now, u->rate_bytes,
                                     (uint64_t)u->burst_ms * 1000000u, bytes)) {
            what = "bytes";
            limit = u->rate_bytes;
        }
        if (what != NULL) {
            char reason[160];
            snprintf(reason, sizeof(reason), "rate limit: user '%s' is over its %s rate (%" PRIu64
                     " per second)", u->name, what, limit);
            struct buf tmp = { 0 };
            size_t n = 0;
            if (ops->error_reply(PROTO_ERR_LIMIT, reason, &tmp) == 0) {
                n = RL_MIN(buf_len(&tmp), sizeof(c->cu.err));
                memcpy(c->cu.err, buf_rptr(&tmp), n);
            }
            buf_free(&tmp);
            USER_STATE_ADD(st, refused_rate, 1);
            users_refuse(c, req, c->cu.err, n);
            return;
        }
    }
    USER_STATE_ADD(st, requests, 1);
    USER_STATE_ADD(st, bytes_in, bytes);
}

const char *users_namespace(struct client *c, struct proto_req *req, const char *buf)
{
    const struct conf_user *u = c->cu.u;
    const struct proto_ops *ops = c->pool->ops;
    struct proto_ns ns = { .prefix = u->ns, .len = u->ns_len };
    const char *why = NULL;
    struct buf *sb = &c->cu.scratch;

    if (req->kind == PROTO_REQ_ERROR)
        return buf;
    buf_consume(sb, buf_len(sb));
    if (sb->cap > USERS_SCRATCH_KEEP)
        buf_free(sb);           /* a large request's copy is not kept for the next one */
    int rc = ops->ns_request(req, buf, &ns, sb, &why);
    if (rc < 0) {
        const char *t = why != NULL ? why : rc == -ENOMEM ? "-ERR out of memory\r\n"
                                                          : "-ERR request cannot be namespaced\r\n";
        if (why == NULL && rc != -ENOMEM && ops->error_reply != NULL) {
            struct buf tmp = { 0 };
            if (ops->error_reply(PROTO_ERR_LIMIT, "request cannot be namespaced", &tmp) == 0) {
                size_t n = RL_MIN(buf_len(&tmp), sizeof(c->cu.err));
                memcpy(c->cu.err, buf_rptr(&tmp), n);
                buf_free(&tmp);
                USER_STATE_ADD(c->cu.st, refused_acl, 1);
                users_refuse(c, req, c->cu.err, n);
                return buf;
            }
            buf_free(&tmp);
        }
        USER_STATE_ADD(c->cu.st, refused_acl, 1);
        users_refuse(c, req, t, strlen(t));
        return buf;
    }
    /* parse the rewritten bytes again: the same classification, keys at their new places */
    struct proto_req again;
    uint32_t body_min = c->parser.body_min;
    c->parser.body_min = 0;
    int n = ops->parse_req(&c->parser, buf_rptr(sb), buf_len(sb), &again);
    c->parser.body_min = body_min;
    if (n <= 0 || (uint64_t)again.hdr_len + again.body_len != buf_len(sb)) {
        /* a prefixed key over the protocol's bounds (memcached's 250 bytes) */
        if (n > 0 && again.kind == PROTO_REQ_ERROR) {
            *req = again;
            req->body_len = 0;
            return buf_rptr(sb);
        }
        const char *t = n < 0 && again.err_len > 0 ? again.err : NULL;
        if (t != NULL) {
            size_t l = RL_MIN((size_t)again.err_len, sizeof(c->cu.err));
            memcpy(c->cu.err, t, l);
            users_refuse(c, req, c->cu.err, l);
        } else {
            users_refuse(c, req, "CLIENT_ERROR bad command line format\r\n", 38);
        }
        return buf;
    }
    *req = again;
    users_check(c, req, buf_rptr(sb));
    return buf_rptr(sb);
}

/* ------------------------------------------------------------------ replies */

void users_reply(struct client *c, struct msg *m)
{
    const struct conf_user *u = c->cu.u;
    if (u == NULL)
        return;
    size_t len = buf_len(&m->rsp);
    if ((u->ns_len > 0 || u->nkeys > 0) && len > 0 && !(m->flags & (MSG_F_PUSHES | MSG_F_STREAMED)) &&
        c->pool->ops->ns_reply_cmd != NULL && c->pool->ops->ns_reply_cmd(m->cmd)) {
        struct proto_ns ns = { .prefix = u->ns ? u->ns : "", .len = u->ns_len,
                               .visible = u->nkeys > 0 ? users_visible : NULL,
                               .arg = (void *)u };
        struct buf out = { 0 };
        int rc = c->pool->ops->ns_reply(m->cmd, buf_rptr(&m->rsp), len, &ns, &out);
        if (rc == 1) {
            buf_swap(&out, &m->rsp);
            len = buf_len(&m->rsp);
        } else if (rc < 0) {
            log_warn("pool '%s': client %s: a reply to rewrite for user '%s' did not read "
                     "(%d): sent as it came", c->pool->cp->name, c->pc.peer, u->name, rc);
        }
        buf_free(&out);
    }
    USER_STATE_ADD(c->cu.st, bytes_out, len);
    if (u->rate_bytes != 0 && len > 0)
        user_bucket_charge(&c->cu.st->bytes, worker_now_us(c->w) * 1000, u->rate_bytes, len);
}

int users_push(struct client *c, const char *p, size_t n, struct buf *out)
{
    const struct conf_user *u = c->cu.u;
    if (u == NULL || u->ns_len == 0 || c->pool->ops->ns_reply == NULL)
        return 0;
    struct proto_ns ns = { .prefix = u->ns, .len = u->ns_len };
    int rc = c->pool->ops->ns_reply(PROTO_NS_PUSH, p, n, &ns, out);
    return rc < 0 && rc != -ENOMEM ? 0 : rc;
}
