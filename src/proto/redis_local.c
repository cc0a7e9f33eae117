/* Redis commands the proxy answers itself: PING, AUTH, HELLO, SELECT, COMMAND, INFO, TIME, CLIENT ..., in RESP2 or RESP3. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "proto/proto.h"
#include "proto/redis.h"
#include "lib/util.h"

/*
 * Every function here appends one complete reply to out, in the client's protocol (RESP3
 * after HELLO 3: PROTO_PF_VARIANT), and returns
 * 0 or -ENOMEM. Arguments are p->keys[0..argc) as parse_req left them
 * (offsets into buf): local() must run before the parser's next call.
 */

#define NOPASS_MSG "-ERR AUTH <password> called without any password configured for the " \
                   "default user. Are you sure your configuration is correct?\r\n"
#define WRONGPASS  "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
#define MAXCLIENTS "-ERR max number of clients reached\r\n"   /* a user's max_connections */
#define HELLO_NOAUTH "-NOAUTH HELLO must be called with the client already authenticated, " \
                   "otherwise the HELLO AUTH <user> <pass> option can be used to " \
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
    return i < l->argc && redis__word_is(l->buf + l->a[i].off, l->a[i].len, upper);
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

/* Check user/password against the pool's password, or the pool's users (c->login): 1
 * accepted (c->user says who), 0 refused. */
static int auth_check(struct proto_client *c, const struct largs *l, int user_i, int pass_i)
{
    int is_default = user_i < 0 ||
                     (l->a[user_i].len == 7 && memcmp(l->buf + l->a[user_i].off, "default", 7) == 0);
    if (!is_default)            /* a user of the configuration, or none (-2: at its
                                 * max_connections) */
        return c->login == NULL ? 0 : c->login(c, l->buf + l->a[user_i].off, l->a[user_i].len,
                                               l->buf + l->a[pass_i].off, l->a[pass_i].len);
    int ok;
    if (c->auth == NULL)
        ok = c->login == NULL;  /* default user without a password: nopass (not beside users) */
    else
        ok = secret_eq(c->auth, l->buf + l->a[pass_i].off, l->a[pass_i].len);
    if (ok && c->login != NULL)
        c->login(c, "default", 7, NULL, 0);
    return ok;
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
    if (ok == -2)
        return buf_append_str(out, MAXCLIENTS);
    if (ok != 1)
        return buf_append_str(out, WRONGPASS);
    set_authed(c, p);
    return buf_append_str(out, "+OK\r\n");
}

/* What other threads read of c (CLIENT LIST over every worker) changes between these. */
static void client_guard(struct proto_client *c, int locked)
{
    if (c->guard != NULL)
        c->guard(c, locked);
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
    client_guard(c, 1);
    memcpy(c->name, s, n);
    c->name[n] = '\0';
    client_guard(c, 0);
    return 0;
}

/* RESP3's null, map and set headers, or RESP2's null bulk and arrays (a map flattened). */
static int null_reply(struct buf *out, int v3)
{
    return buf_append_str(out, v3 ? "_\r\n" : "$-1\r\n");
}

static int map_len(struct buf *out, int v3, uint64_t pairs)
{
    return v3 ? buf_appendf(out, "%%%" PRIu64 "\r\n", pairs) : buf_appendf(out, "*%" PRIu64 "\r\n", pairs * 2);
}

static int set_len(struct buf *out, int v3, uint64_t n)
{
    return buf_appendf(out, v3 ? "~%" PRIu64 "\r\n" : "*%" PRIu64 "\r\n", n);
}

/*
 * HELLO [protover [AUTH user pass] [SETNAME name]], as Redis 7.0.15 reads it: the version
 * first (2 or 3), options in order (a SETNAME takes effect even when a later check fails),
 * then authentication; the client's protocol changes only on success (PROTO_PF_VARIANT,
 * which every later request carries) and the reply is in the new protocol.
 */
