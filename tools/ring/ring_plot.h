/* Plots for ringleader-ring: self-contained SVG documents of a pool's balance and of what a change moves. */
#ifndef RL_RING_PLOT_H
#define RL_RING_PLOT_H

#include <stdint.h>
#include <stdio.h>

/* One server of a balance plot; shares are fractions (0..1). */
struct plot_server {
    const char *label;
    uint32_t    weight;
    double      fair;          /* weight / total weight */
    double      keyspace;      /* of the hash space (ring_shares) */
    double      sample;        /* of the sample keys */
};

struct plot_balance {
    const char *pool, *distribution, *hash;
    char        checksum[17];
    int         keyspace_exact;        /* 0: the keyspace shares are sampled estimates */
    const char *samples_what;          /* e.g. "1000000 keys key:<i>" */
    double      keyspace_max_over_mean, sample_max_over_mean;   /* relative to fair shares */
    const struct plot_server *servers;
    uint32_t    nservers;
};

/*
 * Write one SVG with a panel per pool: a bar per server for its keyspace share and, thinner
 * beside it, its share of the sample keys, against a mark at its fair share, with the
 * numbers. Names are escaped; the document needs no font, script or file of its own.
 * Returns 0, or -1 when writing failed (ferror(f)).
 */
int plot_balance_svg(FILE *f, const struct plot_balance *pools, uint32_t npools);

/* One cell of a change's from -> to matrix: sample keys whose owner went from old server
 * `from` to new server `to`. */
struct plot_flow {
    uint32_t from, to;
    uint64_t count;
};

struct plot_diff {
    const char *pool;
    char        old_checksum[17], new_checksum[17];
    uint64_t    old_epoch, new_epoch;
    double      moved, floor;          /* fractions of the keyspace */
    int         moved_exact;
    const char *const *old_labels;     /* [nold] */
    uint32_t    nold;
    const char *const *new_labels;     /* [nnew] */
    uint32_t    nnew;
    const int64_t *kept;               /* [nold]: the same server in the new ring, or -1 */
    const uint64_t *stayed;            /* [nold]: its sample keys that did not move */
    const struct plot_flow *flows;     /* every non-zero moved cell */
    uint32_t    nflows;
    uint64_t    samples;
    const char *samples_what;
};

/*
 * Write one SVG with a matrix per pool: a row per old server, a column per new server, each
 * cell shaded by the share of the sample keys that move that way (a server that stays has
 * its kept keys on the diagonal, in grey), with row and column totals and the moved
 * fraction against its floor. Returns 0 or -1 as plot_balance_svg.
 */
int plot_diff_svg(FILE *f, const struct plot_diff *pools, uint32_t npools);

#endif
