/* Redis commands the proxy answers itself: PING, AUTH, HELLO, SELECT, COMMAND, INFO, TIME, CLIENT ... */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "util.h"

/*
 * Every function here appends one complete RESP2 reply to out and returns
 * 0 or -ENOMEM. Arguments are p->keys[0..argc) as parse_req left them
 * (offsets into buf): local() must run before the parser's next call.
 */

#define NOPASS_MSG "-ERR AUTH <password> called without any password configured for the " \
                   "default user. Are you sure your configuration is correct?\r\n"
#define WRONGPASS  "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
#define HELLO_NOAUTH "-NOAUTH HELLO must be called with the client already authenticated, " \
                   "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to " \
                   "authenticate the client and select the RESP protocol version at the same time\r\n"

struct largs {
    const char *buf;
    const struct proto_key *a;
    uint32_t argc;
};

static int bulk(struct buf *out, const char *s, size_t n)
{
    if (buf_appendf(out, "$%zu\r\n", n) < 0 || buf_append(out, s, n) < 0 ||
        buf_append(out, "\r\n", 2) < 0)
        return -ENOMEM;
    return 0;
}

static int bulk_str(struct buf *out, const char *s)
{
    return bulk(out, s, strlen(s));
}

static int arg_is(const struct largs *l, uint32_t i, const char *upper)
{
    size_t n = strlen(upper);
    if (i >= l->argc || l->a[i].len != n)
        return 0;
    for (size_t j = 0; j < n; j++) {
        unsigned char ch = (unsigned char)l->buf[l->a[i].off + j];
        if (ch >= 'a' && ch <= 'z')
            ch = (unsigned char)(ch - 'a' + 'A');
        if (ch != (unsigned char)upper[j])
            return 0;
    }
    return 1;
}

static int wrong_args(struct buf *out, const char *lname)
{
    return buf_appendf(out, "-ERR wrong number of arguments for '%s' command\r\n", lname);
}

/* Compare without an early exit on the first difference. */
static int secret_eq(const char *want, const char *got, size_t gotlen)
{
    size_t wl = strlen(want);
    unsigned diff = (unsigned)(wl != gotlen);
    for (size_t i = 0; i < gotlen; i++)
        diff |= (unsigned)(unsigned char)got[i] ^ (unsigned)(unsigned char)want[i % (wl ? wl : 1)];
    return diff == 0 && wl == gotlen;
}

/* Check user/password against the pool's password: 1 accepted, 0 refused. */
static int auth_check(const struct proto_client *c, const struct largs *l, int user_i, int pass_i)
{
    if (user_i >= 0 && !(l->a[user_i].len == 7 && memcmp(l->buf + l->a[user_i].off, "default", 7) == 0))
        return 0;               /* only Redis's default user exists behind a proxy */
    if (c->auth == NULL)
        return 1;               /* default user without a password: nopass */
    return secret_eq(c->auth, l->buf + l->a[pass_i].off, l->a[pass_i].len);
}

static void set_authed(struct proto_client *c, struct proto_parser *p)
{
    c->authed = 1;
    p->flags |= PROTO_PF_AUTHED;
}

static int local_auth(struct proto_client *c, struct proto_parser *p, const struct largs *l,
                      struct buf *out)
{
    if (l->argc > 3)
        return buf_append_str(out, "-ERR syntax error\r\n");
    if (l->argc == 2 && c->auth == NULL)
        return buf_append_str(out, NOPASS_MSG);
    int ok = l->argc == 2 ? auth_check(c, l, -1, 1) : auth_check(c, l, 1, 2);
    if (!ok)
        return buf_append_str(out, WRONGPASS);
    set_authed(c, p);
    return buf_append_str(out, "+OK\r\n");
}

/* Client names: printable ASCII without spaces (Redis's rule). */
static int name_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '!' || s[i] > '~')
            return 0;
    return 1;
}

