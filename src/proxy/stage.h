/* The stages of the request path: features that see a request, and its reply, in one order, configured per pool. */
#ifndef RL_PROXY_STAGE_H
#define RL_PROXY_STAGE_H

#include <stddef.h>
#include <stdint.h>

struct client;
struct conf_global;
struct conf_pool;
struct msg;
struct proto_req;
struct route;
struct route_key;
struct sconn;
struct wpool;
struct worker;

/*
 * A request's walk (docs/architecture.md, "A GET's walk"):
 *
 *   client.c ─parse─▶ forward.c ─place keys─▶ stages: request ─▶ route.c ─▶ stages: routed
 *      ─▶ forward_write: the bytes on a server connection ─▶ stages: write, queued
 *      ─▶ stages: sent                                        (forward.c, one direction)
 *   sconn.c ─reply complete─▶ stages: reply (a message a stage marked) ─▶ msg.c
 *      ─▶ delivered to the client through its queue
 *
 * A stage is a const table of hooks, each optional; forward.c calls the hooks of the pool's
 * stages in the order of the table in stage.c and includes no feature's header. A pool
 * runs a stage when its `wanted` says so (at configuration time: a reload rebuilds the
 * chain); a hook no stage of the pool has costs one test of a bit.
 *
 * A new feature is a new file that defines its `const struct stage` and one line in
 * stage.c's table.
 */

/* What a stage sees of a request. The stage may set bits of `marks` for its own later
 * hooks (STAGE_M_*): they live as long as the request's dispatch. */
struct stage_req {
    struct client          *c;
    struct wpool           *pool;     /* the keys' pool (routes: applied) */
    struct msg             *m;        /* the client's request */
    const struct proto_req *req;
    const char             *buf;      /* the request's bytes (req's offsets are into it) */
    const struct route_key *rk;       /* req->nkeys placed keys (NULL for a broadcast) */
    struct route           *rt;       /* the route decision, from the routed hook on */
    const uint32_t         *owner;    /* a split request: each key's server, else NULL */
    uint32_t                marks;
};

#define STAGE_M_LEAD 0x1u   /* collapse: m was written and may lead identical gets */

enum stage_verdict {
    STAGE_PASS = 0,         /* go on */
    STAGE_TAKEN = 1,        /* the stage answered or holds the request: stop here */
    STAGE_AGAIN = 2,        /* routed: the route is stale, compute it again */
};

struct stage {
    const char *name;
    /* Whether a pool runs the stage (configuration time). */
    int  (*wanted)(const struct conf_pool *cp, const struct conf_global *g);
    /* A keyed request, its keys placed, before it is routed: look at it, answer it or
     * hold it (STAGE_TAKEN: the stage owns m's answer), or STAGE_PASS. A SINGLE or SAME
     * request's m->start_us is 0 here (stamped when it goes on): one that a stage holds
     * and sends later is stamped by that stage. */
    enum stage_verdict (*request)(struct stage_req *r);
    /* The route is decided (r->rt; r->owner for a split request): count it, mark m, or
     * STAGE_AGAIN when what the stage did changed where the request goes. */
    enum stage_verdict (*routed)(struct stage_req *r);
    /* The header of wm (r->m, or one of its copies), a whole request (not a fragment,
     * not on a session's connection), was just written to s's output from `before`:
     * rewrite those bytes, or take the request instead (STAGE_TAKEN: the bytes are
     * dropped, wm waits elsewhere). <0: no memory (the caller drops the bytes). */
    int  (*write)(struct stage_req *r, struct msg *wm, struct sconn *s, size_t before);
    /* wm was queued on s for its reply. */
    void (*queued)(struct stage_req *r, struct msg *wm, struct sconn *s);
    /* The request was dispatched: `sent` 1 when m is queued on a server and still the
     * client's (0: answered here, or split into fragments or copies). */
    void (*sent)(struct stage_req *r, int sent);
    /* The reply side: m's reply is complete, m has left its server's queue, and m was
     * marked MSG_F_STAGED by this stage: 1 when the stage took m (sent it elsewhere; it
     * comes back here with its next reply), 0 to let it complete. The stage clears
     * MSG_F_STAGED when it has no more to do with m. */
    int  (*reply)(struct worker *w, struct msg *m);
    /* A stage a pool has but runs only while its chain is armed (stage_chain_arm): a
     * feature that clients turn on at run time (CLIENT TRACKING), which costs a pool's
     * requests nothing until one does. */
    uint8_t dormant;
    /* A keyed request (r->rk placed) about to go on a session's pinned connection
     * (MULTI/EXEC, WATCH, blocking commands), which passes no other hook: STAGE_TAKEN
     * when the stage refused it (m answered; the session then treats it as refused),
     * else STAGE_PASS. */
    enum stage_verdict (*pinned)(struct stage_req *r);
};