static int local_hello(struct proto_client *c, struct proto_parser *p, const struct largs *l,
                       const struct proto_env *env, struct buf *out)
{
    int64_t ver = 0;

    if (l->argc >= 2) {
        if (util_parse_dec_i64(l->buf + l->a[1].off, l->a[1].len, REDIS_DEC, &ver) < 0)
            return buf_append_str(out, "-ERR Protocol version is not an integer or out of range\r\n");
        if (ver < 2 || ver > 3)
            return buf_append_str(out, "-NOPROTO unsupported protocol version\r\n");
    }
    for (uint32_t i = 2; i < l->argc; i++) {
        if (arg_is(l, i, "AUTH") && i + 2 < l->argc) {
            int ok = auth_check(c, l, (int)i + 1, (int)i + 2);
            if (ok == -2)
                return buf_append_str(out, MAXCLIENTS);
            if (ok != 1)
                return buf_append_str(out, WRONGPASS);
            set_authed(c, p);
            i += 2;
        } else if (arg_is(l, i, "SETNAME") && i + 1 < l->argc) {
            int r = set_name(c, l, i + 1, out);
            if (r != 0)
                return r < 0 ? r : 0;
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
    if (!(p->flags & PROTO_PF_AUTHED))
        return buf_append_str(out, HELLO_NOAUTH);
    if (ver == 3)
        p->flags |= PROTO_PF_VARIANT;
    else if (ver == 2)
        p->flags &= ~(uint32_t)PROTO_PF_VARIANT;
    int v3 = (p->flags & PROTO_PF_VARIANT) != 0;
    const char *ver_s = env && env->version ? env->version : "unknown";
    if (map_len(out, v3, 7) < 0 || bulk_str(out, "server") < 0 ||
        bulk_str(out, "ringleader") < 0 || bulk_str(out, "version") < 0 ||
        bulk_str(out, ver_s) < 0 || bulk_str(out, "proto") < 0 ||
        buf_appendf(out, ":%d\r\n", v3 ? 3 : 2) < 0 || bulk_str(out, "id") < 0 ||
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
static int command_info(const struct redis_command *c, int v3, struct buf *out)
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
    /* RESP3: flags, ACL categories and tips are sets, as Redis sends them */
    if (buf_append_str(out, "*10\r\n") < 0 || append_lower_bulk(out, c->name) < 0 ||
        buf_appendf(out, ":%d\r\n", c->arity) < 0 || set_len(out, v3, (uint64_t)nf) < 0)
        return -ENOMEM;
    for (int i = 0; i < nf; i++)
        if (buf_appendf(out, "+%s\r\n", fl[i]) < 0)
            return -ENOMEM;
    if (buf_appendf(out, ":%d\r\n:%d\r\n:%d\r\n", c->first, c->last, c->step) < 0 ||
        set_len(out, v3, 0) < 0 || set_len(out, v3, 0) < 0 || buf_append_str(out, "*0\r\n") < 0)
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
            if (command_info(x, v3, out) < 0)
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
    int v3 = (p->flags & PROTO_PF_VARIANT) != 0;

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
                if (listed(&redis_commands[i]) && command_info(&redis_commands[i], v3, out) < 0)
                    return -ENOMEM;
            return 0;
        }
        if (buf_appendf(out, "*%" PRIu32 "\r\n", l->argc - 2) < 0)
            return -ENOMEM;
        for (uint32_t i = 2; i < l->argc; i++) {
            const struct redis_command *c = command_named(l, i);
            int r = c ? command_info(c, v3, out) : null_reply(out, v3);
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
        if (map_len(out, v3, n) < 0)
            return -ENOMEM;
        for (size_t i = 0; l->argc == 2 && i < redis_ncommands; i++)
            if (listed(&redis_commands[i]) &&
                (append_lower_bulk(out, redis_commands[i].name) < 0 || map_len(out, v3, 1) < 0 ||
                 buf_append_str(out, "$7\r\nsummary\r\n") < 0 ||
                 bulk_str(out, routing_summary(&redis_commands[i])) < 0))
                return -ENOMEM;
        for (uint32_t i = 2; i < l->argc; i++) {
            const struct redis_command *c = command_named(l, i);
            if (c != NULL && (append_lower_bulk(out, c->name) < 0 || map_len(out, v3, 1) < 0 ||
                              buf_append_str(out, "$7\r\nsummary\r\n") < 0 ||
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

/* The name of command id `cmd` as CLIENT LIST's cmd= shows it: lower case, "client|list". */
static void client_cmd_name(uint32_t cmd, char *out, size_t len)
{
    size_t i = 0;
    if (cmd < redis_ncommands) {
        const char *n = redis_commands[cmd].name;
        for (; n[i] != '\0' && i + 1 < len; i++)
            out[i] = (n[i] >= 'A' && n[i] <= 'Z') ? (char)(n[i] - 'A' + 'a') : n[i];
    } else {
        for (; "NULL"[i] != '\0' && i + 1 < len; i++)
            out[i] = "NULL"[i];
    }
    out[i] = '\0';
}

/*
 * One CLIENT LIST line, with every field Redis 7.0 prints, in its order (Redis 7.2's
 * lib-name and lib-ver after them, as 7.2 prints them). docs/redis.md says which values
 * are the proxy's own and which are approximations.
 */
static int client_line(const struct proto_client_row *r, struct buf *s)
{
    char flags[12], cmd[REDIS_MAX_NAME * 2 + 2];
    int nf = 0;

    if (r->flags & PROTO_CL_BLOCKED)
        flags[nf++] = 'b';
    if (r->flags & PROTO_CL_SUBSCRIBED)
        flags[nf++] = 'P';
    if (r->flags & PROTO_CL_MULTI)
        flags[nf++] = 'x';
    if (r->flags & PROTO_CL_TRACKING)
        flags[nf++] = 't';
    if (r->flags & PROTO_CL_TRK_BROKEN)
        flags[nf++] = 'R';
    if (r->flags & PROTO_CL_TRK_BCAST)
        flags[nf++] = 'B';
    if (r->flags & PROTO_CL_CLOSING)
        flags[nf++] = 'A';
    if (nf == 0)
        flags[nf++] = 'N';
    flags[nf] = '\0';
    client_cmd_name(r->cmd, cmd, sizeof(cmd));
    const char *events = (r->flags & PROTO_CL_PAUSED) ? (r->obl ? "w" : "") : (r->obl ? "rw" : "r");
    return buf_appendf(s, "id=%" PRIu64 " addr=%s laddr=%s fd=%d name=%s age=%" PRIu64
                       " idle=%" PRIu64 " flags=%s db=%d sub=%" PRIu32 " psub=%" PRIu32
                       " ssub=%" PRIu32 " multi=%d qbuf=%" PRIu64 " qbuf-free=%" PRIu64
                       " argv-mem=0 multi-mem=0 rbs=%" PRIu64 " rbp=%" PRIu64 " obl=%" PRIu64
                       " oll=%" PRIu64 " omem=%" PRIu64 " tot-mem=%" PRIu64 " events=%s cmd=%s"
                       " user=%s redir=%" PRId64 " resp=%d lib-name=%s lib-ver=%s%s%s\n",
                       r->id, r->addr, r->laddr, r->fd, r->name, r->age_s, r->idle_s, flags, r->db,
                       r->sub, r->psub, r->ssub, r->multi, r->qbuf, r->qbuf_free, r->rbs, r->rbp,
                       r->obl, r->oll, r->omem, r->tot_mem, events, cmd,
                       r->user && r->user[0] ? r->user : "default", r->redir,
                       (r->flags & PROTO_CL_VARIANT) ? 3 : 2, r->lib_name, r->lib_ver,
                       r->pool ? " pool=" : "", r->pool ? r->pool : "");
}

/* The asking client alone, when the core offers no walk (a unit test's env). */
static void client_row_self(const struct proto_client *c, const struct proto_env *env, int v3,
                            struct proto_client_row *r)
{
    uint64_t now_ms = env ? env->now_us / 1000 : 0;
    memset(r, 0, sizeof(*r));
    r->id = c->id;
    r->addr = c->peer;
    r->laddr = c->peer;
    r->name = c->name;
    r->lib_name = c->lib_name;
    r->lib_ver = c->lib_ver;
    r->user = c->user;
    r->fd = -1;
    r->db = c->db;
    r->multi = -1;
    r->cmd = UINT32_MAX;
    r->redir = -1;
    r->flags = PROTO_CL_SELF | (v3 ? PROTO_CL_VARIANT : 0);
    r->age_s = now_ms >= c->created_ms ? (now_ms - c->created_ms) / 1000 : 0;
}

/*
 * What CLIENT LIST / INFO / KILL ask of each client (Redis 7.0's filters). type: -1 any,
 * else CL_TYPE_*; ids: a list of ids (CLIENT LIST ID) or NULL; addr, laddr: exact text;
 * skipme: the asking client never matches.
 */
enum { CL_TYPE_NORMAL, CL_TYPE_REPLICA, CL_TYPE_PUBSUB, CL_TYPE_MASTER };

struct client_query {
    int            type;
    const struct largs *l;
    uint32_t       ids_from;    /* CLIENT LIST ID: arguments [ids_from, argc) are ids */
    int64_t        id;          /* CLIENT KILL ID: 0 none */
    const char    *addr, *laddr;
    size_t         addr_len, laddr_len;
    int            skipme;
    int            self_only;   /* CLIENT INFO */
    struct buf    *out;         /* the lines, or NULL (a kill) */
};

static int text_is(const char *s, const char *want, size_t len)
{
    return strlen(s) == len && memcmp(s, want, len) == 0;
}

static int client_visit(void *arg, const struct proto_client_row *r)
{
    struct client_query *q = arg;
    int self = (r->flags & PROTO_CL_SELF) != 0;

    if ((q->self_only && !self) || (q->skipme && self))
        return 0;
    if (q->type >= 0) {
        int t = (r->flags & PROTO_CL_SUBSCRIBED) ? CL_TYPE_PUBSUB : CL_TYPE_NORMAL;
        if (t != q->type)
            return 0;
    }
    if (q->id > 0 && r->id != (uint64_t)q->id)
        return 0;
    if (q->addr != NULL && !text_is(r->addr, q->addr, q->addr_len))
        return 0;
    if (q->laddr != NULL && !text_is(r->laddr, q->laddr, q->laddr_len))
        return 0;
    if (q->ids_from > 0) {
        int found = 0;
        for (uint32_t i = q->ids_from; i < q->l->argc && !found; i++) {
            int64_t id;
            found = util_parse_dec_i64(q->l->buf + q->l->a[i].off, q->l->a[i].len, REDIS_DEC,
                                       &id) == 0 && (uint64_t)id == r->id;
        }
        if (!found)
            return 0;
    }
    if (q->out != NULL && client_line(r, q->out) < 0)
        return -ENOMEM;
    return 1;
}

/* Redis's client type names (getClientTypeByName); -1 for another. */
static int client_type_named(const struct largs *l, uint32_t i)
{
    if (arg_is(l, i, "NORMAL"))
        return CL_TYPE_NORMAL;
    if (arg_is(l, i, "SLAVE") || arg_is(l, i, "REPLICA"))
        return CL_TYPE_REPLICA;
    if (arg_is(l, i, "PUBSUB"))
        return CL_TYPE_PUBSUB;
    if (arg_is(l, i, "MASTER"))
        return CL_TYPE_MASTER;
    return -1;
}

static int client_bad_type(const struct largs *l, uint32_t i, struct buf *out)
{
    int n = (int)(l->a[i].len < 64 ? l->a[i].len : 64);
    char t[65];
    memcpy(t, l->buf + l->a[i].off, (size_t)n);
    for (int j = 0; j < n; j++)
        if (t[j] == '\r' || t[j] == '\n')
            t[j] = ' ';
    return buf_appendf(out, "-ERR Unknown client type '%.*s'\r\n", n, t);
}

/* Run q over the clients: the core's walk over every worker, or the asking client alone. */
static int client_walk(struct proto_client *c, const struct proto_env *env, int v3, int kill,
                       struct client_query *q)
{
    if (env != NULL && env->clients != NULL)
        return env->clients(env->ctx, kill, client_visit, q);
    struct proto_client_row r;
    client_row_self(c, env, v3, &r);
    return kill ? 0 : client_visit(q, &r);   /* nothing to kill without the core */
}

/* CLIENT LIST [TYPE type] [ID id ...] and CLIENT INFO: Redis 7.0's syntax and errors. */
static int client_list(int info, struct proto_client *c, const struct largs *l,
                       const struct proto_env *env, int v3, struct buf *out)
{
    struct client_query q = { .type = -1, .l = l, .self_only = info };
    struct buf s;
    int r;

    if (!info && l->argc == 4 && arg_is(l, 2, "TYPE")) {
        if ((q.type = client_type_named(l, 3)) < 0)
            return client_bad_type(l, 3, out);
    } else if (!info && l->argc > 3 && arg_is(l, 2, "ID")) {
        for (uint32_t i = 3; i < l->argc; i++) {
            int64_t id;
            if (util_parse_dec_i64(l->buf + l->a[i].off, l->a[i].len, REDIS_DEC, &id) < 0)
                return buf_append_str(out, "-ERR Invalid client ID\r\n");
        }
        q.ids_from = 3;
    } else if (!info && l->argc != 2) {
        return buf_append_str(out, "-ERR syntax error\r\n");
    }
    buf_init(&s);
    q.out = &s;
    r = client_walk(c, env, v3, 0, &q);
    if (r >= 0)
        r = redis__append_text(out, v3, buf_len(&s) ? buf_rptr(&s) : "", buf_len(&s));
    buf_free(&s);
    return r < 0 ? -ENOMEM : 0;
}

/*
 * CLIENT KILL addr:port (the old form: +OK, or "No such client") and CLIENT KILL
 * <filter value> ... (ID, TYPE, USER, ADDR, LADDR, SKIPME; the number killed), as Redis
 * 7.0 reads them, over the proxy's own clients of this pool.
 */
static int client_kill(struct proto_client *c, const struct largs *l, const struct proto_env *env,
                       int v3, struct buf *out)
{
    struct client_query q = { .type = -1, .l = l, .skipme = 1 };
    int old = l->argc == 3;

    if (old) {
        q.addr = l->buf + l->a[2].off;
        q.addr_len = l->a[2].len;
        q.skipme = 0;
    } else {
        for (uint32_t i = 2; i < l->argc; i += 2) {
            if (i + 1 >= l->argc)
                return buf_append_str(out, "-ERR syntax error\r\n");
            const char *v = l->buf + l->a[i + 1].off;
            size_t vl = l->a[i + 1].len;
            if (arg_is(l, i, "ID")) {
                if (util_parse_dec_i64(v, vl, REDIS_DEC, &q.id) < 0 || q.id < 1)
                    return buf_append_str(out, "-ERR client-id should be greater than 0\r\n");
            } else if (arg_is(l, i, "TYPE")) {
                if ((q.type = client_type_named(l, i + 1)) < 0)
                    return client_bad_type(l, i + 1, out);
            } else if (arg_is(l, i, "ADDR")) {
                q.addr = v;
                q.addr_len = vl;
            } else if (arg_is(l, i, "LADDR")) {
                q.laddr = v;
                q.laddr_len = vl;
            } else if (arg_is(l, i, "USER")) {
                /* behind the proxy every client is the default user */
                if (!(vl == 7 && memcmp(v, "default", 7) == 0)) {
                    int n = (int)(vl < 64 ? vl : 64);
                    char u[65];
                    memcpy(u, v, (size_t)n);
                    for (int j = 0; j < n; j++)
                        if (u[j] == '\r' || u[j] == '\n')
                            u[j] = ' ';
                    return buf_appendf(out, "-ERR No such user '%.*s'\r\n", n, u);
                }
            } else if (arg_is(l, i, "SKIPME")) {
                if (arg_is(l, i + 1, "YES"))
                    q.skipme = 1;
                else if (arg_is(l, i + 1, "NO"))
                    q.skipme = 0;
                else
                    return buf_append_str(out, "-ERR syntax error\r\n");
            } else {
                return buf_append_str(out, "-ERR syntax error\r\n");
            }
        }
    }
    int n = client_walk(c, env, v3, 1, &q);
    if (n < 0)
        return -ENOMEM;
    if (old)
        return buf_append_str(out, n > 0 ? "+OK\r\n" : "-ERR No such client\r\n");
    return buf_appendf(out, ":%d\r\n", n);
}

/* CLIENT SETINFO LIB-NAME <name> | LIB-VER <version> (Redis 7.2): kept for CLIENT INFO/LIST.
 * The values follow Redis's rule for client names: printable ASCII without spaces. */
static int client_setinfo(struct proto_client *c, const struct largs *l, struct buf *out)
{
    const char *v = l->buf + l->a[3].off;
    size_t n = l->a[3].len;
    char *dst;
    size_t cap;

    if (arg_is(l, 2, "LIB-NAME")) {
        dst = c->lib_name;
        cap = sizeof(c->lib_name);
    } else if (arg_is(l, 2, "LIB-VER")) {
        dst = c->lib_ver;
        cap = sizeof(c->lib_ver);
    } else {
        int an = (int)(l->a[2].len < 64 ? l->a[2].len : 64);
        char opt[65];
        memcpy(opt, l->buf + l->a[2].off, (size_t)an);
        for (int i = 0; i < an; i++)
            if (opt[i] == '\r' || opt[i] == '\n')
                opt[i] = ' ';
        return buf_appendf(out, "-ERR Unrecognized option '%.*s'\r\n", an, opt);
    }
    if (!name_valid(v, n))
        return buf_appendf(out, "-ERR %s cannot contain spaces, newlines or special characters.\r\n",
                           dst == c->lib_name ? "lib-name" : "lib-ver");
    if (n >= cap)
        return buf_appendf(out, "-ERR %s is too long: ringleader keeps at most %zu bytes\r\n",
                           dst == c->lib_name ? "lib-name" : "lib-ver", cap - 1);
    client_guard(c, 1);
    memcpy(dst, v, n);
    dst[n] = '\0';
    client_guard(c, 0);
    return buf_append_str(out, "+OK\r\n");
}

/* CLIENT LIST ID's walk, used to ask whether a client id exists now. */
static int client_id_visit(void *arg, const struct proto_client_row *r)
{
    return r->id == *(const uint64_t *)arg;
}

/*
 * CLIENT TRACKING, CACHING, GETREDIR, TRACKINGINFO. The syntax is read here as Redis 7.0's
 * clientCommand reads it (its errors in its order: options first, REDIRECT's id checked
 * as it is read, then on/off); everything that depends on the client's tracking state is
 * the core's (env->tracking, proxy/tracking.c), in docs/nearcache.md's terms. Without a
 * core (a unit test's env) tracking is never on: TRACKING on is refused.
 */
static int local_tracking(int what, const struct largs *l, const struct proto_env *env,
                          int v3, struct buf *out)
{
    struct proto_tracking t = { .what = PROTO_TRK_INFO };
    struct proto_name *pre = NULL;
    int r;

    switch (what) {
    case REDIS_LOCAL_CLIENT_TRACKING:
        for (uint32_t j = 3; j < l->argc; j++) {
            int more = j + 1 < l->argc;
            if (arg_is(l, j, "REDIRECT") && more) {
                j++;
                if (t.redirect != 0) {
                    free(pre);
                    return buf_append_str(out, "-ERR A client can only redirect to a single "
                                          "other client\r\n");
                }
                if (util_parse_dec_i64(l->buf + l->a[j].off, l->a[j].len, REDIS_DEC,
                                       &t.redirect) < 0) {
                    free(pre);
                    return buf_append_str(out, "-ERR value is not an integer or out of range\r\n");
                }
                uint64_t id = (uint64_t)t.redirect;
                int found = t.redirect > 0 && env != NULL && env->clients != NULL &&
                            env->clients(env->ctx, 0, client_id_visit, &id) > 0;
                if (!found) {
                    free(pre);
                    return buf_append_str(out, "-ERR The client ID you want redirect to does "
                                          "not exist\r\n");
                }
            } else if (arg_is(l, j, "BCAST")) {
                t.opts |= PROTO_TRK_BCAST;
            } else if (arg_is(l, j, "OPTIN")) {
                t.opts |= PROTO_TRK_OPTIN;
            } else if (arg_is(l, j, "OPTOUT")) {
                t.opts |= PROTO_TRK_OPTOUT;
            } else if (arg_is(l, j, "NOLOOP")) {
                t.opts |= PROTO_TRK_NOLOOP;
            } else if (arg_is(l, j, "PREFIX") && more) {
                j++;
                struct proto_name *np = realloc(pre, (t.nprefix + 1) * sizeof(*pre));
                if (np == NULL) {
                    free(pre);
                    return -ENOMEM;
                }
                pre = np;
                pre[t.nprefix].bytes = l->buf + l->a[j].off;
                pre[t.nprefix].len = l->a[j].len;
                t.nprefix++;
            } else {
                free(pre);
                return buf_append_str(out, "-ERR syntax error\r\n");
            }
        }
        if (arg_is(l, 2, "ON")) {
            t.what = PROTO_TRK_ON;
        } else if (arg_is(l, 2, "OFF")) {
            t.what = PROTO_TRK_OFF;
        } else {
            free(pre);
            return buf_append_str(out, "-ERR syntax error\r\n");
        }
        t.prefix = pre;
        break;
    case REDIS_LOCAL_CLIENT_CACHING:
        t.what = PROTO_TRK_CACHING;
        t.yes = arg_is(l, 2, "YES") ? 1 : arg_is(l, 2, "NO") ? 0 : -1;
        break;
    case REDIS_LOCAL_CLIENT_GETREDIR:
        t.what = PROTO_TRK_GETREDIR;
        break;
    default:                    /* CLIENT TRACKINGINFO */
        break;
    }
    if (env != NULL && env->tracking != NULL) {
        r = env->tracking(env->ctx, &t, v3, out);
        free(pre);
        return r;
    }
    free(pre);
    /* no core: tracking is never on */
    switch (t.what) {
    case PROTO_TRK_ON:
        return buf_append_str(out, "-ERR CLIENT TRACKING is not supported here\r\n");
    case PROTO_TRK_OFF:
        return buf_append_str(out, "+OK\r\n");
    case PROTO_TRK_GETREDIR:
        return buf_append_str(out, ":-1\r\n");
    case PROTO_TRK_CACHING:
        return buf_append_str(out, "-ERR CLIENT CACHING can be called only when the client is in "
                              "tracking mode with OPTIN or OPTOUT mode enabled\r\n");
    case PROTO_TRK_INFO:
        break;
    }
    if (map_len(out, v3, 3) < 0 || bulk_str(out, "flags") < 0 || set_len(out, v3, 1) < 0 ||
        bulk_str(out, "off") < 0 || bulk_str(out, "redirect") < 0 ||
        buf_append_str(out, ":-1\r\n") < 0 || bulk_str(out, "prefixes") < 0 ||
        buf_append_str(out, "*0\r\n") < 0)
        return -ENOMEM;
    return 0;
}

static int local_client(int what, struct proto_client *c, const struct largs *l,
                        const struct proto_env *env, int v3, struct buf *out)
{
    int r;

    switch (what) {
    case REDIS_LOCAL_CLIENT_SETNAME:
        r = set_name(c, l, 2, out);
        if (r != 0)
            return r < 0 ? r : 0;
        return buf_append_str(out, "+OK\r\n");
    case REDIS_LOCAL_CLIENT_GETNAME:
        if (c->name[0] == '\0')
            return null_reply(out, v3);
        return bulk_str(out, c->name);
    case REDIS_LOCAL_CLIENT_ID:
        return buf_appendf(out, ":%" PRIu64 "\r\n", c->id);
    case REDIS_LOCAL_CLIENT_SETINFO:
        return client_setinfo(c, l, out);
    case REDIS_LOCAL_CLIENT_NO_EVICT:
    case REDIS_LOCAL_CLIENT_NO_TOUCH:
        /* Accepted so that clients which send them work; they change nothing through a
         * proxy: the proxy's clients are not the backends' clients (no eviction of them to
         * prevent), and a shared server connection cannot carry one client's no-touch. */
        if (!arg_is(l, 2, "ON") && !arg_is(l, 2, "OFF"))
            return buf_append_str(out, "-ERR syntax error\r\n");
        return buf_append_str(out, "+OK\r\n");
    case REDIS_LOCAL_CLIENT_KILL:
        return client_kill(c, l, env, v3, out);
    default:                    /* CLIENT INFO, CLIENT LIST */
        return client_list(what == REDIS_LOCAL_CLIENT_INFO, c, l, env, v3, out);
    }
}

/* -------------------------------------------------------------- INFO */

/*
 * INFO through the proxy is sent to every server of the pool (a BROADCAST, redis_merge.c's
 * merge_env) and answered here from their replies and the proxy's own numbers: sections as
 * Redis names and orders them, each field either the proxy's (where the proxy is what the
 * client talks to: clients, commands processed, uptime, CPU) or the backends' summed (or
 * taken as their minimum, maximum or common value) where only they know it (memory,
 * keyspace, persistence, expired and evicted keys, keyspace hits). A server that is down or
 * answered an error is left out and counted: ringleader_servers_answering. docs/redis.md
 * lists every field and where it comes from.
 */

enum info_section {
    INFO_SERVER, INFO_CLIENTS, INFO_MEMORY, INFO_PERSISTENCE, INFO_STATS, INFO_REPLICATION,
    INFO_CPU, INFO_MODULES,
    INFO_COMMANDSTATS,          /* not among the default sections, as Redis */
    INFO_ERRORSTATS, INFO_CLUSTER, INFO_KEYSPACE, INFO_NSECTIONS
};

static const char *const info_names[INFO_NSECTIONS] = {
    "server", "clients", "memory", "persistence", "stats", "replication", "cpu", "modules",
    "commandstats", "errorstats", "cluster", "keyspace",
};

/*
 * The backends' INFO texts that answered, and the proxy's numbers. Both arrays are sized
 * to what is given (one text per fragment; the numbers grow as render_stats emits them):
 * a fixed array once filled up and silently dropped the fields emitted last
 * (total_connections among them). A number that cannot be kept sets `nomem` and the whole
 * INFO fails (-ENOMEM): never a reply with a field missing.
 */
struct info_num_kv {
    const char *name;
    int64_t     value;
};

struct info_ctx {
    const char        **text;
    size_t             *len;
    uint32_t            n, asked;
    struct info_num_kv *num;
    uint32_t            nnum, cap;
    int                 nomem;
};

static void info_collect(void *arg, const char *name, int64_t value)
{
    struct info_ctx *ic = arg;
    if (ic->nomem)
        return;
    if (ic->nnum == ic->cap) {
        uint32_t cap = ic->cap ? 2 * ic->cap : 128;
        struct info_num_kv *num = realloc(ic->num, cap * sizeof(*num));
        if (num == NULL) {
            ic->nomem = 1;
            return;
        }
        ic->num = num;
        ic->cap = cap;
    }
    ic->num[ic->nnum].name = name;
    ic->num[ic->nnum].value = value;
    ic->nnum++;
}

static int64_t info_own(const struct info_ctx *ic, const char *name)
{
    for (uint32_t i = 0; i < ic->nnum; i++)
        if (strcmp(ic->num[i].name, name) == 0)
            return ic->num[i].value;
    return 0;
}

/* The value of field `name` in one backend's INFO text: a pointer into it and its length. */
static int info_field(const char *t, size_t n, const char *name, const char **v, size_t *vlen)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i + nl < n;) {
        const char *eol = memchr(t + i, '\n', n - i);
        size_t end = eol ? (size_t)(eol - t) : n;
        if (end - i > nl && memcmp(t + i, name, nl) == 0 && t[i + nl] == ':') {
            *v = t + i + nl + 1;
            *vlen = end - i - nl - 1;
            if (*vlen > 0 && (*v)[*vlen - 1] == '\r')
                (*vlen)--;
            return 1;
        }
        i = end + 1;
    }
    return 0;
}

static int info_num(const char *v, size_t n, int64_t *out)
{
    return util_parse_i64(v, n, out) == 0;
}

enum info_fold { FOLD_SUM, FOLD_MIN, FOLD_MAX };

/* A numeric field folded over the backends that have it; 0 when none has. */
static int info_fold(const struct info_ctx *ic, const char *name, enum info_fold how, int64_t *out)
{
    int any = 0;
    for (uint32_t i = 0; i < ic->n; i++) {
        const char *v;
        size_t vl;
        int64_t x;
        if (!info_field(ic->text[i], ic->len[i], name, &v, &vl) || !info_num(v, vl, &x))
            continue;
        if (!any)
            *out = x;
        else if (how == FOLD_SUM)
            *out += x;
        else if ((how == FOLD_MIN && x < *out) || (how == FOLD_MAX && x > *out))
            *out = x;
        any = 1;
    }
    return any;
}

/* A text field: the value the backends share, or `mixed` when they differ. */
static int info_common(const struct info_ctx *ic, const char *name, char *out, size_t cap)
{
    int any = 0;
    for (uint32_t i = 0; i < ic->n; i++) {
        const char *v;
        size_t vl;
        if (!info_field(ic->text[i], ic->len[i], name, &v, &vl))
            continue;
        if (!any)
            snprintf(out, cap, "%.*s", (int)vl, v);
        else if (strlen(out) != vl || memcmp(out, v, vl) != 0)
            snprintf(out, cap, "mixed");
        any = 1;
    }
    return any;
}

/* The lowest version of the backends (what every one of them can do). */
static int info_min_version(const struct info_ctx *ic, char *out, size_t cap)
{
    long best[3] = { 0, 0, 0 };
    int any = 0;
    for (uint32_t i = 0; i < ic->n; i++) {
        const char *v;
        size_t vl;
        char tmp[32];
        long x[3] = { 0, 0, 0 };
        if (!info_field(ic->text[i], ic->len[i], "redis_version", &v, &vl) || vl >= sizeof(tmp))
            continue;
        memcpy(tmp, v, vl);
        tmp[vl] = '\0';
        if (sscanf(tmp, "%ld.%ld.%ld", &x[0], &x[1], &x[2]) < 1)
            continue;
        if (!any || x[0] < best[0] || (x[0] == best[0] && (x[1] < best[1] ||
                                                           (x[1] == best[1] && x[2] < best[2])))) {
            memcpy(best, x, sizeof(best));
            snprintf(out, cap, "%s", tmp);
        }
        any = 1;
    }
    return any;
}

/* "1.50M" as Redis's bytesToHuman prints it. */
static int info_human(struct buf *b, const char *name, int64_t v)
{
    static const char units[] = "BKMGTP";
    double d = (double)v;
    int u = 0;
    if (v < 1024)
        return buf_appendf(b, "%s:%" PRId64 "B\r\n", name, v);
    while (d >= 1024 && u < 5) {
        d /= 1024;
        u++;
    }
    return buf_appendf(b, "%s:%.2f%c\r\n", name, d, units[u]);
}

#define INFO_TRY(x) do { if ((x) < 0) return -ENOMEM; } while (0)

/* Sum a field of the backends into `name` (and its _human twin); absent when none has it. */
static int info_sum_line(struct buf *b, const struct info_ctx *ic, const char *name, int human)
{
    int64_t v;
    if (!info_fold(ic, name, FOLD_SUM, &v))
        return 0;
    INFO_TRY(buf_appendf(b, "%s:%" PRId64 "\r\n", name, v));
    if (human) {
        char hn[64];
        snprintf(hn, sizeof(hn), "%s_human", name);
        INFO_TRY(info_human(b, hn, v));
    }
    return 0;
}

static int info_fold_line(struct buf *b, const struct info_ctx *ic, const char *name,
                          enum info_fold how)
{
    int64_t v;
    if (info_fold(ic, name, how, &v))
        INFO_TRY(buf_appendf(b, "%s:%" PRId64 "\r\n", name, v));
    return 0;
}

/* "ok" when every backend says ok, else "err". */
static int info_status_line(struct buf *b, const struct info_ctx *ic, const char *name)
{
    char v[64];
    if (info_common(ic, name, v, sizeof(v)))
        INFO_TRY(buf_appendf(b, "%s:%s\r\n", name, strcmp(v, "ok") == 0 ? "ok" : "err"));
    return 0;
}

static int info_section(struct buf *b, enum info_section sec, const struct info_ctx *ic,
                        const struct proto_env *env, const struct buf *keyspace)
{
    char text[64];
    int64_t v;

    switch (sec) {
    case INFO_SERVER:
        INFO_TRY(buf_append_str(b, "# Server\r\n"));
        if (info_min_version(ic, text, sizeof(text)))
            INFO_TRY(buf_appendf(b, "redis_version:%s\r\n", text));
        INFO_TRY(buf_appendf(b, "redis_mode:%s\r\narch_bits:%zu\r\n"
                             "process_id:%" PRId64 "\r\n"
                             "server_time_usec:%" PRIu64 "\r\nuptime_in_seconds:%" PRIu64 "\r\n"
                             "uptime_in_days:%" PRIu64 "\r\n"
                             "ringleader_version:%s\r\nringleader_pool:%s\r\n"
                             "ringleader_servers:%" PRIu32 "\r\n"
                             "ringleader_servers_answering:%" PRIu32 "\r\n",
                             env && env->cluster ? "cluster" : "standalone",
                             8 * sizeof(void *), info_own(ic, "pid"),
                             env ? env->now_us : 0, env ? env->uptime_s : 0,
                             env ? env->uptime_s / 86400 : 0,
                             env && env->version ? env->version : "",
                             env && env->pool_name ? env->pool_name : "", ic->asked, ic->n));
        break;
    case INFO_CLIENTS:
        /* the proxy's clients, those waiting for a blocking command among them */
        INFO_TRY(buf_appendf(b, "# Clients\r\nconnected_clients:%" PRId64 "\r\n"
                             "cluster_connections:0\r\nblocked_clients:%" PRId64 "\r\n"
                             "tracking_clients:0\r\nclients_in_timeout_table:0\r\n",
                             info_own(ic, "client_connections"), info_own(ic, "blocked_clients")));
        break;
    case INFO_MEMORY:
        INFO_TRY(buf_append_str(b, "# Memory\r\n"));
        INFO_TRY(info_sum_line(b, ic, "used_memory", 1));
        INFO_TRY(info_sum_line(b, ic, "used_memory_rss", 1));
        INFO_TRY(info_sum_line(b, ic, "used_memory_peak", 1));
        INFO_TRY(info_sum_line(b, ic, "used_memory_overhead", 0));
        INFO_TRY(info_sum_line(b, ic, "used_memory_dataset", 0));
        INFO_TRY(info_sum_line(b, ic, "maxmemory", 1));
        if (info_common(ic, "maxmemory_policy", text, sizeof(text)))
            INFO_TRY(buf_appendf(b, "maxmemory_policy:%s\r\n", text));
        int64_t used, rss;
        if (info_fold(ic, "used_memory", FOLD_SUM, &used) && used > 0 &&
            info_fold(ic, "used_memory_rss", FOLD_SUM, &rss))
            INFO_TRY(buf_appendf(b, "mem_fragmentation_ratio:%.2f\r\n", (double)rss / (double)used));
        break;
    case INFO_PERSISTENCE:
        INFO_TRY(buf_append_str(b, "# Persistence\r\n"));
        INFO_TRY(info_fold_line(b, ic, "loading", FOLD_MAX));
        INFO_TRY(info_fold_line(b, ic, "async_loading", FOLD_MAX));
        INFO_TRY(info_fold_line(b, ic, "rdb_changes_since_last_save", FOLD_SUM));
        INFO_TRY(info_fold_line(b, ic, "rdb_bgsave_in_progress", FOLD_MAX));
        INFO_TRY(info_fold_line(b, ic, "rdb_last_save_time", FOLD_MIN));
        INFO_TRY(info_status_line(b, ic, "rdb_last_bgsave_status"));
        INFO_TRY(info_fold_line(b, ic, "aof_enabled", FOLD_MAX));
        INFO_TRY(info_fold_line(b, ic, "aof_rewrite_in_progress", FOLD_MAX));
        INFO_TRY(info_status_line(b, ic, "aof_last_bgrewrite_status"));
        INFO_TRY(info_status_line(b, ic, "aof_last_write_status"));
        break;
    case INFO_STATS:
        INFO_TRY(buf_appendf(b, "# Stats\r\ntotal_connections_received:%" PRId64 "\r\n"
                             "total_commands_processed:%" PRId64 "\r\n"
                             "instantaneous_ops_per_sec:%" PRId64 "\r\n"
                             "rejected_connections:%" PRId64 "\r\n",
                             info_own(ic, "total_connections"), info_own(ic, "requests"),
                             info_own(ic, "ops_per_sec"), info_own(ic, "client_rejected")));
        INFO_TRY(info_sum_line(b, ic, "expired_keys", 0));
        INFO_TRY(info_sum_line(b, ic, "evicted_keys", 0));
        INFO_TRY(info_sum_line(b, ic, "keyspace_hits", 0));
        INFO_TRY(info_sum_line(b, ic, "keyspace_misses", 0));
        /* a channel lives on one server, a pattern of the proxy's clients on every one */
        INFO_TRY(info_sum_line(b, ic, "pubsub_channels", 0));
        INFO_TRY(info_fold_line(b, ic, "pubsub_patterns", FOLD_MAX));
        INFO_TRY(info_sum_line(b, ic, "pubsubshard_channels", 0));
        for (uint32_t i = 0; i < ic->nnum; i++) {
            const char *nm = ic->num[i].name;
            if (strcmp(nm, "pid") == 0 || strcmp(nm, "time") == 0 || strcmp(nm, "uptime") == 0 ||
                strncmp(nm, "rusage_", 7) == 0)
                continue;           /* shown under Server and CPU */
            INFO_TRY(buf_appendf(b, "ringleader_%s:%" PRId64 "\r\n", nm, ic->num[i].value));
        }
        break;
    case INFO_REPLICATION:
        /* what a client of the proxy sees: a primary with no replica of its own */
        INFO_TRY(buf_append_str(b, "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"));
        break;
    case INFO_CPU:
        v = info_own(ic, "rusage_system_us");
        INFO_TRY(buf_appendf(b, "# CPU\r\nused_cpu_sys:%" PRId64 ".%06" PRId64 "\r\n", v / 1000000,
                             v % 1000000));
        v = info_own(ic, "rusage_user_us");
        INFO_TRY(buf_appendf(b, "used_cpu_user:%" PRId64 ".%06" PRId64 "\r\n", v / 1000000,
                             v % 1000000));
        break;
    case INFO_MODULES:
        INFO_TRY(buf_append_str(b, "# Modules\r\n"));
        break;
    case INFO_CLUSTER:
        INFO_TRY(buf_appendf(b, "# Cluster\r\ncluster_enabled:%d\r\n", env->cluster ? 1 : 0));
        break;
    case INFO_KEYSPACE: {
        /* keyspace: redis_merge.c's INFO keyspace merge of the same replies, a bulk string (a
         * verbatim one for a RESP3 client) */
        const char *body;
        size_t bl;
        if (keyspace != NULL && redis__text(buf_rptr(keyspace), buf_len(keyspace), &body, &bl) == 0) {
            INFO_TRY(buf_append(b, body, bl));
        } else {
            INFO_TRY(buf_append_str(b, "# Keyspace\r\n"));
        }
        break;
    }
    case INFO_COMMANDSTATS:
        INFO_TRY(redis__info_commandstats(b, env));
        break;
    case INFO_ERRORSTATS:
        INFO_TRY(redis__info_errorstats(b, env));
        break;
    case INFO_NSECTIONS:
        break;
    }
    return buf_append_str(b, "\r\n");
}

/* Mark the section an INFO argument names (lower-cased in place). */
static void info_want(char *arg, int *args, int want[INFO_NSECTIONS])
{
    for (char *c = arg; *c; c++)
        *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    (*args)++;
    if (strcmp(arg, "default") == 0 || strcmp(arg, "all") == 0 || strcmp(arg, "everything") == 0) {
        for (int k = 0; k < INFO_NSECTIONS; k++)    /* commandstats: all and everything */
            want[k] = k != INFO_COMMANDSTATS || strcmp(arg, "default") != 0;
        return;
    }
    for (int k = 0; k < INFO_NSECTIONS; k++)
        if (strcmp(arg, info_names[k]) == 0 || (k == INFO_MODULES && strcmp(arg, "module_list") == 0))
            want[k] = 1;
}

/* Digits at *s up to the '\r' that ends every RESP header line; *s moves past its "\r\n". */
static long info_resp_len(const char **s)
{
    long v = 0;
    while (**s >= '0' && **s <= '9' && v < 1000000000)
        v = v * 10 + (*(*s)++ - '0');
    if (**s != '\r')
        return -1;
    *s += 2;
    return v;
}

/*
 * The INFO request's arguments after the command name, from the copy the core kept: the
 * request as forwarded (merge_copy), a RESP array the parser checked (an inline request
 * re-encoded, empty requests before it left out). It is not NUL-terminated: only the
 * array's own lengths are followed. Fills want[]; 0, or -1 if it cannot be read.
 */
static int info_sections(const char *reqbuf, int want[INFO_NSECTIONS])
{
    char arg[64];
    const char *s = reqbuf;
    int args = 0;

    memset(want, 0, INFO_NSECTIONS * sizeof(*want));
    if (*s++ != '*')
        return -1;
    long n = info_resp_len(&s);
    for (long i = 0; i < n; i++) {
        if (*s++ != '$')
            return -1;
        long len = info_resp_len(&s);
        if (len < 0)
            return -1;
        if (i > 0) {                /* argument 0 is INFO */
            snprintf(arg, sizeof(arg), "%.*s", (int)(len < 63 ? len : 63), s);
            info_want(arg, &args, want);
        }
        s += len + 2;
    }
    if (args == 0)                      /* plain INFO: Redis's default sections */
        for (int k = 0; k < INFO_NSECTIONS; k++)
            want[k] = k != INFO_COMMANDSTATS;
    return 0;
}

int redis__info_merge(const char *reqbuf, struct buf *const *frag, uint32_t nfrag,
                      const struct buf *keyspace, const struct proto_env *env, struct buf *out)
{
    struct info_ctx ic;
    int want[INFO_NSECTIONS];
    struct buf b;
    int rc = -ENOMEM;

    memset(&ic, 0, sizeof(ic));
    if (info_sections(reqbuf, want) < 0)
        return -1;
    buf_init(&b);
    ic.asked = nfrag;
    if (nfrag > 0) {
        ic.text = calloc(nfrag, sizeof(*ic.text));
        ic.len = calloc(nfrag, sizeof(*ic.len));
        if (ic.text == NULL || ic.len == NULL)
            goto out;
    }
    for (uint32_t f = 0; f < nfrag; f++) {
        const char *t;
        size_t tl;
        if (redis__text(buf_rptr(frag[f]), buf_len(frag[f]), &t, &tl) < 0)
            continue;                   /* an error reply: that server is left out */
        ic.text[ic.n] = t;
        ic.len[ic.n] = tl;
        ic.n++;
    }
    if (env != NULL && env->render_stats != NULL)
        env->render_stats(env->ctx, info_collect, &ic);
    if (ic.nomem)
        goto out;                       /* a field would be missing: no reply rather */
    for (int k = 0; k < INFO_NSECTIONS; k++)
        if (want[k] && info_section(&b, (enum info_section)k, &ic, env, keyspace) < 0)
            goto out;
    /* Sections end with a blank line, except the last (as Redis). */
    size_t n = buf_len(&b);
    if (n >= 2)
        n -= 2;
    rc = redis__append_text(out, env != NULL && env->variant, buf_len(&b) ? buf_rptr(&b) : "", n);
out:
    buf_free(&b);
    free(ic.num);
    free(ic.len);
    free(ic.text);
    return rc;
}

/* ----------------------------------------------------------------- local */

int redis__local(struct proto_client *c, struct proto_parser *p, const struct proto_req *req,
                 const char *buf, const struct proto_env *env, struct buf *out)
{
    struct largs l = { req->u.redis.inl ? req->u.redis.inl : buf, p->keys, req->u.redis.argc };
    const struct redis_command *cmd;
    int64_t v;
    int v3 = (p->flags & PROTO_PF_VARIANT) != 0;

    if (req->cmd >= redis_ncommands || l.argc == 0)
        return buf_append_str(out, "-ERR internal error: not a local command\r\n");
    cmd = &redis_commands[req->cmd];
    switch (cmd->local) {
    case REDIS_LOCAL_PING:
        if (l.argc > 2)
            return wrong_args(out, "ping");
        if ((p->flags & PROTO_PF_SUBSCRIBED) && !v3) {
            /* RESP2 subscribed mode: Redis answers with a message-shaped array */
            if (buf_append_str(out, "*2\r\n$4\r\npong\r\n") < 0)
                return -ENOMEM;
            return l.argc == 2 ? bulk(out, l.buf + l.a[1].off, l.a[1].len) : bulk(out, "", 0);
        }
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
        /* a session's requests go to the connection it holds, in the database it began in
         * (inside MULTI the parser refuses every local command) */
        if (p->flags & PROTO_PF_SESSION)
            return buf_append_str(out, "-ERR SELECT after WATCH is not supported by ringleader: "
                                  "SELECT before WATCH\r\n");
        /* Redis Cluster has database 0 only: a cluster pool keeps its refusal */
        if (env != NULL && env->cluster)
            return buf_append_str(out, "-ERR SELECT is not allowed in cluster mode\r\n");
        if (v != c->pool_db && (v < 0 || v >= PROTO_DBS))
            return buf_append_str(out, "-ERR DB index is out of range\r\n");
        client_guard(c, 1);
        c->db = (int)v;
        c->selected = c->db != c->pool_db;
        client_guard(c, 0);
        return buf_append_str(out, "+OK\r\n");
    case REDIS_LOCAL_AUTH:
        return local_auth(c, p, &l, out);
    case REDIS_LOCAL_ACL_WHOAMI:
        return bulk_str(out, c->user[0] != '\0' ? c->user : "default");
    case REDIS_LOCAL_HELLO:
        return local_hello(c, p, &l, env, out);
    case REDIS_LOCAL_UNWATCH:
        return buf_append_str(out, "+OK\r\n");
    case REDIS_LOCAL_RESET:
        /* RESP2 again, out of subscribed mode (the core ends the subscriptions) */
        client_guard(c, 1);
        c->name[0] = '\0';
        c->db = c->pool_db;         /* RESET selects the database a new client has */
        c->selected = 0;
        client_guard(c, 0);
        if (c->auth != NULL || c->login != NULL) {
            c->authed = 0;
            p->flags &= ~(uint32_t)PROTO_PF_AUTHED;
            if (c->login != NULL)
                c->login(c, NULL, 0, NULL, 0);      /* nobody until AUTH again */
        }
        p->flags &= ~(uint32_t)(PROTO_PF_VARIANT | PROTO_PF_SUBSCRIBED);
        return buf_append_str(out, "+RESET\r\n") < 0 ? -ENOMEM : PROTO_LOCAL_RESET;
    case REDIS_LOCAL_EMPTY_ARRAY:
        return buf_append_str(out, "*0\r\n");
    case REDIS_LOCAL_CLIENT_TRACKING:
    case REDIS_LOCAL_CLIENT_TRACKINGINFO:
    case REDIS_LOCAL_CLIENT_GETREDIR:
    case REDIS_LOCAL_CLIENT_CACHING:
        return local_tracking(cmd->local, &l, env, v3, out);
    case REDIS_LOCAL_COMMAND:
    case REDIS_LOCAL_COMMAND_COUNT:
    case REDIS_LOCAL_COMMAND_INFO:
    case REDIS_LOCAL_COMMAND_DOCS:
    case REDIS_LOCAL_COMMAND_LIST:
    case REDIS_LOCAL_COMMAND_GETKEYS:
        return local_command(cmd->local, p, &l, out);
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
    case REDIS_LOCAL_CLIENT_SETINFO:
    case REDIS_LOCAL_CLIENT_NO_EVICT:
    case REDIS_LOCAL_CLIENT_NO_TOUCH:
    case REDIS_LOCAL_CLIENT_KILL:
        return local_client(cmd->local, c, &l, env, v3, out);
    case REDIS_LOCAL_SLOWLOG_GET:
    case REDIS_LOCAL_SLOWLOG_LEN:
    case REDIS_LOCAL_SLOWLOG_RESET:
    case REDIS_LOCAL_SLOWLOG_HELP:
        return redis__slowlog(cmd->local, l.buf, l.a, l.argc, env, out);
    case REDIS_LOCAL_CLUSTER_OK:
    case REDIS_LOCAL_CLUSTER_KEYSLOT:
    case REDIS_LOCAL_CLUSTER_MYID:
    case REDIS_LOCAL_CLUSTER_SLOTS:
    case REDIS_LOCAL_CLUSTER_SHARDS:
    case REDIS_LOCAL_CLUSTER_NODES:
    case REDIS_LOCAL_CLUSTER_INFO:
        return redis__cluster_local(cmd->local, l.buf, l.a, l.argc, env, out);
    }
    return buf_append_str(out, "-ERR internal error: not a local command\r\n");
}