static int set_name(struct proto_client *c, const struct largs *l, uint32_t i, struct buf *out)
{
    const char *s = l->buf + l->a[i].off;
    size_t n = l->a[i].len;
    if (!name_valid(s, n))
        return buf_append_str(out, "-ERR Client names cannot contain spaces, newlines or special "
                              "characters.\r\n") < 0 ? -ENOMEM : 1;
    if (n >= sizeof(c->name))
        return buf_appendf(out, "-ERR Client name is too long: ringleader keeps at most %zu bytes\r\n",
                           sizeof(c->name) - 1) < 0 ? -ENOMEM : 1;
    memcpy(c->name, s, n);
    c->name[n] = '\0';
    return 0;
}

static int local_hello(struct proto_client *c, struct proto_parser *p, const struct largs *l,
                       const struct proto_env *env, struct buf *out)
{
    int64_t ver = 2;
    int32_t auth_at = -1, name_at = -1;

    if (l->argc >= 2) {
        if (util_parse_dec_i64(l->buf + l->a[1].off, l->a[1].len, REDIS_DEC, &ver) < 0)
            return buf_append_str(out, "-ERR Protocol version is not an integer or out of range\r\n");
        if (ver == 3)
            return buf_append_str(out, "-NOPROTO this protocol version is not supported by "
                                  "ringleader (RESP3 is not supported yet)\r\n");
        if (ver != 2)
            return buf_append_str(out, "-NOPROTO unsupported protocol version\r\n");
    }
    for (uint32_t i = 2; i < l->argc; i++) {
        if (arg_is(l, i, "AUTH") && i + 2 < l->argc) {
            auth_at = (int32_t)i + 1;
            i += 2;
        } else if (arg_is(l, i, "SETNAME") && i + 1 < l->argc) {
            name_at = (int32_t)i + 1;
            i += 1;
        } else {
            int n = (int)(l->a[i].len < 128 ? l->a[i].len : 128);
            char opt[129];
            memcpy(opt, l->buf + l->a[i].off, (size_t)n);
            for (int j = 0; j < n; j++)
                if (opt[j] == '\r' || opt[j] == '\n')
                    opt[j] = ' ';
            return buf_appendf(out, "-ERR Syntax error in HELLO option '%.*s'\r\n", n, opt);
        }
    }
    if (auth_at >= 0) {
        if (!auth_check(c, l, auth_at, auth_at + 1))
            return buf_append_str(out, WRONGPASS);
        set_authed(c, p);
    }
    if (!(p->flags & PROTO_PF_AUTHED))
        return buf_append_str(out, HELLO_NOAUTH);
    if (name_at >= 0) {
        int r = set_name(c, l, (uint32_t)name_at, out);
        if (r != 0)
            return r < 0 ? r : 0;
    }
    const char *ver_s = env && env->version ? env->version : "unknown";
    if (buf_append_str(out, "*14\r\n") < 0 || bulk_str(out, "server") < 0 ||
        bulk_str(out, "ringleader") < 0 || bulk_str(out, "version") < 0 ||
        bulk_str(out, ver_s) < 0 || bulk_str(out, "proto") < 0 ||
        buf_append_str(out, ":2\r\n") < 0 || bulk_str(out, "id") < 0 ||
        buf_appendf(out, ":%" PRIu64 "\r\n", c->id) < 0 || bulk_str(out, "mode") < 0 ||
        bulk_str(out, "standalone") < 0 || bulk_str(out, "role") < 0 ||
        bulk_str(out, "master") < 0 || bulk_str(out, "modules") < 0 ||
        buf_append_str(out, "*0\r\n") < 0)
        return -ENOMEM;
    return 0;
}

/* ----------------------------------------------------------- COMMAND */

static int listed(const struct redis_command *c)
{
    return strchr(c->name, '|') == NULL && !(c->flags & (REDIS_CMD_REFUSED | REDIS_CMD_INTERNAL));
}

static int append_lower_bulk(struct buf *out, const char *name)
{
    char low[REDIS_MAX_NAME * 2 + 2];
    size_t i;
    for (i = 0; name[i] != '\0' && i + 1 < sizeof(low); i++)
        low[i] = (name[i] >= 'A' && name[i] <= 'Z') ? (char)(name[i] - 'A' + 'a') : name[i];
    return bulk(out, low, i);
}

