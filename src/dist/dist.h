/* Distributions: how a pool's key hash picks a server. One vtable, many schemes. */
#ifndef RL_DIST_H
#define RL_DIST_H

#include <stddef.h>
#include <stdint.h>

enum dist_type {
    DIST_KETAMA,
    DIST_MODULA,
    DIST_RANDOM,
    DIST_RENDEZVOUS,
    DIST_JUMP,
    DIST_MAGLEV,
    DIST_SLOTS,
    DIST_MULTIPROBE,
    DIST_ANCHOR,
    DIST_COUNT
};

/* One server as a distribution sees it; the array is in YAML (config) order
 * and every index a distribution returns is an index into it. */
struct dist_server {
    const char *ident;       /* name, else host:port, else host (port 11211) */
    size_t      ident_len;
    uint32_t    weight;      /* > 0 */
    uint32_t    zone;        /* zone id (0 = none); used by preference lists */
};

/* Parameters of a build; zero means "the distribution's default". */
struct dist_params {
    uint32_t vnodes;             /* ketama: points per server at equal weight (160) */
    uint32_t maglev_table_size;  /* maglev: prime table size (65537) */
    uint32_t probes;             /* multiprobe: probes per lookup (21) */
    uint32_t anchor_capacity;    /* anchor: bucket capacity (2 x servers) */
    const uint32_t *slot_map;    /* slots: 16384 server indices, or NULL for an even split */
};

struct dist;
struct buf;

struct dist_ops {
    const char *name;
    /* Build from n servers; 0 or -1 with a reason in err. */
    int  (*build)(struct dist *d, const struct dist_params *p,
                  const struct dist_server *servers, uint32_t n,
                  char *err, size_t errlen);
    /* Owner of a key hash: a server index < n. Never fails for n > 0. */
    uint32_t (*lookup)(const struct dist *d, uint64_t hash);
    /* Fill out[0..want) with distinct server indices in preference order
     * (out[0] == lookup(hash)); returns how many were written (min(want, n)). */
    uint32_t (*preference)(const struct dist *d, uint64_t hash, uint32_t *out, uint32_t want);
    void (*destroy)(struct dist *d);
    /* Optional. Append the parameters that decide placement, one "name value"
     * line each, with defaults resolved (so "not given" and "the default
     * given" checksum alike): the ring's checksum covers them. 0 or -ENOMEM. */
    int  (*canonical)(const struct dist_params *p, struct buf *out);
    /* Optional. The exact share of the keyspace each server owns
     * (shares[nservers], summing to 1); without it the ring samples. */
    void (*shares)(const struct dist *d, double *shares);
};

/* Built distribution: the common header every implementation fills in. */
struct dist {
    const struct dist_ops *ops;
    enum dist_type type;
    uint32_t nservers;
    void *impl;                  /* the implementation's own state */
};

const char *dist_name(enum dist_type type);
int dist_from_name(const char *name, size_t len, enum dist_type *out);
const struct dist_ops *dist_ops_of(enum dist_type type);

/* Build/destroy through the vtable; dist_build returns 0 or -1 with err. */
int  dist_build(struct dist *d, enum dist_type type, const struct dist_params *p,
                const struct dist_server *servers, uint32_t n, char *err, size_t errlen);
void dist_destroy(struct dist *d);

static inline uint32_t dist_lookup(const struct dist *d, uint64_t hash)
{
    return d->ops->lookup(d, hash);
}

static inline uint32_t dist_preference(const struct dist *d, uint64_t hash, uint32_t *out,
                                       uint32_t want)
{
    return d->ops->preference(d, hash, out, want);
}

/*
 * Generic preference list for distributions without a natural walk: probe
 * lookup(mix(hash, i)) skipping repeats, then fill the rest in index order.
 * Shared by jump, anchor, random and rendezvous-free paths.
 */
uint32_t dist__preference_by_rehash(const struct dist *d, uint64_t hash, uint32_t *out,
                                    uint32_t want);

/*
 * Bounded loads (policy over any distribution): given the preference list
 * `pref[0..npref)` and live in-flight counts per server (load(ctx, i), read
 * by the caller however it likes: atomics in the proxy, an array in tests),
 * return the first server whose load is below cap = ceil(factor * mean),
 * mean = (sum of loads + 1) / nservers, i.e. counting the request being
 * placed; when none has room, pref[0].
 */
typedef uint32_t (*dist_load_fn)(void *ctx, uint32_t server);
uint32_t dist_bounded_pick(const uint32_t *pref, uint32_t npref, dist_load_fn load, void *ctx,
                           uint32_t nservers, double factor);

/* Implementations. */
extern const struct dist_ops dist_ketama_ops;
extern const struct dist_ops dist_modula_ops;
extern const struct dist_ops dist_random_ops;
extern const struct dist_ops dist_rendezvous_ops;
extern const struct dist_ops dist_jump_ops;
extern const struct dist_ops dist_maglev_ops;
extern const struct dist_ops dist_slots_ops;
extern const struct dist_ops dist_multiprobe_ops;
extern const struct dist_ops dist_anchor_ops;

/* twemproxy's server order: shorter identity first, then bytewise. */
int dist__ident_cmp(const struct dist_server *a, const struct dist_server *b);

/* The destroy of a scheme whose build keeps no state (d->impl stays NULL). */
void dist__destroy_stateless(struct dist *d);

#endif
