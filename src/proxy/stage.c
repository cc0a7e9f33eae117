/* The stage table, a pool's chain of stages, and the calls that run one hook along it. */
#include "config.h"

#include <string.h>

#include "conf/conf.h"
#include "proxy/stage.h"

/*
 * Every stage, in the order a request meets them: what may answer or hold a request
 * first, then what notes or marks the route, what rewrites or takes the bytes, and what
 * copies the request last. (The hot-key sketch and the counters are observers, not
 * stages: forward.c feeds them every request.)
 */
static const struct stage *const stage_table[] = {
    &stage_tracking,        /* first: sees every read a tracking client makes, even one
                             * another stage answers; writes invalidate */
    &stage_migrate,         /* a key that moved is moved first (MIGRATE), then served */
    &stage_rejoin,          /* remembers writes for a down server's rejoin */
    &stage_failover_ttl,    /* caps the TTL of a write sent to a failover server */
    &stage_warmup,          /* a miss after a reload is retried on the key's old owner */
    &stage_lease,           /* reads of a missed key wait for its first reader's store */
    &stage_collapse,        /* identical gets wait for one reply */
    &stage_shadow,          /* copies to a shadow pool */
    &stage_nearcache,       /* gets answered from the proxy's copy; writes evict it */
};

_Static_assert(sizeof(stage_table) / sizeof(stage_table[0]) <= STAGE_MAX,
               "stage_chain holds STAGE_MAX stages");

void stage_chain_build(struct stage_chain *ch, const struct conf_pool *cp,
                       const struct conf_global *g)
{
    memset(ch, 0, sizeof(*ch));
    ch->reply = stage_reply;
    for (size_t i = 0; i < sizeof(stage_table) / sizeof(stage_table[0]); i++) {
        const struct stage *st = stage_table[i];
        if (st->wanted != NULL && !st->wanted(cp, g))
            continue;
        ch->stage[ch->n++] = st;
        uint8_t h = (uint8_t)((st->request ? STAGE_H_REQUEST : 0) |
                              (st->routed ? STAGE_H_ROUTED : 0) |
                              (st->write ? STAGE_H_WRITE : 0) |
                              (st->queued ? STAGE_H_QUEUED : 0) |
                              (st->sent ? STAGE_H_SENT : 0) |
                              (st->reply ? STAGE_H_REPLY : 0) |
                              (st->pinned ? STAGE_H_PINNED : 0));
        if (st->dormant)
            ch->dormant_hooks |= h;
        else
            ch->base_hooks |= h;
    }
    ch->hooks = ch->base_hooks;
}

void stage_chain_arm(struct stage_chain *ch, int on)
{
    ch->armed = (uint8_t)(on != 0);
    ch->hooks = (uint8_t)(ch->base_hooks | (on ? ch->dormant_hooks : 0));
}

/* A stage the chain runs now (a dormant one only while armed). */
static inline int stage_runs(const struct stage_chain *ch, const struct stage *st)
{
    return !st->dormant || ch->armed;
}

enum stage_verdict stage_request(const struct stage_chain *ch, struct stage_req *r)
{
    return stage_request_after(ch, r, NULL);
}

enum stage_verdict stage_request_after(const struct stage_chain *ch, struct stage_req *r,
                                       const struct stage *after)
{
    uint8_t i = 0;
    if (after != NULL) {
        while (i < ch->n && ch->stage[i] != after)
            i++;
        i++;                    /* past it (past the end when the chain lost it) */
    }
    for (; i < ch->n; i++) {
        const struct stage *st = ch->stage[i];
        if (st->request != NULL && stage_runs(ch, st)) {
            enum stage_verdict v = st->request(r);
            if (v != STAGE_PASS)
                return v;
        }
    }
    return STAGE_PASS;
}

enum stage_verdict stage_routed(const struct stage_chain *ch, struct stage_req *r)
{
    for (uint8_t i = 0; i < ch->n; i++) {
        const struct stage *st = ch->stage[i];
        if (st->routed != NULL && stage_runs(ch, st)) {
            enum stage_verdict v = st->routed(r);
            if (v != STAGE_PASS)
                return v;
        }
    }
    return STAGE_PASS;
}

int stage_write(const struct stage_chain *ch, struct stage_req *r, struct msg *wm,
                struct sconn *s, size_t before)
{
    for (uint8_t i = 0; i < ch->n; i++) {
        const struct stage *st = ch->stage[i];
        if (st->write != NULL && stage_runs(ch, st)) {
            int rc = st->write(r, wm, s, before);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

void stage_queued(const struct stage_chain *ch, struct stage_req *r, struct msg *wm,
                  struct sconn *s)
{
    for (uint8_t i = 0; i < ch->n; i++)
        if (ch->stage[i]->queued != NULL && stage_runs(ch, ch->stage[i]))
            ch->stage[i]->queued(r, wm, s);
}

void stage_sent(const struct stage_chain *ch, struct stage_req *r, int sent)
{
    for (uint8_t i = 0; i < ch->n; i++)
        if (ch->stage[i]->sent != NULL && stage_runs(ch, ch->stage[i]))
            ch->stage[i]->sent(r, sent);
}

enum stage_verdict stage_pinned(const struct stage_chain *ch, struct stage_req *r)
{
    for (uint8_t i = 0; i < ch->n; i++) {
        const struct stage *st = ch->stage[i];
        if (st->pinned != NULL && stage_runs(ch, st)) {
            enum stage_verdict v = st->pinned(r);
            if (v != STAGE_PASS)
                return v;
        }
    }
    return STAGE_PASS;
}

int stage_reply(const struct stage_chain *ch, struct worker *w, struct msg *m)
{
    for (uint8_t i = 0; i < ch->n; i++)
        if (ch->stage[i]->reply != NULL && stage_runs(ch, ch->stage[i]) &&
            ch->stage[i]->reply(w, m))
            return 1;
    return 0;
}