/* One entry in Redis 7's COMMAND INFO shape: name, arity, flags, first,
 * last, step, ACL categories, tips, key specs, subcommands. */
static int command_info(const struct redis_command *c, struct buf *out)
{
    const char *fl[6];
    int nf = 0;

    if (c->flags & REDIS_CMD_WRITE)
        fl[nf++] = "write";
    if (c->flags & REDIS_CMD_READ)
        fl[nf++] = "readonly";
    if (c->flags & REDIS_CMD_NOAUTH)
        fl[nf++] = "no_auth";
    if (c->flags & (REDIS_CMD_MOVABLE | REDIS_CMD_STOREOPT))
        fl[nf++] = "movablekeys";
    if (buf_append_str(out, "*10\r\n") < 0 || append_lower_bulk(out, c->name) < 0 ||
        buf_appendf(out, ":%d\r\n*%d\r\n", c->arity, nf) < 0)
        return -ENOMEM;
    for (int i = 0; i < nf; i++)
        if (buf_appendf(out, "+%s\r\n", fl[i]) < 0)
            return -ENOMEM;
    if (buf_appendf(out, ":%d\r\n:%d\r\n:%d\r\n*0\r\n*0\r\n*0\r\n", c->first, c->last, c->step) < 0)
        return -ENOMEM;
    /* Subcommands follow their container in the sorted table. */
    size_t nl = strlen(c->name);
    const struct redis_command *s = c + 1, *end = redis_commands + redis_ncommands;
    uint32_t nsub = 0;
    for (const struct redis_command *x = s; x < end && strncmp(x->name, c->name, nl) == 0; x++)
        if (x->name[nl] == '|' && !(x->flags & (REDIS_CMD_REFUSED | REDIS_CMD_INTERNAL)))
            nsub++;
    if (buf_appendf(out, "*%" PRIu32 "\r\n", nsub) < 0)
        return -ENOMEM;
    for (const struct redis_command *x = s; x < end && strncmp(x->name, c->name, nl) == 0; x++)
        if (x->name[nl] == '|' && !(x->flags & (REDIS_CMD_REFUSED | REDIS_CMD_INTERNAL)))
            if (command_info(x, out) < 0)
                return -ENOMEM;
    return 0;
}

static const char *routing_summary(const struct redis_command *c)
{
    if (c->flags & REDIS_CMD_LOCAL)
        return "answered by ringleader";
    if (c->flags & REDIS_CMD_FANOUT)
        return "keys split per server, replies merged by ringleader";
    if (c->flags & (REDIS_CMD_BROADCAST | REDIS_CMD_FLUSH))
        return "sent to every server of the pool, replies merged by ringleader";
    if (c->flags & REDIS_CMD_SAME)
        return "all keys must hash to the same server";
    return "routed by its key";
}

/* Look a name up as COMMAND INFO does ("object|encoding" for a subcommand). */
static const struct redis_command *command_named(const struct largs *l, uint32_t i)
{
    const struct redis_command *c = redis_command_lookup(l->buf + l->a[i].off, l->a[i].len);
    if (c == NULL || (c->flags & (REDIS_CMD_REFUSED | REDIS_CMD_INTERNAL)))
        return NULL;
    return c;
}