/* The hooks a pool's chain has, so that the request path tests one bit. */
#define STAGE_H_REQUEST 0x01u
#define STAGE_H_ROUTED  0x02u
#define STAGE_H_WRITE   0x04u
#define STAGE_H_QUEUED  0x08u
#define STAGE_H_SENT    0x10u
#define STAGE_H_REPLY   0x20u
#define STAGE_H_PINNED  0x40u

#define STAGE_MAX 16

struct stage_chain {
    const struct stage *stage[STAGE_MAX];
    uint8_t             n;
    uint8_t             hooks;   /* STAGE_H_* of any stage in the chain (a dormant one's
                                    only while armed) */
    uint8_t             base_hooks, dormant_hooks;
    uint8_t             armed;   /* dormant stages run (stage_chain_arm) */
    /* stage_reply, installed by stage_chain_build: sconn.c, below the stages, reaches
     * them through it (it calls up by no name). */
    int (*reply)(const struct stage_chain *ch, struct worker *w, struct msg *m);
};

/* Build a pool's chain from its configuration (the table's order). */
void stage_chain_build(struct stage_chain *ch, const struct conf_pool *cp,
                       const struct conf_global *g);

/* Run the chain's dormant stages (on 1) or not (0); a new chain is not armed. */
void stage_chain_arm(struct stage_chain *ch, int on);

/* Run one hook of every stage of the chain in order; request and routed stop at the
 * first verdict other than STAGE_PASS and return it, write at the first non-zero. */
enum stage_verdict stage_request(const struct stage_chain *ch, struct stage_req *r);
/* The request hooks of the stages after `after` only (NULL: every stage): a request a
 * stage held and sends on later (c->mops->again) passes the rest of the chain. */
enum stage_verdict stage_request_after(const struct stage_chain *ch, struct stage_req *r,
                                       const struct stage *after);
enum stage_verdict stage_routed(const struct stage_chain *ch, struct stage_req *r);
int  stage_write(const struct stage_chain *ch, struct stage_req *r, struct msg *wm,
                 struct sconn *s, size_t before);
void stage_queued(const struct stage_chain *ch, struct stage_req *r, struct msg *wm,
                  struct sconn *s);
void stage_sent(const struct stage_chain *ch, struct stage_req *r, int sent);
/* A session's keyed request (stage.pinned): the first verdict other than STAGE_PASS. */
enum stage_verdict stage_pinned(const struct stage_chain *ch, struct stage_req *r);
/* m (MSG_F_STAGED) has its reply: 1 when a stage took it (called through ch->reply). */
int  stage_reply(const struct stage_chain *ch, struct worker *w, struct msg *m);

/* The stages (each defined in its feature's file). */
extern const struct stage stage_rejoin;        /* rejoin.c */
extern const struct stage stage_failover_ttl;  /* ttl_cap.c */
extern const struct stage stage_warmup;        /* warmup.c */
extern const struct stage stage_collapse;      /* collapse.c */
extern const struct stage stage_lease;         /* lease.c */
extern const struct stage stage_shadow;        /* shadow.c */
extern const struct stage stage_nearcache;     /* nearcache.c */
extern const struct stage stage_tracking;      /* tracking.c */
extern const struct stage stage_migrate;       /* migrate.c */

#endif