static int local_command(int what, struct proto_parser *p, const struct largs *l, struct buf *out)
{
    switch (what) {
    case REDIS_LOCAL_COMMAND_COUNT:
        return buf_appendf(out, ":%zu\r\n", redis_command_listed());
    case REDIS_LOCAL_COMMAND_LIST:
        if (l->argc > 2)
            return buf_append_str(out, "-ERR COMMAND LIST FILTERBY is not supported by ringleader\r\n");
        if (buf_appendf(out, "*%zu\r\n", redis_command_listed()) < 0)
            return -ENOMEM;
        for (size_t i = 0; i < redis_ncommands; i++)
            if (listed(&redis_commands[i]) && append_lower_bulk(out, redis_commands[i].name) < 0)
                return -ENOMEM;
        return 0;
    case REDIS_LOCAL_COMMAND:
    case REDIS_LOCAL_COMMAND_INFO:
        if (what == REDIS_LOCAL_COMMAND || l->argc == 2) {
            if (buf_appendf(out, "*%zu\r\n", redis_command_listed()) < 0)
                return -ENOMEM;
            for (size_t i = 0; i < redis_ncommands; i++)
                if (listed(&redis_commands[i]) && command_info(&redis_commands[i], out) < 0)
                    return -ENOMEM;
            return 0;
        }
        if (buf_appendf(out, "*%" PRIu32 "\r\n", l->argc - 2) < 0)
            return -ENOMEM;
        for (uint32_t i = 2; i < l->argc; i++) {
            const struct redis_command *c = command_named(l, i);
            int r = c ? command_info(c, out) : buf_append_str(out, "$-1\r\n");
            if (r < 0)
                return -ENOMEM;
        }
        return 0;
    case REDIS_LOCAL_COMMAND_DOCS: {
        /* A map (flattened) of name -> ["summary", how ringleader routes it]. */
        uint32_t n = 0;
        if (l->argc == 2)
            n = (uint32_t)redis_command_listed();
        else
            for (uint32_t i = 2; i < l->argc; i++)
                n += command_named(l, i) != NULL;
        if (buf_appendf(out, "*%" PRIu32 "\r\n", n * 2) < 0)
            return -ENOMEM;
        for (size_t i = 0; l->argc == 2 && i < redis_ncommands; i++)
            if (listed(&redis_commands[i]) &&
                (append_lower_bulk(out, redis_commands[i].name) < 0 ||
                 buf_append_str(out, "*2\r\n$7\r\nsummary\r\n") < 0 ||
                 bulk_str(out, routing_summary(&redis_commands[i])) < 0))
                return -ENOMEM;
        for (uint32_t i = 2; i < l->argc; i++) {
            const struct redis_command *c = command_named(l, i);
            if (c != NULL && (append_lower_bulk(out, c->name) < 0 ||
                              buf_append_str(out, "*2\r\n$7\r\nsummary\r\n") < 0 ||
                              bulk_str(out, routing_summary(c)) < 0))
                return -ENOMEM;
        }
        return 0;
    }
    case REDIS_LOCAL_COMMAND_GETKEYS: {
        /* The keys ringleader routes by, from the same table and code as
         * parse_req: COMMAND GETKEYS <command> <args...>. */
        const struct proto_key *a = l->a + 2;
        uint32_t argc = l->argc - 2;
        const struct redis_command *c = redis_command_lookup(l->buf + a[0].off, a[0].len);
        if (c != NULL && (c->flags & REDIS_CMD_CONTAINER) && argc >= 2) {
            char name[REDIS_MAX_NAME * 2 + 2];
            int n = snprintf(name, sizeof(name), "%s|", c->name);
            if (a[1].len < REDIS_MAX_NAME && n > 0) {
                for (uint32_t j = 0; j < a[1].len; j++) {
                    char ch = l->buf[a[1].off + j];
                    name[n + (int)j] = (ch >= 'a' && ch <= 'z') ? (char)(ch - 'a' + 'A') : ch;
                }
                name[n + (int)a[1].len] = '\0';
                c = redis_command_find(name);
            } else {
                c = NULL;
            }
        }
        if (c == NULL)
            return buf_append_str(out, "-ERR Invalid command specified\r\n");
        if ((c->arity > 0 && argc != (uint32_t)c->arity) ||
            (c->arity < 0 && argc < (uint32_t)-c->arity))
            return buf_append_str(out, "-ERR Invalid number of arguments specified for command\r\n");
        if (c->flags & (REDIS_CMD_LOCAL | REDIS_CMD_BROADCAST | REDIS_CMD_REFUSED | REDIS_CMD_FLUSH))
            return buf_append_str(out, "-ERR The command has no key arguments\r\n");
        const char *err = NULL;
        int nokey;
        /* Keys are compacted over the arguments, which are no longer needed. */
        int n = redis__keys_extract(c, a, argc, l->buf, p->keys, &nokey, &err);
        if (n == -1)
            return buf_append_str(out, err);
        if (n == -3)
            return buf_append_str(out, "-ERR at least 1 input key is needed\r\n");
        if (n <= 0)
            return buf_append_str(out, "-ERR Invalid arguments specified for command\r\n");
        if (buf_appendf(out, "*%d\r\n", n) < 0)
            return -ENOMEM;
        for (int i = 0; i < n; i++)
            if (bulk(out, l->buf + p->keys[i].off, p->keys[i].len) < 0)
                return -ENOMEM;
        return 0;
    }
    }
    return buf_append_str(out, "-ERR unknown COMMAND subcommand\r\n");
}

/* -------------------------------------------------------- INFO, CLIENT */

static int client_line(const struct proto_client *c, const struct proto_env *env, struct buf *s)
{
    uint64_t now_ms = env ? env->now_us / 1000 : 0;
    uint64_t age = now_ms >= c->created_ms ? (now_ms - c->created_ms) / 1000 : 0;
    return buf_appendf(s, "id=%" PRIu64 " addr=%s name=%s age=%" PRIu64 " db=%d resp=2\n",
                       c->id, c->peer, c->name, age, c->db);
}

static int local_client(int what, struct proto_client *c, const struct largs *l,
                        const struct proto_env *env, struct buf *out)
{
    struct buf s;
    int r;

    switch (what) {
    case REDIS_LOCAL_CLIENT_SETNAME:
        r = set_name(c, l, 2, out);
        if (r != 0)
            return r < 0 ? r : 0;
        return buf_append_str(out, "+OK\r\n");
    case REDIS_LOCAL_CLIENT_GETNAME:
        if (c->name[0] == '\0')
            return buf_append_str(out, "$-1\r\n");
        return bulk_str(out, c->name);
    case REDIS_LOCAL_CLIENT_ID:
        return buf_appendf(out, ":%" PRIu64 "\r\n", c->id);
    default:                    /* CLIENT INFO, CLIENT LIST: this client only */
        buf_init(&s);
        r = client_line(c, env, &s);
        if (r == 0)
            r = bulk(out, buf_rptr(&s), buf_len(&s));
        buf_free(&s);
        return r;
    }
}

static int info_wants(const struct largs *l, const char *section, int in_default)
{
    if (l->argc == 1)
        return in_default;
    for (uint32_t i = 1; i < l->argc; i++) {
        if (arg_is(l, i, section) || arg_is(l, i, "ALL") || arg_is(l, i, "EVERYTHING"))
            return 1;
        if (in_default && arg_is(l, i, "DEFAULT"))
            return 1;
    }
    return 0;
}

static int local_info(const struct largs *l, const struct proto_env *env, struct buf *out)
{
    struct buf s;
    int r = -ENOMEM;

    buf_init(&s);
    if (info_wants(l, "SERVER", 1) &&
        buf_appendf(&s, "# Server\r\nringleader_version:%s\r\nredis_mode:proxy\r\n"
                    "pool:%s\r\nservers:%" PRIu32 "\r\nuptime_in_seconds:%" PRIu64 "\r\n"
                    "uptime_in_days:%" PRIu64 "\r\n\r\n",
                    env && env->version ? env->version : "unknown",
                    env && env->pool_name ? env->pool_name : "",
                    env ? env->nservers : 0, env ? env->uptime_s : 0,
                    env ? env->uptime_s / 86400 : 0) < 0)
        goto out;
    if (info_wants(l, "CLIENTS", 1) &&
        buf_appendf(&s, "# Clients\r\nconnected_clients:%" PRIu64 "\r\n\r\n",
                    env ? env->curr_connections : 0) < 0)
        goto out;
    if (info_wants(l, "STATS", 1)) {
        if (buf_appendf(&s, "# Stats\r\ntotal_connections_received:%" PRIu64 "\r\n",
                        env ? env->total_connections : 0) < 0)
            goto out;
        if (env && env->render_stats)
            env->render_stats(env->ctx, 1, &s);
        if (buf_append_str(&s, "\r\n") < 0)
            goto out;
    }
    /* Sections end with a blank line, except the last (as Redis). */
    size_t n = buf_len(&s);
    if (n >= 2)
        n -= 2;
    /* INFO <unknown section> renders nothing: s was never allocated, and
     * buf_rptr() of it would be NULL + 0. */
    r = bulk(out, n ? buf_rptr(&s) : "", n);
out:
    buf_free(&s);
    return r;
}

/* ----------------------------------------------------------------- local */

int redis__local(struct proto_client *c, struct proto_parser *p, const struct proto_req *req,
                 const char *buf, const struct proto_env *env, struct buf *out)
{
    struct largs l = { req->u.redis.inl ? req->u.redis.inl : buf, p->keys, req->u.redis.argc };
    const struct redis_command *cmd;
    int64_t v;

    if (req->cmd >= redis_ncommands || l.argc == 0)
        return buf_append_str(out, "-ERR internal error: not a local command\r\n");
    cmd = &redis_commands[req->cmd];
    switch (cmd->local) {
    case REDIS_LOCAL_PING:
        if (l.argc > 2)
            return wrong_args(out, "ping");
        if (l.argc == 2)
            return bulk(out, l.buf + l.a[1].off, l.a[1].len);
        return buf_append_str(out, "+PONG\r\n");
    case REDIS_LOCAL_ECHO:
        return bulk(out, l.buf + l.a[1].off, l.a[1].len);
    case REDIS_LOCAL_QUIT:
        return buf_append_str(out, "+OK\r\n") < 0 ? -ENOMEM : PROTO_LOCAL_CLOSE;
    case REDIS_LOCAL_SELECT:
        if (util_parse_dec_i64(l.buf + l.a[1].off, l.a[1].len, REDIS_DEC, &v) < 0 || v < INT32_MIN || v > INT32_MAX)
            return buf_append_str(out, "-ERR value is not an integer or out of range\r\n");
        if (v == c->db)
            return buf_append_str(out, "+OK\r\n");
        return buf_appendf(out, "-ERR SELECT is not allowed: this pool uses database %d\r\n", c->db);
    case REDIS_LOCAL_AUTH:
        return local_auth(c, p, &l, out);
    case REDIS_LOCAL_HELLO:
        return local_hello(c, p, &l, env, out);
    case REDIS_LOCAL_RESET:
        c->name[0] = '\0';
        if (c->auth != NULL) {
            c->authed = 0;
            p->flags &= ~(uint32_t)PROTO_PF_AUTHED;
        }
        return buf_append_str(out, "+RESET\r\n");
    case REDIS_LOCAL_COMMAND:
    case REDIS_LOCAL_COMMAND_COUNT:
    case REDIS_LOCAL_COMMAND_INFO:
    case REDIS_LOCAL_COMMAND_DOCS:
    case REDIS_LOCAL_COMMAND_LIST:
    case REDIS_LOCAL_COMMAND_GETKEYS:
        return local_command(cmd->local, p, &l, out);
    case REDIS_LOCAL_INFO:
        return local_info(&l, env, out);
    case REDIS_LOCAL_TIME: {
        uint64_t now = env ? env->now_us : 0;
        char sec[24], usec[8];
        int a = snprintf(sec, sizeof(sec), "%" PRIu64, now / 1000000);
        int b = snprintf(usec, sizeof(usec), "%" PRIu64, now % 1000000);
        if (buf_append_str(out, "*2\r\n") < 0 || bulk(out, sec, (size_t)a) < 0 ||
            bulk(out, usec, (size_t)b) < 0)
            return -ENOMEM;
        return 0;
    }
    case REDIS_LOCAL_CLIENT_SETNAME:
    case REDIS_LOCAL_CLIENT_GETNAME:
    case REDIS_LOCAL_CLIENT_ID:
    case REDIS_LOCAL_CLIENT_INFO:
    case REDIS_LOCAL_CLIENT_LIST:
        return local_client(cmd->local, c, &l, env, out);
    }
    return buf_append_str(out, "-ERR internal error: not a local command\r\n");
}
